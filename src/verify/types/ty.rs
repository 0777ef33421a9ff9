//! Types as signatures spell them (II.23.2.12), resolved to definitions and interned, so a
//! type is a small copyable id, two ids are equal exactly when the types are, and a type named
//! by several modules is one type.

use super::fx::FxMap;
use std::hash::Hasher;

/// A TypeDef of a module the type system has loaded: module number and TypeDef row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TypeKey {
    /// The module's number in its [`super::TypeSystem`] (0 is the image being verified).
    pub module: u32,
    /// The TypeDef row.
    pub rid: u32,
}

/// An interned type ([`TyId::UNKNOWN`] by default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TyId(pub(crate) u32);

impl TyId {
    /// A type that could not be resolved: every check against it passes, and the method that
    /// met it is checked in part.
    pub const UNKNOWN: TyId = TyId(0);
    /// `void`.
    pub const VOID: TyId = TyId(1);
    /// `object`.
    pub const OBJECT: TyId = TyId(2);
    /// `string`.
    pub const STRING: TyId = TyId(3);
    /// `typedref`.
    pub const TYPEDREF: TyId = TyId(4);
}

/// The primitive types of signatures (II.23.1.16).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Prim {
    /// `bool`.
    Bool,
    /// `char`.
    Char,
    /// `int8`.
    I1,
    /// `uint8`.
    U1,
    /// `int16`.
    I2,
    /// `uint16`.
    U2,
    /// `int32`.
    I4,
    /// `uint32`.
    U4,
    /// `int64`.
    I8,
    /// `uint64`.
    U8,
    /// `float32`.
    R4,
    /// `float64`.
    R8,
    /// `native int`.
    I,
    /// `native uint`.
    U,
}

impl Prim {
    /// The ILAsm name.
    pub fn name(self) -> &'static str {
        match self {
            Prim::Bool => "bool",
            Prim::Char => "char",
            Prim::I1 => "int8",
            Prim::U1 => "uint8",
            Prim::I2 => "int16",
            Prim::U2 => "uint16",
            Prim::I4 => "int32",
            Prim::U4 => "uint32",
            Prim::I8 => "int64",
            Prim::U8 => "uint64",
            Prim::R4 => "float32",
            Prim::R8 => "float64",
            Prim::I => "native int",
            Prim::U => "native uint",
        }
    }

    /// The primitive of an element type byte.
    pub fn of_element(et: u8) -> Option<Prim> {
        use crate::image::sig::element as e;
        Some(match et {
            e::BOOLEAN => Prim::Bool,
            e::CHAR => Prim::Char,
            e::I1 => Prim::I1,
            e::U1 => Prim::U1,
            e::I2 => Prim::I2,
            e::U2 => Prim::U2,
            e::I4 => Prim::I4,
            e::U4 => Prim::U4,
            e::I8 => Prim::I8,
            e::U8 => Prim::U8,
            e::R4 => Prim::R4,
            e::R8 => Prim::R8,
            e::I => Prim::I,
            e::U => Prim::U,
            _ => return None,
        })
    }

    /// The primitive a `System.*` value type of the core library stands for.
    pub fn of_system_name(name: &str) -> Option<Prim> {
        Some(match name {
            "Boolean" => Prim::Bool,
            "Char" => Prim::Char,
            "SByte" => Prim::I1,
            "Byte" => Prim::U1,
            "Int16" => Prim::I2,
            "UInt16" => Prim::U2,
            "Int32" => Prim::I4,
            "UInt32" => Prim::U4,
            "Int64" => Prim::I8,
            "UInt64" => Prim::U8,
            "Single" => Prim::R4,
            "Double" => Prim::R8,
            "IntPtr" => Prim::I,
            "UIntPtr" => Prim::U,
            _ => return None,
        })
    }

    /// The verification type's size class (III.1.8.1.2.3): `bool`, `int8` and `uint8` are one
    /// type there, as are `char`, `int16` and `uint16`, and each signed/unsigned pair.
    pub fn reduced(self) -> Prim {
        match self {
            Prim::Bool | Prim::I1 | Prim::U1 => Prim::I1,
            Prim::Char | Prim::I2 | Prim::U2 => Prim::I2,
            Prim::I4 | Prim::U4 => Prim::I4,
            Prim::I8 | Prim::U8 => Prim::I8,
            Prim::I | Prim::U => Prim::I,
            Prim::R4 => Prim::R4,
            Prim::R8 => Prim::R8,
        }
    }
}

