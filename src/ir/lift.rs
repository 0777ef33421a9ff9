//! Lifting a decoded body into an [`ir::Method`](Method): byte displacements and clause offsets
//! become labels. A body whose targets or clause boundaries are not instruction starts cannot be
//! expressed with labels, so it is refused with the offset at fault (the verifier rejects such
//! bodies anyway).

use super::method::*;
use crate::body::{Body, ClauseKind, SectionContent};
use crate::instr::{self, InstrError};
use crate::opcode::Opcode;

/// Why a body cannot be lifted. Offsets are IL offsets from the start of the code.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IrError {
    #[error("{0}")]
    Decode(#[from] InstrError),
    #[error("IL_{offset:04x}: {opcode} targets {target}, which is not the start of an instruction")]
    TargetNotInstruction {
        offset: u32,
        opcode: Opcode,
        target: i64,
    },
    #[error("clause {clause}: {field} {offset} is not the start of an instruction")]
    ClauseBoundary {
        clause: usize,
        field: &'static str,
        offset: u64,
    },
    #[error("clause {clause}: flags {flags:#x} name no handler kind")]
    InvalidClauseKind { clause: usize, flags: u32 },
    #[error("IL_{offset:04x}: prefix {opcode} is not followed by an instruction")]
    DanglingPrefix { offset: u32, opcode: Opcode },
    #[error("code of {0} bytes is too large to lift")]
    TooLarge(usize),
}

/// Marks "no label yet" in the per-position table.
const NO_LABEL: u32 = u32::MAX;

impl Method {
    /// Lifts a decoded body: instructions with their prefixes, targets as labels, clauses as
    /// label ranges, the header's attributes and raw sections kept.
    pub fn from_body(body: &Body<'_>) -> Result<Method, IrError> {
        let mut m = Method::default();
        Lifter::default().lift(body, &mut m)?;
        Ok(m)
    }
}

/// Lifts bodies, keeping its scratch buffers (and the target method's) between bodies.
#[derive(Debug, Default)]
pub struct Lifter {
    /// Byte offset where each IR instruction starts (its first prefix).
    starts: Vec<u32>,
    /// Absolute byte targets, indexed by the provisional labels the operands hold until they
    /// are resolved.
    raw_targets: Vec<i64>,
    label_at: Vec<u32>,
    resolved: Vec<Label>,
}

