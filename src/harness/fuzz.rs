//! The external-rewriter loop: generate a program, run the user's rewriter on it, verify the
//! output against the original (`verify --baseline`), run both under the runtimes and compare
//! their result lines; classify what fails, minimise it, and keep it as a repro folder.
//!
//! A case is one program of M generated methods. Its failure has a *signature* — its kind and,
//! for a verifier finding, the code; for a runtime, which — and minimisation keeps the
//! signature while it drops methods and then simplifies each remaining method's choice stream
//! (zeroed choices pick the simplest statement, so fewer instructions and clauses).

use super::equiv::{RuntimeComparison, compare_with, original_failure};
use super::program::{
    Manifest, Program, ProgramMethod, build_program, generate_methods, generate_program,
    result_lines,
};
use super::rewriter::RewriterCommand;
use super::runtime::{Runtime, RuntimeError};
use super::server::{Executor, START_TIMEOUT, Server, ServerOptions, ServerStats, Unanswered};
use crate::corpus::{self, Input};
use crate::generate::Config;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What the loop needs besides the seed.
#[derive(Clone, Debug)]
pub struct Setup {
    /// The user's rewriter.
    pub rewriter: RewriterCommand,
    /// Runtimes to run both programs under (none: verify only).
    pub runtimes: Vec<Runtime>,
    /// Files copied beside both programs (a probe assembly, say).
    pub with: Vec<PathBuf>,
    /// The generator's settings.
    pub config: Config,
    /// Methods per program.
    pub methods_per_assembly: u32,
    /// Deadline of one rewriter run.
    pub rewriter_timeout: Duration,
    /// Deadline of one program run.
    pub run_timeout: Duration,
    /// Runtime servers (the default): programs run in long-lived runtime processes, each
    /// failure again in a process of its own. `None`: every run in a process of its own.
    pub servers: Option<ServerOptions>,
}

impl Setup {
    /// One executor per runtime, in the order of [`Setup::runtimes`]: what a worker runs
    /// programs with.
    pub fn executors(&self) -> Vec<Executor> {
        self.runtimes
            .iter()
            .map(|rt| match &self.servers {
                Some(o) => Executor::with_servers(rt.clone(), o.clone()),
                None => Executor::fresh(rt.clone()),
            })
            .collect()
    }

    /// Checks that every runtime runs a small generated program as its manifest says, in a
    /// process of its own and, with servers, through a runtime server: a runtime that crashes,
    /// hangs or prints nothing on every program would otherwise make every case look clean
    /// (a rewritten program is only judged against its original's run). The program is
    /// written into `dir`, which the caller removes.
    pub fn check_runtimes(&self, dir: &Path) -> Result<(), RuntimeUnusable> {
        for rt in &self.runtimes {
            check_runtime(rt, self.servers.as_ref(), dir, self.run_timeout)?;
        }
        Ok(())
    }
}

/// Methods of the program [`Setup::check_runtimes`] runs: few, so that a runtime's defect on
/// some generated method is unlikely to be taken for a broken runtime.
pub const CHECK_METHODS: u32 = 4;

/// Why a runtime that was found cannot check programs ([`Setup::check_runtimes`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeUnusable {
    /// The runtime did not run a generated program as its manifest says.
    #[error(
        "{runtime} cannot run the programs ilcheck generates: a program of {CHECK_METHODS} generated methods {why}; the runtime is broken or not set up (scripts/setup.sh installs it; --runtime chooses others)"
    )]
    Program {
        /// The runtime and where it is (`mono (/usr/bin/mono)`).
        runtime: String,
        /// What the run did.
        why: String,
    },
    /// The runtime runs programs in processes of their own, but not through a server.
    #[error(
        "{runtime} runs generated programs, but its runtime server {why}; --no-server runs every program in a process of its own"
    )]
    Server {
        /// The runtime and where it is.
        runtime: String,
        /// What the server did.
        why: String,
    },
    /// The program could not be written.
    #[error("writing the program that checks the runtimes: {0}")]
    Io(#[from] std::io::Error),
    /// The runtime could not be started, or a stop was requested.
    #[error("{runtime}: {source}")]
    Runtime {
        /// The runtime and where it is.
        runtime: String,
        /// Why.
        source: RuntimeError,
    },
}

fn check_runtime(
    rt: &Runtime,
    servers: Option<&ServerOptions>,
    dir: &Path,
    timeout: Duration,
) -> Result<(), RuntimeUnusable> {
    let runtime = rt.describe();
    let program = generate_program("check", 1, CHECK_METHODS, &Config::default())
        .map_err(std::io::Error::other)?;
    std::fs::create_dir_all(dir)?;
    let exe = program.write_to(dir)?;
    let expected = program.manifest.expected_lines().len();
    let lines =
        |o: &super::process::Outcome| result_lines(&String::from_utf8_lossy(&o.stdout)).len();
    let o = rt
        .run(&exe, &[], timeout)
        .map_err(|source| RuntimeUnusable::Runtime {
            runtime: runtime.clone(),
            source,
        })?;
    if let Some(why) = original_failure(&o, lines(&o), Some(expected)) {
        return Err(RuntimeUnusable::Program { runtime, why });
    }
    let Some(options) = servers else {
        return Ok(());
    };
    let unanswered = |e: Unanswered| match e {
        Unanswered::Stopped => RuntimeUnusable::Runtime {
            runtime: runtime.clone(),
            source: RuntimeError::Process(super::process::ProcessError::Stopped {
                program: rt.program().display().to_string(),
            }),
        },
        Unanswered::Start(why) => RuntimeUnusable::Server {
            runtime: runtime.clone(),
            why: format!("did not start: {why}"),
        },
        e => RuntimeUnusable::Server {
            runtime: runtime.clone(),
            why: format!("did not run a generated program: {e}"),
        },
    };
    let mut server =
        Server::start(rt, &options.host, timeout.min(START_TIMEOUT)).map_err(unanswered)?;
    let o = server.run(&exe, timeout).map_err(unanswered)?;
    match original_failure(&o, lines(&o), Some(expected)) {
        Some(why) => Err(RuntimeUnusable::Server {
            runtime,
            why: format!("ran a generated program that {why}"),
        }),
        None => Ok(()),
    }
}

/// Where the type pass finds the programs' references: beside the program (the `--with`
/// files are copied there), then the runtimes' directories. One store for the whole run, so
/// each reference is opened once.
fn references() -> &'static crate::verify::types::ModuleStore {
    static STORE: std::sync::OnceLock<crate::verify::types::ModuleStore> =
        std::sync::OnceLock::new();
    STORE.get_or_init(|| crate::verify::types::ModuleStore::with_runtime_dirs(Vec::new()))
}

