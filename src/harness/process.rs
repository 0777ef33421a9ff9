//! Child processes under a deadline, with bounded output. The child runs in its own process
//! group, so a timeout kills what it started too; stdout and stderr are drained on threads (a
//! child that fills one pipe while ilcheck waits on the other would otherwise deadlock) and
//! cut at a limit.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How a child process ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The exit code; `None` when a signal ended it (or the deadline did).
    pub code: Option<i32>,
    /// The signal that ended it, on Unix.
    pub signal: Option<i32>,
    /// The deadline passed and the process group was killed.
    pub timed_out: bool,
    /// Its standard output, up to the limit.
    pub stdout: Vec<u8>,
    /// Its standard error, up to the limit.
    pub stderr: Vec<u8>,
    /// Whether either stream was cut at the limit.
    pub truncated: bool,
    /// Wall time from start to exit (or to the kill).
    pub elapsed: Duration,
}

impl Outcome {
    /// Exited by itself with code 0.
    pub fn success(&self) -> bool {
        self.code == Some(0) && !self.timed_out
    }

    /// One line saying how it ended: `exit code 3`, `killed by signal 11`, `timed out after 5 s`.
    pub fn describe(&self) -> String {
        if self.timed_out {
            format!("timed out after {:.1} s", self.elapsed.as_secs_f64())
        } else if let Some(code) = self.code {
            format!("exit code {code}")
        } else if let Some(sig) = self.signal {
            format!("killed by signal {sig}")
        } else {
            "ended without an exit code".to_string()
        }
    }
}

/// Why a child process could not be run at all.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProcessError {
    /// The program could not be started (not found, not executable).
    #[error("cannot start {program}: {source}")]
    Spawn {
        /// The program as given.
        program: String,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// A stop was requested ([`request_stop`]): the child, if it had started, was killed with
    /// its process group.
    #[error("{program}: stopped (interrupted)")]
    Stopped {
        /// The program as given.
        program: String,
    },
    /// Waiting for the child failed.
    #[error("waiting for {program}: {source}")]
    Wait {
        /// The program as given.
        program: String,
        /// The operating system's reason.
        source: std::io::Error,
    },
}

/// Set by [`request_stop`].
static STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Asks every child run by this process to stop: a run under way kills its process group and
/// returns [`ProcessError::Stopped`] within a few milliseconds, and no run starts after it. A
/// signal handler may call it (one atomic store): the command line's on SIGINT and SIGTERM, so
/// that an interrupted `fuzz` or `bench` leaves no rewriter or runtime running and no scratch
/// directory behind.
pub fn request_stop() {
    STOP.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Whether [`request_stop`] was called.
pub fn stop_requested() -> bool {
    STOP.load(std::sync::atomic::Ordering::Relaxed)
}

/// How long the pipes are read after the child has ended and its process group was killed:
/// long enough for the last output still in the pipes, short enough that a process which left
/// the group (`setsid`) holding them open costs little.
const GRACE: Duration = Duration::from_millis(500);

/// Runs `command` to its end or until `timeout`, with stdin closed and each output stream kept up
/// to `output_limit` bytes (the rest is read and dropped, so the child never blocks on a full
/// pipe). On timeout the child's whole process group is killed. When the child ends by itself,
/// whatever it left running in its process group is killed too: a command's run is the command
/// and what it started, and a background process still writing after it (or holding its output
/// open, which would keep a reader waiting for the end of the output) is not part of its result.
pub fn run_bounded(
    command: &mut Command,
    timeout: Duration,
    output_limit: usize,
) -> Result<Outcome, ProcessError> {
    let program = command.get_program().to_string_lossy().into_owned();
    if stop_requested() {
        return Err(ProcessError::Stopped { program });
    }
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        command.process_group(0);
    }
    let start = Instant::now();
    let child = command.spawn().map_err(|source| ProcessError::Spawn {
        program: program.clone(),
        source,
    })?;
    let watched = Watched {
        child,
        start,
        timeout,
        output_limit,
        program,
    };
    #[cfg(unix)]
    return watched.supervise();
    #[cfg(not(unix))]
    return watched.supervise_threads();
}

/// A child being run by [`run_bounded`].
struct Watched {
    child: std::process::Child,
    start: Instant,
    timeout: Duration,
    output_limit: usize,
    program: String,
}

/// One output stream: what is kept of it, and whether more came.
#[derive(Default)]
struct Kept {
    bytes: Vec<u8>,
    cut: bool,
}

