//! Evaluation-stack depth dataflow (III.1.7.5).
//!
//! Depths start at the entry point (0) and at each handler (1 for catch and filter blocks, which
//! receive the exception; 0 for finally and fault). A worklist of block starts is walked
//! instruction by instruction until the flow ends or reaches an instruction whose depth is
//! already known, where the depths must agree. Each instruction is visited once.

use super::clauses::Clauses;
use super::{CallSig, Code, Ctx, Ins, NONE, Out, Resolver, Targets, Verifier, flag, fx};
use crate::opcode::Opcode;

pub(super) fn run<R: Resolver + ?Sized>(
    v: &mut Verifier,
    code: &[u8],
    clauses: &Clauses<'_>,
    ctx: &Ctx,
    r: &R,
    eh_ok: bool,
) {
    // The instruction and target buffers are only read here; borrowed apart from what the
    // pass updates, so that reporting does not force them to be reloaded.
    let Verifier {
        ins,
        offs,
        n,
        nb,
        starts,
        depth,
        regions,
        work,
        out,
        max,
        incomplete,
        ..
    } = v;
    let ins = &ins[..*n];
    let targets = Targets { code, starts };
    let mut st = St {
        out,
        work,
        offs: &offs[..*n],
        max: *max,
        incomplete: *incomplete,
    };
    let v = &mut st;
    if *nb == 0 && !*regions {
        // Straight-line code: one path from the entry, each instruction reached once and only
        // by falling through, so no depth table is needed.
        walk::<R, false>(v, ins, &targets, &mut [], 0, 0, ctx, r);
    } else {
        depth.clear();
        depth.resize(ins.len(), NONE);
        v.work.clear();
        merge(v, ins, depth, 0, 0);
        if eh_ok && *regions {
            // Handlers in code order, as the tree lists them (no two start together in a
            // sound table).
            for at in 0..ins.len() {
                let flags = ins[at].flags;
                if flags & flag::HANDLER_START == 0 {
                    continue;
                }
                let d = handler_entry_depth(flags);
                // The exception object counts against MaxStack before any instruction runs.
                if let Some(declared) = ctx.declared_max_stack
                    && d > declared as u32
                {
                    v.report(
                        Code::StackOverflow,
                        v.offs[at],
                        format!("handler entry depth {d} exceeds the declared MaxStack {declared}"),
                    );
                }
                v.max = v.max.max(d);
                merge(v, ins, depth, at, d);
            }
        }
        while let Some(start) = v.work.pop() {
            let d = depth[start as usize];
            walk::<R, true>(v, ins, &targets, depth, start as usize, d, ctx, r);
            if v.stop() {
                break;
            }
        }
        if !v.stop() && *regions {
            post_checks(v, ins, depth, clauses);
        }
    }
    *max = st.max;
    *incomplete = st.incomplete;
}

/// What the dataflow updates besides the depths, and where each instruction starts.
struct St<'a> {
    out: &'a mut Out,
    work: &'a mut Vec<u32>,
    offs: &'a [u32],
    max: u32,
    incomplete: bool,
}

impl St<'_> {
    fn report(&mut self, code: Code, offset: u32, message: String) {
        self.out.report(code, offset, message);
    }

    fn stop(&self) -> bool {
        self.out.stop()
    }
}

/// Records depth `d` arriving at instruction `t` by a branch or as a handler entry.
fn merge(v: &mut St<'_>, ins: &[Ins], depth: &mut [u32], t: usize, d: u32) {
    let known = depth[t];
    if known == NONE {
        v.work.push(t as u32);
        // III.1.7.5: a single forward scan assumes an empty stack after an unconditional
        // transfer unless an earlier forward branch says otherwise. Only branches reach such
        // an instruction, so its first recorded depth is the one to check; on a mismatch the
        // scan's assumption (0) is kept, so the fault is reported once.
        if d != 0
            && t > 0
            && ins[t - 1].fx().flow.ends_block()
            && ins[t].flags & (flag::FORWARD_TARGET | flag::HANDLER_START) == 0
        {
            v.report(
                Code::BackwardBranch,
                v.offs[t],
                format!(
                    "follows an unconditional transfer, is reached only by backward branches, \
                     and has stack depth {d} instead of 0"
                ),
            );
            depth[t] = 0;
        } else {
            depth[t] = d;
        }
    } else if known != d {
        path_mismatch(v, v.offs[t], known, d);
    }
}

#[cold]
#[inline(never)]
fn path_mismatch(v: &mut St<'_>, off: u32, known: u32, d: u32) {
    v.report(
        Code::PathStackDepth,
        off,
        format!("reached with stack depths {known} and {d}"),
    );
}

