//! The failure drills of issue 5, over HTTP. Each counts the side effects at a local
//! "destination" and checks the ledger tells the story.

use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;

use idem_testkit::app::*;

/// A destination that counts the effects it committed and the requests it received.
#[derive(Default)]
struct Destination {
    effects: AtomicUsize,
    requests: AtomicUsize,
}

impl Destination {
    fn commit(&self) {
        self.requests.fetch_add(1, Ordering::SeqCst);
        self.effects.fetch_add(1, Ordering::SeqCst);
    }
    fn refuse(&self) {
        self.requests.fetch_add(1, Ordering::SeqCst);
    }
    fn effects(&self) -> usize {
        self.effects.load(Ordering::SeqCst)
    }
    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

async fn events(app: &TestApp, ns: &str, key: &str) -> Vec<String> {
    app.event_types(ns, key).await
}

#[tokio::test]
async fn drill_failure_before_the_write_is_retried_and_runs_once() {
    let app = spawn_app().await;
    let dest = Destination::default();
    let t = Api::acquired(
        &app.claim("pay", "evt_1:charge", json!({"payload": {"amount": 5}}))
            .await,
    );
    // Connection refused: the request never left, nothing happened.
    let f = app
        .fail("pay", "evt_1:charge", json!({"token": t, "sent": false, "error": {"category": "connection", "message": "ECONNREFUSED"}}))
        .await;
    assert_eq!(f.body["state"], "failed_retryable", "{}", f.text);
    assert_eq!(f.body["class"], "retryable");
    assert_eq!(f.body["retry"]["allowed"], true);
    app.advance(2000); // past not_before (backoff for attempt 1 is at most base_ms = 1 s)
    let c = app
        .claim("pay", "evt_1:charge", json!({"payload": {"amount": 5}}))
        .await;
    let t2 = Api::acquired(&c);
    assert_eq!(c.body["resumed"], true);
    assert_eq!(c.body["record"]["attempt"], 2);
    dest.commit();
    app.complete(
        "pay",
        "evt_1:charge",
        json!({"token": t2, "external_ref": "ch_1"}),
    )
    .await;
    // Redelivery of the event: replay, no second effect.
    let again = app
        .claim("pay", "evt_1:charge", json!({"payload": {"amount": 5}}))
        .await;
    assert_eq!(again.body["outcome"], "completed");
    assert_eq!(dest.effects(), 1);
    assert_eq!(
        events(&app, "pay", "evt_1:charge").await,
        [
            "acquired",
            "failed",
            "resumed",
            "completed",
            "duplicate_hit"
        ]
    );
}

#[tokio::test]
async fn drill_timeout_after_the_destination_committed_goes_to_a_person() {
    let app = spawn_app().await;
    let dest = Destination::default();
    let t = Api::acquired(&app.claim("pay", "evt_2:charge", json!({})).await);
    dest.commit(); // the charge went through, but the answer never came back
    let f = app
        .fail("pay", "evt_2:charge", json!({"token": t, "error": {"category": "timeout", "message": "read timeout after 30s"}}))
        .await;
    assert_eq!(f.body["state"], "needs_review", "{}", f.text);
    assert_eq!(f.body["class"], "ambiguous");
    assert_eq!(f.body["retry"]["allowed"], false);
    // Retries of the workflow do not run it again.
    for _ in 0..3 {
        let c = app.claim("pay", "evt_2:charge", json!({})).await;
        assert_eq!(
            (c.status, c.body["outcome"].as_str()),
            (409, Some("needs_review"))
        );
    }
    let queue = app.list("pay", "state=needs_review").await;
    assert_eq!(queue.body["items"][0]["key"], "evt_2:charge");
    assert_eq!(queue.body["items"][0]["last_error"]["category"], "timeout");
    // The operator finds the charge at the provider and resolves it.
    let r = app
        .resolve("pay", "evt_2:charge", json!({"action": "completed", "external_ref": "ch_42", "note": "charge found in the Stripe dashboard"}))
        .await;
    assert_eq!(r.body["state"], "completed", "{}", r.text);
    let c = app.claim("pay", "evt_2:charge", json!({})).await;
    assert_eq!(c.body["outcome"], "completed");
    assert_eq!(c.body["record"]["external_ref"], "ch_42");
    assert_eq!(dest.effects(), 1);
    assert_eq!(
        events(&app, "pay", "evt_2:charge").await,
        ["acquired", "failed", "resolved", "duplicate_hit"]
    );
}

#[tokio::test]
async fn drill_worker_stops_holding_the_lease_reclaim_resumes_and_fences_the_old_token() {
    let app = spawn_app().await;
    let dest = Destination::default();
    let t1 = Api::acquired(
        &app.claim(
            "crm",
            "order-9:create",
            json!({"lease_ms": 5000, "owner": "exec-1"}),
        )
        .await,
    );
    // Worker 1 stops (crash) before the effect. The lease runs out.
    app.advance(6000);
    let c = app
        .claim("crm", "order-9:create", json!({"owner": "exec-2"}))
        .await;
    let t2 = Api::acquired(&c);
    assert_eq!(c.body["resumed"], true);
    assert_eq!(c.body["record"]["attempt"], 2);
    assert_ne!(t1, t2);
    dest.commit();
    assert_eq!(
        app.complete(
            "crm",
            "order-9:create",
            json!({"token": t2, "external_ref": "crm-1"})
        )
        .await
        .status,
        200
    );
    // Worker 1 wakes up: fenced.
    app.complete(
        "crm",
        "order-9:create",
        json!({"token": t1, "external_ref": "crm-2"}),
    )
    .await
    .problem(409, "lease_lost");
    assert_eq!(dest.effects(), 1);
    assert_eq!(
        events(&app, "crm", "order-9:create").await,
        ["acquired", "resumed", "completed", "lease_lost"]
    );
}

#[tokio::test]
async fn drill_worker_stops_holding_the_lease_review_policy_asks_a_person() {
    let app = spawn_app().await;
    let dest = Destination::default();
    app.patch_namespace("pay", json!({"lease_expiry": "review"}))
        .await;
    Api::acquired(
        &app.claim("pay", "evt_3:charge", json!({"lease_ms": 5000}))
            .await,
    );
    dest.commit(); // it may or may not have charged before it died: here it did
    app.advance(6000);
    let c = app.claim("pay", "evt_3:charge", json!({})).await;
    assert_eq!(
        (c.status, c.body["outcome"].as_str()),
        (409, Some("needs_review"))
    );
    assert_eq!(c.body["record"]["state"], "needs_review");
    assert_eq!(dest.effects(), 1);
    assert_eq!(
        events(&app, "pay", "evt_3:charge").await,
        ["acquired", "moved_to_review"]
    );
}

#[tokio::test]
async fn drill_review_queue_fills_from_the_janitor_without_a_retry() {
    let app = spawn_app().await;
    app.patch_namespace("pay", json!({"lease_expiry": "review"}))
        .await;
    Api::acquired(
        &app.claim("pay", "evt_4:charge", json!({"lease_ms": 1000}))
            .await,
    );
    app.advance(2000);
    let rep = idem_server::background::janitor_once(&app.store, app.now(), 100)
        .await
        .expect("janitor");
    assert_eq!(rep.moved_to_review, 1);
    let q = app.list("pay", "state=needs_review").await;
    assert_eq!(q.body["items"].as_array().map(Vec::len), Some(1));
}

#[tokio::test]
async fn drill_expired_claim_late_holder_is_refused_before_its_effect() {
    let app = spawn_app().await;
    let dest = Destination::default();
    let t1 = Api::acquired(
        &app.claim("mail", "welcome:u1", json!({"lease_ms": 2000}))
            .await,
    );
    // Worker 1 is slow; its claim expires and another delivery takes over and sends.
    app.advance(3000);
    let t2 = Api::acquired(&app.claim("mail", "welcome:u1", json!({})).await);
    dest.commit();
    app.complete("mail", "welcome:u1", json!({"token": t2}))
        .await;
    // Worker 1 checks its lease (heartbeat) before sending: refused, so it does not send.
    let hb = app
        .heartbeat("mail", "welcome:u1", json!({"token": t1}))
        .await;
    hb.problem(409, "lease_lost");
    assert_eq!(dest.effects(), 1);
    // A holder whose lease expired but whom nobody replaced may still land its result.
    let t3 = Api::acquired(
        &app.claim("mail", "welcome:u2", json!({"lease_ms": 1000}))
            .await,
    );
    dest.commit();
    app.advance(5000);
    let late = app
        .complete("mail", "welcome:u2", json!({"token": t3}))
        .await;
    assert_eq!(late.body["state"], "completed", "{}", late.text);
    assert_eq!(dest.effects(), 2); // one per key
}

#[tokio::test]
async fn drill_retry_budget_exhausted_goes_to_review_then_runs_once() {
    let app = spawn_app().await;
    let dest = Destination::default();
    app.patch_namespace("crm", json!({"retry": {"max_attempts": 3}}))
        .await;
    let mut last = json!(null);
    for attempt in 1..=3 {
        let c = app.claim("crm", "lead-7:create", json!({})).await;
        let t = Api::acquired(&c);
        assert_eq!(c.body["record"]["attempt"], attempt);
        dest.refuse(); // 503 from the CRM
        let f = app
            .fail(
                "crm",
                "lead-7:create",
                json!({"token": t, "http_status": 503}),
            )
            .await;
        last = f.body.clone();
        app.advance(10 * 60_000);
    }
    assert_eq!(last["state"], "needs_review");
    assert_eq!(last["retry"]["allowed"], false);
    assert_eq!(last["retry"]["attempt"], 3);
    assert_eq!(last["retry"]["max_attempts"], 3);
    let c = app.claim("crm", "lead-7:create", json!({})).await;
    assert_eq!(c.body["outcome"], "needs_review");
    assert_eq!(dest.effects(), 0);
    // The operator fixes the CRM and gives it a fresh budget; it runs exactly once.
    app.resolve(
        "crm",
        "lead-7:create",
        json!({"action": "retry", "note": "CRM back up"}),
    )
    .await;
    let t = Api::acquired(&app.claim("crm", "lead-7:create", json!({})).await);
    dest.commit();
    app.complete("crm", "lead-7:create", json!({"token": t}))
        .await;
    assert_eq!(
        app.claim("crm", "lead-7:create", json!({})).await.body["outcome"],
        "completed"
    );
    assert_eq!(dest.effects(), 1);
    assert_eq!(dest.requests(), 4);
}

#[tokio::test]
async fn drill_revoked_credential_is_permanent_and_never_retried() {
    let app = spawn_app().await;
    let dest = Destination::default();
    let t = Api::acquired(&app.claim("mail", "digest:2026-06-22", json!({})).await);
    dest.refuse(); // 401: the API key was revoked
    let f = app
        .fail("mail", "digest:2026-06-22", json!({"token": t, "http_status": 401, "error": {"category": "auth", "message": "invalid api key"}}))
        .await;
    assert_eq!(f.body["state"], "failed_permanent", "{}", f.text);
    assert_eq!(f.body["class"], "permanent");
    assert_eq!(f.body["retry"]["allowed"], false);
    app.advance(3_600_000);
    for _ in 0..3 {
        let c = app.claim("mail", "digest:2026-06-22", json!({})).await;
        assert_eq!(c.body["outcome"], "failed_permanent");
        assert_eq!(c.header("idempotent-replayed"), Some("true"));
        assert_eq!(c.body["record"]["last_error"]["http_status"], 401);
    }
    assert_eq!(dest.requests(), 1);
    assert_eq!(dest.effects(), 0);
}
