//! The patched-assembly writer: identity, relocation checked by running the output under mono
//! and pedump, shared bodies, certificates, checksums, hostile input, and mono's class
//! libraries.

use crate::support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use ilcheck::body::{Body, ClauseKind};
use ilcheck::image::writer::{self, ImageWriter, Placement, RelocationTarget, WriteError};
use ilcheck::image::{Image, Table};

fn corpus_bin() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/bin")
}

fn corpus_exes() -> Vec<PathBuf> {
    let v = support::files_with_extension(&corpus_bin(), "exe");
    assert!(!v.is_empty(), "no corpus executables");
    v
}

fn out_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("writer-{name}"))
}

/// The same body with `n` `nop`s before the code: displacements are relative, so branches stay
/// right; clause offsets (and filter offsets) are absolute and shift by `n`.
fn nop_prefixed(body: &[u8], n: usize) -> Vec<u8> {
    let body = Body::parse(body).expect("original body parses");
    let mut parts = body.parts();
    let mut code = vec![0u8; n];
    code.extend_from_slice(body.code);
    parts.code = &code;
    let shift = n as u32;
    for c in &mut parts.clauses {
        c.try_offset += shift;
        c.handler_offset += shift;
        if c.kind() == ClauseKind::Filter {
            c.class_or_filter += shift;
        }
    }
    let mut out = Vec::new();
    parts.encode_canonical(&mut out).expect("encodes");
    out
}

/// Every MethodDef's body in `out` is the one asked for, or the original when not replaced.
fn assert_bodies(original: &Image, out: &[u8], replaced: &HashMap<u32, Vec<u8>>) {
    let patched = Image::parse(out).expect("output re-reads");
    assert_eq!(patched.method_count(), original.method_count());
    for (old, new) in original.methods().zip(patched.methods()) {
        let rid = old.rid();
        match replaced.get(&rid) {
            Some(b) => assert_eq!(
                new.body().unwrap_or_else(|e| panic!("rid {rid}: {e}")),
                b.as_slice(),
                "rid {rid}"
            ),
            None => match old.body() {
                Ok(b) => assert_eq!(new.body().unwrap(), b, "rid {rid} untouched"),
                Err(_) => assert_eq!(new.rva(), old.rva(), "rid {rid} untouched"),
            },
        }
    }
}

