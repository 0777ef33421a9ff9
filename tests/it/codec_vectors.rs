//! Published byte vectors of the method-body format, decoded to their fields and re-encoded.

use ilcheck::body::{Body, ClauseKind, DecodeError, Header};
use ilcheck::disasm::disassemble;
use ilcheck::opcode::Opcode;

fn bytes(hex: &str) -> Vec<u8> {
    hex.split_whitespace()
        .map(|b| u8::from_str_radix(b, 16).unwrap())
        .collect()
}

fn lossless(b: &[u8]) -> Body<'_> {
    let body = Body::decode(b).expect("decodes");
    assert_eq!(body.len(), b.len(), "body extent");
    let mut out = Vec::new();
    body.encode(&mut out).unwrap();
    assert_eq!(out, b, "lossless re-encode");
    body
}

fn opcodes(body: &Body<'_>) -> Vec<Opcode> {
    body.instructions().map(|i| i.unwrap().opcode).collect()
}

#[test]
fn fat_header_ldstr_call_ret() {
    let b = bytes("13 30 01 00 0B 00 00 00 00 00 00 00  72 01 00 00 70 28 02 00 00 0A 2A");
    let body = lossless(&b);
    let Header::Fat(h) = &body.header else {
        panic!("fat expected")
    };
    assert_eq!(
        (h.flags, h.size_dwords, h.max_stack, h.local_sig),
        (0x013, 3, 1, 0)
    );
    assert!(body.init_locals());
    assert_eq!(body.code.len(), 11);
    assert_eq!(opcodes(&body), [Opcode::Ldstr, Opcode::Call, Opcode::Ret]);
    let text = disassemble(&body);
    assert!(text.contains("IL_0000:  ldstr      0x70000001"), "{text}");
    assert!(text.contains("IL_0005:  call       0x0a000002"), "{text}");
    // Canonical form: InitLocals with no locals and no localloc means nothing, so tiny fits.
    let mut canon = Vec::new();
    body.encode_canonical(&mut canon).unwrap();
    assert_eq!(canon[0], (11 << 2) | 2);
    assert_eq!(&canon[1..], &b[12..]);
}

#[test]
fn fat_header_with_small_catch_section() {
    let b = bytes(
        "0B 30 08 00 19 00 00 00 00 00 00 00
         14 0E 00 28 01 00 00 0A 26 DE 0D 26 72 73 00 00 70 28 02 00 00 0A DE 00 2A
         00 00 00
         01 10 00 00
         00 00 00 00 0B 0B 00 0D 02 00 00 01",
    );
    let body = lossless(&b);
    assert_eq!(body.max_stack(), 8);
    assert_eq!(body.code.len(), 25);
    assert_eq!(body.sections.len(), 1);
    let s = &body.sections[0];
    assert!(!s.is_fat() && s.is_eh());
    assert_eq!((s.data_size, s.padding.len()), (0x10, 3));
    let c = s.clauses().get(0).unwrap();
    assert_eq!(c.kind(), ClauseKind::Catch);
    assert_eq!(
        (
            c.try_offset,
            c.try_length,
            c.handler_offset,
            c.handler_length,
            c.class_or_filter
        ),
        (0, 11, 11, 13, 0x0100_0002)
    );
    let text = disassemble(&body);
    assert!(text.contains(".try\n{\n  IL_0000:  ldnull"), "{text}");
    assert!(
        text.contains("catch 0x01000002\n{\n  IL_000b:  pop"),
        "{text}"
    );
    assert!(text.contains("leave.s    IL_0018"), "{text}");
    assert!(
        body.is_canonical(),
        "compiler output of this shape is canonical"
    );
}

#[test]
fn tiny_body_thirteen_bytes() {
    let b = bytes("36 00 72 01 00 00 70 28 10 00 00 0A 00 2A");
    let body = lossless(&b);
    assert!(body.is_tiny());
    assert_eq!(body.max_stack(), 8);
    assert_eq!(body.code.len(), 13);
    assert_eq!(
        opcodes(&body),
        [
            Opcode::Nop,
            Opcode::Ldstr,
            Opcode::Call,
            Opcode::Nop,
            Opcode::Ret
        ]
    );
    assert!(body.is_canonical());
}

/// Fat header, 49 bytes of code, a catch nested in a try/finally (small EH section).
const NESTED_CATCH_FINALLY: &str = "1B 30 02 00 31 00 00 00 01 00 00 11
         00 17 0A 19 0B 00 06 07 58 0A 00 DE 0C 0C 00 08 28 11 00 00 0A 00 00 DE 00 00 DE 0E 00
         72 01 00 00 70 28 10 00 00 0A 00 00 DC 00 06 0D 2B 00 09 2A
         00 00 00
         01 1C 00 00
         00 00 05 00 08 0D 00 0C 13 00 00 01
         02 00 05 00 17 1C 00 0E 00 00 00 00";

