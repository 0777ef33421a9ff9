//! Body structure decoding. Every length field is checked against the bytes that remain before it
//! is used; nothing is allocated beyond a small multiple of the input's size.

use super::*;
use crate::instr::InstrError;

/// Why a body could not be decoded. Every variant names the byte offset from the start of the
/// body.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// No bytes at all.
    #[error("byte 0: empty input, no method header")]
    Empty,
    /// The low two bits of the first byte are neither `10` (tiny) nor `11` (fat).
    #[error("byte 0: header byte {byte:#04x} is neither tiny (..10) nor fat (..11)")]
    BadFormat {
        /// The first byte.
        byte: u8,
    },
    /// Fewer bytes than the fat header needs: 12, or the size its size nibble declares.
    #[error("byte 0: fat header needs {needed} bytes, only {available} remain")]
    HeaderTruncated {
        /// Bytes the header needs.
        needed: usize,
        /// Bytes given.
        available: usize,
    },
    /// The fat header's size nibble is below 3, too small for its own fields.
    #[error("byte 1: fat header size {size_dwords} dwords is smaller than the 3 its fields need")]
    FatHeaderTooSmall {
        /// The size nibble, in 4-byte units.
        size_dwords: u8,
    },
    /// The code size runs past the bytes given.
    #[error("byte {offset}: code size {code_size} runs past the {available} bytes that remain")]
    CodeTruncated {
        /// Offset of the first code byte (the header's length).
        offset: usize,
        /// The code size the header declares.
        code_size: u32,
        /// Bytes given after the header.
        available: usize,
    },
    /// The bytes end inside the padding before a section or inside its 4-byte header.
    #[error("byte {offset}: section header or padding truncated ({available} bytes remain)")]
    SectionHeaderTruncated {
        /// Offset where the padding starts (the end of what precedes the section).
        offset: usize,
        /// Bytes given from `offset` on.
        available: usize,
    },
    /// A section's DataSize is below 4, the size of its own header.
    #[error("byte {offset}: section DataSize {data_size} is smaller than its 4-byte header")]
    SectionDataSizeTooSmall {
        /// Offset of the section header (4-byte aligned).
        offset: usize,
        /// DataSize as stored.
        data_size: u32,
    },
    /// A section's DataSize runs past the bytes given.
    #[error(
        "byte {offset}: section DataSize {data_size} runs past the {available} bytes that remain"
    )]
    SectionTruncated {
        /// Offset of the section header (4-byte aligned).
        offset: usize,
        /// DataSize as stored, header included.
        data_size: u32,
        /// Bytes given from `offset` on.
        available: usize,
    },
    /// The code does not decode to whole, known instructions ([`Body::validate_code`]).
    #[error("byte {offset}: {source}")]
    Code {
        /// Offset of the instruction at fault from the start of the body (not of the code).
        offset: usize,
        /// What the instruction decoder found (its offset is an IL offset).
        source: InstrError,
    },
    /// The image reader found a fat header at an RVA that is not 4-byte aligned (II.25.4.3);
    /// [`Body::parse`] itself never returns this.
    #[error("fat method header at RVA {rva:#x} is not 4-byte aligned")]
    MisalignedFatHeader {
        /// The method's RVA.
        rva: u32,
    },
}

impl DecodeError {
    /// Byte offset of the fault from the start of the body.
    pub fn offset(&self) -> usize {
        match *self {
            DecodeError::Empty
            | DecodeError::BadFormat { .. }
            | DecodeError::HeaderTruncated { .. }
            | DecodeError::MisalignedFatHeader { .. } => 0,
            DecodeError::FatHeaderTooSmall { .. } => 1,
            DecodeError::CodeTruncated { offset, .. }
            | DecodeError::SectionHeaderTruncated { offset, .. }
            | DecodeError::SectionDataSizeTooSmall { offset, .. }
            | DecodeError::SectionTruncated { offset, .. }
            | DecodeError::Code { offset, .. } => offset,
        }
    }
}

#[inline]
fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

#[inline]
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

