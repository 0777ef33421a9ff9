//! Transforms that exercise branch relaxation: padding and branch-form changes.

use super::{Outcome, SkipReason, TransformOptions, completes_tail_call};
use crate::ir::edit::{Regions, Targets};
use crate::ir::method::{Instr, Method};
use crate::opcode::Opcode;

/// A `nop` before every instruction, except the `ret` that completes a `tail.` call. Branches
/// to an instruction reach its `nop`, and a region that starts at an instruction starts at its
/// `nop`: every distance grows, region boundaries move, and short branches are pushed out of
/// range.
pub fn nop_pad(m: &mut Method, _: &TransformOptions) -> Result<Outcome, SkipReason> {
    let n = m.instrs.len();
    let nop = [Instr::op(Opcode::Nop)];
    let keep: Vec<bool> = (0..n).map(|i| completes_tail_call(m, i)).collect();
    let mut ed = m.edit();
    for (i, &keep) in keep.iter().enumerate() {
        if !keep {
            ed.insert_before(i, &nop, Targets::ToNew, Regions::Inside)?;
        }
    }
    ed.commit()?;
    Ok(Outcome::from(n > 0))
}

/// Every short branch (and `leave.s`) in its long form.
pub fn widen(m: &mut Method, _: &TransformOptions) -> Result<Outcome, SkipReason> {
    Ok(set_forms(m, Opcode::long_form))
}

/// Every long branch asks for its short form; layout (keeping forms) widens those whose
/// displacement does not fit.
pub fn shorten(m: &mut Method, _: &TransformOptions) -> Result<Outcome, SkipReason> {
    Ok(set_forms(m, Opcode::short_form))
}

fn set_forms(m: &mut Method, form: fn(Opcode) -> Opcode) -> Outcome {
    let mut changed = false;
    for ins in &mut m.instrs {
        if ins.is_branch() {
            let op = form(ins.opcode);
            changed |= op != ins.opcode;
            ins.opcode = op;
        }
    }
    Outcome::from(changed)
}
