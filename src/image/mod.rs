//! Assembly reader: PE container, CLI header, metadata streams, tables, heaps and signatures,
//! and the method bodies they locate.
//!
//! Everything borrows the image's bytes (a memory map or a caller's slice); names and
//! signatures are decoded on demand so enumerating methods costs no allocation.

pub mod emit;
pub mod error;
pub mod heaps;
mod ids;
pub mod integrity;
pub mod metadata;
pub mod names;
pub mod pe;
mod read;
pub mod sig;
pub mod tables;
pub mod writer;

use std::path::Path;

use crate::body::{Body, DecodeError};

pub use error::{ImageError, PeError};
pub use heaps::{BlobHeap, GuidHeap, StringHeap, UserStringHeap};
pub use integrity::{IntegrityCode, IntegrityFinding};
pub use metadata::MetadataRoot;
pub use names::{NameFailure, SigNames};
pub use pe::{CliHeader, HeaderLayout, PeInfo, Section};
pub use sig::{MethodSigSummary, SigError, StandAloneSig};
pub use tables::{CodedIndex, Table, Tables, TablesHeader, Token};

/// Deepest chain of enclosing types or TypeRef scopes followed when naming a type.
const MAX_NESTING: usize = 64;

enum Backing<'a> {
    /// The map and, for [`Image::open_whole`], the file it maps, which a writer may copy from
    /// file to file (other images close it: a run holding many open keeps no descriptors).
    Mapped(memmap2::Mmap, Option<std::fs::File>),
    Borrowed(&'a [u8]),
    Shared(std::sync::Arc<[u8]>),
}

/// A parsed .NET assembly (or module). Holds only offsets into its bytes.
pub struct Image<'a> {
    backing: Backing<'a>,
    pe: PeInfo,
    metadata: MetadataRoot,
    tables: TablesHeader,
    lists: tables::ListIndex,
}

impl std::fmt::Debug for Image<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Image")
            .field("len", &self.bytes().len())
            .field("metadata_version", &self.metadata.version)
            .finish_non_exhaustive()
    }
}

/// Files up to this size are mapped with every page read in at once by [`Image::open_whole`].
const POPULATE_LIMIT: u64 = 64 << 20;

impl Image<'static> {
    /// Memory-maps and parses the file at `path`. Only regular files are opened: a FIFO or a
    /// device is an [`ImageError::Io`] saying what it is, never a read that blocks.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, ImageError> {
        Self::open_mapped(path.as_ref(), false)
    }

    /// [`Self::open`] for a caller that reads every byte (a rewrite copies the whole file):
    /// a file of ordinary size (up to 64 MiB) has all its pages mapped by one call, for less
    /// than a page fault per 64 KiB as it is read. The file stays open ([`Self::file`]), for
    /// a writer to copy from.
    pub fn open_whole(path: impl AsRef<Path>) -> Result<Self, ImageError> {
        Self::open_mapped(path.as_ref(), true)
    }

    fn open_mapped(path: &Path, whole: bool) -> Result<Self, ImageError> {
        let file = crate::fsio::open_regular(path)?;
        let mut options = memmap2::MmapOptions::new();
        if whole && file.metadata().is_ok_and(|m| m.len() <= POPULATE_LIMIT) {
            options.populate();
        }
        // SAFETY: the map is read-only and private to this Image. Another process truncating
        // the file while it is mapped would fault; that is the accepted cost of mapping.
        let map = unsafe { options.map(&file)? };
        let (pe, metadata, tables) = layout(&map)?;
        Ok(Image {
            backing: Backing::Mapped(map, whole.then_some(file)),
            pe,
            metadata,
            tables,
            lists: Default::default(),
        })
    }

    /// Parses an image held in shared memory (e.g. one [`ImageWriter`](crate::ImageWriter)
    /// just wrote), keeping a reference to it: an image that outlives the caller's borrow.
    pub fn from_shared(bytes: std::sync::Arc<[u8]>) -> Result<Self, ImageError> {
        let (pe, metadata, tables) = layout(&bytes)?;
        Ok(Image {
            backing: Backing::Shared(bytes),
            pe,
            metadata,
            tables,
            lists: Default::default(),
        })
    }
}

