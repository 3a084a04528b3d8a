//! The seventeen rules of the audit contract. Each rule is one small pure function over a
//! [`Cx`] (the workflow, the roles of its nodes and the states of paths from triggers) that
//! returns its findings; [`run_all`] runs them in order and applies the cross-rule readings
//! (IDEM002 replaces IDEM001 for the same node). The table [`RULES`] gives each rule its id,
//! name, severity and help text (also the SARIF `tool.driver.rules`).

mod agents;
mod gating;
mod keys;
mod misc;
mod nodes;

pub use agents::idem017;
pub use gating::{idem001, idem002, idem005, idem006, idem007, idem012, idem014};
pub use keys::{idem003, idem004};
pub use misc::{idem011, idem015, idem016};
pub use nodes::{idem008, idem009, idem010, idem013};

use serde_json::Value;

use crate::catalog;
use crate::expr::{self, FieldRef};
use crate::flow::{Check, Flow, PathState};
use crate::model::{IdemCall, IdemOp, Role};
use crate::workflow::{Node, Workflow};
use crate::{Finding, Options, Severity};

/// A rule's fixed facts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuleInfo {
    pub id: &'static str,
    pub name: &'static str,
    pub severity: Severity,
    /// One sentence: what it finds.
    pub summary: &'static str,
    /// What to do about it.
    pub help: &'static str,
}

const fn rule(
    id: &'static str,
    name: &'static str,
    severity: Severity,
    summary: &'static str,
    help: &'static str,
) -> RuleInfo {
    RuleInfo {
        id,
        name,
        severity,
        summary,
        help,
    }
}

/// Every rule, in id order.
pub const RULES: &[RuleInfo] = &[
    rule("IDEM001", "ungated-side-effect", Severity::Error,
        "A side effect is reachable from a trigger by a path with no idem gate before it.",
        "Put a claim (HTTP Request to …/keys/{key}/claim, or the Idempotency Gate node) between the trigger and the side effect, and continue only on outcome = acquired."),
    rule("IDEM002", "gate-after-effect", Severity::Error,
        "A side effect's gate comes only after it on the path: a gate after the effect is a comment.",
        "Move the claim in front of the side effect; after the effect, report with complete (or fail)."),
    rule("IDEM003", "unstable-key", Severity::Error,
        "A gate key is built from a value that changes between attempts ($execution.id, $now, Date.now, Math.random, $runIndex, a UUID generator).",
        "Build the key from the event's own id plus the side effect's name (evt_123:charge); for a scheduled job, from the job name and the date."),
    rule("IDEM004", "whole-body-key", Severity::Warning,
        "A key or fingerprint is made from the whole body or item: volatile fields (timestamps, signatures) change on retry.",
        "Key on the provider's event id or on chosen immutable fields; send the body as `payload` and let idem fingerprint it."),
    rule("IDEM005", "outcome-not-checked", Severity::Error,
        "A path from a claim to a side effect does not check that the outcome is acquired (e.g. it only checks the HTTP status).",
        "After the claim add a Switch on {{ $json.body.outcome }} (or use the Idempotency Gate node's Proceed output) and wire the side effect to the acquired branch only."),
    rule("IDEM006", "no-complete", Severity::Error,
        "A side effect after a claim reaches no complete of the same key: the record stays processing and the next delivery waits or goes to review.",
        "After the side effect succeeds, call complete with the same key and the claim's token."),
    rule("IDEM007", "no-fail-route", Severity::Warning,
        "A side effect after a claim has no error output or failure branch that reports fail to idem.",
        "Set the side effect's On Error to 'Continue (using error output)' and route the error output (and the non-2xx branch) to fail with the claim's token."),
    rule("IDEM008", "retry-on-claim", Severity::Warning,
        "Retry On Fail is on for a claim: n8n retries 409 answers too, racing the holder of the lease.",
        "Turn Retry On Fail off on the claim; retry on complete and fail instead (repeating those is harmless)."),
    rule("IDEM009", "claim-errors-as-failures", Severity::Warning,
        "A claim HTTP Request lacks Never Error / Full Response or Response Format JSON: 409/422 answers become execution errors and problem+json is not parsed.",
        "In the claim's Options → Response: turn on Include Response Headers and Status and Never Error, and set Response Format to JSON."),
    rule("IDEM010", "respond-mode", Severity::Warning,
        "A Webhook answers When Last Node Finishes in a workflow with side effects, or answers with Respond to Webhook while the duplicate branch reaches none (a 500 invites the next delivery).",
        "Set the Webhook to respond 'Using Respond to Webhook Node' and answer 200 on the duplicate (completed) branch too."),
    rule("IDEM011", "static-data-gate", Severity::Error,
        "Workflow static data ($getWorkflowStaticData) decides whether a side effect runs: it is not atomic and is not saved in manual test runs.",
        "Replace the static-data check with an idem claim on a stable key."),
    rule("IDEM012", "remove-duplicates-only", Severity::Warning,
        "Remove Duplicates is the only deduplication before a side effect: two concurrent executions can both see the item as new.",
        "Keep Remove Duplicates as a filter if you like, but put an idem claim in front of the side effect."),
    rule("IDEM013", "no-outbound-key", Severity::Warning,
        "A POST to a provider that honours idempotency keys (Stripe, PayPal, Adyen, Square, Checkout.com) is sent without its key.",
        "Add the provider's idempotency header (Stripe: Idempotency-Key) with the same stable key you claimed, e.g. {{ $('Claim').item.json.body.record.key }}."),
    rule("IDEM014", "shared-key", Severity::Warning,
        "Two gates use the same key expression for different side effects: the second one sees the first one's record.",
        "Give each side effect its own key with a suffix (evt_123:charge, evt_123:email)."),
    rule("IDEM015", "retry-amplification", Severity::Info,
        "The worst-case number of calls a side effect can make: the product of the retry layers on its path.",
        "Appoint one retry owner: keep Retry On Fail or the loop, not both, and keep the side effect behind a gate."),
    rule("IDEM016", "no-error-workflow", Severity::Info,
        "A workflow with side effects has no error workflow in its settings.",
        "Open Workflow Settings and choose an Error Workflow that alerts a person."),
    rule("IDEM017", "agent-tool-side-effect", Severity::Warning,
        "An AI agent's tool writes (an HTTP Request tool with POST/PUT/PATCH/DELETE, a mail, chat, CRM, sheet or database tool, an MCP Client Tool of another server) and is not behind idem: the agent may call it twice.",
        "Declare the side effect as an idem action keyed by the business identity of its arguments, and give the agent an MCP Client Tool pointing at idem's /mcp/{namespace} instead of the tool."),
];

