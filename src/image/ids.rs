//! The names of metadata rows: table numbers, tokens and coded indexes (ECMA-335 II.22,
//! II.24.2.6). They depend on nothing else in the image, so errors, signatures and the table
//! stream can all name rows without depending on each other.

/// Metadata tables by number (II.22).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[repr(u8)]
pub enum Table {
    /// II.22.30 Module: the one row naming this module and its MVID.
    Module = 0x00,
    /// II.22.38 TypeRef: types referenced by resolution scope (module, module ref, assembly ref
    /// or enclosing type), name and namespace.
    TypeRef = 0x01,
    /// II.22.37 TypeDef: types defined in this module; each owns the run of Field and MethodDef
    /// rows from its list columns up to the next type's.
    TypeDef = 0x02,
    /// Not in ECMA-335: the CLR's indirection in uncompressed (`#-`) metadata, one Field rid per
    /// row; when present, TypeDef field lists run over its rows instead of Field's.
    FieldPtr = 0x03,
    /// II.22.15 Field: fields defined in this module (flags, name, signature).
    Field = 0x04,
    /// Not in ECMA-335: the CLR's indirection in uncompressed (`#-`) metadata, one MethodDef rid
    /// per row; when present, TypeDef method lists run over its rows instead of MethodDef's.
    MethodPtr = 0x05,
    /// II.22.26 MethodDef: methods defined in this module, with the RVA of each body (0 for none).
    MethodDef = 0x06,
    /// Not in ECMA-335: the CLR's indirection in uncompressed (`#-`) metadata, one Param rid per
    /// row.
    ParamPtr = 0x07,
    /// II.22.33 Param: names and flags of parameters (sequence 0 is the return value).
    Param = 0x08,
    /// II.22.23 InterfaceImpl: the interfaces each TypeDef implements.
    InterfaceImpl = 0x09,
    /// II.22.25 MemberRef: references to fields and methods by parent, name and signature
    /// (including vararg call-site signatures of this module's own methods).
    MemberRef = 0x0A,
    /// II.22.9 Constant: compile-time values of fields, parameters and properties.
    Constant = 0x0B,
    /// II.22.10 CustomAttribute: custom attributes by parent, constructor and value blob.
    CustomAttribute = 0x0C,
    /// II.22.17 FieldMarshal: marshalling descriptors of fields and parameters.
    FieldMarshal = 0x0D,
    /// II.22.11 DeclSecurity: declarative security permission sets.
    DeclSecurity = 0x0E,
    /// II.22.8 ClassLayout: explicit packing and size of a type.
    ClassLayout = 0x0F,
    /// II.22.16 FieldLayout: explicit offsets of fields.
    FieldLayout = 0x10,
    /// II.22.36 StandAloneSig: signatures no member owns: local-variable signatures of method
    /// bodies and the call-site signatures of `calli`.
    StandAloneSig = 0x11,
    /// II.22.12 EventMap: which TypeDef owns which run of Event rows.
    EventMap = 0x12,
    /// Not in ECMA-335: the CLR's indirection in uncompressed (`#-`) metadata, one Event rid per
    /// row.
    EventPtr = 0x13,
    /// II.22.13 Event: events (flags, name, delegate type).
    Event = 0x14,
    /// II.22.35 PropertyMap: which TypeDef owns which run of Property rows.
    PropertyMap = 0x15,
    /// Not in ECMA-335: the CLR's indirection in uncompressed (`#-`) metadata, one Property rid per
    /// row.
    PropertyPtr = 0x16,
    /// II.22.34 Property: properties (flags, name, signature).
    Property = 0x17,
    /// II.22.28 MethodSemantics: the accessor methods of events and properties.
    MethodSemantics = 0x18,
    /// II.22.27 MethodImpl: explicit overrides (`.override`) of a type.
    MethodImpl = 0x19,
    /// II.22.31 ModuleRef: other modules of the assembly and native libraries named by ImplMap.
    ModuleRef = 0x1A,
    /// II.22.39 TypeSpec: constructed types (generic instances, arrays, pointers, generic
    /// parameters) given by a signature blob.
    TypeSpec = 0x1B,
    /// II.22.22 ImplMap: P/Invoke mappings of methods to native entry points.
    ImplMap = 0x1C,
    /// II.22.18 FieldRVA: the RVA of the initial data of a static field.
    FieldRva = 0x1D,
    /// Not in ECMA-335: the CLR's edit-and-continue log (token, function code) of a metadata delta.
    EncLog = 0x1E,
    /// Not in ECMA-335: the CLR's edit-and-continue token map of a metadata delta.
    EncMap = 0x1F,
    /// II.22.2 Assembly: the assembly manifest (at most one row; none in a netmodule).
    Assembly = 0x20,
    /// II.22.4 AssemblyProcessor: should not be emitted; ignored by the CLI when present.
    AssemblyProcessor = 0x21,
    /// II.22.3 AssemblyOS: should not be emitted; ignored by the CLI when present.
    AssemblyOs = 0x22,
    /// II.22.5 AssemblyRef: referenced assemblies by name, version, culture and public key (token).
    AssemblyRef = 0x23,
    /// II.22.7 AssemblyRefProcessor: should not be emitted; ignored by the CLI when present.
    AssemblyRefProcessor = 0x24,
    /// II.22.6 AssemblyRefOS: should not be emitted; ignored by the CLI when present.
    AssemblyRefOs = 0x25,
    /// II.22.19 File: the other files of a multi-file assembly.
    File = 0x26,
    /// II.22.14 ExportedType: types defined in other modules of the assembly, and type forwarders.
    ExportedType = 0x27,
    /// II.22.24 ManifestResource: resources embedded in this file or found in another.
    ManifestResource = 0x28,
    /// II.22.32 NestedClass: the enclosing TypeDef of each nested TypeDef.
    NestedClass = 0x29,
    /// II.22.20 GenericParam: generic parameters of types and methods.
    GenericParam = 0x2A,
    /// II.22.29 MethodSpec: instantiations of generic methods.
    MethodSpec = 0x2B,
    /// II.22.21 GenericParamConstraint: the constraints of each generic parameter.
    GenericParamConstraint = 0x2C,
}

