//! The entry/exit transforms on a body's bytes, without lifting it.
//!
//! `prologue`, `epilogue` and `prologue-epilogue` only insert code at instruction boundaries
//! (the prologue before the first instruction, an epilogue before each `ret`); every
//! instruction keeps its bytes, and only branch displacements, `switch` tables and clause
//! offsets move. [`Layout::splice_entry_exit`] carries out the plan the IR transforms carry out
//! ([`EntryExit::plan`]: branches to the first instruction stay on it, branches to a `ret`
//! reach its epilogue, regions keep their bounds, a `ret` completing a `tail.` call gets no
//! epilogue), with the same relaxation passes from the same branch forms (`relax`), and the
//! same verifier and header encoder; but it copies the unchanged runs of code instead of
//! decoding every instruction into the IR and encoding it again.
//!
//! Every [`BranchForms`] is laid out as the IR layout lays it out: each branch starts in its
//! own form, long, or short, and relaxation widens the short ones that do not fit. A branch
//! whose form changes is written anew (a long one made short is 3 bytes shorter), so new
//! offsets are the old ones plus a growth that may be negative.
//!
//! It only answers for what it handles in full, and otherwise says why ([`SpliceDecline`]): a
//! plan choice it does not implement, a body with a prefixed branch or `ret`, extra sections
//! that are not EH tables, fewer than two instructions, anything that does not decode, a
//! target or clause bound that is not an instruction start, or a result the verifier refuses
//! is left to the IR path (which then reports). Where it answers, the answer is the IR
//! path's; `tests/it/rewrite_corpus.rs` compares the two on every body of the corpus.

use super::relax::{Jump, Relax};
use super::{Layout, LayoutInfo, LayoutOptions, encode_plain, operand_value, plain_operand_slot};
use crate::body::{Body, Clause, ClauseKind, SectionContent};
use crate::instr::{self, LENGTHS_WINDOW, Operand as RawOperand};
use crate::ir::edit::{Regions, Targets};
use crate::ir::lift::{TABLE, arg};
use crate::ir::transforms::{EntryExit, EntryExitPlan, Insertion, Outcome, TransformOptions};
use crate::ir::{BranchForms, HeaderInfo, Instr};
use crate::opcode::Opcode;
use crate::verify::Resolver;

const RET: u8 = 0x2A;

/// Something at an old offset that changes size or needs its operand rewritten.
#[derive(Clone, Copy, Debug)]
struct Event {
    /// Old offset of the instruction.
    at: u32,
    kind: Kind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A branch of the original code to old offset `target`, `was_long` in the original,
    /// `long` now (as the branch forms asked for start it, then as relaxation widens it).
    Branch {
        opcode: u8,
        target: u32,
        was_long: bool,
        long: bool,
    },
    /// A `switch` with `count` targets, read from its table in the old code when needed
    /// ([`switch_targets`]): a hostile `switch` has a target per four bytes of code, which
    /// kept would take as much memory again as the code.
    Switch { count: u32 },
    /// A `ret`: `tail` when it completes a `tail.` call. An epilogue goes before each
    /// `epilogue` one.
    Ret { tail: bool, epilogue: bool },
}

impl Kind {
    /// Bytes the instruction gains (less those it loses: a long branch made short), or that
    /// are inserted before it: `epilogue` is the epilogue's size.
    fn growth(self, epilogue: u32) -> i64 {
        match self {
            Kind::Branch { was_long, long, .. } => match (was_long, long) {
                (false, true) => 3,
                (true, false) => -3,
                (false, false) | (true, true) => 0,
            },
            Kind::Switch { .. } => 0,
            Kind::Ret { epilogue: true, .. } => epilogue as i64,
            Kind::Ret { .. } => 0,
        }
    }
}

/// The splice's buffers, kept between bodies.
#[derive(Debug, Default)]
pub(super) struct Scratch {
    /// Which bytes of the code start an instruction (its first prefix): bit `o % 64` of word
    /// `o / 64`. A bit per byte of code, cleared for each body.
    starts: Vec<u64>,
    /// [`instr::fill_lengths`] of a window of the code ([`LENGTHS_WINDOW`] bytes at most).
    lens: Vec<u8>,
    events: Vec<Event>,
    /// Growth of `events[..k]`, at `k`: negative where long branches before it were made
    /// short.
    cum: Vec<i32>,
    snippets: Snippets,
}

