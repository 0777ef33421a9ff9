//! The `ilcheck` command line.

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use ilcheck::body::Body;
use ilcheck::corpus::{self, Input, RoundtripOptions, RoundtripReport};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

mod cli;
use cli::out::{errln, out, outln};

#[derive(Parser)]
#[command(
    name = "ilcheck",
    version,
    about = "Make .NET IL rewriting safe: lossless codec, verifier, rewriter harness"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Decode and losslessly re-encode every method body; compare with the original bytes.
    ///
    /// With no PATH: the project's own corpus (embedded) plus system assemblies found in standard
    /// places (/usr/lib/mono/4.5, a .NET shared framework). Exit code 0 when every body and image
    /// round-trips, 1 on any mismatch, decode failure or image integrity finding, 2 when an
    /// input cannot be read (as for `verify`) or on usage errors.
    Roundtrip {
        /// Assemblies, or directories searched recursively for .dll and .exe files.
        paths: Vec<PathBuf>,
        /// Also encode canonically and count bodies their compiler left non-canonical, by reason.
        #[arg(long)]
        canonical: bool,
        /// Print the JSON report (schema: docs/roundtrip-json.md) instead of the summary.
        #[arg(long)]
        json: bool,
        /// Write a Markdown report with diffs to this file.
        #[arg(long, value_name = "FILE.md")]
        report: Option<PathBuf>,
        /// How many failures to list with diffs.
        #[arg(long, default_value_t = 20)]
        max_failures: usize,
        /// Fail the run (exit 2) when a directory scan finds files that are not .NET assemblies.
        #[arg(long)]
        strict: bool,
        /// Only the K-th of N shards of the inputs (stable by path), e.g. 2/8; merge the
        /// shards' JSON reports with `ilcheck report merge`.
        #[arg(long, value_name = "K/N")]
        shard: Option<cli::rewrite::Shard>,
        /// Threads round-tripping assemblies side by side (0: one per core). The report is
        /// the same for any number; its times per phase are summed over the threads.
        #[arg(long, default_value_t = 0)]
        threads: usize,
    },
    /// Verify every method body of the given assemblies with the structural verifier, and each
    /// image's integrity (sections cut short, directories outside their sections).
    ///
    /// Exit code 0 when clean, 1 on findings, 2 when an input cannot be read (a named file that
    /// is not a readable .NET assembly, an unreadable entry, no assembly found; with --strict
    /// also a scanned file that is not .NET) or on usage errors.
    Verify {
        /// Assemblies, or directories searched recursively for .dll and .exe files.
        #[arg(required_unless_present = "baseline_pair")]
        paths: Vec<PathBuf>,
        /// Original assemblies (files or directories): report only findings that are new in
        /// the patched ones. Assemblies are paired by file name (several originals of one
        /// name told apart by identity, then by the directories above the file), else by
        /// assembly identity (name, version, culture); methods by MethodDef token, falling
        /// back to full name.
        #[arg(long, num_args = 1.., value_name = "ORIGINAL")]
        baseline: Vec<PathBuf>,
        /// An explicit pair: PATCHED is verified against ORIGINAL whatever their names
        /// (PATCHED is verified even when not among the paths). Repeatable. A path may contain
        /// `=`: every `=` is tried as the split, and the one whose two sides are existing files
        /// is taken (an error when none is, or more than one).
        #[arg(long = "baseline-pair", value_name = "PATCHED=ORIGINAL")]
        baseline_pair: Vec<String>,
        /// Print the JSON report (schema: docs/verify-json.md) instead of the text.
        #[arg(long)]
        json: bool,
        /// Also write the findings as SARIF 2.1.0 to this file.
        #[arg(long, value_name = "FILE")]
        sarif: Option<PathBuf>,
        /// Also write a Markdown report to this file.
        #[arg(long, value_name = "FILE.md")]
        report: Option<PathBuf>,
        /// How many findings to list (all are counted).
        #[arg(long = "max", default_value_t = 200)]
        max: usize,
        /// Fail the run (exit 2) when a directory scan finds files that are not .NET assemblies.
        #[arg(long)]
        strict: bool,
        /// Only the K-th of N shards of the inputs (stable by path), e.g. 2/8; merge the
        /// shards' JSON reports with `ilcheck report merge`.
        #[arg(long, value_name = "K/N")]
        shard: Option<cli::rewrite::Shard>,
        /// Threads verifying assemblies side by side (0: one per core). The report is the
        /// same for any number; its times per pass are summed over the threads.
        #[arg(long, default_value_t = 0)]
        threads: usize,
        #[command(flatten)]
        types: cli::types::TypeArgs,
    },
    /// Rewrite every selected method of an assembly (or of many: files and directories into an
    /// output directory) with a transform, verify each result, and write the patched
    /// assemblies.
    ///
    /// Bodies that still fit stay in place; the others go to a new section (or the grown last
    /// section). Exit code 0 when every rewrite verified, 1 when the verifier rejected any (those
    /// methods keep their original bodies), 2 on usage or I/O errors.
    Rewrite(cli::rewrite::RewriteArgs),
    /// Write runnable assemblies of random valid methods, each with a manifest of the result
    /// lines it must print (run it under mono or `dotnet`), for testing an IL rewriter.
    Generate(cli::generate::GenerateArgs),
    /// Fuzz an IL rewriter: generated programs through your rewriter, the output verified
    /// against the original and run side by side with it under mono and CoreCLR; failures
    /// minimised into repro folders.
    ///
    /// Exit code 0 when no case failed, 1 when some did (see --keep-failures), 2 on setup
    /// errors (rewriter or runtime missing, a runtime that cannot run the generated programs
    /// or whose runtime server does not start).
    Fuzz(cli::fuzz::FuzzArgs),
    /// Run a generated program and its rewritten copy under the runtimes and compare their
    /// result lines (exit 0 same; 1 different, or the patched file is not a .NET assembly;
    /// 2 setup errors: an original that cannot be read, a runtime missing or unable to run the
    /// original).
    Equiv(cli::fuzz::EquivArgs),
    /// Measure a rewriter (any program: 'CMD {in} {out}' or 'CMD {in_dir} {out_dir}') on
    /// assemblies: wall and CPU time, MB/s of IL, methods/s, peak RSS, its output checked, and
    /// ilcheck's own rewrite of the same inputs as the reference line.
    ///
    /// Exit code 0, 1 when an output does not check out or --compare finds a regression past
    /// --max-regression, 2 on set-up errors.
    Bench(cli::bench::BenchArgs),
    /// Work on JSON reports: `merge` the reports of a sharded run (--shard K/N) into one.
    #[command(subcommand)]
    Report(cli::report::ReportCommand),
    /// Disassemble an assembly's methods, their tokens named as ildasm names them, or one
    /// method body given as hex or as a file of body bytes.
    ///
    /// FILE is read as an assembly when it starts with the PE signature `MZ` (no method body
    /// starts with that byte: it is neither a tiny nor a fat header), otherwise as one method
    /// body's bytes — unless it is named .dll or .exe, which only an assembly may be. An
    /// assembly's methods are all printed unless --method or --token choose some, each after a
    /// header line with its token, full name and RVA.
    ///
    /// Exit code 0 when everything printed decodes, 1 when a body or some of its code does not
    /// or when nothing matches --method/--token, 2 when the file cannot be read or is a PE file
    /// that is not a readable .NET assembly, or on usage errors.
    Disasm {
        /// Body bytes as hex, header included: e.g. "06 2A" (a tiny header for one byte of
        /// code, then `ret`) or "13 30 01 00 …".
        #[arg(long, conflicts_with = "file")]
        hex: Option<String>,
        /// An assembly (a PE file), or a file holding one method body's bytes.
        file: Option<PathBuf>,
        /// Only methods whose full name matches this glob (`*` any run, `?` one character),
        /// as `rewrite --methods` matches them: `Ns.Outer/Inner::Method(int32,string)`, so
        /// `'Ns.Type::Method*'`. Repeatable.
        #[arg(long = "method", value_name = "GLOB")]
        methods: Vec<String>,
        /// Only the method with this MethodDef token, e.g. 0x06000012. Repeatable.
        #[arg(long = "token", value_name = "TOKEN")]
        tokens: Vec<String>,
        /// Print metadata tokens raw (`call 0x0a000001`) instead of naming them.
        #[arg(long)]
        raw_tokens: bool,
        /// Also print the canonical encoding's bytes.
        #[arg(long)]
        canonical: bool,
    },
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        // A report that could not be written (other than to a reader that stopped early) is
        // not a success, whatever the run found.
        Ok(_) if let Some(why) = cli::out::failure() => {
            errln!("ilcheck: {why}");
            ExitCode::from(2)
        }
        Ok(code) => code,
        Err(e) => {
            errln!("ilcheck: {e:#}");
            if ilcheck::harness::stop_requested() {
                // A run cut short by SIGINT or SIGTERM (`fuzz --replay`, `equiv`, `bench`).
                ExitCode::from(cli::interrupt::EXIT_STOPPED)
            } else {
                ExitCode::from(2)
            }
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Disasm {
            hex,
            file,
            methods,
            tokens,
            raw_tokens,
            canonical,
        } => disasm(hex, file, &methods, &tokens, raw_tokens, canonical),
        Command::Rewrite(args) => cli::rewrite::run(args),
        Command::Generate(args) => cli::generate::run(args),
        Command::Fuzz(args) => cli::fuzz::run(args),
        Command::Equiv(args) => {
            cli::interrupt::install();
            cli::fuzz::equiv(args)
        }
        Command::Bench(args) => {
            cli::interrupt::install();
            cli::bench::run(args)
        }
        Command::Report(cmd) => cli::report::run(cmd),
        Command::Verify {
            paths,
            baseline,
            baseline_pair,
            json,
            sarif,
            report,
            max,
            strict,
            shard,
            threads,
            types,
        } => verify(
            paths,
            (baseline, baseline_pair),
            json,
            sarif,
            report,
            max,
            strict,
            (shard, threads),
            types,
        ),
        Command::Roundtrip {
            paths,
            canonical,
            json,
            report,
            max_failures,
            strict,
            shard,
            threads,
        } => roundtrip(
            paths,
            RoundtripOptions {
                canonical,
                max_failures,
                threads,
            },
            json,
            report,
            strict,
            shard,
        ),
    }
}

