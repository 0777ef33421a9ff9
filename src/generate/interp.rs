//! A small IL interpreter for the generated subset, to check that a rewrite keeps what a body
//! does: its result, its exception outcome and the calls it makes.
//!
//! It runs laid-out code (bytes and clauses), so the original and the rewritten body are run
//! the same way. Covered: `int32` and `int64` constants, arithmetic (wrapping; a division by
//! zero or of MinValue by -1 gets the run stuck: the generator never divides so),
//! conversions between them, comparisons and branches, locals and arguments, `int32&`
//! arguments and addresses of locals and arguments (`ldind.i4`, `stind.i4`), `switch`, calls to the synthetic module (a deterministic hash of the token and the
//! arguments, recorded in a trace; some callees throw), the synthetic exception (`newobj`,
//! `ldfld`, `throw`, `rethrow`) and exception handling per ECMA-335 II.19: a first pass finds
//! the handler, running filters; a second pass runs the finally and fault handlers of the
//! regions unwound; `leave` runs the finally handlers of the regions it exits. An exception
//! that leaves the method is assumed caught by its caller, so the method's finally and fault
//! handlers run for it too.
//!
//! The value type `S` is a [`Value::Struct`] of its two fields, copied whole by loads and
//! stores; the class `C` and boxed `S`s live on a heap ([`Obj`]) and a [`Value::Object`] is a
//! reference to one, so two locals holding the same `C` see each other's stores, and `box`
//! makes a copy that later stores to the original do not reach. Reading a field of a null `C`
//! gets the run stuck (the generator never makes one).
//!
//! Execution is bounded by a step budget; anything outside the subset ends the run as
//! [`Outcome::Stuck`] rather than panicking.

use super::valid::{
    ArgType, CLASS_CTOR, CLASS_TYPE, CLASS_X, Callee, EXCEPTION_CLASS, EXCEPTION_CTOR,
    EXCEPTION_VALUE, STRUCT_A, STRUCT_B, STRUCT_TYPE, ValType,
};
use crate::body::{Clause, ClauseKind};
use crate::instr::{self, Instruction, Operand};
use crate::opcode::Opcode;

/// A stack slot, argument or local: an `int32`, an `int64`, the synthetic exception carrying
/// an `int32`, or the address of a storage cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Value {
    /// An `int32`.
    Int(i32),
    /// An `int64`.
    Long(i64),
    /// The synthetic exception, carrying this value.
    Exception(i32),
    /// A managed pointer to a storage cell of the run (an argument, a local, or the caller's
    /// `int32` behind an `int32&` argument), by its index.
    Ref(usize),
    /// A value of the value type `S`: its fields.
    Struct {
        /// `S::a`.
        a: i32,
        /// `S::b`.
        b: i64,
    },
    /// A reference to an object of the run's heap (a `C` or a boxed `S`), by its index.
    Object(usize),
    /// The null reference (the zero of a `C` local).
    Null,
    /// A managed pointer to the `S` inside a boxed one on the heap (what `unbox` gives).
    BoxRef(usize),
}

impl Value {
    /// The zero of a value type.
    pub fn zero(t: ValType) -> Value {
        match t {
            ValType::I4 => Value::Int(0),
            ValType::I8 => Value::Long(0),
            ValType::Struct => Value::Struct { a: 0, b: 0 },
            ValType::Class => Value::Null,
        }
    }
}

/// An object of the run's heap.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Obj {
    /// A `C`, with its field `x`.
    Class {
        /// `C::x`.
        x: i32,
    },
    /// A boxed `S`, with its fields.
    Boxed {
        /// `S::a`.
        a: i32,
        /// `S::b`.
        b: i64,
    },
}

/// What a method returned: a number (an `int32` widened), an `S`'s fields, or the field of
/// the `C` it returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReturnValue {
    /// An `int32` or `int64`.
    Number(i64),
    /// An `S`.
    Struct {
        /// `S::a`.
        a: i32,
        /// `S::b`.
        b: i64,
    },
    /// A `C`, by the value of its field `x`.
    Object {
        /// `C::x`.
        x: i32,
    },
}

impl std::fmt::Display for ReturnValue {
    /// As a result line shows it: `42`, `S 3 -7`, `C 5`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReturnValue::Number(v) => write!(f, "{v}"),
            ReturnValue::Struct { a, b } => write!(f, "S {a} {b}"),
            ReturnValue::Object { x } => write!(f, "C {x}"),
        }
    }
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// `ret`, with the value for a non-void method.
    Returned(Option<ReturnValue>),
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
    /// the effects of handlers on them are observable too. An `int32&` argument is a
    /// [`Value::Ref`] to its cell, whose final value is in [`Run::refs`].
    pub args: Vec<Value>,
    /// See `args`.
    pub locals: Vec<Value>,
    /// The final value of the `int32` behind each `int32&` argument, in argument order.
    pub refs: Vec<i32>,
    /// The objects the run made (and its `C` arguments), which [`Value::Object`]s index.
    pub heap: Vec<Obj>,
}

impl Run {
    /// Local `k` when the run ended (`int32` zero past the ones the code uses).
    pub fn local(&self, k: usize) -> Value {
        self.locals.get(k).copied().unwrap_or(Value::Int(0))
    }
}

/// What the code can call, its signature and locals, and how long it may run.
#[derive(Clone, Copy, Debug)]
pub struct Env<'a> {
    /// The synthetic callees the code may call.
    pub callees: &'a [Callee],
    /// Instructions the run may execute before it is given up.
    pub fuel: u64,
    /// The types of the arguments (`int32` past the end).
    pub args: &'a [ArgType],
    /// The types of the locals, which start at their zero (`int32` past the end).
    pub locals: &'a [ValType],
    /// The generated methods the code may call, by [`Peer::token`](super::valid::Peer::token).
    pub peers: &'a [PeerCode<'a>],
}

