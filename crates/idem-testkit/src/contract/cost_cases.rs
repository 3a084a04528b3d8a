//! Contract cases of cost and recovery (spec: "Cost and recovery"): cost recorded on the
//! attempt's event and summed on the record (first attempt vs retries), fenced completions
//! (event, alert, tally; the ledger keeps one completion), the review clock behind
//! `idem_review_oldest_seconds` and `idem_recovery_seconds`, and the namespace's 24-hour
//! stats kept as counters in the transaction of each step.
//!
//! Like every case, these never read the wall clock: each drives the case's test clock.

use std::sync::Arc;

use idem_core::{
    AlertReason, AttemptCost, Class, CompleteRequest, CostTotals, EventType, FailErrorInput,
    FailRequest, Op, OpError, Reply, ResolveAction, ResolveRequest, State, FENCED_COMPLETION_NOTE,
};
use serde_json::json;

use super::{key, Backend, H};

fn cost(tokens: u64, usd: f64) -> Option<AttemptCost> {
    Some(AttemptCost::new(Some(tokens), Some(usd)).expect("valid cost"))
}

fn complete_with(token: &str, external_ref: &str, c: Option<AttemptCost>) -> Op {
    Op::Complete(CompleteRequest {
        token: token.into(),
        result: Some(json!({"ok": external_ref})),
        external_ref: Some(external_ref.into()),
        cost: c,
    })
}

fn fail_with(token: &str, kind: Class, sent: Option<bool>, c: Option<AttemptCost>) -> Op {
    Op::Fail(FailRequest {
        token: token.into(),
        kind: Some(kind),
        http_status: None,
        retry_after_ms: None,
        sent,
        error: Some(FailErrorInput {
            category: "timeout".into(),
            message: "no answer".into(),
        }),
        cost: c,
    })
}

async fn ok(h: &H, k: &idem_core::Key, op: Op) -> idem_core::Record {
    match h.exec(k, op, None).await.reply {
        Ok(Reply::Record(r)) => r,
        Ok(Reply::Fail(f)) => f.record,
        other => panic!("expected a record, got {other:?}"),
    }
}

fn totals(tokens: u64, usd_nanos: u64, retry_tokens: u64, retry_usd_nanos: u64) -> CostTotals {
    CostTotals {
        tokens,
        usd_nanos,
        retry_tokens,
        retry_usd_nanos,
    }
}

pub async fn cost_is_recorded_on_events_and_summed_first_and_retry<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    let k = key("draft");
    let fresh = h.acquire(&k).await;
    assert_eq!(
        h.rec(&k).await.cost,
        CostTotals::default(),
        "zeros when none"
    );
    let e = h
        .exec(
            &k,
            fail_with(&fresh, Class::Retryable, None, cost(1200, 0.03)),
            None,
        )
        .await;
    assert!(e.reply.is_ok(), "{:?}", e.reply);
    assert_eq!(e.tally.cost, Some((cost(1200, 0.03).expect("c"), false)));
    h.advance(60_000);
    let retry = h.acquire(&k).await;
    let e = h
        .exec(&k, complete_with(&retry, "msg_1", cost(800, 0.02)), None)
        .await;
    assert!(e.reply.is_ok(), "{:?}", e.reply);
    assert_eq!(e.tally.cost, Some((cost(800, 0.02).expect("c"), true)));
    let want = totals(2000, 50_000_000, 800, 20_000_000);
    let got = h.get(&k).await;
    assert_eq!(got.record.cost, want);
    let on_events: Vec<(EventType, Option<AttemptCost>)> = got
        .events
        .iter()
        .filter(|e| e.cost.is_some())
        .map(|e| (e.kind, e.cost))
        .collect();
    assert_eq!(
        on_events,
        [
            (EventType::Failed, cost(1200, 0.03)),
            (EventType::Completed, cost(800, 0.02))
        ]
    );
    let sum: u64 = got
        .events
        .iter()
        .filter_map(|e| e.cost)
        .map(|c| c.tokens)
        .sum();
    assert_eq!(sum, got.record.cost.tokens);
    // The public shape.
    let v = serde_json::to_value(&got).expect("json");
    assert_eq!(
        v["record"]["cost"],
        json!({"tokens": 2000, "usd": 0.05, "retry_tokens": 800, "retry_usd": 0.02})
    );
    assert_eq!(
        v["events"][v["events"].as_array().map_or(0, |a| a.len() - 1)]["cost"],
        json!({"tokens": 800, "usd": 0.02})
    );
    assert_eq!(v["events"][0]["cost"], json!(null));
    // A repeated identical complete is an answer, not a new spend.
    let e = h
        .exec(&k, complete_with(&retry, "msg_1", cost(800, 0.02)), None)
        .await;
    assert!(e.reply.is_ok());
    assert_eq!(e.tally.cost, None);
    assert_eq!(h.rec(&k).await.cost, want);
    // Durable: another handle reads the same sums and event costs.
    let other = H::on(b.open().await, "ns", h.clock.clone());
    let again = other.get(&k).await;
    assert_eq!(again.record.cost, want);
    assert_eq!(again.events, got.events);
}

