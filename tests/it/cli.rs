//! The command line: exit codes, JSON and SARIF output, and baseline comparison.

use serde_json::Value;
use std::process::Command;

fn ilcheck(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ilcheck"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A new, empty directory for one test (`ilcheck-NAME-PID` in the temporary directory).
fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("ilcheck-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn disasm_hex_and_bad_input() {
    let (code, out, _) = ilcheck(&["disasm", "--hex", "0A 16 2A"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("IL_0000:  ldc.i4.0") && out.contains("IL_0001:  ret"),
        "{out}"
    );
    let (code, _, err) = ilcheck(&["disasm", "--hex", "13 30 01"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("fat header needs 12 bytes"), "{err}");
    let (code, _, _) = ilcheck(&["disasm", "--hex", "zz"]);
    assert_eq!(code, 2);
}

#[test]
fn disasm_assembly_methods_by_glob_and_token() {
    let (code, out, err) = ilcheck(&["disasm", "corpus/bin/features.exe", "--method", "Shape::*"]);
    assert_eq!(code, 0, "{err}");
    for line in [
        "// method 0x06000003 Shape::.ctor(), RVA 0x21ca",
        "// tiny header, code size 19",
        "IL_0001:  call       instance void [mscorlib]System.Object::.ctor()",
        "IL_0006:  ldsfld     int32 Shape::created",
        "// method 0x06000005 Shape::get_Name(), RVA 0: no body",
        "IL_0023:  call       string [mscorlib]System.String::Concat(string, string, string)",
    ] {
        assert!(out.lines().any(|l| l == line), "missing {line:?} in\n{out}");
    }
    assert!(!out.contains("Circle::"), "{out}");

    // Tokens choose methods too, and the two choices add up; .try nesting is kept.
    let (code, out, err) = ilcheck(&[
        "disasm",
        "corpus/bin/codec_shapes.dll",
        "--token",
        "0x06000023",
        "--method",
        "Codec.Shapes::Vararg_Call*",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("// method 0x06000023 Codec.Shapes::Calli_Static(int32), RVA 0x24a4\n")
    );
    assert!(out.contains("IL_0007:  calli      int32(int32)\n"), "{out}");
    assert!(out.contains("vararg int32 Codec.Shapes::Vararg_Sum(int32, ..., int32, int32)\n"));
    let (code, out, _) = ilcheck(&[
        "disasm",
        "corpus/bin/control_flow.exe",
        "--method",
        "*::Nested(*",
    ]);
    assert_eq!(code, 0);
    assert!(out.contains("\n        catch MyException\n"), "{out}");

    // --raw-tokens prints them as stored.
    let (code, out, _) = ilcheck(&[
        "disasm",
        "corpus/bin/features.exe",
        "--method",
        "Shape::.ctor()",
        "--raw-tokens",
    ]);
    assert_eq!(code, 0);
    assert!(out.contains("IL_0001:  call       0x0a00000"), "{out}");
    assert!(!out.contains("[mscorlib]"), "{out}");
}

#[test]
fn disasm_no_match_and_bad_inputs() {
    let methods = ilcheck::image::Image::open("corpus/bin/features.exe")
        .unwrap()
        .method_count();
    let (code, out, err) = ilcheck(&["disasm", "corpus/bin/features.exe", "--method", "Nope::*"]);
    assert_eq!(code, 1, "{err}");
    assert!(out.is_empty());
    assert!(
        err.contains(&format!(
            "no method of corpus/bin/features.exe matches 'Nope::*' (it has {methods} methods"
        )),
        "{err}"
    );
    // Full names carry the parameters: a glob without them is told so.
    let (code, _, err) = ilcheck(&[
        "disasm",
        "corpus/bin/features.exe",
        "--method",
        "Shape::Describe",
    ]);
    assert_eq!(code, 1);
    assert!(
        err.contains("Shape::Describe() would match 'Shape::Describe*'"),
        "{err}"
    );
    let (code, _, err) = ilcheck(&["disasm", "corpus/bin/features.exe", "--token", "0x06ffffff"]);
    assert_eq!(code, 1, "{err}");
    let (code, _, err) = ilcheck(&["disasm", "corpus/bin/features.exe", "--token", "0x0a000001"]);
    assert_eq!(code, 2);
    assert!(err.contains("not a MethodDef token"), "{err}");

    let dir = scratch("disasm");
    // A file of body bytes (tiny header, ldc.i4.0, ret) is a body; --method needs an assembly.
    let body = dir.join("body.bin");
    std::fs::write(&body, [0x0A, 0x16, 0x2A]).unwrap();
    let (code, out, _) = ilcheck(&["disasm", body.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(out.contains("IL_0001:  ret"), "{out}");
    let (code, _, err) = ilcheck(&["disasm", body.to_str().unwrap(), "--method", "*"]);
    assert_eq!(code, 2);
    assert!(err.contains("is not an assembly"), "{err}");
    // An assembly without methods (a reference assembly) is printed as such.
    let empty = dir.join("empty.dll");
    let lib = ilcheck::image::emit::assembly::AssemblyBuilder::new(
        "Empty",
        [1, 0, 0, 0],
        ilcheck::image::emit::assembly::ImageKind::Dll,
    )
    .unwrap();
    std::fs::write(&empty, lib.build().unwrap()).unwrap();
    let (code, out, err) = ilcheck(&["disasm", empty.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.ends_with("empty.dll defines no methods\n"), "{out}");
    // A PE file that is not .NET, and a missing file: exit 2 with the reason.
    let pe = dir.join("native.dll");
    std::fs::write(&pe, b"MZ\x90\0not a PE image at all").unwrap();
    let (code, _, err) = ilcheck(&["disasm", pe.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("not a readable .NET assembly"), "{err}");
    // A file named as an assembly is one, or an error: never read as body bytes.
    let text = dir.join("notes.dll");
    std::fs::write(&text, "just text").unwrap();
    let (code, _, err) = ilcheck(&["disasm", text.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(
        err.contains("does not start with the PE signature MZ"),
        "{err}"
    );
    let (code, _, err) = ilcheck(&["disasm", dir.join("missing.dll").to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("missing.dll"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn verify_windows_name_their_tokens() {
    let report = std::env::temp_dir().join(format!("ilcheck-windows-{}.md", std::process::id()));
    let (code, out, _) = ilcheck(&[
        "verify",
        "corpus/bin/verify_cases.dll",
        "--max",
        "1000",
        "--report",
        report.to_str().unwrap(),
    ]);
    assert_eq!(code, 1);
    let line = "  > IL_0004:  call       int32 Verify.Helpers::I(int32)";
    assert!(out.lines().any(|l| l == line), "{out}");
    let md = std::fs::read_to_string(&report).unwrap();
    std::fs::remove_file(&report).ok();
    assert!(md.lines().any(|l| l == line), "{md}");
}

#[test]
fn roundtrip_json_schema_and_exit_codes() {
    let (code, out, err) = ilcheck(&["roundtrip", "corpus/bin", "--json", "--canonical"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["schema"], "ilcheck.roundtrip/1");
    for field in [
        "assemblies",
        "bodies",
        "identical",
        "mismatches",
        "decode_errors",
        "il_bytes",
        "instructions",
        "decode_seconds",
        "encode_seconds",
    ] {
        assert!(v.get(field).is_some(), "missing {field}");
    }
    assert_eq!(v["identical"], v["bodies"]);
    assert!(v["canonical"]["bodies_checked"].as_u64().unwrap() > 0);
    let (code, _, _) = ilcheck(&["roundtrip", "no/such/path.dll"]);
    assert_eq!(code, 2);
}

#[test]
fn roundtrip_markdown_report() {
    let path = std::env::temp_dir().join(format!("ilcheck-roundtrip-{}.md", std::process::id()));
    let (code, _, err) = ilcheck(&[
        "roundtrip",
        "corpus/bin/codec_shapes.dll",
        "--report",
        path.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let md = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).ok();
    assert!(md.contains("every body and every image identical"), "{md}");
    assert!(md.contains("| bodies identical |"), "{md}");
}

#[test]
fn verify_findings_json_sarif_and_baseline() {
    let (code, out, err) = ilcheck(&[
        "verify",
        "corpus/bin/verify_cases.dll",
        "--json",
        "--max",
        "1000",
    ]);
    assert_eq!(code, 1, "findings give exit code 1: {err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["schema"], "ilcheck.verify/1");
    let findings = v["findings"].as_array().unwrap();
    assert_eq!(findings.len() as u64, v["findings_total"].as_u64().unwrap());
    assert!(v["methods_with_errors"].as_u64().unwrap() > 50);
    // Every finding is in a method whose name lists its code, and no _Valid method has one.
    for f in findings {
        let method = f["method"].as_str().unwrap();
        let code = f["code"].as_str().unwrap();
        assert!(
            method.contains("_Invalid_") && method.contains(code),
            "{method}: {code}"
        );
        for field in ["assembly", "token", "offset", "message"] {
            assert!(f.get(field).is_some());
        }
    }

    let sarif = std::env::temp_dir().join(format!("ilcheck-{}.sarif", std::process::id()));
    let (code, _, _) = ilcheck(&[
        "verify",
        "corpus/bin/verify_cases.dll",
        "--sarif",
        sarif.to_str().unwrap(),
    ]);
    assert_eq!(code, 1);
    let log: Value = serde_json::from_str(&std::fs::read_to_string(&sarif).unwrap()).unwrap();
    std::fs::remove_file(&sarif).ok();
    assert_eq!(log["version"], "2.1.0");
    assert!(!log["runs"][0]["results"].as_array().unwrap().is_empty());
    let notes =
        |log: &Value| log["runs"][0]["invocations"][0]["toolExecutionNotifications"].to_string();
    assert!(!notes(&log).contains("not listed"), "{}", notes(&log));
    // A log cut at --max says how much it leaves out.
    let (code, _, _) = ilcheck(&[
        "verify",
        "corpus/bin/verify_cases.dll",
        "--max",
        "2",
        "--sarif",
        sarif.to_str().unwrap(),
    ]);
    assert_eq!(code, 1);
    let cut: Value = serde_json::from_str(&std::fs::read_to_string(&sarif).unwrap()).unwrap();
    std::fs::remove_file(&sarif).ok();
    assert_eq!(cut["runs"][0]["results"].as_array().unwrap().len(), 2);
    assert!(
        notes(&cut).contains("more findings not listed (--max)"),
        "{}",
        notes(&cut)
    );

    // Against itself as the baseline nothing is new.
    let (code, out, err) = ilcheck(&[
        "verify",
        "corpus/bin/verify_cases.dll",
        "--baseline",
        "corpus/bin/verify_cases.dll",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let b: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(b["findings_total"], 0);
    assert_eq!(b["baseline_suppressed"], v["findings_total"]);
}

#[test]
fn verify_clean_program_exits_zero() {
    let (code, out, err) = ilcheck(&[
        "verify",
        "corpus/bin/control_flow.exe",
        "corpus/bin/features.exe",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("0 findings"), "{out}");
}

#[test]
fn verify_baseline_reports_only_what_a_patch_broke() {
    let (patched, token) = broken_control_flow();
    let dir = scratch("baseline");
    let path = dir.join("control_flow.exe");
    std::fs::write(&path, &patched).unwrap();
    let (code, out, err) = ilcheck(&[
        "verify",
        path.to_str().unwrap(),
        "--baseline",
        "corpus/bin/control_flow.exe",
        "--json",
    ]);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(code, 1, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let findings = v["findings"].as_array().unwrap();
    assert_eq!(findings.len(), 1, "{findings:#?}");
    assert_eq!(findings[0]["code"], "StackUnderflow");
    assert_eq!(findings[0]["token"], token);
    assert_eq!(v["per_assembly"][0]["paired_by"], "file_name");
}

/// `control_flow.exe` with its first method's body made `pop; ret` (a stack underflow).
fn broken_control_flow() -> (Vec<u8>, String) {
    use ilcheck::image::{Image, writer::ImageWriter};
    let original = std::fs::read(format!(
        "{}/corpus/bin/control_flow.exe",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let image = Image::parse(&original).unwrap();
    let victim = image.methods().find(|m| m.rva() != 0).unwrap();
    let mut writer = ImageWriter::new(&image);
    writer
        .replace_body(victim.rid(), vec![(2 << 2) | 2, 0x26, 0x2A])
        .unwrap();
    let token = format!("{:#010x}", victim.token().0);
    (writer.finish().unwrap().bytes, token)
}

/// `--baseline-pair` pairs paths that contain `=`: of every split at an `=`, the one whose two
/// sides are existing files is taken; none, or more than one, is an error that says so.
#[test]
fn verify_baseline_pair_takes_paths_with_equals_signs() {
    let dir = scratch("pair-eq");
    std::fs::create_dir_all(dir.join("x=y")).unwrap();
    let (patched, token) = broken_control_flow();
    let original = format!("{}/corpus/bin/control_flow.exe", env!("CARGO_MANIFEST_DIR"));
    // `=` in the patched file's directory and name, and in the original's name.
    let p = dir.join("x=y/a=b.exe");
    std::fs::write(&p, &patched).unwrap();
    let o = dir.join("orig=1.exe");
    std::fs::copy(&original, &o).unwrap();
    let pair = format!("{}={}", p.display(), o.display());
    let (code, out, err) = ilcheck(&["verify", "--json", "--baseline-pair", &pair]);
    assert_eq!(code, 1, "{out}{err}");
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
    assert_eq!(v["per_assembly"][0]["paired_by"], "explicit", "{v:#}");
    let findings = v["findings"].as_array().unwrap();
    assert_eq!(findings.len(), 1, "{v:#}");
    assert_eq!(findings[0]["token"], token);

    // No split names two files.
    let none = format!("{}={}", p.display(), dir.join("gone=.exe").display());
    let (code, _, err) = ilcheck(&["verify", "--baseline-pair", &none]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("no `=` in it splits it into two existing files"),
        "{err}"
    );

    // Two splits name two files: `c=c=c` beside files `c` and `c=c`.
    std::fs::copy(&original, dir.join("c")).unwrap();
    std::fs::copy(&original, dir.join("c=c")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ilcheck"))
        .args(["verify", "--baseline-pair", "c=c=c"])
        .current_dir(&dir)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("ambiguous"), "{err}");

    let (_, help, _) = ilcheck(&["verify", "--help"]);
    assert!(help.contains("every `=` is tried"), "{help}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Assemblies whose file names differ are paired by identity; one with no original is said
/// loudly (standard error, JSON); `--baseline-pair` pairs explicitly; two originals of one file
/// name are told apart by identity.
#[test]
fn verify_baseline_pairs_by_identity_or_explicitly_and_warns_when_it_cannot() {
    let dir = scratch("pairs");
    for sub in ["a", "b", "p"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    let (patched, token) = broken_control_flow();
    let renamed = dir.join("renamed.exe");
    std::fs::write(&renamed, &patched).unwrap();
    let renamed = renamed.to_str().unwrap();
    let json = |args: &[&str]| {
        let mut all = vec!["verify", "--json"];
        all.extend_from_slice(args);
        let (code, out, err) = ilcheck(&all);
        let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
        (code, v, err)
    };
    let only_underflow = |v: &Value| {
        let findings = v["findings"].as_array().unwrap();
        assert_eq!(findings.len(), 1, "{v:#}");
        assert_eq!(findings[0]["code"], "StackUnderflow");
        assert_eq!(findings[0]["token"], token);
    };

    // By identity: same assembly, another file name.
    let (code, v, err) = json(&[renamed, "--baseline", "corpus/bin/control_flow.exe"]);
    assert_eq!(code, 1, "{err}");
    only_underflow(&v);
    assert_eq!(v["per_assembly"][0]["paired_by"], "identity");
    assert_eq!(
        v["per_assembly"][0]["original"],
        "corpus/bin/control_flow.exe"
    );
    assert!(!err.contains("WARNING"), "{err}");

    // Another build under the patched file's name gives way to the one original with its
    // identity; with none, it is compared and the report says the builds differ.
    let other = dir.join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::copy(
        "corpus/bin/control_flow.debug.exe",
        other.join("renamed.exe"),
    )
    .unwrap();
    let (code, v, err) = json(&[renamed, "--baseline", other.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(v["per_assembly"][0]["paired_by"], "file_name", "{v:#}");
    assert_eq!(
        v["per_assembly"][0]["original_identity"],
        "control_flow.debug, Version=0.0.0.0"
    );
    assert!(err.contains("another build"), "{err}");
    std::fs::copy("corpus/bin/control_flow.exe", other.join("cf.exe")).unwrap();
    let (code, v, err) = json(&[renamed, "--baseline", other.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    only_underflow(&v);
    assert_eq!(v["per_assembly"][0]["paired_by"], "identity", "{v:#}");
    assert!(v["per_assembly"][0].get("original_identity").is_none());
    assert!(!err.contains("WARNING"), "{err}");

    // No original: every finding new, and said on standard error and in the report.
    let (code, v, err) = json(&[renamed, "--baseline", "corpus/bin/features.exe"]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(v["baseline_missing"][0], renamed);
    let why = v["per_assembly"][0]["no_original"].as_str().unwrap();
    assert!(
        why.contains("renamed.exe") && why.contains("control_flow"),
        "{why}"
    );
    assert!(
        err.contains("WARNING") && err.contains(renamed) && err.contains("--baseline-pair"),
        "{err}"
    );
    assert!(v["findings_total"].as_u64().unwrap() >= 1);

    // An explicit pair, with nothing else named: the patched file is verified.
    let pair = format!("{renamed}=corpus/bin/control_flow.exe");
    let (code, v, err) = json(&["--baseline-pair", &pair]);
    assert_eq!(code, 1, "{err}");
    only_underflow(&v);
    assert_eq!(v["per_assembly"][0]["paired_by"], "explicit");
    assert_eq!(v["assemblies"], 1);
    let (code, _, err) = ilcheck(&["verify", "--baseline-pair", renamed]);
    assert_eq!(code, 2);
    assert!(err.contains("PATCHED=ORIGINAL"), "{err}");

    // Two originals named control_flow.exe: the one with the patched file's identity.
    let root = env!("CARGO_MANIFEST_DIR");
    std::fs::copy(
        format!("{root}/corpus/bin/features.exe"),
        dir.join("a/control_flow.exe"),
    )
    .unwrap();
    std::fs::copy(
        format!("{root}/corpus/bin/control_flow.exe"),
        dir.join("b/control_flow.exe"),
    )
    .unwrap();
    let same_name = dir.join("p/control_flow.exe");
    std::fs::write(&same_name, &patched).unwrap();
    let (a, b) = (dir.join("a"), dir.join("b"));
    let (code, v, err) = json(&[
        same_name.to_str().unwrap(),
        "--baseline",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{err}");
    only_underflow(&v);
    assert_eq!(v["per_assembly"][0]["paired_by"], "file_name");
    assert_eq!(
        v["per_assembly"][0]["original"],
        dir.join("b/control_flow.exe").to_str().unwrap()
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// Copies of one assembly in several directories (a tree rewritten into another keeps its
/// relative paths): each patched file is compared with the original in the directories of the
/// same names, and one whose directories match none is said to have no original.
#[test]
fn verify_baseline_pairs_same_named_copies_by_their_directories() {
    let dir = scratch("tails");
    let (broken, token) = broken_control_flow();
    let original = std::fs::read(format!(
        "{}/corpus/bin/control_flow.exe",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    // `one` has the original, `two` the broken copy (same identity): the broken patched copy
    // has a new finding against `one` and none against `two`.
    for (sub, bytes) in [("o/app/one", &original), ("o/app/two", &broken)] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
        std::fs::write(dir.join(sub).join("control_flow.exe"), bytes).unwrap();
    }
    for sub in ["p/app/one", "p/app/two", "p/app/three"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
        std::fs::write(dir.join(sub).join("control_flow.exe"), &broken).unwrap();
    }
    let (code, out, err) = ilcheck(&[
        "verify",
        "--json",
        dir.join("p").to_str().unwrap(),
        "--baseline",
        dir.join("o").to_str().unwrap(),
    ]);
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
    assert_eq!(code, 1, "{err}");
    let of = |sub: &str| {
        let path = dir.join(sub).join("control_flow.exe");
        v["per_assembly"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["assembly"] == path.to_str().unwrap())
            .unwrap_or_else(|| panic!("{sub} not in {v:#}"))
            .clone()
    };
    for (sub, findings) in [("one", 1), ("two", 0)] {
        let a = of(&format!("p/app/{sub}"));
        assert_eq!(a["paired_by"], "path", "{a:#}");
        let expected = dir.join(format!("o/app/{sub}/control_flow.exe"));
        assert_eq!(a["original"], expected.to_str().unwrap(), "{a:#}");
        assert_eq!(a["findings"], findings, "{a:#}");
    }
    let three = of("p/app/three");
    let why = three["no_original"].as_str().unwrap();
    assert!(why.contains("directories"), "{why}");
    assert!(err.contains("WARNING") && err.contains("three"), "{err}");
    // The one finding against `one` is the break itself; `three` reports all of its own.
    let new: Vec<&Value> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["assembly"].as_str().unwrap().contains("/one/"))
        .collect();
    assert_eq!(new.len(), 1, "{v:#}");
    assert_eq!(new[0]["code"], "StackUnderflow");
    assert_eq!(new[0]["token"], token);
    std::fs::remove_dir_all(&dir).ok();
}

/// `rewrite --json` lists the methods a transform skipped, with their reasons and IL bytes,
/// and counts the bytes per reason.
#[test]
fn rewrite_json_lists_skipped_methods_and_their_bytes() {
    let dir = scratch("skipped");
    let out = dir.join("shapes.dll");
    let run = |max: &str| {
        let (code, text, err) = ilcheck(&[
            "rewrite",
            "corpus/bin/codec_shapes.dll",
            "-o",
            out.to_str().unwrap(),
            "-t",
            "wrap-finally",
            "--json",
            "--max",
            max,
        ]);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str::<Value>(&text).unwrap()
    };
    let v = run("50");
    let listed = v["skipped_methods"].as_array().unwrap();
    let skipped: u64 = v["skipped"]
        .as_object()
        .unwrap()
        .values()
        .map(|n| n.as_u64().unwrap())
        .sum();
    assert!(skipped > 0, "{v:#}");
    assert_eq!(listed.len() as u64, skipped);
    for (reason, bytes) in v["skipped_il_bytes"].as_object().unwrap() {
        let sum: u64 = listed
            .iter()
            .filter(|m| m["reason"] == reason.as_str())
            .map(|m| m["il_bytes"].as_u64().unwrap())
            .sum();
        assert_eq!(Some(sum), bytes.as_u64(), "{reason}");
        assert!(sum > 0);
    }
    for m in listed {
        assert!(m["token"].as_str().unwrap().starts_with("0x06"));
        assert!(!m["method"].as_str().unwrap().is_empty());
    }
    // --max lists the first in token order; the counts stay whole.
    let one = run("1");
    assert_eq!(one["skipped_methods"].as_array().unwrap().len(), 1);
    assert_eq!(one["skipped_methods"][0], listed[0]);
    assert_eq!(one["skipped_il_bytes"], v["skipped_il_bytes"]);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn rewrite_writes_a_verified_assembly() {
    let dir = scratch("rewrite");
    let out_path = dir.join("features.exe");
    let (code, out, err) = ilcheck(&[
        "rewrite",
        "corpus/bin/features.exe",
        "-o",
        out_path.to_str().unwrap(),
        "--transform",
        "prologue-epilogue",
        "--json",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["schema"], "ilcheck.rewrite/1");
    assert_eq!(v["rewritten"], v["selected"]);
    assert!(v["rewritten"].as_u64().unwrap() > 50);
    // The output verifies with nothing new against the input.
    let (code, out, err) = ilcheck(&[
        "verify",
        out_path.to_str().unwrap(),
        "--baseline",
        "corpus/bin/features.exe",
    ]);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(code, 0, "{out}{err}");
    let (code, _, err) = ilcheck(&[
        "rewrite",
        "corpus/bin/features.exe",
        "-o",
        "/dev/null",
        "-t",
        "no-such",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("unknown transform"), "{err}");
}

#[test]
fn wrap_uses_an_unused_local_of_the_return_type() {
    use ilcheck::corpus::{self, RewriteOptions, RewriteReport};
    use ilcheck::image::Image;
    use ilcheck::ir::{LayoutOptions, TransformOptions};
    let bytes = std::fs::read(format!(
        "{}/corpus/bin/codec_shapes.dll",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let image = Image::parse(&bytes).unwrap();
    let run = |pattern: &str| {
        let opts = RewriteOptions {
            transform: ilcheck::ir::Transform::WrapFinally,
            transform_opts: TransformOptions::default(),
            layout: LayoutOptions::default(),
            methods: Some(pattern.into()),
            max_listed: 10,
            threads: 0,
            keep_ready_to_run: false,
            keep_old_bodies: false,
            probes: Default::default(),
        };
        let mut report = RewriteReport::default();
        let out = corpus::rewrite_image(&image, &opts, &mut report).unwrap();
        (report, out)
    };
    let (spare, out) = run("*::SpareLocal_OfReturnType(*");
    assert_eq!((spare.selected, spare.rewritten), (1, 1), "{spare:#?}");
    // The wrapped body stores the value in local 1 and reloads it after the finally.
    let patched = Image::parse(&out).unwrap();
    let m = patched
        .methods()
        .find(|m| m.full_name().unwrap().contains("SpareLocal_OfReturnType"))
        .unwrap();
    let body = m.decoded_body().unwrap();
    let ops: Vec<_> = body.instructions().map(|i| i.unwrap().opcode).collect();
    assert!(
        ops.contains(&ilcheck::opcode::Opcode::Stloc_1)
            && ops.contains(&ilcheck::opcode::Opcode::Ldloc_1),
        "{ops:?}"
    );
    assert_eq!(body.clauses().count(), 1);
    // Without a spare local, the method gets a new local signature: its locals and one more.
    let (none, out) = run("*::SpareLocal_None(*");
    assert_eq!((none.selected, none.rewritten), (1, 1), "{none:#?}");
    assert!(none.skipped.is_empty(), "{none:#?}");
    assert_eq!(none.locals_added, 1);
    assert_eq!(none.metadata_rows_added, 1);
    let patched = Image::parse(&out).unwrap();
    let m = patched
        .methods()
        .find(|m| m.full_name().unwrap().contains("SpareLocal_None"))
        .unwrap();
    let body = m.decoded_body().unwrap();
    let old = image
        .methods()
        .find(|m| m.full_name().unwrap().contains("SpareLocal_None"))
        .unwrap()
        .decoded_body()
        .unwrap();
    assert_ne!(body.local_sig(), old.local_sig());
    let count = |img: &Image<'_>, b: &ilcheck::body::Body<'_>| {
        img.local_count(ilcheck::image::Token(b.local_sig()))
            .unwrap()
    };
    assert_eq!(count(&patched, &body), count(&image, &old) + 1);
}

/// `rewrite DIR -o OUT` writes the same bytes as one run per file; the shards of `--shard K/N`
/// together rewrite every assembly exactly once.
#[test]
fn rewrite_many_equals_one_run_per_file_and_shards_split_it() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = scratch("rewrite-many");
    let many = tmp.join("many");
    let (code, out, err) = ilcheck(&[
        "rewrite",
        "corpus/bin",
        "-o",
        many.to_str().unwrap(),
        "-t",
        "prologue-epilogue",
    ]);
    assert!(code == 0 || code == 1, "{out}{err}");
    let assemblies = std::fs::read_dir(root.join("corpus/bin"))
        .unwrap()
        .flatten()
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.ends_with(".dll") || n.ends_with(".exe")
        })
        .count();
    assert!(
        out.contains(&format!("total: {assemblies} assemblies (0 failed)")),
        "{out}"
    );
    let mut names = Vec::new();
    for e in std::fs::read_dir(root.join("corpus/bin"))
        .unwrap()
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        let single = tmp.join("single").join(&name);
        let (c, o, e2) = ilcheck(&[
            "rewrite",
            e.path().to_str().unwrap(),
            "-o",
            single.to_str().unwrap(),
            "-t",
            "prologue-epilogue",
        ]);
        assert!(c == 0 || c == 1, "{name}: {o}{e2}");
        assert_eq!(
            std::fs::read(&single).unwrap(),
            std::fs::read(many.join(&name)).unwrap(),
            "{name}"
        );
        names.push(name);
    }
    let mut union = Vec::new();
    for k in 1..=3 {
        let dir = tmp.join(format!("shard{k}"));
        let shard = format!("{k}/3");
        let (c, o, e) = ilcheck(&[
            "rewrite",
            "corpus/bin",
            "-o",
            dir.to_str().unwrap(),
            "-t",
            "identity",
            "--shard",
            &shard,
        ]);
        assert!(c == 0 || c == 1, "{o}{e}");
        if let Ok(rd) = std::fs::read_dir(&dir) {
            union.extend(
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned()),
            );
        }
    }
    union.sort();
    names.sort();
    assert_eq!(union, names);
    let _ = std::fs::remove_dir_all(&tmp);
}

/// `bench`: a rewriter whose output checks out gets figures and the reference line; one whose
/// output is garbage gets none (exit 1); `--compare` against a faster previous run fails past
/// `--max-regression`.
#[test]
fn bench_measures_checks_and_compares() {
    let tmp = scratch("bench-test");
    let input = "corpus/bin/control_flow.exe";
    let (code, out, err) = ilcheck(&[
        "bench",
        input,
        "--rewriter",
        "cp {in} {out}",
        "--rounds",
        "2",
        "--warmup",
        "0",
        "--json",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["schema"], "ilcheck.bench/1");
    assert_eq!(v["lines"].as_array().unwrap().len(), 2);
    assert!(v["lines"][0]["mb_per_s"].as_f64().unwrap() > 0.0);
    assert!(
        v["lines"][1]["name"]
            .as_str()
            .unwrap()
            .contains("reference")
    );
    assert!(v["methods"].as_u64().unwrap() > 10);

    let (code, out, err) = ilcheck(&[
        "bench",
        input,
        "--rewriter",
        "sh -c 'echo garbage > \"$2\"' sh {in} {out}",
        "--rounds",
        "1",
        "--warmup",
        "0",
    ]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("no speed figure"), "{out}");

    // A hanging rewriter costs one deadline, not one per call: the bench stops at its first
    // failure (here in the warm-up, over every assembly of the corpus and four rounds).
    let start = std::time::Instant::now();
    let (code, out, err) = ilcheck(&[
        "bench",
        "corpus/bin",
        "--rewriter",
        "sh -c 'exec sleep 30' sh {in} {out}",
        "--rounds",
        "3",
        "--warmup",
        "1",
        "--timeout",
        "1",
    ]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("timed out"), "{out}");
    assert!(
        out.contains("stopped at the rewriter's first failure"),
        "{out}"
    );
    assert!(start.elapsed().as_secs() < 10, "took {:?}", start.elapsed());

    // A previous run ten times faster: a regression.
    let mut prev = v.clone();
    for l in prev["lines"].as_array_mut().unwrap() {
        let m = l["wall"]["median"].as_f64().unwrap();
        l["wall"]["median"] = serde_json::json!(m / 10.0);
    }
    let prev_path = tmp.join("prev.json");
    std::fs::write(&prev_path, serde_json::to_string(&prev).unwrap()).unwrap();
    let report = tmp.join("bench.md");
    let (code, out, err) = ilcheck(&[
        "bench",
        input,
        "--rewriter",
        "cp {in} {out}",
        "--rounds",
        "1",
        "--warmup",
        "0",
        "--compare",
        prev_path.to_str().unwrap(),
        "--report",
        report.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("change against --compare: +"), "{out}");
    assert!(
        std::fs::read_to_string(&report)
            .unwrap()
            .contains("| line |")
    );
    assert!(
        std::fs::read_to_string(tmp.join("bench.svg"))
            .unwrap()
            .starts_with("<svg")
    );
    let _ = std::fs::remove_dir_all(&tmp);
}

/// `bench`: a call that exits 0 but leaves no output (none, or an empty file) ends the
/// measurement at that call, warm-ups included, as a crash does; a line without a figure gets
/// no ratio to the reference; problems name the user's input, not the scratch copy.
#[test]
fn bench_stops_at_a_call_that_writes_nothing() {
    let tmp = scratch("writes-nothing");
    let calls = tmp.join("calls.log");
    let inputs = ["corpus/bin/control_flow.exe", "corpus/bin/features.exe"];
    let log = format!("echo call >> '{}'", calls.display());
    for (what, rewriter, said) in [
        (
            "nothing",
            format!("sh -c \"{log}\" sh {{in}} {{out}}"),
            "the rewriter exited 0 but wrote no output",
        ),
        (
            "empty",
            format!("sh -c \"{log}; : > \\\"$2\\\"\" sh {{in}} {{out}}"),
            "the rewriter exited 0 but its output is empty",
        ),
        (
            "crash",
            format!("sh -c \"{log}; exit 3\" sh {{in}} {{out}}"),
            "the rewriter ended with exit code 3",
        ),
    ] {
        let _ = std::fs::remove_file(&calls);
        let (code, out, err) = ilcheck(&[
            "bench",
            inputs[0],
            inputs[1],
            "--rewriter",
            &rewriter,
            "--rounds",
            "3",
            "--warmup",
            "2",
        ]);
        assert_eq!(code, 1, "{what}: {out}{err}");
        let n = std::fs::read_to_string(&calls)
            .unwrap_or_default()
            .lines()
            .count();
        assert_eq!(n, 1, "{what}: the rewriter was called {n} times: {out}");
        assert!(
            out.contains(&format!("problem: {}: {said}", inputs[0])),
            "{what}: {out}"
        );
        assert!(
            !out.contains("ilcheck-bench-"),
            "{what}: a scratch path: {out}"
        );
        assert!(!out.contains("ratio"), "{what}: {out}");
    }
    // Every call writes, but garbage: rounds measured, no figure, no ratio, and the problem
    // names the input whose output it is.
    let (code, out, err) = ilcheck(&[
        "bench",
        inputs[0],
        "--rewriter",
        "sh -c 'echo garbage > \"$2\"' sh {in} {out}",
        "--rounds",
        "1",
        "--warmup",
        "0",
    ]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("no speed figure") && !out.contains("ratio"),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "problem: {} (the rewriter's output of it): not a PE image",
            inputs[0]
        )),
        "{out}"
    );
    // One call for the whole directory that writes nothing: each input named.
    let (code, out, err) = ilcheck(&[
        "bench",
        inputs[0],
        inputs[1],
        "--rewriter",
        "true {in_dir} {out_dir}",
        "--rounds",
        "2",
        "--warmup",
        "1",
    ]);
    assert_eq!(code, 1, "{out}{err}");
    for i in inputs {
        assert!(
            out.contains(&format!(
                "problem: {i}: the rewriter exited 0 but wrote no output"
            )),
            "{out}"
        );
    }
    assert!(!out.contains("ratio"), "{out}");
    let _ = std::fs::remove_dir_all(&tmp);
}

/// `verify --shard K/N` over a corpus, merged with `report merge`, counts what one run counts.
#[test]
fn sharded_verify_merges_into_the_whole() {
    let tmp = scratch("shard-merge");
    let (_, whole, _) = ilcheck(&["verify", "corpus/bin", "--json", "--max", "100000"]);
    let whole: Value = serde_json::from_str(&whole).unwrap();
    let mut parts = Vec::new();
    for k in 1..=3 {
        let (code, out, err) = ilcheck(&[
            "verify",
            "corpus/bin",
            "--json",
            "--max",
            "100000",
            "--shard",
            &format!("{k}/3"),
        ]);
        assert!(code == 0 || code == 1, "{out}{err}");
        let p = tmp.join(format!("part{k}.json"));
        std::fs::write(&p, out).unwrap();
        parts.push(p.to_str().unwrap().to_string());
    }
    let md = tmp.join("merged.md");
    let mut args = vec!["report", "merge"];
    args.extend(parts.iter().map(String::as_str));
    args.extend(["--markdown", md.to_str().unwrap()]);
    let (code, out, err) = ilcheck(&args);
    assert_eq!(code, 0, "{out}{err}");
    let merged: Value = serde_json::from_str(&out).unwrap();
    for field in [
        "assemblies",
        "methods_checked",
        "findings_total",
        "il_bytes",
    ] {
        assert_eq!(merged[field], whole[field], "{field}");
    }
    assert_eq!(
        merged["findings"].as_array().unwrap().len(),
        whole["findings"].as_array().unwrap().len()
    );
    // Counts per code add up across shards; each assembly is in one shard.
    assert!(!whole["codes"].as_object().unwrap().is_empty());
    assert_eq!(merged["codes"], whole["codes"]);
    assert_eq!(
        merged["per_assembly"].as_array().unwrap().len() as u64,
        whole["assemblies"].as_u64().unwrap()
    );
    assert!(
        std::fs::read_to_string(&md)
            .unwrap()
            .contains("Findings per code")
    );
    let (code, _, err) = ilcheck(&["report", "merge", parts[0].as_str(), "Cargo.toml"]);
    assert_eq!(code, 2, "{err}");

    // What would give wrong totals is refused, naming why; no report replaces an input.
    let whole_path = tmp.join("whole.json");
    std::fs::write(&whole_path, serde_json::to_string(&whole).unwrap()).unwrap();
    let stub = tmp.join("stub.json");
    std::fs::write(&stub, r#"{"schema":"ilcheck.verify/1"}"#).unwrap();
    let other = tmp.join("half.json");
    let (_, half, _) = ilcheck(&["verify", "corpus/bin", "--json", "--shard", "1/2"]);
    std::fs::write(&other, half).unwrap();
    let (p1, p2, p3) = (parts[0].as_str(), parts[1].as_str(), parts[2].as_str());
    let md = md.to_str().unwrap();
    let refused: [(Vec<&str>, &str); 7] = [
        (vec![p1, p1, p2, p3], "both shard 1/3"),
        (vec![p1, p2], "shard 3/3 missing"),
        (
            vec![p1, p2, p3, other.to_str().unwrap()],
            "not the shards of one run",
        ),
        (vec![whole_path.to_str().unwrap(), p1], "a whole run"),
        (
            vec![whole_path.to_str().unwrap(), stub.to_str().unwrap()],
            "not a whole",
        ),
        (vec![p1, p2, p3, "-o", p2], "which this run reads"),
        (vec![p1, p2, p3, "--markdown", p3], "which this run reads"),
    ];
    for (args, why) in refused {
        let before: Vec<Vec<u8>> = parts.iter().map(|p| std::fs::read(p).unwrap()).collect();
        let mut all = vec!["report", "merge"];
        all.extend(args.iter().copied());
        let (code, _, err) = ilcheck(&all);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(why), "{args:?}: {err}");
        let after: Vec<Vec<u8>> = parts.iter().map(|p| std::fs::read(p).unwrap()).collect();
        assert!(before == after, "{args:?} changed an input");
    }
    let (code, out, err) = ilcheck(&[
        "report",
        "merge",
        p1,
        p2,
        "--allow-missing",
        "--markdown",
        md,
    ]);
    assert_eq!(code, 0, "{err}");
    let partial: Value = serde_json::from_str(&out).unwrap();
    assert!(partial["assemblies"].as_u64() < whole["assemblies"].as_u64());
    let _ = std::fs::remove_dir_all(&tmp);
}

/// Runs `args` with standard output a pipe that is closed after its first line, as
/// `ilcheck … | head -1` does; the exit code and standard error.
fn with_reader_gone(args: &[&str]) -> (i32, String) {
    use std::io::{BufRead, Read};
    let mut child = Command::new(env!("CARGO_BIN_EXE_ilcheck"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("runs");
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    // The reader is dropped here: every later write meets a closed pipe.
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = child.wait().unwrap();
    assert!(!first.is_empty(), "{args:?} printed nothing");
    (status.code().unwrap_or(-1), err)
}

#[test]
fn a_reader_that_stops_early_ends_the_printing_not_the_run() {
    let dir = scratch("reader-gone");
    let shard = dir.join("s1.json");
    std::fs::write(
        &shard,
        ilcheck(&["verify", "corpus/bin", "--json", "--shard", "1/2"]).1,
    )
    .unwrap();
    let rewritten = dir.join("rewritten");
    let cases: [(&[&str], i32); 7] = [
        (&["verify", "corpus/bin"], 1),
        (&["verify", "corpus/bin", "--json"], 1),
        (&["verify", "corpus/bin", "--sarif", "/dev/stdout"], 1),
        (&["roundtrip", "corpus/bin", "--json"], 0),
        (
            &[
                "rewrite",
                "corpus/bin",
                "-o",
                rewritten.to_str().unwrap(),
                "-t",
                "prologue",
                "--json",
            ],
            0,
        ),
        (
            &[
                "report",
                "merge",
                shard.to_str().unwrap(),
                "--allow-missing",
            ],
            0,
        ),
        (&["disasm", "corpus/bin/features.exe"], 0),
    ];
    for (args, want) in cases {
        let (code, err) = with_reader_gone(args);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(code, want, "{args:?}: {err}");
    }
    // The rewrite still wrote every output.
    assert!(rewritten.join("features.exe").is_file());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_report_that_cannot_be_written_is_exit_2() {
    if !std::path::Path::new("/dev/full").exists() {
        panic!("/dev/full is missing: this test needs it");
    }
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ilcheck"))
        .args(["roundtrip", "corpus/bin", "--json"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(full)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("writing to standard output"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// `rewrite --methods` that selects no method with a body is exit 1 with the number of methods
/// and a name of the form they take, and writes nothing: an unchanged copy would pass for an
/// instrumented assembly. Among many assemblies, one where it selects nothing is written as
/// usual; the error is for a glob that selects nothing in any of them.
#[test]
fn rewrite_methods_that_select_nothing_write_nothing() {
    let dir = scratch("select-none");
    let out = dir.join("b.exe");
    let rewrite = |input: &str, out: &std::path::Path, glob: &str| {
        ilcheck(&[
            "rewrite",
            input,
            "-o",
            out.to_str().unwrap(),
            "-t",
            "prologue-epilogue",
            "--methods",
            glob,
        ])
    };
    // The parameters are part of the name: the hint says so with the name it nearly matched.
    let (code, text, err) = rewrite("corpus/bin/control_flow.exe", &out, "ControlFlow::Nested");
    assert_eq!(code, 1, "{text}{err}");
    assert!(
        err.contains("no method of corpus/bin/control_flow.exe matches"),
        "{err}"
    );
    assert!(err.contains("it has 24 methods with a body"), "{err}");
    assert!(
        err.contains("ControlFlow::Nested(int32) would match 'ControlFlow::Nested*'"),
        "{err}"
    );
    assert!(!out.exists());
    let (code, _, err) = rewrite("corpus/bin/control_flow.exe", &out, "NoSuch::*");
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("full names include the parameters, e.g. "),
        "{err}"
    );
    assert!(!out.exists());
    let (code, text, err) = rewrite("corpus/bin/control_flow.exe", &out, "*::Nested(*");
    assert_eq!(code, 0, "{text}{err}");
    assert!(text.contains("1 selected, 1 rewritten"), "{text}");
    // Many assemblies: nothing anywhere is the error, nothing written.
    let many = dir.join("many");
    let (code, text, err) = rewrite("corpus/bin", &many, "ControlFlow::Nested");
    assert_eq!(code, 1, "{text}{err}");
    assert!(err.contains("no method of the "), "{err}");
    assert!(err.contains("would match 'ControlFlow::Nested*'"), "{err}");
    let written = std::fs::read_dir(&many)
        .map(|d| d.flatten().count())
        .unwrap_or(0);
    assert_eq!(written, 0, "{text}");
    // Selected in one: every assembly written, the others unchanged.
    let (code, text, err) = rewrite("corpus/bin", &many, "*::Nested(*");
    assert_eq!(code, 0, "{text}{err}");
    let inputs: Vec<_> = std::fs::read_dir("corpus/bin")
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| {
            let n = n.to_string_lossy();
            n.ends_with(".dll") || n.ends_with(".exe")
        })
        .collect();
    assert!(inputs.len() > 2);
    for name in &inputs {
        let (a, b) = (
            std::fs::read(std::path::Path::new("corpus/bin").join(name)).unwrap(),
            std::fs::read(many.join(name)).unwrap(),
        );
        // ControlFlow::Nested is in control_flow.exe and its debug build.
        let selected = name.to_string_lossy().starts_with("control_flow.");
        assert_eq!(a != b, selected, "{name:?}: {text}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// `--catch-type` takes a type token of a row the assembly has, and only with `wrap-catch`;
/// anything else is a usage error (exit 2), nothing written.
#[test]
fn rewrite_catch_type_must_name_a_type() {
    let dir = scratch("catch-type");
    let out = dir.join("c.exe");
    for (transform, token, says) in [
        ("wrap-catch", "0x70000001", "0x70000001: not a type token"),
        ("wrap-catch", "0x06000001", "0x06000001: not a type token"),
        ("wrap-catch", "0x01000000", "0x01000000: not a type token"),
        (
            "wrap-catch",
            "0x01000999",
            "0x01000999: the assembly has 26 TypeRef rows",
        ),
        ("wrap-finally", "0x01000001", "not used by -t wrap-finally"),
    ] {
        let (code, text, err) = ilcheck(&[
            "rewrite",
            "corpus/bin/control_flow.exe",
            "-o",
            out.to_str().unwrap(),
            "-t",
            transform,
            "--catch-type",
            token,
        ]);
        assert_eq!(code, 2, "{token}: {text}{err}");
        assert!(err.contains(says), "{token}: {err}");
        assert!(!out.exists(), "{token}");
    }
    let (code, text, err) = ilcheck(&[
        "rewrite",
        "corpus/bin/control_flow.exe",
        "-o",
        out.to_str().unwrap(),
        "-t",
        "wrap-catch",
        "--catch-type",
        "0x01000002",
    ]);
    assert_eq!(code, 0, "{text}{err}");
    assert!(text.contains("24 rewritten"), "{text}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A rewrite that rewrites nothing adds no metadata: every method skipped (a catch type the
/// library is given that is no type) leaves the image as it was.
#[test]
fn nothing_rewritten_adds_no_metadata() {
    use ilcheck::corpus::{self, RewriteOptions, RewriteReport};
    let bytes = std::fs::read(format!(
        "{}/corpus/bin/control_flow.exe",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let image = ilcheck::image::Image::parse(&bytes).unwrap();
    let mut opts = RewriteOptions::new("wrap-catch").unwrap();
    opts.transform_opts.catch_type = 0x7000_0001;
    let mut report = RewriteReport::default();
    let out = corpus::rewrite_image(&image, &opts, &mut report).unwrap();
    assert_eq!(report.rewritten, 0, "{report:#?}");
    assert_eq!(report.skipped.get("NoCatchType"), Some(&24), "{report:#?}");
    assert_eq!(report.metadata_rows_added, 0, "{report:#?}");
    assert!(out == bytes, "the output differs from the input");
    // With a type to catch the same rewrite adds its locals' signatures.
    opts.transform_opts.catch_type = 0x0100_0002;
    let mut report = RewriteReport::default();
    corpus::rewrite_image(&image, &opts, &mut report).unwrap();
    assert_eq!(report.rewritten, 24, "{report:#?}");
    assert!(report.metadata_rows_added > 0, "{report:#?}");
}

/// What a rewrite invalidated is said in every form of the report: the single-file text names
/// the Authenticode certificate it removed beside the strong name (before, only the strong
/// name), and each line of a many-assembly run, and its total, say what the single-file text
/// says (before, nothing: 165 framework images made IL-only, signatures broken, unmentioned).
#[test]
fn rewrite_says_what_it_invalidated() {
    let test = "rewrite_says_what_it_invalidated";
    let framework = ilcheck::harness::runtime::coreclr_framework_dir().filter(|d| d.is_dir());
    if !crate::support::present(test, "CoreCLR's shared framework", framework.is_some()) {
        return;
    }
    let framework = framework.unwrap();
    // Strong-named and Authenticode-signed; ReadyToRun.
    let signed = framework.join("System.Runtime.WindowsRuntime.dll");
    let r2r = framework.join("System.Linq.dll");
    let dir = scratch("invalidated");
    let path = |p: &std::path::Path| p.to_str().unwrap().to_string();
    let rewrite = |inputs: &[&std::path::Path], out: &std::path::Path, extra: &[&str]| {
        let mut args = vec!["rewrite".to_string()];
        args.extend(inputs.iter().map(|p| path(p)));
        args.extend(["-o".into(), path(out), "-t".into(), "prologue".into()]);
        args.extend(extra.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, text, err) = ilcheck(&args);
        assert_eq!(code, 0, "{text}{err}");
        text
    };
    let text = rewrite(&[&signed], &dir.join("one.dll"), &[]);
    assert!(
        text.contains(
            "; strong-name signature no longer valid; Authenticode certificate table removed \
             (re-sign the output)"
        ),
        "{text}"
    );
    let text = rewrite(&[&signed, &r2r], &dir.join("many"), &[]);
    let line = |name: &str| {
        text.lines()
            .find(|l| l.contains(&format!("→ {}", path(&dir.join("many").join(name)))))
            .unwrap_or_else(|| panic!("no line for {name}: {text}"))
            .to_string()
    };
    assert!(
        line("System.Runtime.WindowsRuntime.dll")
            .ends_with(" rejected; strong name invalidated; Authenticode certificate dropped"),
        "{text}"
    );
    assert!(
        line("System.Linq.dll").ends_with(" rejected; ReadyToRun code dropped"),
        "{text}"
    );
    assert!(
        text.contains(
            " rejected; 1 strong name invalidated, 1 Authenticode certificate dropped, \
             1 ReadyToRun image made IL-only; "
        ),
        "{text}"
    );
    // Kept native code is said too.
    let text = rewrite(
        &[&r2r],
        &dir.join("kept"),
        &["--keep-r2r", "--shard", "1/1"],
    );
    assert!(
        text.contains("; ReadyToRun code kept (it may run instead of the patched IL)")
            && text.contains("; 1 ReadyToRun image kept its native code; "),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