/// The facts of a rule by id.
pub fn rule_info(id: &str) -> Option<&'static RuleInfo> {
    RULES.iter().find(|r| r.id == id)
}

/// What every rule reads.
pub struct Cx<'a> {
    pub flow: Flow<'a>,
    pub opts: &'a Options,
}

impl<'a> Cx<'a> {
    pub fn new(wf: &'a Workflow, opts: &'a Options) -> Self {
        Cx {
            flow: Flow::new(wf, &opts.side_effects),
            opts,
        }
    }

    pub fn wf(&self) -> &Workflow {
        self.flow.wf
    }

    pub fn node(&self, i: usize) -> &Node {
        &self.flow.wf.nodes[i]
    }

    pub fn name(&self, i: usize) -> &str {
        self.flow.name(i)
    }

    pub fn call(&self, i: usize) -> Option<&IdemCall> {
        match &self.flow.roles[i] {
            Role::Idem(c) => Some(c),
            _ => None,
        }
    }

    pub fn is_claim(&self, i: usize) -> bool {
        self.call(i).is_some_and(|c| c.op == IdemOp::Claim)
    }

    /// A finding of `rule` about node `node` (or the whole workflow).
    pub fn finding(
        &self,
        rule: &'static str,
        node: Option<usize>,
        message: String,
        fix: String,
    ) -> Finding {
        let severity = rule_info(rule)
            .map(|r| r.severity)
            .unwrap_or(Severity::Info);
        Finding {
            rule,
            severity,
            workflow: self.wf().name.clone(),
            workflow_id: self.wf().id.clone(),
            node: node.map(|i| self.name(i).to_owned()),
            message,
            fix,
        }
    }

    /// States at side effect `e` that come from a claim and are *guarded* by it: not on a
    /// branch that requires another outcome, not held for approval.
    pub fn guarded_by_claim(&self, e: usize) -> Vec<PathState> {
        let mut out: Vec<PathState> = self.flow.states[e]
            .iter()
            .filter(|s| {
                s.gate.is_some_and(|g| self.is_claim(g))
                    && matches!(s.check, Check::Acquired | Check::Unchecked)
                    && !s.approval
            })
            .copied()
            .collect();
        out.dedup();
        out
    }

