//! Printing without panicking: `println!` panics when standard output is a pipe whose reader
//! has gone (`ilcheck verify … --json | head -1`). Here a reader that stops early ends the
//! printing only: the command still finishes its work (every output file written, every child
//! process reaped) and exits with its own code. Any other write error (a full disk under a
//! redirection) is kept and turns the exit code into 2, so that no report is lost silently.

use std::io::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once standard output's reader has gone: what follows is not written.
static STDOUT_GONE: AtomicBool = AtomicBool::new(false);
/// Set once standard error's reader has gone.
static STDERR_GONE: AtomicBool = AtomicBool::new(false);
/// The first write error other than a closed pipe, for the exit code.
static FAILED: Mutex<Option<String>> = Mutex::new(None);

/// Writes `args` to standard output (see the module documentation).
pub fn stdout(args: std::fmt::Arguments<'_>) {
    write_to(
        std::io::stdout().lock(),
        &STDOUT_GONE,
        "standard output",
        args,
    );
}

/// Writes `args` to standard error (see the module documentation).
pub fn stderr(args: std::fmt::Arguments<'_>) {
    write_to(
        std::io::stderr().lock(),
        &STDERR_GONE,
        "standard error",
        args,
    );
}

fn write_to(mut w: impl Write, gone: &AtomicBool, what: &str, args: std::fmt::Arguments<'_>) {
    if gone.load(Ordering::Relaxed) {
        return;
    }
    if let Err(e) = w.write_fmt(args).and_then(|()| w.flush()) {
        gone.store(true, Ordering::Relaxed);
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            let mut failed = FAILED.lock().unwrap_or_else(|p| p.into_inner());
            failed.get_or_insert_with(|| format!("writing to {what}: {e}"));
        }
    }
}

/// The first write error other than a closed pipe, if any.
pub fn failure() -> Option<String> {
    FAILED.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// `println!` to standard output, never panicking ([`stdout`]).
macro_rules! outln {
    () => { $crate::cli::out::stdout(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::cli::out::stdout(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `print!` to standard output, never panicking ([`stdout`]).
macro_rules! out {
    ($($arg:tt)*) => { $crate::cli::out::stdout(format_args!($($arg)*)) };
}

/// `eprintln!` to standard error, never panicking ([`stderr`]).
macro_rules! errln {
    ($($arg:tt)*) => { $crate::cli::out::stderr(format_args!("{}\n", format_args!($($arg)*))) };
}

pub(crate) use {errln, out, outln};
