//! Round trips: decode and losslessly re-encode every method body, compare with the original
//! bytes, and count what was seen.

use super::{Input, Skipped};
use crate::body::{Body, ClauseKind, DecodeError, Header, SectionContent};
use crate::image::{Image, ImageError};
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Instant;

/// What a corpus run found wrong with one method body or image.
#[derive(Clone, Debug, Serialize)]
pub struct Failure {
    /// The input's name ([`Input::name`]).
    pub assembly: String,
    /// Full method name, or empty for image-level failures.
    pub method: String,
    /// MethodDef token as `0x06xxxxxx`, or empty.
    pub token: String,
    /// File offset of the fault.
    pub offset: usize,
    /// `decode_error`, `encode_error`, `mismatch`, `image_mismatch`, `image_error`,
    /// `image_integrity` (an [`IntegrityCode`](crate::image::IntegrityCode): the file is cut or
    /// a directory points outside its section), or `raw_code` (listed apart: not a failure).
    pub kind: &'static str,
    /// What is wrong: the error's text, or where the re-encoding first differs.
    pub message: String,
    /// The original body bytes (for diffs; not serialised).
    #[serde(skip)]
    pub original: Vec<u8>,
    /// The re-encoded body bytes (for diffs; not serialised).
    #[serde(skip)]
    pub reencoded: Vec<u8>,
}

impl Failure {
    /// A failure of a whole assembly (no method): `offset` is a file offset.
    pub fn image(assembly: &str, offset: usize, kind: &'static str, message: String) -> Failure {
        Failure {
            assembly: assembly.to_string(),
            method: String::new(),
            token: String::new(),
            offset,
            kind,
            message,
            original: Vec::new(),
            reencoded: Vec::new(),
        }
    }
}

/// Counts of clause kinds, over the clauses of every distinct body decoded.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct ClauseCounts {
    /// Typed handlers (flags 0).
    pub catch: u64,
    /// Filter clauses.
    pub filter: u64,
    /// Finally clauses.
    pub finally: u64,
    /// Fault clauses.
    pub fault: u64,
    /// Clauses whose flags name no handler kind.
    pub invalid: u64,
}

/// Statistics of `--canonical`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CanonicalStats {
    /// Distinct bodies that decoded and re-encoded losslessly (identical or not), each also
    /// encoded canonically.
    pub bodies_checked: u64,
    /// Of those, bodies whose stored bytes are not what the canonical encoder writes (or that
    /// it cannot encode).
    pub non_canonical: u64,
    /// Reason → bodies; a body can have several reasons.
    pub reasons: BTreeMap<&'static str, u64>,
    /// Over the non-canonical bodies: stored bytes minus canonical bytes (negative when the
    /// canonical forms are longer).
    pub bytes_saved: i64,
    /// Time spent in the canonical encoder, single thread.
    pub canonical_seconds: f64,
}

