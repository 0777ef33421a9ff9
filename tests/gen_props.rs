//! Properties over generated bodies: they verify clean, round-trip losslessly and canonically,
//! survive every transform of the rewriter valid and with the same behaviour, and each one-rule
//! mutation of them is caught with its expected diagnostic.
//!
//! `ILCHECK_PROPTEST_CASES` sets the number of cases per property (default 4000).

use ilcheck::body::{Body, BodyParts, Clause};
use ilcheck::disasm;
use ilcheck::r#gen::interp::{self, Env, Outcome as RunOutcome};
use ilcheck::r#gen::mutate::{Mutation, mutate};
use ilcheck::r#gen::valid::{EXCEPTION_CLASS, LOCALS_SIG};
use ilcheck::r#gen::{Config, Generated, strategy};
use ilcheck::ir::{
    self, BranchForms, LayoutOptions, MaxStackPolicy, Method, Rewriter, TRANSFORMS,
    TransformOptions,
};
use ilcheck::opcode::{Opcode, OperandKind};
use ilcheck::verify::{self, SyntheticResolver};
use proptest::prelude::*;

fn cases() -> u32 {
    std::env::var("ILCHECK_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4000)
}

/// Steps a generated body may take: its loops are bounded, so running out is a bug.
const FUEL: u64 = 2_000_000;

fn listing(code: &[u8], clauses: &[Clause]) -> String {
    let mut s = String::new();
    let _ = disasm::write_code(&mut s, code, clauses);
    s
}

fn encode(g: &Generated) -> Vec<u8> {
    g.encode().expect("a generated method lays out")
}

fn check_verifies(g: &Generated) -> Result<Vec<u8>, TestCaseError> {
    let bytes = encode(g);
    let body = Body::parse(&bytes).expect("laid-out body parses");
    let found = verify::verify(&body, &g.resolver);
    prop_assert!(
        found.is_empty(),
        "generated body does not verify: {found:?}\n{}",
        disasm::disassemble(&body)
    );
    Ok(bytes)
}

fn run_all(g: &Generated, code: &[u8], clauses: &[Clause], fuel: u64) -> Vec<interp::Run> {
    let env = Env {
        callees: &g.callees,
        fuel,
    };
    g.inputs
        .iter()
        .map(|args| interp::run(code, clauses, args, &env))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn generated_bodies_verify_clean(g in strategy::method(Config::default())) {
        check_verifies(&g)?;
    }

    #[test]
    fn straight_line_bodies_verify_clean(g in strategy::method(Config::straight_line())) {
        check_verifies(&g)?;
    }

    #[test]
    fn lossless_and_canonical_round_trips(g in strategy::method(Config::default())) {
        let bytes = check_verifies(&g)?;
        let body = Body::parse(&bytes).unwrap();
        let mut again = Vec::new();
        body.encode(&mut again).unwrap();
        prop_assert_eq!(&again, &bytes, "lossless round trip");
        prop_assert!(body.is_canonical(), "layout output is canonical");
        // Lifting and laying out again keeps every byte.
        let lifted = Method::from_body(&body).expect("lifts");
        let mut relaid = Vec::new();
        let opts = LayoutOptions {
            max_stack: MaxStackPolicy::Declared,
            verify: false,
            ..LayoutOptions::default()
        };
        ir::layout(&lifted, &opts, &g.resolver, &mut relaid).unwrap();
        prop_assert_eq!(relaid, bytes);
    }

    #[test]
    fn generated_bodies_run_within_fuel(g in strategy::method(Config::default())) {
        let bytes = encode(&g);
        let body = Body::parse(&bytes).unwrap();
        let clauses: Vec<Clause> = body.clauses().copied().collect();
        for run in run_all(&g, body.code, &clauses, FUEL) {
            prop_assert!(
                matches!(run.outcome, RunOutcome::Returned(_) | RunOutcome::Threw(_)),
                "{:?}\n{}",
                run.outcome,
                listing(body.code, &clauses)
            );
            if let RunOutcome::Returned(v) = run.outcome {
                prop_assert_eq!(v.is_none(), g.shape.returns_void);
            }
        }
    }

    #[test]
    fn transforms_keep_bodies_valid_and_behaviour_unchanged(
        g in strategy::method(Config::default())
    ) {
        check_transforms(&g)?;
    }

    #[test]
    fn transforms_on_deeply_nested_regions(
        g in strategy::method(Config { max_nesting: 7, max_eh_depth: 6, max_statements: 8, ..Config::default() })
    ) {
        check_transforms(&g)?;
    }

    #[test]
    fn every_mutation_is_caught(g in strategy::method(Config::default()), choice in any::<u32>()) {
        for &mutation in Mutation::ALL {
            let Some(m) = mutate(&g, mutation, choice) else { continue };
            let found = verify::verify_code(&m.code, &m.clauses, Some(m.max_stack), &g.resolver);
            prop_assert!(
                found.iter().any(|d| d.code == m.expected),
                "{mutation:?} expected {:?}, verifier said {found:?}\n{}",
                m.expected,
                listing(&m.code, &m.clauses)
            );
            // As a whole body, the same findings, and the first-finding mode finds one.
            let parts = BodyParts {
                max_stack: m.max_stack,
                init_locals: false,
                // A locals token keeps the header fat, so the declared MaxStack stays.
                local_sig: LOCALS_SIG,
                code: &m.code,
                clauses: m.clauses.clone(),
                raw_sections: Vec::new(),
            };
            let mut bytes = Vec::new();
            parts.encode_canonical(&mut bytes).expect("mutant encodes");
            let body = Body::parse(&bytes).expect("mutant parses");
            prop_assert_eq!(verify::verify(&body, &g.resolver), found.clone(), "{:?}", mutation);
            prop_assert!(verify::verify_first(&body, &g.resolver).is_some(), "{:?}", mutation);
        }
    }
}

proptest! {
    // Bodies above 64 KiB take milliseconds each: fewer cases.
    #![proptest_config(ProptestConfig::with_cases(cases() / 8))]

    #[test]
    fn transforms_on_large_and_clause_heavy_bodies(
        g in strategy::method(Config { huge_percent: 5, many_clauses_percent: 30, ..Config::everything() })
    ) {
        check_transforms(&g)?;
    }
}

fn check_transforms(g: &Generated) -> Result<(), TestCaseError> {
    let bytes = check_verifies(g)?;
    let body = Body::parse(&bytes).unwrap();
    let clauses: Vec<Clause> = body.clauses().copied().collect();
    let before = run_all(g, body.code, &clauses, FUEL);
    // A spare local for the wrap transforms to hold a return value in.
    let spare = g.shape.locals;
    let resolver = SyntheticResolver::clone(&g.resolver).locals(spare as u32 + 1);
    let opts = TransformOptions {
        prologue: vec![
            ir::Instr::new(Opcode::Ldc_I4, ir::Operand::Int32(0x1234_5678)),
            ir::Instr::op(Opcode::Pop),
        ],
        epilogue: vec![ir::Instr::op(Opcode::Nop)],
        catch_type: EXCEPTION_CLASS,
        returns_void: Some(g.shape.returns_void),
        return_local: Some(spare),
    };
    let mut rewriter = Rewriter::new();
    for &(name, transform) in TRANSFORMS {
        let mut m = Method::from_body(&body).expect("lifts");
        if name.starts_with("wrap") && !g.shape.returns_void && m.header.local_sig == 0 {
            m.header.local_sig = LOCALS_SIG;
        }
        if let Err(skip) = transform(&mut m, &opts) {
            prop_assert!(
                matches!(skip, ir::SkipReason::TailCallInsideER { .. }),
                "{name} skipped: {skip}\n{}",
                disasm::disassemble(&body)
            );
            continue;
        }
        let mut out = Vec::new();
        let laid = rewriter.layout(&m, &LayoutOptions::default(), &resolver, &mut out);
        prop_assert!(
            laid.is_ok(),
            "{name}: {:?}\n{}",
            laid.err(),
            disasm::disassemble(&body)
        );
        let new_body = Body::parse(&out).expect("rewritten body parses");
        let found = verify::verify(&new_body, &resolver);
        prop_assert!(found.is_empty(), "{name}: {found:?}");
        check_short_branches(name, new_body.code)?;
        if name == "identity" {
            prop_assert_eq!(
                &out,
                &bytes,
                "identity is a fixed point on canonical bodies"
            );
        }
        let new_clauses: Vec<Clause> = new_body.clauses().copied().collect();
        let after = run_all(g, new_body.code, &new_clauses, FUEL * 4);
        for (k, (a, b)) in before.iter().zip(&after).enumerate() {
            // Locals the transform added (a return-value holder) are not the program's.
            let locals_kept = (0..g.shape.locals as usize).all(|l| a.local(l) == b.local(l));
            prop_assert!(
                a.outcome == b.outcome && a.trace == b.trace && a.args == b.args && locals_kept,
                "{name} changed behaviour on inputs {:?}: {:?} / {:?}\ntraces {:?} / {:?}\nbefore:\n{}\nafter:\n{}",
                g.inputs[k],
                a.outcome,
                b.outcome,
                a.trace,
                b.trace,
                disasm::disassemble(&body),
                disasm::disassemble(&new_body)
            );
        }
    }
    Ok(())
}

/// Every short branch lands inside the code (the verifier checks instruction starts); after
/// `shorten`, a long branch is long because its displacement cannot fit a short form.
fn check_short_branches(name: &str, code: &[u8]) -> Result<(), TestCaseError> {
    for i in ilcheck::instr::Instructions::new(code) {
        let i = i.expect("decodes");
        let Some(target) = i.branch_target() else {
            continue;
        };
        prop_assert!(
            (0..code.len() as i64).contains(&target),
            "{name}: {i} out of range"
        );
        if name == "shorten" && i.opcode.operand_kind() == OperandKind::BrTarget {
            let disp = target - i.next_offset();
            // As a short branch the instruction is 3 bytes smaller: backward targets are 3
            // bytes nearer from its end, forward targets move with it.
            let short = if disp < 0 { disp + 3 } else { disp };
            prop_assert!(
                i8::try_from(short).is_err(),
                "shorten left {i} long though it fits short"
            );
        }
    }
    Ok(())
}

/// The generator reaches every encoding and construct it promises, over a fixed set of seeds.
#[test]
fn generator_covers_its_promises() {
    let config = Config::everything();
    let mut seen = std::collections::BTreeSet::new();
    let mut mutations = std::collections::BTreeSet::new();
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let (mut instrs, mut clauses, mut mutants) = (0usize, 0usize, 0usize);
    for _ in 0..600 {
        let bytes: Vec<u8> = (0..1500)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 24) as u8
            })
            .collect();
        let g = ilcheck::r#gen::generate_from_bytes(&bytes, &config);
        let out = encode(&g);
        let body = Body::parse(&out).unwrap();
        instrs += g.method.instrs.len();
        clauses += g.method.clauses.len();
        seen.insert(if body.is_tiny() { "tiny" } else { "fat" });
        for s in &body.sections {
            seen.insert(if s.is_fat() { "fat EH" } else { "small EH" });
        }
        if body.code.len() > 65536 {
            seen.insert("code above 64 KiB");
        }
        if body.clauses().count() > 20 {
            seen.insert("more than 20 clauses");
        }
        for c in body.clauses() {
            seen.insert(match c.kind() {
                ilcheck::body::ClauseKind::Catch => "catch",
                ilcheck::body::ClauseKind::Filter => "filter",
                ilcheck::body::ClauseKind::Finally => "finally",
                ilcheck::body::ClauseKind::Fault => "fault",
                ilcheck::body::ClauseKind::Invalid => "invalid",
            });
        }
        for i in ilcheck::instr::Instructions::new(body.code) {
            let i = i.unwrap();
            match i.opcode {
                Opcode::Switch => seen.insert("switch"),
                Opcode::Tail => seen.insert("tail."),
                Opcode::Rethrow => seen.insert("rethrow"),
                Opcode::Leave_S => seen.insert("leave.s"),
                Opcode::Leave => seen.insert("leave"),
                Opcode::Call => seen.insert("call"),
                _ => false,
            };
            if let Some(t) = i.branch_target() {
                if t <= i.offset as i64 {
                    seen.insert("backward branch");
                }
                let short_fits = i8::try_from(t - i.next_offset() + 3).is_ok();
                match i.opcode.operand_kind() {
                    OperandKind::ShortBrTarget => seen.insert("short branch"),
                    OperandKind::BrTarget if short_fits => seen.insert("long branch that fits"),
                    OperandKind::BrTarget => seen.insert("long branch that must be"),
                    _ => false,
                };
            }
        }
        for &mu in Mutation::ALL {
            if mutate(&g, mu, 0).is_some() {
                mutants += 1;
                mutations.insert(format!("{mu:?}"));
            }
        }
    }
    eprintln!(
        "600 bodies: {instrs} instructions, {clauses} clauses, {mutants} applicable mutations",
    );
    for want in [
        "tiny",
        "fat",
        "small EH",
        "fat EH",
        "code above 64 KiB",
        "more than 20 clauses",
        "catch",
        "filter",
        "finally",
        "fault",
        "switch",
        "tail.",
        "rethrow",
        "leave.s",
        "leave",
        "call",
        "backward branch",
        "short branch",
        "long branch that fits",
        "long branch that must be",
    ] {
        assert!(
            seen.contains(want),
            "never generated: {want} (saw {seen:?})"
        );
    }
    for &mu in Mutation::ALL {
        assert!(
            mutations.contains(&format!("{mu:?}")),
            "mutation {mu:?} never applicable"
        );
    }
}

