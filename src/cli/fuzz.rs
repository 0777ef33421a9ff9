//! `ilcheck fuzz` and `ilcheck equiv`: a user's rewriter against generated programs, and the
//! differential run of two programs.

use crate::cli::out::{errln, outln};
use anyhow::{Context, Result, bail};
use ilcheck::harness::equiv::compare_on;
use ilcheck::harness::fuzz::{self, FuzzSummary, LoopOptions, MinimiseBudget, Progress, Setup};
use ilcheck::harness::program::Manifest;
use ilcheck::harness::rewriter::RewriterCommand;
use ilcheck::harness::{Host, Runtime, RuntimeKind, ServerOptions};
use ilcheck::image::{Image, ImageError};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// Which runtimes run the programs.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum RuntimeChoice {
    /// Mono only.
    Mono,
    /// CoreCLR only.
    Coreclr,
    /// Mono and CoreCLR.
    Both,
    /// None: verify only.
    None,
}

/// The runtimes of `choice`; a missing one is a setup error.
pub fn runtimes(choice: RuntimeChoice) -> Result<Vec<Runtime>> {
    let kinds: &[RuntimeKind] = match choice {
        RuntimeChoice::Mono => &[RuntimeKind::Mono],
        RuntimeChoice::Coreclr => &[RuntimeKind::CoreClr],
        RuntimeChoice::Both => &[RuntimeKind::Mono, RuntimeKind::CoreClr],
        RuntimeChoice::None => &[],
    };
    kinds
        .iter()
        .map(|&k| {
            Runtime::find(k).with_context(|| {
                format!(
                    "runtime {} is not available (install it with scripts/setup.sh, or choose another with --runtime)",
                    k.name()
                )
            })
        })
        .collect()
}

/// Arguments of `ilcheck fuzz`.
#[derive(clap::Args)]
pub struct FuzzArgs {
    /// The rewriter as a command template; {in} and {out} are replaced by the assembly to read
    /// and the one to write, e.g. 'mono weaver.exe {in} {out}'.
    #[arg(long, value_name = "CMD")]
    pub rewriter: String,
    /// Runtimes that run original and rewritten programs side by side.
    #[arg(long, value_enum, default_value = "both")]
    pub runtime: RuntimeChoice,
    /// Stop after this many seconds (default 60 when --cases is not given).
    #[arg(long, value_name = "SECS")]
    pub time: Option<u64>,
    /// Stop after this many programs.
    #[arg(long, value_name = "N")]
    pub cases: Option<u64>,
    /// Seed of the first program (default: from the clock; the summary prints it).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Programs checked at once (default: the number of cores).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Where minimised repro folders go.
    #[arg(long, value_name = "DIR", default_value = "ilcheck-failures")]
    pub keep_failures: PathBuf,
    /// Repro folders kept per failure signature.
    #[arg(long, default_value_t = 1)]
    pub repros: usize,
    /// Files copied beside every program (e.g. a probe assembly the rewriter references).
    #[arg(long, num_args = 1.., value_name = "FILE")]
    pub with: Vec<PathBuf>,
    /// Generated methods per program. Each program costs a rewriter start (a Cecil weaver under
    /// mono: about 0.3 s, however many methods) and a JIT of its methods per runtime, so larger
    /// programs check more methods a second; minimisation still ends at one to three methods.
    /// At most 10,000.
    #[arg(long, default_value_t = 300, value_parser = super::generate::methods_per_assembly)]
    pub methods_per_assembly: u32,
    /// Generator settings as JSON (see `ilcheck generate --config`).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Deadline of one rewriter run, in seconds.
    #[arg(long, default_value_t = 60)]
    pub rewriter_timeout: u64,
    /// Deadline of one program run, in seconds. A program of 300 generated methods runs in
    /// well under a second; a run past the deadline is a hang, whose cost is the deadline.
    #[arg(long, default_value_t = 20)]
    pub run_timeout: u64,
    /// Run every program in a runtime process of its own, without long-lived runtime servers.
    #[arg(long)]
    pub no_server: bool,
    /// Programs a runtime server runs before it is replaced by a new one.
    #[arg(long, value_name = "N", default_value_t = ilcheck::harness::server::DEFAULT_RESTART_AFTER)]
    pub server_restart: u32,
    /// Most seconds spent minimising one failure: no check runs past them (a run's deadline
    /// is cut to the time left), nor past the end of --time.
    #[arg(long, default_value_t = 90)]
    pub minimise_time: u64,
    /// Most checks (rewriter and runtime runs) spent minimising one failure.
    #[arg(long, default_value_t = 150)]
    pub minimise_checks: u32,
    /// Count runtime defects as failures (exit 1): a runtime that dies in its own code (an
    /// internal assertion, a native crash) on rewritten output that verifies and that the
    /// other runtime runs with the expected results. By default they are kept and listed
    /// apart, since no rewriter change is wrong there; users who ship on that runtime may
    /// still want to hear of them first.
    #[arg(long)]
    pub fail_on_runtime_defects: bool,
    /// Check one kept program (with its manifest beside it) instead of generating. For a repro
    /// folder's `original/NAME.exe`, the failure found is compared with the one in the folder's
    /// failure.json: "reproduced: same signature", "a different failure: …" (both exit 1) or
    /// "not reproduced" (exit 0).
    #[arg(long, value_name = "ORIGINAL.exe", conflicts_with_all = ["time", "cases"])]
    pub replay: Option<PathBuf>,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `fuzz --replay --json` with a failure: the failure, and how it compares with the one a
/// repro folder recorded.
#[derive(serde::Serialize)]
struct ReplayJson<'a> {
    #[serde(flatten)]
    failure: &'a fuzz::Failure,
    /// The signature in the repro folder's `failure.json`, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    recorded_signature: Option<&'a str>,
    /// Whether the failure found has the recorded signature (absent without a record).
    #[serde(skip_serializing_if = "Option::is_none")]
    reproduced: Option<bool>,
}

