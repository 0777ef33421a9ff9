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
    for rid in 1..=rows {
        let token = Token::new(Table::MethodDef, rid);
        let unreadable = |e| WriteError::OutputBody {
            token,
            source: Box::new(e),
        };
        let new = written.method(rid).map_err(unreadable)?;
        match replacements.get(rid) {
            Some(expected) => {
                let bytes = new.body().map_err(unreadable)?;
                if bytes != expected {
                    return Err(WriteError::OutputBodyMismatch {
                        token,
                        rva: new.rva(),
                    });
                }
            }
            None => {
                // Rows that cannot be read were refused before anything was written.
                let Ok(old) = input.method(rid) else { continue };
                if new.rva() != old.rva() {
                    return Err(WriteError::OutputRvaChanged {
                        token,
                        old: old.rva(),
                        new: new.rva(),
                    });
                }
                // A body that did not decode in the input is left as it was, unread.
                if let (Ok(before), Some(at)) = (old.body(), new.body_offset())
                    && out.get(at..at + before.len()) != Some(before)
                {
                    return Err(WriteError::OutputBodyMismatch {
                        token,
                        rva: new.rva(),
                    });
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
