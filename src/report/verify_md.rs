//! The Markdown report of a verification run, for a reviewer reading it in a pull request: the
//! verdict, the measures, a table per assembly and per code, then every listed finding with its
//! disassembly, the EH table (the clause at fault marked) and the arrivals where stack depths
//! disagree.

use super::finding::{clause_cells, mark, range};
use super::thousands;
use super::verify::{merged, not_reported_text, reasons, unverifiable_mark};
use crate::corpus::{Finding, VerifyReport, code_doc};
use std::fmt::Write;

/// `text` fit for a table cell: pipes escaped, lines joined.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

/// `text` as inline code, with a fence long enough for the backticks it holds.
fn code(text: &str) -> String {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest + 1);
    let pad = if text.starts_with('`') || text.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{text}{pad}{fence}")
}

/// A Markdown report of a verification run.
pub fn verify_markdown(r: &VerifyReport, command: &str) -> String {
    let mut s = String::new();
    let _ = write_report(&mut s, r, command);
    s
}

fn write_report(s: &mut String, r: &VerifyReport, command: &str) -> std::fmt::Result {
    writeln!(s, "# ilcheck verification report\n")?;
    writeln!(s, "Command: {}\n", code(command))?;
    writeln!(s, "Sources: {}\n", r.sources.join(", "))?;
    let verdict = if !r.image_errors.is_empty() {
        format!(
            "**{} inputs could not be read**: the run is incomplete",
            r.image_errors.len()
        )
    } else if r.findings_total == 0 {
        "**clean**: no finding".to_string()
    } else {
        format!(
            "**{} findings in {} methods**",
            thousands(r.findings_total),
            thousands(r.methods_with_errors)
        )
    };
    writeln!(s, "Result: {verdict}\n")?;
    for a in &r.per_assembly {
        if let Some(why) = &a.no_original {
            writeln!(
                s,
                "> **Warning**: {} has no original among the baseline assemblies ({}): every \
                 finding is reported as new.\n",
                code(&a.assembly),
                why
            )?;
        }
    }
    writeln!(s, "| measure | value |\n|---|---:|")?;
    for (k, v) in [
        ("assemblies", thousands(r.assemblies)),
        ("methods checked", thousands(r.methods_checked)),
        ("methods with findings", thousands(r.methods_with_errors)),
        ("findings", thousands(r.findings_total)),
        (
            "findings merged into another at the same instruction",
            thousands(r.duplicates_merged),
        ),
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
        (
            "wall time of the run",
            format!(
                "{:.3} s on {}",
                r.wall_seconds,
                super::threads_text(r.threads)
            ),
        ),
    ] {
        writeln!(s, "| {k} | {v} |")?;
    }
    if let Some(t) = &r.types {
        writeln!(
            s,
            "\nType pass (level {}): {} methods checked, {} of them in part{}; {} invalid, {} \
             unverifiable{} ({:.3} s, single thread).",
            t.level,
            thousands(t.methods_checked),
            thousands(t.methods_in_part),
            if t.in_part.is_empty() {
                String::new()
            } else {
                format!(" ({})", reasons(&t.in_part))
            },
            thousands(t.by_verdict.get("invalid").copied().unwrap_or(0)),
            thousands(t.by_verdict.get("unverifiable").copied().unwrap_or(0)),
            if t.not_reported > 0 {
                format!(", {} not reported at this level", thousands(t.not_reported))
            } else {
                String::new()
            },
            t.seconds
        )?;
    }
    if let Some(line) = not_reported_text(r) {
        writeln!(s, "\n{line}.")?;
    }
    write_assemblies(s, r)?;
    write_codes(s, r)?;
    write_alignment(s, r)?;
    if !r.image_errors.is_empty() {
        writeln!(s, "\n## Inputs that could not be read\n")?;
        for e in &r.image_errors {
            writeln!(s, "- {}: {}", code(&e.path), e.reason)?;
        }
    }
    if !r.skipped.is_empty() {
        writeln!(s, "\n## Skipped (not .NET assemblies)\n")?;
        for e in &r.skipped {
            writeln!(s, "- {}: {}", code(&e.path), e.reason)?;
        }
    }
    if !r.findings.is_empty() {
        writeln!(s, "\n## Findings\n")?;
        for f in &r.findings {
            write_finding(s, f)?;
        }
        let unlisted = r.findings_total.saturating_sub(r.findings.len() as u64);
        if unlisted > 0 {
            writeln!(
                s,
                "… and {} more findings not listed (`--max`).",
                thousands(unlisted)
            )?;
        }
    }
    Ok(())
}

