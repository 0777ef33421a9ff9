//! Text and Markdown output of verification runs.

use super::thousands;
use crate::corpus::VerifyReport;
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
            "{}: {} {} IL_{:04x}: {}: {}",
            f.assembly, f.token, f.method, f.offset, f.code, f.message
        );
        if let Some(why) = &f.baseline_match {
            let _ = writeln!(s, "    (baseline uncertain: {why})");
        }
        s.push_str(&f.window);
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
    let _ = writeln!(
        s,
        "verified {} methods in {} assemblies ({} bytes of IL) in {:.3} s: {:.1} MB/s, single thread",
        thousands(r.methods_checked),
        r.assemblies,
        thousands(r.il_bytes),
        r.verify_seconds,
        r.mb_per_s()
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
    for a in &r.baseline_missing {
        let _ = writeln!(
            s,
            "WARNING: {a} has no original among the baseline assemblies (matched by file name): every finding is reported as new"
        );
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
    let _ = writeln!(
        s,
        "{} findings in {} methods; {} methods checked only in part (a call signature did not resolve)",
        thousands(r.findings_total),
        thousands(r.methods_with_errors),
        thousands(r.methods_incomplete)
    );
    s
}

/// `reason: count, …` of an alignment summary's counts.
fn reasons(counts: &std::collections::BTreeMap<&'static str, u64>) -> String {
    counts
        .iter()
        .map(|(k, v)| format!("{k} {}", thousands(*v)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A Markdown report of a verification run.
pub fn verify_markdown(r: &VerifyReport, command: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# ilcheck verification report\n\nCommand: `{command}`\n\nSources: {}\n",
        r.sources.join(", ")
    );
    let _ = writeln!(s, "| measure | value |\n|---|---:|");
    for (k, v) in [
        ("assemblies", thousands(r.assemblies)),
        ("methods checked", thousands(r.methods_checked)),
        ("methods with findings", thousands(r.methods_with_errors)),
        ("findings", thousands(r.findings_total)),
        (
            "methods checked in part (unresolved call signature)",
            thousands(r.methods_incomplete),
        ),
        ("IL bytes", thousands(r.il_bytes)),
        (
            "verification throughput",
            format!(
                "{:.1} MB/s of IL ({:.3} s, single thread)",
                r.mb_per_s(),
                r.verify_seconds
            ),
        ),
    ] {
        let _ = writeln!(s, "| {k} | {v} |");
    }
    if let Some(a) = &r.alignment {
        let _ = writeln!(s, "\n## Alignment with the baseline\n");
        let _ = writeln!(s, "| measure | value |\n|---|---:|");
        for (k, v) in [
            ("methods compared", thousands(a.methods_compared)),
            ("identical to the original", thousands(a.methods_identical)),
            (
                "without branches or clauses",
                thousands(a.methods_without_targets),
            ),
            ("aligned", thousands(a.methods_aligned)),
            ("aligned in part", thousands(a.methods_in_part)),
            ("not aligned", thousands(a.methods_not_aligned)),
            ("branch targets checked", thousands(a.targets_checked)),
            ("clause boundaries checked", thousands(a.boundaries_checked)),
            ("time", format!("{:.3} s, single thread", a.seconds)),
        ] {
            let _ = writeln!(s, "| {k} | {v} |");
        }
        for (what, counts) in [
            ("not aligned", &a.not_aligned),
            ("not checked", &a.unchecked),
        ] {
            if !counts.is_empty() {
                let _ = writeln!(s, "\n{what}: {}", reasons(counts));
            }
        }
    }
    if !r.image_errors.is_empty() {
        let _ = writeln!(s, "\n## Inputs that could not be read\n");
        for e in &r.image_errors {
            let _ = writeln!(s, "- {}: {}", e.path, e.reason);
        }
    }
    if !r.skipped.is_empty() {
        let _ = writeln!(s, "\n## Skipped (not .NET assemblies)\n");
        for e in &r.skipped {
            let _ = writeln!(s, "- {}: {}", e.path, e.reason);
        }
    }
    if !r.findings.is_empty() {
        let _ = writeln!(s, "\n## Findings\n");
        for f in &r.findings {
            if f.is_image_level() {
                let _ = writeln!(
                    s,
                    "### {} (image, file offset {:#x})\n\n{}: {}\n",
                    f.code, f.offset, f.assembly, f.message
                );
                continue;
            }
            let _ = writeln!(
                s,
                "### {} `{}` {} IL_{:04x}\n\n{}: {}\n",
                f.code, f.token, f.method, f.offset, f.assembly, f.message
            );
            if !f.window.is_empty() {
                let _ = writeln!(s, "```\n{}```\n", f.window);
            }
        }
    }
    s
}
