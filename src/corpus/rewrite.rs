//! Rewriting whole assemblies: every selected method lifted, transformed, laid out, verified, and
//! written into a patched image.

use crate::image::emit::probe::{ProbeArg, ResolvedProbe};
use crate::image::emit::{Additions, EmitError, EmitResolver, MetadataBuilder};
use crate::image::writer::{ImageWriter, WriteError, WriteSummary, WriterBuffers};
use crate::image::{Image, Table, Token};
use crate::ir::transforms::CoreTypes;
use crate::ir::{
    Instr, LayoutError, LayoutInfo, LayoutOptions, NewLocals, Operand, RewriteError, Rewriter,
    SkipReason, Transform, TransformOptions,
};
use crate::opcode::Opcode;
use crate::verify::{ImageResolver, Resolver, Verdict, Verifier};
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Instant;

/// What to rewrite and how.
#[derive(Clone, Debug)]
pub struct RewriteOptions {
    /// The transform applied to each selected method (the entry/exit ones spliced into the
    /// bytes where they can be, see [`Rewriter::rewrite`]).
    pub transform: Transform,
    /// The transform's options: prologue and epilogue code, the exception type to catch, the
    /// spare return local.
    pub transform_opts: TransformOptions,
    /// How bodies are laid out: branch forms, MaxStack policy, verification.
    pub layout: LayoutOptions,
    /// Only methods whose full name matches this glob (`*` any run, `?` one character).
    pub methods: Option<String>,
    /// How many rejected or failed methods are listed.
    pub max_listed: usize,
    /// Threads that rewrite methods; 0 for one per available core. The output does not depend
    /// on it.
    pub threads: usize,
    /// Keep a ReadyToRun image's precompiled code (see
    /// [`ImageWriter::keep_ready_to_run`]).
    pub keep_ready_to_run: bool,
    /// Keep every original body's bytes where they are: relocated bodies all go to the
    /// relocation area instead of the space old bodies leave (see
    /// [`ImageWriter::reuse_freed_space`]).
    pub keep_old_bodies: bool,
    /// Probes to call at entry and exit, by name (they override the transform options'
    /// prologue and epilogue; for the wrap transforms, they are the code at entry and in the
    /// finally handler). A probe the transform does not call
    /// ([`Transform::runs_entry_code`], [`Transform::runs_exit_code`]) is ignored: no
    /// metadata is added for it.
    pub probes: Probes,
}

/// The probes of a rewrite.
#[derive(Clone, Debug, Default)]
pub struct Probes {
    /// Called at method entry.
    pub entry: Option<ResolvedProbe>,
    /// Called at every exit (before each return; in the finally handler for `wrap-finally`).
    pub exit: Option<ResolvedProbe>,
}

impl RewriteOptions {
    /// The transform with this CLI name (see [`Transform::by_name`]) on every method, with
    /// default transform and layout options, on every core.
    pub fn new(transform_name: &str) -> Option<RewriteOptions> {
        Some(RewriteOptions {
            transform: Transform::by_name(transform_name)?,
            transform_opts: TransformOptions::default(),
            layout: LayoutOptions::default(),
            methods: None,
            max_listed: 0,
            threads: 0,
            keep_ready_to_run: false,
            keep_old_bodies: false,
            probes: Probes::default(),
        })
    }
}

/// One method that was not rewritten, and why.
#[derive(Clone, Debug, Serialize)]
pub struct NotRewritten {
    /// The method's full name (empty when it cannot be read).
    pub method: String,
    /// MethodDef token, `0x06xxxxxx`.
    pub token: String,
    /// Why: the decode error, the skip reason, the verifier's rule or the writer's error.
    pub reason: String,
}

/// One method the transform skipped, and why.
#[derive(Clone, Debug, Serialize)]
pub struct SkippedMethod {
    /// The method's full name (empty when it cannot be read).
    pub method: String,
    /// MethodDef token, `0x06xxxxxx`.
    pub token: String,
    /// The transform's reason, e.g. `TailCallInsideER`.
    pub reason: String,
    /// Bytes of IL of its body, left as they were.
    pub il_bytes: u64,
}

