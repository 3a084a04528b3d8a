//! Contract cases of the durable outbox and the secrets store, run against every backend by
//! [`crate::outbox_suite!`] exactly like [`crate::contract_suite!`] runs the ledger cases.
//!
//! They hold every backend to the same outbox rules: items caused by a record write are
//! enqueued by that write (and only by it), a claim leases each item to one holder until the
//! lease runs out — also under many concurrent claimers on separate handles — only the
//! current holder may finish, attempts are counted, retries wait their backoff (and a
//! `Retry-After`), the budget ends in `dead`, and retention deletes a record's items with it.
//! Secrets: versions rotate with a grace period and a value never shows in `Debug`.
//!
//! The outbox cases and the helpers every outbox case uses are here; the secrets cases and
//! the rider cases (intake rows, report riders, intake updates) have a module each.

use std::collections::HashSet;
use std::sync::Arc;

use idem_core::{
    Class, CompleteRequest, FailErrorInput, FailRequest, LeaseId, Op, State, Timestamp,
};
use idem_store::{
    AlertOutcome, AlertPayload, ExecCtx, Jitter, NewOutboxItem, OutboxClaim, OutboxFinish,
    OutboxItem, OutboxKind, OutboxOutcome, OutboxState, RetrySchedule, Store,
};
use serde_json::json;
use tokio::sync::Barrier;

use crate::contract::{key, ok_reply, Backend, DAY_MS, H};

/// Expands to one `#[tokio::test]` per outbox case for backend type `$backend`.
#[macro_export]
macro_rules! outbox_suite {
    ($backend:ty) => {
        $crate::outbox_suite!(@cases $backend;
            alerts_are_enqueued_by_the_record_write_and_only_by_it,
            an_alert_keeps_the_traceparent_of_the_operation_that_queued_it,
            enqueue_is_deduplicated_per_record_kind_and_dedupe,
            a_claim_leases_until_expiry_and_a_reclaim_makes_a_new_holder,
            failed_attempts_are_counted_backed_off_and_dead_after_the_budget,
            retry_after_is_a_floor_for_the_next_attempt,
            concurrent_claimers_on_many_handles_get_each_item_once,
            alert_wrappers_are_outbox_items,
            retention_deletes_a_records_outbox_items_with_it,
            a_rider_is_stored_exactly_with_the_record_it_rides_on,
            a_key_holding_another_records_row_is_not_taken_by_a_receive,
            a_deliverys_record_is_made_over_its_own_row,
            concurrent_first_deliveries_store_one_rider,
            intake_updates_append_attempts_and_set_delivered_at,
            a_report_rider_moves_with_the_record_it_rides_on,
            secrets_rotate_with_a_grace_period_and_never_show_in_debug,
        );
    };
    (@cases $backend:ty; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                $crate::contract::run::<$backend, _, _>(
                    stringify!($case),
                    |b| $crate::contract::outbox_cases::$case(b),
                )
                .await;
            }
        )*
    };
}

mod riders;
mod secrets;

pub use riders::*;
pub use secrets::*;

const LEASE_MS: i64 = 60_000;

/// A forward item of record `k` of the handle's namespace, due now.
/// A retry schedule with full jitter.
fn full_jitter(max_attempts: u32, base_ms: i64, max_ms: i64) -> RetrySchedule {
    RetrySchedule {
        max_attempts,
        base_ms,
        max_ms,
        jitter: Jitter::Full,
    }
}

fn forward(h: &H, k: &str, dedupe: &str) -> NewOutboxItem {
    NewOutboxItem {
        kind: OutboxKind::Forward,
        namespace: h.ns.as_str().to_owned(),
        key: k.to_owned(),
        dedupe: dedupe.to_owned(),
        payload: format!("{{\"event\":\"{dedupe}\"}}").into_bytes(),
        due_at: h.now(),
    }
}

async fn enqueue(store: &Arc<dyn Store>, item: NewOutboxItem, now: Timestamp) -> Option<i64> {
    store
        .outbox_enqueue(item, now)
        .await
        .unwrap_or_else(|e| panic!("outbox_enqueue: {e}"))
}

