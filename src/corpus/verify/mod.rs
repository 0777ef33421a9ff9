//! Verification runs: every method of every input checked by the structural verifier, with its
//! own metadata as the resolver; optionally only what is new against baseline assemblies, and
//! then also each changed method aligned with its original ([`crate::verify::Aligner`]) for
//! branches and clause boundaries that moved.
//!
//! A run counts findings per code and per assembly, merges findings of one code at one
//! instruction of one method into one, and gives each listed finding what a reader needs
//! beside its message ([`detail`]): the disassembly around it with its tokens named, the EH
//! table for a finding about regions, and the ways control arrives where stack depths disagree.

mod baseline;
mod detail;

pub use baseline::{Baseline, PairedBy, canonical, identity_text};
pub use detail::{
    ArrivalRow, ClauseRow, CodeDoc, MAX_CLAUSES_SHOWN, arrival_rows, clause_rows, code_doc,
};

use super::types::{TypePass, TypeSummary, types_checked};
use super::{Input, Skipped};
use crate::body::Body;
use crate::disasm::{ImageNamer, TokenNamer};
use crate::image::{Image, ImageError, Method, Table, Token, integrity};
use crate::verify::types::ModuleStore;
use crate::verify::{
    Aligner, Code, Detail, Diagnostic, ImageResolver, Level, Unchecked, Verdict, Verifier,
};
use baseline::{CodeCounts, Match, Opened};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// Code of a finding for a body whose header or sections do not decode (not a verifier rule:
/// the verifier never sees such a body).
pub const BODY_MALFORMED: &str = "BodyMalformed";

/// One finding of a verification run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Finding {
    /// The input's name ([`Input::name`]).
    pub assembly: String,
    /// The method's full name, `Ns.Outer/Inner::Method(int32,string)`; empty for an
    /// image-level finding.
    pub method: String,
    /// The method's declaring type, `Ns.Outer/Inner` (empty for an image-level finding and a
    /// global method): what code-scanning UIs group findings by.
    pub type_name: String,
    /// MethodDef token, `0x06xxxxxx`; empty for an image-level finding.
    pub token: String,
    /// IL offset (for [`BODY_MALFORMED`]: byte offset from the start of the body; for an
    /// image-level finding: file offset).
    pub offset: u32,
    /// The verifier's stable code name, [`BODY_MALFORMED`], or an
    /// [`IntegrityCode`](crate::image::IntegrityCode) name for an image-level finding.
    pub code: String,
    /// The code's verdict class ([`Code::verdict`]): `invalid` or `unverifiable`; image-level
    /// and [`BODY_MALFORMED`] findings are invalid.
    pub verdict: &'static str,
    /// What is wrong, in words.
    pub message: String,
    /// The ECMA-335 sections the code's rule cites ([`code_doc`]).
    pub reference: String,
    /// With `--baseline`: why the method's match to the original is uncertain (matched by token
    /// while the names differ or cannot be read), so the finding may not be new.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline_match: Option<String>,
    /// Further findings of the same code at the same instruction of the method, merged into
    /// this one (a `switch` with several cases retargeted, a try end and handler start moved
    /// together).
    #[serde(skip_serializing_if = "is_zero")]
    pub duplicates: u32,
    /// The instructions around the offset, the one at fault marked with `>`, tokens named as
    /// `disasm` names them; empty for image-level and [`BODY_MALFORMED`] findings.
    #[serde(rename = "disassembly")]
    pub window: String,
    /// The EH clause (index in table order) the finding concerns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clause: Option<u32>,
    /// The other clause involved (the one it overlaps, nests in, shares a block with).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub other_clause: Option<u32>,
    /// The method's EH table, for a finding about regions or clauses (of a long table, the
    /// clauses near those the finding names).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub clauses: Vec<ClauseRow>,
    /// Clauses of the table not in `clauses`.
    #[serde(skip_serializing_if = "is_zero")]
    pub clauses_omitted: u32,
    /// Where stack depths disagree: how control arrives, with the depth each way brings.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub arrivals: Vec<ArrivalRow>,
    /// Arrivals beyond those listed.
    #[serde(skip_serializing_if = "is_zero")]
    pub more_arrivals: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Finding {
    /// Whether the finding concerns the image rather than one method.
    pub fn is_image_level(&self) -> bool {
        self.token.is_empty()
    }
}

