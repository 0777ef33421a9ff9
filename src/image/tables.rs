//! The metadata table stream (`#~` or `#-`, ECMA-335 II.24.2.6) and the table schema of II.22.
//!
//! Parsing computes, for every table 0x00–0x2C, its row count, row size, column offsets and
//! file offset, so any row of any table is found in O(1) and read without copying.

use super::error::ImageError;
use super::read::{le_u16, le_u32, le_u64};

pub use super::ids::{CodedIndex, TABLE_COUNT, Table, Token, USER_STRING_TABLE};

/// Kinds of column (II.22): fixed-size constants, heap indexes, simple and coded indexes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Column {
    /// A 2-byte constant (flags, sequence numbers, version parts).
    U16,
    /// A 4-byte constant (flags, RVAs, offsets).
    U32,
    /// An offset into `#Strings`: 2 or 4 bytes by heap-size flag.
    Strings,
    /// A 1-based index into `#GUID` (16-byte entries): 2 or 4 bytes by heap-size flag.
    Guid,
    /// An offset into `#Blob`: 2 or 4 bytes by heap-size flag.
    Blob,
    /// A row id of the given table: 4 bytes once that table has 2^16 rows or more.
    Index(Table),
    /// A coded index: 4 bytes once a target table's rows no longer fit beside the tag in 16 bits.
    Coded(CodedIndex),
}

/// Columns of each table, in stored order.
pub fn schema(table: Table) -> &'static [Column] {
    use CodedIndex as C;
    use Column::*;
    use Table as T;
    match table {
        T::Module => &[U16, Strings, Guid, Guid, Guid],
        T::TypeRef => &[Coded(C::ResolutionScope), Strings, Strings],
        T::TypeDef => &[
            U32,
            Strings,
            Strings,
            Coded(C::TypeDefOrRef),
            Index(T::Field),
            Index(T::MethodDef),
        ],
        T::FieldPtr => &[Index(T::Field)],
        T::Field => &[U16, Strings, Blob],
        T::MethodPtr => &[Index(T::MethodDef)],
        T::MethodDef => &[U32, U16, U16, Strings, Blob, Index(T::Param)],
        T::ParamPtr => &[Index(T::Param)],
        T::Param => &[U16, U16, Strings],
        T::InterfaceImpl => &[Index(T::TypeDef), Coded(C::TypeDefOrRef)],
        T::MemberRef => &[Coded(C::MemberRefParent), Strings, Blob],
        // Type (1 byte) plus a padding byte, stored as one 2-byte column.
        T::Constant => &[U16, Coded(C::HasConstant), Blob],
        T::CustomAttribute => &[
            Coded(C::HasCustomAttribute),
            Coded(C::CustomAttributeType),
            Blob,
        ],
        T::FieldMarshal => &[Coded(C::HasFieldMarshal), Blob],
        T::DeclSecurity => &[U16, Coded(C::HasDeclSecurity), Blob],
        T::ClassLayout => &[U16, U32, Index(T::TypeDef)],
        T::FieldLayout => &[U32, Index(T::Field)],
        T::StandAloneSig => &[Blob],
        T::EventMap => &[Index(T::TypeDef), Index(T::Event)],
        T::EventPtr => &[Index(T::Event)],
        T::Event => &[U16, Strings, Coded(C::TypeDefOrRef)],
        T::PropertyMap => &[Index(T::TypeDef), Index(T::Property)],
        T::PropertyPtr => &[Index(T::Property)],
        T::Property => &[U16, Strings, Blob],
        T::MethodSemantics => &[U16, Index(T::MethodDef), Coded(C::HasSemantics)],
        T::MethodImpl => &[
            Index(T::TypeDef),
            Coded(C::MethodDefOrRef),
            Coded(C::MethodDefOrRef),
        ],
        T::ModuleRef => &[Strings],
        T::TypeSpec => &[Blob],
        T::ImplMap => &[U16, Coded(C::MemberForwarded), Strings, Index(T::ModuleRef)],
        T::FieldRva => &[U32, Index(T::Field)],
        T::EncLog => &[U32, U32],
        T::EncMap => &[U32],
        T::Assembly => &[U32, U16, U16, U16, U16, U32, Blob, Strings, Strings],
        T::AssemblyProcessor => &[U32],
        T::AssemblyOs => &[U32, U32, U32],
        T::AssemblyRef => &[U16, U16, U16, U16, U32, Blob, Strings, Strings, Blob],
        T::AssemblyRefProcessor => &[U32, Index(T::AssemblyRef)],
        T::AssemblyRefOs => &[U32, U32, U32, Index(T::AssemblyRef)],
        T::File => &[U32, Strings, Blob],
        T::ExportedType => &[U32, U32, Strings, Strings, Coded(C::Implementation)],
        T::ManifestResource => &[U32, U32, Strings, Coded(C::Implementation)],
        T::NestedClass => &[Index(T::TypeDef), Index(T::TypeDef)],
        T::GenericParam => &[U16, U16, Coded(C::TypeOrMethodDef), Strings],
        T::MethodSpec => &[Coded(C::MethodDefOrRef), Blob],
        T::GenericParamConstraint => &[Index(T::GenericParam), Coded(C::TypeDefOrRef)],
    }
}

/// The stored width (2 or 4 bytes) of a column, given every table's row count and the
/// heap-size flags (II.24.2.6): heap indexes are wide when their flag is set, a simple index
/// when its table has 2^16 rows or more, a coded index when a target table has too many rows
/// to leave room for the tag in 16 bits.
pub fn column_width(col: Column, rows: &[u32; TABLE_COUNT], heap_sizes: u8) -> u8 {
    let heap = |flag: u8| if heap_sizes & flag != 0 { 4 } else { 2 };
    match col {
        Column::U16 => 2,
        Column::U32 => 4,
        Column::Strings => heap(heap_sizes::BIG_STRINGS),
        Column::Guid => heap(heap_sizes::BIG_GUID),
        Column::Blob => heap(heap_sizes::BIG_BLOB),
        Column::Index(t) => {
            if rows[t as usize] < 0x1_0000 {
                2
            } else {
                4
            }
        }
        Column::Coded(c) => {
            let limit = 1u32 << (16 - c.tag_bits());
            let max = c
                .targets()
                .iter()
                .flatten()
                .map(|&t| rows[t as usize])
                .max()
                .unwrap_or(0);
            if max < limit { 2 } else { 4 }
        }
    }
}