/// What went wrong in a case, most basic first.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum FailureKind {
    /// The rewriter exited non-zero or was killed by a signal.
    RewriterCrashed,
    /// The rewriter did not finish in time (killed with its process group).
    RewriterTimedOut,
    /// The rewriter exited 0 but wrote no output file.
    NoOutput,
    /// The output is not a readable .NET assembly.
    NotDotNet,
    /// `verify --baseline` reports a new finding.
    Finding,
    /// A runtime refused rewritten code (InvalidProgramException and kin).
    RuntimeRejected,
    /// The rewritten program crashed, hung or exited non-zero under a runtime.
    RuntimeCrashed,
    /// A runtime died in its own code (an internal assertion, a native crash) on a rewritten
    /// program the verifier finds nothing new in and every other runtime runs with the expected
    /// results: a defect of that runtime the rewrite exposes. Kept and reported, but not a
    /// failure of the rewriter unless asked (`--fail-on-runtime-defects`).
    RuntimeDefect,
    /// The rewritten program printed different result lines.
    DifferentResults,
}

impl FailureKind {
    /// The kind's stable name (`finding`, `different-results`, …).
    pub fn name(&self) -> &'static str {
        match self {
            FailureKind::RewriterCrashed => "rewriter-crashed",
            FailureKind::RewriterTimedOut => "rewriter-timed-out",
            FailureKind::NoOutput => "no-output",
            FailureKind::NotDotNet => "not-dotnet",
            FailureKind::Finding => "finding",
            FailureKind::RuntimeRejected => "runtime-rejected",
            FailureKind::RuntimeCrashed => "runtime-crashed",
            FailureKind::RuntimeDefect => "runtime-defect",
            FailureKind::DifferentResults => "different-results",
        }
    }

    /// Whether the kind is a failure of the rewriter (all but [`FailureKind::RuntimeDefect`]).
    pub fn blames_rewriter(&self) -> bool {
        match self {
            FailureKind::RuntimeDefect => false,
            FailureKind::RewriterCrashed
            | FailureKind::RewriterTimedOut
            | FailureKind::NoOutput
            | FailureKind::NotDotNet
            | FailureKind::Finding
            | FailureKind::RuntimeRejected
            | FailureKind::RuntimeCrashed
            | FailureKind::DifferentResults => true,
        }
    }
}

/// A verifier finding of the rewritten program, short.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct FindingSummary {
    /// The method (`M3`), or empty for an image-level finding.
    pub method: String,
    /// The method's full name.
    pub full_name: String,
    /// IL offset.
    pub offset: u32,
    /// The stable code.
    pub code: String,
    /// In words.
    pub message: String,
}

/// Everything known about a failed case.
#[derive(Clone, Debug, Serialize)]
pub struct Failure {
    /// The first thing that went wrong.
    pub kind: FailureKind,
    /// Kind plus code or runtime: what minimisation keeps (`finding:BranchOutOfTry`).
    pub signature: String,
    /// One line.
    pub summary: String,
    /// Methods implicated (by a finding or a differing line), in program order.
    pub methods: Vec<String>,
    /// The rewriter's run: how it ended and its standard error's tail.
    pub rewriter: String,
    /// New verifier findings.
    pub findings: Vec<FindingSummary>,
    /// Per runtime, when the programs ran.
    pub runtimes: Vec<RuntimeComparison>,
}

/// Wall time per stage, summed over cases.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct StageTimes {
    /// Generating and writing programs.
    pub generate: f64,
    /// The user's rewriter.
    pub rewriter: f64,
    /// `verify --baseline`.
    pub verify: f64,
    /// Both programs under every runtime.
    pub runtimes: f64,
    /// Minimising failures and checking the minimised programs again (every stage of those
    /// checks: they are not counted in the others).
    pub minimise: f64,
}

impl StageTimes {
    /// Adds `other` to these.
    pub fn add(&mut self, other: &StageTimes) {
        self.generate += other.generate;
        self.rewriter += other.rewriter;
        self.verify += other.verify;
        self.runtimes += other.runtimes;
        self.minimise += other.minimise;
    }
}

/// One case's result.
#[derive(Clone, Debug)]
pub struct CaseResult {
    /// The failure, when the case failed.
    pub failure: Option<Failure>,
    /// Where the time went.
    pub times: StageTimes,
    /// Methods in the program.
    pub methods: usize,
    /// The original program (assembly and manifest) as checked.
    pub original: PathBuf,
    /// Where the rewritten program was to be written.
    pub rewritten: PathBuf,
    /// A run timed out under a deadline cut below the configured one (a check near the end
    /// of minimisation's budget): the result does not say whether the programs hang.
    pub cut: bool,
    /// The runtimes the programs ran under (none when the rewriter failed, or a verifier
    /// finding decided the case first).
    pub ran: Vec<String>,
    /// Per runtime that could not run the original, why
    /// ([`RuntimeComparison::original_failed`]): `(runtime, why)`.
    pub originals_failed: Vec<(String, String)>,
}

/// The error a check returns when a stop was requested ([`super::process::request_stop`]):
/// the loop ends without counting the case, and a failure being minimised keeps what it has.
fn stopped_error() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::Interrupted, "stopped (interrupted)")
}

/// Whether `e` is [`stopped_error`]'s.
fn is_stopped(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::Interrupted && super::process::stop_requested()
}

fn secs(since: Instant) -> f64 {
    since.elapsed().as_secs_f64()
}

/// The method name (`M3`) in a full name `Ilcheck.Program::M3(int32)`.
fn short_name(full: &str) -> String {
    full.split("::")
        .nth(1)
        .and_then(|s| s.split('(').next())
        .map(|s| s.trim_start_matches("Run_"))
        .map(|s| s.split("_c").next().unwrap_or(s))
        .unwrap_or("")
        .to_string()
}

fn copy_with(setup: &Setup, dir: &Path) -> std::io::Result<()> {
    for f in &setup.with {
        let name = f
            .file_name()
            .ok_or_else(|| std::io::Error::other(format!("{}: not a file", f.display())))?;
        std::fs::copy(f, dir.join(name))?;
    }
    Ok(())
}

/// Writes `program` into `dir/original`, runs the rewriter into `dir/rewritten`, and checks
/// the result, running programs through `execs` ([`Setup::executors`]). I/O errors of ilcheck's
/// own (a full disk) are errors; everything the rewriter or a runtime does is a result.
/// How far [`check_program`] goes once a failure is certain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Depth {
    /// Stop at what decides the signature: a new verifier finding decides it, so the
    /// runtimes do not run (the loop and minimisation, where a rewritten program that hangs
    /// would cost the run timeout per check for nothing).
    Decide,
    /// Run everything, for a repro's report: how each runtime takes the rewritten program.
    Report,
}