/// The snippets of the last call, checked and encoded: every body of a run has the same.
#[derive(Debug, Default)]
struct Snippets {
    /// What they were checked for, and whether they passed.
    checked: Option<(EntryExit, bool)>,
    prologue: Vec<Instr>,
    /// The options' epilogue, which [`Snippets::epilogue`] ends with.
    raw_epilogue: Vec<Instr>,
    /// The code before each `ret` ([`TransformOptions::epilogue_code`]).
    epilogue: Vec<Instr>,
    /// The bytes hold operands re-encoded from later snippets than the ones kept above (of
    /// the same shape): they no longer say what the bytes are, so equality with them proves
    /// nothing until the next full update.
    reencoded: bool,
    /// Where each instruction's operand lies in `pro` and `epi`: offset, width, and whether
    /// it takes only a one-byte `Var` (so that new operands are written without looking the
    /// opcodes up again).
    pro_slots: Vec<OperandSlot>,
    epi_slots: Vec<OperandSlot>,
    /// The encoded prologue and epilogue.
    pro: Vec<u8>,
    epi: Vec<u8>,
}

impl Snippets {
    /// Checks and encodes `opts`' snippets unless they are the last call's; whether they can
    /// be spliced.
    fn update(&mut self, which: EntryExit, opts: &TransformOptions) -> bool {
        let epilogue = opts.epilogue_code();
        if let Some((w, ok)) = self.checked
            && w == which
        {
            if !self.reencoded && self.prologue == opts.prologue && *self.epilogue == *epilogue {
                return ok;
            }
            // Probes by name: each method's snippets are the last one's instructions with its
            // own `ldstr` and token operands. The check looks only at opcodes and operand
            // kinds, and the encoding keeps its length, so only operand bytes change.
            if ok
                && same_shape(&self.prologue, &opts.prologue)
                && same_shape(&self.raw_epilogue, &opts.epilogue)
                && same_shape(&self.epilogue, &epilogue)
                && reencode_at(&opts.prologue, &self.pro_slots, &mut self.pro)
                && reencode_at(&epilogue, &self.epi_slots, &mut self.epi)
            {
                // The kept snippets still give the shape, which is all the next call
                // compares once this is set: copying each body's snippets would cost more.
                self.reencoded = true;
                return true;
            }
        }
        self.reencoded = false;
        self.prologue.clone_from(&opts.prologue);
        self.raw_epilogue.clone_from(&opts.epilogue);
        self.epilogue.clear();
        self.epilogue.extend_from_slice(&epilogue);
        self.pro.clear();
        self.epi.clear();
        let ok = which.snippets_ok(opts)
            && opts
                .prologue
                .iter()
                .all(|i| encode_plain(i, &mut self.pro).is_some())
            && epilogue
                .iter()
                .all(|i| encode_plain(i, &mut self.epi).is_some());
        self.pro_slots.clear();
        self.epi_slots.clear();
        if ok {
            operand_slots(&opts.prologue, &mut self.pro_slots);
            operand_slots(&epilogue, &mut self.epi_slots);
        }
        self.checked = Some((which, ok));
        ok
    }
}

/// Where an operand lies in an encoded snippet: offset, width, and whether only a one-byte
/// `Var` fits it.
type OperandSlot = (u32, u8, bool);

/// The operand slots of `code` as [`encode_plain`] encodes it, one after another.
fn operand_slots(code: &[Instr], slots: &mut Vec<OperandSlot>) {
    let mut at = 0u32;
    for ins in code {
        let (ops, width, short_var) = plain_operand_slot(ins);
        slots.push((at + u32::from(ops), width, short_var));
        at += u32::from(ops) + u32::from(width);
    }
}

/// Writes the operands of `code` at `slots` (those of an encoding of instructions with the
/// same opcodes and operand kinds): false, with the bytes in part rewritten, when an operand
/// does not fit or a slot is not in `bytes`.
fn reencode_at(code: &[Instr], slots: &[OperandSlot], bytes: &mut [u8]) -> bool {
    code.len() == slots.len()
        && code
            .iter()
            .zip(slots)
            .all(|(ins, &(at, width, short_var))| {
                let Some(value) = operand_value(&ins.operand) else {
                    return false;
                };
                if short_var && matches!(ins.operand, crate::ir::Operand::Var(v) if v > 0xFF) {
                    return false;
                }
                let (at, width) = (at as usize, width as usize);
                let Some(dst) = bytes.get_mut(at..at + width) else {
                    return false;
                };
                let value = value.to_le_bytes();
                // Fixed-size copies: operands are 0, 1, 2, 4 or 8 bytes.
                match width {
                    0 => {}
                    1 => dst[0] = value[0],
                    2 => dst.copy_from_slice(&value[..2]),
                    4 => dst.copy_from_slice(&value[..4]),
                    _ => match value.get(..width) {
                        Some(v) => dst.copy_from_slice(v),
                        None => return false,
                    },
                }
                true
            })
}

