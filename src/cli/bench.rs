//! `ilcheck bench`: any rewriter's speed on given assemblies, with ilcheck's own rewrite of the
//! same inputs in the same run as the reference line; outputs checked before a figure counts.

use crate::cli::out::{errln, out, outln};
use anyhow::{Context, Result, bail};
use ilcheck::corpus::{self, Input};
use ilcheck::harness::rewriter::RewriterCommand;
use ilcheck::harness::{Who, usage};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Arguments of `ilcheck bench`.
#[derive(clap::Args)]
pub struct BenchArgs {
    /// Assemblies, or directories searched recursively for .dll and .exe files.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// The rewriter: 'CMD ARGS {in} {out}' (one call per assembly) or 'CMD {in_dir} {out_dir}'
    /// (one call for the whole set). Without it, only ilcheck's own rewrite is measured.
    #[arg(long, value_name = "CMD")]
    pub rewriter: Option<String>,
    /// ilcheck's transform for the reference line (the one matching the rewriter's work).
    #[arg(long, short, default_value = "prologue-epilogue")]
    pub transform: String,
    /// Threads of ilcheck's reference rewrite.
    #[arg(long, default_value_t = 1)]
    pub reference_threads: usize,
    /// Measured rounds.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Rounds run first and not measured.
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
    /// Deadline of one rewriter call, in seconds.
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    /// A previous run's JSON: print the change, and exit 1 past --max-regression.
    #[arg(long, value_name = "PREVIOUS.json")]
    pub compare: Option<PathBuf>,
    /// Largest slow-down of a line's median wall time (percent) that still passes --compare.
    #[arg(long, default_value_t = 10.0)]
    pub max_regression: f64,
    /// Also write a Markdown report with an SVG chart beside it (FILE.svg).
    #[arg(long, value_name = "FILE.md")]
    pub report: Option<PathBuf>,
    /// Print the JSON result (schema ilcheck.bench/1) instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// Minimum, median and maximum of a measure over the rounds.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct Spread {
    /// Smallest.
    pub min: f64,
    /// Median.
    pub median: f64,
    /// Largest.
    pub max: f64,
}

impl Spread {
    fn of(mut v: Vec<f64>) -> Spread {
        if v.is_empty() {
            return Spread::default();
        }
        v.sort_by(f64::total_cmp);
        Spread {
            min: v[0],
            median: v[v.len() / 2],
            max: v[v.len() - 1],
        }
    }
}

/// One measured line: a rewriter, or ilcheck's reference.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Line {
    /// What was measured.
    pub name: String,
    /// Wall seconds per round.
    pub wall: Spread,
    /// CPU seconds (user and system) per round.
    pub cpu: Spread,
    /// MB (10^6 bytes) of input IL per second of median wall time; absent when the output
    /// did not check out.
    pub mb_per_s: Option<f64>,
    /// Methods with a body per second of median wall time; absent as `mb_per_s`.
    pub methods_per_s: Option<f64>,
    /// Peak resident set of the rewriter process (KiB): the largest over its calls.
    pub peak_rss_kib: u64,
    /// Wall seconds per round, in order.
    pub rounds: Vec<f64>,
    /// Median wall seconds per assembly (one call per assembly only).
    pub per_assembly: Vec<(String, f64)>,
    /// What was wrong with the output (a failed call, a new verifier finding).
    pub problems: Vec<String>,
}

/// The whole result.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct BenchResult {
    /// `ilcheck.bench/1`.
    pub schema: String,
    /// Assemblies measured.
    pub assemblies: usize,
    /// Bytes of IL in their method bodies.
    pub il_bytes: u64,
    /// Methods with a body.
    pub methods: u64,
    /// Measured rounds and warm-up rounds.
    pub rounds: usize,
    /// Warm-up rounds.
    pub warmup: usize,
    /// The lines: the rewriter's (when given), then ilcheck's reference.
    pub lines: Vec<Line>,
}

fn il_of(path: &Path) -> Result<(u64, u64)> {
    let image = ilcheck::image::Image::open(path).with_context(|| format!("{}", path.display()))?;
    let (mut bytes, mut methods) = (0u64, 0u64);
    for m in image.methods() {
        if m.rva() == 0 {
            continue;
        }
        if let Ok(body) = m.body_bytes().map(ilcheck::body::Body::parse)
            && let Ok(body) = body
        {
            bytes += body.code.len() as u64;
            methods += 1;
        }
    }
    Ok((bytes, methods))
}

