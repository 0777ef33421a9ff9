//! Structural verifier for method bodies.
//!
//! Checks what ECMA-335 requires of a body's shape — instruction stream, branch targets,
//! evaluation-stack depths, the exception-handling table, entry and exit of protected regions,
//! prefixes and operand ranges — without type inference. Every opcode fact (operand kind, stack
//! effect, flow) comes from [`crate::opcode`]; signatures and metadata come from a [`Resolver`].
//!
//! The work is a linear decode into a compact per-instruction array, a linear pass over the EH
//! table that assigns each instruction its innermost region, linear rule passes, and a worklist
//! dataflow for stack depths in which each instruction is visited once. Before them, a body
//! gets one forward pass (`single_pass`, III.1.7.5) that decodes and follows the depth and
//! the protected regions together; it accepts the common body, with regions or without, and
//! leaves everything else, and all reporting, to the full passes. A reusable [`Verifier`]
//! keeps its scratch buffers between bodies. Input is untrusted: nothing panics, every loop is
//! bounded by the input, and memory stays a small multiple of the code size.
//!
//! Stack rules are checked on code reachable from the entry point and the handlers; the other
//! rules on every instruction.
//!
//! A finding may carry a [`Detail`]: the EH clause it concerns (and the other one involved), or,
//! at a join where stack depths disagree, every way control arrives with the depth it brings.
//! The arrivals are worked out after the passes, and only for a body with such a finding, so
//! that the clean path pays nothing for them.

mod align;
mod arrivals;
mod clauses;
mod detail;
mod eh;
mod flow;
mod operand;
pub(crate) mod resolver;
mod single_pass;
mod stack;
#[cfg(test)]
mod tests;
pub mod types;

pub use align::{AlignStats, Aligner, Key, TokenIdentity, Unchecked, key};
pub use detail::{Arrival, ArrivalKind, Detail, MAX_ARRIVALS};
pub use resolver::{
    CallSig, ImageResolver, MethodSig, NoResolver, Resolver, SyntheticResolver, TokenLimits,
    token_table_fits, tokens_pass_by_counts,
};

use crate::body::{Body, Clause};
use crate::opcode::{Flow, Opcode, OperandKind};
use clauses::Clauses;
use serde::Serialize;
use std::fmt;

