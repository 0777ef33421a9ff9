//! A single forward pass that accepts the common body outright.
//!
//! III.1.7.5 requires that one forward scan can infer the stack depth at every instruction:
//! after an unconditional transfer the depth is the one an earlier forward branch recorded
//! there, or 0. This pass does exactly that scan while it decodes — no instruction array, no
//! worklist — and checks every rule the full passes would. Protected regions are followed in
//! code order beside it ([`regions`]): a handler or filter starts a run with its entry depth,
//! and each crossing of a region bound and each branch is held to the region rules. It only
//! ever says "valid, and this is the MaxStack the full passes compute" or "not shown here":
//! anything it does not handle (an unusual EH table, `tail.`, `jmp`, a path the full passes
//! would not walk) or any fault sends the body to the full passes, which alone report. So
//! findings are the full passes' by construction; what this pass must get right is never to
//! accept a body they reject, or with another depth ([`super::single_pass_agrees`] checks
//! both).

mod regions;

use super::clauses::Clauses;
use super::flow::{TOKEN_BATCH, entry, prefix_allows, window};
use super::{Ctx, Resolver, fx};
use crate::instr::LENGTHS_WINDOW;
use crate::opcode::{Flow, Opcode, OperandKind};
use regions::{OUTSIDE, Regions};

/// Per-byte marks (0: nothing known), two bytes each. The low bits hold a depth: the one before
/// the instruction starting there ([`START`]), or the one a forward branch expects there
/// ([`FORWARD`]).
const START: u16 = 1 << 15;
/// The instruction follows a prefix: not a branch target.
const AFTER_PREFIX: u16 = 1 << 14;
const FORWARD: u16 = 1 << 13;
/// A region begins or ends here ([`regions::Bound`]).
const BOUNDARY: u16 = 1 << 12;
const DEPTH: u16 = BOUNDARY - 1;
/// A deeper stack (4,095) goes to the full passes, so that a depth always fits in [`DEPTH`].
const MAX_DEPTH: u32 = DEPTH as u32;
/// Longer code goes to the full passes, so that offsets fit in `u32` with room to spare.
const MAX_LEN: usize = 1 << 28;

/// Prefixes in a row that the pass follows; longer runs go to the full passes.
const MAX_PREFIXES: usize = 4;

/// The pass's buffers, kept between bodies (they grow to the largest body so far).
#[derive(Debug, Default)]
pub(super) struct SinglePass {
    /// One mark per byte of code.
    marks: Vec<u16>,
    /// (branch, target) of every branch but `switch`, in code order.
    edges: Vec<(u32, u32)>,
    /// Every `switch`, in code order. Its targets are read from its table again when needed
    /// ([`switch_targets`]): the table of a hostile `switch` holds a target per four bytes of
    /// code, which kept would take as much memory again as the code.
    switches: Vec<u32>,
    /// (first byte, first entry of `edges`, first entry of `switches`) of each run of code
    /// entered other than by falling through: the entry point and each instruction after an
    /// unconditional transfer.
    runs: Vec<(u32, u32, u32)>,
    /// The first byte of each run known to be reached, for the reachability check.
    low: Vec<u32>,
    work: Vec<(u32, u32, u32)>,
    tokens: Vec<(OperandKind, u32)>,
    /// [`crate::instr::fill_lengths`] of a window of the code, [`LENGTHS_WINDOW`] bytes at most.
    lens: Vec<u8>,
    /// The body's regions, when it has any.
    regions: Regions,
    /// The runs that start at a handler or filter: reached by exceptions.
    roots: Vec<u32>,
}