impl Lifter {
    /// Lifts `body` into `m`, replacing its contents (and reusing its allocations). On error
    /// `m` holds a partial lift.
    pub fn lift(&mut self, body: &Body<'_>, m: &mut Method) -> Result<(), IrError> {
        let code = body.code;
        if code.len() >= u32::MAX as usize {
            return Err(IrError::TooLarge(code.len()));
        }
        m.header = HeaderInfo {
            max_stack: body.max_stack(),
            init_locals: body.init_locals(),
            local_sig: body.local_sig(),
        };
        m.instrs.clear();
        m.labels.clear();
        m.prefixes.clear();
        m.switch_targets.clear();
        m.clauses.clear();
        m.raw_sections.clear();
        let starts = &mut self.starts;
        let raw_targets = &mut self.raw_targets;
        starts.clear();
        raw_targets.clear();
        let mut run_start: Option<(u32, u32)> = None; // (byte offset, index into prefixes)
        m.instrs.reserve(code.len() / 2 + 1);
        let mut iter = instr::Instructions::new(code);
        while let Some(i) = iter.next() {
            let i = i?;
            // The iterator knows each length from its decode table.
            let pos = iter.position();
            // Every prefix is a two-byte opcode: test the cheap half first.
            if i.opcode.code() >> 8 == 0xFE && i.opcode.is_prefix() {
                let value = match i.operand {
                    instr::Operand::Int8(v) => v as u8 as u32,
                    instr::Operand::Token(t) => t,
                    _ => 0,
                };
                if run_start.is_none() {
                    run_start = Some((i.offset, m.prefixes.len() as u32));
                }
                m.prefixes.push(Prefix {
                    opcode: i.opcode,
                    value,
                });
                continue;
            }
            let (start, prefixes) = match run_start.take() {
                Some((offset, first)) => (
                    offset,
                    Prefixes {
                        start: first,
                        len: m.prefixes.len() as u32 - first,
                    },
                ),
                None => (i.offset, Prefixes::NONE),
            };
            let next = pos as i64;
            let operand = match i.operand {
                instr::Operand::None => Operand::None,
                instr::Operand::Int8(v) => Operand::Int8(v),
                instr::Operand::Int32(v) => Operand::Int32(v),
                instr::Operand::Int64(v) => Operand::Int64(v),
                instr::Operand::Float32(v) => Operand::Float32(v),
                instr::Operand::Float64(v) => Operand::Float64(v),
                instr::Operand::Var(v) => Operand::Var(v),
                instr::Operand::Token(v) => Operand::Token(v),
                instr::Operand::ShortBranch(d) => {
                    raw_targets.push(next + d as i64);
                    Operand::Target(Label(raw_targets.len() as u32 - 1))
                }
                instr::Operand::Branch(d) => {
                    raw_targets.push(next + d as i64);
                    Operand::Target(Label(raw_targets.len() as u32 - 1))
                }
                instr::Operand::Switch(ref t) => {
                    let first = m.switch_targets.len() as u32;
                    for d in t.iter() {
                        raw_targets.push(next + d as i64);
                        m.switch_targets.push(Label(raw_targets.len() as u32 - 1));
                    }
                    Operand::Switch(SwitchTable {
                        start: first,
                        len: t.len() as u32,
                    })
                }
            };
            starts.push(start);
            m.instrs.push(Instr {
                opcode: i.opcode,
                prefixes,
                operand,
            });
        }
        if let Some((offset, first)) = run_start {
            return Err(IrError::DanglingPrefix {
                offset,
                opcode: m.prefixes[first as usize].opcode,
            });
        }
        let n = m.instrs.len();
        let index_of = |offset: i64| -> Option<usize> {
            if offset == code.len() as i64 {
                return Some(n);
            }
            let o = u32::try_from(offset).ok()?;
            starts.binary_search(&o).ok()
        };

        if !raw_targets.is_empty() {
            // One label per targeted instruction, shared by every branch to it.
            let label_at = &mut self.label_at;
            label_at.clear();
            label_at.resize(n + 1, NO_LABEL);
            let resolved = &mut self.resolved;
            resolved.clear();
            for (k, &target) in raw_targets.iter().enumerate() {
                // Targets at the very end of the code are not instructions either.
                let idx = index_of(target).filter(|&i| i < n);
                let Some(idx) = idx else {
                    let (offset, opcode) = owner_of(m, starts, k);
                    return Err(IrError::TargetNotInstruction {
                        offset,
                        opcode,
                        target,
                    });
                };
                if label_at[idx] == NO_LABEL {
                    label_at[idx] = m.labels.len() as u32;
                    m.labels.push(idx as u32);
                }
                resolved.push(Label(label_at[idx]));
            }
            for ins in &mut m.instrs {
                if let Operand::Target(l) = &mut ins.operand {
                    *l = resolved[l.index()];
                }
            }
            for l in &mut m.switch_targets {
                *l = resolved[l.index()];
            }
        }

        for s in &body.sections {
            match &s.content {
                SectionContent::Eh { clauses, .. } => {
                    for c in clauses {
                        let clause = m.clauses.len();
                        let kind = c.kind();
                        if kind == ClauseKind::Invalid {
                            return Err(IrError::InvalidClauseKind {
                                clause,
                                flags: c.flags,
                            });
                        }
                        let mut at = |field: &'static str, offset: u64| -> Result<Label, IrError> {
                            let idx = i64::try_from(offset).ok().and_then(index_of).ok_or(
                                IrError::ClauseBoundary {
                                    clause,
                                    field,
                                    offset,
                                },
                            )?;
                            m.labels.push(idx as u32);
                            Ok(Label(m.labels.len() as u32 - 1))
                        };
                        let try_start = at("try start", c.try_offset as u64)?;
                        let try_end = at("try end", c.try_end())?;
                        let handler_start = at("handler start", c.handler_offset as u64)?;
                        let handler_end = at("handler end", c.handler_end())?;
                        let filter_start = if kind == ClauseKind::Filter {
                            Some(at("filter start", c.class_or_filter as u64)?)
                        } else {
                            None
                        };
                        m.clauses.push(EhClause {
                            kind,
                            try_start,
                            try_end,
                            handler_start,
                            handler_end,
                            filter_start,
                            class_token: if kind == ClauseKind::Filter {
                                0
                            } else {
                                c.class_or_filter
                            },
                            extra_flags: c.flags & !0x7,
                        });
                    }
                }
                SectionContent::Raw(data) => m.raw_sections.push(RawSection {
                    kind: s.kind & crate::body::SECT_KIND_MASK,
                    data: data.to_vec(),
                }),
            }
        }
        Ok(())
    }
}

/// The offset and opcode of the instruction that owns provisional target `k`.
fn owner_of(m: &Method, starts: &[u32], k: usize) -> (u32, Opcode) {
    let mut seen = 0usize;
    for (idx, ins) in m.instrs.iter().enumerate() {
        let count = match ins.operand {
            Operand::Target(_) => 1,
            Operand::Switch(t) => t.len as usize,
            _ => 0,
        };
        if k < seen + count {
            return (starts[idx], ins.opcode);
        }
        seen += count;
    }
    (0, Opcode::Nop)
}
