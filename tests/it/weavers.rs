//! The sample rewriters of `corpus/rewriters`: the Mono.Cecil probe weaver keeps the project's
//! oracle programs, programs of `ilcheck generate` and the trigger methods of
//! `corpus/il/weaver_triggers.il` running unchanged under mono and CoreCLR with no new verifier
//! finding, and each of its seeded bugs shows on its trigger as the verifier finding, and the
//! runtime behaviour, written down for it here.

use crate::support;

use ilcheck::harness::{Outcome, Runtime, RuntimeKind};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_ilcheck");
const RUN_LIMIT: Duration = Duration::from_secs(120);

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// What every test here works from, built once per test process: the weaver, the trigger
/// runner, the probe assembly and the trigger assembly, each from its source.
struct Kit {
    dir: PathBuf,
    weaver: PathBuf,
    runner: PathBuf,
    probe: PathBuf,
    /// `weaver_triggers.dll` as ilasm assembles it, in a directory with the runner and probe.
    triggers: PathBuf,
}

/// Whether the tools the kit needs are present: a loud skip when one is not, a failure under
/// `ILCHECK_REQUIRE_MONO=1`.
fn tools(test: &str) -> bool {
    ["mono", "mcs", "ilasm"]
        .iter()
        .all(|tool| support::mono_tool(test, tool))
        && support::present(
            test,
            "Mono.Cecil 0.11 in mono's GAC",
            support::cecil_installed(),
        )
}

