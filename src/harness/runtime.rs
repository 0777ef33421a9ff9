//! Runtimes that run assemblies: mono (Debian's `mono`) and Microsoft's CoreCLR (the .NET Core
//! 3.1 runtime, which `scripts/setup.sh` installs from PyPI's `dotnetcore2` into a virtual
//! environment). CoreCLR rejects much invalid IL that mono runs silently, so the two together
//! are the runtime oracle. Every run is bounded in time and output ([`run_bounded`]).

use super::process::{Outcome, ProcessError, run_bounded};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Which runtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RuntimeKind {
    /// Mono, as `mono PROGRAM.exe`.
    Mono,
    /// CoreCLR, as `dotnet exec --runtimeconfig CONFIG PROGRAM.exe`.
    CoreClr,
}

impl RuntimeKind {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            RuntimeKind::Mono => "mono",
            RuntimeKind::CoreClr => "coreclr",
        }
    }
}

/// Why a runtime is not available.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// No executable of the runtime was found; `hint` says how to install it.
    #[error("{kind} not found (looked in: {looked}); {hint}")]
    NotFound {
        /// The runtime's name.
        kind: &'static str,
        /// The places searched.
        looked: String,
        /// How to install it.
        hint: &'static str,
    },
    /// CoreCLR was found without a Microsoft.NETCore.App shared framework beside it.
    #[error("{dotnet}: no shared framework in {dir}")]
    NoFramework {
        /// The `dotnet` host.
        dotnet: PathBuf,
        /// Where the framework was looked for.
        dir: PathBuf,
    },
    /// The runtime configuration file CoreCLR needs could not be written.
    #[error("writing {path}: {source}")]
    Config {
        /// The file.
        path: PathBuf,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// The runtime could not be started.
    #[error(transparent)]
    Process(#[from] ProcessError),
}

/// A runtime found on this machine, ready to run programs.
#[derive(Clone, Debug)]
pub struct Runtime {
    kind: RuntimeKind,
    program: PathBuf,
    /// CoreCLR: the runtimeconfig.json naming the installed framework.
    config: Option<PathBuf>,
    /// CoreCLR: the Microsoft.NETCore.App version.
    version: Option<String>,
}

/// The runtimeconfig.json that lets `dotnet NAME.exe` run a program on .NET Core 3.1 or later.
/// Globalization is invariant, as in the harness's own runs: the result lines do not depend on
/// culture data, and a machine whose ICU the runtime does not know (CoreCLR 3.1 on Debian 12,
/// with ICU 72) runs the program by hand instead of failing at the first number it formats.
pub const RUNTIMECONFIG: &str = "{\n  \"runtimeOptions\": {\n    \"tfm\": \"netcoreapp3.1\",\n    \"rollForward\": \"Major\",\n    \"framework\": { \"name\": \"Microsoft.NETCore.App\", \"version\": \"3.1.0\" },\n    \"configProperties\": { \"System.Globalization.Invariant\": true }\n  }\n}\n";

/// Most output a program run keeps per stream.
pub(crate) const OUTPUT_LIMIT: usize = 16 << 20;

/// Where `scripts/setup.sh` puts CoreCLR, unless `ILCHECK_CORECLR_DIR` says otherwise.
const DEFAULT_CORECLR_DIR: &str = "/opt/ilcheck-coreclr";

fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// `dotnet` hosts to try: `ILCHECK_DOTNET`, the virtual environment's `dotnetcore2`, PATH.
fn dotnet_candidates() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(p) = std::env::var_os("ILCHECK_DOTNET") {
        out.push(PathBuf::from(p));
    }
    let venv = std::env::var_os("ILCHECK_CORECLR_DIR")
        .map_or_else(|| PathBuf::from(DEFAULT_CORECLR_DIR), PathBuf::from);
    if let Ok(libs) = std::fs::read_dir(venv.join("lib")) {
        let mut found: Vec<PathBuf> = libs
            .filter_map(|e| e.ok().map(|e| e.path()))
            .map(|p| p.join("site-packages/dotnetcore2/bin/dotnet"))
            .filter(|p| p.is_file())
            .collect();
        found.sort();
        out.extend(found);
    }
    out.extend(on_path("dotnet"));
    out
}

/// The newest Microsoft.NETCore.App version installed beside `dotnet`.
fn framework_version(dotnet: &Path) -> Result<String, RuntimeError> {
    let dir = dotnet
        .parent()
        .unwrap_or(Path::new("."))
        .join("shared/Microsoft.NETCore.App");
    let mut versions: Vec<(Vec<u32>, String)> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().into_string().ok())
                .map(|v| {
                    let key = v.split('.').map(|p| p.parse().unwrap_or(0)).collect();
                    (key, v)
                })
                .collect()
        })
        .unwrap_or_default();
    versions.sort();
    versions
        .pop()
        .map(|(_, v)| v)
        .ok_or(RuntimeError::NoFramework {
            dotnet: dotnet.to_path_buf(),
            dir,
        })
}

/// The newest Microsoft.NETCore.App shared framework of the CoreCLR [`Runtime::coreclr`]
/// would run (its assemblies are a corpus of their own: ReadyToRun images), when installed.
pub fn coreclr_framework_dir() -> Option<PathBuf> {
    let dotnet = dotnet_candidates().into_iter().next()?;
    let version = framework_version(&dotnet).ok()?;
    Some(
        dotnet
            .parent()?
            .join("shared/Microsoft.NETCore.App")
            .join(version),
    )
}

