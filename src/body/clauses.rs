//! An EH section's clauses read in place from its bytes: a body of a million clauses keeps its
//! 24 MB of section bytes, not a second, parsed copy of them.

use super::{Clause, FAT_CLAUSE_SIZE, SMALL_CLAUSE_SIZE};

/// A table of clauses, read by index: the whole clauses of an EH section's bytes (small or fat
/// form), or a list already in [`Clause`] form (as a rewriter lays clauses out).
///
/// It is `Copy` and borrows what it reads; [`ClauseTable::get`] and [`ClauseTable::iter`] give
/// clauses by value, widened to `u32` as [`Clause`] holds them.
#[derive(Clone, Copy)]
pub struct ClauseTable<'a> {
    repr: Repr<'a>,
}

#[derive(Clone, Copy)]
enum Repr<'a> {
    /// Whole clauses of `fat` form, back to back.
    Bytes { bytes: &'a [u8], fat: bool },
    /// Clauses in memory form.
    List(&'a [Clause]),
}

impl<'a> ClauseTable<'a> {
    /// No clauses.
    pub const EMPTY: ClauseTable<'static> = ClauseTable {
        repr: Repr::List(&[]),
    };

    /// The whole clauses at the start of an EH section's `data` (the bytes after its 4-byte
    /// header) in small (12-byte) or `fat` (24-byte) form, and the bytes after the last whole
    /// one.
    pub fn split(data: &'a [u8], fat: bool) -> (ClauseTable<'a>, &'a [u8]) {
        let size = clause_size(fat);
        let whole = data.len() - data.len() % size;
        let (bytes, trailing) = data.split_at(whole);
        (
            ClauseTable {
                repr: Repr::Bytes { bytes, fat },
            },
            trailing,
        )
    }

    /// Number of clauses.
    #[inline]
    pub fn len(&self) -> usize {
        match self.repr {
            Repr::Bytes { bytes, fat } => bytes.len() / clause_size(fat),
            Repr::List(list) => list.len(),
        }
    }

    /// Whether there are none.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Clause `i`, if there is one.
    #[inline]
    pub fn get(&self, i: usize) -> Option<Clause> {
        match self.repr {
            Repr::Bytes { bytes, fat: true } => Some(read_fat(chunk(bytes, i)?)),
            Repr::Bytes { bytes, fat: false } => Some(read_small(chunk(bytes, i)?)),
            Repr::List(list) => list.get(i).copied(),
        }
    }

    /// The byte bounds `[start, end)` of one block of clause `i`, reading only the fields
    /// they need (the verifier asks this of every region several times). Ends are computed
    /// in `u64` and truncated, as `Clause::try_end() as u32` would be.
    #[inline(always)]
    pub(crate) fn block(&self, i: usize, block: Block) -> Option<(u32, u32)> {
        let (start, len_or_end) = match self.repr {
            Repr::Bytes { bytes, fat: true } => {
                let c: &[u8; FAT_CLAUSE_SIZE] = chunk(bytes, i)?;
                let at = |k: usize| u32::from_le_bytes([c[k], c[k + 1], c[k + 2], c[k + 3]]);
                match block {
                    Block::Try => (at(4), at(8)),
                    Block::Filter => return Some((at(20), at(12))),
                    Block::Handler => (at(12), at(16)),
                }
            }
            Repr::Bytes { bytes, fat: false } => {
                let c: &[u8; SMALL_CLAUSE_SIZE] = chunk(bytes, i)?;
                let at16 = |k: usize| u16::from_le_bytes([c[k], c[k + 1]]) as u32;
                match block {
                    Block::Try => (at16(2), c[4] as u32),
                    Block::Filter => {
                        return Some((u32::from_le_bytes([c[8], c[9], c[10], c[11]]), at16(5)));
                    }
                    Block::Handler => (at16(5), c[7] as u32),
                }
            }
            Repr::List(list) => {
                let c = list.get(i)?;
                match block {
                    Block::Try => (c.try_offset, c.try_length),
                    Block::Filter => return Some((c.class_or_filter, c.handler_offset)),
                    Block::Handler => (c.handler_offset, c.handler_length),
                }
            }
        };
        Some((start, (start as u64 + len_or_end as u64) as u32))
    }

    /// The clauses in order.
    pub fn iter(&self) -> Iter<'a> {
        Iter {
            table: *self,
            next: 0,
            end: self.len(),
        }
    }

    /// The clauses as a list.
    pub fn to_vec(&self) -> Vec<Clause> {
        self.iter().collect()
    }
}

/// One block of a clause, for [`ClauseTable::block`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Block {
    /// The try block.
    Try,
    /// A filter clause's filter block: from the filter offset to the handler.
    Filter,
    /// The handler block.
    Handler,
}

impl<'a> From<&'a [Clause]> for ClauseTable<'a> {
    fn from(list: &'a [Clause]) -> Self {
        ClauseTable {
            repr: Repr::List(list),
        }
    }
}

impl<'a, const N: usize> From<&'a [Clause; N]> for ClauseTable<'a> {
    fn from(list: &'a [Clause; N]) -> Self {
        ClauseTable::from(list.as_slice())
    }
}

impl<'a> From<&'a Vec<Clause>> for ClauseTable<'a> {
    fn from(list: &'a Vec<Clause>) -> Self {
        ClauseTable::from(list.as_slice())
    }
}