impl Kept {
    fn take(&mut self, data: &[u8], limit: usize) {
        let room = limit.saturating_sub(self.bytes.len());
        self.bytes.extend_from_slice(&data[..data.len().min(room)]);
        self.cut |= data.len() > room;
    }
}

impl Watched {
    fn wait_error(&self, source: std::io::Error) -> ProcessError {
        ProcessError::Wait {
            program: self.program.clone(),
            source,
        }
    }

    fn outcome(
        &self,
        status: std::process::ExitStatus,
        timed_out: bool,
        elapsed: Duration,
        out: Kept,
        err: Kept,
    ) -> Outcome {
        #[cfg(unix)]
        let signal = std::os::unix::process::ExitStatusExt::signal(&status);
        #[cfg(not(unix))]
        let signal = None;
        Outcome {
            code: status.code(),
            signal,
            timed_out,
            truncated: out.cut || err.cut,
            stdout: out.bytes,
            stderr: err.bytes,
            elapsed,
        }
    }

    /// One thread reads both pipes (non-blocking, `poll(2)`) and watches the child: the
    /// deadline covers the child, and the reading of its output ends a short [`GRACE`] after
    /// the child and its process group are gone, whoever still holds the pipes.
    #[cfg(unix)]
    fn supervise(mut self) -> Result<Outcome, ProcessError> {
        use std::os::fd::{AsRawFd, OwnedFd};
        // Stdout, then stderr: the pipes' read ends as files, non-blocking; a pipe's file is
        // dropped (closed) at its end.
        let ends = [
            self.child.stdout.take().map(OwnedFd::from),
            self.child.stderr.take().map(OwnedFd::from),
        ];
        let mut pipes: Vec<(Option<std::fs::File>, Kept)> = ends
            .into_iter()
            .map(|end| {
                let file = end.map(std::fs::File::from);
                if let Some(f) = &file {
                    let fd = f.as_raw_fd();
                    // SAFETY: fcntl on a descriptor this process owns (the pipe's read end).
                    unsafe {
                        let flags = libc::fcntl(fd, libc::F_GETFL);
                        if flags >= 0 {
                            libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
                        }
                    }
                }
                (file, Kept::default())
            })
            .collect();
        let mut buf = vec![0u8; 64 * 1024];
        let mut timed_out = false;
        // Set once the child has been reaped: its status, when it ended, and when reading stops.
        let mut ended: Option<(std::process::ExitStatus, Duration, Instant)> = None;
        loop {
            if ended.is_none() {
                let exited = match leader_exited(&self.child) {
                    Ok(e) => e,
                    Err(source) => {
                        kill_group(&mut self.child);
                        let _ = self.child.wait();
                        return Err(self.wait_error(source));
                    }
                };
                if !exited && stop_requested() {
                    kill_group(&mut self.child);
                    let _ = self.child.wait();
                    return Err(ProcessError::Stopped {
                        program: self.program.clone(),
                    });
                }
                let late = !exited && self.start.elapsed() >= self.timeout;
                if exited || late {
                    timed_out = late;
                    // The child is not reaped yet (a zombie holds its pid and process group),
                    // so the group signalled is its own whatever happened since.
                    kill_group(&mut self.child);
                    let elapsed = self.start.elapsed();
                    let status = self.child.wait().map_err(|e| self.wait_error(e))?;
                    ended = Some((status, elapsed, Instant::now() + GRACE));
                }
            }
            if let Some((_, _, stop)) = ended
                && (pipes.iter().all(|(f, _)| f.is_none()) || Instant::now() >= stop)
            {
                break;
            }
            let wait = match ended {
                Some((_, _, stop)) => stop.saturating_duration_since(Instant::now()),
                None => poll_interval(self.start.elapsed())
                    .min(self.timeout.saturating_sub(self.start.elapsed())),
            };
            let mut fds: Vec<libc::pollfd> = pipes
                .iter()
                .filter_map(|(f, _)| f.as_ref())
                .map(|f| libc::pollfd {
                    fd: f.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                })
                .collect();
            let ms = wait.as_millis().clamp(1, i32::MAX as u128) as i32;
            // SAFETY: `fds` is a live array of `fds.len()` pollfd structs; with none, poll
            // only sleeps.
            let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
            if ready <= 0 {
                continue;
            }
            for f in fds.iter().filter(|f| f.revents != 0) {
                let at = |(file, _): &(Option<std::fs::File>, Kept)| {
                    file.as_ref().is_some_and(|x| x.as_raw_fd() == f.fd)
                };
                let Some(k) = pipes.iter().position(at) else {
                    continue;
                };
                let (file, kept) = &mut pipes[k];
                while let Some(reader) = file {
                    match reader.read(&mut buf) {
                        Ok(0) => *file = None,
                        Ok(n) => kept.take(&buf[..n], self.output_limit),
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(_) => *file = None,
                    }
                }
            }
        }
        let (status, elapsed, _) = ended.expect("the loop ends only once the child has ended");
        let mut kept = pipes.into_iter().map(|(_, k)| k);
        let (out, err) = (kept.next(), kept.next());
        Ok(self.outcome(
            status,
            timed_out,
            elapsed,
            out.unwrap_or_default(),
            err.unwrap_or_default(),
        ))
    }

