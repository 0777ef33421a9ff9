//! The PE side of writing: the header fields the writer updates, the section that receives
//! relocated bodies (a new one, or the last one grown), and the checksum.

use super::output::Output;
use super::*;

/// An RVA/size pair read from the optional header's data directories.
#[derive(Debug, Clone, Copy)]
pub(super) struct Dir {
    pub(super) rva: u32,
    pub(super) size: u32,
}

impl From<crate::image::pe::DataDir> for Dir {
    fn from(d: crate::image::pe::DataDir) -> Dir {
        Dir {
            rva: d.rva,
            size: d.size,
        }
    }
}

/// A section header as stored.
#[derive(Debug, Clone)]
pub(super) struct RawSection {
    pub(super) name: String,
    pub(super) virtual_size: u32,
    pub(super) virtual_address: u32,
    pub(super) raw_size: u32,
    pub(super) raw_offset: u32,
}

impl RawSection {
    /// Bytes the section spans in memory (VirtualSize, or SizeOfRawData when that is 0).
    pub(super) fn memory_size(&self) -> u32 {
        if self.virtual_size == 0 {
            self.raw_size
        } else {
            self.virtual_size
        }
    }

    pub(super) fn name(&self) -> String {
        self.name.clone()
    }
}

/// File offsets of the PE header fields the writer reads or updates.
#[derive(Debug)]
pub(super) struct Headers {
    pub(super) coff: usize,
    pub(super) optional: usize,
    pub(super) sections_at: usize,
    pub(super) sections: Vec<RawSection>,
    pub(super) file_alignment: u32,
    pub(super) section_alignment: u32,
    pub(super) size_of_headers: u32,
    pub(super) checksum_offset: usize,
    pub(super) directories_at: usize,
    pub(super) directory_count: u32,
}

impl Headers {
    /// The header fields of `image`, from what its reader parsed, after checking that the file
    /// holds every one the writer reads or updates (the reader tolerates a section table or
    /// optional header that the end of the file cuts; the writer, which updates them, does
    /// not).
    pub(super) fn of(image: &Image<'_>) -> Result<Headers, WriteError> {
        let (file, pe) = (image.bytes(), image.pe());
        let at = pe.layout;
        let bad = |offset, reason| WriteError::BadHeader { offset, reason };
        let within =
            |from: usize, len: usize| from.checked_add(len).is_some_and(|e| e <= file.len());
        if !within(at.optional, 64 + 4) {
            return Err(bad(at.optional, "optional header truncated"));
        }
        if !within(at.directories_at - 4, 4) {
            return Err(bad(at.directories_at - 4, "optional header truncated"));
        }
        let count = usize::from(at.section_count);
        if pe.sections.len() != count || !within(at.sections_at, count * SECTION_HEADER_SIZE) {
            return Err(bad(at.sections_at, "section table truncated"));
        }
        let sections = pe
            .sections
            .iter()
            .map(|s| RawSection {
                name: s.name.clone(),
                virtual_size: s.virtual_size,
                virtual_address: s.virtual_address,
                raw_size: s.raw_size,
                raw_offset: s.raw_offset,
            })
            .collect();
        Ok(Headers {
            coff: at.coff,
            optional: at.optional,
            sections_at: at.sections_at,
            sections,
            section_alignment: at.section_alignment,
            file_alignment: at.file_alignment,
            size_of_headers: pe.size_of_headers,
            checksum_offset: at.checksum_offset,
            directories_at: at.directories_at,
            directory_count: at.directory_count,
        })
    }

    pub(super) fn checksum(&self, file: &[u8]) -> u32 {
        le_u32(file, self.checksum_offset).unwrap_or(0)
    }

    /// Data directory `index`, when the header has that many.
    pub(super) fn directory(&self, file: &[u8], index: u32) -> Option<Dir> {
        if index >= self.directory_count {
            return None;
        }
        let at = self.directories_at + index as usize * 8;
        Some(Dir {
            rva: le_u32(file, at)?,
            size: le_u32(file, at + 4)?,
        })
    }
}

