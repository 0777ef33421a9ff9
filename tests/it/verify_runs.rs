//! Verification runs over many inputs: the report is the same for any number of threads (the
//! assemblies are verified side by side, the largest first, and their reports added in input
//! order), with findings listed up to `--max` across assemblies, image errors, skipped files
//! and a baseline; and the baseline itself reads the same on any number of threads.

use crate::support;

use ilcheck::corpus::{self, Baseline, Input, TypePass, VerifyOptions, VerifyReport};
use ilcheck::verify::Level;
use ilcheck::verify::types::ModuleStore;
use std::collections::BTreeSet;
use std::path::PathBuf;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The project's assemblies (several with findings of both classes) and the hostile images
/// (integrity findings, inputs that cannot be read), as a directory scan finds them.
fn inputs() -> Vec<Input> {
    let found = corpus::discover_all(&[
        repo().join("corpus/bin"),
        repo().join("corpus/regressions/images"),
    ]);
    assert!(found.problems.is_empty(), "{:?}", found.problems);
    assert!(found.inputs.len() >= 15, "{} inputs", found.inputs.len());
    found.inputs
}

fn run(
    inputs: &[Input],
    opts: VerifyOptions,
    store: &ModuleStore,
    baseline: Option<&Baseline>,
) -> (VerifyReport, Vec<String>) {
    let mut report = VerifyReport::default();
    let mut progress = Vec::new();
    corpus::verify_with(inputs, opts, store, baseline, &mut report, |i| {
        progress.push(i.name())
    });
    (report, progress)
}

#[test]
fn a_run_reports_the_same_on_any_number_of_threads() {
    let inputs = inputs();
    let names: Vec<String> = inputs.iter().map(Input::name).collect();
    let store = ModuleStore::with_runtime_dirs(Vec::new());
    for level in [Level::Invalid, Level::Unverifiable] {
        let all = |max_findings, threads| VerifyOptions {
            max_findings,
            types: true,
            level,
            threads,
            ..Default::default()
        };
        // A limit that falls inside the second assembly with findings: the runs below must
        // agree on where the cut falls across assemblies.
        let (full, _) = run(&inputs, all(1_000_000, 1), &store, None);
        let first = &full.findings[0].assembly;
        let cut = full
            .findings
            .iter()
            .take_while(|f| &f.assembly == first)
            .count()
            + 2;
        assert!(
            full.findings.len() > cut,
            "{} findings",
            full.findings.len()
        );
        for max_findings in [0, 3, cut, 1_000_000] {
            let opts = |threads| all(max_findings, threads);
            let (one, progress) = run(&inputs, opts(1), &store, None);
            assert_eq!(one.threads, 1);
            assert_eq!(progress, names, "progress is reported in input order");
            assert!(one.findings.len() <= max_findings);
            assert!(!one.image_errors.is_empty() && !one.skipped.is_empty());
            if max_findings == cut {
                let listed: BTreeSet<&str> =
                    one.findings.iter().map(|f| f.assembly.as_str()).collect();
                assert_eq!(listed.len(), 2, "{listed:?}");
                assert!(one.findings_total > cut as u64);
            }
            let expected = support::comparable(&one);
            for threads in [2, 3, 7] {
                let (many, progress) = run(&inputs, opts(threads), &store, None);
                assert_eq!(many.threads, threads as u64);
                assert_eq!(progress, names, "progress is reported in input order");
                assert_eq!(
                    support::comparable(&many),
                    expected,
                    "{threads} threads, level {level:?}, max {max_findings}"
                );
            }
        }
    }
}

#[test]
fn a_baseline_reads_and_compares_the_same_on_any_number_of_threads() {
    // The project's assemblies compared with themselves: every finding is in the baseline
    // (suppressed), every method aligned as identical; and an original named by a pair too.
    let found = corpus::discover_all(&[repo().join("corpus/bin")]);
    let inputs = found.inputs;
    let verify_cases = repo().join("corpus/bin/verify_cases.dll");
    let pairs = vec![(verify_cases.clone(), Input::named(&verify_cases))];
    let store = ModuleStore::with_runtime_dirs(Vec::new());
    let mut reports = Vec::new();
    for threads in [1, 2, 5] {
        let mut pass = TypePass::new(&store);
        let baseline = Baseline::load_with_pairs(&inputs, &pairs, Some(&mut pass), threads)
            .expect("the project's assemblies read as a baseline");
        assert_eq!(baseline.assemblies_read, inputs.len() as u64);
        let opts = VerifyOptions {
            max_findings: 1_000_000,
            types: true,
            level: Level::Unverifiable,
            threads,
            ..Default::default()
        };
        let (report, _) = run(&inputs, opts, &store, Some(&baseline));
        assert!(
            report.baseline_suppressed > 100,
            "{}",
            report.baseline_suppressed
        );
        assert_eq!(report.findings_total, 0, "{:?}", report.findings.first());
        let a = report.alignment.as_ref().expect("an alignment summary");
        assert!(a.methods_compared > 0 && a.methods_compared == a.methods_identical);
        reports.push(support::comparable(&report));
    }
    assert!(reports.windows(2).all(|w| w[0] == w[1]));
}

