//! Library transforms, by the names the CLI uses. Each edits a [`Method`] in place and says
//! whether anything changed, or why it skipped the method (leaving it unchanged).

mod branches;
mod entry_exit;
mod from_image;
mod probe_args;
mod wrap;

pub use branches::{nop_pad, shorten, widen};
pub use entry_exit::{EntryExit, EntryExitPlan, Insertion, epilogue, prologue, prologue_epilogue};
pub use from_image::{
    CallTokenError, call_snippet, check_call_token, find_exception_type, locals_plus_one,
    return_type_bytes, return_value_bytes, spare_return_local,
};
pub use probe_args::{CoreTypes, arguments_array, as_object, fits_object};
pub use wrap::{wrap_catch, wrap_finally};

use super::edit::EditError;
use super::method::{Instr, Method, Operand};
use crate::opcode::{Flow, Opcode, Pops, Pushes};

/// What a transform did to a method it did not skip.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The method was edited.
    Changed,
    /// Nothing applied to the method (e.g. an epilogue for a method without a `ret`).
    Unchanged,
}

impl Outcome {
    fn from(changed: bool) -> Outcome {
        if changed {
            Outcome::Changed
        } else {
            Outcome::Unchanged
        }
    }

    fn or(self, other: Outcome) -> Outcome {
        Outcome::from(self == Outcome::Changed || other == Outcome::Changed)
    }
}

/// Why a transform left a method alone.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SkipReason {
    /// Whether the method returns a value was not given ([`TransformOptions::returns_void`]).
    #[error("the method's return type is needed (is it void?) and was not given")]
    NeedsSignature,
    /// A non-void method needs a local to hold its return value and none was given.
    #[error("the method returns a value: wrapping it needs a local to hold it (none given)")]
    NeedsNewLocal,
    /// A wrap would put a `tail.` call inside the new protected region.
    #[error(
        "instruction {index}: a tail. call cannot be inside a protected region (TailCallInsideER)"
    )]
    TailCallInsideER {
        /// The instruction's index.
        index: usize,
    },
    /// A wrap would put a `jmp` inside the new protected region.
    #[error("instruction {index}: jmp cannot be inside a protected region")]
    JmpInsideER {
        /// The instruction's index.
        index: usize,
    },
    /// A wrap would make a `localloc` in a handler (never allowed there) part of a new region.
    #[error("instruction {index}: localloc inside a handler (III.3.47)")]
    LocallocInHandler {
        /// The instruction's index.
        index: usize,
    },
    /// The code to insert is not straight-line, stack-neutral code.
    #[error("snippet instruction {index} ({opcode}): {reason}")]
    UnsupportedSnippet {
        /// The snippet instruction's index.
        index: usize,
        /// Its opcode.
        opcode: Opcode,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// `wrap-catch` was given no type to catch.
    #[error(
        "wrap-catch needs the exception type's token (TypeDef, TypeRef or TypeSpec), got {token:#010x}"
    )]
    NoCatchType {
        /// The token given.
        token: u32,
    },
    /// The method is a probe the inserted code calls: instrumented, it would call itself
    /// without end.
    #[error("the method is the probe the inserted code calls: it would call itself without end")]
    ProbeItself,
    /// The editor refused the edits.
    #[error(transparent)]
    Edit(#[from] EditError),
}

impl SkipReason {
    /// A short stable name for counting skips.
    pub fn name(&self) -> &'static str {
        match self {
            SkipReason::NeedsSignature => "NeedsSignature",
            SkipReason::NeedsNewLocal => "NeedsNewLocal",
            SkipReason::TailCallInsideER { .. } => "TailCallInsideER",
            SkipReason::JmpInsideER { .. } => "JmpInsideER",
            SkipReason::LocallocInHandler { .. } => "LocallocInHandler",
            SkipReason::UnsupportedSnippet { .. } => "UnsupportedSnippet",
            SkipReason::NoCatchType { .. } => "NoCatchType",
            SkipReason::ProbeItself => "ProbeItself",
            SkipReason::Edit(_) => "Edit",
        }
    }
}

