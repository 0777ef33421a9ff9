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

use super::sig::SigError;
use super::tables::{CodedIndex, Table, Token};

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
    #[error("PE image without a CLI header (not a .NET assembly)")]
    NotDotNet,
    #[error("{what} at offset {offset:#x} needs {needed} bytes beyond the end of its data")]
    Truncated {
        what: &'static str,
        offset: usize,
        needed: usize,
    },
    #[error("{what} RVA {rva:#x} lies in no section's file data")]
    RvaNotMapped { what: &'static str, rva: u32 },
    #[error("CLI header at offset {offset:#x} has size {cb}, expected at least 72")]
    BadCliHeader { offset: usize, cb: u32 },
    #[error("metadata root at offset {offset:#x} has signature {found:#010x}, expected 0x424a5342")]
    BadMetadataSignature { offset: usize, found: u32 },
    #[error("metadata at offset {offset:#x}: {reason}")]
    BadMetadata { offset: usize, reason: &'static str },
    #[error("stream {name} (offset {offset:#x}, size {size:#x}) runs past the end of the file")]
    StreamOutOfBounds {
        /// The stream's name when it is one ECMA-335 defines, else "of another name".
        name: &'static str,
        offset: usize,
        size: usize,
    },
    #[error("metadata has no {0} stream")]
    MissingStream(&'static str),
    #[error(
        "table stream at offset {offset:#x} declares table {table:#04x}, which ECMA-335 does not define"
    )]
    UnknownTable { table: u8, offset: usize },
    #[error(
        "table {table:?}: {rows} rows of {row_size} bytes at offset {offset:#x} exceed the {available} bytes left in the table stream"
    )]
    TableTooLarge {
        table: Table,
        rows: u32,
        row_size: u32,
        offset: usize,
        available: usize,
    },
    #[error("{table:?} row {rid} does not exist (table has {rows} rows)")]
    RowOutOfRange { table: Table, rid: u32, rows: u32 },
    #[error("{kind:?} value {value:#x} in {table:?} row {rid} has a tag naming no table")]
    BadCodedIndex {
        kind: CodedIndex,
        value: u32,
        table: Table,
        rid: u32,
    },
    #[error(
        "{heap} index {index:#x} is outside the heap (heap at offset {heap_offset:#x}, {heap_size} bytes)"
    )]
    HeapIndex {
        heap: &'static str,
        index: u32,
        heap_offset: usize,
        heap_size: usize,
    },
    #[error("{heap} entry at offset {offset:#x}: {reason}")]
    BadHeapEntry {
        heap: &'static str,
        offset: usize,
        reason: &'static str,
    },
    #[error("signature blob at offset {offset:#x}: {source}")]
    Sig { offset: usize, source: SigError },
    #[error("token {token} cannot be used here: {reason}")]
    BadToken { token: Token, reason: &'static str },
    #[error("method {token}: body RVA {rva:#x} lies in no section's file data")]
    BodyOutsideSections { token: Token, rva: u32 },
    #[error("method {token}: body at offset {offset:#x}: {source}")]
    Body {
        token: Token,
        offset: usize,
        source: crate::body::DecodeError,
    },
    #[error("method {token} has RVA 0 and no body")]
    NoBody { token: Token },
}
