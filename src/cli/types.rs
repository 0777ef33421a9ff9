//! Options of the type pass, and the level of every finding, shared by the commands that verify
//! (`verify`).

use clap::{Args, ValueEnum};
use ilcheck::verify::types::ModuleStore;
use std::path::PathBuf;

/// Which findings count for the exit code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Level {
    /// Invalid code only: what the runtime may reject or run wrongly.
    Invalid,
    /// Also unverifiable code: runs, but is not provably type-safe.
    Unverifiable,
}

/// The type pass's options.
#[derive(Args, Debug, Clone)]
pub struct TypeArgs {
    /// Which findings are reported and count for the exit code, structural and type alike:
    /// `invalid` (the runtime may reject the code) or `unverifiable` (also code that is not
    /// provably type-safe).
    #[arg(long, value_enum, default_value_t = Level::Invalid)]
    pub level: Level,
    /// Structure only: skip the type pass.
    #[arg(long)]
    pub no_types: bool,
    /// A referenced assembly's directory to search (after the input's own directory, before
    /// the runtimes' directories); may be repeated.
    #[arg(long = "reference-dir", value_name = "DIR")]
    pub reference_dirs: Vec<PathBuf>,
    /// A referenced assembly: found by its assembly name whatever its file is called, before
    /// any directory (its own directory is searched too, for what it references); may be
    /// repeated.
    #[arg(long = "reference", value_name = "PATH")]
    pub references: Vec<PathBuf>,
}

impl TypeArgs {
    /// Whether the type pass runs.
    pub fn types(&self) -> bool {
        !self.no_types
    }

    /// The level for the verification options.
    pub fn level(&self) -> ilcheck::verify::Level {
        match self.level {
            Level::Invalid => ilcheck::verify::Level::Invalid,
            Level::Unverifiable => ilcheck::verify::Level::Unverifiable,
        }
    }

    /// Where references are found: the assemblies given (by their assembly names), then the
    /// input's directory, the directories given, those of the assemblies given, and the
    /// runtimes'. A `--reference` that is not a readable .NET assembly, or a
    /// `--reference-dir` that is not a directory, is an error: a reference that was meant to
    /// be found and is not would leave methods checked in part without saying why.
    pub fn store(&self) -> anyhow::Result<ModuleStore> {
        use anyhow::Context;
        if let Some(d) = self.reference_dirs.iter().find(|d| !d.is_dir()) {
            anyhow::bail!("--reference-dir {}: not a directory", d.display());
        }
        let mut dirs = self.reference_dirs.clone();
        let mut held = Vec::new();
        for r in &self.references {
            let image = ilcheck::image::Image::open(r).with_context(|| {
                format!("--reference {}: not a readable .NET assembly", r.display())
            })?;
            held.push((image, r.clone()));
            if let Some(d) = r.parent() {
                let d = if d.as_os_str().is_empty() {
                    PathBuf::from(".")
                } else {
                    d.to_path_buf()
                };
                if !dirs.contains(&d) {
                    dirs.push(d);
                }
            }
        }
        let mut store = ModuleStore::with_runtime_dirs(dirs);
        for (image, path) in held {
            if !store.hold(image, path.clone()) {
                anyhow::bail!(
                    "--reference {}: no assembly or module name to be found by",
                    path.display()
                );
            }
        }
        Ok(store)
    }
}
