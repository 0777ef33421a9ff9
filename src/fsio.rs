//! Files in and out: inputs are opened only when they are regular files (a FIFO or device
//! named `.dll` must not hang a run), and outputs are written atomically (a temporary file in
//! the target's directory, flushed, then renamed over the target), so a crash, a full disk or a
//! concurrent writer leaves either the old file or the new one, never a part of either.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// What kind of thing a path names, when it is not a regular file or a directory.
fn kind_of(meta: &std::fs::Metadata) -> &'static str {
    let t = meta.file_type();
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a FIFO";
        }
        if t.is_socket() {
            return "a socket";
        }
        if t.is_char_device() || t.is_block_device() {
            return "a device";
        }
    }
    if t.is_dir() {
        return "a directory";
    }
    if t.is_symlink() {
        return "a symbolic link";
    }
    "not a regular file"
}

/// Opens `path` for reading when it is a regular file (following symbolic links). Anything
/// else is refused with [`io::ErrorKind::InvalidInput`] and a message saying what it is; the
/// open itself never blocks (a FIFO opened for reading would wait for a writer).
pub fn open_regular(path: &Path) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // O_NONBLOCK: opening a FIFO returns at once instead of waiting for a writer; the
        // descriptor's type is checked below before anything is read.
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} (only regular files are read)", kind_of(&meta)),
        ));
    }
    Ok(file)
}

/// Asks the kernel to start reading each of `paths` into the page cache, without waiting
/// for it (Linux `POSIX_FADV_WILLNEED`; elsewhere nothing): for a caller about to read many
/// files in this order, on a thread of its own beside the ones that read them, so that the
/// disk works while they compute instead of each waiting for its file in turn. Only regular
/// files are touched ([`open_regular`]); errors are ignored (the real read reports them).
pub fn prefetch<'p>(paths: impl IntoIterator<Item = &'p Path>) {
    for path in paths {
        let Ok(file) = open_regular(path) else {
            continue;
        };
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            // SAFETY: advice on a descriptor open for the lifetime of `file`.
            let _ =
                unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_WILLNEED) };
        }
        drop(file);
    }
}

/// Whether a directory entry should be read as a file: a regular file (symbolic links
/// followed). Returns the reason it is not, for the report.
pub fn regular_file_reason(path: &Path) -> Result<(), String> {
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_file() => Ok(()),
        Ok(meta) => Err(format!("{} (only regular files are read)", kind_of(&meta))),
        Err(e) => Err(e.to_string()),
    }
}

static NEXT_TEMP: AtomicU64 = AtomicU64::new(0);

/// A file being written under a temporary name beside its target; [`AtomicFile::commit`]
/// flushes it and renames it over the target. Dropped without `commit` (an error, a panic),
/// the temporary file is removed and the target is untouched.
///
/// Writes go straight to the file, unbuffered: its callers write whole images and reports
/// at once, which a buffer would only copy (wrap it in an [`io::BufWriter`] for many small
/// writes).
#[derive(Debug)]
pub struct AtomicFile {
    target: PathBuf,
    temp: PathBuf,
    file: Option<File>,
}

/// Files at least this large are written with direct I/O by [`AtomicFile::write_whole`]
/// (smaller ones gain little and wait for the device).
pub const DIRECT_MIN: usize = 256 << 10;

/// Direct I/O wants its memory, offsets and lengths in whole blocks: 4 KiB covers every
/// logical block size Linux file systems use.
const DIRECT_ALIGN: usize = 4096;

/// Block-aligned memory for [`AtomicFile::write_whole`] and [`AtomicFile::write_held`],
/// kept from one file to the next.
#[derive(Debug, Default)]
pub struct DirectBuffer {
    bytes: Vec<u8>,
    /// Where the held data starts in `bytes` (a block boundary).
    start: usize,
    /// The held data's length (the blocks are zero-padded past it).
    len: usize,
}

impl DirectBuffer {
    /// Holds a copy of `data`, from a block-aligned start and zero-padded to whole blocks.
    pub fn hold(&mut self, data: &[u8]) {
        let blocks = data.len().next_multiple_of(DIRECT_ALIGN);
        if self.bytes.len() < blocks + DIRECT_ALIGN {
            self.bytes.resize(blocks + DIRECT_ALIGN, 0);
        }
        let at = self.bytes.as_ptr() as usize;
        self.start = (DIRECT_ALIGN - at % DIRECT_ALIGN) % DIRECT_ALIGN;
        self.len = data.len();
        let (head, pad) = self.bytes[self.start..self.start + blocks].split_at_mut(data.len());
        head.copy_from_slice(data);
        pad.fill(0);
    }

