//! Heaps that grow: each keeps the image's own bytes as they are (so every existing index stays
//! valid) and appends new entries after them, reusing an entry that already holds the same
//! value (II.24.2.3–II.24.2.5).

use super::EmitError;
use std::collections::HashMap;

/// A heap of the image plus what is appended to it.
#[derive(Debug)]
pub(super) struct GrowingHeap<'a> {
    /// The stream as stored (padding included).
    original: &'a [u8],
    appended: Vec<u8>,
    /// Entry contents → index, for reuse; built on the first append.
    index: Option<HashMap<Vec<u8>, u32>>,
    kind: HeapKind,
}

/// How a heap's entries are delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum HeapKind {
    /// `#Strings`: UTF-8 ending with a NUL.
    Strings,
    /// `#Blob` and `#US`: a compressed length, then the bytes.
    LengthPrefixed,
}

/// The largest index a `#US` entry may have: `ldstr` tokens keep 24 bits of offset.
pub(super) const MAX_USER_STRING_INDEX: usize = 0x00FF_FFFF;

impl<'a> GrowingHeap<'a> {
    pub(super) fn new(original: &'a [u8], kind: HeapKind) -> Self {
        GrowingHeap {
            original,
            appended: Vec::new(),
            index: None,
            kind,
        }
    }

    /// Whether anything was appended.
    pub(super) fn grew(&self) -> bool {
        !self.appended.is_empty()
    }

    /// The heap's size with what was appended (before padding).
    pub(super) fn len(&self) -> usize {
        self.original.len() + self.appended.len()
    }

    /// Writes the whole heap, padded with zeros to a multiple of 4.
    pub(super) fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.original);
        out.extend_from_slice(&self.appended);
        out.resize(out.len().next_multiple_of(4), 0);
    }

    /// The content of the length-prefixed entry at `index`, original or appended.
    pub(super) fn entry(&self, index: u32) -> Option<&[u8]> {
        let index = index as usize;
        let (data, at) = if index < self.original.len() {
            (self.original, index)
        } else {
            (&self.appended[..], index - self.original.len())
        };
        let (len, used) = crate::image::sig::decompress_u32(data.get(at..)?).ok()?;
        data.get(at + used..at + used + len as usize)
    }

    /// Every entry of the original heap by its contents (the first index holding it).
    fn scan(&self) -> HashMap<Vec<u8>, u32> {
        let mut map = HashMap::new();
        let data = self.original;
        let mut at = 0usize;
        match self.kind {
            HeapKind::Strings => {
                while at < data.len() {
                    let Some(len) = data[at..].iter().position(|&b| b == 0) else {
                        break;
                    };
                    map.entry(data[at..at + len].to_vec()).or_insert(at as u32);
                    at += len + 1;
                }
            }
            HeapKind::LengthPrefixed => {
                while at < data.len() {
                    let Ok((len, used)) = crate::image::sig::decompress_u32(&data[at..]) else {
                        break;
                    };
                    let start = at + used;
                    let Some(entry) = data.get(start..start + len as usize) else {
                        break;
                    };
                    map.entry(entry.to_vec()).or_insert(at as u32);
                    at = start + len as usize;
                }
            }
        }
        map
    }

    /// The index of an entry holding `content`, appending one when none does.
    pub(super) fn intern(&mut self, content: &[u8]) -> Result<u32, EmitError> {
        if self.index.is_none() {
            self.index = Some(self.scan());
        }
        if let Some(&i) = self.index.as_ref().and_then(|m| m.get(content)) {
            return Ok(i);
        }
        let at = self.len();
        let index = u32::try_from(at).map_err(|_| EmitError::HeapFull { heap: self.name() })?;
        match self.kind {
            HeapKind::Strings => {
                if content.contains(&0) {
                    return Err(EmitError::NulInString);
                }
                self.appended.extend_from_slice(content);
                self.appended.push(0);
            }
            HeapKind::LengthPrefixed => {
                let len = u32::try_from(content.len())
                    .ok()
                    .and_then(crate::image::sig::compress_u32)
                    .ok_or(EmitError::BlobTooLong { len: content.len() })?;
                self.appended.extend_from_slice(&len);
                self.appended.extend_from_slice(content);
            }
        }
        if let Some(m) = self.index.as_mut() {
            m.insert(content.to_vec(), index);
        }
        Ok(index)
    }

    fn name(&self) -> &'static str {
        match self.kind {
            HeapKind::Strings => "#Strings",
            HeapKind::LengthPrefixed => "#Blob/#US",
        }
    }
}

/// The `#US` form of a string: UTF-16LE code units and a final byte that is 1 when any unit
/// needs more than 8 bits or is one of the characters II.24.2.4 lists, else 0.
pub(super) fn user_string_bytes(s: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len() * 2 + 1);
    let mut special = false;
    for unit in s.encode_utf16() {
        out.extend_from_slice(&unit.to_le_bytes());
        special |= unit > 0x7F || matches!(unit, 0x01..=0x08 | 0x0E..=0x1F | 0x27 | 0x2D | 0x7F);
    }
    out.push(u8::from(special));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_reused_or_appended_after_the_original() {
        let original = b"\0Object\0System\0\0";
        let mut h = GrowingHeap::new(original, HeapKind::Strings);
        assert_eq!(h.intern(b"System").unwrap(), 8);
        assert!(!h.grew());
        let probe = h.intern(b"Probe").unwrap();
        assert_eq!(probe as usize, original.len());
        assert_eq!(h.intern(b"Probe").unwrap(), probe);
        let mut out = Vec::new();
        h.write(&mut out);
        assert_eq!(&out[..original.len()], original);
        assert_eq!(&out[original.len()..original.len() + 6], b"Probe\0");
        assert_eq!(out.len() % 4, 0);
        assert!(matches!(h.intern(b"a\0b"), Err(EmitError::NulInString)));
    }

    #[test]
    fn blobs_carry_their_compressed_length() {
        let original = [0u8, 3, 0x20, 0x00, 0x01];
        let mut h = GrowingHeap::new(&original, HeapKind::LengthPrefixed);
        assert_eq!(h.intern(&[0x20, 0x00, 0x01]).unwrap(), 1);
        let long = vec![7u8; 200];
        let at = h.intern(&long).unwrap() as usize;
        let mut out = Vec::new();
        h.write(&mut out);
        assert_eq!(&out[at..at + 2], &[0x80, 200]);
        assert_eq!(&out[at + 2..at + 202], &long[..]);
    }

    #[test]
    fn user_strings_flag_wide_and_special_characters() {
        assert_eq!(user_string_bytes("Ab"), vec![b'A', 0, b'b', 0, 0]);
        assert_eq!(*user_string_bytes("é").last().unwrap(), 1);
        assert_eq!(*user_string_bytes("it's").last().unwrap(), 1);
    }
}
