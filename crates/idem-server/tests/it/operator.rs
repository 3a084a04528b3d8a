use serde_json::json;

use idem_testkit::app::*;

async fn to_review(app: &TestApp, ns: &str, key: &str) {
    let t = Api::acquired(&app.claim(ns, key, json!({})).await);
    let r = app
        .fail(ns, key, json!({"token": t, "http_status": 502}))
        .await;
    assert_eq!(r.body["state"], "needs_review", "{}", r.text);
}

#[tokio::test]
async fn list_filters_by_state_and_pages_with_a_cursor() {
    let app = spawn_app().await;
    for i in 0..5 {
        to_review(&app, "ns", &format!("r{i}")).await;
        app.advance(10);
    }
    Api::acquired(&app.claim("ns", "busy", json!({})).await);
    let all = app.list("ns", "").await;
    assert_eq!(all.status, 200, "{}", all.text);
    assert_eq!(all.body["items"].as_array().map(Vec::len), Some(6));
    assert_eq!(all.body["next_cursor"], json!(null));
    assert_eq!(all.body["items"][0]["key"], "busy"); // newest first
    let mut seen = vec![];
    let mut cursor: Option<String> = None;
    loop {
        let q = match &cursor {
            Some(c) => format!("state=needs_review&limit=2&cursor={c}"),
            None => "state=needs_review&limit=2".into(),
        };
        let page = app.list("ns", &q).await;
        assert_eq!(page.status, 200, "{}", page.text);
        for it in page.body["items"].as_array().expect("items") {
            assert_eq!(it["state"], "needs_review");
            seen.push(it["key"].as_str().expect("key").to_owned());
        }
        match page.body["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    assert_eq!(seen, ["r4", "r3", "r2", "r1", "r0"]);
    assert_eq!(
        app.list("ns", "state=bogus")
            .await
            .problem(422, "invalid_field")["field"],
        "state"
    );
    assert_eq!(
        app.list("ns", "limit=0")
            .await
            .problem(422, "invalid_field")["field"],
        "limit"
    );
    assert_eq!(
        app.list("ns", "limit=1001")
            .await
            .problem(422, "invalid_field")["field"],
        "limit"
    );
    assert_eq!(
        app.list("ns", "cursor=zz")
            .await
            .problem(422, "invalid_field")["field"],
        "cursor"
    );
}

#[tokio::test]
async fn a_made_up_cursor_is_invalid_on_every_store_never_a_server_error() {
    for backend in backends() {
        let app = spawn_on(backend).await;
        assert_eq!(app.claim("ns", "k", json!({})).await.status, 201);
        // Hex of "61620405\n" + a key with a vertical tab, NUL and CR: PostgreSQL cannot
        // compare a NUL (this was a 500 there), so no such cursor reaches a store.
        for cursor in ["36313632303430350A0b000D", "350a", "350a612062"] {
            let r = app.list("ns", &format!("cursor={cursor}")).await;
            assert_eq!(
                r.problem(422, "invalid_field")["field"],
                "cursor",
                "{backend:?} {cursor}"
            );
        }
        // A cursor the server handed out still pages.
        assert_eq!(app.claim("ns", "k2", json!({})).await.status, 201);
        let page = app.list("ns", "limit=1").await;
        let next = page.body["next_cursor"]
            .as_str()
            .expect("cursor")
            .to_owned();
        let r = app.list("ns", &format!("limit=1&cursor={next}")).await;
        assert_eq!(r.status, 200, "{backend:?}: {}", r.text);
        assert_eq!(r.body["items"].as_array().map(Vec::len), Some(1));
    }
}

#[tokio::test]
async fn resolve_records_who_and_why() {
    let app = spawn_app().await;
    to_review(&app, "ns", "k").await;
    let r = app.resolve("ns", "k", json!({"action": "completed"})).await;
    assert_eq!(r.problem(422, "invalid_field")["field"], "note");
    let r = app
        .resolve("ns", "k", json!({"action": "undo", "note": "x"}))
        .await;
    assert_eq!(r.problem(422, "invalid_field")["field"], "action");
    let r = app
        .resolve(
            "ns",
            "k",
            json!({"action": "completed", "note": "x", "why": 1}),
        )
        .await;
    assert_eq!(r.problem(400, "unknown_field")["field"], "why");
    assert_eq!(app.event_types("ns", "k").await, ["acquired", "failed"]);
    let r = app
        .resolve(
            "ns",
            "k",
            json!({"action": "completed", "external_ref": "ch_9", "note": "found it in Stripe"}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["state"], "completed");
    assert_eq!(r.body["record"]["external_ref"], "ch_9");
    let rec = app.record("ns", "k").await;
    let last = rec.body["events"]
        .as_array()
        .and_then(|e| e.last())
        .cloned()
        .expect("event");
    assert_eq!(last["type"], "resolved");
    assert_eq!(last["note"], "found it in Stripe");
    assert_eq!(last["from_state"], "needs_review");
    assert_eq!(last["to_state"], "completed");
    // From completed: invalid transition; unknown key: 404.
    app.resolve("ns", "k", json!({"action": "retry", "note": "x"}))
        .await
        .problem(409, "invalid_transition");
    app.resolve("ns", "nope", json!({"action": "retry", "note": "x"}))
        .await
        .problem(404, "not_found");
}

#[tokio::test]
async fn resolve_refuses_a_record_whose_lease_is_held() {
    let app = spawn_app().await;
    Api::acquired(&app.claim("ns", "k", json!({})).await);
    app.resolve(
        "ns",
        "k",
        json!({"action": "failed_permanent", "note": "x"}),
    )
    .await
    .problem(409, "invalid_transition");
}

#[tokio::test]
async fn resolve_retry_gives_a_fresh_budget() {
    let app = spawn_app().await;
    to_review(&app, "ns", "k").await;
    let r = app
        .resolve(
            "ns",
            "k",
            json!({"action": "retry", "note": "destination fixed"}),
        )
        .await;
    assert_eq!(r.body["state"], "failed_retryable", "{}", r.text);
    let c = app.claim("ns", "k", json!({})).await;
    Api::acquired(&c);
    assert_eq!(c.body["resumed"], true);
    assert_eq!(c.body["record"]["attempt"], 2);
}

#[tokio::test]
async fn derive_builds_stable_keys() {
    let app = spawn_app().await;
    let r = app
        .derive(json!({"event": {"id": "evt_1", "type": "x"}, "fields": ["/id"], "suffix": "crm"}))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body, json!({"key": "evt_1:crm"}));
    let r = app
        .derive(json!({"event": {"email": "ann@example.com"}, "fields": ["/email"], "prefix": "signup"}))
        .await;
    let key = r.body["key"].as_str().expect("key");
    assert!(key.starts_with("signup:") && !key.contains('@') && key.len() == 7 + 64);
    let r = app
        .derive(json!({"event": {"id": null}, "fields": ["/id"]}))
        .await;
    assert_eq!(r.problem(422, "missing_identity_field")["field"], "/id");
    let r = app
        .derive(json!({"event": {}, "fields": ["/order/id"]}))
        .await;
    assert_eq!(
        r.problem(422, "missing_identity_field")["field"],
        "/order/id"
    );
    let r = app
        .derive(json!({"event": {"id": 1}, "fields": ["id"]}))
        .await;
    assert_eq!(r.problem(422, "invalid_field")["field"], "fields[0]");
    // `~2` is no RFC 6901 escape: an invalid pointer, even when a member of that spelling
    // exists (serde_json alone would have looked it up literally).
    let r = app
        .derive(json!({"event": {"data": {"~2bad": "x"}}, "fields": ["/data/~2bad"]}))
        .await;
    let p = r.problem(422, "invalid_field");
    assert_eq!(p["field"], "fields[0]");
    assert!(
        p["detail"]
            .as_str()
            .is_some_and(|d| d.contains("/data/~2bad")),
        "{p}"
    );
    let r = app.derive(json!({"event": {"id": 1}, "fields": []})).await;
    assert_eq!(r.problem(422, "invalid_field")["field"], "fields");
    let r = app.derive(json!({"event": {"id": 1}})).await;
    assert_eq!(r.problem(422, "invalid_field")["field"], "fields");
    let r = app.derive(json!({"fields": ["/id"]})).await;
    assert_eq!(r.problem(422, "invalid_field")["field"], "event");
    let r = app
        .derive(json!({"event": {}, "fields": ["/id"], "salt": 1}))
        .await;
    assert_eq!(r.problem(400, "unknown_field")["field"], "salt");
}
