//! Rules about one node's settings: IDEM008 (Retry On Fail on a claim), IDEM009 (a claim
//! HTTP Request that turns 409/422 into execution errors), IDEM010 (the Webhook's respond
//! mode), IDEM013 (a POST to a keyed provider without its key).

use serde_json::Value;

use super::Cx;
use crate::catalog::{self, KeyedProvider, KEYED_PROVIDERS};
use crate::flow::Check;
use crate::model::{self, OutputCheck, Role};
use crate::workflow::Node;
use crate::Finding;

/// IDEM008 retry-on-claim, named at the claim.
pub fn idem008(cx: &Cx) -> Vec<Finding> {
    (0..cx.wf().nodes.len())
        .filter(|&g| cx.is_claim(g) && cx.node(g).retry_on_fail)
        .map(|g| {
            cx.finding(
                "IDEM008",
                Some(g),
                format!(
                    "Retry On Fail is on for claim '{}': n8n also retries the 409 of a busy key, so the retry races the execution that holds the lease.",
                    cx.name(g)
                ),
                format!(
                    "Open '{}' → Settings and turn Retry On Fail off; keep retries on complete and fail, where a repeat is harmless.",
                    cx.name(g)
                ),
            )
        })
        .collect()
}

/// What a claim HTTP Request is missing to read every answer as data.
fn claim_response_gaps(node: &Node) -> Vec<&'static str> {
    let mut gaps = Vec::new();
    let flag = |path: &[&str]| node.param(path).and_then(Value::as_bool) == Some(true);
    if node.version >= 3.0 {
        let r = ["options", "response", "response"];
        if !flag(&[r[0], r[1], r[2], "neverError"]) {
            gaps.push("Never Error");
        }
        if !flag(&[r[0], r[1], r[2], "fullResponse"]) {
            gaps.push("Include Response Headers and Status");
        }
        if node.str_param(&[r[0], r[1], r[2], "responseFormat"]) != Some("json") {
            gaps.push("Response Format JSON");
        }
    } else {
        if !flag(&["options", "ignoreResponseCode"]) {
            gaps.push("Ignore Response Code");
        }
        if !flag(&["options", "fullResponse"]) {
            gaps.push("Full Response");
        }
        if node.str_param(&["responseFormat"]).unwrap_or("json") != "json" {
            gaps.push("Response Format JSON");
        }
    }
    gaps
}

/// IDEM009 claim-errors-as-failures, named at the claim.
pub fn idem009(cx: &Cx) -> Vec<Finding> {
    let mut out = Vec::new();
    for g in 0..cx.wf().nodes.len() {
        let Some(call) = cx.call(g) else { continue };
        if call.community || !cx.is_claim(g) {
            continue;
        }
        let gaps = claim_response_gaps(cx.node(g));
        if gaps.is_empty() {
            continue;
        }
        out.push(cx.finding(
            "IDEM009",
            Some(g),
            format!(
                "Claim '{}' is missing {}: idem answers busy and conflicting keys with 409/422 and problem+json, which then become execution errors or unparsed text instead of an outcome to branch on.",
                cx.name(g),
                gaps.join(", ")
            ),
            format!(
                "In '{}' → Options → Response turn on Include Response Headers and Status and Never Error, and set Response Format to JSON.",
                cx.name(g)
            ),
        ));
    }
    out
}

/// IDEM010 respond-mode, named at the Webhook.
pub fn idem010(cx: &Cx) -> Vec<Finding> {
    let mut out = Vec::new();
    for w in 0..cx.wf().nodes.len() {
        let node = cx.node(w);
        if node.node_type != catalog::WEBHOOK || node.disabled {
            continue;
        }
        let mode = node.str_param(&["responseMode"]).unwrap_or("onReceived");
        let down = cx.flow.downstream(w);
        let reaches_effect = cx.flow.effects().any(|e| down[e]);
        if mode == "lastNode" && reaches_effect {
            out.push(cx.finding(
                "IDEM010",
                Some(w),
                format!(
                    "Webhook '{}' answers When Last Node Finishes in a workflow with side effects: whatever the last node does (an error, a 500, a slow call) becomes the answer, and a non-2xx answer invites the next delivery.",
                    cx.name(w)
                ),
                format!(
                    "Set '{}' → Respond to 'Using Respond to Webhook Node' and answer 200 on the processed and on the duplicate (completed) branches.",
                    cx.name(w)
                ),
            ));
        }
        if mode != "responseNode" {
            continue;
        }
        // A branch that every path from the Webhook reaches through a Respond to Webhook node
        // has been answered already (n8n answers from the first one that runs).
        let unanswered = cx
            .flow
            .downstream_until(w, |i| matches!(cx.flow.roles[i], Role::RespondToWebhook));
        if let Some((n, o)) = silent_duplicate_branch(cx, &unanswered) {
            out.push(cx.finding(
                "IDEM010",
                Some(w),
                format!(
                    "Webhook '{}' answers with Respond to Webhook, but the duplicate (completed) branch of '{}' reaches no Respond to Webhook node: n8n then answers with an error and the provider delivers the event again.",
                    cx.name(w),
                    cx.name(n)
                ),
                format!(
                    "Connect the {} output of '{}' to a Respond to Webhook node that answers 200.",
                    output_label(cx.node(n), o),
                    cx.name(n)
                ),
            ));
        }
    }
    out
}

