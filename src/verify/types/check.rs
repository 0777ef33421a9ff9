//! The type pass over one body: a worklist dataflow of evaluation-stack types (III.1.8.1), the
//! rule of each instruction (Partition III) as its transfer function, and the merge at join
//! points. It runs on bodies the structural verifier accepted, so branch targets, stack depths
//! and regions are sound; it still never panics on what it reads.

use super::system::{Ans, TypeSystem};
use super::ty::{Prim, TyId, TyNode, TypeKey};
use super::vtype::{
    Home, Unmergeable, V, fits, fits_v, merge, name, names_apart, prim_of, stack_of, type_of,
};
use crate::body::{Body, ClauseKind};
use crate::image::tables::Token;
use crate::opcode::{ALL, DECODE, Flow, Opcode, OperandKind, Pops, Pushes};
use crate::verify::{Code, Diagnostic};

/// Most findings kept per method; the rest are counted, not described.
const MAX_FINDINGS: usize = 64;
/// Visits of block starts per block before the dataflow gives up (it converges in a few on
/// real code: merges only climb the class hierarchy).
const VISITS_PER_BLOCK: usize = 32;

/// What the checker's decoder needs of one opcode, by decoding slot: the first byte, or 256
/// plus the byte after `FE`. Built from [`ALL`] and [`DECODE`].
#[derive(Clone, Copy)]
struct Slot {
    /// The opcode; `None` for an undefined encoding (and for the `FE` escape itself).
    opcode: Option<Opcode>,
    flow: Flow,
    /// Opcode and operand bytes (for `switch`, without its table).
    len: u8,
    /// Mask of the operand bytes read as the integer operand (0: none is kept).
    mask: u32,
    /// The sign bit of the integer operand when it is a signed byte (`0x80`), else 0: the
    /// operand is sign-extended as `(x ^ sign) - sign`, without a branch.
    sign: u32,
    /// The operand is a branch displacement or a switch table.
    target: Target,
    /// The instruction after this one starts a block: the flow ends the block
    /// ([`Flow::ends_block`]) or the opcode has a target (a `switch` only when its table is not
    /// empty, which the decoder settles).
    transfer: bool,
}

/// How an opcode's operand names its targets.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Target {
    /// It has none.
    No,
    /// A one-byte displacement.
    Short,
    /// A four-byte displacement.
    Long,
    /// A `switch` table.
    Switch,
}

/// The [`Slot`] of every opcode (undefined encodings have no opcode).
static SLOTS: [Slot; 512] = {
    let mut slots = [Slot {
        opcode: None,
        flow: Flow::Next,
        len: 0,
        mask: 0,
        sign: 0,
        target: Target::No,
        transfer: false,
    }; 512];
    let mut i = 0;
    while i < ALL.len() {
        let info = &ALL[i];
        let code = info.opcode as u16;
        let slot = if code >> 8 == 0xFE {
            256 + (code & 0xFF) as usize
        } else {
            code as usize
        };
        let entry = if code >> 8 == 0xFE {
            DECODE.two[(code & 0xFF) as usize]
        } else {
            DECODE.one[code as usize]
        };
        let (mask, sign, target) = match info.operand {
            OperandKind::None | OperandKind::I8 | OperandKind::ShortR | OperandKind::R => {
                (0, 0, Target::No)
            }
            OperandKind::ShortI => (0xFF, 0x80, Target::No),
            OperandKind::ShortLocal | OperandKind::ShortArg => (0xFF, 0, Target::No),
            OperandKind::Local | OperandKind::Arg => (0xFFFF, 0, Target::No),
            OperandKind::I
            | OperandKind::Tok
            | OperandKind::Type
            | OperandKind::Field
            | OperandKind::Method
            | OperandKind::String
            | OperandKind::Sig => (u32::MAX, 0, Target::No),
            OperandKind::ShortBrTarget => (0xFF, 0x80, Target::Short),
            OperandKind::BrTarget => (u32::MAX, 0, Target::Long),
            OperandKind::Switch => (u32::MAX, 0, Target::Switch),
        };
        assert!(
            entry.len as usize <= LONGEST,
            "an instruction longer than LONGEST"
        );
        slots[slot] = Slot {
            opcode: entry.opcode,
            flow: info.flow,
            len: entry.len,
            mask,
            sign,
            target,
            transfer: info.flow.ends_block() || !matches!(target, Target::No),
        };
        i += 1;
    }
    slots
};

/// Marks an instruction without an entry state.
const NO_ENTRY: u32 = u32::MAX;

/// The longest fixed-length instruction: `ldc.i8` and `ldc.r8`, an opcode byte and eight
/// operand bytes (checked as [`SLOTS`] is built); longer than a two-byte opcode with a
/// four-byte operand.
const LONGEST: usize = 9;

/// Why a method was checked only in part.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Partial {
    /// Its own signature could not be read.
    Signature,
    /// Its local signature could not be read.
    Locals,
    /// A type it uses could not be resolved (a reference not found, or unreadable).
    UnresolvedType,
    /// A method or field it uses could not be read.
    UnresolvedMember,
    /// The dataflow did not settle within its bound.
    NoConvergence,
}

impl Partial {
    /// Stable name for reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Partial::Signature => "signature",
            Partial::Locals => "locals",
            Partial::UnresolvedType => "unresolved-type",
            Partial::UnresolvedMember => "unresolved-member",
            Partial::NoConvergence => "no-convergence",
        }
    }
}

/// One decoded instruction: 16 bytes, so that four fit a cache line.
#[derive(Clone, Copy, Debug)]
struct Ins {
    off: u32,
    /// Integer operand: variable index, token, or where the targets are in `targets`: a
    /// branch's one target, a `switch`'s count followed by its targets.
    arg: u32,
    /// Where the entry state starts in the checker's `pool`, [`NO_ENTRY`] when the
    /// instruction has none yet; its length is in `entry_len`. Kept here rather than in an
    /// array of its own, which every body would fill again.
    entry: u32,
    op: Opcode,
    /// The opcode's flow kind (read from the table once, at decoding).
    flow: Flow,
    /// A block start: a target, or after a transfer (where states merge; handler entries
    /// are seeded).
    start: bool,
}

const _: () = assert!(std::mem::size_of::<Ins>() == 16);

/// What the method's own signature and locals say.
#[derive(Debug, Default)]
struct Frame {
    args: Vec<TyId>,
    locals: Vec<TyId>,
    ret: TyId,
    /// Set for an instance constructor of a reference type, whose `this` is followed from
    /// uninitialised to initialised (III.1.8.1.4).
    ctor: Option<Ctor>,
    /// Set for an instance constructor whose class is not known (a base class that did not
    /// resolve): its constructor calls are not judged.
    ctor_unknown: bool,
    /// The method has a `this`: argument 0.
    has_this: bool,
}

/// The class of an instance constructor whose `this` is followed.
#[derive(Clone, Copy, Debug)]
struct Ctor {
    /// The constructor's class.
    own: TypeKey,
    /// Its base class, when known.
    base: Option<TypeKey>,
    /// The class is `System.Object`, whose constructor has no constructor to call.
    object: bool,
}

/// A method bound to the method's own `this` without dispatch, by `call` or by `ldftn` for a
/// delegate: allowed unless `this` is stored to or has its address taken in the method.
#[derive(Clone, Copy, Debug)]
struct OwnBind {
    /// The call's or the delegate `newobj`'s offset.
    off: u32,
    /// The method bound.
    method: Token,
    /// What `this` holds.
    this: V,
    /// By `ldftn` for a delegate (else by `call`).
    delegate: bool,
}

/// A protected region's entry and the handler entries it gives its `this` state to.
#[derive(Clone, Copy, Debug)]
struct TryEntry {
    /// The try's first instruction.
    start: u32,
    /// The handler's (or the filter's) first instruction.
    handler: u32,
}

/// A reusable type checker: keeps its buffers between bodies.
#[derive(Debug, Default)]
pub struct TypeChecker {
    ins: Vec<Ins>,
    /// Branch targets as instruction indices (`u32::MAX`: none starts there); a `switch`'s
    /// count before its own.
    targets: Vec<u32>,
    /// Where the `switch` counts are in `targets`, in order.
    counts_at: Vec<u32>,
    /// The length of each instruction's entry state, written with its `entry`: read only
    /// where `entry` is set in the current body, so never cleared.
    entry_len: Vec<u32>,
    /// Instruction index by byte offset (`u32::MAX` inside an instruction).
    at: Vec<u32>,
    /// How many instructions are block starts.
    starts: usize,
    /// The entry states' slots, one run per block start.
    pool: Vec<V>,
    work: Vec<u32>,
    stack: Vec<V>,
    frame: Frame,
    out: Vec<Diagnostic>,
    dropped: usize,
    partial: Option<Partial>,
    reported_at: u32,
    /// Set by a step after which the path cannot be followed (a callee of unknown arity).
    abandon: bool,
    /// In a followed constructor: whether each entry state's `this` is initialised (on every
    /// path to it), by instruction.
    entry_init: Vec<bool>,
    /// Whether the stack slots holding the method's own `this` are followed (`pool_this`,
    /// `this_slots`): always in a followed constructor; in another instance method only when
    /// a call needs it ([`TypeChecker::base_call`]), on a second run.
    track_this: bool,
    /// Set by a call whose `this` must be the method's own: the method is run again with
    /// `this` followed.
    this_needed: bool,
    /// Whether the run met `starg 0` or `ldarga 0`: `this` may hold another object.
    this_stored: bool,
    /// Bindings of methods to the method's own `this` without dispatch, judged after the run
    /// ([`TypeChecker::settle_own_binds`]).
    own_binds: Vec<OwnBind>,
    /// When `this` is followed: whether each slot of `pool` holds the method's `this`.
    pool_this: Vec<bool>,
    /// When `this` is followed: whether each slot of the current stack holds `this`.
    this_slots: Vec<bool>,
    /// In a followed constructor: whether `this` is initialised on the current path.
    init: bool,
    /// The lowest stack depth a step popped to.
    low: usize,
    /// In a followed constructor: the regions' entries, for their handlers' `this` state,
    /// sorted by the try's first instruction.
    tries: Vec<TryEntry>,
    /// [`TypeChecker::lower_init`]'s worklist.
    lowering: Vec<u32>,
}

/// The result of checking one method.
#[derive(Debug, Clone, Copy)]
pub struct Outcome<'c> {
    /// Findings, sorted by offset, at most one per instruction.
    pub diagnostics: &'c [Diagnostic],
    /// Findings beyond the per-method limit, counted only.
    pub dropped: usize,
    /// Set when something could not be checked; the first reason met.
    pub partial: Option<Partial>,
}

