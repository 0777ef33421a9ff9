//! Baselines (`verify --baseline`): the originals' findings, which patched assembly goes with
//! which original, which patched method with which original method, and the alignment of
//! changed methods with their originals.
//!
//! Assemblies are paired, in this order: by an explicit pair (`--baseline-pair`); by file name
//! when one original has it (when several do, the one of them with the patched assembly's
//! identity, and when that still leaves several, the one whose directories above the file
//! match the patched file's furthest up: a tree rewritten into another keeps its relative
//! paths); by assembly identity (name, version and culture from the Assembly table) when one
//! original has it. An assembly with no original is reported with the reason: its findings
//! are all new, which must never pass silently.

use super::{AlignmentSummary, BODY_MALFORMED, input_path};
use crate::body::Body;
use crate::corpus::{Input, TypePass, TypeSummary, types_checked};
use crate::disasm::names::{ImageNamer, TokenNamer};
use crate::image::emit::AssemblyIdentity;
use crate::image::{Image, ImageError, Method, integrity};
use crate::verify::{Aligner, ImageResolver, TokenIdentity, Unchecked, Verifier};
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
    /// The same file name and the same directories above it, furthest up among the originals
    /// of that name (and of the patched assembly's identity, when some have it): the
    /// originals of a tree that was rewritten into another, such as copies of one assembly
    /// in several directories.
    Path,
}

impl PairedBy {
    /// The pairing in words.
    pub fn as_str(self) -> &'static str {
        match self {
            PairedBy::Explicit => "explicit pair",
            PairedBy::FileName => "file name",
            PairedBy::Identity => "assembly identity",
            PairedBy::Path => "relative path",
        }
    }
}

/// The original assemblies of a baseline: their image-level findings and identities, and
/// which patched assembly goes with which. Their methods' names and findings are read from the
/// originals when their patched assemblies are compared with them, and only where a
/// comparison needs them, so a baseline holds nothing per method.
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
    /// The originals' type findings count too (the baseline was loaded with a type pass).
    pub(super) types: bool,
}

#[derive(Default)]
pub(super) struct BaselineAssembly {
    /// How reports name the original ([`Input::name`]).
    pub(super) name: String,
    /// Where the original image is: opened again while its patched assembly is verified
    /// ([`Opened`]), for its methods' names and bodies, so that only the originals being
    /// compared are open and the baseline keeps no name or body of its own.
    pub(super) original: Option<Input>,
    /// Image-level findings.
    pub(super) image: CodeCounts,
}

/// An original opened again while its patched assembly is verified. What a comparison needs
/// of it is read then, and only that: the full name at a token for a patched method with
/// findings, every name (an index, for methods matched by name) the first time a method is not
/// matched by its token, and the findings of the original methods that patched methods with
/// findings are matched to ([`Opened::verify_methods`]): a method's findings are the same
/// whichever others are verified. So a baseline holds no names and no findings of methods,
/// and its originals' methods are verified only where a patched method has findings to
/// compare.
pub(super) struct Opened<'a> {
    pub(super) assembly: &'a BaselineAssembly,
    image: Image<'static>,
    names: std::cell::RefCell<crate::image::FullNames>,
    /// Full names of the methods with a body, to their token (`None` for a name several
    /// share); built on first use.
    by_name: std::cell::OnceCell<HashMap<String, Option<u32>>>,
    /// The findings of the original methods verified so far, by token.
    findings: HashMap<u32, CodeCounts>,
    /// Type findings count ([`Baseline::types`]).
    types: bool,
}

/// How a patched method was matched to its original.
pub(super) enum Match {
    /// Same token and same readable name, or the same unique name at another token: the
    /// original's token.
    Certain(u32),
    /// The same token (the original's), but the names differ or one cannot be read.
    Uncertain(u32, String),
    /// No original: the method is new.
    None,
}

impl Match {
    /// The original method's token, if there is one.
    pub(super) fn token(&self) -> Option<u32> {
        match *self {
            Match::Certain(t) | Match::Uncertain(t, _) => Some(t),
            Match::None => None,
        }
    }
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
    /// Reads the original assemblies (their image-level findings and identities; their methods
    /// are verified when patched methods are compared with them, by the run's passes). A
    /// baseline that cannot be read is an error: comparing against nothing would report
    /// everything as new.
    pub fn load(inputs: &[Input]) -> Result<Baseline, String> {
        Baseline::load_with_pairs(inputs, &[], None, 0)
    }

    /// [`Baseline::load`], the originals' type findings counted too when `types` is given
    /// (checked with the type pass of the run that compares them, which finds references
    /// through its own store). Findings of every verdict class count: a run compares those its
    /// level reports.
    pub fn load_with(
        inputs: &[Input],
        types: Option<&mut TypePass<'_>>,
    ) -> Result<Baseline, String> {
        Baseline::load_with_pairs(inputs, &[], types, 0)
    }

