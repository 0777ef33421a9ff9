//! Body encodings that compilers rarely emit and other tools destroy: each must round-trip
//! byte for byte, and the canonical encoder must name why it is not canonical.

use ilcheck::body::{Body, ClauseKind};
use ilcheck::corpus::noncanonical_reasons;

fn hex(s: &str) -> Vec<u8> {
    s.split_whitespace()
        .map(|b| u8::from_str_radix(b, 16).unwrap())
        .collect()
}

/// Decodes, checks the lossless round trip and the canonical fixed point, and returns the reasons
/// the body is not canonical.
fn check(name: &str, bytes: &[u8]) -> Vec<&'static str> {
    let body = Body::decode(bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(body.len(), bytes.len(), "{name}: extent");
    let mut out = Vec::new();
    body.encode(&mut out).unwrap();
    assert_eq!(out, bytes, "{name}: lossless");
    let mut canon = Vec::new();
    body.encode_canonical(&mut canon).unwrap();
    let again = Body::decode(&canon).unwrap();
    let mut twice = Vec::new();
    again.encode_canonical(&mut twice).unwrap();
    assert_eq!(twice, canon, "{name}: canonical fixed point");
    let reasons = noncanonical_reasons(&body);
    assert_eq!(
        reasons.is_empty(),
        canon == bytes,
        "{name}: reasons {reasons:?} vs canonical {}",
        canon == bytes
    );
    reasons
}

const CATCH_CLAUSE_SMALL: &str = "00 00 00 00 01 01 00 01 02 00 00 01";

#[test]
fn fat_header_where_tiny_fits() {
    // MaxStack 8, no locals, 1 byte of code: tiny would do.
    let r = check("fat/tiny", &hex("03 30 08 00 01 00 00 00 00 00 00 00 2A"));
    assert_eq!(r, ["fat header where tiny fits"]);
}

#[test]
fn init_locals_without_locals() {
    let r = check("initlocals", &hex("13 30 02 00 01 00 00 00 00 00 00 00 2A"));
    assert_eq!(r, ["fat header where tiny fits"]);
    // With localloc, InitLocals zeroes its memory: fat stays canonical.
    let r = check(
        "initlocals+localloc",
        &hex("13 30 02 00 05 00 00 00 00 00 00 00 16 FE 0F 26 2A"),
    );
    assert!(r.is_empty(), "{r:?}");
}

#[test]
fn header_size_nibble_other_than_three() {
    let r = check(
        "nibble 4",
        &hex("03 40 10 00 01 00 00 00 00 00 00 00 AA BB CC DD 2A"),
    );
    assert!(r.contains(&"fat header size other than 12 bytes"), "{r:?}");
    let bytes = hex("03 40 10 00 01 00 00 00 00 00 00 00 AA BB CC DD 2A");
    let body = Body::decode(&bytes).unwrap();
    assert_eq!(body.fat().unwrap().extra, [0xAA, 0xBB, 0xCC, 0xDD]);
    assert_eq!(body.code, [0x2A]);
}

#[test]
fn unknown_flag_bits_and_max_stack_as_stored() {
    let bytes = hex("43 3F 34 12 01 00 00 00 01 00 00 11 2A");
    let r = check("flags", &bytes);
    assert!(r.contains(&"unknown fat header flag bits"), "{r:?}");
    let body = Body::decode(&bytes).unwrap();
    assert_eq!(body.fat().unwrap().flags, 0xF43);
    assert_eq!(body.max_stack(), 0x1234, "never recomputed by the codec");
}

#[test]
fn code_sizes_zero_63_64() {
    assert!(check("tiny 0", &[0x02]).is_empty());
    let mut tiny63 = vec![(63 << 2) | 2];
    tiny63.extend(std::iter::repeat_n(0x00, 62));
    tiny63.push(0x2A);
    assert!(check("tiny 63", &tiny63).is_empty());
    // 64 bytes do not fit a tiny header: fat with MaxStack 8 is canonical.
    let mut fat64 = hex("03 30 08 00 40 00 00 00 00 00 00 00");
    fat64.extend(std::iter::repeat_n(0x00, 63));
    fat64.push(0x2A);
    assert!(check("fat 64", &fat64).is_empty());
    // Fat with code size 0.
    let r = check("fat 0", &hex("03 30 08 00 00 00 00 00 00 00 00 00"));
    assert_eq!(r, ["fat header where tiny fits"]);
}

#[test]
fn nonzero_padding_and_reserved_bytes() {
    let body = format!(
        "0B 30 08 00 01 00 00 00 00 00 00 00 2A  AB CD EF  01 10 00 00 {CATCH_CLAUSE_SMALL}"
    );
    let r = check("padding", &hex(&body));
    assert!(r.contains(&"non-zero padding before a section"), "{r:?}");
    let body =
        format!("0B 30 08 00 01 00 00 00 00 00 00 00 2A 00 00 00 01 10 34 12 {CATCH_CLAUSE_SMALL}");
    let r = check("reserved", &hex(&body));
    assert_eq!(r, ["non-zero reserved bytes in a small section header"]);
}

