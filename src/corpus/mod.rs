//! Corpus runs: find assemblies, then round-trip ([`roundtrip`]) or verify ([`verify`]) every
//! method body and count what was seen, or rewrite every selected method of one assembly into a
//! patched image ([`rewrite_image`]).
//!
//! The default corpus is the project's own assemblies (embedded in the binary, so the default
//! run works anywhere) plus system assemblies found in standard places.

mod rewrite;
mod roundtrip;
mod types;
mod verify;

pub use rewrite::*;
pub use roundtrip::*;
pub use types::*;
pub use verify::*;

use crate::image::{Image, ImageError};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// The project's own test assemblies (`corpus/bin`), built from `corpus/il` and `corpus/cs`.
pub const EMBEDDED: &[(&str, &[u8])] = &[
    (
        "corpus/bin/codec_shapes.dll",
        include_bytes!("../../corpus/bin/codec_shapes.dll"),
    ),
    (
        "corpus/bin/verify_cases.dll",
        include_bytes!("../../corpus/bin/verify_cases.dll"),
    ),
    (
        "corpus/bin/type_cases.dll",
        include_bytes!("../../corpus/bin/type_cases.dll"),
    ),
    (
        "corpus/bin/control_flow.exe",
        include_bytes!("../../corpus/bin/control_flow.exe"),
    ),
    (
        "corpus/bin/control_flow.debug.exe",
        include_bytes!("../../corpus/bin/control_flow.debug.exe"),
    ),
    (
        "corpus/bin/features.exe",
        include_bytes!("../../corpus/bin/features.exe"),
    ),
    (
        "corpus/bin/features.debug.exe",
        include_bytes!("../../corpus/bin/features.debug.exe"),
    ),
    (
        "corpus/bin/unsafe_numeric.exe",
        include_bytes!("../../corpus/bin/unsafe_numeric.exe"),
    ),
    (
        "corpus/bin/unsafe_numeric.debug.exe",
        include_bytes!("../../corpus/bin/unsafe_numeric.debug.exe"),
    ),
];

/// The threads a run asks for: `requested`, or one per available core for 0.
pub fn threads_for(requested: usize) -> usize {
    match requested {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
}

/// Runs `work` over every input on `threads` threads (each with a `state` of its own, made
/// once and kept from one input to the next), the largest inputs first so that the last to
/// finish is a small one, and hands each result to `done` on the calling thread in input
/// order, as soon as those before it are done. With one thread it is a plain loop.
pub(crate) fn each_input<S, R: Send>(
    inputs: &[Input],
    threads: usize,
    state: impl Fn() -> S + Sync,
    work: impl Fn(&mut S, &Input) -> R + Sync,
    mut done: impl FnMut(usize, R),
) {
    let threads = threads.min(inputs.len()).max(1);
    // The disk starts on every file now, in the order they will be read.
    let prefetch = |order: &[usize]| {
        let files = order.iter().filter_map(|&i| match &inputs[i] {
            Input::File { path, .. } => Some(path.as_path()),
            Input::Embedded { .. } | Input::Memory { .. } => None,
        });
        crate::fsio::prefetch(files);
    };
    if threads == 1 {
        let mut s = state();
        let order: Vec<usize> = (0..inputs.len()).collect();
        std::thread::scope(|scope| {
            if inputs.len() > 1 {
                scope.spawn(|| prefetch(&order));
            }
            for (i, input) in inputs.iter().enumerate() {
                done(i, work(&mut s, input));
            }
        });
        return;
    }
    let sizes: Vec<u64> = inputs.iter().map(Input::size).collect();
    let mut order: Vec<usize> = (0..inputs.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(sizes[i]));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let (sent, results) = std::sync::mpsc::channel::<(usize, R)>();
    let (order, next, state, work) = (&order, &next, &state, &work);
    std::thread::scope(|scope| {
        scope.spawn(move || prefetch(order));
        for _ in 0..threads {
            let sent = sent.clone();
            scope.spawn(move || {
                let mut s = state();
                loop {
                    let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(&i) = order.get(k) else { break };
                    if sent.send((i, work(&mut s, &inputs[i]))).is_err() {
                        break;
                    }
                }
            });
        }
        drop(sent);
        // A result that arrives early waits for those before it.
        let mut waiting = std::collections::BTreeMap::new();
        let mut due = 0;
        for (i, r) in results {
            waiting.insert(i, r);
            while let Some(r) = waiting.remove(&due) {
                done(due, r);
                due += 1;
            }
        }
    });
}

/// Directories of system assemblies searched by the default run, when present.
pub fn system_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let mono = PathBuf::from("/usr/lib/mono/4.5");
    if mono.is_dir() {
        dirs.push(mono.clone());
    }
    // The newest .NET shared framework, where a .NET SDK or runtime is installed (else the
    // CoreCLR that scripts/setup.sh installs).
    for root in [
        "/usr/share/dotnet",
        "/usr/lib/dotnet",
        "/usr/local/share/dotnet",
    ] {
        let shared = Path::new(root).join("shared/Microsoft.NETCore.App");
        if let Ok(entries) = std::fs::read_dir(&shared) {
            let mut versions: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_dir())
                .collect();
            versions.sort();
            if let Some(newest) = versions.pop() {
                dirs.push(newest);
                break;
            }
        }
    }
    let has_framework = dirs.last().is_some_and(|d| d != &mono);
    if !has_framework && let Some(framework) = crate::harness::runtime::coreclr_framework_dir() {
        dirs.push(framework);
    }
    dirs
}

