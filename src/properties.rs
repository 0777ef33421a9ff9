//! Properties checked on untrusted input, one function per fuzz target. Each panics when its
//! property fails; a panic anywhere inside (a bug in the code under test) fails it too.
//!
//! The fuzz targets in `fuzz/` call these, and `tests/it/regressions.rs` replays every input kept
//! in `corpus/regressions/<target>/` through them, so a crash found once stays fixed.

use crate::body::Body;
use crate::image::Image;
use crate::image::tables::{Table, Token};
use crate::verify::{CallSig, NoResolver, SyntheticResolver, Verifier, single_pass_agrees};

/// Arbitrary bytes as a method body: decoding never panics; when it succeeds, lossless encoding
/// reproduces exactly the bytes consumed, and canonical encoding is a fixed point.
pub fn decode_body(data: &[u8]) {
    let Ok(body) = Body::parse(data) else { return };
    assert!(body.len() <= data.len());
    let mut out = Vec::new();
    body.encode(&mut out).expect("a decoded body re-encodes");
    assert_eq!(out, &data[..body.len()], "lossless round trip");
    let _ = body.validate_code();
    let _ = crate::disasm::disassemble(&body);
    let mut canon = Vec::new();
    body.encode_canonical(&mut canon)
        .expect("a decoded body encodes canonically");
    let again = Body::parse(&canon).expect("canonical bytes decode");
    assert_eq!(again.len(), canon.len());
    let mut twice = Vec::new();
    again
        .encode_canonical(&mut twice)
        .expect("canonical re-encodes");
    assert_eq!(twice, canon, "canonical fixed point");
}

/// Arbitrary bytes as a PE image: reading never panics, and every method's name, signature and
/// body read without panicking; memory stays bounded by the input (no allocation is sized by an
/// unchecked length field). Writing it with every body replaced by one a byte longer (so that
/// most move, into the space the old ones leave or a new section) never panics either, and
/// what it writes reads back.
pub fn read_image(data: &[u8]) {
    let Ok(image) = Image::parse(data) else {
        return;
    };
    let _ = image.method_stats();
    let mut writer = crate::image::writer::ImageWriter::new(&image);
    for method in image.methods().take(4096) {
        let Ok(body) = method.body() else { continue };
        // A tiny body of `nop`s and a `ret`, one byte longer than the original up to 64 bytes.
        let code = body.len().clamp(1, 63);
        let mut new = vec![((code as u8) << 2) | 0x2];
        new.resize(code, 0x00);
        new.push(0x2A);
        let _ = writer.replace_body(method.rid(), new);
    }
    if let Ok(patched) = writer.finish() {
        assert!(
            Image::parse(&patched.bytes).is_ok(),
            "a written image reads back"
        );
    }
    let mut verifier = Verifier::new();
    // Bounded, so a hostile row count cannot make one input run for minutes.
    for method in image.methods().take(4096) {
        let _ = method.full_name();
        let _ = method.signature();
        if let Ok(body) = method.decoded_body() {
            let mut out = Vec::new();
            if body.encode(&mut out).is_ok() {
                assert_eq!(
                    Some(out.as_slice()),
                    method.body().ok(),
                    "lossless body from an image"
                );
            }
            let resolver = crate::verify::ImageResolver::for_method(&image, &method, &body);
            let _ = verifier.verify(&body, &resolver, &crate::verify::Options::ALL);
        }
    }
    for table in [Table::MemberRef, Table::MethodSpec, Table::StandAloneSig] {
        for rid in 1..=image.tables_header().rows(table).min(1024) {
            let token = Token::new(table, rid);
            let _ = image.method_sig(token);
            let _ = image.standalone_sig(token);
            let _ = image.token_exists(token);
        }
    }
}

