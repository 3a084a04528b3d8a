//! The contract cases. Each is `pub async fn <behaviour><B: Backend>(b: Arc<B>)` and gets a
//! fresh, empty database; [`crate::contract_suite!`] turns each into a named test.
//!
//! Cases compare full [`Record`]s read back from the store with the ones the operation
//! answered, so a backend that loses or mangles any field (bookkeeping included) fails here.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use idem_core::{
    ClaimOutcome, ClaimRequest, Class, CompleteRequest, EffectReportRequest, EffectSentRequest,
    EventType, FailErrorInput, FailRequest, Fingerprint, HeartbeatRequest, LeaseExpiry, Op,
    OpError, Policy, PolicyError, PrepareRequest, Record, Reply, RequestSummary, ResolveAction,
    ResolveRequest, State, TestClock, Timestamp, Verdict,
};
use idem_store::{
    hash_secret, AlertOutcome, ListQuery, NamespaceChange, NewApiToken, Role, Store, StoreError,
};
use serde_json::{json, Value};
use tokio::sync::Barrier;

use super::{key, ns, ok_reply, Backend, DAY_MS, H, T0};

// ---------------------------------------------------------------- request helpers

fn fp(v: &Value) -> Fingerprint {
    Fingerprint::of_payload(v).expect("fingerprint")
}

fn with_fp(v: &Value) -> ClaimRequest {
    ClaimRequest {
        fingerprint: Some(fp(v)),
        ..Default::default()
    }
}

fn owned(owner: &str, corr: &str) -> ClaimRequest {
    ClaimRequest {
        owner: Some(owner.into()),
        correlation_id: Some(corr.into()),
        ..Default::default()
    }
}

fn prepare(token: &str, payload: Value, approval: bool) -> Op {
    Op::Prepare(PrepareRequest {
        token: token.into(),
        payload,
        approval_required: approval,
    })
}

fn heartbeat(token: &str, lease_ms: Option<i64>) -> Op {
    Op::Heartbeat(HeartbeatRequest {
        token: token.into(),
        lease_ms,
    })
}

fn complete(token: &str, result: Option<Value>, external_ref: Option<&str>) -> Op {
    Op::Complete(CompleteRequest {
        cost: None,
        token: token.into(),
        result,
        external_ref: external_ref.map(str::to_owned),
    })
}

fn fail(token: &str, kind: Class) -> Op {
    Op::Fail(FailRequest {
        cost: None,
        token: token.into(),
        kind: Some(kind),
        http_status: None,
        retry_after_ms: None,
        sent: None,
        error: Some(FailErrorInput {
            category: "http".into(),
            message: "upstream said no".into(),
        }),
    })
}

fn resolve(action: ResolveAction, note: &str) -> Op {
    Op::Resolve(ResolveRequest {
        action,
        external_ref: None,
        result: None,
        note: note.into(),
    })
}

fn result_v() -> Value {
    json!({"charge": "ch_1", "amount": 100})
}

fn record_of(reply: &Reply) -> Record {
    match reply {
        Reply::Record(r) => r.clone(),
        Reply::Fail(f) => f.record.clone(),
        Reply::Claim(c) => c.record.clone().expect("claim reply with a record"),
        Reply::Swept { .. } => panic!("sweep reply has no record"),
        Reply::Intake(i) => match i {
            idem_core::IntakeReply::Accepted { record }
            | idem_core::IntakeReply::Duplicate { record }
            | idem_core::IntakeReply::Held { record }
            | idem_core::IntakeReply::Started { record, .. } => (**record).clone(),
            other => panic!("intake reply without a record: {other:?}"),
        },
    }
}

/// Runs `op` and expects it accepted; returns the record it answered with.
async fn ok(h: &H, k: &idem_core::Key, op: Op) -> Record {
    let e = h.exec(k, op, Some("operator:alice")).await;
    record_of(ok_reply(&e))
}

/// Runs `op` and expects a refusal.
async fn refused(h: &H, k: &idem_core::Key, op: Op) -> OpError {
    let e = h.exec(k, op, None).await;
    match e.reply {
        Err(err) => err,
        Ok(r) => panic!("expected a refusal on {k}, got {r:?}"),
    }
}

fn is_invalid(e: &OpError) -> bool {
    matches!(e, OpError::InvalidTransition { .. })
}

fn kinds(events: &[idem_core::Event]) -> Vec<EventType> {
    events
        .iter()
        .map(|e| e.kind)
        .filter(|k| *k != EventType::Heartbeat)
        .collect()
}

fn count(events: &[idem_core::Event], kind: EventType) -> usize {
    events.iter().filter(|e| e.kind == kind).count()
}

/// Drives a fresh key into `state` the ordinary way; returns the holder's token.
async fn into_state(h: &H, k: &idem_core::Key, state: State, req: ClaimRequest) -> String {
    let c = h.claim_with(k, req).await;
    assert_eq!(c.outcome, ClaimOutcome::Acquired, "{k}: {c:?}");
    let tok = c.token.expect("token").secret();
    match state {
        State::Processing => {}
        State::Prepared => {
            ok(h, k, prepare(&tok, json!({"draft": "hello"}), false)).await;
        }
        State::AwaitingApproval => {
            ok(h, k, prepare(&tok, json!({"draft": "hello"}), true)).await;
        }
        State::Completed => {
            ok(h, k, complete(&tok, Some(result_v()), Some("ch_1"))).await;
        }
        State::FailedRetryable => {
            ok(h, k, fail(&tok, Class::Retryable)).await;
        }
        State::FailedPermanent => {
            ok(h, k, fail(&tok, Class::Permanent)).await;
        }
        State::NeedsReview => {
            ok(h, k, fail(&tok, Class::Ambiguous)).await;
        }
    }
    assert_eq!(h.rec(k).await.state, state, "{k}");
    tok
}

async fn sweep_all(store: &Arc<dyn Store>, now: Timestamp) -> idem_store::SweepReport {
    store
        .sweep_once(now, 1000)
        .await
        .unwrap_or_else(|e| panic!("sweep_once: {e}"))
}

async fn retention_all(store: &Arc<dyn Store>, now: Timestamp) -> idem_store::RetentionReport {
    store
        .retention_once(now, 1000)
        .await
        .unwrap_or_else(|e| panic!("retention_once: {e}"))
}

// ================================================================ the claim table

pub async fn claim_of_unseen_key_acquires_and_is_durable<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "payments").await;
    let k = key("evt_123:charge");
    assert!(h.store.get(&h.ns, &k).await.expect("get").is_none());
    let c = h.claim_with(&k, owned("exec-1", "corr-1")).await;
    assert_eq!(c.outcome, ClaimOutcome::Acquired);
    assert_eq!(c.resumed, Some(false));
    assert!(!c.reclaimed);
    let token = c.token.expect("token");
    assert_eq!(token.attempt, 1);
    let rec = c.record.expect("record");
    assert_eq!(rec.state, State::Processing);
    assert_eq!(rec.attempt, 1);
    assert_eq!(rec.owner.as_deref(), Some("exec-1"));
    assert_eq!(rec.correlation_id.as_deref(), Some("corr-1"));
    assert_eq!(rec.lease_expires_at, Some(Timestamp(T0 + 30_000)));
    assert_eq!(rec.created_at, Timestamp(T0));
    assert_eq!(rec.fingerprint, None);
    let got = h.get(&k).await;
    assert_eq!(
        got.record, rec,
        "the store keeps exactly the record it answered with"
    );
    assert_eq!(kinds(&got.events), [EventType::Acquired]);
    let e = &got.events[0];
    assert_eq!((e.from_state, e.to_state), (None, Some(State::Processing)));
    assert_eq!(e.attempt, 1);
    assert_eq!(e.owner.as_deref(), Some("exec-1"));
    assert_eq!(e.correlation_id.as_deref(), Some("corr-1"));
    assert_eq!(e.at, Timestamp(T0));
    // another handle sees it at once
    let h2 = H::new(&*b, "payments").await;
    assert_eq!(h2.rec(&k).await, rec);
    assert_eq!(h2.claim(&k).await.outcome, ClaimOutcome::InFlight);
    // keys are unique per namespace, not globally
    let other = H::on(h.store.clone(), "payments-eu", h.clock.clone());
    assert_eq!(other.claim(&k).await.outcome, ClaimOutcome::Acquired);
}

pub async fn claim_of_failed_retryable_backs_off_then_resumes<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    let k = key("k");
    let tok = h.acquire(&k).await;
    let f = ok(&h, &k, fail(&tok, Class::Retryable)).await;
    assert_eq!(f.state, State::FailedRetryable);
    // base 1000, first attempt, jitter 0.5
    assert_eq!(f.not_before, Some(Timestamp(T0 + 500)));
    assert_eq!(h.rec(&k).await, f);
    h.advance(100);
    let c = h.claim(&k).await;
    assert_eq!(c.outcome, ClaimOutcome::Backoff);
    assert_eq!(c.retry_after_ms, Some(400));
    assert_eq!(c.token, None);
    assert_eq!(h.rec(&k).await, f, "backoff writes nothing");
    h.advance(400);
    let c = h.claim(&k).await;
    assert_eq!(c.outcome, ClaimOutcome::Acquired);
    assert_eq!(c.resumed, Some(true));
    assert!(!c.reclaimed);
    assert_eq!(c.token.expect("token").attempt, 2);
    let rec = c.record.expect("record");
    assert_eq!(rec.state, State::Processing);
    assert_eq!(rec.attempt, 2);
    assert_eq!(rec.not_before, None);
    let got = h.get(&k).await;
    assert_eq!(got.record, rec);
    assert_eq!(
        kinds(&got.events),
        [EventType::Acquired, EventType::Failed, EventType::Resumed]
    );
    assert_eq!(got.events[2].attempt, 2);
}

pub async fn claim_after_lease_expiry_reclaims_with_a_new_token<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    let k = key("k");
    let old = h.acquire(&k).await;
    h.advance(29_999);
    assert_eq!(h.claim(&k).await.outcome, ClaimOutcome::InFlight);
    h.advance(1);
    let c = h.claim(&k).await;
    assert_eq!(c.outcome, ClaimOutcome::Acquired);
    assert_eq!(c.resumed, Some(true));
    assert!(c.reclaimed);
    let new = c.token.expect("token").secret();
    assert_ne!(new, old);
    let rec = c.record.expect("record");
    assert_eq!(rec.attempt, 2);
    assert_eq!(rec.lease_expires_at, Some(Timestamp(T0 + 60_000)));
    assert_eq!(h.rec(&k).await, rec);
    let events = h.get(&k).await.events;
    assert_eq!(events.last().map(|e| e.kind), Some(EventType::Resumed));
}

