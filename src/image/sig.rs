//! Signature blobs (ECMA-335 II.23.2): compressed integers and tokens, the type grammar, and
//! method, field, local-variable, property and method-spec signatures.
//!
//! Every reader works on a borrowed blob, never allocates, bounds every count by the bytes that
//! remain and bounds recursion by [`MAX_DEPTH`]. Offsets in [`SigError`] are relative to the blob.

use std::fmt::Write as _;

use thiserror::Error;

use super::ids::{Table, Token};

/// Deepest nesting of types (arrays of pointers of generic instances, function pointers, custom
/// modifiers…) accepted before a signature is rejected as hostile.
pub const MAX_DEPTH: u32 = 64;

/// Element types (II.23.1.16).
pub mod element {
    /// Marks the end of a list.
    pub const END: u8 = 0x00;
    /// `void`: only as a return type (or behind `PTR`).
    pub const VOID: u8 = 0x01;
    /// `bool`.
    pub const BOOLEAN: u8 = 0x02;
    /// `char`, a UTF-16 code unit.
    pub const CHAR: u8 = 0x03;
    /// `int8`.
    pub const I1: u8 = 0x04;
    /// `uint8`.
    pub const U1: u8 = 0x05;
    /// `int16`.
    pub const I2: u8 = 0x06;
    /// `uint16`.
    pub const U2: u8 = 0x07;
    /// `int32`.
    pub const I4: u8 = 0x08;
    /// `uint32`.
    pub const U4: u8 = 0x09;
    /// `int64`.
    pub const I8: u8 = 0x0A;
    /// `uint64`.
    pub const U8: u8 = 0x0B;
    /// `float32`.
    pub const R4: u8 = 0x0C;
    /// `float64`.
    pub const R8: u8 = 0x0D;
    /// `string` (`System.String`).
    pub const STRING: u8 = 0x0E;
    /// Unmanaged pointer: followed by the pointed-to type.
    pub const PTR: u8 = 0x0F;
    /// Managed pointer (`&`): followed by the referenced type.
    pub const BYREF: u8 = 0x10;
    /// A value type: followed by a TypeDefOrRef coded token.
    pub const VALUETYPE: u8 = 0x11;
    /// A reference type: followed by a TypeDefOrRef coded token.
    pub const CLASS: u8 = 0x12;
    /// Generic parameter of the enclosing type (`!n`): followed by its compressed number.
    pub const VAR: u8 = 0x13;
    /// General array: element type, then an ArrayShape (II.23.2.13).
    pub const ARRAY: u8 = 0x14;
    /// Generic type instance: `CLASS` or `VALUETYPE`, the generic type's token, the argument
    /// count and the arguments.
    pub const GENERICINST: u8 = 0x15;
    /// `typedref` (`System.TypedReference`).
    pub const TYPEDBYREF: u8 = 0x16;
    /// `native int` (`System.IntPtr`).
    pub const I: u8 = 0x18;
    /// `native uint` (`System.UIntPtr`).
    pub const U: u8 = 0x19;
    /// Function pointer: followed by a whole method signature.
    pub const FNPTR: u8 = 0x1B;
    /// `object` (`System.Object`).
    pub const OBJECT: u8 = 0x1C;
    /// Single-dimensional, zero-based array (vector): followed by the element type.
    pub const SZARRAY: u8 = 0x1D;
    /// Generic parameter of the enclosing method (`!!n`): followed by its compressed number.
    pub const MVAR: u8 = 0x1E;
    /// Required custom modifier (`modreq`): a TypeDefOrRef coded token, then the modified type.
    pub const CMOD_REQD: u8 = 0x1F;
    /// Optional custom modifier (`modopt`): a TypeDefOrRef coded token, then the modified type.
    pub const CMOD_OPT: u8 = 0x20;
    /// Implemented within the CLI: exists only in runtime memory, never in a file.
    pub const INTERNAL: u8 = 0x21;
    /// OR'd with the following element type.
    pub const MODIFIER: u8 = 0x40;
    /// Separates a vararg call site's fixed parameters from its extra ones.
    pub const SENTINEL: u8 = 0x41;
    /// A pinned local: followed by the local's type.
    pub const PINNED: u8 = 0x45;
}

/// Calling-convention byte (II.23.2.1–II.23.2.3): low nibble is the kind, high bits are flags.
pub mod callconv {
    /// The managed calling convention of a method signature (II.23.2.1).
    pub const DEFAULT: u8 = 0x00;
    /// Unmanaged cdecl: only in StandAloneMethodSig (II.23.2.3) and function pointers.
    pub const C: u8 = 0x01;
    /// Unmanaged stdcall: only in StandAloneMethodSig and function pointers.
    pub const STDCALL: u8 = 0x02;
    /// Unmanaged thiscall: only in StandAloneMethodSig and function pointers.
    pub const THISCALL: u8 = 0x03;
    /// Unmanaged fastcall: only in StandAloneMethodSig and function pointers.
    pub const FASTCALL: u8 = 0x04;
    /// Managed vararg: a call site's MethodRefSig may add parameters after a `SENTINEL`.
    pub const VARARG: u8 = 0x05;
    /// Starts a FieldSig (II.23.2.4).
    pub const FIELD: u8 = 0x06;
    /// Starts a LocalVarSig (II.23.2.6).
    pub const LOCAL_SIG: u8 = 0x07;
    /// Starts a PropertySig (II.23.2.5), possibly with `HASTHIS`.
    pub const PROPERTY: u8 = 0x08;
    /// Unmanaged calling convention described by modifiers (used by newer runtimes).
    pub const UNMANAGED: u8 = 0x09;
    /// Starts a MethodSpec instantiation (II.23.2.15).
    pub const GENERICINST: u8 = 0x0A;
    /// The kind nibble of the byte: one of the values above.
    pub const KIND_MASK: u8 = 0x0F;
    /// Flag: a generic parameter count follows the calling convention (II.23.2.1).
    pub const GENERIC: u8 = 0x10;
    /// Flag: an instance method; `this` is passed first, not listed in the parameters.
    pub const HASTHIS: u8 = 0x20;
    /// Flag (with `HASTHIS`): `this` is listed as the first parameter.
    pub const EXPLICITTHIS: u8 = 0x40;
}

