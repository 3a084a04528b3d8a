//! What each node *is* for the audit: a trigger, a call to idem (which operation, which key),
//! a side effect, a Remove Duplicates, a Respond to Webhook — and what each output of an
//! IF / Switch / idem node tells about the claim's outcome.
//!
//! Invariant: a disabled node is [`Role::Other`] (n8n passes items through it untouched), so
//! it is never a gate, an effect or a check.

use serde_json::Value;

use crate::catalog::{self, EffectKind};
use crate::expr;
use crate::workflow::Node;

/// The idem operations the rules care about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdemOp {
    Claim,
    Effect,
    Complete,
    Fail,
    Prepare,
    Other,
}

impl IdemOp {
    /// The operation named `name` (a path's last segment, the community node's `operation`).
    fn named(name: &str) -> IdemOp {
        match name {
            "claim" => IdemOp::Claim,
            "effect" => IdemOp::Effect,
            "complete" => IdemOp::Complete,
            "fail" => IdemOp::Fail,
            "prepare" => IdemOp::Prepare,
            _ => IdemOp::Other,
        }
    }
}

/// A call to idem, through HTTP Request or the community node.
#[derive(Debug, Clone)]
pub struct IdemCall {
    pub op: IdemOp,
    /// The key's text (URL segment or the node's `key` parameter).
    pub key: Option<String>,
    /// A precomputed fingerprint's text, when one is sent.
    pub fingerprint: Option<String>,
    /// Through the community node (its outputs are the outcomes).
    pub community: bool,
    /// A `prepare` that holds the payload for approval.
    pub approval_required: bool,
}

impl IdemCall {
    /// Claim and effect gate a side effect; the others report.
    pub fn is_gate(&self) -> bool {
        matches!(self.op, IdemOp::Claim | IdemOp::Effect)
    }
}

/// A side effect: what it is, for the message.
#[derive(Debug, Clone)]
pub struct Effect {
    pub kind: EffectKind,
    /// "Gmail message:send", "HTTP POST".
    pub what: String,
}

#[derive(Debug, Clone)]
pub enum Role {
    Trigger { schedule: bool },
    Idem(IdemCall),
    Effect(Effect),
    RemoveDuplicates,
    RespondToWebhook,
    Other,
}

/// The role of a node; `extra` are node types given with `--side-effect`.
pub fn role(node: &Node, extra: &[String]) -> Role {
    if node.disabled {
        return Role::Other;
    }
    let t = node.node_type.as_str();
    if catalog::is_trigger(t) {
        return Role::Trigger {
            schedule: catalog::is_schedule(t),
        };
    }
    if t == catalog::IDEM_NODE {
        return Role::Idem(community_call(node));
    }
    if t == catalog::HTTP_REQUEST {
        return http_role(node);
    }
    if t == catalog::REMOVE_DUPLICATES {
        // Clearing the history deduplicates nothing.
        return match node.str_param(&["operation"]) {
            Some("clearDeduplicationHistory") => Role::Other,
            _ => Role::RemoveDuplicates,
        };
    }
    if t == catalog::RESPOND_TO_WEBHOOK {
        return Role::RespondToWebhook;
    }
    if extra.iter().any(|x| custom_matches(x, t)) {
        return Role::Effect(Effect {
            kind: EffectKind::Custom,
            what: format!("{t} (listed with --side-effect)"),
        });
    }
    if let Some(spec) = catalog::effect_spec(t) {
        let (resource, operation) = spec.resolve(
            node.version,
            node.str_param(&["authentication"]),
            node.str_param(&["resource"]),
            node.str_param(&["operation"]),
        );
        if spec.writes(&resource, &operation) {
            let what = match (resource.as_str(), operation.as_str()) {
                ("", "call_workflow") => spec.label.to_owned(),
                ("", op) => format!("{} {op}", spec.label),
                (r, op) => format!("{} {r}:{op}", spec.label),
            };
            return Role::Effect(Effect {
                kind: spec.kind,
                what,
            });
        }
    }
    Role::Other
}

/// `--side-effect` takes a full type (`n8n-nodes-base.foo`, `@scope/pkg.foo`) or the bare node
/// name of `n8n-nodes-base` (`foo`).
fn custom_matches(given: &str, node_type: &str) -> bool {
    given == node_type || (!given.contains('.') && node_type == format!("n8n-nodes-base.{given}"))
}