macro_rules! codes {
    ($( $(#[doc = $doc:literal])* $name:ident, )*) => {
        /// A diagnostic's stable name. Names match ILVerify's `VerifierError` where one exists;
        /// the `EH…` table rules and a few others are ilcheck's own.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
        pub enum Code {
            $( $(#[doc = $doc])* $name, )*
        }

        impl Code {
            /// Every code, in declaration order.
            pub const ALL: &'static [Code] = &[$(Code::$name,)*];

            /// The stable name.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Code::$name => stringify!($name),)*
                }
            }

            /// What the rule requires, with its ECMA-335 reference: the variant's documentation.
            pub fn description(self) -> &'static str {
                match self {
                    $(Code::$name => concat!($($doc),*).trim_start(),)*
                }
            }

            /// The code with this stable name.
            pub fn from_name(name: &str) -> Option<Code> {
                match name {
                    $(stringify!($name) => Some(Code::$name),)*
                    _ => None,
                }
            }
        }
    };
}

codes! {
    // Instruction stream.
    /// An undefined opcode byte (III.1.2, III.1.9).
    UnknownOpcode,
    /// The code is empty (II.25.4.1: a body holds at least one instruction).
    CodeSizeZero,
    /// The code ends inside an instruction or after a prefix with no instruction (III.1.2).
    MethodEnd,
    /// Control falls off the end of the code (III.1.7.4).
    MethodFallthrough,

    // Branch targets.
    /// A branch, `switch` or `leave` target outside the code (III.1.7.4, III.3.15).
    BadBranch,
    /// A target in the middle of an instruction or between a prefix and its instruction
    /// (III.1.7.4, III.2).
    BadJumpTarget,

    // Evaluation stack.
    /// An instruction pops more items than the stack holds (III.1.7.5).
    StackUnderflow,
    /// The stack grows beyond the declared MaxStack (II.25.4.3; tiny headers declare 8).
    StackOverflow,
    /// Paths reach an instruction with different stack depths (III.1.7.5).
    PathStackDepth,
    /// After an unconditional transfer, an instruction not reached by an earlier forward branch
    /// starts with a non-empty stack (III.1.7.5, single forward scan).
    BackwardBranch,
    /// `ret` from a void method with a non-empty stack (III.3.56).
    ReturnVoid,
    /// `ret` from a non-void method with an empty stack (III.3.56).
    ReturnMissing,
    /// `ret` from a non-void method with more than the return value on the stack (III.3.56).
    ReturnEmpty,
    /// `jmp` with a non-empty stack (III.3.37). ilcheck's own name.
    JmpStackNotEmpty,
    /// `endfilter` without exactly one item on the stack (III.3.34).
    EndfilterStack,
    /// A `tail.` call with more than its arguments on the stack (III.2.4).
    TailStackEmpty,
    /// A try entered with a non-empty stack (III.1.7.5, II.19).
    TryNonEmptyStack,
    /// Unverifiable: `localloc` with more than its size on the stack (III.3.47: "Correct CIL
    /// requires that the evaluation stack be empty apart from the size item"). Roslyn emits it
    /// for `Span<T> s = stackalloc T[n]` (`dup` keeps `n` below the size) and CoreCLR's JIT
    /// runs it; ILVerify reports it under this name.
    LocallocStackNotEmpty,

    // Exception-handling table (II.19, II.25.4.6). Own names except EHClauseOutOfRange.
    /// A try, handler or filter reaches outside the code (II.19, II.25.4.6).
    EHClauseOutOfRange,
    /// Clause flags name no handler kind (II.25.4.6).
    EHInvalidKind,
    /// A try or handler of length zero (II.19, II.25.4.6).
    EHRegionEmpty,
    /// A region boundary not on an instruction start (or between a prefix and its instruction)
    /// (II.19).
    EHBoundaryNotInstructionStart,
    /// Two regions overlap without one nesting in the other, or a clause's handler or filter
    /// lies in its own try, or the reverse (I.12.4.2.7, II.19).
    EHOverlap,
    /// A try is the same block as a handler or filter (II.19).
    EHTryIsHandler,
    /// A try shared by several clauses has a finally or fault handler (II.19).
    EHSharedTryFinally,
    /// Two handlers or filters start at the same instruction (II.19).
    EHDuplicateHandlerStart,
    /// A clause nested in another is listed after it: inner clauses come first (I.12.4.2.7,
    /// II.19).
    EHOrderInnerAfterOuter,
    /// A filter does not start before its handler (II.19).
    EHFilterNotBeforeHandler,
    /// A filter contains a try, handler or filter (II.19).
    EHFilterContainsRegion,
    /// A filter's last instruction is not `endfilter` (II.19, III.3.34).
    EHFilterNoEndfilter,

    // Entering and leaving regions (II.19, III.1.7.4). One transfer may break a rule of each
    // class of region, try, filter and handler, and gets a code for each, as in ILVerify.
    /// A branch into a try other than at its first instruction (I.12.4.2.8, II.19).
    BranchIntoTry,
    /// A branch into a handler (I.12.4.2.8, II.19).
    BranchIntoHandler,
    /// A branch into a filter (I.12.4.2.8, II.19).
    BranchIntoFilter,
    /// A branch out of a try: only `leave` and `throw` may exit (I.12.4.2.8, II.19).
    BranchOutOfTry,
    /// A branch out of a catch or fault handler (I.12.4.2.8, II.19).
    BranchOutOfHandler,
    /// A branch out of a filter (I.12.4.2.8, II.19).
    BranchOutOfFilter,
    /// A branch out of a finally handler (I.12.4.2.8, II.19).
    BranchOutOfFinally,
    /// Control falls through the end of a try, handler or filter (I.12.4.2.8, II.19).
    FallthroughException,
    /// Control falls through into a handler (I.12.4.2.8, II.19).
    FallthroughIntoHandler,
    /// Control falls through into a filter (I.12.4.2.8, II.19).
    FallthroughIntoFilter,
    /// `ret` or `jmp` inside a try (I.12.4.2.8, III.3.56).
    ReturnFromTry,
    /// `ret` or `jmp` inside a handler (I.12.4.2.8, III.3.56).
    ReturnFromHandler,
    /// `ret` or `jmp` inside a filter (I.12.4.2.8, III.3.56).
    ReturnFromFilter,
    /// `leave` into a try other than at its first instruction (III.3.45).
    LeaveIntoTry,
    /// `leave` into a handler of any kind: catch, filter handler, finally or fault (III.3.45).
    LeaveIntoHandler,
    /// `leave` into a filter (III.3.45).
    LeaveIntoFilter,
    /// `leave` out of a filter (III.3.45).
    LeaveOutOfFilter,
    /// `leave` out of a finally handler (III.3.45).
    LeaveOutOfFinally,
    /// `leave` out of a fault handler (III.3.45).
    LeaveOutOfFault,
    /// `endfinally` outside a finally or fault handler (III.3.35).
    Endfinally,
    /// `endfilter` other than as the last instruction of a filter (III.3.34).
    Endfilter,
    /// `rethrow` outside a catch handler (III.4.24).
    Rethrow,

    // Prefixes (III.2).
    /// `tail.` not followed by `call`, `calli` or `callvirt` (III.2.4).
    TailCall,
    /// A `tail.` call not followed by `ret` (or a `br` to a `ret`) (III.2.4).
    TailRet,
    /// A `tail.` call inside a try, handler or filter (III.2.4).
    TailCallInsideER,
    /// `volatile.` before an instruction it cannot prefix (III.2.6).
    Volatile,
    /// `unaligned.` before an instruction it cannot prefix (III.2.5).
    Unaligned,
    /// `readonly.` before an instruction other than `ldelema` or `call` (III.2.3).
    ReadOnly,
    /// `constrained.` before an instruction other than `callvirt`, `call` or `ldftn` (III.2.1).
    Constrained,
    /// `no.` before an instruction it cannot prefix (III.2.2). ilcheck's own name.
    NoPrefix,

    // Operands.
    /// A local index beyond the locals signature (III.3.43, 3.44, 3.63; II.23.2.6).
    UnrecognizedLocalNumber,
    /// An argument index beyond the method's signature (III.3.38, 3.39, 3.61).
    UnrecognizedArgumentNumber,
    /// A token that names no row, or a row-0 token, or an `ldtoken` token of another table
    /// (III.1.9, II.22).
    TokenResolve,
    /// A TypeDef, TypeRef or TypeSpec token expected (III.1.9, II.25.4.6 catch class).
    ExpectedTypeToken,
    /// A MethodDef, MemberRef or MethodSpec token expected (III.1.9).
    ExpectedMethodToken,
    /// A Field or MemberRef token expected (III.1.9).
    ExpectedFieldToken,
    /// A StandAloneSig token expected for `calli` (III.3.20). ilcheck's own name.
    ExpectedSigToken,
    /// An `ldstr` token that is not a `#US` heap entry (III.4.16, II.24.2.4).
    StringOperand,

    // Not a verification error.
    /// The resolver does not know a callee's signature, so the stack depth after the call is
    /// unknown (III.1.7.5). Returned only by [`Verifier::needed_max_stack`];
    /// [`Verifier::verify`] skips such paths instead.
    UnresolvedToken,

    // Types (the type pass, [`types`]): stack slots, arguments, locals, fields and returns
    // against the types signatures give them (III.1.8.1). Invalid unless said otherwise.
    /// A value of another kind than the instruction or signature requires: an `int64` where an
    /// `int32` goes, an object reference where a number goes, a value type of another type
    /// (III.1.8.1.2.3, III.1.6). The JIT may reject or miscompile it.
    StackUnexpected,
    /// Paths reach an instruction with stack slots of kinds that do not merge (an integer on
    /// one, an object reference on the other) (III.1.8.1.3).
    PathStackUnexpected,
    /// A number expected (III.1.5 Table III.2): the operand is an object, a value type or a
    /// managed pointer where arithmetic needs a number.
    ExpectedNumericType,
    /// An integer expected (III.1.5 Tables III.5–III.7): `and`, `or`, `xor`, `not`, shifts,
    /// `.un` division and overflow arithmetic on `F` or a non-number.
    ExpectedIntegerType,
    /// `ckfinite` on a value that is not `F` (III.3.20).
    ExpectedFloatType,
    /// An object reference expected (`throw`, `castclass`, `isinst`, `unbox`, `ldvirtftn`,
    /// a reference type's `this`, an array) (III.4).
    StackObjRef,
    /// An address expected (`ldind`, `stind`, `ldobj`, `stobj`, `initobj`, `cpobj`, a
    /// `constrained.` call's `this`) and something else found (III.3.42, III.4.13).
    StackByRef,
    /// Unverifiable: an array instruction on an object of a type that is not a vector
    /// (III.4.7–III.4.11).
    ExpectedArray,
    /// Unverifiable: an object reference of a class not assignable to the class expected, or a
    /// managed pointer to another type (III.1.8.1.2.3), also a `constrained.` call's `this`
    /// pointing to another type than the prefix names (III.2.1); the JIT does not check it, and
    /// code relying on it breaks type safety. ILVerify reports StackUnexpected. ilcheck's own
    /// name.
    TypeNotAssignable,
    /// Unverifiable: a `readonly.` call to a method other than an array type's `Address`
    /// (III.2.3: `readonly.` may precede only `ldelema` and calls to the special `Address`
    /// method on arrays). CoreCLR and mono run such a call; ILVerify reports it under this
    /// name.
    ReadonlyUnexpectedCallee,
    /// Unverifiable: in an instance constructor of a reference type, `this` is stored to
    /// (`starg 0`) or its address taken (`ldarga 0`) before a constructor of its own class or
    /// of its base class was called on it (III.1.8.1.4, III.3.19). The runtimes run it;
    /// ILVerify reports it under this name.
    ThisUninitStore,
    /// Unverifiable: an instance constructor of a reference type other than `System.Object`
    /// returns before a constructor of its own class or of its base class was called on `this`
    /// (III.1.8.1.4). The runtimes run it; ILVerify reports it under this name.
    ThisUninitReturn,
    /// Unverifiable: in an instance constructor of a reference type, the uninitialised `this`
    /// is used before a constructor of its own class or of its base class was called on it,
    /// other than as a call's argument or `this`, the object of `ldfld`, `ldflda` or `stfld`,
    /// or by `dup` or `pop` (III.1.8.1.4): stored to a local, returned, thrown, compared. The
    /// runtimes run it; ILVerify reports it under this name.
    UninitStack,
    /// Unverifiable: `call` or `callvirt` of a constructor other than a constructor's own
    /// class's or base class's on its uninitialised `this`, or a value type's on a managed
    /// pointer (III.3.19: constructors are called by `newobj`). The runtimes run it;
    /// ILVerify reports it under this name.
    CallCtor,
    /// Unverifiable: `newobj` of a delegate's constructor whose function pointer is not made
    /// right before it, in the same block, by `ldftn` or by `dup; ldvirtftn` on the object
    /// passed (III.1.8.1.5: no other sequence may construct a delegate in verifiable code).
    /// The runtimes run it; ILVerify reports it under this name (and `StackMethod` when the
    /// pointer is no method's).
    DelegatePattern,
    /// Unverifiable: a delegate made from a method its `Invoke` cannot call: a parameter of
    /// `Invoke` not assignable to the method's, or the method's return not assignable to
    /// `Invoke`'s (II.14.6.1; with the object passed bound to an instance method's `this`, or
    /// to a static method's first parameter). The runtimes make the delegate; calling it passes
    /// values of the wrong types. ILVerify: `DelegateCtor`.
    DelegateCtor,
    /// Unverifiable: a `tail.` call that passes a managed pointer: a parameter of a
    /// managed-pointer type or `TypedReference`, a value type's method (its `this`), or a
    /// `constrained.` call (III.2.4: the caller's frame, where the pointer may point, is gone
    /// when the callee runs). The runtimes make the call; ILVerify reports it under this name.
    TailByRef,
    /// Unverifiable: `call` (not `callvirt`) of a virtual method that is not final, of a type
    /// that is not sealed, on an object other than the method's own `this` or a boxed value,
    /// or on its own `this` when the method stores to it or takes its address in code it runs
    /// (III.3.19: a non-virtual call may skip an override only on the caller's own object, as
    /// C#'s `base.M()` does). The runtimes make the call; ILVerify reports it under this name.
    ThisMismatch,
    /// Unverifiable: `newobj` of a delegate on `ldftn` (not `ldvirtftn`) of a virtual method
    /// that is not final, of a type that is not sealed, bound to an object other than the
    /// method's own `this` or a boxed value, or to its own `this` when the method stores to it
    /// or takes its address in code it runs (III.1.8.1.5, III.3.19: as for `call`, binding
    /// without dispatch skips an override). The runtimes make the delegate; ILVerify reports it
    /// under this name.
    LdftnNonFinalVirtual,
    /// Unverifiable: `ret` of a managed pointer into the method's own frame: the address of a
    /// local or an argument (`ldloca`, `ldarga`), or of a field in one (III.3.56: the storage is
    /// gone when the caller gets the pointer). Pointers to fields of objects, to array
    /// elements, to static fields, from calls and passed in as arguments may be returned. The
    /// runtimes return the dangling pointer; ILVerify reports it under this name.
    ReturnPtrToStack,
    /// Unverifiable: a native int used as an address, arithmetic on managed pointers, or a
    /// managed pointer used as a number (III.1.5, III.1.8.1.2).
    UnmanagedPointer,

    // Against the original body (`verify --baseline`, [`Aligner`]); ilcheck's own names. The
    // structural verifier never reports these: they need the original to compare with.
    /// Needs `--baseline`. A branch, `leave` or `switch` case copied from the original lands
    /// elsewhere than the copy of the instruction it targeted (III.1.7.4): code both bodies
    /// share lies between where it lands and that copy (a short displacement that wrapped, a
    /// label bound to the wrong instruction), though the landing may be a valid target with the
    /// same stack depth. Not a finding: landing on code inserted right before the target's copy (a
    /// prologue, an epilogue before a `ret`, a `nop`), on the replacement of a target that has
    /// no copy (a `ret` replaced by `br`, `leave` or `stloc`+`leave` to an epilogue), a short
    /// form widened.
    BranchRetargeted,
    /// Needs `--baseline`. A try start or end, handler start or end, or filter start of a
    /// clause copied from the original moved across code both bodies share, so the region now
    /// covers different original instructions (II.19). Not a finding: a boundary moved over
    /// inserted code next to it (a region extended to cover it, or not).
    ClauseBoundaryMoved,
}

/// The two verdict classes of a finding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// The code is not correct CIL: the runtime may reject it (`InvalidProgramException`) or
    /// run it wrongly.
    Invalid,
    /// The code is correct CIL the runtime runs, but not provably type-safe (III.1.8).
    Unverifiable,
}

