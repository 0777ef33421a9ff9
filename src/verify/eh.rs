//! Exception-handling table rules (II.19, II.25.4.6) and the region tree.
//!
//! Every try, handler and filter is an interval of byte offsets. Sorted by start (outer first
//! on ties), one sweep with a stack of open intervals finds partial overlaps, equal blocks,
//! nesting order and filter contents in O(k log k); the same sweep over the instructions gives
//! each its innermost region. Each node also gets shortcuts to the ancestors the transfer and
//! placement rules look for, so that no rule walks up a deep tree. Region checks elsewhere run
//! only when the table is sound.

use super::clauses::Clauses;
use super::{Code, NONE, Resolver, Verifier, flag};
use crate::body::{Block, Clause, ClauseKind};
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

/// A node of the region tree: 16 bytes, since a body may have a million of them. A try shared
/// by several clauses is one node.
///
/// Nodes are first written one per region in place, sorted, and the sweep that builds the
/// tree compacts them where they lie, so that no second list of regions is held beside them.
/// A node's bounds are not kept: its clause gives them ([`block`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct Node {
    /// The kind in the top [`KIND_BITS`] bits, the lowest clause index owning this block (of
    /// several for a shared try) below them: [`check`] takes no table of [`MAX_CLAUSES`] or
    /// more.
    kind_clause: u32,
    /// Two shortcuts up the tree, which ones by kind (read through [`stops`]): for a try, the
    /// nearest handler and finally above it; for a catch or filter handler, the nearest try
    /// and finally; for a finally or fault, the nearest try (and nothing); for a filter, its
    /// parent (and nothing), whose shortcuts are the filter's own. Before the tree is built,
    /// the block's byte bounds, so that sorting does not look up clauses.
    up: [u32; 2],
    /// The nearest try at or above this node that does not start at its first instruction,
    /// so that an entry there enters it in the middle (or [`NONE`]).
    pub try_entry_stop: u32,
}

// A node stays 16 bytes.
const _: () = assert!(std::mem::size_of::<Node>() == 16);

/// Bits of [`Node::kind_clause`] that hold the kind.
const KIND_BITS: u32 = 3;

/// Tables of this many clauses or more are not checked ([`Code::EHClauseOutOfRange`]), so that
/// a clause index fits beside a node's kind. A clause takes at least 12 bytes of its body, and
/// a body lies in a PE file, whose offsets are 32-bit: no body read from a file has more than
/// 2^32 / 12 (357,913,941) clauses, fewer than this.
pub(super) const MAX_CLAUSES: usize = 1 << (32 - KIND_BITS);

impl RegionKind {
    /// The kind numbered `k` by [`RegionKind::number`] (only those are packed; 5 and above
    /// are a fault).
    #[inline]
    pub(super) fn from_number(k: u32) -> RegionKind {
        match k {
            0 => RegionKind::Try,
            1 => RegionKind::Filter,
            2 => RegionKind::Catch,
            3 => RegionKind::FilterHandler,
            4 => RegionKind::Finally,
            _ => RegionKind::Fault,
        }
    }

    /// The kind's place in the declaration, so in the order.
    pub(super) fn number(self) -> u32 {
        match self {
            RegionKind::Try => 0,
            RegionKind::Filter => 1,
            RegionKind::Catch => 2,
            RegionKind::FilterHandler => 3,
            RegionKind::Finally => 4,
            RegionKind::Fault => 5,
        }
    }
}

impl Node {
    /// What kind of region the node is.
    #[inline]
    pub fn kind(&self) -> RegionKind {
        RegionKind::from_number(self.kind_clause >> (32 - KIND_BITS))
    }

    /// The lowest clause index owning this block.
    #[inline]
    pub fn min_clause(&self) -> u32 {
        self.kind_clause & (MAX_CLAUSES as u32 - 1)
    }

    /// Packs `kind` and `clause` (below [`MAX_CLAUSES`]).
    fn pack(kind: RegionKind, clause: u32) -> u32 {
        kind.number() << (32 - KIND_BITS) | clause & (MAX_CLAUSES as u32 - 1)
    }
}

