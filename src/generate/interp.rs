//! A small IL interpreter for the generated subset, to check that a rewrite keeps what a body
//! does: its result, its exception outcome and the calls it makes.
//!
//! It runs laid-out code (bytes and clauses), so the original and the rewritten body are run
//! the same way. Covered: `int32` constants, arithmetic, comparisons and branches, locals and
//! arguments, `switch`, calls to the synthetic module (a deterministic hash of the token and the
//! arguments, recorded in a trace; some callees throw), the synthetic exception (`newobj`,
//! `ldfld`, `throw`, `rethrow`) and exception handling per ECMA-335 II.19: a first pass finds
//! the handler, running filters; a second pass runs the finally and fault handlers of the
//! regions unwound; `leave` runs the finally handlers of the regions it exits. An exception
//! that leaves the method is assumed caught by its caller, so the method's finally and fault
//! handlers run for it too.
//!
//! Execution is bounded by a step budget; anything outside the subset ends the run as
//! [`Outcome::Stuck`] rather than panicking.

use super::valid::{Callee, EXCEPTION_CLASS, EXCEPTION_CTOR, EXCEPTION_VALUE};
use crate::body::{Clause, ClauseKind};
use crate::instr::{self, Instruction, Operand};
use crate::opcode::Opcode;

/// A stack slot: an `int32` or the synthetic exception carrying one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Value {
    /// An `int32`.
    Int(i32),
    /// The synthetic exception, carrying this value.
    Exception(i32),
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// `ret`, with the value for a non-void method.
    Returned(Option<i32>),
    /// The synthetic exception left the method carrying this value.
    Threw(i32),
    /// The step budget ran out.
    OutOfFuel,
    /// The code did something outside the subset (or invalid): why, and where.
    Stuck {
        /// The offset of the instruction.
        offset: u32,
        /// What was outside the subset.
        reason: String,
    },
}

/// One call to the synthetic module.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CallEvent {
    /// The callee's token.
    pub token: u32,
    /// The arguments passed.
    pub args: Vec<i32>,
}

/// The result of a run.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Run {
    /// How it ended.
    pub outcome: Outcome,
    /// The calls made, in order.
    pub trace: Vec<CallEvent>,
    /// Instructions executed.
    pub steps: u64,
    /// Arguments and locals when the run ended (locals never touched read as zero), so that
    /// the effects of handlers on them are observable too.
    pub args: Vec<i32>,
    /// See `args`.
    pub locals: Vec<i32>,
}

impl Run {
    /// Local `k` when the run ended.
    pub fn local(&self, k: usize) -> i32 {
        self.locals.get(k).copied().unwrap_or(0)
    }
}

/// What the code can call, and how long it may run.
#[derive(Clone, Copy, Debug)]
pub struct Env<'a> {
    /// The synthetic callees the code may call.
    pub callees: &'a [Callee],
    /// Instructions the run may execute before it is given up.
    pub fuel: u64,
}

/// Deepest nesting of handler runs (finally, fault, filter) before the run is called stuck.
const MAX_HANDLER_DEPTH: u32 = 256;

/// The deterministic result of a synthetic call.
pub fn call_hash(token: u32, args: &[i32]) -> u32 {
    let mut h: u32 = 0x811C_9DC5 ^ token;
    for &a in args {
        for b in a.to_le_bytes() {
            h = (h ^ b as u32).wrapping_mul(0x0100_0193);
        }
    }
    h ^ (h >> 15)
}

/// Whether a callee that may throw throws for this hash, and the value it throws.
fn call_throws(callee: &Callee, hash: u32) -> Option<i32> {
    (callee.may_throw && hash.is_multiple_of(4)).then_some((hash >> 8) as i32)
}

