//! Rules about where the gate stands and what follows it: IDEM001 (no gate), IDEM002 (gate
//! after the effect), IDEM005 (outcome not checked), IDEM006 (no complete), IDEM007 (no fail
//! route), IDEM012 (Remove Duplicates as the only lock), IDEM014 (one key, two effects).

use std::collections::BTreeSet;

use super::Cx;
use crate::flow::Check;
use crate::model::{IdemOp, Role};
use crate::Finding;

fn what(cx: &Cx, e: usize) -> String {
    match &cx.flow.roles[e] {
        Role::Effect(x) => x.what.clone(),
        _ => "side effect".into(),
    }
}

/// Side effects reached by some path from a trigger that passed no gate.
fn ungated(cx: &Cx) -> Vec<usize> {
    cx.flow
        .effects()
        .filter(|&e| cx.flow.states[e].iter().any(|s| s.gate.is_none()))
        .collect()
}

fn gate_downstream(cx: &Cx, e: usize) -> Option<usize> {
    let down = cx.flow.downstream(e);
    cx.flow.gates().find(|&g| down[g])
}

/// IDEM001 ungated-side-effect.
pub fn idem001(cx: &Cx) -> Vec<Finding> {
    ungated(cx)
        .into_iter()
        .map(|e| {
            cx.finding(
                "IDEM001",
                Some(e),
                format!(
                    "'{}' ({}) runs with no idem gate before it, so a retry, a replay or a second delivery of the same event does it again.",
                    cx.name(e),
                    what(cx, e)
                ),
                format!(
                    "Insert a claim (HTTP Request POST …/keys/{{key}}/claim or the Idempotency Gate node) between the trigger and '{}', and connect '{}' only to the acquired branch.",
                    cx.name(e),
                    cx.name(e)
                ),
            )
        })
        .collect()
}

/// IDEM002 gate-after-effect: an ungated side effect with a gate downstream of it.
pub fn idem002(cx: &Cx) -> Vec<Finding> {
    ungated(cx)
        .into_iter()
        .filter_map(|e| {
            let g = gate_downstream(cx, e)?;
            Some(cx.finding(
                "IDEM002",
                Some(e),
                format!(
                    "'{}' runs before its gate '{}': the check comes after the effect it should prevent, so a duplicate has already happened when it runs.",
                    cx.name(e),
                    cx.name(g)
                ),
                format!(
                    "Move '{}' in front of '{}' (trigger → claim → outcome check → '{}' → complete).",
                    cx.name(g),
                    cx.name(e),
                    cx.name(e)
                ),
            ))
        })
        .collect()
}

/// IDEM005 outcome-not-checked, named at the claim.
pub fn idem005(cx: &Cx) -> Vec<Finding> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for e in cx.flow.effects() {
        for s in cx.guarded_by_claim(e) {
            let Some(g) = s.gate else { continue };
            if s.check != Check::Unchecked || !seen.insert((g, e)) {
                continue;
            }
            out.push(cx.finding(
                "IDEM005",
                Some(g),
                format!(
                    "The path from claim '{}' to '{}' never checks that the outcome is acquired, so '{}' also runs for duplicates (completed), for work another execution holds (in_flight) and for records in review.",
                    cx.name(g),
                    cx.name(e),
                    cx.name(e)
                ),
                format!(
                    "After '{}' add a Switch with a rule {{{{ $json.body.outcome }}}} equals acquired (or use the Idempotency Gate node's Proceed output) and connect '{}' to that output only; a status-code check is not enough.",
                    cx.name(g),
                    cx.name(e)
                ),
            ));
        }
    }
    out
}

/// IDEM006 no-complete, named at the side effect.
pub fn idem006(cx: &Cx) -> Vec<Finding> {
    let mut out = Vec::new();
    for e in cx.flow.effects() {
        let missing: Vec<usize> = cx
            .guarding_claims(e)
            .into_iter()
            .filter(|&g| !cx.reaches_report(e, g, IdemOp::Complete))
            .collect();
        if let Some(&g) = missing.first() {
            out.push(cx.finding(
                "IDEM006",
                Some(e),
                format!(
                    "After '{}' no path reaches a complete of the key claimed by '{}', so the record stays processing and the next delivery waits for the lease or lands in review.",
                    cx.name(e),
                    cx.name(g)
                ),
                format!(
                    "Connect the success output of '{}' to an HTTP Request POST …/keys/{{key}}/complete (same key as '{}', its token from {{{{ $('{}').item.json.body.token }}}}).",
                    cx.name(e),
                    cx.name(g),
                    cx.name(g)
                ),
            ));
        }
    }
    out
}