/// Puts `len` bytes of relocated bodies (`write` appends exactly those to the file) in a new
/// section, or at the end of the last section when `target` allows it and there is no room
/// for another header; updates the headers and drops a certificate table.
pub(super) fn place_relocated<O: Output>(
    h: &Headers,
    out: &mut O,
    len: usize,
    write: impl FnOnce(&mut Vec<u8>),
    cert: Option<Dir>,
    target: RelocationTarget,
) -> Result<RelocationArea, WriteError> {
    let (fa, sa) = (h.file_alignment, h.section_alignment);
    if !fa.is_power_of_two() || !sa.is_power_of_two() || fa > sa {
        return Err(WriteError::BadAlignment {
            file: fa,
            section: sa,
        });
    }
    let overflow = |what| WriteError::Overflow { what };
    let sections_end = h
        .sections
        .iter()
        .map(|s| u64::from(s.raw_offset) + u64::from(s.raw_size))
        .max()
        .unwrap_or(0);
    // A certificate table at the end of the file is cut off; one elsewhere is left as dead
    // bytes. Either way the directory entry goes: the signature covers the section table.
    let mut file_end = out.len() as u64;
    if let Some(d) = cert.filter(|d| d.size != 0) {
        let (start, end) = (u64::from(d.rva), u64::from(d.rva) + u64::from(d.size));
        if end >= file_end && start <= file_end && start >= sections_end {
            file_end = start;
        }
    }
    let area = match (target, new_header_slot(h, &*out)) {
        (RelocationTarget::GrowLastSection, _) => grow_last(h, out, len, write, file_end)?,
        (_, Ok(slot)) => append(h, out, len, write, file_end, slot)?,
        (RelocationTarget::Auto, Err(_)) => grow_last(h, out, len, write, file_end)?,
        (RelocationTarget::NewSection, Err(e)) => return Err(e),
    };
    if cert.is_some_and(|d| d.size != 0) {
        let at = h.directories_at + SECURITY_DIRECTORY as usize * 8;
        out.write_at(at, &[0; 8]);
    }
    let image_end = u64::from(area.rva) + u64::from(area.size);
    let size_of_image = align_u64(image_end, sa).ok_or(overflow("SizeOfImage"))?;
    out.write_at(h.optional + 56, &size_of_image.to_le_bytes());
    Ok(area)
}

/// File offset for one more section header: right after the table, inside SizeOfHeaders and
/// before the first section's raw data, over zero bytes.
pub(super) fn new_header_slot(h: &Headers, file: &impl Output) -> Result<usize, WriteError> {
    let count = u16::try_from(h.sections.len()).unwrap_or(u16::MAX);
    if count >= MAX_SECTIONS {
        return Err(WriteError::TooManySections { count });
    }
    let table_end = h.sections_at + h.sections.len() * SECTION_HEADER_SIZE;
    let first_raw = h
        .sections
        .iter()
        .filter(|s| s.raw_size != 0)
        .map(|s| s.raw_offset as usize)
        .min()
        .unwrap_or(usize::MAX);
    let limit = (h.size_of_headers as usize).min(first_raw);
    if table_end + SECTION_HEADER_SIZE > limit {
        return Err(WriteError::NoRoomForSectionHeader { table_end, limit });
    }
    if file
        .read(table_end..table_end + SECTION_HEADER_SIZE)
        .is_none_or(|b| b.iter().any(|&x| x != 0))
    {
        return Err(WriteError::SectionHeaderSpaceInUse { offset: table_end });
    }
    Ok(table_end)
}

/// Adds `delta` to the 32-bit optional-header field at `at`.
pub(super) fn add_to_field(
    out: &mut impl Output,
    at: usize,
    delta: u32,
    what: &'static str,
) -> Result<(), WriteError> {
    let v = output_u32(out, at, "optional header truncated")?
        .checked_add(delta)
        .ok_or(WriteError::Overflow { what })?;
    out.write_at(at, &v.to_le_bytes());
    Ok(())
}

