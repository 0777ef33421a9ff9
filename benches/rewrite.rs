//! Rewrite throughput: lift → transform → layout (relaxation, EH table, header, MaxStack from
//! the verifier's dataflow, verification of the result), in MB/s of input IL and instructions/s,
//! over the project corpus and mono's 4.5 corpus when present (`ILCHECK_BENCH_CORPUS` names
//! another directory). Variants without verification show what verification costs.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ilcheck::body::Body;
use ilcheck::image::Image;
use ilcheck::image::writer::ImageWriter;
use ilcheck::ir::{LayoutOptions, MaxStackPolicy, Rewriter, Transform, TransformOptions};
use ilcheck::verify::{ImageResolver, Resolver};
use std::hint::black_box;
use std::path::PathBuf;
use std::time::Instant;

struct Corpus {
    name: String,
    images: Vec<&'static Image<'static>>,
    bytes: u64,
    instructions: u64,
}

fn load(name: &str, images: Vec<Image<'static>>) -> Corpus {
    let images: Vec<&'static Image<'static>> = images
        .into_iter()
        .map(|i| &*Box::leak(Box::new(i)))
        .collect();
    let (mut bytes, mut instructions) = (0, 0);
    for image in &images {
        for m in image.methods() {
            if let Ok(b) = m.decoded_body() {
                bytes += b.code.len() as u64;
                instructions += b.instructions().count() as u64;
            }
        }
    }
    Corpus {
        name: name.into(),
        images,
        bytes,
        instructions,
    }
}

fn corpora() -> Vec<Corpus> {
    let embedded = ilcheck::corpus::EMBEDDED
        .iter()
        .filter_map(|(_, b)| Image::parse(b).ok())
        .collect();
    let mut out = vec![load("project", embedded)];
    let dir = std::env::var_os("ILCHECK_BENCH_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/lib/mono/4.5"));
    if let Ok(files) = ilcheck::corpus::discover(std::slice::from_ref(&dir)) {
        let images: Vec<_> = files
            .iter()
            .filter(|p| p.parent() == Some(dir.as_path()))
            .filter_map(|p| Image::open(p).ok())
            .collect();
        if !images.is_empty() {
            out.push(load("mono-4.5", images));
        }
    } else {
        eprintln!(
            "!!! {} not found: benchmarking the project corpus only",
            dir.display()
        );
    }
    out
}

/// CPU time this thread has run, in seconds (wall time overstates it on a busy machine).
fn cpu_secs() -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(f64::NAN, |ns| ns as f64 / 1e9)
}

/// Rewrites every body of the corpus; returns (rewritten, not rewritten, output bytes).
fn run(
    prepared: &mut [(ImageResolver<'_>, support::Work<'_>)],
    rewriter: &mut Rewriter,
    transform: Transform,
    opts: &LayoutOptions,
    out: &mut Vec<u8>,
) -> (u64, u64, usize) {
    let (mut ok, mut skipped, mut size) = (0, 0, 0);
    let mut topts = TransformOptions::default();
    for (resolver, work) in prepared.iter_mut() {
        for (body, sig, locals) in work.iter() {
            resolver.set_facts(*sig, *locals);
            topts.returns_void = sig.map(|s| s.returns_void);
            out.clear();
            match rewriter.rewrite_ir(body, transform, &topts, opts, &*resolver, out) {
                Ok(_) => ok += 1,
                Err(_) => skipped += 1,
            }
            size += out.len();
        }
    }
    (ok, skipped, size)
}

/// The whole workload: every body of every image rewritten, every assembly written (to memory).
/// Returns (bodies rewritten, output bytes).
fn rewrite_and_write(corpus: &Corpus, transform: Transform, opts: &LayoutOptions) -> (u64, usize) {
    let mut rewriter = Rewriter::new();
    let mut out = Vec::new();
    let (mut bodies, mut written) = (0, 0);
    let mut topts = TransformOptions::default();
    for image in &corpus.images {
        let mut resolver = ImageResolver::new(image);
        let mut writer = ImageWriter::new(image);
        for m in image.methods() {
            let Ok(body) = m.decoded_body() else {
                continue;
            };
            resolver.set_method(&m, &body);
            topts.returns_void = resolver.method().map(|s| s.returns_void);
            out.clear();
            if rewriter
                .rewrite_ir(&body, transform, &topts, opts, &resolver, &mut out)
                .is_ok()
                && writer.replace_body(m.rid(), out.as_slice()).is_ok()
            {
                bodies += 1;
            }
        }
        if let Ok(patched) = writer.finish() {
            written += patched.bytes.len();
        }
    }
    (bodies, written)
}

