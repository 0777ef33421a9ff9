//! The whole `prologue-epilogue` workload in one process, single thread: open every assembly of
//! a directory, rewrite (and verify) every method, write each patched image to memory.
//!
//! `cargo run --release --example rewrite_corpus [DIR] [FILES] [ROUNDS]`: DIR defaults to
//! `/usr/lib/mono/4.5`; FILES limits how many assemblies (in name order) are used; ROUNDS
//! repeats the workload and reports the fastest round. Prints CPU seconds, MB/s of input IL and
//! a digest of every output byte and count, so a change that alters results shows.

use ilcheck::corpus::{RewriteOptions, RewriteReport, rewrite_image};
use ilcheck::image::Image;
use ilcheck::ir::{LayoutOptions, TransformOptions, transforms};
use std::hash::{Hash, Hasher};
use std::path::PathBuf;

/// CPU time this thread has run, in seconds (wall time overstates it on a busy machine).
fn cpu_secs() -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(f64::NAN, |ns| ns as f64 / 1e9)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().unwrap_or_else(|| "/usr/lib/mono/4.5".into()));
    let files: usize = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(usize::MAX);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("corpus directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x.eq_ignore_ascii_case("dll")))
        .collect();
    paths.sort();
    paths.truncate(files);
    let opts = RewriteOptions {
        transform_name: "prologue-epilogue".into(),
        transform: transforms::prologue_epilogue,
        transform_opts: TransformOptions::default(),
        layout: LayoutOptions::default(),
        methods: None,
        max_listed: 0,
    };
    let mut best = f64::INFINITY;
    for _ in 0..rounds {
        let cpu = cpu_secs();
        let mut digest = std::collections::hash_map::DefaultHasher::new();
        let (mut il, mut methods, mut written, mut images) = (0u64, 0u64, 0usize, 0usize);
        let mut totals = RewriteReport::default();
        for path in &paths {
            let Ok(image) = Image::open(path) else {
                continue;
            };
            let mut report = RewriteReport::default();
            if let Ok(bytes) = rewrite_image(&image, &opts, &mut report) {
                bytes.hash(&mut digest);
                written += bytes.len();
                images += 1;
            }
            il += report.il_bytes_in;
            methods += report.selected;
            totals.rewritten += report.rewritten;
            totals.unchanged += report.unchanged;
            totals.invalid_before += report.invalid_before;
            totals.il_bytes_out += report.il_bytes_out;
            (report.selected, report.rewritten, report.unchanged).hash(&mut digest);
            (report.invalid_before, report.il_bytes_out).hash(&mut digest);
            format!("{:?}{:?}", report.skipped, report.rejected).hash(&mut digest);
            format!("{:?}", report.write).hash(&mut digest);
        }
        let cpu = cpu_secs() - cpu;
        best = best.min(cpu);
        println!(
            "{images} images, {methods} methods, {il} bytes of IL in, {} out, {written} bytes \
             written ({} rewritten, {} unchanged, {} invalid before); digest {:016x}; \
             cpu {cpu:.3}s = {:.0} MB/s of IL",
            totals.il_bytes_out,
            totals.rewritten,
            totals.unchanged,
            totals.invalid_before,
            digest.finish(),
            il as f64 / 1e6 / cpu
        );
    }
    if rounds > 1 {
        println!("best of {rounds}: cpu {best:.3}s");
    }
}