/// The rewrite report. Schema: `docs/rewrite-json.md`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RewriteReport {
    /// `ilcheck.rewrite/1`.
    pub schema: &'static str,
    /// The assembly rewritten.
    pub input: String,
    /// Where the patched assembly goes.
    pub output: String,
    /// The transform's CLI name.
    pub transform: String,
    /// MethodDefs with a body that the `--methods` pattern selects.
    pub selected: u64,
    /// Methods whose body the transform changed (and that were written).
    pub rewritten: u64,
    /// Methods the transform left as they were (their laid-out bytes may still differ from the
    /// original, e.g. a non-canonical header; those are written too and counted in `rewritten`).
    pub unchanged: u64,
    /// Methods the transform skipped, by reason.
    pub skipped: BTreeMap<String, u64>,
    /// Bytes of IL of the methods skipped, by reason: how much code the transform did not
    /// reach.
    pub skipped_il_bytes: BTreeMap<String, u64>,
    /// The first methods skipped (up to [`RewriteOptions::max_listed`]), in rid order.
    pub skipped_methods: Vec<SkippedMethod>,
    /// Rewrites the verifier rejected, by rule: never written. A rewriter bug if the original
    /// verified.
    pub rejected: BTreeMap<String, u64>,
    /// Methods whose original body does not decode or has a structural finding of the class
    /// invalid: left alone.
    pub invalid_before: u64,
    /// The first methods not rewritten (up to [`RewriteOptions::max_listed`]), in rid order.
    pub listed: Vec<NotRewritten>,
    /// Bytes of IL of the selected methods that decoded, before the rewrite.
    pub il_bytes_in: u64,
    /// Bytes of IL of the same methods after it: rewritten, unchanged, or left as they were
    /// (skipped, invalid before, rejected).
    pub il_bytes_out: u64,
    /// Lift, transform, layout with relaxation, max stack and verification of every selected
    /// method (wall time, on `threads` threads).
    pub rewrite_seconds: f64,
    /// Building the patched image.
    pub write_seconds: f64,
    /// The writer's summary, once the patched image is built.
    pub write: Option<WriteSummary>,
    /// Threads that rewrote methods.
    pub threads: usize,
    /// Methods written with a new local signature: their locals and one for the return value
    /// (the wrap transforms, or an exit probe taking the return value, for a non-void method
    /// without a spare local). A method whose transform did not use the planned local is not
    /// counted.
    pub locals_added: u64,
    /// Of those, methods that had no locals and got InitLocals with their first.
    pub init_locals_set: u64,
    /// Metadata rows the rewrite added (StandAloneSig, TypeRef, …).
    pub metadata_rows_added: u64,
}

impl RewriteReport {
    /// Throughput: MB/s (10^6 bytes) of input IL over the rewrite and write times together.
    pub fn mb_per_s(&self) -> f64 {
        let s = self.rewrite_seconds + self.write_seconds;
        if s > 0.0 {
            self.il_bytes_in as f64 / s / 1e6
        } else {
            0.0
        }
    }

    /// True when nothing was rejected by the verifier.
    pub fn ok(&self) -> bool {
        self.rejected.is_empty()
    }
}

/// The local that holds a method's return value for a transform: one the method declares and
/// never uses, or one added with a new local signature.
#[derive(Clone, Copy, Debug)]
struct ReturnLocal {
    index: u16,
    /// The new local count and signature, when the local is added.
    added: Option<(u32, NewLocals)>,
}

/// A method's probe calls: the code at entry, and at exit (or why the exit probe cannot be
/// called there, so the method is skipped), as ranges of [`EmitPlan::probe_code`].
#[derive(Clone, Debug)]
struct ProbeCalls {
    entry: std::ops::Range<usize>,
    exit: Result<std::ops::Range<usize>, SkipReason>,
    /// The exit code reads the return value from the local, where the epilogue copies it
    /// ([`TransformOptions::store_return`]).
    store_return: bool,
}

/// Metadata a rewrite adds, planned (in rid order, on one thread) before any method is
/// rewritten, so every thread sees the same tokens: for the wrap transforms, and for an exit
/// probe that takes the return value, the local that holds it (a new local signature for each
/// non-void method without a spare local); the `System.Exception` TypeRef when `wrap-catch`
/// was given no catch type and the assembly has none; the probes' references, literals and
/// boxing types.
struct EmitPlan<'i, 'a> {
    builder: MetadataBuilder<'i, 'a>,
    /// Per MethodDef rid (index 0 unused): the local that holds the return value.
    locals: Vec<Option<ReturnLocal>>,
    additions: Option<Additions>,
    catch_type: u32,
    /// Per MethodDef rid: the entry and exit probe calls, with their arguments.
    probe_calls: Vec<Option<ProbeCalls>>,
    /// The code of every method's probe calls, one after the other.
    probe_code: Vec<Instr>,
}

/// A plan's memory between images (see [`crate::image::emit::EmitBuffers`]).
#[derive(Debug, Default)]
struct PlanBuffers {
    emit: crate::image::emit::EmitBuffers,
    locals: Vec<Option<ReturnLocal>>,
    probe_calls: Vec<Option<ProbeCalls>>,
    probe_code: Vec<Instr>,
}