fn bench(c: &mut Criterion) {
    let unverified = LayoutOptions {
        verify: false,
        max_stack: MaxStackPolicy::Declared,
        ..LayoutOptions::default()
    };
    let cases: [(&str, Transform, LayoutOptions); 4] = [
        ("identity", Transform::Identity, LayoutOptions::default()),
        (
            "prologue-epilogue",
            Transform::PrologueEpilogue,
            LayoutOptions::default(),
        ),
        ("identity/unverified", Transform::Identity, unverified),
        (
            "prologue-epilogue/unverified",
            Transform::PrologueEpilogue,
            unverified,
        ),
    ];
    for corpus in corpora() {
        for (name, transform) in [
            ("identity", Transform::Identity),
            ("prologue-epilogue", Transform::PrologueEpilogue),
        ] {
            let (start, cpu) = (Instant::now(), cpu_secs());
            let (bodies, written) =
                rewrite_and_write(&corpus, transform, &LayoutOptions::default());
            let (secs, cpu) = (start.elapsed().as_secs_f64(), cpu_secs() - cpu);
            eprintln!(
                "{} {name} + write every assembly: {bodies} bodies, {} images, {written} bytes \
                 written; wall {secs:.3}s, cpu {cpu:.3}s = {:.0} MB/s of IL (cpu)",
                corpus.name,
                corpus.images.len(),
                corpus.bytes as f64 / 1e6 / cpu
            );
        }
        let mut prepared: Vec<_> = corpus
            .images
            .iter()
            .map(|i| support::verify_work(i))
            .collect();
        // The floor: decoding every instruction once, nothing built.
        let cpu = cpu_secs();
        let decoded: usize = prepared
            .iter()
            .flat_map(|(_, w)| w.iter())
            .map(|(b, _, _)| b.instructions().count())
            .sum();
        let cpu = cpu_secs() - cpu;
        eprintln!(
            "{} decode only (reference): {decoded} instructions; cpu {cpu:.3}s = {:.0} MB/s",
            corpus.name,
            corpus.bytes as f64 / 1e6 / cpu
        );
        let mut rewriter = Rewriter::new();
        let mut out = Vec::new();
        for (name, transform, opts) in &cases {
            // One timed pass first, for the summary line.
            let (start, cpu) = (Instant::now(), cpu_secs());
            let (ok, skipped, size) = run(&mut prepared, &mut rewriter, *transform, opts, &mut out);
            let (secs, cpu) = (start.elapsed().as_secs_f64(), cpu_secs() - cpu);
            eprintln!(
                "{} {name}: {ok} rewritten, {skipped} not, {size} bytes out; wall {secs:.3}s, \
                 cpu {cpu:.3}s = {:.0} MB/s, {:.1} M instructions/s (cpu)",
                corpus.name,
                corpus.bytes as f64 / 1e6 / cpu,
                corpus.instructions as f64 / 1e6 / cpu
            );
            let mut g = c.benchmark_group(format!("rewrite/{}", corpus.name));
            g.sample_size(10);
            g.throughput(Throughput::Bytes(corpus.bytes));
            g.bench_function(format!("{name} (bytes)"), |b| {
                b.iter(|| {
                    black_box(run(
                        &mut prepared,
                        &mut rewriter,
                        *transform,
                        opts,
                        &mut out,
                    ))
                })
            });
            g.throughput(Throughput::Elements(corpus.instructions));
            g.bench_function(format!("{name} (instructions)"), |b| {
                b.iter(|| {
                    black_box(run(
                        &mut prepared,
                        &mut rewriter,
                        *transform,
                        opts,
                        &mut out,
                    ))
                })
            });
            g.finish();
        }
    }
}

// Every transform on generated bodies and on the real corpus, and the whole-assembly workload.

#[allow(dead_code)]
mod support;

/// Transform options for one generated body: a spare local (past the program's own) to hold
/// the return value for the wrap transforms, the generator's exception class to catch.
fn generated_opts(g: &ilcheck::generate::Generated) -> TransformOptions {
    TransformOptions {
        catch_type: ilcheck::generate::valid::EXCEPTION_CLASS,
        returns_void: Some(g.shape.returns_void),
        return_local: Some(g.shape.locals),
        ..TransformOptions::default()
    }
}

/// The transforms' input for one generated body: laid out as generated, with a local signature
/// when the method returns a value and declares none (the wrap transforms store the return value
/// in the spare local), and a resolver that knows the spare local.
fn transform_input(
    g: &ilcheck::generate::Generated,
) -> (Vec<u8>, ilcheck::verify::SyntheticResolver) {
    let mut g = g.clone();
    if !g.shape.returns_void && g.method.header.local_sig == 0 {
        g.method.header.local_sig = ilcheck::generate::valid::LOCALS_SIG;
    }
    let bytes = g.encode().expect("generated body lays out");
    (bytes, g.resolver.locals(g.shape.locals as u32 + 1))
}

type GeneratedWork<'a> = Vec<(
    Body<'a>,
    &'a ilcheck::verify::SyntheticResolver,
    TransformOptions,
)>;