    /// [`Baseline::load_with`] and explicit pairs `(patched file, original)`: each patched
    /// file is compared with its original whatever the names, and the originals join the
    /// baseline. The originals are read on `threads` threads (0: one per core); the baseline
    /// is the same for any number.
    pub fn load_with_pairs(
        inputs: &[Input],
        pairs: &[(PathBuf, Input)],
        types: Option<&mut TypePass<'_>>,
        threads: usize,
    ) -> Result<Baseline, String> {
        let typed = types.is_some();
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
            || (),
            |(), input| read_one(input),
            |_, r| read.push(r),
        );
        let mut baseline = Baseline {
            types: typed,
            ..Baseline::default()
        };
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
            // Another version under the same name gives way to the one original with the
            // patched assembly's identity (a renamed copy of it); with none, the name pairs them
            // and the report warns that the identities differ.
            [k] if identity.is_some() && with_identity(&[*k]).is_empty() => {
                if let Some(&[j]) = identity
                    .and_then(|id| self.by_identity.get(id))
                    .map(Vec::as_slice)
                {
                    return pick(j, PairedBy::Identity);
                }
                return pick(*k, PairedBy::FileName);
            }
            [k] => return pick(*k, PairedBy::FileName),
            [] => {}
            several => {
                let same = with_identity(several);
                if let [k] = same[..] {
                    return pick(k, PairedBy::FileName);
                }
                // Several (or none) with its identity: the directories above the file decide,
                // among those with its identity when there are any.
                let candidates = if same.is_empty() { several } else { &same[..] };
                return match self.furthest_tail(input, candidates) {
                    Some(k) => pick(k, PairedBy::Path),
                    None => Err(format!(
                        "{} originals are named {name}, and neither its assembly identity ({}) \
                         nor the directories above it single one out",
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

    /// The one original of `candidates` whose path shares more of its last directories with
    /// `input`'s than any other does (at least one); `None` when no one does.
    fn furthest_tail(&self, input: &Input, candidates: &[usize]) -> Option<usize> {
        let Input::File { path, .. } = input else {
            return None;
        };
        let mut best: Option<(usize, usize)> = None;
        let mut tied = false;
        for &k in candidates {
            let Some(Input::File { path: original, .. }) = &self.assemblies[k].original else {
                continue;
            };
            let n = shared_directories(path, original);
            match best {
                Some((_, b)) if n < b => {}
                Some((_, b)) if n == b => tied = true,
                _ => {
                    best = Some((k, n));
                    tied = false;
                }
            }
        }
        match best {
            Some((k, n)) if n > 0 && !tied => Some(k),
            _ => None,
        }
    }
}

/// How many directories above the file two paths have in common, counted up from the file
/// (`a/x/F.dll` and `b/x/F.dll`: one). Paths are compared as given (made absolute, not
/// resolved), so a tree and its copy elsewhere compare by their relative paths.
fn shared_directories(a: &Path, b: &Path) -> usize {
    let whole = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let (a, b) = (whole(a), whole(b));
    let (mut a, mut b) = (a.parent(), b.parent());
    let mut n = 0;
    while let (Some(x), Some(y)) = (a, b) {
        match (x.file_name(), y.file_name()) {
            (Some(p), Some(q)) if p == q => n += 1,
            _ => break,
        }
        (a, b) = (x.parent(), y.parent());
    }
    n
}

impl<'a> Opened<'a> {
    /// Opens `assembly`'s original again; the error says why it cannot be.
    pub(super) fn new(assembly: &'a BaselineAssembly, types: bool) -> Result<Opened<'a>, String> {
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
            findings: HashMap::new(),
            types,
        })
    }

    /// The original image.
    pub(super) fn image(&self) -> &Image<'static> {
        &self.image
    }

    /// The findings of the original's method `token`, by code, once
    /// [`Opened::verify_methods`] has verified it.
    pub(super) fn counts(&self, token: u32) -> CodeCounts {
        debug_assert!(
            self.findings.contains_key(&token),
            "{token:#x} not verified"
        );
        self.findings.get(&token).cloned().unwrap_or_default()
    }

    /// Verifies the original's methods at `tokens` (methods with a body) that are not verified
    /// yet, as a run over the whole original would: the structure, then the types of those
    /// whose structural findings let the type pass check them. Bodies that do not decode get
    /// one [`BODY_MALFORMED`] finding.
    pub(super) fn verify_methods(
        &mut self,
        tokens: impl IntoIterator<Item = u32>,
        verifier: &mut Verifier,
        types: &mut TypePass<'_>,
    ) {
        let mut todo: Vec<u32> = tokens
            .into_iter()
            .filter(|t| !self.findings.contains_key(t))
            .collect();
        todo.sort_unstable();
        todo.dedup();
        if todo.is_empty() {
            return;
        }
        let image = &self.image;
        let work: Vec<(Method<'_>, Result<Body<'_>, ImageError>)> = todo
            .iter()
            .filter_map(|&t| image.method(t & 0x00FF_FFFF).ok())
            .filter(|m| m.rva() != 0)
            .map(|m| (m, m.decoded_body()))
            .collect();
        let mut resolver = ImageResolver::new(image);
        let mut codes: Vec<Vec<&'static str>> = Vec::with_capacity(work.len());
        let mut accepted = Vec::with_capacity(work.len());
        for (method, body) in &work {
            match body {
                Ok(b) => {
                    resolver.set_method(method, b);
                    let found = verifier.verify(b, &resolver, &crate::verify::Options::ALL);
                    accepted.push(types_checked(found.iter().map(|d| d.code)));
                    codes.push(found.iter().map(|d| d.code.as_str()).collect());
                }
                Err(_) => {
                    accepted.push(false);
                    codes.push(vec![BODY_MALFORMED]);
                }
            }
        }
        if self.types {
            let path = self.assembly.original.as_ref().and_then(input_path);
            types.run(
                image,
                path,
                &work,
                |k| accepted[k],
                &mut TypeSummary::default(),
                |k, code, _, _| codes[k].push(code.as_str()),
            );
        }
        for ((method, _), codes) in work.iter().zip(codes) {
            self.findings
                .insert(method.token().0, counts(codes.iter().copied()));
        }
        // Tokens with no body (never asked for by a match) have no findings either.
        for t in todo {
            self.findings.entry(t).or_default();
        }
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
        let by_name = |n: &str| self.by_name(n).map(Match::Certain);
        match (self.at_token(token), name) {
            (Some(Some(old)), Some(new)) if old == new => Match::Certain(token),
            (Some(old), new) => {
                if let Some(m) = new.and_then(by_name) {
                    return m;
                }
                let why = match (old, new) {
                    (Some(old), Some(_)) => format!("matched by token; the original was {old}"),
                    (None, _) => "matched by token; the original's name cannot be read".into(),
                    (_, None) => "matched by token; the name cannot be read".into(),
                };
                Match::Uncertain(token, why)
            }
            (None, Some(new)) => by_name(new).unwrap_or(Match::None),
            (None, None) => Match::None,
        }
    }
}

/// Reads one original: opens it, with its image-level findings and its identity. Its methods
/// are verified when a patched method is compared with them ([`Opened::verify_methods`]).
fn read_one(input: &Input) -> Result<(BaselineAssembly, Option<String>), String> {
    let image = input
        .open()
        .map_err(|e| format!("baseline {}: {e}", input.name()))?;
    let assembly = BaselineAssembly {
        name: input.name(),
        image: counts(integrity::check(&image).iter().map(|f| f.code.name())),
        original: Some(input.clone()),
    };
    Ok((assembly, identity_of(&image)))
}

/// One patched method's alignment finding: (index into the work list, the finding).
pub(super) type Moved = (usize, crate::verify::Diagnostic);

/// Whether `patched` numbers its tokens as `original` does: every row of the tables tokens
/// name is stored as in the original (a MethodDef's RVA aside; rows after them are new) and
/// each heap those rows and `ldstr` point into begins with the original's. ilcheck's writer
/// keeps them so; a rewriter that writes its metadata anew (Mono.Cecil, dnlib) renumbers.
fn tokens_kept(original: &Image<'_>, patched: &Image<'_>) -> bool {
    use crate::image::Table;
    let prefix = |o: &[u8], p: &[u8]| p.starts_with(o);
    if !(prefix(original.strings().data, patched.strings().data)
        && prefix(original.blobs().data, patched.blobs().data)
        && prefix(original.user_strings().data, patched.user_strings().data)
        && prefix(original.guids().data, patched.guids().data))
    {
        return false;
    }
    let (oh, ph) = (original.tables_header(), patched.tables_header());
    let (ob, pb) = (original.bytes(), patched.bytes());
    [
        Table::Module,
        Table::TypeRef,
        Table::TypeDef,
        Table::Field,
        Table::MethodDef,
        Table::MemberRef,
        Table::StandAloneSig,
        Table::ModuleRef,
        Table::TypeSpec,
        Table::AssemblyRef,
        Table::MethodSpec,
    ]
    .into_iter()
    .all(|t| {
        let (o, p) = (oh.info(t), ph.info(t));
        if o.rows > p.rows || o.row_size != p.row_size {
            return false;
        }
        let size = o.row_size as usize;
        let len = o.rows as usize * size;
        let (Some(orows), Some(prows)) = (
            ob.get(o.offset..o.offset + len),
            pb.get(p.offset..p.offset + len),
        ) else {
            return false;
        };
        if t != Table::MethodDef {
            return orows == prows;
        }
        // A patched method's body moves: its RVA (column 0) is not compared.
        let skip = o.column(0).map_or(0, |(at, width)| at + width);
        orows
            .chunks_exact(size)
            .zip(prows.chunks_exact(size))
            .all(|(a, b)| a[skip..] == b[skip..])
    })
}

/// [`TokenIdentity`] by name: a token stands for the hash of its ILAsm text
/// (`callvirt instance bool [mscorlib]System.Collections.IEnumerator::MoveNext()`, a string
/// literal), read once per token and side. A token that cannot be named is only itself, and
/// never the other side's.
struct NamedTokens<'i> {
    names: [ImageNamer<'i>; 2],
    known: [HashMap<u32, u64>; 2],
    text: String,
}

impl<'i> NamedTokens<'i> {
    fn new(original: &'i Image<'i>, patched: &'i Image<'i>) -> Self {
        NamedTokens {
            names: [ImageNamer::new(original), ImageNamer::new(patched)],
            known: [HashMap::new(), HashMap::new()],
            text: String::new(),
        }
    }

    fn identity(&mut self, side: usize, token: u32) -> u64 {
        use crate::opcode::OperandKind;
        use std::hash::{Hash, Hasher};
        if let Some(&id) = self.known[side].get(&token) {
            return id;
        }
        let kind = match token >> 24 {
            0x70 => OperandKind::String,
            0x11 => OperandKind::Sig,
            _ => OperandKind::Tok,
        };
        self.text.clear();
        let mut h = std::collections::hash_map::DefaultHasher::new();
        match self.names[side].write_token(kind, token, &mut self.text) {
            Ok(()) => (token >> 24, &self.text).hash(&mut h),
            Err(_) => (side, token).hash(&mut h),
        }
        let id = h.finish();
        self.known[side].insert(token, id);
        id
    }
}

impl TokenIdentity for NamedTokens<'_> {
    fn original(&mut self, token: u32) -> u64 {
        self.identity(0, token)
    }

    fn patched(&mut self, token: u32) -> u64 {
        self.identity(1, token)
    }
}

/// Aligns every method of `work` (of `patched`) that has an original in `opened` with it,
/// counting into `summary` and appending the findings to `out`.
pub(super) fn align_image(
    patched: &Image<'_>,
    work: &[(Method<'_>, Result<Body<'_>, ImageError>)],
    opened: &Opened<'_>,
    aligner: &mut Aligner,
    summary: &mut AlignmentSummary,
    out: &mut Vec<Moved>,
) {
    let originals = opened.image();
    // Compared by value where the patched image numbers tokens as its original, by name where
    // it does not.
    let mut named =
        (!tokens_kept(originals, patched)).then(|| NamedTokens::new(originals, patched));
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
        let found = match named.as_mut() {
            Some(ids) => aligner.compare_identified(&o, p, ids),
            None => aligner.compare(&o, p),
        };
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
        Match::Certain(t) if t == token => same_token,
        Match::Certain(t) => body_of(t),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::corpus::{RewriteOptions, RewriteReport, rewrite_image};

    fn corpus(name: &str) -> Vec<u8> {
        std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("corpus/bin")
                .join(name),
        )
        .unwrap()
    }

    /// ilcheck's own outputs keep the original's token numbers (their alignment compares tokens
    /// by value, the fast way); another image does not (compared by name).
    #[test]
    fn ilcheck_outputs_keep_their_tokens_and_another_image_does_not() {
        let data = corpus("features.exe");
        let original = Image::parse(&data).unwrap();
        for transform in [
            crate::ir::Transform::PrologueEpilogue,
            crate::ir::Transform::WrapFinally,
        ] {
            let opts = RewriteOptions {
                transform,
                transform_opts: Default::default(),
                layout: Default::default(),
                methods: None,
                max_listed: 0,
                threads: 1,
                keep_ready_to_run: false,
                keep_old_bodies: false,
                probes: Default::default(),
            };
            let out = rewrite_image(&original, &opts, &mut RewriteReport::default()).unwrap();
            let patched = Image::parse(&out).unwrap();
            assert!(tokens_kept(&original, &patched), "{transform:?}");
        }
        let other = corpus("control_flow.exe");
        assert!(!tokens_kept(&original, &Image::parse(&other).unwrap()));
        assert!(tokens_kept(&original, &original));
    }
}