/// The loop's set-up; the runtime servers' host is written into `host_dir`.
fn setup(a: &FuzzArgs, host_dir: &Path) -> Result<Setup> {
    let rewriter = RewriterCommand::parse(&a.rewriter)?;
    for f in &a.with {
        if !f.is_file() {
            bail!("--with {}: not a file", f.display());
        }
    }
    let runtimes = runtimes(a.runtime)?;
    let servers = if a.no_server || runtimes.is_empty() {
        None
    } else {
        Some(ServerOptions {
            host: Host::write(host_dir).context("writing the runtime servers' host")?,
            restart_after: a.server_restart.max(1),
        })
    };
    Ok(Setup {
        rewriter,
        runtimes,
        with: a.with.clone(),
        config: super::generate::load_config(a.config.as_deref())?,
        methods_per_assembly: a.methods_per_assembly.max(1),
        rewriter_timeout: Duration::from_secs(a.rewriter_timeout),
        run_timeout: Duration::from_secs(a.run_timeout),
        servers,
    })
}

fn scratch(what: &str) -> PathBuf {
    std::env::temp_dir().join(format!("ilcheck-{what}-{}", std::process::id()))
}

/// Runs `ilcheck fuzz`.
pub fn run(a: FuzzArgs) -> Result<ExitCode> {
    super::interrupt::install();
    let host_dir = scratch("host");
    let r = run_with_host(a, &host_dir);
    let _ = std::fs::remove_dir_all(&host_dir);
    r
}

