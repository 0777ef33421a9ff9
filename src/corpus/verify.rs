//! Verification runs: every method of every input checked by the structural verifier, with its
//! own metadata as the resolver; optionally only what is new against baseline assemblies, and
//! then also each changed method aligned with its original ([`crate::verify::Aligner`]) for
//! branches and clause boundaries that moved.

use super::types::{TypeLevel, TypePass, TypeSummary};
use super::{Input, Skipped};
use crate::body::Body;
use crate::image::{Image, ImageError, Method, integrity};
use crate::verify::types::ModuleStore;
use crate::verify::{Aligner, ImageResolver, Unchecked, Verifier};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

/// Code of a finding for a body whose header or sections do not decode (not a verifier rule:
/// the verifier never sees such a body).
pub const BODY_MALFORMED: &str = "BodyMalformed";

/// One finding of a verification run.
#[derive(Clone, Debug, Serialize)]
pub struct Finding {
    /// The input's name ([`Input::name`]).
    pub assembly: String,
    /// The method's full name; empty for an image-level finding.
    pub method: String,
    /// MethodDef token, `0x06xxxxxx`; empty for an image-level finding.
    pub token: String,
    /// IL offset (for [`BODY_MALFORMED`]: byte offset from the start of the body; for an
    /// image-level finding: file offset).
    pub offset: u32,
    /// The verifier's stable code name, [`BODY_MALFORMED`], or an
    /// [`IntegrityCode`](crate::image::IntegrityCode) name for an image-level finding.
    pub code: String,
    /// What is wrong, in words.
    pub message: String,
    /// With `--baseline`: why the method's match to the original is uncertain (matched by token
    /// while the names differ or cannot be read), so the finding may not be new.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline_match: Option<String>,
    /// Disassembly around the offset (not serialised).
    #[serde(skip)]
    pub window: String,
}

impl Finding {
    /// Whether the finding concerns the image rather than one method.
    pub fn is_image_level(&self) -> bool {
        self.token.is_empty()
    }
}

/// The verification report. The JSON schema is documented in `docs/verify-json.md`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct VerifyReport {
    /// `ilcheck.verify/1`, set by [`verify`].
    pub schema: &'static str,
    /// What was read: the paths given, or the default corpus's parts.
    pub sources: Vec<String>,
    /// Images read.
    pub assemblies: u64,
    /// Files found while scanning a directory that are not .NET assemblies (native PE files,
    /// other files named `.dll`). With `--strict` they fail the run.
    pub skipped: Vec<Skipped>,
    /// Inputs that could not be read: a named file that is not a readable .NET assembly, a
    /// corrupt assembly, an entry that cannot be opened or listed. Any of them fails the run.
    pub image_errors: Vec<Skipped>,
    /// MethodDefs with a body (RVA ≠ 0), including those whose body does not decode.
    pub methods_checked: u64,
    /// Methods with at least one finding reported (after the baseline's suppression).
    pub methods_with_errors: u64,
    /// Methods some of whose paths could not be followed because a call's signature did not
    /// resolve; checked as far as known, never guessed.
    pub methods_incomplete: u64,
    /// Bytes of IL verified (bodies that decoded).
    pub il_bytes: u64,
    /// Time spent verifying (resolver set-up and rules), single thread.
    pub verify_seconds: f64,
    /// Baseline assemblies read, when `--baseline` was given.
    pub baseline_assemblies: u64,
    /// Findings present in the baseline too, and so not reported.
    pub baseline_suppressed: u64,
    /// Methods with findings matched to the original by token only (names differ or cannot be
    /// read); their findings that are still reported are marked with the reason.
    pub baseline_uncertain: u64,
    /// Assemblies verified with a baseline given that had no original of the same file name:
    /// every finding of theirs is reported as new.
    pub baseline_missing: Vec<String>,
    /// With `--baseline`: what aligning changed methods with their originals compared.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alignment: Option<AlignmentSummary>,
    /// What the type pass checked, when it ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub types: Option<TypeSummary>,
    /// Findings reported, image-level ones included (all of them, listed or not).
    pub findings_total: u64,
    /// The first findings, up to [`VerifyOptions::max_findings`].
    pub findings: Vec<Finding>,
}

impl VerifyReport {
    /// Verification throughput: MB/s (10^6 bytes) of IL.
    pub fn mb_per_s(&self) -> f64 {
        if self.verify_seconds > 0.0 {
            self.il_bytes as f64 / self.verify_seconds / 1e6
        } else {
            0.0
        }
    }