fn layout(file: &[u8]) -> Result<(PeInfo, MetadataRoot, TablesHeader), ImageError> {
    let pe = PeInfo::parse(file)?;
    let md = pe.cli.metadata;
    let md_offset = pe
        .rva_to_offset(md.rva, file.len())
        .ok_or(ImageError::RvaNotMapped {
            what: "metadata",
            rva: md.rva,
        })?;
    let metadata = MetadataRoot::parse(file, md_offset, md.size as usize)?;
    let tables = TablesHeader::parse(
        file,
        metadata.tables.offset,
        metadata.tables.size,
        metadata.tables_uncompressed,
    )?;
    Ok((pe, metadata, tables))
}

impl<'a> Image<'a> {
    /// Parses an image held in memory.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, ImageError> {
        let (pe, metadata, tables) = layout(bytes)?;
        Ok(Image {
            backing: Backing::Borrowed(bytes),
            pe,
            metadata,
            tables,
            lists: Default::default(),
        })
    }

    /// The file an image opened by [`Image::open_whole`] was mapped from; `None` for other
    /// images. A writer copies the unchanged parts of a large image from it file to file
    /// ([`crate::ImageWriter::finish_to_file`]).
    pub fn file(&self) -> Option<&std::fs::File> {
        match &self.backing {
            Backing::Mapped(_, file) => file.as_ref(),
            Backing::Borrowed(_) | Backing::Shared(_) => None,
        }
    }

    /// The whole file.
    pub fn bytes(&self) -> &[u8] {
        match &self.backing {
            Backing::Mapped(m, _) => m,
            Backing::Borrowed(b) => b,
            Backing::Shared(b) => b,
        }
    }

    /// The PE headers, sections, data directories and CLI header.
    pub fn pe(&self) -> &PeInfo {
        &self.pe
    }

    /// The CLI header (II.25.3.3).
    pub fn cli_header(&self) -> &CliHeader {
        &self.pe.cli
    }

    /// The metadata root and where its streams are.
    pub fn metadata(&self) -> &MetadataRoot {
        &self.metadata
    }

    /// The table stream's header and the layout of every table.
    pub fn tables_header(&self) -> &TablesHeader {
        &self.tables
    }

    /// Typed access to the rows of the metadata tables.
    pub fn tables(&self) -> Tables<'_> {
        Tables {
            file: self.bytes(),
            header: &self.tables,
            lists: Some(&self.lists),
        }
    }

    fn stream(&self, r: metadata::StreamRange) -> &[u8] {
        // Ranges were checked against the file when the root was parsed.
        self.bytes().get(r.offset..r.offset + r.size).unwrap_or(&[])
    }

    /// The `#Strings` heap (empty when the stream is absent).
    pub fn strings(&self) -> StringHeap<'_> {
        let r = self.metadata.strings;
        StringHeap {
            data: self.stream(r),
            offset: r.offset,
        }
    }

    /// The `#Blob` heap (empty when the stream is absent).
    pub fn blobs(&self) -> BlobHeap<'_> {
        let r = self.metadata.blob;
        BlobHeap {
            data: self.stream(r),
            offset: r.offset,
        }
    }

    /// The `#US` heap of `ldstr` literals (empty when the stream is absent).
    pub fn user_strings(&self) -> UserStringHeap<'_> {
        let r = self.metadata.user_strings;
        UserStringHeap {
            data: self.stream(r),
            offset: r.offset,
        }
    }

    /// The `#GUID` heap (empty when the stream is absent).
    pub fn guids(&self) -> GuidHeap<'_> {
        let r = self.metadata.guid;
        GuidHeap {
            data: self.stream(r),
            offset: r.offset,
        }
    }

    /// File offset of `rva`, when a section's file data holds it.
    pub fn rva_to_offset(&self, rva: u32) -> Option<usize> {
        self.pe.rva_to_offset(rva, self.bytes().len())
    }

    /// The bytes from the body at `rva` (of method `token`) to the end of its section, as
    /// [`Method::body_bytes`] gives them.
    pub(crate) fn body_bytes_at(&self, token: Token, rva: u32) -> Result<&[u8], ImageError> {
        if rva == 0 {
            return Err(ImageError::NoBody { token });
        }
        let file = self.bytes();
        // No error value is built on the success path: this runs once per method.
        match self.pe.rva_to_section_tail(rva, file.len()) {
            Some((start, end)) if start <= end && end <= file.len() => Ok(&file[start..end]),
            _ => Err(ImageError::BodyOutsideSections { token, rva }),
        }
    }

    /// The body at `rva` (of method `token`) and its exact bytes, as
    /// [`Method::decoded_body_and_bytes`] gives them: for a caller that has the RVA from the
    /// column already and needs no other cell of the row.
    pub(crate) fn body_at(&self, token: Token, rva: u32) -> Result<(Body<'_>, &[u8]), ImageError> {
        let bytes = self.body_bytes_at(token, rva)?;
        // The error's offset is looked up only on failure: this runs once per method.
        let fail = |source| ImageError::Body {
            token,
            offset: self.rva_to_offset(rva).unwrap_or(0),
            source,
        };
        if misaligned_fat(rva, bytes) {
            return Err(fail(DecodeError::MisalignedFatHeader { rva }));
        }
        let body = Body::parse(bytes).map_err(fail)?;
        // Body::parse never reports more than it was given; stay checked regardless.
        match bytes.get(..body.len()) {
            Some(exact) => Ok((body, exact)),
            None => Err(ImageError::Truncated {
                what: "method body",
                offset: self.rva_to_offset(rva).unwrap_or(0),
                needed: body.len(),
            }),
        }
    }

    /// The identity the Assembly table gives the image (name, version, culture, public key;
    /// II.22.2), `None` for a module without an Assembly row (a netmodule).
    pub fn assembly_identity(&self) -> Result<Option<emit::AssemblyIdentity>, ImageError> {
        if self.tables.rows(Table::Assembly) == 0 {
            return Ok(None);
        }
        let row = self.tables().assembly(1)?;
        let text = |index: u32| -> Result<String, ImageError> {
            Ok(if index == 0 {
                String::new()
            } else {
                self.strings().get(index)?.to_string()
            })
        };
        let key = if row.public_key == 0 {
            Vec::new()
        } else {
            self.blobs().get(row.public_key)?.to_vec()
        };
        Ok(Some(emit::AssemblyIdentity {
            name: text(row.name)?,
            version: row.version,
            culture: text(row.culture)?,
            full_public_key: !key.is_empty(),
            public_key_or_token: key,
        }))
    }

    /// Number of MethodDef rows.
    pub fn method_count(&self) -> u32 {
        self.tables.rows(Table::MethodDef)
    }

    /// Every MethodDef, in table order.
    pub fn methods(&self) -> Methods<'_> {
        Methods {
            image: self,
            next: 1,
            end: self.method_count(),
        }
    }

    /// The MethodDef with row id `rid`.
    pub fn method(&self, rid: u32) -> Result<Method<'_>, ImageError> {
        let row = self.tables().method_def(rid)?;
        Ok(Method {
            image: self,
            rid,
            row,
        })
    }

    /// Counts over all MethodDefs: bodies, RVA 0, shared and unmapped RVAs.
    pub fn method_stats(&self) -> MethodStats {
        let mut stats = MethodStats::default();
        let mut rvas = Vec::new();
        for m in self.methods() {
            stats.method_defs += 1;
            if m.rva() == 0 {
                stats.rva_zero += 1;
            } else if m.body_bytes().is_err() {
                stats.outside_sections += 1;
            } else {
                stats.misaligned_fat += usize::from(m.is_misaligned_fat());
                rvas.push(m.rva());
            }
        }
        rvas.sort_unstable();
        for group in rvas.chunk_by(|a, b| a == b) {
            stats.distinct_bodies += 1;
            if group.len() > 1 {
                stats.shared_bodies += 1;
                stats.methods_sharing_a_body += group.len();
            }
        }
        stats.with_body = rvas.len();
        stats
    }

    // -----------------------------------------------------------------------------------------
    // Resolution helpers for the verifier

    /// Whether `token` names something that exists: a row of its table, or for `ldstr`
    /// tokens (0x70) an entry lying inside `#US`.
    pub fn token_exists(&self, token: Token) -> bool {
        if token.table_byte() == tables::USER_STRING_TABLE {
            return self.user_string_ok(token);
        }
        self.tables.row_exists(token)
    }

    /// Whether an `ldstr` token's offset starts an entry wholly inside `#US`.
    pub fn user_string_ok(&self, token: Token) -> bool {
        token.table_byte() == tables::USER_STRING_TABLE && self.user_strings().contains(token.rid())
    }

    /// The signature blob at `index` with its file offset, for error messages.
    fn sig_blob(&self, index: u32) -> Result<(&[u8], usize), ImageError> {
        let heap = self.blobs();
        Ok((heap.get(index)?, heap.content_offset(index)))
    }

    /// Summary of the method signature a call token refers to: a MethodDef's signature, a
    /// MemberRef's call-site signature (vararg extras after the sentinel), or a MethodSpec's
    /// generic method.
    pub fn method_sig(&self, token: Token) -> Result<MethodSigSummary, ImageError> {
        let t = self.tables();
        let index = match token.table() {
            Some(Table::MethodDef) => t.method_def(token.rid())?.signature,
            Some(Table::MemberRef) => t.member_ref(token.rid())?.signature,
            Some(Table::MethodSpec) => {
                let method = t.method_spec(token.rid())?.method;
                if method.table() == Some(Table::MethodSpec) {
                    return Err(ImageError::BadToken {
                        token,
                        reason: "MethodSpec of a MethodSpec",
                    });
                }
                return self.method_sig(method);
            }
            _ => {
                return Err(ImageError::BadToken {
                    token,
                    reason: "not a MethodDef, MemberRef or MethodSpec",
                });
            }
        };
        let (blob, offset) = self.sig_blob(index)?;
        sig::method_sig_summary(blob).map_err(|source| ImageError::Sig { offset, source })
    }

    /// A StandAloneSig token's signature: a body's locals, or a `calli` target.
    pub fn standalone_sig(&self, token: Token) -> Result<StandAloneSig, ImageError> {
        if token.table() != Some(Table::StandAloneSig) {
            return Err(ImageError::BadToken {
                token,
                reason: "not a StandAloneSig",
            });
        }
        let index = self.tables().standalone_sig(token.rid())?.signature;
        let (blob, offset) = self.sig_blob(index)?;
        sig::standalone_sig(blob).map_err(|source| ImageError::Sig { offset, source })
    }

    /// Number of locals a body's LocalVarSigTok declares (0 for the null token).
    pub fn local_count(&self, token: Token) -> Result<u32, ImageError> {
        if token.0 == 0 {
            return Ok(0);
        }
        match self.standalone_sig(token)? {
            StandAloneSig::Locals { count } => Ok(count),
            StandAloneSig::Method(_) => Err(ImageError::BadToken {
                token,
                reason: "a method signature, not a local-variable signature",
            }),
        }
    }

    // -----------------------------------------------------------------------------------------
    // Names

    /// Appends `Namespace.Outer/Inner` for a TypeDef, TypeRef or (rendered) TypeSpec.
    pub fn write_type_name(&self, token: Token, out: &mut String) -> Result<(), ImageError> {
        let names = SigNames::new(self, sig::Style::Compact);
        self.type_name_at_depth(token, 0, sig::Style::Compact, &names, out)
    }

    /// Appends a type's name as ILAsm writes it where a type is an operand (`box`, a
    /// member's parent): a TypeDef as `Ns.Outer/Inner`, a TypeRef with its resolution scope
    /// (`[mscorlib]System.Int32`, `[.module other.dll]Ns.T`), a TypeSpec as its signature
    /// (``class [mscorlib]System.Collections.Generic.List`1<int32>``); names quoted where ILAsm
    /// needs quotes. A type inside a TypeSpec that cannot be named is an error too.
    /// On `Err`, `out` is left as it was.
    pub fn write_type_name_ilasm(&self, token: Token, out: &mut String) -> Result<(), ImageError> {
        SigNames::new(self, sig::Style::Ilasm).write_type(token, out)
    }

    /// Appends a type's name in `style`; a TypeSpec is rendered with `names`.
    pub(crate) fn type_name_at_depth(
        &self,
        token: Token,
        depth: u32,
        style: sig::Style,
        names: &dyn sig::TypeNames,
        out: &mut String,
    ) -> Result<(), ImageError> {
        let t = self.tables();
        let strings = self.strings();
        // Collect (namespace, name) from innermost outwards, then write outermost first.
        let mut chain: [(u32, u32); MAX_NESTING] = [(0, 0); MAX_NESTING];
        let mut len = 0;
        let mut cur = token;
        // Where the outermost TypeRef is found (ILAsm writes it as `[scope]`).
        let mut scope = None;
        loop {
            let (ns, name, outer) = match cur.table() {
                Some(Table::TypeDef) => {
                    let row = t.type_def(cur.rid())?;
                    let outer = t
                        .enclosing_type(cur.rid())?
                        .map(|r| Token::new(Table::TypeDef, r));
                    (row.namespace, row.name, outer)
                }
                Some(Table::TypeRef) => {
                    let row = t.type_ref(cur.rid())?;
                    let s = row.resolution_scope;
                    let nested = s.table() == Some(Table::TypeRef) && !s.is_null();
                    if !nested {
                        scope = Some(s);
                    }
                    (row.namespace, row.name, nested.then_some(s))
                }
                Some(Table::TypeSpec) if len == 0 => {
                    let index = t.type_spec(cur.rid())?.signature;
                    let (blob, offset) = self.sig_blob(index)?;
                    return sig::render_type(blob, names, depth, out)
                        .map_err(|source| ImageError::Sig { offset, source });
                }
                _ => {
                    return Err(ImageError::BadToken {
                        token: cur,
                        reason: "not a type",
                    });
                }
            };
            if len == MAX_NESTING {
                return Err(ImageError::BadToken {
                    token,
                    reason: "types nested too deeply (or in a cycle)",
                });
            }
            chain[len] = (ns, name);
            len += 1;
            match outer {
                Some(o) => cur = o,
                None => break,
            }
        }
        // Written straight into `out` (no string of its own: a full name is made per type);
        // a failure cuts `out` back to what it was.
        let mark = out.len();
        let write = |text: &mut String| -> Result<(), ImageError> {
            if style == sig::Style::Ilasm
                && let Some(s) = scope
            {
                self.write_scope(s, text)?;
            }
            for (i, &(ns, name)) in chain[..len].iter().rev().enumerate() {
                if i > 0 {
                    text.push('/');
                } else {
                    let ns = strings.get(ns)?;
                    if !ns.is_empty() {
                        match style {
                            sig::Style::Compact => text.push_str(ns),
                            sig::Style::Ilasm => names::write_ilasm_name(text, ns),
                        }
                        text.push('.');
                    }
                }
                let name = strings.get(name)?;
                match style {
                    sig::Style::Compact => text.push_str(name),
                    sig::Style::Ilasm => names::write_ilasm_name(text, name),
                }
            }
            Ok(())
        };
        let written = write(out);
        if written.is_err() {
            out.truncate(mark);
        }
        written
    }

    /// `[assembly]` or `[.module name]` for a TypeRef's resolution scope; nothing for this
    /// module or a null scope (a type found through the ExportedType table).
    fn write_scope(&self, scope: Token, out: &mut String) -> Result<(), ImageError> {
        let t = self.tables();
        let (module, name) = match scope.table() {
            _ if scope.is_null() => return Ok(()),
            Some(Table::AssemblyRef) => (false, t.assembly_ref(scope.rid())?.name),
            Some(Table::ModuleRef) => (true, t.cell(Table::ModuleRef, scope.rid(), 0)?),
            Some(Table::Module) => return Ok(()),
            _ => {
                return Err(ImageError::BadToken {
                    token: scope,
                    reason: "not a resolution scope",
                });
            }
        };
        out.push('[');
        if module {
            out.push_str(".module ");
        }
        names::write_ilasm_name(out, self.strings().get(name)?);
        out.push(']');
        Ok(())
    }
}

