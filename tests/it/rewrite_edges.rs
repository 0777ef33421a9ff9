//! The rewriter at its edges: relaxation at the exact i8 limits for every branch kind, widening
//! cascades, header and EH-section form changes, region boundaries on insertion, prefixes, tail
//! calls and lifting errors.

use ilcheck::body::{Body, ClauseKind};
use ilcheck::ir::edit::{EditError, Regions, Targets};
use ilcheck::ir::transforms::{self, Outcome, SkipReason, TransformOptions};
use ilcheck::ir::{
    BranchForms, EhClause, HeaderInfo, Instr, IrError, Label, LayoutOptions, MaxStackPolicy,
    Method, Operand, Prefix, layout,
};
use ilcheck::opcode::{Opcode, OperandKind};
use ilcheck::verify::{CallSig, NoResolver, SyntheticResolver};

fn structural(forms: BranchForms) -> LayoutOptions {
    LayoutOptions {
        branch_forms: forms,
        max_stack: MaxStackPolicy::Declared,
        verify: false,
    }
}

fn lay(m: &Method, forms: BranchForms) -> Vec<u8> {
    let mut out = Vec::new();
    layout(m, &structural(forms), &NoResolver, &mut out).expect("layout");
    out
}

/// (offset, opcode, targets) of every instruction of a laid-out body.
fn decoded(bytes: &[u8]) -> Vec<(u32, Opcode, Vec<i64>)> {
    let body = Body::decode(bytes).expect("re-decodes");
    assert_eq!(body.len(), bytes.len());
    body.instructions()
        .map(|i| {
            let i = i.unwrap();
            let t = i.targets().collect();
            (i.offset, i.opcode, t)
        })
        .collect()
}

fn nops(m: &mut Method, n: usize) {
    for _ in 0..n {
        m.push(Instr::op(Opcode::Nop));
    }
}

fn short_branches() -> Vec<Opcode> {
    ilcheck::opcode::ALL
        .iter()
        .filter(|i| i.operand == OperandKind::ShortBrTarget)
        .map(|i| i.opcode)
        .collect()
}

/// A forward branch over `gap` nop bytes: short-form displacement `gap`.
fn forward(op: Opcode, gap: usize) -> Method {
    let mut m = Method::new(HeaderInfo::default());
    let l = m.new_label();
    m.push(Instr::branch(op, l));
    nops(&mut m, gap);
    m.bind(l);
    m.push(Instr::op(Opcode::Ret));
    m
}

/// A backward branch whose short-form displacement is `-(pad + 2)`.
fn backward(op: Opcode, pad: usize) -> Method {
    let mut m = Method::new(HeaderInfo::default());
    let l = m.here();
    nops(&mut m, pad);
    m.push(Instr::branch(op, l));
    m.push(Instr::op(Opcode::Ret));
    m
}

#[test]
fn relaxation_at_the_i8_limits_for_every_branch_kind() {
    let kinds = short_branches();
    assert_eq!(kinds.len(), 14, "13 short branches and leave.s");
    for op in kinds {
        let long = op.long_form();
        for forms in [BranchForms::KeepOriginal, BranchForms::ShortestWhereFits] {
            // Forward: 127 fits, 128 does not.
            for (gap, expect) in [(127usize, op), (128, long)] {
                let mut m = forward(op, gap);
                if forms == BranchForms::ShortestWhereFits {
                    m.instrs[0].opcode = long;
                }
                let ins = decoded(&lay(&m, forms));
                assert_eq!(ins[0].1, expect, "{op} forward {gap} {forms:?}");
                assert_eq!(ins[0].2, vec![ins.last().unwrap().0 as i64]);
            }
            // Backward: -128 fits, -129 does not.
            for (disp, expect) in [(-128i64, op), (-129, long)] {
                let pad = (-disp - 2) as usize;
                let ins = decoded(&lay(&backward(op, pad), forms));
                let br = &ins[ins.len() - 2];
                assert_eq!(br.1, expect, "{op} backward {disp} {forms:?}");
                assert_eq!(br.2, vec![0]);
            }
        }
        // AllLong widens even what fits; KeepOriginal keeps a long branch long.
        let ins = decoded(&lay(&forward(op, 1), BranchForms::AllLong));
        assert_eq!(ins[0].1, long);
        let ins = decoded(&lay(&forward(long, 1), BranchForms::KeepOriginal));
        assert_eq!(ins[0].1, long);
        let ins = decoded(&lay(&forward(long, 1), BranchForms::ShortestWhereFits));
        assert_eq!(ins[0].1, op);
    }
}

/// `B_i` jumps over `B_{i+1}`; every displacement is exactly 127 until the last branch, at 128,
/// widens; then each widening pushes the branch before it out of range, one pass each.
fn cascade(k: usize, last_disp: usize) -> Method {
    let mut m = Method::new(HeaderInfo::default());
    let labels: Vec<Label> = (0..k).map(|_| m.new_label()).collect();
    let pad = |i: usize| if i.is_multiple_of(2) { 62 } else { 63 };
    for i in 0..k {
        if i >= 2 {
            m.bind(labels[i - 2]);
        }
        m.push(Instr::branch(Opcode::Br_S, labels[i]));
        nops(&mut m, pad(i));
    }
    m.bind(labels[k - 2]);
    nops(&mut m, last_disp - pad(k - 1));
    m.bind(labels[k - 1]);
    m.push(Instr::op(Opcode::Ret));
    m
}

