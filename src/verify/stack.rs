//! Evaluation-stack depth dataflow (III.1.7.5).
//!
//! Depths start at the entry point (0) and at each handler (1 for catch and filter blocks, which
//! receive the exception; 0 for finally and fault). A worklist of block starts is walked
//! instruction by instruction until the flow ends or reaches an instruction whose depth is
//! already known, where the depths must agree. Each instruction is visited once.

use super::eh::RegionKind;
use super::{CallSig, Code, Ctx, NONE, Resolver, Verifier, flag, fx};
use crate::opcode::Opcode;

pub(super) fn run<R: Resolver + ?Sized>(v: &mut Verifier, ctx: &Ctx, r: &R, eh_ok: bool) {
    if v.branches.is_empty() && v.nodes.is_empty() {
        // Straight-line code: one path from the entry, each instruction reached once and only
        // by falling through, so no depth table is needed.
        walk::<R, false>(v, 0, 0, ctx, r);
        return;
    }
    let n = v.ins.len();
    v.depth.clear();
    v.depth.resize(n, NONE);
    v.work.clear();
    seed(v, 0, 0);
    if eh_ok {
        for k in 0..v.nodes.len() {
            let node = v.nodes[k];
            let d = match node.kind {
                RegionKind::Try => continue,
                RegionKind::Finally | RegionKind::Fault => 0,
                _ => 1,
            };
            seed(v, node.first as usize, d);
        }
    }
    while let Some(start) = v.work.pop() {
        let d = v.depth[start as usize];
        walk::<R, true>(v, start as usize, d, ctx, r);
        if v.stop() {
            return;
        }
    }
    post_checks(v);
}

fn seed(v: &mut Verifier, i: usize, d: u32) {
    v.max = v.max.max(d);
    merge(v, i, d);
}

/// Records depth `d` arriving at instruction `t` by a branch or as a handler entry.
fn merge(v: &mut Verifier, t: usize, d: u32) {
    let known = v.depth[t];
    if known == NONE {
        v.work.push(t as u32);
        // III.1.7.5: a single forward scan assumes an empty stack after an unconditional
        // transfer unless an earlier forward branch says otherwise. Only branches reach such
        // an instruction, so its first recorded depth is the one to check; on a mismatch the
        // scan's assumption (0) is kept, so the fault is reported once.
        if d != 0
            && t > 0
            && v.ins[t - 1].fx.flow.ends_block()
            && v.ins[t].flags & (flag::FORWARD_TARGET | flag::HANDLER_START) == 0
        {
            v.report(
                Code::BackwardBranch,
                v.ins[t].off,
                format!(
                    "follows an unconditional transfer, is reached only by backward branches, \
                     and has stack depth {d} instead of 0"
                ),
            );
            v.depth[t] = 0;
        } else {
            v.depth[t] = d;
        }
    } else if known != d {
        path_mismatch(v, t, known, d);
    }
}

#[cold]
#[inline(never)]
fn path_mismatch(v: &mut Verifier, t: usize, known: u32, d: u32) {
    v.report(
        Code::PathStackDepth,
        v.ins[t].off,
        format!("reached with stack depths {known} and {d}"),
    );
}

