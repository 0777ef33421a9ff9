//! The verifier over real compiler output: every method body of mono's 4.5 assemblies
//! (`ILCHECK_MONO_DIR` overrides the place), resolved through their own metadata. Skipped
//! loudly when the corpus is absent, and failed instead under `ILCHECK_REQUIRE_MONO=1`. Every
//! assembly must open and every body decode. Prints a summary and the verifier's throughput
//! (use `--release -- --nocapture`).

use crate::support;

use ilcheck::image::Image;
use ilcheck::verify::{Code, ImageResolver, Resolver, Verifier, single_pass_agrees};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A corpus assembly, which must open.
fn open(path: &Path) -> Image<'static> {
    Image::open(path).unwrap_or_else(|e| panic!("{} does not open: {e}", path.display()))
}

/// The assemblies of the mono corpus, sorted; `None` when the corpus is absent (said loudly by
/// `support::mono_corpus`, and a failure under `ILCHECK_REQUIRE_MONO=1`).
fn corpus_files(test: &str) -> Option<Vec<PathBuf>> {
    let dir = support::mono_corpus(test)?;
    let entries = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list the corpus at {}: {e}", dir.display()));
    let mut files: Vec<_> = entries
        .map(|e| e.expect("corpus directory entry").path())
        .filter(|p| {
            p.extension()
                .is_some_and(|x| x.eq_ignore_ascii_case("dll") || x.eq_ignore_ascii_case("exe"))
        })
        .collect();
    assert!(!files.is_empty(), "no assemblies in {}", dir.display());
    files.sort();
    Some(files)
}

/// Findings that compiler output in the corpus is known to contain, by code, with why they are
/// genuine (see the module docs of `ilcheck::verify`).
///
/// `LocallocStackNotEmpty` (unverifiable): Roslyn's `Span<byte> s = stackalloc byte[n]` keeps
/// `n` under the size for the `Span` constructor (`dup … localloc; newobj Span(void*, int32)`);
/// III.3.47 wants only the size on the stack, but the runtimes run it. Exactly the methods in
/// [`EXPECTED_METHODS`].
const EXPECTED: &[Code] = &[Code::LocallocStackNotEmpty];

/// The only methods of the corpus with each [`EXPECTED`] code, by file and token.
const EXPECTED_METHODS: &[(Code, &[&str])] = &[(
    Code::LocallocStackNotEmpty,
    &[
        "System.Net.Http.dll 0x0600044b",
        "System.Security.dll 0x060000be",
    ],
)];

