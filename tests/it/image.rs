//! The assembly reader over mono's class libraries (`/usr/lib/mono/4.5`).

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use ilcheck::image::{Image, ImageError, MethodStats, StandAloneSig, Table, Token};

use crate::support;

/// The mono assemblies of the corpus directory (`ILCHECK_MONO_DIR`, default
/// `/usr/lib/mono/4.5`), or `None` after [`support::mono_corpus`] said loudly why not (it fails
/// the test instead under `ILCHECK_REQUIRE_MONO=1`).
fn mono_assemblies(test: &str) -> Option<Vec<PathBuf>> {
    let dir = support::mono_corpus(test)?;
    Some(support::files_with_extension(&dir, "dll"))
}

fn mono_file(test: &str, name: &str) -> Option<PathBuf> {
    Some(support::mono_corpus(test)?.join(name))
}

#[test]
fn every_mono_assembly_opens_and_every_body_is_located() {
    let Some(files) = mono_assemblies("every_mono_assembly_opens_and_every_body_is_located") else {
        return;
    };
    assert_eq!(
        files.len(),
        136,
        "expected mono's 136 class-library assemblies"
    );
    // Reader alone: open, enumerate MethodDefs, locate each body.
    let start = Instant::now();
    let mut located = 0usize;
    for path in &files {
        let image = Image::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        located += image.methods().filter(|m| m.body_bytes().is_ok()).count();
    }
    eprintln!(
        "opened {} assemblies and located {located} bodies in {:.1} ms",
        files.len(),
        start.elapsed().as_secs_f64() * 1e3
    );

    let start = Instant::now();
    let mut total = MethodStats::default();
    let mut body_bytes = 0usize;
    let mut decode_failures = Vec::new();
    for path in &files {
        let image = Image::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let stats = image.method_stats();
        assert_eq!(stats.outside_sections, 0, "{}", path.display());
        for m in image.methods() {
            if m.rva() != 0 {
                let bytes = m
                    .body_bytes()
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                assert!(!bytes.is_empty());
                match m.body() {
                    Ok(exact) => {
                        assert!(exact.len() <= bytes.len() && bytes.starts_with(exact));
                        body_bytes += exact.len();
                    }
                    Err(e) => decode_failures.push(format!("{}: {e}", path.display())),
                }
            }
        }
        total.method_defs += stats.method_defs;
        total.rva_zero += stats.rva_zero;
        total.with_body += stats.with_body;
        total.distinct_bodies += stats.distinct_bodies;
        total.shared_bodies += stats.shared_bodies;
        total.methods_sharing_a_body += stats.methods_sharing_a_body;
        total.misaligned_fat += stats.misaligned_fat;
    }
    let elapsed = start.elapsed();
    eprintln!(
        "opened {} assemblies, located and decoded every body in {:.1} ms: {total:?} ({body_bytes} body bytes)",
        files.len(),
        elapsed.as_secs_f64() * 1e3
    );
    assert_eq!(total.with_body, total.method_defs - total.rva_zero);
    assert!(
        decode_failures.is_empty(),
        "{} bodies failed: {:#?}",
        decode_failures.len(),
        &decode_failures[..decode_failures.len().min(10)]
    );
    assert!(
        (220_000..280_000).contains(&total.with_body),
        "implausible body count {}",
        total.with_body
    );
}

#[test]
fn mscorlib_facts() {
    let Some(path) = mono_file("mscorlib_facts", "mscorlib.dll") else {
        return;
    };
    let image = Image::open(&path).unwrap();
    assert!(image.method_count() > 20_000, "{}", image.method_count());
    assert!(image.metadata().version.starts_with("v4.0"));
    assert_eq!(image.cli_header().cb, 72);
    let start = Instant::now();
    let name_bytes: usize = image
        .methods()
        .map(|m| m.full_name().map_or(0, |n| n.len()))
        .sum();
    eprintln!(
        "mscorlib: {} full names ({name_bytes} bytes) in {:.1} ms",
        image.method_count(),
        start.elapsed().as_secs_f64() * 1e3
    );
    let mut found = false;
    let mut nested = 0;
    for m in image.methods() {
        let name = m
            .full_name()
            .unwrap_or_else(|e| panic!("{}: {e}", m.token()));
        if name == "System.String::Concat(string,string)" {
            found = true;
            let sig = m.signature().unwrap();
            assert!(!sig.has_this && !sig.returns_void && sig.param_count == 2);
            assert!(m.body_bytes().is_ok());
        }
        nested += usize::from(name.contains('/'));
    }
    assert!(
        found,
        "System.String::Concat(string,string) not among mscorlib's methods"
    );
    assert!(nested > 1000, "nested type names: {nested}");
    let list_ctor = image
        .methods()
        .filter_map(|m| m.full_name().ok())
        .find(|n| n.starts_with("System.Collections.Generic.List`1::.ctor(class System.Collections.Generic.IEnumerable`1<!0>)"));
    assert!(list_ctor.is_some());
}

