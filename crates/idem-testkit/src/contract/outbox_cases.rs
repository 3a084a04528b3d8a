//! Contract cases of the durable outbox and the secrets store, run against every backend by
//! [`crate::outbox_suite!`] exactly like [`crate::contract_suite!`] runs the ledger cases.
//!
//! They hold every backend to the same outbox rules: items caused by a record write are
//! enqueued by that write (and only by it), a claim leases each item to one holder until the
//! lease runs out — also under many concurrent claimers on separate handles — only the
//! current holder may finish, attempts are counted, retries wait their backoff (and a
//! `Retry-After`), the budget ends in `dead`, and retention deletes a record's items with it.
//! Secrets: versions rotate with a grace period and a value never shows in `Debug`.

use std::collections::HashSet;
use std::sync::Arc;

use idem_core::{
    Class, CompleteRequest, FailErrorInput, FailRequest, LeaseId, Op, State, Timestamp,
};
use idem_core::{
    ForwardOutcome, ForwardReportRequest, ForwardRetry, ForwardStartRequest, IntakeReceiveRequest,
    IntakeReply, Reply,
};
use idem_store::{
    AlertOutcome, AlertPayload, Delivered, ExecCtx, Executed, IntakeUpdate, Jitter, NewIntakeEvent,
    NewOutboxItem, NewSecret, OutboxClaim, OutboxFinish, OutboxItem, OutboxKind, OutboxOutcome,
    OutboxState, ReportRider, RetrySchedule, Rider, Secret, SecretKind, SecretOwner, Store,
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

const LEASE_MS: i64 = 60_000;

/// A forward item of record `k` of the handle's namespace, due now.
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
    let schedule = RetrySchedule {
        max_attempts: 4,
        base_ms: 1_000,
        max_ms: 60_000,
        jitter: Jitter::Full,
    };
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
    let schedule = RetrySchedule {
        max_attempts: 8,
        base_ms: 5_000,
        max_ms: 3_600_000,
        jitter: Jitter::Full,
    };
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

// ================================================================ secrets

pub async fn secrets_rotate_with_a_grace_period_and_never_show_in_debug<B: Backend>(b: Arc<B>) {
    const S1: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const S2: &str = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    const S3: &str = "whsec_c2Vjb25kLXNlY3JldC1mb3ItdGhlLXRlc3Q=";
    let h = H::new(&*b, "ns").await;
    let other = b.open().await;
    let stripe = SecretOwner::new(SecretKind::Source, "stripe");
    let values = |list: &[idem_store::StoredSecret]| {
        list.iter()
            .map(|s| s.value.expose().to_owned())
            .collect::<Vec<_>>()
    };
    assert!(h
        .store
        .secrets(&stripe, h.now())
        .await
        .expect("read")
        .is_empty());
    h.store
        .secret_add(NewSecret::new(stripe.clone(), Secret::new(S1)), h.now())
        .await
        .expect("add");
    h.advance(1_000);
    // Rotation: the new secret signs from now, the old one verifies for 10 more minutes.
    let grace_end = h.now().plus_ms(600_000);
    h.store
        .secret_add(
            NewSecret {
                others_expire_at: Some(grace_end),
                ..NewSecret::new(stripe.clone(), Secret::new(S2))
            },
            h.now(),
        )
        .await
        .expect("rotate");
    let both = other.secrets(&stripe, h.now()).await.expect("read");
    assert_eq!(
        values(&both),
        [S2, S1],
        "newest first, seen by another handle"
    );
    assert_eq!(both[1].expires_at, Some(grace_end));
    assert_eq!(both[0].expires_at, None);
    let shown = format!("{both:?}");
    for s in [S1, S2] {
        assert!(!shown.contains(&s[6..14]), "Debug shows a secret: {shown}");
    }
    assert!(shown.contains("[redacted]"), "{shown}");
    h.clock.advance_ms(599_999);
    assert_eq!(
        values(&h.store.secrets(&stripe, h.now()).await.expect("read")),
        [S2, S1]
    );
    h.advance(1);
    assert_eq!(
        values(&h.store.secrets(&stripe, h.now()).await.expect("read")),
        [S2]
    );

    // Owners are apart: another kind or name of the same text sees nothing of these.
    let alert = SecretOwner::new(SecretKind::Alert, "stripe");
    h.store
        .secret_add(NewSecret::new(alert.clone(), Secret::new(S3)), h.now())
        .await
        .expect("add");
    // Replacement without grace: the others stop at once.
    h.store
        .secret_add(
            NewSecret {
                others_expire_at: Some(h.now()),
                ..NewSecret::new(stripe.clone(), Secret::new(S3))
            },
            h.now(),
        )
        .await
        .expect("replace");
    assert_eq!(
        values(&h.store.secrets(&stripe, h.now()).await.expect("read")),
        [S3]
    );
    assert_eq!(
        values(&h.store.secrets(&alert, h.now()).await.expect("read")),
        [S3]
    );
    // A version with its own expiry.
    let temp = SecretOwner::new(SecretKind::Forward, "stripe");
    h.store
        .secret_add(
            NewSecret {
                expires_at: Some(h.now().plus_ms(5)),
                ..NewSecret::new(temp.clone(), Secret::new(S1))
            },
            h.now(),
        )
        .await
        .expect("add");
    assert_eq!(
        values(&h.store.secrets(&temp, h.now()).await.expect("read")),
        [S1]
    );
    h.advance(5);
    assert!(h
        .store
        .secrets(&temp, h.now())
        .await
        .expect("read")
        .is_empty());

    assert_eq!(h.store.secrets_remove(&stripe).await.expect("remove"), 3);
    assert!(other
        .secrets(&stripe, h.now())
        .await
        .expect("read")
        .is_empty());
    assert_eq!(
        values(&other.secrets(&alert, h.now()).await.expect("read")),
        [S3]
    );
}

/// A webhook delivery of event `id` (`None`: held) of source `src` on record `k`, with its
/// row (body `body`) and, unless held, its forward item riding on the record's creation.
async fn receive(h: &H, k: &str, id: Option<&str>, body: &[u8]) -> Executed {
    let rider = Rider {
        intake: NewIntakeEvent {
            namespace: h.ns.as_str().to_owned(),
            key: k.to_owned(),
            source: "src".into(),
            event_id: id.map(str::to_owned),
            content_type: Some("application/json".into()),
            headers: "{}".into(),
            body: body.to_vec(),
            received_at: h.now(),
            destinations: None,
            delivered_at: None,
        },
        forward: id.map(|_| forward(h, k, "0")),
        deliveries: vec![],
    };
    let op = Op::IntakeReceive(IntakeReceiveRequest {
        source: "src".into(),
        event_id: id.map(str::to_owned),
        delivers: true,
    });
    h.ledger
        .execute_riding(&h.ns, &key(k), op, rider)
        .await
        .unwrap_or_else(|e| panic!("intake receive {k}: {e}"))
}

fn intake_reply(e: &Executed) -> &'static str {
    match &e.reply {
        Ok(Reply::Intake(IntakeReply::Accepted { .. })) => "accepted",
        Ok(Reply::Intake(IntakeReply::Held { .. })) => "held",
        Ok(Reply::Intake(IntakeReply::Duplicate { .. })) => "duplicate",
        other => panic!("not an intake reply: {other:?}"),
    }
}