/// A generated method the code may call: its signature and, when the program has it, its
/// laid-out body and environment. Without a body it is a stub that returns zero and writes
/// nothing (the method was dropped from the program, or its signature changed).
#[derive(Clone, Copy, Debug)]
pub struct PeerCode<'a> {
    /// The token calls to it use.
    pub token: u32,
    /// Its argument types.
    pub args: &'a [ArgType],
    /// Its return type, `None` for void.
    pub ret: Option<ValType>,
    /// Its code, clauses and environment.
    pub body: Option<(&'a [u8], &'a [Clause], Env<'a>)>,
}

impl<'a> Env<'a> {
    /// Calls to `callees`, `int32` arguments and locals.
    pub fn new(callees: &'a [Callee], fuel: u64) -> Self {
        Env {
            callees,
            fuel,
            args: &[],
            locals: &[],
            peers: &[],
        }
    }
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

/// Runs `code` with its EH `clauses` on `args` (typed by [`Env::args`]; for an `int32&`
/// argument, the initial value of the `int32` it points to). Locals start at zero.
pub fn run(code: &[u8], clauses: &[Clause], args: &[i64], env: &Env<'_>) -> Run {
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
                    args: Vec::new(),
                    locals: Vec::new(),
                    refs: Vec::new(),
                    heap: Vec::new(),
                };
            }
        }
    }
    // The caller's `int32`s behind the `int32&` arguments come first, then the arguments,
    // then the locals.
    let mut cells = Vec::new();
    let mut ref_cells = Vec::new();
    let mut heap = Vec::new();
    let mut arg_values = Vec::with_capacity(args.len());
    for (k, &a) in args.iter().enumerate() {
        let t = env.args.get(k).copied().unwrap_or_default();
        arg_values.push(match t {
            ArgType::Val(ValType::I4) => Value::Int(a as i32),
            ArgType::Val(ValType::I8) => Value::Long(a),
            // As the program's runner builds them from the input.
            ArgType::Val(ValType::Struct) => Value::Struct { a: a as i32, b: a },
            ArgType::Val(ValType::Class) => {
                heap.push(Obj::Class { x: a as i32 });
                Value::Object(heap.len() - 1)
            }
            ArgType::RefI4 => {
                cells.push(Value::Int(a as i32));
                ref_cells.push(cells.len() - 1);
                Value::Ref(cells.len() - 1)
            }
        });
    }
    let arg_base = cells.len();
    cells.extend(arg_values);
    let local_base = cells.len();
    let nlocals = local_count(&instrs).max(env.locals.len());
    cells.extend((0..nlocals).map(|k| Value::zero(env.locals.get(k).copied().unwrap_or_default())));
    let mut m = Machine {
        instrs,
        clauses,
        env,
        cells,
        arg_base,
        nargs: args.len(),
        local_base,
        nlocals,
        fuel: env.fuel,
        steps: 0,
        trace: Vec::new(),
        caught: vec![None; clauses.len()],
        depth: 0,
        heap,
    };
    let outcome = match m.exec(0, Vec::new(), Mode::Body) {
        Exit::Return(None) => Outcome::Returned(None),
        Exit::Return(Some(v)) => match m.returned(v) {
            Some(r) => Outcome::Returned(Some(r)),
            None => Outcome::Stuck {
                offset: 0,
                reason: format!("returned {v:?}"),
            },
        },
        Exit::Escaped(v) => Outcome::Threw(v),
        Exit::Abort(o) => o,
        Exit::EndFinally(_) | Exit::EndFilter(_) | Exit::FilterThrew => Outcome::Stuck {
            offset: 0,
            reason: "handler exit outside a handler".into(),
        },
    };
    let refs = ref_cells
        .iter()
        .map(|&c| match m.cells[c] {
            Value::Int(v) => v,
            _ => 0,
        })
        .collect();
    Run {
        outcome,
        trace: m.trace,
        steps: m.steps,
        args: m.cells[arg_base..local_base].to_vec(),
        locals: m.cells[local_base..].to_vec(),
        refs,
        heap: m.heap,
    }
}