/// Findings of one code over a run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CodeSummary {
    /// Findings reported (after the baseline's suppression and merging).
    pub findings: u64,
    /// Methods with at least one (0 for an image-level code).
    pub methods: u64,
    /// The ECMA-335 sections the rule cites.
    pub reference: String,
}

/// What the run found in one assembly.
#[derive(Clone, Debug, Default, Serialize)]
pub struct AssemblySummary {
    /// The input's name ([`Input::name`]).
    pub assembly: String,
    /// `Name, Version=1.2.3.4` from its Assembly table, when readable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
    /// MethodDefs with a body.
    pub methods_checked: u64,
    /// Methods with at least one finding reported.
    pub methods_with_findings: u64,
    /// Findings reported, image-level ones included.
    pub findings: u64,
    /// Bytes of IL verified.
    pub il_bytes: u64,
    /// With a baseline: the original it was compared with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub original: Option<String>,
    /// With a baseline: how the original was found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paired_by: Option<PairedBy>,
    /// With a baseline: why no original was found (every finding is then new).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_original: Option<String>,
    /// With a baseline: the original's identity, when it is not the assembly's own (another
    /// version under the same file name): its findings and alignment are compared with a
    /// different build, which the report warns of.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub original_identity: Option<String>,
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
    /// Time spent verifying (resolver set-up and rules), single thread: the sum over the
    /// assemblies, whichever thread verified each.
    pub verify_seconds: f64,
    /// Threads that verified assemblies side by side ([`VerifyOptions::threads`]).
    pub threads: u64,
    /// Wall time of the whole run: opening, integrity, structure, types, baseline and the
    /// findings' windows, on [`VerifyReport::threads`] threads.
    pub wall_seconds: f64,
    /// Baseline assemblies read, when `--baseline` was given.
    pub baseline_assemblies: u64,
    /// Findings present in the baseline too, and so not reported.
    pub baseline_suppressed: u64,
    /// Methods with findings matched to the original by token only (names differ or cannot be
    /// read); their findings that are still reported are marked with the reason.
    pub baseline_uncertain: u64,
    /// Assemblies verified with a baseline given that have no original (the reason is in
    /// their [`AssemblySummary::no_original`]): every finding of theirs is reported as new.
    pub baseline_missing: Vec<String>,
    /// With `--baseline`: what aligning changed methods with their originals compared.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alignment: Option<AlignmentSummary>,
    /// What the type pass checked, when it ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub types: Option<TypeSummary>,
    /// The verdict classes reported ([`VerifyOptions::level`]): `invalid` or `unverifiable`.
    pub level: &'static str,
    /// Findings of the structural rules and the type pass the level leaves out (unverifiable
    /// ones at `invalid`), by code, counted before any comparison with a baseline: neither
    /// listed nor counted in `findings_total`, `codes` or the exit code.
    pub not_reported: BTreeMap<String, u64>,
    /// Findings reported, image-level ones included (all of them, listed or not).
    pub findings_total: u64,
    /// Findings merged into another of the same code at the same instruction (not counted in
    /// `findings_total`).
    pub duplicates_merged: u64,
    /// Findings per code.
    pub codes: BTreeMap<String, CodeSummary>,
    /// Each assembly read, in the order read.
    pub per_assembly: Vec<AssemblySummary>,
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

    /// The codes by findings, most first (ties by name).
    pub fn codes_by_count(&self) -> Vec<(&str, &CodeSummary)> {
        let mut codes: Vec<(&str, &CodeSummary)> =
            self.codes.iter().map(|(k, v)| (k.as_str(), v)).collect();
        codes.sort_by(|a, b| b.1.findings.cmp(&a.1.findings).then(a.0.cmp(b.0)));
        codes
    }