/// Checks one program: the rewriter, the verifier against the original, and the runtimes.
/// With `until`, no run's deadline passes it (each is the configured one or the time left,
/// whichever is shorter; a run that times out under a shortened deadline sets
/// [`CaseResult::cut`]).
pub fn check_program(
    setup: &Setup,
    execs: &mut [Executor],
    program: &Program,
    dir: &Path,
    depth: Depth,
    until: Option<Instant>,
) -> std::io::Result<CaseResult> {
    let deadline = |configured: Duration| {
        until.map_or(configured, |u| {
            configured.min(u.saturating_duration_since(Instant::now()))
        })
    };
    let mut times = StageTimes::default();
    let t = Instant::now();
    let (odir, rdir) = (dir.join("original"), dir.join("rewritten"));
    std::fs::create_dir_all(&odir)?;
    std::fs::create_dir_all(&rdir)?;
    let original = program.write_to(&odir)?;
    let rewritten = rdir.join(&program.manifest.assembly);
    let _ = std::fs::remove_file(&rewritten);
    copy_with(setup, &odir)?;
    copy_with(setup, &rdir)?;
    times.generate += secs(t);
    let mut result = CaseResult {
        failure: None,
        times,
        methods: program.manifest.methods.len(),
        original: original.clone(),
        rewritten: rewritten.clone(),
        cut: false,
        ran: Vec::new(),
        originals_failed: Vec::new(),
    };
    let fail = |kind: FailureKind, signature: String, summary: String, rewriter: String| Failure {
        kind,
        signature,
        summary,
        methods: Vec::new(),
        rewriter,
        findings: Vec::new(),
        runtimes: Vec::new(),
    };

    let t = Instant::now();
    let rewriter_deadline = deadline(setup.rewriter_timeout);
    let run = setup.rewriter.run(&original, &rewritten, rewriter_deadline);
    result.times.rewriter += secs(t);
    result.cut |=
        rewriter_deadline < setup.rewriter_timeout && run.as_ref().is_ok_and(|o| o.timed_out);
    let run = match run {
        Ok(o) => o,
        Err(super::process::ProcessError::Stopped { .. }) => return Err(stopped_error()),
        Err(e) => {
            let k = FailureKind::RewriterCrashed;
            result.failure = Some(fail(
                k.clone(),
                k.name().into(),
                e.to_string(),
                e.to_string(),
            ));
            return Ok(result);
        }
    };
    let rewriter_note = {
        let tail = |bytes: &[u8], what: &str| {
            let text = String::from_utf8_lossy(bytes);
            let lines: Vec<&str> = text.lines().rev().take(20).collect();
            if lines.is_empty() {
                String::new()
            } else {
                let lines: Vec<&str> = lines.into_iter().rev().collect();
                format!("\n--- {what} (last lines)\n{}", lines.join("\n"))
            }
        };
        format!(
            "{}{}{}",
            run.describe(),
            tail(&run.stdout, "stdout"),
            tail(&run.stderr, "stderr")
        )
    };
    let early = if run.timed_out {
        Some((
            FailureKind::RewriterTimedOut,
            format!("the rewriter {}", run.describe()),
        ))
    } else if !run.success() {
        Some((
            FailureKind::RewriterCrashed,
            format!("the rewriter ended with {}", run.describe()),
        ))
    } else if !rewritten.is_file() {
        Some((
            FailureKind::NoOutput,
            "the rewriter exited 0 but wrote no output".into(),
        ))
    } else {
        None
    };
    if let Some((k, summary)) = early {
        result.failure = Some(fail(k.clone(), k.name().into(), summary, rewriter_note));
        return Ok(result);
    }

    let t = Instant::now();
    // Structure, alignment and types (invalid findings: what the runtime may reject).
    let store = references();
    let mut pass = corpus::TypePass::new(store);
    let baseline = corpus::Baseline::load_with(&[Input::named(&original)], Some(&mut pass));
    let mut report = corpus::VerifyReport::default();
    if let Ok(baseline) = &baseline {
        let opts = corpus::VerifyOptions {
            types: true,
            level: crate::verify::Level::Invalid,
            ..Default::default()
        };
        corpus::verify_with(
            &[Input::named(&rewritten)],
            opts,
            store,
            Some(baseline),
            &mut report,
            |_| {},
        );
    }
    result.times.verify += secs(t);
    if let Err(e) = baseline {
        // The original is ilcheck's own output: unreadable means ilcheck is broken.
        return Err(std::io::Error::other(format!(
            "reading the original back: {e}"
        )));
    }
    if let Some(e) = report.image_errors.first() {
        let k = FailureKind::NotDotNet;
        result.failure = Some(fail(
            k.clone(),
            k.name().into(),
            format!("the output is not a readable .NET assembly: {}", e.reason),
            rewriter_note,
        ));
        return Ok(result);
    }
    let findings: Vec<FindingSummary> = report
        .findings
        .iter()
        .map(|f| FindingSummary {
            method: short_name(&f.method),
            full_name: f.method.clone(),
            offset: f.offset,
            code: f.code.clone(),
            message: f.message.clone(),
        })
        .collect();

    let t = Instant::now();
    let mut runtimes = Vec::new();
    let expected: Vec<String> = program
        .manifest
        .expected_lines()
        .into_iter()
        .map(String::from)
        .collect();
    let decided = depth == Depth::Decide && !findings.is_empty();
    for exec in execs.iter_mut().filter(|_| !decided) {
        let run_deadline = deadline(setup.run_timeout);
        match compare_with(exec, &original, &rewritten, Some(&expected), run_deadline) {
            Ok(c) => {
                result.cut |= run_deadline < setup.run_timeout
                    && (c.original.timed_out || c.rewritten.timed_out);
                runtimes.push(c);
            }
            Err(RuntimeError::Process(super::process::ProcessError::Stopped { .. })) => {
                return Err(stopped_error());
            }
            Err(e) => {
                return Err(std::io::Error::other(format!(
                    "running {}: {e}",
                    exec.runtime().describe()
                )));
            }
        }
    }
    result.times.runtimes += secs(t);
    for c in &runtimes {
        result.ran.push(c.runtime.clone());
        if let Some(why) = &c.original_failed {
            result
                .originals_failed
                .push((c.runtime.clone(), why.clone()));
        }
    }

    let mut methods: Vec<String> = Vec::new();
    let mut implicate = |m: &str| {
        if !m.is_empty() && !methods.iter().any(|x| x == m) {
            methods.push(m.to_string());
        }
    };
    for f in &findings {
        implicate(&f.method);
    }
    for c in &runtimes {
        for d in &c.diffs {
            implicate(&d.method);
        }
    }
    let order = |m: &String| {
        program
            .manifest
            .methods
            .iter()
            .position(|x| &x.name == m)
            .unwrap_or(usize::MAX)
    };
    methods.sort_by_key(order);

    let (kind, signature, summary) = if let Some(f) = findings.first() {
        let codes: Vec<&str> = findings.iter().map(|f| f.code.as_str()).collect();
        (
            FailureKind::Finding,
            format!("finding:{}", f.code),
            format!(
                "{} new verifier finding(s): {}",
                findings.len(),
                dedup(&codes).join(", ")
            ),
        )
    } else if let Some(c) = runtimes.iter().find(|c| c.rejected()) {
        let d = c
            .diffs
            .iter()
            .find(|d| d.rejected)
            .map(|d| d.rewritten.clone());
        (
            FailureKind::RuntimeRejected,
            format!("runtime-rejected:{}", c.runtime),
            format!(
                "{} refused rewritten code: {}",
                c.runtime,
                d.unwrap_or_default()
            ),
        )
    } else if let Some((c, defect)) = runtimes.iter().find_map(|c| {
        let others_fine = runtimes.len() > 1
            && runtimes
                .iter()
                .filter(|o| o.runtime != c.runtime)
                .all(|o| o.same() && o.compared > 0 && o.runtime_disagrees.is_empty());
        match &c.rewritten.defect {
            Some(d) if c.crashed() && others_fine => Some((c, d)),
            _ => None,
        }
    }) {
        let others: Vec<&str> = runtimes
            .iter()
            .filter(|o| o.runtime != c.runtime)
            .map(|o| o.runtime.as_str())
            .collect();
        (
            FailureKind::RuntimeDefect,
            format!("runtime-defect:{}:{defect}", c.runtime),
            format!(
                "{} failed in its own code ({defect}) on the rewritten program, which the verifier finds nothing new in and {} runs with the expected results: a defect of {} the rewrite exposes",
                c.runtime,
                others.join(" and "),
                c.runtime
            ),
        )
    } else if let Some(c) = runtimes.iter().find(|c| c.crashed()) {
        (
            FailureKind::RuntimeCrashed,
            format!("runtime-crashed:{}", c.runtime),
            format!(
                "the rewritten program under {} ended with {}",
                c.runtime, c.rewritten.ended
            ),
        )
    } else if let Some(c) = runtimes.iter().find(|c| !c.diffs.is_empty()) {
        (
            FailureKind::DifferentResults,
            format!("different-results:{}", c.runtime),
            format!(
                "{} result line(s) differ under {}",
                c.diffs.len(),
                c.runtime
            ),
        )
    } else {
        return Ok(result);
    };
    result.failure = Some(Failure {
        kind,
        signature,
        summary,
        methods,
        rewriter: rewriter_note,
        findings,
        runtimes,
    });
    Ok(result)
}