/// Runs `ilcheck bench`.
pub fn run(a: BenchArgs) -> Result<ExitCode> {
    let found = corpus::discover_all(&a.paths);
    for p in &found.problems {
        errln!("ilcheck: {}: {}", p.path, p.reason);
    }
    let inputs: Vec<PathBuf> = found
        .inputs
        .iter()
        .filter_map(|i| match i {
            Input::File { path, .. } => Some(path.clone()),
            Input::Embedded { .. } | Input::Memory { .. } => None,
        })
        .filter(|p| il_of(p).is_ok())
        .collect();
    if inputs.is_empty() {
        bail!("no .NET assemblies to measure");
    }
    if a.rounds == 0 {
        bail!("--rounds must be at least 1");
    }
    if let Some(report) = &a.report {
        let read: Vec<&Path> = inputs.iter().map(PathBuf::as_path).collect();
        super::refuse_reports_over([report.as_path(), &report.with_extension("svg")], &read)?;
    }
    let mut result = BenchResult {
        schema: "ilcheck.bench/1".into(),
        assemblies: inputs.len(),
        rounds: a.rounds,
        warmup: a.warmup,
        ..BenchResult::default()
    };
    for p in &inputs {
        let (b, m) = il_of(p)?;
        result.il_bytes += b;
        result.methods += m;
    }
    let work = std::env::temp_dir().join(format!("ilcheck-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    if let Some(template) = &a.rewriter {
        let line = measure_rewriter(template, &inputs, &a, &work);
        let _ = std::fs::remove_dir_all(&work);
        result.lines.push(line?);
    }
    result.lines.push(measure_reference(&inputs, &a)?);
    for line in &mut result.lines {
        if line.problems.is_empty() {
            let secs = line.wall.median.max(1e-9);
            line.mb_per_s = Some(result.il_bytes as f64 / 1e6 / secs);
            line.methods_per_s = Some(result.methods as f64 / secs);
        }
    }

    let previous: Option<BenchResult> = match &a.compare {
        Some(p) => Some(
            serde_json::from_str(
                &std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?,
            )
            .with_context(|| format!("{}: not an ilcheck bench JSON", p.display()))?,
        ),
        None => None,
    };
    let changes = previous.as_ref().map(|p| changes(p, &result));
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&result)?);
    } else {
        out!("{}", text(&result, changes.as_deref()));
    }
    if let Some(path) = &a.report {
        write_report(path, &result, changes.as_deref())?;
    }
    let invalid = result.lines.iter().any(|l| !l.problems.is_empty());
    let regressed = changes
        .iter()
        .flatten()
        .any(|(_, pct)| *pct > a.max_regression);
    Ok(if invalid || regressed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// Per line present in both: (name, percent change of the median wall time; + is slower).
fn changes(previous: &BenchResult, now: &BenchResult) -> Vec<(String, f64)> {
    now.lines
        .iter()
        .filter(|l| l.mb_per_s.is_some())
        .filter_map(|l| {
            let p = previous.lines.iter().find(|p| p.name == l.name)?;
            (p.wall.median > 0.0).then(|| {
                (
                    l.name.clone(),
                    (l.wall.median / p.wall.median - 1.0) * 100.0,
                )
            })
        })
        .collect()
}

fn text(r: &BenchResult, changes: Option<&[(String, f64)]>) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} assemblies, {} methods, {:.2} MB of IL; {} rounds after {} warm-up",
        r.assemblies,
        r.methods,
        r.il_bytes as f64 / 1e6,
        r.rounds,
        r.warmup
    );
    for l in &r.lines {
        let _ = writeln!(s, "{}", l.name);
        if l.rounds.is_empty() {
            let _ = writeln!(s, "  no round measured");
        } else {
            let _ = writeln!(
                s,
                "  wall {:.3} / {:.3} / {:.3} s (min/median/max), CPU {:.3} / {:.3} / {:.3} s",
                l.wall.min, l.wall.median, l.wall.max, l.cpu.min, l.cpu.median, l.cpu.max
            );
        }
        match (l.mb_per_s, l.methods_per_s) {
            (Some(mb), Some(m)) => {
                let _ = writeln!(
                    s,
                    "  {mb:.2} MB/s of IL, {m:.0} methods/s, peak RSS {} MiB",
                    l.peak_rss_kib / 1024
                );
            }
            _ => {
                let _ = writeln!(s, "  no speed figure: the output did not check out");
            }
        }
        for p in l.problems.iter().take(10) {
            let _ = writeln!(s, "  problem: {p}");
        }
        if let Some(c) = changes.and_then(|c| c.iter().find(|(n, _)| n == &l.name)) {
            let _ = writeln!(s, "  change against --compare: {:+.1}% median wall", c.1);
        }
    }
    // A ratio of a line without a figure would compare a broken run's time.
    if let [first, .., last] = &r.lines[..]
        && first.mb_per_s.is_some()
        && last.mb_per_s.is_some()
        && last.wall.median > 0.0
    {
        let _ = writeln!(
            s,
            "ratio: {:.1}× the reference's median wall time",
            first.wall.median / last.wall.median
        );
    }
    s
}

