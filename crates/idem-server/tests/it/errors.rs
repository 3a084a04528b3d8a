use serde_json::json;

use idem_testkit::app::*;

#[tokio::test]
async fn unknown_routes_are_404_problems() {
    let app = spawn_app().await;
    app.get("/nope").await.problem(404, "not_found");
    app.post("/v1/namespaces/ns/keys/a/b/claim", json!({}))
        .await
        .problem(404, "not_found");
    app.post("/v2/claim", json!({}))
        .await
        .problem(404, "not_found");
    let r = app
        .get(&format!("{}/claim", Api::key_path("ns", "k")))
        .await;
    assert_eq!(r.status, 405);
    assert_eq!(r.body["code"], "method_not_allowed");
}

#[tokio::test]
async fn graceful_shutdown_finishes_and_returns_ok() {
    let app = spawn_app().await;
    Api::acquired(&app.claim("ns", "k", json!({})).await);
    // A long poll in progress is answered at shutdown, not cut.
    let api = app.api.clone();
    let waiter = tokio::spawn(async move { api.claim("ns", "k", json!({"wait_ms": 30000})).await });
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let started = std::time::Instant::now();
    app.stop().await.expect("clean stop");
    let r = waiter.await.expect("join");
    assert_eq!(r.body["outcome"], "in_flight");
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}

#[tokio::test]
async fn a_nul_in_a_stored_string_is_an_invalid_field_on_every_store() {
    for backend in backends() {
        let app = spawn_on(backend).await;
        // PostgreSQL text cannot hold U+0000 (these were 500s there): refused alike everywhere.
        let r = app.claim("ns", "k", json!({"owner": "a\u{0}b"})).await;
        assert_eq!(
            r.problem(422, "invalid_field")["field"],
            "owner",
            "{backend:?}"
        );
        let r = app
            .claim("ns", "k", json!({"correlation_id": "c\u{0}"}))
            .await;
        assert_eq!(r.problem(422, "invalid_field")["field"], "correlation_id");
        app.record("ns", "k").await.problem(404, "not_found");
        let t = Api::acquired(&app.claim("ns", "k", json!({})).await);
        let r = app
            .complete("ns", "k", json!({"token": t, "external_ref": "x\u{0}"}))
            .await;
        assert_eq!(r.problem(422, "invalid_field")["field"], "external_ref");
        let r = app
            .fail(
                "ns",
                "k",
                json!({"token": t, "kind": "ambiguous", "error": {"category": "x\u{0}"}}),
            )
            .await;
        assert_eq!(r.problem(422, "invalid_field")["field"], "error.category");
        // An error message is sanitized, not refused: the failure report is kept.
        let r = app
            .fail(
                "ns",
                "k",
                json!({"token": t, "kind": "ambiguous",
                       "error": {"category": "timeout", "message": "m\u{0}n"}}),
            )
            .await;
        assert_eq!(r.status, 200, "{backend:?}: {}", r.text);
        assert_eq!(r.body["record"]["last_error"]["message"], "m n");
        let r = app
            .resolve("ns", "k", json!({"action": "retry", "note": "n\u{0}"}))
            .await;
        assert_eq!(r.problem(422, "invalid_field")["field"], "note");
        let r = app
            .post("/v1/namespaces/ns/pause", json!({"note": "n\u{0}"}))
            .await;
        assert_eq!(r.problem(422, "invalid_field")["field"], "note");
        assert_eq!(
            app.namespace("ns").await.body["paused"],
            false,
            "{backend:?}"
        );
    }
}
