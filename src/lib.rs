//! ilcheck: make .NET IL rewriting safe.
//!
//! - [`opcode`]: the ECMA-335 opcode table, the one source of truth for every other module.
//! - [`instr`]: zero-copy instruction iterator and owned instructions.
//! - [`body`]: lossless and canonical method-body codec (headers, code, EH sections).
//! - [`disasm`]: ildasm-style text for bodies.
//! - [`image`]: assembly reader (PE, CLI header, metadata tables, heaps, signatures, method bodies),
//!   metadata emit and the patched-assembly writer.
//! - [`ir`]: the rewriter: label-based editable bodies, edits, transforms, branch-relaxing layout.
//! - [`verify`]: structural verifier (stack depths, branches, EH regions, prefixes, operands).
//! - `generate` (feature `gen`): valid bodies by construction, one-rule mutators, an IL
//!   interpreter.
//! - [`corpus`]: runs over many assemblies: round trip, verification, rewriting.
//! - [`report`]: terminal summaries, Markdown and SARIF of those runs.
//! - [`harness`]: other programs (mono, CoreCLR) run under deadlines with bounded output.
//! - [`fsio`]: regular-file inputs and atomic outputs.
//! - `properties` (feature `testing`): one property per fuzz target.

pub mod body;
pub mod corpus;
pub mod disasm;
pub mod fsio;
#[cfg(feature = "gen")]
pub mod generate;
pub mod harness;
pub mod image;
pub mod instr;
pub mod ir;
pub mod opcode;
#[cfg(feature = "testing")]
pub mod properties;
pub mod report;
pub mod verify;