/// Most columns any table has (Assembly and AssemblyRef).
pub const MAX_COLUMNS: usize = 9;

/// heap-size flags (II.24.2.6) and the CLR's extension flags.
pub mod heap_sizes {
    /// `#Strings` indexes are 4 bytes wide (II.24.2.6).
    pub const BIG_STRINGS: u8 = 0x01;
    /// `#GUID` indexes are 4 bytes wide (II.24.2.6).
    pub const BIG_GUID: u8 = 0x02;
    /// `#Blob` indexes are 4 bytes wide (II.24.2.6).
    pub const BIG_BLOB: u8 = 0x04;
    /// CLR extension, not in ECMA-335: a padding bit of the metadata engine. Read and kept, never
    /// interpreted: it changes no column width.
    pub const PADDING: u8 = 0x08;
    /// CLR extension, not in ECMA-335: the stream holds only edit-and-continue deltas.
    pub const DELTA_ONLY: u8 = 0x20;
    /// Four bytes of extra data follow the row counts.
    pub const EXTRA_DATA: u8 = 0x40;
    /// CLR extension, not in ECMA-335: rows may be marked deleted (their names start with
    /// `_Deleted`).
    pub const HAS_DELETE: u8 = 0x80;
}

/// Where one table lives and how its rows are laid out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct TableInfo {
    /// Row count from the stream header (0 for a table not present).
    pub rows: u32,
    /// Bytes per row: the sum of the column widths, which depend on the heap-size flags and the
    /// row counts of the tables indexed.
    pub row_size: u32,
    /// File offset of row 1 (where the table would start when it has no rows).
    pub offset: usize,
    col_offset: [u8; MAX_COLUMNS],
    col_width: [u8; MAX_COLUMNS],
}

impl TableInfo {
    /// Offset within a row and width (2 or 4) of column `col`.
    pub fn column(&self, col: usize) -> Option<(usize, usize)> {
        let w = *self.col_width.get(col)?;
        (w != 0).then(|| (usize::from(self.col_offset[col]), usize::from(w)))
    }
}

/// The parsed header of the table stream and the layout of every table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TablesHeader {
    /// MajorVersion of the table schema (ECMA-335 says 2).
    pub major_version: u8,
    /// MinorVersion of the table schema (ECMA-335 says 0).
    pub minor_version: u8,
    /// HeapSizes: the [`heap_sizes`] flags, kept as stored.
    pub heap_sizes: u8,
    /// Valid: bit `n` set when table `n` is present (a row count follows for each set bit).
    pub valid: u64,
    /// Sorted: bit `n` set when table `n` is sorted by its key column (II.22).
    pub sorted: u64,
    /// The stream was `#-` (uncompressed, may hold Ptr and ENC tables).
    pub uncompressed: bool,
    /// File offset just past the last table.
    pub end: usize,
    /// The layout of every table, indexed by table number (absent tables have no rows).
    pub tables: [TableInfo; TABLE_COUNT],
}

impl TablesHeader {
    /// Parses the header at file offset `start` of a stream of `size` bytes within `file`.
    pub fn parse(
        file: &[u8],
        start: usize,
        size: usize,
        uncompressed: bool,
    ) -> Result<Self, ImageError> {
        let stream_end =
            start
                .checked_add(size)
                .filter(|&e| e <= file.len())
                .ok_or(ImageError::Truncated {
                    what: "table stream",
                    offset: start,
                    needed: size,
                })?;
        let stream = &file[..stream_end];
        let header = |what| ImageError::Truncated {
            what,
            offset: start,
            needed: 24,
        };
        let major_version = *stream.get(start + 4).ok_or(header("table stream header"))?;
        let minor_version = *stream.get(start + 5).ok_or(header("table stream header"))?;
        let heap_sizes = *stream.get(start + 6).ok_or(header("table stream header"))?;
        let valid = le_u64(stream, start + 8).ok_or(header("table stream header"))?;
        let sorted = le_u64(stream, start + 16).ok_or(header("table stream header"))?;

        let mut rows = [0u32; TABLE_COUNT];
        let mut pos = start + 24;
        for bit in 0..64u32 {
            if valid & (1u64 << bit) == 0 {
                continue;
            }
            let count = le_u32(stream, pos).ok_or(ImageError::Truncated {
                what: "table row counts",
                offset: pos,
                needed: 4,
            })?;
            match rows.get_mut(bit as usize) {
                Some(r) => *r = count,
                None => {
                    return Err(ImageError::UnknownTable {
                        table: bit as u8,
                        offset: start + 8,
                    });
                }
            }
            pos += 4;
        }
        if heap_sizes & heap_sizes::EXTRA_DATA != 0 {
            pos = pos
                .checked_add(4)
                .filter(|&p| p <= stream_end)
                .ok_or(ImageError::Truncated {
                    what: "table stream extra data",
                    offset: pos,
                    needed: 4,
                })?;
        }

        let mut tables = [TableInfo::default(); TABLE_COUNT];
        for table in Table::ALL {
            let info = &mut tables[table as usize];
            let mut row_size = 0u8;
            for (i, col) in schema(table).iter().enumerate() {
                let w = column_width(*col, &rows, heap_sizes);
                info.col_offset[i] = row_size;
                info.col_width[i] = w;
                row_size += w;
            }
            info.rows = rows[table as usize];
            info.row_size = u32::from(row_size);
            info.offset = pos;
            let bytes = u64::from(info.rows) * u64::from(info.row_size);
            let end = (pos as u64)
                .checked_add(bytes)
                .filter(|&e| e <= stream_end as u64);
            pos = match end {
                Some(e) => e as usize,
                None => {
                    return Err(ImageError::TableTooLarge {
                        table,
                        rows: info.rows,
                        row_size: info.row_size,
                        offset: pos,
                        available: stream_end - pos,
                    });
                }
            };
        }

        Ok(TablesHeader {
            major_version,
            minor_version,
            heap_sizes,
            valid,
            sorted,
            uncompressed,
            end: pos,
            tables,
        })
    }

