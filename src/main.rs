//! The `ilcheck` command line.

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use ilcheck::body::Body;
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
