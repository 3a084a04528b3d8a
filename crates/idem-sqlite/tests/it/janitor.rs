//! Sweep, alert outbox and retention steps, driven by a hand-moved clock.

use idem_core::{
    ClaimOutcome, Class, EventType, FailRequest, Key, Namespace, PrepareRequest, Record, State,
};
use idem_store::{AlertOutcome, NamespaceChange, PendingAlert, RetentionReport, Store};
use serde_json::json;

use crate::helpers::{key, ns, TestLedger, DAY};

/// Namespace `name` with its policy patched by `p`.
async fn patched(t: &TestLedger, name: &str, p: serde_json::Value) -> Namespace {
    let n = ns(name);
    t.store
        .update_namespace(&n, NamespaceChange::Patch(p), t.now())
        .await
        .expect("patch");
    n
}

/// The alerts due now (at most 10), claimed for `lease_ms`.
async fn due_now(t: &TestLedger, lease_ms: i64) -> Vec<PendingAlert> {
    t.store
        .due_alerts(t.now(), 10, lease_ms)
        .await
        .expect("due")
}

async fn record(t: &TestLedger, n: &Namespace, k: &Key) -> Record {
    t.store.get(n, k).await.expect("get").expect("known").record
}

fn fail_req(token: String, kind: Class) -> FailRequest {
    FailRequest {
        cost: None,
        token,
        kind: Some(kind),
        http_status: None,
        retry_after_ms: None,
        sent: None,
        error: Some(idem_core::FailErrorInput {
            category: "test".into(),
            message: "boom".into(),
        }),
    }
}

#[tokio::test]
async fn sweep_moves_expired_review_leases_and_queues_an_alert() {
    let t = TestLedger::new();
    let money = patched(
        &t,
        "money",
        json!({"lease_expiry": "review", "alert_url": "http://127.0.0.1:9/hook"}),
    )
    .await;
    // review, but no alert_url: nothing to queue
    let quiet = patched(&t, "quiet", json!({"lease_expiry": "review"})).await;
    let relaxed = ns("relaxed"); // reclaim: the sweep leaves an expired lease to the next claim
    t.claim(&money, &key("a")).await;
    t.claim(&quiet, &key("b")).await;
    t.claim(&relaxed, &key("c")).await;
    t.clock.advance_ms(31_000);

    let report = t.store.sweep_once(t.now(), 100).await.expect("sweep");
    assert_eq!(report.examined, 2);
    assert_eq!(report.moved_to_review, 2);
    assert_eq!(report.stuck_alerts, 0);
    assert_eq!(
        record(&t, &money, &key("a")).await.state,
        State::NeedsReview
    );
    assert_eq!(
        record(&t, &relaxed, &key("c")).await.state,
        State::Processing
    );
    let again = t.store.sweep_once(t.now(), 100).await.expect("sweep");
    assert_eq!(again.examined, 0);

    let due = due_now(&t, 60_000).await;
    assert_eq!(due.len(), 1, "{due:?}");
    let alert = &due[0];
    assert_eq!(alert.namespace, "money");
    assert_eq!(alert.key, "a");
    assert_eq!(alert.reason, "needs_review");
    assert_eq!(alert.state, State::NeedsReview);
    assert_eq!(alert.alert_url.as_deref(), Some("http://127.0.0.1:9/hook"));
    // Claimed for the lease: another sender does not see it.
    assert!(due_now(&t, 60_000).await.is_empty());
    t.store
        .finish_alert(alert.id, AlertOutcome::Sent, t.now())
        .await
        .expect("finish");
    // A repeated report does not write a second event.
    t.store
        .finish_alert(alert.id, AlertOutcome::Sent, t.now())
        .await
        .expect("finish");
    let events = t
        .store
        .get(&money, &key("a"))
        .await
        .expect("get")
        .expect("known")
        .events;
    let sent = events
        .iter()
        .filter(|e| e.kind == EventType::AlertSent)
        .count();
    assert_eq!(sent, 1);
    t.clock.advance_ms(120_000);
    assert!(due_now(&t, 60_000).await.is_empty());
}

#[tokio::test]
async fn stuck_processing_alerts_once_and_retries_delivery() {
    let t = TestLedger::new();
    let n = patched(
        &t,
        "watch",
        json!({"stuck_after_ms": 60000, "alert_url": "https://alerts.example/idem"}),
    )
    .await;
    let c = t.claim_leased(&n, &key("long"), 3_600_000).await;
    assert_eq!(c.outcome, ClaimOutcome::Acquired);
    t.clock.advance_ms(61_000);
    let r = t.store.sweep_once(t.now(), 10).await.expect("sweep");
    assert_eq!((r.examined, r.moved_to_review, r.stuck_alerts), (1, 0, 1));
    let rec = record(&t, &n, &key("long")).await;
    assert_eq!(rec.state, State::Processing);
    assert!(rec.stuck_alerted);
    assert_eq!(
        t.store
            .sweep_once(t.now(), 10)
            .await
            .expect("sweep")
            .examined,
        0
    );

    let due = due_now(&t, 1000).await;
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].reason, "stuck");
    assert_eq!(due[0].tries, 0);
    let retry_at = t.now().plus_ms(5_000);
    t.store
        .finish_alert(due[0].id, AlertOutcome::RetryAt(retry_at), t.now())
        .await
        .expect("retry");
    t.clock.advance_ms(2_000);
    assert!(due_now(&t, 1000).await.is_empty());
    t.clock.advance_ms(3_000);
    let due = due_now(&t, 1000).await;
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].tries, 1);
    t.store
        .finish_alert(due[0].id, AlertOutcome::GaveUp, t.now())
        .await
        .expect("gave up");
    t.clock.advance_ms(DAY);
    assert!(due_now(&t, 1000).await.is_empty());
}

