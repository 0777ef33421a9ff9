//! Decode and encode throughput of the body codec, in bytes of IL, on synthetic bodies with an
//! opcode mix close to compiler output (loads, calls, branches, a few switches) and on the real
//! corpus in `/usr/lib/mono/4.5` when it is present (`ILCHECK_BENCH_CORPUS` names another
//! directory).

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ilcheck::body::Body;
use ilcheck::instr::{self, Operand, SwitchTargets};
use ilcheck::opcode::Opcode;
use std::hint::black_box;
use support::Rng;

#[allow(dead_code)]
mod support;

fn synthetic_code(rng: &mut Rng, len: usize) -> Vec<u8> {
    let mut code = Vec::with_capacity(len + 16);
    while code.len() < len {
        let r = rng.next();
        let (op, operand) = match r % 16 {
            0..=3 => (Opcode::Ldarg_0, Operand::None),
            4 => (Opcode::Ldloc_S, Operand::Var((r >> 8) as u8 as u16)),
            5 => (Opcode::Ldc_I4_S, Operand::Int8((r >> 8) as i8)),
            6 | 7 => (
                Opcode::Call,
                Operand::Token(0x0A00_0000 | (r >> 40) as u32 & 0xFFFF),
            ),
            8 => (Opcode::Callvirt, Operand::Token(0x0600_0001)),
            9 => (Opcode::Ldfld, Operand::Token(0x0400_0002)),
            10 => (Opcode::Brtrue_S, Operand::ShortBranch(4)),
            11 => (Opcode::Br, Operand::Branch(-20)),
            12 => (Opcode::Ldstr, Operand::Token(0x7000_0001)),
            13 => (Opcode::Stloc_1, Operand::None),
            14 if r.is_multiple_of(97) => (
                Opcode::Switch,
                Operand::Switch(SwitchTargets::Owned(vec![1, 2, 3, 4])),
            ),
            14 => (Opcode::Ceq, Operand::None),
            _ => (Opcode::Ret, Operand::None),
        };
        instr::encode(op, &operand, &mut code).unwrap();
    }
    code
}

/// Fat bodies of the given code sizes, concatenated 4-byte aligned like in an image.
fn synthetic_bodies(sizes: &[usize]) -> (Vec<u8>, Vec<usize>) {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut image = Vec::new();
    let mut starts = Vec::new();
    for &size in sizes {
        while !image.len().is_multiple_of(4) {
            image.push(0);
        }
        starts.push(image.len());
        let code = synthetic_code(&mut rng, size);
        image.extend_from_slice(&[0x1B, 0x30, 0x08, 0x00]);
        image.extend_from_slice(&(code.len() as u32).to_le_bytes());
        image.extend_from_slice(&0x1100_0001u32.to_le_bytes());
        image.extend_from_slice(&code);
        while !image.len().is_multiple_of(4) {
            image.push(0);
        }
        // One small EH section with a catch clause.
        image.extend_from_slice(&[0x01, 16, 0, 0]);
        image.extend_from_slice(&[0, 0, 0, 0, 4, 4, 0, 4, 1, 0, 0, 1]);
    }
    (image, starts)
}

fn il_bytes(image: &[u8], starts: &[usize]) -> u64 {
    starts
        .iter()
        .map(|&s| Body::parse(&image[s..]).unwrap().code.len() as u64)
        .sum()
}