/// Inputs of the transforms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransformOptions {
    /// IL run at method entry with an empty stack (`prologue`). Straight-line code without
    /// branches or prefixes.
    pub prologue: Vec<Instr>,
    /// IL run before every return (`epilogue`); must be stack-neutral, since a return value
    /// stays on the stack across it. Straight-line code without branches or prefixes.
    pub epilogue: Vec<Instr>,
    /// Class token of the exception type `wrap-catch` catches.
    pub catch_type: u32,
    /// Whether the method returns void, when known (from its signature).
    pub returns_void: Option<bool>,
    /// A local that holds the return value of a non-void method: where the wrap transforms
    /// keep it across the `leave`, and where an epilogue that passes it to a probe stores it.
    pub return_local: Option<u16>,
    /// Before each epilogue, copy a non-void method's return value into `return_local`
    /// (`dup; stloc`), for epilogue code that reads it (an exit probe taking the return
    /// value). See [`TransformOptions::epilogue_code`].
    pub store_return: bool,
    /// The method's new local signature, when `return_local` is a local added for the
    /// transform (see [`crate::image::emit`]): the transform that uses the local gives the
    /// method this StandAloneSig token, and sets InitLocals when asked.
    pub new_locals: Option<NewLocals>,
    /// IL the wrap transforms run at method entry, before the new try (a probe call).
    /// Straight-line code that leaves the stack as it found it.
    pub wrap_entry: Vec<Instr>,
    /// IL `wrap-finally` runs in its finally handler, so on every exit, exceptional ones
    /// included (a probe call). Straight-line code that leaves the stack as it found it.
    pub wrap_exit: Vec<Instr>,
}

impl TransformOptions {
    /// The code that goes before each `ret`: `epilogue`, after `dup; stloc return_local` when
    /// `store_return` asks for the value and the method returns one.
    pub fn epilogue_code(&self) -> std::borrow::Cow<'_, [Instr]> {
        match (self.store_return, self.returns_void, self.return_local) {
            (true, Some(false), Some(local)) if !self.epilogue.is_empty() => {
                let mut code = Vec::with_capacity(self.epilogue.len() + 2);
                code.push(Instr::op(Opcode::Dup));
                code.push(stloc(local));
                code.extend_from_slice(&self.epilogue);
                std::borrow::Cow::Owned(code)
            }
            _ => std::borrow::Cow::Borrowed(&self.epilogue),
        }
    }
}

/// A local signature made for a transform: the method's own locals and one more.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NewLocals {
    /// The StandAloneSig token of the new signature.
    pub local_sig: u32,
    /// Set InitLocals (the method had no locals, so nothing depended on the flag being clear,
    /// and verifiable code with locals needs it).
    pub init_locals: bool,
}

impl Default for TransformOptions {
    fn default() -> Self {
        TransformOptions {
            prologue: vec![Instr::op(Opcode::Nop)],
            epilogue: vec![Instr::op(Opcode::Nop)],
            catch_type: 0,
            returns_void: None,
            return_local: None,
            store_return: false,
            new_locals: None,
            wrap_entry: Vec::new(),
            wrap_exit: Vec::new(),
        }
    }
}

/// A transform as a function: what [`Transform::Custom`] runs.
pub type TransformFn = fn(&mut Method, &TransformOptions) -> Result<Outcome, SkipReason>;

/// Decode → IR → layout, nothing edited.
pub fn identity(_: &mut Method, _: &TransformOptions) -> Result<Outcome, SkipReason> {
    Ok(Outcome::Unchanged)
}

/// A transform: one of the library's, by the name the CLI uses, or the caller's own. It says
/// which paths of [`Rewriter::rewrite`](crate::ir::Rewriter::rewrite) can run it: every one
/// runs on the IR (lift, edit, layout); the entry/exit ones also on the body's bytes, where
/// the splice executes the same plan ([`EntryExit::plan`]).
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub enum Transform {
    /// [`identity`]: lift and lay out again, nothing edited.
    Identity,
    /// [`nop_pad`].
    NopPad,
    /// [`widen`].
    Widen,
    /// [`shorten`].
    Shorten,
    /// [`prologue`].
    Prologue,
    /// [`epilogue`].
    Epilogue,
    /// [`prologue_epilogue`].
    PrologueEpilogue,
    /// [`wrap_finally`].
    WrapFinally,
    /// [`wrap_catch`].
    WrapCatch,
    /// The caller's own edit of the IR, under a name for reports.
    Custom {
        /// How reports name it.
        name: &'static str,
        /// The edit.
        apply: TransformFn,
    },
}