#[test]
fn corpus_verifies_clean() {
    let Some(files) = corpus_files("corpus_verifies_clean") else {
        return;
    };
    let mut verifier = Verifier::new();
    let (mut bodies, mut bytes, mut incomplete) = (0u64, 0u64, 0u64);
    let mut time = Duration::ZERO;
    let mut by_code: BTreeMap<Code, Vec<String>> = BTreeMap::new();
    for path in &files {
        let image = open(path);
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
            verifier.verify(body, &resolver, &ilcheck::verify::Options::ALL);
            incomplete += !verifier.is_complete() as u64;
            bodies += 1;
            bytes += body.code.len() as u64;
        }
        time += start.elapsed();
        // Again, untimed, to name the findings.
        for (method, body, sig, locals) in &work {
            resolver.set_facts(*sig, *locals);
            for d in verifier.verify(body, &resolver, &ilcheck::verify::Options::ALL) {
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
    for (code, methods) in EXPECTED_METHODS {
        // Each line starts "FILE TOKEN …".
        let mut found: Vec<String> = by_code
            .get(code)
            .into_iter()
            .flatten()
            .map(|line| line.split(' ').take(2).collect::<Vec<_>>().join(" "))
            .collect();
        found.sort_unstable();
        found.dedup();
        assert_eq!(
            found, *methods,
            "{code} findings in other methods than expected"
        );
    }
}

/// The verifier's single forward pass (which accepts most bodies, with regions or without)
/// changes no result: the same findings, MaxStack and completeness with it and without it, for
/// every body of the corpus and for mutants of each (three bytes replaced, one at a time, the
/// last byte dropped, and six mutants of its EH table), under the declared MaxStack and with
/// none.
#[test]
fn single_pass_agrees_with_full_passes() {
    let Some(files) = corpus_files("single_pass_agrees_with_full_passes") else {
        return;
    };
    let (mut bodies, mut mutants, mut table_mutants) = (0u64, 0u64, 0u64);
    for path in &files {
        let image = open(path);
        let mut resolver = ImageResolver::new(&image);
        for method in image.methods() {
            if method.rva() == 0 {
                continue;
            }
            let Ok(body) = method.decoded_body() else {
                continue;
            };
            resolver.set_method(&method, &body);
            let clauses: Vec<_> = body.clauses().collect();
            let at = |what: &str, e: String| {
                panic!(
                    "{} {:#010x} ({what}): {e}",
                    path.display(),
                    method.token().0
                )
            };
            let max = body.max_stack();
            if let Err(e) = single_pass_agrees(body.code, &clauses, max, &resolver) {
                at("as compiled", e);
            }
            bodies += 1;
            // A small deterministic mix per method: positions and values from its token.
            let mut seed = u64::from(method.token().0).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let mut code = body.code.to_vec();
            for _ in 0..3 {
                seed ^= seed >> 29;
                seed = seed.wrapping_mul(0xBF58_476D_1CE4_E5B9);
                let pos = (seed >> 8) as usize % code.len();
                let old = code[pos];
                code[pos] = seed as u8;
                if let Err(e) = single_pass_agrees(&code, &clauses, max, &resolver) {
                    at(&format!("byte {pos:#x} set to {:#04x}", seed as u8), e);
                }
                code[pos] = old;
                mutants += 1;
            }
            if code.len() > 1
                && let Err(e) =
                    single_pass_agrees(&code[..code.len() - 1], &clauses, max, &resolver)
            {
                at("last byte dropped", e);
            }
            mutants += 1;
            // The EH table's mutants: a bound moved, a kind changed, clauses reordered,
            // dropped or repeated (the single pass follows regions too).
            for (what, table) in clause_mutants(&clauses, seed) {
                if let Err(e) = single_pass_agrees(&code, &table, max, &resolver) {
                    at(&what, e);
                }
                table_mutants += 1;
            }
        }
    }
    eprintln!(
        "single pass agrees on {bodies} bodies, {mutants} code mutants and {table_mutants} EH \
         table mutants"
    );
    assert!(bodies > 0);
    assert!(table_mutants > 0, "no body of the corpus has an EH table");
}

/// A few deterministic mutants of an EH table (none of an empty one), picked by `seed`: each
/// with what was changed.
fn clause_mutants(
    clauses: &[ilcheck::body::Clause],
    mut seed: u64,
) -> Vec<(String, Vec<ilcheck::body::Clause>)> {
    let mut out = Vec::new();
    if clauses.is_empty() {
        return out;
    }
    let mut next = || {
        seed ^= seed >> 31;
        seed = seed.wrapping_mul(0x94D0_49BB_1331_11EB);
        seed >> 16
    };
    for _ in 0..6 {
        let mut table = clauses.to_vec();
        let k = next() as usize % table.len();
        let delta = [-3i64, -2, -1, 1, 2, 3][next() as usize % 6];
        let field = next() % 8;
        let c = &mut table[k];
        let moved = |v: u32| (i64::from(v) + delta).clamp(0, i64::from(u32::MAX)) as u32;
        let what = match field {
            0 => {
                c.try_offset = moved(c.try_offset);
                "try start"
            }
            1 => {
                c.try_length = moved(c.try_length);
                "try length"
            }
            2 => {
                c.handler_offset = moved(c.handler_offset);
                "handler start"
            }
            3 => {
                c.handler_length = moved(c.handler_length);
                "handler length"
            }
            4 => {
                c.class_or_filter = moved(c.class_or_filter);
                "class or filter"
            }
            5 => {
                c.flags = [0, 1, 2, 4, 3][next() as usize % 5];
                "kind"
            }
            6 if table.len() > 1 => {
                let j = (k + 1) % table.len();
                table.swap(k, j);
                "order"
            }
            6 => {
                table.push(table[k]);
                "a repeat"
            }
            _ => {
                table.remove(k);
                "a drop"
            }
        };
        out.push((format!("clause {k}: {what} changed by {delta}"), table));
    }
    out
}

/// The resolver's cached answers are the image's own: for every method of the corpus, the
/// signature facts and local count `set_method` gives are what `Method::signature` and
/// `Image::local_count` say, and every call token in its body resolves as `Image::method_sig`
/// reads it. The largest assemblies hold far more signature blobs than the resolver's caches
/// have slots, so this covers answers after evictions too.
#[test]
fn resolver_answers_as_the_image_reads_it() {
    use ilcheck::image::Token;
    use ilcheck::opcode::Opcode;
    let Some(files) = corpus_files("resolver_answers_as_the_image_reads_it") else {
        return;
    };
    let (mut methods, mut calls) = (0u64, 0u64);
    for path in &files {
        let image = open(path);
        let mut resolver = ImageResolver::new(&image);
        for method in image.methods() {
            let Ok(body) = method.decoded_body() else {
                continue;
            };
            resolver.set_method(&method, &body);
            let at = format!("{} {:#010x}", path.display(), method.token().0);
            let expected = method.signature().ok().map(|s| {
                (
                    s.param_count as u64 + (s.has_this && !s.explicit_this) as u64,
                    s.returns_void,
                )
            });
            let got = resolver
                .method()
                .map(|m| (m.arg_count as u64, m.returns_void));
            assert_eq!(got, expected, "{at}: method signature");
            let locals = image.local_count(Token(body.local_sig())).ok();
            assert_eq!(resolver.local_count(), locals, "{at}: local count");
            for instr in body.instructions() {
                let Ok(instr) = instr else { break };
                let ilcheck::instr::Operand::Token(token) = instr.operand else {
                    continue;
                };
                if !matches!(
                    instr.opcode,
                    Opcode::Call | Opcode::Callvirt | Opcode::Newobj
                ) {
                    continue;
                }
                let want = image
                    .method_sig(Token(token))
                    .ok()
                    .map(|s| (s.has_this, s.explicit_this, s.returns_void, s.param_count));
                let sig = resolver.call_sig(instr.opcode, token);
                // Vararg call sites count their fixed parameters and extras apart.
                let got = sig.map(|c| {
                    let all = c.param_count as u32 + c.vararg_extra as u32;
                    (c.has_this, c.explicit_this, c.returns_void, all)
                });
                assert_eq!(got, want, "{at}: call {token:#010x}");
                calls += 1;
            }
            methods += 1;
        }
    }
    assert!(methods > 100_000 && calls > 500_000, "{methods} {calls}");
    println!("resolver agrees with the image on {methods} methods and {calls} calls");
}