fn dedup<'a>(items: &[&'a str]) -> Vec<&'a str> {
    let mut out: Vec<&str> = Vec::new();
    for i in items {
        if !out.contains(i) {
            out.push(i);
        }
    }
    out
}

/// Builds and checks the program of `methods` (`until` as for [`check_program`]).
pub fn check_methods(
    setup: &Setup,
    execs: &mut [Executor],
    name: &str,
    methods: &[ProgramMethod],
    dir: &Path,
    depth: Depth,
    until: Option<Instant>,
) -> std::io::Result<(Program, CaseResult)> {
    let t = Instant::now();
    let program = build_program(name, methods, &setup.config).map_err(std::io::Error::other)?;
    let gen_time = secs(t);
    let mut r = check_program(setup, execs, &program, dir, depth, until)?;
    r.times.generate += gen_time;
    Ok((program, r))
}

/// How far minimisation may go.
#[derive(Clone, Copy, Debug)]
pub struct MinimiseBudget {
    /// Most checks (each runs the rewriter and the runtimes).
    pub checks: u32,
    /// Most wall time: no check runs past it (each run's deadline is cut to the time left, and
    /// a check whose run timed out under a cut deadline does not count as failing), so a
    /// hanging rewriter or program costs at most this, not a full deadline per check.
    pub time: Duration,
}

impl Default for MinimiseBudget {
    fn default() -> Self {
        MinimiseBudget {
            checks: 150,
            time: Duration::from_secs(90),
        }
    }
}

/// Minimises a failing program: the smallest set of methods, each with the simplest choice
/// stream, that still fails with the failure's signature, starting from the methods it
/// implicates. Returns the methods.
pub fn minimise(
    setup: &Setup,
    execs: &mut [Executor],
    name: &str,
    methods: Vec<ProgramMethod>,
    failure: &Failure,
    dir: &Path,
    budget: MinimiseBudget,
) -> std::io::Result<Vec<ProgramMethod>> {
    let (implicated, signature) = (&failure.methods, &failure.signature);
    let until = Instant::now() + budget.time;
    let mut checks = 0u32;
    let mut fails = |candidate: &[ProgramMethod]| -> std::io::Result<bool> {
        if candidate.is_empty()
            || checks >= budget.checks
            || Instant::now() >= until
            || super::process::stop_requested()
        {
            return Ok(false);
        }
        checks += 1;
        let depth = Depth::Decide;
        let (_, r) = check_methods(setup, execs, name, candidate, dir, depth, Some(until))?;
        Ok(!r.cut && r.failure.is_some_and(|f| &f.signature == signature))
    };

    let mut current = methods;
    // The implicated methods alone, when they keep the failure.
    let only: Vec<ProgramMethod> = current
        .iter()
        .filter(|m| implicated.contains(&m.name))
        .cloned()
        .collect();
    if !only.is_empty() && only.len() < current.len() && fails(&only)? {
        current = only;
    }
    // Each implicated method alone.
    if current.len() > 1 {
        for m in current.clone() {
            if implicated.contains(&m.name) && fails(std::slice::from_ref(&m))? {
                current = vec![m];
                break;
            }
        }
    }
    // ddmin over methods: drop chunks, halving the chunk size.
    let mut chunk = current.len().div_ceil(2);
    while chunk >= 1 && current.len() > 1 {
        let mut i = 0;
        let mut dropped = false;
        while i < current.len() {
            let candidate: Vec<ProgramMethod> = current
                .iter()
                .enumerate()
                .filter(|(k, _)| *k < i || *k >= i + chunk)
                .map(|(_, m)| m.clone())
                .collect();
            if fails(&candidate)? {
                current = candidate;
                dropped = true;
            } else {
                i += chunk;
            }
        }
        if !dropped {
            if chunk == 1 {
                break;
            }
            chunk = chunk.div_ceil(2);
        }
    }
    // Simplify each method: zero ranges of its choice stream, halving the range.
    for k in 0..current.len() {
        let mut choices = current[k].choice_bytes();
        let end = choices.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
        choices.truncate(end);
        let mut size = choices.len().next_power_of_two().max(1);
        while size >= 4 {
            let mut at = 0;
            while at < choices.len() {
                let hi = (at + size).min(choices.len());
                if choices[at..hi].iter().any(|&b| b != 0) {
                    let mut trial = choices.clone();
                    trial[at..hi].fill(0);
                    let mut candidate = current.clone();
                    candidate[k] = ProgramMethod::from_choices(
                        current[k].name.clone(),
                        current[k].seed,
                        trial.clone(),
                        &setup.config,
                        current[k].peers.clone(),
                    );
                    if fails(&candidate)? {
                        choices = trial;
                        current = candidate;
                    }
                }
                at += size;
            }
            size /= 2;
        }
    }
    Ok(current)
}

/// Failures found by the loop, per signature.
#[derive(Clone, Debug, Default, Serialize)]
pub struct FailureCount {
    /// The signature.
    pub signature: String,
    /// Cases that failed with it.
    pub cases: u64,
    /// Repro folders kept for it.
    pub repros: Vec<PathBuf>,
}

