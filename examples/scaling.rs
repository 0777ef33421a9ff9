//! How the disassembler, the verifier and the rewriter scale with the size of one body, on the
//! hostile shapes of [`ilcheck::generate::hostile`]: each case runs in a fresh child process,
//! which reports its time and its memory high-water marks, and the parent prints a Markdown
//! table with the growth factor of each ×10 step.
//!
//! `cargo run --release --example scaling -- [--sizes 10000,100000,1000000] [--timeout SECS]
//! [--shapes a,b] [--ops a,b] [--out FILE.md]`, or `-- --compare BEFORE.md AFTER.md` for a
//! table of two such outputs side by side: time at each size and peak RSS at the largest size
//! both ran, checked against `peak RSS ≤ 4 × body + 3 MB` (the body is the input; 3 MB is
//! the process's resident baseline).
//!
//! Shapes: `straight-line`, `sequential-try`, `nested-try`, `cascade`. Ops: `disasm` (decode and
//! the ildasm-style text), `verify` (decode and verify), `rewrite-keep` and `rewrite-short`
//! (decode and `prologue-epilogue`, with `--branches keep` or `short`: lift or splice, relax,
//! verify, encode). A case that exceeds the timeout (default 60 s) is killed and shown as
//! `> T s`; the larger sizes of that row are not run.
//!
//! Memory: `peak RSS` is the process's VmHWM over the operation (the high-water mark is reset
//! just before it, so the body's own bytes count, the building of it does not); `heap` is the
//! allocation high-water mark above what was live when the operation started, from a counting
//! global allocator. Both are also shown as a multiple of the body's size.

use ilcheck::body::Body;
use ilcheck::generate::hostile::{Hostile, Shape};
use ilcheck::ir::{BranchForms, LayoutOptions, Rewriter, Transform, TransformOptions};
use ilcheck::verify::{NoResolver, Verifier};
use std::alloc::{GlobalAlloc, Layout, System};
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Counts live heap bytes and their high-water mark.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is passed on.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is passed on.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is passed on.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract is passed on.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            grew(new_size);
        }
        p
    }
}

fn grew(size: usize) {
    let live = LIVE.fetch_add(size, Ordering::Relaxed) + size;
    PEAK.fetch_max(live, Ordering::Relaxed);
}

#[global_allocator]
static ALLOC: Counting = Counting;

const OPS: [&str; 4] = ["disasm", "verify", "rewrite-keep", "rewrite-short"];

/// A `/proc/self/status` field in kB.
fn status_kb(field: &str) -> u64 {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// A sink for the disassembly that keeps only its length and its `.try` lines' count: the
/// text goes through a small buffer, counted a chunk of whole lines at a time.
#[derive(Default)]
struct Tally {
    bytes: usize,
    tries: usize,
    buf: String,
}

impl Tally {
    /// Counts the whole lines in the buffer and keeps the rest of the last one.
    fn count_lines(&mut self) {
        let whole = self.buf.rfind('\n').map_or(0, |nl| nl + 1);
        let tries = self.buf[..whole]
            .lines()
            .filter(|l| l.trim_start() == ".try")
            .count();
        self.tries += tries;
        self.buf.drain(..whole);
    }
}

impl std::fmt::Write for Tally {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.bytes += s.len();
        self.buf.push_str(s);
        if self.buf.len() >= 1 << 16 {
            self.count_lines();
        }
        Ok(())
    }
}

/// Runs `op` on `h` once; a short description of the result, or an error.
fn run_op(op: &str, h: &Hostile) -> Result<String, String> {
    let body = Body::parse(&h.bytes).map_err(|e| e.to_string())?;
    match op {
        "disasm" => {
            // The text is counted as it is written, as a caller streaming it to a file would.
            let mut tally = Tally::default();
            ilcheck::disasm::disassemble_to(&mut tally, &body, None).map_err(|e| e.to_string())?;
            tally.count_lines();
            Ok(format!(
                "{} bytes of text, {} .try lines",
                tally.bytes, tally.tries
            ))
        }
        "verify" => {
            let mut v = Verifier::new();
            let diags = v.verify(&body, &NoResolver, &ilcheck::verify::Options::ALL);
            match diags.first() {
                None => Ok("clean".into()),
                Some(d) => Err(format!("{} findings, first {d}", diags.len())),
            }
        }
        "rewrite-keep" | "rewrite-short" => {
            let forms = if op == "rewrite-keep" {
                BranchForms::KeepOriginal
            } else {
                BranchForms::ShortestWhereFits
            };
            let layout = LayoutOptions {
                branch_forms: forms,
                ..LayoutOptions::default()
            };
            let mut out = Vec::new();
            let (_, info) = Rewriter::new()
                .rewrite(
                    &body,
                    Transform::PrologueEpilogue,
                    &TransformOptions::default(),
                    &layout,
                    &NoResolver,
                    &mut out,
                )
                .map_err(|e| e.to_string())?;
            Ok(format!(
                "{} bytes out, {} passes, {} widened",
                out.len(),
                info.passes,
                info.widened
            ))
        }
        other => Err(format!("unknown op {other:?}")),
    }
}

