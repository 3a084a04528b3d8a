//! The n8n workflow linter reads files users send it: any text gives findings or a parse
//! error naming where it stopped, never a panic; the findings are the same for the document's
//! re-serializations (compact, pretty, re-spelled with members reversed and numbers in
//! another notation); every finding names a known rule and a node of the workflow; and the
//! table, JSON and SARIF renderings hold every finding, SARIF lines inside the file.
#![no_main]

use idem_audit::output::{self, FileError, FileReport, Report};
use idem_audit::{audit_str, audit_value, parse_document, Options, RULES};
use idem_fuzz::{respell, safe_numbers};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let opts = Options {
        side_effects: vec!["n8n-nodes-base.mailchimp".into()],
    };
    let got = audit_str(text, &opts);
    assert_eq!(got, audit_str(text, &opts), "deterministic");
    // A byte order mark before the JSON is skipped, as editors on Windows write one.
    let json = text.strip_prefix('\u{feff}').unwrap_or(text);
    let Ok(doc) = serde_json::from_str::<Value>(json) else {
        assert!(got.is_err());
        return;
    };
    assert_eq!(audit_value(&doc, &opts), got);

    // Re-serializations of the same document.
    let mut spellings = vec![
        serde_json::to_string(&doc).expect("serializes"),
        serde_json::to_string_pretty(&doc).expect("serializes"),
    ];
    if safe_numbers(&doc) {
        spellings.push(respell(&doc));
    }
    for s in &spellings {
        assert_eq!(
            audit_str(s, &opts),
            got,
            "findings changed when re-serialized as\n{s}"
        );
    }

    let mut report = Report::default();
    match &got {
        Err(e) => {
            assert!(!e.message.is_empty());
            report.errors.push(FileError {
                file: "in.json".into(),
                message: e.to_string(),
            });
        }
        Ok(findings) => {
            let workflows = parse_document(&doc).expect("audited, so parsed");
            for f in findings {
                assert!(RULES.iter().any(|r| r.id == f.rule), "{}", f.rule);
                let wf = workflows
                    .iter()
                    .find(|w| w.name == f.workflow)
                    .unwrap_or_else(|| panic!("finding of an unknown workflow {:?}", f.workflow));
                if let Some(n) = &f.node {
                    assert!(
                        workflows.iter().any(|w| w.node_index(n).is_some()),
                        "{} names {n:?}, not a node of {:?}",
                        f.rule,
                        wf.name
                    );
                }
                assert!(!f.message.is_empty() && !f.fix.is_empty());
            }
            report.files.push(FileReport {
                file: "flows/in put.json".into(),
                source: Some(text.to_owned()),
                workflows: workflows.len(),
                findings: findings.clone(),
            });
        }
    }

    let n = report.findings().count();
    let table = output::table(&report);
    assert_eq!(table.lines().count(), n + 1, "{table}");
    let json = output::json(&report);
    assert_eq!(json["findings"].as_array().map(Vec::len), Some(n));
    let sarif = output::sarif(&report);
    let results = sarif["runs"][0]["results"].as_array().expect("results");
    assert_eq!(results.len(), n);
    let lines = text.matches('\n').count() + 1;
    for r in results {
        let line = r["locations"][0]["physicalLocation"]["region"]["startLine"]
            .as_u64()
            .expect("a line");
        assert!(
            line >= 1 && line as usize <= lines,
            "line {line} of {lines}"
        );
    }
    assert!(!output::summary(&report).is_empty());
});
