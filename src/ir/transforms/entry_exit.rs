//! Code at method entry and before every return.

use super::{Outcome, SkipReason, TransformOptions, check_snippet, completes_tail_call};
use crate::ir::edit::{Regions, Targets};
use crate::ir::method::{Instr, Method};
use crate::opcode::Opcode;

/// The prologue IL before the first instruction. It goes outside any region the first
/// instruction starts, and branches to the first instruction (loops back to the start) keep
/// reaching it, so the prologue runs exactly once, with an empty stack.
pub fn prologue(m: &mut Method, opts: &TransformOptions) -> Result<Outcome, SkipReason> {
    check_snippet(&opts.prologue, false)?;
    if m.instrs.is_empty() || opts.prologue.is_empty() {
        return Ok(Outcome::Unchanged);
    }
    let mut ed = m.edit();
    ed.insert_before(0, &opts.prologue, Targets::StayOnOld, Regions::Outside)?;
    ed.commit()?;
    Ok(Outcome::Changed)
}

/// Every `ret` redirected to one epilogue block that runs the epilogue IL and returns. A return
/// value stays on the stack across the branch (the IL must be stack-neutral). A `ret` that
/// completes a `tail.` call is left alone, as are `jmp`s; a method without a `ret` is
/// unchanged.
pub fn epilogue(m: &mut Method, opts: &TransformOptions) -> Result<Outcome, SkipReason> {
    check_snippet(&opts.epilogue, true)?;
    let rets: Vec<usize> = (0..m.instrs.len())
        .filter(|&i| m.instrs[i].opcode == Opcode::Ret && !completes_tail_call(m, i))
        .collect();
    let Some(&last) = rets.last() else {
        return Ok(Outcome::Unchanged);
    };
    if opts.epilogue.is_empty() {
        return Ok(Outcome::Unchanged);
    }
    let n = m.instrs.len();
    let mut ed = m.edit();
    let entry = ed.new_label();
    let redirect = [Instr::branch(Opcode::Br_S, entry)];
    // When the code ends with a `ret`, the epilogue goes right before it: the last path falls
    // into it and branches to that `ret` reach it.
    let shared_ret = last == n - 1;
    let block = if shared_ret {
        ed.insert_before(last, &opts.epilogue, Targets::ToNew, Regions::Outside)?
    } else {
        let mut code = opts.epilogue.clone();
        code.push(Instr::op(Opcode::Ret));
        ed.append(&code)
    };
    ed.bind(block, entry)?;
    for &i in &rets {
        if !(shared_ret && i == last) {
            ed.replace(i, &redirect)?;
        }
    }
    ed.commit()?;
    Ok(Outcome::Changed)
}

/// [`prologue`] then [`epilogue`].
pub fn prologue_epilogue(m: &mut Method, opts: &TransformOptions) -> Result<Outcome, SkipReason> {
    check_snippet(&opts.prologue, false)?;
    check_snippet(&opts.epilogue, true)?;
    let a = prologue(m, opts)?;
    let b = epilogue(m, opts)?;
    Ok(a.or(b))
}