/// One more than the highest local index the code names (0 without locals).
fn local_count(instrs: &[Instruction<'_>]) -> usize {
    use Opcode::*;
    instrs
        .iter()
        .filter_map(|i| match i.opcode {
            Ldloc_0 | Ldloc_1 | Ldloc_2 | Ldloc_3 | Stloc_0 | Stloc_1 | Stloc_2 | Stloc_3
            | Ldloc_S | Ldloc | Stloc_S | Stloc | Ldloca_S | Ldloca => {
                Some(var_index(i.opcode, &i.operand))
            }
            // Every other opcode names no local.
            _ => None,
        })
        .map(|k| k + 1)
        .max()
        .unwrap_or(0)
}

/// How a run of code (the body, a handler or a filter) ended.
enum Exit {
    Return(Option<Value>),
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
    /// Every storage cell of the run: the caller's `int32`s behind `int32&` arguments, the
    /// arguments, the locals.
    cells: Vec<Value>,
    arg_base: usize,
    nargs: usize,
    local_base: usize,
    nlocals: usize,
    fuel: u64,
    steps: u64,
    trace: Vec<CallEvent>,
    /// The exception each catch or filter clause last received, for `rethrow`.
    caught: Vec<Option<i32>>,
    depth: u32,
    /// The objects made so far, which [`Value::Object`] and [`Value::BoxRef`] index.
    heap: Vec<Obj>,
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

impl<'a> Machine<'a> {
    /// A value a method returns as its caller sees it (`None`: no value a method returns).
    fn returned(&self, v: Value) -> Option<ReturnValue> {
        Some(match v {
            Value::Int(v) => ReturnValue::Number(i64::from(v)),
            Value::Long(v) => ReturnValue::Number(v),
            Value::Struct { a, b } => ReturnValue::Struct { a, b },
            Value::Object(o) => match self.heap.get(o)? {
                Obj::Class { x } => ReturnValue::Object { x: *x },
                Obj::Boxed { .. } => return None,
            },
            Value::Exception(_) | Value::Ref(_) | Value::Null | Value::BoxRef(_) => return None,
        })
    }

    /// The `S` a pointer points to (a cell holding one, or a boxed one).
    fn struct_at(&self, p: Value) -> Option<(i32, i64)> {
        match p {
            Value::Ref(c) => match self.cells.get(c)? {
                Value::Struct { a, b } => Some((*a, *b)),
                _ => None,
            },
            Value::BoxRef(o) => match self.heap.get(o)? {
                Obj::Boxed { a, b } => Some((*a, *b)),
                Obj::Class { .. } => None,
            },
            _ => None,
        }
    }

    /// Stores `s` where the pointer `p` points, which must hold an `S`.
    fn set_struct_at(&mut self, p: Value, s: (i32, i64)) -> bool {
        self.struct_at(p).is_some()
            && match p {
                Value::Ref(c) => {
                    self.cells[c] = Value::Struct { a: s.0, b: s.1 };
                    true
                }
                Value::BoxRef(o) => {
                    self.heap[o] = Obj::Boxed { a: s.0, b: s.1 };
                    true
                }
                _ => false,
            }
    }

    /// The field `x` of the `C` a value refers to.
    fn class_x(&self, v: Value) -> Option<i32> {
        match v {
            Value::Object(o) => match self.heap.get(o)? {
                Obj::Class { x } => Some(*x),
                Obj::Boxed { .. } => None,
            },
            _ => None,
        }
    }

    fn index_of(&self, offset: i64) -> Option<usize> {
        let o = u32::try_from(offset).ok()?;
        self.instrs.binary_search_by_key(&o, |i| i.offset).ok()
    }

    /// The cell of argument `k`.
    fn arg_cell(&self, k: usize) -> Option<usize> {
        (k < self.nargs).then_some(self.arg_base + k)
    }

    /// The cell of local `k`.
    fn local_cell(&self, k: usize) -> Option<usize> {
        (k < self.nlocals).then_some(self.local_base + k)
    }

    /// Runs code from instruction `pc` with `stack` until it returns, ends a handler or an
    /// exception leaves it.
    fn exec(&mut self, mut pc: usize, mut stack: Vec<Value>, mode: Mode) -> Exit {
        macro_rules! pop_int {
            ($off:expr) => {
                match stack.pop() {
                    Some(Value::Int(v)) => v,
                    Some(_) => return stuck($off, "an int32 expected"),
                    None => return stuck($off, "stack underflow"),
                }
            };
        }
        macro_rules! pop {
            ($off:expr) => {
                match stack.pop() {
                    Some(v) => v,
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
            let token = match &operand {
                Operand::Token(t) => *t,
                // Token 0 names nothing: an operand that is no token matches no arm below.
                _ => 0,
            };
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
                        // The decoder gives these opcodes no other operand.
                        _ => return stuck(off, "bad constant"),
                    };
                    stack.push(Value::Int(v));
                }
                Ldnull => stack.push(Value::Null),
                Ldc_I8 => {
                    let Operand::Int64(v) = operand else {
                        return stuck(off, "bad constant");
                    };
                    stack.push(Value::Long(v));
                }
                Ldarg_0 | Ldarg_1 | Ldarg_2 | Ldarg_3 | Ldarg_S | Ldarg | Ldarga_S | Ldarga
                | Starg_S | Starg => {
                    let k = var_index(opcode, &operand);
                    let Some(c) = self.arg_cell(k) else {
                        return stuck(off, "no such argument");
                    };
                    match opcode {
                        Ldarga_S | Ldarga => stack.push(Value::Ref(c)),
                        Starg_S | Starg => self.cells[c] = pop!(off),
                        _ => stack.push(self.cells[c]),
                    }
                }
                Ldloc_0 | Ldloc_1 | Ldloc_2 | Ldloc_3 | Ldloc_S | Ldloc | Ldloca_S | Ldloca
                | Stloc_0 | Stloc_1 | Stloc_2 | Stloc_3 | Stloc_S | Stloc => {
                    let k = var_index(opcode, &operand);
                    let Some(c) = self.local_cell(k) else {
                        return stuck(off, "no such local");
                    };
                    match opcode {
                        Ldloca_S | Ldloca => stack.push(Value::Ref(c)),
                        Stloc_0 | Stloc_1 | Stloc_2 | Stloc_3 | Stloc_S | Stloc => {
                            self.cells[c] = pop!(off);
                        }
                        _ => stack.push(self.cells[c]),
                    }
                }
                Ldind_I4 => match pop!(off) {
                    Value::Ref(c) => match self.cells.get(c) {
                        Some(&Value::Int(v)) => stack.push(Value::Int(v)),
                        _ => return stuck(off, "ldind.i4 of a cell not holding an int32"),
                    },
                    _ => return stuck(off, "ldind.i4 of a non-pointer"),
                },
                Stind_I4 => {
                    let v = pop_int!(off);
                    match pop!(off) {
                        Value::Ref(c) if matches!(self.cells.get(c), Some(Value::Int(_))) => {
                            self.cells[c] = Value::Int(v);
                        }
                        _ => return stuck(off, "stind.i4 to a non-pointer"),
                    }
                }
                Conv_I4 | Conv_I8 | Conv_U8 => {
                    let v = match (opcode, pop!(off)) {
                        (Conv_I4, Value::Int(v)) => Value::Int(v),
                        (Conv_I4, Value::Long(v)) => Value::Int(v as i32),
                        (Conv_I8, Value::Int(v)) => Value::Long(i64::from(v)),
                        (Conv_U8, Value::Int(v)) => Value::Long(i64::from(v as u32)),
                        (_, Value::Long(v)) => Value::Long(v),
                        _ => return stuck(off, "conversion of a non-number"),
                    };
                    stack.push(v);
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
                    let b = pop!(off);
                    let a = pop!(off);
                    let shift = matches!(opcode, Shl | Shr | Shr_Un);
                    let v = match (a, b) {
                        (Value::Int(a), Value::Int(b)) => binary(opcode, a, b).map(Value::Int),
                        (Value::Long(a), Value::Int(b)) if shift => {
                            binary64(opcode, a, i64::from(b)).map(Value::Long)
                        }
                        (Value::Long(a), Value::Long(b)) if !shift => {
                            let compare = matches!(opcode, Ceq | Cgt | Cgt_Un | Clt | Clt_Un);
                            binary64(opcode, a, b).map(|v| {
                                if compare {
                                    Value::Int(v as i32)
                                } else {
                                    Value::Long(v)
                                }
                            })
                        }
                        // References compare by identity: `ceq`, and `cgt.un` with null (the
                        // `!= null` test); their order is the runtime's own.
                        (Value::Object(_) | Value::Null, Value::Object(_) | Value::Null)
                            if opcode == Ceq || (opcode == Cgt_Un && b == Value::Null) =>
                        {
                            Some(Value::Int((a == b) as i32 ^ (opcode == Cgt_Un) as i32))
                        }
                        _ => return stuck(off, "operands of different types"),
                    };
                    match v {
                        Some(v) => stack.push(v),
                        None => return stuck(off, "arithmetic exception"),
                    }
                }
                Neg | Not => {
                    let v = match pop!(off) {
                        Value::Int(a) if opcode == Neg => Value::Int(a.wrapping_neg()),
                        Value::Int(a) => Value::Int(!a),
                        Value::Long(a) if opcode == Neg => Value::Long(a.wrapping_neg()),
                        Value::Long(a) => Value::Long(!a),
                        _ => return stuck(off, "negation of a non-number"),
                    };
                    stack.push(v);
                }
                Br_S | Br => jump = ins.branch_target(),
                Brtrue_S | Brtrue | Brfalse_S | Brfalse => {
                    let v = match pop!(off) {
                        Value::Int(v) => i64::from(v),
                        Value::Long(v) => v,
                        Value::Object(_) => 1,
                        Value::Null => 0,
                        _ => return stuck(off, "brtrue of a non-number"),
                    };
                    if (v != 0) == matches!(opcode, Brtrue_S | Brtrue) {
                        jump = ins.branch_target();
                    }
                }
                Beq_S | Beq | Bne_Un_S | Bne_Un | Blt_S | Blt | Bge_S | Bge | Bgt_S | Bgt
                | Ble_S | Ble | Blt_Un_S | Blt_Un | Bge_Un_S | Bge_Un | Bgt_Un_S | Bgt_Un
                | Ble_Un_S | Ble_Un => {
                    let (a, b, wide) = match (pop!(off), pop!(off)) {
                        (Value::Int(b), Value::Int(a)) => (i64::from(a), i64::from(b), false),
                        (Value::Long(b), Value::Long(a)) => (a, b, true),
                        _ => return stuck(off, "operands of different types"),
                    };
                    if compare_branch(opcode.long_form(), a, b, wide) {
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
                    let env: &'a Env<'a> = self.env;
                    if let Some(peer) = env.peers.iter().find(|p| p.token == token) {
                        let mut args = vec![Value::Int(0); peer.args.len()];
                        for slot in args.iter_mut().rev() {
                            *slot = pop!(off);
                        }
                        match self.call_peer(peer, args) {
                            Exit::Return(v) => {
                                if let (Some(_), Some(v)) = (peer.ret, v) {
                                    stack.push(v);
                                }
                            }
                            Exit::Escaped(e) => match self.throw(off, e, mode) {
                                Ok((to, s)) => {
                                    pc = to;
                                    stack = s;
                                    continue;
                                }
                                Err(exit) => return exit,
                            },
                            Exit::Abort(o) => return Exit::Abort(o),
                            _ => return stuck(off, "a called method ended oddly"),
                        }
                        pc += 1;
                        continue;
                    }
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
                    let v = pop_int!(off);
                    match token {
                        EXCEPTION_CTOR => stack.push(Value::Exception(v)),
                        CLASS_CTOR => {
                            self.heap.push(Obj::Class { x: v });
                            stack.push(Value::Object(self.heap.len() - 1));
                        }
                        _ => return stuck(off, "newobj of an unknown constructor"),
                    }
                }
                Ldfld => {
                    let on = pop!(off);
                    let v = match (token, on) {
                        (EXCEPTION_VALUE, Value::Exception(v)) => Value::Int(v),
                        (STRUCT_A | STRUCT_B, Value::Struct { a, b }) => {
                            if token == STRUCT_A {
                                Value::Int(a)
                            } else {
                                Value::Long(b)
                            }
                        }
                        (t @ (STRUCT_A | STRUCT_B), p) => match self.struct_at(p) {
                            Some((a, _)) if t == STRUCT_A => Value::Int(a),
                            Some((_, b)) => Value::Long(b),
                            None => {
                                return stuck(off, "ldfld of S on neither an S nor its address");
                            }
                        },
                        (CLASS_X, v) => match self.class_x(v) {
                            Some(x) => Value::Int(x),
                            None => return stuck(off, "ldfld of C::x on a non-C (or null)"),
                        },
                        _ => return stuck(off, "ldfld of an unknown field or on a wrong object"),
                    };
                    stack.push(v);
                }
                Stfld => {
                    let v = pop!(off);
                    let on = pop!(off);
                    let done = match (token, v) {
                        (STRUCT_A, Value::Int(a)) => match self.struct_at(on) {
                            Some((_, b)) => self.set_struct_at(on, (a, b)),
                            None => false,
                        },
                        (STRUCT_B, Value::Long(b)) => match self.struct_at(on) {
                            Some((a, _)) => self.set_struct_at(on, (a, b)),
                            None => false,
                        },
                        (CLASS_X, Value::Int(x)) => match on {
                            Value::Object(o)
                                if matches!(self.heap.get(o), Some(Obj::Class { .. })) =>
                            {
                                self.heap[o] = Obj::Class { x };
                                true
                            }
                            _ => false,
                        },
                        _ => false,
                    };
                    if !done {
                        return stuck(off, "stfld of an unknown field, a wrong value or object");
                    }
                }
                Initobj => {
                    let p = pop!(off);
                    if token != STRUCT_TYPE || !self.set_struct_at(p, (0, 0)) {
                        return stuck(off, "initobj of other than an S");
                    }
                }
                Box => match (token, pop!(off)) {
                    (STRUCT_TYPE, Value::Struct { a, b }) => {
                        self.heap.push(Obj::Boxed { a, b });
                        stack.push(Value::Object(self.heap.len() - 1));
                    }
                    _ => return stuck(off, "box of other than an S"),
                },
                Unbox | Unbox_Any => {
                    let boxed = match (token, pop!(off)) {
                        (STRUCT_TYPE, Value::Object(o)) => match self.heap.get(o) {
                            Some(Obj::Boxed { a, b }) => Some((o, *a, *b)),
                            _ => None,
                        },
                        _ => None,
                    };
                    let Some((o, a, b)) = boxed else {
                        return stuck(off, "unbox of other than a boxed S");
                    };
                    stack.push(if opcode == Unbox {
                        Value::BoxRef(o)
                    } else {
                        Value::Struct { a, b }
                    });
                }
                Ldobj => {
                    let p = pop!(off);
                    match (token, self.struct_at(p)) {
                        (STRUCT_TYPE, Some((a, b))) => stack.push(Value::Struct { a, b }),
                        _ => return stuck(off, "ldobj of other than an S"),
                    }
                }
                Castclass | Isinst => match (token, stack.last().copied()) {
                    (EXCEPTION_CLASS, Some(Value::Exception(_))) => {}
                    (CLASS_TYPE, Some(v)) => {
                        let is_c = self.class_x(v).is_some();
                        if !is_c && v != Value::Null {
                            if opcode == Castclass {
                                return stuck(off, "castclass of a non-C to C");
                            }
                            stack.pop();
                            stack.push(Value::Null);
                        }
                    }
                    _ => return stuck(off, "a cast outside the subset"),
                },
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
                            v @ (Value::Int(_)
                            | Value::Long(_)
                            | Value::Struct { .. }
                            | Value::Object(_)) => Exit::Return(Some(v)),
                            Value::Exception(_)
                            | Value::Ref(_)
                            | Value::Null
                            | Value::BoxRef(_) => {
                                stuck(off, "ret of an exception, a pointer or null")
                            }
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

    /// Runs the generated method `peer` on `args` in a frame of its own (its arguments and
    /// locals are new cells; an `int32&` argument points at the caller's). A stub returns
    /// zero.
    fn call_peer(&mut self, peer: &'a PeerCode<'a>, args: Vec<Value>) -> Exit {
        let Some((code, clauses, env)) = peer.body.as_ref() else {
            // The stub returns a zero, or a new `C` with a zero field.
            let v = peer.ret.map(|t| match t {
                ValType::Class => {
                    self.heap.push(Obj::Class { x: 0 });
                    Value::Object(self.heap.len() - 1)
                }
                ValType::I4 | ValType::I8 | ValType::Struct => Value::zero(t),
            });
            return Exit::Return(v);
        };
        let (code, clauses): (&'a [u8], &'a [Clause]) = (code, clauses);
        if self.depth >= MAX_HANDLER_DEPTH {
            return stuck(0, "calls nested too deeply");
        }
        let mut instrs = Vec::new();
        for i in instr::Instructions::new(code) {
            match i {
                Ok(i) => instrs.push(i),
                Err(e) => return stuck(e.offset(), format!("undecodable callee code: {e}")),
            }
        }
        let frame_start = self.cells.len();
        let nargs = args.len();
        self.cells.extend(args);
        let nlocals = local_count(&instrs).max(env.locals.len());
        self.cells.extend(
            (0..nlocals).map(|k| Value::zero(env.locals.get(k).copied().unwrap_or_default())),
        );
        let saved = (
            std::mem::replace(&mut self.instrs, instrs),
            std::mem::replace(&mut self.clauses, clauses),
            std::mem::replace(&mut self.env, env),
            std::mem::replace(&mut self.caught, vec![None; clauses.len()]),
            self.arg_base,
            self.nargs,
            self.local_base,
            self.nlocals,
        );
        self.arg_base = frame_start;
        self.nargs = nargs;
        self.local_base = frame_start + nargs;
        self.nlocals = nlocals;
        self.depth += 1;
        let exit = self.exec(0, Vec::new(), Mode::Body);
        self.depth -= 1;
        (
            self.instrs,
            self.clauses,
            self.env,
            self.caught,
            self.arg_base,
            self.nargs,
            self.local_base,
            self.nlocals,
        ) = saved;
        self.cells.truncate(frame_start);
        exit
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
fn var_index(opcode: Opcode, operand: &Operand<'_>) -> usize {
    match (opcode.implied_operand(), operand) {
        (Some(implied), _) => implied as usize,
        (None, Operand::Var(v)) => *v as usize,
        // The decoder gives loads and stores of variables no other operand; past any real
        // variable (the lookup then fails), and `+ 1` cannot overflow.
        (None, _) => usize::from(u16::MAX) + 1,
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

/// `a op b` of two `int64`s (the count of a shift an `int32` widened); comparisons give 0 or 1.
/// `None` where .NET throws (division by zero, MinValue / -1) or leaves the result unspecified
/// (a shift count out of range).
fn binary64(opcode: Opcode, a: i64, b: i64) -> Option<i64> {
    use Opcode::*;
    let (ua, ub) = (a as u64, b as u64);
    let count = u32::try_from(b).ok();
    Some(match opcode {
        Add => a.wrapping_add(b),
        Sub => a.wrapping_sub(b),
        Mul => a.wrapping_mul(b),
        And => a & b,
        Or => a | b,
        Xor => a ^ b,
        Shl => a.checked_shl(count?)?,
        Shr => a.checked_shr(count?)?,
        Shr_Un => ua.checked_shr(count?)? as i64,
        Div => a.checked_div(b)?,
        Rem => a.checked_rem(b)?,
        Div_Un => ua.checked_div(ub)? as i64,
        Rem_Un => ua.checked_rem(ub)? as i64,
        Ceq => (a == b) as i64,
        Cgt => (a > b) as i64,
        Cgt_Un => (ua > ub) as i64,
        Clt => (a < b) as i64,
        Clt_Un => (ua < ub) as i64,
        _ => return None,
    })
}

/// Whether a two-operand branch is taken: `int32` operands widened (`wide`: they are
/// `int64`s, which matters to the unsigned comparisons).
fn compare_branch(long: Opcode, a: i64, b: i64, wide: bool) -> bool {
    use Opcode::*;
    let (ua, ub) = if wide {
        (a as u64, b as u64)
    } else {
        (u64::from(a as u32), u64::from(b as u32))
    };
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
    use crate::generate::valid::{ArgType, OTHER_CLASS, ValType};
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

    /// `m` laid out with its declared MaxStack, unverified: its code and clauses.
    fn laid_out(m: &Method) -> (Vec<u8>, Vec<Clause>) {
        let mut layout = crate::ir::Layout::new();
        let opts = LayoutOptions {
            max_stack: MaxStackPolicy::Declared,
            verify: false,
            ..LayoutOptions::default()
        };
        layout
            .run(m, &opts, &NoResolver, &mut Vec::new())
            .expect("lays out");
        (layout.code().to_vec(), layout.clauses().to_vec())
    }

    fn exec(m: &Method) -> Run {
        let (code, clauses) = laid_out(m);
        let env = Env::new(CALLEES, 10_000);
        run(&code, &clauses, &[], &env)
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
        assert_eq!(
            exec(&m).outcome,
            Outcome::Returned(Some(ReturnValue::Number(42)))
        );
    }

    fn exec_with(m: &Method, args: &[i64], env: &Env<'_>) -> Run {
        let (code, clauses) = laid_out(m);
        run(&code, &clauses, args, env)
    }

    fn ldc8(v: i64) -> Instr {
        Instr::new(Opcode::Ldc_I8, crate::ir::Operand::Int64(v))
    }

    /// `int64` arithmetic wraps, unsigned comparisons and shifts see 64 bits, conversions
    /// sign- or zero-extend and truncate.
    #[test]
    fn int64_values_compute_as_dotnet_does() {
        let env = Env::new(&[], 1000);
        let cases: Vec<(Vec<Instr>, i64)> = vec![
            (vec![ldc8(i64::MAX), ldc8(1), op(Opcode::Add)], i64::MIN),
            (vec![ldc8(-1), ldc8(1), op(Opcode::Clt_Un)], 0),
            (
                vec![ldc8(-8), op(Opcode::Ldc_I4_1), op(Opcode::Shr_Un)],
                i64::MAX - 3,
            ),
            (
                vec![
                    ldc8(1),
                    Instr::new(Opcode::Ldc_I4_S, crate::ir::Operand::Int8(40)),
                    op(Opcode::Shl),
                ],
                1 << 40,
            ),
            (
                vec![op(Opcode::Ldc_I4_M1), op(Opcode::Conv_U8)],
                0xFFFF_FFFF,
            ),
            (vec![op(Opcode::Ldc_I4_M1), op(Opcode::Conv_I8)], -1),
            (vec![ldc8(0x1_8000_0005), op(Opcode::Conv_I4)], -0x7FFF_FFFB),
            (vec![ldc8(-7), ldc8(2), op(Opcode::Rem)], -1),
            (
                vec![ldc8(-7), ldc8(2), op(Opcode::Div_Un)],
                (u64::MAX / 2 - 3) as i64,
            ),
        ];
        for (code, want) in cases {
            let mut m = Method::default();
            for i in &code {
                m.push(*i);
            }
            m.push(op(Opcode::Ret));
            let r = exec_with(&m, &[], &env);
            assert_eq!(
                r.outcome,
                Outcome::Returned(Some(ReturnValue::Number(want))),
                "{code:?}"
            );
        }
        // Operands of different widths, or MinValue / -1, get the run stuck.
        for code in [
            vec![ldc8(1), op(Opcode::Ldc_I4_1), op(Opcode::Add)],
            vec![ldc8(i64::MIN), ldc8(-1), op(Opcode::Div)],
        ] {
            let mut m = Method::default();
            for i in &code {
                m.push(*i);
            }
            m.push(op(Opcode::Ret));
            let r = exec_with(&m, &[], &env);
            assert!(
                matches!(r.outcome, Outcome::Stuck { .. }),
                "{code:?}: {r:?}"
            );
        }
    }

    /// `int32&` arguments: the body reads and writes the caller's `int32`, whose final value
    /// is reported also when an exception leaves the method.
    #[test]
    fn int32_pointers_write_through_to_the_callers_value() {
        let types = [ArgType::RefI4, ArgType::Val(ValType::I8), ArgType::RefI4];
        let env = Env {
            args: &types,
            ..Env::new(&[], 1000)
        };
        // *a0 = *a0 + 5; *a2 = (int)a1; throw 9
        let mut m = Method::default();
        m.push(op(Opcode::Ldarg_0));
        m.push(op(Opcode::Ldarg_0));
        m.push(op(Opcode::Ldind_I4));
        m.push(op(Opcode::Ldc_I4_5));
        m.push(op(Opcode::Add));
        m.push(op(Opcode::Stind_I4));
        m.push(op(Opcode::Ldarg_2));
        m.push(op(Opcode::Ldarg_1));
        m.push(op(Opcode::Conv_I4));
        m.push(op(Opcode::Stind_I4));
        throw(&mut m, 9);
        let r = exec_with(&m, &[10, 0x1_0000_0007, -3], &env);
        assert_eq!(r.outcome, Outcome::Threw(9));
        assert_eq!(r.refs, [15, 7]);
        assert_eq!(r.args[1], Value::Long(0x1_0000_0007));
    }

    /// A call to a generated method runs its body in a frame of its own: it writes the
    /// caller's local through an `int32&`, its calls join the trace, its exception is the
    /// caller's to catch; a stub returns zero.
    #[test]
    fn generated_callees_run_in_frames_of_their_own() {
        const P: u32 = 0x0680_0000;
        const Q: u32 = 0x0680_0001;
        let callee_callees = [Callee {
            token: F,
            params: 0,
            returns_void: true,
            may_throw: false,
        }];
        // P(int32& a): f(); *a = 7; throw 5
        let mut p = Method::default();
        p.push(call(F));
        p.push(op(Opcode::Ldarg_0));
        p.push(op(Opcode::Ldc_I4_7));
        p.push(op(Opcode::Stind_I4));
        throw(&mut p, 5);
        let (p_code, p_clauses) = laid_out(&p);
        let p_args = [ArgType::RefI4];
        let p_env = Env {
            args: &p_args,
            ..Env::new(&callee_callees, 0)
        };
        let peers = [
            PeerCode {
                token: P,
                args: &p_args,
                ret: None,
                body: Some((&p_code, &p_clauses, p_env)),
            },
            PeerCode {
                token: Q,
                args: &[],
                ret: Some(ValType::I8),
                body: None,
            },
        ];
        let env = Env {
            peers: &peers,
            ..Env::new(CALLEES, 1000)
        };
        // try { ldloca 0; call P } catch { pop; leave } ; ldloc 0; conv.i8; call Q; add; ret
        let mut m = Method::default();
        let after = m.new_label();
        let ts = m.here();
        m.push(Instr::new(Opcode::Ldloca_S, crate::ir::Operand::Var(0)));
        m.push(call(P));
        m.push(Instr::branch(Opcode::Leave, after));
        let te = m.here();
        m.push(op(Opcode::Pop));
        m.push(call(G));
        m.push(Instr::branch(Opcode::Leave, after));
        let he = m.here();
        m.bind(after);
        m.push(op(Opcode::Ldloc_0));
        m.push(op(Opcode::Conv_I8));
        m.push(call(Q));
        m.push(op(Opcode::Add));
        m.push(op(Opcode::Ret));
        m.clauses
            .push(clause(ClauseKind::Catch, (ts, te), (te, he)));
        let r = exec_with(&m, &[], &env);
        assert_eq!(r.outcome, Outcome::Returned(Some(ReturnValue::Number(7))));
        assert_eq!(tokens(&r), [F, G]);
    }

    fn tok(o: Opcode, t: u32) -> Instr {
        Instr::new(o, crate::ir::Operand::Token(t))
    }

    fn var(o: Opcode, k: u16) -> Instr {
        Instr::new(o, crate::ir::Operand::Var(k))
    }

    fn ldc(v: i32) -> Instr {
        Instr::new(Opcode::Ldc_I4, crate::ir::Operand::Int32(v))
    }

    /// Locals 0 and 1 are `S`s, 2 to 4 `C`s (or boxed `S`s).
    const STRUCT_LOCALS: &[ValType] = &[
        ValType::Struct,
        ValType::Struct,
        ValType::Class,
        ValType::Class,
        ValType::Class,
    ];

    fn exec_struct(code: &[Instr]) -> Run {
        let env = Env {
            locals: STRUCT_LOCALS,
            ..Env::new(&[], 1000)
        };
        let mut m = Method::default();
        for i in code {
            m.push(*i);
        }
        exec_with(&m, &[], &env)
    }

    fn number(v: i64) -> Outcome {
        Outcome::Returned(Some(ReturnValue::Number(v)))
    }

    /// Storing an `S` copies it: a store to the copy's field leaves the original as it was,
    /// through `stloc` as through `starg`-free `ldloc`; `initobj` zeroes both fields.
    #[test]
    fn structs_are_copied_by_value() {
        use Opcode::*;
        let r = exec_struct(&[
            var(Ldloca_S, 0),
            ldc(5),
            tok(Stfld, STRUCT_A),
            var(Ldloca_S, 0),
            ldc8(-6),
            tok(Stfld, STRUCT_B),
            op(Ldloc_0),
            op(Stloc_1),
            var(Ldloca_S, 1),
            ldc(9),
            tok(Stfld, STRUCT_A),
            // s0.a * 100 + s1.a, then s1.b
            var(Ldloca_S, 0),
            tok(Ldfld, STRUCT_A),
            ldc(100),
            op(Mul),
            op(Ldloc_1),
            tok(Ldfld, STRUCT_A),
            op(Add),
            op(Conv_I8),
            op(Ldloc_1),
            tok(Ldfld, STRUCT_B),
            op(Add),
            op(Ret),
        ]);
        assert_eq!(r.outcome, number(509 - 6));
        assert_eq!(r.local(0), Value::Struct { a: 5, b: -6 });
        assert_eq!(r.local(1), Value::Struct { a: 9, b: -6 });
        let r = exec_struct(&[
            var(Ldloca_S, 0),
            ldc(5),
            tok(Stfld, STRUCT_A),
            var(Ldloca_S, 0),
            tok(Initobj, STRUCT_TYPE),
            op(Ldloc_0),
            op(Ret),
        ]);
        assert_eq!(
            r.outcome,
            Outcome::Returned(Some(ReturnValue::Struct { a: 0, b: 0 }))
        );
    }

    /// `box` copies the `S` to the heap: later stores to the local do not reach the box, and
    /// `unbox.any`, `unbox; ldobj` and `unbox; ldfld` read the copy.
    #[test]
    fn box_makes_a_copy() {
        use Opcode::*;
        let unboxes: [&[Instr]; 3] = [
            &[tok(Unbox_Any, STRUCT_TYPE), tok(Ldfld, STRUCT_A)],
            &[
                tok(Unbox, STRUCT_TYPE),
                tok(Ldobj, STRUCT_TYPE),
                tok(Ldfld, STRUCT_A),
            ],
            &[tok(Unbox, STRUCT_TYPE), tok(Ldfld, STRUCT_A)],
        ];
        for unbox in unboxes {
            let mut code = vec![
                var(Ldloca_S, 0),
                ldc(3),
                tok(Stfld, STRUCT_A),
                op(Ldloc_0),
                tok(Box, STRUCT_TYPE),
                op(Stloc_2),
                var(Ldloca_S, 0),
                ldc(4),
                tok(Stfld, STRUCT_A),
                op(Ldloc_2),
            ];
            code.extend_from_slice(unbox);
            code.push(op(Ret));
            let r = exec_struct(&code);
            assert_eq!(r.outcome, number(3), "{unbox:?}");
            assert_eq!(r.heap, [Obj::Boxed { a: 3, b: 0 }]);
        }
    }

    /// A `C` is a reference: two locals holding the same one see each other's stores, a
    /// second `newobj` is another object, the casts keep it, and a method returns it as its
    /// field's value.
    #[test]
    fn objects_have_identity() {
        use Opcode::*;
        let r = exec_struct(&[
            ldc(1),
            tok(Newobj, CLASS_CTOR),
            op(Dup),
            op(Stloc_2),
            op(Stloc_3),
            ldc(1),
            tok(Newobj, CLASS_CTOR),
            var(Stloc_S, 4),
            op(Ldloc_2),
            ldc(7),
            tok(Stfld, CLASS_X),
            // x of local 3 (the same object) * 10 + x of local 4 (another)
            op(Ldloc_3),
            tok(Castclass, CLASS_TYPE),
            tok(Ldfld, CLASS_X),
            ldc(10),
            op(Mul),
            var(Ldloc_S, 4),
            tok(Isinst, CLASS_TYPE),
            tok(Ldfld, CLASS_X),
            op(Add),
            tok(Newobj, CLASS_CTOR),
            op(Ret),
        ]);
        assert_eq!(
            r.outcome,
            Outcome::Returned(Some(ReturnValue::Object { x: 71 }))
        );
        assert_eq!(r.local(2), r.local(3));
        assert_ne!(r.local(2), r.local(4));
    }

    /// `isinst C` of a boxed `S` gives null, of a `C` the `C`; `ldnull; cgt.un` tells them
    /// apart, `ceq` compares references by identity.
    #[test]
    fn isinst_gives_null_for_other_objects() {
        use Opcode::*;
        let r = exec_struct(&[
            op(Ldloc_0),
            tok(Box, STRUCT_TYPE),
            tok(Isinst, CLASS_TYPE),
            op(Ldnull),
            op(Cgt_Un),
            ldc(10),
            op(Mul),
            ldc(3),
            tok(Newobj, CLASS_CTOR),
            tok(Isinst, CLASS_TYPE),
            op(Ldnull),
            op(Cgt_Un),
            op(Add),
            ldc(100),
            op(Mul),
            ldc(3),
            tok(Newobj, CLASS_CTOR),
            op(Dup),
            op(Ceq),
            op(Add),
            op(Ret),
        ]);
        assert_eq!(r.outcome, number(101));
        // Two objects have no order the interpreter knows.
        let r = exec_struct(&[
            op(Ldc_I4_1),
            tok(Newobj, CLASS_CTOR),
            op(Ldc_I4_1),
            tok(Newobj, CLASS_CTOR),
            op(Cgt_Un),
            op(Ret),
        ]);
        assert!(matches!(r.outcome, Outcome::Stuck { .. }), "{r:?}");
    }

    /// A null `C`, an `S` operation on a number, a field of the wrong type or a cast of a
    /// boxed `S` to `C`: stuck, not a panic.
    #[test]
    fn misused_structs_and_objects_get_stuck() {
        use Opcode::*;
        let cases: [&[Instr]; 7] = [
            &[op(Ldloc_2), tok(Ldfld, CLASS_X), op(Ret)],
            &[op(Ldloc_2), ldc(1), tok(Stfld, CLASS_X), op(Ret)],
            &[ldc(1), tok(Box, STRUCT_TYPE), op(Ret)],
            &[
                op(Ldloc_0),
                tok(Box, STRUCT_TYPE),
                tok(Castclass, CLASS_TYPE),
                op(Ret),
            ],
            &[var(Ldloca_S, 0), ldc(1), tok(Stfld, STRUCT_B), op(Ret)],
            &[
                ldc(1),
                tok(Newobj, CLASS_CTOR),
                tok(Unbox_Any, STRUCT_TYPE),
                op(Ret),
            ],
            &[op(Ldloc_2), op(Ret)],
        ];
        for code in cases {
            let r = exec_struct(code);
            assert!(
                matches!(r.outcome, Outcome::Stuck { .. }),
                "{code:?}: {r:?}"
            );
        }
    }

    /// `S` and `C` arguments are made from their inputs as the program's runner makes them,
    /// and pass to a generated callee by value and by reference.
    #[test]
    fn struct_and_class_arguments_pass_to_callees() {
        use Opcode::*;
        const P: u32 = 0x0680_0000;
        // P(S s, C c): s.a = 1; c.x = 2; return s
        let mut p = Method::default();
        for i in [
            var(Ldarga_S, 0),
            ldc(1),
            tok(Stfld, STRUCT_A),
            op(Ldarg_1),
            ldc(2),
            tok(Stfld, CLASS_X),
            op(Ldarg_0),
            op(Ret),
        ] {
            p.push(i);
        }
        let (p_code, p_clauses) = laid_out(&p);
        let p_args = [ArgType::Val(ValType::Struct), ArgType::Val(ValType::Class)];
        let p_env = Env {
            args: &p_args,
            ..Env::new(&[], 0)
        };
        let peers = [PeerCode {
            token: P,
            args: &p_args,
            ret: Some(ValType::Struct),
            body: Some((&p_code, &p_clauses, p_env)),
        }];
        let env = Env {
            args: &p_args,
            peers: &peers,
            ..Env::new(&[], 1000)
        };
        // P(s, c).a * 1000 + s.a * 100 + c.x  (s unchanged, c changed)
        let mut m = Method::default();
        for i in [
            op(Ldarg_0),
            op(Ldarg_1),
            call(P),
            tok(Ldfld, STRUCT_A),
            ldc(1000),
            op(Mul),
            op(Ldarg_0),
            tok(Ldfld, STRUCT_A),
            ldc(100),
            op(Mul),
            op(Add),
            op(Ldarg_1),
            tok(Ldfld, CLASS_X),
            op(Add),
            op(Ret),
        ] {
            m.push(i);
        }
        let r = exec_with(&m, &[0x7_0000_0005, 9], &env);
        assert_eq!(r.outcome, number(1000 + 500 + 2));
        assert_eq!(
            r.args[0],
            Value::Struct {
                a: 5,
                b: 0x7_0000_0005
            }
        );
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
        let env = Env::new(&[], 100);
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
