//! One-rule type mutations: small type-correct methods, each beside a copy that breaks exactly
//! one type rule of ECMA-335 Partition III, built into a runnable program with real metadata
//! (mscorlib references, a generated exception class with a field, locals signatures) so the
//! type pass, mono and CoreCLR all see the same methods.
//!
//! The structural rules hold in every mutant (depths, branches, regions), so the structural
//! verifier accepts it and the type pass is what must catch it; each [`TypeMutation`] names the
//! [`Code`] it expects. No method is inlined; the program's `Main` calls a runner per method
//! that calls it inside a `try`/`catch` and prints one result line:
//!
//! ```text
//! @ Orig_RetInt64 ran
//! @ Mut_RetInt64 threw System.InvalidProgramException
//! ```
//!
//! A runtime that dies on a method prints nothing for it or the methods after it;
//! [`run_methods`] then marks it [`RunResult::Crashed`] and starts again after it.

use crate::body::ClauseKind;
use crate::image::emit::assembly::{
    AssemblyBuilder, ImageKind, SigType, field_sig, flags, locals_sig, method_sig,
};
use crate::image::emit::{AssemblyIdentity, EmitError};
use crate::image::tables::Token;
use crate::ir::{
    BranchForms, EhClause, HeaderInfo, Instr, Label, LayoutError, LayoutOptions, MaxStackPolicy,
    Method, Operand,
};
use crate::opcode::Opcode;
use crate::verify::{Code, SyntheticResolver};
use std::path::Path;
use std::time::Duration;

/// A one-rule type mutation of a type-correct method.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TypeMutation {
    /// `add` of an `int32` and an `int64`: an `ldc.i4` operand made `ldc.i8`.
    AddInt64Operand,
    /// `add` of an `int32` and `null`: an operand made `ldnull`.
    AddNullOperand,
    /// `mul` of an `int32` and a string: an operand made `ldstr`.
    MulStringOperand,
    /// `neg` of a string.
    NegString,
    /// `and` of two `F`: a `mul` of floats made `and`.
    AndFloat,
    /// `shl` of an `F`: the `conv.i4` before it removed.
    ShlFloat,
    /// `not` of an `F`: the `conv.i4` before it removed.
    NotFloat,
    /// `ckfinite` of an `int32`: its `ldc.r8` made `ldc.i4`.
    CkfiniteInt32,
    /// `brtrue` on an `F`: its `ldc.i4` made `ldc.r8`.
    BrtrueFloat,
    /// `ceq` of an `int32` and an `int64`.
    CeqInt32Int64,
    /// A call's `int32` argument given as an `int64` (a probe called with an `int64`).
    CallArgInt64,
    /// A call's `int32` argument given as a string.
    CallArgString,
    /// `ret` of an `int64` from an `int32` method.
    RetInt64,
    /// `ret` of a string from an `int32` method.
    RetString,
    /// `ret` of an `int32` from an `object` method.
    RetInt32AsObject,
    /// `stloc` of a string into an `int32` local.
    StlocString,
    /// `stloc` of an `int64` into an `int32` local.
    StlocInt64,
    /// `starg` of an `int64` into an `int32` argument.
    StargInt64,
    /// `stfld` of a string into an `int32` field.
    StfldString,
    /// `throw` of an `int32`: the `newobj` of the exception removed.
    ThrowInt32,
    /// `ldfld` of the exception's field on an `int32`: the `newobj` removed.
    LdfldOnInt32,
    /// `isinst` on an `int32`.
    IsinstInt32,
    /// A join of an `int32` and `null`.
    JoinInt32Null,
    /// A join of an `int32` and a string.
    JoinInt32String,
    /// A join of an `int32` and an `int64`.
    JoinInt32Int64,
    /// `add` of an `int32` and an `F`: an operand made `ldc.r8`.
    AddFloatOperand,
    /// `clt` of an `F` and an `int32`.
    CltFloatInt32,
    /// `beq` of an `int32` and a string.
    BeqInt32String,
    /// `switch` on an `F`.
    SwitchFloat,
    /// A call's `int32` argument given as an `F`.
    CallArgFloat,
    /// `callvirt` of `Object::ToString` with an `int32` as `this`.
    CallvirtOnInt32,
    /// `ret` of an `F` from an `int32` method.
    RetFloat,
    /// `stloc` of an `F` into an `int32` local.
    StlocFloat,
    /// `ldind.i4` through an `F`: the `ldloca` made `ldc.r8`.
    LdindFloat,
    /// `ldlen` of an `int32`: the `newarr` removed.
    LdlenOnInt32,
    /// `xor` of two `F`: a `sub` of floats made `xor`.
    XorFloat,
    /// `div.un` of two `F`: a `div` of floats made `div.un`.
    DivUnFloat,
    /// `add.ovf` of two `F`: an `add` of floats made `add.ovf`.
    AddOvfFloat,
    /// `shl` by an `F` amount: its `ldc.i4` made `ldc.r8`.
    ShlFloatAmount,
    /// `conv.i4` of a string: its `ldc.r8` made `ldstr`.
    ConvString,
    /// `stind.i4` through an `int32`: the `ldloca` made `ldc.i4`.
    StindThroughInt32,
    /// `castclass` of an `int32`: its `ldstr` made `ldc.i4`.
    CastclassInt32,
    /// `ldelem.i4` with a `null` index: its `ldc.i4` made `ldnull`.
    LdelemNullIndex,
    /// `newarr` of an `F` length: its `ldc.i4` made `ldc.r8`.
    NewarrFloatSize,
    /// `ldflda` of the exception's field on an `int32`: the `newobj` removed.
    LdfldaOnInt32,
    /// `initobj` through an `int32`: the `ldloca` made `ldc.i4`.
    InitobjInt32,
    /// `stsfld` of a string into an `int32` static field.
    StsfldString,
    /// `ret` of a string from a method returning the exception class (unverifiable only).
    RetStringAsException,
    /// A call to an `int32` method prefixed with `readonly.`, which may prefix only an array's
    /// `Address` (unverifiable only).
    ReadonlyCallProbe,
    /// A constructed object's field set by calling its constructor again: a `stfld` made a
    /// `call` of the class's `.ctor(int32)` (unverifiable only: only `newobj` calls a class's
    /// constructor).
    CallCtorOnObject,
    /// An `Action` built from an `ldftn` with a `br` to the `newobj` between them, so that the
    /// `newobj` starts a block of its own (unverifiable only).
    DelegateAcrossBranch,
    /// An `Action` built on `int32 Probe(int32)` instead of `void Nop()`: a method its `Invoke`
    /// cannot call (unverifiable only: the runtimes make the delegate).
    DelegateWrongTarget,
    /// A `constrained. int32` call of `Object::ToString` on a pointer to an `int64` local
    /// instead of an `int32` one (unverifiable only).
    ConstrainedOtherTarget,
    /// A call passing a local's address to `int32 ProbeRef(int32&)` prefixed with `tail.`
    /// (unverifiable only).
    TailCallByRef,
    /// `ret` of a local's address instead of a static field's from an `int32&` method
    /// (unverifiable only).
    ReturnLocalAddress,
    /// `Object::ToString` of a string called by `call` instead of `callvirt`: the override not
    /// dispatched to, on an object other than the method's own `this` (unverifiable only).
    CallVirtualNonVirtually,
}