impl TypeChecker {
    /// A checker with empty buffers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Checks MethodDef `rid` of the type system's image, whose body is `body` (already
    /// accepted by the structural verifier).
    pub fn check(&mut self, ts: &mut TypeSystem<'_>, rid: u32, body: &Body<'_>) -> Outcome<'_> {
        self.out.clear();
        self.dropped = 0;
        self.partial = None;
        self.reported_at = u32::MAX;
        if self.frame_of(ts, rid, body) {
            self.track_this = self.frame.ctor.is_some();
            self.this_needed = false;
            self.run(ts, body);
            if self.this_needed && !self.track_this {
                // Rare (base calls): the second run follows `this` and repeats every finding.
                self.out.clear();
                self.dropped = 0;
                self.partial = None;
                self.reported_at = u32::MAX;
                self.track_this = true;
                self.run(ts, body);
            }
            self.settle_own_binds(ts);
        }
        self.out.sort_by_key(|d| d.offset);
        Outcome {
            diagnostics: &self.out,
            dropped: self.dropped,
            partial: self.partial,
        }
    }

    fn part(&mut self, why: Partial) {
        self.partial.get_or_insert(why);
    }

    /// Reads the method's argument, local and return types; false when they cannot be.
    fn frame_of(&mut self, ts: &mut TypeSystem<'_>, rid: u32, body: &Body<'_>) -> bool {
        let Some(m) = ts.method(Token::new(crate::image::tables::Table::MethodDef, rid)) else {
            self.part(Partial::Signature);
            return false;
        };
        let (sig, parent) = (m, m.parent);
        let mut args = std::mem::take(&mut self.frame.args);
        args.clear();
        if sig.has_this && !sig.explicit_this {
            let this = match ts.is_value_type(parent) {
                Some(true) => ts.tys.intern(TyNode::ByRef(parent)),
                _ => parent,
            };
            args.push(this);
        }
        args.extend_from_slice(ts.params(&sig));
        let mut locals = std::mem::take(&mut self.frame.locals);
        locals.clear();
        match body.local_sig() {
            0 => {}
            tok => {
                if !ts.locals_into(Token(tok), &mut locals) {
                    self.part(Partial::Locals);
                    return false;
                }
            }
        }
        let instance_ctor = sig.has_this && !sig.explicit_this && sig.named_ctor;
        let ctor = if instance_ctor {
            own_ctor(ts, parent)
        } else {
            None
        };
        let ctor_unknown = instance_ctor && ctor.is_none() && ts.is_value_type(parent).is_none();
        // The ImplFlags column alone (a whole row costs a read per column).
        let impl_flags = ts
            .image()
            .tables()
            .cell(crate::image::tables::Table::MethodDef, rid, 1);
        let ret = if impl_flags.is_ok_and(|f| f & u32::from(crate::image::sig::IMPL_ASYNC) != 0) {
            async_result(ts, sig.ret)
        } else {
            sig.ret
        };
        self.frame = Frame {
            args,
            locals,
            ret,
            ctor,
            ctor_unknown,
            has_this: sig.has_this && !sig.explicit_this,
        };
        true
    }

    /// Decodes, finds block starts, seeds the entry and handlers, and runs the worklist.
    fn run(&mut self, ts: &mut TypeSystem<'_>, body: &Body<'_>) {
        if !self.decode(body.code) {
            return;
        }
        let n = self.ins.len();
        self.pool.clear();
        self.work.clear();
        self.pool_this.clear();
        self.this_slots.clear();
        self.this_stored = false;
        self.own_binds.clear();
        self.tries.clear();
        if self.frame.ctor.is_some() {
            self.entry_init.clear();
            // Handlers start initialised; their try's entry lowers them (`entry_handlers`).
            self.entry_init.resize(n, true);
            for c in body.clauses() {
                let handler = match c.kind() {
                    ClauseKind::Filter => [Some(c.class_or_filter), Some(c.handler_offset)],
                    ClauseKind::Invalid => continue,
                    _ => [None, Some(c.handler_offset)],
                };
                let Some(start) = self.index(c.try_offset) else {
                    continue;
                };
                for h in handler.into_iter().flatten() {
                    if let Some(h) = self.index(h) {
                        self.tries.push(TryEntry {
                            start: start as u32,
                            handler: h as u32,
                        });
                    }
                }
            }
        }
        self.tries.sort_unstable_by_key(|t| t.start);
        self.init = false;
        self.seed(0, &[]);
        // Handlers are seeded initialised: the entries of their regions lower them.
        self.init = true;
        for c in body.clauses() {
            let stack = match c.kind() {
                ClauseKind::Catch => Some(V::Obj(ts.type_token(0, Token(c.class_or_filter)))),
                ClauseKind::Filter => {
                    // A filter and its handler receive an `object` (II.19, as ILVerify has it).
                    let e = V::Obj(TyId::OBJECT);
                    if let Some(i) = self.index(c.class_or_filter) {
                        self.seed(i, &[e]);
                    }
                    Some(e)
                }
                ClauseKind::Finally | ClauseKind::Fault => None,
                ClauseKind::Invalid => continue,
            };
            if let Some(i) = self.index(c.handler_offset) {
                self.seed(i, stack.as_slice());
            }
        }
        let limit = VISITS_PER_BLOCK * (self.starts + 1);
        let mut visits = 0;
        // The stack taken once for all the blocks of the run, not per block.
        let mut stack = std::mem::take(&mut self.stack);
        while let Some(i) = self.work.pop() {
            visits += 1;
            if visits > limit {
                self.part(Partial::NoConvergence);
                break;
            }
            self.block(ts, i as usize, &mut stack);
        }
        self.stack = stack;
    }

    /// The instruction starting at byte `off`. `at` is never cleared: an entry left by an
    /// earlier body names an instruction that does not start there, and counts for nothing.
    fn index(&self, off: u32) -> Option<usize> {
        let &i = self.at.get(off as usize)?;
        self.ins
            .get(i as usize)
            .is_some_and(|x| x.off == off)
            .then_some(i as usize)
    }

    /// Gives instruction `i` its first entry state: `stack`, when `this` is followed the
    /// current path's `this` slots (none past the current stack), and in a followed
    /// constructor its initialisation.
    fn seed(&mut self, i: usize, stack: &[V]) {
        let entry = self.pool.len() as u32;
        if let Some(x) = self.ins.get_mut(i).filter(|x| x.entry == NO_ENTRY) {
            x.entry = entry;
            // As long as `ins` since `decode`.
            self.entry_len[i] = stack.len() as u32;
            // Slot by slot, as in `block`: most states are empty or short.
            for &v in stack {
                self.pool.push(v);
            }
            if self.track_this {
                for k in 0..stack.len() {
                    let this = self.this_slots.get(k).copied().unwrap_or(false);
                    self.pool_this.push(this);
                }
            }
            if self.frame.ctor.is_some() {
                self.lower_init(i as u32);
            }
            self.work.push(i as u32);
        }
    }

    /// In a followed constructor: joins the current path's initialisation into instruction
    /// `i`'s entry (initialised only when every path has it so) and, when that lowered it,
    /// into the handlers of the regions `i` enters; returns whether it changed.
    fn lower_init(&mut self, i: u32) -> bool {
        if self.init || !self.entry_init.get(i as usize).copied().unwrap_or(false) {
            return false;
        }
        self.entry_init[i as usize] = false;
        // A handler is entered with the state of its try's entry (as ILVerify has it), so the
        // lowering spreads to the handlers of the regions starting here, and on. Each
        // instruction is lowered once at most, so this ends; a worklist rather than recursion,
        // since handlers that start regions may nest as deep as the code is long.
        let mut pending = std::mem::take(&mut self.lowering);
        pending.clear();
        pending.push(i);
        while let Some(at) = pending.pop() {
            let from = self.tries.partition_point(|t| t.start < at);
            for k in from..self.tries.len() {
                let TryEntry { start, handler } = self.tries[k];
                if start != at {
                    break;
                }
                if self
                    .entry_init
                    .get(handler as usize)
                    .copied()
                    .unwrap_or(false)
                {
                    self.entry_init[handler as usize] = false;
                    if self.ins[handler as usize].entry != NO_ENTRY {
                        self.work.push(handler);
                    }
                    pending.push(handler);
                }
            }
        }
        self.lowering = pending;
        true
    }

    /// Decodes `code` into `ins` and `targets` with the decoder's tables, as
    /// [`crate::instr::Instructions`] reads it (false at the first instruction it rejects),
    /// keeping only what the rules read: the opcode, one integer operand, the targets.
    fn decode(&mut self, code: &[u8]) -> bool {
        self.ins.clear();
        self.targets.clear();
        self.counts_at.clear();
        if self.at.len() <= code.len() {
            self.at.resize(code.len() + 1, u32::MAX);
        }
        // An instruction takes at least a byte: the decoder writes into spare capacity by
        // index, with no capacity test or length update per instruction.
        self.ins.reserve(code.len());
        let mut d = Decoder {
            ins: &mut self.ins.spare_capacity_mut()[..code.len()],
            at: &mut self.at[..code.len()],
            targets: &mut self.targets,
            counts_at: &mut self.counts_at,
            n: 0,
        };
        let decoded = d.run(code);
        let n = d.n;
        // SAFETY: the decoder wrote every entry below `n` of the spare capacity (it bumps `n`
        // only after a write), and `n <= code.len() <= capacity`.
        unsafe { self.ins.set_len(n) };
        let Some(starts) = decoded else {
            return false;
        };
        self.starts = starts;
        self.settle_targets();
        true
    }

    /// Grows `entry_len` to the body and turns `targets` into instruction indices, marking
    /// the starts they make (the switch counts stay).
    fn settle_targets(&mut self) {
        // Grown once per body, not tested per seed; never cleared (see `entry_len`).
        if self.entry_len.len() < self.ins.len() {
            self.entry_len.resize(self.ins.len(), 0);
        }
        let mut counts = 0;
        for k in 0..self.targets.len() {
            if self.counts_at.get(counts) == Some(&(k as u32)) {
                counts += 1;
                continue;
            }
            let i = self.index(self.targets[k]);
            if let Some(x) = i.and_then(|i| self.ins.get_mut(i))
                && !x.start
            {
                x.start = true;
                self.starts += 1;
            }
            self.targets[k] = i.map_or(u32::MAX, |i| i as u32);
        }
    }

    /// Joins `state` into the entry of instruction `i`, queueing it when that changed.
    fn flow_to(&mut self, ts: &mut TypeSystem<'_>, i: u32, state: &[V]) {
        let Some(start) = self.ins.get(i as usize).map(|x| x.entry) else {
            return;
        };
        if start == NO_ENTRY {
            self.seed(i as usize, state);
            return;
        }
        let len = self.entry_len[i as usize];
        if len as usize != state.len() {
            // The structural verifier reports depths; nothing to add here.
            return;
        }
        let mut changed = false;
        if self.frame.ctor.is_some() {
            changed |= self.lower_init(i);
        }
        if self.track_this {
            for k in 0..state.len() {
                let at = start as usize + k;
                let this = self.this_slots.get(k).copied().unwrap_or(false);
                if self.pool_this[at] && !this {
                    self.pool_this[at] = false;
                    changed = true;
                }
            }
        }
        let mut bad = None;
        for (k, &s) in state.iter().enumerate() {
            let o = self.pool[start as usize + k];
            match merge(ts, o, s) {
                Ok(m) => {
                    if m != o {
                        self.pool[start as usize + k] = m;
                        changed = true;
                    }
                }
                Err(Unmergeable) => {
                    bad.get_or_insert((k, o, s));
                    if o != V::Unknown {
                        self.pool[start as usize + k] = V::Unknown;
                        changed = true;
                    }
                }
            }
        }
        if changed {
            self.work.push(i);
        }
        if let Some((k, a, b)) = bad {
            let off = self.ins[i as usize].off;
            let msg = format!(
                "stack slot {k} holds {} on one path and {} on another",
                name(ts, a),
                name(ts, b)
            );
            self.report(Code::PathStackUnexpected, off, msg);
        }
    }

    fn report(&mut self, code: Code, off: u32, message: String) {
        if self.reported_at == off && self.out.last().is_some_and(|d| d.offset == off) {
            return;
        }
        if self.out.iter().any(|d| d.offset == off && d.code == code) {
            return;
        }
        if self.out.len() >= MAX_FINDINGS {
            self.dropped += 1;
            return;
        }
        self.reported_at = off;
        self.out.push(Diagnostic::new(code, off, message));
    }

    /// Joins the state after branch `x` into its targets: `stack`, or none for `leave`, which
    /// empties it.
    fn successors(&mut self, ts: &mut TypeSystem<'_>, x: Ins, stack: &[V]) {
        let state = if matches!(x.op, Opcode::Leave | Opcode::Leave_S) {
            &[]
        } else {
            stack
        };
        let (first, n) = self.target_run(x);
        for j in first..first + n {
            let t = self.targets.get(j).copied();
            if let Some(t) = t.filter(|&t| t != u32::MAX) {
                self.flow_to(ts, t, state);
            }
        }
    }

    /// Where the targets of branch or `switch` `x` are in `targets`, and how many.
    fn target_run(&self, x: Ins) -> (usize, usize) {
        let at = x.arg as usize;
        if x.op == Opcode::Switch {
            let n = self.targets.get(at).copied().unwrap_or(0);
            (at + 1, n as usize)
        } else {
            (at, 1)
        }
    }

    /// Runs the block starting at instruction `i` from its entry state.
    fn block(&mut self, ts: &mut TypeSystem<'_>, i: usize, stack: &mut Vec<V>) {
        let Some(start) = self.ins.get(i).map(|x| x.entry) else {
            return;
        };
        if start == NO_ENTRY {
            return;
        }
        let len = self.entry_len[i];
        stack.clear();
        // Slot by slot: entry states are short (most are empty), a copy call costs more.
        for &v in &self.pool[start as usize..(start + len) as usize] {
            stack.push(v);
        }
        let (ctor, track) = (self.frame.ctor, self.track_this);
        if track {
            self.this_slots.clear();
            let slots = self.pool_this.get(start as usize..(start + len) as usize);
            self.this_slots.extend_from_slice(slots.unwrap_or(&[]));
            // Outside a followed constructor, `this` is initialised.
            self.init = ctor.is_none() || self.entry_init.get(i).copied().unwrap_or(true);
        }
        // Set only by a step after which the block ends: cleared once per block.
        self.abandon = false;
        // Two loops, so that the common one tests nothing per instruction for `this`.
        if track {
            self.walk::<true>(ts, i, stack, ctor);
        } else {
            self.walk::<false>(ts, i, stack, ctor);
        }
    }

    /// Steps from instruction `i` to the block's end with `stack`, following `this` when
    /// `TRACK` is set ([`TypeChecker::track_this`]).
    fn walk<const TRACK: bool>(
        &mut self,
        ts: &mut TypeSystem<'_>,
        i: usize,
        stack: &mut Vec<V>,
        ctor: Option<Ctor>,
    ) {
        let mut k = i;
        let mut prefix = Prefixes::default();
        let mut next = self.ins.get(k).copied();
        while let Some(x) = next {
            let flow = x.flow;
            if flow == Flow::Prefix {
                prefix.add(ts, x);
            } else {
                if TRACK {
                    let (depth, init) = (stack.len(), self.init);
                    if let Some(c) = ctor {
                        self.before_this_step(x, c);
                    }
                    self.low = depth;
                    self.step(ts, x, stack, &prefix);
                    self.after_this_step(x, depth, init, stack.len());
                } else {
                    self.step(ts, x, stack, &prefix);
                }
                prefix = Prefixes::default();
            }
            // One dispatch on the flow for what ends the block and where it goes next.
            match flow {
                Flow::Next | Flow::Break | Flow::Prefix => {}
                // Only a call abandons its path (a callee of unknown arity).
                Flow::Call => {
                    if self.abandon {
                        break;
                    }
                }
                Flow::CondBranch => self.successors(ts, x, stack),
                Flow::Branch => {
                    self.successors(ts, x, stack);
                    break;
                }
                // `endfinally` and `endfilter` among them.
                Flow::Return | Flow::Throw => break,
            }
            k += 1;
            next = self.ins.get(k).copied();
            if next.is_some_and(|n| n.start) {
                self.flow_to(ts, k as u32, stack);
                break;
            }
        }
    }
}