/// One interned type.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum TyNode {
    /// Not resolved (see [`TyId::UNKNOWN`]).
    Unknown,
    /// `void`.
    Void,
    /// `object`.
    Object,
    /// `string`.
    String,
    /// `typedref`.
    TypedRef,
    /// A primitive.
    Prim(Prim),
    /// A class or interface without type arguments.
    Class(TypeKey),
    /// A value type without type arguments (enums included).
    Value(TypeKey),
    /// A generic type with its arguments; `value` for a value type.
    Inst {
        /// The generic definition.
        def: TypeKey,
        /// Whether it is a value type.
        value: bool,
        /// The type arguments.
        args: Box<[TyId]>,
    },
    /// The type's generic parameter `!n`.
    Var(u32),
    /// The method's generic parameter `!!n`.
    MVar(u32),
    /// A vector `T[]`.
    SzArray(TyId),
    /// A general array of a rank.
    Array(TyId, u32),
    /// An unmanaged pointer `T*`.
    Ptr(TyId),
    /// A managed pointer `T&`.
    ByRef(TyId),
    /// A function pointer.
    FnPtr,
}

/// A node mentions [`TyNode::Unknown`] (see [`Interner::has_unknown`]).
const FLAG_UNKNOWN: u8 = 1;
/// A node mentions a generic parameter (see [`Interner::has_generic_param`]).
const FLAG_GENERIC: u8 = 2;

/// The interned types: a table of nodes and the way back from node to id.
#[derive(Debug)]
pub struct Interner {
    nodes: Vec<TyNode>,
    /// Per node, what it mentions ([`FLAG_UNKNOWN`], [`FLAG_GENERIC`]): known when it is
    /// interned, since the types inside it were interned before it.
    flags: Vec<u8>,
    ids: FxMap<TyNode, TyId>,
    /// Instances by definition, value flag and a hash of their arguments: the first id of
    /// each, so that an instance interned before is found without building its node.
    insts: FxMap<(TypeKey, bool, u64), TyId>,
    /// The ids of the primitives interned so far, by [`Prim`] (signatures name them most).
    prims: [Option<TyId>; PRIMS],
}

/// Number of [`Prim`] variants (`native uint` is the last).
const PRIMS: usize = Prim::U as usize + 1;

impl Default for Interner {
    fn default() -> Self {
        let mut t = Interner {
            nodes: Vec::new(),
            flags: Vec::new(),
            ids: FxMap::default(),
            insts: FxMap::default(),
            prims: [None; PRIMS],
        };
        // The order matches the constants of `TyId`.
        for n in [
            TyNode::Unknown,
            TyNode::Void,
            TyNode::Object,
            TyNode::String,
            TyNode::TypedRef,
        ] {
            t.intern(n);
        }
        t
    }
}

impl Interner {
    /// An interner with room for about `n` types before its tables grow (a type system
    /// sizes it by the image's type rows: growing rehashes every type interned so far).
    pub fn with_capacity(n: usize) -> Self {
        let mut t = Interner::default();
        t.nodes.reserve(n);
        t.flags.reserve(n);
        t.ids.reserve(n);
        t
    }