    /// The data held.
    pub fn data(&self) -> &[u8] {
        &self.bytes[self.start..self.start + self.len]
    }

    /// The data held with its padding: whole blocks from a block-aligned address.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    fn blocks(&self) -> &[u8] {
        &self.bytes[self.start..self.start + self.len.next_multiple_of(DIRECT_ALIGN)]
    }
}

/// The prefix of every temporary file, so that leftovers of a killed process are recognisable.
pub const TEMP_PREFIX: &str = ".ilcheck-tmp-";

impl AtomicFile {
    /// [`AtomicFile::create`] for a file made from `model` (a rewrite's input): a new target
    /// is executable where the model is and the new file is readable (as `cp` makes it), so a
    /// patched program stays runnable; a target that exists keeps its own permissions.
    pub fn create_like(target: &Path, model: &Path) -> io::Result<AtomicFile> {
        let new = std::fs::metadata(target).is_err();
        let f = AtomicFile::create(target)?;
        #[cfg(unix)]
        if new && let (Ok(m), Some(file)) = (std::fs::metadata(model), f.file.as_ref()) {
            use std::os::unix::fs::PermissionsExt;
            let mode = file.metadata()?.permissions().mode();
            // Each class's execute bit (0o100, 0o010, 0o001) where the model has it and the
            // new file's matching read bit (four times it) is set.
            let exec = m.permissions().mode() & 0o111 & ((mode & 0o444) >> 2);
            if exec != 0 {
                file.set_permissions(std::fs::Permissions::from_mode(mode | exec))?;
            }
        }
        #[cfg(not(unix))]
        let _ = (new, model);
        Ok(f)
    }