/// Counts over an image's MethodDefs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct MethodStats {
    /// MethodDef rows.
    pub method_defs: usize,
    /// RVA 0: abstract, extern, runtime-implemented, P/Invoke.
    pub rva_zero: usize,
    /// RVA ≠ 0 and inside a section: a body slice exists.
    pub with_body: usize,
    /// Distinct body RVAs.
    pub distinct_bodies: usize,
    /// Body RVAs used by more than one MethodDef.
    pub shared_bodies: usize,
    /// MethodDefs whose RVA is also used by another MethodDef.
    pub methods_sharing_a_body: usize,
    /// RVA ≠ 0 but in no section's file data.
    pub outside_sections: usize,
    /// Fat headers at an RVA that is not 4-byte aligned.
    pub misaligned_fat: usize,
}

/// Iterator over all MethodDefs; rows that cannot be read end iteration.
pub struct Methods<'i> {
    image: &'i Image<'i>,
    next: u32,
    end: u32,
}

impl<'i> Iterator for Methods<'i> {
    type Item = Method<'i>;

    fn next(&mut self) -> Option<Method<'i>> {
        if self.next > self.end {
            return None;
        }
        let rid = self.next;
        self.next += 1;
        // Rows lie inside the table stream by construction, so this only fails on a bug.
        self.image.method(rid).ok()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = (self.end + 1).saturating_sub(self.next) as usize;
        (n, Some(n))
    }
}