/// Lossless and canonical encoding of already-parsed bodies into one reused buffer.
fn encode_benches(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    bodies: &[Body<'_>],
    capacity: usize,
) {
    let mut out = Vec::with_capacity(capacity);
    g.bench_function("encode_lossless", |b| {
        b.iter(|| {
            out.clear();
            for body in bodies {
                body.encode(&mut out).unwrap();
            }
            out.len()
        })
    });
    g.bench_function("encode_canonical", |b| {
        b.iter(|| {
            out.clear();
            for body in bodies {
                body.encode_canonical(&mut out).unwrap();
            }
            out.len()
        })
    });
}

fn bench_set(c: &mut Criterion, name: &str, image: &[u8], starts: &[usize]) {
    let il = il_bytes(image, starts);
    let instructions: u64 = starts
        .iter()
        .map(|&s| Body::decode(&image[s..]).unwrap().validate_code().unwrap() as u64)
        .sum();
    let mut g = c.benchmark_group(name);
    g.throughput(Throughput::Bytes(il));
    // Header, sections, and every instruction's opcode and operand bounds checked.
    g.bench_function("decode", |b| {
        b.iter(|| {
            starts
                .iter()
                .map(|&s| Body::decode(black_box(&image[s..])).unwrap().len())
                .sum::<usize>()
        })
    });
    // As `decode`, plus every instruction materialised with its operand.
    g.bench_function("decode_iterate", |b| {
        b.iter(|| {
            let mut n = 0usize;
            for &s in starts {
                let body = Body::parse(black_box(&image[s..])).unwrap();
                for i in body.instructions() {
                    black_box(i.unwrap());
                    n += 1;
                }
            }
            n
        })
    });
    let bodies: Vec<Body<'_>> = starts
        .iter()
        .map(|&s| Body::parse(&image[s..]).unwrap())
        .collect();
    encode_benches(&mut g, &bodies, image.len());
    g.throughput(Throughput::Elements(instructions));
    g.bench_function("count_instructions", |b| {
        b.iter(|| {
            bodies
                .iter()
                .map(|b| instr::count(black_box(b.code)).unwrap())
                .sum::<usize>()
        })
    });
    g.finish();
}

/// Every distinct method body of the real corpus, copied into one 4-byte-aligned buffer.
fn real_corpus() -> Option<(String, Vec<u8>, Vec<usize>)> {
    let dir = std::env::var("ILCHECK_BENCH_CORPUS").unwrap_or_else(|_| "/usr/lib/mono/4.5".into());
    let files = ilcheck::corpus::discover(&[dir.clone().into()]).ok()?;
    let mut image = Vec::new();
    let mut starts = Vec::new();
    for f in files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "dll"))
    {
        let Ok(img) = ilcheck::image::Image::open(f) else {
            continue;
        };
        let mut seen = std::collections::HashSet::new();
        for m in img.methods() {
            if m.rva() == 0 || !seen.insert(m.rva()) {
                continue;
            }
            if let Ok(bytes) = m.body() {
                while !image.len().is_multiple_of(4) {
                    image.push(0);
                }
                starts.push(image.len());
                image.extend_from_slice(bytes);
            }
        }
    }
    (!starts.is_empty()).then_some((dir, image, starts))
}

fn codec(c: &mut Criterion) {
    match real_corpus() {
        Some((dir, image, starts)) => {
            eprintln!("real corpus: {} bodies from {dir}", starts.len());
            bench_set(c, "mono_4.5", &image, &starts);
        }
        None => eprintln!(
            "!!! real corpus absent (install mono-devel or set ILCHECK_BENCH_CORPUS): synthetic bodies only"
        ),
    }
    for (name, sizes) in [
        ("synthetic_small", vec![24usize; 4000]),
        (
            "synthetic_mixed",
            (0..2000).map(|i| 8 + (i * 37) % 600).collect(),
        ),
        ("synthetic_large", vec![70_000usize; 4]),
    ] {
        let (image, starts) = synthetic_bodies(&sizes);
        bench_set(c, name, &image, &starts);
    }
}

// Generator output of three sizes: canonical bodies as the rewriter lays them out, with EH
// clauses, switches, loops and both branch forms. Throughput in bytes of IL and instructions.

fn generated(c: &mut Criterion) {
    for set in support::generated() {
        // The bodies 4-byte aligned in one buffer, as in an image.
        let mut image = Vec::new();
        let mut starts = Vec::new();
        for b in &set.bodies {
            while !image.len().is_multiple_of(4) {
                image.push(0);
            }
            starts.push(image.len());
            image.extend_from_slice(&b.bytes);
        }
        let mut g = c.benchmark_group(format!("codec/generated-{}", set.name));
        g.throughput(set.throughput());
        g.bench_function("decode", |b| {
            b.iter(|| {
                starts
                    .iter()
                    .map(|&s| Body::decode(black_box(&image[s..])).unwrap().len())
                    .sum::<usize>()
            })
        });
        g.bench_function("decode_iterate", |b| {
            b.iter(|| {
                let mut n = 0usize;
                for &s in &starts {
                    let body = Body::parse(black_box(&image[s..])).unwrap();
                    for i in body.instructions() {
                        black_box(i.unwrap());
                        n += 1;
                    }
                }
                n
            })
        });
        let bodies = set.parsed();
        encode_benches(&mut g, &bodies, image.len());
        g.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(std::time::Duration::from_secs(3));
    targets = codec
}
criterion_group! {
    name = generated_bodies;
    config = Criterion::default()
        .sample_size(support::SAMPLES)
        .warm_up_time(support::WARM_UP)
        .measurement_time(support::MEASURE);
    targets = generated
}
criterion_main!(benches, generated_bodies);
