//! Metadata emit end to end: references, literals and rows added to a real program, the new
//! metadata written by the image writer, and the result loaded by ilcheck, monodis, mono and
//! CoreCLR — also when the additions push tables and heaps across the 2^16 limits where index
//! columns widen.

use crate::support;

use ilcheck::image::emit::{AssemblyIdentity, MetadataBuilder};
use ilcheck::image::writer::ImageWriter;
use ilcheck::image::{Image, Table, Token};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

fn program() -> Vec<u8> {
    std::fs::read(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("corpus/bin/control_flow.exe"))
        .unwrap()
}

fn corlib(image: &Image<'_>) -> Token {
    let rid = (1..=image.tables_header().rows(Table::AssemblyRef))
        .find(|&rid| {
            let r = image.tables().assembly_ref(rid).unwrap();
            image.strings().get(r.name).unwrap() == "mscorlib"
        })
        .expect("a reference to mscorlib");
    Token::new(Table::AssemblyRef, rid)
}

/// The program with `Main` replaced by `Console.WriteLine("emitted: hello")`, after `grow`
/// has added what it likes to the metadata.
fn patched(
    grow: impl FnOnce(&mut MetadataBuilder<'_, '_>),
) -> (Vec<u8>, ilcheck::image::emit::BuiltMetadata) {
    let bytes = program();
    let image = Image::parse(&bytes).unwrap();
    let mut b = MetadataBuilder::new(&image);
    let corlib = corlib(&image);
    let console = b.type_ref(corlib, "System", "Console").unwrap();
    let write_line = b
        .member_ref(console, "WriteLine", &[0x00, 0x01, 0x01, 0x0E])
        .unwrap();
    let hello = b.user_string("emitted: hello").unwrap();
    // A probe assembly the program never loads: its rows must not disturb the runtime.
    let probe = b
        .assembly_ref(&AssemblyIdentity {
            name: "Acme.Probe".into(),
            version: [1, 0, 0, 0],
            ..Default::default()
        })
        .unwrap();
    let probe_type = b.type_ref(probe, "Acme", "Probe").unwrap();
    b.member_ref(probe_type, "Enter", &[0x00, 0x01, 0x01, 0x0E])
        .unwrap();
    grow(&mut b);
    let built = b.build().unwrap();

    let main = Token(image.cli_header().entry_point_token);
    let mut body = vec![(11 << 2) | 2, 0x72];
    body.extend_from_slice(&hello.0.to_le_bytes());
    body.push(0x28);
    body.extend_from_slice(&write_line.0.to_le_bytes());
    body.push(0x2A);
    let mut w = ImageWriter::new(&image);
    w.replace_body(main.rid(), &body).unwrap();
    w.set_metadata(built.clone());
    (w.finish().unwrap().bytes, built)
}

