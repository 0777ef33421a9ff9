//! Patched-assembly writer: gives MethodDefs new bodies and writes the assembly back out.
//!
//! Input is "MethodDef rid R gets body bytes B" ([`ImageWriter::replace_body`]); output is a
//! new file ([`ImageWriter::finish`]). Nothing else in the image moves:
//!
//! * A new body that fits its original body's extent (its length ≤ `Body::parse(..).len()` of
//!   the original, a fat header only at a 4-byte aligned RVA) is written over the original, at
//!   the same RVA. The bytes between the end of the new body and the end of the old one are
//!   left as they were: the writer knows method bodies only, and another structure (a field's
//!   RVA data, a hostile overlapping body) may share those bytes; nothing reads them as part
//!   of the method because the new header says where the body ends.
//! * Every other new body is relocated, fat bodies 4-byte aligned, and the MethodDef's RVA
//!   column is pointed at it. Relocated bodies go first, in rid order, into the space of
//!   original bodies whose every user is relocated (nothing reads those bytes any more: see
//!   [`ImageWriter::reuse_freed_space`]); the rest go to one section appended after the last
//!   section (`.ilchk`, code/execute/read like `.text`) when the headers have room for one
//!   more section header; otherwise (or when asked, [`RelocationTarget`]) the last section
//!   — last in memory and in the file, usually `.reloc` — is grown to hold them after its
//!   data, and loses its discardable flag. Existing sections never move and no existing RVA
//!   or file offset changes, so nothing else (metadata, resources, base relocations, debug
//!   data) needs fixing up.
//! * A body shared by several MethodDefs (one RVA) is overwritten in place only when every
//!   sharer is given the same new bytes. Otherwise each replaced sharer is relocated (sharers
//!   given identical bytes keep sharing one relocated copy) and the others keep the original.
//!
//! The PE checksum is recomputed when the input had a non-zero one and left 0 otherwise (the
//! loader checks it only for drivers and boot-time images). A strong-name signature is left
//! in place with the `StrongNameSigned` flag set, so `sn -R` can re-sign the output; it no
//! longer matches, which the summary reports (mono and .NET Core do not verify strong names
//! when loading). An Authenticode certificate table cannot survive relocation (it must be
//! the last thing in the file and it signs the section table): it is dropped, and the summary
//! says so; in-place edits keep it (invalid, reported).

use std::collections::HashMap;
use std::ops::Range;

use thiserror::Error;

use super::Image;
use super::pe::COFF_HEADER_SIZE;
use super::read::le_u32;
use super::tables::{Table, Token};
use crate::body::{Body, DecodeError};

mod freed;
mod originals;
mod output;
mod read_back;
mod sections;
#[cfg(unix)]
mod stream;

use originals::*;
use sections::*;
pub use sections::{checksum_offset, pe_checksum};

/// Name of the appended section.
pub const SECTION_NAME: &str = ".ilchk";
/// IMAGE_SCN_CNT_CODE | IMAGE_SCN_MEM_EXECUTE | IMAGE_SCN_MEM_READ, as `.text`.
pub const SECTION_CHARACTERISTICS: u32 = 0x6000_0020;
/// COMIMAGE_FLAGS_IL_LIBRARY: the image holds precompiled (ReadyToRun) code.
pub const COMIMAGE_FLAGS_IL_LIBRARY: u32 = 0x4;
/// COMIMAGE_FLAGS_STRONGNAMESIGNED (II.25.3.3.1).
pub const COMIMAGE_FLAGS_STRONGNAMESIGNED: u32 = 0x8;
/// The Windows loader refuses images with more sections than this.
pub const MAX_SECTIONS: u16 = 96;

const SECTION_HEADER_SIZE: usize = 40;
const IMAGE_SCN_CNT_CODE: u32 = 0x20;
const IMAGE_SCN_CNT_INITIALIZED_DATA: u32 = 0x40;
const IMAGE_SCN_MEM_DISCARDABLE: u32 = 0x0200_0000;
const SECURITY_DIRECTORY: u32 = 4;
const CLI_HEADER_DIRECTORY: u32 = 14;

