//! Valid-by-construction bodies: a structured generator that emits an [`ir::Method`](Method)
//! statement by statement, tracking the stack depth, the enclosing protected regions and the
//! legal `leave` targets as it goes, so that every body it produces verifies.
//!
//! Every decision is read from an [`arbitrary::Unstructured`] choice stream. A stream that runs
//! out reads as zeros, and zero always picks the simplest option (end the block, a constant, no
//! clause), so any byte string — in particular any shrunk one — yields a valid body.
//!
//! The values are `int32` and `int64`, the value type `S` and the class `C` ([`ValType`]),
//! besides the synthetic exception object: `newobj` of [`EXCEPTION_CTOR`] wraps an `int32`,
//! `ldfld` [`EXCEPTION_VALUE`] reads it back. The generator keeps the type of every value it
//! pushes, so operators get operands of one type (`conv.i8`, `conv.u8` and `conv.i4` between
//! them) and the body is type-valid too. Arguments may be `int32&` ([`ArgType::RefI4`]): read
//! with `ldarg; ldind.i4`, written with `ldarg; <value>; stind.i4`, never stored to themselves.
//!
//! `S` ([`STRUCT_TYPE`]) has the fields `int32 a` and `int64 b`: its values are made with
//! `ldloca; initobj` and `stfld` through the local's address, read with `ldfld` on the value or
//! on an address, boxed and unboxed (`box; unbox.any`, `box; unbox; ldobj`), and passed to and
//! returned from generated methods by value. Locals of type `S` are read before they are
//! written, so a body with one sets InitLocals. `C` ([`CLASS_TYPE`]) has the field `int32 x`
//! and the constructor `.ctor(int32)`: its values come from `newobj`, `castclass` and `isinst`
//! (of values known to be a `C`), arguments, locals and calls, and are never null: a body
//! stores a new `C` in each of its `C` locals before anything else. `isinst C` of a `C` or of
//! a boxed `S` compared with `ldnull; cgt.un` tests what an object is: the null it may give is
//! only compared.

use super::config::Config;
use crate::body::{ClauseKind, TINY_MAX_STACK};
use crate::ir::{EhClause, HeaderInfo, Instr, Label, Method, Operand, Prefix};
use crate::opcode::Opcode;
use crate::verify::{CallSig, SyntheticResolver};
use arbitrary::Unstructured;

/// TypeDef of the synthetic exception class every generated `throw` throws.
pub const EXCEPTION_CLASS: u32 = 0x0200_0002;
/// TypeDef of a class no generated code throws: a catch of it never matches.
pub const OTHER_CLASS: u32 = 0x0200_0003;
/// The exception's constructor: `instance void .ctor(int32)`.
pub const EXCEPTION_CTOR: u32 = 0x0600_0001;
/// The exception's `int32` field.
pub const EXCEPTION_VALUE: u32 = 0x0400_0001;
/// TypeDef of the value type `S` (sequential layout): `int32 a`, `int64 b`.
pub const STRUCT_TYPE: u32 = 0x0200_0004;
/// The field `S::a` (`int32`).
pub const STRUCT_A: u32 = 0x0400_0002;
/// The field `S::b` (`int64`).
pub const STRUCT_B: u32 = 0x0400_0003;
/// TypeDef of the class `C`: `int32 x` and a constructor setting it.
pub const CLASS_TYPE: u32 = 0x0200_0005;
/// The field `C::x` (`int32`).
pub const CLASS_X: u32 = 0x0400_0004;
/// `C::.ctor(int32)`: stores its argument in `x`.
pub const CLASS_CTOR: u32 = 0x0600_0002;
/// The locals' StandAloneSig (the program builder makes the real one from [`Shape`]).
pub const LOCALS_SIG: u32 = 0x1100_0001;
/// Token of the first synthetic callee; the others follow.
pub const FIRST_CALLEE: u32 = 0x0600_0010;
/// Token of a call to the generated method of program index 0 ([`Peer`]); index `k` is this
/// plus `k`.
pub const FIRST_PEER: u32 = 0x0680_0000;

/// An earlier generated method of the same program that a generated method may call: its
/// program index and signature. Only methods that call no other generated method are offered,
/// and calls to them are made outside loops, so a call costs at most one run of a body.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Peer {
    /// Its index in the program (method `M{index}`).
    pub index: u32,
    /// Its argument types.
    pub args: Vec<ArgType>,
    /// Its return type, `None` for void.
    pub ret: Option<ValType>,
}

impl Peer {
    /// The synthetic token calls to it use.
    pub fn token(&self) -> u32 {
        FIRST_PEER + self.index
    }

    /// The signature of `g` as the method of program index `index`.
    pub fn of(index: u32, g: &Generated) -> Peer {
        Peer {
            index,
            args: g.shape.arg_types.clone(),
            ret: g.shape.returns(),
        }
    }

    /// Its signature as the verifier sees it.
    pub fn sig(&self) -> CallSig {
        CallSig::static_method(self.args.len() as u16, self.ret.is_none())
    }
}

/// A static method of the synthetic module: `int32` parameters, `int32` or void result.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Callee {
    /// Its MethodDef token in the synthetic module.
    pub token: u32,
    /// How many `int32` parameters it takes.
    pub params: u16,
    /// Whether it returns nothing (else an `int32`).
    pub returns_void: bool,
    /// Whether a call may throw the synthetic exception (decided by a hash of the arguments).
    pub may_throw: bool,
}

impl Callee {
    /// Its signature as the verifier sees it.
    pub fn sig(&self) -> CallSig {
        CallSig::static_method(self.params, self.returns_void)
    }
}

/// The type of a value generated code computes with.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum ValType {
    /// `int32`.
    #[default]
    I4,
    /// `int64`.
    I8,
    /// The value type `S` ([`STRUCT_TYPE`]).
    Struct,
    /// The class `C` ([`CLASS_TYPE`]), never null.
    Class,
}

impl ValType {
    /// Whether it is `int32` or `int64` (operators, branches and conversions take it).
    pub fn is_number(self) -> bool {
        match self {
            ValType::I4 | ValType::I8 => true,
            ValType::Struct | ValType::Class => false,
        }
    }
}

/// The type of a generated method's argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ArgType {
    /// A value of this type.
    Val(ValType),
    /// `int32&`: the caller's `int32` storage, read and written through the pointer.
    RefI4,
}

impl Default for ArgType {
    fn default() -> Self {
        ArgType::Val(ValType::I4)
    }
}

/// The generated method's own signature and locals.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Shape {
    /// How many arguments.
    pub args: u16,
    /// How many locals (loop counters included).
    pub locals: u16,
    /// Whether it returns nothing (else a value of type `ret`).
    pub returns_void: bool,
    /// The type of each argument (`args` of them).
    pub arg_types: Vec<ArgType>,
    /// The type of each local (`locals` of them).
    pub local_types: Vec<ValType>,
    /// The return type, when not void.
    pub ret: ValType,
}

impl Shape {
    /// The return type, `None` for a void method.
    pub fn returns(&self) -> Option<ValType> {
        (!self.returns_void).then_some(self.ret)
    }

    /// The type of argument `k` (`int32` past the declared ones).
    pub fn arg_type(&self, k: usize) -> ArgType {
        self.arg_types.get(k).copied().unwrap_or_default()
    }

    /// The type of local `k` (`int32` past the declared ones).
    pub fn local_type(&self, k: usize) -> ValType {
        self.local_types.get(k).copied().unwrap_or_default()
    }
}

/// Places in the generated code where a mutator can break one rule and know which diagnostic it
/// causes. Indices are instruction indices of [`Generated::method`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sites {
    /// Reachable statement starts (stack empty) outside every handler and filter.
    pub plain_statements: Vec<usize>,
    /// Reachable statement starts (stack empty), with whether they lie in a catch handler.
    pub statements: Vec<(usize, bool)>,
    /// `ldc`/`ldloc`/`ldarg` immediately consumed by a `stloc`, reachable, at an empty stack.
    pub simple_stores: Vec<usize>,
    /// The `br` closing the then-arm of an `if`/`else` whose two arms both reach the join.
    pub merges: Vec<usize>,
    /// `leave` instructions that end a try body.
    pub try_leaves: Vec<usize>,
    /// `endfinally` ending a finally handler, with a label outside that handler.
    pub finally_ends: Vec<(usize, Label)>,
    /// `endfilter` instructions.
    pub endfilters: Vec<usize>,
    /// `tail.`-prefixed calls (followed by `ret`).
    pub tail_calls: Vec<usize>,
    /// The final `ret`, when control reaches it.
    pub final_ret: Option<usize>,
    /// Instructions with a local-variable operand.
    pub local_operands: Vec<usize>,
    /// `call` instructions.
    pub calls: Vec<usize>,
}

/// A generated method with everything needed to check and run it.
#[derive(Clone, Debug)]
pub struct Generated {
    /// The method, in the IR.
    pub method: Method,
    /// Answers the verifier for this method: its signature, locals and every token it uses.
    pub resolver: SyntheticResolver,
    /// Its signature and locals.
    pub shape: Shape,
    /// The synthetic callees it calls.
    pub callees: Vec<Callee>,
    /// The generated methods it was offered to call ([`FIRST_PEER`] tokens), whether or not it
    /// calls them.
    pub peers: Vec<Peer>,
    /// Whether it calls any of them.
    pub calls_peers: bool,
    /// Argument vectors to run the method with: per argument its value, or for an `int32&`
    /// argument the initial value of the `int32` it points to (an `int32` argument's value fits
    /// in `i32`); an `S` argument is made from its number `v` as `a = v as i32, b = v`, a `C`
    /// argument is a new `C` whose `x` is the number (which fits in `i32`).
    pub inputs: Vec<Vec<i64>>,
    /// The stack depth the generator tracked (over all code, reachable or not).
    pub max_stack: u16,
    /// Where mutators can break one rule.
    pub sites: Sites,
}

impl Generated {
    /// What the interpreter needs to run this method: its callees, argument and local types.
    pub fn env(&self, fuel: u64) -> super::interp::Env<'_> {
        super::interp::Env {
            args: &self.shape.arg_types,
            locals: &self.shape.local_types,
            ..super::interp::Env::new(&self.callees, fuel)
        }
    }

    /// Lays the method out as generated: branch forms as asked (widened where they must be),
    /// MaxStack as declared, without verifying (check the result with [`Generated::resolver`]).
    pub fn encode(&self) -> Result<Vec<u8>, crate::ir::LayoutError> {
        self.encode_with(crate::ir::BranchForms::KeepOriginal)
    }

    /// Like [`Generated::encode`] with the given branch forms.
    pub fn encode_with(
        &self,
        branch_forms: crate::ir::BranchForms,
    ) -> Result<Vec<u8>, crate::ir::LayoutError> {
        let mut out = Vec::new();
        let opts = crate::ir::LayoutOptions {
            branch_forms,
            max_stack: crate::ir::MaxStackPolicy::Declared,
            verify: false,
        };
        crate::ir::layout(&self.method, &opts, &self.resolver, &mut out)?;
        Ok(out)
    }
}

