use serde_json::json;

use idem_testkit::app::*;

#[tokio::test]
async fn prepare_then_approval_then_delivery_with_the_saved_payload() {
    let app = spawn_app().await;
    let t = Api::acquired(&app.claim("mail", "order-1:followup", json!({})).await);
    let r = app
        .prepare(
            "mail",
            "order-1:followup",
            json!({"token": t, "payload": {"draft": "Hi"}, "approval_required": true}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["state"], "awaiting_approval");
    assert_eq!(r.body["record"]["prepared_payload"], json!({"draft": "Hi"}));
    let c = app.claim("mail", "order-1:followup", json!({})).await;
    assert_eq!(
        (c.status, c.body["outcome"].as_str()),
        (409, Some("awaiting_approval"))
    );
    let a = app
        .approve("mail", "order-1:followup", json!({"note": "looks good"}))
        .await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert_eq!(a.body["state"], "prepared");
    let c = app.claim("mail", "order-1:followup", json!({})).await;
    let t2 = Api::acquired(&c);
    assert_eq!(c.body["resumed"], true);
    assert_eq!(c.body["record"]["state"], "prepared");
    assert_eq!(c.body["record"]["attempt"], 2);
    assert_eq!(c.body["record"]["prepared_payload"], json!({"draft": "Hi"}));
    let done = app
        .complete("mail", "order-1:followup", json!({"token": t2}))
        .await;
    assert_eq!(done.body["state"], "completed");
    let ev = app.event_types("mail", "order-1:followup").await;
    assert_eq!(
        ev,
        ["acquired", "prepared", "approved", "resumed", "completed"]
    );
}

#[tokio::test]
async fn prepare_without_approval_and_reject_path() {
    let app = spawn_app().await;
    let t = Api::acquired(&app.claim("m", "a", json!({})).await);
    let r = app
        .prepare("m", "a", json!({"token": t, "payload": "text"}))
        .await;
    assert_eq!(r.body["state"], "prepared", "{}", r.text);
    let t = Api::acquired(&app.claim("m", "b", json!({})).await);
    app.prepare(
        "m",
        "b",
        json!({"token": t, "payload": 1, "approval_required": true}),
    )
    .await;
    let r = app.reject("m", "b", json!({})).await;
    assert_eq!(r.body["state"], "failed_permanent", "{}", r.text);
    // approve/reject outside awaiting_approval
    app.approve("m", "b", json!({}))
        .await
        .problem(409, "invalid_transition");
    app.approve("m", "nope", json!({}))
        .await
        .problem(404, "not_found");
}

#[tokio::test]
async fn prepare_bad_input() {
    let app = spawn_app().await;
    let t = Api::acquired(&app.claim("m", "a", json!({})).await);
    let r = app.prepare("m", "a", json!({"token": t})).await;
    assert_eq!(r.problem(422, "invalid_field")["field"], "payload");
    let r = app
        .prepare(
            "m",
            "a",
            json!({"token": t, "payload": 1, "approval_required": "yes"}),
        )
        .await;
    assert_eq!(
        r.problem(422, "invalid_field")["field"],
        "approval_required"
    );
    let r = app.prepare("m", "a", json!({"payload": 1})).await;
    assert_eq!(r.problem(422, "invalid_field")["field"], "token");
    let r = app
        .prepare("m", "a", json!({"token": t, "payload": 1, "x": 1}))
        .await;
    assert_eq!(r.problem(400, "unknown_field")["field"], "x");
    let r = app
        .post_raw(&format!("{}/prepare", Api::key_path("m", "a")), "")
        .await;
    r.problem(400, "invalid_json");
    assert_eq!(app.event_types("m", "a").await, ["acquired"]);
}

#[tokio::test]
async fn heartbeat_extends_the_lease_and_stale_tokens_lose() {
    let app = spawn_app().await;
    let r = app.claim("ns", "k", json!({"lease_ms": 1000})).await;
    let t = Api::acquired(&r);
    let before = r.body["record"]["lease_expires_at"].clone();
    let h = app
        .heartbeat("ns", "k", json!({"token": t, "lease_ms": 60_000}))
        .await;
    assert_eq!(h.status, 200, "{}", h.text);
    assert_eq!(h.body["state"], "processing");
    assert_ne!(h.body["record"]["lease_expires_at"], before);
    let r = app
        .heartbeat("ns", "k", json!({"token": t, "lease_ms": 0}))
        .await;
    assert_eq!(r.problem(422, "invalid_field")["field"], "lease_ms");
    let fake = format!("1.{}", "0".repeat(32));
    app.heartbeat("ns", "k", json!({"token": fake}))
        .await
        .problem(409, "lease_lost");
    app.complete("ns", "k", json!({"token": "made-up"}))
        .await
        .problem(409, "lease_lost");
    let ev = app.event_types("ns", "k").await;
    assert_eq!(ev, ["acquired", "lease_lost", "lease_lost"]);
    app.heartbeat("ns", "unknown", json!({"token": t}))
        .await
        .problem(404, "not_found");
}

#[tokio::test]
async fn repeating_complete_is_a_no_op_and_a_different_result_is_a_mismatch() {
    let app = spawn_app().await;
    let t = Api::acquired(&app.claim("ns", "k", json!({})).await);
    let body = json!({"token": t, "result": {"id": 7}, "external_ref": "crm-7"});
    assert_eq!(app.complete("ns", "k", body.clone()).await.status, 200);
    let again = app.complete("ns", "k", body).await;
    assert_eq!(again.status, 200);
    assert_eq!(again.body["state"], "completed");
    let r = app
        .complete(
            "ns",
            "k",
            json!({"token": t, "result": {"id": 8}, "external_ref": "crm-7"}),
        )
        .await;
    r.problem(409, "result_mismatch");
    assert_eq!(r.body["field"], "result", "{}", r.text);
    // The same result with another external_ref names that field; both differing names the
    // result.
    let r = app
        .complete(
            "ns",
            "k",
            json!({"token": t, "result": {"id": 7}, "external_ref": "crm-8"}),
        )
        .await;
    r.problem(409, "result_mismatch");
    assert_eq!(r.body["field"], "external_ref", "{}", r.text);
    let r = app
        .complete(
            "ns",
            "k",
            json!({"token": t, "result": {"id": 8}, "external_ref": "crm-8"}),
        )
        .await;
    assert_eq!(r.body["field"], "result", "{}", r.text);
    let r = app
        .complete(
            "ns",
            "k",
            json!({"token": t, "external_ref": "x".repeat(513)}),
        )
        .await;
    assert_eq!(r.problem(422, "invalid_field")["field"], "external_ref");
    assert_eq!(app.event_types("ns", "k").await, ["acquired", "completed"]);
}

#[tokio::test]
async fn fail_states_its_decision() {
    let app = spawn_app().await;
    let t = Api::acquired(&app.claim("ns", "k", json!({})).await);
    let r = app
        .fail("ns", "k", json!({"token": t, "http_status": 503, "retry_after": "120", "error": {"category": "http", "message": "unavailable"}}))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["state"], "failed_retryable");
    assert_eq!(r.body["class"], "retryable");
    let retry = &r.body["retry"];
    assert_eq!(retry["allowed"], true);
    assert_eq!(retry["attempt"], 1);
    assert_eq!(retry["max_attempts"], 5);
    assert!(retry["not_before"].is_string());
    assert_eq!(r.body["record"]["not_before"], retry["not_before"]);
    // Retry-After is honoured: no retry sooner than 120 s.
    let c = app.claim("ns", "k", json!({})).await;
    assert_eq!(c.body["outcome"], "backoff");
    assert!(
        c.body["retry_after_ms"]
            .as_i64()
            .is_some_and(|ms| ms > 110_000),
        "{}",
        c.text
    );
    assert!(c.header("retry-after").is_some());
    // A second fail with the same token is an invalid transition.
    let r = app
        .fail("ns", "k", json!({"token": t, "kind": "permanent"}))
        .await;
    r.problem(409, "invalid_transition");
}

