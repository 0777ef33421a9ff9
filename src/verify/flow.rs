//! Decoding into the compact instruction array, branch targets, prefixes, and the rules for
//! entering and leaving protected regions.

use super::clauses::Clauses;
use super::eh::{Node, RegionKind, block, stops};
use super::{Code, Ctx, Ins, NONE, Out, Resolver, Verifier, flag, fx, operand};
use crate::instr::{InstrError, decode_with_len};
use crate::opcode::OperandKind;
use crate::opcode::{Flow, Opcode};

/// Decodes `code` into `v.ins`, lists branches, and checks operands.
/// Returns false (after reporting) when the stream does not decode to the end.
///
/// A fast pass decodes code that has no findings without reporting anything; at anything
/// irregular (an undefined opcode, a truncated operand, a bad index or token) the reporting
/// pass redoes the body, so the findings and their order are the reporting pass's alone.
///
/// `sizes`, when known ([`count`]), are the numbers of instructions and of branches: the
/// lists are made that size at once.
pub(super) fn decode<R: Resolver + ?Sized>(
    v: &mut Verifier,
    buf: &[u8],
    len: usize,
    sizes: Option<(usize, usize)>,
    ctx: &Ctx,
    r: &R,
) -> bool {
    let decoded = match decode_into::<R, false>(v, buf, len, sizes, ctx, r) {
        Some(tokens) if r.tokens_pass(&v.tokens[..tokens]) => true,
        _ => decode_into::<R, true>(v, buf, len, sizes, ctx, r).is_some(),
    };
    if decoded {
        v.starts.build(&v.offs[..v.n], len);
    }
    decoded
}

/// Walks the instructions of `buf[..len]` as the decoder reads them (a `switch` with its
/// table), giving `each` the decode entry of each; stops at anything that does not decode, or
/// when `each` says to. Returns whether it walked to the end of the code.
pub(super) fn walk_lengths(buf: &[u8], len: usize, mut each: impl FnMut(&fx::Dec) -> bool) -> bool {
    let mut pos = 0;
    while pos < len {
        let w = window(buf, pos);
        let Some(d) = entry(w, len - pos) else {
            return false;
        };
        if !each(d) {
            return false;
        }
        let mut next = pos + d.len as usize;
        if d.arg == fx::arg::SWITCH {
            let count = (w >> 8) as u32 as usize;
            if count > (len - next) / 4 {
                return false;
            }
            next += 4 * count;
        }
        pos = next;
    }
    true
}

/// How many instructions `buf[..len]` decodes to, and how many of them have targets; `None`
/// if it does not decode to the end.
pub(super) fn count(buf: &[u8], len: usize) -> Option<(usize, usize)> {
    let (mut n, mut nb) = (0, 0);
    let whole = walk_lengths(buf, len, |d| {
        n += 1;
        nb += (d.fx.kind & fx::TARGETS != 0) as usize;
        true
    });
    whole.then_some((n, nb))
}

/// Token operands checked in one [`Resolver::tokens_pass`] call: the fast decode and the single
/// pass hand them over in batches of this many, so that their buffer does not grow with the code.
pub(super) const TOKEN_BATCH: usize = 4096;

/// When `buf` has fewer than `min` entries past `used`, makes it hold `want` past `used` (but
/// no more than `cap` in all, the most a body of this length can need, and never fewer than
/// `min`).
fn grow<T: Copy>(buf: &mut Vec<T>, used: usize, min: usize, want: usize, cap: usize, fill: T) {
    if buf.len() - used.min(buf.len()) < min {
        buf.resize((used + want).min(cap).max(used + min), fill);
    }
}

/// The entries a buffer that holds `used` for the first `pos` bytes of `len` needs for the
/// rest, at the same rate, with an eighth to spare; at least half of `used` (so a buffer grows
/// geometrically however the code changes) and 64, and at most three times `used` (or 64):
/// a dense stretch at the start (a run of `nop`s before long instructions) does not make a
/// buffer for the whole code resident at its rate, while uniform code still gets its size in
/// a few steps.
fn projected(used: usize, pos: usize, len: usize) -> usize {
    let rest = (used as u128 * (len - pos) as u128 / pos.max(1) as u128) as usize;
    (rest + rest / 8).clamp((used / 2).max(64), 3 * used.max(64))
}

/// The eight bytes at `code[pos..]`, zero-padded past the end.
#[inline(always)]
pub(super) fn window(code: &[u8], pos: usize) -> u64 {
    match code.get(pos..pos + 8) {
        Some(s) => u64::from_le_bytes([s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]]),
        None => window_short(code, pos),
    }
}

