//! The type pass: the project's type cases report exactly their codes, mono's 4.5 profile and
//! the .NET Core 3.1 framework have no invalid type finding, generated programs and every
//! transform of them type-check clean, and a shared epilogue that loses the declared return
//! type is a new unverifiable finding against its original.

use crate::support;

use ilcheck::corpus::{self, Input, ReadAhead, TypePass, TypeSummary, VerifyOptions};
use ilcheck::verify::types::ModuleStore;
use ilcheck::verify::{Code, Level, Verdict};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn ilcheck() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ilcheck"))
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ilcheck-types-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Verifies `inputs` at `level` and returns the report.
fn verify(inputs: &[PathBuf], level: Level) -> corpus::VerifyReport {
    let inputs: Vec<Input> = inputs.iter().map(Input::named).collect();
    let store = ModuleStore::with_runtime_dirs(Vec::new());
    let opts = VerifyOptions {
        max_findings: 1_000_000,
        types: true,
        level,
        ..Default::default()
    };
    let mut report = corpus::VerifyReport::default();
    corpus::verify_with(&inputs, opts, &store, None, &mut report, |_| {});
    report
}

/// `Name_Invalid_A.B` → {A, B}; `Name_Valid` → {}. A constructor of a class in
/// `Types.CtorCases` or `Types.CallCases` is named by its class
/// (`Types.CtorCases.Name_Unverifiable_A::.ctor()`).
fn expected_codes(method: &str) -> Option<BTreeSet<String>> {
    let (owner, member) = method.split_once("::")?;
    let class = owner
        .strip_prefix("Types.CtorCases.")
        .or_else(|| owner.strip_prefix("Types.CallCases."));
    let name = match (class, member.starts_with(".ctor(")) {
        (Some(class), true) => class,
        _ => member.split('(').next()?,
    };
    if name.ends_with("_Valid") {
        return Some(BTreeSet::new());
    }
    for marker in ["_Invalid_", "_Unverifiable_"] {
        if let Some((_, codes)) = name.split_once(marker) {
            return Some(codes.split('.').map(str::to_string).collect());
        }
    }
    None
}

/// The codes reported on each method of `report` (a run with no image error).
fn codes_by_method(report: &corpus::VerifyReport) -> BTreeMap<String, BTreeSet<String>> {
    assert!(report.image_errors.is_empty(), "{:?}", report.image_errors);
    let mut found: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &report.findings {
        found
            .entry(f.method.clone())
            .or_default()
            .insert(f.code.clone());
    }
    found
}

#[test]
fn type_cases_report_exactly_their_codes() {
    let dll = repo().join("corpus/bin/type_cases.dll");
    let report = verify(std::slice::from_ref(&dll), Level::Unverifiable);
    let mut found = codes_by_method(&report);
    let image = ilcheck::image::Image::open(&dll).unwrap();
    let mut cases = 0;
    for m in image.methods() {
        let name = m.full_name().unwrap();
        let case = ["Types.Cases::", "Types.CtorCases.", "Types.CallCases."];
        if !case.iter().any(|c| name.starts_with(c)) {
            continue;
        }
        let want = expected_codes(&name).unwrap_or_else(|| panic!("unnamed case {name}"));
        let got = found.remove(&name).unwrap_or_default();
        assert_eq!(got, want, "{name}");
        // The verdict class in the name is the code's.
        for code in &want {
            let c = Code::from_name(code).unwrap();
            let class = if name.contains("_Invalid_") {
                Verdict::Invalid
            } else {
                Verdict::Unverifiable
            };
            assert_eq!(c.verdict(), class, "{name}: {code}");
        }
        cases += 1;
    }
    assert!(cases >= 60, "only {cases} cases");
    assert!(found.is_empty(), "findings outside the cases: {found:?}");
    let types = report.types.unwrap();
    assert_eq!(types.methods_in_part, 0, "{:?}", types.in_part);

    // At the default level, only the invalid cases are reported.
    let report = verify(&[dll], Level::Invalid);
    assert!(
        report
            .findings
            .iter()
            .all(|f| f.method.contains("_Invalid_")),
        "unverifiable findings reported at level invalid"
    );
    assert!(report.types.unwrap().not_reported > 0);
}

