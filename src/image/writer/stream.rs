//! Writing an [`Overlay`] to a file: the input's unchanged ranges are copied file to file
//! where the input is a file (holes stay holes: a sparse input gives a sparse output), the
//! written pages and the appended bytes are written, and the checksum is summed from the
//! file. Memory stays the overlay's, whatever the input's size.

use std::fs::File;
use std::io;
use std::ops::Range;
use std::os::unix::fs::FileExt;

use super::output::Overlay;

/// Bytes read at a time when summing the written file.
const CHUNK: usize = 1 << 20;

/// Writes `overlay` (whose input is `input`, the bytes of `input_file` when given) to `out`,
/// an empty file open for writing, from offset 0.
pub(super) fn write(
    overlay: &Overlay<'_>,
    input: &[u8],
    input_file: Option<&File>,
    out: &File,
) -> io::Result<()> {
    for (range, piece) in overlay.pieces() {
        match piece {
            Some(bytes) => out.write_all_at(bytes, range.start as u64)?,
            None => copy_range(input, input_file, range, out)?,
        }
    }
    out.write_all_at(overlay.tail(), overlay.kept() as u64)?;
    // A hole at the end of the kept part is not written: the length makes it.
    out.set_len((overlay.kept() + overlay.tail().len()) as u64)
}

/// Copies `range` of the input to the same offsets of `out`: the file's data extents only,
/// in the kernel, when the input is a file; from memory otherwise.
fn copy_range(
    input: &[u8],
    file: Option<&File>,
    range: Range<usize>,
    out: &File,
) -> io::Result<()> {
    let Some(file) = file else {
        return out.write_all_at(&input[range.clone()], range.start as u64);
    };
    for extent in data_extents(file, range)? {
        copy_extent(input, file, extent, out)?;
    }
    Ok(())
}

/// The parts of `range` of `file` that hold data (as `SEEK_DATA`/`SEEK_HOLE` say; the whole
/// range where the file system cannot tell). Holes read as zeros and need not be copied.
fn data_extents(file: &File, range: Range<usize>) -> io::Result<Vec<Range<usize>>> {
    let mut extents = Vec::new();
    let mut at = range.start;
    while at < range.end {
        let Some(data) = seek(file, at, Whence::Data)? else {
            break;
        };
        if data >= range.end {
            break;
        }
        let hole = seek(file, data, Whence::Hole)?.unwrap_or(range.end);
        let end = hole.min(range.end);
        if end <= data {
            // A file system that answers without progress: copy the rest whole.
            extents.push(data..range.end);
            break;
        }
        extents.push(data..end);
        at = end;
    }
    Ok(extents)
}

#[derive(Clone, Copy)]
enum Whence {
    Data,
    Hole,
}

/// `lseek` to the next data (or hole) at or after `at`: `None` when there is none (past the
/// end, or no data after `at`); `at` itself when the file system cannot tell.
fn seek(file: &File, at: usize, whence: Whence) -> io::Result<Option<usize>> {
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
    {
        use std::os::fd::AsRawFd;
        let w = match whence {
            Whence::Data => libc::SEEK_DATA,
            Whence::Hole => libc::SEEK_HOLE,
        };
        let Ok(offset) = libc::off_t::try_from(at) else {
            return Ok(None);
        };
        // SAFETY: a plain call on a descriptor open for the lifetime of `file`; the offset it
        // moves is not used by the positioned reads and writes here.
        let r = unsafe { libc::lseek(file.as_raw_fd(), offset, w) };
        if r >= 0 {
            return Ok(usize::try_from(r).ok());
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ENXIO) => Ok(None),
            // The file system cannot seek by data: everything is data.
            Some(libc::EINVAL) | Some(libc::EOPNOTSUPP) => Ok(match whence {
                Whence::Data => Some(at),
                Whence::Hole => None,
            }),
            _ => Err(e),
        }
    }
    #[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
    {
        let _ = file;
        Ok(match whence {
            Whence::Data => Some(at),
            Whence::Hole => None,
        })
    }
}

/// Copies one data extent: `copy_file_range` (no copy through this process's memory) where
/// the kernel has it for these files, from the mapped input otherwise.
fn copy_extent(input: &[u8], file: &File, extent: Range<usize>, out: &File) -> io::Result<()> {
    let mut at = extent.start;
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        while at < extent.end {
            let (mut from, mut to) = (at as libc::loff_t, at as libc::loff_t);
            // SAFETY: both descriptors are open for the call; the offsets are ours.
            let n = unsafe {
                libc::copy_file_range(
                    file.as_raw_fd(),
                    &mut from,
                    out.as_raw_fd(),
                    &mut to,
                    extent.end - at,
                    0,
                )
            };
            match n {
                // The input ends early (cut since it was mapped): the mapping's view decides.
                0 => break,
                n if n > 0 => at += n as usize,
                _ => {
                    let e = io::Error::last_os_error();
                    match e.raw_os_error() {
                        Some(libc::EINTR) => continue,
                        Some(
                            libc::EXDEV
                            | libc::ENOSYS
                            | libc::EOPNOTSUPP
                            | libc::EINVAL
                            | libc::EBADF
                            | libc::EPERM,
                        ) => break,
                        _ => return Err(e),
                    }
                }
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = file;
    let rest = input.get(at..extent.end).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the input is shorter than when it was read",
        )
    })?;
    out.write_all_at(rest, at as u64)
}

/// The PE checksum of the file `out` (as [`super::pe_checksum`] of its bytes), written into its
/// field at `field`: the field is zeroed, the file's data extents summed a chunk at a time,
/// and the sum written.
pub(super) fn write_checksum(out: &File, field: usize) -> io::Result<u32> {
    out.write_all_at(&[0; 4], field as u64)?;
    let len = usize::try_from(out.metadata()?.len())
        .map_err(|_| io::Error::other("output larger than memory can address"))?;
    let mut sum = 0u64;
    let mut buf = vec![0u8; CHUNK];
    for extent in data_extents(out, 0..len)? {
        let mut at = extent.start;
        while at < extent.end {
            let n = (extent.end - at).min(CHUNK);
            out.read_exact_at(&mut buf[..n], at as u64)?;
            sum += super::sections::word_sum(at, &buf[..n]);
            at += n;
        }
    }
    let checksum = super::sections::fold_checksum(sum, len);
    out.write_all_at(&checksum.to_le_bytes(), field as u64)?;
    Ok(checksum)
}