/// What is wrong with a signature blob, at which offset within the blob.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum SigError {
    /// The blob ends inside an item: a byte, a compressed integer or a type is cut short.
    #[error("signature truncated at offset {offset}")]
    Truncated {
        /// Offset of the first missing byte (the blob's length).
        offset: usize,
    },
    /// A compressed integer starts with `111xxxxx`, which no form of II.23.2 uses.
    #[error("invalid compressed integer lead byte {byte:#04x} at offset {offset}")]
    BadCompressedInt {
        /// Offset of the lead byte.
        offset: usize,
        /// The lead byte.
        byte: u8,
    },
    /// A TypeDefOrRefOrSpecEncoded token (II.23.2.8) has tag 3, which names no table.
    #[error("TypeDefOrRef coded token {value:#x} at offset {offset} has the invalid tag 3")]
    BadTypeDefOrRef {
        /// Offset of the compressed value.
        offset: usize,
        /// The decompressed value, tag included.
        value: u32,
    },
    /// A byte where a type must start is no element type a type can start with (this includes
    /// `END`, `SENTINEL` outside a method's parameter list and the unassigned values).
    #[error("unknown element type {byte:#04x} at offset {offset}")]
    BadElementType {
        /// Offset of the byte.
        offset: usize,
        /// The byte.
        byte: u8,
    },
    /// `ELEMENT_TYPE_INTERNAL`, which the runtime uses in memory and no file may contain.
    #[error("element type INTERNAL (0x21) at offset {offset} only exists in runtime memory")]
    InternalElementType {
        /// Offset of the element type.
        offset: usize,
    },
    /// `GENERICINST` followed by something other than `CLASS` or `VALUETYPE`.
    #[error("GENERICINST at offset {offset} is followed by {byte:#04x}, not CLASS or VALUETYPE")]
    BadGenericInst {
        /// Offset of the byte after `GENERICINST`.
        offset: usize,
        /// That byte.
        byte: u8,
    },
    /// Types nest [`MAX_DEPTH`] deep or more (counting modifiers, pointers, arrays, generic
    /// arguments and function-pointer signatures), which only a hostile blob does.
    #[error("types nested deeper than {limit} at offset {offset}")]
    TooDeep {
        /// Offset of the type that would exceed the limit.
        offset: usize,
        /// The limit, [`MAX_DEPTH`].
        limit: u32,
    },
    /// The calling-convention byte does not start the kind of signature the context requires
    /// (a field signature where a method's is expected, a LocalVarSig without `LOCAL_SIG`, …).
    #[error("calling convention {byte:#04x} at offset {offset} does not start a {expected}")]
    WrongKind {
        /// Offset of the calling-convention byte.
        offset: usize,
        /// The byte.
        byte: u8,
        /// The kind of signature expected.
        expected: &'static str,
    },
    /// A count (parameters, locals, generic arguments, array sizes or bounds) is larger than
    /// the rest of the blob could hold at one byte per item.
    #[error("count {count} at offset {offset} exceeds the {remaining} bytes that remain")]
    CountTooLarge {
        /// Offset of the compressed count.
        offset: usize,
        /// The count.
        count: u32,
        /// Bytes of the blob after the count.
        remaining: usize,
    },
    /// A method signature's parameter list holds a second `SENTINEL`.
    #[error("second SENTINEL at offset {offset}")]
    DuplicateSentinel {
        /// Offset of the second `SENTINEL`.
        offset: usize,
    },
    /// A `SENTINEL` outside a method signature's parameter list. Not produced by the readers
    /// at present: such a byte is reported as [`SigError::BadElementType`].
    #[error("SENTINEL at offset {offset} outside a parameter list")]
    MisplacedSentinel {
        /// Offset of the `SENTINEL`.
        offset: usize,
    },
}

// ---------------------------------------------------------------------------------------------
// Compressed integers (II.23.2)

/// Decodes a compressed unsigned integer at the start of `bytes`: `(value, bytes consumed)`.
pub fn decompress_u32(bytes: &[u8]) -> Result<(u32, usize), SigError> {
    let mut r = SigReader::new(bytes);
    let v = r.compressed_u32()?;
    Ok((v, r.pos()))
}

/// Decodes a compressed signed integer at the start of `bytes`: `(value, bytes consumed)`.
pub fn decompress_i32(bytes: &[u8]) -> Result<(i32, usize), SigError> {
    let mut r = SigReader::new(bytes);
    let v = r.compressed_i32()?;
    Ok((v, r.pos()))
}

/// Encodes `value` in the shortest compressed form; `None` above 0x1FFF_FFFF.
pub fn compress_u32(value: u32) -> Option<Vec<u8>> {
    match value {
        0..=0x7F => Some(vec![value as u8]),
        0x80..=0x3FFF => Some(((value as u16) | 0x8000).to_be_bytes().to_vec()),
        0x4000..=0x1FFF_FFFF => Some((value | 0xC000_0000).to_be_bytes().to_vec()),
        _ => None,
    }
}

/// Encodes `value` in the shortest compressed signed form (rotated sign bit); `None` outside
/// -2^28 ..= 2^28-1.
pub fn compress_i32(value: i32) -> Option<Vec<u8>> {
    let sign = u32::from(value < 0);
    let rotated = ((value as u32) << 1) | sign;
    if (-0x40..0x40).contains(&value) {
        Some(vec![(rotated & 0x7F) as u8])
    } else if (-0x2000..0x2000).contains(&value) {
        Some(
            (((rotated & 0x3FFF) as u16) | 0x8000)
                .to_be_bytes()
                .to_vec(),
        )
    } else if (-0x1000_0000..0x1000_0000).contains(&value) {
        Some(
            ((rotated & 0x1FFF_FFFF) | 0xC000_0000)
                .to_be_bytes()
                .to_vec(),
        )
    } else {
        None
    }
}

/// Decodes a TypeDefOrRef coded value (II.23.2.8) into a token.
pub fn decode_type_def_or_ref(value: u32) -> Option<Token> {
    let table = match value & 3 {
        0 => Table::TypeDef,
        1 => Table::TypeRef,
        2 => Table::TypeSpec,
        _ => return None,
    };
    Some(Token::new(table, value >> 2))
}

// ---------------------------------------------------------------------------------------------
// Reader

