//! Metadata emit: new rows and heap entries for an image, and the metadata that holds them.
//!
//! A [`MetadataBuilder`] starts from an image and adds what a rewrite needs that the assembly
//! does not have: strings, blobs, `ldstr` literals, and rows of AssemblyRef, TypeRef, TypeSpec,
//! MemberRef, MethodSpec and StandAloneSig (and of any other unsorted table). Every existing
//! row and heap entry keeps its index, so every token in the image stays valid; a reference with
//! the same identity and signature as an existing one is returned instead of being added again.
//!
//! [`MetadataBuilder::build`] writes a whole new metadata root: the original streams in their
//! order, the heaps with the new entries after the old ones, and the table stream with every
//! column re-sized where a table or heap crossed 2^16 (II.24.2.6): simple and coded indexes,
//! heap-size flags. Tables whose column widths did not change are copied byte for byte. The
//! writer places the result in the relocation area and points the CLI header at it; the old
//! metadata stays where it was, unreferenced.

pub mod assembly;
mod heaps;
mod literals;
pub mod probe;
mod refs;
mod resolver;

pub use literals::MethodNameLiterals;
pub use refs::AssemblyIdentity;
pub use resolver::{Additions, EmitResolver};

use heaps::{GrowingHeap, HeapKind, MAX_USER_STRING_INDEX};

use super::Image;
use super::error::ImageError;
use super::tables::{
    MAX_COLUMNS, TABLE_COUNT, Table, TablesHeader, Token, USER_STRING_TABLE, column_width,
    heap_sizes, schema,
};
use thiserror::Error;

/// Why a metadata addition or the new metadata could not be made.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum EmitError {
    /// A heap would grow past what its indexes can address.
    #[error("the {heap} heap would grow past what its indexes can address")]
    HeapFull {
        /// The heap's stream name.
        heap: &'static str,
    },
    /// A `#Strings` entry cannot hold a NUL character.
    #[error("a metadata string cannot contain a NUL character")]
    NulInString,
    /// A blob longer than a compressed length can say (2^29 - 1 bytes).
    #[error("a blob of {len} bytes is longer than a compressed length can say")]
    BlobTooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// A row was given with the wrong number of columns for its table.
    #[error("{table:?} has {expected} columns, {found} were given")]
    ColumnCount {
        /// The table.
        table: Table,
        /// Columns the table has (II.22).
        expected: usize,
        /// Columns given.
        found: usize,
    },
    /// The table is kept sorted by a key (II.22): adding rows there is not supported.
    #[error("{table:?} is a sorted table: adding rows to it is not supported")]
    SortedTable {
        /// The table.
        table: Table,
    },
    /// The image's table stream is `#-` and this table is reached through a Ptr table.
    #[error(
        "{table:?} rows of an uncompressed (#-) table stream are reached through a Ptr table: adding them is not supported"
    )]
    PointerTable {
        /// The table.
        table: Table,
    },
    /// A table would have more rows than a token can name (2^24 - 1).
    #[error("{table:?} would have more than 16,777,215 rows")]
    TableFull {
        /// The table.
        table: Table,
    },
    /// A token of a table this kind of column cannot name.
    #[error("token {token} cannot stand in this column")]
    BadToken {
        /// The token.
        token: Token,
    },
    /// A program was built without an entry point.
    #[error("a program needs an entry point")]
    NoEntryPoint,
    /// An array of `void` was asked for in a signature.
    #[error("an array's element type cannot be void")]
    VoidElement,
    /// The image's metadata could not be read.
    #[error(transparent)]
    Image(#[from] ImageError),
}

/// Tables whose rows are kept sorted by a key column (II.22; the CLR checks several of them).
const SORTED_TABLES: [Table; 14] = [
    Table::ClassLayout,
    Table::Constant,
    Table::CustomAttribute,
    Table::DeclSecurity,
    Table::FieldLayout,
    Table::FieldMarshal,
    Table::FieldRva,
    Table::GenericParam,
    Table::GenericParamConstraint,
    Table::ImplMap,
    Table::InterfaceImpl,
    Table::MethodImpl,
    Table::MethodSemantics,
    Table::NestedClass,
];

