//! The whole `prologue-epilogue` workload in one process: read every assembly of a directory
//! from its file, rewrite (and verify) every method, write each patched image to memory (in
//! full every round; files are read into, and images written into, the buffers that held the
//! same assembly in the previous round, as a long-running rewriter would reuse its memory).
//!
//! `cargo run --release --example rewrite_corpus [DIR] [FILES] [ROUNDS] [THREADS] [SPLIT] [CHECK] [PROBE]`:
//! DIR defaults to `/usr/lib/mono/4.5`; FILES limits how many assemblies (in name order) are
//! used; ROUNDS repeats the workload and reports the fastest round; THREADS (default 1; 0 for
//! one per core) share the work, split by `methods` (default: each assembly's methods are
//! rewritten on every thread, then it is written) or by `images` (each thread takes whole
//! assemblies, largest first, so writing overlaps rewriting). CHECK is `verify` (default: every
//! result verified) or `max-stack` (only the dataflow MaxStack needs, as a rewriter that does
//! not verify still must compute). Prints wall and CPU seconds, MB/s
//! of input IL and a digest of every output byte and count (computed after the clock stops,
//! the same for any THREADS and SPLIT), so a change that alters results shows.

use ilcheck::corpus::{RewriteOptions, RewriteReport, RewriteScratch, rewrite_image_with};
use ilcheck::image::Image;
use ilcheck::ir::{LayoutOptions, TransformOptions};
use std::hash::{Hash, Hasher};
use std::path::PathBuf;