impl Transform {
    /// The library's transforms, in the order the CLI lists them.
    pub const ALL: [Transform; 9] = [
        Transform::Identity,
        Transform::NopPad,
        Transform::Widen,
        Transform::Shorten,
        Transform::Prologue,
        Transform::Epilogue,
        Transform::PrologueEpilogue,
        Transform::WrapFinally,
        Transform::WrapCatch,
    ];

    /// The CLI name (`prologue-epilogue`), or the custom transform's name.
    pub fn name(self) -> &'static str {
        match self {
            Transform::Identity => "identity",
            Transform::NopPad => "nop-pad",
            Transform::Widen => "widen",
            Transform::Shorten => "shorten",
            Transform::Prologue => "prologue",
            Transform::Epilogue => "epilogue",
            Transform::PrologueEpilogue => "prologue-epilogue",
            Transform::WrapFinally => "wrap-finally",
            Transform::WrapCatch => "wrap-catch",
            Transform::Custom { name, .. } => name,
        }
    }

    /// The library's transform with this CLI name.
    pub fn by_name(name: &str) -> Option<Transform> {
        Transform::ALL.into_iter().find(|t| t.name() == name)
    }

    /// The edit on the IR.
    pub fn function(self) -> TransformFn {
        match self {
            Transform::Identity => identity,
            Transform::NopPad => nop_pad,
            Transform::Widen => widen,
            Transform::Shorten => shorten,
            Transform::Prologue => prologue,
            Transform::Epilogue => epilogue,
            Transform::PrologueEpilogue => prologue_epilogue,
            Transform::WrapFinally => wrap_finally,
            Transform::WrapCatch => wrap_catch,
            Transform::Custom { apply, .. } => apply,
        }
    }

    /// Applies the edit to `m` (the IR path).
    pub fn apply(self, m: &mut Method, opts: &TransformOptions) -> Result<Outcome, SkipReason> {
        self.function()(m, opts)
    }

    /// The entry/exit edits this transform makes, when the byte-level splice can run it too.
    pub fn entry_exit(self) -> Option<EntryExit> {
        match self {
            Transform::Prologue => Some(EntryExit::Prologue),
            Transform::Epilogue => Some(EntryExit::Epilogue),
            Transform::PrologueEpilogue => Some(EntryExit::PrologueEpilogue),
            Transform::Identity
            | Transform::NopPad
            | Transform::Widen
            | Transform::Shorten
            | Transform::WrapFinally
            | Transform::WrapCatch
            | Transform::Custom { .. } => None,
        }
    }

    /// Whether it wraps the body in a new protected region (`wrap-finally`, `wrap-catch`).
    pub fn wraps(self) -> bool {
        matches!(self, Transform::WrapFinally | Transform::WrapCatch)
    }

    /// Whether it runs entry code: [`TransformOptions::prologue`] (`prologue`,
    /// `prologue-epilogue`) or [`TransformOptions::wrap_entry`] (`wrap-finally`, `wrap-catch`).
    /// A custom transform may read any option: true.
    pub fn runs_entry_code(self) -> bool {
        match self {
            Transform::Prologue
            | Transform::PrologueEpilogue
            | Transform::WrapFinally
            | Transform::WrapCatch
            | Transform::Custom { .. } => true,
            Transform::Identity
            | Transform::NopPad
            | Transform::Widen
            | Transform::Shorten
            | Transform::Epilogue => false,
        }
    }

    /// Whether it runs exit code: [`TransformOptions::epilogue`] before each `ret`
    /// (`epilogue`, `prologue-epilogue`) or [`TransformOptions::wrap_exit`] in the finally
    /// handler (`wrap-finally`; the handler of `wrap-catch` only rethrows). A custom transform
    /// may read any option: true.
    pub fn runs_exit_code(self) -> bool {
        match self {
            Transform::Epilogue
            | Transform::PrologueEpilogue
            | Transform::WrapFinally
            | Transform::Custom { .. } => true,
            Transform::Identity
            | Transform::NopPad
            | Transform::Widen
            | Transform::Shorten
            | Transform::Prologue
            | Transform::WrapCatch => false,
        }
    }

    /// Whether exit code goes before each `ret` (rather than in a handler).
    pub fn epilogue_before_ret(self) -> bool {
        self.entry_exit().is_some_and(EntryExit::epilogue)
    }
}