#[test]
fn widening_cascades_to_a_fixpoint() {
    let k = 12;
    let mut out = Vec::new();
    let fits = cascade(k, 127);
    let info = layout(
        &fits,
        &structural(BranchForms::KeepOriginal),
        &NoResolver,
        &mut out,
    )
    .unwrap();
    assert_eq!((info.widened, info.passes), (0, 1));
    assert!(decoded(&out).iter().all(|i| i.1 != Opcode::Br));

    let m = cascade(k, 128);
    out.clear();
    let info = layout(
        &m,
        &structural(BranchForms::KeepOriginal),
        &NoResolver,
        &mut out,
    )
    .unwrap();
    assert_eq!(info.widened as usize, k, "every branch widened");
    assert_eq!(
        info.passes as usize,
        k + 1,
        "one widening per pass, then a stable pass"
    );
    let ins = decoded(&out);
    let brs: Vec<_> = ins
        .iter()
        .filter(|i| i.0 != 0 || i.1 != Opcode::Nop)
        .filter(|i| i.1 == Opcode::Br)
        .collect();
    assert_eq!(brs.len(), k);
    // Every target is still the instruction its label named.
    let starts: Vec<i64> = ins.iter().map(|i| i.0 as i64).collect();
    for b in brs {
        assert!(starts.contains(&b.2[0]));
    }
}

#[test]
fn tiny_body_grows_past_63_bytes_into_a_fat_header() {
    let mut m = Method::new(HeaderInfo::default());
    nops(&mut m, 31);
    m.push(Instr::op(Opcode::Ret));
    let out = lay(&m, BranchForms::KeepOriginal);
    assert!(Body::decode(&out).unwrap().is_tiny());
    transforms::nop_pad(&mut m, &TransformOptions::default()).unwrap();
    assert_eq!(m.instrs.len(), 64);
    let out = lay(&m, BranchForms::KeepOriginal);
    let body = Body::decode(&out).unwrap();
    assert!(!body.is_tiny());
    assert_eq!((body.code.len(), body.max_stack()), (64, 8));
}

/// `clauses` finally clauses over nop padding, the try `try_len` and the handler `handler_len`
/// bytes long, starting after `lead` bytes.
fn eh_method(clauses: usize, lead: usize, try_len: usize, handler_len: usize) -> Method {
    let mut m = Method::new(HeaderInfo {
        max_stack: 8,
        ..HeaderInfo::default()
    });
    nops(&mut m, lead);
    let mut built = Vec::new();
    for _ in 0..clauses {
        let try_start = m.here();
        let exit = m.new_label();
        nops(&mut m, try_len - 5);
        m.push(Instr::branch(Opcode::Leave, exit));
        let try_end = m.here();
        let handler_start = m.here();
        nops(&mut m, handler_len - 1);
        m.push(Instr::op(Opcode::Endfinally));
        let handler_end = m.here();
        m.bind(exit);
        built.push(EhClause {
            kind: ClauseKind::Finally,
            try_start,
            try_end,
            handler_start,
            handler_end,
            filter_start: None,
            class_token: 0,
            extra_flags: 0,
        });
    }
    m.push(Instr::op(Opcode::Ret));
    for c in built {
        m.add_clause(c).unwrap();
    }
    m
}

fn eh_is_fat(m: &Method) -> bool {
    let out = lay(m, BranchForms::KeepOriginal);
    let body = Body::decode(&out).unwrap();
    assert_eq!(body.clauses().count(), m.clauses.len());
    let eh: Vec<_> = body.sections.iter().filter(|s| s.is_eh()).collect();
    assert_eq!(eh.len(), 1);
    eh[0].is_fat()
}

#[test]
fn eh_table_crosses_the_small_limits() {
    assert!(
        !eh_is_fat(&eh_method(20, 0, 8, 2)),
        "20 clauses fit a small section"
    );
    assert!(eh_is_fat(&eh_method(21, 0, 8, 2)), "21 clauses do not");
    assert!(
        !eh_is_fat(&eh_method(1, 65527, 8, 2)),
        "handler offset 65535 fits"
    );
    assert!(
        eh_is_fat(&eh_method(1, 65528, 8, 2)),
        "handler offset 65536 does not"
    );
    assert!(
        eh_is_fat(&eh_method(1, 65536, 8, 2)),
        "try offset 65536 does not"
    );
    assert!(!eh_is_fat(&eh_method(1, 0, 255, 2)), "try length 255 fits");
    assert!(
        eh_is_fat(&eh_method(1, 0, 256, 2)),
        "try length 256 does not"
    );
    assert!(
        eh_is_fat(&eh_method(1, 0, 8, 256)),
        "handler length 256 does not"
    );
    // Growth alone switches the form: nop padding doubles a 200-byte try.
    let mut m = eh_method(1, 0, 200, 2);
    assert!(!eh_is_fat(&m));
    transforms::nop_pad(&mut m, &TransformOptions::default()).unwrap();
    assert!(eh_is_fat(&m));
}

/// `nop; [try: nop; leave.s L] [finally: endfinally] L: ret` with a branch-free try.
fn try_method() -> (Method, EhClause) {
    let m = eh_method(1, 1, 7, 1);
    let c = m.clauses[0];
    (m, c)
}

#[test]
fn insertion_at_region_boundaries_inside_and_outside() {
    let marker = [Instr::op(Opcode::Break)];
    // Before the try's first instruction (index 1).
    for (regions, try_start) in [(Regions::Inside, 1), (Regions::Outside, 2)] {
        let (mut m, c) = try_method();
        let mut ed = m.edit();
        ed.insert_before(1, &marker, Targets::ToNew, regions)
            .unwrap();
        ed.commit().unwrap();
        assert_eq!(m.instrs[1].opcode, Opcode::Break);
        assert_eq!(m.position(c.try_start), Some(try_start), "{regions:?}");
        assert_eq!(
            m.position(c.try_end),
            Some(m.position(c.handler_start).unwrap())
        );
    }
    // After the try's last instruction (the leave): inside, the try grows to cover it.
    let (m0, c) = try_method();
    let leave = m0.position(c.try_end).unwrap() - 1;
    for (regions, grows) in [(Regions::Inside, true), (Regions::Outside, false)] {
        let mut m = m0.clone();
        let mut ed = m.edit();
        ed.insert_after(leave, &marker, regions).unwrap();
        ed.commit().unwrap();
        let end = m.position(c.try_end).unwrap();
        assert_eq!(m.instrs[leave + 1].opcode, Opcode::Break);
        assert_eq!(end == leave + 2, grows, "{regions:?}");
        assert_eq!(
            m.position(c.handler_start),
            Some(leave + 2),
            "handler start stays on endfinally"
        );
    }
    // Before the handler: inside the handler, or between try and handler.
    let hs = m0.position(c.handler_start).unwrap();
    for (regions, start) in [(Regions::Inside, hs), (Regions::Outside, hs + 1)] {
        let mut m = m0.clone();
        let mut ed = m.edit();
        ed.insert_before(hs, &marker, Targets::StayOnOld, regions)
            .unwrap();
        ed.commit().unwrap();
        assert_eq!(m.position(c.handler_start), Some(start));
        assert_eq!(m.position(c.try_end), Some(hs), "the try does not grow");
    }
}