/// Generates a valid method from a choice stream.
pub fn generate(u: &mut Unstructured<'_>, config: &Config) -> Generated {
    generate_calling(u, config, &[])
}

/// Generates a valid method that may call the generated methods `peers` (with
/// [`Config::peer_calls`]), with arguments of their parameter types.
pub fn generate_calling(u: &mut Unstructured<'_>, config: &Config, peers: &[Peer]) -> Generated {
    let mut g = Gen::new(u, config);
    if config.peer_calls {
        g.peers = peers.to_vec();
    }
    g.run()
}

/// Generates a valid method from raw bytes used as the choice stream.
pub fn generate_from_bytes(bytes: &[u8], config: &Config) -> Generated {
    generate(&mut Unstructured::new(bytes), config)
}

/// The innermost kind of region code is emitted into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Region {
    Try,
    Catch,
    Finally,
    Fault,
}

/// The opcodes of a conditional branch and the operands it pops.
const COND_BRANCHES: &[(Opcode, u8)] = &[
    (Opcode::Brtrue, 1),
    (Opcode::Brfalse, 1),
    (Opcode::Beq, 2),
    (Opcode::Bne_Un, 2),
    (Opcode::Blt, 2),
    (Opcode::Bge, 2),
    (Opcode::Bgt, 2),
    (Opcode::Ble, 2),
    (Opcode::Blt_Un, 2),
    (Opcode::Bge_Un, 2),
    (Opcode::Bgt_Un, 2),
    (Opcode::Ble_Un, 2),
];

const BINARY: &[Opcode] = &[
    Opcode::Add,
    Opcode::Sub,
    Opcode::Mul,
    Opcode::And,
    Opcode::Or,
    Opcode::Xor,
];
const COMPARE: &[Opcode] = &[
    Opcode::Ceq,
    Opcode::Cgt,
    Opcode::Cgt_Un,
    Opcode::Clt,
    Opcode::Clt_Un,
];
const SHIFT: &[Opcode] = &[Opcode::Shl, Opcode::Shr, Opcode::Shr_Un];
const DIVIDE: &[Opcode] = &[Opcode::Div, Opcode::Div_Un, Opcode::Rem, Opcode::Rem_Un];

struct Gen<'a, 'u> {
    u: &'a mut Unstructured<'u>,
    cfg: &'a Config,
    m: Method,
    shape: Shape,
    /// Locals the program may write (loop counters come after them).
    user_locals: u16,
    callees: Vec<Callee>,
    peers: Vec<Peer>,
    calls_peers: bool,
    /// Loops the code being emitted is in: no calls to generated methods there.
    loop_depth: u32,
    stack: u32,
    max_stack: u32,
    regions: Vec<Region>,
    /// Labels a `leave` may target from here; cleared on entering a finally or fault handler.
    leave_targets: Vec<Label>,
    reachable: bool,
    /// Per label: whether reachable code branches to it.
    reached: Vec<bool>,
    /// Statements left for the whole method.
    budget: u32,
    nesting: u32,
    tiny: bool,
    /// Every expression a leaf and every branch a one-operand one: the code never needs more
    /// than one stack slot, and the header declares exactly what it needs.
    lean: bool,
    /// A loop counter starts from the zeroed local (the entry loop): InitLocals must be set.
    zeroed_counter: bool,
    /// The local of type `S` that struct values are built in, once a body needs one.
    scratch: Option<u16>,
    sites: Sites,
}

impl<'a, 'u> Gen<'a, 'u> {
    fn new(u: &'a mut Unstructured<'u>, cfg: &'a Config) -> Self {
        Gen {
            u,
            cfg,
            m: Method::new(HeaderInfo::default()),
            shape: Shape::default(),
            user_locals: 0,
            callees: Vec::new(),
            peers: Vec::new(),
            calls_peers: false,
            loop_depth: 0,
            stack: 0,
            max_stack: 0,
            regions: Vec::new(),
            leave_targets: Vec::new(),
            reachable: true,
            reached: Vec::new(),
            budget: 0,
            nesting: 0,
            tiny: false,
            lean: false,
            zeroed_counter: false,
            scratch: None,
            sites: Sites::default(),
        }
    }

    // ----- choices -----

    /// A number in `0..n` (0 when `n` is 0 or the stream is exhausted).
    fn pick(&mut self, n: u32) -> u32 {
        if n <= 1 {
            return 0;
        }
        self.u.int_in_range(0..=n - 1).unwrap_or(0)
    }

    /// True with roughly `percent`% probability; false on an exhausted stream.
    fn chance(&mut self, percent: u8) -> bool {
        percent > 0 && self.pick(100) >= 100 - percent.min(100) as u32
    }

    /// An index into `weights`, by weight; the first non-zero weight on an exhausted stream.
    fn weighted(&mut self, weights: &[u32]) -> usize {
        let total: u32 = weights.iter().sum();
        let mut r = self.pick(total.max(1));
        for (i, &w) in weights.iter().enumerate() {
            if r < w {
                return i;
            }
            r -= w;
        }
        0
    }

    fn int(&mut self) -> i32 {
        match self.pick(4) {
            0 => self.pick(11) as i32 - 2,
            1 => self.pick(256) as i32 - 128,
            2 => self.pick(65536) as i32 - 32768,
            _ => self.u.arbitrary::<i32>().unwrap_or(0),
        }
    }

    /// A value type: `int64`, `S` or `C` with the configured chances, else `int32` (no choice
    /// read for a type that is off; never `S` or `C` in a tiny body, which has no locals to
    /// build an `S` in).
    fn value_type(&mut self) -> ValType {
        if self.chance(self.cfg.int64_percent) {
            ValType::I8
        } else if self.struct_on() && self.chance(self.cfg.struct_percent) {
            ValType::Struct
        } else if self.class_on() && self.chance(self.cfg.object_percent) {
            ValType::Class
        } else {
            ValType::I4
        }
    }

    /// Whether this body may compute with `S` values.
    fn struct_on(&self) -> bool {
        !self.tiny && self.cfg.struct_percent > 0
    }

    /// Whether this body may compute with `C` values.
    fn class_on(&self) -> bool {
        !self.tiny && self.cfg.object_percent > 0
    }

    /// The local `S` values are built in, added on first use.
    fn scratch(&mut self) -> u16 {
        if let Some(k) = self.scratch {
            return k;
        }
        let k = self.shape.locals;
        self.shape.locals += 1;
        self.shape.local_types.push(ValType::Struct);
        self.scratch = Some(k);
        k
    }

    /// The type of the operands of a comparison or a two-operand branch: `int64` now and then
    /// when `int64` values are on.
    fn operand_type(&mut self) -> ValType {
        if self.cfg.int64_percent > 0 && self.pick(4) == 3 {
            ValType::I8
        } else {
            ValType::I4
        }
    }

    fn long(&mut self) -> i64 {
        match self.pick(3) {
            0 => i64::from(self.int()),
            1 => self.u.arbitrary::<i64>().unwrap_or(0),
            _ => [i64::MIN, i64::MAX, 1 << 32, u32::MAX as i64, -(1 << 31) - 1]
                [self.pick(5) as usize],
        }
    }

    /// A fresh `int32` local for a loop counter.
    fn counter(&mut self) -> u16 {
        let k = self.shape.locals;
        self.shape.locals += 1;
        self.shape.local_types.push(ValType::I4);
        k
    }

    /// The locals of type `t` among the first `n`.
    fn locals_of(&self, t: ValType, n: u16) -> Vec<u16> {
        (0..n)
            .filter(|&k| self.shape.local_type(k as usize) == t)
            .collect()
    }

    /// The arguments of type `t`.
    fn args_of(&self, t: ArgType) -> Vec<u16> {
        (0..self.shape.args)
            .filter(|&k| self.shape.arg_type(k as usize) == t)
            .collect()
    }

    /// The number arguments (`int32` and `int64`).
    fn number_args(&self) -> Vec<u16> {
        (0..self.shape.args)
            .filter(
                |&k| matches!(self.shape.arg_type(k as usize), ArgType::Val(t) if t.is_number()),
            )
            .collect()
    }

    /// One of `v`, by choice (`v` is not empty).
    fn one_of_index(&mut self, v: &[usize]) -> usize {
        v[self.pick(v.len() as u32) as usize]
    }

    /// One of `v`, by choice (`v` is not empty).
    fn one_of(&mut self, v: &[u16]) -> u16 {
        v[self.pick(v.len() as u32) as usize]
    }

    // ----- emission -----

    fn push_depth(&mut self, n: u32) {
        self.stack += n;
        self.max_stack = self.max_stack.max(self.stack);
    }

    fn pop_depth(&mut self, n: u32) {
        self.stack = self.stack.saturating_sub(n);
    }

    fn emit(&mut self, instr: Instr) -> usize {
        self.m.push(instr)
    }

    fn op(&mut self, opcode: Opcode) -> usize {
        self.emit(Instr::op(opcode))
    }

    /// One of `ops`, by choice.
    fn op_of(&mut self, ops: &[Opcode]) -> usize {
        let k = self.pick(ops.len() as u32) as usize;
        self.op(ops[k])
    }

    fn new_label(&mut self) -> Label {
        let l = self.m.new_label();
        self.reached.push(false);
        l
    }

    fn bind(&mut self, l: Label) {
        self.m.bind(l);
        if self.reached.get(l.index()).copied().unwrap_or(false) {
            self.reachable = true;
        }
    }

    fn mark_target(&mut self, l: Label) {
        if self.reachable
            && let Some(r) = self.reached.get_mut(l.index())
        {
            *r = true;
        }
    }

    /// The form of a branch: short or long by the configured mix (forced-long blocks are
    /// emitted by the statements themselves).
    fn branch_form(&mut self, long: Opcode) -> Opcode {
        let mix = self.cfg.branches;
        if self.weighted(&[mix.short as u32, mix.long as u32]) == 0 {
            long.short_form()
        } else {
            long
        }
    }

