//! Golden tests of `verify`'s output — text, JSON, SARIF and the Markdown report — on a small
//! fixed set of assemblies with known defects, built here by the project's own writer
//! (`AssemblyBuilder`: the same calls give the same bytes):
//!
//! - `defects.dll`: a stack underflow, two depths meeting at a join, overlapping clauses, a
//!   `leave` out of a finally, a value left on a void method's stack in a type whose name holds
//!   a backtick, a body that does not decode, and a clean method; beside it `notes.dll`, a text
//!   file, which cannot be read (exit 2, with the reason);
//! - `patched/` against `original/`: `renamed.dll` is `app.dll` under another file name (paired
//!   by assembly identity) with both cases of a `switch` retargeted (two findings at one
//!   instruction, merged) and a stack underflow the original had too (suppressed);
//!   `stranger.dll` has no original (a warning, and its finding reported as new).
//!
//! Their references to `mscorlib` resolve to a stub core library in `refs/` (`--reference-dir
//! refs`), so that what the type pass reads does not depend on the runtimes installed.
//!
//! The outputs are compared with the files in `tests/golden/`, timings and the tool's version
//! normalised. After a deliberate change of output, re-bless them with
//! `ILCHECK_BLESS=1 cargo test --test it golden::` and review the diff. The JSON is validated
//! against `docs/schemas/verify.schema.json` and the SARIF against SARIF 2.1.0's published
//! schema (`corpus/schemas/sarif-2.1.0.json`) with Python's `jsonschema`, which
//! `scripts/setup.sh` installs; without it the validation is skipped loudly, or fails under
//! `ILCHECK_REQUIRE_MONO=1`.

use crate::support;

use ilcheck::body::{BodyParts, Clause};
use ilcheck::image::emit::AssemblyIdentity;
use ilcheck::image::emit::assembly::{AssemblyBuilder, ImageKind, SigType, flags, method_sig};
use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_ilcheck");

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A tiny body: header byte and code.
fn tiny(code: &[u8]) -> Vec<u8> {
    let mut out = vec![((code.len() as u8) << 2) | 2];
    out.extend_from_slice(code);
    out
}

/// A fat body with an EH table, in canonical form.
fn with_clauses(code: &[u8], clauses: Vec<Clause>) -> Vec<u8> {
    let parts = BodyParts {
        max_stack: 1,
        init_locals: false,
        local_sig: 0,
        code,
        clauses,
        raw_sections: Vec::new(),
    };
    let mut out = Vec::new();
    parts.encode_canonical(&mut out).unwrap();
    out
}

fn clause(flags: u32, r#try: (u32, u32), handler: (u32, u32), class: u32) -> Clause {
    Clause {
        flags,
        try_offset: r#try.0,
        try_length: r#try.1 - r#try.0,
        handler_offset: handler.0,
        handler_length: handler.1 - handler.0,
        class_or_filter: class,
    }
}

fn mscorlib() -> AssemblyIdentity {
    AssemblyIdentity {
        name: "mscorlib".into(),
        version: [4, 0, 0, 0],
        culture: String::new(),
        public_key_or_token: vec![0xB7, 0x7A, 0x5C, 0x56, 0x19, 0x34, 0xE0, 0x89],
        full_public_key: false,
    }
}

const STATIC: u16 = flags::METHOD_PUBLIC | flags::METHOD_STATIC | flags::METHOD_HIDE_BY_SIG;