    /// Where there is no `poll(2)`: a thread drains each pipe, and the deadline covers the
    /// child alone.
    #[cfg(not(unix))]
    fn supervise_threads(mut self) -> Result<Outcome, ProcessError> {
        let limit = self.output_limit;
        let drain = move |mut stream: Box<dyn Read + Send>| {
            let mut kept = Kept::default();
            let mut buf = [0u8; 8192];
            while let Ok(n) = stream.read(&mut buf) {
                if n == 0 {
                    break;
                }
                kept.take(&buf[..n], limit);
            }
            kept
        };
        let out = self.child.stdout.take().map(|s| {
            let s: Box<dyn Read + Send> = Box::new(s);
            std::thread::spawn(move || drain(s))
        });
        let err = self.child.stderr.take().map(|s| {
            let s: Box<dyn Read + Send> = Box::new(s);
            std::thread::spawn(move || drain(s))
        });
        let mut timed_out = false;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if stop_requested() => {
                    kill_group(&mut self.child);
                    let _ = self.child.wait();
                    return Err(ProcessError::Stopped {
                        program: self.program.clone(),
                    });
                }
                Ok(None) if self.start.elapsed() >= self.timeout => {
                    timed_out = true;
                    kill_group(&mut self.child);
                    break self.child.wait().map_err(|e| self.wait_error(e))?;
                }
                Ok(None) => std::thread::sleep(poll_interval(self.start.elapsed())),
                Err(source) => {
                    kill_group(&mut self.child);
                    return Err(self.wait_error(source));
                }
            }
        };
        let elapsed = self.start.elapsed();
        let join = |h: Option<std::thread::JoinHandle<Kept>>| {
            h.and_then(|h| h.join().ok()).unwrap_or_default()
        };
        let (out, err) = (join(out), join(err));
        Ok(self.outcome(status, timed_out, elapsed, out, err))
    }
}