#[test]
fn insertion_before_a_branch_target_states_where_branches_go() {
    for (targets, reaches) in [(Targets::ToNew, 2usize), (Targets::StayOnOld, 3)] {
        let mut m = Method::new(HeaderInfo::default());
        let l = m.new_label();
        m.push(Instr::branch(Opcode::Br_S, l));
        m.push(Instr::op(Opcode::Nop));
        m.bind(l);
        m.push(Instr::op(Opcode::Ret));
        let mut ed = m.edit();
        ed.insert_before(2, &[Instr::op(Opcode::Break)], targets, Regions::Outside)
            .unwrap();
        ed.commit().unwrap();
        assert_eq!(m.position(l), Some(reaches));
        let ins = decoded(&lay(&m, BranchForms::KeepOriginal));
        assert_eq!(ins[0].2, vec![ins[reaches].0 as i64]);
    }
}

#[test]
fn conflicting_and_ambiguous_edits_are_refused_and_leave_the_method_alone() {
    let (mut m, _) = try_method();
    let before = m.clone();
    let mut ed = m.edit();
    ed.insert_before(
        1,
        &[Instr::op(Opcode::Nop)],
        Targets::ToNew,
        Regions::Inside,
    )
    .unwrap();
    ed.insert_before(
        1,
        &[Instr::op(Opcode::Nop)],
        Targets::ToNew,
        Regions::Outside,
    )
    .unwrap();
    assert!(matches!(
        ed.commit(),
        Err(EditError::ConflictingEdits { index: 1, .. })
    ));
    assert_eq!(m, before);

    let mut ed = m.edit();
    ed.replace(0, &[]).unwrap();
    ed.remove(0).unwrap();
    assert!(matches!(
        ed.commit(),
        Err(EditError::ConflictingEdits { .. })
    ));

    // One label used both as a branch target and as a try start, with an insertion that
    // would send the two uses to different places.
    let mut m = Method::new(HeaderInfo::default());
    let l = m.new_label();
    m.push(Instr::branch(Opcode::Br_S, l));
    m.bind(l);
    m.push(Instr::op(Opcode::Nop));
    m.push(Instr::op(Opcode::Ret));
    let (e, h, he) = (m.new_label(), m.new_label(), m.new_label());
    m.labels[e.index()] = 2;
    m.labels[h.index()] = 2;
    m.labels[he.index()] = 3;
    m.clauses.push(EhClause {
        kind: ClauseKind::Fault,
        try_start: l,
        try_end: e,
        handler_start: h,
        handler_end: he,
        filter_start: None,
        class_token: 0,
        extra_flags: 0,
    });
    let before = m.clone();
    let mut ed = m.edit();
    ed.insert_before(
        1,
        &[Instr::op(Opcode::Nop)],
        Targets::ToNew,
        Regions::Outside,
    )
    .unwrap();
    assert!(matches!(ed.commit(), Err(EditError::AmbiguousLabel { .. })));
    assert_eq!(m, before);
    assert!(matches!(
        m.edit()
            .insert_before(9, &[], Targets::ToNew, Regions::Inside),
        Err(EditError::IndexOutOfRange { index: 9, len: 3 })
    ));
    // A block of another editor cannot be bound here.
    let mut other = before.clone();
    let foreign = {
        let mut ed = other.edit();
        ed.append(&[Instr::op(Opcode::Ret)])
    };
    let mut ed = m.edit();
    let l = ed.new_label();
    assert_eq!(ed.bind(foreign, l), Err(EditError::UnknownBlock(0)));
}

/// `ldarg.0; tail. call T; ret` plus an ordinary path ending in `ret`.
fn tail_method() -> Method {
    let mut m = Method::new(HeaderInfo::default());
    let other = m.new_label();
    m.push(Instr::op(Opcode::Ldarg_0));
    m.push(Instr::branch(Opcode::Brtrue_S, other));
    m.push(Instr::op(Opcode::Ldarg_0));
    let tail = m.add_prefixes(&[Prefix {
        opcode: Opcode::Tail,
        value: 0,
    }]);
    m.push(Instr {
        opcode: Opcode::Call,
        prefixes: tail,
        operand: Operand::Token(0x0600_0001),
    });
    m.push(Instr::op(Opcode::Ret));
    m.bind(other);
    m.push(Instr::op(Opcode::Ldc_I4_0));
    m.push(Instr::op(Opcode::Ret));
    m
}

fn tail_resolver() -> SyntheticResolver {
    SyntheticResolver::new()
        .method(1, false)
        .call(0x0600_0001, CallSig::static_method(1, false))
}

fn verified(m: &Method, resolver: &dyn ilcheck::verify::Resolver) -> Vec<u8> {
    let mut out = Vec::new();
    layout(m, &LayoutOptions::default(), resolver, &mut out).expect("verifies");
    out
}