    /// No finding, and every input was read.
    pub fn clean(&self) -> bool {
        self.findings_total == 0 && self.image_errors.is_empty()
    }
}

/// What aligning patched methods with their originals compared (with `--baseline`). Every
/// method counted in `methods_compared` is counted once more, in exactly one of
/// `methods_identical`, `methods_without_targets`, `methods_aligned`, `methods_in_part` and
/// `methods_not_aligned`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct AlignmentSummary {
    /// Patched methods with a body whose original (same assembly file name; by token, then by
    /// unique name) has a body too.
    pub methods_compared: u64,
    /// Methods whose code and clauses are the original's byte for byte: nothing to align.
    pub methods_identical: u64,
    /// Methods whose original has no branch, `leave`, `switch` or clause: nothing to compare.
    pub methods_without_targets: u64,
    /// Methods aligned with every branch target and clause boundary of the original compared.
    pub methods_aligned: u64,
    /// Methods aligned in part: a stretch left unaligned, or targets or boundaries not
    /// compared (counted in `unchecked`).
    pub methods_in_part: u64,
    /// Methods not aligned at all (counted by reason in `not_aligned`).
    pub methods_not_aligned: u64,
    /// Branch, `leave` and `switch` targets of originals compared.
    pub targets_checked: u64,
    /// Clause boundaries of originals compared.
    pub boundaries_checked: u64,
    /// Methods not aligned, by [`Unchecked`] reason.
    pub not_aligned: BTreeMap<&'static str, u64>,
    /// In the methods aligned in part: stretches, targets and boundaries not compared, by
    /// [`Unchecked`] reason.
    pub unchecked: BTreeMap<&'static str, u64>,
    /// Time spent aligning (decoding both bodies and matching methods included), single
    /// thread.
    pub seconds: f64,
}

impl AlignmentSummary {
    fn not_aligned(&mut self, why: Unchecked) {
        self.methods_not_aligned += 1;
        *self.not_aligned.entry(why.as_str()).or_default() += 1;
    }
}

/// Options of a verification run.
#[derive(Clone, Copy, Debug)]
pub struct VerifyOptions {
    /// How many findings are listed (all are counted).
    pub max_findings: usize,
    /// Instructions shown on each side of a finding.
    pub window: usize,
    /// Which type findings are reported ([`TypeLevel::Off`]: no type pass).
    pub types: TypeLevel,
}

impl Default for VerifyOptions {
    fn default() -> Self {
        VerifyOptions {
            max_findings: 200,
            window: 3,
            types: TypeLevel::Off,
        }
    }
}

/// Findings of one method (or of the image), by code: what a patched method's findings are
/// compared against.
type CodeCounts = HashMap<String, u32>;

/// Findings of baseline assemblies, by assembly file name, then by MethodDef token and by full
/// name.
#[derive(Default)]
pub struct Baseline {
    assemblies: HashMap<String, BaselineAssembly>,
    /// Baseline assemblies read.
    pub assemblies_read: u64,
}

#[derive(Default)]
struct BaselineAssembly {
    /// Where the original image is, for the bodies alignment compares with (opened again while
    /// its patched assembly is verified, so that only one original is open at a time).
    original: Option<Input>,
    /// Every method with a body, by token: its name (None when unreadable) and findings.
    by_token: HashMap<u32, (Option<String>, CodeCounts)>,
    /// Methods with readable names, by name (a name several methods share maps to none).
    by_name: HashMap<String, Option<u32>>,
    /// Image-level findings.
    image: CodeCounts,
}

/// How a patched method was matched to its original.
enum Match {
    /// Same token and same readable name, or the same unique name at another token (the
    /// original's token).
    Certain(CodeCounts, u32),
    /// The same token, but the names differ or one cannot be read.
    Uncertain(CodeCounts, String),
    /// No original: the method is new.
    None,
}

fn file_name(input: &Input) -> String {
    match input {
        Input::File { path, .. } => path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        Input::Embedded { name, .. } => name.rsplit('/').next().unwrap_or(name).to_string(),
    }
}

fn counts<'c>(codes: impl IntoIterator<Item = &'c str>) -> CodeCounts {
    let mut counts = CodeCounts::new();
    for code in codes {
        *counts.entry(code.to_string()).or_default() += 1;
    }
    counts
}

