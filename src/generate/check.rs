//! The properties of generated bodies as functions, shared by the property tests and the fuzz
//! target: each returns `Err` with an explanation (and a listing) when its property fails.

use super::interp::{self, Outcome as RunOutcome, Run};
use super::mutate::{Mutation, mutate};
use super::valid::{EXCEPTION_CLASS, Generated, LOCALS_SIG};
use crate::body::{Body, BodyParts, Clause};
use crate::disasm;
use crate::ir::{
    self, BranchForms, EntryExit, Instr, LayoutOptions, MaxStackPolicy, Method, Operand, Rewriter,
    SkipReason, Transform, TransformOptions,
};
use crate::opcode::{Opcode, OperandKind};
use crate::verify;

/// Steps a generated body may take: its loops are bounded, so running out is a bug.
pub const FUEL: u64 = 2_000_000;

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)*) => {
        if !$cond {
            return Err(format!($($fmt)*));
        }
    };
}

fn listing(code: &[u8], clauses: &[Clause]) -> String {
    let mut s = String::new();
    let _ = disasm::write_code(&mut s, code, clauses);
    s
}

/// Runs the laid-out body on every input of `g`.
pub fn run_inputs(g: &Generated, code: &[u8], clauses: &[Clause], fuel: u64) -> Vec<Run> {
    let env = g.env(fuel);
    g.inputs
        .iter()
        .map(|args| interp::run(code, clauses, args, &env))
        .collect()
}

/// The body lays out and verifies clean, and the verifier's single forward pass changes no
/// result on it; returns its bytes.
pub fn verifies(g: &Generated) -> Result<Vec<u8>, String> {
    let bytes = laid_out(g)?;
    let body = Body::parse(&bytes).map_err(|e| format!("laid-out body: {e}"))?;
    let clauses: Vec<Clause> = body.clauses().collect();
    verify::single_pass_agrees(body.code, &clauses, body.max_stack(), &g.resolver)?;
    Ok(bytes)
}

/// The body lays out and verifies clean; returns its bytes.
fn laid_out(g: &Generated) -> Result<Vec<u8>, String> {
    let bytes = g.encode().map_err(|e| format!("layout: {e}"))?;
    let body = Body::parse(&bytes).map_err(|e| format!("laid-out body: {e}"))?;
    let found = verify::Verifier::new()
        .verify(&body, &g.resolver, &verify::Options::ALL)
        .to_vec();
    ensure!(
        found.is_empty(),
        "generated body does not verify: {found:?}\n{}",
        disasm::disassemble(&body)
    );
    Ok(bytes)
}

/// Lossless re-encoding gives the same bytes, the layout is canonical, and lifting then laying
/// out again gives the same bytes.
pub fn round_trips(g: &Generated) -> Result<(), String> {
    let bytes = verifies(g)?;
    let body = Body::parse(&bytes).map_err(|e| e.to_string())?;
    let mut again = Vec::new();
    body.encode(&mut again).map_err(|e| e.to_string())?;
    ensure!(again == bytes, "lossless round trip changed the bytes");
    ensure!(body.is_canonical(), "layout output is not canonical");
    let lifted = Method::from_body(&body).map_err(|e| format!("lift: {e}"))?;
    let mut relaid = Vec::new();
    let opts = LayoutOptions {
        max_stack: MaxStackPolicy::Declared,
        verify: false,
        ..LayoutOptions::default()
    };
    ir::layout(&lifted, &opts, &g.resolver, &mut relaid).map_err(|e| e.to_string())?;
    ensure!(relaid == bytes, "lift and layout changed the bytes");
    Ok(())
}

/// Every run returns (with a value exactly when the method is not void) or throws.
pub fn runs_within_fuel(g: &Generated) -> Result<(), String> {
    let bytes = laid_out(g)?;
    let body = Body::parse(&bytes).map_err(|e| e.to_string())?;
    let clauses: Vec<Clause> = body.clauses().collect();
    for run in run_inputs(g, body.code, &clauses, FUEL) {
        let ok = match run.outcome {
            RunOutcome::Returned(v) => v.is_none() == g.shape.returns_void,
            RunOutcome::Threw(_) => true,
            _ => false,
        };
        ensure!(ok, "{:?}\n{}", run.outcome, listing(body.code, &clauses));
    }
    Ok(())
}

