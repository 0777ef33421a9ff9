//! Properties over generated bodies: they verify clean, round-trip losslessly and canonically,
//! survive every transform of the rewriter valid and with the same behaviour, and each one-rule
//! mutation of them is caught with its expected diagnostic. The properties themselves live in
//! `ilcheck::gen::check`, shared with the fuzz target.
//!
//! `ILCHECK_PROPTEST_CASES` sets the number of cases per property (default 2000).

use ilcheck::body::Body;
use ilcheck::generate::check;
use ilcheck::generate::mutate::{Mutation, mutate};
use ilcheck::generate::{Config, Generated, strategy};
use ilcheck::ir::BranchForms;
use ilcheck::opcode::{Opcode, OperandKind};
use ilcheck::verify;
use proptest::prelude::*;
use proptest::strategy::ValueTree;

fn cases() -> u32 {
    std::env::var("ILCHECK_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000)
}

fn encode(g: &Generated) -> Vec<u8> {
    g.encode().expect("a generated method lays out")
}

/// Turns a property's verdict into a proptest failure.
fn holds(verdict: Result<(), String>) -> Result<(), TestCaseError> {
    verdict.map_err(TestCaseError::fail)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn generated_bodies_verify_clean(g in strategy::method(Config::default())) {
        holds(check::verifies(&g).map(drop))?;
    }

    #[test]
    fn straight_line_bodies_verify_clean(g in strategy::method(Config::straight_line())) {
        holds(check::verifies(&g).map(drop))?;
    }

    #[test]
    fn lossless_and_canonical_round_trips(g in strategy::method(Config::default())) {
        holds(check::round_trips(&g))?;
    }

    #[test]
    fn generated_bodies_run_within_fuel(g in strategy::method(Config::default())) {
        holds(check::runs_within_fuel(&g))?;
    }

    #[test]
    fn transforms_keep_bodies_valid_and_behaviour_unchanged(
        g in strategy::method(Config::default())
    ) {
        holds(check::transforms_preserve(&g))?;
    }

    #[test]
    fn transforms_on_deeply_nested_regions(
        g in strategy::method(Config { max_nesting: 7, max_eh_depth: 6, max_statements: 8, ..Config::default() })
    ) {
        holds(check::transforms_preserve(&g))?;
    }

    #[test]
    fn spliced_entry_exit_equals_the_ir_path(
        g in strategy::method(Config::everything())
    ) {
        holds(check::splice_agrees(&g).map(drop))?;
    }

    #[test]
    fn every_mutation_is_caught(g in strategy::method(Config::default()), choice in any::<u32>()) {
        holds(check::mutations_caught(&g, choice))?;
    }
}

/// Every edge shape in every body (and a lean stack in half of them): each property of
/// generated bodies still holds.
fn edge_heavy() -> Config {
    Config {
        entry_loop_percent: 100,
        entry_try_percent: 100,
        end_handler_percent: 100,
        lean_stack_percent: 50,
        branches: ilcheck::generate::BranchMix {
            edge: 4,
            ..Default::default()
        },
        ..Config::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases() / 2))]

    #[test]
    fn edge_heavy_bodies_keep_every_property(
        g in strategy::method(edge_heavy()),
        choice in any::<u32>(),
    ) {
        holds(check::all(&g, choice))?;
    }
}

/// The byte-level path answers for most generated bodies (nested regions, `switch`es, short
/// and long branches): agreement on bodies it declined would prove nothing.
#[test]
fn splice_answers_for_most_generated_bodies() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = strategy::method(Config::everything());
    let (mut answered, mut cases) = (0, 0);
    for _ in 0..300 {
        let g = strategy.new_tree(&mut runner).unwrap().current();
        answered += check::splice_agrees(&g).unwrap();
        cases += 18;
    }
    eprintln!("spliced {answered} of {cases} entry/exit rewrites of generated bodies");
    assert!(answered * 10 >= cases * 9, "only {answered} of {cases}");
}