/// The [`fx::DEC`] entry of the instruction whose first bytes are `w`, if it is defined and fits
/// in the `left` bytes of code that remain.
#[inline(always)]
pub(super) fn entry(w: u64, left: usize) -> Option<&'static fx::Dec> {
    let d = &fx::DEC[w as u8 as usize];
    // One compare for "undefined" (length 0, as for the `FE` entry) and "truncated".
    if (d.len as usize).wrapping_sub(1) < left {
        return Some(d);
    }
    let second = &fx::DEC[256 + (w >> 8) as u8 as usize];
    (w as u8 == 0xFE && (second.len as usize).wrapping_sub(1) < left).then_some(second)
}

#[cold]
#[inline(never)]
fn window_short(code: &[u8], pos: usize) -> u64 {
    let mut w = 0;
    for (k, &b) in code.get(pos..).unwrap_or(&[]).iter().take(8).enumerate() {
        w |= (b as u64) << (8 * k);
    }
    w
}

/// Decodes `buf[..len]`; the eight-byte window each instruction is read with may reach into
/// whatever `buf` holds past `len` (zeros past `buf`): no decision depends on a byte past an
/// instruction that fits in the code, so a caller with slack after its code saves the short
/// reads at the end. One table lookup per instruction ([`fx::DEC`]). With `REPORT`, reports
/// every operand fault and sends anything undecodable to the codec's decoder for the exact
/// error; without it, stops at the first fault, reporting nothing, and leaves token operands
/// in `v.tokens` for [`Resolver::tokens_pass`] (a full batch of [`TOKEN_BATCH`] is passed on
/// the way, and one that fails is a fault). Returns the number of token operands left there,
/// or `None` when the stream does not decode (or, without `REPORT`, at any fault).
///
/// The buffers grow with the instructions, not the bytes: the loop decodes in stretches, each
/// as long as every buffer has room for (a switch's targets are checked on their own), and
/// grows them between stretches.
#[inline(never)]
pub(super) fn decode_into<R: Resolver + ?Sized, const REPORT: bool>(
    v: &mut Verifier,
    buf: &[u8],
    len: usize,
    sizes: Option<(usize, usize)>,
    ctx: &Ctx,
    r: &R,
) -> Option<usize> {
    let code = &buf[..len];
    // Local and argument indices are checked against these (unknown: nothing fails).
    let locals = ctx.locals.unwrap_or(u32::MAX);
    let args = ctx.method.map_or(u32::MAX, |m| m.arg_count as u32);
    let limits = [u32::MAX, locals, args, u32::MAX];
    let (mut n, mut nb, mut ntok) = (0, 0, 0);
    let mut prefixed = false;
    let mut ok = true;
    let mut pos = 0;
    // Flags for the next instruction from the prefixes before it: AFTER_PREFIX, TAIL.
    let mut carry: u8 = 0;
    // The first stretch's buffers: one instruction per sixteen bytes (or what earlier bodies
    // left), since code of long instructions would leave most of more untouched; at most one
    // instruction per byte. A buffer that fills up grows to what the rest of the code needs
    // at the rate of the code so far, so that it ends close to the size the body needs.
    // Branches are rarer: their first stretch is smaller still (resizing writes every entry,
    // so room never used would be resident). Known sizes are made at once (one more branch,
    // so that an instruction off the fast path after the last still finds room).
    let (first, rare) = match sizes {
        Some((n, nb)) => (n.max(1), nb + 1),
        None => ((len / 16).max(64), (len / 128).max(64)),
    };
    grow(&mut v.ins, 0, first, first, len, fx::DEC[0].ins);
    grow(&mut v.offs, 0, first, first, len, 0);
    grow(&mut v.branches, 0, rare, rare, len / 2 + 1, 0);
    grow(
        &mut v.tokens,
        0,
        TOKEN_BATCH,
        TOKEN_BATCH,
        TOKEN_BATCH,
        (OperandKind::None, 0),
    );
    let mut more = false;
    'stretches: loop {
        if std::mem::replace(&mut more, true) {
            let want = |used| projected(used, pos, len);
            grow(&mut v.ins, n, 1, want(n), len, fx::DEC[0].ins);
            grow(&mut v.offs, n, 1, want(n), len, 0);
            grow(&mut v.branches, nb, 1, want(nb), len / 2 + 1, 0);
        }
        // Borrowed apart from the findings, so that reporting does not force the buffers'
        // headers to be reloaded after every call.
        let Verifier {
            ins,
            offs,
            branches,
            tokens,
            out,
            ..
        } = &mut *v;
        let ins_buf = &mut ins[..];
        let offs_buf = &mut offs[..];
        let branches_buf = &mut branches[..];
        // Batches of tokens are checked as they fill; reported ones are not kept.
        let tokens_buf = &mut tokens[..];
        // The stretch ends when `ins` or `offs` is full, or before an instruction off the fast
        // path when `branches` might not have room for it.
        let end = ins_buf.len().min(offs_buf.len());
        let slow_end = branches_buf.len();
        while pos < len {
            if n == end {
                continue 'stretches;
            }
            // The opcode and up to seven operand bytes in one load.
            let w = window(buf, pos);
            let Some(d) = entry(w, len - pos) else {
                if REPORT {
                    decode_error(out, code, pos);
                }
                ok = false;
                break;
            };
            let idx = n as u32;
            let mut next = pos + d.len as usize;
            let arg = (w >> d.shift) as u32 & d.mask;
            let off = pos as u32;
            let mut flags = carry;
            if d.slow && nb == slow_end {
                continue 'stretches;
            }
            carry = 0;
            // A local or argument index (explicit, or implied as in `ldloc.2`); other
            // instructions compare 0 against `u32::MAX` and pass.
            let index = (arg & d.vmask) + d.imm as u32;
            if index >= limits[d.var as usize & 3] {
                if !REPORT {
                    ok = false;
                    break;
                }
                bad_index(out, off, d, index, ctx);
            }
            if d.slow {
                let kind = d.fx.kind;
                if d.check == fx::check::TOKEN && !REPORT {
                    if ntok == tokens_buf.len() {
                        if !r.tokens_pass(tokens_buf) {
                            ok = false;
                            break;
                        }
                        ntok = 0;
                    }
                    tokens_buf[ntok] = (d.operand, arg);
                    ntok += 1;
                } else if d.check == fx::check::TOKEN {
                    operand::token(out, off, d.op, d.operand, arg, r);
                }
                if kind & fx::TARGETS != 0 {
                    // A branch's target is read again from its operand when needed
                    // (`Targets`); so are a switch's, from its table, whose count is checked
                    // against the bytes left before any is read.
                    if d.arg == fx::arg::SWITCH {
                        let count = (w >> 8) as u32;
                        if count as usize > (len - next) / 4 {
                            if REPORT {
                                decode_error(out, code, pos);
                            }
                            ok = false;
                            break;
                        }
                        next += 4 * count as usize;
                    }
                    branches_buf[nb] = idx;
                    nb += 1;
                }
                if d.fx.flow == Flow::Prefix {
                    prefixed = true;
                    // A prefix is itself only marked as following a prefix; what it modifies
                    // carries its flags.
                    carry = flags | flag::AFTER_PREFIX;
                    if d.op == Opcode::Tail {
                        carry |= flag::TAIL;
                    }
                    flags &= flag::AFTER_PREFIX;
                }
            }
            ins_buf[n] = Ins { flags, ..d.ins };
            offs_buf[n] = off;
            n += 1;
            pos = next;
        }
        break;
    }
    v.n = n;
    v.nb = nb;
    v.prefixed = prefixed;
    ok.then_some(ntok)
}