/// One MethodDef row with access to its name, signature and body bytes.
#[derive(Clone, Copy)]
pub struct Method<'i> {
    image: &'i Image<'i>,
    rid: u32,
    row: tables::MethodDefRow,
}

impl std::fmt::Debug for Method<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Method")
            .field("token", &self.token())
            .field("rva", &self.row.rva)
            .finish_non_exhaustive()
    }
}

/// [`Method::is_misaligned_fat`] on body bytes already read: a fat header at an RVA that is not
/// 4-byte aligned.
fn misaligned_fat(rva: u32, body: &[u8]) -> bool {
    !rva.is_multiple_of(4) && body.first().is_some_and(|&h| h & 0x3 == 0x3)
}

/// What [`Method::write_full_name`] keeps from one method to the next of the same image: the
/// last declaring type's name, and each signature's parameter list (methods share a few
/// thousand signatures).
#[derive(Debug, Default, Clone)]
pub struct FullNames {
    /// The image the names are of (its address): another one empties the caches.
    image: usize,
    owner: Option<u32>,
    /// The last method's declaring type and its MethodDef rows `lo..hi`, when the image's
    /// method lists are in order.
    span: Option<(u32, u32, u32)>,
    /// Whether the image's method lists are in order (read on the second name: a cache that
    /// names one method, as [`Method::full_name`]'s, has no next one to spare a search for,
    /// and reading the order is a pass over every TypeDef).
    sorted: Option<bool>,
    /// A name of the image was written with this cache before.
    used: bool,
    /// `Namespace.Type::`.
    prefix: String,
    /// The number of each signature's `(params)` (in order of first use), by signature blob
    /// index: a small entry, so the table stays in the cache.
    params: std::collections::HashMap<u32, u32, FxBuild>,
    /// Where each `(params)` lies in `pool`, by number.
    ranges: Vec<(usize, usize)>,
    /// The parameter lists, one after another (a string each would be an allocation each).
    pool: String,
    /// Where a parameter list is rendered before it joins `pool`.
    scratch: String,
    /// The names of the types those parameter lists name.
    types: names::KnownNames,
}