impl<'i, 'a> EmitPlan<'i, 'a> {
    fn new(
        image: &'i Image<'a>,
        opts: &RewriteOptions,
        buffers: PlanBuffers,
    ) -> Result<Self, EmitError> {
        let PlanBuffers {
            emit,
            mut locals,
            mut probe_calls,
            mut probe_code,
        } = buffers;
        locals.clear();
        probe_calls.clear();
        probe_code.clear();
        let mut plan = EmitPlan {
            builder: MetadataBuilder::with_buffers(image, emit),
            locals,
            additions: None,
            catch_type: opts.transform_opts.catch_type,
            probe_calls,
            probe_code,
        };
        let with_body = || image.methods().filter(|m| m.rva() != 0);
        let wraps = opts.transform.wraps();
        if opts.transform == Transform::WrapCatch
            && plan.catch_type == 0
            && with_body().next().is_some()
        {
            plan.catch_type = match crate::ir::transforms::find_exception_type(image) {
                Some(t) => t,
                // Left at 0 when there is none: each method is skipped with NoCatchType, and
                // says so.
                None => match CoreTypes::of(image) {
                    Some(core) => core
                        .system_type(&mut plan.builder, "Exception")?
                        .map_or(0, |t| t.0),
                    None => 0,
                },
            };
        }
        let exit_takes_value = opts
            .probes
            .exit
            .as_ref()
            .is_some_and(|p| p.args.contains(&ProbeArg::ReturnValue));
        let needs_local = opts.transform_opts.return_local.is_none()
            && (wraps || (exit_takes_value && opts.transform.epilogue_before_ret()));
        if needs_local {
            plan.locals.resize(image.method_count() as usize + 1, None);
            for method in with_body() {
                if let Some(pattern) = &opts.methods
                    && !method.full_name().is_ok_and(|n| glob_match(pattern, &n))
                {
                    continue;
                }
                plan.locals[method.rid() as usize] = plan.return_local(image, &method, wraps)?;
            }
        }
        plan.plan_probes(image, opts)?;
        // A new local signature may be a row the image already has: nothing is added then,
        // but the rewritten bodies still need the new local count when they are verified.
        if !plan.builder.is_empty()
            || plan
                .locals
                .iter()
                .any(|l| l.is_some_and(|l| l.added.is_some()))
        {
            plan.additions = Some(plan.builder.additions());
        }
        Ok(plan)
    }

    /// The plan's memory, for the next image.
    fn into_buffers(self) -> PlanBuffers {
        let emit = self.builder.into_buffers();
        PlanBuffers {
            emit,
            locals: self.locals,
            probe_calls: self.probe_calls,
            probe_code: self.probe_code,
        }
    }

    /// The probe calls of every selected method: a reference to each probe, and per method
    /// its arguments (a string literal of its name, its token, its arguments, its return
    /// value) and the call.
    fn plan_probes(&mut self, image: &Image<'_>, opts: &RewriteOptions) -> Result<(), EmitError> {
        use crate::ir::transforms::{as_object, fits_object, ldloc, return_value_bytes};
        const VOID: u8 = 0x01;
        // A probe the transform never calls gets no reference: nothing would use it.
        let entry = opts
            .probes
            .entry
            .as_ref()
            .filter(|_| opts.transform.runs_entry_code());
        let exit = opts
            .probes
            .exit
            .as_ref()
            .filter(|_| opts.transform.runs_exit_code());
        if entry.is_none() && exit.is_none() {
            return Ok(());
        }
        let entry = match entry {
            Some(p) => Some((p, self.builder.probe_ref(p)?)),
            None => None,
        };
        let exit = match exit {
            Some(p) => Some((p, self.builder.probe_ref(p)?)),
            None => None,
        };
        self.probe_calls
            .resize(image.method_count() as usize + 1, None);
        // For probes taking the arguments or the return value: System.Object and the core
        // library, for the array and for boxing primitives.
        let takes = |arg: ProbeArg| {
            [entry, exit]
                .iter()
                .flatten()
                .any(|(p, _)| p.args.contains(&arg))
        };
        let core = if takes(ProbeArg::Arguments) || takes(ProbeArg::ReturnValue) {
            CoreTypes::of(image)
        } else {
            None
        };
        let object = match core {
            Some(c) if takes(ProbeArg::Arguments) => c.system_type(&mut self.builder, "Object")?,
            _ => None,
        };
        // Before each `ret` the value is on the stack, and is kept in the local first; in a
        // handler it is in the local already.
        let before_ret = opts.transform.epilogue_before_ret();
        if takes(ProbeArg::MethodName) {
            // A name per method: mono 4.5's average 86 characters (175 bytes an entry). Room
            // to spare costs only address space; too little copies the heap as it doubles.
            self.builder
                .reserve_user_strings(image.method_count() as usize, 96);
        }
        let (mut names, mut name) = (
            crate::image::FullNames::with_capacity(image.method_count() as usize),
            String::new(),
        );
        let mut literals =
            crate::image::emit::MethodNameLiterals::with_capacity(image.method_count() as usize);
        for method in image.methods().filter(|m| m.rva() != 0) {
            let parts = method.full_name_parts(&mut names);
            if let Some(pattern) = &opts.methods {
                let named = parts.as_ref().is_ok_and(|p| {
                    name.clear();
                    name.extend([p.prefix, p.name, p.params]);
                    glob_match(pattern, &name)
                });
                if !named {
                    continue;
                }
            }
            let local = opts.transform_opts.return_local.or_else(|| {
                self.locals
                    .get(method.rid() as usize)
                    .copied()
                    .flatten()
                    .map(|l| l.index)
            });
            let mut store_return = false;
            // Both probes pass the same literal: it is interned once.
            let mut literal = None;
            let builder = &mut self.builder;
            let code = &mut self.probe_code;
            let mut call = |probe: Option<(&ResolvedProbe, Token)>|
             -> Result<Result<std::ops::Range<usize>, SkipReason>, EmitError> {
                let start = code.len();
                let Some((p, token)) = probe else {
                    return Ok(Ok(start..start));
                };
                for arg in &p.args {
                    code.push(match arg {
                        ProbeArg::MethodName => {
                            let token = match (literal, &parts) {
                                (Some(t), _) => t,
                                (None, Ok(parts)) => {
                                    *literal.insert(literals.literal(builder, parts)?)
                                }
                                // A name that does not read: the token's text.
                                (None, Err(_)) => *literal
                                    .insert(builder.user_string(&method.token().to_string())?),
                            };
                            Instr::new(Opcode::Ldstr, Operand::Token(token.0))
                        }
                        ProbeArg::MethodToken => {
                            Instr::new(Opcode::Ldc_I4, Operand::Int32(method.token().0 as i32))
                        }
                        ProbeArg::Arguments => {
                            let array = match (core, object, method.signature_blob()) {
                                (Some(core), Some(object), Ok(sig)) => {
                                    crate::ir::transforms::arguments_array(
                                        builder,
                                        core,
                                        object,
                                        sig,
                                    )?
                                }
                                _ => None,
                            };
                            match array {
                                Some(array) => {
                                    code.extend(array);
                                    continue;
                                }
                                // Arguments that do not read: none, rather than a guess.
                                None => Instr::op(Opcode::Ldnull),
                            }
                        }
                        ProbeArg::ReturnValue => {
                            let ret = return_value_bytes(&method);
                            let Some(ret) = ret else {
                                code.truncate(start);
                                return Ok(Err(SkipReason::NeedsSignature));
                            };
                            if ret == [VOID] || !fits_object(ret) {
                                Instr::op(Opcode::Ldnull)
                            } else {
                                let (Some(core), Some(local)) = (core, local) else {
                                    code.truncate(start);
                                    return Ok(Err(SkipReason::NeedsNewLocal));
                                };
                                match as_object(builder, core, ret, ldloc(local))? {
                                    Some(value) => {
                                        code.extend(value);
                                        store_return = before_ret;
                                        continue;
                                    }
                                    None => Instr::op(Opcode::Ldnull),
                                }
                            }
                        }
                    });
                }
                code.push(Instr::new(Opcode::Call, Operand::Token(token.0)));
                Ok(Ok(start..code.len()))
            };
            let calls = ProbeCalls {
                // Entry probes take no return value, so never skip.
                entry: call(entry)?.unwrap_or_default(),
                exit: call(exit)?,
                store_return,
            };
            self.probe_calls[method.rid() as usize] = Some(calls);
        }
        Ok(())
    }

