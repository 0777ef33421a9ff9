//! Rendering of corpus-run results: terminal summaries, Markdown reports (round trips with unified
//! diffs of disassemblies and hex dumps), and SARIF for verification findings.

mod finding;
mod rewrite;
mod sarif;
mod verify;
mod verify_md;

pub use rewrite::{Invalidated, rewrite_text};
pub use sarif::verify_sarif;
pub use verify::{no_original_warning, other_build_warning, verify_text};
pub use verify_md::verify_markdown;

use crate::body::Body;
use crate::corpus::{Failure, RoundtripReport};
use crate::disasm::disassemble;
use similar::TextDiff;
use std::fmt::Write;

/// `1234567` → `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `1 thread`, `2 threads`.
fn threads_text(n: u64) -> String {
    format!("{n} thread{}", if n == 1 { "" } else { "s" })
}

fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        100.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

/// The terminal summary of a round-trip run.
pub fn roundtrip_summary(r: &RoundtripReport) -> String {
    let mut s = String::new();
    let _ = write_summary(&mut s, r);
    s
}

fn write_summary(s: &mut String, r: &RoundtripReport) -> std::fmt::Result {
    writeln!(
        s,
        "assemblies: {} read, {} skipped, {} unreadable",
        r.assemblies,
        r.skipped.len(),
        r.image_errors
    )?;
    writeln!(
        s,
        "methods:    {} MethodDefs, {} with RVA 0, {} distinct bodies ({} shared by several methods)",
        thousands(r.method_defs),
        thousands(r.rva_zero),
        thousands(r.bodies + r.decode_errors),
        thousands(r.shared_bodies)
    )?;
    writeln!(
        s,
        "headers:    {} tiny, {} fat; EH sections {} small, {} fat; {} other sections",
        thousands(r.tiny),
        thousands(r.fat),
        thousands(r.eh_sections_small),
        thousands(r.eh_sections_fat),
        thousands(r.other_sections)
    )?;
    let c = &r.clauses;
    writeln!(
        s,
        "clauses:    {} catch, {} filter, {} finally, {} fault, {} invalid",
        thousands(c.catch),
        thousands(c.filter),
        thousands(c.finally),
        thousands(c.fault),
        thousands(c.invalid)
    )?;
    writeln!(
        s,
        "IL:         {} bytes in {} instructions ({} body bytes); {} bodies with undecodable code kept raw",
        thousands(r.il_bytes),
        thousands(r.instructions),
        thousands(r.body_bytes),
        r.raw_code
    )?;
    let total = r.bodies + r.decode_errors;
    writeln!(
        s,
        "round trip: {} of {} bodies identical ({:.3}%); {} mismatches, {} decode errors, {} encode errors; {} of {} images identical",
        thousands(r.identical),
        thousands(total),
        pct(r.identical, total),
        r.mismatches,
        r.decode_errors,
        r.encode_errors,
        r.images_identical,
        r.assemblies
    )?;
    writeln!(
        s,
        "throughput: decode {:.1} MB/s of IL ({:.1} M instructions/s, {:.3} s); lossless encode {:.1} MB/s ({:.3} s); single thread; the whole run {:.3} s of wall time on {}",
        r.mb_per_s(r.decode_seconds),
        r.instructions_per_s(r.decode_seconds) / 1e6,
        r.decode_seconds,
        r.mb_per_s(r.encode_seconds),
        r.encode_seconds,
        r.wall_seconds,
        threads_text(r.threads)
    )?;
    if let Some(cs) = &r.canonical {
        writeln!(
            s,
            "canonical:  {} of {} bodies not in canonical form ({:.2}%); canonical form {} bytes smaller in total",
            thousands(cs.non_canonical),
            thousands(cs.bodies_checked),
            pct(cs.non_canonical, cs.bodies_checked),
            cs.bytes_saved
        )?;
        for (reason, n) in &cs.reasons {
            writeln!(s, "            {:>9}  {reason}", thousands(*n))?;
        }
    }
    for f in &r.failures {
        writeln!(
            s,
            "FAIL {} {} {} {} @ {:#x}: {}",
            f.kind, f.assembly, f.token, f.method, f.offset, f.message
        )?;
    }
    if r.failures_not_listed > 0 {
        writeln!(s, "... and {} more failures", r.failures_not_listed)?;
    }
    for f in &r.raw_code_listed {
        writeln!(
            s,
            "raw code {} {} {} @ {:#x}: {}",
            f.assembly, f.token, f.method, f.offset, f.message
        )?;
    }
    for sk in &r.skipped {
        writeln!(s, "skipped {}: {}", sk.path, sk.reason)?;
    }
    Ok(())
}

