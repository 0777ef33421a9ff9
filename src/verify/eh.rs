//! Exception-handling table rules (II.19, II.25.4.6) and the region tree.
//!
//! Every try, handler and filter is an interval of byte offsets. Sorted by start (outer first
//! on ties), one sweep with a stack of open intervals finds partial overlaps, equal blocks,
//! nesting order and filter contents in O(k log k); the same sweep over the instructions gives
//! each its innermost region. Each node also gets shortcuts to the ancestors the transfer and
//! placement rules look for, so that no rule walks up a deep tree. Region checks elsewhere run
//! only when the table is sound.

use super::{Code, NONE, Resolver, Verifier, flag};
use crate::body::{Clause, ClauseKind};
use crate::opcode::{Opcode, OperandKind};
use std::cmp::Reverse;
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum RegionKind {
    Try,
    Filter,
    Catch,
    /// The handler of a filter clause: a catch for `rethrow`'s purposes.
    FilterHandler,
    Finally,
    Fault,
}

impl RegionKind {
    fn is_handler_like(self) -> bool {
        self != RegionKind::Try
    }
}

impl fmt::Display for RegionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RegionKind::Try => "try",
            RegionKind::Filter => "filter",
            RegionKind::Catch => "catch handler",
            RegionKind::FilterHandler => "filter handler",
            RegionKind::Finally => "finally handler",
            RegionKind::Fault => "fault handler",
        })
    }
}

/// Scratch buffers of at most this many entries are kept between bodies; larger ones are let go
/// when their pass is done, so that a giant body's peak does not hold them all at once.
pub(super) const KEEP_LARGEST: usize = 1 << 16;

/// One region as a byte interval, before the sweep.
#[derive(Clone, Copy, Debug)]
pub(super) struct Interval {
    start: u32,
    end: u32,
    kind: RegionKind,
    clause: u32,
}

/// A node of the region tree. A try shared by several clauses is one node.
#[derive(Clone, Copy, Debug)]
pub(super) struct Node {
    pub kind: RegionKind,
    /// Byte offsets.
    pub start: u32,
    pub end: u32,
    /// Instruction indices: first, and one past the last.
    pub first: u32,
    pub end_idx: u32,
    /// Enclosing node or [`NONE`].
    pub parent: u32,
    /// Lowest and highest clause index owning this block (equal unless a shared try).
    pub min_clause: u32,
    max_clause: u32,
    /// A shared try with a finally or fault among its clauses.
    has_finally: bool,
    /// Shortcuts up the tree, each to the nearest node at or above this one (or [`NONE`]) that
    /// a walk up from here for one rule stops at, so that the walk is one step:
    /// not a try ([`Node::handler`]);
    pub handler: u32,
    /// a finally, fault or filter, which a `leave` may not exit ([`Node::leave_stop`]);
    pub leave_stop: u32,
    /// a try ([`Node::try_stop`]);
    pub try_stop: u32,
    /// a try that does not start at this node's first instruction, so that an entry there
    /// enters it in the middle ([`Node::try_entry_stop`]; this node itself starts there).
    pub try_entry_stop: u32,
}

impl Node {
    /// Whether instruction `i` lies in this region.
    pub fn holds(&self, i: u32) -> bool {
        self.first <= i && i < self.end_idx
    }
}

/// Checks the table and, if it is sound, builds `v.nodes` and `v.region`. Returns whether the
/// table is sound enough for region rules.
pub(super) fn check<R: Resolver + ?Sized>(
    v: &mut Verifier,
    len: usize,
    clauses: &[Clause],
    r: &R,
) -> bool {
    if clauses.is_empty() {
        return true;
    }
    let mut ok = true;
    for (ci, c) in clauses.iter().enumerate() {
        ok &= check_clause(v, len, ci, c, r);
    }
    if !ok || v.stop() {
        return false;
    }
    let mut intervals = std::mem::take(&mut v.intervals);
    intervals.clear();
    // Exactly as many as the clauses' regions, not the next power of two.
    let filters = clauses
        .iter()
        .filter(|c| c.kind() == ClauseKind::Filter)
        .count();
    intervals.reserve_exact(2 * clauses.len() + filters);
    for (ci, c) in clauses.iter().enumerate() {
        let clause = ci as u32;
        let handler = match c.kind() {
            ClauseKind::Catch => RegionKind::Catch,
            ClauseKind::Filter => RegionKind::FilterHandler,
            ClauseKind::Finally => RegionKind::Finally,
            _ => RegionKind::Fault,
        };
        intervals.push(Interval {
            start: c.try_offset,
            end: c.try_end() as u32,
            kind: RegionKind::Try,
            clause,
        });
        intervals.push(Interval {
            start: c.handler_offset,
            end: c.handler_end() as u32,
            kind: handler,
            clause,
        });
        if c.kind() == ClauseKind::Filter {
            intervals.push(Interval {
                start: c.class_or_filter,
                end: c.handler_offset,
                kind: RegionKind::Filter,
                clause,
            });
        }
    }
    intervals.sort_unstable_by_key(|x| (x.start, Reverse(x.end), x.kind, x.clause));
    let ok = build_tree(v, &intervals, clauses);
    // Kept for the next body unless large: the passes after this one would hold it too.
    if intervals.capacity() <= KEEP_LARGEST {
        v.intervals = intervals;
    }
    if !ok {
        v.nodes.clear();
        return false;
    }
    assign_regions(v);
    true
}