impl Verdict {
    /// The stable name (`invalid`, `unverifiable`).
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Invalid => "invalid",
            Verdict::Unverifiable => "unverifiable",
        }
    }
}

/// Which verdict classes a run reports (`verify --level`): the one rule that decides whether a
/// finding of the structural rules, the type pass or the alignment is listed and counts for the
/// exit code.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// Findings of the class invalid only: what the runtime may reject or run wrongly.
    #[default]
    Invalid,
    /// Findings of both classes: also code that runs but is not provably type-safe.
    Unverifiable,
}

impl Level {
    /// Whether findings of the class `verdict` are reported at this level.
    pub fn includes(self, verdict: Verdict) -> bool {
        match (self, verdict) {
            (_, Verdict::Invalid) | (Level::Unverifiable, Verdict::Unverifiable) => true,
            (Level::Invalid, Verdict::Unverifiable) => false,
        }
    }

    /// Whether findings of `code` are reported at this level.
    pub fn reports(self, code: Code) -> bool {
        self.includes(code.verdict())
    }

    /// The stable name (`invalid`, `unverifiable`).
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Invalid => "invalid",
            Level::Unverifiable => "unverifiable",
        }
    }
}

impl Code {
    /// The verdict class of findings with this code.
    pub fn verdict(self) -> Verdict {
        use Code::*;
        match self {
            ExpectedArray
            | TypeNotAssignable
            | UnmanagedPointer
            | LocallocStackNotEmpty
            | ReadonlyUnexpectedCallee
            | ThisUninitStore
            | ThisUninitReturn
            | UninitStack
            | CallCtor
            | DelegatePattern
            | DelegateCtor
            | TailByRef
            | ThisMismatch
            | LdftnNonFinalVirtual
            | ReturnPtrToStack => Verdict::Unverifiable,
            UnknownOpcode
            | CodeSizeZero
            | MethodEnd
            | MethodFallthrough
            | BadBranch
            | BadJumpTarget
            | StackUnderflow
            | StackOverflow
            | PathStackDepth
            | BackwardBranch
            | ReturnVoid
            | ReturnMissing
            | ReturnEmpty
            | JmpStackNotEmpty
            | EndfilterStack
            | TailStackEmpty
            | TryNonEmptyStack
            | EHClauseOutOfRange
            | EHInvalidKind
            | EHRegionEmpty
            | EHBoundaryNotInstructionStart
            | EHOverlap
            | EHTryIsHandler
            | EHSharedTryFinally
            | EHDuplicateHandlerStart
            | EHOrderInnerAfterOuter
            | EHFilterNotBeforeHandler
            | EHFilterContainsRegion
            | EHFilterNoEndfilter
            | BranchIntoTry
            | BranchIntoHandler
            | BranchIntoFilter
            | BranchOutOfTry
            | BranchOutOfHandler
            | BranchOutOfFilter
            | BranchOutOfFinally
            | FallthroughException
            | FallthroughIntoHandler
            | FallthroughIntoFilter
            | ReturnFromTry
            | ReturnFromHandler
            | ReturnFromFilter
            | LeaveIntoTry
            | LeaveIntoHandler
            | LeaveIntoFilter
            | LeaveOutOfFilter
            | LeaveOutOfFinally
            | LeaveOutOfFault
            | Endfinally
            | Endfilter
            | Rethrow
            | TailCall
            | TailRet
            | TailCallInsideER
            | Volatile
            | Unaligned
            | ReadOnly
            | Constrained
            | NoPrefix
            | UnrecognizedLocalNumber
            | UnrecognizedArgumentNumber
            | TokenResolve
            | ExpectedTypeToken
            | ExpectedMethodToken
            | ExpectedFieldToken
            | ExpectedSigToken
            | StringOperand
            | UnresolvedToken
            | StackUnexpected
            | PathStackUnexpected
            | ExpectedNumericType
            | ExpectedIntegerType
            | ExpectedFloatType
            | StackObjRef
            | StackByRef
            | BranchRetargeted
            | ClauseBoundaryMoved => Verdict::Invalid,
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The family of rules a [`Code`] belongs to, as reports group them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum CodeGroup {
    /// Opcodes and the end of the code.
    InstructionStream,
    /// Where branches land.
    BranchTargets,
    /// Evaluation-stack depths.
    Stack,
    /// The exception-handling table itself.
    EhTable,
    /// Entering and leaving protected regions, and the instructions placed by them.
    Regions,
    /// Prefixes.
    Prefixes,
    /// Locals, arguments and tokens.
    Operands,
    /// Not a verification error ([`Code::UnresolvedToken`]).
    NotAnError,
    /// Verification types: what stack slots, arguments, locals, fields and returns hold (the
    /// type pass, [`types`]).
    Types,
    /// Against the original body (`verify --baseline`).
    Baseline,
}

impl CodeGroup {
    /// The group in words.
    pub fn as_str(self) -> &'static str {
        match self {
            CodeGroup::InstructionStream => "instruction stream",
            CodeGroup::BranchTargets => "branch targets",
            CodeGroup::Stack => "evaluation stack",
            CodeGroup::EhTable => "exception-handling table",
            CodeGroup::Regions => "protected regions",
            CodeGroup::Prefixes => "prefixes",
            CodeGroup::Operands => "operands",
            CodeGroup::NotAnError => "not a verification error",
            CodeGroup::Types => "types",
            CodeGroup::Baseline => "against the original",
        }
    }
}

impl Code {
    /// The family of rules this code belongs to.
    pub fn group(self) -> CodeGroup {
        use Code::*;
        match self {
            UnknownOpcode | CodeSizeZero | MethodEnd | MethodFallthrough => {
                CodeGroup::InstructionStream
            }
            BadBranch | BadJumpTarget => CodeGroup::BranchTargets,
            StackUnderflow
            | StackOverflow
            | PathStackDepth
            | BackwardBranch
            | ReturnVoid
            | ReturnMissing
            | ReturnEmpty
            | JmpStackNotEmpty
            | EndfilterStack
            | TailStackEmpty
            | TryNonEmptyStack
            | LocallocStackNotEmpty => CodeGroup::Stack,
            EHClauseOutOfRange
            | EHInvalidKind
            | EHRegionEmpty
            | EHBoundaryNotInstructionStart
            | EHOverlap
            | EHTryIsHandler
            | EHSharedTryFinally
            | EHDuplicateHandlerStart
            | EHOrderInnerAfterOuter
            | EHFilterNotBeforeHandler
            | EHFilterContainsRegion
            | EHFilterNoEndfilter => CodeGroup::EhTable,
            BranchIntoTry
            | BranchIntoHandler
            | BranchIntoFilter
            | BranchOutOfTry
            | BranchOutOfHandler
            | BranchOutOfFilter
            | BranchOutOfFinally
            | FallthroughException
            | FallthroughIntoHandler
            | FallthroughIntoFilter
            | ReturnFromTry
            | ReturnFromHandler
            | ReturnFromFilter
            | LeaveIntoTry
            | LeaveIntoHandler
            | LeaveIntoFilter
            | LeaveOutOfFilter
            | LeaveOutOfFinally
            | LeaveOutOfFault
            | Endfinally
            | Endfilter
            | Rethrow
            | TailCallInsideER => CodeGroup::Regions,
            TailCall | TailRet | Volatile | Unaligned | ReadOnly | Constrained | NoPrefix => {
                CodeGroup::Prefixes
            }
            UnrecognizedLocalNumber
            | UnrecognizedArgumentNumber
            | TokenResolve
            | ExpectedTypeToken
            | ExpectedMethodToken
            | ExpectedFieldToken
            | ExpectedSigToken
            | StringOperand => CodeGroup::Operands,
            UnresolvedToken => CodeGroup::NotAnError,
            StackUnexpected
            | PathStackUnexpected
            | ExpectedNumericType
            | ExpectedIntegerType
            | ExpectedFloatType
            | StackObjRef
            | StackByRef
            | ExpectedArray
            | TypeNotAssignable
            | UnmanagedPointer
            | ReadonlyUnexpectedCallee
            | ThisUninitStore
            | ThisUninitReturn
            | UninitStack
            | CallCtor
            | DelegatePattern
            | DelegateCtor
            | TailByRef
            | ThisMismatch
            | LdftnNonFinalVirtual
            | ReturnPtrToStack => CodeGroup::Types,
            BranchRetargeted | ClauseBoundaryMoved => CodeGroup::Baseline,
        }
    }

    /// The ECMA-335 sections its [`description`](Self::description) cites, e.g.
    /// `III.1.7.5` or `I.12.4.2.8, II.19`.
    pub fn reference(self) -> String {
        ecma_sections(self.description())
    }

    /// Whether a finding of this code is read best with the method's EH table beside it: the
    /// table's own rules, transfers into and out of regions, a try entered with a non-empty
    /// stack, a clause boundary that moved.
    pub fn concerns_regions(self) -> bool {
        matches!(self.group(), CodeGroup::EhTable | CodeGroup::Regions)
            || matches!(self, Code::TryNonEmptyStack | Code::ClauseBoundaryMoved)
    }
}

/// The ECMA-335 section references in `text` (`I.12.4.2.8`, `III.1.7.5`, …), in order and
/// without repeats, joined by `, `; empty when it cites none. A bare section after a
/// partition's (`III.3.38, 3.39`) is in that partition; tables (`Table III.2`,
/// `Tables III.5–III.7`) are not sections.
pub fn ecma_sections(text: &str) -> String {
    let numbers = |s: &str| {
        !s.is_empty()
            && s.split('.')
                .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    let mut found: Vec<String> = Vec::new();
    let mut partition: Option<&str> = None;
    let mut table = false;
    for word in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '.')) {
        let word = word.trim_end_matches('.');
        if word.is_empty() {
            continue;
        }
        if matches!(word, "Table" | "Tables") {
            table = true;
            continue;
        }
        let section = match word.split_once('.') {
            Some((p, rest)) if matches!(p, "I" | "II" | "III" | "IV" | "V" | "VI") => {
                if !numbers(rest) {
                    continue;
                }
                partition = Some(p);
                word.to_string()
            }
            Some(_) if numbers(word) => match partition {
                Some(p) => format!("{p}.{word}"),
                None => continue,
            },
            _ => {
                table = false;
                continue;
            }
        };
        if !table && !found.contains(&section) {
            found.push(section);
        }
    }
    found.join(", ")
}

/// One finding: what rule, where (IL offset of the instruction or region it concerns), and a
/// human explanation.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Diagnostic {
    /// The rule broken.
    pub code: Code,
    /// IL offset of the instruction or region boundary it concerns.
    pub offset: u32,
    /// What is wrong, in words.
    pub message: String,
    /// The clauses it concerns, or how control arrives where depths disagree; empty for most
    /// codes.
    #[serde(skip_serializing_if = "Detail::is_empty")]
    pub detail: Detail,
}

