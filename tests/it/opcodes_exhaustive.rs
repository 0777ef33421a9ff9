//! Every defined opcode encodes and decodes with its operand kind; every undefined encoding is an
//! `UnknownOpcode` error at its offset.

use ilcheck::instr::{
    self, InstrError, Instruction, Instructions, Operand, SwitchTargets, decode_at,
};
use ilcheck::opcode::{ALL, Opcode, OperandKind};

/// A few operand values per kind, at the edges of their ranges.
fn sample_operands(kind: OperandKind) -> Vec<Operand<'static>> {
    match kind {
        OperandKind::None => vec![Operand::None],
        OperandKind::ShortI => vec![Operand::Int8(0), Operand::Int8(-128), Operand::Int8(127)],
        OperandKind::I => vec![
            Operand::Int32(i32::MIN),
            Operand::Int32(-1),
            Operand::Int32(i32::MAX),
        ],
        OperandKind::I8 => vec![
            Operand::Int64(i64::MIN),
            Operand::Int64(0x0102_0304_0506_0708),
        ],
        OperandKind::ShortR => vec![
            Operand::Float32(1.5f32.to_bits()),
            Operand::Float32(0x7FC0_1234), // NaN with payload
            Operand::Float32(0x8000_0000), // -0.0
        ],
        OperandKind::R => vec![
            Operand::Float64(0x7FF8_0000_DEAD_BEEF),
            Operand::Float64(2.25f64.to_bits()),
        ],
        OperandKind::ShortBrTarget => vec![
            Operand::ShortBranch(-128),
            Operand::ShortBranch(0),
            Operand::ShortBranch(127),
        ],
        OperandKind::BrTarget => vec![
            Operand::Branch(i32::MIN),
            Operand::Branch(0),
            Operand::Branch(1 << 20),
        ],
        OperandKind::Switch => vec![
            Operand::Switch(SwitchTargets::Owned(vec![])),
            Operand::Switch(SwitchTargets::Owned(vec![-5])),
            Operand::Switch(SwitchTargets::Owned((0..1000).collect())),
        ],
        OperandKind::ShortLocal | OperandKind::ShortArg => vec![Operand::Var(0), Operand::Var(255)],
        OperandKind::Local | OperandKind::Arg => vec![Operand::Var(0), Operand::Var(0xFFFF)],
        OperandKind::Tok
        | OperandKind::Type
        | OperandKind::Field
        | OperandKind::Method
        | OperandKind::String
        | OperandKind::Sig => vec![Operand::Token(0x0A00_0001), Operand::Token(0x7000_FFFF)],
    }
}

#[test]
fn every_opcode_round_trips_with_its_operand_kind() {
    let mut checked = 0;
    for info in ALL {
        for operand in sample_operands(info.operand) {
            let mut code = Vec::new();
            instr::encode(info.opcode, &operand, &mut code).unwrap();
            let expected_len = info.opcode.size()
                + match &operand {
                    Operand::Switch(t) => 4 + 4 * t.len(),
                    _ => info.operand.fixed_size().unwrap(),
                };
            assert_eq!(code.len(), expected_len, "{}", info.name);
            let decoded = decode_at(&code, 0).unwrap();
            assert_eq!(decoded.opcode, info.opcode);
            assert_eq!(decoded.size(), code.len());
            assert_eq!(
                decoded.clone().into_owned().operand,
                operand.clone().into_owned(),
                "{}",
                info.name
            );
            let mut again = Vec::new();
            decoded.encode(&mut again).unwrap();
            assert_eq!(again, code, "{}", info.name);
            // Every proper prefix of the encoding is a truncation error, never a panic.
            for cut in 1..code.len() {
                let err = decode_at(&code[..cut], 0).unwrap_err();
                assert_eq!(err.offset(), 0);
                assert!(
                    !matches!(err, InstrError::UnknownOpcode { .. }),
                    "{}: {err}",
                    info.name
                );
            }
            checked += 1;
        }
    }
    assert!(checked > ALL.len(), "{checked}");
}

#[test]
fn operands_of_the_wrong_kind_are_rejected() {
    let mut out = Vec::new();
    assert!(instr::encode(Opcode::Ldarg_S, &Operand::Var(256), &mut out).is_err());
    assert!(instr::encode(Opcode::Br_S, &Operand::Branch(0), &mut out).is_err());
    assert!(instr::encode(Opcode::Ldstr, &Operand::Int32(1), &mut out).is_err());
    assert!(instr::encode(Opcode::Nop, &Operand::Token(1), &mut out).is_err());
    assert!(out.is_empty(), "nothing written on error");
}