fn run_with_host(a: FuzzArgs, host_dir: &Path) -> Result<ExitCode> {
    let setup = setup(&a, host_dir)?;
    // A runtime that cannot run ilcheck's own programs would pass every case: a set-up error.
    let check_dir = scratch("check");
    let checked = setup.check_runtimes(&check_dir);
    let _ = std::fs::remove_dir_all(&check_dir);
    checked?;
    if let Some(original) = &a.replay {
        // A repro folder's original: what the replay finds is compared with what was kept.
        let recorded = match fuzz::recorded_signature(original) {
            Ok(r) => r.map(|(_, s)| s),
            Err(why) => {
                errln!("ilcheck fuzz: not comparing with the recorded failure: {why}");
                None
            }
        };
        let work = scratch("replay");
        let r = fuzz::replay(&setup, original, &work)
            .with_context(|| format!("replaying {}", original.display()))?;
        let _ = std::fs::remove_dir_all(&work);
        for (runtime, why) in &r.originals_failed {
            errln!(
                "ilcheck fuzz: {runtime} could not run the original {}: it {why}; what it did not print was not compared",
                original.display()
            );
        }
        return Ok(match r.failure {
            None if !r.originals_failed.is_empty() => {
                let names: Vec<&str> = r.originals_failed.iter().map(|(n, _)| n.as_str()).collect();
                bail!(
                    "{}: not checked under {}, which could not run the original",
                    original.display(),
                    names.join(" and ")
                );
            }
            None => {
                if a.json {
                    // The same document whatever the outcome: no failure is `"failure": null`.
                    let v = serde_json::json!({
                        "original": original.display().to_string(),
                        "failure": null,
                        "recorded_signature": recorded,
                        "reproduced": recorded.as_ref().map(|_| false),
                    });
                    outln!("{}", serde_json::to_string_pretty(&v)?);
                } else {
                    outln!("{}: no failure", original.display());
                    if let Some(r) = &recorded {
                        outln!("not reproduced: no failure (recorded: {r})");
                    }
                }
                ExitCode::SUCCESS
            }
            Some(f) => {
                let blames = f.kind.blames_rewriter() || a.fail_on_runtime_defects;
                if a.json {
                    let v = ReplayJson {
                        failure: &f,
                        recorded_signature: recorded.as_deref(),
                        reproduced: recorded.as_ref().map(|r| *r == f.signature),
                    };
                    outln!("{}", serde_json::to_string_pretty(&v)?);
                } else {
                    outln!("{}: {} — {}", original.display(), f.signature, f.summary);
                    for x in &f.findings {
                        outln!(
                            "  {} IL_{:04x} {}: {}",
                            x.full_name,
                            x.offset,
                            x.code,
                            x.message
                        );
                    }
                    for c in &f.runtimes {
                        for d in &c.diffs {
                            outln!(
                                "  {}: -{}\n  {}: +{}",
                                c.runtime,
                                d.original,
                                c.runtime,
                                d.rewritten
                            );
                        }
                    }
                    match &recorded {
                        Some(r) if *r == f.signature => {
                            outln!("reproduced: same signature ({r})")
                        }
                        Some(r) => outln!("a different failure: {} (recorded: {r})", f.signature),
                        None => {}
                    }
                }
                if blames {
                    ExitCode::from(1)
                } else {
                    if !a.json {
                        outln!(
                            "a runtime defect, not a failure of the rewriter (--fail-on-runtime-defects counts it)"
                        );
                    }
                    ExitCode::SUCCESS
                }
            }
        });
    }
    let seed = a.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_secs())
    });
    let jobs = a
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let time = match (a.time, a.cases) {
        (Some(t), _) => Some(Duration::from_secs(t)),
        (None, None) => Some(Duration::from_secs(60)),
        (None, Some(_)) => None,
    };
    let work = scratch("fuzz");
    let opts = LoopOptions {
        seed,
        cases: a.cases,
        time,
        jobs,
        keep: a.keep_failures.clone(),
        repros_per_signature: a.repros.max(1),
        work: work.clone(),
        budget: MinimiseBudget {
            checks: a.minimise_checks,
            time: Duration::from_secs(a.minimise_time),
        },
    };
    let bar = if std::io::stderr().is_terminal() && !a.json {
        let b = indicatif::ProgressBar::new_spinner();
        if let Ok(style) = indicatif::ProgressStyle::with_template("{spinner} {elapsed} {wide_msg}")
        {
            b.set_style(style);
        }
        b.enable_steady_tick(Duration::from_millis(200));
        b
    } else {
        indicatif::ProgressBar::hidden()
    };
    let start = std::time::Instant::now();
    errln!(
        "ilcheck fuzz: seed {seed}, {jobs} job(s), {} methods per program, runtimes: {}{}",
        setup.methods_per_assembly,
        if setup.runtimes.is_empty() {
            "none".to_string()
        } else {
            setup
                .runtimes
                .iter()
                .map(|r| r.kind().name())
                .collect::<Vec<_>>()
                .join(", ")
        },
        match (&setup.servers, setup.runtimes.is_empty()) {
            (_, true) => "",
            (Some(_), false) => " (runtime servers)",
            (None, false) => " (a process per run)",
        }
    );
    let report = |p: Progress| match p {
        Progress::Case {
            cases,
            methods,
            failed,
        } => bar.set_message(format!(
            "{cases} programs, {methods} methods ({:.0}/s), {failed} failed",
            methods as f64 / start.elapsed().as_secs_f64().max(1e-9)
        )),
        Progress::Repro { signature, dir } => {
            bar.suspend(|| errln!("failure {signature}: repro in {}", dir.display()))
        }
    };
    let summary = fuzz::run_loop(&setup, &opts, &report);
    bar.finish_and_clear();
    let _ = std::fs::remove_dir_all(&work);
    let summary = summary.context("fuzz loop")?;
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print_summary(&summary);
    }
    let unusable = summary.unusable_runtimes();
    Ok(if summary.stopped {
        errln!(
            "ilcheck fuzz: stopped by a signal after {} program(s); what it started is killed, \
             its scratch directories removed, and the repro folders of the failures found kept",
            summary.cases
        );
        ExitCode::from(super::interrupt::EXIT_STOPPED)
    } else if summary.failed_cases > 0 {
        ExitCode::from(1)
    } else if !unusable.is_empty() {
        // Nothing was checked under that runtime: no verdict, whatever the other runtimes say.
        for r in unusable {
            errln!(
                "ilcheck: {} could not run any of the {} original program(s) it was given (first: {}): nothing was checked under it",
                r.runtime,
                r.cases,
                r.first_failure.as_deref().unwrap_or("")
            );
        }
        ExitCode::from(2)
    } else if a.fail_on_runtime_defects && summary.runtime_defect_cases > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn print_summary(s: &FuzzSummary) {
    outln!(
        "{} programs, {} methods in {:.1} s: {:.0} methods/s; seed {}",
        s.cases,
        s.methods,
        s.seconds,
        s.methods_per_second,
        s.seed
    );
    let st = &s.stages;
    outln!(
        "time by stage (all workers): generate {:.1} s, rewriter {:.1} s, verify {:.1} s, runtimes {:.1} s, minimise {:.1} s",
        st.generate,
        st.rewriter,
        st.verify,
        st.runtimes,
        st.minimise
    );
    let sv = &s.servers;
    if sv.started > 0 {
        outln!(
            "program runs: {} by runtime servers ({} started), {} in a process of their own ({} re-run after a server did not answer){}",
            sv.served,
            sv.started,
            sv.fresh,
            sv.fallbacks,
            if sv.given_up > 0 {
                "; servers given up after failing to start"
            } else {
                ""
            }
        );
    }
    if sv.timeouts > 0 {
        outln!(
            "program runs that reached --run-timeout: {} ({:.1} s waited)",
            sv.timeouts,
            sv.timeout_seconds
        );
    }
    for r in s.by_runtime.iter().filter(|r| r.originals_failed > 0) {
        outln!(
            "{} could not run the original of {} of the {} program(s) it ran (first: {}): its lines of those were not compared",
            r.runtime,
            r.originals_failed,
            r.cases,
            r.first_failure.as_deref().unwrap_or("")
        );
    }
    if s.failures.is_empty() {
        if s.unusable_runtimes().is_empty() {
            outln!("no failures");
        } else {
            outln!("no verdict: a runtime ran none of the original programs");
        }
    }
    let line = |f: &fuzz::FailureCount| {
        let repros: Vec<String> = f
            .repros
            .iter()
            .filter(|p| !p.as_os_str().is_empty())
            .map(|p| p.display().to_string())
            .collect();
        outln!(
            "{}: {} program(s); repro: {}",
            f.signature,
            f.cases,
            repros.join(", ")
        );
    };
    s.failures.iter().for_each(line);
    if !s.runtime_defects.is_empty() {
        outln!(
            "runtime defects exposed ({} program(s); not failures of the rewriter: the runtime died in its own code on output that verifies and runs on the other runtime; --fail-on-runtime-defects counts them):",
            s.runtime_defect_cases
        );
        s.runtime_defects.iter().for_each(line);
    }
}

/// Which runtimes `equiv` runs the two programs under (it has nothing to do without one).
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum EquivRuntime {
    /// Mono only.
    Mono,
    /// CoreCLR only.
    Coreclr,
    /// Mono and CoreCLR.
    Both,
}

impl From<EquivRuntime> for RuntimeChoice {
    fn from(r: EquivRuntime) -> Self {
        match r {
            EquivRuntime::Mono => RuntimeChoice::Mono,
            EquivRuntime::Coreclr => RuntimeChoice::Coreclr,
            EquivRuntime::Both => RuntimeChoice::Both,
        }
    }
}

/// Arguments of `ilcheck equiv`.
#[derive(clap::Args)]
pub struct EquivArgs {
    /// The program as ilcheck generated it (its manifest, NAME.manifest.json, beside it).
    pub original: PathBuf,
    /// The rewritten program.
    pub patched: PathBuf,
    /// Runtimes that run both.
    #[arg(long, value_enum, default_value = "both")]
    pub runtime: EquivRuntime,
    /// Files copied beside both programs (e.g. a probe assembly).
    #[arg(long, num_args = 1.., value_name = "FILE")]
    pub with: Vec<PathBuf>,
    /// Deadline of one program run, in seconds.
    #[arg(long, default_value_t = 60)]
    pub run_timeout: u64,
    /// Print the comparison as JSON.
    #[arg(long)]
    pub json: bool,
}

fn stage(dir: &Path, program: &Path, with: &[PathBuf]) -> Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let name = program
        .file_name()
        .with_context(|| format!("{}: not a file name", program.display()))?;
    let to = dir.join(name);
    std::fs::copy(program, &to).with_context(|| format!("reading {}", program.display()))?;
    for f in with {
        let n = f
            .file_name()
            .with_context(|| format!("{}: not a file", f.display()))?;
        std::fs::copy(f, dir.join(n)).with_context(|| format!("reading {}", f.display()))?;
    }
    Ok(to)
}