/// `defects.dll`: one method per kind of finding the reports render differently.
fn defects() -> Vec<u8> {
    let mut b = AssemblyBuilder::new("Golden.Defects", [1, 2, 3, 4], ImageKind::Dll).unwrap();
    let corlib = b.assembly_ref(&mscorlib()).unwrap();
    let object = b.type_ref(corlib, "System", "Object").unwrap();
    let exception = b.type_ref(corlib, "System", "Exception").unwrap().0;
    let void0 = method_sig(false, SigType::Void, &[]).unwrap();
    let void_i4 = method_sig(false, SigType::Void, &[SigType::I4]).unwrap();
    b.type_def(flags::TYPE_PUBLIC, "Golden", "Defects", Some(object))
        .unwrap();
    b.method(STATIC, "Clean", &void0, &tiny(&[0x2A])).unwrap();
    // pop; ret
    b.method(STATIC, "Underflow", &void0, &tiny(&[0x26, 0x2A]))
        .unwrap();
    // ldarg.0; brtrue.s IL_0004; ldc.i4.1; IL_0004: nop; ret — depth 0 by the branch, 1
    // falling through.
    let join = [0x02, 0x2D, 0x01, 0x17, 0x00, 0x2A];
    b.method(STATIC, "Join", &void_i4, &tiny(&join)).unwrap();
    // nop; leave.s; nop; leave.s; pop; leave.s; pop; leave.s; ret — the second try starts
    // inside the first and ends after it.
    let overlap = [
        0x00, 0xDE, 0x09, 0x00, 0xDE, 0x06, 0x26, 0xDE, 0x03, 0x26, 0xDE, 0x00, 0x2A,
    ];
    let clauses = vec![
        clause(0, (0, 3), (6, 9), exception),
        clause(0, (1, 4), (9, 12), exception),
    ];
    b.method(STATIC, "Overlap", &void0, &with_clauses(&overlap, clauses))
        .unwrap();
    // leave.s IL_0004 (the try); leave.s IL_0004 (the finally); ret
    let leave = [0xDE, 0x02, 0xDE, 0x00, 0x2A];
    let clauses = vec![clause(Clause::FLAG_FINALLY, (0, 2), (2, 4), 0)];
    b.method(
        STATIC,
        "LeaveFinally",
        &void0,
        &with_clauses(&leave, clauses),
    )
    .unwrap();
    // A fat header declaring 1 MiB of code.
    let broken = [
        0x03, 0x30, 0x08, 0x00, 0x00, 0x00, 0x10, 0x00, 0, 0, 0, 0, 0x2A,
    ];
    b.method(STATIC, "Broken", &void0, &broken).unwrap();
    b.type_def(flags::TYPE_PUBLIC, "Golden", "Box`1", Some(object))
        .unwrap();
    // ldc.i4.0; ret from a void method.
    b.method(STATIC, "Get", &void0, &tiny(&[0x16, 0x2A]))
        .unwrap();
    // ldc.i4.8; dup; localloc; pop; pop; ret — Roslyn's stackalloc into a Span keeps the size
    // under localloc's: unverifiable (LocallocStackNotEmpty), not reported at the default level.
    let stackalloc = [0x1E, 0x25, 0xFE, 0x0F, 0x26, 0x26, 0x2A];
    b.method(STATIC, "Stackalloc", &void0, &tiny(&stackalloc))
        .unwrap();
    b.build().unwrap()
}

/// `Golden.App` 2.0: `Pick` switches to two `nop`s before a `ret`; `patched` retargets both
/// cases onto the `ret`. `Old` underflows in both.
fn app(patched: bool) -> Vec<u8> {
    let mut b = AssemblyBuilder::new("Golden.App", [2, 0, 0, 0], ImageKind::Dll).unwrap();
    let corlib = b.assembly_ref(&mscorlib()).unwrap();
    let object = b.type_ref(corlib, "System", "Object").unwrap();
    let void0 = method_sig(false, SigType::Void, &[]).unwrap();
    let void_i4 = method_sig(false, SigType::Void, &[SigType::I4]).unwrap();
    b.type_def(flags::TYPE_PUBLIC, "Golden", "App", Some(object))
        .unwrap();
    b.method(STATIC, "Fine", &void0, &tiny(&[0x2A])).unwrap();
    b.method(STATIC, "Old", &void0, &tiny(&[0x26, 0x2A]))
        .unwrap();
    // IL_0000 ldarg.0; IL_0001 switch (IL_0010, IL_0011); IL_000e br.s IL_0012;
    // IL_0010 nop; IL_0011 nop; IL_0012 ret.
    let (a, c) = if patched { (4, 4) } else { (2, 3) };
    let mut code = vec![0x02, 0x45, 2, 0, 0, 0];
    code.extend_from_slice(&i32::to_le_bytes(a));
    code.extend_from_slice(&i32::to_le_bytes(c));
    code.extend_from_slice(&[0x2B, 0x02, 0x00, 0x00, 0x2A]);
    b.method(STATIC, "Pick", &void_i4, &tiny(&code)).unwrap();
    b.build().unwrap()
}

