//! The PE container: headers and sections through goblin, RVA mapping, and the CLI header
//! (ECMA-335 II.25.3.3).

use goblin::pe::options::{ParseMode, ParseOptions};

use super::error::ImageError;
use super::read::{le_u16, le_u32};

/// Data directory index of the CLI header.
pub const CLI_HEADER_DIRECTORY: usize = 14;

/// A section's place in memory and in the file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Section {
    /// Name from the section header (at most 8 bytes), trailing NULs removed, lossily UTF-8.
    pub name: String,
    /// VirtualAddress: RVA of the section's first byte in memory.
    pub virtual_address: u32,
    /// VirtualSize: bytes the section occupies in memory (0 from some linkers: then the raw
    /// size counts).
    pub virtual_size: u32,
    /// PointerToRawData: file offset of the section's data.
    pub raw_offset: u32,
    /// SizeOfRawData: bytes of the section's data in the file (a multiple of FileAlignment).
    pub raw_size: u32,
    /// Characteristics: `IMAGE_SCN_*` flags.
    pub characteristics: u32,
}

impl Section {
    /// Bytes of the section present in the file: the raw data, cut to the virtual size when
    /// that is smaller (the loader maps no more), and to the file's end.
    pub fn file_span(&self, file_len: usize) -> (u64, u64) {
        let mut len = u64::from(self.raw_size);
        if self.virtual_size != 0 {
            len = len.min(u64::from(self.virtual_size));
        }
        let start = u64::from(self.raw_offset);
        let end = (start + len).min(file_len as u64);
        (start, end.max(start))
    }
}

/// RVA and size pair.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct DataDir {
    /// RVA of the data (a file offset for the certificate table); 0 when absent.
    pub rva: u32,
    /// Size of the data in bytes.
    pub size: u32,
}

/// The CLI header (COR20, II.25.3.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct CliHeader {
    /// File offset of the header.
    pub offset: usize,
    /// Cb: size of the header in bytes (at least 72, checked).
    pub cb: u32,
    /// MajorRuntimeVersion: the runtime version the image needs, major part (2 in practice).
    pub major_runtime_version: u16,
    /// MinorRuntimeVersion: the minor part (0 in ECMA-335, 5 from most compilers).
    pub minor_runtime_version: u16,
    /// MetaData: RVA and size of the metadata root and its streams (II.24).
    pub metadata: DataDir,
    /// Flags: runtime flags (II.25.3.3.1), e.g. ILONLY 0x1, STRONGNAMESIGNED 0x8.
    pub flags: u32,
    /// Entry point: a MethodDef/File token, or an RVA when flags has NATIVE_ENTRYPOINT (0x10).
    pub entry_point_token: u32,
    /// Resources: RVA and size of the managed resources (ManifestResource offsets are relative
    /// to it).
    pub resources: DataDir,
    /// StrongNameSignature: RVA and size of the strong-name signature, which any change to the
    /// signed bytes invalidates.
    pub strong_name_signature: DataDir,
    /// CodeManagerTable: ECMA-335 says 0.
    pub code_manager_table: DataDir,
    /// VTableFixups: RVA and size of the vtable fix-up array (mixed-mode images).
    pub vtable_fixups: DataDir,
    /// ExportAddressTableJumps: ECMA-335 says 0.
    pub export_address_table_jumps: DataDir,
    /// ManagedNativeHeader: ECMA-335 says 0; ReadyToRun images point it at their native header.
    pub managed_native_header: DataDir,
}

/// What the reader keeps of the PE container.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PeInfo {
    /// A PE32+ optional header (64-bit layout), rather than PE32.
    pub is_64: bool,
    /// The COFF header's Machine (`IMAGE_FILE_MACHINE_*`; 0x14C for AnyCPU/x86).
    pub machine: u16,
    /// The section table, in file order.
    pub sections: Vec<Section>,
    /// The optional header's data directories by index (II.25.2.3.3), as many as it declares
    /// (at most 16). Index 4, the certificate table, holds a file offset, not an RVA.
    pub directories: Vec<DataDir>,
    /// SizeOfHeaders: the file bytes before the first section.
    pub size_of_headers: u32,
    /// The CLI header the directory at [`CLI_HEADER_DIRECTORY`] points at.
    pub cli: CliHeader,
    /// Where the header fields are in the file, for a writer that updates them.
    #[serde(skip)]
    pub layout: HeaderLayout,
}