/// The followed state of an instance constructor declared by `parent`: a reference type's
/// (value types' constructors are exempt) whose class is known.
fn own_ctor(ts: &mut TypeSystem<'_>, parent: TyId) -> Option<Ctor> {
    // Value types' constructors, and classes whose kind is unknown, are not followed.
    if ts.is_value_type(parent) != Some(false) {
        return None;
    }
    let own = ts.key_of(parent)?;
    let base = ts.info(own).and_then(|i| i.base).and_then(|b| ts.key_of(b));
    Some(Ctor {
        own,
        base,
        object: matches!(ts.tys.node(parent), TyNode::Object),
    })
}

/// Where the field `ldflda` takes the address of lives: in the frame when the object is (a
/// value type's field through a pointer into the frame, or of a value on the stack).
fn field_home(obj: V) -> Home {
    match obj {
        V::ByRef(_, Home::Frame) | V::Value(_) => Home::Frame,
        _ => Home::Permanent,
    }
}

/// Why a binding's `this` is not allowed, for messages.
fn own_why(own_this: bool) -> &'static str {
    if own_this {
        "this, which the method stores to or takes the address of"
    } else {
        "not the method's own this"
    }
}

/// The decoder's view of the checker's buffers for one body: the spare capacity of `ins` and
/// the offset index written by index, the targets pushed.
struct Decoder<'a> {
    ins: &'a mut [std::mem::MaybeUninit<Ins>],
    at: &'a mut [u32],
    targets: &'a mut Vec<u32>,
    counts_at: &'a mut Vec<u32>,
    /// Instructions written.
    n: usize,
}

impl Decoder<'_> {
    /// Decodes all of `code`; the number of instructions after a transfer (block starts
    /// before the targets are counted), or `None` at the first instruction rejected.
    fn run(&mut self, code: &[u8]) -> Option<usize> {
        // Block starts: targets, the instruction after a transfer (marked as it is decoded);
        // handler entries are seeded. A start is where states merge.
        let mut starts = 0usize;
        let mut after_transfer = false;
        let mut pos = 0usize;
        // Two loops over one step: while the longest fixed-length instruction fits, neither an
        // instruction's length nor its four-byte operand read is checked against the end.
        while pos + LONGEST <= code.len() {
            let (len, transfer) = self.one::<true>(code, pos, after_transfer)?;
            starts += usize::from(after_transfer);
            after_transfer = transfer;
            pos += len;
        }
        while pos < code.len() {
            let (len, transfer) = self.one::<false>(code, pos, after_transfer)?;
            starts += usize::from(after_transfer);
            after_transfer = transfer;
            pos += len;
        }
        Some(starts)
    }

    /// Decodes the instruction at `pos` (a block start when `start`): its length and whether
    /// the instruction after it starts a block, or `None` when it is rejected. `ROOM`:
    /// [`LONGEST`] bytes are left from `pos`, so a fixed length and a four-byte operand read
    /// need no check.
    #[inline(always)]
    fn one<const ROOM: bool>(
        &mut self,
        code: &[u8],
        pos: usize,
        start: bool,
    ) -> Option<(usize, bool)> {
        let first = *code.get(pos)?;
        let (index, opsize) = if first == 0xFE {
            (256 + *code.get(pos + 1)? as usize, 2)
        } else {
            (first as usize, 1)
        };
        let slot = &SLOTS[index];
        let op = slot.opcode?;
        let mut len = slot.len as usize;
        if !ROOM && code.len() - pos < len {
            return None;
        }
        let at = pos + opsize;
        // The integer operand without a branch on its kind: four bytes read (fewer at the
        // end of the code), the operand's own kept by the mask, a signed byte extended.
        let raw = if ROOM {
            code.get(at..at + 4)
                .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        } else {
            operand_bytes(code, at)
        };
        let mut arg = ((raw & slot.mask) ^ slot.sign).wrapping_sub(slot.sign);
        let mut transfer = slot.transfer;
        if slot.target != Target::No {
            arg = self.targets.len() as u32;
            // A `switch` with an empty table falls through, as any instruction.
            transfer = self.branch_targets(code, pos, &mut len, slot.target, raw)? > 0;
        }
        let n = self.n;
        // `n <= pos < code.len()`, the length of both slices: neither index fails.
        if let (Some(a), Some(x)) = (self.at.get_mut(pos), self.ins.get_mut(n)) {
            *a = n as u32;
            x.write(Ins {
                off: pos as u32,
                arg,
                entry: NO_ENTRY,
                op,
                flow: slot.flow,
                start,
            });
            self.n = n + 1;
        }
        Some((len, transfer))
    }

    /// Pushes the targets of the branch or `switch` at `pos`, whose operand bytes start with
    /// `raw` (a switch's length grows by its table, its count pushed first); their number, or
    /// `None` when a switch table runs past the code.
    fn branch_targets(
        &mut self,
        code: &[u8],
        pos: usize,
        len: &mut usize,
        kind: Target,
        raw: u32,
    ) -> Option<u32> {
        match kind {
            Target::No => Some(0),
            Target::Short => {
                let d = i64::from(raw as u8 as i8);
                self.targets.push(target((pos + *len) as i64 + d));
                Some(1)
            }
            Target::Long => {
                let d = i64::from(raw as i32);
                self.targets.push(target((pos + *len) as i64 + d));
                Some(1)
            }
            Target::Switch => {
                let count = raw as usize;
                let table = pos + *len;
                if count > (code.len() - table) / 4 {
                    return None;
                }
                *len += 4 * count;
                self.counts_at.push(self.targets.len() as u32);
                self.targets.push(count as u32);
                let next = (pos + *len) as i64;
                for c in 0..count {
                    let d = operand_bytes(code, table + 4 * c) as i32;
                    self.targets.push(target(next + i64::from(d)));
                }
                Some(count as u32)
            }
        }
    }
}

/// The four bytes of `code` from `at`, little-endian, as many as there are (the rest zero):
/// every operand is read so, its kind choosing afterwards which bytes count.
#[inline(always)]
fn operand_bytes(code: &[u8], at: usize) -> u32 {
    if at + 4 <= code.len() {
        u32::from_le_bytes(code[at..at + 4].try_into().unwrap_or([0; 4]))
    } else {
        // The code's last bytes: at most three, read one by one (no copy call).
        code.get(at..)
            .unwrap_or(&[])
            .iter()
            .rev()
            .fold(0, |v, &b| (v << 8) | u32::from(b))
    }
}

/// A target offset as the instruction table keeps it (`u32::MAX` when outside `u32`).
fn target(t: i64) -> u32 {
    u32::try_from(t).unwrap_or(u32::MAX)
}

/// What a checked value is, for messages (formatted only when a finding is made).
#[derive(Clone, Copy)]
enum What {
    Named(&'static str),
    Arg(u32),
    Local(u32),
}

impl From<&'static str> for What {
    fn from(s: &'static str) -> What {
        What::Named(s)
    }
}

impl std::fmt::Display for What {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            What::Named(s) => f.write_str(s),
            What::Arg(n) => write!(f, "argument {n}"),
            What::Local(n) => write!(f, "local {n}"),
        }
    }
}

/// What a runtime-async method's `ret` returns, given its declared return type: nothing for
/// `Task`/`ValueTask`, `T` for `Task<T>`/`ValueTask<T>` (the runtime-async amendment to
/// ECMA-335, I.8.4.5); a declared type of another shape stands.
fn async_result(ts: &TypeSystem<'_>, declared: TyId) -> TyId {
    match ts.tys.node(declared) {
        TyNode::Inst { args, .. } if args.len() == 1 => args[0],
        TyNode::Class(_) | TyNode::Value(_) => TyId::VOID,
        _ => declared,
    }
}

/// Prefixes in force for the next instruction.
#[derive(Default, Clone, Copy)]
struct Prefixes {
    constrained: Option<TyId>,
    readonly: bool,
    tail: bool,
}

impl Prefixes {
    fn add(&mut self, ts: &mut TypeSystem<'_>, x: Ins) {
        match x.op {
            Opcode::Constrained => self.constrained = Some(ts.type_token(0, Token(x.arg))),
            Opcode::Readonly => self.readonly = true,
            Opcode::Tail => self.tail = true,
            // The other prefixes change no type rule.
            _ => {}
        }
    }
}

/// Kinds of operands for the numeric tables of III.1.5.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Binary {
    /// `add`, `sub`, `mul`, `div`, `rem` (and `.ovf`, `.un`): Table III.2.
    Numeric,
    /// `and`, `or`, `xor`, `div.un`, `rem.un` on integers: Table III.5.
    Integer,
    /// Overflow arithmetic: integers, and managed pointers for the unsigned add and subtract
    /// (Table III.7).
    Overflow,
}

impl TypeChecker {
    fn pop(&mut self, stack: &mut Vec<V>) -> V {
        let v = stack.pop().unwrap_or(V::Unknown);
        self.low = self.low.min(stack.len());
        v
    }

    /// In a followed constructor, before instruction `x`: `starg 0` and `ldarga 0` before
    /// `this` is initialised, and `ret` before it is (III.1.8.1.4).
    fn before_this_step(&mut self, x: Ins, c: Ctor) {
        use Opcode as O;
        if self.init {
            return;
        }
        match x.op {
            O::Starg_S | O::Starg | O::Ldarga_S | O::Ldarga if x.arg == 0 => {
                let what = if matches!(x.op, O::Starg_S | O::Starg) {
                    "stored to"
                } else {
                    "has its address taken"
                };
                let msg = format!(
                    "this {what} before a constructor of its class or base class is called on it"
                );
                self.report(Code::ThisUninitStore, x.off, msg);
            }
            O::Ret if !c.object => {
                let msg = "constructor returns before a constructor of its class or base class \
                           is called on this"
                    .to_string();
                self.report(Code::ThisUninitReturn, x.off, msg);
            }
            _ => {}
        }
    }

    /// When `this` is followed, after instruction `x` took the stack from `depth` slots
    /// (popping down to `self.low`) to `now`: which of the pushed slots hold `this`, and in a
    /// followed constructor the uninitialised `this` used other than as a call's argument or
    /// `this`, a field access's object, or by `dup` or `pop`.
    fn after_this_step(&mut self, x: Ins, depth: usize, init: bool, now: usize) {
        use Opcode as O;
        let low = self.low.min(depth);
        let slots = &self.this_slots;
        let this_at = |k: usize| slots.get(k).copied().unwrap_or(false);
        // The popped slots the instruction may not take the uninitialised `this` in.
        let allowed = match x.op {
            O::Pop | O::Call | O::Callvirt | O::Newobj | O::Ldfld | O::Ldflda => depth,
            // The object, not the value stored.
            O::Stfld => low + 1,
            _ => low,
        };
        let misused = (allowed..depth).find(|&k| !init && this_at(k));
        let dup_of_this = x.op == O::Dup && depth > 0 && this_at(depth - 1);
        let loads_this =
            matches!(x.op, O::Ldarg_0) || (matches!(x.op, O::Ldarg_S | O::Ldarg) && x.arg == 0);
        {
            if let Some(k) = misused {
                let slot = depth - 1 - k;
                let msg = format!(
                    "uninitialised this used by {} (stack slot {slot} from the top) before a \
                     constructor of its class or base class is called on it",
                    x.op.name()
                );
                self.report(Code::UninitStack, x.off, msg);
            }
        }
        self.this_slots.truncate(low.min(now));
        while self.this_slots.len() < now {
            self.this_slots.push(dup_of_this || loads_this);
        }
    }

