//! Whole assemblies from nothing: the metadata tables and heaps of a new module, its method
//! bodies, and the PE file around them (II.25), laid out the way compilers lay out a small
//! IL-only image: one `.text` section (import address table, CLI header, bodies, metadata,
//! import directory, the `_CorExeMain`/`_CorDllMain` stub) and a `.reloc` section for the stub.
//!
//! Rows are added in table order by the caller: a type's fields and methods right after its
//! TypeDef row, as II.22.37 lists them by ranges. Sorted tables are refused (nothing built here
//! needs them). The same calls give the same bytes: there is no time stamp, and the module's
//! MVID is a hash of everything else.

use super::EmitError;
use super::heaps::{GrowingHeap, HeapKind, MAX_USER_STRING_INDEX};
use super::refs::AssemblyIdentity;
use crate::image::sig::compress_u32;
use crate::image::tables::{
    CodedIndex, MAX_COLUMNS, TABLE_COUNT, Table, Token, USER_STRING_TABLE, column_width,
    heap_sizes, schema,
};

/// Whether the image is a program (with an entry point) or a library.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageKind {
    /// A console program (`.exe`): its entry point is a static method.
    Exe,
    /// A library (`.dll`).
    Dll,
}

/// A signature type (II.23.2.12), the few kinds built assemblies use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SigType {
    /// `void` (return types only).
    Void,
    /// `bool`.
    Boolean,
    /// `char`.
    Char,
    /// `uint8`.
    U1,
    /// `int32`.
    I4,
    /// `int64`.
    I8,
    /// `native int` (a function pointer's type, as delegate constructors take it).
    IntPtr,
    /// `string`.
    String,
    /// `object`.
    Object,
    /// A class by its TypeDef or TypeRef.
    Class(Token),
    /// A value type by its TypeDef or TypeRef.
    ValueType(Token),
    /// A single-dimensional, zero-based array of a type without a token (`uint8[]`,
    /// `string[]`, `object[]`).
    SzArray(&'static SigType),
    /// A single-dimensional, zero-based array of a class by its TypeDef or TypeRef.
    ClassSzArray(Token),
    /// A managed pointer to a type without a token (`int32&`), for parameters and locals.
    ByRef(&'static SigType),
}

impl SigType {
    fn write(self, out: &mut Vec<u8>) -> Result<(), EmitError> {
        match self {
            SigType::Void => out.push(0x01),
            SigType::Boolean => out.push(0x02),
            SigType::Char => out.push(0x03),
            SigType::U1 => out.push(0x05),
            SigType::I4 => out.push(0x08),
            SigType::I8 => out.push(0x0A),
            SigType::IntPtr => out.push(0x18),
            SigType::String => out.push(0x0E),
            SigType::Object => out.push(0x1C),
            SigType::Class(t) => {
                out.push(0x12);
                write_type_token(t, out)?;
            }
            SigType::ValueType(t) => {
                out.push(0x11);
                write_type_token(t, out)?;
            }
            SigType::SzArray(element) => {
                if matches!(element, SigType::Void) {
                    return Err(EmitError::VoidElement);
                }
                out.push(0x1D);
                element.write(out)?;
            }
            SigType::ClassSzArray(t) => {
                out.extend_from_slice(&[0x1D, 0x12]);
                write_type_token(t, out)?;
            }
            SigType::ByRef(target) => {
                out.push(0x10);
                target.write(out)?;
            }
        }
        Ok(())
    }
}

/// A TypeDefOrRef coded index, compressed (II.23.2.8).
fn write_type_token(t: Token, out: &mut Vec<u8>) -> Result<(), EmitError> {
    let coded = CodedIndex::TypeDefOrRef
        .encode(t)
        .ok_or(EmitError::BadToken { token: t })?;
    out.extend(compress_u32(coded).ok_or(EmitError::BadToken { token: t })?);
    Ok(())
}

/// A method signature blob (II.23.2.1): `instance` methods have `this`.
pub fn method_sig(instance: bool, ret: SigType, params: &[SigType]) -> Result<Vec<u8>, EmitError> {
    let mut out = vec![if instance { 0x20 } else { 0x00 }];
    out.extend(
        compress_u32(params.len() as u32).ok_or(EmitError::BlobTooLong { len: params.len() })?,
    );
    ret.write(&mut out)?;
    for p in params {
        p.write(&mut out)?;
    }
    Ok(out)
}

/// A field signature blob (II.23.2.4).
pub fn field_sig(t: SigType) -> Result<Vec<u8>, EmitError> {
    let mut out = vec![0x06];
    t.write(&mut out)?;
    Ok(out)
}

/// A local variable signature blob (II.23.2.6).
pub fn locals_sig(locals: &[SigType]) -> Result<Vec<u8>, EmitError> {
    let mut out = vec![0x07];
    out.extend(
        compress_u32(locals.len() as u32).ok_or(EmitError::BlobTooLong { len: locals.len() })?,
    );
    for l in locals {
        l.write(&mut out)?;
    }
    Ok(out)
}

/// TypeAttributes and MethodAttributes the generated code uses (II.23.1.15, II.23.1.10).
pub mod flags {
    /// TypeAttributes: public, auto layout, ANSI, class.
    pub const TYPE_PUBLIC: u32 = 0x0000_0001;
    /// TypeAttributes: abstract.
    pub const TYPE_ABSTRACT: u32 = 0x0000_0080;
    /// TypeAttributes: sealed.
    pub const TYPE_SEALED: u32 = 0x0000_0100;
    /// TypeAttributes: sequential layout (fields laid out in order, as a value type's are).
    pub const TYPE_SEQUENTIAL_LAYOUT: u32 = 0x0000_0008;
    /// TypeAttributes: the type's static constructor may run lazily.
    pub const TYPE_BEFORE_FIELD_INIT: u32 = 0x0010_0000;
    /// MethodAttributes: public.
    pub const METHOD_PUBLIC: u16 = 0x0006;
    /// MethodAttributes: static.
    pub const METHOD_STATIC: u16 = 0x0010;
    /// MethodAttributes: hide by name and signature.
    pub const METHOD_HIDE_BY_SIG: u16 = 0x0080;
    /// MethodAttributes: special name (constructors).
    pub const METHOD_SPECIAL_NAME: u16 = 0x0800;
    /// MethodAttributes: the runtime gives the name a meaning (constructors).
    pub const METHOD_RT_SPECIAL_NAME: u16 = 0x1000;
    /// MethodImplAttributes: the runtime must not inline the method.
    pub const METHOD_IMPL_NO_INLINING: u16 = 0x0008;
    /// FieldAttributes: public.
    pub const FIELD_PUBLIC: u16 = 0x0006;
    /// FieldAttributes: static.
    pub const FIELD_STATIC: u16 = 0x0010;
}

/// Builds a new assembly: its tables, heaps, method bodies and PE file.
pub struct AssemblyBuilder {
    kind: ImageKind,
    strings: GrowingHeap<'static>,
    blobs: GrowingHeap<'static>,
    user_strings: GrowingHeap<'static>,
    rows: Vec<Vec<[u32; MAX_COLUMNS]>>,
    /// Encoded method bodies, each starting 4-aligned; MethodDef rows hold offsets into it
    /// (plus one; 0 is "no body") until the image is laid out.
    bodies: Vec<u8>,
    entry_point: Option<Token>,
}

impl std::fmt::Debug for AssemblyBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AssemblyBuilder")
            .field("kind", &self.kind)
            .field("methods", &self.rows[Table::MethodDef as usize].len())
            .field("body_bytes", &self.bodies.len())
            .finish_non_exhaustive()
    }
}