/// IDEM007 no-fail-route, named at the side effect.
pub fn idem007(cx: &Cx) -> Vec<Finding> {
    let mut out = Vec::new();
    for e in cx.flow.effects() {
        let missing: Vec<usize> = cx
            .guarding_claims(e)
            .into_iter()
            .filter(|&g| !cx.reaches_report(e, g, IdemOp::Fail))
            .collect();
        if let Some(&g) = missing.first() {
            out.push(cx.finding(
                "IDEM007",
                Some(e),
                format!(
                    "When '{}' fails nothing reports fail to idem for the claim '{}', so idem cannot tell a clean failure (retry) from one that may have happened (review).",
                    cx.name(e),
                    cx.name(g)
                ),
                format!(
                    "In the settings of '{}' set On Error to 'Continue (using error output)' and connect the error output (and any non-2xx branch) to an HTTP Request POST …/keys/{{key}}/fail with the claim's token.",
                    cx.name(e)
                ),
            ));
        }
    }
    out
}

/// IDEM012 remove-duplicates-only, named at the side effect.
pub fn idem012(cx: &Cx) -> Vec<Finding> {
    cx.flow
        .effects()
        .filter(|&e| {
            cx.flow.states[e]
                .iter()
                .any(|s| s.gate.is_none() && s.dedup_filter)
        })
        .map(|e| {
            cx.finding(
                "IDEM012",
                Some(e),
                format!(
                    "'{}' is protected only by Remove Duplicates, which is a filter, not a lock: two concurrent deliveries can both see the item as new.",
                    cx.name(e)
                ),
                format!(
                    "Keep Remove Duplicates if you like, but put an idem claim on a stable key in front of '{}' and continue only on acquired.",
                    cx.name(e)
                ),
            )
        })
        .collect()
}

