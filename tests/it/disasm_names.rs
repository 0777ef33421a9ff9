//! Token operands named from metadata: the text printed for each is the ILAsm that assembles to
//! it (`corpus/il/disasm_names.il` through ilasm and back), the field, type and string operands
//! of the project's corpus read as monodis reads them, and every token of every method of
//! mono's 4.5 assemblies is named without a panic, raw only with a reason (counted and
//! printed; use `--release -- --nocapture`).

use crate::support;

use ilcheck::body::Body;
use ilcheck::disasm::{ImageNamer, TokenNamer, disassemble_with};
use ilcheck::image::{CodedIndex, Image, Table, Token};
use ilcheck::instr::{Instructions, Operand};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Whitespace runs as one space, ends trimmed.
fn squeeze(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn is_opcode(word: &str) -> bool {
    ilcheck::opcode::ALL.iter().any(|op| op.name == word)
}

/// `IL_xxxx:  opcode  operand` lines of a listing as (opcode, operand), whitespace squeezed.
fn instructions(listing: &str) -> Vec<(String, String)> {
    listing
        .lines()
        .filter_map(|l| {
            let rest = l.trim_start().strip_prefix("IL_")?;
            let (_, rest) = rest.split_once(":  ")?;
            let (op, operand) = rest.split_once(' ').unwrap_or((rest, ""));
            Some((op.to_string(), squeeze(operand)))
        })
        .collect()
}

/// Assembles `corpus/il/disasm_names.il` into `dir` with ilasm.
fn assemble(dir: &Path) -> PathBuf {
    let out = dir.join("disasm_names.dll");
    let o = support::run(
        std::process::Command::new("ilasm")
            .arg("/dll")
            .arg("/quiet")
            .arg(format!("/output:{}", out.display()))
            .arg(root().join("corpus/il/disasm_names.il")),
    );
    assert!(o.success(), "ilasm: {}", o.describe());
    out
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ilcheck-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The method of `image` whose full name is `name`, disassembled with names.
fn listing(image: &Image<'_>, name: &str) -> String {
    let m = image
        .methods()
        .find(|m| m.full_name().is_ok_and(|n| n == name))
        .unwrap_or_else(|| panic!("no method {name}"));
    let body = m.decoded_body().unwrap();
    disassemble_with(&body, Some(&ImageNamer::new(image)))
}

/// Each method of `Names.Operands` in the IL source: its name and its lines (instructions,
/// `.locals`, `catch`), in order.
fn source_methods(il: &str) -> Vec<(String, Vec<String>)> {
    let class = il
        .find(".class public auto ansi beforefieldinit Names.Operands")
        .expect("Names.Operands in the source");
    let mut methods: Vec<(String, Vec<String>)> = Vec::new();
    for line in il[class..].lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix(".method public static void ") {
            let name = rest.split('(').next().unwrap().to_string();
            methods.push((name, Vec::new()));
            continue;
        }
        let Some((_, lines)) = methods.last_mut() else {
            continue;
        };
        let first = line.split_whitespace().next().unwrap_or("");
        if is_opcode(first) || first == ".locals" || first == "catch" {
            lines.push(squeeze(line));
        }
    }
    methods
}

#[test]
fn named_operands_are_the_ilasm_they_were_assembled_from() {
    let test = "named_operands_are_the_ilasm_they_were_assembled_from";
    if !support::mono_tool(test, "ilasm") {
        return;
    }
    let dir = scratch("disasm-names");
    let dll = assemble(&dir);
    let image = Image::open(&dll).unwrap();
    let il = std::fs::read_to_string(root().join("corpus/il/disasm_names.il")).unwrap();
    let methods = source_methods(&il);
    assert_eq!(methods.len(), 6, "{methods:?}");
    let mut checked = 0;
    for (name, expected) in &methods {
        let text = listing(&image, &format!("Names.Operands::{name}()"));
        let mut printed: Vec<String> = Vec::new();
        for line in text.lines().map(str::trim) {
            if line.starts_with(".locals") || line.starts_with("catch") {
                printed.push(squeeze(line));
            } else if let [(op, operand)] = &instructions(line)[..] {
                printed.push(squeeze(&format!("{op} {operand}")));
            }
        }
        // The source's branches name labels, the listing's offsets: only the opcode is kept.
        let strip = |l: &String| -> String {
            let first = l.split(' ').next().unwrap_or("");
            if first.starts_with("leave") || first.starts_with("br") {
                first.to_string()
            } else {
                l.clone()
            }
        };
        let printed: Vec<String> = printed.iter().map(strip).collect();
        let expected: Vec<String> = expected.iter().map(strip).collect();
        assert_eq!(printed, expected, "Names.Operands::{name}:\n{text}");
        checked += printed.len();
    }
    assert!(checked > 80, "{checked} lines checked");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A MemberRef whose parent is a ModuleRef (a global function of another module) is printed
/// `[.module name]::F`; mono's ilasm writes a `<Module>` TypeRef instead, so the row is
/// patched.
#[test]
fn a_member_of_another_module_is_named_by_its_module() {
    let test = "a_member_of_another_module_is_named_by_its_module";
    if !support::mono_tool(test, "ilasm") {
        return;
    }
    let dir = scratch("disasm-moduleref");
    let mut bytes = std::fs::read(assemble(&dir)).unwrap();
    let (at, width) = {
        let image = Image::parse(&bytes).unwrap();
        let t = image.tables();
        let rid = (1..=t.rows(Table::MemberRef))
            .find(|&r| {
                let row = t.member_ref(r).unwrap();
                image.strings().get(row.name).unwrap() == "NativeFn"
            })
            .expect("the NativeFn MemberRef");
        let info = image.tables_header().info(Table::MemberRef);
        let (col, width) = info.column(0).unwrap();
        (
            info.offset + (rid as usize - 1) * info.row_size as usize + col,
            width,
        )
    };
    let parent = CodedIndex::MemberRefParent
        .encode(Token::new(Table::ModuleRef, 1))
        .unwrap();
    bytes[at..at + width].copy_from_slice(&parent.to_le_bytes()[..width]);
    let image = Image::parse(&bytes).unwrap();
    let text = listing(&image, "Names.Operands::Methods()");
    assert!(
        text.contains("call       void [.module 'native.dll']::NativeFn(int32)\n"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// monodis's spellings of the operands it writes the ildasm way: `unsigned int32` for
/// `uint32`, `'.ctor'` quoted.
fn monodis_normalised(operand: &str) -> String {
    operand
        .replace("unsigned int", "uint")
        .replace("'.ctor'", ".ctor")
        .replace("'.cctor'", ".cctor")
}

/// Field, type, string and `ldtoken` operands of every assembly of the project's corpus are
/// the text monodis prints for them (method references differ by monodis's own spellings —
/// `class` before a parent type, `object::` — and are checked by exact lines elsewhere).
#[test]
fn field_type_and_string_operands_read_as_monodis_reads_them() {
    let test = "field_type_and_string_operands_read_as_monodis_reads_them";
    if !support::mono_tool(test, "monodis") {
        return;
    }
    let compared = |op: &str, operand: &str| {
        !matches!(
            op,
            "call" | "callvirt" | "newobj" | "ldftn" | "ldvirtftn" | "jmp" | "calli"
        ) && !operand.starts_with("method ")
    };
    let mut total = 0;
    for (name, bytes) in ilcheck::corpus::EMBEDDED {
        if name.ends_with("verify_cases.dll") {
            // monodis aborts on its deliberately broken bodies.
            continue;
        }
        let image = Image::parse(bytes).unwrap();
        let names = ImageNamer::new(&image);
        let mut ours: BTreeMap<(String, String), i64> = BTreeMap::new();
        for m in image.methods() {
            let Ok(body) = m.decoded_body() else { continue };
            for i in Instructions::new(body.code).flatten() {
                let Operand::Token(t) = i.operand else {
                    continue;
                };
                let mut s = String::new();
                if names
                    .write_token(i.opcode.operand_kind(), t, &mut s)
                    .is_ok()
                    && compared(i.opcode.name(), &s)
                {
                    *ours.entry((i.opcode.name().into(), s)).or_default() += 1;
                }
            }
        }
        let o = support::run(std::process::Command::new("monodis").arg(root().join(name)));
        assert!(o.success(), "monodis {name}: {}", o.describe());
        let text = String::from_utf8_lossy(&o.stdout);
        let mut theirs: BTreeMap<(String, String), i64> = BTreeMap::new();
        for (op, operand) in instructions(&text) {
            let operand = monodis_normalised(&operand);
            if i_has_token(&op) && compared(&op, &operand) {
                *theirs.entry((op, operand)).or_default() += 1;
            }
        }
        total += ours.values().sum::<i64>();
        assert_eq!(ours, theirs, "{name}");
    }
    assert!(total > 1500, "{total} operands compared");
    eprintln!("{total} field, type, string and ldtoken operands agree with monodis");
}

fn i_has_token(op: &str) -> bool {
    use ilcheck::opcode::OperandKind as K;
    ilcheck::opcode::ALL.iter().any(|o| {
        o.name == op
            && matches!(
                o.operand,
                K::Tok | K::Type | K::Field | K::Method | K::String | K::Sig
            )
    })
}

/// Every token of every method body of mono's 4.5 assemblies (operands, locals signatures,
/// catch classes) is named, or printed raw with a reason; never a panic. The raw ones are
/// counted and printed by reason, and so is the time a named listing takes against a raw one.
#[test]
fn every_token_of_mono_is_named() {
    let Some(dir) = support::mono_corpus("every_token_of_mono_is_named") else {
        return;
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension()
                .is_some_and(|x| x.eq_ignore_ascii_case("dll") || x.eq_ignore_ascii_case("exe"))
        })
        .collect();
    files.sort();
    let (mut named, mut raw, mut methods) = (0u64, 0u64, 0u64);
    let mut reasons: BTreeMap<String, u64> = BTreeMap::new();
    let (mut named_time, mut raw_time) = (0.0f64, 0.0f64);
    let (mut named_bytes, mut raw_bytes) = (0usize, 0usize);
    for path in &files {
        let Ok(image) = Image::open(path) else {
            continue;
        };
        let names = ImageNamer::new(&image);
        let bodies: Vec<Body<'_>> = image
            .methods()
            .filter_map(|m| m.decoded_body().ok())
            .collect();
        methods += bodies.len() as u64;
        let mut count = |result: Result<(), String>| match result {
            Ok(()) => named += 1,
            Err(why) => {
                raw += 1;
                // The reason without its numbers, so that alike reasons count together.
                let kind: String = why
                    .split_whitespace()
                    .filter(|w| !w.starts_with("0x") && !w.chars().any(|c| c.is_ascii_digit()))
                    .collect::<Vec<_>>()
                    .join(" ");
                *reasons
                    .entry(format!("{}: {kind}", path.file_name().unwrap().display()))
                    .or_default() += 1;
            }
        };
        for body in &bodies {
            let mut s = String::new();
            for i in Instructions::new(body.code).flatten() {
                if let Operand::Token(t) = i.operand {
                    s.clear();
                    count(names.write_token(i.opcode.operand_kind(), t, &mut s));
                }
            }
            if body.local_sig() != 0 {
                s.clear();
                count(names.write_locals(body.local_sig(), &mut s));
            }
            for c in body.clauses() {
                if c.kind() == ilcheck::body::ClauseKind::Catch {
                    s.clear();
                    count(names.write_token(
                        ilcheck::opcode::OperandKind::Type,
                        c.class_or_filter,
                        &mut s,
                    ));
                }
            }
        }
        let start = Instant::now();
        for body in &bodies {
            named_bytes += disassemble_with(body, Some(&names)).len();
        }
        named_time += start.elapsed().as_secs_f64();
        let start = Instant::now();
        for body in &bodies {
            raw_bytes += disassemble_with(body, None).len();
        }
        raw_time += start.elapsed().as_secs_f64();
    }
    eprintln!(
        "{} assemblies, {methods} bodies: {named} tokens named, {raw} raw",
        files.len()
    );
    for (why, n) in &reasons {
        eprintln!("  raw {n}: {why}");
    }
    eprintln!(
        "listings: named {named_time:.2} s ({:.1} MB of text), raw {raw_time:.2} s ({:.1} MB)",
        named_bytes as f64 / 1e6,
        raw_bytes as f64 / 1e6
    );
    assert!(named > 1_000_000, "{named} tokens named");
    // A token printed raw is one whose row or heap entry is missing or malformed; mono's
    // assemblies have next to none.
    assert!(raw * 100_000 <= named, "{raw} raw against {named} named");
}

/// `disasm`'s header line of a P/Invoke method names its library and entry point (the ImplMap
/// row), and a vararg method's ends its parameters with `...`, as its call sites do; that name
/// selects it with `--method` as its full name does.
#[test]
fn pinvoke_and_vararg_methods_say_so_in_their_header() {
    let test = "pinvoke_and_vararg_methods_say_so_in_their_header";
    if !support::mono_tool(test, "ilasm") {
        return;
    }
    const IL: &str = r#"
.assembly extern mscorlib {}
.assembly N {}
.module N.dll
.module extern libc
.class public N.Native {
  .method public static pinvokeimpl("libc" as "getpid" cdecl) int32 GetPid() cil managed preservesig {}
  .method public static pinvokeimpl("libc" cdecl) int32 getppid() cil managed preservesig {}
  .method public static vararg int32 VA(int32 a) cil managed { ldarg.0 ret }
  .method public static vararg void VB() cil managed { ret }
  .method public static int32 Plain(int32 a) cil managed { ldarg.0 ret }
}
"#;
    let dir = scratch("pinvoke-vararg");
    let il = dir.join("native.il");
    std::fs::write(&il, IL).unwrap();
    let dll = dir.join("native.dll");
    let o = support::run(
        std::process::Command::new("ilasm")
            .arg("/dll")
            .arg(format!("/out:{}", dll.display()))
            .arg(&il),
    );
    assert!(o.success(), "ilasm: {}", o.describe());
    let disasm = |args: &[&str]| {
        let o = support::run(
            std::process::Command::new(env!("CARGO_BIN_EXE_ilcheck"))
                .arg("disasm")
                .arg(&dll)
                .args(args),
        );
        assert!(o.success(), "{}", o.describe());
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        text.lines()
            .filter(|l| l.starts_with("// method "))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        disasm(&[]),
        [
            r#"// method 0x06000001 N.Native::GetPid() pinvokeimpl("libc" as "getpid"), RVA 0: no body"#,
            r#"// method 0x06000002 N.Native::getppid() pinvokeimpl("libc" as "getppid"), RVA 0: no body"#,
            "// method 0x06000003 N.Native::VA(int32, ...), RVA 0x2050",
            "// method 0x06000004 N.Native::VB(...), RVA 0x2054",
            "// method 0x06000005 N.Native::Plain(int32), RVA 0x2058",
        ]
    );
    for glob in ["N.Native::VA(int32, ...)", "N.Native::VA(int32)"] {
        assert_eq!(
            disasm(&["--method", glob]),
            ["// method 0x06000003 N.Native::VA(int32, ...), RVA 0x2050"],
            "{glob}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
