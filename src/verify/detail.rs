//! What a finding says beyond its offset: the clauses of the EH table it concerns, and, for the
//! stack rules at a join, every way control arrives there with the depth each brings.
//!
//! Details are filled in only when a finding is reported (the arrivals by a pass of their own,
//! [`super::arrivals`], that runs only then), so verifying a clean body costs nothing more.

use serde::Serialize;

/// More about a finding than its offset. Empty for most codes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub struct Detail {
    /// The clause of the EH table (its index in table order) the finding concerns: the clause
    /// whose region is out of place, or whose region a transfer enters or leaves.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clause: Option<u32>,
    /// The other clause involved: the one the first overlaps, nests in, shares a block with or
    /// is listed after.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub other_clause: Option<u32>,
    /// For a stack rule at a join (`PathStackDepth`, `BackwardBranch`, `TryNonEmptyStack`):
    /// how control reaches the instruction, in code order, at most [`MAX_ARRIVALS`].
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub arrivals: Vec<Arrival>,
    /// Arrivals beyond [`MAX_ARRIVALS`], not listed.
    #[serde(skip_serializing_if = "is_zero")]
    pub more_arrivals: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Detail {
    /// Whether there is nothing beyond the offset.
    pub fn is_empty(&self) -> bool {
        self.clause.is_none() && self.other_clause.is_none() && self.arrivals.is_empty()
    }

    /// The detail of a finding about clause `clause` (and `other`).
    pub fn clause(clause: u32, other: Option<u32>) -> Detail {
        Detail {
            clause: Some(clause),
            other_clause: other,
            ..Detail::default()
        }
    }
}

/// Arrivals listed per finding; a `switch`-heavy join may have thousands.
pub const MAX_ARRIVALS: usize = 16;

/// One way control reaches an instruction, with the stack depth it brings there (the depth the
/// dataflow computed on the path it followed first through the instruction it comes from).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Arrival {
    /// How control arrives.
    pub kind: ArrivalKind,
    /// IL offset of the instruction control comes from: the branch, or the instruction before
    /// that falls through; for the method entry 0, for a handler entry the handler's start.
    pub from: u32,
    /// The stack depth it brings.
    pub depth: u32,
}

/// How control reaches an instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ArrivalKind {
    /// The method's first instruction, with an empty stack.
    Entry,
    /// From the instruction before, falling through.
    FallThrough,
    /// By a branch, `leave` or `switch` targeting it.
    Branch,
    /// As the first instruction of a handler or filter: the exception object for a catch,
    /// filter or filter handler, nothing for a finally or fault.
    Handler,
}

impl ArrivalKind {
    /// A short name, as reports print it.
    pub fn as_str(self) -> &'static str {
        match self {
            ArrivalKind::Entry => "entry",
            ArrivalKind::FallThrough => "falls through",
            ArrivalKind::Branch => "branch",
            ArrivalKind::Handler => "handler entry",
        }
    }
}

impl Arrival {
    /// The arrival in words: `depth 1 by the branch at IL_0004`.
    pub fn describe(&self) -> String {
        let d = self.depth;
        match self.kind {
            ArrivalKind::Entry => format!("depth {d} at the method entry"),
            ArrivalKind::FallThrough => {
                format!("depth {d} falling through from IL_{:04x}", self.from)
            }
            ArrivalKind::Branch => format!("depth {d} by the branch at IL_{:04x}", self.from),
            ArrivalKind::Handler => format!("depth {d} as a handler's entry"),
        }
    }
}