impl<'a> Body<'a> {
    /// Reads a body's structure from `bytes` (which may run past the body's end). The code is
    /// borrowed, not decoded: see [`Body::validate_code`] and [`Body::decode`].
    ///
    /// `bytes` must start at a 4-byte boundary of the image for section alignment to be right;
    /// the image reader checks that for fat headers.
    pub fn parse(bytes: &'a [u8]) -> Result<Body<'a>, DecodeError> {
        let &first = bytes.first().ok_or(DecodeError::Empty)?;
        match first & 0x3 {
            0x2 => {
                let code_size = (first >> 2) as usize;
                let code = bytes
                    .get(1..1 + code_size)
                    .ok_or(DecodeError::CodeTruncated {
                        offset: 1,
                        code_size: code_size as u32,
                        available: bytes.len() - 1,
                    })?;
                Ok(Body {
                    header: Header::Tiny,
                    code,
                    sections: Vec::new(),
                    size: 1 + code_size,
                })
            }
            0x3 => Self::parse_fat(bytes),
            _ => Err(DecodeError::BadFormat { byte: first }),
        }
    }

    /// [`Body::parse`], then checks that the code decodes to whole, known instructions.
    pub fn decode(bytes: &'a [u8]) -> Result<Body<'a>, DecodeError> {
        let body = Self::parse(bytes)?;
        body.validate_code()?;
        Ok(body)
    }

    fn parse_fat(bytes: &'a [u8]) -> Result<Body<'a>, DecodeError> {
        if bytes.len() < FAT_HEADER_SIZE {
            return Err(DecodeError::HeaderTruncated {
                needed: FAT_HEADER_SIZE,
                available: bytes.len(),
            });
        }
        let word = u16_at(bytes, 0);
        let size_dwords = (word >> 12) as u8;
        if (size_dwords as usize) * 4 < FAT_HEADER_SIZE {
            return Err(DecodeError::FatHeaderTooSmall { size_dwords });
        }
        let header_len = size_dwords as usize * 4;
        let extra = bytes
            .get(FAT_HEADER_SIZE..header_len)
            .ok_or(DecodeError::HeaderTruncated {
                needed: header_len,
                available: bytes.len(),
            })?;
        let flags = word & 0x0FFF;
        let code_size = u32_at(bytes, 4);
        let available = bytes.len() - header_len;
        if code_size as usize > available {
            return Err(DecodeError::CodeTruncated {
                offset: header_len,
                code_size,
                available,
            });
        }
        let code_end = header_len + code_size as usize;
        let header = Header::Fat(FatHeader {
            flags,
            size_dwords,
            max_stack: u16_at(bytes, 2),
            local_sig: u32_at(bytes, 8),
            extra,
        });
        let mut body = Body {
            header,
            code: &bytes[header_len..code_end],
            sections: Vec::new(),
            size: code_end,
        };
        if flags & FLAG_MORE_SECTS != 0 {
            body.size = parse_sections(bytes, code_end, &mut body.sections)?;
        }
        Ok(body)
    }
}

/// Parses the chain of sections starting at the first 4-byte boundary at or after `pos`; returns
/// the offset just past the last one.
fn parse_sections<'a>(
    bytes: &'a [u8],
    mut pos: usize,
    out: &mut Vec<Section<'a>>,
) -> Result<usize, DecodeError> {
    loop {
        let start = pos.next_multiple_of(4);
        let header = bytes
            .get(pos..start + 4)
            .ok_or(DecodeError::SectionHeaderTruncated {
                offset: pos,
                available: bytes.len().saturating_sub(pos),
            })?;
        let padding = &header[..start - pos];
        let kind = bytes[start];
        let fat = kind & SECT_FAT_FORMAT != 0;
        let (data_size, reserved) = if fat {
            (u32_at(bytes, start) >> 8, 0)
        } else {
            (bytes[start + 1] as u32, u16_at(bytes, start + 2))
        };
        if data_size < 4 {
            return Err(DecodeError::SectionDataSizeTooSmall {
                offset: start,
                data_size,
            });
        }
        let end = start + data_size as usize;
        let data = bytes
            .get(start + 4..end)
            .ok_or(DecodeError::SectionTruncated {
                offset: start,
                data_size,
                available: bytes.len() - start,
            })?;
        let content = if kind & SECT_KIND_MASK == SECT_EH_TABLE {
            let (clauses, trailing) = ClauseTable::split(data, fat);
            SectionContent::Eh { clauses, trailing }
        } else {
            SectionContent::Raw(data)
        };
        out.push(Section {
            padding,
            kind,
            data_size,
            reserved,
            content,
        });
        pos = end;
        if kind & SECT_MORE_SECTS == 0 {
            return Ok(pos);
        }
    }
}