    fn branch(&mut self, long: Opcode, target: Label) -> usize {
        let opcode = self.branch_form(long);
        self.mark_target(target);
        let i = self.emit(Instr::branch(opcode, target));
        if matches!(long, Opcode::Br | Opcode::Leave) {
            self.reachable = false;
        }
        i
    }

    fn ldc(&mut self, v: i32) {
        let instr = match v {
            -1..=8 if self.pick(4) != 3 => Instr::op(match v {
                -1 => Opcode::Ldc_I4_M1,
                0 => Opcode::Ldc_I4_0,
                1 => Opcode::Ldc_I4_1,
                2 => Opcode::Ldc_I4_2,
                3 => Opcode::Ldc_I4_3,
                4 => Opcode::Ldc_I4_4,
                5 => Opcode::Ldc_I4_5,
                6 => Opcode::Ldc_I4_6,
                7 => Opcode::Ldc_I4_7,
                _ => Opcode::Ldc_I4_8,
            }),
            -128..=127 if self.pick(3) != 2 => Instr::new(Opcode::Ldc_I4_S, Operand::Int8(v as i8)),
            _ => Instr::new(Opcode::Ldc_I4, Operand::Int32(v)),
        };
        self.emit(instr);
        self.push_depth(1);
    }

    /// An `int64` constant: `ldc.i8`, or `ldc.i4` and `conv.i8` when it fits.
    fn ldc8(&mut self, v: i64) {
        match i32::try_from(v) {
            Ok(small) if self.pick(2) == 0 => {
                self.ldc(small);
                self.op(Opcode::Conv_I8);
            }
            _ => {
                self.emit(Instr::new(Opcode::Ldc_I8, Operand::Int64(v)));
                self.push_depth(1);
            }
        }
    }

    /// A constant of type `t`.
    fn constant(&mut self, t: ValType) {
        match t {
            ValType::I4 => {
                let v = self.int();
                self.ldc(v);
            }
            ValType::I8 => {
                let v = self.long();
                self.ldc8(v);
            }
            ValType::Struct | ValType::Class => self.expr_of(self.cfg.max_expr_depth, t),
        }
    }

    /// A local or argument access in one of its encodings (macro, short, long).
    fn var(&mut self, index: u16, macros: [Opcode; 4], short: Opcode, long: Opcode) -> usize {
        let form = self.pick(3);
        let instr = if index < 4 && form == 0 {
            Instr::op(macros[index as usize])
        } else if index <= 255 && form != 2 {
            Instr::new(short, Operand::Var(index))
        } else {
            Instr::new(long, Operand::Var(index))
        };
        self.emit(instr)
    }

    fn ldloc(&mut self, index: u16) -> usize {
        use Opcode::*;
        let i = self.var(index, [Ldloc_0, Ldloc_1, Ldloc_2, Ldloc_3], Ldloc_S, Ldloc);
        self.sites.local_operands.push(i);
        self.push_depth(1);
        i
    }

    fn stloc(&mut self, index: u16) -> usize {
        use Opcode::*;
        let i = self.var(index, [Stloc_0, Stloc_1, Stloc_2, Stloc_3], Stloc_S, Stloc);
        self.sites.local_operands.push(i);
        self.pop_depth(1);
        i
    }

    fn ldarg(&mut self, index: u16) {
        use Opcode::*;
        self.var(index, [Ldarg_0, Ldarg_1, Ldarg_2, Ldarg_3], Ldarg_S, Ldarg);
        self.push_depth(1);
    }

    fn starg(&mut self, index: u16) {
        let op = if index <= 255 && self.pick(2) == 0 {
            Opcode::Starg_S
        } else {
            Opcode::Starg
        };
        self.emit(Instr::new(op, Operand::Var(index)));
        self.pop_depth(1);
    }

    fn call(&mut self, callee: Callee, tail: bool) -> usize {
        let mut instr = Instr::new(Opcode::Call, Operand::Token(callee.token));
        if tail {
            instr.prefixes = self.m.add_prefixes(&[Prefix {
                opcode: Opcode::Tail,
                value: 0,
            }]);
        }
        let i = self.emit(instr);
        self.sites.calls.push(i);
        self.pop_depth(callee.params as u32);
        self.push_depth(!callee.returns_void as u32);
        i
    }

    // ----- method -----

    fn run(mut self) -> Generated {
        let cfg = self.cfg;
        self.tiny = self.chance(cfg.tiny_percent);
        self.lean = !self.tiny && self.chance(cfg.lean_stack_percent);
        self.shape.args = self.pick(cfg.max_args as u32 + 1) as u16;
        self.shape.returns_void = self.pick(2) == 0;
        if !self.tiny {
            self.user_locals = self.pick(cfg.max_locals as u32 + 1) as u16;
            if self.lean && cfg.max_locals > 0 {
                // A local keeps the header fat, so the small MaxStack is declared.
                self.user_locals = self.user_locals.max(1);
            }
        }
        self.shape.locals = self.user_locals;
        for _ in 0..self.shape.args {
            let t = if self.chance(cfg.byref_percent) {
                ArgType::RefI4
            } else {
                ArgType::Val(self.value_type())
            };
            self.shape.arg_types.push(t);
        }
        for _ in 0..self.user_locals {
            let t = self.value_type();
            self.shape.local_types.push(t);
        }
        if !self.shape.returns_void {
            // An `S` or `C` result is what return-value locals get wrong: a second chance.
            self.shape.ret = if self.struct_on() && self.chance(self.cfg.struct_percent) {
                ValType::Struct
            } else if self.class_on() && self.chance(self.cfg.object_percent) {
                ValType::Class
            } else {
                self.value_type()
            };
        }
        if cfg.calls {
            let n = self.pick(cfg.max_callees + 1);
            // One argument at most on a lean stack.
            let most_params = if self.lean {
                cfg.max_call_params.min(1)
            } else {
                cfg.max_call_params
            };
            for k in 0..n {
                let params = self.pick(most_params as u32 + 1) as u16;
                let returns_void = self.pick(2) == 1;
                let may_throw = cfg.throwing_calls && self.chance(30);
                self.callees.push(Callee {
                    token: FIRST_CALLEE + k,
                    params,
                    returns_void,
                    may_throw,
                });
            }
        }
        let inputs = (0..1 + self.pick(3))
            .map(|_| {
                (0..self.shape.args as usize)
                    .map(|k| match self.shape.arg_type(k) {
                        // An `S` is made of one number: `a` its low 32 bits, `b` all of it.
                        ArgType::Val(ValType::I8 | ValType::Struct) => self.long(),
                        ArgType::Val(ValType::I4 | ValType::Class) | ArgType::RefI4 => {
                            i64::from(self.int())
                        }
                    })
                    .collect()
            })
            .collect();

        let top = if self.tiny {
            self.budget = 3;
            self.pick(3) + 1
        } else {
            self.budget = cfg.max_statements.saturating_mul(3).max(1);
            let span = cfg.max_statements.saturating_sub(cfg.min_statements);
            cfg.min_statements + self.pick(span + 1)
        };
        let eh = !self.tiny && cfg.max_eh_depth > 0 && cfg.clause_kinds.any();
        // A `C` local holds a new `C` before anything reads it: those stores come first, so
        // no loop or try starts at IL_0000 then.
        let class_locals = self.locals_of(ValType::Class, self.user_locals);
        let entry_free = class_locals.is_empty();
        let entry_loop = entry_free
            && !self.tiny
            && cfg.loops
            && cfg.max_nesting > 0
            && self.chance(cfg.entry_loop_percent);
        let entry_try =
            entry_free && eh && cfg.max_nesting > 0 && self.chance(cfg.entry_try_percent);
        for k in class_locals {
            self.new_class(self.cfg.max_expr_depth);
            self.stloc(k);
        }
        let end_handler = eh && cfg.max_nesting > 0 && self.chance(cfg.end_handler_percent);
        let mut entered = false;
        if entry_loop {
            self.budget = self.budget.saturating_sub(1);
            self.entry_loop(entry_try);
            entered = true;
        } else if entry_try {
            self.budget = self.budget.saturating_sub(1);
            self.try_statement(false, None);
            entered = true;
        }
        if eh && self.reachable {
            if self.chance(cfg.huge_percent) {
                self.huge_try();
            }
            if self.chance(cfg.many_clauses_percent) {
                let n = 21 + self.pick(6);
                for _ in 0..n {
                    self.try_statement(true, None);
                }
            }
        }
        if self.reachable {
            let min = cfg.min_statements.min(top).saturating_sub(entered as u32);
            self.block_of(min, top.saturating_sub(entered as u32));
        }
        if end_handler && self.reachable {
            self.end_region();
        } else {
            self.method_end();
        }

        let max_stack = self.max_stack.min(u16::MAX as u32) as u16;
        let locals = self.shape.locals;
        self.m.header.local_sig = if locals > 0 { LOCALS_SIG } else { 0 };
        // An `S` local is read before it is written.
        let struct_local = self.shape.local_types.contains(&ValType::Struct);
        self.m.header.init_locals =
            locals > 0 && (self.zeroed_counter || struct_local || self.pick(4) != 0);
        self.m.header.max_stack = if self.lean {
            max_stack
        } else if self.tiny || (max_stack <= TINY_MAX_STACK && self.chance(20)) {
            max_stack.max(TINY_MAX_STACK)
        } else {
            max_stack.saturating_add(self.pick(3) as u16)
        };

        let mut resolver = SyntheticResolver::new()
            .method(self.shape.args, self.shape.returns_void)
            .locals(locals as u32)
            .call(EXCEPTION_CTOR, CallSig::instance(1, true))
            .token(EXCEPTION_CLASS)
            .token(OTHER_CLASS)
            .token(EXCEPTION_VALUE)
            .token(LOCALS_SIG)
            .token(STRUCT_TYPE)
            .token(STRUCT_A)
            .token(STRUCT_B)
            .token(CLASS_TYPE)
            .token(CLASS_X)
            .call(CLASS_CTOR, CallSig::instance(1, true));
        for c in &self.callees {
            resolver = resolver.call(c.token, c.sig());
        }
        for p in &self.peers {
            resolver = resolver.call(p.token(), p.sig());
        }
        Generated {
            method: self.m,
            resolver: resolver.closed(),
            shape: self.shape,
            callees: self.callees,
            peers: self.peers,
            calls_peers: self.calls_peers,
            inputs,
            max_stack,
            sites: self.sites,
        }
    }