/// The 32-bit header field at `at` of the output as laid out so far.
pub(super) fn output_u32(
    out: &impl Output,
    at: usize,
    reason: &'static str,
) -> Result<u32, WriteError> {
    let bytes = out.read(at..at.saturating_add(4));
    bytes
        .and_then(|b| le_u32(&b, 0))
        .ok_or(WriteError::BadHeader { offset: at, reason })
}

/// Appends a section after the last one, in memory and in the file.
pub(super) fn append<O: Output>(
    h: &Headers,
    out: &mut O,
    len: usize,
    write: impl FnOnce(&mut Vec<u8>),
    file_end: u64,
    slot: usize,
) -> Result<RelocationArea, WriteError> {
    let overflow = |what| WriteError::Overflow { what };
    let virtual_end = h
        .sections
        .iter()
        .map(|s| u64::from(s.virtual_address) + u64::from(s.memory_size()))
        .max()
        .unwrap_or(0);
    // At least 4-byte aligned for fat headers, whatever a hostile SectionAlignment says.
    let rva = align_u64(virtual_end, h.section_alignment.max(4)).ok_or(overflow("section RVA"))?;
    let virtual_size = u32::try_from(len).map_err(|_| overflow("section size"))?;
    let raw_size =
        align_u64(u64::from(virtual_size), h.file_alignment).ok_or(overflow("section raw size"))?;
    let raw_offset =
        align_u64(file_end, h.file_alignment.max(4)).ok_or(overflow("section offset"))?;
    add_to_field(out, h.optional + 4, raw_size, "SizeOfCode")?;

    if (file_end as usize) < out.len() {
        out.resize_to(file_end as usize);
    }
    out.resize_to(raw_offset as usize);
    write(out.end());
    out.resize_to(raw_offset as usize + raw_size as usize);

    let mut header = [0u8; SECTION_HEADER_SIZE];
    header[..SECTION_NAME.len()].copy_from_slice(SECTION_NAME.as_bytes());
    header[8..12].copy_from_slice(&virtual_size.to_le_bytes());
    header[12..16].copy_from_slice(&rva.to_le_bytes());
    header[16..20].copy_from_slice(&raw_size.to_le_bytes());
    header[20..24].copy_from_slice(&raw_offset.to_le_bytes());
    header[36..40].copy_from_slice(&SECTION_CHARACTERISTICS.to_le_bytes());
    out.write_at(slot, &header);
    // `new_header_slot` checked the count is below MAX_SECTIONS.
    let count = h.sections.len() as u16 + 1;
    out.write_at(h.coff + 2, &count.to_le_bytes());
    Ok(RelocationArea {
        section: SECTION_NAME.to_string(),
        appended: true,
        rva,
        raw_offset,
        size: virtual_size,
        section_virtual_size: virtual_size,
        section_raw_size: raw_size,
    })
}

/// The most zero bytes [`grow_last`] writes to cover a last section's uninitialized tail.
pub(super) const MAX_ZERO_FILL: u64 = 16 << 20;