/// The image base, section and file alignments of built images (the usual ones for PE32).
const IMAGE_BASE: u32 = 0x0040_0000;
const SECTION_ALIGNMENT: u32 = 0x2000;
const FILE_ALIGNMENT: u32 = 0x200;
/// DOS header, PE signature, COFF header, PE32 optional header, two section headers.
const HEADERS_LEN: u32 = 0x80 + 4 + 20 + 224 + 2 * 40;
/// Where `.text` starts.
const TEXT_RVA: u32 = SECTION_ALIGNMENT;
/// The CLI header's size (II.25.3.3).
const CLI_HEADER_LEN: u32 = 72;
/// The metadata version string compilers write for .NET Framework 4 and later.
const METADATA_VERSION: &str = "v4.0.30319";

impl AssemblyBuilder {
    /// A new assembly named `name` (its module is `name.exe` or `name.dll`), version
    /// `version`, with the `<Module>` type already defined.
    pub fn new(name: &str, version: [u16; 4], kind: ImageKind) -> Result<Self, EmitError> {
        let mut b = AssemblyBuilder {
            kind,
            strings: GrowingHeap::new(b"\0", HeapKind::Strings),
            blobs: GrowingHeap::new(b"\0", HeapKind::LengthPrefixed),
            user_strings: GrowingHeap::new(b"\0", HeapKind::LengthPrefixed),
            rows: vec![Vec::new(); TABLE_COUNT],
            bodies: Vec::new(),
            entry_point: None,
        };
        let ext = match kind {
            ImageKind::Exe => "exe",
            ImageKind::Dll => "dll",
        };
        let module = b.string(&format!("{name}.{ext}"))?;
        // Generation, name, MVID (the only GUID, filled in by `build`), EncId, EncBaseId.
        b.push(Table::Module, &[0, module, 1, 0, 0])?;
        let asm = b.string(name)?;
        let [v0, v1, v2, v3] = version.map(u32::from);
        // SHA1 hash algorithm, no flags, no key, neutral culture.
        b.push(Table::Assembly, &[0x8004, v0, v1, v2, v3, 0, 0, asm, 0])?;
        b.type_def(0, "", "<Module>", None)?;
        Ok(b)
    }