/// One runtime's part in the loop ([`FuzzSummary::by_runtime`]).
#[derive(Clone, Debug, Default, Serialize)]
pub struct RuntimeCases {
    /// `mono` or `coreclr`.
    pub runtime: String,
    /// Cases whose programs ran under it.
    pub cases: u64,
    /// Of those, cases whose original it could not run: their lines under it were not
    /// compared (or only those the original printed).
    pub originals_failed: u64,
    /// The first such case's program and what the runtime did (`g17.exe: timed out after
    /// 20.0 s`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_failure: Option<String>,
}

impl FuzzSummary {
    /// The runtimes that ran cases and could not run a single one of their originals: nothing
    /// was checked under them, so the loop's verdict does not hold for them.
    pub fn unusable_runtimes(&self) -> Vec<&RuntimeCases> {
        self.by_runtime
            .iter()
            .filter(|r| r.cases > 0 && r.originals_failed == r.cases)
            .collect()
    }
}

/// The loop's summary (`ilcheck fuzz --json`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct FuzzSummary {
    /// `ilcheck.fuzz/1`.
    pub schema: &'static str,
    /// The rewriter command template.
    pub rewriter: String,
    /// Runtimes used.
    pub runtimes: Vec<String>,
    /// First seed.
    pub seed: u64,
    /// Cases (programs) checked.
    pub cases: u64,
    /// Generated methods checked.
    pub methods: u64,
    /// Cases that failed (runtime defects not included).
    pub failed_cases: u64,
    /// Per signature (runtime defects not included).
    pub failures: Vec<FailureCount>,
    /// Cases whose rewritten program exposed a defect of a runtime
    /// ([`FailureKind::RuntimeDefect`]).
    pub runtime_defect_cases: u64,
    /// Runtime defects, per signature.
    pub runtime_defects: Vec<FailureCount>,
    /// Per runtime: the cases whose programs it ran, and those whose original it could not
    /// run ([`CaseResult::originals_failed`]).
    pub by_runtime: Vec<RuntimeCases>,
    /// Wall time of the loop.
    pub seconds: f64,
    /// Time per stage, summed over workers (minimisation not included).
    pub stages: StageTimes,
    /// Program runs through runtime servers and in processes of their own (minimisation
    /// included).
    pub servers: ServerStats,
    /// Methods checked per second of wall time.
    pub methods_per_second: f64,
    /// The loop was stopped by a signal ([`super::process::request_stop`]) before its end:
    /// the cases counted are those it finished, and every failure found has its repro folder.
    pub stopped: bool,
}

/// Writes a repro folder for a minimised failure: the programs, `report.md`, and the command
/// that reproduces it.
pub fn write_repro(
    setup: &Setup,
    dir: &Path,
    program: &Program,
    result: &CaseResult,
    from_methods: usize,
) -> std::io::Result<()> {
    let Some(f) = &result.failure else {
        return Ok(());
    };
    let name = &program.manifest.assembly;
    let mut md = String::new();
    use std::fmt::Write as _;
    let _ = writeln!(md, "# ilcheck fuzz: {}\n", f.signature);
    let _ = writeln!(md, "{}\n", f.summary);
    let how = ReproCommands::new(setup, dir, name);
    let _ = writeln!(md, "- rewriter: `{}`", setup.rewriter.template());
    let _ = writeln!(
        md,
        "- run from: `{}` (the rewriter's working directory)",
        how.cwd
    );
    let _ = writeln!(
        md,
        "- program: `original/{name}`, {} method(s) ({}), minimised from {from_methods}; seed {}",
        program.manifest.methods.len(),
        program
            .manifest
            .methods
            .iter()
            .map(|m| m.name.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        program.manifest.seed,
    );
    let _ = writeln!(md, "- implicated: {}\n", f.methods.join(", "));
    let _ = writeln!(
        md,
        "## Reproduce\n\nFrom any directory (the rewriter runs where it ran, its paths relative to \
         that directory; `--replay` compares what it finds with `failure.json`):\n\n```sh"
    );
    let _ = writeln!(md, "{}", how.replay);
    let _ = writeln!(md, "# or step by step:");
    for line in &how.steps {
        let _ = writeln!(md, "{line}");
    }
    let _ = writeln!(md, "```\n");
    if !f.findings.is_empty() {
        let _ = writeln!(md, "## Verifier findings (new against the original)\n");
        let _ = writeln!(
            md,
            "| method | offset | code | message |\n|---|---|---|---|"
        );
        for x in &f.findings {
            let _ = writeln!(
                md,
                "| {} | IL_{:04x} | `{}` | {} |",
                x.full_name,
                x.offset,
                x.code,
                x.message.replace('|', "\\|")
            );
        }
        md.push('\n');
        let codes: Vec<&str> = f.findings.iter().map(|x| x.code.as_str()).collect();
        for code in dedup(&codes) {
            let rule = crate::verify::Code::from_name(code).map_or("", |c| c.description());
            let hint = rewriter_hint(code);
            if !rule.is_empty() || !hint.is_empty() {
                let _ = writeln!(
                    md,
                    "- `{code}`: {rule}{}{hint}",
                    if hint.is_empty() { "" } else { " — " }
                );
            }
        }
        md.push('\n');
    }
    for c in &f.runtimes {
        if c.same() && c.runtime_disagrees.is_empty() && c.original_failed.is_none() {
            continue;
        }
        let _ = writeln!(md, "## Under {}\n", c.runtime);
        let _ = writeln!(
            md,
            "original: {}; rewritten: {}\n",
            c.original.ended, c.rewritten.ended
        );
        if let Some(why) = &c.original_failed {
            let _ = writeln!(
                md,
                "{} could not run the original: it {why}. What the original did not print was not compared.\n",
                c.runtime
            );
        }
        if !c.runtime_disagrees.is_empty() {
            let _ = writeln!(
                md,
                "The runtime's results for {} differ from the interpreter's on the original too (a defect of the runtime): not compared.\n",
                c.runtime_disagrees.join(", ")
            );
        }
        if !c.diffs.is_empty() {
            let _ = writeln!(md, "```diff");
            for d in &c.diffs {
                let _ = writeln!(md, "-{}\n+{}", d.original, d.rewritten);
            }
            let _ = writeln!(md, "```\n");
        }
        if let Some(m) = &c.rewritten.defect_message {
            let _ = writeln!(md, "{}'s own message: `{m}`\n", c.runtime);
        }
        if c.crashed() && !c.rewritten.stderr_tail.is_empty() {
            let _ = writeln!(md, "```\n{}\n```\n", c.rewritten.stderr_tail);
        }
    }
    if matches!(
        f.kind,
        FailureKind::RewriterCrashed | FailureKind::RewriterTimedOut | FailureKind::NoOutput
    ) || !f.rewriter.trim().is_empty() && f.kind == FailureKind::NotDotNet
    {
        let _ = writeln!(
            md,
            "## The rewriter's run\n\n```\n{}\n```\n",
            f.rewriter.trim()
        );
    }
    // Mapped, not read: the rewritten file is whatever the rewriter wrote, of any size.
    if let (Ok(o), Ok(r)) = (
        crate::image::Image::open(&result.original),
        crate::image::Image::open(&result.rewritten),
    ) {
        for m in program.manifest.methods.iter().map(|m| &m.name) {
            let (a, b) = (method_listing(&o, m), method_listing(&r, m));
            if a == b {
                continue;
            }
            let _ = writeln!(md, "## {m}: original → rewritten\n\n```diff");
            let diff = similar::TextDiff::from_lines(&a, &b);
            let _ = write!(md, "{}", diff.unified_diff().context_radius(1000));
            let _ = writeln!(md, "```\n");
        }
    }
    std::fs::create_dir_all(dir)?;
    for sub in ["original", "rewritten"] {
        let from = result
            .original
            .parent()
            .and_then(Path::parent)
            .map(|p| p.join(sub));
        if let Some(from) = from
            && from.is_dir()
        {
            std::fs::create_dir_all(dir.join(sub))?;
            for e in std::fs::read_dir(&from)? {
                let e = e?;
                if !e.file_type()?.is_file() {
                    continue;
                }
                let len = e.metadata()?.len();
                if len > REPRO_FILE_LIMIT {
                    // A rewriter that wrote gigabytes of garbage is reproduced by running it
                    // again, not by keeping its output.
                    let _ = writeln!(
                        md,
                        "`{sub}/{}` ({len} bytes) is not kept: it is larger than {} MiB. \
                         Run the rewriter as above to write it again.\n",
                        e.file_name().to_string_lossy(),
                        REPRO_FILE_LIMIT >> 20
                    );
                    continue;
                }
                crate::fsio::copy_atomic(&e.path(), &dir.join(sub).join(e.file_name()))?;
            }
        }
        // So that `dotnet NAME.exe` runs either program by hand (the rewriter writes only the
        // assembly).
        let stem = name.trim_end_matches(".exe");
        let config = dir.join(sub).join(format!("{stem}.runtimeconfig.json"));
        if dir.join(sub).is_dir() && !config.exists() {
            crate::fsio::write_atomic(&config, super::runtime::RUNTIMECONFIG.as_bytes())?;
        }
    }
    crate::fsio::write_atomic(&dir.join("report.md"), md.as_bytes())?;
    let record = ReproRecord {
        failure: f,
        rewriter_command: setup.rewriter.template(),
        rewriter_cwd: &how.cwd,
        with: how.with.clone(),
        replay_command: &how.replay,
    };
    let json = serde_json::to_string_pretty(&record).map_err(std::io::Error::other)?;
    crate::fsio::write_atomic(&dir.join("failure.json"), json.as_bytes())
}

/// A repro folder's `failure.json`: the failure, and how to run it again.
#[derive(Serialize)]
struct ReproRecord<'a> {
    #[serde(flatten)]
    failure: &'a Failure,
    /// The rewriter command template, as given to `--rewriter`.
    rewriter_command: &'a str,
    /// The directory the rewriter ran in (its relative paths are relative to it).
    rewriter_cwd: &'a str,
    /// The `--with` files, absolute: the repro folder's copies.
    with: Vec<String>,
    /// A shell command line that replays the repro from any directory.
    replay_command: &'a str,
}

