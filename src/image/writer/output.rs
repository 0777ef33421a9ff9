//! Where the writer puts the patched image while it lays it out: a buffer holding all of it
//! ([`Vec<u8>`]), or an [`Overlay`] — the input's bytes with the pages the writer changed and
//! the bytes it appended — for inputs too large to copy into memory, written to a file
//! afterwards ([`super::stream`]).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ops::Range;

/// The operations the writer needs on its output: the same for both forms, so that both lay
/// out the same bytes.
pub(super) trait Output {
    /// Starts the output as a copy of `input`; `extra` bytes are expected to be appended.
    fn start(&mut self, input: &[u8], extra: usize);
    /// Bytes of output so far.
    fn len(&self) -> usize;
    /// The bytes at `range`, when all of them lie in the output.
    fn read(&self, range: Range<usize>) -> Option<Cow<'_, [u8]>>;
    /// Writes `bytes` at `at` (all inside the output); returns whether any byte changed.
    fn write_at(&mut self, at: usize, bytes: &[u8]) -> bool;
    /// [`Self::write_at`] where whether anything changed is not asked.
    fn overwrite(&mut self, at: usize, bytes: &[u8]) {
        self.write_at(at, bytes);
    }
    /// Cuts the output to `len` bytes, or extends it with zeros.
    fn resize_to(&mut self, len: usize);
    /// The buffer the output's end is in, to append to: bytes pushed on it follow the output's
    /// last byte.
    fn end(&mut self) -> &mut Vec<u8>;
}

impl Output for Vec<u8> {
    fn start(&mut self, input: &[u8], extra: usize) {
        // The input, the appended bytes and alignment, so that the buffer need not grow
        // again: a buffer reused for the same assembly keeps its memory. Only a hint.
        self.clear();
        self.reserve(input.len() + extra + 0x2000);
        self.extend_from_slice(input);
    }

    fn len(&self) -> usize {
        Vec::len(self)
    }

    fn read(&self, range: Range<usize>) -> Option<Cow<'_, [u8]>> {
        self.get(range).map(Cow::Borrowed)
    }

    #[inline]
    fn write_at(&mut self, at: usize, bytes: &[u8]) -> bool {
        let dst = &mut self[at..at + bytes.len()];
        let changed = dst != bytes;
        dst.copy_from_slice(bytes);
        changed
    }

    #[inline]
    fn overwrite(&mut self, at: usize, bytes: &[u8]) {
        self[at..at + bytes.len()].copy_from_slice(bytes);
    }

    fn resize_to(&mut self, len: usize) {
        self.resize(len, 0);
    }

    fn end(&mut self) -> &mut Vec<u8> {
        self
    }
}

/// Pages of the input are copied into the overlay when first written.
pub(super) const PAGE: usize = 4096;

/// The output as edits of the input: its first `kept` bytes, with the pages the writer wrote
/// to held here, then `tail`. Memory is the pages written and the tail, whatever the input's
/// size; the input is only read.
#[derive(Debug)]
pub(super) struct Overlay<'a> {
    input: &'a [u8],
    kept: usize,
    /// Written pages of the kept part, by page number; a page is whole (zeros past the input's
    /// end), and only its bytes before `kept` count.
    pages: BTreeMap<usize, Box<[u8]>>,
    tail: Vec<u8>,
}

impl<'a> Overlay<'a> {
    /// The input as it is.
    pub(super) fn new(input: &'a [u8]) -> Self {
        Overlay {
            input,
            kept: input.len(),
            pages: BTreeMap::new(),
            tail: Vec::new(),
        }
    }

    /// Bytes of the output taken from the input (some of them written over).
    pub(super) fn kept(&self) -> usize {
        self.kept
    }

    /// The bytes after the kept part.
    pub(super) fn tail(&self) -> &[u8] {
        &self.tail
    }

    /// The pieces of the kept part in order: `(offset, Some(bytes))` for a written page (cut
    /// at `kept`), `(offset, None)` for a run of the input's bytes unchanged, up to the next
    /// written page.
    pub(super) fn pieces(&self) -> impl Iterator<Item = (Range<usize>, Option<&[u8]>)> + '_ {
        let mut at = 0;
        let mut pages = self.pages.range(..self.kept.div_ceil(PAGE)).peekable();
        std::iter::from_fn(move || {
            if at >= self.kept {
                return None;
            }
            match pages.peek() {
                Some(&(&p, page)) if p * PAGE == at => {
                    pages.next();
                    let end = (at + PAGE).min(self.kept);
                    let piece = (at..end, Some(&page[..end - at]));
                    at = end;
                    Some(piece)
                }
                next => {
                    let end = next.map_or(self.kept, |(p, _)| **p * PAGE);
                    let piece = (at..end, None);
                    at = end;
                    Some(piece)
                }
            }
        })
    }

    fn page_mut(&mut self, p: usize) -> &mut [u8] {
        let input = self.input;
        self.pages.entry(p).or_insert_with(|| {
            let mut page = vec![0u8; PAGE].into_boxed_slice();
            let from = input.get(p * PAGE..).unwrap_or_default();
            let n = from.len().min(PAGE);
            page[..n].copy_from_slice(&from[..n]);
            page
        })
    }
}