    /// Whether a branch or `switch` (reachable or not) targets the end of the code so far.
    fn targets_here(&self) -> bool {
        let n = self.m.instrs.len();
        let m = &self.m;
        m.instrs
            .iter()
            .filter_map(|i| match i.operand {
                Operand::Target(l) => Some(l),
                // Switch targets are chained below; no other operand is a label.
                _ => None,
            })
            .chain(m.switch_targets.iter().copied())
            .any(|l| m.position(l) == Some(n))
    }

    fn method_end(&mut self) {
        let reachable = self.reachable;
        // A body may end with its last statement's `throw` or `ret`: no final `ret` then.
        let terminal = matches!(
            self.m.instrs.last().map(|i| i.opcode),
            Some(Opcode::Throw | Opcode::Ret)
        );
        let targets_end = self.targets_here();
        if !reachable && terminal && !targets_end && self.pick(2) == 1 {
            return;
        }
        if let Some(t) = self.shape.returns() {
            self.expr_of(0, t);
        }
        let i = self.op(Opcode::Ret);
        self.pop_depth(1);
        if reachable {
            self.sites.final_ret = Some(i);
        }
    }

    /// The end of a body whose last handler ends it: `br START; EXIT: ret; START: try { … }
    /// handlers`, every `leave` of the region going back to `EXIT`.
    fn end_region(&mut self) {
        let start = self.new_label();
        if self.reachable {
            self.branch(Opcode::Br, start);
        }
        let exit = self.new_label();
        self.bind(exit);
        // Reached by the region's leaves only, all of them backward.
        self.exit_statement();
        self.bind(start);
        self.try_statement(false, Some(exit));
    }

    /// A loop whose head is IL_0000: `head: body; c = c + 1; if (c < n) goto head`. No store
    /// can precede the head, so the counter counts up from the zeroed local.
    fn entry_loop(&mut self, with_try: bool) {
        debug_assert!(self.m.instrs.is_empty());
        let counter = self.counter();
        self.zeroed_counter = true;
        let n = 1 + self.pick(4) as i32;
        let head = self.new_label();
        self.bind(head);
        self.loop_depth += 1;
        self.nested(|g| {
            let eh_room = (g.regions.len() as u32) < g.cfg.max_eh_depth;
            if with_try && g.nesting < g.cfg.max_nesting && eh_room {
                // Its try starts at IL_0000 too.
                g.try_statement(false, None);
            }
            if g.reachable {
                g.block();
            }
        });
        self.loop_depth -= 1;
        if self.lean || self.pick(2) == 1 {
            // c = -(~c), then a switch of n targets, all the head: taken while c < n.
            self.ldloc(counter);
            self.op(Opcode::Not);
            self.op(Opcode::Neg);
            self.stloc(counter);
            self.ldloc(counter);
            self.pop_depth(1);
            let table = self.m.add_switch(&vec![head; n as usize]);
            self.mark_target(head);
            self.emit(Instr::new(Opcode::Switch, Operand::Switch(table)));
        } else {
            self.ldloc(counter);
            self.ldc(1);
            self.op(Opcode::Add);
            self.pop_depth(1);
            self.op(Opcode::Dup);
            self.push_depth(1);
            self.stloc(counter);
            self.ldc(n);
            self.pop_depth(2);
            self.branch(Opcode::Blt, head);
        }
    }

    // ----- branches at the limits of the short form -----

    /// Bytes `instrs` take as laid out in their current forms.
    fn size_of(&self, instrs: &[Instr]) -> usize {
        instrs
            .iter()
            .map(|i| crate::ir::layout::instr_size(&self.m, i, i.opcode))
            .sum()
    }

    /// Bytes of the instructions emitted since index `from`.
    fn size_since(&self, from: usize) -> usize {
        let emitted = self.m.instrs.get(from..).unwrap_or(&[]);
        self.size_of(emitted)
    }

    /// A short branch whose displacement is a limit of the short form or up to 3 bytes short
    /// of it (the exhausted stream: exactly +127), across a span of code a rewriter grows.
    fn edge_statement(&mut self) {
        let backward = self.cfg.loops && self.pick(2) == 1;
        let slack = self.pick(4) as usize;
        if backward {
            self.edge_loop(slack);
        } else {
            self.edge_forward(slack);
        }
    }

    /// `cond; b<cc>.s END; <127 - slack bytes>; END:`.
    fn edge_forward(&mut self, slack: usize) {
        let end = self.new_label();
        let choices = if self.lean { 2 } else { COND_BRANCHES.len() };
        let (op, pops) = COND_BRANCHES[self.pick(choices as u32) as usize];
        let t = self.operand_type();
        for _ in 0..pops {
            self.expr_of(1, t);
        }
        self.pop_depth(pops as u32);
        self.mark_target(end);
        self.emit(Instr::branch(op.short_form(), end));
        let from = self.m.instrs.len();
        self.span(127 - slack);
        debug_assert_eq!(self.size_since(from), 127 - slack);
        self.bind(end);
    }

    /// `c = n; head: <span>; c = ~(-c); brtrue.s head`, the branch's displacement
    /// `-(128 - slack)`.
    fn edge_loop(&mut self, slack: usize) {
        let counter = self.counter();
        let n = 1 + self.pick(4) as i32;
        self.ldc(n);
        self.stloc(counter);
        let head = self.new_label();
        self.bind(head);
        let from = self.m.instrs.len();
        let var = |short: Opcode, long: Opcode| {
            let op = if counter <= 255 { short } else { long };
            Instr::new(op, Operand::Var(counter))
        };
        let tail = [
            var(Opcode::Ldloc_S, Opcode::Ldloc),
            Instr::op(Opcode::Neg),
            Instr::op(Opcode::Not),
            var(Opcode::Stloc_S, Opcode::Stloc),
            var(Opcode::Ldloc_S, Opcode::Ldloc),
        ];
        // The branch itself is 2 bytes.
        let tail_size = self.size_of(&tail) + 2;
        self.span(128 - slack - tail_size);
        for (k, instr) in tail.into_iter().enumerate() {
            let i = self.emit(instr);
            if k != 1 && k != 2 {
                self.sites.local_operands.push(i);
            }
            match k {
                0 | 4 => self.push_depth(1),
                3 => self.pop_depth(1),
                _ => {}
            }
        }
        self.pop_depth(1);
        self.mark_target(head);
        self.emit(Instr::branch(Opcode::Brtrue_S, head));
        debug_assert_eq!(self.size_since(from), 128 - slack);
    }

    /// Exactly `bytes` bytes of code that starts and ends at an empty stack and branches
    /// nowhere outside itself in a short form: calls with constant arguments, and exits (`ret`,
    /// a `tail.` call, or a long `leave` inside a region) behind a short conditional branch,
    /// padded with `ldc.i4; pop` and `nop`s to the byte.
    fn span(&mut self, bytes: usize) {
        let mut left = bytes;
        // The largest piece: `ldarg i; brtrue.s; tail. call f(ldc.i4 …); ret`.
        let params = self.callees.iter().map(|c| c.params).max().unwrap_or(0) as usize;
        let largest = 14 + 5 * params;
        while left >= largest {
            // A `ret` of an `S` or a `C` takes more bytes than a piece may.
            let can_exit = if self.regions.is_empty() {
                self.shape.returns().is_none_or(ValType::is_number)
            } else {
                !self.leave_targets.is_empty()
            };
            let w = [
                1,
                if self.callees.is_empty() { 0 } else { 2 },
                if can_exit { 3 } else { 0 },
            ];
            let before = self.m.instrs.len();
            match self.weighted(&w) {
                0 => self.pad(6),
                1 => {
                    let k = self.pick(self.callees.len() as u32) as usize;
                    let c = self.callees[k];
                    self.constant_call(c, false);
                    if !c.returns_void {
                        self.op(Opcode::Pop);
                        self.pop_depth(1);
                    }
                }
                _ => self.early_exit(),
            }
            left = left.saturating_sub(self.size_since(before));
        }
        self.pad(left);
    }

    /// A call with `ldc.i4` arguments (5 bytes each), `tail.`-prefixed when asked.
    fn constant_call(&mut self, c: Callee, tail: bool) {
        for _ in 0..c.params {
            let v = self.int();
            self.emit(Instr::new(Opcode::Ldc_I4, Operand::Int32(v)));
            self.push_depth(1);
        }
        self.call(c, tail);
    }

    /// `<leaf>; brtrue.s/brfalse.s SKIP; <exit>; SKIP:`.
    fn early_exit(&mut self) {
        let skip = self.new_label();
        let v = self.int() as i8;
        let args = self.number_args();
        let cond = if !args.is_empty() && self.pick(3) != 0 {
            let k = self.one_of(&args);
            let op = if k <= 255 {
                Opcode::Ldarg_S
            } else {
                Opcode::Ldarg
            };
            Instr::new(op, Operand::Var(k))
        } else {
            Instr::new(Opcode::Ldc_I4_S, Operand::Int8(v))
        };
        self.emit(cond);
        self.push_depth(1);
        let op = if self.pick(2) == 0 {
            Opcode::Brfalse_S
        } else {
            Opcode::Brtrue_S
        };
        self.pop_depth(1);
        self.mark_target(skip);
        self.emit(Instr::branch(op, skip));
        if self.regions.is_empty() {
            let rv = self.shape.returns_void;
            let tail: Vec<Callee> = self
                .callees
                .iter()
                .filter(|c| c.returns_void == rv && (rv || self.shape.ret == ValType::I4))
                .copied()
                .collect();
            if self.cfg.prefixes && !tail.is_empty() && self.pick(3) == 0 {
                let c = tail[self.pick(tail.len() as u32) as usize];
                self.constant_call(c, true);
                let i = self.m.instrs.len() - 1;
                self.sites.tail_calls.push(i);
            } else if !rv {
                match self.shape.ret {
                    ValType::I4 => {
                        let v = self.int();
                        self.emit(Instr::new(Opcode::Ldc_I4, Operand::Int32(v)));
                        self.push_depth(1);
                    }
                    ValType::I8 => {
                        let v = self.long();
                        self.emit(Instr::new(Opcode::Ldc_I8, Operand::Int64(v)));
                        self.push_depth(1);
                    }
                    // `span` takes no exit for these; a leaf keeps the code valid anyway.
                    ValType::Struct | ValType::Class => {
                        self.expr_of(self.cfg.max_expr_depth, self.shape.ret)
                    }
                }
            }
            self.op(Opcode::Ret);
            self.pop_depth(1);
            self.reachable = false;
        } else if !self.leave_targets.is_empty() {
            let k = self.pick(self.leave_targets.len() as u32) as usize;
            let target = self.leave_targets[self.leave_targets.len() - 1 - k];
            self.mark_target(target);
            self.emit(Instr::branch(Opcode::Leave, target));
            self.reachable = false;
        }
        self.bind(skip);
    }

