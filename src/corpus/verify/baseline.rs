//! Baselines (`verify --baseline`): the originals' findings, which patched assembly goes with
//! which original, which patched method with which original method, and the alignment of
//! changed methods with their originals.
//!
//! Assemblies are paired, in this order: by an explicit pair (`--baseline-pair`); by file name
//! when one original has it (when several do, the one of them with the patched assembly's
//! identity); by assembly identity (name, version and culture from the Assembly table) when
//! one original has it. An assembly with no original is reported with the reason: its findings
//! are all new, which must never pass silently.

use super::{AlignmentSummary, BODY_MALFORMED, body_error_offset, input_path};
use crate::body::Body;
use crate::corpus::{Input, TypePass, TypeSummary, types_checked};
use crate::image::emit::AssemblyIdentity;
use crate::image::{Image, ImageError, Method, integrity};
use crate::verify::{Aligner, ImageResolver, Unchecked, Verifier};
use serde::Serialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Findings of one method (or of the image), by code: what a patched method's findings are
/// compared against.
pub(super) type CodeCounts = HashMap<String, u32>;

/// How a verified assembly was paired with its original.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PairedBy {
    /// `--baseline-pair PATCHED=ORIGINAL`.
    Explicit,
    /// The same file name (and, when several originals have it, the same identity).
    FileName,
    /// The same assembly identity under another file name.
    Identity,
}

impl PairedBy {
    /// The pairing in words.
    pub fn as_str(self) -> &'static str {
        match self {
            PairedBy::Explicit => "explicit pair",
            PairedBy::FileName => "file name",
            PairedBy::Identity => "assembly identity",
        }
    }
}

/// Findings of baseline assemblies, by assembly, then by MethodDef token (of the methods that
/// have any). Names are read from the originals when their patched assemblies are compared
/// ([`Opened`]), so a baseline's memory grows with the findings, not with the methods.
#[derive(Default)]
pub struct Baseline {
    assemblies: Vec<BaselineAssembly>,
    /// Originals by file name.
    by_file: HashMap<String, Vec<usize>>,
    /// Originals by [`identity_text`].
    by_identity: HashMap<String, Vec<usize>>,
    /// Explicit pairs: the patched file (canonical path) to its original.
    pinned: HashMap<PathBuf, usize>,
    /// Baseline assemblies read.
    pub assemblies_read: u64,
}

#[derive(Default)]
pub(super) struct BaselineAssembly {
    /// How reports name the original ([`Input::name`]).
    pub(super) name: String,
    /// Where the original image is: opened again while its patched assembly is verified
    /// ([`Opened`]), for its methods' names and bodies, so that only the originals being
    /// compared are open and the baseline keeps no name or body of its own.
    pub(super) original: Option<Input>,
    /// The findings of the methods (with a body) that have any, by token, by code: most have
    /// none, and a method not here has none.
    findings: HashMap<u32, CodeCounts>,
    /// Image-level findings.
    pub(super) image: CodeCounts,
}

/// An original opened again while its patched assembly is verified. Its methods' full names
/// are read only when a match needs them: the name at a token for a patched method with
/// findings, every name (an index, for methods matched by name) the first time a method is not
/// matched by its token. So a baseline holds no names, and a run holds those of the originals
/// being compared only.
pub(super) struct Opened<'a> {
    pub(super) assembly: &'a BaselineAssembly,
    image: Image<'static>,
    names: std::cell::RefCell<crate::image::FullNames>,
    /// Full names of the methods with a body, to their token (`None` for a name several
    /// share); built on first use.
    by_name: std::cell::OnceCell<HashMap<String, Option<u32>>>,
}

/// How a patched method was matched to its original.
pub(super) enum Match {
    /// Same token and same readable name, or the same unique name at another token (the
    /// original's token).
    Certain(CodeCounts, u32),
    /// The same token, but the names differ or one cannot be read.
    Uncertain(CodeCounts, String),
    /// No original: the method is new.
    None,
}

/// The file name of an input, as assemblies are paired by it.
pub(super) fn file_name(input: &Input) -> String {
    match input {
        Input::File { path, .. } => path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        Input::Embedded { name, .. } => name.rsplit('/').next().unwrap_or(name).to_string(),
        Input::Memory { name, .. } => name.rsplit('/').next().unwrap_or(name).to_string(),
    }
}