/// Writes the Markdown report and its SVG chart (median wall per line, and per round).
fn write_report(path: &Path, r: &BenchResult, changes: Option<&[(String, f64)]>) -> Result<()> {
    use std::fmt::Write as _;
    let svg_path = path.with_extension("svg");
    let mut md = String::new();
    let _ = writeln!(md, "# ilcheck bench\n");
    let _ = writeln!(md, "```\n{}```\n", text(r, changes));
    if let Some(name) = svg_path.file_name() {
        let _ = writeln!(md, "![time per round]({})\n", name.to_string_lossy());
    }
    let _ = writeln!(
        md,
        "| line | median wall s | median CPU s | MB/s of IL | methods/s | peak RSS MiB |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|");
    for l in &r.lines {
        let f = |x: Option<f64>, d: usize| x.map_or("—".to_string(), |v| format!("{v:.d$}"));
        let _ = writeln!(
            md,
            "| {} | {:.3} | {:.3} | {} | {} | {} |",
            l.name,
            l.wall.median,
            l.cpu.median,
            f(l.mb_per_s, 2),
            f(l.methods_per_s, 0),
            l.peak_rss_kib / 1024
        );
    }
    if let Some(l) = r.lines.iter().find(|l| !l.per_assembly.is_empty()) {
        let _ = writeln!(
            md,
            "\n## Slowest assemblies ({})\n\n| assembly | median s |\n|---|---|",
            l.name
        );
        let mut v = l.per_assembly.clone();
        v.sort_by(|a, b| b.1.total_cmp(&a.1));
        for (n, t) in v.iter().take(20) {
            let _ = writeln!(md, "| {n} | {t:.4} |");
        }
    }
    // The chart: one row of bars per line, a bar per round, scaled to the slowest round.
    let max = r
        .lines
        .iter()
        .flat_map(|l| l.rounds.iter().copied())
        .fold(0.0f64, f64::max)
        .max(1e-9);
    let (w, row) = (640.0, 26.0);
    let height = 30.0
        + row
            * r.lines
                .iter()
                .map(|l| l.rounds.len() as f64 + 1.0)
                .sum::<f64>();
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"12\">\n",
        w + 220.0
    );
    let mut y = 20.0;
    for (i, l) in r.lines.iter().enumerate() {
        let colour = ["#3b7dd8", "#d8843b", "#3bd87a"][i % 3];
        let _ = writeln!(
            svg,
            "<text x=\"4\" y=\"{y}\" font-weight=\"bold\">{}</text>",
            xml(&l.name)
        );
        y += row;
        for (k, t) in l.rounds.iter().enumerate() {
            let len = t / max * w;
            let _ = writeln!(
                svg,
                "<text x=\"4\" y=\"{:.0}\">round {}</text><rect x=\"80\" y=\"{:.0}\" width=\"{len:.1}\" height=\"16\" fill=\"{colour}\"/><text x=\"{:.0}\" y=\"{:.0}\">{t:.3} s</text>",
                y - 4.0,
                k + 1,
                y - 16.0,
                86.0 + len,
                y - 4.0
            );
            y += row;
        }
    }
    svg.push_str("</svg>\n");
    ilcheck::fsio::write_atomic(&svg_path, svg.as_bytes())
        .with_context(|| format!("writing {}", svg_path.display()))?;
    ilcheck::fsio::write_atomic(path, md.as_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The rewriter's rounds, then its last outputs checked with `verify --baseline`.
fn measure_rewriter(
    template: &str,
    inputs: &[PathBuf],
    a: &BenchArgs,
    work: &Path,
) -> Result<Line> {
    let dir_mode = template.contains("{in_dir}");
    let cmd = if dir_mode {
        RewriterCommand::parse(
            &template
                .replace("{in_dir}", "{in}")
                .replace("{out_dir}", "{out}"),
        )?
    } else {
        RewriterCommand::parse(template)?
    };
    let timeout = Duration::from_secs(a.timeout);
    let in_dir = work.join("in");
    std::fs::create_dir_all(&in_dir)?;
    // Inputs under unique names in one directory (for {in_dir}, and so outputs pair by name).
    let mut staged = Vec::new();
    for (k, p) in inputs.iter().enumerate() {
        let name = p
            .file_name()
            .map_or_else(|| format!("{k}.dll"), |n| n.to_string_lossy().into_owned());
        let name = if staged.iter().any(|(_, s): &(PathBuf, PathBuf)| {
            s.file_name().is_some_and(|f| f.to_string_lossy() == name)
        }) {
            format!("{k}-{name}")
        } else {
            name
        };
        let to = in_dir.join(&name);
        std::fs::copy(p, &to).with_context(|| format!("reading {}", p.display()))?;
        staged.push((p.clone(), to));
    }
    let mut line = Line {
        name: format!("rewriter: {template}"),
        ..Line::default()
    };
    let (mut walls, mut cpus) = (Vec::new(), Vec::new());
    let mut per: Vec<Vec<f64>> = vec![Vec::new(); staged.len()];
    let out_dir = work.join("out");
    // A rewriter that fails a call gets no speed figure, so the bench stops at its first
    // failure, warm-up included: a hanging rewriter costs one deadline, not one per call.
    let mut failed = false;
    'rounds: for round in 0..a.warmup + a.rounds {
        let measured = round >= a.warmup;
        let _ = std::fs::remove_dir_all(&out_dir);
        std::fs::create_dir_all(&out_dir)?;
        let before = usage(Who::Children);
        let start = Instant::now();
        if dir_mode {
            let o = cmd.run(&in_dir, &out_dir, timeout)?;
            if !o.success() {
                line.problems
                    .push(format!("the rewriter ended with {}", o.describe()));
                failed = true;
                break 'rounds;
            }
            for (orig, input) in &staged {
                if let Some(why) = no_output(&out_dir.join(input.file_name().unwrap_or_default())) {
                    line.problems.push(format!("{}: {why}", orig.display()));
                    failed = true;
                }
            }
            if failed {
                break 'rounds;
            }
        } else {
            for (k, (orig, input)) in staged.iter().enumerate() {
                let out = out_dir.join(input.file_name().unwrap_or_default());
                let t = Instant::now();
                let o = cmd.run(input, &out, timeout)?;
                let problem = if o.success() {
                    no_output(&out)
                } else {
                    Some(format!("the rewriter ended with {}", o.describe()))
                };
                if let Some(why) = problem {
                    line.problems.push(format!("{}: {why}", orig.display()));
                    failed = true;
                    break 'rounds;
                }
                if measured {
                    per[k].push(t.elapsed().as_secs_f64());
                }
            }
        }
        let wall = start.elapsed().as_secs_f64();
        let after = usage(Who::Children);
        if measured {
            walls.push(wall);
            cpus.push(after.cpu_seconds - before.cpu_seconds);
        }
        line.peak_rss_kib = line.peak_rss_kib.max(after.max_rss_kib);
    }
    if failed {
        line.problems
            .push("stopped at the rewriter's first failure: no speed figure".into());
        return Ok(line);
    }
    line.rounds = walls.clone();
    line.wall = Spread::of(walls);
    line.cpu = Spread::of(cpus);
    if !dir_mode {
        line.per_assembly = staged
            .iter()
            .zip(per)
            .map(|((orig, _), t)| (orig.display().to_string(), Spread::of(t).median))
            .collect();
    }
    // The last round's outputs against the originals (every call wrote one, checked above).
    let originals: Vec<Input> = staged.iter().map(|(_, s)| Input::named(s)).collect();
    let baseline = corpus::Baseline::load(&originals).map_err(anyhow::Error::msg)?;
    let outputs: Vec<(PathBuf, PathBuf)> = staged
        .iter()
        .map(|(orig, s)| {
            (
                orig.clone(),
                out_dir.join(s.file_name().unwrap_or_default()),
            )
        })
        .collect();
    let inputs: Vec<Input> = outputs.iter().map(|(_, o)| Input::named(o)).collect();
    let mut report = corpus::VerifyReport::default();
    corpus::verify(
        &inputs,
        corpus::VerifyOptions::default(),
        Some(&baseline),
        &mut report,
        |_| {},
    );
    // The outputs are in a scratch directory that is gone when this is read: each is named
    // by the user's input it was written from.
    let named = |path: &str| {
        outputs
            .iter()
            .find(|(_, o)| o.display().to_string() == path)
            .map_or_else(
                || path.to_string(),
                |(orig, _)| format!("{} (the rewriter's output of it)", orig.display()),
            )
    };
    for e in &report.image_errors {
        line.problems
            .push(format!("{}: {}", named(&e.path), e.reason));
    }
    for f in report.findings.iter().take(20) {
        line.problems.push(format!(
            "{}: {} IL_{:04x} {}: {}",
            named(&f.assembly),
            f.method,
            f.offset,
            f.code,
            f.message
        ));
    }
    if report.findings_total > 20 {
        line.problems
            .push(format!("… {} findings in all", report.findings_total));
    }
    Ok(line)
}

