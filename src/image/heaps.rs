//! The metadata heaps (II.24.2.2–II.24.2.5): `#Strings`, `#Blob`, `#US` and `#GUID`.
//! Each view borrows the heap's bytes and knows its file offset for error messages.

use super::error::ImageError;
use super::sig::decompress_u32;

/// `#Strings`: UTF-8, NUL-terminated, indexed by byte offset.
#[derive(Debug, Clone, Copy)]
pub struct StringHeap<'a> {
    /// The heap's bytes (empty when the stream is absent).
    pub data: &'a [u8],
    /// File offset of the heap.
    pub offset: usize,
}

impl<'a> StringHeap<'a> {
    /// The bytes of the string at `index`, without the terminating NUL.
    pub fn get_bytes(&self, index: u32) -> Result<&'a [u8], ImageError> {
        self.entry(index).map(|(bytes, _)| bytes)
    }

    /// The bytes of the string at `index` and whether they are all ASCII.
    fn entry(&self, index: u32) -> Result<(&'a [u8], bool), ImageError> {
        // Errors are built only on failure: `ImageError` has drop glue (see `length_prefixed`).
        let start = index as usize;
        let Some(rest) = self.data.get(start..).filter(|r| !r.is_empty()) else {
            return Err(ImageError::HeapIndex {
                heap: "#Strings",
                index,
                heap_offset: self.offset,
                heap_size: self.data.len(),
            });
        };
        let Some((len, ascii)) = first_nul(rest) else {
            return Err(ImageError::BadHeapEntry {
                heap: "#Strings",
                offset: self.offset + start,
                reason: "string runs to the end of the heap without a NUL",
            });
        };
        Ok((&rest[..len], ascii))
    }

    /// The string at `index`. Index 0 is the empty string when the heap is empty too.
    pub fn get(&self, index: u32) -> Result<&'a str, ImageError> {
        if index == 0 && self.data.is_empty() {
            return Ok("");
        }
        let (bytes, ascii) = self.entry(index)?;
        if ascii {
            // SAFETY: every byte is below 0x80 (checked by `first_nul` as it searched), and
            // ASCII is valid UTF-8. Names are read by the hundred thousand, and the general
            // check costs several times the search on short strings.
            return Ok(unsafe { std::str::from_utf8_unchecked(bytes) });
        }
        std::str::from_utf8(bytes).map_err(|_| ImageError::BadHeapEntry {
            heap: "#Strings",
            offset: self.offset + index as usize,
            reason: "string is not UTF-8",
        })
    }
}

/// Where the first NUL of `bytes` is, and whether every byte before it is ASCII: a word at a
/// time over the first 32 bytes (most names are shorter, and a `memchr` call costs more than
/// its search there), then by `memchr`.
fn first_nul(bytes: &[u8]) -> Option<(usize, bool)> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let mut at = 0;
    let mut high = 0;
    while at < 32 {
        let Some(w) = super::read::le_u64(bytes, at) else {
            break;
        };
        // The lowest flagged byte is the first zero one (a borrow only flags bytes above it).
        let zero = w.wrapping_sub(ONES) & !w & HIGH;
        if zero != 0 {
            let first = zero.trailing_zeros() as usize / 8;
            // The bytes below the NUL (little-endian: the low ones).
            let below = (1u64 << (first * 8)) - 1;
            return Some((at + first, (high | (w & below)) & HIGH == 0));
        }
        high |= w;
        at += 8;
    }
    let rest = bytes.get(at..)?;
    let n = memchr::memchr(0, rest)?;
    Some((at + n, high & HIGH == 0 && rest[..n].is_ascii()))
}

/// Shared by `#Blob` and `#US`: entries are a compressed length followed by that many bytes.
fn length_prefixed<'a>(
    heap: &'static str,
    data: &'a [u8],
    offset: usize,
    index: u32,
) -> Result<&'a [u8], ImageError> {
    // Hot (every signature and `ldstr` check): errors are built only on failure, since an
    // eager `ok_or` would also run `ImageError`'s drop glue on every success.
    let start = index as usize;
    let Some(rest) = data.get(start..).filter(|r| !r.is_empty()) else {
        return Err(ImageError::HeapIndex {
            heap,
            index,
            heap_offset: offset,
            heap_size: data.len(),
        });
    };
    let (len, used) = decompress_u32(rest).map_err(|_| ImageError::BadHeapEntry {
        heap,
        offset: offset + start,
        reason: "invalid or truncated length prefix",
    })?;
    match rest.get(used..used + len as usize) {
        Some(entry) => Ok(entry),
        None => Err(ImageError::BadHeapEntry {
            heap,
            offset: offset + start,
            reason: "entry runs past the end of the heap",
        }),
    }
}

/// `#Blob`: signatures, constants, custom-attribute values.
#[derive(Debug, Clone, Copy)]
pub struct BlobHeap<'a> {
    /// The heap's bytes (empty when the stream is absent).
    pub data: &'a [u8],
    /// File offset of the heap.
    pub offset: usize,
}

impl<'a> BlobHeap<'a> {
    /// The blob at `index`. Index 0 is the empty blob even when the heap is absent.
    pub fn get(&self, index: u32) -> Result<&'a [u8], ImageError> {
        if index == 0 && self.data.is_empty() {
            return Ok(&[]);
        }
        length_prefixed("#Blob", self.data, self.offset, index)
    }

    /// File offset of the blob's first content byte (after the length prefix).
    pub fn content_offset(&self, index: u32) -> usize {
        let start = index as usize;
        let used = self
            .data
            .get(start..)
            .and_then(|r| decompress_u32(r).ok())
            .map_or(0, |(_, used)| used);
        self.offset + start + used
    }
}