fn http_role(node: &Node) -> Role {
    let url = node.str_param(&["url"]).unwrap_or("");
    if let Some(p) = expr::idem_path(url) {
        let op = IdemOp::named(&p.op);
        let body = body_text(node);
        return Role::Idem(IdemCall {
            op,
            key: p.key,
            fingerprint: body_field(&body, "fingerprint"),
            community: false,
            approval_required: op == IdemOp::Prepare && approval_in(&body),
        });
    }
    let method = http_method(node);
    let writes = match &method {
        // An expression may pick any method: count it as writing.
        m if m.starts_with('=') => true,
        m => catalog::WRITING_METHODS.contains(&m.to_ascii_uppercase().as_str()),
    };
    if writes {
        Role::Effect(Effect {
            kind: EffectKind::Http,
            what: format!("HTTP {}", method.trim_start_matches('=')),
        })
    } else {
        Role::Other
    }
}

/// The HTTP method (`method` from v3, `requestMethod` before; GET by default).
pub fn http_method(node: &Node) -> String {
    let p = if node.version >= 3.0 {
        "method"
    } else {
        "requestMethod"
    };
    node.str_param(&[p]).unwrap_or("GET").to_owned()
}

/// Every body text of an HTTP Request (JSON body, raw body, body fields), for searching.
pub fn body_text(node: &Node) -> String {
    let mut parts: Vec<String> = Vec::new();
    for p in ["jsonBody", "body", "bodyParametersJson"] {
        if let Some(s) = node.str_param(&[p]) {
            parts.push(s.to_owned());
        }
    }
    for path in [
        &["bodyParameters", "parameters"][..],
        &["bodyParametersUi", "parameter"][..],
    ] {
        if let Some(Value::Array(a)) = node.param(path) {
            for p in a {
                let name = p.get("name").and_then(Value::as_str).unwrap_or("");
                let value = p.get("value").and_then(Value::as_str).unwrap_or("");
                parts.push(format!("{name}: {value}"));
            }
        }
    }
    parts.join("\n")
}

fn body_field(body: &str, field: &str) -> Option<String> {
    expr::js_assignment(body, field)
        .or_else(|| expr::js_assignment(body, &format!("\"{field}\"")))
        .filter(|v| !v.is_empty())
}

fn approval_in(body: &str) -> bool {
    expr::js_assignment(body, "approval_required")
        .is_some_and(|v| v.trim_matches(['"', '\'']).starts_with("true"))
}

fn community_call(node: &Node) -> IdemCall {
    let op = IdemOp::named(node.str_param(&["operation"]).unwrap_or("claim"));
    // The node's defaults (IdempotencyGate.node.ts): a claim keys on the event id, the
    // reports read the key the claim put on the item (`idem.key`).
    let default_key = match op {
        IdemOp::Claim | IdemOp::Effect => "={{ $json.body ? $json.body.id : $json.id }}",
        _ => "={{ $json.idem ? $json.idem.key : \"\" }}",
    };
    let key = node.str_param(&["key"]).unwrap_or(default_key).to_owned();
    let fingerprint = match node.str_param(&["fingerprintMode"]) {
        Some("fingerprint") => node.str_param(&["fingerprint"]).map(str::to_owned),
        _ => None,
    };
    IdemCall {
        op,
        key: Some(key),
        fingerprint,
        community: true,
        approval_required: op == IdemOp::Prepare
            && node.param(&["approvalRequired"]).and_then(Value::as_bool) == Some(true),
    }
}

/// What leaving a node through one output says about the last claim's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputCheck {
    /// Only `acquired` items leave here.
    Acquired,
    /// Only `completed` items (the duplicate branch).
    Completed,
    /// Only outcomes other than `acquired` (busy, review, conflict…).
    NotAcquired,
    /// Says nothing about the outcome.
    Unchanged,
}

/// One condition's test of the outcome: (`equal`, value).
type Test = (bool, String);

/// Every `outcome` idem answers: the claim's (API.md) and `performed` of an `/effect`.
pub const OUTCOMES: &[&str] = &[
    "acquired",
    "completed",
    "failed_permanent",
    "conflict",
    "in_flight",
    "backoff",
    "needs_review",
    "awaiting_approval",
    "paused",
    "limited",
    "performed",
];

/// A test of the outcome against `value`, if `value` is an outcome exactly: a comparison
/// with anything else (`acquired_x`, `acquire`, ` acquired`) selects no outcome and tells
/// nothing.
fn outcome_test(equal: bool, value: &str) -> Option<Test> {
    OUTCOMES.contains(&value).then(|| (equal, value.to_owned()))
}