/// The fuzzing front end produces valid bodies from any input.
#[test]
fn arbitrary_front_end_is_valid_on_any_input() {
    let config = Config::default();
    for seed in 0..200u32 {
        let bytes: Vec<u8> = (0..seed * 7)
            .map(|k| (k.wrapping_mul(2_654_435_761) >> (seed % 24)) as u8)
            .collect();
        let mut u = arbitrary::Unstructured::new(&bytes);
        let g = ilcheck::r#gen::arbitrary_method(&mut u, &config).unwrap();
        let out = encode(&g);
        let body = Body::parse(&out).unwrap();
        let found = verify::verify(&body, &g.resolver);
        assert!(found.is_empty(), "seed {seed}: {found:?}");
    }
}

/// Widening every branch keeps generated bodies valid (the layout forms, not a transform).
#[test]
fn all_long_layout_is_valid() {
    let mut state = 7u64;
    for _ in 0..100 {
        let bytes: Vec<u8> = (0..800)
            .map(|_| {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                (state >> 33) as u8
            })
            .collect();
        let g = ilcheck::r#gen::generate_from_bytes(&bytes, &Config::default());
        for forms in [BranchForms::AllLong, BranchForms::ShortestWhereFits] {
            let out = g.encode_with(forms).unwrap();
            let body = Body::parse(&out).unwrap();
            assert!(verify::verify(&body, &g.resolver).is_empty(), "{forms:?}");
        }
    }
}