    /// Adds the report of the assemblies verified after this one's: counts and times added,
    /// lists appended (findings while fewer than `max_findings` are listed). The run's own
    /// fields (schema, sources, level, baseline assemblies, threads) stay as they are.
    fn absorb(&mut self, part: VerifyReport, max_findings: usize) {
        let VerifyReport {
            schema: _,
            sources: _,
            assemblies,
            skipped,
            image_errors,
            methods_checked,
            methods_with_errors,
            methods_incomplete,
            il_bytes,
            verify_seconds,
            threads: _,
            wall_seconds: _,
            baseline_assemblies: _,
            baseline_suppressed,
            baseline_uncertain,
            baseline_missing,
            alignment,
            types,
            level: _,
            not_reported,
            findings_total,
            duplicates_merged,
            codes,
            per_assembly,
            findings,
        } = part;
        self.assemblies += assemblies;
        self.skipped.extend(skipped);
        self.image_errors.extend(image_errors);
        self.methods_checked += methods_checked;
        self.methods_with_errors += methods_with_errors;
        self.methods_incomplete += methods_incomplete;
        self.il_bytes += il_bytes;
        self.verify_seconds += verify_seconds;
        self.baseline_suppressed += baseline_suppressed;
        self.baseline_uncertain += baseline_uncertain;
        self.baseline_missing.extend(baseline_missing);
        if let (Some(a), Some(b)) = (self.alignment.as_mut(), alignment) {
            a.absorb(b);
        }
        if let (Some(a), Some(b)) = (self.types.as_mut(), types) {
            a.absorb(b);
        }
        add_counts(&mut self.not_reported, not_reported);
        self.findings_total += findings_total;
        self.duplicates_merged += duplicates_merged;
        for (code, c) in codes {
            let mine = self.codes.entry(code).or_insert_with(|| CodeSummary {
                reference: c.reference.clone(),
                ..CodeSummary::default()
            });
            mine.findings += c.findings;
            mine.methods += c.methods;
        }
        self.per_assembly.extend(per_assembly);
        let room = max_findings.saturating_sub(self.findings.len());
        self.findings.extend(findings.into_iter().take(room));
    }
}

/// Adds `from`'s counts to `to`'s, key by key.
pub(crate) fn add_counts<K: Ord>(to: &mut BTreeMap<K, u64>, from: BTreeMap<K, u64>) {
    for (k, n) in from {
        *to.entry(k).or_default() += n;
    }
}

/// What aligning patched methods with their originals compared (with `--baseline`). Every
/// method counted in `methods_compared` is counted once more, in exactly one of
/// `methods_identical`, `methods_without_targets`, `methods_aligned`, `methods_in_part` and
/// `methods_not_aligned`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct AlignmentSummary {
    /// Patched methods with a body whose original (in the assembly's original; by token, then
    /// by unique name) has a body too.
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
    pub(super) fn not_aligned(&mut self, why: Unchecked) {
        self.methods_not_aligned += 1;
        *self.not_aligned.entry(why.as_str()).or_default() += 1;
    }

    /// Adds another run's (or assembly's) counts and time.
    fn absorb(&mut self, b: AlignmentSummary) {
        self.methods_compared += b.methods_compared;
        self.methods_identical += b.methods_identical;
        self.methods_without_targets += b.methods_without_targets;
        self.methods_aligned += b.methods_aligned;
        self.methods_in_part += b.methods_in_part;
        self.methods_not_aligned += b.methods_not_aligned;
        self.targets_checked += b.targets_checked;
        self.boundaries_checked += b.boundaries_checked;
        add_counts(&mut self.not_aligned, b.not_aligned);
        add_counts(&mut self.unchecked, b.unchecked);
        self.seconds += b.seconds;
    }
}

/// Options of a verification run.
#[derive(Clone, Copy, Debug)]
pub struct VerifyOptions {
    /// How many findings are listed (all are counted).
    pub max_findings: usize,
    /// Instructions shown on each side of a finding.
    pub window: usize,
    /// Whether the type pass runs.
    pub types: bool,
    /// Which verdict classes are reported, of every finding: structural, type and alignment.
    pub level: Level,
    /// Threads verifying whole assemblies side by side; 0: one per available core (never
    /// more than there are inputs). The report is the same for any number.
    pub threads: usize,
}