#[test]
fn epilogue_leaves_tail_call_ret_alone_and_keeps_return_values() {
    let mut m = tail_method();
    verified(&m, &tail_resolver());
    let opts = TransformOptions::default();
    assert_eq!(transforms::epilogue(&mut m, &opts), Ok(Outcome::Changed));
    // The tail call is still followed by its ret; the other ret got the epilogue before it.
    assert_eq!(m.instrs[3].opcode, Opcode::Call);
    assert_eq!(m.instrs[4].opcode, Opcode::Ret);
    assert_eq!(
        m.instrs[5..].iter().map(|i| i.opcode).collect::<Vec<_>>(),
        [Opcode::Ldc_I4_0, Opcode::Nop, Opcode::Ret]
    );
    let out = verified(&m, &tail_resolver());
    let ins = decoded(&out);
    let tail_at = ins.iter().position(|i| i.1 == Opcode::Tail).unwrap();
    assert_eq!(
        (ins[tail_at + 1].1, ins[tail_at + 2].1),
        (Opcode::Call, Opcode::Ret)
    );

    // nop-pad never separates the pair either, nor the prefix from its call.
    let mut m = tail_method();
    transforms::nop_pad(&mut m, &opts).unwrap();
    let ins = decoded(&verified(&m, &tail_resolver()));
    let tail_at = ins.iter().position(|i| i.1 == Opcode::Tail).unwrap();
    assert_eq!(
        (ins[tail_at + 1].1, ins[tail_at + 2].1),
        (Opcode::Call, Opcode::Ret)
    );
    assert_eq!(
        ins[tail_at - 1].1,
        Opcode::Nop,
        "the nop goes before the prefix"
    );

    // A wrap would put the tail call inside a protected region.
    let mut m = tail_method();
    let wrap_opts = TransformOptions {
        returns_void: Some(false),
        return_local: Some(0),
        ..TransformOptions::default()
    };
    assert_eq!(
        transforms::wrap_finally(&mut m, &wrap_opts),
        Err(SkipReason::TailCallInsideER { index: 3 })
    );
}

#[test]
fn epilogue_goes_before_every_return_and_branches_to_a_return_reach_it() {
    // if (!arg) return 1; int v = 2; if (arg) goto last (with v on the stack); v = 3; last: return v;
    let mut m = Method::new(HeaderInfo::default());
    let (other, last) = (m.new_label(), m.new_label());
    m.push(Instr::op(Opcode::Ldarg_0));
    m.push(Instr::branch(Opcode::Brfalse_S, other));
    m.push(Instr::op(Opcode::Ldc_I4_1));
    m.push(Instr::op(Opcode::Ret));
    m.bind(other);
    m.push(Instr::op(Opcode::Ldc_I4_2));
    m.push(Instr::op(Opcode::Ldarg_0));
    m.push(Instr::branch(Opcode::Brtrue_S, last));
    m.push(Instr::op(Opcode::Pop));
    m.push(Instr::op(Opcode::Ldc_I4_3));
    m.bind(last);
    m.push(Instr::op(Opcode::Ret));
    let resolver = SyntheticResolver::new().method(1, false);
    let opts = TransformOptions {
        epilogue: vec![
            Instr::op(Opcode::Nop),
            Instr::op(Opcode::Ldc_I4_0),
            Instr::op(Opcode::Pop),
        ],
        ..TransformOptions::default()
    };
    transforms::epilogue(&mut m, &opts).unwrap();
    let ins = decoded(&verified(&m, &resolver));
    let ops: Vec<Opcode> = ins.iter().map(|i| i.1).collect();
    use Opcode::*;
    // Each `ret` keeps its own copy of the epilogue: no join, so each returned value keeps
    // its type, and no branch is added.
    assert_eq!(
        ops,
        [
            Ldarg_0, Brfalse_S, Ldc_I4_1, Nop, Ldc_I4_0, Pop, Ret, Ldc_I4_2, Ldarg_0, Brtrue_S,
            Pop, Ldc_I4_3, Nop, Ldc_I4_0, Pop, Ret
        ]
    );
    // `brfalse` still reaches `ldc.i4.2`; `brtrue` reaches the last epilogue, not its `ret`.
    assert_eq!(ins[1].2, [ins[7].0 as i64]);
    assert_eq!(ins[9].2, [ins[12].0 as i64]);
    // Not stack-neutral: refused before anything changes.
    let bad = TransformOptions {
        epilogue: vec![Instr::op(Opcode::Pop)],
        ..TransformOptions::default()
    };
    assert!(matches!(
        transforms::epilogue(&mut m, &bad),
        Err(SkipReason::UnsupportedSnippet { .. })
    ));
}

#[test]
fn prologue_goes_outside_a_try_at_entry_and_loops_stay_on_the_original_start() {
    // try { loop: nop; br loop-ish } — instruction 0 starts a try and is a backward target.
    let mut m = Method::new(HeaderInfo::default());
    let start = m.here();
    let try_start = m.here();
    let exit = m.new_label();
    m.push(Instr::op(Opcode::Ldarg_0));
    m.push(Instr::branch(Opcode::Brtrue_S, start));
    m.push(Instr::branch(Opcode::Leave_S, exit));
    let try_end = m.here();
    let handler_start = m.here();
    m.push(Instr::op(Opcode::Endfinally));
    let handler_end = m.here();
    m.bind(exit);
    m.push(Instr::op(Opcode::Ret));
    m.add_clause(EhClause {
        kind: ClauseKind::Finally,
        try_start,
        try_end,
        handler_start,
        handler_end,
        filter_start: None,
        class_token: 0,
        extra_flags: 0,
    })
    .unwrap();
    let resolver = SyntheticResolver::new()
        .method(1, true)
        .call(0x0600_0002, CallSig::static_method(0, true));
    verified(&m, &resolver);
    let opts = TransformOptions {
        prologue: vec![Instr::new(Opcode::Call, Operand::Token(0x0600_0002))],
        ..TransformOptions::default()
    };
    transforms::prologue(&mut m, &opts).unwrap();
    assert_eq!(m.instrs[0].opcode, Opcode::Call);
    assert_eq!(
        m.position(start),
        Some(1),
        "the loop does not rerun the prologue"
    );
    assert_eq!(
        m.position(try_start),
        Some(1),
        "the prologue is outside the try"
    );
    let ins = decoded(&verified(&m, &resolver));
    assert_eq!(ins[2].2, vec![ins[1].0 as i64]);
}