/// The round-trip report. The JSON schema is documented in `docs/roundtrip-json.md`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RoundtripReport {
    /// `ilcheck.roundtrip/1`, set by [`roundtrip`].
    pub schema: &'static str,
    /// What was read: the paths given, or the default corpus's parts.
    pub sources: Vec<String>,
    /// Images read.
    pub assemblies: u64,
    /// Files found while scanning a directory that are not .NET assemblies.
    pub skipped: Vec<Skipped>,
    /// Inputs that could not be read (each also a failure of kind `image_error`).
    pub image_errors: u64,
    /// Image integrity findings (each also a failure of kind `image_integrity`).
    pub integrity_findings: u64,
    /// MethodDef rows.
    pub method_defs: u64,
    /// MethodDefs with RVA 0 (abstract, extern, runtime-implemented, P/Invoke): no body.
    pub rva_zero: u64,
    /// Distinct method bodies (a body shared by several MethodDefs counts once).
    pub bodies: u64,
    /// Body RVAs used by more than one MethodDef.
    pub shared_bodies: u64,
    /// Distinct bodies with a tiny header.
    pub tiny: u64,
    /// Distinct bodies with a fat header.
    pub fat: u64,
    /// Exception-handling sections in small form.
    pub eh_sections_small: u64,
    /// Exception-handling sections in fat form.
    pub eh_sections_fat: u64,
    /// OptIL and unknown sections (kept raw).
    pub other_sections: u64,
    /// Clauses by kind.
    pub clauses: ClauseCounts,
    /// Instructions decoded (none counted for a body kept raw).
    pub instructions: u64,
    /// Bodies whose code does not decode to whole, known instructions; their code is kept raw
    /// from the fault on, so they still round-trip. Not a codec failure: the verifier reports
    /// them.
    pub raw_code: u64,
    /// The first of those (up to the listing limit), as records of kind `raw_code`.
    pub raw_code_listed: Vec<Failure>,
    /// Bytes of code (the code size of every distinct body decoded).
    pub il_bytes: u64,
    /// Bytes of whole bodies: headers, code, padding and sections.
    pub body_bytes: u64,
    /// Bodies whose lossless re-encoding equals the original bytes.
    pub identical: u64,
    /// Bodies whose lossless re-encoding differs.
    pub mismatches: u64,
    /// Bodies whose header or sections do not decode (a misaligned fat header included), and
    /// MethodDefs whose RVA lies in no section.
    pub decode_errors: u64,
    /// Bodies that decoded but could not be re-encoded.
    pub encode_errors: u64,
    /// Images that, with every body written back re-encoded, equal the file byte for byte.
    pub images_identical: u64,
    /// Time to decode every body (header, sections, every instruction), single thread.
    pub decode_seconds: f64,
    /// Time to re-encode every body losslessly, single thread.
    pub encode_seconds: f64,
    /// Threads that round-tripped assemblies side by side ([`RoundtripOptions::threads`]).
    pub threads: u64,
    /// Wall time of the whole run (opening, decoding, encoding, comparing every image), on
    /// [`RoundtripReport::threads`] threads.
    pub wall_seconds: f64,
    /// With [`RoundtripOptions::canonical`]: the canonical-form statistics; else `None`.
    pub canonical: Option<CanonicalStats>,
    /// The first failures, up to the listing limit.
    pub failures: Vec<Failure>,
    /// Failures beyond the listing limit, counted but not listed.
    pub failures_not_listed: u64,
}

impl RoundtripReport {
    /// Nothing wrong: no mismatch, decode, encode or image error, no integrity finding, and
    /// every image identical after the round trip.
    pub fn all_identical(&self) -> bool {
        self.mismatches == 0
            && self.decode_errors == 0
            && self.encode_errors == 0
            && self.image_errors == 0
            && self.integrity_findings == 0
            && self.images_identical == self.assemblies
    }

    /// MB/s (10^6 bytes) of IL for a phase.
    pub fn mb_per_s(&self, seconds: f64) -> f64 {
        if seconds > 0.0 {
            self.il_bytes as f64 / seconds / 1e6
        } else {
            0.0
        }
    }

    /// Instructions per second for a phase.
    pub fn instructions_per_s(&self, seconds: f64) -> f64 {
        if seconds > 0.0 {
            self.instructions as f64 / seconds
        } else {
            0.0
        }
    }
}

/// Options of a round-trip run.
#[derive(Clone, Copy, Debug)]
pub struct RoundtripOptions {
    /// Also encode every body canonically and count the non-canonical ones (`--canonical`).
    pub canonical: bool,
    /// How many failures keep their bytes and are listed.
    pub max_failures: usize,
    /// Threads round-tripping whole assemblies side by side; 0: one per available core (never
    /// more than there are inputs). The report is the same for any number.
    pub threads: usize,
}

impl Default for RoundtripOptions {
    fn default() -> Self {
        RoundtripOptions {
            canonical: false,
            max_failures: 20,
            threads: 0,
        }
    }
}