fn check_of(tests: &[Option<Test>], all: bool) -> OutputCheck {
    let known: Vec<&Test> = tests.iter().flatten().collect();
    if known.is_empty() {
        return OutputCheck::Unchanged;
    }
    // With AND one outcome condition is enough; with OR every condition must be about it.
    if !all && known.len() != tests.len() {
        return OutputCheck::Unchanged;
    }
    let is = |pred: &dyn Fn(&Test) -> bool| {
        if all {
            known.iter().any(|t| pred(t))
        } else {
            known.iter().all(|t| pred(t))
        }
    };
    if is(&|(eq, v)| *eq && v == "acquired") {
        OutputCheck::Acquired
    } else if is(&|(eq, v)| *eq && v == "completed") {
        OutputCheck::Completed
    } else if is(&|(eq, v)| (*eq && v != "acquired") || (!*eq && v == "acquired")) {
        OutputCheck::NotAcquired
    } else {
        OutputCheck::Unchanged
    }
}

fn negate(c: OutputCheck) -> OutputCheck {
    match c {
        OutputCheck::Acquired => OutputCheck::NotAcquired,
        _ => OutputCheck::Unchanged,
    }
}

/// A filter condition (IF v2, Switch v3): its test of the outcome, if it is one.
fn filter_condition(c: &Value) -> Option<Test> {
    let left = value_text(c.get("leftValue")?);
    let right = c.get("rightValue").map(value_text).unwrap_or_default();
    let op = c.get("operator")?;
    let ty = op.get("type").and_then(Value::as_str).unwrap_or("string");
    let operation = op.get("operation").and_then(Value::as_str).unwrap_or("");
    match (ty, operation) {
        ("string", "equals" | "notEquals") => {
            let eq = operation == "equals";
            if expr::reads_outcome(&left) && !right.starts_with('=') {
                outcome_test(eq, &right)
            } else if expr::reads_outcome(&right) && !left.starts_with('=') {
                outcome_test(eq, &left)
            } else {
                None
            }
        }
        ("boolean", "true" | "false") => {
            let (eq, v) = expr::outcome_comparison(&left)?;
            outcome_test(if operation == "true" { eq } else { !eq }, &v)
        }
        _ => None,
    }
}

fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// Tests of a filter parameter (`{conditions: [...], combinator}`) and whether all must hold.
fn filter_tests(filter: &Value) -> (Vec<Option<Test>>, bool) {
    let conds = filter
        .get("conditions")
        .and_then(Value::as_array)
        .map(|a| a.iter().map(filter_condition).collect())
        .unwrap_or_default();
    let all = filter.get("combinator").and_then(Value::as_str) != Some("or");
    (conds, all)
}

/// IF v1: `conditions.string[{value1, operation, value2}]` and `conditions.boolean[…]`.
fn if_v1_tests(node: &Node) -> (Vec<Option<Test>>, bool) {
    let mut tests = Vec::new();
    if let Some(Value::Object(groups)) = node.param(&["conditions"]) {
        for (ty, list) in groups {
            for c in list.as_array().into_iter().flatten() {
                let v1 = c.get("value1").map(value_text).unwrap_or_default();
                let v2 = c.get("value2").map(value_text).unwrap_or_default();
                let op = c
                    .get("operation")
                    .and_then(Value::as_str)
                    .unwrap_or("equal");
                let t = match (ty.as_str(), op) {
                    ("string", "equal" | "notEqual") if expr::reads_outcome(&v1) => {
                        outcome_test(op == "equal", &v2)
                    }
                    ("boolean", _) => expr::outcome_comparison(&v1)
                        .and_then(|(eq, v)| outcome_test(if v2 == "false" { !eq } else { eq }, &v)),
                    _ => None,
                };
                tests.push(t);
            }
        }
    }
    let all = node.str_param(&["combineOperation"]) != Some("any");
    (tests, all)
}

/// What each output of a node says about the outcome (outputs not listed: unchanged).
pub fn output_checks(node: &Node, role: &Role) -> Vec<OutputCheck> {
    if node.disabled {
        return Vec::new();
    }
    if let Role::Idem(call) = role {
        if call.community && call.op == IdemOp::Claim {
            // Proceed, Duplicate, Busy, Needs Review, Blocked (IdempotencyGate.node.ts).
            return vec![
                OutputCheck::Acquired,
                OutputCheck::Completed,
                OutputCheck::NotAcquired,
                OutputCheck::NotAcquired,
                OutputCheck::NotAcquired,
            ];
        }
        return Vec::new();
    }
    match node.node_type.as_str() {
        catalog::IF => {
            let (tests, all) = if node.version >= 2.0 {
                node.param(&["conditions"])
                    .map(filter_tests)
                    .unwrap_or_default()
            } else {
                if_v1_tests(node)
            };
            let yes = check_of(&tests, all);
            // The false branch is the negation only for a single plain test.
            let no = if tests.len() == 1 {
                match &tests[0] {
                    Some((false, v)) if v == "acquired" => OutputCheck::Acquired,
                    _ => negate(yes),
                }
            } else {
                OutputCheck::Unchanged
            };
            vec![yes, no]
        }
        catalog::SWITCH => switch_checks(node),
        _ => Vec::new(),
    }
}

