//! What a listed finding shows besides its message, and what reports say of each code: the
//! method's EH table when the finding concerns regions (the clause at fault marked), the ways
//! control arrives where stack depths disagree (each with its instruction), and each code's
//! documentation and ECMA-335 reference.

use super::BODY_MALFORMED;
use crate::body::{Body, ClauseKind};
use crate::disasm::TokenNamer;
use crate::image::IntegrityCode;
use crate::opcode::OperandKind;
use crate::verify::{Arrival, ArrivalKind, Code, ecma_sections};
use serde::Serialize;

/// What the documentation says of a finding's code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeDoc {
    /// The rule, with its references: [`Code::description`], [`IntegrityCode::description`],
    /// or that of [`BODY_MALFORMED`].
    pub description: &'static str,
    /// The ECMA-335 sections the description cites, e.g. `III.1.7.5`.
    pub reference: String,
    /// The family of rules: a [`crate::verify::CodeGroup`] in words, `image` for an integrity
    /// code, `method body` for [`BODY_MALFORMED`].
    pub group: &'static str,
    /// Whether findings of the code are shown with the method's EH table.
    pub concerns_regions: bool,
}

impl CodeDoc {
    /// The description's first sentence (two when the first only says `--baseline` is
    /// needed): what a table of codes shows.
    pub fn summary(&self) -> &'static str {
        let text = self.description;
        let end = |from: usize| text[from..].find(". ").map(|k| from + k + 1);
        match end(0) {
            Some(k) if text[..k].starts_with("Needs") => end(k + 1).map_or(text, |j| &text[..j]),
            Some(k) => &text[..k],
            None => text,
        }
    }
}

/// The documentation of a finding code: a verifier code, an image integrity code or
/// [`BODY_MALFORMED`] (any other name is documented as unknown).
pub fn code_doc(code: &str) -> CodeDoc {
    let (description, group, concerns_regions) =
        match (Code::from_name(code), IntegrityCode::from_name(code)) {
            (Some(c), _) => (c.description(), c.group().as_str(), c.concerns_regions()),
            (None, Some(c)) => (c.description(), "image", false),
            (None, None) if code == BODY_MALFORMED => (
                "The method body's header or sections do not decode (ECMA-335 II.25.4).",
                "method body",
                false,
            ),
            (None, None) => (
                "A code this version of ilcheck does not know.",
                "unknown",
                false,
            ),
        };
    CodeDoc {
        description,
        reference: ecma_sections(description),
        group,
        concerns_regions,
    }
}

/// One clause of a method's EH table, as a finding shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ClauseRow {
    /// Its index in table order.
    pub index: u32,
    /// `catch`, `filter`, `finally`, `fault`, or `invalid` (flags that name no kind).
    pub kind: &'static str,
    /// The flags as stored.
    pub flags: u32,
    /// IL offsets: the try's start and end (exclusive; past 32 bits when the stored length
    /// overflows), the handler's.
    pub try_start: u32,
    /// The try's end (exclusive).
    pub try_end: u64,
    /// The handler's start.
    pub handler_start: u32,
    /// The handler's end (exclusive).
    pub handler_end: u64,
    /// A filter clause's filter start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filter_start: Option<u32>,
    /// A catch clause's class as ILAsm names it (raw, with the reason, when it cannot be
    /// named).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// A catch clause's class token as stored, `0x01000002`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class_token: Option<String>,
}

fn kind_name(kind: ClauseKind) -> &'static str {
    match kind {
        ClauseKind::Catch => "catch",
        ClauseKind::Filter => "filter",
        ClauseKind::Finally => "finally",
        ClauseKind::Fault => "fault",
        ClauseKind::Invalid => "invalid",
    }
}

/// Tables longer than this show only the clauses near those a finding names: every listed
/// finding of a body with a hundred thousand clauses must not copy them all.
pub const MAX_CLAUSES_SHOWN: usize = 32;

/// Clauses shown on each side of a named clause in a long table.
const AROUND: u32 = 8;

/// The EH table of `body`, catch classes named by `names`; of a table longer than
/// [`MAX_CLAUSES_SHOWN`], the clauses within a few of those in `focus` (the first few when it
/// is empty). Returns the rows and how many clauses were left out.
pub fn clause_rows(
    body: &Body<'_>,
    names: Option<&dyn TokenNamer>,
    focus: &[u32],
) -> (Vec<ClauseRow>, u32) {
    let total = body.clauses().count();
    let shown = |i: u32| {
        total <= MAX_CLAUSES_SHOWN
            || if focus.is_empty() {
                i < 2 * AROUND
            } else {
                focus.iter().any(|&f| i.abs_diff(f) <= AROUND)
            }
    };
    let rows: Vec<ClauseRow> = body
        .clauses()
        .enumerate()
        .filter(|(i, _)| shown(*i as u32))
        .map(|(i, c)| {
            let kind = c.kind();
            let (class, class_token) = if kind == ClauseKind::Catch {
                let mut text = String::new();
                let _ = crate::disasm::write_token(
                    &mut text,
                    names,
                    OperandKind::Type,
                    c.class_or_filter,
                );
                (Some(text), Some(format!("{:#010x}", c.class_or_filter)))
            } else {
                (None, None)
            };
            ClauseRow {
                index: i as u32,
                kind: kind_name(kind),
                flags: c.flags,
                try_start: c.try_offset,
                try_end: c.try_end(),
                handler_start: c.handler_offset,
                handler_end: c.handler_end(),
                filter_start: (kind == ClauseKind::Filter).then_some(c.class_or_filter),
                class,
                class_token,
            }
        })
        .collect();
    let omitted = (total - rows.len()) as u32;
    (rows, omitted)
}

