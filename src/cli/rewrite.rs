//! `ilcheck rewrite`: one assembly to one file, or many (files and directories) into a
//! directory, every core used across the assemblies.

use crate::cli::out::{errln, out, outln};
use anyhow::{Context, Result, bail};
use ilcheck::corpus::{self, Input, RewriteOptions, RewriteReport};
use ilcheck::report::Invalidated;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Branch forms of rewritten code.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Branches {
    /// Each branch keeps its form while it fits (minimal diffs).
    Keep,
    /// Every branch long.
    Long,
    /// Every branch short where it fits.
    Short,
}

/// `K/N`: the K-th of N shards (1-based).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    /// This shard, 1..=N.
    pub index: u32,
    /// How many shards.
    pub count: u32,
}

impl std::str::FromStr for Shard {
    type Err = String;
    fn from_str(s: &str) -> Result<Shard, String> {
        let (k, n) = s.split_once('/').ok_or("a shard is K/N, e.g. 2/8")?;
        let index: u32 = k
            .trim()
            .parse()
            .map_err(|_| format!("shard {k:?} is not a number"))?;
        let count: u32 = n
            .trim()
            .parse()
            .map_err(|_| format!("shard count {n:?} is not a number"))?;
        if count == 0 || index == 0 || index > count {
            return Err(format!("shard {index}/{count}: K must be between 1 and N"));
        }
        Ok(Shard { index, count })
    }
}

impl Shard {
    /// Whether `path` belongs to this shard: FNV-1a of the path as found, so N jobs that see
    /// the same tree split it the same way without talking to each other.
    pub fn holds(&self, path: &str) -> bool {
        let h = path.bytes().fold(0xCBF2_9CE4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01B3)
        });
        h % u64::from(self.count) == u64::from(self.index - 1)
    }
}

/// Arguments of `ilcheck rewrite`.
#[derive(clap::Args)]
pub struct RewriteArgs {
    /// Assemblies, or directories searched recursively for .dll and .exe files.
    #[arg(required = true)]
    pub inputs: Vec<PathBuf>,
    /// Where to write: a file for one input assembly; a directory (created when an output is
    /// written into it) for
    /// several inputs or a directory input, where each output keeps its path relative to the
    /// directory it was found in (a named file: its file name).
    #[arg(short, long)]
    pub output: PathBuf,
    /// identity, nop-pad, widen, shorten, prologue, epilogue, prologue-epilogue,
    /// wrap-finally, wrap-catch.
    #[arg(long, short)]
    pub transform: String,
    /// Only methods whose full name matches this glob (`*`, `?`), e.g. `Ns.Type::*` (full
    /// names include the parameters). A glob that selects no method with a body (in a run over
    /// many assemblies: in none of them) is exit 1, and nothing is written.
    #[arg(long)]
    pub methods: Option<String>,
    /// Branch forms in the output.
    #[arg(long, value_enum, default_value = "keep")]
    pub branches: Branches,
    /// The call at method entry: a probe named ILAsm-style, e.g.
    /// 'void [Acme.Probe]Acme.Probe::Enter(string, int32)', found in a --reference assembly
    /// (string: the method's full name; int32: its token; object[]: its arguments), or a raw
    /// TOKEN of a parameterless static void method: a MethodDef or MemberRef row of the
    /// assembly (checked before anything is written; only when one assembly is rewritten).
    /// For wrap-finally and wrap-catch: before the new try. Only with the transforms that call
    /// it: prologue, prologue-epilogue, wrap-*.
    #[arg(long, value_name = "PROBE|TOKEN")]
    pub prologue_call: Option<String>,
    /// The call before every return, as --prologue-call (but object, not object[]: the return
    /// value, boxed; null for void). For wrap-finally: in the finally handler, so it runs on
    /// every exit, exceptional ones included. Only with epilogue, prologue-epilogue and
    /// wrap-finally.
    #[arg(long, value_name = "PROBE|TOKEN")]
    pub epilogue_call: Option<String>,
    /// An assembly a probe of --prologue-call/--epilogue-call is looked up in (repeatable; only
    /// with a probe named by signature).
    #[arg(long = "reference", value_name = "PATH")]
    pub references: Vec<PathBuf>,
    /// The exception type for wrap-catch (only): a TypeRef, TypeDef or TypeSpec token in hex,
    /// of a row the assembly has (default: System.Exception, referenced from the core library
    /// when the assembly has no reference to it yet).
    #[arg(long, value_name = "TOKEN")]
    pub catch_type: Option<String>,
    /// Print the JSON report (schema: docs/rewrite-json.md; with several assemblies, an array
    /// of them).
    #[arg(long)]
    pub json: bool,
    /// How many methods not rewritten to list.
    #[arg(long = "max", default_value_t = 50)]
    pub max: usize,
    /// Threads (0: one per core): across assemblies when there are several, else across one
    /// assembly's methods. The output is the same for any number.
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Keep a ReadyToRun image's precompiled code (by default a patched ReadyToRun image is
    /// made IL-only, so the runtime compiles the patched IL instead of running the original
    /// methods' native code).
    #[arg(long)]
    pub keep_r2r: bool,
    /// Keep every original body's bytes in the output (relocated bodies all go to a new
    /// section), instead of placing relocated bodies where the old ones were: a larger file
    /// whose old bodies can still be compared byte for byte.
    #[arg(long)]
    pub keep_old_bodies: bool,
    /// Rewrite only the K-th of N shards of the inputs (stable by path), e.g. 2/8.
    #[arg(long, value_name = "K/N")]
    pub shard: Option<Shard>,
}