/// Round-trips every body of every input, accumulating into `report`. `progress` is called
/// after each input, in input order. With more than one thread
/// ([`RoundtripOptions::threads`]) whole assemblies are round-tripped side by side, each into a
/// report of its own, added to `report` in input order: the report is the one a single thread
/// makes, timing fields apart.
pub fn roundtrip(
    inputs: &[Input],
    opts: RoundtripOptions,
    report: &mut RoundtripReport,
    mut progress: impl FnMut(&Input),
) {
    report.schema = "ilcheck.roundtrip/1";
    let threads = super::threads_for(opts.threads).min(inputs.len()).max(1);
    report.threads = threads as u64;
    let start = Instant::now();
    // What is left of the listing limits when an input starts: never less than what is left
    // when its report is added, so the same failures are listed for any number of threads.
    let listed = std::sync::atomic::AtomicUsize::new(report.failures.len());
    let listed_raw = std::sync::atomic::AtomicUsize::new(report.raw_code_listed.len());
    let room = |n: &std::sync::atomic::AtomicUsize| {
        opts.max_failures
            .saturating_sub(n.load(std::sync::atomic::Ordering::Relaxed))
    };
    super::each_input(
        inputs,
        threads,
        Scratch::default,
        |scratch, input| {
            let mut part = RoundtripReport::default();
            let rooms = Rooms {
                failures: room(&listed),
                raw: room(&listed_raw),
            };
            roundtrip_input(input, opts, rooms, &mut part, scratch);
            part
        },
        |i, part| {
            report.absorb(part, opts.max_failures);
            let ordering = std::sync::atomic::Ordering::Relaxed;
            listed.store(report.failures.len(), ordering);
            listed_raw.store(report.raw_code_listed.len(), ordering);
            progress(&inputs[i]);
        },
    );
    report.wall_seconds += start.elapsed().as_secs_f64();
}

/// How many failures and raw-code records an input may still list.
#[derive(Clone, Copy)]
struct Rooms {
    failures: usize,
    raw: usize,
}

fn roundtrip_input(
    input: &Input,
    opts: RoundtripOptions,
    rooms: Rooms,
    report: &mut RoundtripReport,
    scratch: &mut Scratch,
) {
    match input.open() {
        Ok(image) => {
            report.assemblies += 1;
            roundtrip_image(&input.name(), &image, (opts, rooms), report, scratch);
        }
        Err(e @ (ImageError::NotDotNet | ImageError::Pe(_) | ImageError::NoOptionalHeader))
            if !input.must_be_assembly() =>
        {
            report.skipped.push(Skipped {
                path: input.name(),
                reason: e.to_string(),
            })
        }
        Err(e) => {
            report.image_errors += 1;
            push_failure(
                report,
                rooms,
                Failure::image(&input.name(), 0, "image_error", e.to_string()),
            );
        }
    }
}

impl RoundtripReport {
    /// Adds the report of the inputs round-tripped after this one's: counts and times added,
    /// lists appended (failures and raw-code records while fewer than `max_failures` are
    /// listed; failures past that counted as not listed). The run's own fields (schema,
    /// sources, threads) stay as they are.
    fn absorb(&mut self, part: RoundtripReport, max_failures: usize) {
        let RoundtripReport {
            schema: _,
            sources: _,
            assemblies,
            skipped,
            image_errors,
            integrity_findings,
            method_defs,
            rva_zero,
            bodies,
            shared_bodies,
            tiny,
            fat,
            eh_sections_small,
            eh_sections_fat,
            other_sections,
            clauses,
            instructions,
            raw_code,
            raw_code_listed,
            il_bytes,
            body_bytes,
            identical,
            mismatches,
            decode_errors,
            encode_errors,
            images_identical,
            decode_seconds,
            encode_seconds,
            threads: _,
            wall_seconds: _,
            canonical,
            failures,
            failures_not_listed,
        } = part;
        self.assemblies += assemblies;
        self.skipped.extend(skipped);
        self.image_errors += image_errors;
        self.integrity_findings += integrity_findings;
        self.method_defs += method_defs;
        self.rva_zero += rva_zero;
        self.bodies += bodies;
        self.shared_bodies += shared_bodies;
        self.tiny += tiny;
        self.fat += fat;
        self.eh_sections_small += eh_sections_small;
        self.eh_sections_fat += eh_sections_fat;
        self.other_sections += other_sections;
        self.clauses.absorb(clauses);
        self.instructions += instructions;
        self.raw_code += raw_code;
        let room = max_failures.saturating_sub(self.raw_code_listed.len());
        self.raw_code_listed
            .extend(raw_code_listed.into_iter().take(room));
        self.il_bytes += il_bytes;
        self.body_bytes += body_bytes;
        self.identical += identical;
        self.mismatches += mismatches;
        self.decode_errors += decode_errors;
        self.encode_errors += encode_errors;
        self.images_identical += images_identical;
        self.decode_seconds += decode_seconds;
        self.encode_seconds += encode_seconds;
        if let Some(c) = canonical {
            self.canonical
                .get_or_insert_with(CanonicalStats::default)
                .absorb(c);
        }
        let room = max_failures.saturating_sub(self.failures.len());
        let not_taken = failures.len().saturating_sub(room) as u64;
        self.failures.extend(failures.into_iter().take(room));
        self.failures_not_listed += failures_not_listed + not_taken;
    }
}