/// Follows the flow from block start `i` with depth `d`. With `TRACK`, records each
/// instruction's depth, propagates to branch targets and stops where a depth is known; without
/// it (code with no branches and no regions) it simply runs to the end of the path.
fn walk<R: Resolver + ?Sized, const TRACK: bool>(
    v: &mut Verifier,
    mut i: usize,
    mut d: u32,
    ctx: &Ctx,
    r: &R,
) {
    let n = v.ins.len();
    let limit = ctx.declared_max_stack.map_or(u32::MAX, u32::from);
    // One compare per instruction: above this, the depth is a new maximum or over the limit.
    let mut watch = v.max.min(limit);
    loop {
        let ins = v.ins[i];
        let fx = ins.fx;
        let (pops, pushes) = if fx.pops < fx::SIG && fx.pushes < fx::SIG {
            (fx.pops as u32, fx.pushes as u32)
        } else if fx.pops == fx::POP_ALL {
            (d, 0)
        } else if ins.op == Opcode::Ret {
            check_ret(v, ins.off, d, ctx);
            return;
        } else {
            match call_effect(v, i, r) {
                Some(sig) => (sig.pops(ins.op), sig.pushes(ins.op)),
                None => return,
            }
        };
        if fx.kind & fx::SPECIAL != 0 {
            match ins.op {
                Opcode::Jmp if d != 0 => v.report(
                    Code::JmpStackNotEmpty,
                    ins.off,
                    format!("jmp with {d} items on the stack"),
                ),
                Opcode::Endfilter if d != 1 => {
                    v.report(
                        Code::EndfilterStack,
                        ins.off,
                        format!("endfilter with {d} items on the stack; it takes exactly one"),
                    );
                    return;
                }
                _ => {}
            }
        }
        if d < pops {
            underflow(v, i, pops, d);
            return;
        }
        if ins.flags & flag::TAIL != 0 && d != pops {
            v.report(
                Code::TailStackEmpty,
                ins.off,
                format!(
                    "a tail. call leaves {} items besides its arguments on the stack",
                    d - pops
                ),
            );
        }
        d = d - pops + pushes;
        if d > watch {
            if d > v.max {
                v.max = d;
            }
            if d > limit {
                overflow(v, ins.off, d, limit);
            }
            watch = v.max.min(limit);
        }
        if TRACK && fx.kind & fx::TARGETS != 0 {
            let start = ins.arg as usize + 1;
            let count = v.targets[ins.arg as usize] as usize;
            for k in start..start + count {
                let t = v.targets[k];
                if t != NONE {
                    merge(v, t as usize, d);
                }
            }
        }
        if fx.flow.ends_block() || i + 1 == n || (v.first_only && v.stop()) {
            return;
        }
        i += 1;
        if TRACK {
            let known = v.depth[i];
            if known != NONE {
                if known != d {
                    path_mismatch(v, i, known, d);
                }
                return;
            }
            v.depth[i] = d;
        }
    }
}

#[cold]
#[inline(never)]
fn underflow(v: &mut Verifier, i: usize, pops: u32, d: u32) {
    let ins = v.ins[i];
    v.report(
        Code::StackUnderflow,
        ins.off,
        format!("{} pops {pops} items but the stack holds {d}", ins.op),
    );
}

#[cold]
#[inline(never)]
fn overflow(v: &mut Verifier, off: u32, d: u32, declared: u32) {
    v.report(
        Code::StackOverflow,
        off,
        format!("stack depth {d} exceeds the declared MaxStack {declared}"),
    );
}

/// The signature of the call at instruction `i`, or `None` (the path is abandoned) when it is
/// unknown. A bad token was already reported by the operand rules.
#[inline]
fn call_effect<R: Resolver + ?Sized>(v: &mut Verifier, i: usize, r: &R) -> Option<CallSig> {
    let ins = v.ins[i];
    let sig = r.call_sig(ins.op, ins.arg);
    if sig.is_none() {
        v.incomplete = true;
    }
    sig
}

fn check_ret(v: &mut Verifier, off: u32, d: u32, ctx: &Ctx) {
    let Some(method) = ctx.method else {
        return;
    };
    let (code, msg) = match (method.returns_void, d) {
        (true, 0) | (false, 1) => return,
        (true, _) => (
            Code::ReturnVoid,
            format!("ret from a void method with {d} items on the stack"),
        ),
        (false, 0) => (
            Code::ReturnMissing,
            "ret without a return value on the stack".to_string(),
        ),
        (false, _) => (
            Code::ReturnEmpty,
            format!("ret with {d} items on the stack; only the return value may be there"),
        ),
    };
    v.report(code, off, msg);
}

/// A try must be entered with an empty stack.
fn post_checks(v: &mut Verifier) {
    for k in 0..v.nodes.len() {
        let node = v.nodes[k];
        if node.kind != RegionKind::Try {
            continue;
        }
        let d = v.depth[node.first as usize];
        if d != NONE && d != 0 {
            v.report(
                Code::TryNonEmptyStack,
                node.start,
                format!("the try is entered with {d} items on the stack"),
            );
        }
    }
}
