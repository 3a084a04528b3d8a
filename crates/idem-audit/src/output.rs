//! The three renderings of an audit: a table (one line per finding and a summary line), JSON
//! (`{findings, errors}`) and SARIF 2.1.0 for code-scanning upload (rule id, level, message,
//! the file as physical location, the node name as logical location, the rules in
//! `tool.driver.rules`). Pure: the caller gives file names and contents.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::{json, Value};

use crate::{Finding, Severity, RULES};

/// The findings of one input file.
#[derive(Debug, Clone)]
pub struct FileReport {
    /// The name to show (relative path, or `-` for stdin).
    pub file: String,
    /// The file's text, to point SARIF at the line of each node.
    pub source: Option<String>,
    /// Workflows read from the file.
    pub workflows: usize,
    pub findings: Vec<Finding>,
}

/// An input that could not be read as an n8n workflow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileError {
    pub file: String,
    pub message: String,
}

#[derive(Debug, Clone, Default)]
pub struct Report {
    pub files: Vec<FileReport>,
    pub errors: Vec<FileError>,
}

impl Report {
    pub fn findings(&self) -> impl Iterator<Item = (&FileReport, &Finding)> {
        self.files
            .iter()
            .flat_map(|f| f.findings.iter().map(move |x| (f, x)))
    }

    /// The worst severity found, if any.
    pub fn worst(&self) -> Option<Severity> {
        self.findings().map(|(_, f)| f.severity).max()
    }

    fn count(&self, s: Severity) -> usize {
        self.findings().filter(|(_, f)| f.severity == s).count()
    }
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The summary line.
pub fn summary(r: &Report) -> String {
    let total = r.findings().count();
    let workflows: usize = r.files.iter().map(|f| f.workflows).sum();
    let mut s = format!(
        "{} ({}, {}, {}) in {} from {}",
        plural(total, "finding", "findings"),
        plural(r.count(Severity::Error), "error", "errors"),
        plural(r.count(Severity::Warning), "warning", "warnings"),
        r.count(Severity::Info).to_string() + " info",
        plural(workflows, "workflow", "workflows"),
        plural(r.files.len(), "file", "files"),
    );
    if !r.errors.is_empty() {
        s.push_str(&format!(
            "; {} could not be read",
            plural(r.errors.len(), "file", "files")
        ));
    }
    s
}

/// One line per finding, columns aligned, then the summary line.
pub fn table(r: &Report) -> String {
    let rows: Vec<[String; 5]> = r
        .findings()
        .map(|(file, f)| {
            let place = match &f.node {
                Some(n) => format!("{} › {n}", f.workflow),
                None => f.workflow.clone(),
            };
            [
                f.severity.as_str().to_owned(),
                f.rule.to_owned(),
                cell(&file.file),
                cell(&place),
                cell(&format!("{} Fix: {}", f.message, f.fix)),
            ]
        })
        .collect();
    let mut widths = [0usize; 4];
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row.iter()) {
            *w = (*w).max(cell.chars().count()).min(60);
        }
    }
    // No header: the contract is one line per finding and the summary line, and each line
    // reads on its own (severity, rule, file, workflow › node, message and fix).
    let mut out = String::new();
    for row in &rows {
        out.push_str(&line(row, &widths));
    }
    out.push_str(&summary(r));
    out.push('\n');
    out
}

