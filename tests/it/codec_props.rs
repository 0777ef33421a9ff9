//! Property tests of the body codec: on arbitrary bytes, and on structured random bodies built
//! byte by byte with every encoding choice the format allows.

use ilcheck::body::Body;
use ilcheck::instr;
use ilcheck::opcode::{ALL, OperandKind};
use proptest::prelude::*;

fn cases() -> u32 {
    std::env::var("ILCHECK_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000)
}

/// Canonical encoding is a fixed point, and canonical bytes decode to the same meaning.
fn check_canonical(body: &Body<'_>) {
    let mut canon = Vec::new();
    body.encode_canonical(&mut canon).expect("canonical encode");
    let again = Body::parse(&canon).expect("canonical bytes parse");
    assert_eq!(again.len(), canon.len());
    let mut twice = Vec::new();
    again.encode_canonical(&mut twice).unwrap();
    assert_eq!(twice, canon, "canonical fixed point");
    assert!(again.is_canonical());
    let (a, b) = (body.parts(), again.parts());
    assert_eq!(
        (a.code, &a.clauses, &a.raw_sections, a.local_sig),
        (b.code, &b.clauses, &b.raw_sections, b.local_sig)
    );
    assert!(b.max_stack == a.max_stack || (again.is_tiny() && a.max_stack <= 8));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn arbitrary_bytes_never_panic_and_round_trip(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        if let Ok(body) = Body::parse(&bytes) {
            let mut out = Vec::new();
            body.encode(&mut out).unwrap();
            prop_assert_eq!(&out[..], &bytes[..body.len()]);
            let _ = ilcheck::disasm::disassemble(&body);
            check_canonical(&body);
        }
    }

    #[test]
    fn arbitrary_fat_bodies_round_trip(
        flags in any::<u16>(), max_stack in any::<u16>(), local_sig in any::<u32>(),
        code in prop::collection::vec(any::<u8>(), 0..120),
        tail in prop::collection::vec(any::<u8>(), 0..120),
    ) {
        // A valid fat header over random code and random section bytes: exercises the
        // instruction decoder on garbage and the section parser on random DataSize values.
        let word = (flags & 0x0FFF) | 0x3 | 0x3000;
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&word.to_le_bytes());
        bytes.extend_from_slice(&max_stack.to_le_bytes());
        bytes.extend_from_slice(&(code.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&local_sig.to_le_bytes());
        bytes.extend_from_slice(&code);
        bytes.extend_from_slice(&tail);
        if let Ok(body) = Body::parse(&bytes) {
            let mut out = Vec::new();
            body.encode(&mut out).unwrap();
            prop_assert_eq!(&out[..], &bytes[..body.len()]);
            check_canonical(&body);
        }
    }

    #[test]
    fn structured_bodies_round_trip(spec in body_spec()) {
        let bytes = spec.build();
        let body = Body::decode(&bytes).expect("structured body decodes");
        prop_assert_eq!(body.len(), bytes.len());
        let mut out = Vec::new();
        body.encode(&mut out).unwrap();
        prop_assert_eq!(&out, &bytes);
        prop_assert_eq!(body.clauses().count(), spec.sections.iter().filter(|s| s.eh).map(|s| s.clauses.len()).sum::<usize>());
        check_canonical(&body);
    }
}

/// A random instruction stream of valid opcodes with random operands.
fn code_strategy() -> impl Strategy<Value = Vec<u8>> {
    let instr = (
        0..ALL.len(),
        any::<u64>(),
        prop::collection::vec(any::<i32>(), 0..6),
    )
        .prop_map(|(i, v, sw)| {
            let info = &ALL[i];
            let operand = match info.operand {
                OperandKind::None => instr::Operand::None,
                OperandKind::ShortI => instr::Operand::Int8(v as i8),
                OperandKind::I => instr::Operand::Int32(v as i32),
                OperandKind::I8 => instr::Operand::Int64(v as i64),
                OperandKind::ShortR => instr::Operand::Float32(v as u32),
                OperandKind::R => instr::Operand::Float64(v),
                OperandKind::ShortBrTarget => instr::Operand::ShortBranch(v as i8),
                OperandKind::BrTarget => instr::Operand::Branch(v as i32),
                OperandKind::Switch => instr::Operand::Switch(instr::SwitchTargets::Owned(sw)),
                OperandKind::ShortLocal | OperandKind::ShortArg => {
                    instr::Operand::Var(v as u8 as u16)
                }
                OperandKind::Local | OperandKind::Arg => instr::Operand::Var(v as u16),
                _ => instr::Operand::Token(v as u32),
            };
            let mut out = Vec::new();
            instr::encode(info.opcode, &operand, &mut out).unwrap();
            out
        });
    prop::collection::vec(instr, 0..40).prop_map(|v| v.concat())
}

#[derive(Clone, Debug)]
struct SectionSpec {
    padding_junk: u8,
    kind_extra: u8,
    fat: bool,
    reserved: u16,
    eh: bool,
    clauses: Vec<[u32; 6]>,
    trailing: Vec<u8>,
    raw: Vec<u8>,
}

#[derive(Clone, Debug)]
struct BodySpec {
    tiny: bool,
    flags: u16,
    size_dwords: u8,
    extra: Vec<u8>,
    max_stack: u16,
    local_sig: u32,
    code: Vec<u8>,
    sections: Vec<SectionSpec>,
}

fn section_spec() -> impl Strategy<Value = SectionSpec> {
    (
        any::<u8>(),
        prop_oneof![Just(0u8), Just(0x02), 0u8..0x3F],
        any::<bool>(),
        prop_oneof![Just(0u16), any::<u16>()],
        any::<bool>(),
        prop::collection::vec(any::<[u32; 6]>(), 0..25),
        prop::collection::vec(any::<u8>(), 0..11),
        prop::collection::vec(any::<u8>(), 0..40),
    )
        .prop_map(
            |(padding_junk, kind_extra, fat, reserved, eh, clauses, trailing, raw)| {
                let mut s = SectionSpec {
                    padding_junk,
                    kind_extra,
                    fat,
                    reserved,
                    eh,
                    clauses,
                    trailing,
                    raw,
                };
                if !s.fat {
                    // A small section's DataSize is one byte and its fields are narrow.
                    s.clauses.truncate(20);
                    s.trailing.truncate(251 - 12 * s.clauses.len());
                    s.raw.truncate(251);
                    for c in &mut s.clauses {
                        let masks = [0xFFFF, 0xFFFF, 0xFF, 0xFFFF, 0xFF, u32::MAX];
                        for (v, m) in c.iter_mut().zip(masks) {
                            *v &= m;
                        }
                    }
                } else {
                    s.trailing.truncate(23);
                }
                s
            },
        )
}

fn body_spec() -> impl Strategy<Value = BodySpec> {
    (
        any::<bool>(),
        any::<u16>(),
        prop_oneof![4 => Just(3u8), 1 => 4u8..6],
        prop::collection::vec(any::<u8>(), 8),
        any::<u16>(),
        prop_oneof![Just(0u32), any::<u32>()],
        code_strategy(),
        prop::collection::vec(section_spec(), 0..3),
    )
        .prop_map(
            |(tiny, flags, size_dwords, extra, max_stack, local_sig, code, sections)| {
                let tiny = tiny && code.len() < 64;
                let mut spec = BodySpec {
                    tiny,
                    flags,
                    size_dwords,
                    extra,
                    max_stack,
                    local_sig,
                    code,
                    sections,
                };
                spec.extra.truncate((size_dwords as usize - 3) * 4);
                if spec.tiny {
                    spec.sections.clear();
                }
                spec
            },
        )
}

impl BodySpec {
    fn build(&self) -> Vec<u8> {
        let mut b = Vec::new();
        if self.tiny {
            b.push(((self.code.len() as u8) << 2) | 2);
            b.extend_from_slice(&self.code);
            return b;
        }
        let more = if self.sections.is_empty() { 0 } else { 0x8 };
        let flags = (self.flags & 0x0FF4) | 0x3 | more;
        b.extend_from_slice(&(flags | ((self.size_dwords as u16) << 12)).to_le_bytes());
        b.extend_from_slice(&self.max_stack.to_le_bytes());
        b.extend_from_slice(&(self.code.len() as u32).to_le_bytes());
        b.extend_from_slice(&self.local_sig.to_le_bytes());
        b.extend_from_slice(&self.extra);
        b.extend_from_slice(&self.code);
        for (n, s) in self.sections.iter().enumerate() {
            while !b.len().is_multiple_of(4) {
                b.push(s.padding_junk);
            }
            let more = if n + 1 < self.sections.len() { 0x80 } else { 0 };
            let kind_bits = if s.eh {
                0x01
            } else if s.kind_extra & 0x3F == 0x01 {
                0x02
            } else {
                s.kind_extra & 0x3F
            };
            let kind = kind_bits | more | if s.fat { 0x40 } else { 0 };
            let clause_size = if s.fat { 24 } else { 12 };
            let content_len = if s.eh {
                s.clauses.len() * clause_size + s.trailing.len()
            } else {
                s.raw.len()
            };
            let data_size = 4 + content_len as u32;
            b.push(kind);
            if s.fat {
                b.extend_from_slice(&data_size.to_le_bytes()[..3]);
            } else {
                b.push(data_size as u8);
                b.extend_from_slice(&s.reserved.to_le_bytes());
            }
            if s.eh {
                for c in &s.clauses {
                    if s.fat {
                        c.iter().for_each(|v| b.extend_from_slice(&v.to_le_bytes()));
                    } else {
                        b.extend_from_slice(&(c[0] as u16).to_le_bytes());
                        b.extend_from_slice(&(c[1] as u16).to_le_bytes());
                        b.push(c[2] as u8);
                        b.extend_from_slice(&(c[3] as u16).to_le_bytes());
                        b.push(c[4] as u8);
                        b.extend_from_slice(&c[5].to_le_bytes());
                    }
                }
                b.extend_from_slice(&s.trailing);
            } else {
                b.extend_from_slice(&s.raw);
            }
        }
        b
    }
}