#[cold]
#[inline(never)]
fn bad_index(v: &mut Out, off: u32, d: &fx::Dec, index: u32, ctx: &Ctx) {
    match (d.var as usize, ctx.locals, ctx.method) {
        (fx::var::LOCAL, Some(count), _) => operand::bad_local(v, off, d.op, index, count),
        (fx::var::ARG, _, Some(m)) => operand::bad_argument(v, off, d.op, index, m.arg_count),
        _ => {}
    }
}

/// Reports why the instruction at `pos` does not decode, in the codec decoder's words.
#[cold]
#[inline(never)]
fn decode_error(v: &mut Out, code: &[u8], pos: usize) -> bool {
    match decode_with_len(code, pos) {
        Err(e) => {
            let (c, what) = match e {
                InstrError::UnknownOpcode { .. } => (Code::UnknownOpcode, "unknown opcode"),
                _ => (Code::MethodEnd, "the code ends inside an instruction"),
            };
            v.report(c, e.offset(), format!("{what} ({e})"));
        }
        // Unreachable while `fx::DEC` agrees with the codec's table (a unit test checks it).
        Ok(_) => v.report(
            Code::UnknownOpcode,
            pos as u32,
            "undecodable instruction".into(),
        ),
    }
    false
}

/// A target as a byte offset inside the code, or [`NONE`] when it lies outside.
pub(super) fn target_offset(t: i64, len: usize) -> u32 {
    if t >= 0 && (t as u64) < len as u64 {
        t as u32
    } else {
        NONE
    }
}