impl TypeMutation {
    /// Every mutation, in order.
    pub const ALL: [TypeMutation; 56] = [
        TypeMutation::AddInt64Operand,
        TypeMutation::AddNullOperand,
        TypeMutation::MulStringOperand,
        TypeMutation::NegString,
        TypeMutation::AndFloat,
        TypeMutation::ShlFloat,
        TypeMutation::NotFloat,
        TypeMutation::CkfiniteInt32,
        TypeMutation::BrtrueFloat,
        TypeMutation::CeqInt32Int64,
        TypeMutation::CallArgInt64,
        TypeMutation::CallArgString,
        TypeMutation::RetInt64,
        TypeMutation::RetString,
        TypeMutation::RetInt32AsObject,
        TypeMutation::StlocString,
        TypeMutation::StlocInt64,
        TypeMutation::StargInt64,
        TypeMutation::StfldString,
        TypeMutation::ThrowInt32,
        TypeMutation::LdfldOnInt32,
        TypeMutation::IsinstInt32,
        TypeMutation::JoinInt32Null,
        TypeMutation::JoinInt32String,
        TypeMutation::JoinInt32Int64,
        TypeMutation::AddFloatOperand,
        TypeMutation::CltFloatInt32,
        TypeMutation::BeqInt32String,
        TypeMutation::SwitchFloat,
        TypeMutation::CallArgFloat,
        TypeMutation::CallvirtOnInt32,
        TypeMutation::RetFloat,
        TypeMutation::StlocFloat,
        TypeMutation::LdindFloat,
        TypeMutation::LdlenOnInt32,
        TypeMutation::XorFloat,
        TypeMutation::DivUnFloat,
        TypeMutation::AddOvfFloat,
        TypeMutation::ShlFloatAmount,
        TypeMutation::ConvString,
        TypeMutation::StindThroughInt32,
        TypeMutation::CastclassInt32,
        TypeMutation::LdelemNullIndex,
        TypeMutation::NewarrFloatSize,
        TypeMutation::LdfldaOnInt32,
        TypeMutation::InitobjInt32,
        TypeMutation::StsfldString,
        TypeMutation::RetStringAsException,
        TypeMutation::ReadonlyCallProbe,
        TypeMutation::CallCtorOnObject,
        TypeMutation::DelegateAcrossBranch,
        TypeMutation::DelegateWrongTarget,
        TypeMutation::ConstrainedOtherTarget,
        TypeMutation::TailCallByRef,
        TypeMutation::ReturnLocalAddress,
        TypeMutation::CallVirtualNonVirtually,
    ];