impl Default for VerifyOptions {
    fn default() -> Self {
        VerifyOptions {
            max_findings: 200,
            window: 3,
            types: false,
            level: Level::Invalid,
            threads: 0,
        }
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
///
/// With more than one thread ([`VerifyOptions::threads`]) whole assemblies are verified side
/// by side, each into a report of its own, and those are added to `report` in input order (as
/// `progress` is called): the report is the one a single thread makes, timing fields apart.
pub fn verify_with(
    inputs: &[Input],
    opts: VerifyOptions,
    store: &ModuleStore,
    baseline: Option<&Baseline>,
    report: &mut VerifyReport,
    mut progress: impl FnMut(&Input),
) {
    report.schema = "ilcheck.verify/1";
    report.level = opts.level.as_str();
    if opts.types && report.types.is_none() {
        report.types = Some(TypeSummary::default());
    }
    if let Some(t) = report.types.as_mut() {
        t.level = opts.level.as_str();
    }
    report.baseline_assemblies = baseline.map_or(0, |b| b.assemblies_read);
    if baseline.is_some() && report.alignment.is_none() {
        report.alignment = Some(AlignmentSummary::default());
    }
    let blank = VerifyReport {
        schema: report.schema,
        level: report.level,
        types: report.types.as_ref().map(|t| TypeSummary {
            level: t.level,
            ..TypeSummary::default()
        }),
        alignment: report
            .alignment
            .as_ref()
            .map(|_| AlignmentSummary::default()),
        ..VerifyReport::default()
    };
    let threads = super::threads_for(opts.threads).min(inputs.len()).max(1);
    report.threads = threads as u64;
    let start = Instant::now();
    // Findings listed so far: an assembly verified later lists (and renders the windows of) at
    // most what is left of `--max` when it starts, which is never less than what is left when
    // its report is added, so the findings listed are the same for any number of threads.
    let listed = AtomicUsize::new(report.findings.len());
    super::each_input(
        inputs,
        threads,
        || Passes::new(store),
        |passes, input| {
            let mut part = blank.clone();
            let room = opts
                .max_findings
                .saturating_sub(listed.load(Ordering::Relaxed));
            passes.verify(input, opts, baseline, room, &mut part);
            part
        },
        |i, part| {
            report.absorb(part, opts.max_findings);
            listed.store(report.findings.len(), Ordering::Relaxed);
            progress(&inputs[i]);
        },
    );
    // The store's count once everything is done: a baseline's original methods are verified
    // after their patched assembly's type pass, and may open references of their own.
    if let Some(t) = report.types.as_mut() {
        t.references_opened = store.opened() as u64;
    }
    report.wall_seconds += start.elapsed().as_secs_f64();
}

/// One thread's verifiers, kept from one assembly to the next.
struct Passes<'s> {
    verifier: Verifier,
    aligner: Aligner,
    types: TypePass<'s>,
}

impl<'s> Passes<'s> {
    fn new(store: &'s ModuleStore) -> Self {
        Passes {
            verifier: Verifier::new(),
            aligner: Aligner::new(),
            types: TypePass::new(store),
        }
    }

