//! The rewriter: an editable, label-based form of method bodies, edits on it, and a layout back
//! to bytes with branch relaxation to a fixpoint.
//!
//! ```text
//! Body ──Method::from_body──► Method ──edit / transforms──► Method ──layout──► body bytes
//! ```

pub mod check;
pub mod edit;
pub mod layout;
pub mod lift;
pub mod method;
pub mod transforms;

pub use edit::{BlockId, EditError, EditSummary, Editor, Regions, Targets};
pub use layout::{
    BranchForms, Layout, LayoutError, LayoutInfo, LayoutOptions, MaxStackPolicy, MaxStackUnknown,
    layout,
};
pub use lift::{IrError, Lifter};
pub use method::{
    EhClause, HeaderInfo, Instr, Label, Method, Operand, Prefix, Prefixes, RawSection, SwitchTable,
    UNBOUND,
};
pub use transforms::{
    EntryExit, NewLocals, Outcome, SkipReason, TRANSFORMS, TransformFn, TransformOptions,
};

use crate::body::Body;
use crate::verify::Resolver;

/// Why a body was not rewritten.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RewriteError {
    /// The body could not be lifted into the IR.
    #[error("cannot lift: {0}")]
    Lift(#[from] IrError),
    /// The transform left the method alone, and why.
    #[error("skipped: {0}")]
    Skipped(#[from] SkipReason),
    /// Layout failed, or the verifier refused the result.
    #[error("layout: {0}")]
    Layout(#[from] LayoutError),
}

/// Lift → transform → layout (→ verify), with buffers kept between bodies.
#[derive(Debug, Default)]
pub struct Rewriter {
    lifter: lift::Lifter,
    method: Method,
    layout: Layout,
}

impl Rewriter {
    /// A rewriter with empty buffers (they grow to the largest body it sees).
    pub fn new() -> Self {
        Self::default()
    }

    /// Rewrites one body and appends the new body to `out` (nothing is appended on error).
    pub fn rewrite<R: Resolver + ?Sized>(
        &mut self,
        body: &Body<'_>,
        transform: TransformFn,
        transform_opts: &TransformOptions,
        layout_opts: &LayoutOptions,
        resolver: &R,
        out: &mut Vec<u8>,
    ) -> Result<(Outcome, LayoutInfo), RewriteError> {
        self.lifter.lift(body, &mut self.method)?;
        let outcome = transform(&mut self.method, transform_opts)?;
        let info = self.layout.run(&self.method, layout_opts, resolver, out)?;
        Ok((outcome, info))
    }

    /// [`Rewriter::rewrite`] with the entry/exit transform `which`: the same result, got by
    /// splicing the new code into the body's bytes where that can be done (see
    /// [`layout`](mod@layout)), through the IR otherwise.
    pub fn rewrite_entry_exit<R: Resolver + ?Sized>(
        &mut self,
        body: &Body<'_>,
        which: EntryExit,
        transform_opts: &TransformOptions,
        layout_opts: &LayoutOptions,
        resolver: &R,
        out: &mut Vec<u8>,
    ) -> Result<(Outcome, LayoutInfo), RewriteError> {
        if let Some(done) =
            self.splice_entry_exit(body, which, transform_opts, layout_opts, resolver, out)
        {
            return Ok(done);
        }
        self.rewrite(
            body,
            which.transform(),
            transform_opts,
            layout_opts,
            resolver,
            out,
        )
    }

    /// The byte-level path of [`Rewriter::rewrite_entry_exit`] alone: `None`, with nothing
    /// appended, for a body it leaves to the IR path.
    pub fn splice_entry_exit<R: Resolver + ?Sized>(
        &mut self,
        body: &Body<'_>,
        which: EntryExit,
        transform_opts: &TransformOptions,
        layout_opts: &LayoutOptions,
        resolver: &R,
        out: &mut Vec<u8>,
    ) -> Option<(Outcome, LayoutInfo)> {
        self.layout
            .splice_entry_exit(body, which, transform_opts, layout_opts, resolver, out)
    }

    /// Lays out a method already in IR form.
    pub fn layout<R: Resolver + ?Sized>(
        &mut self,
        m: &Method,
        layout_opts: &LayoutOptions,
        resolver: &R,
        out: &mut Vec<u8>,
    ) -> Result<LayoutInfo, LayoutError> {
        self.layout.run(m, layout_opts, resolver, out)
    }
}