impl PartialEq for Transform {
    /// Library transforms by kind; custom ones by name (function addresses are not stable
    /// identities).
    fn eq(&self, other: &Transform) -> bool {
        self.name() == other.name()
            && matches!(self, Transform::Custom { .. }) == matches!(other, Transform::Custom { .. })
    }
}

impl Eq for Transform {}

/// Checks that a snippet is straight-line code that can be inserted anywhere: no branches,
/// switches, prefixes or block-ending instructions, operands that fit, and (for `neutral`) a
/// net stack effect of zero that never dips below the starting depth, as far as fixed stack
/// effects tell (calls are taken on trust; the verifier checks the result).
fn check_snippet(code: &[Instr], neutral: bool) -> Result<(), SkipReason> {
    let mut depth: i64 = 0;
    let mut unknown = false;
    for (index, ins) in code.iter().enumerate() {
        let fail = |reason| {
            Err(SkipReason::UnsupportedSnippet {
                index,
                opcode: ins.opcode,
                reason,
            })
        };
        // One table lookup serves every check below.
        let info = ins.opcode.info();
        if !ins.prefixes.is_empty() {
            return fail("prefixes are not supported in snippets");
        }
        if matches!(ins.operand, Operand::Target(_) | Operand::Switch(_))
            || info.operand.is_branch()
        {
            return fail("branches are not supported in snippets");
        }
        if !ins.operand_fits_kind(info.operand) {
            return fail("operand does not fit the opcode");
        }
        if !matches!(info.flow, Flow::Next | Flow::Call | Flow::Break) {
            return fail("snippets must fall through");
        }
        match (info.pops, info.pushes) {
            (Pops::Fixed(p), Pushes::Fixed(u)) => {
                depth -= p as i64;
                if neutral && !unknown && depth < 0 {
                    return fail("pops a value the snippet did not push");
                }
                depth += u as i64;
            }
            // A call's effect depends on its signature, which only the resolver knows: from
            // here on the verifier, which checks every rewrite, judges the balance.
            _ => unknown = true,
        }
    }
    if neutral && !unknown && depth != 0 {
        return Err(SkipReason::UnsupportedSnippet {
            index: code.len().saturating_sub(1),
            opcode: code.last().map_or(Opcode::Nop, |i| i.opcode),
            reason: "the snippet is not stack-neutral",
        });
    }
    Ok(())
}

/// `ldloc` of local `index`, in its shortest form.
pub(crate) fn ldloc(index: u16) -> Instr {
    local_op(
        [
            Opcode::Ldloc_0,
            Opcode::Ldloc_1,
            Opcode::Ldloc_2,
            Opcode::Ldloc_3,
        ],
        Opcode::Ldloc_S,
        Opcode::Ldloc,
        index,
    )
}

/// `stloc` to local `index`, in its shortest form.
pub(crate) fn stloc(index: u16) -> Instr {
    local_op(
        [
            Opcode::Stloc_0,
            Opcode::Stloc_1,
            Opcode::Stloc_2,
            Opcode::Stloc_3,
        ],
        Opcode::Stloc_S,
        Opcode::Stloc,
        index,
    )
}

fn local_op(short: [Opcode; 4], s: Opcode, long: Opcode, index: u16) -> Instr {
    match index {
        0..=3 => Instr::op(short[index as usize]),
        4..=255 => Instr::new(s, Operand::Var(index)),
        _ => Instr::new(long, Operand::Var(index)),
    }
}

/// Gives the method the local signature `opts.new_locals` names, when there is one: the
/// transform uses a local added for it.
fn apply_new_locals(m: &mut Method, opts: &TransformOptions) {
    if let Some(new) = opts.new_locals {
        m.header.local_sig = new.local_sig;
        m.header.init_locals |= new.init_locals;
    }
}

/// Whether instruction `i` is a `ret` that completes a `tail.` call (and must stay right after
/// it, III.2.4).
fn completes_tail_call(m: &Method, i: usize) -> bool {
    i > 0
        && m.instrs[i].opcode == Opcode::Ret
        && m.prefixes_of(&m.instrs[i - 1])
            .iter()
            .any(|p| p.opcode == Opcode::Tail)
}