/// `Golden.Stranger` 1.0: one underflow, and no original anywhere.
fn stranger() -> Vec<u8> {
    let mut b = AssemblyBuilder::new("Golden.Stranger", [1, 0, 0, 0], ImageKind::Dll).unwrap();
    let corlib = b.assembly_ref(&mscorlib()).unwrap();
    let object = b.type_ref(corlib, "System", "Object").unwrap();
    let void0 = method_sig(false, SigType::Void, &[]).unwrap();
    b.type_def(flags::TYPE_PUBLIC, "Golden", "Stranger", Some(object))
        .unwrap();
    b.method(STATIC, "Lost", &void0, &tiny(&[0x26, 0x2A]))
        .unwrap();
    b.build().unwrap()
}

/// A stub `mscorlib` 4.0 with the few types the fixtures' signatures and base types name.
fn stub_corlib() -> Vec<u8> {
    let mut b = AssemblyBuilder::new("mscorlib", [4, 0, 0, 0], ImageKind::Dll).unwrap();
    let object = b
        .type_def(flags::TYPE_PUBLIC, "System", "Object", None)
        .unwrap();
    let value = b
        .type_def(flags::TYPE_PUBLIC, "System", "ValueType", Some(object))
        .unwrap();
    b.type_def(flags::TYPE_PUBLIC, "System", "Exception", Some(object))
        .unwrap();
    b.type_def(flags::TYPE_PUBLIC, "System", "String", Some(object))
        .unwrap();
    b.type_def(
        flags::TYPE_PUBLIC | flags::TYPE_SEALED,
        "System",
        "Int32",
        Some(value),
    )
    .unwrap();
    b.build().unwrap()
}

/// The fixtures, in a fresh directory.
fn fixtures() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ilcheck-golden-{}", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    for sub in ["original", "patched", "refs"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    std::fs::write(dir.join("refs/mscorlib.dll"), stub_corlib()).unwrap();
    std::fs::write(dir.join("defects.dll"), defects()).unwrap();
    std::fs::write(dir.join("notes.dll"), "not an assembly\n").unwrap();
    std::fs::write(dir.join("original/app.dll"), app(false)).unwrap();
    std::fs::write(dir.join("patched/renamed.dll"), app(true)).unwrap();
    std::fs::write(dir.join("patched/stranger.dll"), stranger()).unwrap();
    dir
}

