//! `POST …/effect` end to end: a real server (both stores) sends to a loopback destination
//! written here, which counts every request it receives. Every test asserts that count: the
//! point of an effect is that the destination sees the request exactly once (or never).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use serde_json::{json, Value};
use tokio::io::AsyncReadExt;

use idem_testkit::app::*;

use crate::loopback::{self, closed_port};

/// One request the destination received.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    /// Path and query as sent (percent-encoding kept).
    target: String,
    headers: HeaderMap,
    body: Vec<u8>,
}

/// The destination: `/seq` answers its script, then 201.
type Dest = loopback::Dest<Seen>;

impl Dest {
    fn count_path(&self, prefix: &str) -> usize {
        self.all()
            .iter()
            .filter(|s| s.target.starts_with(prefix))
            .count()
    }
}

fn answer(status: u16, n: usize) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = (
        code,
        [
            ("content-type", "application/json"),
            ("request-id", "req_42"),
            ("set-cookie", "session=destination-secret"),
        ],
        json!({"id": "ch_1", "status": status, "n": n}).to_string(),
    )
        .into_response();
    if matches!(status, 429 | 503) {
        resp.headers_mut()
            .insert("retry-after", "2".parse().expect("header"));
    }
    if status == 302 {
        resp.headers_mut()
            .insert("location", "/status/201".parse().expect("header"));
    }
    resp
}

/// What `/ordered` answers.
const ORDERED: &str = r#"{"z":1,"a":2,"m":{"y":[{"d":0,"c":1}],"b":null}}"#;

async fn handle(State(d): State<Dest>, Path(rest): Path<String>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, 1 << 20)
        .await
        .map(|b| b.to_vec())
        .unwrap_or_default();
    let target = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default();
    let n = d.push(Seen {
        method: parts.method.to_string(),
        target: target.clone(),
        headers: parts.headers.clone(),
        body,
    });
    let mut segs = rest.split('/');
    match (segs.next(), segs.next()) {
        (Some("status"), Some(code)) => answer(code.parse().unwrap_or(500), n),
        (Some("seq"), _) => answer(d.next_status(201), n),
        // A JSON answer whose members are not in alphabetical order, nested ones neither.
        (Some("ordered"), _) => (
            StatusCode::CREATED,
            [("content-type", "application/json")],
            ORDERED,
        )
            .into_response(),
        (Some("big"), _) => (
            StatusCode::OK,
            [("content-type", "application/json")],
            format!("{{\"pad\": \"{}\"}}", "x".repeat(1000)),
        )
            .into_response(),
        // A 200 KB JSON answer (under the 256 KiB cap) with escapes and characters beyond ASCII.
        (Some("huge"), _) => (
            StatusCode::OK,
            [("content-type", "application/json")],
            json!({"id": "ch_big", "pad": "x\"é\n€".repeat(20_000), "n": n}).to_string(),
        )
            .into_response(),
        (Some("slow"), _) => {
            tokio::time::sleep(Duration::from_millis(500)).await;
            answer(201, n)
        }
        (Some("hang"), _) => {
            tokio::time::sleep(Duration::from_secs(120)).await;
            answer(200, n)
        }
        (Some("lookup"), _) => {
            let q = parts.uri.query().unwrap_or_default();
            if q.contains("r=found") {
                answer(200, n)
            } else if q.contains("r=not_found") {
                answer(404, n)
            } else {
                answer(500, n)
            }
        }
        _ => answer(200, n),
    }
}

/// The destination on 127.0.0.1:PORT.
async fn destination() -> (Dest, u16) {
    let d = Dest::default();
    let port = loopback::serve(dest_router(&d)).await;
    (d, port)
}

/// The destination's routes, recording into `d`.
fn dest_router(d: &Dest) -> Router {
    Router::new()
        .route("/{*rest}", any(handle))
        .with_state(d.clone())
}

/// [`destination`] that also counts the TCP connections it accepts.
async fn counting_destination() -> (Dest, u16, Arc<AtomicUsize>) {
    use axum::serve::ListenerExt;
    let d = Dest::default();
    let app = dest_router(&d);
    let (l, port) = loopback::listener().await;
    let conns = Arc::new(AtomicUsize::new(0));
    let n = conns.clone();
    let l = l.tap_io(move |_| {
        n.fetch_add(1, Ordering::SeqCst);
    });
    tokio::spawn(async move { axum::serve(l, app).await });
    (d, port, conns)
}

/// A destination that reads the request and then resets the connection: counts requests.
async fn resetting() -> (Arc<Mutex<usize>>, u16) {
    let n = Arc::new(Mutex::new(0usize));
    let (l, port) = loopback::listener().await;
    let count = n.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let count = count.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(k) => got.extend_from_slice(&buf[..k]),
                    }
                }
                *count.lock().expect("lock") += 1;
                // Linger 0: the close is a reset (RST), not an orderly FIN.
                #[allow(deprecated)]
                let _ = s.set_linger(Some(Duration::ZERO));
                drop(s);
            });
        }
    });
    (n, port)
}

async fn allow(app: &TestApp, ns: &str, entries: Value) {
    let r = app
        .patch_namespace(ns, json!({"egress": {"allow": entries}}))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
}

async fn effect(app: &TestApp, ns: &str, key: &str, body: Value) -> Resp {
    app.post(&format!("{}/effect", Api::key_path(ns, key)), body)
        .await
}

