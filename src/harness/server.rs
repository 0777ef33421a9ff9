//! Long-lived execution servers: one runtime process that runs program after program, so the
//! runtime's start — process, framework initialisation, the JIT of the framework code every
//! program uses — is paid once per server instead of once per run.
//!
//! A server is the [host](super::host) started under a runtime. The protocol is one line each
//! way per program, on the server's standard streams:
//!
//! ```text
//! request (stdin):   NONCE PATH                  PATH empty: a ping, nothing runs
//! answer (stdout):   <the program's output>\nNONCE STATUS\n
//! answer (stderr):   <the program's errors>\nNONCE\n
//! ```
//!
//! `NONCE` is 16 random hex digits per request, so nothing a program prints — a line without
//! its newline, a line that looks like an answer, output left over from an earlier program — is
//! taken for an answer. `STATUS` is `ok` when the entry point returned with exit code 0, `exit N`
//! for another code, `threw TYPE` when it threw.
//!
//! **Isolation.** The host loads each program from its bytes (`Assembly.Load(byte[])`), so a
//! program and its rewritten copy — same assembly name — each get a copy of their own, with their
//! own static state. Under CoreCLR every such load is a load context of its own, and the
//! program's dependencies (a probe assembly beside it) are loaded again for it from its
//! directory. Under mono the program's own assembly is likewise new each time, but a dependency
//! is resolved once per server by its name: its static state lasts until the server restarts.
//! (A mono AppDomain per program would isolate dependencies too, but mono 6.8 JITs the
//! framework's code again in every domain, and creating one costs more CPU than a new process.)
//! The program sees an empty standard input, its own standard output and error, and its
//! directory as the current directory, as a process of its own does.
//!
//! **Failures.** A server answers only runs that ended well (`ok`). A timeout, a crash of the
//! runtime, `Environment.Exit`, an exception out of `Main`, a non-zero exit code, output past the
//! limit, or a server that dies: the [`Executor`] kills the server (and what it started), runs
//! that program again in a process of its own — so the failure is reported exactly as without
//! servers — and starts a new server for the next program. Servers are restarted after a number
//! of programs to bound their memory (loaded programs are never unloaded), and when output
//! arrives between requests (something a program started is still running).

use super::host::{HOST_NAME, HostError, host_assembly};
use super::process::{Outcome, ProcessError, kill_group};
use super::runtime::{OUTPUT_LIMIT, RUNTIMECONFIG, Runtime, RuntimeError};
use serde::Serialize;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::time::{Duration, Instant};

/// Programs a server runs before it is restarted, unless told otherwise.
pub const DEFAULT_RESTART_AFTER: u32 = 50;

/// Longest wait for a new server's answer to its first ping.
pub(crate) const START_TIMEOUT: Duration = Duration::from_secs(30);

/// Servers that fail to start this many times in a row are given up: the rest runs fresh.
const GIVE_UP_AFTER: u32 = 3;

/// Why the host could not be written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The host assembly could not be built.
    #[error(transparent)]
    Host(#[from] HostError),
    /// A file could not be written.
    #[error("writing {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's reason.
        source: std::io::Error,
    },
}

/// The host written to a directory of its own, ready to start servers from.
#[derive(Clone, Debug)]
pub struct Host {
    exe: PathBuf,
}

impl Host {
    /// Writes `ilcheck-host.exe` (and its runtimeconfig.json, for running it by hand with
    /// `dotnet`) into `dir`. Nothing else should be there: the runtimes look for a program's
    /// dependencies beside the host before they ask it.
    pub fn write(dir: &Path) -> Result<Host, ServerError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| ServerError::Io { path, source }
        };
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let exe = dir.join(format!("{HOST_NAME}.exe"));
        crate::fsio::write_atomic(&exe, &host_assembly()?).map_err(io(&exe))?;
        let config = dir.join(format!("{HOST_NAME}.runtimeconfig.json"));
        crate::fsio::write_atomic(&config, RUNTIMECONFIG.as_bytes()).map_err(io(&config))?;
        Ok(Host { exe })
    }

    /// The host assembly.
    pub fn exe(&self) -> &Path {
        &self.exe
    }
}