    /// Exactly `bytes` bytes of `ldc.i4 v; pop` (6), `ldc.i4.s v; pop` (3) and `nop` (1).
    fn pad(&mut self, bytes: usize) {
        let mut left = bytes;
        while left >= 6 {
            let v = self.int();
            self.emit(Instr::new(Opcode::Ldc_I4, Operand::Int32(v)));
            self.push_depth(1);
            self.op(Opcode::Pop);
            self.pop_depth(1);
            left -= 6;
        }
        if left >= 3 {
            let v = self.int() as i8;
            self.emit(Instr::new(Opcode::Ldc_I4_S, Operand::Int8(v)));
            self.push_depth(1);
            self.op(Opcode::Pop);
            self.pop_depth(1);
            left -= 3;
        }
        for _ in 0..left {
            self.op(Opcode::Nop);
        }
    }

    // ----- statements (all start and end at an empty stack) -----

    /// Between `min` and `max` statements; stops after a statement that never falls through.
    fn block_of(&mut self, min: u32, max: u32) {
        for k in 0..max {
            if self.budget == 0 || (k >= min && self.pick(4) == 0) {
                break;
            }
            self.budget -= 1;
            self.statement();
            if !self.reachable {
                break;
            }
        }
    }

    /// A nested block: fewer statements the deeper it is.
    fn block(&mut self) {
        let max = (self.cfg.max_statements / (self.nesting + 1)).clamp(1, 4);
        self.block_of(0, max);
    }

    /// A handler's block: never empty while the budget lasts, so that handlers have effects a
    /// rewrite could lose.
    fn handler_block(&mut self) {
        let max = (self.cfg.max_statements / (self.nesting + 1)).clamp(1, 4);
        self.block_of(1, max);
    }

    fn in_handler_like(&self) -> bool {
        self.regions
            .iter()
            .any(|r| matches!(r, Region::Finally | Region::Fault | Region::Catch))
    }

    /// Whether code here lies in a catch handler (where `rethrow` is legal): the innermost
    /// region other than a try is one.
    fn in_catch(&self) -> bool {
        self.regions.iter().rev().find(|r| **r != Region::Try) == Some(&Region::Catch)
    }

    /// Whether a `rethrow` goes here: directly in a catch handler, not in a try nested in it.
    /// CoreCLR 3.1 on Linux mistakes a later exception for the rethrown one when a `rethrow` is
    /// caught inside its own handler and that handler then throws again (mono and ECMA-335
    /// agree it is the new one), so the generator never lets a handler catch its own rethrow.
    fn rethrow_here(&self) -> bool {
        self.regions.last() == Some(&Region::Catch)
    }

    fn statement(&mut self) {
        debug_assert_eq!(self.stack, 0);
        let cfg = self.cfg;
        if self.reachable {
            let i = self.m.instrs.len();
            self.sites.statements.push((i, self.in_catch()));
            if !self.in_handler_like() {
                self.sites.plain_statements.push(i);
            }
        }
        let nest = self.nesting < cfg.max_nesting;
        let eh_depth = self.regions.len() as u32;
        let can_try = !self.tiny && nest && eh_depth < cfg.max_eh_depth && cfg.clause_kinds.any();
        let can_exit = self.regions.is_empty() || !self.leave_targets.is_empty();
        let weights = [
            4,                        // store or pop
            1,                        // void call
            if nest { 3 } else { 0 }, // if / else
            if nest && cfg.loops && !self.tiny {
                2
            } else {
                0
            }, // loop
            if nest && cfg.switches { 1 } else { 0 }, // switch
            if can_try { 3 } else { 0 }, // try
            1,                        // throw
            if can_exit { 1 } else { 0 }, // ret / leave
            if self.rethrow_here() { 1 } else { 0 }, // rethrow
            if nest && !self.tiny {
                cfg.branches.forced_long as u32
            } else {
                0
            }, // forced-long block
            if self.tiny {
                0
            } else {
                cfg.branches.edge as u32
            }, // short branch at a limit
            1,                        // nop
            if self.args_of(ArgType::RefI4).is_empty() || self.lean {
                0
            } else {
                3
            }, // store through an int32&
            if self.callable_peers(None).is_empty() {
                0
            } else {
                2
            }, // call a generated method
            if self.struct_on() { 2 } else { 0 }, // initobj or stfld of an `S`
            if self.class_on() && !self.lean { 1 } else { 0 }, // stfld of a `C`
        ];
        match self.weighted(&weights) {
            0 => self.store_statement(),
            1 => self.call_statement(),
            2 => self.if_statement(),
            3 => self.loop_statement(),
            4 => self.switch_statement(),
            5 => self.try_statement(false, None),
            6 => self.throw_statement(),
            7 => self.exit_statement(),
            8 => {
                self.op(Opcode::Rethrow);
                self.reachable = false;
            }
            9 => self.long_block(),
            10 => self.edge_statement(),
            11 => {
                self.op(Opcode::Nop);
            }
            12 => self.store_through(),
            13 => self.peer_call_statement(),
            14 => self.struct_statement(),
            _ => self.class_statement(),
        }
    }

    fn store_statement(&mut self) {
        let start = self.m.instrs.len();
        let reachable = self.reachable;
        let t = self.value_type();
        self.expr_of(0, t);
        let simple = self.m.instrs.len() == start + 1;
        let locals = self.locals_of(t, self.user_locals);
        let args = self.args_of(ArgType::Val(t));
        match self.pick(3) {
            1 if !locals.is_empty() => {
                let k = self.one_of(&locals);
                self.stloc(k);
                if simple && reachable {
                    self.sites.simple_stores.push(start);
                }
            }
            2 if !args.is_empty() => {
                let k = self.one_of(&args);
                self.starg(k);
            }
            _ => {
                self.op(Opcode::Pop);
                self.pop_depth(1);
            }
        }
    }

    /// The generated methods a call may go to here: outside loops, and only those whose
    /// `int32&` parameters can be given an address (an `int32` local the program writes, an
    /// `int32` argument, or an `int32&` argument), returning `ret` when asked.
    fn callable_peers(&self, ret: Option<Option<ValType>>) -> Vec<usize> {
        if self.loop_depth > 0 || self.lean {
            return Vec::new();
        }
        let addressable = !self.locals_of(ValType::I4, self.user_locals).is_empty()
            || self
                .shape
                .arg_types
                .iter()
                .any(|&t| matches!(t, ArgType::Val(ValType::I4) | ArgType::RefI4));
        (0..self.peers.len())
            .filter(|&k| {
                let p = &self.peers[k];
                // An `S` argument is built in a local, which a tiny body has not.
                let buildable = !self.tiny || !p.args.contains(&ArgType::Val(ValType::Struct));
                (addressable || !p.args.contains(&ArgType::RefI4))
                    && buildable
                    && ret.is_none_or(|r| r == p.ret)
            })
            .collect()
    }

    /// A call to the generated method `peers[k]`: an expression of its type per value
    /// parameter, an address per `int32&` one.
    fn peer_call(&mut self, k: usize, level: u32) {
        let p = self.peers[k].clone();
        for &a in &p.args {
            match a {
                ArgType::Val(t) => self.expr_of(level + 1, t),
                ArgType::RefI4 => self.address(),
            }
        }
        let i = self.emit(Instr::new(Opcode::Call, Operand::Token(p.token())));
        self.sites.calls.push(i);
        self.calls_peers = true;
        self.pop_depth(p.args.len() as u32);
        self.push_depth(p.ret.is_some() as u32);
    }

    /// The address of an `int32`: `ldloca` of a local the program writes (never a loop
    /// counter), `ldarga` of an `int32` argument, or an `int32&` argument itself.
    fn address(&mut self) {
        let locals = self.locals_of(ValType::I4, self.user_locals);
        let args = self.args_of(ArgType::Val(ValType::I4));
        let refs = self.args_of(ArgType::RefI4);
        match self.weighted(&[
            (!locals.is_empty()) as u32 * 2,
            (!args.is_empty()) as u32,
            (!refs.is_empty()) as u32,
        ]) {
            0 => {
                let k = self.one_of(&locals);
                let op = if k <= 255 {
                    Opcode::Ldloca_S
                } else {
                    Opcode::Ldloca
                };
                let i = self.emit(Instr::new(op, Operand::Var(k)));
                self.sites.local_operands.push(i);
            }
            1 => {
                let k = self.one_of(&args);
                let op = if k <= 255 {
                    Opcode::Ldarga_S
                } else {
                    Opcode::Ldarga
                };
                self.emit(Instr::new(op, Operand::Var(k)));
            }
            _ => {
                let k = self.one_of(&refs);
                self.ldarg(k);
                return;
            }
        }
        self.push_depth(1);
    }

    /// A call to a generated method as a statement, its result popped.
    fn peer_call_statement(&mut self) {
        let peers = self.callable_peers(None);
        let k = peers[self.pick(peers.len() as u32) as usize];
        self.peer_call(k, 0);
        if self.peers[k].ret.is_some() {
            self.op(Opcode::Pop);
            self.pop_depth(1);
        }
    }

    /// `ldarg k; <int32>; stind.i4` for an `int32&` argument `k`.
    fn store_through(&mut self) {
        let refs = self.args_of(ArgType::RefI4);
        let k = self.one_of(&refs);
        self.ldarg(k);
        self.expr(1);
        self.op(Opcode::Stind_I4);
        self.pop_depth(2);
    }

    /// The address of an `S`: `ldloca` of a local of type `S` (the scratch one when the body
    /// has none of its own), or `ldarga` of an `S` argument when `args` allows it.
    fn struct_address(&mut self, args: bool) {
        let locals = self.locals_of(ValType::Struct, self.user_locals);
        let params = if args {
            self.args_of(ArgType::Val(ValType::Struct))
        } else {
            Vec::new()
        };
        match self.weighted(&[
            1,
            2 * (!locals.is_empty()) as u32,
            (!params.is_empty()) as u32,
        ]) {
            0 => {
                let k = self.scratch();
                self.ldloca(k);
            }
            1 => {
                let k = self.one_of(&locals);
                self.ldloca(k);
            }
            _ => {
                let k = self.one_of(&params);
                let op = if k <= 255 {
                    Opcode::Ldarga_S
                } else {
                    Opcode::Ldarga
                };
                self.emit(Instr::new(op, Operand::Var(k)));
                self.push_depth(1);
            }
        }
    }