/// IDEM014 shared-key, named at every gate after the first of a group with the same key.
pub fn idem014(cx: &Cx) -> Vec<Finding> {
    let gates: Vec<usize> = cx.flow.gates().filter(|&g| cx.flow.reached(g)).collect();
    let guarded = |g: usize| -> BTreeSet<usize> {
        cx.flow
            .effects()
            .filter(|&e| {
                cx.flow.states[e].iter().any(|s| {
                    s.gate == Some(g) && matches!(s.check, Check::Acquired | Check::Unchecked)
                })
            })
            .collect()
    };
    let key = |g: usize| {
        cx.call(g)
            .and_then(|c| c.key.as_deref())
            .map(crate::expr::normalize)
            .filter(|k| !k.is_empty())
    };
    let mut out = Vec::new();
    for (i, &a) in gates.iter().enumerate() {
        let Some(ka) = key(a) else { continue };
        for &b in &gates[i + 1..] {
            if key(b).as_ref() != Some(&ka) {
                continue;
            }
            let (ea, eb) = (guarded(a), guarded(b));
            if ea.is_empty() || eb.is_empty() || ea == eb {
                continue;
            }
            let effect = eb.iter().next().map(|&e| cx.name(e)).unwrap_or("");
            out.push(cx.finding(
                "IDEM014",
                Some(b),
                format!(
                    "'{}' claims the same key as '{}' but guards a different side effect ('{}'): the second claim finds the first one's record and skips or blocks real work.",
                    cx.name(b),
                    cx.name(a),
                    effect
                ),
                format!(
                    "Give each side effect its own key: add a suffix in the key of '{}' and '{}' (…:email, …:slack), and use the same suffixed key in their complete and fail.",
                    cx.name(a),
                    cx.name(b)
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
    fn idem001_finds_an_ungated_send_and_append() {
        let f = check(
            idem001,
            include_str!("../../tests/fixtures/idem001-ungated-gmail.json"),
        );
        // The read, the disabled node and the unconnected node are not side effects.
        assert_eq!(nodes_of(&f), ["Send receipt", "Log to sheet"]);
        assert!(f[0].message.contains("'Send receipt'"), "{}", f[0].message);
    }

    #[test]
    fn idem001_near_miss_gated_workflow() {
        assert!(check(idem001, GOOD).is_empty());
    }

    /// n8n leaves parameters at their defaults out of an export, so a Discord node without
    /// `resource` / `operation` does what its typeVersion does by default: v1 posts to its
    /// webhook, v2 creates a channel (Bot Token) or sends (Webhook connection).
    #[test]
    fn idem001_finds_discord_nodes_at_their_defaults() {
        let discord = |name: &str, v: f64, params: serde_json::Value| {
            serde_json::json!({"name": name, "type": "n8n-nodes-base.discord", "typeVersion": v,
                "parameters": params})
        };
        let targets: Vec<serde_json::Value> = [
            "Send",
            "Discord v1",
            "Discord v2",
            "Discord webhook",
            "Discord members",
        ]
        .map(|n| serde_json::json!({"node": n, "type": "main", "index": 0}))
        .into();
        let wf = serde_json::json!({"name": "discord", "nodes": [
            {"name": "Hook", "type": "n8n-nodes-base.webhook", "typeVersion": 2, "parameters": {}},
            {"name": "Send", "type": "n8n-nodes-base.gmail", "typeVersion": 2.1, "parameters": {}},
            discord("Discord v1", 1.0, serde_json::json!({"webhookUri": "https://discord.example/w", "text": "hi"})),
            discord("Discord v2", 2.0, serde_json::json!({})),
            discord("Discord webhook", 2.0, serde_json::json!({"authentication": "webhook", "content": "hi"})),
            discord("Discord members", 2.0, serde_json::json!({"resource": "member"}))
        ], "connections": {"Hook": {"main": [targets]}}})
        .to_string();
        let f = check(idem001, &wf);
        // Listing the members of a server changes nothing.
        assert_eq!(
            nodes_of(&f),
            ["Send", "Discord v1", "Discord v2", "Discord webhook"]
        );
        assert!(
            f[1].message.contains("Discord sendLegacy"),
            "{}",
            f[1].message
        );
        assert!(
            f[2].message.contains("Discord channel:create"),
            "{}",
            f[2].message
        );
        assert!(
            f[3].message.contains("Discord webhook:sendLegacy"),
            "{}",
            f[3].message
        );
    }

    #[test]
    fn idem002_finds_a_gate_after_the_email() {
        let f = check(
            idem002,
            include_str!("../../tests/fixtures/idem002-gate-after-email.json"),
        );
        assert_eq!(nodes_of(&f), ["Send receipt"]);
        assert!(f[0].message.contains("'Claim receipt'"));
    }

    #[test]
    fn idem002_near_miss_gate_before_the_email() {
        assert!(check(idem002, GOOD).is_empty());
        // Ungated but no gate anywhere after it: IDEM001's case, not IDEM002's.
        assert!(check(
            idem002,
            include_str!("../../tests/fixtures/idem001-ungated-gmail.json")
        )
        .is_empty());
    }

    #[test]
    fn idem005_finds_status_only_and_not_completed_checks() {
        let f = check(
            idem005,
            include_str!("../../tests/fixtures/idem005-status-only-check.json"),
        );
        assert_eq!(nodes_of(&f), ["Claim receipt", "Claim receipt"]);
        assert!(f[0].message.contains("'Send receipt'"));
        assert!(f[1].message.contains("'Post to #sales'"));
    }

    #[test]
    fn idem005_near_miss_gate_node_boolean_if_and_review_branch() {
        let near =
            include_str!("../../tests/fixtures/idem005-near-miss-gate-node-and-boolean-if.json");
        assert!(check(idem005, near).is_empty());
        // The good workflow alerts on-call with Slack on needs_review: not a guarded effect.
        assert!(check(idem005, GOOD).is_empty());
    }

    /// Hook → Claim → IF with `condition` (an IF v2 filter condition) → Gmail on true.
    fn claim_if_send(condition: serde_json::Value) -> String {
        serde_json::json!({"name": "if on outcome", "nodes": [
            {"name": "Hook", "type": "n8n-nodes-base.webhook", "typeVersion": 2, "parameters": {}},
            {"name": "Claim", "type": "n8n-nodes-base.httpRequest", "typeVersion": 4.2,
             "parameters": {"method": "POST",
               "url": "={{ $vars.IDEM_URL }}/v1/namespaces/shop/keys/{{ $json.body.id }}/claim"}},
            {"name": "Acquired?", "type": "n8n-nodes-base.if", "typeVersion": 2.2,
             "parameters": {"conditions": {"conditions": [condition], "combinator": "and"}}},
            {"name": "Send", "type": "n8n-nodes-base.gmail", "typeVersion": 2.1, "parameters": {}}
        ], "connections": {
            "Hook": {"main": [[{"node": "Claim", "type": "main", "index": 0}]]},
            "Claim": {"main": [[{"node": "Acquired?", "type": "main", "index": 0}]]},
            "Acquired?": {"main": [[{"node": "Send", "type": "main", "index": 0}]]}
        }})
        .to_string()
    }

    /// Only a comparison with the outcome `acquired` itself checks it: a value that is no
    /// outcome (`acquired_x`, `acquire`) or a partial match (contains, starts with) leaves
    /// the send unchecked.
    #[test]
    fn idem005_counts_only_an_exact_outcome_value() {
        let string = |operation: &str, value: &str| {
            serde_json::json!({"leftValue": "={{ $json.body.outcome }}", "rightValue": value,
                "operator": {"type": "string", "operation": operation}})
        };
        let boolean = |expr: &str| {
            serde_json::json!({"leftValue": expr, "rightValue": "",
                "operator": {"type": "boolean", "operation": "true", "singleValue": true}})
        };
        for exact in [
            string("equals", "acquired"),
            boolean("={{ $json.body.outcome === 'acquired' }}"),
        ] {
            let f = check(idem005, &claim_if_send(exact.clone()));
            assert!(f.is_empty(), "{exact}: {f:#?}");
        }
        for near in [
            string("equals", "acquired_x"),
            string("equals", "acquire"),
            string("equals", "acquired "),
            string("contains", "acquired"),
            string("contains", "acq"),
            string("startsWith", "acq"),
            string("endsWith", "ired"),
            string("regex", "^acq"),
            boolean("={{ $json.body.outcome === 'acquired_x' }}"),
            boolean("={{ $json.body.outcome == 'acquire' }}"),
        ] {
            assert_eq!(
                nodes_of(&check(idem005, &claim_if_send(near.clone()))),
                ["Claim"],
                "{near}"
            );
        }
    }

    #[test]
    fn idem006_finds_a_missing_and_a_contradicting_complete() {
        let f = check(
            idem006,
            include_str!("../../tests/fixtures/idem006-no-complete.json"),
        );
        assert_eq!(nodes_of(&f), ["Send receipt"]);
        let f = check(
            idem006,
            include_str!("../../tests/fixtures/idem006-complete-of-another-key.json"),
        );
        assert_eq!(nodes_of(&f), ["Send receipt"]);
    }

    #[test]
    fn idem006_near_miss_complete_from_record_key() {
        assert!(check(idem006, GOOD).is_empty());
    }

    #[test]
    fn idem006_idem007_near_miss_same_key_read_through_the_trigger_node() {
        // The claim reads `$json.body.event_id`, the complete and fail read the same field
        // through `$('Webhook').item`, `.first()`, `$node["Webhook"]` or `$input.item`.
        let near = include_str!(
            "../../tests/fixtures/idem006-near-miss-same-key-read-through-the-trigger.json"
        );
        let f = check(idem006, near);
        assert!(f.is_empty(), "{f:#?}");
        let f = check(idem007, near);
        assert!(f.is_empty(), "{f:#?}");
    }

    #[test]
    fn idem007_finds_a_side_effect_without_fail() {
        let f = check(
            idem007,
            include_str!("../../tests/fixtures/idem007-no-fail-route.json"),
        );
        assert_eq!(nodes_of(&f), ["Send receipt"]);
    }

    #[test]
    fn idem007_near_miss_error_output_reports_fail() {
        assert!(check(idem007, GOOD).is_empty());
    }

    #[test]
    fn idem012_finds_remove_duplicates_as_the_only_lock() {
        let f = check(
            idem012,
            include_str!("../../tests/fixtures/idem012-remove-duplicates-only.json"),
        );
        assert_eq!(nodes_of(&f), ["Post to #sales"]);
    }

    #[test]
    fn idem012_near_miss_remove_duplicates_then_claim() {
        let near = include_str!(
            "../../tests/fixtures/idem012-near-miss-remove-duplicates-then-claim.json"
        );
        assert!(check(idem012, near).is_empty());
    }

    /// An `/effect` gate completes itself: what follows it needs no outcome check, complete
    /// or fail of its own.
    #[test]
    fn effect_gate_needs_no_check_complete_or_fail() {
        let wf = serde_json::json!({"name": "effect gate", "nodes": [
            {"name": "Hook", "type": "n8n-nodes-base.webhook", "typeVersion": 2, "parameters": {}},
            {"name": "Charge via idem", "type": "n8n-nodes-base.httpRequest", "typeVersion": 4.2,
             "parameters": {"method": "POST",
               "url": "={{ $vars.IDEM_URL }}/v1/namespaces/pay/keys/{{ encodeURIComponent($json.body.id + ':charge') }}/effect"}},
            {"name": "Tell sales", "type": "n8n-nodes-base.slack", "typeVersion": 2.3, "parameters": {}}
        ], "connections": {
            "Hook": {"main": [[{"node": "Charge via idem", "type": "main", "index": 0}]]},
            "Charge via idem": {"main": [[{"node": "Tell sales", "type": "main", "index": 0}]]}
        }})
        .to_string();
        for rule in [idem001, idem002, idem005, idem006, idem007] {
            assert!(check(rule, &wf).is_empty());
        }
        // The same wiring with a claim instead is unchecked, uncompleted, unreported.
        let claim = wf.replace("/effect", "/claim");
        assert_eq!(nodes_of(&check(idem005, &claim)), ["Charge via idem"]);
        assert_eq!(nodes_of(&check(idem006, &claim)), ["Tell sales"]);
        assert_eq!(nodes_of(&check(idem007, &claim)), ["Tell sales"]);
    }

    /// idem is recognised by the URL's path: an idem path in another service's query or
    /// fragment, or a longer last segment, is a POST like any other — a side effect, no gate.
    #[test]
    fn idem_paths_outside_the_url_path_are_no_gate() {
        let wf = |url: &str| {
            serde_json::json!({"name": "fake gate", "nodes": [
                {"name": "Hook", "type": "n8n-nodes-base.webhook", "typeVersion": 2, "parameters": {}},
                {"name": "Claim", "type": "n8n-nodes-base.httpRequest", "typeVersion": 4.2,
                 "parameters": {"method": "POST", "url": url}},
                {"name": "Send", "type": "n8n-nodes-base.gmail", "typeVersion": 2.1, "parameters": {}}
            ], "connections": {
                "Hook": {"main": [[{"node": "Claim", "type": "main", "index": 0}]]},
                "Claim": {"main": [[{"node": "Send", "type": "main", "index": 0}]]}
            }})
            .to_string()
        };
        for url in [
            "https://evil.example/send?u=/v1/namespaces/shop/keys/k/claim",
            "https://evil.example/send#/v1/namespaces/shop/keys/k/claim",
            "={{ $vars.IDEM_URL }}/v1/namespaces/shop/keys/{{ $json.key }}/claimx",
        ] {
            assert_eq!(
                nodes_of(&check(idem001, &wf(url))),
                ["Claim", "Send"],
                "{url}"
            );
        }
        // The real thing, with an expression for the key and a query after the path.
        for url in [
            "={{ $vars.IDEM_URL }}/v1/namespaces/shop/keys/{{ $json.key }}/claim",
            "=https://idem.example/v1/namespaces/shop/keys/{{ $json.key }}/claim?x=/send",
        ] {
            assert!(check(idem001, &wf(url)).is_empty(), "{url}");
            assert_eq!(nodes_of(&check(idem005, &wf(url))), ["Claim"], "{url}");
        }
    }

    #[test]
    fn idem014_finds_one_key_for_two_effects() {
        let f = check(
            idem014,
            include_str!("../../tests/fixtures/idem014-shared-key.json"),
        );
        assert_eq!(nodes_of(&f), ["Claim slack"]);
        assert!(f[0].message.contains("'Claim email'"));
    }

    #[test]
    fn idem014_near_miss_suffixed_keys() {
        let near = include_str!("../../tests/fixtures/idem014-near-miss-suffixed-keys.json");
        assert!(check(idem014, near).is_empty());
    }
}