async fn claim(h: &H, kind: OutboxKind, limit: usize) -> Vec<OutboxItem> {
    h.store
        .outbox_claim(OutboxClaim {
            kind,
            now: h.now(),
            limit,
            lease_ms: LEASE_MS,
        })
        .await
        .unwrap_or_else(|e| panic!("outbox_claim: {e}"))
}

async fn item(h: &H, id: i64) -> OutboxItem {
    h.store
        .outbox_item(id)
        .await
        .unwrap_or_else(|e| panic!("outbox_item: {e}"))
        .unwrap_or_else(|| panic!("no outbox item {id}"))
}

async fn finish(h: &H, it: &OutboxItem, outcome: OutboxOutcome) -> bool {
    let lease = it.lease.clone().expect("a claimed item carries its lease");
    h.store
        .outbox_finish(OutboxFinish {
            id: it.id,
            lease,
            outcome,
            now: h.now(),
        })
        .await
        .unwrap_or_else(|e| panic!("outbox_finish: {e}"))
}

/// Acquires `k` and reports an ambiguous failure: the record enters `needs_review`.
async fn to_review(h: &H, k: &str) -> usize {
    to_review_traced(h, k, None).await
}

/// [`to_review`] by a caller whose request had `traceparent`.
async fn to_review_traced(h: &H, k: &str, traceparent: Option<&str>) -> usize {
    let token = h.acquire(&key(k)).await;
    let ctx = ExecCtx {
        now: h.now(),
        lease_id: LeaseId::random(),
        jitter: 0.5,
        actor: None,
        traceparent: traceparent.map(str::to_owned),
        rider: None,
        report: None,
        then_sent: None,
        then_prepare: None,
    };
    let e = h
        .store
        .execute(
            &h.ns,
            &key(k),
            Op::Fail(FailRequest {
                cost: None,
                token,
                kind: Some(Class::Ambiguous),
                http_status: None,
                retry_after_ms: None,
                sent: None,
                error: Some(FailErrorInput {
                    category: "timeout".into(),
                    message: "card 4242 timed out".into(),
                }),
            }),
            ctx,
        )
        .await
        .unwrap_or_else(|e| panic!("store error on {k}: {e}"));
    ok_reply(&e);
    e.alerts_queued
}

pub async fn an_alert_keeps_the_traceparent_of_the_operation_that_queued_it<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "pay").await;
    h.patch(json!({"alert_url": "http://127.0.0.1:9/hook"}))
        .await;
    let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    assert_eq!(to_review_traced(&h, "traced", Some(tp)).await, 1);
    assert_eq!(to_review(&h, "plain").await, 1);
    let due = h
        .store
        .due_alerts(h.now(), 10, LEASE_MS)
        .await
        .expect("due alerts");
    let mut seen: Vec<(String, Option<String>)> =
        due.into_iter().map(|a| (a.key, a.traceparent)).collect();
    seen.sort();
    assert_eq!(
        seen,
        [
            ("plain".to_owned(), None),
            ("traced".to_owned(), Some(tp.to_owned()))
        ]
    );
}

// ================================================================ enqueue

pub async fn alerts_are_enqueued_by_the_record_write_and_only_by_it<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "pay").await;
    h.patch(json!({"alert_url": "http://127.0.0.1:9/hook"}))
        .await;
    assert_eq!(to_review(&h, "k").await, 1, "the write queued its alert");
    let rec = h.rec(&key("k")).await;
    assert_eq!(rec.state, State::NeedsReview);
    let items = claim(&h, OutboxKind::Alert, 10).await;
    assert_eq!(items.len(), 1, "{items:?}");
    let it = &items[0];
    assert_eq!((it.namespace.as_str(), it.key.as_str()), ("pay", "k"));
    assert_eq!(it.state, OutboxState::Leased);
    assert_eq!(it.attempts, 0);
    // Enqueued by the very write that moved the record: same instant.
    assert_eq!(it.created_at, rec.updated_at);
    let p = AlertPayload::decode(&it.payload).expect("alert payload");
    assert_eq!(p.state, "needs_review");
    assert_eq!(p.error_category.as_deref(), Some("timeout"));
    assert!(
        !String::from_utf8_lossy(&it.payload).contains("4242"),
        "the alert payload carries no error message"
    );

    // Writes that change nothing queue nothing: a refused write, and claims in review. (A
    // refused *complete* is a fenced completion, which has an alert of its own: see
    // `cost_cases`.)
    let e = h
        .exec(
            &key("k"),
            Op::Heartbeat(idem_core::HeartbeatRequest {
                token: "made-up".into(),
                lease_ms: None,
            }),
            None,
        )
        .await;
    assert!(e.reply.is_err(), "{:?}", e.reply);
    assert_eq!(e.alerts_queued, 0);
    for _ in 0..3 {
        h.claim(&key("k")).await;
    }
    h.advance(LEASE_MS + 1);
    let again = claim(&h, OutboxKind::Alert, 10).await;
    assert_eq!(
        again.iter().map(|i| i.id).collect::<Vec<_>>(),
        [it.id],
        "only the one alert, reclaimed after its lease"
    );
    // The other kinds are not handed to the alert sender, nor alerts to theirs.
    assert!(claim(&h, OutboxKind::Forward, 10).await.is_empty());
}