/// CPU time of the whole process (every thread, user and system), in seconds, at the kernel's
/// 100 Hz tick: wall time overstates the work on a busy machine.
fn cpu_secs() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return f64::NAN;
    };
    // Fields after the parenthesised command name; utime and stime are the 14th and 15th.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|x| x.parse().ok())
        .collect();
    f.iter().sum::<u64>() as f64 / 100.0
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().unwrap_or_else(|| "/usr/lib/mono/4.5".into()));
    let files: usize = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(usize::MAX);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    let threads: usize = match args.next().and_then(|a| a.parse().ok()).unwrap_or(1) {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    let by_images = match args.next().as_deref() {
        None | Some("methods") => false,
        Some("images") => true,
        Some(other) => panic!("SPLIT is `methods` or `images`, not {other:?}"),
    };
    let verify = match args.next().as_deref() {
        None | Some("verify") => true,
        Some("max-stack") => false,
        Some(other) => panic!("CHECK is `verify` or `max-stack`, not {other:?}"),
    };
    // PROBE: the path of an assembly with `Acme.Probe::Enter(string, int32)` and
    // `Exit(string)` (corpus/probe/probe.cs): every method calls them by name instead of the
    // `nop` snippets, with the references and literals added to each image.
    let probes = match args.next() {
        None => ilcheck::corpus::Probes::default(),
        Some(path) => {
            let reference = ilcheck::image::Image::open(&path).expect("PROBE is a .NET assembly");
            let refs = std::slice::from_ref(&reference);
            let probe = |text: &str, entry| {
                let parsed = ilcheck::image::emit::probe::parse(text).expect("probe name");
                Some(ilcheck::image::emit::probe::resolve(&parsed, refs, entry).expect("probe"))
            };
            ilcheck::corpus::Probes {
                entry: probe("void [Acme.Probe]Acme.Probe::Enter(string, int32)", true),
                exit: probe("void [Acme.Probe]Acme.Probe::Exit(string)", false),
            }
        }
    };
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("corpus directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x.eq_ignore_ascii_case("dll")))
        .collect();
    paths.sort();
    paths.truncate(files);
    let opts = RewriteOptions {
        transform: ilcheck::ir::Transform::PrologueEpilogue,
        transform_opts: TransformOptions::default(),
        layout: LayoutOptions {
            verify,
            ..LayoutOptions::default()
        },
        methods: None,
        max_listed: 0,
        threads: if by_images { 1 } else { threads },
        keep_ready_to_run: false,
        keep_old_bodies: false,
        probes,
    };
    // Largest first, so that no big assembly is left for the end.
    let mut by_size: Vec<usize> = (0..paths.len()).collect();
    by_size
        .sort_by_key(|&i| std::cmp::Reverse(std::fs::metadata(&paths[i]).map_or(0, |m| m.len())));
    // Rounds after the first do not wait for the kernel to hand out fresh pages.
    let spare: Vec<std::sync::Mutex<Vec<u8>>> = paths.iter().map(|_| Default::default()).collect();
    // Each thread keeps its rewriting engines (lifter, layout, verifier buffers) from one
    // assembly, and round, to the next.
    let scratch: Vec<std::sync::Mutex<RewriteScratch>> =
        (0..threads).map(|_| Default::default()).collect();
    // Read, not mapped: a fresh map of every file in every round costs page faults that
    // contend between threads.
    let inputs: Vec<std::sync::Mutex<Vec<u8>>> = paths.iter().map(|_| Default::default()).collect();
    let one = |i: usize, scratch: &mut RewriteScratch| {
        let mut input = inputs[i].lock().expect("input");
        input.clear();
        std::io::Read::read_to_end(&mut std::fs::File::open(&paths[i]).ok()?, &mut input).ok()?;
        let image = Image::parse(&input).ok()?;
        let mut report = RewriteReport::default();
        let mut bytes = std::mem::take(&mut *spare[i].lock().expect("buffer"));
        let written = rewrite_image_with(&image, &opts, &mut report, &mut bytes, scratch).is_ok();
        Some((i, written.then_some(bytes), report))
    };
    let mut best = (f64::INFINITY, f64::INFINITY);
    for _ in 0..rounds {
        let (cpu, wall) = (cpu_secs(), std::time::Instant::now());
        let outputs: Vec<_> = if by_images && threads > 1 {
            let next = std::sync::atomic::AtomicUsize::new(0);
            let work = |t: usize| {
                let mut scratch = scratch[t].lock().expect("scratch");
                let mut done = Vec::new();
                loop {
                    let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(&i) = by_size.get(k) else {
                        return done;
                    };
                    done.push(one(i, &mut scratch));
                }
            };
            let all: Vec<_> = std::thread::scope(|s| {
                let others: Vec<_> = (1..threads).map(|t| s.spawn(move || work(t))).collect();
                let mut all = work(0);
                for h in others {
                    all.extend(h.join().expect("worker"));
                }
                all
            });
            // Path order, as the sequential run produces them.
            let mut all: Vec<_> = all.into_iter().flatten().collect();
            all.sort_by_key(|(i, _, _)| *i);
            all
        } else {
            let mut scratch = scratch[0].lock().expect("scratch");
            (0..paths.len())
                .filter_map(|i| one(i, &mut scratch))
                .collect()
        };
        let (wall, cpu) = (wall.elapsed().as_secs_f64(), cpu_secs() - cpu);
        best = (best.0.min(wall), best.1.min(cpu));
        let mut digest = std::collections::hash_map::DefaultHasher::new();
        let (mut il, mut methods, mut written, mut images) = (0u64, 0u64, 0usize, 0usize);
        let mut totals = RewriteReport::default();
        for (_, bytes, report) in &outputs {
            if let Some(bytes) = bytes {
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
        let split = if by_images { "assemblies" } else { "methods" };
        println!(
            "{images} images, {methods} methods, {il} bytes of IL in, {} out, {written} bytes \
             written ({} rewritten, {} unchanged, {} invalid before); digest {:016x}; \
             {threads} thread(s) splitting {split}, {}: wall {wall:.3}s = {:.0} MB/s of IL, cpu {cpu:.2}s",
            totals.il_bytes_out,
            totals.rewritten,
            totals.unchanged,
            totals.invalid_before,
            digest.finish(),
            if verify { "verified" } else { "max stack only" },
            il as f64 / 1e6 / wall
        );
        for (i, bytes, _) in outputs {
            if let Some(bytes) = bytes {
                *spare[i].lock().expect("buffer") = bytes;
            }
        }
    }
    if rounds > 1 {
        println!("best of {rounds}: wall {:.3}s, cpu {:.2}s", best.0, best.1);
    }
}
