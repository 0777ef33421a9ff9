//! Checks that a layout put everything where the IR says: used by property tests and the
//! `relax` fuzz target.

use super::method::{Method, Operand};
use crate::body::Body;

/// Whether `bytes` (a laid-out body of `m`) decodes to `m`'s instructions in order (branch forms
/// aside), every branch and `switch` reaches the instruction its label names — a wrapped short
/// displacement would not — and every region boundary sits where its label is.
pub fn placement(m: &Method, bytes: &[u8]) -> Result<(), String> {
    let body = Body::decode(bytes).map_err(|e| format!("layout output does not decode: {e}"))?;
    if body.len() != bytes.len() {
        return Err(format!(
            "body extent {} of {} bytes",
            body.len(),
            bytes.len()
        ));
    }
    // IR instruction index → offset of its first byte (prefixes included); one past the end for
    // labels bound at the end of the code.
    let mut starts = Vec::with_capacity(m.instrs.len() + 1);
    let mut decoded = Vec::with_capacity(m.instrs.len());
    let mut in_prefix = false;
    for i in body.instructions() {
        let i = i.map_err(|e| e.to_string())?;
        if !in_prefix {
            starts.push(i.offset as i64);
        }
        in_prefix = i.opcode.is_prefix();
        if !in_prefix {
            decoded.push(i);
        }
    }
    starts.push(body.code.len() as i64);
    if decoded.len() != m.instrs.len() {
        return Err(format!(
            "{} instructions laid out for {}",
            decoded.len(),
            m.instrs.len()
        ));
    }
    let at = |l: super::Label| -> Result<i64, String> {
        let p = m
            .position(l)
            .ok_or_else(|| format!("label {} unbound", l.0))?;
        starts
            .get(p)
            .copied()
            .ok_or_else(|| format!("label {} at {p}, past the end", l.0))
    };
    for (k, (d, ins)) in decoded.iter().zip(&m.instrs).enumerate() {
        if d.opcode.long_form() != ins.opcode.long_form() {
            return Err(format!(
                "instruction {k}: {} laid out as {}",
                ins.opcode, d.opcode
            ));
        }
        let want: Vec<i64> = match ins.operand {
            Operand::Target(l) => vec![at(l)?],
            Operand::Switch(t) => m
                .switch_of(t)
                .iter()
                .map(|&l| at(l))
                .collect::<Result<_, _>>()?,
            // No other operand is a target.
            _ => vec![],
        };
        let got: Vec<i64> = d.targets().collect();
        if got != want {
            return Err(format!(
                "instruction {k} ({}): targets {got:?}, labels at {want:?}",
                d.opcode
            ));
        }
    }
    let clauses: Vec<_> = body.clauses().collect();
    if clauses.len() != m.clauses.len() {
        return Err(format!(
            "{} clauses laid out for {}",
            clauses.len(),
            m.clauses.len()
        ));
    }
    for (n, (c, ir)) in clauses.iter().zip(&m.clauses).enumerate() {
        let laid = [
            c.try_offset as i64,
            c.try_end() as i64,
            c.handler_offset as i64,
            c.handler_end() as i64,
        ];
        let want = [
            at(ir.try_start)?,
            at(ir.try_end)?,
            at(ir.handler_start)?,
            at(ir.handler_end)?,
        ];
        if laid != want {
            return Err(format!(
                "clause {n}: regions at {laid:?}, labels at {want:?}"
            ));
        }
    }
    Ok(())
}
