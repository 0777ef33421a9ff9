//! References by identity: an assembly, a type in it, a member of a type, a signature. Each is
//! looked up among the image's rows (and those already added) by what it means — names,
//! version, key, signature bytes — and added only when none matches.

use super::{EmitError, MetadataBuilder};
use crate::image::tables::{CodedIndex, MAX_COLUMNS, Table, Token};

/// What identifies an assembly to a reference (II.22.5): its simple name, version, culture and
/// public key or token.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct AssemblyIdentity {
    /// The simple name, e.g. `mscorlib`.
    pub name: String,
    /// Major, minor, build and revision numbers.
    pub version: [u16; 4],
    /// The culture; empty for the neutral culture.
    pub culture: String,
    /// The public key token (8 bytes), a full public key (with [`Self::full_public_key`]), or
    /// empty for an assembly without a strong name.
    pub public_key_or_token: Vec<u8>,
    /// `public_key_or_token` is the full public key (AssemblyFlags.PublicKey, 0x0001).
    pub full_public_key: bool,
}

impl AssemblyIdentity {
    /// The identity as ILAsm and reflection write it:
    /// `name, Version=1.2.3.4, Culture=neutral, PublicKeyToken=…`.
    pub fn display_name(&self) -> String {
        let [a, b, c, d] = self.version;
        let culture = if self.culture.is_empty() {
            "neutral"
        } else {
            &self.culture
        };
        let token = if self.public_key_or_token.is_empty() {
            "null".to_string()
        } else {
            self.public_key_or_token
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect()
        };
        let key = if self.full_public_key {
            "PublicKey"
        } else {
            "PublicKeyToken"
        };
        format!(
            "{}, Version={a}.{b}.{c}.{d}, Culture={culture}, {key}={token}",
            self.name
        )
    }
}

/// What identifies an original row to a lookup: its first column's stored value (0 where the
/// lookup has none) and the bytes of up to two heap entries (names, signatures).
type RowKey<'i> = (u32, &'i [u8], &'i [u8]);

/// Original rows of one table by [`RowKey`]: the first row of each key.
pub(super) type OriginalRows<'i> = std::collections::HashMap<RowKey<'i>, u32>;

/// The tables whose original rows are looked up by key, each with its slot in
/// `MetadataBuilder::original_rows`.
pub(super) const KEYED_TABLES: [Table; 6] = [
    Table::TypeRef,
    Table::MemberRef,
    Table::MethodSpec,
    Table::TypeSpec,
    Table::StandAloneSig,
    Table::TypeDef,
];

/// AssemblyFlags.PublicKey (II.23.1.2).
const PUBLIC_KEY_FLAG: u32 = 0x0001;