/// Hex dump, 16 bytes a line with offsets, for line diffs.
pub fn hex_lines(bytes: &[u8]) -> String {
    let mut s = String::new();
    for (i, chunk) in bytes.chunks(16).enumerate() {
        let _ = writeln!(s, "{:04x}: {}", i * 16, crate::disasm::hex(chunk));
    }
    s
}

fn disasm_or_error(bytes: &[u8]) -> String {
    match Body::parse(bytes) {
        Ok(b) => disassemble(&b),
        Err(e) => format!("// does not decode: {e}\n"),
    }
}

/// Unified diffs (disassembly, then hex) of a mismatching body.
pub fn failure_diffs(f: &Failure) -> String {
    let mut s = String::new();
    let (a, b) = (disasm_or_error(&f.original), disasm_or_error(&f.reencoded));
    let _ = write!(
        s,
        "{}",
        TextDiff::from_lines(&a, &b)
            .unified_diff()
            .context_radius(4)
            .header("original", "re-encoded")
    );
    let (a, b) = (hex_lines(&f.original), hex_lines(&f.reencoded));
    let _ = write!(
        s,
        "{}",
        TextDiff::from_lines(&a, &b)
            .unified_diff()
            .context_radius(2)
            .header("original (hex)", "re-encoded (hex)")
    );
    s
}

/// A Markdown report of a round-trip run.
pub fn roundtrip_markdown(r: &RoundtripReport, command: &str) -> String {
    let mut s = String::new();
    let _ = write_markdown(&mut s, r, command);
    s
}