/// Tables a `#-` stream may reach through a Ptr table.
const POINTED_TABLES: [Table; 5] = [
    Table::Field,
    Table::MethodDef,
    Table::Param,
    Table::Event,
    Table::Property,
];

/// One added row: its columns' stored values (heap indexes, row ids, coded indexes).
type Row = [u32; MAX_COLUMNS];

/// Additions to an image's metadata (see the module documentation).
pub struct MetadataBuilder<'i, 'a> {
    image: &'i Image<'a>,
    strings: GrowingHeap<'i>,
    blobs: GrowingHeap<'i>,
    user_strings: GrowingHeap<'i>,
    /// GUIDs appended after the original `#GUID` entries.
    guids: Vec<[u8; 16]>,
    added: Vec<Vec<Row>>,
    /// Added rows by value, per table: finding an added row must not cost a scan of all of
    /// them (a builder may add tens of thousands).
    added_index: Vec<std::collections::HashMap<Row, u32>>,
    /// The original rows of each of [`refs::KEYED_TABLES`] by what a lookup matches them on,
    /// built the first time the table is searched: a transform that adds a local, boxes an
    /// argument or calls a probe in every method looks a row up per method, which must not
    /// cost a scan of the table. `None` inside: a row could not be read, so lookups scan.
    original_rows: [Option<Option<refs::OriginalRows<'i>>>; refs::KEYED_TABLES.len()],
    /// Memory for the table stream and the root [`MetadataBuilder::build`] writes.
    spare_tables: Spare,
    spare_root: Spare,
}

/// A buffer lent to [`MetadataBuilder::build`] (which takes `&self`; the builder is shared by
/// the rewriting threads, so a lock rather than a cell).
#[derive(Debug, Default)]
struct Spare(std::sync::Mutex<Vec<u8>>);

impl Spare {
    fn new(buffer: Vec<u8>) -> Self {
        Spare(std::sync::Mutex::new(buffer))
    }

    /// The buffer, emptied (a fresh one if another build has it).
    fn take(&self) -> Vec<u8> {
        let mut buffer = self
            .0
            .lock()
            .map(|mut b| std::mem::take(&mut *b))
            .unwrap_or_default();
        buffer.clear();
        buffer
    }

    fn set(&self, buffer: Vec<u8>) {
        if let Ok(mut b) = self.0.lock() {
            *b = buffer;
        }
    }

    fn into_inner(self) -> Vec<u8> {
        self.0.into_inner().unwrap_or_default()
    }
}

/// The memory a [`MetadataBuilder`] works in, kept by a caller that builds metadata for one
/// image after another: each then starts in memory already in use rather than fresh pages
/// (`#US` literals for every method of a large assembly run to megabytes).
#[derive(Debug, Default)]
pub struct EmitBuffers {
    heaps: [heaps::HeapBuffers; 3],
    tables: Vec<u8>,
    root: Vec<u8>,
}

impl EmitBuffers {
    /// Takes back the memory of metadata built with these buffers, once it is written.
    pub fn recycle(&mut self, built: BuiltMetadata) {
        if built.bytes.capacity() > self.root.capacity() {
            self.root = built.bytes;
        }
    }
}

impl std::fmt::Debug for MetadataBuilder<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let rows: usize = self.added.iter().map(Vec::len).sum();
        f.debug_struct("MetadataBuilder")
            .field("rows_added", &rows)
            .field("strings_grew", &self.strings.grew())
            .field("blobs_grew", &self.blobs.grew())
            .field("user_strings_grew", &self.user_strings.grew())
            .finish_non_exhaustive()
    }
}