impl ClauseCounts {
    fn absorb(&mut self, b: ClauseCounts) {
        self.catch += b.catch;
        self.filter += b.filter;
        self.finally += b.finally;
        self.fault += b.fault;
        self.invalid += b.invalid;
    }
}

impl CanonicalStats {
    fn absorb(&mut self, b: CanonicalStats) {
        self.bodies_checked += b.bodies_checked;
        self.non_canonical += b.non_canonical;
        super::verify::add_counts(&mut self.reasons, b.reasons);
        self.bytes_saved += b.bytes_saved;
        self.canonical_seconds += b.canonical_seconds;
    }
}

/// Buffers reused across images.
#[derive(Default)]
struct Scratch {
    /// (file offset, MethodDef rid, RVA) of each distinct body.
    bodies: Vec<(usize, u32, u32)>,
    encoded: Vec<u8>,
    spans: Vec<(usize, usize)>,
    canonical: Vec<u8>,
}

fn push_failure(report: &mut RoundtripReport, rooms: Rooms, failure: Failure) {
    if report.failures.len() < rooms.failures {
        report.failures.push(failure);
    } else {
        report.failures_not_listed += 1;
    }
}

fn method_name(image: &Image<'_>, rid: u32) -> String {
    image
        .method(rid)
        .and_then(|m| m.full_name())
        .unwrap_or_else(|e| format!("<name unreadable: {e}>"))
}

