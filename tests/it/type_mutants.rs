//! The type mutators ([`ilcheck::harness::type_mutants`]): every mutant is caught by the type
//! pass with exactly its expected code and every original is clean; every mutant and original
//! also runs under CoreCLR (and mono), and every method CoreCLR rejects is one ilcheck calls
//! invalid. The agreement table is `reports/type-mutants.md`; regenerate it with
//! `ILCHECK_WRITE_REPORT=1 cargo test --test it type_mutants::` (it needs both runtimes).

use crate::support;

use ilcheck::corpus::{self, Input, VerifyOptions};
use ilcheck::harness::type_mutants::{
    CLASS, MutantMethod, RunResult, TypeMutation, all_methods, build_program, run_methods,
};
use ilcheck::harness::{Runtime, RuntimeKind};
use ilcheck::verify::types::ModuleStore;
use ilcheck::verify::{Code, Level, Verdict};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ilcheck-typemut-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The codes ilcheck reports on each method of the program at `exe`, level unverifiable, by
/// the method's name (without class or signature).
fn findings(exe: &Path) -> BTreeMap<String, BTreeSet<Code>> {
    let store = ModuleStore::with_runtime_dirs(Vec::new());
    let opts = VerifyOptions {
        max_findings: 1_000_000,
        types: true,
        level: Level::Unverifiable,
        ..Default::default()
    };
    let mut report = corpus::VerifyReport::default();
    corpus::verify_with(
        &[Input::named(exe)],
        opts,
        &store,
        None,
        &mut report,
        |_| {},
    );
    assert!(report.image_errors.is_empty(), "{:?}", report.image_errors);
    let types = report.types.as_ref().unwrap();
    // Every method was resolved in full: nothing is missed for want of a reference.
    assert_eq!(types.methods_in_part, 0, "{:?}", types.in_part);
    assert!(types.methods_checked as usize >= all_methods().len());
    let mut out: BTreeMap<String, BTreeSet<Code>> = BTreeMap::new();
    for f in &report.findings {
        let name = f
            .method
            .strip_prefix(&format!("{CLASS}::"))
            .and_then(|n| n.split('(').next())
            .unwrap_or(&f.method)
            .to_string();
        let code = Code::from_name(&f.code).unwrap_or_else(|| panic!("code {}", f.code));
        out.entry(name).or_default().insert(code);
    }
    out
}

fn program(dir: &Path) -> PathBuf {
    let exe = dir.join("TypeMutants.exe");
    std::fs::write(&exe, build_program("TypeMutants", &all_methods()).unwrap()).unwrap();
    exe
}