/// The child: builds the body, then times the operation and reports
/// `ok SECS HWM_KB HEAP_BYTES BODY_BYTES DETAIL` on stdout.
fn child(shape: &str, op: &str, n: usize) -> ExitCode {
    let Some(shape) = Shape::ALL.into_iter().find(|s| s.name() == shape) else {
        println!("err unknown shape {shape:?}");
        return ExitCode::FAILURE;
    };
    let h = shape.build(n);
    // Reset the RSS high-water mark to what is resident now (Linux: `5` to clear_refs).
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    PEAK.store(LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
    let live_before = LIVE.load(Ordering::Relaxed);
    let t = Instant::now();
    let result = run_op(op, &h);
    let mut secs = t.elapsed().as_secs_f64();
    let hwm = status_kb("VmHWM:");
    let heap = PEAK.load(Ordering::Relaxed) - live_before;
    // Short cases are repeated, the fastest run kept.
    let mut runs = 1;
    while result.is_ok() && secs < 0.2 && runs < 7 {
        let t = Instant::now();
        let _ = run_op(op, &h);
        secs = secs.min(t.elapsed().as_secs_f64());
        runs += 1;
    }
    match result {
        Ok(detail) => {
            println!("ok {secs} {hwm} {heap} {} {detail}", h.bytes.len());
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("err {e}");
            ExitCode::FAILURE
        }
    }
}

/// One measured case.
enum Outcome {
    Done {
        secs: f64,
        hwm_kb: u64,
        heap: u64,
        body: u64,
        detail: String,
    },
    TimedOut,
    Failed(String),
    NotRun,
}

fn run_child(shape: Shape, op: &str, n: usize, timeout: Duration) -> Outcome {
    let Ok(exe) = std::env::current_exe() else {
        return Outcome::Failed("no current exe".into());
    };
    let spawned = Command::new(exe)
        .args(["--child", shape.name(), op, &n.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Outcome::TimedOut;
            }
        }
    }
    let out = match child.wait_with_output() {
        Ok(o) => String::from_utf8_lossy(&o.stdout).into_owned(),
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    let line = out.lines().last().unwrap_or("").to_string();
    let mut f = line.splitn(6, ' ');
    match f.next() {
        Some("ok") => {
            let mut num = || f.next().and_then(|x| x.parse::<f64>().ok()).unwrap_or(0.0);
            let (secs, hwm_kb, heap, body) = (num(), num(), num(), num());
            Outcome::Done {
                secs,
                hwm_kb: hwm_kb as u64,
                heap: heap as u64,
                body: body as u64,
                detail: f.next().unwrap_or("").to_string(),
            }
        }
        Some("err") => Outcome::Failed(line[4..].to_string()),
        _ => Outcome::Failed(format!("child died: {line:?}")),
    }
}

fn mb(bytes: f64) -> String {
    format!("{:.1} MB", bytes / 1e6)
}

fn time(secs: f64) -> String {
    if secs < 1.0 {
        format!("{:.1} ms", secs * 1e3)
    } else {
        format!("{secs:.2} s")
    }
}

fn list(arg: Option<String>) -> Option<Vec<String>> {
    arg.map(|a| a.split(',').map(str::to_string).collect())
}

/// The rows of an output of this example: (shape, op, n) → its cells.
type Rows = std::collections::BTreeMap<(String, String, usize), Vec<String>>;

fn read_rows(path: &str) -> Result<Rows, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let mut rows = Rows::new();
    let mut shape = String::new();
    for line in text.lines() {
        if let Some(h) = line.strip_prefix("### ") {
            shape = h.split_whitespace().next().unwrap_or("").to_string();
            continue;
        }
        let cells: Vec<String> = line
            .trim()
            .trim_matches('|')
            .split('|')
            .map(|c| c.trim().to_string())
            .collect();
        if let (Some(op), Some(Ok(n))) = (cells.first(), cells.get(1).map(|n| n.parse())) {
            rows.insert((shape.clone(), op.clone(), n), cells);
        }
    }
    Ok(rows)
}

/// The number before `unit` in a cell (`23.4 MB (23.4× body)` → 23.4 for " MB").
fn number_before(cell: &str, unit: &str) -> Option<f64> {
    let at = cell.find(unit)?;
    cell[..at].rsplit([' ', '(']).next()?.parse().ok()
}