/// File offsets and values of the PE header fields a writer reads or updates, as the reader
/// found them. Offsets are where the fields are meant to be; whether the file holds them there
/// (a section table cut by the end of the file) is the writer's check.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeaderLayout {
    /// The COFF header (after the `PE\0\0` signature at `e_lfanew`).
    pub coff: usize,
    /// The optional header.
    pub optional: usize,
    /// The section table (after the optional header's declared size).
    pub sections_at: usize,
    /// NumberOfSections, as the COFF header declares it (the table may hold fewer).
    pub section_count: u16,
    /// The data directories.
    pub directories_at: usize,
    /// NumberOfRvaAndSizes: data directories the header declares.
    pub directory_count: u32,
    /// FileAlignment.
    pub file_alignment: u32,
    /// SectionAlignment.
    pub section_alignment: u32,
    /// The CheckSum field.
    pub checksum_offset: usize,
}

/// Size of the COFF file header (II.25.2.2).
pub(crate) const COFF_HEADER_SIZE: usize = 20;

/// Data directory index of the certificate (Authenticode) table, whose address is a file
/// offset.
pub const CERTIFICATE_DIRECTORY: usize = 4;

/// Data directory index of the base relocation table.
pub const BASE_RELOCATION_DIRECTORY: usize = 5;

/// Data directory index of the debug directory.
pub const DEBUG_DIRECTORY: usize = 6;

/// Size of one debug directory entry (IMAGE_DEBUG_DIRECTORY): SizeOfData at 16,
/// AddressOfRawData at 20, PointerToRawData at 24.
pub const DEBUG_ENTRY_SIZE: usize = 28;

impl CliHeader {
    /// The header's data directories (II.25.3.3) in header order, each named for messages.
    pub fn directories(&self) -> [(&'static str, DataDir); 7] {
        [
            ("CLI metadata", self.metadata),
            ("CLI resources", self.resources),
            ("strong-name signature", self.strong_name_signature),
            ("code manager table", self.code_manager_table),
            ("vtable fixups", self.vtable_fixups),
            (
                "export address table jumps",
                self.export_address_table_jumps,
            ),
            (
                "managed native (ReadyToRun) header",
                self.managed_native_header,
            ),
        ]
    }
}

impl PeInfo {
    /// Parses the PE headers, the section table and the CLI header of `file`.
    /// [`ImageError::NotDotNet`] when the CLI header directory is empty.
    pub fn parse(file: &[u8]) -> Result<Self, ImageError> {
        // Only headers and sections matter here; skip the directories goblin would otherwise
        // resolve (imports, resources, certificates, TLS) and tolerate oddities in the rest.
        let mut opts = ParseOptions::default();
        opts.parse_attribute_certificates = false;
        opts.parse_tls_data = false;
        opts.parse_resources = false;
        opts.parse_imports = false;
        opts.parse_mode = ParseMode::Permissive;
        let pe = goblin::pe::PE::parse_with_opts(file, &opts)
            .map_err(|e| ImageError::Pe(super::error::PeError(e)))?;
        let optional = pe
            .header
            .optional_header
            .ok_or(ImageError::NoOptionalHeader)?;
        let sections = pe
            .sections
            .iter()
            .map(|s| Section {
                name: String::from_utf8_lossy(&s.name)
                    .trim_end_matches('\0')
                    .to_string(),
                virtual_address: s.virtual_address,
                virtual_size: s.virtual_size,
                raw_offset: s.pointer_to_raw_data,
                raw_size: s.size_of_raw_data,
                characteristics: s.characteristics,
            })
            .collect::<Vec<_>>();
        let directories = optional
            .data_directories
            .data_directories
            .iter()
            .map(|d| {
                d.map_or(DataDir::default(), |(_, d)| DataDir {
                    rva: d.virtual_address,
                    size: d.size,
                })
            })
            .collect();
        let dir = optional
            .data_directories
            .data_directories
            .get(CLI_HEADER_DIRECTORY)
            .copied()
            .flatten()
            .map(|(_, d)| d)
            .filter(|d| d.virtual_address != 0)
            .ok_or(ImageError::NotDotNet)?;

        let coff = pe.header.dos_header.pe_pointer as usize + 4;
        let optional_at = coff + COFF_HEADER_SIZE;
        let windows = &optional.windows_fields;
        let layout = HeaderLayout {
            coff,
            optional: optional_at,
            sections_at: optional_at + usize::from(pe.header.coff_header.size_of_optional_header),
            section_count: pe.header.coff_header.number_of_sections,
            directories_at: optional_at + if pe.is_64 { 112 } else { 96 },
            directory_count: windows.number_of_rva_and_sizes,
            file_alignment: windows.file_alignment,
            section_alignment: windows.section_alignment,
            checksum_offset: optional_at + 64,
        };
        let mut info = PeInfo {
            layout,
            is_64: pe.is_64,
            machine: pe.header.coff_header.machine,
            sections,
            directories,
            size_of_headers: optional.windows_fields.size_of_headers,
            cli: CliHeader {
                offset: 0,
                cb: 0,
                major_runtime_version: 0,
                minor_runtime_version: 0,
                metadata: DataDir::default(),
                flags: 0,
                entry_point_token: 0,
                resources: DataDir::default(),
                strong_name_signature: DataDir::default(),
                code_manager_table: DataDir::default(),
                vtable_fixups: DataDir::default(),
                export_address_table_jumps: DataDir::default(),
                managed_native_header: DataDir::default(),
            },
        };
        info.cli = info.parse_cli_header(file, dir.virtual_address)?;
        Ok(info)
    }

