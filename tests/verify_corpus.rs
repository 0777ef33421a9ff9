//! The verifier over real compiler output: every method body of mono's 4.5 assemblies
//! (`ILCHECK_MONO_DIR` overrides the place), resolved through their own metadata. Skipped
//! loudly when the corpus is absent, and failed instead under `ILCHECK_REQUIRE_MONO=1`. Every
//! assembly must open and every body decode. Prints a summary and the verifier's throughput
//! (use `--release -- --nocapture`).

mod support;

use ilcheck::image::Image;
use ilcheck::verify::{Code, ImageResolver, Resolver, Verifier};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn corpus_files(dir: &Path) -> Vec<PathBuf> {
    let entries = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list the corpus at {}: {e}", dir.display()));
    let mut files: Vec<_> = entries
        .map(|e| e.expect("corpus directory entry").path())
        .filter(|p| {
            p.extension()
                .is_some_and(|x| x.eq_ignore_ascii_case("dll") || x.eq_ignore_ascii_case("exe"))
        })
        .collect();
    files.sort();
    files
}

/// Findings that compiler output in the corpus is known to contain, by code, with why they are
/// genuine (see the module docs of `ilcheck::verify`).
const EXPECTED: &[Code] = &[];

#[test]
fn corpus_verifies_clean() {
    let Some(dir) = support::mono_corpus("corpus_verifies_clean") else {
        return;
    };
    let files = corpus_files(&dir);
    assert!(!files.is_empty(), "no assemblies in {}", dir.display());
    let mut verifier = Verifier::new();
    let (mut bodies, mut bytes, mut incomplete) = (0u64, 0u64, 0u64);
    let mut time = Duration::ZERO;
    let mut by_code: BTreeMap<Code, Vec<String>> = BTreeMap::new();
    for path in &files {
        let image =
            Image::open(path).unwrap_or_else(|e| panic!("{} does not open: {e}", path.display()));
        let mut resolver = ImageResolver::new(&image);
        // Parse first, so the timing covers verification alone.
        let mut work = Vec::new();
        for method in image.methods() {
            if method.rva() == 0 {
                continue;
            }
            let body = method.decoded_body().unwrap_or_else(|e| {
                panic!(
                    "{} {:#010x}: body does not decode: {e}",
                    path.display(),
                    method.token().0
                )
            });
            resolver.set_method(&method, &body);
            work.push((method, body, resolver.method(), resolver.local_count()));
        }
        let start = Instant::now();
        for (_, body, sig, locals) in &work {
            resolver.set_facts(*sig, *locals);
            verifier.verify(body, &resolver);
            incomplete += !verifier.is_complete() as u64;
            bodies += 1;
            bytes += body.code.len() as u64;
        }
        time += start.elapsed();
        // Again, untimed, to name the findings.
        for (method, body, sig, locals) in &work {
            resolver.set_facts(*sig, *locals);
            for d in verifier.verify(body, &resolver) {
                let name = method.full_name().unwrap_or_default();
                let file = path.file_name().unwrap().to_string_lossy();
                by_code
                    .entry(d.code)
                    .or_default()
                    .push(format!("{file} {:#010x} {name}: {d}", method.token().0));
            }
        }
    }
    let mbs = bytes as f64 / 1e6 / time.as_secs_f64();
    eprintln!(
        "{} files, {bodies} bodies, {bytes} bytes of IL, {incomplete} with unresolved calls; \
         verify {:.3}s = {mbs:.0} MB/s",
        files.len(),
        time.as_secs_f64()
    );
    for (code, list) in &by_code {
        eprintln!("{code}: {}", list.len());
        for line in list.iter().take(5) {
            eprintln!("    {line}");
        }
    }
    let unexpected: Vec<_> = by_code.keys().filter(|c| !EXPECTED.contains(c)).collect();
    assert!(unexpected.is_empty(), "unexpected findings: {unexpected:?}");
}
