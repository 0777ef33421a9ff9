//! `ilcheck generate`: runnable assemblies of generated methods, with their manifests.

use crate::cli::out::outln;
use anyhow::{Context, Result};
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
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Generated methods per assembly.
    #[arg(long, default_value_t = 20)]
    pub methods_per_assembly: u32,
    /// Generator settings as JSON (fields of the generator's Config; those not given keep
    /// their defaults).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// Reads a generator configuration file, or the default configuration.
pub fn load_config(path: Option<&Path>) -> Result<Config> {
    let Some(path) = path else {
        return Ok(Config::default());
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the generator config {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("generator config {}", path.display()))
}

/// Runs `ilcheck generate`.
pub fn run(a: GenerateArgs) -> Result<ExitCode> {
    let config = load_config(a.config.as_deref())?;
    std::fs::create_dir_all(&a.output)
        .with_context(|| format!("creating {}", a.output.display()))?;
    let mut methods = 0usize;
    for k in 0..a.count {
        let seed = a.seed.wrapping_add(u64::from(k));
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