/// RFC 9110 makes a recipient accept all three HTTP-date forms, not only IMF-fixdate.
#[tokio::test]
async fn fail_accepts_rfc850_and_asctime_retry_after_dates() {
    let app = spawn_app().await;
    // Ten minutes after the server's clock, whole seconds (HTTP-dates have no fraction).
    let at = chrono::DateTime::from_timestamp(app.now().millis() / 1000 + 600, 0).expect("a date");
    let forms = [
        ("rfc850", at.format("%A, %d-%b-%y %H:%M:%S GMT").to_string()),
        ("asctime", at.format("%a %b %e %H:%M:%S %Y").to_string()),
    ];
    for (key, date) in forms {
        let t = Api::acquired(&app.claim("ns", key, json!({})).await);
        let r = app
            .fail(
                "ns",
                key,
                json!({"token": t, "http_status": 503, "retry_after": date}),
            )
            .await;
        assert_eq!(r.status, 200, "{date}: {}", r.text);
        assert_eq!(r.body["state"], "failed_retryable", "{date}");
        let c = app.claim("ns", key, json!({})).await;
        assert_eq!(c.body["outcome"], "backoff", "{date}: {}", c.text);
        let ms = c.body["retry_after_ms"].as_i64().unwrap_or_default();
        assert!(
            (590_000..=600_000).contains(&ms),
            "{date}: honoured as {ms} ms"
        );
    }
}

