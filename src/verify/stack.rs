//! Evaluation-stack depth dataflow (III.1.7.5).
//!
//! Depths start at the entry point (0) and at each handler (1 for catch and filter blocks, which
//! receive the exception; 0 for finally and fault). A worklist of block starts is walked
//! instruction by instruction until the flow ends or reaches an instruction whose depth is
//! already known, where the depths must agree. Each instruction is visited once.

use super::eh::RegionKind;
use super::{CallSig, Code, Ctx, NONE, Resolver, Verifier, flag, fx};
use crate::opcode::Opcode;

pub(super) fn run(v: &mut Verifier, ctx: &Ctx, r: &dyn Resolver, eh_ok: bool) {
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
            // The exception object counts against MaxStack before any instruction runs.
            if let Some(declared) = ctx.declared_max_stack
                && d > declared as u32
            {
                let off = v.ins[node.first as usize].off;
                v.report(
                    Code::StackOverflow,
                    off,
                    format!("handler entry depth {d} exceeds the declared MaxStack {declared}"),
                );
            }
            seed(v, node.first as usize, d);
        }
    }
    while let Some(start) = v.work.pop() {
        walk(v, start as usize, ctx, r);
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

fn path_mismatch(v: &mut Verifier, t: usize, known: u32, d: u32) {
    v.report(
        Code::PathStackDepth,
        v.ins[t].off,
        format!("reached with stack depths {known} and {d}"),
    );
}

/// Follows the flow from block start `i` (whose depth is known).
fn walk(v: &mut Verifier, mut i: usize, ctx: &Ctx, r: &dyn Resolver) {
    let n = v.ins.len();
    let mut d = v.depth[i];
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
        if d < pops {
            v.report(
                Code::StackUnderflow,
                ins.off,
                format!("{} pops {pops} items but the stack holds {d}", ins.op),
            );
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
        if d > v.max {
            v.max = d;
        }
        if let Some(declared) = ctx.declared_max_stack
            && d > declared as u32
        {
            v.report(
                Code::StackOverflow,
                ins.off,
                format!("stack depth {d} exceeds the declared MaxStack {declared}"),
            );
        }
        if fx.kind & fx::TARGETS != 0 {
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

/// The signature of the call at instruction `i`, or `None` (the path is abandoned) when it is
/// unknown. A bad token was already reported by the operand rules.
fn call_effect(v: &mut Verifier, i: usize, r: &dyn Resolver) -> Option<CallSig> {
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