/// A cursor over one signature blob.
#[derive(Debug, Clone)]
pub struct SigReader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> SigReader<'a> {
    /// A cursor at offset 0 of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        SigReader { bytes, pos: 0 }
    }

    /// Offset of the next byte within the blob.
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Bytes after the cursor.
    pub fn remaining(&self) -> usize {
        self.bytes.len().saturating_sub(self.pos)
    }

    /// The next byte, without moving; [`SigError::Truncated`] at the end.
    pub fn peek(&self) -> Result<u8, SigError> {
        self.bytes
            .get(self.pos)
            .copied()
            .ok_or(SigError::Truncated { offset: self.pos })
    }

    /// The next byte, moving past it; [`SigError::Truncated`] at the end.
    pub fn u8(&mut self) -> Result<u8, SigError> {
        let b = self.peek()?;
        self.pos += 1;
        Ok(b)
    }

    /// Compressed unsigned integer in its 1-, 2- or 4-byte form.
    pub fn compressed_u32(&mut self) -> Result<u32, SigError> {
        self.compressed_u32_with_width().map(|(v, _)| v)
    }

    /// The value and the number of payload bits of its form (7, 14 or 29).
    fn compressed_u32_with_width(&mut self) -> Result<(u32, u32), SigError> {
        let start = self.pos;
        let b0 = self.u8()?;
        if b0 & 0x80 == 0 {
            return Ok((u32::from(b0), 7));
        }
        if b0 & 0xC0 == 0x80 {
            let b1 = self.u8()?;
            return Ok(((u32::from(b0 & 0x3F) << 8) | u32::from(b1), 14));
        }
        if b0 & 0xE0 == 0xC0 {
            let rest = self
                .bytes
                .get(self.pos..self.pos + 3)
                .ok_or(SigError::Truncated {
                    offset: self.bytes.len(),
                })?;
            self.pos += 3;
            let v = (u32::from(b0 & 0x1F) << 24)
                | (u32::from(rest[0]) << 16)
                | (u32::from(rest[1]) << 8)
                | u32::from(rest[2]);
            return Ok((v, 29));
        }
        self.pos = start;
        Err(SigError::BadCompressedInt {
            offset: start,
            byte: b0,
        })
    }

    /// Compressed signed integer: the sign bit is rotated into bit 0 of the unsigned form.
    pub fn compressed_i32(&mut self) -> Result<i32, SigError> {
        let (u, bits) = self.compressed_u32_with_width()?;
        let magnitude = (u >> 1) as i32;
        Ok(if u & 1 == 0 {
            magnitude
        } else {
            magnitude - (1i32 << (bits - 1))
        })
    }

    /// Compressed TypeDefOrRef token (II.23.2.8).
    pub fn type_def_or_ref(&mut self) -> Result<Token, SigError> {
        let offset = self.pos;
        let value = self.compressed_u32()?;
        decode_type_def_or_ref(value).ok_or(SigError::BadTypeDefOrRef { offset, value })
    }

    /// Reads a count and checks that at least `count * min_item_len` bytes remain, so a hostile
    /// count can neither drive an allocation nor a long loop.
    fn count(&mut self, min_item_len: usize) -> Result<u32, SigError> {
        let offset = self.pos;
        let count = self.compressed_u32()?;
        let needed = (count as usize).saturating_mul(min_item_len);
        if needed > self.remaining() {
            return Err(SigError::CountTooLarge {
                offset,
                count,
                remaining: self.remaining(),
            });
        }
        Ok(count)
    }
}

// ---------------------------------------------------------------------------------------------
// Rendering support

/// How rendered signatures are spelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Style {
    /// Full method names: parameters separated by `,` alone, no calling convention
    /// (`void(int32,string)`).
    #[default]
    Compact,
    /// ILAsm, as ildasm prints operands: parameters separated by `, ` and the calling
    /// convention before the return type (`instance void(int32, string)`, `vararg`,
    /// `unmanaged cdecl`). Generic arguments stay separated by `,` alone, as ildasm prints them.
    Ilasm,
}

/// Supplies readable names for TypeDef/TypeRef/TypeSpec tokens while rendering a type.
pub trait TypeNames {
    /// Appends the name of `token` to `out`. `depth` is the current nesting, to be passed on
    /// when a TypeSpec is rendered through [`read_type`].
    fn write_type_name(&self, token: Token, depth: u32, out: &mut String) -> Result<(), SigError>;

    /// How the signature around the names is spelled.
    fn style(&self) -> Style {
        Style::Compact
    }
}

/// Names tokens by their hex value; for signatures read without an image.
pub struct TokenNames;

impl TypeNames for TokenNames {
    fn write_type_name(&self, token: Token, _depth: u32, out: &mut String) -> Result<(), SigError> {
        let _ = write!(out, "{:#010x}", token.0);
        Ok(())
    }
}

/// Where rendered text goes and how type tokens are named.
pub struct Renderer<'o> {
    /// Text is appended here (never cleared).
    pub out: &'o mut String,
    /// Names the TypeDef, TypeRef and TypeSpec tokens met in the signature.
    pub names: &'o dyn TypeNames,
}

impl Renderer<'_> {
    fn push(&mut self, s: &str) {
        self.out.push_str(s);
    }

    /// Separates parameters (and locals) in a list.
    fn separator(&self) -> &'static str {
        match self.names.style() {
            Style::Compact => ",",
            Style::Ilasm => ", ",
        }
    }

    /// ILAsm's words for a method signature's calling convention (II.15.3), each followed by a
    /// space; nothing in the compact style, and nothing for the default convention.
    fn calling_convention(&mut self, cc: u8) {
        if self.names.style() == Style::Compact {
            return;
        }
        if cc & callconv::HASTHIS != 0 {
            self.push("instance ");
        }
        if cc & callconv::EXPLICITTHIS != 0 {
            self.push("explicit ");
        }
        self.push(match cc & callconv::KIND_MASK {
            callconv::C => "unmanaged cdecl ",
            callconv::STDCALL => "unmanaged stdcall ",
            callconv::THISCALL => "unmanaged thiscall ",
            callconv::FASTCALL => "unmanaged fastcall ",
            callconv::VARARG => "vararg ",
            callconv::UNMANAGED => "unmanaged ",
            callconv::DEFAULT => "",
            // Field, local, property and instantiation signatures: the method signature reader
            // refuses them before anything is rendered.
            _ => "",
        });
    }
}

fn primitive_name(et: u8) -> Option<&'static str> {
    use element::*;
    Some(match et {
        VOID => "void",
        BOOLEAN => "bool",
        CHAR => "char",
        I1 => "int8",
        U1 => "uint8",
        I2 => "int16",
        U2 => "uint16",
        I4 => "int32",
        U4 => "uint32",
        I8 => "int64",
        U8 => "uint64",
        R4 => "float32",
        R8 => "float64",
        STRING => "string",
        OBJECT => "object",
        I => "native int",
        U => "native uint",
        TYPEDBYREF => "typedref",
        _ => return None,
    })
}

/// The bytes of a method signature's return type (custom modifiers included), when the blob
/// parses that far.
pub fn return_type_of(method_sig: &[u8]) -> Option<&[u8]> {
    let mut r = SigReader::new(method_sig);
    let cc = r.u8().ok()?;
    if cc & callconv::GENERIC != 0 {
        r.compressed_u32().ok()?;
    }
    r.compressed_u32().ok()?;
    let start = r.pos();
    read_type(&mut r, 1, None).ok()?;
    method_sig.get(start..r.pos())
}

