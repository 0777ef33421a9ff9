//! How control reaches an instruction where a stack rule failed at a join: every predecessor
//! (the instruction before falling through, each branch targeting it, the method entry, a
//! handler's entry) with the depth it brings, so that a `PathStackDepth` finding names the
//! branch that brought the other depth and not only the target.
//!
//! The stack dataflow records depths only where paths join, and only the first to arrive, to
//! keep the clean path lean. So this runs after it, and only for a body with such a finding:
//! one linear sweep recomputes the depth after every instruction from the depths the dataflow
//! recorded (each instruction between joins is reached only by falling through, so its depth
//! follows from the join before it), then one pass over the branches collects the arrivals.

use super::detail::{Arrival, ArrivalKind, MAX_ARRIVALS};
use super::{Code, Ins, NONE, Resolver, Verifier, flag, fx, stack};
use crate::opcode::Opcode;
use std::collections::HashMap;

/// The codes whose findings are explained by the arrivals at their offset.
fn explained(code: Code) -> bool {
    matches!(
        code,
        Code::PathStackDepth | Code::BackwardBranch | Code::TryNonEmptyStack
    )
}

/// Adds the arrivals to every finding of an [`explained`] code, and a summary of them to its
/// message.
pub(super) fn explain<R: Resolver + ?Sized>(v: &mut Verifier, code: &[u8], r: &R) {
    if !v.out.diags.iter().any(|d| explained(d.code)) {
        return;
    }
    let n = v.n;
    // The dataflow keeps depths only for code with branches or regions; without either no path
    // joins another, and these codes cannot be reported.
    if (v.nb == 0 && !v.regions) || v.depth.len() < n {
        return;
    }
    // Instruction index of each finding to explain, and its arrivals.
    let mut at: HashMap<u32, Vec<Arrival>> = HashMap::new();
    for d in v.out.diags.iter().filter(|d| explained(d.code)) {
        let i = v.index_at(d.offset);
        if (i as usize) < n {
            at.entry(i).or_default();
        }
    }
    let after = depths_after(v, code, r);
    let (ins, offs) = (&v.ins[..n], &v.offs[..n]);
    let mut found = Found {
        at,
        more: HashMap::new(),
    };
    found.add(
        0,
        Arrival {
            kind: ArrivalKind::Entry,
            from: 0,
            depth: 0,
        },
    );
    // Predecessors in code order, so that each list is sorted by where control comes from: a
    // conditional branch's target and its fall-through are both arrivals from it. (The list of
    // branches may have been let go after the region rules: each instruction says.)
    let mut seen: Vec<u32> = Vec::new();
    for (k, x) in ins.iter().enumerate() {
        if after[k] == NONE {
            continue;
        }
        if x.fx().kind & fx::TARGETS != 0 {
            seen.clear();
            let targets = v.targets_in(code);
            let at = offs[k];
            targets.each(ins, x, at, |t| {
                // A `switch` may name one target many times: one arrival.
                if t != NONE && !seen.contains(&t) {
                    seen.push(t);
                    found.add(
                        t,
                        Arrival {
                            kind: ArrivalKind::Branch,
                            from: at,
                            depth: after[k],
                        },
                    );
                }
            });
        }
        if k + 1 < n && !x.fx().flow.ends_block() {
            found.add(
                k as u32 + 1,
                Arrival {
                    kind: ArrivalKind::FallThrough,
                    from: offs[k],
                    depth: after[k],
                },
            );
        }
    }
    // Handlers and filters by their first instructions' flags (the tree may have been let go).
    for (k, x) in ins.iter().enumerate() {
        if x.flags & flag::HANDLER_START != 0 {
            found.add(
                k as u32,
                Arrival {
                    kind: ArrivalKind::Handler,
                    from: offs[k],
                    depth: stack::handler_entry_depth(x.flags),
                },
            );
        }
    }
    let Found { at, more } = found;
    let Verifier { out, starts, .. } = v;
    for d in out.diags.iter_mut().filter(|d| explained(d.code)) {
        let Some(i) = starts.get(d.offset) else {
            continue;
        };
        let Some(list) = at.get(&i) else { continue };
        if list.is_empty() {
            continue;
        }
        let mut list = list.clone();
        list.sort_by_key(|a| a.from);
        d.message
            .push_str(&summary(&list, more.get(&i).copied().unwrap_or(0)));
        d.detail.arrivals = list;
        d.detail.more_arrivals = more.get(&i).copied().unwrap_or(0);
    }
}

/// Arrivals at the instructions being explained (by index), at most [`MAX_ARRIVALS`] each;
/// `more` counts the rest.
struct Found {
    at: HashMap<u32, Vec<Arrival>>,
    more: HashMap<u32, u32>,
}

impl Found {
    fn add(&mut self, t: u32, arrival: Arrival) {
        let Some(list) = self.at.get_mut(&t) else {
            return;
        };
        if list.len() < MAX_ARRIVALS {
            list.push(arrival);
        } else {
            *self.more.entry(t).or_default() += 1;
        }
    }
}

/// `: depth 1 by the branch at IL_0004, depth 0 falling through from IL_0009`, the first few.
fn summary(list: &[Arrival], more: u32) -> String {
    const SHOWN: usize = 4;
    let mut s = String::from(": ");
    let words: Vec<String> = list.iter().take(SHOWN).map(Arrival::describe).collect();
    s.push_str(&words.join(", "));
    let rest = (list.len().saturating_sub(SHOWN)) as u64 + u64::from(more);
    if rest > 0 {
        s.push_str(&format!(", and {rest} more"));
    }
    s
}

/// The stack depth after each instruction on the path the dataflow followed through it, or
/// [`NONE`] where it followed none (unreachable code, a path that ended at a fault or at a call
/// whose signature is unknown, a `ret`).
fn depths_after<R: Resolver + ?Sized>(v: &Verifier, code: &[u8], r: &R) -> Vec<u32> {
    let n = v.n;
    let ins = &v.ins[..n];
    let mut after = vec![NONE; n];
    for k in 0..n {
        // A depth recorded here (a join, or the entry) is the one the dataflow walked on with;
        // elsewhere only falling through reaches an instruction.
        let before = if v.depth[k] != NONE {
            v.depth[k]
        } else if k > 0 && !ins[k - 1].fx().flow.ends_block() {
            after[k - 1]
        } else {
            NONE
        };
        after[k] = effect(ins[k], v.offs[k], before, code, r);
    }
    after
}

/// The depth after `x`, at byte `at`, given the depth before it, as the dataflow's step
/// computes it.
fn effect<R: Resolver + ?Sized>(x: Ins, at: u32, before: u32, code: &[u8], r: &R) -> u32 {
    if before == NONE {
        return NONE;
    }
    let fx = x.fx();
    let (pops, pushes) = if fx.pops < fx::SIG && fx.pushes < fx::SIG {
        (fx.pops as u32, fx.pushes as u32)
    } else if fx.pops == fx::POP_ALL {
        (before, 0)
    } else if x.op() == Opcode::Ret {
        return NONE;
    } else {
        match r.call_sig(x.op(), x.operand(at, code)) {
            Some(sig) => (sig.pops(x.op()), sig.pushes(x.op())),
            None => return NONE,
        }
    };
    if before < pops {
        NONE
    } else {
        before - pops + pushes
    }
}