    /// Notes an unknown slot or type as a reason the method is checked in part.
    fn note(&mut self, v: V) -> V {
        // After a finding, unknown slots are its consequence (its result is unknown), not
        // an unresolved reference.
        if v == V::Unknown && self.out.is_empty() {
            self.part(Partial::UnresolvedType);
        }
        v
    }

    // Inlined for its first test: most values are of the stack form expected, of a known
    // type (an argument, a local, a field), and need nothing more.
    #[inline(always)]
    fn expect(
        &mut self,
        ts: &mut TypeSystem<'_>,
        off: u32,
        found: V,
        want: TyId,
        what: impl Into<What>,
    ) {
        let form = stack_of(ts, want);
        // `Unknown` is noted and `Null` is never a type's form: both take the full path.
        if found == form && !matches!(found, V::Unknown | V::Null) && !ts.tys.has_unknown(want) {
            return;
        }
        self.expect_slow(ts, off, found, want, form, what.into());
    }

    /// [`TypeChecker::expect`] past its first test (`form`: `want`'s stack form).
    #[inline(never)]
    fn expect_slow(
        &mut self,
        ts: &mut TypeSystem<'_>,
        off: u32,
        found: V,
        want: TyId,
        form: V,
        what: What,
    ) {
        if ts.tys.has_unknown(want) {
            self.part(Partial::UnresolvedType);
        }
        self.note(found);
        if let Err(code) = fits_v(ts, found, form) {
            self.misfit(ts, code, off, found, want, what);
        }
    }

    /// The finding of [`TypeChecker::expect`]: written only when one is made.
    #[cold]
    #[inline(never)]
    fn misfit(
        &mut self,
        ts: &mut TypeSystem<'_>,
        code: Code,
        off: u32,
        found: V,
        want: TyId,
        what: What,
    ) {
        let (f, w) = (name(ts, found), ts.name(want));
        let (f, w) = names_apart(ts, (f, type_of(found)), (w, Some(want)));
        let msg = format!("{what}: found {f}, expected {w}");
        self.report(code, off, msg);
    }

    fn expect_v(
        &mut self,
        ts: &mut TypeSystem<'_>,
        off: u32,
        found: V,
        want: V,
        what: impl Into<What>,
    ) {
        self.note(found);
        if let Err(code) = fits_v(ts, found, want) {
            self.misfit_v(ts, code, off, found, want, what.into());
        }
    }

    /// The finding of [`TypeChecker::expect_v`]: written only when one is made.
    #[cold]
    #[inline(never)]
    fn misfit_v(
        &mut self,
        ts: &mut TypeSystem<'_>,
        code: Code,
        off: u32,
        found: V,
        want: V,
        what: What,
    ) {
        let (f, w) = (name(ts, found), name(ts, want));
        let (f, w) = names_apart(ts, (f, type_of(found)), (w, type_of(want)));
        let msg = format!("{what}: found {f}, expected {w}");
        self.report(code, off, msg);
    }

    #[cold]
    #[inline(never)]
    fn bad(&mut self, ts: &mut TypeSystem<'_>, code: Code, off: u32, found: V, expected: &str) {
        let msg = format!("found {}, expected {expected}", name(ts, found));
        self.report(code, off, msg);
    }

    /// Checks an address operand (`ldind`, `stind`, `ldobj`, …): a managed pointer, or a
    /// native int (unverifiable). Returns the pointed-to type when known.
    fn address(&mut self, ts: &mut TypeSystem<'_>, off: u32, a: V) -> Option<TyId> {
        match a {
            V::ByRef(t, _) => Some(t),
            V::I => {
                self.bad(ts, Code::UnmanagedPointer, off, a, "a managed pointer");
                None
            }
            V::Unknown | V::Var(_) => {
                self.note(a);
                None
            }
            _ => {
                self.bad(ts, Code::StackByRef, off, a, "an address");
                None
            }
        }
    }

    /// Checks the object operand of `ldfld`/`stfld`/`ldflda` against the field's declaring
    /// type.
    fn instance(&mut self, ts: &mut TypeSystem<'_>, off: u32, obj: V, parent: TyId) {
        match obj {
            V::Obj(_) | V::Null => {
                if ts.is_value_type(parent) == Some(true) && obj != V::Null {
                    // A boxed value's field through the object: not verifiable, valid.
                    if let V::Obj(t) = obj
                        && t != parent
                    {
                        let n = ts.name(parent);
                        self.bad(ts, Code::TypeNotAssignable, off, obj, &n);
                    }
                } else {
                    self.expect(ts, off, obj, parent, "object");
                }
            }
            V::ByRef(t, _) | V::Value(t) => {
                if t != parent
                    && !ts.tys.has_unknown(t)
                    && !ts.tys.has_unknown(parent)
                    && !ts.tys.has_generic_param(t)
                    && !ts.tys.has_generic_param(parent)
                    && ts.is_value_type(t) == Some(true)
                {
                    let n = ts.name(parent);
                    self.bad(ts, Code::TypeNotAssignable, off, obj, &n);
                }
            }
            V::I => self.bad(
                ts,
                Code::UnmanagedPointer,
                off,
                obj,
                "an object or a managed pointer",
            ),
            V::Unknown | V::Var(_) => {
                self.note(obj);
            }
            V::I4 | V::I8 | V::F => self.bad(
                ts,
                Code::StackObjRef,
                off,
                obj,
                "an object or a managed pointer",
            ),
        }
    }

    /// Checks an array operand; the element type when known.
    fn array(&mut self, ts: &mut TypeSystem<'_>, off: u32, a: V) -> Option<TyId> {
        match a {
            V::Obj(t) => match *ts.tys.node(t) {
                TyNode::SzArray(e) => Some(e),
                TyNode::Unknown => None,
                _ => {
                    self.bad(ts, Code::ExpectedArray, off, a, "a vector");
                    None
                }
            },
            V::Null => None,
            V::Unknown | V::Var(_) => {
                self.note(a);
                None
            }
            _ => {
                self.bad(ts, Code::StackObjRef, off, a, "an array");
                None
            }
        }
    }

    fn index_operand(&mut self, ts: &mut TypeSystem<'_>, off: u32, v: V) {
        match v {
            V::I4 | V::I | V::Unknown | V::Var(_) => {
                self.note(v);
            }
            _ => self.bad(ts, Code::StackUnexpected, off, v, "int32 or native int"),
        }
    }

    fn binary(&mut self, ts: &mut TypeSystem<'_>, x: Ins, stack: &mut Vec<V>, kind: Binary) {
        let b = self.pop(stack);
        let a = self.pop(stack);
        let add_sub = matches!(
            x.op,
            Opcode::Add | Opcode::Sub | Opcode::Add_Ovf_Un | Opcode::Sub_Ovf_Un
        );
        use V::*;
        let r = match (a, b) {
            (Unknown, _) | (_, Unknown) | (Var(_), _) | (_, Var(_)) => {
                self.note(a);
                self.note(b);
                Unknown
            }
            (I4, I4) => I4,
            (I4, I) | (I, I4) | (I, I) => I,
            (I8, I8) => I8,
            (F, F) if kind == Binary::Numeric => F,
            // Pointer arithmetic on managed pointers: valid, not verifiable (III.1.5).
            (ByRef(t, h), I4 | I) if add_sub => {
                self.bad(ts, Code::UnmanagedPointer, x.off, a, "a number");
                ByRef(t, h)
            }
            (I4 | I, ByRef(t, h)) if x.op == Opcode::Add => {
                self.bad(ts, Code::UnmanagedPointer, x.off, b, "a number");
                ByRef(t, h)
            }
            (ByRef(..), ByRef(..)) if x.op == Opcode::Sub => {
                self.bad(ts, Code::UnmanagedPointer, x.off, a, "a number");
                I
            }
            // Other arithmetic between a managed pointer and an integer (a pointer difference
            // taken the other way round, a mask): the runtime treats the pointer as a native
            // int; not verifiable.
            (ByRef(..), I4 | I | I8) | (I4 | I | I8, ByRef(..)) => {
                self.bad(ts, Code::UnmanagedPointer, x.off, a, "a number");
                I
            }
            _ => {
                let numeric = |v: V| matches!(v, I4 | I8 | I | F);
                let (code, want) = match kind {
                    Binary::Numeric if !(numeric(a) && numeric(b)) => {
                        (Code::ExpectedNumericType, "a number")
                    }
                    Binary::Integer | Binary::Overflow
                        if matches!(a, F) || matches!(b, F) || !numeric(a) || !numeric(b) =>
                    {
                        (Code::ExpectedIntegerType, "an integer")
                    }
                    _ => (Code::StackUnexpected, "operands of one type"),
                };
                let msg = format!(
                    "`{}` on {} and {}: expected {want} (III.1.5)",
                    x.op.info().name,
                    name(ts, a),
                    name(ts, b)
                );
                self.report(code, x.off, msg);
                Unknown
            }
        };
        stack.push(r);
    }

    /// Comparison operands (III.1.5 Table III.4): `eq_only` for `beq`, `bne.un`, `ceq` and
    /// `cgt.un`, which also compare object references.
    fn compare(&mut self, ts: &mut TypeSystem<'_>, x: Ins, a: V, b: V, eq_only: bool) {
        use V::*;
        let ok = match (a, b) {
            (Unknown, _) | (_, Unknown) | (Var(_), _) | (_, Var(_)) => {
                self.note(a);
                self.note(b);
                true
            }
            (I4 | I, I4 | I) | (I8, I8) | (F, F) => true,
            (ByRef(..), ByRef(..)) => true,
            (Obj(_) | Null, Obj(_) | Null) => eq_only,
            (ByRef(..), I) | (I, ByRef(..)) => {
                self.bad(ts, Code::UnmanagedPointer, x.off, a, "operands of one type");
                true
            }
            _ => false,
        };
        if !ok {
            let msg = format!(
                "`{}` compares {} with {} (III.1.5)",
                x.op.info().name,
                name(ts, a),
                name(ts, b)
            );
            self.report(Code::StackUnexpected, x.off, msg);
        }
    }

    fn call(&mut self, ts: &mut TypeSystem<'_>, x: Ins, stack: &mut Vec<V>, prefix: &Prefixes) {
        let token = Token(x.arg);
        let resolved = if x.op == Opcode::Calli {
            ts.standalone_method(token)
        } else {
            ts.method(token)
        };
        let Some(m) = resolved else {
            // How many slots the call takes is unknown: this path is not followed further.
            self.part(Partial::UnresolvedMember);
            self.abandon = true;
            return;
        };
        let (sig, parent) = (m, m.parent);
        // A delegate's constructor takes (object, native int); the cheap tests first.
        let delegate_ctor = x.op == Opcode::Newobj
            && sig.param_count() == 2
            && ts
                .params(&sig)
                .get(1)
                .copied()
                .is_some_and(|p| stack_of(ts, p) == V::I)
            && ts.is_delegate(parent) == Some(true);
        if delegate_ctor {
            self.delegate_pattern(ts, x, parent);
        }
        if prefix.readonly && x.op == Opcode::Call {
            self.readonly_callee(ts, x, parent, sig.ret);
        }
        if x.op == Opcode::Calli {
            let f = self.pop(stack);
            self.expect_v(ts, x.off, f, V::I, "function pointer");
        }
        // A delegate's constructor: the object passed, for checking the method against the
        // delegate's `Invoke` below.
        let mut delegate_obj = None;
        for k in (0..sig.param_count()).rev() {
            let p = ts.params(&sig)[k as usize];
            let v = self.pop(stack);
            self.expect(ts, x.off, v, p, What::Arg(k + 1));
            if k == 0 && delegate_ctor {
                let own_this =
                    self.track_this && self.this_slots.get(stack.len()).copied().unwrap_or(false);
                delegate_obj = Some((v, own_this));
            }
        }
        if let Some((obj, own_this)) = delegate_obj {
            self.delegate_target(ts, x, parent, obj);
            self.delegate_ldftn(ts, x, obj, own_this);
        }
        let is_ctor = x.op == Opcode::Newobj;
        if sig.has_this && !sig.explicit_this && !is_ctor && x.op != Opcode::Calli {
            let this = self.pop(stack);
            let own_this =
                self.track_this && self.this_slots.get(stack.len()).copied().unwrap_or(false);
            // Constructors return void: the name is read only for such callees.
            let ctor_callee = sig.ret == TyId::VOID && sig.named_ctor;
            if ctor_callee && !self.frame.ctor_unknown {
                self.ctor_call(ts, x, this, own_this, parent);
            }
            self.this_arg(ts, x, this, parent, prefix);
            // Constructors are not virtual.
            if x.op == Opcode::Call && !ctor_callee {
                self.base_call(ts, x, this, own_this, parent, sig.param_count());
            }
        } else if sig.has_this && x.op == Opcode::Calli && !sig.explicit_this {
            let _ = self.pop(stack);
        }
        if prefix.tail {
            self.tail_byref(ts, x, &sig, parent, prefix);
        }
        if is_ctor {
            let v = stack_of(ts, parent);
            let v = match v {
                V::Unknown => {
                    self.part(Partial::UnresolvedType);
                    V::Unknown
                }
                // Arrays' constructors, delegates, classes: an object reference.
                other => other,
            };
            stack.push(v);
        } else if sig.ret != TyId::VOID {
            let v = stack_of(ts, sig.ret);
            stack.push(self.note(v));
        }
    }