#[test]
fn fat_section_where_small_fits() {
    let bytes = hex("0B 30 08 00 02 00 00 00 00 00 00 00 00 2A 00 00
         41 1C 00 00  00 00 00 00 00 00 00 00 01 00 00 00 01 00 00 00 01 00 00 00 02 00 00 01");
    let r = check("fat section", &bytes);
    assert_eq!(r, ["fat EH section where small fits"]);
    let body = Body::decode(&bytes).unwrap();
    assert!(body.sections[0].is_fat());
    assert_eq!(body.clauses().count(), 1);
}

#[test]
fn data_size_not_whole_clauses() {
    // Small: DataSize 4 + 12 + 3; fat: 4 + 24 + 5.
    let small = format!(
        "0B 30 08 00 01 00 00 00 00 00 00 00 2A 00 00 00 01 13 00 00 {CATCH_CLAUSE_SMALL} 11 22 33"
    );
    let r = check("small trailing", &hex(&small));
    assert_eq!(r, ["EH DataSize not a whole number of clauses"]);
    let fat = "0B 30 08 00 01 00 00 00 00 00 00 00 2A 00 00 00 41 21 00 00
               00 00 00 00 00 00 00 00 01 00 00 00 01 00 00 00 00 00 00 00 00 00 00 00 01 02 03 04 05";
    let r = check("fat trailing", &hex(fat));
    assert!(
        r.contains(&"EH DataSize not a whole number of clauses"),
        "{r:?}"
    );
}

#[test]
fn chained_sections_with_opt_il_and_unknown_kinds() {
    // OptIL (kind 2, with MoreSects) then EH then an unknown kind 0x15.
    let bytes = format!(
        "0B 30 08 00 01 00 00 00 00 00 00 00 2A 00 00 00
         82 06 00 00 DE AD  00 00
         81 10 00 00 {CATCH_CLAUSE_SMALL}
         15 06 00 00 77 88"
    );
    let r = check("chain", &hex(&bytes));
    assert!(r.contains(&"non-EH section (OptIL or unknown)"), "{r:?}");
    let bytes = hex(&bytes);
    let body = Body::decode(&bytes).unwrap();
    assert_eq!(body.sections.len(), 3);
    assert_eq!(
        body.sections[1].padding,
        [0x00, 0x00],
        "alignment bytes before the second section"
    );
}

#[test]
fn more_sects_with_empty_section() {
    let r = check(
        "empty EH",
        &hex("0B 30 08 00 01 00 00 00 00 00 00 00 2A 00 00 00 01 04 00 00"),
    );
    assert!(r.contains(&"empty EH section"), "{r:?}");
}

#[test]
fn several_eh_sections() {
    let bytes = format!(
        "0B 30 08 00 02 00 00 00 00 00 00 00 00 2A 00 00 81 10 00 00 {CATCH_CLAUSE_SMALL} 01 10 00 00 {CATCH_CLAUSE_SMALL}"
    );
    let r = check("two EH sections", &hex(&bytes));
    assert_eq!(r, ["several EH sections"]);
    assert_eq!(Body::decode(&hex(&bytes)).unwrap().clauses().count(), 2);
}

#[test]
fn finally_and_fault_token_fields_are_kept() {
    // finally with token field 0xDEADBEEF, fault with 0x12345678.
    let bytes = hex("0B 30 08 00 04 00 00 00 00 00 00 00 00 DC DC 2A
         01 1C 00 00
         02 00 00 00 01 01 00 01 EF BE AD DE
         04 00 00 00 01 02 00 01 78 56 34 12");
    assert!(
        check("token fields", &bytes).is_empty(),
        "kept by the canonical encoder too"
    );
    let body = Body::decode(&bytes).unwrap();
    let clauses: Vec<_> = body.clauses().collect();
    assert_eq!(
        (clauses[0].kind(), clauses[0].class_or_filter),
        (ClauseKind::Finally, 0xDEAD_BEEF)
    );
    assert_eq!(
        (clauses[1].kind(), clauses[1].class_or_filter),
        (ClauseKind::Fault, 0x1234_5678)
    );
}

#[test]
fn invalid_clauses_are_kept_as_data() {
    // Empty try, overlapping regions, a handler past the end, and an unknown flag combination.
    let bytes = hex("0B 30 08 00 01 00 00 00 00 00 00 00 2A 00 00 00
         01 34 00 00
         00 00 00 00 00 00 00 00 02 00 00 01
         02 00 00 00 05 02 00 05 00 00 00 00
         00 00 02 00 05 FF FF FF 02 00 00 01
         07 00 00 00 01 00 00 01 00 00 00 00");
    assert!(check("invalid clauses", &bytes).is_empty());
    let body = Body::decode(&bytes).unwrap();
    assert_eq!(body.clauses().count(), 4);
    assert_eq!(body.clauses().last().unwrap().kind(), ClauseKind::Invalid);
    let text = ilcheck::disasm::disassemble(&body);
    assert!(text.contains("do not nest"), "{text}");
    assert!(text.contains("handler IL_ffff to IL_100fe"), "{text}");
}

#[test]
fn long_branches_are_not_shortened() {
    // br +0 and leave +0 in long form, where short would fit.
    let bytes = hex("03 30 08 00 0B 00 00 00 00 00 00 00 38 00 00 00 00 DD 00 00 00 00 2A");
    let r = check("long branches", &bytes);
    assert_eq!(r, ["fat header where tiny fits"]);
    let body = Body::decode(&bytes).unwrap();
    let mut canon = Vec::new();
    body.encode_canonical(&mut canon).unwrap();
    assert_eq!(&canon[1..], &bytes[12..], "canonical keeps the long forms");
}