fn post(url: String) -> Value {
    json!({"request": {"method": "POST", "url": url, "body": {"amount": 100}}})
}

/// [`post`] to `path` on the loopback `port`.
fn post_to(port: u16, path: &str) -> Value {
    post(format!("http://127.0.0.1:{port}{path}"))
}

/// A server on `backend` whose namespace `pay` may reach the destination's port.
async fn app_for(backend: Backend, port: u16) -> TestApp {
    let app = spawn_on(backend).await;
    allow(&app, "pay", json!([format!("127.0.0.1:{port}")])).await;
    app
}

/// A [`destination`] and an [`app_for`] it.
async fn pay_app(backend: Backend) -> (Dest, u16, TestApp) {
    let (d, port) = destination().await;
    let app = app_for(backend, port).await;
    (d, port, app)
}

#[tokio::test]
async fn a_2xx_is_performed_once_and_replayed_with_the_header() {
    for backend in backends() {
        let (d, port, app) = pay_app(backend).await;
        let url = format!("http://127.0.0.1:{port}/status/201?expand=card");
        let r = effect(&app, "pay", "evt_1:charge", post(url.clone())).await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(r.body["outcome"], "performed");
        assert!(r.header("idempotent-replayed").is_none());
        assert_eq!(r.body["response"]["status"], 201);
        assert_eq!(r.body["response"]["body"]["id"], "ch_1");
        assert_eq!(r.body["response"]["truncated"], false);
        assert_eq!(r.body["response"]["headers"]["request-id"], "req_42");
        assert!(r.body["response"]["headers"].get("set-cookie").is_none());
        assert!(r.body.get("reconciled").is_none());
        let rec = &r.body["record"];
        assert_eq!(rec["state"], "completed");
        assert_eq!(rec["result"], r.body["response"]);
        assert_eq!(
            rec["request"],
            json!({"method": "POST", "url": format!("http://127.0.0.1:{port}/status/201"),
                   "idempotency_header": "Idempotency-Key"})
        );
        let seen = d.all();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].method, "POST");
        assert_eq!(seen[0].target, "/status/201?expand=card");
        assert_eq!(
            seen[0].headers.get("idempotency-key").map(|v| v.as_bytes()),
            Some(&b"evt_1:charge"[..])
        );
        assert_eq!(
            seen[0].headers.get("content-type").map(|v| v.as_bytes()),
            Some(&b"application/json"[..])
        );
        assert_eq!(seen[0].body, br#"{"amount":100}"#);

        let again = effect(&app, "pay", "evt_1:charge", post(url)).await;
        assert_eq!(again.status, 200, "{}", again.text);
        assert_eq!(again.body["outcome"], "completed");
        assert_eq!(again.header("idempotent-replayed"), Some("true"));
        assert_eq!(again.body["response"], r.body["response"]);
        assert_eq!(d.count(), 1, "the replay sent nothing");
        assert_eq!(
            app.event_types("pay", "evt_1:charge").await,
            ["acquired", "sent", "completed", "duplicate_hit"]
        );
    }
}

#[tokio::test]
async fn a_402_is_failed_permanent_and_replayed() {
    for backend in backends() {
        let (d, port, app) = pay_app(backend).await;
        let body = post_to(port, "/status/402");
        let r = effect(&app, "pay", "k402", body.clone()).await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(r.body["outcome"], "failed_permanent");
        assert_eq!(r.body["response"]["status"], 402);
        assert_eq!(r.body["record"]["state"], "failed_permanent");
        assert_eq!(r.body["record"]["result"], r.body["response"]);
        assert_eq!(r.body["record"]["last_error"]["http_status"], 402);
        let again = effect(&app, "pay", "k402", body).await;
        assert_eq!(again.status, 200);
        assert_eq!(again.body["outcome"], "failed_permanent");
        assert_eq!(again.header("idempotent-replayed"), Some("true"));
        assert_eq!(again.body["response"]["status"], 402);
        assert_eq!(d.count(), 1);
    }
}

#[tokio::test]
async fn a_409_is_permanent_unless_the_destination_is_idempotent() {
    for backend in backends() {
        let (d, port, app) = pay_app(backend).await;
        let url = format!("http://127.0.0.1:{port}/status/409");
        let r = effect(&app, "pay", "k409a", post(url.clone())).await;
        assert_eq!(
            (r.status, r.body["outcome"].as_str()),
            (200, Some("failed_permanent"))
        );
        let mut body = post(url);
        body["destination_idempotent"] = json!(true);
        let r = effect(&app, "pay", "k409b", body).await;
        assert_eq!(r.status, 409, "{}", r.text);
        assert_eq!(r.body["outcome"], "backoff");
        assert_eq!(r.body["record"]["state"], "failed_retryable");
        assert!(r.body["retry_after_ms"].is_i64());
        assert_eq!(d.count(), 2);
    }
}