/// One way control reaches the instruction of a stack finding, as a finding shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ArrivalRow {
    /// How control arrives.
    pub kind: ArrivalKind,
    /// IL offset of the instruction it comes from (see [`Arrival::from`]).
    pub from: u32,
    /// The stack depth it brings.
    pub depth: u32,
    /// That instruction, disassembled with its tokens named (empty for the method entry and a
    /// handler's entry).
    pub instruction: String,
}

/// The rows of `arrivals` in `code`, instructions named by `names`.
pub fn arrival_rows(
    code: &[u8],
    arrivals: &[Arrival],
    names: Option<&dyn TokenNamer>,
) -> Vec<ArrivalRow> {
    arrivals
        .iter()
        .map(|a| ArrivalRow {
            kind: a.kind,
            from: a.from,
            depth: a.depth,
            instruction: match a.kind {
                ArrivalKind::Branch | ArrivalKind::FallThrough => {
                    crate::disasm::instruction_text(code, a.from, names)
                }
                ArrivalKind::Entry | ArrivalKind::Handler => String::new(),
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A body of `n` finally clauses (not a valid table; the rows do not care).
    fn clauses(n: u32) -> Vec<u8> {
        let mut code = vec![0u8; 2 * n as usize + 2];
        code.push(0x2A);
        let parts = crate::body::BodyParts {
            max_stack: 8,
            init_locals: false,
            local_sig: 0,
            code: &code,
            clauses: (0..n)
                .map(|i| crate::body::Clause {
                    flags: crate::body::Clause::FLAG_FINALLY,
                    try_offset: 2 * i,
                    try_length: 1,
                    handler_offset: 2 * i + 1,
                    handler_length: 1,
                    class_or_filter: 0,
                })
                .collect(),
            raw_sections: Vec::new(),
        };
        let mut out = Vec::new();
        parts.encode_canonical(&mut out).unwrap();
        out
    }

    #[test]
    fn long_tables_show_the_clauses_near_the_focus() {
        let bytes = clauses(100);
        let body = Body::parse(&bytes).unwrap();
        let (rows, omitted) = clause_rows(&body, None, &[50, 99]);
        let shown: Vec<u32> = rows.iter().map(|r| r.index).collect();
        let expected: Vec<u32> = (42..=58).chain(91..=99).collect();
        assert_eq!(shown, expected);
        assert_eq!(omitted as usize, 100 - expected.len());
        let (rows, omitted) = clause_rows(&body, None, &[]);
        assert_eq!((rows.len(), omitted), (16, 84));
        assert_eq!((rows[1].try_start, rows[1].handler_end), (2, 4));
        let bytes = clauses(MAX_CLAUSES_SHOWN as u32);
        let body = Body::parse(&bytes).unwrap();
        let (rows, omitted) = clause_rows(&body, None, &[0]);
        assert_eq!((rows.len(), omitted), (MAX_CLAUSES_SHOWN, 0));
        assert!(
            rows.iter()
                .all(|r| r.kind == "finally" && r.class.is_none())
        );
    }

    #[test]
    fn every_code_kind_is_documented_with_its_reference() {
        for &c in Code::ALL {
            let doc = code_doc(c.as_str());
            assert!(!doc.reference.is_empty(), "{c}");
            assert_eq!(doc.concerns_regions, c.concerns_regions());
        }
        for c in IntegrityCode::ALL {
            assert!(!code_doc(c.name()).reference.is_empty(), "{}", c.name());
        }
        assert_eq!(code_doc(BODY_MALFORMED).reference, "II.25.4");
        assert_eq!(code_doc("NoSuchCode").group, "unknown");
        assert_eq!(
            code_doc("StackUnderflow").summary(),
            "An instruction pops more items than the stack holds (III.1.7.5)."
        );
        let retargeted = code_doc("BranchRetargeted");
        assert!(
            retargeted
                .summary()
                .starts_with("Needs `--baseline`. A branch")
        );
        assert!(retargeted.summary().len() < retargeted.description.len());
    }
}