pub async fn claim_after_lease_expiry_under_review_moves_to_needs_review<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "money").await;
    h.patch(json!({"lease_expiry": "review"})).await;
    let k = key("k");
    h.acquire(&k).await;
    h.advance(30_000);
    let c = h.claim(&k).await;
    assert_eq!(c.outcome, ClaimOutcome::NeedsReview);
    assert_eq!(c.token, None);
    let rec = c.record.expect("record");
    assert_eq!(rec.state, State::NeedsReview);
    assert_eq!(rec.attempt, 1);
    assert_eq!(h.rec(&k).await, rec);
    let events = h.get(&k).await.events;
    let last = events.last().expect("event");
    assert_eq!(last.kind, EventType::MovedToReview);
    assert_eq!(
        (last.from_state, last.to_state),
        (Some(State::Processing), Some(State::NeedsReview))
    );
    assert_eq!(h.claim(&k).await.outcome, ClaimOutcome::NeedsReview);
}

pub async fn per_claim_lease_expiry_override_is_kept_on_the_record<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await; // namespace default: reclaim
    let k1 = key("override-review");
    h.claim_with(
        &k1,
        ClaimRequest {
            lease_expiry: Some(LeaseExpiry::Review),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(h.rec(&k1).await.lease_expiry, LeaseExpiry::Review);
    let review = H::on(b.open().await, "ns-review", h.clock.clone());
    review.patch(json!({"lease_expiry": "review"})).await;
    let k2 = key("override-reclaim");
    review
        .claim_with(
            &k2,
            ClaimRequest {
                lease_expiry: Some(LeaseExpiry::Reclaim),
                ..Default::default()
            },
        )
        .await;
    h.advance(30_000); // the clock is shared by both handles
    assert_eq!(h.claim(&k1).await.outcome, ClaimOutcome::NeedsReview);
    let c = review.claim(&k2).await;
    assert_eq!(c.outcome, ClaimOutcome::Acquired);
    assert!(c.reclaimed);
}

pub async fn claim_of_expired_prepared_resumes_with_the_saved_payload<B: Backend>(b: Arc<B>) {
    for (ns_name, patch) in [
        ("drafts", json!({})),
        ("drafts-review", json!({"lease_expiry": "review"})),
    ] {
        let h = H::new(&*b, ns_name).await;
        h.patch(patch).await;
        let k = key("order-847:draft-followup:v1");
        let tok = h.acquire(&k).await;
        let payload = json!({"subject": "Your order", "body": "Dear Ann", "n": 3});
        let rec = ok(&h, &k, prepare(&tok, payload.clone(), false)).await;
        assert_eq!(rec.state, State::Prepared);
        assert_eq!(h.rec(&k).await, rec);
        h.advance(30_000);
        let c = h.claim(&k).await;
        assert_eq!(c.outcome, ClaimOutcome::Acquired, "{ns_name}");
        assert_eq!(c.resumed, Some(true));
        assert_eq!(c.token.expect("token").attempt, 2);
        let rec = c.record.expect("record");
        assert_eq!(rec.state, State::Prepared);
        assert_eq!(rec.prepared_payload, Some(payload));
        assert_eq!(h.rec(&k).await, rec);
    }
}

pub async fn claim_of_approved_prepared_resumes_and_increments_attempt<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    let k = key("k");
    let tok = h.acquire(&k).await;
    let payload = json!({"draft": "Hello"});
    let rec = ok(&h, &k, prepare(&tok, payload.clone(), true)).await;
    assert_eq!(rec.state, State::AwaitingApproval);
    assert_eq!(rec.lease_expires_at, None);
    h.advance(DAY_MS / 2);
    assert_eq!(h.claim(&k).await.outcome, ClaimOutcome::AwaitingApproval);
    let rec = h
        .ledger
        .approve(&h.ns, &k, Some("ok".into()), Some("alice".into()))
        .await
        .expect("approve");
    assert_eq!(rec.state, State::Prepared);
    assert_eq!(rec.attempt, 1);
    assert_eq!(h.rec(&k).await, rec);
    let c = h.claim(&k).await;
    assert_eq!(c.outcome, ClaimOutcome::Acquired);
    assert_eq!(c.resumed, Some(true));
    assert_eq!(c.token.expect("token").attempt, 2);
    let rec = c.record.expect("record");
    assert_eq!(rec.prepared_payload, Some(payload));
    assert_eq!(h.rec(&k).await, rec);
    // reject on another key
    let k2 = key("k2");
    let tok = h.acquire(&k2).await;
    ok(&h, &k2, prepare(&tok, json!(1), true)).await;
    let rec = h
        .ledger
        .reject(&h.ns, &k2, Some("no".into()), Some("bob".into()))
        .await
        .expect("reject");
    assert_eq!(rec.state, State::FailedPermanent);
    assert_eq!(h.claim(&k2).await.outcome, ClaimOutcome::FailedPermanent);
}

pub async fn second_claim_of_completed_key_replays_result<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    let k = key("evt_1:charge");
    let payload = json!({"amount": 100, "currency": "EUR"});
    let tok = h
        .claim_with(&k, with_fp(&payload))
        .await
        .token
        .expect("token")
        .secret();
    let done = ok(&h, &k, complete(&tok, Some(result_v()), Some("ch_1"))).await;
    let c = h
        .claim_with(
            &k,
            ClaimRequest {
                fingerprint: Some(fp(&payload)),
                owner: Some("retry-exec".into()),
                correlation_id: Some("corr-9".into()),
                ..Default::default()
            },
        )
        .await;
    assert_eq!(c.outcome, ClaimOutcome::Completed);
    assert!(c.outcome.is_replay());
    assert_eq!(c.token, None);
    assert_eq!(c.resumed, None);
    let rec = c.record.expect("record");
    assert_eq!(rec.result, Some(result_v()));
    assert_eq!(rec.external_ref.as_deref(), Some("ch_1"));
    let got = h.get(&k).await;
    assert_eq!(got.record, done, "a replay writes no record");
    let last = got.events.last().expect("event");
    assert_eq!(last.kind, EventType::DuplicateHit);
    assert_eq!(last.owner.as_deref(), Some("retry-exec"));
    assert_eq!(last.correlation_id.as_deref(), Some("corr-9"));
}

/// JSON text with members out of alphabetical order, nested objects and arrays of objects too.
fn unsorted(text: &str) -> Value {
    serde_json::from_str(text).expect("test json")
}

/// The member order a stored JSON value is read back with, as its compact text.
fn text_of(v: Option<&Value>) -> String {
    v.map(|v| serde_json::to_string(v).expect("json"))
        .unwrap_or_default()
}

