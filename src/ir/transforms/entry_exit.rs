//! Code at method entry and before every return.

use super::{
    Outcome, SkipReason, Transform, TransformOptions, apply_new_locals, check_snippet,
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
    let Some(at) = EntryExit::Prologue.plan(opts).prologue else {
        return Ok(false);
    };
    if ed.method().instrs.is_empty() {
        return Ok(false);
    }
    ed.insert_before(0, &opts.prologue, at.targets, at.regions)?;
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
    let Some(at) = EntryExit::Epilogue.plan(opts).epilogue else {
        return Ok(false);
    };
    let code = opts.epilogue_code();
    let mut changed = false;
    for i in 0..ed.method().instrs.len() {
        let m = ed.method();
        if m.instrs[i].opcode == Opcode::Ret
            && EntryExitPlan::epilogue_before(completes_tail_call(m, i))
        {
            ed.insert_before(i, &code, at.targets, at.regions)?;
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

/// Where a block of inserted code goes relative to the instruction it is inserted before.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Insertion {
    /// Where branches to that instruction go.
    pub targets: Targets,
    /// Which side of a region boundary at that instruction the code lands on.
    pub regions: Regions,
}

/// The entry/exit edits as a plan: what goes where, with which choices. The IR transforms
/// carry it out through the [`Editor`]; the byte-level splice
/// ([`Rewriter::rewrite`](crate::ir::Rewriter::rewrite)) carries out the same plan on the
/// body's bytes, or declines when it holds a choice the splice does not implement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EntryExitPlan {
    /// The prologue, before instruction 0: branches to the start keep reaching the old first
    /// instruction (a loop back to IL_0000 does not run the prologue again), and regions that
    /// start there still do (the prologue runs once, outside them, with an empty stack).
    pub prologue: Option<Insertion>,
    /// An epilogue before each `ret` [`EntryExitPlan::epilogue_before`] picks: branches to
    /// the `ret` reach its epilogue, which stays outside regions that start at the `ret`.
    pub epilogue: Option<Insertion>,
}

impl EntryExitPlan {
    /// Whether a `ret` gets an epilogue: every one but a `ret` that completes a `tail.` call,
    /// which must stay right after it (III.2.4).
    pub fn epilogue_before(completes_tail_call: bool) -> bool {
        !completes_tail_call
    }
}

/// One of the entry/exit transforms: the ones the rewriter can also run on a body's bytes,
/// making the same edits without lifting the body.
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

    /// The transform that makes these edits.
    pub fn transform(self) -> Transform {
        match self {
            EntryExit::Prologue => Transform::Prologue,
            EntryExit::Epilogue => Transform::Epilogue,
            EntryExit::PrologueEpilogue => Transform::PrologueEpilogue,
        }
    }

    /// The plan of these edits with `opts`' code: a prologue and an epilogue when this
    /// transform inserts them and the code is not empty.
    pub fn plan(self, opts: &TransformOptions) -> EntryExitPlan {
        EntryExitPlan {
            prologue: (self.prologue() && !opts.prologue.is_empty()).then_some(Insertion {
                targets: Targets::StayOnOld,
                regions: Regions::Outside,
            }),
            epilogue: (self.epilogue() && !opts.epilogue.is_empty()).then_some(Insertion {
                targets: Targets::ToNew,
                regions: Regions::Outside,
            }),
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