    /// The stable name (the variant's).
    pub fn name(self) -> &'static str {
        match self {
            TypeMutation::AddInt64Operand => "AddInt64Operand",
            TypeMutation::AddNullOperand => "AddNullOperand",
            TypeMutation::MulStringOperand => "MulStringOperand",
            TypeMutation::NegString => "NegString",
            TypeMutation::AndFloat => "AndFloat",
            TypeMutation::ShlFloat => "ShlFloat",
            TypeMutation::NotFloat => "NotFloat",
            TypeMutation::CkfiniteInt32 => "CkfiniteInt32",
            TypeMutation::BrtrueFloat => "BrtrueFloat",
            TypeMutation::CeqInt32Int64 => "CeqInt32Int64",
            TypeMutation::CallArgInt64 => "CallArgInt64",
            TypeMutation::CallArgString => "CallArgString",
            TypeMutation::RetInt64 => "RetInt64",
            TypeMutation::RetString => "RetString",
            TypeMutation::RetInt32AsObject => "RetInt32AsObject",
            TypeMutation::StlocString => "StlocString",
            TypeMutation::StlocInt64 => "StlocInt64",
            TypeMutation::StargInt64 => "StargInt64",
            TypeMutation::StfldString => "StfldString",
            TypeMutation::ThrowInt32 => "ThrowInt32",
            TypeMutation::LdfldOnInt32 => "LdfldOnInt32",
            TypeMutation::IsinstInt32 => "IsinstInt32",
            TypeMutation::JoinInt32Null => "JoinInt32Null",
            TypeMutation::JoinInt32String => "JoinInt32String",
            TypeMutation::JoinInt32Int64 => "JoinInt32Int64",
            TypeMutation::AddFloatOperand => "AddFloatOperand",
            TypeMutation::CltFloatInt32 => "CltFloatInt32",
            TypeMutation::BeqInt32String => "BeqInt32String",
            TypeMutation::SwitchFloat => "SwitchFloat",
            TypeMutation::CallArgFloat => "CallArgFloat",
            TypeMutation::CallvirtOnInt32 => "CallvirtOnInt32",
            TypeMutation::RetFloat => "RetFloat",
            TypeMutation::StlocFloat => "StlocFloat",
            TypeMutation::LdindFloat => "LdindFloat",
            TypeMutation::LdlenOnInt32 => "LdlenOnInt32",
            TypeMutation::XorFloat => "XorFloat",
            TypeMutation::DivUnFloat => "DivUnFloat",
            TypeMutation::AddOvfFloat => "AddOvfFloat",
            TypeMutation::ShlFloatAmount => "ShlFloatAmount",
            TypeMutation::ConvString => "ConvString",
            TypeMutation::StindThroughInt32 => "StindThroughInt32",
            TypeMutation::CastclassInt32 => "CastclassInt32",
            TypeMutation::LdelemNullIndex => "LdelemNullIndex",
            TypeMutation::NewarrFloatSize => "NewarrFloatSize",
            TypeMutation::LdfldaOnInt32 => "LdfldaOnInt32",
            TypeMutation::InitobjInt32 => "InitobjInt32",
            TypeMutation::StsfldString => "StsfldString",
            TypeMutation::RetStringAsException => "RetStringAsException",
            TypeMutation::ReadonlyCallProbe => "ReadonlyCallProbe",
            TypeMutation::CallCtorOnObject => "CallCtorOnObject",
            TypeMutation::DelegateAcrossBranch => "DelegateAcrossBranch",
            TypeMutation::DelegateWrongTarget => "DelegateWrongTarget",
            TypeMutation::ConstrainedOtherTarget => "ConstrainedOtherTarget",
            TypeMutation::TailCallByRef => "TailCallByRef",
            TypeMutation::ReturnLocalAddress => "ReturnLocalAddress",
            TypeMutation::CallVirtualNonVirtually => "CallVirtualNonVirtually",
        }
    }

    /// What the mutation does, in a sentence (the tables' wording).
    pub fn description(self) -> &'static str {
        match self {
            TypeMutation::AddInt64Operand => {
                "`add` of an `int32` and an `int64`: an `ldc.i4` operand made `ldc.i8`."
            }
            TypeMutation::AddNullOperand => {
                "`add` of an `int32` and `null`: an operand made `ldnull`."
            }
            TypeMutation::MulStringOperand => {
                "`mul` of an `int32` and a string: an operand made `ldstr`."
            }
            TypeMutation::NegString => "`neg` of a string.",
            TypeMutation::AndFloat => "`and` of two `F`: a `mul` of floats made `and`.",
            TypeMutation::ShlFloat => "`shl` of an `F`: the `conv.i4` before it removed.",
            TypeMutation::NotFloat => "`not` of an `F`: the `conv.i4` before it removed.",
            TypeMutation::CkfiniteInt32 => "`ckfinite` of an `int32`: its `ldc.r8` made `ldc.i4`.",
            TypeMutation::BrtrueFloat => "`brtrue` on an `F`: its `ldc.i4` made `ldc.r8`.",
            TypeMutation::CeqInt32Int64 => "`ceq` of an `int32` and an `int64`.",
            TypeMutation::CallArgInt64 => {
                "A call's `int32` argument given as an `int64` (a probe called with an `int64`)."
            }
            TypeMutation::CallArgString => "A call's `int32` argument given as a string.",
            TypeMutation::RetInt64 => "`ret` of an `int64` from an `int32` method.",
            TypeMutation::RetString => "`ret` of a string from an `int32` method.",
            TypeMutation::RetInt32AsObject => "`ret` of an `int32` from an `object` method.",
            TypeMutation::StlocString => "`stloc` of a string into an `int32` local.",
            TypeMutation::StlocInt64 => "`stloc` of an `int64` into an `int32` local.",
            TypeMutation::StargInt64 => "`starg` of an `int64` into an `int32` argument.",
            TypeMutation::StfldString => "`stfld` of a string into an `int32` field.",
            TypeMutation::ThrowInt32 => {
                "`throw` of an `int32`: the `newobj` of the exception removed."
            }
            TypeMutation::LdfldOnInt32 => {
                "`ldfld` of the exception's field on an `int32`: the `newobj` removed."
            }
            TypeMutation::IsinstInt32 => "`isinst` on an `int32`.",
            TypeMutation::JoinInt32Null => "A join of an `int32` and `null`.",
            TypeMutation::JoinInt32String => "A join of an `int32` and a string.",
            TypeMutation::JoinInt32Int64 => "A join of an `int32` and an `int64`.",
            TypeMutation::AddFloatOperand => {
                "`add` of an `int32` and an `F`: an operand made `ldc.r8`."
            }
            TypeMutation::CltFloatInt32 => "`clt` of an `F` and an `int32`.",
            TypeMutation::BeqInt32String => "`beq` of an `int32` and a string.",
            TypeMutation::SwitchFloat => "`switch` on an `F`.",
            TypeMutation::CallArgFloat => "A call's `int32` argument given as an `F`.",
            TypeMutation::CallvirtOnInt32 => {
                "`callvirt` of `Object::ToString` with an `int32` as `this`."
            }
            TypeMutation::RetFloat => "`ret` of an `F` from an `int32` method.",
            TypeMutation::StlocFloat => "`stloc` of an `F` into an `int32` local.",
            TypeMutation::LdindFloat => "`ldind.i4` through an `F`: the `ldloca` made `ldc.r8`.",
            TypeMutation::LdlenOnInt32 => "`ldlen` of an `int32`: the `newarr` removed.",
            TypeMutation::XorFloat => "`xor` of two `F`: a `sub` of floats made `xor`.",
            TypeMutation::DivUnFloat => "`div.un` of two `F`: a `div` of floats made `div.un`.",
            TypeMutation::AddOvfFloat => "`add.ovf` of two `F`: an `add` of floats made `add.ovf`.",
            TypeMutation::ShlFloatAmount => "`shl` by an `F` amount: its `ldc.i4` made `ldc.r8`.",
            TypeMutation::ConvString => "`conv.i4` of a string: its `ldc.r8` made `ldstr`.",
            TypeMutation::StindThroughInt32 => {
                "`stind.i4` through an `int32`: the `ldloca` made `ldc.i4`."
            }
            TypeMutation::CastclassInt32 => "`castclass` of an `int32`: its `ldstr` made `ldc.i4`.",
            TypeMutation::LdelemNullIndex => {
                "`ldelem.i4` with a `null` index: its `ldc.i4` made `ldnull`."
            }
            TypeMutation::NewarrFloatSize => {
                "`newarr` of an `F` length: its `ldc.i4` made `ldc.r8`."
            }
            TypeMutation::LdfldaOnInt32 => {
                "`ldflda` of the exception's field on an `int32`: the `newobj` removed."
            }
            TypeMutation::InitobjInt32 => {
                "`initobj` through an `int32`: the `ldloca` made `ldc.i4`."
            }
            TypeMutation::StsfldString => "`stsfld` of a string into an `int32` static field.",
            TypeMutation::RetStringAsException => {
                "`ret` of a string from a method returning the exception class (unverifiable only)."
            }
            TypeMutation::ReadonlyCallProbe => {
                "`readonly.` before a call to a probe, not an array's `Address` (unverifiable only)."
            }
            TypeMutation::CallCtorOnObject => {
                "A constructed object's field set by a `call` of its `.ctor` instead of `stfld` \
                 (unverifiable only)."
            }
            TypeMutation::DelegateAcrossBranch => {
                "An `Action` built from an `ldftn` with a `br` between it and the `newobj` \
                 (unverifiable only)."
            }
            TypeMutation::DelegateWrongTarget => {
                "An `Action` built on `int32 Probe(int32)`, which its `Invoke` cannot call \
                 (unverifiable only)."
            }
            TypeMutation::ConstrainedOtherTarget => {
                "A `constrained. int32` call of `Object::ToString` on a pointer to an `int64` \
                 local (unverifiable only)."
            }
            TypeMutation::TailCallByRef => {
                "`tail.` before a call passing a local's address to `ProbeRef(int32&)` \
                 (unverifiable only)."
            }
            TypeMutation::ReturnLocalAddress => {
                "`ret` of a local's address from an `int32&` method, not a static field's \
                 (unverifiable only)."
            }
            TypeMutation::CallVirtualNonVirtually => {
                "`Object::ToString` of a string by `call`, not `callvirt` (unverifiable only)."
            }
        }
    }

    /// The code the type pass must report on the mutant, and only that code.
    pub fn expected(self) -> Code {
        match self {
            TypeMutation::AddInt64Operand
            | TypeMutation::BrtrueFloat
            | TypeMutation::CeqInt32Int64
            | TypeMutation::CallArgInt64
            | TypeMutation::CallArgString
            | TypeMutation::RetInt64
            | TypeMutation::RetString
            | TypeMutation::RetInt32AsObject
            | TypeMutation::StlocString
            | TypeMutation::StlocInt64
            | TypeMutation::StargInt64
            | TypeMutation::StfldString
            | TypeMutation::AddFloatOperand
            | TypeMutation::CltFloatInt32
            | TypeMutation::BeqInt32String
            | TypeMutation::SwitchFloat
            | TypeMutation::CallArgFloat
            | TypeMutation::RetFloat
            | TypeMutation::StlocFloat => Code::StackUnexpected,
            TypeMutation::LdindFloat => Code::StackByRef,
            TypeMutation::AddNullOperand
            | TypeMutation::MulStringOperand
            | TypeMutation::NegString => Code::ExpectedNumericType,
            TypeMutation::AndFloat | TypeMutation::ShlFloat | TypeMutation::NotFloat => {
                Code::ExpectedIntegerType
            }
            TypeMutation::CkfiniteInt32 => Code::ExpectedFloatType,
            TypeMutation::ThrowInt32
            | TypeMutation::LdfldOnInt32
            | TypeMutation::IsinstInt32
            | TypeMutation::CallvirtOnInt32
            | TypeMutation::LdlenOnInt32 => Code::StackObjRef,
            TypeMutation::JoinInt32Null
            | TypeMutation::JoinInt32String
            | TypeMutation::JoinInt32Int64 => Code::PathStackUnexpected,
            TypeMutation::XorFloat => Code::ExpectedIntegerType,
            TypeMutation::DivUnFloat => Code::ExpectedIntegerType,
            TypeMutation::AddOvfFloat => Code::ExpectedIntegerType,
            TypeMutation::ShlFloatAmount => Code::StackUnexpected,
            TypeMutation::ConvString => Code::ExpectedNumericType,
            TypeMutation::StindThroughInt32 => Code::StackByRef,
            TypeMutation::CastclassInt32 => Code::StackObjRef,
            TypeMutation::LdelemNullIndex => Code::StackUnexpected,
            TypeMutation::NewarrFloatSize => Code::StackUnexpected,
            TypeMutation::LdfldaOnInt32 => Code::StackObjRef,
            TypeMutation::InitobjInt32 => Code::StackByRef,
            TypeMutation::StsfldString => Code::StackUnexpected,
            TypeMutation::RetStringAsException => Code::TypeNotAssignable,
            TypeMutation::ReadonlyCallProbe => Code::ReadonlyUnexpectedCallee,
            TypeMutation::CallCtorOnObject => Code::CallCtor,
            TypeMutation::DelegateAcrossBranch => Code::DelegatePattern,
            TypeMutation::DelegateWrongTarget => Code::DelegateCtor,
            TypeMutation::ConstrainedOtherTarget => Code::TypeNotAssignable,
            TypeMutation::TailCallByRef => Code::TailByRef,
            TypeMutation::ReturnLocalAddress => Code::ReturnPtrToStack,
            TypeMutation::CallVirtualNonVirtually => Code::ThisMismatch,
        }
    }

    /// The method's name in the program: `Orig_NAME` (type-correct) or `Mut_NAME`.
    pub fn method_name(self, mutated: bool) -> String {
        format!("{}_{}", if mutated { "Mut" } else { "Orig" }, self.name())
    }
}