#[test]
fn every_mutant_is_caught_with_its_expected_code_and_nothing_else_is_flagged() {
    let test = "every_mutant_is_caught_with_its_expected_code_and_nothing_else_is_flagged";
    // The type pass resolves mscorlib's types through the runtimes' directories.
    let dirs = ilcheck::verify::types::runtime_dirs();
    if !support::present(test, "a runtime directory with mscorlib", !dirs.is_empty()) {
        return;
    }
    let dir = scratch("caught");
    let mut found = findings(&program(&dir));
    let mut wrong = Vec::new();
    for m in all_methods() {
        let got = found.remove(&m.name()).unwrap_or_default();
        let want: BTreeSet<Code> = if m.mutated {
            [m.mutation.expected()].into()
        } else {
            BTreeSet::new()
        };
        if got != want {
            wrong.push(format!("{}: got {got:?}, expected {want:?}", m.name()));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // Main, Probe and the exception's constructor are clean too.
    assert!(found.is_empty(), "findings outside the mutants: {found:?}");
    assert_eq!(TypeMutation::ALL.len(), all_methods().len() / 2);
    let _ = std::fs::remove_dir_all(&dir);
}

/// One row of the agreement table.
struct Row {
    method: MutantMethod,
    codes: BTreeSet<Code>,
    runs: Vec<RunResult>,
}

impl Row {
    fn invalid(&self) -> bool {
        self.codes.iter().any(|c| c.verdict() == Verdict::Invalid)
    }
    /// ilcheck's class: `invalid`, `unverifiable` or `clean`.
    fn class(&self) -> &'static str {
        if self.invalid() {
            "invalid"
        } else if self.codes.is_empty() {
            "clean"
        } else {
            "unverifiable"
        }
    }
    fn verdict(&self) -> String {
        if self.codes.is_empty() {
            "clean".into()
        } else {
            let codes: Vec<String> = self.codes.iter().map(|c| c.to_string()).collect();
            format!("{}: {}", self.class(), codes.join(", "))
        }
    }
}

#[test]
fn every_method_coreclr_rejects_is_flagged_invalid_by_ilcheck() {
    let test = "every_method_coreclr_rejects_is_flagged_invalid_by_ilcheck";
    let runtimes = support::runtimes(test);
    let Some(coreclr) = runtimes.iter().find(|r| r.kind() == RuntimeKind::CoreClr) else {
        return;
    };
    let dir = scratch("agree");
    let found = findings(&program(&dir));
    let methods = all_methods();
    let mut runs: Vec<Vec<RunResult>> = vec![Vec::new(); methods.len()];
    // CoreCLR first: the column the assertion is about.
    let mut ordered: Vec<&Runtime> = vec![coreclr];
    ordered.extend(runtimes.iter().filter(|r| r.kind() != RuntimeKind::CoreClr));
    for rt in &ordered {
        let sub = dir.join(rt.kind().name());
        std::fs::create_dir_all(&sub).unwrap();
        let results = run_methods(rt, &sub, &methods, Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("{}: {e}", rt.describe()));
        for (k, r) in results.into_iter().enumerate() {
            runs[k].push(r);
        }
    }
    let rows: Vec<Row> = methods
        .iter()
        .zip(runs)
        .map(|(&method, runs)| Row {
            method,
            codes: found.get(&method.name()).cloned().unwrap_or_default(),
            runs,
        })
        .collect();

    let table = render(&ordered, &rows);
    eprintln!("{table}");
    if std::env::var("ILCHECK_WRITE_REPORT").as_deref() == Ok("1") {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("reports/type-mutants.md");
        ilcheck::fsio::write_atomic(&path, table.as_bytes()).unwrap();
        eprintln!("wrote {}", path.display());
    }

    // The acceptance line: whatever CoreCLR refuses to compile (or dies on), ilcheck calls
    // invalid. Mono is held to the same rule.
    for (k, rt) in ordered.iter().enumerate() {
        let missed: Vec<String> = rows
            .iter()
            .filter(|r| !r.runs[k].compiled() && !r.invalid())
            .map(|r| {
                format!(
                    "{}: ilcheck {}, {}",
                    r.method.name(),
                    r.verdict(),
                    r.runs[k].describe()
                )
            })
            .collect();
        assert!(
            missed.is_empty(),
            "{} rejects, ilcheck does not flag invalid:\n{}",
            rt.describe(),
            missed.join("\n")
        );
        // The originals are type-correct code: every runtime compiles every one.
        for r in rows.iter().filter(|r| !r.method.mutated) {
            assert!(
                r.runs[k].compiled(),
                "{} on {}: {}",
                rt.describe(),
                r.method.name(),
                r.runs[k].describe()
            );
        }
    }
    // The oracle is not vacuous: CoreCLR rejects the integer operations on floats.
    let rejected = rows
        .iter()
        .filter(|r| r.method.mutated && r.runs[0] == RunResult::Rejected)
        .count();
    assert!(rejected >= 3, "CoreCLR rejected only {rejected}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The agreement table as Markdown.
fn render(runtimes: &[&Runtime], rows: &[Row]) -> String {
    let names: Vec<String> = runtimes.iter().map(|r| version(r)).collect();
    let mut s = String::new();
    s.push_str("# Type mutants: ilcheck against the runtimes\n\n");
    s.push_str(
        "Each one-rule type mutation of `ilcheck::harness::type_mutants` is a type-correct method\n\
         (`Orig_*`) beside a copy that breaks one type rule (`Mut_*`), built into one program with\n\
         real metadata. ilcheck's verdict is the type pass at level unverifiable; each runtime\n\
         calls every method inside a `try`/`catch`: *rejected* is `InvalidProgramException` (the JIT\n\
         refused it), *crashed* that the runtime died on it, *ran* that it compiled (and returned or\n\
         threw an ordinary exception). A runtime's JIT is no verifier: code it compiles may still\n\
         compute garbage (an `int64` passed where an `int32` goes, a string's address stored as an\n\
         integer).\n\n\
         Regenerate with `ILCHECK_WRITE_REPORT=1 cargo test --test it type_mutants::` (needs mono\n\
         and CoreCLR: `bash scripts/setup.sh`).\n\n",
    );
    s.push_str(&format!("Runtimes: {}.\n\n", names.join(", ")));

    // Summary counts: ilcheck's class against each runtime's.
    let mutants: Vec<&Row> = rows.iter().filter(|r| r.method.mutated).collect();
    let originals: Vec<&Row> = rows.iter().filter(|r| !r.method.mutated).collect();
    let caught = mutants
        .iter()
        .filter(|r| r.codes == BTreeSet::from([r.method.mutation.expected()]))
        .count();
    s.push_str(&format!(
        "## Summary\n\nilcheck reports the expected code, and only it, on {caught} of {} mutants, and \
         nothing on {} of {} originals.\n\n",
        mutants.len(),
        originals.iter().filter(|r| r.codes.is_empty()).count(),
        originals.len()
    ));
    s.push_str("| methods | ilcheck | ");
    s.push_str(&names.join(" rejected or crashed | "));
    s.push_str(" rejected or crashed |\n|---|---|");
    s.push_str(&"---|".repeat(names.len()));
    s.push('\n');
    for (what, set) in [("mutants", &mutants), ("originals", &originals)] {
        for class in ["invalid", "unverifiable", "clean"] {
            let group: Vec<&&Row> = set.iter().filter(|r| r.class() == class).collect();
            if group.is_empty() {
                continue;
            }
            s.push_str(&format!("| {what} ({}) | {class} |", group.len()));
            for k in 0..names.len() {
                let n = group.iter().filter(|r| !r.runs[k].compiled()).count();
                s.push_str(&format!(" {n} of {} |", group.len()));
            }
            s.push('\n');
        }
    }

    s.push_str(
        "\nEvery method a runtime rejects or crashes on is flagged invalid by ilcheck, and every\n\
         original compiles on every runtime (both asserted by the test).\n",
    );
    for (k, name) in names.iter().enumerate() {
        let ran: Vec<String> = mutants
            .iter()
            .filter(|r| r.invalid() && r.runs[k].compiled())
            .map(|r| format!("`{}`", r.method.mutation.name()))
            .collect();
        s.push_str(&format!(
            "\n{name} compiled {} of the {} mutants ilcheck calls invalid{}\n",
            ran.len(),
            mutants.iter().filter(|r| r.invalid()).count(),
            if ran.is_empty() {
                ".".to_string()
            } else {
                format!(": {}.", ran.join(", "))
            }
        ));
    }

    s.push_str("\n## Per mutation\n\n| mutation | expected | ilcheck on the mutant | ");
    s.push_str(&names.join(" | "));
    s.push_str(" | originals |\n|---|---|---|");
    s.push_str(&"---|".repeat(names.len() + 1));
    s.push('\n');
    for pair in rows.chunks(2) {
        let (orig, mutant) = (&pair[0], &pair[1]);
        s.push_str(&format!(
            "| `{}`: {} | {} | {} |",
            mutant.method.mutation.name(),
            mutant.method.mutation.description(),
            mutant.method.mutation.expected(),
            mutant.verdict()
        ));
        for r in &mutant.runs {
            s.push_str(&format!(" {} |", r.describe()));
        }
        let orig_runs: Vec<String> = orig.runs.iter().map(RunResult::describe).collect();
        s.push_str(&format!(
            " ilcheck {}; {} |\n",
            orig.verdict(),
            orig_runs.join(" / ")
        ));
    }
    s
}

/// `CoreCLR 3.1.23`, `mono 6.8.0.105`: the runtime and its version.
fn version(r: &Runtime) -> String {
    match r.kind() {
        RuntimeKind::CoreClr => {
            // `describe` is `coreclr 3.1.23 (path)`.
            let d = r.describe();
            let v = d.split_whitespace().nth(1).unwrap_or("?").to_string();
            format!("CoreCLR {v}")
        }
        RuntimeKind::Mono => {
            let out = support::run(std::process::Command::new(r.program()).arg("--version"));
            let text = String::from_utf8_lossy(&out.stdout);
            let v = text
                .split("version ")
                .nth(1)
                .and_then(|t| t.split_whitespace().next())
                .unwrap_or("?")
                .to_string();
            format!("mono {v}")
        }
    }
}
