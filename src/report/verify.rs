//! Text output of verification runs.

use super::finding::{columns, detail_text};
use super::{thousands, threads_text};
use crate::corpus::{Finding, PairedBy, VerifyReport};
use crate::verify::Verdict;
use std::fmt::Write;

/// Every listed finding with its disassembly window, then the summary.
pub fn verify_text(r: &VerifyReport) -> String {
    let mut s = String::new();
    for f in &r.findings {
        if f.is_image_level() {
            let _ = writeln!(
                s,
                "{}: image, file offset {:#x}: {}: {}",
                f.assembly, f.offset, f.code, f.message
            );
            continue;
        }
        let _ = writeln!(
            s,
            "{}: {} {} IL_{:04x}: {}{}: {}{}",
            f.assembly,
            f.token,
            f.method,
            f.offset,
            f.code,
            unverifiable_mark(f),
            f.message,
            merged(f.duplicates)
        );
        if let Some(why) = &f.baseline_match {
            let _ = writeln!(s, "    (baseline uncertain: {why})");
        }
        s.push_str(&f.window);
        s.push_str(&detail_text(f));
    }
    if r.findings_total > r.findings.len() as u64 {
        let _ = writeln!(
            s,
            "... {} more findings not listed (--max)",
            r.findings_total - r.findings.len() as u64
        );
    }
    for e in &r.image_errors {
        let _ = writeln!(s, "{}: cannot be read: {}", e.path, e.reason);
    }
    for sk in &r.skipped {
        let _ = writeln!(s, "skipped {}: {}", sk.path, sk.reason);
    }
    s.push_str(&codes_text(r));
    s.push_str(&assemblies_text(r));
    let _ = writeln!(
        s,
        "verified {} methods in {} assemblies ({} bytes of IL) in {:.3} s: {:.1} MB/s, single thread; the whole run {:.3} s of wall time on {}",
        thousands(r.methods_checked),
        r.assemblies,
        thousands(r.il_bytes),
        r.verify_seconds,
        r.mb_per_s(),
        r.wall_seconds,
        threads_text(r.threads)
    );
    if r.baseline_assemblies > 0 {
        let _ = writeln!(
            s,
            "baseline: {} assemblies; {} findings also in the baseline not reported; {} methods matched by token only",
            r.baseline_assemblies, r.baseline_suppressed, r.baseline_uncertain
        );
    }
    if let Some(a) = &r.alignment {
        let _ = writeln!(
            s,
            "alignment with the baseline: {} methods compared ({} identical, {} without branches or clauses), {} aligned, {} in part, {} not aligned; {} branch targets and {} clause boundaries checked in {:.3} s",
            thousands(a.methods_compared),
            thousands(a.methods_identical),
            thousands(a.methods_without_targets),
            thousands(a.methods_aligned),
            thousands(a.methods_in_part),
            thousands(a.methods_not_aligned),
            thousands(a.targets_checked),
            thousands(a.boundaries_checked),
            a.seconds
        );
        if !a.not_aligned.is_empty() {
            let _ = writeln!(s, "  not aligned: {}", reasons(&a.not_aligned));
        }
        if !a.unchecked.is_empty() {
            let _ = writeln!(s, "  not checked: {}", reasons(&a.unchecked));
        }
    }
    for a in r.per_assembly.iter() {
        if let Some(why) = &a.no_original {
            let _ = writeln!(s, "{}", no_original_warning(&a.assembly, why));
        }
        if let Some(w) = other_build_warning(a) {
            let _ = writeln!(s, "{w}");
        }
    }
    if !r.image_errors.is_empty() {
        let _ = writeln!(
            s,
            "{} inputs could not be read (listed above): the run is incomplete",
            r.image_errors.len()
        );
    }
    if let Some(t) = &r.types {
        let _ = writeln!(
            s,
            "types ({}): {} methods checked in {:.3} s ({:.1} MB/s), {} in part{}; {} invalid, {} unverifiable{}",
            t.level,
            thousands(t.methods_checked),
            t.seconds,
            t.mb_per_s(),
            thousands(t.methods_in_part),
            if t.in_part.is_empty() {
                String::new()
            } else {
                format!(" ({})", reasons(&t.in_part))
            },
            thousands(t.by_verdict.get("invalid").copied().unwrap_or(0)),
            thousands(t.by_verdict.get("unverifiable").copied().unwrap_or(0)),
            if t.not_reported > 0 {
                " (not reported: --level unverifiable shows them)"
            } else {
                ""
            }
        );
    }
    if let Some(line) = not_reported_text(r) {
        let _ = writeln!(s, "{line}");
    }
    let _ = writeln!(
        s,
        "{} findings in {} methods; {} methods checked only in part (a call signature did not resolve)",
        thousands(r.findings_total),
        thousands(r.methods_with_errors),
        thousands(r.methods_incomplete)
    );
    s
}