    /// Creates the temporary file in `target`'s directory (so the rename stays on one file
    /// system). A target that exists keeps its permissions.
    pub fn create(target: &Path) -> io::Result<AtomicFile> {
        let dir = match target.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = target
            .file_name()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
        let existing = std::fs::metadata(target).ok();
        if existing.as_ref().is_some_and(|m| m.is_dir()) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "is a directory",
            ));
        }
        loop {
            let n = NEXT_TEMP.fetch_add(1, Ordering::Relaxed);
            let temp = dir.join(format!(
                "{TEMP_PREFIX}{}-{n}-{}",
                std::process::id(),
                name.to_string_lossy()
            ));
            // Readable too: a writer may read back what it wrote (mapped).
            match OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&temp)
            {
                Ok(file) => {
                    if let Some(meta) = &existing {
                        // Best effort: a target we may replace keeps its mode.
                        let _ = file.set_permissions(meta.permissions());
                    }
                    return Ok(AtomicFile {
                        target: target.to_path_buf(),
                        temp,
                        file: Some(file),
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// The temporary file, open for reading and writing, for positioned writes and reads
    /// ([`crate::ImageWriter::finish_to_file`]).
    pub fn file(&self) -> io::Result<&File> {
        self.file
            .as_ref()
            .ok_or_else(|| io::Error::other("already committed"))
    }

    /// Writes `data` as the whole file, from the device's side of the page cache where the
    /// file system allows it (Linux `O_DIRECT`, files of at least [`DIRECT_MIN`] bytes): the
    /// data is copied into `buffer`, memory the caller keeps from one file to the next, and
    /// written from there, instead of into pages of the page cache taken anew for every file
    /// (on a virtual machine each such page can cost a fault in the host). Elsewhere, and for
    /// smaller files, an ordinary write. Either way the file holds exactly `data`, and
    /// [`AtomicFile::commit`] flushes it.
    /// Returns whether the data went to the device directly.
    pub fn write_whole(&mut self, data: &[u8], buffer: &mut DirectBuffer) -> io::Result<bool> {
        if data.len() < DIRECT_MIN || !self.direct_pays() {
            return self.write_all(data).map(|()| false);
        }
        buffer.hold(data);
        self.write_held(buffer)
    }

    /// Whether direct I/O could spare the page cache here: not on a file system that is the
    /// page cache (tmpfs, ramfs), where it is one more copy of the data for nothing.
    pub fn direct_pays(&self) -> bool {
        #[cfg(target_os = "linux")]
        if let Some(file) = self.file.as_ref() {
            use std::os::fd::AsRawFd;
            const TMPFS_MAGIC: i64 = 0x0102_1994;
            const RAMFS_MAGIC: i64 = 0x8584_58f6;
            // SAFETY: fstatfs on a descriptor open for the lifetime of `file`, into a struct
            // it fills.
            let mut st: libc::statfs = unsafe { std::mem::zeroed() };
            if unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) } == 0 {
                #[allow(clippy::unnecessary_cast)]
                let kind = st.f_type as i64;
                return kind != TMPFS_MAGIC && kind != RAMFS_MAGIC;
            }
        }
        true
    }

    /// Writes what `buffer` holds ([`DirectBuffer::hold`]) as the whole file, as
    /// [`AtomicFile::write_whole`] does: the copy made by one thread, the write (which waits
    /// for the device) by another. Returns whether the data went to the device directly.
    pub fn write_held(&mut self, buffer: &DirectBuffer) -> io::Result<bool> {
        #[cfg(target_os = "linux")]
        if self.write_direct(buffer)? {
            return Ok(true);
        }
        self.write_all(buffer.data()).map(|()| false)
    }

    /// [`AtomicFile::write_held`] through `O_DIRECT`: false (and nothing written) where the
    /// file system does not take it.
    #[cfg(target_os = "linux")]
    fn write_direct(&mut self, buffer: &DirectBuffer) -> io::Result<bool> {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::FileExt;
        let Some(file) = self.file.as_ref() else {
            return Err(io::Error::other("already committed"));
        };
        let fd = file.as_raw_fd();
        // SAFETY: fcntl on a descriptor open for the lifetime of `file`.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_DIRECT) } < 0 {
            return Ok(false);
        }
        let written = file.write_all_at(buffer.blocks(), 0);
        // SAFETY: as above; the descriptor's own flags put back.
        unsafe { libc::fcntl(fd, libc::F_SETFL, flags) };
        match written {
            // The last block was padded with zeros: cut back to the data's length.
            Ok(()) => file.set_len(buffer.len as u64).map(|()| true),
            // The file system takes no direct I/O after all: whatever landed is dropped, and
            // the data goes through the page cache.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::EOPNOTSUPP)) => {
                file.set_len(0).map(|()| false)
            }
            Err(e) => Err(e),
        }
    }

    /// Asks the kernel to start putting what was written on the disk without waiting for it
    /// (Linux), so that [`AtomicFile::commit`]'s flush, perhaps on another thread, waits
    /// less. Optional; the file stays uncommitted.
    pub fn start_writeback(&mut self) -> io::Result<()> {
        let Some(writer) = self.file.as_mut() else {
            return Err(io::Error::other("already committed"));
        };
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            // A hint: where the call is not supported, the commit's sync does all the work.
            // SAFETY: the descriptor is open for the lifetime of `writer`.
            let _ = unsafe {
                libc::sync_file_range(writer.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE)
            };
        }
        Ok(())
    }

    /// Flushes the data to the disk and renames the temporary file over the target; then
    /// flushes the directory so the rename itself survives a crash.
    pub fn commit(self) -> io::Result<()> {
        let dir = self.commit_unsynced_rename()?;
        sync_dir(&dir);
        Ok(())
    }

    /// [`AtomicFile::commit`] but for the directory's flush: the data is on the disk before the
    /// rename (so a crash leaves the old file or the new one, never a part), and the rename is
    /// made durable by the caller's [`sync_dir`] of the directory returned, once for every file
    /// committed into it.
    pub fn commit_unsynced_rename(mut self) -> io::Result<PathBuf> {
        let Some(file) = self.file.take() else {
            return Err(io::Error::other("already committed"));
        };
        file.sync_all()?;
        drop(file);
        std::fs::rename(&self.temp, &self.target)?;
        // Renamed: nothing left to remove.
        self.temp = PathBuf::new();
        Ok(match self.target.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        })
    }
}

