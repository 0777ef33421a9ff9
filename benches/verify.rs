//! Verifier throughput, in MB/s of IL and instructions/s (one measurement, both throughputs):
//! on generated bodies of three sizes with their synthetic resolvers, and on the real corpus
//! (`/usr/lib/mono/4.5`, or `ILCHECK_BENCH_CORPUS=DIR`) with one `ImageResolver` per assembly.
//! Bodies are decoded beforehand; the timed loop sets each method's facts and verifies it.
//! `types-CORPUS` times the type pass over the same corpus: per assembly a fresh type system
//! (references opened once, shared by the iterations, as in a run) and every method checked.
//! `types-warm-CORPUS` checks the same methods with type systems kept from one iteration to the
//! next: every signature and type already resolved, it times the dataflow and the rules alone,
//! and the difference between the two rows is what resolution costs a run.

#[allow(dead_code)]
mod support;

use criterion::{Criterion, criterion_group, criterion_main};
use ilcheck::verify::types::{ModuleStore, TypeChecker, TypeSystem};
use ilcheck::verify::{ImageResolver, Verifier};
use std::hint::black_box;

/// One assembly's decoded bodies with the facts `set_method` found for each.
type Prepared<'i> = (ImageResolver<'i>, support::Work<'i>);

fn prepare(corpus: &support::Corpus) -> Vec<Prepared<'static>> {
    corpus
        .images
        .iter()
        .map(|&image| support::verify_work(image))
        .collect()
}

/// Verifies every body; returns the number of findings.
fn verify_corpus(prepared: &mut [Prepared<'_>], verifier: &mut Verifier) -> usize {
    let mut findings = 0;
    for (resolver, work) in prepared.iter_mut() {
        for (body, sig, locals) in work.iter() {
            resolver.set_facts(*sig, *locals);
            findings += verifier
                .verify(black_box(body), &*resolver, &ilcheck::verify::Options::ALL)
                .len();
        }
    }
    findings
}

fn verify(c: &mut Criterion) {
    let mut verifier = Verifier::new();
    let sets = support::generated();
    let corpus = support::corpus("verify");
    // One group, one row per input: each sets its own throughput.
    let mut g = c.benchmark_group("verify");
    for set in &sets {
        let bodies = set.parsed();
        let findings: usize = set
            .bodies
            .iter()
            .zip(&bodies)
            .map(|(g, b)| {
                verifier
                    .verify(b, &g.g.resolver, &ilcheck::verify::Options::ALL)
                    .len()
            })
            .sum();
        assert_eq!(findings, 0, "generated bodies verify clean");
        g.throughput(set.throughput());
        g.bench_function(format!("generated-{}", set.name), |b| {
            b.iter(|| {
                set.bodies
                    .iter()
                    .zip(&bodies)
                    .map(|(g, b)| {
                        verifier
                            .verify(black_box(b), &g.g.resolver, &ilcheck::verify::Options::ALL)
                            .len()
                    })
                    .sum::<usize>()
            })
        });
    }
    if let Some(corpus) = &corpus {
        let mut prepared = prepare(corpus);
        let findings = verify_corpus(&mut prepared, &mut verifier);
        eprintln!(
            "{}: {} bodies verified, {findings} findings",
            corpus.name, corpus.bodies
        );
        g.throughput(corpus.throughput());
        g.bench_function(corpus.name.as_str(), |b| {
            b.iter(|| verify_corpus(&mut prepared, &mut verifier))
        });
        let store = ModuleStore::with_runtime_dirs(Vec::new());
        let bodies: Vec<Vec<(u32, ilcheck::body::Body<'static>)>> = corpus
            .images
            .iter()
            .map(|image| {
                image
                    .methods()
                    .filter(|m| m.rva() != 0)
                    .filter_map(|m| Some((m.rid(), m.decoded_body().ok()?)))
                    .collect()
            })
            .collect();
        let mut checker = TypeChecker::new();
        let mut type_check = || {
            let mut findings = 0;
            for (image, bodies) in corpus.images.iter().zip(&bodies) {
                let mut ts = TypeSystem::new(&store, image, None);
                // As the CLI's type pass does when it checks most of an image's methods.
                ts.read_ahead();
                for (rid, body) in bodies {
                    findings += checker
                        .check(&mut ts, *rid, black_box(body))
                        .diagnostics
                        .len();
                }
            }
            findings
        };
        eprintln!("{}: type pass, {} findings", corpus.name, type_check());
        g.bench_function(format!("types-{}", corpus.name), |b| {
            b.iter(&mut type_check)
        });
        let mut systems: Vec<TypeSystem<'_>> = corpus
            .images
            .iter()
            .map(|image| TypeSystem::new(&store, image, None))
            .collect();
        let mut warm_check = || {
            let mut findings = 0;
            for (ts, bodies) in systems.iter_mut().zip(&bodies) {
                for (rid, body) in bodies {
                    findings += checker.check(ts, *rid, black_box(body)).diagnostics.len();
                }
            }
            findings
        };
        eprintln!("{}: warm type pass, {} findings", corpus.name, warm_check());
        g.bench_function(format!("types-warm-{}", corpus.name), |b| {
            b.iter(&mut warm_check)
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(support::SAMPLES)
        .warm_up_time(support::WARM_UP)
        .measurement_time(support::MEASURE);
    targets = verify
}
criterion_main!(benches);
