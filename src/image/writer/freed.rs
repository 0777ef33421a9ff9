//! The space original bodies leave behind. When every MethodDef that uses an original body is
//! given a relocated one, nothing reads that body's bytes any more; relocated bodies are placed
//! there before any go to the relocation area. An image whose methods all grow (a prologue and
//! epilogue in every method) then comes out near its input's size, instead of a third larger
//! with every old body kept beside its copy.
//!
//! Only bytes already known to be one body's are taken (the extents [`Originals`] found safe
//! to overwrite in place), and the alignment gaps between two such bodies when they are zero
//! and nothing points into them. A freed body that anything else points into — a data
//! directory, a field's initial data, a base relocation, the entry point, a debug record, a
//! vtable fixup — is left alone, as are the gaps beside it.

use super::*;
use crate::image::pe::{
    BASE_RELOCATION_DIRECTORY, CERTIFICATE_DIRECTORY, DEBUG_DIRECTORY, DEBUG_ENTRY_SIZE,
};

/// Consecutive freed bytes, in one linear stretch of RVAs and file offsets.
#[derive(Debug, Clone, Copy)]
struct Run {
    rva: u32,
    /// File offset of `rva`.
    at: usize,
    len: usize,
    /// Bytes from the start given to relocated bodies (with alignment padding).
    used: usize,
}

/// The freed runs of one image, filled in order.
#[derive(Debug, Default)]
pub(super) struct Freed {
    runs: Vec<Run>,
    /// The first run that may still take a body: those before it are full.
    cursor: usize,
}

/// Runs after the cursor tried for a body that does not fit the cursor's: a few, so that one
/// large body does not pass over a run's rest, nor is every run searched for each body.
const LOOKAHEAD: usize = 8;
/// A run with fewer bytes left than this is passed over for good.
const WORN: usize = 16;

impl Freed {
    /// The runs of `originals` freed by `relocated` (per entry of `originals.uses`: how many of
    /// its sharers are relocated).
    pub(super) fn collect(
        image: &Image<'_>,
        headers: &Headers,
        file: &[u8],
        originals: &Originals,
        relocated: &[u32],
    ) -> Freed {
        let protected = protected_ranges(image, headers, file);
        // Asked in RVA order (each question starts at or after the one before), so the first
        // range that ends after the question's start is found by walking on, not searching.
        let mut next = 0;
        let mut hits = |start: u64, end: u64| {
            while protected.get(next).is_some_and(|&(_, e)| e <= start) {
                next += 1;
            }
            protected.get(next).is_some_and(|&(s, _)| s < end)
        };
        let mut runs: Vec<Run> = Vec::new();
        // Whether the run last pushed ends with the body of `uses[i - 1]`.
        let mut open = false;
        for (i, u) in originals.uses.iter().enumerate() {
            let freed = relocated.get(i).copied().unwrap_or(0) as usize == u.sharers.len();
            let extent = u.extent.filter(|_| freed);
            let Some((at, len)) = extent else {
                open = false;
                continue;
            };
            let (start, end) = (u64::from(u.rva), u64::from(u.rva) + len as u64);
            // The gap after the open run, asked first: it starts before this body.
            let joins = open
                && runs.last().is_some_and(|last| {
                    let last_end = u64::from(last.rva) + last.len as u64;
                    // The same stretch: RVAs and file offsets advance together.
                    let linear = at.wrapping_sub(last.at) as u64 == start - u64::from(last.rva);
                    let zero = file
                        .get(last.at + last.len..at)
                        .is_some_and(|g| g.iter().all(|&b| b == 0));
                    start >= last_end
                        && start - last_end < 4
                        && linear
                        && zero
                        && !hits(last_end, start)
                });
            // File offsets are the input's, 32-bit fields of its section table, and RVAs are
            // 32-bit: a body running past either (hostile headers) is not taken.
            let past_32 = u32::try_from(at + len).is_err() || end > u64::from(u32::MAX);
            if len == 0 || past_32 || hits(start, end) {
                open = false;
                continue;
            }
            if joins && let Some(last) = runs.last_mut() {
                last.len = at + len - last.at;
                continue;
            }
            runs.push(Run {
                rva: u.rva,
                at,
                len,
                used: 0,
            });
            open = true;
        }
        Freed { runs, cursor: 0 }
    }

    /// Bytes freed.
    pub(super) fn freed_bytes(&self) -> usize {
        self.runs.iter().map(|r| r.len).sum()
    }

    /// Bytes given to relocated bodies, alignment padding between them included.
    pub(super) fn reused_bytes(&self) -> usize {
        self.runs.iter().map(|r| r.used).sum()
    }