fn check_runs(name: &str, bytes: &[u8]) {
    let dir = std::env::temp_dir().join(format!("ilcheck-emit-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("control_flow.exe");
    std::fs::write(&exe, bytes).unwrap();
    // ilcheck reads it back whole: every body, and nothing new against the original.
    let original = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("corpus/bin/control_flow.exe");
    let o = support::run(
        Command::new(env!("CARGO_BIN_EXE_ilcheck"))
            .arg("roundtrip")
            .arg(&exe),
    );
    assert!(
        o.success(),
        "{name}: roundtrip {}",
        String::from_utf8_lossy(&o.stdout)
    );
    let o = support::run(
        Command::new(env!("CARGO_BIN_EXE_ilcheck"))
            .arg("verify")
            .arg(&exe)
            .arg("--baseline")
            .arg(&original),
    );
    assert!(
        o.success(),
        "{name}: verify {}",
        String::from_utf8_lossy(&o.stdout)
    );
    for runtime in support::runtimes("metadata emit") {
        let out = runtime.run(&exe, &[], Duration::from_secs(60)).unwrap();
        assert!(
            out.success(),
            "{name} under {}: {} {}",
            runtime.describe(),
            out.describe(),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "emitted: hello\n",
            "{name} under {}",
            runtime.describe()
        );
    }
    if support::mono_tool("metadata emit", "monodis") {
        let o = support::run(Command::new("monodis").arg("--typeref").arg(&exe));
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(o.success() && text.contains("Acme.Probe"), "{name}: {text}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

fn typeref_names(b: &mut MetadataBuilder<'_, '_>, rows: u32) {
    let scope = corlib(b.image());
    let mut n = 0;
    while b.rows(Table::TypeRef) < rows {
        b.type_ref(scope, "Grown", &format!("T{n}")).unwrap();
        n += 1;
    }
}

#[test]
fn added_references_and_literals_run() {
    let (bytes, built) = patched(|_| {});
    assert_eq!(
        built
            .tables
            .info(Table::CustomAttribute)
            .column(0)
            .unwrap()
            .1,
        2
    );
    check_runs("refs", &bytes);
}

/// The coded indexes' limits (HasCustomAttribute: 2^11 rows, MemberRefParent: 2^13,
/// TypeDefOrRef and ResolutionScope: 2^14) and `#Strings` crossing 64 KiB, just below and at
/// each limit.
#[test]
fn tables_and_heaps_across_the_index_width_limits_run() {
    for (rows, ca_width, tdor_width) in [
        (2047, 2, 2),
        (2048, 4, 2),
        (16383, 4, 2),
        (16384, 4, 4),
        (65535, 4, 4),
        (65536, 4, 4),
    ] {
        let (bytes, built) = patched(|b| typeref_names(b, rows));
        let width = |t: Table, col| built.tables.info(t).column(col).unwrap().1;
        assert_eq!(width(Table::CustomAttribute, 0), ca_width, "{rows}");
        assert_eq!(width(Table::TypeDef, 3), tdor_width, "{rows}");
        let strings_wide = built.tables.heap_sizes & 1 != 0;
        assert_eq!(strings_wide, rows > 5000, "{rows}");
        check_runs(&format!("typerefs-{rows}"), &bytes);
    }
}

/// `#Blob` just below and at 64 KiB: blob columns widen with the BIG_BLOB flag.
#[test]
fn a_blob_heap_across_64_kib_runs() {
    for (extra, wide) in [(false, false), (true, true)] {
        let (bytes, built) = patched(|b| {
            // Distinct, unreferenced 200-byte blobs (202 bytes with their length).
            let mut n = 0u32;
            loop {
                let mut blob = vec![0x1D, 0x08];
                blob.extend_from_slice(&n.to_le_bytes());
                blob.resize(200, 0x08);
                let len = b.blob(&blob).unwrap() as usize + 202;
                n += 1;
                let done = if extra {
                    len >= 0x1_0000
                } else {
                    len + 202 > 0xFFF0
                };
                if done {
                    break;
                }
            }
        });
        assert_eq!(built.tables.heap_sizes & 4 != 0, wide, "extra {extra}");
        check_runs(&format!("blobs-{wide}"), &bytes);
    }
}

#[test]
fn emitted_image_reads_back_in_the_library() {
    let (bytes, _) = patched(|b| typeref_names(b, 3000));
    let image = Image::parse(&bytes).unwrap();
    assert_eq!(image.tables_header().rows(Table::TypeRef), 3000);
    for m in image.methods().filter(|m| m.rva() != 0) {
        m.decoded_body().unwrap();
        m.full_name().unwrap();
    }
}

/// A ReadyToRun assembly of the .NET Core framework, patched: made IL-only by default (the
/// runtime then compiles the patched IL), its native code kept only when asked.
#[test]
fn ready_to_run_images_are_made_il_only_unless_kept() {
    let Some(dir) = ilcheck::harness::runtime::coreclr_framework_dir() else {
        let msg = "ready_to_run_images_are_made_il_only_unless_kept: no CoreCLR framework (bash scripts/setup.sh)";
        assert!(
            std::env::var("ILCHECK_REQUIRE_MONO").as_deref() != Ok("1"),
            "{msg} (required: ILCHECK_REQUIRE_MONO=1)"
        );
        eprintln!("\n!!! SKIPPED {msg}\n");
        return;
    };
    let input = dir.join("System.Linq.dll");
    let image = Image::open(&input).unwrap();
    let cli = image.cli_header();
    assert!(
        cli.managed_native_header.rva != 0,
        "System.Linq.dll is ReadyToRun"
    );
    for keep in [false, true] {
        let mut opts = ilcheck::corpus::RewriteOptions::new("prologue-epilogue").unwrap();
        opts.keep_ready_to_run = keep;
        let mut report = ilcheck::corpus::RewriteReport::default();
        let bytes = ilcheck::corpus::rewrite_image(&image, &opts, &mut report).unwrap();
        assert!(report.ok() && report.rewritten > 500, "{report:?}");
        let w = report.write.as_ref().unwrap();
        assert!(w.ready_to_run);
        assert_eq!(w.ready_to_run_stripped, !keep);
        let out = Image::parse(&bytes).unwrap();
        let c = out.cli_header();
        assert_eq!(c.managed_native_header.rva == 0, !keep);
        assert_eq!(c.flags & 0x4 == 0, !keep);
        // Stripped, the Machine field is the plain one (no operating-system override).
        assert_eq!(
            matches!(out.pe().machine, 0x014C | 0x8664 | 0x01C4 | 0xAA64),
            !keep || matches!(image.pe().machine, 0x014C | 0x8664 | 0x01C4 | 0xAA64)
        );
        let text = ilcheck::report::rewrite_text(&report);
        assert!(
            text.contains(if keep {
                "WARNING: ReadyToRun code kept"
            } else {
                "IL-only"
            }),
            "{text}"
        );
    }
}