pub async fn fenced_completion_is_recorded_alerted_and_keeps_one_completion<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    h.patch(json!({"alert_url": "http://127.0.0.1:9/hook"}))
        .await;
    let k = key("charge");
    let zombie = h.acquire(&k).await;
    h.advance(30_001); // the lease runs out; the next claim reclaims it
    let fresh = h.acquire(&k).await;
    let rec = ok(&h, &k, complete_with(&fresh, "ch_2", None)).await;
    assert_eq!(rec.state, State::Completed);
    let before = h.get(&k).await;

    // The zombie finishes its effect and reports it, with what it spent.
    let e = h
        .exec(&k, complete_with(&zombie, "ch_1", cost(50, 0.5)), None)
        .await;
    assert_eq!(e.reply.as_ref().err(), Some(&OpError::LeaseLost));
    assert!(e.tally.fenced_completion);
    assert_eq!(e.alerts_queued, 1);
    assert_eq!(e.events.len(), 1);
    assert_eq!(e.events[0].kind, EventType::LeaseLost);
    assert!(e.events[0]
        .note
        .as_deref()
        .is_some_and(|n| n.starts_with(FENCED_COMPLETION_NOTE)));

    let after = h.get(&k).await;
    // The ledger keeps one completion: the newest holder's.
    assert_eq!(after.record.state, State::Completed);
    assert_eq!(after.record.external_ref.as_deref(), Some("ch_2"));
    assert_eq!(after.record.result, before.record.result);
    assert_eq!(after.record.updated_at, before.record.updated_at);
    assert_eq!(count_kind(&after.events, EventType::Completed), 1);
    // Its spend was real: first attempt's (the zombie was attempt 1).
    assert_eq!(after.record.cost, totals(50, 500_000_000, 0, 0));
    let fenced = after.events.last().expect("event");
    assert_eq!(
        (fenced.kind, fenced.cost),
        (EventType::LeaseLost, cost(50, 0.5))
    );

    // The alert is queued through the outbox, masked like every alert.
    let due = h.store.due_alerts(h.now(), 100, 60_000).await.expect("due");
    assert_eq!(due.len(), 1, "{due:?}");
    assert_eq!(due[0].reason, AlertReason::FencedCompletion.as_str());
    assert_eq!(due[0].state, State::Completed);
    assert_eq!(due[0].attempt, 1);
    // The same zombie repeating its report is counted again but alerted once.
    let e = h.exec(&k, complete_with(&zombie, "ch_1", None), None).await;
    assert!(e.tally.fenced_completion);
    assert_eq!(e.alerts_queued, 0);
    // A fail that never left is not a fenced completion; one that may have left is.
    let e = h
        .exec(
            &k,
            fail_with(&zombie, Class::Retryable, Some(false), None),
            None,
        )
        .await;
    assert_eq!(e.reply.as_ref().err(), Some(&OpError::LeaseLost));
    assert!(!e.tally.fenced_completion);
    let e = h
        .exec(&k, fail_with(&zombie, Class::Ambiguous, None, None), None)
        .await;
    assert!(e.tally.fenced_completion);
    // Without an alert_url: still recorded and counted, nothing queued.
    let h2 = H::new(&*b, "quiet").await;
    let k2 = key("charge");
    let z2 = h2.acquire(&k2).await;
    h2.advance(30_001);
    h2.acquire(&k2).await;
    let e = h2.exec(&k2, complete_with(&z2, "x", None), None).await;
    assert!(e.tally.fenced_completion);
    assert_eq!(e.alerts_queued, 0);
    assert_eq!(e.events.len(), 1);
}

fn count_kind(events: &[idem_core::Event], kind: EventType) -> usize {
    events.iter().filter(|e| e.kind == kind).count()
}