/// The nearest nodes at or above a node that a walk up the tree for one rule stops at (each
/// [`NONE`] where there is none), so that no rule walks up a deep tree.
#[derive(Clone, Copy, Debug)]
pub(super) struct Stops {
    /// Not a try (a filter is looked through).
    pub handler: u32,
    /// A finally or fault, which a `leave` may not exit (a filter is looked through: the rules
    /// check it on their own).
    pub leave_stop: u32,
    /// A try.
    pub try_stop: u32,
}

impl Stops {
    const NONE: Stops = Stops {
        handler: NONE,
        leave_stop: NONE,
        try_stop: NONE,
    };
}

/// The [`Stops`] of node `k` (all [`NONE`] for [`NONE`]).
pub(super) fn stops(nodes: &[Node], k: u32) -> Stops {
    match nodes.get(k as usize) {
        Some(n) if n.kind() == RegionKind::Filter => match nodes.get(n.up[0] as usize) {
            // A filter holds no region, so its parent is none (in a sound tree).
            Some(p) if p.kind() != RegionKind::Filter => own_stops(p, n.up[0]),
            _ => Stops::NONE,
        },
        Some(n) => own_stops(n, k),
        None => Stops::NONE,
    }
}

/// [`stops`] of node `n`, numbered `k`, not a filter.
fn own_stops(n: &Node, k: u32) -> Stops {
    let [a, b] = n.up;
    match n.kind() {
        RegionKind::Try => Stops {
            handler: a,
            leave_stop: b,
            try_stop: k,
        },
        RegionKind::Catch | RegionKind::FilterHandler => Stops {
            handler: k,
            leave_stop: b,
            try_stop: a,
        },
        RegionKind::Finally | RegionKind::Fault => Stops {
            handler: k,
            leave_stop: k,
            try_stop: a,
        },
        RegionKind::Filter => Stops::NONE,
    }
}

/// The byte bounds of node `n`'s block, from its clause: the try, the handler or the filter.
#[inline(always)]
pub(super) fn block(n: &Node, clauses: &Clauses<'_>) -> (u32, u32) {
    // Every bound was checked to lie inside the code (under 4 GiB) before nodes are made.
    let which = match n.kind() {
        RegionKind::Try => Block::Try,
        RegionKind::Filter => Block::Filter,
        RegionKind::Catch | RegionKind::FilterHandler | RegionKind::Finally | RegionKind::Fault => {
            Block::Handler
        }
    };
    clauses
        .block(n.min_clause() as usize, which)
        .unwrap_or((NONE, NONE))
}

impl Node {
    /// A region of clause `clause` before the sweep.
    fn region(kind: RegionKind, clause: u32, clauses: &Clauses<'_>) -> Node {
        let mut node = Node {
            kind_clause: Node::pack(kind, clause),
            up: [NONE; 2],
            try_entry_stop: NONE,
        };
        let (start, end) = block(&node, clauses);
        node.up = [start, end];
        node
    }

    /// The byte bounds of a node before the sweep.
    fn bounds(&self) -> (u32, u32) {
        (self.up[0], self.up[1])
    }
}

/// Checks the table and, if it is sound, builds `v.nodes` and `v.region`. Returns whether the
/// table is sound enough for region rules.
pub(super) fn check<R: Resolver + ?Sized>(
    v: &mut Verifier,
    len: usize,
    clauses: &Clauses<'_>,
    r: &R,
) -> bool {
    if clauses.is_empty() {
        return true;
    }
    if clauses.len() >= MAX_CLAUSES {
        too_many_clauses(v, clauses.len());
        return false;
    }
    let mut ok = true;
    for (ci, c) in clauses.iter().enumerate() {
        ok &= check_clause(v, len, ci, &c, r);
    }
    if !ok || v.stop() {
        return false;
    }
    let mut nodes = std::mem::take(&mut v.nodes);
    nodes.clear();
    // Exactly as many as the clauses' regions, not the next power of two.
    let filters = clauses
        .iter()
        .filter(|c| c.kind() == ClauseKind::Filter)
        .count();
    nodes.reserve_exact(2 * clauses.len() + filters);
    for (ci, c) in clauses.iter().enumerate() {
        let clause = ci as u32;
        let handler = match c.kind() {
            ClauseKind::Catch => RegionKind::Catch,
            ClauseKind::Filter => RegionKind::FilterHandler,
            ClauseKind::Finally => RegionKind::Finally,
            _ => RegionKind::Fault,
        };
        nodes.push(Node::region(RegionKind::Try, clause, clauses));
        nodes.push(Node::region(handler, clause, clauses));
        if c.kind() == ClauseKind::Filter {
            nodes.push(Node::region(RegionKind::Filter, clause, clauses));
        }
    }
    // By kind, then clause: the packed number orders them so.
    nodes.sort_unstable_by_key(|x| {
        let (start, end) = x.bounds();
        (start, Reverse(end), x.kind_clause)
    });
    v.nodes = nodes;
    let ok = build_tree(v, clauses);
    // Scratch of the sweep: the passes after it do not need it, but its buffer may serve as
    // the region table's.
    hand_over(&mut v.try_node, &mut v.region);
    if !ok {
        v.nodes.clear();
        return false;
    }
    assign_regions(v, clauses);
    release_large(&mut v.open);
    true
}