/// A token given on the command line, hex with or without `0x`.
pub fn parse_token(text: &str) -> Result<u32> {
    let digits = text.trim_start_matches("0x").trim_start_matches("0X");
    u32::from_str_radix(digits, 16).with_context(|| format!("{text:?} is not a hex token"))
}

/// The rewrite options of the arguments, with the probe references they name.
pub fn options(a: &RewriteArgs) -> Result<RewriteOptions> {
    use ilcheck::ir::{BranchForms, LayoutOptions, TransformOptions};
    let Some(transform) = ilcheck::ir::Transform::by_name(&a.transform) else {
        let names: Vec<&str> = ilcheck::ir::Transform::ALL.map(|t| t.name()).to_vec();
        bail!(
            "unknown transform {:?}; one of: {}",
            a.transform,
            names.join(", ")
        );
    };
    check_options_used(a, transform)?;
    let mut topts = TransformOptions::default();
    let mut probes = corpus::Probes::default();
    let references: Vec<ilcheck::image::Image<'static>> = a
        .references
        .iter()
        .map(|p| {
            ilcheck::image::Image::open(p).with_context(|| {
                format!("--reference {}: not a readable .NET assembly", p.display())
            })
        })
        .collect::<Result<_>>()?;
    let wraps = transform.wraps();
    for (given, probe, snippet, at_entry) in [
        (
            &a.prologue_call,
            &mut probes.entry,
            &mut topts.prologue,
            true,
        ),
        (
            &a.epilogue_call,
            &mut probes.exit,
            &mut topts.epilogue,
            false,
        ),
    ] {
        let Some(text) = given else { continue };
        if text.contains('(') {
            let parsed = ilcheck::image::emit::probe::parse(text)?;
            *probe = Some(ilcheck::image::emit::probe::resolve(
                &parsed,
                &references,
                at_entry,
            )?);
        } else if wraps {
            bail!(
                "{text}: the wrap transforms take a probe by name, e.g. 'void [P]P::Enter(string)'"
            );
        } else {
            *snippet = ilcheck::ir::transforms::call_snippet(parse_token(text)?);
        }
    }
    // 0: System.Exception, found in the assembly or referenced anew from its core library.
    topts.catch_type = match &a.catch_type {
        Some(t) => catch_type_token(t)?,
        None => 0,
    };
    let layout = LayoutOptions {
        branch_forms: match a.branches {
            Branches::Keep => BranchForms::KeepOriginal,
            Branches::Long => BranchForms::AllLong,
            Branches::Short => BranchForms::ShortestWhereFits,
        },
        ..LayoutOptions::default()
    };
    Ok(RewriteOptions {
        transform,
        transform_opts: topts,
        layout,
        methods: a.methods.clone(),
        max_listed: a.max,
        threads: a.threads,
        keep_ready_to_run: a.keep_r2r,
        keep_old_bodies: a.keep_old_bodies,
        probes,
    })
}