    /// The layout of `table`.
    pub fn info(&self, table: Table) -> &TableInfo {
        &self.tables[table as usize]
    }

    /// The row count of `table` (0 when absent).
    pub fn rows(&self, table: Table) -> u32 {
        self.tables[table as usize].rows
    }

    /// Whether the Sorted bit of `table` is set, so a binary search on its key column is valid.
    pub fn is_sorted(&self, table: Table) -> bool {
        self.sorted & (1u64 << (table as u8)) != 0
    }

    /// Whether `token` names an existing row (rid 1..=rows) of a defined table.
    pub fn row_exists(&self, token: Token) -> bool {
        match token.table() {
            Some(t) => token.rid() >= 1 && token.rid() <= self.rows(t),
            None => false,
        }
    }

    /// Reads column `col` of row `rid` of `table`.
    ///
    /// Hot (every row read goes through here): error values are built only on failure, since
    /// `ImageError` has drop glue that an eager `ok_or` would run on every success too.
    #[inline]
    pub fn cell(&self, file: &[u8], table: Table, rid: u32, col: usize) -> Result<u32, ImageError> {
        let info = self.info(table);
        let column = if rid == 0 || rid > info.rows {
            None
        } else {
            info.column(col)
        };
        let Some((off, width)) = column else {
            return Err(ImageError::RowOutOfRange {
                table,
                rid,
                rows: info.rows,
            });
        };
        // In range by construction: parse checked rows * row_size against the stream.
        let at = info.offset + (rid as usize - 1) * info.row_size as usize + off;
        let v = if width == 2 {
            le_u16(file, at).map(u32::from)
        } else {
            le_u32(file, at)
        };
        match v {
            Some(v) => Ok(v),
            None => Err(ImageError::Truncated {
                what: "table row",
                offset: at,
                needed: width,
            }),
        }
    }

    /// The first `N` columns of a row, with one range check for the whole row: the typed row
    /// readers of hot tables use this rather than one [`Self::cell`] per column.
    #[inline]
    pub fn row<const N: usize>(
        &self,
        file: &[u8],
        table: Table,
        rid: u32,
    ) -> Result<[u32; N], ImageError> {
        let info = self.info(table);
        if rid == 0 || rid > info.rows {
            return Err(ImageError::RowOutOfRange {
                table,
                rid,
                rows: info.rows,
            });
        }
        let at = info.offset + (rid as usize - 1) * info.row_size as usize;
        let Some(row) = file.get(at..at + info.row_size as usize) else {
            return Err(ImageError::Truncated {
                what: "table row",
                offset: at,
                needed: info.row_size as usize,
            });
        };
        let mut out = [0; N];
        for (col, v) in out.iter_mut().enumerate() {
            let off = usize::from(info.col_offset.get(col).copied().unwrap_or(0));
            // Columns lie inside the row by construction (row_size is their sum).
            *v = match info.col_width.get(col) {
                Some(2) => le_u16(row, off).map_or(0, u32::from),
                Some(4) => le_u32(row, off).unwrap_or(0),
                _ => 0,
            };
        }
        Ok(out)
    }

    /// Reads a coded-index column and splits it into a token.
    pub fn coded(
        &self,
        file: &[u8],
        table: Table,
        rid: u32,
        col: usize,
        kind: CodedIndex,
    ) -> Result<Token, ImageError> {
        let v = self.cell(file, table, rid, col)?;
        match kind.decode(v) {
            Some(t) => Ok(t),
            None => Err(ImageError::BadCodedIndex {
                kind,
                value: v,
                table,
                rid,
            }),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Typed rows. Heap indexes are kept as raw offsets; resolve them through the heaps.

/// A row of Module (II.22.30).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ModuleRow {
    /// Generation: reserved, ECMA-335 says 0.
    pub generation: u16,
    /// Name: `#Strings` offset of the module's file name.
    pub name: u32,
    /// Mvid: 1-based `#GUID` index of the module version id.
    pub mvid: u32,
    /// EncId: `#GUID` index, reserved (0) outside edit-and-continue.
    pub enc_id: u32,
    /// EncBaseId: `#GUID` index, reserved (0) outside edit-and-continue.
    pub enc_base_id: u32,
}

/// A row of TypeRef (II.22.38).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct TypeRefRow {
    /// ResolutionScope: the Module, ModuleRef, AssemblyRef or enclosing TypeRef that defines the
    /// type; a null token sends the lookup to ExportedType.
    pub resolution_scope: Token,
    /// TypeName: `#Strings` offset.
    pub name: u32,
    /// TypeNamespace: `#Strings` offset (0 for the empty namespace, as for nested types).
    pub namespace: u32,
}

/// A row of TypeDef (II.22.37).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct TypeDefRow {
    /// Flags: TypeAttributes (II.23.1.15).
    pub flags: u32,
    /// TypeName: `#Strings` offset.
    pub name: u32,
    /// TypeNamespace: `#Strings` offset.
    pub namespace: u32,
    /// Extends: the base type (TypeDef, TypeRef or TypeSpec); null for interfaces,
    /// `System.Object` and `<Module>`.
    pub extends: Token,
    /// FieldList: the first of the type's run of fields, a Field rid (a FieldPtr rid when that
    /// table is present); the run ends where the next type's starts.
    pub field_list: u32,
    /// MethodList: the first of the type's run of methods, a MethodDef rid (a MethodPtr rid when
    /// that table is present); the run ends where the next type's starts.
    pub method_list: u32,
}

/// A row of Field (II.22.15).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct FieldRow {
    /// Flags: FieldAttributes (II.23.1.5).
    pub flags: u16,
    /// Name: `#Strings` offset.
    pub name: u32,
    /// Signature: `#Blob` offset of a FieldSig (II.23.2.4).
    pub signature: u32,
}

/// A row of MethodDef (II.22.26).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct MethodDefRow {
    /// RVA of the method body's header; 0 for a method without IL (abstract, `extern`,
    /// runtime- or internally implemented). Bodies may be shared by several methods.
    pub rva: u32,
    /// ImplFlags: MethodImplAttributes (II.23.1.11).
    pub impl_flags: u16,
    /// Flags: MethodAttributes (II.23.1.10).
    pub flags: u16,
    /// Name: `#Strings` offset.
    pub name: u32,
    /// Signature: `#Blob` offset of a MethodDefSig (II.23.2.1).
    pub signature: u32,
    /// ParamList: the first of the method's run of Param rows (a ParamPtr rid when that table is
    /// present); the run ends where the next method's starts.
    pub param_list: u32,
}

