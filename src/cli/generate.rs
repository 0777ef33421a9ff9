//! `ilcheck generate`: runnable assemblies of generated methods, with their manifests.

use crate::cli::out::outln;
use anyhow::{Context, Result, bail};
use ilcheck::generate::Config;
use ilcheck::harness::program::generate_program;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Arguments of `ilcheck generate`.
#[derive(clap::Args)]
pub struct GenerateArgs {
    /// Directory to write the assemblies into (created when missing).
    #[arg(short, long, value_name = "DIR")]
    pub output: PathBuf,
    /// How many assemblies.
    #[arg(long, default_value_t = 1)]
    pub count: u32,
    /// Seed of the first assembly; assembly k has seed SEED + k (and is named g<seed>.exe).
    /// SEED + COUNT - 1 must not pass 2^64 - 1: seeds never wrap around.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Generated methods per assembly (at most 10,000).
    #[arg(long, default_value_t = 20, value_parser = methods_per_assembly)]
    pub methods_per_assembly: u32,
    /// Generator settings as JSON (fields of the generator's Config; those not given keep
    /// their defaults).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// `--methods-per-assembly`: a count up to what a program holds
/// ([`ilcheck::harness::program::MAX_METHODS`]).
pub fn methods_per_assembly(text: &str) -> Result<u32, String> {
    use ilcheck::harness::program::MAX_METHODS;
    let n: u32 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a count"))?;
    if n > MAX_METHODS {
        return Err(format!(
            "{n} is more than a program holds; allowed: 0 to {MAX_METHODS}"
        ));
    }
    Ok(n)
}

/// Reads a generator configuration file, or the default configuration; a field out of its
/// range ([`Config::check`]) is an error naming it.
pub fn load_config(path: Option<&Path>) -> Result<Config> {
    let Some(path) = path else {
        return Ok(Config::default());
    };
    // A config is a few hundred bytes: a larger file is no config, and is not read whole.
    let read = || -> std::io::Result<String> {
        use std::io::Read;
        let mut text = String::new();
        std::fs::File::open(path)?
            .take(CONFIG_LIMIT + 1)
            .read_to_string(&mut text)?;
        Ok(text)
    };
    let text =
        read().with_context(|| format!("reading the generator config {}", path.display()))?;
    if text.len() as u64 > CONFIG_LIMIT {
        bail!(
            "generator config {}: larger than {CONFIG_LIMIT} bytes, which no config is",
            path.display()
        );
    }
    let config: Config = serde_json::from_str(&text)
        .with_context(|| format!("generator config {}", path.display()))?;
    config
        .check()
        .with_context(|| format!("generator config {}", path.display()))?;
    Ok(config)
}

/// Largest generator config file read.
const CONFIG_LIMIT: u64 = 1 << 20;

/// Runs `ilcheck generate`.
pub fn run(a: GenerateArgs) -> Result<ExitCode> {
    // Checked before anything is written: seeds never wrap around to name another run's files.
    if a.count > 0 && a.seed.checked_add(u64::from(a.count) - 1).is_none() {
        bail!(
            "--seed {} with --count {}: the last seed would pass 2^64 - 1 (seeds do not wrap \
             around); at most --count {} from this seed",
            a.seed,
            a.count,
            u64::MAX - a.seed + 1
        );
    }
    let config = load_config(a.config.as_deref())?;
    std::fs::create_dir_all(&a.output)
        .with_context(|| format!("creating {}", a.output.display()))?;
    let mut methods = 0usize;
    for k in 0..a.count {
        let seed = a.seed + u64::from(k);
        let name = format!("g{seed}");
        let program = generate_program(&name, seed, a.methods_per_assembly, &config)
            .with_context(|| format!("generating {name}"))?;
        methods += program.manifest.methods.len();
        program
            .write_to(&a.output)
            .with_context(|| format!("writing {name} into {}", a.output.display()))?;
    }
    outln!(
        "wrote {} assemblies ({methods} methods) with their manifests to {}",
        a.count,
        a.output.display()
    );
    Ok(ExitCode::SUCCESS)
}
