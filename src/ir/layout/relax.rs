//! The passes of branch relaxation, in time linear in the jumps however widenings cascade.
//!
//! Relaxation widens, in each pass, every short jump whose displacement does not fit an `int8`
//! given the jumps widened by the passes before; it stops at the first pass that widens none.
//! Computed naively each pass re-measures every jump, and a chain in which each widening
//! pushes one more jump out of range takes one pass per jump: quadratic. Here the first pass
//! measures every short jump once and keeps its displacement; a later pass only visits the
//! jumps whose span holds a jump the pass before widened, and moves their displacement by the
//! three bytes each such widening adds. The passes, and the jumps each one widens, are the
//! naive algorithm's exactly.
//!
//! A short jump that still fits spans at most 128 bytes, however many jumps have been widened
//! (widening only adds bytes), so the jumps whose span holds a widened one are found among the
//! few that lie within [`REACH`] bytes of it in the code before relaxation; each is visited at
//! most once for every jump widened near it, and moved at most 43 times before it is widened
//! itself.

/// A jump (branch, `leave`, redirected `ret`) as relaxation sees it, in positions of one
/// ordering of the code (instruction indices, or byte offsets before relaxation).
#[derive(Clone, Copy, Debug)]
pub(super) struct Jump {
    /// Where it is: widening it adds three bytes here.
    pub at: u32,
    /// Where its displacement is measured from: the position after it.
    pub from: u32,
    /// Where it goes.
    pub to: u32,
}

impl Jump {
    /// How widening a jump at `w` moves this jump's displacement: +3 when `w` lies between
    /// this jump and a target after it, -3 between a target before it (or at it) and it.
    fn moved_by(self, w: u32) -> i32 {
        if self.to >= self.from {
            if self.from <= w && w < self.to { 3 } else { 0 }
        } else if self.to <= w && w < self.from {
            -3
        } else {
            0
        }
    }
}

/// Bytes, in the code before relaxation, within which the key of a widened jump lies of the
/// key of every short jump whose span holds it ([`Relax::next_pass`]): a short jump that fits
/// spans at most 128 bytes (an `int8` displacement, measured from its end), and the widened
/// jump lies inside that span, so the ends of the two jumps are at most 128 bytes apart, and
/// so are their starts when neither has a prefix (each is then 2 bytes before its end).
const REACH: i64 = 130;

/// The passes' scratch, kept between bodies.
#[derive(Debug, Default)]
pub(super) struct Relax {
    /// Whether each jump is long (from the start, or widened by a pass so far).
    long: Vec<bool>,
    /// Displacement of each short jump given the widenings applied so far.
    disp: Vec<i32>,
    /// Jumps widened by the pass before the current one.
    frontier: Vec<u32>,
    /// Jumps widened by the last pass.
    grown: Vec<u32>,
}

impl Relax {
    /// The first pass over `count` jumps: `initial(k)` is jump `k`'s displacement before
    /// relaxation, or `None` when it is long already (or not a jump relaxation may widen).
    /// Widens the short jumps that do not fit; returns them, in order.
    pub fn first_pass(&mut self, count: usize, initial: impl Fn(usize) -> Option<i64>) -> &[u32] {
        self.long.clear();
        self.disp.clear();
        self.frontier.clear();
        self.grown.clear();
        // Most bodies widen nothing and need no displacement kept: one look at each first.
        if (0..count).all(|k| initial(k).is_none_or(|d| i8::try_from(d).is_ok())) {
            return &self.grown;
        }
        self.long.reserve(count);
        self.disp.reserve(count);
        for k in 0..count {
            let (disp, long) = match initial(k).map(i8::try_from) {
                None => (0, true),
                Some(Ok(d)) => (d as i32, false),
                Some(Err(_)) => {
                    self.grown.push(k as u32);
                    (0, true)
                }
            };
            self.long.push(long);
            self.disp.push(disp);
        }
        &self.grown
    }

