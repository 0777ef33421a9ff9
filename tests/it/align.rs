//! Baseline alignment (`verify --baseline`): correct rewrites of the project's programs, and of
//! mono's 4.5 corpus when present, give no alignment finding; a short branch whose displacement
//! wrapped onto another valid instruction, and a clause boundary moved by one instruction, which
//! the structural verifier accepts, are reported with their code, method and offset.
//! Run with `--release -- --nocapture` for the counts.

use crate::support;

use ilcheck::body::{Body, Clause};
use ilcheck::image::Image;
use ilcheck::opcode::OperandKind;
use ilcheck::verify::{Aligner, Code, ImageResolver, Verifier};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_ilcheck");

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ilcheck-align-{test}-{}", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs ilcheck under a deadline: exit code, standard output and standard error.
fn run(args: &[&str]) -> (i32, String, String) {
    let o = support::run(Command::new(BIN).args(args).current_dir(root()));
    (
        o.code.unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// [`run`], the two streams together.
fn ilcheck(args: &[&str]) -> (i32, String) {
    let (code, out, err) = run(args);
    (code, out + &err)
}

/// `verify PATCHED --baseline ORIGINAL --json`: exit code and report.
fn verify_against(patched: &Path, original: &Path, extra: &[&str]) -> (i32, Value) {
    let (p, o) = (patched.to_str().unwrap(), original.to_str().unwrap());
    let mut args = vec!["verify", p, "--baseline", o, "--json"];
    args.extend_from_slice(extra);
    let (code, out, err) = run(&args);
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
    (code, v)
}

#[test]
fn correct_rewrites_have_no_alignment_findings() {
    let dir = scratch("correct");
    let transforms = [
        "identity",
        "nop-pad",
        "widen",
        "shorten",
        "prologue",
        "epilogue",
        "prologue-epilogue",
        "wrap-finally",
        "wrap-catch",
    ];
    for name in [
        "control_flow.exe",
        "control_flow.debug.exe",
        "features.exe",
        "features.debug.exe",
    ] {
        let original = root().join("corpus/bin").join(name);
        for transform in transforms {
            for branches in ["keep", "long", "short"] {
                let out = dir.join(format!("{transform}-{branches}"));
                std::fs::create_dir_all(&out).unwrap();
                let patched = out.join(name);
                let (code, text) = ilcheck(&[
                    "rewrite",
                    original.to_str().unwrap(),
                    "-o",
                    patched.to_str().unwrap(),
                    "-t",
                    transform,
                    "--branches",
                    branches,
                ]);
                assert_eq!(code, 0, "{name} {transform} {branches}: {text}");
                let (code, v) = verify_against(&patched, &original, &[]);
                let what = format!("{name} {transform} --branches {branches}");
                assert_eq!(code, 0, "{what}: {v:#}");
                assert_eq!(v["findings_total"], 0, "{what}: {v:#}");
                let a = &v["alignment"];
                assert_eq!(a["methods_not_aligned"], 0, "{what}: {a:#}");
                let compared = a["methods_compared"].as_u64().unwrap();
                assert!(compared > 10, "{what}: {a:#}");
                let counted: u64 = [
                    "methods_identical",
                    "methods_without_targets",
                    "methods_aligned",
                    "methods_in_part",
                    "methods_not_aligned",
                ]
                .iter()
                .map(|k| a[k].as_u64().unwrap())
                .sum();
                assert_eq!(counted, compared, "{what}: {a:#}");
                if transform != "identity" {
                    assert!(a["targets_checked"].as_u64().unwrap() > 10, "{what}: {a:#}");
                }
            }
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// A body with its code (or clauses) changed in place, and the structural verifier's findings
/// on it.
fn structural_findings(image: &Image<'_>, rid: u32, bytes: &[u8]) -> usize {
    let method = image.method(rid).unwrap();
    let body = Body::parse(bytes).unwrap();
    let mut resolver = ImageResolver::new(image);
    resolver.set_method(&method, &body);
    Verifier::new()
        .verify(&body, &resolver, &ilcheck::verify::Options::ALL)
        .len()
}

/// Writes `bytes` with `patch` applied at `at` to `dir/name` (the original's file name, as the
/// baseline matches assemblies by it).
fn write_patched(dir: &Path, name: &str, bytes: &[u8], at: usize, patch: &[u8]) -> PathBuf {
    let mut out = bytes.to_vec();
    out[at..at + patch.len()].copy_from_slice(patch);
    let path = dir.join(name);
    std::fs::write(&path, out).unwrap();
    path
}

/// The one finding of a run, as (code, token, offset).
fn only_finding(v: &Value) -> (String, String, u64) {
    let findings = v["findings"].as_array().unwrap();
    assert_eq!(findings.len(), 1, "{v:#}");
    let f = &findings[0];
    (
        f["code"].as_str().unwrap().to_string(),
        f["token"].as_str().unwrap().to_string(),
        f["offset"].as_u64().unwrap(),
    )
}

#[test]
fn a_wrapped_short_branch_is_reported() {
    let dir = scratch("wrapped");
    let name = "control_flow.exe";
    let original = root().join("corpus/bin").join(name);
    let bytes = std::fs::read(&original).unwrap();
    let image = Image::parse(&bytes).unwrap();
    let mut aligner = Aligner::new();
    // The first forward short branch that, given a backward displacement instead (what a
    // displacement that overflowed 127 wraps to), lands on another instruction the structural
    // verifier accepts there.
    let mut found = None;
    'search: for method in image.methods().filter(|m| m.rva() != 0) {
        let (Ok(body), Ok(raw)) = (method.decoded_body(), method.body()) else {
            continue;
        };
        if structural_findings(&image, method.rid(), raw) != 0 {
            continue;
        }
        for ins in body.instructions().flatten() {
            if ins.opcode.operand_kind() != OperandKind::ShortBrTarget
                || ins.branch_target().is_none_or(|t| t <= ins.offset as i64)
            {
                continue;
            }
            // From -128 up: the wrap of a displacement just past 127.
            for d in -128i8..0 {
                let mut patched = raw.to_vec();
                let at = body.header_len() + ins.offset as usize + 1;
                patched[at] = d as u8;
                let Ok(new) = Body::parse(&patched) else {
                    continue;
                };
                let lands = ins.offset as i64 + 2 + d as i64;
                if lands < 0
                    || !new
                        .instructions()
                        .flatten()
                        .any(|i| i.offset as i64 == lands)
                    || structural_findings(&image, method.rid(), &patched) != 0
                {
                    continue;
                }
                let moved = aligner.compare(&body, &new);
                assert!(
                    moved.iter().all(|f| f.code == Code::BranchRetargeted),
                    "{moved:?}"
                );
                if !moved.is_empty() {
                    let file_at = method.body_offset().unwrap() + at;
                    found = Some((method.token().0, ins.offset, file_at, d));
                    break 'search;
                }
            }
        }
    }
    let (token, offset, file_at, d) = found.expect("a short branch to wrap");
    eprintln!("{name}: the short branch at IL_{offset:04x} of {token:#010x} now goes {d}");
    let patched = write_patched(&dir, name, &bytes, file_at, &[d as u8]);
    // The structural verifier alone accepts it.
    let (code, text) = ilcheck(&["verify", patched.to_str().unwrap()]);
    assert_eq!(code, 0, "{text}");
    let sarif = dir.join("out.sarif");
    let (code, v) = verify_against(&patched, &original, &["--sarif", sarif.to_str().unwrap()]);
    assert_eq!(code, 1, "{v:#}");
    assert_eq!(
        only_finding(&v),
        (
            "BranchRetargeted".to_string(),
            format!("{token:#010x}"),
            offset as u64
        )
    );
    let log: Value = serde_json::from_str(&std::fs::read_to_string(&sarif).unwrap()).unwrap();
    let rules = log["runs"][0]["tool"]["driver"]["rules"]
        .as_array()
        .unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(rules[0]["id"], "BranchRetargeted");
    let text = rules[0]["shortDescription"]["text"].as_str().unwrap();
    assert!(text.contains("--baseline"), "{text}");
    assert_eq!(
        log["runs"][0]["results"][0]["properties"]["ilOffset"],
        offset
    );
    // Against itself, or without a baseline, nothing.
    let (code, v) = verify_against(&original, &original, &[]);
    assert_eq!((code, &v["findings_total"]), (0, &Value::from(0)));
    std::fs::remove_dir_all(&dir).ok();
}

/// The stored bytes of clause `k` of a body's only EH section, with one boundary changed: its
/// position in the body and the new bytes.
fn clause_bytes(body: &Body<'_>, k: usize, c: &Clause) -> Option<(usize, Vec<u8>)> {
    let section = match &body.sections[..] {
        [s] if s.is_eh() => s,
        _ => return None,
    };
    let start = body.header_len() + body.code.len() + section.padding.len() + 4;
    let mut out = Vec::new();
    if section.is_fat() {
        for v in [
            c.flags,
            c.try_offset,
            c.try_length,
            c.handler_offset,
            c.handler_length,
            c.class_or_filter,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        Some((start + 24 * k, out))
    } else {
        out.extend_from_slice(&u16::try_from(c.flags).ok()?.to_le_bytes());
        out.extend_from_slice(&u16::try_from(c.try_offset).ok()?.to_le_bytes());
        out.push(u8::try_from(c.try_length).ok()?);
        out.extend_from_slice(&u16::try_from(c.handler_offset).ok()?.to_le_bytes());
        out.push(u8::try_from(c.handler_length).ok()?);
        out.extend_from_slice(&c.class_or_filter.to_le_bytes());
        Some((start + 12 * k, out))
    }
}

#[test]
fn a_clause_boundary_moved_by_one_instruction_is_reported() {
    let dir = scratch("clause");
    let mut checked = 0;
    for name in ["control_flow.exe", "control_flow.debug.exe", "features.exe"] {
        let original = root().join("corpus/bin").join(name);
        let bytes = std::fs::read(&original).unwrap();
        let image = Image::parse(&bytes).unwrap();
        let mut aligner = Aligner::new();
        // The first boundary of a clause that moves one instruction either way with the
        // structural verifier still silent.
        let mut found = None;
        'search: for method in image.methods().filter(|m| m.rva() != 0) {
            let (Ok(body), Ok(raw)) = (method.decoded_body(), method.body()) else {
                continue;
            };
            let clauses: Vec<Clause> = body.clauses().collect();
            if clauses.is_empty() || structural_findings(&image, method.rid(), raw) != 0 {
                continue;
            }
            let starts: Vec<u32> = body
                .instructions()
                .flatten()
                .map(|i| i.offset)
                .chain([body.code.len() as u32])
                .collect();
            let step = |off: u32, up: bool| {
                let at = starts.iter().position(|&s| s == off)?;
                let to = if up {
                    at.checked_add(1)?
                } else {
                    at.checked_sub(1)?
                };
                starts.get(to).copied()
            };
            for (k, c) in clauses.iter().enumerate() {
                for boundary in 0..4 {
                    for up in [true, false] {
                        let mut m = *c;
                        let (try_end, handler_end) = (c.try_end() as u32, c.handler_end() as u32);
                        let moved_to = match boundary {
                            0 => step(c.try_offset, up).inspect(|&s| {
                                m.try_offset = s;
                                m.try_length = try_end.wrapping_sub(s);
                            }),
                            1 => step(try_end, up)
                                .inspect(|&e| m.try_length = e.wrapping_sub(c.try_offset)),
                            2 => step(c.handler_offset, up).inspect(|&s| {
                                m.handler_offset = s;
                                m.handler_length = handler_end.wrapping_sub(s);
                            }),
                            _ => step(handler_end, up)
                                .inspect(|&e| m.handler_length = e.wrapping_sub(c.handler_offset)),
                        };
                        let Some(moved_to) = moved_to else { continue };
                        let Some((at, stored)) = clause_bytes(&body, k, &m) else {
                            continue;
                        };
                        let mut patched = raw.to_vec();
                        patched[at..at + stored.len()].copy_from_slice(&stored);
                        let Ok(new) = Body::parse(&patched) else {
                            continue;
                        };
                        if structural_findings(&image, method.rid(), &patched) != 0 {
                            continue;
                        }
                        let moved: Vec<(Code, u32)> = aligner
                            .compare(&body, &new)
                            .iter()
                            .map(|d| (d.code, d.offset))
                            .collect();
                        assert_eq!(moved, [(Code::ClauseBoundaryMoved, moved_to)]);
                        let file_at = method.body_offset().unwrap() + at;
                        found = Some((method.token().0, moved_to, file_at, stored));
                        break 'search;
                    }
                }
            }
        }
        let Some((token, offset, file_at, stored)) = found else {
            continue;
        };
        eprintln!("{name}: a boundary of a clause of {token:#010x} moved to IL_{offset:04x}");
        let patched = write_patched(&dir, name, &bytes, file_at, &stored);
        let (code, text) = ilcheck(&["verify", patched.to_str().unwrap()]);
        assert_eq!(code, 0, "{text}");
        let (code, v) = verify_against(&patched, &original, &[]);
        assert_eq!(code, 1, "{v:#}");
        assert_eq!(
            only_finding(&v),
            (
                "ClauseBoundaryMoved".to_string(),
                format!("{token:#010x}"),
                offset as u64
            )
        );
        checked += 1;
    }
    assert!(checked > 0, "no clause boundary could be moved");
    std::fs::remove_dir_all(&dir).ok();
}

/// Every transform over mono's 4.5 corpus (and the entry/exit and wrap transforms with probes
/// by name, when mcs can build the probe assembly), verified against the originals: no finding,
/// alignment or structural.
#[test]
fn mono_corpus_rewrites_have_no_alignment_findings() {
    use ilcheck::corpus::{self, Baseline, Input, Probes, RewriteOptions, RewriteReport};
    use ilcheck::ir::{BranchForms, LayoutOptions};
    let test = "mono_corpus_rewrites_have_no_alignment_findings";
    let Some(mono) = support::mono_corpus(test) else {
        return;
    };
    let found = corpus::discover_all(&[mono]);
    assert!(found.problems.is_empty(), "{:?}", found.problems);
    let originals = found.inputs;
    let baseline = Baseline::load(&originals).unwrap();
    let dir = scratch("mono");
    let mut runs: Vec<(String, RewriteOptions)> = Vec::new();
    for name in [
        "identity",
        "nop-pad",
        "widen",
        "shorten",
        "prologue",
        "epilogue",
        "prologue-epilogue",
        "wrap-finally",
        "wrap-catch",
    ] {
        runs.push((name.into(), RewriteOptions::new(name).unwrap()));
    }
    let mut long = RewriteOptions::new("prologue-epilogue").unwrap();
    long.layout = LayoutOptions {
        branch_forms: BranchForms::AllLong,
        ..LayoutOptions::default()
    };
    runs.push(("prologue-epilogue --branches long".into(), long));
    if support::mono_tool(test, "mcs") {
        use ilcheck::image::emit::probe;
        let built = dir.join("Acme.Probe.dll");
        let o = support::run(
            Command::new("mcs")
                .arg("-target:library")
                .arg(format!("-out:{}", built.display()))
                .arg(root().join("corpus/probe/probe.cs")),
        );
        assert!(o.success(), "mcs: {}", String::from_utf8_lossy(&o.stderr));
        let probe_image = Image::open(&built).unwrap();
        let references = [probe_image];
        let resolve = |text: &str, entry: bool| {
            probe::resolve(&probe::parse(text).unwrap(), &references, entry).unwrap()
        };
        for name in ["prologue-epilogue", "wrap-finally"] {
            let mut opts = RewriteOptions::new(name).unwrap();
            opts.probes = Probes {
                entry: Some(resolve(
                    "void [Acme.Probe]Acme.Probe::Enter(string, int32)",
                    true,
                )),
                exit: Some(resolve("void [Acme.Probe]Acme.Probe::Exit(string)", false)),
            };
            runs.push((format!("{name} with probes"), opts));
        }
    }
    for (what, opts) in &runs {
        let out = dir.join("patched");
        std::fs::remove_dir_all(&out).ok();
        std::fs::create_dir_all(&out).unwrap();
        let mut patched = Vec::new();
        for input in &originals {
            let Input::File { path, .. } = input else {
                continue;
            };
            let image = input.open().unwrap();
            let mut report = RewriteReport::default();
            let bytes = corpus::rewrite_image(&image, opts, &mut report).unwrap();
            let to = out.join(path.file_name().unwrap());
            std::fs::write(&to, bytes).unwrap();
            patched.push(Input::found(to));
        }
        let mut report = corpus::VerifyReport::default();
        corpus::verify(
            &patched,
            corpus::VerifyOptions::default(),
            Some(&baseline),
            &mut report,
            |_| {},
        );
        let a = report.alignment.as_ref().unwrap();
        eprintln!(
            "{what}: {} methods, {} identical, {} without branches or clauses, {} aligned, {} \
             in part {:?}, {} not aligned {:?}; {} targets and {} boundaries checked in {:.2} s; \
             {} findings",
            a.methods_compared,
            a.methods_identical,
            a.methods_without_targets,
            a.methods_aligned,
            a.methods_in_part,
            a.unchecked,
            a.methods_not_aligned,
            a.not_aligned,
            a.targets_checked,
            a.boundaries_checked,
            a.seconds,
            report.findings_total
        );
        assert!(
            report.image_errors.is_empty(),
            "{what}: {:?}",
            report.image_errors
        );
        assert!(report.baseline_missing.is_empty(), "{what}");
        assert_eq!(report.findings_total, 0, "{what}: {:#?}", report.findings);
        assert!(a.methods_compared > 200_000, "{what}: {a:?}");
        // Almost every method aligns, or is identical, or has nothing to compare.
        assert!(a.methods_not_aligned < 100, "{what}: {a:?}");
    }
    std::fs::remove_dir_all(&dir).ok();
}