#[tokio::test]
async fn a_429_or_503_backs_off_after_retry_after_and_resumes_with_the_same_key_value() {
    for backend in backends() {
        for status in [429u16, 503] {
            let (d, port, app) = pay_app(backend).await;
            d.script(&[status]);
            let body = post_to(port, "/seq");
            let r = effect(&app, "pay", "evt_9:email", body.clone()).await;
            assert_eq!(r.status, 409, "{}", r.text);
            assert_eq!(r.body["outcome"], "backoff");
            assert_eq!(r.body["response"]["status"], status);
            assert_eq!(r.body["response"]["headers"]["retry-after"], "2");
            let wait = r.body["retry_after_ms"].as_i64().expect("retry_after_ms");
            assert!(wait >= 2000, "Retry-After honoured: {wait}");
            assert!(r.header("retry-after").is_some());
            assert_eq!(r.body["record"]["last_error"]["http_status"], status);
            // Before not_before: the claim's backoff, nothing sent.
            let early = effect(&app, "pay", "evt_9:email", body.clone()).await;
            assert_eq!(early.body["outcome"], "backoff");
            assert!(early.body["response"].is_null());
            assert_eq!(d.count(), 1);
            app.advance(wait + 1);
            let r = effect(&app, "pay", "evt_9:email", body).await;
            assert_eq!(r.status, 200, "{}", r.text);
            assert_eq!(r.body["outcome"], "performed");
            assert_eq!(r.body["record"]["attempt"], 2);
            let seen = d.all();
            assert_eq!(seen.len(), 2);
            for s in &seen {
                assert_eq!(
                    s.headers.get("idempotency-key").map(|v| v.as_bytes()),
                    Some(&b"evt_9:email"[..]),
                    "the same idempotency value on every attempt"
                );
            }
        }
    }
}

