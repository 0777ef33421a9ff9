//! The written image read back before anyone is told it was written: it must parse, every
//! replaced method must decode at its new RVA (fat headers 4-byte aligned) to exactly the bytes
//! that were given (and verified), every other method must keep its RVA and its bytes, and the
//! image must have no integrity finding the input did not have. A writer defect (a misaligned
//! relocation, a clobbered body, a cut file) becomes an error instead of a file.

use super::{Replacements, WriteError};
use crate::body::Body;
use crate::image::integrity::{self, IntegrityCode};
use crate::image::pe::Section;
use crate::image::{Image, Table, Token};
use std::collections::HashMap;

/// The written image's sections, for finding the section of each replaced body in a look or
/// two: most rewritten bodies are relocated into the last section, which a search in table
/// order (`PeInfo::section_of`) reaches after all the others.
struct Spans {
    /// Per section in table order: its RVA, and the file range of its data (as
    /// [`Section::file_span`] of the written file).
    spans: Vec<(u32, u64, u64)>,
    /// No RVA lies in two sections' data, so any section holding an RVA is the first one
    /// that does (the one the reader finds), and the last one found may be tried first.
    disjoint: bool,
    last: usize,
}

impl Spans {
    fn of(sections: &[Section], file_len: usize) -> Spans {
        let spans: Vec<(u32, u64, u64)> = sections
            .iter()
            .map(|s| {
                let (start, end) = s.file_span(file_len);
                (s.virtual_address, start, end)
            })
            .collect();
        let mut by_rva: Vec<(u64, u64)> = spans
            .iter()
            .map(|&(va, start, end)| (u64::from(va), u64::from(va) + (end - start)))
            .filter(|(lo, hi)| lo < hi)
            .collect();
        by_rva.sort_unstable();
        let disjoint = by_rva.windows(2).all(|w| w[0].1 <= w[1].0);
        Spans {
            spans,
            disjoint,
            last: 0,
        }
    }

    /// As `PeInfo::rva_to_section_tail`: the file range from `rva` to the end of its
    /// section's data.
    fn tail(&mut self, rva: u32) -> Option<(usize, usize)> {
        let holds =
            |&(va, start, end): &(u32, u64, u64)| rva >= va && u64::from(rva - va) < end - start;
        let k = match self.spans.get(self.last) {
            Some(s) if self.disjoint && holds(s) => self.last,
            _ => self.spans.iter().position(holds)?,
        };
        self.last = k;
        let (va, start, end) = self.spans[k];
        Some(((start + u64::from(rva - va)) as usize, end as usize))
    }
}

/// Where the replaced body `expected` is in `out`, if it is there as the reader would find
/// it (`Image::body_at` of the written image at `rva`): its section's data holds it, a fat
/// header sits at a 4-byte aligned RVA, and the bytes there parse to a body of exactly its
/// length and are its bytes. `None` for anything else, which the reader's own way then
/// reports.
fn found_as_given(spans: &mut Spans, out: &[u8], rva: u32, expected: &[u8]) -> Option<usize> {
    if rva == 0 {
        return None;
    }
    let (at, end) = spans.tail(rva)?;
    let tail = out.get(at..end)?;
    let fat = tail.first().is_some_and(|&h| h & 0x3 == 0x3);
    if fat && !rva.is_multiple_of(4) {
        return None;
    }
    // The header says how long the body is; the bytes must then be the ones given.
    let body = Body::parse(tail).ok()?;
    (body.len() == expected.len() && tail.starts_with(expected)).then_some(at)
}

