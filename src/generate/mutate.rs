//! Invalid by design: mutations of a generated body that each break one rule and name the
//! diagnostic the verifier must report for it. They feed the verifier's negative tests.
//!
//! A mutation works where the generator recorded a suitable site ([`super::Sites`]) — an
//! empty-stack statement start, the `br` that closes a then-arm, the `leave` that ends a try —
//! or on the laid-out bytes and clauses for rules about encodings (displacements, clause
//! boundaries, table order, MaxStack). It returns `None` when the body has no such site.

use super::valid::Generated;
use crate::body::{Clause, ClauseKind};
use crate::ir::{
    BranchForms, Instr, Label, Layout, LayoutOptions, MaxStackPolicy, Method, Operand,
};
use crate::opcode::{Opcode, OperandKind};
use crate::verify::{self, Code};

/// A way to break a valid body.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mutation {
    /// Remove the push that a `stloc` consumes.
    DropPush,
    /// A `pop` at an empty stack.
    ExtraPop,
    /// An extra push before the `br` that joins an `if`/`else`.
    StrayPushBeforeMerge,
    /// A branch displacement into the middle of an instruction.
    BranchIntoMidInstruction,
    /// A branch displacement past the end of the code.
    BranchOutOfRange,
    /// The `leave` that ends a try turned into `br`.
    BrOutOfTry,
    /// The `leave` that ends a try turned into `ret`.
    RetFromTry,
    /// A `br` from outside a try to its second instruction.
    BranchIntoTry,
    /// The `endfinally` of a finally turned into a `leave` out of it.
    LeaveOutOfFinally,
    /// An `endfinally` outside every handler.
    EndfinallyOutsideHandler,
    /// A `rethrow` outside every catch handler.
    RethrowOutsideCatch,
    /// A try's end moved one byte back, into its last instruction.
    ShiftClauseBoundary,
    /// A try extended over its own handler.
    OverlapClauses,
    /// A nested clause moved after the clause enclosing it.
    SwapClauseOrder,
    /// The final `ret` replaced, so control falls off the end.
    FallOffEnd,
    /// MaxStack declared one below what the code needs.
    MaxStackTooSmall,
    /// A `nop` between a `tail.` call and its `ret`.
    NopBetweenTailCallAndRet,
    /// A filter whose `endfilter` is replaced by `pop`.
    FilterWithoutEndfilter,
    /// A local index one past the last local.
    BadLocalIndex,
    /// A call to a token the module does not define.
    UnknownCallee,
}

impl Mutation {
    /// Every mutation.
    pub const ALL: &'static [Mutation] = &[
        Mutation::DropPush,
        Mutation::ExtraPop,
        Mutation::StrayPushBeforeMerge,
        Mutation::BranchIntoMidInstruction,
        Mutation::BranchOutOfRange,
        Mutation::BrOutOfTry,
        Mutation::RetFromTry,
        Mutation::BranchIntoTry,
        Mutation::LeaveOutOfFinally,
        Mutation::EndfinallyOutsideHandler,
        Mutation::RethrowOutsideCatch,
        Mutation::ShiftClauseBoundary,
        Mutation::OverlapClauses,
        Mutation::SwapClauseOrder,
        Mutation::FallOffEnd,
        Mutation::MaxStackTooSmall,
        Mutation::NopBetweenTailCallAndRet,
        Mutation::FilterWithoutEndfilter,
        Mutation::BadLocalIndex,
        Mutation::UnknownCallee,
    ];

    /// The diagnostic the verifier must report for the mutated body.
    pub fn expected(self) -> Code {
        match self {
            Mutation::DropPush | Mutation::ExtraPop => Code::StackUnderflow,
            Mutation::StrayPushBeforeMerge => Code::PathStackDepth,
            Mutation::BranchIntoMidInstruction => Code::BadJumpTarget,
            Mutation::BranchOutOfRange => Code::BadBranch,
            Mutation::BrOutOfTry => Code::BranchOutOfTry,
            Mutation::RetFromTry => Code::ReturnFromTry,
            Mutation::BranchIntoTry => Code::BranchIntoTry,
            Mutation::LeaveOutOfFinally => Code::LeaveOutOfFinally,
            Mutation::EndfinallyOutsideHandler => Code::Endfinally,
            Mutation::RethrowOutsideCatch => Code::Rethrow,
            Mutation::ShiftClauseBoundary => Code::EHBoundaryNotInstructionStart,
            Mutation::OverlapClauses => Code::EHOverlap,
            Mutation::SwapClauseOrder => Code::EHOrderInnerAfterOuter,
            Mutation::FallOffEnd => Code::MethodFallthrough,
            Mutation::MaxStackTooSmall => Code::StackOverflow,
            Mutation::NopBetweenTailCallAndRet => Code::TailRet,
            Mutation::FilterWithoutEndfilter => Code::EHFilterNoEndfilter,
            Mutation::BadLocalIndex => Code::UnrecognizedLocalNumber,
            Mutation::UnknownCallee => Code::TokenResolve,
        }
    }
}