    /// The `#Strings` index of `s`.
    pub fn string(&mut self, s: &str) -> Result<u32, EmitError> {
        if s.contains('\0') {
            return Err(EmitError::NulInString);
        }
        if s.is_empty() {
            return Ok(0);
        }
        self.strings.intern(s.as_bytes())
    }

    /// The `#Blob` index of `blob`.
    pub fn blob(&mut self, blob: &[u8]) -> Result<u32, EmitError> {
        if blob.is_empty() {
            return Ok(0);
        }
        self.blobs.intern(blob)
    }

    /// The `ldstr` token of the literal `s`.
    pub fn user_string(&mut self, s: &str) -> Result<Token, EmitError> {
        let index = self.user_strings.intern_user_string(s)?;
        if index as usize > MAX_USER_STRING_INDEX {
            return Err(EmitError::HeapFull { heap: "#US" });
        }
        Ok(Token((u32::from(USER_STRING_TABLE) << 24) | index))
    }

    /// Rows of `table` so far.
    pub fn rows(&self, table: Table) -> u32 {
        self.rows[table as usize].len() as u32
    }

    fn push(&mut self, table: Table, columns: &[u32]) -> Result<Token, EmitError> {
        let expected = schema(table).len();
        if columns.len() != expected {
            return Err(EmitError::ColumnCount {
                table,
                expected,
                found: columns.len(),
            });
        }
        if super::SORTED_TABLES.contains(&table) {
            return Err(EmitError::SortedTable { table });
        }
        let rid = self.rows(table) + 1;
        if rid > 0x00FF_FFFF {
            return Err(EmitError::TableFull { table });
        }
        let mut row = [0u32; MAX_COLUMNS];
        row[..expected].copy_from_slice(columns);
        self.rows[table as usize].push(row);
        Ok(Token::new(table, rid))
    }

    fn coded(kind: CodedIndex, token: Token) -> Result<u32, EmitError> {
        kind.encode(token).ok_or(EmitError::BadToken { token })
    }