/// Rules about one clause on its own. Returns false if its regions cannot be placed.
fn check_clause<R: Resolver + ?Sized>(
    v: &mut Verifier,
    len: usize,
    ci: usize,
    c: &Clause,
    r: &R,
) -> bool {
    let kind = c.kind();
    let at = c.try_offset;
    if kind == ClauseKind::Invalid {
        v.report_clause(
            Code::EHInvalidKind,
            at,
            format!("clause {ci}: flags {:#x} name no handler kind", c.flags),
            ci as u32,
            None,
        );
        return false;
    }
    if c.try_length == 0 || c.handler_length == 0 {
        let what = if c.try_length == 0 { "try" } else { "handler" };
        v.report_clause(
            Code::EHRegionEmpty,
            at,
            format!("clause {ci}: the {what} is empty"),
            ci as u32,
            None,
        );
        return false;
    }
    let len64 = len as u64;
    let filter = kind == ClauseKind::Filter;
    if c.try_end() > len64
        || c.handler_end() > len64
        || (filter && c.class_or_filter as u64 >= len64)
    {
        v.report_clause(
            Code::EHClauseOutOfRange,
            at,
            format!("clause {ci}: a region reaches past the end of the code ({len:#x} bytes)"),
            ci as u32,
            None,
        );
        return false;
    }
    let bounds = [
        ("try start", c.try_offset as u64),
        ("try end", c.try_end()),
        ("handler start", c.handler_offset as u64),
        ("handler end", c.handler_end()),
        (
            "filter start",
            if filter {
                c.class_or_filter as u64
            } else {
                len64
            },
        ),
    ];
    for (what, b) in bounds {
        if !is_boundary(v, b, len) {
            v.report_clause(
                Code::EHBoundaryNotInstructionStart,
                b as u32,
                format!("clause {ci}: the {what} IL_{b:04x} is not an instruction start"),
                ci as u32,
                None,
            );
            return false;
        }
    }
    if filter && c.class_or_filter >= c.handler_offset {
        v.report_clause(
            Code::EHFilterNotBeforeHandler,
            c.class_or_filter,
            format!("clause {ci}: the filter does not start before its handler"),
            ci as u32,
            None,
        );
        return false;
    }
    if kind == ClauseKind::Catch {
        let token = c.class_or_filter;
        if !r.token_fits(OperandKind::Type, token) {
            v.report_clause(
                Code::ExpectedTypeToken,
                c.handler_offset,
                format!("clause {ci}: catch class {token:#010x} is not a type token"),
                ci as u32,
                None,
            );
        } else if token & 0x00FF_FFFF == 0 || r.token_exists(token) == Some(false) {
            v.report_clause(
                Code::TokenResolve,
                c.handler_offset,
                format!("clause {ci}: catch class {token:#010x} does not exist"),
                ci as u32,
                None,
            );
        }
    }
    true
}

/// An offset where a region may begin or end: an instruction start not inside a prefixed
/// instruction, or the end of the code.
fn is_boundary(v: &Verifier, off: u64, len: usize) -> bool {
    if off == len as u64 {
        return true;
    }
    off < len as u64 && {
        let i = v.index_at(off as u32);
        i != NONE && v.ins[i as usize].flags & flag::AFTER_PREFIX == 0
    }
}