/// A row of Param (II.22.33).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ParamRow {
    /// Flags: ParamAttributes (II.23.1.13).
    pub flags: u16,
    /// Sequence: 0 for the return value, 1 for the first parameter, and so on.
    pub sequence: u16,
    /// Name: `#Strings` offset (0 for an unnamed parameter).
    pub name: u32,
}

/// A row of MemberRef (II.22.25).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct MemberRefRow {
    /// Class: the MemberRefParent (TypeDef, TypeRef, ModuleRef, MethodDef for a vararg call site,
    /// or TypeSpec) that declares the member.
    pub class: Token,
    /// Name: `#Strings` offset.
    pub name: u32,
    /// Signature: `#Blob` offset of a MethodRefSig (II.23.2.2) or a FieldSig (II.23.2.4).
    pub signature: u32,
}

/// A row of StandAloneSig (II.22.36).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct StandAloneSigRow {
    /// Signature: `#Blob` offset of a LocalVarSig (II.23.2.6, a fat header's LocalVarSigTok) or
    /// a StandAloneMethodSig (II.23.2.3, the operand of `calli`).
    pub signature: u32,
}

/// A row of TypeSpec (II.22.39).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct TypeSpecRow {
    /// Signature: `#Blob` offset of a TypeSpec signature (II.23.2.14).
    pub signature: u32,
}

/// A row of MethodSpec (II.22.29).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct MethodSpecRow {
    /// Method: the generic MethodDef or MemberRef instantiated.
    pub method: Token,
    /// Instantiation: `#Blob` offset of the MethodSpec signature (II.23.2.15).
    pub instantiation: u32,
}

/// A row of NestedClass (II.22.32).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct NestedClassRow {
    /// NestedClass: TypeDef rid of the nested type (the table's sort key).
    pub nested_class: u32,
    /// EnclosingClass: TypeDef rid of the type it is nested in.
    pub enclosing_class: u32,
}

/// A row of Assembly (II.22.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct AssemblyRow {
    /// HashAlgId: AssemblyHashAlgorithm (II.23.1.1).
    pub hash_alg_id: u32,
    /// MajorVersion, MinorVersion, BuildNumber, RevisionNumber.
    pub version: [u16; 4],
    /// Flags: AssemblyFlags (II.23.1.2).
    pub flags: u32,
    /// PublicKey: `#Blob` offset of the full public key (0 for none).
    pub public_key: u32,
    /// Name: `#Strings` offset of the simple name.
    pub name: u32,
    /// Culture: `#Strings` offset (0 for the neutral culture).
    pub culture: u32,
}

/// A row of AssemblyRef (II.22.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct AssemblyRefRow {
    /// MajorVersion, MinorVersion, BuildNumber, RevisionNumber.
    pub version: [u16; 4],
    /// Flags: AssemblyFlags (II.23.1.2); PublicKey (0x0001) says whether the blob below is a
    /// full key rather than a token.
    pub flags: u32,
    /// PublicKeyOrToken: `#Blob` offset of the full public key or its 8-byte token (0 for none).
    pub public_key_or_token: u32,
    /// Name: `#Strings` offset of the simple name.
    pub name: u32,
    /// Culture: `#Strings` offset (0 for the neutral culture).
    pub culture: u32,
    /// HashValue: `#Blob` offset (usually 0).
    pub hash_value: u32,
}

/// A row of ImplMap (II.22.22): the native entry point of a P/Invoke method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ImplMapRow {
    /// MappingFlags: PInvokeAttributes (II.23.1.8): character set, calling convention, …
    pub flags: u16,
    /// MemberForwarded: the MethodDef (or Field) it maps.
    pub member: Token,
    /// ImportName: `#Strings` offset of the entry point's name.
    pub import_name: u32,
    /// ImportScope: the ModuleRef row naming the native library.
    pub import_scope: u32,
}

/// Typed, zero-copy access to the rows of one image's tables.
#[derive(Clone, Copy)]
pub struct Tables<'a> {
    /// The whole image file: [`TableInfo::offset`]s are file offsets into it.
    pub file: &'a [u8],
    /// The layout parsed from this file's table stream.
    pub header: &'a TablesHeader,
    /// The image's inverses of the lists that lookups would otherwise scan; without them
    /// (tables made from a header and a file alone) every lookup scans.
    pub(crate) lists: Option<&'a ListIndex>,
}

/// Inverses of the tables a lookup would otherwise scan row by row: a MethodPtr or FieldPtr
/// table (uncompressed `#-` streams, as obfuscators and edit-and-continue write them) and an
/// unsorted NestedClass table. Each is built on its first use, once per image, so that naming
/// every method of such an image is linear in it rather than quadratic. An inverse holds a
/// `u32` per row of the table it answers for, which the table stream bounds.
#[derive(Default)]
pub(crate) struct ListIndex {
    /// By MethodDef rid: the first MethodPtr row naming it (0: none).
    method_pos: std::sync::OnceLock<Option<Box<[u32]>>>,
    /// By Field rid: the first FieldPtr row naming it (0: none).
    field_pos: std::sync::OnceLock<Option<Box<[u32]>>>,
    /// By TypeDef rid: the Enclosing column of the first NestedClass row naming it
    /// ([`NOT_NESTED`]: none).
    enclosing: std::sync::OnceLock<Option<Box<[u32]>>>,
}

/// An inverse's entry for a row that no row of the scanned table names.
const NOT_NESTED: u32 = u32::MAX;

impl std::fmt::Debug for ListIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListIndex").finish_non_exhaustive()
    }
}

impl<'a> Tables<'a> {
    /// The row count of `table` (0 when absent).
    pub fn rows(&self, table: Table) -> u32 {
        self.header.rows(table)
    }

    /// Column `col` (0-based, schema order) of row `rid` of `table`, as stored: see
    /// [`TablesHeader::cell`].
    pub fn cell(&self, table: Table, rid: u32, col: usize) -> Result<u32, ImageError> {
        self.header.cell(self.file, table, rid, col)
    }