/// Whether two snippets have the same opcodes, prefixes and operand kinds (values aside).
fn same_shape(a: &[Instr], b: &[Instr]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.opcode == y.opcode
                && x.prefixes == y.prefixes
                && std::mem::discriminant(&x.operand) == std::mem::discriminant(&y.operand)
        })
}

/// The inserted blocks' sizes.
#[derive(Clone, Copy, Debug)]
struct Plan {
    /// Size of the prologue, inserted before old offset 0 (0: none).
    prologue: u32,
    /// Size of the epilogue inserted before each `ret` event marked `epilogue` (0: none).
    epilogue: u32,
    len: u32,
}

impl Scratch {
    /// Lets go of every buffer but the snippets' (which every body of a run shares).
    fn release(&mut self) {
        let snippets = std::mem::take(&mut self.snippets);
        *self = Scratch {
            snippets,
            ..Scratch::default()
        };
    }

    /// Growth of the events before old offset `p`.
    fn growth_before(&self, p: u32) -> i32 {
        self.cum[self.events.partition_point(|e| e.at < p)]
    }

    /// New offset of old offset `p` before anything inserted at `p` (where regions that end at
    /// `p` end, and where a branch to a `ret` lands).
    fn base(&self, plan: &Plan, p: u32) -> u32 {
        self.base_with(plan, p, self.growth_before(p))
    }

    /// [`Self::base`] given the growth before `p`.
    #[inline]
    fn base_with(&self, plan: &Plan, p: u32, growth: i32) -> u32 {
        // Never below 0 (a branch made 3 bytes shorter took 5 before `p`), nor past the new
        // code's size, which `sum_growth` keeps within `i32`.
        let mut at = p.wrapping_add_signed(growth);
        if p > 0 {
            at += plan.prologue;
        }
        at
    }

    /// New offset of the instruction at old offset `p` (where regions that start at `p` start).
    fn instr(&self, plan: &Plan, p: u32) -> u32 {
        let k = self.events.partition_point(|e| e.at < p);
        let epilogue = self
            .events
            .get(k)
            .is_some_and(|e| e.at == p && matches!(e.kind, Kind::Ret { epilogue: true, .. }));
        self.instr_with(plan, p, self.cum[k], epilogue)
    }

    /// [`Self::instr`] given the growth before `p`, and whether an epilogue goes before it.
    #[inline]
    fn instr_with(&self, plan: &Plan, p: u32, growth: i32, epilogue: bool) -> u32 {
        let mut at = self.base_with(plan, p, growth);
        if p == 0 {
            at += plan.prologue;
        }
        if epilogue {
            at += plan.epilogue;
        }
        at
    }

    /// Where a branch (or `switch`), event `k`, to old offset `p` lands: after the prologue,
    /// but at the start of an epilogue inserted there.
    #[inline]
    fn target(&self, plan: &Plan, p: u32, k: usize) -> u32 {
        let growth = self.cum[self.events_before_near(p, k)];
        let mut at = self.base_with(plan, p, growth);
        if p == 0 {
            at += plan.prologue;
        }
        at
    }

    /// The number of events before old offset `p` (`events.partition_point(|e| e.at < p)`),
    /// searched outward from event `k` in steps that double, up to [`NEAR`] events away, then
    /// among all the events left: most targets are near their branch (a hostile `switch` has
    /// a target every four bytes, each the next instruction), where this takes a step or two
    /// and a search of all the events twenty; a far one costs a few steps more.
    #[inline]
    fn events_before_near(&self, p: u32, k: usize) -> usize {
        let events = &self.events;
        let len = events.len();
        let k = k.min(len);
        let count_in = |lo: usize, hi: usize| lo + events[lo..hi].partition_point(|e| e.at < p);
        let mut step = 1;
        if k < len && events[k].at < p {
            // The answer is past `k`: at least `lo`.
            let mut lo = k + 1;
            loop {
                let hi = (lo + step).min(len);
                if hi == len || events[hi].at >= p {
                    return count_in(lo, hi);
                }
                lo = hi + 1;
                if step >= NEAR {
                    return count_in(lo, len);
                }
                step *= 2;
            }
        }
        // The answer is `k` or before: at most `hi`.
        let mut hi = k;
        loop {
            let lo = hi.saturating_sub(step);
            if lo == 0 || events[lo - 1].at < p {
                return count_in(lo, hi);
            }
            hi = lo - 1;
            if step >= NEAR {
                return count_in(0, hi);
            }
            step *= 2;
        }
    }

