//! Differential runs: a program and its rewritten copy under the same runtime, result line by
//! result line (see [`program`](super::program) for the lines).
//!
//! The original's own output is the reference for each runtime. Where the original disagrees
//! with the manifest's expected line (the interpreter's), the runtime itself got that method
//! wrong — mono 6.8's optimiser miscompiles a few generated methods — and the line is not
//! compared, but counted: a rewrite that perturbs a runtime's defect is not the rewriter's
//! bug.

use super::process::Outcome;
use super::program::result_lines;
use super::runtime::{Runtime, RuntimeError, RuntimeKind};
use super::server::Executor;
use serde::Serialize;
use std::path::Path;
use std::time::Duration;

/// Exception types with which a runtime refuses code rather than running it.
pub const REJECTIONS: [&str; 6] = [
    "System.InvalidProgramException",
    "System.Security.VerificationException",
    "System.BadImageFormatException",
    "System.MissingMethodException",
    "System.MissingFieldException",
    "System.TypeLoadException",
];

/// One result line that differs.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct LineDiff {
    /// The method (`M3`).
    pub method: String,
    /// The original's line (or what the manifest expects when the original printed none).
    pub original: String,
    /// The rewritten program's line; empty when it printed none.
    pub rewritten: String,
    /// The rewritten line reports an exception a runtime throws for code it refuses.
    pub rejected: bool,
}

/// How a program ran, in short.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct RunSummary {
    /// `exit code 0`, `killed by signal 6`, `timed out after 20.0 s`.
    pub ended: String,
    /// Whether it exited with 0 in time.
    pub ok: bool,
    /// Whether its deadline passed (it was killed with its process group).
    pub timed_out: bool,
    /// The first lines of its standard error.
    pub stderr_tail: String,
    /// Result lines printed.
    pub result_lines: usize,
    /// Where the runtime failed in its own code, when it did (see [`runtime_defect`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub defect: Option<String>,
    /// The runtime's own line about it (`* Assertion at mini.c:2648, condition … not met`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub defect_message: Option<String>,
}

/// The line in which a runtime says it failed in its own code (see [`runtime_defect`]).
fn defect_message(o: &Outcome) -> Option<String> {
    const MARKS: [&str; 5] = [
        "* Assertion",
        "Got a SIG",
        "Internal CLR error",
        "Assert failure",
        "Fatal error",
    ];
    [&o.stderr, &o.stdout].into_iter().find_map(|bytes| {
        String::from_utf8_lossy(bytes)
            .lines()
            .find(|l| MARKS.iter().any(|m| l.contains(m)))
            .map(|l| l.trim().chars().take(400).collect())
    })
}

/// Where a runtime died in its own code rather than in the program's: an internal assertion
/// (mono: `* Assertion at mini.c:2648, condition …` → `mini.c:2648`), a native crash (mono's
/// crash report → `native-SIGSEGV`; a fatal signal without a managed exception), or CoreCLR's
/// internal error. A runtime should refuse bad code with an exception, so such an end is a
/// defect of the runtime whatever the code; a stack overflow is not one (the program can cause
/// it), nor is an unhandled managed exception.
pub fn runtime_defect(runtime: RuntimeKind, o: &Outcome) -> Option<String> {
    if o.success() || o.timed_out {
        return None;
    }
    let text = [
        String::from_utf8_lossy(&o.stderr),
        String::from_utf8_lossy(&o.stdout),
    ]
    .join("\n");
    if text.contains("Stack overflow") || text.contains("StackOverflowException") {
        return None;
    }
    let after = |mark: &str| {
        text.find(mark).map(|i| {
            text[i + mark.len()..]
                .split([',', '\n'])
                .next()
                .unwrap_or("")
                .trim()
                .to_string()
        })
    };
    let found = match runtime {
        RuntimeKind::Mono => after("* Assertion at ")
            .or_else(|| after("* Assertion: should not be reached at "))
            .or_else(|| {
                after("Got a SIG").map(|sig| {
                    let name: String = sig.chars().take_while(char::is_ascii_uppercase).collect();
                    format!("native-SIG{name}")
                })
            }),
        RuntimeKind::CoreClr => {
            if text.contains("Internal CLR error") {
                Some("internal-error".to_string())
            } else {
                after("Assert failure").map(|_| "assert".to_string())
            }
        }
    };
    found.filter(|f| !f.is_empty()).or_else(|| {
        // Killed by a fatal signal with no managed exception said.
        let fatal = matches!(o.signal, Some(4 | 6 | 7 | 8 | 11));
        (fatal && !text.contains("Unhandled exception") && !text.contains("Unhandled Exception"))
            .then(|| format!("signal-{}", o.signal.unwrap_or(0)))
    })
}

