//! Code at method entry and before every return.

use super::{
    Outcome, SkipReason, TransformFn, TransformOptions, apply_new_locals, check_snippet,
    completes_tail_call,
};
use crate::ir::edit::{Editor, Regions, Targets};
use crate::ir::method::Method;
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

/// The epilogue IL before every `ret`, each with a copy of its own: branches to a `ret` reach
/// its epilogue, and the return value stays on the stack across it (the IL must be
/// stack-neutral). No path joins another on the way out, so a return value keeps the type it
/// had (a shared epilogue would merge the types of every returned value, and `ret` of the
/// merge — `object` where two classes meet — is not what the signature declares), and no
/// local is needed (but by exit code that reads the return value: with `opts.store_return` it
/// is copied to `opts.return_local` first, and the method gets `opts.new_locals`). A `ret` that completes a `tail.` call is left alone, as are `jmp`s; a
/// method without a `ret` is unchanged.
pub fn epilogue(m: &mut Method, opts: &TransformOptions) -> Result<Outcome, SkipReason> {
    check_snippet(&opts.epilogue, true)?;
    let mut ed = m.edit();
    let changed = plan_epilogue(&mut ed, opts)?;
    ed.commit()?;
    if changed {
        apply_new_locals(m, opts);
    }
    Ok(Outcome::from(changed))
}

/// Records the epilogue edits; returns whether there are any.
fn plan_epilogue(ed: &mut Editor<'_>, opts: &TransformOptions) -> Result<bool, SkipReason> {
    if opts.epilogue.is_empty() {
        return Ok(false);
    }
    let code = opts.epilogue_code();
    let mut changed = false;
    for i in 0..ed.method().instrs.len() {
        let m = ed.method();
        if m.instrs[i].opcode == Opcode::Ret && !completes_tail_call(m, i) {
            ed.insert_before(i, &code, Targets::ToNew, Regions::Outside)?;
            changed = true;
        }
    }
    Ok(changed)
}

/// [`prologue`] then [`epilogue`], in one edit when they do not meet at instruction 0.
pub fn prologue_epilogue(m: &mut Method, opts: &TransformOptions) -> Result<Outcome, SkipReason> {
    check_snippet(&opts.prologue, false)?;
    check_snippet(&opts.epilogue, true)?;
    // A body that starts with a `ret` gets both before instruction 0, with different choices:
    // two edits in sequence.
    if m.instrs.first().is_some_and(|i| i.opcode == Opcode::Ret) {
        let a = prologue(m, opts)?;
        let b = epilogue(m, opts)?;
        return Ok(a.or(b));
    }
    let mut ed = m.edit();
    let a = plan_prologue(&mut ed, opts)?;
    let b = plan_epilogue(&mut ed, opts)?;
    ed.commit()?;
    if b {
        apply_new_locals(m, opts);
    }
    Ok(Outcome::from(a || b))
}

/// One of the entry/exit transforms, for the rewriter's byte-level path
/// ([`Rewriter::rewrite_entry_exit`](crate::ir::Rewriter::rewrite_entry_exit)), which makes
/// the same edits as the transform without lifting the body.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EntryExit {
    /// [`prologue`].
    Prologue,
    /// [`epilogue`].
    Epilogue,
    /// [`prologue_epilogue`].
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

    /// Whether these edits insert the prologue.
    pub fn prologue(self) -> bool {
        self != EntryExit::Epilogue
    }

    /// Whether these edits insert the epilogue.
    pub fn epilogue(self) -> bool {
        self != EntryExit::Prologue
    }

    /// Whether the snippets these edits insert are ones the transform accepts.
    pub(crate) fn snippets_ok(self, opts: &TransformOptions) -> bool {
        (!self.prologue() || check_snippet(&opts.prologue, false).is_ok())
            && (!self.epilogue() || check_snippet(&opts.epilogue, true).is_ok())
    }
}
