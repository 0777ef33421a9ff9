//! Heaps that grow: each keeps the image's own bytes as they are (so every existing index stays
//! valid) and appends new entries after them, reusing an entry that already holds the same
//! value (II.24.2.3–II.24.2.5).

use super::EmitError;

/// A heap of the image plus what is appended to it.
#[derive(Debug)]
pub(super) struct GrowingHeap<'a> {
    /// The stream as stored (padding included).
    original: &'a [u8],
    appended: Vec<u8>,
    /// Entries by content, for reuse; built on the first lookup.
    index: Option<EntryIndex>,
    /// Memory for the index's slots until it is built (a caller's, from an earlier heap).
    spare_slots: Vec<(u32, u32)>,
    /// Lookups answered by [`GrowingHeap::walk_find`] before the index was built.
    walked: u32,
    /// A bit per appended byte, set where a kept entry starts (the verifier's check of added
    /// `ldstr` tokens), recorded as entries are kept rather than found by a walk of the heap.
    starts: Vec<u64>,
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
        Self::in_buffer(entries, Vec::new())
    }

    /// An empty table for `entries` in `slots`' memory.
    fn in_buffer(entries: usize, mut slots: Vec<(u32, u32)>) -> Self {
        slots.clear();
        slots.resize((entries * 2).next_power_of_two().max(64), (0, 0));
        EntryIndex { slots, len: 0 }
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

    /// Records `index` unless an entry for which `same` holds is there already: one walk of
    /// the probe sequence for both.
    fn insert_first(&mut self, hash: u32, index: u32, same: impl Fn(u32) -> bool) {
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow();
        }
        let mask = self.slots.len() - 1;
        let mut i = hash as usize & mask;
        loop {
            let (h, slot) = self.slots[i];
            if slot == 0 {
                self.slots[i] = (hash, index + 1);
                self.len += 1;
                return;
            }
            if h == hash && same(slot - 1) {
                return;
            }
            i = (i + 1) & mask;
        }
    }

    /// Doubles the table.
    fn grow(&mut self) {
        let doubled = vec![(0, 0); self.slots.len() * 2];
        let old = std::mem::replace(&mut self.slots, doubled);
        self.len = 0;
        for (h, slot) in old {
            if slot != 0 {
                self.insert(h, slot - 1);
            }
        }
    }

    /// Records an entry not in the table yet.
    fn insert(&mut self, hash: u32, index: u32) {
        self.insert_first(hash, index, |_| false);
    }
}

/// The hash of an entry's content: multiply-rotate over four words at a time, one per lane, so
/// that the lanes' multiplies overlap (a name is ~100 bytes, hashed once per probe literal).
fn content_hash(content: &[u8]) -> u32 {
    const K: u64 = 0xf135_7aea_2e62_a9c5;
    let mix = |h: u64, w: u64| (h.rotate_left(26) ^ w).wrapping_mul(K);
    // The length goes in first: the zero padding of the last word then cannot collide.
    let mut lanes = [content.len() as u64, 1, 2, 3];
    let mut blocks = content.chunks_exact(32);
    for block in &mut blocks {
        for (lane, w) in lanes.iter_mut().zip(block.chunks_exact(8)) {
            *lane = mix(*lane, word(w));
        }
    }
    let mut words = blocks.remainder().chunks_exact(8);
    for (lane, w) in lanes.iter_mut().zip(&mut words) {
        *lane = mix(*lane, word(w));
    }
    if !content.len().is_multiple_of(8) {
        // At most three whole words are left, so the fourth lane is free.
        lanes[3] = mix(lanes[3], tail_word(content, 0));
    }
    let h = mix(mix(mix(lanes[0], lanes[1]), lanes[2]), lanes[3]);
    (h >> 32) as u32 ^ h as u32
}

/// Eight bytes as a little-endian word (`bytes` holds eight).
#[inline]
fn word(bytes: &[u8]) -> u64 {
    <[u8; 8]>::try_from(bytes).map_or(0, u64::from_le_bytes)
}