impl Diagnostic {
    /// A finding without detail.
    pub fn new(code: Code, offset: u32, message: String) -> Diagnostic {
        Diagnostic {
            code,
            offset,
            message,
            detail: Detail::default(),
        }
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IL_{:04x}: {}: {}", self.offset, self.code, self.message)
    }
}

/// Marks "no instruction", "no region" and "no depth yet".
pub(crate) const NONE: u32 = u32::MAX;

/// One decoded instruction, compactly: 2 bytes, since the full passes hold one per
/// instruction. The opcode is kept as its one-byte number ([`fx::id`]) and its facts are
/// looked up by it ([`Ins::fx`]); its offset is kept apart (`Verifier::offs`, which the region
/// rules do without); the operands the passes after decoding need (a callee's token, a
/// `switch`'s count, a branch's target) are read again from the code ([`Ins::operand`],
/// [`Targets`]), rather than kept.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
struct Ins {
    /// The opcode's number, [`fx::id`].
    id: u8,
    /// [`flag`]s.
    flags: u8,
}

// An instruction stays 2 bytes, and a decode table entry 32.
const _: () = assert!(std::mem::size_of::<Ins>() == 2);
const _: () = assert!(std::mem::size_of::<fx::Dec>() == 32);

impl Ins {
    /// The opcode.
    #[inline(always)]
    fn op(&self) -> Opcode {
        fx::OPS[self.id as usize]
    }

    /// The opcode's facts.
    #[inline(always)]
    fn fx(&self) -> Fx {
        fx::FX[self.id as usize]
    }

    /// The four bytes after the opcode in `code` (the code it was decoded from), where the
    /// instruction starts at byte `off`: a token, a `switch`'s count, a long branch's
    /// displacement; 0 if they are not there.
    #[inline]
    fn operand(&self, off: u32, code: &[u8]) -> u32 {
        let at = off as usize + fx::opcode_len(self.id);
        match code.get(at..at + 4) {
            Some(b) => u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            None => 0,
        }
    }
}

/// An opcode's facts in the form the hot loops want, derived from [`crate::opcode::ALL`].
#[derive(Clone, Copy, Debug)]
#[repr(C)]
struct Fx {
    /// Items popped, or [`fx::POP_ALL`], or [`fx::SIG`] (from a signature).
    pops: u8,
    /// Items pushed, or [`fx::SIG`].
    pushes: u8,
    flow: Flow,
    /// [`fx::TARGETS`], [`fx::SPECIAL`], ….
    kind: u8,
}

mod fx {
    use super::{Fx, Ins};
    use crate::opcode::{ALL, Flow, Opcode, OperandKind, Pops, Pushes};

    /// The last one-byte opcode's byte; [`id`] numbers the `FE xx` opcodes after it.
    const LAST_ONE_BYTE: u8 = 0xE0;

    pub const POP_ALL: u8 = 255;
    pub const SIG: u8 = 254;
    /// Has branch or switch targets.
    pub const TARGETS: u8 = 1;
    /// Has placement rules of its own: prefixes, `ret`, `jmp`, `endfinally`, `endfilter`,
    /// `rethrow`.
    pub const SPECIAL: u8 = 2;
    /// Has an operand rule: a local, an argument (also implied, as in `ldarg.0`) or a token.
    pub const OPERAND: u8 = 4;
    /// Fixed pops and pushes, falls through, no targets and no placement rules: all the stack
    /// dataflow does is adjust the depth.
    pub const PLAIN: u8 = 8;
    /// A call, `newobj` or `calli` without placement rules: falls through, with pops and
    /// pushes from the callee's signature.
    pub const CALL: u8 = 16;
    /// A branch with a one-byte displacement.
    pub const BR8: u8 = 32;

    /// The one-byte number of opcode `op`: a one-byte opcode's byte (at most
    /// [`LAST_ONE_BYTE`]), and for `FE xx` the numbers after it (`xx` is at most `1E`, so
    /// they end at `FF`; the tables below fail to build otherwise).
    pub const fn id(op: Opcode) -> u8 {
        let code = op as u16;
        if code >> 8 == 0xFE {
            LAST_ONE_BYTE + 1 + code as u8
        } else {
            code as u8
        }
    }

    /// The bytes of the opcode numbered `id` ([`id`]): 1, or 2 for `FE xx`.
    #[inline(always)]
    pub fn opcode_len(id: u8) -> usize {
        1 + (id > LAST_ONE_BYTE) as usize
    }