/// One assembly to read: a file, or one of the embedded ones.
#[derive(Clone, Debug)]
pub enum Input {
    /// A file on disk. `named` is true when the user named it (rather than a directory scan
    /// finding it): a named file that is not a .NET assembly is an error, not a skip.
    File {
        /// The path as given or as found by the scan.
        path: PathBuf,
        /// The user named this file.
        named: bool,
    },
    /// An assembly built into the binary (the project's own corpus).
    Embedded {
        /// Its file name.
        name: &'static str,
        /// The whole image.
        bytes: &'static [u8],
    },
    /// An assembly in memory, e.g. one a rewriter just produced and has not written yet.
    Memory {
        /// How reports name it (a file name, typically).
        name: String,
        /// The whole image.
        bytes: std::sync::Arc<[u8]>,
    },
}

impl Input {
    /// A file the user named.
    pub fn named(path: impl Into<PathBuf>) -> Input {
        Input::File {
            path: path.into(),
            named: true,
        }
    }

    /// An assembly in memory, named `name` in reports.
    pub fn memory(name: impl Into<String>, bytes: impl Into<std::sync::Arc<[u8]>>) -> Input {
        Input::Memory {
            name: name.into(),
            bytes: bytes.into(),
        }
    }

    /// A file found by scanning a directory.
    pub fn found(path: impl Into<PathBuf>) -> Input {
        Input::File {
            path: path.into(),
            named: false,
        }
    }

    /// How reports name the input: the path, or the embedded file name with `(embedded)`.
    pub fn name(&self) -> String {
        match self {
            Input::File { path, .. } => path.display().to_string(),
            Input::Embedded { name, .. } => format!("{name} (embedded)"),
            Input::Memory { name, .. } => format!("{name} (in memory)"),
        }
    }

    /// Whether a reason not to read this input as an assembly is an error of the run (the
    /// user named it, or it is built in) rather than a skip of a scan.
    pub fn must_be_assembly(&self) -> bool {
        match self {
            Input::File { named, .. } => *named,
            Input::Embedded { .. } | Input::Memory { .. } => true,
        }
    }