    fn parse_cli_header(&self, file: &[u8], rva: u32) -> Result<CliHeader, ImageError> {
        let at = self
            .rva_to_offset(rva, file.len())
            .ok_or(ImageError::RvaNotMapped {
                what: "CLI header",
                rva,
            })?;
        let h = file
            .get(at..at.saturating_add(72))
            .ok_or(ImageError::Truncated {
                what: "CLI header",
                offset: at,
                needed: 72,
            })?;
        let u32_at = |o| le_u32(h, o).unwrap_or(0);
        let dir_at = |o| DataDir {
            rva: u32_at(o),
            size: u32_at(o + 4),
        };
        let cb = u32_at(0);
        if cb < 72 {
            return Err(ImageError::BadCliHeader { offset: at, cb });
        }
        Ok(CliHeader {
            offset: at,
            cb,
            major_runtime_version: le_u16(h, 4).unwrap_or(0),
            minor_runtime_version: le_u16(h, 6).unwrap_or(0),
            metadata: dir_at(8),
            flags: u32_at(16),
            entry_point_token: u32_at(20),
            resources: dir_at(24),
            strong_name_signature: dir_at(32),
            code_manager_table: dir_at(40),
            vtable_fixups: dir_at(48),
            export_address_table_jumps: dir_at(56),
            managed_native_header: dir_at(64),
        })
    }

    /// The section holding `rva` in its file data.
    pub fn section_of(&self, rva: u32, file_len: usize) -> Option<&Section> {
        self.sections.iter().find(|s| {
            let (start, end) = s.file_span(file_len);
            rva >= s.virtual_address && u64::from(rva - s.virtual_address) < end - start
        })
    }

    /// Whether `size` bytes at `rva` lie wholly in one section's file data (or wholly in the
    /// headers, where a few directories may live).
    pub fn range_in_file(&self, rva: u32, size: u32, file_len: usize) -> bool {
        let end = u64::from(rva) + u64::from(size);
        if end <= u64::from(self.size_of_headers) && end <= file_len as u64 {
            return true;
        }
        self.section_of(rva, file_len).is_some_and(|s| {
            let (start, data_end) = s.file_span(file_len);
            end - u64::from(s.virtual_address) <= data_end - start
        })
    }

    /// File offset of `rva`, when a section's file data holds it.
    pub fn rva_to_offset(&self, rva: u32, file_len: usize) -> Option<usize> {
        let s = self.section_of(rva, file_len)?;
        Some(s.raw_offset as usize + (rva - s.virtual_address) as usize)
    }

    /// File range from `rva` to the end of its section's file data.
    pub fn rva_to_section_tail(&self, rva: u32, file_len: usize) -> Option<(usize, usize)> {
        let s = self.section_of(rva, file_len)?;
        let (start, end) = s.file_span(file_len);
        let at = start + u64::from(rva - s.virtual_address);
        Some((at as usize, end as usize))
    }
}