/// Where a stream of the new root comes from: the new table stream, a heap with what it
/// grew by, the GUIDs stored (at that range of the file) and added, or the stream's bytes as
/// stored (at that range of the file).
#[derive(Debug, Clone)]
enum StreamSource {
    Tables,
    Strings,
    Blobs,
    UserStrings,
    Guids(std::ops::Range<usize>),
    Original(std::ops::Range<usize>),
}

/// New metadata laid out and ready to be written ([`MetadataBuilder::prepare`]).
#[derive(Debug)]
pub struct PreparedMetadata<'b, 'i, 'a> {
    builder: &'b MetadataBuilder<'i, 'a>,
    /// The root's fixed part, version string, stream count and stream headers.
    head: Vec<u8>,
    /// Each stream's source, in order.
    streams: Vec<StreamSource>,
    tables_stream: Vec<u8>,
    /// The table stream's layout, with offsets from the stream's start.
    tables: TablesHeader,
    /// Where the table stream starts in the root.
    tables_at: usize,
    /// The root's size (a multiple of 4).
    len: usize,
}

impl PreparedMetadata<'_, '_, '_> {
    /// The size of the root in bytes (a multiple of 4).
    pub fn size(&self) -> usize {
        self.len
    }

    /// Offset in the root and width of column `col` of row `rid` of `table`.
    pub fn cell_at(&self, table: Table, rid: u32, col: usize) -> Option<(usize, usize)> {
        let (at, width) = cell_in(&self.tables, table, rid, col)?;
        Some((self.tables_at + at, width))
    }

    /// Appends the root's [`Self::size`] bytes to `out`.
    pub fn write_to(&self, out: &mut Vec<u8>) {
        let builder = self.builder;
        let start = out.len();
        out.extend_from_slice(&self.head);
        for content in &self.streams {
            match content {
                StreamSource::Tables => out.extend_from_slice(&self.tables_stream),
                StreamSource::Strings => builder.strings.write_unpadded(out),
                StreamSource::Blobs => builder.blobs.write_unpadded(out),
                StreamSource::UserStrings => builder.user_strings.write_unpadded(out),
                StreamSource::Guids(stored) => {
                    out.extend_from_slice(builder.stored(stored));
                    for g in &builder.guids {
                        out.extend_from_slice(g);
                    }
                }
                StreamSource::Original(range) => out.extend_from_slice(builder.stored(range)),
            }
            let end = start + (out.len() - start).next_multiple_of(4);
            out.resize(end, 0);
        }
        debug_assert_eq!(out.len() - start, self.len);
    }

    /// Gives the table stream's memory back to the builder, for its next build.
    pub fn recycle(self) {
        self.builder.spare_tables.set(self.tables_stream);
    }
}

/// Offset from the table stream's layout origin and width of a cell.
fn cell_in(tables: &TablesHeader, table: Table, rid: u32, col: usize) -> Option<(usize, usize)> {
    let info = tables.info(table);
    if rid == 0 || rid > info.rows {
        return None;
    }
    let (off, width) = info.column(col)?;
    Some((
        info.offset + (rid as usize - 1) * info.row_size as usize + off,
        width,
    ))
}

/// New metadata: the bytes of a whole metadata root and the layout of its tables.
#[derive(Debug, Clone)]
pub struct BuiltMetadata {
    /// The metadata root (BSJB) and its streams, 4-byte aligned in size.
    pub bytes: Vec<u8>,
    /// The table stream as read back from `bytes` (offsets are into `bytes`).
    pub tables: TablesHeader,
}

impl BuiltMetadata {
    /// Offset into [`Self::bytes`] and width of column `col` of row `rid` of `table`.
    pub fn cell_at(&self, table: Table, rid: u32, col: usize) -> Option<(usize, usize)> {
        cell_in(&self.tables, table, rid, col)
    }
}

impl<'i, 'a> MetadataBuilder<'i, 'a> {
    /// A builder that adds nothing yet.
    pub fn new(image: &'i Image<'a>) -> Self {
        Self::with_buffers(image, EmitBuffers::default())
    }

