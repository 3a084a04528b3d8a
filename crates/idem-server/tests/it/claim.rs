use std::time::{Duration, Instant};

use serde_json::json;

use idem_testkit::app::*;

#[tokio::test]
async fn fresh_claim_acquires_with_a_token_and_resumed_false() {
    let app = spawn_app().await;
    let r = app
        .claim(
            "pay",
            "evt_1:charge",
            json!({"payload": {"amount": 100}, "owner": "exec-1", "correlation_id": "c-1"}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.body["outcome"], "acquired");
    assert_eq!(r.body["resumed"], false);
    assert!(r.body["token"].is_string());
    assert!(r.body.get("retry_after_ms").is_none());
    assert_eq!(r.header("idempotent-replayed"), None);
    let rec = &r.body["record"];
    assert_eq!(rec["state"], "processing");
    assert_eq!(rec["attempt"], 1);
    assert_eq!(rec["key"], "evt_1:charge");
    assert_eq!(rec["owner"], "exec-1");
    assert_eq!(rec["fingerprint"].as_str().map(str::len), Some(64));
    assert!(rec["created_at"]
        .as_str()
        .is_some_and(|t| t.ends_with('Z') && t.contains('.')));
    assert!(rec.get("token").is_none() && rec.get("lease_id").is_none());
    let body = r.body.as_object().expect("object");
    let mut keys: Vec<&str> = body.keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(keys, ["outcome", "record", "resumed", "token"]);
}

#[tokio::test]
async fn second_claim_of_completed_key_replays_result() {
    let app = spawn_app().await;
    let t = Api::acquired(&app.claim("pay", "k1", json!({"payload": {"a": 1}})).await);
    let c = app
        .complete(
            "pay",
            "k1",
            json!({"token": t, "result": {"charge": "ch_1"}, "external_ref": "ch_1"}),
        )
        .await;
    assert_eq!(c.status, 200, "{}", c.text);
    assert_eq!(c.body["state"], "completed");
    // Same payload, other member order: replay.
    let r = app.claim("pay", "k1", json!({"payload": {"a": 1.0}})).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["outcome"], "completed");
    assert_eq!(r.header("idempotent-replayed"), Some("true"));
    assert_eq!(r.body["record"]["result"], json!({"charge": "ch_1"}));
    assert_eq!(r.body["record"]["external_ref"], "ch_1");
    assert!(r.body.get("token").is_none() && r.body.get("resumed").is_none());
    let ev = app.event_types("pay", "k1").await;
    assert_eq!(ev, ["acquired", "completed", "duplicate_hit"]);
}

/// The answer's text holds `"result":` followed by exactly `value`.
#[track_caller]
fn assert_result(r: &Resp, value: &str, backend: Backend) {
    assert!(
        r.text.contains(&format!("\"result\":{value}")),
        "{backend:?} {}",
        r.text
    );
}

/// POSTs the JSON `text`, byte for byte, to `op` of the key at `path`.
async fn post_op(app: &TestApp, path: &str, op: &str, text: &str) -> Resp {
    app.post_json_text(&format!("{path}/{op}"), text).await
}