async fn row_body(h: &H, k: &str) -> Option<Vec<u8>> {
    h.store
        .intake_event(h.ns.as_str(), k)
        .await
        .unwrap_or_else(|e| panic!("intake_event: {e}"))
        .map(|r| r.body.unwrap_or_default())
}

/// The rider (an inbound event's row and forward item) is written by the step that creates
/// the record and by no other: a duplicate stores nothing, a held event no forward item, a
/// key whose record was made otherwise no row. Several fresh keys, so that a backend's fast
/// path (PostgreSQL's speculative insert once the namespace is cached) is taken as well as
/// its normal one.
pub async fn a_rider_is_stored_exactly_with_the_record_it_rides_on<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "hooks").await;
    for i in 0..4 {
        let k = format!("src:evt_{i}");
        let first = receive(&h, &k, Some(&format!("evt_{i}")), b"first").await;
        assert_eq!(
            (intake_reply(&first), first.rider_stored),
            ("accepted", true),
            "{k}"
        );
        assert_eq!(h.rec(&key(&k)).await.state, State::Prepared);
        let again = receive(&h, &k, Some(&format!("evt_{i}")), b"second").await;
        assert_eq!(
            (intake_reply(&again), again.rider_stored),
            ("duplicate", false),
            "{k}"
        );
        assert_eq!(
            row_body(&h, &k).await.as_deref(),
            Some(&b"first"[..]),
            "{k}"
        );
    }
    // Exactly one forward item per event, none for the duplicates.
    let items = claim(&h, OutboxKind::Forward, 100).await;
    let mut keys: Vec<&str> = items.iter().map(|i| i.key.as_str()).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["src:evt_0", "src:evt_1", "src:evt_2", "src:evt_3"]);

    // Held (no event id): the row is stored, the record goes to review, nothing is forwarded.
    let held = receive(&h, "src:sha256:ab", None, b"held").await;
    assert_eq!((intake_reply(&held), held.rider_stored), ("held", true));
    assert_eq!(h.rec(&key("src:sha256:ab")).await.state, State::NeedsReview);
    assert_eq!(
        row_body(&h, "src:sha256:ab").await.as_deref(),
        Some(&b"held"[..])
    );
    assert!(claim(&h, OutboxKind::Forward, 100).await.is_empty());

    // A record made by another operation: the delivery finds it and stores no row.
    let taken = key("src:evt_taken");
    ok_reply(&h.exec(&taken, Op::Claim(Default::default()), None).await);
    let late = receive(&h, "src:evt_taken", Some("evt_taken"), b"late").await;
    assert_eq!(
        (intake_reply(&late), late.rider_stored),
        ("duplicate", false)
    );
    assert_eq!(row_body(&h, "src:evt_taken").await, None);
    assert!(claim(&h, OutboxKind::Forward, 100).await.is_empty());
}

