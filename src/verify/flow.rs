//! Decoding into the compact instruction array, branch targets, prefixes, and the rules for
//! entering and leaving protected regions.

use super::eh::RegionKind;
use super::{Code, Ctx, Ins, NONE, Resolver, Verifier, flag, fx, operand};
use crate::instr::{InstrError, decode_with_len};
use crate::opcode::{Flow, Opcode};

/// Decodes `code` into `v.ins`, records branch targets as byte offsets, and checks operands.
/// Returns false (after reporting) when the stream does not decode to the end.
///
/// One table lookup per instruction ([`fx::DEC`]); anything irregular (an undefined opcode, a
/// truncated operand or `switch` table) goes to the codec's decoder for the exact error.
pub(super) fn decode<R: Resolver + ?Sized>(
    v: &mut Verifier,
    code: &[u8],
    ctx: &Ctx,
    r: &R,
) -> bool {
    // The buffers are moved out for the loop, so that reporting through `v` does not force
    // their headers to be reloaded after every call.
    let mut ins = std::mem::take(&mut v.ins);
    let mut at = std::mem::take(&mut v.at);
    let mut targets = std::mem::take(&mut v.targets);
    let ok = decode_into(v, code, ctx, r, &mut ins, &mut at, &mut targets);
    v.ins = ins;
    v.at = at;
    v.targets = targets;
    ok
}

#[inline(always)]
fn decode_into<R: Resolver + ?Sized>(
    v: &mut Verifier,
    code: &[u8],
    ctx: &Ctx,
    r: &R,
    ins: &mut Vec<Ins>,
    at: &mut Vec<u32>,
    targets: &mut Vec<u32>,
) -> bool {
    let len = code.len();
    // Never cleared: `Verifier::index_at` trusts an entry only if it names an instruction of
    // this body starting there, so stale entries are harmless and no per-body fill is needed.
    if at.len() < len {
        at.resize(len, NONE);
    }
    let at = &mut at[..len];
    // Local and argument indices are checked against these (unknown: nothing fails).
    let locals = ctx.locals.unwrap_or(u32::MAX);
    let args = ctx.method.map_or(u32::MAX, |m| m.arg_count as u32);
    let limits = [u32::MAX, locals, args];
    let mut pos = 0;
    // Flags for the next instruction from the prefixes before it: AFTER_PREFIX, TAIL.
    let mut carry: u16 = 0;
    while pos < len {
        let first = code[pos];
        let key = if first == 0xFE {
            match code.get(pos + 1) {
                Some(&second) => 256 + second as usize,
                None => return decode_error(v, code, pos),
            }
        } else {
            first as usize
        };
        let d = &fx::DEC[key];
        let size = d.len as usize;
        if size == 0 || code.len() - pos < size {
            return decode_error(v, code, pos);
        }
        let idx = ins.len() as u32;
        at[pos] = idx;
        let mut next = pos + size;
        let o = pos + if key >= 256 { 2 } else { 1 };
        // One unaligned load and a mask instead of a dispatch on the operand's size.
        let mut arg = le32_or_short(code, o) & d.mask;
        let off = pos as u32;
        let mut flags = carry;
        carry = 0;
        let kind = d.ins.fx.kind;
        if kind & (fx::TARGETS | fx::SPECIAL) != 0 {
            if kind & fx::TARGETS != 0 {
                let start = targets.len() as u32;
                match d.arg {
                    fx::arg::BR8 => {
                        let target = next as i64 + code[o] as i8 as i64;
                        targets.extend([1, target_offset(target, len)]);
                    }
                    fx::arg::BR32 => {
                        let disp = le32(code, o) as i32;
                        targets.extend([1, target_offset(next as i64 + disp as i64, len)]);
                    }
                    _ => {
                        // switch: the count is checked against the bytes left before any is
                        // read.
                        let count = le32(code, o);
                        if count as usize > (len - next) / 4 {
                            return decode_error(v, code, pos);
                        }
                        let table = &code[next..next + 4 * count as usize];
                        next += table.len();
                        targets.push(count);
                        targets.extend(table.chunks_exact(4).map(|c| {
                            let disp = le32(c, 0) as i32;
                            target_offset(next as i64 + disp as i64, len)
                        }));
                    }
                }
                arg = start;
                v.branches.push(idx);
            }
            if kind & fx::SPECIAL != 0 {
                v.special.push(idx);
            }
            if d.ins.fx.flow == Flow::Prefix {
                // A prefix is itself only marked as following a prefix; what it modifies
                // carries its flags.
                carry = flags | flag::AFTER_PREFIX;
                if d.ins.op == Opcode::Tail {
                    carry |= flag::TAIL;
                }
                flags &= flag::AFTER_PREFIX;
            }
        }
        if d.check == fx::check::TOKEN {
            operand::token(v, off, d.ins.op, d.operand, arg, r);
        } else {
            // A local or argument index (explicit, or implied as in `ldloc.2`); other
            // instructions compare against `u32::MAX` and pass.
            let index = arg + d.imm as u32;
            if index >= limits[d.var as usize] {
                bad_index(v, off, d, index, ctx);
            }
        }
        ins.push(Ins {
            off,
            arg,
            flags,
            ..d.ins
        });
        pos = next;
    }
    true
}