    fn coded(
        &self,
        table: Table,
        rid: u32,
        col: usize,
        kind: CodedIndex,
    ) -> Result<Token, ImageError> {
        self.header.coded(self.file, table, rid, col, kind)
    }

    /// Row `rid` (1-based) of Module; [`ImageError::RowOutOfRange`] past its rows.
    pub fn module(&self, rid: u32) -> Result<ModuleRow, ImageError> {
        let t = Table::Module;
        Ok(ModuleRow {
            generation: self.cell(t, rid, 0)? as u16,
            name: self.cell(t, rid, 1)?,
            mvid: self.cell(t, rid, 2)?,
            enc_id: self.cell(t, rid, 3)?,
            enc_base_id: self.cell(t, rid, 4)?,
        })
    }

    /// Row `rid` (1-based) of TypeRef; [`ImageError::RowOutOfRange`] past its rows,
    /// [`ImageError::BadCodedIndex`] for a coded index naming no table.
    pub fn type_ref(&self, rid: u32) -> Result<TypeRefRow, ImageError> {
        let t = Table::TypeRef;
        Ok(TypeRefRow {
            resolution_scope: self.coded(t, rid, 0, CodedIndex::ResolutionScope)?,
            name: self.cell(t, rid, 1)?,
            namespace: self.cell(t, rid, 2)?,
        })
    }

    /// Row `rid` (1-based) of TypeDef; [`ImageError::RowOutOfRange`] past its rows,
    /// [`ImageError::BadCodedIndex`] for a coded index naming no table.
    pub fn type_def(&self, rid: u32) -> Result<TypeDefRow, ImageError> {
        // One read of the row (the type system reads rows of every type it meets).
        let [flags, name, namespace, extends, field_list, method_list] =
            self.header.row(self.file, Table::TypeDef, rid)?;
        let Some(extends) = CodedIndex::TypeDefOrRef.decode(extends) else {
            return Err(ImageError::BadCodedIndex {
                kind: CodedIndex::TypeDefOrRef,
                value: extends,
                table: Table::TypeDef,
                rid,
            });
        };
        Ok(TypeDefRow {
            flags,
            name,
            namespace,
            extends,
            field_list,
            method_list,
        })
    }

    /// Row `rid` (1-based) of Field; [`ImageError::RowOutOfRange`] past its rows.
    pub fn field(&self, rid: u32) -> Result<FieldRow, ImageError> {
        let t = Table::Field;
        Ok(FieldRow {
            flags: self.cell(t, rid, 0)? as u16,
            name: self.cell(t, rid, 1)?,
            signature: self.cell(t, rid, 2)?,
        })
    }

    /// Row `rid` (1-based) of MethodDef; [`ImageError::RowOutOfRange`] past its rows.
    pub fn method_def(&self, rid: u32) -> Result<MethodDefRow, ImageError> {
        let [rva, impl_flags, flags, name, signature, param_list] =
            self.header.row(self.file, Table::MethodDef, rid)?;
        Ok(MethodDefRow {
            rva,
            impl_flags: impl_flags as u16,
            flags: flags as u16,
            name,
            signature,
            param_list,
        })
    }

    /// Row `rid` (1-based) of Param; [`ImageError::RowOutOfRange`] past its rows.
    pub fn param(&self, rid: u32) -> Result<ParamRow, ImageError> {
        let t = Table::Param;
        Ok(ParamRow {
            flags: self.cell(t, rid, 0)? as u16,
            sequence: self.cell(t, rid, 1)? as u16,
            name: self.cell(t, rid, 2)?,
        })
    }

    /// Row `rid` (1-based) of MemberRef; [`ImageError::RowOutOfRange`] past its rows,
    /// [`ImageError::BadCodedIndex`] for a coded index naming no table.
    pub fn member_ref(&self, rid: u32) -> Result<MemberRefRow, ImageError> {
        let t = Table::MemberRef;
        Ok(MemberRefRow {
            class: self.coded(t, rid, 0, CodedIndex::MemberRefParent)?,
            name: self.cell(t, rid, 1)?,
            signature: self.cell(t, rid, 2)?,
        })
    }

    /// Row `rid` (1-based) of StandAloneSig; [`ImageError::RowOutOfRange`] past its rows.
    pub fn standalone_sig(&self, rid: u32) -> Result<StandAloneSigRow, ImageError> {
        Ok(StandAloneSigRow {
            signature: self.cell(Table::StandAloneSig, rid, 0)?,
        })
    }

    /// Row `rid` (1-based) of TypeSpec; [`ImageError::RowOutOfRange`] past its rows.
    pub fn type_spec(&self, rid: u32) -> Result<TypeSpecRow, ImageError> {
        Ok(TypeSpecRow {
            signature: self.cell(Table::TypeSpec, rid, 0)?,
        })
    }

    /// Row `rid` (1-based) of MethodSpec; [`ImageError::RowOutOfRange`] past its rows,
    /// [`ImageError::BadCodedIndex`] for a coded index naming no table.
    pub fn method_spec(&self, rid: u32) -> Result<MethodSpecRow, ImageError> {
        let t = Table::MethodSpec;
        Ok(MethodSpecRow {
            method: self.coded(t, rid, 0, CodedIndex::MethodDefOrRef)?,
            instantiation: self.cell(t, rid, 1)?,
        })
    }

    /// Row `rid` (1-based) of NestedClass; [`ImageError::RowOutOfRange`] past its rows.
    pub fn nested_class(&self, rid: u32) -> Result<NestedClassRow, ImageError> {
        let t = Table::NestedClass;
        Ok(NestedClassRow {
            nested_class: self.cell(t, rid, 0)?,
            enclosing_class: self.cell(t, rid, 1)?,
        })
    }

    /// Row `rid` (1-based) of ImplMap; [`ImageError::RowOutOfRange`] past its rows,
    /// [`ImageError::BadCodedIndex`] for a coded index naming no table.
    pub fn impl_map(&self, rid: u32) -> Result<ImplMapRow, ImageError> {
        let t = Table::ImplMap;
        Ok(ImplMapRow {
            flags: self.cell(t, rid, 0)? as u16,
            member: self.coded(t, rid, 1, CodedIndex::MemberForwarded)?,
            import_name: self.cell(t, rid, 2)?,
            import_scope: self.cell(t, rid, 3)?,
        })
    }