    /// Every opcode by its number ([`id`]); unused numbers hold `nop`.
    pub static OPS: [Opcode; 256] = {
        let mut t = [Opcode::Nop; 256];
        let mut i = 0;
        while i < ALL.len() {
            let code = ALL[i].opcode as u16;
            assert!(if code >> 8 == 0xFE {
                code & 0xFF < 0xFF - LAST_ONE_BYTE as u16
            } else {
                code <= LAST_ONE_BYTE as u16
            });
            t[id(ALL[i].opcode) as usize] = ALL[i].opcode;
            i += 1;
        }
        t
    };

    /// Every opcode's facts by its number ([`id`]); unused numbers hold `nop`'s.
    pub static FX: [Fx; 256] = {
        let mut t = [facts(0); 256];
        let mut i = 0;
        while i < ALL.len() {
            t[id(ALL[i].opcode) as usize] = facts(i);
            i += 1;
        }
        t
    };

    const fn facts(i: usize) -> Fx {
        let info = &ALL[i];
        let pops = match info.pops {
            Pops::Fixed(n) => n,
            Pops::All => POP_ALL,
            Pops::Signature => SIG,
        };
        let pushes = match info.pushes {
            Pushes::Fixed(n) => n,
            Pushes::Signature => SIG,
        };
        let targets = matches!(
            info.operand,
            OperandKind::ShortBrTarget | OperandKind::BrTarget | OperandKind::Switch
        );
        // `localloc` is here for its stack rule (only the size on the stack), not a placement.
        let special = matches!(info.flow, Flow::Prefix | Flow::Return)
            || info.opcode as u16 == Opcode::Rethrow as u16
            || info.opcode as u16 == Opcode::Localloc as u16;
        let code = info.opcode as u16;
        let operand = !matches!(
            info.operand,
            OperandKind::None
                | OperandKind::ShortI
                | OperandKind::I
                | OperandKind::I8
                | OperandKind::ShortR
                | OperandKind::R
                | OperandKind::ShortBrTarget
                | OperandKind::BrTarget
                | OperandKind::Switch
        ) || matches!(code, 0x02..=0x0D);
        let plain = !targets && !special && !info.flow.ends_block() && pops < SIG && pushes < SIG;
        let call = !targets && !special && !info.flow.ends_block() && pops == SIG;
        let br8 = matches!(info.operand, OperandKind::ShortBrTarget);
        Fx {
            pops,
            pushes,
            flow: info.flow,
            kind: (targets as u8 * TARGETS)
                | (special as u8 * SPECIAL)
                | (operand as u8 * OPERAND)
                | (plain as u8 * PLAIN)
                | (call as u8 * CALL)
                | (br8 as u8 * BR8),
        }
    }

    /// How the decoder reads an instruction's operand.
    pub mod arg {
        pub const NONE: u8 = 0;
        pub const U8: u8 = 1;
        pub const U16: u8 = 2;
        pub const U32: u8 = 3;
        pub const BR8: u8 = 4;
        pub const BR32: u8 = 5;
        pub const SWITCH: u8 = 6;
    }

    /// Which operand rule applies.
    pub mod check {
        pub const NONE: u8 = 0;
        /// The operand is a local index.
        pub const LOCAL: u8 = 1;
        /// The operand is an argument index.
        pub const ARG: u8 = 2;
        /// `ldloc.N`, `stloc.N`: local [`super::Dec::imm`].
        pub const LOCAL_IMM: u8 = 3;
        /// `ldarg.N`: argument [`super::Dec::imm`].
        pub const ARG_IMM: u8 = 4;
        /// A metadata token of kind [`super::Dec::operand`].
        pub const TOKEN: u8 = 5;
    }

    /// Everything the verifier's decoder needs of one encoding, in one entry: the same facts as
    /// [`crate::opcode::DECODE`] plus the verifier's own, so decoding reads one table.
    #[derive(Clone, Copy, Debug)]
    #[repr(C, align(32))]
    pub struct Dec {
        /// The instruction with its opcode filled in; the decoder sets the rest.
        pub ins: Ins,
        /// The opcode, for the paths that need it as an [`Opcode`] (one load, where the
        /// instruction's number would take two).
        pub op: Opcode,
        /// The opcode's facts.
        pub fx: Fx,
        /// The operand bits the decoder checks (a local or argument index, a token; 0 when
        /// none, and for targets).
        pub mask: u32,
        /// The bits of those that are a local or argument index (0 when none are).
        pub vmask: u32,
        /// Opcode plus operand bytes (for `switch`, without its table); 0 when undefined.
        pub len: u8,
        pub arg: u8,
        /// Where the operand starts in an eight-byte window read at the opcode, in bits.
        pub shift: u8,
        /// Needs more than the table entry: targets, placement rules or a token.
        pub slow: bool,
        pub check: u8,
        /// Which limit a local or argument index is checked against: [`var::NONE`], ….
        pub var: u8,
        pub imm: u8,
        pub operand: OperandKind,
    }

    /// Index into the decoder's `[none, locals, arguments]` limits.
    pub mod var {
        pub const NONE: usize = 0;
        pub const LOCAL: usize = 1;
        pub const ARG: usize = 2;
    }

    /// Indexed like the opcode's encoding: low byte, plus 256 for `FE xx`. The `FE` entry itself
    /// is undefined (the second byte decides).
    pub static DEC: [Dec; 512] = {
        let mut t = [Dec {
            ins: Ins {
                id: id(Opcode::Nop),
                flags: 0,
            },
            op: Opcode::Nop,
            fx: Fx {
                pops: 0,
                pushes: 0,
                flow: Flow::Next,
                kind: 0,
            },
            mask: 0,
            vmask: 0,
            len: 0,
            arg: arg::NONE,
            shift: 8,
            slow: false,
            check: check::NONE,
            var: 0,
            imm: 0,
            operand: OperandKind::None,
        }; 512];
        let mut i = 0;
        while i < ALL.len() {
            let info = &ALL[i];
            let code = info.opcode as u16;
            let two = code >> 8 == 0xFE;
            let key = (code & 0xFF) as usize + if two { 256 } else { 0 };
            let operand = info.operand;
            let arg = match operand {
                OperandKind::None
                | OperandKind::I
                | OperandKind::I8
                | OperandKind::ShortR
                | OperandKind::R => arg::NONE,
                OperandKind::ShortI | OperandKind::ShortLocal | OperandKind::ShortArg => arg::U8,
                OperandKind::Local | OperandKind::Arg => arg::U16,
                OperandKind::ShortBrTarget => arg::BR8,
                OperandKind::BrTarget => arg::BR32,
                OperandKind::Switch => arg::SWITCH,
                OperandKind::Tok
                | OperandKind::Type
                | OperandKind::Field
                | OperandKind::Method
                | OperandKind::String
                | OperandKind::Sig => arg::U32,
            };
            let (check, imm) = match operand {
                OperandKind::ShortLocal | OperandKind::Local => (check::LOCAL, 0),
                OperandKind::ShortArg | OperandKind::Arg => (check::ARG, 0),
                // ldarg.0-3, ldloc.0-3, stloc.0-3: the index is implied by the opcode.
                OperandKind::None => {
                    match (info.opcode.general_form(), info.opcode.implied_operand()) {
                        (Opcode::Ldarg, Some(n)) => (check::ARG_IMM, n as u16),
                        (Opcode::Ldloc | Opcode::Stloc, Some(n)) => (check::LOCAL_IMM, n as u16),
                        // Other macro forms imply constants (`ldc.i4.2`), not variables.
                        _ => (check::NONE, 0),
                    }
                }
                OperandKind::Tok
                | OperandKind::Type
                | OperandKind::Field
                | OperandKind::Method
                | OperandKind::String
                | OperandKind::Sig => (check::TOKEN, 0),
                OperandKind::ShortI
                | OperandKind::I
                | OperandKind::I8
                | OperandKind::ShortR
                | OperandKind::R
                | OperandKind::ShortBrTarget
                | OperandKind::BrTarget
                | OperandKind::Switch => (check::NONE, 0),
            };
            let operand_len = match operand.fixed_size() {
                Some(n) => n,
                None => 4,
            };
            t[key] = Dec {
                ins: Ins {
                    id: id(info.opcode),
                    flags: 0,
                },
                op: info.opcode,
                fx: facts(i),
                mask: match arg {
                    arg::U8 => 0xFF,
                    arg::U16 => 0xFFFF,
                    arg::U32 => u32::MAX,
                    _ => 0,
                },
                vmask: match (check, arg) {
                    (check::LOCAL | check::ARG, arg::U8) => 0xFF,
                    (check::LOCAL | check::ARG, arg::U16) => 0xFFFF,
                    _ => 0,
                },
                len: (if two { 2 } else { 1 } + operand_len) as u8,
                arg,
                shift: if two { 16 } else { 8 },
                slow: check == check::TOKEN || facts(i).kind & (TARGETS | SPECIAL) != 0,
                check,
                var: match check {
                    check::LOCAL | check::LOCAL_IMM => var::LOCAL as u8,
                    check::ARG | check::ARG_IMM => var::ARG as u8,
                    _ => var::NONE as u8,
                },
                imm: imm as u8,
                operand,
            };
            i += 1;
        }
        t
    };
}

