//! The runtime oracle: every transform applied to every method of the project's C# programs;
//! each rewritten program runs under mono and under CoreCLR with output identical to the
//! original's, and `pedump --verify error,code` reports nothing it did not report for the
//! original.

use crate::support;

use ilcheck::corpus::{self, RewriteOptions, RewriteReport};
use ilcheck::harness::{Runtime, RuntimeKind};
use ilcheck::image::Image;
use ilcheck::ir::{LayoutOptions, Transform, TransformOptions};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// pedump's findings per method, IL offsets masked (a rewrite moves them), as a multiset.
fn pedump_findings(path: &Path) -> BTreeMap<String, usize> {
    let out = support::run(
        Command::new("pedump")
            .args(["--verify", "error,code"])
            .arg(path),
    );
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let mut method = String::new();
    let mut found = BTreeMap::new();
    for line in text.lines() {
        if let Some(m) = line.strip_prefix("In method: ") {
            method = m.to_string();
            continue;
        }
        let masked = mask_offsets(line);
        *found.entry(format!("{method}: {masked}")).or_default() += 1;
    }
    found
}

/// Drops IL offsets (`at 0x002c`, and pedump's `at 2c04x` form) from a pedump line.
fn mask_offsets(line: &str) -> String {
    let words: Vec<&str> = line.split(' ').collect();
    let mut out = Vec::with_capacity(words.len());
    let mut skip = false;
    for (i, w) in words.iter().enumerate() {
        if skip {
            skip = false;
            continue;
        }
        let next_is_offset = words
            .get(i + 1)
            .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_hexdigit() || c == 'x'));
        if *w == "at" && next_is_offset {
            skip = true;
            continue;
        }
        out.push(*w);
    }
    out.join(" ").trim_end().to_string()
}

/// Every method, the given transform, `System.Exception` as wrap-catch's type when referenced.
fn options(image: &Image<'_>, transform: Transform, max_listed: usize) -> RewriteOptions {
    RewriteOptions {
        transform,
        transform_opts: TransformOptions {
            catch_type: ilcheck::ir::transforms::find_exception_type(image).unwrap_or(0),
            ..TransformOptions::default()
        },
        layout: LayoutOptions::default(),
        methods: None,
        max_listed,
        threads: 0,
        keep_ready_to_run: false,
        keep_old_bodies: false,
        probes: Default::default(),
    }
}

/// Runs `exe` under `runtime` (60 s at most): whether it succeeded, its output, and how it
/// ended with its error output when it did not.
fn run_on(runtime: &Runtime, exe: &Path) -> (bool, String, String) {
    let o = runtime
        .run(exe, &[], Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("{}: {e}", runtime.describe()));
    let why = format!("{}: {}", o.describe(), String::from_utf8_lossy(&o.stderr));
    (
        o.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        why,
    )
}