/// Refuses an option the transform would not use (a usage error): a probe it never calls, a
/// catch type for a transform other than `wrap-catch`, a `--reference` with no probe named to
/// look up in it. Each would otherwise pass silently, or change the output (a probe's
/// references are metadata) while instrumenting nothing.
fn check_options_used(a: &RewriteArgs, transform: ilcheck::ir::Transform) -> Result<()> {
    use ilcheck::ir::Transform;
    let taking = |takes: fn(Transform) -> bool| {
        let names: Vec<&str> = Transform::ALL
            .into_iter()
            .filter(|t| takes(*t))
            .map(|t| t.name())
            .collect();
        names.join(", ")
    };
    for (given, option, takes) in [
        (
            a.prologue_call.is_some(),
            "--prologue-call",
            Transform::runs_entry_code as fn(Transform) -> bool,
        ),
        (
            a.epilogue_call.is_some(),
            "--epilogue-call",
            Transform::runs_exit_code,
        ),
        (a.catch_type.is_some(), "--catch-type", |t| {
            t == Transform::WrapCatch
        }),
    ] {
        if given && !takes(transform) {
            bail!(
                "{option} is not used by -t {}; the transforms that take it: {}",
                transform.name(),
                taking(takes)
            );
        }
    }
    let by_name = [&a.prologue_call, &a.epilogue_call]
        .into_iter()
        .flatten()
        .any(|p| p.contains('('));
    if !a.references.is_empty() && !by_name {
        bail!(
            "--reference is where probes named by signature are looked up, and no \
             --prologue-call or --epilogue-call names one"
        );
    }
    Ok(())
}

/// The `--catch-type` token: a TypeDef, TypeRef or TypeSpec token, the only kinds a catch
/// clause can name.
fn catch_type_token(text: &str) -> Result<u32> {
    use ilcheck::image::{Table, Token};
    let token = parse_token(text)?;
    let t = Token(token);
    let is_type = matches!(
        t.table(),
        Some(Table::TypeDef | Table::TypeRef | Table::TypeSpec)
    );
    if !is_type || t.rid() == 0 {
        bail!(
            "--catch-type {text}: not a type token; give the exception type's TypeRef \
             (0x01xxxxxx), TypeDef (0x02xxxxxx) or TypeSpec (0x1bxxxxxx) token, in hex, or leave \
             it out to catch System.Exception"
        );
    }
    Ok(token)
}

/// Refuses a `--catch-type` whose row `image` does not have: every wrapped method's catch
/// clause would name nothing, and the verifier would reject each rewrite.
fn check_catch_type(image: &ilcheck::image::Image<'_>, opts: &RewriteOptions) -> Result<()> {
    use ilcheck::image::Token;
    let token = Token(opts.transform_opts.catch_type);
    if opts.transform != ilcheck::ir::Transform::WrapCatch || token.is_null() {
        return Ok(());
    }
    if let Some(table) = token.table() {
        let rows = image.tables_header().rows(table);
        if token.rid() > rows {
            bail!(
                "--catch-type {:#010x}: the assembly has {rows} {table:?} rows",
                token.0
            );
        }
    }
    Ok(())
}

