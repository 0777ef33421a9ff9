//! Body encoding: lossless (every stored choice reproduced) and canonical (the smallest legal
//! form).

use super::*;
use crate::instr::{self, decode_at};
use crate::opcode::Opcode;

/// Why a body could not be encoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// A body with a tiny header has more than [`TINY_MAX_CODE`] code bytes (the count of code
    /// bytes).
    #[error("tiny header cannot hold {0} code bytes (63 at most)")]
    TinyTooLarge(usize),
    /// The code is longer than a fat header's 32-bit code size can say (the count of code
    /// bytes).
    #[error("code of {0} bytes does not fit a 32-bit code size")]
    CodeTooLarge(usize),
    /// A raw section's data is longer than a fat section's 24-bit DataSize can say (the count
    /// of data bytes).
    #[error("section of {0} data bytes does not fit its DataSize field")]
    SectionTooLarge(usize),
    /// More clauses than one fat EH section's 24-bit DataSize can hold (the count of clauses).
    #[error("{0} clauses do not fit one fat EH section")]
    TooManyClauses(usize),
    /// A clause of a small EH section has a field beyond the small form's range (16-bit flags
    /// and offsets, 8-bit lengths).
    #[error("clause {index}: {field} {value} does not fit the small form")]
    ClauseTooLargeForSmall {
        /// Index of the clause within its section.
        index: usize,
        /// The field that does not fit.
        field: &'static str,
        /// Its value.
        value: u32,
    },
    /// A section's stored DataSize does not match its content: the lossless encoder would
    /// write a section that does not parse back to itself.
    #[error(
        "section {index}: DataSize {stored} disagrees with its {actual} bytes of content and header"
    )]
    SectionSizeMismatch {
        /// Index of the section in the body.
        index: usize,
        /// DataSize as stored.
        stored: u32,
        /// Bytes of header and content it holds.
        actual: usize,
    },
    /// An instruction of the code could not be encoded.
    #[error(transparent)]
    Instruction(#[from] instr::EncodeError),
}

/// A non-EH section carried through canonical encoding unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawSection<'a> {
    /// Kind without the FatFormat and MoreSects bits.
    pub kind: u8,
    /// The section's bytes after its 4-byte header.
    pub data: &'a [u8],
}

/// What a body means, without how it was encoded: the input of canonical encoding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BodyParts<'a> {
    /// MaxStack, written as given (a tiny header implies 8).
    pub max_stack: u16,
    /// Whether locals and `localloc` memory start zeroed.
    pub init_locals: bool,
    /// StandAloneSig token of the locals, or 0 for none.
    pub local_sig: u32,
    /// The IL.
    pub code: &'a [u8],
    /// Every exception-handling clause, in table order; written as one EH section.
    pub clauses: Vec<Clause>,
    /// Non-EH sections, written after the EH section in this order.
    pub raw_sections: Vec<RawSection<'a>>,
}

/// Writes the code by re-encoding each decoded instruction, so that a round trip exercises the
/// instruction codec; bytes from the first undecodable instruction on are copied as they are.
fn write_code(code: &[u8], out: &mut Vec<u8>) -> Result<(), EncodeError> {
    out.reserve(code.len());
    let mut pos = 0;
    while pos < code.len() {
        match decode_at(code, pos) {
            Ok(i) => {
                i.encode(out)?;
                pos += i.size();
            }
            Err(_) => {
                out.extend_from_slice(&code[pos..]);
                break;
            }
        }
    }
    Ok(())
}

fn write_fat_header(
    flags: u16,
    size_dwords: u8,
    max_stack: u16,
    code_size: u32,
    local_sig: u32,
    out: &mut Vec<u8>,
) {
    let word = (flags & 0x0FFF) | ((size_dwords as u16) << 12);
    out.extend_from_slice(&word.to_le_bytes());
    out.extend_from_slice(&max_stack.to_le_bytes());
    out.extend_from_slice(&code_size.to_le_bytes());
    out.extend_from_slice(&local_sig.to_le_bytes());
}