/// The full name of the class every method of a mutant program is in.
pub const CLASS: &str = "Ilcheck.Mutants";

/// The first characters of every result line.
pub const RESULT_MARK: &str = "@ ";

/// One method of a mutant program: a mutation's original or its mutant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MutantMethod {
    /// The mutation.
    pub mutation: TypeMutation,
    /// The mutant (true) or the type-correct original (false).
    pub mutated: bool,
}

impl MutantMethod {
    /// Its name in the program ([`TypeMutation::method_name`]).
    pub fn name(self) -> String {
        self.mutation.method_name(self.mutated)
    }
}

/// Every mutation's original and mutant, in [`TypeMutation::ALL`] order.
pub fn all_methods() -> Vec<MutantMethod> {
    TypeMutation::ALL
        .iter()
        .flat_map(|&mutation| [false, true].map(|mutated| MutantMethod { mutation, mutated }))
        .collect()
}

/// Why a mutant program could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MutantError {
    /// Metadata could not be added.
    #[error("metadata: {0}")]
    Emit(#[from] EmitError),
    /// A method could not be laid out.
    #[error("method {method}: layout: {source}")]
    Layout {
        /// The method's name.
        method: String,
        /// Why.
        source: LayoutError,
    },
}

/// The tokens the methods' bodies use.
struct Refs {
    exception: Token,
    gen_exception: Token,
    gen_ctor: Token,
    value: Token,
    probe: Token,
    /// `void Nop()`: the target of the delegate rules.
    nop: Token,
    /// `int32 ProbeRef(int32&)`: the callee of the tail call rule.
    probe_ref: Token,
    /// `System.Action::.ctor(object, native int)`.
    action_ctor: Token,
    /// `System.Action::Invoke()`.
    action_invoke: Token,
    int32: Token,
    string: Token,
    slot: Token,
    write_line: Token,
    concat2: Token,
    get_type: Token,
    object_to_string: Token,
    s_text: Token,
}

/// A method's signature and locals.
struct Sig {
    ret: SigType,
    /// `int32` parameters.
    params: u16,
    locals: Vec<SigType>,
}

/// Instructions of a method being built.
struct Il(Method);

impl Il {
    fn op(&mut self, op: Opcode) -> &mut Self {
        self.0.push(Instr::op(op));
        self
    }
    fn tok(&mut self, op: Opcode, t: Token) -> &mut Self {
        self.0.push(Instr::new(op, Operand::Token(t.0)));
        self
    }
    fn i4(&mut self, v: i32) -> &mut Self {
        self.0.push(Instr::new(Opcode::Ldc_I4, Operand::Int32(v)));
        self
    }
    fn i8(&mut self, v: i64) -> &mut Self {
        self.0.push(Instr::new(Opcode::Ldc_I8, Operand::Int64(v)));
        self
    }
    fn r8(&mut self, v: f64) -> &mut Self {
        self.0
            .push(Instr::new(Opcode::Ldc_R8, Operand::Float64(v.to_bits())));
        self
    }
    fn var(&mut self, op: Opcode, k: u16) -> &mut Self {
        self.0.push(Instr::new(op, Operand::Var(k)));
        self
    }
    fn br(&mut self, op: Opcode, l: Label) -> &mut Self {
        self.0.push(Instr::new(op, Operand::Target(l)));
        self
    }
    fn bind(&mut self, l: Label) -> &mut Self {
        self.0.bind(l);
        self
    }
}

/// The signature of a mutation's methods (the original's and the mutant's are the same).
fn signature(m: TypeMutation, r: &Refs) -> Sig {
    let (ret, params, locals) = match m {
        TypeMutation::NegString
        | TypeMutation::SwitchFloat
        | TypeMutation::BeqInt32String
        | TypeMutation::BrtrueFloat
        | TypeMutation::ThrowInt32
        | TypeMutation::StfldString => (SigType::Void, 0, vec![]),
        TypeMutation::RetInt32AsObject
        | TypeMutation::IsinstInt32
        | TypeMutation::CastclassInt32 => (SigType::Object, 0, vec![]),
        TypeMutation::StlocString
        | TypeMutation::StlocInt64
        | TypeMutation::StlocFloat
        | TypeMutation::LdindFloat
        | TypeMutation::StindThroughInt32
        | TypeMutation::InitobjInt32 => (SigType::I4, 0, vec![SigType::I4]),
        TypeMutation::StargInt64 => (SigType::I4, 1, vec![]),
        TypeMutation::RetStringAsException => (SigType::Class(r.exception), 0, vec![]),
        TypeMutation::ConstrainedOtherTarget => (SigType::I4, 0, vec![SigType::I4, SigType::I8]),
        TypeMutation::TailCallByRef => (SigType::I4, 0, vec![SigType::I4]),
        TypeMutation::ReturnLocalAddress => (SigType::ByRef(&SigType::I4), 0, vec![SigType::I4]),
        TypeMutation::CallvirtOnInt32 => (SigType::String, 0, vec![]),
        TypeMutation::AddInt64Operand
        | TypeMutation::AddNullOperand
        | TypeMutation::MulStringOperand
        | TypeMutation::AndFloat
        | TypeMutation::ShlFloat
        | TypeMutation::NotFloat
        | TypeMutation::CkfiniteInt32
        | TypeMutation::CeqInt32Int64
        | TypeMutation::ReadonlyCallProbe
        | TypeMutation::CallCtorOnObject
        | TypeMutation::DelegateAcrossBranch
        | TypeMutation::DelegateWrongTarget
        | TypeMutation::CallVirtualNonVirtually
        | TypeMutation::CallArgInt64
        | TypeMutation::CallArgString
        | TypeMutation::RetInt64
        | TypeMutation::RetString
        | TypeMutation::LdfldOnInt32
        | TypeMutation::JoinInt32Null
        | TypeMutation::JoinInt32String
        | TypeMutation::JoinInt32Int64
        | TypeMutation::AddFloatOperand
        | TypeMutation::CltFloatInt32
        | TypeMutation::CallArgFloat
        | TypeMutation::RetFloat
        | TypeMutation::XorFloat
        | TypeMutation::DivUnFloat
        | TypeMutation::AddOvfFloat
        | TypeMutation::ShlFloatAmount
        | TypeMutation::ConvString
        | TypeMutation::LdelemNullIndex
        | TypeMutation::NewarrFloatSize
        | TypeMutation::LdfldaOnInt32
        | TypeMutation::StsfldString
        | TypeMutation::LdlenOnInt32 => (SigType::I4, 0, vec![]),
    };
    Sig {
        ret,
        params,
        locals,
    }
}