/// The raw tokens of `--prologue-call` and `--epilogue-call`, as the call snippets hold them.
fn call_tokens(opts: &RewriteOptions) -> impl Iterator<Item = (&'static str, u32)> + '_ {
    use ilcheck::ir::Operand;
    [
        ("--prologue-call", &opts.transform_opts.prologue),
        ("--epilogue-call", &opts.transform_opts.epilogue),
    ]
    .into_iter()
    .flat_map(|(option, code)| {
        code.iter().filter_map(move |i| match i.operand {
            Operand::Token(t) if i.opcode == ilcheck::opcode::Opcode::Call => Some((option, t)),
            // The snippet's argument loads: only its call names the probe.
            _ => None,
        })
    })
}

/// Refuses a raw probe token that is not a method `image` can call at every entry or exit
/// ([`ilcheck::ir::transforms::check_call_token`]): every rewrite would be rejected, and the
/// output an unchanged copy.
fn check_call_tokens(image: &ilcheck::image::Image<'_>, opts: &RewriteOptions) -> Result<()> {
    for (option, token) in call_tokens(opts) {
        if let Err(e) = ilcheck::ir::transforms::check_call_token(image, token) {
            bail!("{option} {e}; nothing written");
        }
    }
    Ok(())
}

/// `--methods` selected no method with a body: exit 1, and nothing is written.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NoMethodSelected(String);

impl NoMethodSelected {
    /// The error of `glob` over `inputs` (each opened again to say what names there are).
    fn of(glob: &str, inputs: &[&Path]) -> NoMethodSelected {
        let (mut bodies, mut hint) = (0usize, String::new());
        for p in inputs {
            let Ok(image) = ilcheck::image::Image::open(p) else {
                continue;
            };
            let with_body = || image.methods().filter(|m| m.rva() != 0);
            bodies += with_body().count();
            // A name the glob nearly matches beats an example of the form names take.
            if !hint.contains("would match") {
                let here = super::glob_hint(with_body, &[glob.to_string()]);
                if hint.is_empty() || here.contains("would match") {
                    hint = here;
                }
            }
        }
        let whose = match inputs {
            [one] => format!(
                "of {} matches '{glob}' (it has {bodies} methods with a body{hint})",
                one.display()
            ),
            _ => format!(
                "of the {} assemblies matches '{glob}' (they have {bodies} methods with a \
                 body{hint})",
                inputs.len()
            ),
        };
        NoMethodSelected(format!("no method {whose}; nothing written"))
    }
}

/// Rewrites one assembly into `output`; the report says what was done. With `must_select`, a
/// `--methods` glob that selects no method with a body is a [`NoMethodSelected`] error, and
/// nothing is written: an unchanged copy would pass for an instrumented assembly.
pub fn rewrite_file(
    input: &Path,
    output: &Path,
    opts: &RewriteOptions,
    must_select: bool,
) -> Result<RewriteReport> {
    let mut buffers = Buffers::default();
    let (report, file, _) = rewrite_to_temp(input, output, opts, &mut buffers, Writing::Whole)?;
    if must_select
        && report.selected == 0
        && let Some(glob) = &opts.methods
    {
        // Dropped: the temporary file goes.
        drop(file);
        return Err(NoMethodSelected::of(glob, &[input]).into());
    }
    if ilcheck::harness::stop_requested() {
        // Dropped: the temporary file goes, and `output` stays as it was.
        drop(file);
        bail!("{}: not written: stopped by a signal", output.display());
    }
    file.commit()
        .with_context(|| format!("writing {}", output.display()))?;
    Ok(report)
}

/// What a worker keeps from one assembly to the next: the rewriting engines, the writer's
/// buffers, and the input's and the output image's memory (already paged in).
#[derive(Default)]
struct Buffers {
    scratch: corpus::RewriteScratch,
    input: Vec<u8>,
    image: Vec<u8>,
    direct: ilcheck::fsio::DirectBuffer,
}

/// Reads the assembly at `path` (a regular file only, as [`ilcheck::image::Image::open`]
/// takes) into `buf`, whose contents are replaced, and parses it. A rewrite reads every byte
/// of its input: a copy into memory the worker keeps costs less than mapping each file and
/// unmapping it again.
fn read_image<'b>(
    path: &Path,
    buf: &'b mut Vec<u8>,
) -> Result<ilcheck::image::Image<'b>, ilcheck::image::ImageError> {
    use std::io::Read;
    let mut file = ilcheck::fsio::open_regular(path)?;
    // A file larger than any ordinary assembly (padded, or sparse with a hole of a GiB) is
    // mapped instead: only the pages its headers point to are read, and nothing is copied.
    if file.metadata()?.len() > READ_LIMIT {
        return ilcheck::image::Image::open_whole(path);
    }
    buf.clear();
    // Bounded: a file that grew since its size was read is mapped too.
    (&mut file).take(READ_LIMIT + 1).read_to_end(buf)?;
    if buf.len() as u64 > READ_LIMIT {
        return ilcheck::image::Image::open_whole(path);
    }
    ilcheck::image::Image::parse(buf)
}

/// Inputs up to this size are read into a worker's buffer; larger ones are mapped.
const READ_LIMIT: u64 = 64 << 20;

/// Image buffers: a worker hands its output's to a committer, which writes it and puts it here,
/// and takes one from here (already paged in) in its place. No output is copied to be handed
/// over.
type ImagePool = std::sync::Mutex<Vec<Vec<u8>>>;