/// Arbitrary bytes as a body, verified with no metadata and with a synthetic module drawn from
/// the input's first bytes: the verifier never panics, its single forward pass changes no result,
/// and a body it finds clean stays within its declared MaxStack by the max-stack computation.
pub fn verify_any(data: &[u8]) {
    let (facts, rest) = data.split_at(data.len().min(4));
    let Ok(body) = Body::parse(rest) else { return };
    let mut verifier = Verifier::new();
    let _ = verifier.verify(&body, &NoResolver, &crate::verify::Options::ALL);
    let resolver = synthetic_module(&Facts::read(facts), &body, 0);
    let clauses: Vec<_> = body.clauses().collect();
    for r in [&resolver as &dyn crate::verify::Resolver, &NoResolver] {
        if let Err(e) = single_pass_agrees(body.code, &clauses, body.max_stack(), r) {
            panic!("{e}");
        }
    }
    let clean = verifier
        .verify(&body, &resolver, &crate::verify::Options::ALL)
        .is_empty()
        && verifier.is_complete();
    if clean {
        // A clean body stays within its declared MaxStack, by the same dataflow's count.
        let code_only = crate::verify::Subject::Code {
            code: body.code,
            clauses: &clauses,
            declared_max_stack: None,
        };
        verifier.verify(code_only, &resolver, &crate::verify::Options::FIRST);
        let max = verifier
            .needed_max_stack()
            .expect("a clean body has a max stack");
        assert!(
            max <= body.max_stack(),
            "computed max stack {max} above declared {}",
            body.max_stack()
        );
    }
}

/// What the first bytes of a `verify_any` or `rewrite_any` input say of the method its body
/// belongs to (missing bytes read as 0).
struct Facts {
    args: u16,
    returns_void: bool,
    locals: u32,
}

impl Facts {
    fn read(bytes: &[u8]) -> Facts {
        let byte = |i: usize| bytes.get(i).copied().unwrap_or(0);
        Facts {
            args: u16::from(byte(0) % 8),
            returns_void: byte(1) & 1 == 0,
            locals: u32::from(byte(2) % 16),
        }
    }
}

/// The synthetic module `verify_any` and `rewrite_any` verify a body in: the method `facts`
/// describe with `spare` locals more, and a signature for every token of the body derived
/// from the token's value.
fn synthetic_module(facts: &Facts, body: &Body<'_>, spare: u32) -> SyntheticResolver {
    let mut resolver = SyntheticResolver::new()
        .method(facts.args, facts.returns_void)
        .locals(facts.locals + spare);
    for instr in body.instructions().flatten() {
        if let crate::instr::Operand::Token(t) = instr.operand {
            let sig = CallSig::static_method((t % 5) as u16, t & 8 == 0);
            resolver = resolver
                .call(
                    t,
                    if t & 16 == 0 {
                        sig
                    } else {
                        CallSig::instance((t % 3) as u16, t & 32 == 0)
                    },
                )
                .token(t);
        }
    }
    resolver
}

/// Arbitrary bytes as a body in a synthetic module (4 bytes of facts first, as `verify_any`
/// reads them): when the verifier finds it clean, every transform of the rewriter either
/// declines with a typed error or writes a body that parses to exactly the bytes written and
/// verifies clean; and wherever the entry/exit transforms' byte-level splice answers, under
/// every branch-form option, the IR path gives the same bytes and outcome. Where
/// `rewrite_generated` draws valid bodies from the generator, this takes whatever valid body
/// the fuzzer reaches from real ones: shapes no generator makes.
#[cfg(feature = "gen")]
pub fn rewrite_any(data: &[u8]) {
    rewrite_any_written(data);
}