pub async fn enqueue_is_deduplicated_per_record_kind_and_dedupe<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "src").await;
    let first = enqueue(&h.store, forward(&h, "evt", "e1"), h.now()).await;
    assert!(first.is_some());
    assert_eq!(
        enqueue(&h.store, forward(&h, "evt", "e1"), h.now()).await,
        None,
        "the same item twice is one item"
    );
    let mut effect = forward(&h, "evt", "e1");
    effect.kind = OutboxKind::Effect;
    let other_kind = enqueue(&h.store, effect, h.now()).await;
    let other_dedupe = enqueue(&h.store, forward(&h, "evt", "e2"), h.now()).await;
    let other_key = enqueue(&h.store, forward(&h, "evt2", "e1"), h.now()).await;
    let ids: HashSet<Option<i64>> = [first, other_kind, other_dedupe, other_key].into();
    assert_eq!(ids.len(), 4, "{ids:?}");
    assert!(!ids.contains(&None));
    let got = item(&h, first.expect("id")).await;
    assert_eq!(got.payload, b"{\"event\":\"e1\"}");
    assert_eq!(got.state, OutboxState::Pending);
    assert_eq!(got.lease, None);
    assert!(
        !format!("{got:?}").contains("\"event\""),
        "Debug hides the payload"
    );
}

// ================================================================ claim and lease

pub async fn a_claim_leases_until_expiry_and_a_reclaim_makes_a_new_holder<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "src").await;
    let other = H::on(b.open().await, "src", h.clock.clone());
    let id = enqueue(&h.store, forward(&h, "evt", "e1"), h.now())
        .await
        .expect("id");
    // Not due yet: an item enqueued for later waits.
    let mut later = forward(&h, "evt", "later");
    later.due_at = h.now().plus_ms(5_000);
    let later_id = enqueue(&h.store, later, h.now()).await.expect("id");

    let first = claim(&h, OutboxKind::Forward, 10).await;
    assert_eq!(first.iter().map(|i| i.id).collect::<Vec<_>>(), [id]);
    let lease1 = first[0].lease.clone().expect("lease");
    assert_eq!(lease1.until, h.now().plus_ms(LEASE_MS));
    assert_eq!(item(&other, id).await.state, OutboxState::Leased);
    // Leased: no other claim gets it, on this handle or another, until the lease ran out.
    assert!(claim(&h, OutboxKind::Forward, 10)
        .await
        .iter()
        .all(|i| i.id != id));
    other.advance(LEASE_MS - 1);
    let mid = claim(&other, OutboxKind::Forward, 10).await;
    assert_eq!(mid.iter().map(|i| i.id).collect::<Vec<_>>(), [later_id]);
    other.advance(1);
    let second = claim(&other, OutboxKind::Forward, 10).await;
    assert_eq!(second.iter().map(|i| i.id).collect::<Vec<_>>(), [id]);
    let lease2 = second[0].lease.clone().expect("lease");
    assert_ne!(lease1.owner, lease2.owner, "a reclaim makes a new holder");

    // The old holder's report is refused and changes nothing; the new holder's counts.
    assert!(!finish(&h, &first[0], OutboxOutcome::Done).await);
    let still = item(&h, id).await;
    assert_eq!((still.state, still.attempts), (OutboxState::Leased, 0));
    assert_eq!(still.lease, Some(lease2));
    assert!(finish(&other, &second[0], OutboxOutcome::Done).await);
    let done = item(&h, id).await;
    assert_eq!((done.state, done.attempts), (OutboxState::Done, 1));
    assert_eq!(done.lease, None);
    assert!(
        !finish(&other, &second[0], OutboxOutcome::Done).await,
        "finished once"
    );
    h.advance(DAY_MS);
    assert!(claim(&h, OutboxKind::Forward, 10)
        .await
        .iter()
        .all(|i| i.id != id));
}

