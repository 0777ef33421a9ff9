//! `ilcheck generate`, `fuzz` and `equiv` end to end: generated programs print their manifests'
//! lines under mono and CoreCLR; the fuzz loop finds every seeded bug of the sample weaver and
//! minimises it, stays clean on the correct weaver and on ilcheck's own transforms, and reports
//! a rewriter that crashes, hangs, writes nothing or writes garbage as a failure of its own
//! kind.

use crate::support;

use ilcheck::harness::program::{Manifest, result_lines};
use std::path::{Path, PathBuf};
use std::process::Command;

fn ilcheck() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ilcheck"))
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ilcheck-fuzz-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn text(o: &ilcheck::harness::Outcome) -> String {
    format!(
        "{}\n--- stdout\n{}\n--- stderr\n{}",
        o.describe(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// 10,000 generated methods (50 programs of 200) print exactly their manifest's lines under
/// CoreCLR and under mono — but for programs mono's optimiser gets wrong (a wrong result, or a
/// JIT assertion), which must then print the expected lines with mono's optimisations off —
/// and verify clean, unverifiable code included (structure and types). Their results include
/// `int64`s, `S` values and `C` objects.
#[test]
fn ten_thousand_generated_methods_run_as_their_manifests_say() {
    let test = "ten_thousand_generated_methods_run_as_their_manifests_say";
    let runtimes = support::runtimes(test);
    if runtimes.is_empty() {
        return;
    }
    let dir = scratch("generate");
    let o = support::run(
        ilcheck()
            .args([
                "generate",
                "--count",
                "50",
                "--methods-per-assembly",
                "200",
                "--seed",
                "7000",
                "-o",
            ])
            .arg(&dir),
    );
    assert!(o.success(), "{}", text(&o));
    let v = support::run(
        ilcheck()
            .args(["verify", "--level", "unverifiable"])
            .arg(&dir),
    );
    assert!(
        v.success(),
        "generated programs must verify clean: {}",
        text(&v)
    );

    let mut methods = 0;
    let mut mono_miscompiled = Vec::new();
    // Lines that show an `int32&` argument's final value, `int64` results, `S` and `C` results.
    let (mut ref_lines, mut wide_results) = (0, 0);
    let (mut struct_results, mut class_results) = (0, 0);
    for k in 0..50 {
        let exe = dir.join(format!("g{}.exe", 7000 + k));
        let manifest: Manifest = serde_json::from_str(
            &std::fs::read_to_string(Manifest::beside(&exe).unwrap()).unwrap(),
        )
        .unwrap();
        methods += manifest.methods.len();
        let expected = manifest.expected_lines();
        for l in &expected {
            ref_lines += l.contains(" ref ") as usize;
            struct_results += l.contains(" ret S ") as usize;
            class_results += l.contains(" ret C ") as usize;
            let value = l.split(' ').skip_while(|w| *w != "ret").nth(1);
            wide_results += value
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| i32::try_from(v).is_err()) as usize;
        }
        // As a user runs one by hand: `dotnet NAME.exe`, with the runtimeconfig.json beside it
        // and none of the harness's settings (CoreCLR 3.1 knows no ICU of Debian 12's: the file
        // asks for invariant globalization).
        if let Some(rt) = runtimes
            .iter()
            .find(|r| r.kind() == ilcheck::harness::RuntimeKind::CoreClr)
            .filter(|_| k == 0)
        {
            let mut by_hand = Command::new(rt.program());
            by_hand
                .arg(&exe)
                .env_remove("DOTNET_SYSTEM_GLOBALIZATION_INVARIANT");
            let o = support::run(&mut by_hand);
            let out = String::from_utf8_lossy(&o.stdout);
            assert!(
                o.success(),
                "dotnet {} by hand: {}",
                exe.display(),
                text(&o)
            );
            assert_eq!(
                result_lines(&out),
                expected,
                "dotnet {} by hand",
                exe.display()
            );
        }
        for rt in &runtimes {
            let o = support::run(&mut rt.command(&exe, &[]));
            let out = String::from_utf8_lossy(&o.stdout);
            let lines = result_lines(&out);
            if o.success() && lines == expected {
                continue;
            }
            let kind = rt.kind();
            assert_eq!(
                kind,
                ilcheck::harness::RuntimeKind::Mono,
                "{} on {}: lines differ from the manifest",
                rt.describe(),
                exe.display()
            );
            // Mono's JIT optimiser: the same program, optimisations off.
            let o = support::run(rt.command(&exe, &[]).env("MONO_ENV_OPTIONS", "-O=-all"));
            assert!(
                o.success(),
                "{}: mono without optimisations: {}",
                exe.display(),
                text(&o)
            );
            let out = String::from_utf8_lossy(&o.stdout);
            assert_eq!(
                result_lines(&out),
                expected,
                "{}: mono without optimisations differs from the manifest",
                exe.display()
            );
            let wrong: Vec<&str> = expected
                .iter()
                .enumerate()
                .filter(|(i, e)| lines.get(*i) != Some(*e))
                .map(|(_, e)| *e)
                .take(3)
                .collect();
            mono_miscompiled.push(format!("{}: {}", exe.display(), wrong.join(" | ")));
        }
    }
    assert_eq!(methods, 10_000);
    assert!(
        ref_lines > 500 && wide_results > 200 && struct_results > 200 && class_results > 200,
        "{ref_lines} lines with int32& values, {wide_results} int64 results, \
         {struct_results} S results, {class_results} C results"
    );
    eprintln!(
        "{methods} methods ({struct_results} S results, {class_results} C results); mono's \
         optimiser miscompiles results in {} program(s):\n{}",
        mono_miscompiled.len(),
        mono_miscompiled.join("\n")
    );
    // A handful at most: more would mean the harness, not mono, is wrong.
    assert!(mono_miscompiled.len() <= 8, "{mono_miscompiled:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Calls between generated methods, and the stubs that stand in for callees a minimised
/// program dropped: the callers alone print their manifest's lines under mono and CoreCLR and
/// verify clean.
#[test]
fn callers_without_their_callees_run_as_their_manifests_say() {
    use ilcheck::harness::program::{build_program, generate_methods};
    let test = "callers_without_their_callees_run_as_their_manifests_say";
    let runtimes = support::runtimes(test);
    if runtimes.is_empty() {
        return;
    }
    let dir = scratch("callers");
    let config = ilcheck::generate::Config::default();
    let methods = generate_methods(21, 60, &config);
    let callers: Vec<_> = methods
        .iter()
        .filter(|m| m.generated.calls_peers)
        .cloned()
        .collect();
    assert!(callers.len() >= 10, "{} callers", callers.len());
    // Stubs of every result type: `S` and `C` ones too.
    use ilcheck::generate::valid::ValType;
    for t in [ValType::Struct, ValType::Class] {
        let n = callers
            .iter()
            .filter(|m| {
                let g = &m.generated;
                g.peers.iter().filter(|p| p.ret == Some(t)).any(|p| {
                    g.method
                        .instrs
                        .iter()
                        .any(|i| i.operand == ilcheck::ir::Operand::Token(p.token()))
                })
            })
            .count();
        assert!(n >= 1, "no caller calls a peer returning {t:?}");
    }
    for (name, set) in [("whole", &methods), ("callers", &callers)] {
        let p = build_program(name, set, &config).unwrap();
        let exe = p.write_to(&dir).unwrap();
        let has_stub = p.bytes.windows(6).any(|w| w == b"Gone_M");
        assert_eq!(has_stub, name == "callers", "{name}");
        let v = support::run(
            ilcheck()
                .args(["verify", "--level", "unverifiable"])
                .arg(&exe),
        );
        assert!(v.success(), "{name} must verify clean: {}", text(&v));
        let expected = p.manifest.expected_lines();
        for rt in &runtimes {
            let o = support::run(&mut rt.command(&exe, &[]));
            let out = String::from_utf8_lossy(&o.stdout);
            assert!(o.success(), "{name} under {}: {}", rt.describe(), text(&o));
            assert_eq!(
                result_lines(&out),
                expected,
                "{name} under {}",
                rt.describe()
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn fuzz(args: &[&str], keep: &Path) -> ilcheck::harness::Outcome {
    support::run(
        ilcheck()
            .arg("fuzz")
            .args(args)
            .arg("--keep-failures")
            .arg(keep)
            .arg("--json"),
    )
}

fn summary(o: &ilcheck::harness::Outcome) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(o)))
}

/// Whether the sample weaver can be built and its output run under both runtimes: a loud skip
/// when not (a failure under `ILCHECK_REQUIRE_MONO=1`).
fn weaver_runs(test: &str) -> bool {
    support::runtimes(test).len() >= 2
        && support::mono_tool(test, "mcs")
        && support::present(
            test,
            "Mono.Cecil 0.11 in mono's GAC",
            support::cecil_installed(),
        )
}

/// Each seeded bug of the sample weaver is found within 10 programs of 100 methods, classified
/// as the verifier finding it causes, and minimised to at most 3 methods whose report names the
/// finding; the correct weaver runs clean.
#[test]
fn the_loop_finds_and_minimises_every_seeded_weaver_bug() {
    let test = "the_loop_finds_and_minimises_every_seeded_weaver_bug";
    if !weaver_runs(test) {
        return;
    }
    let dir = scratch("weaver");
    let (weaver, probe) = support::build_weaver(&dir.join("bin"));
    let rewriter = |bug: Option<&str>| {
        let bug = bug.map_or(String::new(), |b| format!("--bug {b} "));
        format!("mono {} {bug}{{in}} {{out}}", weaver.display())
    };
    let probe = probe.display().to_string();

    let clean = fuzz(
        &[
            "--rewriter",
            &rewriter(None),
            "--with",
            &probe,
            "--cases",
            "12",
            "--seed",
            "1",
            "--methods-per-assembly",
            "100",
        ],
        &dir.join("clean"),
    );
    assert!(clean.success(), "the correct weaver: {}", text(&clean));
    assert_eq!(summary(&clean)["methods"], 1200);

    // Bug, and the finding codes that may name it.
    let bugs: [(&str, &[&str]); 10] = [
        (
            "short-branches",
            &[
                "BadJumpTarget",
                "BranchIntoTry",
                "PathStackDepth",
                "BadBranch",
                "BranchOutOfTry",
                "StackUnderflow",
                "BranchIntoHandler",
                "BranchOutOfHandler",
                "FallthroughIntoHandler",
                "FallthroughException",
                "BranchRetargeted",
            ],
        ),
        (
            "retarget-to-probe",
            &["EHOverlap", "BranchOutOfTry", "BranchRetargeted"],
        ),
        ("ret-in-try", &["ReturnFromTry"]),
        (
            "handler-end-off-by-one",
            &["FallthroughException", "Endfinally", "ClauseBoundaryMoved"],
        ),
        ("enclosing-first", &["EHOrderInnerAfterOuter"]),
        ("max-stack-kept", &["StackOverflow"]),
        ("tail-calls-kept", &["TailRet", "TailCallInsideER"]),
        ("clause-grown", &["EHOverlap", "ClauseBoundaryMoved"]),
        ("probe-arg-type", &["StackUnexpected"]),
        // Shows only on generated methods that return the value type `S`.
        ("result-local-object", &["StackUnexpected"]),
    ];
    std::thread::scope(|s| {
        for (bug, codes) in bugs {
            let (dir, rewriter, probe) = (&dir, rewriter(Some(bug)), &probe);
            s.spawn(move || {
                let keep = dir.join(bug);
                let o = fuzz(
                    &[
                        "--rewriter",
                        &rewriter,
                        "--with",
                        probe,
                        "--cases",
                        "10",
                        "--seed",
                        "1",
                        "--methods-per-assembly",
                        "100",
                        "--jobs",
                        "1",
                        "--minimise-time",
                        "25",
                        // A rewritten program the bug sends into an endless loop costs a run
                        // timeout per run; the programs themselves take well under a second.
                        "--run-timeout",
                        "10",
                    ],
                    &keep,
                );
                assert_eq!(o.code, Some(1), "{bug}: {}", text(&o));
                let s = summary(&o);
                let failures = s["failures"].as_array().unwrap();
                let first = &failures[0];
                let signature = first["signature"].as_str().unwrap();
                let code = signature
                    .strip_prefix("finding:")
                    .unwrap_or_else(|| panic!("{bug}: {signature}"));
                assert!(codes.contains(&code), "{bug}: {signature}");
                let repro = PathBuf::from(first["repros"][0].as_str().unwrap());
                let report = std::fs::read_to_string(repro.join("report.md")).unwrap();
                assert!(
                    report.contains(code),
                    "{bug}: report.md does not name {code}"
                );
                let manifest = std::fs::read_dir(repro.join("original"))
                    .unwrap()
                    .flatten()
                    .find(|e| e.file_name().to_string_lossy().ends_with(".manifest.json"))
                    .unwrap();
                let m: Manifest =
                    serde_json::from_str(&std::fs::read_to_string(manifest.path()).unwrap())
                        .unwrap();
                assert!(
                    m.methods.len() <= 3,
                    "{bug}: repro keeps {} methods",
                    m.methods.len()
                );
                // Both programs can be run by hand under CoreCLR too.
                let stem = m.assembly.trim_end_matches(".exe");
                for sub in ["original", "rewritten"] {
                    let config = repro.join(sub).join(format!("{stem}.runtimeconfig.json"));
                    assert!(config.is_file(), "{bug}: no {}", config.display());
                }
                // The repro's own command finds it again.
                let exe = repro.join("original").join(&m.assembly);
                let again = support::run(
                    ilcheck()
                        .args(["fuzz", "--rewriter", &rewriter, "--with", probe, "--replay"])
                        .arg(&exe),
                );
                assert_eq!(again.code, Some(1), "{bug}: replay: {}", text(&again));
                assert!(
                    String::from_utf8_lossy(&again.stdout).contains(code),
                    "{bug}: replay: {}",
                    text(&again)
                );
            });
        }
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// A repro folder runs as written from anywhere: `failure.json` records the rewriter command and
/// the directory it ran from, and `report.md`'s replay (`cd CWD && ilcheck fuzz … --replay ABS`)
/// says it reproduced the recorded signature; the same template run from inside the folder,
/// where its relative `weaver.exe` is not, is a different failure, and a correct rewriter does
/// not reproduce it.
#[test]
fn a_repro_folder_replays_from_anywhere_and_names_its_signature() {
    let test = "a_repro_folder_replays_from_anywhere_and_names_its_signature";
    if !(support::mono_tool(test, "mono")
        && support::mono_tool(test, "mcs")
        && support::present(
            test,
            "Mono.Cecil 0.11 in mono's GAC",
            support::cecil_installed(),
        ))
    {
        return;
    }
    let dir = scratch("repro-cwd");
    support::build_weaver(&dir);
    // Relative paths, as a user types them: they hold only in the fuzz run's directory.
    let rewriter = "mono weaver.exe --bug short-branches {in} {out}";
    let o = support::run(ilcheck().current_dir(&dir).args([
        "fuzz",
        "--rewriter",
        rewriter,
        "--with",
        "Acme.Probe.dll",
        "--runtime",
        "none",
        "--cases",
        "3",
        "--seed",
        "1",
        "--methods-per-assembly",
        "100",
        "--jobs",
        "1",
        "--json",
    ]));
    assert_eq!(o.code, Some(1), "{}", text(&o));
    let s = summary(&o);
    let repro = dir.join(s["failures"][0]["repros"][0].as_str().unwrap());
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(repro.join("failure.json")).unwrap())
            .unwrap();
    let signature = record["signature"].as_str().unwrap().to_string();
    assert_eq!(record["rewriter_command"], rewriter, "{record}");
    assert_eq!(
        Path::new(record["rewriter_cwd"].as_str().unwrap_or_default()),
        dir.canonicalize().unwrap(),
        "{record}"
    );
    let replay = record["replay_command"].as_str().unwrap_or_default();
    let report = std::fs::read_to_string(repro.join("report.md")).unwrap();
    assert!(
        report.contains(replay),
        "report.md lacks {replay:?}:\n{report}"
    );

    // The recorded command, by a shell in another directory, with ilcheck on PATH.
    let bin = Path::new(env!("CARGO_BIN_EXE_ilcheck")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let again = support::run(
        Command::new("sh")
            .args(["-c", replay])
            .current_dir(std::env::temp_dir())
            .env("PATH", &path),
    );
    let out = String::from_utf8_lossy(&again.stdout).to_string();
    assert_eq!(again.code, Some(1), "{}", text(&again));
    assert!(
        out.contains(&format!("reproduced: same signature ({signature})")),
        "{}",
        text(&again)
    );

    // The template from inside the repro folder: weaver.exe is not there, and the replay says
    // that this is not the failure recorded.
    let exe = std::fs::read_dir(repro.join("original"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "exe"))
        .unwrap();
    let name = exe.file_name().unwrap().to_str().unwrap().to_string();
    let elsewhere = support::run(ilcheck().current_dir(&repro).args([
        "fuzz",
        "--rewriter",
        rewriter,
        "--runtime",
        "none",
        "--replay",
        &format!("original/{name}"),
    ]));
    assert_eq!(elsewhere.code, Some(1), "{}", text(&elsewhere));
    assert!(
        String::from_utf8_lossy(&elsewhere.stdout).contains(&format!(
            "a different failure: rewriter-crashed (recorded: {signature})"
        )),
        "{}",
        text(&elsewhere)
    );
    // The correct weaver, from inside `original/`: no failure, and not the recorded one.
    let fixed = support::run(ilcheck().current_dir(repro.join("original")).args([
        "fuzz",
        "--rewriter",
        &format!("mono {} {{in}} {{out}}", dir.join("weaver.exe").display()),
        "--with",
        "Acme.Probe.dll",
        "--runtime",
        "none",
        "--replay",
        &name,
        "--json",
    ]));
    assert_eq!(fixed.code, Some(0), "{}", text(&fixed));
    // With --json, standard output is one JSON document whatever the outcome.
    let v: serde_json::Value =
        serde_json::from_slice(&fixed.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&fixed)));
    assert!(v["failure"].is_null(), "{v}");
    assert_eq!(v["recorded_signature"], signature.as_str(), "{v}");
    assert_eq!(v["reproduced"], false, "{v}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A runtime that dies in its own code on woven output that verifies and that the other runtime
/// runs as expected is a runtime defect, kept apart from the rewriter's failures: the kept
/// program whose woven copy makes mono 6.8's JIT assert replays as `runtime-defect`, exit 0, and
/// exit 1 under `--fail-on-runtime-defects`.
#[test]
fn a_runtime_defect_is_not_the_rewriters_failure() {
    let test = "a_runtime_defect_is_not_the_rewriters_failure";
    if !weaver_runs(test) {
        return;
    }
    let dir = scratch("defect");
    let (weaver, probe) = support::build_weaver(&dir.join("bin"));
    let kept = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/regressions/runtime_defects");
    let rewriter = format!("mono {} {{in}} {{out}}", weaver.display());
    for (program, signature) in [
        ("g20261632", "runtime-defect:mono:mini.c:2648"),
        ("g20263037", "runtime-defect:mono:mini-amd64.c:4621"),
    ] {
        for ext in ["exe", "manifest.json"] {
            let f = format!("{program}.{ext}");
            std::fs::copy(kept.join(&f), dir.join(&f)).unwrap();
        }
        let exe = dir.join(format!("{program}.exe"));
        let replay = |extra: &[&str]| {
            support::run(
                ilcheck()
                    .args(["fuzz", "--rewriter", &rewriter, "--with"])
                    .arg(&probe)
                    .args(extra)
                    .arg("--replay")
                    .arg(&exe),
            )
        };
        let o = replay(&["--json"]);
        assert!(o.success(), "{program}: {}", text(&o));
        let f = summary(&o);
        assert_eq!(f["kind"], "runtime-defect", "{program}: {}", text(&o));
        assert_eq!(f["signature"], signature, "{program}: {}", text(&o));
        assert_eq!(
            f["findings"].as_array().map(Vec::len),
            Some(0),
            "{}",
            text(&o)
        );
        let mono = f["runtimes"]
            .as_array()
            .and_then(|r| r.iter().find(|c| c["runtime"] == "mono"))
            .unwrap_or_else(|| panic!("{program}: no mono run: {}", text(&o)));
        assert!(
            mono["rewritten"]["defect_message"]
                .as_str()
                .is_some_and(|m| m.starts_with("* Assertion at ")),
            "{program}: {}",
            text(&o)
        );
        let counted = replay(&["--fail-on-runtime-defects"]);
        assert_eq!(counted.code, Some(1), "{program}: {}", text(&counted));
        assert!(
            String::from_utf8_lossy(&counted.stdout).contains(signature),
            "{program}: {}",
            text(&counted)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// ilcheck's own `rewrite`, every transform, as the rewriter under test: clean.
#[test]
fn ilcheck_rewrite_is_clean_under_the_loop() {
    let test = "ilcheck_rewrite_is_clean_under_the_loop";
    let runtimes = support::runtimes(test);
    if runtimes.len() < 2 {
        return;
    }
    let dir = scratch("self");
    for t in ilcheck::ir::Transform::ALL.map(|t| t.name()) {
        let rewriter = format!(
            "{} rewrite {{in}} -o {{out}} -t {t}",
            env!("CARGO_BIN_EXE_ilcheck")
        );
        let o = fuzz(
            &[
                "--rewriter",
                &rewriter,
                "--cases",
                "4",
                "--seed",
                "11",
                "--methods-per-assembly",
                "100",
            ],
            &dir.join(t),
        );
        assert!(o.success(), "{t}: {}", text(&o));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A rewriter that crashes, hangs, writes nothing or writes garbage is a failure of its own
/// kind, never an error of ilcheck; a missing rewriter or a template without `{out}` is a set-up
/// error (exit 2).
#[test]
fn misbehaving_rewriters_are_findings_about_them() {
    let dir = scratch("misbehave");
    let cases: [(&str, &str); 4] = [
        (
            "sh -c 'echo broken >&2; exit 3' sh {in} {out}",
            "rewriter-crashed",
        ),
        ("sh -c 'exec sleep 30' sh {in} {out}", "rewriter-timed-out"),
        ("true {in} {out}", "no-output"),
        ("sh -c 'echo garbage > \"$2\"' sh {in} {out}", "not-dotnet"),
    ];
    for (rewriter, kind) in cases {
        let start = std::time::Instant::now();
        let o = fuzz(
            &[
                "--rewriter",
                rewriter,
                "--runtime",
                "none",
                "--cases",
                "1",
                "--seed",
                "3",
                "--methods-per-assembly",
                "5",
                "--rewriter-timeout",
                "2",
                "--minimise-checks",
                "3",
            ],
            &dir.join(kind),
        );
        assert_eq!(o.code, Some(1), "{rewriter}: {}", text(&o));
        assert_eq!(summary(&o)["failures"][0]["signature"], kind, "{rewriter}");
        assert!(
            start.elapsed().as_secs() < 30,
            "{rewriter}: took {:?}",
            start.elapsed()
        );
        let report = std::fs::read_dir(dir.join(kind))
            .unwrap()
            .flatten()
            .next()
            .map(|e| std::fs::read_to_string(e.path().join("report.md")).unwrap())
            .unwrap();
        if kind == "rewriter-crashed" {
            assert!(report.contains("broken"), "the rewriter's stderr: {report}");
        }
    }
    for bad in ["no-such-rewriter-anywhere {in} {out}", "cp {in}"] {
        let o = fuzz(
            &["--rewriter", bad, "--runtime", "none", "--cases", "1"],
            &dir.join("setup"),
        );
        assert_eq!(o.code, Some(2), "{bad}: {}", text(&o));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// What a rewriter leaves behind or floods ilcheck with costs bounded time and space: a
/// background process that keeps the rewriter's output open does not hold the case up (it is
/// killed with its process group once the rewriter has exited); a hang is minimised within
/// `--minimise-time` and not past `--time`, never a full deadline per check; an output of any
/// size is mapped, not read, and a repro folder does not keep one larger than its limit.
#[test]
fn rewriters_that_linger_hang_or_flood_cost_bounded_time_and_space() {
    let dir = scratch("linger");
    let base = [
        "--runtime",
        "none",
        "--seed",
        "3",
        "--methods-per-assembly",
        "5",
    ];
    let timed = |rewriter: &str, extra: &[&str], keep: &str| {
        let start = std::time::Instant::now();
        let mut args = vec!["--rewriter", rewriter];
        args.extend(base);
        args.extend(extra);
        let o = fuzz(&args, &dir.join(keep));
        (o, start.elapsed())
    };

    // A correct rewrite (a copy) whose background child holds stdout for 30 s.
    let lingering = "sh -c 'cp \"$1\" \"$2\"; sleep 30 &' sh {in} {out}";
    let (o, took) = timed(lingering, &["--cases", "2", "--jobs", "1"], "lingering");
    assert_eq!(o.code, Some(0), "{}", text(&o));
    assert_eq!(summary(&o)["cases"], 2);
    assert!(took.as_secs() < 15, "took {took:?}: {}", text(&o));

    // A hang: one 3 s deadline for the case, then 1 s of minimisation (a check it cannot
    // finish in time does not count), and no second run of an unshrunk hang.
    let hang = "sh -c 'exec sleep 30' sh {in} {out}";
    let (o, took) = timed(
        hang,
        &[
            "--cases",
            "1",
            "--rewriter-timeout",
            "3",
            "--minimise-time",
            "1",
        ],
        "hang",
    );
    assert_eq!(
        summary(&o)["failures"][0]["signature"],
        "rewriter-timed-out"
    );
    assert!(took.as_secs() < 7, "took {took:?}: {}", text(&o));
    assert!(
        summary(&o)["stages"]["minimise"].as_f64().unwrap() < 2.5,
        "{}",
        text(&o)
    );

    // The same hang found as `--time` runs out: kept as it is, not minimised past the end.
    let (o, took) = timed(
        hang,
        &["--time", "1", "--jobs", "1", "--rewriter-timeout", "3"],
        "hang-at-end",
    );
    assert_eq!(
        summary(&o)["failures"][0]["signature"],
        "rewriter-timed-out"
    );
    assert!(took.as_secs() < 7, "took {took:?}: {}", text(&o));

    // 100 MB (sparse) of nothing as the output.
    let flood = "sh -c 'truncate -s 100M \"$2\"' sh {in} {out}";
    let (o, _) = timed(flood, &["--cases", "1"], "flood");
    assert_eq!(summary(&o)["failures"][0]["signature"], "not-dotnet");
    let repro = std::fs::read_dir(dir.join("flood"))
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path();
    let report = std::fs::read_to_string(repro.join("report.md")).unwrap();
    assert!(report.contains("is not kept"), "{report}");
    let kept: u64 = std::fs::read_dir(repro.join("rewritten"))
        .unwrap()
        .flatten()
        .map(|e| e.metadata().unwrap().len())
        .sum();
    assert!(
        kept < ilcheck::harness::fuzz::REPRO_FILE_LIMIT,
        "{kept} bytes kept"
    );

    // `--replay` of a file larger than any generated program: refused, not read into memory.
    let manifest = std::fs::read_dir(repro.join("original"))
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().ends_with(".manifest.json"))
        .unwrap()
        .path();
    let big = dir.join("big.exe");
    std::fs::copy(&manifest, dir.join("big.manifest.json")).unwrap();
    std::fs::File::create(&big)
        .unwrap()
        .set_len(100 << 20)
        .unwrap();
    let o = support::run(
        ilcheck()
            .args(["fuzz", "--rewriter", "cp {in} {out}", "--replay"])
            .arg(&big),
    );
    assert_eq!(o.code, Some(2), "{}", text(&o));
    assert!(text(&o).contains("larger than any program"), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

/// SIGINT (a user's Ctrl-C) stops `fuzz` at once and cleanly: the rewriters it started are
/// killed (they run in process groups of their own, which the terminal's signal does not
/// reach), its scratch directories are removed, and it exits 130 with its summary.
#[test]
fn an_interrupted_loop_leaves_nothing_running_or_behind() {
    let dir = scratch("interrupt");
    std::fs::create_dir_all(&dir).unwrap();
    let pids = dir.join("pids");
    let rewriter = format!(
        "sh -c 'echo $$ >> \"{}\"; sleep 30; cp \"$1\" \"$2\"' sh {{in}} {{out}}",
        pids.display()
    );
    let child = ilcheck()
        .args([
            "fuzz",
            "--rewriter",
            &rewriter,
            "--runtime",
            "none",
            "--jobs",
            "2",
        ])
        .args(["--time", "60", "--json", "--keep-failures"])
        .arg(dir.join("kept"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let by = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let started = || {
        std::fs::read_to_string(&pids)
            .map(|t| {
                t.lines()
                    .filter_map(|l| l.trim().parse::<i32>().ok())
                    .collect()
            })
            .unwrap_or_else(|_| Vec::new())
    };
    while started().len() < 2 && std::time::Instant::now() < by {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let rewriters: Vec<i32> = started();
    assert_eq!(rewriters.len(), 2, "both workers' rewriters started");
    let pid = i32::try_from(child.id()).unwrap();
    // SAFETY: kill(2) of the child this test started.
    unsafe { libc::kill(pid, libc::SIGINT) };
    let stopped = std::time::Instant::now();
    let out = child.wait_with_output().unwrap();
    assert!(
        stopped.elapsed().as_secs() < 5,
        "took {:?}",
        stopped.elapsed()
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["stopped"], true);
    assert_eq!(summary["cases"], 0, "no case finished");
    for r in rewriters {
        let alive = std::fs::read_to_string(format!("/proc/{r}/stat")).is_ok_and(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        });
        assert!(!alive, "the rewriter {r} outlived the interrupted loop");
    }
    let tmp = std::env::temp_dir();
    for what in ["fuzz", "host"] {
        let left = tmp.join(format!("ilcheck-{what}-{pid}"));
        assert!(!left.exists(), "{} left behind", left.display());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `equiv`: a program against itself is the same (exit 0); against a program of another seed
/// under the same name, its lines differ (exit 1).
#[test]
fn equiv_compares_two_programs() {
    let test = "equiv_compares_two_programs";
    let runtimes = support::runtimes(test);
    if runtimes.len() < 2 {
        return;
    }
    let dir = scratch("equiv");
    for (sub, seed) in [("a", "5"), ("b", "6")] {
        let o = support::run(
            ilcheck()
                .args([
                    "generate",
                    "--count",
                    "1",
                    "--methods-per-assembly",
                    "20",
                    "--seed",
                    seed,
                    "-o",
                ])
                .arg(dir.join(sub)),
        );
        assert!(o.success(), "{}", text(&o));
    }
    let a = dir.join("a/g5.exe");
    // The other program, under the first one's name.
    std::fs::create_dir_all(dir.join("c")).unwrap();
    std::fs::copy(dir.join("b/g6.exe"), dir.join("c/g5.exe")).unwrap();
    let same = support::run(ilcheck().arg("equiv").arg(&a).arg(&a));
    assert!(same.success(), "{}", text(&same));
    let differ = support::run(ilcheck().arg("equiv").arg(&a).arg(dir.join("c/g5.exe")));
    assert_eq!(differ.code, Some(1), "{}", text(&differ));
    assert!(String::from_utf8_lossy(&differ.stdout).contains("result lines differ"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Rewritten programs that hang, bring the runtime down or end the process from `Main` (a
/// rewriter that swaps them in for some cases): with runtime servers the loop goes on and each
/// case fails with the signature it has when every program runs in a process of its own.
#[test]
fn the_loop_attributes_misbehaving_programs_as_without_servers() {
    let test = "the_loop_attributes_misbehaving_programs_as_without_servers";
    let runtimes = support::runtimes(test);
    if runtimes.is_empty() || !support::mono_tool(test, "mcs") {
        return;
    }
    let dir = scratch("swapped");
    let bin = dir.join("bin");
    for d in ["HANG", "FAILFAST", "EXIT0"] {
        support::build_misbehaving(&bin, d);
    }
    let b = bin.display();
    let rewriter = format!(
        "sh -c 'case \"${{1##*/}}\" in g1.exe) cp {b}/hang.exe \"$2\";; g2.exe) cp {b}/failfast.exe \"$2\";; g3.exe) cp {b}/exit0.exe \"$2\";; *) cp \"$1\" \"$2\";; esac' sh {{in}} {{out}}"
    );
    let runtime = runtimes[0].kind().name();
    let mut seen = Vec::new();
    for server in [true, false] {
        let keep = dir.join(if server { "server" } else { "fresh" });
        let mut args = vec![
            "--rewriter",
            &rewriter,
            "--runtime",
            runtime,
            "--cases",
            "5",
            "--seed",
            "1",
            "--methods-per-assembly",
            "5",
            "--run-timeout",
            "4",
            "--minimise-checks",
            "0",
            "--repros",
            "5",
        ];
        if !server {
            args.push("--no-server");
        }
        let o = fuzz(&args, &keep);
        assert_eq!(o.code, Some(1), "server {server}: {}", text(&o));
        let s = summary(&o);
        assert_eq!(s["cases"], 5, "server {server}: the loop goes on");
        assert_eq!(s["failed_cases"], 3, "server {server}: {s}");
        let sv = &s["servers"];
        if server {
            assert!(sv["served"].as_u64().unwrap() >= 2, "{sv}");
            assert!(sv["fallbacks"].as_u64().unwrap() >= 3, "{sv}");
        } else {
            assert_eq!(sv["served"], 0, "{sv}");
        }
        let mut repros: Vec<String> = std::fs::read_dir(&keep)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        repros.sort();
        seen.push(repros);
    }
    assert_eq!(seen[0], seen[1], "signatures with servers, then without");
    let crashed = format!("runtime-crashed-{runtime}");
    assert_eq!(
        seen[0],
        [
            format!("different-results-{runtime}-3"),
            format!("{crashed}-1"),
            format!("{crashed}-2"),
        ]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A program whose methods compute with the value type `S` and the class `C` (arguments,
/// locals, results, calls between its methods) verifies with no finding at the unverifiable
/// level, structural and type alike; no runtime needed.
#[test]
fn programs_with_structs_and_classes_verify_clean_as_unverifiable() {
    use ilcheck::harness::program::generate_program;
    let dir = scratch("typed");
    let p = generate_program("typed", 3, 300, &ilcheck::generate::Config::default()).unwrap();
    let lines = p.manifest.expected_lines();
    for what in [" ret S ", " ret C "] {
        let n = lines.iter().filter(|l| l.contains(what)).count();
        assert!(n >= 10, "only {n} lines with{what}");
    }
    let exe = p.write_to(&dir).unwrap();
    let v = support::run(
        ilcheck()
            .args(["verify", "--level", "unverifiable"])
            .arg(&exe),
    );
    let out = String::from_utf8_lossy(&v.stdout);
    assert!(v.success(), "{}", text(&v));
    assert!(
        out.contains("0 invalid, 0 unverifiable") && out.contains("\n0 findings"),
        "{out}"
    );
    eprintln!("{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `generate` range-checks every count of its config and `--methods-per-assembly` before it
/// generates anything: a value out of range is exit 2 naming the field and its range, nothing
/// written. (Run under a 2 GB address-space limit: `max_switch_targets` of 2^32 - 1 aborted
/// allocating its labels.)
#[test]
fn generate_refuses_counts_out_of_range() {
    let dir = scratch("config-ranges");
    let config = dir.join("c.json");
    let out = dir.join("g");
    let generate = |json: &str, methods: &str| {
        std::fs::write(&config, json).unwrap();
        let script = format!(
            "ulimit -v 2000000; exec '{}' generate -o '{}' --config '{}' --methods-per-assembly {methods}",
            env!("CARGO_BIN_EXE_ilcheck"),
            out.display(),
            config.display()
        );
        support::run(Command::new("sh").arg("-c").arg(script))
    };
    for (json, says) in [
        (
            r#"{"max_switch_targets": 4294967295}"#,
            "max_switch_targets is 4294967295; allowed: 0 to 4096",
        ),
        (
            r#"{"max_switch_targets": 100000000}"#,
            "max_switch_targets is 100000000; allowed: 0 to 4096",
        ),
        (
            r#"{"max_statements": 4294967295}"#,
            "max_statements is 4294967295; allowed: 0 to 10000",
        ),
        (
            r#"{"min_statements": 13}"#,
            "min_statements is 13; allowed: 0 to 12 (at most max_statements)",
        ),
        (
            r#"{"max_nesting": 100000}"#,
            "max_nesting is 100000; allowed: 0 to 64",
        ),
        (
            r#"{"max_expr_depth": 1000}"#,
            "max_expr_depth is 1000; allowed: 0 to 16",
        ),
        (
            r#"{"max_locals": 65535}"#,
            "max_locals is 65535; allowed: 0 to 32768",
        ),
        (
            r#"{"max_callees": 100000}"#,
            "max_callees is 100000; allowed: 0 to 64",
        ),
        (
            r#"{"tiny_percent": 255}"#,
            "tiny_percent is 255; allowed: 0 to 100",
        ),
    ] {
        let o = generate(json, "3");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.code, Some(2), "{json}: {}", text(&o));
        assert!(err.contains(says), "{json}: {err}");
        assert!(!out.join("g1.exe").exists(), "{json}");
    }
    let o = generate("{}", "10001");
    assert_eq!(o.code, Some(2), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("allowed: 0 to 10000"));
    // At the limits, a program is generated (and the 2 GB are plenty).
    let o = generate(
        r#"{"max_switch_targets": 4096, "max_statements": 10000, "max_nesting": 64,
            "max_eh_depth": 64, "max_expr_depth": 16, "max_locals": 32768, "max_args": 1024,
            "max_callees": 64, "max_call_params": 64}"#,
        "3",
    );
    assert!(o.success(), "{}", text(&o));
    assert!(out.join("g1.exe").is_file());
    std::fs::remove_dir_all(&dir).ok();
}

/// Seeds never wrap around: a `--seed` and `--count` whose last seed would pass 2^64 - 1 are
/// refused (exit 2) before anything is written, where they once named the second program
/// `g0.exe`; the last seed itself is fine.
#[test]
fn generate_seeds_do_not_wrap_around() {
    let dir = scratch("seed-wrap");
    let max = u64::MAX.to_string();
    let o = support::run(ilcheck().args(["generate", "-o"]).arg(&dir).args([
        "--seed",
        &max,
        "--count",
        "2",
        "--methods-per-assembly",
        "1",
    ]));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.code, Some(2), "{}", text(&o));
    assert!(err.contains("at most --count 1 from this seed"), "{err}");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    let o = support::run(ilcheck().args(["generate", "-o"]).arg(&dir).args([
        "--seed",
        &max,
        "--count",
        "1",
        "--methods-per-assembly",
        "1",
    ]));
    assert!(o.success(), "{}", text(&o));
    assert!(dir.join(format!("g{max}.exe")).is_file());
    assert!(!dir.join("g0.exe").exists());
    std::fs::remove_dir_all(&dir).ok();
}

/// A directory holding an executable `mono` that is the shell script `body`: put first on PATH,
/// it is the runtime `--runtime mono` finds.
fn fake_mono(dir: &Path, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).unwrap();
    let mono = dir.join("mono");
    std::fs::write(&mono, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&mono, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir.to_path_buf()
}

/// PATH with `dir` first.
fn path_with(dir: &Path) -> std::ffi::OsString {
    let mut dirs = vec![dir.to_path_buf()];
    dirs.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    std::env::join_paths(dirs).unwrap()
}

/// A runtime that crashes or hangs on every program is no pass: `equiv` and `fuzz` (with and
/// without runtime servers, and `--replay`) stop with a set-up error (exit 2) that names the
/// runtime and what it did, and `fuzz` never says "no failures". No real runtime needed.
#[test]
fn a_runtime_that_cannot_run_the_originals_is_a_setup_error() {
    let dir = scratch("broken-runtime");
    let o = support::run(
        ilcheck()
            .args(["generate", "--methods-per-assembly", "5", "-o"])
            .arg(dir.join("gen")),
    );
    assert!(o.success(), "{}", text(&o));
    let g1 = dir.join("gen/g1.exe");
    let copy = "sh -c 'cp \"$1\" \"$2\"' sh {in} {out}";
    for (name, body, said) in [
        ("segv", "kill -SEGV $$", "killed by signal 11"),
        ("hang", "exec sleep 30", "timed out"),
    ] {
        let path = path_with(&fake_mono(&dir.join(name), body));
        let equiv = support::run(
            ilcheck()
                .env("PATH", &path)
                .args(["equiv", "--runtime", "mono", "--run-timeout", "1"])
                .arg(&g1)
                .arg(&g1),
        );
        assert_eq!(equiv.code, Some(2), "{name}: {}", text(&equiv));
        let err = String::from_utf8_lossy(&equiv.stderr);
        assert!(
            err.contains("mono (")
                && err.contains("could not run the original")
                && err.contains(said),
            "{name}: {}",
            text(&equiv)
        );
        for extra in [
            &[][..],
            &["--no-server"],
            &["--replay", g1.to_str().unwrap()],
        ] {
            let mut args = vec![
                "--rewriter",
                copy,
                "--runtime",
                "mono",
                "--run-timeout",
                "1",
            ];
            args.extend(extra);
            if !extra.contains(&"--replay") {
                args.extend(["--cases", "2", "--jobs", "1", "--methods-per-assembly", "5"]);
            }
            let o = support::run(
                ilcheck()
                    .env("PATH", &path)
                    .arg("fuzz")
                    .args(&args)
                    .arg("--keep-failures")
                    .arg(dir.join("kept")),
            );
            assert_eq!(o.code, Some(2), "{name} {extra:?}: {}", text(&o));
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(
                err.contains("cannot run the programs ilcheck generates") && err.contains(said),
                "{name} {extra:?}: {}",
                text(&o)
            );
            assert!(
                !text(&o).contains("no failure"),
                "{name} {extra:?}: {}",
                text(&o)
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A runtime that runs programs but whose runtime server does not start is a set-up error
/// that says so and names `--no-server`; a runtime that runs the check program but crashes on
/// every program of the loop ran nothing: exit 2, no "no failures", and the JSON summary counts
/// the originals it could not run.
#[test]
fn a_runtime_that_fails_later_is_not_a_pass() {
    let test = "a_runtime_that_fails_later_is_not_a_pass";
    let Some(mono) = support::runtimes(test)
        .into_iter()
        .find(|r| r.kind() == ilcheck::harness::RuntimeKind::Mono)
    else {
        return;
    };
    let real = mono.program().display().to_string();
    let dir = scratch("late-runtime");
    let copy = "sh -c 'cp \"$1\" \"$2\"' sh {in} {out}";
    let base = [
        "--rewriter",
        copy,
        "--runtime",
        "mono",
        "--cases",
        "2",
        "--jobs",
        "1",
        "--methods-per-assembly",
        "5",
        "--run-timeout",
        "20",
    ];

    let no_server = fake_mono(
        &dir.join("no-server"),
        &format!(
            "case \"$1\" in *ilcheck-host.exe) echo 'no server here' >&2; exit 4;; esac\nexec {real} \"$@\""
        ),
    );
    let o = support::run(
        ilcheck()
            .env("PATH", path_with(&no_server))
            .arg("fuzz")
            .args(base)
            .arg("--keep-failures")
            .arg(dir.join("kept")),
    );
    assert_eq!(o.code, Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("runtime server did not start")
            && err.contains("no server here")
            && err.contains("--no-server"),
        "{}",
        text(&o)
    );
    // Without servers that runtime is fine.
    let o = support::run(
        ilcheck()
            .env("PATH", path_with(&no_server))
            .arg("fuzz")
            .args(base)
            .args(["--no-server", "--keep-failures"])
            .arg(dir.join("kept")),
    );
    assert!(o.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("no failures"),
        "{}",
        text(&o)
    );

    // The check program (`check.exe`) runs; every generated one crashes.
    let late = fake_mono(
        &dir.join("late"),
        &format!("case \"$1\" in */check.exe) exec {real} \"$@\";; esac\nkill -SEGV $$"),
    );
    let o = support::run(
        ilcheck()
            .env("PATH", path_with(&late))
            .arg("fuzz")
            .args(base)
            .args(["--no-server", "--json", "--keep-failures"])
            .arg(dir.join("kept")),
    );
    assert_eq!(o.code, Some(2), "{}", text(&o));
    let s = summary(&o);
    assert_eq!(s["failed_cases"], 0, "{s}");
    let mono_cases = &s["by_runtime"][0];
    assert_eq!(mono_cases["runtime"], "mono", "{s}");
    assert_eq!(mono_cases["cases"], 2, "{s}");
    assert_eq!(mono_cases["originals_failed"], 2, "{s}");
    assert!(
        mono_cases["first_failure"]
            .as_str()
            .is_some_and(|f| f.contains("killed by signal 11")),
        "{s}"
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("could not run any of the 2 original"),
        "{}",
        text(&o)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `equiv` judges the patched file before running anything: one that is not a .NET assembly
/// is reported as such (exit 1, also as JSON), not as a run whose every line differs; an
/// original or patched file that cannot be read, or an original that is not .NET, is a set-up
/// error (exit 2); `--runtime none`, which has nothing to compare, is neither offered nor taken.
#[test]
fn equiv_tells_files_that_are_not_programs_apart() {
    let dir = scratch("equiv-files");
    let o = support::run(
        ilcheck()
            .args(["generate", "--methods-per-assembly", "5", "-o"])
            .arg(&dir),
    );
    assert!(o.success(), "{}", text(&o));
    let g1 = dir.join("g1.exe");
    let text_dll = dir.join("text.dll");
    std::fs::write(&text_dll, "hello\n").unwrap();
    let o = support::run(ilcheck().arg("equiv").arg(&g1).arg(&text_dll));
    assert_eq!(o.code, Some(1), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("the patched file is not a .NET assembly: not a PE image")
            && !out.contains("result lines differ"),
        "{}",
        text(&o)
    );
    let o = support::run(ilcheck().arg("equiv").arg(&g1).arg(&text_dll).arg("--json"));
    assert_eq!(o.code, Some(1), "{}", text(&o));
    let v: serde_json::Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&o)));
    assert!(
        v["not_dotnet"]
            .as_str()
            .is_some_and(|w| w.contains("not a PE image")),
        "{v}"
    );

    let missing = dir.join("missing.exe");
    for (original, patched, said) in [
        (
            &missing,
            &g1,
            "the original is not a readable .NET assembly",
        ),
        (
            &text_dll,
            &g1,
            "the original is not a readable .NET assembly",
        ),
        (&g1, &missing, "cannot read the patched file"),
    ] {
        let o = support::run(ilcheck().arg("equiv").arg(original).arg(patched));
        assert_eq!(o.code, Some(2), "{}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains(said),
            "{}",
            text(&o)
        );
    }

    let help = support::run(ilcheck().args(["equiv", "--help"]));
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    assert!(help.contains("mono:") && !help.contains("none"), "{help}");
    let o = support::run(
        ilcheck()
            .arg("equiv")
            .arg(&g1)
            .arg(&g1)
            .args(["--runtime", "none"]),
    );
    assert_eq!(o.code, Some(2), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("possible values: mono, coreclr, both"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A program of the user's own (no manifest) that runs to completion and prints no `@` result
/// line is not a broken runtime: equiv says that it compares only result lines (exit 2, nothing
/// compared), and does not blame the runtime.
#[test]
fn equiv_on_a_program_without_result_lines_says_what_it_compares() {
    let test = "equiv_on_a_program_without_result_lines_says_what_it_compares";
    let runtimes = support::runtimes(test);
    if !runtimes
        .iter()
        .any(|r| r.kind() == ilcheck::harness::RuntimeKind::Mono)
    {
        return;
    }
    let program = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/bin/features.exe");
    let o = support::run(
        ilcheck()
            .arg("equiv")
            .arg(&program)
            .arg(&program)
            .args(["--runtime", "mono"]),
    );
    assert_eq!(o.code, Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("ran to completion (exit 0) under mono but printed no result lines")
            && err.contains("equiv compares only `@` result lines")
            && !err.contains("broken or not set up"),
        "{}",
        text(&o)
    );
}