/// The last `bytes.len() % 8` bytes of `bytes` as the low bytes of a word, the others `pad`.
/// With eight bytes or more they are read as one (overlapping) word and shifted: assembled in
/// a stack buffer byte by byte, the word's load would wait for the stores.
#[inline]
fn tail_word(bytes: &[u8], pad: u8) -> u64 {
    let r = bytes.len() % 8;
    let pad = u64::from_le_bytes([pad; 8]);
    if r == 0 {
        return pad;
    }
    let low = match bytes.len().checked_sub(8) {
        Some(at) => word(&bytes[at..]) >> (8 * (8 - r)),
        None => bytes.iter().rev().fold(0, |w, &b| w << 8 | u64::from(b)),
    };
    low | pad << (8 * r)
}

/// A heap's memory between images: its appended bytes, its index's slots and its entry starts.
pub(super) type HeapBuffers = (Vec<u8>, Vec<(u32, u32)>, Vec<u64>);

/// How a heap's entries are delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum HeapKind {
    /// `#Strings`: UTF-8 ending with a NUL.
    Strings,
    /// `#Blob` and `#US`: a compressed length, then the bytes.
    LengthPrefixed,
}

/// Lookups a heap answers by walking its entries before it builds its index (see
/// [`GrowingHeap::keep_or_reuse`]).
const WALKED_LOOKUPS: u32 = 8;

/// The largest index a `#US` entry may have: `ldstr` tokens keep 24 bits of offset.
pub(super) const MAX_USER_STRING_INDEX: usize = 0x00FF_FFFF;

impl<'a> GrowingHeap<'a> {
    pub(super) fn new(original: &'a [u8], kind: HeapKind) -> Self {
        Self::with_buffers(original, kind, HeapBuffers::default())
    }

    /// [`Self::new`] working in memory from an earlier heap ([`Self::into_buffers`]).
    pub(super) fn with_buffers(original: &'a [u8], kind: HeapKind, buffers: HeapBuffers) -> Self {
        let (mut appended, spare_slots, mut starts) = buffers;
        appended.clear();
        starts.clear();
        GrowingHeap {
            original,
            appended,
            index: None,
            spare_slots,
            walked: 0,
            starts,
            kind,
        }
    }

    /// The heap's memory, for another heap.
    pub(super) fn into_buffers(self) -> HeapBuffers {
        let slots = match self.index {
            Some(index) => index.slots,
            None => self.spare_slots,
        };
        (self.appended, slots, self.starts)
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
        self.starts.reserve(
            (self.appended.len() + bytes)
                .div_ceil(64)
                .saturating_sub(self.starts.len()),
        );
        let index = match self.index.take() {
            Some(index) => index.reserved(entries),
            None => self.scan(entries, self.appended.len()),
        };
        self.index = Some(index);
    }

    /// Where the appended entries start: the size of the heap as stored.
    pub(super) fn appended_at(&self) -> usize {
        self.original.len()
    }

