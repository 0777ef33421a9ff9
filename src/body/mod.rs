//! Method bodies (ECMA-335 II.25.4): tiny and fat headers, the code, and the extra data sections
//! (exception-handling tables in small and fat form, OptIL and unknown kinds kept raw).
//!
//! [`Body::parse`] reads the structure and borrows every byte it does not interpret, so that
//! [`Body::encode`] gives back exactly the bytes it was parsed from — including forms compilers
//! rarely emit: a fat header where tiny would fit, a header-size nibble other than 3, unknown flag
//! bits, non-zero padding and reserved bytes, fat sections where small would fit, DataSize values
//! that are not a whole number of clauses, and clauses the verifier will later reject.
//! [`Body::encode_canonical`] writes the smallest legal form instead.

mod clauses;
mod decode;
mod encode;
#[cfg(feature = "gen")]
pub(crate) use encode::write_clause;

pub(crate) use clauses::Block;
pub use clauses::{ClauseTable, Iter as ClauseIter};
pub use decode::DecodeError;
pub use encode::{BodyParts, EncodeError, RawSection};

use crate::instr::Instructions;

/// Fat-header flag: extra data sections follow the code.
pub const FLAG_MORE_SECTS: u16 = 0x08;
/// Fat-header flag: locals (and `localloc` memory) are zero-initialised.
pub const FLAG_INIT_LOCALS: u16 = 0x10;
/// Low bits of a fat header.
pub const FORMAT_FAT: u16 = 0x3;
/// Low bits of a tiny header.
pub const FORMAT_TINY: u8 = 0x2;
/// Size of a standard fat header in bytes (a header-size nibble of 3).
pub const FAT_HEADER_SIZE: usize = 12;
/// MaxStack implied by a tiny header.
pub const TINY_MAX_STACK: u16 = 8;
/// A tiny header holds code sizes up to this value.
pub const TINY_MAX_CODE: usize = 63;

/// The LocalVarSigTok of an encoded body with a fat header (II.25.4.3), read without
/// decoding the rest; `None` for a tiny header (no locals) or bytes too short for a fat one.
pub(crate) fn fat_local_sig(encoded: &[u8]) -> Option<u32> {
    let flags = u16::from_le_bytes([*encoded.first()?, *encoded.get(1)?]);
    if flags & 0x3 != FORMAT_FAT {
        return None;
    }
    let token = encoded.get(8..12)?;
    Some(u32::from_le_bytes([token[0], token[1], token[2], token[3]]))
}

/// Section kind: exception-handling table.
pub const SECT_EH_TABLE: u8 = 0x01;
/// Section kind: OptIL table (ignored by runtimes).
pub const SECT_OPT_IL: u8 = 0x02;
/// Section kind bits.
pub const SECT_KIND_MASK: u8 = 0x3F;
/// Section flag: fat form (24-bit DataSize, 24-byte clauses).
pub const SECT_FAT_FORMAT: u8 = 0x40;
/// Section flag: another section follows.
pub const SECT_MORE_SECTS: u8 = 0x80;
/// Bytes in a small clause.
pub const SMALL_CLAUSE_SIZE: usize = 12;
/// Bytes in a fat clause.
pub const FAT_CLAUSE_SIZE: usize = 24;
/// Most clauses a small section can hold: its DataSize is one byte.
pub const SMALL_MAX_CLAUSES: usize = (255 - 4) / SMALL_CLAUSE_SIZE;

/// A method-body header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Header<'a> {
    /// One byte: `(code_size << 2) | 0b10`. MaxStack 8, no locals, no sections.
    Tiny,
    /// Twelve bytes or more (II.25.4.3): flags, header size, MaxStack, code size, locals token.
    Fat(FatHeader<'a>),
}

/// A fat header, every field as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FatHeader<'a> {
    /// The low 12 bits of the first word: format bits, MoreSects, InitLocals, and any others.
    pub flags: u16,
    /// The high nibble of the first word: header size in 4-byte units (normally 3).
    pub size_dwords: u8,
    /// MaxStack: the most items the evaluation stack holds at any point of the code.
    pub max_stack: u16,
    /// StandAloneSig token of the locals, or 0.
    pub local_sig: u32,
    /// Bytes between the 12 standard header bytes and the code, when `size_dwords` > 3.
    pub extra: &'a [u8],
}