fn summary_line(t: &TypeSummary) -> String {
    format!(
        "{} methods, {} in part {:?}, {:?}, {:.1} MB/s",
        t.methods_checked,
        t.methods_in_part,
        t.in_part,
        t.by_verdict,
        t.mb_per_s()
    )
}

#[test]
fn frameworks_have_no_invalid_type_finding() {
    let test = "frameworks_have_no_invalid_type_finding";
    let mut dirs = Vec::new();
    if let Some(mono) = support::mono_corpus(test) {
        dirs.push(mono);
    }
    let core = ilcheck::harness::runtime::coreclr_framework_dir().filter(|d| d.is_dir());
    if support::present(test, "CoreCLR's shared framework", core.is_some()) {
        dirs.push(core.unwrap());
    }
    for dir in dirs {
        let found = corpus::discover(std::slice::from_ref(&dir)).unwrap();
        let report = verify(&found, Level::Invalid);
        let types = report.types.as_ref().unwrap();
        eprintln!("{}: {}", dir.display(), summary_line(types));
        let invalid: Vec<String> = report
            .findings
            .iter()
            .filter(|f| Code::from_name(&f.code).is_some_and(|c| c.verdict() == Verdict::Invalid))
            .filter(|f| {
                // Structural findings of these corpora are the structural tests' business.
                matches!(
                    f.code.as_str(),
                    "StackUnexpected"
                        | "PathStackUnexpected"
                        | "ExpectedNumericType"
                        | "ExpectedIntegerType"
                        | "ExpectedFloatType"
                        | "StackObjRef"
                        | "StackByRef"
                )
            })
            .map(|f| {
                format!(
                    "{} {} IL_{:04x} {}: {}",
                    f.assembly, f.method, f.offset, f.code, f.message
                )
            })
            .take(20)
            .collect();
        assert!(
            invalid.is_empty(),
            "{}:\n{}",
            dir.display(),
            invalid.join("\n")
        );
        assert!(types.methods_checked > 50_000, "{}", summary_line(types));
        // Unresolved references stay rare: the runtimes' directories hold them.
        assert!(
            types.methods_in_part * 100 < types.methods_checked,
            "{}",
            summary_line(types)
        );
    }
}