#[cold]
#[inline(never)]
fn bad_index(v: &mut Verifier, off: u32, d: &fx::Dec, index: u32, ctx: &Ctx) {
    match (d.var as usize, ctx.locals, ctx.method) {
        (fx::var::LOCAL, Some(count), _) => operand::bad_local(v, off, d.ins.op, index, count),
        (fx::var::ARG, _, Some(m)) => operand::bad_argument(v, off, d.ins.op, index, m.arg_count),
        _ => {}
    }
}

/// The little-endian `u32` at `b[at..]`, zero-padded when fewer than four bytes remain.
#[inline(always)]
fn le32_or_short(b: &[u8], at: usize) -> u32 {
    match b.get(at..at + 4) {
        Some(s) => le32(s, 0),
        None => {
            let mut a = [0; 4];
            let rest = b.get(at..).unwrap_or(&[]);
            a[..rest.len()].copy_from_slice(rest);
            u32::from_le_bytes(a)
        }
    }
}

/// Reports why the instruction at `pos` does not decode, in the codec decoder's words.
#[cold]
#[inline(never)]
fn decode_error(v: &mut Verifier, code: &[u8], pos: usize) -> bool {
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

/// The little-endian `u32` at `b[at..at + 4]` (in range: the caller checked the length).
#[inline(always)]
fn le32(b: &[u8], at: usize) -> u32 {
    let mut a = [0; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

/// A target as a byte offset inside the code, or [`NONE`] when it lies outside.
fn target_offset(t: i64, len: usize) -> u32 {
    if t >= 0 && (t as u64) < len as u64 {
        t as u32
    } else {
        NONE
    }
}

/// Turns target offsets into instruction indices, reporting bad ones (left as [`NONE`]), and
/// marks forward targets.
pub(super) fn resolve_targets(v: &mut Verifier) {
    for b in 0..v.branches.len() {
        let i = v.branches[b] as usize;
        let ins = v.ins[i];
        let start = ins.arg as usize;
        let count = v.targets[start] as usize;
        for k in start + 1..start + 1 + count {
            let off = v.targets[k];
            if off == NONE {
                bad_branch(v, ins);
                continue;
            }
            let t = v.index_at(off);
            if t == NONE || v.ins[t as usize].flags & flag::AFTER_PREFIX != 0 {
                bad_jump_target(v, ins, off);
                v.targets[k] = NONE;
                continue;
            }
            v.targets[k] = t;
            v.ins[t as usize].flags |= if t as usize > i {
                flag::JOIN | flag::FORWARD_TARGET
            } else {
                flag::JOIN
            };
        }
    }
}

#[cold]
#[inline(never)]
fn bad_branch(v: &mut Verifier, ins: Ins) {
    v.report(
        Code::BadBranch,
        ins.off,
        format!("{} targets a location outside the code", ins.op),
    );
}

#[cold]
#[inline(never)]
fn bad_jump_target(v: &mut Verifier, ins: Ins, off: u32) {
    v.report(
        Code::BadJumpTarget,
        ins.off,
        format!("{} targets IL_{off:04x}, not an instruction start", ins.op),
    );
}

/// Which instructions each prefix may modify (III.2).
fn prefix_allows(prefix: Opcode, op: Opcode) -> bool {
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
        _ => Code::NoPrefix,
    }
}

/// Each prefix must precede (possibly through other prefixes) an instruction it may modify; a
/// `tail.` call must be followed by `ret` and lie outside protected regions.
pub(super) fn check_prefixes(v: &mut Verifier, eh_ok: bool) {
    let n = v.ins.len();
    // Resume point: prefixes already handled as part of an earlier run.
    let mut next = 0;
    for s in 0..v.special.len() {
        let i = v.special[s] as usize;
        if i < next || v.ins[i].fx.flow != Flow::Prefix {
            continue;
        }
        // The prefix run i..j and the instruction j it modifies.
        let mut j = i;
        while j < n && v.ins[j].fx.flow == Flow::Prefix {
            j += 1;
        }
        if j == n {
            let off = v.ins[i].off;
            v.report(
                Code::MethodEnd,
                off,
                format!("{} is not followed by an instruction", v.ins[i].op),
            );
            return;
        }
        let target = v.ins[j].op;
        for k in i..j {
            let p = v.ins[k].op;
            if !prefix_allows(p, target) {
                let off = v.ins[k].off;
                v.report(prefix_code(p), off, format!("{p} cannot prefix {target}"));
            } else if p == Opcode::Tail {
                check_tail_call(v, k, j, eh_ok);
            }
        }
        next = j + 1;
    }
}

/// III.2.4: `tail. call…` is immediately followed by `ret` (a `br` to a `ret` is accepted, as
/// runtimes do) and transfers control from outside any protected region.
fn check_tail_call(v: &mut Verifier, prefix: usize, call: usize, eh_ok: bool) {
    let off = v.ins[prefix].off;
    let is_ret = |i: usize| v.ins.get(i).is_some_and(|x| x.op == Opcode::Ret);
    let next = call + 1;
    let ok = is_ret(next)
        || v.ins.get(next).is_some_and(|x| {
            matches!(x.op, Opcode::Br | Opcode::Br_S)
                && v.targets_of(next)
                    .first()
                    .is_some_and(|&t| is_ret(t as usize))
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
pub(super) fn check_transfers(v: &mut Verifier, eh_ok: bool) {
    let n = v.ins.len();
    if v.nodes.is_empty() {
        // No regions: only the placement rules and the end of the code apply.
        for s in 0..v.special.len() {
            placement(v, v.special[s] as usize, eh_ok);
        }
    } else {
        // Only branches, special instructions and the last instruction before a region
        // boundary can break a rule; they are visited in code order (as a scan of every
        // instruction would), so findings come in the same order.
        let mut edges = std::mem::take(&mut v.edges);
        edges.clear();
        for node in &v.nodes {
            // Control can only cross into or out of a region from the instruction before its
            // first or its end.
            edges.extend([node.first.wrapping_sub(1), node.end_idx.wrapping_sub(1)]);
        }
        edges.sort_unstable();
        edges.dedup();
        let (mut b, mut s, mut e) = (0, 0, 0);
        loop {
            let next = |list: &[u32], k: usize| list.get(k).map_or(u32::MAX, |&i| i);
            let i = next(&v.branches, b)
                .min(next(&v.special, s))
                .min(next(&edges, e));
            if i as usize >= n {
                break;
            }
            b += (next(&v.branches, b) == i) as usize;
            s += (next(&v.special, s) == i) as usize;
            e += (next(&edges, e) == i) as usize;
            transfers_from(v, i as usize, eh_ok);
            if v.stop() {
                v.edges = edges;
                return;
            }
        }
        v.edges = edges;
    }
    // A trailing prefix is reported by the prefix rules.
    let last = v.ins[n - 1];
    if !last.fx.flow.ends_block() && last.fx.flow != Flow::Prefix {
        v.report(
            Code::MethodFallthrough,
            last.off,
            "control falls off the end of the code".into(),
        );
    }
}

/// The region rules for instruction `i`: its branch targets, its placement, and its fall
/// through into the next instruction.
fn transfers_from(v: &mut Verifier, i: usize, eh_ok: bool) {
    let n = v.ins.len();
    let ins = v.ins[i];
    if ins.fx.kind & fx::TARGETS != 0 {
        let kind = if matches!(ins.op, Opcode::Leave | Opcode::Leave_S) {
            Transfer::Leave
        } else {
            Transfer::Branch
        };
        let start = ins.arg as usize + 1;
        let count = v.targets[ins.arg as usize] as usize;
        for k in start..start + count {
            let t = v.targets[k];
            if t != NONE && transfer(v, i, t as usize, kind) {
                break;
            }
        }
    }
    if ins.fx.kind & fx::SPECIAL != 0 {
        placement(v, i, eh_ok);
    }
    let r = v.region_of(i);
    if i + 1 < n && !ins.fx.flow.ends_block() && r != v.region_of(i + 1) {
        // A filter that does not end in endfilter is reported once, by the table rules.
        let filter_end = r != NONE && {
            let node = &v.nodes[r as usize];
            node.kind == RegionKind::Filter && node.end_idx == i as u32 + 1
        };
        if !filter_end {
            transfer(v, i, i + 1, Transfer::Fallthrough);
        }
    }
}

/// Where `ret`, `jmp`, `endfinally`, `endfilter` and `rethrow` may appear.
fn placement(v: &mut Verifier, i: usize, eh_ok: bool) {
    let ins = v.ins[i];
    match ins.op {
        Opcode::Ret | Opcode::Jmp => {
            let r = v.region_of(i);
            if r != NONE {
                let (code, what) = match v.nodes[r as usize].kind {
                    RegionKind::Try => (Code::ReturnFromTry, "try"),
                    RegionKind::Filter => (Code::ReturnFromFilter, "filter"),
                    _ => (Code::ReturnFromHandler, "handler"),
                };
                v.report(code, ins.off, format!("{} inside a {what}", ins.op));
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
                ins.off,
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
            v.report(
                Code::Rethrow,
                ins.off,
                "rethrow outside a catch handler".into(),
            );
        }
        Opcode::Endfilter if eh_ok => {
            let r = v.region_of(i);
            let ok = r != NONE && {
                let node = &v.nodes[r as usize];
                node.kind == RegionKind::Filter && node.end_idx == i as u32 + 1
            };
            if !ok {
                v.report(
                    Code::Endfilter,
                    ins.off,
                    "endfilter other than at the end of a filter".into(),
                );
            }
        }
        _ => {}
    }
}

/// The innermost handler-like region around instruction `i`, looking through tries (a catch may
/// hold a try whose body rethrows).
fn enclosing_handler(v: &Verifier, i: usize) -> Option<RegionKind> {
    let mut r = v.region_of(i);
    while r != NONE {
        let node = &v.nodes[r as usize];
        if node.kind != RegionKind::Try {
            return Some(node.kind);
        }
        r = node.parent;
    }
    None
}

/// Checks one transfer from instruction `from` to `to`: the regions it exits and enters.
/// Returns true if it reported. A fall-through into a handler or filter is named for the
/// entry, every other fault for the exit first.
fn transfer(v: &mut Verifier, from: usize, to: usize, kind: Transfer) -> bool {
    if v.region_of(from) == v.region_of(to) {
        return false;
    }
    let entry_first = kind == Transfer::Fallthrough;
    if entry_first && entries(v, from, to, kind) {
        return true;
    }
    exits(v, from, to, kind) || (!entry_first && entries(v, from, to, kind))
}

fn describe(v: &Verifier, from: usize, kind: Transfer) -> String {
    if kind == Transfer::Fallthrough {
        "control falls through and".to_string()
    } else {
        v.ins[from].op.to_string()
    }
}

/// Regions around `from` that do not hold `to`.
fn exits(v: &mut Verifier, from: usize, to: usize, kind: Transfer) -> bool {
    let mut r = v.region_of(from);
    while r != NONE {
        let node = v.nodes[r as usize];
        if node.holds(to as u32) {
            break;
        }
        let code = match (kind, node.kind) {
            (Transfer::Fallthrough, _) => Some(Code::FallthroughException),
            (Transfer::Leave, RegionKind::Finally) => Some(Code::LeaveOutOfFinally),
            (Transfer::Leave, RegionKind::Fault) => Some(Code::LeaveOutOfFault),
            (Transfer::Leave, RegionKind::Filter) => Some(Code::LeaveOutOfFilter),
            (Transfer::Leave, _) => None,
            (Transfer::Branch, RegionKind::Try) => Some(Code::BranchOutOfTry),
            (Transfer::Branch, RegionKind::Finally) => Some(Code::BranchOutOfFinally),
            (Transfer::Branch, RegionKind::Filter) => Some(Code::BranchOutOfFilter),
            (Transfer::Branch, _) => Some(Code::BranchOutOfHandler),
        };
        if let Some(code) = code {
            let msg = format!(
                "{} leaves the {} starting at IL_{:04x}",
                describe(v, from, kind),
                node.kind,
                node.start
            );
            v.report(code, v.ins[from].off, msg);
            return true;
        }
        r = node.parent;
    }
    false
}

/// Regions around `to` that do not hold `from`.
fn entries(v: &mut Verifier, from: usize, to: usize, kind: Transfer) -> bool {
    let mut r = v.region_of(to);
    while r != NONE {
        let node = v.nodes[r as usize];
        if node.holds(from as u32) {
            break;
        }
        let code = match (kind, node.kind) {
            (_, RegionKind::Try) if node.first == to as u32 => None,
            (Transfer::Leave, RegionKind::Try) => Some(Code::LeaveIntoTry),
            (_, RegionKind::Try) => Some(Code::BranchIntoTry),
            (Transfer::Leave, RegionKind::Filter) => Some(Code::LeaveIntoFilter),
            (Transfer::Leave, _) => Some(Code::LeaveIntoHandler),
            (Transfer::Fallthrough, RegionKind::Filter) => Some(Code::FallthroughIntoFilter),
            (Transfer::Fallthrough, _) => Some(Code::FallthroughIntoHandler),
            (Transfer::Branch, RegionKind::Filter) => Some(Code::BranchIntoFilter),
            (Transfer::Branch, _) => Some(Code::BranchIntoHandler),
        };
        if let Some(code) = code {
            let msg = format!(
                "{} enters the {} starting at IL_{:04x} at IL_{:04x}",
                describe(v, from, kind),
                node.kind,
                node.start,
                v.ins[to].off
            );
            v.report(code, v.ins[from].off, msg);
            return true;
        }
        r = node.parent;
    }
    false
}