    /// Whether an instruction of the last decoded code starts at byte `o`.
    #[inline]
    fn is_start(&self, o: u32) -> bool {
        self.starts
            .get(o as usize / 64)
            .is_some_and(|w| w & (1 << (o % 64)) != 0)
    }

    /// Decodes `code`: marks instruction starts and records branches, `switch`es and `ret`s.
    /// Returns the number of instructions, or `None` for anything left to the IR path.
    fn decode(&mut self, code: &[u8]) -> Option<usize> {
        let len = code.len();
        self.starts.clear();
        self.starts.resize(len.div_ceil(64), 0);
        self.events.clear();
        // The lengths table covers a window of the code at a time: a table of the whole code
        // would take a byte per byte of it.
        let window = len.clamp(1, LENGTHS_WINDOW);
        if self.lens.len() < window {
            self.lens.resize(window, 0);
        }
        // Taken out for the walk (`slow` borrows the rest), and put back after it.
        let mut lens_buf = std::mem::take(&mut self.lens);
        let walked = self.walk(code, &mut lens_buf[..window]);
        self.lens = lens_buf;
        let n = walked?;
        // Every target must be an instruction start.
        let is_start = |t: u32| self.is_start(t);
        let targets_ok = self.events.iter().all(|e| match e.kind {
            Kind::Branch { target, .. } => is_start(target),
            Kind::Switch { count } => {
                switch_targets(code, e.at, count).all(|t| t.is_some_and(is_start))
            }
            Kind::Ret { .. } => true,
        });
        targets_ok.then_some(n)
    }

    /// The decoding loop of [`Self::decode`]: `lens` holds [`instr::fill_lengths`] of the
    /// window `code[base..end]`, filled again from the next instruction when the walk leaves
    /// it (a length at the window's end may be 0, as at the code's end: the instruction then
    /// takes the decoder's way).
    fn walk(&mut self, code: &[u8], lens: &mut [u8]) -> Option<usize> {
        let len = code.len();
        let (mut pos, mut n) = (0usize, 0usize);
        // Whether the instruction just decoded carries `tail.`.
        let mut tail = false;
        // The start bits of the 64 bytes from `64 * word_at`, stored when the walk leaves them
        // (kept in a register rather than read and written back at every instruction).
        let (mut word, mut word_at) = (0u64, 0usize);
        // A window of lengths at a time, the inner loop bounded by its end (an instruction
        // that runs past it ends the window).
        while pos < len {
            let (base, end) = (pos, len.min(pos + lens.len()));
            instr::fill_lengths(&code[base..end], lens);
            while pos < end {
                // The walk from one instruction to the next is this one load.
                let size = lens[pos - base] as usize;
                if pos / 64 != word_at {
                    self.starts[word_at] = word;
                    (word, word_at) = (0, pos / 64);
                }
                word |= 1 << (pos % 64);
                n += 1;
                let first = code[pos];
                if size == 0 || len - pos < size {
                    pos = self.slow(code, pos, &mut tail)?;
                    continue;
                }
                // `FE` is no branch or `ret` in the table (the two-byte opcodes are neither).
                let e = &TABLE[first as usize];
                let next = pos + size;
                if e.arg >= arg::BR1 {
                    let disp = if e.arg == arg::BR1 {
                        code[pos + 1] as i8 as i64
                    } else {
                        i32::from_le_bytes(code[pos + 1..pos + 5].try_into().ok()?) as i64
                    };
                    let target = u32::try_from(next as i64 + disp).ok()?;
                    self.events.push(Event {
                        at: pos as u32,
                        kind: Kind::Branch {
                            opcode: first,
                            target,
                            was_long: e.arg == arg::BR4,
                            long: e.arg == arg::BR4,
                        },
                    });
                } else if first == RET {
                    self.events.push(Event {
                        at: pos as u32,
                        kind: Kind::Ret {
                            tail,
                            epilogue: false,
                        },
                    });
                }
                tail = false;
                pos = next;
            }
        }
        if let Some(w) = self.starts.get_mut(word_at) {
            *w = word;
        }
        Some(n)
    }