fn parse_hex(text: &str) -> Result<Vec<u8>> {
    let digits: String = text
        .chars()
        .filter(|c| !c.is_whitespace() && *c != ',')
        .collect();
    let digits = digits.strip_prefix("0x").unwrap_or(&digits);
    if !digits.len().is_multiple_of(2) {
        bail!("hex input has an odd number of digits");
    }
    (0..digits.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(&digits[i..i + 2], 16)
                .with_context(|| format!("bad hex at digit {i}"))
        })
        .collect()
}

fn disasm(
    hex: Option<String>,
    file: Option<PathBuf>,
    methods: &[String],
    tokens: &[String],
    raw_tokens: bool,
    canonical: bool,
) -> Result<ExitCode> {
    let (bytes, source) = match (hex, file) {
        (Some(h), _) => (parse_hex(&h)?, "--hex".to_string()),
        (None, Some(f)) => {
            use std::io::Read;
            // The first two bytes decide; an assembly is then mapped, not read.
            let mut bytes = Vec::new();
            let mut file = ilcheck::fsio::open_regular(&f)
                .with_context(|| format!("reading {}", f.display()))?;
            (&mut file)
                .take(2)
                .read_to_end(&mut bytes)
                .with_context(|| format!("reading {}", f.display()))?;
            if bytes == b"MZ" {
                return disasm_assembly(&f, methods, tokens, raw_tokens, canonical);
            }
            let named_as_assembly = f
                .extension()
                .is_some_and(|x| x.eq_ignore_ascii_case("dll") || x.eq_ignore_ascii_case("exe"));
            if named_as_assembly {
                bail!(
                    "{}: not a .NET assembly: it does not start with the PE signature MZ",
                    f.display()
                );
            }
            file.read_to_end(&mut bytes)
                .with_context(|| format!("reading {}", f.display()))?;
            (bytes, format!("{} (one method body's bytes)", f.display()))
        }
        (None, None) => bail!("give an ASSEMBLY, a FILE of body bytes or --hex BYTES"),
    };
    if !methods.is_empty() || !tokens.is_empty() {
        bail!("{source} is not an assembly: --method and --token choose methods of one");
    }
    let body = match Body::parse(&bytes) {
        Ok(b) => b,
        Err(e) => {
            errln!("{source}: {e}");
            return Ok(ExitCode::from(1));
        }
    };
    // Streamed: a giant body's text is never held whole.
    let stdout = std::io::BufWriter::new(std::io::stdout().lock());
    let mut out = ilcheck::disasm::IoWriter::new(stdout);
    let written = ilcheck::disasm::disassemble_to(&mut out, &body, None);
    let result = match (written, out.take_error()) {
        (Err(_), Some(e)) => Err(e),
        _ => std::io::Write::flush(&mut out.into_inner()),
    };
    match result {
        // A reader that stops early (`| head`) ends the listing, not as an error.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(ExitCode::SUCCESS),
        r => r.context("writing the listing")?,
    }
    if body.len() < bytes.len() {
        outln!("// {} bytes after the body's end", bytes.len() - body.len());
    }
    if canonical {
        let mut out = Vec::new();
        body.encode_canonical(&mut out)?;
        outln!("// canonical: {}", ilcheck::disasm::hex(&out));
    }
    let code_ok = body.validate_code();
    if let Err(e) = code_ok {
        errln!("{source}: {e}");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// `disasm` of an assembly: the methods `methods` (globs over full names) or `tokens` choose,
/// every method when neither is given.
fn disasm_assembly(
    path: &std::path::Path,
    methods: &[String],
    tokens: &[String],
    raw_tokens: bool,
    canonical: bool,
) -> Result<ExitCode> {
    use ilcheck::disasm::{ImageNamer, TokenNamer};
    use std::fmt::Write as _;
    use std::io::Write;
    let image = ilcheck::image::Image::open(path)
        .with_context(|| format!("{}: not a readable .NET assembly", path.display()))?;
    let mut wanted = Vec::with_capacity(tokens.len());
    for t in tokens {
        let token = cli::rewrite::parse_token(t)?;
        if token >> 24 != ilcheck::image::Table::MethodDef as u32 {
            bail!("--token {t}: not a MethodDef token (0x06xxxxxx)");
        }
        wanted.push(token);
    }
    let all = methods.is_empty() && wanted.is_empty();
    let chosen: Vec<_> = image
        .methods()
        .filter(|m| {
            all || wanted.contains(&m.token().0)
                || (!methods.is_empty()
                    && m.full_name()
                        .is_ok_and(|n| methods.iter().any(|g| corpus::glob_match(g, &n))))
                // The name as the header shows it (`VA(int32, ...)`) selects the method too.
                || (!methods.is_empty()
                    && ilcheck::disasm::header_name(m)
                        .is_ok_and(|n| methods.iter().any(|g| corpus::glob_match(g, &n))))
        })
        .collect();
    if chosen.is_empty() && all {
        // A reference assembly or a resource-only module: nothing to print, nothing wrong.
        outln!("// {} defines no methods", path.display());
        return Ok(ExitCode::SUCCESS);
    }
    if chosen.is_empty() {
        let mut asked: Vec<String> = methods.iter().map(|g| format!("'{g}'")).collect();
        asked.extend(tokens.iter().cloned());
        errln!(
            "ilcheck disasm: no method of {} matches {} (it has {} methods{})",
            path.display(),
            asked.join(" or "),
            image.method_count(),
            cli::glob_hint(|| image.methods(), methods)
        );
        return Ok(ExitCode::from(1));
    }
    let namer = ImageNamer::new(&image);
    let names = (!raw_tokens).then_some(&namer as &dyn TokenNamer);
    // Each method's text is streamed: a giant body's is never held whole.
    let mut out = ilcheck::disasm::IoWriter::new(std::io::BufWriter::new(std::io::stdout().lock()));
    let mut failed = false;
    for (n, method) in chosen.iter().enumerate() {
        if n > 0 {
            let _ = out.write_char('\n');
        }
        if let Err(why) = ilcheck::disasm::write_method(&mut out, method, names) {
            errln!("{}: {why}", path.display());
            failed = true;
        }
        if canonical && let Ok(body) = method.decoded_body() {
            let mut bytes = Vec::new();
            body.encode_canonical(&mut bytes)?;
            let _ = writeln!(out, "// canonical: {}", ilcheck::disasm::hex(&bytes));
        }
        match out.take_error() {
            // A reader that stops early (`| head`) ends the listing, not as an error.
            Some(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(ExitCode::SUCCESS),
            Some(e) => return Err(e).context("writing the listing"),
            None => {}
        }
    }
    let mut stdout = out.into_inner();
    match stdout.flush() {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        r => r.context("writing the listing")?,
    }
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// For a glob that matched nothing: how full names look, from a method whose name without
/// its parameter list the glob matches (`Ns.T::M` for `Ns.T::M(int32)`), or else the first.
/// What a run reads: the inputs, a description of where they came from, and the entries that
/// could not be looked at (each with its path and reason; the rest are still read).
struct Inputs {
    inputs: Vec<Input>,
    sources: Vec<String>,
    problems: Vec<corpus::Skipped>,
}

/// The inputs named on the command line, or the default corpus with the sources it used.
/// The inputs named on the command line (or the default corpus), only the shard's when one is
/// given.
fn inputs(paths: Vec<PathBuf>, shard: Option<cli::rewrite::Shard>) -> Result<Inputs> {
    let mut all = all_inputs(paths)?;
    if let Some(shard) = shard {
        all.inputs.retain(|i| shard.holds(&i.name()));
        all.sources
            .push(format!("shard {}/{}", shard.index, shard.count));
    }
    Ok(all)
}

fn all_inputs(paths: Vec<PathBuf>) -> Result<Inputs> {
    if !paths.is_empty() {
        let found = corpus::discover_all(&paths);
        let mut sources: Vec<String> = paths
            .iter()
            .take(3)
            .map(|p| p.display().to_string())
            .collect();
        if paths.len() > 3 {
            sources.push(format!("and {} more paths", paths.len() - 3));
        }
        if found.inputs.is_empty() && found.problems.is_empty() {
            bail!("no .dll or .exe files found in {}", sources.join(", "));
        }
        return Ok(Inputs {
            inputs: found.inputs,
            sources,
            problems: found.problems,
        });
    }
    let mut inputs: Vec<Input> = corpus::EMBEDDED
        .iter()
        .map(|&(name, bytes)| Input::Embedded { name, bytes })
        .collect();
    let mut sources = vec![format!(
        "embedded project corpus ({} assemblies)",
        inputs.len()
    )];
    let mut problems = Vec::new();
    for dir in corpus::system_dirs() {
        let found = corpus::discover_all(std::slice::from_ref(&dir));
        sources.push(format!("{} ({} files)", dir.display(), found.inputs.len()));
        inputs.extend(found.inputs);
        problems.extend(found.problems);
    }
    if sources.len() == 1 {
        sources.push(
            "no system assemblies found (install mono-devel for /usr/lib/mono/4.5)".to_string(),
        );
    }
    Ok(Inputs {
        inputs,
        sources,
        problems,
    })
}

/// The exit code of a run over inputs: 2 when something asked for could not be read (or, with
/// `--strict`, a scan skipped files), else 1 when the run found something, else 0.
fn run_exit_code(unreadable: bool, strict_skips: bool, failed: bool) -> ExitCode {
    if unreadable || strict_skips {
        ExitCode::from(2)
    } else if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// [`cli::refuse_reports_over`] for a run over `inputs` (their files) and `more`.
fn refuse_reports_over_inputs(
    reports: &[&Option<PathBuf>],
    inputs: &[Input],
    more: &[PathBuf],
) -> Result<()> {
    let read: Vec<&std::path::Path> = inputs
        .iter()
        .filter_map(|i| match i {
            Input::File { path, .. } => Some(path.as_path()),
            Input::Embedded { .. } | Input::Memory { .. } => None,
        })
        .chain(more.iter().map(PathBuf::as_path))
        .collect();
    cli::refuse_reports_over(
        reports.iter().copied().flatten().map(PathBuf::as_path),
        &read,
    )
}

/// Writes a report file atomically.
fn write_output(path: &std::path::Path, text: &str) -> Result<()> {
    ilcheck::fsio::write_atomic(path, text.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}

fn progress_bar(len: usize) -> indicatif::ProgressBar {
    if len < 20 || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(len as u64);
    if let Ok(style) = indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} {wide_msg}") {
        bar.set_style(style);
    }
    bar
}

fn roundtrip(
    paths: Vec<PathBuf>,
    opts: RoundtripOptions,
    json: bool,
    report_path: Option<PathBuf>,
    strict: bool,
    shard: Option<cli::rewrite::Shard>,
) -> Result<ExitCode> {
    let Inputs {
        inputs,
        sources,
        problems,
    } = inputs(paths, shard)?;
    refuse_reports_over_inputs(&[&report_path], &inputs, &[])?;
    if !json {
        errln!("ilcheck roundtrip: {}", sources.join("; "));
    }
    let mut report = RoundtripReport {
        sources,
        ..Default::default()
    };
    report.image_errors += problems.len() as u64;
    for p in problems {
        report
            .failures
            .push(corpus::Failure::image(&p.path, 0, "image_error", p.reason));
    }
    let bar = progress_bar(inputs.len());
    corpus::roundtrip(&inputs, opts, &mut report, |input| {
        bar.set_message(input.name());
        bar.inc(1);
    });
    bar.finish_and_clear();
    if json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        out!("{}", ilcheck::report::roundtrip_summary(&report));
    }
    if let Some(path) = report_path {
        let command = std::env::args().collect::<Vec<_>>().join(" ");
        write_output(
            &path,
            &ilcheck::report::roundtrip_markdown(&report, &command),
        )?;
    }
    Ok(run_exit_code(
        report.image_errors > 0,
        strict && !report.skipped.is_empty(),
        !report.all_identical(),
    ))
}

/// `PATCHED=ORIGINAL` of `--baseline-pair`. A path may contain `=` itself, so every `=` is
/// tried, and the one split whose two sides are existing files is taken.
fn parse_pair(text: &str) -> Result<(PathBuf, PathBuf)> {
    let splits: Vec<(&str, &str)> = text
        .match_indices('=')
        .map(|(i, _)| (&text[..i], &text[i + 1..]))
        .filter(|(p, o)| !p.is_empty() && !o.is_empty())
        .collect();
    let files = |(p, o): &(&str, &str)| Path::new(p).is_file() && Path::new(o).is_file();
    let fit: Vec<&(&str, &str)> = splits.iter().filter(|s| files(s)).collect();
    match (splits.as_slice(), fit.as_slice()) {
        ([], _) => bail!("--baseline-pair {text:?}: give PATCHED=ORIGINAL, two assembly files"),
        (_, [(p, o)]) => Ok((PathBuf::from(p), PathBuf::from(o))),
        // One `=`: say which side is missing, as plainly as before.
        ([(p, o)], []) => {
            let missing = if Path::new(p).is_file() { o } else { p };
            bail!("--baseline-pair {text:?}: {missing} is not a file")
        }
        (_, []) => bail!(
            "--baseline-pair {text:?}: no `=` in it splits it into two existing files (tried {})",
            splits
                .iter()
                .map(|(p, o)| format!("{p:?} and {o:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        (_, _) => bail!(
            "--baseline-pair {text:?}: ambiguous: more than one `=` splits it into two existing files ({}); rename one",
            fit.iter()
                .map(|(p, o)| format!("{p:?} and {o:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The baseline of `--baseline` and `--baseline-pair`, and the pairs' patched files missing
/// from `inputs` added to them. `None` without either.
fn load_baseline(
    baseline: &[PathBuf],
    pairs: &[String],
    inputs: &mut Vec<Input>,
    (types, threads): (Option<&mut corpus::TypePass<'_>>, usize),
) -> Result<Option<corpus::Baseline>> {
    if baseline.is_empty() && pairs.is_empty() {
        return Ok(None);
    }
    let mut pinned = Vec::new();
    for text in pairs {
        let (patched, original) = parse_pair(text)?;
        for p in [&patched, &original] {
            if !p.is_file() {
                bail!("--baseline-pair {text:?}: {} is not a file", p.display());
            }
        }
        let key = corpus::canonical(&patched);
        let listed = inputs.iter().any(|i| match i {
            Input::File { path, .. } => corpus::canonical(path) == key,
            Input::Embedded { .. } | Input::Memory { .. } => false,
        });
        if !listed {
            inputs.push(Input::named(&patched));
        }
        pinned.push((patched, Input::named(original)));
    }
    // Every original must be read: a baseline with a hole would report old findings as new.
    let found = corpus::discover(baseline).context("baseline")?;
    let originals: Vec<Input> = found.into_iter().map(Input::named).collect();
    let loaded = corpus::Baseline::load_with_pairs(&originals, &pinned, types, threads);
    Ok(Some(loaded.map_err(anyhow::Error::msg)?))
}

#[allow(clippy::too_many_arguments)]
fn verify(
    paths: Vec<PathBuf>,
    (baseline, pairs): (Vec<PathBuf>, Vec<String>),
    json: bool,
    sarif: Option<PathBuf>,
    report_path: Option<PathBuf>,
    max: usize,
    strict: bool,
    (shard, threads): (Option<cli::rewrite::Shard>, usize),
    types: cli::types::TypeArgs,
) -> Result<ExitCode> {
    let Inputs {
        mut inputs,
        sources,
        problems,
    } = if paths.is_empty() {
        // Only --baseline-pair: its patched files are the inputs.
        Inputs {
            inputs: Vec::new(),
            sources: vec!["--baseline-pair".to_string()],
            problems: Vec::new(),
        }
    } else {
        inputs(paths, shard)?
    };
    // The originals too: every file of a baseline directory, and both sides of each pair.
    let mut originals = corpus::discover(&baseline).unwrap_or_default();
    for text in &pairs {
        if let Ok((patched, original)) = parse_pair(text) {
            originals.extend([patched, original]);
        }
    }
    refuse_reports_over_inputs(&[&sarif, &report_path], &inputs, &originals)?;
    let store = types.store()?;
    // The originals' type findings are counted too, so patched and original are compared alike.
    let mut pass = corpus::TypePass::new(&store);
    let pass = types.types().then_some(&mut pass);
    let baseline = load_baseline(&baseline, &pairs, &mut inputs, (pass, threads))?;
    let mut report = corpus::VerifyReport {
        sources,
        image_errors: problems,
        ..Default::default()
    };
    let opts = corpus::VerifyOptions {
        max_findings: max,
        types: types.types(),
        level: types.level(),
        threads,
        ..Default::default()
    };
    let bar = progress_bar(inputs.len());
    corpus::verify_with(
        &inputs,
        opts,
        &store,
        baseline.as_ref(),
        &mut report,
        |input| {
            bar.set_message(input.name());
            bar.inc(1);
        },
    );
    bar.finish_and_clear();
    if json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        out!("{}", ilcheck::report::verify_text(&report));
    }
    // Said on standard error too, whatever the format: a patched assembly compared with
    // nothing must not pass unnoticed in a CI log.
    for a in &report.per_assembly {
        if let Some(why) = &a.no_original {
            errln!(
                "ilcheck verify: {}",
                ilcheck::report::no_original_warning(&a.assembly, why)
            );
        }
        if let Some(w) = ilcheck::report::other_build_warning(a) {
            errln!("ilcheck verify: {w}");
        }
    }
    if let Some(path) = sarif {
        let log = ilcheck::report::verify_sarif(&report);
        write_output(&path, &serde_json::to_string_pretty(&log)?)?;
    }
    if let Some(path) = report_path {
        let command = std::env::args().collect::<Vec<_>>().join(" ");
        write_output(&path, &ilcheck::report::verify_markdown(&report, &command))?;
    }
    Ok(run_exit_code(
        !report.image_errors.is_empty(),
        strict && !report.skipped.is_empty(),
        report.findings_total > 0,
    ))
}