    /// An AssemblyRef (the same identity twice gives the same row).
    pub fn assembly_ref(&mut self, id: &AssemblyIdentity) -> Result<Token, EmitError> {
        let key = self.blob(&id.public_key_or_token)?;
        let name = self.string(&id.name)?;
        let culture = self.string(&id.culture)?;
        let [a, b, c, d] = id.version.map(u32::from);
        let flags = u32::from(id.full_public_key);
        self.find_or_push(
            Table::AssemblyRef,
            &[a, b, c, d, flags, key, name, culture, 0],
        )
    }

    /// A TypeRef to `namespace.name` in `scope` (an AssemblyRef, or a TypeRef for a nested
    /// type).
    pub fn type_ref(
        &mut self,
        scope: Token,
        namespace: &str,
        name: &str,
    ) -> Result<Token, EmitError> {
        let scope = Self::coded(CodedIndex::ResolutionScope, scope)?;
        let name = self.string(name)?;
        let namespace = self.string(namespace)?;
        self.find_or_push(Table::TypeRef, &[scope, name, namespace])
    }

    /// A MemberRef of `parent` (a TypeRef, TypeDef or TypeSpec) with a signature blob.
    pub fn member_ref(
        &mut self,
        parent: Token,
        name: &str,
        signature: &[u8],
    ) -> Result<Token, EmitError> {
        let parent = Self::coded(CodedIndex::MemberRefParent, parent)?;
        let name = self.string(name)?;
        let sig = self.blob(signature)?;
        self.find_or_push(Table::MemberRef, &[parent, name, sig])
    }

    /// A StandAloneSig (locals) with a signature blob.
    pub fn standalone_sig(&mut self, signature: &[u8]) -> Result<Token, EmitError> {
        let sig = self.blob(signature)?;
        self.find_or_push(Table::StandAloneSig, &[sig])
    }

    fn find_or_push(&mut self, table: Table, values: &[u32]) -> Result<Token, EmitError> {
        let n = values.len();
        if let Some(i) = self.rows[table as usize]
            .iter()
            .position(|r| r[..n] == *values)
        {
            return Ok(Token::new(table, i as u32 + 1));
        }
        self.push(table, values)
    }

    /// A TypeDef; the fields and methods added after it (until the next TypeDef) are its own.
    pub fn type_def(
        &mut self,
        flags: u32,
        namespace: &str,
        name: &str,
        extends: Option<Token>,
    ) -> Result<Token, EmitError> {
        let name = self.string(name)?;
        let namespace = self.string(namespace)?;
        let extends = match extends {
            Some(t) => Self::coded(CodedIndex::TypeDefOrRef, t)?,
            None => 0,
        };
        let fields = self.rows(Table::Field) + 1;
        let methods = self.rows(Table::MethodDef) + 1;
        self.push(
            Table::TypeDef,
            &[flags, name, namespace, extends, fields, methods],
        )
    }

    /// A field of the last TypeDef.
    pub fn field(&mut self, flags: u16, name: &str, signature: &[u8]) -> Result<Token, EmitError> {
        let name = self.string(name)?;
        let sig = self.blob(signature)?;
        self.push(Table::Field, &[u32::from(flags), name, sig])
    }

    /// A method of the last TypeDef with an encoded body (header, code and sections), IL and
    /// managed (implementation flags 0).
    pub fn method(
        &mut self,
        flags: u16,
        name: &str,
        signature: &[u8],
        body: &[u8],
    ) -> Result<Token, EmitError> {
        self.method_with_impl(flags, 0, name, signature, body)
    }