    /// The ImplMap row of `member` (a MethodDef or Field token), when it has one. Rows are
    /// scanned: the table is small (one row per P/Invoke), and a scan needs no trust in its
    /// sort order.
    pub fn impl_map_of(&self, member: Token) -> Result<Option<ImplMapRow>, ImageError> {
        let Some(key) = CodedIndex::MemberForwarded.encode(member) else {
            return Ok(None);
        };
        for rid in 1..=self.rows(Table::ImplMap) {
            if self.cell(Table::ImplMap, rid, 1)? == key {
                return self.impl_map(rid).map(Some);
            }
        }
        Ok(None)
    }

    /// Row `rid` (1-based) of Assembly; [`ImageError::RowOutOfRange`] past its rows.
    pub fn assembly(&self, rid: u32) -> Result<AssemblyRow, ImageError> {
        let t = Table::Assembly;
        Ok(AssemblyRow {
            hash_alg_id: self.cell(t, rid, 0)?,
            version: [
                self.cell(t, rid, 1)? as u16,
                self.cell(t, rid, 2)? as u16,
                self.cell(t, rid, 3)? as u16,
                self.cell(t, rid, 4)? as u16,
            ],
            flags: self.cell(t, rid, 5)?,
            public_key: self.cell(t, rid, 6)?,
            name: self.cell(t, rid, 7)?,
            culture: self.cell(t, rid, 8)?,
        })
    }

    /// Row `rid` (1-based) of AssemblyRef; [`ImageError::RowOutOfRange`] past its rows.
    pub fn assembly_ref(&self, rid: u32) -> Result<AssemblyRefRow, ImageError> {
        let t = Table::AssemblyRef;
        Ok(AssemblyRefRow {
            version: [
                self.cell(t, rid, 0)? as u16,
                self.cell(t, rid, 1)? as u16,
                self.cell(t, rid, 2)? as u16,
                self.cell(t, rid, 3)? as u16,
            ],
            flags: self.cell(t, rid, 4)?,
            public_key_or_token: self.cell(t, rid, 5)?,
            name: self.cell(t, rid, 6)?,
            culture: self.cell(t, rid, 7)?,
            hash_value: self.cell(t, rid, 8)?,
        })
    }

