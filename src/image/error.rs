//! Errors of the assembly reader. Offsets are file offsets unless a variant says otherwise;
//! callers add the path.

use thiserror::Error;

/// The PE parser's own account of a malformed container.
#[derive(Debug)]
pub struct PeError(pub(crate) goblin::error::Error);

impl std::fmt::Display for PeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for PeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

use super::ids::{CodedIndex, Table, Token};
use super::sig::SigError;

/// Why an image could not be read.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ImageError {
    /// The file could not be opened, mapped or read (or is not a regular file).
    #[error("cannot read file: {0}")]
    Io(#[from] std::io::Error),
    /// The PE container does not parse (not a PE file, or its headers are malformed).
    #[error("not a PE image: {0}")]
    Pe(PeError),
    /// The PE file has no optional header, so no data directories.
    #[error("not a PE image: no optional header")]
    NoOptionalHeader,
    /// The optional header has no CLI header directory (index 14), or its RVA is 0: a native
    /// PE file, not a .NET assembly or module.
    #[error("PE image without a CLI header (not a .NET assembly)")]
    NotDotNet,
    /// A structure runs past the end of the data that must hold it (the file, the table
    /// stream, the rest of a section).
    #[error(
        "{what} at offset {offset:#x} needs {needed} bytes, which run past the end of its data"
    )]
    Truncated {
        /// Which structure: "CLI header", "metadata root", "table row", …
        what: &'static str,
        /// File offset where the structure starts.
        offset: usize,
        /// Bytes the structure needs from `offset` (its whole size, not only the missing part).
        needed: usize,
    },
    /// An RVA that must point at file data (the CLI header, the metadata) lies in no section's
    /// file data.
    #[error("{what} RVA {rva:#x} lies in no section's file data")]
    RvaNotMapped {
        /// What the RVA locates.
        what: &'static str,
        /// The RVA as stored.
        rva: u32,
    },
    /// The CLI header's `cb` is below the 72 bytes of II.25.3.3.
    #[error("CLI header at offset {offset:#x} has size {cb}, expected at least 72")]
    BadCliHeader {
        /// File offset of the CLI header.
        offset: usize,
        /// The size it declares, in bytes.
        cb: u32,
    },
    /// The metadata root (II.24.2.1) does not start with the signature `BSJB` (0x424A5342).
    #[error("metadata root at offset {offset:#x} has signature {found:#010x}, expected 0x424a5342")]
    BadMetadataSignature {
        /// File offset of the metadata root.
        offset: usize,
        /// The four bytes found, little-endian.
        found: u32,
    },
    /// The metadata root is malformed otherwise: a version string longer than 255 bytes, a
    /// stream name without a NUL within 32 bytes; for new metadata, more streams than a header
    /// can count.
    #[error("metadata at offset {offset:#x}: {reason}")]
    BadMetadata {
        /// File offset of the field at fault.
        offset: usize,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A stream header (II.24.2.2) places its stream wholly or partly past the end of the file.
    #[error("stream {name} (offset {offset:#x}, size {size:#x}) runs past the end of the file")]
    StreamOutOfBounds {
        /// The stream's name when it is one ECMA-335 defines, else "of another name".
        name: &'static str,
        /// File offset of the stream (the root's offset plus the header's, saturated).
        offset: usize,
        /// The stream's size in bytes, as declared.
        size: usize,
    },
    /// The metadata lacks a stream the reader cannot do without: the table stream (`#~` or
    /// `#-`). A missing heap reads as empty instead.
    #[error("metadata has no {0} stream")]
    MissingStream(&'static str),
    /// The table stream's Valid vector sets a bit above 0x2C, a table ECMA-335 does not define;
    /// its row count cannot be skipped without knowing its schema.
    #[error(
        "table stream at offset {offset:#x} declares table {table:#04x}, which ECMA-335 does not define"
    )]
    UnknownTable {
        /// The table number (the bit of Valid).
        table: u8,
        /// File offset of the Valid field.
        offset: usize,
    },
    /// A table's rows do not fit in what remains of the table stream: its row count is hostile
    /// or the stream is cut short.
    #[error(
        "table {table:?}: {rows} rows of {row_size} bytes at offset {offset:#x} exceed the {available} bytes left in the table stream"
    )]
    TableTooLarge {
        /// The table.
        table: Table,
        /// Its declared row count.
        rows: u32,
        /// Bytes per row.
        row_size: u32,
        /// File offset where the table would start.
        offset: usize,
        /// Bytes of the table stream from `offset` on.
        available: usize,
    },
    /// A row id is 0 or past the table's row count (or, from a cell read, a column index is
    /// past the table's schema).
    #[error("{table:?} row {rid} does not exist (table has {rows} rows)")]
    RowOutOfRange {
        /// The table read.
        table: Table,
        /// The row id asked for.
        rid: u32,
        /// The table's row count.
        rows: u32,
    },
    /// A coded-index column holds a tag that names no table (an unused tag of
    /// CustomAttributeType, or one past the kind's list).
    #[error("{kind:?} value {value:#x} in {table:?} row {rid} has a tag naming no table")]
    BadCodedIndex {
        /// The coded-index kind of the column.
        kind: CodedIndex,
        /// The stored value, tag included.
        value: u32,
        /// The table holding the column.
        table: Table,
        /// The row holding the column.
        rid: u32,
    },
    /// A heap index points at or past the end of its heap.
    #[error(
        "{heap} index {index:#x} is outside the heap (heap at offset {heap_offset:#x}, {heap_size} bytes)"
    )]
    HeapIndex {
        /// `#Strings`, `#Blob`, `#US` or `#GUID`.
        heap: &'static str,
        /// The index: a byte offset into the heap, or a 1-based entry number for `#GUID`.
        index: u32,
        /// File offset of the heap.
        heap_offset: usize,
        /// Size of the heap in bytes.
        heap_size: usize,
    },
    /// A heap entry is malformed: a string without its NUL or not UTF-8, a length prefix that
    /// does not decode, an entry running past the end of the heap.
    #[error("{heap} entry at offset {offset:#x}: {reason}")]
    BadHeapEntry {
        /// `#Strings`, `#Blob` or `#US`.
        heap: &'static str,
        /// File offset of the entry.
        offset: usize,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A signature blob does not parse.
    #[error("signature blob at offset {offset:#x}: {source}")]
    Sig {
        /// File offset of the blob's first content byte (after its length prefix); the
        /// source's offsets are relative to it.
        offset: usize,
        /// What the signature reader found.
        source: SigError,
    },
    /// A token names the wrong kind of thing for its use: a call target that is no method, a
    /// type token that is no type, a locals token that is a method signature, or a chain of
    /// types nested too deeply (or in a cycle).
    #[error("token {token} cannot be used here: {reason}")]
    BadToken {
        /// The token at fault.
        token: Token,
        /// Why it cannot be used.
        reason: &'static str,
    },
    /// A type's signature (a TypeSpec, a member's signature) names a type that cannot be
    /// read: the first such type, and why.
    #[error("{token} names a type that cannot be read: {reason}")]
    BadTypeName {
        /// The token whose name was asked for.
        token: Token,
        /// The type inside it that cannot be named, and why.
        reason: super::names::NameFailure,
    },
    /// A MethodDef's RVA is non-zero but lies in no section's file data.
    #[error("method {token}: body RVA {rva:#x} lies in no section's file data")]
    BodyOutsideSections {
        /// The MethodDef.
        token: Token,
        /// Its RVA.
        rva: u32,
    },
    /// A method body does not decode (header, code or sections), or starts with a fat header
    /// at an RVA that is not 4-byte aligned.
    #[error("method {token}: body at offset {offset:#x}: {source}")]
    Body {
        /// The MethodDef.
        token: Token,
        /// File offset of the body's header.
        offset: usize,
        /// What the body decoder found (offsets relative to the body).
        source: crate::body::DecodeError,
    },
    /// A body was asked of a method whose RVA is 0 (abstract, `extern`, runtime-implemented).
    #[error("method {token} has RVA 0 and no body")]
    NoBody {
        /// The MethodDef.
        token: Token,
    },
}