#[test]
fn a_baseline_that_cannot_be_read_names_the_first_bad_original_in_order() {
    let dir = repo().join("corpus/regressions/images");
    let originals = vec![
        Input::named(repo().join("corpus/bin/control_flow.exe")),
        Input::named(dir.join("text.dll")),
        Input::named(dir.join("elf.dll")),
    ];
    for threads in [1, 3] {
        let Err(err) = Baseline::load_with_pairs(&originals, &[], None, threads) else {
            panic!("{threads} threads: a text file read as an original");
        };
        assert!(err.contains("text.dll"), "{threads} threads: {err}");
    }
}

/// A patched assembly whose methods were renumbered (a method added before them) finds each
/// one's original by its full name: their findings are the original's (suppressed), their
/// bodies identical; the new method, at an old method's token, is matched by token only.
#[test]
fn a_baseline_matches_renumbered_methods_by_name() {
    let test = "a_baseline_matches_renumbered_methods_by_name";
    if !support::mono_tool(test, "mcs") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("ilcheck-renumbered-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let body = "public static int Sum(int n) { int* p = stackalloc int[4]; p[0] = n; return p[0] + 1; }\n\
                public int Twice(int x) { return x * 2; }";
    let build = |name: &str, first: &str| {
        let (src, dll) = (
            dir.join(format!("{name}.cs")),
            dir.join(name).join("lib.dll"),
        );
        std::fs::create_dir_all(dll.parent().unwrap()).unwrap();
        std::fs::write(&src, format!("public unsafe class C {{ {first}\n{body} }}")).unwrap();
        let out = std::process::Command::new("mcs")
            .args(["-nologo", "-unsafe", "-target:library"])
            .arg(format!("-out:{}", dll.display()))
            .arg(&src)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        Input::named(dll)
    };
    let original = build("original", "");
    let patched = build("patched", "public static void First() {}");
    let store = ModuleStore::with_runtime_dirs(Vec::new());
    let opts = VerifyOptions {
        max_findings: 1_000,
        types: true,
        level: Level::Unverifiable,
        threads: 1,
        ..Default::default()
    };
    // The original has findings of its own to suppress.
    let (alone, _) = run(std::slice::from_ref(&original), opts, &store, None);
    assert!(alone.findings_total > 0, "{:?}", alone.findings);
    let mut pass = TypePass::new(&store);
    let baseline =
        Baseline::load_with_pairs(std::slice::from_ref(&original), &[], Some(&mut pass), 1)
            .expect("the original reads as a baseline");
    let (report, _) = run(
        std::slice::from_ref(&patched),
        opts,
        &store,
        Some(&baseline),
    );
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(report.findings_total, 0, "{:?}", report.findings);
    assert_eq!(report.baseline_suppressed, alone.findings_total);
    assert_eq!(report.baseline_uncertain, 0);
    let a = report.alignment.as_ref().expect("an alignment summary");
    // Sum, Twice and the constructor by name; First by token only (Sum's old token).
    assert_eq!((a.methods_compared, a.methods_identical), (4, 3), "{a:?}");
    assert_eq!(a.not_aligned.get("UncertainMatch"), Some(&1), "{a:?}");
}

/// An original that was read when the baseline was loaded but cannot be read again when its
/// patched assembly is compared (deleted in between) makes that assembly one with no original,
/// said with the reason, never a comparison against nothing.
#[test]
fn an_original_gone_before_its_comparison_is_said_to_be_missing() {
    let dir = std::env::temp_dir().join(format!("ilcheck-gone-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("original")).unwrap();
    let original = dir.join("original/control_flow.exe");
    std::fs::copy(repo().join("corpus/bin/control_flow.exe"), &original).unwrap();
    let baseline = Baseline::load(&[Input::named(&original)]).expect("the original reads");
    std::fs::remove_file(&original).unwrap();
    let store = ModuleStore::with_runtime_dirs(Vec::new());
    let opts = VerifyOptions {
        max_findings: 100,
        threads: 1,
        ..Default::default()
    };
    let patched = Input::named(repo().join("corpus/bin/control_flow.exe"));
    let (report, _) = run(
        std::slice::from_ref(&patched),
        opts,
        &store,
        Some(&baseline),
    );
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(
        report.baseline_missing.len(),
        1,
        "{:?}",
        report.baseline_missing
    );
    let why = report.per_assembly[0].no_original.as_deref().unwrap_or("");
    assert!(why.contains("cannot be read again"), "{why}");
}