/// Text of a table cell on one line: control characters (a newline, a carriage return, an
/// escape that would drive the terminal) and the Unicode line and paragraph separators in a
/// workflow's, node's or file's name are written as Rust-style escapes (`\n`, `\u{1b}`), so
/// one finding is one line whatever a name holds.
fn cell(text: &str) -> String {
    if !text.chars().any(breaks_line) {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if breaks_line(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

fn breaks_line(c: char) -> bool {
    c.is_control() || c == '\u{2028}' || c == '\u{2029}'
}

fn line(cells: &[String; 5], widths: &[usize; 4]) -> String {
    let mut s = String::new();
    for (cell, w) in cells.iter().zip(widths) {
        let pad = w.saturating_sub(cell.chars().count());
        s.push_str(cell);
        s.push_str(&" ".repeat(pad + 2));
    }
    s.push_str(&cells[4]);
    s.push('\n');
    s
}

/// `{findings: [...], errors: [{file, message}]}`; each finding carries its `file`.
pub fn json(r: &Report) -> Value {
    let findings: Vec<Value> = r
        .findings()
        .map(|(file, f)| {
            let mut v = serde_json::to_value(f).unwrap_or(Value::Null);
            if let Value::Object(o) = &mut v {
                o.insert("file".into(), Value::String(file.file.clone()));
            }
            v
        })
        .collect();
    let errors: Vec<Value> = r
        .errors
        .iter()
        .map(|e| json!({"file": e.file, "message": e.message}))
        .collect();
    json!({"findings": findings, "errors": errors})
}

/// The line (1-based) where node `name` is defined in an export's text.
fn node_line(source: &str, name: &str) -> Option<usize> {
    static NAME: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r#""name"\s*:\s*"((?:[^"\\]|\\.)*)""#).expect("static regex"));
    let quoted = serde_json::to_string(name).ok()?;
    let want = quoted.get(1..quoted.len().saturating_sub(1))?;
    NAME.captures_iter(source)
        .find(|c| &c[1] == want)
        .and_then(|c| c.get(0))
        .map(|m| source[..m.start()].matches('\n').count() + 1)
}

/// A SARIF 2.1.0 log of the report (one run, the rules in `tool.driver.rules`).
pub fn sarif(r: &Report) -> Value {
    let rules: Vec<Value> = RULES
        .iter()
        .map(|rule| {
            json!({
                "id": rule.id,
                "name": rule.name,
                "shortDescription": {"text": rule.summary},
                "fullDescription": {"text": rule.summary},
                "help": {
                    "text": rule.help,
                    "markdown": format!("**{}** ({}): {}\n\nFix: {}", rule.id, rule.name, rule.summary, rule.help),
                },
                "defaultConfiguration": {"level": rule.severity.sarif_level()},
                "properties": {"tags": ["n8n", "idempotency"]},
            })
        })
        .collect();
    let results: Vec<Value> = r
        .findings()
        .map(|(file, f)| {
            let rule_index = RULES.iter().position(|x| x.id == f.rule).unwrap_or(0);
            let line = f
                .node
                .as_deref()
                .and_then(|n| file.source.as_deref().and_then(|s| node_line(s, n)))
                .unwrap_or(1);
            let logical = match &f.node {
                Some(n) => json!({"name": n, "fullyQualifiedName": format!("{}/{n}", f.workflow), "kind": "member"}),
                None => json!({"name": f.workflow, "fullyQualifiedName": f.workflow, "kind": "module"}),
            };
            json!({
                "ruleId": f.rule,
                "ruleIndex": rule_index,
                "level": f.severity.sarif_level(),
                "message": {"text": format!("{} Fix: {}", f.message, f.fix)},
                "locations": [{
                    "physicalLocation": {
                        "artifactLocation": {"uri": uri(&file.file)},
                        "region": {"startLine": line},
                    },
                    "logicalLocations": [logical],
                }],
                "partialFingerprints": {
                    "idemAuditFinding/v1": format!("{}:{}:{}", f.rule, f.workflow, f.node.as_deref().unwrap_or("")),
                },
                "properties": {"workflow": f.workflow, "workflowId": f.workflow_id, "fix": f.fix},
            })
        })
        .collect();
    let notifications: Vec<Value> = r
        .errors
        .iter()
        .map(|e| {
            json!({
                "level": "error",
                "message": {"text": e.message},
                "locations": [{"physicalLocation": {"artifactLocation": {"uri": uri(&e.file)}}}],
            })
        })
        .collect();
    json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "idem-audit",
                "semanticVersion": env!("CARGO_PKG_VERSION"),
                "rules": rules,
            }},
            "invocations": [{
                "executionSuccessful": r.errors.is_empty(),
                "toolExecutionNotifications": notifications,
            }],
            "results": results,
        }],
    })
}

