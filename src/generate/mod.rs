//! Generators for tests: valid method bodies by construction, one-rule mutations of them, and
//! an interpreter to compare what a body does before and after a rewrite.
//!
//! One core ([`valid::generate`]) reads every decision from a choice stream; two front ends feed
//! it: [`arbitrary_method`] for fuzz targets and [`strategy::method`] for proptest, whose
//! shrinking of the stream shrinks the program while keeping it valid.

pub mod check;
pub mod config;
pub mod hostile;
pub mod interp;
pub mod mutate;
pub mod strategy;
pub mod valid;

pub use config::{BranchMix, ClauseKinds, Config, ConfigError};
pub use mutate::{Mutant, Mutation, mutate};
pub use valid::{
    ArgType, Callee, Generated, Peer, Shape, Sites, ValType, generate, generate_calling,
    generate_from_bytes,
};

/// Generates a valid method from fuzzer input.
pub fn arbitrary_method(
    u: &mut arbitrary::Unstructured<'_>,
    config: &Config,
) -> arbitrary::Result<Generated> {
    Ok(generate(u, config))
}