/// Many first deliveries of one event at once, on separate handles: one stores the row and
/// its forward item, every other one is a duplicate.
pub async fn concurrent_first_deliveries_store_one_rider<B: Backend>(b: Arc<B>) {
    const N: usize = 12;
    let warm = H::new(&*b, "hooks").await;
    // Cache the namespace on PostgreSQL handles, so that the fast path races too.
    receive(&warm, "src:warm", Some("warm"), b"w").await;
    let barrier = Arc::new(Barrier::new(N));
    let mut tasks = Vec::new();
    for i in 0..N {
        let h = H::on(b.open().await, "hooks", warm.clock.clone());
        receive(&h, &format!("src:warm{i}"), Some("warm"), b"w").await;
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let e = receive(
                &h,
                "src:evt_race",
                Some("evt_race"),
                format!("{i}").as_bytes(),
            )
            .await;
            (intake_reply(&e), e.rider_stored)
        }));
    }
    let mut got = Vec::new();
    for t in tasks {
        got.push(t.await.expect("task"));
    }
    let stored = got.iter().filter(|(_, s)| *s).count();
    let accepted = got.iter().filter(|(r, _)| *r == "accepted").count();
    assert_eq!((stored, accepted), (1, 1), "{got:?}");
    assert!(row_body(&warm, "src:evt_race").await.is_some());
    let items = claim(&warm, OutboxKind::Forward, 100).await;
    assert_eq!(
        items.iter().filter(|i| i.key == "src:evt_race").count(),
        1,
        "one forward item"
    );
}

/// Starts the forward attempt of `k` on `h`: its token.
async fn forward_start(h: &H, k: &str) -> String {
    let e = h
        .exec(
            &key(k),
            Op::ForwardStart(ForwardStartRequest { lease_ms: 30_000 }),
            None,
        )
        .await;
    match e.reply {
        Ok(Reply::Intake(IntakeReply::Started { token, .. })) => token,
        other => panic!("forward start of {k}: {other:?}"),
    }
}

/// Reports the attempt `token` of `k` on `h` with `outcome`, the attempt and the finish of
/// `item` riding on it.
async fn forward_report(
    h: &H,
    k: &str,
    token: String,
    outcome: ForwardOutcome,
    item: &OutboxItem,
    attempt: serde_json::Value,
) -> Executed {
    let delivered = match outcome {
        ForwardOutcome::Delivered { .. } => Delivered::At(h.now()),
        ForwardOutcome::Failed { .. } => Delivered::Keep,
    };
    let op = Op::ForwardReport(ForwardReportRequest {
        token,
        outcome,
        retry: ForwardRetry {
            max_attempts: 2,
            base_ms: 1_000,
            max_ms: 10_000,
            window_ms: DAY_MS,
        },
    });
    let rider = ReportRider {
        update: IntakeUpdate {
            namespace: h.ns.as_str().to_owned(),
            key: k.to_owned(),
            attempt: Some(attempt.to_string()),
            delivered,
        },
        item: item.id,
        lease: item
            .lease
            .clone()
            .expect("a claimed item carries its lease"),
    };
    h.ledger
        .execute_reporting(&h.ns, &key(k), op, rider)
        .await
        .unwrap_or_else(|e| panic!("forward report {k}: {e}"))
}