proptest! {
    // Bodies above 64 KiB take milliseconds each: fewer cases.
    #![proptest_config(ProptestConfig::with_cases(cases() / 8))]

    #[test]
    fn transforms_on_large_and_clause_heavy_bodies(
        g in strategy::method(Config { huge_percent: 5, many_clauses_percent: 30, ..Config::everything() })
    ) {
        holds(check::transforms_preserve(&g))?;
    }
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
        let g = ilcheck::generate::generate_from_bytes(&bytes, &config);
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
                Opcode::Ldind_I4 => seen.insert("ldind.i4"),
                Opcode::Stind_I4 => seen.insert("stind.i4"),
                Opcode::Ldc_I8 => seen.insert("ldc.i8"),
                Opcode::Conv_I8 => seen.insert("conv.i8"),
                Opcode::Conv_U8 => seen.insert("conv.u8"),
                Opcode::Conv_I4 => seen.insert("conv.i4"),
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
        use ilcheck::generate::valid::{ArgType, ValType};
        if g.shape.arg_types.contains(&ArgType::RefI4) {
            seen.insert("int32& argument");
        }
        if g.shape.arg_types.contains(&ArgType::Val(ValType::I8)) {
            seen.insert("int64 argument");
        }
        if g.shape.local_types.contains(&ValType::I8) {
            seen.insert("int64 local");
        }
        if g.shape.returns() == Some(ValType::I8) {
            seen.insert("int64 return");
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
        "ldind.i4",
        "stind.i4",
        "ldc.i8",
        "conv.i8",
        "conv.u8",
        "conv.i4",
        "int32& argument",
        "int64 argument",
        "int64 local",
        "int64 return",
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
        let g = ilcheck::generate::arbitrary_method(&mut u, &config).unwrap();
        let out = encode(&g);
        let body = Body::parse(&out).unwrap();
        let found = verify::Verifier::new()
            .verify(&body, &g.resolver, &verify::Options::ALL)
            .to_vec();
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
        let g = ilcheck::generate::generate_from_bytes(&bytes, &Config::default());
        for forms in [BranchForms::AllLong, BranchForms::ShortestWhereFits] {
            let out = g.encode_with(forms).unwrap();
            let body = Body::parse(&out).unwrap();
            assert!(
                verify::Verifier::new()
                    .verify(&body, &g.resolver, &verify::Options::ALL)
                    .to_vec()
                    .is_empty(),
                "{forms:?}"
            );
        }
    }
}

/// What a laid-out body shows of the shapes rewriters get wrong at the edges of a method.
#[derive(Clone, Copy, Debug, Default)]
struct EdgeShapes {
    /// A handler whose last instruction is the body's.
    handler_ends_body: bool,
    /// A backward branch (or `switch` target) to IL_0000.
    loop_at_entry: bool,
    /// A try region starting at IL_0000.
    try_at_entry: bool,
    /// A short branch with displacement −128, and one with +127.
    short_min: bool,
    short_max: bool,
    /// A fat header declaring MaxStack 0 or 1.
    fat_max_stack_le_1: bool,
}

fn edge_shapes(bytes: &[u8]) -> EdgeShapes {
    let body = Body::parse(bytes).unwrap();
    let len = body.code.len() as u64;
    let mut s = EdgeShapes {
        fat_max_stack_le_1: !body.is_tiny() && body.max_stack() <= 1,
        ..EdgeShapes::default()
    };
    for c in body.clauses() {
        s.handler_ends_body |= c.handler_end() == len;
        s.try_at_entry |= c.try_offset == 0;
    }
    for i in ilcheck::instr::Instructions::new(body.code) {
        let i = i.unwrap();
        if let ilcheck::instr::Operand::Switch(t) = &i.operand {
            s.loop_at_entry |= t.iter().any(|d| i.next_offset() + d as i64 == 0);
        }
        let Some(target) = i.branch_target() else {
            continue;
        };
        s.loop_at_entry |= target == 0 && i.offset > 0;
        if i.opcode.operand_kind() == OperandKind::ShortBrTarget {
            let disp = target - i.next_offset();
            s.short_min |= disp == -128;
            s.short_max |= disp == 127;
        }
    }
    s
}

