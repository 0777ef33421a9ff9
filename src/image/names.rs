//! Names as ILAsm spells them: identifiers quoted where ILAsm needs quotes, and the
//! [`TypeNames`] of an image that signatures are rendered with (full method names in the
//! compact style, disassembly operands in the ILAsm style).

use std::cell::RefCell;
use std::fmt::Write as _;
use std::sync::OnceLock;

use super::sig::{self, SigError, Style, TypeNames};
use super::tables::Table;
use super::tables::Token;
use super::{Image, ImageError};

/// ILAsm's keywords that a metadata name can collide with (lower-case words of the grammar,
/// II.C and ilasm's keyword table); the opcode names without a dot are keywords too.
const KEYWORDS: &[&str] = &[
    "abstract",
    "aggressiveinlining",
    "algorithm",
    "alignment",
    "ansi",
    "any",
    "arglist",
    "array",
    "as",
    "assembly",
    "assert",
    "at",
    "auto",
    "autochar",
    "beforefieldinit",
    "blob",
    "blob_object",
    "bool",
    "bstr",
    "bytearray",
    "byvalstr",
    "callconv",
    "callmostderived",
    "carray",
    "catch",
    "cdecl",
    "cf",
    "char",
    "cil",
    "class",
    "clsid",
    "compilercontrolled",
    "currency",
    "custom",
    "date",
    "decimal",
    "default",
    "demand",
    "deny",
    "error",
    "explicit",
    "extends",
    "extern",
    "false",
    "famandassem",
    "family",
    "famorassem",
    "fastcall",
    "fault",
    "field",
    "filetime",
    "filter",
    "final",
    "finally",
    "fixed",
    "flags",
    "float",
    "float32",
    "float64",
    "forwardref",
    "fromunmanaged",
    "handler",
    "hidebysig",
    "hresult",
    "idispatch",
    "il",
    "illegal",
    "implements",
    "implicitcom",
    "implicitres",
    "import",
    "in",
    "inheritcheck",
    "init",
    "initonly",
    "instance",
    "int",
    "int16",
    "int32",
    "int64",
    "int8",
    "interface",
    "internalcall",
    "iunknown",
    "lasterr",
    "lcid",
    "linkcheck",
    "literal",
    "lpstr",
    "lpstruct",
    "lptstr",
    "lpvoid",
    "lpwstr",
    "managed",
    "marshal",
    "mdtoken",
    "method",
    "modopt",
    "modreq",
    "native",
    "nested",
    "newslot",
    "noappdomain",
    "noinlining",
    "nomachine",
    "nomangle",
    "nometadata",
    "noncasdemand",
    "noncasinheritance",
    "noncaslinkdemand",
    "nooptimization",
    "noprocess",
    "not",
    "not_in_gc_heap",
    "notremotable",
    "notserialized",
    "null",
    "nullref",
    "object",
    "objectref",
    "opt",
    "optil",
    "out",
    "permitonly",
    "pinned",
    "pinvokeimpl",
    "prejitdeny",
    "prejitgrant",
    "preservesig",
    "private",
    "privatescope",
    "public",
    "record",
    "reqmin",
    "reqopt",
    "reqrefuse",
    "reqsecobj",
    "request",
    "retval",
    "rtspecialname",
    "runtime",
    "safearray",
    "sealed",
    "sequential",
    "serializable",
    "specialname",
    "static",
    "stdcall",
    "storage",
    "stored_object",
    "stream",
    "streamed_object",
    "strict",
    "string",
    "struct",
    "synchronized",
    "syschar",
    "sysstring",
    "tbstr",
    "thiscall",
    "tls",
    "to",
    "true",
    "type",
    "typedref",
    "unicode",
    "unmanaged",
    "unmanagedexp",
    "unsigned",
    "unused",
    "userdefined",
    "value",
    "valuetype",
    "vararg",
    "variant",
    "vector",
    "virtual",
    "void",
    "wchar",
    "winapi",
    "with",
    "wrapper",
];

/// The keywords and the dot-free opcode names, sorted for a binary search.
fn keywords() -> &'static [&'static str] {
    static SORTED: OnceLock<Vec<&'static str>> = OnceLock::new();
    SORTED.get_or_init(|| {
        let opcodes = crate::opcode::ALL
            .iter()
            .map(|op| op.name)
            .filter(|n| !n.contains('.'));
        let mut all: Vec<&'static str> = KEYWORDS.iter().copied().chain(opcodes).collect();
        all.sort_unstable();
        all.dedup();
        all
    })
}

/// Whether one dot-free part of a name is an ILAsm identifier as it stands.
fn is_plain_id(part: &str) -> bool {
    let mut chars = part.chars();
    let Some(first) = chars.next() else {
        return false;
    };
    (first.is_ascii_alphabetic() || matches!(first, '_' | '$' | '@'))
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '$' | '@' | '?' | '`'))
        // Every keyword starts with a lower-case letter; most names do not.
        && !(first.is_ascii_lowercase() && keywords().binary_search(&part).is_ok())
}