    /// A method as [`AssemblyBuilder::method`] with implementation flags (II.23.1.11, e.g.
    /// [`flags::METHOD_IMPL_NO_INLINING`]).
    pub fn method_with_impl(
        &mut self,
        flags: u16,
        impl_flags: u16,
        name: &str,
        signature: &[u8],
        body: &[u8],
    ) -> Result<Token, EmitError> {
        let name = self.string(name)?;
        let sig = self.blob(signature)?;
        self.bodies.resize(self.bodies.len().next_multiple_of(4), 0);
        let at = u32::try_from(self.bodies.len() + 1).map_err(|_| EmitError::HeapFull {
            heap: "method bodies",
        })?;
        self.bodies.extend_from_slice(body);
        // Parameters have no Param rows: they need none without names or attributes.
        let params = self.rows(Table::Param) + 1;
        self.push(
            Table::MethodDef,
            &[
                at,
                u32::from(impl_flags),
                u32::from(flags),
                name,
                sig,
                params,
            ],
        )
    }

    /// The program's entry point (for [`ImageKind::Exe`]).
    pub fn set_entry_point(&mut self, method: Token) {
        self.entry_point = Some(method);
    }

    /// The table stream (II.24.2.6).
    fn tables_stream(&self, body_rva: u32) -> Vec<u8> {
        let mut counts = [0u32; TABLE_COUNT];
        for t in Table::ALL {
            counts[t as usize] = self.rows(t);
        }
        let mut heap_flags = 0u8;
        if self.strings.len().next_multiple_of(4) >= 0x1_0000 {
            heap_flags |= heap_sizes::BIG_STRINGS;
        }
        if self.blobs.len().next_multiple_of(4) >= 0x1_0000 {
            heap_flags |= heap_sizes::BIG_BLOB;
        }
        let mut valid = 0u64;
        for t in Table::ALL {
            if counts[t as usize] > 0 {
                valid |= 1 << (t as u8);
            }
        }
        let sorted: u64 = super::SORTED_TABLES
            .iter()
            .fold(0, |s, t| s | 1 << (*t as u8));
        let mut out = Vec::new();
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&[2, 0, heap_flags, 1]);
        out.extend_from_slice(&valid.to_le_bytes());
        out.extend_from_slice(&sorted.to_le_bytes());
        for t in Table::ALL {
            if counts[t as usize] > 0 {
                out.extend_from_slice(&counts[t as usize].to_le_bytes());
            }
        }
        for t in Table::ALL {
            let cols = schema(t);
            let widths: Vec<u8> = cols
                .iter()
                .map(|&c| column_width(c, &counts, heap_flags))
                .collect();
            for row in &self.rows[t as usize] {
                let mut row = *row;
                if t == Table::MethodDef && row[0] != 0 {
                    row[0] = body_rva + row[0] - 1;
                }
                super::put_row(&mut out, &row[..cols.len()], &widths);
            }
        }
        out.resize(out.len().next_multiple_of(4), 0);
        out
    }

    /// The metadata root with its five streams, the MVID left zero.
    fn metadata(&self, body_rva: u32) -> (Vec<u8>, usize) {
        let mut strings = Vec::new();
        self.strings.write(&mut strings);
        let mut blobs = Vec::new();
        self.blobs.write(&mut blobs);
        let mut us = Vec::new();
        self.user_strings.write(&mut us);
        let streams: [(&str, Vec<u8>); 5] = [
            ("#~", self.tables_stream(body_rva)),
            ("#Strings", strings),
            ("#US", us),
            ("#GUID", vec![0; 16]),
            ("#Blob", blobs),
        ];
        let version_len = (METADATA_VERSION.len() + 1).next_multiple_of(4);
        let headers: usize = streams
            .iter()
            .map(|(n, _)| 8 + (n.len() + 1).next_multiple_of(4))
            .sum();
        let mut out = Vec::new();
        out.extend_from_slice(&0x424A_5342u32.to_le_bytes());
        out.extend_from_slice(&[1, 0, 1, 0]);
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&(version_len as u32).to_le_bytes());
        out.extend_from_slice(METADATA_VERSION.as_bytes());
        out.resize(16 + version_len, 0);
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(&(streams.len() as u16).to_le_bytes());
        let mut at = out.len() + headers;
        let mut guid_at = 0;
        for (name, content) in &streams {
            if *name == "#GUID" {
                guid_at = at;
            }
            out.extend_from_slice(&(at as u32).to_le_bytes());
            out.extend_from_slice(&(content.len() as u32).to_le_bytes());
            out.extend_from_slice(name.as_bytes());
            out.resize(
                out.len() + (name.len() + 1).next_multiple_of(4) - name.len(),
                0,
            );
            at += content.len();
        }
        for (_, content) in &streams {
            out.extend_from_slice(content);
        }
        (out, guid_at)
    }

    /// The whole PE file.
    pub fn build(&self) -> Result<Vec<u8>, EmitError> {
        if self.kind == ImageKind::Exe && self.entry_point.is_none() {
            return Err(EmitError::NoEntryPoint);
        }
        let too_big = || EmitError::HeapFull { heap: "image" };
        // .text: IAT (8), CLI header, bodies, metadata, import directory and names, stub.
        let cli_rva = TEXT_RVA + 8;
        let body_rva = cli_rva + CLI_HEADER_LEN;
        let metadata_rva = (body_rva as usize + self.bodies.len()).next_multiple_of(4);
        let metadata_rva = u32::try_from(metadata_rva).map_err(|_| too_big())?;
        let (mut metadata, guid_at) = self.metadata(body_rva);
        let mvid = mvid(&metadata);
        metadata[guid_at..guid_at + 16].copy_from_slice(&mvid);
        let import_rva =
            u32::try_from(metadata_rva as usize + metadata.len()).map_err(|_| too_big())?;
        let ilt_rva = import_rva + 40;
        let hint_rva = ilt_rva + 8;
        let entry_name: &[u8] = match self.kind {
            ImageKind::Exe => b"_CorExeMain\0",
            ImageKind::Dll => b"_CorDllMain\0",
        };
        let dll_name_rva = (hint_rva + 2 + entry_name.len() as u32).next_multiple_of(2);
        let dll_name = b"mscoree.dll\0";
        // The stub `jmp [IAT]`: FF 25 and a 4-aligned absolute address.
        let stub_rva = (dll_name_rva + dll_name.len() as u32 + 2).next_multiple_of(4) - 2;
        let text_end = stub_rva + 6;
        let text_size = text_end - TEXT_RVA;
        let text_raw = text_size.next_multiple_of(FILE_ALIGNMENT);
        let reloc_rva = (TEXT_RVA + text_size).next_multiple_of(SECTION_ALIGNMENT);
        let reloc_size = 12u32;
        let reloc_raw = reloc_size.next_multiple_of(FILE_ALIGNMENT);
        let image_size = (reloc_rva + reloc_size).next_multiple_of(SECTION_ALIGNMENT);
        let text_file = HEADERS_LEN.next_multiple_of(FILE_ALIGNMENT);
        let reloc_file = text_file + text_raw;

        let mut f = Vec::with_capacity((reloc_file + reloc_raw) as usize);
        // DOS header: the magic and the PE header's offset are all a loader reads.
        f.extend_from_slice(b"MZ");
        f.resize(0x3C, 0);
        f.extend_from_slice(&0x80u32.to_le_bytes());
        f.resize(0x80, 0);
        f.extend_from_slice(b"PE\0\0");
        // COFF header: i386, two sections, no time stamp, no symbols.
        let dll_flag: u16 = if self.kind == ImageKind::Dll {
            0x2000
        } else {
            0
        };
        put16(&mut f, 0x014C);
        put16(&mut f, 2);
        put32(&mut f, 0);
        put32(&mut f, 0);
        put32(&mut f, 0);
        put16(&mut f, 224);
        put16(&mut f, 0x0102 | dll_flag);
        // PE32 optional header (II.25.2.3).
        put16(&mut f, 0x010B);
        f.extend_from_slice(&[8, 0]);
        put32(&mut f, text_raw); // SizeOfCode
        put32(&mut f, reloc_raw); // SizeOfInitializedData
        put32(&mut f, 0);
        put32(&mut f, stub_rva); // AddressOfEntryPoint
        put32(&mut f, TEXT_RVA); // BaseOfCode
        put32(&mut f, reloc_rva); // BaseOfData
        put32(&mut f, IMAGE_BASE);
        put32(&mut f, SECTION_ALIGNMENT);
        put32(&mut f, FILE_ALIGNMENT);
        for v in [4u16, 0, 0, 0, 4, 0] {
            put16(&mut f, v); // OS, image and subsystem versions
        }
        put32(&mut f, 0); // Win32VersionValue
        put32(&mut f, image_size);
        put32(&mut f, text_file); // SizeOfHeaders
        put32(&mut f, 0); // CheckSum
        put16(&mut f, 3); // console subsystem
        put16(&mut f, 0x8540); // dynamic base, NX, no SEH, terminal-server aware
        for v in [0x0010_0000u32, 0x1000, 0x0010_0000, 0x1000, 0, 16] {
            put32(&mut f, v); // stack and heap sizes, loader flags, directory count
        }
        let mut dirs = [(0u32, 0u32); 16];
        dirs[1] = (import_rva, 40 + 8 + 2 + entry_name.len() as u32); // imports
        dirs[5] = (reloc_rva, reloc_size); // base relocations
        dirs[12] = (TEXT_RVA, 8); // IAT
        dirs[14] = (cli_rva, CLI_HEADER_LEN); // CLI header
        for (rva, size) in dirs {
            put32(&mut f, rva);
            put32(&mut f, size);
        }
        // Section headers.
        section(
            &mut f,
            b".text\0\0\0",
            text_size,
            TEXT_RVA,
            text_raw,
            text_file,
            0x6000_0020,
        );
        section(
            &mut f,
            b".reloc\0\0",
            reloc_size,
            reloc_rva,
            reloc_raw,
            reloc_file,
            0x4200_0040,
        );
        f.resize(text_file as usize, 0);

        // .text
        let text_start = f.len();
        let at = |rva: u32| text_start + (rva - TEXT_RVA) as usize;
        put32(&mut f, hint_rva); // IAT
        put32(&mut f, 0);
        // CLI header (II.25.3.3): runtime 2.5, metadata, IL only, entry point token.
        put32(&mut f, CLI_HEADER_LEN);
        put16(&mut f, 2);
        put16(&mut f, 5);
        put32(&mut f, metadata_rva);
        put32(&mut f, metadata.len() as u32);
        put32(&mut f, 1);
        put32(&mut f, self.entry_point.map_or(0, |t| t.0));
        f.resize(at(body_rva), 0);
        f.extend_from_slice(&self.bodies);
        f.resize(at(metadata_rva), 0);
        f.extend_from_slice(&metadata);
        // Import directory: one DLL, then a zero entry.
        put32(&mut f, ilt_rva);
        put32(&mut f, 0);
        put32(&mut f, 0);
        put32(&mut f, dll_name_rva);
        put32(&mut f, TEXT_RVA);
        f.resize(f.len() + 20, 0);
        put32(&mut f, hint_rva); // import lookup table
        put32(&mut f, 0);
        put16(&mut f, 0); // hint
        f.extend_from_slice(entry_name);
        f.resize(at(dll_name_rva), 0);
        f.extend_from_slice(dll_name);
        f.resize(at(stub_rva), 0);
        f.extend_from_slice(&[0xFF, 0x25]);
        put32(&mut f, IMAGE_BASE + TEXT_RVA);
        f.resize(reloc_file as usize, 0);

        // .reloc: one block, the stub's absolute address (HIGHLOW), a padding entry.
        let page = (stub_rva + 2) & !0xFFF;
        put32(&mut f, page);
        put32(&mut f, reloc_size);
        put16(&mut f, 0x3000 | ((stub_rva + 2 - page) as u16));
        put16(&mut f, 0);
        f.resize((reloc_file + reloc_raw) as usize, 0);
        Ok(f)
    }
}