/// The body of a mutation's original (`mutated` false) or mutant: the two differ at the one
/// place the mutation names.
fn body(m: TypeMutation, mutated: bool, r: &Refs, k: &mut Il) {
    match m {
        TypeMutation::AddInt64Operand => {
            k.i4(1);
            if mutated {
                k.i8(2)
            } else {
                k.i4(2)
            };
            k.op(Opcode::Add).op(Opcode::Ret);
        }
        TypeMutation::AddNullOperand => {
            k.i4(1);
            if mutated {
                k.op(Opcode::Ldnull)
            } else {
                k.i4(2)
            };
            k.op(Opcode::Add).op(Opcode::Ret);
        }
        TypeMutation::MulStringOperand => {
            k.i4(3);
            if mutated {
                k.tok(Opcode::Ldstr, r.s_text)
            } else {
                k.i4(2)
            };
            k.op(Opcode::Mul).op(Opcode::Ret);
        }
        TypeMutation::NegString => {
            if mutated {
                k.tok(Opcode::Ldstr, r.s_text)
            } else {
                k.i4(5)
            };
            k.op(Opcode::Neg).op(Opcode::Pop).op(Opcode::Ret);
        }
        TypeMutation::AndFloat => {
            k.r8(6.0).r8(3.0);
            k.op(if mutated { Opcode::And } else { Opcode::Mul });
            k.op(Opcode::Conv_I4).op(Opcode::Ret);
        }
        TypeMutation::ShlFloat => {
            k.r8(6.0);
            if !mutated {
                k.op(Opcode::Conv_I4);
            }
            k.i4(1).op(Opcode::Shl).op(Opcode::Ret);
        }
        TypeMutation::NotFloat => {
            k.r8(6.0);
            if !mutated {
                k.op(Opcode::Conv_I4);
            }
            k.op(Opcode::Not).op(Opcode::Ret);
        }
        TypeMutation::CkfiniteInt32 => {
            if mutated {
                k.i4(1)
            } else {
                k.r8(1.5)
            };
            k.op(Opcode::Ckfinite).op(Opcode::Conv_I4).op(Opcode::Ret);
        }
        TypeMutation::BrtrueFloat => {
            let l = k.0.new_label();
            if mutated {
                k.r8(1.0)
            } else {
                k.i4(1)
            };
            k.br(Opcode::Brtrue, l).bind(l).op(Opcode::Ret);
        }
        TypeMutation::CeqInt32Int64 => {
            k.i4(4);
            if mutated {
                k.i8(4)
            } else {
                k.i4(4)
            };
            k.op(Opcode::Ceq).op(Opcode::Ret);
        }
        TypeMutation::CallArgInt64 => {
            if mutated {
                k.i8(5)
            } else {
                k.i4(5)
            };
            k.tok(Opcode::Call, r.probe).op(Opcode::Ret);
        }
        TypeMutation::ReadonlyCallProbe => {
            k.i4(5);
            if mutated {
                k.op(Opcode::Readonly);
            }
            k.tok(Opcode::Call, r.probe).op(Opcode::Ret);
        }
        TypeMutation::DelegateAcrossBranch => {
            // Both build the delegate, run it and return 3.
            k.op(Opcode::Ldnull).tok(Opcode::Ldftn, r.nop);
            if mutated {
                let make = k.0.new_label();
                k.br(Opcode::Br, make).bind(make);
            }
            k.tok(Opcode::Newobj, r.action_ctor)
                .tok(Opcode::Callvirt, r.action_invoke)
                .i4(3)
                .op(Opcode::Ret);
        }
        TypeMutation::ConstrainedOtherTarget => {
            // Both return 3; the mutant's pointer is to the int64 local.
            k.var(Opcode::Ldloca, if mutated { 1 } else { 0 })
                .tok(Opcode::Constrained, r.int32)
                .tok(Opcode::Callvirt, r.object_to_string)
                .op(Opcode::Pop)
                .i4(3)
                .op(Opcode::Ret);
        }
        TypeMutation::TailCallByRef => {
            k.i4(4).var(Opcode::Stloc, 0).var(Opcode::Ldloca, 0);
            if mutated {
                k.op(Opcode::Tail);
            }
            k.tok(Opcode::Call, r.probe_ref).op(Opcode::Ret);
        }
        TypeMutation::CallVirtualNonVirtually => {
            // Both return 3: String overrides ToString, which the mutant still reaches.
            let op = if mutated {
                Opcode::Call
            } else {
                Opcode::Callvirt
            };
            k.tok(Opcode::Ldstr, r.s_text)
                .tok(op, r.object_to_string)
                .op(Opcode::Pop)
                .i4(3)
                .op(Opcode::Ret);
        }
        TypeMutation::ReturnLocalAddress => {
            if mutated {
                k.var(Opcode::Ldloca, 0)
            } else {
                k.tok(Opcode::Ldsflda, r.slot)
            };
            k.op(Opcode::Ret);
        }
        TypeMutation::DelegateWrongTarget => {
            // Both build the delegate and return 3; only the original runs it (the mutant's
            // would pass its target an argument that is not there).
            let target = if mutated { r.probe } else { r.nop };
            k.op(Opcode::Ldnull)
                .tok(Opcode::Ldftn, target)
                .tok(Opcode::Newobj, r.action_ctor);
            if mutated {
                k.op(Opcode::Pop);
            } else {
                k.tok(Opcode::Callvirt, r.action_invoke);
            }
            k.i4(3).op(Opcode::Ret);
        }
        TypeMutation::CallCtorOnObject => {
            // Both return 2: the field stored, or set by the constructor run again.
            k.i4(1)
                .tok(Opcode::Newobj, r.gen_ctor)
                .op(Opcode::Dup)
                .i4(2);
            if mutated {
                k.tok(Opcode::Call, r.gen_ctor)
            } else {
                k.tok(Opcode::Stfld, r.value)
            };
            k.tok(Opcode::Ldfld, r.value).op(Opcode::Ret);
        }
        TypeMutation::CallArgString => {
            if mutated {
                k.tok(Opcode::Ldstr, r.s_text)
            } else {
                k.i4(5)
            };
            k.tok(Opcode::Call, r.probe).op(Opcode::Ret);
        }
        TypeMutation::RetInt64 => {
            if mutated {
                k.i8(7)
            } else {
                k.i4(7)
            };
            k.op(Opcode::Ret);
        }
        TypeMutation::RetString => {
            if mutated {
                k.tok(Opcode::Ldstr, r.s_text)
            } else {
                k.i4(7)
            };
            k.op(Opcode::Ret);
        }
        TypeMutation::RetInt32AsObject => {
            if mutated {
                k.i4(7)
            } else {
                k.tok(Opcode::Ldstr, r.s_text)
            };
            k.op(Opcode::Ret);
        }
        TypeMutation::StlocString => {
            if mutated {
                k.tok(Opcode::Ldstr, r.s_text)
            } else {
                k.i4(1)
            };
            k.var(Opcode::Stloc, 0)
                .var(Opcode::Ldloc, 0)
                .op(Opcode::Ret);
        }
        TypeMutation::StlocInt64 => {
            if mutated {
                k.i8(1)
            } else {
                k.i4(1)
            };
            k.var(Opcode::Stloc, 0)
                .var(Opcode::Ldloc, 0)
                .op(Opcode::Ret);
        }
        TypeMutation::StargInt64 => {
            if mutated {
                k.i8(1)
            } else {
                k.i4(1)
            };
            k.var(Opcode::Starg, 0)
                .var(Opcode::Ldarg, 0)
                .op(Opcode::Ret);
        }
        TypeMutation::StfldString => {
            k.i4(1).tok(Opcode::Newobj, r.gen_ctor);
            if mutated {
                k.tok(Opcode::Ldstr, r.s_text)
            } else {
                k.i4(2)
            };
            k.tok(Opcode::Stfld, r.value).op(Opcode::Ret);
        }
        TypeMutation::ThrowInt32 => {
            k.i4(9);
            if !mutated {
                k.tok(Opcode::Newobj, r.gen_ctor);
            }
            k.op(Opcode::Throw);
        }
        TypeMutation::LdfldOnInt32 => {
            k.i4(0);
            if !mutated {
                k.tok(Opcode::Newobj, r.gen_ctor);
            }
            k.tok(Opcode::Ldfld, r.value).op(Opcode::Ret);
        }
        TypeMutation::IsinstInt32 => {
            if mutated {
                k.i4(0)
            } else {
                k.tok(Opcode::Ldstr, r.s_text)
            };
            k.tok(Opcode::Isinst, r.gen_exception).op(Opcode::Ret);
        }
        TypeMutation::JoinInt32Null
        | TypeMutation::JoinInt32String
        | TypeMutation::JoinInt32Int64 => {
            // Two paths meet at `join`, one with an int32 on the stack, the other with what
            // the mutation puts there; the int32 path is the one taken.
            let (other, join) = (k.0.new_label(), k.0.new_label());
            k.i4(0).br(Opcode::Brtrue, other).i4(1).br(Opcode::Br, join);
            k.bind(other);
            match (m, mutated) {
                (_, false) => k.i4(2),
                (TypeMutation::JoinInt32Null, true) => k.op(Opcode::Ldnull),
                (TypeMutation::JoinInt32String, true) => k.tok(Opcode::Ldstr, r.s_text),
                (_, true) => k.i8(2),
            };
            k.bind(join).op(Opcode::Pop).i4(3).op(Opcode::Ret);
        }
        TypeMutation::AddFloatOperand => {
            k.i4(1);
            if mutated {
                k.r8(2.0)
            } else {
                k.i4(2)
            };
            k.op(Opcode::Add).op(Opcode::Ret);
        }
        TypeMutation::CltFloatInt32 => {
            if mutated {
                k.r8(1.0)
            } else {
                k.i4(1)
            };
            k.i4(2).op(Opcode::Clt).op(Opcode::Ret);
        }
        TypeMutation::BeqInt32String => {
            let l = k.0.new_label();
            k.i4(0);
            if mutated {
                k.tok(Opcode::Ldstr, r.s_text)
            } else {
                k.i4(1)
            };
            k.br(Opcode::Beq, l).bind(l).op(Opcode::Ret);
        }
        TypeMutation::SwitchFloat => {
            let l = k.0.new_label();
            if mutated {
                k.r8(0.0)
            } else {
                k.i4(0)
            };
            let table = k.0.add_switch(&[l]);
            k.0.push(Instr::new(Opcode::Switch, Operand::Switch(table)));
            k.bind(l).op(Opcode::Ret);
        }
        TypeMutation::CallArgFloat => {
            if mutated {
                k.r8(5.0)
            } else {
                k.i4(5)
            };
            k.tok(Opcode::Call, r.probe).op(Opcode::Ret);
        }
        TypeMutation::CallvirtOnInt32 => {
            if mutated {
                k.i4(0)
            } else {
                k.tok(Opcode::Ldstr, r.s_text)
            };
            k.tok(Opcode::Callvirt, r.object_to_string).op(Opcode::Ret);
        }
        TypeMutation::RetFloat => {
            if mutated {
                k.r8(7.0)
            } else {
                k.i4(7)
            };
            k.op(Opcode::Ret);
        }
        TypeMutation::StlocFloat => {
            if mutated {
                k.r8(1.0)
            } else {
                k.i4(1)
            };
            k.var(Opcode::Stloc, 0)
                .var(Opcode::Ldloc, 0)
                .op(Opcode::Ret);
        }
        TypeMutation::LdindFloat => {
            if mutated {
                k.r8(0.0)
            } else {
                k.var(Opcode::Ldloca, 0)
            };
            k.op(Opcode::Ldind_I4).op(Opcode::Ret);
        }
        TypeMutation::LdlenOnInt32 => {
            k.i4(1);
            if !mutated {
                k.tok(Opcode::Newarr, r.int32);
            }
            k.op(Opcode::Ldlen).op(Opcode::Conv_I4).op(Opcode::Ret);
        }
        TypeMutation::XorFloat => {
            k.r8(6.0).r8(3.0);
            k.op(if mutated { Opcode::Xor } else { Opcode::Sub });
            k.op(Opcode::Conv_I4).op(Opcode::Ret);
        }
        TypeMutation::DivUnFloat => {
            k.r8(6.0).r8(3.0);
            k.op(if mutated { Opcode::Div_Un } else { Opcode::Div });
            k.op(Opcode::Conv_I4).op(Opcode::Ret);
        }
        TypeMutation::AddOvfFloat => {
            k.r8(6.0).r8(3.0);
            k.op(if mutated {
                Opcode::Add_Ovf
            } else {
                Opcode::Add
            });
            k.op(Opcode::Conv_I4).op(Opcode::Ret);
        }
        TypeMutation::ShlFloatAmount => {
            k.i4(6);
            if mutated {
                k.r8(1.0)
            } else {
                k.i4(1)
            };
            k.op(Opcode::Shl).op(Opcode::Ret);
        }
        TypeMutation::ConvString => {
            if mutated {
                k.tok(Opcode::Ldstr, r.s_text)
            } else {
                k.r8(2.5)
            };
            k.op(Opcode::Conv_I4).op(Opcode::Ret);
        }
        TypeMutation::StindThroughInt32 => {
            if mutated {
                k.i4(0)
            } else {
                k.var(Opcode::Ldloca, 0)
            };
            k.i4(1)
                .op(Opcode::Stind_I4)
                .var(Opcode::Ldloc, 0)
                .op(Opcode::Ret);
        }
        TypeMutation::CastclassInt32 => {
            if mutated {
                k.i4(0)
            } else {
                k.tok(Opcode::Ldstr, r.s_text)
            };
            k.tok(Opcode::Castclass, r.string).op(Opcode::Ret);
        }
        TypeMutation::LdelemNullIndex => {
            k.i4(1).tok(Opcode::Newarr, r.int32);
            if mutated {
                k.op(Opcode::Ldnull)
            } else {
                k.i4(0)
            };
            k.op(Opcode::Ldelem_I4).op(Opcode::Ret);
        }
        TypeMutation::NewarrFloatSize => {
            if mutated {
                k.r8(1.0)
            } else {
                k.i4(1)
            };
            k.tok(Opcode::Newarr, r.int32)
                .op(Opcode::Ldlen)
                .op(Opcode::Conv_I4)
                .op(Opcode::Ret);
        }
        TypeMutation::LdfldaOnInt32 => {
            k.i4(0);
            if !mutated {
                k.tok(Opcode::Newobj, r.gen_ctor);
            }
            k.tok(Opcode::Ldflda, r.value)
                .op(Opcode::Ldind_I4)
                .op(Opcode::Ret);
        }
        TypeMutation::InitobjInt32 => {
            if mutated {
                k.i4(0)
            } else {
                k.var(Opcode::Ldloca, 0)
            };
            k.tok(Opcode::Initobj, r.int32)
                .var(Opcode::Ldloc, 0)
                .op(Opcode::Ret);
        }
        TypeMutation::StsfldString => {
            if mutated {
                k.tok(Opcode::Ldstr, r.s_text)
            } else {
                k.i4(1)
            };
            k.tok(Opcode::Stsfld, r.slot)
                .tok(Opcode::Ldsfld, r.slot)
                .op(Opcode::Ret);
        }
        TypeMutation::RetStringAsException => {
            if mutated {
                k.tok(Opcode::Ldstr, r.s_text)
            } else {
                k.i4(1).tok(Opcode::Newobj, r.gen_ctor)
            };
            k.op(Opcode::Ret);
        }
    }
}

