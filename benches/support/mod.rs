//! Inputs shared by the benches: generated bodies of several sizes (deterministic choice
//! streams) and the real corpus (`/usr/lib/mono/4.5`, or the directory `ILCHECK_BENCH_CORPUS`
//! names). Each input is announced on stderr with a `bench-input:` line that
//! `scripts/bench-report.sh` copies into the report.

use criterion::Throughput;
use ilcheck::body::Body;
use ilcheck::generate::{Config, Generated, generate_from_bytes};
use ilcheck::image::Image;
use ilcheck::verify::{ImageResolver, MethodSig, Resolver};
use std::path::PathBuf;
use std::time::Duration;

/// Warm-up and measurement time of the groups added here: short, so that the whole
/// `cargo bench` stays within minutes on a shared 2-core machine.
pub const WARM_UP: Duration = Duration::from_secs(1);
pub const MEASURE: Duration = Duration::from_secs(2);
pub const SAMPLES: usize = 10;

/// A deterministic pseudo-random sequence (xorshift), so runs compare.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// One generated body: the generator's output and its bytes as laid out.
pub struct Gen {
    pub g: Generated,
    pub bytes: Vec<u8>,
}

/// Generated bodies of one size class.
pub struct GenSet {
    pub name: &'static str,
    pub bodies: Vec<Gen>,
    pub il_bytes: u64,
    pub instructions: u64,
}

impl GenSet {
    pub fn parsed(&self) -> Vec<Body<'_>> {
        self.bodies
            .iter()
            .map(|b| Body::parse(&b.bytes).expect("generated body parses"))
            .collect()
    }

    pub fn throughput(&self) -> Throughput {
        Throughput::ElementsAndBytes {
            elements: self.instructions,
            bytes: self.il_bytes,
        }
    }
}

/// The size classes: (name, generator config, choice-stream length, bodies). Every set holds a
/// few hundred KB of IL at most, so one iteration takes milliseconds.
fn classes() -> Vec<(&'static str, Config, usize, usize)> {
    vec![
        (
            "small",
            Config {
                max_statements: 4,
                max_nesting: 1,
                max_eh_depth: 1,
                max_expr_depth: 2,
                ..Config::default()
            },
            256,
            2000,
        ),
        ("medium", Config::default(), 4096, 500),
        (
            "large",
            Config {
                min_statements: 500,
                max_statements: 1000,
                max_nesting: 5,
                max_locals: 12,
                tiny_percent: 0,
                ..Config::default()
            },
            1 << 18,
            32,
        ),
    ]
}

/// The generated sets, from fixed seeds.
pub fn generated() -> Vec<GenSet> {
    classes()
        .into_iter()
        .enumerate()
        .map(|(k, (name, config, stream, count))| {
            let mut rng =
                Rng(0x9E37_79B9_7F4A_7C15 ^ (k as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03));
            let bodies: Vec<Gen> = (0..count)
                .map(|_| {
                    let g = generate_from_bytes(&rng.bytes(stream), &config);
                    let bytes = g.encode().expect("generated body lays out");
                    Gen { g, bytes }
                })
                .collect();
            let (mut il_bytes, mut instructions) = (0, 0);
            for b in &bodies {
                let body = Body::parse(&b.bytes).expect("generated body parses");
                il_bytes += body.code.len() as u64;
                instructions += body.instructions().count() as u64;
            }
            eprintln!(
                "bench-input: generated-{name}: {} bodies, {il_bytes} bytes of IL, \
                 {instructions} instructions (ilcheck::generate, {stream}-byte choice streams)",
                bodies.len()
            );
            GenSet {
                name,
                bodies,
                il_bytes,
                instructions,
            }
        })
        .collect()
}

/// The real corpus: top-level assemblies of one directory, kept open for the whole run.
pub struct Corpus {
    pub name: String,
    pub paths: Vec<PathBuf>,
    pub images: Vec<&'static Image<'static>>,
    pub bodies: u64,
    pub il_bytes: u64,
    pub instructions: u64,
}

impl Corpus {
    pub fn throughput(&self) -> Throughput {
        Throughput::ElementsAndBytes {
            elements: self.instructions,
            bytes: self.il_bytes,
        }
    }
}

/// The corpus directory, or a loud note on stderr that it is absent.
pub fn corpus(bench: &str) -> Option<Corpus> {
    let custom = std::env::var_os("ILCHECK_BENCH_CORPUS").map(PathBuf::from);
    let dir = custom
        .clone()
        .unwrap_or_else(|| PathBuf::from("/usr/lib/mono/4.5"));
    let paths: Vec<PathBuf> = ilcheck::corpus::discover(std::slice::from_ref(&dir))
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p.parent() == Some(dir.as_path()))
        .collect();
    let mut opened = Vec::new();
    let mut images = Vec::new();
    for p in paths {
        if let Ok(image) = Image::open(&p) {
            images.push(&*Box::leak(Box::new(image)));
            opened.push(p);
        }
    }
    if images.is_empty() {
        eprintln!(
            "\n!!! {bench}: REAL CORPUS ABSENT ({} has no readable assemblies): the corpus \
             groups are NOT run.\n!!! Install mono (mono-devel) or set ILCHECK_BENCH_CORPUS=DIR.\n",
            dir.display()
        );
        return None;
    }
    let (mut bodies, mut il_bytes, mut instructions) = (0, 0, 0);
    for image in &images {
        for m in image.methods() {
            if let Ok(b) = m.decoded_body() {
                bodies += 1;
                il_bytes += b.code.len() as u64;
                instructions += b.instructions().count() as u64;
            }
        }
    }
    let name = match custom {
        None => "mono-4.5".to_string(),
        Some(_) => dir
            .file_name()
            .map_or_else(|| "corpus".into(), |n| n.to_string_lossy().into_owned()),
    };
    eprintln!(
        "bench-input: {name}: {} ({} assemblies, {bodies} bodies, {il_bytes} bytes of IL, \
         {instructions} instructions)",
        dir.display(),
        images.len()
    );
    Some(Corpus {
        name,
        paths: opened,
        images,
        bodies,
        il_bytes,
        instructions,
    })
}

/// Every body of an image decoded, with the method facts its resolver gives, so that a timed loop
/// covers only `set_facts` and verification (or rewriting).
pub type Work<'a> = Vec<(Body<'a>, Option<MethodSig>, Option<u32>)>;

pub fn verify_work<'i>(image: &'i Image<'i>) -> (ImageResolver<'i>, Work<'i>) {
    let mut resolver = ImageResolver::new(image);
    let mut work = Vec::new();
    for m in image.methods() {
        if let Ok(body) = m.decoded_body() {
            resolver.set_method(&m, &body);
            work.push((body, resolver.method(), resolver.local_count()));
        }
    }
    (resolver, work)
}
