//! Image integrity: what makes a file that parses still unloadable or damaged. Sections whose
//! raw data runs past the end of the file (a cut file), and directories — the PE header's
//! (resources, relocations, debug, certificates, …) and the CLI header's (resources, strong-name
//! signature, vtable fixups, the ReadyToRun header, …) — that point outside the file data of
//! the section holding them. The runtime refuses or misreads such images; a verifier that
//! reports "clean" on them would be wrong.

use super::Image;
use super::pe::{
    CERTIFICATE_DIRECTORY, CLI_HEADER_DIRECTORY, DEBUG_DIRECTORY, DEBUG_ENTRY_SIZE, DataDir,
};

/// The kinds of integrity finding, each a stable code name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IntegrityCode {
    /// A section's raw data runs past the end of the file (PE/COFF section table:
    /// PointerToRawData + SizeOfRawData).
    ImageTruncated,
    /// A data directory's range does not lie in the file data of one section (PE/COFF optional
    /// header data directories; ECMA-335 II.25.2.3.3 and II.25.3.3).
    DirectoryOutOfBounds,
}

impl IntegrityCode {
    /// Every code, for tables of rules.
    pub const ALL: [IntegrityCode; 2] = [
        IntegrityCode::ImageTruncated,
        IntegrityCode::DirectoryOutOfBounds,
    ];

    /// The stable code name.
    pub fn name(self) -> &'static str {
        match self {
            IntegrityCode::ImageTruncated => "ImageTruncated",
            IntegrityCode::DirectoryOutOfBounds => "DirectoryOutOfBounds",
        }
    }

    /// The code whose name is `name`.
    pub fn from_name(name: &str) -> Option<IntegrityCode> {
        IntegrityCode::ALL.into_iter().find(|c| c.name() == name)
    }

    /// What the rule says, with its reference.
    pub fn description(self) -> &'static str {
        match self {
            IntegrityCode::ImageTruncated => {
                "A section's raw data must lie within the file (PE/COFF section table; ECMA-335 II.25.3): the file is cut short."
            }
            IntegrityCode::DirectoryOutOfBounds => {
                "A data directory must lie within the file data of the section that holds it (PE/COFF data directories; ECMA-335 II.25.2.3.3, II.25.3.3)."
            }
        }
    }
}

/// One integrity finding: its code, the file offset it concerns, and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IntegrityFinding {
    /// The rule broken.
    pub code: IntegrityCode,
    /// File offset of the header field or data at fault.
    pub offset: u64,
    /// What is wrong, naming the section or directory and the ranges involved.
    pub message: String,
}

/// Names of the PE data directories by index.
const PE_DIRECTORY_NAMES: [&str; 16] = [
    "export table",
    "import table",
    "resource table",
    "exception table",
    "certificate table",
    "base relocation table",
    "debug directory",
    "architecture data",
    "global pointer",
    "TLS table",
    "load configuration table",
    "bound import table",
    "import address table",
    "delay import descriptor",
    "CLI header",
    "reserved directory",
];

/// Every integrity finding of `image`, in header order.
pub fn check(image: &Image<'_>) -> Vec<IntegrityFinding> {
    let file = image.bytes();
    let len = file.len();
    let pe = image.pe();
    let mut out = Vec::new();
    for s in &pe.sections {
        let end = u64::from(s.raw_offset) + u64::from(s.raw_size);
        if s.raw_size != 0 && end > len as u64 {
            out.push(IntegrityFinding {
                code: IntegrityCode::ImageTruncated,
                offset: u64::from(s.raw_offset),
                message: format!(
                    "section {} has raw data to offset {end:#x}, but the file ends at {len:#x} ({} bytes missing)",
                    s.name,
                    end - len as u64
                ),
            });
        }
    }
    let mut directory = |what: &str, d: DataDir| {
        if d.rva != 0 && d.size != 0 && !pe.range_in_file(d.rva, d.size, len) {
            out.push(IntegrityFinding {
                code: IntegrityCode::DirectoryOutOfBounds,
                offset: pe.rva_to_offset(d.rva, len).unwrap_or(0) as u64,
                message: format!(
                    "{what} (RVA {:#x}, {} bytes) does not lie in the file data of a section",
                    d.rva, d.size
                ),
            });
        }
    };
    for (i, &d) in pe.directories.iter().enumerate() {
        // The CLI header was found and read by the parser already.
        if i != CERTIFICATE_DIRECTORY && i != CLI_HEADER_DIRECTORY {
            directory(PE_DIRECTORY_NAMES.get(i).copied().unwrap_or("directory"), d);
        }
    }
    let cli = image.cli_header();
    for (what, d) in cli.directories() {
        directory(what, d);
    }
    if let Some(&cert) = pe.directories.get(CERTIFICATE_DIRECTORY) {
        let end = u64::from(cert.rva) + u64::from(cert.size);
        if cert.rva != 0 && cert.size != 0 && end > len as u64 {
            out.push(IntegrityFinding {
                code: IntegrityCode::DirectoryOutOfBounds,
                offset: u64::from(cert.rva),
                message: format!(
                    "certificate table (file offset {:#x}, {} bytes) runs past the end of the file at {len:#x}",
                    cert.rva, cert.size
                ),
            });
        }
    }
    debug_entries(image, &mut out);
    out
}

/// Each debug directory entry's raw data (PointerToRawData, SizeOfData) must lie in the file.
fn debug_entries(image: &Image<'_>, out: &mut Vec<IntegrityFinding>) {
    let file = image.bytes();
    let Some(&d) = image.pe().directories.get(DEBUG_DIRECTORY) else {
        return;
    };
    if d.rva == 0 || !image.pe().range_in_file(d.rva, d.size, file.len()) {
        return;
    }
    let Some(at) = image.rva_to_offset(d.rva) else {
        return;
    };
    let entries = file.get(at..at + d.size as usize).unwrap_or_default();
    for (i, entry) in entries.chunks_exact(DEBUG_ENTRY_SIZE).enumerate() {
        let field =
            |o: usize| u32::from_le_bytes([entry[o], entry[o + 1], entry[o + 2], entry[o + 3]]);
        let (size, pointer) = (field(16), field(24));
        let end = u64::from(pointer) + u64::from(size);
        if pointer != 0 && size != 0 && end > file.len() as u64 {
            out.push(IntegrityFinding {
                code: IntegrityCode::DirectoryOutOfBounds,
                offset: (at + i * DEBUG_ENTRY_SIZE) as u64,
                message: format!(
                    "debug directory entry {i}: data at file offset {pointer:#x} ({size} bytes) runs past the end of the file at {:#x}",
                    file.len()
                ),
            });
        }
    }
}
