//! The sources API reads its bodies and writes its answers like every other resource: typed
//! request bodies (unknown members 400 `unknown_field`, a body that is not an object 400
//! `invalid_json`, a wrong value 422 `invalid_field` naming it) and answers whose members are
//! the ones the OpenAPI document lists.

use idem_testkit::app::{backends, spawn_on};
use serde_json::{json, Value};

use crate::intake::{put_source, stripe_source};

#[tokio::test]
async fn redeliver_bodies_are_read_member_by_member_and_refusals_change_nothing() {
    for backend in backends() {
        let app = spawn_on(backend).await;
        let r = put_source(&app, "pay", &stripe_source("http://127.0.0.1:9/x")).await;
        assert_eq!(r.status, 201, "{}", r.text);
        let bulk = "/v1/sources/pay/redeliver";
        for (body, status, code, field) in [
            (
                json!({"note": "n", "extra": 1}),
                400,
                "unknown_field",
                "extra",
            ),
            (
                json!({"note": "n", "state": "prepared"}),
                422,
                "invalid_field",
                "state",
            ),
            (
                json!({"note": "n", "state": 3}),
                422,
                "invalid_field",
                "state",
            ),
            (
                json!({"note": "n", "since": "yesterday"}),
                422,
                "invalid_field",
                "since",
            ),
            (
                json!({"note": "n", "until": 17}),
                422,
                "invalid_field",
                "until",
            ),
            (json!({}), 422, "invalid_field", "note"),
            (json!({"note": ""}), 422, "invalid_field", "note"),
            (json!({"note": "a\u{0}b"}), 422, "invalid_field", "note"),
            (
                json!({"note": "x".repeat(2001)}),
                422,
                "invalid_field",
                "note",
            ),
            // Members are read in order: the state is named before the missing note.
            (json!({"state": "nope"}), 422, "invalid_field", "state"),
        ] {
            let p = app.post(bulk, body.clone()).await;
            let problem = p.problem(status, code);
            assert_eq!(problem["field"], json!(field), "{body}");
        }
        app.post_json_text(bulk, "[1]")
            .await
            .problem(400, "invalid_json");
        // An empty body is `{}`: the refusal names the missing note.
        let p = app.post_raw(bulk, Vec::new()).await;
        assert_eq!(p.problem(422, "invalid_field")["field"], json!("note"));
        let ok = app
            .post(
                bulk,
                json!({"note": "n", "state": "failed_retryable",
                       "since": "2026-01-01T00:00:00+02:00", "until": null}),
            )
            .await;
        assert_eq!(ok.status, 200, "{}", ok.text);
        assert_eq!(ok.body, json!({"scheduled": 0}));

        // One event: the source is found first, then the body is read, then the event.
        let one = "/v1/sources/pay/events/evt_1/redeliver";
        let p = app.post(one, json!({"note": "n", "destination": 5})).await;
        assert_eq!(
            p.problem(422, "invalid_field")["field"],
            json!("destination")
        );
        let p = app.post(one, json!({"note": "n", "to": "x"})).await;
        assert_eq!(p.problem(400, "unknown_field")["field"], json!("to"));
        app.post(one, json!({"note": "n"}))
            .await
            .problem(404, "not_found");
        app.post("/v1/sources/nope/events/evt_1/redeliver", json!({"to": 1}))
            .await
            .problem(404, "not_found");
        let list = app.get("/v1/sources/pay/events").await;
        assert_eq!(list.body["items"], json!([]), "{}", list.text);
    }
}

#[tokio::test]
async fn a_source_read_has_exactly_the_members_the_schema_lists() {
    let backend = backends()[0];
    let app = spawn_on(backend).await;
    let mut doc = stripe_source("http://127.0.0.1:9/x");
    doc["forwards"] = json!({"crm": {"url": "http://127.0.0.1:9/crm"}});
    let put = put_source(&app, "pay", &doc).await;
    assert_eq!(put.status, 201, "{}", put.text);
    let schema = app.get("/openapi.json").await.body["components"]["schemas"]["SourceDoc"].clone();
    let mut listed: Vec<&String> = schema["properties"]
        .as_object()
        .expect("SourceDoc lists its properties")
        .keys()
        .collect();
    listed.sort();
    for read in [
        put.body.clone(),
        app.get("/v1/sources/pay").await.body,
        app.get("/v1/sources").await.body["items"][0].clone(),
    ] {
        let Value::Object(m) = &read else {
            panic!("a source read is an object: {read}")
        };
        let mut members: Vec<&String> = m.keys().collect();
        members.sort();
        assert_eq!(members, listed, "{read}");
        assert_eq!(read["source"], json!("pay"));
        assert_eq!(
            read["forwards"]["crm"]["url"],
            json!("http://127.0.0.1:9/crm")
        );
        assert!(!read.to_string().contains("whsec_"), "no secret in a read");
    }
}
