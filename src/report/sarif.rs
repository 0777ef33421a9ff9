//! SARIF 2.1.0 output of verification findings, for code-scanning UIs.
//!
//! Each code that occurs is a rule with its full description, ECMA-335 reference and a
//! `helpUri`; each listed finding is a result whose location is the assembly (the artifact) and
//! the method (a logical location whose parent is its declaring type, both in the run's
//! `logicalLocations`), so that UIs group findings by type and method. The ways control arrives
//! where stack depths disagree are related locations; the disassembly and EH table are
//! properties. Fingerprints are built from the assembly's file name, the method, the code and
//! the occurrence, not from offsets, so that a finding keeps its identity across rebuilds that
//! move code.

use crate::corpus::{Finding, VerifyReport, code_doc, verdict_of};
use crate::verify::Verdict;
use serde_json::{Value, json};
use std::collections::{BTreeSet, HashMap};

/// Where the rules' references lead: the standard itself.
pub const ECMA_335_URI: &str =
    "https://www.ecma-international.org/publications-and-standards/standards/ecma-335/";

fn rule(id: &str) -> Value {
    let doc = code_doc(id);
    // Most descriptions cite their sections already; the reference is said once more only
    // where it is not said as ECMA-335's.
    let reference = if doc.reference.is_empty() || doc.description.contains("ECMA-335") {
        String::new()
    } else {
        format!(" ECMA-335 {}.", doc.reference)
    };
    let full = format!("{}{reference}", doc.description);
    json!({
        "id": id,
        "name": id,
        "shortDescription": { "text": doc.summary() },
        "fullDescription": { "text": full },
        "help": {
            "text": format!("{full} Rule family: {}.", doc.group),
            "markdown": format!(
                "**{id}** ({}): {}\n\nECMA-335 {}: [the standard]({ECMA_335_URI}).",
                doc.group, doc.description, doc.reference
            ),
        },
        "helpUri": ECMA_335_URI,
        "defaultConfiguration": { "level": sarif_level(id) },
        "properties": {
            "verdict": verdict_of(id).as_str(),
            "ecma335": doc.reference,
            "group": doc.group,
            "tags": [doc.group],
        },
    })
}

/// The SARIF level of findings of `code`: `error` for the class invalid, `warning` for
/// unverifiable (listed only at `--level unverifiable`: code the runtime runs, not provably
/// type-safe).
fn sarif_level(code: &str) -> &'static str {
    match verdict_of(code) {
        Verdict::Invalid => "error",
        Verdict::Unverifiable => "warning",
    }
}

/// FNV-1a, 64 bits, as hex: a stable fingerprint of `text`.
fn fingerprint(text: &str) -> String {
    let h = text.bytes().fold(0xCBF2_9CE4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01B3)
    });
    format!("{h:016x}")
}

/// The run's logical locations: each declaring type, then each method with its type as the
/// parent, in the order findings name them; and each method's index.
struct Logical {
    locations: Vec<Value>,
    by_method: HashMap<String, usize>,
}

impl Logical {
    fn of(findings: &[Finding]) -> Logical {
        let mut l = Logical {
            locations: Vec::new(),
            by_method: HashMap::new(),
        };
        let mut types: HashMap<&str, usize> = HashMap::new();
        for f in findings.iter().filter(|f| !f.is_image_level()) {
            if l.by_method.contains_key(&f.method) {
                continue;
            }
            let parent = if f.type_name.is_empty() {
                None
            } else {
                Some(*types.entry(&f.type_name).or_insert_with(|| {
                    let name = f.type_name.rsplit(['.', '/']).next().unwrap_or("");
                    l.locations.push(json!({
                        "name": name,
                        "fullyQualifiedName": f.type_name,
                        "kind": "type",
                        "index": l.locations.len(),
                    }));
                    l.locations.len() - 1
                }))
            };
            let name = method_name(&f.method, &f.type_name);
            let mut m = json!({
                "name": name,
                "fullyQualifiedName": f.method,
                "kind": "function",
                "index": l.locations.len(),
            });
            if let Some(p) = parent {
                m["parentIndex"] = json!(p);
            }
            l.by_method.insert(f.method.clone(), l.locations.len());
            l.locations.push(m);
        }
        l
    }
}