/// Runs ilcheck in `dir`: exit code, standard output, standard error.
fn ilcheck(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let o = support::run(Command::new(BIN).args(args).current_dir(dir));
    (
        o.code.unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// `text` with what varies between runs made constant: decimal numbers (timings, rates, in
/// any notation serde_json writes) become `0.0`, so the JSON stays JSON; the binary's path
/// becomes `ilcheck`, the tool's version `VERSION`. Dotted numbers that are not decimals
/// (`1.2.3.4`, `III.1.7.5`) stay.
fn normalise(text: &str) -> String {
    let text = text.replace(BIN, "ilcheck").replace(
        &format!("\"version\": \"{}\",\n", env!("CARGO_PKG_VERSION")),
        "\"version\": \"VERSION\",\n",
    );
    let chars: Vec<char> = text.chars().collect();
    let digit = |k: usize| chars.get(k).is_some_and(char::is_ascii_digit);
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let starts =
            digit(i) && (i == 0 || !(chars[i - 1].is_ascii_alphanumeric() || chars[i - 1] == '.'));
        if !starts {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let mut j = i;
        while digit(j) {
            j += 1;
        }
        let mut decimal = false;
        if chars.get(j) == Some(&'.') && digit(j + 1) {
            j += 1;
            while digit(j) {
                j += 1;
            }
            decimal = true;
        }
        if matches!(chars.get(j), Some('e' | 'E')) {
            let mut k = j + 1;
            if matches!(chars.get(k), Some('-' | '+')) {
                k += 1;
            }
            if digit(k) {
                while digit(k) {
                    k += 1;
                }
                j = k;
                decimal = true;
            }
        }
        let followed = chars.get(j).is_some_and(char::is_ascii_alphanumeric)
            || (chars.get(j) == Some(&'.') && digit(j + 1));
        if decimal && !followed {
            out.push_str("0.0");
        } else {
            out.extend(&chars[i..j]);
        }
        i = j;
    }
    out
}

/// Compares `actual` with `tests/golden/{name}`, or writes it there under `ILCHECK_BLESS=1`.
fn golden(name: &str, actual: &str) {
    let path = root().join("tests/golden").join(name);
    let actual = normalise(actual);
    if std::env::var("ILCHECK_BLESS").as_deref() == Ok("1") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &actual).unwrap();
        eprintln!("blessed {}", path.display());
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; write it with ILCHECK_BLESS=1 cargo test --test it golden::",
            path.display()
        )
    });
    if expected != actual {
        let diff = similar::TextDiff::from_lines(&expected, &actual)
            .unified_diff()
            .context_radius(3)
            .header(&format!("tests/golden/{name}"), "this build")
            .to_string();
        panic!(
            "{name} differs from its golden file (re-bless with ILCHECK_BLESS=1 cargo test \
             --test it golden:: if the change is meant):\n{diff}"
        );
    }
}

/// The Python with `jsonschema` that `scripts/setup.sh` installs, if present (else a loud
/// skip, or a failure under `ILCHECK_REQUIRE_MONO=1`).
fn validator(test: &str) -> Option<PathBuf> {
    let venv = std::env::var_os("ILCHECK_CORECLR_DIR")
        .map_or_else(|| PathBuf::from("/opt/ilcheck-coreclr"), PathBuf::from);
    let python = venv.join("bin/python");
    let found = python.is_file()
        && Command::new(&python)
            .args(["-c", "import jsonschema"])
            .output()
            .is_ok_and(|o| o.status.success());
    let what = format!("Python jsonschema ({})", python.display());
    support::present(test, &what, found).then_some(python)
}