/// Why a patched assembly could not be written. Offsets are file offsets of the input.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum WriteError {
    /// [`ImageWriter::replace_body`] was given a rid of 0 or past the MethodDef table.
    #[error("MethodDef row {rid} does not exist (table has {rows} rows)")]
    NoSuchMethod {
        /// The rid given.
        rid: u32,
        /// MethodDef rows in the image.
        rows: u32,
    },
    /// A new body was given for a MethodDef whose RVA is 0: the writer replaces bodies, it
    /// does not give a method one.
    #[error(
        "method {token} has RVA 0 (abstract, extern or runtime-implemented): no body to replace"
    )]
    NoBody {
        /// The MethodDef.
        token: Token,
    },
    /// A new body's header, code size or sections do not parse.
    #[error("method {token}: new body does not parse: {source}")]
    BadBody {
        /// The MethodDef.
        token: Token,
        /// What the body decoder found.
        source: DecodeError,
    },
    /// The bytes given hold more than one body: the body they start with is shorter.
    #[error("method {token}: new body is {body_len} bytes but {given} were given")]
    TrailingBytes {
        /// The MethodDef.
        token: Token,
        /// Length of the body the bytes start with.
        body_len: usize,
        /// Length of the bytes given.
        given: usize,
    },
    /// The input's PE headers, read again by the writer, are cut short or malformed.
    #[error("PE header at offset {offset:#x}: {reason}")]
    BadHeader {
        /// File offset of the field at fault.
        offset: usize,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The optional header's alignments cannot place a new section or grow the last one.
    #[error(
        "FileAlignment {file:#x} / SectionAlignment {section:#x} are not powers of two with FileAlignment ≤ SectionAlignment"
    )]
    BadAlignment {
        /// FileAlignment, in bytes.
        file: u32,
        /// SectionAlignment, in bytes.
        section: u32,
    },
    /// [`RelocationTarget::NewSection`] was asked for, but a new section header would run into
    /// the end of the headers or the first section's data.
    #[error(
        "no room for another section header: the table ends at {table_end:#x}, headers end at {limit:#x}"
    )]
    NoRoomForSectionHeader {
        /// File offset just past the section table.
        table_end: usize,
        /// File offset the new header must end by: SizeOfHeaders or the first section's data,
        /// whichever comes first.
        limit: usize,
    },
    /// The 40 bytes a new section header would take are not all zero.
    #[error("the 40 bytes after the section table at {offset:#x} are in use")]
    SectionHeaderSpaceInUse {
        /// File offset just past the section table.
        offset: usize,
    },
    /// Relocated bodies had to go at the end of the last section, and it cannot take them.
    #[error("cannot grow the last section: {reason}")]
    CannotGrowLastSection {
        /// Why: no sections, data after the last section, misaligned RVA and file offset, or a
        /// virtual size far beyond the file data.
        reason: &'static str,
    },
    /// A new section was needed, and the image already has [`MAX_SECTIONS`].
    #[error("the image already has {count} sections ({MAX_SECTIONS} at most)")]
    TooManySections {
        /// Sections in the image.
        count: u16,
    },
    /// An RVA, size or offset of the output does not fit its 32-bit header field.
    #[error("{what} overflows a 32-bit field")]
    Overflow {
        /// Which field.
        what: &'static str,
    },
    /// The MethodDef RVA column could not be found at 4 bytes wide (0: the row could not be
    /// read), so relocated RVAs cannot be written.
    #[error("MethodDef RVA column is {width} bytes wide, expected 4")]
    RvaColumn {
        /// The width found, in bytes.
        width: usize,
    },
    /// The output file could not be written or read back ([`ImageWriter::finish_to_file`]).
    #[error("writing the output: {0}")]
    Io(std::io::Error),
    /// The input image could not be read where the writer needed it.
    #[error(transparent)]
    Image(#[from] super::ImageError),
    /// The metadata the rewrite needed could not be added.
    #[error("adding metadata: {0}")]
    Emit(#[from] super::emit::EmitError),
    /// Read-back: the written image does not parse as an image.
    #[error("the written image does not read back: {0}")]
    OutputUnreadable(Box<super::ImageError>),
    /// Read-back: the written image has another number of MethodDefs than the input.
    #[error("the written image has {found} MethodDefs, expected {expected}")]
    OutputMethodCount {
        /// MethodDef rows of the input.
        expected: u32,
        /// MethodDef rows of the output.
        found: u32,
    },
    /// Read-back: a replaced method's row or body does not read in the written image.
    #[error("the written image: method {token}'s body does not read back: {source}")]
    OutputBody {
        /// The MethodDef.
        token: Token,
        /// What the reader found.
        source: Box<super::ImageError>,
    },
    /// Read-back: a replaced method's body is not the bytes given, or a method not replaced
    /// no longer has its original bytes.
    #[error("the written image: method {token}'s body at RVA {rva:#x} is not the body given")]
    OutputBodyMismatch {
        /// The MethodDef.
        token: Token,
        /// Its RVA in the output.
        rva: u32,
    },
    /// Read-back: a replaced fat body's file offset is not 4-byte aligned (its RVA is), which
    /// loaders that read the file without mapping it (mono) would misread.
    #[error(
        "the written image: method {token}'s fat body is at file offset {offset:#x}, not a multiple of 4"
    )]
    OutputMisalignedBody {
        /// The MethodDef.
        token: Token,
        /// File offset of the body in the output.
        offset: usize,
    },
    /// Read-back: a method that was not replaced has another RVA in the output.
    #[error("the written image: method {token} moved from RVA {old:#x} to {new:#x} unasked")]
    OutputRvaChanged {
        /// The MethodDef.
        token: Token,
        /// Its RVA in the input.
        old: u32,
        /// Its RVA in the output.
        new: u32,
    },
    /// Read-back: the output has an integrity finding (of a code, beyond the input's count of
    /// that code) the input did not have.
    #[error(
        "the written image has an integrity finding the input did not have: {} at offset {offset:#x}",
        code.name()
    )]
    OutputIntegrity {
        /// The rule broken.
        code: super::integrity::IntegrityCode,
        /// File offset of the finding in the output.
        offset: u64,
    },
}

/// The message carries the error's text, so it is not also a `source` (a chain would say it
/// twice).
impl From<std::io::Error> for WriteError {
    fn from(e: std::io::Error) -> Self {
        WriteError::Io(e)
    }
}

/// What [`ImageWriter`]'s layout gives: the summary, the placements, and the checksum field's
/// offset when the checksum is to be recomputed over the finished bytes.
type LaidOut = (WriteSummary, Vec<(u32, Placement)>, Option<usize>);