/// Per-instruction flags.
mod flag {
    /// Follows a prefix: not a valid branch target or region boundary.
    pub const AFTER_PREFIX: u8 = 1 << 0;
    /// Target of a branch from an earlier instruction.
    pub const FORWARD_TARGET: u8 = 1 << 1;
    /// First instruction of a handler or filter.
    pub const HANDLER_START: u8 = 1 << 2;
    /// Prefixed by `tail.`.
    pub const TAIL: u8 = 1 << 3;
    /// May be reached other than by falling through from the instruction before: a branch
    /// target or the first instruction of a region. The stack dataflow records and compares
    /// depths only at these.
    pub const JOIN: u8 = 1 << 4;
    /// First instruction of a catch handler, filter or filter handler: the stack holds the
    /// exception object there (with [`HANDLER_START`]).
    pub const RECEIVES_EXCEPTION: u8 = 1 << 5;
    /// First instruction of a try.
    pub const TRY_START: u8 = 1 << 6;
}

/// Facts about the method gathered once per run.
#[derive(Clone, Copy, Debug)]
struct Ctx {
    method: Option<MethodSig>,
    locals: Option<u32>,
    declared_max_stack: Option<u16>,
}

/// The findings of a run, apart from the buffers: a pass can report while it holds them
/// borrowed.
#[derive(Debug, Default)]
struct Out {
    diags: Vec<Diagnostic>,
    first_only: bool,
}

impl Out {
    fn report(&mut self, code: Code, offset: u32, message: String) {
        self.report_with(code, offset, message, Detail::default());
    }

    // Out of line: the passes' loops call it only on a finding, and building a finding there
    // would take registers from the loops.
    #[cold]
    #[inline(never)]
    fn report_with(&mut self, code: Code, offset: u32, message: String, detail: Detail) {
        if !self.stop() {
            self.diags.push(Diagnostic {
                code,
                offset,
                message,
                detail,
            });
        }
    }

    /// In first-only mode, whether a finding has been made and work can stop.
    fn stop(&self) -> bool {
        self.first_only && !self.diags.is_empty()
    }
}

/// What [`Verifier::verify`] checks.
#[derive(Clone, Copy, Debug)]
pub enum Subject<'a> {
    /// A decoded body: its code, its EH clauses and the MaxStack its header declares.
    Body(&'a Body<'a>),
    /// Code and its clauses as a rewriter lays them out, before there is a header.
    Code {
        /// The instructions' bytes.
        code: &'a [u8],
        /// The EH clauses, with offsets into `code`.
        clauses: &'a [Clause],
        /// The MaxStack the header will declare; `None` skips the MaxStack check.
        declared_max_stack: Option<u16>,
    },
}

impl<'a> From<&'a Body<'a>> for Subject<'a> {
    fn from(body: &'a Body<'a>) -> Self {
        Subject::Body(body)
    }
}

/// How [`Verifier::verify`] runs.
#[derive(Clone, Copy, Debug, Default)]
#[non_exhaustive]
pub struct Options {
    /// Stop at the first finding (not necessarily the one at the lowest offset): for a caller
    /// that only needs to know whether the code is clean, or its MaxStack.
    pub first_only: bool,
}

impl Options {
    /// Every finding (the default).
    pub const ALL: Options = Options { first_only: false };
    /// The first finding only.
    pub const FIRST: Options = Options { first_only: true };
}

/// A reusable verifier: keeps its buffers between bodies so verifying many bodies allocates only
/// when a body is larger than every one before it.
#[derive(Debug, Default)]
pub struct Verifier {
    /// The decoded instructions are `ins[..n]`. This and the other per-instruction buffers only
    /// grow (with the instructions of the largest body so far), so the decoder writes into
    /// them by index.
    ins: Vec<Ins>,
    n: usize,
    /// Where each instruction starts: `offs[..n]`, grown with `ins`. Let go (when large) while
    /// the region rules run, which read offsets off the start index instead, and filled again
    /// from it for the passes after; read through [`Verifier::offset_of`] where it may be
    /// missing.
    offs: Vec<u32>,
    /// `branches[..nb]`: indices of instructions with branch or switch targets, for
    /// `flow::resolve_targets`; may be let go after it (the count stays).
    branches: Vec<u32>,
    nb: usize,
    /// Whether the decoded code has a prefix.
    prefixed: bool,
    /// Token operands of the body, checked in batches by [`Resolver::tokens_pass`].
    tokens: Vec<(OperandKind, u32)>,
    /// Instruction index by byte offset, read through [`Verifier::index_at`].
    starts: StartIndex,
    /// Length of the code being verified.
    code_len: usize,
    depth: Vec<u32>,
    /// Innermost region per instruction; empty when the body has no regions.
    region: Vec<u32>,
    /// The region tree; let go (when large) before the stack dataflow, which finds handler
    /// and try starts by their flags.
    nodes: Vec<eh::Node>,
    /// Whether the last body has regions and a sound table (its tree was built).
    regions: bool,
    try_node: Vec<u32>,
    open: Vec<u32>,
    work: Vec<u32>,
    single: single_pass::SinglePass,
    /// Set when bodies skip [`single_pass`] (clear by default: they try it first).
    single_pass_off: bool,
    out: Out,
    incomplete: bool,
    max: u32,
}

impl Verifier {
    /// A verifier with empty buffers (they grow to the largest body it sees).
    pub fn new() -> Self {
        Self::default()
    }

