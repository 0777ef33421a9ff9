//! Probes by name: the project's programs rewritten by `wrap-finally` with entry and exit probes
//! of a probe assembly (`corpus/probe/probe.cs`, built with mcs) run under mono and CoreCLR with
//! their own output unchanged, and every method entered exits exactly once, also when it throws;
//! and `verify --reference` finds a referenced assembly by its name, not its file's.

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_ilcheck");
const ENTER: &str = "void [Acme.Probe]Acme.Probe::Enter(string, int32)";
const EXIT: &str = "void [Acme.Probe]Acme.Probe::Exit(string)";
const ENTER_ARGS: &str = "void [Acme.Probe]Acme.Probe::EnterArgs(string, object[])";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn rewrite(input: &Path, output: &Path, transform: &str, probe: &Path) -> (bool, String) {
    rewrite_with(input, output, transform, ENTER, probe)
}

fn rewrite_with(
    input: &Path,
    output: &Path,
    transform: &str,
    enter: &str,
    probe: &Path,
) -> (bool, String) {
    let o = support::run(
        Command::new(BIN)
            .arg("rewrite")
            .arg(input)
            .arg("-o")
            .arg(output)
            .args([
                "-t",
                transform,
                "--prologue-call",
                enter,
                "--epilogue-call",
                EXIT,
            ])
            .arg("--reference")
            .arg(probe),
    );
    (
        o.success(),
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr),
    )
}