/// Whether ILAsm needs `name` in single quotes: it is empty, or some dot-separated part of it
/// is not an identifier (`<Main>b__0`, `$ArrayType=12`, `1st`) or is a keyword (`value`,
/// `add`). `.ctor` and `.cctor` are written as they are.
pub fn needs_quotes(name: &str) -> bool {
    if name == ".ctor" || name == ".cctor" {
        return false;
    }
    name.split('.').any(|part| !is_plain_id(part))
}

/// Appends `name` as ILAsm spells it: as it is, or in single quotes with `'` and `\` escaped.
pub fn write_ilasm_name(out: &mut String, name: &str) {
    if !needs_quotes(name) {
        out.push_str(name);
        return;
    }
    out.push('\'');
    for c in name.chars() {
        if matches!(c, '\'' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('\'');
}

/// Longest text a signature's types may add up to. A TypeSpec may name other TypeSpecs, so a
/// hostile blob could spell a name exponentially long in its own length; past this many bytes
/// the rest is written as tokens and the render counts as failed.
pub const MAX_NAME_LEN: usize = 64 * 1024;

/// Why a type met in a signature could not be named (see [`SigNames::failure`]).
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NameFailure {
    /// The text grew past [`MAX_NAME_LEN`] bytes.
    #[error("names longer than {limit} bytes")]
    TooLong {
        /// The limit.
        limit: usize,
    },
    /// The type's rows or signature could not be read.
    #[error("type {token}: {error}")]
    Unreadable {
        /// The type's token.
        token: Token,
        /// Why (shared: a failure is kept and handed out more than once).
        error: std::sync::Arc<ImageError>,
    },
}

/// Names the types met in a signature through an image's tables.
///
/// A type that cannot be named is written as its token in hex, and the first such failure is
/// kept ([`SigNames::failure`]): full method names live with it, a disassembler prints the
/// raw token and the reason instead. The names of TypeDefs and TypeRefs are remembered, so a
/// `SigNames` kept across many renders (as a disassembler keeps one) reads each type's rows
/// once; at most one entry per row of those tables is kept.
pub struct SigNames<'i> {
    image: &'i Image<'i>,
    style: Style,
    failure: RefCell<Option<NameFailure>>,
    known: RefCell<KnownNames>,
}

/// The names a [`SigNames`] remembers, by TypeDef or TypeRef token: kept by a caller that makes
/// one `SigNames` per render ([`SigNames::remembering`], [`SigNames::into_known`]).
pub type KnownNames = crate::verify::types::fx::FxMap<u32, Box<str>>;

impl<'i> SigNames<'i> {
    /// Names from `image`, spelled in `style`.
    pub fn new(image: &'i Image<'i>, style: Style) -> Self {
        SigNames {
            image,
            style,
            failure: RefCell::new(None),
            known: RefCell::new(KnownNames::default()),
        }
    }

    /// [`SigNames::new`], starting from the names an earlier one of the same image remembered.
    pub fn remembering(image: &'i Image<'i>, style: Style, known: KnownNames) -> Self {
        SigNames {
            image,
            style,
            failure: RefCell::new(None),
            known: RefCell::new(known),
        }
    }

    /// The names remembered, for [`SigNames::remembering`].
    pub fn into_known(self) -> KnownNames {
        self.known.into_inner()
    }

    /// Why the first type that could not be named could not be, if one could not.
    pub fn failure(&self) -> Option<NameFailure> {
        self.failure.borrow().clone()
    }

    /// [`SigNames::failure`], forgotten: the next render starts clean.
    pub fn take_failure(&self) -> Option<NameFailure> {
        self.failure.borrow_mut().take()
    }

    /// Appends the name of a TypeDef, TypeRef or TypeSpec token (in ILAsm's style, as
    /// [`Image::write_type_name_ilasm`] describes, or the compact one). `Err` when it, or a
    /// type its signature names, cannot be read; then `out` is left as it was.
    pub fn write_type(&self, token: Token, out: &mut String) -> Result<(), ImageError> {
        self.take_failure();
        let before = out.len();
        let result = if self.recall(token, out) {
            Ok(())
        } else {
            self.image
                .type_name_at_depth(token, 0, self.style, self, out)
                .map(|()| self.remember(token, &out[before..]))
        };
        let result = result.and_then(|()| match self.take_failure() {
            None => Ok(()),
            Some(reason) => Err(ImageError::BadTypeName { token, reason }),
        });
        if result.is_err() {
            out.truncate(before);
        }
        result
    }

    /// Appends the remembered name of `token`, if there is one.
    fn recall(&self, token: Token, out: &mut String) -> bool {
        match self.known.borrow().get(&token.0) {
            Some(name) => {
                out.push_str(name);
                true
            }
            None => false,
        }
    }

    /// Remembers the name of a TypeDef or TypeRef (a TypeSpec is rendered each time: its
    /// text depends on how deep it is met).
    fn remember(&self, token: Token, name: &str) {
        if matches!(token.table(), Some(Table::TypeDef | Table::TypeRef)) {
            self.known.borrow_mut().insert(token.0, name.into());
        }
    }
}

impl TypeNames for SigNames<'_> {
    fn write_type_name(&self, token: Token, depth: u32, out: &mut String) -> Result<(), SigError> {
        if depth >= sig::MAX_DEPTH {
            return Err(SigError::TooDeep {
                offset: 0,
                limit: sig::MAX_DEPTH,
            });
        }
        let before = out.len();
        if before <= MAX_NAME_LEN && self.recall(token, out) {
            return Ok(());
        }
        let result = if before > MAX_NAME_LEN {
            Err(NameFailure::TooLong {
                limit: MAX_NAME_LEN,
            })
        } else {
            self.image
                .type_name_at_depth(token, depth, self.style, self, out)
                .map_err(|e| NameFailure::Unreadable {
                    token,
                    error: std::sync::Arc::new(e),
                })
        };
        match result {
            Ok(()) => self.remember(token, &out[before..]),
            Err(why) => {
                // A dangling or malformed token still renders, as its hex value; the caller
                // learns of it through `failure`.
                out.truncate(before);
                let _ = write!(out, "{token}");
                self.failure.borrow_mut().get_or_insert(why);
            }
        }
        Ok(())
    }

    fn style(&self) -> Style {
        self.style
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quoted(name: &str) -> String {
        let mut s = String::new();
        write_ilasm_name(&mut s, name);
        s
    }

    #[test]
    fn quotes_only_where_ilasm_needs_them() {
        for plain in [
            ".ctor",
            ".cctor",
            "Main",
            "System.Collections.Generic",
            "List`1",
            "$builder",
            "get_Item",
            "System.Collections.IEnumerable.GetEnumerator",
            "_x1",
            "Value",
        ] {
            assert_eq!(quoted(plain), plain);
        }
        for (name, text) in [
            ("<Fib>c__Iterator0", "'<Fib>c__Iterator0'"),
            ("$ArrayType=12", "'$ArrayType=12'"),
            ("value", "'value'"),
            ("add", "'add'"),
            ("Ns.add", "'Ns.add'"),
            ("1st", "'1st'"),
            ("", "''"),
            ("a..b", "'a..b'"),
            ("it's\\", "'it\\'s\\\\'"),
            ("café", "'café'"),
        ] {
            assert_eq!(quoted(name), text, "{name}");
        }
    }
}

#[cfg(test)]
mod hostile {
    use super::*;
    use crate::image::sig::decompress_u32;

    /// features.exe with one TypeSpec's blob rewritten to `G<self, self>`: a name that would
    /// double at every level, 2^30 and more type names written without a bound.
    fn self_doubling() -> (Vec<u8>, Token) {
        let (_, bytes) = crate::corpus::EMBEDDED
            .iter()
            .find(|(n, _)| n.ends_with("features.exe"))
            .unwrap();
        let image = Image::parse(bytes).unwrap();
        let t = image.tables();
        let rid = (1..32)
            .find(|&r| {
                t.type_spec(r)
                    .is_ok_and(|row| image.blobs().get(row.signature).is_ok_and(|b| b.len() >= 8))
            })
            .expect("a TypeSpec with a blob of 8 bytes or more");
        let index = t.type_spec(rid).unwrap().signature;
        let at = image.blobs().content_offset(index);
        let me = ((rid << 2) | 2) as u8;
        let mut patched = bytes.to_vec();
        // GENERICINST CLASS TypeRef(1) <2> CLASS self CLASS self
        patched[at..at + 8].copy_from_slice(&[0x15, 0x12, 0x05, 0x02, 0x12, me, 0x12, me]);
        assert_eq!(decompress_u32(&[me]).unwrap().0 >> 2, rid);
        (patched, Token::new(Table::TypeSpec, rid))
    }

    #[test]
    fn a_self_doubling_type_spec_is_cut_short() {
        let (bytes, token) = self_doubling();
        let image = Image::parse(&bytes).unwrap();
        let start = std::time::Instant::now();
        let mut compact = String::new();
        image.write_type_name(token, &mut compact).unwrap();
        assert!(compact.len() <= MAX_NAME_LEN + 4096, "{}", compact.len());
        let mut ilasm = String::new();
        let e = image.write_type_name_ilasm(token, &mut ilasm).unwrap_err();
        assert!(ilasm.is_empty());
        // The first failure met: the leftmost path is too deep before the text is too long.
        assert!(matches!(&e, ImageError::BadTypeName { .. }), "{e}");
        assert!(start.elapsed().as_secs() < 5, "{:?}", start.elapsed());
    }
}
