//! ilcheck: make .NET IL rewriting safe.
//!
//! Read an assembly, rewrite a method, verify the result, write the patched assembly:
//!
//! ```
//! use ilcheck::{
//!     Body, Image, ImageResolver, ImageWriter, LayoutOptions, Resolver, Rewriter, Transform,
//!     TransformOptions, Verifier, verify::Options,
//! };
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Any assembly: here one of the project's own, built into the library.
//! let (_, bytes) = ilcheck::corpus::EMBEDDED
//!     .iter()
//!     .find(|(name, _)| name.ends_with("control_flow.exe"))
//!     .expect("an embedded program");
//! let image = Image::parse(bytes)?; // Image::open(path) maps a file
//! let method = image
//!     .methods()
//!     .find(|m| m.full_name().is_ok_and(|n| n.contains("::Nested(")))
//!     .expect("the method");
//! let body = method.decoded_body()?;
//!
//! // The method's own metadata resolves signatures, locals and tokens.
//! let mut resolver = ImageResolver::new(&image);
//! resolver.set_method(&method, &body);
//! let opts = TransformOptions {
//!     returns_void: resolver.method().map(|s| s.returns_void),
//!     ..TransformOptions::default()
//! };
//!
//! // Lift, transform, lay out (branch relaxation, EH table, header, MaxStack), verify: an
//! // invalid result is an error, never bytes.
//! let mut new_body = Vec::new();
//! Rewriter::new().rewrite(
//!     &body,
//!     Transform::PrologueEpilogue,
//!     &opts,
//!     &LayoutOptions::default(),
//!     &resolver,
//!     &mut new_body,
//! )?;
//! let rewritten = Body::decode(&new_body)?;
//! assert!(Verifier::new().verify(&rewritten, &resolver, &Options::ALL).is_empty());
//!
//! // The patched assembly: bodies in place or relocated, read back before it is returned.
//! let mut writer = ImageWriter::new(&image);
//! writer.replace_body(method.rid(), &new_body)?;
//! let patched = writer.finish()?;
//! let again = Image::parse(&patched.bytes)?;
//! assert_eq!(again.method(method.rid())?.body()?, &new_body[..]);
//!
//! // The whole image, as `ilcheck verify` checks files: integrity, every body's structure
//! // and, with `types`, its types (references resolved beside it or in the runtime's
//! // directories; what does not resolve is checked in part, never guessed).
//! use ilcheck::corpus::{Input, VerifyOptions, VerifyReport};
//! let mut report = VerifyReport::default();
//! let opts = VerifyOptions { types: true, ..VerifyOptions::default() };
//! let input = Input::memory("control_flow.exe", patched.bytes.clone());
//! ilcheck::corpus::verify(&[input], opts, None, &mut report, |_| {});
//! assert_eq!((report.assemblies, report.findings.len()), (1, 0));
//! assert!(report.types.is_some_and(|t| t.methods_checked > 0));
//! // ilcheck::fsio::write_atomic(path, &patched.bytes)? writes it without ever leaving a
//! // partial file under the name.
//! # Ok(())
//! # }
//! ```
//!
//! The modules, layer by layer (`ARCHITECTURE.md` in the repository has the map):
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

#![warn(missing_docs)]

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

#[cfg(test)]
pub(crate) mod test_rng;

pub use body::Body;
pub use image::emit::MetadataBuilder;
pub use image::writer::{ImageWriter, PatchedImage};
pub use image::{Image, ImageError, Table, Token};
pub use ir::{LayoutOptions, Rewriter, Transform, TransformOptions, transforms};
pub use verify::{Code, Diagnostic, ImageResolver, Resolver, Verifier};