    /// A place for a body of `len` bytes (`fat`: its RVA and file offset 4-byte aligned), as
    /// (RVA, file offset); `None` when no run near the cursor has room.
    pub(super) fn place(&mut self, len: usize, fat: bool) -> Option<(u32, u32)> {
        let end = self.runs.len().min(self.cursor + LOOKAHEAD);
        let mut found = None;
        for r in &mut self.runs[self.cursor..end] {
            let mut off = r.used;
            if fat {
                // A fat header needs both aligned; a run whose RVAs and offsets disagree
                // modulo 4 cannot hold one.
                if (r.rva as usize).wrapping_sub(r.at) % 4 != 0 {
                    continue;
                }
                off = (r.rva as usize + off).next_multiple_of(4) - r.rva as usize;
            }
            if off + len <= r.len {
                r.used = off + len;
                // Runs end inside the input at 32-bit offsets (`collect`).
                found = Some((r.rva + off as u32, (r.at + off) as u32));
                break;
            }
        }
        while self
            .runs
            .get(self.cursor)
            .is_some_and(|r| r.len - r.used < WORN)
        {
            self.cursor += 1;
        }
        found
    }
}

/// Every RVA range something other than a method body points into, sorted and merged: the
/// PE data directories (but the certificate table, whose "RVA" is a file offset) and what the
/// base relocations patch, the CLI header's directories, the debug records' data, the vtable
/// fixups' slots, the fields' initial data (their first byte: what follows it is the field's,
/// whose size the writer does not compute) and the entry point.
fn protected_ranges(image: &Image<'_>, headers: &Headers, file: &[u8]) -> Vec<(u64, u64)> {
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    let mut add = |rva: u32, size: u32| {
        if rva != 0 && size != 0 {
            ranges.push((u64::from(rva), u64::from(rva) + u64::from(size)));
        }
    };
    let read = |rva: u32, len: u32| -> Option<&[u8]> {
        let at = image.rva_to_offset(rva)?;
        file.get(at..at.checked_add(len as usize)?)
    };
    for (index, &d) in image.pe().directories.iter().enumerate() {
        if index == CERTIFICATE_DIRECTORY {
            continue;
        }
        add(d.rva, d.size);
        match index {
            DEBUG_DIRECTORY => {
                // SizeOfData at 16, AddressOfRawData at 20.
                let records = read(d.rva, d.size).unwrap_or_default();
                for record in records.chunks_exact(DEBUG_ENTRY_SIZE) {
                    add(
                        le_u32(record, 20).unwrap_or(0),
                        le_u32(record, 16).unwrap_or(0),
                    );
                }
            }
            BASE_RELOCATION_DIRECTORY => {
                let mut blocks = read(d.rva, d.size).unwrap_or_default();
                // Blocks of (page RVA, block size, 16-bit entries: type << 12 | offset).
                while let (Some(page), Some(size)) = (le_u32(blocks, 0), le_u32(blocks, 4)) {
                    let size = (size as usize).clamp(8, blocks.len());
                    for e in blocks[8..size].chunks_exact(2) {
                        let e = u16::from_le_bytes([e[0], e[1]]);
                        // Type 0 is padding; 10 (DIR64) patches 8 bytes, the others at most 4.
                        let width = match e >> 12 {
                            0 => continue,
                            10 => 8,
                            _ => 4,
                        };
                        add(page.wrapping_add(u32::from(e & 0xFFF)), width);
                    }
                    blocks = &blocks[size..];
                }
            }
            _ => {}
        }
    }
    let cli = image.cli_header();
    for (_, d) in cli.directories() {
        add(d.rva, d.size);
    }
    // II.25.3.3.3: 8-byte fixups of (RVA, count, type); 64-bit slots with type bit 0x2.
    let fixups = read(cli.vtable_fixups.rva, cli.vtable_fixups.size).unwrap_or_default();
    for f in fixups.chunks_exact(8) {
        let (rva, count, kind) = (
            le_u32(f, 0).unwrap_or(0),
            u32::from(u16::from_le_bytes([f[4], f[5]])),
            u16::from_le_bytes([f[6], f[7]]),
        );
        let width = if kind & 0x2 != 0 { 8 } else { 4 };
        add(rva, count.saturating_mul(width));
    }
    let tables = image.tables();
    for rid in 1..=tables.rows(Table::FieldRva) {
        if let Ok(rva) = tables.cell(Table::FieldRva, rid, 0) {
            add(rva, 1);
        }
    }
    add(le_u32(file, headers.optional + 16).unwrap_or(0), 1);
    ranges.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (s, e) in ranges {
        match merged.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => merged.push((s, e)),
        }
    }
    merged
}