/// Checks `out`, the bytes written for `input` with `replacements`.
pub(super) fn check(
    input: &Image<'_>,
    input_rvas: &[u32],
    out: &[u8],
    replacements: &Replacements<'_>,
) -> Result<(), WriteError> {
    let written = Image::parse(out).map_err(|e| WriteError::OutputUnreadable(Box::new(e)))?;
    let rows = input.method_count();
    if written.method_count() != rows {
        return Err(WriteError::OutputMethodCount {
            expected: rows,
            found: written.method_count(),
        });
    }
    // The RVA is the only cell of a row read here: both columns are read in one go (a row's
    // other cells are not checked by reading them, which only tests that the row exists).
    let mut written_rvas = Vec::new();
    super::originals::rva_column(&written, &mut written_rvas);
    let mut spans = Spans::of(&written.pe().sections, out.len());
    for rid in 1..=rows {
        let token = Token::new(Table::MethodDef, rid);
        let unreadable = |e| WriteError::OutputBody {
            token,
            source: Box::new(e),
        };
        let rva = match written_rvas.get(rid as usize) {
            Some(&rva) => rva,
            // The column stops at a row it cannot read: that row's error.
            None => written.method(rid).map_err(unreadable)?.rva(),
        };
        match replacements.get(rid) {
            Some(expected) => {
                if let Some(at) = found_as_given(&mut spans, out, rva, expected) {
                    // Loaders that do not map sections need the file offset aligned too.
                    if expected.first().is_some_and(|h| h & 3 == 3) && !at.is_multiple_of(4) {
                        return Err(WriteError::OutputMisalignedBody { token, offset: at });
                    }
                    continue;
                }
                // Not as given: the reader's own reading says how.
                let (_, bytes) = written.body_at(token, rva).map_err(unreadable)?;
                // The reader checked the RVA's alignment; loaders that do not map sections
                // need the file offset aligned too.
                let at = written.rva_to_offset(rva).unwrap_or(0);
                if bytes.first().is_some_and(|h| h & 3 == 3) && !at.is_multiple_of(4) {
                    return Err(WriteError::OutputMisalignedBody { token, offset: at });
                }
                if bytes != expected {
                    return Err(WriteError::OutputBodyMismatch { token, rva });
                }
            }
            None => {
                // Rows that cannot be read were refused before anything was written.
                let Some(&old) = input_rvas.get(rid as usize) else {
                    continue;
                };
                if rva != old {
                    return Err(WriteError::OutputRvaChanged {
                        token,
                        old,
                        new: rva,
                    });
                }
                // A body that did not decode in the input is left as it was, unread.
                let at = (rva != 0).then(|| written.rva_to_offset(rva)).flatten();
                if let (Ok((_, before)), Some(at)) = (input.body_at(token, old), at)
                    && out.get(at..at + before.len()) != Some(before)
                {
                    return Err(WriteError::OutputBodyMismatch { token, rva });
                }
            }
        }
    }
    let mut known: HashMap<IntegrityCode, usize> = HashMap::new();
    for f in integrity::check(input) {
        *known.entry(f.code).or_default() += 1;
    }
    for f in integrity::check(&written) {
        match known.get_mut(&f.code) {
            Some(n) if *n > 0 => *n -= 1,
            _ => {
                return Err(WriteError::OutputIntegrity {
                    code: f.code,
                    offset: f.offset,
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::writer::{ImageWriter, Placement};

    const PROGRAM: &[u8] = include_bytes!("../../../corpus/bin/control_flow.exe");

    /// The section search that tries the last section found first answers as the reader's
    /// search in table order, for sections apart, touching, overlapping and empty.
    #[test]
    fn spans_find_the_section_the_reader_finds() {
        let image = Image::parse(PROGRAM).unwrap();
        let mut pe = image.pe().clone();
        let mut next = crate::test_rng::below(0x0123_4567_89ab_cdefu64);
        for case in 0..400 {
            let file_len = 0x3000 + next(0x1000) as usize;
            pe.sections = (0..1 + next(5))
                .map(|_| Section {
                    name: String::new(),
                    virtual_address: 0x1000 * next(6) as u32 + next(2) as u32 * 0x800,
                    virtual_size: if next(4) == 0 { 0 } else { next(0x1800) as u32 },
                    raw_offset: next(0x3800) as u32,
                    raw_size: next(0x1800) as u32,
                    characteristics: 0,
                })
                .collect();
            let mut spans = Spans::of(&pe.sections, file_len);
            // Ascending, then scattered, so the remembered section is both right and wrong.
            let rvas = (0..0x7000u32)
                .step_by(0x7f)
                .chain((0..200).map(|_| next(0x7000) as u32));
            for rva in rvas {
                assert_eq!(
                    spans.tail(rva),
                    pe.rva_to_section_tail(rva, file_len),
                    "case {case}, rva {rva:#x}, {:?}",
                    pe.sections
                );
            }
        }
    }

    /// Every replaced body of a rewritten image is found as given, where the reader finds
    /// it; a body changed after writing is not.
    #[test]
    fn bodies_found_as_given_are_the_readers() {
        let image = Image::parse(PROGRAM).unwrap();
        let mut w = ImageWriter::new(&image);
        for m in image.methods().filter(|m| m.rva() != 0) {
            let (body, bytes) = m.decoded_body_and_bytes().unwrap();
            let mut new = bytes.to_vec();
            if m.rid() % 2 == 0 && body.is_tiny() && body.code.len() < 60 {
                // One more `nop` in front: relocated.
                new[0] += 4;
                new.insert(1, 0x00);
            }
            w.replace_body(m.rid(), &new).unwrap();
        }
        let mut out = Vec::new();
        w.finish_into(&mut out).unwrap();
        let written = Image::parse(&out).unwrap();
        let mut spans = Spans::of(&written.pe().sections, out.len());
        let replacements = w.replacements();
        let mut found = 0;
        for (rid, _, expected) in replacements.iter() {
            let token = Token::new(Table::MethodDef, rid);
            let rva = written.method(rid).unwrap().rva();
            let (_, bytes) = written.body_at(token, rva).unwrap();
            assert_eq!(bytes, expected);
            let at = found_as_given(&mut spans, &out, rva, expected);
            assert_eq!(at, written.rva_to_offset(rva), "rid {rid}");
            let mut tampered = out.clone();
            tampered[at.unwrap() + expected.len() - 1] ^= 0x5a;
            assert_eq!(found_as_given(&mut spans, &tampered, rva, expected), None);
            found += 1;
        }
        assert!(found > 10, "{found}");
    }

    #[test]
    fn a_damaged_output_is_an_error_not_a_file() {
        let image = Image::parse(PROGRAM).unwrap();
        let m = image.methods().find(|m| m.rva() != 0).unwrap();
        let mut w = ImageWriter::new(&image);
        // A fat body longer than any original: relocated.
        let mut body = vec![0x03, 0x30, 0x08, 0x00, 0x00, 0x01, 0x00, 0x00, 0, 0, 0, 0];
        body.extend(std::iter::repeat_n(0x00, 255)); // nop
        body.push(0x2A); // ret
        w.replace_body(m.rid(), &body).unwrap();
        let mut out = Vec::new();
        let (_, placements) = w.finish_into(&mut out).unwrap();
        let Placement::Relocated { new_rva, .. } = placements[0].1 else {
            panic!("{placements:?}")
        };
        let replacements = w.replacements();
        let mut rvas = Vec::new();
        super::super::originals::rva_column(&image, &mut rvas);
        assert!(check(&image, &rvas, &out, &replacements).is_ok());

        let written = Image::parse(&out).unwrap();
        let at = written.rva_to_offset(new_rva).unwrap();
        drop(written);
        let mut tampered = out.clone();
        tampered[at + 20] = 0x26; // a nop becomes a pop
        assert!(matches!(
            check(&image, &rvas, &tampered, &replacements),
            Err(WriteError::OutputBodyMismatch { .. })
        ));
        // Another method's body changed behind the writer's back.
        let other = image
            .methods()
            .filter(|o| o.rva() != 0 && o.rid() != m.rid())
            .last()
            .unwrap();
        let other_at = other.body_offset().unwrap();
        let mut tampered = out.clone();
        tampered[other_at + other.body().unwrap().len() - 1] ^= 0xff;
        assert!(matches!(
            check(&image, &rvas, &tampered, &replacements),
            Err(WriteError::OutputBodyMismatch { .. })
        ));
        // The output cut inside its last section.
        let cut = &out[..out.len() - 16];
        assert!(matches!(
            check(&image, &rvas, cut, &replacements),
            Err(WriteError::OutputIntegrity {
                code: IntegrityCode::ImageTruncated,
                ..
            }) | Err(WriteError::OutputBody { .. })
        ));
    }
}
