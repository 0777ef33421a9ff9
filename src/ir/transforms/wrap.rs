//! The whole body in a new protected region.

use super::{Outcome, SkipReason, TransformOptions, apply_new_locals, ldloc, stloc};
use crate::body::ClauseKind;
use crate::ir::edit::{Regions, Targets};
use crate::ir::method::{EhClause, Instr, Method};
use crate::opcode::Opcode;

/// The whole body in a try with a finally that does nothing (`endfinally`).
pub fn wrap_finally(m: &mut Method, opts: &TransformOptions) -> Result<Outcome, SkipReason> {
    wrap(m, opts, ClauseKind::Finally)
}

/// The whole body in a try with a catch of `opts.catch_type` that rethrows.
pub fn wrap_catch(m: &mut Method, opts: &TransformOptions) -> Result<Outcome, SkipReason> {
    // A catch clause names a TypeDef, TypeRef or TypeSpec; 0 (none given) is no type at all.
    if !matches!(opts.catch_type >> 24, 0x01 | 0x02 | 0x1B) || opts.catch_type & 0x00FF_FFFF == 0 {
        return Err(SkipReason::NoCatchType {
            token: opts.catch_type,
        });
    }
    wrap(m, opts, ClauseKind::Catch)
}

/// Each `ret` becomes `leave` to one exit block after the handler (storing the return value in
/// the given local first); the exit block reloads it and returns.
fn wrap(m: &mut Method, opts: &TransformOptions, kind: ClauseKind) -> Result<Outcome, SkipReason> {
    if m.instrs.is_empty() {
        return Ok(Outcome::Unchanged);
    }
    // Reasons no caller input can lift come first.
    for (index, ins) in m.instrs.iter().enumerate() {
        if m.prefixes_of(ins).iter().any(|p| p.opcode == Opcode::Tail) {
            return Err(SkipReason::TailCallInsideER { index });
        }
        if ins.opcode == Opcode::Jmp {
            return Err(SkipReason::JmpInsideER { index });
        }
    }
    if let Some(index) = localloc_in_handler(m) {
        return Err(SkipReason::LocallocInHandler { index });
    }

    super::check_snippet(&opts.wrap_entry, true)?;
    super::check_snippet(&opts.wrap_exit, true)?;
    // Then what the caller can supply.
    let returns_void = opts.returns_void.ok_or(SkipReason::NeedsSignature)?;
    let local = match (returns_void, opts.return_local) {
        (true, _) => None,
        (false, Some(l)) => Some(l),
        (false, None) => return Err(SkipReason::NeedsNewLocal),
    };
    if local.is_some() {
        apply_new_locals(m, opts);
    }
    let try_start = m.new_label();
    m.labels[try_start.index()] = 0;
    let mut ed = m.edit();
    let exit = ed.new_label();
    let (try_end, handler_start, handler_end) = (ed.new_label(), ed.new_label(), ed.new_label());

    let leave = Instr::branch(Opcode::Leave_S, exit);
    let redirect: Vec<Instr> = match local {
        Some(l) => vec![stloc(l), leave],
        None => vec![leave],
    };
    let rets: Vec<usize> = (0..ed.method().instrs.len())
        .filter(|&i| ed.method().instrs[i].opcode == Opcode::Ret)
        .collect();
    for i in rets {
        ed.replace(i, &redirect)?;
    }
    let handler: Vec<Instr> = match kind {
        ClauseKind::Finally => {
            let mut code = opts.wrap_exit.clone();
            code.push(Instr::op(Opcode::Endfinally));
            code
        }
        _ => vec![Instr::op(Opcode::Pop), Instr::op(Opcode::Rethrow)],
    };
    let h = ed.append(&handler);
    ed.bind(h, try_end)?;
    ed.bind(h, handler_start)?;
    let mut exit_code = Vec::with_capacity(2);
    if let Some(l) = local {
        exit_code.push(ldloc(l));
    }
    exit_code.push(Instr::op(Opcode::Ret));
    let x = ed.append(&exit_code);
    ed.bind(x, handler_end)?;
    ed.bind(x, exit)?;
    if !opts.wrap_entry.is_empty() {
        // Before the try, which starts at the original first instruction.
        ed.insert_before(0, &opts.wrap_entry, Targets::StayOnOld, Regions::Outside)?;
    }
    ed.add_clause(EhClause {
        kind,
        try_start,
        try_end,
        handler_start,
        handler_end,
        filter_start: None,
        class_token: if kind == ClauseKind::Catch {
            opts.catch_type
        } else {
            0
        },
        extra_flags: 0,
    });
    ed.commit()?;
    Ok(Outcome::Changed)
}

/// The first `localloc` inside a handler or filter of the existing clauses.
fn localloc_in_handler(m: &Method) -> Option<usize> {
    if !m.instrs.iter().any(|i| i.opcode == Opcode::Localloc) {
        return None;
    }
    // How many handler and filter spans hold each instruction, as a running sum of +1 where
    // each starts and -1 where it ends: one pass, however many clauses and `localloc`s.
    let n = m.instrs.len();
    let mut delta = vec![0i64; n + 1];
    for c in &m.clauses {
        let start = c.filter_start.unwrap_or(c.handler_start);
        if let (Some(s), Some(e)) = (m.position(start), m.position(c.handler_end))
            && s < e
        {
            delta[s] += 1;
            delta[e] -= 1;
        }
    }
    let mut held = 0;
    (0..n).find(|&i| {
        held += delta[i];
        m.instrs[i].opcode == Opcode::Localloc && held > 0
    })
}