    /// Verifies `subject` (a parsed [`Body`], or code and clauses as a rewriter lays them out):
    /// the one entry point. Returns the findings sorted by offset — with
    /// [`Options::first_only`], at most one. After it, [`Self::is_complete`] says whether every
    /// path was analysed and [`Self::needed_max_stack`] what MaxStack the code needs.
    ///
    /// Generic so that a concrete resolver's answers inline into the hot loops; a
    /// `&dyn Resolver` works too.
    pub fn verify<'s, R: Resolver + ?Sized>(
        &mut self,
        subject: impl Into<Subject<'s>>,
        resolver: &R,
        opts: &Options,
    ) -> &[Diagnostic] {
        self.out.first_only = opts.first_only;
        match subject.into() {
            Subject::Body(body) => self.run_body(body, resolver),
            Subject::Code {
                code,
                clauses,
                declared_max_stack,
            } => {
                let clauses = Clauses::One(clauses.into());
                self.run_in(code, code.len(), &clauses, declared_max_stack, resolver);
            }
        }
        &self.out.diags
    }

    /// [`Self::verify`] of `buf[..len]` with its clauses, for a caller whose buffer holds slack
    /// after the code: the decoder reads whole eight-byte windows there instead of short ones,
    /// and never acts on a byte past the code.
    pub(crate) fn verify_code_in<R: Resolver + ?Sized>(
        &mut self,
        buf: &[u8],
        len: usize,
        clauses: crate::body::ClauseTable<'_>,
        declared_max_stack: Option<u16>,
        resolver: &R,
        opts: &Options,
    ) -> &[Diagnostic] {
        self.out.first_only = opts.first_only;
        self.run_in(
            buf,
            len,
            &Clauses::One(clauses),
            declared_max_stack,
            resolver,
        );
        &self.out.diags
    }

    /// The MaxStack the code of the last run needs, by the verifier's dataflow: an error when
    /// that run found a structural fault (the first one) or could not follow every path (a
    /// callee's signature was unknown). Run with [`Options::first_only`] and no declared
    /// MaxStack ([`Subject::Code`]) to ask only this.
    pub fn needed_max_stack(&self) -> Result<u16, Diagnostic> {
        if let Some(d) = self.out.diags.first() {
            return Err(d.clone());
        }
        if self.incomplete {
            return Err(Diagnostic::new(
                Code::UnresolvedToken,
                0,
                "a callee's signature is unknown, so the stack depth is too".into(),
            ));
        }
        u16::try_from(self.max).map_err(|_| {
            Diagnostic::new(
                Code::StackOverflow,
                0,
                format!("stack depth {} exceeds 65535", self.max),
            )
        })
    }

    /// Turns the single forward pass that accepts most bodies on (the
    /// default) or off. Findings, MaxStack and completeness are the same either way; off, every
    /// body takes the full passes (for differential testing and timing).
    pub fn set_single_pass(&mut self, on: bool) {
        self.single_pass_off = !on;
    }

    /// Lets go of the buffers of the last run if its code was longer than [`RELEASE_OVER`]
    /// bytes (its findings, MaxStack and completeness stay): for a caller about to hold
    /// something as large, such as a rewriter writing out the body it has just verified. The
    /// next body that long allocates them again.
    pub(crate) fn release_large(&mut self) {
        if self.code_len > RELEASE_OVER {
            let keep = Verifier {
                out: std::mem::take(&mut self.out),
                single_pass_off: self.single_pass_off,
                incomplete: self.incomplete,
                max: self.max,
                ..Verifier::default()
            };
            *self = keep;
        }
    }

    /// Findings of the last run.
    pub fn diagnostics(&self) -> &[Diagnostic] {
        &self.out.diags
    }

    /// Whether the last run analysed every reachable path: false when a callee's signature was
    /// unknown, so stack checks after that call were skipped.
    pub fn is_complete(&self) -> bool {
        !self.incomplete
    }

    /// The largest stack depth seen by the last run's dataflow.
    pub fn computed_max_stack(&self) -> u32 {
        self.max
    }

    fn run_body<R: Resolver + ?Sized>(&mut self, body: &Body<'_>, resolver: &R) {
        let max = Some(body.max_stack());
        // Borrowed from the sections, however many: no copy.
        let clauses = Clauses::of(body);
        self.run_in(body.code, body.code.len(), &clauses, max, resolver);
    }

    /// Verifies `buf[..len]`, whose bytes past `len` the decoder may read but never acts on
    /// (see `flow::decode_into`).
    fn run_in<R: Resolver + ?Sized>(
        &mut self,
        buf: &[u8],
        len: usize,
        clauses: &Clauses<'_>,
        declared_max_stack: Option<u16>,
        resolver: &R,
    ) {
        let code = &buf[..len.min(buf.len())];
        self.n = 0;
        self.nb = 0;
        self.starts.bits.clear();
        self.region.clear();
        self.nodes.clear();
        self.regions = false;
        self.out.diags.clear();
        self.incomplete = false;
        self.max = 0;
        self.code_len = code.len();
        let ctx = Ctx {
            method: resolver.method(),
            locals: resolver.local_count(),
            declared_max_stack,
        };
        if code.is_empty() {
            self.report(Code::CodeSizeZero, 0, "the code is empty".into());
            return;
        }
        if code.len() >= NONE as usize {
            self.report(Code::MethodEnd, 0, "the code is larger than 4 GiB".into());
            return;
        }
        // Most bodies are accepted by one forward pass; the rest (and every fault) take the
        // full passes, which alone report.
        // Code so sparse in instructions that the full passes take less memory than the
        // single pass's two bytes a byte goes straight to them.
        if !self.single_pass_off && !sparse(buf, code.len()) {
            if let Some(max) = self.single.accept(buf, code.len(), clauses, &ctx, resolver) {
                self.max = max;
                return;
            }
            // A giant body the single pass hands on does not keep its buffers through the
            // full passes.
            self.single.release_large();
        }
        // A large body with regions has its instructions counted first, so that the decoder
        // makes its lists once, at their size: grown, they would leave the room they grew
        // ahead of the code resident (growing writes every entry) and the blocks they grew
        // out of as holes, and the region passes hold as much again beside them. (Without
        // regions the passes after add little: the walk would be time for nothing.)
        let sizes = if code.len() > RELEASE_OVER && !clauses.is_empty() {
            flow::count(buf, code.len())
        } else {
            None
        };
        if !flow::decode(self, buf, code.len(), sizes, &ctx, resolver) || self.stop() {
            return;
        }
        // Straight-line code without regions (most bodies) skips these passes and their setup.
        if self.nb != 0 {
            flow::resolve_targets(self, code);
            if self.stop() {
                return;
            }
        }
        // The passes after it read branches off the instructions.
        eh::release_large(&mut self.branches);
        if !clauses.is_empty() && self.offs.capacity() > eh::KEEP_LARGEST {
            // The region rules walk the start index instead: they hold the most. The list's
            // buffer serves the region tree's sweep.
            eh::hand_over(&mut self.offs, &mut self.try_node);
        }
        let eh_ok = clauses.is_empty() || eh::check(self, code.len(), clauses, resolver);
        self.regions = !self.nodes.is_empty();
        if self.stop() {
            return;
        }
        flow::check_prefixes(self, code, eh_ok);
        flow::check_transfers(self, code, clauses, eh_ok);
        // The passes after these do not look at regions per instruction, nor at the tree. The
        // region table's buffer serves the depths.
        eh::hand_over(&mut self.region, &mut self.depth);
        eh::release_large(&mut self.nodes);
        if self.stop() {
            return;
        }
        if self.offs.len() < self.n {
            self.starts.fill_offsets(&mut self.offs, self.n);
        }
        stack::run(self, code, clauses, &ctx, resolver, eh_ok);
        // Only a body with findings pays for saying how paths reach a join.
        if !self.out.first_only && !self.out.diags.is_empty() {
            arrivals::explain(self, code, resolver);
        }
        if !self.out.first_only && self.out.diags.len() > 1 {
            self.out.diags.sort_by_key(|d| (d.offset, d.code));
            self.out
                .diags
                .dedup_by(|a, b| a.offset == b.offset && a.code == b.code);
        }
    }

    fn report(&mut self, code: Code, offset: u32, message: String) {
        self.out.report(code, offset, message);
    }

    /// Reports a finding about clause `clause` (and `other`) of the EH table.
    fn report_clause(
        &mut self,
        code: Code,
        offset: u32,
        message: String,
        clause: u32,
        other: Option<u32>,
    ) {
        self.out
            .report_with(code, offset, message, Detail::clause(clause, other));
    }

    /// In first-only mode, whether a finding has been made and work can stop.
    fn stop(&self) -> bool {
        self.out.stop()
    }

    /// Where the passes after decoding find the targets of `code`'s branching instructions.
    fn targets_in<'a>(&'a self, code: &'a [u8]) -> Targets<'a> {
        Targets {
            code,
            starts: &self.starts,
        }
    }

    /// The instruction starting at byte `off`; the instruction count for the end of the code;
    /// [`NONE`] inside an instruction or outside the code.
    #[inline]
    fn index_at(&self, off: u32) -> u32 {
        let off_usize = off as usize;
        if off_usize == self.code_len {
            return self.n as u32;
        }
        if off_usize > self.code_len {
            return NONE;
        }
        self.starts.get(off).unwrap_or(NONE)
    }

    /// Where instruction `i` starts (the code's length for `n`): from the offsets list, or,
    /// while the region rules run without it, a search of the start index (for findings).
    fn offset_of(&self, i: usize) -> u32 {
        if self.offs.len() >= self.n {
            if let Some(&off) = self.offs[..self.n].get(i) {
                return off;
            }
        } else if let Some(off) = self.starts.offset_of(i as u32) {
            return off;
        }
        self.code_len as u32
    }

    /// The first instruction of region node `node` (of a tree built from `clauses`).
    fn first_of(&self, node: &eh::Node, clauses: &Clauses<'_>) -> u32 {
        self.index_at(eh::block(node, clauses).0)
    }

    /// One past the last instruction of region node `node` (of a tree built from `clauses`).
    fn end_of(&self, node: &eh::Node, clauses: &Clauses<'_>) -> u32 {
        self.index_at(eh::block(node, clauses).1)
    }

    /// The innermost region of instruction `i`, or [`NONE`].
    fn region_of(&self, i: usize) -> u32 {
        self.region.get(i).copied().unwrap_or(NONE)
    }
}

/// Code longer than this is looked at by [`sparse`] before the single pass.
const COUNT_OVER: usize = 1 << 20;

/// Code with fewer instructions than one per this many bytes is sparse: the full passes hold
/// about 12 bytes an instruction (the instruction, its offset, its depth, its share of the
/// start index and of the branch list), the single pass two bytes a byte of code.
const SPARSE: usize = 16;

/// Whether `buf[..len]` is longer than [`COUNT_OVER`] and has fewer instructions than one per
/// [`SPARSE`] bytes (long `switch` tables, long operands), so that the full passes take less
/// memory than the single pass. The walk stops as soon as the count shows the code is not
/// sparse, or at anything that does not decode (which the single pass hands on at once).
fn sparse(buf: &[u8], len: usize) -> bool {
    if len <= COUNT_OVER {
        return false;
    }
    let most = len / SPARSE;
    let mut n = 0;
    flow::walk_lengths(buf, len, |_| {
        let more = n <= most;
        n += 1;
        more
    })
}

