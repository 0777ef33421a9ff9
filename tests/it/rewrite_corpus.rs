//! The rewriter over real compiler output: the project corpus (always) and mono's 4.5 corpus
//! (when present). `identity` with `KeepOriginal` must reproduce every canonical body byte for
//! byte; every transform's output must re-decode and verify clean when its input did.
//! Run with `--release -- --nocapture` for the counts.

use crate::support;

use ilcheck::body::Body;
use ilcheck::image::{Image, Token};
use ilcheck::ir::{
    BranchForms, EntryExit, Instr, LayoutOptions, MaxStackPolicy, Method, Outcome, RewriteError,
    Rewriter, Transform, TransformOptions,
};
use ilcheck::opcode::Opcode;
use ilcheck::verify::{ImageResolver, Resolver, Verifier};
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(Default, Debug)]
struct Counts {
    bodies: u64,
    input_invalid: u64,
    lift_errors: BTreeMap<String, u64>,
    canonical: u64,
    identical: u64,
    different: Vec<String>,
    refused_invalid: Vec<String>,
    /// transform → outcome/reason → count
    outcomes: BTreeMap<&'static str, BTreeMap<String, u64>>,
    failures: Vec<String>,
    /// Entry/exit rewrites the byte-level path answered (each compared with the IR path's),
    /// and those it left to the IR path.
    spliced: u64,
    declined: u64,
}

fn run_image(name: &str, image: &Image<'_>, counts: &mut Counts, transforms: bool) {
    let mut resolver = ImageResolver::new(image);
    let mut verifier = Verifier::new();
    let mut rewriter = Rewriter::new();
    let mut out = Vec::new();
    let mut expected = Vec::new();
    // A type the image has, for wrap-catch: its first TypeRef, else its second TypeDef.
    let catch_type = if image.token_exists(Token(0x0100_0001)) {
        0x0100_0001
    } else {
        0x0200_0002
    };
    for method in image.methods() {
        let Ok(body) = method.decoded_body() else {
            continue;
        };
        counts.bodies += 1;
        resolver.set_method(&method, &body);
        let clean = verifier
            .verify(&body, &resolver, &ilcheck::verify::Options::ALL)
            .is_empty();
        counts.input_invalid += !clean as u64;
        let label = || {
            format!(
                "{name} {:#010x} {}",
                method.token().0,
                method.full_name().unwrap_or_default()
            )
        };
        if let Err(e) = Method::from_body(&body) {
            let key = format!("{e:?}");
            let key = key.split([' ', '{', '(']).next().unwrap_or("").to_string();
            *counts.lift_errors.entry(key).or_default() += 1;
            continue;
        }
        // An invalid input keeps its declared MaxStack: its needed depth may not exist.
        let opts = if clean {
            LayoutOptions::default()
        } else {
            LayoutOptions {
                verify: false,
                max_stack: MaxStackPolicy::Declared,
                branch_forms: BranchForms::KeepOriginal,
            }
        };
        if body.is_canonical() {
            counts.canonical += 1;
            out.clear();
            expected.clear();
            body.encode(&mut expected).unwrap();
            match rewriter.rewrite(
                &body,
                Transform::Identity,
                &TransformOptions::default(),
                &opts,
                &resolver,
                &mut out,
            ) {
                Ok(_) if out == expected => counts.identical += 1,
                Ok(_) => counts.different.push(label()),
                // Layout refuses some invalid inputs (an empty region); never a valid one.
                Err(e) if !clean => counts.refused_invalid.push(format!("{}: {e}", label())),
                Err(e) => counts.different.push(format!("{}: {e}", label())),
            }
        }
        if !transforms || !clean {
            continue;
        }
        let topts = TransformOptions {
            returns_void: resolver.method().map(|s| s.returns_void),
            catch_type,
            ..TransformOptions::default()
        };
        splice_agrees(&body, &topts, &resolver, &mut rewriter, counts, &label);
        for transform in Transform::ALL {
            let tname = transform.name();
            out.clear();
            // The IR path: the splice is compared with it in `splice_agrees`.
            let key = match rewriter.rewrite_ir(
                &body,
                transform,
                &topts,
                &LayoutOptions::default(),
                &resolver,
                &mut out,
            ) {
                Ok((outcome, _)) => {
                    // The output re-decodes and verifies clean.
                    match Body::decode(&out) {
                        Ok(b) if b.len() == out.len() => {
                            if let Some(d) = verifier
                                .verify(&b, &resolver, &ilcheck::verify::Options::ALL)
                                .first()
                            {
                                counts
                                    .failures
                                    .push(format!("{tname} {}: re-verify {d}", label()));
                            }
                        }
                        Ok(_) => counts
                            .failures
                            .push(format!("{tname} {}: size mismatch", label())),
                        Err(e) => counts
                            .failures
                            .push(format!("{tname} {}: re-decode {e}", label())),
                    }
                    match outcome {
                        Outcome::Changed => "changed".to_string(),
                        Outcome::Unchanged => "unchanged".to_string(),
                    }
                }
                Err(RewriteError::Skipped(r)) => format!("skip:{}", r.name()),
                Err(e) => {
                    if counts.failures.len() < 200 {
                        counts.failures.push(format!("{tname} {}: {e}", label()));
                    }
                    "error".to_string()
                }
            };
            *counts
                .outcomes
                .entry(tname)
                .or_default()
                .entry(key)
                .or_default() += 1;
        }
    }
}