/// Where [`ImageWriter`]'s layout puts a relocated body.
#[derive(Debug, Clone, Copy)]
enum Spot {
    /// Not placed yet.
    Pending,
    /// At this offset from the start of the relocation area.
    Area(u32),
    /// In space an original body left free.
    Freed {
        /// Its RVA.
        rva: u32,
        /// Its file offset (inside the input, whose offsets are 32-bit fields).
        at: u32,
    },
}

/// Where a replaced body ended up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Placement {
    /// Written over the original body at its RVA.
    InPlace {
        /// The body's RVA, unchanged.
        rva: u32,
    },
    /// Moved to the relocation area.
    Relocated {
        /// RVA of the original body.
        old_rva: u32,
        /// RVA of the new body, now in the MethodDef row (4-byte aligned for a fat header).
        new_rva: u32,
    },
}

/// Why a body could not stay where it was.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct RelocationReasons {
    /// Longer than the original body's extent.
    pub too_long: usize,
    /// A fat body for an RVA that is not 4-byte aligned (the original was tiny).
    pub misaligned: usize,
    /// The RVA is shared with MethodDefs that get other bytes (or keep the original).
    pub shared: usize,
    /// The original body's extent is unknown (it does not decode, or lies outside the
    /// sections) or overlaps another body or CLI data.
    pub unsafe_extent: usize,
}

/// Where relocated bodies go.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub enum RelocationTarget {
    /// A new section when the headers have room for its header, else the end of the last
    /// section (many compilers leave no room: Roslyn's 0x200-byte headers hold 3 sections).
    #[default]
    Auto,
    /// Always a new section; [`WriteError::NoRoomForSectionHeader`] when there is no room.
    NewSection,
    /// Always the end of the last section, which must be last in the file too.
    GrowLastSection,
}

/// The bytes holding relocated bodies.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RelocationArea {
    /// Name of the section holding them.
    pub section: String,
    /// A section was appended (`true`) or the last section grown (`false`).
    pub appended: bool,
    /// RVA and file offset of the first relocated byte (4-byte aligned).
    pub rva: u32,
    /// File offset of the first relocated byte (4-byte aligned, like `rva`).
    pub raw_offset: u32,
    /// Bytes of relocated bodies, with alignment padding between them.
    pub size: u32,
    /// The section's VirtualSize and SizeOfRawData as written.
    pub section_virtual_size: u32,
    /// The section's SizeOfRawData as written (a multiple of FileAlignment).
    pub section_raw_size: u32,
}

/// What [`ImageWriter::finish`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct WriteSummary {
    /// MethodDef rows in the image.
    pub method_defs: usize,
    /// MethodDefs whose new body was written at their original RVA.
    pub in_place: usize,
    /// MethodDefs whose new body was relocated.
    pub relocated: usize,
    /// MethodDefs not replaced (including those without a body).
    pub unchanged: usize,
    /// Why the relocated bodies could not stay in place, counted by reason.
    pub relocation_reasons: RelocationReasons,
    /// Bytes left as they were between in-place bodies and their original ends.
    pub slack_bytes: usize,
    /// Relocated bodies placed in space original bodies left free (the rest went to the
    /// relocation area).
    pub reused_bodies: usize,
    /// Bytes of original bodies (and the zero padding between them) that no method uses any
    /// more, where relocated bodies may go.
    pub freed_bytes: usize,
    /// Of those, bytes now holding relocated bodies (with the padding between them).
    pub reused_bytes: usize,
    /// Where relocated bodies went, when any were.
    pub relocation_area: Option<RelocationArea>,
    /// The output differs from the input.
    pub modified: bool,
    /// The input was strong-name signed (flag set and a signature directory).
    pub strong_name_signed: bool,
    /// Signed, and modified: the signature no longer matches (flag and space kept for re-signing).
    pub strong_name_invalidated: bool,
    /// The input had an Authenticode certificate table and the output was modified.
    pub authenticode_invalidated: bool,
    /// The certificate table was removed because bodies were relocated.
    pub certificate_table_dropped: bool,
    /// The PE checksum was recomputed (the input had a non-zero one); otherwise it is kept.
    pub checksum_recomputed: bool,
    /// The input is a ReadyToRun image (precompiled native code beside the IL: the CLI header
    /// has a ManagedNativeHeader or the ILLibrary flag). The runtime runs that code and never
    /// sees patched IL.
    pub ready_to_run: bool,
    /// The output was made IL-only (ManagedNativeHeader cleared, ILLibrary flag cleared), so
    /// the runtime compiles the patched IL; false when asked to keep the native code.
    pub ready_to_run_stripped: bool,
}

/// A written assembly and what was done to it.
#[derive(Debug, Clone)]
pub struct PatchedImage {
    /// The whole output file, already read back and checked.
    pub bytes: Vec<u8>,
    /// What was done to the image.
    pub summary: WriteSummary,
    /// Every replaced MethodDef (by rid, ascending) and where its body went.
    pub placements: Vec<(u32, Placement)>,
}

