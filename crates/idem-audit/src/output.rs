//! The three renderings of an audit: a table (one line per finding and a summary line), JSON
//! (`{findings, errors}`) and SARIF 2.1.0 for code-scanning upload (rule id, level, message,
//! the file as physical location, the node name as logical location, the rules in
//! `tool.driver.rules`). Pure: the caller gives file names and contents.

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

/// Where the nodes of an export are: for each workflow in the text (the document itself, or
/// each object of an array), its `name` and `id` and the line of each node's own `"name"`
/// member inside its `nodes` array — not the first `"name"` in the text, which may be the
/// workflow's own name or a parameter's. serde_json keeps no positions, so this is a small
/// scanner of its own; it is total over any text (what it cannot read is left out).
#[derive(Debug, Default)]
struct NodeLines {
    workflows: Vec<WorkflowLines>,
}

#[derive(Debug, Default)]
struct WorkflowLines {
    name: Option<String>,
    id: Option<String>,
    /// `(node name, line)`, 1-based.
    nodes: Vec<(String, usize)>,
}

impl NodeLines {
    fn read(source: &str) -> NodeLines {
        let mut sc = Scan {
            b: source.as_bytes(),
            i: if source.starts_with('\u{feff}') { 3 } else { 0 },
            line_at: (0, 1),
        };
        let mut out = NodeLines::default();
        match sc.peek() {
            Some(b'{') => {
                if let Some(w) = sc.workflow() {
                    out.workflows.push(w);
                }
            }
            Some(b'[') => {
                // What was read before a malformed spot is kept.
                let _ = sc.elements(|sc| {
                    if sc.peek() == Some(b'{') {
                        out.workflows.push(sc.workflow()?);
                        Some(())
                    } else {
                        sc.skip_value()
                    }
                });
            }
            _ => {}
        }
        out
    }

    /// The line of node `node` of the workflow a finding names: the workflow with the same
    /// name and id first, then the same name, then any workflow with such a node.
    fn line(&self, workflow: &str, workflow_id: Option<&str>, node: &str) -> Option<usize> {
        let node_line =
            |w: &WorkflowLines| w.nodes.iter().find(|(n, _)| n == node).map(|(_, l)| *l);
        let named = |w: &&WorkflowLines| w.name.as_deref() == Some(workflow);
        let wfs = || self.workflows.iter();
        wfs()
            .filter(named)
            .filter(|w| w.id.as_deref() == workflow_id)
            .find_map(node_line)
            .or_else(|| wfs().filter(named).find_map(node_line))
            .or_else(|| wfs().find_map(node_line))
    }
}

/// A cursor over JSON text; every method returns `None` where the text is not JSON.
struct Scan<'a> {
    b: &'a [u8],
    i: usize,
    /// `(offset, line)` of the last line lookup: offsets are asked in increasing order, so
    /// lines are counted once over the text.
    line_at: (usize, usize),
}