    /// [`Self::new`], working in `buffers` (see [`EmitBuffers`]).
    pub fn with_buffers(image: &'i Image<'a>, buffers: EmitBuffers) -> Self {
        let EmitBuffers {
            heaps: [strings, blobs, user_strings],
            tables,
            root,
        } = buffers;
        let heap = |r: super::metadata::StreamRange| {
            image
                .bytes()
                .get(r.offset..r.offset + r.size)
                .unwrap_or(&[])
        };
        let md = image.metadata();
        MetadataBuilder {
            image,
            strings: GrowingHeap::with_buffers(heap(md.strings), HeapKind::Strings, strings),
            blobs: GrowingHeap::with_buffers(heap(md.blob), HeapKind::LengthPrefixed, blobs),
            user_strings: GrowingHeap::with_buffers(
                heap(md.user_strings),
                HeapKind::LengthPrefixed,
                user_strings,
            ),
            guids: Vec::new(),
            added: vec![Vec::new(); TABLE_COUNT],
            added_index: vec![std::collections::HashMap::new(); TABLE_COUNT],
            original_rows: Default::default(),
            spare_tables: Spare::new(tables),
            spare_root: Spare::new(root),
        }
    }

    /// The builder's memory, for the next image's builder ([`Self::with_buffers`]).
    pub fn into_buffers(self) -> EmitBuffers {
        EmitBuffers {
            heaps: [
                self.strings.into_buffers(),
                self.blobs.into_buffers(),
                self.user_strings.into_buffers(),
            ],
            tables: self.spare_tables.into_inner(),
            root: self.spare_root.into_inner(),
        }
    }

    /// The image the additions are for.
    pub fn image(&self) -> &'i Image<'a> {
        self.image
    }

    /// Whether nothing has been added (building would reproduce the image's metadata).
    pub fn is_empty(&self) -> bool {
        self.added.iter().all(Vec::is_empty)
            && !self.strings.grew()
            && !self.blobs.grew()
            && !self.user_strings.grew()
            && self.guids.is_empty()
    }

    /// The `#Strings` index of `s`, appending it when the heap does not hold it yet.
    pub fn string(&mut self, s: &str) -> Result<u32, EmitError> {
        if s.is_empty() {
            return Ok(0);
        }
        self.strings.intern(s.as_bytes())
    }

    /// The `#Blob` index of `blob`, appending it when the heap does not hold it yet.
    pub fn blob(&mut self, blob: &[u8]) -> Result<u32, EmitError> {
        if blob.is_empty() {
            return Ok(0);
        }
        self.blobs.intern(blob)
    }

    /// Makes room for `count` new `#US` literals of about `chars` characters each, for a run
    /// of [`Self::user_string`] calls (nothing is added).
    pub fn reserve_user_strings(&mut self, count: usize, chars: usize) {
        self.user_strings.reserve(count, count * (2 * chars + 2));
    }

    /// The `ldstr` token of the literal `s` (a `#US` entry, reused when present).
    pub fn user_string(&mut self, s: &str) -> Result<Token, EmitError> {
        let index = self.user_strings.intern_user_string(s)?;
        if index as usize > MAX_USER_STRING_INDEX {
            return Err(EmitError::HeapFull { heap: "#US" });
        }
        Ok(Token((u32::from(USER_STRING_TABLE) << 24) | index))
    }

    /// [`Self::user_string`] of strings given as their UTF-16 code units, in parts (see
    /// [`MethodNameLiterals`]): `special` when any unit is one II.24.2.4 flags.
    fn user_string_parts(&mut self, parts: &[&[u8]], special: bool) -> Result<Token, EmitError> {
        let index = self.user_strings.intern_user_string_parts(parts, special)?;
        if index as usize > MAX_USER_STRING_INDEX {
            return Err(EmitError::HeapFull { heap: "#US" });
        }
        Ok(Token((u32::from(USER_STRING_TABLE) << 24) | index))
    }

