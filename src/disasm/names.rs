//! Token operands named the way ildasm names them, from an image's metadata.
//!
//! The disassembler asks a [`TokenNamer`] for each token it prints, and only for those: a
//! verification report's windows name a few instructions around each finding, never a whole
//! body. Signatures are rendered by the one signature reader ([`crate::image::sig`]) in its
//! ILAsm style; what cannot be named is an `Err` with the reason, printed after the raw token.

use crate::image::sig::{self, Style, callconv};
use crate::image::{Image, ImageError, SigNames, Table, Token, names::write_ilasm_name};
use crate::opcode::{OperandKind, TokenKind};
use std::fmt::Write as _;

/// Names metadata tokens for the disassembler.
pub trait TokenNamer {
    /// Appends the ILAsm text of `token`, the operand of an instruction whose operand is of
    /// `kind` (a `catch` clause's class is asked for as [`OperandKind::Type`]). `Err` says why
    /// it cannot be named; then the disassembler prints the token raw with that reason, and
    /// whatever was appended to `out` is discarded.
    fn write_token(&self, kind: OperandKind, token: u32, out: &mut String) -> Result<(), String>;

    /// Appends the locals a body's LocalVarSig token declares, `(int32 V_0, string V_1)`;
    /// `Err` as for [`TokenNamer::write_token`].
    fn write_locals(&self, token: u32, out: &mut String) -> Result<(), String>;
}

/// Names tokens from an image's tables, heaps and signatures, ildasm-style:
///
/// | operand | text |
/// |---|---|
/// | method | `instance void [mscorlib]System.Object::.ctor()`, `!!0 C::Id<int32>(!!0)` |
/// | field | `int32 Ns.C::x` |
/// | type | `[mscorlib]System.Int32`, `Ns.Outer/Inner`, ``class [mscorlib]…List`1<int32>`` |
/// | `ldtoken` | a type as above, `method …` or `field …` |
/// | `calli` | `int32(int32)`, `unmanaged cdecl void(int32)` |
/// | `ldstr` | `"a\"b\n"`, `bytearray (E9 00)` when not ASCII |
///
/// Nothing is computed ahead: each token costs a few row reads and one signature walk when (and
/// only when) it is printed; the names of the TypeDefs and TypeRefs met are kept for the next.
pub struct ImageNamer<'i> {
    image: &'i Image<'i>,
    /// ILAsm-style names of the types met so far, kept across tokens.
    names: SigNames<'i>,
}

/// What a member token stands for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Member {
    Method,
    Field,
}

impl Member {
    fn word(self) -> &'static str {
        match self {
            Member::Method => "method",
            Member::Field => "field",
        }
    }
}

fn err(e: ImageError) -> String {
    e.to_string()
}

impl<'i> ImageNamer<'i> {
    /// Names from `image`.
    pub fn new(image: &'i Image<'i>) -> Self {
        ImageNamer {
            image,
            names: SigNames::new(image, Style::Ilasm),
        }
    }