/// Why a server did not answer a request with a run that ended well. The server is not used
/// again (but after [`Unanswered::BadPath`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Unanswered {
    /// The server could not be started, or did not answer its first ping.
    #[error("the server did not start: {0}")]
    Start(String),
    /// The deadline passed without an answer.
    #[error("no answer within the deadline")]
    TimedOut,
    /// The server's process ended (the runtime crashed, or the program ended the process).
    #[error("the server ended")]
    Died,
    /// The program did not return with exit code 0 (`exit 3`, `threw System.Exception`).
    #[error("the program ended with {0}")]
    Status(String),
    /// More output than a run may keep.
    #[error("the program wrote more than {OUTPUT_LIMIT} bytes")]
    Flood,
    /// A path the protocol cannot carry (not UTF-8, or with a line break).
    #[error("the program's path cannot be sent to a server")]
    BadPath,
    /// A stop was requested ([`super::process::request_stop`]).
    #[error("stopped (interrupted)")]
    Stopped,
}

/// A piece of a server's output, from the threads that read its pipes.
enum Chunk {
    Out(Vec<u8>),
    Err(Vec<u8>),
    End,
}

fn pump(mut from: impl Read + Send + 'static, tx: Sender<Chunk>, wrap: fn(Vec<u8>) -> Chunk) {
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => {
                    let _ = tx.send(Chunk::End);
                    break;
                }
                Ok(n) => {
                    if tx.send(wrap(buf[..n].to_vec())).is_err() {
                        break;
                    }
                }
            }
        }
    });
}

/// 16 hex digits no program can predict: std's randomly keyed hasher over the time and a
/// counter.
fn nonce() -> String {
    use std::hash::{BuildHasher, Hasher};
    static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(t.as_nanos());
    }
    format!("{:016x}", h.finish())
}

/// Where `mark` is in `buf` and the end of its line, searching from `*from` (moved on, so
/// a long output is searched once).
fn find_line(buf: &[u8], mark: &[u8], from: &mut usize) -> Option<(usize, usize)> {
    let start = (*from).min(buf.len());
    match buf[start..].windows(mark.len()).position(|w| w == mark) {
        Some(i) => {
            let at = start + i;
            let rest = &buf[at + mark.len()..];
            match rest.iter().position(|&b| b == b'\n') {
                Some(j) => Some((at, at + mark.len() + j + 1)),
                None => {
                    *from = at;
                    None
                }
            }
        }
        None => {
            *from = buf.len().saturating_sub(mark.len().saturating_sub(1));
            None
        }
    }
}