/// Turns target offsets into instruction indices, reporting bad ones (left as [`NONE`]), and
/// marks the instructions targets reach. A `switch`'s targets are read from its table in
/// `code` (see [`Targets`](super::Targets)).
pub(super) fn resolve_targets(v: &mut Verifier, code: &[u8]) {
    let (mut b, mut k) = (0, 0);
    loop {
        // Every target that resolves goes through the fast loop; each fault is reported here
        // and the loop resumes after it.
        let Some((fb, fk)) = resolve_from(v, code, b, k) else {
            return;
        };
        let i = v.branches[fb] as usize;
        let (ins, at) = (v.ins[i], v.offs[i]);
        let off = if ins.op() == Opcode::Switch {
            v.targets_in(code).switch_offset(&ins, at, fk)
        } else {
            v.targets_in(code).branch_offset(&ins, at)
        };
        if off == NONE {
            bad_branch(v, ins, at);
        } else {
            bad_jump_target(v, ins, at, off);
        }
        (b, k) = (fb, fk + 1);
    }
}

/// Resolves targets from branch `from` (from its target `resume`) to instruction indices and
/// marks the instructions they reach, over plain slices so that nothing the loop stores forces
/// its bounds to be reloaded. Stops at the first target that is outside the code or not an
/// instruction start, returning (branch, target) for the caller to report.
fn resolve_from(
    v: &mut Verifier,
    code: &[u8],
    from: usize,
    resume: usize,
) -> Option<(usize, usize)> {
    let (n, code_len) = (v.n, v.code_len);
    let Verifier {
        ins,
        offs,
        starts,
        branches,
        nb,
        ..
    } = v;
    let (ins, offs) = (&mut ins[..n], &offs[..n]);
    for (b, &i) in branches[..*nb].iter().enumerate().skip(from) {
        let i = i as usize;
        let (x, at) = (ins[i], offs[i]);
        let first = if b == from { resume } else { 0 };
        if x.op() == Opcode::Switch {
            // The table is read once (the decoder checked that it lies in the code).
            let count = x.operand(at, code);
            let table = crate::instr::SwitchTable::new(code, at as usize, count);
            for (k, t) in table.targets().enumerate().skip(first) {
                if !mark_target(ins, starts, target_offset(t, code_len), i) {
                    return Some((b, k));
                }
            }
        } else if first == 0 {
            let off = super::Targets { code, starts }.branch_offset(&x, at);
            if !mark_target(ins, starts, off, i) {
                return Some((b, 0));
            }
        }
    }
    None
}

/// Marks the instruction at byte `off` as reached by a branch from instruction `from`;
/// false (and nothing marked) if `off` is outside the code (`NONE`), not an instruction start
/// or after a prefix.
#[inline(always)]
fn mark_target(ins: &mut [Ins], starts: &super::StartIndex, off: u32, from: usize) -> bool {
    let Some(t) = starts.get(off) else {
        return false;
    };
    let Some(x) = ins.get_mut(t as usize) else {
        return false;
    };
    if x.flags & flag::AFTER_PREFIX != 0 {
        return false;
    }
    x.flags |= if t as usize > from {
        flag::JOIN | flag::FORWARD_TARGET
    } else {
        flag::JOIN
    };
    true
}

#[cold]
#[inline(never)]
fn bad_branch(v: &mut Verifier, ins: Ins, at: u32) {
    v.report(
        Code::BadBranch,
        at,
        format!("{} targets a location outside the code", ins.op()),
    );
}

#[cold]
#[inline(never)]
fn bad_jump_target(v: &mut Verifier, ins: Ins, at: u32, off: u32) {
    v.report(
        Code::BadJumpTarget,
        at,
        format!(
            "{} targets IL_{off:04x}, not an instruction start",
            ins.op()
        ),
    );
}

/// Which instructions each prefix may modify (III.2).
pub(super) fn prefix_allows(prefix: Opcode, op: Opcode) -> bool {
    use Opcode::*;
    let memory = matches!(
        op,
        Ldind_I1
            | Ldind_U1
            | Ldind_I2
            | Ldind_U2
            | Ldind_I4
            | Ldind_U4
            | Ldind_I8
            | Ldind_I
            | Ldind_R4
            | Ldind_R8
            | Ldind_Ref
            | Stind_Ref
            | Stind_I1
            | Stind_I2
            | Stind_I4
            | Stind_I8
            | Stind_R4
            | Stind_R8
            | Stind_I
            | Ldfld
            | Stfld
            | Ldobj
            | Stobj
            | Initblk
            | Cpblk
    );
    match prefix {
        Unaligned => memory,
        Volatile => memory || matches!(op, Ldsfld | Stsfld),
        Tail => matches!(op, Call | Calli | Callvirt),
        // `call` for constrained calls to static virtuals, `ldftn` for their addresses (newer
        // runtimes accept both).
        Constrained => matches!(op, Callvirt | Call | Ldftn),
        Readonly => matches!(op, Ldelema | Call),
        No => {
            matches!(
                op,
                Castclass
                    | Unbox
                    | Unbox_Any
                    | Ldelema
                    | Ldelem
                    | Stelem
                    | Ldfld
                    | Ldflda
                    | Stfld
                    | Callvirt
                    | Ldvirtftn
                    | Ldlen
            ) || matches!(op as u16, 0x90..=0xA2)
        }
        _ => false,
    }
}