/// Follows the flow from block start `i` with depth `d`. With `TRACK`, propagates to branch
/// targets and records and compares depths where paths join ([`flag::JOIN`]), stopping at a
/// known one; without it (code with no branches and no regions) it runs to the end of the path.
#[allow(clippy::too_many_arguments)]
fn walk<R: Resolver + ?Sized, const TRACK: bool>(
    v: &mut St<'_>,
    ins: &[Ins],
    targets: &Targets<'_>,
    depth: &mut [u32],
    mut i: usize,
    mut d: u32,
    ctx: &Ctx,
    r: &R,
) {
    let limit = ctx.declared_max_stack.map_or(u32::MAX, u32::from);
    // One compare per instruction: above this, the depth is a new maximum or over the limit.
    let mut watch = v.max.min(limit);
    let first_only = v.out.first_only;
    while i < ins.len() {
        // Fields are read in place: copying the whole instruction out costs a spill per step.
        let x = &ins[i];
        let fx = x.fx();
        // Most instructions (and calls without `tail.`, with the counts from the callee's
        // signature) just adjust the depth and fall through; only the overflow check can report
        // here, and it checks for first-only mode itself. Everything else (branches, returns,
        // prefixes, `tail.` calls) takes the full step.
        let effect = if fx.kind & fx::PLAIN != 0 && x.flags & flag::TAIL == 0 {
            Some((fx.pops as u32, fx.pushes as u32))
        } else if fx.pops == fx::SIG && fx.kind & fx::SPECIAL == 0 && x.flags & flag::TAIL == 0 {
            // An unknown signature ends the path.
            let Some(sig) = call_effect(v, *x, v.offs[i], targets.code, r) else {
                return;
            };
            Some((sig.pops(x.op()), sig.pushes(x.op())))
        } else {
            None
        };
        if let Some((pops, pushes)) = effect {
            if d < pops {
                underflow(v, *x, v.offs[i], pops, d);
                return;
            }
            d = d - pops + pushes;
            if d > watch {
                if d > v.max {
                    v.max = d;
                }
                if d > limit {
                    overflow(v, v.offs[i], d, limit);
                    if first_only && v.stop() {
                        return;
                    }
                }
                watch = v.max.min(limit);
            }
        } else if !step::<R, TRACK>(
            v,
            ins,
            (*x, v.offs[i]),
            targets,
            depth,
            &mut d,
            &mut watch,
            limit,
            ctx,
            r,
        ) {
            return;
        }
        i += 1;
        if TRACK && i < ins.len() && ins[i].flags & flag::JOIN != 0 {
            let known = depth[i];
            if known != NONE {
                if known != d {
                    path_mismatch(v, v.offs[i], known, d);
                }
                return;
            }
            depth[i] = d;
        }
    }
}

/// One instruction that is not [`fx::PLAIN`]: calls, returns, branches, prefixes and the
/// like, `x` starting at byte `at`. Returns whether the path continues to the next
/// instruction.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn step<R: Resolver + ?Sized, const TRACK: bool>(
    v: &mut St<'_>,
    ins: &[Ins],
    (x, at): (Ins, u32),
    targets: &Targets<'_>,
    depth: &mut [u32],
    d: &mut u32,
    watch: &mut u32,
    limit: u32,
    ctx: &Ctx,
    r: &R,
) -> bool {
    let fx = x.fx();
    {
        let (pops, pushes) = if fx.pops < fx::SIG && fx.pushes < fx::SIG {
            (fx.pops as u32, fx.pushes as u32)
        } else if fx.pops == fx::POP_ALL {
            (*d, 0)
        } else if x.op() == Opcode::Ret {
            check_ret(v, at, *d, ctx);
            return false;
        } else {
            match call_effect(v, x, at, targets.code, r) {
                Some(sig) => (sig.pops(x.op()), sig.pushes(x.op())),
                None => return false,
            }
        };
        if fx.kind & fx::SPECIAL != 0 {
            match x.op() {
                Opcode::Jmp if *d != 0 => v.report(
                    Code::JmpStackNotEmpty,
                    at,
                    format!("jmp with {} items on the stack", *d),
                ),
                Opcode::Localloc if *d > 1 => v.report(
                    Code::LocallocStackNotEmpty,
                    at,
                    format!(
                        "localloc with {} items on the stack besides its size",
                        *d - 1
                    ),
                ),
                Opcode::Endfilter if *d != 1 => {
                    v.report(
                        Code::EndfilterStack,
                        at,
                        format!(
                            "endfilter with {} items on the stack; it takes exactly one",
                            *d
                        ),
                    );
                    return false;
                }
                // Other special opcodes have no stack rule beyond their pops and pushes.
                _ => {}
            }
        }
        if *d < pops {
            underflow(v, x, at, pops, *d);
            return false;
        }
        if x.flags & flag::TAIL != 0 && *d != pops {
            v.report(
                Code::TailStackEmpty,
                at,
                format!(
                    "a tail. call leaves {} items besides its arguments on the stack",
                    *d - pops
                ),
            );
        }
        *d = *d - pops + pushes;
        if *d > *watch {
            if *d > v.max {
                v.max = *d;
            }
            if *d > limit {
                overflow(v, at, *d, limit);
            }
            *watch = v.max.min(limit);
        }
        if TRACK && fx.kind & fx::TARGETS != 0 {
            let d = *d;
            targets.each(ins, &x, at, |t| {
                if t != NONE {
                    merge(v, ins, depth, t as usize, d);
                }
            });
        }
        !(fx.flow.ends_block() || (v.out.first_only && v.stop()))
    }
}