    /// The id of `node`, adding it when new.
    pub fn intern(&mut self, node: TyNode) -> TyId {
        if let Some(&id) = self.ids.get(&node) {
            return id;
        }
        let id = TyId(self.nodes.len() as u32);
        let flags = self.flags_of(&node);
        self.nodes.push(node.clone());
        self.flags.push(flags);
        self.ids.insert(node, id);
        id
    }

    /// The id of the instance `def<args>` (`value`: a value type), its node built only when
    /// it is new.
    pub fn intern_inst(&mut self, def: TypeKey, value: bool, args: &[TyId]) -> TyId {
        let mut h = super::fx::FxHasher::default();
        for a in args {
            h.write_u32(a.0);
        }
        let key = (def, value, h.finish());
        if let Some(&id) = self.insts.get(&key)
            && let TyNode::Inst {
                def: d,
                value: v,
                args: a,
            } = self.node(id)
            && (*d, *v, &**a) == (def, value, args)
        {
            return id;
        }
        let id = self.intern(TyNode::Inst {
            def,
            value,
            args: args.into(),
        });
        // A different instance of the same key (a hash collision) keeps the first.
        self.insts.entry(key).or_insert(id);
        id
    }

    /// What `node` mentions, from the flags of the types inside it.
    fn flags_of(&self, node: &TyNode) -> u8 {
        let of = |t: &TyId| {
            self.flags
                .get(t.0 as usize)
                .copied()
                .unwrap_or(FLAG_UNKNOWN)
        };
        match node {
            TyNode::Unknown => FLAG_UNKNOWN,
            TyNode::Var(_) | TyNode::MVar(_) => FLAG_GENERIC,
            TyNode::Inst { args, .. } => args.iter().fold(0, |f, a| f | of(a)),
            TyNode::SzArray(t) | TyNode::Array(t, _) | TyNode::Ptr(t) | TyNode::ByRef(t) => of(t),
            TyNode::Void
            | TyNode::Object
            | TyNode::String
            | TyNode::TypedRef
            | TyNode::Prim(_)
            | TyNode::Class(_)
            | TyNode::Value(_)
            | TyNode::FnPtr => 0,
        }
    }

    /// The node of `id`.
    pub fn node(&self, id: TyId) -> &TyNode {
        self.nodes.get(id.0 as usize).unwrap_or(&TyNode::Unknown)
    }

    /// Number of types interned.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Always false: the well-known types are interned from the start.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The id of a primitive.
    #[inline]
    pub fn prim(&mut self, p: Prim) -> TyId {
        if let Some(&Some(id)) = self.prims.get(p as usize) {
            return id;
        }
        let id = self.intern(TyNode::Prim(p));
        if let Some(slot) = self.prims.get_mut(p as usize) {
            *slot = Some(id);
        }
        id
    }

    /// Whether `id` or a type inside it is [`TyNode::Unknown`].
    #[inline]
    pub fn has_unknown(&self, id: TyId) -> bool {
        // An id not interned here reads as `Unknown` (see `node`).
        self.flags
            .get(id.0 as usize)
            .is_none_or(|f| f & FLAG_UNKNOWN != 0)
    }

    /// Whether `id` mentions a generic parameter.
    #[inline]
    pub fn has_generic_param(&self, id: TyId) -> bool {
        self.flags
            .get(id.0 as usize)
            .is_some_and(|f| f & FLAG_GENERIC != 0)
    }