impl RunSummary {
    fn of(runtime: RuntimeKind, o: &Outcome, lines: usize) -> Self {
        // A crash's message comes first (mono: "* Assertion at …"); the stack after it.
        let err = String::from_utf8_lossy(&o.stderr);
        let head: Vec<&str> = err
            .lines()
            .filter(|l| !l.trim().is_empty())
            .take(16)
            .collect();
        let defect = runtime_defect(runtime, o);
        RunSummary {
            ended: o.describe(),
            ok: o.success(),
            timed_out: o.timed_out,
            stderr_tail: head.join("\n"),
            result_lines: lines,
            defect_message: defect.as_ref().and_then(|_| defect_message(o)),
            defect,
        }
    }
}

/// One runtime's comparison of the two programs.
#[derive(Clone, Debug, Serialize)]
pub struct RuntimeComparison {
    /// `mono` or `coreclr`.
    pub runtime: String,
    /// How the original ran.
    pub original: RunSummary,
    /// How the rewritten program ran.
    pub rewritten: RunSummary,
    /// Result lines that differ (lines the runtime got wrong on the original left out).
    pub diffs: Vec<LineDiff>,
    /// Methods whose original result lines differ from the manifest under this runtime: not
    /// compared.
    pub runtime_disagrees: Vec<String>,
    /// Lines compared.
    pub compared: usize,
    /// Why the runtime could not run the original, when it ran it and could not: it crashed,
    /// hung or exited non-zero, or printed no result lines, or another number of them than
    /// the manifest lists. The original is the reference, so what it did not print was not
    /// compared: the runtime (or its set-up) is at fault, not the rewrite.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub original_failed: Option<String>,
}

impl RuntimeComparison {
    /// The rewritten program crashed, hung or exited non-zero where the original did not.
    pub fn crashed(&self) -> bool {
        self.original.ok && !self.rewritten.ok
    }

    /// Some rewritten line reports code the runtime refused.
    pub fn rejected(&self) -> bool {
        self.diffs.iter().any(|d| d.rejected)
    }

    /// Nothing differs.
    pub fn same(&self) -> bool {
        !self.crashed() && self.diffs.is_empty()
    }
}

/// Why a run of an original program is no reference (see
/// [`RuntimeComparison::original_failed`]): `lines` result lines printed, `expected` the
/// manifest's count when known.
pub fn original_failure(o: &Outcome, lines: usize, expected: Option<usize>) -> Option<String> {
    let why = if !o.success() {
        let how = if o.timed_out {
            o.describe()
        } else if let Some(code) = o.code {
            format!("exited with code {code}")
        } else if let Some(signal) = o.signal {
            format!("was killed by signal {signal}")
        } else {
            o.describe()
        };
        // The runtime's first line of complaint says more than the exit status alone.
        let err = String::from_utf8_lossy(&o.stderr);
        match err.lines().map(str::trim).find(|l| !l.is_empty()) {
            Some(first) => format!("{how} ({})", first.chars().take(200).collect::<String>()),
            None => how,
        }
    } else if lines == 0 {
        "exited 0 without printing a result line".to_string()
    } else {
        match expected {
            Some(n) if n != lines => {
                format!("printed {lines} result line(s) where its manifest lists {n}")
            }
            _ => return None,
        }
    };
    Some(why)
}

fn method_of(line: &str) -> String {
    line.strip_prefix(super::program::RESULT_MARK)
        .and_then(|l| l.split('#').next())
        .unwrap_or("")
        .to_string()
}