/// Collects new bodies for an image's MethodDefs, then writes the patched assembly.
///
/// ```no_run
/// # use ilcheck::image::{Image, writer::ImageWriter};
/// # fn f(image: &Image, rid: u32, bytes: Vec<u8>) -> Result<(), Box<dyn std::error::Error>> {
/// let mut w = ImageWriter::new(image);
/// w.replace_body(rid, bytes)?;
/// let patched = w.finish()?;
/// std::fs::write("out.exe", &patched.bytes)?;
/// println!("{} relocated", patched.summary.relocated);
/// # Ok(()) }
/// ```
pub struct ImageWriter<'i, 'a> {
    image: &'i Image<'a>,
    /// New bodies, back to back (a body replaced again leaves its old bytes unused).
    arena: Vec<u8>,
    /// Per rid (index 0 unused): the range of its new body in `arena`, when replaced.
    bodies: Vec<Option<Range<usize>>>,
    replaced: usize,
    /// Per rid: the original body's length when the caller decoded it ([`Self::original_len`]).
    original_lens: Vec<u32>,
    /// The MethodDef RVA column, read once (by the first [`Self::replace_body`]).
    rvas: Vec<u32>,
    target: RelocationTarget,
    /// New metadata (from [`crate::image::emit::MetadataBuilder::build`]), written after the
    /// relocated bodies with the CLI header pointed at it.
    metadata: Option<crate::image::emit::BuiltMetadata>,
    /// Keep a ReadyToRun image's native code when the image is modified.
    keep_ready_to_run: bool,
    /// Place relocated bodies in the space original bodies leave free.
    reuse_freed: bool,
    /// The layout's memory, kept from one [`Self::finish`] (and one writer) to the next.
    layout: std::cell::RefCell<LayoutScratch>,
}

/// What the layout fills for every image: the originals' index and the relocated bodies.
#[derive(Debug, Default)]
struct LayoutScratch {
    originals: Originals,
    relocations: Vec<Relocation>,
    /// Per entry of the originals' `uses`: how many of its sharers are relocated.
    per_use: Vec<u32>,
}

/// One relocated body while the layout places it.
#[derive(Debug, Clone, Copy)]
struct Relocation {
    /// Its index in the placements.
    placement: u32,
    /// Its original's index in the originals' `uses` (`u32::MAX`: none known).
    original: u32,
    /// Its MethodDef.
    rid: u32,
    /// Its original's RVA.
    old_rva: u32,
    /// Its new bytes in the writer's arena.
    start: usize,
    end: usize,
    spot: Spot,
    /// The first of the sharers given these bytes: the one whose copy is written.
    first: bool,
}

/// New metadata an [`ImageWriter`] places after the relocated bodies: built
/// ([`crate::image::emit::BuiltMetadata`]) or only laid out
/// ([`crate::image::emit::PreparedMetadata`]). Sealed: the writer indexes its output by
/// [`Self::size`] and [`Self::cell_at`], so only these two, which keep them true, implement it.
pub trait NewMetadata: sealed::Sealed {
    /// Its size in bytes (a multiple of 4).
    fn size(&self) -> usize;
    /// Offset in it and width of column `col` of row `rid` of `table`.
    fn cell_at(&self, table: Table, rid: u32, col: usize) -> Option<(usize, usize)>;
    /// Appends its [`Self::size`] bytes to `out`.
    fn write_to(&self, out: &mut Vec<u8>);
}

mod sealed {
    /// Kept private, so no other type can implement [`super::NewMetadata`].
    pub trait Sealed {}
    impl Sealed for crate::image::emit::BuiltMetadata {}
    impl Sealed for crate::image::emit::PreparedMetadata<'_, '_, '_> {}
}

impl NewMetadata for crate::image::emit::BuiltMetadata {
    fn size(&self) -> usize {
        self.bytes.len()
    }
    fn cell_at(&self, table: Table, rid: u32, col: usize) -> Option<(usize, usize)> {
        crate::image::emit::BuiltMetadata::cell_at(self, table, rid, col)
    }
    fn write_to(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.bytes);
    }
}

impl NewMetadata for crate::image::emit::PreparedMetadata<'_, '_, '_> {
    fn size(&self) -> usize {
        crate::image::emit::PreparedMetadata::size(self)
    }
    fn cell_at(&self, table: Table, rid: u32, col: usize) -> Option<(usize, usize)> {
        crate::image::emit::PreparedMetadata::cell_at(self, table, rid, col)
    }
    fn write_to(&self, out: &mut Vec<u8>) {
        crate::image::emit::PreparedMetadata::write_to(self, out);
    }
}

/// The memory an [`ImageWriter`] fills (new bodies, their index, the RVA column), handed
/// from one writer to the next with [`ImageWriter::into_buffers`] and
/// [`ImageWriter::with_buffers`].
#[derive(Debug, Default)]
pub struct WriterBuffers {
    arena: Vec<u8>,
    bodies: Vec<Option<Range<usize>>>,
    original_lens: Vec<u32>,
    rvas: Vec<u32>,
    layout: LayoutScratch,
}

/// The new bodies by rid: `None` when a MethodDef keeps its body.
struct Replacements<'w> {
    arena: &'w [u8],
    bodies: &'w [Option<Range<usize>>],
}

impl<'w> Replacements<'w> {
    fn get(&self, rid: u32) -> Option<&'w [u8]> {
        let r = self.bodies.get(rid as usize)?.clone()?;
        self.arena.get(r)
    }

    /// Every replaced rid with its bytes and their range in the arena, ascending.
    fn iter(&self) -> impl Iterator<Item = (u32, Range<usize>, &'w [u8])> + '_ {
        (0..self.bodies.len() as u32).filter_map(|rid| {
            let r = self.bodies.get(rid as usize)?.clone()?;
            Some((rid, r.clone(), self.arena.get(r)?))
        })
    }

    /// The bytes at `start..end` of the arena (a range [`Self::iter`] gave).
    fn at(&self, start: usize, end: usize) -> &'w [u8] {
        self.arena.get(start..end).unwrap_or_default()
    }
}