    /// `call` (not `callvirt`) of a method that may be overridden skips the override: only the
    /// method's own `this`, never stored to nor its address taken in the method, or a boxed
    /// value may be its `this` (III.3.19, as ILVerify checks it: C#'s `base.M()`).
    fn base_call(
        &mut self,
        ts: &mut TypeSystem<'_>,
        x: Ins,
        this: V,
        own_this: bool,
        p: TyId,
        args: u32,
    ) {
        let own = self.own_this(own_this, x, args);
        // Value types' methods are final (their types sealed). A reference type's own `this`
        // needs no test here.
        if own != Some(true) && ts.is_value_type(p) != Some(false) {
            return;
        }
        if self.skips_override(ts, x.off, Token(x.arg), this, own, false) {
            self.this_mismatch(ts, x.off, this, false);
        }
    }

    /// Whether the `this` of `x` (a call taking `args` arguments, or an `ldftn` with none) is
    /// the method's own: `own_this` when `this` is followed; otherwise known only when
    /// `ldarg.0` pushed it right before the arguments.
    fn own_this(&self, own_this: bool, x: Ins, args: u32) -> Option<bool> {
        if self.track_this {
            Some(own_this)
        } else if self.loaded_this(x, args) {
            Some(true)
        } else {
            None
        }
    }

    /// Whether `ldarg.0` of an instance method pushed the `this` of `x` right before its `n`
    /// arguments, each pushed by one instruction that pops nothing (a load, a constant), all
    /// in `x`'s block: C#'s `base.M(a, b)`, told without following `this`.
    fn loaded_this(&self, x: Ins, n: u32) -> bool {
        use Opcode as O;
        let (Some(k), n) = (self.index(x.off), n as usize) else {
            return false;
        };
        if !self.frame.has_this || k < n + 1 || self.ins[k - n..=k].iter().any(|x| x.start) {
            return false;
        }
        // From the opcode table: one value pushed, nothing popped, control falls through.
        let loads_one = |op: Opcode| {
            let info = op.info();
            matches!(
                (info.pops, info.pushes, info.flow),
                (Pops::Fixed(0), Pushes::Fixed(1), Flow::Next)
            )
        };
        let load = self.ins[k - n - 1];
        let this =
            load.op == O::Ldarg_0 || (matches!(load.op, O::Ldarg_S | O::Ldarg) && load.arg == 0);
        this && self.ins[k - n..k].iter().all(|a| loads_one(a.op))
    }

    /// Whether `method`, bound to `this` without virtual dispatch at `off` (by `call`, or by
    /// `ldftn` for a delegate), may be overridden and `this` is neither the method's own `this`
    /// (`own`: whether the slot holds it, when known) nor a boxed value. Pointers and what is
    /// not known are not judged. A binding to the method's own `this` is kept and judged after
    /// the run, when whether the method stores to `this` is known. When `own` is not known, an
    /// instance method's first run answers false and notes that `this` must be followed.
    fn skips_override(
        &mut self,
        ts: &mut TypeSystem<'_>,
        off: u32,
        method: Token,
        this: V,
        own: Option<bool>,
        delegate: bool,
    ) -> bool {
        // A method's own `this` held as an object is a reference type's (a value type's is a
        // managed pointer).
        if own == Some(true) && matches!(this, V::Obj(_)) {
            // The common case (C#'s base calls, and mcs's calls on `this`): nothing is
            // resolved unless the method turns out to store to `this`.
            self.own_binds.push(OwnBind {
                off,
                method,
                this,
                delegate,
            });
            return false;
        }
        let object = match this {
            V::Obj(t) => ts.is_value_type(t) == Some(false),
            V::Null => true,
            _ => false,
        };
        if !object || ts.overridable(method) != Some(true) {
            return false;
        }
        if own.is_none() && self.frame.has_this {
            self.this_needed = true;
            return false;
        }
        true
    }

    /// After the run: the bindings to the method's own `this` when the method stores to it
    /// or takes its address (`starg 0`, `ldarga 0`, where the run reached), as ILVerify has
    /// it: `this` may then be another object.
    fn settle_own_binds(&mut self, ts: &mut TypeSystem<'_>) {
        if !self.this_stored {
            return;
        }
        let binds = std::mem::take(&mut self.own_binds);
        for b in &binds {
            // At most one finding per instruction: an earlier one stands.
            if ts.overridable(b.method) == Some(true) && !self.out.iter().any(|d| d.offset == b.off)
            {
                if b.delegate {
                    self.ldftn_mismatch(ts, b.off, b.this, true);
                } else {
                    self.this_mismatch(ts, b.off, b.this, true);
                }
            }
        }
        self.own_binds = binds;
    }

    #[cold]
    #[inline(never)]
    fn this_mismatch(&mut self, ts: &mut TypeSystem<'_>, off: u32, this: V, own_this: bool) {
        let msg = format!(
            "call (not callvirt) of a method that may be overridden, on {} ({}): only the \
             method's unmodified this may skip the override (III.3.19)",
            name(ts, this),
            own_why(own_this)
        );
        self.report(Code::ThisMismatch, off, msg);
    }

    #[cold]
    #[inline(never)]
    fn ldftn_mismatch(&mut self, ts: &mut TypeSystem<'_>, off: u32, obj: V, own_this: bool) {
        let msg = format!(
            "newobj of a delegate on ldftn of a method that may be overridden, bound to {} \
             ({}): only the method's unmodified this may skip the override; ldvirtftn \
             dispatches (III.1.8.1.5)",
            name(ts, obj),
            own_why(own_this)
        );
        self.report(Code::LdftnNonFinalVirtual, off, msg);
    }

    /// A `tail.` call may not pass a managed pointer (III.2.4: the caller's frame, where it may
    /// point, is gone when the callee runs), as ILVerify checks it: no parameter of a
    /// managed-pointer type or `TypedReference`, no value type's method (whose `this` is a
    /// managed pointer), no `constrained.` call (whose `this` is one too). ILVerify also rejects
    /// by-ref-like value types (`Span<T>`); the type system does not know them, so they pass.
    fn tail_byref(
        &mut self,
        ts: &mut TypeSystem<'_>,
        x: Ins,
        sig: &super::ty::MethodSig,
        parent: TyId,
        prefix: &Prefixes,
    ) {
        let params = ts.params(sig).to_vec();
        let byref_param = params
            .iter()
            .position(|&p| p == TyId::TYPEDREF || matches!(ts.tys.node(p), TyNode::ByRef(_)));
        let this = sig.has_this && !sig.explicit_this && x.op != Opcode::Calli;
        let why = if let Some(k) = byref_param {
            format!("its parameter {} is {}", k + 1, ts.name(params[k]))
        } else if this && ts.is_value_type(parent) == Some(true) {
            format!("its this is a managed pointer to {}", ts.name(parent))
        } else if prefix.constrained.is_some() && this {
            "it is a constrained. call, whose this is a managed pointer".to_string()
        } else {
            return;
        };
        let msg = format!("tail. call that passes a managed pointer: {why} (III.2.4)");
        self.report(Code::TailByRef, x.off, msg);
    }

    /// `ret` of a managed pointer into the method's own frame (`ldloca`, `ldarga`, a field of
    /// either): it points to storage that is gone when the caller gets it (III.3.56). A pointer
    /// the method was passed may be returned (C#'s `return ref` of a `ref` parameter), though
    /// ILVerify, which does not follow where it came from, reports that too.
    #[cold]
    #[inline(never)]
    fn return_ptr_to_stack(&mut self, ts: &mut TypeSystem<'_>, off: u32, v: V) {
        let msg = format!(
            "ret of {}, the address of a local, an argument or a field in one: the caller gets \
             a pointer into a frame that is gone (III.3.56)",
            name(ts, v)
        );
        self.report(Code::ReturnPtrToStack, off, msg);
    }

    /// `call` or `callvirt` of a constructor: on a followed constructor's `this`, one of its
    /// class's or base class's initialises it; otherwise only a value type's, on a managed
    /// pointer, is verifiable (III.3.19, as ILVerify has it).
    fn ctor_call(
        &mut self,
        ts: &mut TypeSystem<'_>,
        x: Ins,
        this: V,
        own_this: bool,
        parent: TyId,
    ) {
        if let (true, Some(c)) = (own_this, self.frame.ctor) {
            let callee = ts.key_of(parent);
            // A callee or base class that did not resolve is not judged: `this` is taken as
            // initialised, never guessed otherwise.
            if callee.is_none() || c.base.is_none() || callee == Some(c.own) || callee == c.base {
                self.init = true;
                return;
            }
        }
        let value_address = match this {
            V::ByRef(t, _) => ts.is_value_type(t) != Some(false),
            V::Unknown => true,
            _ => false,
        };
        if !value_address {
            let msg = format!(
                "{} calls a constructor of {} on {}: constructors are called by newobj, or on \
                 this by a constructor of the same class or of a derived class",
                x.op.name(),
                ts.name(parent),
                name(ts, this)
            );
            self.report(Code::CallCtor, x.off, msg);
        }
    }

    /// The `ldftn` or `ldvirtftn` right before instruction `x` in the same block, with `x`'s
    /// index: where a delegate's `newobj` takes its method from.
    fn function_pointer(&self, x: Ins) -> Option<(usize, Ins)> {
        let k = self.index(x.off)?;
        if k == 0 || self.ins[k].start {
            return None;
        }
        let f = self.ins[k - 1];
        matches!(f.op, Opcode::Ldftn | Opcode::Ldvirtftn).then_some((k, f))
    }

    /// `newobj` of a delegate: its function pointer comes from the instruction right before
    /// it, `ldftn`, or from `dup; ldvirtftn` on the object passed, with no block starting in
    /// between (III.1.8.1.5, as ILVerify checks it).
    fn delegate_pattern(&mut self, ts: &mut TypeSystem<'_>, x: Ins, parent: TyId) {
        let Some(k) = self.index(x.off) else {
            return;
        };
        let ldftn = self.function_pointer(x).map(|(_, f)| f.op);
        let ok = match ldftn {
            Some(Opcode::Ldftn) => true,
            Some(_) => k >= 2 && !self.ins[k - 1].start && self.ins[k - 2].op == Opcode::Dup,
            None => false,
        };
        if !ok {
            let msg = format!(
                "newobj of delegate {}: its function pointer is not made right before it by \
                 ldftn, or by dup; ldvirtftn on the object passed (III.1.8.1.5)",
                ts.name(parent)
            );
            self.report(Code::DelegatePattern, x.off, msg);
        }
    }