/// Completes the key at `path` with `token` and the JSON text `result`, byte for byte.
async fn complete_text(app: &TestApp, path: &str, token: &str, result: &str) -> Resp {
    let body = format!(r#"{{"token":"{token}","result":{result}}}"#);
    post_op(app, path, "complete", &body).await
}

#[tokio::test]
async fn a_replayed_result_is_the_text_that_was_completed_member_order_included() {
    const RESULT: &str = r#"{"charge_id":"ch_1","amount_cents":4200}"#;
    const NESTED: &str = r#"{"z":{"y":[{"d":1,"c":2}],"b":true},"a":null}"#;
    const CLAIM: &str = r#"{"payload":{"currency":"EUR","amount":4200}}"#;
    // The same payload, its members in the other order.
    const CLAIM_REORDERED: &str = r#"{"payload":{"amount":4200,"currency":"EUR"}}"#;
    for backend in backends() {
        let app = spawn_on(backend).await;
        let path = Api::key_path("pay", "evt_1:charge");
        let c = post_op(&app, &path, "claim", CLAIM).await;
        let token = Api::acquired(&c);
        let done = complete_text(&app, &path, &token, RESULT).await;
        assert_eq!(done.status, 200, "{backend:?} {}", done.text);
        assert_result(&done, RESULT, backend);
        // A duplicate (payload members in the other order: the same fingerprint) gets the
        // result as it was written, and so do a read and the list.
        let again = post_op(&app, &path, "claim", CLAIM_REORDERED).await;
        assert_eq!(again.status, 200, "{backend:?} {}", again.text);
        assert_eq!(again.body["outcome"], "completed");
        assert_result(&again, RESULT, backend);
        // The same complete again with the members in another order is the same result: a
        // no-op that leaves the stored text as it was.
        let reordered = r#"{"amount_cents":4200,"charge_id":"ch_1"}"#;
        let repeat = complete_text(&app, &path, &token, reordered).await;
        assert_eq!(repeat.status, 200, "{backend:?} {}", repeat.text);
        assert_result(&repeat, RESULT, backend);
        let read = app.get(&path).await;
        assert_result(&read, RESULT, backend);
        let listed = app.list("pay", "").await;
        assert_result(&listed, RESULT, backend);
        // Nested objects and objects inside arrays keep their order too.
        let path = Api::key_path("pay", "k2");
        let token = Api::acquired(&post_op(&app, &path, "claim", "{}").await);
        let done = complete_text(&app, &path, &token, NESTED).await;
        assert_eq!(done.status, 200, "{backend:?} {}", done.text);
        let again = post_op(&app, &path, "claim", "{}").await;
        assert_result(&again, NESTED, backend);
    }
}

#[tokio::test]
async fn claim_without_payload_or_body_skips_the_fingerprint_check() {
    let app = spawn_app().await;
    // No body, no content type at all (curl -X POST).
    let r = app
        .post_raw(&format!("{}/claim", Api::key_path("ns", "k")), "")
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.body["record"]["fingerprint"], json!(null));
    // JSON without a content type is accepted too.
    let r = app
        .post_raw(
            &format!("{}/claim", Api::key_path("ns", "k2")),
            r#"{"owner":"x"}"#,
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
}

#[tokio::test]
async fn different_fingerprint_is_a_conflict() {
    let app = spawn_app().await;
    Api::acquired(
        &app.claim("pay", "k", json!({"payload": {"amount": 1}}))
            .await,
    );
    let r = app
        .claim("pay", "k", json!({"payload": {"amount": 2}}))
        .await;
    assert_eq!(r.status, 422, "{}", r.text);
    assert_eq!(r.body["outcome"], "conflict");
    let fp = "a".repeat(64);
    let r = app.claim("pay", "k", json!({"fingerprint": fp})).await;
    assert_eq!(r.body["outcome"], "conflict");
}

#[tokio::test]
async fn claim_of_a_held_key_is_in_flight_with_retry_after() {
    let app = spawn_app().await;
    Api::acquired(&app.claim("pay", "k", json!({"lease_ms": 10_000})).await);
    let r = app.claim("pay", "k", json!({})).await;
    assert_eq!(r.status, 409, "{}", r.text);
    assert_eq!(r.body["outcome"], "in_flight");
    let ms = r.body["retry_after_ms"].as_i64().expect("retry_after_ms");
    assert!(ms > 9000 && ms <= 10_000, "{ms}");
    assert_eq!(r.header("retry-after"), Some("10"));
    assert!(r.body.get("token").is_none());
}

#[tokio::test]
async fn failed_permanent_is_replayed_with_the_header() {
    let app = spawn_app().await;
    let t = Api::acquired(&app.claim("ns", "k", json!({})).await);
    let f = app.fail("ns", "k", json!({"token": t, "http_status": 400, "error": {"category": "validation", "message": "bad email"}})).await;
    assert_eq!(f.body["state"], "failed_permanent", "{}", f.text);
    let r = app.claim("ns", "k", json!({})).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body["outcome"], "failed_permanent");
    assert_eq!(r.header("idempotent-replayed"), Some("true"));
    assert_eq!(r.body["record"]["last_error"]["message"], "bad email");
    assert_eq!(r.body["record"]["last_error"]["http_status"], 400);
}