/// `Name, Version=1.2.3.4` (with `, Culture=xx` unless neutral): what pairs assemblies whose
/// file names differ. The public key is left out: re-signing with another key is a rewrite.
pub fn identity_text(id: &AssemblyIdentity) -> String {
    let [a, b, c, d] = id.version;
    let mut s = format!("{}, Version={a}.{b}.{c}.{d}", id.name);
    if !id.culture.is_empty() {
        s.push_str(", Culture=");
        s.push_str(&id.culture);
    }
    s
}

/// The identity of an image, when its Assembly row reads.
pub(super) fn identity_of(image: &Image<'_>) -> Option<String> {
    image
        .assembly_identity()
        .ok()
        .flatten()
        .map(|id| identity_text(&id))
}

fn counts<'c>(codes: impl IntoIterator<Item = &'c str>) -> CodeCounts {
    let mut counts = CodeCounts::new();
    for code in codes {
        *counts.entry(code.to_string()).or_default() += 1;
    }
    counts
}

/// The path a pair names, as comparable with an input's: canonical when it exists.
pub fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

impl Baseline {
    /// Verifies the original assemblies and keeps their findings. A baseline that cannot be
    /// read is an error: comparing against nothing would report everything as new.
    pub fn load(inputs: &[Input]) -> Result<Baseline, String> {
        Baseline::load_with_pairs(inputs, &[], None, 0)
    }

    /// [`Baseline::load`], the originals' type findings counted too when `types` is given.
    /// Findings of every verdict class are kept: a run compares those its level reports.
    pub fn load_with(
        inputs: &[Input],
        types: Option<&mut TypePass<'_>>,
    ) -> Result<Baseline, String> {
        Baseline::load_with_pairs(inputs, &[], types, 0)
    }

    /// [`Baseline::load_with`] and explicit pairs `(patched file, original)`: each patched
    /// file is compared with its original whatever the names, and the originals join the
    /// baseline. The originals are verified on `threads` threads (0: one per core); the
    /// baseline is the same for any number.
    pub fn load_with_pairs(
        inputs: &[Input],
        pairs: &[(PathBuf, Input)],
        types: Option<&mut TypePass<'_>>,
        threads: usize,
    ) -> Result<Baseline, String> {
        let store = types.map(|pass| pass.store());
        // An original named twice (in --baseline and in a pair) is read once.
        let mut loaded: HashMap<PathBuf, usize> = HashMap::new();
        let mut originals: Vec<Input> = Vec::new();
        let mut pinned = Vec::new();
        let all = inputs.iter().map(|i| (None, i));
        let all = all.chain(pairs.iter().map(|(p, o)| (Some(p), o)));
        for (patched, input) in all {
            let key = match input {
                Input::File { path, .. } => Some(canonical(path)),
                Input::Embedded { .. } | Input::Memory { .. } => None,
            };
            let k = match key.as_ref().and_then(|k| loaded.get(k)) {
                Some(&k) => k,
                None => {
                    originals.push(input.clone());
                    if let Some(key) = key {
                        loaded.insert(key, originals.len() - 1);
                    }
                    originals.len() - 1
                }
            };
            if let Some(p) = patched {
                pinned.push((canonical(p), k));
            }
        }
        // Read side by side, kept in order; the first original (in order) that cannot be read
        // is the error.
        let mut read = Vec::with_capacity(originals.len());
        super::super::each_input(
            &originals,
            super::super::threads_for(threads),
            || (Verifier::new(), store.map(TypePass::new)),
            |(verifier, types), input| read_one(input, verifier, types.as_mut()),
            |_, r| read.push(r),
        );
        let mut baseline = Baseline::default();
        for r in read {
            baseline.keep(r?);
        }
        baseline.pinned.extend(pinned);
        Ok(baseline)
    }

    /// Keeps an original read by [`read_one`] (its identity beside it), the next index.
    fn keep(&mut self, (assembly, identity): (BaselineAssembly, Option<String>)) {
        let k = self.assemblies.len();
        if let Some(input) = &assembly.original {
            self.by_file.entry(file_name(input)).or_default().push(k);
        }
        if let Some(id) = identity {
            self.by_identity.entry(id).or_default().push(k);
        }
        self.assemblies.push(assembly);
        self.assemblies_read += 1;
    }