impl SinglePass {
    /// The MaxStack of `buf[..len]` with the EH table `clauses`, if the body is valid by every
    /// rule the full passes apply; `None` when it is not, or when this pass cannot tell. Bytes
    /// of `buf` past `len` may be read but never decide anything (as in `flow::decode_into`).
    /// Inlined into
    /// the verifier's loop wherever that is instantiated (a crate using the verifier with its
    /// own resolver otherwise may or may not get it inlined, as other code around it changes).
    #[inline]
    pub(super) fn accept<R: Resolver + ?Sized>(
        &mut self,
        buf: &[u8],
        len: usize,
        clauses: &Clauses<'_>,
        ctx: &Ctx,
        r: &R,
    ) -> Option<u32> {
        if len == 0 || len >= MAX_LEN || buf.len() < len {
            return None;
        }
        if self.marks.len() < len {
            self.marks.resize(len, 0);
        }
        self.marks[..len].fill(0);
        let regions = !clauses.is_empty();
        if regions {
            if !self.regions.build(clauses, len, r) {
                return None;
            }
            for b in &self.regions.bounds {
                self.marks[b.off as usize] |= BOUNDARY;
            }
        }
        // The lengths table saves a load per instruction; it covers a window of the code at a
        // time, since one of the whole code would take a byte per byte of it.
        if self.lens.len() < len.min(LENGTHS_WINDOW) {
            self.lens.resize(len.min(LENGTHS_WINDOW), 0);
        }
        if self.tokens.len() < TOKEN_BATCH {
            self.tokens.resize(TOKEN_BATCH, (OperandKind::None, 0));
        }
        self.edges.clear();
        self.switches.clear();
        self.runs.clear();
        self.roots.clear();
        let (max, pending, ntok) = self.scan(buf, len, regions, ctx, r)?;
        // Every target must be an instruction start that does not follow a prefix; backward
        // ones were checked as they were met, forward ones can only be checked now.
        let (marks, code) = (&self.marks[..len], &buf[..len]);
        let start =
            |t: u32| marks.get(t as usize).map(|&m| m & (START | AFTER_PREFIX)) == Some(START);
        if !self.edges.iter().all(|&(_, t)| start(t))
            || !self
                .switches
                .iter()
                .all(|&s| switch_targets(code, s).all(start))
        {
            return None;
        }
        if pending && !self.all_runs_reached(code) {
            return None;
        }
        if !r.tokens_pass(&self.tokens[..ntok]) {
            return None;
        }
        Some(max)
    }

    /// Lets go of buffers sized for code longer than [`super::eh::KEEP_LARGEST`] bytes (the
    /// next body that long allocates them again).
    pub(super) fn release_large(&mut self) {
        if self.marks.len() > super::eh::KEEP_LARGEST {
            *self = SinglePass::default();
        }
    }

    /// Decodes and follows the depth in one pass (with `regions`, the regions too); returns the
    /// largest depth, whether some run started after an unconditional transfer with no forward
    /// branch to it (its depth is taken as 0, and whether anything reaches it is left to
    /// [`Self::all_runs_reached`]), and the number of token operands left in `tokens`.
    #[inline(never)]
    fn scan<R: Resolver + ?Sized>(
        &mut self,
        buf: &[u8],
        len: usize,
        regions: bool,
        ctx: &Ctx,
        r: &R,
    ) -> Option<(u32, bool, usize)> {
        let marks = &mut self.marks[..len];
        // The lengths of the window `buf[base..end]`.
        let lens = &mut self.lens[..len.min(LENGTHS_WINDOW)];
        // Written by index; a full batch is passed to the resolver and the buffer reused.
        let tokens = &mut self.tokens[..TOKEN_BATCH];
        let locals = ctx.locals.unwrap_or(u32::MAX);
        let args = ctx.method.map_or(u32::MAX, |m| m.arg_count as u32);
        let limits = [u32::MAX, locals, args, u32::MAX];
        self.runs.push((0, 0, 0));
        let mut st = Scan {
            edges: &mut self.edges,
            switches: &mut self.switches,
            runs: &mut self.runs,
            regions: regions.then_some(&mut self.regions),
            roots: &mut self.roots,
            bound: 0,
            region: OUTSIDE,
            d: 0,
            max: 0,
            limit: ctx
                .declared_max_stack
                .map_or(MAX_DEPTH, |m| MAX_DEPTH.min(m.into())),
            pending: false,
            ended: 0,
            prefixes: [Opcode::Nop; MAX_PREFIXES],
            np: 0,
        };
        let (mut d, mut max, limit) = (0u32, 0u32, st.limit);
        let mut ntok = 0;
        let mut pos = 0;
        // A window of lengths at a time; the inner loop's bound is the window's end, so an
        // instruction costs no second comparison (one that runs past the window ends it).
        while pos < len {
            let (base, end) = (pos, len.min(pos + lens.len()));
            crate::instr::fill_lengths(&buf[base..end], lens);
            while pos < end {
                let w = window(buf, pos);
                let e = entry(w, len - pos)?;
                // The same length as `e`'s where it is not 0; the next step waits for this
                // load only, not for the window and then the table.
                let l = lens[pos - base] as usize;
                let next = pos + if l != 0 { l } else { e.len as usize };
                let arg = (w >> e.shift) as u32 & e.mask;
                if (arg & e.vmask) + e.imm as u32 >= limits[e.var as usize & 3] {
                    return None;
                }
                // Stored whatever the instruction and counted only for a token: a branch on
                // the kind would be mispredicted about as often as tokens come.
                if ntok == TOKEN_BATCH {
                    if !r.tokens_pass(tokens) {
                        return None;
                    }
                    ntok = 0;
                }
                tokens[ntok] = (e.operand, arg);
                ntok += usize::from(e.check == fx::check::TOKEN);
                // The short way: nothing is known about this byte yet but perhaps the depth a
                // forward branch brings, which is this one (no prefix before it, no region bound
                // here), and the instruction only adjusts the depth, by its opcode or its
                // callee's signature.
                let m = marks[pos];
                let fx = e.fx;
                if m & !(FORWARD | DEPTH) == 0
                    && fx.kind & (fx::PLAIN | fx::CALL) != 0
                    && (m == 0 || (m & DEPTH) as u32 == d)
                {
                    marks[pos] = START | d as u16;
                    let (pops, pushes) = if fx.kind & fx::PLAIN != 0 {
                        (fx.pops as u32, fx.pushes as u32)
                    } else {
                        let sig = r.call_sig(e.op, arg)?;
                        (sig.pops(e.op), sig.pushes(e.op))
                    };
                    if d < pops {
                        return None;
                    }
                    d = d - pops + pushes;
                    if d > max {
                        if d > limit {
                            return None;
                        }
                        max = d;
                    }
                    pos = next;
                    continue;
                }
                (st.d, st.max) = (d, max);
                pos = st.step(marks, m, e, w, pos, next, buf, ctx, r)?;
                (d, max) = (st.d, st.max);
            }
        }
        // Falling off the end, or a trailing prefix, is a fault; so is a region bound that is
        // no instruction start, or a filter that does not end in `endfilter`.
        if st.ended != len || st.np != 0 {
            return None;
        }
        if let Some(rg) = &st.regions
            && (st.bound != rg.bounds.len() || !rg.filters_ended())
        {
            return None;
        }
        Some((max, st.pending, ntok))
    }