    fn ldloca(&mut self, k: u16) {
        let op = if k <= 255 && self.pick(4) != 3 {
            Opcode::Ldloca_S
        } else {
            Opcode::Ldloca
        };
        let i = self.emit(Instr::new(op, Operand::Var(k)));
        self.sites.local_operands.push(i);
        self.push_depth(1);
    }

    /// `<address of an S>; initobj S`, or `<address>; <value>; stfld S::a` (or `S::b`).
    fn struct_statement(&mut self) {
        // A store needs two stack slots.
        let store = !self.lean && self.pick(3) != 0;
        self.struct_address(store);
        if store {
            if self.pick(2) == 0 {
                self.expr(1);
                self.emit(Instr::new(Opcode::Stfld, Operand::Token(STRUCT_A)));
            } else {
                self.expr_of(1, ValType::I8);
                self.emit(Instr::new(Opcode::Stfld, Operand::Token(STRUCT_B)));
            }
            self.pop_depth(2);
        } else {
            self.emit(Instr::new(Opcode::Initobj, Operand::Token(STRUCT_TYPE)));
            self.pop_depth(1);
        }
    }

    /// `<C>; <int32>; stfld C::x`.
    fn class_statement(&mut self) {
        self.expr_class(1);
        self.expr(1);
        self.emit(Instr::new(Opcode::Stfld, Operand::Token(CLASS_X)));
        self.pop_depth(2);
    }

    fn call_statement(&mut self) {
        if self.callees.is_empty() {
            self.op(Opcode::Nop);
            return;
        }
        let k = self.pick(self.callees.len() as u32) as usize;
        let c = self.callees[k];
        for _ in 0..c.params {
            self.expr(1);
        }
        self.call(c, false);
        if !c.returns_void {
            self.op(Opcode::Pop);
            self.pop_depth(1);
        }
    }

    /// Emits a condition and a branch to `target` taken on one of its outcomes.
    fn cond_branch(&mut self, target: Label, level: u32) -> usize {
        // The first two pop one operand: the only ones on a lean stack.
        let choices = if self.lean { 2 } else { COND_BRANCHES.len() };
        let (op, pops) = COND_BRANCHES[self.pick(choices as u32) as usize];
        let t = self.operand_type();
        for _ in 0..pops {
            self.expr_of(level + 1, t);
        }
        self.pop_depth(pops as u32);
        self.branch(op, target)
    }

    fn nested<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> R {
        self.nesting += 1;
        let r = f(self);
        self.nesting -= 1;
        r
    }

    fn if_statement(&mut self) {
        let else_label = self.new_label();
        let end = self.new_label();
        self.cond_branch(else_label, 0);
        self.nested(|g| g.block());
        let then_reaches = self.reachable;
        let has_else = self.pick(2) == 1;
        if has_else {
            let br = self.branch(Opcode::Br, end);
            self.bind(else_label);
            self.nested(|g| g.block());
            if then_reaches && self.reachable {
                self.sites.merges.push(br);
            }
        } else {
            self.bind(else_label);
        }
        self.bind(end);
    }

    /// `do { body } while (--counter != 0)`, the counter a fresh local set to 1..=4.
    fn loop_statement(&mut self) {
        let counter = self.counter();
        let n = 1 + self.pick(4) as i32;
        self.ldc(n);
        self.stloc(counter);
        let head = self.new_label();
        self.bind(head);
        self.loop_depth += 1;
        self.nested(|g| g.block());
        self.loop_depth -= 1;
        let form = if self.lean { 2 } else { self.pick(3) };
        self.ldloc(counter);
        if form == 2 {
            // c - 1 as ~(-c): one stack slot.
            self.op(Opcode::Neg);
            self.op(Opcode::Not);
            self.stloc(counter);
            self.ldloc(counter);
            self.pop_depth(1);
            self.branch(Opcode::Brtrue, head);
            return;
        }
        self.ldc(1);
        self.op(Opcode::Sub);
        self.pop_depth(1);
        if form == 0 {
            self.op(Opcode::Dup);
            self.push_depth(1);
            self.stloc(counter);
            self.pop_depth(1);
            self.branch(Opcode::Brtrue, head);
        } else {
            self.stloc(counter);
            self.ldloc(counter);
            self.ldc(0);
            self.pop_depth(2);
            self.branch(Opcode::Bgt, head);
        }
    }

    fn switch_statement(&mut self) {
        let arms = 1 + self.pick(self.cfg.max_switch_targets.max(1));
        let labels: Vec<Label> = (0..arms).map(|_| self.new_label()).collect();
        let end = self.new_label();
        let count = self.pick(self.cfg.max_switch_targets + 1);
        let targets: Vec<Label> = (0..count)
            .map(|_| labels[self.pick(arms) as usize])
            .collect();
        self.expr(0);
        self.pop_depth(1);
        let table = self.m.add_switch(&targets);
        for t in &targets {
            self.mark_target(*t);
        }
        self.emit(Instr::new(Opcode::Switch, Operand::Switch(table)));
        // Fall-through: the default arm.
        self.nested(|g| g.block());
        for (k, l) in labels.iter().enumerate() {
            self.branch(Opcode::Br, end);
            self.bind(*l);
            if k + 1 == labels.len() || self.pick(3) != 0 {
                self.nested(|g| g.block());
            }
        }
        self.bind(end);
    }

    /// A straight-line block of more than 127 bytes, so that short branches across it widen.
    fn long_block(&mut self) {
        let end = self.new_label();
        self.cond_branch(end, 0);
        let n = 22 + self.pick(10);
        for _ in 0..n {
            let v = self.u.arbitrary::<i32>().unwrap_or(0);
            self.emit(Instr::new(Opcode::Ldc_I4, Operand::Int32(v)));
            self.push_depth(1);
            self.op(Opcode::Pop);
            self.pop_depth(1);
        }
        self.bind(end);
    }

    fn throw_statement(&mut self) {
        if self.pick(2) == 0 {
            let v = self.int();
            self.ldc(v);
        } else {
            self.expr(1);
        }
        self.emit(Instr::new(Opcode::Newobj, Operand::Token(EXCEPTION_CTOR)));
        self.op(Opcode::Throw);
        self.pop_depth(1);
        self.reachable = false;
    }

    /// `ret` (outside every region, possibly a `tail.` call) or `leave` to a legal target.
    fn exit_statement(&mut self) {
        if self.regions.is_empty() {
            let rv = self.shape.returns_void;
            let tail: Vec<Callee> = self
                .callees
                .iter()
                .filter(|c| c.returns_void == rv && (rv || self.shape.ret == ValType::I4))
                .copied()
                .collect();
            if self.cfg.prefixes && !tail.is_empty() && self.pick(3) == 0 {
                let c = tail[self.pick(tail.len() as u32) as usize];
                for _ in 0..c.params {
                    self.expr(1);
                }
                let i = self.call(c, true);
                self.sites.tail_calls.push(i);
            } else if !rv {
                self.expr_of(0, self.shape.ret);
            }
            self.op(Opcode::Ret);
            self.pop_depth(1);
            self.reachable = false;
        } else if !self.leave_targets.is_empty() {
            let k = self.pick(self.leave_targets.len() as u32) as usize;
            // Innermost targets first in the choice: the exhausted stream leaves one level.
            let target = self.leave_targets[self.leave_targets.len() - 1 - k];
            self.branch(Opcode::Leave, target);
        }
    }

    fn enter(&mut self, region: Region) {
        self.regions.push(region);
        self.nesting += 1;
    }

    fn exit(&mut self) {
        self.regions.pop();
        self.nesting -= 1;
    }

    /// The code of a catch or filter handler after the exception object is on the stack (`cast`:
    /// cast it to the generated exception before reading its field). When
    /// the handler ends the body (`last`), nothing follows it: it ends in a `leave`, `throw` or
    /// `rethrow`, or in a region ending the body in turn.
    fn catch_body(&mut self, after: Label, last: bool, cast: bool) {
        self.push_depth(1);
        let numbers: Vec<u16> = (0..self.user_locals)
            .filter(|&k| self.shape.local_type(k as usize).is_number())
            .collect();
        if self.user_locals > 0 && self.pick(2) == 0 && !numbers.is_empty() {
            if cast {
                self.emit(Instr::new(
                    Opcode::Castclass,
                    Operand::Token(EXCEPTION_CLASS),
                ));
            }
            self.emit(Instr::new(Opcode::Ldfld, Operand::Token(EXCEPTION_VALUE)));
            let k = self.one_of(&numbers);
            if self.shape.local_type(k as usize) == ValType::I8 {
                self.op(Opcode::Conv_I8);
            }
            self.stloc(k);
        } else {
            self.op(Opcode::Pop);
            self.pop_depth(1);
        }
        self.enter(Region::Catch);
        self.leave_targets.push(after);
        self.handler_block();
        if last && self.reachable {
            let room = self.nesting < self.cfg.max_nesting
                && (self.regions.len() as u32) < self.cfg.max_eh_depth;
            if room && self.pick(4) == 3 {
                self.try_statement(false, Some(after));
            }
        }
        self.leave_targets.pop();
        self.exit();
        // Nothing may fall off the end of the code, even dead code (a loop's dead back
        // branch), and a dead branch to the end would target no instruction: a `leave` then.
        let falls = self.m.instrs.last().is_none_or(|i| !i.flow().ends_block());
        if !last || self.reachable || falls || self.targets_here() {
            self.branch(Opcode::Leave, after);
        }
    }

    /// A filter: the exception object on the stack, an `int32` verdict left for `endfilter`.
    fn filter_body(&mut self) {
        self.push_depth(1);
        // A comparison needs two slots: a constant verdict on a lean stack.
        let choice = if self.lean { 0 } else { self.pick(3) };
        match choice {
            0 => {
                self.op(Opcode::Pop);
                self.pop_depth(1);
                let v = self.pick(2) as i32;
                self.ldc(v);
            }
            _ => {
                // A filter receives an `object` (II.19): cast before reading the field, or
                // the body is not verifiable.
                self.emit(Instr::new(
                    Opcode::Castclass,
                    Operand::Token(EXCEPTION_CLASS),
                ));
                self.emit(Instr::new(Opcode::Ldfld, Operand::Token(EXCEPTION_VALUE)));
                let v = self.int();
                let args = self.args_of(ArgType::Val(ValType::I4));
                if !args.is_empty() && self.pick(3) == 0 {
                    let k = self.one_of(&args);
                    self.ldarg(k);
                } else {
                    self.ldc(v);
                }
                self.op_of(COMPARE);
                self.pop_depth(1);
            }
        }
        let i = self.op(Opcode::Endfilter);
        self.pop_depth(1);
        self.sites.endfilters.push(i);
        self.reachable = false;
    }