/// Grows the last section (last in memory and in the file, followed by nothing but a
/// certificate table) to hold `content` after its current data.
pub(super) fn grow_last<O: Output>(
    h: &Headers,
    out: &mut O,
    len: usize,
    write: impl FnOnce(&mut Vec<u8>),
    file_end: u64,
) -> Result<RelocationArea, WriteError> {
    let overflow = |what| WriteError::Overflow { what };
    let (index, last) = h
        .sections
        .iter()
        .enumerate()
        .max_by_key(|(_, s)| s.virtual_address)
        .ok_or(WriteError::CannotGrowLastSection {
            reason: "the image has no sections",
        })?;
    let raw_end = u64::from(last.raw_offset) + u64::from(last.raw_size);
    if last.raw_size == 0 || raw_end != file_end {
        return Err(WriteError::CannotGrowLastSection {
            reason: "other data follows the last section in the file",
        });
    }
    // Fat headers need a 4-byte aligned RVA: align the RVA, not the offset in the section
    // (a hostile section's VirtualAddress need not be a multiple of 4).
    let va = u64::from(last.virtual_address);
    let start = (va + u64::from(last.memory_size())).next_multiple_of(4) - va;
    // Loaders that read the file without mapping sections (mono) align a fat body's EH
    // sections by its file offset, the others by its RVA: both must be multiples of 4.
    if !(u64::from(last.raw_offset) + start).is_multiple_of(4) {
        return Err(WriteError::CannotGrowLastSection {
            reason: "its RVA and file offset differ by a non-multiple of 4, so no place in it aligns a fat header for every loader",
        });
    }
    // The part of the section the loader zero-fills past its file data must be written out as
    // zeros before the new bodies. VirtualSize is a header field: a hostile one must not make
    // the writer allocate gigabytes.
    if start.saturating_sub(u64::from(last.raw_size)) > MAX_ZERO_FILL {
        return Err(WriteError::CannotGrowLastSection {
            reason: "its virtual size exceeds its file data by more than 16 MiB",
        });
    }
    let virtual_size = u32::try_from(start + len as u64).map_err(|_| overflow("section size"))?;
    let raw_size = align_u64(u64::from(virtual_size), h.file_alignment)
        .ok_or(overflow("section raw size"))?
        .max(last.raw_size);
    let rva = u32::try_from(u64::from(last.virtual_address) + start)
        .map_err(|_| overflow("relocated body RVA"))?;
    let raw_offset = u32::try_from(u64::from(last.raw_offset) + start)
        .map_err(|_| overflow("relocated body offset"))?;
    let end = u64::from(last.raw_offset) + u64::from(raw_size);
    let end = usize::try_from(end).map_err(|_| overflow("file size"))?;

    // Bytes between the old data and `start` are zero, as the loader's fill would be. Old
    // raw bytes past the new bodies (when they fit in the section's file padding) stay.
    let (at, raw_end) = (raw_offset as usize, raw_end as usize);
    let kept = out
        .read(at + len..raw_end)
        .map(std::borrow::Cow::into_owned);
    let data_end = last.raw_offset as usize + last.memory_size() as usize;
    if data_end.min(raw_end) < out.len() {
        out.resize_to(data_end.min(raw_end));
    }
    out.resize_to(at);
    write(out.end());
    out.end()
        .extend_from_slice(kept.as_deref().unwrap_or_default());
    out.resize_to(end);

    let header = h.sections_at + index * SECTION_HEADER_SIZE;
    out.write_at(header + 8, &virtual_size.to_le_bytes());
    out.write_at(header + 16, &raw_size.to_le_bytes());
    // The section now holds bodies the runtime reads: not discardable.
    let flags = output_u32(out, header + 36, "section table truncated")?;
    out.write_at(
        header + 36,
        &(flags & !IMAGE_SCN_MEM_DISCARDABLE).to_le_bytes(),
    );
    let grown = raw_size - last.raw_size;
    if flags & IMAGE_SCN_CNT_CODE != 0 {
        add_to_field(out, h.optional + 4, grown, "SizeOfCode")?;
    } else if flags & IMAGE_SCN_CNT_INITIALIZED_DATA != 0 {
        add_to_field(out, h.optional + 8, grown, "SizeOfInitializedData")?;
    }
    Ok(RelocationArea {
        section: last.name(),
        appended: false,
        rva,
        raw_offset,
        size: u32::try_from(len).map_err(|_| overflow("section size"))?,
        section_virtual_size: virtual_size,
        section_raw_size: raw_size,
    })
}