#[tokio::test]
async fn wait_ms_answers_with_the_holders_outcome() {
    let app = spawn_app().await;
    let t = Api::acquired(&app.claim("ns", "k", json!({"payload": 1})).await);
    let api = app.api.clone();
    let waiter = tokio::spawn(async move {
        let start = Instant::now();
        let r = api
            .claim("ns", "k", json!({"payload": 1, "wait_ms": 5000}))
            .await;
        (r, start.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let c = app
        .complete("ns", "k", json!({"token": t, "result": {"ok": true}}))
        .await;
    assert_eq!(c.status, 200);
    let (r, took) = waiter.await.expect("join");
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["outcome"], "completed");
    assert_eq!(r.header("idempotent-replayed"), Some("true"));
    assert_eq!(r.body["record"]["result"], json!({"ok": true}));
    assert!(took < Duration::from_secs(4), "{took:?}");
    // Polling wrote no event per look: one in_flight for the wait, then the replay.
    let ev = app.event_types("ns", "k").await;
    assert_eq!(ev, ["acquired", "in_flight", "completed", "duplicate_hit"]);
}

#[tokio::test]
async fn wait_ms_gives_up_with_in_flight_at_the_deadline() {
    let app = spawn_app().await;
    Api::acquired(&app.claim("ns", "k", json!({})).await);
    let start = Instant::now();
    let r = app.claim("ns", "k", json!({"wait_ms": 400})).await;
    assert!(start.elapsed() >= Duration::from_millis(380));
    assert_eq!(r.status, 409);
    assert_eq!(r.body["outcome"], "in_flight");
    let ev = app.event_types("ns", "k").await;
    assert_eq!(ev, ["acquired", "in_flight"]);
}

#[tokio::test]
async fn bad_claims_are_refused_and_write_nothing() {
    let app = spawn_app().await;
    let cases = [
        (
            json!({"payload": {}, "fingerprint": "a".repeat(64)}),
            422,
            "invalid_field",
            "fingerprint",
        ),
        (
            json!({"fingerprint": "xyz"}),
            422,
            "invalid_field",
            "fingerprint",
        ),
        (json!({"lease_ms": 0}), 422, "invalid_field", "lease_ms"),
        (json!({"lease_ms": "10"}), 422, "invalid_field", "lease_ms"),
        (
            json!({"owner": "o".repeat(256)}),
            422,
            "invalid_field",
            "owner",
        ),
        (
            json!({"correlation_id": 5}),
            422,
            "invalid_field",
            "correlation_id",
        ),
        (
            json!({"lease_expiry": "never"}),
            422,
            "invalid_field",
            "lease_expiry",
        ),
        (json!({"wait_ms": -1}), 422, "invalid_field", "wait_ms"),
        (json!({"bogus": 1}), 400, "unknown_field", "bogus"),
    ];
    for (body, status, code, field) in cases {
        let r = app.claim("ns", "k", body.clone()).await;
        let p = r.problem(status, code);
        assert_eq!(p["field"], field, "{body}");
        assert!(p["detail"].as_str().is_some_and(|d| !d.is_empty()));
        assert!(p["type"].is_string() && p["title"].is_string());
    }
    let r = app
        .post_raw(&format!("{}/claim", Api::key_path("ns", "k")), "{nope")
        .await;
    r.problem(400, "invalid_json");
    let r = app
        .post_raw(&format!("{}/claim", Api::key_path("ns", "k")), "[1]")
        .await;
    r.problem(400, "invalid_json");
    app.record("ns", "k").await.problem(404, "not_found");
    let l = app.list("ns", "").await;
    assert_eq!(l.body["items"], json!([]));
}

#[tokio::test]
async fn bad_keys_and_namespaces_say_why() {
    let app = spawn_app().await;
    let r = app
        .post("/v1/namespaces/ns/keys/a%20b/claim", json!({}))
        .await;
    let p = r.problem(400, "invalid_key");
    assert!(
        p["detail"].as_str().is_some_and(|d| d.contains("0x20")),
        "{p}"
    );
    let long = "k".repeat(256);
    let r = app.claim("ns", &long, json!({})).await;
    let p = r.problem(400, "invalid_key");
    assert!(
        p["detail"].as_str().is_some_and(|d| d.contains("256")),
        "{p}"
    );
    let r = app
        .post("/v1/namespaces/ns/keys/%C3%A9/claim", json!({}))
        .await;
    r.problem(400, "invalid_key");
    let r = app
        .post("/v1/namespaces/b%20d/keys/k/claim", json!({}))
        .await;
    r.problem(400, "invalid_namespace");
    // A key with a slash and a colon round-trips percent-encoded.
    let r = app.claim("ns", "order/847:draft", json!({})).await;
    assert_eq!(r.body["record"]["key"], "order/847:draft", "{}", r.text);
    assert_eq!(app.record("ns", "order/847:draft").await.status, 200);
}

#[tokio::test]
async fn oversized_body_is_413_and_writes_nothing() {
    let app = spawn_with(Options {
        body_limit: 2048,
        ..Default::default()
    })
    .await;
    let big = "x".repeat(4096);
    let r = app.claim("ns", "k", json!({"payload": big})).await;
    r.problem(413, "body_too_large");
    app.record("ns", "k").await.problem(404, "not_found");
}

#[tokio::test]
async fn default_body_limit_is_one_mebibyte() {
    let app = spawn_app().await;
    let big = "x".repeat(1024 * 1024 + 10);
    app.claim("ns", "k", json!({"payload": big}))
        .await
        .problem(413, "body_too_large");
    let ok = "x".repeat(1000 * 1000);
    assert_eq!(
        app.claim("ns", "k", json!({"payload": ok})).await.status,
        201
    );
}

/// `encodeURIComponent` as a browser or n8n expression applies it: everything but
/// `A–Z a–z 0–9 - _ . ! ~ * ' ( )` is percent-encoded.
fn encode_uri_component(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.!~*'()".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[tokio::test]
async fn every_visible_ascii_key_round_trips_through_claim_complete_get_and_list() {
    for backend in backends() {
        let app = spawn_on(backend).await;
        let mut keys: Vec<String> = (0x21u8..=0x7e)
            .map(|b| format!("k{}k", b as char))
            .collect();
        keys.push("a%b/c?d#e".into());
        keys.push("%".into());
        keys.push("100%".into());
        keys.push("%25".into());
        keys.push("%zz".into());
        keys.push((0x21u8..=0x7e).map(char::from).collect());
        for key in &keys {
            let path = format!("/v1/namespaces/ns/keys/{}", encode_uri_component(key));
            let r = app.post(&format!("{path}/claim"), json!({})).await;
            assert_eq!(r.status, 201, "{backend:?} claim {key:?}: {}", r.text);
            assert_eq!(r.body["record"]["key"], key.as_str(), "{backend:?}");
            let token = r.body["token"].as_str().expect("token").to_owned();
            let r = app
                .post(
                    &format!("{path}/complete"),
                    json!({"token": token, "result": {"k": key}}),
                )
                .await;
            assert_eq!(r.status, 200, "{backend:?} complete {key:?}: {}", r.text);
            let r = app.get(&path).await;
            assert_eq!(r.status, 200, "{backend:?} get {key:?}: {}", r.text);
            assert_eq!(r.body["record"]["key"], key.as_str());
            assert_eq!(r.body["record"]["state"], "completed");
            assert_eq!(r.body["record"]["result"]["k"], key.as_str());
            // The same key spelled with every byte escaped is the same record.
            let r = app.get(&Api::key_path("ns", key)).await;
            assert_eq!(r.status, 200, "{backend:?} get (all escaped) {key:?}");
            // A duplicate claim replays.
            let r = app.post(&format!("{path}/claim"), json!({})).await;
            assert_eq!(r.body["outcome"], "completed", "{backend:?} {key:?}");
        }
        // The list pages through every one of them, keys intact.
        let mut seen = std::collections::BTreeSet::new();
        let mut cursor: Option<String> = None;
        for _ in 0..100 {
            let q = match &cursor {
                Some(c) => format!("limit=7&cursor={}", encode_uri_component(c)),
                None => "limit=7".into(),
            };
            let r = app.list("ns", &q).await;
            assert_eq!(r.status, 200, "{backend:?} list: {}", r.text);
            for item in r.body["items"].as_array().expect("items") {
                let k = item["key"].as_str().expect("key").to_owned();
                assert!(seen.insert(k.clone()), "{backend:?}: {k:?} listed twice");
            }
            match r.body["next_cursor"].as_str() {
                Some(c) => cursor = Some(c.to_owned()),
                None => break,
            }
        }
        let want: std::collections::BTreeSet<String> = keys.iter().cloned().collect();
        assert_eq!(seen, want, "{backend:?}");
    }
}

#[tokio::test]
async fn path_segments_that_are_not_utf8_are_400_naming_the_identifier() {
    let app = spawn_app().await;
    app.post("/v1/namespaces/ns/keys/a%FFb/claim", json!({}))
        .await
        .problem(400, "invalid_key");
    app.post("/v1/namespaces/n%FFs/keys/k/claim", json!({}))
        .await
        .problem(400, "invalid_namespace");
    app.get("/v1/namespaces/n%FFs")
        .await
        .problem(400, "invalid_namespace");
    app.record("ns", "a%FFb").await.problem(404, "not_found");
}