/// One running server.
pub struct Server {
    child: Child,
    stdin: ChildStdin,
    rx: Receiver<Chunk>,
    /// Bytes received and not yet part of an answer.
    out: Vec<u8>,
    err: Vec<u8>,
    ended: bool,
    programs: u32,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("pid", &self.child.id())
            .field("programs", &self.programs)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Starts the host under `runtime` in a process group of its own and waits up to `timeout`
    /// for the answer to a ping.
    pub fn start(runtime: &Runtime, host: &Host, timeout: Duration) -> Result<Server, Unanswered> {
        let mut c = runtime.command(host.exe(), &[]);
        c.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        #[cfg(unix)]
        {
            use std::os::unix::process::CommandExt;
            c.process_group(0);
        }
        let mut child = c
            .spawn()
            .map_err(|e| Unanswered::Start(format!("{}: {e}", runtime.program().display())))?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            kill_group(&mut child);
            let _ = child.wait();
            return Err(Unanswered::Start("no pipes to the server".into()));
        };
        let (tx, rx) = std::sync::mpsc::channel();
        pump(stdout, tx.clone(), Chunk::Out);
        pump(stderr, tx, Chunk::Err);
        let mut server = Server {
            child,
            stdin,
            rx,
            out: Vec::new(),
            err: Vec::new(),
            ended: false,
            programs: 0,
        };
        match server.request("", timeout) {
            Ok(_) => Ok(server),
            Err(e) => {
                // The runtime's complaint may still be in its standard error's pipe when its
                // standard output ends: read both to their ends (bounded) to give the reason.
                kill_group(&mut server.child);
                let by = Instant::now() + Duration::from_secs(1);
                while let Some(left) = by.checked_duration_since(Instant::now()) {
                    match server.rx.recv_timeout(left) {
                        Ok(Chunk::Err(b)) if server.err.len() < OUTPUT_LIMIT => {
                            server.err.extend(b);
                        }
                        Ok(_) => {}
                        Err(_) => break,
                    }
                }
                let err = String::from_utf8_lossy(&server.err);
                Err(Unanswered::Start(
                    match err.lines().map(str::trim).find(|l| !l.is_empty()) {
                        Some(first) => format!("{e}; {first}"),
                        None => e.to_string(),
                    },
                ))
            }
        }
    }

    /// Programs this server has been asked to run.
    pub fn programs(&self) -> u32 {
        self.programs
    }

    /// Nothing has arrived since the last answer and the server is still there: no program
    /// left anything running.
    pub fn is_clean(&mut self) -> bool {
        loop {
            match self.rx.try_recv() {
                Ok(Chunk::Out(b)) => self.out.extend(b),
                Ok(Chunk::Err(b)) => self.err.extend(b),
                Ok(Chunk::End) | Err(TryRecvError::Disconnected) => {
                    self.ended = true;
                    break;
                }
                Err(TryRecvError::Empty) => break,
            }
        }
        !self.ended && self.out.is_empty() && self.err.is_empty()
    }

    /// Runs `exe` within `timeout`: its output when it returned with exit code 0, or why not.
    pub fn run(&mut self, exe: &Path, timeout: Duration) -> Result<Outcome, Unanswered> {
        let path = std::path::absolute(exe).map_err(|_| Unanswered::BadPath)?;
        let path = path.to_str().ok_or(Unanswered::BadPath)?;
        if path.is_empty() || path.contains(['\n', '\r']) {
            return Err(Unanswered::BadPath);
        }
        self.programs += 1;
        let start = Instant::now();
        let (stdout, stderr) = self.request(path, timeout)?;
        Ok(Outcome {
            code: Some(0),
            signal: None,
            timed_out: false,
            stdout,
            stderr,
            truncated: false,
            elapsed: start.elapsed(),
        })
    }

    /// Sends one request and waits for both halves of its answer.
    fn request(&mut self, path: &str, timeout: Duration) -> Result<(Vec<u8>, Vec<u8>), Unanswered> {
        let start = Instant::now();
        let nonce = nonce();
        if self.ended
            || writeln!(self.stdin, "{nonce} {path}")
                .and_then(|()| self.stdin.flush())
                .is_err()
        {
            return Err(Unanswered::Died);
        }
        let out_mark = format!("\n{nonce} ").into_bytes();
        // Its line holds the nonce alone: `find_line` finds the line's end.
        let err_mark = format!("\n{nonce}").into_bytes();
        let (mut out_from, mut err_from) = (0, 0);
        let (mut out_at, mut err_at) = (None, None);
        loop {
            if out_at.is_none() {
                out_at = find_line(&self.out, &out_mark, &mut out_from);
            }
            if err_at.is_none() {
                err_at = find_line(&self.err, &err_mark, &mut err_from);
            }
            if let (Some(o), Some(e)) = (out_at, err_at) {
                let status = String::from_utf8_lossy(&self.out[o.0 + out_mark.len()..o.1])
                    .trim_end()
                    .to_string();
                // Whatever came after an answer stays: the next request sees a server that
                // is not clean.
                let mut stdout: Vec<u8> = self.out.drain(..o.1).collect();
                stdout.truncate(o.0);
                let mut stderr: Vec<u8> = self.err.drain(..e.1).collect();
                stderr.truncate(e.0);
                return if status == "ok" {
                    Ok((stdout, stderr))
                } else {
                    Err(Unanswered::Status(status))
                };
            }
            if self.out.len() > OUTPUT_LIMIT + out_mark.len() + 64
                || self.err.len() > OUTPUT_LIMIT + err_mark.len()
            {
                return Err(Unanswered::Flood);
            }
            if super::process::stop_requested() {
                return Err(Unanswered::Stopped);
            }
            let left = timeout
                .checked_sub(start.elapsed())
                .ok_or(Unanswered::TimedOut)?;
            // In slices, so that a requested stop is seen within one.
            match self.rx.recv_timeout(left.min(STOP_SLICE)) {
                Ok(Chunk::Out(b)) => self.out.extend(b),
                Ok(Chunk::Err(b)) => self.err.extend(b),
                Ok(Chunk::End) | Err(RecvTimeoutError::Disconnected) => {
                    self.ended = true;
                    return Err(Unanswered::Died);
                }
                Err(RecvTimeoutError::Timeout) if left <= STOP_SLICE => {
                    return Err(Unanswered::TimedOut);
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
        }
    }
}

impl Server {
    /// What the program of an unanswered request printed so far (standard output, standard
    /// error), taken from the server's buffers.
    fn take_output(&mut self) -> (Vec<u8>, Vec<u8>) {
        (std::mem::take(&mut self.out), std::mem::take(&mut self.err))
    }
}

/// The longest a server's request waits before it looks whether a stop was requested.
const STOP_SLICE: Duration = Duration::from_millis(20);

impl Drop for Server {
    fn drop(&mut self) {
        // The host would end at the end of its input, but a program it runs may not: the
        // whole group goes.
        kill_group(&mut self.child);
        let _ = self.child.wait();
    }
}

/// How an [`Executor`] uses servers.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// The host to start servers from.
    pub host: Host,
    /// Programs a server runs before it is replaced by a new one.
    pub restart_after: u32,
}