    /// The local that holds `method`'s return value: none for a void method (or, when the
    /// value goes to a probe rather than across a `leave`, one no `object` holds), a spare
    /// one it declares, or a new one; none either when its body or signatures do not read
    /// (the transform then says why it skips).
    fn return_local(
        &mut self,
        image: &Image<'_>,
        method: &crate::image::Method<'_>,
        wraps: bool,
    ) -> Result<Option<ReturnLocal>, EmitError> {
        use crate::ir::transforms::{
            fits_object, locals_plus_one, return_value_bytes, spare_return_local,
        };
        const VOID: u8 = 0x01;
        let Some(ret) = return_value_bytes(method) else {
            return Ok(None);
        };
        if ret == [VOID] || (!wraps && !fits_object(ret)) {
            return Ok(None);
        }
        let Ok(body) = method.decoded_body() else {
            return Ok(None);
        };
        if let Some(index) = spare_return_local(image, method, &body) {
            return Ok(Some(ReturnLocal { index, added: None }));
        }
        let old = match Token(body.local_sig()) {
            t if t.is_null() => None,
            t if t.table() == Some(Table::StandAloneSig) => {
                let blob = image
                    .tables()
                    .standalone_sig(t.rid())
                    .and_then(|row| image.blobs().get(row.signature));
                match blob {
                    Ok(b) => Some(b),
                    Err(_) => return Ok(None),
                }
            }
            _ => return Ok(None),
        };
        let Some((blob, index)) = locals_plus_one(old, ret) else {
            return Ok(None);
        };
        let token = self.builder.standalone_sig(&blob)?;
        Ok(Some(ReturnLocal {
            index,
            added: Some((
                u32::from(index) + 1,
                NewLocals {
                    local_sig: token.0,
                    init_locals: old.is_none(),
                },
            )),
        }))
    }
}

/// `*` matches any run of characters, `?` any one.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti, mut star, mut mark) = (0, 0, None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

fn bump(map: &mut BTreeMap<String, u64>, key: &str) {
    *map.entry(key.to_string()).or_default() += 1;
}

/// The rule a failed rewrite broke: the verifier's code, or the stage that failed.
fn rule_of(err: &RewriteError) -> &'static str {
    match err {
        RewriteError::Layout(LayoutError::Invalid(d)) => d.code.as_str(),
        RewriteError::Layout(_) => "Layout",
        RewriteError::Lift(_) => "Lift",
        RewriteError::Skipped(reason) => reason.name(),
    }
}

/// Methods per unit of work handed to a thread: large enough that taking one is rare, small
/// enough that one big class does not leave the other threads idle at the end.
const CHUNK: usize = 256;