    /// The instruction at `start` through the codec's decoder: a prefix run and the
    /// instruction it belongs to, or a `switch`. Returns where the next one starts.
    #[cold]
    #[inline(never)]
    fn slow(&mut self, code: &[u8], start: usize, tail: &mut bool) -> Option<usize> {
        let mut pos = start;
        let mut prefixed = false;
        *tail = false;
        loop {
            let (i, size) = instr::decode_with_len(code, pos).ok()?;
            let next = pos + size;
            if i.opcode.is_prefix() {
                prefixed = true;
                *tail |= i.opcode == Opcode::Tail;
                pos = next;
                if pos >= code.len() {
                    return None;
                }
                continue;
            }
            match i.operand {
                RawOperand::Switch(ref t) if !prefixed => {
                    self.events.push(Event {
                        at: pos as u32,
                        kind: Kind::Switch {
                            count: t.len() as u32,
                        },
                    });
                }
                // Prefixed control flow is the IR path's.
                RawOperand::Switch(_) | RawOperand::ShortBranch(_) | RawOperand::Branch(_) => {
                    return None;
                }
                // A prefixed `ret` (invalid, but decodable) is the IR path's too.
                _ if i.opcode == Opcode::Ret => return None,
                // Any other prefixed instruction is copied as it is.
                _ => {}
            }
            return Some(next);
        }
    }

    /// Marks the `ret`s an epilogue goes before, as the plan picks them
    /// ([`EntryExitPlan::epilogue_before`]). Returns whether there is one.
    fn plan_rets(&mut self) -> bool {
        let mut any = false;
        for e in &mut self.events {
            if let Kind::Ret { tail, epilogue } = &mut e.kind
                && EntryExitPlan::epilogue_before(*tail)
            {
                *epilogue = true;
                any = true;
            }
        }
        any
    }

    /// Starts every branch in the form `forms` asks for, as the IR layout places them: its
    /// own (`KeepOriginal`), long, or short (relaxation then widens those that do not fit).
    fn start_forms(&mut self, forms: BranchForms) {
        let long = match forms {
            // As decoded.
            BranchForms::KeepOriginal => return,
            BranchForms::AllLong => true,
            BranchForms::ShortestWhereFits => false,
        };
        for e in &mut self.events {
            match &mut e.kind {
                Kind::Branch { long: l, .. } => *l = long,
                Kind::Ret { .. } | Kind::Switch { .. } => {}
            }
        }
    }

    /// Sums the growth of the events into `cum`; `TooLarge` when the new code would be larger
    /// than the IR layout lays out (`i32::MAX` bytes).
    #[inline]
    fn sum_growth(&mut self, plan: &Plan) -> Result<(), SpliceDecline> {
        self.cum.clear();
        self.cum.push(0);
        let mut total = 0i64;
        for e in &self.events {
            total += e.kind.growth(plan.epilogue);
            // Exact when the check below passes: the growth before an event is at most the
            // new code's size, and above -3 for every 5 bytes of the old code (a branch made
            // short) — within `i32` both. Otherwise `cum` is not used.
            self.cum.push(total as i32);
        }
        let size = plan.len as i64 + plan.prologue as i64 + total;
        if size > i32::MAX as i64 {
            return Err(SpliceDecline::TooLarge);
        }
        Ok(())
    }

    /// Relaxation to a fixpoint, as the IR layout does it (and with its passes, in the
    /// layout's `relax`): every short branch whose displacement does not fit is widened, all at
    /// once per pass, until none is. Returns (passes, widened).
    fn relax(&mut self, plan: &Plan, relax: &mut Relax) -> Result<(u32, u32), SpliceDecline> {
        self.sum_growth(plan)?;
        let bound = self.events.len() + 2;
        let (mut passes, mut widened) = (0u32, 0u32);
        let settled = loop {
            passes += 1;
            if passes as usize > bound {
                break Err(SpliceDecline::Layout);
            }
            let events = &self.events;
            let grown = if passes == 1 {
                // Relaxation widens short branches; `ret`s and `switch`es are no jumps.
                relax.first_pass(events.len(), |k| match events[k].kind {
                    Kind::Branch { long: false, .. } => Some(self.initial_disp(plan, k)),
                    Kind::Branch { .. } | Kind::Ret { .. } | Kind::Switch { .. } => None,
                })
            } else {
                let jump = |k: usize| {
                    let e = events[k];
                    let to = match e.kind {
                        Kind::Branch { target, .. } => target,
                        // Never widened: only its place in the order matters.
                        Kind::Ret { .. } | Kind::Switch { .. } => e.at,
                    };
                    Jump {
                        at: e.at,
                        from: e.at + 1,
                        to,
                    }
                };
                // Keyed by where each event starts in the new code before relaxation (less the
                // prologue): old offsets would not do, since a long branch made short spans
                // fewer bytes than it did. In order, as the events are: an event's growth is
                // at least -3, and only a 5-byte branch's.
                let cum = &self.cum;
                relax.next_pass(jump, |k| events[k].at as i64 + cum[k] as i64)
            };
            if grown.is_empty() {
                break Ok((passes, widened));
            }
            widened += grown.len() as u32;
            for &k in grown {
                match &mut self.events[k as usize].kind {
                    Kind::Branch { long, .. } => *long = true,
                    Kind::Ret { .. } | Kind::Switch { .. } => {}
                }
            }
        };
        let settled = settled?;
        if settled.1 != 0 {
            self.sum_growth(plan)?;
        }
        Ok(settled)
    }