/// Runs `ilcheck equiv`.
pub fn equiv(a: EquivArgs) -> Result<ExitCode> {
    // The original is the reference: one that cannot be read is a usage error. The patched
    // file is what is judged: one that is there but is not .NET is a finding (exit 1), not a
    // run whose every result line differs.
    if let Err(e) = Image::open(&a.original) {
        bail!(
            "{}: the original is not a readable .NET assembly: {e}",
            a.original.display()
        );
    }
    match Image::open(&a.patched) {
        Ok(_) => {}
        Err(ImageError::Io(e)) => {
            bail!("{}: cannot read the patched file: {e}", a.patched.display())
        }
        Err(e) => {
            let why = e.to_string();
            if a.json {
                let v = serde_json::json!({ "patched": a.patched, "not_dotnet": why });
                outln!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                outln!(
                    "{}: the patched file is not a .NET assembly: {why}; nothing was run",
                    a.patched.display()
                );
            }
            return Ok(ExitCode::from(1));
        }
    }
    let runtimes = runtimes(a.runtime.into())?;
    let expected: Option<Vec<String>> = match Manifest::beside(&a.original) {
        Some(p) if p.is_file() => {
            let text = std::fs::read_to_string(&p)?;
            let m: Manifest =
                serde_json::from_str(&text).with_context(|| format!("{}", p.display()))?;
            Some(m.expected_lines().into_iter().map(String::from).collect())
        }
        _ => {
            errln!(
                "ilcheck equiv: no manifest beside {}: comparing the two programs' result lines only",
                a.original.display()
            );
            None
        }
    };
    let work = scratch("equiv");
    let staged = stage(&work.join("original"), &a.original, &a.with)
        .and_then(|o| Ok((o, stage(&work.join("patched"), &a.patched, &a.with)?)));
    let timeout = Duration::from_secs(a.run_timeout);
    let mut out = Vec::new();
    let ran = staged.and_then(|(o, p)| {
        for rt in &runtimes {
            out.push(compare_on(rt, &o, &p, expected.as_deref(), timeout)?);
        }
        Ok(())
    });
    let _ = std::fs::remove_dir_all(&work);
    ran?;
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        for c in &out {
            if let Some(why) = &c.original_failed {
                outln!(
                    "{}: not compared: the original {why}; patched {}",
                    c.runtime,
                    c.rewritten.ended
                );
                continue;
            }
            outln!(
                "{}: {} of {} result lines differ; original {}, patched {}",
                c.runtime,
                c.diffs.len(),
                c.compared,
                c.original.ended,
                c.rewritten.ended
            );
            if !c.runtime_disagrees.is_empty() {
                outln!(
                    "  not compared ({} got them wrong on the original too): {}",
                    c.runtime,
                    c.runtime_disagrees.join(", ")
                );
            }
            for d in c.diffs.iter().take(20) {
                outln!("  -{}\n  +{}", d.original, d.rewritten);
            }
            if c.crashed() && !c.rewritten.stderr_tail.is_empty() {
                outln!("  stderr of the patched run:\n{}", c.rewritten.stderr_tail);
            }
        }
    }
    // The original is ilcheck's known-good program: a runtime that cannot run it is broken or
    // not set up, and its comparison says nothing either way. But a program of the user's own
    // (no manifest) that ends well and prints no `@` line is not a runtime's fault: equiv has
    // nothing to compare in it.
    let mut no_lines = Vec::new();
    let mut broken = Vec::new();
    for (rt, c) in runtimes.iter().zip(&out) {
        let Some(why) = &c.original_failed else {
            continue;
        };
        if expected.is_none() && c.original.ok && c.original.result_lines == 0 {
            no_lines.push(rt.kind().name());
        } else {
            broken.push(format!(
                "{} could not run the original: it {why}",
                rt.describe()
            ));
        }
    }
    if !broken.is_empty() {
        bail!(
            "{}; the runtime is broken or not set up (scripts/setup.sh installs it; --runtime chooses others)",
            broken.join("; ")
        );
    }
    if !no_lines.is_empty() {
        bail!(
            "{}: the original ran to completion (exit 0) under {} but printed no result lines: \
             equiv compares only `@` result lines (`@ M3#0 ret 42 trace 0`), as the programs \
             `ilcheck generate` writes print them (see docs/fuzz.md), so nothing was compared",
            a.original.display(),
            no_lines.join(" and ")
        );
    }
    Ok(if out.iter().all(|c| c.same()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