/// The threads to use: `requested`, or every available core for 0; never more than there are
/// chunks of work.
fn thread_count(requested: usize, methods: usize) -> usize {
    super::threads_for(requested)
        .min(methods.div_ceil(CHUNK))
        .max(1)
}

/// One rewritten method, its new body in [`Part::bodies`].
#[derive(Debug)]
struct Done {
    rid: u32,
    body: std::ops::Range<usize>,
    /// Whether the new body differs from the original bytes (only those are written).
    differs: bool,
    changed: bool,
    code_size: u32,
    /// The body names the local signature planned for it; `true` when that signature holds
    /// the method's first locals (InitLocals set with them).
    new_local: Option<bool>,
}

/// What one chunk of methods produced, merged in rid order afterwards.
#[derive(Debug, Default)]
struct Part {
    report: RewriteReport,
    /// (rid, entry) of listed methods, to be merged in rid order.
    listed: Vec<(u32, NotRewritten)>,
    /// (rid, entry) of listed skipped methods, to be merged in rid order.
    skipped: Vec<(u32, SkippedMethod)>,
    done: Vec<Done>,
    /// Original lengths of bodies that decoded, for the writer.
    lens: Vec<(u32, u32)>,
    bodies: Vec<u8>,
}

impl Part {
    /// Empties the part, keeping its memory.
    fn clear(&mut self) {
        self.report = RewriteReport::default();
        self.listed.clear();
        self.skipped.clear();
        self.done.clear();
        self.lens.clear();
        self.bodies.clear();
    }
}

/// One thread's rewriting machinery: lifter, editor and layout scratch, verifier.
/// Their buffers grow to the largest body seen and are kept from one method to the next, and,
/// in a [`RewriteScratch`], from one assembly to the next.
#[derive(Debug, Default)]
struct Engine {
    rewriter: Rewriter,
    verifier: Verifier,
}

/// The engines [`rewrite_image_with`] used, one per thread, and the image writer's buffers, for
/// the next call: a caller that patches many assemblies in a row keeps one per thread of its
/// own, and bodies stop paying for buffers growing again (and for fresh pages) in every
/// assembly.
#[derive(Debug, Default)]
pub struct RewriteScratch {
    engines: Vec<Engine>,
    writer: WriterBuffers,
    plan: PlanBuffers,
    /// The chunks' parts, once written: a part's memory freed after each image would be
    /// given back to the system and faulted in again by the next image's chunks.
    parts: Vec<Part>,
}

/// A thread's rewriting engine with the image it works on: buffers and caches kept from one
/// method to the next.
struct Worker<'i, 'o> {
    image: &'i Image<'i>,
    opts: &'o RewriteOptions,
    rewriter: Rewriter,
    verifier: Verifier,
    resolver: ImageResolver<'i>,
    topts: TransformOptions,
    /// Whether probes go in the wrap transforms' code (rather than the prologue and
    /// epilogue).
    wraps: bool,
    /// The locals that hold return values, planned for this rewrite, by rid.
    locals: &'o [Option<ReturnLocal>],
    /// What the plan added to the metadata, when anything.
    additions: Option<&'o Additions>,
    /// The probe calls by rid.
    probe_calls: &'o [Option<ProbeCalls>],
    /// The code the probe calls' ranges are of.
    probe_code: &'o [Instr],
}

impl<'i, 'o> Worker<'i, 'o> {
    fn new(
        image: &'i Image<'i>,
        opts: &'o RewriteOptions,
        plan: &'o EmitPlan<'_, '_>,
        engine: Engine,
    ) -> Self {
        let Engine { rewriter, verifier } = engine;
        let mut topts = opts.transform_opts.clone();
        topts.catch_type = plan.catch_type;
        Worker {
            image,
            opts,
            rewriter,
            verifier,
            resolver: ImageResolver::new(image),
            topts,
            wraps: opts.transform.wraps(),
            locals: &plan.locals,
            additions: plan.additions.as_ref(),
            probe_calls: &plan.probe_calls,
            probe_code: &plan.probe_code,
        }
    }

    /// The engine, for the next image.
    fn into_engine(self) -> Engine {
        Engine {
            rewriter: self.rewriter,
            verifier: self.verifier,
        }
    }

    fn list(&self, part: &mut Part, method: &crate::image::Method<'_>, reason: String) {
        if part.listed.len() < self.opts.max_listed {
            part.listed.push((
                method.rid(),
                NotRewritten {
                    method: method.full_name().unwrap_or_default(),
                    token: format!("{:#010x}", method.token().0),
                    reason,
                },
            ));
        }
    }

    /// Rewrites the selected methods among `rids`, into `part` (emptied first: its memory is
    /// an earlier chunk's).
    fn run(&mut self, rids: std::ops::Range<u32>, mut part: Part) -> Part {
        part.clear();
        // Bodies average well under 100 bytes: most chunks never grow this. Probes add their
        // instructions (~5 bytes each) at the entry and before each return (counted twice).
        let probes = 10 * self.probe_code.len() / self.probe_calls.len().max(1);
        part.bodies.reserve(rids.len() * (96 + probes));
        for rid in rids {
            let Ok(method) = self.image.method(rid) else {
                continue;
            };
            self.method(&method, &mut part);
        }
        part
    }