impl<'i, 'a> ImageWriter<'i, 'a> {
    /// A writer for `image` with no body replaced yet and [`RelocationTarget::Auto`].
    pub fn new(image: &'i Image<'a>) -> Self {
        Self::with_buffers(image, WriterBuffers::default())
    }

    /// A writer that fills `buffers` (emptied first) instead of new ones: a caller patching
    /// many assemblies hands each writer's buffers to the next ([`Self::into_buffers`]), so
    /// the new bodies of every image do not take fresh memory from the system.
    pub fn with_buffers(image: &'i Image<'a>, buffers: WriterBuffers) -> Self {
        let WriterBuffers {
            mut arena,
            mut bodies,
            mut original_lens,
            mut rvas,
            layout,
        } = buffers;
        arena.clear();
        bodies.clear();
        original_lens.clear();
        rvas.clear();
        ImageWriter {
            image,
            arena,
            bodies,
            replaced: 0,
            original_lens,
            rvas,
            target: RelocationTarget::default(),
            metadata: None,
            keep_ready_to_run: false,
            reuse_freed: true,
            layout: std::cell::RefCell::new(layout),
        }
    }

    /// Whether a modified ReadyToRun image keeps its precompiled code (default: no — the
    /// output is made IL-only, since the runtime would run the native code of the original
    /// methods instead of their patched IL).
    pub fn keep_ready_to_run(&mut self, keep: bool) -> &mut Self {
        self.keep_ready_to_run = keep;
        self
    }

    /// Gives the image new metadata (built for this image, so that every existing token keeps
    /// its meaning): it is written after the relocated bodies, the CLI header's metadata
    /// directory points at it, and relocated bodies' RVAs are written into its MethodDef table.
    pub fn set_metadata(&mut self, metadata: crate::image::emit::BuiltMetadata) -> &mut Self {
        self.metadata = Some(metadata);
        self
    }

    /// The new metadata given by [`Self::set_metadata`], back (once the image is written, for
    /// its memory: [`crate::image::emit::EmitBuffers::recycle`]).
    pub fn take_metadata(&mut self) -> Option<crate::image::emit::BuiltMetadata> {
        self.metadata.take()
    }

    /// The writer's buffers, for [`Self::with_buffers`].
    pub fn into_buffers(self) -> WriterBuffers {
        WriterBuffers {
            arena: self.arena,
            bodies: self.bodies,
            original_lens: self.original_lens,
            rvas: self.rvas,
            layout: self.layout.into_inner(),
        }
    }

    /// Records that MethodDef `rid`'s original body is `len` bytes long — `Body::parse(..).len()`
    /// of the bytes at its RVA, as a caller that decoded it knows — so that [`Self::finish`]
    /// need not parse it again. Bodies not recorded are parsed.
    pub fn original_len(&mut self, rid: u32, len: usize) {
        let rows = self.image.method_count() as usize;
        let Ok(len) = u32::try_from(len) else {
            return;
        };
        if rid == 0 || rid as usize > rows {
            return;
        }
        if self.original_lens.len() <= rows {
            self.original_lens.resize(rows + 1, 0);
        }
        // 0 means "unknown"; no body is empty.
        self.original_lens[rid as usize] = len;
    }

    /// Whether relocated bodies may take the space of original bodies that no method uses any
    /// more (default: yes). With `false` every original body keeps its bytes and all relocated
    /// bodies go to the relocation area, as for a patch meant to be compared byte for byte
    /// with its input.
    pub fn reuse_freed_space(&mut self, reuse: bool) -> &mut Self {
        self.reuse_freed = reuse;
        self
    }

    /// Chooses where bodies that do not fit in place go ([`RelocationTarget::Auto`] unless set).
    pub fn relocation_target(&mut self, target: RelocationTarget) -> &mut Self {
        self.target = target;
        self
    }

    /// Gives MethodDef `rid` the body `bytes` (header, code and sections, exactly one body).
    /// A later call for the same rid replaces an earlier one. Only the structure is checked
    /// (header, code size, section sizes): the code itself is the verifier's business.
    pub fn replace_body(&mut self, rid: u32, bytes: impl AsRef<[u8]>) -> Result<(), WriteError> {
        let token = self.body_slot(rid)?;
        let bytes = bytes.as_ref();
        let body_len = Body::parse(bytes)
            .map_err(|source| WriteError::BadBody { token, source })?
            .len();
        if body_len != bytes.len() {
            return Err(WriteError::TrailingBytes {
                token,
                body_len,
                given: bytes.len(),
            });
        }
        self.put_body(rid, bytes);
        Ok(())
    }

    /// [`Self::replace_body`] for a body the rewriter's layout has just encoded (exactly one
    /// body, in its canonical form), whose structure needs no second reading.
    pub(crate) fn replace_laid_out_body(
        &mut self,
        rid: u32,
        bytes: &[u8],
    ) -> Result<(), WriteError> {
        self.body_slot(rid)?;
        debug_assert_eq!(Body::parse(bytes).map(|b| b.len()), Ok(bytes.len()));
        self.put_body(rid, bytes);
        Ok(())
    }

