//! Code at method entry and before every return.

use super::{
    Outcome, SkipReason, TransformFn, TransformOptions, check_snippet, completes_tail_call,
};
use crate::ir::edit::{Editor, Regions, Targets};
use crate::ir::method::{Instr, Method};
use crate::opcode::Opcode;

/// The prologue IL before the first instruction. It goes outside any region the first
/// instruction starts, and branches to the first instruction (loops back to the start) keep
/// reaching it, so the prologue runs exactly once, with an empty stack.
pub fn prologue(m: &mut Method, opts: &TransformOptions) -> Result<Outcome, SkipReason> {
    check_snippet(&opts.prologue, false)?;
    let mut ed = m.edit();
    let changed = plan_prologue(&mut ed, opts)?;
    ed.commit()?;
    Ok(Outcome::from(changed))
}

fn plan_prologue(ed: &mut Editor<'_>, opts: &TransformOptions) -> Result<bool, SkipReason> {
    if ed.method().instrs.is_empty() || opts.prologue.is_empty() {
        return Ok(false);
    }
    ed.insert_before(0, &opts.prologue, Targets::StayOnOld, Regions::Outside)?;
    Ok(true)
}

/// Every `ret` redirected to one epilogue block that runs the epilogue IL and returns. A return
/// value stays on the stack across the branch (the IL must be stack-neutral). A `ret` that
/// completes a `tail.` call is left alone, as are `jmp`s; a method without a `ret` is
/// unchanged.
pub fn epilogue(m: &mut Method, opts: &TransformOptions) -> Result<Outcome, SkipReason> {
    check_snippet(&opts.epilogue, true)?;
    let mut ed = m.edit();
    let changed = plan_epilogue(&mut ed, opts)?;
    ed.commit()?;
    Ok(Outcome::from(changed))
}

/// Records the epilogue edits; returns whether there are any, and whether the epilogue goes
/// before instruction 0 (a body that is a single `ret`).
fn plan_epilogue(ed: &mut Editor<'_>, opts: &TransformOptions) -> Result<bool, SkipReason> {
    let m = ed.method();
    let n = m.instrs.len();
    // From the end: most bodies end with their last `ret`.
    let Some(last) = (0..n)
        .rev()
        .find(|&i| m.instrs[i].opcode == Opcode::Ret && !completes_tail_call(m, i))
    else {
        return Ok(false);
    };
    if opts.epilogue.is_empty() {
        return Ok(false);
    }
    let entry = ed.new_label();
    // When the code ends with a `ret`, the epilogue goes right before it: the last path falls
    // into it and branches to that `ret` reach it.
    let shared_ret = last == n - 1;
    let block = if shared_ret {
        ed.insert_before(last, &opts.epilogue, Targets::ToNew, Regions::Outside)?
    } else {
        let mut code = Vec::with_capacity(opts.epilogue.len() + 1);
        code.extend_from_slice(&opts.epilogue);
        code.push(Instr::op(Opcode::Ret));
        ed.append(&code)
    };
    ed.bind(block, entry)?;
    let redirect = [Instr::branch(Opcode::Br_S, entry)];
    let mut i = 0;
    while let Some(k) = ed.method().instrs[i..last]
        .iter()
        .position(|ins| ins.opcode == Opcode::Ret)
    {
        i += k;
        if !completes_tail_call(ed.method(), i) {
            ed.replace(i, &redirect)?;
        }
        i += 1;
    }
    if !shared_ret {
        ed.replace(last, &redirect)?;
    }
    Ok(true)
}

/// [`prologue`] then [`epilogue`], in one edit when they do not meet at instruction 0.
pub fn prologue_epilogue(m: &mut Method, opts: &TransformOptions) -> Result<Outcome, SkipReason> {
    check_snippet(&opts.prologue, false)?;
    check_snippet(&opts.epilogue, true)?;
    // A body that is a lone `ret` gets both before instruction 0, with different choices:
    // two edits in sequence.
    if m.instrs.len() == 1 {
        let a = prologue(m, opts)?;
        let b = epilogue(m, opts)?;
        return Ok(a.or(b));
    }
    let mut ed = m.edit();
    let a = plan_prologue(&mut ed, opts)?;
    let b = plan_epilogue(&mut ed, opts)?;
    ed.commit()?;
    Ok(Outcome::from(a || b))
}

/// One of the entry/exit transforms, for the rewriter's byte-level path
/// ([`Rewriter::rewrite_entry_exit`](crate::ir::Rewriter::rewrite_entry_exit)), which makes
/// the same edits as the transform without lifting the body.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EntryExit {
    Prologue,
    Epilogue,
    PrologueEpilogue,
}

impl EntryExit {
    /// By CLI name: `prologue`, `epilogue` or `prologue-epilogue`.
    pub fn by_name(name: &str) -> Option<EntryExit> {
        match name {
            "prologue" => Some(EntryExit::Prologue),
            "epilogue" => Some(EntryExit::Epilogue),
            "prologue-epilogue" => Some(EntryExit::PrologueEpilogue),
            _ => None,
        }
    }

    /// The IR transform that makes these edits.
    pub fn transform(self) -> TransformFn {
        match self {
            EntryExit::Prologue => prologue,
            EntryExit::Epilogue => epilogue,
            EntryExit::PrologueEpilogue => prologue_epilogue,
        }
    }

    pub fn prologue(self) -> bool {
        self != EntryExit::Epilogue
    }

    pub fn epilogue(self) -> bool {
        self != EntryExit::Prologue
    }

    /// Whether the snippets these edits insert are ones the transform accepts.
    pub(crate) fn snippets_ok(self, opts: &TransformOptions) -> bool {
        (!self.prologue() || check_snippet(&opts.prologue, false).is_ok())
            && (!self.epilogue() || check_snippet(&opts.epilogue, true).is_ok())
    }
}