/// One record in every state of namespace `n`, keyed by the state name.
async fn one_of_each_state(t: &TestLedger, n: &Namespace) {
    t.claim_complete(n, &key("completed")).await;
    let c = t.claim(n, &key("failed_permanent")).await;
    t.ledger
        .fail(
            n,
            &key("failed_permanent"),
            fail_req(c.token.expect("token").secret(), Class::Permanent),
        )
        .await
        .expect("fail");
    t.claim_leased(n, &key("processing"), 7 * DAY).await;
    for (k, approval, then_fail) in [
        ("needs_review", false, Some(Class::Ambiguous)),
        ("failed_retryable", false, Some(Class::Retryable)),
        ("prepared", false, None),
        ("awaiting_approval", true, None),
    ] {
        let c = t.claim(n, &key(k)).await;
        let token = c.token.expect("token").secret();
        t.ledger
            .prepare(
                n,
                &key(k),
                PrepareRequest {
                    token: token.clone(),
                    payload: json!({"draft": k}),
                    approval_required: approval,
                },
            )
            .await
            .expect("prepare");
        if let Some(class) = then_fail {
            t.ledger
                .fail(n, &key(k), fail_req(token, class))
                .await
                .expect("fail");
        }
    }
    for s in State::ALL {
        assert_eq!(record(t, n, &key(s.as_str())).await.state, s);
    }
}

async fn drain_retention(t: &TestLedger, batch: usize) -> RetentionReport {
    let mut total = RetentionReport::default();
    loop {
        let r = t
            .store
            .retention_once(t.now(), batch)
            .await
            .expect("retention");
        total.results_expired += r.results_expired;
        total.tombstones_deleted += r.tombstones_deleted;
        if r == RetentionReport::default() {
            return total;
        }
    }
}

#[tokio::test]
async fn retention_expires_then_deletes_final_records_and_never_touches_other_states() {
    let t = TestLedger::new();
    let fast = patched(
        &t,
        "fast",
        json!({"retention_ms": DAY, "audit_retention_ms": 2 * DAY}),
    )
    .await;
    let slow = ns("slow"); // defaults: 30 d / 400 d
    one_of_each_state(&t, &fast).await;
    one_of_each_state(&t, &slow).await;
    let mut untouchable = Vec::new();
    for n in [&fast, &slow] {
        for s in State::ALL.into_iter().filter(|s| !s.is_final()) {
            let got = t
                .store
                .get(n, &key(s.as_str()))
                .await
                .expect("get")
                .expect("known");
            untouchable.push(got);
        }
    }

    // Past the fast namespace's retention: its two final records lose their results.
    t.clock.advance_ms(DAY + 1);
    let r = drain_retention(&t, 1000).await;
    assert_eq!(r.results_expired, 2);
    assert_eq!(r.tombstones_deleted, 0);
    let done = t
        .store
        .get(&fast, &key("completed"))
        .await
        .expect("get")
        .expect("tombstone");
    assert!(done.record.result_expired);
    assert_eq!(done.record.result, None);
    assert_eq!(done.record.external_ref.as_deref(), Some("ref-completed"));
    assert_eq!(
        done.events.last().map(|e| e.kind),
        Some(EventType::ResultExpired)
    );
    assert!(!record(&t, &slow, &key("completed")).await.result_expired);
    // The tombstone still answers: an expired result never lets the operation run again.
    let replay = t.claim(&fast, &key("completed")).await;
    assert_eq!(replay.outcome, ClaimOutcome::Completed);
    assert!(replay.record.expect("record").result_expired);

    // Past every clock: all final records go, with their events.
    t.clock.advance_ms(401 * DAY);
    let r = drain_retention(&t, 1000).await;
    assert_eq!(r.tombstones_deleted, 4);
    for n in [&fast, &slow] {
        for s in [State::Completed, State::FailedPermanent] {
            assert!(t
                .store
                .get(n, &key(s.as_str()))
                .await
                .expect("get")
                .is_none());
        }
    }
    let conn = rusqlite::Connection::open(t.path()).expect("raw");
    let orphans: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM events WHERE key IN ('completed', 'failed_permanent')",
            [],
            |r| r.get(0),
        )
        .expect("count");
    assert_eq!(orphans, 0);

    // processing, needs_review and every other non-final state: byte for byte untouched.
    for before in untouchable {
        let after = t
            .store
            .get(&before.record.namespace, &before.record.key)
            .await
            .expect("get")
            .expect("still there");
        assert_eq!(after.record, before.record);
        assert_eq!(after.events, before.events);
    }
    assert_eq!(
        record(&t, &slow, &key("needs_review"))
            .await
            .prepared_payload,
        Some(json!({"draft": "needs_review"}))
    );
}

#[tokio::test]
async fn retention_works_in_batches() {
    let t = TestLedger::new();
    let n = ns("bulk");
    for i in 0..5 {
        t.claim_complete(&n, &key(&format!("k{i}"))).await;
    }
    t.clock.advance_ms(31 * DAY);
    let mut sizes = Vec::new();
    loop {
        let r = t.store.retention_once(t.now(), 2).await.expect("retention");
        if r.results_expired == 0 {
            break;
        }
        sizes.push(r.results_expired);
    }
    assert_eq!(sizes, [2, 2, 1]);
    t.clock.advance_ms(400 * DAY);
    let r = t.store.retention_once(t.now(), 3).await.expect("retention");
    assert_eq!(r.tombstones_deleted, 3);
    let r = t.store.retention_once(t.now(), 3).await.expect("retention");
    assert_eq!(r.tombstones_deleted, 2);
}