/// The sweep over sorted intervals; fills `v.nodes` in sorted order. Returns false on any
/// finding.
fn build_tree(v: &mut Verifier, intervals: &[Interval], clauses: &[Clause]) -> bool {
    let mut ok = true;
    v.open.clear();
    v.try_node.clear();
    v.try_node.resize(clauses.len(), NONE);
    // A node per interval at most.
    v.nodes.reserve_exact(intervals.len());
    for x in intervals {
        while let Some(&top) = v.open.last() {
            if v.nodes[top as usize].end <= x.start {
                v.open.pop();
            } else {
                break;
            }
        }
        let parent = v.open.last().copied().unwrap_or(NONE);
        if parent != NONE {
            let p = v.nodes[parent as usize];
            if p.start == x.start && p.end == x.end {
                ok &= join_equal(v, parent, x, clauses);
                continue;
            }
            if x.end > p.end {
                v.report_clause(
                    Code::EHOverlap,
                    x.start,
                    format!(
                        "clause {}: its {} [IL_{:04x}, IL_{:04x}) overlaps the {} \
                         [IL_{:04x}, IL_{:04x}) of clause {}",
                        x.clause, x.kind, x.start, x.end, p.kind, p.start, p.end, p.min_clause
                    ),
                    x.clause,
                    Some(p.min_clause),
                );
                ok = false;
                continue;
            }
            ok &= check_nesting(v, parent, x);
        }
        if x.kind == RegionKind::Try {
            v.try_node[x.clause as usize] = v.nodes.len() as u32;
        }
        v.nodes.push(Node {
            kind: x.kind,
            start: x.start,
            end: x.end,
            first: NONE,
            end_idx: NONE,
            parent,
            min_clause: x.clause,
            max_clause: x.clause,
            has_finally: x.kind == RegionKind::Try
                && matches!(
                    clauses[x.clause as usize].kind(),
                    ClauseKind::Finally | ClauseKind::Fault
                ),
            handler: NONE,
            leave_stop: NONE,
            try_stop: NONE,
            try_entry_stop: NONE,
        });
        v.open.push(v.nodes.len() as u32 - 1);
    }
    ok
}

/// `x` is the same block as node `n`: allowed only for a try shared by catch and filter clauses.
fn join_equal(v: &mut Verifier, n: u32, x: &Interval, clauses: &[Clause]) -> bool {
    let node = v.nodes[n as usize];
    let (code, msg) = match (node.kind, x.kind) {
        (RegionKind::Try, RegionKind::Try) => {
            let fin = matches!(
                clauses[x.clause as usize].kind(),
                ClauseKind::Finally | ClauseKind::Fault
            );
            if !(fin || node.has_finally) {
                let parent = node.parent;
                let node = &mut v.nodes[n as usize];
                node.min_clause = node.min_clause.min(x.clause);
                node.max_clause = node.max_clause.max(x.clause);
                v.try_node[x.clause as usize] = n;
                // The newcomer must also come before whatever encloses the shared try.
                return parent == NONE || check_order(v, parent, x);
            }
            (
                Code::EHSharedTryFinally,
                "shares its try with another clause but has a finally or fault (or the other does)",
            )
        }
        (RegionKind::Try, _) | (_, RegionKind::Try) => (
            Code::EHTryIsHandler,
            "its block is both a try and a handler or filter",
        ),
        _ => (
            Code::EHDuplicateHandlerStart,
            "its handler or filter is the same block as another",
        ),
    };
    let other = node.min_clause;
    v.report_clause(
        code,
        x.start,
        format!("clause {}: {msg} (clause {other})", x.clause),
        x.clause,
        Some(other),
    );
    false
}

/// Rules for `x` nested directly in node `parent`.
fn check_nesting(v: &mut Verifier, parent: u32, x: &Interval) -> bool {
    let p = v.nodes[parent as usize];
    if p.kind == RegionKind::Filter {
        v.report_clause(
            Code::EHFilterContainsRegion,
            x.start,
            format!(
                "clause {}: its {} lies inside the filter of clause {} at IL_{:04x}",
                x.clause, x.kind, p.min_clause, p.start
            ),
            x.clause,
            Some(p.min_clause),
        );
        return false;
    }
    let own = if x.kind == RegionKind::Try {
        p.kind != RegionKind::Try && p.min_clause == x.clause
    } else {
        v.try_node[x.clause as usize] == parent
    };
    if own {
        v.report_clause(
            Code::EHOverlap,
            x.start,
            format!(
                "clause {}: its {} lies inside its own {}",
                x.clause, x.kind, p.kind
            ),
            x.clause,
            None,
        );
        return false;
    }
    if x.kind.is_handler_like() {
        // Two handlers (or filters) starting together, however nested, are ambiguous.
        let mut q = parent;
        while q != NONE && v.nodes[q as usize].start == x.start {
            let n = v.nodes[q as usize];
            if n.kind.is_handler_like() {
                v.report_clause(
                    Code::EHDuplicateHandlerStart,
                    x.start,
                    format!(
                        "clause {}: its {} starts where the {} of clause {} starts",
                        x.clause, x.kind, n.kind, n.min_clause
                    ),
                    x.clause,
                    Some(n.min_clause),
                );
                return false;
            }
            q = n.parent;
        }
    }
    check_order(v, parent, x)
}