    /// The original of a patched input whose identity is `identity`, and how it was paired;
    /// `Err` says why there is none.
    pub(super) fn original_for(
        &self,
        input: &Input,
        identity: Option<&str>,
    ) -> Result<(&BaselineAssembly, PairedBy), String> {
        let pick = |k: usize, by| Ok((&self.assemblies[k], by));
        if let Input::File { path, .. } = input
            && !self.pinned.is_empty()
            && let Some(&k) = self.pinned.get(&canonical(path))
        {
            return pick(k, PairedBy::Explicit);
        }
        let name = file_name(input);
        let with_identity = |ks: &[usize]| -> Vec<usize> {
            let Some(id) = identity else {
                return Vec::new();
            };
            let same = self.by_identity.get(id).map_or(&[][..], Vec::as_slice);
            ks.iter().copied().filter(|k| same.contains(k)).collect()
        };
        match self.by_file.get(&name).map_or(&[][..], Vec::as_slice) {
            [k] => return pick(*k, PairedBy::FileName),
            [] => {}
            several => {
                return match with_identity(several)[..] {
                    [k] => pick(k, PairedBy::FileName),
                    _ => Err(format!(
                        "{} originals are named {name}, and its assembly identity ({}) does not \
                         single one out",
                        several.len(),
                        identity.unwrap_or("unreadable")
                    )),
                };
            }
        }

        let Some(id) = identity else {
            return Err(format!(
                "no original is named {name}, and its assembly identity cannot be read"
            ));
        };
        match self.by_identity.get(id).map_or(&[][..], Vec::as_slice) {
            [k] => pick(*k, PairedBy::Identity),
            [] => Err(format!(
                "no original is named {name} or has the identity {id}"
            )),
            several => Err(format!(
                "no original is named {name}, and {} originals have the identity {id}",
                several.len()
            )),
        }
    }
}

impl<'a> Opened<'a> {
    /// Opens `assembly`'s original again; the error says why it cannot be.
    pub(super) fn new(assembly: &'a BaselineAssembly) -> Result<Opened<'a>, String> {
        let input = assembly
            .original
            .as_ref()
            .ok_or_else(|| format!("the original {} has no image", assembly.name))?;
        let image = input
            .open()
            .map_err(|e| format!("the original {} cannot be read again: {e}", input.name()))?;
        Ok(Opened {
            assembly,
            image,
            names: Default::default(),
            by_name: Default::default(),
        })
    }

    /// The original image.
    pub(super) fn image(&self) -> &Image<'static> {
        &self.image
    }

    /// The findings of the original's method `token`.
    fn counts(&self, token: u32) -> CodeCounts {
        self.assembly
            .findings
            .get(&token)
            .cloned()
            .unwrap_or_default()
    }

    /// The original's method at `token`, when it has a body: its full name (`None` when it
    /// cannot be read).
    fn at_token(&self, token: u32) -> Option<Option<String>> {
        if token >> 24 != u32::from(crate::image::Table::MethodDef as u8) {
            return None;
        }
        let m = self.image.method(token & 0x00FF_FFFF).ok()?;
        if m.rva() == 0 {
            return None;
        }
        let mut name = String::new();
        let mut names = self.names.borrow_mut();
        Some(m.write_full_name(&mut names, &mut name).ok().map(|()| name))
    }

    /// The token of the original's one method with a body named `name`.
    fn by_name(&self, name: &str) -> Option<u32> {
        let index = self.by_name.get_or_init(|| {
            let mut names = self.names.borrow_mut();
            let mut index: HashMap<String, Option<u32>> = HashMap::new();
            let mut name = String::new();
            for m in self.image.methods().filter(|m| m.rva() != 0) {
                if m.write_full_name(&mut names, &mut name).is_ok() {
                    index
                        .entry(name.clone())
                        .and_modify(|t| *t = None)
                        .or_insert(Some(m.token().0));
                }
            }
            index
        });
        index.get(name).copied().flatten()
    }