    /// Whether every run is reached from the entry point at its first instruction. A branch
    /// into a run reaches the rest of it, and the branches there; without this check a run
    /// that only unreachable code branches to would count towards MaxStack, which the full
    /// passes (which walk reachable code only) would not do. Each edge is followed once.
    #[inline(never)]
    fn all_runs_reached(&mut self, code: &[u8]) -> bool {
        let (runs, edges, switches) = (&self.runs, &self.edges, &self.switches);
        self.low.clear();
        self.low.resize(runs.len(), u32::MAX);
        self.low[0] = 0;
        self.work.clear();
        self.work.push((0, 0, u32::MAX));
        // Handlers and filters are reached by exceptions.
        for &k in &self.roots {
            let start = runs[k as usize].0;
            self.low[k as usize] = start;
            self.work.push((k, start, u32::MAX));
        }
        // Run `k` is newly reached from byte `lo` up to `hi` (where it was reached before).
        while let Some((k, lo, hi)) = self.work.pop() {
            let k = k as usize;
            let first = runs[k].1 as usize;
            let end = runs.get(k + 1).map_or(edges.len(), |r| r.1 as usize);
            let run_edges = &edges[first..end];
            let a = run_edges.partition_point(|e| e.0 < lo);
            let b = run_edges.partition_point(|e| e.0 < hi);
            let first = runs[k].2 as usize;
            let end = runs.get(k + 1).map_or(switches.len(), |r| r.2 as usize);
            let run_switches = &switches[first..end];
            let sa = first + run_switches.partition_point(|&s| s < lo);
            let sb = first + run_switches.partition_point(|&s| s < hi);
            let targets = run_edges[a..b].iter().map(|e| e.1).chain(
                switches[sa..sb]
                    .iter()
                    .flat_map(|&s| switch_targets(code, s)),
            );
            for t in targets {
                let j = runs.partition_point(|r| r.0 <= t) - 1;
                if t < self.low[j] {
                    self.work.push((j as u32, t, self.low[j]));
                    self.low[j] = t;
                }
            }
        }
        runs.iter().zip(&self.low).all(|(r, &low)| low == r.0)
    }
}