/// Runs `code` with its EH `clauses` on `args`. Locals start at zero.
pub fn run(code: &[u8], clauses: &[Clause], args: &[i32], env: &Env<'_>) -> Run {
    let mut instrs = Vec::new();
    for i in instr::Instructions::new(code) {
        match i {
            Ok(i) => instrs.push(i),
            Err(e) => {
                return Run {
                    outcome: Outcome::Stuck {
                        offset: e.offset(),
                        reason: format!("undecodable code: {e}"),
                    },
                    trace: Vec::new(),
                    steps: 0,
                    args: args.to_vec(),
                    locals: Vec::new(),
                };
            }
        }
    }
    let mut m = Machine {
        instrs,
        clauses,
        env,
        args: args.to_vec(),
        locals: Vec::new(),
        fuel: env.fuel,
        steps: 0,
        trace: Vec::new(),
        caught: vec![None; clauses.len()],
        depth: 0,
    };
    let outcome = match m.exec(0, Vec::new(), Mode::Body) {
        Exit::Return(v) => Outcome::Returned(v),
        Exit::Escaped(v) => Outcome::Threw(v),
        Exit::Abort(o) => o,
        Exit::EndFinally(_) | Exit::EndFilter(_) | Exit::FilterThrew => Outcome::Stuck {
            offset: 0,
            reason: "handler exit outside a handler".into(),
        },
    };
    Run {
        outcome,
        trace: m.trace,
        steps: m.steps,
        args: m.args,
        locals: m.locals,
    }
}

/// How a run of code (the body, a handler or a filter) ended.
enum Exit {
    Return(Option<i32>),
    /// `endfinally` of the finally or fault handler of this clause.
    EndFinally(usize),
    EndFilter(i32),
    /// An exception inside a filter: the filter declines (II.19).
    FilterThrew,
    /// An exception left the method, every finally and fault handler it unwound having run.
    Escaped(i32),
    Abort(Outcome),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Body,
    /// Running a filter: exceptions are not handled but end the filter.
    Filter,
}

struct Machine<'a> {
    instrs: Vec<Instruction<'a>>,
    clauses: &'a [Clause],
    env: &'a Env<'a>,
    args: Vec<i32>,
    locals: Vec<i32>,
    fuel: u64,
    steps: u64,
    trace: Vec<CallEvent>,
    /// The exception each catch or filter clause last received, for `rethrow`.
    caught: Vec<Option<i32>>,
    depth: u32,
}

fn stuck(offset: u32, reason: impl Into<String>) -> Exit {
    Exit::Abort(Outcome::Stuck {
        offset,
        reason: reason.into(),
    })
}

fn in_range(offset: u32, start: u32, length: u32) -> bool {
    offset >= start && (offset as u64) < start as u64 + length as u64
}

