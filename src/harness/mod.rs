//! The harness around other programs: runtimes that run assemblies (mono, CoreCLR), and child
//! processes that cannot hang or flood ilcheck. A program that misbehaves — crashes, hangs,
//! writes without end — is a finding about that program, reported as data, never a crash or a
//! hang of ilcheck.

pub mod process;
#[cfg(feature = "gen")]
pub mod program;
pub mod runtime;

pub use process::{Outcome, ProcessError, run_bounded};
pub use runtime::{Runtime, RuntimeError, RuntimeKind};