#[test]
fn wrap_finally_and_catch_verify_and_skip_with_reasons() {
    // if (arg) return 1; return 2;
    let build = || {
        let mut m = Method::new(HeaderInfo::default());
        let other = m.new_label();
        m.push(Instr::op(Opcode::Ldarg_0));
        m.push(Instr::branch(Opcode::Brfalse_S, other));
        m.push(Instr::op(Opcode::Ldc_I4_1));
        m.push(Instr::op(Opcode::Ret));
        m.bind(other);
        m.push(Instr::op(Opcode::Ldc_I4_2));
        m.push(Instr::op(Opcode::Ret));
        m
    };
    let resolver = SyntheticResolver::new()
        .method(1, false)
        .locals(1)
        .token(0x0100_0001);
    let mut opts = TransformOptions {
        returns_void: None,
        catch_type: 0x0100_0001,
        ..TransformOptions::default()
    };
    assert_eq!(
        transforms::wrap_finally(&mut build(), &opts),
        Err(SkipReason::NeedsSignature)
    );
    opts.returns_void = Some(false);
    assert_eq!(
        transforms::wrap_catch(&mut build(), &opts),
        Err(SkipReason::NeedsNewLocal)
    );
    opts.return_local = Some(0);
    for wrap in [transforms::wrap_finally, transforms::wrap_catch] {
        let mut m = build();
        m.header.local_sig = 0x1100_0001;
        assert_eq!(wrap(&mut m, &opts), Ok(Outcome::Changed));
        let out = verified(&m, &resolver);
        let body = Body::decode(&out).unwrap();
        let c: Vec<_> = body.clauses().collect();
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].try_offset, 0);
        let ins = decoded(&out);
        assert_eq!(ins.iter().filter(|i| i.1 == Opcode::Leave_S).count(), 2);
        assert_eq!(ins.last().unwrap().1, Opcode::Ret);
    }
}

#[test]
fn prefixes_stay_attached_through_every_edit() {
    let mut m = Method::new(HeaderInfo::default());
    m.push(Instr::op(Opcode::Ldarg_0));
    let p = m.add_prefixes(&[
        Prefix {
            opcode: Opcode::Unaligned,
            value: 1,
        },
        Prefix {
            opcode: Opcode::Volatile,
            value: 0,
        },
    ]);
    m.push(Instr {
        opcode: Opcode::Ldind_I4,
        prefixes: p,
        operand: Operand::None,
    });
    m.push(Instr::op(Opcode::Ret));
    let mut ed = m.edit();
    ed.insert_before(
        1,
        &[Instr::op(Opcode::Break)],
        Targets::ToNew,
        Regions::Inside,
    )
    .unwrap();
    ed.insert_after(1, &[Instr::op(Opcode::Break)], Regions::Inside)
        .unwrap();
    ed.commit().unwrap();
    let ops: Vec<Opcode> = decoded(&lay(&m, BranchForms::KeepOriginal))
        .iter()
        .map(|i| i.1)
        .collect();
    assert_eq!(
        ops,
        [
            Opcode::Ldarg_0,
            Opcode::Break,
            Opcode::Unaligned,
            Opcode::Volatile,
            Opcode::Ldind_I4,
            Opcode::Break,
            Opcode::Ret
        ]
    );
}

#[test]
fn bodies_without_instruction_start_targets_cannot_be_lifted() {
    // br.s +1 lands inside `ldc.i4.s 5`.
    let code = [0x2B, 0x01, 0x1F, 0x05, 0x2A];
    let bytes = [&[(code.len() as u8) << 2 | 2][..], &code].concat();
    let body = Body::decode(&bytes).unwrap();
    assert_eq!(
        Method::from_body(&body),
        Err(IrError::TargetNotInstruction {
            offset: 0,
            opcode: Opcode::Br_S,
            target: 3
        })
    );
    // A branch between a prefix and its instruction.
    let code = [0x2B, 0x02, 0xFE, 0x13, 0x46, 0x2A];
    let bytes = [&[(code.len() as u8) << 2 | 2][..], &code].concat();
    let body = Body::decode(&bytes).unwrap();
    assert!(matches!(
        Method::from_body(&body),
        Err(IrError::TargetNotInstruction { target: 4, .. })
    ));
    // A prefix with nothing after it.
    let code = [0x2A, 0xFE, 0x14];
    let bytes = [&[(code.len() as u8) << 2 | 2][..], &code].concat();
    let body = Body::decode(&bytes).unwrap();
    assert!(matches!(
        Method::from_body(&body),
        Err(IrError::DanglingPrefix { offset: 1, .. })
    ));
}

#[test]
fn identity_is_byte_identical_on_a_lifted_body() {
    let m = cascade(6, 128);
    let once = lay(&m, BranchForms::KeepOriginal);
    let body = Body::decode(&once).unwrap();
    let lifted = Method::from_body(&body).unwrap();
    assert_eq!(lay(&lifted, BranchForms::KeepOriginal), once);
    // Every branch of the cascade is forced long: shortening where it fits changes nothing.
    let shortest = lay(&lifted, BranchForms::ShortestWhereFits);
    assert_eq!(
        shortest, once,
        "a cascade's widening is forced, not a choice"
    );
}

#[test]
fn max_stack_policies_and_invalid_results_are_typed() {
    use ilcheck::ir::LayoutError;
    use ilcheck::verify::Code;
    // ldc.i4.0; ldc.i4.1; add; pop; ret — needs 2; declared 5, then 1.
    let build = |declared: u16| {
        let mut m = Method::new(HeaderInfo {
            max_stack: declared,
            init_locals: false,
            local_sig: 0x1100_0001,
        });
        for op in [
            Opcode::Ldc_I4_0,
            Opcode::Ldc_I4_1,
            Opcode::Add,
            Opcode::Pop,
            Opcode::Ret,
        ] {
            m.push(Instr::op(op));
        }
        m
    };
    let resolver = SyntheticResolver::new().method(0, true).locals(1);
    let run = |m: &Method, policy| {
        let mut out = Vec::new();
        let opts = LayoutOptions {
            max_stack: policy,
            ..LayoutOptions::default()
        };
        layout(m, &opts, &resolver, &mut out).map(|i| i.max_stack)
    };
    assert_eq!(run(&build(5), MaxStackPolicy::KeepDeclaredIfEnough), Ok(5));
    assert_eq!(run(&build(5), MaxStackPolicy::Recompute), Ok(2));
    assert_eq!(run(&build(1), MaxStackPolicy::KeepDeclaredIfEnough), Ok(2));
    assert!(matches!(
        run(&build(1), MaxStackPolicy::Declared),
        Err(LayoutError::Invalid(d)) if d.code == Code::StackOverflow
    ));
    // A void method returning with a value on the stack: refused, naming the rule.
    let mut m = build(8);
    m.instrs.remove(3);
    let err = run(&m, MaxStackPolicy::KeepDeclaredIfEnough).unwrap_err();
    assert!(
        matches!(&err, LayoutError::Invalid(d) if d.code == Code::ReturnVoid && d.offset > 0),
        "{err}"
    );
}