/// The type a method's `ret` returns, as signatures encode it: the declared return type of
/// `method_sig`, or for a runtime-async method (`impl_flags` with [`IMPL_ASYNC`]) what its task
/// completes with ([`async_result`]: `void` for `Task`/`ValueTask`, `T` for `Task<T>`).
pub fn returned_type(method_sig: &[u8], impl_flags: u16) -> Option<&[u8]> {
    const VOID: &[u8] = &[element::VOID];
    let ret = return_type_of(method_sig)?;
    if impl_flags & IMPL_ASYNC == 0 {
        return Some(ret);
    }
    Some(match async_result(ret) {
        Some(None) => VOID,
        Some(Some(range)) => &ret[range],
        None => ret,
    })
}

/// MethodImplAttributes' runtime-async bit (`Async`): such a method's `ret` returns what its
/// `Task`/`ValueTask` completes with, not the task (the runtime-async amendment to ECMA-335,
/// I.8.4.5).
pub const IMPL_ASYNC: u16 = 0x2000;

/// What the `ret` of a runtime-async method whose declared return type is `ret` (a Type as
/// signatures encode it, custom modifiers included) returns: `Some(None)` nothing (`Task`,
/// `ValueTask`), `Some(Some(range))` the type argument at `range` of `ret` (`Task<T>`,
/// `ValueTask<T>`), `None` when `ret` has neither shape (the method is then judged by its
/// declared type). The shapes are read, not the names: only these four types are allowed.
pub fn async_result(ret: &[u8]) -> Option<Option<std::ops::Range<usize>>> {
    use element::*;
    let mut r = SigReader::new(ret);
    while matches!(r.peek().ok()?, CMOD_OPT | CMOD_REQD) {
        r.u8().ok()?;
        r.compressed_u32().ok()?;
    }
    match r.u8().ok()? {
        CLASS | VALUETYPE => {
            r.compressed_u32().ok()?;
            (r.remaining() == 0).then_some(None)
        }
        GENERICINST => {
            if !matches!(r.u8().ok()?, CLASS | VALUETYPE) {
                return None;
            }
            r.compressed_u32().ok()?;
            if r.compressed_u32().ok()? != 1 {
                return None;
            }
            let start = r.pos();
            read_type(&mut r, 1, None).ok()?;
            (r.remaining() == 0).then_some(Some(start..ret.len()))
        }
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// Type grammar (II.23.2.12 and the parameter/return/local forms around it)

/// Reads one type, including the custom modifiers, BYREF, PINNED and TYPEDBYREF forms that
/// precede or replace it in parameters, return types and locals. Renders it when `rend` is
/// given. Returns the element type of the type proper (after modifiers and PINNED).
pub fn read_type(
    r: &mut SigReader<'_>,
    depth: u32,
    mut rend: Option<&mut Renderer<'_>>,
) -> Result<u8, SigError> {
    use element::*;
    if depth >= MAX_DEPTH {
        return Err(SigError::TooDeep {
            offset: r.pos(),
            limit: MAX_DEPTH,
        });
    }
    let offset = r.pos();
    let et = r.u8()?;
    if let Some(name) = primitive_name(et) {
        if let Some(rd) = rend {
            rd.push(name);
        }
        return Ok(et);
    }
    match et {
        CLASS | VALUETYPE => {
            let token = r.type_def_or_ref()?;
            if let Some(rd) = rend {
                rd.push(if et == CLASS { "class " } else { "valuetype " });
                rd.names.write_type_name(token, depth + 1, rd.out)?;
            }
        }
        VAR | MVAR => {
            let n = r.compressed_u32()?;
            if let Some(rd) = rend {
                let _ = write!(rd.out, "{}{}", if et == VAR { "!" } else { "!!" }, n);
            }
        }
        PTR | BYREF | SZARRAY | PINNED | MODIFIER => {
            read_type(r, depth + 1, rend.as_deref_mut())?;
            if let Some(rd) = rend {
                rd.push(match et {
                    PTR => "*",
                    BYREF => "&",
                    SZARRAY => "[]",
                    PINNED => " pinned",
                    _ => " modifier",
                });
            }
        }
        CMOD_REQD | CMOD_OPT => {
            let token = r.type_def_or_ref()?;
            let inner = read_type(r, depth + 1, rend.as_deref_mut())?;
            if let Some(rd) = rend {
                rd.push(if et == CMOD_REQD {
                    " modreq("
                } else {
                    " modopt("
                });
                rd.names.write_type_name(token, depth + 1, rd.out)?;
                rd.push(")");
            }
            return Ok(inner);
        }
        GENERICINST => {
            let kind_offset = r.pos();
            let kind = r.u8()?;
            if kind != CLASS && kind != VALUETYPE {
                return Err(SigError::BadGenericInst {
                    offset: kind_offset,
                    byte: kind,
                });
            }
            let token = r.type_def_or_ref()?;
            if let Some(rd) = rend.as_deref_mut() {
                rd.push(if kind == CLASS {
                    "class "
                } else {
                    "valuetype "
                });
                rd.names.write_type_name(token, depth + 1, rd.out)?;
                rd.push("<");
            }
            let count = r.count(1)?;
            for i in 0..count {
                if i > 0
                    && let Some(rd) = rend.as_deref_mut()
                {
                    rd.push(",");
                }
                read_type(r, depth + 1, rend.as_deref_mut())?;
            }
            if let Some(rd) = rend {
                rd.push(">");
            }
        }
        ARRAY => {
            read_type(r, depth + 1, rend.as_deref_mut())?;
            read_array_shape(r, rend)?;
        }
        FNPTR => {
            if let Some(rd) = rend.as_deref_mut() {
                rd.push("method ");
            }
            read_method_sig(r, depth + 1, rend, Some(" *"))?;
        }
        INTERNAL => return Err(SigError::InternalElementType { offset }),
        _ => return Err(SigError::BadElementType { offset, byte: et }),
    }
    Ok(et)
}

/// ArrayShape (II.23.2.13): rank, sizes, lower bounds; rendered ilasm-style (`[0...,0...]`).
fn read_array_shape(
    r: &mut SigReader<'_>,
    rend: Option<&mut Renderer<'_>>,
) -> Result<(), SigError> {
    let rank = r.compressed_u32()?;
    let sizes_at = r.clone();
    let num_sizes = r.count(1)?;
    for _ in 0..num_sizes {
        r.compressed_u32()?;
    }
    let bounds_at = r.clone();
    let num_bounds = r.count(1)?;
    for _ in 0..num_bounds {
        r.compressed_i32()?;
    }
    let Some(rd) = rend else { return Ok(()) };
    // Everything was validated above; re-read to render without allocating.
    let (mut sizes, mut bounds) = (sizes_at, bounds_at);
    let ns = sizes.compressed_u32()?;
    let nb = bounds.compressed_u32()?;
    rd.push("[");
    for dim in 0..rank {
        if dim > 0 {
            rd.push(",");
        }
        let size = if dim < ns {
            Some(sizes.compressed_u32()?)
        } else {
            None
        };
        let low = if dim < nb {
            Some(bounds.compressed_i32()?)
        } else {
            None
        };
        let _ = match (low, size) {
            (Some(lo), Some(sz)) => {
                write!(rd.out, "{}...{}", lo, i64::from(lo) + i64::from(sz) - 1)
            }
            (Some(lo), None) => write!(rd.out, "{lo}..."),
            (None, Some(sz)) => write!(rd.out, "{sz}"),
            (None, None) => Ok(()),
        };
        if dim >= 64 {
            rd.push("...");
            break;
        }
    }
    rd.push("]");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Method signatures

/// What the verifier needs to know about a method signature (definition or call site).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct MethodSigSummary {
    /// The raw calling-convention byte.
    pub calling_convention: u8,
    /// `HASTHIS`: an instance method, called with `this`.
    pub has_this: bool,
    /// `EXPLICITTHIS`: `this` is listed (and counted) among the parameters.
    pub explicit_this: bool,
    /// The kind is `VARARG`.
    pub vararg: bool,
    /// Number of generic parameters (0 unless the GENERIC flag is set).
    pub generic_params: u32,
    /// All parameters, including any that follow the sentinel.
    pub param_count: u32,
    /// The return type is `void` (after custom modifiers), so a call pushes nothing.
    pub returns_void: bool,
    /// Number of parameters before the SENTINEL; the rest are a call site's vararg extras.
    pub sentinel_index: Option<usize>,
}

impl MethodSigSummary {
    /// Stack slots a call pops: the parameters plus `this` when present and not explicit.
    pub fn stack_args(&self) -> u64 {
        u64::from(self.param_count) + u64::from(self.has_this && !self.explicit_this)
    }
}

/// Reads a MethodDefSig / MethodRefSig / StandAloneMethodSig (II.23.2.1–3), from the calling
/// convention byte on. When `rend` is given, renders `(p1,p2,...)`, preceded by the return type
/// and `ret_sep` when `ret_sep` is given.
pub fn read_method_sig(
    r: &mut SigReader<'_>,
    depth: u32,
    mut rend: Option<&mut Renderer<'_>>,
    ret_sep: Option<&str>,
) -> Result<MethodSigSummary, SigError> {
    let offset = r.pos();
    let cc = r.u8()?;
    let kind = cc & callconv::KIND_MASK;
    if kind > callconv::VARARG && kind != callconv::UNMANAGED {
        return Err(SigError::WrongKind {
            offset,
            byte: cc,
            expected: "method signature",
        });
    }
    let generic_params = if cc & callconv::GENERIC != 0 {
        r.compressed_u32()?
    } else {
        0
    };
    let param_count = r.count(1)?;
    if let (Some(rd), Some(_)) = (rend.as_deref_mut(), ret_sep) {
        rd.calling_convention(cc);
    }
    let ret = read_type(
        r,
        depth + 1,
        if ret_sep.is_some() {
            rend.as_deref_mut()
        } else {
            None
        },
    )?;
    if let (Some(rd), Some(sep)) = (rend.as_deref_mut(), ret_sep) {
        rd.push(sep);
    }
    if let Some(rd) = rend.as_deref_mut() {
        rd.push("(");
    }
    let mut sentinel_index = None;
    let mut i = 0u32;
    while i < param_count {
        if r.peek()? == element::SENTINEL {
            let at = r.pos();
            if sentinel_index.is_some() {
                return Err(SigError::DuplicateSentinel { offset: at });
            }
            r.u8()?;
            sentinel_index = Some(i as usize);
            if let Some(rd) = rend.as_deref_mut() {
                if i > 0 {
                    rd.push(rd.separator());
                }
                rd.push("...");
            }
            continue;
        }
        if let Some(rd) = rend.as_deref_mut()
            && (i > 0 || sentinel_index.is_some())
        {
            rd.push(rd.separator());
        }
        read_type(r, depth + 1, rend.as_deref_mut())?;
        i += 1;
    }
    if let Some(rd) = rend {
        // A call site that passes no extra arguments still ends with the sentinel, which
        // ILAsm writes as a trailing `...`; only the text shows it (the parameters are counted).
        if sentinel_index.is_none() && r.peek() == Ok(element::SENTINEL) {
            if param_count > 0 {
                rd.push(rd.separator());
            }
            rd.push("...");
        }
        rd.push(")");
    }
    Ok(MethodSigSummary {
        calling_convention: cc,
        has_this: cc & callconv::HASTHIS != 0,
        explicit_this: cc & callconv::EXPLICITTHIS != 0,
        vararg: kind == callconv::VARARG,
        generic_params,
        param_count,
        returns_void: ret == element::VOID,
        sentinel_index,
    })
}

/// Summary of a whole method signature blob.
pub fn method_sig_summary(blob: &[u8]) -> Result<MethodSigSummary, SigError> {
    read_method_sig(&mut SigReader::new(blob), 0, None, None)
}

/// Local-variable signature (II.23.2.6): returns the number of locals. When `rend` is given,
/// renders the list ILAsm-style, each local named by its number: `(int32 V_0,string V_1)`.
pub fn read_local_sig(
    r: &mut SigReader<'_>,
    mut rend: Option<&mut Renderer<'_>>,
) -> Result<u32, SigError> {
    let offset = r.pos();
    let cc = r.u8()?;
    if cc != callconv::LOCAL_SIG {
        return Err(SigError::WrongKind {
            offset,
            byte: cc,
            expected: "local variable signature",
        });
    }
    let count = r.count(1)?;
    if let Some(rd) = rend.as_deref_mut() {
        rd.push("(");
    }
    for i in 0..count {
        if i > 0
            && let Some(rd) = rend.as_deref_mut()
        {
            rd.push(rd.separator());
        }
        read_type(r, 1, rend.as_deref_mut())?;
        if let Some(rd) = rend.as_deref_mut() {
            let _ = write!(rd.out, " V_{i}");
        }
    }
    if let Some(rd) = rend {
        rd.push(")");
    }
    Ok(count)
}

/// Field signature (II.23.2.4): returns the field type's element type.
pub fn read_field_sig(
    r: &mut SigReader<'_>,
    rend: Option<&mut Renderer<'_>>,
) -> Result<u8, SigError> {
    let offset = r.pos();
    let cc = r.u8()?;
    if cc & callconv::KIND_MASK != callconv::FIELD {
        return Err(SigError::WrongKind {
            offset,
            byte: cc,
            expected: "field signature",
        });
    }
    read_type(r, 1, rend)
}

/// Property signature (II.23.2.5): returns the parameter count.
pub fn read_property_sig(r: &mut SigReader<'_>) -> Result<u32, SigError> {
    let offset = r.pos();
    let cc = r.u8()?;
    if cc & callconv::KIND_MASK != callconv::PROPERTY {
        return Err(SigError::WrongKind {
            offset,
            byte: cc,
            expected: "property signature",
        });
    }
    let count = r.count(1)?;
    read_type(r, 1, None)?;
    for _ in 0..count {
        read_type(r, 1, None)?;
    }
    Ok(count)
}

/// MethodSpec instantiation (II.23.2.15): returns the number of type arguments.
pub fn read_method_spec(
    r: &mut SigReader<'_>,
    mut rend: Option<&mut Renderer<'_>>,
) -> Result<u32, SigError> {
    let offset = r.pos();
    let cc = r.u8()?;
    if cc != callconv::GENERICINST {
        return Err(SigError::WrongKind {
            offset,
            byte: cc,
            expected: "method instantiation",
        });
    }
    let count = r.count(1)?;
    if let Some(rd) = rend.as_deref_mut() {
        rd.push("<");
    }
    for i in 0..count {
        if i > 0
            && let Some(rd) = rend.as_deref_mut()
        {
            rd.push(",");
        }
        read_type(r, 1, rend.as_deref_mut())?;
    }
    if let Some(rd) = rend {
        rd.push(">");
    }
    Ok(count)
}

/// What a StandAloneSig row describes: the locals of a method body, or the target of a `calli`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum StandAloneSig {
    /// A LocalVarSig (II.23.2.6), the `LocalVarSigTok` of a fat header.
    Locals {
        /// Number of local variables.
        count: u32,
    },
    /// A StandAloneMethodSig (II.23.2.3), the operand of `calli`.
    Method(MethodSigSummary),
}

/// Parses a StandAloneSig blob by its leading byte.
pub fn standalone_sig(blob: &[u8]) -> Result<StandAloneSig, SigError> {
    let mut r = SigReader::new(blob);
    if r.peek()? == callconv::LOCAL_SIG {
        Ok(StandAloneSig::Locals {
            count: read_local_sig(&mut r, None)?,
        })
    } else {
        Ok(StandAloneSig::Method(read_method_sig(
            &mut r, 0, None, None,
        )?))
    }
}

/// Renders one type blob (as in a TypeSpec) with the given names.
pub fn render_type(
    blob: &[u8],
    names: &dyn TypeNames,
    depth: u32,
    out: &mut String,
) -> Result<(), SigError> {
    let mut rd = Renderer { out, names };
    read_type(&mut SigReader::new(blob), depth, Some(&mut rd)).map(|_| ())
}

/// Renders a method signature blob as `ret(p1,p2)`; types named by `names`.
pub fn render_method_sig(
    blob: &[u8],
    names: &dyn TypeNames,
    out: &mut String,
) -> Result<MethodSigSummary, SigError> {
    let mut rd = Renderer { out, names };
    read_method_sig(&mut SigReader::new(blob), 0, Some(&mut rd), Some(""))
}

/// Renders a method signature blob as `ret` + `middle` + `(p1,p2)`: in the ILAsm style the
/// calling convention comes first and `middle` is where a reference puts its ` Type::Name`
/// (empty for a `calli` site).
pub fn render_method_ref(
    blob: &[u8],
    names: &dyn TypeNames,
    middle: &str,
    out: &mut String,
) -> Result<MethodSigSummary, SigError> {
    let mut rd = Renderer { out, names };
    read_method_sig(&mut SigReader::new(blob), 0, Some(&mut rd), Some(middle))
}

/// Renders a field signature blob's type.
pub fn render_field_sig(
    blob: &[u8],
    names: &dyn TypeNames,
    out: &mut String,
) -> Result<(), SigError> {
    let mut rd = Renderer { out, names };
    read_field_sig(&mut SigReader::new(blob), Some(&mut rd)).map(|_| ())
}

/// Renders a local-variable signature blob as `(int32 V_0, string V_1)` (separators by style).
pub fn render_local_sig(
    blob: &[u8],
    names: &dyn TypeNames,
    out: &mut String,
) -> Result<u32, SigError> {
    let mut rd = Renderer { out, names };
    read_local_sig(&mut SigReader::new(blob), Some(&mut rd))
}

/// Renders a MethodSpec instantiation blob as `<int32,string>`.
pub fn render_method_spec(
    blob: &[u8],
    names: &dyn TypeNames,
    out: &mut String,
) -> Result<u32, SigError> {
    let mut rd = Renderer { out, names };
    read_method_spec(&mut SigReader::new(blob), Some(&mut rd))
}

/// Renders only the parameter list `(p1,p2)` of a method signature blob.
pub fn render_method_params(
    blob: &[u8],
    names: &dyn TypeNames,
    out: &mut String,
) -> Result<MethodSigSummary, SigError> {
    let mut rd = Renderer { out, names };
    read_method_sig(&mut SigReader::new(blob), 0, Some(&mut rd), None)
}

#[cfg(test)]
mod tests {
    use super::*;

    const UNSIGNED: &[(u32, &[u8])] = &[
        (0x03, &[0x03]),
        (0x7F, &[0x7F]),
        (0x80, &[0x80, 0x80]),
        (0x2E57, &[0xAE, 0x57]),
        (0x3FFF, &[0xBF, 0xFF]),
        (0x4000, &[0xC0, 0x00, 0x40, 0x00]),
        (0x1FFF_FFFF, &[0xDF, 0xFF, 0xFF, 0xFF]),
    ];

    const SIGNED: &[(i32, &[u8])] = &[
        (3, &[0x06]),
        (-3, &[0x7B]),
        (64, &[0x80, 0x80]),
        (-64, &[0x01]),
        (8192, &[0xC0, 0x00, 0x40, 0x00]),
        (-8192, &[0x80, 0x01]),
        (268_435_455, &[0xDF, 0xFF, 0xFF, 0xFE]),
        (-268_435_456, &[0xC0, 0x00, 0x00, 0x01]),
    ];

    #[test]
    fn ecma_unsigned_examples() {
        for &(v, bytes) in UNSIGNED {
            assert_eq!(decompress_u32(bytes), Ok((v, bytes.len())), "{v:#x}");
            assert_eq!(compress_u32(v).as_deref(), Some(bytes), "{v:#x}");
        }
        assert_eq!(compress_u32(0x2000_0000), None);
    }

    #[test]
    fn ecma_signed_examples() {
        for &(v, bytes) in SIGNED {
            assert_eq!(decompress_i32(bytes), Ok((v, bytes.len())), "{v}");
            assert_eq!(compress_i32(v).as_deref(), Some(bytes), "{v}");
        }
        assert_eq!(compress_i32(268_435_456), None);
        assert_eq!(compress_i32(-268_435_457), None);
    }

    #[test]
    fn signed_round_trip_at_form_edges() {
        for v in [
            -0x41, -0x40, 0x3F, 0x40, -0x2001, -0x2000, 0x1FFF, 0x2000, 0, -1, 1,
        ] {
            let enc = compress_i32(v).unwrap();
            assert_eq!(decompress_i32(&enc), Ok((v, enc.len())), "{v}");
        }
    }

    #[test]
    fn invalid_and_truncated_compressed_ints() {
        for lead in 0xE0..=0xFFu8 {
            assert_eq!(
                decompress_u32(&[lead, 0, 0, 0]),
                Err(SigError::BadCompressedInt {
                    offset: 0,
                    byte: lead
                })
            );
        }
        assert!(matches!(
            decompress_u32(&[]),
            Err(SigError::Truncated { .. })
        ));
        assert!(matches!(
            decompress_u32(&[0x80]),
            Err(SigError::Truncated { .. })
        ));
        assert!(matches!(
            decompress_u32(&[0xC0, 0, 0]),
            Err(SigError::Truncated { .. })
        ));
    }

    #[test]
    fn type_def_or_ref_tokens() {
        assert_eq!(
            decode_type_def_or_ref(0x49),
            Some(Token::new(Table::TypeRef, 0x12))
        );
        assert_eq!(
            decode_type_def_or_ref(0x08),
            Some(Token::new(Table::TypeDef, 2))
        );
        assert_eq!(
            decode_type_def_or_ref(0x0A),
            Some(Token::new(Table::TypeSpec, 2))
        );
        assert_eq!(decode_type_def_or_ref(0x0B), None);
        let mut r = SigReader::new(&[0x0B]);
        assert!(matches!(
            r.type_def_or_ref(),
            Err(SigError::BadTypeDefOrRef { .. })
        ));
    }

    fn render(blob: &[u8]) -> Result<String, SigError> {
        let mut s = String::new();
        render_type(blob, &TokenNames, 0, &mut s)?;
        Ok(s)
    }

    fn render_method(blob: &[u8]) -> Result<(String, MethodSigSummary), SigError> {
        let mut s = String::new();
        let m = render_method_sig(blob, &TokenNames, &mut s)?;
        Ok((s, m))
    }

    #[test]
    fn type_grammar_renders() {
        use element::*;
        assert_eq!(render(&[I4]).unwrap(), "int32");
        assert_eq!(render(&[SZARRAY, STRING]).unwrap(), "string[]");
        assert_eq!(render(&[BYREF, PTR, U1]).unwrap(), "uint8*&");
        assert_eq!(render(&[VAR, 0]).unwrap(), "!0");
        assert_eq!(render(&[MVAR, 1]).unwrap(), "!!1");
        assert_eq!(render(&[CLASS, 0x49]).unwrap(), "class 0x01000012");
        assert_eq!(render(&[VALUETYPE, 0x08]).unwrap(), "valuetype 0x02000002");
        assert_eq!(
            render(&[GENERICINST, CLASS, 0x05, 2, I4, OBJECT]).unwrap(),
            "class 0x01000001<int32,object>"
        );
        assert_eq!(
            render(&[CMOD_OPT, 0x05, I4]).unwrap(),
            "int32 modopt(0x01000001)"
        );
        assert_eq!(render(&[PINNED, BYREF, CHAR]).unwrap(), "char& pinned");
        assert_eq!(render(&[TYPEDBYREF]).unwrap(), "typedref");
    }

    #[test]
    fn array_shapes() {
        use element::*;
        // int32[0...,0...]: rank 2, no sizes, two zero lower bounds.
        assert_eq!(
            render(&[ARRAY, I4, 2, 0, 2, 0, 0]).unwrap(),
            "int32[0...,0...]"
        );
        // rank 2, sizes 3 and 4, lower bounds -2 and 1.
        assert_eq!(
            render(&[ARRAY, I4, 2, 2, 3, 4, 2, 0x7D, 0x02]).unwrap(),
            "int32[-2...0,1...4]"
        );
        // rank 3, no sizes and bounds.
        assert_eq!(render(&[ARRAY, OBJECT, 3, 0, 0]).unwrap(), "object[,,]");
        // truncated shape
        assert!(render(&[ARRAY, I4, 2, 2, 3]).is_err());
        // hostile count: claims many sizes but bytes end
        assert!(matches!(
            render(&[ARRAY, I4, 2, 0x9F, 0xFF]),
            Err(SigError::CountTooLarge { .. })
        ));
    }

    #[test]
    fn method_sigs() {
        use element::*;
        // instance void (int32, string)
        let (s, m) = render_method(&[0x20, 2, VOID, I4, STRING]).unwrap();
        assert_eq!(s, "void(int32,string)");
        assert!(m.has_this && !m.explicit_this && m.returns_void && !m.vararg);
        assert_eq!(
            (m.param_count, m.generic_params, m.sentinel_index),
            (2, 0, None)
        );
        assert_eq!(m.stack_args(), 3);

        // generic static !!0 <1>(!!0)
        let (s, m) = render_method(&[0x10, 1, 1, MVAR, 0, MVAR, 0]).unwrap();
        assert_eq!(s, "!!0(!!0)");
        assert_eq!(
            (m.generic_params, m.param_count, m.returns_void),
            (1, 1, false)
        );

        // vararg call site: int32(string, ..., int32, float64)
        let (s, m) = render_method(&[0x05, 3, I4, STRING, SENTINEL, I4, R8]).unwrap();
        assert_eq!(s, "int32(string,...,int32,float64)");
        assert!(m.vararg);
        assert_eq!((m.param_count, m.sentinel_index), (3, Some(1)));

        // Return type behind a modifier still counts as void.
        let m = method_sig_summary(&[0x00, 0, CMOD_REQD, 0x05, VOID]).unwrap();
        assert!(m.returns_void);

        assert!(matches!(
            method_sig_summary(&[0x05, 2, VOID, SENTINEL, SENTINEL, I4, I4]),
            Err(SigError::DuplicateSentinel { .. })
        ));
        assert!(matches!(
            method_sig_summary(&[0x06, I4]),
            Err(SigError::WrongKind { .. })
        ));
    }

    /// Token names in hex, the signature around them ILAsm-style.
    struct IlasmTokenNames;

    impl TypeNames for IlasmTokenNames {
        fn write_type_name(&self, token: Token, d: u32, out: &mut String) -> Result<(), SigError> {
            TokenNames.write_type_name(token, d, out)
        }
        fn style(&self) -> Style {
            Style::Ilasm
        }
    }

    #[test]
    fn ilasm_style() {
        use element::*;
        let ilasm = |blob: &[u8], middle: &str| {
            let mut s = String::new();
            render_method_ref(blob, &IlasmTokenNames, middle, &mut s).map(|_| s)
        };
        assert_eq!(
            ilasm(&[0x20, 2, VOID, I4, STRING], " C::M").unwrap(),
            "instance void C::M(int32, string)"
        );
        assert_eq!(
            ilasm(&[0x60, 1, VOID, OBJECT], "").unwrap(),
            "instance explicit void(object)"
        );
        assert_eq!(
            ilasm(&[0x01, 1, I4, I4], "").unwrap(),
            "unmanaged cdecl int32(int32)"
        );
        assert_eq!(
            ilasm(&[0x05, 3, I4, STRING, SENTINEL, I4, R8], " V").unwrap(),
            "vararg int32 V(string, ..., int32, float64)"
        );
        // A vararg call site passing no extra argument ends with the sentinel: shown, not
        // counted.
        assert_eq!(
            ilasm(&[0x05, 1, I4, STRING, SENTINEL], " V").unwrap(),
            "vararg int32 V(string, ...)"
        );
        assert_eq!(
            method_sig_summary(&[0x05, 1, I4, STRING, SENTINEL])
                .unwrap()
                .sentinel_index,
            None
        );
        // Generic arguments keep the compact separator, as ildasm prints them.
        assert_eq!(
            ilasm(
                &[0x00, 1, VOID, GENERICINST, CLASS, 0x05, 2, I4, OBJECT],
                ""
            )
            .unwrap(),
            "void(class 0x01000001<int32,object>)"
        );
        // Function pointers carry their own calling convention.
        assert_eq!(
            ilasm(&[0x00, 1, VOID, FNPTR, 0x20, 0, I4], "").unwrap(),
            "void(method instance int32 *())"
        );
        let mut s = String::new();
        render_local_sig(&[0x07, 2, I4, SZARRAY, STRING], &IlasmTokenNames, &mut s).unwrap();
        assert_eq!(s, "(int32 V_0, string[] V_1)");
        s.clear();
        render_local_sig(&[0x07, 2, I4, SZARRAY, STRING], &TokenNames, &mut s).unwrap();
        assert_eq!(s, "(int32 V_0,string[] V_1)");
        s.clear();
        render_method_spec(&[0x0A, 2, I4, OBJECT], &IlasmTokenNames, &mut s).unwrap();
        assert_eq!(s, "<int32,object>");
        // The compact style of full names is as it was.
        let (s, _) = render_method(&[0x20, 2, VOID, I4, STRING]).unwrap();
        assert_eq!(s, "void(int32,string)");
    }

    #[test]
    fn nested_fnptr() {
        use element::*;
        // void (method int32 *(method void *(string)))
        let blob = [
            0x00, 1, VOID, FNPTR, 0x00, 1, I4, FNPTR, 0x00, 1, VOID, STRING,
        ];
        let (s, m) = render_method(&blob).unwrap();
        assert_eq!(s, "void(method int32 *(method void *(string)))");
        assert_eq!(m.param_count, 1);
    }

    #[test]
    fn local_field_spec_property() {
        use element::*;
        let locals = [
            0x07, 3, PINNED, BYREF, I4, TYPEDBYREF, CMOD_OPT, 0x05, SZARRAY, OBJECT,
        ];
        assert_eq!(
            standalone_sig(&locals),
            Ok(StandAloneSig::Locals { count: 3 })
        );
        assert!(matches!(
            standalone_sig(&[0x07, 4, I4]),
            Err(SigError::CountTooLarge { .. })
        ));
        assert!(matches!(
            standalone_sig(&[0x07, 2, I4, SZARRAY]),
            Err(SigError::Truncated { .. })
        ));
        let calli = [0x00, 1, I4, I8];
        assert!(
            matches!(standalone_sig(&calli), Ok(StandAloneSig::Method(m)) if m.param_count == 1)
        );
        assert_eq!(
            read_field_sig(&mut SigReader::new(&[0x06, STRING]), None),
            Ok(STRING)
        );
        assert_eq!(
            read_method_spec(&mut SigReader::new(&[0x0A, 2, I4, OBJECT]), None),
            Ok(2)
        );
        assert_eq!(
            read_property_sig(&mut SigReader::new(&[0x28, 1, I4, STRING])),
            Ok(1)
        );
    }

    #[test]
    fn hostile_inputs_error() {
        use element::*;
        // Deep nesting: a long run of SZARRAY.
        let deep = vec![SZARRAY; 10_000];
        assert!(matches!(render(&deep), Err(SigError::TooDeep { .. })));
        // Deep FNPTR nesting.
        let mut fn_deep = Vec::new();
        for _ in 0..1000 {
            fn_deep.extend_from_slice(&[FNPTR, 0x00, 0]);
        }
        assert!(matches!(render(&fn_deep), Err(SigError::TooDeep { .. })));
        // Deep generic instantiation.
        let mut gdeep = Vec::new();
        for _ in 0..1000 {
            gdeep.extend_from_slice(&[GENERICINST, CLASS, 0x05, 1]);
        }
        assert!(render(&gdeep).is_err());
        assert!(matches!(
            render(&[0x17]),
            Err(SigError::BadElementType { .. })
        ));
        assert!(matches!(
            render(&[INTERNAL, 0, 0, 0, 0]),
            Err(SigError::InternalElementType { .. })
        ));
        assert!(matches!(
            render(&[GENERICINST, I4]),
            Err(SigError::BadGenericInst { .. })
        ));
        // Huge parameter count against a short blob.
        assert!(matches!(
            method_sig_summary(&[0x00, 0xDF, 0xFF, 0xFF, 0xFF, VOID]),
            Err(SigError::CountTooLarge { .. })
        ));
        // Every truncation of a valid signature errors, never panics.
        let full = [
            0x30,
            1,
            2,
            GENERICINST,
            CLASS,
            0x05,
            1,
            MVAR,
            0,
            ARRAY,
            I4,
            2,
            1,
            3,
            1,
            0x7B,
            BYREF,
            I4,
        ];
        assert!(method_sig_summary(&full).is_ok());
        for cut in 0..full.len() {
            assert!(method_sig_summary(&full[..cut]).is_err(), "cut {cut}");
            let mut s = String::new();
            assert!(render_method_sig(&full[..cut], &TokenNames, &mut s).is_err());
        }
    }

    #[test]
    fn exhaustive_short_blobs_never_panic() {
        let mut s = String::new();
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                for blob in [[a, b, 0x1D, 0x14], [0x00, a, b, 0x41]] {
                    let _ = method_sig_summary(&blob);
                    let _ = standalone_sig(&blob);
                    s.clear();
                    let _ = render_type(&blob, &TokenNames, 0, &mut s);
                }
            }
        }
    }
}