    /// The distinct claims guarding side effect `e` (see [`Cx::guarded_by_claim`]).
    pub fn guarding_claims(&self, e: usize) -> Vec<usize> {
        let mut gates: Vec<usize> = self
            .guarded_by_claim(e)
            .iter()
            .filter_map(|s| s.gate)
            .collect();
        gates.sort_unstable();
        gates.dedup();
        gates
    }

    /// Whether some node downstream of `from` is an idem `op` whose key matches `claim`'s.
    pub fn reaches_report(&self, from: usize, claim: usize, op: IdemOp) -> bool {
        let claim_key = self
            .call(claim)
            .and_then(|c| c.key.clone())
            .unwrap_or_default();
        let down = self.flow.downstream(from);
        (0..down.len()).any(|n| {
            down[n]
                && self.call(n).is_some_and(|c| {
                    c.op == op && same_key(&claim_key, c.key.as_deref().unwrap_or(""))
                })
        })
    }

    /// The texts a gate's key is made of: the key itself, then (one hop upstream) the value
    /// of each field it reads from a Set / Code / Crypto node, with that node's index.
    pub fn key_sources(&self, gate: usize, text: &str) -> Vec<(String, Option<usize>)> {
        let mut out = vec![(text.to_owned(), None)];
        for FieldRef { node, field } in expr::field_refs(text) {
            let builders: Vec<usize> = match &node {
                Some(name) => self.wf().node_index(name).into_iter().collect(),
                None => self.flow.pred[gate].clone(),
            };
            for b in builders {
                if let Some(def) = field_definition(self.node(b), &field) {
                    out.push((def, Some(b)));
                }
            }
        }
        out
    }
}

/// Whether a report's key names the same record as a claim's key: the same text, read from
/// the claim's answer (`record.key`, `idem.key`), or not contradicting it in its literal
/// parts (`…:crm` against `…:receipt` contradict).
///
/// Both keys are compared with their item reads in one form
/// ([`expr::canonical_item_reads`]): `$json.body.id`, `$('Webhook').item.json.body.id` and
/// `$node["Webhook"].json.body.id` read the same field, and the node's name is no literal part.
pub fn same_key(claim: &str, other: &str) -> bool {
    if other.contains("record.key") || other.contains("idem.key") {
        return true;
    }
    let claim = expr::canonical_item_reads(claim);
    let other = expr::canonical_item_reads(other);
    if expr::normalize(&claim) == expr::normalize(&other) {
        return true;
    }
    let a = expr::literal_pieces(&claim);
    let b = expr::literal_pieces(&other);
    a.is_empty() || b.is_empty() || a == b
}

/// The text that defines `field` in a Set, Code or Crypto node (`None` for other nodes, or
/// when the node does not set it).
pub fn field_definition(node: &Node, field: &str) -> Option<String> {
    let t = node.node_type.as_str();
    if t == catalog::SET {
        let mut found = Vec::new();
        named_values(&node.params, field, &mut found);
        if let Some(raw) = node.str_param(&["jsonOutput"]) {
            found.extend(expr::js_assignment(raw, field));
            found.extend(expr::js_assignment(raw, &format!("\"{field}\"")));
        }
        return (!found.is_empty()).then(|| found.join(" | "));
    }
    if catalog::CODE_NODES.contains(&t) {
        let code = ["jsCode", "functionCode", "code"]
            .iter()
            .find_map(|p| node.str_param(&[p]))?;
        // `{ idempotencyKey: hash }` is judged by what `hash` is made of.
        return expr::js_assignment(code, field).map(|v| expr::js_expand_locals(code, &v));
    }
    if t == catalog::CRYPTO {
        let prop = node.str_param(&["dataPropertyName"]).unwrap_or("data");
        if prop != field {
            return None;
        }
        return Some(match node.str_param(&["action"]).unwrap_or("hash") {
            // Generate makes random bytes or a UUID: a new value on every run.
            "generate" => "randomUUID()".to_owned(),
            _ => node.str_param(&["value"]).unwrap_or("").to_owned(),
        });
    }
    None
}

