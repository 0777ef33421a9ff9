//! Writes the hostile-image regression corpus (`corpus/regressions/images/`): one small file per
//! defect that once made a command lose data, hang or report "clean" on something it could not
//! read, each derived from the project's own assemblies. `tests/it/hostile_images.rs` replays them.
//!
//! `cargo run --example hostile_images [OUT_DIR]` (default: `corpus/regressions/images`).
//! Inputs that cannot live in git (a FIFO, a 1 GiB sparse file) are made by the tests.

use ilcheck::image::{Image, Table};
use std::path::PathBuf;

fn u32_at(b: &[u8], at: usize) -> usize {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]) as usize
}

fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// File offsets of the PE optional header and of the section table, and the section count.
fn pe_layout(b: &[u8]) -> (usize, usize, usize) {
    let pe = u32_at(b, 0x3c);
    let count = u16::from_le_bytes([b[pe + 6], b[pe + 7]]) as usize;
    let optional_size = u16::from_le_bytes([b[pe + 20], b[pe + 21]]) as usize;
    (pe + 24, pe + 24 + optional_size, count)
}

/// File offset of data directory `index` (PE32: after 96 bytes of optional header).
fn directory_at(b: &[u8], index: usize) -> usize {
    let (optional, _, _) = pe_layout(b);
    optional + 96 + index * 8
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let out = std::env::args()
        .nth(1)
        .map_or_else(|| root.join("corpus/regressions/images"), PathBuf::from);
    std::fs::create_dir_all(&out)?;
    let cf = std::fs::read(root.join("corpus/bin/control_flow.exe"))?;
    let cases = std::fs::read(root.join("corpus/bin/verify_cases.dll"))?;
    let mut files: Vec<(&str, Vec<u8>)> = Vec::new();

    files.push(("empty.dll", Vec::new()));
    files.push(("text.dll", b"not an assembly\n".to_vec()));
    // An ELF header: a native library with a .dll name.
    let mut elf = vec![0u8; 64];
    elf[..4].copy_from_slice(b"\x7fELF");
    elf[4] = 2;
    elf[5] = 1;
    elf[6] = 1;
    files.push(("elf.dll", elf));

    // A native PE: the CLI header directory removed.
    let mut native = cf.clone();
    let cli = directory_at(&native, 14);
    native[cli..cli + 8].fill(0);
    files.push(("native.dll", native));

    // Cut inside the metadata: the image cannot be read at all.
    files.push(("cut-in-metadata.exe", cf[..0x1800].to_vec()));
    // Cut inside .rsrc (file data 0x2c00..0x3000) and inside .reloc (0x3000..0x3200): the
    // metadata reads, the file is still damaged and mono refuses it.
    files.push(("cut-in-rsrc.exe", cf[..0x2d00].to_vec()));
    files.push(("cut-in-reloc.exe", cf[..0x3100].to_vec()));

    // The resource directory runs past its section, and the strong-name signature directory
    // of the CLI header points to an RVA no section holds.
    let mut dirs = cf.clone();
    let res = directory_at(&dirs, 2);
    put_u32(&mut dirs, res + 4, 0x1000);
    let cli_rva = u32_at(&dirs, directory_at(&dirs, 14));
    let cli_at = Image::parse(&cf)?
        .rva_to_offset(cli_rva as u32)
        .ok_or("CLI header")?;
    put_u32(&mut dirs, cli_at + 32, 0x0007_0000);
    put_u32(&mut dirs, cli_at + 36, 128);
    files.push(("directories-outside.exe", dirs));

    // The last section (.reloc) at an RVA that is not 4-byte aligned, and no room after the
    // section table for another header: relocated bodies go to the grown last section, and
    // fat headers there must still land on 4-byte aligned RVAs.
    let mut unaligned = cf.clone();
    let (_, table, count) = pe_layout(&unaligned);
    let last = table + (count - 1) * 40;
    let va = u32_at(&unaligned, last + 12) as u32;
    put_u32(&mut unaligned, last + 12, va + 2);
    let reloc = directory_at(&unaligned, 5);
    put_u32(&mut unaligned, reloc, va + 2);
    unaligned[table + count * 40] = b'X';
    files.push(("unaligned-last-section.exe", unaligned.clone()));
    // The same, with the section's file data moved by 2 bytes too: RVA and file offset agree
    // modulo 4 again, so the last section can take aligned bodies.
    let raw = u32_at(&unaligned, last + 20);
    let mut both = unaligned[..raw].to_vec();
    both.extend_from_slice(&[0, 0]);
    both.extend_from_slice(&unaligned[raw..]);
    put_u32(&mut both, last + 20, raw as u32 + 2);
    files.push(("unaligned-last-section-and-data.exe", both));

    // A method whose name cannot be read (its #Strings index points past the heap): a baseline
    // must still match it to its original, by token.
    let mut unnamed = cases.clone();
    let image = Image::parse(&cases)?;
    let victim = image
        .methods()
        .find(|m| {
            m.full_name()
                .is_ok_and(|n| n.contains("_Invalid_StackUnderflow"))
        })
        .ok_or("no StackUnderflow case")?;
    let info = image.tables_header().info(Table::MethodDef);
    let (column, width) = info.column(3).ok_or("MethodDef name column")?;
    let at = info.offset + (victim.rid() as usize - 1) * info.row_size as usize + column;
    unnamed[at..at + width].fill(0xff);
    drop(image);
    files.push(("name-unreadable.dll", unnamed));

    for (name, bytes) in &files {
        std::fs::write(out.join(name), bytes)?;
    }
    println!("wrote {} files to {}", files.len(), out.display());
    Ok(())
}
