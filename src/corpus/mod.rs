//! Corpus runs: find assemblies, then round-trip ([`roundtrip`]) or verify ([`verify`]) every
//! method body, and count what was seen.
//!
//! The default corpus is the project's own assemblies (embedded in the binary, so the default
//! run works anywhere) plus system assemblies found in standard places.

mod roundtrip;
mod verify;

pub use roundtrip::*;
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

/// Directories of system assemblies searched by the default run, when present.
pub fn system_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let mono = PathBuf::from("/usr/lib/mono/4.5");
    if mono.is_dir() {
        dirs.push(mono);
    }
    // The newest .NET shared framework, where a .NET SDK or runtime is installed.
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
    dirs
}

/// One assembly to read: a file, or one of the embedded ones.
#[derive(Clone, Debug)]
pub enum Input {
    File(PathBuf),
    Embedded {
        name: &'static str,
        bytes: &'static [u8],
    },
}

impl Input {
    pub fn name(&self) -> String {
        match self {
            Input::File(p) => p.display().to_string(),
            Input::Embedded { name, .. } => format!("{name} (embedded)"),
        }
    }

    /// Opens the image (memory-mapped for files).
    pub fn open(&self) -> Result<Image<'static>, ImageError> {
        match self {
            Input::File(p) => Image::open(p),
            Input::Embedded { bytes, .. } => Image::parse(bytes),
        }
    }
}

/// Expands paths into assembly files: directories are searched recursively for `.dll` and `.exe`
/// files, in sorted order; files are taken as given.
pub fn discover(paths: &[PathBuf]) -> std::io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in paths {
        let meta = std::fs::metadata(p)
            .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", p.display())))?;
        if meta.is_dir() {
            walk(p, &mut out)?;
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for path in entries {
        // Symlinked directories are not followed, so a cycle cannot loop forever.
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            walk(&path, out)?;
        } else if is_assembly_name(&path) {
            out.push(path);
        }
    }
    Ok(())
}

fn is_assembly_name(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("dll") || e.eq_ignore_ascii_case("exe"))
}

/// A file that was not read as an assembly, and why.
#[derive(Clone, Debug, Serialize)]
pub struct Skipped {
    pub path: String,
    pub reason: String,
}