/// The machine a ReadyToRun image's Machine field names once the operating system's override
/// (CoreCLR's IMAGE_FILE_MACHINE_NATIVE_OS_OVERRIDE values for Apple, FreeBSD, Linux, NetBSD and
/// SunOS) is taken off; a machine ilcheck does not recognise is returned as it is.
pub(super) fn native_machine(machine: u16) -> u16 {
    const MACHINES: [u16; 4] = [0x014C, 0x8664, 0x01C4, 0xAA64];
    const OS_OVERRIDES: [u16; 6] = [0, 0x4644, 0xADC4, 0x7B79, 0x1993, 0x1992];
    OS_OVERRIDES
        .iter()
        .map(|x| machine ^ x)
        .find(|m| MACHINES.contains(m))
        .unwrap_or(machine)
}

/// `v` rounded up to a multiple of `align` (a power of two), when that fits in 32 bits.
pub(super) fn align_u64(v: u64, align: u32) -> Option<u32> {
    u32::try_from(v.checked_next_multiple_of(u64::from(align))?).ok()
}

/// The PE image checksum (as `CheckSumMappedFile`): the one's-complement sum of the file's
/// 16-bit words with the checksum field taken as zero, folded to 16 bits, plus the length.
pub fn pe_checksum(file: &[u8], checksum_offset: usize) -> u32 {
    let field = checksum_offset..checksum_offset.saturating_add(4);
    let byte = |at: usize| if field.contains(&at) { 0 } else { file[at] };
    let mut sum: u64 = 0;
    let mut words = file.chunks_exact(2);
    for (i, w) in words.by_ref().enumerate() {
        let at = i * 2;
        let (lo, hi) = if at + 1 >= field.start && at < field.end {
            (byte(at), byte(at + 1))
        } else {
            (w[0], w[1])
        };
        sum += u64::from(u16::from_le_bytes([lo, hi]));
    }
    if !words.remainder().is_empty() {
        sum += u64::from(byte(file.len() - 1));
    }
    fold_checksum(sum, file.len())
}

/// The sum of the little-endian 16-bit words of a file's bytes `bytes`, found at offset `at`:
/// an odd `at` starts with the high byte of a word.
pub(super) fn word_sum(at: usize, bytes: &[u8]) -> u64 {
    let (mut sum, even) = match (at % 2, bytes.split_first()) {
        (1, Some((&high, rest))) => (u64::from(high) << 8, rest),
        _ => (0, bytes),
    };
    let mut words = even.chunks_exact(2);
    for w in words.by_ref() {
        sum += u64::from(u16::from_le_bytes([w[0], w[1]]));
    }
    if let [last] = words.remainder() {
        sum += u64::from(*last);
    }
    sum
}

/// The checksum of a file of `len` bytes whose words (checksum field as zero) sum to `sum`:
/// the sum folded to 16 bits with its carries, plus the length.
pub(super) fn fold_checksum(mut sum: u64, len: usize) -> u32 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    (sum as u32).wrapping_add(len as u32)
}