/// pedump's messages with IL offsets removed (a nop prefix shifts them), sorted.
fn pedump(path: &Path) -> Vec<String> {
    let out = support::run(
        Command::new("pedump")
            .args(["--verify", "error,code"])
            .arg(path),
    );
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let mut lines: Vec<String> = text
        .lines()
        .map(|l| {
            l.split(' ')
                .map(|w| {
                    let hex = w.trim_start_matches("0x").trim_end_matches('x');
                    if !hex.is_empty()
                        && w.len() > 1
                        && (w.starts_with("0x") || w.ends_with('x'))
                        && hex.chars().all(|c| c.is_ascii_hexdigit())
                    {
                        "<off>"
                    } else {
                        w
                    }
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    lines.sort();
    lines
}

fn run_mono(path: &Path) -> String {
    let out = support::run(Command::new("mono").arg(path).env("MONO_ENV_OPTIONS", ""));
    assert!(
        out.success(),
        "{} ended with {}: {}",
        path.display(),
        out.describe(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

#[test]
fn identity_reproduces_the_input() {
    for path in corpus_exes().iter().chain([
        &corpus_bin().join("codec_shapes.dll"),
        &corpus_bin().join("verify_cases.dll"),
    ]) {
        let image = Image::open(path).unwrap();
        let mut w = ImageWriter::new(&image);
        for m in image.methods() {
            if let Ok(b) = m.body() {
                w.replace_body(m.rid(), b).unwrap();
            }
        }
        let patched = w.finish().unwrap();
        assert!(patched.bytes == image.bytes(), "{}", path.display());
        let s = &patched.summary;
        assert_eq!((s.relocated, s.modified, s.slack_bytes), (0, false, 0));
        assert_eq!(s.in_place, w.replaced());
        assert!(s.relocation_area.is_none());
        // Nothing replaced at all: also the input.
        assert!(ImageWriter::new(&image).finish().unwrap().bytes == image.bytes());
    }
}

#[test]
fn relocated_programs_run_under_mono_and_pedump_reports_nothing_new() {
    let have_mono = support::mono_tool("relocated_programs_run_under_mono", "mono");
    let have_pedump = support::mono_tool("relocated_programs_run_under_mono", "pedump");
    let (mut in_place, mut relocated) = (0, 0);
    let targets = [
        RelocationTarget::NewSection,
        RelocationTarget::GrowLastSection,
    ];
    for (path, target) in corpus_exes()
        .into_iter()
        .flat_map(|p| targets.map(|t| (p.clone(), t)))
    {
        let file_name = format!("{}-{target:?}", path.file_name().unwrap().to_string_lossy());
        let image = Image::open(&path).unwrap();
        let mut w = ImageWriter::new(&image);
        w.relocation_target(target);
        let mut replaced = HashMap::new();
        for m in image.methods() {
            let Ok(b) = m.body() else { continue };
            // A mix: own bytes (in place), one nop (in place when alignment padding before
            // the EH table absorbs it), several nops (relocated).
            let new = match m.rid() % 3 {
                0 => b.to_vec(),
                1 => nop_prefixed(b, 1),
                _ => nop_prefixed(b, 1 + m.rid() as usize % 7),
            };
            w.replace_body(m.rid(), new.clone()).unwrap();
            replaced.insert(m.rid(), new);
        }
        let patched = w.finish().unwrap();
        let s = &patched.summary;
        assert!(s.relocated > 0 && s.in_place > 0, "{file_name}: {s:?}");
        assert_eq!(s.in_place + s.relocated, replaced.len());
        let area = s.relocation_area.as_ref().unwrap();
        assert_eq!(area.appended, target == RelocationTarget::NewSection);
        assert_eq!(area.rva % 4, 0);
        if area.appended {
            assert_eq!((area.rva % 0x2000, area.raw_offset % 0x200), (0, 0));
        }
        for &(rid, p) in &patched.placements {
            if let Placement::Relocated { new_rva, .. } = p {
                let fat = replaced[&rid][0] & 3 == 3;
                assert!(!fat || new_rva % 4 == 0, "rid {rid} fat at {new_rva:#x}");
            }
        }
        in_place += s.in_place;
        relocated += s.relocated;
        assert_bodies(&image, &patched.bytes, &replaced);

        let out = out_path(&file_name);
        std::fs::write(&out, &patched.bytes).unwrap();
        if have_mono {
            let stem = file_name.split('.').next().unwrap();
            let expected = std::fs::read_to_string(
                Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("corpus/cs/{stem}.expected")),
            )
            .unwrap();
            assert_eq!(run_mono(&out), expected, "{file_name} under mono");
        }
        if have_pedump {
            assert_eq!(pedump(&out), pedump(&path), "{file_name}: pedump differs");
        }
    }
    eprintln!("corpus programs: {in_place} bodies in place, {relocated} relocated");
}

/// Every body of `image` grown by 1–5 `nop`s, given to a writer that may (or may not) put them
/// where the old bodies were.
fn grow_all(image: &Image, reuse: bool) -> (writer::PatchedImage, HashMap<u32, Vec<u8>>) {
    let mut w = ImageWriter::new(image);
    w.reuse_freed_space(reuse);
    let mut replaced = HashMap::new();
    for m in image.methods() {
        let Ok(b) = m.body() else { continue };
        let new = nop_prefixed(b, 1 + m.rid() as usize % 5);
        w.replace_body(m.rid(), new.clone()).unwrap();
        replaced.insert(m.rid(), new);
    }
    (w.finish().unwrap(), replaced)
}

#[test]
fn relocated_bodies_take_the_space_their_originals_leave() {
    let have_mono = support::mono_tool(
        "relocated_bodies_take_the_space_their_originals_leave",
        "mono",
    );
    let (mut reused, mut saved) = (0, 0);
    for path in corpus_exes() {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let image = Image::open(&path).unwrap();
        let (kept, replaced) = grow_all(&image, false);
        let (p, _) = grow_all(&image, true);
        let s = &p.summary;
        // Without reuse every relocated body's original keeps its bytes at its old RVA.
        assert_eq!(kept.summary.reused_bodies, 0, "{name}");
        for &(rid, pl) in &kept.placements {
            let Placement::Relocated { old_rva, .. } = pl else {
                continue;
            };
            let b = image.method(rid).unwrap().body().unwrap();
            let at = image.rva_to_offset(old_rva).unwrap();
            assert_eq!(&kept.bytes[at..at + b.len()], b, "{name}: rid {rid} kept");
        }
        // With reuse, most bodies go where old ones were, and the file is smaller for it.
        assert!(s.reused_bodies * 2 > s.relocated, "{name}: {s:?}");
        assert!(
            0 < s.reused_bytes && s.reused_bytes <= s.freed_bytes,
            "{name}: {s:?}"
        );
        let area =
            |p: &writer::PatchedImage| p.summary.relocation_area.as_ref().map_or(0, |a| a.size);
        assert!(area(&p) < area(&kept), "{name}: {s:?}");
        assert!(p.bytes.len() <= kept.bytes.len(), "{name}: {s:?}");
        assert_eq!(
            (s.in_place, s.relocated),
            (kept.summary.in_place, kept.summary.relocated)
        );
        assert_bodies(&image, &p.bytes, &replaced);
        // No two bodies share a byte, and those placed in freed space lie below the area.
        let area_rva = s.relocation_area.as_ref().map_or(u32::MAX, |a| a.rva);
        let mut spans: Vec<(u32, u32)> = p
            .placements
            .iter()
            .map(|&(rid, pl)| {
                let rva = match pl {
                    Placement::InPlace { rva } => rva,
                    Placement::Relocated { new_rva, .. } => new_rva,
                };
                (rva, rva + replaced[&rid].len() as u32)
            })
            .collect();
        let below = spans.iter().filter(|&&(rva, _)| rva < area_rva).count();
        assert_eq!(below, s.in_place + s.reused_bodies, "{name}");
        spans.sort_unstable();
        assert!(
            spans.windows(2).all(|w| w[0].1 <= w[1].0),
            "{name}: bodies overlap"
        );
        reused += s.reused_bodies;
        saved += kept.bytes.len() - p.bytes.len();
        if have_mono {
            let out = out_path(&format!("reused-{name}"));
            std::fs::write(&out, &p.bytes).unwrap();
            let stem = name.split('.').next().unwrap();
            let expected = std::fs::read_to_string(
                Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("corpus/cs/{stem}.expected")),
            )
            .unwrap();
            assert_eq!(run_mono(&out), expected, "{name} under mono");
        }
    }
    eprintln!("freed space: {reused} bodies placed where old ones were, {saved} bytes saved");
}

#[test]
fn a_freed_body_something_else_points_into_is_left_alone() {
    let bytes = std::fs::read(corpus_bin().join("features.exe")).unwrap();
    let image = Image::parse(&bytes).unwrap();
    let (p, _) = grow_all(&image, true);
    // The largest of the relocated bodies' originals.
    let (rva, len) = p
        .placements
        .iter()
        .filter_map(|&(rid, pl)| match pl {
            Placement::Relocated { old_rva, .. } => {
                Some((old_rva, image.method(rid).unwrap().body().unwrap().len()))
            }
            Placement::InPlace { .. } => None,
        })
        .max_by_key(|&(_, len)| len)
        .unwrap();
    let at = image.rva_to_offset(rva).unwrap();
    assert!(
        p.bytes[at..at + len] != bytes[at..at + len],
        "the largest body's space is reused when nothing points into it"
    );
    // The entry point (AddressOfEntryPoint, optional header + 16) made to point into it.
    let optional = optional_header(&bytes);
    let mut hostile = bytes.clone();
    hostile[optional + 16..optional + 20].copy_from_slice(&(rva + len as u32 / 2).to_le_bytes());
    let image = Image::parse(&hostile).unwrap();
    let (p, replaced) = grow_all(&image, true);
    assert!(p.summary.reused_bodies > 0);
    assert_eq!(
        &p.bytes[at..at + len],
        &hostile[at..at + len],
        "a body pointed into was reused"
    );
    assert_bodies(&image, &p.bytes, &replaced);
}

/// Copy of `features.exe` with MethodDef `b`'s RVA set to `a`'s, so the two share a body.
fn shared_image(a: u32, b: u32) -> Vec<u8> {
    let bytes = std::fs::read(corpus_bin().join("features.exe")).unwrap();
    let image = Image::parse(&bytes).unwrap();
    let info = *image.tables_header().info(Table::MethodDef);
    let (col, width) = info.column(0).unwrap();
    assert_eq!(width, 4);
    let rva = image.method(a).unwrap().rva();
    let at = info.offset + (b as usize - 1) * info.row_size as usize + col;
    let mut out = bytes.clone();
    out[at..at + 4].copy_from_slice(&rva.to_le_bytes());
    out
}

/// Two MethodDefs with bodies, in rid order.
fn two_with_bodies(image: &Image) -> (u32, u32) {
    let mut it = image
        .methods()
        .filter(|m| m.body().is_ok())
        .map(|m| m.rid());
    (it.next().unwrap(), it.next().unwrap())
}

#[test]
fn shared_bodies_are_never_changed_behind_a_sharer() {
    let probe = std::fs::read(corpus_bin().join("features.exe")).unwrap();
    let (a, b) = two_with_bodies(&Image::parse(&probe).unwrap());
    let bytes = shared_image(a, b);
    let image = Image::parse(&bytes).unwrap();
    let original = image.method(a).unwrap().body().unwrap().to_vec();
    let rva = image.method(a).unwrap().rva();
    assert_eq!(image.method(b).unwrap().rva(), rva);
    // Fits in place: the original bytes (what a no-op rewrite produces).
    let shorter = original.clone();
    let longer = nop_prefixed(&original, 2);

    // One sharer replaced: it moves, the other keeps the original at the old RVA.
    let mut w = ImageWriter::new(&image);
    w.replace_body(a, longer.clone()).unwrap();
    let p = w.finish().unwrap();
    assert_eq!(p.summary.relocation_reasons.shared, 1);
    assert_bodies(&image, &p.bytes, &HashMap::from([(a, longer.clone())]));
    assert_eq!(
        Image::parse(&p.bytes).unwrap().method(b).unwrap().rva(),
        rva
    );

    // Even a body that would fit is relocated while a sharer keeps the original.
    let mut w = ImageWriter::new(&image);
    w.replace_body(b, shorter.clone()).unwrap();
    let p = w.finish().unwrap();
    assert_eq!((p.summary.in_place, p.summary.relocated), (0, 1));

    // Both given the same bytes that fit: written once, in place, still shared.
    let mut w = ImageWriter::new(&image);
    w.replace_body(a, shorter.clone()).unwrap();
    w.replace_body(b, shorter.clone()).unwrap();
    let p = w.finish().unwrap();
    assert_eq!((p.summary.in_place, p.summary.relocated), (2, 0));

    // Both given the same longer bytes: one relocated copy, still shared.
    let mut w = ImageWriter::new(&image);
    w.replace_body(a, longer.clone()).unwrap();
    w.replace_body(b, longer.clone()).unwrap();
    let p = w.finish().unwrap();
    let out = Image::parse(&p.bytes).unwrap();
    assert_eq!(p.summary.relocated, 2);
    assert_eq!(
        out.method(a).unwrap().rva(),
        out.method(b).unwrap().rva(),
        "identical relocated sharers keep sharing"
    );

    // Different bytes: each gets its own.
    let other = nop_prefixed(&original, 3);
    let mut w = ImageWriter::new(&image);
    w.replace_body(a, longer.clone()).unwrap();
    w.replace_body(b, other.clone()).unwrap();
    let p = w.finish().unwrap();
    assert_eq!(p.summary.relocation_reasons.shared, 2);
    assert_bodies(&image, &p.bytes, &HashMap::from([(a, longer), (b, other)]));
}

#[test]
fn a_body_holding_another_methods_rva_is_not_overwritten() {
    let bytes = std::fs::read(corpus_bin().join("features.exe")).unwrap();
    let image = Image::parse(&bytes).unwrap();
    let a = image
        .methods()
        .find(|m| m.body().is_ok_and(|b| b.len() > 16))
        .unwrap();
    let b = image
        .methods()
        .find(|m| m.body().is_ok() && m.rid() != a.rid())
        .unwrap();
    // MethodDef b's RVA points into the middle of a's body.
    let info = *image.tables_header().info(Table::MethodDef);
    let (col, _) = info.column(0).unwrap();
    let at = info.offset + (b.rid() as usize - 1) * info.row_size as usize + col;
    let mut hostile = bytes.clone();
    hostile[at..at + 4].copy_from_slice(&(a.rva() + 8).to_le_bytes());
    let image = Image::parse(&hostile).unwrap();
    let mut w = ImageWriter::new(&image);
    w.replace_body(a.rid(), [0x06, 0x2a]).unwrap();
    let p = w.finish().unwrap();
    assert_eq!(p.summary.relocation_reasons.unsafe_extent, 1);
    let from = a.body_offset().unwrap();
    assert_eq!(&p.bytes[from..from + 32], &hostile[from..from + 32]);
}

#[test]
fn in_place_body_leaves_slack_bytes_as_they_were() {
    let bytes = std::fs::read(corpus_bin().join("features.exe")).unwrap();
    let image = Image::parse(&bytes).unwrap();
    // A fat body replaced by a tiny one (`ret`): written in place, the rest untouched.
    let m = image
        .methods()
        .find(|m| m.body().is_ok_and(|b| b.len() > 16 && b[0] & 3 == 3))
        .unwrap();
    let at = m.body_offset().unwrap();
    let old_len = m.body().unwrap().len();
    let mut w = ImageWriter::new(&image);
    w.replace_body(m.rid(), [0x06, 0x2a]).unwrap();
    let p = w.finish().unwrap();
    assert_eq!(p.summary.in_place, 1);
    assert_eq!(p.summary.slack_bytes, old_len - 2);
    assert_eq!(p.bytes.len(), bytes.len());
    assert_eq!(&p.bytes[at..at + 2], &[0x06, 0x2a]);
    assert_eq!(&p.bytes[at + 2..at + old_len], &bytes[at + 2..at + old_len]);
    let diff = p.bytes.iter().zip(&bytes).filter(|(a, b)| a != b).count();
    assert!(diff <= 2);
}

/// Byte offset of the optional header.
fn optional_header(file: &[u8]) -> usize {
    u32::from_le_bytes(file[0x3c..0x40].try_into().unwrap()) as usize + 24
}

#[test]
fn certificate_table_at_the_end_is_dropped_when_a_section_is_appended() {
    let mut bytes = std::fs::read(corpus_bin().join("features.exe")).unwrap();
    let cert_at = bytes.len().next_multiple_of(8);
    bytes.resize(cert_at, 0);
    let cert = [8u8, 0, 0, 0, 0, 2, 2, 0]; // WIN_CERTIFICATE header: length 8, PKCS#7
    bytes.extend_from_slice(&cert);
    let dir = optional_header(&bytes) + 96 + 4 * 8;
    bytes[dir..dir + 4].copy_from_slice(&(cert_at as u32).to_le_bytes());
    bytes[dir + 4..dir + 8].copy_from_slice(&8u32.to_le_bytes());
    let image = Image::parse(&bytes).unwrap();
    let m = image.methods().find(|m| m.body().is_ok()).unwrap();
    let new = nop_prefixed(m.body().unwrap(), 8);

    // In place only: the table stays, invalid.
    let mut w = ImageWriter::new(&image);
    w.replace_body(m.rid(), [0x06, 0x2a]).unwrap();
    let p = w.finish().unwrap();
    assert!(p.summary.authenticode_invalidated && !p.summary.certificate_table_dropped);
    assert_eq!(p.bytes.len(), bytes.len());

    let mut w = ImageWriter::new(&image);
    w.replace_body(m.rid(), new.clone()).unwrap();
    let p = w.finish().unwrap();
    assert!(p.summary.certificate_table_dropped);
    assert_eq!(&p.bytes[dir..dir + 8], &[0; 8]);
    let area = p.summary.relocation_area.as_ref().unwrap();
    assert_eq!(
        p.bytes.len(),
        area.raw_offset as usize + area.section_raw_size as usize
    );
    assert!(area.raw_offset as usize <= cert_at.next_multiple_of(0x200));
    assert_bodies(&image, &p.bytes, &HashMap::from([(m.rid(), new)]));
}

#[test]
fn checksum_is_recomputed_when_present() {
    let mut bytes = std::fs::read(corpus_bin().join("features.exe")).unwrap();
    let cs = optional_header(&bytes) + 64;
    assert_eq!(writer::checksum_offset(&bytes), Some(cs));
    let sum = writer::pe_checksum(&bytes, cs);
    bytes[cs..cs + 4].copy_from_slice(&sum.to_le_bytes());
    let image = Image::parse(&bytes).unwrap();
    assert!(ImageWriter::new(&image).finish().unwrap().bytes == bytes);
    let m = image.methods().find(|m| m.body().is_ok()).unwrap();
    let mut w = ImageWriter::new(&image);
    w.replace_body(m.rid(), nop_prefixed(m.body().unwrap(), 8))
        .unwrap();
    let p = w.finish().unwrap();
    assert!(p.summary.checksum_recomputed);
    let stored = u32::from_le_bytes(p.bytes[cs..cs + 4].try_into().unwrap());
    assert_eq!(stored, writer::pe_checksum(&p.bytes, cs));
    assert_ne!(stored, sum);

    // Zero stays zero.
    let image = Image::open(corpus_bin().join("features.exe")).unwrap();
    let mut w = ImageWriter::new(&image);
    w.replace_body(m.rid(), nop_prefixed(m.body().unwrap(), 8))
        .unwrap();
    let p = w.finish().unwrap();
    assert!(!p.summary.checksum_recomputed);
    assert_eq!(&p.bytes[cs..cs + 4], &[0; 4]);
}

#[test]
fn hostile_replacements_are_typed_errors() {
    let image = Image::open(corpus_bin().join("features.exe")).unwrap();
    let rows = image.method_count();
    let mut w = ImageWriter::new(&image);
    for rid in [0, rows + 1, u32::MAX] {
        assert!(matches!(
            w.replace_body(rid, [0x06, 0x2a]),
            Err(WriteError::NoSuchMethod { .. })
        ));
    }
    if let Some(m) = image.methods().find(|m| m.rva() == 0) {
        assert!(matches!(
            w.replace_body(m.rid(), [0x06, 0x2a]),
            Err(WriteError::NoBody { .. })
        ));
    }
    let rid = image.methods().find(|m| m.body().is_ok()).unwrap().rid();
    for bad in [
        &[][..],
        &[0x00],
        &[0x01],
        &[0x0a, 0x2a],                         // tiny, code size 2, one byte given
        &[0x03, 0x30, 0x08, 0x00, 0xff, 0xff], // fat header truncated
        &[0x1b, 0x30, 0x08, 0x00, 0x01, 0, 0, 0, 0, 0, 0, 0, 0x2a], // MoreSects, no section
    ] {
        assert!(
            matches!(w.replace_body(rid, bad), Err(WriteError::BadBody { .. })),
            "{bad:02x?}"
        );
    }
    assert!(matches!(
        w.replace_body(rid, [0x06, 0x2a, 0x00]),
        Err(WriteError::TrailingBytes { body_len: 2, .. })
    ));
    assert_eq!(w.replaced(), 0);

    // Random bytes: an error or an accepted body, never a panic; accepted ones write.
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..2000 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let len = (seed % 40) as usize;
        let bytes: Vec<u8> = (0..len)
            .map(|i| (seed.rotate_left(i as u32 * 8) & 0xff) as u8)
            .collect();
        let _ = w.replace_body(rid, bytes);
    }
    let p = w.finish().unwrap();
    Image::parse(&p.bytes).unwrap();
}

#[test]
fn no_room_for_a_section_header_is_a_typed_error() {
    let bytes = std::fs::read(corpus_bin().join("features.exe")).unwrap();
    let opt = optional_header(&bytes);
    let coff = opt - 20;
    let count = u16::from_le_bytes([bytes[coff + 2], bytes[coff + 3]]) as usize;
    let opt_size = u16::from_le_bytes([bytes[coff + 16], bytes[coff + 17]]) as usize;
    let table_end = opt + opt_size + count * 40;

    let relocate_one_to = |file: &[u8], target| {
        let image = Image::parse(file).unwrap();
        let m = image.methods().find(|m| m.body().is_ok()).unwrap();
        let mut w = ImageWriter::new(&image);
        w.relocation_target(target);
        let new = nop_prefixed(m.body().unwrap(), 8);
        w.replace_body(m.rid(), new.clone()).unwrap();
        let p = w.finish()?;
        assert_bodies(&image, &p.bytes, &HashMap::from([(m.rid(), new)]));
        Ok::<_, WriteError>(p)
    };
    let relocate_one = |file: &[u8]| relocate_one_to(file, RelocationTarget::NewSection);

    // SizeOfHeaders ending right after the table.
    let mut tight = bytes.clone();
    tight[opt + 60..opt + 64].copy_from_slice(&(table_end as u32).to_le_bytes());
    assert!(matches!(
        relocate_one(&tight),
        Err(WriteError::NoRoomForSectionHeader { .. })
    ));
    // Something already lives after the table.
    let mut used = bytes.clone();
    used[table_end + 3] = 1;
    assert!(matches!(
        relocate_one(&used),
        Err(WriteError::SectionHeaderSpaceInUse { .. })
    ));
    // Broken alignment.
    let mut align = bytes.clone();
    align[opt + 36..opt + 40].copy_from_slice(&0x300u32.to_le_bytes());
    assert!(matches!(
        relocate_one(&align),
        Err(WriteError::BadAlignment { .. })
    ));
    // Auto grows the last section instead.
    for file in [&tight, &used] {
        let p = relocate_one_to(file, RelocationTarget::Auto).unwrap();
        let area = p.summary.relocation_area.unwrap();
        assert!(!area.appended);
        assert_eq!(area.section, ".reloc");
    }
    // Data after the last section stops growth.
    let mut overlay = bytes.clone();
    overlay.extend_from_slice(&[1; 16]);
    assert!(matches!(
        relocate_one_to(&overlay, RelocationTarget::GrowLastSection),
        Err(WriteError::CannotGrowLastSection { .. })
    ));
    assert!(relocate_one_to(&overlay, RelocationTarget::Auto).is_ok());
    // A hostile VirtualSize on the last section (4 GiB less a page): growing it would mean
    // writing gigabytes of zeros, so it is refused.
    let last_header = table_end - 40;
    let mut huge = bytes.clone();
    huge[last_header + 8..last_header + 12].copy_from_slice(&0xFFFF_F000u32.to_le_bytes());
    assert!(matches!(
        relocate_one_to(&huge, RelocationTarget::GrowLastSection),
        Err(WriteError::CannotGrowLastSection { reason }) if reason.contains("virtual size")
    ));
    // A new section would start past 4 GiB of address space: a typed error too.
    assert!(matches!(
        relocate_one_to(&huge, RelocationTarget::NewSection),
        Err(WriteError::Overflow { .. })
    ));
    // In-place edits need no new header and still work on all of these.
    for file in [&tight, &used, &align] {
        let image = Image::parse(file).unwrap();
        let m = image.methods().find(|m| m.body().is_ok()).unwrap();
        let mut w = ImageWriter::new(&image);
        w.replace_body(m.rid(), [0x06, 0x2a]).unwrap();
        assert_eq!(w.finish().unwrap().summary.in_place, 1);
    }
}

#[test]
fn mono_class_libraries_relocate_every_body() {
    let Some(dir) = support::mono_corpus("mono_class_libraries_relocate_every_body") else {
        return;
    };
    let files = support::files_with_extension(&dir, "dll");
    let (mut write_time, mut input_bytes, mut output_bytes) = (Duration::ZERO, 0usize, 0usize);
    let (mut relocated, mut in_place, mut signed, mut recomputed, mut grown) = (0, 0, 0, 0, 0);
    for path in &files {
        let image = Image::open(path).unwrap();
        let mut w = ImageWriter::new(&image);
        let mut replaced = HashMap::new();
        for m in image.methods() {
            let Ok(b) = m.body() else { continue };
            let new = nop_prefixed(b, 4);
            w.replace_body(m.rid(), new.clone()).unwrap();
            replaced.insert(m.rid(), new);
        }
        let cs = writer::checksum_offset(image.bytes()).unwrap();
        let stored = u32::from_le_bytes(image.bytes()[cs..cs + 4].try_into().unwrap());
        if stored != 0 {
            assert_eq!(
                writer::pe_checksum(image.bytes(), cs),
                stored,
                "{}",
                path.display()
            );
        }
        let start = Instant::now();
        let p = w
            .finish()
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        write_time += start.elapsed();
        input_bytes += image.bytes().len();
        output_bytes += p.bytes.len();
        relocated += p.summary.relocated;
        in_place += p.summary.in_place;
        signed += usize::from(p.summary.strong_name_invalidated);
        recomputed += usize::from(p.summary.checksum_recomputed);
        grown += usize::from(
            p.summary
                .relocation_area
                .as_ref()
                .is_some_and(|a| !a.appended),
        );
        assert_eq!(p.summary.in_place + p.summary.relocated, replaced.len());
        assert_bodies(&image, &p.bytes, &replaced);
    }
    let secs = write_time.as_secs_f64();
    eprintln!(
        "mono: {} assemblies ({grown} by growing the last section), {relocated} bodies \
         relocated, {in_place} in place, {signed} strong names invalidated, {recomputed} checksums recomputed; \
         {:.1} MB in, {:.1} MB out, written in {:.3} s ({:.0} MB/s)",
        files.len(),
        input_bytes as f64 / 1e6,
        output_bytes as f64 / 1e6,
        secs,
        input_bytes as f64 / 1e6 / secs
    );
}

/// An empty file for reading and writing at `path`.
fn fresh_file(path: &Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .unwrap()
}

/// What a writer gave: the bytes, summary and placements, or the error's text.
type Written = Result<(Vec<u8>, writer::WriteSummary, Vec<(u32, Placement)>), String>;

fn written_to_buffer(w: &ImageWriter) -> Written {
    let mut out = Vec::new();
    w.finish_into(&mut out)
        .map(|(s, p)| (out, s, p))
        .map_err(|e| e.to_string())
}

fn written_to_file(w: &ImageWriter, path: &Path) -> Written {
    let file = fresh_file(path);
    w.finish_to_file(&file)
        .map(|(s, p)| (std::fs::read(path).unwrap(), s, p))
        .map_err(|e| e.to_string())
}

/// Blocks a file takes on the disk, in bytes.
fn allocated(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).unwrap().blocks() * 512
}

/// Writing to a file (the input's unchanged ranges copied file to file, holes kept) gives the
/// bytes, summary and placements writing to a buffer gives, or the same error: for every
/// corpus program as it is, with a checksum, with a certificate table, and with a 3 MiB hole
/// after its sections; with bodies kept, nop-prefixed (relocated, into a new section or the
/// last one grown) and shortened; for the image parsed from memory and opened from a file.
#[test]
fn a_file_written_in_place_of_a_buffer_is_the_same_image() {
    let dir = out_path("to-file");
    std::fs::create_dir_all(&dir).unwrap();
    let mut next = {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        }
    };
    let (mut compared, mut errors, mut relocated, mut grown, mut sparse) = (0, 0, 0, 0, 0);
    for exe in corpus_exes() {
        let original = std::fs::read(&exe).unwrap();
        for variant in ["plain", "checksum", "certificate", "hole"] {
            let mut bytes = original.clone();
            let cs = optional_header(&bytes) + 64;
            match variant {
                "checksum" | "hole" => {
                    let sum = writer::pe_checksum(&bytes, cs);
                    bytes[cs..cs + 4].copy_from_slice(&sum.max(1).to_le_bytes());
                }
                "certificate" => {
                    let cert_at = bytes.len().next_multiple_of(8);
                    bytes.resize(cert_at, 0);
                    bytes.extend_from_slice(&[8, 0, 0, 0, 0, 2, 2, 0]);
                    let d = optional_header(&bytes) + 96 + 4 * 8;
                    bytes[d..d + 4].copy_from_slice(&(cert_at as u32).to_le_bytes());
                    bytes[d + 4..d + 8].copy_from_slice(&8u32.to_le_bytes());
                }
                _ => {}
            }
            let input = dir.join(format!("{variant}-{}", exe.file_name().unwrap().display()));
            std::fs::write(&input, &bytes).unwrap();
            if variant == "hole" {
                // Trailing data the loader ignores, as a hole: it must stay one.
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(&input)
                    .unwrap();
                f.set_len(bytes.len() as u64 + (3 << 20) + 5).unwrap();
                bytes = std::fs::read(&input).unwrap();
            }
            let parsed = Image::parse(&bytes).unwrap();
            let opened = Image::open_whole(&input).unwrap();
            assert!(parsed.file().is_none() && opened.file().is_some());
            for pattern in 0..3 {
                for target in [RelocationTarget::Auto, RelocationTarget::GrowLastSection] {
                    for image in [&parsed, &opened] {
                        let mut w = ImageWriter::new(image);
                        w.relocation_target(target);
                        for m in image.methods().filter(|m| m.body().is_ok()) {
                            let body = m.body().unwrap();
                            let new = match (pattern, next(3)) {
                                (0, _) => body.to_vec(),
                                (1, 0) => nop_prefixed(body, 1 + next(9) as usize),
                                (2, 0) if Body::parse(body).unwrap().code.len() > 2 => {
                                    // A shorter body: `ret` alone (it need not verify).
                                    vec![(1 << 2) | 2, 0x2A]
                                }
                                _ => continue,
                            };
                            w.replace_body(m.rid(), new).unwrap();
                        }
                        let out = dir.join("out");
                        let (a, b) = (written_to_buffer(&w), written_to_file(&w, &out));
                        assert_eq!(
                            a.as_ref().map(|(_, s, p)| (s, p)),
                            b.as_ref().map(|(_, s, p)| (s, p)),
                            "{} {variant} pattern {pattern} {target:?}",
                            exe.display()
                        );
                        match (a, b) {
                            (Ok((a, s, _)), Ok((b, _, _))) => {
                                assert!(a == b, "{} {variant} {pattern}", exe.display());
                                relocated += usize::from(s.relocated > 0);
                                grown +=
                                    usize::from(s.relocation_area.is_some_and(|r| !r.appended));
                                if variant == "hole" && image.file().is_some() {
                                    assert!(
                                        allocated(&out) < (1 << 20),
                                        "the hole was written: {} bytes",
                                        allocated(&out)
                                    );
                                    sparse += 1;
                                }
                            }
                            _ => errors += 1,
                        }
                        compared += 1;
                    }
                }
            }
        }
    }
    std::fs::remove_dir_all(&dir).ok();
    eprintln!(
        "{compared} compared: {relocated} relocated, {grown} into a grown section, {sparse} sparse, {errors} errors alike"
    );
    assert!(relocated > 20 && grown > 5 && sparse > 5, "too few cases");
}

/// New metadata (a user string, references) goes into the file as into the buffer.
#[test]
fn new_metadata_is_written_to_a_file_as_to_a_buffer() {
    use ilcheck::image::emit::MetadataBuilder;
    let bytes = std::fs::read(corpus_bin().join("control_flow.exe")).unwrap();
    let image = Image::parse(&bytes).unwrap();
    let mut b = MetadataBuilder::new(&image);
    let hello = b.user_string("written to a file").unwrap();
    let main = image.cli_header().entry_point_token & 0x00ff_ffff;
    let mut body = vec![(6 << 2) | 2, 0x72];
    body.extend_from_slice(&hello.0.to_le_bytes());
    body.push(0x2A);
    let mut w = ImageWriter::new(&image);
    w.replace_body(main, &body).unwrap();
    w.set_metadata(b.build().unwrap());
    let path = out_path("metadata-to-file");
    let (a, b) = (written_to_buffer(&w), written_to_file(&w, &path));
    std::fs::remove_file(&path).ok();
    let (a, b) = (a.unwrap(), b.unwrap());
    assert!(a.0 == b.0);
    assert_eq!((a.1, a.2), (b.1, b.2));
    let written = Image::parse(&b.0).unwrap();
    assert!(written.tables_header().rows(Table::MethodDef) > 0);
    assert_ne!(
        written.cli_header().metadata.rva,
        image.cli_header().metadata.rva
    );
}

#[test]
fn class_libraries_rewritten_into_freed_space_run_a_program_under_mono() {
    const NAME: &str = "class_libraries_rewritten_into_freed_space_run_a_program_under_mono";
    let Some(dir) = support::mono_corpus(NAME) else {
        return;
    };
    if !support::mono_tool(NAME, "mcs") || !support::mono_tool(NAME, "mono") {
        return;
    }
    let root = out_path("freed-libs");
    let libs = root.join("4.5");
    std::fs::create_dir_all(&libs).unwrap();
    let opts = ilcheck::corpus::RewriteOptions::new("prologue-epilogue").unwrap();
    let names = [
        "mscorlib.dll",
        "System.dll",
        "System.Core.dll",
        "System.Xml.dll",
    ];
    for lib in names {
        let image = Image::open(dir.join(lib)).unwrap();
        let mut report = ilcheck::corpus::RewriteReport::default();
        let bytes = ilcheck::corpus::rewrite_image(&image, &opts, &mut report).unwrap();
        let w = report.write.as_ref().unwrap();
        // Most moved bodies go where old ones were (mscorlib: 86%), filling nearly all the
        // space (99.6%); the file grows by under 2%.
        assert!(w.reused_bodies * 5 > w.relocated * 4, "{lib}: {w:?}");
        assert!(w.reused_bytes * 50 > w.freed_bytes * 49, "{lib}: {w:?}");
        let input = image.bytes().len();
        assert!(
            bytes.len() < input + input / 50,
            "{lib}: {} → {}",
            input,
            bytes.len()
        );
        std::fs::write(libs.join(lib), bytes).unwrap();
    }
    let source = root.join("uses_them.cs");
    std::fs::write(
        &source,
        r#"using System; using System.Linq; using System.Xml;
class P {
    static void Main() {
        var d = new XmlDocument();
        d.LoadXml("<a><b>3</b><b>4</b><b>35</b></a>");
        Console.WriteLine(d.SelectNodes("//b").Cast<XmlNode>().Sum(n => int.Parse(n.InnerText)));
        Console.WriteLine(string.Join(",", Enumerable.Range(1, 6).Select(i => (i * i).ToString("x"))));
        try { throw new InvalidOperationException("caught"); }
        catch (Exception e) { Console.WriteLine(e.Message + " " + new Uri("http://a/b/../c").AbsolutePath); }
    }
}
"#,
    )
    .unwrap();
    let exe = root.join("uses_them.exe");
    let built = support::run(
        Command::new("mcs")
            .arg("-nologo")
            .arg(format!("-out:{}", exe.display()))
            .args(["-r:System.Xml.dll", "-r:System.Core.dll"])
            .arg(&source),
    );
    assert!(
        built.success(),
        "mcs: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let original = run_mono(&exe);
    assert_eq!(original, "42\n1,4,9,10,19,24\ncaught /c\n");
    let patched = support::run(
        Command::new("mono")
            .arg(&exe)
            .env("MONO_PATH", &libs)
            .env("MONO_LOG_LEVEL", "info")
            .env("MONO_LOG_MASK", "asm"),
    );
    let log = String::from_utf8_lossy(&patched.stdout).into_owned()
        + &String::from_utf8_lossy(&patched.stderr);
    assert!(patched.success(), "{}", patched.describe());
    // The rewritten libraries are the ones loaded, and the program says the same.
    for lib in names {
        let from = format!(
            "loaded assembly from location: '{}'",
            libs.join(lib).display()
        );
        assert!(
            log.contains(&from),
            "{lib} not loaded from {}:\n{log}",
            libs.display()
        );
    }
    assert!(log.contains("42\n1,4,9,10,19,24\ncaught /c\n"), "{log}");
}
