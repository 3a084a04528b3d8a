//! `POST /v1/audit`: exported workflows in, findings out; bad bodies as problem+json.

use std::path::Path;

use idem::Role;
use serde_json::{json, Value};

use idem_testkit::app::{spawn_app, spawn_with, Options};

fn fixture(name: &str) -> Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../idem-audit/tests/fixtures")
        .join(name);
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).expect("fixture is JSON")
}

fn rules(body: &Value) -> Vec<&str> {
    body["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter_map(|f| f["rule"].as_str())
        .collect()
}

#[tokio::test]
async fn audit_answers_the_findings_of_one_workflow() {
    let app = spawn_app().await;
    let r = app
        .post("/v1/audit", fixture("idem001-ungated-gmail.json"))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(rules(&r.body), ["IDEM001", "IDEM001", "IDEM016"]);
    let f = &r.body["findings"][0];
    assert_eq!(f["severity"], "error");
    assert_eq!(f["node"], "Send receipt");
    assert_eq!(f["workflow"], "Order paid → receipt email (no gate)");
    assert_eq!(f["workflow_id"], "fxIdem001a");
    assert!(f["fix"].as_str().is_some_and(|s| !s.is_empty()));
    assert_eq!(r.body["findings"][2]["node"], Value::Null);
    let clean = app
        .post("/v1/audit", fixture("good-webhook-claim-receipt.json"))
        .await;
    assert_eq!(clean.status, 200);
    assert_eq!(clean.body, json!({"findings": []}));
}

#[tokio::test]
async fn audit_takes_an_array_of_workflows() {
    let app = spawn_app().await;
    let r = app
        .post("/v1/audit", fixture("idem003-unstable-keys.json"))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let workflows: Vec<&str> = r.body["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter(|f| f["rule"] == "IDEM003")
        .filter_map(|f| f["workflow"].as_str())
        .collect();
    assert_eq!(workflows.len(), 3, "{}", r.text);
}

/// Windows editors save exports with a byte order mark; `idem audit FILE` skips it, and so
/// does the endpoint: exactly one, at the very start.
#[tokio::test]
async fn a_leading_byte_order_mark_is_skipped() {
    let app = spawn_app().await;
    let text = fixture("idem001-ungated-gmail.json").to_string();
    let r = app.post_raw("/v1/audit", format!("\u{feff}{text}")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(rules(&r.body), ["IDEM001", "IDEM001", "IDEM016"]);
    for not_json in [
        format!("\u{feff}\u{feff}{text}"),
        format!(" \u{feff}{text}"),
        format!("{text}\u{feff}"),
    ] {
        let r = app.post_raw("/v1/audit", not_json).await;
        r.problem(400, "invalid_json");
    }
}

#[tokio::test]
async fn malformed_json_is_invalid_json() {
    let app = spawn_app().await;
    let r = app.post_raw("/v1/audit", "{\"nodes\": [").await;
    r.problem(400, "invalid_json");
}

#[tokio::test]
async fn a_document_that_is_not_a_workflow_is_invalid_field() {
    let app = spawn_app().await;
    let r = app
        .post("/v1/audit", json!({"name": "x", "version": "1.0.0"}))
        .await;
    assert_eq!(r.problem(422, "invalid_field")["field"], "nodes");
    let r = app
        .post(
            "/v1/audit",
            json!([{"nodes": [], "connections": {}}, {"nodes": [{"name": "A"}]}]),
        )
        .await;
    assert_eq!(
        r.problem(422, "invalid_field")["field"],
        "[1].nodes[0].type"
    );
    let r = app.post_raw("/v1/audit", "").await;
    assert_eq!(r.problem(422, "invalid_field")["field"], "body");
}

#[tokio::test]
async fn audit_bodies_obey_the_body_limit() {
    let app = spawn_with(Options {
        body_limit: 4096,
        ..Default::default()
    })
    .await;
    let r = app
        .post("/v1/audit", fixture("good-webhook-claim-receipt.json"))
        .await;
    r.problem(413, "body_too_large");
}

#[tokio::test]
async fn audit_needs_a_worker_token_when_auth_is_on() {
    let app = spawn_with(Options {
        tokens: vec![(Role::Worker, "orders")],
        ..Default::default()
    })
    .await;
    let r = app
        .post("/v1/audit", fixture("good-webhook-claim-receipt.json"))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let anon = app.as_token(None);
    let r = anon
        .post("/v1/audit", fixture("good-webhook-claim-receipt.json"))
        .await;
    r.problem(401, "unauthorized");
}
