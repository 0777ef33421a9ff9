//! The metadata root and its stream headers (II.24.2.1–II.24.2.2).

use super::error::ImageError;
use super::read::{le_u16, le_u32};

/// The metadata root's signature (II.24.2.1): the bytes `BSJB` read as a little-endian `u32`.
pub const METADATA_SIGNATURE: u32 = 0x424A_5342;

/// Longest stream name ECMA-335 allows, including the NUL.
const MAX_STREAM_NAME: usize = 32;

/// The stream names ECMA-335 (II.24.2.2) and the runtimes define, for error values that
/// cannot hold the file's own bytes.
fn known_stream_name(name: &str) -> &'static str {
    [
        "#~", "#-", "#Strings", "#US", "#Blob", "#GUID", "#Pdb", "#JTD",
    ]
    .into_iter()
    .find(|known| *known == name)
    .unwrap_or("of another name")
}

/// One stream header: name and the stream's place in the file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StreamHeader {
    /// The name as stored, up to its NUL (lossily UTF-8), e.g. `#~` or `#Strings`.
    pub name: String,
    /// File offset of the stream.
    pub offset: usize,
    /// Size of the stream in bytes; `offset + size` lies within the file (checked).
    pub size: usize,
}

/// File range of a located stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct StreamRange {
    /// File offset of the stream (0 with `size` 0 when the stream is absent).
    pub offset: usize,
    /// Size of the stream in bytes.
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
    /// MajorVersion (ECMA-335 says 1).
    pub major_version: u16,
    /// MinorVersion (ECMA-335 says 1).
    pub minor_version: u16,
    /// The version string up to its first NUL, e.g. `v4.0.30319` (lossily UTF-8).
    pub version: String,
    /// Flags: reserved, 0 in ECMA-335.
    pub flags: u16,
    /// Every stream header, in stored order, duplicates and unknown names included.
    pub streams: Vec<StreamHeader>,
    /// `#~` or `#-`; `tables_uncompressed` says which.
    pub tables: StreamRange,
    /// The table stream is `#-` (uncompressed, may hold Ptr and ENC tables).
    pub tables_uncompressed: bool,
    /// The `#Strings` heap (the first stream of that name).
    pub strings: StreamRange,
    /// The `#US` heap.
    pub user_strings: StreamRange,
    /// The `#Blob` heap.
    pub blob: StreamRange,
    /// The `#GUID` heap.
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
                    name: known_stream_name(&name),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A root at offset 0 with version "v4.0" and the given streams (relative offset, size, name).
    fn root(streams: &[(u32, u32, &str)]) -> Vec<u8> {
        let mut v = METADATA_SIGNATURE.to_le_bytes().to_vec();
        v.extend_from_slice(&[1, 0, 1, 0, 0, 0, 0, 0, 8, 0, 0, 0]);
        v.extend_from_slice(b"v4.0\0\0\0\0");
        v.extend_from_slice(&[0, 0]);
        v.extend_from_slice(&(streams.len() as u16).to_le_bytes());
        for &(off, size, name) in streams {
            v.extend_from_slice(&off.to_le_bytes());
            v.extend_from_slice(&size.to_le_bytes());
            v.extend_from_slice(name.as_bytes());
            v.push(0);
            while !v.len().is_multiple_of(4) {
                v.push(0);
            }
        }
        v.resize(0x100, 0);
        v
    }

    #[test]
    fn streams_are_located() {
        let b = root(&[
            (0x80, 0x20, "#~"),
            (0xA0, 0x10, "#Strings"),
            (0xB0, 4, "#US"),
            (0xC0, 0, "#GUID"),
            (0xC0, 8, "#Blob"),
        ]);
        let r = MetadataRoot::parse(&b, 0, b.len()).unwrap();
        assert_eq!(r.version, "v4.0");
        assert_eq!(r.streams.len(), 5);
        assert!(!r.tables_uncompressed);
        assert_eq!(
            r.tables,
            StreamRange {
                offset: 0x80,
                size: 0x20
            }
        );
        assert_eq!(
            r.strings,
            StreamRange {
                offset: 0xA0,
                size: 0x10
            }
        );
        assert_eq!(
            r.blob,
            StreamRange {
                offset: 0xC0,
                size: 8
            }
        );
        let enc = root(&[(0x80, 0x20, "#-")]);
        assert!(
            MetadataRoot::parse(&enc, 0, enc.len())
                .unwrap()
                .tables_uncompressed
        );
    }

    #[test]
    fn bad_roots_are_errors() {
        let mut b = root(&[(0x80, 0x20, "#~")]);
        assert!(matches!(
            MetadataRoot::parse(&b[..20], 0, 20),
            Err(ImageError::Truncated { .. })
        ));
        let no_tables = root(&[(0x80, 0x20, "#Strings")]);
        assert!(matches!(
            MetadataRoot::parse(&no_tables, 0, 0x100),
            Err(ImageError::MissingStream(_))
        ));
        let outside = root(&[(0xF0, 0x20, "#~")]);
        assert!(matches!(
            MetadataRoot::parse(&outside, 0, 0x100),
            Err(ImageError::StreamOutOfBounds { .. })
        ));
        let huge = root(&[(0xFFFF_FFF0, 0x20, "#~")]);
        assert!(MetadataRoot::parse(&huge, 0, 0x100).is_err());
        // Thousands of claimed streams in a short root.
        b[26..28].copy_from_slice(&0xFFFFu16.to_le_bytes());
        assert!(matches!(
            MetadataRoot::parse(&b, 0, 0x100),
            Err(ImageError::Truncated { .. })
        ));
        b[0] = b'X';
        assert!(matches!(
            MetadataRoot::parse(&b, 0, 0x100),
            Err(ImageError::BadMetadataSignature { .. })
        ));
        // A stream name with no NUL in 32 bytes.
        let mut long = root(&[]);
        long[26] = 1;
        long[36..80].fill(b'A');
        assert!(matches!(
            MetadataRoot::parse(&long, 0, 0x100),
            Err(ImageError::BadMetadata { .. })
        ));
    }
}