/// Why bodies were not rewritten, by skip reason or rejecting stage.
type Tally = std::collections::BTreeMap<&'static str, u64>;

fn count(tally: Option<&mut Tally>, e: &ilcheck::ir::RewriteError) {
    use ilcheck::ir::RewriteError;
    if let Some(t) = tally {
        let key = match e {
            RewriteError::Skipped(reason) => reason.name(),
            RewriteError::Lift(_) => "lift error",
            RewriteError::Layout(_) => "layout error",
            // The enum is non-exhaustive: a later kind of failure.
            _ => "other error",
        };
        *t.entry(key).or_default() += 1;
    }
}

/// Rewrites every generated body; returns (rewritten, skipped or rejected, output bytes).
fn run_generated(
    work: &GeneratedWork<'_>,
    rewriter: &mut Rewriter,
    transform: Transform,
    out: &mut Vec<u8>,
    mut tally: Option<&mut Tally>,
) -> (u64, u64, usize) {
    let opts = LayoutOptions::default();
    let (mut ok, mut not, mut size) = (0, 0, 0);
    for (body, resolver, topts) in work {
        out.clear();
        match rewriter.rewrite_ir(body, transform, topts, &opts, *resolver, out) {
            Ok(_) => ok += 1,
            Err(e) => {
                not += 1;
                count(tally.as_deref_mut(), &e);
            }
        }
        size += out.len();
    }
    (ok, not, size)
}

/// Rewrites every body of the corpus with per-assembly options (catch type, return type).
fn run_corpus(
    prepared: &mut [(ImageResolver<'_>, support::Work<'_>, u32)],
    rewriter: &mut Rewriter,
    transform: Transform,
    out: &mut Vec<u8>,
    mut tally: Option<&mut Tally>,
) -> (u64, u64, usize) {
    let opts = LayoutOptions::default();
    let (mut ok, mut not, mut size) = (0, 0, 0);
    let mut topts = TransformOptions::default();
    for (resolver, work, catch_type) in prepared.iter_mut() {
        topts.catch_type = *catch_type;
        for (body, sig, locals) in work.iter() {
            resolver.set_facts(*sig, *locals);
            topts.returns_void = sig.map(|s| s.returns_void);
            out.clear();
            match rewriter.rewrite_ir(body, transform, &topts, &opts, &*resolver, out) {
                Ok(_) => ok += 1,
                Err(e) => {
                    not += 1;
                    count(tally.as_deref_mut(), &e);
                }
            }
            size += out.len();
        }
    }
    (ok, not, size)
}

/// Open → prologue-epilogue on every method (verifying each result) → patched image in memory,
/// for every assembly of the corpus, through the library's `rewrite_image` on `threads` threads. Returns (bodies
/// rewritten, bytes written).
fn whole_assembly(paths: &[PathBuf], threads: usize) -> (u64, usize) {
    let opts = ilcheck::corpus::RewriteOptions {
        transform: Transform::PrologueEpilogue,
        transform_opts: TransformOptions::default(),
        layout: LayoutOptions::default(),
        methods: None,
        max_listed: 0,
        threads,
        keep_ready_to_run: false,
        keep_old_bodies: false,
        probes: Default::default(),
    };
    let (mut rewritten, mut written) = (0, 0);
    for path in paths {
        let Ok(image) = Image::open(path) else {
            continue;
        };
        let mut report = ilcheck::corpus::RewriteReport::default();
        if let Ok(bytes) = ilcheck::corpus::rewrite_image(&image, &opts, &mut report) {
            written += black_box(bytes).len();
        }
        rewritten += report.rewritten;
    }
    (rewritten, written)
}

/// What a long-running rewriter of many assemblies does: each of `threads` threads takes
/// whole assemblies (largest first) and keeps its engines and writer buffers
/// ([`ilcheck::corpus::RewriteScratch`]) and one output buffer per assembly from one
/// iteration to the next. Returns (bodies rewritten, bytes written).
fn whole_assembly_steady(
    paths: &[PathBuf],
    threads: usize,
    scratch: &[std::sync::Mutex<ilcheck::corpus::RewriteScratch>],
    outputs: &[std::sync::Mutex<Vec<u8>>],
) -> (u64, usize) {
    let mut opts = ilcheck::corpus::RewriteOptions::new("prologue-epilogue").expect("transform");
    opts.threads = 1;
    let next = std::sync::atomic::AtomicUsize::new(0);
    let work = |t: usize| {
        let mut scratch = scratch[t].lock().expect("scratch");
        let (mut rewritten, mut written) = (0, 0);
        loop {
            let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Some(path) = paths.get(k) else {
                return (rewritten, written);
            };
            let Ok(image) = Image::open(path) else {
                continue;
            };
            let mut report = ilcheck::corpus::RewriteReport::default();
            let mut out = outputs[k].lock().expect("output");
            if ilcheck::corpus::rewrite_image_with(
                &image,
                &opts,
                &mut report,
                &mut out,
                &mut scratch,
            )
            .is_ok()
            {
                written += black_box(&*out).len();
            }
            rewritten += report.rewritten;
        }
    };
    std::thread::scope(|s| {
        let others: Vec<_> = (1..threads).map(|t| s.spawn(move || work(t))).collect();
        let mut total = work(0);
        for h in others {
            let (r, w) = h.join().expect("worker");
            total = (total.0 + r, total.1 + w);
        }
        total
    })
}