/// [`rewrite_any`], returning how many bodies the transforms wrote (0 for an input the
/// verifier does not find clean), so that a test can tell the property was exercised.
#[cfg(feature = "gen")]
pub fn rewrite_any_written(data: &[u8]) -> usize {
    use crate::generate::valid::{EXCEPTION_CLASS, LOCALS_SIG};
    use crate::ir::{BranchForms, EntryExit, LayoutOptions, Rewriter, Transform};
    let (facts, rest) = data.split_at(data.len().min(4));
    let Ok(body) = Body::parse(rest) else {
        return 0;
    };
    let facts = Facts::read(facts);
    // One local more than the body's, for the wrap transforms to keep a return value in.
    let resolver = synthetic_module(&facts, &body, 1)
        .token(EXCEPTION_CLASS)
        .token(LOCALS_SIG);
    let mut verifier = Verifier::new();
    let options = &crate::verify::Options::ALL;
    if !verifier.verify(&body, &resolver, options).is_empty() || !verifier.is_complete() {
        return 0;
    }
    let mut written = 0;
    // The locals `facts` give number at most 15: the spare one's index fits.
    let spare = facts.locals as u16;
    let opts = crate::generate::check::checked_options(facts.returns_void, spare);
    let mut rewriter = Rewriter::new();
    for transform in Transform::ALL {
        let mut out = Vec::new();
        let layout = LayoutOptions::default();
        let Ok(_) = rewriter.rewrite(&body, transform, &opts, &layout, &resolver, &mut out) else {
            assert!(
                out.is_empty(),
                "{}: a refused rewrite wrote bytes",
                transform.name()
            );
            continue;
        };
        let new = Body::parse(&out).unwrap_or_else(|e| {
            panic!("{}: the written body does not parse: {e}", transform.name())
        });
        assert_eq!(
            new.len(),
            out.len(),
            "{}: bytes past the body",
            transform.name()
        );
        let found = verifier.verify(&new, &resolver, options);
        assert!(found.is_empty(), "{}: {found:?}", transform.name());
        written += 1;
    }
    for which in [
        EntryExit::Prologue,
        EntryExit::Epilogue,
        EntryExit::PrologueEpilogue,
    ] {
        for branch_forms in [
            BranchForms::KeepOriginal,
            BranchForms::AllLong,
            BranchForms::ShortestWhereFits,
        ] {
            let layout = LayoutOptions {
                branch_forms,
                ..LayoutOptions::default()
            };
            let t = which.transform();
            let mut fast = Vec::new();
            let Ok(got) = rewriter.splice(&body, t, &opts, &layout, &resolver, &mut fast) else {
                continue;
            };
            let mut slow = Vec::new();
            let want = rewriter.rewrite_ir(&body, t, &opts, &layout, &resolver, &mut slow);
            assert!(
                want == Ok(got) && fast == slow,
                "{which:?} {branch_forms:?}: spliced {got:?}, IR {want:?}"
            );
        }
    }
    written
}

/// Arbitrary bytes as a PE image, type-checked: the type system and the checker never panic
/// and stay bounded, whatever the image's signatures, TypeRefs, generics and base chains say;
/// and reading the image's rows ahead (in table order) gives the same findings, and the same
/// methods checked in part, as resolving each row when a method first asks. The image is also
/// held in memory as a reference under its own assembly name, so an AssemblyRef naming it
/// (a module that references itself, or a cycle through one) resolves, as it would for a file
/// in the input's directory. Methods the structural verifier rejects are checked too (the
/// command line skips them, a library caller may not), with their findings left uncompared.
pub fn verify_types(data: &[u8]) {
    use crate::corpus::{ReadAhead, TypePass, TypeSummary, types_checked};
    use crate::verify::types::ModuleStore;
    let Ok(image) = Image::parse(data) else {
        return;
    };
    let mut store = ModuleStore::new(Vec::new());
    if let Ok(itself) = Image::from_shared(std::sync::Arc::from(data)) {
        store.hold(itself, "itself.dll".into());
    }
    // Bounded, so a hostile row count cannot make one input run for minutes.
    let work: Vec<_> = image
        .methods()
        .filter(|m| m.rva() != 0)
        .take(1024)
        .map(|m| (m, m.decoded_body()))
        .collect();
    let mut verifier = Verifier::new();
    let mut resolver = crate::verify::ImageResolver::new(&image);
    let clean: Vec<bool> = work
        .iter()
        .map(|(m, body)| {
            body.as_ref().is_ok_and(|body| {
                resolver.set_method(m, body);
                let diags = verifier.verify(body, &resolver, &crate::verify::Options::ALL);
                types_checked(diags.iter().map(|d| d.code))
            })
        })
        .collect();
    type Found = Vec<(usize, crate::verify::Code, u32, String)>;
    let run = |read_ahead: ReadAhead, accepted: &dyn Fn(usize) -> bool| -> (Found, u64) {
        let mut pass = TypePass::new(&store).with_read_ahead(read_ahead);
        let mut summary = TypeSummary::default();
        let mut found = Vec::new();
        pass.run(&image, None, &work, accepted, &mut summary, |k, c, o, m| {
            found.push((k, c, o, m))
        });
        (found, summary.methods_in_part)
    };
    let accepted = |k: usize| clean[k];
    let on_demand = run(ReadAhead::Never, &accepted);
    let ahead = run(ReadAhead::Always, &accepted);
    assert_eq!(
        on_demand, ahead,
        "reading ahead changes the findings or the methods checked in part"
    );
    run(ReadAhead::Never, &|_| true);
}