/// A relative file name as a URI reference (forward slashes, spaces and `%` escaped).
fn uri(file: &str) -> String {
    let mut out = String::new();
    for c in file.replace('\\', "/").chars() {
        match c {
            ' ' => out.push_str("%20"),
            '%' => out.push_str("%25"),
            '#' => out.push_str("%23"),
            '?' => out.push_str("%3F"),
            c => out.push(c),
        }
    }
    out.trim_start_matches("./").to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> Report {
        let f = Finding {
            rule: "IDEM001",
            severity: Severity::Error,
            workflow: "W".into(),
            workflow_id: Some("w1".into()),
            node: Some("Send \"it\"".into()),
            message: "m.".into(),
            fix: "f.".into(),
        };
        Report {
            files: vec![FileReport {
                file: "flows/a b.json".into(),
                source: Some(
                    "{\n  \"nodes\": [\n    {\"name\": \"Send \\\"it\\\"\"}\n  ]\n}".into(),
                ),
                workflows: 1,
                findings: vec![f],
            }],
            errors: vec![FileError {
                file: "bad.json".into(),
                message: "not JSON".into(),
            }],
        }
    }

    #[test]
    fn table_has_one_line_per_finding_and_a_summary() {
        let t = table(&report());
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 2, "{t}");
        assert!(lines[0].starts_with("error  IDEM001  flows/a b.json  W › Send \"it\"  m. Fix: f."));
        assert_eq!(
            lines[1],
            "1 finding (1 error, 0 warnings, 0 info) in 1 workflow from 1 file; 1 file could not be read"
        );
    }

    #[test]
    fn a_name_with_line_breaks_or_escapes_stays_on_its_line() {
        // Found by the audit_workflow fuzz target: a workflow named with a newline.
        let mut r = report();
        let f = &mut r.files[0].findings[0];
        f.workflow = "Static\ndata\r\u{2028}x".into();
        f.node = Some("Send\u{1b}[31m".into());
        f.message = "two\nlines.".into();
        r.files[0].file = "a\nb.json".into();
        let t = table(&r);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 2, "{t}");
        assert!(
            lines[0].starts_with(
                "error  IDEM001  a\\nb.json  Static\\ndata\\r\\u{2028}x › Send\\u{1b}[31m  two\\nlines. Fix: f."
            ),
            "{t}"
        );
        assert!(!t.contains('\u{1b}'));
        // The other renderings keep the names as they are (JSON escapes them itself).
        assert_eq!(
            json(&r)["findings"][0]["workflow"],
            "Static\ndata\r\u{2028}x"
        );
    }

    #[test]
    fn json_lists_findings_with_file_and_errors() {
        let j = json(&report());
        assert_eq!(j["findings"][0]["file"], "flows/a b.json");
        assert_eq!(j["findings"][0]["workflow_id"], "w1");
        assert_eq!(
            j["errors"][0],
            json!({"file": "bad.json", "message": "not JSON"})
        );
    }

    #[test]
    fn sarif_points_at_the_node_line() {
        let s = sarif(&report());
        let res = &s["runs"][0]["results"][0];
        assert_eq!(res["level"], "error");
        let loc = &res["locations"][0];
        assert_eq!(
            loc["physicalLocation"]["artifactLocation"]["uri"],
            "flows/a%20b.json"
        );
        assert_eq!(loc["physicalLocation"]["region"]["startLine"], 3);
        assert_eq!(loc["logicalLocations"][0]["name"], "Send \"it\"");
        assert_eq!(
            s["runs"][0]["tool"]["driver"]["rules"]
                .as_array()
                .unwrap()
                .len(),
            17
        );
        assert_eq!(s["runs"][0]["invocations"][0]["executionSuccessful"], false);
    }
}