#[tokio::test]
async fn fail_bad_input_writes_nothing() {
    let app = spawn_app().await;
    let t = Api::acquired(&app.claim("ns", "k", json!({})).await);
    let cases = [
        (json!({"token": t, "http_status": 302}), "http_status"),
        (json!({"token": t, "http_status": 200}), "http_status"),
        (json!({"token": t, "http_status": 99}), "http_status"),
        (json!({"token": t, "http_status": "500"}), "http_status"),
        (json!({"token": t}), "kind"),
        (json!({"token": t, "kind": "maybe"}), "kind"),
        (
            json!({"token": t, "http_status": 503, "retry_after": "soon"}),
            "retry_after",
        ),
        (
            json!({"token": t, "http_status": 503, "retry_after": -5}),
            "retry_after",
        ),
        (
            json!({"token": t, "http_status": 503, "sent": "no"}),
            "sent",
        ),
        (
            json!({"token": t, "error": {"message": "x"}}),
            "error.category",
        ),
        (
            json!({"token": t, "error": {"category": "weird"}}),
            "error.category",
        ),
        (json!({"token": t, "error": "boom"}), "error"),
    ];
    for (body, field) in cases {
        let r = app.fail("ns", "k", body.clone()).await;
        assert_eq!(r.problem(422, "invalid_field")["field"], field, "{body}");
    }
    let r = app
        .fail(
            "ns",
            "k",
            json!({"token": t, "error": {"category": "timeout", "stack": "…"}}),
        )
        .await;
    assert_eq!(r.problem(400, "unknown_field")["field"], "error.stack");
    let rec = app.record("ns", "k").await;
    assert_eq!(rec.body["record"]["state"], "processing");
    assert_eq!(rec.body["record"]["last_error"], json!(null));
    assert_eq!(app.event_types("ns", "k").await, ["acquired"]);
    // HTTP-date Retry-After is accepted.
    let r = app
        .fail(
            "ns",
            "k",
            json!({"token": t, "http_status": 429, "retry_after": "Wed, 21 Oct 2015 07:28:00 GMT"}),
        )
        .await;
    assert_eq!(r.body["state"], "failed_retryable", "{}", r.text);
}
