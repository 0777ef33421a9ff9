//! Nothing lost: outputs are replaced atomically (a killed, failing or concurrent rewrite leaves
//! the old file or the new one, never a part), the input is never harmed (also as `-o`), and a
//! disk that refuses the write leaves everything as it was.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_ilcheck");
const TEMP_PREFIX: &str = ilcheck::fsio::TEMP_PREFIX;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ilcheck-safety-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A large input where one is available (mono's mscorlib: a rewrite takes long enough to be
/// killed part-way), else the project's biggest program.
fn big_input(test: &str) -> PathBuf {
    match support::mono_corpus(test) {
        Some(dir) => dir.join("mscorlib.dll"),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("corpus/bin/features.exe"),
    }
}

fn rewrite(input: &Path, output: &Path, transform: &str) -> Command {
    let mut c = Command::new(BIN);
    c.args(["rewrite"])
        .arg(input)
        .arg("-o")
        .arg(output)
        .args(["--transform", transform, "--threads", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c
}

fn temp_files(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(TEMP_PREFIX))
        })
        .collect()
}

/// A small deterministic generator of kill delays (no dependency for one test).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n.max(1)
    }
}

#[test]
fn a_killed_rewrite_leaves_the_old_or_the_new_file() {
    let input = big_input("a_killed_rewrite_leaves_the_old_or_the_new_file");
    let dir = scratch("kill");
    let out = dir.join("out.dll");
    let new_path = dir.join("new.dll");
    // The old output (another transform) and the complete new one.
    assert!(rewrite(&input, &out, "nop-pad").status().unwrap().success());
    let old = std::fs::read(&out).unwrap();
    let start = Instant::now();
    assert!(
        rewrite(&input, &new_path, "prologue-epilogue")
            .status()
            .unwrap()
            .success()
    );
    let full_run = start.elapsed();
    let new = std::fs::read(&new_path).unwrap();
    assert_ne!(old, new);

    let mut rng = Lcg(0x1c4e_c4ec);
    let (mut kept_old, mut got_new) = (0, 0);
    let window_us = (full_run.as_micros() as u64 * 12 / 10).max(1_000);
    for _ in 0..60 {
        let mut child = rewrite(&input, &out, "prologue-epilogue").spawn().unwrap();
        std::thread::sleep(Duration::from_micros(rng.below(window_us)));
        let _ = child.kill(); // SIGKILL
        let _ = child.wait();
        let now = std::fs::read(&out).unwrap();
        if now == old {
            kept_old += 1;
        } else if now == new {
            got_new += 1;
            // Start the next round from the old file again.
            std::fs::write(&out, &old).unwrap();
        } else {
            panic!(
                "after a kill the output is neither the old nor the new file ({} bytes; old {}, new {})",
                now.len(),
                old.len(),
                new.len()
            );
        }
        // A killed process may leave its marked temporary file; nothing else.
        for t in temp_files(&dir) {
            std::fs::remove_file(t).unwrap();
        }
    }
    eprintln!(
        "60 kills over a {full_run:?} rewrite: {kept_old} left the old file, {got_new} the new one"
    );
    assert!(
        kept_old > 0,
        "no kill landed before the rename; the test does not test"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn concurrent_rewrites_to_one_output_leave_one_whole_file() {
    let input = big_input("concurrent_rewrites_to_one_output_leave_one_whole_file");
    let dir = scratch("concurrent");
    let out = dir.join("out.dll");
    let expected: Vec<Vec<u8>> = ["nop-pad", "prologue-epilogue"]
        .iter()
        .map(|t| {
            let p = dir.join(format!("{t}.dll"));
            assert!(rewrite(&input, &p, t).status().unwrap().success());
            std::fs::read(p).unwrap()
        })
        .collect();
    for _ in 0..4 {
        let children: Vec<_> = ["nop-pad", "prologue-epilogue"]
            .iter()
            .map(|t| rewrite(&input, &out, t).spawn().unwrap())
            .collect();
        for mut c in children {
            assert!(c.wait().unwrap().success());
        }
        let now = std::fs::read(&out).unwrap();
        assert!(
            expected.contains(&now),
            "two writers interleaved into a file equal to neither"
        );
        assert!(temp_files(&dir).is_empty());
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// Runs `rewrite IN -o IN` with a file-size limit below the output's size: every write past
/// the limit fails (EFBIG), as on a full disk.
#[test]
fn a_refused_write_leaves_the_input_whole_even_as_its_own_output() {
    let dir = scratch("efbig");
    let input = dir.join("features.exe");
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("corpus/bin/features.exe");
    std::fs::copy(&source, &input).unwrap();
    let original = std::fs::read(&input).unwrap();
    // 16 blocks of 512 bytes: less than the 29 KB output.
    let script = format!(
        "trap '' XFSZ; ulimit -f 16 && exec '{BIN}' rewrite '{0}' -o '{0}' --transform prologue-epilogue",
        input.display()
    );
    let out = Command::new("sh").args(["-c", &script]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("writing"), "{stderr}");
    assert_eq!(
        std::fs::read(&input).unwrap(),
        original,
        "the input changed"
    );
    assert!(temp_files(&dir).is_empty(), "{:?}", temp_files(&dir));

    // Without the limit, the same command replaces the input with the rewritten assembly.
    let out = Command::new(BIN)
        .arg("rewrite")
        .arg(&input)
        .arg("-o")
        .arg(&input)
        .args(["--transform", "prologue-epilogue"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rewritten = std::fs::read(&input).unwrap();
    assert_ne!(rewritten, original);
    let expected = dir.join("expected.exe");
    assert!(
        rewrite(&source, &expected, "prologue-epilogue")
            .status()
            .unwrap()
            .success()
    );
    assert_eq!(rewritten, std::fs::read(&expected).unwrap());
    std::fs::remove_dir_all(&dir).ok();
}

/// As above for an output large enough to be written with direct I/O (mono's mscorlib), once
/// as a single file (the worker writes it) and once in a run over a directory (a committer
/// writes what the worker handed over): the refused write leaves the input whole and no
/// temporary file.
#[test]
fn a_refused_direct_write_leaves_the_input_whole() {
    let test = "a_refused_direct_write_leaves_the_input_whole";
    let Some(corpus) = support::mono_corpus(test) else {
        return;
    };
    let dir = scratch("efbig-direct");
    let input = dir.join("mscorlib.dll");
    std::fs::copy(corpus.join("mscorlib.dll"), &input).unwrap();
    let original = std::fs::read(&input).unwrap();
    assert!(original.len() > 2 * ilcheck::fsio::DIRECT_MIN);
    let elsewhere = scratch("efbig-direct-out");
    for (from, to) in [(&input, &input), (&dir, &elsewhere)] {
        // 1 MiB: less than the output, more than the direct-I/O threshold.
        let script = format!(
            "trap '' XFSZ; ulimit -f 2048 && exec '{BIN}' rewrite '{}' -o '{}' --transform prologue-epilogue",
            from.display(),
            to.display()
        );
        let out = Command::new("sh").args(["-c", &script]).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            !out.status.success(),
            "{}: {stdout}{stderr}",
            from.display()
        );
        assert!(
            stderr.contains("writing") || stdout.contains("writing"),
            "{stdout}{stderr}"
        );
        assert!(
            std::fs::read(&input).unwrap() == original,
            "the input changed"
        );
        assert!(temp_files(&dir).is_empty(), "{:?}", temp_files(&dir));
        assert!(
            temp_files(&elsewhere).is_empty(),
            "{:?}",
            temp_files(&elsewhere)
        );
        assert!(!elsewhere.join("mscorlib.dll").exists(), "a part written");
    }
    std::fs::remove_dir_all(&dir).ok();
    std::fs::remove_dir_all(&elsewhere).ok();
}

/// As above for an input too large to read into memory (65 MiB: a program, a hole, and data at
/// its end), whose output is streamed to its file (ranges copied file to file): the write that
/// fails past the limit leaves the input whole and no temporary file; without the limit the
/// output is the one a rewrite into another file gives, and keeps the hole.
#[test]
fn a_refused_streamed_write_leaves_a_large_input_whole() {
    use std::os::unix::fs::FileExt;
    let dir = scratch("efbig-streamed");
    let input = dir.join("large.exe");
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("corpus/bin/features.exe");
    std::fs::copy(&source, &input).unwrap();
    let len: u64 = 65 << 20;
    let tail = b"data after a hole, which the rewrite keeps";
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&input)
        .unwrap();
    f.write_all_at(tail, len - tail.len() as u64).unwrap();
    drop(f);
    let original = std::fs::read(&input).unwrap();
    assert_eq!(original.len() as u64, len);
    // 32,768 blocks of 512 bytes: 16 MiB, a quarter of the output.
    let script = format!(
        "trap '' XFSZ; ulimit -f 32768 && exec '{BIN}' rewrite '{0}' -o '{0}' --transform prologue-epilogue",
        input.display()
    );
    let out = Command::new("sh").args(["-c", &script]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("writing") || stderr.contains("File too large"),
        "{stderr}"
    );
    assert!(
        std::fs::read(&input).unwrap() == original,
        "the input changed"
    );
    assert!(temp_files(&dir).is_empty(), "{:?}", temp_files(&dir));

    let allocated = |p: &Path| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(p).unwrap().blocks() * 512
    };
    let sparse = allocated(&input) < 16 << 20;
    let expected = dir.join("expected.exe");
    let o = rewrite(&input, &expected, "prologue-epilogue")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = rewrite(&input, &input, "prologue-epilogue")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rewritten = std::fs::read(&input).unwrap();
    assert!(rewritten == std::fs::read(&expected).unwrap());
    assert!(rewritten[..len as usize] != original[..]);
    assert!(rewritten[len as usize - tail.len()..len as usize] == tail[..]);
    if sparse {
        assert!(
            allocated(&input) < 16 << 20,
            "{} bytes allocated",
            allocated(&input)
        );
    } else {
        eprintln!("\n!!! this file system stores no holes: the output's are not checked\n");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn report_files_are_written_atomically_or_not_at_all() {
    let dir = scratch("reports");
    // A report path whose directory does not exist: exit 2, nothing created anywhere near.
    let missing = dir.join("no/such/dir/report.md");
    let out = Command::new(BIN)
        .args(["verify", "corpus/bin/features.exe", "--report"])
        .arg(&missing)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(!missing.exists());
    // A report over an existing file replaces it whole.
    let report = dir.join("report.md");
    std::fs::write(&report, "old report").unwrap();
    let out = Command::new(BIN)
        .args(["verify", "corpus/bin/features.exe", "--report"])
        .arg(&report)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = std::fs::read_to_string(&report).unwrap();
    assert!(text.starts_with("# ilcheck verification report"), "{text}");
    assert!(temp_files(&dir).is_empty());
    std::fs::remove_dir_all(&dir).ok();
}

/// A report never replaces a file the run reads, by whatever name it is given (`DIR/..`, a
/// symbolic or hard link): `verify`, `roundtrip` and `bench` refuse before they run (exit 2), leaving
/// inputs and originals as they were; and `rewrite DIR -o` the same directory by another name
/// is refused as `-o DIR` is.
#[test]
fn reports_and_directory_rewrites_never_replace_what_they_read() {
    let dir = scratch("reads");
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("corpus/bin/control_flow.exe");
    let (input, original) = (dir.join("a.exe"), dir.join("orig.exe"));
    std::fs::copy(&source, &input).unwrap();
    std::fs::copy(&source, &original).unwrap();
    std::fs::hard_link(&input, dir.join("hard.exe")).unwrap();
    std::os::unix::fs::symlink("a.exe", dir.join("sym.exe")).unwrap();
    let bytes = std::fs::read(&source).unwrap();
    let run = |args: &[&str]| {
        Command::new(BIN)
            .args(args)
            .current_dir(&dir)
            .output()
            .unwrap()
    };
    for args in [
        &["verify", "a.exe", "--report", "a.exe"][..],
        &["verify", "a.exe", "--sarif", "../reads-nothing/a.exe"],
        &["verify", "a.exe", "--sarif", "sym.exe"],
        &["verify", "a.exe", "--report", "hard.exe"],
        &[
            "verify",
            "a.exe",
            "--baseline",
            "orig.exe",
            "--report",
            "orig.exe",
        ],
        &[
            "verify",
            "--baseline-pair",
            "a.exe=orig.exe",
            "--report",
            "./orig.exe",
        ],
        &["roundtrip", "a.exe", "--report", "sym.exe"],
        &["bench", "a.exe", "--rounds", "1", "--report", "hard.exe"],
    ] {
        let args: Vec<String> = args
            .iter()
            .map(|a| a.replace("reads-nothing", &dir.file_name().unwrap().to_string_lossy()))
            .collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = run(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("never replaces"), "{args:?}: {stderr}");
        assert_eq!(std::fs::read(&input).unwrap(), bytes, "{args:?}");
        assert_eq!(std::fs::read(&original).unwrap(), bytes, "{args:?}");
    }
    // Another report path is written as usual.
    assert_eq!(
        run(&["verify", "a.exe", "--report", "r.md"]).status.code(),
        Some(0)
    );

    let sub = dir.join("d");
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::copy(&source, sub.join("a.exe")).unwrap();
    let same = format!("{}/../d", sub.display());
    let out = run(&["rewrite", "d", "-o", &same, "-t", "nop-pad"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("the input's own directory"), "{stderr}");
    assert_eq!(std::fs::read(sub.join("a.exe")).unwrap(), bytes);
    assert!(temp_files(&dir).is_empty() && temp_files(&sub).is_empty());
    std::fs::remove_dir_all(&dir).ok();
}

/// SIGINT (Ctrl-C) during `rewrite DIR -o OUT` ends the run between assemblies: exit 130, every
/// output written is whole (the same bytes as an uninterrupted rewrite of its input), the rest
/// are not started, and no temporary file is left.
#[test]
fn an_interrupted_rewrite_writes_whole_files_or_none() {
    let dir = scratch("interrupted");
    let (inputs, out) = (dir.join("in"), dir.join("out"));
    std::fs::create_dir_all(&inputs).unwrap();
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("corpus/bin/features.exe");
    for k in 0..400 {
        std::fs::copy(&source, inputs.join(format!("f{k:03}.exe"))).unwrap();
    }
    let written = |d: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(d)
            .map(|r| r.flatten().map(|e| e.path()).collect())
            .unwrap_or_default()
    };
    let child = Command::new(BIN)
        .args(["rewrite"])
        .arg(&inputs)
        .arg("-o")
        .arg(&out)
        .args(["-t", "wrap-finally", "--threads", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Once the first output is in place, the run is under way.
    let by = Instant::now() + Duration::from_secs(30);
    while written(&out).is_empty() && Instant::now() < by {
        std::thread::sleep(Duration::from_millis(1));
    }
    // SAFETY: kill(2) of the child this test started.
    unsafe { libc::kill(i32::try_from(child.id()).unwrap(), libc::SIGINT) };
    let o = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("stopped by a signal"), "{stderr}");
    assert!(temp_files(&out).is_empty(), "{:?}", temp_files(&out));
    let done = written(&out);
    assert!(
        done.len() < 400,
        "every assembly was written before the signal"
    );
    let expected = dir.join("expected.exe");
    assert!(
        rewrite(&source, &expected, "wrap-finally")
            .status()
            .unwrap()
            .success()
    );
    let expected = std::fs::read(&expected).unwrap();
    for f in &done {
        assert_eq!(std::fs::read(f).unwrap(), expected, "{}", f.display());
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// A rewrite that writes nothing creates nothing: a missing input is refused before anything
/// is made (before, `rewrite nothere.dll -o out.dll` left an empty directory `out.dll/`, and the
/// next `rewrite u.dll -o out.dll` wrote `out.dll/u.dll`), and a run over a directory whose
/// every assembly fails leaves no output directory behind.
#[test]
fn a_rewrite_that_writes_nothing_creates_nothing() {
    let dir = scratch("nothing-created");
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let input = root.join("corpus/bin/control_flow.exe");
    let run = |args: &[&std::ffi::OsStr]| {
        let o = support::run(
            Command::new(BIN)
                .arg("rewrite")
                .args(args)
                .args(["-t", "prologue"]),
        );
        (o.code, String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let missing = dir.join("nothere.dll");
    let out = dir.join("out.dll");
    let (code, err) = run(&[missing.as_os_str(), "-o".as_ref(), out.as_os_str()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("nothere.dll") && err.contains("nothing written"),
        "{err}"
    );
    assert!(!out.exists(), "{err}");
    // So the next run into that name writes the file itself.
    let (code, err) = run(&[input.as_os_str(), "-o".as_ref(), out.as_os_str()]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.is_file());
    // Among several inputs, one missing is refused before any is written.
    let many = dir.join("many");
    let (code, err) = run(&[
        input.as_os_str(),
        missing.as_os_str(),
        "-o".as_ref(),
        many.as_os_str(),
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("nothere.dll"), "{err}");
    assert!(!many.exists(), "{err}");
    // A directory of which nothing can be rewritten: its failure reported, no directory made.
    let junk = dir.join("junk");
    std::fs::create_dir_all(&junk).unwrap();
    std::fs::write(junk.join("a.dll"), "not an assembly").unwrap();
    let (code, err) = run(&[junk.as_os_str(), "-o".as_ref(), many.as_os_str()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("a.dll"), "{err}");
    assert!(!many.exists(), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A new output is executable where its input is (a patched program stays runnable by its
/// path); an output that exists keeps its own mode.
#[cfg(unix)]
#[test]
fn a_new_output_keeps_its_inputs_execute_bits() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch("modes");
    let input = dir.join("program.exe");
    std::fs::copy("corpus/bin/features.exe", &input).unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let set = |p: &Path, m: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    };
    set(&input, 0o755);
    let out = dir.join("new.exe");
    let o = support::run(&mut rewrite(&input, &out, "prologue"));
    assert!(o.success(), "{}", o.describe());
    assert_eq!(mode(&out) & 0o100, 0o100, "{:o}", mode(&out));
    // Not executable, not made so; an existing output keeps its mode either way.
    set(&input, 0o644);
    let plain = dir.join("plain.exe");
    let o = support::run(&mut rewrite(&input, &plain, "prologue"));
    assert!(o.success(), "{}", o.describe());
    assert_eq!(mode(&plain) & 0o111, 0, "{:o}", mode(&plain));
    set(&out, 0o600);
    set(&input, 0o755);
    let o = support::run(&mut rewrite(&input, &out, "prologue"));
    assert!(o.success(), "{}", o.describe());
    assert_eq!(mode(&out), 0o600);
    let _ = std::fs::remove_dir_all(&dir);
}