impl<'a> IntoIterator for ClauseTable<'a> {
    type Item = Clause;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl<'a> IntoIterator for &ClauseTable<'a> {
    type Item = Clause;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

/// Tables are equal when they hold the same clauses, whatever form they are read from.
impl PartialEq for ClauseTable<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for ClauseTable<'_> {}

impl PartialEq<[Clause]> for ClauseTable<'_> {
    fn eq(&self, other: &[Clause]) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter().copied())
    }
}

impl std::fmt::Debug for ClauseTable<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// The clauses of a [`ClauseTable`], by value.
#[derive(Clone, Debug)]
pub struct Iter<'a> {
    table: ClauseTable<'a>,
    next: usize,
    end: usize,
}

impl Iterator for Iter<'_> {
    type Item = Clause;

    #[inline]
    fn next(&mut self) -> Option<Clause> {
        if self.next == self.end {
            return None;
        }
        let c = self.table.get(self.next);
        self.next += 1;
        c
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.end - self.next;
        (n, Some(n))
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Clause> {
        if self.next == self.end {
            return None;
        }
        self.end -= 1;
        self.table.get(self.end)
    }
}

impl ExactSizeIterator for Iter<'_> {}

fn clause_size(fat: bool) -> usize {
    if fat {
        FAT_CLAUSE_SIZE
    } else {
        SMALL_CLAUSE_SIZE
    }
}

/// The `i`th `N`-byte clause of `bytes`.
#[inline]
fn chunk<const N: usize>(bytes: &[u8], i: usize) -> Option<&[u8; N]> {
    let at = i.checked_mul(N)?;
    bytes.get(at..at.checked_add(N)?)?.try_into().ok()
}

/// A fat clause (II.25.4.6): six `u32`s.
#[inline]
fn read_fat(c: &[u8; FAT_CLAUSE_SIZE]) -> Clause {
    let u32_at = |at: usize| u32::from_le_bytes([c[at], c[at + 1], c[at + 2], c[at + 3]]);
    Clause {
        flags: u32_at(0),
        try_offset: u32_at(4),
        try_length: u32_at(8),
        handler_offset: u32_at(12),
        handler_length: u32_at(16),
        class_or_filter: u32_at(20),
    }
}

/// A small clause (II.25.4.6): 16-bit flags and offsets, 8-bit lengths, a 32-bit class token
/// or filter offset.
#[inline]
fn read_small(c: &[u8; SMALL_CLAUSE_SIZE]) -> Clause {
    let u16_at = |at: usize| u16::from_le_bytes([c[at], c[at + 1]]) as u32;
    Clause {
        flags: u16_at(0),
        try_offset: u16_at(2),
        try_length: c[4] as u32,
        handler_offset: u16_at(5),
        handler_length: c[7] as u32,
        class_or_filter: u32::from_le_bytes([c[8], c[9], c[10], c[11]]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_reads_the_clauses_written_in_either_form_and_keeps_the_rest() {
        let clauses = [
            Clause {
                flags: 2,
                try_offset: 1,
                try_length: 200,
                handler_offset: 0x1234,
                handler_length: 7,
                class_or_filter: 0x0100_0002,
            },
            Clause {
                flags: 0,
                try_offset: 0xFFFF,
                try_length: 0xFF,
                handler_offset: 3,
                handler_length: 1,
                class_or_filter: 0xDEAD_BEEF,
            },
        ];
        for fat in [false, true] {
            let mut bytes = Vec::new();
            for c in &clauses {
                crate::body::encode::write_clause(c, fat, &mut bytes);
            }
            bytes.extend_from_slice(&[9, 9, 9]);
            let (table, trailing) = ClauseTable::split(&bytes, fat);
            assert_eq!(trailing, &[9, 9, 9]);
            assert_eq!(table.len(), 2);
            assert_eq!(table, clauses[..]);
            assert_eq!(table, ClauseTable::from(&clauses[..]));
            assert_eq!(table.get(1), Some(clauses[1]));
            assert_eq!(table.get(2), None);
            assert_eq!(table.get(usize::MAX), None);
            assert_eq!(table.iter().next_back(), Some(clauses[1]));
            assert_eq!(table.iter().len(), 2);
            assert_eq!(table.to_vec(), clauses);
            for t in [table, ClauseTable::from(&clauses[..])] {
                for (i, c) in clauses.iter().enumerate() {
                    let end = |a: u32, b: u32| (a as u64 + b as u64) as u32;
                    let try_block = (c.try_offset, end(c.try_offset, c.try_length));
                    let handler = (c.handler_offset, end(c.handler_offset, c.handler_length));
                    assert_eq!(t.block(i, Block::Try), Some(try_block));
                    assert_eq!(t.block(i, Block::Handler), Some(handler));
                    let filter = (c.class_or_filter, c.handler_offset);
                    assert_eq!(t.block(i, Block::Filter), Some(filter));
                }
                assert_eq!(t.block(2, Block::Try), None);
            }
        }
        let (table, trailing) = ClauseTable::split(&[1, 2, 3], true);
        assert!(table.is_empty() && trailing == [1, 2, 3]);
        assert_ne!(table, ClauseTable::from(&clauses[..1]));
        assert_eq!(ClauseTable::EMPTY, table);
    }
}