#[test]
fn wrapped_programs_with_probes_run_and_balance() {
    let runtimes = support::runtimes("wrapped_programs_with_probes_run_and_balance");
    if runtimes.is_empty()
        || !support::mono_tool("wrapped_programs_with_probes_run_and_balance", "mcs")
    {
        return;
    }
    let dir = std::env::temp_dir().join(format!("ilcheck-probes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let probe = support::build_probe(&dir);
    let mut checked = 0;
    for name in ["control_flow.exe", "features.exe", "unsafe_numeric.exe"] {
        let original = root().join("corpus/bin").join(name);
        let patched = dir.join(name);
        // The entry probe takes the arguments, boxed.
        let (ok, text) = rewrite_with(&original, &patched, "wrap-finally", ENTER_ARGS, &probe);
        assert!(ok, "{name}: {text}");
        assert!(text.contains("0 skipped, 0 rejected"), "{name}: {text}");
        for runtime in &runtimes {
            let run = |exe: &Path| runtime.run(exe, &[], Duration::from_secs(60)).unwrap();
            let (before, after) = (run(&original), run(&patched));
            let on = runtime.describe();
            assert!(
                after.success(),
                "{name} under {on}: {}",
                String::from_utf8_lossy(&after.stderr)
            );
            assert_eq!(
                before.stdout, after.stdout,
                "{name} under {on}: output differs"
            );
            // Each method's enter and exit lines balance (the finally runs on every exit).
            let mut open: BTreeMap<String, i64> = BTreeMap::new();
            let mut lines = 0;
            for line in String::from_utf8_lossy(&after.stderr).lines() {
                if let Some(rest) = line.strip_prefix("enter ") {
                    // `enter NAME (ARGS)` from EnterArgs; a name has no space before its `(`.
                    let method = rest.split_once(" (").map_or(rest, |(m, _)| m);
                    *open.entry(method.to_string()).or_default() += 1;
                    lines += 1;
                } else if let Some(method) = line.strip_prefix("exit ") {
                    *open.entry(method.to_string()).or_default() -= 1;
                    lines += 1;
                }
            }
            assert!(lines > 20, "{name} under {on}: {lines} probe lines");
            if name == "control_flow.exe" {
                let err = String::from_utf8_lossy(&after.stderr);
                assert!(
                    err.contains("enter ControlFlow::Nested(int32) (3)"),
                    "{name} under {on}: the arguments"
                );
            }
            let unbalanced: Vec<_> = open.iter().filter(|(_, n)| **n != 0).collect();
            assert!(unbalanced.is_empty(), "{name} under {on}: {unbalanced:?}");
            checked += 1;
        }
    }
    assert_eq!(checked, 3 * runtimes.len());

    // The arguments can only be passed at entry.
    let o = support::run(
        Command::new(BIN)
            .arg("rewrite")
            .arg(root().join("corpus/bin/control_flow.exe"))
            .arg("-o")
            .arg(dir.join("never.exe"))
            .args([
                "-t",
                "epilogue",
                "--epilogue-call",
                ENTER_ARGS,
                "--reference",
            ])
            .arg(&probe),
    );
    assert_eq!(o.code, Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("at entry object[]"));
    // A probe that does not exist, does not parse, or cannot be filled: exit 2, nothing written.
    let out = dir.join("never.exe");
    let program = root().join("corpus/bin/control_flow.exe");
    for bad in [
        "void [Acme.Probe]Acme.Probe::Missing(string)",
        "void [Acme.Probe]Acme.Probe::Exit(object)",
        "int32 [Acme.Probe]Acme.Probe::NotVoid(string)",
        "void [Nowhere]Acme.Probe::Exit(string)",
        "void Acme.Probe::Exit(string)",
    ] {
        let o = support::run(
            Command::new(BIN)
                .arg("rewrite")
                .arg(&program)
                .arg("-o")
                .arg(&out)
                .args(["-t", "prologue", "--prologue-call", bad, "--reference"])
                .arg(&probe),
        );
        assert_eq!(o.code, Some(2), "{bad}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(err.lines().count(), 1, "{bad}: {err}");
        assert!(!out.exists(), "{bad}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// Copies `from` into `to` as hard links (a copy where linking fails), so a test can replace
/// one file of an installed runtime without touching the installation.
/// An exit probe taking `object` gets the value each method returns (boxed; null for `void`),
/// both from the epilogue before each `ret` (which keeps the value in a local) and from
/// `wrap-finally`'s handler; the programs' output is unchanged, every method entered exits
/// once, and nothing new is found against the original, at the unverifiable level too.
#[test]
fn the_exit_probe_gets_the_return_value() {
    let test = "the_exit_probe_gets_the_return_value";
    let runtimes = support::runtimes(test);
    if runtimes.is_empty() || !support::mono_tool(test, "mcs") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("ilcheck-probe-value-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let probe = support::build_probe(&dir);
    let original = root().join("corpus/bin/control_flow.exe");
    for transform in ["prologue-epilogue", "epilogue", "wrap-finally"] {
        let patched = dir.join(transform).join("control_flow.exe");
        std::fs::create_dir_all(patched.parent().unwrap()).unwrap();
        std::fs::copy(&probe, patched.with_file_name("Acme.Probe.dll")).unwrap();
        // `epilogue` calls no entry probe, and is refused one.
        let entry: &[&str] = if transform == "epilogue" {
            &[]
        } else {
            &["--prologue-call", ENTER]
        };
        let o = support::run(
            Command::new(BIN)
                .arg("rewrite")
                .arg(&original)
                .arg("-o")
                .arg(&patched)
                .args(["-t", transform])
                .args(entry)
                .args([
                    "--epilogue-call",
                    "void [Acme.Probe]Acme.Probe::ExitValue(string, object)",
                    "--reference",
                ])
                .arg(&probe),
        );
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(
            o.success(),
            "{transform}: {text}{}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(
            text.contains("0 skipped, 0 rejected"),
            "{transform}: {text}"
        );
        let v = support::run(
            Command::new(BIN)
                .args(["verify", "--level", "unverifiable", "--baseline"])
                .arg(&original)
                .arg("--")
                .arg(&patched),
        );
        assert_eq!(
            v.code,
            Some(0),
            "{transform}: {}",
            String::from_utf8_lossy(&v.stdout)
        );
        for runtime in &runtimes {
            let on = runtime.describe();
            let run = |exe: &Path| runtime.run(exe, &[], Duration::from_secs(60)).unwrap();
            let (before, after) = (run(&original), run(&patched));
            let err = String::from_utf8_lossy(&after.stderr);
            assert!(after.success(), "{transform} under {on}: {err}");
            assert_eq!(before.stdout, after.stdout, "{transform} under {on}");
            let mut open: BTreeMap<String, i64> = BTreeMap::new();
            for line in err.lines() {
                if let Some(rest) = line.strip_prefix("enter ") {
                    let method = rest.rsplit_once(' ').map_or(rest, |(m, _)| m);
                    *open.entry(method.to_string()).or_default() += 1;
                } else if let Some(rest) = line.strip_prefix("exit ") {
                    let (method, _) = rest.split_once(" = ").expect("exit NAME = VALUE");
                    *open.entry(method.to_string()).or_default() -= 1;
                }
            }
            // The finally runs on every exit; an epilogue before each `ret` only on returns, so
            // `Rethrow`, which leaves by throwing, exits fewer times than it is entered.
            let unbalanced: Vec<_> = open
                .iter()
                .filter(|(m, n)| {
                    **n != 0
                        && !(transform != "wrap-finally"
                            && m.as_str() == "ControlFlow::Rethrow(int32)"
                            && **n > 0)
                })
                .collect();
            // `epilogue` alone calls no entry probe.
            if transform != "epilogue" {
                assert!(
                    unbalanced.is_empty(),
                    "{transform} under {on}: {unbalanced:?}"
                );
            }
            for line in [
                "exit ControlFlow::Recursion(int32) = 6765",
                "exit ControlFlow::Ackermann(int32,int32) = 9",
                "exit ControlFlow::Nested(int32) = 11301",
                "exit ControlFlow::Out(string) = null",
            ] {
                assert!(
                    err.lines().any(|l| l == line),
                    "{transform} under {on}: no line {line:?}"
                );
            }
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

fn link_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        if entry.file_type().unwrap().is_dir() {
            link_tree(&src, &dst);
        } else if std::fs::hard_link(&src, &dst).is_err() {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

/// The .NET Core 3.1 framework's System.Linq (a ReadyToRun image) rewritten with probes by
/// name: made IL-only, it runs the patched IL under CoreCLR, and the probes fire.
#[test]
fn a_ready_to_run_framework_assembly_runs_its_probes_under_coreclr() {
    let test = "a_ready_to_run_framework_assembly_runs_its_probes_under_coreclr";
    let runtimes = support::runtimes(test);
    let Some(coreclr) = runtimes
        .iter()
        .find(|r| r.kind() == ilcheck::harness::RuntimeKind::CoreClr)
    else {
        return;
    };
    if !support::mono_tool(test, "mcs") {
        return;
    }
    let framework = ilcheck::harness::runtime::coreclr_framework_dir().unwrap();
    let host = framework.ancestors().nth(3).unwrap().to_path_buf();
    let dir = std::env::temp_dir().join(format!("ilcheck-r2r-probes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let probe = support::build_probe(&dir);
    // A private copy of the runtime whose System.Linq is the patched one.
    let runtime_copy = dir.join("dotnet");
    link_tree(&host, &runtime_copy);
    let linq = runtime_copy
        .join(framework.strip_prefix(&host).unwrap())
        .join("System.Linq.dll");
    std::fs::remove_file(&linq).unwrap();
    let (ok, text) = rewrite(
        &framework.join("System.Linq.dll"),
        &linq,
        "prologue-epilogue",
        &probe,
    );
    assert!(ok, "{text}");
    assert!(text.contains("the output is IL-only"), "{text}");
    // A program that uses LINQ, with the probe beside it.
    let app = dir.join("app");
    std::fs::create_dir_all(&app).unwrap();
    std::fs::copy(&probe, app.join("Acme.Probe.dll")).unwrap();
    let source = dir.join("linq.cs");
    std::fs::write(
        &source,
        "using System.Linq; class P { static void Main() { System.Console.WriteLine(string.Join(\",\", new[] { 3, 1, 2 }.OrderBy(x => x))); } }",
    )
    .unwrap();
    let exe = app.join("linq.exe");
    let o = support::run(
        Command::new("mcs")
            .arg(format!("-out:{}", exe.display()))
            .arg("-r:System.Core.dll")
            .arg(&source),
    );
    assert!(o.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let cmd = coreclr.command(&exe, &[]);
    // The same command with the copy's host.
    let mut copy = Command::new(runtime_copy.join("dotnet"));
    copy.args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        if let Some(v) = v {
            copy.env(k, v);
        }
    }
    let out = support::run(&mut copy);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.success(), "{}: {err}", out.describe());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "1,2,3\n");
    let enters = err
        .lines()
        .filter(|l| l.starts_with("enter System.Linq."))
        .count();
    let exits = err
        .lines()
        .filter(|l| l.starts_with("exit System.Linq."))
        .count();
    assert!(
        enters > 10 && enters == exits,
        "{enters} enters, {exits} exits: {err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// `verify --reference PATH` finds the assembly at PATH by its assembly name, whatever the file
/// is called: a program whose class derives from a library's, the library elsewhere under
/// another name, is checked in part without it (the base chain is unknown) and in full with
/// it; a `--reference` that is no .NET assembly is an error naming it, exit 2.
#[test]
fn verify_finds_a_reference_by_its_assembly_name() {
    let test = "verify_finds_a_reference_by_its_assembly_name";
    if !support::mono_tool(test, "mcs") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("ilcheck-named-ref-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for d in ["lib", "out", "elsewhere"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    let mcs = |args: &[&str]| {
        let o = support::run(Command::new("mcs").current_dir(&dir).args(args));
        assert!(o.success(), "mcs: {}", String::from_utf8_lossy(&o.stderr));
    };
    std::fs::write(dir.join("L.cs"), "namespace Acme { public class Base { } }").unwrap();
    std::fs::write(
        dir.join("P.cs"),
        "class D : Acme.Base { } static class P { \
         static Acme.Base F() { return new D(); } static void Main() { F(); } }",
    )
    .unwrap();
    mcs(&["-target:library", "-out:lib/Acme.Lib.dll", "L.cs"]);
    mcs(&["-out:out/P.exe", "-r:lib/Acme.Lib.dll", "P.cs"]);
    let renamed = dir.join("elsewhere/renamed.dll");
    std::fs::rename(dir.join("lib/Acme.Lib.dll"), &renamed).unwrap();
    let program = dir.join("out/P.exe");
    let in_part = |extra: &[&std::ffi::OsStr]| {
        let o = support::run(
            Command::new(BIN)
                .arg("verify")
                .arg(&program)
                .args(["--json", "--level", "unverifiable"])
                .args(extra),
        );
        assert!(o.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        json["types"]["methods_in_part"].as_u64().unwrap()
    };
    assert!(in_part(&[]) > 0, "D's base is unknown without the library");
    assert_eq!(
        in_part(&["--reference".as_ref(), renamed.as_os_str()]),
        0,
        "the library found by its assembly name"
    );
    let not_an_assembly = dir.join("elsewhere/notes.dll");
    std::fs::write(&not_an_assembly, b"not a PE file").unwrap();
    // A reference that is not an assembly, and a directory of references that is not there,
    // are said, not passed over.
    for (option, path, says) in [
        (
            "--reference",
            not_an_assembly,
            "notes.dll: not a readable .NET assembly",
        ),
        (
            "--reference-dir",
            dir.join("no-such-dir"),
            "no-such-dir: not a directory",
        ),
    ] {
        let o = support::run(
            Command::new(BIN)
                .arg("verify")
                .arg(&program)
                .arg(option)
                .arg(&path),
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.code, Some(2), "{option}: {err}");
        assert!(err.contains(says), "{option}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A probe option the transform does not use is a usage error (exit 2) naming the transforms
/// that take it, nothing written: before, `identity` or `widen` with a probe wrote an output
/// that gained the probe's references and nothing that called it.
#[test]
fn probe_options_a_transform_does_not_use_are_refused() {
    let test = "probe_options_a_transform_does_not_use_are_refused";
    if !support::mono_tool(test, "mcs") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("ilcheck-probe-unused-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let probe = support::build_probe(&dir);
    let out = dir.join("out.exe");
    let run = |args: &[&str]| {
        support::run(
            Command::new(BIN)
                .arg("rewrite")
                .arg(root().join("corpus/bin/control_flow.exe"))
                .arg("-o")
                .arg(&out)
                .args(args)
                .arg("--reference")
                .arg(&probe),
        )
    };
    for (transform, option, probe_text, takers) in [
        (
            "identity",
            "--prologue-call",
            ENTER,
            "prologue, prologue-epilogue, wrap-finally, wrap-catch",
        ),
        (
            "widen",
            "--prologue-call",
            ENTER,
            "prologue, prologue-epilogue, wrap-finally, wrap-catch",
        ),
        (
            "widen",
            "--epilogue-call",
            EXIT,
            "epilogue, prologue-epilogue, wrap-finally",
        ),
        (
            "epilogue",
            "--prologue-call",
            ENTER,
            "prologue, prologue-epilogue, wrap-finally, wrap-catch",
        ),
        (
            "prologue",
            "--epilogue-call",
            EXIT,
            "epilogue, prologue-epilogue, wrap-finally",
        ),
        (
            "wrap-catch",
            "--epilogue-call",
            EXIT,
            "epilogue, prologue-epilogue, wrap-finally",
        ),
    ] {
        let o = run(&["-t", transform, option, probe_text]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.code, Some(2), "{transform} {option}: {err}");
        assert!(
            err.contains(&format!("{option} is not used by -t {transform}"))
                && err.contains(takers),
            "{transform} {option}: {err}"
        );
        assert!(!out.exists(), "{transform} {option}");
    }
    // --reference alone looks nothing up.
    let o = run(&["-t", "identity"]);
    assert_eq!(o.code, Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--reference"));
    assert!(!out.exists());
    // Where the transform calls it, the probe is taken.
    let o = run(&["-t", "wrap-catch", "--prologue-call", ENTER]);
    assert!(o.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("24 rewritten"));
    std::fs::remove_dir_all(&dir).ok();
}

/// A method whose `ret` completes a `tail.` call, and one that leaves by `jmp`: the exit probe
/// is not called there, so the local planned for their return value is not added either.
const TAIL_AND_JMP_IL: &str = r#"
.assembly extern mscorlib { .publickeytoken = (B7 7A 5C 56 19 34 E0 89) .ver 4:0:0:0 }
.assembly tc { .ver 1:0:0:0 }
.module tc.exe
.class public auto ansi C extends [mscorlib]System.Object
{
  .method public static int32 Callee(int32 x) cil managed { ldarg.0 ldc.i4.1 add ret }
  .method public static int32 Tail(int32 x) cil managed { ldarg.0 tail. call int32 C::Callee(int32) ret }
  .method public static int32 Jmp(int32 x) cil managed { jmp int32 C::Callee(int32) }
  .method public static int32 Loop0(int32 n) cil managed {
    .locals init (int32 s)
  HEAD: ldarg.0 brfalse.s DONE
    ldloc.0 ldarg.0 add stloc.0 ldarg.0 ldc.i4.1 sub starg.s n br.s HEAD
  DONE: ldloc.0 ret }
  .method public static void Main() cil managed { .entrypoint
    ldc.i4.5 call int32 C::Tail(int32) call void [mscorlib]System.Console::WriteLine(int32)
    ldc.i4.5 call int32 C::Jmp(int32) call void [mscorlib]System.Console::WriteLine(int32)
    ldc.i4.5 call int32 C::Loop0(int32) call void [mscorlib]System.Console::WriteLine(int32)
    ret }
}
"#;

/// Assembles `il` into `dir/NAME` with ilasm.
fn assemble(dir: &Path, name: &str, il: &str) -> PathBuf {
    let source = dir.join(format!("{name}.il"));
    std::fs::write(&source, il).unwrap();
    let out = dir.join(name);
    let kind = if name.ends_with(".dll") {
        "/dll"
    } else {
        "/exe"
    };
    let o = support::run(
        Command::new("ilasm")
            .args([kind, "/quiet"])
            .arg(format!("/output:{}", out.display()))
            .arg(&source),
    );
    assert!(o.success(), "ilasm: {}", o.describe());
    out
}

/// `locals_added` and `init_locals_set` count the methods written with the new local: before,
/// `Tail` and `Jmp` (no epilogue, so no local) were counted too, 4 methods (3 their first)
/// where 2 (1 its first) got one.
#[test]
fn only_methods_written_with_a_new_local_are_counted() {
    let test = "only_methods_written_with_a_new_local_are_counted";
    if !support::mono_tool(test, "mcs") || !support::mono_tool(test, "ilasm") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("ilcheck-probe-locals-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let probe = support::build_probe(&dir);
    let input = assemble(&dir, "tc.exe", TAIL_AND_JMP_IL);
    let out = dir.join("out.exe");
    let o = support::run(
        Command::new(BIN)
            .arg("rewrite")
            .arg(&input)
            .arg("-o")
            .arg(&out)
            .args([
                "-t",
                "prologue-epilogue",
                "--prologue-call",
                ENTER_ARGS,
                "--epilogue-call",
                "void [Acme.Probe]Acme.Probe::ExitValue(string, object)",
                "--json",
                "--reference",
            ])
            .arg(&probe),
    );
    assert!(o.success(), "{}", o.describe());
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // Callee (no locals before: its first, InitLocals set) and Loop0 (a second local).
    assert_eq!(report["locals_added"], 2, "{report}");
    assert_eq!(report["init_locals_set"], 1, "{report}");
    // What the counts say is what the output holds: two methods with a local signature.
    let image = ilcheck::image::Image::open(&out).unwrap();
    let with_locals: Vec<String> = image
        .methods()
        .filter(|m| m.decoded_body().is_ok_and(|b| b.local_sig() != 0))
        .map(|m| m.full_name().unwrap())
        .collect();
    assert_eq!(
        with_locals,
        ["C::Callee(int32)", "C::Loop0(int32)"],
        "{report}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// Methods a raw probe token may name, and many it may not.
const RAW_TOKENS_IL: &str = r#"
.assembly extern mscorlib { .publickeytoken = (B7 7A 5C 56 19 34 E0 89) .ver 4:0:0:0 }
.assembly rawtok { .ver 1:0:0:0 }
.module rawtok.exe
.class public auto ansi C extends [mscorlib]System.Object
{
  .field public static int32 F
  .method public static void Probe() cil managed { ret }
  .method public static void Takes(int32 x) cil managed { ret }
  .method public static int32 Returns() cil managed { ldc.i4.0 ret }
  .method public static void Gen<T>() cil managed { ret }
  .method public instance void Inst() cil managed { ret }
  .method public static int32 Work(int32 x) cil managed { ldarg.0 ldc.i4.1 add ret }
  .method public static void Main() cil managed { .entrypoint
    call void C::Gen<int32>()
    call void [mscorlib]System.GC::Collect()
    ldsfld int32 C::F call int32 C::Work(int32) call void [mscorlib]System.Console::WriteLine(int32)
    ret }
}
"#;

/// A raw `--prologue-call`/`--epilogue-call` token is checked against the assembly before
/// anything is written: one that is not a MethodDef or MemberRef row of a static,
/// parameterless, non-generic void method is exit 2 naming it, what it is and what is
/// required, with nothing written (before, every method was rejected — StackUnderflow,
/// TokenResolve, ExpectedMethodToken — exit 1, and the output written as an unchanged copy).
/// A raw token with more than one assembly to rewrite is refused: it names a row of one.
#[test]
fn raw_probe_tokens_are_checked_before_anything_is_written() {
    let test = "raw_probe_tokens_are_checked_before_anything_is_written";
    if !support::mono_tool(test, "ilasm") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("ilcheck-raw-tokens-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let input = assemble(&dir, "rawtok.exe", RAW_TOKENS_IL);
    let original = std::fs::read(&input).unwrap();
    let image = ilcheck::image::Image::open(&input).unwrap();
    let method = |name: &str| {
        let m = image.methods().find(|m| m.name().unwrap() == name).unwrap();
        format!("{:#010x}", m.token().0)
    };
    let member_ref = |name: &str| {
        let rows = image.tables_header().rows(ilcheck::image::Table::MemberRef);
        let rid = (1..=rows)
            .find(|&rid| {
                let row = image.tables().member_ref(rid).unwrap();
                image.strings().get(row.name).unwrap() == name
            })
            .unwrap();
        format!("{:#010x}", 0x0a00_0000 | rid)
    };
    let out = dir.join("out.exe");
    let rewrite = |inputs: &[&Path], out: &Path, transform: &str, calls: &[&str]| {
        support::run(
            Command::new(BIN)
                .arg("rewrite")
                .args(inputs)
                .arg("-o")
                .arg(out)
                .args(["-t", transform])
                .args(calls),
        )
    };
    for (token, says) in [
        (method("Takes"), "takes 1 parameter"),
        (member_ref("WriteLine"), "takes 1 parameter"),
        (method("Returns"), "returns a value"),
        (method("Gen"), "is generic"),
        (method("Inst"), "is an instance method"),
        ("0x2b000001".to_string(), "is a MethodSpec token"),
        ("0x04000001".to_string(), "is a Field token, not a method"),
        (
            "0x06009999".to_string(),
            "no such row (the assembly has 7 MethodDef rows)",
        ),
        ("0x70000001".to_string(), "user-string"),
    ] {
        for (transform, option) in [
            ("prologue", "--prologue-call"),
            ("epilogue", "--epilogue-call"),
        ] {
            let o = rewrite(&[&input], &out, transform, &[option, &token]);
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.code, Some(2), "{option} {token}: {}", o.describe());
            assert!(
                err.contains(&format!("{option} {token}"))
                    && err.contains(says)
                    && err.contains("a static method returning void with no parameters")
                    && err.contains("nothing written"),
                "{option} {token}: {err}"
            );
            assert!(!out.exists(), "{option} {token}");
        }
    }
    // A MethodDef and a MemberRef of static, parameterless void methods are taken.
    let o = rewrite(
        &[&input],
        &out,
        "prologue-epilogue",
        &[
            "--prologue-call",
            &method("Probe"),
            "--epilogue-call",
            &member_ref("Collect"),
        ],
    );
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.success(), "{}", o.describe());
    assert!(text.contains("0 rejected by the verifier"), "{text}");
    assert!(std::fs::read(&out).unwrap() != original);
    // The probe itself is left alone: instrumented, its entry call would call itself.
    let o = rewrite(
        &[&input],
        &out,
        "prologue-epilogue",
        &[
            "--prologue-call",
            &method("Probe"),
            "--epilogue-call",
            &member_ref("Collect"),
            "--json",
        ],
    );
    assert!(o.success(), "{}", o.describe());
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["skipped"]["ProbeItself"], 1, "{report}");
    if support::mono_tool(test, "mono") {
        let run = support::run(Command::new("mono").arg(&out));
        assert!(run.success(), "the patched program: {}", run.describe());
        assert_eq!(String::from_utf8_lossy(&run.stdout).trim(), "1");
    }
    // More than one assembly to rewrite: refused, whatever the token, nothing created.
    let copy = dir.join("copy");
    std::fs::create_dir_all(&copy).unwrap();
    std::fs::copy(&input, copy.join("other.exe")).unwrap();
    let many = dir.join("many");
    let probe = method("Probe");
    let o = rewrite(
        &[&input, &copy.join("other.exe")],
        &many,
        "prologue",
        &["--prologue-call", &probe],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.code, Some(2), "{}", o.describe());
    assert!(
        err.contains(&format!(
            "--prologue-call {probe}: a raw token names a method of one assembly"
        )) && err.contains("this run rewrites 2 assemblies; name the probe"),
        "{err}"
    );
    assert!(!many.exists());
    // One assembly found in a directory: checked against it, as a single file is.
    let o = rewrite(
        &[&copy],
        &many,
        "prologue",
        &["--prologue-call", "0x04000001"],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.code, Some(2), "{}", o.describe());
    assert!(err.contains("is a Field token"), "{err}");
    assert!(!many.exists());
    let o = rewrite(&[&copy], &many, "prologue", &["--prologue-call", &probe]);
    assert!(o.success(), "{}", o.describe());
    assert!(many.join("other.exe").is_file());
    assert_eq!(std::fs::read(&input).unwrap(), original);
    std::fs::remove_dir_all(&dir).ok();
}
