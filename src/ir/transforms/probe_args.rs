//! A method's arguments as an `object[]`, for a probe that takes them: each value-type or
//! type-parameter argument boxed (with a type token found or added through a
//! [`MetadataBuilder`]), a by-ref argument loaded through its reference first, a pointer or a
//! typed reference passed as null. `this` is not among them.

use crate::image::Image;
use crate::image::emit::{EmitError, MetadataBuilder};
use crate::image::sig::{SigReader, decompress_u32, element::*, read_type};
use crate::image::tables::{Table, Token};
use crate::ir::{Instr, Operand};
use crate::opcode::Opcode;

/// Where the `System` types that added code boxes with (and `System.Object`) come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CoreTypes {
    /// The core library's, through this AssemblyRef.
    Referenced(Token),
    /// The image's own TypeDefs: it is the core library.
    Defined,
}

impl CoreTypes {
    /// For `image`: its own types when it defines `System.Object` (the core library itself),
    /// else those of the assembly its `System.Object` TypeRef comes from, else of an
    /// AssemblyRef by a core library's name. `None` when there is none of these.
    pub fn of(image: &Image<'_>) -> Option<CoreTypes> {
        let t = image.tables();
        let strings = image.strings();
        let h = image.tables_header();
        let is = |name, namespace, want: &str| {
            strings.get(name).ok() == Some(want) && strings.get(namespace).ok() == Some("System")
        };
        let defines_object = (1..=h.rows(Table::TypeDef)).any(|rid| {
            t.type_def(rid)
                .is_ok_and(|d| is(d.name, d.namespace, "Object") && d.extends.is_null())
        });
        if defines_object {
            return Some(CoreTypes::Defined);
        }
        for rid in 1..=h.rows(Table::TypeRef) {
            let Ok(r) = t.type_ref(rid) else { continue };
            if is(r.name, r.namespace, "Object")
                && r.resolution_scope.table() == Some(Table::AssemblyRef)
            {
                return Some(CoreTypes::Referenced(r.resolution_scope));
            }
        }
        (1..=h.rows(Table::AssemblyRef)).find_map(|rid| {
            let name = strings.get(t.assembly_ref(rid).ok()?.name).ok()?;
            [
                "mscorlib",
                "System.Runtime",
                "netstandard",
                "System.Private.CoreLib",
            ]
            .contains(&name)
            .then(|| CoreTypes::Referenced(Token::new(Table::AssemblyRef, rid)))
        })
    }

    /// The token of `System.NAME`: a TypeRef found or added, or the image's own TypeDef
    /// (`None` when the core library itself lacks it).
    pub fn system_type(
        self,
        b: &mut MetadataBuilder<'_, '_>,
        name: &str,
    ) -> Result<Option<Token>, EmitError> {
        match self {
            CoreTypes::Referenced(core) => b.type_ref(core, "System", name).map(Some),
            CoreTypes::Defined => b.type_def_named("System", name),
        }
    }
}

/// How one argument goes into the array.
enum Load {
    /// A reference: stored as it is.
    Reference,
    /// A value: boxed with this type.
    Boxed(Token),
    /// Nothing the array can hold: null.
    Null,
}

/// The code that leaves the arguments of a method with signature `method_sig` on the stack as
/// an `object[]`; `object_type` is the TypeRef (or TypeDef) of `System.Object` and `core` where
/// the primitives' types come from, for boxing them. `None` when the signature does not
/// parse or lists `this` explicitly.
pub fn arguments_array(
    b: &mut MetadataBuilder<'_, '_>,
    core: CoreTypes,
    object_type: Token,
    method_sig: &[u8],
) -> Result<Option<Vec<Instr>>, EmitError> {
    const HAS_THIS: u8 = 0x20;
    const EXPLICIT_THIS: u8 = 0x40;
    const GENERIC: u8 = 0x10;
    let mut r = SigReader::new(method_sig);
    let Ok(cc) = r.u8() else { return Ok(None) };
    if cc & EXPLICIT_THIS != 0 {
        return Ok(None);
    }
    if cc & GENERIC != 0 && r.compressed_u32().is_err() {
        return Ok(None);
    }
    let Ok(count) = r.compressed_u32() else {
        return Ok(None);
    };
    if count as usize > r.remaining() || read_type(&mut r, 1, None).is_err() {
        return Ok(None);
    }
    let first_arg = u16::from(cc & HAS_THIS != 0);
    let mut code = vec![
        Instr::new(Opcode::Ldc_I4, Operand::Int32(count as i32)),
        Instr::new(Opcode::Newarr, Operand::Token(object_type.0)),
    ];
    for i in 0..count {
        let start = r.pos();
        if read_type(&mut r, 1, None).is_err() {
            return Ok(None);
        }
        let ty = &method_sig[start..r.pos()];
        let Ok(index) = u16::try_from(i).map(|i| i + first_arg) else {
            return Ok(None);
        };
        code.push(Instr::op(Opcode::Dup));
        code.push(Instr::new(Opcode::Ldc_I4, Operand::Int32(i as i32)));
        let ty = strip_modifiers(ty);
        let (by_ref, ty) = match ty.split_first() {
            Some((&BYREF, inner)) => (true, strip_modifiers(inner)),
            _ => (false, ty),
        };
        match load(b, core, ty)? {
            Load::Null => code.push(Instr::op(Opcode::Ldnull)),
            Load::Reference => {
                code.push(Instr::new(Opcode::Ldarg, Operand::Var(index)));
                if by_ref {
                    code.push(Instr::op(Opcode::Ldind_Ref));
                }
            }
            Load::Boxed(token) => {
                code.push(Instr::new(Opcode::Ldarg, Operand::Var(index)));
                if by_ref {
                    code.push(Instr::new(Opcode::Ldobj, Operand::Token(token.0)));
                }
                code.push(Instr::new(Opcode::Box, Operand::Token(token.0)));
            }
        }
        code.push(Instr::op(Opcode::Stelem_Ref));
    }
    Ok(Some(code))
}