/// What is stored is what is replayed: a completion's result, a prepared payload, an effect's
/// response and an operator's result come back with their members in the order they were
/// written (nested ones too), from the store's replies, from a read and from another handle;
/// never sorted. The fingerprint is the same whatever the order of the payload's members.
pub async fn stored_json_keeps_its_member_order<B: Backend>(b: Arc<B>) {
    const RESULT: &str =
        r#"{"charge_id":"ch_1","amount_cents":4200,"meta":{"z":[{"y":1,"x":2}],"a":null}}"#;
    const PAYLOAD: &str = r#"{"subject":"Your order","body":{"to":"ann","cc":[]},"n":3}"#;
    const RESPONSE: &str = r#"{"status":201,"headers":{"content-type":"application/json"},"body":{"z":1,"a":2,"m":{"y":true,"b":false}},"truncated":false}"#;
    const FOUND: &str = r#"{"psp":"stripe","found":true}"#;
    let h = H::new(&*b, "ns").await;
    let other = H::on(b.open().await, "ns", h.clock.clone());
    // completed, then replayed to a claim with the payload's members in another order
    let k = key("evt_1:charge");
    let tok = h
        .claim_with(&k, with_fp(&unsorted(r#"{"b":2,"a":1}"#)))
        .await
        .token
        .expect("token")
        .secret();
    let done = ok(&h, &k, complete(&tok, Some(unsorted(RESULT)), None)).await;
    assert_eq!(text_of(done.result.as_ref()), RESULT);
    let c = h
        .claim_with(&k, with_fp(&unsorted(r#"{"a":1,"b":2}"#)))
        .await;
    assert_eq!(c.outcome, ClaimOutcome::Completed);
    let replayed = c.record.expect("record");
    assert_eq!(text_of(replayed.result.as_ref()), RESULT);
    // a prepared payload, and the claim that resumes it
    let kp = key("order-847:draft");
    let tok = h.acquire(&kp).await;
    ok(&h, &kp, prepare(&tok, unsorted(PAYLOAD), false)).await;
    h.advance(30_000);
    let c = h.claim(&kp).await;
    assert_eq!(c.resumed, Some(true));
    let resumed = c.record.expect("record");
    assert_eq!(text_of(resumed.prepared_payload.as_ref()), PAYLOAD);
    // an effect's response kept as the result, performed and permanent
    let mut effects = Vec::new();
    for (name, verdict, want) in [
        ("eff:performed", Verdict::Performed, State::Completed),
        ("eff:permanent", Verdict::Permanent, State::FailedPermanent),
    ] {
        let ke = key(name);
        let tok = h.acquire(&ke).await;
        let request = RequestSummary {
            method: "POST".into(),
            url: "http://127.0.0.1:9/charges".into(),
            idempotency_header: Some("Idempotency-Key".into()),
        };
        ok(
            &h,
            &ke,
            Op::EffectSent(EffectSentRequest {
                token: tok.clone(),
                request,
            }),
        )
        .await;
        let report = EffectReportRequest {
            token: tok,
            verdict,
            response: Some(unsorted(RESPONSE)),
            category: "http".into(),
            message: "answered".into(),
            http_status: Some(201),
            sent: true,
            reconciled: None,
            cost: None,
        };
        let rec = ok(&h, &ke, Op::EffectReport(report)).await;
        assert_eq!(rec.state, want, "{name}");
        assert_eq!(text_of(rec.result.as_ref()), RESPONSE, "{name}");
        effects.push(ke);
    }
    // an operator's result
    let kr = key("reviewed");
    into_state(&h, &kr, State::NeedsReview, ClaimRequest::default()).await;
    let resolved = h
        .exec(
            &kr,
            Op::Resolve(ResolveRequest {
                action: ResolveAction::Completed,
                external_ref: None,
                result: Some(unsorted(FOUND)),
                note: "found it".into(),
            }),
            Some("operator:alice"),
        )
        .await;
    assert_eq!(
        text_of(record_of(ok_reply(&resolved)).result.as_ref()),
        FOUND
    );
    // read back, on this handle and on another one, one by one and listed
    for reader in [&h, &other] {
        assert_eq!(text_of(reader.rec(&k).await.result.as_ref()), RESULT);
        assert_eq!(
            text_of(reader.rec(&kp).await.prepared_payload.as_ref()),
            PAYLOAD
        );
        for ke in &effects {
            assert_eq!(text_of(reader.rec(ke).await.result.as_ref()), RESPONSE);
        }
        assert_eq!(text_of(reader.rec(&kr).await.result.as_ref()), FOUND);
        let page = reader
            .store
            .list(
                &reader.ns,
                &ListQuery {
                    limit: 100,
                    ..Default::default()
                },
            )
            .await
            .expect("list");
        assert_eq!(page.items.len(), 5);
        for r in &page.items {
            let want = match r.key.as_str() {
                "evt_1:charge" => RESULT,
                "eff:performed" | "eff:permanent" => RESPONSE,
                "reviewed" => FOUND,
                _ => "",
            };
            assert_eq!(text_of(r.result.as_ref()), want, "{}", r.key);
        }
    }
}

pub async fn claim_of_failed_permanent_replays_the_stored_error<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    let k = key("k");
    let tok = h.acquire(&k).await;
    let e = h
        .exec(
            &k,
            Op::Fail(FailRequest {
                cost: None,
                token: tok,
                kind: None,
                http_status: Some(422),
                retry_after_ms: None,
                sent: Some(true),
                error: Some(FailErrorInput {
                    category: "validation".into(),
                    message: "email invalid\nline 2".into(),
                }),
            }),
            None,
        )
        .await;
    let Ok(Reply::Fail(f)) = e.reply else {
        panic!("fail reply: {:?}", e.reply)
    };
    assert_eq!(f.class, Class::Permanent);
    assert_eq!(f.record.state, State::FailedPermanent);
    let c = h.claim(&k).await;
    assert_eq!(c.outcome, ClaimOutcome::FailedPermanent);
    let err = c.record.expect("record").last_error.expect("last_error");
    assert_eq!(err.category, "validation");
    assert_eq!(err.message, "email invalid line 2");
    assert_eq!(err.http_status, Some(422));
    assert_eq!(
        h.get(&k).await.events.last().map(|e| e.kind),
        Some(EventType::DuplicateHit)
    );
}

pub async fn different_fingerprint_conflicts_in_every_state<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    let stored = json!({"amount": 100});
    let other = json!({"amount": 101});
    for state in State::ALL {
        let k = key(&format!("k-{}", state.as_str()));
        into_state(&h, &k, state, with_fp(&stored)).await;
    }
    h.advance(DAY_MS); // leases and backoffs over: conflict still beats every state
    for state in State::ALL {
        let k = key(&format!("k-{}", state.as_str()));
        let before = h.get(&k).await;
        let c = h
            .claim_with(
                &k,
                ClaimRequest {
                    fingerprint: Some(fp(&other)),
                    owner: Some("intruder".into()),
                    ..Default::default()
                },
            )
            .await;
        assert_eq!(c.outcome, ClaimOutcome::Conflict, "{state:?}");
        assert_eq!(c.token, None);
        let after = h.get(&k).await;
        assert_eq!(
            after.record, before.record,
            "{state:?}: conflict writes no record"
        );
        assert_eq!(after.events.len(), before.events.len() + 1);
        let e = after.events.last().expect("event");
        assert_eq!(e.kind, EventType::Conflict, "{state:?}");
        assert_eq!(e.owner.as_deref(), Some("intruder"));
    }
}

pub async fn jcs_equal_payloads_do_not_conflict<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    let k = key("k");
    let a: Value = serde_json::from_str(r#"{"amount":100,"items":[1,2],"to":{"y":true,"x":null}}"#)
        .expect("json");
    let same: Value =
        serde_json::from_str(r#"{ "to": {"x": null, "y": true}, "items": [1, 2], "amount": 1e2 }"#)
            .expect("json");
    let tok = h
        .claim_with(&k, with_fp(&a))
        .await
        .token
        .expect("token")
        .secret();
    assert_eq!(
        h.rec(&k).await.fingerprint.map(|f| f.as_str().to_owned()),
        Some(fp(&a).as_str().to_owned())
    );
    assert_eq!(
        h.claim_with(&k, with_fp(&same)).await.outcome,
        ClaimOutcome::InFlight
    );
    ok(&h, &k, complete(&tok, None, None)).await;
    assert_eq!(
        h.claim_with(&k, with_fp(&same)).await.outcome,
        ClaimOutcome::Completed
    );
    let c = h.claim_with(&k, with_fp(&json!({"amount": 100}))).await;
    assert_eq!(c.outcome, ClaimOutcome::Conflict);
    assert_eq!(count(&h.get(&k).await.events, EventType::Conflict), 1);
    // no fingerprint sent: no check
    assert_eq!(h.claim(&k).await.outcome, ClaimOutcome::Completed);
}

pub async fn claim_during_a_valid_lease_is_in_flight<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    let k = key("k");
    let first = h.claim_with(&k, owned("exec-1", "c1")).await;
    h.advance(12_000);
    let c = h.claim_with(&k, owned("exec-1", "c2")).await;
    assert_eq!(c.outcome, ClaimOutcome::InFlight);
    assert_eq!(c.retry_after_ms, Some(18_000));
    assert_eq!(c.token, None);
    assert_eq!(c.resumed, None);
    let got = h.get(&k).await;
    assert_eq!(Some(got.record), first.record);
    assert_eq!(
        kinds(&got.events),
        [EventType::Acquired, EventType::InFlight]
    );
}

pub async fn claims_of_needs_review_and_awaiting_approval_are_refused<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    let review = key("review");
    let approval = key("approval");
    into_state(&h, &review, State::NeedsReview, ClaimRequest::default()).await;
    into_state(
        &h,
        &approval,
        State::AwaitingApproval,
        ClaimRequest::default(),
    )
    .await;
    h.advance(DAY_MS * 3);
    for _ in 0..2 {
        let c = h.claim(&review).await;
        assert_eq!(c.outcome, ClaimOutcome::NeedsReview);
        assert_eq!(c.token, None);
        let c = h.claim(&approval).await;
        assert_eq!(c.outcome, ClaimOutcome::AwaitingApproval);
        assert_eq!(c.token, None);
    }
    assert_eq!(h.rec(&review).await.state, State::NeedsReview);
    assert_eq!(h.rec(&approval).await.state, State::AwaitingApproval);
}

pub async fn paused_namespace_refuses_claims_but_lets_work_land<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    let running = key("running");
    let done = key("done");
    let tok = h.acquire(&running).await;
    into_state(&h, &done, State::Completed, ClaimRequest::default()).await;
    let info = h.change(NamespaceChange::Pause).await;
    assert!(info.paused);
    assert!(h.store.namespace(&h.ns).await.expect("ns").paused);
    for k in [&running, &done, &key("new")] {
        let before = h.store.get(&h.ns, k).await.expect("get");
        let c = h.claim(k).await;
        assert_eq!(c.outcome, ClaimOutcome::Paused, "{k}");
        assert_eq!(c.record, None);
        assert_eq!(c.token, None);
        let after = h.store.get(&h.ns, k).await.expect("get");
        assert_eq!(
            before.map(|r| (r.record, r.events.len())),
            after.map(|r| (r.record, r.events.len())),
            "{k}: a paused claim writes nothing"
        );
    }
    // in-flight work can land
    ok(&h, &running, heartbeat(&tok, None)).await;
    ok(&h, &running, complete(&tok, Some(json!(1)), None)).await;
    // other namespaces are not paused
    let other = H::on(h.store.clone(), "other", h.clock.clone());
    other.acquire(&key("new")).await;
    let info = h.change(NamespaceChange::Resume).await;
    assert!(!info.paused);
    assert_eq!(h.claim(&done).await.outcome, ClaimOutcome::Completed);
    assert_eq!(h.claim(&key("new")).await.outcome, ClaimOutcome::Acquired);
}

pub async fn daily_limit_limits_only_first_time_acquisitions<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    let info = h.patch(json!({"daily_limit": 2})).await;
    assert_eq!(info.policy.daily_limit, Some(2));
    // acquisitions in another namespace do not count against this one's ceiling
    let other = H::on(h.store.clone(), "other", h.clock.clone());
    for i in 0..3 {
        other.acquire(&key(&format!("o{i}"))).await;
    }
    let k1 = key("k1");
    let tok1 = h.acquire(&k1).await;
    let tok2 = h.acquire(&key("k2")).await;
    let c = h.claim(&key("k3")).await;
    assert_eq!(c.outcome, ClaimOutcome::Limited);
    assert_eq!(c.record, None);
    assert_eq!(
        c.retry_after_ms,
        Some(14 * 3_600_000),
        "to the next UTC midnight"
    );
    assert!(h.store.get(&h.ns, &key("k3")).await.expect("get").is_none());
    // existing records are never limited
    assert_eq!(h.claim(&k1).await.outcome, ClaimOutcome::InFlight);
    ok(&h, &k1, fail(&tok1, Class::Retryable)).await;
    ok(&h, &key("k2"), complete(&tok2, None, None)).await;
    h.advance(1_000);
    assert_eq!(h.claim(&k1).await.outcome, ClaimOutcome::Acquired);
    assert_eq!(h.claim(&key("k2")).await.outcome, ClaimOutcome::Completed);
    // a new UTC day starts a new count
    h.clock.set(Timestamp(T0 + 14 * 3_600_000));
    assert_eq!(h.claim(&key("k3")).await.outcome, ClaimOutcome::Acquired);
    assert_eq!(h.claim(&key("k4")).await.outcome, ClaimOutcome::Acquired);
    assert_eq!(h.claim(&key("k5")).await.outcome, ClaimOutcome::Limited);
}

// ================================================================ concurrency

async fn race(handles: &[H], k: &idem_core::Key, n: usize) -> BTreeMap<&'static str, usize> {
    let barrier = Arc::new(Barrier::new(n));
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let h = handles[i % handles.len()].clone();
        let k = k.clone();
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            h.ledger
                .claim(
                    &h.ns,
                    &k,
                    ClaimRequest {
                        owner: Some(format!("worker-{i}")),
                        ..Default::default()
                    },
                )
                .await
        }));
    }
    let mut outcomes = BTreeMap::new();
    for t in tasks {
        let reply = t
            .await
            .expect("task")
            .unwrap_or_else(|e| panic!("concurrent claim failed: {e}"));
        *outcomes.entry(reply.outcome.as_str()).or_insert(0) += 1;
    }
    outcomes
}