impl Scan<'_> {
    /// The next byte after white space.
    fn peek(&mut self) -> Option<u8> {
        while self
            .b
            .get(self.i)
            .is_some_and(|c| matches!(c, b' ' | b'\t' | b'\n' | b'\r'))
        {
            self.i += 1;
        }
        self.b.get(self.i).copied()
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek()? == c).then(|| self.i += 1)
    }

    /// The line (1-based) of byte offset `at`.
    fn line(&mut self, at: usize) -> usize {
        let (from, line) = self.line_at;
        let line = if at >= from {
            line + self.b[from..at].iter().filter(|&&c| c == b'\n').count()
        } else {
            1 + self.b[..at].iter().filter(|&&c| c == b'\n').count()
        };
        self.line_at = (at, line);
        line
    }

    /// The end (past the closing quote) of the string starting at `self.i`.
    fn string_end(&self) -> Option<usize> {
        let mut j = self.i + 1;
        loop {
            match self.b.get(j)? {
                b'\\' => j += 2,
                b'"' => return Some(j + 1),
                _ => j += 1,
            }
        }
    }

    /// A string: its start offset and its decoded text.
    fn string(&mut self) -> Option<(usize, String)> {
        if self.peek()? != b'"' {
            return None;
        }
        let (start, end) = (self.i, self.string_end()?);
        self.i = end;
        let text = std::str::from_utf8(&self.b[start..end]).ok()?;
        Some((start, serde_json::from_str(text).ok()?))
    }

    /// Skips one value of any kind (without recursion: nesting is counted).
    fn skip_value(&mut self) -> Option<()> {
        let mut depth = 0usize;
        loop {
            match self.peek()? {
                b'"' => self.i = self.string_end()?,
                b'{' | b'[' => {
                    depth += 1;
                    self.i += 1;
                }
                b'}' | b']' => {
                    depth = depth.checked_sub(1)?;
                    self.i += 1;
                }
                b',' | b':' if depth > 0 => self.i += 1,
                _ => {
                    let start = self.i;
                    while self
                        .b
                        .get(self.i)
                        .is_some_and(|c| !b" \t\r\n,:]}[{\"".contains(c))
                    {
                        self.i += 1;
                    }
                    if self.i == start {
                        return None;
                    }
                }
            }
            if depth == 0 {
                return Some(());
            }
        }
    }

    /// The members of an object: `f` gets the key, its offset, and must consume the value.
    fn members(&mut self, mut f: impl FnMut(&mut Self, String, usize) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(());
        }
        loop {
            let (at, key) = self.string()?;
            self.eat(b':')?;
            f(self, key, at)?;
            if self.peek()? == b',' {
                self.i += 1;
            } else {
                return self.eat(b'}');
            }
        }
    }

    /// The elements of an array: `f` must consume each.
    fn elements(&mut self, mut f: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.eat(b'[')?;
        if self.peek()? == b']' {
            self.i += 1;
            return Some(());
        }
        loop {
            f(self)?;
            if self.peek()? == b',' {
                self.i += 1;
            } else {
                return self.eat(b']');
            }
        }
    }

    /// A workflow object: its name, id and the lines of its nodes' names.
    fn workflow(&mut self) -> Option<WorkflowLines> {
        let mut w = WorkflowLines::default();
        self.members(|sc, key, _| match (key.as_str(), sc.peek()?) {
            ("name", b'"') => {
                w.name = Some(sc.string()?.1);
                Some(())
            }
            ("id", b'"') => {
                w.id = Some(sc.string()?.1).filter(|id| !id.is_empty());
                Some(())
            }
            ("id", b'0'..=b'9' | b'-') => {
                let start = sc.i;
                sc.skip_value()?;
                w.id = std::str::from_utf8(&sc.b[start..sc.i])
                    .ok()
                    .map(str::to_owned);
                Some(())
            }
            ("nodes", b'[') => {
                // A repeated member replaces the earlier one, as when the export is parsed.
                w.nodes.clear();
                sc.elements(|sc| {
                    if sc.peek()? != b'{' {
                        return sc.skip_value();
                    }
                    let mut name = None;
                    sc.members(|sc, key, at| match (key.as_str(), sc.peek()?) {
                        ("name", b'"') => {
                            name = Some((sc.string()?.1, at));
                            Some(())
                        }
                        _ => sc.skip_value(),
                    })?;
                    if let Some((name, at)) = name {
                        let line = sc.line(at);
                        w.nodes.push((name, line));
                    }
                    Some(())
                })
            }
            _ => sc.skip_value(),
        })?;
        Some(w)
    }
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
        .files
        .iter()
        .flat_map(|file| {
            let lines = file.source.as_deref().map(NodeLines::read);
            file.findings.iter().map(move |f| (file, f, lines.as_ref().and_then(|l| {
                l.line(&f.workflow, f.workflow_id.as_deref(), f.node.as_deref()?)
            })))
        })
        .map(|(file, f, line)| {
            let rule_index = RULES.iter().position(|x| x.id == f.rule).unwrap_or(0);
            let line = line.unwrap_or(1);
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
    fn sarif_points_at_the_node_inside_the_nodes_array() {
        // The workflow, a parameter and the node share the name; in an array of workflows
        // the node of the workflow the finding names is meant.
        let source = r#"[
  {"name": "Send", "id": "w0",
   "nodes": [{"name": "Send", "parameters": {"x": {"name": "Send"}}}]},
  {
    "name": "Send",
    "id": "w1",
    "meta": {"name": "Send", "nodes": [{"name": "Send"}]},
    "nodes": [
      {"parameters": {"name": "Send", "list": [1, -2.5e3, true, null, "a\"b"]},
       "type": "n8n-nodes-base.gmail",
       "name": "Send"},
      {"name": "Caf\u00e9"}
    ]
  }
]"#;
        let mut r = report();
        r.files[0].source = Some(source.into());
        let f = &mut r.files[0].findings[0];
        f.workflow = "Send".into();
        f.workflow_id = Some("w1".into());
        f.node = Some("Send".into());
        let mut g = f.clone();
        g.node = Some("Café".into());
        r.files[0].findings.push(g);
        let s = sarif(&r);
        let line = |i: usize| {
            s["runs"][0]["results"][i]["locations"][0]["physicalLocation"]["region"]["startLine"]
                .clone()
        };
        assert_eq!(line(0), 11);
        assert_eq!(line(1), 12);
        // The other workflow of the same name, by its id.
        r.files[0].findings[0].workflow_id = Some("w0".into());
        assert_eq!(
            sarif(&r)["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"]
                ["startLine"],
            3
        );
        // A single workflow with a BOM; text that is not JSON points at line 1.
        let one = "\u{feff}{\"name\": \"Send\",\n \"nodes\": [\n {\"name\": \"Send\"}]}";
        let lines = NodeLines::read(one);
        assert_eq!(lines.line("Send", None, "Send"), Some(3));
        assert_eq!(
            NodeLines::read("{\"nodes\": [{\"name\": ").line("x", None, "x"),
            None
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