impl Machine<'_> {
    fn index_of(&self, offset: i64) -> Option<usize> {
        let o = u32::try_from(offset).ok()?;
        self.instrs.binary_search_by_key(&o, |i| i.offset).ok()
    }

    fn local(&mut self, k: u16) -> &mut i32 {
        if self.locals.len() <= k as usize {
            self.locals.resize(k as usize + 1, 0);
        }
        &mut self.locals[k as usize]
    }

    /// Runs code from instruction `pc` with `stack` until it returns, ends a handler or an
    /// exception leaves it.
    fn exec(&mut self, mut pc: usize, mut stack: Vec<Value>, mode: Mode) -> Exit {
        macro_rules! pop_int {
            ($off:expr) => {
                match stack.pop() {
                    Some(Value::Int(v)) => v,
                    Some(Value::Exception(_)) => return stuck($off, "an int32 expected"),
                    None => return stuck($off, "stack underflow"),
                }
            };
        }
        loop {
            if self.fuel == 0 {
                return Exit::Abort(Outcome::OutOfFuel);
            }
            self.fuel -= 1;
            self.steps += 1;
            let Some(ins) = self.instrs.get(pc).cloned() else {
                return stuck(u32::MAX, "control fell off the end");
            };
            let off = ins.offset;
            let next = ins.next_offset();
            let opcode = ins.opcode;
            let operand = ins.operand.clone();
            let mut jump: Option<i64> = None;
            use Opcode::*;
            match opcode {
                Nop | Tail | Volatile | Unaligned | Readonly | No => {}
                Ldc_I4_M1 | Ldc_I4_0 | Ldc_I4_1 | Ldc_I4_2 | Ldc_I4_3 | Ldc_I4_4 | Ldc_I4_5
                | Ldc_I4_6 | Ldc_I4_7 | Ldc_I4_8 => {
                    stack.push(Value::Int(opcode as i32 - Ldc_I4_0 as i32));
                }
                Ldc_I4_S | Ldc_I4 => {
                    let v = match operand {
                        Operand::Int8(v) => v as i32,
                        Operand::Int32(v) => v,
                        _ => return stuck(off, "bad constant"),
                    };
                    stack.push(Value::Int(v));
                }
                Ldarg_0 | Ldarg_1 | Ldarg_2 | Ldarg_3 | Ldarg_S | Ldarg => {
                    let k = var_index(opcode, &operand, Ldarg_0);
                    match self.args.get(k) {
                        Some(&v) => stack.push(Value::Int(v)),
                        None => return stuck(off, "no such argument"),
                    }
                }
                Starg_S | Starg => {
                    let k = var_index(opcode, &operand, Ldarg_0);
                    let v = pop_int!(off);
                    match self.args.get_mut(k) {
                        Some(slot) => *slot = v,
                        None => return stuck(off, "no such argument"),
                    }
                }
                Ldloc_0 | Ldloc_1 | Ldloc_2 | Ldloc_3 | Ldloc_S | Ldloc => {
                    let k = var_index(opcode, &operand, Ldloc_0);
                    let v = *self.local(k as u16);
                    stack.push(Value::Int(v));
                }
                Stloc_0 | Stloc_1 | Stloc_2 | Stloc_3 | Stloc_S | Stloc => {
                    let k = var_index(opcode, &operand, Stloc_0);
                    let v = pop_int!(off);
                    *self.local(k as u16) = v;
                }
                Dup => match stack.last() {
                    Some(&v) => stack.push(v),
                    None => return stuck(off, "stack underflow"),
                },
                Pop => {
                    if stack.pop().is_none() {
                        return stuck(off, "stack underflow");
                    }
                }
                Add | Sub | Mul | And | Or | Xor | Shl | Shr | Shr_Un | Div | Div_Un | Rem
                | Rem_Un | Ceq | Cgt | Cgt_Un | Clt | Clt_Un => {
                    let b = pop_int!(off);
                    let a = pop_int!(off);
                    match binary(opcode, a, b) {
                        Some(v) => stack.push(Value::Int(v)),
                        None => return stuck(off, "arithmetic exception"),
                    }
                }
                Neg => {
                    let a = pop_int!(off);
                    stack.push(Value::Int(a.wrapping_neg()));
                }
                Not => {
                    let a = pop_int!(off);
                    stack.push(Value::Int(!a));
                }
                Br_S | Br => jump = ins.branch_target(),
                Brtrue_S | Brtrue | Brfalse_S | Brfalse => {
                    let v = pop_int!(off);
                    if (v != 0) == matches!(opcode, Brtrue_S | Brtrue) {
                        jump = ins.branch_target();
                    }
                }
                Beq_S | Beq | Bne_Un_S | Bne_Un | Blt_S | Blt | Bge_S | Bge | Bgt_S | Bgt
                | Ble_S | Ble | Blt_Un_S | Blt_Un | Bge_Un_S | Bge_Un | Bgt_Un_S | Bgt_Un
                | Ble_Un_S | Ble_Un => {
                    let b = pop_int!(off);
                    let a = pop_int!(off);
                    if compare_branch(opcode.long_form(), a, b) {
                        jump = ins.branch_target();
                    }
                }
                Switch => {
                    let v = pop_int!(off);
                    if let Operand::Switch(t) = &operand
                        && let Some(d) = t.iter().nth(v as u32 as usize)
                    {
                        jump = Some(next + d as i64);
                    }
                }
                Call => {
                    let Operand::Token(token) = operand else {
                        return stuck(off, "bad call");
                    };
                    let Some(callee) = self.env.callees.iter().find(|c| c.token == token) else {
                        return stuck(off, format!("unknown callee {token:#010x}"));
                    };
                    let mut args = vec![0; callee.params as usize];
                    for slot in args.iter_mut().rev() {
                        *slot = pop_int!(off);
                    }
                    let hash = call_hash(token, &args);
                    self.trace.push(CallEvent { token, args });
                    if let Some(e) = call_throws(callee, hash) {
                        match self.throw(off, e, mode) {
                            Ok((to, s)) => {
                                pc = to;
                                stack = s;
                                continue;
                            }
                            Err(exit) => return exit,
                        }
                    }
                    if !callee.returns_void {
                        stack.push(Value::Int(hash as i32));
                    }
                }
                Newobj => {
                    if operand != Operand::Token(EXCEPTION_CTOR) {
                        return stuck(off, "newobj of an unknown constructor");
                    }
                    let v = pop_int!(off);
                    stack.push(Value::Exception(v));
                }
                Ldfld => {
                    if operand != Operand::Token(EXCEPTION_VALUE) {
                        return stuck(off, "ldfld of an unknown field");
                    }
                    match stack.pop() {
                        Some(Value::Exception(v)) => stack.push(Value::Int(v)),
                        _ => return stuck(off, "ldfld on a non-exception"),
                    }
                }
                Castclass => {
                    if operand != Operand::Token(EXCEPTION_CLASS) {
                        return stuck(off, "castclass to an unknown class");
                    }
                    match stack.last() {
                        Some(Value::Exception(_)) => {}
                        _ => return stuck(off, "castclass of a non-exception"),
                    }
                }
                Throw => {
                    let e = match stack.pop() {
                        Some(Value::Exception(v)) => v,
                        _ => return stuck(off, "throw of a non-exception"),
                    };
                    match self.throw(off, e, mode) {
                        Ok((to, s)) => {
                            pc = to;
                            stack = s;
                            continue;
                        }
                        Err(exit) => return exit,
                    }
                }
                Rethrow => {
                    let Some(e) = self.handled_exception(off) else {
                        return stuck(off, "rethrow outside a catch handler");
                    };
                    match self.throw(off, e, mode) {
                        Ok((to, s)) => {
                            pc = to;
                            stack = s;
                            continue;
                        }
                        Err(exit) => return exit,
                    }
                }
                Ret => {
                    return match stack.len() {
                        0 => Exit::Return(None),
                        1 => match stack[0] {
                            Value::Int(v) => Exit::Return(Some(v)),
                            Value::Exception(_) => stuck(off, "ret of an exception"),
                        },
                        _ => stuck(off, "ret with more than one value"),
                    };
                }
                Leave_S | Leave => {
                    let Some(target) = ins.branch_target() else {
                        return stuck(off, "bad leave");
                    };
                    stack.clear();
                    let Ok(t) = u32::try_from(target) else {
                        return stuck(off, "leave out of the code");
                    };
                    for (ci, c) in self.clauses.iter().enumerate() {
                        if c.kind() == ClauseKind::Finally
                            && in_range(off, c.try_offset, c.try_length)
                            && !in_range(t, c.try_offset, c.try_length)
                        {
                            match self.run_handler(ci) {
                                Exit::EndFinally(x) if x == ci => {}
                                other => return other,
                            }
                        }
                    }
                    jump = Some(target);
                }
                Endfinally => {
                    return match self.innermost_handler(off, |k| {
                        matches!(k, ClauseKind::Finally | ClauseKind::Fault)
                    }) {
                        Some(ci) => Exit::EndFinally(ci),
                        None => stuck(off, "endfinally outside a handler"),
                    };
                }
                Endfilter => {
                    let v = pop_int!(off);
                    return Exit::EndFilter(v);
                }
                _ => return stuck(off, format!("{opcode} is outside the interpreted subset")),
            }
            pc = match jump {
                Some(t) => match self.index_of(t) {
                    Some(i) => i,
                    None => return stuck(off, "branch to a non-instruction"),
                },
                None => pc + 1,
            };
        }
    }

    /// The innermost clause of a kind in `want` whose handler holds `offset`.
    fn innermost_handler(&self, offset: u32, want: impl Fn(ClauseKind) -> bool) -> Option<usize> {
        self.clauses
            .iter()
            .enumerate()
            .filter(|(_, c)| want(c.kind()) && in_range(offset, c.handler_offset, c.handler_length))
            .min_by_key(|(_, c)| c.handler_length)
            .map(|(i, _)| i)
    }

    /// The exception the catch handler around `offset` is handling.
    fn handled_exception(&self, offset: u32) -> Option<i32> {
        let ci = self.innermost_handler(offset, |k| {
            matches!(k, ClauseKind::Catch | ClauseKind::Filter)
        })?;
        self.caught[ci]
    }

    /// Runs the finally or fault handler of clause `ci`.
    fn run_handler(&mut self, ci: usize) -> Exit {
        let c = self.clauses[ci];
        let Some(start) = self.index_of(c.handler_offset as i64) else {
            return stuck(c.handler_offset, "handler start is not an instruction");
        };
        self.nested(start, Vec::new(), Mode::Body)
    }

    fn nested(&mut self, pc: usize, stack: Vec<Value>, mode: Mode) -> Exit {
        if self.depth >= MAX_HANDLER_DEPTH {
            return stuck(0, "handlers nested too deeply");
        }
        self.depth += 1;
        let exit = self.exec(pc, stack, mode);
        self.depth -= 1;
        exit
    }

    /// Throws exception `e` at `offset`: the first pass picks the handler (running filters), the
    /// second runs the finally and fault handlers unwound. Where to continue, or how this run
    /// ends.
    fn throw(&mut self, offset: u32, e: i32, mode: Mode) -> Result<(usize, Vec<Value>), Exit> {
        if mode == Mode::Filter {
            return Err(Exit::FilterThrew);
        }
        let mut chosen = None;
        for (ci, c) in self.clauses.iter().enumerate() {
            if !in_range(offset, c.try_offset, c.try_length) {
                continue;
            }
            match c.kind() {
                ClauseKind::Catch if c.class_or_filter == EXCEPTION_CLASS => {
                    chosen = Some(ci);
                    break;
                }
                ClauseKind::Filter => {
                    let Some(start) = self.index_of(c.class_or_filter as i64) else {
                        return Err(stuck(
                            c.class_or_filter,
                            "filter start is not an instruction",
                        ));
                    };
                    match self.nested(start, vec![Value::Exception(e)], Mode::Filter) {
                        Exit::EndFilter(v) if v != 0 => {
                            chosen = Some(ci);
                            break;
                        }
                        Exit::EndFilter(_) | Exit::FilterThrew => {}
                        Exit::Abort(o) => return Err(Exit::Abort(o)),
                        _ => return Err(stuck(c.class_or_filter, "filter ended oddly")),
                    }
                }
                _ => {}
            }
        }
        let unwound = chosen.unwrap_or(self.clauses.len());
        for ci in 0..unwound {
            let c = self.clauses[ci];
            if matches!(c.kind(), ClauseKind::Finally | ClauseKind::Fault)
                && in_range(offset, c.try_offset, c.try_length)
            {
                match self.run_handler(ci) {
                    Exit::EndFinally(x) if x == ci => {}
                    other => return Err(other),
                }
            }
        }
        match chosen {
            Some(ci) => {
                let c = self.clauses[ci];
                self.caught[ci] = Some(e);
                match self.index_of(c.handler_offset as i64) {
                    Some(h) => Ok((h, vec![Value::Exception(e)])),
                    None => Err(stuck(
                        c.handler_offset,
                        "handler start is not an instruction",
                    )),
                }
            }
            None => Err(Exit::Escaped(e)),
        }
    }
}