pub async fn concurrent_claims_from_tasks_yield_exactly_one_acquired<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    for round in 0..3 {
        let k = key(&format!("race-{round}"));
        let outcomes = race(std::slice::from_ref(&h), &k, 64).await;
        assert_eq!(
            outcomes,
            BTreeMap::from([("acquired", 1), ("in_flight", 63)]),
            "round {round}"
        );
        let got = h.get(&k).await;
        assert_eq!(got.record.attempt, 1);
        assert_eq!(count(&got.events, EventType::Acquired), 1);
        assert_eq!(count(&got.events, EventType::InFlight), 63);
    }
}

pub async fn concurrent_claims_from_separate_handles_yield_exactly_one_acquired<B: Backend>(
    b: Arc<B>,
) {
    let clock = TestClock::new(Timestamp(T0));
    let mut handles = Vec::new();
    for _ in 0..8 {
        handles.push(H::on(b.open().await, "ns", clock.clone()));
    }
    for round in 0..3 {
        let k = key(&format!("race-{round}"));
        let outcomes = race(&handles, &k, 64).await;
        assert_eq!(
            outcomes,
            BTreeMap::from([("acquired", 1), ("in_flight", 63)]),
            "round {round}"
        );
        let got = handles[round % 8].get(&k).await;
        assert_eq!(count(&got.events, EventType::Acquired), 1);
    }
}

pub async fn concurrent_reclaims_of_an_expired_lease_yield_one_acquisition<B: Backend>(b: Arc<B>) {
    let clock = TestClock::new(Timestamp(T0));
    let mut handles = Vec::new();
    for _ in 0..4 {
        handles.push(H::on(b.open().await, "ns", clock.clone()));
    }
    let k = key("k");
    handles[0].acquire(&k).await;
    clock.advance_ms(30_000);
    let outcomes = race(&handles, &k, 32).await;
    assert_eq!(
        outcomes,
        BTreeMap::from([("acquired", 1), ("in_flight", 31)])
    );
    let got = handles[1].get(&k).await;
    assert_eq!(got.record.attempt, 2);
    assert_eq!(count(&got.events, EventType::Resumed), 1);
}

pub async fn concurrent_first_acquisitions_never_exceed_the_daily_limit<B: Backend>(b: Arc<B>) {
    let clock = TestClock::new(Timestamp(T0));
    let mut handles = Vec::new();
    for _ in 0..4 {
        handles.push(H::on(b.open().await, "ns", clock.clone()));
    }
    handles[0].patch(json!({"daily_limit": 5})).await;
    let barrier = Arc::new(Barrier::new(32));
    let mut tasks = Vec::new();
    for i in 0..32 {
        let h = handles[i % 4].clone();
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            h.ledger
                .claim(&h.ns, &key(&format!("k{i}")), ClaimRequest::default())
                .await
        }));
    }
    let mut outcomes = BTreeMap::new();
    for t in tasks {
        let c = t.await.expect("task").expect("claim");
        *outcomes.entry(c.outcome.as_str()).or_insert(0) += 1;
    }
    assert_eq!(outcomes, BTreeMap::from([("acquired", 5), ("limited", 27)]));
    let info = handles[2]
        .store
        .namespace(&handles[2].ns)
        .await
        .expect("ns");
    assert_eq!(info.counts.get(State::Processing), 5);
}

// ================================================================ tokens and late writes

pub async fn stale_token_writes_after_reclaim_are_lease_lost_and_recorded<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    let k = key("k");
    let old = h.acquire(&k).await;
    h.advance(30_000);
    let new = h.acquire(&k).await;
    let before = h.get(&k).await;
    for op in [
        prepare(&old, json!(1), false),
        heartbeat(&old, None),
        complete(&old, Some(json!("x")), None),
        fail(&old, Class::Retryable),
    ] {
        let name = op.name();
        let e = h.exec(&k, op, None).await;
        assert_eq!(e.reply.as_ref().err(), Some(&OpError::LeaseLost), "{name}");
        assert_eq!(e.events.len(), 1, "{name}: lease_lost is recorded");
        assert_eq!(e.events[0].kind, EventType::LeaseLost);
    }
    let after = h.get(&k).await;
    assert_eq!(after.record, before.record, "stale writes change nothing");
    assert_eq!(
        kinds(&after.events[before.events.len()..]),
        [EventType::LeaseLost; 4]
    );
    assert_eq!(after.events.last().map(|e| e.attempt), Some(2));
    // the newest holder is unaffected
    ok(&h, &k, complete(&new, Some(json!("y")), None)).await;
}

pub async fn made_up_tokens_are_lease_lost<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    let k = key("k");
    h.acquire(&k).await;
    let before = h.rec(&k).await;
    for tok in [
        "nope".to_string(),
        format!("1.{}", "f".repeat(32)),
        format!("2.{}", "0".repeat(32)),
    ] {
        assert_eq!(
            refused(&h, &k, complete(&tok, None, None)).await,
            OpError::LeaseLost,
            "{tok}"
        );
    }
    assert_eq!(h.rec(&k).await, before);
    assert_eq!(count(&h.get(&k).await.events, EventType::LeaseLost), 3);
    // on an unknown key: not found, nothing created
    let unknown = key("unknown");
    assert_eq!(
        refused(&h, &unknown, complete("nope", None, None)).await,
        OpError::NotFound
    );
    assert!(h.store.get(&h.ns, &unknown).await.expect("get").is_none());
}

pub async fn late_completion_by_the_newest_holder_is_accepted<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    let k = key("reclaim-ns");
    let tok = h.acquire(&k).await;
    h.advance(10 * 60_000);
    let rec = ok(&h, &k, complete(&tok, Some(json!("late")), None)).await;
    assert_eq!(rec.state, State::Completed);
    assert_eq!(h.claim(&k).await.outcome, ClaimOutcome::Completed);

    // moved to needs_review by lease expiry (eagerly by the janitor, lazily by a claim)
    let r = H::on(h.store.clone(), "review-ns", h.clock.clone());
    r.patch(json!({"lease_expiry": "review"})).await;
    let eager = key("eager");
    let lazy = key("lazy");
    let tok_eager = r.acquire(&eager).await;
    let tok_lazy = r.acquire(&lazy).await;
    r.advance(30_000);
    sweep_all(&r.store, r.now()).await;
    assert_eq!(r.rec(&eager).await.state, State::NeedsReview);
    assert_eq!(r.rec(&lazy).await.state, State::NeedsReview);
    assert_eq!(r.claim(&lazy).await.outcome, ClaimOutcome::NeedsReview);
    r.advance(5_000);
    for (k, tok) in [(&eager, &tok_eager), (&lazy, &tok_lazy)] {
        let rec = ok(&r, k, complete(tok, Some(json!("done")), Some("ref-1"))).await;
        assert_eq!(rec.state, State::Completed);
        let events = r.get(k).await.events;
        let last = events.last().expect("event");
        assert_eq!(last.kind, EventType::Completed);
        assert_eq!(
            (last.from_state, last.to_state),
            (Some(State::NeedsReview), Some(State::Completed)),
            "recorded as a late completion out of review"
        );
        assert!(last.note.is_some(), "the late completion is noted");
    }
}

pub async fn writes_after_the_fact_follow_the_rules<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    let k = key("done");
    let tok = h.acquire(&k).await;
    let done = ok(&h, &k, complete(&tok, Some(result_v()), Some("ch_1"))).await;
    let n = h.get(&k).await.events.len();
    // the same complete again (member order does not matter): 200, nothing written
    let again = ok(
        &h,
        &k,
        complete(
            &tok,
            Some(json!({"amount": 100, "charge": "ch_1"})),
            Some("ch_1"),
        ),
    )
    .await;
    assert_eq!(again, done);
    assert_eq!(h.get(&k).await.events.len(), n);
    assert_eq!(
        refused(
            &h,
            &k,
            complete(&tok, Some(json!({"charge": "ch_2"})), Some("ch_1"))
        )
        .await,
        OpError::ResultMismatch
    );
    assert_eq!(
        refused(&h, &k, complete(&tok, Some(result_v()), Some("ch_2"))).await,
        OpError::ResultMismatch
    );
    assert!(is_invalid(
        &refused(&h, &k, fail(&tok, Class::Retryable)).await
    ));
    assert_eq!(h.rec(&k).await, done);

    // after the holder's fail, its further writes are invalid transitions
    let k = key("failed");
    let tok = h.acquire(&k).await;
    let failed = ok(&h, &k, fail(&tok, Class::Retryable)).await;
    for op in [
        complete(&tok, None, None),
        fail(&tok, Class::Permanent),
        heartbeat(&tok, None),
        prepare(&tok, json!(1), false),
    ] {
        let name = op.name();
        assert!(is_invalid(&refused(&h, &k, op).await), "{name}");
    }
    assert_eq!(h.rec(&k).await, failed);
    // resolve outside its states is an invalid transition too
    let k = key("running");
    h.acquire(&k).await;
    assert!(is_invalid(
        &refused(&h, &k, resolve(ResolveAction::Completed, "n")).await
    ));
    assert!(is_invalid(
        &refused(&h, &k, Op::Approve { note: None }).await
    ));
}

// ================================================================ lease expiry by the janitor

pub async fn sweep_moves_expired_processing_to_review_under_review_policy<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "money").await;
    h.patch(json!({"lease_expiry": "review", "alert_url": "http://127.0.0.1:9/hook"}))
        .await;
    let keys: Vec<_> = (0..3).map(|i| key(&format!("k{i}"))).collect();
    for k in &keys {
        h.claim_with(k, owned("exec", "corr")).await;
    }
    h.advance(29_999);
    let r = sweep_all(&h.store, h.now()).await;
    assert_eq!(r.moved_to_review, 0, "leases still valid");
    h.advance(1);
    // in batches: at most `batch` per step
    let mut moved = 0;
    for _ in 0..10 {
        let r = h.store.sweep_once(h.now(), 2).await.expect("sweep");
        assert!(r.moved_to_review <= 2, "{r:?}");
        moved += r.moved_to_review;
        if moved == 3 {
            break;
        }
    }
    assert_eq!(moved, 3);
    for k in &keys {
        let got = h.get(k).await;
        assert_eq!(got.record.state, State::NeedsReview);
        let last = got.events.last().expect("event");
        assert_eq!(last.kind, EventType::MovedToReview);
        assert_eq!(last.owner.as_deref(), Some("exec"));
        assert_eq!(last.correlation_id.as_deref(), Some("corr"));
        assert_eq!(last.attempt, 1);
    }
    let alerts = h
        .store
        .due_alerts(h.now(), 100, 60_000)
        .await
        .expect("due_alerts");
    assert_eq!(alerts.len(), 3);
    assert_eq!(sweep_all(&h.store, h.now()).await.moved_to_review, 0);
    // a claim answers needs_review without another move
    assert_eq!(h.claim(&keys[0]).await.outcome, ClaimOutcome::NeedsReview);
    assert_eq!(
        count(&h.get(&keys[0]).await.events, EventType::MovedToReview),
        1
    );
}