    /// The token of MethodDef `rid`, if it exists and has a body to replace.
    fn body_slot(&mut self, rid: u32) -> Result<Token, WriteError> {
        let rows = self.image.method_count();
        if rid == 0 || rid > rows {
            return Err(WriteError::NoSuchMethod { rid, rows });
        }
        let token = Token::new(Table::MethodDef, rid);
        if self.rvas.is_empty() {
            rva_column(self.image, &mut self.rvas);
        }
        let rva = match self.rvas.get(rid as usize) {
            Some(&rva) => rva,
            // The column stops at the first row that cannot be read: report why.
            None => self.image.tables().cell(Table::MethodDef, rid, 0)?,
        };
        if rva == 0 {
            return Err(WriteError::NoBody { token });
        }
        Ok(token)
    }

    fn put_body(&mut self, rid: u32, bytes: &[u8]) {
        let rows = self.image.method_count();
        if self.bodies.len() <= rid as usize {
            self.bodies.resize(rows as usize + 1, None);
        }
        let start = self.arena.len();
        self.arena.extend_from_slice(bytes);
        if self.bodies[rid as usize]
            .replace(start..self.arena.len())
            .is_none()
        {
            self.replaced += 1;
        }
    }

    /// Makes room for `bytes` more bytes of new bodies, for a caller that knows how much it
    /// will replace.
    pub fn reserve(&mut self, bytes: usize) {
        self.arena.reserve(bytes);
    }

    /// Number of MethodDefs given a new body so far.
    pub fn replaced(&self) -> usize {
        self.replaced
    }

