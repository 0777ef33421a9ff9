//! ilcheck's integration tests, one binary with a module per area (one link, one process);
//! run one area with `cargo test --release --test it fuzz::`.
//!
//! - `align`: baseline alignment (`verify --baseline`) of correct and broken rewrites.
//! - `cli`: the command line's exit codes, JSON and SARIF output, and baseline comparison.
//! - `codec_fixtures`: rare body encodings round-trip byte for byte, with their reasons.
//! - `codec_props`: property tests of the body codec.
//! - `codec_vectors`: published byte vectors of the method-body format.
//! - `data_safety`: outputs replaced atomically; inputs never harmed.
//! - `disasm_names`: token operands named from metadata as ILAsm and monodis read them.
//! - `emit`: metadata emit end to end, also across the 2^16 index-width limits.
//! - `fuzz`: `generate`, `fuzz` and `equiv` end to end.
//! - `gen_props`: properties over generated bodies and their mutations.
//! - `golden`: golden output of `verify` (text, JSON, SARIF, Markdown) in `tests/golden/`.
//! - `hostile_images`: the hostile-image corpus through the command line.
//! - `image`: the assembly reader over mono's class libraries.
//! - `opcodes_exhaustive`: every opcode encodes and decodes; every undefined one is an error.
//! - `probes`: entry and exit probes by name under mono and CoreCLR.
//! - `readme`: every `$ command` example in README.md runs as written.
//! - `regressions`: `corpus/regressions/` replayed through the fuzz targets' properties.
//! - `rewrite_corpus`: the rewriter over the project's and mono's compiler output.
//! - `rewrite_edges`: the rewriter at its edges (relaxation limits, regions, prefixes).
//! - `rewrite_oracle`: every transform of the C# programs run under mono and CoreCLR.
//! - `rewrite_props`: random edit sequences over real bodies.
//! - `roundtrip`: corpus round trips.
//! - `server`: runtime servers against processes of their own.
//! - `type_mutants`: the type mutators against the type pass and CoreCLR.
//! - `types`: the type pass on cases, frameworks and generated programs.
//! - `verify_cases`: `corpus/bin/verify_cases.dll` reports the codes its method names list.
//! - `verify_corpus`: the verifier over mono's class libraries.
//! - `verify_runs`: runs over many inputs report the same on any number of threads.
//! - `weavers`: the sample Mono.Cecil weaver and its seeded bugs.
//! - `writer`: the image writer.
//!
//! `support` holds what they share: where mono's corpus and tools are, and builders of the
//! probe assembly and the sample rewriters.

mod support;

mod align;
mod cli;
mod codec_fixtures;
mod codec_props;
mod codec_vectors;
mod data_safety;
mod disasm_names;
mod emit;
mod fuzz;
mod gen_props;
mod golden;
mod hostile_images;
mod image;
mod opcodes_exhaustive;
mod probes;
mod readme;
mod regressions;
mod rewrite_corpus;
mod rewrite_edges;
mod rewrite_oracle;
mod rewrite_props;
mod roundtrip;
mod server;
mod type_mutants;
mod types;
mod verify_cases;
mod verify_corpus;
mod verify_runs;
mod weavers;
mod writer;