    /// `try { … } handlers`; `small` keeps the body to one statement (for many-clause bodies).
    /// With `end`, the region ends the body: `end` is the label before it that every `leave`
    /// goes to, and the last handler's last instruction is the body's.
    fn try_statement(&mut self, small: bool, end: Option<Label>) {
        let kinds = self.cfg.clause_kinds;
        let kind = [
            (kinds.catch, ClauseKind::Catch),
            (kinds.filter, ClauseKind::Filter),
            (kinds.finally, ClauseKind::Finally),
            (kinds.fault, ClauseKind::Fault),
        ];
        let weights: Vec<u32> = kind.iter().map(|(on, _)| *on as u32).collect();
        let first = kind[self.weighted(&weights)].1;
        let after = end.unwrap_or_else(|| self.new_label());
        let try_start = self.new_label();
        self.bind(try_start);

        self.enter(Region::Try);
        self.leave_targets.push(after);
        if small {
            self.budget = self.budget.saturating_add(1);
            self.block_of(1, 1);
        } else {
            self.block();
        }
        self.leave_targets.pop();
        self.exit();
        let leave = self.branch(Opcode::Leave, after);
        self.sites.try_leaves.push(leave);
        let try_end = self.new_label();
        self.bind(try_end);

        let mut clauses = Vec::new();
        match first {
            ClauseKind::Finally | ClauseKind::Fault => {
                let handler_start = self.new_label();
                self.bind(handler_start);
                // Handlers are entered by the runtime: their code is reachable.
                self.reachable = true;
                let saved = std::mem::take(&mut self.leave_targets);
                let region = if first == ClauseKind::Finally {
                    Region::Finally
                } else {
                    Region::Fault
                };
                self.enter(region);
                if !small {
                    self.handler_block();
                }
                self.exit();
                self.leave_targets = saved;
                let end = self.op(Opcode::Endfinally);
                if first == ClauseKind::Finally {
                    self.sites.finally_ends.push((end, after));
                }
                self.reachable = false;
                let handler_end = self.new_label();
                self.bind(handler_end);
                clauses.push(EhClause {
                    kind: first,
                    try_start,
                    try_end,
                    handler_start,
                    handler_end,
                    filter_start: None,
                    class_token: 0,
                    extra_flags: 0,
                });
            }
            _ => {
                let n = if small { 1 } else { 1 + self.pick(3) };
                let mut kind_now = first;
                for k in 0..n {
                    if k > 0 {
                        let w = [kinds.catch as u32, kinds.filter as u32];
                        kind_now = if self.weighted(&w) == 0 && kinds.catch {
                            ClauseKind::Catch
                        } else if kinds.filter {
                            ClauseKind::Filter
                        } else {
                            ClauseKind::Catch
                        };
                    }
                    // Its own label even where it meets the try's end, so that edits can
                    // move region ends and starts apart.
                    let start = self.new_label();
                    self.bind(start);
                    self.reachable = true;
                    let filter_start = if kind_now == ClauseKind::Filter {
                        self.filter_body();
                        let h = self.new_label();
                        self.bind(h);
                        self.reachable = true;
                        Some((start, h))
                    } else {
                        None
                    };
                    let handler_start = filter_start.map_or(start, |(_, h)| h);
                    let class_token = if self.pick(5) == 4 {
                        OTHER_CLASS
                    } else {
                        EXCEPTION_CLASS
                    };
                    // A filter's handler receives an `object`, another class's catch that
                    // class: the generated exception's field needs a cast first.
                    let cast = kind_now == ClauseKind::Filter || class_token != EXCEPTION_CLASS;
                    self.catch_body(after, end.is_some() && k + 1 == n, cast);
                    let handler_end = self.new_label();
                    self.bind(handler_end);
                    clauses.push(EhClause {
                        kind: kind_now,
                        try_start,
                        try_end,
                        handler_start,
                        handler_end,
                        filter_start: filter_start.map(|(f, _)| f),
                        class_token: if kind_now == ClauseKind::Catch {
                            class_token
                        } else {
                            0
                        },
                        extra_flags: 0,
                    });
                }
            }
        }
        // Inner clauses were pushed while generating the bodies: table order holds.
        self.m.clauses.extend(clauses);
        self.reachable = false;
        if end.is_none() {
            self.bind(after);
        }
    }

    /// A try region holding a straight-line block that takes the code beyond 64 KiB.
    fn huge_try(&mut self) {
        let after = self.new_label();
        let try_start = self.new_label();
        self.bind(try_start);
        for k in 0..13_200 {
            self.emit(Instr::new(Opcode::Ldc_I4, Operand::Int32(k)));
            self.op(Opcode::Pop);
        }
        self.push_depth(1);
        self.pop_depth(1);
        self.branch(Opcode::Leave, after);
        let try_end = self.new_label();
        self.bind(try_end);
        let handler_start = self.new_label();
        self.bind(handler_start);
        self.reachable = true;
        self.op(Opcode::Endfinally);
        self.reachable = false;
        let handler_end = self.new_label();
        self.bind(handler_end);
        self.m.clauses.push(EhClause {
            kind: ClauseKind::Finally,
            try_start,
            try_end,
            handler_start,
            handler_end,
            filter_start: None,
            class_token: 0,
            extra_flags: 0,
        });
        self.bind(after);
    }

    // ----- expressions (each pushes one value of the type asked for) -----

    /// An `int32` expression.
    fn expr(&mut self, level: u32) {
        self.expr_of(level, ValType::I4);
    }

    fn expr_of(&mut self, level: u32, t: ValType) {
        match t {
            ValType::I4 => self.expr_i4(level),
            ValType::I8 => self.expr_i8(level),
            ValType::Struct => self.expr_struct(level),
            ValType::Class => self.expr_class(level),
        }
    }

    /// A field of an `S`: `a` (`int32`) or `b` (`int64`) as `field` says, read from the value
    /// (`ldloc`, `ldarg`, any `S` expression, or a boxed one through `unbox`) or through an
    /// address (`ldloca`, `ldarga`). Leaves only (one slot) at the depth limit.
    fn struct_field(&mut self, level: u32, field: u32) {
        let deeper = !self.lean && level < self.cfg.max_expr_depth;
        let locals = self.locals_of(ValType::Struct, self.shape.locals);
        let args = self.args_of(ArgType::Val(ValType::Struct));
        match self.weighted(&[
            2,
            (!locals.is_empty()) as u32,
            (!args.is_empty()) as u32,
            deeper as u32 * 2,
            deeper as u32,
        ]) {
            0 => self.struct_address(true),
            1 => {
                let k = self.one_of(&locals);
                self.ldloc(k);
            }
            2 => {
                let k = self.one_of(&args);
                self.ldarg(k);
            }
            3 => self.expr_struct(level + 1),
            _ => {
                self.expr_struct(level + 1);
                self.emit(Instr::new(Opcode::Box, Operand::Token(STRUCT_TYPE)));
                self.emit(Instr::new(Opcode::Unbox, Operand::Token(STRUCT_TYPE)));
            }
        }
        self.emit(Instr::new(Opcode::Ldfld, Operand::Token(field)));
    }

    /// An `S` value: one built in the scratch local (`initobj`, then maybe its fields set),
    /// an argument, a local, a boxed copy unboxed again, a call, or a conditional.
    fn expr_struct(&mut self, level: u32) {
        let deeper = !self.lean && level < self.cfg.max_expr_depth;
        let args = self.args_of(ArgType::Val(ValType::Struct));
        let locals = self.locals_of(ValType::Struct, self.shape.locals);
        let peers = self.callable_peers(Some(Some(ValType::Struct)));
        let weights = [
            3,                                               // built in the scratch local
            if args.is_empty() { 0 } else { 2 },             // argument
            if locals.is_empty() { 0 } else { 2 },           // local
            if deeper { 1 } else { 0 },                      // box; unbox.any
            if deeper { 1 } else { 0 },                      // box; unbox; ldobj
            if deeper && !peers.is_empty() { 2 } else { 0 }, // call a generated method
            if deeper && self.cfg.max_nesting > 0 {
                1
            } else {
                0
            }, // conditional
        ];
        match self.weighted(&weights) {
            0 => {
                let t = self.scratch();
                self.ldloca(t);
                self.emit(Instr::new(Opcode::Initobj, Operand::Token(STRUCT_TYPE)));
                self.pop_depth(1);
                // Setting a field takes two slots.
                let fields = if deeper { self.pick(4) } else { 0 };
                if fields & 1 != 0 {
                    self.ldloca(t);
                    self.expr(level + 1);
                    self.emit(Instr::new(Opcode::Stfld, Operand::Token(STRUCT_A)));
                    self.pop_depth(2);
                }
                if fields & 2 != 0 {
                    self.ldloca(t);
                    self.expr_of(level + 1, ValType::I8);
                    self.emit(Instr::new(Opcode::Stfld, Operand::Token(STRUCT_B)));
                    self.pop_depth(2);
                }
                self.ldloc(t);
            }
            1 => {
                let k = self.one_of(&args);
                self.ldarg(k);
            }
            2 => {
                let k = self.one_of(&locals);
                self.ldloc(k);
            }
            3 => {
                self.expr_struct(level + 1);
                self.emit(Instr::new(Opcode::Box, Operand::Token(STRUCT_TYPE)));
                self.emit(Instr::new(Opcode::Unbox_Any, Operand::Token(STRUCT_TYPE)));
            }
            4 => {
                self.expr_struct(level + 1);
                self.emit(Instr::new(Opcode::Box, Operand::Token(STRUCT_TYPE)));
                self.emit(Instr::new(Opcode::Unbox, Operand::Token(STRUCT_TYPE)));
                self.emit(Instr::new(Opcode::Ldobj, Operand::Token(STRUCT_TYPE)));
            }
            5 => {
                let k = self.one_of_index(&peers);
                self.peer_call(k, level);
            }
            _ => self.conditional(level, ValType::Struct),
        }
    }