type FxBuild = std::hash::BuildHasherDefault<crate::verify::types::fx::FxHasher>;

impl FullNames {
    /// An empty cache with room for the parameter lists of `methods` methods' names (they
    /// share signatures: about one for every three methods in mono 4.5).
    pub fn with_capacity(methods: usize) -> Self {
        Self {
            params: std::collections::HashMap::with_capacity_and_hasher(
                methods / 3,
                FxBuild::default(),
            ),
            ranges: Vec::with_capacity(methods / 3),
            ..Self::default()
        }
    }
}

/// A method's full name in three pieces ([`Method::full_name_parts`]): `prefix`, `name` and
/// `params` joined are [`Method::full_name`].
#[derive(Debug, Clone, Copy)]
pub struct FullNameParts<'n, 'i> {
    /// The declaring TypeDef's row id (`None` for a method no type's list covers).
    pub owner: Option<u32>,
    /// `Namespace.Type::` (empty without an owner): the same for every method of `owner`.
    pub prefix: &'n str,
    /// The method's simple name.
    pub name: &'i str,
    /// The `#Blob` index of its signature: methods with the same one have the same `params`.
    pub signature: u32,
    /// `(int32,string)`.
    pub params: &'n str,
    /// The number of `params` in the [`FullNames`] that made these parts (0, 1, 2, … in
    /// order of first use): the same for the same `signature`, so a caller can keep what it
    /// derives from a parameter list in a table by number instead of a map.
    pub params_id: u32,
}

