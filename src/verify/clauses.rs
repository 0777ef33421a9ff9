//! A body's EH clauses as one table read by index, without copying them out of the sections
//! they are stored in (a body over 699,050 clauses needs more than one section).

use crate::body::{Block, Body, Clause, ClauseTable};

/// The clauses the verifier checks, in order: one table, or the tables of several sections.
#[derive(Debug)]
pub(super) enum Clauses<'a> {
    /// One table (at most one EH section, or code and clauses as a rewriter lays them out).
    One(ClauseTable<'a>),
    /// Several sections' tables, each with the index of its first clause (ascending).
    Many(Vec<(usize, ClauseTable<'a>)>),
}

impl<'a> Clauses<'a> {
    /// The clauses of `body`'s EH sections.
    pub fn of(body: &Body<'a>) -> Clauses<'a> {
        let mut eh = body.sections.iter().filter(|s| s.is_eh());
        let first = eh.next().map_or(ClauseTable::EMPTY, |s| s.clauses());
        let Some(second) = eh.next() else {
            return Clauses::One(first);
        };
        let mut parts = vec![(0, first), (first.len(), second.clauses())];
        let mut count = first.len() + second.clauses().len();
        for s in eh {
            parts.push((count, s.clauses()));
            count += s.clauses().len();
        }
        Clauses::Many(parts)
    }

    /// Clause `i`, if there is one.
    #[inline]
    pub fn get(&self, i: usize) -> Option<Clause> {
        match self {
            Clauses::One(table) => table.get(i),
            Clauses::Many(parts) => {
                let k = parts
                    .partition_point(|&(start, _)| start <= i)
                    .checked_sub(1)?;
                let (start, table) = parts[k];
                table.get(i - start)
            }
        }
    }

    /// The byte bounds of one block of clause `i` (see [`ClauseTable::block`]).
    #[inline(always)]
    pub fn block(&self, i: usize, block: Block) -> Option<(u32, u32)> {
        match self {
            Clauses::One(table) => table.block(i, block),
            Clauses::Many(parts) => {
                let k = parts
                    .partition_point(|&(start, _)| start <= i)
                    .checked_sub(1)?;
                let (start, table) = parts[k];
                table.block(i - start, block)
            }
        }
    }

    /// How many clauses there are.
    pub fn len(&self) -> usize {
        match self {
            Clauses::One(table) => table.len(),
            Clauses::Many(parts) => parts
                .last()
                .map_or(0, |&(start, table)| start + table.len()),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The clauses in order.
    pub fn iter(&self) -> impl Iterator<Item = Clause> + '_ {
        let (one, many): (ClauseTable<'a>, &[(usize, ClauseTable<'a>)]) = match self {
            Clauses::One(table) => (*table, &[]),
            Clauses::Many(parts) => (ClauseTable::EMPTY, parts),
        };
        one.iter()
            .chain(many.iter().flat_map(|&(_, table)| table.iter()))
    }
}