    /// The entries appended, as they will follow the stored heap.
    #[cfg(test)]
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
                Some(&rest[..memchr::memchr(0, rest)?])
            }
        }
    }

    /// Every entry of the original heap and of the first `appended` bytes appended by its
    /// content (the first index holding it), in a table with room for `more` entries.
    fn scan(&mut self, more: usize, appended: usize) -> EntryIndex {
        // Sized by a count of the entries first: a table larger than needed misses the cache
        // on more of its lookups (one per probe literal), and a doubling moves every entry.
        let base = self.original.len();
        let parts = [(self.original, 0), (&self.appended[..appended], base)];
        let mut entries = more;
        for (data, _) in parts {
            self.for_each_entry(data, |_, _| {
                entries += 1;
                false
            });
        }
        let slots = std::mem::take(&mut self.spare_slots);
        let mut index = EntryIndex::in_buffer(entries, slots);
        for (data, base) in parts {
            self.for_each_entry(data, |content, at| {
                index.insert_first(content_hash(content), (base + at) as u32, |i| {
                    self.content(i) == Some(content)
                });
                false
            });
        }
        index
    }

    /// Calls `f` with each entry of `data` (a run of whole entries from the heap's start or
    /// from the start of the appended bytes) and its position, in order, until `f` returns
    /// true; a `#Strings` run ends at its last NUL, a length-prefixed one where a length
    /// does not read or runs past the end.
    fn for_each_entry(&self, data: &[u8], mut f: impl FnMut(&[u8], usize) -> bool) {
        let mut at = 0usize;
        match self.kind {
            HeapKind::Strings => {
                while at < data.len() {
                    let Some(len) = memchr::memchr(0, &data[at..]) else {
                        break;
                    };
                    if f(&data[at..at + len], at) {
                        return;
                    }
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
                    if f(entry, at) {
                        return;
                    }
                    at = start + len as usize;
                }
            }
        }
    }

    /// The first entry of the original heap or of the first `appended` bytes appended that
    /// holds `content`, found without an index: what the index would answer. `#Strings` is
    /// searched for `content` and its NUL at an entry's start; the other heaps are walked
    /// entry by entry.
    fn walk_find(&self, content: &[u8], appended: usize) -> Option<u32> {
        let base = self.original.len();
        let parts = [(self.original, 0), (&self.appended[..appended], base)];
        for (data, base) in parts {
            let mut found = None;
            match self.kind {
                HeapKind::Strings => {
                    let mut pattern = Vec::with_capacity(content.len() + 1);
                    pattern.extend_from_slice(content);
                    pattern.push(0);
                    // The pattern's only NUL is its last byte, so its matches do not overlap,
                    // and one starting at 0 or after a NUL is an entry.
                    found = memchr::memmem::find_iter(data, &pattern)
                        .find(|&at| at == 0 || data[at - 1] == 0);
                }
                HeapKind::LengthPrefixed => self.for_each_entry(data, |entry, at| {
                    let same = entry == content;
                    if same {
                        found = Some(at);
                    }
                    same
                }),
            }
            if let Some(at) = found {
                return u32::try_from(base + at).ok();
            }
        }
        None
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
        let (hash, found) = if self.index.is_none() && self.walked < WALKED_LOOKUPS {
            // A heap asked a few times (a probe's names and signatures) is searched, not
            // indexed: hashing every entry of a large heap costs more than a few walks.
            self.walked += 1;
            (None, self.walk_find(&self.appended[start..end], mark))
        } else {
            let index = match self.index.take() {
                Some(index) => index,
                None => self.scan(0, mark),
            };
            let content = &self.appended[start..end];
            let hash = content_hash(content);
            let found = index.find(hash, |i| self.content(i) == Some(content));
            self.index = Some(index);
            (Some(hash), found)
        };
        if let Some(i) = found {
            self.appended.truncate(mark);
            return Ok(i);
        }
        let at = self.original.len() + mark;
        let Ok(at) = u32::try_from(at) else {
            self.appended.truncate(mark);
            return Err(EmitError::HeapFull { heap: self.name() });
        };
        if let (Some(m), Some(hash)) = (self.index.as_mut(), hash) {
            m.insert(hash, at);
        }
        let word = mark / 64;
        if self.starts.len() <= word {
            self.starts.resize(word + 1, 0);
        }
        self.starts[word] |= 1 << (mark % 64);
        Ok(at)
    }

    /// Where the appended entries start: a bit per byte of [`Self::appended`] (in words of
    /// 64), set at each entry's first byte.
    pub(super) fn appended_starts(&self) -> Vec<u64> {
        let words = self.appended.len().div_ceil(64);
        let mut bits = Vec::with_capacity(words);
        bits.extend_from_slice(&self.starts);
        bits.resize(words, 0);
        bits
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

    /// The index of the `#US` entry whose code units are `parts`' in order (each from
    /// [`widen_user_string`]), with final byte `special`: [`Self::intern_user_string`] of the
    /// strings the parts were widened from, joined.
    pub(super) fn intern_user_string_parts(
        &mut self,
        parts: &[&[u8]],
        special: bool,
    ) -> Result<u32, EmitError> {
        let bytes: usize = parts.iter().map(|p| p.len()).sum();
        let mark = self.appended.len();
        let start = self.push_length(bytes + 1)?;
        for part in parts {
            self.appended.extend_from_slice(part);
        }
        self.appended.push(u8::from(special));
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
    let special = widen_user_string(s, out);
    out.push(u8::from(special));
}

/// Appends `s` as UTF-16LE code units to `out` (a `#US` entry's content without its final
/// byte); whether any unit is one II.24.2.4 flags (the final byte's value).
pub(super) fn widen_user_string(s: &str, out: &mut Vec<u8>) -> bool {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let special_unit =
        |unit: u16| unit > 0x7F || matches!(unit, 0x01..=0x08 | 0x0E..=0x1F | 0x27 | 0x2D | 0x7F);
    // Names are ASCII nearly always: each byte is a code unit, widened eight at a time, the
    // last few as a word padded with a character never flagged. A byte with its high bit set
    // sends the string back to the unit-by-unit path (checked as the words go, not in a pass
    // before). The flag's test is a word-wide one for "maybe", made exact only then.
    let bytes = s.as_bytes();
    let mark = out.len();
    out.reserve(bytes.len() * 2);
    let wide = |w: u64| {
        let mut units = [0u8; 16];
        units[..8].copy_from_slice(&widen(w as u32).to_le_bytes());
        units[8..].copy_from_slice(&widen((w >> 32) as u32).to_le_bytes());
        units
    };
    let (mut maybe, mut high) = (0, 0);
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        let w = word(w);
        out.extend_from_slice(&wide(w));
        maybe |= maybe_special(w);
        high |= w;
    }
    let rest = words.remainder().len();
    if rest != 0 {
        let w = tail_word(bytes, b'A');
        out.extend_from_slice(&wide(w)[..rest * 2]);
        maybe |= maybe_special(w);
        high |= w;
    }
    if high & HIGH == 0 {
        return maybe != 0 && bytes.iter().any(|&b| special_unit(u16::from(b)));
    }
    out.truncate(mark);
    let mut special = false;
    for unit in s.encode_utf16() {
        out.extend_from_slice(&unit.to_le_bytes());
        special |= special_unit(unit);
    }
    special
}