/// Reports a table of [`MAX_CLAUSES`] or more, which no body read from a file has.
#[cold]
fn too_many_clauses(v: &mut Verifier, count: usize) {
    let first = MAX_CLAUSES as u32;
    v.report_clause(
        Code::EHClauseOutOfRange,
        0,
        format!(
            "clause {first}: {count} clauses, more than a body in a PE file can hold (a clause \
             takes at least 12 bytes of a file under 4 GiB); the table is not checked"
        ),
        first,
        None,
    );
}

/// Empties `from` and `to`, gives `to` the larger of their buffers, and lets the other go if
/// larger than [`KEEP_LARGEST`]: a buffer freed while another as large is made elsewhere leaves
/// a hole the allocator may keep resident beside it, and one list's room often fits the next.
pub(super) fn hand_over(from: &mut Vec<u32>, to: &mut Vec<u32>) {
    if from.capacity() > to.capacity() {
        std::mem::swap(from, to);
    }
    from.clear();
    to.clear();
    release_large(from);
}

/// Lets go of `list` if it is larger than [`KEEP_LARGEST`].
pub(super) fn release_large<T>(list: &mut Vec<T>) {
    if list.capacity() > KEEP_LARGEST {
        *list = Vec::new();
    }
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

/// The sweep over the regions in `v.nodes`, sorted by start (outer first on ties): compacts
/// them in place into the tree's nodes (a node is written at or before the slot its region was
/// read from), each linked to the nodes above it. The open regions, innermost last, are the
/// ancestors of the next node. Returns false on any finding.
fn build_tree(v: &mut Verifier, clauses: &Clauses<'_>) -> bool {
    let mut ok = true;
    v.open.clear();
    v.try_node.clear();
    v.try_node.resize(clauses.len(), NONE);
    let mut written = 0;
    for k in 0..v.nodes.len() {
        let x = v.nodes[k];
        let (start, end) = x.bounds();
        while let Some(&top) = v.open.last() {
            if block(&v.nodes[top as usize], clauses).1 <= start {
                v.open.pop();
            } else {
                break;
            }
        }
        let parent = v.open.last().copied().unwrap_or(NONE);
        if parent != NONE {
            let p = v.nodes[parent as usize];
            let (p_start, p_end) = block(&p, clauses);
            if p_start == start && p_end == end {
                ok &= join_equal(v, parent, &x, clauses);
                continue;
            }
            if end > p_end {
                v.report_clause(
                    Code::EHOverlap,
                    start,
                    format!(
                        "clause {}: its {} [IL_{start:04x}, IL_{end:04x}) overlaps the {} \
                         [IL_{p_start:04x}, IL_{p_end:04x}) of clause {}",
                        x.min_clause(),
                        x.kind(),
                        p.kind(),
                        p.min_clause()
                    ),
                    x.min_clause(),
                    Some(p.min_clause()),
                );
                ok = false;
                continue;
            }
            ok &= check_nesting(v, parent, &x, clauses);
        }
        let me = written as u32;
        if x.kind() == RegionKind::Try {
            v.try_node[x.min_clause() as usize] = me;
        }
        v.nodes[written] = linked(x, &v.nodes[..written], parent, clauses);
        v.open.push(me);
        written += 1;
    }
    v.nodes.truncate(written);
    ok
}

/// `x` with its shortcuts up the tree from those of `parent` (an index into `nodes`, or
/// [`NONE`]).
fn linked(mut x: Node, nodes: &[Node], parent: u32, clauses: &Clauses<'_>) -> Node {
    let p = stops(nodes, parent);
    x.up = match x.kind() {
        RegionKind::Try => [p.handler, p.leave_stop],
        RegionKind::Catch | RegionKind::FilterHandler => [p.try_stop, p.leave_stop],
        RegionKind::Finally | RegionKind::Fault => [p.try_stop, NONE],
        RegionKind::Filter => [parent, NONE],
    };
    // An entry at this node's first instruction passes the tries that start there too; every
    // node above a parent that starts elsewhere starts before this one.
    x.try_entry_stop = match nodes.get(parent as usize) {
        Some(pn) if block(pn, clauses).0 == block(&x, clauses).0 => pn.try_entry_stop,
        Some(_) => p.try_stop,
        None => NONE,
    };
    x
}

/// A shared try with a finally or fault among its clauses: a try node's clauses are all
/// catches and filters once a second joins it, so its lowest clause tells.
fn has_finally(node: &Node, clauses: &Clauses<'_>) -> bool {
    node.kind() == RegionKind::Try && is_finally(clauses, node.min_clause())
}

/// Whether clause `clause` is a finally or fault clause.
fn is_finally(clauses: &Clauses<'_>, clause: u32) -> bool {
    clauses
        .get(clause as usize)
        .is_some_and(|c| matches!(c.kind(), ClauseKind::Finally | ClauseKind::Fault))
}

/// `x` is the same block as node `n` (the innermost open one): allowed only for a try shared
/// by catch and filter clauses.
fn join_equal(v: &mut Verifier, n: u32, x: &Node, clauses: &Clauses<'_>) -> bool {
    let node = v.nodes[n as usize];
    let start = block(x, clauses).0;
    let clause = x.min_clause();
    let (code, msg) = match (node.kind(), x.kind()) {
        (RegionKind::Try, RegionKind::Try) => {
            let fin = is_finally(clauses, clause);
            if !(fin || has_finally(&node, clauses)) {
                // The open node below `n` is its parent.
                let parent = v.open.len().checked_sub(2).map_or(NONE, |k| v.open[k]);
                let node = &mut v.nodes[n as usize];
                node.kind_clause = Node::pack(node.kind(), node.min_clause().min(clause));
                v.try_node[clause as usize] = n;
                // The newcomer must also come before whatever encloses the shared try.
                return parent == NONE || check_order(v, parent, x, start);
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
    let other = node.min_clause();
    v.report_clause(
        code,
        start,
        format!("clause {clause}: {msg} (clause {other})"),
        clause,
        Some(other),
    );
    false
}

/// Rules for `x` nested directly in node `parent` (the innermost open one).
fn check_nesting(v: &mut Verifier, parent: u32, x: &Node, clauses: &Clauses<'_>) -> bool {
    let p = v.nodes[parent as usize];
    let start = block(x, clauses).0;
    let clause = x.min_clause();
    if p.kind() == RegionKind::Filter {
        v.report_clause(
            Code::EHFilterContainsRegion,
            start,
            format!(
                "clause {clause}: its {} lies inside the filter of clause {} at IL_{:04x}",
                x.kind(),
                p.min_clause(),
                block(&p, clauses).0
            ),
            clause,
            Some(p.min_clause()),
        );
        return false;
    }
    let own = if x.kind() == RegionKind::Try {
        p.kind() != RegionKind::Try && p.min_clause() == clause
    } else {
        v.try_node[clause as usize] == parent
    };
    if own {
        v.report_clause(
            Code::EHOverlap,
            start,
            format!(
                "clause {clause}: its {} lies inside its own {}",
                x.kind(),
                p.kind()
            ),
            clause,
            None,
        );
        return false;
    }
    if x.kind().is_handler_like() {
        // Two handlers (or filters) starting together, however nested, are ambiguous. The
        // nodes around `x` are the open ones, innermost last.
        let nodes = &v.nodes;
        let same = v
            .open
            .iter()
            .rev()
            .map(|&q| nodes[q as usize])
            .take_while(|n| block(n, clauses).0 == start)
            .find(|n| n.kind().is_handler_like());
        if let Some(n) = same {
            v.report_clause(
                Code::EHDuplicateHandlerStart,
                start,
                format!(
                    "clause {clause}: its {} starts where the {} of clause {} starts",
                    x.kind(),
                    n.kind(),
                    n.min_clause()
                ),
                clause,
                Some(n.min_clause()),
            );
            return false;
        }
    }
    check_order(v, parent, x, start)
}

/// Inner clauses come first: `x`, nested in `parent`, must belong to an earlier clause.
fn check_order(v: &mut Verifier, parent: u32, x: &Node, start: u32) -> bool {
    let p = v.nodes[parent as usize];
    if x.min_clause() > p.min_clause() {
        v.report_clause(
            Code::EHOrderInnerAfterOuter,
            start,
            format!(
                "clause {} is nested in the {} of clause {} but listed after it",
                x.min_clause(),
                p.kind(),
                p.min_clause()
            ),
            x.min_clause(),
            Some(p.min_clause()),
        );
        return false;
    }
    true
}

/// Turns each node's bounds into instruction indices, gives each instruction its innermost
/// node, marks try and handler starts; checks that filters end in `endfilter`.
fn assign_regions(v: &mut Verifier, clauses: &Clauses<'_>) {
    for k in 0..v.nodes.len() {
        let node = v.nodes[k];
        let first = v.first_of(&node, clauses);
        v.ins[first as usize].flags |= flag::JOIN
            | match node.kind() {
                RegionKind::Try => flag::TRY_START,
                RegionKind::Finally | RegionKind::Fault => flag::HANDLER_START,
                RegionKind::Catch | RegionKind::Filter | RegionKind::FilterHandler => {
                    flag::HANDLER_START | flag::RECEIVES_EXCEPTION
                }
            };
    }
    fill_regions(v, clauses);
    for k in 0..v.nodes.len() {
        let node = v.nodes[k];
        if node.kind() == RegionKind::Filter {
            let end = v.end_of(&node, clauses) as usize;
            let last = v.ins[end - 1];
            if last.op() != Opcode::Endfilter {
                v.report_clause(
                    Code::EHFilterNoEndfilter,
                    v.offset_of(end - 1),
                    format!(
                        "the filter of clause {} at IL_{:04x} ends with {}, not endfilter",
                        node.min_clause(),
                        block(&node, clauses).0,
                        last.op()
                    ),
                    node.min_clause(),
                    None,
                );
            }
        }
    }
}

/// Gives each instruction its innermost node, in one sweep over instructions and nodes: nodes
/// are sorted by start, outer before inner, and nest properly (the tree was built), so the
/// innermost node holding an instruction is the last one opened before it and not yet ended.
fn fill_regions(v: &mut Verifier, clauses: &Clauses<'_>) {
    let mut region = std::mem::take(&mut v.region);
    let mut open = std::mem::take(&mut v.open);
    let count = v.n;
    let nodes = &v.nodes;
    let end_of = |o: u32| v.end_of(&nodes[o as usize], clauses) as usize;
    region.clear();
    region.resize(count, NONE);
    open.clear();
    // Instructions before `at` have their region.
    let mut at = 0;
    for k in 0..=nodes.len() {
        // Up to where the next node starts (or the end of the code), run by run between the
        // ends of open nodes.
        let to = nodes
            .get(k)
            .map_or(count, |node| v.first_of(node, clauses) as usize);
        loop {
            // The innermost open node that has not ended, and its end.
            let mut top = (NONE, to);
            while let Some(&o) = open.last() {
                let end = end_of(o);
                if end > at {
                    top = (o, end.min(to));
                    break;
                }
                open.pop();
            }
            if at >= to {
                break;
            }
            region[at..top.1].fill(top.0);
            at = top.1;
        }
        if k < nodes.len() {
            open.push(k as u32);
        }
    }
    v.region = region;
    v.open = open;
}