/// Counts of each edge shape over `n` bodies of `config` from fixed choice streams.
fn count_edge_shapes(config: &Config, n: usize) -> [usize; 6] {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut counts = [0; 6];
    for _ in 0..n {
        let bytes: Vec<u8> = (0..2048)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 24) as u8
            })
            .collect();
        let g = ilcheck::generate::generate_from_bytes(&bytes, config);
        let s = edge_shapes(&encode(&g));
        for (k, seen) in [
            s.handler_ends_body,
            s.loop_at_entry,
            s.try_at_entry,
            s.short_min,
            s.short_max,
            s.fat_max_stack_le_1,
        ]
        .into_iter()
        .enumerate()
        {
            counts[k] += seen as usize;
        }
    }
    counts
}

/// The default settings give every shape a rewriter tends to get wrong at the edges of a body
/// in a good share of bodies: a handler ending the body, a loop headed at IL_0000, a try at
/// IL_0000, short branches of displacement −128 and +127, a fat header with MaxStack ≤ 1.
#[test]
fn edge_shapes_appear_regularly() {
    let n = 500;
    let counts = count_edge_shapes(&Config::default(), n);
    let names = [
        "handler ending the body",
        "loop at IL_0000",
        "try at IL_0000",
        "short branch of -128",
        "short branch of +127",
        "fat MaxStack <= 1",
    ];
    for (name, c) in names.iter().zip(counts) {
        eprintln!("{name}: {c} of {n} bodies");
        // At least 4% of bodies each (the defaults aim at 10-20%).
        assert!(c * 25 >= n, "{name}: only {c} of {n} bodies");
    }
}

/// Each edge shape's knob switches it off.
#[test]
fn edge_shape_knobs_switch_them_off() {
    let off = Config {
        entry_loop_percent: 0,
        end_handler_percent: 0,
        lean_stack_percent: 0,
        branches: ilcheck::generate::BranchMix {
            edge: 0,
            ..Default::default()
        },
        ..Config::default()
    };
    let [handler_end, entry_loop, _, short_min, short_max, _] = count_edge_shapes(&off, 300);
    assert_eq!((handler_end, entry_loop), (0, 0));
    // A displacement at a limit by chance is rare.
    assert!(short_min + short_max <= 6, "{short_min} {short_max}");
}

/// With `byref_percent` and `int64_percent` at 0 every argument, local and return is an
/// `int32` and no pointer or `int64` instruction appears; the defaults give them in a good
/// share of bodies.
#[test]
fn typed_value_knobs_switch_them_off() {
    use ilcheck::generate::valid::{ArgType, ValType};
    let typed = |config: &Config| {
        let mut bodies = 0;
        for k in 0..300u64 {
            let bytes = ilcheck::harness::program::seed_bytes(k, 1500);
            let g = ilcheck::generate::generate_from_bytes(&bytes, config);
            let out = encode(&g);
            let body = Body::parse(&out).unwrap();
            let wide = ilcheck::instr::Instructions::new(body.code).any(|i| {
                matches!(
                    i.unwrap().opcode,
                    Opcode::Ldind_I4
                        | Opcode::Stind_I4
                        | Opcode::Ldc_I8
                        | Opcode::Conv_I8
                        | Opcode::Conv_U8
                        | Opcode::Conv_I4
                )
            });
            let types = g
                .shape
                .arg_types
                .iter()
                .any(|&t| t != ArgType::Val(ValType::I4))
                || g.shape.local_types.contains(&ValType::I8)
                || g.shape.returns() == Some(ValType::I8);
            bodies += (wide || types) as usize;
        }
        bodies
    };
    // `S::b` is an `int64`: the struct knob off too.
    let off = Config {
        byref_percent: 0,
        int64_percent: 0,
        struct_percent: 0,
        object_percent: 0,
        ..Config::everything()
    };
    assert_eq!(typed(&off), 0);
    let on = typed(&Config::default());
    assert!(on >= 100, "only {on} of 300 bodies use int32& or int64");
}

