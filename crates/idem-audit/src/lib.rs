//! `idem-audit`: the articles' release checklist as a linter for exported n8n workflows.
//!
//! It owns the reading of n8n's workflow export ([`workflow`]), the node lists as data
//! ([`catalog`]), the graph of paths from triggers ([`flow`]), the seventeen rules of the audit
//! contract ([`rules`], `IDEM001`…`IDEM017`) and the three renderings of their findings
//! ([`output`]: table, JSON, SARIF 2.1.0). It is pure and must stay so: no I/O, no network,
//! no clock, no evaluation of expressions or JavaScript (they are read as text). It takes
//! workflow JSON and returns findings; the CLI reads files and the server reads bodies.

pub mod catalog;
pub mod expr;
pub mod flow;
pub mod model;
pub mod output;
pub mod rules;
pub mod workflow;

use serde::Serialize;
use serde_json::Value;

pub use rules::{rule_info, RuleInfo, RULES};
pub use workflow::{parse_document, ParseError, Workflow};

/// How bad a finding is; ordered, so `--fail-on warning` means "warning or worse".
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Error,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }

    /// The SARIF `level`.
    pub fn sarif_level(self) -> &'static str {
        match self {
            Severity::Info => "note",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

/// One finding: `node` is the node's name, or `None` for a workflow-wide finding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub rule: &'static str,
    pub severity: Severity,
    /// The workflow's name.
    pub workflow: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workflow_id: Option<String>,
    pub node: Option<String>,
    /// Names the node and says why, in one sentence.
    pub message: String,
    /// What to change on the canvas.
    pub fix: String,
}

/// Settings of one audit run.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// More node types to count as side effects (every operation), e.g. `n8n-nodes-base.mailchimp`.
    pub side_effects: Vec<String>,
}

/// Audits one parsed workflow.
pub fn audit_workflow(wf: &Workflow, opts: &Options) -> Vec<Finding> {
    rules::run_all(wf, opts)
}

/// Audits a document holding one workflow or an array of them.
pub fn audit_value(doc: &Value, opts: &Options) -> Result<Vec<Finding>, ParseError> {
    let workflows = parse_document(doc)?;
    Ok(workflows
        .iter()
        .flat_map(|wf| audit_workflow(wf, opts))
        .collect())
}

/// Audits JSON text (the content of an exported file; a leading byte order mark is skipped).
pub fn audit_str(text: &str, opts: &Options) -> Result<Vec<Finding>, ParseError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let doc: Value = serde_json::from_str(text).map_err(|e| ParseError {
        path: String::new(),
        message: format!("not JSON: {e}"),
    })?;
    audit_value(&doc, opts)
}
