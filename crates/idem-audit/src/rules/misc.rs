//! IDEM011 (static data as the gate), IDEM015 (retry amplification) and IDEM016 (no error
//! workflow).

use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

use super::Cx;
use crate::{expr, Finding};

/// IDEM011 static-data-gate, named at the node that reads static data.
pub fn idem011(cx: &Cx) -> Vec<Finding> {
    let mut out = Vec::new();
    for n in 0..cx.wf().nodes.len() {
        let node = cx.node(n);
        if node.disabled || !node.strings().iter().any(|s| expr::uses_static_data(s)) {
            continue;
        }
        let down = cx.flow.downstream(n);
        let Some(e) = cx.flow.effects().find(|&e| down[e]) else {
            continue;
        };
        out.push(cx.finding(
            "IDEM011",
            Some(n),
            format!(
                "'{}' uses workflow static data to decide whether '{}' runs: static data is not atomic across concurrent executions and is not even saved in manual test runs.",
                cx.name(n),
                cx.name(e)
            ),
            format!(
                "Replace the check in '{}' with an idem claim on a stable key in front of '{}', and branch on its outcome.",
                cx.name(n),
                cx.name(e)
            ),
        ));
    }
    out
}

static RUN_INDEX_BOUND: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\$runIndex\s*(<=|<|>=|>)\s*(\d{1,6})").expect("static regex"));

/// How many times a loop through `node` lets the items pass again, from a `$runIndex`
/// comparison in it (`< N` lets N more passes through, `<= N` N+1).
fn loop_bound(node: &crate::workflow::Node) -> Option<u64> {
    let from = |op: &str, n: u64| match op {
        "<" | ">=" => n,
        _ => n + 1,
    };
    for s in node.strings() {
        if let Some(c) = RUN_INDEX_BOUND.captures(s) {
            return c[2].parse().ok().map(|n| from(&c[1], n));
        }
    }
    // IF / Switch filter conditions: leftValue {{ $runIndex }}, number operator.
    let mut found = None;
    visit_conditions(&node.params, &mut |c| {
        let left = c.get("leftValue").and_then(Value::as_str).unwrap_or("");
        if found.is_none() && left.contains("$runIndex") {
            let n = c
                .get("rightValue")
                .and_then(|r| r.as_u64().or_else(|| r.as_str()?.trim().parse().ok()));
            let op = c
                .pointer("/operator/operation")
                .and_then(Value::as_str)
                .unwrap_or("");
            let op = match op {
                "lt" => "<",
                "lte" => "<=",
                "gt" => ">",
                "gte" => ">=",
                _ => "",
            };
            if let (Some(n), false) = (n, op.is_empty()) {
                found = Some(from(op, n));
            }
        }
    });
    found
}

fn visit_conditions(v: &Value, f: &mut dyn FnMut(&Value)) {
    match v {
        Value::Object(o) => {
            if o.contains_key("leftValue") {
                f(v);
            }
            o.values().for_each(|x| visit_conditions(x, f));
        }
        Value::Array(a) => a.iter().for_each(|x| visit_conditions(x, f)),
        _ => {}
    }
}

/// IDEM015 retry-amplification, named at the side effect; only numbers above 1.
pub fn idem015(cx: &Cx) -> Vec<Finding> {
    let mut out = Vec::new();
    for e in cx.flow.effects() {
        let node = cx.node(e);
        let tries = if node.retry_on_fail {
            u64::from(node.max_tries)
        } else {
            1
        };
        let mut layers = Vec::new();
        if tries > 1 {
            layers.push(format!("Retry On Fail on '{}' ({tries} tries)", cx.name(e)));
        }
        let mut passes = 1u64;
        let back = cx.flow.loop_through(e);
        // Loop Over Items (Split In Batches) cycles over different items, not retries.
        let batching = back
            .iter()
            .any(|&m| cx.node(m).node_type == "n8n-nodes-base.splitInBatches");
        if !back.is_empty() && !batching {
            let bound = back
                .iter()
                .find_map(|&m| loop_bound(cx.node(m)).map(|b| (m, b)));
            match bound {
                Some((m, b)) => {
                    passes = b + 1;
                    layers.push(format!(
                        "the loop through '{}' ({passes} passes)",
                        cx.name(m)
                    ));
                }
                None => {
                    passes = 2;
                    layers.push(
                        "a loop with no visible bound (counted as 2 passes; it may be more)"
                            .to_owned(),
                    );
                }
            }
        }
        let total = tries.saturating_mul(passes);
        if total <= 1 {
            continue;
        }
        out.push(cx.finding(
            "IDEM015",
            Some(e),
            format!(
                "'{}' can be called up to {total} times for one event: {}.",
                cx.name(e),
                layers.join(" × ")
            ),
            format!(
                "Keep one retry owner for '{}': either Retry On Fail or the loop, not both, and keep it behind the gate so repeats are answered from the record.",
                cx.name(e)
            ),
        ));
    }
    out
}