/// Appends one clause in its fat (24-byte) or small (12-byte) form (II.25.4.6).
pub(crate) fn write_clause(c: &Clause, fat: bool, out: &mut Vec<u8>) {
    if fat {
        for v in [
            c.flags,
            c.try_offset,
            c.try_length,
            c.handler_offset,
            c.handler_length,
            c.class_or_filter,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
    } else {
        out.extend_from_slice(&(c.flags as u16).to_le_bytes());
        out.extend_from_slice(&(c.try_offset as u16).to_le_bytes());
        out.push(c.try_length as u8);
        out.extend_from_slice(&(c.handler_offset as u16).to_le_bytes());
        out.push(c.handler_length as u8);
        out.extend_from_slice(&c.class_or_filter.to_le_bytes());
    }
}

fn write_section_header(kind: u8, data_size: u32, reserved: u16, out: &mut Vec<u8>) {
    if kind & SECT_FAT_FORMAT != 0 {
        out.push(kind);
        out.extend_from_slice(&data_size.to_le_bytes()[..3]);
    } else {
        out.push(kind);
        out.push(data_size as u8);
        out.extend_from_slice(&reserved.to_le_bytes());
    }
}

fn pad_to_4(start: usize, out: &mut Vec<u8>) {
    while !(out.len() - start).is_multiple_of(4) {
        out.push(0);
    }
}

impl Body<'_> {
    /// Appends exactly the bytes this body was parsed from.
    pub fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        match &self.header {
            Header::Tiny => {
                if self.code.len() > TINY_MAX_CODE {
                    return Err(EncodeError::TinyTooLarge(self.code.len()));
                }
                out.push(((self.code.len() as u8) << 2) | FORMAT_TINY);
            }
            Header::Fat(h) => {
                let code_size = u32::try_from(self.code.len())
                    .map_err(|_| EncodeError::CodeTooLarge(self.code.len()))?;
                write_fat_header(
                    h.flags,
                    h.size_dwords,
                    h.max_stack,
                    code_size,
                    h.local_sig,
                    out,
                );
                out.extend_from_slice(h.extra);
            }
        }
        write_code(self.code, out)?;
        for (index, s) in self.sections.iter().enumerate() {
            let clause_size = if s.is_fat() {
                FAT_CLAUSE_SIZE
            } else {
                SMALL_CLAUSE_SIZE
            };
            let actual = 4 + match &s.content {
                SectionContent::Eh { clauses, trailing } => {
                    clauses.len() * clause_size + trailing.len()
                }
                SectionContent::Raw(data) => data.len(),
            };
            if actual != s.data_size as usize {
                return Err(EncodeError::SectionSizeMismatch {
                    index,
                    stored: s.data_size,
                    actual,
                });
            }
            out.extend_from_slice(s.padding);
            write_section_header(s.kind, s.data_size, s.reserved, out);
            match &s.content {
                SectionContent::Eh { clauses, trailing } => {
                    for (i, c) in clauses.iter().enumerate() {
                        if !s.is_fat() {
                            check_small(i, &c)?;
                        }
                        write_clause(&c, s.is_fat(), out);
                    }
                    out.extend_from_slice(trailing);
                }
                SectionContent::Raw(data) => out.extend_from_slice(data),
            }
        }
        Ok(())
    }

    /// Appends the canonical encoding of this body (see [`BodyParts::encode_canonical`]).
    pub fn encode_canonical(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        self.parts().encode_canonical(out)
    }

    /// True when [`Body::encode_canonical`] would reproduce this body's bytes.
    pub fn is_canonical(&self) -> bool {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        self.encode(&mut a).is_ok() && self.encode_canonical(&mut b).is_ok() && a == b
    }
}