    /// `newobj` of a delegate on a method from the `ldftn`/`ldvirtftn` right before it: the
    /// delegate's `Invoke` must be able to call the method (II.14.6.1): each of `Invoke`'s
    /// parameters assignable to the method's (after the one the object passed is bound to: an
    /// instance method's `this`, or a static method's first parameter when the object is not
    /// null), and the method's return assignable to `Invoke`'s. Open instance delegates (null
    /// passed for an instance method), generic parameters and what does not resolve are not
    /// judged.
    fn delegate_target(&mut self, ts: &mut TypeSystem<'_>, x: Ins, delegate: TyId, obj: V) {
        let Some((_, ftn)) = self.function_pointer(x) else {
            return;
        };
        let (Some(target), Some(invoke)) =
            (ts.method(Token(ftn.arg)), ts.delegate_invoke(delegate))
        else {
            return;
        };
        if target.vararg || invoke.vararg || matches!(obj, V::Unknown | V::Var(_)) {
            return;
        }
        let bound_first = !target.has_this && obj != V::Null;
        if target.has_this && obj == V::Null {
            return;
        }
        let (inv, tgt) = (ts.params(&invoke).to_vec(), ts.params(&target).to_vec());
        let skip = usize::from(bound_first);
        let mut wrong = None;
        if tgt.len() != inv.len() + skip {
            wrong = Some(format!(
                "Invoke passes {} argument(s), the method takes {}{}",
                inv.len(),
                tgt.len(),
                if bound_first {
                    " (its first bound to the object passed)"
                } else {
                    ""
                }
            ));
        } else if bound_first
            && let V::Obj(t) = obj
            && fits(ts, V::Obj(t), tgt[0]).is_err()
        {
            wrong = Some(format!(
                "the object passed, {}, cannot be the method's first parameter, {}",
                ts.name(t),
                ts.name(tgt[0])
            ));
        } else if let (true, V::Obj(t)) = (target.has_this, obj)
            && target.parent != TyId::UNKNOWN
            && ts.assignable(t, target.parent) == Ans::No
        {
            wrong = Some(format!(
                "the object passed, {}, is not a {}",
                ts.name(t),
                ts.name(target.parent)
            ));
        } else if let Some(i) = (0..inv.len()).find(|&i| passes(ts, inv[i], tgt[i + skip]).is_err())
        {
            wrong = Some(format!(
                "Invoke's parameter {} is {}, the method's is {}",
                i + 1,
                ts.name(inv[i]),
                ts.name(tgt[i + skip])
            ));
        } else if (target.ret == TyId::VOID) != (invoke.ret == TyId::VOID)
            || target.ret != TyId::VOID && passes(ts, target.ret, invoke.ret).is_err()
        {
            wrong = Some(format!(
                "the method returns {}, Invoke {}",
                ts.name(target.ret),
                ts.name(invoke.ret)
            ));
        }
        if let Some(why) = wrong {
            let msg = format!(
                "newobj of delegate {} on a method it cannot call: {why} (II.14.6.1)",
                ts.name(delegate)
            );
            self.report(Code::DelegateCtor, x.off, msg);
        }
    }

    /// `newobj` of a delegate on `ldftn` (not `ldvirtftn`) of a method that may be overridden
    /// binds the method without dispatch: only to the method's own unmodified `this` or a boxed
    /// value, as for `call` (III.1.8.1.5, III.3.19; C#'s `new Action(base.M)`).
    fn delegate_ldftn(&mut self, ts: &mut TypeSystem<'_>, x: Ins, obj: V, own_this: bool) {
        let Some((_, f)) = self.function_pointer(x) else {
            return;
        };
        if f.op != Opcode::Ldftn {
            return;
        }
        let own = self.own_this(own_this, f, 0);
        if self.skips_override(ts, x.off, Token(f.arg), obj, own, true) {
            self.ldftn_mismatch(ts, x.off, obj, false);
        }
    }

    /// A `readonly.` call must call an array type's `Address` method (III.2.3): a method of an
    /// array type that returns a managed pointer, as ILVerify checks it (the runtime defines
    /// an array's methods, and only `Address` returns one). A callee whose declaring type or
    /// return type is not known is not judged.
    fn readonly_callee(&mut self, ts: &mut TypeSystem<'_>, x: Ins, parent: TyId, ret: TyId) {
        let owner = ts.tys.node(parent);
        let array = matches!(owner, TyNode::SzArray(_) | TyNode::Array(..));
        if matches!(owner, TyNode::Unknown) || (array && ts.tys.has_unknown(ret)) {
            return;
        }
        if !(array && matches!(ts.tys.node(ret), TyNode::ByRef(_))) {
            let msg = format!(
                "readonly. call to a method of {}, not an array type's Address method (III.2.3)",
                ts.name(parent)
            );
            self.report(Code::ReadonlyUnexpectedCallee, x.off, msg);
        }
    }

    /// A `constrained. c` call's `this`, a managed pointer to `t`: it must point to a `c`
    /// (III.2.1), as ILVerify checks it (StackUnexpected there). The runtimes do not check it:
    /// they dereference or box what the pointer points to as a `c`, so a mismatch runs,
    /// unsafely; unverifiable. Interchangeable targets (`int32&` for `uint32&`, an enum for its
    /// underlying type), generic parameters and what did not resolve pass.
    fn constrained_target(&mut self, ts: &mut TypeSystem<'_>, x: Ins, this: V, t: TyId, c: TyId) {
        if !super::vtype::byref_targets_match(ts, t, c) {
            let n = format!("{}& (constrained. {})", ts.name(c), ts.name(c));
            self.bad(ts, Code::TypeNotAssignable, x.off, this, &n);
        }
    }

    /// `this` of a call: an object of the declaring type (or a managed pointer to it for a
    /// value type's method, or to anything under `constrained.`).
    fn this_arg(
        &mut self,
        ts: &mut TypeSystem<'_>,
        x: Ins,
        this: V,
        parent: TyId,
        prefix: &Prefixes,
    ) {
        if let Some(c) = prefix.constrained {
            match this {
                V::ByRef(t, _) => self.constrained_target(ts, x, this, t, c),
                V::Unknown => {}
                _ => self.bad(
                    ts,
                    Code::StackByRef,
                    x.off,
                    this,
                    "a managed pointer (constrained.)",
                ),
            }
            return;
        }
        match ts.is_value_type(parent) {
            Some(true) => match this {
                V::ByRef(t, _) => {
                    if !super::vtype::byref_targets_match(ts, t, parent) {
                        let n = format!("{}&", ts.name(parent));
                        self.bad(ts, Code::TypeNotAssignable, x.off, this, &n);
                    }
                }
                // A boxed value: valid, not verifiable; a value itself for `call`.
                V::Obj(_) | V::Value(_) | V::Unknown | V::Var(_) | V::I | V::Null => {}
                _ => {
                    let n = format!("{}&", ts.name(parent));
                    self.bad(ts, Code::StackUnexpected, x.off, this, &n);
                }
            },
            // A declaring type whose kind is not known (unresolved) is not judged against a
            // managed pointer: it may be a value type.
            None if matches!(this, V::ByRef(..)) => {
                self.part(Partial::UnresolvedType);
            }
            _ => match this {
                V::ByRef(..) => {
                    // `call` on a reference type's method through a managed pointer: valid
                    // for some runtime patterns, not verifiable.
                    self.bad(
                        ts,
                        Code::UnmanagedPointer,
                        x.off,
                        this,
                        "an object reference",
                    );
                }
                V::Value(_) | V::I4 | V::I8 | V::F => {
                    let n = ts.name(parent);
                    self.bad(ts, Code::StackObjRef, x.off, this, &n);
                }
                _ => self.expect(ts, x.off, this, parent, "this"),
            },
        }
    }

