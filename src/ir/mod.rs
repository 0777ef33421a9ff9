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
    SpliceDecline, layout,
};
pub use lift::{IrError, Lifter};
pub use method::{
    EhClause, HeaderInfo, Instr, Label, Method, Operand, Prefix, Prefixes, RawSection, SwitchTable,
    UNBOUND,
};
pub use transforms::{
    EntryExit, EntryExitPlan, Insertion, NewLocals, Outcome, SkipReason, Transform, TransformFn,
    TransformOptions,
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

    /// Rewrites one body with `transform` and appends the new body to `out` (nothing is
    /// appended on error). An entry/exit transform is spliced into the body's bytes where the
    /// splice can carry out its plan; every other case goes through the IR (lift, edit, layout
    /// with relaxation, verify). Both give the same bytes (`tests/it/rewrite_corpus.rs` compares
    /// them on every body of the corpus).
    pub fn rewrite<R: Resolver + ?Sized>(
        &mut self,
        body: &Body<'_>,
        transform: Transform,
        transform_opts: &TransformOptions,
        layout_opts: &LayoutOptions,
        resolver: &R,
        out: &mut Vec<u8>,
    ) -> Result<(Outcome, LayoutInfo), RewriteError> {
        match self.splice(body, transform, transform_opts, layout_opts, resolver, out) {
            Ok(done) => Ok(done),
            Err(_) => self.rewrite_ir(body, transform, transform_opts, layout_opts, resolver, out),
        }
    }

    /// The IR path of [`Rewriter::rewrite`] alone, whatever the transform.
    pub fn rewrite_ir<R: Resolver + ?Sized>(
        &mut self,
        body: &Body<'_>,
        transform: Transform,
        transform_opts: &TransformOptions,
        layout_opts: &LayoutOptions,
        resolver: &R,
        out: &mut Vec<u8>,
    ) -> Result<(Outcome, LayoutInfo), RewriteError> {
        self.lifter.lift(body, &mut self.method)?;
        let outcome = transform.apply(&mut self.method, transform_opts)?;
        let info = self.layout.run(&self.method, layout_opts, resolver, out)?;
        Ok((outcome, info))
    }

    /// The byte-level path of [`Rewriter::rewrite`] alone: why it leaves the body to the IR
    /// path, with nothing appended, when it does.
    pub fn splice<R: Resolver + ?Sized>(
        &mut self,
        body: &Body<'_>,
        transform: Transform,
        transform_opts: &TransformOptions,
        layout_opts: &LayoutOptions,
        resolver: &R,
        out: &mut Vec<u8>,
    ) -> Result<(Outcome, LayoutInfo), SpliceDecline> {
        let which = transform.entry_exit().ok_or(SpliceDecline::Transform)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::NoResolver;

    /// `ldc.i4.0; brfalse.s +0; ret` as a tiny body.
    const BODY: [u8; 5] = [(4 << 2) | 2, 0x16, 0x2C, 0x00, 0x2A];

    #[test]
    fn the_rewriter_splices_where_the_plan_allows_and_says_why_not_elsewhere() {
        let body = Body::parse(&BODY).unwrap();
        let mut rw = Rewriter::new();
        let topts = TransformOptions::default();
        let keep = LayoutOptions::default();
        let (mut spliced, mut lifted) = (Vec::new(), Vec::new());
        let t = Transform::PrologueEpilogue;
        let a = rw.splice(&body, t, &topts, &keep, &NoResolver, &mut spliced);
        let b = rw.rewrite_ir(&body, t, &topts, &keep, &NoResolver, &mut lifted);
        assert_eq!(a.ok(), b.ok());
        assert_eq!(spliced, lifted);
        let mut out = Vec::new();
        let wrap = rw.splice(
            &body,
            Transform::WrapFinally,
            &topts,
            &keep,
            &NoResolver,
            &mut out,
        );
        assert_eq!(wrap, Err(SpliceDecline::Transform));
        // Every branch-form option is spliced, with the IR path's bytes and account.
        for branch_forms in [BranchForms::AllLong, BranchForms::ShortestWhereFits] {
            let forms = LayoutOptions {
                branch_forms,
                ..LayoutOptions::default()
            };
            let (mut spliced, mut lifted) = (Vec::new(), Vec::new());
            let a = rw.splice(&body, t, &topts, &forms, &NoResolver, &mut spliced);
            let b = rw.rewrite_ir(&body, t, &topts, &forms, &NoResolver, &mut lifted);
            assert_eq!(a.ok(), b.ok(), "{branch_forms:?}");
            assert!(a.is_ok(), "{branch_forms:?}: {a:?}");
            assert_eq!(spliced, lifted, "{branch_forms:?}");
        }
        let one = [(1 << 2) | 2, 0x2A];
        let one = Body::parse(&one).unwrap();
        assert_eq!(
            rw.splice(&one, t, &topts, &keep, &NoResolver, &mut out),
            Err(SpliceDecline::TooShort)
        );
        assert!(out.is_empty(), "a declined splice appends nothing");
        // Where it declines, `rewrite` takes the IR path and gives its bytes.
        let (mut via_rewrite, mut via_ir) = (Vec::new(), Vec::new());
        rw.rewrite(&one, t, &topts, &keep, &NoResolver, &mut via_rewrite)
            .unwrap();
        rw.rewrite_ir(&one, t, &topts, &keep, &NoResolver, &mut via_ir)
            .unwrap();
        assert_eq!(via_rewrite, via_ir);
        assert_eq!(Transform::by_name("prologue-epilogue"), Some(t));
        assert!(
            Transform::ALL
                .iter()
                .all(|&t| Transform::by_name(t.name()) == Some(t))
        );
    }
}