    /// The original of a patched method: by token first (rewriters keep MethodDef tokens), by
    /// unique full name when the token's name differs (a renumbered method).
    pub(super) fn match_for(&self, token: u32, name: Option<&str>) -> Match {
        let by_name = |n: &str| {
            let t = self.by_name(n)?;
            Some(Match::Certain(self.counts(t), t))
        };
        match (self.at_token(token), name) {
            (Some(Some(old)), Some(new)) if old == new => Match::Certain(self.counts(token), token),
            (Some(old), new) => {
                if let Some(m) = new.and_then(by_name) {
                    return m;
                }
                let why = match (old, new) {
                    (Some(old), Some(_)) => format!("matched by token; the original was {old}"),
                    (None, _) => "matched by token; the original's name cannot be read".into(),
                    (_, None) => "matched by token; the name cannot be read".into(),
                };
                Match::Uncertain(self.counts(token), why)
            }
            (None, Some(new)) => by_name(new).unwrap_or(Match::None),
            (None, None) => Match::None,
        }
    }
}

/// The type findings of every method of `image` the type pass checks ([`types_checked`]), by
/// token.
/// Reads one original (with its type findings when `types` is given), and its identity.
fn read_one(
    input: &Input,
    verifier: &mut Verifier,
    types: Option<&mut TypePass<'_>>,
) -> Result<(BaselineAssembly, Option<String>), String> {
    let image = input
        .open()
        .map_err(|e| format!("baseline {}: {e}", input.name()))?;
    let mut assembly = BaselineAssembly {
        name: input.name(),
        image: counts(integrity::check(&image).iter().map(|f| f.code.name())),
        ..Default::default()
    };
    let typed = types
        .map(|pass| type_findings(pass, input, &image))
        .unwrap_or_default();
    for_each_method_findings(&image, verifier, |method, mut findings| {
        if let Some(t) = typed.get(&method.token().0) {
            findings.extend(t.iter().map(|c| (c.as_str(), 0, String::new())));
        }
        if !findings.is_empty() {
            let counts = counts(findings.iter().map(|f| f.0));
            assembly.findings.insert(method.token().0, counts);
        }
    });
    assembly.original = Some(input.clone());
    Ok((assembly, identity_of(&image)))
}

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
                types_checked(
                    verifier
                        .verify(b, &resolver, &crate::verify::Options::ALL)
                        .iter()
                        .map(|d| d.code),
                )
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
                    .verify(&body, &resolver, &crate::verify::Options::ALL)
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

/// One patched method's alignment finding: (index into the work list, the finding).
pub(super) type Moved = (usize, crate::verify::Diagnostic);

/// Aligns every method of `work` that has an original in `a` with it, counting into `summary`
/// and appending the findings to `out`.
pub(super) fn align_image(
    work: &[(Method<'_>, Result<Body<'_>, ImageError>)],
    opened: &Opened<'_>,
    aligner: &mut Aligner,
    summary: &mut AlignmentSummary,
    out: &mut Vec<Moved>,
) {
    let originals = opened.image();
    let body_of = |token: u32| {
        let m = originals.method(token & 0x00FF_FFFF).ok()?;
        (m.rva() != 0).then(|| m.decoded_body())
    };
    let identical = |o: &Body<'_>, p: &Body<'_>| o.code == p.code && o.clauses().eq(p.clauses());
    for (k, (method, body)) in work.iter().enumerate() {
        let token = method.token().0;
        // Most methods a rewriter leaves alone keep their token and bytes: no name needed.
        let same_token = if token >> 24 == u32::from(crate::image::Table::MethodDef as u8) {
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
            aligned_original(opened, method, token, same_token, summary, &body_of)
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
        out.extend(found.iter().map(|d| (k, d.clone())));
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
    opened: &Opened<'_>,
    method: &Method<'_>,
    token: u32,
    same_token: Option<Result<Body<'o>, ImageError>>,
    summary: &mut AlignmentSummary,
    body_of: &impl Fn(u32) -> Option<Result<Body<'o>, ImageError>>,
) -> Option<Result<Body<'o>, ImageError>> {
    let name = method.full_name().ok();
    match opened.match_for(token, name.as_deref()) {
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