#[test]
fn switch_targets_follow_their_labels_through_relaxation() {
    // switch (a, b) over a region that grows past the short range of a nearby br.s.
    let mut m = Method::new(HeaderInfo::default());
    let (a, b, end) = (m.new_label(), m.new_label(), m.new_label());
    m.push(Instr::op(Opcode::Ldarg_0));
    let table = m.add_switch(&[a, b]);
    m.push(Instr::new(Opcode::Switch, Operand::Switch(table)));
    m.push(Instr::branch(Opcode::Br_S, end));
    m.bind(a);
    nops(&mut m, 100);
    m.push(Instr::branch(Opcode::Br_S, end));
    m.bind(b);
    nops(&mut m, 20);
    m.bind(end);
    m.push(Instr::op(Opcode::Ret));
    let before = decoded(&lay(&m, BranchForms::KeepOriginal));
    assert_eq!(before[2].1, Opcode::Br_S);
    transforms::nop_pad(&mut m, &TransformOptions::default()).unwrap();
    let ins = decoded(&lay(&m, BranchForms::KeepOriginal));
    let at = |l: Label| ins[m.position(l).unwrap()].0 as i64;
    let sw = ins.iter().find(|i| i.1 == Opcode::Switch).unwrap();
    assert_eq!(sw.2, vec![at(a), at(b)]);
    let first_br = ins
        .iter()
        .find(|i| i.1 == Opcode::Br || i.1 == Opcode::Br_S)
        .unwrap();
    assert_eq!(first_br.1, Opcode::Br, "pushed out of range by the padding");
    assert_eq!(first_br.2, vec![at(end)]);
}

/// Widened branches are made room for by moving the code already written: adjacent widened
/// branches, a widened branch with a prefix run (structurally laid out; the verifier would
/// refuse it), a `switch` and an 8-byte operand between them, and short branches that stay
/// short, all land where a layout from scratch puts them.
#[test]
fn widening_moves_every_run_to_its_final_offset() {
    let mut m = Method::new(HeaderInfo::default());
    let (far, near, back) = (m.new_label(), m.new_label(), m.new_label());
    m.bind(back);
    m.push(Instr::branch(Opcode::Br_S, far)); // widened
    m.push(Instr::branch(Opcode::Brtrue_S, far)); // widened, right after the first
    m.push(Instr::new(
        Opcode::Ldc_I8,
        Operand::Int64(0x0102_0304_0506_0708),
    ));
    let volatile = m.add_prefixes(&[Prefix {
        opcode: Opcode::Volatile,
        value: 0,
    }]);
    m.push(Instr {
        prefixes: volatile,
        ..Instr::branch(Opcode::Leave_S, far) // widened, after its prefix
    });
    let table = m.add_switch(&[near, far, back]);
    m.push(Instr::new(Opcode::Switch, Operand::Switch(table)));
    m.push(Instr::branch(Opcode::Br_S, near)); // stays short
    m.bind(near);
    nops(&mut m, 130);
    m.push(Instr::branch(Opcode::Brfalse_S, back)); // widened, backwards
    m.bind(far);
    m.push(Instr::op(Opcode::Ret));
    for forms in [BranchForms::KeepOriginal, BranchForms::ShortestWhereFits] {
        let out = lay(&m, forms);
        ilcheck::ir::check::placement(&m, &out).expect("every target on its label");
        let ins = decoded(&out);
        let ops: Vec<Opcode> = ins.iter().map(|i| i.1).collect();
        assert_eq!(
            ops[..7],
            [
                Opcode::Br,
                Opcode::Brtrue,
                Opcode::Ldc_I8,
                Opcode::Volatile,
                Opcode::Leave,
                Opcode::Switch,
                Opcode::Br_S
            ]
        );
        assert_eq!(ops[ops.len() - 2..], [Opcode::Brfalse, Opcode::Ret]);
        // With every branch long from the start nothing is moved: the same instructions but
        // for the one branch that stays short here, three bytes longer.
        let long = lay(&m, BranchForms::AllLong);
        assert_eq!(long.len(), out.len() + 3);
        let long_ops: Vec<Opcode> = decoded(&long).iter().map(|i| i.1).collect();
        let mut expected = ops.clone();
        expected[6] = Opcode::Br;
        assert_eq!(long_ops, expected);
        let body = Body::decode(&out).unwrap();
        let ldc_i8 = body.instructions().nth(2).unwrap().unwrap();
        assert_eq!(
            ldc_i8.operand,
            ilcheck::instr::Operand::Int64(0x0102_0304_0506_0708)
        );
    }
}

/// `prologue-epilogue` on `body` laid out under each branch-form option, every label checked in
/// place: the form, the bytes and the layout's account of them.
fn prologue_epilogue_every_form(
    body: &Body<'_>,
    what: &str,
) -> Vec<(BranchForms, Vec<u8>, ilcheck::ir::LayoutInfo)> {
    let opts = TransformOptions::default();
    [
        BranchForms::KeepOriginal,
        BranchForms::AllLong,
        BranchForms::ShortestWhereFits,
    ]
    .into_iter()
    .map(|forms| {
        let mut m = Method::from_body(body).unwrap();
        transforms::prologue_epilogue(&mut m, &opts).unwrap();
        let lopts = LayoutOptions {
            branch_forms: forms,
            ..LayoutOptions::default()
        };
        let mut out = Vec::new();
        let info = layout(&m, &lopts, &NoResolver, &mut out)
            .unwrap_or_else(|e| panic!("{what} {forms:?}: {e}"));
        ilcheck::ir::check::placement(&m, &out).unwrap_or_else(|e| panic!("{what} {forms:?}: {e}"));
        (forms, out, info)
    })
    .collect()
}