/// A broken body: code and clauses as laid out, the MaxStack it declares, and what the verifier
/// must say about it (check with [`crate::verify::Verifier::verify`] of
/// [`Subject::Code`](crate::verify::Subject::Code) and the generated resolver).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mutant {
    /// The rule broken.
    pub mutation: Mutation,
    /// The code the verifier must report.
    pub expected: Code,
    /// The broken code.
    pub code: Vec<u8>,
    /// Its clauses.
    pub clauses: Vec<Clause>,
    /// The MaxStack it declares.
    pub max_stack: u16,
}

/// A token no generated module defines.
const UNKNOWN_METHOD: u32 = 0x0600_FFFF;

/// Applies `mutation` to `g` at the site `choice` selects (taken modulo the number of sites).
pub fn mutate(g: &Generated, mutation: Mutation, choice: u32) -> Option<Mutant> {
    let s = &g.sites;
    let pick = |n: usize| (n > 0).then(|| choice as usize % n);
    let mut m = g.method.clone();
    let mut forms = BranchForms::KeepOriginal;
    match mutation {
        Mutation::DropPush => {
            let i = s.simple_stores[pick(s.simple_stores.len())?];
            m.instrs[i] = Instr::op(Opcode::Nop);
        }
        Mutation::ExtraPop => {
            let (i, _) = s.statements[pick(s.statements.len())?];
            insert(&mut m, i, Instr::op(Opcode::Pop));
        }
        Mutation::StrayPushBeforeMerge => {
            let i = s.merges[pick(s.merges.len())?];
            insert(&mut m, i, Instr::op(Opcode::Ldc_I4_0));
        }
        Mutation::BrOutOfTry | Mutation::RetFromTry => {
            let i = s.try_leaves[pick(s.try_leaves.len())?];
            if mutation == Mutation::RetFromTry {
                m.instrs[i] = Instr::op(Opcode::Ret);
            } else {
                m.instrs[i].opcode = Opcode::Br;
            }
        }
        Mutation::BranchIntoTry => {
            let c = m.clauses[pick(m.clauses.len())?];
            let (ts, te) = (m.position(c.try_start)?, m.position(c.try_end)?);
            // An instruction of the try past its first, outside every handler and filter.
            let in_a_handler = |p: usize| {
                m.clauses.iter().any(|c| {
                    let start = c.filter_start.unwrap_or(c.handler_start);
                    matches!((m.position(start), m.position(c.handler_end)),
                        (Some(a), Some(b)) if a <= p && p < b)
                })
            };
            let inside = (ts + 1..te).find(|&p| !in_a_handler(p))?;
            // From outside every try: a branch out of one would be reported first.
            let in_a_try = |p: usize| {
                m.clauses.iter().any(|c| {
                    matches!((m.position(c.try_start), m.position(c.try_end)),
                        (Some(a), Some(b)) if a <= p && p < b)
                })
            };
            let from = s.plain_statements.iter().copied().find(|&p| !in_a_try(p))?;
            let target = m.new_label();
            bind_at(&mut m, target, inside);
            insert(&mut m, from, Instr::branch(Opcode::Br, target));
        }
        Mutation::LeaveOutOfFinally => {
            let (i, after) = s.finally_ends[pick(s.finally_ends.len())?];
            m.instrs[i] = Instr::branch(Opcode::Leave, after);
        }
        Mutation::EndfinallyOutsideHandler | Mutation::RethrowOutsideCatch => {
            let i = s.plain_statements[pick(s.plain_statements.len())?];
            let op = if mutation == Mutation::RethrowOutsideCatch {
                Opcode::Rethrow
            } else {
                Opcode::Endfinally
            };
            insert(&mut m, i, Instr::op(op));
        }
        Mutation::FallOffEnd => {
            let i = s.final_ret?;
            let op = if g.shape.returns_void {
                Opcode::Nop
            } else {
                Opcode::Pop
            };
            m.instrs[i] = Instr::op(op);
        }
        Mutation::NopBetweenTailCallAndRet => {
            let i = s.tail_calls[pick(s.tail_calls.len())?];
            insert(&mut m, i + 1, Instr::op(Opcode::Nop));
        }
        Mutation::FilterWithoutEndfilter => {
            let i = s.endfilters[pick(s.endfilters.len())?];
            m.instrs[i] = Instr::op(Opcode::Pop);
        }
        Mutation::BadLocalIndex => {
            let i = s.local_operands[pick(s.local_operands.len())?];
            let ins = &mut m.instrs[i];
            let store = matches!(
                ins.opcode,
                Opcode::Stloc_0
                    | Opcode::Stloc_1
                    | Opcode::Stloc_2
                    | Opcode::Stloc_3
                    | Opcode::Stloc_S
                    | Opcode::Stloc
            );
            ins.opcode = if store { Opcode::Stloc } else { Opcode::Ldloc };
            ins.operand = Operand::Var(g.shape.locals);
        }
        Mutation::UnknownCallee => {
            let i = s.calls[pick(s.calls.len())?];
            m.instrs[i].operand = Operand::Token(UNKNOWN_METHOD);
        }
        Mutation::BranchIntoMidInstruction | Mutation::BranchOutOfRange => {
            forms = BranchForms::AllLong;
        }
        Mutation::ShiftClauseBoundary
        | Mutation::OverlapClauses
        | Mutation::SwapClauseOrder
        | Mutation::MaxStackTooSmall => {}
    }
    let mut layout = Layout::new();
    let opts = LayoutOptions {
        branch_forms: forms,
        max_stack: MaxStackPolicy::Declared,
        verify: false,
    };
    layout.run(&m, &opts, &g.resolver, &mut Vec::new()).ok()?;
    let mut code = layout.code().to_vec();
    let mut clauses = layout.clauses().to_vec();
    let mut max_stack = m.header.max_stack;
    match mutation {
        Mutation::BranchIntoMidInstruction | Mutation::BranchOutOfRange => {
            patch_branch(&mut code, mutation, choice)?;
        }
        Mutation::ShiftClauseBoundary => {
            let k = pick(clauses.len())?;
            clauses[k].try_length = clauses[k].try_length.checked_sub(1)?;
        }
        Mutation::OverlapClauses => {
            let k = pick(clauses.len())?;
            let c = &mut clauses[k];
            let start = if c.kind() == ClauseKind::Filter {
                c.class_or_filter.min(c.handler_offset)
            } else {
                c.handler_offset
            };
            if start < c.try_offset {
                return None;
            }
            // The try now reaches one instruction-start into its handler (or filter).
            let first = crate::instr::decode_at(&code, start as usize).ok()?;
            c.try_length = start + first.size() as u32 - c.try_offset;
        }
        Mutation::SwapClauseOrder => {
            let (inner, outer) = nested_pair(&clauses, choice)?;
            let c = clauses.remove(inner);
            clauses.insert(outer, c);
        }
        Mutation::MaxStackTooSmall => {
            let mut v = verify::Verifier::new();
            let code_only = verify::Subject::Code {
                code: &code,
                clauses: &clauses,
                declared_max_stack: None,
            };
            v.verify(code_only, &g.resolver, &verify::Options::FIRST);
            let need = v.needed_max_stack().ok()?;
            max_stack = need.checked_sub(1)?;
        }
        _ => {}
    }
    Some(Mutant {
        mutation,
        expected: mutation.expected(),
        code,
        clauses,
        max_stack,
    })
}