/// What kind of handler a clause has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum ClauseKind {
    /// Flags 0 (COR_ILEXCEPTION_CLAUSE_EXCEPTION): a typed handler for exceptions of the class
    /// token's type.
    Catch,
    /// Flag 0x1: the filter block at the filter offset decides whether the handler runs.
    Filter,
    /// Flag 0x2: the handler runs whenever the try block is left.
    Finally,
    /// Flag 0x4: the handler runs when the try block is left by an exception.
    Fault,
    /// Flag bits that name no handler kind; kept, and reported by the verifier.
    Invalid,
}

/// One exception-handling clause, every field as stored (small clauses widened to `u32`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Clause {
    /// Flags (II.25.4.6): the handler kind in the low bits, see [`Clause::kind`].
    pub flags: u32,
    /// IL offset of the try block (from the first code byte).
    pub try_offset: u32,
    /// Length of the try block in bytes of code.
    pub try_length: u32,
    /// IL offset of the handler block.
    pub handler_offset: u32,
    /// Length of the handler block in bytes of code.
    pub handler_length: u32,
    /// Class token for a catch, filter offset for a filter; kept verbatim for finally and fault.
    pub class_or_filter: u32,
}

impl Clause {
    /// COR_ILEXCEPTION_CLAUSE_FILTER: a filter clause.
    pub const FLAG_FILTER: u32 = 0x1;
    /// COR_ILEXCEPTION_CLAUSE_FINALLY: a finally clause.
    pub const FLAG_FINALLY: u32 = 0x2;
    /// COR_ILEXCEPTION_CLAUSE_FAULT: a fault clause.
    pub const FLAG_FAULT: u32 = 0x4;

    /// The handler kind named by the low three flag bits (higher bits are not looked at);
    /// [`ClauseKind::Invalid`] for combinations that name none.
    pub fn kind(&self) -> ClauseKind {
        match self.flags & 0x7 {
            0 => ClauseKind::Catch,
            Self::FLAG_FILTER => ClauseKind::Filter,
            Self::FLAG_FINALLY => ClauseKind::Finally,
            Self::FLAG_FAULT => ClauseKind::Fault,
            _ => ClauseKind::Invalid,
        }
    }

    /// End of the try region (exclusive), without overflow.
    pub fn try_end(&self) -> u64 {
        self.try_offset as u64 + self.try_length as u64
    }

    /// End of the handler region (exclusive), without overflow.
    pub fn handler_end(&self) -> u64 {
        self.handler_offset as u64 + self.handler_length as u64
    }

    /// Whether the clause fits the small (12-byte) form.
    pub fn fits_small(&self) -> bool {
        self.flags <= 0xFFFF
            && self.try_offset <= 0xFFFF
            && self.try_length <= 0xFF
            && self.handler_offset <= 0xFFFF
            && self.handler_length <= 0xFF
    }
}

/// The content of an extra data section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SectionContent<'a> {
    /// An exception-handling table, plus any bytes after the last whole clause that DataSize
    /// still covers.
    Eh {
        /// The whole clauses DataSize covers, in stored order, read in place.
        clauses: ClauseTable<'a>,
        /// Bytes after the last whole clause (normally none).
        trailing: &'a [u8],
    },
    /// Any other kind (OptIL, unknown), kept as its bytes after the 4-byte section header.
    Raw(&'a [u8]),
}

/// One extra data section, every field as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Section<'a> {
    /// Bytes between the end of what precedes the section and its 4-byte-aligned start.
    pub padding: &'a [u8],
    /// The Kind byte, with its FatFormat and MoreSects bits.
    pub kind: u8,
    /// DataSize as stored (header included).
    pub data_size: u32,
    /// Bytes 2–3 of a small section header (reserved, normally zero).
    pub reserved: u16,
    /// What the section holds, after its 4-byte header.
    pub content: SectionContent<'a>,
}