    /// The displacement of event `k` (a short branch) before relaxation.
    fn initial_disp(&self, plan: &Plan, k: usize) -> i64 {
        let e = self.events[k];
        let target = match e.kind {
            Kind::Branch { target, .. } => self.target(plan, target, k) as i64,
            Kind::Ret { .. } | Kind::Switch { .. } => return 0,
        };
        // Events are at distinct offsets, in order: `cum[k]` is the growth before this one.
        let next = self.instr_with(plan, e.at, self.cum[k], false) as i64 + 2;
        target - next
    }

    /// Writes the new code into `out[..]`, which holds it and 8 bytes more; returns its size.
    fn emit(&self, plan: &Plan, code: &[u8], out: &mut [u8]) -> Option<usize> {
        let pro = &self.snippets.pro[..plan.prologue as usize];
        let epi = &self.snippets.epi[..plan.epilogue as usize];
        let mut dst = 0usize;
        let mut src = 0usize;
        put(out, &mut dst, pro)?;
        for (k, e) in self.events.iter().enumerate() {
            let at = e.at as usize;
            let (opcode, target, long, old_size) = match e.kind {
                // A `ret` is copied with the code around it, after its epilogue.
                Kind::Ret {
                    epilogue: false, ..
                } => continue,
                Kind::Ret { epilogue: true, .. } => {
                    put(out, &mut dst, code.get(src..at)?)?;
                    src = at;
                    put(out, &mut dst, epi)?;
                    debug_assert_eq!(dst, self.instr(plan, e.at) as usize);
                    continue;
                }
                Kind::Branch {
                    opcode,
                    target,
                    was_long,
                    long,
                } => {
                    put(out, &mut dst, code.get(src..at)?)?;
                    src = at;
                    debug_assert_eq!(dst, self.instr(plan, e.at) as usize);
                    let opcode = match (was_long, long) {
                        (false, false) | (true, true) => opcode,
                        (false, true) => Opcode::from_byte(opcode)?.long_form().code() as u8,
                        (true, false) => Opcode::from_byte(opcode)?.short_form().code() as u8,
                    };
                    let old = if was_long { 5 } else { 2 };
                    (opcode, self.target(plan, target, k) as i64, long, old)
                }
                Kind::Switch { count } => {
                    put(out, &mut dst, code.get(src..at)?)?;
                    src = at;
                    let size = 5 + 4 * count as usize;
                    let table_at = dst + 5;
                    put(out, &mut dst, code.get(src..src + size)?)?;
                    src += size;
                    let next = dst as i64;
                    for (case, t) in switch_targets(code, e.at, count).enumerate() {
                        let d = i32::try_from(self.target(plan, t?, k) as i64 - next).ok()?;
                        let slot = table_at + 4 * case;
                        out.get_mut(slot..slot + 4)?
                            .copy_from_slice(&d.to_le_bytes());
                    }
                    continue;
                }
            };
            let next = dst as i64 + if long { 5 } else { 2 };
            let disp = target - next;
            if long {
                let d = i32::try_from(disp).ok()?.to_le_bytes();
                put(out, &mut dst, &[opcode, d[0], d[1], d[2], d[3]])?;
            } else {
                put(out, &mut dst, &[opcode, i8::try_from(disp).ok()? as u8])?;
            }
            src += old_size;
        }
        put(out, &mut dst, code.get(src..)?)?;
        Some(dst)
    }