fn roundtrip_image(
    name: &str,
    image: &Image<'_>,
    (opts, rooms): (RoundtripOptions, Rooms),
    report: &mut RoundtripReport,
    scratch: &mut Scratch,
) {
    let file = image.bytes();
    let stats = image.method_stats();
    report.method_defs += stats.method_defs as u64;
    report.rva_zero += stats.rva_zero as u64;
    report.shared_bodies += stats.shared_bodies as u64;

    // Distinct bodies by file offset, in file order.
    scratch.bodies.clear();
    for m in image.methods() {
        if let Some(offset) = m.body_offset() {
            scratch.bodies.push((offset, m.rid(), m.rva()));
        } else if m.rva() != 0 {
            report.decode_errors += 1;
            let err = ImageError::BodyOutsideSections {
                token: m.token(),
                rva: m.rva(),
            };
            push_failure(
                report,
                rooms,
                failure(name, image, m.rid(), 0, "decode_error", err.to_string()),
            );
        }
    }
    scratch.bodies.sort_unstable();
    scratch.bodies.dedup_by_key(|b| b.0);

    // Decode, timed on its own: header, sections, every instruction checked.
    let start = Instant::now();
    type Decoded<'a> = Result<(Body<'a>, Result<usize, DecodeError>), DecodeError>;
    let decoded: Vec<Decoded<'_>> = scratch
        .bodies
        .iter()
        .map(|&(offset, _, rva)| {
            let bytes = &file[offset..];
            if !rva.is_multiple_of(4) && bytes.first().is_some_and(|b| b & 3 == 3) {
                return Err(DecodeError::MisalignedFatHeader { rva });
            }
            let body = Body::parse(bytes)?;
            // Code that does not decode to whole instructions is kept raw from the fault on:
            // the body still round-trips, and the verifier names the fault.
            let instructions = body.validate_code();
            Ok((body, instructions))
        })
        .collect();
    report.decode_seconds += start.elapsed().as_secs_f64();

    // Lossless encode, timed on its own, into one buffer.
    let start = Instant::now();
    scratch.encoded.clear();
    scratch.spans.clear();
    let mut encode_failed = vec![None; decoded.len()];
    for (i, d) in decoded.iter().enumerate() {
        let at = scratch.encoded.len();
        if let Ok((body, _)) = d
            && let Err(e) = body.encode(&mut scratch.encoded)
        {
            encode_failed[i] = Some(e.to_string());
            scratch.encoded.truncate(at);
        }
        scratch.spans.push((at, scratch.encoded.len() - at));
    }
    report.encode_seconds += start.elapsed().as_secs_f64();

    for f in crate::image::integrity::check(image) {
        report.integrity_findings += 1;
        push_failure(
            report,
            rooms,
            Failure::image(
                name,
                usize::try_from(f.offset).unwrap_or(usize::MAX),
                "image_integrity",
                format!("{}: {}", f.code.name(), f.message),
            ),
        );
    }

    // Compare and count. Writing every re-encoded body back over the image leaves the file
    // unchanged exactly when each one equals the bytes it would overwrite: that is checked per
    // body, without copying the file (which may be large, or sparse).
    let mut image_diff: Option<usize> = None;
    for (i, d) in decoded.iter().enumerate() {
        let (offset, rid, _) = scratch.bodies[i];
        let (body, instructions) = match d {
            Ok(v) => v,
            Err(e) => {
                report.decode_errors += 1;
                push_failure(
                    report,
                    rooms,
                    failure(
                        name,
                        image,
                        rid,
                        offset + e.offset(),
                        "decode_error",
                        e.to_string(),
                    ),
                );
                continue;
            }
        };
        report.bodies += 1;
        let instructions = match instructions {
            Ok(n) => *n,
            Err(e) => {
                report.raw_code += 1;
                if report.raw_code_listed.len() < rooms.raw {
                    let mut f = failure(
                        name,
                        image,
                        rid,
                        offset + e.offset(),
                        "raw_code",
                        e.to_string(),
                    );
                    f.message = format!("code kept raw from here: {e}");
                    report.raw_code_listed.push(f);
                }
                0
            }
        };
        count_body(report, body, instructions);
        if let Some(msg) = &encode_failed[i] {
            report.encode_errors += 1;
            push_failure(
                report,
                rooms,
                failure(name, image, rid, offset, "encode_error", msg.clone()),
            );
            continue;
        }
        let (at, len) = scratch.spans[i];
        let encoded = &scratch.encoded[at..at + len];
        let original = &file[offset..offset + body.len()];
        if encoded == original {
            report.identical += 1;
        } else {
            report.mismatches += 1;
            let first_diff = encoded
                .iter()
                .zip(original)
                .position(|(a, b)| a != b)
                .unwrap_or(len.min(original.len()));
            let mut f = failure(
                name,
                image,
                rid,
                offset + first_diff,
                "mismatch",
                format!("re-encoded body differs from byte {first_diff} on"),
            );
            f.original = original.to_vec();
            f.reencoded = encoded.to_vec();
            push_failure(report, rooms, f);
        }
        if let Some(dst) = file.get(offset..offset + len)
            && let Some(d) = dst.iter().zip(encoded).position(|(a, b)| a != b)
        {
            image_diff = Some(image_diff.map_or(offset + d, |at| at.min(offset + d)));
        }
        if opts.canonical {
            canonical_stats(report, body, original, &mut scratch.canonical);
        }
    }
    if let Some(at) = image_diff {
        push_failure(
            report,
            rooms,
            Failure::image(
                name,
                at,
                "image_mismatch",
                format!("image with re-encoded bodies differs from the file at offset {at:#x}"),
            ),
        );
    } else {
        report.images_identical += 1;
    }
}

fn failure(
    assembly: &str,
    image: &Image<'_>,
    rid: u32,
    offset: usize,
    kind: &'static str,
    message: String,
) -> Failure {
    Failure {
        assembly: assembly.to_string(),
        method: method_name(image, rid),
        token: format!("{:#010x}", 0x0600_0000 | rid),
        offset,
        kind,
        message,
        original: Vec::new(),
        reencoded: Vec::new(),
    }
}

