//! The webhook intake over HTTP (`INTAKE.md`): sources, `POST /in/{source}` with its
//! refusals, duplicates, held events, batches and Slack's challenge, and forwarding to a
//! local sink that answers as each test scripts (2xx, 5xx, 410, `Retry-After`, hanging),
//! on SQLite and on PostgreSQL when `IDEM_TEST_PG` is set. Stripe signatures are made here
//! with HMAC directly (not with the project's signer), others with `idem_intake::sign`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use hmac::{Hmac, Mac};
use idem_intake::sign::{sign, Delivery};
use idem_intake::Provider;
use idem_testkit::app::{
    backends, eventually, spawn_on, spawn_with, Api, Backend, Options, Resp, TestApp,
};
use serde_json::{json, Value};
use sha2::Sha256;

use crate::standard_webhooks::official_verify;

pub(crate) const SECRET: &str = "whsec_stripe_test_secret_1";
const SECRET2: &str = "whsec_stripe_test_secret_2";
const FWD_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn stripe_sig(secret: &str, t: i64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("key");
    mac.update(format!("{t}.").as_bytes());
    mac.update(body);
    format!("t={t},v1={}", hex::encode(mac.finalize().into_bytes()))
}

/// The headers `provider` would send with the JSON `body` POSTed at `at_ms`.
fn signed_json(
    provider: Provider,
    secret: &str,
    body: &[u8],
    at_ms: i64,
    public_url: Option<&str>,
) -> Vec<(String, String)> {
    sign(&Delivery {
        provider,
        secret,
        body,
        at_ms,
        method: "POST",
        public_url,
        content_type: Some("application/json"),
        hmac: None,
        id: "",
    })
    .expect("signed")
}

/// One request the sink received.
#[derive(Clone)]
pub(crate) struct Got {
    headers: axum::http::HeaderMap,
    pub(crate) body: bytes::Bytes,
    /// When it arrived.
    pub(crate) at: std::time::Instant,
}

impl Got {
    pub(crate) fn header(&self, n: &str) -> Option<&str> {
        self.headers.get(n).and_then(|v| v.to_str().ok())
    }
}

/// How the sink answers one request.
#[derive(Clone)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) retry_after: Option<&'static str>,
    pub(crate) delay_ms: u64,
}

pub(crate) fn answer(status: u16) -> Answer {
    Answer {
        status,
        retry_after: None,
        delay_ms: 0,
    }
}

/// A local receiver: records every request, answers from its script (then 200), and keeps
/// the highest number of requests it had in flight for one `Idem-Key`.
#[derive(Clone)]
pub(crate) struct Sink {
    pub(crate) url: String,
    got: Arc<Mutex<Vec<Got>>>,
    script: Arc<Mutex<VecDeque<Answer>>>,
    in_flight: Arc<Mutex<std::collections::HashMap<String, usize>>>,
    max_in_flight: Arc<AtomicUsize>,
    /// Requests in flight now, and the most there ever were (all keys together).
    total: Arc<AtomicUsize>,
    max_total: Arc<AtomicUsize>,
}

impl Sink {
    pub(crate) async fn start(script: Vec<Answer>) -> Sink {
        let sink = Sink {
            url: String::new(),
            got: Arc::default(),
            script: Arc::new(Mutex::new(script.into())),
            in_flight: Arc::default(),
            max_in_flight: Arc::default(),
            total: Arc::default(),
            max_total: Arc::default(),
        };
        let s = sink.clone();
        let app =
            Router::new().fallback(move |headers: axum::http::HeaderMap, body: bytes::Bytes| {
                let s = s.clone();
                async move {
                    let key = headers
                        .get("idem-key")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_owned();
                    {
                        let mut f = s.in_flight.lock().expect("lock");
                        let n = f.entry(key.clone()).or_default();
                        *n += 1;
                        s.max_in_flight.fetch_max(*n, Ordering::SeqCst);
                    }
                    let now = s.total.fetch_add(1, Ordering::SeqCst) + 1;
                    s.max_total.fetch_max(now, Ordering::SeqCst);
                    s.got.lock().expect("lock").push(Got {
                        headers,
                        body,
                        at: std::time::Instant::now(),
                    });
                    let a = s
                        .script
                        .lock()
                        .expect("lock")
                        .pop_front()
                        .unwrap_or(answer(200));
                    if a.delay_ms > 0 {
                        tokio::time::sleep(Duration::from_millis(a.delay_ms)).await;
                    }
                    if let Some(n) = s.in_flight.lock().expect("lock").get_mut(&key) {
                        *n -= 1;
                    }
                    s.total.fetch_sub(1, Ordering::SeqCst);
                    let mut resp = axum::response::Response::new(axum::body::Body::from("ok"));
                    *resp.status_mut() =
                        axum::http::StatusCode::from_u16(a.status).expect("status");
                    if let Some(ra) = a.retry_after {
                        resp.headers_mut()
                            .insert("retry-after", ra.parse().expect("header"));
                    }
                    resp
                }
            });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}/webhook/x", listener.local_addr().expect("addr"));
        tokio::spawn(async move { axum::serve(listener, app).await });
        Sink { url, ..sink }
    }
    pub(crate) fn got(&self) -> Vec<Got> {
        self.got.lock().expect("lock").clone()
    }
    pub(crate) fn count(&self) -> usize {
        self.got.lock().expect("lock").len()
    }
}

pub(crate) fn stripe_source(url: &str) -> Value {
    json!({
        "provider": "stripe",
        "secrets": [SECRET],
        "forward": {"url": url, "timeout_ms": 1000, "retry": {"base_ms": 1, "max_ms": 1}},
    })
}

pub(crate) async fn put_source(app: &Api, name: &str, doc: &Value) -> Resp {
    app.send(
        app.http
            .put(format!("{}/v1/sources/{name}", app.base))
            .json(doc),
    )
    .await
}

async fn delete(app: &TestApp, path: &str) -> Resp {
    app.send(app.http.delete(format!("{}{path}", app.base)))
        .await
}