/// How [`rewrite_to_temp`] writes its output.
#[derive(Clone, Copy)]
enum Writing<'p> {
    /// Itself, from the device's side of the page cache where that pays
    /// ([`ilcheck::fsio::AtomicFile::write_whole`]): one file, nothing else to do meanwhile.
    Whole,
    /// A large output where direct I/O pays is handed over in its buffer (replaced with one of
    /// the pool) for another thread to write; others are written as [`Writing::Whole`].
    HandOver(&'p ImagePool),
    /// Itself, into the page cache, its flush started: with a worker on every core, handing
    /// over or copying into a direct-I/O buffer is work taken from the cores for nothing.
    PageCache,
}

/// [`rewrite_file`] up to the complete temporary file beside `output`: committing it (flush
/// to disk, rename over `output`) is the caller's, and so is writing the buffer returned
/// when `writing` hands it over.
fn rewrite_to_temp(
    input: &Path,
    output: &Path,
    opts: &RewriteOptions,
    buffers: &mut Buffers,
    writing: Writing<'_>,
) -> Result<(RewriteReport, ilcheck::fsio::AtomicFile, Option<Vec<u8>>)> {
    let image =
        read_image(input, &mut buffers.input).with_context(|| format!("{}", input.display()))?;
    check_catch_type(&image, opts).with_context(|| format!("{}", input.display()))?;
    check_call_tokens(&image, opts).with_context(|| format!("{}", input.display()))?;
    let mut report = RewriteReport {
        input: input.display().to_string(),
        output: output.display().to_string(),
        ..Default::default()
    };
    let create_dir = || -> Result<()> {
        if let Some(dir) = output.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        Ok(())
    };
    // An input too large to read into memory (it was mapped) is written without being
    // copied into memory either: its unchanged ranges go from file to file.
    #[cfg(unix)]
    if image.file().is_some() {
        create_dir()?;
        let mut file = ilcheck::fsio::AtomicFile::create_like(output, input)
            .with_context(|| format!("writing {}", output.display()))?;
        let target = file
            .file()
            .with_context(|| format!("writing {}", output.display()))?;
        corpus::rewrite_image_to_file(&image, opts, &mut report, target, &mut buffers.scratch)
            .with_context(|| format!("rewriting {} into {}", input.display(), output.display()))?;
        file.start_writeback()
            .with_context(|| format!("writing {}", output.display()))?;
        return Ok((report, file, None));
    }
    let bytes = &mut buffers.image;
    corpus::rewrite_image_with(&image, opts, &mut report, bytes, &mut buffers.scratch)
        .with_context(|| format!("rewriting {}", input.display()))?;
    create_dir()?;
    // The output may be the input, which is still mapped: the new file replaces it by rename,
    // so the mapping (and the input on any error) stays intact.
    let direct = &mut buffers.direct;
    let mut write = || -> std::io::Result<_> {
        let mut file = ilcheck::fsio::AtomicFile::create_like(output, input)?;
        // Handed over only where direct I/O pays: elsewhere writing is one copy into the page
        // cache, which costs this thread no more than handing over would, and the buffer
        // stays this worker's (already paged in) for its next output.
        let direct_pays = || bytes.len() >= ilcheck::fsio::DIRECT_MIN && file.direct_pays();
        if let Writing::PageCache = writing {
            std::io::Write::write_all(&mut file, bytes)?;
            file.start_writeback()?;
            return Ok((file, None));
        }
        if let Writing::HandOver(pool) = writing
            && direct_pays()
        {
            let spare = pool
                .lock()
                .ok()
                .and_then(|mut p| p.pop())
                .unwrap_or_default();
            return Ok((file, Some(std::mem::replace(bytes, spare))));
        }
        if !file.write_whole(bytes, direct)? {
            file.start_writeback()?;
        }
        Ok((file, None))
    };
    let (file, held) = write().with_context(|| format!("writing {}", output.display()))?;
    Ok((report, file, held))
}

/// Runs `ilcheck rewrite`.
pub fn run(a: RewriteArgs) -> Result<ExitCode> {
    // Ctrl-C ends the run between assemblies: what is complete is written, nothing else is
    // left behind (not even a temporary file).
    super::interrupt::install();
    // A named input that is not there is a mistake in the command, not one assembly among
    // many that failed: refused before anything is created (a many-assembly run would
    // otherwise leave an empty output directory, and the next run into that name would take
    // it for a directory to write into).
    for input in &a.inputs {
        if let Err(e) = std::fs::metadata(input) {
            bail!("{}: {e}; nothing written", input.display());
        }
    }
    let single =
        a.inputs.len() == 1 && a.inputs[0].is_file() && !a.output.is_dir() && a.shard.is_none();
    let opts = options(&a)?;
    if single {
        let report = match rewrite_file(&a.inputs[0], &a.output, &opts, true) {
            Err(e) if e.is::<NoMethodSelected>() => {
                errln!("ilcheck rewrite: {e}");
                return Ok(ExitCode::from(1));
            }
            r => r?,
        };
        if a.json {
            outln!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            out!("{}", ilcheck::report::rewrite_text(&report));
        }
        return Ok(if report.ok() {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        });
    }
    many(&a, opts)
}