fn write_assemblies(s: &mut String, r: &VerifyReport) -> std::fmt::Result {
    if r.per_assembly.is_empty() {
        return Ok(());
    }
    let baseline = r.baseline_assemblies > 0;
    writeln!(s, "\n## Assemblies\n")?;
    write!(
        s,
        "| assembly | identity | methods | with findings | findings | IL bytes |"
    )?;
    if baseline {
        write!(s, " original |")?;
    }
    write!(s, "\n|---|---|---:|---:|---:|---:|")?;
    if baseline {
        write!(s, "---|")?;
    }
    writeln!(s)?;
    for a in &r.per_assembly {
        write!(
            s,
            "| {} | {} | {} | {} | {} | {} |",
            cell(&code(&a.assembly)),
            cell(a.identity.as_deref().unwrap_or("")),
            thousands(a.methods_checked),
            thousands(a.methods_with_findings),
            thousands(a.findings),
            thousands(a.il_bytes)
        )?;
        if baseline {
            let original = match (&a.original, a.paired_by, &a.no_original) {
                (Some(o), Some(by), _) => format!("{} (by {})", code(o), by.as_str()),
                (_, _, Some(why)) => format!("**none**: {why}"),
                _ => String::new(),
            };
            write!(s, " {} |", cell(&original))?;
        }
        writeln!(s)?;
    }
    Ok(())
}

fn write_codes(s: &mut String, r: &VerifyReport) -> std::fmt::Result {
    if r.codes.is_empty() {
        return Ok(());
    }
    writeln!(s, "\n## Findings by code\n")?;
    writeln!(
        s,
        "| code | findings | methods | ECMA-335 | rule |\n|---|---:|---:|---|---|"
    )?;
    for (name, c) in r.codes_by_count() {
        writeln!(
            s,
            "| `{name}` | {} | {} | {} | {} |",
            thousands(c.findings),
            thousands(c.methods),
            c.reference,
            cell(code_doc(name).summary())
        )?;
    }
    Ok(())
}

fn write_alignment(s: &mut String, r: &VerifyReport) -> std::fmt::Result {
    let Some(a) = &r.alignment else {
        return Ok(());
    };
    writeln!(s, "\n## Alignment with the baseline\n")?;
    writeln!(s, "| measure | value |\n|---|---:|")?;
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
        writeln!(s, "| {k} | {v} |")?;
    }
    for (what, counts) in [
        ("not aligned", &a.not_aligned),
        ("not checked", &a.unchecked),
    ] {
        if !counts.is_empty() {
            writeln!(s, "\n{what}: {}", reasons(counts))?;
        }
    }
    Ok(())
}

fn write_finding(s: &mut String, f: &Finding) -> std::fmt::Result {
    let reference = if f.reference.is_empty() {
        String::new()
    } else {
        format!(" (ECMA-335 {})", f.reference)
    };
    if f.is_image_level() {
        writeln!(
            s,
            "### `{}` in {} (image, file offset {:#x})\n\n{}{reference}\n",
            f.code,
            code(&f.assembly),
            f.offset,
            f.message
        )?;
        return Ok(());
    }
    writeln!(
        s,
        "### `{}`{} in {} at IL_{:04x}\n",
        f.code,
        unverifiable_mark(f),
        code(&f.method),
        f.offset
    )?;
    writeln!(
        s,
        "{}, token `{}`: {}{}{reference}\n",
        code(&f.assembly),
        f.token,
        f.message,
        merged(f.duplicates)
    )?;
    if let Some(why) = &f.baseline_match {
        writeln!(s, "Baseline match uncertain: {why}.\n")?;
    }
    if !f.window.is_empty() {
        writeln!(s, "```\n{}```\n", f.window)?;
    }
    if !f.clauses.is_empty() {
        writeln!(
            s,
            "| | clause | kind | try | handler | class or filter |\n|---|---:|---|---|---|---|"
        )?;
        for c in &f.clauses {
            let m = match mark(f, c) {
                ">" => "**▶ at fault**",
                "*" => "involved",
                _ => "",
            };
            let [index, kind, _, _, last] = clause_cells(c);
            writeln!(
                s,
                "| {m} | {index} | {kind} | {} | {} | {} |",
                range(c.try_start, c.try_end),
                range(c.handler_start, c.handler_end),
                if last.is_empty() {
                    String::new()
                } else {
                    cell(&code(&last))
                }
            )?;
        }
        if f.clauses_omitted > 0 {
            writeln!(s, "\n… and {} more clauses not shown.", f.clauses_omitted)?;
        }
        writeln!(s)?;
    }
    if !f.arrivals.is_empty() {
        writeln!(
            s,
            "Arrivals at IL_{:04x}:\n\n| depth | how | from |\n|---:|---|---|",
            f.offset
        )?;
        for a in &f.arrivals {
            let from = if a.instruction.is_empty() {
                String::new()
            } else {
                cell(&code(&a.instruction))
            };
            writeln!(s, "| {} | {} | {from} |", a.depth, a.kind.as_str())?;
        }
        if f.more_arrivals > 0 {
            writeln!(s, "\n… and {} more.", f.more_arrivals)?;
        }
        writeln!(s)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_code_survives_backticks_and_pipes() {
        assert_eq!(code("a"), "`a`");
        assert_eq!(code("List`1::Add"), "``List`1::Add``");
        assert_eq!(code("`x"), "`` `x ``");
        assert_eq!(cell("a|b"), "a\\|b");
    }
}