fn count_body(report: &mut RoundtripReport, body: &Body<'_>, instructions: usize) {
    report.instructions += instructions as u64;
    report.il_bytes += body.code.len() as u64;
    report.body_bytes += body.len() as u64;
    match body.header {
        Header::Tiny => report.tiny += 1,
        Header::Fat(_) => report.fat += 1,
    }
    for s in &body.sections {
        match (&s.content, s.is_fat()) {
            (SectionContent::Eh { .. }, false) => report.eh_sections_small += 1,
            (SectionContent::Eh { .. }, true) => report.eh_sections_fat += 1,
            (SectionContent::Raw(_), _) => report.other_sections += 1,
        }
        for c in s.clauses() {
            let counts = &mut report.clauses;
            match c.kind() {
                ClauseKind::Catch => counts.catch += 1,
                ClauseKind::Filter => counts.filter += 1,
                ClauseKind::Finally => counts.finally += 1,
                ClauseKind::Fault => counts.fault += 1,
                ClauseKind::Invalid => counts.invalid += 1,
            }
        }
    }
}

/// Why a body's stored form is not the canonical one; several reasons may hold.
pub fn noncanonical_reasons(body: &Body<'_>) -> Vec<&'static str> {
    let mut reasons = Vec::new();
    let parts = body.parts();
    if let Some(h) = body.fat() {
        if parts.tiny_eligible() {
            reasons.push("fat header where tiny fits");
        }
        if h.size_dwords != 3 {
            reasons.push("fat header size other than 12 bytes");
        }
        let known =
            crate::body::FORMAT_FAT | crate::body::FLAG_MORE_SECTS | crate::body::FLAG_INIT_LOCALS;
        if h.flags & !known != 0 {
            reasons.push("unknown fat header flag bits");
        }
        if h.flags & crate::body::FLAG_MORE_SECTS != 0 && body.sections.is_empty() {
            reasons.push("MoreSects with no section");
        }
    }
    let eh_sections = body.sections.iter().filter(|s| s.is_eh()).count();
    if eh_sections > 1 {
        reasons.push("several EH sections");
    }
    if body.sections.iter().any(|s| s.is_eh() && s.is_fat()) && parts.small_eh_eligible() {
        reasons.push("fat EH section where small fits");
    }
    if body
        .sections
        .iter()
        .any(|s| s.padding.iter().any(|&b| b != 0))
    {
        reasons.push("non-zero padding before a section");
    }
    if body.sections.iter().any(|s| s.reserved != 0) {
        reasons.push("non-zero reserved bytes in a small section header");
    }
    if body
        .sections
        .iter()
        .any(|s| matches!(s.content, SectionContent::Eh { trailing, .. } if !trailing.is_empty()))
    {
        reasons.push("EH DataSize not a whole number of clauses");
    }
    if body
        .sections
        .iter()
        .any(|s| s.is_eh() && s.clauses().is_empty())
    {
        reasons.push("empty EH section");
    }
    if body.sections.iter().any(|s| !s.is_eh()) {
        reasons.push("non-EH section (OptIL or unknown)");
    }
    reasons
}

fn canonical_stats(
    report: &mut RoundtripReport,
    body: &Body<'_>,
    original: &[u8],
    buf: &mut Vec<u8>,
) {
    let stats = report.canonical.get_or_insert_with(CanonicalStats::default);
    stats.bodies_checked += 1;
    let start = Instant::now();
    buf.clear();
    let ok = body.encode_canonical(buf).is_ok();
    stats.canonical_seconds += start.elapsed().as_secs_f64();
    // Canonical means the stored bytes are what the canonical encoder writes.
    let same = ok && original == buf.as_slice();
    if !same {
        stats.non_canonical += 1;
        // A failed encoding left a partial buffer: it saves nothing measurable.
        if ok {
            stats.bytes_saved += body.len() as i64 - buf.len() as i64;
        }
        let reasons = noncanonical_reasons(body);
        if reasons.is_empty() {
            *stats.reasons.entry("other").or_default() += 1;
        }
        for r in reasons {
            *stats.reasons.entry(r).or_default() += 1;
        }
    }
}