/// The local or argument index of a load or store (macro forms carry it in the opcode).
fn var_index(opcode: Opcode, operand: &Operand<'_>, first_macro: Opcode) -> usize {
    match operand {
        Operand::Var(v) => *v as usize,
        _ => (opcode as u16).wrapping_sub(first_macro as u16) as usize,
    }
}

fn binary(opcode: Opcode, a: i32, b: i32) -> Option<i32> {
    use Opcode::*;
    let (ua, ub) = (a as u32, b as u32);
    Some(match opcode {
        Add => a.wrapping_add(b),
        Sub => a.wrapping_sub(b),
        Mul => a.wrapping_mul(b),
        And => a & b,
        Or => a | b,
        Xor => a ^ b,
        Shl => a.checked_shl(ub)?,
        Shr => a.checked_shr(ub)?,
        Shr_Un => ua.checked_shr(ub)? as i32,
        Div => a.checked_div(b)?,
        Rem => a.checked_rem(b)?,
        Div_Un => ua.checked_div(ub)? as i32,
        Rem_Un => ua.checked_rem(ub)? as i32,
        Ceq => (a == b) as i32,
        Cgt => (a > b) as i32,
        Cgt_Un => (ua > ub) as i32,
        Clt => (a < b) as i32,
        Clt_Un => (ua < ub) as i32,
        _ => return None,
    })
}