fn lay_out(m: &Method, name: &str) -> Result<Vec<u8>, MutantError> {
    let mut out = Vec::new();
    let opts = LayoutOptions {
        branch_forms: BranchForms::ShortestWhereFits,
        max_stack: MaxStackPolicy::Declared,
        verify: false,
    };
    crate::ir::layout(m, &opts, &SyntheticResolver::new(), &mut out).map_err(|source| {
        MutantError::Layout {
            method: name.to_string(),
            source,
        }
    })?;
    Ok(out)
}

fn header(local_sig: Token) -> HeaderInfo {
    HeaderInfo {
        max_stack: 8,
        init_locals: local_sig.0 != 0,
        local_sig: local_sig.0,
    }
}

/// The program `NAME.exe` of `methods`, in their order, and a `Main` that calls each inside a
/// `try`/`catch` and prints its result line (see the module documentation).
pub fn build_program(name: &str, methods: &[MutantMethod]) -> Result<Vec<u8>, MutantError> {
    let mut b = AssemblyBuilder::new(name, [1, 0, 0, 0], ImageKind::Exe)?;
    let corlib = b.assembly_ref(&AssemblyIdentity {
        name: "mscorlib".into(),
        version: [4, 0, 0, 0],
        culture: String::new(),
        public_key_or_token: vec![0xB7, 0x7A, 0x5C, 0x56, 0x19, 0x34, 0xE0, 0x89],
        full_public_key: false,
    })?;
    let object = b.type_ref(corlib, "System", "Object")?;
    let exception = b.type_ref(corlib, "System", "Exception")?;
    let string = b.type_ref(corlib, "System", "String")?;
    let console = b.type_ref(corlib, "System", "Console")?;
    let type_ = b.type_ref(corlib, "System", "Type")?;
    let int32 = b.type_ref(corlib, "System", "Int32")?;
    let base_ctor = b.member_ref(exception, ".ctor", &method_sig(true, SigType::Void, &[])?)?;
    let public_class = flags::TYPE_PUBLIC | flags::TYPE_BEFORE_FIELD_INIT;
    let static_flags = flags::METHOD_PUBLIC | flags::METHOD_STATIC | flags::METHOD_HIDE_BY_SIG;

    // The exception class: an object with an int32 field, for the field and object rules.
    let gen_exception = b.type_def(
        public_class,
        "Ilcheck",
        "GeneratedException",
        Some(exception),
    )?;
    let value = b.field(flags::FIELD_PUBLIC, "Value", &field_sig(SigType::I4)?)?;
    let mut ctor = Il(Method::new(header(Token(0))));
    ctor.var(Opcode::Ldarg, 0)
        .tok(Opcode::Call, base_ctor)
        .var(Opcode::Ldarg, 0)
        .var(Opcode::Ldarg, 1)
        .tok(Opcode::Stfld, value)
        .op(Opcode::Ret);
    let gen_ctor = b.method(
        flags::METHOD_PUBLIC
            | flags::METHOD_HIDE_BY_SIG
            | flags::METHOD_SPECIAL_NAME
            | flags::METHOD_RT_SPECIAL_NAME,
        ".ctor",
        &method_sig(true, SigType::Void, &[SigType::I4])?,
        &lay_out(&ctor.0, "GeneratedException::.ctor")?,
    )?;

    let (namespace, class) = CLASS.rsplit_once('.').unwrap_or(("", CLASS));
    b.type_def(
        public_class | flags::TYPE_ABSTRACT | flags::TYPE_SEALED,
        namespace,
        class,
        Some(object),
    )?;
    // A static int32 field, for the static field rules.
    let slot = b.field(
        flags::FIELD_PUBLIC | flags::FIELD_STATIC,
        "Slot",
        &field_sig(SigType::I4)?,
    )?;
    // `int32 Probe(int32)`: the callee of the call rules.
    let mut probe = Il(Method::new(header(Token(0))));
    probe.var(Opcode::Ldarg, 0).op(Opcode::Ret);
    let probe = b.method(
        static_flags,
        "Probe",
        &method_sig(false, SigType::I4, &[SigType::I4])?,
        &lay_out(&probe.0, "Probe")?,
    )?;
    // `void Nop()`: the delegate rules' target.
    let mut nop = Il(Method::new(header(Token(0))));
    nop.op(Opcode::Ret);
    let nop = b.method(
        static_flags,
        "Nop",
        &method_sig(false, SigType::Void, &[])?,
        &lay_out(&nop.0, "Nop")?,
    )?;
    // `int32 ProbeRef(int32&)`: reads what its argument points to.
    let mut probe_ref = Il(Method::new(header(Token(0))));
    probe_ref
        .var(Opcode::Ldarg, 0)
        .op(Opcode::Ldind_I4)
        .op(Opcode::Ret);
    let probe_ref = b.method(
        static_flags,
        "ProbeRef",
        &method_sig(false, SigType::I4, &[SigType::ByRef(&SigType::I4)])?,
        &lay_out(&probe_ref.0, "ProbeRef")?,
    )?;
    let action = b.type_ref(corlib, "System", "Action")?;
    let refs = Refs {
        exception,
        gen_exception,
        gen_ctor,
        value,
        probe,
        nop,
        probe_ref,
        action_ctor: b.member_ref(
            action,
            ".ctor",
            &method_sig(true, SigType::Void, &[SigType::Object, SigType::IntPtr])?,
        )?,
        action_invoke: b.member_ref(action, "Invoke", &method_sig(true, SigType::Void, &[])?)?,
        int32,
        string,
        slot,
        write_line: b.member_ref(
            console,
            "WriteLine",
            &method_sig(false, SigType::Void, &[SigType::String])?,
        )?,
        concat2: b.member_ref(
            string,
            "Concat",
            &method_sig(false, SigType::String, &[SigType::String; 2])?,
        )?,
        get_type: b.member_ref(
            object,
            "GetType",
            &method_sig(true, SigType::Class(type_), &[])?,
        )?,
        object_to_string: b.member_ref(
            object,
            "ToString",
            &method_sig(true, SigType::String, &[])?,
        )?,
        s_text: b.user_string("text")?,
    };

    let mut tokens = Vec::with_capacity(methods.len());
    for &m in methods {
        let name = m.name();
        let sig = signature(m.mutation, &refs);
        let locals = if sig.locals.is_empty() {
            Token(0)
        } else {
            b.standalone_sig(&locals_sig(&sig.locals)?)?
        };
        let mut k = Il(Method::new(header(locals)));
        body(m.mutation, m.mutated, &refs, &mut k);
        let params = vec![SigType::I4; usize::from(sig.params)];
        // Not inlined: each runtime compiles the method on its own, so what its JIT does with
        // it is the method's result, not its caller's.
        let t = b.method_with_impl(
            static_flags,
            flags::METHOD_IMPL_NO_INLINING,
            &name,
            &method_sig(false, sig.ret, &params)?,
            &lay_out(&k.0, &name)?,
        )?;
        tokens.push((t, sig));
    }

    // One runner per method, each with its own `try`/`catch` (so never inlined): a runtime that
    // dies compiling or running one has printed the lines of those before it.
    let runner_locals = b.standalone_sig(&locals_sig(&[SigType::Object])?)?;
    let mut runners = Vec::with_capacity(methods.len());
    for (&m, (token, sig)) in methods.iter().zip(&tokens) {
        let ran = b.user_string(&format!("{RESULT_MARK}{} ran", m.name()))?;
        let threw = b.user_string(&format!("{RESULT_MARK}{} threw ", m.name()))?;
        let mut k = Il(Method::new(header(runner_locals)));
        let (try_start, handler, handler_end, after) = (
            k.0.new_label(),
            k.0.new_label(),
            k.0.new_label(),
            k.0.new_label(),
        );
        k.bind(try_start);
        for _ in 0..sig.params {
            k.i4(0);
        }
        k.tok(Opcode::Call, *token);
        if sig.ret != SigType::Void {
            k.op(Opcode::Pop);
        }
        k.tok(Opcode::Ldstr, ran)
            .tok(Opcode::Call, refs.write_line)
            .br(Opcode::Leave, after);
        k.bind(handler)
            .var(Opcode::Stloc, 0)
            .tok(Opcode::Ldstr, threw)
            .var(Opcode::Ldloc, 0)
            .tok(Opcode::Callvirt, refs.get_type)
            .tok(Opcode::Callvirt, refs.object_to_string)
            .tok(Opcode::Call, refs.concat2)
            .tok(Opcode::Call, refs.write_line)
            .br(Opcode::Leave, after)
            .bind(handler_end);
        k.0.clauses.push(EhClause {
            kind: ClauseKind::Catch,
            try_start,
            try_end: handler,
            handler_start: handler,
            handler_end,
            filter_start: None,
            class_token: refs.exception.0,
            extra_flags: 0,
        });
        k.bind(after).op(Opcode::Ret);
        let name = format!("Run_{}", m.name());
        runners.push(b.method(
            static_flags,
            &name,
            &method_sig(false, SigType::Void, &[])?,
            &lay_out(&k.0, &name)?,
        )?);
    }
    let mut k = Il(Method::new(header(Token(0))));
    for r in runners {
        k.tok(Opcode::Call, r);
    }
    k.op(Opcode::Ret);
    let main = b.method(
        static_flags,
        "Main",
        &method_sig(false, SigType::Void, &[])?,
        &lay_out(&k.0, "Main")?,
    )?;
    b.set_entry_point(main);
    Ok(b.build()?)
}

