//! Rules about what a gate's key is made of: IDEM003 (a value that changes between attempts)
//! and IDEM004 (the whole body). Only the key and a precomputed fingerprint are read, never
//! `owner`, `correlation_id` or `payload` (sending the body as `payload` is the intended use);
//! a key read from an item field is traced one hop upstream to the Set / Code / Crypto node
//! that builds it.

use super::Cx;
use crate::expr::{self, Volatile};
use crate::Finding;

/// The key and fingerprint texts of a gate, each with the node that built it (if traced).
fn sources(cx: &Cx, g: usize) -> Vec<(String, Option<usize>)> {
    let Some(call) = cx.call(g) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for text in call.key.iter().chain(call.fingerprint.iter()) {
        out.extend(cx.key_sources(g, text));
    }
    out
}

/// Whether every trigger that reaches the gate is a schedule.
fn schedule_only(cx: &Cx, g: usize) -> bool {
    let s = &cx.flow.states[g];
    !s.is_empty() && s.iter().all(|s| s.schedule)
}

fn why(v: &Volatile, schedule: bool) -> &'static str {
    match v.token {
        "$execution.id" => {
            "every retry, replay or redelivery runs as a new execution with a new id"
        }
        "$runIndex" => "it counts the node's runs inside one execution, not the business operation",
        "Math.random()" | "randomUUID()" | "uuid()" => {
            "a fresh random value makes every attempt a new operation"
        }
        _ if v.date_cut && !schedule => {
            "a redelivery on another day (or by another trigger) makes a new key"
        }
        _ => "the time differs on every attempt",
    }
}

/// IDEM003 unstable-key, named at the gate.
pub fn idem003(cx: &Cx) -> Vec<Finding> {
    let mut out = Vec::new();
    for g in cx.flow.gates().filter(|&g| cx.flow.reached(g)) {
        let schedule = schedule_only(cx, g);
        for (text, builder) in sources(cx, g) {
            let bad: Vec<Volatile> = expr::volatile_tokens(&text)
                .into_iter()
                .filter(|v| !(v.date_cut && schedule))
                .collect();
            let Some(v) = bad.first() else { continue };
            let built = builder
                .map(|b| format!(" (built in '{}')", cx.name(b)))
                .unwrap_or_default();
            let tokens: Vec<&str> = bad.iter().map(|v| v.token).collect();
            let place = builder.map(|b| cx.name(b)).unwrap_or(cx.name(g));
            out.push(cx.finding(
                "IDEM003",
                Some(g),
                format!(
                    "The key of '{}'{} is made from {}: {}, so the gate never sees the duplicate.",
                    cx.name(g),
                    built,
                    tokens.join(", "),
                    why(v, schedule)
                ),
                format!(
                    "In '{place}' build the key from the event's own id plus the side effect's name, e.g. {{{{ $('Webhook').item.json.body.id }}}}:charge; for a scheduled job use the job name and the date."
                ),
            ));
            break;
        }
    }
    out
}

/// IDEM004 whole-body-key, named at the gate.
pub fn idem004(cx: &Cx) -> Vec<Finding> {
    let mut out = Vec::new();
    for g in cx.flow.gates().filter(|&g| cx.flow.reached(g)) {
        for (text, builder) in sources(cx, g) {
            let Some(token) = expr::whole_body(&text) else {
                continue;
            };
            let built = builder
                .map(|b| format!(" (built in '{}')", cx.name(b)))
                .unwrap_or_default();
            let place = builder.map(|b| cx.name(b)).unwrap_or(cx.name(g));
            out.push(cx.finding(
                "IDEM004",
                Some(g),
                format!(
                    "The key or fingerprint of '{}'{} is made from the whole body ({token}): timestamps, signatures and delivery ids in it change on a retry, so the duplicate gets a new key.",
                    cx.name(g),
                    built
                ),
                format!(
                    "In '{place}' use the provider's event id or chosen immutable fields (order id, customer id) instead; send the body as payload and let idem fingerprint it."
                ),
            ));
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::{check, nodes_of};

    #[test]
    fn idem003_finds_execution_id_code_built_clock_and_webhook_date() {
        let f = check(
            idem003,
            include_str!("../../tests/fixtures/idem003-unstable-keys.json"),
        );
        assert_eq!(
            nodes_of(&f),
            ["Claim receipt", "Claim receipt", "Claim receipt"]
        );
        assert_eq!(f[0].workflow, "Receipt keyed on the execution id");
        assert!(f[0].message.contains("$execution.id"), "{}", f[0].message);
        assert!(
            f[1].message.contains("built in 'Build key'"),
            "{}",
            f[1].message
        );
        assert!(f[1].message.contains("Date.now()"));
        assert!(f[2].message.contains("another day"), "{}", f[2].message);
    }

    #[test]
    fn idem003_near_miss_schedule_date_key_and_owner_execution_id() {
        let near = include_str!("../../tests/fixtures/idem003-near-miss-schedule-date-key.json");
        assert!(check(idem003, near).is_empty());
        let good = include_str!("../../tests/fixtures/good-webhook-claim-receipt.json");
        assert!(
            check(idem003, good).is_empty(),
            "owner: $execution.id is fine"
        );
    }

    #[test]
    fn idem004_finds_a_hash_of_the_whole_body() {
        let f = check(
            idem004,
            include_str!("../../tests/fixtures/idem004-whole-body-hash-key.json"),
        );
        assert_eq!(nodes_of(&f), ["Claim receipt"]);
        assert!(
            f[0].message.contains("built in 'Hash body'"),
            "{}",
            f[0].message
        );
    }

    #[test]
    fn idem004_finds_a_hash_of_the_whole_body_built_in_a_code_node() {
        let fixture = include_str!("../../tests/fixtures/idem004-code-node-body-hash-keys.json");
        let f = check(idem004, fixture);
        let workflows: Vec<Option<&str>> = f.iter().map(|x| x.workflow_id.as_deref()).collect();
        assert_eq!(
            workflows,
            [
                Some("fxIdem004c"),
                Some("fxIdem004d"),
                Some("fxIdem004e"),
                Some("fxIdem004f"),
                Some("fxIdem004g"),
                Some("fxIdem004h"),
                Some("fxIdem004i"),
            ],
            "{f:#?}"
        );
        for x in &f {
            assert_eq!(x.node.as_deref(), Some("Claim receipt"), "{x:#?}");
            assert!(x.message.contains("built in 'Build key'"), "{}", x.message);
            assert!(x.fix.starts_with("In 'Build key'"), "{}", x.fix);
        }
    }

    #[test]
    fn idem004_near_miss_field_key_and_body_as_payload() {
        let near = include_str!("../../tests/fixtures/idem004-near-miss-field-key.json");
        assert!(check(idem004, near).is_empty());
    }

    #[test]
    fn idem004_near_miss_code_node_hashing_chosen_fields() {
        let near = include_str!("../../tests/fixtures/idem004-near-miss-code-node-field-hash.json");
        let f = check(idem004, near);
        assert!(f.is_empty(), "{f:#?}");
    }
}