fn prefix_code(prefix: Opcode) -> Code {
    match prefix {
        Opcode::Unaligned => Code::Unaligned,
        Opcode::Volatile => Code::Volatile,
        Opcode::Tail => Code::TailCall,
        Opcode::Constrained => Code::Constrained,
        Opcode::Readonly => Code::ReadOnly,
        // `no.` and anything that is not a prefix.
        _ => Code::NoPrefix,
    }
}

/// Each prefix must precede (possibly through other prefixes) an instruction it may modify; a
/// `tail.` call must be followed by `ret` and lie outside protected regions.
#[inline]
pub(super) fn check_prefixes(v: &mut Verifier, code: &[u8], eh_ok: bool) {
    // Most bodies have no prefix: the decoder says, and otherwise the first is looked for
    // before the pass is set up.
    if !v.prefixed {
        return;
    }
    if let Some(first) = v.ins[..v.n]
        .iter()
        .position(|x| x.fx().flow == Flow::Prefix)
    {
        prefixes_from(v, code, first, eh_ok);
    }
}

/// [`check_prefixes`] from instruction `first`, the first prefix. Offsets are looked up for
/// findings and `tail.` calls only (the offsets list may have been let go).
#[inline(never)]
fn prefixes_from(v: &mut Verifier, code: &[u8], first: usize, eh_ok: bool) {
    let n = v.n;
    // Resume point: prefixes already handled as part of an earlier run.
    let mut next = first;
    for i in first..n {
        if i < next || v.ins[i].fx().flow != Flow::Prefix {
            continue;
        }
        // The prefix run i..j and the instruction j it modifies.
        let mut j = i;
        while j < n && v.ins[j].fx().flow == Flow::Prefix {
            j += 1;
        }
        if j == n {
            let off = v.offset_of(i);
            v.report(
                Code::MethodEnd,
                off,
                format!("{} is not followed by an instruction", v.ins[i].op()),
            );
            return;
        }
        let target = v.ins[j].op();
        for k in i..j {
            let p = v.ins[k].op();
            if !prefix_allows(p, target) {
                let off = v.offset_of(k);
                v.report(prefix_code(p), off, format!("{p} cannot prefix {target}"));
            } else if p == Opcode::Tail {
                check_tail_call(v, code, k, j, eh_ok);
            }
        }
        next = j + 1;
    }
}