/// What a runtime did with one method of a mutant program.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RunResult {
    /// It was compiled and returned.
    Ran,
    /// It was compiled and threw this exception (not `InvalidProgramException`).
    Threw(String),
    /// The runtime refused to compile it: `InvalidProgramException`.
    Rejected,
    /// The runtime died while running it (signal or exit without its result line); `how`
    /// says how it ended.
    Crashed(String),
    /// The deadline passed while running it.
    TimedOut,
}

impl RunResult {
    /// Whether the runtime compiled the method (it ran, or threw an ordinary exception).
    pub fn compiled(&self) -> bool {
        match self {
            RunResult::Ran | RunResult::Threw(_) => true,
            RunResult::Rejected | RunResult::Crashed(_) | RunResult::TimedOut => false,
        }
    }

    /// A short description for tables: `ran`, `threw X`, `rejected`, `crashed (…)`, `timed out`.
    pub fn describe(&self) -> String {
        match self {
            RunResult::Ran => "ran".into(),
            RunResult::Threw(e) => format!("ran, threw {e}"),
            RunResult::Rejected => "rejected (InvalidProgramException)".into(),
            RunResult::Crashed(how) => format!("crashed ({how})"),
            RunResult::TimedOut => "timed out".into(),
        }
    }
}

/// The exception the runtimes throw when the JIT rejects a method.
const INVALID_PROGRAM: &str = "System.InvalidProgramException";