fn kit() -> &'static Kit {
    static KIT: OnceLock<Kit> = OnceLock::new();
    KIT.get_or_init(|| {
        // One directory per test process (target/tmp/weavers-PID); those of processes that
        // have ended go.
        let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        for entry in std::fs::read_dir(&tmp).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(pid) = name.strip_prefix("weavers-")
                && pid.parse::<u32>().is_ok()
                && !Path::new("/proc").join(pid).exists()
            {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
        let dir = tmp.join(format!("weavers-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let bin = dir.join("rewriters");
        std::fs::create_dir_all(&bin).unwrap();
        let o = support::run(
            Command::new("bash")
                .arg(root().join("corpus/rewriters/build.sh"))
                .arg(&bin),
        );
        assert!(
            o.success(),
            "build.sh: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let probe = support::build_probe(&bin);
        let original = dir.join("original");
        std::fs::create_dir_all(&original).unwrap();
        let triggers = original.join("weaver_triggers.dll");
        let o = support::run(
            Command::new("ilasm")
                .arg("/dll")
                .arg("/quiet")
                .arg(format!("/output:{}", triggers.display()))
                .arg(root().join("corpus/il/weaver_triggers.il")),
        );
        assert!(o.success(), "ilasm: {}", String::from_utf8_lossy(&o.stdout));
        let kit = Kit {
            weaver: bin.join("weaver.exe"),
            runner: bin.join("run_triggers.exe"),
            probe,
            triggers,
            dir,
        };
        kit.install(&original);
        kit
    })
}

impl Kit {
    /// A fresh directory for one test's outputs.
    fn work(&self, name: &str) -> PathBuf {
        let dir = self.dir.join(name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Puts the probe assembly and the trigger runner beside the assemblies in `dir`.
    fn install(&self, dir: &Path) {
        for file in [&self.probe, &self.runner] {
            std::fs::copy(file, dir.join(file.file_name().unwrap())).unwrap();
        }
    }

    /// `mono weaver.exe [--bug BUG] INPUT DIR/<same name>`; asserts it succeeds and leaves its
    /// input as it was.
    fn weave(&self, bug: Option<&str>, input: &Path, dir: &Path) -> PathBuf {
        let output = dir.join(input.file_name().unwrap());
        let before = std::fs::read(input).unwrap();
        let mut cmd = Command::new("mono");
        cmd.env("MONO_ENV_OPTIONS", "").arg(&self.weaver);
        if let Some(bug) = bug {
            cmd.args(["--bug", bug]);
        }
        let o = support::run(cmd.arg(input).arg(&output));
        assert!(
            o.success(),
            "weaver {bug:?} {}: {}: {}",
            input.display(),
            o.describe(),
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("methods woven"),
            "{}",
            String::from_utf8_lossy(&o.stdout)
        );
        assert_eq!(
            std::fs::read(input).unwrap(),
            before,
            "the weaver changed its input"
        );
        self.install(dir);
        output
    }

    /// Runs the trigger runner over `assembly` (which lies beside a runner and probe): every
    /// trigger, or only `method`.
    fn run_triggers(&self, runtime: &Runtime, assembly: &Path, method: Option<&str>) -> Outcome {
        let runner = assembly.with_file_name("run_triggers.exe");
        let mut args = vec![assembly.to_str().unwrap()];
        args.extend(method);
        run_in(runtime, &runner, &args, assembly.parent().unwrap())
    }
}

/// Runs `exe` under `runtime` in the directory `cwd`, under a deadline. A crashing mono writes
/// mono_crash.*.json into its working directory, so that is one of the test's own; and it asks
/// gdb for a backtrace, which is skipped.
fn run_in(runtime: &Runtime, exe: &Path, args: &[&str], cwd: &Path) -> Outcome {
    let mut cmd = runtime.command(exe, args);
    cmd.current_dir(cwd).env("MONO_DEBUG", "no-gdb-backtrace");
    ilcheck::harness::run_bounded(&mut cmd, RUN_LIMIT, 16 << 20).unwrap()
}

/// `ilcheck verify --json PATCHED --baseline ORIGINAL`: the findings new in the patched
/// assembly, as (method, code).
fn new_findings(original: &Path, patched: &Path) -> Vec<(String, String)> {
    let o = support::run(
        Command::new(BIN)
            .args(["verify", "--json", "--max", "100000"])
            .arg(patched)
            .arg("--baseline")
            .arg(original),
    );
    let v: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("verify --json: {e}: {}", String::from_utf8_lossy(&o.stderr)));
    assert_eq!(v["baseline_assemblies"], 1, "{v}");
    assert_eq!(v["baseline_missing"].as_array().map(Vec::len), Some(0));
    let findings: Vec<(String, String)> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let s = |k: &str| f[k].as_str().unwrap().to_string();
            (s("method"), s("code"))
        })
        .collect();
    assert_eq!(v["findings_total"], findings.len(), "{v}");
    let expected_code = if findings.is_empty() { 0 } else { 1 };
    assert_eq!(o.code, Some(expected_code), "{}", o.describe());
    findings
}

/// Entry and exit probe lines per method (`enter NAME TOKEN`, `exit NAME`): how many lines,
/// and the methods whose entries and exits do not balance.
fn probe_balance(stderr: &[u8]) -> (usize, Vec<(String, i64)>) {
    let mut open: BTreeMap<String, i64> = BTreeMap::new();
    let mut lines = 0;
    for line in String::from_utf8_lossy(stderr).lines() {
        if let Some(rest) = line.strip_prefix("enter ") {
            let name = rest.rsplit_once(' ').map_or(rest, |(name, _token)| name);
            *open.entry(name.to_string()).or_default() += 1;
            lines += 1;
        } else if let Some(name) = line.strip_prefix("exit ") {
            *open.entry(name.to_string()).or_default() -= 1;
            lines += 1;
        }
    }
    (lines, open.into_iter().filter(|(_, n)| *n != 0).collect())
}

#[test]
fn woven_oracle_programs_run_unchanged_with_no_new_finding() {
    let test = "woven_oracle_programs_run_unchanged_with_no_new_finding";
    if !tools(test) {
        return;
    }
    let runtimes = support::runtimes(test);
    let kit = kit();
    let dir = kit.work("oracle");
    let mut runs = 0;
    for name in ["control_flow", "features", "unsafe_numeric"] {
        let expected = std::fs::read(root().join(format!("corpus/cs/{name}.expected"))).unwrap();
        for variant in ["", ".debug"] {
            let file = format!("{name}{variant}.exe");
            let original = root().join("corpus/bin").join(&file);
            let woven = kit.weave(None, &original, &dir);
            assert_eq!(new_findings(&original, &woven), vec![], "{file}");
            for runtime in &runtimes {
                let on = runtime.describe();
                let before = run_in(runtime, &original, &[], &dir);
                let after = run_in(runtime, &woven, &[], &dir);
                assert!(before.success(), "{file} under {on}: {}", before.describe());
                assert!(
                    after.success(),
                    "woven {file} under {on}: {}: {}",
                    after.describe(),
                    String::from_utf8_lossy(&after.stderr)
                );
                assert_eq!(
                    String::from_utf8_lossy(&after.stdout),
                    String::from_utf8_lossy(&before.stdout),
                    "woven {file} under {on}: output differs"
                );
                // Mono prints what the committed expectation says; CoreCLR formats some
                // floating-point values differently, so there the original is the reference.
                if runtime.kind() == RuntimeKind::Mono {
                    assert_eq!(
                        String::from_utf8_lossy(&after.stdout),
                        String::from_utf8_lossy(&expected),
                        "woven {file} under {on}: output differs from cs/{name}.expected"
                    );
                }
                let (lines, unbalanced) = probe_balance(&after.stderr);
                assert!(lines > 20, "woven {file} under {on}: {lines} probe lines");
                assert!(
                    unbalanced.is_empty(),
                    "woven {file} under {on}: {unbalanced:?}"
                );
                runs += 1;
            }
        }
    }
    assert_eq!(runs, 6 * runtimes.len());
    std::fs::remove_dir_all(&dir).ok();
}

/// Programs of `ilcheck generate` (random valid methods with their runners): woven, they verify
/// with no new finding and print the same result lines as before under both runtimes.
#[test]
fn woven_generated_programs_print_the_same_lines() {
    let test = "woven_generated_programs_print_the_same_lines";
    if !tools(test) {
        return;
    }
    let runtimes = support::runtimes(test);
    let kit = kit();
    let dir = kit.work("generated");
    let (originals, woven_dir) = (dir.join("original"), dir.join("woven"));
    std::fs::create_dir_all(&woven_dir).unwrap();
    let o = support::run(
        Command::new(BIN)
            .args(["generate", "--count", "4", "--seed", "7", "-o"])
            .arg(&originals),
    );
    assert!(
        o.success(),
        "generate: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let programs = support::files_with_extension(&originals, "exe");
    assert_eq!(programs.len(), 4, "{programs:?}");
    for original in &programs {
        let name = original.file_name().unwrap().to_string_lossy().into_owned();
        let woven = kit.weave(None, original, &woven_dir);
        assert_eq!(new_findings(original, &woven), vec![], "{name}");
        for runtime in &runtimes {
            let on = runtime.describe();
            let before = run_in(runtime, original, &[], &dir);
            let after = run_in(runtime, &woven, &[], &dir);
            assert!(before.success(), "{name} under {on}: {}", before.describe());
            assert!(!before.stdout.is_empty(), "{name} under {on}: no output");
            assert!(
                after.success(),
                "woven {name} under {on}: {}: {}",
                after.describe(),
                String::from_utf8_lossy(&after.stderr)
            );
            assert_eq!(
                String::from_utf8_lossy(&after.stdout),
                String::from_utf8_lossy(&before.stdout),
                "woven {name} under {on}"
            );
            let (lines, unbalanced) = probe_balance(&after.stderr);
            assert!(
                lines > 0 && unbalanced.is_empty(),
                "woven {name} under {on}: {unbalanced:?}"
            );
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// The methods of `weaver_triggers.il` each bug is shown on.
const TRIGGERS: [&str; 9] = [
    "ShortBranchOverReturns",
    "LoopAtEntry",
    "TryAtEntry",
    "TwoReturns",
    "MaxStackOne",
    "TailCaller",
    "TailFirst",
    "CatchAtEnd",
    "StructResult",
];

#[test]
fn woven_triggers_run_unchanged_with_no_new_finding() {
    let test = "woven_triggers_run_unchanged_with_no_new_finding";
    if !tools(test) {
        return;
    }
    let runtimes = support::runtimes(test);
    let kit = kit();
    let dir = kit.work("correct");
    let woven = kit.weave(None, &kit.triggers, &dir);
    assert_eq!(new_findings(&kit.triggers, &woven), vec![]);
    for runtime in &runtimes {
        let on = runtime.describe();
        let before = kit.run_triggers(runtime, &kit.triggers, None);
        let after = kit.run_triggers(runtime, &woven, None);
        assert!(before.success(), "under {on}: {}", before.describe());
        assert!(after.success(), "woven, under {on}: {}", after.describe());
        let text = String::from_utf8_lossy(&before.stdout);
        for trigger in TRIGGERS {
            assert!(
                text.contains(&format!("Weaver.Triggers::{trigger}(")),
                "{trigger} under {on}: {text}"
            );
        }
        assert!(!text.contains("InvalidProgram"), "under {on}: {text}");
        assert_eq!(
            String::from_utf8_lossy(&after.stdout),
            text,
            "woven, under {on}: output differs"
        );
        // Every trigger went through its probes, and each entry has its exit.
        let (lines, unbalanced) = probe_balance(&after.stderr);
        let err = String::from_utf8_lossy(&after.stderr);
        for trigger in TRIGGERS {
            assert!(
                err.contains(&format!("enter Weaver.Triggers::{trigger} ")),
                "{trigger} under {on}: no entry probe"
            );
        }
        assert!(
            lines > 0 && unbalanced.is_empty(),
            "under {on}: {unbalanced:?}"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// What a runtime does when a trigger a bug broke is called.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Behaviour {
    /// Every call throws InvalidProgramException (the method does not compile).
    Rejects,
    /// The runtime dies (mono: a failed assertion or a SIGSEGV in its JIT, then SIGABRT).
    Crashes,
    /// Every call returns what the original returned: only the verifier sees the bug.
    Runs,
    /// Every call returns, some with another value than the original's: the runtime runs the
    /// broken code and the wrong results go unnoticed but for the verifier.
    Corrupts,
}

/// One seeded bug: the trigger it shows on, the verifier's code for it there, and what mono
/// and CoreCLR do.
struct Case {
    bug: &'static str,
    trigger: &'static str,
    code: &'static str,
    /// The method the finding is on, when not the trigger itself (a method it calls).
    found_in: Option<&'static str>,
    mono: Behaviour,
    coreclr: Behaviour,
}

const CASES: [Case; 12] = [
    Case {
        bug: "short-branches",
        trigger: "ShortBranchOverReturns",
        code: "BadBranch",
        found_in: None,
        mono: Behaviour::Rejects,
        coreclr: Behaviour::Rejects,
    },
    Case {
        bug: "retarget-to-probe",
        trigger: "LoopAtEntry",
        code: "BranchOutOfTry",
        found_in: None,
        mono: Behaviour::Runs,
        coreclr: Behaviour::Rejects,
    },
    Case {
        bug: "retarget-to-probe",
        trigger: "TryAtEntry",
        code: "EHOverlap",
        found_in: None,
        mono: Behaviour::Runs,
        coreclr: Behaviour::Rejects,
    },
    Case {
        bug: "ret-in-try",
        trigger: "TwoReturns",
        code: "ReturnFromTry",
        found_in: None,
        mono: Behaviour::Runs,
        coreclr: Behaviour::Rejects,
    },
    Case {
        bug: "handler-end-off-by-one",
        trigger: "TwoReturns",
        code: "Endfinally",
        found_in: None,
        mono: Behaviour::Crashes,
        coreclr: Behaviour::Rejects,
    },
    Case {
        bug: "enclosing-first",
        trigger: "TryAtEntry",
        code: "EHOrderInnerAfterOuter",
        found_in: None,
        mono: Behaviour::Runs,
        coreclr: Behaviour::Rejects,
    },
    Case {
        bug: "max-stack-kept",
        trigger: "MaxStackOne",
        code: "StackOverflow",
        found_in: None,
        mono: Behaviour::Rejects,
        coreclr: Behaviour::Rejects,
    },
    Case {
        bug: "tail-calls-kept",
        trigger: "TailCaller",
        code: "TailRet",
        found_in: None,
        mono: Behaviour::Crashes,
        coreclr: Behaviour::Rejects,
    },
    Case {
        bug: "tail-calls-kept",
        trigger: "TailFirst",
        code: "TailCallInsideER",
        found_in: None,
        mono: Behaviour::Crashes,
        coreclr: Behaviour::Rejects,
    },
    Case {
        bug: "clause-grown",
        trigger: "CatchAtEnd",
        code: "EHOverlap",
        found_in: None,
        mono: Behaviour::Runs,
        coreclr: Behaviour::Rejects,
    },
    Case {
        bug: "probe-arg-type",
        trigger: "TwoReturns",
        code: "StackUnexpected",
        found_in: None,
        mono: Behaviour::Rejects,
        // CoreCLR truncates the int64 and runs: only the verifier sees the bug.
        coreclr: Behaviour::Runs,
    },
    Case {
        bug: "result-local-object",
        trigger: "StructResult",
        code: "StackUnexpected",
        found_in: Some("MakePair"),
        mono: Behaviour::Rejects,
        // CoreCLR 3.1 compiles the struct's store into the `object` local and returns wrong
        // sums: only the verifier sees the bug.
        coreclr: Behaviour::Corrupts,
    },
];

/// The runner's lines for one trigger method.
fn lines_of(stdout: &[u8], trigger: &str) -> Vec<String> {
    let prefix = format!("Weaver.Triggers::{trigger}(");
    String::from_utf8_lossy(stdout)
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .map(str::to_string)
        .collect()
}

/// Weaves the triggers with `--bug BUG` and checks each of the bug's cases: the verifier reports
/// the case's code on its trigger (new against the original), CoreCLR throws
/// InvalidProgramException for every call of the trigger, and mono does what the case says
/// (each trigger run alone, so that a crash is the trigger's).
fn seeded_bug(bug: &str) {
    let test = format!("seeded_bug {bug}");
    if !tools(&test) {
        return;
    }
    let runtimes = support::runtimes(&test);
    let kit = kit();
    let dir = kit.work(bug);
    let woven = kit.weave(Some(bug), &kit.triggers, &dir);
    let findings = new_findings(&kit.triggers, &woven);
    let cases: Vec<&Case> = CASES.iter().filter(|c| c.bug == bug).collect();
    assert!(!cases.is_empty(), "{bug}: no case");
    for case in &cases {
        let method = format!(
            "Weaver.Triggers::{}(int32)",
            case.found_in.unwrap_or(case.trigger)
        );
        assert!(
            findings.contains(&(method.clone(), case.code.to_string())),
            "{bug}: expected {} on {method}; new findings: {findings:?}",
            case.code
        );
    }
    for runtime in &runtimes {
        let on = runtime.describe();
        for case in &cases {
            let trigger = Some(case.trigger);
            let before = kit.run_triggers(runtime, &kit.triggers, trigger);
            assert!(before.success(), "under {on}: {}", before.describe());
            let original = lines_of(&before.stdout, case.trigger);
            assert!(
                !original.is_empty() && original.iter().all(|l| !l.contains(" = threw ")),
                "{}: {original:?}",
                case.trigger
            );
            let after = kit.run_triggers(runtime, &woven, trigger);
            let woven_lines = lines_of(&after.stdout, case.trigger);
            let behaviour = match runtime.kind() {
                RuntimeKind::CoreClr => case.coreclr,
                RuntimeKind::Mono => case.mono,
            };
            let what = format!("{bug}, {} under {on}", case.trigger);
            match behaviour {
                Behaviour::Rejects => {
                    assert!(after.success(), "{what}: {}", after.describe());
                    let rejected: Vec<String> = original
                        .iter()
                        .map(|l| {
                            let call = l.split_once(" = ").unwrap().0;
                            format!("{call} = threw System.InvalidProgramException")
                        })
                        .collect();
                    assert_eq!(woven_lines, rejected, "{what}");
                }
                Behaviour::Runs => {
                    assert!(after.success(), "{what}: {}", after.describe());
                    assert_eq!(woven_lines, original, "{what}");
                }
                Behaviour::Corrupts => {
                    assert!(after.success(), "{what}: {}", after.describe());
                    assert_eq!(woven_lines.len(), original.len(), "{what}: {woven_lines:?}");
                    assert!(
                        woven_lines.iter().all(|l| !l.contains(" = threw ")),
                        "{what}: {woven_lines:?}"
                    );
                    assert_ne!(woven_lines, original, "{what}: the results did not change");
                }
                Behaviour::Crashes => {
                    assert!(
                        !after.success() && !after.timed_out,
                        "{what}: expected a crash, got {}",
                        after.describe()
                    );
                    assert_eq!(woven_lines, Vec::<String>::new(), "{what}");
                }
            }
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bug_short_branches() {
    seeded_bug("short-branches");
}

#[test]
fn bug_retarget_to_probe() {
    seeded_bug("retarget-to-probe");
}

#[test]
fn bug_ret_in_try() {
    seeded_bug("ret-in-try");
}

#[test]
fn bug_handler_end_off_by_one() {
    seeded_bug("handler-end-off-by-one");
}

#[test]
fn bug_enclosing_first() {
    seeded_bug("enclosing-first");
}

#[test]
fn bug_max_stack_kept() {
    seeded_bug("max-stack-kept");
}

#[test]
fn bug_tail_calls_kept() {
    seeded_bug("tail-calls-kept");
}

#[test]
fn bug_clause_grown() {
    seeded_bug("clause-grown");
}

#[test]
fn bug_probe_arg_type() {
    seeded_bug("probe-arg-type");
}

#[test]
fn bug_result_local_object() {
    seeded_bug("result-local-object");
}

/// The command line: a usage error exits 2 and writes nothing; an input that is not an assembly
/// exits 1 with a message and writes nothing.
#[test]
fn weaver_command_line() {
    let test = "weaver_command_line";
    if !tools(test) {
        return;
    }
    let kit = kit();
    let dir = kit.work("cli");
    let out = dir.join("out.dll");
    let weaver = |args: &[&std::ffi::OsStr]| {
        support::run(
            Command::new("mono")
                .env("MONO_ENV_OPTIONS", "")
                .arg(&kit.weaver)
                .args(args),
        )
    };
    let input = kit.triggers.as_os_str();
    let bad_input = dir.join("not-an-assembly.dll");
    let missing = dir.join("missing.dll");
    std::fs::write(&bad_input, b"MZ but nothing else").unwrap();
    for (args, code) in [
        (
            vec![
                "--bug".as_ref(),
                "no-such-bug".as_ref(),
                input,
                out.as_os_str(),
            ],
            2,
        ),
        (vec!["--bug".as_ref()], 2),
        (vec![input], 2),
        (vec!["--frobnicate".as_ref(), input, out.as_os_str()], 2),
        (vec![input, input], 2),
        (vec![bad_input.as_os_str(), out.as_os_str()], 1),
        (vec![missing.as_os_str(), out.as_os_str()], 1),
    ] {
        let o = weaver(&args);
        assert_eq!(o.code, Some(code), "{args:?}: {}", o.describe());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.starts_with("weaver: "), "{args:?}: {err}");
        assert!(!out.exists(), "{args:?} wrote its output");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// A `foreach` in a try/finally with two `leave`s, as C# compiles it: Cecil writes the woven
/// assembly's metadata anew and numbers its MemberRefs otherwise, so that instructions compared
/// by token value paired `callvirt GetEnumerator` with `callvirt get_Current` and reported the
/// correct weave's `leave` as retargeted. Compared by what the tokens name, the method aligns
/// whole and nothing is reported.
const FOREACH_IL: &str = r#"
.assembly extern mscorlib { .publickeytoken = (B7 7A 5C 56 19 34 E0 89) .ver 4:0:0:0 }
.assembly foreach_leaves { .ver 1:0:0:0 }
.module foreach_leaves.dll
.class public auto ansi C extends [mscorlib]System.Object
{
  .method public static bool IsEmpty(class [mscorlib]System.Collections.IEnumerable e) cil managed
  {
    .maxstack 2
    .locals init (bool V_0, class [mscorlib]System.Collections.IEnumerator V_1)
    ldarg.0
    brfalse.s  TRUE
    ldarg.0
    callvirt   instance class [mscorlib]System.Collections.IEnumerator [mscorlib]System.Collections.IEnumerable::GetEnumerator()
    stloc.1
    .try
    {
      br.s       COND
    BODY:
      ldloc.1
      callvirt   instance object [mscorlib]System.Collections.IEnumerator::get_Current()
      pop
      ldc.i4.0
      stloc.0
      leave.s    RET
    COND:
      ldloc.1
      callvirt   instance bool [mscorlib]System.Collections.IEnumerator::MoveNext()
      brtrue.s   BODY
      leave.s    TRUE
    }
    finally
    {
      ldloc.1
      isinst     [mscorlib]System.IDisposable
      brfalse.s  END
      ldloc.1
      castclass  [mscorlib]System.IDisposable
      callvirt   instance void [mscorlib]System.IDisposable::Dispose()
    END:
      endfinally
    }
    TRUE: ldc.i4.1
    stloc.0
    RET: ldloc.0
    ret
  }
}
"#;

#[test]
fn a_weave_that_renumbers_tokens_aligns_by_what_they_name() {
    let test = "a_weave_that_renumbers_tokens_aligns_by_what_they_name";
    if !tools(test) {
        return;
    }
    let kit = kit();
    let dir = kit.work("renumbered");
    let source = dir.join("foreach_leaves.il");
    std::fs::write(&source, FOREACH_IL).unwrap();
    let original_dir = dir.join("original");
    std::fs::create_dir_all(&original_dir).unwrap();
    let original = original_dir.join("foreach_leaves.dll");
    let o = support::run(
        Command::new("ilasm")
            .arg("/dll")
            .arg(&source)
            .arg(format!("/output:{}", original.display())),
    );
    assert!(o.success(), "ilasm: {}", o.describe());
    let woven_dir = dir.join("woven");
    std::fs::create_dir_all(&woven_dir).unwrap();
    let woven = kit.weave(None, &original, &woven_dir);
    assert_eq!(new_findings(&original, &woven), vec![]);
    let o = support::run(
        Command::new(BIN)
            .args(["verify", "--json"])
            .arg(&woven)
            .arg("--baseline")
            .arg(&original),
    );
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let a = &v["alignment"];
    assert_eq!(a["methods_aligned"], 1, "{a}");
    assert_eq!(a["methods_in_part"], 0, "{a}");
    std::fs::remove_dir_all(&dir).ok();
}