/// Flushes a directory's entries (the renames into it) to the disk. Not every file system lets
/// a directory be synced, so failures are ignored: the renames have happened either way.
pub fn sync_dir(dir: &Path) {
    #[cfg(unix)]
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    #[cfg(not(unix))]
    let _ = dir;
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.file {
            Some(f) => f.write(buf),
            None => Err(io::Error::other("already committed")),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match &mut self.file {
            Some(f) => f.write_all(buf),
            None => Err(io::Error::other("already committed")),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.file {
            Some(f) => f.flush(),
            None => Ok(()),
        }
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if !self.temp.as_os_str().is_empty() {
            // Close before removing; errors here leave at worst a marked temporary file.
            drop(self.file.take());
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

/// Whether `b` names the file `a` is, through any path, `..`, symbolic or hard link (on Unix:
/// the same device and inode); false when either does not exist.
pub fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        #[cfg(unix)]
        (Ok(x), Ok(y)) => {
            use std::os::unix::fs::MetadataExt;
            x.dev() == y.dev() && x.ino() == y.ino()
        }
        #[cfg(not(unix))]
        (Ok(_), Ok(_)) => match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
            (Ok(x), Ok(y)) => x == y,
            _ => false,
        },
        _ => false,
    }
}

/// Writes `bytes` to `target` atomically (see [`AtomicFile`]).
pub fn write_atomic(target: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut f = AtomicFile::create(target)?;
    f.write_all(bytes)?;
    f.commit()
}

/// Copies the regular file `from` to `to` atomically (see [`AtomicFile`]): `to` is the old
/// file or a whole copy, never a part.
pub fn copy_atomic(from: &Path, to: &Path) -> io::Result<()> {
    let mut source = open_regular(from)?;
    let mut f = AtomicFile::create(to)?;
    // File to file: the kernel copies (`copy_file_range` where it can), no buffer between.
    if let Some(file) = f.file.as_mut() {
        io::copy(&mut source, file)?;
    }
    f.commit()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ilcheck-fsio-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn leftovers(dir: &Path) -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(TEMP_PREFIX))
            .collect()
    }

    #[test]
    fn replaces_only_on_commit_and_cleans_up_otherwise() {
        let dir = scratch("commit");
        let target = dir.join("out.dll");
        std::fs::write(&target, b"old").unwrap();
        {
            let mut f = AtomicFile::create(&target).unwrap();
            f.write_all(b"half of the new").unwrap();
            // Dropped without commit: an error part-way.
        }
        assert_eq!(std::fs::read(&target).unwrap(), b"old");
        assert!(leftovers(&dir).is_empty(), "{:?}", leftovers(&dir));
        write_atomic(&target, b"new").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
        assert!(leftovers(&dir).is_empty());
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_copy_replaces_whole_or_not_at_all() {
        let dir = scratch("copy");
        let (from, to) = (dir.join("a.exe"), dir.join("b.exe"));
        std::fs::write(&to, b"old").unwrap();
        // A missing source: the target keeps its old bytes, no temporary file is left.
        assert!(copy_atomic(&from, &to).is_err());
        assert_eq!(std::fs::read(&to).unwrap(), b"old");
        assert!(leftovers(&dir).is_empty(), "{:?}", leftovers(&dir));
        let bytes: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&from, &bytes).unwrap();
        copy_atomic(&from, &to).unwrap();
        assert_eq!(std::fs::read(&to).unwrap(), bytes);
        // A directory is not a file to copy.
        assert!(copy_atomic(&dir, &to).is_err());
        assert_eq!(std::fs::read(&to).unwrap(), bytes);
        assert!(leftovers(&dir).is_empty(), "{:?}", leftovers(&dir));
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_deferred_directory_sync_still_renames_whole_files() {
        let dir = scratch("deferred");
        let target = dir.join("out.dll");
        std::fs::write(&target, b"old").unwrap();
        let mut f = AtomicFile::create(&target).unwrap();
        f.write_all(b"new, ").unwrap();
        f.start_writeback().unwrap();
        // Written after the write-back began: still part of the file.
        f.write_all(b"whole").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"old");
        let synced = f.commit_unsynced_rename().unwrap();
        assert_eq!(synced, dir);
        sync_dir(&synced);
        assert_eq!(std::fs::read(&target).unwrap(), b"new, whole");
        assert!(leftovers(&dir).is_empty(), "{:?}", leftovers(&dir));
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn whole_writes_hold_exactly_the_data_directly_or_not() {
        // Lengths about the direct-I/O threshold and block boundaries, in the system's
        // temporary directory and in memory.
        let mut places = vec![scratch("whole")];
        if Path::new("/dev/shm").is_dir() {
            places.push(PathBuf::from("/dev/shm"));
        }
        let lengths = [
            0,
            1,
            4095,
            DIRECT_MIN - 1,
            DIRECT_MIN,
            DIRECT_MIN + 1,
            DIRECT_MIN + 4096,
            3 << 20 | 123,
        ];
        let mut buffer = DirectBuffer::default();
        let mut direct = 0;
        for dir in &places {
            let target = dir.join(format!("ilcheck-fsio-whole-{}", std::process::id()));
            for &len in &lengths {
                let data: Vec<u8> = (0..len).map(|i| (i * 7 + i / 4096) as u8).collect();
                let mut f = AtomicFile::create(&target).unwrap();
                let went = f.write_whole(&data, &mut buffer).unwrap();
                assert!(!went || len >= DIRECT_MIN, "{len} bytes written directly");
                // tmpfs is the page cache: direct I/O there would be a copy for nothing.
                assert!(!went || !dir.starts_with("/dev/shm"), "direct I/O to tmpfs");
                direct += usize::from(went);
                f.commit().unwrap();
                let back = std::fs::read(&target).unwrap();
                assert!(
                    back == data,
                    "{}: {len} bytes read back differ",
                    dir.display()
                );
            }
            let _ = std::fs::remove_file(&target);
        }
        if direct == 0 {
            eprintln!("fsio: no file system here took direct I/O; only the fallback was tested");
        }
        // Held by one thread, written by another: the same bytes.
        let data: Vec<u8> = (0..DIRECT_MIN * 3 + 5).map(|i| (i % 251) as u8).collect();
        buffer.hold(&data);
        assert_eq!(buffer.data(), &data[..]);
        let target = places[0].join("held");
        let mut f = AtomicFile::create(&target).unwrap();
        std::thread::scope(|s| s.spawn(|| f.write_held(&buffer).unwrap()).join().unwrap());
        f.commit().unwrap();
        assert!(std::fs::read(&target).unwrap() == data);
        let _ = std::fs::remove_dir_all(&places[0]);
    }

    #[test]
    fn the_same_file_is_known_through_any_name() {
        let dir = scratch("same-file");
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        let a = dir.join("a.dll");
        std::fs::write(&a, b"MZ").unwrap();
        std::fs::write(dir.join("b.dll"), b"MZ").unwrap();
        std::fs::hard_link(&a, dir.join("hard.dll")).unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink("a.dll", dir.join("sym.dll")).unwrap();
        assert!(same_file(&a, &dir.join("sub/../a.dll")));
        assert!(same_file(&a, &dir.join("hard.dll")));
        #[cfg(unix)]
        assert!(same_file(&dir.join("sym.dll"), &a));
        assert!(
            !same_file(&a, &dir.join("b.dll")),
            "same bytes, another file"
        );
        assert!(!same_file(&a, &dir.join("missing.dll")));
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_directory_target_is_refused() {
        let dir = scratch("dir-target");
        let err = write_atomic(&dir, b"x").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{err}");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = scratch("fifo");
        let fifo = dir.join("pipe.dll");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .is_ok_and(|s| s.success());
        assert!(made, "mkfifo (coreutils) is needed for this test");
        // Would block forever without O_NONBLOCK: no writer ever opens the FIFO.
        let err = open_regular(&fifo).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(err.to_string().contains("FIFO"), "{err}");
        assert!(regular_file_reason(&fifo).unwrap_err().contains("FIFO"));
        // Nor does a prefetch of it, beside a missing file and a regular one (which it leaves
        // as it was).
        let file = dir.join("a.dll");
        std::fs::write(&file, b"MZ").unwrap();
        let missing = dir.join("missing.dll");
        let (tx, rx) = std::sync::mpsc::channel();
        let paths = [fifo.clone(), missing, file.clone()];
        std::thread::spawn(move || {
            prefetch(paths.iter().map(PathBuf::as_path));
            let _ = tx.send(());
        });
        assert!(
            rx.recv_timeout(std::time::Duration::from_secs(10)).is_ok(),
            "prefetch blocked on a FIFO"
        );
        assert_eq!(std::fs::read(&file).unwrap(), b"MZ");
        std::fs::remove_dir_all(&dir).ok();
    }
}