/// The first duplicate branch reached by `down` (the nodes a webhook reaches before any
/// Respond to Webhook node) that reaches no Respond to Webhook: an output whose items are
/// `completed` — or, where no such output exists after a claim, one that excludes
/// `acquired` (an IF's false branch).
fn silent_duplicate_branch(cx: &Cx, down: &[bool]) -> Option<(usize, usize)> {
    let n = cx.wf().nodes.len();
    let mut branches: Vec<(usize, usize)> = Vec::new();
    for node in (0..n).filter(|&i| down[i]) {
        for (o, c) in cx.flow.output_checks(node).iter().enumerate() {
            if *c == OutputCheck::Completed {
                branches.push((node, o));
            }
        }
    }
    if branches.is_empty() {
        for node in (0..n).filter(|&i| down[i]) {
            let after_claim = cx.flow.states[node]
                .iter()
                .any(|s| s.gate.is_some_and(|g| cx.is_claim(g)) && s.check == Check::Unchecked);
            if !after_claim {
                continue;
            }
            for (o, c) in cx.flow.output_checks(node).iter().enumerate() {
                if *c == OutputCheck::NotAcquired {
                    branches.push((node, o));
                }
            }
        }
    }
    branches.into_iter().find(|&(node, o)| {
        let reach = cx.flow.downstream_output(node, o);
        !(0..n).any(|i| reach[i] && matches!(cx.flow.roles[i], Role::RespondToWebhook))
    })
}

/// How the canvas labels output `o` of a node: the Switch rule's output name, the idem
/// node's outcome, IF's true/false, else its number.
fn output_label(node: &Node, o: usize) -> String {
    if node.node_type == catalog::IDEM_NODE {
        if let Some(l) = ["Proceed", "Duplicate", "Busy", "Needs Review", "Blocked"].get(o) {
            return format!("'{l}'");
        }
    }
    if node.node_type == catalog::IF {
        return if o == 0 {
            "'true'".into()
        } else {
            "'false'".into()
        };
    }
    let renamed = node
        .param(&["rules", "values"])
        .and_then(|r| r.get(o))
        .filter(|r| r.get("renameOutput").and_then(Value::as_bool) == Some(true))
        .and_then(|r| r.get("outputKey"))
        .and_then(Value::as_str);
    match renamed {
        Some(k) => format!("'{k}'"),
        None => format!("{o} (counting from 0)"),
    }
}

/// The keyed provider a node calls, if any.
fn provider_of(node: &Node) -> Option<&'static KeyedProvider> {
    if node.node_type == catalog::HTTP_REQUEST {
        let url = node.str_param(&["url"]).unwrap_or("").to_ascii_lowercase();
        let cred = node.str_param(&["nodeCredentialType"]).unwrap_or("");
        return KEYED_PROVIDERS
            .iter()
            .find(|p| p.credentials.contains(&cred) || p.hosts.iter().any(|h| host_in(&url, h)));
    }
    KEYED_PROVIDERS
        .iter()
        .find(|p| p.nodes.contains(&node.node_type.as_str()))
}

/// Whether the URL's host is `host` or a subdomain of it.
fn host_in(url: &str, host: &str) -> bool {
    let after_scheme = url.split_once("://").map(|(_, r)| r).unwrap_or(url);
    let h = after_scheme
        .split(['/', '?', '#', ':'])
        .next()
        .unwrap_or("");
    h == host || h.ends_with(&format!(".{host}"))
}

/// Whether an HTTP Request sends `header` (fields or JSON), or carries `body_field`.
fn sends_key(node: &Node, p: &KeyedProvider) -> bool {
    let header = p.header.to_ascii_lowercase();
    let mut names: Vec<String> = Vec::new();
    for path in [
        &["headerParameters", "parameters"][..],
        &["headerParametersUi", "parameter"][..],
    ] {
        if let Some(Value::Array(a)) = node.param(path) {
            for h in a {
                if let Some(n) = h.get("name").and_then(Value::as_str) {
                    names.push(n.trim().to_ascii_lowercase());
                }
            }
        }
    }
    let json_headers = ["jsonHeaders", "headerParametersJson"]
        .iter()
        .filter_map(|k| node.str_param(&[k]))
        .any(|s| s.to_ascii_lowercase().contains(&header));
    let in_body = p
        .body_field
        .is_some_and(|f| model::body_text(node).contains(f));
    names.contains(&header) || json_headers || in_body
}

