//! Shared by the integration tests: where mono's corpus is, and how a test that needs it says so.

use std::path::{Path, PathBuf};

/// Mono's 4.5 assemblies (`ILCHECK_MONO_DIR` overrides the place). When they are absent the
/// test says so loudly, and under `ILCHECK_REQUIRE_MONO=1` (set by `.ci/run`) it fails instead
/// of skipping.
pub fn mono_corpus(test: &str) -> Option<PathBuf> {
    let dir = PathBuf::from(
        std::env::var("ILCHECK_MONO_DIR").unwrap_or_else(|_| "/usr/lib/mono/4.5".into()),
    );
    if dir.join("mscorlib.dll").is_file() {
        return Some(dir);
    }
    let msg = format!(
        "{test}: mono corpus not found at {} — install it with `bash scripts/setup.sh` (apt-get install mono-devel)",
        dir.display()
    );
    if std::env::var("ILCHECK_REQUIRE_MONO").as_deref() == Ok("1") {
        panic!("{msg} (required: ILCHECK_REQUIRE_MONO=1)");
    }
    eprintln!("\n!!! SKIPPED {msg}\n");
    None
}

/// Whether a mono tool is on PATH; same loud-skip / required-fail rule as [`mono_corpus`].
pub fn mono_tool(test: &str, tool: &str) -> bool {
    let found = std::process::Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success());
    present(test, &format!("`{tool}`"), found)
}

/// Whether a part of mono's installation is `found`; same loud-skip / required-fail rule as
/// [`mono_corpus`]. `what` names it in the message.
pub fn present(test: &str, what: &str, found: bool) -> bool {
    if !found {
        let msg = format!("{test}: {what} not found — install it with `bash scripts/setup.sh`");
        if std::env::var("ILCHECK_REQUIRE_MONO").as_deref() == Ok("1") {
            panic!("{msg} (required: ILCHECK_REQUIRE_MONO=1)");
        }
        eprintln!("\n!!! SKIPPED {msg}\n");
    }
    found
}

/// The runtime oracles: mono and CoreCLR. Each that is absent is said loudly; under
/// `ILCHECK_REQUIRE_MONO=1` (set by `.ci/run`, which installs both) an absent one fails the test.
pub fn runtimes(test: &str) -> Vec<ilcheck::harness::Runtime> {
    use ilcheck::harness::{Runtime, RuntimeKind};
    let mut found = Vec::new();
    for kind in [RuntimeKind::Mono, RuntimeKind::CoreClr] {
        match Runtime::find(kind) {
            Ok(r) => found.push(r),
            Err(e) => {
                let msg = format!("{test}: runtime {} unavailable: {e}", kind.name());
                if std::env::var("ILCHECK_REQUIRE_MONO").as_deref() == Ok("1") {
                    panic!("{msg} (required: ILCHECK_REQUIRE_MONO=1)");
                }
                eprintln!("\n!!! SKIPPED {msg}\n");
            }
        }
    }
    found
}

/// Runs `command` to its end under a deadline (5 minutes; a hang fails the test instead of
/// stalling the run), output bounded; panics when it cannot be started or times out.
pub fn run(command: &mut std::process::Command) -> ilcheck::harness::Outcome {
    let what = format!("{command:?}");
    let o = ilcheck::harness::run_bounded(command, std::time::Duration::from_secs(300), 256 << 20)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(!o.timed_out, "{what}: {}", o.describe());
    o
}

