//! The editable form of a method body: a flat list of instructions whose branch, `switch` and
//! `leave` targets, and whose exception-handling regions, are labels rather than byte offsets.
//!
//! Everything is kept in flat vectors indexed by `u32` so that lifting, editing and laying out a
//! body allocate a handful of vectors, not one per instruction. [`Instr`] is `Copy`: the variable
//! parts (switch tables, prefix runs) live in side tables of the [`Method`].

use crate::body::ClauseKind;
use crate::opcode::{Flow, Opcode, OperandKind};

/// A position in the instruction list, named so that edits can move it. A label is bound to an
/// instruction index: "just before instruction `i`"; `i == instrs.len()` is the end of the code
/// (where a region that closes the body ends).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Label(pub u32);

impl Label {
    /// The label's number, as an index into [`Method::labels`].
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Position of a label that has not been bound yet.
pub const UNBOUND: u32 = u32::MAX;

/// A run of prefixes in [`Method::prefixes`]; `len == 0` means none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Prefixes {
    /// Index of the first prefix.
    pub start: u32,
    /// How many.
    pub len: u32,
}

impl Prefixes {
    /// No prefix.
    pub const NONE: Prefixes = Prefixes { start: 0, len: 0 };

    /// Whether there is no prefix.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The run's indices in [`Method::prefixes`].
    pub fn range(&self) -> std::ops::Range<usize> {
        self.start as usize..self.start as usize + self.len as usize
    }
}

/// One prefix (`unaligned.`, `volatile.`, `tail.`, `constrained.`, `no.`, `readonly.`) with its
/// operand: the alignment byte, the `no.` flags byte, or the `constrained.` type token; 0 for
/// the others.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Prefix {
    /// The prefix.
    pub opcode: Opcode,
    /// Its operand (0 when it has none).
    pub value: u32,
}

/// A run of `switch` targets in [`Method::switch_targets`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SwitchTable {
    /// Index of the first target.
    pub start: u32,
    /// How many targets.
    pub len: u32,
}

impl SwitchTable {
    /// The table's indices in [`Method::switch_targets`].
    pub fn range(&self) -> std::ops::Range<usize> {
        self.start as usize..self.start as usize + self.len as usize
    }
}

/// An instruction's operand, with control-flow targets as labels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operand {
    /// InlineNone.
    None,
    /// ShortInlineI.
    Int8(i8),
    /// InlineI.
    Int32(i32),
    /// InlineI8.
    Int64(i64),
    /// ShortInlineR as raw IEEE bits.
    Float32(u32),
    /// InlineR as raw IEEE bits.
    Float64(u64),
    /// A local or argument index.
    Var(u16),
    /// A metadata token.
    Token(u32),
    /// The target of a branch or `leave`, short or long: layout picks the form.
    Target(Label),
    /// The targets of a `switch`.
    Switch(SwitchTable),
}

/// One instruction with its prefixes. For a branch, `opcode` is the form the instruction had (or
/// asked for); the [layout](mod@crate::ir::layout) may widen it, and shortens it only when told to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Instr {
    /// The opcode.
    pub opcode: Opcode,
    /// Its prefixes, in [`Method::prefixes`].
    pub prefixes: Prefixes,
    /// Its operand.
    pub operand: Operand,
}

impl Instr {
    /// An instruction without prefixes.
    pub const fn new(opcode: Opcode, operand: Operand) -> Instr {
        Instr {
            opcode,
            prefixes: Prefixes::NONE,
            operand,
        }
    }

    /// An instruction without an operand.
    pub const fn op(opcode: Opcode) -> Instr {
        Instr::new(opcode, Operand::None)
    }

    /// A branch or `leave` to `target`.
    pub const fn branch(opcode: Opcode, target: Label) -> Instr {
        Instr::new(opcode, Operand::Target(target))
    }

    /// Whether this is a branch or `leave` (short or long form).
    pub fn is_branch(&self) -> bool {
        self.opcode.operand_kind().is_branch()
    }

    /// How control leaves the instruction.
    pub fn flow(&self) -> Flow {
        self.opcode.flow()
    }

    /// Whether the operand is the right shape for the opcode.
    pub fn operand_fits(&self) -> bool {
        self.operand_fits_kind(self.opcode.operand_kind())
    }

    /// Whether the operand is the right shape for an opcode with operand kind `kind` (for
    /// callers that have the opcode's table entry already).
    pub(crate) fn operand_fits_kind(&self, kind: OperandKind) -> bool {
        match self.operand {
            Operand::Target(_) => kind.is_branch(),
            Operand::Switch(_) => kind == OperandKind::Switch,
            Operand::None => kind == OperandKind::None,
            Operand::Int8(_) => kind == OperandKind::ShortI,
            Operand::Int32(_) => kind == OperandKind::I,
            Operand::Int64(_) => kind == OperandKind::I8,
            Operand::Float32(_) => kind == OperandKind::ShortR,
            Operand::Float64(_) => kind == OperandKind::R,
            Operand::Var(v) => {
                matches!(kind, OperandKind::Local | OperandKind::Arg)
                    || (matches!(kind, OperandKind::ShortLocal | OperandKind::ShortArg)
                        && v <= 0xFF)
            }
            Operand::Token(_) => kind.is_token(),
        }
    }
}