/// Values of `{name: field, value|stringValue|…: X}` objects anywhere in `v` (Set v1–v3).
fn named_values(v: &Value, field: &str, out: &mut Vec<String>) {
    match v {
        Value::Object(o) => {
            if o.get("name").and_then(Value::as_str) == Some(field) {
                for k in [
                    "value",
                    "stringValue",
                    "numberValue",
                    "booleanValue",
                    "arrayValue",
                    "objectValue",
                ] {
                    if let Some(x) = o.get(k) {
                        out.push(match x {
                            Value::String(s) => s.clone(),
                            other => other.to_string(),
                        });
                    }
                }
            }
            o.values().for_each(|x| named_values(x, field, out));
        }
        Value::Array(a) => a.iter().for_each(|x| named_values(x, field, out)),
        _ => {}
    }
}

/// Every rule over one workflow, in rule order.
pub fn run_all(wf: &Workflow, opts: &Options) -> Vec<Finding> {
    let cx = Cx::new(wf, opts);
    let gate_after = idem002(&cx);
    let mut out: Vec<Finding> = idem001(&cx)
        .into_iter()
        // IDEM002 replaces IDEM001 for the same node.
        .filter(|f| !gate_after.iter().any(|g| g.node == f.node))
        .collect();
    out.extend(gate_after);
    for rule in [
        idem003, idem004, idem005, idem006, idem007, idem008, idem009, idem010, idem011, idem012,
        idem013, idem014, idem015, idem016, idem017,
    ] {
        out.extend(rule(&cx));
    }
    out
}

/// Shorthand for rule tests: the findings of one rule over a fixture file's workflow.
#[cfg(test)]
pub(crate) fn check(rule: fn(&Cx) -> Vec<Finding>, fixture: &str) -> Vec<Finding> {
    let doc: Value = serde_json::from_str(fixture).expect("fixture is JSON");
    let wfs = crate::parse_document(&doc).expect("fixture is a workflow");
    let opts = Options::default();
    wfs.iter()
        .flat_map(|wf| rule(&Cx::new(wf, &opts)))
        .collect()
}

/// The names of the nodes a list of findings is about.
#[cfg(test)]
pub(crate) fn nodes_of(f: &[Finding]) -> Vec<&str> {
    f.iter().map(|x| x.node.as_deref().unwrap_or("-")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_table_is_complete_and_ordered() {
        assert_eq!(RULES.len(), 17);
        for (i, r) in RULES.iter().enumerate() {
            assert_eq!(r.id, format!("IDEM{:03}", i + 1));
            assert!(!r.help.is_empty() && !r.summary.is_empty());
        }
    }

    #[test]
    fn same_key_reading() {
        let claim = "{{ encodeURIComponent($('Stripe webhook').item.json.body.id + ':crm') }}";
        assert!(same_key(claim, claim));
        assert!(same_key(
            claim,
            "{{ encodeURIComponent($('Claim').item.json.body.record.key) }}"
        ));
        assert!(!same_key(
            claim,
            "{{ encodeURIComponent($('Stripe webhook').item.json.body.id + ':receipt') }}"
        ));
        assert!(same_key(
            "{{ $json.key }}",
            "{{ $('Build').item.json.key }}"
        ));
    }

    #[test]
    fn same_key_reads_one_field_through_any_item_form() {
        for claim in [
            "{{ $json.body.event_id + ':effect' }}",
            "{{ $json.body.event_id }}:effect",
            "{{ encodeURIComponent($json.body.event_id + ':effect') }}",
        ] {
            for report in [
                "{{ $('Webhook').item.json.body.event_id + ':effect' }}",
                "{{ $('Webhook').item.json.body.event_id }}:effect",
                "{{ $('Webhook').first().json.body.event_id + ':effect' }}",
                "{{ $node[\"Webhook\"].json.body.event_id }}:effect",
                "{{ $input.item.json.body['event_id'] + ':effect' }}",
                "{{ encodeURIComponent($('Webhook').item.json.body.event_id + ':effect') }}",
            ] {
                assert!(same_key(claim, report), "{claim} / {report}");
            }
            // Literal parts that differ still contradict, whatever the item form.
            for report in [
                "{{ $('Webhook').item.json.body.event_id + ':crm' }}",
                "{{ $node[\"Webhook\"].json.body.event_id }}:receipt",
                "{{ $input.item.json.body.event_id + ':effect:v2' }}",
            ] {
                assert!(!same_key(claim, report), "{claim} / {report}");
            }
        }
        assert!(!same_key(
            "{{ $('Webhook').item.json.body.id + ':crm' }}",
            "{{ $json.body.id + ':receipt' }}"
        ));
    }
}