/// What an [`Executor`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct ServerStats {
    /// Runs a server answered.
    pub served: u64,
    /// Runs in a process of their own: all of them without servers, else those a server did
    /// not answer.
    pub fresh: u64,
    /// Runs a server did not answer (crash, exception, exit code, death), run again in a
    /// process of their own.
    pub fallbacks: u64,
    /// Servers started (each start costs one runtime start).
    pub started: u64,
    /// Executors that gave servers up after they failed to start again and again.
    pub given_up: u64,
    /// Runs that reached their deadline, in a server or in a process of their own: each cost
    /// the whole run timeout.
    pub timeouts: u64,
    /// Seconds spent in runs that reached their deadline.
    pub timeout_seconds: f64,
}

impl ServerStats {
    /// Adds `other` to these.
    pub fn add(&mut self, other: &ServerStats) {
        self.served += other.served;
        self.fresh += other.fresh;
        self.fallbacks += other.fallbacks;
        self.started += other.started;
        self.given_up += other.given_up;
        self.timeouts += other.timeouts;
        self.timeout_seconds += other.timeout_seconds;
    }
}

/// Runs programs under one runtime: through a server when it has [`ServerOptions`], in a
/// process of their own otherwise and whenever a server does not answer. Each worker thread
/// owns its executors; a server runs one program at a time.
#[derive(Debug)]
pub struct Executor {
    runtime: Runtime,
    options: Option<ServerOptions>,
    server: Option<Server>,
    start_failures: u32,
    stats: ServerStats,
}

impl Executor {
    /// An executor that runs every program in a process of its own.
    pub fn fresh(runtime: Runtime) -> Executor {
        Executor {
            runtime,
            options: None,
            server: None,
            start_failures: 0,
            stats: ServerStats::default(),
        }
    }