/// File offset of the checksum field of the PE image `file` (any PE file: only its signature
/// and optional header's place are read).
pub fn checksum_offset(file: &[u8]) -> Option<usize> {
    let pe = le_u32(file, 0x3c)? as usize;
    if file.get(pe..pe.checked_add(4)?) != Some(b"PE\0\0") {
        return None;
    }
    let at = pe + 4 + COFF_HEADER_SIZE + 64;
    (at.checked_add(4)? <= file.len()).then_some(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(sections: usize) -> Headers {
        let s = RawSection {
            name: ".text".into(),
            virtual_size: 0x100,
            virtual_address: 0x2000,
            raw_size: 0x200,
            raw_offset: 0x200,
        };
        Headers {
            coff: 0x84,
            optional: 0x98,
            sections_at: 0x178,
            sections: vec![s; sections],
            file_alignment: 0x200,
            section_alignment: 0x2000,
            size_of_headers: 0x200,
            checksum_offset: 0xd8,
            directories_at: 0xf8,
            directory_count: 16,
        }
    }

    #[test]
    fn alignment_is_checked() {
        assert_eq!(align_u64(0, 0x200), Some(0));
        assert_eq!(align_u64(1, 0x200), Some(0x200));
        assert_eq!(align_u64(0x200, 0x200), Some(0x200));
        assert_eq!(align_u64(u64::from(u32::MAX), 0x1000), None);
        assert_eq!(align_u64(u64::MAX, 4), None);
    }

    #[test]
    fn checksum_folds_carries_and_skips_its_field() {
        assert_eq!(pe_checksum(&[1, 0, 2, 0, 3], 100), 6 + 5);
        assert_eq!(pe_checksum(&[0xff, 0xff, 0xff, 0xff, 1, 0], 0), 1 + 6);
        assert_eq!(pe_checksum(&[0xff, 0xff, 2, 0], 100), 2 + 4);
        // A field at an odd offset masks the bytes it covers, not whole words.
        assert_eq!(pe_checksum(&[1, 9, 9, 9, 9, 0], 1), 1 + 6);
        assert_eq!(pe_checksum(&[], 0), 0);
    }

    /// Summed in pieces at any offsets, the words give [`pe_checksum`].
    #[test]
    fn word_sums_in_pieces_are_the_checksum() {
        let mut next = crate::test_rng::below(0x9d1c_5a2e_77b3_0f41);
        for _ in 0..200 {
            let mut file: Vec<u8> = (0..next(3000)).map(|_| next(256) as u8).collect();
            let field = next(file.len() as u64 + 1) as usize;
            let expected = pe_checksum(&file, field);
            for b in file.iter_mut().skip(field).take(4) {
                *b = 0;
            }
            let (mut at, mut sum) = (0, 0);
            while at < file.len() {
                let n = (1 + next(300) as usize).min(file.len() - at);
                sum += word_sum(at, &file[at..at + n]);
                at += n;
            }
            assert_eq!(fold_checksum(sum, file.len()), expected);
        }
    }

    #[test]
    fn header_limits_are_typed_errors() {
        let file = vec![0u8; 0x400];
        assert!(matches!(
            new_header_slot(&headers(MAX_SECTIONS as usize), &file),
            Err(WriteError::TooManySections { count: 96 })
        ));
        // 0x178 + 9 × 40 = 0x2e0 > 0x200.
        assert!(matches!(
            new_header_slot(&headers(9), &file),
            Err(WriteError::NoRoomForSectionHeader { .. })
        ));
        // Two sections leave room for a third header; three (as Roslyn writes) do not.
        assert_eq!(new_header_slot(&headers(2), &file).unwrap(), 0x178 + 80);
        assert!(new_header_slot(&headers(3), &file).is_err());
        let mut h = headers(4);
        h.file_alignment = 0x300;
        let mut out = file.clone();
        assert!(matches!(
            place_relocated(
                &h,
                &mut out,
                2,
                |o| o.extend_from_slice(&[0x06, 0x2a]),
                None,
                RelocationTarget::Auto
            ),
            Err(WriteError::BadAlignment { .. })
        ));
    }

    #[test]
    fn garbage_headers_do_not_panic() {
        assert_eq!(checksum_offset(&[]), None);
        let mut file = vec![0u8; 0x200];
        file[0x3c] = 0xf0;
        assert_eq!(checksum_offset(&file), None);
        file[0x3c] = 0x80;
        file[0x80..0x84].copy_from_slice(b"PE\0\0");
        assert_eq!(checksum_offset(&file), Some(0x80 + 4 + 20 + 64));
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..500 {
            for b in file.iter_mut().skip(0x84).take(0x100) {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                *b = seed as u8;
            }
            let mut h = headers(3);
            h.sections[0].raw_offset = (seed >> 32) as u32;
            h.sections[1].raw_size = seed as u32;
            let mut out = file.clone();
            let _ = place_relocated(
                &h,
                &mut out,
                12,
                |o| o.extend_from_slice(&[0; 12]),
                None,
                RelocationTarget::Auto,
            );
            let _ = h.directory(&file, SECURITY_DIRECTORY);
        }
    }
}
