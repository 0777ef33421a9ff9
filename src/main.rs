//! The `ilcheck` command line.

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use ilcheck::body::Body;
use ilcheck::corpus::{self, Input, RoundtripOptions, RoundtripReport};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

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
    /// round-trips, 1 on any mismatch or decode failure, 2 on usage or I/O errors.
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
    },
    /// Verify every method body of the given assemblies with the structural verifier.
    ///
    /// Exit code 0 when clean, 1 on findings, 2 on usage or I/O errors.
    Verify {
        /// Assemblies, or directories searched recursively for .dll and .exe files.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Original assemblies: report only findings that are new in the patched ones (methods
        /// matched by MethodDef token, falling back to full name; assemblies by file name).
        #[arg(long, num_args = 1.., value_name = "ORIGINAL")]
        baseline: Vec<PathBuf>,
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
    },
    /// Disassemble one method body given as hex or as a binary file.
    Disasm {
        /// Body bytes as hex, e.g. "2A" or "13 30 01 00 …".
        #[arg(long, conflicts_with = "file")]
        hex: Option<String>,
        /// A file holding the body bytes.
        file: Option<PathBuf>,
        /// Also print the canonical encoding's bytes.
        #[arg(long)]
        canonical: bool,
    },
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ilcheck: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Disasm {
            hex,
            file,
            canonical,
        } => disasm(hex, file, canonical),
        Command::Verify {
            paths,
            baseline,
            json,
            sarif,
            report,
            max,
        } => verify(paths, baseline, json, sarif, report, max),
        Command::Roundtrip {
            paths,
            canonical,
            json,
            report,
            max_failures,
        } => roundtrip(
            paths,
            RoundtripOptions {
                canonical,
                max_failures,
            },
            json,
            report,
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

fn disasm(hex: Option<String>, file: Option<PathBuf>, canonical: bool) -> Result<ExitCode> {
    let (bytes, source) = match (hex, file) {
        (Some(h), _) => (parse_hex(&h)?, "--hex".to_string()),
        (None, Some(f)) => (
            std::fs::read(&f).with_context(|| format!("reading {}", f.display()))?,
            f.display().to_string(),
        ),
        (None, None) => bail!("give --hex BYTES or a FILE"),
    };
    let body = match Body::parse(&bytes) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("{source}: {e}");
            return Ok(ExitCode::from(1));
        }
    };
    print!("{}", ilcheck::disasm::disassemble(&body));
    if body.len() < bytes.len() {
        println!("// {} bytes after the body's end", bytes.len() - body.len());
    }
    if canonical {
        let mut out = Vec::new();
        body.encode_canonical(&mut out)?;
        println!("// canonical: {}", ilcheck::disasm::hex(&out));
    }
    let code_ok = body.validate_code();
    if let Err(e) = code_ok {
        eprintln!("{source}: {e}");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// The inputs named on the command line, or the default corpus with the sources it used.
fn inputs(paths: Vec<PathBuf>) -> Result<(Vec<Input>, Vec<String>)> {
    if !paths.is_empty() {
        let files = corpus::discover(&paths)?;
        let mut sources: Vec<String> = paths
            .iter()
            .take(3)
            .map(|p| p.display().to_string())
            .collect();
        if paths.len() > 3 {
            sources.push(format!("and {} more paths", paths.len() - 3));
        }
        return Ok((files.into_iter().map(Input::File).collect(), sources));
    }
    let mut inputs: Vec<Input> = corpus::EMBEDDED
        .iter()
        .map(|&(name, bytes)| Input::Embedded { name, bytes })
        .collect();
    let mut sources = vec![format!(
        "embedded project corpus ({} assemblies)",
        inputs.len()
    )];
    for dir in corpus::system_dirs() {
        let files = corpus::discover(std::slice::from_ref(&dir))?;
        sources.push(format!("{} ({} files)", dir.display(), files.len()));
        inputs.extend(files.into_iter().map(Input::File));
    }
    if sources.len() == 1 {
        sources.push(
            "no system assemblies found (install mono-devel for /usr/lib/mono/4.5)".to_string(),
        );
    }
    Ok((inputs, sources))
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
) -> Result<ExitCode> {
    let (inputs, sources) = inputs(paths)?;
    if !json {
        eprintln!("ilcheck roundtrip: {}", sources.join("; "));
    }
    let mut report = RoundtripReport {
        sources,
        ..Default::default()
    };
    let bar = progress_bar(inputs.len());
    corpus::roundtrip(&inputs, opts, &mut report, |input| {
        bar.set_message(input.name());
        bar.inc(1);
    });
    bar.finish_and_clear();
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", ilcheck::report::roundtrip_summary(&report));
    }
    if let Some(path) = report_path {
        let command = std::env::args().collect::<Vec<_>>().join(" ");
        std::fs::write(
            &path,
            ilcheck::report::roundtrip_markdown(&report, &command),
        )
        .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(if report.all_identical() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn verify(
    paths: Vec<PathBuf>,
    baseline: Vec<PathBuf>,
    json: bool,
    sarif: Option<PathBuf>,
    report_path: Option<PathBuf>,
    max: usize,
) -> Result<ExitCode> {
    let (inputs, sources) = inputs(paths)?;
    let baseline = if baseline.is_empty() {
        None
    } else {
        let files = corpus::discover(&baseline)?;
        let inputs: Vec<Input> = files.into_iter().map(Input::File).collect();
        Some(corpus::Baseline::load(&inputs).map_err(anyhow::Error::msg)?)
    };
    let mut report = corpus::VerifyReport {
        sources,
        ..Default::default()
    };
    let opts = corpus::VerifyOptions {
        max_findings: max,
        ..Default::default()
    };
    let bar = progress_bar(inputs.len());
    corpus::verify(&inputs, opts, baseline.as_ref(), &mut report, |input| {
        bar.set_message(input.name());
        bar.inc(1);
    });
    bar.finish_and_clear();
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", ilcheck::report::verify_text(&report));
    }
    if let Some(path) = sarif {
        let log = ilcheck::report::verify_sarif(&report);
        std::fs::write(&path, serde_json::to_string_pretty(&log)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = report_path {
        let command = std::env::args().collect::<Vec<_>>().join(" ");
        std::fs::write(&path, ilcheck::report::verify_markdown(&report, &command))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(if report.clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
