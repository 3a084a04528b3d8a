//! The claim table: what a claim answers in every state of a record (acquire, replay,
//! backoff, reclaim, resume, conflict, in flight, refusals, pause, the daily limit), and that a
//! stored JSON value is replayed with its members in the order they were written.
//!
//! Its cases only read and write the fresh database they are given; they must never share
//! state with another case or depend on the order cases run in.

use std::sync::Arc;

use idem_core::{
    ClaimOutcome, ClaimReply, ClaimRequest, Class, EffectReportRequest, EffectSentRequest,
    EventType, FailErrorInput, FailRequest, LeaseExpiry, Op, Record, Reply, RequestSummary,
    ResolveAction, ResolveRequest, State, Timestamp, Token, Verdict,
};
use idem_store::{ListQuery, NamespaceChange};
use serde_json::{json, Value};

use super::{
    complete, count, fail, fp, heartbeat, into_state, kinds, ok, owned, prepare, record_of,
    result_v, with_fp,
};
use crate::contract::{key, ok_reply, Backend, DAY_MS, H, T0};

// ================================================================ the claim table

/// Asserts that `c` acquired, `resumed` and `reclaimed` as given; its token and record.
fn acquired(c: ClaimReply, resumed: bool, reclaimed: bool) -> (Token, Record) {
    assert_eq!(c.outcome, ClaimOutcome::Acquired);
    assert_eq!(c.resumed, Some(resumed));
    assert_eq!(c.reclaimed, reclaimed);
    (c.token.expect("token"), c.record.expect("record"))
}

/// Asserts that `c` replays a completed record (no token, nothing resumed); that record.
fn replayed_completion(c: ClaimReply) -> Record {
    assert_eq!(c.outcome, ClaimOutcome::Completed);
    assert!(c.outcome.is_replay());
    assert_eq!(c.token, None);
    assert_eq!(c.resumed, None);
    c.record.expect("record")
}

pub async fn claim_of_unseen_key_acquires_and_is_durable<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "payments").await;
    let k = key("evt_123:charge");
    assert!(h.store.get(&h.ns, &k).await.expect("get").is_none());
    let c = h.claim_with(&k, owned("exec-1", "corr-1")).await;
    let (token, rec) = acquired(c, false, false);
    assert_eq!(token.attempt, 1);
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
    let (token, rec) = acquired(h.claim(&k).await, true, false);
    assert_eq!(token.attempt, 2);
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
    let (token, rec) = acquired(h.claim(&k).await, true, true);
    assert_ne!(token.secret(), old);
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
    let rec = replayed_completion(c);
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
            request: None,
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

/// Today's first-time acquisitions in `h`'s namespace, as the console reads them.
async fn acquired_today(h: &H) -> u64 {
    h.store
        .namespace_activity(&h.ns, h.now())
        .await
        .expect("namespace activity")
        .acquired_today
}

/// Today's count is kept whether or not a `daily_limit` is set (the spec's ceiling is of the
/// day's first-time acquisitions, not of those made while it was set): the count read is
/// exact on every path a first-time claim takes (the first claim of a handle that knows
/// nothing of the namespace, the next ones, a claim with an effect's follow-ups), and a limit
/// set later below it refuses the next first-time claim. A ceiling removed and set again the
/// same day counts what was acquired in between.
pub async fn first_time_acquisitions_count_with_or_without_a_limit<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    let other = H::on(h.store.clone(), "other", h.clock.clone());
    other.acquire(&key("o1")).await;
    let tok = h.acquire(&key("k1")).await;
    h.acquire(&key("k2")).await;
    h.acquire(&key("k3")).await;
    let ctx = idem_store::ExecCtx {
        then_prepare: Some(idem_store::ThenPrepare {
            payload: json!({"to": "a@example.com"}),
            approval_required: false,
        }),
        then_sent: Some(RequestSummary {
            method: "POST".into(),
            url: "https://api.example.com/v1/emails".into(),
            idempotency_header: None,
        }),
        lease_id: idem_core::LeaseId::random(),
        jitter: 0.5,
        ..idem_store::ExecCtx::at(h.now())
    };
    let ex = h
        .store
        .execute(&h.ns, &key("e1"), Op::Claim(ClaimRequest::default()), ctx)
        .await
        .expect("claim with follow-ups");
    assert_eq!(
        kinds(&ex.events),
        [EventType::Acquired, EventType::Prepared, EventType::Sent]
    );
    // Neither a replay, nor a later attempt, nor another namespace's claim is first-time.
    assert_eq!(h.claim(&key("k2")).await.outcome, ClaimOutcome::InFlight);
    ok(&h, &key("k1"), fail(&tok, Class::Retryable)).await;
    h.advance(1_000);
    assert_eq!(h.claim(&key("k1")).await.outcome, ClaimOutcome::Acquired);
    assert_eq!(acquired_today(&h).await, 4);
    assert_eq!(acquired_today(&other).await, 1);

    // A ceiling below today's count: the next first-time claim is limited, and writes nothing.
    h.patch(json!({"daily_limit": 3})).await;
    assert_eq!(h.claim(&key("n1")).await.outcome, ClaimOutcome::Limited);
    assert!(h.store.get(&h.ns, &key("n1")).await.expect("get").is_none());
    assert_eq!(acquired_today(&h).await, 4);
    // Above it: acquisitions up to the ceiling, then limited.
    h.patch(json!({"daily_limit": 6})).await;
    assert_eq!(h.claim(&key("n1")).await.outcome, ClaimOutcome::Acquired);
    assert_eq!(h.claim(&key("n2")).await.outcome, ClaimOutcome::Acquired);
    assert_eq!(h.claim(&key("n3")).await.outcome, ClaimOutcome::Limited);
    assert_eq!(acquired_today(&h).await, 6);
    // Removed, two more, set again: the two count.
    h.patch(json!({"daily_limit": null})).await;
    h.acquire(&key("m1")).await;
    h.acquire(&key("m2")).await;
    assert_eq!(acquired_today(&h).await, 8);
    h.patch(json!({"daily_limit": 9})).await;
    assert_eq!(h.claim(&key("m3")).await.outcome, ClaimOutcome::Acquired);
    assert_eq!(h.claim(&key("m4")).await.outcome, ClaimOutcome::Limited);
    assert_eq!(acquired_today(&h).await, 9);
    // The next UTC day starts at zero.
    h.clock.set(Timestamp(T0 + 14 * 3_600_000));
    assert_eq!(acquired_today(&h).await, 0);
    assert_eq!(h.claim(&key("m4")).await.outcome, ClaimOutcome::Acquired);
    assert_eq!(acquired_today(&h).await, 1);
}