#[cold]
#[inline(never)]
fn underflow(v: &mut St<'_>, x: Ins, at: u32, pops: u32, d: u32) {
    v.report(
        Code::StackUnderflow,
        at,
        format!("{} pops {pops} items but the stack holds {d}", x.op()),
    );
}

#[cold]
#[inline(never)]
fn overflow(v: &mut St<'_>, off: u32, d: u32, declared: u32) {
    v.report(
        Code::StackOverflow,
        off,
        format!("stack depth {d} exceeds the declared MaxStack {declared}"),
    );
}

/// The signature of the call `x` at byte `at`, or `None` (the path is abandoned) when it is
/// unknown. A bad token was already reported by the operand rules.
#[inline]
fn call_effect<R: Resolver + ?Sized>(
    v: &mut St<'_>,
    x: Ins,
    at: u32,
    code: &[u8],
    r: &R,
) -> Option<CallSig> {
    let sig = r.call_sig(x.op(), x.operand(at, code));
    if sig.is_none() {
        v.incomplete = true;
    }
    sig
}

fn check_ret(v: &mut St<'_>, off: u32, d: u32, ctx: &Ctx) {
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

/// The stack depth at the first instruction of a handler or filter whose first instruction has
/// `flags`: 1 where the runtime pushes the exception object (catch, filter, filter handler), 0
/// for a finally or fault.
pub(super) fn handler_entry_depth(flags: u8) -> u32 {
    u32::from(flags & flag::RECEIVES_EXCEPTION != 0)
}

/// A try must be entered with an empty stack (I.12.4.2.8), except one that starts at the first
/// instruction of a catch, filter or filter handler: there the stack holds only the exception
/// object the runtime pushes, which ILVerify accepts (its try-start check sees the handler
/// block before the exception object is placed on its entry stack). A wrong depth arriving
/// there by a branch is a branch into the handler, reported by the flow rules.
///
/// Tries are found by their first instructions' flags (the tree may have been let go). Tries
/// starting together have one depth, so one finding each start, named after the outermost
/// try there (as the tree orders them).
fn post_checks(v: &mut St<'_>, ins: &[Ins], depth: &[u32], clauses: &Clauses<'_>) {
    // First instructions of tries entered with a non-empty stack, in code order, and the
    // depth.
    let mut bad: Vec<(u32, u32)> = Vec::new();
    for (at, x) in ins.iter().enumerate() {
        if x.flags & flag::TRY_START == 0 {
            continue;
        }
        let d = depth[at];
        let allowed = d == NONE || d == 0 || (d == 1 && x.flags & flag::RECEIVES_EXCEPTION != 0);
        if !allowed {
            bad.push((at as u32, d));
        }
    }
    if bad.is_empty() {
        return;
    }
    let outermost = outermost_tries(v.offs, &bad, clauses);
    for (&(at, d), clause) in bad.iter().zip(outermost) {
        v.out.report_with(
            Code::TryNonEmptyStack,
            v.offs[at as usize],
            format!("the try is entered with {d} items on the stack"),
            super::Detail::clause(clause, None),
        );
    }
}

/// For each try start of `starts` (instruction indices in code order, with a depth; `offs`
/// where instructions start), the lowest clause of the outermost try starting there: the
/// longest, and of clauses sharing it the first. One pass over the clauses, each looked up
/// among the starts.
fn outermost_tries(offs: &[u32], starts: &[(u32, u32)], clauses: &Clauses<'_>) -> Vec<u32> {
    // (end, clause) of the best so far.
    let mut best = vec![(0u64, NONE); starts.len()];
    for (ci, c) in clauses.iter().enumerate() {
        let Ok(k) = starts.binary_search_by_key(&c.try_offset, |&(at, _)| offs[at as usize]) else {
            continue;
        };
        // Strictly longer: of equal tries the first clause stays.
        if c.try_end() > best[k].0 {
            best[k] = (c.try_end(), ci as u32);
        }
    }
    best.into_iter().map(|(_, clause)| clause).collect()
}