    /// `<object>; isinst C; ldnull; cgt.un`: 1 when the object is a `C`, 0 when it is a boxed
    /// `S` (`isinst` gives null, which is compared, never dereferenced).
    fn class_test(&mut self, level: u32) {
        if self.struct_on() && self.pick(2) == 1 {
            self.expr_struct(level + 1);
            self.emit(Instr::new(Opcode::Box, Operand::Token(STRUCT_TYPE)));
        } else {
            self.expr_class(level + 1);
        }
        self.emit(Instr::new(Opcode::Isinst, Operand::Token(CLASS_TYPE)));
        self.op(Opcode::Ldnull);
        self.push_depth(1);
        self.op(Opcode::Cgt_Un);
        self.pop_depth(1);
    }

    /// `<int32>; newobj C::.ctor` (the operand a constant at the depth limit).
    fn new_class(&mut self, level: u32) {
        if !self.lean && level < self.cfg.max_expr_depth {
            self.expr(level + 1);
        } else {
            self.constant(ValType::I4);
        }
        self.emit(Instr::new(Opcode::Newobj, Operand::Token(CLASS_CTOR)));
    }

    /// A `C`: a new one, an argument, a local (each holds one from the body's start), a cast
    /// of one (`castclass`, `isinst`: the value is a `C`, so neither fails), a call, or a
    /// conditional. Never null.
    fn expr_class(&mut self, level: u32) {
        let deeper = !self.lean && level < self.cfg.max_expr_depth;
        let args = self.args_of(ArgType::Val(ValType::Class));
        let locals = self.locals_of(ValType::Class, self.user_locals);
        let peers = self.callable_peers(Some(Some(ValType::Class)));
        let weights = [
            3,                                               // newobj
            if args.is_empty() { 0 } else { 2 },             // argument
            if locals.is_empty() { 0 } else { 3 },           // local
            if deeper { 1 } else { 0 },                      // castclass
            if deeper { 1 } else { 0 },                      // isinst
            if deeper && !peers.is_empty() { 2 } else { 0 }, // call a generated method
            if deeper && self.cfg.max_nesting > 0 {
                1
            } else {
                0
            }, // conditional
        ];
        match self.weighted(&weights) {
            0 => self.new_class(level),
            1 => {
                let k = self.one_of(&args);
                self.ldarg(k);
            }
            2 => {
                let k = self.one_of(&locals);
                self.ldloc(k);
            }
            k @ (3 | 4) => {
                let op = if k == 3 {
                    Opcode::Castclass
                } else {
                    Opcode::Isinst
                };
                self.expr_class(level + 1);
                self.emit(Instr::new(op, Operand::Token(CLASS_TYPE)));
            }
            5 => {
                let k = self.one_of_index(&peers);
                self.peer_call(k, level);
            }
            _ => self.conditional(level, ValType::Class),
        }
    }

    fn expr_i4(&mut self, level: u32) {
        let cfg = self.cfg;
        // Leaves only on a lean stack.
        let deeper = !self.lean && level < cfg.max_expr_depth;
        let int_callees = self.callees.iter().any(|c| !c.returns_void);
        let args = self.args_of(ArgType::Val(ValType::I4));
        let refs = self.args_of(ArgType::RefI4);
        let locals = self.locals_of(ValType::I4, self.shape.locals);
        let int64 = cfg.int64_percent > 0;
        let peers = self.callable_peers(Some(Some(ValType::I4)));
        let weights = [
            3,                                                 // constant
            if args.is_empty() { 0 } else { 2 },               // argument
            if locals.is_empty() { 0 } else { 2 },             // local
            if deeper { 3 } else { 0 },                        // binary
            if deeper { 1 } else { 0 },                        // unary
            if deeper { 2 } else { 0 },                        // compare
            if deeper { 1 } else { 0 },                        // shift
            if deeper { 1 } else { 0 },                        // divide
            if deeper && int_callees { 2 } else { 0 },         // call
            if deeper && cfg.max_nesting > 0 { 1 } else { 0 }, // conditional
            if deeper { 1 } else { 0 },                        // dup
            if refs.is_empty() { 0 } else { 2 },               // through an int32&
            if deeper && int64 { 1 } else { 0 },               // conv.i4 of an int64
            if deeper && !peers.is_empty() { 2 } else { 0 },   // call a generated method
            if self.struct_on() { 2 } else { 0 },              // S::a
            if self.class_on() { 2 } else { 0 },               // C::x
            if deeper && self.class_on() { 1 } else { 0 },     // is it a C?
        ];
        match self.weighted(&weights) {
            0 => self.constant(ValType::I4),
            1 => {
                let k = self.one_of(&args);
                self.ldarg(k);
            }
            2 => {
                let k = self.one_of(&locals);
                self.ldloc(k);
            }
            3 => {
                self.expr(level + 1);
                self.expr(level + 1);
                self.op_of(BINARY);
                self.pop_depth(1);
            }
            4 => {
                self.expr(level + 1);
                self.op_of(&[Opcode::Neg, Opcode::Not]);
            }
            5 => {
                let t = self.operand_type();
                self.expr_of(level + 1, t);
                self.expr_of(level + 1, t);
                self.op_of(COMPARE);
                self.pop_depth(1);
            }
            6 => self.shift(level, ValType::I4),
            7 => self.divide(level, ValType::I4),
            8 => {
                let ints: Vec<Callee> = self
                    .callees
                    .iter()
                    .filter(|c| !c.returns_void)
                    .copied()
                    .collect();
                let c = ints[self.pick(ints.len() as u32) as usize];
                for _ in 0..c.params {
                    self.expr(level + 1);
                }
                self.call(c, false);
            }
            9 => self.conditional(level, ValType::I4),
            10 => self.dup(level, ValType::I4),
            11 => {
                let k = self.one_of(&refs);
                self.ldarg(k);
                self.op(Opcode::Ldind_I4);
            }
            12 => {
                self.expr_i8(level + 1);
                self.op(Opcode::Conv_I4);
            }
            13 => {
                let k = self.one_of_index(&peers);
                self.peer_call(k, level);
            }
            14 => self.struct_field(level, STRUCT_A),
            15 => {
                self.expr_class(level + 1);
                self.emit(Instr::new(Opcode::Ldfld, Operand::Token(CLASS_X)));
            }
            _ => self.class_test(level),
        }
    }

    fn expr_i8(&mut self, level: u32) {
        let cfg = self.cfg;
        let deeper = !self.lean && level < cfg.max_expr_depth;
        let args = self.args_of(ArgType::Val(ValType::I8));
        let locals = self.locals_of(ValType::I8, self.shape.locals);
        let peers = self.callable_peers(Some(Some(ValType::I8)));
        let weights = [
            3,                                                 // constant
            if args.is_empty() { 0 } else { 2 },               // argument
            if locals.is_empty() { 0 } else { 2 },             // local
            if deeper { 3 } else { 0 },                        // binary
            if deeper { 1 } else { 0 },                        // unary
            if deeper { 1 } else { 0 },                        // shift
            if deeper { 1 } else { 0 },                        // divide
            if deeper && cfg.max_nesting > 0 { 1 } else { 0 }, // conditional
            if deeper { 1 } else { 0 },                        // dup
            2,                                                 // conv.i8 / conv.u8 of an int32
            if deeper && !peers.is_empty() { 2 } else { 0 },   // call a generated method
            if self.struct_on() { 2 } else { 0 },              // S::b
        ];
        match self.weighted(&weights) {
            0 => self.constant(ValType::I8),
            1 => {
                let k = self.one_of(&args);
                self.ldarg(k);
            }
            2 => {
                let k = self.one_of(&locals);
                self.ldloc(k);
            }
            3 => {
                self.expr_i8(level + 1);
                self.expr_i8(level + 1);
                self.op_of(BINARY);
                self.pop_depth(1);
            }
            4 => {
                self.expr_i8(level + 1);
                self.op_of(&[Opcode::Neg, Opcode::Not]);
            }
            5 => self.shift(level, ValType::I8),
            6 => self.divide(level, ValType::I8),
            7 => self.conditional(level, ValType::I8),
            8 => self.dup(level, ValType::I8),
            10 => {
                let k = self.one_of_index(&peers);
                self.peer_call(k, level);
            }
            11 => self.struct_field(level, STRUCT_B),
            _ => {
                // A leaf operand keeps a lean stack at one slot.
                let operand = if deeper {
                    level + 1
                } else {
                    cfg.max_expr_depth
                };
                self.expr_of(operand, ValType::I4);
                self.op_of(&[Opcode::Conv_I8, Opcode::Conv_U8]);
            }
        }
    }

    /// `a << (b & mask)`: the count is masked, shifts by the width or more are unspecified
    /// (III.3.58); the count is an `int32` for either width.
    fn shift(&mut self, level: u32, t: ValType) {
        self.expr_of(level + 1, t);
        self.expr(level + 1);
        self.ldc(if t == ValType::I8 { 63 } else { 31 });
        self.op(Opcode::And);
        self.pop_depth(1);
        self.op_of(SHIFT);
        self.pop_depth(1);
    }

    /// `a / ((b & 7) + 1)` and kin: the divisor is forced into 1..=8, so no division by zero
    /// and no MinValue / -1.
    fn divide(&mut self, level: u32, t: ValType) {
        self.expr_of(level + 1, t);
        self.expr_of(level + 1, t);
        if t == ValType::I8 {
            self.ldc8(7);
        } else {
            self.ldc(7);
        }
        self.op(Opcode::And);
        self.pop_depth(1);
        if t == ValType::I8 {
            self.ldc8(1);
        } else {
            self.ldc(1);
        }
        self.op(Opcode::Add);
        self.pop_depth(1);
        self.op_of(DIVIDE);
        self.pop_depth(1);
    }

    /// cond ? a : b, the two values merging on the stack.
    fn conditional(&mut self, level: u32, t: ValType) {
        let else_label = self.new_label();
        let end = self.new_label();
        self.cond_branch(else_label, level);
        self.expr_of(level + 1, t);
        self.pop_depth(1);
        self.branch(Opcode::Br, end);
        self.bind(else_label);
        self.expr_of(level + 1, t);
        self.bind(end);
    }

    /// `e; dup;` then a store of the copy to a local of its type, or an operator on both.
    fn dup(&mut self, level: u32, t: ValType) {
        self.expr_of(level + 1, t);
        self.op(Opcode::Dup);
        self.push_depth(1);
        let locals = self.locals_of(t, self.user_locals);
        if !locals.is_empty() && self.pick(2) == 0 {
            let k = self.one_of(&locals);
            self.stloc(k);
        } else {
            self.op_of(BINARY);
            self.pop_depth(1);
        }
    }
}