/// POSTs raw bytes to `/in/{source}` with these headers (no bearer token).
pub(crate) async fn post_in(
    app: &TestApp,
    source: &str,
    body: &[u8],
    headers: &[(String, String)],
) -> Resp {
    let mut req = app
        .http
        .post(format!("{}/in/{source}", app.base))
        .header("content-type", "application/json")
        .body(body.to_vec());
    for (k, v) in headers {
        req = req.header(k.as_str(), v.as_str());
    }
    app.as_token(None).send(req).await
}

pub(crate) async fn post_stripe(app: &TestApp, source: &str, secret: &str, body: &[u8]) -> Resp {
    let t = app.now().0 / 1000;
    let h = vec![("Stripe-Signature".to_owned(), stripe_sig(secret, t, body))];
    post_in(app, source, body, &h).await
}

pub(crate) fn evt(id: &str) -> Vec<u8> {
    format!(r#"{{"id":"{id}","type":"charge.succeeded","data":{{"amount":100}}}}"#).into_bytes()
}

pub(crate) async fn event(app: &TestApp, source: &str, key: &str) -> Resp {
    app.get(&format!("/v1/sources/{source}/events/{key}")).await
}

pub(crate) async fn state_of(app: &TestApp, source: &str, key: &str) -> String {
    event(app, source, key).await.body["record"]["state"]
        .as_str()
        .unwrap_or("none")
        .to_owned()
}

async fn until_state(app: &TestApp, source: &str, key: &str, want: &str) -> bool {
    eventually(Duration::from_secs(10), || async {
        state_of(app, source, key).await == want
    })
    .await
}

/// The value of one metric line in a Prometheus text (0 when absent).
pub(crate) fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test]
async fn sources_are_created_read_patched_listed_and_deleted() {
    for backend in backends() {
        let app = spawn_on(backend).await;
        let mut doc = stripe_source("http://127.0.0.1:9/x");
        doc["secrets"] = json!([SECRET, SECRET2]);
        doc["forward"]["secret"] = json!(FWD_SECRET);
        let r = put_source(&app, "pay", &doc).await;
        assert_eq!(r.status, 201, "{}", r.text);
        let s = &r.body;
        assert_eq!(s["source"], "pay");
        assert_eq!(s["namespace"], "pay");
        assert_eq!(s["tolerance_ms"], 300_000);
        assert_eq!(s["event_id"], json!({"pointer": "/id"}));
        assert_eq!(s["secret_hints"], json!(["et_1", "et_2"]));
        assert_eq!(s["forward"]["secret_hint"], "LaSw");
        assert_eq!(s["forward"]["concurrency"], 4);
        assert_eq!(s["forward"]["headers"], json!(["Stripe-Signature"]));
        assert_eq!(
            s["forward"]["retry"],
            json!({"max_attempts": 8, "base_ms": 1, "max_ms": 1, "window_ms": 259_200_000})
        );
        assert_eq!(s["max_body_bytes"], 1 << 20);
        assert!(
            !r.text.contains("test_secret") && !r.text.contains("MfKQ"),
            "{}",
            r.text
        );
        // Replace: 200; the forward secret not given again is gone.
        let r = put_source(&app, "pay", &stripe_source("http://127.0.0.1:9/x")).await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(r.body["forward"]["secret_hint"], Value::Null);
        assert_eq!(r.body["secret_hints"], json!(["et_1"]));
        // PATCH merges recursively; secrets replaces the list.
        let r = app
            .patch(
                "/v1/sources/pay",
                json!({"forward": {"retry": {"max_attempts": 3}}, "secrets": [SECRET2]}),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(r.body["forward"]["retry"]["max_attempts"], 3);
        assert_eq!(r.body["forward"]["retry"]["base_ms"], 1);
        assert_eq!(r.body["forward"]["timeout_ms"], 1000);
        assert_eq!(r.body["secret_hints"], json!(["et_2"]));
        let got = app.get("/v1/sources/pay").await;
        assert_eq!(got.body, r.body);
        let list = app.get("/v1/sources").await;
        assert_eq!(list.body["items"].as_array().map(Vec::len), Some(1));
        // Refusals name the field and change nothing.
        let mut bad = stripe_source("http://127.0.0.1:9/x");
        bad["colour"] = json!("red");
        put_source(&app, "pay", &bad)
            .await
            .problem(400, "unknown_field");
        bad = stripe_source("http://127.0.0.1:9/x");
        bad["provider"] = json!("paypal");
        let r = put_source(&app, "other", &bad).await;
        assert_eq!(r.problem(422, "invalid_field")["field"], "provider");
        bad = stripe_source("http://127.0.0.1:9/x");
        bad.as_object_mut().expect("obj").remove("secrets");
        let r = put_source(&app, "other", &bad).await;
        assert_eq!(r.problem(422, "invalid_field")["field"], "secrets");
        bad = stripe_source("http://127.0.0.1:9/x");
        bad["provider"] = json!("twilio");
        let r = put_source(&app, "other", &bad).await;
        assert_eq!(r.problem(422, "invalid_field")["field"], "public_url");
        bad = stripe_source("http://127.0.0.1:9/x");
        bad["forward"]["nope"] = json!(1);
        let r = app
            .patch("/v1/sources/pay", json!({"forward": {"nope": 1}}))
            .await;
        assert_eq!(r.problem(400, "unknown_field")["field"], "forward.nope");
        app.get("/v1/sources/other").await.problem(404, "not_found");
        assert_eq!(app.get("/v1/sources/pay").await.body, got.body);
        // DELETE: 204, then 404.
        assert_eq!(delete(&app, "/v1/sources/pay").await.status, 204);
        app.get("/v1/sources/pay").await.problem(404, "not_found");
        delete(&app, "/v1/sources/pay")
            .await
            .problem(404, "not_found");
    }
}

#[tokio::test]
async fn delete_is_refused_while_events_are_undelivered_unless_forced() {
    for backend in backends() {
        let app = spawn_on(backend).await;
        let sink = Sink::start(vec![]).await;
        assert_eq!(
            put_source(&app, "pay", &stripe_source(&sink.url))
                .await
                .status,
            201
        );
        app.pause("pay").await;
        let r = post_stripe(&app, "pay", SECRET, &evt("evt_1")).await;
        assert_eq!(r.body["events"][0]["status"], "accepted", "{}", r.text);
        delete(&app, "/v1/sources/pay")
            .await
            .problem(409, "invalid_transition");
        assert_eq!(delete(&app, "/v1/sources/pay?force=true").await.status, 204);
        // The record stays in the namespace; nothing more is forwarded.
        app.resume("pay").await;
        assert_eq!(app.record("pay", "evt_1").await.status, 200);
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert_eq!(sink.count(), 0);
    }
}

#[tokio::test]
async fn operators_read_sources_admins_write_them_workers_neither() {
    for backend in backends() {
        let app = spawn_with(Options {
            tokens: vec![
                (idem::Role::Admin, "*"),
                (idem::Role::Operator, "*"),
                (idem::Role::Worker, "*"),
            ],
            backend,
            ..Default::default()
        })
        .await;
        assert_eq!(
            put_source(&app, "pay", &stripe_source("http://127.0.0.1:9/x"))
                .await
                .status,
            201
        );
        let op = app.as_token(Some(&app.tokens[1]));
        assert_eq!(op.get("/v1/sources/pay").await.status, 200);
        assert_eq!(op.get("/v1/sources").await.status, 200);
        let r = op
            .send(
                op.http
                    .put(format!("{}/v1/sources/pay", op.base))
                    .json(&stripe_source("http://127.0.0.1:9/y")),
            )
            .await;
        r.problem(403, "forbidden");
        op.patch("/v1/sources/pay", json!({"tolerance_ms": 5}))
            .await
            .problem(403, "forbidden");
        let worker = app.as_token(Some(&app.tokens[2]));
        worker
            .get("/v1/sources/pay")
            .await
            .problem(403, "forbidden");
        app.as_token(None)
            .get("/v1/sources/pay")
            .await
            .problem(401, "unauthorized");
        // /in needs no token.
        let r = post_stripe(&app, "pay", SECRET, &evt("evt_1")).await;
        assert_eq!(r.status, 200, "{}", r.text);
    }
}

#[tokio::test]
async fn a_token_scoped_elsewhere_cannot_take_a_source_over_with_put() {
    for backend in backends() {
        let app = spawn_with(Options {
            tokens: vec![(idem::Role::Admin, "*"), (idem::Role::Admin, "other")],
            backend,
            ..Default::default()
        })
        .await;
        let mut doc = stripe_source("http://127.0.0.1:9/x");
        doc["namespace"] = json!("payments");
        assert_eq!(put_source(&app, "pay", &doc).await.status, 201);
        let scoped = app.as_token(Some(&app.tokens[1]));
        let mut take = stripe_source("http://127.0.0.1:9/attacker");
        take["namespace"] = json!("other");
        let r = scoped
            .send(
                scoped
                    .http
                    .put(format!("{}/v1/sources/pay", scoped.base))
                    .json(&take),
            )
            .await;
        r.problem(403, "forbidden");
        let now = app.get("/v1/sources/pay").await;
        assert_eq!(now.body["namespace"], "payments", "{}", now.text);
        assert!(now.text.contains("127.0.0.1:9/x"), "{}", now.text);
        // A new source in its own namespace it may write.
        assert_eq!(put_source(&scoped, "mine", &take).await.status, 201);
        // A body that is not an object is a JSON error, as everywhere in the API.
        for bad in [json!([]), json!(5), json!("s")] {
            put_source(&app, "pay", &bad)
                .await
                .problem(400, "invalid_json");
            app.patch("/v1/sources/pay", bad.clone())
                .await
                .problem(400, "invalid_json");
        }
    }
}

#[tokio::test]
async fn a_signed_event_is_stored_answered_and_forwarded_verbatim() {
    for backend in backends() {
        let app = spawn_on(backend).await;
        let sink = Sink::start(vec![]).await;
        put_source(&app, "verbatim", &stripe_source(&sink.url)).await;
        let body = evt("evt_1");
        let r = post_stripe(&app, "verbatim", SECRET, &body).await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(
            r.body,
            json!({"source": "verbatim", "events": [{"key": "evt_1", "status": "accepted"}]})
        );
        assert_eq!(r.header("idempotent-replayed"), None);
        assert!(until_state(&app, "verbatim", "evt_1", "completed").await);
        let got = sink.got();
        assert_eq!(got.len(), 1);
        let g = &got[0];
        assert_eq!(&g.body[..], &body[..]);
        assert_eq!(g.header("content-type"), Some("application/json"));
        assert_eq!(g.header("idem-source"), Some("verbatim"));
        assert_eq!(g.header("idem-key"), Some("evt_1"));
        assert_eq!(g.header("idem-event-id"), Some("evt_1"));
        assert_eq!(g.header("idem-attempt"), Some("1"));
        assert!(g
            .header("idem-received-at")
            .is_some_and(|t| t.ends_with('Z')));
        assert!(g
            .header("stripe-signature")
            .is_some_and(|s| s.starts_with("t=")));
        assert_eq!(g.header("webhook-signature"), None);
        let e = event(&app, "verbatim", "evt_1").await;
        assert_eq!(
            e.body["event"]["body"],
            String::from_utf8(body).expect("utf8")
        );
        assert_eq!(e.body["event"]["content_type"], "application/json");
        assert!(e.body["event"]["headers"]["stripe-signature"].is_string());
        assert_eq!(e.body["record"]["result"]["status"], 200);
        assert_eq!(e.body["record"]["result"]["attempt"], 1);
        let a = &e.body["attempts"][0];
        assert_eq!(
            (a["attempt"].clone(), a["status"].clone()),
            (json!(1), json!(200))
        );
        assert_eq!(a["error"], Value::Null);
        let list = app.get("/v1/sources/verbatim/events").await;
        let item = &list.body["items"][0];
        assert_eq!(item["key"], "evt_1");
        assert_eq!(item["state"], "completed");
        assert_eq!(item["attempts"], 1);
        assert!(item["delivered_at"].is_string());
        let m = app.get("/metrics").await.text;
        assert!(
            m.contains(r#"idem_intake_requests_total{source="verbatim",result="accepted"}"#),
            "{m}"
        );
        assert!(
            m.contains(
                r#"idem_deliveries_total{source="verbatim",destination="default",result="delivered"}"#
            ),
            "{m}"
        );
        assert!(m.contains("idem_delivery_duration_seconds_bucket"), "{m}");
        assert!(
            m.contains(r#"idem_intake_backlog{source="verbatim",destination="default"} 0"#),
            "{m}"
        );
    }
}

#[tokio::test]
async fn refused_requests_write_nothing_in_the_contract_order() {
    for backend in backends() {
        let app = spawn_on(backend).await;
        let mut doc = stripe_source("http://127.0.0.1:9/x");
        doc["max_body_bytes"] = json!(64);
        doc["tolerance_ms"] = json!(60_000);
        put_source(&app, "gate", &doc).await;
        let before = app.get("/metrics").await.text;
        let body = evt("evt_1");
        let t = app.now().0 / 1000;
        let sig = |secret: &str, t: i64, body: &[u8]| {
            vec![("Stripe-Signature".to_owned(), stripe_sig(secret, t, body))]
        };
        // Tampered body, wrong secret, missing header, malformed header, unknown version.
        let mut tampered = body.clone();
        tampered[10] ^= 1;
        post_in(&app, "gate", &tampered, &sig(SECRET, t, &body))
            .await
            .problem(401, "invalid_signature");
        post_in(&app, "gate", &body, &sig("whsec_wrong", t, &body))
            .await
            .problem(401, "invalid_signature");
        post_in(&app, "gate", &body, &[])
            .await
            .problem(401, "invalid_signature");
        let bad = vec![("Stripe-Signature".to_owned(), "garbage".to_owned())];
        post_in(&app, "gate", &body, &bad)
            .await
            .problem(401, "invalid_signature");
        let v0 = sig(SECRET, t, &body)[0].1.replace("v1=", "v0=");
        post_in(&app, "gate", &body, &[("Stripe-Signature".to_owned(), v0)])
            .await
            .problem(401, "invalid_signature");
        // Stale and future timestamps (valid signatures).
        post_in(&app, "gate", &body, &sig(SECRET, t - 120, &body))
            .await
            .problem(401, "stale_signature");
        post_in(&app, "gate", &body, &sig(SECRET, t + 120, &body))
            .await
            .problem(401, "stale_signature");
        // A bad signature over a stale timestamp is invalid_signature (signature first).
        post_in(&app, "gate", &body, &sig("whsec_wrong", t - 120, &body))
            .await
            .problem(401, "invalid_signature");
        // 404 before 405 before 413 before 401.
        let big = vec![b'x'; 100];
        post_in(&app, "nope", &big, &[])
            .await
            .problem(404, "not_found");
        app.as_token(None)
            .get("/in/nope")
            .await
            .problem(404, "not_found");
        let r = app.as_token(None).get("/in/gate").await;
        r.problem(405, "method_not_allowed");
        assert_eq!(r.header("allow"), Some("POST"));
        post_in(&app, "gate", &big, &[])
            .await
            .problem(413, "body_too_large");
        // Nothing written: no record, no event row, no key spent.
        assert_eq!(app.list("gate", "").await.body["items"], json!([]));
        assert_eq!(
            app.get("/v1/sources/gate/events").await.body["items"],
            json!([])
        );
        let ok = post_stripe(&app, "gate", SECRET, &body).await;
        assert_eq!(ok.body["events"][0]["status"], "accepted", "{}", ok.text);
        let m = app.get("/metrics").await.text;
        for (result, n) in [
            ("invalid_signature", 6.0),
            ("stale_signature", 2.0),
            ("too_large", 1.0),
        ] {
            let name = format!(r#"idem_intake_requests_total{{source="gate",result="{result}"}}"#);
            assert_eq!(metric(&m, &name) - metric(&before, &name), n, "{name}");
        }
    }
}

#[tokio::test]
async fn a_rotated_secret_verifies_under_either() {
    for backend in backends() {
        let app = spawn_on(backend).await;
        let mut doc = stripe_source("http://127.0.0.1:9/x");
        doc["secrets"] = json!([SECRET, SECRET2]);
        put_source(&app, "pay", &doc).await;
        for (secret, id) in [(SECRET, "evt_1"), (SECRET2, "evt_2")] {
            let r = post_stripe(&app, "pay", secret, &evt(id)).await;
            assert_eq!(r.body["events"][0]["status"], "accepted", "{}", r.text);
        }
        app.patch("/v1/sources/pay", json!({"secrets": [SECRET2]}))
            .await;
        post_stripe(&app, "pay", SECRET, &evt("evt_3"))
            .await
            .problem(401, "invalid_signature");
    }
}

#[tokio::test]
async fn a_duplicate_is_answered_from_the_ledger_and_keeps_the_first_body() {
    for backend in backends() {
        let app = spawn_on(backend).await;
        put_source(&app, "pay", &stripe_source("http://127.0.0.1:9/x")).await;
        app.pause("pay").await;
        let first = evt("evt_1");
        post_stripe(&app, "pay", SECRET, &first).await;
        let changed = br#"{"id":"evt_1","type":"charge.succeeded","data":{"amount":999}}"#;
        let r = post_stripe(&app, "pay", SECRET, changed).await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(r.body["events"][0]["status"], "duplicate");
        assert_eq!(r.header("idempotent-replayed"), Some("true"));
        let e = event(&app, "pay", "evt_1").await;
        assert_eq!(
            e.body["event"]["body"],
            String::from_utf8(first).expect("utf8")
        );
        let types = app.event_types("pay", "evt_1").await;
        assert_eq!(types, ["prepared", "duplicate_hit"], "{types:?}");
    }
}

#[tokio::test]
async fn one_event_posted_sixteen_times_at_once_is_accepted_once_and_forwarded_once() {
    for backend in backends() {
        let app = spawn_on(backend).await;
        let sink = Sink::start(vec![]).await;
        put_source(&app, "burst", &stripe_source(&sink.url)).await;
        let body = evt("evt_burst");
        let answers =
            futures::future::join_all((0..16).map(|_| post_stripe(&app, "burst", SECRET, &body)))
                .await;
        let mut statuses: Vec<String> = answers
            .iter()
            .map(|r| {
                assert_eq!(r.status, 200, "{}", r.text);
                r.body["events"][0]["status"]
                    .as_str()
                    .unwrap_or("?")
                    .to_owned()
            })
            .collect();
        statuses.sort();
        statuses.dedup_by(|a, b| a == b);
        let accepted = answers
            .iter()
            .filter(|r| r.body["events"][0]["status"] == "accepted")
            .count();
        assert_eq!(accepted, 1, "{statuses:?}");
        assert_eq!(statuses, ["accepted", "duplicate"]);
        assert!(until_state(&app, "burst", "evt_burst", "completed").await);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(sink.count(), 1, "forwarded once");
    }
}

#[tokio::test]
async fn an_event_without_its_id_is_held_not_forwarded() {
    for backend in backends() {
        let app = spawn_on(backend).await;
        let sink = Sink::start(vec![]).await;
        put_source(&app, "pay", &stripe_source(&sink.url)).await;
        let body = br#"{"type":"charge.succeeded"}"#;
        let r = post_stripe(&app, "pay", SECRET, body).await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(r.body["events"][0]["status"], "held");
        let key = r.body["events"][0]["key"].as_str().expect("key").to_owned();
        assert!(key.starts_with("body-sha256:"), "{key}");
        let rec = app.record("pay", &key).await;
        assert_eq!(rec.body["record"]["state"], "needs_review");
        assert_eq!(
            rec.body["record"]["last_error"]["category"],
            "missing_identity"
        );
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert_eq!(sink.count(), 0);
        // The same bytes again: a duplicate of the held event.
        let again = post_stripe(&app, "pay", SECRET, body).await;
        assert_eq!(again.body["events"][0]["status"], "duplicate");
        // An operator redelivers it: forwarded once.
        let r = app
            .post(
                &format!("/v1/sources/pay/events/{key}/redeliver"),
                json!({"note": "checked by hand"}),
            )
            .await;
        assert_eq!(r.status, 202, "{}", r.text);
        assert!(until_state(&app, "pay", &key, "completed").await);
        assert_eq!(sink.count(), 1);
    }
}

/// The list item of `key` in `GET /v1/sources/{source}/events{query}` (`null` when absent).
pub(crate) async fn listed(app: &TestApp, source: &str, query: &str, key: &str) -> Value {
    let l = app
        .get(&format!("/v1/sources/{source}/events{query}"))
        .await;
    assert_eq!(l.status, 200, "{}", l.text);
    l.body["items"]
        .as_array()
        .and_then(|a| a.iter().find(|i| i["key"] == key))
        .cloned()
        .unwrap_or_default()
}

#[tokio::test]
async fn a_held_events_summary_shows_its_records_last_error() {
    for backend in backends() {
        let app = spawn_on(backend).await;
        let sink = Sink::start(vec![]).await;
        put_source(&app, "pay", &stripe_source(&sink.url)).await;
        // No event id: held as `missing_identity`.
        let r = post_stripe(&app, "pay", SECRET, br#"{"type":"charge.succeeded"}"#).await;
        assert_eq!(r.body["events"][0]["status"], "held", "{}", r.text);
        let no_id = r.body["events"][0]["key"].as_str().expect("key").to_owned();
        // Its key is a claim's: held as `key_collision`.
        let c = app.claim("pay", "evt_claimed", json!({})).await;
        assert!(c.status < 300, "{}", c.text);
        let r = post_stripe(&app, "pay", SECRET, &evt("evt_claimed")).await;
        assert_eq!(r.body["events"][0]["status"], "held", "{}", r.text);
        let collided = r.body["events"][0]["key"].as_str().expect("key").to_owned();
        for (key, category) in [(&no_id, "missing_identity"), (&collided, "key_collision")] {
            let rec = app.record("pay", key).await.body["record"]["last_error"].clone();
            let want = json!({"category": category, "message": rec["message"]});
            assert!(
                rec["message"].as_str().is_some_and(|m| !m.is_empty()),
                "{rec}"
            );
            for query in ["", "?state=needs_review"] {
                let item = listed(&app, "pay", query, key).await;
                assert_eq!(item["state"], "needs_review", "{query}: {item}");
                assert_eq!(item["attempts"], 0, "{item}");
                assert_eq!(item["last_error"], want, "{query}: {item}");
            }
        }
    }
}

#[tokio::test]
async fn a_hubspot_batch_is_split_into_events() {
    for backend in backends() {
        let app = spawn_on(backend).await;
        let sink = Sink::start(vec![]).await;
        let public_url = "https://hooks.example.com/in/crm";
        let doc = json!({
            "provider": "hubspot", "secrets": ["hubspot-app-secret"], "public_url": public_url,
            "forward": {"url": sink.url},
        });
        assert_eq!(put_source(&app, "crm", &doc).await.status, 201);
        let body = br#"[{"eventId":101,"subscriptionType":"contact.creation"},{"eventId":102,"subscriptionType":"contact.deletion"}]"#;
        let headers = signed_json(
            Provider::Hubspot,
            "hubspot-app-secret",
            body,
            app.now().0,
            Some(public_url),
        );
        let r = post_in(&app, "crm", body, &headers).await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(
            r.body["events"],
            json!([{"key": "101", "status": "accepted"}, {"key": "102", "status": "accepted"}])
        );
        assert!(until_state(&app, "crm", "102", "completed").await);
        assert!(until_state(&app, "crm", "101", "completed").await);
        let mut bodies: Vec<String> = sink
            .got()
            .iter()
            .map(|g| String::from_utf8(g.body.to_vec()).expect("utf8"))
            .collect();
        bodies.sort();
        assert_eq!(
            bodies,
            [
                r#"{"eventId":101,"subscriptionType":"contact.creation"}"#,
                r#"{"eventId":102,"subscriptionType":"contact.deletion"}"#
            ]
        );
    }
}

#[tokio::test]
async fn slack_url_verification_answers_the_challenge_and_stores_nothing() {
    for backend in backends() {
        let app = spawn_on(backend).await;
        let doc = json!({"provider": "slack", "secrets": ["slack-signing-secret"],
                         "forward": {"url": "http://127.0.0.1:9/x"}});
        put_source(&app, "chat", &doc).await;
        let body = br#"{"token":"x","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}"#;
        let headers = signed_json(
            Provider::Slack,
            "slack-signing-secret",
            body,
            app.now().0,
            None,
        );
        let r = post_in(&app, "chat", body, &headers).await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(
            r.body,
            json!({"challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"})
        );
        assert_eq!(
            app.get("/v1/sources/chat/events").await.body["items"],
            json!([])
        );
        assert_eq!(app.list("chat", "").await.body["items"], json!([]));
        // Unsigned, the same body is refused.
        post_in(&app, "chat", body, &[])
            .await
            .problem(401, "invalid_signature");
    }
}

#[tokio::test]
async fn a_paused_namespace_accepts_events_and_holds_their_delivery() {
    for backend in backends() {
        let app = spawn_on(backend).await;
        let sink = Sink::start(vec![]).await;
        put_source(&app, "held", &stripe_source(&sink.url)).await;
        app.pause("held").await;
        let r = post_stripe(&app, "held", SECRET, &evt("evt_1")).await;
        assert_eq!(r.body["events"][0]["status"], "accepted", "{}", r.text);
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert_eq!(sink.count(), 0);
        assert_eq!(state_of(&app, "held", "evt_1").await, "prepared");
        let m = app.get("/metrics").await.text;
        assert!(
            m.contains(r#"idem_intake_backlog{source="held",destination="default"} 1"#),
            "{m}"
        );
        // Waiting for its first delivery, it is scheduled already: a redeliver is refused
        // and writes nothing.
        let types = app.event_types("held", "evt_1").await;
        let redeliver = || {
            app.post(
                "/v1/sources/held/events/evt_1/redeliver",
                json!({"note": "again"}),
            )
        };
        let r = redeliver().await;
        r.problem(409, "invalid_transition");
        assert!(r.text.contains("scheduled"), "{}", r.text);
        assert_eq!(app.event_types("held", "evt_1").await, types);
        app.resume("held").await;
        // A paused namespace's items look again every PAUSED_RECHECK_MS.
        app.advance(idem::PAUSED_RECHECK_MS + 1);
        assert!(until_state(&app, "held", "evt_1", "completed").await);
        assert_eq!(sink.count(), 1);
    }
}

#[tokio::test]
async fn a_failed_delivery_is_retried_and_attempts_are_recorded() {
    for backend in backends() {
        let app = spawn_on(backend).await;
        let sink = Sink::start(vec![answer(500), answer(502)]).await;
        put_source(&app, "pay", &stripe_source(&sink.url)).await;
        post_stripe(&app, "pay", SECRET, &evt("evt_1")).await;
        let done = eventually(Duration::from_secs(10), || async {
            app.advance(10);
            state_of(&app, "pay", "evt_1").await == "completed"
        })
        .await;
        assert!(done);
        let got = sink.got();
        let attempts: Vec<&str> = got
            .iter()
            .filter_map(|g| g.header("idem-attempt"))
            .collect();
        assert_eq!(attempts, ["1", "2", "3"]);
        assert!(got.iter().all(|g| g.header("idem-key") == Some("evt_1")));
        let e = event(&app, "pay", "evt_1").await;
        let a = e.body["attempts"].as_array().expect("attempts").clone();
        assert_eq!(a.len(), 3);
        assert_eq!(a[0]["status"], 500);
        assert_eq!(a[0]["error"]["category"], "http");
        assert_eq!(a[1]["status"], 502);
        assert_eq!(a[2]["status"], 200);
        assert_eq!(e.body["record"]["result"]["attempt"], 3);
        let types = app.event_types("pay", "evt_1").await;
        assert_eq!(
            types.iter().filter(|t| *t == "failed").count(),
            2,
            "{types:?}"
        );
    }
}

#[tokio::test]
async fn retry_after_is_a_floor_and_a_hang_times_out() {
    for backend in backends() {
        let app = spawn_on(backend).await;
        let sink = Sink::start(vec![
            Answer {
                status: 503,
                retry_after: Some("120"),
                delay_ms: 0,
            },
            Answer {
                status: 200,
                retry_after: None,
                delay_ms: 3000,
            },
        ])
        .await;
        let mut doc = stripe_source(&sink.url);
        doc["forward"]["timeout_ms"] = json!(300);
        put_source(&app, "pay", &doc).await;
        let t0 = app.now();
        post_stripe(&app, "pay", SECRET, &evt("evt_1")).await;
        assert!(until_state(&app, "pay", "evt_1", "failed_retryable").await);
        let rec = app.record("pay", "evt_1").await;
        let nb = chrono::DateTime::parse_from_rfc3339(
            rec.body["record"]["not_before"].as_str().expect("nb"),
        )
        .expect("time")
        .timestamp_millis();
        assert!(nb >= t0.0 + 120_000, "not_before {nb} honours Retry-After");
        app.advance(60_000);
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(sink.count(), 1, "nothing before Retry-After");
        app.advance(61_000);
        // The second answer hangs past forward.timeout_ms: a timeout, retried.
        let timed_out = eventually(Duration::from_secs(10), || async {
            let e = event(&app, "pay", "evt_1").await;
            e.body["attempts"].as_array().is_some_and(|a| a.len() >= 2)
        })
        .await;
        assert!(timed_out);
        let e = event(&app, "pay", "evt_1").await;
        let a = &e.body["attempts"][1];
        assert_eq!(a["status"], Value::Null);
        assert_eq!(a["error"]["category"], "timeout");
        let done = eventually(Duration::from_secs(10), || async {
            app.advance(10);
            state_of(&app, "pay", "evt_1").await == "completed"
        })
        .await;
        assert!(done);
    }
}

#[tokio::test]
async fn gone_and_exhausted_deliveries_go_to_review_with_their_alert() {
    for backend in backends() {
        let alerts = Sink::start(vec![]).await;
        let app = spawn_with(Options {
            alert_interval: Duration::from_millis(50),
            backend,
            ..Default::default()
        })
        .await;
        let sink = Sink::start(vec![answer(410), answer(500), answer(500)]).await;
        app.patch_namespace(
            "pay",
            json!({"alert_url": alerts.url, "egress": {"allow": ["127.0.0.1"]}}),
        )
        .await;
        let mut doc = stripe_source(&sink.url);
        doc["forward"]["retry"]["max_attempts"] = json!(2);
        put_source(&app, "pay", &doc).await;
        post_stripe(&app, "pay", SECRET, &evt("evt_gone")).await;
        assert!(until_state(&app, "pay", "evt_gone", "needs_review").await);
        assert_eq!(sink.count(), 1, "410 is not retried");
        post_stripe(&app, "pay", SECRET, &evt("evt_dead")).await;
        let dead = eventually(Duration::from_secs(10), || async {
            app.advance(10);
            state_of(&app, "pay", "evt_dead").await == "needs_review"
        })
        .await;
        assert!(dead);
        assert_eq!(sink.count(), 3);
        let reasons = eventually(Duration::from_secs(10), || async {
            let got = alerts.got();
            let rs: Vec<String> = got
                .iter()
                .filter_map(|g| serde_json::from_slice::<Value>(&g.body).ok())
                .filter_map(|v| v["reason"].as_str().map(str::to_owned))
                .collect();
            rs.contains(&"delivery_gone".to_owned())
                && rs.contains(&"delivery_exhausted".to_owned())
        })
        .await;
        assert!(reasons, "alerts delivery_gone and delivery_exhausted");
        // Redeliver: a fresh budget, attempt numbers keep counting.
        let r = app
            .post(
                "/v1/sources/pay/events/evt_gone/redeliver",
                json!({"note": "receiver fixed"}),
            )
            .await;
        assert_eq!(r.status, 202, "{}", r.text);
        assert_eq!(
            r.body,
            json!({"key": "evt_gone", "state": "prepared", "destinations": [
                {"name": "default", "key": "evt_gone", "state": "prepared"}]})
        );
        assert!(until_state(&app, "pay", "evt_gone", "completed").await);
        let last = sink.got().last().cloned().expect("one more");
        assert_eq!(last.header("idem-attempt"), Some("2"));
        let types = app.event_types("pay", "evt_gone").await;
        assert!(types.contains(&"resolved".to_owned()), "{types:?}");
        // Bulk: the other dead letter.
        let r = app
            .post("/v1/sources/pay/redeliver", json!({"note": "all of them"}))
            .await;
        assert_eq!(r.body, json!({"scheduled": 1}), "{}", r.text);
        assert!(until_state(&app, "pay", "evt_dead", "completed").await);
        // A redeliver needs a note.
        app.post("/v1/sources/pay/events/evt_dead/redeliver", json!({}))
            .await
            .problem(422, "invalid_field");
    }
}
#[tokio::test]
async fn a_forward_secret_signs_every_forward_the_standard_webhooks_way() {
    for backend in backends() {
        let app = spawn_on(backend).await;
        let sink = Sink::start(vec![]).await;
        let mut doc = stripe_source(&sink.url);
        doc["forward"]["secret"] = json!(FWD_SECRET);
        put_source(&app, "pay", &doc).await;
        post_stripe(&app, "pay", SECRET, &evt("evt_1")).await;
        assert!(until_state(&app, "pay", "evt_1", "completed").await);
        let g = sink.got().remove(0);
        assert_eq!(g.header("webhook-id"), Some("evt_1"));
        let ts: i64 = g
            .header("webhook-timestamp")
            .expect("ts")
            .parse()
            .expect("int");
        let secret = idem::AlertSecret::parse(FWD_SECRET).expect("secret");
        assert_eq!(
            g.header("webhook-signature"),
            Some(secret.sign("evt_1", ts, &g.body).as_str())
        );
        if let Some(ok) = official_verify(FWD_SECRET, &g.headers, &g.body) {
            assert!(ok, "the official library accepts the forward");
            assert_eq!(official_verify(FWD_SECRET, &g.headers, b"{}"), Some(false));
        }
    }
}

#[tokio::test]
async fn two_instances_on_one_postgres_forward_every_event_once() {
    let Some(db) = idem_testkit::pg::PgDb::create("two instances forwarding") else {
        return;
    };
    let sink = Sink::start(
        (0..40)
            .map(|_| Answer {
                status: 200,
                retry_after: None,
                delay_ms: 30,
            })
            .collect(),
    )
    .await;
    let a = spawn_with(Options {
        db: Some(db.url().to_owned()),
        backend: Backend::Postgres,
        ..Default::default()
    })
    .await;
    let b = spawn_with(Options {
        db: Some(db.url().to_owned()),
        backend: Backend::Postgres,
        ..Default::default()
    })
    .await;
    put_source(&a, "pay", &stripe_source(&sink.url)).await;
    let n = 30;
    for i in 0..n {
        let app = if i % 2 == 0 { &a } else { &b };
        let r = post_stripe(app, "pay", SECRET, &evt(&format!("evt_{i}"))).await;
        assert_eq!(r.body["events"][0]["status"], "accepted", "{}", r.text);
    }
    let all = eventually(Duration::from_secs(30), || async {
        let l = a
            .get("/v1/sources/pay/events?state=completed&limit=1000")
            .await;
        l.body["items"].as_array().map(Vec::len) == Some(n)
    })
    .await;
    assert!(all, "every event delivered");
    let mut keys: Vec<String> = sink
        .got()
        .iter()
        .filter_map(|g| g.header("idem-key").map(str::to_owned))
        .collect();
    keys.sort();
    let total = keys.len();
    keys.dedup();
    assert_eq!(
        (keys.len(), total),
        (n, n),
        "each event forwarded exactly once"
    );
    assert_eq!(sink.max_in_flight.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_source_change_through_another_instance_is_seen_within_a_second() {
    let Some(db) = idem_testkit::pg::PgDb::create("source change across instances") else {
        return;
    };
    let on_pg = || Options {
        db: Some(db.url().to_owned()),
        backend: Backend::Postgres,
        ..Default::default()
    };
    let (a, b) = (spawn_with(on_pg()).await, spawn_with(on_pg()).await);
    let mut doc = stripe_source("http://127.0.0.1:9/x");
    doc["secrets"] = json!([SECRET, SECRET2]);
    put_source(&a, "pay", &doc).await;
    // b reads the source (and may keep it for up to a second).
    let r = post_stripe(&b, "pay", SECRET, &evt("evt_1")).await;
    assert_eq!(r.body["events"][0]["status"], "accepted", "{}", r.text);
    a.patch("/v1/sources/pay", json!({"secrets": [SECRET2]}))
        .await;
    // The instance that made the change sees it at once.
    post_stripe(&a, "pay", SECRET, &evt("evt_2"))
        .await
        .problem(401, "invalid_signature");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    post_stripe(&b, "pay", SECRET, &evt("evt_3"))
        .await
        .problem(401, "invalid_signature");
    let r = post_stripe(&b, "pay", SECRET2, &evt("evt_4")).await;
    assert_eq!(r.body["events"][0]["status"], "accepted", "{}", r.text);
    assert_eq!(delete(&a, "/v1/sources/pay?force=true").await.status, 204);
    post_stripe(&a, "pay", SECRET2, &evt("evt_5"))
        .await
        .problem(404, "not_found");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    post_stripe(&b, "pay", SECRET2, &evt("evt_6"))
        .await
        .problem(404, "not_found");
}

#[tokio::test]
async fn forward_concurrency_bounds_the_deliveries_of_a_source() {
    let app = spawn_on(Backend::Sqlite).await;
    let slow = |_| Answer {
        status: 200,
        retry_after: None,
        delay_ms: 150,
    };
    for (name, concurrency, want) in [("one", 1, 1), ("three", 3, 3)] {
        let sink = Sink::start((0..6).map(slow).collect()).await;
        let mut doc = stripe_source(&sink.url);
        doc["forward"]["concurrency"] = json!(concurrency);
        put_source(&app, name, &doc).await;
        for i in 0..6 {
            post_stripe(&app, name, SECRET, &evt(&format!("evt_{i}"))).await;
        }
        let all = eventually(Duration::from_secs(20), || async {
            let l = app
                .get(&format!("/v1/sources/{name}/events?state=completed"))
                .await;
            l.body["items"].as_array().map(Vec::len) == Some(6)
        })
        .await;
        assert!(all, "{name}: every event delivered");
        assert_eq!(sink.max_total.load(Ordering::SeqCst), want, "{name}");
    }
}

#[tokio::test]
async fn a_delivered_body_goes_with_its_records_result_and_the_tombstone_still_dedupes() {
    for backend in backends() {
        let app = spawn_on(backend).await;
        let sink = Sink::start(vec![]).await;
        app.patch_namespace(
            "kept",
            json!({"retention_ms": 1000, "audit_retention_ms": 5000}),
        )
        .await;
        put_source(&app, "kept", &stripe_source(&sink.url)).await;
        post_stripe(&app, "kept", SECRET, &evt("evt_1")).await;
        assert!(until_state(&app, "kept", "evt_1", "completed").await);
        // Not delivered: kept whatever its age.
        app.pause("kept").await;
        post_stripe(&app, "kept", SECRET, &evt("evt_undelivered")).await;
        app.advance(2000);
        idem_server::background::janitor_once(&app.store, app.now(), 100)
            .await
            .expect("janitor");
        let e = event(&app, "kept", "evt_1").await;
        assert_eq!(e.body["event"]["body"], Value::Null, "{}", e.text);
        assert!(
            e.body["record"]["result_expired"] == json!(true),
            "{}",
            e.text
        );
        let u = event(&app, "kept", "evt_undelivered").await;
        assert!(u.body["event"]["body"].is_string(), "{}", u.text);
        // The tombstone answers duplicate.
        app.advance(-1000);
        let again = post_stripe(&app, "kept", SECRET, &evt("evt_1")).await;
        assert_eq!(
            again.body["events"][0]["status"], "duplicate",
            "{}",
            again.text
        );
        // After audit_retention_ms the tombstone and the row go; the undelivered row stays.
        app.advance(10_000);
        for _ in 0..3 {
            idem_server::background::janitor_once(&app.store, app.now(), 100)
                .await
                .expect("janitor");
        }
        event(&app, "kept", "evt_1").await.problem(404, "not_found");
        assert!(event(&app, "kept", "evt_undelivered").await.body["event"]["body"].is_string());
    }
}

/// Without an exporter, a forward carries the W3C trace context of the request that queued
/// it, kept with the queued delivery (Stripe's forwarded headers do not include them): the
/// provider's on `/in`, none when it sent none, and the operator's on a redeliver.
#[tokio::test]
async fn a_forward_carries_the_trace_context_of_the_request_that_queued_it() {
    for backend in backends() {
        let app = spawn_on(backend).await;
        let sink = Sink::start(vec![answer(200), answer(410)]).await;
        put_source(&app, "traced", &stripe_source(&sink.url)).await;
        let provider = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let body = evt("evt_1");
        let t = app.now().0 / 1000;
        let headers = vec![
            ("Stripe-Signature".to_owned(), stripe_sig(SECRET, t, &body)),
            ("traceparent".to_owned(), provider.to_owned()),
            ("tracestate".to_owned(), "vendor=abc".to_owned()),
        ];
        let r = post_in(&app, "traced", &body, &headers).await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert!(until_state(&app, "traced", "evt_1", "completed").await);
        let got = sink.got();
        let trace_of = |g: &Got| {
            let all = |n: &str| -> Vec<String> {
                g.headers
                    .get_all(n)
                    .iter()
                    .filter_map(|v| v.to_str().ok().map(str::to_owned))
                    .collect()
            };
            (all("traceparent"), all("tracestate"))
        };
        assert_eq!(
            trace_of(&got[0]),
            (vec![provider.to_owned()], vec!["vendor=abc".to_owned()])
        );

        post_stripe(&app, "traced", SECRET, &evt("evt_2")).await;
        assert!(until_state(&app, "traced", "evt_2", "needs_review").await);
        let got = sink.got();
        assert_eq!(got.len(), 2);
        assert_eq!(trace_of(&got[1]), (vec![], vec![]));

        let operator = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let r = app
            .send(
                app.http
                    .post(format!(
                        "{}/v1/sources/traced/events/evt_2/redeliver",
                        app.base
                    ))
                    .header("traceparent", operator)
                    .json(&json!({"note": "receiver fixed"})),
            )
            .await;
        assert_eq!(r.status, 202, "{}", r.text);
        assert!(until_state(&app, "traced", "evt_2", "completed").await);
        let got = sink.got();
        assert_eq!(got.len(), 3);
        assert_eq!(trace_of(&got[2]), (vec![operator.to_owned()], vec![]));
    }
}