/// The project's generated programs, and every transform of ilcheck's own rewriter over them,
/// type-check clean at level unverifiable.
#[test]
fn generated_programs_and_their_rewrites_type_check_clean() {
    let dir = scratch("generated");
    let out = support::run(ilcheck().args(["generate", "-o"]).arg(&dir).args([
        "--count",
        "4",
        "--seed",
        "11",
        "--methods-per-assembly",
        "60",
    ]));
    assert_eq!(
        out.code,
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let programs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "exe"))
        .collect();
    assert_eq!(programs.len(), 4);
    let report = verify(&programs, Level::Unverifiable);
    assert_eq!(report.findings_total, 0, "{:#?}", report.findings);
    let types = report.types.unwrap();
    assert!(types.methods_checked >= 240, "{}", summary_line(&types));
    assert_eq!(types.methods_in_part, 0, "{:?}", types.in_part);

    for t in [
        "identity",
        "nop-pad",
        "widen",
        "shorten",
        "prologue",
        "epilogue",
        "prologue-epilogue",
        "wrap-finally",
        "wrap-catch",
    ] {
        let outdir = dir.join(t);
        let r = support::run(
            ilcheck()
                .args(["rewrite", "-t", t, "-o"])
                .arg(&outdir)
                .args(&programs),
        );
        assert_eq!(
            r.code,
            Some(0),
            "{t}: {}",
            String::from_utf8_lossy(&r.stderr)
        );
        let rewritten: Vec<PathBuf> = programs
            .iter()
            .map(|p| outdir.join(p.file_name().unwrap()))
            .collect();
        let report = verify(&rewritten, Level::Unverifiable);
        assert_eq!(report.findings_total, 0, "{t}: {:#?}", report.findings);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The shared epilogue many weavers write: every `ret` becomes a branch to one block that runs
/// the exit code and returns, the return value on the stack across the branch.
fn shared_epilogue(
    m: &mut ilcheck::ir::Method,
    _: &ilcheck::ir::TransformOptions,
) -> Result<ilcheck::ir::Outcome, ilcheck::ir::SkipReason> {
    use ilcheck::ir::Instr;
    use ilcheck::opcode::Opcode;
    let rets: Vec<usize> = (0..m.instrs.len())
        .filter(|&i| m.instrs[i].opcode == Opcode::Ret)
        .collect();
    let mut ed = m.edit();
    let entry = ed.new_label();
    let block = ed.append(&[Instr::op(Opcode::Nop), Instr::op(Opcode::Ret)]);
    ed.bind(block, entry)?;
    for i in rets {
        ed.replace(i, &[Instr::branch(Opcode::Br, entry)])?;
    }
    ed.commit()?;
    Ok(ilcheck::ir::Outcome::Changed)
}

/// Where two paths return different classes, a shared epilogue merges them into their common
/// base. On System.Web.Services that is `object` returned as `IHttpHandler`: unverifiable,
/// new against the original, and not invalid. (ilcheck's own `epilogue` gives each `ret` its
/// copy of the exit code, so nothing merges: the same method rewritten by it is clean.)
#[test]
fn a_shared_epilogue_that_loses_the_return_type_is_a_new_unverifiable_finding() {
    let test = "a_shared_epilogue_that_loses_the_return_type_is_a_new_unverifiable_finding";
    let Some(mono) = support::mono_corpus(test) else {
        return;
    };
    let original = mono.join("System.Web.Services.dll");
    let dir = scratch("epilogue");
    let shared = dir.join("shared/System.Web.Services.dll");
    let own = dir.join("own/System.Web.Services.dll");
    let image = ilcheck::image::Image::open(&original).unwrap();
    let method = "System.Web.Services.Protocols.WebServiceHandlerFactory::CoreGetHandler(*";
    let mut opts = corpus::RewriteOptions::new("epilogue").unwrap();
    opts.methods = Some(method.to_string());
    let own_bytes = corpus::rewrite_image(&image, &opts, &mut Default::default()).unwrap();
    opts.transform = ilcheck::ir::Transform::Custom {
        name: "shared-epilogue",
        apply: shared_epilogue,
    };
    let mut report = corpus::RewriteReport::default();
    let shared_bytes = corpus::rewrite_image(&image, &opts, &mut report).unwrap();
    assert_eq!(
        (report.selected, report.rejected.len()),
        (1, 0),
        "{report:#?}"
    );
    for (path, bytes) in [(&shared, shared_bytes), (&own, own_bytes)] {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }
    let run = |patched: &Path, level: &str| {
        support::run(
            ilcheck()
                .args(["verify", "--json", "--level", level, "--baseline"])
                .arg(&original)
                .arg("--")
                .arg(patched),
        )
    };
    // ilcheck's own epilogue: nothing new.
    let out = run(&own, "unverifiable");
    assert_eq!(
        out.code,
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let verify_against = |level: &str| run(&shared, level);
    let out = verify_against("unverifiable");
    assert_eq!(
        out.code,
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let findings = report["findings"].as_array().unwrap();
    assert_eq!(findings.len(), 1, "{findings:#?}");
    let f = &findings[0];
    assert_eq!(f["code"], "TypeNotAssignable");
    assert!(
        f["method"]
            .as_str()
            .unwrap()
            .starts_with("System.Web.Services.Protocols.WebServiceHandlerFactory::CoreGetHandler("),
        "{f}"
    );
    assert!(
        f["message"]
            .as_str()
            .unwrap()
            .contains("found object, expected System.Web.IHttpHandler"),
        "{f}"
    );

    // At the default level it is not reported, and the run is clean.
    let out = verify_against("invalid");
    assert_eq!(
        out.code,
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// References are looked for beside the input first: a type pass over an assembly copied away
/// from its references says it checked in part rather than guessing.
#[test]
fn unresolvable_references_make_methods_checked_in_part() {
    let dir = scratch("alone");
    let dll = dir.join("type_cases.dll");
    std::fs::copy(repo().join("corpus/bin/type_cases.dll"), &dll).unwrap();
    // No runtime directories: mscorlib cannot be found.
    let store = ModuleStore::new(Vec::new());
    let image = ilcheck::image::Image::open(&dll).unwrap();
    let work: Vec<_> = image
        .methods()
        .filter(|m| m.rva() != 0)
        .map(|m| (m, m.decoded_body()))
        .collect();
    let mut pass = TypePass::new(&store);
    let mut summary = TypeSummary::default();
    let mut found = Vec::new();
    pass.run(
        &image,
        Some(Path::new(&dll)),
        &work,
        |_| true,
        &mut summary,
        |k, code, _, _| found.push((work[k].0.full_name().unwrap(), code)),
    );
    assert!(summary.methods_in_part > 0, "{summary:?}");
    // Nothing found against an unknown type: only the cases that need no reference.
    for (name, code) in &found {
        assert!(
            expected_codes(name).is_some_and(|c| c.contains(code.as_str())),
            "{name}: {code:?} without its references"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// What a type pass reports of one image under a read-ahead rule: every finding, and what the
/// summary counts.
type PassAnswers = (Vec<(usize, Code, u32, String)>, String);

fn pass_answers(store: &ModuleStore, path: &Path, rule: ReadAhead) -> PassAnswers {
    let image = ilcheck::image::Image::open(path).unwrap();
    let work: Vec<_> = image
        .methods()
        .filter(|m| m.rva() != 0)
        .map(|m| (m, m.decoded_body()))
        .collect();
    let mut pass = TypePass::new(store).with_read_ahead(rule);
    let mut summary = TypeSummary::default();
    let mut found = Vec::new();
    pass.run(
        &image,
        Some(path),
        &work,
        |_| true,
        &mut summary,
        |k, code, offset, message| found.push((k, code, offset, message)),
    );
    let counts = format!(
        "checked {} in part {} {:?} {:?} bytes {}",
        summary.methods_checked,
        summary.methods_in_part,
        summary.in_part,
        summary.by_verdict,
        summary.il_bytes
    );
    (found, counts)
}

/// Resolving an image's rows in table order before its methods are checked changes no answer:
/// every finding (code, offset, message) and every count of methods checked in part is the
/// same as when each row is resolved on first use, on the project's type cases, on them
/// without their references, and on all of mono 4.5.
#[test]
fn reading_ahead_changes_no_answer() {
    let test = "reading_ahead_changes_no_answer";
    let cases = repo().join("corpus/bin/type_cases.dll");
    let runtime = |rule| {
        let store = ModuleStore::with_runtime_dirs(Vec::new());
        pass_answers(&store, &cases, rule)
    };
    let (found, _) = runtime(ReadAhead::Always);
    assert!(!found.is_empty(), "the type cases have findings");
    assert_eq!(found, runtime(ReadAhead::Never).0, "type_cases.dll");
    // Without references: the rows that cannot be resolved are kept as such either way.
    let alone = |rule| pass_answers(&ModuleStore::new(Vec::new()), &cases, rule);
    assert_eq!(
        alone(ReadAhead::Always),
        alone(ReadAhead::Never),
        "type_cases.dll alone"
    );

    let Some(mono) = support::mono_corpus(test) else {
        return;
    };
    let dlls = support::files_with_extension(&mono, "dll");
    assert!(
        dlls.len() > 100,
        "{} assemblies in {}",
        dlls.len(),
        mono.display()
    );
    let (ahead, on_demand) = (
        ModuleStore::with_runtime_dirs(Vec::new()),
        ModuleStore::with_runtime_dirs(Vec::new()),
    );
    let mut findings = 0;
    for dll in &dlls {
        let a = pass_answers(&ahead, dll, ReadAhead::Always);
        let b = pass_answers(&on_demand, dll, ReadAhead::Never);
        assert_eq!(a, b, "{}", dll.display());
        findings += a.0.len();
    }
    assert!(findings > 1000, "{findings} findings on mono 4.5");
}

/// Runtime-async methods: their bodies, and the same bodies without the flag.
const ASYNC_CASES: &str = r#"
.assembly extern mscorlib
{
  .publickeytoken = (B7 7A 5C 56 19 34 E0 89)
  .ver 4:0:0:0
}
.assembly async_cases
{
  .ver 1:0:0:0
}
.module async_cases.dll

.class public auto ansi abstract sealed beforefieldinit Async.Cases extends [mscorlib]System.Object
{
  .method public static class [mscorlib]System.Threading.Tasks.Task Nothing_Valid() cil managed
  {
    .maxstack 1
    ret
  }
  .method public static class [mscorlib]System.Threading.Tasks.Task`1<int32> Result_Valid() cil managed
  {
    .maxstack 1
    ldc.i4.1
    ret
  }
  .method public static class [mscorlib]System.Threading.Tasks.Task`1<string> StringResult_Valid() cil managed
  {
    .maxstack 1
    ldstr "x"
    ret
  }
  .method public static class [mscorlib]System.Threading.Tasks.Task ValueForNothing_Invalid_ReturnVoid() cil managed
  {
    .maxstack 1
    ldc.i4.1
    ret
  }
  .method public static class [mscorlib]System.Threading.Tasks.Task`1<int32> NothingForResult_Invalid_ReturnMissing() cil managed
  {
    .maxstack 1
    ret
  }
  .method public static class [mscorlib]System.Threading.Tasks.Task`1<int32> StringForInt32_Invalid_StackUnexpected() cil managed
  {
    .maxstack 1
    ldstr "x"
    ret
  }
}
"#;

/// A runtime-async method (MethodImplAttributes 0x2000) returns its task's result: `ret` with
/// nothing for `Task`, with the `T` of `Task<T>` (the runtime-async amendment to ECMA-335,
/// I.8.4.5; ILVerify's rule). ilasm cannot write the flag, so the test sets it in the
/// assembled bytes; without it, the same bodies are judged by their declared type.
#[test]
fn runtime_async_methods_return_their_tasks_result() {
    let test = "runtime_async_methods_return_their_tasks_result";
    if !support::mono_tool(test, "ilasm") {
        return;
    }
    let dir = scratch("async");
    let il = dir.join("async_cases.il");
    std::fs::write(&il, ASYNC_CASES).unwrap();
    let plain = dir.join("plain.dll");
    let o = support::run(
        Command::new("ilasm")
            .args(["/dll", "/quiet"])
            .arg(format!("/output:{}", plain.display()))
            .arg(&il),
    );
    assert!(o.success(), "ilasm: {}", o.describe());
    let mut bytes = std::fs::read(&plain).unwrap();
    {
        let image = ilcheck::image::Image::parse(&bytes).unwrap();
        let h = image.tables_header();
        let info = h.info(ilcheck::image::Table::MethodDef);
        // ImplFlags, the MethodDef row's second column.
        let (col, width) = info.column(1).unwrap();
        assert_eq!(width, 2);
        let at: Vec<usize> = (1..=info.rows)
            .map(|rid| info.offset + (rid as usize - 1) * info.row_size as usize + col)
            .collect();
        drop(image);
        for a in at {
            bytes[a + 1] |= 0x20;
        }
    }
    let flagged = dir.join("async_cases.dll");
    std::fs::write(&flagged, &bytes).unwrap();

    let codes = |dll: &Path| {
        let report = verify(&[dll.to_path_buf()], Level::Unverifiable);
        let found = codes_by_method(&report);
        assert_eq!(report.types.unwrap().methods_in_part, 0);
        found
    };
    let flagged_codes = codes(&flagged);
    let image = ilcheck::image::Image::open(&flagged).unwrap();
    let mut cases = 0;
    for m in image.methods() {
        assert_eq!(m.impl_flags() & 0x2000, 0x2000);
        let name = m.full_name().unwrap();
        let want = expected_codes(&name.replace("Async.Cases::", "Types.Cases::")).unwrap();
        let got = flagged_codes.get(&name).cloned().unwrap_or_default();
        assert_eq!(got, want, "{name}");
        cases += 1;
    }
    assert_eq!(cases, 6);
    // Without the flag the declared task type is what `ret` must return.
    let plain_codes = codes(&plain);
    let of = |m: &str| plain_codes.get(&format!("Async.Cases::{m}()")).cloned();
    let one = |c: &str| Some(BTreeSet::from([c.to_string()]));
    assert_eq!(of("Nothing_Valid"), one("ReturnMissing"), "{plain_codes:?}");
    assert_eq!(
        of("Result_Valid"),
        one("StackUnexpected"),
        "{plain_codes:?}"
    );
    assert_eq!(of("StringResult_Valid"), one("TypeNotAssignable"));
    // A value where a `Task` is declared: a type finding, not the structural ReturnVoid.
    assert_eq!(
        of("ValueForNothing_Invalid_ReturnVoid"),
        one("StackUnexpected")
    );

    // The wraps keep a runtime-async method's result in a local of the result's type (not the
    // task's): nothing new against the original.
    for t in ["wrap-finally", "wrap-catch"] {
        let out = dir.join(format!("{t}.dll"));
        let o = support::run(
            ilcheck()
                .arg("rewrite")
                .arg(&flagged)
                .arg("-o")
                .arg(&out)
                .args(["-t", t]),
        );
        assert!(o.success(), "{t}: {}", o.describe());
        let o = support::run(
            ilcheck()
                .arg("verify")
                .arg(&out)
                .arg("--baseline")
                .arg(&flagged)
                .args(["--level", "unverifiable"]),
        );
        assert!(o.success(), "{t}: {}", o.describe());
    }
}

/// A reference held in memory ([`ModuleStore::hold`]) is found by its assembly name as the
/// same file in a directory is: the type cases checked against mono's `mscorlib` held in
/// memory give exactly the answers they give with it found in mono's directory, and a store
/// holding nothing checks in part where those do not.
#[test]
fn a_reference_held_in_memory_answers_as_its_file() {
    let test = "a_reference_held_in_memory_answers_as_its_file";
    let Some(mono) = support::mono_corpus(test) else {
        return;
    };
    let dir = scratch("held");
    let cases = dir.join("type_cases.dll");
    std::fs::copy(repo().join("corpus/bin/type_cases.dll"), &cases).unwrap();
    let from_dir = pass_answers(
        &ModuleStore::new(vec![mono.clone()]),
        &cases,
        ReadAhead::Never,
    );
    let bytes: std::sync::Arc<[u8]> = std::fs::read(mono.join("mscorlib.dll")).unwrap().into();
    let mut held = ModuleStore::new(Vec::new());
    let image = ilcheck::image::Image::from_shared(bytes).unwrap();
    assert!(held.hold(image, "mscorlib (in memory)".into()));
    let from_memory = pass_answers(&held, &cases, ReadAhead::Never);
    assert_eq!(
        from_memory, from_dir,
        "mscorlib in memory against mono's file"
    );
    let alone = pass_answers(&ModuleStore::new(Vec::new()), &cases, ReadAhead::Never);
    assert_ne!(alone.1, from_dir.1, "without mscorlib the counts differ");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A .NET Core assembly copied away from its framework resolves its references in CoreCLR's
/// directories, not mono's (whose `System.Runtime` facade leads to `mscorlib`): no finding, as
/// in place. Sent to mono's on purpose, the two core libraries' types of one name are told
/// apart by their assemblies in the message.
#[test]
fn a_core_assembly_away_from_its_framework_resolves_against_it() {
    let test = "a_core_assembly_away_from_its_framework_resolves_against_it";
    let core = ilcheck::harness::runtime::coreclr_framework_dir().filter(|d| d.is_dir());
    let Some(mono) = support::mono_corpus(test) else {
        return;
    };
    if !support::present(test, "CoreCLR's shared framework", core.is_some()) {
        return;
    }
    let dir = scratch("core-away");
    let copy = dir.join("System.Collections.dll");
    std::fs::copy(core.unwrap().join("System.Collections.dll"), &copy).unwrap();
    let out = ilcheck().arg("verify").arg(&copy).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let out = ilcheck()
        .arg("verify")
        .arg(&copy)
        .arg("--reference-dir")
        .arg(mono.join("Facades"))
        .arg("--reference-dir")
        .arg(&mono)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains(
            "found System.RuntimeTypeHandle (of System.Private.CoreLib), expected \
             System.RuntimeTypeHandle (of mscorlib)"
        ) || text.contains(
            "found System.RuntimeTypeHandle (of mscorlib), expected \
             System.RuntimeTypeHandle (of System.Private.CoreLib)"
        ),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
