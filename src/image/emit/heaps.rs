//! Heaps that grow: each keeps the image's own bytes as they are (so every existing index stays
//! valid) and appends new entries after them, reusing an entry that already holds the same
//! value (II.24.2.3–II.24.2.5).

use super::EmitError;
use crate::verify::types::fx::FxHasher;
use std::hash::Hasher;

/// A heap of the image plus what is appended to it.
#[derive(Debug)]
pub(super) struct GrowingHeap<'a> {
    /// The stream as stored (padding included).
    original: &'a [u8],
    appended: Vec<u8>,
    /// Entries by content, for reuse; built on the first lookup.
    index: Option<EntryIndex>,
    kind: HeapKind,
}

/// Entries by content: an open-addressing table of heap indices, each slot with the hash of
/// its entry's content. The content itself stays in the heap, so finding or adding an entry
/// allocates nothing (but when the table doubles).
#[derive(Debug)]
struct EntryIndex {
    /// `(hash, index + 1)` per slot; a second value of 0 marks it empty.
    slots: Vec<(u32, u32)>,
    len: usize,
}

impl EntryIndex {
    fn with_capacity(entries: usize) -> Self {
        EntryIndex {
            slots: vec![(0, 0); (entries * 2).next_power_of_two().max(64)],
            len: 0,
        }
    }

    /// The table with room for `more` entries beyond those it holds.
    fn reserved(self, more: usize) -> EntryIndex {
        if (self.len + more) * 2 <= self.slots.len() {
            return self;
        }
        let mut bigger = EntryIndex::with_capacity(self.len + more);
        for &(h, slot) in &self.slots {
            if slot != 0 {
                bigger.insert(h, slot - 1);
            }
        }
        bigger
    }

    /// The heap index of an entry whose content hashes to `hash` and for which `same` holds.
    fn find(&self, hash: u32, same: impl Fn(u32) -> bool) -> Option<u32> {
        let mask = self.slots.len() - 1;
        let mut i = hash as usize & mask;
        loop {
            let (h, slot) = self.slots[i];
            if slot == 0 {
                return None;
            }
            if h == hash && same(slot - 1) {
                return Some(slot - 1);
            }
            i = (i + 1) & mask;
        }
    }

    /// Records an entry not in the table yet.
    fn insert(&mut self, hash: u32, index: u32) {
        if (self.len + 1) * 2 > self.slots.len() {
            let doubled = vec![(0, 0); self.slots.len() * 2];
            let old = std::mem::replace(&mut self.slots, doubled);
            self.len = 0;
            for (h, slot) in old {
                if slot != 0 {
                    self.insert(h, slot - 1);
                }
            }
        }
        let mask = self.slots.len() - 1;
        let mut i = hash as usize & mask;
        while self.slots[i].1 != 0 {
            i = (i + 1) & mask;
        }
        self.slots[i] = (hash, index + 1);
        self.len += 1;
    }
}