/// ` (unverifiable)` after the code of a finding of that class (listed only at `--level
/// unverifiable`); nothing for an invalid one.
pub(super) fn unverifiable_mark(f: &Finding) -> &'static str {
    if f.verdict == Verdict::Unverifiable.as_str() {
        " (unverifiable)"
    } else {
        ""
    }
}

/// What the level left out, by code (most first), and how to see it; `None` when nothing was.
pub(super) fn not_reported_text(r: &VerifyReport) -> Option<String> {
    let total: u64 = r.not_reported.values().sum();
    if total == 0 {
        return None;
    }
    let mut codes: Vec<(&String, &u64)> = r.not_reported.iter().collect();
    codes.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let codes: Vec<String> = codes
        .iter()
        .map(|(c, n)| format!("{c} {}", thousands(**n)))
        .collect();
    Some(format!(
        "level {}: {} unverifiable findings not reported ({}); --level unverifiable lists them",
        r.level,
        thousands(total),
        codes.join(", ")
    ))
}

/// ` (and N more of this code at this instruction)` for a finding others were merged into.
pub(super) fn merged(duplicates: u32) -> String {
    if duplicates == 0 {
        String::new()
    } else {
        format!(" (and {duplicates} more of this code at this instruction)")
    }
}

/// The warning for an assembly compared with an original of another identity (another version
/// under its file name), if it was.
pub fn other_build_warning(a: &crate::corpus::AssemblySummary) -> Option<String> {
    let (theirs, original) = (a.original_identity.as_ref()?, a.original.as_ref()?);
    Some(format!(
        "WARNING: {} ({}) was compared with {original} ({theirs}), another build: findings and \
         moved branches against it may be the versions' differences, not the rewrite's; name the \
         right original with --baseline-pair {}=ORIGINAL",
        a.assembly,
        a.identity.as_deref().unwrap_or("identity unreadable"),
        a.assembly
    ))
}

/// The warning for an assembly verified against a baseline that has no original for it.
pub fn no_original_warning(assembly: &str, why: &str) -> String {
    format!(
        "WARNING: {assembly} has no original among the baseline assemblies ({why}): every \
         finding is reported as new; name its original with --baseline-pair {assembly}=ORIGINAL"
    )
}

/// The summary per code: findings, methods, ECMA-335 reference; most findings first.
fn codes_text(r: &VerifyReport) -> String {
    if r.codes.is_empty() {
        return String::new();
    }
    let mut rows = vec![vec![
        "code".to_string(),
        "findings".into(),
        "methods".into(),
        "ECMA-335".into(),
    ]];
    for (code, c) in r.codes_by_count() {
        rows.push(vec![
            code.to_string(),
            thousands(c.findings),
            thousands(c.methods),
            c.reference.clone(),
        ]);
    }
    format!("findings by code:\n{}", columns(&rows, "  ", &[1, 2]))
}

/// Per assembly: those with findings when several were read, and every pairing with an
/// original that is not by file name (a reader should see what was compared with what).
fn assemblies_text(r: &VerifyReport) -> String {
    let mut s = String::new();
    let several = r.per_assembly.len() > 1;
    for a in &r.per_assembly {
        if several && a.findings > 0 {
            let _ = writeln!(
                s,
                "{}: {} findings in {} of {} methods",
                a.assembly,
                thousands(a.findings),
                thousands(a.methods_with_findings),
                thousands(a.methods_checked)
            );
        }
        if let (Some(original), Some(by)) = (&a.original, a.paired_by)
            && by != PairedBy::FileName
        {
            let _ = writeln!(
                s,
                "baseline: {} compared with {original} (paired by {})",
                a.assembly,
                by.as_str()
            );
        }
    }
    s
}

/// `reason: count, …` of an alignment summary's counts.
pub(super) fn reasons(counts: &std::collections::BTreeMap<&'static str, u64>) -> String {
    counts
        .iter()
        .map(|(k, v)| format!("{k} {}", thousands(*v)))
        .collect::<Vec<_>>()
        .join(", ")
}