/// The code that pushes a value of type `ty` (a Type as signatures encode it) as an
/// `object`: `load`, which pushes the value, then a `box` for a value type or a type parameter.
/// `None` for a type no `object` can hold (a by-ref, a pointer, a typed reference): the caller
/// passes null. `core` says where the primitives' types come from, for boxing them.
pub fn as_object(
    b: &mut MetadataBuilder<'_, '_>,
    core: CoreTypes,
    ty: &[u8],
    load: Instr,
) -> Result<Option<Vec<Instr>>, EmitError> {
    Ok(match self::load(b, core, strip_modifiers(ty))? {
        Load::Null => None,
        Load::Reference => Some(vec![load]),
        Load::Boxed(token) => Some(vec![load, Instr::new(Opcode::Box, Operand::Token(token.0))]),
    })
}

/// Whether an `object` can hold a value of type `ty` (see [`as_object`]): whether a probe
/// taking the value needs somewhere to keep it.
pub fn fits_object(ty: &[u8]) -> bool {
    let ty = strip_modifiers(ty);
    match ty.first() {
        Some(&first) => kind(first, ty.get(1).copied()) != Kind::Null,
        None => false,
    }
}

/// What a value of a type whose signature starts with `first` (then `second`) is to an
/// `object`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A primitive, boxed with its `System` type of this name.
    Primitive(&'static str),
    /// A reference, as it is.
    Reference,
    /// A value type named by its TypeDefOrRef: boxed with it.
    ValueType,
    /// A generic instance of a value type, or a type parameter: boxed with a TypeSpec.
    Spec,
    /// Nothing an `object` holds.
    Null,
}

fn kind(first: u8, second: Option<u8>) -> Kind {
    match first {
        BOOLEAN => Kind::Primitive("Boolean"),
        CHAR => Kind::Primitive("Char"),
        I1 => Kind::Primitive("SByte"),
        U1 => Kind::Primitive("Byte"),
        I2 => Kind::Primitive("Int16"),
        U2 => Kind::Primitive("UInt16"),
        I4 => Kind::Primitive("Int32"),
        U4 => Kind::Primitive("UInt32"),
        I8 => Kind::Primitive("Int64"),
        U8 => Kind::Primitive("UInt64"),
        R4 => Kind::Primitive("Single"),
        R8 => Kind::Primitive("Double"),
        I => Kind::Primitive("IntPtr"),
        U => Kind::Primitive("UIntPtr"),
        STRING | CLASS | OBJECT | SZARRAY | ARRAY => Kind::Reference,
        VALUETYPE => Kind::ValueType,
        // A generic instantiation of a class is a reference; of a value type, and a type
        // parameter (whatever it is bound to: boxing a reference is a no-op), a boxed value.
        GENERICINST if second == Some(CLASS) => Kind::Reference,
        GENERICINST | VAR | MVAR => Kind::Spec,
        _ => Kind::Null,
    }
}

/// The type bytes without leading custom modifiers (CMOD_REQD/CMOD_OPT and their token).
fn strip_modifiers(mut ty: &[u8]) -> &[u8] {
    while let Some((&(CMOD_REQD | CMOD_OPT), rest)) = ty.split_first() {
        match decompress_u32(rest) {
            Ok((_, used)) => ty = &rest[used..],
            Err(_) => return ty,
        }
    }
    ty
}

/// How a value of type `ty` is stored in an `object[]`.
fn load(b: &mut MetadataBuilder<'_, '_>, core: CoreTypes, ty: &[u8]) -> Result<Load, EmitError> {
    let Some(&first) = ty.first() else {
        return Ok(Load::Null);
    };
    Ok(match kind(first, ty.get(1).copied()) {
        Kind::Primitive(name) => match core.system_type(b, name)? {
            Some(token) => Load::Boxed(token),
            None => Load::Null,
        },
        Kind::Reference => Load::Reference,
        Kind::ValueType => {
            let Ok((coded, _)) = decompress_u32(&ty[1..]) else {
                return Ok(Load::Null);
            };
            let table = match coded & 3 {
                0 => Table::TypeDef,
                1 => Table::TypeRef,
                _ => Table::TypeSpec,
            };
            Load::Boxed(Token::new(table, coded >> 2))
        }
        Kind::Spec => Load::Boxed(b.type_spec(ty)?),
        Kind::Null => Load::Null,
    })
}