#[test]
fn nested_catch_inside_finally() {
    let b = bytes(NESTED_CATCH_FINALLY);
    let body = lossless(&b);
    let Header::Fat(h) = &body.header else {
        panic!("fat expected")
    };
    assert_eq!((h.max_stack, h.local_sig, h.flags), (2, 0x1100_0001, 0x01B));
    assert_eq!(body.code.len(), 49);
    let clauses: Vec<_> = body.clauses().collect();
    assert_eq!(clauses.len(), 2);
    assert_eq!(clauses[0].kind(), ClauseKind::Catch);
    assert_eq!(
        (
            clauses[0].try_offset,
            clauses[0].try_length,
            clauses[0].handler_offset,
            clauses[0].handler_length
        ),
        (5, 8, 13, 12)
    );
    assert_eq!(clauses[0].class_or_filter, 0x0100_0013);
    assert_eq!(clauses[1].kind(), ClauseKind::Finally);
    assert_eq!(
        (
            clauses[1].try_offset,
            clauses[1].try_length,
            clauses[1].handler_offset,
            clauses[1].handler_length
        ),
        (5, 23, 28, 14)
    );
    let text = disassemble(&body);
    let expected = "\
.try
{
  .try
  {
    IL_0005:  nop
    IL_0006:  ldloc.0
    IL_0007:  ldloc.1
    IL_0008:  add
    IL_0009:  stloc.0
    IL_000a:  nop
    IL_000b:  leave.s    IL_0019
  }
  catch 0x01000013
  {
    IL_000d:  stloc.2
    IL_000e:  nop
    IL_000f:  ldloc.2
    IL_0010:  call       0x0a000011
    IL_0015:  nop
    IL_0016:  nop
    IL_0017:  leave.s    IL_0019
  }
  IL_0019:  nop
  IL_001a:  leave.s    IL_002a
}
finally
{
  IL_001c:  nop
";
    assert!(text.contains(expected), "{text}");
    assert!(
        text.contains("  IL_0028:  nop\n  IL_0029:  endfinally\n}\nIL_002a:  nop"),
        "{text}"
    );
    assert!(body.is_canonical());
}

#[test]
fn truncations_are_typed_errors_with_offsets() {
    let b = bytes(NESTED_CATCH_FINALLY);
    for len in 0..b.len() {
        let err = Body::parse(&b[..len]).expect_err("every proper prefix is truncated");
        let expected_offset = match len {
            0..12 => 0,
            12..61 => 12,
            // Code ends at 61; the 4-byte section header starts at the next boundary, 64.
            61..68 => 61,
            _ => 64,
        };
        assert_eq!(
            err.offset(),
            expected_offset,
            "prefix of {len} bytes: {err}"
        );
    }
    assert_eq!(Body::parse(&[]), Err(DecodeError::Empty));
    assert_eq!(
        Body::parse(&[0x00]),
        Err(DecodeError::BadFormat { byte: 0 })
    );
    assert_eq!(
        Body::parse(&[0x01]),
        Err(DecodeError::BadFormat { byte: 1 })
    );
    // Header-size nibble 2 would put the code inside the header.
    let small = bytes("03 20 08 00 00 00 00 00 00 00 00 00");
    assert_eq!(
        Body::parse(&small),
        Err(DecodeError::FatHeaderTooSmall { size_dwords: 2 })
    );
    // Unknown opcode in the code, reported with body offset and IL offset.
    let err = Body::decode(&bytes("0E 00 24 2A")).unwrap_err();
    assert_eq!(err.offset(), 2);
    assert!(
        err.to_string().contains("IL_0001: unknown opcode 24"),
        "{err}"
    );
    // DataSize below the section header's own size.
    let ds = bytes("0B 30 08 00 01 00 00 00 00 00 00 00 2A 00 00 00 01 02 00 00");
    assert!(matches!(
        Body::parse(&ds),
        Err(DecodeError::SectionDataSizeTooSmall {
            offset: 16,
            data_size: 2
        })
    ));
}

/// The hostile shapes at a moderate size: every region printed once, braces balanced,
/// indentation capped where the regions nest deeper than it goes.
#[test]
fn hostile_shapes_print_every_region() {
    use ilcheck::generate::hostile;
    let count = |text: &str, line: &str| text.lines().filter(|l| l.trim_start() == line).count();
    for h in [hostile::sequential_try(20_000), hostile::nested_try(20_000)] {
        let body = lossless(&h.bytes);
        let text = disassemble(&body);
        assert_eq!(count(&text, ".try"), 20_000, "{:?}", h.shape);
        assert_eq!(count(&text, "finally"), 20_000, "{:?}", h.shape);
        assert_eq!(count(&text, "{"), 40_000, "{:?}", h.shape);
        assert_eq!(count(&text, "}"), 40_000, "{:?}", h.shape);
        let lines = text.lines().filter(|l| l.trim_start().starts_with("IL_"));
        assert_eq!(lines.count(), h.instructions, "{:?}", h.shape);
        assert!(!text.contains("do not nest"));
    }
    // Sequential blocks sit at the top level, one after the other.
    let text = disassemble(&lossless(&hostile::sequential_try(3).bytes));
    assert!(
        text.contains(
            "}\nfinally\n{\n  IL_0003:  endfinally\n}\n.try\n{\n  IL_0004:  nop\n  IL_0005:  leave.s    IL_0008\n}"
        ),
        "{text}"
    );
    // Nested ones indent by two spaces a level, up to 32 levels, and say where it stops.
    let text = disassemble(&lossless(&hostile::nested_try(40).bytes));
    assert!(
        text.contains("// EH regions nest 40 deep; indentation stops at 32 levels\n"),
        "{text}"
    );
    let deepest = text.lines().map(|l| l.len() - l.trim_start().len()).max();
    assert_eq!(deepest, Some(64));
    assert!(text.contains(&format!("\n{}IL_0027:  nop\n", " ".repeat(64))));
    assert!(text.contains(&format!("\n{}IL_0007:  nop\n", " ".repeat(16))));
    // No note when they nest exactly as deep as the indentation goes.
    let text = disassemble(&lossless(&hostile::nested_try(32).bytes));
    assert!(!text.contains("indentation stops"), "{text}");
}