fn failed_with(status: u16) -> ForwardOutcome {
    ForwardOutcome::Failed {
        status: Some(status),
        category: "http".into(),
        message: format!("the receiver answered HTTP {status}"),
        retry_after_ms: None,
        duration_ms: 3,
    }
}

/// A forward report's rider (the attempt on the event's row, the finish of the item that
/// carried the delivery) is written by the step that updates the record and by no other, and
/// the item's outcome is the one the record's new state implies: delivered → `done`, a retry
/// → `pending` again at the record's `not_before`, the dead letter → `dead` (with its alert
/// queued in the same step). A report that no longer holds the lease writes nothing. The
/// reports run on the handle that started the attempts (PostgreSQL's cached-record
/// statement) and on a fresh handle (its read and transaction).
pub async fn a_report_rider_moves_with_the_record_it_rides_on<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "hooks").await;
    h.patch(json!({"alert_url": "http://127.0.0.1:9/hook"}))
        .await;
    let fresh = H::on(b.open().await, "hooks", h.clock.clone());
    let row = |k: &'static str| {
        let h = &h;
        async move {
            h.store
                .intake_event("hooks", k)
                .await
                .expect("intake_event")
                .expect("row")
        }
    };
    for k in [
        "src:evt_ok",
        "src:evt_retry",
        "src:evt_dead",
        "src:evt_late",
    ] {
        let id = k.trim_start_matches("src:");
        assert!(receive(&h, k, Some(id), b"{}").await.rider_stored);
    }
    let items = claim(&h, OutboxKind::Forward, 10).await;
    let held = |k: &str| {
        items
            .iter()
            .find(|i| i.key == k)
            .unwrap_or_else(|| panic!("no item for {k}"))
    };

    // Delivered, on the handle that started it.
    let token = forward_start(&h, "src:evt_ok").await;
    let a1 = json!({"attempt": 1, "status": 200, "error": null});
    let ok = forward_report(
        &h,
        "src:evt_ok",
        token,
        ForwardOutcome::Delivered {
            status: 200,
            duration_ms: 3,
        },
        held("src:evt_ok"),
        a1.clone(),
    )
    .await;
    assert!(ok.rider_stored, "{:?}", ok.reply);
    assert_eq!(h.rec(&key("src:evt_ok")).await.state, State::Completed);
    let r = row("src:evt_ok").await;
    assert_eq!(r.attempts, format!("[{a1}]"));
    assert_eq!(r.delivered_at, Some(h.now()));
    let it = item(&h, held("src:evt_ok").id).await;
    assert_eq!((it.state, it.attempts), (OutboxState::Done, 1));

    // A retry, reported on a fresh handle: the item is due again at the record's not_before.
    let token = forward_start(&h, "src:evt_retry").await;
    let a2 = json!({"attempt": 1, "status": 503, "error": {"category": "http", "message": "m"}});
    let retry = forward_report(
        &fresh,
        "src:evt_retry",
        token,
        failed_with(503),
        held("src:evt_retry"),
        a2.clone(),
    )
    .await;
    assert!(retry.rider_stored, "{:?}", retry.reply);
    let rec = h.rec(&key("src:evt_retry")).await;
    assert_eq!(rec.state, State::FailedRetryable);
    let it = item(&h, held("src:evt_retry").id).await;
    assert_eq!(
        (
            it.state,
            it.attempts,
            Some(it.due_at),
            it.last_error.as_deref()
        ),
        (OutboxState::Pending, 1, rec.not_before, Some("http"))
    );
    let r = row("src:evt_retry").await;
    assert_eq!((r.attempts, r.delivered_at), (format!("[{a2}]"), None));

    // 410 Gone: the dead letter, in review with its alert, the item dead.
    let token = forward_start(&h, "src:evt_dead").await;
    let a3 = json!({"attempt": 1, "status": 410, "error": {"category": "http", "message": "g"}});
    let dead = forward_report(
        &h,
        "src:evt_dead",
        token,
        failed_with(410),
        held("src:evt_dead"),
        a3.clone(),
    )
    .await;
    assert!(dead.rider_stored, "{:?}", dead.reply);
    assert_eq!(dead.alerts_queued, 1);
    assert_eq!(h.rec(&key("src:evt_dead")).await.state, State::NeedsReview);
    let it = item(&h, held("src:evt_dead").id).await;
    assert_eq!((it.state, it.attempts), (OutboxState::Dead, 1));
    assert_eq!(row("src:evt_dead").await.attempts, format!("[{a3}]"));

    // A report whose lease is gone: refused, nothing rides.
    let token = forward_start(&h, "src:evt_late").await;
    let made_up = token.replace(|c: char| c.is_ascii_hexdigit(), "0");
    let late = forward_report(
        &h,
        "src:evt_late",
        made_up,
        failed_with(500),
        held("src:evt_late"),
        json!({"attempt": 1}),
    )
    .await;
    assert!(late.reply.is_err(), "{:?}", late.reply);
    assert!(!late.rider_stored);
    assert_eq!(row("src:evt_late").await.attempts, "[]");
    let it = item(&h, held("src:evt_late").id).await;
    assert_eq!((it.state, it.attempts), (OutboxState::Leased, 0));
    assert_eq!(h.rec(&key("src:evt_late")).await.state, State::Prepared);
}