    fn strings_get(&self, index: u32) -> Result<&'i str, String> {
        self.image.strings().get(index).map_err(err)
    }

    fn blob(&self, index: u32) -> Result<&'i [u8], String> {
        self.image.blobs().get(index).map_err(err)
    }

    /// `sig::render_*` through ILAsm-style names; a type that could not be named fails it.
    fn render<T>(
        &self,
        render: impl FnOnce(&SigNames<'i>) -> Result<T, sig::SigError>,
    ) -> Result<T, String> {
        self.names.take_failure();
        let value = render(&self.names).map_err(|e| format!("signature: {e}"))?;
        match self.names.take_failure() {
            None => Ok(value),
            Some(why) => Err(format!("signature names {why}")),
        }
    }

    /// A type operand: TypeDef, TypeRef or TypeSpec.
    fn write_type(&self, token: Token, out: &mut String) -> Result<(), String> {
        match token.table() {
            Some(Table::TypeDef | Table::TypeRef | Table::TypeSpec) => {
                self.names.write_type(token, out).map_err(err)
            }
            other => Err(mismatch(token, other, "a type")),
        }
    }

    /// `Owner::` for a member of TypeDef `owner`; nothing for a global member (of `<Module>`,
    /// the first TypeDef) or one no type's list covers.
    fn owner_prefix(&self, owner: Option<u32>, out: &mut String) -> Result<(), String> {
        if let Some(rid) = owner.filter(|&rid| rid > 1) {
            self.write_type(Token::new(Table::TypeDef, rid), out)?;
            out.push_str("::");
        }
        Ok(())
    }

    /// The `Parent::` of a MemberRef (II.22.25): a type, a module (`[.module name]::`, a
    /// global member of another module) or a MethodDef (a vararg call site: the method's type).
    fn member_ref_parent(&self, parent: Token, out: &mut String) -> Result<(), String> {
        if parent.is_null() {
            return Err("MemberRef with a null parent".into());
        }
        match parent.table() {
            Some(Table::TypeDef | Table::TypeRef | Table::TypeSpec) => {
                self.write_type(parent, out)?;
                out.push_str("::");
            }
            Some(Table::ModuleRef) => {
                let name = self
                    .image
                    .tables()
                    .cell(Table::ModuleRef, parent.rid(), 0)
                    .map_err(err)?;
                out.push_str("[.module ");
                write_ilasm_name(out, self.strings_get(name)?);
                out.push_str("]::");
            }
            Some(Table::MethodDef) => {
                let owner = self
                    .image
                    .tables()
                    .declaring_type(parent.rid())
                    .map_err(err)?;
                // The MethodDef must exist even when it is global.
                self.image.tables().method_def(parent.rid()).map_err(err)?;
                self.owner_prefix(owner, out)?;
            }
            other => return Err(mismatch(parent, other, "a MemberRef parent")),
        }
        Ok(())
    }

    /// A member: `ret Parent::name<inst>(params)` or `type Parent::name`. `want` is what the
    /// operand kind allows (`None`: either, as `ldtoken` takes); `inst` a MethodSpec's
    /// instantiation, already rendered. With `word`, `method ` or `field ` comes first.
    fn write_member(
        &self,
        token: Token,
        want: Option<Member>,
        inst: &str,
        word: bool,
        out: &mut String,
    ) -> Result<(), String> {
        let t = self.image.tables();
        let mut middle = String::from(" ");
        let (member, name, signature) = match token.table() {
            Some(Table::MethodDef) => {
                let row = t.method_def(token.rid()).map_err(err)?;
                let owner = t.declaring_type(token.rid()).map_err(err)?;
                self.owner_prefix(owner, &mut middle)?;
                (Member::Method, row.name, row.signature)
            }
            Some(Table::Field) => {
                let row = t.field(token.rid()).map_err(err)?;
                let owner = t.field_declaring_type(token.rid()).map_err(err)?;
                self.owner_prefix(owner, &mut middle)?;
                (Member::Field, row.name, row.signature)
            }
            Some(Table::MemberRef) => {
                let row = t.member_ref(token.rid()).map_err(err)?;
                self.member_ref_parent(row.class, &mut middle)?;
                let blob = self.blob(row.signature)?;
                let kind = match blob.first() {
                    Some(&cc) if cc & callconv::KIND_MASK == callconv::FIELD => Member::Field,
                    Some(_) => Member::Method,
                    None => return Err(format!("MemberRef {token} has an empty signature")),
                };
                (kind, row.name, row.signature)
            }
            other => {
                let expected = match want {
                    Some(Member::Method) => "a method",
                    Some(Member::Field) => "a field",
                    None => "a type, method or field",
                };
                return Err(mismatch(token, other, expected));
            }
        };
        if let Some(w) = want.filter(|&w| w != member) {
            return Err(format!(
                "{token} is a {}, where a {} is expected",
                member.word(),
                w.word()
            ));
        }
        if member == Member::Field && !inst.is_empty() {
            return Err(format!("{token} is a field, instantiated as a method"));
        }
        write_ilasm_name(&mut middle, self.strings_get(name)?);
        middle.push_str(inst);
        let blob = self.blob(signature)?;
        if word {
            out.push_str(member.word());
            out.push(' ');
        }
        match member {
            Member::Method => self
                .render(|names| sig::render_method_ref(blob, names, &middle, out))
                .map(|_| ()),
            Member::Field => {
                self.render(|names| sig::render_field_sig(blob, names, out))?;
                out.push_str(&middle);
                Ok(())
            }
        }
    }

    /// A method operand: MethodDef, MemberRef or MethodSpec (the generic method with its
    /// instantiation after the name, as ILAsm writes it).
    fn write_method_or_spec(
        &self,
        token: Token,
        want: Option<Member>,
        word: bool,
        out: &mut String,
    ) -> Result<(), String> {
        if token.table() != Some(Table::MethodSpec) {
            return self.write_member(token, want, "", word, out);
        }
        let row = self.image.tables().method_spec(token.rid()).map_err(err)?;
        if !matches!(
            row.method.table(),
            Some(Table::MethodDef | Table::MemberRef)
        ) {
            return Err(mismatch(
                row.method,
                row.method.table(),
                "the method of a MethodSpec",
            ));
        }
        let blob = self.blob(row.instantiation)?;
        let mut inst = String::new();
        self.render(|names| sig::render_method_spec(blob, names, &mut inst))?;
        self.write_member(row.method, Some(Member::Method), &inst, word, out)
    }

    /// A `calli` site's StandAloneSig: `ret(params)` with its calling convention.
    fn write_standalone_method(&self, token: Token, out: &mut String) -> Result<(), String> {
        let blob = self.standalone_blob(token)?;
        if blob.first() == Some(&callconv::LOCAL_SIG) {
            return Err(format!(
                "{token} is a local-variable signature, where a method signature is expected"
            ));
        }
        self.render(|names| sig::render_method_ref(blob, names, "", out))
            .map(|_| ())
    }

    fn standalone_blob(&self, token: Token) -> Result<&'i [u8], String> {
        if token.table() != Some(Table::StandAloneSig) {
            return Err(mismatch(token, token.table(), "a StandAloneSig"));
        }
        let row = self
            .image
            .tables()
            .standalone_sig(token.rid())
            .map_err(err)?;
        self.blob(row.signature)
    }

    /// An `ldstr` literal, as ildasm writes it.
    fn write_user_string(&self, token: Token, out: &mut String) -> Result<(), String> {
        if token.table_byte() != crate::image::tables::USER_STRING_TABLE {
            return Err(format!(
                "{token} is not a user-string token (0x70xxxxxx), where ldstr expects one"
            ));
        }
        let raw = self
            .image
            .user_strings()
            .get_raw(token.rid())
            .map_err(err)?;
        write_string_literal(out, raw);
        Ok(())
    }
}