    fn replacements(&self) -> Replacements<'_> {
        Replacements {
            arena: &self.arena,
            bodies: &self.bodies,
        }
    }

    /// Writes the patched assembly. The writer can be finished again (after more
    /// replacements); each call starts from the original image.
    pub fn finish(&self) -> Result<PatchedImage, WriteError> {
        let mut bytes = Vec::new();
        let (summary, placements) = self.finish_into(&mut bytes)?;
        Ok(PatchedImage {
            bytes,
            summary,
            placements,
        })
    }

    /// [`Self::finish`] into `out`, whose contents are replaced: a caller writing many
    /// assemblies can keep one buffer and its memory. Returns the summary and the placements
    /// (every replaced MethodDef by rid, ascending). On error `out` holds no useful bytes.
    pub fn finish_into(
        &self,
        out: &mut Vec<u8>,
    ) -> Result<(WriteSummary, Vec<(u32, Placement)>), WriteError> {
        let metadata = self.metadata.as_ref().map(|m| m as &dyn NewMetadata);
        self.finish_into_with(out, metadata)
    }

    /// [`Self::finish_into`] with `metadata` as the new metadata, in place of any given by
    /// [`Self::set_metadata`]: metadata that is only laid out
    /// ([`crate::image::emit::PreparedMetadata`]) is written straight into `out`.
    pub fn finish_into_with(
        &self,
        out: &mut Vec<u8>,
        metadata: Option<&dyn NewMetadata>,
    ) -> Result<(WriteSummary, Vec<(u32, Placement)>), WriteError> {
        let mut column = Vec::new();
        let rvas = self.rvas(&mut column);
        let (summary, placements, checksum_at) = self.lay_out(out, metadata, rvas)?;
        if let Some(at) = checksum_at {
            let sum = pe_checksum(out, at);
            out[at..at + 4].copy_from_slice(&sum.to_le_bytes());
        }
        read_back::check(self.image, rvas, out, &self.replacements())?;
        Ok((summary, placements))
    }

    /// [`Self::finish_into`] into `file`, an empty file open for reading and writing,
    /// for an image of any size: the patched image is laid out as the input's pages the writer
    /// changes and the bytes it appends, then written. Where the image was opened from a file
    /// ([`Image::file`]) its unchanged ranges are copied file to file by the kernel and its
    /// holes stay holes, so memory stays near what the changes take, not the file's size. The
    /// file is read back (mapped) and checked as [`Self::finish_into`] checks its buffer; on
    /// error its contents are unspecified.
    #[cfg(unix)]
    pub fn finish_to_file(
        &self,
        file: &std::fs::File,
    ) -> Result<(WriteSummary, Vec<(u32, Placement)>), WriteError> {
        let metadata = self.metadata.as_ref().map(|m| m as &dyn NewMetadata);
        self.finish_to_file_with(file, metadata)
    }

    /// [`Self::finish_to_file`] with `metadata` as the new metadata, as
    /// [`Self::finish_into_with`].
    #[cfg(unix)]
    pub fn finish_to_file_with(
        &self,
        file: &std::fs::File,
        metadata: Option<&dyn NewMetadata>,
    ) -> Result<(WriteSummary, Vec<(u32, Placement)>), WriteError> {
        let mut column = Vec::new();
        let rvas = self.rvas(&mut column);
        let input = self.image.bytes();
        let mut overlay = output::Overlay::new(input);
        let (summary, placements, checksum_at) = self.lay_out(&mut overlay, metadata, rvas)?;
        stream::write(&overlay, input, self.image.file(), file)?;
        drop(overlay);
        if let Some(at) = checksum_at {
            stream::write_checksum(file, at)?;
        }
        // SAFETY: the file is this writer's own temporary output, mapped read-only while it
        // is checked; nothing else writes to it meanwhile.
        let written = unsafe { memmap2::Mmap::map(file)? };
        read_back::check(self.image, rvas, &written, &self.replacements())?;
        Ok((summary, placements))
    }

    /// The MethodDef RVA column: the one kept by [`Self::original_len`]'s caller, or read
    /// into `column`.
    fn rvas<'s>(&'s self, column: &'s mut Vec<u32>) -> &'s [u32] {
        if self.rvas.is_empty() {
            rva_column(self.image, column);
            column
        } else {
            &self.rvas
        }
    }

    /// Lays the patched image out in `out`: every placement, the bytes, the header fields.
    /// Returns the checksum field's offset when the checksum must be recomputed (last, over
    /// the finished bytes), which is the caller's, as is the read-back.
    fn lay_out<O: output::Output>(
        &self,
        out: &mut O,
        metadata: Option<&dyn NewMetadata>,
        rvas: &[u32],
    ) -> Result<LaidOut, WriteError> {
        let input = self.image.bytes();
        let headers = Headers::of(self.image)?;
        let mut summary = WriteSummary {
            method_defs: self.image.method_count() as usize,
            ..WriteSummary::default()
        };

        let mut scratch = std::mem::take(&mut *self.layout.borrow_mut());
        let originals = Originals::collect(
            self.image,
            &headers,
            input,
            rvas,
            &self.original_lens,
            std::mem::take(&mut scratch.originals),
        );
        let replacements = self.replacements();

        // Bodies written over their originals: (file offset, new bytes).
        let mut in_place = Vec::new();
        let mut placements = Vec::with_capacity(self.replaced);
        // Relocated bodies, in rid order. Placed once all are known: the space they may take
        // is that of the originals every user of which is relocated.
        let relocations = &mut scratch.relocations;
        relocations.clear();
        let per_use = &mut scratch.per_use;
        per_use.clear();
        per_use.resize(originals.uses.len(), 0);
        // Per shared RVA (by its first sharer): every sharer is given the same bytes.
        let mut agree: HashMap<usize, bool> = HashMap::new();

        for (rid, range, bytes) in replacements.iter() {
            let (rva, use_) = match originals.index_of_rid(rid) {
                Some(i) => (originals.uses[i].rva, Some(i)),
                None => {
                    let rva = self.image.method(rid)?.rva();
                    (rva, originals.index_of_rva(rva))
                }
            };
            let u = use_.map(|i| &originals.uses[i]);
            match originals.fits_in_place(u, rva, bytes, &replacements, &mut agree) {
                Ok((at, extent)) => {
                    in_place.push((at, bytes));
                    summary.in_place += 1;
                    summary.slack_bytes += extent - bytes.len();
                    placements.push((rid, Placement::InPlace { rva }));
                }
                Err(reason) => {
                    reason.count(&mut summary.relocation_reasons);
                    if let Some(i) = use_ {
                        per_use[i] += 1;
                    }
                    relocations.push(Relocation {
                        placement: placements.len() as u32,
                        original: use_.map_or(u32::MAX, |i| i as u32),
                        rid,
                        old_rva: rva,
                        start: range.start,
                        end: range.end,
                        spot: Spot::Pending,
                        first: true,
                    });
                    summary.relocated += 1;
                    placements.push((
                        rid,
                        Placement::Relocated {
                            old_rva: rva,
                            new_rva: 0,
                        },
                    ));
                }
            }
        }
        summary.unchanged = summary.method_defs - summary.in_place - summary.relocated;
        // A relocated body's new bytes.
        let bytes_of = |r: &Relocation| replacements.at(r.start, r.end);

        let mut freed = if self.reuse_freed && !relocations.is_empty() {
            freed::Freed::collect(self.image, &headers, input, &originals, per_use)
        } else {
            freed::Freed::default()
        };
        let mut section_len = 0usize;
        // Sharers given the same bytes share one copy, the first one's.
        let mut relocated_at: HashMap<(u32, &[u8]), Spot> = HashMap::new();
        for r in relocations.iter_mut() {
            let (rva, bytes) = (r.old_rva, bytes_of(r));
            // Only a shared RVA can be relocated twice with the same bytes.
            let shared = originals
                .uses
                .get(r.original as usize)
                .is_some_and(|u| u.sharers.len() > 1);
            if let Some(&spot) = shared.then(|| relocated_at.get(&(rva, bytes))).flatten() {
                r.spot = spot;
                r.first = false;
                continue;
            }
            let fat = bytes.first().is_some_and(|&h| h & 0x3 == 0x3);
            let spot = match freed.place(bytes.len(), fat) {
                Some((rva, at)) => {
                    summary.reused_bodies += 1;
                    Spot::Freed { rva, at }
                }
                None => {
                    if fat {
                        section_len = section_len.next_multiple_of(4);
                    }
                    let o = u32::try_from(section_len).map_err(|_| WriteError::Overflow {
                        what: "new section size",
                    })?;
                    section_len += bytes.len();
                    Spot::Area(o)
                }
            };
            if shared {
                relocated_at.insert((rva, bytes), spot);
            }
            r.spot = spot;
        }
        summary.freed_bytes = freed.freed_bytes();
        summary.reused_bytes = freed.reused_bytes();
        // New metadata follows the bodies, 4-byte aligned (II.24.2.1).
        let metadata_at = metadata.map(|md| {
            let at = section_len.next_multiple_of(4);
            section_len = at + md.size();
            at
        });

        out.start(input, section_len);
        // Tracked as bodies are written: comparing whole images would cost more than writing.
        let mut modified = false;
        for (at, bytes) in in_place {
            // The reader found the whole original extent inside the file.
            if modified {
                out.overwrite(at, bytes);
            } else {
                modified = out.write_at(at, bytes);
            }
        }
        for r in relocations.iter() {
            if let (Spot::Freed { at, .. }, true) = (r.spot, r.first) {
                // Inside an original body's extent (or the zero padding after one), which the
                // reader found inside the file.
                out.overwrite(at as usize, bytes_of(r));
            }
        }

        let cert = headers.directory(input, SECURITY_DIRECTORY);
        let mut area = None;
        if section_len != 0 {
            // Appends the area: bodies in rid order at their offsets, zeros between them.
            let write_bodies = |out: &mut Vec<u8>| {
                let base = out.len();
                for r in relocations.iter() {
                    if let (Spot::Area(o), true) = (r.spot, r.first) {
                        out.resize(base + o as usize, 0);
                        out.extend_from_slice(bytes_of(r));
                    }
                }
                if let (Some(md), Some(at)) = (metadata, metadata_at) {
                    out.resize(base + at, 0);
                    md.write_to(out);
                }
            };
            let new = place_relocated(&headers, out, section_len, write_bodies, cert, self.target)?;
            summary.certificate_table_dropped = cert.is_some_and(|d| d.size != 0);
            area = Some(new);
        }
        if !relocations.is_empty() {
            let (col, width) = self
                .image
                .tables_header()
                .info(Table::MethodDef)
                .column(0)
                .ok_or(WriteError::RvaColumn { width: 0 })?;
            if width != 4 {
                return Err(WriteError::RvaColumn { width });
            }
            let table = self.image.tables_header().info(Table::MethodDef);
            // Where the new metadata landed in the file, when there is new metadata.
            let metadata_file_at = area
                .as_ref()
                .zip(metadata_at)
                .map(|(a, at)| a.raw_offset as usize + at);
            for r in relocations.iter() {
                let new_rva = match r.spot {
                    Spot::Freed { rva, .. } => Some(rva),
                    // A body placed in the area means the area exists (`section_len != 0`).
                    Spot::Area(o) => area.as_ref().and_then(|a| a.rva.checked_add(o)),
                    Spot::Pending => None,
                }
                .ok_or(WriteError::Overflow {
                    what: "relocated body RVA",
                })?;
                if let Some((_, Placement::Relocated { new_rva: n, .. })) =
                    placements.get_mut(r.placement as usize)
                {
                    *n = new_rva;
                }
                let rid = r.rid;
                // The row lies in the table stream: the reader checked rows × row_size (and
                // the new metadata's layout was read back from its bytes).
                let at = match (metadata, metadata_file_at) {
                    (Some(md), Some(base)) => {
                        let (at, _) = md
                            .cell_at(Table::MethodDef, rid, 0)
                            .ok_or(WriteError::RvaColumn { width: 0 })?;
                        base + at
                    }
                    _ => table.offset + (rid as usize - 1) * table.row_size as usize + col,
                };
                // The file changes anyway (a body moved): no need to ask whether this does.
                out.overwrite(at, &new_rva.to_le_bytes());
            }
        }
        if let (Some(new), Some(md), Some(at)) = (&area, metadata, metadata_at) {
            let rva = new.rva.checked_add(at as u32).ok_or(WriteError::Overflow {
                what: "metadata RVA",
            })?;
            let size = u32::try_from(md.size()).map_err(|_| WriteError::Overflow {
                what: "metadata size",
            })?;
            // The CLI header's MetaData directory (II.25.3.3), at offset 8.
            let dir = self.image.cli_header().offset + 8;
            out.write_at(dir, &rva.to_le_bytes());
            out.write_at(dir + 4, &size.to_le_bytes());
        }
        summary.relocation_area = area;
        // A new section, or a body moved, always changes the file (section table, RVAs).
        summary.modified = modified || section_len != 0 || !relocations.is_empty();
        scratch.originals = originals;
        *self.layout.borrow_mut() = scratch;
        let cli = self.image.cli_header();
        summary.ready_to_run =
            cli.managed_native_header.rva != 0 || cli.flags & COMIMAGE_FLAGS_IL_LIBRARY != 0;
        if summary.ready_to_run && summary.modified && !self.keep_ready_to_run {
            // ManagedNativeHeader directory at 64, Flags at 16 (II.25.3.3).
            out.write_at(cli.offset + 64, &[0; 8]);
            let flags = cli.flags & !COMIMAGE_FLAGS_IL_LIBRARY;
            out.write_at(cli.offset + 16, &flags.to_le_bytes());
            // ReadyToRun images for other systems than Windows carry the machine XORed with a
            // value naming the system; an IL-only image must carry the plain machine, or the
            // runtime refuses it.
            let machine = self.image.pe().machine;
            let plain = native_machine(machine);
            out.write_at(headers.coff, &plain.to_le_bytes());
            summary.ready_to_run_stripped = true;
        }
        summary.strong_name_signed =
            cli.flags & COMIMAGE_FLAGS_STRONGNAMESIGNED != 0 && cli.strong_name_signature.size != 0;
        summary.strong_name_invalidated = summary.strong_name_signed && summary.modified;
        summary.authenticode_invalidated = cert.is_some_and(|d| d.size != 0) && summary.modified;
        let checksum_at =
            (summary.modified && headers.checksum(input) != 0).then_some(headers.checksum_offset);
        summary.checksum_recomputed = checksum_at.is_some();
        Ok((summary, placements, checksum_at))
    }
}