/// The entry/exit transforms through the byte-level path give the IR path's result, under every
/// branch-form option, with the default snippets and with an epilogue long enough that every
/// redirected `ret` is widened.
fn splice_agrees(
    body: &Body<'_>,
    topts: &TransformOptions,
    resolver: &ImageResolver<'_>,
    rewriter: &mut Rewriter,
    counts: &mut Counts,
    label: &dyn Fn() -> String,
) {
    let long = TransformOptions {
        epilogue: vec![Instr::op(Opcode::Nop); 130],
        ..topts.clone()
    };
    for which in [
        EntryExit::Prologue,
        EntryExit::Epilogue,
        EntryExit::PrologueEpilogue,
    ] {
        for opts in [topts, &long] {
            for branch_forms in [
                BranchForms::KeepOriginal,
                BranchForms::AllLong,
                BranchForms::ShortestWhereFits,
            ] {
                let (mut fast, mut slow) = (Vec::new(), Vec::new());
                let layout = LayoutOptions {
                    branch_forms,
                    ..LayoutOptions::default()
                };
                let Ok(got) =
                    rewriter.splice(body, which.transform(), opts, &layout, resolver, &mut fast)
                else {
                    counts.declined += 1;
                    continue;
                };
                counts.spliced += 1;
                let want = rewriter.rewrite_ir(
                    body,
                    which.transform(),
                    opts,
                    &layout,
                    resolver,
                    &mut slow,
                );
                if want != Ok(got) || fast != slow {
                    counts.failures.push(format!(
                        "{which:?} {branch_forms:?} {}: spliced {got:?}, IR {want:?}",
                        label()
                    ));
                }
            }
        }
    }
}

fn report(title: &str, c: &Counts) {
    eprintln!(
        "{title}: {} bodies ({} invalid as input), lift errors {:?}; identity: {}/{} canonical \
         bodies byte-identical, {} invalid ones refused by layout",
        c.bodies,
        c.input_invalid,
        c.lift_errors,
        c.identical,
        c.canonical,
        c.refused_invalid.len()
    );
    for d in c.refused_invalid.iter().take(5) {
        eprintln!("  REFUSED {d}");
    }
    eprintln!(
        "  entry/exit: {} spliced and equal to the IR path, {} left to it",
        c.spliced, c.declined
    );
    for (t, o) in &c.outcomes {
        eprintln!("  {t:18} {o:?}");
    }
    for d in c.different.iter().take(10) {
        eprintln!("  DIFFERENT {d}");
    }
    for f in c.failures.iter().take(20) {
        eprintln!("  FAILURE {f}");
    }
}

/// No identity result differs from a canonical original, and no transform failed.
fn assert_clean(c: &Counts) {
    assert!(
        c.different.is_empty(),
        "{:?}",
        &c.different[..c.different.len().min(10)]
    );
    assert!(
        c.failures.is_empty(),
        "{:?}",
        &c.failures[..c.failures.len().min(10)]
    );
}

#[test]
fn project_corpus_identity_and_transforms() {
    let mut counts = Counts::default();
    for (name, bytes) in ilcheck::corpus::EMBEDDED {
        let image = Image::parse(bytes).expect(name);
        run_image(name, &image, &mut counts, true);
    }
    report("project corpus", &counts);
    assert!(counts.canonical > 0);
    assert!(counts.spliced > 0);
    assert_clean(&counts);
}