pub async fn sweep_leaves_reclaim_leases_for_the_next_claim<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    let k = key("k");
    h.acquire(&k).await;
    h.advance(60_000);
    let before = h.rec(&k).await;
    let r = sweep_all(&h.store, h.now()).await;
    assert_eq!(r.moved_to_review, 0);
    assert_eq!(h.rec(&k).await.state, State::Processing);
    assert_eq!(h.rec(&k).await.attempt, before.attempt);
    let c = h.claim(&k).await;
    assert_eq!(c.outcome, ClaimOutcome::Acquired);
    assert!(c.reclaimed);
}

pub async fn stuck_processing_alerts_once_and_moves_under_review<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "reclaim").await;
    h.patch(json!({"stuck_after_ms": 60_000, "alert_url": "http://127.0.0.1:9/a"}))
        .await;
    let long = ClaimRequest {
        lease_ms: Some(3_600_000),
        ..Default::default()
    };
    let k = key("slow");
    let tok = h
        .claim_with(&k, long.clone())
        .await
        .token
        .expect("token")
        .secret();
    let beating = key("beating");
    let tok_b = h
        .claim_with(&beating, long.clone())
        .await
        .token
        .expect("token")
        .secret();
    h.advance(30_000);
    ok(&h, &beating, heartbeat(&tok_b, Some(3_600_000))).await;
    h.advance(30_000);
    let r = sweep_all(&h.store, h.now()).await;
    assert_eq!(r.stuck_alerts, 1, "{r:?}");
    assert_eq!(r.moved_to_review, 0);
    assert_eq!(h.rec(&k).await.state, State::Processing);
    h.advance(10_000);
    assert_eq!(
        sweep_all(&h.store, h.now()).await.stuck_alerts,
        0,
        "alert once"
    );
    let alerts = h.store.due_alerts(h.now(), 100, 60_000).await.expect("due");
    assert_eq!(alerts.len(), 1);
    assert_eq!(alerts[0].reason, "stuck");
    assert_eq!(alerts[0].key, "slow");
    assert_eq!(alerts[0].state, State::Processing);
    ok(&h, &k, complete(&tok, None, None)).await;

    let r2 = H::on(h.store.clone(), "review", h.clock.clone());
    r2.patch(json!({"stuck_after_ms": 60_000, "lease_expiry": "review"}))
        .await;
    let k2 = key("slow");
    r2.claim_with(&k2, long).await;
    r2.advance(60_000);
    let r = sweep_all(&r2.store, r2.now()).await;
    assert_eq!(r.moved_to_review, 1, "{r:?}");
    assert_eq!(r2.rec(&k2).await.state, State::NeedsReview);
    assert_eq!(h.rec(&beating).await.state, State::Processing);
}

// ================================================================ retention

pub async fn tombstone_answers_completed_with_result_expired<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    h.patch(json!({"retention_ms": 60_000, "audit_retention_ms": 120_000}))
        .await;
    let payload = json!({"amount": 100});
    let done = key("done");
    let tok = h
        .claim_with(&done, with_fp(&payload))
        .await
        .token
        .expect("token")
        .secret();
    ok(
        &h,
        &done,
        prepare(&tok, json!({"body": "secret draft"}), false),
    )
    .await;
    ok(&h, &done, complete(&tok, Some(result_v()), Some("ch_1"))).await;
    let perm = key("perm");
    into_state(&h, &perm, State::FailedPermanent, ClaimRequest::default()).await;
    h.advance(59_999);
    assert_eq!(retention_all(&h.store, h.now()).await.results_expired, 0);
    assert!(!h.rec(&done).await.result_expired);
    h.advance(1);
    let r = retention_all(&h.store, h.now()).await;
    assert_eq!(r.results_expired, 2, "{r:?}");
    assert_eq!(r.tombstones_deleted, 0);
    let got = h.get(&done).await;
    let rec = &got.record;
    assert_eq!(rec.state, State::Completed);
    assert!(rec.result_expired);
    assert_eq!(rec.result, None);
    assert_eq!(rec.prepared_payload, None);
    assert_eq!(
        rec.external_ref.as_deref(),
        Some("ch_1"),
        "the tombstone keeps it"
    );
    assert_eq!(rec.fingerprint, Some(fp(&payload)));
    assert_eq!(
        count(&got.events, EventType::ResultExpired),
        1,
        "dropping the result is an event"
    );
    assert!(h.rec(&perm).await.result_expired);
    // the tombstone answers completed and never lets the operation run again
    for _ in 0..2 {
        let c = h.claim_with(&done, with_fp(&payload)).await;
        assert_eq!(c.outcome, ClaimOutcome::Completed);
        let rec = c.record.expect("record");
        assert!(rec.result_expired);
        assert_eq!(rec.result, None);
    }
    assert_eq!(h.claim(&done).await.outcome, ClaimOutcome::Completed);
    assert_eq!(
        h.claim_with(&done, with_fp(&json!({"amount": 5})))
            .await
            .outcome,
        ClaimOutcome::Conflict
    );
    assert_eq!(h.claim(&perm).await.outcome, ClaimOutcome::FailedPermanent);
    // a second pass expires nothing new
    assert_eq!(retention_all(&h.store, h.now()).await.results_expired, 0);
}

pub async fn tombstone_and_events_are_deleted_after_audit_retention<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    h.patch(json!({"retention_ms": 60_000, "audit_retention_ms": 120_000}))
        .await;
    let k = key("k");
    into_state(&h, &k, State::Completed, ClaimRequest::default()).await;
    let k2 = key("k2");
    into_state(&h, &k2, State::FailedPermanent, ClaimRequest::default()).await;
    h.advance(60_000);
    retention_all(&h.store, h.now()).await;
    h.advance(59_999);
    assert_eq!(retention_all(&h.store, h.now()).await.tombstones_deleted, 0);
    h.advance(1);
    let r = retention_all(&h.store, h.now()).await;
    assert_eq!(r.tombstones_deleted, 2, "{r:?}");
    assert!(h.store.get(&h.ns, &k).await.expect("get").is_none());
    assert!(h.store.get(&h.ns, &k2).await.expect("get").is_none());
    // the per-state counters of the gauges follow retention's deletes
    let s = h.store.stats(h.now()).await.expect("stats");
    assert_eq!(s.records.get(State::Completed), 0, "{s:?}");
    assert_eq!(s.records.get(State::FailedPermanent), 0, "{s:?}");
    // the key is forgotten: its old events do not come back with a new record
    assert_eq!(h.claim(&k).await.outcome, ClaimOutcome::Acquired);
    assert_eq!(kinds(&h.get(&k).await.events), [EventType::Acquired]);
}

pub async fn retention_never_deletes_processing_or_needs_review<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    h.patch(json!({"retention_ms": 0, "audit_retention_ms": 0}))
        .await;
    let mut kept = Vec::new();
    for state in [
        State::Processing,
        State::Prepared,
        State::AwaitingApproval,
        State::FailedRetryable,
        State::NeedsReview,
    ] {
        let k = key(&format!("k-{}", state.as_str()));
        into_state(&h, &k, state, ClaimRequest::default()).await;
        kept.push((k.clone(), h.get(&k).await));
    }
    let gone = key("completed");
    into_state(&h, &gone, State::Completed, ClaimRequest::default()).await;
    h.advance(1000 * DAY_MS);
    for _ in 0..3 {
        retention_all(&h.store, h.now()).await;
    }
    assert!(h.store.get(&h.ns, &gone).await.expect("get").is_none());
    for (k, before) in kept {
        let after = h.get(&k).await;
        assert_eq!(after.record, before.record, "{k}");
        assert_eq!(after.events, before.events, "{k}");
    }
}

// ================================================================ events and operator actions

pub async fn events_record_every_transition_with_owner_attempt_and_correlation<B: Backend>(
    b: Arc<B>,
) {
    let h = H::new(&*b, "ns").await;
    let k = key("k");
    let tok = h
        .claim_with(&k, owned("exec-1", "corr-1"))
        .await
        .token
        .expect("token")
        .secret();
    h.advance(1_000);
    ok(&h, &k, prepare(&tok, json!({"draft": 1}), false)).await;
    h.advance(1_000);
    ok(&h, &k, heartbeat(&tok, None)).await;
    ok(&h, &k, fail(&tok, Class::Retryable)).await;
    h.advance(1_000);
    let tok = h
        .claim_with(&k, owned("exec-2", "corr-2"))
        .await
        .token
        .expect("token")
        .secret();
    ok(&h, &k, complete(&tok, Some(json!(1)), None)).await;
    h.claim_with(&k, owned("exec-3", "corr-3")).await;
    let events = h.get(&k).await.events;
    let events: Vec<_> = events
        .into_iter()
        .filter(|e| e.kind != EventType::Heartbeat)
        .collect();
    use EventType as E;
    use State as S;
    let expected = [
        (
            E::Acquired,
            None,
            Some(S::Processing),
            1,
            "exec-1",
            "corr-1",
        ),
        (
            E::Prepared,
            Some(S::Processing),
            Some(S::Prepared),
            1,
            "exec-1",
            "corr-1",
        ),
        (
            E::Failed,
            Some(S::Prepared),
            Some(S::FailedRetryable),
            1,
            "exec-1",
            "corr-1",
        ),
        (
            E::Resumed,
            Some(S::FailedRetryable),
            Some(S::Prepared),
            2,
            "exec-2",
            "corr-2",
        ),
        (
            E::Completed,
            Some(S::Prepared),
            Some(S::Completed),
            2,
            "exec-2",
            "corr-2",
        ),
        (
            E::DuplicateHit,
            Some(S::Completed),
            Some(S::Completed),
            2,
            "exec-3",
            "corr-3",
        ),
    ];
    assert_eq!(events.len(), expected.len(), "{events:?}");
    for (e, (kind, from, to, attempt, owner, corr)) in events.iter().zip(expected) {
        assert_eq!(e.kind, kind);
        assert_eq!((e.from_state, e.to_state), (from, to), "{kind:?}");
        assert_eq!(e.attempt, attempt, "{kind:?}");
        assert_eq!(e.owner.as_deref(), Some(owner), "{kind:?}");
        assert_eq!(e.correlation_id.as_deref(), Some(corr), "{kind:?}");
    }
    assert!(
        events.windows(2).all(|w| w[0].seq < w[1].seq),
        "seq increases"
    );
    assert!(
        events.windows(2).all(|w| w[0].at <= w[1].at),
        "oldest first"
    );
    assert_eq!(events[0].at, Timestamp(T0));
    assert_eq!(events[1].at, Timestamp(T0 + 1_000));
}