    /// The TypeDef enclosing TypeDef `rid`, through the NestedClass table (binary search when
    /// the table is marked sorted, as II.22 requires; a scan otherwise).
    pub fn enclosing_type(&self, rid: u32) -> Result<Option<u32>, ImageError> {
        let n = self.rows(Table::NestedClass);
        if n == 0 {
            return Ok(None);
        }
        if self.header.is_sorted(Table::NestedClass) {
            let (mut lo, mut hi) = (1u32, n + 1);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                let key = self.cell(Table::NestedClass, mid, 0)?;
                if key < rid {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            if lo <= n && self.cell(Table::NestedClass, lo, 0)? == rid {
                return Ok(Some(self.cell(Table::NestedClass, lo, 1)?));
            }
            return Ok(None);
        }
        if rid != 0
            && let Some(by_rid) = self.lists.and_then(|l| {
                l.enclosing
                    .get_or_init(|| self.enclosing_inverse())
                    .as_deref()
            })
            && let Some(&e) = by_rid.get(rid as usize)
        {
            return Ok((e != NOT_NESTED).then_some(e));
        }
        for r in 1..=n {
            if self.cell(Table::NestedClass, r, 0)? == rid {
                return Ok(Some(self.cell(Table::NestedClass, r, 1)?));
            }
        }
        Ok(None)
    }

    /// By TypeDef rid, what the scan of [`Self::enclosing_type`] finds for it: the Enclosing
    /// column of the first NestedClass row whose NestedClass is that rid. `None` when a row does
    /// not read (the scan then reports it).
    fn enclosing_inverse(&self) -> Option<Box<[u32]>> {
        let mut by_rid = vec![NOT_NESTED; self.rows(Table::TypeDef) as usize + 1];
        for r in (1..=self.rows(Table::NestedClass)).rev() {
            let nested = self.cell(Table::NestedClass, r, 0).ok()?;
            let enclosing = self.cell(Table::NestedClass, r, 1).ok()?;
            // Backwards, so that the first row naming a type is the one kept.
            if let Some(e) = by_rid.get_mut(nested as usize) {
                *e = enclosing;
            }
        }
        Some(by_rid.into_boxed_slice())
    }

    /// By row of `table`, the first row of `ptr` whose one column names it (0: none). `None`
    /// when a row does not read (the scan of [`Self::list_owner`] then reports it).
    fn ptr_inverse(&self, table: Table, ptr: Table) -> Option<Box<[u32]>> {
        let mut by_rid = vec![0u32; self.rows(table) as usize + 1];
        for p in (1..=self.rows(ptr)).rev() {
            let rid = self.cell(ptr, p, 0).ok()?;
            if let Some(at) = by_rid.get_mut(rid as usize) {
                *at = p;
            }
        }
        Some(by_rid.into_boxed_slice())
    }

    /// The TypeDef whose method list holds MethodDef `rid`. Method lists are runs of rows
    /// (II.22.37); with a MethodPtr table they run over MethodPtr rows instead.
    pub fn declaring_type(&self, method_rid: u32) -> Result<Option<u32>, ImageError> {
        self.list_owner(method_rid, Table::MethodDef, Table::MethodPtr, 5)
    }

    /// The MethodDef rows `lo..hi` of TypeDef `owner`'s method list: from its list start to the
    /// next type's (II.22.37). When the list starts never decrease
    /// ([`Tables::method_lists_sorted`]), these are exactly the rows [`Tables::declaring_type`]
    /// gives `owner`. `None` with a MethodPtr table, or a row that does not read.
    pub fn method_span(&self, owner: u32) -> Option<(u32, u32)> {
        if self.rows(Table::MethodPtr) > 0 {
            return None;
        }
        let lo = self.cell(Table::TypeDef, owner, 5).ok()?;
        let hi = if owner < self.rows(Table::TypeDef) {
            self.cell(Table::TypeDef, owner + 1, 5).ok()?
        } else {
            self.rows(Table::MethodDef) + 1
        };
        Some((lo, hi))
    }

    /// Whether the TypeDefs' method list starts never decrease, as II.22.37 requires: then a
    /// type's methods are the rows from its start to the next type's.
    pub fn method_lists_sorted(&self) -> bool {
        let mut last = 0;
        (1..=self.rows(Table::TypeDef)).all(|t| match self.cell(Table::TypeDef, t, 5) {
            Ok(start) if start >= last => {
                last = start;
                true
            }
            _ => false,
        })
    }

    /// The TypeDef whose field list holds Field `rid`. Field lists are runs of rows
    /// (II.22.37); with a FieldPtr table they run over FieldPtr rows instead.
    pub fn field_declaring_type(&self, field_rid: u32) -> Result<Option<u32>, ImageError> {
        self.list_owner(field_rid, Table::Field, Table::FieldPtr, 4)
    }

    /// The TypeDef whose list (column `list_col`) holds row `rid` of `table`, through `ptr`
    /// when that indirection table has rows.
    fn list_owner(
        &self,
        rid: u32,
        table: Table,
        ptr: Table,
        list_col: usize,
    ) -> Result<Option<u32>, ImageError> {
        let inverse = || {
            let l = self.lists?;
            let cell = if ptr == Table::MethodPtr {
                &l.method_pos
            } else {
                &l.field_pos
            };
            cell.get_or_init(|| self.ptr_inverse(table, ptr)).as_deref()
        };
        let list_index = if self.rows(ptr) > 0 {
            if rid != 0
                && let Some(&p) = inverse().and_then(|by_rid| by_rid.get(rid as usize))
            {
                if p == 0 {
                    return Ok(None);
                }
                p
            } else {
                let mut found = None;
                for p in 1..=self.rows(ptr) {
                    if self.cell(ptr, p, 0)? == rid {
                        found = Some(p);
                        break;
                    }
                }
                match found {
                    Some(p) => p,
                    None => return Ok(None),
                }
            }
        } else if rid == 0 || rid > self.rows(table) {
            // No such row: no owner (the search below would name the last type).
            return Ok(None);
        } else {
            rid
        };
        // Last TypeDef whose list start is <= list_index.
        let n = self.rows(Table::TypeDef);
        let (mut lo, mut hi) = (1u32, n + 1);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.cell(Table::TypeDef, mid, list_col)? <= list_index {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let owner = lo - 1;
        Ok((owner >= 1).then_some(owner))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_bits_match_ecma() {
        assert_eq!(CodedIndex::TypeDefOrRef.tag_bits(), 2);
        assert_eq!(CodedIndex::HasCustomAttribute.tag_bits(), 5);
        assert_eq!(CodedIndex::HasCustomAttribute.targets().len(), 22);
        assert_eq!(CodedIndex::MemberRefParent.tag_bits(), 3);
        assert_eq!(CodedIndex::CustomAttributeType.tag_bits(), 3);
        assert_eq!(CodedIndex::HasFieldMarshal.tag_bits(), 1);
        assert_eq!(CodedIndex::ResolutionScope.tag_bits(), 2);
    }

    #[test]
    fn coded_decode() {
        assert_eq!(
            CodedIndex::TypeDefOrRef.decode((5 << 2) | 1),
            Some(Token::new(Table::TypeRef, 5))
        );
        assert_eq!(CodedIndex::TypeDefOrRef.decode(3), None);
        assert_eq!(CodedIndex::CustomAttributeType.decode(0), None);
        assert_eq!(
            CodedIndex::CustomAttributeType.decode((7 << 3) | 3),
            Some(Token::new(Table::MemberRef, 7))
        );
    }

    #[test]
    fn every_table_has_a_schema() {
        for t in Table::ALL {
            assert!(
                !schema(t).is_empty() && schema(t).len() <= MAX_COLUMNS,
                "{t:?}"
            );
            assert_eq!(Table::from_u8(t as u8), Some(t));
        }
        assert_eq!(Table::from_u8(0x2D), None);
    }

    fn stream(heap_sizes: u8, counts: &[(Table, u32)], extra: bool) -> Vec<u8> {
        let mut v = vec![0, 0, 0, 0, 2, 0, heap_sizes, 1];
        let valid: u64 = counts.iter().map(|(t, _)| 1u64 << (*t as u8)).sum();
        v.extend_from_slice(&valid.to_le_bytes());
        v.extend_from_slice(&0u64.to_le_bytes());
        for (_, c) in counts {
            v.extend_from_slice(&c.to_le_bytes());
        }
        if extra {
            v.extend_from_slice(&[0xAA; 4]);
        }
        v
    }

    #[test]
    fn row_sizes_and_widths() {
        let mut s = stream(
            0,
            &[
                (Table::Module, 1),
                (Table::MethodDef, 2),
                (Table::Param, 70000),
            ],
            false,
        );
        let body_start = s.len();
        s.resize(body_start + 10 + 2 * 16 + 70000 * 6, 0);
        let h = TablesHeader::parse(&s, 0, s.len(), false).unwrap();
        assert_eq!(h.info(Table::Module).row_size, 10);
        assert_eq!(h.info(Table::Module).offset, body_start);
        // ParamList widens to 4 bytes because Param has more than 65535 rows.
        assert_eq!(h.info(Table::MethodDef).row_size, 4 + 2 + 2 + 2 + 2 + 4);
        assert_eq!(h.info(Table::MethodDef).offset, body_start + 10);
        assert_eq!(h.end, s.len());
    }

    #[test]
    fn extra_data_is_skipped() {
        let mut s = stream(
            heap_sizes::EXTRA_DATA | heap_sizes::BIG_STRINGS,
            &[(Table::ModuleRef, 1)],
            true,
        );
        let start = s.len();
        s.extend_from_slice(&[1, 0, 0, 0]);
        let h = TablesHeader::parse(&s, 0, s.len(), true).unwrap();
        assert_eq!(h.info(Table::ModuleRef).offset, start);
        assert_eq!(h.cell(&s, Table::ModuleRef, 1, 0).unwrap(), 1);
    }

    #[test]
    fn hostile_row_counts_are_rejected() {
        let s = stream(0, &[(Table::TypeDef, u32::MAX)], false);
        assert!(matches!(
            TablesHeader::parse(&s, 0, s.len(), false),
            Err(ImageError::TableTooLarge { .. })
        ));
        let s = stream(0, &[(Table::TypeDef, 1)], false);
        let mut s2 = s.clone();
        s2[8 + 5] = 0x80; // table 0x2F
        assert!(TablesHeader::parse(&s2, 0, s2.len(), false).is_err());
        assert!(TablesHeader::parse(&s[..20], 0, 20, false).is_err());
        assert!(TablesHeader::parse(&s, 0, s.len() + 1, false).is_err());
    }

    fn u16s(v: &mut Vec<u8>, xs: &[u16]) {
        for x in xs {
            v.extend_from_slice(&x.to_le_bytes());
        }
    }

    #[test]
    fn method_ptr_indirection_and_nesting() {
        let mut s = stream(
            0,
            &[
                (Table::TypeDef, 3),
                (Table::MethodPtr, 3),
                (Table::MethodDef, 3),
                (Table::NestedClass, 2),
            ],
            false,
        );
        // TypeDef: flags, name, namespace, extends, field list, method list.
        for method_list in [1u16, 3, 4] {
            s.extend_from_slice(&0u32.to_le_bytes());
            u16s(&mut s, &[0, 0, 0, 1, method_list]);
        }
        // MethodPtr: list position -> MethodDef rid.
        u16s(&mut s, &[3, 1, 2]);
        for _ in 0..3 {
            s.extend_from_slice(&0u32.to_le_bytes());
            u16s(&mut s, &[0, 0, 0, 0, 1]);
        }
        // NestedClass, unsorted: 3 in 1, 2 in 3.
        u16s(&mut s, &[3, 1, 2, 3]);
        let h = TablesHeader::parse(&s, 0, s.len(), true).unwrap();
        assert_eq!(h.end, s.len());
        let t = Tables {
            file: &s,
            header: &h,
            lists: None,
        };
        assert_eq!(t.declaring_type(3).unwrap(), Some(1));
        assert_eq!(t.declaring_type(1).unwrap(), Some(1));
        assert_eq!(t.declaring_type(2).unwrap(), Some(2));
        assert_eq!(t.declaring_type(4).unwrap(), None);
        assert_eq!(t.enclosing_type(3).unwrap(), Some(1));
        assert_eq!(t.enclosing_type(2).unwrap(), Some(3));
        assert_eq!(t.enclosing_type(1).unwrap(), None);
        assert!(t.type_def(4).is_err() && t.method_def(0).is_err());
        assert!(h.row_exists(Token::new(Table::MethodPtr, 3)));
        assert!(!h.row_exists(Token::new(Table::MethodPtr, 4)));
    }

    /// The inverses answer every lookup as the scans do, on shuffled Ptr tables and an unsorted
    /// NestedClass table with hostile rows: a row named twice, row 0, rows past the table.
    #[test]
    fn inverses_answer_as_the_scans() {
        let mut next = crate::test_rng::below(0x5eed_1e55_0f7a_b1e5);
        let (types, methods, fields) = (700u32, 2_000u32, 1_500u32);
        let mut s = stream(
            0,
            &[
                (Table::TypeDef, types),
                (Table::FieldPtr, fields + 3),
                (Table::Field, fields),
                (Table::MethodPtr, methods + 3),
                (Table::MethodDef, methods),
                (Table::NestedClass, types + 3),
            ],
            false,
        );
        // Each list start from where the last one was, in steps of 0–5.
        let (mut field_list, mut method_list) = (1u32, 1u32);
        for _ in 0..types {
            s.extend_from_slice(&0u32.to_le_bytes());
            u16s(&mut s, &[0, 0, 0, field_list as u16, method_list as u16]);
            field_list += next(6) as u32;
            method_list += next(6) as u32;
        }
        // A Ptr table: a shuffle of the rows, then a row named again, row 0, a row past the end.
        let mut ptr = |rows: u32, s: &mut Vec<u8>| {
            let mut order: Vec<u32> = (1..=rows).collect();
            for k in (1..order.len()).rev() {
                order.swap(k, next(k as u64 + 1) as usize);
            }
            order.extend([order[7], 0, rows + 9]);
            for r in order {
                u16s(s, &[r as u16]);
            }
        };
        ptr(fields, &mut s);
        for _ in 0..fields {
            u16s(&mut s, &[0, 0, 0]);
        }
        ptr(methods, &mut s);
        for _ in 0..methods {
            s.extend_from_slice(&0u32.to_le_bytes());
            u16s(&mut s, &[0, 0, 0, 0, 1]);
        }
        // NestedClass, unsorted, some types named twice, some never, some past the table.
        for _ in 0..types + 3 {
            let nested = next(types as u64 + 4) as u16;
            let enclosing = next(types as u64 + 1) as u16;
            u16s(&mut s, &[nested, enclosing]);
        }
        let h = TablesHeader::parse(&s, 0, s.len(), true).unwrap();
        assert_eq!(h.end, s.len());
        let index = ListIndex::default();
        let scan = Tables {
            file: &s,
            header: &h,
            lists: None,
        };
        let indexed = Tables {
            lists: Some(&index),
            ..scan
        };
        let mut owned = 0;
        for rid in 0..methods + 12 {
            let a = scan.declaring_type(rid).unwrap();
            owned += usize::from(a.is_some());
            assert_eq!(indexed.declaring_type(rid).unwrap(), a, "method {rid}");
        }
        for rid in 0..fields + 12 {
            let a = scan.field_declaring_type(rid).unwrap();
            assert_eq!(indexed.field_declaring_type(rid).unwrap(), a, "field {rid}");
        }
        let mut nested = 0;
        for rid in 0..types + 12 {
            let a = scan.enclosing_type(rid).unwrap();
            nested += usize::from(a.is_some());
            assert_eq!(indexed.enclosing_type(rid).unwrap(), a, "type {rid}");
        }
        // The cases are there to compare: most methods have an owner, many types are nested.
        assert!(owned > methods as usize / 2 && nested > types as usize / 3);
        assert!(index.method_pos.get().is_some_and(Option::is_some));
    }
}