    /// The transfer function of one instruction.
    // One call site, once per instruction: inlined into the block loop, whose frame is set up
    // once per block.
    #[inline(always)]
    fn step(&mut self, ts: &mut TypeSystem<'_>, x: Ins, stack: &mut Vec<V>, prefix: &Prefixes) {
        use Opcode as O;
        let off = x.off;
        match x.op {
            O::Nop | O::Break => {}
            O::Ldarg_0 | O::Ldarg_1 | O::Ldarg_2 | O::Ldarg_3 => {
                self.ldarg(ts, stack, x.op as u32 - O::Ldarg_0 as u32)
            }
            O::Ldarg_S | O::Ldarg => self.ldarg(ts, stack, x.arg),
            O::Ldarga_S | O::Ldarga => {
                self.this_stored |= x.arg == 0;
                let t = self.frame.args.get(x.arg as usize).copied();
                stack.push(match t {
                    Some(t) => V::ByRef(t, Home::Frame),
                    None => V::Unknown,
                });
            }
            O::Starg_S | O::Starg => {
                self.this_stored |= x.arg == 0;
                let v = self.pop(stack);
                if let Some(&t) = self.frame.args.get(x.arg as usize) {
                    self.expect(ts, off, v, t, What::Arg(x.arg));
                }
            }
            O::Ldloc_0 | O::Ldloc_1 | O::Ldloc_2 | O::Ldloc_3 => {
                self.ldloc(ts, stack, x.op as u32 - O::Ldloc_0 as u32)
            }
            O::Ldloc_S | O::Ldloc => self.ldloc(ts, stack, x.arg),
            O::Ldloca_S | O::Ldloca => {
                let t = self.frame.locals.get(x.arg as usize).copied();
                stack.push(match t {
                    Some(t) => V::ByRef(t, Home::Frame),
                    None => V::Unknown,
                });
            }
            O::Stloc_0 | O::Stloc_1 | O::Stloc_2 | O::Stloc_3 => {
                self.stloc(ts, stack, off, x.op as u32 - O::Stloc_0 as u32)
            }
            O::Stloc_S | O::Stloc => self.stloc(ts, stack, off, x.arg),
            O::Ldnull => stack.push(V::Null),
            O::Ldc_I4_M1
            | O::Ldc_I4_0
            | O::Ldc_I4_1
            | O::Ldc_I4_2
            | O::Ldc_I4_3
            | O::Ldc_I4_4
            | O::Ldc_I4_5
            | O::Ldc_I4_6
            | O::Ldc_I4_7
            | O::Ldc_I4_8
            | O::Ldc_I4_S
            | O::Ldc_I4 => stack.push(V::I4),
            O::Ldc_I8 => stack.push(V::I8),
            O::Ldc_R4 | O::Ldc_R8 => stack.push(V::F),
            O::Dup => {
                let v = stack.last().copied().unwrap_or(V::Unknown);
                stack.push(v);
            }
            O::Pop => {
                self.pop(stack);
            }
            O::Jmp => {}
            O::Call | O::Callvirt | O::Calli | O::Newobj => self.call(ts, x, stack, prefix),
            O::Ret => {
                if self.frame.ret != TyId::VOID {
                    let v = self.pop(stack);
                    let want = self.frame.ret;
                    self.expect(ts, off, v, want, "return value");
                    if let V::ByRef(_, Home::Frame) = v {
                        self.return_ptr_to_stack(ts, off, v);
                    }
                }
            }
            O::Br_S | O::Br | O::Leave | O::Leave_S => {}
            O::Brfalse_S | O::Brtrue_S | O::Brfalse | O::Brtrue => {
                let v = self.pop(stack);
                match v {
                    V::I4 | V::I8 | V::I | V::Obj(_) | V::Null | V::ByRef(..) => {}
                    V::Unknown | V::Var(_) => {
                        self.note(v);
                    }
                    V::F | V::Value(_) => self.bad(
                        ts,
                        Code::StackUnexpected,
                        off,
                        v,
                        "an integer or a reference",
                    ),
                }
            }
            O::Beq_S | O::Bne_Un_S | O::Beq | O::Bne_Un => {
                let b = self.pop(stack);
                let a = self.pop(stack);
                self.compare(ts, x, a, b, true);
            }
            O::Bge_S
            | O::Bgt_S
            | O::Ble_S
            | O::Blt_S
            | O::Bge_Un_S
            | O::Bgt_Un_S
            | O::Ble_Un_S
            | O::Blt_Un_S
            | O::Bge
            | O::Bgt
            | O::Ble
            | O::Blt
            | O::Bge_Un
            | O::Bgt_Un
            | O::Ble_Un
            | O::Blt_Un => {
                let b = self.pop(stack);
                let a = self.pop(stack);
                // `bgt.un` and `ble.un` on references: the null-check idiom (III.3.9 note).
                let eq = matches!(x.op, O::Bgt_Un_S | O::Bgt_Un | O::Ble_Un_S | O::Ble_Un);
                self.compare(ts, x, a, b, eq);
            }
            O::Switch => {
                let v = self.pop(stack);
                self.index_operand(ts, off, v);
            }
            O::Ldind_I1
            | O::Ldind_U1
            | O::Ldind_I2
            | O::Ldind_U2
            | O::Ldind_I4
            | O::Ldind_U4
            | O::Ldind_I8
            | O::Ldind_I
            | O::Ldind_R4
            | O::Ldind_R8 => {
                let a = self.pop(stack);
                let p = ldind_prim(x.op);
                if let Some(t) = self.address(ts, off, a) {
                    self.pointee_is(ts, off, a, t, p);
                }
                stack.push(super::vtype::prim_stack(p));
            }
            O::Ldind_Ref => {
                let a = self.pop(stack);
                let r = match self.address(ts, off, a) {
                    Some(t) => match stack_of(ts, t) {
                        v @ (V::Obj(_) | V::Unknown | V::Var(_)) => v,
                        _ => {
                            self.bad(
                                ts,
                                Code::StackUnexpected,
                                off,
                                a,
                                "a pointer to a reference",
                            );
                            V::Unknown
                        }
                    },
                    None => V::Unknown,
                };
                stack.push(r);
            }
            O::Stind_Ref
            | O::Stind_I1
            | O::Stind_I2
            | O::Stind_I4
            | O::Stind_I8
            | O::Stind_R4
            | O::Stind_R8
            | O::Stind_I => {
                let v = self.pop(stack);
                let a = self.pop(stack);
                let target = self.address(ts, off, a);
                if x.op == O::Stind_Ref {
                    match (v, target) {
                        (V::Obj(_) | V::Null, Some(t)) => {
                            self.expect(ts, off, v, t, "stored value")
                        }
                        (V::Obj(_) | V::Null | V::Unknown | V::Var(_), _) => {}
                        _ => self.bad(ts, Code::StackObjRef, off, v, "a reference"),
                    }
                } else {
                    let p = stind_prim(x.op);
                    self.expect_v(ts, off, v, super::vtype::prim_stack(p), "stored value");
                    if let Some(t) = target {
                        self.pointee_is(ts, off, a, t, p);
                    }
                }
            }
            O::Add | O::Sub | O::Mul | O::Div | O::Rem => {
                self.binary(ts, x, stack, Binary::Numeric)
            }
            O::Add_Ovf
            | O::Add_Ovf_Un
            | O::Sub_Ovf
            | O::Sub_Ovf_Un
            | O::Mul_Ovf
            | O::Mul_Ovf_Un => self.binary(ts, x, stack, Binary::Overflow),
            O::Div_Un | O::Rem_Un | O::And | O::Or | O::Xor => {
                self.binary(ts, x, stack, Binary::Integer)
            }
            O::Shl | O::Shr | O::Shr_Un => {
                let amount = self.pop(stack);
                let v = self.pop(stack);
                match amount {
                    V::I4 | V::I | V::Unknown | V::Var(_) => {}
                    _ => self.bad(
                        ts,
                        Code::StackUnexpected,
                        off,
                        amount,
                        "an int32 or native int shift amount",
                    ),
                }
                let r = match v {
                    V::I4 | V::I8 | V::I | V::Unknown => v,
                    V::Var(_) => V::Unknown,
                    _ => {
                        self.bad(ts, Code::ExpectedIntegerType, off, v, "an integer");
                        V::Unknown
                    }
                };
                stack.push(r);
            }
            O::Neg => {
                let v = self.pop(stack);
                let r = match v {
                    V::I4 | V::I8 | V::I | V::F | V::Unknown => v,
                    V::Var(_) => V::Unknown,
                    _ => {
                        self.bad(ts, Code::ExpectedNumericType, off, v, "a number");
                        V::Unknown
                    }
                };
                stack.push(r);
            }
            O::Not => {
                let v = self.pop(stack);
                let r = match v {
                    V::I4 | V::I8 | V::I | V::Unknown => v,
                    V::Var(_) => V::Unknown,
                    _ => {
                        self.bad(ts, Code::ExpectedIntegerType, off, v, "an integer");
                        V::Unknown
                    }
                };
                stack.push(r);
            }
            O::Conv_I1
            | O::Conv_I2
            | O::Conv_I4
            | O::Conv_I8
            | O::Conv_R4
            | O::Conv_R8
            | O::Conv_U4
            | O::Conv_U8
            | O::Conv_R_Un
            | O::Conv_Ovf_I1_Un
            | O::Conv_Ovf_I2_Un
            | O::Conv_Ovf_I4_Un
            | O::Conv_Ovf_I8_Un
            | O::Conv_Ovf_U1_Un
            | O::Conv_Ovf_U2_Un
            | O::Conv_Ovf_U4_Un
            | O::Conv_Ovf_U8_Un
            | O::Conv_Ovf_I_Un
            | O::Conv_Ovf_U_Un
            | O::Conv_Ovf_I1
            | O::Conv_Ovf_U1
            | O::Conv_Ovf_I2
            | O::Conv_Ovf_U2
            | O::Conv_Ovf_I4
            | O::Conv_Ovf_U4
            | O::Conv_Ovf_I8
            | O::Conv_Ovf_U8
            | O::Conv_U2
            | O::Conv_U1
            | O::Conv_I
            | O::Conv_Ovf_I
            | O::Conv_Ovf_U
            | O::Conv_U => {
                let v = self.pop(stack);
                let to_pointer = matches!(
                    x.op,
                    O::Conv_I
                        | O::Conv_U
                        | O::Conv_Ovf_I
                        | O::Conv_Ovf_U
                        | O::Conv_Ovf_I_Un
                        | O::Conv_Ovf_U_Un
                        | O::Conv_I8
                        | O::Conv_U8
                );
                match v {
                    V::I4 | V::I8 | V::I | V::F | V::Unknown | V::Var(_) => {}
                    // A managed pointer or a (pinned) object reference as an address: valid,
                    // not verifiable (III.1.5 Table III.8).
                    V::ByRef(..) => self.bad(ts, Code::UnmanagedPointer, off, v, "a number"),
                    V::Obj(_) | V::Null if to_pointer => {
                        self.bad(ts, Code::UnmanagedPointer, off, v, "a number")
                    }
                    _ => self.bad(ts, Code::ExpectedNumericType, off, v, "a number"),
                }
                stack.push(conv_result(x.op));
            }
            O::Ckfinite => {
                let v = self.pop(stack);
                match v {
                    V::F | V::Unknown | V::Var(_) => {}
                    _ => self.bad(ts, Code::ExpectedFloatType, off, v, "F"),
                }
                stack.push(V::F);
            }
            O::Cpobj => {
                let s = self.pop(stack);
                let d = self.pop(stack);
                self.address(ts, off, s);
                self.address(ts, off, d);
            }
            O::Ldobj => {
                let a = self.pop(stack);
                let t = ts.type_token(0, Token(x.arg));
                self.address(ts, off, a);
                let v = stack_of(ts, t);
                stack.push(self.note(v));
            }
            O::Stobj => {
                let v = self.pop(stack);
                let a = self.pop(stack);
                let t = ts.type_token(0, Token(x.arg));
                self.address(ts, off, a);
                self.expect(ts, off, v, t, "stored value");
            }
            O::Ldstr => stack.push(V::Obj(TyId::STRING)),
            O::Castclass | O::Isinst => {
                let v = self.pop(stack);
                let t = ts.type_token(0, Token(x.arg));
                self.object_operand(ts, off, v);
                stack.push(V::Obj(t));
            }
            O::Unbox => {
                let v = self.pop(stack);
                let t = ts.type_token(0, Token(x.arg));
                self.object_operand(ts, off, v);
                // Into the box, on the heap.
                stack.push(V::ByRef(t, Home::Permanent));
            }
            O::Unbox_Any => {
                let v = self.pop(stack);
                let t = ts.type_token(0, Token(x.arg));
                self.object_operand(ts, off, v);
                let r = stack_of(ts, t);
                stack.push(self.note(r));
            }
            O::Box => {
                let v = self.pop(stack);
                let t = ts.type_token(0, Token(x.arg));
                self.expect(ts, off, v, t, "boxed value");
                // A nullable boxes as its underlying type or null; other values as themselves.
                stack.push(match ts.is_value_type(t) {
                    Some(false) => stack_of(ts, t),
                    _ => V::Obj(t),
                });
            }
            O::Throw => {
                let v = self.pop(stack);
                self.object_operand(ts, off, v);
            }
            O::Ldfld | O::Ldflda => {
                let obj = self.pop(stack);
                match ts.field(Token(x.arg)) {
                    Some((t, parent, _)) => {
                        self.instance(ts, off, obj, parent);
                        let v = if x.op == O::Ldflda {
                            V::ByRef(t, field_home(obj))
                        } else {
                            stack_of(ts, t)
                        };
                        stack.push(self.note(v));
                    }
                    None => {
                        self.part(Partial::UnresolvedMember);
                        stack.push(V::Unknown);
                    }
                }
            }
            O::Stfld => {
                let v = self.pop(stack);
                let obj = self.pop(stack);
                match ts.field(Token(x.arg)) {
                    Some((t, parent, _)) => {
                        self.instance(ts, off, obj, parent);
                        self.expect(ts, off, v, t, "stored value");
                    }
                    None => self.part(Partial::UnresolvedMember),
                }
            }
            O::Ldsfld | O::Ldsflda => match ts.field(Token(x.arg)) {
                Some((t, _, _)) => {
                    let v = if x.op == O::Ldsflda {
                        V::ByRef(t, Home::Permanent)
                    } else {
                        stack_of(ts, t)
                    };
                    stack.push(self.note(v));
                }
                None => {
                    self.part(Partial::UnresolvedMember);
                    stack.push(V::Unknown);
                }
            },
            O::Stsfld => {
                let v = self.pop(stack);
                match ts.field(Token(x.arg)) {
                    Some((t, _, _)) => self.expect(ts, off, v, t, "stored value"),
                    None => self.part(Partial::UnresolvedMember),
                }
            }
            O::Newarr => {
                let n = self.pop(stack);
                self.index_operand(ts, off, n);
                let t = ts.type_token(0, Token(x.arg));
                let a = ts.tys.intern(TyNode::SzArray(t));
                stack.push(V::Obj(a));
            }
            O::Ldlen => {
                let a = self.pop(stack);
                self.array(ts, off, a);
                stack.push(V::I);
            }
            O::Ldelema => {
                let i = self.pop(stack);
                let a = self.pop(stack);
                self.index_operand(ts, off, i);
                self.array(ts, off, a);
                let t = ts.type_token(0, Token(x.arg));
                stack.push(V::ByRef(t, Home::Permanent));
            }
            O::Ldelem_I1
            | O::Ldelem_U1
            | O::Ldelem_I2
            | O::Ldelem_U2
            | O::Ldelem_I4
            | O::Ldelem_U4
            | O::Ldelem_I8
            | O::Ldelem_I
            | O::Ldelem_R4
            | O::Ldelem_R8 => {
                let i = self.pop(stack);
                let a = self.pop(stack);
                self.index_operand(ts, off, i);
                let p = ldelem_prim(x.op);
                if let Some(e) = self.array(ts, off, a) {
                    self.element_is(ts, off, a, e, p);
                }
                stack.push(super::vtype::prim_stack(p));
            }
            O::Ldelem_Ref => {
                let i = self.pop(stack);
                let a = self.pop(stack);
                self.index_operand(ts, off, i);
                let r = match self.array(ts, off, a) {
                    Some(e) => match stack_of(ts, e) {
                        v @ (V::Obj(_) | V::Unknown | V::Var(_)) => v,
                        _ => {
                            self.bad(ts, Code::StackUnexpected, off, a, "an array of references");
                            V::Unknown
                        }
                    },
                    None => V::Unknown,
                };
                stack.push(r);
            }
            O::Ldelem => {
                let i = self.pop(stack);
                let a = self.pop(stack);
                self.index_operand(ts, off, i);
                self.array(ts, off, a);
                let t = ts.type_token(0, Token(x.arg));
                let v = stack_of(ts, t);
                stack.push(self.note(v));
            }
            O::Stelem_I
            | O::Stelem_I1
            | O::Stelem_I2
            | O::Stelem_I4
            | O::Stelem_I8
            | O::Stelem_R4
            | O::Stelem_R8 => {
                let v = self.pop(stack);
                let i = self.pop(stack);
                let a = self.pop(stack);
                self.index_operand(ts, off, i);
                let p = stelem_prim(x.op);
                self.expect_v(ts, off, v, super::vtype::prim_stack(p), "stored element");
                if let Some(e) = self.array(ts, off, a) {
                    self.element_is(ts, off, a, e, p);
                }
            }
            O::Stelem_Ref => {
                let v = self.pop(stack);
                let i = self.pop(stack);
                let a = self.pop(stack);
                self.index_operand(ts, off, i);
                self.array(ts, off, a);
                match v {
                    V::Obj(_) | V::Null | V::Unknown | V::Var(_) => {}
                    _ => self.bad(ts, Code::StackObjRef, off, v, "a reference"),
                }
            }
            O::Stelem => {
                let v = self.pop(stack);
                let i = self.pop(stack);
                let a = self.pop(stack);
                self.index_operand(ts, off, i);
                self.array(ts, off, a);
                let t = ts.type_token(0, Token(x.arg));
                self.expect(ts, off, v, t, "stored element");
            }
            O::Refanyval => {
                let v = self.pop(stack);
                self.expect_v(ts, off, v, V::Value(TyId::TYPEDREF), "typed reference");
                let t = ts.type_token(0, Token(x.arg));
                // A typed reference's home is not followed: taken as permanent, never guessed
                // to be in the frame.
                stack.push(V::ByRef(t, Home::Permanent));
            }
            O::Mkrefany => {
                let a = self.pop(stack);
                self.address(ts, off, a);
                stack.push(V::Value(TyId::TYPEDREF));
            }
            O::Refanytype => {
                let v = self.pop(stack);
                self.expect_v(ts, off, v, V::Value(TyId::TYPEDREF), "typed reference");
                let h = ts.well_known("System.RuntimeTypeHandle");
                let r = stack_of(ts, h);
                stack.push(r);
            }
            O::Ldtoken => {
                let handle = match Token(x.arg).table() {
                    Some(
                        crate::image::tables::Table::MethodDef
                        | crate::image::tables::Table::MethodSpec,
                    ) => "System.RuntimeMethodHandle",
                    Some(crate::image::tables::Table::Field) => "System.RuntimeFieldHandle",
                    Some(crate::image::tables::Table::MemberRef) => {
                        // A MemberRef names a field or a method by its signature's first byte.
                        if ts.field(Token(x.arg)).is_some() {
                            "System.RuntimeFieldHandle"
                        } else {
                            "System.RuntimeMethodHandle"
                        }
                    }
                    _ => "System.RuntimeTypeHandle",
                };
                let h = ts.well_known(handle);
                let v = stack_of(ts, h);
                stack.push(self.note(v));
            }
            O::Endfinally | O::Rethrow => stack.clear(),
            O::Arglist => {
                let h = ts.well_known("System.RuntimeArgumentHandle");
                let v = stack_of(ts, h);
                stack.push(v);
            }
            O::Ceq | O::Cgt_Un => {
                let b = self.pop(stack);
                let a = self.pop(stack);
                self.compare(ts, x, a, b, true);
                stack.push(V::I4);
            }
            O::Cgt | O::Clt | O::Clt_Un => {
                let b = self.pop(stack);
                let a = self.pop(stack);
                self.compare(ts, x, a, b, false);
                stack.push(V::I4);
            }
            O::Ldftn => stack.push(V::I),
            O::Ldvirtftn => {
                let v = self.pop(stack);
                self.object_operand(ts, off, v);
                stack.push(V::I);
            }
            O::Localloc => {
                let v = self.pop(stack);
                self.index_operand(ts, off, v);
                stack.push(V::I);
            }
            O::Endfilter => {
                let v = self.pop(stack);
                self.expect_v(ts, off, v, V::I4, "filter result");
            }
            O::Unaligned | O::Volatile | O::Tail | O::Constrained | O::No | O::Readonly => {}
            O::Initobj => {
                let a = self.pop(stack);
                self.address(ts, off, a);
            }
            O::Cpblk | O::Initblk => {
                let size = self.pop(stack);
                let b = self.pop(stack);
                let a = self.pop(stack);
                self.index_operand(ts, off, size);
                self.address(ts, off, a);
                if x.op == O::Cpblk {
                    self.address(ts, off, b);
                }
            }
            O::Sizeof => stack.push(V::I4),
        }
    }