/// Every mutation that has a site in `g`.
pub fn applicable(g: &Generated) -> Vec<Mutant> {
    Mutation::ALL
        .iter()
        .filter_map(|&mu| mutate(g, mu, 0))
        .collect()
}

/// Inserts `instr` before instruction `at`: labels bound at `at` now name the new instruction
/// (branches reach it, regions starting there include it, regions ending there exclude it).
fn insert(m: &mut Method, at: usize, instr: Instr) {
    let at = at.min(m.instrs.len());
    m.instrs.insert(at, instr);
    for p in &mut m.labels {
        if *p != crate::ir::UNBOUND && *p as usize > at {
            *p += 1;
        }
    }
}

fn bind_at(m: &mut Method, label: Label, index: usize) {
    if let Some(p) = m.labels.get_mut(label.index()) {
        *p = index as u32;
    }
}

/// Points a long branch into the middle of a multi-byte instruction, or past the code.
fn patch_branch(code: &mut [u8], mutation: Mutation, choice: u32) -> Option<()> {
    let instrs: Vec<_> = crate::instr::Instructions::new(code)
        .collect::<Result<Vec<_>, _>>()
        .ok()?;
    let branches: Vec<_> = instrs
        .iter()
        .filter(|i| i.opcode.operand_kind() == OperandKind::BrTarget)
        .collect();
    let b = branches.get(choice as usize % branches.len().max(1))?;
    let next = b.next_offset();
    let target = match mutation {
        Mutation::BranchOutOfRange => code.len() as i64 + 1 + (choice % 64) as i64,
        _ => {
            let wide: Vec<_> = instrs.iter().filter(|i| i.size() >= 2).collect();
            let t = wide.get(choice as usize / 7 % wide.len().max(1))?;
            t.offset as i64 + 1
        }
    };
    let disp = i32::try_from(target - next).ok()?;
    let at = b.offset as usize + b.opcode.size();
    code.get_mut(at..at + 4)?
        .copy_from_slice(&disp.to_le_bytes());
    Some(())
}

/// Clause extent: the smallest range covering its try, handler and filter.
fn extent(c: &Clause) -> (u64, u64) {
    let mut lo = (c.try_offset as u64).min(c.handler_offset as u64);
    let hi = c.try_end().max(c.handler_end());
    if c.kind() == ClauseKind::Filter {
        lo = lo.min(c.class_or_filter as u64);
    }
    (lo, hi)
}

/// A clause `inner` listed before a clause `outer` whose try or handler encloses it.
fn nested_pair(clauses: &[Clause], choice: u32) -> Option<(usize, usize)> {
    let mut pairs = Vec::new();
    for (i, a) in clauses.iter().enumerate() {
        let (lo, hi) = extent(a);
        for (j, b) in clauses.iter().enumerate().skip(i + 1) {
            let in_try = b.try_offset as u64 <= lo && hi <= b.try_end();
            let in_handler = b.handler_offset as u64 <= lo && hi <= b.handler_end();
            if in_try || in_handler {
                pairs.push((i, j));
            }
        }
    }
    pairs.get(choice as usize % pairs.len().max(1)).copied()
}