/// The commands of a repro folder, with absolute paths, so that they run as written.
struct ReproCommands {
    /// The rewriter's working directory (this process's), or `.` when it cannot be known.
    cwd: String,
    /// The `--with` files the replay passes.
    with: Vec<String>,
    /// `cd CWD && ilcheck fuzz --rewriter … --replay ABS/original/NAME …`.
    replay: String,
    /// The same step by step: the rewriter, `verify`, `equiv`.
    steps: Vec<String>,
}

impl ReproCommands {
    fn new(setup: &Setup, dir: &Path, name: &str) -> ReproCommands {
        use super::rewriter::shell_quote;
        let cwd = std::env::current_dir().ok();
        let abs = |p: &Path| match &cwd {
            Some(c) => c.join(p),
            None => p.to_path_buf(),
        };
        let dir = abs(dir);
        let quote = |p: &Path| shell_quote(&p.to_string_lossy());
        let (original, rewritten) = (
            dir.join("original").join(name),
            dir.join("rewritten").join(name),
        );
        // The repro folder keeps a copy of each `--with` file beside the original (unless it is
        // too large to keep): the replay takes the copy, as the failing case had it.
        let with: Vec<PathBuf> = setup
            .with
            .iter()
            .map(|f| {
                let small = std::fs::metadata(f).is_ok_and(|m| m.len() <= REPRO_FILE_LIMIT);
                match f.file_name() {
                    Some(n) if small => dir.join("original").join(n),
                    _ => abs(f),
                }
            })
            .collect();
        let with_args: String = if with.is_empty() {
            String::new()
        } else {
            let files: Vec<String> = with.iter().map(|p| quote(p)).collect();
            format!(" --with {}", files.join(" "))
        };
        let runtime = match setup.runtimes.as_slice() {
            [] => "none",
            [one] => one.kind().name(),
            _ => "both",
        };
        let cwd = cwd.map_or_else(|| ".".to_string(), |c| c.to_string_lossy().into_owned());
        let cd = format!("cd {} && ", shell_quote(&cwd));
        let replay = format!(
            "{cd}ilcheck fuzz --rewriter {} --replay {}{with_args} --runtime {runtime}",
            shell_quote(setup.rewriter.template()),
            quote(&original),
        );
        let mut steps = vec![
            format!("{cd}{}", setup.rewriter.shell_line(&original, &rewritten)),
            format!(
                "ilcheck verify --baseline {} -- {}",
                quote(&original),
                quote(&rewritten)
            ),
        ];
        // `equiv` has no `--runtime none`: without a runtime there is nothing to compare.
        if runtime != "none" {
            steps.push(format!(
                "ilcheck equiv {} {}{with_args} --runtime {runtime}",
                quote(&original),
                quote(&rewritten)
            ));
        }
        ReproCommands {
            cwd,
            with: with
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect(),
            replay,
            steps,
        }
    }
}

/// The signature recorded in the `failure.json` of the repro folder that `original` belongs to
/// (`DIR/original/NAME.exe` beside `DIR/failure.json`, or a `failure.json` in the original's
/// own directory): `Ok(None)` when there is none, an error when it is there but unreadable.
pub fn recorded_signature(original: &Path) -> Result<Option<(PathBuf, String)>, String> {
    let Some(parent) = original.parent() else {
        return Ok(None);
    };
    let parent = if parent.as_os_str().is_empty() {
        Path::new(".")
    } else {
        parent
    };
    let mut candidates = vec![parent.join("failure.json")];
    // Canonical, so that `--replay g2.exe` from inside `original/` finds it too.
    let in_original =
        std::fs::canonicalize(parent).is_ok_and(|d| d.file_name().is_some_and(|n| n == "original"));
    if in_original {
        candidates.push(parent.join("..").join("failure.json"));
    }
    let Some(path) = candidates.into_iter().find(|p| p.is_file()) else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    match v.get("signature").and_then(|s| s.as_str()) {
        Some(s) => Ok(Some((path, s.to_string()))),
        None => Err(format!("{}: no \"signature\" string", path.display())),
    }
}