    /// The clauses of `body` at their new offsets, as the IR maps their labels: starts after
    /// code inserted at them, ends before it.
    fn clauses(&self, plan: &Plan, body: &Body<'_>, out: &mut Vec<Clause>) -> Option<()> {
        out.clear();
        // One new clause per old one: room for exactly that many (growing by doubling would
        // leave up to as much again unused, on a body of a million clauses).
        out.reserve_exact(body.sections.iter().map(|s| s.clauses().len()).sum());
        let len = plan.len as u64;
        // A bound is an instruction start, or (for an end) the end of the code.
        let start = |o: u64| -> Option<u32> {
            let o = u32::try_from(o).ok()?;
            (self.is_start(o) && (o as u64) < len).then(|| self.instr(plan, o))
        };
        let end = |o: u64| -> Option<u32> {
            let o32 = u32::try_from(o).ok()?;
            (o == len || self.is_start(o32)).then(|| self.base(plan, o32))
        };
        for s in &body.sections {
            let SectionContent::Eh { clauses, .. } = &s.content else {
                return None;
            };
            for c in clauses {
                let kind = c.kind();
                if kind == ClauseKind::Invalid {
                    return None;
                }
                let ts = start(c.try_offset as u64)?;
                let te = end(c.try_end())?;
                let hs = start(c.handler_offset as u64)?;
                let he = end(c.handler_end())?;
                if te <= ts || he <= hs {
                    return None;
                }
                let class_or_filter = if kind == ClauseKind::Filter {
                    start(c.class_or_filter as u64)?
                } else {
                    c.class_or_filter
                };
                out.push(Clause {
                    flags: c.flags,
                    try_offset: ts,
                    try_length: te - ts,
                    handler_offset: hs,
                    handler_length: he - hs,
                    class_or_filter,
                });
            }
        }
        Some(())
    }
}