impl Runtime {
    /// Mono from PATH.
    pub fn mono() -> Result<Runtime, RuntimeError> {
        let program = on_path("mono").ok_or(RuntimeError::NotFound {
            kind: "mono",
            looked: "PATH".into(),
            hint: "install it with `bash scripts/setup.sh` (Debian: apt-get install mono-devel)",
        })?;
        Ok(Runtime {
            kind: RuntimeKind::Mono,
            program,
            config: None,
            version: None,
        })
    }

    /// CoreCLR: `ILCHECK_DOTNET`, else the `dotnetcore2` that `scripts/setup.sh` installs
    /// (under `ILCHECK_CORECLR_DIR`, default `/opt/ilcheck-coreclr`), else `dotnet` on PATH.
    pub fn coreclr() -> Result<Runtime, RuntimeError> {
        let candidates = dotnet_candidates();
        let Some(dotnet) = candidates.first().cloned() else {
            return Err(RuntimeError::NotFound {
                kind: "CoreCLR",
                looked: format!("$ILCHECK_DOTNET, {DEFAULT_CORECLR_DIR}, PATH"),
                hint: "install it with `bash scripts/setup.sh` (pip install dotnetcore2 in a virtual environment)",
            });
        };
        let version = framework_version(&dotnet)?;
        let config =
            std::env::temp_dir().join(format!("ilcheck-netcoreapp-{version}.runtimeconfig.json"));
        let text = format!(
            "{{\"runtimeOptions\":{{\"tfm\":\"netcoreapp{}\",\"framework\":{{\"name\":\"Microsoft.NETCore.App\",\"version\":\"{version}\"}}}}}}\n",
            version.split('.').take(2).collect::<Vec<_>>().join(".")
        );
        if std::fs::read_to_string(&config).ok().as_deref() != Some(text.as_str()) {
            crate::fsio::write_atomic(&config, text.as_bytes()).map_err(|source| {
                RuntimeError::Config {
                    path: config.clone(),
                    source,
                }
            })?;
        }
        Ok(Runtime {
            kind: RuntimeKind::CoreClr,
            program: dotnet,
            config: Some(config),
            version: Some(version),
        })
    }

    /// The runtime of this kind.
    pub fn find(kind: RuntimeKind) -> Result<Runtime, RuntimeError> {
        match kind {
            RuntimeKind::Mono => Runtime::mono(),
            RuntimeKind::CoreClr => Runtime::coreclr(),
        }
    }

    /// Which runtime this is.
    pub fn kind(&self) -> RuntimeKind {
        self.kind
    }

    /// The executable started (`mono` or `dotnet`).
    pub fn program(&self) -> &Path {
        &self.program
    }

    /// A description for reports: `mono (/usr/bin/mono)`, `coreclr 3.1.23 (…/dotnet)`.
    pub fn describe(&self) -> String {
        match &self.version {
            Some(v) => format!("{} {v} ({})", self.kind.name(), self.program.display()),
            None => format!("{} ({})", self.kind.name(), self.program.display()),
        }
    }

    /// The command that runs `exe` with `args`.
    pub fn command(&self, exe: &Path, args: &[&str]) -> Command {
        // Absolute, since the child runs in the program's directory.
        let exe = &std::path::absolute(exe).unwrap_or_else(|_| exe.to_path_buf());
        let mut c = Command::new(&self.program);
        match (&self.kind, &self.config) {
            (RuntimeKind::CoreClr, Some(config)) => {
                c.arg("exec").arg("--runtimeconfig").arg(config);
                // Debian has ICU 72, which CoreCLR 3.1 does not know; no test here needs
                // culture data. Telemetry and first-run work stay off. Without the debugger
                // and diagnostics endpoints, a runtime killed at its deadline leaves no
                // `clr-debug-pipe-*` and `dotnet-diagnostic-*` files behind in /tmp.
                c.env("DOTNET_SYSTEM_GLOBALIZATION_INVARIANT", "1")
                    .env("DOTNET_CLI_TELEMETRY_OPTOUT", "1")
                    .env("DOTNET_SKIP_FIRST_TIME_EXPERIENCE", "1")
                    .env("COMPlus_EnableDiagnostics", "0");
            }
            _ => {
                // A crash is reported by its message, without attaching gdb for a backtrace.
                c.env("MONO_ENV_OPTIONS", "")
                    .env("MONO_DEBUG", "no-gdb-backtrace");
            }
        }
        c.arg(exe).args(args);
        // A crashing runtime may leave dump files in its working directory: the program's.
        if let Some(dir) = exe.parent().filter(|d| !d.as_os_str().is_empty()) {
            c.current_dir(dir);
        }
        c
    }

    /// Runs `exe` to its end or `timeout`, output bounded.
    pub fn run(
        &self,
        exe: &Path,
        args: &[&str],
        timeout: Duration,
    ) -> Result<Outcome, RuntimeError> {
        Ok(run_bounded(
            &mut self.command(exe, args),
            timeout,
            OUTPUT_LIMIT,
        )?)
    }
}