/// Code longer than this leaves no buffers behind after [`Verifier::release_large`].
const RELEASE_OVER: usize = 1 << 16;

/// The targets of the branching instructions of `code`, for the passes after
/// `flow::resolve_targets`: read from the code each time they are needed (a branch's from its
/// operand, a `switch`'s from its table) and resolved through `starts`, since a stored copy
/// would take as much memory again as the instructions (or, for the `switch` tables of hostile
/// code, as the code).
#[derive(Clone, Copy)]
struct Targets<'a> {
    code: &'a [u8],
    starts: &'a StartIndex,
}

/// Where these methods are told a branching instruction `x` starts: at byte `at`.
impl Targets<'_> {
    /// How many targets branching instruction `x` has.
    #[inline]
    fn count(&self, x: &Ins, at: u32) -> usize {
        if x.op() == Opcode::Switch {
            x.operand(at, self.code) as usize
        } else {
            1
        }
    }

    /// The byte offset the branch (not `switch`) `x` jumps to, or [`NONE`] outside the code.
    #[inline]
    fn branch_offset(&self, x: &Ins, at: u32) -> u32 {
        let after_op = at as usize + 1;
        // Branch opcodes are one byte; the decoder checked that the operand is in the code.
        let (next, disp) = if x.fx().kind & fx::BR8 != 0 {
            (
                after_op + 1,
                self.code.get(after_op).map_or(0, |&b| b as i8 as i64),
            )
        } else {
            (after_op + 4, x.operand(at, self.code) as i32 as i64)
        };
        flow::target_offset(next as i64 + disp, self.code.len())
    }

    /// The byte offset case `k` of the `switch` `x` jumps to, or [`NONE`] outside the code.
    #[inline]
    fn switch_offset(&self, x: &Ins, at: u32, k: usize) -> u32 {
        let count = x.operand(at, self.code);
        let table = crate::instr::SwitchTable::new(self.code, at as usize, count);
        match table.target(k) {
            Some(t) => flow::target_offset(t, self.code.len()),
            None => NONE,
        }
    }

    /// The instruction target `k` of branching instruction `x` reaches, or [`NONE`] for a
    /// target that is not an instruction start outside a prefix run (reported by
    /// `flow::resolve_targets`, and skipped by the passes after it). `ins` are the decoded
    /// instructions.
    #[inline]
    fn get(&self, ins: &[Ins], x: &Ins, at: u32, k: usize) -> u32 {
        let off = if x.op() == Opcode::Switch {
            self.switch_offset(x, at, k)
        } else {
            self.branch_offset(x, at)
        };
        self.resolve(ins, off)
    }

    /// Gives `each` every target of branching instruction `x` in order, as [`Self::get`]
    /// gives them: a `switch`'s table is read once, not once a target (the decoder checked
    /// that it lies in the code).
    #[inline]
    fn each(&self, ins: &[Ins], x: &Ins, at: u32, mut each: impl FnMut(u32)) {
        if x.op() == Opcode::Switch {
            let count = x.operand(at, self.code);
            let table = crate::instr::SwitchTable::new(self.code, at as usize, count);
            for t in table.targets() {
                each(self.resolve(ins, flow::target_offset(t, self.code.len())));
            }
        } else {
            each(self.resolve(ins, self.branch_offset(x, at)));
        }
    }

    /// The instruction starting at byte `off`, or [`NONE`] if none does or it follows a
    /// prefix.
    #[inline]
    fn resolve(&self, ins: &[Ins], off: u32) -> u32 {
        match self.starts.get(off) {
            Some(t) if ins[t as usize].flags & flag::AFTER_PREFIX == 0 => t,
            _ => NONE,
        }
    }
}

/// Which bytes of a body's code start an instruction, and the index of each: a bit per byte
/// and a count per 64 bytes (0.19 bytes per byte of code, where an index per byte takes four).
/// Shared by the verifier and the lifter.
#[derive(Debug, Default)]
pub(crate) struct StartIndex {
    /// Bit `o % 64` of word `o / 64`: an instruction starts at byte `o`.
    pub(crate) bits: Vec<u64>,
    /// The instructions that start before each word's first byte (after [`Self::count`]).
    before: Vec<u32>,
}

impl StartIndex {
    /// No starts yet, for code `len` bytes long.
    pub(crate) fn reset(&mut self, len: usize) {
        self.bits.clear();
        self.bits.resize(len.div_ceil(64), 0);
        self.before.clear();
    }

    /// Indexes the instructions starting at `offs` (ascending) in code `len` bytes long.
    fn build(&mut self, offs: &[u32], len: usize) {
        self.reset(len);
        // Each word is assembled in a register and stored once.
        let (mut k, mut word) = (0, 0u64);
        for &off in offs {
            let at = (off / 64) as usize;
            if at != k {
                self.bits[k] = word;
                (k, word) = (at, 0);
            }
            word |= 1 << (off % 64);
        }
        if let Some(w) = self.bits.get_mut(k) {
            *w = word;
        }
        self.count();
    }

    /// Counts the starts before each word, once every start is set.
    pub(crate) fn count(&mut self) {
        self.before.clear();
        self.before.reserve(self.bits.len());
        let mut count = 0;
        for &w in &self.bits {
            self.before.push(count);
            count += w.count_ones();
        }
    }

    /// The index of the instruction starting at byte `off`, if one does (after
    /// [`Self::count`]).
    #[inline]
    pub(crate) fn get(&self, off: u32) -> Option<u32> {
        let k = (off / 64) as usize;
        let word = *self.bits.get(k)?;
        let bit = 1u64 << (off % 64);
        (word & bit != 0).then(|| self.before[k] + (word & (bit - 1)).count_ones())
    }

    /// The first instruction start after byte `off`, if there is one: for walks in code order
    /// without the offsets list (each step reads the words up to the next start, so a walk
    /// reads each word once).
    #[inline]
    pub(crate) fn next_after(&self, off: u32) -> Option<u32> {
        let mut k = (off / 64) as usize;
        // The bits after `off` in its word (two shifts: `off % 64 + 1` may be 64).
        let mut word = *self.bits.get(k)? & (u64::MAX << (off % 64)) << 1;
        while word == 0 {
            k += 1;
            word = *self.bits.get(k)?;
        }
        Some((64 * k) as u32 + word.trailing_zeros())
    }

    /// Every instruction start in order, into `offs` (cleared first), room made for `count`.
    fn fill_offsets(&self, offs: &mut Vec<u32>, count: usize) {
        offs.clear();
        offs.reserve_exact(count);
        for (k, &w) in self.bits.iter().enumerate() {
            let mut word = w;
            while word != 0 {
                offs.push((64 * k) as u32 + word.trailing_zeros());
                word &= word - 1;
            }
        }
    }

    /// Where instruction `index` starts (after [`Self::count`]): a search, for error paths.
    pub(crate) fn offset_of(&self, index: u32) -> Option<u32> {
        let k = self
            .before
            .partition_point(|&b| b <= index)
            .checked_sub(1)?;
        let mut word = self.bits[k];
        for _ in 0..index - self.before[k] {
            word &= word.wrapping_sub(1);
        }
        (word != 0).then(|| (64 * k) as u32 + word.trailing_zeros())
    }
}

/// Verifies `code` with and without the single forward pass that accepts most bodies, under a
/// declared MaxStack and with none: an error describing the first difference in findings,
/// computed MaxStack or completeness. The single pass must never change a result; the
/// corpus tests, the generated-body properties and the `verify_any` fuzz target check this on
/// every body they see.
pub fn single_pass_agrees<R: Resolver + ?Sized>(
    code: &[u8],
    clauses: &[Clause],
    declared_max_stack: u16,
    resolver: &R,
) -> Result<(), String> {
    let (mut with, mut without) = (Verifier::new(), Verifier::new());
    without.set_single_pass(false);
    for declared in [Some(declared_max_stack), None] {
        let subject = Subject::Code {
            code,
            clauses,
            declared_max_stack: declared,
        };
        let a = with.verify(subject, resolver, &Options::ALL).to_vec();
        let b = without.verify(subject, resolver, &Options::ALL).to_vec();
        let same = a == b
            && with.computed_max_stack() == without.computed_max_stack()
            && with.is_complete() == without.is_complete();
        if !same {
            return Err(format!(
                "with MaxStack {declared:?}, the single pass gives {a:?} (max {}, complete {}), \
                 the full passes {b:?} (max {}, complete {})",
                with.computed_max_stack(),
                with.is_complete(),
                without.computed_max_stack(),
                without.is_complete()
            ));
        }
    }
    Ok(())
}
