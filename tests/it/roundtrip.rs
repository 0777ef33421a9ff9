//! Corpus round trips: the project's own assemblies always, mono's 4.5 corpus when installed.

use crate::support;

use ilcheck::corpus::{self, Input, RoundtripOptions, RoundtripReport};
use std::path::PathBuf;

fn run(inputs: &[Input], canonical: bool) -> RoundtripReport {
    let mut report = RoundtripReport::default();
    let opts = RoundtripOptions {
        canonical,
        max_failures: 50,
        ..Default::default()
    };
    corpus::roundtrip(inputs, opts, &mut report, |_| {});
    report
}

#[test]
fn embedded_list_is_the_corpus_directory() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("corpus/bin");
    let mut on_disk: Vec<String> = corpus::discover(&[dir])
        .unwrap()
        .iter()
        .map(|p| format!("corpus/bin/{}", p.file_name().unwrap().to_string_lossy()))
        .collect();
    let mut embedded: Vec<String> = corpus::EMBEDDED
        .iter()
        .map(|(n, _)| n.to_string())
        .collect();
    on_disk.sort();
    embedded.sort();
    assert_eq!(
        embedded, on_disk,
        "EMBEDDED in src/corpus.rs must list every file of corpus/bin"
    );
}

#[test]
fn project_corpus_round_trips() {
    let inputs: Vec<Input> = corpus::EMBEDDED
        .iter()
        .map(|&(name, bytes)| Input::Embedded { name, bytes })
        .collect();
    let r = run(&inputs, true);
    assert_eq!(r.assemblies as usize, corpus::EMBEDDED.len());
    assert!(
        r.all_identical(),
        "{}",
        ilcheck::report::roundtrip_summary(&r)
    );
    assert_eq!(r.identical, r.bodies);
    // The shapes the corpus was written to contain.
    assert!(r.eh_sections_fat > 0 && r.eh_sections_small > 0);
    assert!(
        r.clauses.filter > 0 && r.clauses.fault > 0 && r.clauses.finally > 0 && r.clauses.catch > 0
    );
    assert!(r.il_bytes > 70_000, "the >64 KiB method is there");
    // verify_cases.dll has bodies whose code is deliberately undecodable: kept raw, round-tripped.
    assert_eq!(
        r.raw_code,
        5,
        "{:#?}",
        r.raw_code_listed
            .iter()
            .map(|f| &f.method)
            .collect::<Vec<_>>()
    );
    // ilasm and mcs write canonical forms (fat-where-tiny and the like are body-level fixtures
    // in tests/it/codec_props.rs); every body was checked.
    let canonical = r.canonical.unwrap();
    assert_eq!(canonical.bodies_checked, r.bodies);
    assert_eq!(canonical.non_canonical, 0, "{:?}", canonical.reasons);
}

#[test]
fn mono_corpus_round_trips_byte_for_byte() {
    let Some(dir) = support::mono_corpus("mono_corpus_round_trips_byte_for_byte") else {
        return;
    };
    let files = support::files_with_extension(&dir, "dll");
    let inputs: Vec<Input> = files.into_iter().map(Input::found).collect();
    let r = run(&inputs, true);
    let summary = ilcheck::report::roundtrip_summary(&r);
    assert!(r.assemblies >= 130, "{summary}");
    assert!(r.bodies > 200_000, "{summary}");
    assert!(r.instructions > 4_000_000, "{summary}");
    assert_eq!(r.identical, r.bodies, "{summary}");
    assert_eq!(
        (r.mismatches, r.decode_errors, r.encode_errors, r.raw_code),
        (0, 0, 0, 0),
        "{summary}"
    );
    assert_eq!(r.images_identical, r.assemblies, "{summary}");
}

#[test]
fn whole_mono_tree_reads_without_crash() {
    let Some(dir) = support::mono_corpus("whole_mono_tree_reads_without_crash") else {
        return;
    };
    let root = dir.parent().unwrap().to_path_buf();
    let inputs: Vec<Input> = corpus::discover(&[root])
        .unwrap()
        .into_iter()
        .map(Input::found)
        .collect();
    let r = run(&inputs, false);
    let summary = ilcheck::report::roundtrip_summary(&r);
    assert!(inputs.len() > 1000, "{summary}");
    // Every file is read, skipped with a reason, or an explained image error; every body that
    // decodes round-trips.
    assert_eq!(
        r.assemblies + r.skipped.len() as u64 + r.image_errors,
        inputs.len() as u64,
        "{summary}"
    );
    assert_eq!(r.mismatches, 0, "{summary}");
    assert_eq!(r.encode_errors, 0, "{summary}");
    assert!(r.skipped.iter().all(|s| !s.reason.is_empty()));
}

#[test]
fn canonical_statistics_count_a_fat_body_where_tiny_fits() {
    use ilcheck::image::{Image, writer::ImageWriter};
    let bytes = std::fs::read(format!(
        "{}/corpus/bin/control_flow.exe",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let image = Image::parse(&bytes).unwrap();
    let victim = image.methods().find(|m| m.rva() != 0).unwrap();
    let mut writer = ImageWriter::new(&image);
    // `ret` under a 12-byte fat header with MaxStack 8 and no locals: tiny would do.
    writer
        .replace_body(
            victim.rid(),
            [
                0x03, 0x30, 0x08, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2A,
            ],
        )
        .unwrap();
    let patched: &'static [u8] = Box::leak(writer.finish().unwrap().bytes.into_boxed_slice());
    let r = run(
        &[Input::Embedded {
            name: "patched.exe",
            bytes: patched,
        }],
        true,
    );
    assert!(
        r.all_identical(),
        "{}",
        ilcheck::report::roundtrip_summary(&r)
    );
    let c = r.canonical.unwrap();
    assert_eq!(c.non_canonical, 1, "{:?}", c.reasons);
    assert_eq!(c.reasons.get("fat header where tiny fits"), Some(&1));
    assert_eq!(c.bytes_saved, 11);
}

#[test]
fn a_run_reports_the_same_on_any_number_of_threads() {
    // The hostile images (failures in several assemblies, inputs that cannot be read, code
    // kept raw) and the project's assemblies, as a scan finds them.
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let found = corpus::discover_all(&[root.join("corpus/regressions"), root.join("corpus/bin")]);
    let names: Vec<String> = found.inputs.iter().map(Input::name).collect();
    for max_failures in [0, 1, 2, 5, 1000] {
        let mut reports = Vec::new();
        for threads in [1, 2, 3, 7] {
            let opts = RoundtripOptions {
                canonical: true,
                max_failures,
                threads,
            };
            let mut report = RoundtripReport::default();
            let mut progress = Vec::new();
            corpus::roundtrip(&found.inputs, opts, &mut report, |i| {
                progress.push(i.name())
            });
            assert_eq!(progress, names, "progress in input order");
            assert_eq!(report.threads, threads as u64);
            assert!(report.failures.len() <= max_failures);
            if max_failures == 2 {
                let listed: std::collections::BTreeSet<&str> = report
                    .failures
                    .iter()
                    .map(|f| f.assembly.as_str())
                    .collect();
                assert_eq!(
                    listed.len(),
                    2,
                    "the cut falls across assemblies: {listed:?}"
                );
                assert!(report.failures_not_listed > 0 && report.raw_code > 0);
            }
            reports.push(support::comparable(&report));
        }
        assert!(
            reports.windows(2).all(|w| w[0] == w[1]),
            "max {max_failures}: reports differ by thread count"
        );
    }
}
