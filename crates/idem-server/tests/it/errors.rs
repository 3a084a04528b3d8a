use serde_json::json;

use crate::helpers::*;

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