/// `M(int32)` of `Ns.T::M(int32)` (its type's name and `::` taken off the front).
fn method_name<'m>(full: &'m str, type_name: &str) -> &'m str {
    full.strip_prefix(type_name)
        .and_then(|rest| rest.strip_prefix("::"))
        .unwrap_or(full)
}

/// A SARIF 2.1.0 log with one run: a rule per code that occurs, a result per listed finding
/// with the assembly as the artifact and the method as a logical location.
pub fn verify_sarif(r: &VerifyReport) -> Value {
    let ids: BTreeSet<&str> = r.findings.iter().map(|f| f.code.as_str()).collect();
    let ids: Vec<&str> = ids.into_iter().collect();
    let logical = Logical::of(&r.findings);
    let mut occurrences: HashMap<String, u32> = HashMap::new();
    let results: Vec<Value> = r
        .findings
        .iter()
        .map(|f| {
            let index = ids.iter().position(|id| *id == f.code).unwrap_or(0);
            let file = f.assembly.rsplit(['/', '\\']).next().unwrap_or(&f.assembly);
            let key = format!("{file}|{}|{}", f.method, f.code);
            let n = occurrences.entry(key.clone()).or_default();
            *n += 1;
            let print = fingerprint(&format!("{key}|{n}"));
            if f.is_image_level() {
                return json!({
                    "ruleId": f.code,
                    "ruleIndex": index,
                    "level": sarif_level(&f.code),
                    "message": { "text": f.message },
                    "locations": [{
                        "physicalLocation": {
                            "artifactLocation": { "uri": f.assembly },
                            "region": { "byteOffset": f.offset },
                        },
                    }],
                    "partialFingerprints": { "ilcheckFinding/v1": print },
                });
            }
            let method = json!({
                "index": logical.by_method.get(&f.method).copied().unwrap_or(0),
                "fullyQualifiedName": f.method,
                "kind": "function",
            });
            let related: Vec<Value> = f
                .arrivals
                .iter()
                .enumerate()
                .map(|(k, a)| {
                    let from = if a.instruction.is_empty() {
                        format!("IL_{:04x}", a.from)
                    } else {
                        a.instruction.clone()
                    };
                    json!({
                        "id": k,
                        "message": { "text": format!(
                            "stack depth {} ({}): {from}",
                            a.depth,
                            a.kind.as_str()
                        ) },
                        "logicalLocations": [method.clone()],
                        "properties": { "ilOffset": a.from, "depth": a.depth },
                    })
                })
                .collect();
            let mut result = json!({
                "ruleId": f.code,
                "ruleIndex": index,
                "level": sarif_level(&f.code),
                "message": { "text": format!("IL_{:04x}: {}", f.offset, f.message) },
                "locations": [{
                    "physicalLocation": { "artifactLocation": { "uri": f.assembly } },
                    "logicalLocations": [method],
                }],
                "partialFingerprints": { "ilcheckFinding/v1": print },
                "occurrenceCount": f.duplicates + 1,
                "properties": {
                    "token": f.token,
                    "ilOffset": f.offset,
                    "disassembly": f.window,
                    "baselineMatch": f.baseline_match,
                    "ecma335": f.reference,
                },
            });
            if !related.is_empty() {
                result["relatedLocations"] = Value::Array(related);
            }
            if !f.clauses.is_empty() {
                let p = &mut result["properties"];
                p["clauses"] = json!(f.clauses);
                p["clause"] = json!(f.clause);
                p["otherClause"] = json!(f.other_clause);
            }
            result
        })
        .collect();
    // Inputs that were not read belong in the log too: a run that could not read a file must
    // not look clean in a code-scanning UI.
    let notification = |level: &str, kind: &str, path: &str, reason: &str| {
        json!({
            "level": level,
            "message": { "text": format!("{path}: {kind}: {reason}") },
            "locations": [{ "physicalLocation": { "artifactLocation": { "uri": path } } }],
        })
    };
    let notifications: Vec<Value> = r
        .image_errors
        .iter()
        .map(|e| notification("error", "cannot be read", &e.path, &e.reason))
        .chain(r.skipped.iter().map(|e| {
            notification(
                "warning",
                "skipped, not a .NET assembly",
                &e.path,
                &e.reason,
            )
        }))
        .chain(r.per_assembly.iter().filter_map(|a| {
            let why = a.no_original.as_ref()?;
            Some(notification(
                "warning",
                "no original in the baseline",
                &a.assembly,
                &format!("{why}; every finding is reported as new"),
            ))
        }))
        // A log cut at --max must say so: a code-scanning UI shows what the log holds.
        .chain((r.findings_total > r.findings.len() as u64).then(|| {
            json!({
                "level": "warning",
                "message": { "text": format!(
                    "{} more findings not listed (--max): {} of {} are in this log; \
                     raise --max to list every one",
                    r.findings_total - r.findings.len() as u64,
                    r.findings.len(),
                    r.findings_total
                ) },
            })
        }))
        .collect();
    json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": { "driver": {
                "name": "ilcheck",
                "version": env!("CARGO_PKG_VERSION"),
                "informationUri": ECMA_335_URI,
                "rules": ids.iter().map(|id| rule(id)).collect::<Vec<_>>(),
            }},
            "logicalLocations": logical.locations,
            "results": results,
            "invocations": [{
                "executionSuccessful": r.image_errors.is_empty(),
                "toolExecutionNotifications": notifications,
            }],
            "properties": {
                "methodsChecked": r.methods_checked,
                "methodsWithErrors": r.methods_with_errors,
                "findingsTotal": r.findings_total,
                "codes": r.codes,
                "alignment": r.alignment,
                "types": r.types,
                "level": r.level,
                "notReported": r.not_reported,
            },
        }],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::corpus::BODY_MALFORMED;

    fn finding(code: &str) -> Finding {
        Finding {
            assembly: "dir/a.dll".into(),
            method: "N.C/D::M(int32)".into(),
            type_name: "N.C/D".into(),
            token: "0x06000001".into(),
            offset: 3,
            code: code.into(),
            message: "m".into(),
            ..Finding::default()
        }
    }

    #[test]
    fn results_point_at_their_rules_and_logical_locations() {
        let mut r = VerifyReport::default();
        for code in ["StackUnderflow", BODY_MALFORMED, "StackUnderflow"] {
            r.findings.push(finding(code));
        }
        let log = verify_sarif(&r);
        let run = &log["runs"][0];
        let rules = run["tool"]["driver"]["rules"].as_array().unwrap();
        assert_eq!(rules.len(), 2);
        let locations = run["logicalLocations"].as_array().unwrap();
        assert_eq!(locations.len(), 2, "{locations:#?}");
        assert_eq!(locations[0]["kind"], "type");
        assert_eq!(locations[0]["name"], "D");
        assert_eq!(locations[1]["name"], "M(int32)");
        assert_eq!(locations[1]["parentIndex"], 0);
        let mut prints = BTreeSet::new();
        for result in run["results"].as_array().unwrap() {
            let i = result["ruleIndex"].as_u64().unwrap() as usize;
            assert_eq!(rules[i]["id"], result["ruleId"]);
            let l = &result["locations"][0]["logicalLocations"][0];
            assert_eq!(
                locations[l["index"].as_u64().unwrap() as usize]["kind"],
                "function"
            );
            let print = &result["partialFingerprints"]["ilcheckFinding/v1"];
            prints.insert(print.as_str().unwrap().to_string());
        }
        // The same code twice in one method: two fingerprints.
        assert_eq!(prints.len(), 3);
        for rule in rules {
            assert_eq!(rule["helpUri"], ECMA_335_URI);
            let full = rule["fullDescription"]["text"].as_str().unwrap();
            assert_eq!(full.matches("ECMA-335").count(), 1, "{full}");
        }
        let underflow = rules.iter().find(|r| r["id"] == "StackUnderflow").unwrap();
        assert_eq!(underflow["properties"]["ecma335"], "III.1.7.5");
        assert_eq!(
            underflow["shortDescription"]["text"],
            "An instruction pops more items than the stack holds (III.1.7.5)."
        );
        assert_eq!(log["version"], "2.1.0");
    }

    #[test]
    fn alignment_codes_are_rules_that_say_they_need_a_baseline() {
        let mut r = VerifyReport::default();
        for code in ["BranchRetargeted", "ClauseBoundaryMoved"] {
            r.findings.push(finding(code));
        }
        r.alignment = Some(Default::default());
        let log = verify_sarif(&r);
        let run = &log["runs"][0];
        for rule in run["tool"]["driver"]["rules"].as_array().unwrap() {
            let text = rule["shortDescription"]["text"].as_str().unwrap();
            assert!(text.starts_with("Needs `--baseline`. A"), "{text}");
        }
        assert!(run["properties"]["alignment"]["methods_compared"].is_u64());
    }
}