/// Arbitrary bytes as a method body of the project's `type_cases.dll` (the first two bytes
/// choose the method whose signature and declaring type frame it; the rest is the body, header
/// and all), type-checked against the runtime's core library where one is installed: the
/// checker never panics, and its answer (findings, their count beyond the limit, whether and
/// why it checked in part) is the same from a fresh checker and from one that has just checked
/// another body, and from a type system that resolved other rows first: nothing of one body
/// leaks into the next.
pub fn verify_types_body(data: &[u8]) {
    use crate::verify::types::{ModuleStore, TypeChecker, TypeSystem};
    use std::sync::OnceLock;
    // The host image, the store, and the host's longest body (the other body checked first).
    type Host = (Image<'static>, ModuleStore, Option<u32>);
    static HOST: OnceLock<Option<Host>> = OnceLock::new();
    let Some((image, store, longest)) = HOST.get_or_init(|| {
        let (_, bytes) = crate::corpus::EMBEDDED
            .iter()
            .find(|(name, _)| name.ends_with("/type_cases.dll"))?;
        let image = Image::parse(bytes).ok()?;
        let longest = image
            .methods()
            .filter_map(|m| Some((m.rid(), m.decoded_body().ok()?.code.len())))
            .max_by_key(|&(_, len)| len)
            .map(|(rid, _)| rid);
        Some((image, ModuleStore::with_runtime_dirs(Vec::new()), longest))
    }) else {
        panic!("the embedded type_cases.dll does not read");
    };
    let (choice, rest) = data.split_at(data.len().min(2));
    let Ok(body) = Body::parse(rest) else { return };
    let methods = image.method_count().max(1);
    let rid = 1 + u32::from(u16::from_le_bytes([
        choice.first().copied().unwrap_or(0),
        choice.get(1).copied().unwrap_or(0),
    ])) % methods;
    let answer = |checker: &mut TypeChecker, ts: &mut TypeSystem<'_>| {
        let out = checker.check(ts, rid, &body);
        (out.diagnostics.to_vec(), out.dropped, out.partial)
    };
    let mut ts = TypeSystem::new(store, image, None);
    let fresh = answer(&mut TypeChecker::new(), &mut ts);
    // Another body first: the host's longest, checked as its own method.
    let mut reused = TypeChecker::new();
    let other = longest.and_then(|rid| Some((rid, image.method(rid).ok()?.decoded_body().ok()?)));
    if let Some((rid, other_body)) = other {
        reused.check(&mut ts, rid, &other_body);
    }
    let mut again = TypeSystem::new(store, image, None);
    assert_eq!(
        answer(&mut reused, &mut again),
        fresh,
        "a checker's answer depends on the body it checked before"
    );
    // The type system that resolved both bodies' rows already answers as a new one did.
    assert_eq!(
        answer(&mut reused, &mut ts),
        fresh,
        "the answer depends on what the type system resolved before"
    );
}