/// Attempts are appended in order, exactly as `append_attempt` would write the array, and
/// `delivered_at` is set, kept and cleared; an update of a row that does not exist changes
/// nothing.
pub async fn intake_updates_append_attempts_and_set_delivered_at<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "hooks").await;
    receive(&h, "src:evt_1", Some("evt_1"), b"{}").await;
    let update = |attempt: Option<serde_json::Value>, delivered| IntakeUpdate {
        namespace: "hooks".into(),
        key: "src:evt_1".into(),
        attempt: attempt.map(|a| a.to_string()),
        delivered,
    };
    let row = || async {
        h.store
            .intake_event("hooks", "src:evt_1")
            .await
            .expect("intake_event")
            .expect("row")
    };
    let attempts = [
        json!({"attempt": 1, "status": 500, "error": {"category": "http", "message": "a \"b\" ,]"}}),
        json!({"attempt": 2, "status": null, "error": {"category": "timeout", "message": "ü"}}),
        json!({"attempt": 3, "status": 200, "error": null, "duration_ms": 7}),
    ];
    let mut expected = "[]".to_owned();
    for (i, a) in attempts.iter().enumerate() {
        let delivered = if i == 2 {
            Delivered::At(Timestamp(h.now().0 + 5))
        } else {
            Delivered::Keep
        };
        h.store
            .intake_update(update(Some(a.clone()), delivered))
            .await
            .expect("intake_update");
        expected = idem_store::intake::append_attempt(&expected, &a.to_string());
        let got = row().await;
        assert_eq!(got.attempts, expected, "after attempt {}", i + 1);
        let parsed: serde_json::Value = serde_json::from_str(&got.attempts).expect("json");
        assert_eq!(parsed.as_array().map(Vec::len), Some(i + 1));
    }
    assert_eq!(row().await.delivered_at, Some(Timestamp(h.now().0 + 5)));
    // Nothing to do changes nothing; `Clear` clears.
    h.store
        .intake_update(update(None, Delivered::Keep))
        .await
        .expect("noop");
    assert_eq!(row().await.attempts, expected);
    h.store
        .intake_update(update(None, Delivered::Clear))
        .await
        .expect("clear");
    let got = row().await;
    assert_eq!((got.attempts, got.delivered_at), (expected, None));
    // A row that does not exist: no error, no row.
    h.store
        .intake_update(IntakeUpdate {
            key: "src:none".into(),
            ..update(Some(json!({"attempt": 1})), Delivered::At(h.now()))
        })
        .await
        .expect("missing row");
    assert!(h
        .store
        .intake_event("hooks", "src:none")
        .await
        .expect("read")
        .is_none());
}
