//! The harness around other programs: runtimes that run assemblies (mono, CoreCLR), long-lived
//! execution servers that run many programs per runtime start, and child processes that cannot
//! hang or flood ilcheck. A program that misbehaves — crashes, hangs, writes without end — is a
//! finding about that program, reported as data, never a crash or a hang of ilcheck.

#[cfg(feature = "gen")]
pub mod equiv;
#[cfg(feature = "gen")]
pub mod fuzz;
pub mod host;
pub(crate) mod il;
pub mod process;
#[cfg(feature = "gen")]
pub mod program;
pub mod rewriter;
pub mod runtime;
pub mod server;
#[cfg(feature = "gen")]
pub mod type_mutants;

pub use process::{
    Outcome, ProcessError, Usage, Who, request_stop, run_bounded, stop_requested, usage,
};
pub use runtime::{Runtime, RuntimeError, RuntimeKind};
pub use server::{Executor, Host, ServerOptions, ServerStats};