/// IDEM013 no-outbound-key, named at the side effect.
pub fn idem013(cx: &Cx) -> Vec<Finding> {
    let mut out = Vec::new();
    for e in cx.flow.effects() {
        let node = cx.node(e);
        let Some(p) = provider_of(node) else { continue };
        if node.node_type == catalog::HTTP_REQUEST {
            if !model::http_method(node).eq_ignore_ascii_case("POST") || sends_key(node, p) {
                continue;
            }
            out.push(cx.finding(
                "IDEM013",
                Some(e),
                format!(
                    "'{}' POSTs to {} without the {} header, so a timeout followed by a retry can charge or create twice even though {} would have deduplicated it.",
                    cx.name(e),
                    p.name,
                    p.header,
                    p.name
                ),
                format!(
                    "In '{}' turn on Send Headers and add {}: the key you claimed, e.g. {{{{ $('Claim').item.json.body.record.key }}}} (never a fresh UUID per attempt).",
                    cx.name(e),
                    p.header
                ),
            ));
        } else {
            out.push(cx.finding(
                "IDEM013",
                Some(e),
                format!(
                    "'{}' writes to {} through the n8n node, which sends no {} header, so a timeout followed by a retry can create twice.",
                    cx.name(e),
                    p.name,
                    p.header
                ),
                format!(
                    "Replace '{}' with an HTTP Request node (predefined {} credential) that sends {} with the key you claimed.",
                    cx.name(e),
                    p.name,
                    p.header
                ),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::{check, nodes_of};

    const GOOD: &str = include_str!("../../tests/fixtures/good-webhook-claim-receipt.json");

    #[test]
    fn idem008_finds_retry_on_a_claim() {
        let f = check(
            idem008,
            include_str!("../../tests/fixtures/idem008-retry-on-claim.json"),
        );
        assert_eq!(nodes_of(&f), ["Claim receipt"]);
    }

    #[test]
    fn idem008_near_miss_retry_on_complete_only() {
        assert!(check(idem008, GOOD).is_empty());
    }

    #[test]
    fn idem009_finds_claims_that_error_or_autodetect() {
        let f = check(
            idem009,
            include_str!("../../tests/fixtures/idem009-claim-without-never-error.json"),
        );
        assert_eq!(nodes_of(&f), ["Claim receipt"]);
        assert!(f[0].message.contains("Never Error"), "{}", f[0].message);
        let f = check(
            idem009,
            include_str!("../../tests/fixtures/idem009-claim-autodetect-format.json"),
        );
        assert_eq!(nodes_of(&f), ["Claim receipt"]);
        assert!(
            f[0].message.contains("Response Format JSON") && !f[0].message.contains("Never Error")
        );
    }

    #[test]
    fn idem009_near_miss_claim_reads_every_answer() {
        assert!(check(idem009, GOOD).is_empty());
    }

    #[test]
    fn idem010_finds_last_node_mode_and_a_silent_duplicate_branch() {
        let f = check(
            idem010,
            include_str!("../../tests/fixtures/idem010-respond-modes.json"),
        );
        assert_eq!(nodes_of(&f), ["Order webhook", "Order webhook"]);
        assert!(f[0].message.contains("When Last Node Finishes"));
        assert!(
            f[1].message.contains("'receipt: outcome?'"),
            "{}",
            f[1].message
        );
    }

    #[test]
    fn idem010_near_miss_duplicate_answered_200() {
        assert!(check(idem010, GOOD).is_empty());
    }

    const ANSWERED_FIRST: &str =
        include_str!("../../tests/fixtures/idem010-near-miss-respond-before-gate.json");

    #[test]
    fn idem010_near_miss_answered_before_the_gate() {
        assert!(check(idem010, ANSWERED_FIRST).is_empty());
    }

    /// One path around the early Respond node is enough for the duplicate branch to need
    /// its own answer again.
    #[test]
    fn idem010_finds_a_silent_duplicate_branch_one_path_reaches_unanswered() {
        let mut wf: Value = serde_json::from_str(ANSWERED_FIRST).expect("fixture parses");
        wf["connections"]["Order webhook"]["main"][0]
            .as_array_mut()
            .expect("webhook output")
            .push(serde_json::json!({"node": "idem settings", "type": "main", "index": 0}));
        let f = check(idem010, &wf.to_string());
        assert_eq!(nodes_of(&f), ["Order webhook"]);
        assert!(
            f[0].message.contains("'receipt: outcome?'"),
            "{}",
            f[0].message
        );
    }

    #[test]
    fn idem013_finds_stripe_posts_without_a_key() {
        let f = check(
            idem013,
            include_str!("../../tests/fixtures/idem013-stripe-post-without-key.json"),
        );
        assert_eq!(nodes_of(&f), ["Refund payment", "Create Stripe customer"]);
        assert!(f[0].message.contains("Idempotency-Key"));
    }

    #[test]
    fn idem013_near_miss_stripe_post_with_key() {
        let near = include_str!("../../tests/fixtures/idem013-near-miss-stripe-post-with-key.json");
        assert!(check(idem013, near).is_empty());
    }

    #[test]
    fn hosts_match_whole_labels() {
        assert!(host_in(
            "https://api.stripe.com/v1/charges",
            "api.stripe.com"
        ));
        assert!(host_in(
            "https://checkout-test.api.checkout.com/payments",
            "checkout.com"
        ));
        assert!(!host_in("https://notcheckout.com/payments", "checkout.com"));
    }
}