/// Gives the pages of freed heap memory back to the system (glibc's `malloc_trim`), after
/// tables of a giant body were let go: otherwise they stay resident, unused by the differently
/// sized buffers that follow. Costs a walk of the allocator's free lists; elsewhere a no-op.
fn return_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` only releases memory the allocator holds free.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Code longer than this has the scratch it needed let go before its result is verified.
const KEEP_LARGEST: usize = 1 << 16;

/// The largest step of [`Scratch::events_before_near`]'s search outward from an event.
const NEAR: usize = 16;

/// The old targets of the `switch` at old offset `at` with `count` targets, read from its
/// table in `code` (`None` for one below 0 or past `u32`; the decoder checked the table is in
/// the code).
fn switch_targets(code: &[u8], at: u32, count: u32) -> impl Iterator<Item = Option<u32>> + '_ {
    crate::instr::SwitchTable::new(code, at as usize, count)
        .targets()
        .map(|t| u32::try_from(t).ok())
}

/// Writes `bytes` at `out[*dst..]` and moves `dst` past them.
fn put(out: &mut [u8], dst: &mut usize, bytes: &[u8]) -> Option<()> {
    out.get_mut(*dst..*dst + bytes.len())?
        .copy_from_slice(bytes);
    *dst += bytes.len();
    Some(())
}

/// Why the byte-level splice left a body to the IR path, which then rewrites it (and reports
/// what it finds). The splice answers only for what it handles in full.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum SpliceDecline {
    /// The transform is not one of the entry/exit ones.
    #[error("the transform has no byte-level form")]
    Transform,
    /// The code is 2 GiB or more, or the new code would be (the IR layout then reports it).
    #[error("the code is too large")]
    TooLarge,
    /// The prologue or epilogue is code the transform refuses, or that does not encode
    /// without labels.
    #[error("the inserted code is not plain straight-line code")]
    Snippets,
    /// The plan holds a choice the splice does not implement (see
    /// [`EntryExitPlan`](crate::ir::transforms::EntryExitPlan)).
    #[error("the plan holds a choice the splice does not implement")]
    Plan,
    /// The code does not decode, has a prefixed branch or `ret`, or a branch or `switch`
    /// target that is not an instruction start.
    #[error("the code has a shape the splice does not take")]
    Code,
    /// Fewer than two instructions.
    #[error("fewer than two instructions")]
    TooShort,
    /// A displacement does not fit after relaxation, or the spliced code is not the size the
    /// plan says.
    #[error("relaxation or emission did not close")]
    Layout,
    /// Extra sections that are not EH tables, or a clause bound that is not an instruction
    /// start.
    #[error("the clauses or extra sections have a shape the splice does not take")]
    Clauses,
    /// The verifier or the header encoder refused the result.
    #[error("the result was refused")]
    Refused,
}

impl Layout {
    /// `which` applied to `body` on its bytes (see the [module](self)): appends the new body to
    /// `out` and returns what [`Rewriter::rewrite`](crate::ir::Rewriter::rewrite) with the
    /// transform would, or why it leaves the body to the IR path, appending nothing.
    pub(crate) fn splice_entry_exit<R: Resolver + ?Sized>(
        &mut self,
        body: &Body<'_>,
        which: EntryExit,
        topts: &TransformOptions,
        opts: &LayoutOptions,
        resolver: &R,
        out: &mut Vec<u8>,
    ) -> Result<(Outcome, LayoutInfo), SpliceDecline> {
        use SpliceDecline as D;
        if body.code.len() >= i32::MAX as usize {
            return Err(D::TooLarge);
        }
        let code = body.code;
        let s = &mut self.splice;
        if !s.snippets.update(which, topts) {
            return Err(D::Snippets);
        }
        // The plan's choices are the only ones the splice implements.
        let planned = which.plan(topts);
        let implemented = |at: Option<Insertion>, targets| {
            at.is_none_or(|at| at.targets == targets && at.regions == Regions::Outside)
        };
        if !implemented(planned.prologue, Targets::StayOnOld)
            || !implemented(planned.epilogue, Targets::ToNew)
        {
            return Err(D::Plan);
        }
        let n = s.decode(code).ok_or(D::Code)?;
        if n < 2 {
            return Err(D::TooShort);
        }
        s.start_forms(opts.branch_forms);
        let prologue = planned.prologue.is_some();
        let pro_len = if prologue {
            s.snippets.pro.len() as u32
        } else {
            0
        };
        let epilogue = planned.epilogue.is_some() && s.plan_rets();
        let plan = Plan {
            prologue: pro_len,
            epilogue: if epilogue {
                s.snippets.epi.len() as u32
            } else {
                0
            },
            len: code.len() as u32,
        };
        let (passes, widened) = s.relax(&plan, &mut self.relax)?;
        let total = s.base(&plan, plan.len) as usize;
        if self.code.len() < total + 16 {
            self.code.resize(total + 16, 0);
        }
        let written = s.emit(&plan, code, &mut self.code).ok_or(D::Layout)?;
        if written != total {
            return Err(D::Layout);
        }
        self.code_len = total;
        s.clauses(&plan, body, &mut self.clauses)
            .ok_or(D::Clauses)?;
        // A giant body's tables go before the result is verified, and the verifier's before
        // the result is written out.
        if code.len() > KEEP_LARGEST {
            s.release();
            self.relax = Default::default();
            return_freed_memory();
        }
        let mut header = HeaderInfo {
            max_stack: body.max_stack(),
            init_locals: body.init_locals(),
            local_sig: body.local_sig(),
        };
        // As the IR transform does: an epilogue that stores the return value in an added
        // local gives the method the new local signature.
        if epilogue && let Some(new) = topts.new_locals {
            header.local_sig = new.local_sig;
            header.init_locals |= new.init_locals;
        }
        let max_stack = self.check(header.max_stack, opts, resolver);
        self.verifier.release_large();
        let max_stack = max_stack.map_err(|_| D::Refused)?;
        self.write_body(max_stack, &header, Vec::new(), out)
            .map_err(|_| D::Refused)?;
        let outcome = if prologue || epilogue {
            Outcome::Changed
        } else {
            Outcome::Unchanged
        };
        Ok((
            outcome,
            LayoutInfo {
                code_size: total as u32,
                passes,
                widened,
                max_stack,
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The search outward from an event finds what a search of all the events finds, from
    /// every event and for every offset, on sets of events with gaps of every size.
    #[test]
    fn the_search_near_an_event_is_the_search_of_all() {
        let mut next = crate::test_rng::below(0x9e37_79b9_7f4a_7c15u64);
        for case in 0..200 {
            let mut s = Scratch::default();
            let mut at = 0u32;
            for _ in 0..next(70) {
                at += 1 + next(if case % 2 == 0 { 4 } else { 300 }) as u32;
                s.events.push(Event {
                    at,
                    kind: Kind::Switch { count: 0 },
                });
            }
            for k in 0..=s.events.len() + 1 {
                for p in 0..=at + 2 {
                    assert_eq!(
                        s.events_before_near(p, k),
                        s.events.partition_point(|e| e.at < p),
                        "case {case}, from {k}, offset {p}"
                    );
                }
            }
        }
    }
}