fn switch_checks(node: &Node) -> Vec<OutputCheck> {
    if node.str_param(&["mode"]).unwrap_or("rules") != "rules" {
        return Vec::new();
    }
    if node.version >= 3.0 {
        // One output per rule, in order; the fallback output (if any) comes after them and
        // is not a check.
        node.param(&["rules", "values"])
            .and_then(Value::as_array)
            .map(|rules| {
                rules
                    .iter()
                    .map(|r| {
                        let (tests, all) =
                            r.get("conditions").map(filter_tests).unwrap_or_default();
                        check_of(&tests, all)
                    })
                    .collect()
            })
            .unwrap_or_default()
    } else {
        // v1/v2: `value1` against each rule's `value2`, the rule names its `output`.
        let v1 = node.str_param(&["value1"]).unwrap_or("");
        if !expr::reads_outcome(v1) {
            return Vec::new();
        }
        let mut out = vec![OutputCheck::Unchanged; 4];
        for r in node
            .param(&["rules", "rules"])
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            // Switch v1/v2 have at most four outputs; anything else is not a real export.
            let Some(output) = r
                .get("output")
                .map_or(Some(0), Value::as_u64)
                .filter(|o| *o < 64)
                .map(|o| o as usize)
            else {
                continue;
            };
            let op = r
                .get("operation")
                .and_then(Value::as_str)
                .unwrap_or("equal");
            let v2 = r.get("value2").map(value_text).unwrap_or_default();
            let test = match op {
                "equal" => outcome_test(true, &v2),
                "notEqual" => outcome_test(false, &v2),
                _ => None,
            };
            if output >= out.len() {
                out.resize(output + 1, OutputCheck::Unchanged);
            }
            out[output] = check_of(&[test], true);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workflow::OnError;
    use serde_json::json;

    fn node(t: &str, v: f64, params: Value) -> Node {
        Node {
            name: "N".into(),
            node_type: t.into(),
            version: v,
            params,
            disabled: false,
            retry_on_fail: false,
            max_tries: 3,
            on_error: OnError::Stop,
        }
    }

    /// An HTTP Request node of version `v`.
    fn http(v: f64, params: Value) -> Node {
        node(catalog::HTTP_REQUEST, v, params)
    }

    /// The idem call a v4.2 HTTP Request node POSTing `json_body` to `url` is read as.
    fn idem_post(url: &str, json_body: &str) -> IdemCall {
        let n = http(
            4.2,
            json!({"method": "POST", "url": url, "jsonBody": json_body}),
        );
        match role(&n, &[]) {
            Role::Idem(c) => c,
            _ => panic!("not an idem call: {url}"),
        }
    }

    #[test]
    fn http_roles() {
        let post = http(
            4.2,
            json!({"method": "POST", "url": "https://api.example/x"}),
        );
        assert!(matches!(role(&post, &[]), Role::Effect(_)));
        let get = http(4.2, json!({"url": "https://api.example/x"}));
        assert!(matches!(role(&get, &[]), Role::Other));
        let v1_post = http(1.0, json!({"requestMethod": "POST", "url": "https://x"}));
        assert!(matches!(role(&v1_post, &[]), Role::Effect(_)));
        let c = idem_post(
            "={{ $json.u }}/v1/namespaces/n/keys/{{ $json.k }}/claim",
            "={{ JSON.stringify({ payload: $json.body, fingerprint: $json.fp }) }}",
        );
        assert_eq!(c.op, IdemOp::Claim);
        assert_eq!(c.key.as_deref(), Some("{{ $json.k }}"));
        assert_eq!(c.fingerprint.as_deref(), Some("$json.fp"));
        let p = idem_post(
            "=/v1/namespaces/n/keys/k/prepare",
            "={{ JSON.stringify({ token: $json.t, approval_required: true }) }}",
        );
        assert!(p.approval_required);
    }

    #[test]
    fn app_roles_use_defaults_and_extra_types() {
        let gmail = node("n8n-nodes-base.gmail", 2.1, json!({"sendTo": "a@b"}));
        assert!(matches!(role(&gmail, &[]), Role::Effect(_)));
        let sheet_read = node("n8n-nodes-base.googleSheets", 4.5, json!({}));
        assert!(matches!(role(&sheet_read, &[]), Role::Other));
        let mut disabled = gmail.clone();
        disabled.disabled = true;
        assert!(matches!(role(&disabled, &[]), Role::Other));
        let custom = node("n8n-nodes-base.mailchimp", 1.0, json!({}));
        assert!(matches!(
            role(&custom, &["mailchimp".into()]),
            Role::Effect(_)
        ));
    }

    #[test]
    fn switch_and_if_outputs() {
        let sw = node(
            catalog::SWITCH,
            3.2,
            json!({"rules": {"values": [
                {"conditions": {"conditions": [{"leftValue": "={{ $json.body.outcome }}", "rightValue": "acquired",
                   "operator": {"type": "string", "operation": "equals"}}], "combinator": "and"}},
                {"conditions": {"conditions": [{"leftValue": "={{ $json.body.outcome }}", "rightValue": "completed",
                   "operator": {"type": "string", "operation": "equals"}}], "combinator": "and"}},
                {"conditions": {"conditions": [{"leftValue": "={{ $json.statusCode }}", "rightValue": 200,
                   "operator": {"type": "number", "operation": "equals"}}], "combinator": "and"}}
            ]}}),
        );
        assert_eq!(
            output_checks(&sw, &Role::Other),
            [
                OutputCheck::Acquired,
                OutputCheck::Completed,
                OutputCheck::Unchanged
            ]
        );
        let iff = node(
            catalog::IF,
            2.2,
            json!({"conditions": {"conditions": [
            {"leftValue": "={{ $json.body.outcome === 'acquired' }}", "rightValue": "",
             "operator": {"type": "boolean", "operation": "true", "singleValue": true}}], "combinator": "and"}}),
        );
        assert_eq!(
            output_checks(&iff, &Role::Other),
            [OutputCheck::Acquired, OutputCheck::NotAcquired]
        );
        let not_completed = node(
            catalog::IF,
            2.2,
            json!({"conditions": {"conditions": [
            {"leftValue": "={{ $json.body.outcome }}", "rightValue": "completed",
             "operator": {"type": "string", "operation": "notEquals"}}], "combinator": "and"}}),
        );
        assert_eq!(
            output_checks(&not_completed, &Role::Other)[0],
            OutputCheck::Unchanged
        );
        let v1 = node(
            catalog::IF,
            1.0,
            json!({"conditions": {"string": [
            {"value1": "={{ $json.outcome }}", "operation": "equal", "value2": "acquired"}]}}),
        );
        assert_eq!(output_checks(&v1, &Role::Other)[0], OutputCheck::Acquired);
    }

    /// A value that is no outcome selects nothing: neither the acquired branch nor a
    /// non-acquired one (an effect there is still unchecked).
    #[test]
    fn near_miss_outcome_values_check_nothing() {
        for v in [
            "acquired_x",
            "acquire",
            "Acquired",
            " acquired",
            "acquired\n",
        ] {
            let v1 = node(
                catalog::IF,
                1.0,
                json!({"conditions": {"string": [
                {"value1": "={{ $json.outcome }}", "operation": "equal", "value2": v}]}}),
            );
            assert_eq!(
                output_checks(&v1, &Role::Other),
                [OutputCheck::Unchanged, OutputCheck::Unchanged],
                "{v:?}"
            );
            let sw = node(
                catalog::SWITCH,
                2.0,
                json!({"dataType": "string", "value1": "={{ $json.body.outcome }}",
                "rules": {"rules": [{"operation": "equal", "value2": v, "output": 0}]}}),
            );
            assert_eq!(output_checks(&sw, &Role::Other)[0], OutputCheck::Unchanged);
        }
        let review = node(
            catalog::IF,
            1.0,
            json!({"conditions": {"string": [
            {"value1": "={{ $json.outcome }}", "operation": "equal", "value2": "needs_review"}]}}),
        );
        assert_eq!(
            output_checks(&review, &Role::Other)[0],
            OutputCheck::NotAcquired
        );
    }

    #[test]
    fn switch_v2_rules_read_their_output_and_ignore_absurd_ones() {
        let sw = node(
            catalog::SWITCH,
            2.0,
            json!({"dataType": "string", "value1": "={{ $json.body.outcome }}",
            "rules": {"rules": [
                {"operation": "equal", "value2": "completed", "output": 2},
                {"operation": "equal", "value2": "acquired", "output": 1_000_000_000_000u64}]}}),
        );
        let checks = output_checks(&sw, &Role::Other);
        assert_eq!(checks.len(), 4);
        assert_eq!(checks[2], OutputCheck::Completed);
        assert!(!checks.contains(&OutputCheck::Acquired));
    }
}