#[tokio::test]
async fn a_5xx_goes_to_review_with_an_alert_unless_the_destination_is_idempotent() {
    for backend in backends() {
        let (d, port) = destination().await;
        let app = spawn_with(Options {
            backend,
            alert_interval: Duration::from_millis(50),
            ..Default::default()
        })
        .await;
        let alert_url = format!("http://127.0.0.1:{port}/alert");
        let r = app
            .patch_namespace(
                "pay",
                json!({"egress": {"allow": [format!("127.0.0.1:{port}")]}, "alert_url": alert_url}),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
        for status in [500u16, 502, 504] {
            let key = format!("k{status}");
            let body = post_to(port, &format!("/status/{status}"));
            let r = effect(&app, "pay", &key, body.clone()).await;
            assert_eq!(r.status, 409, "{}", r.text);
            assert_eq!(r.body["outcome"], "needs_review");
            assert_eq!(r.body["response"]["status"], status);
            assert_eq!(r.body["record"]["state"], "needs_review");
            assert!(r.body["record"]["result"].is_null());
            let again = effect(&app, "pay", &key, body.clone()).await;
            assert_eq!(again.body["outcome"], "needs_review");
            let mut idem = body;
            idem["destination_idempotent"] = json!(true);
            let r = effect(&app, "pay", &format!("{key}-idem"), idem).await;
            assert_eq!(r.body["outcome"], "backoff", "{}", r.text);
        }
        assert_eq!(d.count_path("/status/"), 6);
        assert!(
            eventually(Duration::from_secs(10), || async {
                d.count_path("/alert") >= 3
            })
            .await,
            "an alert per record in review"
        );
    }
}

#[tokio::test]
async fn a_redirect_is_never_followed() {
    for backend in backends() {
        let (d, port, app) = pay_app(backend).await;
        let r = effect(&app, "pay", "k302", post_to(port, "/status/302")).await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(r.body["outcome"], "failed_permanent");
        assert_eq!(r.body["response"]["headers"]["location"], "/status/201");
        assert_eq!(d.count(), 1);
        assert_eq!(d.count_path("/status/201"), 0);
    }
}

#[tokio::test]
async fn a_destination_that_accepts_and_hangs_is_a_timeout_in_review() {
    for backend in backends() {
        let (d, port, app) = pay_app(backend).await;
        let mut body = post_to(port, "/hang");
        body["timeout_ms"] = json!(300);
        let r = effect(&app, "pay", "khang", body.clone()).await;
        assert_eq!(r.status, 409, "{}", r.text);
        assert_eq!(r.body["outcome"], "needs_review");
        assert!(r.body["response"].is_null());
        assert_eq!(r.body["record"]["last_error"]["category"], "timeout");
        body["destination_idempotent"] = json!(true);
        let r = effect(&app, "pay", "khang2", body).await;
        assert_eq!(r.body["outcome"], "backoff", "{}", r.text);
        assert_eq!(d.count(), 2);
    }
}

#[tokio::test]
async fn a_reset_after_sending_is_ambiguous() {
    for backend in backends() {
        let (n, port) = resetting().await;
        let app = app_for(backend, port).await;
        let r = effect(&app, "pay", "kreset", post_to(port, "/x")).await;
        assert_eq!(r.status, 409, "{}", r.text);
        assert_eq!(r.body["outcome"], "needs_review");
        assert_eq!(*n.lock().expect("lock"), 1);
        assert_eq!(
            app.event_types("pay", "kreset").await,
            ["acquired", "sent", "failed"]
        );
    }
}

#[tokio::test]
async fn refused_connections_and_unresolvable_names_back_off_without_a_sent_event() {
    for backend in backends() {
        let port = closed_port();
        let app = app_for(backend, port).await;
        let r = effect(&app, "pay", "krefused", post_to(port, "/")).await;
        assert_eq!(r.status, 409, "{}", r.text);
        assert_eq!(r.body["outcome"], "backoff");
        assert_eq!(r.body["record"]["last_error"]["category"], "connection");
        let r = effect(
            &app,
            "open",
            "kdns",
            post("http://no-such-host.invalid/charge?card=s3cret".into()),
        )
        .await;
        assert_eq!(r.status, 409, "{}", r.text);
        assert_eq!(r.body["outcome"], "backoff");
        assert_eq!(
            app.event_types("open", "kdns").await,
            ["acquired", "failed"],
            "nothing was sent"
        );
        // Nothing left, yet the record shows a person what the attempt tried (never the
        // query string).
        let request = &r.body["record"]["request"];
        assert_eq!(request["method"], "POST", "{}", r.text);
        assert_eq!(request["url"], "http://no-such-host.invalid/charge");
        assert!(!r.text.contains("s3cret"), "{}", r.text);
    }
}

#[tokio::test]
async fn reconcile_found_not_found_and_unknown() {
    for backend in backends() {
        let (d, port, app) = pay_app(backend).await;
        for (result, status, outcome, state) in [
            ("found", 200, "performed", "completed"),
            ("not_found", 409, "backoff", "failed_retryable"),
            ("unknown", 409, "needs_review", "needs_review"),
        ] {
            let key = format!("ord/7:{result}");
            let mut body = post_to(port, "/status/500");
            body["reconcile"] = json!({
                "url": format!("http://127.0.0.1:{port}/lookup/{{key}}?r={result}"),
                "headers": {"Authorization": "Bearer lookup-secret"},
                "found": [200],
                "not_found": [404],
            });
            let r = effect(&app, "pay", &key, body).await;
            assert_eq!(r.status, status, "{result}: {}", r.text);
            assert_eq!(r.body["outcome"], outcome, "{result}");
            assert_eq!(r.body["reconciled"], true, "{result}");
            assert_eq!(r.body["record"]["state"], state, "{result}");
            let events = app.record("pay", &key).await;
            let rec = events.body["events"]
                .as_array()
                .expect("events")
                .iter()
                .find(|e| e["type"] == "reconciled")
                .cloned()
                .expect("a reconciled event");
            assert_eq!(rec["note"], result);
            if result == "found" {
                assert_eq!(r.body["response"]["status"], 200);
                assert_eq!(r.body["record"]["result"], r.body["response"]);
            }
            assert!(!events.text.contains("lookup-secret"));
        }
        let lookups: Vec<Seen> = d
            .all()
            .into_iter()
            .filter(|s| s.target.starts_with("/lookup/"))
            .collect();
        assert_eq!(lookups.len(), 3);
        for l in &lookups {
            assert_eq!(l.method, "GET");
            assert!(l.target.starts_with("/lookup/ord%2F7%3A"), "{}", l.target);
            assert!(l.headers.get("idempotency-key").is_none());
        }
        assert_eq!(d.count_path("/status/500"), 3);
    }
}

#[tokio::test]
async fn an_attempt_beyond_the_budget_is_never_sent() {
    for backend in backends() {
        let (d, port, app) = pay_app(backend).await;
        app.patch_namespace("pay", json!({"retry": {"max_attempts": 1}}))
            .await;
        let body = post_to(port, "/status/503");
        let r = effect(&app, "pay", "kbudget", body.clone()).await;
        assert_eq!(r.status, 409, "{}", r.text);
        assert_eq!(r.body["outcome"], "needs_review");
        app.advance(60_000);
        let r = effect(&app, "pay", "kbudget", body).await;
        assert_eq!(r.status, 409);
        assert_eq!(r.body["outcome"], "needs_review");
        assert_eq!(d.count(), 1);
    }
}

#[tokio::test]
async fn a_different_request_under_the_same_key_is_a_conflict_and_sends_nothing() {
    for backend in backends() {
        let (d, port, app) = pay_app(backend).await;
        let url = format!("http://127.0.0.1:{port}/status/201");
        let r = effect(&app, "pay", "kc", post(url.clone())).await;
        assert_eq!(r.body["outcome"], "performed");
        let mut other = post(url.clone());
        other["request"]["body"] = json!({"amount": 999});
        let r = effect(&app, "pay", "kc", other).await;
        assert_eq!(r.status, 422, "{}", r.text);
        assert_eq!(r.body["outcome"], "conflict");
        assert!(r.body["response"].is_null());
        // Headers are not part of the fingerprint.
        let mut same = post(url);
        same["request"]["headers"] = json!({"X-Trace": "abc"});
        let r = effect(&app, "pay", "kc", same).await;
        assert_eq!(r.body["outcome"], "completed");
        assert_eq!(d.count(), 1);
    }
}

#[tokio::test]
async fn a_paused_namespace_sends_nothing() {
    for backend in backends() {
        let (d, port, app) = pay_app(backend).await;
        assert_eq!(app.pause("pay").await.status, 200);
        let r = effect(&app, "pay", "kp", post_to(port, "/x")).await;
        assert_eq!(r.status, 503, "{}", r.text);
        assert_eq!(r.body["outcome"], "paused");
        assert!(r.body["record"].is_null());
        assert_eq!(d.count(), 0);
        assert_eq!(app.record("pay", "kp").await.status, 404);
    }
}

#[tokio::test]
async fn the_egress_guard_refuses_before_anything_is_written_or_sent() {
    for backend in backends() {
        let (d, port) = destination().await;
        let app = spawn_on(backend).await;
        let loopback = format!("http://127.0.0.1:{port}/x");
        // No allow list: loopback is refused, naming the member.
        let r = effect(&app, "pay", "kf", post(loopback.clone())).await;
        let p = r.problem(422, "destination_forbidden");
        assert_eq!(p["field"], "request.url");
        for url in [
            "http://10.0.0.1/x".to_owned(),
            "http://169.254.169.254/latest/meta-data/".to_owned(),
            format!("http://[::ffff:127.0.0.1]:{port}/x"),
            format!("http://localhost:{port}/x"),
            "http://[fd00::1]/".to_owned(),
        ] {
            let r = effect(&app, "pay", "kf", post(url.clone())).await;
            assert_eq!(
                r.problem(422, "destination_forbidden")["field"],
                "request.url",
                "{url}"
            );
        }
        assert_eq!(app.record("pay", "kf").await.status, 404, "nothing written");
        // Listed: passes, on that port only; others are excluded by the list.
        allow(&app, "pay", json!([format!("127.0.0.1:{port}")])).await;
        let r = effect(&app, "pay", "kf", post(loopback.clone())).await;
        assert_eq!(r.body["outcome"], "performed", "{}", r.text);
        let r = effect(
            &app,
            "pay",
            "kg",
            post(format!("http://127.0.0.1:{}/x", closed_port())),
        )
        .await;
        r.problem(422, "destination_forbidden");
        let r = effect(&app, "pay", "kg", post("http://8.8.8.8/x".into())).await;
        r.problem(422, "destination_forbidden");
        // A reconcile URL outside the policy is refused naming it.
        let mut body = post(loopback);
        body["reconcile"] =
            json!({"url": "http://169.254.169.254/{key}", "found": [200], "not_found": [404]});
        let r = effect(&app, "pay", "kh", body).await;
        assert_eq!(
            r.problem(422, "destination_forbidden")["field"],
            "reconcile.url"
        );
        assert_eq!(app.record("pay", "kh").await.status, 404);
        assert_eq!(d.count(), 1, "only the listed call was sent");
        let m = app.get("/metrics").await.text;
        assert!(m.contains("idem_egress_refused_total"), "{m}");
        assert!(
            m.contains("idem_effects_total{outcome=\"performed\"}"),
            "{m}"
        );
        assert!(m.contains("idem_effect_duration_seconds"), "{m}");
        assert!(m.contains("idem_reconciles_total{result=\"found\"}"), "{m}");
        // Bad egress policies are refused like any policy field.
        let r = app
            .patch_namespace("pay", json!({"egress": {"allow": ["http://x/"]}}))
            .await;
        assert_eq!(r.problem(422, "invalid_field")["field"], "egress.allow[0]");
        let r = app
            .patch_namespace("pay", json!({"egress": {"nope": true}}))
            .await;
        assert_eq!(r.problem(400, "unknown_field")["field"], "egress.nope");
    }
}

/// The egress rules a call checks are reused for up to a second, but a change through this
/// instance applies to the very next call: narrowing the allow list refuses at once, and
/// widening it again lets the next call through.
#[tokio::test]
async fn a_policy_change_applies_to_the_next_effect_at_once() {
    for backend in backends() {
        let (d, port, app) = pay_app(backend).await;
        let url = format!("http://127.0.0.1:{port}/x");
        let r = effect(&app, "pay", "k1", post(url.clone())).await;
        assert_eq!(r.body["outcome"], "performed", "{}", r.text);
        allow(&app, "pay", json!([format!("127.0.0.1:{}", closed_port())])).await;
        let r = effect(&app, "pay", "k2", post(url.clone())).await;
        assert_eq!(
            r.problem(422, "destination_forbidden")["field"],
            "request.url"
        );
        assert_eq!(app.record("pay", "k2").await.status, 404, "nothing written");
        allow(&app, "pay", json!([format!("127.0.0.1:{port}")])).await;
        let r = effect(&app, "pay", "k2", post(url)).await;
        assert_eq!(r.body["outcome"], "performed", "{}", r.text);
        assert_eq!(d.count(), 2, "the refused call sent nothing");
    }
}

/// With a non-empty allow list, a name it does not list is refused by name before any lookup:
/// 422 `destination_forbidden`, nothing written, nothing sent, whether the name resolves or
/// not (here it cannot: a retryable "did not resolve" would be the wrong answer).
#[tokio::test]
async fn an_unlisted_name_is_refused_by_name_before_any_lookup() {
    for backend in backends() {
        let (d, port, app) = pay_app(backend).await;
        for (key, url) in [
            ("ks1", "https://api.stripe.com/v1/charges"),
            ("ks2", "http://no-such-host.invalid/charge"),
            ("ks3", "http://localhost/x"),
        ] {
            let r = effect(&app, "pay", key, post(url.into())).await;
            let p = r.problem(422, "destination_forbidden");
            assert_eq!(p["field"], "request.url", "{url}");
            assert!(
                p["detail"].as_str().unwrap_or("").contains("allow list"),
                "{url}: {p}"
            );
            assert_eq!(
                app.record("pay", key).await.status,
                404,
                "{url}: nothing written"
            );
        }
        // The same for a reconcile lookup to an unlisted name.
        let mut body = post_to(port, "/x");
        body["reconcile"] =
            json!({"url": "https://api.stripe.com/{key}", "found": [200], "not_found": [404]});
        let r = effect(&app, "pay", "ks4", body).await;
        assert_eq!(
            r.problem(422, "destination_forbidden")["field"],
            "reconcile.url"
        );
        assert_eq!(app.record("pay", "ks4").await.status, 404);
        // Listed by name, the name passes the list (and then fails to resolve: retryable).
        allow(
            &app,
            "pay",
            json!([format!("127.0.0.1:{port}"), "no-such-host.invalid"]),
        )
        .await;
        let r = effect(
            &app,
            "pay",
            "ks5",
            post("http://no-such-host.invalid/c".into()),
        )
        .await;
        assert_eq!(r.status, 409, "{}", r.text);
        assert_eq!(r.body["outcome"], "backoff");
        assert_eq!(d.count(), 0, "nothing was sent");
    }
}

#[tokio::test]
async fn secret_headers_are_sent_but_never_stored_or_answered() {
    for backend in backends() {
        let (d, port, app) = pay_app(backend).await;
        let secret = "sk_live_TOPSECRET_4242";
        let mut body = post(format!(
            "http://127.0.0.1:{port}/status/500?token=query-secret"
        ));
        body["request"]["headers"] =
            json!({"Authorization": format!("Bearer {secret}"), "X-Api-Key": secret});
        let r = effect(&app, "pay", "ksecret", body).await;
        assert_eq!(r.body["outcome"], "needs_review", "{}", r.text);
        assert!(!r.text.contains(secret), "{}", r.text);
        assert!(!r.text.contains("query-secret"), "{}", r.text);
        let rec = app.record("pay", "ksecret").await;
        assert!(!rec.text.contains(secret), "{}", rec.text);
        assert!(!rec.text.contains("query-secret"), "{}", rec.text);
        let list = app.list("pay", "").await;
        assert!(!list.text.contains(secret));
        let seen = d.all();
        assert_eq!(seen.len(), 1);
        assert_eq!(
            seen[0].headers.get("x-api-key").map(|v| v.as_bytes()),
            Some(secret.as_bytes())
        );
    }
}

#[tokio::test]
async fn bodies_can_be_text_or_bytes_and_validation_comes_first() {
    let (d, port) = destination().await;
    let app = app_for(Backend::Sqlite, port).await;
    let mut body = json!({"request": {"method": "PUT",
        "url": format!("http://127.0.0.1:{port}/status/200"), "body_text": "plain words",
        "headers": {"Content-Type": "text/plain"}}, "idempotency_header": null});
    let r = effect(&app, "pay", "ktext", body.clone()).await;
    assert_eq!(r.body["outcome"], "performed", "{}", r.text);
    assert_eq!(
        r.body["record"]["request"]["idempotency_header"],
        Value::Null
    );
    body["request"] = json!({"method": "DELETE",
        "url": format!("http://127.0.0.1:{port}/status/200"), "body_base64": "AAH/"});
    let r = effect(&app, "pay", "kbytes", body).await;
    assert_eq!(r.body["outcome"], "performed", "{}", r.text);
    let seen = d.all();
    assert_eq!(seen[0].body, b"plain words");
    assert!(seen[0].headers.get("idempotency-key").is_none());
    assert_eq!(seen[1].body, [0u8, 1, 255]);
    assert_eq!(seen[1].method, "DELETE");
    // Validation comes first: nothing is sent for a bad body.
    let r = effect(
        &app,
        "pay",
        "kbad",
        json!({"request": {"method": "GET", "url": format!("http://127.0.0.1:{port}/")}}),
    )
    .await;
    assert_eq!(r.problem(422, "invalid_field")["field"], "request.method");
    let r = effect(
        &app,
        "pay",
        "kbad",
        json!({"request": {"method": "POST", "url": format!("http://127.0.0.1:{port}/")},
               "timeout_ms": 300_001}),
    )
    .await;
    assert_eq!(r.problem(422, "invalid_field")["field"], "timeout_ms");
    // A header that is the idempotency header is named as the request spells it.
    let r = effect(
        &app,
        "pay",
        "kbad",
        json!({"request": {"method": "POST", "url": format!("http://127.0.0.1:{port}/"),
                           "headers": {"Idempotency-Key": "mine"}}}),
    )
    .await;
    let p = r.problem(422, "invalid_field");
    assert_eq!(p["field"], "request.headers.Idempotency-Key", "{p}");
    assert!(
        p["detail"]
            .as_str()
            .unwrap_or("")
            .contains("`request.headers.Idempotency-Key`"),
        "{p}"
    );
    assert_eq!(d.count(), 2);
}

#[tokio::test]
async fn a_long_response_is_kept_up_to_the_cap_and_marked_truncated() {
    for backend in backends() {
        let (d, port) = destination().await;
        let app = spawn_with(Options {
            backend,
            max_response_bytes: 100,
            ..Default::default()
        })
        .await;
        allow(&app, "pay", json!([format!("127.0.0.1:{port}")])).await;
        let r = effect(&app, "pay", "kbig", post_to(port, "/big")).await;
        assert_eq!(r.body["outcome"], "performed", "{}", r.text);
        let resp = &r.body["response"];
        assert_eq!(resp["truncated"], true);
        // Cut JSON is kept as the text it is.
        let body = resp["body"].as_str().expect("text");
        assert_eq!(body.len(), 100);
        assert!(body.starts_with("{\"pad\": \"xxx"), "{body}");
        assert_eq!(
            app.record("pay", "kbig").await.body["record"]["result"],
            *resp
        );
        assert_eq!(d.count(), 1);
    }
}

#[tokio::test]
async fn a_json_response_is_replayed_as_the_destination_wrote_it() {
    for backend in backends() {
        let (d, port, app) = pay_app(backend).await;
        let body = post_to(port, "/ordered");
        let want = format!(r#""body":{ORDERED}"#);
        let r = effect(&app, "pay", "evt_3:charge", body.clone()).await;
        assert_eq!(r.body["outcome"], "performed", "{backend:?} {}", r.text);
        assert!(r.text.contains(&want), "{backend:?} {}", r.text);
        // The duplicate is answered from the store, members in the destination's order.
        let again = effect(&app, "pay", "evt_3:charge", body).await;
        assert_eq!(
            again.body["outcome"], "completed",
            "{backend:?} {}",
            again.text
        );
        assert_eq!(again.header("idempotent-replayed"), Some("true"));
        assert!(again.text.contains(&want), "{backend:?} {}", again.text);
        assert_eq!(
            again.text.matches(&want).count(),
            2,
            "response and record.result: {backend:?} {}",
            again.text
        );
        let read = app.record("pay", "evt_3:charge").await;
        assert!(read.text.contains(&want), "{backend:?} {}", read.text);
        assert_eq!(d.count(), 1, "the replay sent nothing");
    }
}

#[tokio::test]
async fn concurrent_duplicates_wait_for_the_holder_and_get_the_stored_answer() {
    for backend in backends() {
        let (d, port, app) = pay_app(backend).await;
        let mut body = post_to(port, "/slow");
        body["wait_ms"] = json!(10_000);
        let one = || effect(&app, "pay", "evt_burst:charge", body.clone());
        let (a, b, c, e, f) = tokio::join!(one(), one(), one(), one(), one());
        let answers = [a, b, c, e, f];
        let mut outcomes: Vec<&str> = answers
            .iter()
            .map(|r| r.body["outcome"].as_str().unwrap_or("?"))
            .collect();
        outcomes.sort_unstable();
        assert_eq!(
            outcomes,
            [
                "completed",
                "completed",
                "completed",
                "completed",
                "performed"
            ],
            "{answers:?}"
        );
        for r in &answers {
            assert_eq!(r.status, 200);
            assert_eq!(r.body["response"]["status"], 201);
        }
        assert_eq!(d.count(), 1, "one request for five deliveries");
    }
}

#[tokio::test]
async fn a_wait_that_ends_still_held_answers_with_the_lease_left_when_it_ended() {
    for backend in backends() {
        let (d, port, app) = pay_app(backend).await;
        // The holder's attempt hangs until its 2 s timeout: a lease of 2000 + 5000 ms.
        let mut body = post_to(port, "/hang");
        body["timeout_ms"] = json!(2000);
        let holder = effect(&app, "pay", "evt_wait:charge", body.clone());
        let waiter = async {
            while d.count() == 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let mut waiting = body.clone();
            waiting["wait_ms"] = json!(600);
            let call = effect(&app, "pay", "evt_wait:charge", waiting);
            // The ledger's clock moves 3 s while the call waits; the lease is still held.
            let tick = async {
                tokio::time::sleep(Duration::from_millis(200)).await;
                app.advance(3000);
            };
            tokio::join!(call, tick).0
        };
        let (_, r) = tokio::join!(holder, waiter);
        assert_eq!(r.status, 409, "{backend:?} {}", r.text);
        assert_eq!(r.body["outcome"], "in_flight", "{backend:?} {}", r.text);
        // As on `POST …/claim`: the time left when the wait ended, not when it began.
        assert_eq!(r.body["retry_after_ms"], 4000, "{backend:?} {}", r.text);
        assert_eq!(
            r.body["record"]["state"], "processing",
            "{backend:?} {}",
            r.text
        );
        assert_eq!(d.count(), 1, "the waiting call sent nothing");
    }
}

#[tokio::test]
async fn an_effect_reports_its_cost_like_complete_and_fail_and_a_bad_cost_sends_nothing() {
    for backend in backends() {
        let (d, port, app) = pay_app(backend).await;
        d.script(&[503]);
        let mut body = post_to(port, "/seq");
        body["cost"] = json!({"tokens": 300, "usd": 0.25});
        let r = effect(&app, "pay", "evt_c:draft", body.clone()).await;
        assert_eq!(r.body["outcome"], "backoff", "{}", r.text);
        let wait = r.body["retry_after_ms"].as_i64().expect("retry_after_ms");
        app.advance(wait + 1);
        body["cost"] = json!({"tokens": 200, "usd": 0.5});
        let r = effect(&app, "pay", "evt_c:draft", body.clone()).await;
        assert_eq!(r.body["outcome"], "performed", "{}", r.text);
        assert_eq!(
            r.body["record"]["cost"],
            json!({"tokens": 500, "usd": 0.75, "retry_tokens": 200, "retry_usd": 0.5})
        );
        assert_eq!(d.count(), 2);

        // Refused before anything is claimed or sent, naming the member.
        let mut bad = post_to(port, "/status/201");
        bad["cost"] = json!({"tokens": -1});
        let r = effect(&app, "pay", "evt_c:other", bad).await;
        assert_eq!(r.status, 422, "{}", r.text);
        assert_eq!(r.body["code"], "invalid_field");
        assert_eq!(r.body["field"], "cost.tokens");
        assert_eq!(d.count(), 2, "nothing sent");
        let rec = app.get(&Api::key_path("pay", "evt_c:other")).await;
        assert_eq!(rec.status, 404, "nothing written");
    }
}

#[tokio::test]
async fn twenty_concurrent_identical_effects_send_one_request() {
    for backend in backends() {
        let (d, port, app) = pay_app(backend).await;
        let body = post_to(port, "/slow");
        let calls = (0..20).map(|_| effect(&app, "pay", "evt_twenty:charge", body.clone()));
        let answers = futures::future::join_all(calls).await;
        let performed = answers
            .iter()
            .filter(|r| r.body["outcome"] == "performed")
            .count();
        assert_eq!(performed, 1, "{answers:?}");
        for r in &answers {
            let outcome = r.body["outcome"].as_str().unwrap_or("?");
            assert!(
                matches!(outcome, "performed" | "completed" | "in_flight"),
                "{outcome}: {}",
                r.text
            );
            if outcome == "in_flight" {
                assert_eq!(r.status, 409, "{}", r.text);
            }
        }
        assert_eq!(
            d.count(),
            1,
            "one request reached the destination for 20 calls"
        );
        let later = effect(&app, "pay", "evt_twenty:charge", body).await;
        assert_eq!(later.body["outcome"], "completed");
        assert_eq!(d.count(), 1);
    }
}

#[tokio::test]
async fn sequential_effects_to_one_destination_share_one_kept_connection() {
    for backend in backends() {
        let (d, port, conns) = counting_destination().await;
        let app = app_for(backend, port).await;
        let url = format!("http://127.0.0.1:{port}/status/201");
        for i in 0..4 {
            let r = effect(&app, "pay", &format!("kept-{i}"), post(url.clone())).await;
            assert_eq!(r.status, 200, "{}", r.text);
            assert_eq!(r.body["outcome"], "performed");
        }
        assert_eq!(d.count(), 4, "{backend:?}");
        assert_eq!(
            conns.load(Ordering::SeqCst),
            1,
            "{backend:?}: 4 effects, one TCP connection"
        );
        // A namespace whose policy refuses the destination sends nothing, kept connection
        // or not.
        let r = effect(&app, "other", "kept-x", post(url.clone())).await;
        r.problem(422, "destination_forbidden");
        assert_eq!((d.count(), conns.load(Ordering::SeqCst)), (4, 1));
    }
}

/// A large answer is the same text a small one would be: the stored result in `response` and
/// in `record.result`, byte for byte as serde writes the whole answer, with its exact
/// `Content-Length`, when performed and when replayed.
#[tokio::test]
async fn a_large_answer_is_whole_in_both_places_when_performed_and_replayed() {
    let every: String = (0x21u8..=0x7e).map(char::from).collect();
    for backend in backends() {
        let (d, port, app) = pay_app(backend).await;
        for (n, key) in ["khuge", every.as_str()].into_iter().enumerate() {
            let first = effect(&app, "pay", key, post_to(port, "/huge")).await;
            let again = effect(&app, "pay", key, post_to(port, "/huge")).await;
            // The same record through the claim endpoint: a replay of the stored result.
            let claimed = app.claim("pay", key, json!({})).await;
            // The effect answers carry the result as `response` too; a claim's answer has none.
            for (r, outcome, with_response) in [
                (&first, "performed", true),
                (&again, "completed", true),
                (&claimed, "completed", false),
            ] {
                assert_eq!(r.status, 200, "{}", &r.text[..r.text.len().min(300)]);
                assert_eq!(r.body["outcome"], outcome);
                let result = &r.body["record"]["result"];
                assert_eq!(result["body"]["id"], "ch_big");
                assert_eq!(
                    result["body"]["pad"].as_str().map(|p| p.chars().count()),
                    Some(5 * 20_000)
                );
                if with_response {
                    assert_eq!(r.body["response"], *result);
                }
                assert_eq!(r.body["record"]["key"], key);
                assert_eq!(
                    r.text,
                    serde_json::to_string(&r.body).expect("serializes"),
                    "the answer is the text of its value"
                );
                assert_eq!(
                    r.header("content-length"),
                    Some(r.text.len().to_string().as_str())
                );
            }
            assert_eq!(again.header("idempotent-replayed"), Some("true"));
            assert_eq!(claimed.header("idempotent-replayed"), Some("true"));
            assert_eq!(d.count(), n + 1, "one request per key");
        }
    }
}

#[tokio::test]
async fn a_caller_that_hangs_up_mid_request_does_not_lose_the_answer() {
    for backend in backends() {
        let (d, port, app) = pay_app(backend).await;
        // The destination answers 201 after 500 ms; the caller gives up after 100 ms.
        let url = format!("{}{}/effect", app.base, Api::key_path("pay", "hangup"));
        let gone = app
            .http
            .post(url)
            .timeout(Duration::from_millis(100))
            .json(&post_to(port, "/slow"))
            .send()
            .await;
        assert!(gone.is_err(), "the caller hung up");
        let done = eventually(Duration::from_secs(5), || async {
            app.record("pay", "hangup").await.body["record"]["state"] == "completed"
        })
        .await;
        let rec = app.record("pay", "hangup").await;
        assert!(done, "{}", rec.text);
        assert_eq!(rec.body["record"]["result"]["status"], 201, "{}", rec.text);
        // The next call replays the stored answer; nothing is sent again.
        let r = effect(&app, "pay", "hangup", post_to(port, "/slow")).await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(r.body["outcome"], "completed", "{}", r.text);
        assert_eq!(d.count_path("/slow"), 1);
    }
}
