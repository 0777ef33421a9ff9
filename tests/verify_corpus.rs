//! The verifier over real compiler output: every method body of the assemblies in
//! `/usr/lib/mono/4.5` (or `ILCHECK_CORPUS`), resolved through their own metadata. Skipped when
//! the directory is absent. Prints a summary and the verifier's throughput (use `--release
//! -- --nocapture`).

use ilcheck::image::Image;
use ilcheck::verify::{Code, ImageResolver, Resolver, Verifier};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn corpus_files() -> Vec<PathBuf> {
    let dir = std::env::var_os("ILCHECK_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/lib/mono/4.5"));
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut files: Vec<_> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
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
    let files = corpus_files();
    if files.is_empty() {
        eprintln!("no corpus; skipped");
        return;
    }
    let mut verifier = Verifier::new();
    let (mut bodies, mut bytes, mut incomplete) = (0u64, 0u64, 0u64);
    let mut time = Duration::ZERO;
    let mut by_code: BTreeMap<Code, Vec<String>> = BTreeMap::new();
    for path in &files {
        let Ok(image) = Image::open(path) else {
            continue;
        };
        let mut resolver = ImageResolver::new(&image);
        // Parse first, so the timing covers verification alone.
        let mut work = Vec::new();
        for method in image.methods() {
            let Ok(body) = method.decoded_body() else {
                continue;
            };
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