fn write_markdown(s: &mut String, r: &RoundtripReport, command: &str) -> std::fmt::Result {
    writeln!(s, "# ilcheck round-trip report\n")?;
    writeln!(s, "Command: `{command}`\n")?;
    writeln!(s, "Sources: {}\n", r.sources.join(", "))?;
    let verdict = if r.all_identical() {
        "every body and every image identical"
    } else {
        "FAILURES (see below)"
    };
    writeln!(s, "Result: **{verdict}**\n")?;
    writeln!(s, "| measure | value |\n|---|---:|")?;
    let total = r.bodies + r.decode_errors;
    let rows: Vec<(&str, String)> = vec![
        ("assemblies read", thousands(r.assemblies)),
        (
            "assemblies skipped (not .NET)",
            thousands(r.skipped.len() as u64),
        ),
        ("unreadable assemblies", thousands(r.image_errors)),
        ("MethodDefs", thousands(r.method_defs)),
        ("MethodDefs with RVA 0", thousands(r.rva_zero)),
        ("distinct bodies", thousands(total)),
        (
            "bodies shared by several MethodDefs",
            thousands(r.shared_bodies),
        ),
        (
            "tiny / fat headers",
            format!("{} / {}", thousands(r.tiny), thousands(r.fat)),
        ),
        (
            "EH sections small / fat",
            format!(
                "{} / {}",
                thousands(r.eh_sections_small),
                thousands(r.eh_sections_fat)
            ),
        ),
        ("other sections", thousands(r.other_sections)),
        (
            "clauses catch / filter / finally / fault / invalid",
            format!(
                "{} / {} / {} / {} / {}",
                thousands(r.clauses.catch),
                thousands(r.clauses.filter),
                thousands(r.clauses.finally),
                thousands(r.clauses.fault),
                thousands(r.clauses.invalid)
            ),
        ),
        ("instructions", thousands(r.instructions)),
        (
            "bodies with undecodable code (kept raw, round-tripped)",
            thousands(r.raw_code),
        ),
        ("IL bytes", thousands(r.il_bytes)),
        (
            "bodies identical",
            format!(
                "{} ({:.3}%)",
                thousands(r.identical),
                pct(r.identical, total)
            ),
        ),
        ("mismatches", thousands(r.mismatches)),
        ("decode errors", thousands(r.decode_errors)),
        ("encode errors", thousands(r.encode_errors)),
        (
            "images identical",
            format!("{} of {}", r.images_identical, r.assemblies),
        ),
        (
            "decode throughput",
            format!(
                "{:.1} MB/s of IL, {:.1} M instructions/s ({:.3} s)",
                r.mb_per_s(r.decode_seconds),
                r.instructions_per_s(r.decode_seconds) / 1e6,
                r.decode_seconds
            ),
        ),
        (
            "lossless encode throughput",
            format!(
                "{:.1} MB/s of IL ({:.3} s)",
                r.mb_per_s(r.encode_seconds),
                r.encode_seconds
            ),
        ),
    ];
    for (k, v) in rows {
        writeln!(s, "| {k} | {v} |")?;
    }
    if let Some(cs) = &r.canonical {
        writeln!(s, "\n## Canonical form\n")?;
        writeln!(
            s,
            "{} of {} bodies ({:.2}%) are not in canonical form; the canonical form is {} bytes smaller in total.\n",
            thousands(cs.non_canonical),
            thousands(cs.bodies_checked),
            pct(cs.non_canonical, cs.bodies_checked),
            cs.bytes_saved
        )?;
        writeln!(s, "| reason | bodies |\n|---|---:|")?;
        for (reason, n) in &cs.reasons {
            writeln!(s, "| {reason} | {} |", thousands(*n))?;
        }
    }
    if !r.failures.is_empty() {
        writeln!(s, "\n## Failures\n")?;
        for f in &r.failures {
            writeln!(s, "### {} `{}` {}\n", f.kind, f.token, f.method)?;
            writeln!(
                s,
                "{} at file offset {:#x}: {}\n",
                f.assembly, f.offset, f.message
            )?;
            if !f.original.is_empty() {
                writeln!(s, "```diff\n{}```\n", failure_diffs(f))?;
            }
        }
        if r.failures_not_listed > 0 {
            writeln!(
                s,
                "... and {} more failures not listed.",
                r.failures_not_listed
            )?;
        }
    }
    if !r.raw_code_listed.is_empty() {
        writeln!(s, "\n## Bodies whose code is kept raw\n")?;
        for f in &r.raw_code_listed {
            writeln!(
                s,
                "- {} `{}` {} at {:#x}: {}",
                f.assembly, f.token, f.method, f.offset, f.message
            )?;
        }
    }
    if !r.skipped.is_empty() {
        writeln!(s, "\n## Skipped\n")?;
        for sk in &r.skipped {
            writeln!(s, "- {}: {}", sk.path, sk.reason)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(245_412), "245,412");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }

    #[test]
    fn diffs_show_the_changed_instruction() {
        let original = [0x0A, 0x16, 0x2A]; // tiny: ldc.i4.0; ret
        let reencoded = [0x0A, 0x17, 0x2A]; // tiny: ldc.i4.1; ret
        let f = Failure {
            assembly: "a.dll".into(),
            method: "C::M()".into(),
            token: "0x06000001".into(),
            offset: 1,
            kind: "mismatch",
            message: String::new(),
            original: original.to_vec(),
            reencoded: reencoded.to_vec(),
        };
        let d = failure_diffs(&f);
        assert!(
            d.contains("-IL_0000:  ldc.i4.0") && d.contains("+IL_0000:  ldc.i4.1"),
            "{d}"
        );
        assert!(
            d.contains("-0000: 0A 16 2A") && d.contains("+0000: 0A 17 2A"),
            "{d}"
        );
    }
}
