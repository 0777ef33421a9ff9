//! The hostile-image corpus (`corpus/regressions/images/`, made by
//! `cargo run --example hostile_images`) replayed through the command line: nothing that cannot
//! be read is called clean, damaged images are findings, a FIFO never hangs a run, and a rewrite
//! never reports success for an output that does not read back.

use crate::support;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_ilcheck");

fn images() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("corpus/regressions/images")
}

fn project(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ilcheck-hostile-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs ilcheck with a deadline: a hang is a test failure, not a stuck test run.
fn run(args: &[&std::ffi::OsStr]) -> (i32, String, String) {
    let o = ilcheck::harness::run_bounded(
        Command::new(BIN).args(args),
        Duration::from_secs(60),
        64 << 20,
    )
    .unwrap();
    assert!(!o.timed_out, "ilcheck {args:?}: {}", o.describe());
    (
        o.code.unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn ilcheck<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> (i32, String, String) {
    let args: Vec<&std::ffi::OsStr> = args.iter().map(AsRef::as_ref).collect();
    run(&args)
}

/// (file, exit code of `verify`, of `roundtrip`, text `verify` must print).
const EXPECTED: &[(&str, i32, i32, &str)] = &[
    ("empty.dll", 2, 2, "cannot be read: not a PE image"),
    ("text.dll", 2, 2, "cannot be read: not a PE image"),
    ("elf.dll", 2, 2, "cannot be read: not a PE image"),
    ("native.dll", 2, 2, "without a CLI header"),
    ("cut-in-metadata.exe", 2, 2, "runs past the end of the file"),
    ("cut-in-rsrc.exe", 1, 1, "ImageTruncated: section .rsrc"),
    ("cut-in-reloc.exe", 1, 1, "ImageTruncated: section .reloc"),
    (
        "directories-outside.exe",
        1,
        1,
        "DirectoryOutOfBounds: strong-name signature",
    ),
    ("unaligned-last-section.exe", 0, 0, "0 findings"),
    ("unaligned-last-section-and-data.exe", 0, 0, "0 findings"),
    ("name-unreadable.dll", 1, 0, "<name unreadable"),
];

#[test]
fn every_hostile_image_has_its_exit_code_and_reason() {
    let mut seen = 0;
    for entry in std::fs::read_dir(images()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.ends_with(".md") {
            continue;
        }
        let &(_, verify_code, roundtrip_code, text) = EXPECTED
            .iter()
            .find(|e| e.0 == name)
            .unwrap_or_else(|| panic!("{name} is in the corpus but not in EXPECTED"));
        let (code, out, err) = ilcheck(&[
            "verify".as_ref(),
            path.as_os_str(),
            "--max".as_ref(),
            "1000".as_ref(),
        ]);
        assert_eq!(code, verify_code, "verify {name}:\n{out}{err}");
        assert!(
            out.contains(text),
            "verify {name} should say {text:?}:\n{out}"
        );
        let (code, out, err) = ilcheck(&["roundtrip".as_ref(), path.as_os_str()]);
        assert_eq!(code, roundtrip_code, "roundtrip {name}:\n{out}{err}");
        // The JSON is one document, whatever the outcome.
        let (_, json, _) = ilcheck(&["verify".as_ref(), path.as_os_str(), "--json".as_ref()]);
        serde_json::from_str::<Value>(&json).unwrap_or_else(|e| panic!("{name}: {e}\n{json}"));
        seen += 1;
    }
    assert_eq!(seen, EXPECTED.len());
}

#[test]
fn scans_list_skipped_and_unreadable_entries_and_go_on() {
    let dir = scratch("scan");
    std::fs::copy(images().join("native.dll"), dir.join("native.dll")).unwrap();
    std::fs::copy(images().join("text.dll"), dir.join("text.dll")).unwrap();
    std::fs::copy(project("corpus/bin/features.exe"), dir.join("features.exe")).unwrap();
    // Skipped files are listed; the good assembly is verified; --strict fails on the skips.
    let (code, out, err) = ilcheck(&["verify".as_ref(), dir.as_os_str()]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("skipped") && out.contains("native.dll"),
        "{out}"
    );
    assert!(out.contains("in 1 assemblies"), "{out}");
    let (code, _, _) = ilcheck(&["verify".as_ref(), dir.as_os_str(), "--strict".as_ref()]);
    assert_eq!(code, 2);
    let (code, _, _) = ilcheck(&["roundtrip".as_ref(), dir.as_os_str(), "--strict".as_ref()]);
    assert_eq!(code, 2);

    // A dangling link and a FIFO named .dll: reported with their paths, never read, never a
    // hang; the rest is still verified.
    std::os::unix::fs::symlink(dir.join("nowhere.dll"), dir.join("dangling.dll")).unwrap();
    let fifo = dir.join("pipe.dll");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    for cmd in ["verify", "roundtrip"] {
        let (code, out, err) = ilcheck(&[cmd.as_ref(), dir.as_os_str()]);
        assert_eq!(code, 2, "{cmd}: {out}{err}");
        let all = format!("{out}{err}");
        assert!(all.contains("dangling.dll"), "{cmd}: {all}");
        assert!(
            all.contains("pipe.dll") && all.contains("FIFO"),
            "{cmd}: {all}"
        );
    }
    let (code, out, _) = ilcheck(&["verify".as_ref(), dir.as_os_str()]);
    assert_eq!(code, 2);
    assert!(out.contains("in 1 assemblies"), "{out}");
    // Named directly, the FIFO is refused at once too.
    let (code, _, err) = ilcheck(&["disasm".as_ref(), fifo.as_os_str()]);
    assert_eq!(code, 2, "{err}");
    let (code, out, _) = ilcheck(&["verify".as_ref(), fifo.as_os_str()]);
    assert_eq!(code, 2);
    assert!(out.contains("FIFO"), "{out}");
    let (code, _, _) = ilcheck(&[
        "rewrite".as_ref(),
        fifo.as_os_str(),
        "-o".as_ref(),
        dir.join("out.dll").as_os_str(),
        "-t".as_ref(),
        "identity".as_ref(),
    ]);
    assert_eq!(code, 2);
    // An empty directory is not a clean run.
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let (code, _, err) = ilcheck(&["verify".as_ref(), empty.as_os_str()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no .dll or .exe files"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn sarif_carries_unread_inputs_and_image_findings() {
    let dir = scratch("sarif");
    let sarif = dir.join("out.sarif");
    let (code, _, _) = ilcheck(&[
        "verify".as_ref(),
        images().join("empty.dll").as_os_str(),
        images().join("cut-in-rsrc.exe").as_os_str(),
        "--sarif".as_ref(),
        sarif.as_os_str(),
    ]);
    assert_eq!(code, 2);
    let log: Value = serde_json::from_str(&std::fs::read_to_string(&sarif).unwrap()).unwrap();
    let run = &log["runs"][0];
    let notes = run["invocations"][0]["toolExecutionNotifications"]
        .as_array()
        .unwrap();
    assert!(
        notes
            .iter()
            .any(|n| n["message"]["text"].as_str().unwrap().contains("empty.dll")),
        "{notes:?}"
    );
    assert_eq!(run["invocations"][0]["executionSuccessful"], false);
    let results = run["results"].as_array().unwrap();
    assert!(results.iter().any(|r| r["ruleId"] == "ImageTruncated"));
    let rules = run["tool"]["driver"]["rules"].as_array().unwrap();
    for r in results {
        let i = r["ruleIndex"].as_u64().unwrap() as usize;
        assert_eq!(rules[i]["id"], r["ruleId"]);
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn baseline_matches_a_method_with_an_unreadable_name_by_token() {
    let dir = scratch("baseline");
    // Baselines pair assemblies by file name first.
    let patched = dir.join("verify_cases.dll");
    std::fs::copy(images().join("name-unreadable.dll"), &patched).unwrap();
    let (code, out, err) = ilcheck(&[
        "verify".as_ref(),
        patched.as_os_str(),
        "--baseline".as_ref(),
        project("corpus/bin/verify_cases.dll").as_os_str(),
        "--json".as_ref(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["findings_total"], 0, "{out}");
    assert_eq!(v["baseline_uncertain"], 1, "{out}");
    assert!(v["baseline_suppressed"].as_u64().unwrap() > 50);
    // A patched file under another name finds its original by assembly identity.
    let renamed = dir.join("renamed.dll");
    std::fs::copy(project("corpus/bin/verify_cases.dll"), &renamed).unwrap();
    let (code, out, err) = ilcheck(&[
        "verify".as_ref(),
        renamed.as_os_str(),
        "--baseline".as_ref(),
        project("corpus/bin/verify_cases.dll").as_os_str(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("paired by assembly identity"), "{out}");
    // Without an original of its name or identity, it is said loudly, on both streams.
    let (code, out, err) = ilcheck(&[
        "verify".as_ref(),
        renamed.as_os_str(),
        "--baseline".as_ref(),
        project("corpus/bin/codec_shapes.dll").as_os_str(),
    ]);
    assert_eq!(code, 1);
    for text in [&out, &err] {
        assert!(
            text.contains("WARNING: ") && text.contains("no original"),
            "{out}{err}"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

fn rewrite_to(input: &Path, output: &Path) -> (i32, String, String) {
    ilcheck(&[
        "rewrite".as_ref(),
        input.as_os_str(),
        "-o".as_ref(),
        output.as_os_str(),
        "-t".as_ref(),
        "prologue-epilogue".as_ref(),
    ])
}

#[test]
fn a_rewrite_never_writes_bodies_no_loader_can_align() {
    let dir = scratch("aligned");
    // RVA and file offset of the last section disagree modulo 4 and no header slot is free:
    // no place aligns a fat body for every loader. An error, and no file.
    let out = dir.join("a.exe");
    let (code, _, err) = rewrite_to(&images().join("unaligned-last-section.exe"), &out);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("non-multiple of 4"), "{err}");
    assert!(!out.exists());
    // Both moved by 2: the grown section takes the bodies at aligned RVAs and offsets.
    let input = images().join("unaligned-last-section-and-data.exe");
    let out = dir.join("unaligned-last-section-and-data.exe");
    let (code, text, err) = rewrite_to(&input, &out);
    assert_eq!(code, 0, "{text}{err}");
    assert!(text.contains("relocated"), "{text}");
    let (code, text, err) = ilcheck(&[
        "verify".as_ref(),
        out.as_os_str(),
        "--baseline".as_ref(),
        input.as_os_str(),
    ]);
    assert_eq!(code, 0, "{text}{err}");
    if support::mono_tool("a_rewrite_never_writes_bodies_no_loader_can_align", "mono") {
        let run = |p: &Path| support::run(Command::new("mono").arg(p));
        let (before, after) = (run(&input), run(&out));
        assert!(
            after.success(),
            "{}",
            String::from_utf8_lossy(&after.stderr)
        );
        assert_eq!(before.stdout, after.stdout);
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// Runs ilcheck with a 120 s deadline, reading its peak resident set (`VmHWM`) from `/proc`
/// while it runs (continuously at first, then every millisecond): (exit code, stdout, stderr, highest `VmHWM` read, in KiB).
/// Samples bound the peak from below (growth after the last read is missed), which is
/// enough to see a copy of a 1 GiB file, which takes far longer. `wait4`'s figure would not
/// do: Linux counts in it the peak of the process that spawned the child.
fn run_sampled(args: &[&std::ffi::OsStr]) -> (i32, String, String, u64) {
    let dir = scratch("sampled-out");
    let (out, err) = (dir.join("stdout"), dir.join("stderr"));
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let (exe, status) = (
        std::fs::canonicalize(BIN).unwrap(),
        format!("/proc/{}", child.id()),
    );
    let start = std::time::Instant::now();
    let mut peak = 0;
    let code = loop {
        // Until the child has exec'd it shares this process's memory and its figures.
        let ran = std::fs::read_link(format!("{status}/exe")).is_ok_and(|e| e == exe);
        if ran && let Ok(text) = std::fs::read_to_string(format!("{status}/status")) {
            let hwm = text
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok());
            peak = peak.max(hwm.unwrap_or(0));
        }
        if let Some(s) = child.try_wait().unwrap() {
            break s.code().unwrap_or(-1);
        }
        if start.elapsed() > Duration::from_secs(120) {
            child.kill().ok();
            child.wait().ok();
            panic!("ilcheck {args:?} timed out");
        }
        // Most runs here take milliseconds: read as often as possible at first.
        if start.elapsed() < Duration::from_millis(200) {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    let read = |p: &Path| String::from_utf8_lossy(&std::fs::read(p).unwrap()).into_owned();
    let result = (code, read(&out), read(&err), peak);
    std::fs::remove_dir_all(&dir).ok();
    result
}

/// `len` bytes of `path` from `at` (a positioned read: the files here are too large to read
/// whole).
fn read_at(path: &Path, at: u64, len: usize) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; len];
    let n = std::fs::File::open(path)
        .unwrap()
        .read_at(&mut buf, at)
        .unwrap();
    buf.truncate(n);
    buf
}

/// A 1 GiB sparse file: a small assembly, then a hole. Reading it maps only what the headers
/// describe; the rewrite keeps the trailing data (the hole stays a hole) and copies nothing of
/// it through memory: every command's peak memory stays far below the file's size.
#[test]
fn a_large_sparse_image_is_read_and_written_through_its_headers() {
    use std::os::unix::fs::MetadataExt;
    let dir = scratch("sparse");
    let path = dir.join("sparse.exe");
    let original = std::fs::read(project("corpus/bin/control_flow.exe")).unwrap();
    std::fs::write(&path, &original).unwrap();
    let size: u64 = 1 << 30;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(size)
        .unwrap();
    let holes = std::fs::metadata(&path).unwrap().blocks() * 512 < 64 << 20;
    if !holes {
        eprintln!(
            "\n!!! {}: this file system stores no holes; the output's sparseness is not checked\n",
            dir.display()
        );
    }
    // Far below the 1 GiB any copy of the file would take.
    let limit_kib = 128 << 10;
    let (code, out, _, peak) = run_sampled(&["roundtrip".as_ref(), path.as_os_str()]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("1 of 1 images identical"), "{out}");
    assert!(peak < limit_kib, "roundtrip: {peak} KiB");
    let (code, _, _, peak) = run_sampled(&["verify".as_ref(), path.as_os_str()]);
    assert_eq!(code, 0);
    assert!(peak < limit_kib, "verify: {peak} KiB");

    let written = dir.join("out.exe");
    let (code, text, err, peak) = run_sampled(&[
        "rewrite".as_ref(),
        path.as_os_str(),
        "-o".as_ref(),
        written.as_os_str(),
        "-t".as_ref(),
        "prologue-epilogue".as_ref(),
    ]);
    assert_eq!(code, 0, "{text}{err}");
    assert!(text.contains("relocated"), "{text}");
    assert!(peak < limit_kib, "rewrite: {peak} KiB");
    eprintln!("1 GiB sparse rewrite: peak RSS sampled {peak} KiB");
    let meta = std::fs::metadata(&written).unwrap();
    assert!(meta.len() > size);
    if holes {
        assert!(
            meta.blocks() * 512 < 64 << 20,
            "{} bytes allocated",
            meta.blocks() * 512
        );
    }
    // The data after the sections is kept, not dropped: the assembly's last bytes, the hole
    // (zeros) and the hole's end are where they were.
    let tail = original.len() as u64 - 0x100;
    assert_eq!(read_at(&written, tail, 0x100), original[tail as usize..]);
    assert_eq!(read_at(&written, 1 << 20, 4096), vec![0; 4096]);
    assert_eq!(read_at(&written, size - 4096, 4096), vec![0; 4096]);
    // The rewritten image reads back whole, every body verified.
    let (code, out, _, _) = run_sampled(&["verify".as_ref(), written.as_os_str()]);
    assert_eq!(code, 0, "{out}");
    std::fs::remove_dir_all(&dir).ok();
}