#[test]
fn every_undefined_encoding_is_unknown_opcode() {
    let defined_one: Vec<u8> = ALL
        .iter()
        .filter(|i| i.opcode.size() == 1)
        .map(|i| i.opcode.code() as u8)
        .collect();
    let defined_two: Vec<u8> = ALL
        .iter()
        .filter(|i| i.opcode.size() == 2)
        .map(|i| i.opcode.code() as u8)
        .collect();
    let mut undefined = 0;
    for b in 0..=255u8 {
        // Placed after a nop so the reported offset is checked too.
        let code = [0x00, b, 0, 0, 0, 0, 0, 0, 0, 0];
        let result = Instructions::new(&code).nth(1).unwrap();
        if b == 0xFE || defined_one.contains(&b) {
            assert!(
                !matches!(result, Err(InstrError::UnknownOpcode { .. })),
                "{b:#x}"
            );
        } else {
            assert_eq!(
                result,
                Err(InstrError::UnknownOpcode {
                    offset: 1,
                    code: b as u16
                })
            );
            undefined += 1;
        }
        let code = [0x00, 0xFE, b, 0, 0, 0, 0, 0, 0, 0];
        let result = Instructions::new(&code).nth(1).unwrap();
        if defined_two.contains(&b) {
            assert!(result.is_ok(), "FE {b:#x}");
        } else {
            assert_eq!(
                result,
                Err(InstrError::UnknownOpcode {
                    offset: 1,
                    code: 0xFE00 | b as u16
                })
            );
            undefined += 1;
        }
    }
    assert_eq!(
        undefined,
        (256 - 1 - defined_one.len()) + (256 - defined_two.len())
    );
    // The reserved F8–FF range in particular.
    for b in 0xF8..=0xFFu8 {
        if b != 0xFE {
            assert!(matches!(
                decode_at(&[b], 0),
                Err(InstrError::UnknownOpcode { .. })
            ));
        }
    }
    assert_eq!(
        decode_at(&[0xFE], 0),
        Err(InstrError::OpcodeTruncated { offset: 0 })
    );
}

#[test]
fn switch_count_is_bounded_by_remaining_bytes() {
    // A count of 0xFFFFFFFF with 8 bytes behind it: an error, and nothing allocated for it.
    let code = [0x45, 0xFF, 0xFF, 0xFF, 0xFF, 1, 0, 0, 0, 2, 0, 0, 0];
    assert_eq!(
        decode_at(&code, 0),
        Err(InstrError::SwitchTruncated {
            offset: 0,
            count: u32::MAX
        })
    );
    let code = [0x45, 2, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0];
    let i: Instruction<'_> = decode_at(&code, 0).unwrap();
    assert_eq!(i.targets().collect::<Vec<_>>(), [14, 15]);
}

#[test]
fn branch_targets_are_kept_raw() {
    // br.s into the middle of the next instruction, and a long branch far past the end.
    let code = [0x2B, 0x01, 0x20, 0, 0, 0, 0, 0x38, 0xFF, 0xFF, 0xFF, 0x7F];
    let instrs: Vec<_> = Instructions::new(&code).map(Result::unwrap).collect();
    assert_eq!(instrs[0].branch_target(), Some(3));
    assert_eq!(instrs[2].branch_target(), Some(12 + i32::MAX as i64));
    let mut out = Vec::new();
    for i in &instrs {
        i.encode(&mut out).unwrap();
    }
    assert_eq!(out, code);
}

/// Issue-tracked rule of the code base: a `match` over opcodes, operand kinds or operands has no
/// silent catch-all. Each `_` arm (plain or guarded) of such a match either goes (the arms list
/// every variant, or the question goes to the opcode table's facts) or says why it is safe in a
/// comment on the arm or the line above it. A match counts as one over opcodes or operands when
/// one of its arms at the `_` arm's indentation starts with such a path.
#[test]
fn no_silent_catch_all_over_opcodes_or_operands() {
    const KINDS: [&str; 5] = [
        "Opcode::",
        "OperandKind::",
        "Operand::",
        "RawOperand::",
        "crate::instr::Operand::",
    ];
    let mut files = Vec::new();
    let mut dirs = vec![std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    assert!(
        files.len() > 50,
        "the scan found only {} files",
        files.len()
    );
    let mut silent = Vec::new();
    let mut checked = 0;
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let trimmed = line.trim_start();
            if !(trimmed.starts_with("_ =>") || trimmed.starts_with("_ if ")) {
                continue;
            }
            let indent = line.len() - trimmed.len();
            // The arms above, up to the `match` that holds them.
            let mut over_opcodes = false;
            for above in lines[..i].iter().rev().take(400) {
                let t = above.trim_start();
                if t.is_empty() {
                    continue;
                }
                let at = above.len() - t.len();
                if at < indent && (t.contains("match ") || !t.starts_with('|')) {
                    break;
                }
                let pattern = t.trim_start_matches("| ").trim_start_matches("Some(");
                let pattern = pattern.trim_start_matches('(');
                if (at == indent || t.starts_with('|'))
                    && KINDS.iter().any(|k| pattern.starts_with(k))
                {
                    over_opcodes = true;
                }
            }
            if !over_opcodes {
                continue;
            }
            checked += 1;
            let documented = line.contains("//") || lines[i - 1].trim_start().starts_with("//");
            if !documented {
                silent.push(format!("{}:{}: {}", path.display(), i + 1, trimmed));
            }
        }
    }
    assert!(checked > 5, "the scan recognised only {checked} catch-alls");
    assert!(
        silent.is_empty(),
        "catch-all arms over opcodes or operands without a reason:\n{}",
        silent.join("\n")
    );
}