    /// The 1-based `#GUID` index of a new GUID entry.
    pub fn guid(&mut self, guid: [u8; 16]) -> u32 {
        self.guids.push(guid);
        (self.image.metadata().guid.size / 16 + self.guids.len()) as u32
    }

    /// Rows `table` will have: the image's and the added ones.
    pub fn rows(&self, table: Table) -> u32 {
        self.image.tables_header().rows(table) + self.added[table as usize].len() as u32
    }

    /// The first added row of `table` whose columns are `values`.
    pub fn find_added(&self, table: Table, values: &[u32]) -> Option<Token> {
        let mut row = [0u32; MAX_COLUMNS];
        row.get_mut(..values.len())?.copy_from_slice(values);
        self.added_index[table as usize]
            .get(&row)
            .map(|&rid| Token::new(table, rid))
    }

    /// The rows added to `table` so far, with their tokens.
    pub fn added_rows(&self, table: Table) -> impl Iterator<Item = (Token, &[u32])> + '_ {
        let first = self.image.tables_header().rows(table) + 1;
        self.added[table as usize]
            .iter()
            .enumerate()
            .map(move |(i, row)| {
                (
                    Token::new(table, first + i as u32),
                    &row[..schema(table).len()],
                )
            })
    }

    /// Appends a row of stored column values (heap indexes from this builder, row ids, coded
    /// indexes) and returns its token. Sorted tables and, in `#-` streams, tables behind Ptr
    /// tables are refused.
    pub fn add_row(&mut self, table: Table, columns: &[u32]) -> Result<Token, EmitError> {
        let expected = schema(table).len();
        if columns.len() != expected {
            return Err(EmitError::ColumnCount {
                table,
                expected,
                found: columns.len(),
            });
        }
        if SORTED_TABLES.contains(&table) {
            return Err(EmitError::SortedTable { table });
        }
        if self.image.tables_header().uncompressed && POINTED_TABLES.contains(&table) {
            return Err(EmitError::PointerTable { table });
        }
        let rid = self.rows(table) + 1;
        if rid > 0x00FF_FFFF {
            return Err(EmitError::TableFull { table });
        }
        let mut row = [0u32; MAX_COLUMNS];
        row[..expected].copy_from_slice(columns);
        self.added[table as usize].push(row);
        self.added_index[table as usize].entry(row).or_insert(rid);
        Ok(Token::new(table, rid))
    }

    /// The new metadata root (see the module documentation).
    pub fn build(&self) -> Result<BuiltMetadata, EmitError> {
        let prepared = self.prepare()?;
        let mut out = self.spare_root.take();
        out.reserve(prepared.len);
        prepared.write_to(&mut out);
        let tables = TablesHeader::parse(
            &out,
            prepared.tables_at,
            prepared.tables_stream.len(),
            self.image.tables_header().uncompressed,
        )?;
        prepared.recycle();
        Ok(BuiltMetadata { bytes: out, tables })
    }

    /// The new metadata root laid out but not written: its size and the place of every
    /// table cell are known, and [`PreparedMetadata::write_to`] writes it straight into the
    /// caller's buffer (an image writer places it with no copy of its own first: with a
    /// `#US` literal for every method the heaps run to megabytes).
    pub fn prepare(&self) -> Result<PreparedMetadata<'_, 'i, 'a>, EmitError> {
        let image = self.image;
        let file = image.bytes();
        let md = image.metadata();
        let tables_stream = self.tables_stream()?;

        // The root's fixed part and version string, as stored.
        let version_len = super::read::le_u32(file, md.offset + 12).unwrap_or(0) as usize;
        let prefix_end = md.offset + 16 + version_len.next_multiple_of(4);
        let prefix = file
            .get(md.offset..prefix_end + 2)
            .ok_or(ImageError::Truncated {
                what: "metadata root",
                offset: md.offset,
                needed: prefix_end + 2 - md.offset,
            })?;

        // Each stream's new contents, in the original order; heaps that grew from nothing
        // are added at the end.
        let mut streams: Vec<(&str, StreamSource)> = Vec::new();
        let mut seen = [false; 4];
        for s in &md.streams {
            let content = match s.name.as_str() {
                "#~" | "#-" if s.offset == md.tables.offset => StreamSource::Tables,
                "#Strings" if s.offset == md.strings.offset => {
                    seen[0] = true;
                    StreamSource::Strings
                }
                "#Blob" if s.offset == md.blob.offset => {
                    seen[1] = true;
                    StreamSource::Blobs
                }
                "#US" if s.offset == md.user_strings.offset => {
                    seen[2] = true;
                    StreamSource::UserStrings
                }
                "#GUID" if s.offset == md.guid.offset => {
                    seen[3] = true;
                    StreamSource::Guids(s.offset..s.offset + s.size)
                }
                _ => StreamSource::Original(s.offset..s.offset + s.size),
            };
            streams.push((s.name.as_str(), content));
        }
        for (i, (name, grew)) in [
            ("#Strings", self.strings.grew()),
            ("#Blob", self.blobs.grew()),
            ("#US", self.user_strings.grew()),
            ("#GUID", !self.guids.is_empty()),
        ]
        .into_iter()
        .enumerate()
        {
            if grew && !seen[i] {
                let content = match i {
                    0 => StreamSource::Strings,
                    1 => StreamSource::Blobs,
                    2 => StreamSource::UserStrings,
                    _ => StreamSource::Guids(0..0),
                };
                streams.push((name, content));
            }
        }

        let count = u16::try_from(streams.len()).map_err(|_| ImageError::BadMetadata {
            offset: md.offset,
            reason: "more streams than a root can list",
        })?;
        let headers_len: usize = streams
            .iter()
            .map(|(name, _)| 8 + (name.len() + 1).next_multiple_of(4))
            .sum();
        let mut head = Vec::with_capacity(prefix.len() + 2 + headers_len);
        head.extend_from_slice(prefix);
        head.extend_from_slice(&count.to_le_bytes());
        let mut at = head.len() + headers_len;
        let mut tables_at = 0;
        let mut sources = Vec::with_capacity(streams.len());
        for (name, content) in streams {
            let len = self.stream_len(&content, tables_stream.len());
            let size = len.next_multiple_of(4);
            if matches!(content, StreamSource::Tables) {
                tables_at = at;
            }
            let heap_full = || EmitError::HeapFull { heap: "metadata" };
            head.extend_from_slice(&u32::try_from(at).map_err(|_| heap_full())?.to_le_bytes());
            head.extend_from_slice(&u32::try_from(size).map_err(|_| heap_full())?.to_le_bytes());
            head.extend_from_slice(name.as_bytes());
            let padded = (name.len() + 1).next_multiple_of(4);
            head.resize(head.len() + padded - name.len(), 0);
            at += size;
            sources.push(content);
        }
        // Where each table's rows lie, relative to the table stream for now.
        let tables = TablesHeader::parse(
            &tables_stream,
            0,
            tables_stream.len(),
            image.tables_header().uncompressed,
        )?;
        Ok(PreparedMetadata {
            builder: self,
            head,
            streams: sources,
            tables_stream,
            tables,
            tables_at,
            len: at,
        })
    }

    /// The bytes of the image at `range` (none when they are not all in the file).
    fn stored(&self, range: &std::ops::Range<usize>) -> &'i [u8] {
        self.image.bytes().get(range.clone()).unwrap_or(&[])
    }

    /// The unpadded size of a stream of the new root.
    fn stream_len(&self, content: &StreamSource, tables_len: usize) -> usize {
        match content {
            StreamSource::Tables => tables_len,
            StreamSource::Strings => self.strings.len(),
            StreamSource::Blobs => self.blobs.len(),
            StreamSource::UserStrings => self.user_strings.len(),
            // As much as `write_to` copies: the bytes of the range that are in the file.
            StreamSource::Guids(stored) => self.stored(stored).len() + 16 * self.guids.len(),
            StreamSource::Original(range) => self.stored(range).len(),
        }
    }

    /// The table stream with the added rows and re-sized columns.
    fn tables_stream(&self) -> Result<Vec<u8>, EmitError> {
        let image = self.image;
        let file = image.bytes();
        let h = image.tables_header();
        let start = image.metadata().tables.offset;
        let mut rows = [0u32; TABLE_COUNT];
        for t in Table::ALL {
            rows[t as usize] = self.rows(t);
        }
        let guid_count = image.metadata().guid.size / 16 + self.guids.len();
        let mut flags = h.heap_sizes;
        // By the stored (padded) size: a reader that compares the flag with the stream's size
        // sees them agree.
        if self.strings.len().next_multiple_of(4) >= 0x1_0000 {
            flags |= heap_sizes::BIG_STRINGS;
        }
        if self.blobs.len().next_multiple_of(4) >= 0x1_0000 {
            flags |= heap_sizes::BIG_BLOB;
        }
        if guid_count >= 0x1_0000 {
            flags |= heap_sizes::BIG_GUID;
        }
        let mut valid = h.valid;
        for t in Table::ALL {
            if !self.added[t as usize].is_empty() {
                valid |= 1u64 << (t as u8);
            }
        }

        let mut out = self.spare_tables.take();
        // Reserved, versions, heap sizes, reserved byte: as stored but for the new flags.
        let head = file.get(start..start + 8).ok_or(ImageError::Truncated {
            what: "table stream header",
            offset: start,
            needed: 8,
        })?;
        out.extend_from_slice(&head[..6]);
        out.push(flags);
        out.push(head[7]);
        out.extend_from_slice(&valid.to_le_bytes());
        out.extend_from_slice(&h.sorted.to_le_bytes());
        let mut counted = 0usize;
        for bit in 0..64u32 {
            if valid & (1u64 << bit) != 0 {
                out.extend_from_slice(&rows.get(bit as usize).copied().unwrap_or(0).to_le_bytes());
                if h.valid & (1u64 << bit) != 0 {
                    counted += 1;
                }
            }
        }
        if h.heap_sizes & heap_sizes::EXTRA_DATA != 0 {
            let at = start + 24 + 4 * counted;
            out.extend_from_slice(file.get(at..at + 4).unwrap_or(&[0; 4]));
        }

        for table in Table::ALL {
            let info = h.info(table);
            let cols = schema(table);
            let widths: Vec<u8> = cols
                .iter()
                .map(|&c| column_width(c, &rows, flags))
                .collect();
            let unchanged =
                (0..cols.len()).all(|i| info.column(i).map(|(_, w)| w as u8) == Some(widths[i]));
            if unchanged {
                let len = info.rows as usize * info.row_size as usize;
                let bytes =
                    file.get(info.offset..info.offset + len)
                        .ok_or(ImageError::Truncated {
                            what: "table rows",
                            offset: info.offset,
                            needed: len,
                        })?;
                out.extend_from_slice(bytes);
            } else {
                for rid in 1..=info.rows {
                    let values: [u32; MAX_COLUMNS] = h.row(file, table, rid)?;
                    put_row(&mut out, &values[..cols.len()], &widths);
                }
            }
            for row in &self.added[table as usize] {
                put_row(&mut out, &row[..cols.len()], &widths);
            }
        }
        out.resize(out.len().next_multiple_of(4), 0);
        Ok(out)
    }
}

/// Appends one row's values at the given widths.
fn put_row(out: &mut Vec<u8>, values: &[u32], widths: &[u8]) {
    for (&v, &w) in values.iter().zip(widths) {
        if w == 2 {
            // Widths come from the row counts and heap sizes, so a value always fits.
            out.extend_from_slice(&(v as u16).to_le_bytes());
        } else {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
}

#[cfg(test)]
mod tests;