    /// An executor that runs programs through servers of `options`.
    pub fn with_servers(runtime: Runtime, options: ServerOptions) -> Executor {
        Executor {
            options: Some(options),
            ..Executor::fresh(runtime)
        }
    }

    /// The runtime.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// What it did so far.
    pub fn stats(&self) -> ServerStats {
        self.stats
    }

    /// Runs `exe` to its end or `timeout`. Through a server, only a run that ended well is the
    /// server's answer; any other is the answer of a process of its own, as without servers.
    pub fn run(&mut self, exe: &Path, timeout: Duration) -> Result<Outcome, RuntimeError> {
        if let Some(options) = &self.options
            && self.start_failures < GIVE_UP_AFTER
        {
            let restart_after = options.restart_after.max(1);
            if let Some(s) = &mut self.server
                && (s.programs() >= restart_after || !s.is_clean())
            {
                self.server = None;
            }
            if self.server.is_none() {
                self.stats.started += 1;
                match Server::start(&self.runtime, &options.host, timeout.min(START_TIMEOUT)) {
                    Ok(s) => {
                        self.server = Some(s);
                        self.start_failures = 0;
                    }
                    Err(_) => {
                        self.start_failures += 1;
                        if self.start_failures == GIVE_UP_AFTER {
                            self.stats.given_up += 1;
                        }
                    }
                }
            }
            if let Some(s) = &mut self.server {
                let start = std::time::Instant::now();
                match s.run(exe, timeout) {
                    Ok(o) => {
                        self.stats.served += 1;
                        return Ok(o);
                    }
                    Err(Unanswered::Stopped) => {
                        // Dropping the server kills its process group.
                        self.server = None;
                        return Err(RuntimeError::Process(ProcessError::Stopped {
                            program: self.runtime.program().display().to_string(),
                        }));
                    }
                    Err(Unanswered::BadPath) => {}
                    Err(Unanswered::TimedOut) => {
                        // A program that hangs in a server hangs in a process of its own too:
                        // the deadline is its outcome, not worth a second deadline.
                        let elapsed = start.elapsed();
                        let (stdout, stderr) = s.take_output();
                        // Dropping the server kills its process group, as the deadline kills
                        // a process of its own.
                        self.server = None;
                        self.stats.timeouts += 1;
                        self.stats.timeout_seconds += elapsed.as_secs_f64();
                        return Ok(Outcome {
                            code: None,
                            signal: Some(libc::SIGKILL),
                            timed_out: true,
                            stdout,
                            stderr,
                            truncated: false,
                            elapsed,
                        });
                    }
                    Err(_) => {
                        self.server = None;
                        self.stats.fallbacks += 1;
                    }
                }
            }
        }
        self.stats.fresh += 1;
        let out = self.runtime.run(exe, &[], timeout)?;
        if out.timed_out {
            self.stats.timeouts += 1;
            self.stats.timeout_seconds += out.elapsed.as_secs_f64();
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_found_however_the_output_arrives() {
        let mark = b"\nabc ";
        let mut buf = b"@ M0#0 ret 1 trace 0".to_vec();
        let mut from = 0;
        assert_eq!(find_line(&buf, mark, &mut from), None);
        buf.extend_from_slice(b"\nab");
        assert_eq!(find_line(&buf, mark, &mut from), None);
        buf.extend_from_slice(b"c o");
        assert_eq!(find_line(&buf, mark, &mut from), None);
        buf.extend_from_slice(b"k\nleft over");
        let (at, end) = find_line(&buf, mark, &mut from).unwrap();
        assert_eq!(&buf[..at], b"@ M0#0 ret 1 trace 0");
        assert_eq!(&buf[at..end], b"\nabc ok\n");
        // A nonce is not the same twice.
        assert_ne!(nonce(), nonce());
        assert_eq!(nonce().len(), 16);
    }
}