/// Largest file a repro folder keeps a copy of (the rewriter's output can be anything).
pub const REPRO_FILE_LIMIT: u64 = 64 << 20;

/// What a finding usually means about the rewriter that caused it, for the repro report.
pub fn rewriter_hint(code: &str) -> &'static str {
    match code {
        "TailRet" | "TailCallInsideER" => {
            "a `tail.` call is no longer followed by `ret`: drop the prefix when code goes between the call and its return"
        }
        "ReturnFromTry" | "ReturnFromHandler" => {
            "a `ret` was left inside a protected region: returns must `leave` to an epilogue after it"
        }
        "StackOverflow" => {
            "the body needs a deeper stack than its header declares: recompute MaxStack after inserting code"
        }
        "BadJumpTarget" | "BranchIntoTry" | "BranchOutOfTry" | "BranchIntoHandler"
        | "BranchOutOfHandler" | "PathStackDepth" => {
            "a branch lands somewhere else than before: a short branch whose displacement overflowed (widen short forms when code grows), or a target redirected to inserted code"
        }
        "EHOrderInnerAfterOuter" => {
            "an enclosing clause comes before a clause it encloses: add new outer clauses after the existing ones"
        }
        "EHOverlap" => {
            "clauses overlap without nesting: a boundary moved onto inserted code, or a region grew over appended code"
        }
        "BranchRetargeted" => {
            "a branch copied from the original lands on different original code: a short displacement that wrapped, or a label bound to the wrong instruction"
        }
        "ClauseBoundaryMoved" => {
            "a clause boundary moved across original code: recompute try and handler offsets from the instructions they were on, not by adding a length"
        }
        "StackUnexpected"
        | "ExpectedNumericType"
        | "ExpectedIntegerType"
        | "StackObjRef"
        | "StackByRef"
        | "ExpectedFloatType" => {
            "a value of another type reaches an instruction or a call: a probe called with arguments its signature does not take, or a return value kept in a local of another type"
        }
        "PathStackUnexpected" => {
            "paths join with different kinds of values on the stack: inserted code left a value of another type where the original code continues"
        }
        "FallthroughException" | "Endfinally" => {
            "a handler's end is off: control runs out of a handler, or its last instruction is outside it"
        }
        _ => "",
    }
}

/// The disassembly of method `name` (`M3`) of an image, tokens named, or why there is none.
pub fn method_listing(img: &crate::image::Image<'_>, name: &str) -> String {
    for m in img.methods() {
        let Ok(n) = m.name() else { continue };
        if n != name {
            continue;
        }
        let names = crate::disasm::ImageNamer::new(img);
        return match m.body_bytes().map(crate::body::Body::parse) {
            Ok(Ok(b)) => crate::disasm::disassemble_with(&b, Some(&names)),
            Ok(Err(e)) => format!("(body does not decode: {e})\n"),
            Err(e) => format!("(no body: {e})\n"),
        };
    }
    "(no such method)\n".into()
}

/// Options of the loop.
#[derive(Clone, Debug)]
pub struct LoopOptions {
    /// Seed of the first case; case k has seed `seed + k`.
    pub seed: u64,
    /// Stop after this many cases.
    pub cases: Option<u64>,
    /// Stop after this much time.
    pub time: Option<Duration>,
    /// Worker threads.
    pub jobs: usize,
    /// Where repro folders go.
    pub keep: PathBuf,
    /// Repro folders kept per signature.
    pub repros_per_signature: usize,
    /// Scratch directory (one sub-directory per worker).
    pub work: PathBuf,
    /// Minimisation limits.
    pub budget: MinimiseBudget,
}

/// What the loop reports as it goes.
#[derive(Clone, Debug)]
pub enum Progress {
    /// A case finished.
    Case {
        /// Cases done.
        cases: u64,
        /// Methods done.
        methods: u64,
        /// Cases failed.
        failed: u64,
    },
    /// A new failure was minimised and kept.
    Repro {
        /// Its signature.
        signature: String,
        /// Its folder.
        dir: PathBuf,
    },
}

/// Runs the loop until `opts.cases` or `opts.time`.
pub fn run_loop(
    setup: &Setup,
    opts: &LoopOptions,
    progress: &(dyn Fn(Progress) + Sync),
) -> std::io::Result<FuzzSummary> {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let start = Instant::now();
    let next = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let summary = Mutex::new(FuzzSummary {
        schema: "ilcheck.fuzz/1",
        rewriter: setup.rewriter.template().to_string(),
        runtimes: setup
            .runtimes
            .iter()
            .map(|r| r.kind().name().to_string())
            .collect(),
        by_runtime: setup
            .runtimes
            .iter()
            .map(|r| RuntimeCases {
                runtime: r.kind().name().to_string(),
                ..RuntimeCases::default()
            })
            .collect(),
        seed: opts.seed,
        ..FuzzSummary::default()
    });
    let error: Mutex<Option<std::io::Error>> = Mutex::new(None);
    std::thread::scope(|s| {
        for w in 0..opts.jobs.max(1) {
            let (next, stop, summary, error) = (&next, &stop, &summary, &error);
            s.spawn(move || {
                let work = opts.work.join(format!("worker-{w}"));
                let mut execs = setup.executors();
                loop {
                    if stop.load(Ordering::Relaxed)
                        || super::process::stop_requested()
                        || opts.time.is_some_and(|t| start.elapsed() >= t)
                    {
                        break;
                    }
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    if opts.cases.is_some_and(|n| k >= n) {
                        break;
                    }
                    let seed = opts.seed.wrapping_add(k);
                    let end = opts.time.map(|t| start + t);
                    match one_case(setup, &mut execs, opts, seed, &work, end, summary, progress) {
                        Ok(()) => {}
                        // Interrupted: the case is not counted, and the loop ends.
                        Err(e) if is_stopped(&e) => break,
                        Err(e) => {
                            *error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                            stop.store(true, Ordering::Relaxed);
                        }
                    }
                }
                {
                    let mut s = lock(summary);
                    for e in &execs {
                        s.servers.add(&e.stats());
                    }
                }
                // The servers end before their scratch directory goes.
                drop(execs);
                let _ = std::fs::remove_dir_all(&work);
            });
        }
    });
    if let Some(e) = error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    let mut s = summary.into_inner().unwrap_or_else(|p| p.into_inner());
    s.stopped = super::process::stop_requested();
    s.seconds = secs(start);
    s.methods_per_second = if s.seconds > 0.0 {
        s.methods as f64 / s.seconds
    } else {
        0.0
    };
    Ok(s)
}

/// The summary, even when a worker panicked holding it (its counts stay usable).
fn lock(s: &std::sync::Mutex<FuzzSummary>) -> std::sync::MutexGuard<'_, FuzzSummary> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

