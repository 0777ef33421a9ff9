//! The metadata root and its stream headers (II.24.2.1–II.24.2.2).

use super::error::ImageError;
use super::read::{le_u16, le_u32};

pub const METADATA_SIGNATURE: u32 = 0x424A_5342;

/// Longest stream name ECMA-335 allows, including the NUL.
const MAX_STREAM_NAME: usize = 32;

/// One stream header: name and the stream's place in the file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StreamHeader {
    pub name: String,
    /// File offset of the stream.
    pub offset: usize,
    pub size: usize,
}

/// File range of a located stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct StreamRange {
    pub offset: usize,
    pub size: usize,
}

/// The metadata root: version string, stream headers and the streams the reader uses.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MetadataRoot {
    /// File offset of the root (the BSJB signature).
    pub offset: usize,
    /// Metadata size declared by the CLI header. Streams are checked against the file rather
    /// than this, since some writers understate it.
    pub declared_size: usize,
    pub major_version: u16,
    pub minor_version: u16,
    pub version: String,
    pub flags: u16,
    pub streams: Vec<StreamHeader>,
    /// `#~` or `#-`; `tables_uncompressed` says which.
    pub tables: StreamRange,
    pub tables_uncompressed: bool,
    pub strings: StreamRange,
    pub user_strings: StreamRange,
    pub blob: StreamRange,
    pub guid: StreamRange,
}

impl MetadataRoot {
    /// Parses the root at file offset `offset`; `size` is the metadata size from the CLI header.
    pub fn parse(file: &[u8], offset: usize, size: usize) -> Result<Self, ImageError> {
        let trunc = |what, at, needed| ImageError::Truncated {
            what,
            offset: at,
            needed,
        };
        let signature = le_u32(file, offset).ok_or(trunc("metadata root", offset, 16))?;
        if signature != METADATA_SIGNATURE {
            return Err(ImageError::BadMetadataSignature {
                offset,
                found: signature,
            });
        }
        let major_version = le_u16(file, offset + 4).ok_or(trunc("metadata root", offset, 16))?;
        let minor_version = le_u16(file, offset + 6).ok_or(trunc("metadata root", offset, 16))?;
        let version_len =
            le_u32(file, offset + 12).ok_or(trunc("metadata root", offset, 16))? as usize;
        let version_at = offset + 16;
        if version_len > 255 {
            return Err(ImageError::BadMetadata {
                offset: offset + 12,
                reason: "version string longer than 255 bytes",
            });
        }
        let version_bytes = file.get(version_at..version_at + version_len).ok_or(trunc(
            "metadata version string",
            version_at,
            version_len,
        ))?;
        let end = version_bytes
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(version_bytes.len());
        let version = String::from_utf8_lossy(&version_bytes[..end]).into_owned();
        // The length field is meant to be a multiple of 4 already; round up to be safe.
        let mut pos = version_at + version_len.next_multiple_of(4);
        let flags = le_u16(file, pos).ok_or(trunc("metadata root flags", pos, 4))?;
        let count = le_u16(file, pos + 2).ok_or(trunc("metadata root flags", pos, 4))?;
        pos += 4;

        // Each header is at least 12 bytes: bound the count before reserving.
        let remaining = file.len().saturating_sub(pos);
        if usize::from(count) * 12 > remaining {
            return Err(trunc("stream headers", pos, usize::from(count) * 12));
        }
        let mut streams = Vec::with_capacity(usize::from(count));
        for _ in 0..count {
            let rel = le_u32(file, pos).ok_or(trunc("stream header", pos, 8))? as usize;
            let size = le_u32(file, pos + 4).ok_or(trunc("stream header", pos, 8))? as usize;
            let name_at = pos + 8;
            let window = file.get(name_at..).unwrap_or(&[]);
            let window = &window[..window.len().min(MAX_STREAM_NAME)];
            let name_len = window
                .iter()
                .position(|&b| b == 0)
                .ok_or(ImageError::BadMetadata {
                    offset: name_at,
                    reason: "stream name without NUL within 32 bytes",
                })?;
            let name = String::from_utf8_lossy(&window[..name_len]).into_owned();
            pos = name_at + (name_len + 1).next_multiple_of(4);
            let abs = offset.checked_add(rel);
            let fits = abs
                .and_then(|a| a.checked_add(size))
                .is_some_and(|e| e <= file.len());
            if !fits {
                return Err(ImageError::StreamOutOfBounds {
                    name,
                    offset: offset.saturating_add(rel),
                    size,
                });
            }
            streams.push(StreamHeader {
                name,
                offset: offset + rel,
                size,
            });
        }

        // The first stream of each name wins.
        let find = |names: &[&str]| {
            streams
                .iter()
                .find(|s| names.contains(&s.name.as_str()))
                .map(|s| {
                    (
                        s.name.clone(),
                        StreamRange {
                            offset: s.offset,
                            size: s.size,
                        },
                    )
                })
        };
        let (tables_name, tables) = find(&["#~", "#-"]).ok_or(ImageError::MissingStream("#~"))?;
        let range = |name: &str| find(&[name]).map(|(_, r)| r).unwrap_or_default();
        Ok(MetadataRoot {
            offset,
            declared_size: size,
            major_version,
            minor_version,
            version,
            flags,
            tables,
            tables_uncompressed: tables_name == "#-",
            strings: range("#Strings"),
            user_strings: range("#US"),
            blob: range("#Blob"),
            guid: range("#GUID"),
            streams,
        })
    }
}