/// One input of a many-assembly run and where its output goes.
struct Job {
    input: PathBuf,
    output: PathBuf,
    size: u64,
}

fn jobs(a: &RewriteArgs) -> Result<(Vec<Job>, Vec<corpus::Skipped>)> {
    let mut jobs: Vec<Job> = Vec::new();
    let mut problems = Vec::new();
    for root in &a.inputs {
        let found = corpus::discover_all(std::slice::from_ref(root));
        problems.extend(found.problems);
        for input in found.inputs {
            let Input::File { path, named } = input else {
                continue;
            };
            let rel = if named {
                PathBuf::from(path.file_name().unwrap_or(path.as_os_str()))
            } else {
                path.strip_prefix(root).unwrap_or(&path).to_path_buf()
            };
            if let Some(shard) = a.shard
                && !shard.holds(&rel.to_string_lossy())
            {
                continue;
            }
            let size = std::fs::metadata(&path).map_or(0, |m| m.len());
            jobs.push(Job {
                output: a.output.join(&rel),
                input: path,
                size,
            });
        }
    }
    let mut seen = std::collections::HashMap::new();
    for j in &jobs {
        if let Some(other) = seen.insert(j.output.clone(), j.input.clone()) {
            bail!(
                "{} and {} would both be written to {}",
                other.display(),
                j.input.display(),
                j.output.display()
            );
        }
        // By any name (`DIR/../DIR`, a link): each output would replace its input.
        if j.output == j.input || ilcheck::fsio::same_file(&j.input, &j.output) {
            bail!(
                "{}: the output directory is the input's own directory",
                j.input.display()
            );
        }
    }
    Ok((jobs, problems))
}

/// Threads that flush finished outputs to the disk and rename them into place: the flushes
/// wait on the device, not the CPU, so several overlap.
const COMMITTERS: usize = 4;