/// The four bytes of `x` as four little-endian 16-bit units (each byte, then a zero).
fn widen(x: u32) -> u64 {
    let x = u64::from(x);
    let x = (x | (x << 16)) & 0x0000_FFFF_0000_FFFF;
    (x | (x << 8)) & 0x00FF_00FF_00FF_00FF
}

/// Non-zero when any of eight ASCII bytes may be one II.24.2.4 flags: below 0x20, `'`, `-` or
/// DEL (a superset: tab, line ends and NUL pass here and are told apart by the exact test).
fn maybe_special(w: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // A byte below `n` (for bytes below 0x80) sets its high bit in `w - n * ONES` but not in
    // `w`; a byte equal to `v` is a zero byte of `w ^ v * ONES`. Bitwise throughout: no
    // branch per word.
    let below = w.wrapping_sub(0x20 * ONES) & !w;
    let zero = |y: u64| y.wrapping_sub(ONES) & !y;
    (below | zero(w ^ (0x27 * ONES)) | zero(w ^ (0x2D * ONES)) | zero(w ^ (0x7F * ONES))) & HIGH
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The starts recorded as entries are kept are those a walk of the appended bytes finds,
    /// with entries reused (not appended) and entries of every length-prefix size among them.
    #[test]
    fn recorded_starts_are_the_walked_entry_starts() {
        let original = b"\0\x03ab\0";
        let mut h = GrowingHeap::new(original, HeapKind::LengthPrefixed);
        let long = "x".repeat(100);
        let longer = "y".repeat(9000);
        let strings = ["a", "b", "a", &long, "b", "", &longer, "c", &long, "d"];
        for s in strings.iter().cycle().take(40) {
            h.intern_user_string(s).unwrap();
        }
        let heap = h.appended();
        let mut walked = vec![0u64; heap.len().div_ceil(64)];
        let mut at = 0;
        let mut entries = 0;
        while at < heap.len() {
            let (len, used) = crate::image::sig::decompress_u32(&heap[at..]).unwrap();
            walked[at / 64] |= 1 << (at % 64);
            at += used + len as usize;
            entries += 1;
        }
        assert_eq!(at, heap.len());
        assert_eq!(entries, 7, "each distinct string once");
        assert_eq!(h.appended_starts(), walked);
    }

    /// Changing any one byte of a content of length 0–79 changes its hash, and so does one
    /// more zero byte (the last word's padding): the lanes and the tail lose nothing.
    #[test]
    fn content_hash_sees_every_byte_and_the_length() {
        for len in 0..80usize {
            let base: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            let hash = content_hash(&base);
            for at in 0..len {
                let mut other = base.clone();
                other[at] ^= 0x40;
                assert_ne!(content_hash(&other), hash, "length {len}, byte {at}");
            }
            let mut longer = base.clone();
            longer.push(0);
            assert_ne!(
                content_hash(&longer),
                hash,
                "length {len} and one zero more"
            );
        }
    }

    /// The tail word holds the last `len % 8` bytes in order, then the padding, whether read
    /// as an overlapping word or assembled.
    #[test]
    fn tail_word_is_the_last_bytes_then_padding() {
        for len in 0..20usize {
            let bytes: Vec<u8> = (1..=len as u8).collect();
            let r = len % 8;
            let mut expect = [b'A'; 8];
            expect[..r].copy_from_slice(&bytes[len - r..]);
            assert_eq!(
                tail_word(&bytes, b'A'),
                u64::from_le_bytes(expect),
                "length {len}"
            );
        }
    }

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
    fn walked_lookups_answer_as_the_index_does() {
        // Entries sharing suffixes, repeated entries, a string cut off without its NUL, an
        // empty entry after the first, and blobs whose bytes hold other blobs' encodings.
        let strings: &[u8] = b"\0GetName\0Name\0Name\0\0A\0ab\0b\0Tail";
        let blobs: &[u8] = &[0, 2, 1, 3, 1, 3, 2, 1, 3, 0, 1, 1, 3, 0xAA, 0xBB, 0xCC];
        let asks: [&[u8]; 14] = [
            b"Name", b"me", b"", b"b", b"Tail", b"New", b"New", b"ab", b"A", b"GetName", b"X",
            b"New", b"X", b"Y",
        ];
        let blob_asks: [&[u8]; 12] = [
            &[1, 3],
            &[3],
            &[],
            &[1],
            &[0xAA, 0xBB, 0xCC],
            &[9, 9],
            &[9, 9],
            &[3, 1],
            &[1, 3],
            &[0xAA],
            &[9],
            &[9, 9],
        ];
        for (original, kind, asks) in [
            (strings, HeapKind::Strings, &asks[..]),
            (blobs, HeapKind::LengthPrefixed, &blob_asks[..]),
        ] {
            let mut walked = GrowingHeap::new(original, kind);
            let mut indexed = GrowingHeap::new(original, kind);
            indexed.reserve(0, 0);
            for (k, ask) in asks.iter().enumerate() {
                let a = walked.intern(ask).unwrap();
                let b = indexed.intern(ask).unwrap();
                assert_eq!(a, b, "{kind:?} ask {k} {ask:?}");
            }
            assert_eq!(
                walked.walked, WALKED_LOOKUPS,
                "the first lookups are walked"
            );
            assert!(
                walked.index.is_some(),
                "past the walked lookups the index is built"
            );
            assert_eq!(walked.appended(), indexed.appended());
        }
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

    #[test]
    fn ascii_strings_widen_and_flag_as_unit_by_unit() {
        // Every length around the eight-byte steps, with each flagged or unflagged character,
        // or one outside ASCII (two, three and four bytes of UTF-8), at each position.
        let reference = |s: &str| {
            let mut out = Vec::new();
            let mut special = false;
            for unit in s.encode_utf16() {
                out.extend_from_slice(&unit.to_le_bytes());
                special |=
                    unit > 0x7F || matches!(unit, 0x01..=0x08 | 0x0E..=0x1F | 0x27 | 0x2D | 0x7F);
            }
            out.push(u8::from(special));
            out
        };
        for len in 0..=19 {
            for odd in [
                '\0', '\t', '\n', '\r', '\x01', '\x1f', '\'', '-', '\x7f', ' ', '~', 'z', 'é', '€',
                '𝄞',
            ] {
                for at in 0..len.max(1) {
                    let s: String = (0..len)
                        .map(|i| {
                            if i == at {
                                odd
                            } else {
                                (b'A' + i as u8) as char
                            }
                        })
                        .collect();
                    assert_eq!(user_string_bytes(&s), reference(&s), "{s:?}");
                    // After bytes already there (a non-ASCII string is widened again, unit
                    // by unit, from where it started).
                    let mut out = b"xyz".to_vec();
                    append_user_string(&s, &mut out);
                    assert_eq!(out[..3], *b"xyz");
                    assert_eq!(out[3..], reference(&s), "{s:?} after three bytes");
                }
            }
        }
    }
}