/// Why a token of `table` cannot stand where `expected` is.
fn mismatch(token: Token, table: Option<Table>, expected: &str) -> String {
    match table {
        Some(t) => format!("{token} is a {t:?} token, where {expected} is expected"),
        None => format!("{token} names no metadata table, where {expected} is expected"),
    }
}

/// Writes a `#US` entry (UTF-16LE code units, then a flag byte when the length is odd) as
/// ildasm does: a quoted literal when every character is ASCII, escaped as C escapes them
/// (`\"`, `\\`, `\t`, `\n`, `\r`, `\a`, `\b`, `\f`, `\v`, other controls in octal); otherwise
/// `bytearray (…)` of the UTF-16LE bytes, which ILAsm reads back exactly.
pub fn write_string_literal(out: &mut String, raw: &[u8]) {
    let units = raw
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]));
    if units.clone().all(|u| u < 0x80) {
        out.push('"');
        for u in units {
            // Every unit is ASCII here.
            let c = char::from(u as u8);
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\t' => out.push_str("\\t"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\x07' => out.push_str("\\a"),
                '\x08' => out.push_str("\\b"),
                '\x0c' => out.push_str("\\f"),
                '\x0b' => out.push_str("\\v"),
                c if c.is_ascii_control() => {
                    let _ = write!(out, "\\{:03o}", u);
                }
                c => out.push(c),
            }
        }
        out.push('"');
    } else {
        out.push_str("bytearray (");
        let len = raw.len() & !1;
        for (n, b) in raw[..len].iter().enumerate() {
            if n > 0 {
                out.push(' ');
            }
            let _ = write!(out, "{b:02X}");
        }
        out.push(')');
    }
}