    fn method(&mut self, method: &crate::image::Method<'i>, part: &mut Part) {
        if method.rva() == 0 {
            return;
        }
        let opts = self.opts;
        if let Some(pattern) = &opts.methods
            && !method.full_name().is_ok_and(|n| glob_match(pattern, &n))
        {
            return;
        }
        part.report.selected += 1;
        let (body, original) = match method.decoded_body_and_bytes() {
            Ok(b) => b,
            Err(e) => {
                part.report.invalid_before += 1;
                self.list(part, method, format!("does not decode: {e}"));
                return;
            }
        };
        part.report.il_bytes_in += body.code.len() as u64;
        if let Ok(len) = u32::try_from(body.len()) {
            part.lens.push((method.rid(), len));
        }
        self.resolver.set_method(method, &body);
        // From the resolver's per-blob cache: the same blob as `method.signature()`.
        self.topts.returns_void = self.resolver.method().map(|s| s.returns_void);
        self.topts.return_local = opts.transform_opts.return_local;
        self.topts.new_locals = None;
        let mut skip = None;
        self.topts.store_return = false;
        if let Some(Some(calls)) = self.probe_calls.get(method.rid() as usize) {
            self.topts.store_return = calls.store_return;
            let (pro, epi) = if self.wraps {
                (&mut self.topts.wrap_entry, &mut self.topts.wrap_exit)
            } else {
                (&mut self.topts.prologue, &mut self.topts.epilogue)
            };
            if opts.probes.entry.is_some() {
                pro.clear();
                pro.extend_from_slice(&self.probe_code[calls.entry.clone()]);
            }
            if opts.probes.exit.is_some() {
                match &calls.exit {
                    Ok(code) => {
                        epi.clear();
                        epi.extend_from_slice(&self.probe_code[code.clone()]);
                    }
                    Err(reason) => skip = Some(reason.clone()),
                }
            }
        }
        // A probe in the assembly itself is not instrumented: its entry call would recurse.
        let own = crate::ir::Operand::Token(method.token().0);
        let t = &self.topts;
        let inserted = [&t.prologue, &t.epilogue, &t.wrap_entry, &t.wrap_exit];
        if inserted
            .iter()
            .flat_map(|code| code.iter())
            .any(|i| i.opcode.flow() == crate::opcode::Flow::Call && i.operand == own)
        {
            skip.get_or_insert(SkipReason::ProbeItself);
        }
        let mut locals = None;
        if self.topts.return_local.is_none()
            && let Some(Some(local)) = self.locals.get(method.rid() as usize)
        {
            self.topts.return_local = Some(local.index);
            if let Some((count, new)) = local.added {
                self.topts.new_locals = Some(new);
                locals = Some(count);
            }
        }
        // The new body goes straight after the chunk's other bodies (nothing is appended on
        // error) and is dropped again when it equals the original.
        let start = part.bodies.len();
        let (rewriter, topts, out) = (&mut self.rewriter, &self.topts, &mut part.bodies);
        let result = match self.additions {
            _ if let Some(reason) = skip => Err(RewriteError::Skipped(reason)),
            // Code that uses added metadata is verified knowing it.
            Some(additions) => {
                let resolver = EmitResolver {
                    inner: &self.resolver,
                    additions,
                    locals,
                };
                rewrite_one(rewriter, opts, topts, &body, &resolver, out)
            }
            None => rewrite_one(rewriter, opts, topts, &body, &self.resolver, out),
        };
        match result {
            Ok((outcome, info)) => {
                // A transform that planned a local may not use it (a `ret` after a `tail.`
                // call or a `jmp` gets no epilogue): only a header naming the new signature
                // counts.
                let new_local = self.topts.new_locals.filter(|new| {
                    crate::body::fat_local_sig(&part.bodies[start..]) == Some(new.local_sig)
                });
                let differs = part.bodies[start..] != *original;
                if !differs {
                    part.bodies.truncate(start);
                }
                // Counted once written (see `rewrite_image`).
                part.done.push(Done {
                    rid: method.rid(),
                    body: start..part.bodies.len(),
                    differs,
                    changed: outcome == crate::ir::Outcome::Changed,
                    code_size: info.code_size,
                    new_local: new_local.map(|new| new.init_locals),
                });
            }
            Err(RewriteError::Skipped(reason)) => {
                let bytes = body.code.len() as u64;
                // Written as it was: its IL is in the output.
                part.report.il_bytes_out += bytes;
                bump(&mut part.report.skipped, reason.name());
                *part
                    .report
                    .skipped_il_bytes
                    .entry(reason.name().to_string())
                    .or_default() += bytes;
                if part.skipped.len() < opts.max_listed {
                    part.skipped.push((
                        method.rid(),
                        SkippedMethod {
                            method: method.full_name().unwrap_or_default(),
                            token: format!("{:#010x}", method.token().0),
                            reason: reason.name().to_string(),
                            il_bytes: bytes,
                        },
                    ));
                }
            }
            Err(err) => {
                // A method that was invalid before is not the rewriter's fault.
                let before =
                    self.verifier
                        .verify(&body, &self.resolver, &crate::verify::Options::ALL);
                // Left as it was either way: its IL is in the output.
                part.report.il_bytes_out += body.code.len() as u64;
                if let Some(d) = before.iter().find(|d| d.code.verdict() == Verdict::Invalid) {
                    part.report.invalid_before += 1;
                    let why = format!(
                        "invalid before the rewrite: {} at IL_{:04x}",
                        d.code.as_str(),
                        d.offset
                    );
                    self.list(part, method, why);
                    return;
                }
                bump(&mut part.report.rejected, rule_of(&err));
                self.list(part, method, err.to_string());
            }
        }
    }
}