/// The byte-level splice, which `Rewriter::rewrite` takes, answers for `body` under every
/// branch-form option and writes what the IR path writes; returns what it did under each.
fn splice_equals_ir(body: &Body<'_>, what: &str) -> Vec<ilcheck::ir::LayoutInfo> {
    use ilcheck::ir::{EntryExit, Rewriter};
    let opts = TransformOptions::default();
    let mut rw = Rewriter::new();
    let which = EntryExit::PrologueEpilogue;
    [
        BranchForms::KeepOriginal,
        BranchForms::AllLong,
        BranchForms::ShortestWhereFits,
    ]
    .into_iter()
    .map(|branch_forms| {
        let lopts = LayoutOptions {
            branch_forms,
            ..LayoutOptions::default()
        };
        let (mut spliced, mut lifted) = (Vec::new(), Vec::new());
        let a = rw.splice(
            body,
            which.transform(),
            &opts,
            &lopts,
            &NoResolver,
            &mut spliced,
        );
        let b = rw.rewrite_ir(
            body,
            which.transform(),
            &opts,
            &lopts,
            &NoResolver,
            &mut lifted,
        );
        let b = b.unwrap_or_else(|e| panic!("{what} {branch_forms:?}: {e}"));
        assert_eq!(
            a,
            Ok(b),
            "{what} {branch_forms:?}: the splice declined or disagreed"
        );
        assert!(
            spliced == lifted,
            "{what} {branch_forms:?}: spliced and lifted bytes differ"
        );
        b.1
    })
    .collect()
}

/// The hostile widening cascade at 20k instructions through `prologue-epilogue`: one pass per
/// link of the chain, every chain branch but the last widened, every branch and switch case on
/// its label under every branch-form option, and the byte-level splice equal to the IR path.
#[test]
fn a_long_widening_cascade_settles_with_every_branch_on_its_target() {
    use ilcheck::generate::hostile;
    let h = hostile::cascade(20_000);
    let body = Body::parse(&h.bytes).unwrap();
    let links = h.branches;
    assert!(links > 5_000, "{links}");
    for (forms, out, info) in prologue_epilogue_every_form(&body, "cascade") {
        let ins = decoded(&out);
        let count = |op: Opcode| ins.iter().filter(|i| i.1 == op).count();
        if forms == BranchForms::AllLong {
            assert_eq!((info.passes, info.widened), (1, 0));
            assert_eq!(count(Opcode::Br), links);
        } else {
            assert_eq!(
                (info.passes as usize, info.widened as usize),
                (links, links - 1),
                "{forms:?}: one pass per link"
            );
            // The last link stays short.
            assert_eq!((count(Opcode::Br), count(Opcode::Br_S)), (links - 1, 1));
        }
    }
    splice_equals_ir(&body, "cascade");
}

/// Under `ShortestWhereFits` the splice finds the branches a widening moves in the code as it
/// starts out (every branch short), not in the original: here 40 long branches made short
/// bring a widening within reach of a branch 200 original bytes before it, which it must then
/// widen too (one pass more), as the IR layout does.
#[test]
fn long_branches_made_short_bring_a_widening_within_reach() {
    let mut m = Method::new(HeaderInfo::default());
    let (t, far) = (m.new_label(), m.new_label());
    // As laid out short: `br.s t` ends at 2, and reaches 127 bytes on, exactly, past the chain
    // (80 bytes), `w` (2) and 45 `nop`s.
    m.push(Instr::branch(Opcode::Br, t));
    for _ in 0..40 {
        let next = m.new_label();
        m.push(Instr::branch(Opcode::Br, next));
        m.bind(next);
    }
    // `w`: 137 bytes from `far`, widened by the first pass; that moves `t` to 130 bytes from
    // the first branch, which the second pass widens.
    m.push(Instr::branch(Opcode::Br, far));
    nops(&mut m, 45);
    m.bind(t);
    nops(&mut m, 91);
    m.bind(far);
    m.push(Instr::op(Opcode::Nop));
    m.push(Instr::op(Opcode::Ret));
    let bytes = lay(&m, BranchForms::KeepOriginal);
    let body = Body::parse(&bytes).unwrap();
    // In the original the first branch and `w` are 205 bytes apart.
    assert_eq!(decoded(&bytes)[41].0, 205);
    let infos = splice_equals_ir(&body, "shrunk chain");
    let short = infos[2];
    assert_eq!((short.passes, short.widened), (3, 2), "{short:?}");
    assert_eq!((infos[1].passes, infos[1].widened), (1, 0));
}

/// The hostile region shapes at 20k clauses through `prologue-epilogue` under every branch-form
/// option: verified, every label in place, the splice equal to the IR path.
#[test]
fn many_regions_rewrite_with_every_boundary_in_place() {
    use ilcheck::generate::hostile;
    for h in [hostile::sequential_try(20_000), hostile::nested_try(20_000)] {
        let body = Body::parse(&h.bytes).unwrap();
        let what = format!("{:?}", h.shape);
        for (_, out, _) in prologue_epilogue_every_form(&body, &what) {
            assert_eq!(Body::decode(&out).unwrap().clauses().count(), 20_000);
        }
        splice_equals_ir(&body, &what);
    }
}