/// The hash of an entry's content.
fn content_hash(content: &[u8]) -> u32 {
    let mut h = FxHasher::default();
    h.write(content);
    let h = h.finish();
    (h >> 32) as u32 ^ h as u32
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

    /// Makes room for about `entries` new entries of `bytes` in all, so that a run of appends
    /// does not copy the heap and its index as they grow.
    pub(super) fn reserve(&mut self, entries: usize, bytes: usize) {
        self.appended.reserve(bytes);
        let index = match self.index.take() {
            Some(index) => index,
            None => self.scan(),
        };
        self.index = Some(index.reserved(entries));
    }

    /// Where the appended entries start: the size of the heap as stored.
    pub(super) fn appended_at(&self) -> usize {
        self.original.len()
    }

    /// The entries appended, as they will follow the stored heap.
    pub(super) fn appended(&self) -> &[u8] {
        &self.appended
    }

    /// Writes the whole heap, padded with zeros to a multiple of 4.
    pub(super) fn write(&self, out: &mut Vec<u8>) {
        self.write_unpadded(out);
        out.resize(out.len().next_multiple_of(4), 0);
    }

    /// Appends the whole heap, unpadded.
    pub(super) fn write_unpadded(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.original);
        out.extend_from_slice(&self.appended);
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

    /// The content of the entry at `index`, original or appended, as [`Self::intern`] stored it.
    fn content(&self, index: u32) -> Option<&[u8]> {
        match self.kind {
            HeapKind::LengthPrefixed => self.entry(index),
            HeapKind::Strings => {
                let index = index as usize;
                let (data, at) = if index < self.original.len() {
                    (self.original, index)
                } else {
                    (&self.appended[..], index - self.original.len())
                };
                let rest = data.get(at..)?;
                Some(&rest[..rest.iter().position(|&b| b == 0)?])
            }
        }
    }

    /// Every entry of the original heap by its content (the first index holding it).
    fn scan(&self) -> EntryIndex {
        let data = self.original;
        // Entries are a few dozen bytes on average; the table doubles if there are more.
        let mut index = EntryIndex::with_capacity(data.len() / 32);
        let mut add = |content: &[u8], at: usize| {
            let hash = content_hash(content);
            if index
                .find(hash, |i| self.content(i) == Some(content))
                .is_none()
            {
                index.insert(hash, at as u32);
            }
        };
        let mut at = 0usize;
        match self.kind {
            HeapKind::Strings => {
                while at < data.len() {
                    let Some(len) = data[at..].iter().position(|&b| b == 0) else {
                        break;
                    };
                    add(&data[at..at + len], at);
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
                    add(entry, at);
                    at = start + len as usize;
                }
            }
        }
        index
    }

    /// The index of an entry holding `content`, appending one when none does.
    pub(super) fn intern(&mut self, content: &[u8]) -> Result<u32, EmitError> {
        if self.kind == HeapKind::Strings && content.contains(&0) {
            return Err(EmitError::NulInString);
        }
        let mark = self.appended.len();
        let start = match self.kind {
            HeapKind::Strings => mark,
            HeapKind::LengthPrefixed => self.push_length(content.len())?,
        };
        self.appended.extend_from_slice(content);
        if self.kind == HeapKind::Strings {
            self.appended.push(0);
        }
        self.keep_or_reuse(mark, start, start + content.len())
    }

    /// Appends the compressed length of an entry of `len` bytes; the position after it.
    fn push_length(&mut self, len: usize) -> Result<usize, EmitError> {
        let n = u32::try_from(len)
            .ok()
            .filter(|&n| n <= 0x1FFF_FFFF)
            .ok_or(EmitError::BlobTooLong { len })?;
        match n {
            0..=0x7F => self.appended.push(n as u8),
            0x80..=0x3FFF => self
                .appended
                .extend_from_slice(&((n as u16) | 0x8000).to_be_bytes()),
            _ => self
                .appended
                .extend_from_slice(&(n | 0xC000_0000).to_be_bytes()),
        }
        Ok(self.appended.len())
    }

    /// The entry just appended at `mark` (its content at `start..end` of the appended bytes)
    /// is kept, or dropped again when an earlier entry holds the same content: the index of
    /// the one that stays. Built in place, an entry is neither copied nor allocated.
    fn keep_or_reuse(&mut self, mark: usize, start: usize, end: usize) -> Result<u32, EmitError> {
        let index = match self.index.take() {
            Some(index) => index,
            None => self.scan(),
        };
        let content = &self.appended[start..end];
        let hash = content_hash(content);
        let found = index.find(hash, |i| self.content(i) == Some(content));
        self.index = Some(index);
        if let Some(i) = found {
            self.appended.truncate(mark);
            return Ok(i);
        }
        let at = self.original.len() + mark;
        let Ok(at) = u32::try_from(at) else {
            self.appended.truncate(mark);
            return Err(EmitError::HeapFull { heap: self.name() });
        };
        if let Some(m) = self.index.as_mut() {
            m.insert(hash, at);
        }
        Ok(at)
    }

    /// The index of the `#US` entry of the literal `s` (see [`user_string_bytes`]), appending
    /// one when none holds it.
    pub(super) fn intern_user_string(&mut self, s: &str) -> Result<u32, EmitError> {
        let units = if s.is_ascii() {
            s.len()
        } else {
            s.encode_utf16().count()
        };
        let mark = self.appended.len();
        let start = self.push_length(units * 2 + 1)?;
        append_user_string(s, &mut self.appended);
        let end = self.appended.len();
        self.keep_or_reuse(mark, start, end)
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
#[cfg(test)]
fn user_string_bytes(s: &str) -> Vec<u8> {
    let mut out = Vec::new();
    append_user_string(s, &mut out);
    out
}

/// Appends [`user_string_bytes`] of `s` to `out`.
fn append_user_string(s: &str, out: &mut Vec<u8>) {
    let special_unit =
        |unit: u16| unit > 0x7F || matches!(unit, 0x01..=0x08 | 0x0E..=0x1F | 0x27 | 0x2D | 0x7F);
    if s.is_ascii() {
        // Names are ASCII nearly always: each byte is a code unit. Written without early
        // exits or bounds checks, so that the loops vectorise.
        let bytes = s.as_bytes();
        let at = out.len();
        out.resize(at + bytes.len() * 2, 0);
        for (unit, &b) in out[at..].chunks_exact_mut(2).zip(bytes) {
            unit[0] = b;
        }
        let special = bytes
            .iter()
            .fold(false, |any, &b| any | special_unit(u16::from(b)));
        out.push(u8::from(special));
        return;
    }
    out.reserve(s.len() * 2 + 1);
    let mut special = false;
    for unit in s.encode_utf16() {
        out.extend_from_slice(&unit.to_le_bytes());
        special |= special_unit(unit);
    }
    out.push(u8::from(special));
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
