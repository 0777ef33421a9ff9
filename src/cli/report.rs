//! `ilcheck report merge`: the JSON reports of shards of one corpus (`--shard K/N`) made one.

use crate::cli::out::outln;
use anyhow::{Context, Result, bail};
use serde_json::{Map, Value};
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `ilcheck report`.
#[derive(clap::Subcommand)]
pub enum ReportCommand {
    /// Merge JSON reports of the same kind (verify, roundtrip, fuzz) from shards of one run:
    /// counts and times are summed, lists are concatenated, and the merged report is printed
    /// (or written with -o).
    Merge {
        /// The reports (the same `schema` each).
        #[arg(required = true)]
        reports: Vec<PathBuf>,
        /// Write the merged JSON here instead of printing it.
        #[arg(short, long, value_name = "FILE.json")]
        output: Option<PathBuf>,
        /// Also write a Markdown summary: totals, and counts per code or kind.
        #[arg(long, value_name = "FILE.md")]
        markdown: Option<PathBuf>,
        /// Merge the shards given even when some of the run's are missing (by default that is
        /// an error: the totals would cover part of the corpus).
        #[arg(long)]
        allow_missing: bool,
    },
}

/// Adds `b` into `a`: numbers summed, arrays concatenated, objects merged key by key, other
/// values kept from `a` (the first report) when they differ.
pub fn merge_into(a: &mut Value, b: &Value) {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let sum = match (x.as_u64(), y.as_u64()) {
                (Some(p), Some(q)) => Value::from(p.saturating_add(q)),
                _ => Value::from(x.as_f64().unwrap_or(0.0) + y.as_f64().unwrap_or(0.0)),
            };
            *x = match sum {
                Value::Number(n) => n,
                _ => return,
            };
        }
        (Value::Array(x), Value::Array(y)) => x.extend(y.iter().cloned()),
        (Value::Object(x), Value::Object(y)) => {
            for (k, v) in y {
                match x.get_mut(k) {
                    Some(existing) => merge_into(existing, v),
                    None => {
                        x.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        _ => {}
    }
}

/// Counts of the values of `field` in the objects of the array `list`.
fn count_by(v: &Value, list: &str, field: &str) -> Vec<(String, u64)> {
    let mut counts: Vec<(String, u64)> = Vec::new();
    for item in v[list].as_array().into_iter().flatten() {
        let Some(key) = item[field].as_str() else {
            continue;
        };
        match counts.iter_mut().find(|(k, _)| k == key) {
            Some((_, n)) => *n += 1,
            None => counts.push((key.to_string(), 1)),
        }
    }
    counts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    counts
}

/// The fields every report of `schema` has, with the JSON each holds: those of an empty report
/// of that kind as ilcheck writes it (`null` where any value may stand). `None` for a kind
/// that does not merge.
fn expected_fields(schema: &str) -> Option<Map<String, Value>> {
    let empty = match schema {
        "ilcheck.verify/1" => serde_json::to_value(ilcheck::corpus::VerifyReport::default()),
        "ilcheck.roundtrip/1" => serde_json::to_value(ilcheck::corpus::RoundtripReport::default()),
        "ilcheck.fuzz/1" => serde_json::to_value(ilcheck::harness::fuzz::FuzzSummary::default()),
        _ => return None,
    };
    match empty {
        Ok(Value::Object(m)) => Some(m),
        _ => None,
    }
}

/// Whether `a` and `b` are the same kind of JSON value.
fn same_kind(a: &Value, b: &Value) -> bool {
    std::mem::discriminant(a) == std::mem::discriminant(b)
}

/// The `shard K/N` a report's `sources` name, if any.
fn shard_of(report: &Value) -> Option<(u64, u64)> {
    report["sources"].as_array()?.iter().find_map(|s| {
        let (k, n) = s.as_str()?.strip_prefix("shard ")?.split_once('/')?;
        Some((k.parse().ok()?, n.parse().ok()?))
    })
}

/// Checks that the reports are shards of one run, each once: the same shard count, no shard
/// twice, no whole run among shards, none missing unless `allow_missing`. Reports without
/// shards (fuzz runs, say) are refused only when two are the same.
fn check_shards(reports: &[(PathBuf, Value)], allow_missing: bool) -> Result<()> {
    let shards: Vec<Option<(u64, u64)>> = reports.iter().map(|(_, v)| shard_of(v)).collect();
    if let Some(k) = shards.iter().position(Option::is_some)
        && let Some(w) = shards.iter().position(Option::is_none)
    {
        bail!(
            "{} is a whole run and {} a shard of one: merging them counts the shard twice",
            reports[w].0.display(),
            reports[k].0.display()
        );
    }
    let mut seen: Vec<(u64, &PathBuf)> = Vec::new();
    let mut count: Option<(u64, &PathBuf)> = None;
    for ((path, _), shard) in reports.iter().zip(&shards) {
        let Some((k, n)) = *shard else { continue };
        match count {
            Some((m, first)) if m != n => bail!(
                "{} is shard {k}/{n}, {} a shard of {m}: not the shards of one run",
                path.display(),
                first.display()
            ),
            _ => count = Some((n, path)),
        }
        if let Some((_, other)) = seen.iter().find(|(j, _)| *j == k) {
            bail!(
                "{} and {} are both shard {k}/{n}: merging them counts it twice",
                other.display(),
                path.display()
            );
        }
        seen.push((k, path));
    }
    if let Some((n, _)) = count {
        let missing: Vec<String> = (1..=n)
            .filter(|k| !seen.iter().any(|(j, _)| j == k))
            .map(|k| format!("{k}/{n}"))
            .collect();
        if !missing.is_empty() && !allow_missing {
            bail!(
                "shard{} {} missing: the merged totals would cover part of the corpus \
                 (--allow-missing merges what is there)",
                if missing.len() > 1 { "s" } else { "" },
                missing.join(", ")
            );
        }
    }
    for (i, (a, va)) in reports.iter().enumerate() {
        if let Some((b, _)) = reports[..i].iter().find(|(_, vb)| vb == va) {
            bail!(
                "{} and {} are the same report: merging them counts it twice",
                b.display(),
                a.display()
            );
        }
    }
    Ok(())
}

/// Runs `ilcheck report`.
pub fn run(cmd: ReportCommand) -> Result<ExitCode> {
    let ReportCommand::Merge {
        reports,
        output,
        markdown,
        allow_missing,
    } = cmd;
    let read: Vec<&std::path::Path> = reports.iter().map(PathBuf::as_path).collect();
    crate::cli::refuse_reports_over(output.iter().chain(&markdown).map(PathBuf::as_path), &read)?;
    let mut parsed: Vec<(PathBuf, Value)> = Vec::new();
    for p in &reports {
        let text =
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        let v: Value =
            serde_json::from_str(&text).with_context(|| format!("{}: not JSON", p.display()))?;
        let schema = v["schema"].as_str().unwrap_or("").to_string();
        if schema.is_empty() {
            bail!("{}: not an ilcheck JSON report (no schema)", p.display());
        }
        let Some(fields) = expected_fields(&schema) else {
            bail!(
                "{}: a {schema} report does not merge (verify, roundtrip and fuzz reports do)",
                p.display()
            );
        };
        // A report cut short, or written by hand, would be merged as zeros.
        for (key, empty) in &fields {
            match v.get(key) {
                None => bail!("{}: not a whole {schema} report: no `{key}`", p.display()),
                Some(got) if !empty.is_null() && !same_kind(got, empty) => bail!(
                    "{}: not a {schema} report: `{key}` is {got}, where the report has {}",
                    p.display(),
                    match empty {
                        Value::Array(_) => "a list",
                        Value::Object(_) => "an object",
                        Value::Number(_) => "a number",
                        Value::String(_) => "a string",
                        Value::Bool(_) => "true or false",
                        Value::Null => "null",
                    }
                ),
                Some(_) => {}
            }
        }
        if let Some((first, v0)) = parsed.first()
            && v0["schema"].as_str() != Some(schema.as_str())
        {
            bail!(
                "{}: schema {schema} differs from {}'s {}",
                p.display(),
                first.display(),
                v0["schema"]
            );
        }
        parsed.push((p.clone(), v));
    }
    check_shards(&parsed, allow_missing)?;
    let mut merged: Option<Value> = None;
    for (_, v) in parsed {
        match &mut merged {
            None => merged = Some(v),
            Some(m) => merge_into(m, &v),
        }
    }
    let mut merged = merged.unwrap_or(Value::Object(Map::new()));
    if let Value::Object(m) = &mut merged {
        m.insert("merged_from".into(), Value::from(reports.len()));
        // Rates do not add up: recomputed where their parts are known, else dropped.
        m.remove("methods_per_second");
        if let (Some(methods), Some(secs)) = (
            m.get("methods").and_then(Value::as_f64),
            m.get("seconds").and_then(Value::as_f64),
        ) && secs > 0.0
        {
            m.insert("methods_per_second".into(), Value::from(methods / secs));
        }
    }
    let json = serde_json::to_string_pretty(&merged)?;
    match &output {
        Some(p) => ilcheck::fsio::write_atomic(p, json.as_bytes())
            .with_context(|| format!("writing {}", p.display()))?,
        None => outln!("{json}"),
    }
    if let Some(p) = &markdown {
        use std::fmt::Write as _;
        let mut md = String::new();
        let _ = writeln!(
            md,
            "# {} (merged from {} reports)\n",
            merged["schema"].as_str().unwrap_or("report"),
            reports.len()
        );
        let _ = writeln!(md, "| total | value |\n|---|---|");
        if let Value::Object(m) = &merged {
            for (k, v) in m {
                if v.is_number() {
                    let _ = writeln!(md, "| {k} | {v} |");
                }
            }
        }
        // Verify reports count every finding per code; older ones only list some.
        let mut codes: Vec<(&String, &Value)> = merged["codes"]
            .as_object()
            .map(|m| m.iter().collect())
            .unwrap_or_default();
        codes.sort_by(|a, b| {
            let n = |v: &Value| v["findings"].as_u64().unwrap_or(0);
            n(b.1).cmp(&n(a.1)).then(a.0.cmp(b.0))
        });
        if !codes.is_empty() {
            let _ = writeln!(
                md,
                "\n## Findings per code\n\n| code | findings | methods | ECMA-335 |\n|---|---:|---:|---|"
            );
            for (code, c) in &codes {
                let _ = writeln!(
                    md,
                    "| {code} | {} | {} | {} |",
                    c["findings"],
                    c["methods"],
                    c["reference"].as_str().unwrap_or("")
                );
            }
        }
        for (list, field, title) in [
            ("findings", "code", "Findings per code"),
            ("failures", "kind", "Failures per kind"),
            ("image_errors", "reason", "Unreadable inputs per reason"),
        ] {
            let counts = count_by(&merged, list, field);
            if counts.is_empty() || (list == "findings" && !codes.is_empty()) {
                continue;
            }
            let _ = writeln!(
                md,
                "\n## {title} (listed ones)\n\n| {field} | count |\n|---|---|"
            );
            for (k, n) in counts {
                let _ = writeln!(md, "| {} | {n} |", k.replace('|', "\\|"));
            }
        }
        ilcheck::fsio::write_atomic(p, md.as_bytes())
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_add_and_lists_join() {
        let mut a =
            serde_json::json!({"schema": "s", "n": 2, "t": 0.5, "list": [1], "o": {"k": 1}});
        let b = serde_json::json!({"schema": "s", "n": 3, "t": 0.25, "list": [2, 3], "o": {"k": 4, "j": 1}});
        merge_into(&mut a, &b);
        assert_eq!(
            a,
            serde_json::json!({"schema": "s", "n": 5, "t": 0.75, "list": [1, 2, 3], "o": {"k": 5, "j": 1}})
        );
    }
}