/// Number of table kinds ECMA-335 defines (0x00..=0x2C).
pub const TABLE_COUNT: usize = 0x2D;

impl Table {
    /// Every table, in number order (`Table::ALL[n] as u8 == n`).
    pub const ALL: [Table; TABLE_COUNT] = {
        use Table::*;
        [
            Module,
            TypeRef,
            TypeDef,
            FieldPtr,
            Field,
            MethodPtr,
            MethodDef,
            ParamPtr,
            Param,
            InterfaceImpl,
            MemberRef,
            Constant,
            CustomAttribute,
            FieldMarshal,
            DeclSecurity,
            ClassLayout,
            FieldLayout,
            StandAloneSig,
            EventMap,
            EventPtr,
            Event,
            PropertyMap,
            PropertyPtr,
            Property,
            MethodSemantics,
            MethodImpl,
            ModuleRef,
            TypeSpec,
            ImplMap,
            FieldRva,
            EncLog,
            EncMap,
            Assembly,
            AssemblyProcessor,
            AssemblyOs,
            AssemblyRef,
            AssemblyRefProcessor,
            AssemblyRefOs,
            File,
            ExportedType,
            ManifestResource,
            NestedClass,
            GenericParam,
            MethodSpec,
            GenericParamConstraint,
        ]
    };

    /// The table numbered `n`; `None` past 0x2C.
    pub fn from_u8(n: u8) -> Option<Table> {
        Table::ALL.get(usize::from(n)).copied()
    }
}

/// A metadata token (II.24.2.6, III.1.9): table number in the high byte, row id (1-based) in the
/// low 24 bits. Row id 0 is the null token of its table. `ldstr` tokens carry
/// [`USER_STRING_TABLE`] in the high byte and a `#US` offset instead of a row id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct Token(pub u32);

/// Table byte of `ldstr` tokens: the low 24 bits are an offset into `#US`.
pub const USER_STRING_TABLE: u8 = 0x70;

impl Token {
    /// The token of row `rid` of `table`; bits of `rid` above the low 24 are dropped.
    pub fn new(table: Table, rid: u32) -> Token {
        Token((u32::from(table as u8) << 24) | (rid & 0x00FF_FFFF))
    }
    /// The high byte as stored, whether or not it names a table (0x70 for `ldstr`).
    pub fn table_byte(self) -> u8 {
        (self.0 >> 24) as u8
    }
    /// The table of the high byte; `None` when it names none (user strings, garbage).
    pub fn table(self) -> Option<Table> {
        Table::from_u8(self.table_byte())
    }
    /// The row id (1-based), or the `#US` offset of an `ldstr` token: the low 24 bits.
    pub fn rid(self) -> u32 {
        self.0 & 0x00FF_FFFF
    }
    /// Whether the row id is 0: a null reference (e.g. the `Extends` of `<Module>`).
    pub fn is_null(self) -> bool {
        self.rid() == 0
    }
}

impl std::fmt::Display for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#010x}", self.0)
    }
}