/// `#US`: the string literals of `ldstr`, UTF-16LE plus one trailing flag byte.
#[derive(Debug, Clone, Copy)]
pub struct UserStringHeap<'a> {
    /// The heap's bytes (empty when the stream is absent).
    pub data: &'a [u8],
    /// File offset of the heap.
    pub offset: usize,
}

impl<'a> UserStringHeap<'a> {
    /// Raw entry at `index`: UTF-16LE code units followed by the flag byte (when the length is odd).
    pub fn get_raw(&self, index: u32) -> Result<&'a [u8], ImageError> {
        length_prefixed("#US", self.data, self.offset, index)
    }

    /// Whether `index` starts an entry lying wholly inside the heap.
    pub fn contains(&self, index: u32) -> bool {
        self.get_raw(index).is_ok()
    }

    /// Decodes the string at `index` (unpaired surrogates become U+FFFD).
    pub fn get(&self, index: u32) -> Result<String, ImageError> {
        let raw = self.get_raw(index)?;
        let units = raw
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]));
        Ok(char::decode_utf16(units)
            .map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER))
            .collect())
    }
}

/// `#GUID`: 16-byte entries, indexed from 1.
#[derive(Debug, Clone, Copy)]
pub struct GuidHeap<'a> {
    /// The heap's bytes (empty when the stream is absent).
    pub data: &'a [u8],
    /// File offset of the heap.
    pub offset: usize,
}

impl<'a> GuidHeap<'a> {
    /// The GUID at 1-based `index`; `None` for index 0 (no GUID).
    pub fn get(&self, index: u32) -> Result<Option<[u8; 16]>, ImageError> {
        if index == 0 {
            return Ok(None);
        }
        let bytes = (index as usize - 1)
            .checked_mul(16)
            .and_then(|start| self.data.get(start..start.checked_add(16)?))
            .ok_or(ImageError::HeapIndex {
                heap: "#GUID",
                index,
                heap_offset: self.offset,
                heap_size: self.data.len(),
            })?;
        let mut g = [0u8; 16];
        g.copy_from_slice(bytes);
        Ok(Some(g))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The word-wise search finds the first NUL wherever it lies (inside the first words,
    /// past them, in a short tail), with other NULs and bytes with borrows around it, and
    /// none in a slice without one; it says whether the bytes before it are ASCII, whatever
    /// follows.
    #[test]
    fn first_nul_is_the_first_zero_byte() {
        for len in 0..48usize {
            for fill in [b'a', 0x01, 0x80, 0xFF] {
                let mut bytes = vec![fill; len];
                assert_eq!(first_nul(&bytes), None, "length {len}");
                for at in 0..len {
                    bytes[at] = 0;
                    let ascii = fill < 0x80 || at == 0;
                    assert_eq!(
                        first_nul(&bytes),
                        Some((at, ascii)),
                        "length {len}, NUL at {at}"
                    );
                    // A second NUL after the first changes nothing.
                    if at + 1 < len {
                        bytes[at + 1] = 0;
                        assert_eq!(first_nul(&bytes), Some((at, ascii)));
                        bytes[at + 1] = fill;
                    }
                    // One byte above ASCII before the NUL is seen; after it, it is not.
                    if fill < 0x80 {
                        for high in 0..len {
                            if high != at {
                                bytes[high] = 0xC3;
                                assert_eq!(first_nul(&bytes), Some((at, high > at)));
                                bytes[high] = fill;
                            }
                        }
                    }
                    bytes[at] = fill;
                }
            }
        }
    }

    #[test]
    fn strings() {
        let h = StringHeap {
            data: b"\0abc\0d\xff\0tail",
            offset: 100,
        };
        assert_eq!(h.get(0).unwrap(), "");
        assert_eq!(h.get(1).unwrap(), "abc");
        assert_eq!(h.get(2).unwrap(), "bc");
        assert!(matches!(
            h.get(5),
            Err(ImageError::BadHeapEntry { offset: 105, .. })
        ));
        assert!(matches!(h.get(8), Err(ImageError::BadHeapEntry { .. })));
        assert!(matches!(h.get(13), Err(ImageError::HeapIndex { .. })));
        assert!(h.get(u32::MAX).is_err());
    }

    #[test]
    fn blobs() {
        let h = BlobHeap {
            data: &[0, 3, 1, 2, 3, 0x81, 0x00, 5],
            offset: 0,
        };
        assert_eq!(h.get(0).unwrap(), &[] as &[u8]);
        assert_eq!(h.get(1).unwrap(), &[1, 2, 3]);
        assert_eq!(h.content_offset(1), 2);
        assert!(h.get(5).is_err()); // 0x100 bytes claimed, 1 present
        assert!(h.get(8).is_err());
        let bad = BlobHeap {
            data: &[0xE0, 0, 0, 0],
            offset: 0,
        };
        assert!(bad.get(0).is_err());
    }

    #[test]
    fn user_strings_and_guids() {
        let us = UserStringHeap {
            data: &[0, 5, b'h', 0, b'i', 0, 0],
            offset: 0,
        };
        assert_eq!(us.get(1).unwrap(), "hi");
        assert!(us.contains(1) && us.contains(0) && !us.contains(7) && !us.contains(2));
        let g = GuidHeap {
            data: &[7; 16],
            offset: 0,
        };
        assert_eq!(g.get(0).unwrap(), None);
        assert_eq!(g.get(1).unwrap(), Some([7; 16]));
        assert!(g.get(2).is_err());
        assert!(g.get(u32::MAX).is_err());
    }
}