/// One body through the transform: spliced for the entry/exit transforms, through the IR
/// otherwise.
fn rewrite_one<R: Resolver + ?Sized>(
    rewriter: &mut Rewriter,
    opts: &RewriteOptions,
    topts: &TransformOptions,
    body: &crate::body::Body<'_>,
    resolver: &R,
    out: &mut Vec<u8>,
) -> Result<(crate::ir::Outcome, LayoutInfo), RewriteError> {
    rewriter.rewrite(body, opts.transform, topts, &opts.layout, resolver, out)
}

/// Adds a part's counters to the report.
fn merge_counts(into: &mut RewriteReport, part: &RewriteReport) {
    into.selected += part.selected;
    into.invalid_before += part.invalid_before;
    into.il_bytes_in += part.il_bytes_in;
    into.il_bytes_out += part.il_bytes_out;
    for (map, from) in [
        (&mut into.skipped, &part.skipped),
        (&mut into.skipped_il_bytes, &part.skipped_il_bytes),
        (&mut into.rejected, &part.rejected),
    ] {
        for (k, v) in from {
            *map.entry(k.clone()).or_default() += v;
        }
    }
}

/// Rewrites every selected method of `image` and builds the patched image.
///
/// Methods are rewritten on [`RewriteOptions::threads`] threads, in chunks taken in rid order;
/// the results are merged in rid order, so the output and the report (but for its timings)
/// are the same for any number of threads.
pub fn rewrite_image(
    image: &Image<'_>,
    opts: &RewriteOptions,
    report: &mut RewriteReport,
) -> Result<Vec<u8>, WriteError> {
    let mut out = Vec::new();
    rewrite_image_into(image, opts, report, &mut out)?;
    Ok(out)
}

/// [`rewrite_image`] into `out`, whose contents are replaced: a caller patching many
/// assemblies can reuse its buffers (and their memory) from one to the next.
pub fn rewrite_image_into(
    image: &Image<'_>,
    opts: &RewriteOptions,
    report: &mut RewriteReport,
    out: &mut Vec<u8>,
) -> Result<(), WriteError> {
    rewrite_image_with(image, opts, report, out, &mut RewriteScratch::default())
}

/// [`rewrite_image_into`] with the rewriting engines (lifter, layout, verifier and their
/// buffers) and the image writer's buffers taken from `scratch` and left there for the next
/// call. The output and the report are those of [`rewrite_image_into`].
pub fn rewrite_image_with(
    image: &Image<'_>,
    opts: &RewriteOptions,
    report: &mut RewriteReport,
    out: &mut Vec<u8>,
    scratch: &mut RewriteScratch,
) -> Result<(), WriteError> {
    rewrite_image_to(image, opts, report, Sink::Memory(out), scratch)
}

/// [`rewrite_image_with`] into `file`, an empty file open for reading and writing, through
/// [`ImageWriter::finish_to_file_with`]: for an image too large to copy into memory (the unchanged
/// parts of an image opened from a file are copied file to file). The file's bytes are those
/// [`rewrite_image_with`] gives; on error they are unspecified.
#[cfg(unix)]
pub fn rewrite_image_to_file(
    image: &Image<'_>,
    opts: &RewriteOptions,
    report: &mut RewriteReport,
    file: &std::fs::File,
    scratch: &mut RewriteScratch,
) -> Result<(), WriteError> {
    rewrite_image_to(image, opts, report, Sink::File(file), scratch)
}

