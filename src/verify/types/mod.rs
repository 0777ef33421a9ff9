//! Type-aware verification: the verification types of ECMA-335 III.1.8.1 per stack slot,
//! argument and local, the rules of Partition III per instruction, and a type system over the
//! image and the assemblies it references.
//!
//! It runs after the structural verifier, on bodies that verifier accepted. Every finding has a
//! [`Code`](crate::verify::Code) whose [`Verdict`](crate::verify::Verdict) says whether the code
//! is *invalid* (the runtime may reject it) or only *unverifiable* (runs, not provably
//! type-safe). What cannot be resolved is never guessed: the method is checked in part, with
//! the reason ([`Partial`]), and no finding is made against the unknown type.
//!
//! Layers: [`ty`] (types as signatures spell them, interned), [`system`] (resolution across
//! assemblies, hierarchy, assignability, merge), [`vtype`] (stack slots, fit and merge) and
//! [`check`] (the dataflow and each instruction's rule).

pub mod check;
pub(crate) mod fx;
mod read_ahead;
pub mod system;
pub mod ty;
pub mod vtype;

pub use check::{Outcome, Partial, TypeChecker};
pub use system::{Ans, Flavour, Kind, ModuleStore, TypeInfo, TypeSystem, runtime_dirs};
pub use ty::{MethodSig, MethodTy, Prim, TyId, TyNode, TypeKey};
pub use vtype::{Home, V};