impl Baseline {
    /// Verifies the original assemblies and keeps their findings. A baseline that cannot be
    /// read is an error: comparing against nothing would report everything as new.
    pub fn load(inputs: &[Input]) -> Result<Baseline, String> {
        Self::load_with(inputs, None)
    }

    /// [`Baseline::load`], the originals' type findings counted too when `types` is given
    /// (at its level, so patched and original are compared alike).
    pub fn load_with(
        inputs: &[Input],
        mut types: Option<&mut TypePass<'_>>,
    ) -> Result<Baseline, String> {
        let mut baseline = Baseline::default();
        let mut verifier = Verifier::new();
        for input in inputs {
            let image = input
                .open()
                .map_err(|e| format!("baseline {}: {e}", input.name()))?;
            let mut assembly = BaselineAssembly {
                image: counts(integrity::check(&image).iter().map(|f| f.code.name())),
                ..Default::default()
            };
            let typed = types
                .as_deref_mut()
                .map(|pass| type_findings(pass, input, &image))
                .unwrap_or_default();
            for_each_method_findings(&image, &mut verifier, |method, mut findings| {
                if let Some(t) = typed.get(&method.token().0) {
                    findings.extend(t.iter().map(|c| (c.as_str(), 0, String::new())));
                }
                let name = method.full_name().ok();
                let counts = counts(findings.iter().map(|f| f.0));
                if let Some(n) = &name {
                    assembly
                        .by_name
                        .entry(n.clone())
                        .and_modify(|t| *t = None)
                        .or_insert(Some(method.token().0));
                }
                assembly.by_token.insert(method.token().0, (name, counts));
            });
            assembly.original = Some(input.clone());
            baseline.assemblies.insert(file_name(input), assembly);
            baseline.assemblies_read += 1;
        }
        Ok(baseline)
    }

    /// The original of a patched method: by token first (rewriters keep MethodDef tokens), by
    /// unique full name when the token's name differs (a renumbered method).
    fn match_for(&self, a: &BaselineAssembly, token: u32, name: Option<&str>) -> Match {
        let by_name = |n: &str| {
            let t = a.by_name.get(n).copied().flatten()?;
            a.by_token
                .get(&t)
                .map(|(_, c)| Match::Certain(c.clone(), t))
        };
        match (a.by_token.get(&token), name) {
            (Some((Some(old), counts)), Some(new)) if old == new => {
                Match::Certain(counts.clone(), token)
            }
            (Some((old, counts)), new) => {
                if let Some(m) = new.and_then(by_name) {
                    return m;
                }
                let why = match (old, new) {
                    (Some(old), Some(_)) => format!("matched by token; the original was {old}"),
                    (None, _) => "matched by token; the original's name cannot be read".into(),
                    (_, None) => "matched by token; the name cannot be read".into(),
                };
                Match::Uncertain(counts.clone(), why)
            }
            (None, Some(new)) => by_name(new).unwrap_or(Match::None),
            (None, None) => Match::None,
        }
    }
}

/// The type findings of every method of `image` the structural verifier accepts, by token.
fn type_findings(
    pass: &mut TypePass<'_>,
    input: &Input,
    image: &Image<'_>,
) -> HashMap<u32, Vec<crate::verify::Code>> {
    let work: Vec<(Method<'_>, Result<Body<'_>, ImageError>)> = image
        .methods()
        .filter(|m| m.rva() != 0)
        .map(|m| (m, m.decoded_body()))
        .collect();
    let mut verifier = Verifier::new();
    let mut resolver = ImageResolver::new(image);
    let accepted: Vec<bool> = work
        .iter()
        .map(|(m, b)| match b {
            Ok(b) => {
                resolver.set_method(m, b);
                verifier.verify(b, &resolver).is_empty()
            }
            Err(_) => false,
        })
        .collect();
    let mut out: HashMap<u32, Vec<crate::verify::Code>> = HashMap::new();
    let mut summary = TypeSummary::default();
    pass.run(
        image,
        input_path(input),
        &work,
        |k| accepted[k],
        &mut summary,
        |k, code, _, _| out.entry(work[k].0.token().0).or_default().push(code),
    );
    out
}

/// The file an input was read from, when it is one.
fn input_path(input: &Input) -> Option<&std::path::Path> {
    match input {
        Input::File { path, .. } => Some(path),
        Input::Embedded { .. } => None,
    }
}

