//! What transforms need to know from an image, read from its metadata: the exception type a
//! `wrap-catch` handler catches, a local that can hold a wrapped method's return value, and the
//! `call` snippets of `--prologue-call` / `--epilogue-call`.

use crate::image::{Image, Table, Token};
use crate::ir::Instr;
use crate::opcode::Opcode;

/// The TypeRef or TypeDef token of `System.Exception` in the image, for `wrap-catch` when no
/// catch type is given.
pub fn find_exception_type(image: &Image<'_>) -> Option<u32> {
    let tables = image.tables();
    let strings = image.strings();
    for table in [Table::TypeRef, Table::TypeDef] {
        for rid in 1..=image.tables_header().rows(table) {
            let names = match table {
                Table::TypeRef => tables.type_ref(rid).ok().map(|r| (r.name, r.namespace)),
                _ => tables.type_def(rid).ok().map(|r| (r.name, r.namespace)),
            };
            let Some((name, namespace)) = names else {
                continue;
            };
            if strings.get(name).ok() == Some("Exception")
                && strings.get(namespace).ok() == Some("System")
            {
                return Some(Token::new(table, rid).0);
            }
        }
    }
    None
}

/// The byte range of each local of a local-variable signature blob (II.23.2.6).
fn local_types(blob: &[u8]) -> Option<Vec<std::ops::Range<usize>>> {
    use crate::image::sig::{SigReader, read_type};
    let mut r = SigReader::new(blob);
    if r.u8().ok()? != crate::image::sig::callconv::LOCAL_SIG {
        return None;
    }
    let count = r.compressed_u32().ok()?;
    // Each type takes at least a byte: a count beyond the bytes left is malformed.
    if count as usize > r.remaining() {
        return None;
    }
    let mut out = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let start = r.pos();
        read_type(&mut r, 1, None).ok()?;
        out.push(start..r.pos());
    }
    Some(out)
}

/// A local that can hold a non-void method's return value while `wrap-*` moves its `ret`s out
/// of the new try: one declared with exactly the return type's encoding and never used by the
/// body.
pub fn spare_return_local(
    image: &Image<'_>,
    method: &crate::image::Method<'_>,
    body: &crate::body::Body<'_>,
) -> Option<u16> {
    let want = return_value_bytes(method)?;
    let local_token = Token(body.local_sig());
    if local_token.table() != Some(Table::StandAloneSig) {
        return None;
    }
    let index = image
        .tables()
        .standalone_sig(local_token.rid())
        .ok()?
        .signature;
    let local_blob = image.blobs().get(index).ok()?;
    let locals = local_types(local_blob)?;
    // The body is read only when some local has the type: most have none.
    if !locals
        .iter()
        .any(|range| &local_blob[range.clone()] == want)
    {
        return None;
    }
    let mut used = vec![false; locals.len()];
    for instr in body.instructions() {
        let instr = instr.ok()?;
        let op = instr.opcode;
        if !matches!(
            op.general_form(),
            Opcode::Ldloc | Opcode::Ldloca | Opcode::Stloc
        ) {
            continue;
        }
        let index = match (op.implied_operand(), instr.var()) {
            (Some(implied), _) => implied as usize,
            (None, Some(v)) => usize::from(v),
            (None, None) => continue,
        };
        if let Some(u) = used.get_mut(index) {
            *u = true;
        }
    }
    locals
        .iter()
        .enumerate()
        .find(|(i, range)| !used[*i] && &local_blob[(*range).clone()] == want)
        .and_then(|(i, _)| u16::try_from(i).ok())
}

/// A `call TOKEN` snippet (for `--prologue-call` / `--epilogue-call`).
pub fn call_snippet(token: u32) -> Vec<Instr> {
    vec![Instr::new(Opcode::Call, crate::ir::Operand::Token(token))]
}

/// The bytes of a method signature's return type (custom modifiers included), when the blob
/// parses that far ([`crate::image::sig::return_type_of`]).
pub fn return_type_bytes(method_sig: &[u8]) -> Option<&[u8]> {
    crate::image::sig::return_type_of(method_sig)
}