/// Why `out` is no output of a rewriter call that exited 0: missing, empty, or not a file.
fn no_output(out: &Path) -> Option<String> {
    match std::fs::metadata(out) {
        Ok(m) if m.is_file() && m.len() > 0 => None,
        Ok(m) if m.is_file() => Some("the rewriter exited 0 but its output is empty".into()),
        Ok(_) => Some("the rewriter exited 0 but its output is not a file".into()),
        Err(_) => Some("the rewriter exited 0 but wrote no output".into()),
    }
}

/// ilcheck's own rewrite of the same inputs, in process: read, rewrite, verify and write each
/// image to memory.
fn measure_reference(inputs: &[PathBuf], a: &BenchArgs) -> Result<Line> {
    let args = super::rewrite::RewriteArgs {
        inputs: inputs.to_vec(),
        output: PathBuf::new(),
        transform: a.transform.clone(),
        methods: None,
        branches: super::rewrite::Branches::Keep,
        prologue_call: None,
        epilogue_call: None,
        references: Vec::new(),
        catch_type: None,
        json: false,
        max: 0,
        threads: a.reference_threads.max(1),
        keep_r2r: false,
        keep_old_bodies: false,
        shard: None,
    };
    let opts = super::rewrite::options(&args)?;
    let mut line = Line {
        name: format!(
            "ilcheck rewrite -t {} (reference: in process, {} thread(s), read + rewrite + verify + write to memory)",
            a.transform, args.threads
        ),
        ..Line::default()
    };
    let (mut walls, mut cpus) = (Vec::new(), Vec::new());
    let mut per: Vec<Vec<f64>> = vec![Vec::new(); inputs.len()];
    let mut out = Vec::new();
    for round in 0..a.warmup + a.rounds {
        let measured = round >= a.warmup;
        let before = usage(Who::SelfProcess);
        let start = Instant::now();
        for (k, p) in inputs.iter().enumerate() {
            let t = Instant::now();
            let image =
                ilcheck::image::Image::open(p).with_context(|| format!("{}", p.display()))?;
            let mut report = corpus::RewriteReport::default();
            if let Err(e) = corpus::rewrite_image_into(&image, &opts, &mut report, &mut out) {
                if measured {
                    line.problems.push(format!("{}: {e}", p.display()));
                }
            } else if measured && !report.ok() {
                line.problems.push(format!(
                    "{}: {} rewrites rejected by the verifier",
                    p.display(),
                    report.rejected.values().sum::<u64>()
                ));
            }
            if measured {
                per[k].push(t.elapsed().as_secs_f64());
            }
        }
        let wall = start.elapsed().as_secs_f64();
        let after = usage(Who::SelfProcess);
        if measured {
            walls.push(wall);
            cpus.push(after.cpu_seconds - before.cpu_seconds);
        }
        line.peak_rss_kib = after.max_rss_kib;
    }
    line.rounds = walls.clone();
    line.wall = Spread::of(walls);
    line.cpu = Spread::of(cpus);
    line.per_assembly = inputs
        .iter()
        .zip(per)
        .map(|(p, t)| (p.display().to_string(), Spread::of(t).median))
        .collect();
    Ok(line)
}