pub async fn operator_actions_are_recorded_with_who_and_why<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    let k = key("k");
    into_state(&h, &k, State::NeedsReview, ClaimRequest::default()).await;
    let e = h
        .exec(
            &k,
            Op::Resolve(ResolveRequest {
                action: ResolveAction::Completed,
                external_ref: Some("ch_9".into()),
                result: Some(json!({"found": true})),
                note: "found it in the PSP".into(),
            }),
            Some("operator:alice"),
        )
        .await;
    let rec = record_of(ok_reply(&e));
    assert_eq!(rec.state, State::Completed);
    assert_eq!(rec.external_ref.as_deref(), Some("ch_9"));
    let got = h.get(&k).await;
    assert_eq!(got.record, rec);
    let last = got.events.last().expect("event");
    assert_eq!(last.kind, EventType::Resolved);
    assert_eq!(last.note.as_deref(), Some("found it in the PSP"));
    assert_eq!(last.actor.as_deref(), Some("operator:alice"));
    assert_eq!(h.claim(&k).await.outcome, ClaimOutcome::Completed);

    // resolve retry: a fresh budget, claimable at once
    let k = key("retry");
    into_state(&h, &k, State::FailedPermanent, ClaimRequest::default()).await;
    let rec = ok(&h, &k, resolve(ResolveAction::Retry, "fixed the address")).await;
    assert_eq!(rec.state, State::FailedRetryable);
    let c = h.claim(&k).await;
    assert_eq!(c.outcome, ClaimOutcome::Acquired);
    assert_eq!(c.token.expect("token").attempt, 2);

    let k = key("approve");
    into_state(&h, &k, State::AwaitingApproval, ClaimRequest::default()).await;
    ok(&h, &k, Op::Approve { note: None }).await;
    let last = h.get(&k).await.events.pop().expect("event");
    assert_eq!(last.kind, EventType::Approved);
    assert_eq!(last.actor.as_deref(), Some("operator:alice"));
}

// ================================================================ listing

pub async fn list_pages_newest_first_with_cursor_and_state_filter<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    let mut tokens = Vec::new();
    for i in 0..5 {
        tokens.push(h.acquire(&key(&format!("k{i}"))).await);
        h.advance(1_000);
    }
    // two records at the same instant: the order is still total (key descending)
    h.acquire(&key("same-a")).await;
    h.acquire(&key("same-b")).await;
    h.advance(1_000);
    // touching k1 moves it to the front
    ok(&h, &key("k1"), complete(&tokens[1], None, None)).await;
    ok(&h, &key("k3"), complete(&tokens[3], None, None)).await;
    H::on(h.store.clone(), "elsewhere", h.clock.clone())
        .acquire(&key("zzz"))
        .await;

    let want = ["k3", "k1", "same-b", "same-a", "k4", "k2", "k0"];
    let mut seen = Vec::new();
    let mut cursor = None;
    for page_no in 0.. {
        let page = h
            .store
            .list(
                &h.ns,
                &ListQuery {
                    state: None,
                    limit: 2,
                    cursor: cursor.clone(),
                    ..Default::default()
                },
            )
            .await
            .expect("list");
        assert!(page.items.len() <= 2);
        seen.extend(page.items.iter().map(|r| r.key.as_str().to_owned()));
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
        assert!(page_no < 10, "paging does not end");
    }
    assert_eq!(seen, want);
    let all = h
        .store
        .list(
            &h.ns,
            &ListQuery {
                state: None,
                limit: 100,
                cursor: None,
                ..Default::default()
            },
        )
        .await
        .expect("list");
    assert_eq!(all.items.len(), 7);
    assert_eq!(all.next_cursor, None, "null at the end");
    assert_eq!(all.items[0], h.rec(&key("k3")).await);
    let done = h
        .store
        .list(
            &h.ns,
            &ListQuery {
                state: Some(State::Completed),
                limit: 100,
                cursor: None,
                ..Default::default()
            },
        )
        .await
        .expect("list");
    let keys: Vec<_> = done.items.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(keys, ["k3", "k1"]);
    let none = h
        .store
        .list(
            &h.ns,
            &ListQuery {
                state: Some(State::NeedsReview),
                limit: 10,
                cursor: None,
                ..Default::default()
            },
        )
        .await
        .expect("list");
    assert!(none.items.is_empty());
    assert_eq!(none.next_cursor, None);
    let bad = h
        .store
        .list(
            &h.ns,
            &ListQuery {
                state: None,
                limit: 10,
                cursor: Some("not a cursor".into()),
                ..Default::default()
            },
        )
        .await;
    assert!(
        matches!(bad, Err(StoreError::InvalidCursor)),
        "{:?}",
        bad.map(|p| p.items.len())
    );
}

// ================================================================ namespaces

pub async fn namespace_defaults_patch_and_pause<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "fresh-ns").await;
    let info = h.store.namespace(&h.ns).await.expect("namespace");
    assert_eq!(info.namespace, "fresh-ns");
    assert!(!info.paused);
    assert_eq!(info.policy, Policy::default());
    assert_eq!(info.counts.0.len(), 7, "every state, zeros included");
    assert!(State::ALL.iter().all(|s| info.counts.get(*s) == 0));
    let info = h
        .patch(json!({"retry": {"max_attempts": 3}, "lease_ms": 5000, "alert_url": "https://x.example/h"}))
        .await;
    let mut want = Policy::default();
    want.retry.max_attempts = 3;
    want.lease_ms = 5000;
    want.alert_url = Some("https://x.example/h".into());
    assert_eq!(info.policy, want, "patch merges recursively");
    let info = h.patch(json!({"retry": {"base_ms": 10}})).await;
    want.retry.base_ms = 10;
    assert_eq!(info.policy, want);
    assert_eq!(h.store.namespace(&h.ns).await.expect("ns").policy, want);
    // the policy applies to claims
    let c = h.claim(&key("k")).await;
    assert_eq!(
        c.record.expect("record").lease_expires_at,
        Some(Timestamp(T0 + 5000))
    );
    into_state(&h, &key("r"), State::NeedsReview, ClaimRequest::default()).await;
    let info = h.store.namespace(&h.ns).await.expect("ns");
    assert_eq!(info.counts.get(State::Processing), 1);
    assert_eq!(info.counts.get(State::NeedsReview), 1);
    assert_eq!(info.counts.get(State::Completed), 0);
    // pause and resume keep the policy
    let info = h.change(NamespaceChange::Pause).await;
    assert!(info.paused);
    assert_eq!(info.policy, want);
    let info = h.change(NamespaceChange::Resume).await;
    assert!(!info.paused);
    assert_eq!(info.policy, want);
    // a patch to null clears optional fields
    let info = h.patch(json!({"alert_url": null})).await;
    assert_eq!(info.policy.alert_url, None);
    // another namespace still has the defaults
    let other = h.store.namespace(&ns("other")).await.expect("ns");
    assert_eq!(other.policy, Policy::default());
    assert!(
        State::ALL.iter().all(|s| other.counts.get(*s) == 0),
        "counts are per namespace: {:?}",
        other.counts
    );
}

pub async fn namespace_patch_refuses_bad_fields_and_changes_nothing<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    let base = h.patch(json!({"lease_ms": 1234})).await.policy;
    let cases = [
        (json!({"bogus": 1}), "bogus", true),
        (
            json!({"retry": {"nope": 1}, "lease_ms": 99}),
            "retry.nope",
            true,
        ),
        (json!({"lease_ms": "x"}), "lease_ms", false),
        (
            json!({"lease_ms": 5, "retry": {"max_attempts": 0}}),
            "retry.max_attempts",
            false,
        ),
    ];
    for (patch, field, unknown) in cases {
        let r = h
            .store
            .update_namespace(&h.ns, NamespaceChange::Patch(patch.clone()), h.now())
            .await;
        match r {
            Err(StoreError::Policy(PolicyError::UnknownField { field: f })) if unknown => {
                assert_eq!(f, field)
            }
            Err(StoreError::Policy(PolicyError::InvalidField { field: f, .. })) if !unknown => {
                assert_eq!(f, field)
            }
            other => panic!("{patch}: {:?}", other.map(|i| i.policy)),
        }
        let now = h.store.namespace(&h.ns).await.expect("ns").policy;
        assert_eq!(now, base, "{patch}: a refused patch changes nothing");
    }
}

// ================================================================ alerts