/// Calls `f` with each method that has a body and its findings as (code, IL offset, message).
/// Bodies that do not decode give one [`BODY_MALFORMED`] finding.
fn for_each_method_findings(
    image: &Image<'_>,
    verifier: &mut Verifier,
    mut f: impl FnMut(&Method<'_>, Vec<(&str, u32, String)>),
) {
    let mut resolver = ImageResolver::new(image);
    for method in image.methods() {
        if method.rva() == 0 {
            continue;
        }
        match method.decoded_body() {
            Ok(body) => {
                resolver.set_method(&method, &body);
                let findings = verifier
                    .verify(&body, &resolver)
                    .iter()
                    .map(|d| (d.code.as_str(), d.offset, d.message.clone()))
                    .collect();
                f(&method, findings);
            }
            Err(e) => f(
                &method,
                vec![(BODY_MALFORMED, body_error_offset(&e), e.to_string())],
            ),
        }
    }
}

fn body_error_offset(e: &ImageError) -> u32 {
    match e {
        ImageError::Body { source, .. } => source.offset() as u32,
        _ => 0,
    }
}

/// Verifies every method of every input, accumulating into `report`. With a baseline, findings
/// the original method had too are suppressed (by code, as many as it had). Inputs that cannot
/// be read go to `report.image_errors`; files found by a scan that are not .NET assemblies go
/// to `report.skipped`.
pub fn verify(
    inputs: &[Input],
    opts: VerifyOptions,
    baseline: Option<&Baseline>,
    report: &mut VerifyReport,
    progress: impl FnMut(&Input),
) {
    let store = ModuleStore::with_runtime_dirs(Vec::new());
    verify_with(inputs, opts, &store, baseline, report, progress)
}

/// [`verify`], with the type pass finding references through `store`.
pub fn verify_with(
    inputs: &[Input],
    opts: VerifyOptions,
    store: &ModuleStore,
    baseline: Option<&Baseline>,
    report: &mut VerifyReport,
    mut progress: impl FnMut(&Input),
) {
    report.schema = "ilcheck.verify/1";
    let mut types = TypePass::new(store, opts.types);
    if opts.types != TypeLevel::Off && report.types.is_none() {
        report.types = Some(TypeSummary::default());
    }
    report.baseline_assemblies = baseline.map_or(0, |b| b.assemblies_read);
    if baseline.is_some() && report.alignment.is_none() {
        report.alignment = Some(AlignmentSummary::default());
    }
    let mut verifier = Verifier::new();
    let mut aligner = Aligner::new();
    for input in inputs {
        match input.open() {
            Ok(image) => {
                report.assemblies += 1;
                let passes = (&mut verifier, &mut aligner, &mut types);
                verify_image(input, &image, opts, baseline, passes, report);
            }
            Err(e @ (ImageError::NotDotNet | ImageError::Pe(_) | ImageError::NoOptionalHeader))
                if !input.must_be_assembly() =>
            {
                report.skipped.push(Skipped {
                    path: input.name(),
                    reason: e.to_string(),
                })
            }
            Err(e) => report.image_errors.push(Skipped {
                path: input.name(),
                reason: e.to_string(),
            }),
        }
        progress(input);
    }
}

/// Adds `f` to the report unless the baseline's `known` counts hold its code; returns whether
/// it was new.
fn record(
    report: &mut VerifyReport,
    opts: VerifyOptions,
    known: &mut CodeCounts,
    f: Finding,
) -> bool {
    if let Some(n) = known.get_mut(&f.code).filter(|n| **n > 0) {
        *n -= 1;
        report.baseline_suppressed += 1;
        return false;
    }
    report.findings_total += 1;
    if report.findings.len() < opts.max_findings {
        report.findings.push(f);
    }
    true
}

fn verify_image(
    input: &Input,
    image: &Image<'_>,
    opts: VerifyOptions,
    baseline: Option<&Baseline>,
    (verifier, aligner, types): (&mut Verifier, &mut Aligner, &mut TypePass<'_>),
    report: &mut VerifyReport,
) {
    let assembly_file = file_name(input);
    let assembly = input.name();
    let original = baseline.and_then(|b| b.assemblies.get(&assembly_file));
    if baseline.is_some() && original.is_none() {
        report.baseline_missing.push(assembly.clone());
    }
    let mut known = original.map(|a| a.image.clone()).unwrap_or_default();
    for f in integrity::check(image) {
        let finding = Finding {
            assembly: assembly.clone(),
            method: String::new(),
            token: String::new(),
            offset: u32::try_from(f.offset).unwrap_or(u32::MAX),
            code: f.code.name().to_string(),
            message: f.message,
            baseline_match: None,
            window: String::new(),
        };
        record(report, opts, &mut known, finding);
    }

    // Decode every body first and time the verify loop as one batch: a clock read per method
    // would cost more than verifying a small body. The timed loop covers everything
    // verification does, the resolver's per-method facts included.
    let work: Vec<(Method<'_>, Result<Body<'_>, ImageError>)> = image
        .methods()
        .filter(|m| m.rva() != 0)
        .map(|m| (m, m.decoded_body()))
        .collect();
    report.methods_checked += work.len() as u64;
    // Findings as (index into `work`, code, offset, message), in method order.
    let mut found: Vec<(usize, &'static str, u32, String)> = Vec::new();
    let mut resolver = ImageResolver::new(image);
    let start = Instant::now();
    for (k, (method, body)) in work.iter().enumerate() {
        let Ok(body) = body else { continue };
        resolver.set_method(method, body);
        verifier.verify(body, &resolver);
        report.il_bytes += body.code.len() as u64;
        report.methods_incomplete += u64::from(!verifier.is_complete());
        found.extend(
            verifier
                .diagnostics()
                .iter()
                .map(|d| (k, d.code.as_str(), d.offset, d.message.clone())),
        );
    }
    report.verify_seconds += start.elapsed().as_secs_f64();

    // Type findings, on the methods the structural rules accepted, merged with theirs.
    if let Some(summary) = report.types.as_mut() {
        let mut rejected = vec![false; work.len()];
        for f in &found {
            rejected[f.0] = true;
        }
        let mut typed = Vec::new();
        types.run(
            image,
            input_path(input),
            &work,
            |k| !rejected[k],
            summary,
            |k, code, offset, message| typed.push((k, code.as_str(), offset, message)),
        );
        found.extend(typed);
        found.sort_by_key(|f| f.0);
    }

    // Alignment findings as (index into `work`, code, offset, message), in method order.
    let mut moved: Vec<(usize, &'static str, u32, String)> = Vec::new();
    if let (Some(b), Some(a), Some(summary)) = (baseline, original, report.alignment.as_mut()) {
        let start = Instant::now();
        align_image(&work, b, a, aligner, summary, &mut moved);
        summary.seconds += start.elapsed().as_secs_f64();
    }

    let mut found = found.into_iter().peekable();
    let mut moved = moved.into_iter().peekable();
    // Windows name their tokens; only the instructions shown are named.
    let names = crate::disasm::ImageNamer::new(image);
    for (k, (method, body)) in work.iter().enumerate() {
        let findings: Vec<(String, u32, String)> = match body {
            Ok(_) => {
                let mut all: Vec<(String, u32, String)> =
                    std::iter::from_fn(|| found.next_if(|f| f.0 == k))
                        .chain(std::iter::from_fn(|| moved.next_if(|f| f.0 == k)))
                        .map(|(_, code, offset, message)| (code.to_string(), offset, message))
                        .collect();
                // Structural and alignment findings together, by offset.
                all.sort_by_key(|f| f.1);
                all
            }
            Err(e) => vec![(
                BODY_MALFORMED.to_string(),
                body_error_offset(e),
                e.to_string(),
            )],
        };
        if findings.is_empty() {
            continue;
        }
        let body = body.as_ref().ok();
        let name = method.full_name();
        let (mut known, uncertain) = match original.map_or(Match::None, |a| {
            baseline.map_or(Match::None, |b| {
                b.match_for(a, method.token().0, name.as_deref().ok())
            })
        }) {
            Match::Certain(c, _) => (c, None),
            Match::Uncertain(c, why) => (c, Some(why)),
            Match::None => (CodeCounts::new(), None),
        };
        let name = name.unwrap_or_else(|e| format!("<name unreadable: {e}>"));
        let mut any = false;
        for (code, offset, message) in findings {
            let window = match body {
                Some(b) if code != BODY_MALFORMED && report.findings.len() < opts.max_findings => {
                    crate::disasm::window_with(b.code, offset, opts.window, Some(&names))
                }
                _ => String::new(),
            };
            let f = Finding {
                assembly: assembly.clone(),
                method: name.clone(),
                token: format!("{:#010x}", method.token().0),
                offset,
                code,
                message,
                baseline_match: uncertain.clone(),
                window,
            };
            any |= record(report, opts, &mut known, f);
        }
        report.methods_with_errors += u64::from(any);
        report.baseline_uncertain += u64::from(uncertain.is_some());
    }
}

/// Aligns every method of `work` that has an original in `a` with it, counting into `summary`
/// and appending the findings to `out` as (index into `work`, code, offset, message).
fn align_image(
    work: &[(Method<'_>, Result<Body<'_>, ImageError>)],
    baseline: &Baseline,
    a: &BaselineAssembly,
    aligner: &mut Aligner,
    summary: &mut AlignmentSummary,
    out: &mut Vec<(usize, &'static str, u32, String)>,
) {
    // The baseline read it once; failing now leaves the assembly's methods unaligned.
    let Some(Ok(originals)) = a.original.as_ref().map(Input::open) else {
        for _ in work.iter().filter(|(_, b)| b.is_ok()) {
            summary.methods_compared += 1;
            summary.not_aligned(Unchecked::OriginalUnreadable);
        }
        return;
    };
    let originals = &originals;
    let body_of = |token: u32| {
        let m = originals.method(token & 0x00FF_FFFF).ok()?;
        (m.rva() != 0).then(|| m.decoded_body())
    };
    let identical = |o: &Body<'_>, p: &Body<'_>| o.code == p.code && o.clauses().eq(p.clauses());
    for (k, (method, body)) in work.iter().enumerate() {
        let token = method.token().0;
        // Most methods a rewriter leaves alone keep their token and bytes: no name needed.
        let same_token = if a.by_token.contains_key(&token) {
            body_of(token)
        } else {
            None
        };
        if let (Ok(p), Some(Ok(o))) = (body, &same_token)
            && identical(o, p)
        {
            summary.methods_compared += 1;
            summary.methods_identical += 1;
            continue;
        }
        let original = if same_token.is_some()
            && let Ok(o) = originals.method(token & 0x00FF_FFFF)
            && same_method(&o, method)
        {
            same_token
        } else {
            aligned_original(baseline, a, method, token, same_token, summary, &body_of)
        };
        let Some(original) = original else { continue };
        summary.methods_compared += 1;
        let (Ok(o), Ok(p)) = (original, body) else {
            summary.not_aligned(Unchecked::Undecodable);
            continue;
        };
        if identical(&o, p) {
            summary.methods_identical += 1;
            continue;
        }
        let found = aligner.compare(&o, p);
        out.extend(
            found
                .iter()
                .map(|d| (k, d.code.as_str(), d.offset, d.message.clone())),
        );
        let stats = aligner.stats();
        if stats.nothing_to_check {
            summary.methods_without_targets += 1;
            continue;
        }
        if let Some(why) = stats.not_aligned {
            summary.not_aligned(why);
            continue;
        }
        summary.targets_checked += u64::from(stats.targets_checked);
        summary.boundaries_checked += u64::from(stats.boundaries_checked);
        if stats.complete() {
            summary.methods_aligned += 1;
        } else {
            summary.methods_in_part += 1;
            for (why, n) in stats.unchecked() {
                *summary.unchecked.entry(why.as_str()).or_default() += u64::from(n);
            }
        }
    }
}

/// Whether two MethodDefs of the same token are the same method by their rows: the same name
/// and signature bytes. Cheaper than comparing full names, and enough to pick the original to
/// align with: a wrong pick does not align ([`Unchecked::TooDifferent`]).
fn same_method(o: &Method<'_>, p: &Method<'_>) -> bool {
    matches!((o.name(), p.name()), (Ok(a), Ok(b)) if a == b)
        && matches!((o.signature_blob(), p.signature_blob()), (Ok(a), Ok(b)) if a == b)
}

/// The original body to align a patched method with, by the baseline's matching (full names);
/// `None` for a new method. A match by token only is counted as not aligned.
fn aligned_original<'o>(
    baseline: &Baseline,
    a: &BaselineAssembly,
    method: &Method<'_>,
    token: u32,
    same_token: Option<Result<Body<'o>, ImageError>>,
    summary: &mut AlignmentSummary,
    body_of: &impl Fn(u32) -> Option<Result<Body<'o>, ImageError>>,
) -> Option<Result<Body<'o>, ImageError>> {
    let name = method.full_name().ok();
    match baseline.match_for(a, token, name.as_deref()) {
        Match::None => None,
        Match::Uncertain(..) => {
            if same_token.is_some() {
                summary.methods_compared += 1;
                summary.not_aligned(Unchecked::UncertainMatch);
            }
            None
        }
        Match::Certain(_, t) if t == token => same_token,
        Match::Certain(_, t) => body_of(t),
    }
}