/// A prologue that leaves the stack as it found it, long enough to move every offset:
/// `ldc.i4 0x12345678; pop`.
fn marker_prologue() -> Vec<Instr> {
    vec![
        Instr::new(Opcode::Ldc_I4, Operand::Int32(0x1234_5678)),
        Instr::op(Opcode::Pop),
    ]
}

/// The options every transform is checked with: [`marker_prologue`], a `nop` epilogue, the
/// synthetic exception class for the wraps to catch, and `spare` as the local a wrap keeps the
/// return value in (the epilogue copies it there too, as for a probe that reads it).
pub(crate) fn checked_options(returns_void: bool, spare: u16) -> TransformOptions {
    TransformOptions {
        prologue: marker_prologue(),
        epilogue: vec![Instr::op(Opcode::Nop)],
        catch_type: EXCEPTION_CLASS,
        returns_void: Some(returns_void),
        return_local: Some(spare),
        store_return: true,
        ..TransformOptions::default()
    }
}

/// Every transform of the rewriter keeps the body valid and its behaviour (result, exception,
/// calls, final arguments and locals) unchanged; `identity` is a fixed point; no branch lands
/// outside the code; after `shorten` no long branch could have been short.
pub fn transforms_preserve(g: &Generated) -> Result<(), String> {
    let bytes = laid_out(g)?;
    let body = Body::parse(&bytes).map_err(|e| e.to_string())?;
    let clauses: Vec<Clause> = body.clauses().collect();
    let before = run_inputs(g, body.code, &clauses, FUEL);
    // A spare local for the wrap transforms to hold a return value in.
    let spare = g.shape.locals;
    let resolver = g.resolver.clone().locals(spare as u32 + 1);
    let opts = checked_options(g.shape.returns_void, spare);
    let mut rewriter = Rewriter::new();
    for transform in Transform::ALL {
        let name = transform.name();
        let mut m = Method::from_body(&body).map_err(|e| format!("lift: {e}"))?;
        if transform.wraps() && !g.shape.returns_void && m.header.local_sig == 0 {
            m.header.local_sig = LOCALS_SIG;
        }
        if let Err(skip) = transform.apply(&mut m, &opts) {
            ensure!(
                matches!(skip, SkipReason::TailCallInsideER { .. }),
                "{name} skipped: {skip}\n{}",
                disasm::disassemble(&body)
            );
            continue;
        }
        let mut out = Vec::new();
        if let Err(e) = rewriter.layout(&m, &LayoutOptions::default(), &resolver, &mut out) {
            return Err(format!("{name}: {e}\n{}", disasm::disassemble(&body)));
        }
        let new_body = Body::parse(&out).map_err(|e| format!("{name}: {e}"))?;
        let found = verify::Verifier::new()
            .verify(&new_body, &resolver, &verify::Options::ALL)
            .to_vec();
        ensure!(found.is_empty(), "{name}: {found:?}");
        branches_in_range(name, new_body.code)?;
        ensure!(
            name != "identity" || out == bytes,
            "identity is not a fixed point on a canonical body"
        );
        let new_clauses: Vec<Clause> = new_body.clauses().collect();
        let after = run_inputs(g, new_body.code, &new_clauses, FUEL * 4);
        for (k, (a, b)) in before.iter().zip(&after).enumerate() {
            // Locals the transform added (a return-value holder) are not the program's.
            let locals_kept = (0..g.shape.locals as usize).all(|l| a.local(l) == b.local(l));
            ensure!(
                a.outcome == b.outcome && a.trace == b.trace && a.args == b.args && locals_kept,
                "{name} changed behaviour on inputs {:?}: {:?} / {:?}\ntraces {:?} / {:?}\n\
                 before:\n{}\nafter:\n{}",
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

/// The entry/exit transforms' byte-level path gives what the IR path gives, wherever it
/// answers, under every branch-form option: with the snippets [`transforms_preserve`] uses, and
/// with an epilogue long enough that every redirected `ret` must be widened. Returns how many
/// of the cases it answered.
pub fn splice_agrees(g: &Generated) -> Result<usize, String> {
    let bytes = laid_out(g)?;
    let body = Body::parse(&bytes).map_err(|e| e.to_string())?;
    let resolver = &g.resolver;
    let short = TransformOptions {
        prologue: marker_prologue(),
        returns_void: Some(g.shape.returns_void),
        ..TransformOptions::default()
    };
    let long = TransformOptions {
        epilogue: vec![Instr::op(Opcode::Nop); 130],
        ..short.clone()
    };
    let mut rewriter = Rewriter::new();
    let mut answered = 0;
    for which in [
        EntryExit::Prologue,
        EntryExit::Epilogue,
        EntryExit::PrologueEpilogue,
    ] {
        for (opts, branch_forms) in [&short, &long].into_iter().flat_map(|o| {
            [
                BranchForms::KeepOriginal,
                BranchForms::AllLong,
                BranchForms::ShortestWhereFits,
            ]
            .map(|f| (o, f))
        }) {
            let layout = LayoutOptions {
                branch_forms,
                ..LayoutOptions::default()
            };
            let mut fast = Vec::new();
            let Ok(got) =
                rewriter.splice(&body, which.transform(), opts, &layout, resolver, &mut fast)
            else {
                continue;
            };
            answered += 1;
            let mut slow = Vec::new();
            let want =
                rewriter.rewrite_ir(&body, which.transform(), opts, &layout, resolver, &mut slow);
            ensure!(
                want == Ok(got) && fast == slow,
                "{which:?} {branch_forms:?}: spliced {got:?}, IR {want:?}\n{}",
                disasm::disassemble(&body)
            );
        }
    }
    Ok(answered)
}

/// Every branch lands inside the code (the verifier checks instruction starts); after
/// `shorten`, a long branch is long because its displacement cannot fit a short form.
fn branches_in_range(name: &str, code: &[u8]) -> Result<(), String> {
    for i in crate::instr::Instructions::new(code) {
        let i = i.map_err(|e| format!("{name}: {e}"))?;
        let Some(target) = i.branch_target() else {
            continue;
        };
        ensure!(
            (0..code.len() as i64).contains(&target),
            "{name}: {i} out of range"
        );
        if name == "shorten" && i.opcode.operand_kind() == OperandKind::BrTarget {
            let disp = target - i.next_offset();
            // As a short branch the instruction is 3 bytes smaller: backward targets are 3
            // bytes nearer from its end, forward targets move with it.
            let short = if disp < 0 { disp + 3 } else { disp };
            ensure!(
                i8::try_from(short).is_err(),
                "shorten left {i} long though it fits short"
            );
        }
    }
    Ok(())
}

/// Every mutation with a site in `g` is reported with its expected code, the same through
/// [`Verifier::verify`](verify::Verifier::verify) of the code and clauses and of the whole
/// body, and with [`Options::FIRST`](verify::Options::FIRST).
pub fn mutations_caught(g: &Generated, choice: u32) -> Result<(), String> {
    for &mutation in Mutation::ALL {
        let Some(m) = mutate(g, mutation, choice) else {
            continue;
        };
        let found = verify::Verifier::new()
            .verify(
                verify::Subject::Code {
                    code: &m.code,
                    clauses: &m.clauses,
                    declared_max_stack: Some(m.max_stack),
                },
                &g.resolver,
                &verify::Options::ALL,
            )
            .to_vec();
        verify::single_pass_agrees(&m.code, &m.clauses, m.max_stack, &g.resolver)
            .map_err(|e| format!("{mutation:?}: {e}"))?;
        ensure!(
            found.iter().any(|d| d.code == m.expected),
            "{mutation:?} expected {:?}, verifier said {found:?}\n{}",
            m.expected,
            listing(&m.code, &m.clauses)
        );
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
        parts
            .encode_canonical(&mut bytes)
            .map_err(|e| format!("{mutation:?}: {e}"))?;
        let body = Body::parse(&bytes).map_err(|e| format!("{mutation:?}: {e}"))?;
        let whole = verify::Verifier::new()
            .verify(&body, &g.resolver, &verify::Options::ALL)
            .to_vec();
        ensure!(
            whole == found,
            "{mutation:?}: verify gave {whole:?}, verify_code gave {found:?}"
        );
        ensure!(
            !verify::Verifier::new()
                .verify(&body, &g.resolver, &verify::Options::FIRST)
                .is_empty(),
            "{mutation:?}: verify_first found nothing"
        );
    }
    Ok(())
}

/// Every property on one generated body (for fuzz targets).
pub fn all(g: &Generated, choice: u32) -> Result<(), String> {
    round_trips(g)?;
    runs_within_fuel(g)?;
    transforms_preserve(g)?;
    splice_agrees(g)?;
    mutations_caught(g, choice)
}