impl<'i> MetadataBuilder<'i, '_> {
    /// The first original row of `table` whose stored values satisfy `matches`.
    fn find_original(
        &self,
        table: Table,
        mut matches: impl FnMut(&[u32; MAX_COLUMNS]) -> bool,
    ) -> Result<Option<Token>, EmitError> {
        let h = self.image.tables_header();
        let file = self.image.bytes();
        for rid in 1..=h.rows(table) {
            let row: [u32; MAX_COLUMNS] = h.row(file, table, rid)?;
            if matches(&row) {
                return Ok(Some(Token::new(table, rid)));
            }
        }
        Ok(None)
    }

    /// The first original row of `table` (one of [`KEYED_TABLES`]) whose [`RowKey`] is `key`,
    /// the first column being the coded index of `through` when there is one; none without a
    /// search when `through` is a row this builder added, to which no original row can refer.
    /// The table's rows are indexed the first time it is searched, so that a lookup per
    /// method does not cost a scan of the rows; should a row not read, every lookup scans
    /// instead (and reports that row when it is reached, as a scan always did).
    fn find_original_keyed(
        &mut self,
        table: Table,
        through: Option<Token>,
        key: RowKey<'_>,
    ) -> Result<Option<Token>, EmitError> {
        let added = through.is_some_and(|t| {
            t.table()
                .is_some_and(|table| t.rid() > self.image.tables_header().rows(table))
        });
        if added {
            return Ok(None);
        }
        let Some(slot) = KEYED_TABLES.iter().position(|&t| t == table) else {
            return Ok(None);
        };
        if self.original_rows[slot].is_none() {
            self.original_rows[slot] = Some(self.index_rows(table));
        }
        if let Some(Some(rows)) = &self.original_rows[slot] {
            return Ok(rows.get(&key).map(|&rid| Token::new(table, rid)));
        }
        self.find_original(table, |r| self.row_key(table, r).is_some_and(|k| k == key))
    }

    /// [`RowKey`] of a stored row of `table` (one of [`KEYED_TABLES`]); `None` when a heap
    /// entry it names cannot be read, so that it matches nothing.
    fn row_key(&self, table: Table, r: &[u32; MAX_COLUMNS]) -> Option<RowKey<'i>> {
        let image: &'i crate::image::Image<'_> = self.image;
        let blob = |i: u32| image.blobs().get(i).ok();
        let string = |i: u32| match i {
            0 => Some(&[][..]),
            _ => image.strings().get_bytes(i).ok(),
        };
        Some(match table {
            Table::TypeRef => (r[0], string(r[1])?, string(r[2])?),
            Table::MemberRef => (r[0], string(r[1])?, blob(r[2])?),
            Table::MethodSpec => (r[0], blob(r[1])?, &[]),
            // Name and namespace of a TypeDef (its flags are not part of the key).
            Table::TypeDef => (0, string(r[1])?, string(r[2])?),
            _ => (0, blob(r[0])?, &[]),
        })
    }

    /// The original rows of `table` by [`RowKey`]; `None` when a row cannot be read.
    fn index_rows(&self, table: Table) -> Option<OriginalRows<'i>> {
        let h = self.image.tables_header();
        let file = self.image.bytes();
        let mut rows = OriginalRows::with_capacity(h.rows(table) as usize);
        for rid in 1..=h.rows(table) {
            let row: [u32; MAX_COLUMNS] = h.row(file, table, rid).ok()?;
            if let Some(key) = self.row_key(table, &row) {
                rows.entry(key).or_insert(rid);
            }
        }
        Some(rows)
    }

    /// Looks `values` up among the added rows, else adds them.
    fn added_or_new(&mut self, table: Table, values: &[u32]) -> Result<Token, EmitError> {
        match self.find_added(table, values) {
            Some(t) => Ok(t),
            None => self.add_row(table, values),
        }
    }

    fn string_is(&self, index: u32, wanted: &str) -> bool {
        if index == 0 {
            return wanted.is_empty();
        }
        self.image
            .strings()
            .get_bytes(index)
            .is_ok_and(|b| b == wanted.as_bytes())
    }

    fn blob_is(&self, index: u32, wanted: &[u8]) -> bool {
        self.image.blobs().get(index).is_ok_and(|b| b == wanted)
    }

    /// An AssemblyRef to `id`: an existing one with the same name, version, culture and key (a
    /// full key and its token do not match each other), or a new row.
    pub fn assembly_ref(&mut self, id: &AssemblyIdentity) -> Result<Token, EmitError> {
        let flags = if id.full_public_key {
            PUBLIC_KEY_FLAG
        } else {
            0
        };
        let found = self.find_original(Table::AssemblyRef, |r| {
            [r[0], r[1], r[2], r[3]] == id.version.map(u32::from)
                && r[4] & PUBLIC_KEY_FLAG == flags
                && self.blob_is(r[5], &id.public_key_or_token)
                && self.string_is(r[6], &id.name)
                && self.string_is(r[7], &id.culture)
        })?;
        if let Some(t) = found {
            return Ok(t);
        }
        let key = self.blob(&id.public_key_or_token)?;
        let name = self.string(&id.name)?;
        let culture = self.string(&id.culture)?;
        let [a, b, c, d] = id.version.map(u32::from);
        self.added_or_new(
            Table::AssemblyRef,
            &[a, b, c, d, flags, key, name, culture, 0],
        )
    }

    /// A TypeRef to `namespace.name` in `scope` (an AssemblyRef, ModuleRef, Module, or an
    /// enclosing TypeRef for a nested type).
    pub fn type_ref(
        &mut self,
        scope: Token,
        namespace: &str,
        name: &str,
    ) -> Result<Token, EmitError> {
        let scope_value = CodedIndex::ResolutionScope
            .encode(scope)
            .ok_or(EmitError::BadToken { token: scope })?;
        let key = (scope_value, name.as_bytes(), namespace.as_bytes());
        let found = self.find_original_keyed(Table::TypeRef, Some(scope), key)?;
        if let Some(t) = found {
            return Ok(t);
        }
        let name = self.string(name)?;
        let namespace = self.string(namespace)?;
        self.added_or_new(Table::TypeRef, &[scope_value, name, namespace])
    }

    /// A MemberRef to the method or field `name` with `signature` (a MethodRefSig or FieldSig
    /// blob) of `parent` (a TypeRef, TypeDef, TypeSpec, ModuleRef or MethodDef).
    pub fn member_ref(
        &mut self,
        parent: Token,
        name: &str,
        signature: &[u8],
    ) -> Result<Token, EmitError> {
        let parent_value = CodedIndex::MemberRefParent
            .encode(parent)
            .ok_or(EmitError::BadToken { token: parent })?;
        let key = (parent_value, name.as_bytes(), signature);
        let found = self.find_original_keyed(Table::MemberRef, Some(parent), key)?;
        if let Some(t) = found {
            return Ok(t);
        }
        let name = self.string(name)?;
        let sig = self.blob(signature)?;
        self.added_or_new(Table::MemberRef, &[parent_value, name, sig])
    }

    /// A row of a table whose only column is a signature blob (TypeSpec, StandAloneSig).
    fn by_signature(&mut self, table: Table, signature: &[u8]) -> Result<Token, EmitError> {
        if let Some(t) = self.find_original_keyed(table, None, (0, signature, &[]))? {
            return Ok(t);
        }
        let sig = self.blob(signature)?;
        self.added_or_new(table, &[sig])
    }

    /// The first original TypeDef named `namespace.name` (any row of that name and namespace,
    /// nested or not), found through an index of the TypeDefs built on first use.
    pub fn type_def_named(
        &mut self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Token>, EmitError> {
        let key = (0, name.as_bytes(), namespace.as_bytes());
        self.find_original_keyed(Table::TypeDef, None, key)
    }

    /// A TypeSpec for the type `signature` (II.23.2.14), e.g. a generic instantiation.
    pub fn type_spec(&mut self, signature: &[u8]) -> Result<Token, EmitError> {
        self.by_signature(Table::TypeSpec, signature)
    }

    /// A StandAloneSig for `signature`: a LocalVarSig (II.23.2.6) or a `calli` site.
    pub fn standalone_sig(&mut self, signature: &[u8]) -> Result<Token, EmitError> {
        self.by_signature(Table::StandAloneSig, signature)
    }

    /// A MethodSpec instantiating the generic `method` (MethodDef or MemberRef) with the
    /// MethodSpec blob `instantiation` (II.23.2.15).
    pub fn method_spec(&mut self, method: Token, instantiation: &[u8]) -> Result<Token, EmitError> {
        let method_value = CodedIndex::MethodDefOrRef
            .encode(method)
            .ok_or(EmitError::BadToken { token: method })?;
        let key = (method_value, instantiation, &[][..]);
        let found = self.find_original_keyed(Table::MethodSpec, Some(method), key)?;
        if let Some(t) = found {
            return Ok(t);
        }
        let inst = self.blob(instantiation)?;
        self.added_or_new(Table::MethodSpec, &[method_value, inst])
    }
}