impl Output for Overlay<'_> {
    fn start(&mut self, input: &[u8], _extra: usize) {
        // Only the overlay's own input can start it: the bytes are not copied.
        debug_assert!(std::ptr::eq(input, self.input));
        self.kept = self.input.len();
        self.pages.clear();
        self.tail.clear();
    }

    fn len(&self) -> usize {
        self.kept + self.tail.len()
    }

    fn read(&self, range: Range<usize>) -> Option<Cow<'_, [u8]>> {
        if range.start > range.end || range.end > self.len() {
            return None;
        }
        if range.start >= self.kept {
            return Some(Cow::Borrowed(
                &self.tail[range.start - self.kept..range.end - self.kept],
            ));
        }
        let first = range.start / PAGE;
        let last = range.end.min(self.kept).div_ceil(PAGE);
        if range.end <= self.kept && self.pages.range(first..last).next().is_none() {
            return Some(Cow::Borrowed(&self.input[range]));
        }
        let mut bytes = Vec::with_capacity(range.len());
        let mut at = range.start;
        while at < range.end.min(self.kept) {
            let p = at / PAGE;
            let end = ((p + 1) * PAGE).min(range.end).min(self.kept);
            match self.pages.get(&p) {
                Some(page) => bytes.extend_from_slice(&page[at - p * PAGE..end - p * PAGE]),
                None => bytes.extend_from_slice(&self.input[at..end]),
            }
            at = end;
        }
        if range.end > self.kept {
            bytes.extend_from_slice(&self.tail[..range.end - self.kept]);
        }
        Some(Cow::Owned(bytes))
    }

    fn write_at(&mut self, at: usize, bytes: &[u8]) -> bool {
        let mut changed = false;
        let mut done = 0;
        while done < bytes.len() {
            let pos = at + done;
            if pos >= self.kept {
                let rest = &bytes[done..];
                let dst = &mut self.tail[pos - self.kept..pos - self.kept + rest.len()];
                changed |= dst != rest;
                dst.copy_from_slice(rest);
                break;
            }
            let p = pos / PAGE;
            let n = ((p + 1) * PAGE)
                .min(self.kept)
                .min(pos + bytes.len() - done)
                - pos;
            let src = &bytes[done..done + n];
            let off = pos - p * PAGE;
            // A write that changes nothing leaves the page to the input.
            let unchanged = match self.pages.get(&p) {
                Some(page) => page[off..off + n] == *src,
                None => self.input[pos..pos + n] == *src,
            };
            if !unchanged {
                self.page_mut(p)[off..off + n].copy_from_slice(src);
                changed = true;
            }
            done += n;
        }
        changed
    }

    fn resize_to(&mut self, len: usize) {
        if len <= self.kept {
            self.kept = len;
            self.tail.clear();
            // Pages wholly past the cut are dropped; the bytes of a page cut in two past
            // `kept` are never read, and zeroed should the output grow over them again.
            let first_gone = len.div_ceil(PAGE);
            self.pages.split_off(&first_gone);
            if let Some(page) = self.pages.get_mut(&(len / PAGE)) {
                page[len % PAGE..].fill(0);
            }
        } else {
            self.tail.resize(len - self.kept, 0);
        }
    }

    fn end(&mut self) -> &mut Vec<u8> {
        &mut self.tail
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The overlay answers every operation as a buffer holding the whole output does.
    #[test]
    fn an_overlay_is_the_buffer_it_stands_for() {
        let mut next = crate::test_rng::below(0x0ee1_a7c0_5eed_1234_u64);
        for case in 0..300 {
            let input: Vec<u8> = (0..next(5 * PAGE as u64) as usize)
                .map(|i| (i * 7 + case) as u8)
                .collect();
            let mut whole = Vec::new();
            whole.start(&input, 0);
            let mut overlay = Overlay::new(&input);
            overlay.start(&input, 0);
            for _ in 0..20 {
                let len = whole.len() as u64;
                match next(5) {
                    0 | 1 if len > 0 => {
                        let at = next(len) as usize;
                        let n = next((len - at as u64).min(2 * PAGE as u64) + 1) as usize;
                        let bytes: Vec<u8> = (0..n).map(|_| next(256) as u8).collect();
                        let a = whole.write_at(at, &bytes);
                        let b = overlay.write_at(at, &bytes);
                        assert_eq!(a, b, "case {case}");
                    }
                    2 => {
                        let to = next(len + 3 * PAGE as u64) as usize;
                        whole.resize_to(to);
                        overlay.resize_to(to);
                    }
                    3 => {
                        let n = next(300) as usize;
                        whole.end().extend((0..n).map(|i| i as u8));
                        overlay.end().extend((0..n).map(|i| i as u8));
                    }
                    _ => {
                        let from = next(len + 2) as usize;
                        let to = from + next(2 * PAGE as u64) as usize;
                        assert_eq!(whole.read(from..to), overlay.read(from..to), "case {case}");
                    }
                }
                assert_eq!(whole.len(), overlay.len());
            }
            let mut joined = Vec::new();
            for (range, piece) in overlay.pieces() {
                assert_eq!(range.start, joined.len());
                joined.extend_from_slice(piece.unwrap_or(&input[range]));
            }
            assert_eq!(joined.len(), overlay.kept());
            joined.extend_from_slice(overlay.tail());
            assert_eq!(joined, whole, "case {case}");
        }
    }
}