    /// `id` with `!n` replaced by `class_args[n]` and `!!n` by `method_args[n]` (a parameter
    /// without an argument stays as it is).
    pub fn subst(&mut self, id: TyId, class_args: &[TyId], method_args: &[TyId]) -> TyId {
        // A type without generic parameters is its own substitution (interned types are
        // hash-consed): no clone of its node.
        if (class_args.is_empty() && method_args.is_empty()) || !self.has_generic_param(id) {
            return id;
        }
        let node = self.node(id).clone();
        match node {
            TyNode::Var(n) => class_args.get(n as usize).copied().unwrap_or(id),
            TyNode::MVar(n) => method_args.get(n as usize).copied().unwrap_or(id),
            TyNode::Inst { def, value, args } => {
                let args: Box<[TyId]> = args
                    .iter()
                    .map(|&a| self.subst(a, class_args, method_args))
                    .collect();
                self.intern(TyNode::Inst { def, value, args })
            }
            TyNode::SzArray(t) => {
                let t = self.subst(t, class_args, method_args);
                self.intern(TyNode::SzArray(t))
            }
            TyNode::Array(t, r) => {
                let t = self.subst(t, class_args, method_args);
                self.intern(TyNode::Array(t, r))
            }
            TyNode::Ptr(t) => {
                let t = self.subst(t, class_args, method_args);
                self.intern(TyNode::Ptr(t))
            }
            TyNode::ByRef(t) => {
                let t = self.subst(t, class_args, method_args);
                self.intern(TyNode::ByRef(t))
            }
            _ => id,
        }
    }
}

/// A method signature with its types resolved (II.23.2.1–3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MethodTy {
    /// Called with `this`.
    pub has_this: bool,
    /// `this` is the first of `params`.
    pub explicit_this: bool,
    /// The calling convention is `vararg`.
    pub vararg: bool,
    /// Number of the method's generic parameters.
    pub generic_params: u32,
    /// The return type.
    pub ret: TyId,
    /// The parameters, the vararg extras of a call site included.
    pub params: Vec<TyId>,
}

/// A method signature as the type system keeps it once resolved: small and copyable, its
/// parameter types a run of the type system's parameter pool
/// ([`super::TypeSystem::params`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MethodSig {
    /// Called with `this`.
    pub has_this: bool,
    /// `this` is the first of the parameters.
    pub explicit_this: bool,
    /// The calling convention is `vararg`.
    pub vararg: bool,
    /// Number of the method's generic parameters.
    pub generic_params: u32,
    /// The return type.
    pub ret: TyId,
    /// The type declaring the method ([`TyId::UNKNOWN`] when not known, as for `calli`).
    pub parent: TyId,
    /// The parameters: start and length in the pool.
    pub(crate) params: (u32, u32),
    /// The method token it was resolved for names a method called `.ctor` and the signature
    /// has `this` (set by [`super::TypeSystem::method`], once per token: the name is a
    /// random read of `#Strings`, which the rules would otherwise make per call).
    pub(crate) named_ctor: bool,
}

impl MethodSig {
    /// Number of parameters (the vararg extras of a call site included).
    pub fn param_count(&self) -> u32 {
        self.params.1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The flags kept at interning answer as a walk of the type would.
    #[test]
    fn flags_follow_the_types_inside() {
        let mut t = Interner::default();
        let i4 = t.prim(Prim::I4);
        let var = t.intern(TyNode::Var(0));
        let key = TypeKey { module: 0, rid: 1 };
        let inst = t.intern(TyNode::Inst {
            def: key,
            value: false,
            args: Box::new([i4, var]),
        });
        let unknown_array = t.intern(TyNode::SzArray(TyId::UNKNOWN));
        let nested = t.intern(TyNode::ByRef(unknown_array));
        let plain = t.intern(TyNode::SzArray(i4));
        assert!(!t.has_unknown(i4) && !t.has_generic_param(i4));
        assert!(t.has_generic_param(inst) && !t.has_unknown(inst));
        assert!(t.has_unknown(nested) && !t.has_generic_param(nested));
        assert!(!t.has_unknown(plain) && !t.has_generic_param(plain));
        // An id not interned here reads as unknown, as `node` has it.
        assert!(t.has_unknown(TyId(10_000)) && !t.has_generic_param(TyId(10_000)));
        // Primitives keep their ids.
        assert_eq!(t.prim(Prim::I4), i4);
        assert_eq!(t.intern(TyNode::Prim(Prim::I4)), i4);
    }
}