/// III.2.4: `tail. call…` is immediately followed by `ret` (a `br` to a `ret` is accepted, as
/// runtimes do) and transfers control from outside any protected region.
fn check_tail_call(v: &mut Verifier, code: &[u8], prefix: usize, call: usize, eh_ok: bool) {
    let off = v.offset_of(prefix);
    let ins = &v.ins[..v.n];
    let targets = v.targets_in(code);
    let is_ret = |i: usize| ins.get(i).is_some_and(|x| x.op() == Opcode::Ret);
    let next = call + 1;
    let ok = is_ret(next)
        || ins.get(next).is_some_and(|x| {
            matches!(x.op(), Opcode::Br | Opcode::Br_S)
                // A `br`'s one target.
                && is_ret(targets.get(ins, x, v.offset_of(next), 0) as usize)
        });
    if !ok {
        v.report(
            Code::TailRet,
            off,
            "a tail. call must be followed by ret".into(),
        );
    }
    if eh_ok && v.region_of(call) != NONE {
        v.report(
            Code::TailCallInsideER,
            off,
            "a tail. call inside a protected region or handler".into(),
        );
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Transfer {
    Branch,
    Leave,
    Fallthrough,
}

/// Region rules for every branch, `leave` and fall-through; placement of `ret`, `jmp`,
/// `endfinally`, `endfilter` and `rethrow`; falling off the end of the code.
#[inline(always)]
pub(super) fn check_transfers(v: &mut Verifier, code: &[u8], clauses: &Clauses<'_>, eh_ok: bool) {
    if !v.nodes.is_empty() {
        transfers_in_regions(v, code, clauses, eh_ok);
    } else {
        // No regions: only the placement rules and the end of the code apply, and of those
        // only the handler instructions' (`ret`, `jmp` and prefixes are fine outside regions).
        for i in 0..v.n {
            if matches!(
                v.ins[i].op(),
                Opcode::Endfinally | Opcode::Rethrow | Opcode::Endfilter
            ) {
                placement(v, i, v.offset_of(i), clauses, eh_ok);
            }
        }
    }
    // A trailing prefix is reported by the prefix rules. (Decoded code is never empty.)
    let Some(&last) = v.ins[..v.n].last() else {
        return;
    };
    if !last.fx().flow.ends_block() && last.fx().flow != Flow::Prefix {
        fallthrough_at_end(v, v.offset_of(v.n - 1));
    }
}

#[cold]
#[inline(never)]
fn fallthrough_at_end(v: &mut Verifier, off: u32) {
    v.report(
        Code::MethodFallthrough,
        off,
        "control falls off the end of the code".into(),
    );
}

/// [`check_transfers`] for a body with regions. Only branches, special instructions and the
/// last instruction before a region boundary (its innermost region is not the next one's: control
/// can only cross into or out of a region from such an instruction) can break a rule. They are
/// found by a walk over the instructions in code order, which lists of them would take more
/// memory than. Their offsets come from the offsets list, or, where it was let go (a large
/// body), are followed along the start index.
#[inline(never)]
fn transfers_in_regions(v: &mut Verifier, code: &[u8], clauses: &Clauses<'_>, eh_ok: bool) {
    let n = v.n;
    let listed = v.offs.len() >= n;
    // Where instruction `i` starts (the first at 0), followed when not listed.
    let mut at = 0;
    for i in 0..n {
        let boundary = i + 1 < n && v.region[i] != v.region[i + 1];
        if v.ins[i].fx().kind & (fx::TARGETS | fx::SPECIAL) != 0 || boundary {
            let here = if listed { v.offs[i] } else { at };
            transfers_from(v, code, clauses, i, here, eh_ok);
            if v.stop() {
                break;
            }
        }
        if !listed {
            at = v.starts.next_after(at).unwrap_or(v.code_len as u32);
        }
    }
}

/// The region rules for instruction `i`, which starts at byte `at`: its branch targets, its
/// placement, and its fall through into the next instruction.
fn transfers_from(
    v: &mut Verifier,
    code: &[u8],
    clauses: &Clauses<'_>,
    i: usize,
    at: u32,
    eh_ok: bool,
) {
    let n = v.n;
    let ins = v.ins[i];
    if ins.fx().kind & fx::TARGETS != 0 {
        let kind = if matches!(ins.op(), Opcode::Leave | Opcode::Leave_S) {
            Transfer::Leave
        } else {
            Transfer::Branch
        };
        let count = v.targets_in(code).count(&ins, at);
        for k in 0..count {
            let t = v.targets_in(code).get(&v.ins, &ins, at, k);
            if t != NONE && transfer(v, clauses, (i, at), t as usize, kind) {
                break;
            }
        }
    }
    if ins.fx().kind & fx::SPECIAL != 0 {
        placement(v, i, at, clauses, eh_ok);
    }
    let r = v.region_of(i);
    if i + 1 < n && !ins.fx().flow.ends_block() && r != v.region_of(i + 1) {
        // A filter that does not end in endfilter is reported once, by the table rules.
        let filter_end = r != NONE && {
            let node = &v.nodes[r as usize];
            node.kind() == RegionKind::Filter && v.end_of(node, clauses) == i as u32 + 1
        };
        if !filter_end {
            transfer(v, clauses, (i, at), i + 1, Transfer::Fallthrough);
        }
    }
}

/// Where `ret`, `jmp`, `endfinally`, `endfilter` and `rethrow` may appear: instruction `i`,
/// at byte `at`.
fn placement(v: &mut Verifier, i: usize, at: u32, clauses: &Clauses<'_>, eh_ok: bool) {
    let ins = v.ins[i];
    match ins.op() {
        Opcode::Ret | Opcode::Jmp => {
            let r = v.region_of(i);
            if r != NONE {
                let node = v.nodes[r as usize];
                let (code, what) = match node.kind() {
                    RegionKind::Try => (Code::ReturnFromTry, "try"),
                    RegionKind::Filter => (Code::ReturnFromFilter, "filter"),
                    _ => (Code::ReturnFromHandler, "handler"),
                };
                let msg = format!("{} inside a {what}", ins.op());
                v.report_clause(code, at, msg, node.min_clause(), None);
            }
        }
        Opcode::Endfinally
            if eh_ok
                && !matches!(
                    enclosing_handler(v, i),
                    Some(RegionKind::Finally | RegionKind::Fault)
                ) =>
        {
            v.report(
                Code::Endfinally,
                at,
                "endfinally outside a finally or fault handler".into(),
            );
        }
        Opcode::Rethrow
            if eh_ok
                && !matches!(
                    enclosing_handler(v, i),
                    Some(RegionKind::Catch | RegionKind::FilterHandler)
                ) =>
        {
            v.report(Code::Rethrow, at, "rethrow outside a catch handler".into());
        }
        Opcode::Endfilter if eh_ok => {
            let r = v.region_of(i);
            let ok = r != NONE && {
                let node = &v.nodes[r as usize];
                node.kind() == RegionKind::Filter && v.end_of(node, clauses) == i as u32 + 1
            };
            if !ok {
                v.report(
                    Code::Endfilter,
                    at,
                    "endfilter other than at the end of a filter".into(),
                );
            }
        }
        // Every other opcode may stand anywhere in a region.
        _ => {}
    }
}

/// The innermost handler-like region around instruction `i`, looking through tries (a catch may
/// hold a try whose body rethrows).
fn enclosing_handler(v: &Verifier, i: usize) -> Option<RegionKind> {
    let r = v.region_of(i);
    let node = v.nodes.get(r as usize)?;
    if node.kind() == RegionKind::Filter {
        // A filter's shortcuts look through it.
        return Some(RegionKind::Filter);
    }
    v.nodes
        .get(stops(&v.nodes, r).handler as usize)
        .map(|n| n.kind())
}

/// Checks one transfer from instruction `from` (at byte `from_at`) to `to` against the rules for
/// leaving and entering regions. Returns true if it reported.
///
/// Regions fall into three classes, checked one after another and each on its own (as
/// ILVerify checks them), so that one transfer may break a rule of each: tries, filters, and
/// handlers (catch, filter handler, finally, fault). In a class the transfer exits the innermost
/// region of the class around `from` if it does not hold `to` (then no region of the class
/// around `from` does), and enters the innermost one around `to` if it does not hold `from`
/// (for tries: the innermost that does not start at `to`, since a try may be entered at its
/// first instruction). Codes are reported in class order, try, filter, handler (which decides
/// what [`Options::first_only`](super::Options::first_only) keeps); the verifier then sorts
/// findings by offset and code and merges those of one code at one offset, so a fall-through
/// out of a try and out of the handler around it is one `FallthroughException` (the try's).
///
/// - a branch or fall-through gets at most one code per class: for tries the exit's if it
///   exits one, else the entry's; for filters and handlers, where it exits one region and
///   enters another (the two disjoint), the entry's going forward and the exit's going back;
/// - a `leave` may exit tries and catch handlers, so it gets an exit's code only for a filter
///   or the innermost finally or fault around `from`, and its entries' codes as well: per
///   class the exit's before the entry's.
fn transfer(
    v: &mut Verifier,
    clauses: &Clauses<'_>,
    (from, from_at): (usize, u32),
    to: usize,
    kind: Transfer,
) -> bool {
    let (rf, rt) = (v.region_of(from), v.region_of(to));
    if rf == rt {
        return false;
    }
    let holds = |n: &Node, i: usize| {
        v.first_of(n, clauses) as usize <= i && i < v.end_of(n, clauses) as usize
    };
    let exited = |r: u32| v.nodes.get(r as usize).filter(|n| !holds(n, to)).copied();
    let entered = |r: u32| v.nodes.get(r as usize).filter(|n| !holds(n, from)).copied();
    let try_entered = entered(try_entered_inside(v, clauses, rt, to));
    let filters = (exited(filter_at(v, rf)), entered(filter_at(v, rt)));
    // At most five crossings: a `leave`'s try entry and both sides of the other two classes.
    let mut crossed: [Option<(Node, bool)>; 5] = [None; 5];
    if kind == Transfer::Leave {
        let handlers = (
            exited(finally_around(v, rf)),
            entered(handler_around(v, rt)),
        );
        crossed = [
            try_entered.map(|n| (n, true)),
            filters.0.map(|n| (n, false)),
            filters.1.map(|n| (n, true)),
            handlers.0.map(|n| (n, false)),
            handlers.1.map(|n| (n, true)),
        ];
    } else {
        let tries = exited(try_around(v, rf))
            .map(|n| (n, false))
            .or(try_entered.map(|n| (n, true)));
        let handlers = (
            exited(handler_around(v, rf)),
            entered(handler_around(v, rt)),
        );
        let forward = to > from;
        let one = |(exit, entry): (Option<Node>, Option<Node>)| match (exit, entry) {
            (Some(_), Some(n)) if forward => Some((n, true)),
            (Some(n), _) => Some((n, false)),
            (None, entry) => entry.map(|n| (n, true)),
        };
        crossed[..3].copy_from_slice(&[tries, one(filters), one(handlers)]);
    }
    let mut reported = false;
    for (node, entry) in crossed.into_iter().flatten() {
        let code = if entry {
            Some(entry_code(kind, node.kind()))
        } else {
            exit_code(kind, node.kind())
        };
        let Some(code) = code else {
            continue;
        };
        let msg = if entry {
            format!(
                "{} enters the {} starting at IL_{:04x} at IL_{:04x}",
                describe(v, from, kind),
                node.kind(),
                block(&node, clauses).0,
                v.offset_of(to)
            )
        } else {
            format!(
                "{} leaves the {} starting at IL_{:04x}",
                describe(v, from, kind),
                node.kind(),
                block(&node, clauses).0
            )
        };
        v.report_clause(code, from_at, msg, node.min_clause(), None);
        reported = true;
    }
    reported
}

fn describe(v: &Verifier, from: usize, kind: Transfer) -> String {
    if kind == Transfer::Fallthrough {
        "control falls through and".to_string()
    } else {
        v.ins[from].op().to_string()
    }
}

/// The code for exiting a region of kind `region`, or `None` where the transfer may exit it
/// (a `leave` out of a try or a catch handler).
fn exit_code(kind: Transfer, region: RegionKind) -> Option<Code> {
    match (kind, region) {
        (Transfer::Fallthrough, _) => Some(Code::FallthroughException),
        (Transfer::Leave, RegionKind::Finally) => Some(Code::LeaveOutOfFinally),
        (Transfer::Leave, RegionKind::Fault) => Some(Code::LeaveOutOfFault),
        (Transfer::Leave, RegionKind::Filter) => Some(Code::LeaveOutOfFilter),
        (Transfer::Leave, RegionKind::Try | RegionKind::Catch | RegionKind::FilterHandler) => None,
        (Transfer::Branch, RegionKind::Try) => Some(Code::BranchOutOfTry),
        (Transfer::Branch, RegionKind::Finally) => Some(Code::BranchOutOfFinally),
        (Transfer::Branch, RegionKind::Filter) => Some(Code::BranchOutOfFilter),
        (Transfer::Branch, RegionKind::Catch | RegionKind::FilterHandler | RegionKind::Fault) => {
            Some(Code::BranchOutOfHandler)
        }
    }
}

/// The code for entering a region of kind `region` other than at a try's first instruction.
fn entry_code(kind: Transfer, region: RegionKind) -> Code {
    match (kind, region) {
        (Transfer::Leave, RegionKind::Try) => Code::LeaveIntoTry,
        // A fall-through enters a try only at its first instruction, so never gets this.
        (Transfer::Branch | Transfer::Fallthrough, RegionKind::Try) => Code::BranchIntoTry,
        (Transfer::Leave, RegionKind::Filter) => Code::LeaveIntoFilter,
        (Transfer::Fallthrough, RegionKind::Filter) => Code::FallthroughIntoFilter,
        (Transfer::Branch, RegionKind::Filter) => Code::BranchIntoFilter,
        (Transfer::Leave, _) => Code::LeaveIntoHandler,
        (Transfer::Fallthrough, _) => Code::FallthroughIntoHandler,
        (Transfer::Branch, _) => Code::BranchIntoHandler,
    }
}

// The innermost region of a class around an instruction whose innermost region is `r`, each
// one step through the node shortcuts ([`NONE`] where there is none). A filter holds no
// region (the table rules reject one that does), so it is an innermost region and a leaf.

/// The innermost try.
fn try_around(v: &Verifier, r: u32) -> u32 {
    stops(&v.nodes, r).try_stop
}

/// The innermost try around instruction `to` that does not start at `to`: the one an entry
/// at `to` enters in the middle, if it enters it.
fn try_entered_inside(v: &Verifier, clauses: &Clauses<'_>, r: u32, to: usize) -> u32 {
    match v.nodes.get(r as usize) {
        Some(n) if v.first_of(n, clauses) == to as u32 => n.try_entry_stop,
        _ => try_around(v, r),
    }
}

/// The filter, if `r` is one.
fn filter_at(v: &Verifier, r: u32) -> u32 {
    match v.nodes.get(r as usize) {
        Some(n) if n.kind() == RegionKind::Filter => r,
        _ => NONE,
    }
}

/// The innermost catch, filter handler, finally or fault (a filter is looked through).
fn handler_around(v: &Verifier, r: u32) -> u32 {
    stops(&v.nodes, r).handler
}

/// The innermost finally or fault (a filter is looked through).
fn finally_around(v: &Verifier, r: u32) -> u32 {
    stops(&v.nodes, r).leave_stop
}