/// `--compare BEFORE.md AFTER.md`: the Markdown table of the two runs side by side.
fn compare(before: &str, after: &str, sizes: &[usize]) -> Result<String, String> {
    let (b, a) = (read_rows(before)?, read_rows(after)?);
    let mut md = String::from(
        "| shape | op | time before: 10k / 100k / 1M | time after | peak RSS before, largest n \
         | peak RSS after | ≤ 4× body + 3 MB after |\n|---|---|---|---|---|---|---|\n",
    );
    let time = |rows: &Rows, key: &(String, String, usize)| match rows.get(key) {
        Some(c) if !c[2].is_empty() => c[2].clone(),
        Some(c) if c.get(6).is_some_and(|r| r.contains("error")) => "error¹".into(),
        _ => "—".into(),
    };
    let rss = |rows: &Rows, key: &(String, String, usize)| {
        rows.get(key).and_then(|c| number_before(c.get(4)?, " MB"))
    };
    for shape in Shape::ALL {
        for op in OPS {
            let key = |n| (shape.name().to_string(), op.to_string(), n);
            let times = |rows: &Rows| {
                let t: Vec<String> = sizes.iter().map(|&n| time(rows, &key(n))).collect();
                t.join(" / ")
            };
            let mut row = format!("| {shape} | {op} | {} | {} |", times(&b), times(&a));
            let largest = sizes
                .iter()
                .rev()
                .find(|&&n| rss(&b, &key(n)).is_some() && rss(&a, &key(n)).is_some());
            if let Some(&n) = largest {
                let (rb, ra) = (
                    rss(&b, &key(n)).unwrap_or(0.0),
                    rss(&a, &key(n)).unwrap_or(0.0),
                );
                let body = a
                    .get(&key(n))
                    .and_then(|c| number_before(c.get(6)?, " MB;"))
                    .unwrap_or(f64::NAN);
                let met = if ra <= 4.0 * body + 3.0 {
                    "yes".to_string()
                } else {
                    format!("no ({:.1}× after the constant)", (ra - 3.0) / body)
                };
                row.push_str(&format!(
                    " {rb:.1} MB ({:.1}×) at {}k | {ra:.1} MB ({:.1}×) at {}k | {met} |",
                    rb / body,
                    n / 1000,
                    ra / body,
                    n / 1000
                ));
            } else {
                row.push_str(" | | |");
            }
            md.push_str(&row);
            md.push('\n');
        }
    }
    Ok(md)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--compare") {
        let sizes = [10_000, 100_000, 1_000_000];
        return match compare(
            args.get(1).map_or("", String::as_str),
            args.get(2).map_or("", String::as_str),
            &sizes,
        ) {
            Ok(md) => {
                print!("{md}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::FAILURE
            }
        };
    }
    if args.first().map(String::as_str) == Some("--child") {
        let n = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(0);
        return child(
            args.get(1).map_or("", String::as_str),
            args.get(2).map_or("", String::as_str),
            n,
        );
    }
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let sizes: Vec<usize> = list(value("--sizes"))
        .map(|v| v.iter().filter_map(|s| s.parse().ok()).collect())
        .unwrap_or_else(|| vec![10_000, 100_000, 1_000_000]);
    let timeout = Duration::from_secs_f64(
        value("--timeout")
            .and_then(|t| t.parse().ok())
            .unwrap_or(60.0),
    );
    let shapes: Vec<Shape> = match list(value("--shapes")) {
        Some(names) => Shape::ALL
            .into_iter()
            .filter(|s| names.iter().any(|n| n == s.name()))
            .collect(),
        None => Shape::ALL.to_vec(),
    };
    let ops: Vec<String> =
        list(value("--ops")).unwrap_or_else(|| OPS.iter().map(|s| s.to_string()).collect());

    let mut md = String::new();
    md.push_str(&format!(
        "Sizes {sizes:?}; timeout {} s; each case in a fresh process.\n\n",
        timeout.as_secs_f64()
    ));
    for &shape in &shapes {
        md.push_str(&format!("### {shape} (n = {})\n\n", shape.unit()));
        md.push_str("| op | n | time | ×10 growth | peak RSS | heap peak | result |\n");
        md.push_str("|---|---:|---:|---:|---:|---:|---|\n");
        for op in &ops {
            let mut previous: Option<f64> = None;
            let mut stop = false;
            for &n in &sizes {
                let outcome = if stop {
                    Outcome::NotRun
                } else {
                    run_child(shape, op, n, timeout)
                };
                let row = match outcome {
                    Outcome::Done {
                        secs,
                        hwm_kb,
                        heap,
                        body,
                        detail,
                    } => {
                        let growth = previous.map_or("".into(), |p| format!("×{:.1}", secs / p));
                        previous = Some(secs);
                        let rss = hwm_kb as f64 * 1024.0;
                        format!(
                            "| {op} | {n} | {} | {growth} | {} ({:.1}× body) | {} ({:.1}× body) | body {}; {detail} |",
                            time(secs),
                            mb(rss),
                            rss / body as f64,
                            mb(heap as f64),
                            heap as f64 / body as f64,
                            mb(body as f64),
                        )
                    }
                    Outcome::TimedOut => {
                        stop = true;
                        format!(
                            "| {op} | {n} | > {} s | | | | killed at the timeout |",
                            timeout.as_secs_f64()
                        )
                    }
                    Outcome::Failed(e) => {
                        previous = None;
                        format!("| {op} | {n} | | | | | error: {e} |")
                    }
                    Outcome::NotRun => format!("| {op} | {n} | not run | | | | |"),
                };
                eprintln!("{shape} {row}");
                md.push_str(&row);
                md.push('\n');
            }
        }
        md.push('\n');
    }
    print!("{md}");
    if let Some(path) = value("--out")
        && let Err(e) = std::fs::write(&path, &md)
    {
        eprintln!("{path}: {e}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