    /// A later pass: applies the widenings of the pass before to the short jumps whose span
    /// holds them and widens those that no longer fit. `jump(k)` describes jump `k`; `key(k)`
    /// is its byte offset in the code before relaxation (where it ends, or where it starts
    /// when it has no prefix: see [`REACH`]), nondecreasing in `k`. The key only bounds the
    /// search for the jumps a widening moves; which ones it moves, and by how much, the
    /// positions in `jump` say. Returns the jumps it widened.
    pub fn next_pass(
        &mut self,
        jump: impl Fn(usize) -> Jump,
        key: impl Fn(usize) -> i64,
    ) -> &[u32] {
        std::mem::swap(&mut self.frontier, &mut self.grown);
        self.grown.clear();
        let count = self.long.len();
        for &w in &self.frontier {
            let at = jump(w as usize).at;
            let center = key(w as usize);
            let mut k = partition_point(count, |k| key(k) < center - REACH);
            while k < count && key(k) <= center + REACH {
                // Long jumps do not move: no need to look at them (most of those near a
                // widened jump were widened with it).
                let step = if self.long[k] {
                    0
                } else {
                    jump(k).moved_by(at)
                };
                if step != 0 {
                    self.disp[k] += step;
                    if i8::try_from(self.disp[k]).is_err() {
                        self.long[k] = true;
                        self.grown.push(k as u32);
                    }
                }
                k += 1;
            }
        }
        &self.grown
    }
}

/// The first index in `0..count` for which `before` is false (`before` is true, then false).
fn partition_point(count: usize, before: impl Fn(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (0, count);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if before(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The naive passes over jumps given as (position, target, long) in a code of unit-size
    /// instructions but the jumps (2 bytes short, 5 long): the passes and the sets they widen.
    /// Start offsets of every instruction (and the end), each jump 2 or 5 bytes by `long`.
    fn offsets(sizes: &[u32], jumps: &[(u32, u32)], long: &[bool]) -> Vec<i64> {
        let mut offsets = vec![0i64];
        let mut j = 0;
        for (i, &s) in sizes.iter().enumerate() {
            let size = match jumps.get(j) {
                Some(&(p, _)) if p as usize == i => {
                    j += 1;
                    if long[j - 1] { 5 } else { 2 }
                }
                _ => s as i64,
            };
            offsets.push(offsets[i] + size);
        }
        offsets
    }

    fn naive(sizes: &[u32], jumps: &[(u32, u32)], long0: &[bool]) -> Vec<Vec<u32>> {
        let mut long = long0.to_vec();
        let mut rounds = Vec::new();
        loop {
            let offsets = offsets(sizes, jumps, &long);
            let grown: Vec<u32> = (0..jumps.len())
                .filter(|&k| {
                    let (p, t) = jumps[k];
                    !long[k] && i8::try_from(offsets[t as usize] - offsets[p as usize + 1]).is_err()
                })
                .map(|k| k as u32)
                .collect();
            if grown.is_empty() {
                return rounds;
            }
            for &k in &grown {
                long[k as usize] = true;
            }
            rounds.push(grown);
        }
    }

    fn fast(sizes: &[u32], jumps: &[(u32, u32)], long0: &[bool]) -> Vec<Vec<u32>> {
        let offsets = offsets(sizes, jumps, long0);
        let jump = |k: usize| Jump {
            at: jumps[k].0,
            from: jumps[k].0 + 1,
            to: jumps[k].1,
        };
        let mut r = Relax::default();
        let mut rounds = Vec::new();
        let mut grown = r
            .first_pass(jumps.len(), |k| {
                (!long0[k]).then(|| offsets[jumps[k].1 as usize] - offsets[jumps[k].0 as usize + 1])
            })
            .to_vec();
        while !grown.is_empty() {
            grown.sort_unstable();
            rounds.push(grown);
            grown = r
                .next_pass(jump, |k| offsets[jumps[k].0 as usize + 1])
                .to_vec();
        }
        rounds
    }

    #[test]
    fn passes_match_the_naive_passes_on_random_codes() {
        let mut next = crate::test_rng::below(0x2545_f491_4f6c_dd1du64);
        for case in 0..3000 {
            let n = 2 + next(400) as usize;
            let sizes: Vec<u32> = (0..n)
                .map(|_| 1 + next(if case % 3 == 0 { 60 } else { 9 }) as u32)
                .collect();
            let mut jumps = Vec::new();
            let mut long0 = Vec::new();
            for p in 0..n {
                if next(3) == 0 {
                    let t = if next(2) == 0 {
                        p.saturating_sub(next(40) as usize)
                    } else {
                        (p + 1 + next(40) as usize).min(n)
                    };
                    jumps.push((p as u32, t as u32));
                    long0.push(next(10) == 0);
                }
            }
            assert_eq!(
                fast(&sizes, &jumps, &long0),
                naive(&sizes, &jumps, &long0),
                "case {case}"
            );
        }
    }
}