    /// Verifies one input into `report`, listing at most `room` findings.
    fn verify(
        &mut self,
        input: &Input,
        opts: VerifyOptions,
        baseline: Option<&Baseline>,
        room: usize,
        report: &mut VerifyReport,
    ) {
        match input.open() {
            Ok(image) => {
                report.assemblies += 1;
                let passes = (&mut self.verifier, &mut self.aligner, &mut self.types);
                verify_image(input, &image, (opts, room), baseline, passes, report);
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
    }
}

/// Adds `f` to the report unless the baseline's `known` counts hold its code; returns whether
/// it was new.
fn record(report: &mut VerifyReport, room: usize, known: &mut CodeCounts, f: Finding) -> bool {
    if let Some(n) = known.get_mut(&f.code).filter(|n| **n > 0) {
        *n -= 1;
        report.baseline_suppressed += 1;
        return false;
    }
    report.findings_total += 1;
    report.duplicates_merged += u64::from(f.duplicates);
    if let Some(a) = report.per_assembly.last_mut() {
        a.findings += 1;
    }
    let summary = report
        .codes
        .entry(f.code.clone())
        .or_insert_with(|| CodeSummary {
            reference: f.reference.clone(),
            ..CodeSummary::default()
        });
    summary.findings += 1;
    if report.findings.len() < room {
        report.findings.push(f);
    }
    true
}

/// A method's finding before it is rendered: the verifier's or aligner's, or the body's
/// decode error.
enum Raw {
    Rule(Diagnostic),
    Malformed(u32, String),
}

impl Raw {
    fn offset(&self) -> u32 {
        match self {
            Raw::Rule(d) => d.offset,
            Raw::Malformed(offset, _) => *offset,
        }
    }
}

/// The declaring type of `method` as its full name writes it; empty for a global method.
fn type_name(image: &Image<'_>, method: &Method<'_>) -> String {
    let mut out = String::new();
    if let Ok(Some(owner)) = method.declaring_type()
        && image
            .write_type_name(Token::new(Table::TypeDef, owner), &mut out)
            .is_err()
    {
        out.clear();
    }
    out
}

fn verify_image(
    input: &Input,
    image: &Image<'_>,
    (opts, room): (VerifyOptions, usize),
    baseline: Option<&Baseline>,
    (verifier, aligner, types): (&mut Verifier, &mut Aligner, &mut TypePass<'_>),
    report: &mut VerifyReport,
) {
    let assembly = input.name();
    let identity = baseline::identity_of(image);
    let mut summary = AssemblySummary {
        assembly: assembly.clone(),
        identity: identity.clone(),
        ..AssemblySummary::default()
    };
    // The original, opened again for its names and bodies.
    let mut original: Option<Opened<'_>> = match baseline {
        None => None,
        Some(b) => match b
            .original_for(input, identity.as_deref())
            .and_then(|(a, by)| Opened::new(a, b.types).map(|o| (o, by)))
        {
            Ok((o, by)) => {
                summary.original = Some(o.assembly.name.clone());
                summary.paired_by = Some(by);
                let theirs = baseline::identity_of(o.image());
                if identity.is_some() && theirs.is_some() && theirs != identity {
                    summary.original_identity = theirs;
                }
                Some(o)
            }
            Err(why) => {
                summary.no_original = Some(why);
                report.baseline_missing.push(assembly.clone());
                None
            }
        },
    };
    report.per_assembly.push(summary);
    let mut known = original
        .as_ref()
        .map(|o| o.assembly.image.clone())
        .unwrap_or_default();
    for f in integrity::check(image) {
        let code = f.code.name().to_string();
        let finding = Finding {
            assembly: assembly.clone(),
            offset: u32::try_from(f.offset).unwrap_or(u32::MAX),
            reference: code_doc(&code).reference,
            verdict: Verdict::Invalid.as_str(),
            code,
            message: f.message,
            ..Finding::default()
        };
        record(report, room, &mut known, finding);
    }

    // Decode every body first and time the verify loop as one batch: a clock read per method
    // would cost more than verifying a small body. The timed loop covers everything
    // verification does, the resolver's per-method facts included.
    let work: Vec<(Method<'_>, Result<Body<'_>, ImageError>)> = image
        .methods()
        .filter(|m| m.rva() != 0)
        .map(|m| (m, m.decoded_body()))
        .collect();
    let checked = work.len() as u64;
    report.methods_checked += checked;
    // Findings with the index of their method in `work`, in method order.
    let mut found: Vec<(usize, Diagnostic)> = Vec::new();
    let mut resolver = ImageResolver::new(image);
    let mut il_bytes = 0;
    let start = Instant::now();
    for (k, (method, body)) in work.iter().enumerate() {
        let Ok(body) = body else { continue };
        resolver.set_method(method, body);
        verifier.verify(body, &resolver, &crate::verify::Options::ALL);
        il_bytes += body.code.len() as u64;
        report.methods_incomplete += u64::from(!verifier.is_complete());
        found.extend(verifier.diagnostics().iter().map(|d| (k, d.clone())));
    }
    report.verify_seconds += start.elapsed().as_secs_f64();
    report.il_bytes += il_bytes;
    if let Some(a) = report.per_assembly.last_mut() {
        (a.methods_checked, a.il_bytes) = (checked, il_bytes);
    }

    // Type findings, on the methods without an invalid structural finding, merged with the
    // structural ones.
    if let Some(summary) = report.types.as_mut() {
        let mut rejected = vec![false; work.len()];
        for (k, d) in &found {
            rejected[*k] |= !types_checked(std::iter::once(d.code));
        }
        let mut typed = Vec::new();
        types.run(
            image,
            input_path(input),
            &work,
            |k| !rejected[k],
            summary,
            |k, code, offset, message| typed.push((k, Diagnostic::new(code, offset, message))),
        );
        summary.not_reported += typed
            .iter()
            .filter(|(_, d)| !opts.level.reports(d.code))
            .count() as u64;
        found.extend(typed);
        // Stable: a method's structural findings stay before its type findings.
        found.sort_by_key(|f| f.0);
    }
    apply_level(opts.level, &mut found, &mut report.not_reported);

    // Alignment findings, in method order.
    let mut moved: Vec<baseline::Moved> = Vec::new();
    if let (Some(o), Some(summary)) = (&original, report.alignment.as_mut()) {
        let start = Instant::now();
        baseline::align_image(image, &work, o, aligner, summary, &mut moved);
        summary.seconds += start.elapsed().as_secs_f64();
    }
    apply_level(opts.level, &mut moved, &mut report.not_reported);

    // The methods with findings, with their names and their originals; the originals of those
    // are verified (only those: the others' findings would not be compared).
    let mut with_findings: Vec<usize> = found
        .iter()
        .map(|f| f.0)
        .chain(moved.iter().map(|m| m.0))
        .chain(
            work.iter()
                .enumerate()
                .filter(|(_, (_, b))| b.is_err())
                .map(|(k, _)| k),
        )
        .collect();
    with_findings.sort_unstable();
    with_findings.dedup();
    let named: Vec<(usize, Result<String, ImageError>, Match)> = with_findings
        .into_iter()
        .map(|k| {
            let method = &work[k].0;
            let name = method.full_name();
            let m = original.as_ref().map_or(Match::None, |o| {
                o.match_for(method.token().0, name.as_deref().ok())
            });
            (k, name, m)
        })
        .collect();
    if let Some(o) = original.as_mut() {
        o.verify_methods(named.iter().filter_map(|n| n.2.token()), verifier, types);
    }

    let mut found = found.into_iter().peekable();
    let mut moved = moved.into_iter().peekable();
    // Windows name their tokens; only the instructions shown are named.
    let names = ImageNamer::new(image);
    for (k, name, matched) in named {
        let (method, body) = &work[k];
        let findings: Vec<(Raw, u32)> = match body {
            Ok(_) => {
                let mut all: Vec<Diagnostic> = std::iter::from_fn(|| found.next_if(|f| f.0 == k))
                    .chain(std::iter::from_fn(|| moved.next_if(|f| f.0 == k)))
                    .map(|(_, d)| d)
                    .collect();
                merge_duplicates(&mut all)
                    .into_iter()
                    .map(|(d, n)| (Raw::Rule(d), n))
                    .collect()
            }
            Err(e) => vec![(Raw::Malformed(body_error_offset(e), e.to_string()), 0)],
        };
        let body = body.as_ref().ok();
        let counts = |t: u32| original.as_ref().map(|o| o.counts(t)).unwrap_or_default();
        let (mut known, uncertain) = match matched {
            Match::Certain(t) => (counts(t), None),
            Match::Uncertain(t, why) => (counts(t), Some(why)),
            Match::None => (CodeCounts::new(), None),
        };
        let name = name.unwrap_or_else(|e| format!("<name unreadable: {e}>"));
        let owner = type_name(image, method);
        let mut codes: Vec<String> = Vec::new();
        for (raw, duplicates) in findings {
            let mut f = Finding {
                assembly: assembly.clone(),
                method: name.clone(),
                type_name: owner.clone(),
                token: format!("{:#010x}", method.token().0),
                offset: raw.offset(),
                baseline_match: uncertain.clone(),
                duplicates,
                ..Finding::default()
            };
            let listed = report.findings.len() < room;
            match (raw, body) {
                (Raw::Rule(d), Some(b)) => {
                    f.code = d.code.as_str().to_string();
                    if listed {
                        show(&mut f, d.code, &d.detail, b, opts, &names);
                    }
                    f.message = d.message;
                }
                (Raw::Rule(d), None) => {
                    f.code = d.code.as_str().to_string();
                    f.message = d.message;
                }
                (Raw::Malformed(_, message), _) => {
                    f.code = BODY_MALFORMED.to_string();
                    f.message = message;
                }
            }
            f.reference = code_doc(&f.code).reference;
            f.verdict = verdict_of(&f.code).as_str();
            let code = f.code.clone();
            if record(report, room, &mut known, f) && !codes.contains(&code) {
                codes.push(code);
            }
        }
        for code in &codes {
            if let Some(c) = report.codes.get_mut(code) {
                c.methods += 1;
            }
        }
        let any = !codes.is_empty();
        report.methods_with_errors += u64::from(any);
        if let Some(a) = report.per_assembly.last_mut() {
            a.methods_with_findings += u64::from(any);
        }
        report.baseline_uncertain += u64::from(uncertain.is_some());
    }
}

/// The level, one rule for every finding of a method (structural, type, alignment): those it
/// leaves out are counted in `not_reported` by code and dropped before they are compared with
/// the baseline, listed or counted for the exit code.
fn apply_level(
    level: Level,
    found: &mut Vec<(usize, Diagnostic)>,
    not_reported: &mut BTreeMap<String, u64>,
) {
    found.retain(|(_, d)| {
        let kept = level.reports(d.code);
        if !kept {
            *not_reported.entry(d.code.as_str().to_string()).or_default() += 1;
        }
        kept
    });
}

/// The verdict class of a finding's code: [`Code::verdict`] for a verifier code; image-level
/// and [`BODY_MALFORMED`] findings are invalid.
pub fn verdict_of(code: &str) -> Verdict {
    Code::from_name(code).map_or(Verdict::Invalid, Code::verdict)
}

/// Sorts one method's findings by offset and code and merges those of one code at one offset
/// into the first: each with the number merged into it.
fn merge_duplicates(all: &mut [Diagnostic]) -> Vec<(Diagnostic, u32)> {
    // Stable: of equal ones, the structural verifier's come before the aligner's, as found.
    all.sort_by_key(|d| (d.offset, d.code));
    let mut out: Vec<(Diagnostic, u32)> = Vec::with_capacity(all.len());
    for d in all.iter() {
        match out.last_mut() {
            Some((last, n)) if last.offset == d.offset && last.code == d.code => *n += 1,
            _ => out.push((d.clone(), 0)),
        }
    }
    out
}

/// Fills in what a listed finding shows besides its message: the disassembly around it, the
/// EH table when it concerns regions or names a clause, and the arrivals where stack depths
/// disagree.
fn show(
    f: &mut Finding,
    code: Code,
    detail: &Detail,
    body: &Body<'_>,
    opts: VerifyOptions,
    names: &dyn TokenNamer,
) {
    f.window = crate::disasm::window_with(body.code, f.offset, opts.window, Some(names));
    f.clause = detail.clause;
    f.other_clause = detail.other_clause;
    if (code.concerns_regions() || detail.clause.is_some()) && body.clauses().next().is_some() {
        let focus: Vec<u32> = detail
            .clause
            .into_iter()
            .chain(detail.other_clause)
            .collect();
        (f.clauses, f.clauses_omitted) = clause_rows(body, Some(names), &focus);
    }
    f.arrivals = arrival_rows(body.code, &detail.arrivals, Some(names));
    f.more_arrivals = detail.more_arrivals;
}

/// The file an input was read from, when it is one.
fn input_path(input: &Input) -> Option<&std::path::Path> {
    match input {
        Input::File { path, .. } => Some(path),
        Input::Embedded { .. } | Input::Memory { .. } => None,
    }
}

fn body_error_offset(e: &ImageError) -> u32 {
    match e {
        ImageError::Body { source, .. } => source.offset() as u32,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicates_merge_by_offset_and_code() {
        let d = |code, offset| Diagnostic::new(code, offset, format!("{code} at {offset}"));
        let mut all = vec![
            d(Code::BranchRetargeted, 4),
            d(Code::StackUnderflow, 4),
            d(Code::BranchRetargeted, 4),
            d(Code::BranchRetargeted, 2),
            d(Code::BranchRetargeted, 4),
        ];
        let merged: Vec<(Code, u32, u32)> = merge_duplicates(&mut all)
            .into_iter()
            .map(|(d, n)| (d.code, d.offset, n))
            .collect();
        assert_eq!(
            merged,
            [
                (Code::BranchRetargeted, 2, 0),
                (Code::StackUnderflow, 4, 0),
                (Code::BranchRetargeted, 4, 2)
            ]
        );
    }
}