/// Per body of `config` over `n` seeds: whether it computes with `S` (a token of `S` or one of
/// its fields in the code) and with `C` (a token of `C`, its field or its constructor); the
/// opcodes of those instructions seen, and how many `isinst C` test a boxed `S`.
fn struct_and_class_use(
    config: &Config,
    n: u64,
) -> (usize, usize, std::collections::BTreeSet<Opcode>, usize) {
    use ilcheck::generate::valid::{
        CLASS_CTOR, CLASS_TYPE, CLASS_X, STRUCT_A, STRUCT_B, STRUCT_TYPE,
    };
    let (mut with_s, mut with_c, mut boxed_tests) = (0, 0, 0);
    let mut ops = std::collections::BTreeSet::new();
    for k in 0..n {
        let bytes = ilcheck::harness::program::seed_bytes(k, 4096);
        let g = ilcheck::generate::generate_from_bytes(&bytes, config);
        let (mut s, mut c) = (false, false);
        boxed_tests += g
            .method
            .instrs
            .windows(2)
            .filter(|w| {
                (w[0].opcode, w[0].operand, w[1].opcode, w[1].operand)
                    == (
                        Opcode::Box,
                        ilcheck::ir::Operand::Token(STRUCT_TYPE),
                        Opcode::Isinst,
                        ilcheck::ir::Operand::Token(CLASS_TYPE),
                    )
            })
            .count();
        for i in &g.method.instrs {
            if let ilcheck::ir::Operand::Token(t) = i.operand {
                if [STRUCT_TYPE, STRUCT_A, STRUCT_B].contains(&t) {
                    s = true;
                    ops.insert(i.opcode);
                }
                if [CLASS_TYPE, CLASS_X, CLASS_CTOR].contains(&t) {
                    c = true;
                    ops.insert(i.opcode);
                }
            }
        }
        with_s += s as usize;
        with_c += c as usize;
    }
    (with_s, with_c, ops, boxed_tests)
}

/// The defaults compute with the value type `S` and the class `C` in a good share of bodies,
/// with every operation the generator promises on them; at 0 the knobs switch them off.
#[test]
fn struct_and_class_values_appear_at_their_rates() {
    let (s, c, ops, boxed_tests) = struct_and_class_use(&Config::default(), 500);
    eprintln!(
        "of 500 bodies: {s} use S, {c} use C; opcodes {ops:?}; {boxed_tests} isinst C of a \
         boxed S"
    );
    assert!(s >= 150, "only {s} of 500 bodies use S");
    assert!(c >= 100, "only {c} of 500 bodies use C");
    assert!(
        boxed_tests >= 10,
        "only {boxed_tests} isinst C of a boxed S"
    );
    for want in [
        Opcode::Initobj,
        Opcode::Stfld,
        Opcode::Ldfld,
        Opcode::Box,
        Opcode::Unbox_Any,
        Opcode::Unbox,
        Opcode::Ldobj,
        Opcode::Newobj,
        Opcode::Castclass,
        Opcode::Isinst,
    ] {
        assert!(ops.contains(&want), "{want:?} never applied to S or C");
    }
    let off = Config {
        struct_percent: 0,
        object_percent: 0,
        ..Config::default()
    };
    let (s, c, _, _) = struct_and_class_use(&off, 300);
    assert_eq!((s, c), (0, 0));
}

/// `S` and `C` as arguments, locals and return types, and calls between generated methods
/// passing and returning them, all appear in programs.
#[test]
fn struct_and_class_signatures_appear() {
    use ilcheck::generate::valid::{ArgType, ValType};
    let methods = ilcheck::harness::program::generate_methods(11, 400, &Config::default());
    let mut seen = std::collections::BTreeSet::new();
    for m in &methods {
        let g = &m.generated;
        for (t, name) in [(ValType::Struct, "S"), (ValType::Class, "C")] {
            if g.shape.arg_types.contains(&ArgType::Val(t)) {
                seen.insert(format!("{name} argument"));
            }
            if g.shape.local_types.contains(&t) {
                seen.insert(format!("{name} local"));
            }
            if g.shape.returns() == Some(t) {
                seen.insert(format!("{name} return"));
            }
            if g.calls_peers
                && g.peers
                    .iter()
                    .any(|p| p.ret == Some(t) || p.args.contains(&ArgType::Val(t)))
            {
                seen.insert(format!("{name} offered to a peer call"));
            }
        }
    }
    for want in [
        "S argument",
        "S local",
        "S return",
        "S offered to a peer call",
        "C argument",
        "C local",
        "C return",
        "C offered to a peer call",
    ] {
        assert!(
            seen.contains(want),
            "never generated: {want} (saw {seen:?})"
        );
    }
}