#[test]
fn signatures_and_tokens_resolve_across_the_corpus() {
    let Some(files) = mono_assemblies("signatures_and_tokens_resolve_across_the_corpus") else {
        return;
    };
    let (mut sigs, mut member_refs, mut specs, mut standalone, mut locals) = (0, 0, 0, 0, 0);
    for path in &files {
        let image = Image::open(path).unwrap();
        for m in image.methods() {
            let s = m
                .signature()
                .unwrap_or_else(|e| panic!("{} {}: {e}", path.display(), m.token()));
            assert_eq!(s, image.method_sig(m.token()).unwrap());
            m.full_name()
                .unwrap_or_else(|e| panic!("{} {}: {e}", path.display(), m.token()));
            sigs += 1;
        }
        let t = image.tables();
        for rid in 1..=t.rows(Table::MemberRef) {
            let token = Token::new(Table::MemberRef, rid);
            let blob = image
                .blobs()
                .get(t.member_ref(rid).unwrap().signature)
                .unwrap();
            // Field references (0x06) are not method signatures.
            if blob.first().is_some_and(|b| b & 0x0F == 0x06) {
                assert!(image.method_sig(token).is_err());
            } else {
                image
                    .method_sig(token)
                    .unwrap_or_else(|e| panic!("{} {token}: {e}", path.display()));
                member_refs += 1;
            }
        }
        for rid in 1..=t.rows(Table::MethodSpec) {
            let s = image
                .method_sig(Token::new(Table::MethodSpec, rid))
                .unwrap();
            assert!(s.generic_params > 0);
            specs += 1;
        }
        for rid in 1..=t.rows(Table::StandAloneSig) {
            let token = Token::new(Table::StandAloneSig, rid);
            match image.standalone_sig(token) {
                Ok(StandAloneSig::Locals { .. }) => locals += 1,
                Ok(StandAloneSig::Method(_)) => {}
                Err(e) => panic!("{} {token}: {e}", path.display()),
            }
            standalone += 1;
        }
        assert!(image.token_exists(Token::new(Table::Module, 1)));
        assert!(!image.token_exists(Token::new(Table::MethodDef, image.method_count() + 1)));
        assert!(!image.token_exists(Token(0x2D00_0001)));
        assert!(!image.token_exists(Token(0x7000_0000 | 0x00FF_FFFF)));
    }
    eprintln!(
        "{sigs} MethodDef sigs, {member_refs} MemberRef method sigs, {specs} MethodSpecs, {standalone} StandAloneSigs ({locals} locals)"
    );
    assert!(locals > 20_000);
}

#[test]
fn ldstr_tokens_check_against_us() {
    let Some(path) = mono_file("ldstr_tokens_check_against_us", "mscorlib.dll") else {
        return;
    };
    let image = Image::open(&path).unwrap();
    let us = image.user_strings();
    // Walk the heap entry by entry: each entry start is a valid ldstr target.
    let mut off = 1u32;
    let mut entries = 0;
    while (off as usize) < us.data.len() {
        let token = Token(0x7000_0000 | off);
        if us.data[off as usize] == 0 {
            break; // trailing padding
        }
        assert!(image.user_string_ok(token), "{token}");
        let raw = us.get_raw(off).unwrap();
        let prefix = if raw.len() < 0x80 {
            1
        } else if raw.len() < 0x4000 {
            2
        } else {
            4
        };
        off += (prefix + raw.len()) as u32;
        entries += 1;
    }
    assert!(entries > 1000);
    assert!(!image.user_string_ok(Token(0x7000_0000 | us.data.len() as u32)));
    assert!(!image.user_string_ok(Token::new(Table::MethodDef, 1)));
}

/// `monodis --method` prints "Method Table (1..N)": our MethodDef count must agree.
#[test]
fn method_counts_match_monodis() {
    let Some(files) = mono_assemblies("method_counts_match_monodis") else {
        return;
    };
    let names = [
        "mscorlib.dll",
        "System.dll",
        "System.Xml.dll",
        "Accessibility.dll",
    ];
    for name in names {
        let path = files
            .iter()
            .find(|p| p.file_name().unwrap() == name)
            .unwrap();
        let out = match ilcheck::harness::run_bounded(
            Command::new("monodis").arg("--method").arg(path),
            std::time::Duration::from_secs(300),
            256 << 20,
        ) {
            Ok(o) => o,
            Err(e) => {
                assert!(
                    std::env::var("ILCHECK_REQUIRE_MONO").as_deref() != Ok("1"),
                    "monodis not runnable ({e}) and ILCHECK_REQUIRE_MONO=1"
                );
                eprintln!("!!! monodis not runnable ({e}); cross-check SKIPPED !!!");
                return;
            }
        };
        let text = String::from_utf8_lossy(&out.stdout);
        let header = text.lines().next().unwrap_or_default();
        let n: u32 = header
            .trim_start_matches("Method Table (1..")
            .trim_end_matches(')')
            .parse()
            .unwrap_or_else(|_| panic!("unexpected monodis header {header:?}"));
        let image = Image::open(path).unwrap();
        assert_eq!(image.method_count(), n, "{name}");
        assert_eq!(image.methods().count() as u32, n, "{name}");
    }
}