fn compare_branch(long: Opcode, a: i32, b: i32) -> bool {
    use Opcode::*;
    let (ua, ub) = (a as u32, b as u32);
    match long {
        Beq => a == b,
        Bne_Un => a != b,
        Blt => a < b,
        Bge => a >= b,
        Bgt => a > b,
        Ble => a <= b,
        Blt_Un => ua < ub,
        Bge_Un => ua >= ub,
        Bgt_Un => ua > ub,
        Ble_Un => ua <= ub,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::valid::OTHER_CLASS;
    use crate::ir::{EhClause, Instr, Label, LayoutOptions, MaxStackPolicy, Method};
    use crate::verify::NoResolver;

    const F: u32 = 0x0600_0010;
    const G: u32 = 0x0600_0011;
    const CALLEES: &[Callee] = &[
        Callee {
            token: F,
            params: 0,
            returns_void: true,
            may_throw: false,
        },
        Callee {
            token: G,
            params: 0,
            returns_void: true,
            may_throw: false,
        },
    ];

    fn op(o: Opcode) -> Instr {
        Instr::op(o)
    }

    fn call(t: u32) -> Instr {
        Instr::new(Opcode::Call, crate::ir::Operand::Token(t))
    }

    fn throw(m: &mut Method, v: i8) {
        m.push(Instr::new(Opcode::Ldc_I4_S, crate::ir::Operand::Int8(v)));
        m.push(Instr::new(
            Opcode::Newobj,
            crate::ir::Operand::Token(EXCEPTION_CTOR),
        ));
        m.push(op(Opcode::Throw));
    }

    fn clause(kind: ClauseKind, t: (Label, Label), h: (Label, Label)) -> EhClause {
        EhClause {
            kind,
            try_start: t.0,
            try_end: t.1,
            handler_start: h.0,
            handler_end: h.1,
            filter_start: None,
            class_token: if kind == ClauseKind::Catch {
                EXCEPTION_CLASS
            } else {
                0
            },
            extra_flags: 0,
        }
    }

    fn exec(m: &Method) -> Run {
        let mut layout = crate::ir::Layout::new();
        let opts = LayoutOptions {
            max_stack: MaxStackPolicy::Declared,
            verify: false,
            ..LayoutOptions::default()
        };
        layout
            .run(m, &opts, &NoResolver, &mut Vec::new())
            .expect("lays out");
        let env = Env {
            callees: CALLEES,
            fuel: 10_000,
        };
        run(layout.code(), layout.clauses(), &[], &env)
    }

    fn tokens(r: &Run) -> Vec<u32> {
        r.trace.iter().map(|c| c.token).collect()
    }

    /// try { f(); throw 7 } finally { g() }: the finally runs, the exception leaves.
    #[test]
    fn finally_runs_when_an_exception_leaves() {
        let mut m = Method::default();
        let ts = m.here();
        m.push(call(F));
        throw(&mut m, 7);
        let te = m.here();
        m.push(call(G));
        m.push(op(Opcode::Endfinally));
        let he = m.here();
        m.push(op(Opcode::Ret));
        m.clauses
            .push(clause(ClauseKind::Finally, (ts, te), (te, he)));
        let r = exec(&m);
        assert_eq!(r.outcome, Outcome::Threw(7));
        assert_eq!(tokens(&r), [F, G]);
    }

    /// try { try { throw 5 } finally { g() } } filter { f(); 1 } { pop; leave }: the filter runs
    /// in the first pass, before the finally of the second.
    #[test]
    fn filters_run_before_finally_handlers() {
        let mut m = Method::default();
        let after = m.new_label();
        let outer = m.here();
        let inner = m.here();
        throw(&mut m, 5);
        let inner_end = m.here();
        m.push(call(G));
        m.push(op(Opcode::Endfinally));
        let fin_end = m.here();
        m.push(Instr::branch(Opcode::Leave, after));
        let filter = m.here();
        m.push(op(Opcode::Pop));
        m.push(call(F));
        m.push(op(Opcode::Ldc_I4_1));
        m.push(op(Opcode::Endfilter));
        let handler = m.here();
        m.push(op(Opcode::Pop));
        m.push(Instr::branch(Opcode::Leave, after));
        let handler_end = m.here();
        m.bind(after);
        m.push(op(Opcode::Ret));
        m.clauses.push(clause(
            ClauseKind::Finally,
            (inner, inner_end),
            (inner_end, fin_end),
        ));
        let mut f = clause(ClauseKind::Filter, (outer, filter), (handler, handler_end));
        f.filter_start = Some(filter);
        m.clauses.push(f);
        let r = exec(&m);
        assert_eq!(r.outcome, Outcome::Returned(None));
        assert_eq!(tokens(&r), [F, G]);
    }

    /// try { leave L } finally { g() } fault-free; try { leave L2 } fault { f() }: leave runs
    /// finally handlers only.
    #[test]
    fn leave_runs_finally_but_not_fault() {
        for (kind, want) in [(ClauseKind::Finally, vec![G]), (ClauseKind::Fault, vec![])] {
            let mut m = Method::default();
            let after = m.new_label();
            let ts = m.here();
            m.push(Instr::branch(Opcode::Leave_S, after));
            let te = m.here();
            m.push(call(G));
            m.push(op(Opcode::Endfinally));
            let he = m.here();
            m.bind(after);
            m.push(op(Opcode::Ret));
            m.clauses.push(clause(kind, (ts, te), (te, he)));
            let r = exec(&m);
            assert_eq!(r.outcome, Outcome::Returned(None));
            assert_eq!(tokens(&r), want, "{kind:?}");
        }
    }

    /// try { throw 3 } catch { pop; rethrow }, and a catch of another class: both let it out.
    #[test]
    fn rethrow_and_non_matching_catch() {
        for class in [EXCEPTION_CLASS, OTHER_CLASS] {
            let mut m = Method::default();
            let after = m.new_label();
            let ts = m.here();
            throw(&mut m, 3);
            let te = m.here();
            m.push(op(Opcode::Pop));
            m.push(op(Opcode::Rethrow));
            let he = m.here();
            m.bind(after);
            m.push(op(Opcode::Ret));
            let mut c = clause(ClauseKind::Catch, (ts, te), (te, he));
            c.class_token = class;
            m.clauses.push(c);
            assert_eq!(exec(&m).outcome, Outcome::Threw(3));
        }
    }

    /// A caught exception's value is readable, and code after the region continues.
    #[test]
    fn catch_reads_the_value() {
        let mut m = Method::default();
        let after = m.new_label();
        let ts = m.here();
        throw(&mut m, 42);
        let te = m.here();
        m.push(Instr::new(
            Opcode::Ldfld,
            crate::ir::Operand::Token(EXCEPTION_VALUE),
        ));
        m.push(op(Opcode::Stloc_0));
        m.push(Instr::branch(Opcode::Leave, after));
        let he = m.here();
        m.bind(after);
        m.push(op(Opcode::Ldloc_0));
        m.push(op(Opcode::Ret));
        m.clauses
            .push(clause(ClauseKind::Catch, (ts, te), (te, he)));
        assert_eq!(exec(&m).outcome, Outcome::Returned(Some(42)));
    }

    #[test]
    fn infinite_loops_run_out_of_fuel() {
        let mut m = Method::default();
        let l = m.here();
        m.push(Instr::branch(Opcode::Br_S, l));
        assert_eq!(exec(&m).outcome, Outcome::OutOfFuel);
    }

    #[test]
    fn odd_code_gets_stuck_instead_of_panicking() {
        let env = Env {
            callees: &[],
            fuel: 100,
        };
        for code in [
            &[0x26u8, 0x2A][..],
            &[0x00],
            &[0x28, 1, 0, 0, 6, 0x2A],
            &[0xFF],
        ] {
            let r = run(code, &[], &[], &env);
            assert!(matches!(r.outcome, Outcome::Stuck { .. }), "{r:?}");
        }
    }
}