/// The schema errors of the JSON document at `doc`, one line each.
fn schema_errors(python: &Path, doc: &Path, schema: &Path) -> Vec<String> {
    const SCRIPT: &str = r#"
import json, sys, jsonschema
doc = json.load(open(sys.argv[1]))
schema = json.load(open(sys.argv[2]))
cls = jsonschema.validators.validator_for(schema)
cls.check_schema(schema)
for e in cls(schema, format_checker=cls.FORMAT_CHECKER).iter_errors(doc):
    print("/".join(str(p) for p in e.absolute_path) + ": " + e.message)
"#;
    let o = support::run(
        Command::new(python)
            .arg("-c")
            .arg(SCRIPT)
            .arg(doc)
            .arg(schema),
    );
    assert!(
        o.success(),
        "the validator failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// Validates the JSON report and the SARIF log of a run against their schemas.
fn validate(python: &Path, json: &Path, sarif: &Path) {
    let verify_schema = root().join("docs/schemas/verify.schema.json");
    let sarif_schema = root().join("corpus/schemas/sarif-2.1.0.json");
    let errors = schema_errors(python, json, &verify_schema);
    assert!(errors.is_empty(), "{}: {errors:#?}", json.display());
    let errors = schema_errors(python, sarif, &sarif_schema);
    assert!(errors.is_empty(), "{}: {errors:#?}", sarif.display());
}

/// One run in every format: text (standard output and error), JSON, SARIF and Markdown;
/// returns the exit code of each (they must agree) and the outputs.
struct Outputs {
    code: i32,
    text: String,
    stderr: String,
    json: PathBuf,
    sarif: PathBuf,
    markdown: PathBuf,
}

fn run_all(dir: &Path, name: &str, args: &[&str]) -> Outputs {
    let (sarif, markdown) = (format!("{name}.sarif"), format!("{name}.md"));
    let mut text_args = args.to_vec();
    text_args.extend(["--sarif", &sarif, "--report", &markdown]);
    let (code, text, stderr) = ilcheck(dir, &text_args);
    let mut json_args = args.to_vec();
    json_args.push("--json");
    let (json_code, json, json_err) = ilcheck(dir, &json_args);
    assert_eq!(code, json_code, "{json_err}");
    // Warnings go to standard error in both forms.
    assert_eq!(stderr, json_err);
    let json_path = dir.join(format!("{name}.json"));
    std::fs::write(&json_path, &json).unwrap();
    Outputs {
        code,
        text,
        stderr,
        json: json_path,
        sarif: dir.join(sarif),
        markdown: dir.join(markdown),
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn normalising_keeps_versions_and_sections() {
    assert_eq!(
        normalise("in 0.002 s: 4.5e-5 MB/s, 7e3; Version=1.2.3.4 III.1.7.5 IL_0004 2.1.0 3 x1.5"),
        "in 0.0 s: 0.0 MB/s, 0.0; Version=1.2.3.4 III.1.7.5 IL_0004 2.1.0 3 x1.5"
    );
}

#[test]
fn verify_output_matches_the_golden_files() {
    let test = "verify_output_matches_the_golden_files";
    let dir = fixtures();
    let python = validator(test);

    let run = run_all(
        &dir,
        "defects",
        &[
            "verify",
            "defects.dll",
            "notes.dll",
            "--reference-dir",
            "refs",
            // Two inputs on two threads: the report must be the one a single thread makes.
            "--threads",
            "2",
        ],
    );
    // An input that cannot be read makes the run exit 2, after the others were verified.
    assert_eq!(run.code, 2, "{}{}", run.text, run.stderr);
    assert!(
        run.text
            .contains("notes.dll: cannot be read: not a PE image"),
        "{}",
        run.text
    );
    golden("defects.txt", &run.text);
    golden("defects.json", &read(&run.json));
    golden("defects.sarif", &read(&run.sarif));
    golden("defects.md", &read(&run.markdown));
    if let Some(python) = &python {
        validate(python, &run.json, &run.sarif);
    }
    let v: serde_json::Value = serde_json::from_str(&read(&run.json)).unwrap();
    let codes: Vec<&str> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["code"].as_str().unwrap())
        .collect();
    assert_eq!(
        codes,
        [
            "StackUnderflow",
            "PathStackDepth",
            "EHOverlap",
            "LeaveOutOfFinally",
            "BodyMalformed",
            "ReturnVoid"
        ]
    );
    // The level applies to the structural rules too: the unverifiable localloc is counted, not
    // listed, at the default level...
    assert_eq!(v["level"], "invalid");
    assert_eq!(
        v["not_reported"]["LocallocStackNotEmpty"], 1,
        "{}",
        v["not_reported"]
    );
    assert!(v["codes"].get("LocallocStackNotEmpty").is_none());
    assert!(
        run.text.contains(
            "level invalid: 1 unverifiable findings not reported (LocallocStackNotEmpty 1)"
        ),
        "{}",
        run.text
    );
    // ...and listed, as an unverifiable finding and a SARIF warning, at --level unverifiable,
    // with the type pass or without it.
    for types in [&[][..], &["--no-types"][..]] {
        let mut args = vec!["verify", "defects.dll", "--level", "unverifiable", "--json"];
        args.extend(["--sarif", "level.sarif", "--reference-dir", "refs"]);
        args.extend(types);
        let (code, json, stderr) = ilcheck(&dir, &args);
        assert_eq!(code, 1, "{json}{stderr}");
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["level"], "unverifiable");
        assert_eq!(v["not_reported"], serde_json::json!({}));
        let found: Vec<(&str, &str)> = v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["code"] == "LocallocStackNotEmpty")
            .map(|f| {
                (
                    f["method"].as_str().unwrap(),
                    f["verdict"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            found,
            [("Golden.Box`1::Stackalloc()", "unverifiable")],
            "{types:?}"
        );
        let sarif: serde_json::Value =
            serde_json::from_str(&read(&dir.join("level.sarif"))).unwrap();
        let levels: Vec<(&str, &str)> = sarif["runs"][0]["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["ruleId"].as_str().unwrap(), r["level"].as_str().unwrap()))
            .filter(|(id, _)| ["LocallocStackNotEmpty", "ReturnVoid"].contains(id))
            .collect();
        assert_eq!(
            levels,
            [
                ("ReturnVoid", "error"),
                ("LocallocStackNotEmpty", "warning")
            ]
        );
    }

    let run = run_all(
        &dir,
        "baseline",
        &[
            "verify",
            "patched",
            "--baseline",
            "original",
            "--reference-dir",
            "refs",
            "--threads",
            "2",
        ],
    );
    assert_eq!(run.code, 1, "{}{}", run.text, run.stderr);
    assert!(
        run.stderr
            .contains("WARNING: patched/stranger.dll has no original among the baseline"),
        "{}",
        run.stderr
    );
    golden("baseline.txt", &run.text);
    golden("baseline.json", &read(&run.json));
    golden("baseline.sarif", &read(&run.sarif));
    golden("baseline.md", &read(&run.markdown));
    if let Some(python) = &python {
        validate(python, &run.json, &run.sarif);
    }
    let v: serde_json::Value = serde_json::from_str(&read(&run.json)).unwrap();
    assert_eq!(v["per_assembly"][0]["paired_by"], "identity");
    assert_eq!(v["baseline_missing"][0], "patched/stranger.dll");
    assert_eq!(v["baseline_suppressed"], 1);
    assert_eq!(v["duplicates_merged"], 1);
    std::fs::remove_dir_all(&dir).ok();
}

/// The validator is not a formality: a report that breaks its schema is caught.
#[test]
fn the_schemas_reject_a_broken_report() {
    let test = "the_schemas_reject_a_broken_report";
    let Some(python) = validator(test) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("ilcheck-golden-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("defects.dll"), defects()).unwrap();
    let (_, json, _) = ilcheck(&dir, &["verify", "defects.dll", "--json"]);
    let mut v: serde_json::Value = serde_json::from_str(&json).unwrap();
    v["findings"][0]
        .as_object_mut()
        .unwrap()
        .remove("disassembly");
    v["codes"]["StackUnderflow"]["findings"] = serde_json::json!(-1);
    let bad = dir.join("bad.json");
    std::fs::write(&bad, v.to_string()).unwrap();
    let errors = schema_errors(
        &python,
        &bad,
        &root().join("docs/schemas/verify.schema.json"),
    );
    assert_eq!(errors.len(), 2, "{errors:#?}");
    let sarif = serde_json::json!({"version": "2.1.0", "runs": [{"results": []}]});
    std::fs::write(&bad, sarif.to_string()).unwrap();
    let errors = schema_errors(
        &python,
        &bad,
        &root().join("corpus/schemas/sarif-2.1.0.json"),
    );
    assert!(!errors.is_empty(), "a run without a tool is not SARIF");
    std::fs::remove_dir_all(&dir).ok();
}
