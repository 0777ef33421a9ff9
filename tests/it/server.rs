//! Runtime servers against processes of their own: the same programs print the same output
//! through both, under mono and CoreCLR — generated programs, and rewritten ones that call a
//! probe assembly beside them — and a program that hangs, crashes the runtime, exits the
//! process, throws out of `Main` or sets an exit code ends exactly as it does in a process of
//! its own, after which the same executor runs the next program through a new server; one that
//! prints without a final newline, reads its input, replaces `Console.Out` or prints its
//! working directory prints the same lines both ways.

use crate::support;

use ilcheck::harness::program::result_lines;
use ilcheck::harness::{Executor, Host, Outcome, Runtime, ServerOptions};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

fn ilcheck() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ilcheck"))
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ilcheck-server-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn text(o: &Outcome) -> String {
    format!(
        "{}\n--- stdout\n{}\n--- stderr\n{}",
        o.describe(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn served(rt: &Runtime, host: &Host, restart_after: u32) -> Executor {
    Executor::with_servers(
        rt.clone(),
        ServerOptions {
            host: host.clone(),
            restart_after,
        },
    )
}

/// Generated programs and their copies rewritten by `ilcheck rewrite` to call a probe assembly
/// beside them: through a server (restarted every 4 programs), standard output and standard
/// error are byte for byte those of a process of their own, and the result lines are the
/// manifests'.
#[test]
fn servers_print_what_processes_of_their_own_print() {
    let test = "servers_print_what_processes_of_their_own_print";
    let runtimes = support::runtimes(test);
    if runtimes.is_empty() || !support::mono_tool(test, "mcs") {
        return;
    }
    let dir = scratch("same");
    let o = support::run(
        ilcheck()
            .args([
                "generate",
                "--count",
                "3",
                "--methods-per-assembly",
                "40",
                "--seed",
                "900",
                "-o",
            ])
            .arg(dir.join("original")),
    );
    assert!(o.success(), "{}", text(&o));
    std::fs::create_dir_all(dir.join("probe")).unwrap();
    let probe = support::build_probe(&dir.join("probe"));
    let rewritten = dir.join("rewritten");
    let o = support::run(
        ilcheck()
            .arg("rewrite")
            .arg(dir.join("original"))
            .arg("-o")
            .arg(&rewritten)
            .args([
                "-t",
                "prologue",
                "--prologue-call",
                "void [Acme.Probe]Acme.Probe::Enter(string, int32)",
                "--reference",
            ])
            .arg(&probe),
    );
    assert!(o.success(), "{}", text(&o));
    std::fs::copy(&probe, rewritten.join("Acme.Probe.dll")).unwrap();
    let mut programs = Vec::new();
    for k in 900..903 {
        let manifest = dir.join("original").join(format!("g{k}.manifest.json"));
        let m: ilcheck::harness::program::Manifest =
            serde_json::from_str(&std::fs::read_to_string(manifest).unwrap()).unwrap();
        for sub in ["original", "rewritten"] {
            programs.push((dir.join(sub).join(format!("g{k}.exe")), m.clone()));
        }
    }
    let host = Host::write(&dir.join("host")).unwrap();
    let timeout = Duration::from_secs(120);
    for rt in &runtimes {
        let mut server = served(rt, &host, 4);
        for (p, m) in &programs {
            let fresh = rt.run(p, &[], timeout).unwrap();
            let through = server.run(p, timeout).unwrap();
            assert!(fresh.success(), "{}: {}", p.display(), text(&fresh));
            assert!(through.success(), "{}: {}", p.display(), text(&through));
            assert_eq!(
                String::from_utf8_lossy(&through.stdout),
                String::from_utf8_lossy(&fresh.stdout),
                "{} under {}: standard output",
                p.display(),
                rt.describe()
            );
            assert_eq!(
                String::from_utf8_lossy(&through.stderr),
                String::from_utf8_lossy(&fresh.stderr),
                "{} under {}: standard error",
                p.display(),
                rt.describe()
            );
            let out = String::from_utf8_lossy(&through.stdout);
            let lines = result_lines(&out);
            // Mono's optimiser gets a few generated methods wrong; both ways alike (above).
            if rt.kind() == ilcheck::harness::RuntimeKind::CoreClr {
                assert_eq!(lines, m.expected_lines(), "{}", p.display());
            }
            if p.starts_with(&rewritten) {
                assert!(
                    String::from_utf8_lossy(&through.stderr).contains("enter Ilcheck.Program::M0"),
                    "the probe beside the rewritten program ran: {}",
                    text(&through)
                );
            }
        }
        let s = server.stats();
        assert_eq!(
            (s.served, s.fresh, s.fallbacks, s.started),
            (6, 0, 0, 2),
            "{}: {s:?}",
            rt.describe()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Each misbehaving program ends through a server exactly as in a process of its own — exit
/// code, signal, timeout, result lines — and the same executor then runs a well-behaved
/// program; only the programs that ended well were the servers' answers, and every other but
/// the one that hangs (whose deadline is its outcome) ran again in a process of its own.
#[test]
fn misbehaving_programs_end_as_in_processes_of_their_own() {
    let test = "misbehaving_programs_end_as_in_processes_of_their_own";
    let runtimes = support::runtimes(test);
    if runtimes.is_empty() || !support::mono_tool(test, "mcs") {
        return;
    }
    let dir = scratch("misbehave");
    let fine = support::build_misbehaving(&dir, "FINE");
    let cases: Vec<(&str, PathBuf, bool)> = [
        ("HANG", false),
        ("FAILFAST", false),
        ("EXIT0", false),
        ("EXIT3", false),
        ("THROW", false),
        ("EXITCODE", false),
        ("NO_NEWLINE", true),
        ("STDIN", true),
        ("SETOUT", true),
        ("CWD", true),
    ]
    .into_iter()
    .map(|(d, answered)| (d, support::build_misbehaving(&dir, d), answered))
    .collect();
    let host = Host::write(&dir.join("host")).unwrap();
    // Long enough for any well-behaved run on a busy machine; short for the one that hangs.
    let long = Duration::from_secs(60);
    let hang = Duration::from_secs(2);
    for rt in &runtimes {
        let mut server = served(rt, &host, 100);
        let mut expected_fallbacks = 0;
        let mut ends = Vec::new();
        for (define, exe, answered) in &cases {
            let timeout = if *define == "HANG" { hang } else { long };
            let fresh = rt.run(exe, &[], timeout).unwrap();
            ends.push(format!("{define}: {}", fresh.describe()));
            let through = server.run(exe, timeout).unwrap();
            let what = format!("{define} under {}", rt.describe());
            assert_eq!(
                (through.code, through.signal, through.timed_out),
                (fresh.code, fresh.signal, fresh.timed_out),
                "{what}: fresh {}\nserver {}",
                text(&fresh),
                text(&through)
            );
            let (f, t) = (
                String::from_utf8_lossy(&fresh.stdout),
                String::from_utf8_lossy(&through.stdout),
            );
            assert_eq!(result_lines(&t), result_lines(&f), "{what}");
            // A hang ends at its deadline in the server too: it is not run again fresh.
            if !answered && *define != "HANG" {
                expected_fallbacks += 1;
            }
            assert_eq!(server.stats().fallbacks, expected_fallbacks, "{what}");
            // The next program runs, through a server again.
            let served_before = server.stats().served;
            let next = server.run(&fine, long).unwrap();
            assert!(next.success(), "{what}, then FINE: {}", text(&next));
            assert_eq!(
                result_lines(&String::from_utf8_lossy(&next.stdout)),
                ["@ before"],
                "{what}, then FINE"
            );
            assert_eq!(server.stats().served, served_before + 1, "{what}");
        }
        // How they ended, in processes of their own and so through the servers.
        eprintln!("{}: {}", rt.describe(), ends.join(", "));
        let end = |d: &str| ends.iter().find(|e| e.starts_with(d)).unwrap().clone();
        assert!(end("HANG").contains("timed out"), "{ends:?}");
        assert_eq!(end("EXIT3"), "EXIT3: exit code 3");
        assert_eq!(end("EXITCODE"), "EXITCODE: exit code 5");
        assert_eq!(end("EXIT0"), "EXIT0: exit code 0");
        let s = server.stats();
        assert_eq!(s.fallbacks, 5, "{s:?}");
        assert_eq!(s.fresh, 5, "{s:?}");
        assert_eq!(s.timeouts, 1, "{s:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
