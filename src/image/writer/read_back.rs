//! The written image read back before anyone is told it was written: it must parse, every
//! replaced method must decode at its new RVA (fat headers 4-byte aligned) to exactly the bytes
//! that were given (and verified), every other method must keep its RVA and its bytes, and the
//! image must have no integrity finding the input did not have. A writer defect (a misaligned
//! relocation, a clobbered body, a cut file) becomes an error instead of a file.

use super::{Replacements, WriteError};
use crate::image::integrity::{self, IntegrityCode};
use crate::image::{Image, Table, Token};
use std::collections::HashMap;

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