/// One exception-handling clause with its regions as labels. Table order is kept: a clause
/// nested in another comes before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EhClause {
    /// Catch, filter, finally or fault (never [`ClauseKind::Invalid`]).
    pub kind: ClauseKind,
    /// Where the protected region starts.
    pub try_start: Label,
    /// Where it ends (exclusive).
    pub try_end: Label,
    /// Where the handler starts.
    pub handler_start: Label,
    /// Where it ends (exclusive).
    pub handler_end: Label,
    /// Start of the filter block (filter clauses only).
    pub filter_start: Option<Label>,
    /// The class token of a catch; for finally and fault, the stored field (normally 0), kept
    /// verbatim; unused for a filter.
    pub class_token: u32,
    /// Flag bits beyond the kind bits, kept verbatim (normally 0).
    pub extra_flags: u32,
}

impl EhClause {
    /// The clause's flags field.
    pub fn flags(&self) -> u32 {
        let kind = match self.kind {
            ClauseKind::Catch | ClauseKind::Invalid => 0,
            ClauseKind::Filter => crate::body::Clause::FLAG_FILTER,
            ClauseKind::Finally => crate::body::Clause::FLAG_FINALLY,
            ClauseKind::Fault => crate::body::Clause::FLAG_FAULT,
        };
        kind | self.extra_flags
    }

    /// Every label the clause uses: try start/end, handler start/end, and filter start.
    pub fn labels(&self) -> impl Iterator<Item = Label> + '_ {
        [
            self.try_start,
            self.try_end,
            self.handler_start,
            self.handler_end,
        ]
        .into_iter()
        .chain(self.filter_start)
    }
}

/// A non-EH extra data section (OptIL or unknown kind), carried through unchanged.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RawSection {
    /// Kind without the FatFormat and MoreSects bits.
    pub kind: u8,
    /// The section's data, after its header.
    pub data: Vec<u8>,
}

/// The header attributes a rewrite keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HeaderInfo {
    /// MaxStack as declared (8 for a tiny header).
    pub max_stack: u16,
    /// Whether locals are zeroed at entry (the InitLocals flag).
    pub init_locals: bool,
    /// StandAloneSig token of the locals, or 0.
    pub local_sig: u32,
}

impl Default for HeaderInfo {
    fn default() -> Self {
        HeaderInfo {
            max_stack: crate::body::TINY_MAX_STACK,
            init_locals: false,
            local_sig: 0,
        }
    }
}

/// An editable method body.
///
/// Build one from scratch the way a code generator does (`new_label`, `push`, `bind`), or lift
/// one from a decoded body with [`Method::from_body`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Method {
    /// The header attributes a rewrite keeps.
    pub header: HeaderInfo,
    /// The instructions, in order.
    pub instrs: Vec<Instr>,
    /// Label → instruction index it is bound before ([`UNBOUND`] until bound).
    pub labels: Vec<u32>,
    /// Prefix runs referenced by [`Instr::prefixes`].
    pub prefixes: Vec<Prefix>,
    /// Switch target runs referenced by [`Operand::Switch`].
    pub switch_targets: Vec<Label>,
    /// The exception-handling clauses, in table order.
    pub clauses: Vec<EhClause>,
    /// Extra data sections that are not EH tables, kept as they were.
    pub raw_sections: Vec<RawSection>,
}

impl Method {
    /// An empty method with this header.
    pub fn new(header: HeaderInfo) -> Method {
        Method {
            header,
            ..Method::default()
        }
    }

    /// A fresh, unbound label.
    pub fn new_label(&mut self) -> Label {
        self.labels.push(UNBOUND);
        Label(self.labels.len() as u32 - 1)
    }

    /// Binds `label` before the next instruction pushed (or at the end of the code).
    pub fn bind(&mut self, label: Label) {
        if let Some(slot) = self.labels.get_mut(label.index()) {
            *slot = self.instrs.len() as u32;
        }
    }

    /// A fresh label bound before the next instruction pushed.
    pub fn here(&mut self) -> Label {
        let l = self.new_label();
        self.bind(l);
        l
    }

    /// Appends an instruction; returns its index.
    pub fn push(&mut self, instr: Instr) -> usize {
        self.instrs.push(instr);
        self.instrs.len() - 1
    }

    /// Where `label` is bound: an instruction index, `instrs.len()` for the end, or `None` when
    /// unbound or unknown.
    pub fn position(&self, label: Label) -> Option<usize> {
        match self.labels.get(label.index()) {
            Some(&p) if p != UNBOUND => Some(p as usize),
            _ => None,
        }
    }

    /// Stores a run of prefixes for an instruction.
    pub fn add_prefixes(&mut self, prefixes: &[Prefix]) -> Prefixes {
        let start = self.prefixes.len() as u32;
        self.prefixes.extend_from_slice(prefixes);
        Prefixes {
            start,
            len: prefixes.len() as u32,
        }
    }

    /// The prefixes of an instruction (empty when they refer outside the side table).
    pub fn prefixes_of(&self, instr: &Instr) -> &[Prefix] {
        self.prefixes.get(instr.prefixes.range()).unwrap_or(&[])
    }

    /// Stores a `switch` table; use the result as `Operand::Switch`.
    pub fn add_switch(&mut self, targets: &[Label]) -> SwitchTable {
        let start = self.switch_targets.len() as u32;
        self.switch_targets.extend_from_slice(targets);
        SwitchTable {
            start,
            len: targets.len() as u32,
        }
    }

    /// The targets of a `switch` table (empty when it refers outside the side table).
    pub fn switch_of(&self, table: SwitchTable) -> &[Label] {
        self.switch_targets.get(table.range()).unwrap_or(&[])
    }

    /// Whether any instruction carries the given prefix.
    pub fn has_prefix(&self, opcode: Opcode) -> bool {
        self.instrs
            .iter()
            .any(|i| self.prefixes_of(i).iter().any(|p| p.opcode == opcode))
    }
}