impl<'a> Section<'a> {
    /// The FatFormat bit: 24-bit DataSize and 24-byte clauses.
    pub fn is_fat(&self) -> bool {
        self.kind & SECT_FAT_FORMAT != 0
    }

    /// The kind is an exception-handling table.
    pub fn is_eh(&self) -> bool {
        self.kind & SECT_KIND_MASK == SECT_EH_TABLE
    }

    /// The section's clauses; none for a raw section.
    pub fn clauses(&self) -> ClauseTable<'a> {
        match self.content {
            SectionContent::Eh { clauses, .. } => clauses,
            SectionContent::Raw(_) => ClauseTable::EMPTY,
        }
    }
}

/// A decoded method body borrowing the bytes it was parsed from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Body<'a> {
    /// The header as stored.
    pub header: Header<'a>,
    /// The IL: exactly the code size the header declares, not decoded.
    pub code: &'a [u8],
    /// The extra data sections in stored order (none for a tiny header, or without MoreSects).
    pub sections: Vec<Section<'a>>,
    /// Bytes the body occupies: header, code, padding and sections.
    size: usize,
}

impl<'a> Body<'a> {
    /// Number of bytes the body occupies from its first header byte (as
    /// System.Reflection.Metadata's `MethodBodyBlock.Size`).
    pub fn len(&self) -> usize {
        self.size
    }

    /// Whether the body occupies no bytes; never true of a parsed body (its header takes one).
    pub fn is_empty(&self) -> bool {
        self.size == 0
    }

    /// Whether the header is tiny.
    pub fn is_tiny(&self) -> bool {
        matches!(self.header, Header::Tiny)
    }

    /// The fat header, or `None` for a tiny one.
    pub fn fat(&self) -> Option<&FatHeader<'a>> {
        match &self.header {
            Header::Fat(h) => Some(h),
            Header::Tiny => None,
        }
    }

    /// MaxStack as declared (8 for tiny headers).
    pub fn max_stack(&self) -> u16 {
        self.fat().map_or(TINY_MAX_STACK, |h| h.max_stack)
    }

    /// The InitLocals flag: locals and `localloc` memory start zeroed (false for tiny headers).
    pub fn init_locals(&self) -> bool {
        self.fat().is_some_and(|h| h.flags & FLAG_INIT_LOCALS != 0)
    }

    /// The locals' StandAloneSig token, or 0.
    pub fn local_sig(&self) -> u32 {
        self.fat().map_or(0, |h| h.local_sig)
    }

    /// Bytes from the start of the body to the first code byte.
    pub fn header_len(&self) -> usize {
        match &self.header {
            Header::Tiny => 1,
            Header::Fat(h) => h.size_dwords as usize * 4,
        }
    }

    /// Every exception-handling clause, in table order across all EH sections.
    pub fn clauses(&self) -> impl Iterator<Item = Clause> + '_ {
        self.sections.iter().flat_map(|s| s.clauses())
    }

    /// The code's instructions, decoded lazily.
    pub fn instructions(&self) -> Instructions<'a> {
        Instructions::new(self.code)
    }

    /// Checks that the code decodes to whole instructions and returns their count.
    pub fn validate_code(&self) -> Result<usize, DecodeError> {
        crate::instr::count(self.code).map_err(|source| DecodeError::Code {
            offset: self.header_len() + source.offset() as usize,
            source,
        })
    }

    /// The parts a canonical encoding is made from.
    pub fn parts(&self) -> BodyParts<'_> {
        BodyParts {
            max_stack: self.max_stack(),
            init_locals: self.init_locals(),
            local_sig: self.local_sig(),
            code: self.code,
            clauses: self.clauses().collect(),
            raw_sections: self
                .sections
                .iter()
                .filter_map(|s| match s.content {
                    SectionContent::Raw(data) => Some(RawSection {
                        kind: s.kind & SECT_KIND_MASK,
                        data,
                    }),
                    SectionContent::Eh { .. } => None,
                })
                .collect(),
        }
    }
}