/// Runs `methods` under `runtime`, each program in `dir` under `timeout`, and returns what
/// happened to each, in order. A run that dies marks the first method without a result line
/// crashed (or timed out), and the methods after it run again in a new program, so one crash
/// costs one more runtime start.
pub fn run_methods(
    runtime: &crate::harness::Runtime,
    dir: &Path,
    methods: &[MutantMethod],
    timeout: Duration,
) -> Result<Vec<RunResult>, String> {
    let mut results = Vec::with_capacity(methods.len());
    let mut attempt = 0;
    while results.len() < methods.len() {
        let rest = &methods[results.len()..];
        let name = format!("TypeMutants{attempt}");
        let bytes = build_program(&name, rest).map_err(|e| e.to_string())?;
        let exe = dir.join(format!("{name}.exe"));
        crate::fsio::write_atomic(&exe, &bytes).map_err(|e| format!("{}: {e}", exe.display()))?;
        crate::fsio::write_atomic(
            &dir.join(format!("{name}.runtimeconfig.json")),
            crate::harness::program::RUNTIMECONFIG.as_bytes(),
        )
        .map_err(|e| e.to_string())?;
        let out = runtime
            .run(&exe, &[], timeout)
            .map_err(|e| format!("{}: {e}", runtime.describe()))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let mut lines = stdout.lines().filter(|l| l.starts_with(RESULT_MARK));
        for m in rest {
            let prefix = format!("{RESULT_MARK}{} ", m.name());
            match lines.next().and_then(|l| l.strip_prefix(&prefix)) {
                Some("ran") => results.push(RunResult::Ran),
                Some(rest) => match rest.strip_prefix("threw ") {
                    Some(INVALID_PROGRAM) => results.push(RunResult::Rejected),
                    Some(e) => results.push(RunResult::Threw(e.to_string())),
                    None => return Err(format!("unexpected result line: {rest}")),
                },
                None => {
                    results.push(if out.timed_out {
                        RunResult::TimedOut
                    } else {
                        RunResult::Crashed(out.describe())
                    });
                    break;
                }
            }
        }
        attempt += 1;
    }
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::Image;

    #[test]
    fn names_are_unique_and_every_mutation_is_listed_once() {
        let names: std::collections::BTreeSet<&str> =
            TypeMutation::ALL.iter().map(|m| m.name()).collect();
        assert_eq!(names.len(), TypeMutation::ALL.len());
        assert_eq!(all_methods().len(), 2 * TypeMutation::ALL.len());
    }

    #[test]
    fn each_mutant_differs_from_its_original_and_the_program_reads_back() {
        let bytes = build_program("p", &all_methods()).unwrap();
        assert_eq!(bytes, build_program("p", &all_methods()).unwrap());
        let image = Image::parse(&bytes).unwrap();
        let mut bodies = std::collections::BTreeMap::new();
        for m in image.methods() {
            let name = m.full_name().unwrap();
            let code = m.decoded_body().unwrap().code.to_vec();
            bodies.insert(name, code);
        }
        for m in TypeMutation::ALL {
            let body = |mutated| {
                let prefix = format!("{CLASS}::{}(", m.method_name(mutated));
                bodies
                    .iter()
                    .find(|(n, _)| n.starts_with(&prefix))
                    .map(|(_, b)| b.clone())
                    .unwrap_or_else(|| panic!("{prefix} missing"))
            };
            assert_ne!(body(false), body(true), "{}", m.name());
        }
        assert!(
            bodies
                .keys()
                .any(|n| n.starts_with(&format!("{CLASS}::Main(")))
        );
    }
}