/// `alert_secret` is stored (both stores keep it in the secrets table), survives a pause, is seen
/// by another handle, reaches the alert sender with the URL at delivery time (so a rotated
/// secret signs the next delivery), and is cleared by null; a bad one changes nothing.
pub async fn alert_secret_is_stored_and_reaches_the_alert_sender<B: Backend>(b: Arc<B>) {
    const S1: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const S2: &str = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    let secret_of = |p: &Policy| p.alert_secret.as_ref().map(|s| s.expose().to_owned());
    let h = H::new(&*b, "ns").await;
    let info = h
        .patch(json!({"alert_url": "http://127.0.0.1:9/hook", "alert_secret": S1}))
        .await;
    assert_eq!(secret_of(&info.policy).as_deref(), Some(S1));
    let other = H::on(b.open().await, "ns", h.clock.clone());
    let seen = other.store.namespace(&h.ns).await.expect("ns").policy;
    assert_eq!(secret_of(&seen).as_deref(), Some(S1), "another handle");

    let k = key("k");
    let tok = h.acquire(&k).await;
    ok(&h, &k, fail(&tok, Class::Ambiguous)).await;
    let due = h.store.due_alerts(h.now(), 100, 60_000).await.expect("due");
    assert_eq!(due.len(), 1, "{due:?}");
    assert_eq!(due[0].alert_secret.as_ref().map(|s| s.expose()), Some(S1));
    assert!(!format!("{due:?}").contains("MfKQ9r8G"), "Debug hides it");

    // Rotated: the next delivery of the same alert carries the new secret.
    h.patch(json!({"alert_secret": S2})).await;
    h.change(NamespaceChange::Pause).await;
    let paused = other.store.namespace(&h.ns).await.expect("ns").policy;
    assert_eq!(
        secret_of(&paused).as_deref(),
        Some(S2),
        "kept across a pause"
    );
    h.advance(60_001);
    let due = other
        .store
        .due_alerts(h.now(), 100, 60_000)
        .await
        .expect("due");
    assert_eq!(due.len(), 1, "{due:?}");
    assert_eq!(due[0].alert_secret.as_ref().map(|s| s.expose()), Some(S2));

    // A bad secret is refused naming the field and changes nothing.
    for bad in [
        json!("whsec_tooshort"),
        json!(12),
        json!(S1.trim_start_matches("whsec_")),
    ] {
        let r = h
            .store
            .update_namespace(
                &h.ns,
                NamespaceChange::Patch(json!({"alert_secret": bad})),
                h.now(),
            )
            .await;
        match r {
            Err(StoreError::Policy(PolicyError::InvalidField { field, .. })) => {
                assert_eq!(field, "alert_secret")
            }
            other => panic!("{bad}: {:?}", other.map(|i| i.policy)),
        }
        let now = other.store.namespace(&h.ns).await.expect("ns").policy;
        assert_eq!(secret_of(&now).as_deref(), Some(S2), "{bad}: unchanged");
    }

    // null clears it; later deliveries are unsigned.
    h.patch(json!({"alert_secret": null})).await;
    let cleared = other.store.namespace(&h.ns).await.expect("ns").policy;
    assert_eq!(cleared.alert_secret, None);
    assert_eq!(
        cleared.alert_url.as_deref(),
        Some("http://127.0.0.1:9/hook")
    );
    h.advance(60_001);
    let due = other
        .store
        .due_alerts(h.now(), 100, 60_000)
        .await
        .expect("due");
    assert_eq!(due.len(), 1, "{due:?}");
    assert_eq!(due[0].alert_secret, None);
}

pub async fn entering_review_queues_exactly_one_alert_per_record_reason_and_attempt<B: Backend>(
    b: Arc<B>,
) {
    let h = H::new(&*b, "ns").await;
    h.patch(json!({"lease_expiry": "review", "alert_url": "http://127.0.0.1:9/hook"}))
        .await;
    let k = key("k");
    let tok = h.acquire(&k).await;
    h.advance(30_000);
    sweep_all(&h.store, h.now()).await; // needs_review (lease expired), attempt 1
    assert_eq!(h.claim(&k).await.outcome, ClaimOutcome::NeedsReview);
    // the holder's late ambiguous fail enters needs_review again at the same attempt
    let rec = ok(&h, &k, fail(&tok, Class::Ambiguous)).await;
    assert_eq!(rec.state, State::NeedsReview);
    let alerts = h.store.due_alerts(h.now(), 100, 60_000).await.expect("due");
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    let a = &alerts[0];
    assert_eq!(a.namespace, "ns");
    assert_eq!(a.key, "k");
    assert_eq!(a.reason, "needs_review");
    assert_eq!(a.state, State::NeedsReview);
    assert_eq!(a.attempt, 1);
    assert_eq!(a.alert_url.as_deref(), Some("http://127.0.0.1:9/hook"));
    // a later attempt that ends in review queues a new one
    ok(&h, &k, resolve(ResolveAction::Retry, "try again")).await;
    let tok = h.acquire(&k).await;
    ok(&h, &k, fail(&tok, Class::Ambiguous)).await;
    h.advance(60_001); // the first one's delivery claim has lapsed
    let alerts = h.store.due_alerts(h.now(), 100, 60_000).await.expect("due");
    let mut attempts: Vec<u32> = alerts.iter().map(|a| a.attempt).collect();
    attempts.sort_unstable();
    assert_eq!(attempts, [1, 2], "{alerts:?}");
}

pub async fn alert_outbox_delivery_lifecycle<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    h.patch(json!({"alert_url": "http://127.0.0.1:9/hook"}))
        .await;
    for name in ["a", "b", "c"] {
        into_state(&h, &key(name), State::NeedsReview, ClaimRequest::default()).await;
    }
    let now = h.now();
    let due = h.store.due_alerts(now, 100, 60_000).await.expect("due");
    assert_eq!(due.len(), 3);
    assert!(due
        .iter()
        .all(|a| a.tries == 0 && a.error_category.as_deref() == Some("http")));
    // claimed for 60 s: another sender does not get them
    assert!(h
        .store
        .due_alerts(now, 100, 60_000)
        .await
        .expect("due")
        .is_empty());
    let by_key: BTreeMap<String, i64> = due.iter().map(|a| (a.key.clone(), a.id)).collect();
    h.store
        .finish_alert(by_key["a"], AlertOutcome::Sent, now)
        .await
        .expect("finish");
    h.store
        .finish_alert(by_key["b"], AlertOutcome::RetryAt(now.plus_ms(5_000)), now)
        .await
        .expect("finish");
    h.store
        .finish_alert(by_key["c"], AlertOutcome::GaveUp, now)
        .await
        .expect("finish");
    let sent = h.get(&key("a")).await.events;
    assert_eq!(sent.last().map(|e| e.kind), Some(EventType::AlertSent));
    assert_eq!(
        count(&h.get(&key("b")).await.events, EventType::AlertSent),
        0
    );
    assert!(h
        .store
        .due_alerts(now.plus_ms(4_999), 100, 60_000)
        .await
        .expect("due")
        .is_empty());
    let due = h
        .store
        .due_alerts(now.plus_ms(5_000), 100, 60_000)
        .await
        .expect("due");
    assert_eq!(due.len(), 1, "{due:?}");
    assert_eq!(due[0].key, "b");
    assert_eq!(due[0].tries, 1);
    // sent and given-up alerts never come back
    let later = h
        .store
        .due_alerts(now.plus_ms(DAY_MS), 100, 60_000)
        .await
        .expect("due");
    let keys: HashSet<_> = later.iter().map(|a| a.key.as_str()).collect();
    assert_eq!(keys, HashSet::from(["b"]));
}

pub async fn no_alerts_are_queued_without_an_alert_url<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    let k = key("k");
    let tok = h.acquire(&k).await;
    let e = h.exec(&k, fail(&tok, Class::Ambiguous), None).await;
    assert!(e.reply.is_ok());
    assert_eq!(e.alerts_queued, 0);
    h.patch(json!({"alert_url": "http://127.0.0.1:9/hook"}))
        .await;
    assert!(h
        .store
        .due_alerts(h.now(), 100, 60_000)
        .await
        .expect("due")
        .is_empty());
    let k2 = key("k2");
    let tok = h.acquire(&k2).await;
    let e = h.exec(&k2, fail(&tok, Class::Ambiguous), None).await;
    assert_eq!(e.alerts_queued, 1);
}

// ================================================================ API tokens

pub async fn api_tokens_create_find_and_count<B: Backend>(b: Arc<B>) {
    let store = b.open().await;
    assert_eq!(store.token_count().await.expect("count"), 0);
    let secret = "idem_0123456789abcdef";
    store
        .create_token(
            NewApiToken {
                secret_hash: hash_secret(secret),
                role: Role::Operator,
                scope: "payments".into(),
                label: Some("ops laptop".into()),
                expires_at: None,
            },
            Timestamp(T0),
        )
        .await
        .expect("create");
    store
        .create_token(
            NewApiToken {
                secret_hash: hash_secret("idem_other"),
                role: Role::Admin,
                scope: "*".into(),
                label: None,
                expires_at: None,
            },
            Timestamp(T0),
        )
        .await
        .expect("create");
    assert_eq!(store.token_count().await.expect("count"), 2);
    let t = store
        .find_token(&hash_secret(secret))
        .await
        .expect("find")
        .expect("token exists");
    assert_eq!(t.secret_hash, hash_secret(secret));
    assert_eq!(t.role, Role::Operator);
    assert_eq!(t.scope, "payments");
    assert_eq!(t.label.as_deref(), Some("ops laptop"));
    let admin = store
        .find_token(&hash_secret("idem_other"))
        .await
        .expect("find")
        .expect("token exists");
    assert_eq!((admin.role, admin.scope.as_str()), (Role::Admin, "*"));
    assert_ne!(admin.id, t.id);
    assert!(store
        .find_token(&hash_secret("idem_unknown"))
        .await
        .expect("find")
        .is_none());
}

pub async fn api_tokens_expire_list_revoke_and_touch<B: Backend>(b: Arc<B>) {
    let store = b.open().await;
    let new = |secret: &str, role, scope: &str, expires_at| NewApiToken {
        secret_hash: hash_secret(secret),
        role,
        scope: scope.into(),
        label: None,
        expires_at,
    };
    let at = Timestamp(T0);
    store
        .create_token(new("idem_a", Role::Admin, "*", None), at)
        .await
        .expect("create");
    store
        .create_token(
            new("idem_w", Role::Worker, "pay", Some(Timestamp(T0 + 60_000))),
            at.plus_ms(1),
        )
        .await
        .expect("create");
    let w = store
        .find_token(&hash_secret("idem_w"))
        .await
        .expect("find")
        .expect("token exists");
    assert_eq!(w.created_at, at.plus_ms(1));
    assert_eq!(w.expires_at, Some(Timestamp(T0 + 60_000)));
    assert_eq!(w.last_used_at, None);
    assert!(!w.expired(Timestamp(T0 + 59_999)));
    assert!(w.expired(Timestamp(T0 + 60_000)));

    let listed = store.list_tokens().await.expect("list");
    let ids: Vec<(Role, &str)> = listed.iter().map(|t| (t.role, t.scope.as_str())).collect();
    assert_eq!(ids, vec![(Role::Admin, "*"), (Role::Worker, "pay")]);
    assert!(listed[0].id < listed[1].id, "oldest first");

    store
        .touch_token(w.id, Timestamp(T0 + 5))
        .await
        .expect("touch");
    let w2 = store
        .find_token(&hash_secret("idem_w"))
        .await
        .expect("find")
        .expect("token exists");
    assert_eq!(w2.last_used_at, Some(Timestamp(T0 + 5)));

    assert!(store
        .revoke_token(w.id, at.plus_ms(10))
        .await
        .expect("revoke"));
    assert!(store
        .find_token(&hash_secret("idem_w"))
        .await
        .expect("find")
        .is_none());
    let listed = store.list_tokens().await.expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].role, Role::Admin);
    // A second revoke and an unknown id change nothing.
    assert!(!store
        .revoke_token(w.id, at.plus_ms(11))
        .await
        .expect("revoke"));
    assert!(!store.revoke_token(i64::MAX, at).await.expect("revoke"));
    // A revoked token still counts: revoking never switches auth off.
    assert_eq!(store.token_count().await.expect("count"), 2);
    // Revocation is durable: a fresh handle sees it too.
    let again = b.open().await;
    assert!(again
        .find_token(&hash_secret("idem_w"))
        .await
        .expect("find")
        .is_none());
    assert_eq!(again.list_tokens().await.expect("list").len(), 1);
}