/// Whether the child has ended, without reaping it (`waitid` with `WNOWAIT`): until it is
/// reaped its pid cannot be reused, so its process group can still be signalled safely.
#[cfg(unix)]
fn leader_exited(child: &std::process::Child) -> std::io::Result<bool> {
    let pid: libc::id_t = child.id();
    // SAFETY: waitid writes one siginfo_t that we own and zero-initialised; WNOWAIT leaves the
    // child to be reaped by `Child::wait`.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let r = unsafe {
        libc::waitid(
            libc::P_PID,
            pid,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // With WNOHANG, a child that has not changed state leaves si_pid zero.
    // SAFETY: the field is set by waitid for an exited child, and zero as initialised.
    Ok(unsafe { info.si_pid() } != 0)
}

/// Short sleeps at first (most children here finish in milliseconds), longer ones later.
fn poll_interval(elapsed: Duration) -> Duration {
    if elapsed < Duration::from_millis(50) {
        Duration::from_millis(1)
    } else if elapsed < Duration::from_secs(1) {
        Duration::from_millis(5)
    } else {
        Duration::from_millis(25)
    }
}

/// Kills the child's process group (what it started too), then the child itself.
pub(crate) fn kill_group(child: &mut std::process::Child) {
    #[cfg(unix)]
    if let Ok(pid) = i32::try_from(child.id()) {
        // SAFETY: kill(2) with a negative pid signals the process group the child leads (it was
        // started with process_group(0)); no memory is involved.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
    let _ = child.kill();
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.args(["-c", script]);
        c
    }

    #[test]
    fn a_hang_is_killed_with_what_it_started() {
        // The shell starts a sleeping grandchild that holds the pipes open.
        let o = run_bounded(
            &mut sh("sleep 30 & sleep 30"),
            Duration::from_millis(200),
            1024,
        )
        .unwrap();
        assert!(o.timed_out && !o.success(), "{o:?}");
        assert!(o.elapsed < Duration::from_secs(10), "{o:?}");
        assert!(o.describe().starts_with("timed out"));
    }

    /// Whether a process `pid` is alive (a zombie counts as gone).
    fn alive(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|r| !r.trim_start().starts_with('Z'))
        })
    }

    #[test]
    fn a_child_that_leaves_a_process_behind_ends_at_once_and_takes_it_along() {
        // The shell exits 0 at once; its background child holds both pipes open for 30 s.
        let o = run_bounded(
            &mut sh("sleep 30 & echo $!; echo done"),
            Duration::from_secs(20),
            1024,
        )
        .unwrap();
        assert!(o.success(), "{o:?}");
        assert!(o.elapsed < Duration::from_secs(5), "{o:?}");
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        let mut lines = text.lines();
        let stray: i32 = lines
            .next()
            .and_then(|l| l.trim().parse().ok())
            .expect("its pid");
        assert_eq!(lines.next(), Some("done"), "{o:?}");
        // Killed with the group once the shell had ended: gone, or a zombie about to be reaped
        // by init.
        let by = Instant::now() + Duration::from_secs(5);
        while alive(stray) && Instant::now() < by {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            !alive(stray),
            "the background process {stray} outlived its command"
        );
    }

    #[test]
    fn a_process_that_left_the_group_holding_the_pipes_costs_a_short_grace() {
        // `setsid` takes the sleeper out of the group the timeout kills; it still holds the
        // pipes. The run ends when the shell has, plus the grace.
        let o = run_bounded(
            &mut sh("setsid sleep 30 & echo $!"),
            Duration::from_secs(20),
            1024,
        )
        .unwrap();
        let escaped: Option<i32> = String::from_utf8_lossy(&o.stdout).trim().parse().ok();
        assert!(o.success() && escaped.is_some(), "{o:?}");
        assert!(o.elapsed < Duration::from_secs(5), "{o:?}");
        let started = Instant::now();
        let late = run_bounded(
            &mut sh("setsid sleep 30 & echo $!; sleep 30"),
            Duration::from_millis(300),
            1024,
        )
        .unwrap();
        assert!(late.timed_out, "{late:?}");
        assert!(started.elapsed() < Duration::from_secs(5), "{late:?}");
        let late: Option<i32> = String::from_utf8_lossy(&late.stdout).trim().parse().ok();
        for pid in escaped.into_iter().chain(late) {
            // SAFETY: kill(2) of a process this test started, out of every group it knows.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }

    #[test]
    fn output_is_bounded_and_the_child_is_not_blocked() {
        let o = run_bounded(
            &mut sh("head -c 3000000 /dev/zero; echo done >&2; exit 3"),
            Duration::from_secs(30),
            1000,
        )
        .unwrap();
        assert_eq!(o.code, Some(3));
        assert_eq!(o.stdout.len(), 1000);
        assert!(o.truncated);
        assert_eq!(o.stderr, b"done\n");
        assert_eq!(o.describe(), "exit code 3");
    }

    #[test]
    fn a_crash_is_reported_with_its_signal() {
        let o = run_bounded(&mut sh("kill -SEGV $$"), Duration::from_secs(30), 1000).unwrap();
        assert_eq!(o.signal, Some(11), "{o:?}");
        assert_eq!(o.describe(), "killed by signal 11");
        let missing = run_bounded(
            &mut Command::new("/no/such/program"),
            Duration::from_secs(1),
            10,
        );
        assert!(matches!(missing, Err(ProcessError::Spawn { .. })));
    }
}

/// CPU time (user and system, seconds) and peak resident set (KiB) of a process's own threads
/// or of its children that have ended, from `getrusage`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Usage {
    /// User plus system CPU seconds.
    pub cpu_seconds: f64,
    /// Peak resident set size in KiB (for children: the largest of them).
    pub max_rss_kib: u64,
}

/// Whose usage [`usage`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Who {
    /// This process, all its threads.
    SelfProcess,
    /// Every child this process has waited for.
    Children,
}

/// The resource usage of `who` so far; zero where the platform cannot say.
pub fn usage(who: Who) -> Usage {
    #[cfg(unix)]
    {
        let which = match who {
            Who::SelfProcess => libc::RUSAGE_SELF,
            Who::Children => libc::RUSAGE_CHILDREN,
        };
        // SAFETY: getrusage writes one plain struct that we own and zero-initialised.
        let mut r: libc::rusage = unsafe { std::mem::zeroed() };
        if unsafe { libc::getrusage(which, &mut r) } != 0 {
            return Usage::default();
        }
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        Usage {
            cpu_seconds: secs(r.ru_utime) + secs(r.ru_stime),
            max_rss_kib: r.ru_maxrss.max(0) as u64,
        }
    }
    #[cfg(not(unix))]
    {
        let _ = who;
        Usage::default()
    }
}