/// Arbitrary bytes as the choice stream of a generated body: it verifies, round-trips, survives
/// every transform of the rewriter with the same behaviour under the interpreter, and every
/// one-rule mutation of it is caught with its expected code.
#[cfg(feature = "gen")]
pub fn rewrite_generated(data: &[u8]) {
    let config = crate::generate::Config::everything();
    let g = crate::generate::generate_from_bytes(data, &config);
    if let Err(e) = crate::generate::check::all(&g, data.len() as u32) {
        panic!("{e}");
    }
}

/// Arbitrary bytes as a generated body (first half) and a sequence of edits on it (second half):
/// blocks of `nop`s inserted anywhere with every choice of branch targets and region sides, and
/// branch forms flipped. Under every branch-form option, layout succeeds and every branch,
/// switch case and region boundary lands exactly on its label: no short displacement is ever
/// wrapped, however widenings cascade.
#[cfg(feature = "gen")]
pub fn relax(data: &[u8]) {
    use crate::ir::edit::{Regions, Targets};
    use crate::ir::{BranchForms, Instr, LayoutOptions, MaxStackPolicy, layout};
    use crate::opcode::Opcode;
    let (seed, edits) = data.split_at(data.len() / 2);
    let g = crate::generate::generate_from_bytes(seed, &crate::generate::Config::default());
    let mut m = g.method.clone();
    let mut u = arbitrary::Unstructured::new(edits);
    for _ in 0..u.int_in_range(0..=16u8).unwrap_or(0) {
        let n = m.instrs.len();
        let (Ok(i), Ok(k), Ok(what), Ok(a), Ok(b)) = (
            u.choose_index(n.max(1)),
            u.int_in_range(1..=200usize),
            u.int_in_range(0..=2u8),
            u.arbitrary::<bool>(),
            u.arbitrary::<bool>(),
        ) else {
            break;
        };
        if n == 0 {
            break;
        }
        let nops = vec![Instr::op(Opcode::Nop); k];
        let regions = if a { Regions::Inside } else { Regions::Outside };
        let mut ed = m.edit();
        let queued = match what {
            0 => {
                let targets = if b {
                    Targets::ToNew
                } else {
                    Targets::StayOnOld
                };
                ed.insert_before(i, &nops, targets, regions).is_ok()
            }
            1 => ed.insert_after(i, &nops, regions).is_ok(),
            _ => false,
        };
        // An edit the editor refuses (ambiguous labels) leaves the method as it was.
        if queued {
            let _ = ed.commit();
        } else {
            drop(ed);
        }
        if what == 2 && m.instrs[i].is_branch() {
            let op = m.instrs[i].opcode;
            m.instrs[i].opcode = if op.long_form() == op {
                op.short_form()
            } else {
                op.long_form()
            };
        }
    }
    for forms in [
        BranchForms::KeepOriginal,
        BranchForms::AllLong,
        BranchForms::ShortestWhereFits,
    ] {
        let opts = LayoutOptions {
            branch_forms: forms,
            max_stack: MaxStackPolicy::Declared,
            verify: false,
        };
        let mut out = Vec::new();
        layout(&m, &opts, &NoResolver, &mut out).unwrap_or_else(|e| {
            panic!("{forms:?}: an edited generated body does not lay out: {e}")
        });
        if let Err(e) = crate::ir::check::placement(&m, &out) {
            panic!("{forms:?}: {e}");
        }
    }
}

/// A deterministic pseudo-random byte stream (xorshift64): seeds for the generator targets,
/// shared by the fuzz seed writer and the replay tests.
pub fn seed_bytes(mut state: u64, len: usize) -> Vec<u8> {
    state |= 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}
