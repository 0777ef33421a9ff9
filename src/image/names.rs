//! Names as ILAsm spells them: identifiers quoted where ILAsm needs quotes, and the
//! [`TypeNames`] of an image that signatures are rendered with (full method names in the
//! compact style, disassembly operands in the ILAsm style).

use std::cell::RefCell;
use std::fmt::Write as _;
use std::sync::OnceLock;

use super::Image;
use super::sig::{self, SigError, Style, TypeNames};
use super::tables::Token;

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

/// Names the types met in a signature through an image's tables.
///
/// A type that cannot be named is written as its token in hex, and the first such failure is
/// kept ([`SigNames::failure`]): full method names live with it, a disassembler prints the
/// raw token and the reason instead.
pub struct SigNames<'i> {
    image: &'i Image<'i>,
    style: Style,
    failure: RefCell<Option<String>>,
}

impl<'i> SigNames<'i> {
    /// Names from `image`, spelled in `style`.
    pub fn new(image: &'i Image<'i>, style: Style) -> Self {
        SigNames {
            image,
            style,
            failure: RefCell::new(None),
        }
    }

    /// Why the first type that could not be named could not be, if one could not.
    pub fn failure(&self) -> Option<String> {
        self.failure.borrow().clone()
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
        if let Err(e) = self
            .image
            .type_name_at_depth(token, depth, self.style, self, out)
        {
            // A dangling or malformed token still renders, as its hex value; the caller
            // learns of it through `failure`.
            out.truncate(before);
            let _ = write!(out, "{token}");
            self.failure
                .borrow_mut()
                .get_or_insert_with(|| format!("type {token}: {e}"));
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