/// IDEM016 no-error-workflow, about the whole workflow.
pub fn idem016(cx: &Cx) -> Vec<Finding> {
    let has_effects = cx.flow.effects().next().is_some();
    // An Error Trigger workflow is itself the error workflow of others.
    let is_error_workflow = cx
        .wf()
        .nodes
        .iter()
        .any(|n| n.node_type == "n8n-nodes-base.errorTrigger");
    if !has_effects || cx.wf().error_workflow.is_some() || is_error_workflow {
        return Vec::new();
    }
    vec![cx.finding(
        "IDEM016",
        None,
        format!(
            "Workflow '{}' has side effects but no error workflow: when an execution dies between the side effect and its report, nobody is told.",
            cx.wf().name
        ),
        "Open Workflow Settings → Error Workflow and choose a workflow (Error Trigger → alert) that tells a person.".to_owned(),
    )]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::{check, nodes_of};

    #[test]
    fn idem011_finds_static_data_in_front_of_an_email() {
        let f = check(
            idem011,
            include_str!("../../tests/fixtures/idem011-static-data-gate.json"),
        );
        assert_eq!(nodes_of(&f), ["Seen before?"]);
        assert!(f[0].message.contains("'Send receipt'"));
    }

    #[test]
    fn idem011_near_miss_static_data_after_the_effects() {
        let near = include_str!("../../tests/fixtures/idem011-near-miss-static-data-after.json");
        assert!(check(idem011, near).is_empty());
    }

    #[test]
    fn idem015_multiplies_node_retries_by_the_loop() {
        let f = check(
            idem015,
            include_str!("../../tests/fixtures/idem015-retry-loop.json"),
        );
        assert_eq!(nodes_of(&f), ["Send receipt"]);
        // 4 tries × (1 + 3 passes allowed by `$runIndex < 3`).
        assert!(f[0].message.contains("up to 16 times"), "{}", f[0].message);
    }

    #[test]
    fn idem015_near_miss_loop_over_items_is_not_a_retry() {
        let wf = serde_json::json!({"name": "batch", "nodes": [
            {"name": "Every hour", "type": "n8n-nodes-base.scheduleTrigger", "typeVersion": 1.2, "parameters": {}},
            {"name": "Loop Over Items", "type": "n8n-nodes-base.splitInBatches", "typeVersion": 3, "parameters": {"options": {}}},
            {"name": "Post each", "type": "n8n-nodes-base.slack", "typeVersion": 2.3, "parameters": {}}
        ], "connections": {
            "Every hour": {"main": [[{"node": "Loop Over Items", "type": "main", "index": 0}]]},
            "Loop Over Items": {"main": [[], [{"node": "Post each", "type": "main", "index": 0}]]},
            "Post each": {"main": [[{"node": "Loop Over Items", "type": "main", "index": 0}]]}
        }})
        .to_string();
        assert!(check(idem015, &wf).is_empty());
        // The same cycle without the batching node is a retry loop.
        let retry = wf.replace("n8n-nodes-base.splitInBatches", "n8n-nodes-base.wait");
        assert_eq!(nodes_of(&check(idem015, &retry)), ["Post each"]);
    }

    #[test]
    fn idem015_near_miss_single_call() {
        let good = include_str!("../../tests/fixtures/good-webhook-claim-receipt.json");
        assert!(check(idem015, good).is_empty());
    }

    #[test]
    fn idem016_finds_side_effects_without_error_workflow() {
        let f = check(
            idem016,
            include_str!("../../tests/fixtures/idem016-no-error-workflow.json"),
        );
        assert_eq!(nodes_of(&f), ["-"]);
        assert_eq!(f[0].node, None);
    }

    #[test]
    fn idem016_near_miss_read_only_or_with_error_workflow() {
        let near = include_str!("../../tests/fixtures/idem016-near-miss-read-only.json");
        assert!(check(idem016, near).is_empty());
        let good = include_str!("../../tests/fixtures/good-webhook-claim-receipt.json");
        assert!(check(idem016, good).is_empty());
    }
}