fn bench_transforms(c: &mut Criterion) {
    let mut rewriter = Rewriter::new();
    let mut out = Vec::new();
    for set in support::generated() {
        let inputs: Vec<_> = set.bodies.iter().map(|b| transform_input(&b.g)).collect();
        let work: GeneratedWork<'_> = inputs
            .iter()
            .zip(&set.bodies)
            .map(|((bytes, resolver), b)| {
                let body = Body::parse(bytes).expect("generated body parses");
                (body, resolver, generated_opts(&b.g))
            })
            .collect();
        let mut g = c.benchmark_group(format!("transform/generated-{}", set.name));
        g.throughput(set.throughput());
        for transform in Transform::ALL {
            let name = transform.name();
            let mut tally = Tally::new();
            let (ok, not, size) =
                run_generated(&work, &mut rewriter, transform, &mut out, Some(&mut tally));
            eprintln!(
                "generated-{} {name}: {ok} rewritten, {not} not {tally:?}, {size} bytes out",
                set.name
            );
            g.bench_function(name, |b| {
                b.iter(|| run_generated(&work, &mut rewriter, transform, &mut out, None))
            });
        }
        g.finish();
    }
    let Some(corpus) = support::corpus("rewrite") else {
        return;
    };
    let mut prepared: Vec<_> = corpus
        .images
        .iter()
        .map(|&image| {
            let (resolver, work) = support::verify_work(image);
            let catch_type = ilcheck::ir::transforms::find_exception_type(image).unwrap_or(0);
            (resolver, work, catch_type)
        })
        .collect();
    let mut g = c.benchmark_group(format!("transform/{}", corpus.name));
    g.throughput(corpus.throughput());
    for transform in Transform::ALL {
        let name = transform.name();
        let mut tally = Tally::new();
        let (ok, not, size) = run_corpus(
            &mut prepared,
            &mut rewriter,
            transform,
            &mut out,
            Some(&mut tally),
        );
        eprintln!(
            "{} {name}: {ok} rewritten, {not} not {tally:?}, {size} bytes out",
            corpus.name
        );
        g.bench_function(name, |b| {
            b.iter(|| run_corpus(&mut prepared, &mut rewriter, transform, &mut out, None))
        });
    }
    g.finish();

    let (rewritten, written) = whole_assembly(&corpus.paths, 1);
    eprintln!(
        "{} whole-assembly: {} assemblies, {rewritten} bodies rewritten, {written} bytes written",
        corpus.name,
        corpus.paths.len()
    );
    let mut g = c.benchmark_group(format!("whole-assembly/{}", corpus.name));
    g.throughput(corpus.throughput());
    g.bench_function("open+prologue-epilogue+verify+write", |b| {
        b.iter(|| whole_assembly(&corpus.paths, 1))
    });
    // The same with every core rewriting methods (the writer stays on one thread per image).
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores > 1 {
        g.bench_function(
            format!("open+prologue-epilogue+verify+write/{cores}-threads"),
            |b| b.iter(|| whole_assembly(&corpus.paths, cores)),
        );
    }
    // Whole assemblies per thread, largest first, with memory kept between iterations: the
    // configuration of `examples/rewrite_corpus … images`.
    let mut by_size = corpus.paths.clone();
    by_size.sort_by_key(|p| std::cmp::Reverse(std::fs::metadata(p).map_or(0, |m| m.len())));
    let scratch: Vec<_> = (0..cores).map(|_| Default::default()).collect();
    let outputs: Vec<_> = by_size.iter().map(|_| Default::default()).collect();
    g.bench_function(
        format!("open+prologue-epilogue+verify+write/{cores}-threads-by-assembly-reusing-memory"),
        |b| b.iter(|| whole_assembly_steady(&by_size, cores, &scratch, &outputs)),
    );
    g.finish();
}

criterion_group!(benches, bench);
criterion_group! {
    name = transforms_and_whole_assembly;
    config = Criterion::default()
        .sample_size(support::SAMPLES)
        .warm_up_time(support::WARM_UP)
        .measurement_time(support::MEASURE);
    targets = bench_transforms
}
criterion_main!(benches, transforms_and_whole_assembly);