/// Compares result lines: the original's are the reference where they agree with `expected`
/// (when given).
pub fn compare_lines(
    original: &[&str],
    rewritten: &[&str],
    expected: Option<&[String]>,
) -> (Vec<LineDiff>, Vec<String>, usize) {
    let mut diffs = Vec::new();
    let mut disagrees: Vec<String> = Vec::new();
    let mut compared = 0;
    let n = original
        .len()
        .max(rewritten.len())
        .max(expected.map_or(0, <[String]>::len));
    for i in 0..n {
        let e = expected.and_then(|e| e.get(i)).map(String::as_str);
        // A line the original does not print, or prints otherwise than the interpreter
        // expects: the runtime itself fails that method (crashes, miscompiles), so the
        // rewritten program's line says nothing about the rewriter.
        let Some(o) = original.get(i).copied() else {
            if let Some(e) = e {
                let m = method_of(e);
                if disagrees.last() != Some(&m) {
                    disagrees.push(m);
                }
            }
            continue;
        };
        if let Some(e) = e
            && o != e
        {
            let m = method_of(e);
            if disagrees.last() != Some(&m) {
                disagrees.push(m);
            }
            continue;
        }
        compared += 1;
        let r = rewritten.get(i).copied().unwrap_or("");
        if r != o {
            diffs.push(LineDiff {
                method: method_of(o),
                original: o.to_string(),
                rewritten: r.to_string(),
                rejected: REJECTIONS.iter().any(|x| r.contains(x))
                    && !REJECTIONS.iter().any(|x| o.contains(x)),
            });
        }
    }
    (diffs, disagrees, compared)
}

/// Runs both programs under `runtime`, each in a process of its own, and compares them (see
/// [`compare_with`]).
pub fn compare_on(
    runtime: &Runtime,
    original: &Path,
    rewritten: &Path,
    expected: Option<&[String]>,
    timeout: Duration,
) -> Result<RuntimeComparison, RuntimeError> {
    let mut exec = Executor::fresh(runtime.clone());
    compare_with(&mut exec, original, rewritten, expected, timeout)
}