#[test]
fn non_dotnet_pe_is_a_distinct_error() {
    let Some(path) = mono_file("non_dotnet_pe_is_a_distinct_error", "Accessibility.dll") else {
        return;
    };
    let mut bytes = std::fs::read(path).unwrap();
    let pe = u32::from_le_bytes(bytes[0x3C..0x40].try_into().unwrap()) as usize;
    let optional = pe + 24;
    let magic = u16::from_le_bytes([bytes[optional], bytes[optional + 1]]);
    let dirs = optional + if magic == 0x20B { 112 } else { 96 };
    bytes[dirs + 14 * 8..dirs + 15 * 8].fill(0);
    assert!(matches!(Image::parse(&bytes), Err(ImageError::NotDotNet)));
    assert!(matches!(
        Image::parse(b"not a PE at all"),
        Err(ImageError::Pe(_))
    ));
}

/// Exercises everything a caller might touch; must never panic on any input.
fn touch_everything(image: &Image<'_>) {
    let _ = image.method_stats();
    for m in image.methods() {
        let _ = m.full_name();
        let _ = m.signature();
        let _ = m.body_bytes();
        let _ = m.body();
    }
    let t = image.tables();
    for table in [Table::MemberRef, Table::MethodSpec, Table::StandAloneSig] {
        for rid in 1..=t.rows(table).min(2000) {
            let tok = Token::new(table, rid);
            let _ = image.method_sig(tok);
            let _ = image.standalone_sig(tok);
            let _ = image.local_count(tok);
        }
    }
    for rid in 1..=t.rows(Table::TypeDef).min(2000) {
        let mut s = String::new();
        let _ = image.write_type_name(Token::new(Table::TypeDef, rid), &mut s);
    }
    let _ = t.module(1);
    let _ = t.assembly(1);
    for rid in 1..=t.rows(Table::AssemblyRef) {
        let _ = t.assembly_ref(rid);
    }
}

#[test]
fn truncated_and_corrupted_assemblies_error_without_panicking() {
    let Some(path) = mono_file(
        "truncated_and_corrupted_assemblies_error_without_panicking",
        "Accessibility.dll",
    ) else {
        return;
    };
    let original = std::fs::read(path).unwrap();
    let image = Image::parse(&original).unwrap();
    let md = image.metadata().offset;
    let tables = image.metadata().tables.offset;
    drop(image);

    // Truncations: every offset through the headers and metadata root, then strided.
    let mut cuts: Vec<usize> = (0..original.len().min(md + 0x400)).collect();
    cuts.extend((0..original.len()).step_by(97));
    for cut in cuts {
        if let Ok(image) = Image::parse(&original[..cut]) {
            touch_everything(&image);
        }
    }

    // Byte corruption: each of a few values at every offset of the metadata root and table
    // header, and strided across the file.
    let mut offsets: Vec<usize> = (md..(tables + 0x200).min(original.len())).collect();
    offsets.extend(0..0x400.min(original.len())); // DOS, PE, optional headers, section table
    offsets.extend((0..original.len()).step_by(13));
    let mut bytes = original.clone();
    let mut parsed = 0;
    for &at in &offsets {
        for v in [0x00, 0xFF, 0x80, original[at] ^ 0x01] {
            bytes[at] = v;
            if let Ok(image) = Image::parse(&bytes) {
                parsed += 1;
                touch_everything(&image);
            }
        }
        bytes[at] = original[at];
    }
    assert!(parsed > 0);
}

/// mono's tools next to the libraries (`*.exe`) are assemblies too.
#[test]
fn mono_executables_open() {
    let Some(dir) = support::mono_corpus("mono_executables_open") else {
        return;
    };
    let mut opened = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "exe") || !path.is_file() {
            continue;
        }
        let image = Image::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(image.method_stats().outside_sections, 0);
        for m in image.methods().filter(|m| m.rva() != 0) {
            m.body()
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        }
        opened += 1;
    }
    assert!(opened > 0);
}

/// Random multi-byte mutations of the metadata (tables, heaps, signatures) never panic.
#[test]
fn random_metadata_mutations_never_panic() {
    let Some(path) = mono_file("random_metadata_mutations_never_panic", "Accessibility.dll") else {
        return;
    };
    let original = std::fs::read(path).unwrap();
    let image = Image::parse(&original).unwrap();
    let md = image.metadata().offset;
    let md_end = image
        .metadata()
        .streams
        .iter()
        .map(|s| s.offset + s.size)
        .max()
        .unwrap();
    drop(image);
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut parsed = 0;
    for _ in 0..3000 {
        let mut bytes = original.clone();
        for _ in 0..1 + next() % 8 {
            let at = md + (next() as usize) % (md_end - md);
            bytes[at] = next() as u8;
        }
        if let Ok(image) = Image::parse(&bytes) {
            parsed += 1;
            touch_everything(&image);
        }
    }
    assert!(parsed > 100, "{parsed}");
}