impl TokenNamer for ImageNamer<'_> {
    fn write_token(&self, kind: OperandKind, token: u32, out: &mut String) -> Result<(), String> {
        let token = Token(token);
        let Some(which) = kind.token_kind() else {
            return Err(format!("{kind:?} operands are not tokens"));
        };
        match which {
            TokenKind::Method => self.write_method_or_spec(token, Some(Member::Method), false, out),
            TokenKind::Field => self.write_member(token, Some(Member::Field), "", false, out),
            TokenKind::Type => self.write_type(token, out),
            TokenKind::Tok => match token.table() {
                Some(Table::TypeDef | Table::TypeRef | Table::TypeSpec) => {
                    self.write_type(token, out)
                }
                _ => self.write_method_or_spec(token, None, true, out),
            },
            TokenKind::Sig => self.write_standalone_method(token, out),
            TokenKind::String => self.write_user_string(token, out),
        }
    }

    fn write_locals(&self, token: u32, out: &mut String) -> Result<(), String> {
        if token == 0 {
            // `init` without a signature: no locals.
            out.push_str("()");
            return Ok(());
        }
        let token = Token(token);
        let blob = self.standalone_blob(token)?;
        self.render(|names| sig::render_local_sig(blob, names, out))
            .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disasm::{disassemble_with, write_code_with};
    use crate::image::emit::AssemblyIdentity;
    use crate::image::emit::assembly::{
        AssemblyBuilder, ImageKind, SigType, field_sig, flags, locals_sig, method_sig,
    };
    use crate::opcode::ALL;

    fn embedded(name: &str) -> Image<'static> {
        let (_, bytes) = crate::corpus::EMBEDDED
            .iter()
            .find(|(n, _)| n.ends_with(name))
            .expect("an embedded assembly");
        Image::parse(bytes).expect("it parses")
    }

    /// The named listing of the method whose full name is `full_name`.
    fn listing(image: &Image<'_>, full_name: &str) -> String {
        let m = image
            .methods()
            .find(|m| m.full_name().is_ok_and(|n| n == full_name))
            .unwrap_or_else(|| panic!("no method {full_name}"));
        disassemble_with(&m.decoded_body().unwrap(), Some(&ImageNamer::new(image)))
    }

    fn assert_lines(text: &str, lines: &[&str]) {
        for line in lines {
            assert!(
                text.lines().any(|l| l.trim_start() == *line),
                "missing {line:?} in\n{text}"
            );
        }
    }

    #[test]
    fn method_def_member_ref_and_field_tokens() {
        let image = embedded("features.exe");
        assert_lines(
            &listing(&image, "Shape::.ctor()"),
            &[
                "IL_0001:  call       instance void [mscorlib]System.Object::.ctor()",
                "IL_0006:  ldsfld     int32 Shape::created",
                "IL_000d:  stsfld     int32 Shape::created",
            ],
        );
        assert_lines(
            &listing(&image, "Rect::Describe()"),
            &[
                "IL_0000:  ldstr      \"[\"",
                "IL_0006:  call       instance string Shape::Describe()",
                "IL_0010:  call       string [mscorlib]System.String::Concat(string, string, string)",
            ],
        );
        assert_lines(
            &listing(&image, "Shape::Describe()"),
            &[
                ".locals init (float64 V_0)",
                "IL_0019:  call       class [mscorlib]System.Globalization.CultureInfo [mscorlib]System.Globalization.CultureInfo::get_InvariantCulture()",
                "IL_001e:  call       instance string [mscorlib]System.Double::ToString(string, class [mscorlib]System.IFormatProvider)",
            ],
        );
        assert_lines(
            &listing(&image, "Rect::get_W()"),
            &["IL_0001:  ldfld      float64 Rect::'<W>k__BackingField'"],
        );
    }

    #[test]
    fn type_tokens_generic_instances_and_nested_types() {
        let image = embedded("features.exe");
        assert_lines(
            &listing(&image, "Vec::ToString()"),
            &[
                "IL_0001:  newarr     [mscorlib]System.Object",
                "IL_0016:  box        [mscorlib]System.Int32",
            ],
        );
        assert_lines(
            &listing(&image, "Registry::.cctor()"),
            &[
                "IL_0000:  newobj     instance void class [mscorlib]System.Collections.Generic.List`1<string>::.ctor()",
                "IL_0005:  stsfld     class [mscorlib]System.Collections.Generic.List`1<string> Registry::Log",
                "IL_0014:  callvirt   instance void class [mscorlib]System.Collections.Generic.List`1<string>::Add(!0)",
            ],
        );
        assert_lines(
            &listing(
                &image,
                "Counter::add_Changed(class System.EventHandler`1<int32>)",
            ),
            &[
                "IL_0016:  castclass  class [mscorlib]System.EventHandler`1<int32>",
                "IL_001c:  call       !!0 [mscorlib]System.Threading.Interlocked::CompareExchange<class [mscorlib]System.EventHandler`1<int32>>(!!0&, !!0, !!0)",
            ],
        );
        assert_lines(
            &listing(&image, "Counter::add_Reset(class System.Action)"),
            &["IL_0016:  castclass  [mscorlib]System.Action"],
        );
        assert_lines(
            &listing(&image, "Features::Fib(int32)"),
            &["IL_0000:  newobj     instance void Features/'<Fib>c__Iterator0'::.ctor()"],
        );
        assert_lines(
            &listing(&image, "Stack`1::.ctor()"),
            &["IL_0002:  newarr     !0"],
        );
        let control = embedded("control_flow.exe");
        assert_lines(
            &listing(&control, "ControlFlow::Nested(int32)"),
            &[
                ".locals init (int32 V_0, class MyException V_1, class MyException V_2)",
                "catch MyException",
                "catch [mscorlib]System.InvalidOperationException",
                "IL_0009:  newobj     instance void MyException::.ctor(int32)",
            ],
        );
    }

    #[test]
    fn calli_vararg_and_method_spec_tokens() {
        let image = embedded("codec_shapes.dll");
        assert_lines(
            &listing(&image, "Codec.Shapes::Calli_Static(int32)"),
            &[
                "IL_0001:  ldftn      int32 Codec.Shapes::Identity(int32)",
                "IL_0007:  calli      int32(int32)",
            ],
        );
        assert_lines(
            &listing(&image, "Codec.Shapes::Virtual_Calls(class Codec.Box)"),
            &[
                "IL_0002:  ldvirtftn  instance int32 Codec.Box::Area()",
                "IL_0008:  calli      instance int32()",
            ],
        );
        // A MemberRef whose parent is a MethodDef: the call site of a vararg method.
        assert_lines(
            &listing(&image, "Codec.Shapes::Vararg_Call()"),
            &[
                "IL_0003:  call       vararg int32 Codec.Shapes::Vararg_Sum(int32, ..., int32, int32)",
            ],
        );
        assert_lines(
            &listing(&image, "Codec.Shapes::MethodSpec_Calls()"),
            &[
                "IL_0001:  call       !!0 Codec.Shapes::GenericIdentity<int32>(!!0)",
                "IL_0010:  callvirt   instance int32 [mscorlib]System.String::get_Length()",
                "IL_0016:  ldftn      !!0 Codec.Shapes::GenericIdentity<float64>(!!0)",
            ],
        );
    }

    /// A small assembly with literals that need escapes and a method full of bad tokens.
    fn built() -> (Vec<u8>, [Token; 3]) {
        let mut b = AssemblyBuilder::new("Names", [1, 0, 0, 0], ImageKind::Dll).unwrap();
        let corlib = b
            .assembly_ref(&AssemblyIdentity {
                name: "mscorlib".into(),
                version: [4, 0, 0, 0],
                culture: String::new(),
                public_key_or_token: vec![0xB7, 0x7A, 0x5C, 0x56, 0x19, 0x34, 0xE0, 0x89],
                full_public_key: false,
            })
            .unwrap();
        let object = b.type_ref(corlib, "System", "Object").unwrap();
        let escapes = b
            .user_string("tab\t\"q\" \\ \n\r\x07\x08\x0c\x0b \0 \x1f \x7f ?")
            .unwrap();
        let cafe = b.user_string("café").unwrap();
        let empty = b.user_string("").unwrap();
        // A MemberRef whose signature names a TypeRef that does not exist.
        let dangling = method_sig(
            false,
            SigType::Void,
            &[SigType::Class(Token::new(Table::TypeRef, 0x50))],
        )
        .unwrap();
        let bad_sig = b.member_ref(object, "Dangling", &dangling).unwrap();
        let locals = b
            .standalone_sig(&locals_sig(&[SigType::I4]).unwrap())
            .unwrap();
        b.type_def(flags::TYPE_PUBLIC, "Demo", "Program", Some(object))
            .unwrap();
        b.field(
            flags::FIELD_PUBLIC | flags::FIELD_STATIC,
            "value",
            &field_sig(SigType::I4).unwrap(),
        )
        .unwrap();
        let mut code = Vec::new();
        let mut op = |byte: u8, token: u32| {
            code.push(byte);
            code.extend_from_slice(&token.to_le_bytes());
        };
        op(0x28, 0x0A00_FFFF); // call: MemberRef out of range
        op(0x28, 0x0100_0001); // call: a TypeRef
        op(0x72, 0x70FF_FFFF); // ldstr: past #US
        op(0x72, 0x0A00_0001); // ldstr: not a user string
        op(0x7B, 0x0600_0001); // ldfld: a MethodDef
        op(0x8C, 0x7F00_0001); // box: no such table
        op(0x29, locals.0); // calli: a locals signature
        op(0xD0, 0); // ldtoken: the null token
        op(0x73, 0x2B00_0001); // newobj: MethodSpec out of range
        op(0x28, bad_sig.0); // call: a signature naming a missing TypeRef
        op(0x7E, 0x0400_0001); // ldsfld: fine, a keyword name
        op(0x72, escapes.0);
        op(0x72, cafe.0);
        op(0x72, empty.0);
        code.push(0x2A);
        let mut body = vec![0x13, 0x30, 8, 0];
        body.extend_from_slice(&(code.len() as u32).to_le_bytes());
        body.extend_from_slice(&locals.0.to_le_bytes());
        body.extend_from_slice(&code);
        let sig = method_sig(false, SigType::Void, &[]).unwrap();
        b.method(
            flags::METHOD_PUBLIC | flags::METHOD_STATIC,
            "Bad",
            &sig,
            &body,
        )
        .unwrap();
        (b.build().unwrap(), [escapes, cafe, empty])
    }

    #[test]
    fn bad_tokens_print_raw_with_the_reason() {
        let (bytes, _) = built();
        let image = Image::parse(&bytes).unwrap();
        let text = listing(&image, "Demo.Program::Bad()");
        let expected = [
            ".locals init (int32 V_0)",
            "IL_0000:  call       0x0a00ffff  // MemberRef row 65535 does not exist (table has 1 rows)",
            "IL_0005:  call       0x01000001  // 0x01000001 is a TypeRef token, where a method is expected",
            "IL_000a:  ldstr      0x70ffffff  // #US index 0xffffff is outside the heap (heap at offset 0x",
            "IL_000f:  ldstr      0x0a000001  // 0x0a000001 is not a user-string token (0x70xxxxxx), where ldstr expects one",
            "IL_0014:  ldfld      0x06000001  // 0x06000001 is a method, where a field is expected",
            "IL_0019:  box        0x7f000001  // 0x7f000001 names no metadata table, where a type is expected",
            "IL_001e:  calli      0x11000001  // 0x11000001 is a local-variable signature, where a method signature is expected",
            "IL_0023:  ldtoken    0x00000000  // 0x00000000 is a Module token, where a type, method or field is expected",
            "IL_0028:  newobj     0x2b000001  // MethodSpec row 1 does not exist (table has 0 rows)",
            "IL_002d:  call       0x0a000001  // signature names type 0x01000050: TypeRef row 80 does not exist (table has 1 rows)",
            "IL_0032:  ldsfld     int32 Demo.Program::'value'",
            "IL_0037:  ldstr      \"tab\\t\\\"q\\\" \\\\ \\n\\r\\a\\b\\f\\v \\000 \\037 \\177 ?\"",
            "IL_003c:  ldstr      bytearray (63 00 61 00 66 00 E9 00)",
            "IL_0041:  ldstr      \"\"",
        ];
        let lines: Vec<&str> = text.lines().collect();
        for want in expected {
            assert!(
                lines.iter().any(|l| l.starts_with(want)),
                "missing {want:?} in\n{text}"
            );
        }
    }

    #[test]
    fn without_names_tokens_stay_raw() {
        let (bytes, _) = built();
        let image = Image::parse(&bytes).unwrap();
        let m = image.methods().last().unwrap();
        let text = crate::disasm::disassemble(&m.decoded_body().unwrap());
        assert!(text.contains(".locals init 0x11000001\n"), "{text}");
        assert!(text.contains("IL_0032:  ldsfld     0x04000001\n"), "{text}");
        assert!(!text.contains("//  "), "{text}");
    }

    #[test]
    fn string_literals_odd_lengths_and_surrogates() {
        let mut s = String::new();
        // "A" and its flag byte.
        write_string_literal(&mut s, &[0x41, 0x00, 0x00]);
        assert_eq!(s, "\"A\"");
        s.clear();
        // An unpaired surrogate: bytes, since no text says it.
        write_string_literal(&mut s, &[0x00, 0xD8, 0x41, 0x00, 0x01]);
        assert_eq!(s, "bytearray (00 D8 41 00)");
    }

    /// Every table byte and kind of row id, under every token operand kind: named or a reason,
    /// never a panic; and on a real assembly as well as one with almost no rows.
    #[test]
    fn any_token_under_any_operand_kind_never_panics() {
        let (bytes, _) = built();
        let images = [Image::parse(&bytes).unwrap(), embedded("features.exe")];
        let mut kinds: Vec<OperandKind> = ALL.iter().map(|op| op.operand).collect();
        kinds.sort_by_key(|k| format!("{k:?}"));
        kinds.dedup();
        for image in &images {
            let names = ImageNamer::new(image);
            for table in 0..=0xFFu32 {
                for rid in [0u32, 1, 2, 3, 0x50, 0xFFFF, 0xFF_FFFF] {
                    let token = (table << 24) | rid;
                    for &kind in &kinds {
                        let mut s = String::new();
                        let _ = names.write_token(kind, token, &mut s);
                        let _ = names.write_locals(token, &mut s);
                    }
                }
            }
        }
        // And through the listing, as operands of every opcode that takes a token.
        let image = &images[1];
        let mut code = Vec::new();
        for op in ALL.iter().filter(|op| {
            matches!(
                op.operand,
                OperandKind::Tok
                    | OperandKind::Type
                    | OperandKind::Field
                    | OperandKind::Method
                    | OperandKind::String
                    | OperandKind::Sig
            )
        }) {
            for token in [0u32, 0x0A00_0001, 0x0200_0002, 0x7000_0001, 0x1B00_0001] {
                let c = op.opcode.code();
                if c >> 8 == 0xFE {
                    code.push(0xFE);
                }
                code.push(c as u8);
                code.extend_from_slice(&token.to_le_bytes());
            }
        }
        let mut out = String::new();
        write_code_with(&mut out, &code, &[], Some(&ImageNamer::new(image))).unwrap();
        assert!(out.lines().count() > 100);
    }
}
