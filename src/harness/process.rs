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
    /// Waiting for the child failed.
    #[error("waiting for {program}: {source}")]
    Wait {
        /// The program as given.
        program: String,
        /// The operating system's reason.
        source: std::io::Error,
    },
}

/// Reads `stream` to its end, keeping at most `limit` bytes; returns them and whether more came.
fn drain(mut stream: impl Read, limit: usize) -> (Vec<u8>, bool) {
    let mut kept = Vec::new();
    let mut buf = [0u8; 8192];
    let mut cut = false;
    loop {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = limit.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
                cut |= n > room;
            }
        }
    }
    (kept, cut)
}

/// Runs `command` to its end or until `timeout`, with stdin closed and each output stream kept up
/// to `output_limit` bytes (the rest is read and dropped, so the child never blocks on a full
/// pipe). On timeout the child's whole process group is killed.
pub fn run_bounded(
    command: &mut Command,
    timeout: Duration,
    output_limit: usize,
) -> Result<Outcome, ProcessError> {
    let program = command.get_program().to_string_lossy().into_owned();
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
    let mut child = command.spawn().map_err(|source| ProcessError::Spawn {
        program: program.clone(),
        source,
    })?;
    let out = child
        .stdout
        .take()
        .map(|s| std::thread::spawn(move || drain(s, output_limit)));
    let err = child
        .stderr
        .take()
        .map(|s| std::thread::spawn(move || drain(s, output_limit)));
    let mut timed_out = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if start.elapsed() >= timeout => {
                timed_out = true;
                kill_group(&mut child);
                break child.wait().map_err(|source| ProcessError::Wait {
                    program: program.clone(),
                    source,
                })?;
            }
            Ok(None) => std::thread::sleep(poll_interval(start.elapsed())),
            Err(source) => {
                kill_group(&mut child);
                return Err(ProcessError::Wait { program, source });
            }
        }
    };
    let elapsed = start.elapsed();
    let join = |h: Option<std::thread::JoinHandle<(Vec<u8>, bool)>>| {
        h.and_then(|h| h.join().ok()).unwrap_or_default()
    };
    let (stdout, cut_out) = join(out);
    let (stderr, cut_err) = join(err);
    #[cfg(unix)]
    let signal = std::os::unix::process::ExitStatusExt::signal(&status);
    #[cfg(not(unix))]
    let signal = None;
    Ok(Outcome {
        code: status.code(),
        signal,
        timed_out,
        stdout,
        stderr,
        truncated: cut_out || cut_err,
        elapsed,
    })
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