    fn object_operand(&mut self, ts: &mut TypeSystem<'_>, off: u32, v: V) {
        match v {
            V::Obj(_) | V::Null | V::Unknown | V::Var(_) => {
                self.note(v);
            }
            _ => self.bad(ts, Code::StackObjRef, off, v, "an object reference"),
        }
    }

    fn ldarg(&mut self, ts: &mut TypeSystem<'_>, stack: &mut Vec<V>, n: u32) {
        let v = match self.frame.args.get(n as usize) {
            Some(&t) => stack_of(ts, t),
            None => V::Unknown,
        };
        stack.push(self.note(v));
    }

    fn ldloc(&mut self, ts: &mut TypeSystem<'_>, stack: &mut Vec<V>, n: u32) {
        let v = match self.frame.locals.get(n as usize) {
            Some(&t) => stack_of(ts, t),
            None => V::Unknown,
        };
        stack.push(self.note(v));
    }

    fn stloc(&mut self, ts: &mut TypeSystem<'_>, stack: &mut Vec<V>, off: u32, n: u32) {
        let v = self.pop(stack);
        if let Some(&t) = self.frame.locals.get(n as usize) {
            self.expect(ts, off, v, t, What::Local(n));
        }
    }

    /// A load or store through a managed pointer to `t` with an instruction of primitive `p`:
    /// the pointed-to type must be `p`'s verification type (unverifiable otherwise).
    fn pointee_is(&mut self, ts: &mut TypeSystem<'_>, off: u32, a: V, t: TyId, p: Prim) {
        if ts.tys.has_unknown(t) || ts.tys.has_generic_param(t) {
            return;
        }
        match prim_of(ts, t) {
            Some(q) if q.reduced() == p.reduced() => {}
            _ => {
                let want = format!("{}&", p.name());
                self.bad(ts, Code::TypeNotAssignable, off, a, &want);
            }
        }
    }

    /// An element access of primitive `p` on an array of `e` (unverifiable when they differ).
    fn element_is(&mut self, ts: &mut TypeSystem<'_>, off: u32, a: V, e: TyId, p: Prim) {
        if ts.tys.has_unknown(e) || ts.tys.has_generic_param(e) {
            return;
        }
        match prim_of(ts, e) {
            Some(q) if q.reduced() == p.reduced() => {}
            _ => {
                let want = format!("{}[]", p.name());
                self.bad(ts, Code::TypeNotAssignable, off, a, &want);
            }
        }
    }
}

fn ldind_prim(op: Opcode) -> Prim {
    use Opcode as O;
    match op {
        O::Ldind_I1 => Prim::I1,
        O::Ldind_U1 => Prim::U1,
        O::Ldind_I2 => Prim::I2,
        O::Ldind_U2 => Prim::U2,
        O::Ldind_I4 => Prim::I4,
        O::Ldind_U4 => Prim::U4,
        O::Ldind_I8 => Prim::I8,
        O::Ldind_R4 => Prim::R4,
        O::Ldind_R8 => Prim::R8,
        _ => Prim::I,
    }
}

fn stind_prim(op: Opcode) -> Prim {
    use Opcode as O;
    match op {
        O::Stind_I1 => Prim::I1,
        O::Stind_I2 => Prim::I2,
        O::Stind_I4 => Prim::I4,
        O::Stind_I8 => Prim::I8,
        O::Stind_R4 => Prim::R4,
        O::Stind_R8 => Prim::R8,
        _ => Prim::I,
    }
}

fn ldelem_prim(op: Opcode) -> Prim {
    use Opcode as O;
    match op {
        O::Ldelem_I1 => Prim::I1,
        O::Ldelem_U1 => Prim::U1,
        O::Ldelem_I2 => Prim::I2,
        O::Ldelem_U2 => Prim::U2,
        O::Ldelem_I4 => Prim::I4,
        O::Ldelem_U4 => Prim::U4,
        O::Ldelem_I8 => Prim::I8,
        O::Ldelem_R4 => Prim::R4,
        O::Ldelem_R8 => Prim::R8,
        _ => Prim::I,
    }
}

fn stelem_prim(op: Opcode) -> Prim {
    use Opcode as O;
    match op {
        O::Stelem_I1 => Prim::I1,
        O::Stelem_I2 => Prim::I2,
        O::Stelem_I4 => Prim::I4,
        O::Stelem_I8 => Prim::I8,
        O::Stelem_R4 => Prim::R4,
        O::Stelem_R8 => Prim::R8,
        _ => Prim::I,
    }
}

/// What a conversion pushes (III.3.27–3.29).
fn conv_result(op: Opcode) -> V {
    use Opcode as O;
    match op {
        O::Conv_I8
        | O::Conv_U8
        | O::Conv_Ovf_I8
        | O::Conv_Ovf_U8
        | O::Conv_Ovf_I8_Un
        | O::Conv_Ovf_U8_Un => V::I8,
        O::Conv_R4 | O::Conv_R8 | O::Conv_R_Un => V::F,
        O::Conv_I
        | O::Conv_U
        | O::Conv_Ovf_I
        | O::Conv_Ovf_U
        | O::Conv_Ovf_I_Un
        | O::Conv_Ovf_U_Un => V::I,
        _ => V::I4,
    }
}

/// Whether a value of signature type `from` may go where `to` is expected: [`fits`] of its
/// stack form (a delegate's `Invoke` passing its parameters to the method, the method's return
/// going back as `Invoke`'s).
fn passes(ts: &mut TypeSystem<'_>, from: TyId, to: TyId) -> Result<(), Code> {
    let v = stack_of(ts, from);
    fits(ts, v, to)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::Image;
    use crate::instr::{Instructions, Operand};

    /// The checker's decoder reads every body of the embedded corpus as the instruction
    /// iterator does: offsets, opcodes, the integer operand and the targets (as instruction
    /// indices), and the block starts.
    #[test]
    fn handler_ends_end_blocks_by_their_flow() {
        // The block loop ends a block on the flow alone.
        for op in [Opcode::Endfinally, Opcode::Endfilter] {
            assert!(op.flow().ends_block(), "{op:?}");
        }
    }

    #[test]
    fn decoder_agrees_with_the_instruction_iterator() {
        let mut checker = TypeChecker::new();
        let mut bodies = 0;
        for (name, bytes) in crate::corpus::EMBEDDED {
            let image = Image::parse(bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
            for m in image.methods().filter(|m| m.rva() != 0) {
                let Ok(body) = m.decoded_body() else { continue };
                let code = body.code;
                let reference: Vec<_> = Instructions::new(code).collect();
                // Cut short anywhere, a body is rejected exactly when the iterator rejects it.
                if code.len() <= 256 {
                    for cut in 0..code.len() {
                        let part = &code[..cut];
                        let want = Instructions::new(part).all(|r| r.is_ok());
                        assert_eq!(checker.decode(part), want, "{name} {} cut {cut}", m.rid());
                    }
                }
                let ok = checker.decode(code);
                assert_eq!(
                    ok,
                    reference.iter().all(Result::is_ok),
                    "{name} {}",
                    m.rid()
                );
                if !ok {
                    continue;
                }
                bodies += 1;
                assert_eq!(checker.ins.len(), reference.len());
                let mut starts = vec![false; reference.len()];
                for (k, (x, r)) in checker.ins.iter().zip(&reference).enumerate() {
                    let r = r.as_ref().expect("decoded");
                    assert_eq!((x.off, x.op, x.flow), (r.offset, r.opcode, r.opcode.flow()));
                    let arg = match &r.operand {
                        Operand::Var(v) => Some(u32::from(*v)),
                        Operand::Token(t) => Some(*t),
                        Operand::Int8(v) => Some(*v as u32),
                        Operand::Int32(v) => Some(*v as u32),
                        // No other operand is an argument of the fast decoder's record.
                        _ => None,
                    };
                    let targets: Vec<u32> = r
                        .targets()
                        .map(|t| {
                            let i = reference
                                .iter()
                                .position(|y| y.as_ref().is_ok_and(|y| i64::from(y.offset) == t));
                            i.map_or(u32::MAX, |i| i as u32)
                        })
                        .collect();
                    if !matches!(r.opcode.flow(), Flow::Branch | Flow::CondBranch) {
                        assert!(targets.is_empty());
                        assert_eq!(arg.unwrap_or(0), x.arg);
                    } else {
                        let (first, n) = checker.target_run(*x);
                        assert_eq!(checker.targets[first..first + n], targets[..]);
                        for &t in &targets {
                            if t != u32::MAX {
                                starts[t as usize] = true;
                            }
                        }
                    }
                    if (!targets.is_empty() || r.opcode.flow().ends_block()) && k + 1 < starts.len()
                    {
                        starts[k + 1] = true;
                    }
                }
                let got: Vec<bool> = checker.ins.iter().map(|x| x.start).collect();
                assert_eq!(got, starts, "{name} {}", m.rid());
                assert_eq!(checker.starts, starts.iter().filter(|&&s| s).count());
            }
        }
        assert!(bodies > 100, "the embedded corpus has bodies ({bodies})");
    }
}
