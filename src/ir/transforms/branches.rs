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
    let keep: Vec<bool> = (0..n)
        .map(|i| completes_tail_call(m, i) || completes_delegate_construction(m, i))
        .collect();
    let mut ed = m.edit();
    for (i, &keep) in keep.iter().enumerate() {
        if !keep {
            ed.insert_before(i, &nop, Targets::ToNew, Regions::Inside)?;
        }
    }
    ed.commit()?;
    Ok(Outcome::from(n > 0))
}

/// Whether instruction `i` continues a delegate-construction sequence (III.6.4: `ldftn; newobj`
/// or `dup; ldvirtftn; newobj`), which verifiers accept only unbroken.
fn completes_delegate_construction(m: &Method, i: usize) -> bool {
    let op = |k: usize| m.instrs.get(k).map(|ins| ins.opcode);
    let Some(prev) = i.checked_sub(1) else {
        return false;
    };
    match op(i) {
        Some(Opcode::Newobj) => matches!(op(prev), Some(Opcode::Ldftn | Opcode::Ldvirtftn)),
        Some(Opcode::Ldvirtftn) => op(prev) == Some(Opcode::Dup),
        // No other opcode continues the sequence.
        _ => false,
    }
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