// ================================================================ stats and durability

pub async fn stats_count_states_and_oldest_processing<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    h.store.ping().await.expect("ping");
    let empty = h.store.stats(h.now()).await.expect("stats");
    assert_eq!(empty.records.get(State::Processing), 0);
    assert_eq!(empty.review_queue_depth, 0);
    assert_eq!(empty.oldest_processing_seconds, 0.0);
    h.acquire(&key("old")).await;
    h.advance(10_000);
    h.acquire(&key("young")).await;
    into_state(&h, &key("r1"), State::NeedsReview, ClaimRequest::default()).await;
    into_state(&h, &key("r2"), State::NeedsReview, ClaimRequest::default()).await;
    into_state(&h, &key("c"), State::Completed, ClaimRequest::default()).await;
    H::on(h.store.clone(), "other", h.clock.clone())
        .acquire(&key("x"))
        .await;
    h.advance(5_000);
    let s = h.store.stats(h.now()).await.expect("stats");
    assert_eq!(s.records.get(State::Processing), 3);
    assert_eq!(s.records.get(State::NeedsReview), 2);
    assert_eq!(s.records.get(State::Completed), 1);
    assert_eq!(s.review_queue_depth, 2);
    assert!(
        (s.oldest_processing_seconds - 15.0).abs() < 0.01,
        "{}",
        s.oldest_processing_seconds
    );
}

pub async fn reopened_handle_sees_every_acknowledged_change<B: Backend>(b: Arc<B>) {
    let clock = TestClock::new(Timestamp(T0));
    let keys: Vec<_> = State::ALL
        .iter()
        .map(|s| key(&format!("k-{}", s.as_str())))
        .collect();
    let (records, policy) = {
        let h = H::on(b.open().await, "ns", clock.clone());
        h.patch(json!({"alert_url": "http://127.0.0.1:9/a", "retry": {"max_attempts": 7}}))
            .await;
        h.change(NamespaceChange::Pause).await;
        h.change(NamespaceChange::Resume).await;
        for (s, k) in State::ALL.iter().zip(&keys) {
            into_state(&h, k, *s, with_fp(&json!({"k": k.as_str()}))).await;
        }
        h.store
            .create_token(
                NewApiToken {
                    secret_hash: hash_secret("idem_s"),
                    role: Role::Worker,
                    scope: "ns".into(),
                    label: None,
                    expires_at: None,
                },
                h.now(),
            )
            .await
            .expect("token");
        let mut records = Vec::new();
        for k in &keys {
            records.push(h.get(k).await);
        }
        let policy = h.store.namespace(&h.ns).await.expect("ns").policy;
        (records, policy)
        // the first handle is dropped here
    };
    let h = H::on(b.open().await, "ns", clock.clone());
    for (k, before) in keys.iter().zip(records) {
        let after = h.get(k).await;
        assert_eq!(after.record, before.record, "{k}");
        assert_eq!(after.events, before.events, "{k}");
    }
    let info = h.store.namespace(&h.ns).await.expect("ns");
    assert_eq!(info.policy, policy);
    assert_eq!(info.policy.retry.max_attempts, 7);
    assert!(!info.paused);
    assert_eq!(h.store.token_count().await.expect("count"), 1);
    assert!(h
        .store
        .find_token(&hash_secret("idem_s"))
        .await
        .expect("find")
        .is_some());
    let alerts = h.store.due_alerts(h.now(), 100, 1000).await.expect("due");
    assert_eq!(alerts.len(), 1, "the needs_review alert survived");
    assert_eq!(
        h.claim(&keys[3]).await.outcome,
        ClaimOutcome::Completed,
        "{}",
        keys[3]
    );
}

// ================================================================ model

pub async fn model_random_operation_sequences_agree_with_the_rules<B: Backend>(b: Arc<B>) {
    super::model::run_model(b.open().await).await;
}

// ================================================================ more races and refusals

pub async fn racing_late_completion_and_reclaim_never_both_win<B: Backend>(b: Arc<B>) {
    let clock = TestClock::new(Timestamp(T0));
    let a = H::on(b.open().await, "ns", clock.clone());
    let c = H::on(b.open().await, "ns", clock.clone());
    let mut wins = BTreeMap::new();
    for i in 0..20 {
        let k = key(&format!("k{i}"));
        let old = a.acquire(&k).await;
        clock.advance_ms(30_000);
        let barrier = Arc::new(Barrier::new(2));
        let (ka, kc, ba, bc) = (k.clone(), k.clone(), barrier.clone(), barrier);
        let (a2, c2) = (a.clone(), c.clone());
        let completer = tokio::spawn(async move {
            ba.wait().await;
            a2.exec(&ka, complete(&old, Some(json!(i)), None), None)
                .await
                .reply
        });
        let claimer = tokio::spawn(async move {
            bc.wait().await;
            c2.claim(&kc).await
        });
        let done = completer.await.expect("task");
        let claim = claimer.await.expect("task");
        let rec = a.rec(&k).await;
        match (&done, claim.outcome) {
            (Ok(_), ClaimOutcome::Completed) => {
                assert_eq!(rec.state, State::Completed);
                assert_eq!(rec.attempt, 1);
                *wins.entry("complete").or_insert(0) += 1;
            }
            (Err(OpError::LeaseLost), ClaimOutcome::Acquired) => {
                assert_eq!(rec.state, State::Processing);
                assert_eq!(rec.attempt, 2);
                *wins.entry("reclaim").or_insert(0) += 1;
            }
            other => panic!("{k}: both or neither won: {other:?}"),
        }
    }
    eprintln!("late completion vs reclaim: {wins:?}");
}

pub async fn concurrent_sweeps_move_each_record_once<B: Backend>(b: Arc<B>) {
    let clock = TestClock::new(Timestamp(T0));
    let mut handles = Vec::new();
    for _ in 0..3 {
        handles.push(H::on(b.open().await, "ns", clock.clone()));
    }
    handles[0]
        .patch(json!({"lease_expiry": "review", "alert_url": "http://127.0.0.1:9/a"}))
        .await;
    let keys: Vec<_> = (0..20).map(|i| key(&format!("k{i}"))).collect();
    for k in &keys {
        handles[0].acquire(k).await;
    }
    clock.advance_ms(30_000);
    let now = clock_now(&clock);
    let mut tasks = Vec::new();
    for h in &handles {
        let store = h.store.clone();
        tasks.push(tokio::spawn(async move {
            let mut moved = 0;
            for _ in 0..20 {
                moved += store
                    .sweep_once(now, 3)
                    .await
                    .expect("sweep")
                    .moved_to_review;
            }
            moved
        }));
    }
    let mut moved = 0;
    for t in tasks {
        moved += t.await.expect("task");
    }
    assert_eq!(moved, 20, "every record moved exactly once");
    for k in &keys {
        let got = handles[1].get(k).await;
        assert_eq!(got.record.state, State::NeedsReview);
        assert_eq!(count(&got.events, EventType::MovedToReview), 1, "{k}");
    }
    let alerts = handles[2]
        .store
        .due_alerts(now, 100, 60_000)
        .await
        .expect("due");
    assert_eq!(alerts.len(), 20);
}

fn clock_now(clock: &TestClock) -> Timestamp {
    use idem_core::Clock;
    clock.now()
}

pub async fn concurrent_alert_senders_never_get_the_same_alert<B: Backend>(b: Arc<B>) {
    let clock = TestClock::new(Timestamp(T0));
    let h = H::on(b.open().await, "ns", clock.clone());
    h.patch(json!({"alert_url": "http://127.0.0.1:9/a"})).await;
    for i in 0..12 {
        into_state(
            &h,
            &key(&format!("k{i}")),
            State::NeedsReview,
            ClaimRequest::default(),
        )
        .await;
    }
    let now = h.now();
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let store = b.open().await;
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for _ in 0..6 {
                ids.extend(
                    store
                        .due_alerts(now, 2, 60_000)
                        .await
                        .expect("due")
                        .into_iter()
                        .map(|a| a.id),
                );
            }
            ids
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("task"));
    }
    let unique: HashSet<_> = all.iter().copied().collect();
    assert_eq!(
        unique.len(),
        all.len(),
        "an alert was handed out twice: {all:?}"
    );
    assert_eq!(unique.len(), 12);
}

pub async fn refused_bad_input_writes_nothing<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    let k = key("k");
    let tok = h.acquire(&k).await;
    let before = h.get(&k).await;
    let e = h
        .exec(
            &k,
            Op::Fail(FailRequest {
                cost: None,
                token: tok.clone(),
                kind: None,
                http_status: Some(302),
                retry_after_ms: None,
                sent: None,
                error: None,
            }),
            None,
        )
        .await;
    assert!(
        matches!(&e.reply, Err(OpError::InvalidField { field, .. }) if field == "http_status"),
        "{:?}",
        e.reply
    );
    assert!(e.events.is_empty());
    assert_eq!(e.alerts_queued, 0);
    let after = h.get(&k).await;
    assert_eq!(after.record, before.record);
    assert_eq!(after.events, before.events);
    // nothing was lost either: the holder can still report
    ok(&h, &k, complete(&tok, None, None)).await;
    // retention works in bounded batches
    h.patch(json!({"retention_ms": 0, "audit_retention_ms": 10_000}))
        .await;
    for i in 0..3 {
        into_state(
            &h,
            &key(&format!("d{i}")),
            State::Completed,
            ClaimRequest::default(),
        )
        .await;
    }
    let mut expired = 0;
    for _ in 0..10 {
        let r = h.store.retention_once(h.now(), 1).await.expect("retention");
        assert!(r.results_expired <= 1 && r.tombstones_deleted <= 1, "{r:?}");
        expired += r.results_expired;
    }
    assert_eq!(expired, 4, "k and d0..d2");
}