pub async fn failed_attempts_are_counted_backed_off_and_dead_after_the_budget<B: Backend>(
    b: Arc<B>,
) {
    let h = H::new(&*b, "src").await;
    let schedule = full_jitter(4, 1_000, 60_000);
    let id = enqueue(&h.store, forward(&h, "evt", "e1"), h.now())
        .await
        .expect("id");
    let mut waits = Vec::new();
    for n in 0..4u32 {
        let got = claim(&h, OutboxKind::Forward, 10).await;
        assert_eq!(got.len(), 1, "attempt {}: {got:?}", n + 1);
        assert_eq!(got[0].attempts, n);
        let outcome = schedule.after_failure(
            got[0].attempts,
            h.now(),
            0.75,
            None,
            Some(format!("HTTP 50{n}")),
        );
        assert!(finish(&h, &got[0], outcome.clone()).await);
        let after = item(&h, id).await;
        assert_eq!(after.attempts, n + 1);
        assert_eq!(after.last_error, Some(format!("HTTP 50{n}")));
        match outcome {
            OutboxOutcome::Retry { at, .. } => {
                assert_eq!((after.state, after.due_at), (OutboxState::Pending, at));
                let wait = at.0 - h.now().0;
                waits.push(wait);
                // Not before its time, then due.
                h.advance(wait - 1);
                assert!(claim(&h, OutboxKind::Forward, 10).await.is_empty());
                h.advance(1);
            }
            OutboxOutcome::Dead { .. } => {
                assert_eq!(n, 3, "dead exactly after the budget");
                assert_eq!(after.state, OutboxState::Dead);
            }
            OutboxOutcome::Done => panic!("a failure is never done"),
        }
    }
    // Full jitter at 0.75 of a doubling ceiling: 750, 1500, 3000.
    assert_eq!(waits, [750, 1_500, 3_000]);
    h.advance(DAY_MS);
    assert!(claim(&h, OutboxKind::Forward, 10).await.is_empty());
    let dead = item(&h, id).await;
    assert_eq!((dead.state, dead.attempts), (OutboxState::Dead, 4));
}

pub async fn retry_after_is_a_floor_for_the_next_attempt<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "src").await;
    let schedule = full_jitter(8, 5_000, 3_600_000);
    let id = enqueue(&h.store, forward(&h, "evt", "e1"), h.now())
        .await
        .expect("id");
    let got = claim(&h, OutboxKind::Forward, 10).await;
    // The receiver said "Retry-After: 120": our own backoff (≤ 5 s) must not be sooner.
    let outcome = schedule.after_failure(0, h.now(), 0.5, Some(120_000), Some("HTTP 429".into()));
    assert!(finish(&h, &got[0], outcome).await);
    assert_eq!(item(&h, id).await.due_at, h.now().plus_ms(120_000));
    h.advance(119_999);
    assert!(claim(&h, OutboxKind::Forward, 10).await.is_empty());
    h.advance(1);
    assert_eq!(claim(&h, OutboxKind::Forward, 10).await.len(), 1);
}