/// What the instructions off the short way (branches, calls, returns, prefixes, branch
/// targets) update.
struct Scan<'a> {
    edges: &'a mut Vec<(u32, u32)>,
    switches: &'a mut Vec<u32>,
    runs: &'a mut Vec<(u32, u32, u32)>,
    /// The body's regions, if it has any.
    regions: Option<&'a mut Regions>,
    roots: &'a mut Vec<u32>,
    /// The next region bound to meet.
    bound: usize,
    /// The innermost region of the instruction being scanned.
    region: u8,
    d: u32,
    max: u32,
    limit: u32,
    pending: bool,
    /// Where the last instruction that ends a block ends: the code must end there.
    ended: usize,
    /// The prefixes before the next instruction.
    prefixes: [Opcode; MAX_PREFIXES],
    np: usize,
}

impl Scan<'_> {
    /// The instruction at `pos`, whose byte had mark `m`, off the short way; returns where the
    /// next one starts.
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn step<R: Resolver + ?Sized>(
        &mut self,
        marks: &mut [u16],
        m: u16,
        e: &fx::Dec,
        w: u64,
        pos: usize,
        mut next: usize,
        buf: &[u8],
        ctx: &Ctx,
        r: &R,
    ) -> Option<usize> {
        let (fx, op, d) = (e.fx, e.op, self.d);
        // A forward branch expects this depth here (after an unconditional transfer, `d` was
        // taken from it).
        if m & FORWARD != 0 && (m & DEPTH) as u32 != d {
            return None;
        }
        marks[pos] = START | (m & AFTER_PREFIX) | d as u16;
        if m & BOUNDARY != 0 {
            self.cross(m, pos, d)?;
        }
        if fx.flow == Flow::Prefix {
            if op == Opcode::Tail || self.np == MAX_PREFIXES || next >= marks.len() {
                return None;
            }
            self.prefixes[self.np] = op;
            self.np += 1;
            marks[next] |= AFTER_PREFIX;
            return Some(next);
        }
        if self.np != 0 {
            if !self.prefixes[..self.np]
                .iter()
                .all(|&p| prefix_allows(p, op))
            {
                return None;
            }
            self.np = 0;
        }
        // Regions' instructions and `jmp` have rules of their own; so does `localloc` with
        // more than its size on the stack, and `ret` inside a region.
        if fx.kind & fx::SPECIAL != 0 {
            let ok = match op {
                Opcode::Ret => self.region == OUTSIDE,
                Opcode::Localloc => d == 1,
                Opcode::Endfinally | Opcode::Rethrow | Opcode::Endfilter => {
                    let region = self.region;
                    self.regions
                        .as_mut()
                        .is_some_and(|rg| rg.may_place(op, region, next, d))
                }
                // `jmp` (and any other placement rule) is the full passes'.
                _ => false,
            };
            if !ok {
                return None;
            }
        }
        let (pops, pushes) = if fx.pops < fx::SIG && fx.pushes < fx::SIG {
            (fx.pops as u32, fx.pushes as u32)
        } else if fx.pops == fx::POP_ALL {
            (d, 0)
        } else if op == Opcode::Ret {
            if !ret_ok(ctx, d) {
                return None;
            }
            (d, 0)
        } else {
            let sig = r.call_sig(op, (w >> e.shift) as u32 & e.mask)?;
            (sig.pops(op), sig.pushes(op))
        };
        if d < pops {
            return None;
        }
        let d = d - pops + pushes;
        if d > self.max {
            if d > self.limit {
                return None;
            }
            self.max = d;
        }
        self.d = d;
        if fx.kind & fx::TARGETS != 0 {
            let disp = match e.arg {
                fx::arg::BR8 => (w >> 8) as u8 as i8 as i64,
                fx::arg::BR32 => (w >> 8) as u32 as i32 as i64,
                _ => {
                    let count = (w >> 8) as u32 as usize;
                    if count > (marks.len() - next) / 4 {
                        return None;
                    }
                    let table = &buf[next..next + 4 * count];
                    next += table.len();
                    self.switches.push(pos as u32);
                    for c in table.chunks_exact(4) {
                        let disp = i32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                        let t = self.branch(marks, pos, next as i64 + disp as i64, d)?;
                        self.may_transfer(t, false)?;
                    }
                    return Some(next);
                }
            };
            let t = self.branch(marks, pos, next as i64 + disp, d)?;
            self.may_transfer(t, matches!(op, Opcode::Leave | Opcode::Leave_S))?;
            self.edges.push((pos as u32, t));
        }
        if fx.flow.ends_block() {
            self.ended = next;
            // The next instruction starts a run: its depth is the one a forward branch
            // recorded, or 0 (III.1.7.5).
            if let Some(&m) = marks.get(next) {
                let (e, s) = (self.edges.len() as u32, self.switches.len() as u32);
                self.runs.push((next as u32, e, s));
                if let Some(entry) = self.handler_entry(m, next) {
                    // A handler or filter, reached by exceptions with its entry depth (which
                    // counts against MaxStack before any instruction runs).
                    self.roots.push(self.runs.len() as u32 - 1);
                    if entry > self.max {
                        if entry > self.limit {
                            return None;
                        }
                        self.max = entry;
                    }
                    self.d = entry;
                } else if m & FORWARD != 0 {
                    self.d = (m & DEPTH) as u32;
                } else {
                    self.d = 0;
                    self.pending = true;
                }
            }
        }
        Some(next)
    }

    /// The region bound at `pos` (whose mark is `m`, the depth before it `d`), met in code
    /// order: the region rules for falling through it, a handler's or filter's entry, and a
    /// try's entry depth.
    #[inline(never)]
    fn cross(&mut self, m: u16, pos: usize, d: u32) -> Option<()> {
        let rg = self.regions.as_deref()?;
        // A bound passed over was inside an instruction.
        let b = *rg
            .bounds
            .get(self.bound)
            .filter(|b| b.off as usize == pos)?;
        self.bound += 1;
        if m & AFTER_PREFIX != 0 {
            return None;
        }
        let to = rg.innermost(pos as u32);
        // Control falls through into `pos` unless it is the start of a run (the entry point
        // comes from outside every region).
        let fell = pos == 0 || self.ended != pos;
        if fell && !rg.may_branch(self.region, to, pos as u32) {
            return None;
        }
        // A handler is entered only by an exception (its depth was set as its run began).
        if b.entry.is_some() && (fell || m & FORWARD != 0) {
            return None;
        }
        if b.try_start && d != 0 && !(d == 1 && b.entry == Some(1)) {
            return None;
        }
        self.region = to;
        Some(())
    }

    /// The entry depth of the handler or filter starting at `next`, whose mark is `m`, if one
    /// does.
    fn handler_entry(&self, m: u16, next: usize) -> Option<u32> {
        if m & BOUNDARY == 0 {
            return None;
        }
        let b = self.regions.as_deref()?.bounds.get(self.bound)?;
        if b.off as usize == next {
            b.entry
        } else {
            None
        }
    }

    /// The region rules for a branch (a `leave` with `leave`) from the current instruction to
    /// byte `t`.
    #[inline]
    fn may_transfer(&self, t: u32, leave: bool) -> Option<()> {
        let Some(rg) = self.regions.as_deref() else {
            return Some(());
        };
        let to = rg.innermost(t);
        let ok = if leave {
            rg.may_leave(self.region, to, t)
        } else {
            rg.may_branch(self.region, to, t)
        };
        ok.then_some(())
    }

    /// A branch at `from` to byte `target` with depth `d`: the depth is compared with the
    /// target's (backward), or recorded or compared there (forward). Returns the target, for
    /// the caller to keep.
    #[inline]
    fn branch(&mut self, marks: &mut [u16], from: usize, target: i64, d: u32) -> Option<u32> {
        if target < 0 || target >= marks.len() as i64 {
            return None;
        }
        let t = target as usize;
        let m = marks[t];
        if t <= from {
            // Backward: an instruction start that does not follow a prefix, at this depth.
            if m & (START | AFTER_PREFIX) != START || (m & DEPTH) as u32 != d {
                return None;
            }
        } else if m & FORWARD != 0 {
            if (m & DEPTH) as u32 != d {
                return None;
            }
        } else {
            marks[t] = m | FORWARD | d as u16;
        }
        Some(t as u32)
    }
}

/// The targets of the `switch` at byte `pos` of `code`, as byte offsets (the scan checked them
/// when it met the `switch`).
fn switch_targets(code: &[u8], pos: u32) -> impl Iterator<Item = u32> + '_ {
    // Offsets outside the code wrap to values no instruction starts at.
    crate::instr::SwitchTable::read(code, pos as usize)
        .targets()
        .map(|t| t as u32)
}

/// The depth a `ret` needs: 0 in a void method, 1 otherwise (anything when the signature is
/// unknown).
fn ret_ok(ctx: &Ctx, d: u32) -> bool {
    match ctx.method {
        None => true,
        Some(m) => d == !m.returns_void as u32,
    }
}