#[test]
fn mono_corpus_identity_and_transforms() {
    let Some(dir) = support::mono_corpus("mono_corpus_identity_and_transforms") else {
        return;
    };
    let files = ilcheck::corpus::discover(&[dir]).unwrap();
    let files: Vec<PathBuf> = files
        .into_iter()
        .filter(|p| p.parent().is_some_and(|d| d.ends_with("4.5")))
        .collect();
    // Debug builds run the identity check only; release builds run every transform too.
    let transforms = !cfg!(debug_assertions);
    let mut counts = Counts::default();
    for path in &files {
        let Ok(image) = Image::open(path) else {
            continue;
        };
        run_image(&path.display().to_string(), &image, &mut counts, transforms);
    }
    report("mono 4.5", &counts);
    assert_clean(&counts);
    // Agreement on bodies it declined would prove nothing.
    if transforms {
        assert!(
            counts.spliced >= counts.declined * 50,
            "spliced {}, declined {}",
            counts.spliced,
            counts.declined
        );
    }
}

/// `rewrite_image` splits the methods among threads; the patched image and the report (but for
/// timings and the thread count) must not depend on how many.
#[test]
fn threads_do_not_change_the_output() {
    let Some(dir) = support::mono_corpus("threads_do_not_change_the_output") else {
        return;
    };
    let image = Image::open(dir.join("mscorlib.dll")).unwrap();
    // wrap-finally also gives many methods a new local (planned before the threads start, in
    // rid order): the same tokens and counts whatever the threads.
    for name in ["prologue-epilogue", "wrap-finally"] {
        let run = |threads: usize| {
            let mut opts = ilcheck::corpus::RewriteOptions::new(name).unwrap();
            opts.threads = threads;
            opts.max_listed = 40;
            let mut report = ilcheck::corpus::RewriteReport::default();
            let bytes = ilcheck::corpus::rewrite_image(&image, &opts, &mut report).unwrap();
            assert_eq!(
                report.threads, threads,
                "{name}: mscorlib has work for {threads}"
            );
            (report.rewrite_seconds, report.write_seconds, report.threads) = (0.0, 0.0, 0);
            (bytes, serde_json::to_string(&report).unwrap())
        };
        let (one, one_report) = run(1);
        let (three, three_report) = run(3);
        assert_eq!(one_report, three_report, "{name}");
        assert!(one == three, "{name}: the patched images differ");
        assert!(one_report.contains("\"rewritten\""), "{one_report}");
        if name == "wrap-finally" {
            let v: serde_json::Value = serde_json::from_str(&one_report).unwrap();
            assert!(v["locals_added"].as_u64().unwrap() > 1000, "{one_report}");
        }
    }
}

/// Engines kept from one assembly to the next (`rewrite_image_with`) carry nothing over: every
/// assembly's output and report equal those of a fresh run, in either order, on 1 and 2 threads.
#[test]
fn reused_scratch_does_not_change_the_output() {
    let Some(dir) = support::mono_corpus("reused_scratch_does_not_change_the_output") else {
        return;
    };
    // A large image with long bodies and clauses, then small ones, then the large one again.
    let names = [
        "mscorlib.dll",
        "System.Xml.Linq.dll",
        "Mono.Posix.dll",
        "mscorlib.dll",
    ];
    let images: Vec<_> = names
        .iter()
        .map(|n| (n, std::fs::read(dir.join(n)).unwrap()))
        .collect();
    for threads in [1, 2] {
        let mut opts = ilcheck::corpus::RewriteOptions::new("prologue-epilogue").unwrap();
        opts.threads = threads;
        opts.max_listed = 40;
        let normalized = |mut report: ilcheck::corpus::RewriteReport| {
            (report.rewrite_seconds, report.write_seconds) = (0.0, 0.0);
            serde_json::to_string(&report).unwrap()
        };
        let mut scratch = ilcheck::corpus::RewriteScratch::default();
        let mut out = Vec::new();
        for (name, bytes) in &images {
            let image = Image::parse(bytes).unwrap();
            let mut fresh_report = ilcheck::corpus::RewriteReport::default();
            let fresh = ilcheck::corpus::rewrite_image(&image, &opts, &mut fresh_report).unwrap();
            let mut report = ilcheck::corpus::RewriteReport::default();
            ilcheck::corpus::rewrite_image_with(&image, &opts, &mut report, &mut out, &mut scratch)
                .unwrap();
            assert!(report.rewritten > 0, "{name}: nothing rewritten");
            assert_eq!(normalized(report), normalized(fresh_report), "{name}");
            assert!(
                out == fresh,
                "{name} on {threads} thread(s): the patched images differ"
            );
        }
    }
}