/// Inner clauses come first: `x`, nested in `parent`, must belong to an earlier clause.
fn check_order(v: &mut Verifier, parent: u32, x: &Interval) -> bool {
    let p = v.nodes[parent as usize];
    if x.clause > p.min_clause {
        v.report_clause(
            Code::EHOrderInnerAfterOuter,
            x.start,
            format!(
                "clause {} is nested in the {} of clause {} but listed after it",
                x.clause, p.kind, p.min_clause
            ),
            x.clause,
            Some(p.min_clause),
        );
        return false;
    }
    true
}

/// Gives each node its instruction range, its shortcuts up the tree, and each instruction its
/// innermost node; marks handler starts; checks that filters end in `endfilter`.
fn assign_regions(v: &mut Verifier) {
    // A parent comes before its children (nodes are sorted by start, outer first), so its
    // range and shortcuts are known when a child's are computed.
    for k in 0..v.nodes.len() {
        let node = v.nodes[k];
        let first = v.index_at(node.start);
        let end_idx = v.index_at(node.end);
        v.ins[first as usize].flags |= if node.kind.is_handler_like() {
            flag::JOIN | flag::HANDLER_START
        } else {
            flag::JOIN
        };
        let parent = v.nodes.get(node.parent as usize).copied();
        let me = k as u32;
        let up = |pick: fn(&Node) -> u32| parent.as_ref().map_or(NONE, pick);
        let handler = if node.kind == RegionKind::Try {
            up(|p| p.handler)
        } else {
            me
        };
        let leave_stop = match node.kind {
            RegionKind::Finally | RegionKind::Fault | RegionKind::Filter => me,
            _ => up(|p| p.leave_stop),
        };
        let try_stop = if node.kind == RegionKind::Try {
            me
        } else {
            up(|p| p.try_stop)
        };
        // An entry at this node's first instruction passes the tries that start there too;
        // every node above a parent that starts elsewhere starts before this one.
        let try_entry_stop = match parent {
            Some(p) if p.first == first => p.try_entry_stop,
            Some(p) => p.try_stop,
            None => NONE,
        };
        let n = &mut v.nodes[k];
        (n.first, n.end_idx) = (first, end_idx);
        (n.handler, n.leave_stop) = (handler, leave_stop);
        (n.try_stop, n.try_entry_stop) = (try_stop, try_entry_stop);
    }
    fill_regions(v);
    for k in 0..v.nodes.len() {
        let node = v.nodes[k];
        if node.kind == RegionKind::Filter {
            let last = v.ins[node.end_idx as usize - 1];
            if last.op != Opcode::Endfilter {
                v.report_clause(
                    Code::EHFilterNoEndfilter,
                    last.off,
                    format!(
                        "the filter of clause {} at IL_{:04x} ends with {}, not endfilter",
                        node.min_clause, node.start, last.op
                    ),
                    node.min_clause,
                    None,
                );
            }
        }
    }
}

/// Gives each instruction its innermost node, in one sweep over instructions and nodes: nodes
/// are sorted by start, outer before inner, and nest properly (the tree was built), so the
/// innermost node holding an instruction is the last one opened before it and not yet ended.
fn fill_regions(v: &mut Verifier) {
    let Verifier {
        region,
        nodes,
        open,
        n,
        ..
    } = v;
    let count = *n;
    region.clear();
    region.resize(count, NONE);
    open.clear();
    // Instructions before `at` have their region.
    let mut at = 0;
    for k in 0..=nodes.len() {
        // Up to where the next node starts (or the end of the code), run by run between the
        // ends of open nodes.
        let to = nodes.get(k).map_or(count, |node| node.first as usize);
        loop {
            while open
                .last()
                .is_some_and(|&o| nodes[o as usize].end_idx as usize <= at)
            {
                open.pop();
            }
            if at >= to {
                break;
            }
            let top = open.last().copied().unwrap_or(NONE);
            let end = open
                .last()
                .map_or(to, |&o| (nodes[o as usize].end_idx as usize).min(to));
            region[at..end].fill(top);
            at = end;
        }
        if k < nodes.len() {
            open.push(k as u32);
        }
    }
}