#[test]
fn every_transform_keeps_every_program_running_identically() {
    let runtimes = support::runtimes("every_transform_keeps_every_program_running_identically");
    if runtimes.is_empty()
        || !support::mono_tool(
            "every_transform_keeps_every_program_running_identically",
            "pedump",
        )
    {
        return;
    }
    let dir = std::env::temp_dir().join(format!("ilcheck-oracle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let programs: Vec<PathBuf> = corpus::discover(&[root().join("corpus/bin")])
        .unwrap()
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "exe"))
        .collect();
    assert!(programs.len() >= 6, "{programs:?}");
    let mut runs = 0;
    let mut rewritten = 0;
    for program in &programs {
        let stem = program
            .file_name()
            .unwrap()
            .to_string_lossy()
            .replace(".debug", "")
            .replace(".exe", "");
        let expected =
            std::fs::read_to_string(root().join(format!("corpus/cs/{stem}.expected"))).unwrap();
        // Each runtime's own output of the original is the reference for its runs (they format
        // floating-point numbers differently); mono's is the committed expected output.
        let originals: Vec<String> = runtimes
            .iter()
            .map(|runtime| {
                let (ok, out, why) = run_on(runtime, program);
                assert!(
                    ok,
                    "{} under {}: the original fails ({why})",
                    program.display(),
                    runtime.describe()
                );
                if runtime.kind() == RuntimeKind::Mono {
                    assert_eq!(
                        out,
                        expected,
                        "{}: the original does not reproduce its expected output",
                        program.display()
                    );
                }
                out
            })
            .collect();
        let original_pedump = pedump_findings(program);
        let image_bytes = std::fs::read(program).unwrap();
        let image = Image::parse(&image_bytes).unwrap();
        for transform in Transform::ALL {
            let name = transform.name();
            let opts = options(&image, transform, 20);
            let mut report = RewriteReport::default();
            let bytes = corpus::rewrite_image(&image, &opts, &mut report).unwrap();
            let what = format!("{} with {name}", program.display());
            assert!(
                report.ok(),
                "{what}: rejected {:?}: {:#?}",
                report.rejected,
                report.listed
            );
            assert_eq!(report.invalid_before, 0, "{what}");
            let out_path = dir.join(format!(
                "{name}-{}",
                program.file_name().unwrap().to_string_lossy()
            ));
            std::fs::write(&out_path, &bytes).unwrap();
            for (runtime, original) in runtimes.iter().zip(&originals) {
                let (ok, out, why) = run_on(runtime, &out_path);
                let on = runtime.kind().name();
                assert!(ok, "{what} under {on}: {why}");
                assert_eq!(&out, original, "{what} under {on}: output differs");
                runs += 1;
            }
            let after = pedump_findings(&out_path);
            let new: Vec<_> = after
                .iter()
                .filter(|(k, n)| original_pedump.get(*k).is_none_or(|m| m < n))
                .collect();
            assert!(
                new.is_empty(),
                "{what}: pedump reports new findings: {new:#?}"
            );
            rewritten += report.rewritten;
        }
    }
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(runs, programs.len() * Transform::ALL.len() * runtimes.len());
    assert!(rewritten > 500, "{rewritten}");
    eprintln!(
        "{runs} runs of rewritten programs ({} runtimes) were identical; {rewritten} method rewrites",
        runtimes.len()
    );
}

#[test]
fn mono_corpus_every_transform_verifies() {
    let Some(dir) = support::mono_corpus("mono_corpus_every_transform_verifies") else {
        return;
    };
    let files: Vec<PathBuf> = corpus::discover(&[dir])
        .unwrap()
        .into_iter()
        .filter(|p| {
            p.parent().is_some_and(|d| d.ends_with("4.5"))
                && p.extension().is_some_and(|e| e == "dll")
        })
        .collect();
    assert!(files.len() >= 130);
    for transform in Transform::ALL {
        let name = transform.name();
        let mut totals = RewriteReport::default();
        for file in &files {
            let image = Image::open(file).unwrap();
            let opts = options(&image, transform, 5);
            let mut report = RewriteReport::default();
            let bytes = corpus::rewrite_image(&image, &opts, &mut report).unwrap();
            assert!(
                report.ok(),
                "{name} on {}: rejected {:?}: {:#?}",
                file.display(),
                report.rejected,
                report.listed
            );
            // The patched image reads back, and every body in it decodes.
            let patched = Image::parse(&bytes).unwrap();
            for m in patched.methods().filter(|m| m.rva() != 0) {
                m.decoded_body()
                    .unwrap_or_else(|e| panic!("{name} on {}: {e}", file.display()));
            }
            totals.selected += report.selected;
            totals.rewritten += report.rewritten;
            totals.invalid_before += report.invalid_before;
            for (k, v) in report.skipped {
                *totals.skipped.entry(k).or_default() += v;
            }
        }
        assert_eq!(totals.invalid_before, 0, "{name}");
        // Metadata emit gives every method what it needs: a local for the return value, the
        // exception type to catch.
        for want in ["NeedsNewLocal", "NoCatchType"] {
            assert!(
                !totals.skipped.contains_key(want),
                "{name}: {:?}",
                totals.skipped
            );
        }
        eprintln!(
            "{name}: {} selected, {} rewritten, skipped {:?}",
            totals.selected, totals.rewritten, totals.skipped
        );
    }
}