/// Coded indexes (II.24.2.6): a tag in the low bits picks one of several tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum CodedIndex {
    /// TypeDef, TypeRef or TypeSpec (2 tag bits): base types, interfaces, constraints.
    TypeDefOrRef,
    /// Field, Param or Property (2 tag bits): the parent of a Constant.
    HasConstant,
    /// Any of 22 tables (5 tag bits): the parent of a CustomAttribute.
    HasCustomAttribute,
    /// Field or Param (1 tag bit): the parent of a FieldMarshal.
    HasFieldMarshal,
    /// TypeDef, MethodDef or Assembly (2 tag bits): the parent of a DeclSecurity.
    HasDeclSecurity,
    /// TypeDef, TypeRef, ModuleRef, MethodDef or TypeSpec (3 tag bits): the class of a MemberRef.
    MemberRefParent,
    /// Event or Property (1 tag bit): the association of a MethodSemantics.
    HasSemantics,
    /// MethodDef or MemberRef (1 tag bit): MethodImpl bodies and declarations, MethodSpec methods.
    MethodDefOrRef,
    /// Field or MethodDef (1 tag bit): the member of an ImplMap.
    MemberForwarded,
    /// File, AssemblyRef or ExportedType (2 tag bits): where an exported type or resource lives.
    Implementation,
    /// MethodDef or MemberRef at tags 2 and 3, tags 0, 1 and 4 unused (3 tag bits): the
    /// constructor of a CustomAttribute.
    CustomAttributeType,
    /// Module, ModuleRef, AssemblyRef or TypeRef (2 tag bits): the scope of a TypeRef.
    ResolutionScope,
    /// TypeDef or MethodDef (1 tag bit): the owner of a GenericParam.
    TypeOrMethodDef,
}

impl CodedIndex {
    /// Tables by tag; `None` marks tags ECMA-335 leaves unused.
    pub fn targets(self) -> &'static [Option<Table>] {
        use Table::*;
        match self {
            CodedIndex::TypeDefOrRef => &[Some(TypeDef), Some(TypeRef), Some(TypeSpec)],
            CodedIndex::HasConstant => &[Some(Field), Some(Param), Some(Property)],
            CodedIndex::HasCustomAttribute => &[
                Some(MethodDef),
                Some(Field),
                Some(TypeRef),
                Some(TypeDef),
                Some(Param),
                Some(InterfaceImpl),
                Some(MemberRef),
                Some(Module),
                Some(DeclSecurity),
                Some(Property),
                Some(Event),
                Some(StandAloneSig),
                Some(ModuleRef),
                Some(TypeSpec),
                Some(Assembly),
                Some(AssemblyRef),
                Some(File),
                Some(ExportedType),
                Some(ManifestResource),
                Some(GenericParam),
                Some(GenericParamConstraint),
                Some(MethodSpec),
            ],
            CodedIndex::HasFieldMarshal => &[Some(Field), Some(Param)],
            CodedIndex::HasDeclSecurity => &[Some(TypeDef), Some(MethodDef), Some(Assembly)],
            CodedIndex::MemberRefParent => &[
                Some(TypeDef),
                Some(TypeRef),
                Some(ModuleRef),
                Some(MethodDef),
                Some(TypeSpec),
            ],
            CodedIndex::HasSemantics => &[Some(Event), Some(Property)],
            CodedIndex::MethodDefOrRef => &[Some(MethodDef), Some(MemberRef)],
            CodedIndex::MemberForwarded => &[Some(Field), Some(MethodDef)],
            CodedIndex::Implementation => &[Some(File), Some(AssemblyRef), Some(ExportedType)],
            CodedIndex::CustomAttributeType => {
                &[None, None, Some(MethodDef), Some(MemberRef), None]
            }
            CodedIndex::ResolutionScope => &[
                Some(Module),
                Some(ModuleRef),
                Some(AssemblyRef),
                Some(TypeRef),
            ],
            CodedIndex::TypeOrMethodDef => &[Some(TypeDef), Some(MethodDef)],
        }
    }

    /// Bits of tag: enough to number every target.
    pub fn tag_bits(self) -> u32 {
        let n = self.targets().len() as u32;
        u32::BITS - (n - 1).leading_zeros()
    }

    /// The stored value of `token` in a column of this kind: its row id shifted past the tag
    /// bits, the tag naming its table. `None` when the kind cannot name the token's table, or
    /// the row id does not fit beside the tag.
    pub fn encode(self, token: Token) -> Option<u32> {
        let table = token.table()?;
        let tag = self.targets().iter().position(|t| *t == Some(table))? as u32;
        let bits = self.tag_bits();
        let rid = token.rid();
        (rid < 1 << (32 - bits)).then(|| (rid << bits) | tag)
    }

    /// Splits a stored value into a token; `None` for a tag naming no table.
    pub fn decode(self, value: u32) -> Option<Token> {
        let bits = self.tag_bits();
        let tag = value & ((1 << bits) - 1);
        let table = (*self.targets().get(tag as usize)?)?;
        Some(Token::new(table, value >> bits))
    }
}
