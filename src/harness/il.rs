//! Method bodies the harness writes by hand (a generated program's runners and callees, the
//! execution server's host): instructions pushed in order, labels bound where they fall, laid
//! out by [`ir::layout`](crate::ir::layout) with the MaxStack each body declares.

use crate::image::tables::Token;
use crate::ir::{
    BranchForms, EhClause, HeaderInfo, Instr, Label, LayoutError, LayoutOptions, MaxStackPolicy,
    Method, Operand,
};
use crate::opcode::Opcode;
use crate::verify::SyntheticResolver;

/// Lays `m` out with its declared MaxStack and the given branch forms, unverified (the caller
/// checks the whole image).
pub(crate) fn lay_out(m: &Method, forms: BranchForms) -> Result<Vec<u8>, LayoutError> {
    let mut out = Vec::new();
    let opts = LayoutOptions {
        branch_forms: forms,
        max_stack: MaxStackPolicy::Declared,
        verify: false,
    };
    crate::ir::layout(m, &opts, &SyntheticResolver::new(), &mut out)?;
    Ok(out)
}

/// Instructions of a harness-made method.
pub(crate) struct Code(pub(crate) Method);

impl Code {
    /// A body with `max_stack` and the locals of `local_sig` (none when its value is 0; locals
    /// are zeroed when there are some).
    pub(crate) fn new(max_stack: u16, local_sig: Token) -> Self {
        Code(Method::new(HeaderInfo {
            max_stack,
            init_locals: local_sig.0 != 0,
            local_sig: local_sig.0,
        }))
    }
    pub(crate) fn op(&mut self, op: Opcode) -> &mut Self {
        self.0.push(Instr::op(op));
        self
    }
    pub(crate) fn tok(&mut self, op: Opcode, t: Token) -> &mut Self {
        self.0.push(Instr::new(op, Operand::Token(t.0)));
        self
    }
    pub(crate) fn i4(&mut self, v: i32) -> &mut Self {
        self.0.push(Instr::new(Opcode::Ldc_I4, Operand::Int32(v)));
        self
    }
    pub(crate) fn var(&mut self, op: Opcode, k: u16) -> &mut Self {
        self.0.push(Instr::new(op, Operand::Var(k)));
        self
    }
    pub(crate) fn br(&mut self, op: Opcode, l: Label) -> &mut Self {
        self.0.push(Instr::new(op, Operand::Target(l)));
        self
    }
    pub(crate) fn bind(&mut self, l: Label) -> &mut Self {
        self.0.bind(l);
        self
    }
    pub(crate) fn label(&mut self) -> Label {
        self.0.new_label()
    }
    /// A `catch` clause of `class` over `[try_start, try_end)` with its handler
    /// `[handler_start, handler_end)`.
    pub(crate) fn catch(
        &mut self,
        class: Token,
        try_start: Label,
        try_end: Label,
        handler_start: Label,
        handler_end: Label,
    ) -> &mut Self {
        self.0.clauses.push(EhClause {
            kind: crate::body::ClauseKind::Catch,
            try_start,
            try_end,
            handler_start,
            handler_end,
            filter_start: None,
            class_token: class.0,
            extra_flags: 0,
        });
        self
    }
    pub(crate) fn done(&self) -> Result<Vec<u8>, LayoutError> {
        lay_out(&self.0, BranchForms::ShortestWhereFits)
    }
}
