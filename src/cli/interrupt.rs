//! SIGINT and SIGTERM for the commands that run long (`fuzz`, `bench`, `equiv`, `rewrite`): the
//! first signal asks every child run to stop ([`ilcheck::harness::request_stop`]), so the
//! command kills what it started, removes its scratch directories and temporary files and
//! reports what it did so far; a second signal ends the process at once (the handler is reset
//! on first use).

/// The exit code of a command that stopped on a signal (128 + SIGINT, as shells report it).
pub const EXIT_STOPPED: u8 = 130;

/// Installs the handler for SIGINT and SIGTERM.
pub fn install() {
    #[cfg(unix)]
    {
        extern "C" fn on_signal(_: libc::c_int) {
            // One atomic store: safe in a signal handler.
            ilcheck::harness::request_stop();
        }
        // SAFETY: sigaction with a handler that only stores an atomic; the struct is ours,
        // zero-initialised, its mask emptied by sigemptyset.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            sa.sa_flags = libc::SA_RESETHAND | libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            for sig in [libc::SIGINT, libc::SIGTERM] {
                libc::sigaction(sig, &sa, std::ptr::null_mut());
            }
        }
    }
}