impl BodyParts<'_> {
    /// Whether a tiny header can carry this body without changing its meaning: code under 64
    /// bytes, MaxStack ≤ 8, no locals, no sections, and no `localloc` whose memory InitLocals
    /// would have zeroed.
    pub fn tiny_eligible(&self) -> bool {
        self.code.len() <= TINY_MAX_CODE
            && self.max_stack <= TINY_MAX_STACK
            && self.local_sig == 0
            && self.clauses.is_empty()
            && self.raw_sections.is_empty()
            && !(self.init_locals && uses_localloc(self.code))
    }

    /// Whether every clause fits one small EH section.
    pub fn small_eh_eligible(&self) -> bool {
        self.clauses.len() <= SMALL_MAX_CLAUSES && self.clauses.iter().all(Clause::fits_small)
    }

    /// Appends the smallest legal encoding: tiny header when eligible, else a standard 12-byte fat
    /// header with only the flags that mean something; zero padding; one EH section, small when
    /// every clause fits, followed by any raw sections. Instructions keep their forms (long
    /// branches are not shortened) and MaxStack is kept as given.
    pub fn encode_canonical(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        self.encode_canonical_with(out, write_code)
    }

    /// [`Self::encode_canonical`] for code that is already a sequence of encoded instructions
    /// (as a layout writes it): the code is copied, not decoded and encoded again.
    pub(crate) fn encode_canonical_encoded(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        self.encode_canonical_with(out, |code, out| {
            out.extend_from_slice(code);
            Ok(())
        })
    }

    fn encode_canonical_with(
        &self,
        out: &mut Vec<u8>,
        write_code: impl Fn(&[u8], &mut Vec<u8>) -> Result<(), EncodeError>,
    ) -> Result<(), EncodeError> {
        let start = out.len();
        if self.tiny_eligible() {
            out.push(((self.code.len() as u8) << 2) | FORMAT_TINY);
            return write_code(self.code, out);
        }
        let code_size = u32::try_from(self.code.len())
            .map_err(|_| EncodeError::CodeTooLarge(self.code.len()))?;
        let has_sections = !self.clauses.is_empty() || !self.raw_sections.is_empty();
        let mut flags = FORMAT_FAT;
        if has_sections {
            flags |= FLAG_MORE_SECTS;
        }
        if self.init_locals {
            flags |= FLAG_INIT_LOCALS;
        }
        // Room for the whole body at once: a body of many clauses would otherwise grow the
        // buffer by doubling, holding the old copy and the new one while it moves.
        let fat = !self.small_eh_eligible();
        let clause_size = if fat {
            FAT_CLAUSE_SIZE
        } else {
            SMALL_CLAUSE_SIZE
        };
        let eh_size = match self.clauses.len() {
            0 => 0,
            n => 4 + n * clause_size,
        };
        let raw_size: usize = self.raw_sections.iter().map(|s| 8 + s.data.len()).sum();
        out.reserve(FAT_HEADER_SIZE + self.code.len() + 3 + eh_size + raw_size);
        write_fat_header(flags, 3, self.max_stack, code_size, self.local_sig, out);
        write_code(self.code, out)?;

        let mut remaining = usize::from(!self.clauses.is_empty()) + self.raw_sections.len();
        let more = |remaining: usize| if remaining > 1 { SECT_MORE_SECTS } else { 0 };
        if !self.clauses.is_empty() {
            pad_to_4(start, out);
            let data_size = eh_size;
            if data_size > 0xFF_FFFF {
                return Err(EncodeError::TooManyClauses(self.clauses.len()));
            }
            let kind = SECT_EH_TABLE | if fat { SECT_FAT_FORMAT } else { 0 } | more(remaining);
            write_section_header(kind, data_size as u32, 0, out);
            for c in &self.clauses {
                write_clause(c, fat, out);
            }
            remaining -= 1;
        }
        for s in &self.raw_sections {
            pad_to_4(start, out);
            let data_size = 4 + s.data.len();
            if data_size > 0xFF_FFFF {
                return Err(EncodeError::SectionTooLarge(s.data.len()));
            }
            let fat = if data_size > 0xFF { SECT_FAT_FORMAT } else { 0 };
            write_section_header(
                (s.kind & SECT_KIND_MASK) | fat | more(remaining),
                data_size as u32,
                0,
                out,
            );
            out.extend_from_slice(s.data);
            remaining -= 1;
        }
        Ok(())
    }
}

fn check_small(index: usize, c: &Clause) -> Result<(), EncodeError> {
    let fields = [
        ("flags", c.flags, 0xFFFF),
        ("try offset", c.try_offset, 0xFFFF),
        ("try length", c.try_length, 0xFF),
        ("handler offset", c.handler_offset, 0xFFFF),
        ("handler length", c.handler_length, 0xFF),
    ];
    match fields.into_iter().find(|&(_, v, max)| v > max) {
        Some((field, value, _)) => Err(EncodeError::ClauseTooLargeForSmall {
            index,
            field,
            value,
        }),
        None => Ok(()),
    }
}

/// Whether the code contains `localloc` (undecodable code counts as possibly containing it).
fn uses_localloc(code: &[u8]) -> bool {
    crate::instr::Instructions::new(code).any(|i| i.map_or(true, |i| i.opcode == Opcode::Localloc))
}
