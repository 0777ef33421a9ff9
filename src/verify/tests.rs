//! Rule-by-rule tests on hand-assembled bodies, and a mutation suite.

use super::*;
use crate::body::{Clause, ClauseTable};
use crate::instr::{Operand, encode};
use crate::opcode::Opcode::{self, *};
use crate::test_rng::xorshift;
use std::collections::HashMap;

// Shorthands over the one entry point, [`Verifier::verify`], each with a fresh verifier.

fn verify(body: &Body<'_>, resolver: &dyn Resolver) -> Vec<Diagnostic> {
    Verifier::new()
        .verify(body, resolver, &Options::ALL)
        .to_vec()
}

fn verify_first(body: &Body<'_>, resolver: &dyn Resolver) -> Option<Diagnostic> {
    Verifier::new()
        .verify(body, resolver, &Options::FIRST)
        .first()
        .cloned()
}

fn verify_code(
    code: &[u8],
    clauses: &[Clause],
    declared_max_stack: Option<u16>,
    resolver: &dyn Resolver,
) -> Vec<Diagnostic> {
    Verifier::new().verify_code(code, clauses, declared_max_stack, resolver)
}

fn max_stack(code: &[u8], clauses: &[Clause], resolver: &dyn Resolver) -> Result<u16, Diagnostic> {
    Verifier::new().max_stack(code, clauses, resolver)
}

fn body_max_stack(body: &Body<'_>, resolver: &dyn Resolver) -> Result<u16, Diagnostic> {
    let clauses: Vec<Clause> = body.clauses().collect();
    max_stack(body.code, &clauses, resolver)
}

/// The same shorthands on a verifier that keeps its buffers.
impl Verifier {
    fn verify_code<R: Resolver + ?Sized>(
        &mut self,
        code: &[u8],
        clauses: &[Clause],
        declared_max_stack: Option<u16>,
        resolver: &R,
    ) -> Vec<Diagnostic> {
        let subject = Subject::Code {
            code,
            clauses,
            declared_max_stack,
        };
        self.verify(subject, resolver, &Options::ALL).to_vec()
    }

    fn max_stack<R: Resolver + ?Sized>(
        &mut self,
        code: &[u8],
        clauses: &[Clause],
        resolver: &R,
    ) -> Result<u16, Diagnostic> {
        let subject = Subject::Code {
            code,
            clauses,
            declared_max_stack: None,
        };
        self.verify(subject, resolver, &Options::FIRST);
        self.needed_max_stack()
    }

    fn max_stack_in<R: Resolver + ?Sized>(
        &mut self,
        buf: &[u8],
        len: usize,
        clauses: &[Clause],
        resolver: &R,
    ) -> Result<u16, Diagnostic> {
        self.verify_code_in(buf, len, clauses.into(), None, resolver, &Options::FIRST);
        self.needed_max_stack()
    }
}