    /// Its size in bytes, as far as it can be told without reading it (0 for a file that
    /// cannot be looked at): what runs over many inputs schedule the largest first by.
    pub fn size(&self) -> u64 {
        match self {
            Input::File { path, .. } => std::fs::metadata(path).map_or(0, |m| m.len()),
            Input::Embedded { bytes, .. } => bytes.len() as u64,
            Input::Memory { bytes, .. } => bytes.len() as u64,
        }
    }

    /// Opens the image (memory-mapped for files; only regular files are opened).
    pub fn open(&self) -> Result<Image<'static>, ImageError> {
        match self {
            Input::File { path, .. } => Image::open(path),
            Input::Embedded { bytes, .. } => Image::parse(bytes),
            Input::Memory { bytes, .. } => Image::from_shared(bytes.clone()),
        }
    }
}

/// What a scan of the named paths found: the assembly files to read, and every entry that could
/// not be looked at (a path that does not exist, a directory that cannot be listed, something
/// that is not a regular file), each with its path and reason. A problem never stops the scan.
#[derive(Clone, Debug, Default)]
pub struct Discovery {
    /// The files to read: named files first-come, then each directory's finds in sorted order.
    pub inputs: Vec<Input>,
    /// Entries that could not be looked at, with the reason.
    pub problems: Vec<Skipped>,
}

/// Expands paths into assembly files: directories are searched recursively for `.dll` and `.exe`
/// files, in sorted order (symbolic links to directories are not followed); files are taken as
/// given and marked as named.
pub fn discover_all(paths: &[PathBuf]) -> Discovery {
    let mut d = Discovery::default();
    for p in paths {
        match std::fs::metadata(p) {
            Ok(meta) if meta.is_dir() => walk(p, &mut d),
            Ok(_) => d.inputs.push(Input::named(p)),
            Err(e) => d.problem(p, e.to_string()),
        }
    }
    d
}

impl Discovery {
    fn problem(&mut self, path: &Path, reason: String) {
        self.problems.push(Skipped {
            path: path.display().to_string(),
            reason,
        });
    }
}

/// [`discover_all`] for callers that want all or nothing: the files, or an error naming every
/// entry that could not be looked at.
pub fn discover(paths: &[PathBuf]) -> std::io::Result<Vec<PathBuf>> {
    let d = discover_all(paths);
    if !d.problems.is_empty() {
        let all: Vec<String> = d
            .problems
            .iter()
            .map(|p| format!("{}: {}", p.path, p.reason))
            .collect();
        return Err(std::io::Error::other(all.join("; ")));
    }
    Ok(d.inputs
        .into_iter()
        .filter_map(|i| match i {
            Input::File { path, .. } => Some(path),
            Input::Embedded { .. } | Input::Memory { .. } => None,
        })
        .collect())
}

fn walk(dir: &Path, d: &mut Discovery) {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => return d.problem(dir, e.to_string()),
    };
    let mut paths = Vec::new();
    for entry in entries {
        match entry {
            Ok(e) => paths.push(e.path()),
            Err(e) => d.problem(dir, e.to_string()),
        }
    }
    paths.sort();
    for path in paths {
        // Symlinked directories are not followed, so a cycle cannot loop forever.
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(m) => m,
            Err(e) => {
                d.problem(&path, e.to_string());
                continue;
            }
        };
        if meta.is_dir() {
            walk(&path, d);
        } else if is_assembly_name(&path) {
            // A FIFO or device named `.dll` would hang a read: report it instead.
            match crate::fsio::regular_file_reason(&path) {
                Ok(()) => d.inputs.push(Input::found(path)),
                Err(reason) => d.problem(&path, reason),
            }
        }
    }
}

fn is_assembly_name(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("dll") || e.eq_ignore_ascii_case("exe"))
}

/// A file that was not read as an assembly, and why.
#[derive(Clone, Debug, Serialize)]
pub struct Skipped {
    /// The path (or embedded name) as reports show it.
    pub path: String,
    /// Why: the reader's or the file system's error text.
    pub reason: String,
}