fn put16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn section(f: &mut Vec<u8>, name: &[u8; 8], size: u32, rva: u32, raw: u32, file: u32, flags: u32) {
    f.extend_from_slice(name);
    for v in [size, rva, raw, file, 0, 0, 0, flags] {
        put32(f, v);
    }
}

/// A version-4 style GUID from two FNV-1a hashes of the metadata: the same module, the same
/// MVID.
fn mvid(bytes: &[u8]) -> [u8; 16] {
    let hash = |seed: u64| {
        bytes.iter().fold(seed, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01B3)
        })
    };
    let mut g = [0u8; 16];
    g[..8].copy_from_slice(&hash(0xCBF2_9CE4_8422_2325).to_le_bytes());
    g[8..].copy_from_slice(&hash(0x8422_2325_CBF2_9CE4).to_le_bytes());
    g[7] = (g[7] & 0x0F) | 0x40;
    g[8] = (g[8] & 0x3F) | 0x80;
    g
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::Image;

    #[test]
    fn a_built_program_reads_back_with_its_rows_and_bodies() {
        let mut b = AssemblyBuilder::new("Hello", [1, 2, 3, 4], ImageKind::Exe).unwrap();
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
        assert_eq!(b.type_ref(corlib, "System", "Object").unwrap(), object);
        b.type_def(flags::TYPE_PUBLIC, "Demo", "Program", Some(object))
            .unwrap();
        let sig = method_sig(false, SigType::I4, &[]).unwrap();
        // Tiny body: ldc.i4.7; ret.
        let main = b
            .method(
                flags::METHOD_PUBLIC | flags::METHOD_STATIC,
                "Main",
                &sig,
                &[0x0A, 0x1D, 0x2A],
            )
            .unwrap();
        b.set_entry_point(main);
        let bytes = b.build().unwrap();
        assert_eq!(bytes, b.build().unwrap(), "same calls, same bytes");
        let image = Image::parse(&bytes).unwrap();
        let methods: Vec<_> = image.methods().collect();
        assert_eq!(methods.len(), 1);
        let m = &methods[0];
        assert_eq!(m.token(), main);
        let name = m.full_name().unwrap();
        assert_eq!(name, "Demo.Program::Main()");
        assert!(m.body_bytes().unwrap().starts_with(&[0x0A, 0x1D, 0x2A]));
        assert_eq!(crate::image::integrity::check(&image).len(), 0);
        let id = image.assembly_identity().unwrap().unwrap();
        assert_eq!((id.name.as_str(), id.version), ("Hello", [1, 2, 3, 4]));
        assert!(id.culture.is_empty() && id.public_key_or_token.is_empty());
    }

    #[test]
    fn array_and_primitive_signatures_encode_as_ii_23_2_says() {
        let t = Token::new(Table::TypeRef, 3);
        // static uint8[] (bool, char, native int, class T[], string[])
        let sig = method_sig(
            false,
            SigType::SzArray(&SigType::U1),
            &[
                SigType::Boolean,
                SigType::Char,
                SigType::IntPtr,
                SigType::ClassSzArray(t),
                SigType::SzArray(&SigType::String),
            ],
        )
        .unwrap();
        // TypeRef 3 as a TypeDefOrRef coded index: 3 << 2 | 1.
        assert_eq!(
            sig,
            [
                0x00, 5, 0x1D, 0x05, 0x02, 0x03, 0x18, 0x1D, 0x12, 0x0D, 0x1D, 0x0E
            ]
        );
        assert!(matches!(
            field_sig(SigType::SzArray(&SigType::Void)),
            Err(EmitError::VoidElement)
        ));
    }

    #[test]
    fn a_program_needs_an_entry_point() {
        let b = AssemblyBuilder::new("NoMain", [0; 4], ImageKind::Exe).unwrap();
        assert!(matches!(b.build(), Err(EmitError::NoEntryPoint)));
        let lib = AssemblyBuilder::new("Lib", [0; 4], ImageKind::Dll).unwrap();
        Image::parse(&lib.build().unwrap()).unwrap();
    }
}