impl<'i> Method<'i> {
    /// The MethodDef token (0x06 table byte, the row id).
    pub fn token(&self) -> Token {
        Token::new(Table::MethodDef, self.rid)
    }

    /// The MethodDef row id (1-based).
    pub fn rid(&self) -> u32 {
        self.rid
    }

    /// The MethodDef row as stored.
    pub fn row(&self) -> &tables::MethodDefRow {
        &self.row
    }

    /// RVA of the body's header; 0 for a method without a body.
    pub fn rva(&self) -> u32 {
        self.row.rva
    }

    /// MethodAttributes (II.23.1.10).
    pub fn flags(&self) -> u16 {
        self.row.flags
    }

    /// MethodImplAttributes (II.23.1.11).
    pub fn impl_flags(&self) -> u16 {
        self.row.impl_flags
    }

    /// The simple name, e.g. `Concat`.
    pub fn name(&self) -> Result<&'i str, ImageError> {
        self.image.strings().get(self.row.name)
    }

    /// The signature blob.
    pub fn signature_blob(&self) -> Result<&'i [u8], ImageError> {
        self.image.blobs().get(self.row.signature)
    }

    /// The MethodDefSig, summarised: `this`, parameter count, return of `void`, generics.
    pub fn signature(&self) -> Result<MethodSigSummary, ImageError> {
        let (blob, offset) = self.image.sig_blob(self.row.signature)?;
        sig::method_sig_summary(blob).map_err(|source| ImageError::Sig { offset, source })
    }

    /// The native library and entry point of a P/Invoke method (its ImplMap row), when it has
    /// one: `("libc", "getpid")`. Only a method flagged PinvokeImpl (II.23.1.10) is looked up,
    /// so that naming every method of an image does not scan the table for each.
    pub fn pinvoke(&self) -> Result<Option<(&'i str, &'i str)>, ImageError> {
        const PINVOKE_IMPL: u16 = 0x2000;
        if self.flags() & PINVOKE_IMPL == 0 {
            return Ok(None);
        }
        let tables = self.image.tables();
        let Some(row) = tables.impl_map_of(self.token())? else {
            return Ok(None);
        };
        let entry = self.image.strings().get(row.import_name)?;
        let library = tables.cell(Table::ModuleRef, row.import_scope, 0)?;
        Ok(Some((self.image.strings().get(library)?, entry)))
    }

    /// The declaring TypeDef's row id (None for a MethodDef no type's method list covers).
    pub fn declaring_type(&self) -> Result<Option<u32>, ImageError> {
        self.image.tables().declaring_type(self.rid)
    }

    /// `Namespace.Outer/Inner::Method(int32,string)`.
    pub fn full_name(&self) -> Result<String, ImageError> {
        let mut out = String::new();
        self.write_full_name(&mut FullNames::default(), &mut out)?;
        Ok(out)
    }

    /// [`Self::full_name`] into `out` (replacing its contents), with the declaring type's
    /// name and the parameter list taken from `names` when an earlier method of the image
    /// had them (see [`Self::full_name_parts`]).
    pub fn write_full_name(
        &self,
        names: &mut FullNames,
        out: &mut String,
    ) -> Result<(), ImageError> {
        out.clear();
        let parts = self.full_name_parts(names)?;
        out.push_str(parts.prefix);
        out.push_str(parts.name);
        out.push_str(parts.params);
        Ok(())
    }

    /// The three pieces of [`Self::full_name`], with the declaring type's name taken from
    /// `names` when the method before had the same one (methods in rid order come in runs of
    /// one type) and the parameter list when an earlier method had the same signature blob.
    pub fn full_name_parts<'n>(
        &self,
        names: &'n mut FullNames,
    ) -> Result<FullNameParts<'n, 'i>, ImageError> {
        let image = std::ptr::from_ref(self.image) as usize;
        if names.image != image {
            // Emptied in place: a cache made with room keeps it.
            names.image = image;
            names.owner = None;
            names.span = None;
            names.sorted = None;
            names.used = false;
            names.prefix.clear();
            names.params.clear();
            names.ranges.clear();
            names.pool.clear();
            names.types.clear();
        }
        let owner = match names.span {
            // Methods in rid order: the type of the last one, until its rows end.
            Some((owner, lo, hi)) if (lo..hi).contains(&self.rid) => Some(owner),
            _ => {
                let tables = self.image.tables();
                let owner = tables.declaring_type(self.rid)?;
                if std::mem::replace(&mut names.used, true) {
                    let sorted = *names
                        .sorted
                        .get_or_insert_with(|| tables.method_lists_sorted());
                    names.span = owner
                        .filter(|_| sorted)
                        .and_then(|o| tables.method_span(o).map(|(lo, hi)| (o, lo, hi)));
                }
                owner
            }
        };
        match owner {
            Some(owner) => {
                if names.owner != Some(owner) {
                    names.owner = None;
                    names.prefix.clear();
                    self.image
                        .write_type_name(Token::new(Table::TypeDef, owner), &mut names.prefix)?;
                    names.prefix.push_str("::");
                    names.owner = Some(owner);
                }
            }
            None => {
                names.owner = None;
                names.prefix.clear();
            }
        }
        let name = self.name()?;
        let signature = self.row.signature;
        let next = names.ranges.len() as u32;
        let params_id = match names.params.entry(signature) {
            std::collections::hash_map::Entry::Occupied(e) => *e.get(),
            std::collections::hash_map::Entry::Vacant(slot) => {
                let (blob, offset) = self.image.sig_blob(signature)?;
                let sig_names = SigNames::remembering(
                    self.image,
                    sig::Style::Compact,
                    std::mem::take(&mut names.types),
                );
                // Rendered on its own (the renderer bounds the length of what it writes),
                // then kept in the pool.
                names.scratch.clear();
                let rendered = sig::render_method_params(blob, &sig_names, &mut names.scratch);
                names.types = sig_names.into_known();
                rendered.map_err(|source| ImageError::Sig { offset, source })?;
                let start = names.pool.len();
                names.pool.push_str(&names.scratch);
                names.ranges.push((start, names.pool.len()));
                *slot.insert(next)
            }
        };
        // Numbers are handed out with their range.
        let (start, end) = names.ranges[params_id as usize];
        let params = &names.pool[start..end];
        Ok(FullNameParts {
            owner,
            prefix: &names.prefix,
            name,
            signature,
            params,
            params_id,
        })
    }

    /// File offset of the body, when the RVA is non-zero and mapped.
    pub fn body_offset(&self) -> Option<usize> {
        if self.row.rva == 0 {
            return None;
        }
        self.image.rva_to_offset(self.row.rva)
    }

    /// The bytes from the body's start to the end of its section; the body codec finds the
    /// exact extent. Errors for RVA 0 (no body) and for RVAs in no section.
    pub fn body_bytes(&self) -> Result<&'i [u8], ImageError> {
        self.image.body_bytes_at(self.token(), self.row.rva)
    }

    /// Whether the body starts with a fat header at an RVA that is not 4-byte aligned
    /// (II.25.4.3 requires the alignment; EH sections are aligned relative to it).
    pub fn is_misaligned_fat(&self) -> bool {
        self.body_bytes()
            .is_ok_and(|b| misaligned_fat(self.row.rva, b))
    }

    /// The decoded body.
    pub fn decoded_body(&self) -> Result<Body<'i>, ImageError> {
        self.decoded_body_and_bytes().map(|(body, _)| body)
    }

    /// Exactly the bytes the body occupies: header, code, padding and sections.
    pub fn body(&self) -> Result<&'i [u8], ImageError> {
        self.decoded_body_and_bytes().map(|(_, bytes)| bytes)
    }

    /// [`Self::decoded_body`] and [`Self::body`] from one lookup of the body's bytes.
    pub fn decoded_body_and_bytes(&self) -> Result<(Body<'i>, &'i [u8]), ImageError> {
        self.image.body_at(self.token(), self.row.rva)
    }
}