/// The type a method's `ret` returns, as signatures encode it ([`crate::image::sig::returned_type`]:
/// for a runtime-async method, what its task completes with).
pub fn return_value_bytes<'i>(method: &crate::image::Method<'i>) -> Option<&'i [u8]> {
    crate::image::sig::returned_type(method.signature_blob().ok()?, method.impl_flags())
}

/// A local-variable signature (II.23.2.6) with the locals of `locals` (a LocalVarSig blob, or
/// `None` for a method without locals) and one more of type `ty` (a Type as signatures encode
/// it): the new blob and the new local's index. `None` when `locals` does not parse or already
/// has the most locals an index can name.
pub fn locals_plus_one(locals: Option<&[u8]>, ty: &[u8]) -> Option<(Vec<u8>, u16)> {
    const LOCAL_SIG: u8 = 0x07;
    let (count, rest) = match locals {
        None => (0, &[][..]),
        Some(blob) => {
            let (&cc, tail) = blob.split_first()?;
            if cc != LOCAL_SIG {
                return None;
            }
            let (count, used) = crate::image::sig::decompress_u32(tail).ok()?;
            // The whole blob must parse: the new local goes after the last one.
            local_types(blob)?;
            (count, &tail[used..])
        }
    };
    // ldloc/stloc take a 16-bit index; 0xFFFF is reserved (III.3.43).
    let index = u16::try_from(count).ok().filter(|&i| i < 0xFFFE)?;
    let mut out = vec![LOCAL_SIG];
    out.extend(crate::image::sig::compress_u32(count + 1)?);
    out.extend_from_slice(rest);
    out.extend_from_slice(ty);
    Some((out, index))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_local_is_appended_to_a_signature_or_made_the_first() {
        // int32 M(string): default, 1 parameter, returns int32.
        let sig = [0x00, 0x01, 0x08, 0x0E];
        assert_eq!(return_type_bytes(&sig), Some(&[0x08][..]));
        // Generic method returning !!0.
        assert_eq!(
            return_type_bytes(&[0x10, 0x01, 0x00, 0x1E, 0x00]),
            Some(&[0x1E, 0x00][..])
        );
        assert_eq!(
            locals_plus_one(None, &[0x08]),
            Some((vec![0x07, 0x01, 0x08], 0))
        );
        // Two locals (string, object) plus int32.
        assert_eq!(
            locals_plus_one(Some(&[0x07, 0x02, 0x0E, 0x1C]), &[0x08]),
            Some((vec![0x07, 0x03, 0x0E, 0x1C, 0x08], 2))
        );
        // 127 locals become 128: the count takes two bytes.
        let mut many = vec![0x07, 0x7F];
        many.extend(std::iter::repeat_n(0x08, 127));
        let (blob, index) = locals_plus_one(Some(&many), &[0x0E]).unwrap();
        assert_eq!(index, 127);
        assert_eq!(&blob[..3], &[0x07, 0x80, 0x80]);
        assert_eq!(blob.len(), many.len() + 2);
        // Not a local signature, or one cut short.
        assert_eq!(locals_plus_one(Some(&[0x06, 0x08]), &[0x08]), None);
        assert_eq!(locals_plus_one(Some(&[0x07, 0x02, 0x08]), &[0x08]), None);
    }
}

/// Why a raw token cannot be the method a [`call_snippet`] calls ([`check_call_token`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CallTokenError {
    /// The token is not of a table that names a method to `call` directly.
    #[error(
        "{token} is {what}; give the MethodDef (0x06…) or MemberRef (0x0a…) token of {REQUIRED}"
    )]
    NotAMethod {
        /// The token.
        token: Token,
        /// What it is, e.g. `a Field token, not a method`.
        what: String,
    },
    /// The assembly has no such row.
    #[error(
        "{token}: no such row (the assembly has {rows} {table:?} rows); give the token of \
         {REQUIRED}"
    )]
    NoRow {
        /// The token.
        token: Token,
        /// Its table.
        table: Table,
        /// The rows the table has.
        rows: u32,
    },
    /// The row does not read, or its signature does not parse.
    #[error("{token}: {reason}")]
    Unreadable {
        /// The token.
        token: Token,
        /// What did not read.
        reason: String,
    },
    /// A method the call cannot be made to as it stands.
    #[error("{token} ({name}) {why}; a call at entry or exit takes {REQUIRED}")]
    Unusable {
        /// The token.
        token: Token,
        /// The method as ildasm names it.
        name: String,
        /// What is wrong, e.g. `takes 1 parameter`.
        why: String,
    },
}