/// One line of a test body.
#[derive(Clone, Debug)]
enum It {
    Op(Opcode, Operand<'static>),
    /// A branch (short or long form) to a label.
    Br(Opcode, &'static str),
    Switch(Vec<&'static str>),
    Label(&'static str),
    Raw(Vec<u8>),
}

fn op(o: Opcode) -> It {
    It::Op(o, Operand::None)
}
fn tok(o: Opcode, t: u32) -> It {
    It::Op(o, Operand::Token(t))
}
fn var(o: Opcode, v: u16) -> It {
    It::Op(o, Operand::Var(v))
}
fn i8_(o: Opcode, v: i8) -> It {
    It::Op(o, Operand::Int8(v))
}
fn br(o: Opcode, l: &'static str) -> It {
    It::Br(o, l)
}
fn lbl(l: &'static str) -> It {
    It::Label(l)
}

struct Asm {
    code: Vec<u8>,
    labels: HashMap<&'static str, u32>,
}

impl Asm {
    fn at(&self, l: &str) -> u32 {
        self.labels[l]
    }
}

fn size(it: &It) -> usize {
    match it {
        It::Op(o, operand) => {
            let mut v = Vec::new();
            encode(*o, operand, &mut v).unwrap();
            v.len()
        }
        It::Br(o, _) => o.size() + o.operand_kind().fixed_size().unwrap(),
        It::Switch(ls) => 5 + 4 * ls.len(),
        It::Label(_) => 0,
        It::Raw(b) => b.len(),
    }
}

fn asm(items: &[It]) -> Asm {
    let mut labels = HashMap::new();
    let mut pos = 0;
    for it in items {
        if let It::Label(l) = it {
            labels.insert(*l, pos as u32);
        }
        pos += size(it);
    }
    let mut code = Vec::new();
    for it in items {
        let next = (code.len() + size(it)) as i64;
        match it {
            It::Op(o, operand) => encode(*o, operand, &mut code).unwrap(),
            It::Br(o, l) => {
                let d = labels[l] as i64 - next;
                let operand = if o.operand_kind() == crate::opcode::OperandKind::ShortBrTarget {
                    Operand::ShortBranch(i8::try_from(d).unwrap())
                } else {
                    Operand::Branch(d as i32)
                };
                encode(*o, &operand, &mut code).unwrap();
            }
            It::Switch(ls) => {
                let ds = ls
                    .iter()
                    .map(|l| (labels[l] as i64 - next) as i32)
                    .collect();
                let operand = Operand::Switch(crate::instr::SwitchTargets::Owned(ds));
                encode(Switch, &operand, &mut code).unwrap();
            }
            It::Label(_) => {}
            It::Raw(b) => code.extend_from_slice(b),
        }
    }
    Asm { code, labels }
}

const TYPE: u32 = 0x0100_0001;
const FIELD: u32 = 0x0400_0001;
const STR: u32 = 0x7000_0001;
/// `void F()`.
const VOID0: u32 = 0x0A00_0001;
/// `int F(int)`.
const INT1: u32 = 0x0A00_0002;
/// `int C::M()` (instance).
const INST_INT0: u32 = 0x0A00_0003;
/// `C::.ctor(int)`.
const CTOR1: u32 = 0x0A00_0004;
/// `int (int, int)` for calli.
const SIG2: u32 = 0x1100_0001;

/// A void method with two arguments and four locals in a module holding the tokens above.
fn res() -> SyntheticResolver {
    SyntheticResolver::new()
        .method(2, true)
        .locals(4)
        .call(VOID0, CallSig::static_method(0, true))
        .call(INT1, CallSig::static_method(1, false))
        .call(INST_INT0, CallSig::instance(0, false))
        .call(CTOR1, CallSig::instance(1, true))
        .call(SIG2, CallSig::static_method(2, false))
        .token(TYPE)
        .token(FIELD)
        .string(STR)
        .closed()
}

fn int_res() -> SyntheticResolver {
    res().method(2, false)
}

fn run(items: &[It], clauses: &[Clause], r: &dyn Resolver) -> Vec<Code> {
    let a = asm(items);
    let d = verify_code(&a.code, clauses, Some(8), r);
    d.iter().map(|d| d.code).collect()
}

fn codes(items: &[It]) -> Vec<Code> {
    run(items, &[], &res())
}

#[track_caller]
fn valid(items: &[It]) {
    assert_eq!(codes(items), [], "{items:?}");
}

#[track_caller]
fn invalid(items: &[It], expected: Code) {
    let got = codes(items);
    assert!(
        got.contains(&expected),
        "expected {expected:?}, got {got:?}"
    );
}

fn clause(flags: u32, a: &Asm, t: (&str, &str), h: (&str, &str), extra: u32) -> Clause {
    Clause {
        flags,
        try_offset: a.at(t.0),
        try_length: a.at(t.1) - a.at(t.0),
        handler_offset: a.at(h.0),
        handler_length: a.at(h.1) - a.at(h.0),
        class_or_filter: extra,
    }
}
fn catch(a: &Asm, t: (&str, &str), h: (&str, &str)) -> Clause {
    clause(0, a, t, h, TYPE)
}
fn finally(a: &Asm, t: (&str, &str), h: (&str, &str)) -> Clause {
    clause(Clause::FLAG_FINALLY, a, t, h, 0)
}
fn fault(a: &Asm, t: (&str, &str), h: (&str, &str)) -> Clause {
    clause(Clause::FLAG_FAULT, a, t, h, 0)
}
fn filter(a: &Asm, t: (&str, &str), f: &str, h: (&str, &str)) -> Clause {
    clause(Clause::FLAG_FILTER, a, t, h, a.at(f))
}

fn eh_codes(items: &[It], clauses: impl Fn(&Asm) -> Vec<Clause>) -> Vec<Code> {
    let a = asm(items);
    let cl = clauses(&a);
    verify_code(&a.code, &cl, Some(8), &res())
        .iter()
        .map(|d| d.code)
        .collect()
}

// ---- Stream ----

#[test]
fn empty_code() {
    assert_eq!(codes(&[]), [Code::CodeSizeZero]);
}

#[test]
fn unknown_opcode_and_truncation() {
    assert_eq!(codes(&[It::Raw(vec![0x24])]), [Code::UnknownOpcode]);
    assert_eq!(codes(&[It::Raw(vec![0xFE, 0x08])]), [Code::UnknownOpcode]);
    assert_eq!(codes(&[It::Raw(vec![0x20, 1, 2])]), [Code::MethodEnd]);
    assert_eq!(codes(&[It::Raw(vec![0xFE])]), [Code::MethodEnd]);
    assert_eq!(codes(&[op(Volatile)]), [Code::MethodEnd]);
}

#[test]
fn fallthrough_off_the_end() {
    valid(&[op(Nop), op(Ret)]);
    assert_eq!(codes(&[op(Nop)]), [Code::MethodFallthrough]);
    invalid(
        &[op(Ldc_I4_0), br(Brtrue_S, "x"), lbl("x"), op(Nop)],
        Code::MethodFallthrough,
    );
}

// ---- Branch targets ----

#[test]
fn branch_targets() {
    valid(&[op(Ldc_I4_0), br(Brfalse_S, "x"), op(Nop), lbl("x"), op(Ret)]);
    // br.s +1 lands inside the following ldc.i4.
    invalid(
        &[
            It::Raw(vec![0x2B, 0x01]),
            It::Op(Ldc_I4, Operand::Int32(0)),
            op(Pop),
            op(Ret),
        ],
        Code::BadJumpTarget,
    );
    // Past the end, and before the start.
    invalid(&[It::Raw(vec![0x2B, 0x05]), op(Ret)], Code::BadBranch);
    invalid(&[It::Raw(vec![0x2B, 0xF0]), op(Ret)], Code::BadBranch);
    // To the end of the code exactly.
    invalid(&[op(Nop), It::Raw(vec![0x2B, 0x00])], Code::BadBranch);
    // Switch with one good and one bad case.
    invalid(
        &[
            op(Ldc_I4_0),
            It::Raw(vec![0x45, 2, 0, 0, 0, 0, 0, 0, 0, 0x40, 0, 0, 0]),
            op(Ret),
        ],
        Code::BadBranch,
    );
    valid(&[
        op(Ldc_I4_0),
        It::Switch(vec!["a", "b"]),
        lbl("a"),
        op(Nop),
        lbl("b"),
        op(Ret),
    ]);
}

#[test]
fn branch_between_prefix_and_instruction() {
    invalid(
        &[
            op(Ldarg_0),
            op(Ldc_I4_0),
            br(Brtrue_S, "x"),
            op(Volatile),
            lbl("x"),
            op(Ldind_I4),
            op(Pop),
            op(Ret),
        ],
        Code::BadJumpTarget,
    );
}

// ---- Stack ----

#[test]
fn underflow_and_overflow() {
    assert_eq!(codes(&[op(Pop), op(Ret)]), [Code::StackUnderflow]);
    let mut items: Vec<It> = (0..9).map(|_| op(Ldc_I4_0)).collect();
    items.extend((0..9).map(|_| op(Pop)));
    items.push(op(Ret));
    assert_eq!(codes(&items), [Code::StackOverflow]);
    items.remove(0);
    items.remove(9);
    valid(&items);
}

#[test]
fn path_depths() {
    invalid(
        &[
            op(Ldc_I4_0),
            br(Brtrue_S, "x"),
            op(Ldc_I4_1),
            lbl("x"),
            op(Nop),
            op(Ret),
        ],
        Code::PathStackDepth,
    );
    // The ternary pattern: both arms push one.
    let r = int_res();
    let items = [
        op(Ldarg_0),
        br(Brtrue_S, "a"),
        op(Ldc_I4_1),
        br(Br_S, "b"),
        lbl("a"),
        op(Ldc_I4_2),
        lbl("b"),
        op(Ret),
    ];
    assert_eq!(run(&items, &[], &r), []);
}

#[test]
fn backward_branch_rule() {
    // After br, `l` is reached only by the backward branch, with depth 1.
    let items = [
        op(Ldc_I4_0),
        br(Br_S, "e"),
        lbl("l"),
        op(Pop),
        op(Ret),
        lbl("e"),
        op(Ldc_I4_0),
        br(Br_S, "l"),
    ];
    let got = codes(&items);
    assert!(got.contains(&Code::BackwardBranch), "{got:?}");
    // The same block with an empty stack is fine (a loop whose test is at the bottom).
    valid(&[
        br(Br_S, "test"),
        lbl("body"),
        op(Nop),
        lbl("test"),
        op(Ldarg_0),
        br(Brtrue_S, "body"),
        op(Ret),
    ]);
    // Reached by an earlier forward branch with a non-empty stack: allowed.
    let r = int_res();
    let items = [
        op(Ldarg_0),
        op(Ldarg_1),
        br(Brtrue_S, "x"),
        br(Br_S, "y"),
        lbl("x"),
        op(Ret),
        lbl("y"),
        op(Ret),
    ];
    assert_eq!(run(&items, &[], &r), []);
}

#[test]
fn ret_depths() {
    assert_eq!(codes(&[op(Ldc_I4_0), op(Ret)]), [Code::ReturnVoid]);
    let r = int_res();
    assert_eq!(run(&[op(Ret)], &[], &r), [Code::ReturnMissing]);
    assert_eq!(
        run(&[op(Ldc_I4_0), op(Ldc_I4_0), op(Ret)], &[], &r),
        [Code::ReturnEmpty]
    );
    assert_eq!(run(&[op(Ldc_I4_0), op(Ret)], &[], &r), []);
    // Unknown own signature: no ret checks.
    assert_eq!(run(&[op(Ldc_I4_0), op(Ret)], &[], &NoResolver), []);
}

#[test]
fn localloc_jmp_endfilter_stacks() {
    valid(&[op(Ldc_I4_8), op(Localloc), op(Pop), op(Ret)]);
    // Roslyn's `Span<T> s = stackalloc T[n]` keeps `n` under the size (`dup … localloc`).
    // III.3.47 wants only the size there, and ILVerify says so; CoreCLR runs it, so the finding
    // is unverifiable, not invalid.
    let dup = [
        op(Ldc_I4_0),
        op(Dup),
        op(Localloc),
        op(Pop),
        op(Pop),
        op(Ret),
    ];
    assert_eq!(codes(&dup), [Code::LocallocStackNotEmpty]);
    assert_eq!(Code::LocallocStackNotEmpty.verdict(), Verdict::Unverifiable);
    // The same after a branch (the dataflow's path, not the straight-line one).
    let branchy = [
        op(Ldc_I4_0),
        br(Br_S, "l"),
        lbl("l"),
        op(Dup),
        op(Localloc),
        op(Pop),
        op(Pop),
        op(Ret),
    ];
    assert_eq!(codes(&branchy), [Code::LocallocStackNotEmpty]);
    valid(&[
        op(Ldc_I4_0),
        br(Br_S, "l"),
        lbl("l"),
        op(Localloc),
        op(Pop),
        op(Ret),
    ]);
    invalid(&[op(Localloc), op(Pop), op(Ret)], Code::StackUnderflow);
    valid(&[tok(Jmp, VOID0)]);
    invalid(&[op(Ldc_I4_0), tok(Jmp, VOID0)], Code::JmpStackNotEmpty);
}

#[test]
fn calls_use_signatures() {
    valid(&[tok(Call, VOID0), op(Ret)]);
    valid(&[op(Ldc_I4_0), tok(Call, INT1), op(Pop), op(Ret)]);
    invalid(&[tok(Call, INT1), op(Pop), op(Ret)], Code::StackUnderflow);
    valid(&[op(Ldnull), tok(Callvirt, INST_INT0), op(Pop), op(Ret)]);
    valid(&[op(Ldc_I4_0), tok(Newobj, CTOR1), op(Pop), op(Ret)]);
    valid(&[
        op(Ldc_I4_0),
        op(Ldc_I4_0),
        tok(Ldftn, INT1),
        tok(Calli, SIG2),
        op(Pop),
        op(Ret),
    ]);
    invalid(
        &[
            op(Ldc_I4_0),
            tok(Ldftn, INT1),
            tok(Calli, SIG2),
            op(Pop),
            op(Ret),
        ],
        Code::StackUnderflow,
    );
    // Varargs call site: the extra arguments count too.
    let r = res().call(
        0x0A00_0009,
        CallSig {
            vararg_extra: 2,
            ..CallSig::static_method(1, true)
        },
    );
    let items = [
        op(Ldc_I4_0),
        op(Ldc_I4_0),
        op(Ldc_I4_0),
        tok(Call, 0x0A00_0009),
        op(Ret),
    ];
    assert_eq!(run(&items, &[], &r), []);
}

#[test]
fn unknown_signature_skips_instead_of_guessing() {
    let r = res().token(0x0A00_0077);
    let items = [tok(Call, 0x0A00_0077), op(Pop), op(Ret)];
    assert_eq!(run(&items, &[], &r), []);
    let a = asm(&items);
    let e = max_stack(&a.code, &[], &r).unwrap_err();
    assert_eq!(e.code, Code::UnresolvedToken);
}

#[test]
fn max_stack_is_computed() {
    let a = asm(&[
        op(Ldc_I4_0),
        op(Ldc_I4_0),
        op(Ldc_I4_0),
        tok(Ldftn, INT1),
        tok(Calli, SIG2),
        op(Pop),
        op(Pop),
        op(Ret),
    ]);
    assert_eq!(max_stack(&a.code, &[], &res()), Ok(4));
    let a = asm(&[op(Pop), op(Ret)]);
    assert_eq!(
        max_stack(&a.code, &[], &res()).unwrap_err().code,
        Code::StackUnderflow
    );
    // A catch handler starts with the exception on the stack.
    let items = [
        lbl("t"),
        br(Leave_S, "end"),
        lbl("h"),
        op(Pop),
        br(Leave_S, "end"),
        lbl("he"),
        lbl("end"),
        op(Ret),
    ];
    let a = asm(&items);
    let cl = [catch(&a, ("t", "h"), ("h", "he"))];
    assert_eq!(max_stack(&a.code, &cl, &res()), Ok(1));
}

// ---- EH table ----

/// try { nop; leave end } catch { pop; leave end } end: ret
fn try_catch() -> Vec<It> {
    vec![
        lbl("t"),
        op(Nop),
        br(Leave_S, "end"),
        lbl("h"),
        op(Pop),
        br(Leave_S, "end"),
        lbl("he"),
        lbl("end"),
        op(Ret),
    ]
}

#[test]
fn try_catch_is_valid() {
    assert_eq!(
        eh_codes(&try_catch(), |a| vec![catch(a, ("t", "h"), ("h", "he"))]),
        []
    );
}

#[test]
fn clause_bounds() {
    let items = try_catch();
    let got = eh_codes(&items, |a| {
        let mut c = catch(a, ("t", "h"), ("h", "he"));
        c.handler_length = 100;
        vec![c]
    });
    assert_eq!(got, [Code::EHClauseOutOfRange]);
    let got = eh_codes(&items, |a| {
        let mut c = catch(a, ("t", "h"), ("h", "he"));
        c.try_offset = u32::MAX;
        vec![c]
    });
    assert_eq!(got, [Code::EHClauseOutOfRange]);
    let got = eh_codes(&items, |a| {
        let mut c = catch(a, ("t", "h"), ("h", "he"));
        c.try_length = 0;
        vec![c]
    });
    assert_eq!(got, [Code::EHRegionEmpty]);
    let got = eh_codes(&items, |a| {
        let mut c = catch(a, ("t", "h"), ("h", "he"));
        c.handler_length -= 1;
        vec![c]
    });
    assert_eq!(got, [Code::EHBoundaryNotInstructionStart]);
    let got = eh_codes(&items, |a| {
        let mut c = catch(a, ("t", "h"), ("h", "he"));
        c.flags = 3;
        vec![c]
    });
    assert_eq!(got, [Code::EHInvalidKind]);
    let got = eh_codes(&items, |a| {
        let mut c = catch(a, ("t", "h"), ("h", "he"));
        c.class_or_filter = FIELD;
        vec![c]
    });
    assert_eq!(got, [Code::ExpectedTypeToken]);
}

#[test]
fn try_equals_handler_and_same_handler() {
    let items = try_catch();
    let got = eh_codes(&items, |a| vec![catch(a, ("t", "h"), ("t", "h"))]);
    assert!(got.contains(&Code::EHTryIsHandler), "{got:?}");
    let got = eh_codes(&items, |a| {
        vec![
            catch(a, ("t", "h"), ("h", "he")),
            catch(a, ("t", "h"), ("h", "he")),
        ]
    });
    assert!(got.contains(&Code::EHDuplicateHandlerStart), "{got:?}");
}

/// try { try { leave a } catch { pop; leave a } a: leave end } finally { endfinally } end: ret
fn nested() -> Vec<It> {
    vec![
        lbl("t"),
        lbl("it"),
        br(Leave_S, "a"),
        lbl("ih"),
        op(Pop),
        br(Leave_S, "a"),
        lbl("ihe"),
        lbl("a"),
        br(Leave_S, "end"),
        lbl("h"),
        op(Endfinally),
        lbl("he"),
        lbl("end"),
        op(Ret),
    ]
}

fn nested_clauses(a: &Asm) -> Vec<Clause> {
    vec![
        catch(a, ("it", "ih"), ("ih", "ihe")),
        finally(a, ("t", "h"), ("h", "he")),
    ]
}

#[test]
fn nesting_order_and_overlap() {
    assert_eq!(eh_codes(&nested(), nested_clauses), []);
    let got = eh_codes(&nested(), |a| {
        let mut c = nested_clauses(a);
        c.reverse();
        c
    });
    assert!(
        !got.is_empty() && got.iter().all(|&c| c == Code::EHOrderInnerAfterOuter),
        "{got:?}"
    );
    // Partial overlap: the inner try reaches past the outer one's end.
    let got = eh_codes(&nested(), |a| {
        vec![
            catch(a, ("it", "ih"), ("ih", "he")),
            finally(a, ("t", "h"), ("h", "he")),
        ]
    });
    assert!(got.contains(&Code::EHOverlap), "{got:?}");
}

#[test]
fn shared_try() {
    // Two catches sharing one try: fine; a finally sharing it: not.
    let items = [
        lbl("t"),
        br(Leave_S, "end"),
        lbl("h1"),
        op(Pop),
        br(Leave_S, "end"),
        lbl("h2"),
        op(Pop),
        br(Leave_S, "end"),
        lbl("end"),
        op(Ret),
    ];
    let got = eh_codes(&items, |a| {
        vec![
            catch(a, ("t", "h1"), ("h1", "h2")),
            catch(a, ("t", "h1"), ("h2", "end")),
        ]
    });
    assert_eq!(got, []);
    let mut items = items.to_vec();
    items.insert(8, op(Endfinally));
    items.insert(8, lbl("h3"));
    let got = eh_codes(&items, |a| {
        vec![
            catch(a, ("t", "h1"), ("h1", "h2")),
            finally(a, ("t", "h1"), ("h3", "end")),
        ]
    });
    assert!(got.contains(&Code::EHSharedTryFinally), "{got:?}");
}

/// try { leave end } filter { pop; ldc.i4.1; endfilter } { pop; leave end } end: ret
fn with_filter() -> Vec<It> {
    vec![
        lbl("t"),
        br(Leave_S, "end"),
        lbl("f"),
        op(Pop),
        op(Ldc_I4_1),
        op(Endfilter),
        lbl("h"),
        op(Pop),
        br(Leave_S, "end"),
        lbl("he"),
        lbl("end"),
        op(Ret),
    ]
}

fn filter_clause(a: &Asm) -> Vec<Clause> {
    vec![filter(a, ("t", "f"), "f", ("h", "he"))]
}

#[test]
fn filters() {
    assert_eq!(eh_codes(&with_filter(), filter_clause), []);
    // No endfilter at the end of the filter.
    let mut items = with_filter();
    items[5] = op(Pop);
    items.insert(5, op(Nop));
    let got = eh_codes(&items, filter_clause);
    assert!(got.contains(&Code::EHFilterNoEndfilter), "{got:?}");
    // endfilter in the middle of a filter.
    let mut items = with_filter();
    items.insert(5, op(Endfilter));
    items.insert(5, op(Ldc_I4_0));
    let got = eh_codes(&items, filter_clause);
    assert!(got.contains(&Code::Endfilter), "{got:?}");
    // endfilter outside any filter.
    invalid(&[op(Ldc_I4_0), op(Endfilter)], Code::Endfilter);
    // endfilter with two items.
    let mut items = with_filter();
    items.insert(5, op(Dup));
    let got = eh_codes(&items, filter_clause);
    assert!(got.contains(&Code::EndfilterStack), "{got:?}");
    // The filter after its handler.
    let got = eh_codes(&with_filter(), |a| {
        let mut c = filter_clause(a);
        c[0].class_or_filter = a.at("he");
        c
    });
    assert_eq!(got, [Code::EHFilterNotBeforeHandler]);
}

#[test]
fn filter_contains_region() {
    let items = [
        lbl("t"),
        br(Leave_S, "end"),
        lbl("f"),
        lbl("it"),
        op(Pop),
        br(Leave_S, "x"),
        lbl("ih"),
        br(Leave_S, "x"),
        lbl("x"),
        op(Ldc_I4_1),
        op(Endfilter),
        lbl("h"),
        op(Pop),
        br(Leave_S, "end"),
        lbl("he"),
        lbl("end"),
        op(Ret),
    ];
    let got = eh_codes(&items, |a| {
        vec![
            fault(a, ("it", "ih"), ("ih", "x")),
            filter(a, ("t", "f"), "f", ("h", "he")),
        ]
    });
    assert!(got.contains(&Code::EHFilterContainsRegion), "{got:?}");
}

// ---- Entering and leaving regions ----

#[test]
fn branch_out_of_and_into_regions() {
    let mut items = try_catch();
    items[2] = br(Br_S, "end");
    let got = eh_codes(&items, |a| vec![catch(a, ("t", "h"), ("h", "he"))]);
    assert!(got.contains(&Code::BranchOutOfTry), "{got:?}");
    let mut items = try_catch();
    items[5] = br(Br_S, "end");
    let got = eh_codes(&items, |a| vec![catch(a, ("t", "h"), ("h", "he"))]);
    assert!(got.contains(&Code::BranchOutOfHandler), "{got:?}");
    // A branch from the method body into the middle of the try.
    let items = [
        op(Ldarg_0),
        br(Brtrue_S, "mid"),
        lbl("t"),
        op(Nop),
        lbl("mid"),
        br(Leave_S, "end"),
        lbl("h"),
        op(Pop),
        br(Leave_S, "end"),
        lbl("he"),
        lbl("end"),
        op(Ret),
    ];
    let got = eh_codes(&items, |a| vec![catch(a, ("t", "h"), ("h", "he"))]);
    assert!(got.contains(&Code::BranchIntoTry), "{got:?}");
    // ...and to its first instruction: fine.
    let mut ok = items.clone();
    ok[1] = br(Brtrue_S, "t");
    assert_eq!(
        eh_codes(&ok, |a| vec![catch(a, ("t", "h"), ("h", "he"))]),
        []
    );
    // Into the handler.
    let mut bad = items.clone();
    bad[1] = br(Brtrue_S, "h");
    let got = eh_codes(&bad, |a| vec![catch(a, ("t", "h"), ("h", "he"))]);
    assert!(got.contains(&Code::BranchIntoHandler), "{got:?}");
}

#[test]
fn fallthrough_rules() {
    // The try falls into its handler: out of the try, and into the handler.
    let mut items = try_catch();
    items[2] = op(Ldnull);
    let got = eh_codes(&items, |a| vec![catch(a, ("t", "h"), ("h", "he"))]);
    assert_eq!(
        got,
        [Code::FallthroughException, Code::FallthroughIntoHandler]
    );
    // The try falls out into ordinary code.
    let items = [
        lbl("t"),
        op(Nop),
        lbl("x"),
        op(Nop),
        br(Br_S, "end"),
        lbl("h"),
        op(Endfinally),
        lbl("end"),
        op(Ret),
    ];
    let got = eh_codes(&items, |a| vec![finally(a, ("t", "x"), ("h", "end"))]);
    assert_eq!(got, [Code::FallthroughException]);
    // Code before a handler falls into it.
    let items = [
        lbl("t"),
        br(Leave_S, "end"),
        lbl("x"),
        op(Nop),
        lbl("h"),
        op(Endfinally),
        lbl("end"),
        op(Ret),
    ];
    let got = eh_codes(&items, |a| vec![finally(a, ("t", "x"), ("h", "end"))]);
    assert!(got.contains(&Code::FallthroughIntoHandler), "{got:?}");
    // Falling into a try at its start is fine.
    let items = [
        op(Nop),
        lbl("t"),
        br(Leave_S, "end"),
        lbl("h"),
        op(Endfinally),
        lbl("end"),
        op(Ret),
    ];
    assert_eq!(
        eh_codes(&items, |a| vec![finally(a, ("t", "h"), ("h", "end"))]),
        []
    );
    // ...but not with a non-empty stack.
    let mut bad = items.to_vec();
    bad[0] = op(Ldc_I4_0);
    let got = eh_codes(&bad, |a| vec![finally(a, ("t", "h"), ("h", "end"))]);
    assert!(got.contains(&Code::TryNonEmptyStack), "{got:?}");
}

/// One transfer is checked against tries, filters and handlers each on its own, so it may
/// break a rule of each (as ILVerify reports it); findings at one offset come in code order.
#[test]
fn one_transfer_breaks_a_rule_of_each_class() {
    use Code::{
        BranchIntoHandler, BranchIntoTry, BranchOutOfHandler, BranchOutOfTry, LeaveIntoHandler,
        LeaveIntoTry, LeaveOutOfFilter, LeaveOutOfFinally,
    };
    // Two clauses one after the other: try A, catch A, try B, catch B.
    let two = |a: &Asm| {
        vec![
            catch(a, ("ta", "ha"), ("ha", "tb")),
            catch(a, ("tb", "hb"), ("hb", "end")),
        ]
    };
    // br from try A into catch B.
    let items = [
        lbl("ta"),
        br(Br_S, "m"),
        lbl("ha"),
        op(Pop),
        br(Leave_S, "end"),
        lbl("tb"),
        br(Leave_S, "end"),
        lbl("hb"),
        op(Pop),
        lbl("m"),
        br(Leave_S, "end"),
        lbl("end"),
        op(Ret),
    ];
    assert_eq!(eh_codes(&items, two), [BranchIntoHandler, BranchOutOfTry]);
    // br from catch A into the middle of try B.
    let items = [
        lbl("ta"),
        br(Leave_S, "end"),
        lbl("ha"),
        op(Pop),
        br(Br_S, "m"),
        lbl("tb"),
        op(Nop),
        lbl("m"),
        br(Leave_S, "end"),
        lbl("hb"),
        op(Pop),
        br(Leave_S, "end"),
        lbl("end"),
        op(Ret),
    ];
    assert_eq!(eh_codes(&items, two), [BranchIntoTry, BranchOutOfHandler]);
    // leave from a finally into catch B.
    let items = [
        lbl("ta"),
        br(Leave_S, "end"),
        lbl("ha"),
        br(Leave_S, "m"),
        lbl("tb"),
        br(Leave_S, "end"),
        lbl("hb"),
        op(Pop),
        lbl("m"),
        br(Leave_S, "end"),
        lbl("end"),
        op(Ret),
    ];
    let got = eh_codes(&items, |a| {
        vec![
            finally(a, ("ta", "ha"), ("ha", "tb")),
            catch(a, ("tb", "hb"), ("hb", "end")),
        ]
    });
    assert_eq!(got, [LeaveIntoHandler, LeaveOutOfFinally]);

    // A try nested in a catch: X is where the transfer starts or lands.
    // try { leave end } catch { pop; it: X; leave ie } ih: catch { pop; leave ie } ie: leave end
    let in_catch = |start: It, x: It| {
        vec![
            start,
            lbl("ta"),
            br(Leave_S, "end"),
            lbl("ha"),
            op(Pop),
            lbl("it"),
            op(Nop),
            lbl("m"),
            x,
            br(Leave_S, "ie"),
            lbl("ih"),
            op(Pop),
            br(Leave_S, "ie"),
            lbl("ie"),
            br(Leave_S, "end"),
            lbl("he"),
            lbl("end"),
            op(Ret),
        ]
    };
    let nested = |a: &Asm| {
        vec![
            catch(a, ("it", "ih"), ("ih", "ie")),
            catch(a, ("ta", "ha"), ("ha", "he")),
        ]
    };
    assert_eq!(eh_codes(&in_catch(op(Nop), op(Nop)), nested), []);
    let got = eh_codes(&in_catch(op(Nop), br(Br_S, "end")), nested);
    assert_eq!(got, [BranchOutOfTry, BranchOutOfHandler]);
    let got = eh_codes(&in_catch(br(Br_S, "m"), op(Nop)), nested);
    assert_eq!(got, [BranchIntoTry, BranchIntoHandler]);
    let got = eh_codes(&in_catch(br(Leave_S, "m"), op(Nop)), nested);
    assert_eq!(got, [LeaveIntoTry, LeaveIntoHandler]);
    // Into the nested try's first instruction: only the catch is entered wrongly.
    let got = eh_codes(&in_catch(br(Br_S, "it"), op(Nop)), nested);
    assert_eq!(got, [BranchIntoHandler]);

    // A leave from a filter inside a finally to outside both.
    let items = [
        lbl("t"),
        br(Leave_S, "end"),
        lbl("fin"),
        lbl("it"),
        br(Leave_S, "ie"),
        lbl("f"),
        op(Pop),
        br(Leave_S, "end"),
        op(Ldc_I4_1),
        op(Endfilter),
        lbl("h"),
        op(Pop),
        br(Leave_S, "ie"),
        lbl("ie"),
        op(Endfinally),
        lbl("end"),
        op(Ret),
    ];
    let got = eh_codes(&items, |a| {
        vec![
            filter(a, ("it", "f"), "f", ("h", "ie")),
            finally(a, ("t", "fin"), ("fin", "end")),
        ]
    });
    assert_eq!(got, [LeaveOutOfFilter, LeaveOutOfFinally]);
}

/// Where a branch or fall-through leaves one handler (or filter) and enters another, one code
/// names it, as ILVerify's: the entry going forward, the exit going back. Tries: the exit.
#[test]
fn one_code_per_class_for_branches() {
    use Code::{
        BranchIntoHandler, BranchOutOfHandler, BranchOutOfTry, FallthroughException,
        FallthroughIntoHandler,
    };
    let two_catches = |a: &Asm| {
        vec![
            catch(a, ("t", "h1"), ("h1", "h2")),
            catch(a, ("t", "h1"), ("h2", "end")),
        ]
    };
    let between = |x1: It, x2: It| {
        vec![
            lbl("t"),
            br(Leave_S, "end"),
            lbl("h1"),
            op(Pop),
            lbl("m1"),
            x1,
            lbl("h2"),
            op(Pop),
            lbl("m2"),
            x2,
            lbl("end"),
            op(Ret),
        ]
    };
    let leave = || br(Leave_S, "end");
    let got = eh_codes(&between(br(Br_S, "m2"), leave()), two_catches);
    assert_eq!(got, [BranchIntoHandler]);
    let got = eh_codes(&between(leave(), br(Br_S, "m1")), two_catches);
    assert_eq!(got, [BranchOutOfHandler]);
    // A catch that falls into the next one (with the depth the next one starts with).
    let items = [
        lbl("t"),
        br(Leave_S, "end"),
        lbl("h1"),
        op(Pop),
        op(Ldnull),
        lbl("h2"),
        op(Pop),
        br(Leave_S, "end"),
        lbl("end"),
        op(Ret),
    ];
    assert_eq!(eh_codes(&items, two_catches), [FallthroughIntoHandler]);
    // Try A into the middle of try B, either way: out of the try.
    let two_tries = |a: &Asm| {
        vec![
            finally(a, ("ta", "ha"), ("ha", "tb")),
            finally(a, ("tb", "hb"), ("hb", "end")),
        ]
    };
    let tries = |x1: It, x2: It| {
        vec![
            lbl("ta"),
            op(Nop),
            lbl("ma"),
            x1,
            lbl("ha"),
            op(Endfinally),
            lbl("tb"),
            op(Nop),
            lbl("mb"),
            x2,
            lbl("hb"),
            op(Endfinally),
            lbl("end"),
            op(Ret),
        ]
    };
    let got = eh_codes(&tries(br(Br_S, "mb"), leave()), two_tries);
    assert_eq!(got, [BranchOutOfTry]);
    let got = eh_codes(&tries(leave(), br(Br_S, "ma")), two_tries);
    assert_eq!(got, [BranchOutOfTry]);
    // A try nested at the end of a catch falls out of both: one FallthroughException.
    let items = [
        lbl("ta"),
        br(Leave_S, "end"),
        lbl("ha"),
        op(Pop),
        br(Br_S, "it"),
        lbl("ih"),
        op(Pop),
        br(Leave_S, "end"),
        lbl("it"),
        op(Nop),
        lbl("end"),
        op(Ret),
    ];
    let got = eh_codes(&items, |a| {
        vec![
            catch(a, ("it", "end"), ("ih", "it")),
            catch(a, ("ta", "ha"), ("ha", "end")),
        ]
    });
    assert_eq!(got, [FallthroughException]);
}

/// A try is entered in the middle unless every try the entry enters starts there: the first
/// instruction of an inner try is the middle of an outer one that starts earlier, and a
/// handler that starts where a try does is entered wrongly while the try is not.
#[test]
fn try_entries_through_nested_starts() {
    use Code::{BranchIntoHandler, BranchIntoTry};
    let items = [
        br(Br_S, "it"),
        lbl("to"),
        op(Nop),
        lbl("it"),
        br(Leave_S, "end"),
        lbl("ih"),
        op(Pop),
        br(Leave_S, "x"),
        lbl("x"),
        br(Leave_S, "end"),
        lbl("oh"),
        op(Pop),
        br(Leave_S, "end"),
        lbl("end"),
        op(Ret),
    ];
    let clauses = |a: &Asm| {
        vec![
            catch(a, ("it", "ih"), ("ih", "x")),
            catch(a, ("to", "oh"), ("oh", "end")),
        ]
    };
    assert_eq!(eh_codes(&items, clauses), [BranchIntoTry]);
    let mut to_outer = items.to_vec();
    to_outer[0] = br(Br_S, "to");
    assert_eq!(eh_codes(&to_outer, clauses), []);
    // Clause 0's finally is the start of clause 1's try.
    let shared_start = |target: &'static str| {
        vec![
            br(Br_S, target),
            lbl("t0"),
            br(Leave_S, "end"),
            lbl("h0"),
            op(Endfinally),
            lbl("h0e"),
            br(Leave_S, "end"),
            lbl("t1e"),
            op(Pop),
            br(Leave_S, "end"),
            lbl("end"),
            op(Ret),
        ]
    };
    let clauses = |a: &Asm| {
        vec![
            finally(a, ("t0", "h0"), ("h0", "h0e")),
            catch(a, ("h0", "t1e"), ("t1e", "end")),
        ]
    };
    assert_eq!(eh_codes(&shared_start("h0"), clauses), [BranchIntoHandler]);
    assert_eq!(eh_codes(&shared_start("h0e"), clauses), [BranchIntoTry]);
}

/// `leave` into a handler is `LeaveIntoHandler` whatever the handler's kind, a fault too.
#[test]
fn leave_into_any_handler() {
    let items = [
        lbl("t"),
        br(Leave_S, "m"),
        lbl("h"),
        op(Nop),
        lbl("m"),
        op(Endfinally),
        lbl("end"),
        op(Ret),
    ];
    for kind in [finally, fault] {
        let got = eh_codes(&items, |a| vec![kind(a, ("t", "h"), ("h", "end"))]);
        assert_eq!(got, [Code::LeaveIntoHandler]);
    }
}

/// A try may start at a catch's or filter's first instruction, where the exception object is on
/// the stack (as ILVerify accepts); one instruction later it may not.
#[test]
fn try_at_the_start_of_a_handler() {
    // try { leave } catch { try { pop; leave } finally { endfinally } leave }
    let items = [
        lbl("t"),
        br(Leave_S, "end"),
        lbl("h"),
        lbl("it"),
        op(Pop),
        br(Leave_S, "in"),
        lbl("ih"),
        op(Endfinally),
        lbl("in"),
        br(Leave_S, "end"),
        lbl("he"),
        lbl("end"),
        op(Ret),
    ];
    let clauses = |a: &Asm| {
        vec![
            finally(a, ("it", "ih"), ("ih", "in")),
            catch(a, ("t", "h"), ("h", "he")),
        ]
    };
    assert_eq!(eh_codes(&items, clauses), []);
    // The same under a filter's handler, and at the filter's own start.
    let items = [
        lbl("t"),
        br(Leave_S, "end"),
        lbl("f"),
        lbl("ft"),
        op(Pop),
        br(Leave_S, "fn"),
        lbl("fh"),
        op(Endfinally),
        lbl("fn"),
        op(Ldc_I4_1),
        op(Endfilter),
        lbl("h"),
        lbl("it"),
        op(Pop),
        br(Leave_S, "in"),
        lbl("ih"),
        op(Endfinally),
        lbl("in"),
        br(Leave_S, "end"),
        lbl("he"),
        lbl("end"),
        op(Ret),
    ];
    let got = eh_codes(&items, |a| {
        vec![
            finally(a, ("ft", "fh"), ("fh", "fn")),
            finally(a, ("it", "ih"), ("ih", "in")),
            filter(a, ("t", "f"), "f", ("h", "he")),
        ]
    });
    assert!(!got.contains(&Code::TryNonEmptyStack), "{got:?}");
    // A try one instruction into the catch is entered with the exception object: reported.
    let items = [
        lbl("t"),
        br(Leave_S, "end"),
        lbl("h"),
        op(Nop),
        lbl("it"),
        op(Pop),
        br(Leave_S, "in"),
        lbl("ih"),
        op(Endfinally),
        lbl("in"),
        br(Leave_S, "end"),
        lbl("he"),
        lbl("end"),
        op(Ret),
    ];
    let got = eh_codes(&items, |a| {
        vec![
            finally(a, ("it", "ih"), ("ih", "in")),
            catch(a, ("t", "h"), ("h", "he")),
        ]
    });
    assert_eq!(got, [Code::TryNonEmptyStack]);
}

#[test]
fn return_from_regions() {
    let mut items = try_catch();
    items[2] = op(Ret);
    let got = eh_codes(&items, |a| vec![catch(a, ("t", "h"), ("h", "he"))]);
    assert!(got.contains(&Code::ReturnFromTry), "{got:?}");
    let mut items = try_catch();
    items[5] = op(Ret);
    let got = eh_codes(&items, |a| vec![catch(a, ("t", "h"), ("h", "he"))]);
    assert!(got.contains(&Code::ReturnFromHandler), "{got:?}");
}

#[test]
fn leave_rules() {
    // leave out of a finally.
    let mut items = nested();
    items[10] = br(Leave_S, "end");
    let got = eh_codes(&items, nested_clauses);
    assert!(got.contains(&Code::LeaveOutOfFinally), "{got:?}");
    // leave from a catch back to its try's start: allowed.
    let mut items = try_catch();
    items[5] = br(Leave_S, "t");
    assert_eq!(
        eh_codes(&items, |a| vec![catch(a, ("t", "h"), ("h", "he"))]),
        []
    );
    // leave into the middle of a try.
    let items = [
        lbl("t"),
        op(Nop),
        lbl("mid"),
        br(Leave_S, "end"),
        lbl("h"),
        op(Pop),
        br(Leave_S, "mid"),
        lbl("he"),
        lbl("end"),
        op(Ret),
    ];
    let got = eh_codes(&items, |a| vec![catch(a, ("t", "h"), ("h", "he"))]);
    assert!(got.contains(&Code::LeaveIntoTry), "{got:?}");
    // leave into a handler.
    let items = [
        lbl("t"),
        br(Leave_S, "h"),
        lbl("h"),
        op(Pop),
        br(Leave_S, "end"),
        lbl("he"),
        lbl("end"),
        op(Ret),
    ];
    let got = eh_codes(&items, |a| vec![catch(a, ("t", "h"), ("h", "he"))]);
    assert!(got.contains(&Code::LeaveIntoHandler), "{got:?}");
    // leave out of a fault.
    let items = [
        lbl("t"),
        br(Leave_S, "end"),
        lbl("h"),
        br(Leave_S, "end"),
        lbl("end"),
        op(Ret),
    ];
    let got = eh_codes(&items, |a| vec![fault(a, ("t", "h"), ("h", "end"))]);
    assert!(got.contains(&Code::LeaveOutOfFault), "{got:?}");
    // leave out of a filter.
    let mut items = with_filter();
    items[5] = br(Leave_S, "end");
    let got = eh_codes(&items, filter_clause);
    assert!(got.contains(&Code::LeaveOutOfFilter), "{got:?}");
}

#[test]
fn endfinally_and_rethrow_placement() {
    invalid(&[op(Endfinally)], Code::Endfinally);
    invalid(&[op(Rethrow)], Code::Rethrow);
    let mut items = try_catch();
    items[5] = op(Rethrow);
    assert_eq!(
        eh_codes(&items, |a| vec![catch(a, ("t", "h"), ("h", "he"))]),
        []
    );
    let mut items = try_catch();
    items[2] = op(Endfinally);
    let got = eh_codes(&items, |a| vec![catch(a, ("t", "h"), ("h", "he"))]);
    assert!(got.contains(&Code::Endfinally), "{got:?}");
    // rethrow in a try nested in a catch: accepted (C# allows `throw;` there).
    let items = [
        lbl("t"),
        br(Leave_S, "end"),
        lbl("h"),
        op(Pop),
        lbl("it"),
        op(Rethrow),
        lbl("ih"),
        op(Endfinally),
        lbl("ihe"),
        br(Leave_S, "end"),
        lbl("he"),
        lbl("end"),
        op(Ret),
    ];
    let got = eh_codes(&items, |a| {
        vec![
            finally(a, ("it", "ih"), ("ih", "ihe")),
            catch(a, ("t", "h"), ("h", "he")),
        ]
    });
    assert_eq!(got, []);
}

// ---- Deep region trees ----
//
// The transfer and placement rules find the region a walk up the tree would stop at through
// shortcuts; these bodies make the walks long.

/// Where a [`tower`] stands.
#[derive(Clone, Copy, PartialEq)]
enum Base {
    /// In plain code.
    Plain,
    /// In the handler of a try/catch or try/finally that comes first.
    Catch,
    Finally,
}

/// What the innermost try of a [`tower`] holds.
#[derive(Clone, Copy, PartialEq)]
enum Top {
    /// `leave` to the method's final `ret`.
    LeaveEnd,
    /// These bytes (which must end the block).
    Code(&'static [u8]),
}

/// A built [`tower`]: its code and clauses (innermost first), where the tower starts and where
/// the handler it stands in starts.
struct Tower {
    code: Vec<u8>,
    clauses: Vec<Clause>,
    start: u32,
    handler: u32,
}

/// A tower of `depth` try/finally regions that all start at the same instruction, the
/// innermost holding only `top`, standing on `base`; each try but the innermost leaves to the
/// instruction after the tower. Before everything, when `jump_in`, `ldc.i4.0; brtrue` to the
/// tower's first instruction.
fn tower(depth: usize, base: Base, top: Top, jump_in: bool) -> Tower {
    const LEAVE: u8 = 0xDD;
    // Long `leave`s to the end of the code and to the end of the tower, fixed up at the end.
    let (mut to_end, mut to_after) = (Vec::new(), Vec::new());
    let leave = |code: &mut Vec<u8>, fix: &mut Vec<usize>| {
        code.push(LEAVE);
        fix.push(code.len());
        code.extend_from_slice(&[0; 4]);
    };
    let mut code = Vec::new();
    if jump_in {
        code.extend_from_slice(&[0x16, 0x3A, 0, 0, 0, 0]);
    }
    let (outer_try, mut handler) = (code.len(), 0);
    if base != Base::Plain {
        leave(&mut code, &mut to_end);
        handler = code.len();
        if base == Base::Catch {
            code.push(0x26); // pop the exception
        }
    }
    let start = code.len();
    if jump_in {
        code[2..6].copy_from_slice(&((start - 6) as i32).to_le_bytes());
    }
    match top {
        Top::LeaveEnd => leave(&mut code, &mut to_end),
        Top::Code(bytes) => code.extend_from_slice(bytes),
    }
    let mut clauses = Vec::new();
    for level in 0..depth {
        if level > 0 {
            leave(&mut code, &mut to_after);
        }
        let h = code.len();
        code.push(0xDC); // endfinally
        clauses.push(Clause {
            flags: Clause::FLAG_FINALLY,
            try_offset: start as u32,
            try_length: (h - start) as u32,
            handler_offset: h as u32,
            handler_length: 1,
            class_or_filter: 0,
        });
    }
    let after = code.len();
    match base {
        Base::Plain => leave(&mut code, &mut to_end),
        Base::Catch => leave(&mut code, &mut to_end),
        Base::Finally => code.push(0xDC),
    }
    if base != Base::Plain {
        let catch = base == Base::Catch;
        clauses.push(Clause {
            flags: if catch { 0 } else { Clause::FLAG_FINALLY },
            try_offset: outer_try as u32,
            try_length: (handler - outer_try) as u32,
            handler_offset: handler as u32,
            handler_length: (code.len() - handler) as u32,
            class_or_filter: if catch { TYPE } else { 0 },
        });
    }
    let end = code.len();
    code.push(0x2A);
    for (fix, to) in [(to_end, end), (to_after, after)] {
        for at in fix {
            let disp = to as i64 - (at as i64 + 4);
            code[at..at + 4].copy_from_slice(&(disp as i32).to_le_bytes());
        }
    }
    Tower {
        code,
        clauses,
        start: start as u32,
        handler: handler as u32,
    }
}

/// The findings on a [`tower`] as (code, offset, message).
fn tower_findings(t: &Tower) -> Vec<(Code, u32, String)> {
    verify_code(&t.code, &t.clauses, Some(8), &res())
        .into_iter()
        .map(|d| (d.code, d.offset, d.message))
        .collect()
}

const DEPTH: usize = 3000;
const RETHROW: Top = Top::Code(&[0xFE, 0x1A]);
const ENDFINALLY: Top = Top::Code(&[0xDC]);
const THROW_NULL: Top = Top::Code(&[0x14, 0x7A]);

#[test]
fn deep_towers_are_valid_where_the_walk_would_pass() {
    // A leave from the innermost of many tries out to the end, in plain code or a catch.
    for base in [Base::Plain, Base::Catch] {
        assert_eq!(
            tower_findings(&tower(DEPTH, base, Top::LeaveEnd, false)),
            []
        );
    }
    // rethrow in tries in a catch; endfinally in tries in a finally.
    assert_eq!(
        tower_findings(&tower(DEPTH, Base::Catch, RETHROW, false)),
        []
    );
    assert_eq!(
        tower_findings(&tower(DEPTH, Base::Finally, ENDFINALLY, false)),
        []
    );
    // A branch from plain code to the first instruction of every try of the tower.
    assert_eq!(
        tower_findings(&tower(DEPTH, Base::Plain, THROW_NULL, true)),
        []
    );
}

#[test]
fn deep_towers_report_the_region_the_walk_would_stop_at() {
    // A leave from the innermost try, through every try, out of the finally under them.
    let t = tower(DEPTH, Base::Finally, Top::LeaveEnd, false);
    let got = tower_findings(&t);
    let leave = (
        Code::LeaveOutOfFinally,
        t.start,
        format!(
            "leave leaves the finally handler starting at IL_{:04x}",
            t.handler
        ),
    );
    assert_eq!(got, [leave]);
    // rethrow and endfinally where the handler under the tower is of the wrong kind.
    let t = tower(DEPTH, Base::Finally, RETHROW, false);
    let got: Vec<_> = tower_findings(&t).into_iter().map(|g| (g.0, g.1)).collect();
    assert_eq!(got, [(Code::Rethrow, t.start)]);
    let t = tower(DEPTH, Base::Catch, ENDFINALLY, false);
    let got: Vec<_> = tower_findings(&t).into_iter().map(|g| (g.0, g.1)).collect();
    assert_eq!(got, [(Code::Endfinally, t.start)]);
    // A branch from plain code past the first instruction of every try into the catch.
    let t = tower(DEPTH, Base::Catch, THROW_NULL, true);
    let entry = (
        Code::BranchIntoHandler,
        1,
        format!(
            "brtrue enters the catch handler starting at IL_{:04x} at IL_{:04x}",
            t.handler, t.start
        ),
    );
    assert_eq!(tower_findings(&t), [entry]);
}

/// The hostile shapes at a moderate size: the answers, not the time.
#[cfg(feature = "gen")]
mod hostile_shapes {
    use super::*;
    use crate::generate::hostile;

    fn findings(code: &[u8], clauses: &[Clause]) -> Vec<Code> {
        verify_code(code, clauses, Some(8), &NoResolver)
            .iter()
            .map(|d| d.code)
            .collect()
    }

    fn parts(h: &hostile::Hostile) -> (Vec<u8>, Vec<Clause>) {
        let body = Body::parse(&h.bytes).unwrap();
        (body.code.to_vec(), body.clauses().collect())
    }

    #[test]
    fn nested_regions_verify_and_broken_nesting_is_caught() {
        let (code, clauses) = parts(&hostile::nested_try(20_000));
        assert_eq!(clauses.len(), 20_000);
        assert_eq!(findings(&code, &clauses), []);
        assert_eq!(
            max_stack(&code, &clauses, &NoResolver),
            Ok(0),
            "finally handlers start empty"
        );
        // An outer clause listed before the one nested in it.
        let mut swapped = clauses.clone();
        swapped.swap(10_000, 10_001);
        let got = findings(&code, &swapped);
        assert!(
            !got.is_empty() && got.iter().all(|&c| c == Code::EHOrderInnerAfterOuter),
            "{got:?}"
        );
        // The outermost try stretched over its own handler.
        let mut stretched = clauses.clone();
        let last = stretched.len() - 1;
        stretched[last].try_length += 1;
        assert!(findings(&code, &stretched).contains(&Code::EHOverlap));
        // The innermost try's leave turned into a fall-through out of it.
        let mut falls = code.clone();
        let leave = clauses[0].handler_offset as usize - 5;
        falls[leave..leave + 5].fill(0x00);
        let got = findings(&falls, &clauses);
        assert!(got.contains(&Code::FallthroughIntoHandler), "{got:?}");
    }

    /// A body with regions large enough that the decoder's lists are made at their counted
    /// sizes and the offsets list is let go while the region rules run: findings of the
    /// region, prefix and stack rules still name the right offsets.
    #[test]
    fn a_large_body_with_regions_reports_at_the_right_offsets() {
        let (mut code, clauses) = parts(&hostile::sequential_try(30_000));
        // Clause k: `nop` at 4k, `leave.s` at 4k + 1, `endfinally` at 4k + 3.
        code[4 * 5_000 + 3] = Nop as u8;
        // `volatile.` (FE 13) before a `nop`, in place of `nop; leave.s`.
        code[4 * 10_000..4 * 10_000 + 3].copy_from_slice(&[0xFE, 0x13, Nop as u8]);
        code[4 * 20_000] = Ret as u8;
        code[4 * 25_000 + 1] = Br_S as u8;
        let got: Vec<(u32, Code)> = verify_code(&code, &clauses, Some(8), &NoResolver)
            .iter()
            .map(|d| (d.offset, d.code))
            .collect();
        assert_eq!(
            got,
            [
                (4 * 5_000 + 3, Code::FallthroughException),
                (4 * 10_000, Code::Volatile),
                (4 * 10_000 + 2, Code::FallthroughException),
                (4 * 10_000 + 2, Code::FallthroughIntoHandler),
                (4 * 20_000, Code::ReturnFromTry),
                (4 * 25_000 + 1, Code::BranchOutOfTry),
            ]
        );
    }

    #[test]
    fn sequential_regions_verify_and_an_overlap_is_caught() {
        let (code, clauses) = parts(&hostile::sequential_try(20_000));
        assert_eq!(findings(&code, &clauses), []);
        let mut overlap = clauses.clone();
        overlap[10_000].handler_length += 1;
        assert!(findings(&code, &overlap).contains(&Code::EHOverlap));
    }
}

// ---- Prefixes ----

#[test]
fn prefixes() {
    valid(&[op(Ldarg_0), op(Volatile), op(Ldind_I4), op(Pop), op(Ret)]);
    valid(&[
        op(Ldarg_0),
        i8_(Unaligned, 1),
        op(Volatile),
        op(Ldind_I4),
        op(Pop),
        op(Ret),
    ]);
    valid(&[op(Volatile), tok(Ldsfld, FIELD), op(Pop), op(Ret)]);
    invalid(&[op(Volatile), op(Nop), op(Ret)], Code::Volatile);
    invalid(
        &[i8_(Unaligned, 1), tok(Ldsfld, FIELD), op(Pop), op(Ret)],
        Code::Unaligned,
    );
    valid(&[
        op(Ldarg_0),
        tok(Constrained, TYPE),
        tok(Callvirt, INST_INT0),
        op(Pop),
        op(Ret),
    ]);
    valid(&[
        op(Ldarg_0),
        tok(Constrained, TYPE),
        tok(Call, INST_INT0),
        op(Pop),
        op(Ret),
    ]);
    invalid(
        &[tok(Constrained, TYPE), op(Nop), op(Ret)],
        Code::Constrained,
    );
    valid(&[
        op(Ldarg_0),
        op(Ldc_I4_0),
        op(Readonly),
        tok(Ldelema, TYPE),
        op(Pop),
        op(Ret),
    ]);
    invalid(&[op(Readonly), op(Nop), op(Ret)], Code::ReadOnly);
    valid(&[
        op(Ldarg_0),
        i8_(No, 1),
        tok(Castclass, TYPE),
        op(Pop),
        op(Ret),
    ]);
    invalid(&[i8_(No, 1), op(Nop), op(Ret)], Code::NoPrefix);
}

#[test]
fn tail_calls() {
    valid(&[op(Tail), tok(Call, VOID0), op(Ret)]);
    valid(&[op(Tail), tok(Call, VOID0), br(Br_S, "r"), lbl("r"), op(Ret)]);
    let items = [
        op(Ldarg_0),
        tok(Constrained, TYPE),
        op(Tail),
        tok(Callvirt, INST_INT0),
        op(Ret),
    ];
    assert_eq!(run(&items, &[], &int_res()), []);
    invalid(&[op(Tail), op(Nop), op(Ret)], Code::TailCall);
    invalid(
        &[op(Tail), tok(Call, VOID0), op(Nop), op(Ret)],
        Code::TailRet,
    );
    invalid(
        &[op(Ldc_I4_0), op(Tail), tok(Call, VOID0), op(Pop), op(Ret)],
        Code::TailRet,
    );
    let r = int_res();
    let items = [
        op(Ldc_I4_0),
        op(Ldc_I4_0),
        op(Tail),
        tok(Call, INT1),
        op(Ret),
    ];
    let got = run(&items, &[], &r);
    assert!(got.contains(&Code::TailStackEmpty), "{got:?}");
    // Inside a try.
    let items = [
        lbl("t"),
        op(Tail),
        tok(Call, VOID0),
        op(Ret),
        lbl("h"),
        op(Endfinally),
        lbl("end"),
    ];
    let got = eh_codes(&items, |a| vec![finally(a, ("t", "h"), ("h", "end"))]);
    assert!(got.contains(&Code::TailCallInsideER), "{got:?}");
}

// ---- Operands ----

#[test]
fn operands() {
    valid(&[var(Ldloc_S, 3), op(Pop), op(Ret)]);
    invalid(
        &[var(Ldloc_S, 4), op(Pop), op(Ret)],
        Code::UnrecognizedLocalNumber,
    );
    invalid(
        &[var(Ldloca, 9), op(Pop), op(Ret)],
        Code::UnrecognizedLocalNumber,
    );
    valid(&[op(Ldloc_3), op(Pop), op(Ret)]);
    let r = res().locals(1);
    assert_eq!(
        run(&[op(Ldc_I4_0), op(Stloc_1), op(Ret)], &[], &r),
        [Code::UnrecognizedLocalNumber]
    );
    valid(&[op(Ldarg_1), op(Pop), op(Ret)]);
    invalid(
        &[op(Ldarg_2), op(Pop), op(Ret)],
        Code::UnrecognizedArgumentNumber,
    );
    invalid(
        &[var(Starg_S, 7), op(Ret)],
        Code::UnrecognizedArgumentNumber,
    );
    valid(&[tok(Ldstr, STR), op(Pop), op(Ret)]);
    invalid(
        &[tok(Ldstr, 0x7000_0002), op(Pop), op(Ret)],
        Code::StringOperand,
    );
    invalid(&[tok(Ldstr, TYPE), op(Pop), op(Ret)], Code::StringOperand);
    invalid(
        &[tok(Ldsfld, TYPE), op(Pop), op(Ret)],
        Code::ExpectedFieldToken,
    );
    invalid(
        &[tok(Ldsfld, 0x0400_0002), op(Pop), op(Ret)],
        Code::TokenResolve,
    );
    invalid(&[tok(Call, FIELD), op(Ret)], Code::ExpectedMethodToken);
    invalid(&[tok(Box, FIELD), op(Ret)], Code::ExpectedTypeToken);
    invalid(&[tok(Ldtoken, STR), op(Pop), op(Ret)], Code::TokenResolve);
    invalid(
        &[tok(Ldtoken, 0x0100_0000), op(Pop), op(Ret)],
        Code::TokenResolve,
    );
    invalid(
        &[op(Ldnull), tok(Calli, VOID0), op(Ret)],
        Code::ExpectedSigToken,
    );
    valid(&[tok(Ldtoken, FIELD), op(Pop), op(Ret)]);
}

#[test]
fn parsed_body_entry_points() {
    // Tiny header: 2 code bytes `ldc.i4.0 pop`, falls off the end.
    let bytes = [(3 << 2) | 2, 0x16, 0x26, 0x2A];
    let body = crate::body::Body::parse(&bytes).unwrap();
    assert_eq!(verify(&body, &res()), []);
    assert_eq!(body_max_stack(&body, &res()), Ok(1));
    let bytes = [(2 << 2) | 2, 0x16, 0x26];
    let body = crate::body::Body::parse(&bytes).unwrap();
    let d = verify_first(&body, &res()).unwrap();
    assert_eq!((d.code, d.offset), (Code::MethodFallthrough, 1));
}

#[test]
fn code_names_are_stable() {
    for &c in Code::ALL {
        assert_eq!(Code::from_name(c.as_str()), Some(c));
        assert_eq!(
            serde_json::to_string(&c).unwrap(),
            format!("\"{}\"", c.as_str())
        );
    }
}

// ---- Mutation suite ----

struct Case {
    name: &'static str,
    items: Vec<It>,
    clauses: fn(&Asm) -> Vec<Clause>,
    resolver: fn() -> SyntheticResolver,
}

fn no_clauses(_: &Asm) -> Vec<Clause> {
    vec![]
}
fn one_catch(a: &Asm) -> Vec<Clause> {
    vec![catch(a, ("t", "h"), ("h", "he"))]
}

fn check(case: &Case, expected: Code) {
    let a = asm(&case.items);
    let clauses = (case.clauses)(&a);
    let got: Vec<_> = verify_code(&a.code, &clauses, Some(8), &(case.resolver)())
        .into_iter()
        .map(|d| d.code)
        .collect();
    assert!(
        got.contains(&expected),
        "{}: expected {expected:?}, got {got:?}",
        case.name
    );
}

/// Like [`check`], but mutating the assembled bytes or clauses.
fn check_raw(
    case: &Case,
    expected: Code,
    mutate: impl Fn(&Asm, &mut Vec<u8>, &mut Vec<Clause>, &mut u16),
) {
    let a = asm(&case.items);
    let mut code = a.code.clone();
    let mut clauses = (case.clauses)(&a);
    let mut max = 8;
    mutate(&a, &mut code, &mut clauses, &mut max);
    let got: Vec<_> = verify_code(&code, &clauses, Some(max), &(case.resolver)())
        .into_iter()
        .map(|d| d.code)
        .collect();
    assert!(
        got.contains(&expected),
        "{}: expected {expected:?}, got {got:?}",
        case.name
    );
}

fn with(case: &Case, edit: impl FnOnce(&mut Vec<It>)) -> Case {
    let mut items = case.items.clone();
    edit(&mut items);
    Case {
        name: case.name,
        items,
        clauses: case.clauses,
        resolver: case.resolver,
    }
}

fn position(items: &[It], pred: impl Fn(&It) -> bool) -> usize {
    items.iter().position(pred).unwrap()
}

#[test]
fn mutations_are_caught() {
    // A loop summing its argument down to zero, with a ternary before the merge.
    let lp = Case {
        name: "loop",
        items: vec![
            op(Ldc_I4_0),
            var(Stloc_S, 0),
            br(Br_S, "test"),
            lbl("body"),
            var(Ldloc_S, 0),
            op(Ldarg_0),
            op(Add),
            var(Stloc_S, 0),
            op(Ldarg_0),
            op(Ldc_I4_1),
            op(Sub),
            var(Starg_S, 0),
            lbl("test"),
            op(Ldarg_0),
            br(Brtrue_S, "body"),
            op(Ldarg_1),
            br(Brtrue_S, "a"),
            op(Ldc_I4_1),
            br(Br_S, "b"),
            lbl("a"),
            op(Ldc_I4_2),
            lbl("b"),
            op(Pop),
            op(Ret),
        ],
        clauses: no_clauses,
        resolver: res,
    };
    let eh = Case {
        name: "try/catch",
        items: try_catch(),
        clauses: one_catch,
        resolver: res,
    };
    let nest = Case {
        name: "nested",
        items: nested(),
        clauses: nested_clauses,
        resolver: res,
    };
    let flt = Case {
        name: "filter",
        items: with_filter(),
        clauses: filter_clause,
        resolver: res,
    };
    let tail = Case {
        name: "tail",
        items: vec![op(Ldarg_0), op(Tail), tok(Call, INT1), op(Ret)],
        clauses: no_clauses,
        resolver: int_res,
    };
    for case in [&lp, &eh, &nest, &flt, &tail] {
        let a = asm(&case.items);
        let got = verify_code(&a.code, &(case.clauses)(&a), Some(8), &(case.resolver)());
        assert_eq!(got, [], "{} must start valid", case.name);
    }

    // Branch into the middle of an instruction: `br.s test` moved one byte on.
    check_raw(&lp, Code::BadJumpTarget, |a, code, _, _| {
        let at = a.at("test") as usize - a.at("body") as usize;
        let br = a.at("body") as usize - 2;
        assert_eq!(code[br], 0x2B);
        code[br + 1] = at as u8 + 2;
    });
    // Branch past the end.
    check_raw(&lp, Code::BadBranch, |a, code, _, _| {
        let br = a.at("body") as usize - 2;
        code[br + 1] = 0x7F;
    });
    // Drop a pop.
    check(
        &with(&lp, |v| {
            let p = position(v, |x| matches!(x, It::Op(Pop, _)));
            v.remove(p);
        }),
        Code::ReturnVoid,
    );
    // A stray push before a merge.
    check(
        &with(&lp, |v| {
            let p = position(v, |x| matches!(x, It::Op(Ldc_I4_1, _)));
            v.insert(p + 1, op(Ldnull));
        }),
        Code::PathStackDepth,
    );
    // Declared MaxStack one too small.
    let a = asm(&lp.items);
    let need = max_stack(&a.code, &[], &res()).unwrap();
    check_raw(&lp, Code::StackOverflow, |_, _, _, max| *max = need - 1);
    // Fall off the end.
    check(
        &with(&lp, |v| {
            v.pop();
        }),
        Code::MethodFallthrough,
    );
    // Shift a clause boundary off an instruction start (into the long leave).
    let wide = with(&eh, |v| v[2] = br(Leave, "end"));
    check_raw(&wide, Code::EHBoundaryNotInstructionStart, |_, _, cl, _| {
        cl[0].try_length -= 1
    });
    // Two clauses that overlap.
    check_raw(&nest, Code::EHOverlap, |a, _, cl, _| {
        cl[0].handler_length = a.at("he") - a.at("ih");
    });
    // Inner and outer clause order swapped.
    check_raw(&nest, Code::EHOrderInnerAfterOuter, |_, _, cl, _| {
        cl.swap(0, 1)
    });
    // br out of a try.
    check(&with(&eh, |v| v[2] = br(Br_S, "end")), Code::BranchOutOfTry);
    // leave out of a finally.
    check(
        &with(&nest, |v| v[10] = br(Leave_S, "end")),
        Code::LeaveOutOfFinally,
    );
    // endfinally outside a handler.
    check(&with(&eh, |v| v[1] = op(Endfinally)), Code::Endfinally);
    // nop between tail. call and ret.
    check(&with(&tail, |v| v.insert(3, op(Nop))), Code::TailRet);
    // A filter without endfilter.
    check(
        &with(&flt, |v| {
            v[5] = op(Pop);
            v.insert(5, op(Nop));
        }),
        Code::EHFilterNoEndfilter,
    );
}

// ---- Robustness ----

#[test]
fn arbitrary_bytes_never_panic() {
    // A small deterministic generator: structured-ish bytes with clause tables.
    let mut rnd = xorshift(0x1234_5678_9abc_def0);
    let mut v = Verifier::new();
    let r = res();
    for _ in 0..20_000 {
        let len = (rnd() % 48) as usize;
        let code: Vec<u8> = (0..len)
            .map(|_| match rnd() % 4 {
                0 => [0x2A, 0x26, 0x00, 0xDC, 0xFE, 0x2B, 0xDE, 0x16][(rnd() % 8) as usize],
                _ => rnd() as u8,
            })
            .collect();
        let n = (rnd() % 4) as usize;
        let clauses: Vec<Clause> = (0..n)
            .map(|_| {
                let small = |x: u64| (x % (len as u64 + 2)) as u32;
                Clause {
                    flags: (rnd() % 5) as u32,
                    try_offset: small(rnd()),
                    try_length: small(rnd()),
                    handler_offset: small(rnd()),
                    handler_length: if rnd().is_multiple_of(50) {
                        u32::MAX
                    } else {
                        small(rnd())
                    },
                    class_or_filter: if rnd().is_multiple_of(2) {
                        small(rnd())
                    } else {
                        TYPE
                    },
                }
            })
            .collect();
        v.verify_code(&code, &clauses, Some((rnd() % 10) as u16), &r);
        let _ = v.max_stack(&code, &clauses, &r);
    }
}

/// The verifier's decode table must agree with the codec's: same opcode and length for every
/// encoding, and an operand rule exactly where the opcode facts say there is one.
#[test]
fn decode_table_agrees_with_the_codec() {
    use crate::opcode::DECODE;
    for key in 0..512 {
        let d = fx::DEC[key];
        let e = if key < 256 {
            DECODE.one[key]
        } else {
            DECODE.two[key - 256]
        };
        match e.opcode {
            Some(op) => {
                assert_eq!(d.op, op, "key {key:#x}");
                assert_eq!(d.len, e.len, "{op}");
                assert_eq!(d.operand, e.operand, "{op}");
                let operand_rule = d.fx.kind & fx::OPERAND != 0;
                assert_eq!(d.check != fx::check::NONE, operand_rule, "{op}");
            }
            _ => assert_eq!(d.len, 0, "key {key:#x} is undefined"),
        }
    }
}

/// A verifier reused across bodies (whose offset index is never cleared) reports exactly what
/// a fresh one does.
#[test]
fn reused_verifier_matches_fresh_one() {
    let mut rnd = xorshift(0x2545_F491_4F6C_DD1D);
    let r = SyntheticResolver::new()
        .method(2, false)
        .locals(2)
        .call(0x0A00_0001, CallSig::static_method(1, false))
        .closed();
    let mut reused = Verifier::new();
    for _ in 0..5_000 {
        let len = (rnd() % 64) as usize;
        let code: Vec<u8> = (0..len)
            .map(|_| match rnd() % 3 {
                0 => [0x2A, 0x2B, 0x38, 0x45, 0x16, 0x17, 0x58, 0xFE, 0x06, 0x02]
                    [(rnd() % 10) as usize],
                _ => rnd() as u8,
            })
            .collect();
        let a = reused.verify_code(&code, &[], Some(8), &r).to_vec();
        let b = verify_code(&code, &[], Some(8), &r);
        assert_eq!(a, b, "{code:02x?}");
    }
}

/// `ImageResolver`'s batched token check gives the trait default's answer for every kind.
#[test]
fn image_tokens_pass_agrees_with_the_default() {
    use crate::image::Image;
    use crate::opcode::OperandKind as K;
    let kinds = [
        K::Tok,
        K::Type,
        K::Field,
        K::Method,
        K::String,
        K::Sig,
        K::None,
        K::I,
    ];
    for (_, bytes) in crate::corpus::EMBEDDED.iter().take(3) {
        let image = Image::parse(bytes).unwrap();
        let r = ImageResolver::new(&image);
        let heap = image.user_strings();
        for index in 0..heap.data.len() as u32 + 8 {
            let token = 0x7000_0000 | index;
            let expected = r.string_exists(token) == Some(true);
            assert_eq!(r.tokens_pass(&[(K::String, token)]), expected, "{index}");
        }
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..20_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let table = match seed % 4 {
                0 => (seed >> 8) as u32 % 0x2E,
                1 => 0x70,
                _ => (seed >> 8) as u32 & 0xFF,
            };
            let rid = match (seed >> 20) % 3 {
                0 => (seed >> 24) as u32 % 8,
                1 => (seed >> 24) as u32 % 4096,
                _ => (seed >> 24) as u32 & 0xFF_FFFF,
            };
            let token = (table << 24) | rid;
            let kind = kinds[(seed >> 56) as usize % kinds.len()];
            let expected = r.token_fits(kind, token)
                && if kind == K::String {
                    r.string_exists(token) != Some(false)
                } else {
                    token & 0x00FF_FFFF != 0 && r.token_exists(token) != Some(false)
                };
            assert_eq!(
                r.tokens_pass(&[(kind, token)]),
                expected,
                "{kind:?} {token:#x}"
            );
        }
    }
}

/// `len` bytes of code: opcodes that end bodies, branch, call, take long operands or are two
/// bytes long, zeros, and noise.
fn random_code(rnd: &mut impl FnMut() -> u64, len: usize) -> Vec<u8> {
    const OPS: [u8; 14] = [
        0x2A, 0x2B, 0x38, 0x45, 0x16, 0x17, 0x58, 0xFE, 0x06, 0x02, 0x28, 0x14, 0x21, 0x23,
    ];
    (0..len)
        .map(|_| match rnd() % 4 {
            0 => OPS[(rnd() % OPS.len() as u64) as usize],
            1 => 0,
            _ => rnd() as u8,
        })
        .collect()
}

/// The fast decoder's output (when it accepts a body) equals the reporting decoder's.
#[test]
fn fast_decode_matches_reporting_decode() {
    let mut rnd = xorshift(0x1234_5678_9ABC_DEF1);
    let r = SyntheticResolver::new().method(3, false).locals(4);
    let mut v = Verifier::new();
    let mut accepted = 0;
    for _ in 0..20_000 {
        let len = (rnd() % 48) as usize + 1;
        let code = random_code(&mut rnd, len);
        let ctx = Ctx {
            method: Resolver::method(&r),
            locals: r.local_count(),
            declared_max_stack: None,
        };
        v.code_len = code.len();
        let snapshot = |v: &Verifier| {
            let ins: Vec<_> = v.ins[..v.n]
                .iter()
                .zip(&v.offs[..v.n])
                .map(|(x, &off)| (off, x.op(), x.flags))
                .collect();
            (ins, v.branches[..v.nb].to_vec())
        };
        v.out.diags.clear();
        match flow::decode_into::<_, false>(&mut v, &code, code.len(), None, &ctx, &r) {
            Some(tokens) if r.tokens_pass(&v.tokens[..tokens]) => {}
            _ => continue,
        }
        let fast = snapshot(&v);
        assert!(flow::decode_into::<_, true>(&mut v, &code, code.len(), None, &ctx, &r).is_some());
        assert!(v.out.diags.is_empty(), "{code:02x?}");
        assert_eq!(fast, snapshot(&v), "{code:02x?}");
        // With the lists made at their counted sizes, from nothing: the same.
        let sizes = flow::count(&code, code.len());
        assert_eq!(sizes, Some((v.n, v.nb)), "{code:02x?}");
        let mut fresh = Verifier::new();
        fresh.code_len = code.len();
        assert!(
            flow::decode_into::<_, false>(&mut fresh, &code, code.len(), sizes, &ctx, &r).is_some()
        );
        assert_eq!(fast, snapshot(&fresh), "{code:02x?}");
        accepted += 1;
    }
    assert!(accepted > 1_000, "{accepted}");
}

/// The start index's walks agree with its search: the next start after each byte, and every
/// start in order.
#[test]
fn start_index_walks_agree_with_its_search() {
    let mut rnd = xorshift(0x5151_7A7A_0F0F_C3C3);
    for _ in 0..300 {
        let len = (rnd() % 700) as usize + 1;
        // Sparse or dense starts, always one at 0 (as decoded code has).
        let every = rnd() % 40 + 1;
        let offs: Vec<u32> = (0..len as u32)
            .filter(|&o| o == 0 || rnd().is_multiple_of(every))
            .collect();
        let mut index = StartIndex::default();
        index.build(&offs, len);
        let mut listed = Vec::new();
        index.fill_offsets(&mut listed, offs.len());
        assert_eq!(listed, offs);
        for (k, &o) in offs.iter().enumerate() {
            assert_eq!(index.offset_of(k as u32), Some(o));
            assert_eq!(index.next_after(o), offs.get(k + 1).copied(), "{len} {o}");
        }
        for o in 0..len as u32 {
            let want = offs.iter().copied().find(|&s| s > o);
            assert_eq!(index.next_after(o), want, "{len} {o}");
        }
    }
}

/// Bytes after the code in the caller's buffer never change a finding: random bodies verified
/// from a buffer with random slack give exactly the findings (and MaxStack) of the code alone.
#[test]
fn slack_after_the_code_changes_nothing() {
    let mut rnd = xorshift(0x0BAD_5EED_F00D_CAFE);
    let r = SyntheticResolver::new().method(3, false).locals(4);
    let (mut exact, mut padded) = (Verifier::new(), Verifier::new());
    let mut findings = 0;
    for _ in 0..20_000 {
        let len = (rnd() % 40) as usize + 1;
        // `FE` last half of the time, so that its second byte is the first byte of slack.
        let mut buf = random_code(&mut rnd, len);
        if rnd().is_multiple_of(2) {
            buf[len - 1] = 0xFE;
        }
        buf.extend((0..(rnd() % 12)).map(|_| rnd() as u8));
        let code = buf[..len].to_vec();
        let want = exact.verify_code(&code, &[], Some(8), &r).to_vec();
        let got = padded
            .verify_code_in(&buf, len, ClauseTable::EMPTY, Some(8), &r, &Options::ALL)
            .to_vec();
        assert_eq!(want, got, "{buf:02x?} ({len} bytes of code)");
        assert_eq!(
            exact.max_stack(&code, &[], &r),
            padded.max_stack_in(&buf, len, &[], &r),
            "{buf:02x?}"
        );
        findings += want.len();
    }
    assert!(findings > 1_000, "{findings}");
}

/// Every bad target is reported, in order, however many there are and wherever they sit among
/// good ones: the target resolver resumes after each fault.
#[test]
fn every_bad_target_is_reported() {
    // ldc.i4.0; switch (3) [+100 outside, -15 inside the switch, +0 good]; ldc.i4.0; pop;
    // br.s +100 (outside); ret
    let mut code = vec![0x16, 0x45, 3, 0, 0, 0];
    for d in [100i32, -15, 0] {
        code.extend_from_slice(&d.to_le_bytes());
    }
    code.extend_from_slice(&[0x16, 0x26, 0x2B, 100, 0x2A]);
    let r = SyntheticResolver::new().method(0, true);
    let diags = Verifier::new().verify_code(&code, &[], None, &r).to_vec();
    let found: Vec<_> = diags.iter().map(|d| (d.code, d.offset)).collect();
    for want in [
        (Code::BadBranch, 1),
        (Code::BadJumpTarget, 1),
        (Code::BadBranch, 20),
    ] {
        assert!(found.contains(&want), "{want:?} not in {found:?}");
    }
}

/// The single pass steps by `instr::fill_lengths` wherever it gives a length: that length must
/// be the one the verifier's own decode table gives, for every one- and two-byte opcode.
#[test]
fn fill_lengths_agrees_with_the_decode_table() {
    for first in [None, Some(0xFE_u8)] {
        for b in 0..=255u8 {
            let mut code: Vec<u8> = first.into_iter().chain([b]).collect();
            code.extend_from_slice(&[0; 8]);
            let mut lens = vec![0; code.len()];
            crate::instr::fill_lengths(&code, &mut lens);
            if lens[0] == 0 {
                continue;
            }
            let w = flow::window(&code, 0);
            let from_table = flow::entry(w, code.len()).map(|e| e.len);
            assert_eq!(from_table, Some(lens[0]), "{first:?} {b:#04x}");
        }
    }
}

// ---- Details ----

#[test]
fn every_code_cites_ecma_335() {
    for &code in Code::ALL {
        let r = code.reference();
        assert!(!r.is_empty(), "{code}: {}", code.description());
        // Every group is named, and the region codes read best beside the EH table.
        assert!(!code.group().as_str().is_empty());
    }
    assert_eq!(Code::StackUnderflow.reference(), "III.1.7.5");
    assert_eq!(Code::BranchOutOfTry.reference(), "I.12.4.2.8, II.19");
    assert!(Code::EHOverlap.concerns_regions() && Code::LeaveOutOfFinally.concerns_regions());
    assert!(!Code::StackUnderflow.concerns_regions());
    assert_eq!(
        ecma_sections("(II.25.4.1: a body) and II.25.4.1."),
        "II.25.4.1"
    );
    assert_eq!(
        ecma_sections("III. and II.x and IX.1 and 1.5 and the end."),
        ""
    );
    assert_eq!(
        Code::UnrecognizedLocalNumber.reference(),
        "III.3.43, III.3.44, III.3.63, II.23.2.6"
    );
    assert_eq!(
        ecma_sections("(III.1.5 Tables III.5–III.7): shifts, and II.19"),
        "III.1.5, II.19"
    );
    assert_eq!(Code::ExpectedNumericType.reference(), "III.1.5");
    assert_eq!(Code::StackUnexpected.group(), CodeGroup::Types);
}

/// A join reached with two depths names both ways there: the branch and the fall-through,
/// each with the depth it brings.
#[test]
fn path_stack_depth_names_the_arrivals() {
    let a = asm(&[
        op(Ldc_I4_0),
        br(Brtrue_S, "x"),
        op(Ldc_I4_1),
        lbl("x"),
        op(Nop),
        op(Ret),
    ]);
    let d = verify_code(&a.code, &[], Some(8), &res());
    let f = d.iter().find(|d| d.code == Code::PathStackDepth).unwrap();
    assert_eq!(f.offset, a.at("x"));
    let got: Vec<(ArrivalKind, u32, u32)> = f
        .detail
        .arrivals
        .iter()
        .map(|a| (a.kind, a.from, a.depth))
        .collect();
    assert_eq!(
        got,
        [
            (ArrivalKind::Branch, 1, 0),
            (ArrivalKind::FallThrough, 3, 1)
        ]
    );
    assert!(
        f.message.contains("depth 0 by the branch at IL_0001")
            && f.message.contains("depth 1 falling through from IL_0003"),
        "{}",
        f.message
    );
    // The single pass never reports, so the details are the full passes' either way.
    single_pass_agrees(&a.code, &[], 8, &res()).unwrap();
    // Stopping at the first finding skips them.
    let first = Verifier::new()
        .verify_code(&a.code, &[], Some(8), &res())
        .to_vec();
    assert_eq!(first, d);
}

/// Many branches to one join: the first [`MAX_ARRIVALS`] are listed, the rest counted.
#[test]
fn arrivals_are_capped() {
    let mut items = vec![op(Ldarg_0)];
    for _ in 0..40 {
        items.push(op(Dup));
        items.push(br(Brtrue, "x"));
    }
    items.extend([
        op(Pop),
        op(Ldc_I4_0),
        op(Ldc_I4_0),
        lbl("x"),
        op(Pop),
        op(Ret),
    ]);
    let a = asm(&items);
    let d = verify_code(&a.code, &[], Some(100), &res());
    let f = d.iter().find(|d| d.code == Code::PathStackDepth).unwrap();
    assert_eq!(f.detail.arrivals.len(), MAX_ARRIVALS);
    assert_eq!(
        f.detail.arrivals.len() as u32 + f.detail.more_arrivals,
        41,
        "{f:?}"
    );
    assert!(f.message.contains("more"), "{}", f.message);
}

/// EH-table findings name their clause and the other clause involved.
#[test]
fn eh_findings_name_their_clauses() {
    let a = asm(&nested());
    let overlap = vec![
        catch(&a, ("it", "ih"), ("ih", "he")),
        finally(&a, ("t", "h"), ("h", "he")),
    ];
    let d = verify_code(&a.code, &overlap, Some(8), &res());
    let f = d.iter().find(|d| d.code == Code::EHOverlap).unwrap();
    assert!(
        f.detail.clause.is_some() && f.detail.other_clause.is_some(),
        "{f:?}"
    );
    assert_ne!(f.detail.clause, f.detail.other_clause);
    let mut reversed = nested_clauses(&a);
    reversed.reverse();
    let d = verify_code(&a.code, &reversed, Some(8), &res());
    let f = d
        .iter()
        .find(|d| d.code == Code::EHOrderInnerAfterOuter)
        .unwrap();
    assert_eq!((f.detail.clause, f.detail.other_clause), (Some(1), Some(0)));
    // A transfer out of a region names the region's clause.
    let items = [
        lbl("t"),
        br(Br_S, "out"),
        lbl("h"),
        op(Pop),
        br(Leave_S, "out"),
        lbl("out"),
        op(Ret),
    ];
    let a = asm(&items);
    let c = [catch(&a, ("t", "h"), ("h", "out"))];
    let d = verify_code(&a.code, &c, Some(8), &res());
    let f = d.iter().find(|d| d.code == Code::BranchOutOfTry).unwrap();
    assert_eq!(f.detail.clause, Some(0), "{d:?}");
}

/// Twenty thousand joins each reached with two depths: every finding gets its two arrivals,
/// found in one pass (a search per finding would be quadratic here).
#[test]
fn arrivals_at_many_joins_are_found_in_one_pass() {
    const JOINS: usize = 20_000;
    let mut code = Vec::with_capacity(5 * JOINS + 1);
    for _ in 0..JOINS {
        // ldarg.0; brtrue.s +1; ldc.i4.1; nop: depth 0 by the branch, 1 falling through.
        code.extend_from_slice(&[0x02, 0x2D, 0x01, 0x17, 0x00]);
    }
    code.push(0x2A);
    let d = verify_code(&code, &[], Some(8), &res());
    assert_eq!(d.len(), JOINS);
    for (k, f) in d.iter().enumerate() {
        let at = 5 * k as u32;
        assert_eq!((f.code, f.offset), (Code::PathStackDepth, at + 4));
        let got: Vec<(ArrivalKind, u32, u32)> = f
            .detail
            .arrivals
            .iter()
            .map(|a| (a.kind, a.from, a.depth))
            .collect();
        assert_eq!(
            got,
            [
                (ArrivalKind::Branch, at + 1, 0),
                (ArrivalKind::FallThrough, at + 3, 1)
            ]
        );
    }
}

/// The targets of a `switch`, read again from its table whenever a pass needs them, are the
/// ones resolving them once would give: the instruction each reaches, or `NONE` for a target
/// outside the code, inside an instruction or after a prefix, which is reported (as
/// `BadBranch` or `BadJumpTarget`) at the `switch` and nowhere else.
#[test]
fn switch_targets_read_from_the_table_resolve_as_a_decode_does() {
    let mut rnd = xorshift(0x5EED_0F5C_A1AB_1E17);
    let (mut good, mut bad) = (0, 0);
    for _ in 0..3_000 {
        // (offset, after a prefix) of each instruction, and the raw targets of each switch.
        let mut code = Vec::new();
        let mut starts: Vec<(usize, bool)> = Vec::new();
        let mut switches: Vec<(usize, Vec<i64>)> = Vec::new();
        let mut after_prefix = false;
        for _ in 0..(rnd() % 24 + 2) {
            starts.push((code.len(), after_prefix));
            after_prefix = false;
            match rnd() % 6 {
                0 => code.push(0x00),           // nop
                1 => code.extend([0x16, 0x26]), // ldc.i4.0; pop (two)
                2 => {
                    code.extend([0xFE, 0x13]); // volatile.
                    after_prefix = true;
                }
                3 => code.extend([0x2B, (rnd() % 16) as u8]), // br.s
                _ => {
                    let count = rnd() % 5;
                    let at = code.len();
                    let next = (at + 5 + 4 * count as usize) as i64;
                    code.push(0x45);
                    code.extend((count as u32).to_le_bytes());
                    let mut targets = Vec::new();
                    for _ in 0..count {
                        let t = (rnd() % 80) as i64 - 10;
                        code.extend(((t - next) as i32).to_le_bytes());
                        targets.push(t);
                    }
                    switches.push((at, targets));
                }
            }
            if matches!(starts.last(), Some(&(o, _)) if code[o] == 0x16) {
                // `pop` is an instruction of its own.
                starts.push((code.len() - 1, false));
            }
        }
        starts.push((code.len(), after_prefix));
        code.push(0x2A); // ret
        let mut v = Verifier::new();
        v.set_single_pass(false);
        let subject = Subject::Code {
            code: &code,
            clauses: &[],
            declared_max_stack: None,
        };
        let diags = v.verify(subject, &NoResolver, &Options::ALL).to_vec();
        assert_eq!(v.n, starts.len(), "{code:02x?}");
        let targets = v.targets_in(&code);
        for (at, raw) in &switches {
            let i = starts.iter().position(|&(o, _)| o == *at).unwrap();
            let x = v.ins[i];
            let at = *at as u32;
            assert_eq!((x.op(), targets.count(&x, at)), (Opcode::Switch, raw.len()));
            let mut any_bad = false;
            for (k, &t) in raw.iter().enumerate() {
                let want = starts
                    .iter()
                    .position(|&(o, p)| o as i64 == t && !p)
                    .map_or(NONE, |j| j as u32);
                assert_eq!(targets.get(&v.ins[..v.n], &x, at, k), want, "{code:02x?}");
                any_bad |= want == NONE;
                if want == NONE { bad += 1 } else { good += 1 }
            }
            let reported = diags
                .iter()
                .any(|d| d.offset == at && matches!(d.code, Code::BadBranch | Code::BadJumpTarget));
            assert_eq!(reported, any_bad, "{code:02x?}: {diags:?}");
        }
    }
    assert!(good > 1_000 && bad > 1_000, "{good} {bad}");
}

/// Code over 1 MiB with long `switch` tables is sparse and goes straight to the full passes;
/// dense code of the same length is not; and a sparse body gets the same answer either way.
#[test]
fn sparse_code_goes_to_the_full_passes_with_the_same_answer() {
    // `ldc.i4.0; switch (60 targets, each the next instruction)`, repeated; then `ret`.
    let mut code = Vec::new();
    while code.len() <= COUNT_OVER {
        code.extend([0x16, 0x45]);
        code.extend(60u32.to_le_bytes());
        code.extend([0; 4 * 60]);
    }
    code.push(0x2A);
    assert!(sparse(&code, code.len()));
    let dense = vec![0x00; COUNT_OVER + 1];
    assert!(!sparse(&dense, dense.len()));
    assert!(!sparse(&code[..COUNT_OVER], COUNT_OVER));
    let subject = || Subject::Code {
        code: &code,
        clauses: &[],
        declared_max_stack: Some(1),
    };
    let mut on = Verifier::new();
    let mut off = Verifier::new();
    off.set_single_pass(false);
    assert!(on.verify(subject(), &NoResolver, &Options::ALL).is_empty());
    assert!(off.verify(subject(), &NoResolver, &Options::ALL).is_empty());
    assert_eq!(on.needed_max_stack(), off.needed_max_stack());
    assert_eq!(on.needed_max_stack(), Ok(1));
    // The full passes ran: their instruction buffer holds the body's.
    assert_eq!(on.n, 2 * (code.len() / 246) + 1);
}

/// Verifies `items` with `clauses` and says whether the single pass accepted the body (the full
/// passes never ran: their instruction count stays 0), after checking that the single pass
/// agrees with the full passes on it.
fn single_pass_takes(items: &[It], clauses: impl Fn(&Asm) -> Vec<Clause>) -> (bool, Vec<Code>) {
    let a = asm(items);
    let cl = clauses(&a);
    single_pass_agrees(&a.code, &cl, 8, &res()).unwrap();
    let mut v = Verifier::new();
    let subject = Subject::Code {
        code: &a.code,
        clauses: &cl,
        declared_max_stack: Some(8),
    };
    let codes: Vec<Code> = v
        .verify(subject, &res(), &Options::ALL)
        .iter()
        .map(|d| d.code)
        .collect();
    (v.n == 0, codes)
}

/// The shapes compilers emit — try/catch, try/finally, a filter, nested tries left by `leave`
/// from the inside out, a loop back into a try's first instruction, a try at the entry point,
/// `rethrow` and `endfinally` in tries inside their handlers — are accepted by the single pass,
/// with the full passes' answer.
#[test]
fn the_single_pass_takes_common_regions() {
    let nested = vec![
        lbl("t0"),
        lbl("t1"),
        op(Nop),
        br(Leave_S, "out"),
        lbl("h1"),
        op(Pop),
        br(Leave_S, "in0"),
        lbl("in0"),
        br(Leave_S, "out"),
        lbl("f0"),
        lbl("t2"),
        op(Nop),
        br(Leave_S, "f0end"),
        lbl("h2"),
        op(Rethrow),
        lbl("f0end"),
        op(Endfinally),
        lbl("out"),
        op(Ret),
    ];
    let (taken, codes) = single_pass_takes(&nested, |a| {
        vec![
            catch(a, ("t1", "h1"), ("h1", "in0")),
            catch(a, ("t2", "h2"), ("h2", "f0end")),
            finally(a, ("t0", "f0"), ("f0", "out")),
        ]
    });
    // `rethrow` in a catch inside the finally: fine; the catch's try sits in the finally.
    assert_eq!(codes, []);
    assert!(taken, "nested regions");
    let (taken, codes) =
        single_pass_takes(&try_catch(), |a| vec![catch(a, ("t", "h"), ("h", "he"))]);
    assert!(taken && codes.is_empty(), "{codes:?}");
    let filtered = vec![
        lbl("t"),
        op(Nop),
        br(Leave_S, "out"),
        lbl("f"),
        op(Pop),
        op(Ldc_I4_1),
        op(Endfilter),
        lbl("h"),
        op(Pop),
        br(Leave_S, "out"),
        lbl("out"),
        op(Ret),
    ];
    let (taken, codes) = single_pass_takes(&filtered, |a| {
        vec![filter(a, ("t", "f"), "f", ("h", "out"))]
    });
    assert!(taken && codes.is_empty(), "{codes:?}");
    // A loop whose body is a try: the back edge enters the try at its first instruction.
    let looped = vec![
        lbl("t"),
        op(Nop),
        br(Leave_S, "cond"),
        lbl("h"),
        op(Endfinally),
        lbl("cond"),
        op(Ldarg_0),
        br(Brtrue_S, "t"),
        op(Ret),
    ];
    let (taken, codes) =
        single_pass_takes(&looped, |a| vec![finally(a, ("t", "h"), ("h", "cond"))]);
    assert!(taken && codes.is_empty(), "{codes:?}");
}

/// What breaks a region rule reaches the full passes, which report it; a try shared by two
/// catches is followed by the single pass.
#[test]
fn the_single_pass_hands_region_faults_to_the_full_passes() {
    let body = |tail: Vec<It>| {
        let mut items = vec![lbl("t"), op(Nop)];
        items.extend(tail);
        items.extend([lbl("h"), op(Pop), br(Leave_S, "out"), lbl("out"), op(Ret)]);
        items
    };
    let cases: Vec<(Vec<It>, Code)> = vec![
        // Falling through into the handler.
        (body(vec![op(Nop)]), Code::FallthroughException),
        // A branch out of the try.
        (body(vec![br(Br_S, "out")]), Code::BranchOutOfTry),
        // `ret` inside the try.
        (body(vec![op(Ret)]), Code::ReturnFromTry),
        // `endfinally` in a try.
        (
            body(vec![br(Leave_S, "out"), op(Endfinally)]),
            Code::Endfinally,
        ),
    ];
    for (items, want) in cases {
        let (taken, codes) =
            single_pass_takes(&items, |a| vec![catch(a, ("t", "h"), ("h", "out"))]);
        assert!(!taken && codes.contains(&want), "{want:?}: {codes:?}");
    }
    // The try entered with a value on the stack.
    let items = vec![
        op(Ldc_I4_0),
        lbl("t"),
        op(Nop),
        br(Leave_S, "out"),
        lbl("h"),
        op(Pop),
        br(Leave_S, "out"),
        lbl("out"),
        op(Ret),
    ];
    let (taken, codes) = single_pass_takes(&items, |a| vec![catch(a, ("t", "h"), ("h", "out"))]);
    assert!(
        !taken && codes.contains(&Code::TryNonEmptyStack),
        "{codes:?}"
    );
    // Two catches of one try.
    let items = vec![
        lbl("t"),
        op(Nop),
        br(Leave_S, "out"),
        lbl("h1"),
        op(Pop),
        br(Leave_S, "out"),
        lbl("h2"),
        op(Pop),
        br(Leave_S, "out"),
        lbl("out"),
        op(Ret),
    ];
    let (taken, codes) = single_pass_takes(&items, |a| {
        vec![
            catch(a, ("t", "h1"), ("h1", "h2")),
            catch(a, ("t", "h1"), ("h2", "out")),
        ]
    });
    assert!(taken && codes.is_empty(), "{codes:?}");
}

/// Generated bodies with regions (nested tries, catches, filters, finally and fault handlers,
/// `leave` out of them): each agrees with the full passes, and every one whose code is all
/// reachable is accepted by the single pass (it leaves unreachable code to the full passes), so
/// the generator's agreement properties exercise its region rules accepting as well as handing
/// over.
#[cfg(feature = "gen")]
#[test]
fn generated_bodies_with_regions_take_the_single_pass() {
    let config = crate::generate::Config::everything();
    let (mut with_regions, mut reachable, mut taken) = (0, 0, 0);
    for n in 0..2000u64 {
        let bytes = crate::properties::seed_bytes(n + 1, 64 + (n % 400) as usize * 13);
        let g = crate::generate::generate_from_bytes(&bytes, &config);
        let encoded = g.encode().unwrap();
        let body = crate::body::Body::parse(&encoded).unwrap();
        let clauses: Vec<Clause> = body.clauses().collect();
        if clauses.is_empty() {
            continue;
        }
        with_regions += 1;
        single_pass_agrees(body.code, &clauses, body.max_stack(), &g.resolver).unwrap();
        let mut v = Verifier::new();
        let found = v.verify(&body, &g.resolver, &Options::ALL);
        assert!(
            found.is_empty(),
            "a generated body verifies clean: {found:?}"
        );
        // The full passes ran (the single pass handed the body over) and reached every
        // instruction: the single pass should have taken it.
        let all_reached = v.n == 0 || v.depth[..v.n].iter().all(|&d| d != NONE);
        assert!(
            !all_reached || v.n == 0,
            "handed over with all code reachable: {clauses:?} {:02x?}",
            body.code
        );
        reachable += usize::from(all_reached);
        taken += usize::from(v.n == 0);
    }
    assert!(
        with_regions >= 500,
        "only {with_regions} generated bodies have regions"
    );
    assert!(
        reachable >= 50,
        "only {reachable} of {with_regions} are all reachable"
    );
    eprintln!("the single pass took {taken} of {with_regions} generated bodies with regions");
}

/// A bad token is found wherever it falls among a long body's tokens: the single pass checks
/// them in batches, so just before, at and just after each batch's end, with instructions that
/// carry no token between them.
#[test]
fn a_bad_token_is_found_on_either_side_of_a_token_batch() {
    use crate::image::Image;
    let image = Image::parse(crate::corpus::EMBEDDED[0].1).unwrap();
    let r = ImageResolver::new(&image);
    let good = (1..)
        .map(|i| 0x7000_0000 | i)
        .find(|&t| r.string_exists(t) == Some(true))
        .unwrap();
    let bad = 0x70FF_FFFF;
    assert_eq!(r.string_exists(bad), Some(false));
    let batch = super::flow::TOKEN_BATCH;
    let n = 3 * batch + 5;
    // `ldstr; pop`, with a `nop` after every third; the offset of each `ldstr`.
    let code_with = |at: Option<usize>| {
        let (mut code, mut offsets) = (Vec::new(), Vec::new());
        for k in 0..n {
            offsets.push(code.len() as u32);
            let t = if Some(k) == at { bad } else { good };
            code.push(0x72);
            code.extend_from_slice(&t.to_le_bytes());
            code.push(0x26);
            if k % 3 == 0 {
                code.push(0x00);
            }
        }
        code.push(0x2A);
        (code, offsets)
    };
    let (clean, _) = code_with(None);
    assert_eq!(verify_code(&clean, &[], Some(8), &r), Vec::new());
    let ends = [batch, 2 * batch, 3 * batch];
    let around = ends.iter().flat_map(|&e| [e - 1, e, e + 1]);
    for at in std::iter::once(0).chain(around).chain([n - 1]) {
        let (code, offsets) = code_with(Some(at));
        let found = verify_code(&code, &[], Some(8), &r);
        assert!(
            found.iter().any(|d| d.offset == offsets[at]),
            "the bad token of ldstr {at} (offset {}) not reported: {found:?}",
            offsets[at]
        );
    }
}
