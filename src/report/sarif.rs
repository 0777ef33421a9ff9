//! SARIF 2.1.0 output of verification findings, for code-scanning UIs.

use crate::corpus::VerifyReport;
use crate::image::IntegrityCode;
use crate::verify::Code;
use serde_json::{Value, json};
use std::collections::BTreeSet;

fn rule(id: &str) -> Value {
    let text = match (Code::from_name(id), IntegrityCode::from_name(id)) {
        (Some(code), _) => code.description(),
        (None, Some(code)) => code.description(),
        (None, None) => "The method body's header or sections do not decode (ECMA-335 II.25.4).",
    };
    json!({
        "id": id,
        "name": id,
        "shortDescription": { "text": text },
        "defaultConfiguration": { "level": "error" },
    })
}

/// A SARIF 2.1.0 log with one run: a rule per code that occurs, a result per listed finding with
/// the assembly as the artifact and the method as a logical location.
pub fn verify_sarif(r: &VerifyReport) -> Value {
    let ids: BTreeSet<&str> = r.findings.iter().map(|f| f.code.as_str()).collect();
    let ids: Vec<&str> = ids.into_iter().collect();
    let results: Vec<Value> = r
        .findings
        .iter()
        .map(|f| {
            let index = ids.iter().position(|id| *id == f.code).unwrap_or(0);
            if f.is_image_level() {
                return json!({
                    "ruleId": f.code,
                    "ruleIndex": index,
                    "level": "error",
                    "message": { "text": f.message },
                    "locations": [{
                        "physicalLocation": {
                            "artifactLocation": { "uri": f.assembly },
                            "region": { "byteOffset": f.offset },
                        },
                    }],
                });
            }
            json!({
                "ruleId": f.code,
                "ruleIndex": index,
                "level": "error",
                "message": { "text": format!("IL_{:04x}: {}", f.offset, f.message) },
                "locations": [{
                    "physicalLocation": { "artifactLocation": { "uri": f.assembly } },
                    "logicalLocations": [{
                        "fullyQualifiedName": f.method,
                        "kind": "function",
                    }],
                }],
                "properties": {
                    "token": f.token,
                    "ilOffset": f.offset,
                    "disassembly": f.window,
                    "baselineMatch": f.baseline_match,
                },
            })
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
        .chain(r.baseline_missing.iter().map(|a| {
            notification(
                "warning",
                "no original in the baseline",
                a,
                "every finding is reported as new",
            )
        }))
        .collect();
    json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": { "driver": {
                "name": "ilcheck",
                "version": env!("CARGO_PKG_VERSION"),
                "rules": ids.iter().map(|id| rule(id)).collect::<Vec<_>>(),
            }},
            "results": results,
            "invocations": [{
                "executionSuccessful": r.image_errors.is_empty(),
                "toolExecutionNotifications": notifications,
            }],
            "properties": {
                "methodsChecked": r.methods_checked,
                "methodsWithErrors": r.methods_with_errors,
                "findingsTotal": r.findings_total,
                "alignment": r.alignment,
            },
        }],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::corpus::{BODY_MALFORMED, Finding};

    #[test]
    fn results_point_at_their_rules() {
        let mut r = VerifyReport::default();
        for code in ["StackUnderflow", BODY_MALFORMED, "StackUnderflow"] {
            r.findings.push(Finding {
                assembly: "a.dll".into(),
                method: "N.C::M()".into(),
                token: "0x06000001".into(),
                offset: 3,
                code: code.into(),
                message: "m".into(),
                baseline_match: None,
                window: String::new(),
            });
        }
        let log = verify_sarif(&r);
        let run = &log["runs"][0];
        let rules = run["tool"]["driver"]["rules"].as_array().unwrap();
        assert_eq!(rules.len(), 2);
        for result in run["results"].as_array().unwrap() {
            let i = result["ruleIndex"].as_u64().unwrap() as usize;
            assert_eq!(rules[i]["id"], result["ruleId"]);
        }
        assert!(rules.iter().any(|r| {
            r["shortDescription"]["text"]
                .as_str()
                .unwrap()
                .contains("III.")
        }));
        assert_eq!(log["version"], "2.1.0");
    }

    #[test]
    fn alignment_codes_are_rules_that_say_they_need_a_baseline() {
        let mut r = VerifyReport::default();
        for code in ["BranchRetargeted", "ClauseBoundaryMoved"] {
            r.findings.push(Finding {
                assembly: "a.dll".into(),
                method: "N.C::M()".into(),
                token: "0x06000001".into(),
                offset: 3,
                code: code.into(),
                message: "m".into(),
                baseline_match: None,
                window: String::new(),
            });
        }
        r.alignment = Some(Default::default());
        let log = verify_sarif(&r);
        let run = &log["runs"][0];
        for rule in run["tool"]["driver"]["rules"].as_array().unwrap() {
            let text = rule["shortDescription"]["text"].as_str().unwrap();
            assert!(text.starts_with("Needs `--baseline`."), "{text}");
        }
        assert!(run["properties"]["alignment"]["methods_compared"].is_u64());
    }
}