/// What a raw-token call accepts, for messages.
const REQUIRED: &str = "a static method returning void with no parameters";

/// Checks that `token` names a method of `image` that [`call_snippet`] can call at any
/// method's entry and before its returns: a MethodDef or a method's MemberRef, a row the
/// image has, static, not generic, of the managed default calling convention, with no
/// parameters, returning void (the call must leave the stack as it found it, where a return
/// value may be on it), and not a type initializer. Anything else would make every rewrite of
/// the assembly invalid (or, for a type initializer, run it again on every call).
pub fn check_call_token(image: &Image<'_>, token: u32) -> Result<(), CallTokenError> {
    use crate::disasm::{ImageNamer, TokenNamer};
    use crate::image::sig::{callconv, method_sig_summary};
    const STATIC: u16 = 0x0010;
    let token = Token(token);
    let table = match token.table() {
        Some(t @ (Table::MethodDef | Table::MemberRef)) => t,
        Some(Table::MethodSpec) => {
            return Err(CallTokenError::NotAMethod {
                token,
                what: "a MethodSpec token (a generic method instantiated), and the call takes \
                       no generic method"
                    .to_string(),
            });
        }
        Some(other) => {
            return Err(CallTokenError::NotAMethod {
                token,
                what: format!("a {other:?} token, not a method"),
            });
        }
        None => {
            return Err(CallTokenError::NotAMethod {
                token,
                what: match token.table_byte() {
                    0x70 => "a user-string (#US) token, not a method".to_string(),
                    b => format!("not a metadata token (there is no table {b:#04x})"),
                },
            });
        }
    };
    let rows = image.tables_header().rows(table);
    if token.rid() == 0 || token.rid() > rows {
        return Err(CallTokenError::NoRow { token, table, rows });
    }
    let unreadable = |reason: String| CallTokenError::Unreadable { token, reason };
    let tables = image.tables();
    let (name, signature, flags) = match table {
        Table::MethodDef => {
            let row = tables
                .method_def(token.rid())
                .map_err(|e| unreadable(e.to_string()))?;
            (row.name, row.signature, Some(row.flags))
        }
        _ => {
            let row = tables
                .member_ref(token.rid())
                .map_err(|e| unreadable(e.to_string()))?;
            (row.name, row.signature, None)
        }
    };
    let blob = image
        .blobs()
        .get(signature)
        .map_err(|e| unreadable(format!("its signature does not read: {e}")))?;
    if blob
        .first()
        .is_some_and(|cc| cc & callconv::KIND_MASK == callconv::FIELD)
    {
        return Err(CallTokenError::NotAMethod {
            token,
            what: "a MemberRef of a field, not of a method".to_string(),
        });
    }
    let sig = method_sig_summary(blob)
        .map_err(|e| unreadable(format!("its signature does not parse: {e}")))?;
    let name_text = image.strings().get(name).unwrap_or("");
    let why = if sig.has_this || flags.is_some_and(|f| f & STATIC == 0) {
        Some("is an instance method".to_string())
    } else if sig.generic_params > 0 {
        Some("is generic (a call needs its MethodSpec, and gives no type arguments)".to_string())
    } else if sig.calling_convention & callconv::KIND_MASK != callconv::DEFAULT {
        Some("is not of the managed default calling convention".to_string())
    } else if sig.param_count > 0 {
        let s = if sig.param_count == 1 { "" } else { "s" };
        Some(format!("takes {} parameter{s}", sig.param_count))
    } else if !sig.returns_void {
        Some("returns a value".to_string())
    } else if name_text == ".cctor" {
        Some("is a type initializer, which the runtime runs once".to_string())
    } else {
        None
    };
    let Some(why) = why else {
        return Ok(());
    };
    let mut name = String::new();
    if ImageNamer::new(image)
        .write_token(crate::opcode::OperandKind::Method, token.0, &mut name)
        .is_err()
    {
        name = name_text.to_string();
    }
    Err(CallTokenError::Unusable { token, name, why })
}