/// One case of the loop: generated, checked, and when it fails with a signature that wants a
/// repro, minimised within the budget and the time the loop has left (`end`, from `--time`).
#[allow(clippy::too_many_arguments)]
fn one_case(
    setup: &Setup,
    execs: &mut [Executor],
    opts: &LoopOptions,
    seed: u64,
    work: &Path,
    end: Option<Instant>,
    summary: &std::sync::Mutex<FuzzSummary>,
    progress: &(dyn Fn(Progress) + Sync),
) -> std::io::Result<()> {
    let name = format!("g{seed}");
    let t = Instant::now();
    let methods = generate_methods(seed, setup.methods_per_assembly, &setup.config);
    let mut program =
        build_program(&name, &methods, &setup.config).map_err(std::io::Error::other)?;
    program.manifest.seed = seed;
    let gen_time = secs(t);
    let case_dir = work.join("case");
    let mut r = check_program(setup, execs, &program, &case_dir, Depth::Decide, None)?;
    r.times.generate += gen_time;
    let keep_repro = {
        let mut s = lock(summary);
        s.cases += 1;
        s.methods += r.methods as u64;
        s.stages.add(&r.times);
        for rc in &mut s.by_runtime {
            if r.ran.contains(&rc.runtime) {
                rc.cases += 1;
            }
            if let Some((_, why)) = r.originals_failed.iter().find(|(n, _)| n == &rc.runtime) {
                rc.originals_failed += 1;
                rc.first_failure
                    .get_or_insert_with(|| format!("{}: {why}", program.manifest.assembly));
            }
        }
        let keep = if let Some(f) = &r.failure {
            let list = if f.kind.blames_rewriter() {
                s.failed_cases += 1;
                &mut s.failures
            } else {
                s.runtime_defect_cases += 1;
                &mut s.runtime_defects
            };
            let entry = match list.iter().position(|c| c.signature == f.signature) {
                Some(i) => &mut list[i],
                None => {
                    list.push(FailureCount {
                        signature: f.signature.clone(),
                        ..FailureCount::default()
                    });
                    list.last_mut().expect("just pushed")
                }
            };
            entry.cases += 1;
            // Reserve the slot now, so two workers do not both minimise the same signature.
            if entry.repros.len() < opts.repros_per_signature {
                entry.repros.push(PathBuf::new());
                Some(f.clone())
            } else {
                None
            }
        } else {
            None
        };
        progress(Progress::Case {
            cases: s.cases,
            methods: s.methods,
            failed: s.failed_cases,
        });
        keep
    };
    let Some(f) = keep_repro else {
        let _ = std::fs::remove_dir_all(&case_dir);
        return Ok(());
    };
    let t = Instant::now();
    let min_dir = work.join("minimise");
    // Within the budget and what is left of the loop's time: a failure found near the end is
    // kept as it is (or minimised as far as the time allows) rather than running over.
    let left = end.map_or(opts.budget.time, |e| e.saturating_duration_since(t));
    let budget = MinimiseBudget {
        time: opts.budget.time.min(left),
        ..opts.budget
    };
    // A stop requested during minimisation keeps the failure as it is.
    let minimal = if budget.time.is_zero() || super::process::stop_requested() {
        methods.clone()
    } else {
        match minimise(setup, execs, &name, methods.clone(), &f, &min_dir, budget) {
            Ok(m) => m,
            Err(e) if is_stopped(&e) => methods.clone(),
            Err(e) => return Err(e),
        }
    };
    // The rewriter's own failures are the same at either depth (the runtimes never run): an
    // unminimised program keeps the result it has.
    let rewriter_stage = matches!(
        f.kind,
        FailureKind::RewriterCrashed
            | FailureKind::RewriterTimedOut
            | FailureKind::NoOutput
            | FailureKind::NotDotNet
    );
    let unshrunk = same_methods(&minimal, &methods);
    let (mut small, result) = if unshrunk && (rewriter_stage || super::process::stop_requested()) {
        (program, r)
    } else {
        let depth = Depth::Report;
        match check_methods(setup, execs, &name, &minimal, &min_dir, depth, None) {
            Ok((small, result))
                if result.failure.as_ref().map(|x| &x.signature) == Some(&f.signature) =>
            {
                (small, result)
            }
            // Minimisation ran out of budget on a flaky failure, or a stop was requested: keep
            // the whole case.
            Ok(_) => (program, r),
            Err(e) if is_stopped(&e) => (program, r),
            Err(e) => return Err(e),
        }
    };
    {
        let mut s = lock(summary);
        s.stages.minimise += secs(t);
    }
    small.manifest.seed = seed;
    let safe: String = f
        .signature
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let dir = opts.keep.join(format!("{safe}-{seed}"));
    let _ = std::fs::remove_dir_all(&dir);
    write_repro(setup, &dir, &small, &result, methods.len())?;
    {
        let mut s = lock(summary);
        let s = &mut *s;
        if let Some(c) = s
            .failures
            .iter_mut()
            .chain(s.runtime_defects.iter_mut())
            .find(|c| c.signature == f.signature)
            && let Some(slot) = c.repros.iter_mut().find(|p| p.as_os_str().is_empty())
        {
            *slot = dir.clone();
        }
    }
    progress(Progress::Repro {
        signature: f.signature.clone(),
        dir,
    });
    let _ = std::fs::remove_dir_all(&case_dir);
    let _ = std::fs::remove_dir_all(&min_dir);
    Ok(())
}

/// Whether two method lists are the same programs' methods (names and choice streams).
fn same_methods(a: &[ProgramMethod], b: &[ProgramMethod]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.name == y.name && x.choice_bytes() == y.choice_bytes())
}

/// Re-checks a kept original program (`--replay`): rebuilds nothing, runs the rewriter on the
/// assembly as it is, with its manifest beside it.
pub fn replay(setup: &Setup, original: &Path, work: &Path) -> std::io::Result<CaseResult> {
    let manifest_path = Manifest::beside(original).ok_or_else(|| {
        std::io::Error::other(format!("{}: no manifest name", original.display()))
    })?;
    let text = std::fs::read_to_string(&manifest_path)
        .map_err(|e| std::io::Error::other(format!("{}: {e}", manifest_path.display())))?;
    let manifest: Manifest = serde_json::from_str(&text)
        .map_err(|e| std::io::Error::other(format!("{}: {e}", manifest_path.display())))?;
    // A generated program is small; anything larger than a repro keeps is not one (and is not
    // read into memory).
    let len = std::fs::metadata(original)?.len();
    if len > REPRO_FILE_LIMIT {
        return Err(std::io::Error::other(format!(
            "{}: {len} bytes, larger than any program ilcheck generates",
            original.display()
        )));
    }
    let bytes = std::fs::read(original)?;
    let mut execs = setup.executors();
    check_program(
        setup,
        &mut execs,
        &Program { bytes, manifest },
        work,
        Depth::Report,
        None,
    )
}