fn many(a: &RewriteArgs, mut opts: RewriteOptions) -> Result<ExitCode> {
    let (jobs, problems) = jobs(a)?;
    if jobs.is_empty() && problems.is_empty() {
        bail!("no .dll or .exe files to rewrite");
    }
    // A raw token is a row of one assembly's metadata: the same number names another method,
    // or none, in the next assembly.
    if jobs.len() > 1
        && let Some((option, token)) = call_tokens(&opts).next()
    {
        bail!(
            "{option} {token:#010x}: a raw token names a method of one assembly, and this run \
             rewrites {} assemblies; name the probe by signature (with --reference), or rewrite \
             the assemblies one at a time; nothing written",
            jobs.len()
        );
    }
    // The output directory (and each output's directories below it) is created only when an
    // output is about to be written there: a run that writes nothing creates nothing.
    let cores = ilcheck::corpus::threads_for(a.threads);
    let workers = cores.min(jobs.len()).max(1);
    // Across assemblies when there are several; within the one otherwise.
    opts.threads = if workers > 1 { 1 } else { a.threads };
    // Largest first, so the last assembly to finish is a small one.
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(jobs[i].size));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<std::sync::Mutex<Option<Result<RewriteReport, String>>>> =
        jobs.iter().map(|_| std::sync::Mutex::new(None)).collect();
    let start = std::time::Instant::now();
    let store = |i: usize, r: Result<RewriteReport, String>| {
        if let Ok(mut slot) = results[i].lock() {
            *slot = Some(r);
        }
    };
    // Workers rewrite into temporary files: a small output they write themselves and start
    // its write-back, a large one they hand over in its buffer. Committer threads write what
    // was handed over (through a direct-I/O buffer of their own where that pays), wait for
    // each file to reach the disk and rename it into place, so no worker waits on the disk,
    // and several writes and flushes are in flight at once. Each output directory is flushed
    // once, after its last rename.
    type Written = (
        usize,
        RewriteReport,
        ilcheck::fsio::AtomicFile,
        Option<Vec<u8>>,
    );
    // Bounded, so that the outputs waiting for a committer (their buffers, their open
    // files) are never more than a few, however slow the disk.
    let (done, written) = std::sync::mpsc::sync_channel::<Written>(2 * COMMITTERS);
    let written = std::sync::Mutex::new(written);
    let dirs = std::sync::Mutex::new(std::collections::BTreeSet::new());
    let pool = ImagePool::default();
    // With --methods, an assembly where the glob selects nothing is normal among many, but a
    // glob that selects nothing anywhere is a mistake, reported with nothing written: such an
    // assembly's output is held back (its temporary dropped) until some assembly's selection
    // is known not to be empty, and written at the end when one was.
    let matched = std::sync::atomic::AtomicBool::new(opts.methods.is_none());
    let deferred = std::sync::Mutex::new(Vec::new());
    // Handing a large output over pays only where a core would otherwise idle: with a worker
    // on every core, the committer's copy into a direct-I/O buffer, and the fresh image buffer
    // the worker takes instead, are work that writing into the page cache (the flush left to
    // a committer) does not have.
    let writing = if workers < std::thread::available_parallelism().map_or(1, |n| n.get()) {
        Writing::HandOver(&pool)
    } else {
        Writing::PageCache
    };
    let (jobs, order, next, opts, store) = (&jobs, &order, &next, &opts, &store);
    let (written, dirs, pool) = (&written, &dirs, &pool);
    let (matched, deferred) = (&matched, &deferred);
    std::thread::scope(|s| {
        // The inputs are read in the workers' order; the disk starts on all of them now.
        s.spawn(move || ilcheck::fsio::prefetch(order.iter().map(|&i| jobs[i].input.as_path())));
        for _ in 0..COMMITTERS {
            s.spawn(move || {
                let mut direct = ilcheck::fsio::DirectBuffer::default();
                loop {
                    let Ok(rx) = written.lock() else { break };
                    let Ok((i, report, mut file, held)) = rx.recv() else {
                        break;
                    };
                    drop(rx);
                    let output = &jobs[i].output;
                    let wrote = match held {
                        Some(image) => {
                            let wrote = file.write_whole(&image, &mut direct).map(|_| ());
                            if let Ok(mut p) = pool.lock() {
                                p.push(image);
                            }
                            wrote
                        }
                        None => Ok(()),
                    };
                    let r = match wrote.and_then(|()| file.commit_unsynced_rename()) {
                        Ok(dir) => {
                            if let Ok(mut d) = dirs.lock() {
                                d.insert(dir);
                            }
                            Ok(report)
                        }
                        Err(e) => Err(format!("writing {}: {e}", output.display())),
                    };
                    store(i, r);
                }
            });
        }
        for _ in 0..workers {
            let done = done.clone();
            s.spawn(move || {
                let mut buffers = Buffers::default();
                loop {
                    if ilcheck::harness::stop_requested() {
                        break;
                    }
                    let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(&i) = order.get(k) else { break };
                    let j = &jobs[i];
                    match rewrite_to_temp(&j.input, &j.output, opts, &mut buffers, writing) {
                        Ok((report, file, held))
                            if report.selected == 0
                                && !matched.load(std::sync::atomic::Ordering::Relaxed) =>
                        {
                            drop(file);
                            if let (Some(image), Ok(mut p)) = (held, pool.lock()) {
                                p.push(image);
                            }
                            if let Ok(mut d) = deferred.lock() {
                                d.push(i);
                            }
                        }
                        Ok((report, file, held)) => {
                            if report.selected > 0 {
                                matched.store(true, std::sync::atomic::Ordering::Relaxed);
                            }
                            // The committer outlives every worker; should it be gone, the
                            // file is dropped (its temporary removed) and the slot says so.
                            let _ = done.send((i, report, file, held));
                        }
                        Err(e) => store(i, Err(format!("{e:#}"))),
                    }
                }
            });
        }
        drop(done);
    });
    for dir in dirs
        .lock()
        .map(|mut d| std::mem::take(&mut *d))
        .unwrap_or_default()
    {
        ilcheck::fsio::sync_dir(&dir);
    }
    let deferred = deferred
        .lock()
        .map(|mut d| std::mem::take(&mut *d))
        .unwrap_or_default();
    if !deferred.is_empty() && !matched.load(std::sync::atomic::Ordering::Relaxed) {
        if let Some(glob) = &opts.methods
            && !ilcheck::harness::stop_requested()
        {
            // Every assembly rewritten selected nothing: none was written.
            for r in &results {
                if let Ok(Some(Err(e))) = r.lock().as_deref() {
                    errln!("ilcheck: {e}");
                }
            }
            let inputs: Vec<&Path> = deferred.iter().map(|&i| jobs[i].input.as_path()).collect();
            errln!("ilcheck rewrite: {}", NoMethodSelected::of(glob, &inputs));
            return Ok(ExitCode::from(1));
        }
    } else {
        for i in deferred {
            if ilcheck::harness::stop_requested() {
                break;
            }
            let j = &jobs[i];
            let r = rewrite_file(&j.input, &j.output, opts, false).map_err(|e| format!("{e:#}"));
            store(i, r);
        }
    }
    let wall = start.elapsed().as_secs_f64();
    let stopped = ilcheck::harness::stop_requested();
    let mut reports = Vec::new();
    let mut failed = 0usize;
    let mut rejected = 0u64;
    let (mut selected, mut rewritten, mut il_in) = (0u64, 0u64, 0u64);
    let mut invalidated = std::collections::BTreeMap::<Invalidated, u64>::new();
    for (j, r) in jobs.iter().zip(results) {
        let r = r.into_inner().ok().flatten();
        match r {
            Some(Ok(report)) => {
                let broken: Vec<Invalidated> =
                    report.write.iter().flat_map(Invalidated::of).collect();
                for &i in &broken {
                    *invalidated.entry(i).or_default() += 1;
                }
                if !a.json {
                    let rej: u64 = report.rejected.values().sum();
                    let skipped: u64 = report.skipped.values().sum();
                    // What the single-file text says on lines of its own, in a few words.
                    let mut also = String::new();
                    for i in &broken {
                        also.push_str("; ");
                        also.push_str(i.phrase());
                    }
                    outln!(
                        "{} → {}: {} selected, {} rewritten, {} skipped, {} rejected{also}",
                        j.input.display(),
                        j.output.display(),
                        report.selected,
                        report.rewritten,
                        skipped,
                        rej
                    );
                }
                rejected += report.rejected.values().sum::<u64>();
                selected += report.selected;
                rewritten += report.rewritten;
                il_in += report.il_bytes_in;
                reports.push(report);
            }
            Some(Err(e)) => {
                failed += 1;
                errln!("ilcheck: {e}");
            }
            None => {
                failed += 1;
                if !stopped {
                    errln!("ilcheck: {}: not rewritten", j.input.display());
                }
            }
        }
    }
    for p in &problems {
        errln!("ilcheck: {}: {}", p.path, p.reason);
    }
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&reports)?);
    } else {
        let mut also = String::new();
        for (i, n) in &invalidated {
            also.push_str(if also.is_empty() { "; " } else { ", " });
            also.push_str(&i.counted(*n));
        }
        outln!(
            "total: {} assemblies ({} failed), {selected} methods selected, {rewritten} rewritten, {rejected} rejected{also}; {:.1} MB of IL in {wall:.3} s on {workers} thread(s)",
            jobs.len(),
            failed,
            il_in as f64 / 1e6,
        );
    }
    if stopped {
        errln!(
            "ilcheck rewrite: stopped by a signal: {} of {} assemblies written, the others not \
             started (no temporary file is left)",
            reports.len(),
            jobs.len()
        );
        return Ok(ExitCode::from(super::interrupt::EXIT_STOPPED));
    }
    Ok(if failed > 0 || !problems.is_empty() {
        ExitCode::from(2)
    } else if rejected > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_split_every_path_once() {
        let paths: Vec<String> = (0..1000).map(|i| format!("dir/{i}.dll")).collect();
        let shards: Vec<Shard> = (1..=7).map(|k| format!("{k}/7").parse().unwrap()).collect();
        for p in &paths {
            assert_eq!(shards.iter().filter(|s| s.holds(p)).count(), 1, "{p}");
        }
        let first = paths.iter().filter(|p| shards[0].holds(p)).count();
        assert!((100..200).contains(&first), "{first} of 1000 in shard 1/7");
        assert!("0/3".parse::<Shard>().is_err());
        assert!("4/3".parse::<Shard>().is_err());
        assert!("x".parse::<Shard>().is_err());
    }
}