/// Builds the probe assembly (`corpus/probe/probe.cs`, assembly `Acme.Probe`) into `dir` with
/// mcs; panics when mcs fails. Callers check `mono_tool(test, "mcs")` first.
pub fn build_probe(dir: &Path) -> PathBuf {
    let out = dir.join("Acme.Probe.dll");
    let o = run(std::process::Command::new("mcs")
        .arg("-target:library")
        .arg(format!("-out:{}", out.display()))
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/probe/probe.cs")));
    assert!(o.success(), "mcs: {}", String::from_utf8_lossy(&o.stderr));
    out
}

/// Whether mono's GAC holds a Mono.Cecil 0.11, which `corpus/rewriters/build.sh` builds on.
pub fn cecil_installed() -> bool {
    std::fs::read_dir("/usr/lib/mono/gac/Mono.Cecil")
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| {
            e.file_name().to_string_lossy().starts_with("0.11.")
                && e.path().join("Mono.Cecil.dll").is_file()
        })
}

/// Builds the sample rewriters (`corpus/rewriters/build.sh`) and the probe assembly into `dir`:
/// `(weaver.exe, Acme.Probe.dll)`.
pub fn build_weaver(dir: &Path) -> (PathBuf, PathBuf) {
    std::fs::create_dir_all(dir).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let o = run(std::process::Command::new("bash")
        .arg(root.join("corpus/rewriters/build.sh"))
        .arg(dir));
    assert!(
        o.success(),
        "build.sh: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    (dir.join("weaver.exe"), build_probe(dir))
}

/// A C# program that misbehaves as `define` says (`HANG`, `FAILFAST`, `EXIT0`, `EXIT3`,
/// `THROW`, `EXITCODE`, `NO_NEWLINE`, `STDIN`, `SETOUT`, `CWD`; anything else: it behaves) after
/// printing the result line `@ before`, built with mcs into `dir/DEFINE.exe`. Callers check
/// `mono_tool(test, "mcs")` first.
pub fn build_misbehaving(dir: &Path, define: &str) -> PathBuf {
    const SOURCE: &str = r#"
using System;
static class P {
    static void Main() {
        Console.WriteLine("@ before");
#if HANG
        while (true) { }
#elif FAILFAST
        Environment.FailFast("ilcheck test: the runtime is brought down");
#elif EXIT0
        Environment.Exit(0);
#elif EXIT3
        Environment.Exit(3);
#elif THROW
        throw new InvalidOperationException("out of Main");
#elif EXITCODE
        Environment.ExitCode = 5;
#elif NO_NEWLINE
        Console.Write("@ M0#0 ret 1 trace 0");
#elif STDIN
        Console.WriteLine("@ stdin " + (Console.ReadLine() == null ? "empty" : "not empty"));
#elif SETOUT
        Console.SetOut(new System.IO.StringWriter());
        Console.WriteLine("@ swallowed");
#elif CWD
        Console.WriteLine("@ cwd " + Environment.CurrentDirectory);
#endif
    }
}
"#;
    std::fs::create_dir_all(dir).unwrap();
    let src = dir.join(format!("{define}.cs"));
    std::fs::write(&src, SOURCE).unwrap();
    let out = dir.join(format!("{}.exe", define.to_lowercase()));
    let o = run(std::process::Command::new("mcs")
        .arg("-nologo")
        .arg(format!("-define:{define}"))
        .arg(format!("-out:{}", out.display()))
        .arg(&src));
    assert!(o.success(), "mcs: {}", String::from_utf8_lossy(&o.stderr));
    out
}

/// A report as JSON without what depends on the machine: keys naming seconds, and the thread
/// count (runs on any number of threads must otherwise agree).
pub fn comparable(report: &impl serde::Serialize) -> serde_json::Value {
    fn strip(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(map) => {
                map.retain(|k, _| !k.ends_with("seconds") && k != "threads");
                map.values_mut().for_each(strip);
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut v = serde_json::to_value(report).expect("a report serialises");
    strip(&mut v);
    v
}

/// The files of `dir` whose names end in `.ext`, sorted by path (an unreadable directory or
/// entry fails the test).
pub fn files_with_extension(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            e.unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
                .path()
        })
        .filter(|p| p.extension().is_some_and(|e| e == ext) && p.is_file())
        .collect();
    files.sort();
    files
}
