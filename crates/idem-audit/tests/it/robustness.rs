//! The parser and the rules never panic, and a large workflow is audited fast.

use std::time::{Duration, Instant};

use idem_audit::{audit_value, Options};
use proptest::prelude::*;
use serde_json::{json, Value};

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        "[ -~]{0,12}".prop_map(Value::String),
        "\\PC{0,40}".prop_map(Value::String),
        prop_oneof![
            Just("n8n-nodes-base.webhook"),
            Just("n8n-nodes-base.httpRequest"),
            Just("n8n-nodes-base.switch"),
            Just("n8n-nodes-base.if"),
            Just("n8n-nodes-idem.idempotencyGate"),
            Just("={{ $json.body.outcome }}"),
            Just("acquired"),
            Just("POST"),
            Just("main"),
            Just("/v1/namespaces/n/keys/{{ $execution.id }}/claim"),
            Just("A"),
            Just("B"),
        ]
        .prop_map(|s| Value::String(s.to_owned())),
    ];
    leaf.prop_recursive(5, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("nodes".to_owned()),
                    Just("connections".to_owned()),
                    Just("name".to_owned()),
                    Just("type".to_owned()),
                    Just("parameters".to_owned()),
                    Just("main".to_owned()),
                    Just("node".to_owned()),
                    Just("url".to_owned()),
                    Just("method".to_owned()),
                    Just("typeVersion".to_owned()),
                    Just("rules".to_owned()),
                    Just("values".to_owned()),
                    Just("conditions".to_owned()),
                    Just("A".to_owned()),
                    Just("B".to_owned()),
                    "[a-z]{1,6}",
                ],
                inner,
                0..6,
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Random workflows of real node types wired at random, to drive the rules, not just the
/// parser.
fn arb_workflow() -> impl Strategy<Value = Value> {
    let types = [
        "n8n-nodes-base.webhook",
        "n8n-nodes-base.httpRequest",
        "n8n-nodes-base.gmail",
        "n8n-nodes-base.switch",
        "n8n-nodes-base.if",
        "n8n-nodes-idem.idempotencyGate",
        "n8n-nodes-base.removeDuplicates",
        "n8n-nodes-base.code",
        "n8n-nodes-base.respondToWebhook",
        "n8n-nodes-base.set",
        "n8n-nodes-base.stripe",
    ];
    (2usize..12)
        .prop_flat_map(move |n| {
            (
                prop::collection::vec((0..types.len(), arb_json()), n),
                prop::collection::vec((0..n, 0usize..4, 0..n), 0..3 * n),
            )
        })
        .prop_map(move |(nodes, edges)| {
            let nodes: Vec<Value> = nodes
                .iter()
                .enumerate()
                .map(|(i, (t, p))| {
                    let params = if p.is_object() { p.clone() } else { json!({"url": p, "method": "POST"}) };
                    json!({"name": format!("n{i}"), "type": types[*t], "typeVersion": 2, "parameters": params, "retryOnFail": i % 3 == 0})
                })
                .collect();
            let mut conns = serde_json::Map::new();
            for (from, out, to) in edges {
                let entry = conns.entry(format!("n{from}")).or_insert_with(|| json!({"main": []}));
                let outs = entry["main"].as_array_mut().expect("array");
                while outs.len() <= out {
                    outs.push(json!([]));
                }
                if let Some(list) = outs[out].as_array_mut() {
                    list.push(json!({"node": format!("n{to}"), "type": "main", "index": 0}));
                }
            }
            json!({"name": "random", "nodes": nodes, "connections": conns})
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn arbitrary_json_never_panics(doc in arb_json()) {
        let _ = audit_value(&doc, &Options::default());
    }

    #[test]
    fn random_workflows_never_panic(doc in arb_workflow()) {
        let _ = audit_value(&doc, &Options::default());
    }
}

/// A 1,000-node workflow: 100 branches, each a claim → switch → effect → complete/fail
/// chain with an ungated effect and a retry loop, all from one webhook.
fn big_workflow() -> Value {
    let mut nodes = vec![
        json!({"name": "Hook", "type": "n8n-nodes-base.webhook", "typeVersion": 2,
        "parameters": {"httpMethod": "POST", "path": "big", "responseMode": "responseNode"}}),
    ];
    let mut conns = serde_json::Map::new();
    let mut link = |from: &str, out: usize, to: &str| {
        let e = conns
            .entry(from.to_owned())
            .or_insert_with(|| json!({"main": []}));
        let outs = e["main"].as_array_mut().expect("array");
        while outs.len() <= out {
            outs.push(json!([]));
        }
        outs[out]
            .as_array_mut()
            .expect("array")
            .push(json!({"node": to, "type": "main", "index": 0}));
    };
    let mut prev = "Hook".to_owned();
    for b in 0..111 {
        let claim = format!("Claim {b}");
        let sw = format!("Outcome {b}");
        let eff = format!("Effect {b}");
        let comp = format!("Complete {b}");
        let fail = format!("Fail {b}");
        let ok = format!("Respond {b}");
        let loose = format!("Loose {b}");
        let wait = format!("Wait {b}");
        let again = format!("Again {b}");
        let key = format!("$json.body.id + ':{b}'");
        let url = |op: &str| format!("=http://idem/v1/namespaces/n/keys/{{{{ {key} }}}}/{op}");
        nodes.push(json!({"name": claim, "type": "n8n-nodes-base.httpRequest", "typeVersion": 4.2, "onError": "continueErrorOutput",
            "parameters": {"method": "POST", "url": url("claim"), "options": {"response": {"response": {"fullResponse": true, "neverError": true, "responseFormat": "json"}}}}}));
        nodes.push(json!({"name": sw, "type": "n8n-nodes-base.switch", "typeVersion": 3.2, "parameters": {"rules": {"values": [
            {"conditions": {"conditions": [{"leftValue": "={{ $json.body.outcome }}", "rightValue": "acquired", "operator": {"type": "string", "operation": "equals"}}], "combinator": "and"}},
            {"conditions": {"conditions": [{"leftValue": "={{ $json.body.outcome }}", "rightValue": "completed", "operator": {"type": "string", "operation": "equals"}}], "combinator": "and"}}]}}}));
        nodes.push(json!({"name": eff, "type": "n8n-nodes-base.gmail", "typeVersion": 2.1, "onError": "continueErrorOutput", "retryOnFail": true, "parameters": {}}));
        nodes.push(json!({"name": comp, "type": "n8n-nodes-base.httpRequest", "typeVersion": 4.2, "parameters": {"method": "POST", "url": url("complete")}}));
        nodes.push(json!({"name": fail, "type": "n8n-nodes-base.httpRequest", "typeVersion": 4.2, "parameters": {"method": "POST", "url": url("fail")}}));
        nodes.push(json!({"name": ok, "type": "n8n-nodes-base.respondToWebhook", "typeVersion": 1.4, "parameters": {}}));
        nodes.push(json!({"name": loose, "type": "n8n-nodes-base.slack", "typeVersion": 2.3, "parameters": {}}));
        nodes.push(json!({"name": wait, "type": "n8n-nodes-base.wait", "typeVersion": 1.1, "parameters": {}}));
        nodes.push(json!({"name": again, "type": "n8n-nodes-base.if", "typeVersion": 2.2, "parameters": {}}));
        link(&prev, 0, &claim);
        link(&claim, 0, &sw);
        link(&sw, 0, &eff);
        link(&sw, 1, &ok);
        link(&eff, 0, &comp);
        link(&eff, 1, &fail);
        link(&fail, 0, &again);
        link(&again, 0, &wait);
        link(&wait, 0, &eff);
        link(&comp, 0, &ok);
        link(&claim, 1, &loose);
        prev = comp;
    }
    assert!(nodes.len() >= 1000);
    json!({"name": "big", "nodes": nodes, "connections": conns})
}

#[test]
fn a_thousand_node_workflow_is_audited_without_blowing_up() {
    let doc = big_workflow();
    let start = Instant::now();
    let findings = audit_value(&doc, &Options::default()).expect("valid workflow");
    let took = start.elapsed();
    // Each branch has a Slack on the claim's error output, after the claim but with no
    // outcome check (IDEM005), and a retrying, looping effect (IDEM015).
    assert_eq!(findings.iter().filter(|f| f.rule == "IDEM005").count(), 111);
    assert_eq!(findings.iter().filter(|f| f.rule == "IDEM015").count(), 111);
    // A guard against a path enumeration that grows with the number of paths, not a speed
    // figure: on a quiet machine a debug build takes about 0.3 s and a release build a few
    // ms; shared cores make that 1 s or more, and a blow-up takes minutes. Speed is measured
    // by `idem bench`, not here.
    assert!(took < Duration::from_secs(15), "took {took:?}");
}

/// A Code node built to make the key tracing work hard: a variable assigned two thousand
/// times, one that grows fourfold in each round of local variables, and template literals
/// nested ten thousand deep. The key is still traced, and fast.
#[test]
fn a_hostile_code_node_is_audited_without_blowing_up() {
    let mut code = String::from("const a = b + b + b + b;\nconst b = c + c + c + c;\nconst c = d + d + d + d;\nconst d = e + e + e + e;\n");
    code.push_str(&format!("const e = '{}';\n", "x".repeat(1900)));
    code.push_str(&"z = z + 1;".repeat(2_000));
    code.push_str(&format!("const t = {};\n", "`${".repeat(10_000)));
    code.push_str(
        "return [{ json: { k: a + a + a + a + z + t, body_key: JSON.stringify($json.body) } }];",
    );
    let doc = json!({"name": "hostile", "nodes": [
        {"name": "Hook", "type": "n8n-nodes-base.webhook", "typeVersion": 2, "parameters": {}},
        {"name": "Build key", "type": "n8n-nodes-base.code", "typeVersion": 2, "parameters": {"jsCode": code}},
        {"name": "Claim", "type": "n8n-nodes-base.httpRequest", "typeVersion": 4.2, "parameters": {
            "method": "POST", "url": "=http://idem/v1/namespaces/n/keys/{{ $json.k }}:{{ $json.body_key }}/claim"}}],
      "connections": {
        "Hook": {"main": [[{"node": "Build key", "type": "main", "index": 0}]]},
        "Build key": {"main": [[{"node": "Claim", "type": "main", "index": 0}]]}}});
    let start = Instant::now();
    let findings = audit_value(&doc, &Options::default()).expect("valid workflow");
    let took = start.elapsed();
    assert!(
        findings.iter().any(|f| f.rule == "IDEM004"),
        "{findings:#?}"
    );
    // As above: a guard against exponential tracing (minutes), not a speed figure.
    assert!(took < Duration::from_secs(15), "took {took:?}");
}