/// `localloc` in a handler (III.3.47) stops the wrap transforms, wherever among many clauses
/// it is; before, between and after the handlers it does not.
#[test]
fn wrapping_refuses_localloc_in_any_handler() {
    // `clauses` try/finally blocks, then `ldc.i4.4; localloc; pop` at `extra` or not, `ret`;
    // with `in_handler`, the finally of block `in_handler` holds the `localloc` too.
    let build = |clauses: usize, in_handler: Option<usize>| {
        let mut m = Method::new(HeaderInfo::default());
        let alloc = |m: &mut Method| {
            m.push(Instr::op(Opcode::Ldc_I4_4));
            m.push(Instr::op(Opcode::Localloc));
            m.push(Instr::op(Opcode::Pop));
        };
        let mut built = Vec::new();
        for k in 0..clauses {
            alloc(&mut m);
            let try_start = m.here();
            let exit = m.new_label();
            m.push(Instr::branch(Opcode::Leave_S, exit));
            let handler_start = m.here();
            if in_handler == Some(k) {
                alloc(&mut m);
            }
            m.push(Instr::op(Opcode::Endfinally));
            let handler_end = m.here();
            m.bind(exit);
            built.push(EhClause {
                kind: ClauseKind::Finally,
                try_start,
                try_end: handler_start,
                handler_start,
                handler_end,
                filter_start: None,
                class_token: 0,
                extra_flags: 0,
            });
        }
        m.push(Instr::op(Opcode::Ret));
        for c in built {
            m.add_clause(c).unwrap();
        }
        m
    };
    let opts = TransformOptions {
        returns_void: Some(true),
        catch_type: 0x0100_0001,
        ..TransformOptions::default()
    };
    for wrap in [transforms::wrap_finally, transforms::wrap_catch] {
        assert_eq!(wrap(&mut build(300, None), &opts), Ok(Outcome::Changed));
        for k in [0, 150, 299] {
            // Block k starts after k blocks of 5 instructions; its handler's `localloc` is
            // 5 instructions in.
            let index = 5 * k + 5;
            assert_eq!(
                wrap(&mut build(300, Some(k)), &opts),
                Err(SkipReason::LocallocInHandler { index })
            );
        }
    }
}

/// A body whose only structural finding is unverifiable (`localloc` over its `dup`ed size, as
/// Roslyn's `stackalloc` into a `Span` has it) is rewritten: the layout refuses only findings
/// of the class invalid, and the result keeps the original's finding and gains none.
#[test]
fn an_unverifiable_localloc_is_rewritten_and_stays_unverifiable() {
    use ilcheck::verify::{Code, Verdict, Verifier};
    // Tiny header, 7 bytes: ldc.i4.8; dup; localloc; pop; pop; ret.
    let bytes = [0x1E, 0x1E, 0x25, 0xFE, 0x0F, 0x26, 0x26, 0x2A];
    let body = Body::parse(&bytes).unwrap();
    let codes = |b: &Body<'_>| -> Vec<Code> {
        Verifier::new()
            .verify(b, &NoResolver, &ilcheck::verify::Options::ALL)
            .iter()
            .map(|d| d.code)
            .collect()
    };
    assert_eq!(codes(&body), [Code::LocallocStackNotEmpty]);
    assert_eq!(Code::LocallocStackNotEmpty.verdict(), Verdict::Unverifiable);
    for (forms, out, _) in prologue_epilogue_every_form(&body, "localloc") {
        let patched = Body::parse(&out).unwrap();
        assert!(patched.code.len() > body.code.len(), "{forms:?}");
        assert_eq!(codes(&patched), [Code::LocallocStackNotEmpty], "{forms:?}");
    }
    splice_equals_ir(&body, "localloc");
}

/// One rewriter spliced with snippets that change from body to body — operands only (as probes
/// by name do), back to earlier ones, the same again, another shape — writes what a fresh
/// rewriter writes each time: the snippet cache never answers with an earlier body's operands.
#[test]
fn the_splices_snippet_cache_follows_every_change_of_operands() {
    use ilcheck::ir::{EntryExit, Rewriter};
    // if (arg) return 1; return 2; under a tiny header.
    let code = [0x02, 0x2C, 0x02, 0x17, 0x2A, 0x18, 0x2A];
    let mut bytes = vec![((code.len() as u8) << 2) | 0x2];
    bytes.extend_from_slice(&code);
    let body = Body::parse(&bytes).unwrap();
    let probe = |name: u32, token: i32| TransformOptions {
        prologue: vec![
            Instr::new(Opcode::Ldstr, Operand::Token(name)),
            Instr::new(Opcode::Ldc_I4, Operand::Int32(token)),
            Instr::new(Opcode::Call, Operand::Token(0x0A00_0001)),
        ],
        epilogue: vec![
            Instr::new(Opcode::Ldstr, Operand::Token(name)),
            Instr::new(Opcode::Call, Operand::Token(0x0A00_0002)),
        ],
        ..TransformOptions::default()
    };
    let other = TransformOptions {
        prologue: vec![Instr::new(Opcode::Call, Operand::Token(0x0A00_0003))],
        ..TransformOptions::default()
    };
    let resolver = SyntheticResolver::new()
        .method(1, false)
        .call(0x0A00_0001, CallSig::static_method(2, true))
        .call(0x0A00_0002, CallSig::static_method(1, true))
        .call(0x0A00_0003, CallSig::static_method(0, true))
        .string(0x7000_0001)
        .string(0x7000_0010)
        .string(0x7000_0100);
    let (a, b, c) = (
        probe(0x7000_0001, 0x0600_0001),
        probe(0x7000_0010, 0x0600_0002),
        probe(0x7000_0100, 0x0600_0003),
    );
    let which = EntryExit::PrologueEpilogue;
    let lopts = LayoutOptions::default();
    let run = |rw: &mut Rewriter, opts: &TransformOptions| {
        let mut out = Vec::new();
        rw.rewrite(&body, which.transform(), opts, &lopts, &resolver, &mut out)
            .unwrap();
        out
    };
    let mut reused = Rewriter::new();
    let mut outputs = Vec::new();
    for opts in [&a, &b, &a, &a, &c, &other, &a, &b, &b] {
        let out = run(&mut reused, opts);
        assert_eq!(out, run(&mut Rewriter::new(), opts));
        outputs.push(out);
    }
    assert_ne!(outputs[0], outputs[1], "the operands show in the bytes");
    assert_eq!(outputs[0], outputs[2]);
}