/// Where a rewritten image goes.
enum Sink<'o> {
    Memory(&'o mut Vec<u8>),
    #[cfg(unix)]
    File(&'o std::fs::File),
}

fn rewrite_image_to(
    image: &Image<'_>,
    opts: &RewriteOptions,
    report: &mut RewriteReport,
    out: Sink<'_>,
    scratch: &mut RewriteScratch,
) -> Result<(), WriteError> {
    report.schema = "ilcheck.rewrite/1";
    report.transform = opts.transform.name().to_string();
    let rows = image.method_count();
    let chunks = (rows as usize).div_ceil(CHUNK);
    let threads = thread_count(opts.threads, rows as usize);
    report.threads = threads;
    let chunk_rids = |k: usize| {
        let first = (k * CHUNK) as u32 + 1;
        first..(first + CHUNK as u32).min(rows + 1)
    };
    let start = Instant::now();
    let owned = EmitPlan::new(image, opts, std::mem::take(&mut scratch.plan))?;
    let plan = &owned;
    let mut parts: Vec<(usize, Part)> = if threads == 1 {
        let mut worker = Worker::new(image, opts, plan, scratch.engines.pop().unwrap_or_default());
        let spare = &mut scratch.parts;
        let parts = (0..chunks)
            .map(|k| {
                (
                    k,
                    worker.run(chunk_rids(k), spare.pop().unwrap_or_default()),
                )
            })
            .collect();
        scratch.engines.push(worker.into_engine());
        parts
    } else {
        let next = std::sync::atomic::AtomicUsize::new(0);
        let engines = std::sync::Mutex::new(std::mem::take(&mut scratch.engines));
        let spare = std::sync::Mutex::new(std::mem::take(&mut scratch.parts));
        let take = || engines.lock().ok().and_then(|mut e| e.pop());
        let take_part = || {
            spare
                .lock()
                .ok()
                .and_then(|mut p| p.pop())
                .unwrap_or_default()
        };
        let work = || {
            let mut worker = Worker::new(image, opts, plan, take().unwrap_or_default());
            let mut done = Vec::new();
            loop {
                let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if k >= chunks {
                    break;
                }
                done.push((k, worker.run(chunk_rids(k), take_part())));
            }
            if let Ok(mut e) = engines.lock() {
                e.push(worker.into_engine());
            }
            done
        };
        let parts = std::thread::scope(|s| {
            let others: Vec<_> = (1..threads).map(|_| s.spawn(work)).collect();
            let mut all = work();
            for h in others {
                // A panicking worker is a bug: re-raise it here rather than lose its methods.
                all.extend(h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)));
            }
            all
        });
        scratch.engines = engines.into_inner().unwrap_or_default();
        scratch.parts = spare.into_inner().unwrap_or_default();
        parts
    };
    parts.sort_unstable_by_key(|(k, _)| *k);

    let mut writer = ImageWriter::with_buffers(image, std::mem::take(&mut scratch.writer));
    writer.keep_ready_to_run(opts.keep_ready_to_run);
    writer.reuse_freed_space(!opts.keep_old_bodies);
    writer.reserve(parts.iter().map(|(_, p)| p.bodies.len()).sum());
    let mut listed = Vec::new();
    let mut skipped = Vec::new();
    let mut rewritten = 0u64;
    for (_, mut part) in parts {
        merge_counts(report, &part.report);
        skipped.append(&mut part.skipped);
        for &(rid, len) in &part.lens {
            writer.original_len(rid, len as usize);
        }
        listed.append(&mut part.listed);
        for d in &part.done {
            let written = if d.differs {
                writer.replace_laid_out_body(d.rid, &part.bodies[d.body.clone()])
            } else {
                Ok(())
            };
            if let Err(e) = written {
                bump(&mut report.rejected, "WriteError");
                if let Ok(method) = image.method(d.rid) {
                    listed.push((
                        d.rid,
                        NotRewritten {
                            method: method.full_name().unwrap_or_default(),
                            token: format!("{:#010x}", method.token().0),
                            reason: e.to_string(),
                        },
                    ));
                }
                continue;
            }
            if d.changed {
                report.rewritten += 1;
                rewritten += 1;
            } else {
                report.unchanged += 1;
            }
            report.il_bytes_out += u64::from(d.code_size);
            if let Some(first) = d.new_local {
                report.locals_added += 1;
                report.init_locals_set += u64::from(first);
            }
        }
        scratch.parts.push(part);
    }
    listed.sort_by_key(|(rid, _)| *rid);
    listed.truncate(opts.max_listed);
    report.listed.extend(listed.into_iter().map(|(_, n)| n));
    // Each chunk listed its first; the first of the whole image are among them.
    skipped.sort_by_key(|(rid, _)| *rid);
    skipped.truncate(opts.max_listed);
    report
        .skipped_methods
        .extend(skipped.into_iter().map(|(_, n)| n));
    report.rewrite_seconds += start.elapsed().as_secs_f64();
    let start = Instant::now();
    // The additions are for the rewritten bodies: with none written (every method skipped,
    // rejected or left unchanged), the output carries no metadata that nothing uses.
    let add_metadata = !plan.builder.is_empty() && rewritten > 0;
    if add_metadata {
        report.metadata_rows_added = Table::ALL
            .iter()
            .map(|&t| u64::from(plan.builder.rows(t) - image.tables_header().rows(t)))
            .sum();
    }
    // The metadata is laid out, then written straight into the image (no root of its own).
    let prepared = if !add_metadata {
        None
    } else {
        Some(plan.builder.prepare()?)
    };
    let metadata = prepared
        .as_ref()
        .map(|m| m as &dyn crate::image::writer::NewMetadata);
    let finished = match out {
        Sink::Memory(out) => writer.finish_into_with(out, metadata),
        #[cfg(unix)]
        Sink::File(file) => writer.finish_to_file_with(file, metadata),
    };
    if let Some(prepared) = prepared {
        prepared.recycle();
    }
    scratch.writer = writer.into_buffers();
    scratch.plan = owned.into_buffers();
    let (summary, _) = finished?;
    report.write_seconds += start.elapsed().as_secs_f64();
    report.write = Some(summary);
    Ok(())
}