/// Many claimers on separate handles (separate connection pools, or separate SQLite writers
/// on one file) claim at the same instant in a loop: every item is handed out exactly once.
pub async fn concurrent_claimers_on_many_handles_get_each_item_once<B: Backend>(b: Arc<B>) {
    const ITEMS: usize = 120;
    const CLAIMERS: usize = 6;
    let h = H::new(&*b, "src").await;
    for i in 0..ITEMS {
        enqueue(&h.store, forward(&h, &format!("evt{i}"), "e"), h.now())
            .await
            .expect("id");
    }
    let start = Arc::new(Barrier::new(CLAIMERS));
    let mut tasks = Vec::new();
    for _ in 0..CLAIMERS {
        let c = H::on(b.open().await, "src", h.clock.clone());
        let start = start.clone();
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            let mut mine = Vec::new();
            loop {
                let got = claim(&c, OutboxKind::Forward, 7).await;
                if got.is_empty() {
                    break;
                }
                for it in got {
                    // The sender's work; its report must be accepted (it holds the lease).
                    assert!(finish(&c, &it, OutboxOutcome::Done).await, "{it:?}");
                    mine.push(it.id);
                }
            }
            mine
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("claimer"));
    }
    let distinct: HashSet<i64> = all.iter().copied().collect();
    assert_eq!(all.len(), ITEMS, "each item handed out once");
    assert_eq!(distinct.len(), ITEMS);
    for id in distinct {
        assert_eq!(item(&h, id).await.attempts, 1, "item {id}");
    }
}

// ================================================================ alerts and retention

pub async fn alert_wrappers_are_outbox_items<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "pay").await;
    h.patch(json!({"alert_url": "http://127.0.0.1:9/hook"}))
        .await;
    to_review(&h, "a").await;
    to_review(&h, "b").await;
    let due = h
        .store
        .due_alerts(h.now(), 10, LEASE_MS)
        .await
        .expect("due");
    assert_eq!(due.len(), 2, "{due:?}");
    for a in &due {
        let it = item(&h, a.id).await;
        assert_eq!(
            (it.kind, it.state),
            (OutboxKind::Alert, OutboxState::Leased)
        );
        assert_eq!(it.created_at, a.created_at);
    }
    // Leased to the alert sender: a generic claim of alerts does not get them either.
    assert!(claim(&h, OutboxKind::Alert, 10).await.is_empty());
    h.store
        .finish_alert(due[0].id, AlertOutcome::Sent, h.now())
        .await
        .expect("sent");
    let retry_at = h.now().plus_ms(2_000);
    h.store
        .finish_alert(due[1].id, AlertOutcome::RetryAt(retry_at), h.now())
        .await
        .expect("retry");
    let sent = item(&h, due[0].id).await;
    assert_eq!((sent.state, sent.attempts), (OutboxState::Done, 1));
    let retried = item(&h, due[1].id).await;
    assert_eq!(
        (retried.state, retried.attempts, retried.due_at),
        (OutboxState::Pending, 1, retry_at)
    );
    h.advance(2_000);
    let again = h
        .store
        .due_alerts(h.now(), 10, LEASE_MS)
        .await
        .expect("due");
    assert_eq!(again.len(), 1);
    assert_eq!((again[0].id, again[0].tries), (due[1].id, 1));
    h.store
        .finish_alert(again[0].id, AlertOutcome::GaveUp, h.now())
        .await
        .expect("gave up");
    assert_eq!(item(&h, due[1].id).await.state, OutboxState::Dead);
}

pub async fn retention_deletes_a_records_outbox_items_with_it<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "src").await;
    h.patch(json!({"retention_ms": 60_000, "audit_retention_ms": 120_000}))
        .await;
    let k = key("evt");
    let token = h.acquire(&k).await;
    let e = h
        .exec(
            &k,
            Op::Complete(CompleteRequest {
                cost: None,
                token,
                result: None,
                external_ref: None,
            }),
            None,
        )
        .await;
    ok_reply(&e);
    let id = enqueue(&h.store, forward(&h, "evt", "e1"), h.now())
        .await
        .expect("id");
    let keep = enqueue(&h.store, forward(&h, "other", "e1"), h.now())
        .await
        .expect("id");
    h.advance(120_001);
    let mut deleted = 0;
    for _ in 0..3 {
        deleted += h
            .store
            .retention_once(h.now(), 1000)
            .await
            .expect("retention")
            .tombstones_deleted;
    }
    assert_eq!(deleted, 1);
    assert!(h.store.outbox_item(id).await.expect("read").is_none());
    assert!(h.store.outbox_item(keep).await.expect("read").is_some());
}
