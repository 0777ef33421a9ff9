//! A body's EH clauses as one table read by index, without copying them out of the sections
//! they were parsed into (a body over 699,050 clauses needs more than one section).

use crate::body::{Body, Clause};

/// The clauses the verifier checks, in order: one list, or the lists of several sections.
#[derive(Debug)]
pub(super) enum Clauses<'a> {
    /// One list (at most one EH section, or code and clauses as a rewriter lays them out).
    One(&'a [Clause]),
    /// Several sections' lists, each with the index of its first clause (ascending).
    Many(Vec<(usize, &'a [Clause])>),
}

impl<'a> Clauses<'a> {
    /// The clauses of `body`'s EH sections.
    pub fn of(body: &'a Body<'a>) -> Clauses<'a> {
        let mut eh = body.sections.iter().filter(|s| s.is_eh());
        let first = eh.next().map_or(&[][..], |s| s.clauses());
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
    pub fn get(&self, i: usize) -> Option<&'a Clause> {
        match self {
            Clauses::One(list) => list.get(i),
            Clauses::Many(parts) => {
                let k = parts
                    .partition_point(|&(start, _)| start <= i)
                    .checked_sub(1)?;
                let (start, list) = parts[k];
                list.get(i - start)
            }
        }
    }

    /// How many clauses there are.
    pub fn len(&self) -> usize {
        match self {
            Clauses::One(list) => list.len(),
            Clauses::Many(parts) => parts.last().map_or(0, |&(start, list)| start + list.len()),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The clauses in order.
    pub fn iter(&self) -> impl Iterator<Item = &'a Clause> + '_ {
        let (one, many): (&'a [Clause], &[(usize, &'a [Clause])]) = match self {
            Clauses::One(list) => (list, &[]),
            Clauses::Many(parts) => (&[], parts),
        };
        one.iter()
            .chain(many.iter().flat_map(|&(_, list)| list.iter()))
    }
}