/// Runs both programs through `exec` (a server, or processes of their own) and compares them.
/// With the expected lines, the rewritten program runs first, and the original only when
/// something differs from them (to tell the rewriter's differences from the runtime's own): a
/// clean case costs one run.
pub fn compare_with(
    exec: &mut Executor,
    original: &Path,
    rewritten: &Path,
    expected: Option<&[String]>,
    timeout: Duration,
) -> Result<RuntimeComparison, RuntimeError> {
    let kind = exec.runtime().kind();
    let name = kind.name().to_string();
    let r = exec.run(rewritten, timeout)?;
    if let Some(e) = expected
        && r.success()
    {
        let rs = String::from_utf8_lossy(&r.stdout);
        let rl = result_lines(&rs);
        if rl.len() == e.len() && rl.iter().zip(e).all(|(a, b)| a == b) {
            return Ok(RuntimeComparison {
                runtime: name,
                original: RunSummary {
                    ended: "not run: the rewritten program printed the expected lines".into(),
                    ok: true,
                    timed_out: false,
                    stderr_tail: String::new(),
                    result_lines: e.len(),
                    defect: None,
                    defect_message: None,
                },
                rewritten: RunSummary::of(kind, &r, rl.len()),
                diffs: Vec::new(),
                runtime_disagrees: Vec::new(),
                compared: e.len(),
                original_failed: None,
            });
        }
    }
    let o = exec.run(original, timeout)?;
    let (os, rs) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&r.stdout),
    );
    let (ol, rl) = (result_lines(&os), result_lines(&rs));
    let (diffs, runtime_disagrees, compared) = compare_lines(&ol, &rl, expected);
    Ok(RuntimeComparison {
        runtime: name,
        original: RunSummary::of(kind, &o, ol.len()),
        rewritten: RunSummary::of(kind, &r, rl.len()),
        diffs,
        runtime_disagrees,
        compared,
        original_failed: original_failure(&o, ol.len(), expected.map(<[String]>::len)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended(code: Option<i32>, signal: Option<i32>, stdout: &str, stderr: &str) -> Outcome {
        Outcome {
            code,
            signal,
            timed_out: false,
            stdout: stdout.as_bytes().to_vec(),
            stderr: stderr.as_bytes().to_vec(),
            truncated: false,
            elapsed: Duration::from_millis(5),
        }
    }

    #[test]
    fn a_runtime_dying_in_its_own_code_is_told_from_the_program_failing() {
        use RuntimeKind::{CoreClr, Mono};
        let assert =
            "enter M\n* Assertion at mini.c:2648, condition `tblock->native_offset' not met\n";
        assert_eq!(
            runtime_defect(Mono, &ended(None, Some(6), "", assert)).as_deref(),
            Some("mini.c:2648")
        );
        let segv =
            "=====\n\tNative Crash Reporting\n=====\nGot a SIGSEGV while executing native code.";
        assert_eq!(
            runtime_defect(Mono, &ended(None, Some(6), "", segv)).as_deref(),
            Some("native-SIGSEGV")
        );
        assert_eq!(
            runtime_defect(
                CoreClr,
                &ended(
                    None,
                    Some(6),
                    "",
                    "Fatal error. Internal CLR error. (0x80131506)"
                )
            )
            .as_deref(),
            Some("internal-error")
        );
        assert_eq!(
            runtime_defect(CoreClr, &ended(None, Some(11), "", "")).as_deref(),
            Some("signal-11")
        );
        // The program's own ends are not the runtime's defects.
        let unhandled = "Unhandled Exception:\nSystem.InvalidProgramException: Invalid IL code";
        assert_eq!(
            runtime_defect(Mono, &ended(Some(1), None, "", unhandled)),
            None
        );
        assert_eq!(
            runtime_defect(
                CoreClr,
                &ended(
                    None,
                    Some(6),
                    "",
                    "Unhandled exception. System.Exception: x"
                )
            ),
            None
        );
        assert_eq!(
            runtime_defect(CoreClr, &ended(None, Some(6), "", "Stack overflow.")),
            None
        );
        assert_eq!(
            runtime_defect(Mono, &ended(Some(0), None, assert, "")),
            None
        );
        let mut hung = ended(None, Some(9), "", "");
        hung.timed_out = true;
        assert_eq!(runtime_defect(Mono, &hung), None);
    }

    #[test]
    fn an_original_that_does_not_run_as_generated_is_no_reference() {
        let why = |o: &Outcome, lines, expected| original_failure(o, lines, expected);
        assert_eq!(why(&ended(Some(0), None, "", ""), 3, Some(3)), None);
        assert_eq!(why(&ended(Some(0), None, "", ""), 3, None), None);
        assert_eq!(
            why(&ended(None, Some(11), "", ""), 0, Some(3)).as_deref(),
            Some("was killed by signal 11")
        );
        assert_eq!(
            why(
                &ended(Some(1), None, "", "\nCannot open assembly\nmore"),
                0,
                Some(3)
            )
            .as_deref(),
            Some("exited with code 1 (Cannot open assembly)")
        );
        assert_eq!(
            why(&ended(Some(0), None, "", ""), 0, None).as_deref(),
            Some("exited 0 without printing a result line")
        );
        assert_eq!(
            why(&ended(Some(0), None, "", ""), 2, Some(3)).as_deref(),
            Some("printed 2 result line(s) where its manifest lists 3")
        );
        let mut hung = ended(None, Some(9), "", "");
        hung.timed_out = true;
        assert_eq!(
            why(&hung, 0, Some(3)).as_deref(),
            Some("timed out after 0.0 s")
        );
    }

    #[test]
    fn lines_the_runtime_got_wrong_are_not_compared() {
        let expected: Vec<String> = ["@ M0#0 ret 1 trace 0", "@ M1#0 ret 2 trace 0"]
            .map(String::from)
            .to_vec();
        let original = ["@ M0#0 ret 1 trace 0", "@ M1#0 ret 3 trace 0"];
        let rewritten = [
            "@ M0#0 exception System.InvalidProgramException trace 0",
            "@ M1#0 ret 4 trace 0",
        ];
        let (diffs, disagrees, compared) = compare_lines(&original, &rewritten, Some(&expected));
        assert_eq!(compared, 1);
        assert_eq!(disagrees, ["M1"]);
        assert_eq!(diffs.len(), 1);
        assert!(diffs[0].rejected);
        assert_eq!(diffs[0].method, "M0");
        // A rewritten program that stops early: the missing lines differ.
        let (diffs, _, _) = compare_lines(&original[..1], &[], None);
        assert_eq!(diffs[0].rewritten, "");
        assert!(!diffs[0].rejected);
        // An original that stops early (the runtime crashed on it): its missing lines are the
        // runtime's, not compared.
        let (diffs, disagrees, compared) = compare_lines(&original[..1], &[], Some(&expected));
        assert_eq!((diffs.len(), compared), (1, 1));
        assert_eq!(disagrees, ["M1"]);
    }
}