pub async fn review_clock_drives_review_age_and_recovery<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    let empty = h.store.stats(h.now()).await.expect("stats");
    assert_eq!(empty.review_oldest_seconds, 0.0);
    let k = key("doubt");
    let tok = h.acquire(&k).await;
    h.exec(&k, fail_with(&tok, Class::Ambiguous, None, None), None)
        .await;
    let entered = h.now();
    assert_eq!(h.rec(&k).await.review_since, Some(entered));
    h.advance(90_000);
    let k2 = key("younger");
    let t2 = h.acquire(&k2).await;
    h.exec(&k2, fail_with(&t2, Class::Ambiguous, None, None), None)
        .await;
    // The age is computed at read time: it moves with the clock, no tick needed.
    let s = h.store.stats(h.now()).await.expect("stats");
    assert!((s.review_oldest_seconds - 90.0).abs() < 0.01, "{s:?}");
    h.advance(30_000);
    let s = h.store.stats(h.now()).await.expect("stats");
    assert!((s.review_oldest_seconds - 120.0).abs() < 0.01, "{s:?}");
    // Resolving the oldest reports how long it waited and hands the gauge to the next.
    let e = h
        .exec(
            &k,
            Op::Resolve(ResolveRequest {
                action: ResolveAction::Completed,
                external_ref: Some("checked".into()),
                result: None,
                note: "found it in the PSP".into(),
            }),
            Some("operator:alice"),
        )
        .await;
    assert!(matches!(e.reply, Ok(Reply::Record(_))), "{:?}", e.reply);
    assert_eq!(e.tally.recovery_ms, Some(120_000));
    assert_eq!(h.rec(&k).await.review_since, None);
    let s = h.store.stats(h.now()).await.expect("stats");
    assert!((s.review_oldest_seconds - 30.0).abs() < 0.01, "{s:?}");
}

pub async fn namespace_stats_count_acquisitions_and_cost_over_24_hours<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    let zero = h
        .store
        .namespace_stats(&h.ns, h.now())
        .await
        .expect("stats");
    assert_eq!(zero, idem_store::NamespaceStats::default());
    // Two fresh acquisitions, one retry; cost on the first attempt and on the retry.
    let a = h.acquire(&key("a")).await;
    h.exec(
        &key("a"),
        fail_with(&a, Class::Retryable, Some(false), cost(10, 0.1)),
        None,
    )
    .await;
    h.advance(3_600_000); // the next hour bucket
    let a2 = h.acquire(&key("a")).await;
    h.exec(&key("a"), complete_with(&a2, "r", cost(5, 0.25)), None)
        .await;
    h.acquire(&key("b")).await;
    // A replay and an in_flight count nothing.
    h.claim(&key("a")).await;
    h.claim(&key("b")).await;
    // Another namespace is counted apart.
    H::on(h.store.clone(), "other", h.clock.clone())
        .acquire(&key("x"))
        .await;
    let s = h
        .store
        .namespace_stats(&h.ns, h.now())
        .await
        .expect("stats");
    assert_eq!((s.acquired_first, s.acquired_retry), (2, 1));
    assert_eq!(s.cost, totals(15, 350_000_000, 5, 250_000_000));
    // Another handle reads the same counters (they are stored, not in memory).
    let other = b.open().await;
    assert_eq!(
        other.namespace_stats(&h.ns, h.now()).await.expect("stats"),
        s
    );
    // A sliding window over hour buckets: 23 hours later the first hour has left it.
    h.advance(23 * 3_600_000);
    let s = h
        .store
        .namespace_stats(&h.ns, h.now())
        .await
        .expect("stats");
    assert_eq!((s.acquired_first, s.acquired_retry), (1, 1));
    assert_eq!(s.cost, totals(5, 250_000_000, 5, 250_000_000));
    h.advance(3_600_000);
    let s = h
        .store
        .namespace_stats(&h.ns, h.now())
        .await
        .expect("stats");
    assert_eq!(s, idem_store::NamespaceStats::default());
    // Retention drops buckets that can no longer be read, and leaves the window alone.
    h.acquire(&key("c")).await;
    h.store
        .retention_once(h.now(), 100)
        .await
        .expect("retention");
    let s = h
        .store
        .namespace_stats(&h.ns, h.now())
        .await
        .expect("stats");
    assert_eq!(s.acquired_first, 1);
}
