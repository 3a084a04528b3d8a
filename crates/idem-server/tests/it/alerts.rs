use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

use idem_server::background::{AlertSender, AlertsReport};
use idem_testkit::app::*;

use crate::loopback;
use crate::standard_webhooks::official_verify;

/// A local alert receiver; `fail_first` answers 500 that many times first.
async fn receiver(fail_first: usize) -> (String, Arc<Mutex<Vec<Value>>>) {
    let got: Arc<Mutex<Vec<Value>>> = Arc::default();
    let seen = Arc::new(Mutex::new(0usize));
    let store = got.clone();
    let app = Router::new().route(
        "/alert",
        post(move |Json(v): Json<Value>| {
            let (store, seen) = (store.clone(), seen.clone());
            async move {
                let n = {
                    let mut s = seen.lock().expect("lock");
                    *s += 1;
                    *s
                };
                if n <= fail_first {
                    return axum::http::StatusCode::INTERNAL_SERVER_ERROR;
                }
                store.lock().expect("lock").push(v);
                axum::http::StatusCode::NO_CONTENT
            }
        }),
    );
    let port = loopback::serve(app).await;
    (format!("http://127.0.0.1:{port}/alert"), got)
}

#[tokio::test]
async fn needs_review_alert_is_delivered_once_without_payloads() {
    let (url, got) = receiver(0).await;
    let app = alerting(Backend::Sqlite).await;
    app.patch_namespace("pay", json!({"alert_url": url})).await;
    let t = Api::acquired(
        &app.claim(
            "pay",
            "evt_123456:charge",
            json!({"payload": {"card": "4242"}}),
        )
        .await,
    );
    let r = app
        .fail(
            "pay",
            "evt_123456:charge",
            json!({"token": t, "error": {"category": "timeout", "message": "read timed out"}}),
        )
        .await;
    assert_eq!(r.body["state"], "needs_review", "{}", r.text);
    // More claims of the same record in review: no new alert.
    for _ in 0..3 {
        assert_eq!(
            app.claim(
                "pay",
                "evt_123456:charge",
                json!({"payload": {"card": "4242"}})
            )
            .await
            .status,
            409
        );
    }
    assert!(
        eventually(Duration::from_secs(5), || async {
            !got.lock().expect("lock").is_empty()
        })
        .await
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    let alerts = got.lock().expect("lock").clone();
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    let a = &alerts[0];
    assert_eq!(a["namespace"], "pay");
    assert_eq!(a["state"], "needs_review");
    assert_eq!(a["error_category"], "timeout");
    assert!(a["key_masked"]
        .as_str()
        .is_some_and(|k| k.starts_with("evt_12…")));
    assert_eq!(a["key_sha256"].as_str().map(str::len), Some(64));
    assert!(a["reason"].is_string() && a["at"].is_string());
    let text = a.to_string();
    assert!(
        !text.contains("4242")
            && !text.contains("read timed out")
            && !text.contains("evt_123456:charge")
    );
    let mut keys: Vec<&String> = a.as_object().expect("obj").keys().collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "at",
            "error_category",
            "key_masked",
            "key_sha256",
            "namespace",
            "reason",
            "state"
        ]
    );
    assert!(app
        .event_types("pay", "evt_123456:charge")
        .await
        .contains(&"alert_sent".to_string()));
}

#[tokio::test]
async fn failed_deliveries_are_retried_with_a_bounded_budget() {
    let (url, got) = receiver(1).await;
    let app = spawn_app().await;
    app.patch_namespace("pay", json!({"alert_url": url})).await;
    into_review(&app, "pay", "k").await;
    let client = client();
    let first = alerts_step(&app, &client, 6).await;
    assert_eq!((first.sent, first.retried), (0, 1));
    // Not due again before its backoff.
    let early = alerts_step(&app, &client, 6).await;
    assert_eq!(early.sent + early.retried, 0);
    app.advance(120_000);
    let second = alerts_step(&app, &client, 6).await;
    assert_eq!(second.sent, 1);
    assert_eq!(got.lock().expect("lock").len(), 1);
}

#[tokio::test]
async fn an_unreachable_receiver_is_given_up_after_the_budget() {
    let app = spawn_app().await;
    // Nothing listens on this port (bound then dropped).
    let url = format!("http://127.0.0.1:{}/a", loopback::closed_port());
    app.patch_namespace("pay", json!({"alert_url": url})).await;
    into_review(&app, "pay", "k").await;
    let client = client();
    let mut gave_up = 0;
    for _ in 0..10 {
        let r = alerts_step(&app, &client, 3).await;
        gave_up += r.gave_up;
        app.advance(600_000);
    }
    assert_eq!(gave_up, 1);
}

// ------------------------------------------------------------ redirects and signatures

/// One request a [`capture`] receiver got: its headers and the exact body bytes.
#[derive(Debug, Clone)]
struct Delivery {
    headers: axum::http::HeaderMap,
    body: bytes::Bytes,
}

impl Delivery {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

type Deliveries = Arc<Mutex<Vec<Delivery>>>;

/// A local receiver that records every request to any path and answers `status` (with
/// `location`, when given) after answering 500 `fail_first` times.
async fn capture(status: u16, location: Option<String>, fail_first: usize) -> (String, Deliveries) {
    let got: Deliveries = Arc::default();
    let store = got.clone();
    let app = Router::new().fallback(move |headers: axum::http::HeaderMap, body: bytes::Bytes| {
        let (store, location) = (store.clone(), location.clone());
        async move {
            let n = {
                let mut s = store.lock().expect("lock");
                s.push(Delivery { headers, body });
                s.len()
            };
            let code = if n <= fail_first { 500 } else { status };
            let mut resp = axum::http::Response::builder()
                .status(axum::http::StatusCode::from_u16(code).expect("status"));
            if let Some(l) = location {
                resp = resp.header("location", l);
            }
            resp.body(axum::body::Body::empty()).expect("response")
        }
    });
    let port = loopback::serve(app).await;
    (format!("http://127.0.0.1:{port}/alert"), got)
}

/// A server on `backend` whose alert sender runs every 50 ms.
async fn alerting(backend: Backend) -> TestApp {
    spawn_with(Options {
        alert_interval: Duration::from_millis(50),
        backend,
        ..Default::default()
    })
    .await
}

/// Puts `k` of `ns` into needs_review (one alert queued).
async fn into_review(app: &TestApp, ns: &str, k: &str) {
    let t = Api::acquired(&app.claim(ns, k, json!({})).await);
    let r = app
        .fail(ns, k, json!({"token": t, "kind": "ambiguous"}))
        .await;
    assert_eq!(r.body["state"], "needs_review", "{}", r.text);
}

/// One pass of the alert sender over what is due now, giving up after `max_tries`.
async fn alerts_step(app: &TestApp, client: &AlertSender, max_tries: u32) -> AlertsReport {
    idem_server::background::alerts_once(&app.store, client, app.now(), max_tries)
        .await
        .expect("step")
}

fn client() -> AlertSender {
    idem_server::background::alert_client(Duration::from_secs(5)).expect("client")
}

#[tokio::test]
async fn the_running_sender_does_not_follow_redirects() {
    let (elsewhere, reached) = capture(204, None, 0).await;
    let (url, redirecting) = capture(307, Some(elsewhere), 0).await;
    let app = alerting(Backend::Sqlite).await;
    app.patch_namespace("pay", json!({"alert_url": url})).await;
    into_review(&app, "pay", "k").await;
    assert!(
        eventually(Duration::from_secs(5), || async {
            !redirecting.lock().expect("lock").is_empty()
        })
        .await,
        "the alert_url never got the alert"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        reached.lock().expect("lock").len(),
        0,
        "the redirect target got the alert"
    );
    assert!(!app
        .event_types("pay", "k")
        .await
        .contains(&"alert_sent".to_string()));
}

#[tokio::test]
async fn a_redirect_answer_is_a_failed_delivery_retried_with_backoff() {
    for status in [301u16, 302, 303, 307, 308] {
        let (elsewhere, reached) = capture(204, None, 0).await;
        let (url, redirecting) = capture(status, Some(elsewhere), 0).await;
        let app = spawn_app().await;
        app.patch_namespace("pay", json!({"alert_url": url})).await;
        into_review(&app, "pay", "k").await;
        let first = alerts_step(&app, &client(), 6).await;
        assert_eq!(
            (first.sent, first.retried, first.gave_up),
            (0, 1, 0),
            "{status}"
        );
        // Not again before the backoff; again (and again refused) after it.
        let early = alerts_step(&app, &client(), 6).await;
        assert_eq!(early.sent + early.retried, 0, "{status}");
        app.advance(120_000);
        let second = alerts_step(&app, &client(), 6).await;
        assert_eq!((second.sent, second.retried), (0, 1), "{status}");
        assert_eq!(redirecting.lock().expect("lock").len(), 2, "{status}");
        assert_eq!(reached.lock().expect("lock").len(), 0, "{status}");
    }
}

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

#[tokio::test]
async fn signed_alerts_verify_with_the_official_standard_webhooks_library() {
    for backend in backends() {
        let (url, got) = capture(204, None, 0).await;
        let app = alerting(backend).await;
        let r = app
            .patch_namespace("pay", json!({"alert_url": url, "alert_secret": SECRET}))
            .await;
        assert_eq!(r.status, 200, "{backend:?}: {}", r.text);
        into_review(&app, "pay", "evt_1:charge").await;
        assert!(
            eventually(Duration::from_secs(5), || async {
                !got.lock().expect("lock").is_empty()
            })
            .await,
            "{backend:?}: no alert arrived"
        );
        let d = got.lock().expect("lock")[0].clone();
        let (id, ts, sig) = (
            d.header("webhook-id").expect("webhook-id").to_owned(),
            d.header("webhook-timestamp")
                .expect("webhook-timestamp")
                .to_owned(),
            d.header("webhook-signature")
                .expect("webhook-signature")
                .to_owned(),
        );
        assert!(id.starts_with("msg_"), "{backend:?}: {id}");
        let ts: i64 = ts.parse().expect("unix seconds");
        assert!(
            (ts - app.now().0 / 1000).abs() <= 5,
            "{backend:?}: timestamp {ts}"
        );
        assert!(sig.starts_with("v1,"), "{backend:?}: {sig}");
        assert_eq!(d.header("content-type"), Some("application/json"));
        // The body is the alert itself, and exactly the bytes signed.
        let body: Value = serde_json::from_slice(&d.body).expect("json body");
        assert_eq!(body["namespace"], "pay", "{backend:?}");
        assert_eq!(body["state"], "needs_review", "{backend:?}");
        let secret = idem::AlertSecret::parse(SECRET).expect("secret");
        assert!(
            secret.verify(&id, ts, &d.body, &sig),
            "{backend:?}: Rust check"
        );
        let mut tampered = d.body.to_vec();
        tampered.extend_from_slice(b" ");
        assert!(!secret.verify(&id, ts, &tampered, &sig), "{backend:?}");
        // The official library: accepts the delivery, refuses a changed body or a wrong key.
        if let Some(ok) = official_verify(SECRET, &d.headers, &d.body) {
            assert!(
                ok,
                "{backend:?}: the official library refused the signature"
            );
            assert_eq!(
                official_verify(SECRET, &d.headers, &tampered),
                Some(false),
                "{backend:?}"
            );
            let wrong = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
            assert_eq!(
                official_verify(wrong, &d.headers, &d.body),
                Some(false),
                "{backend:?}"
            );
        }
        app.stop().await.expect("stop");
    }
}

#[tokio::test]
async fn webhook_id_is_stable_across_retries_and_unsigned_without_a_secret() {
    let (url, got) = capture(204, None, 1).await;
    let app = spawn_app().await;
    app.patch_namespace("pay", json!({"alert_url": url})).await;
    into_review(&app, "pay", "k").await;
    let first = alerts_step(&app, &client(), 6).await;
    assert_eq!(first.retried, 1);
    app.advance(120_000);
    let second = alerts_step(&app, &client(), 6).await;
    assert_eq!(second.sent, 1);
    let got = got.lock().expect("lock").clone();
    assert_eq!(got.len(), 2);
    let ids: Vec<_> = got.iter().map(|d| d.header("webhook-id")).collect();
    assert!(ids[0].is_some() && ids[0] == ids[1], "{ids:?}");
    let ts: Vec<i64> = got
        .iter()
        .map(|d| {
            d.header("webhook-timestamp")
                .expect("ts")
                .parse()
                .expect("int")
        })
        .collect();
    assert_eq!(
        ts[1] - ts[0],
        120,
        "the timestamp is the time of each attempt"
    );
    assert!(got.iter().all(|d| d.header("webhook-signature").is_none()));

    // A second alert gets another id.
    into_review(&app, "pay", "k2").await;
    let (url2, got2) = capture(204, None, 0).await;
    app.patch_namespace("pay", json!({"alert_url": url2})).await;
    alerts_step(&app, &client(), 6).await;
    let other = got2.lock().expect("lock")[0].clone();
    assert_ne!(other.header("webhook-id"), ids[0]);
}

#[tokio::test]
async fn alert_secret_is_write_only_over_the_api() {
    for backend in backends() {
        let app = spawn_with(Options {
            backend,
            ..Default::default()
        })
        .await;
        let fresh = app.namespace("pay").await;
        assert_eq!(
            fresh.body["policy"]["alert_secret_set"], false,
            "{backend:?}"
        );
        let r = app
            .patch_namespace("pay", json!({"alert_secret": SECRET}))
            .await;
        assert_eq!(r.status, 200, "{backend:?}: {}", r.text);
        for shown in [r, app.namespace("pay").await] {
            assert_eq!(
                shown.body["policy"]["alert_secret_set"], true,
                "{backend:?}: {}",
                shown.text
            );
            assert!(
                shown.body["policy"].get("alert_secret").is_none(),
                "{backend:?}: {}",
                shown.text
            );
            assert!(
                !shown.text.contains("MfKQ9r8G"),
                "{backend:?}: {}",
                shown.text
            );
        }
        let stored = |app: &TestApp| {
            let store = app.store.clone();
            async move {
                let ns = idem::Namespace::try_from("pay").expect("ns");
                store
                    .namespace(&ns)
                    .await
                    .expect("ns")
                    .policy
                    .alert_secret
                    .map(|s| s.expose().to_owned())
            }
        };
        assert_eq!(stored(&app).await.as_deref(), Some(SECRET), "{backend:?}");

        // Refused: a malformed secret (422 naming it) and the read-only flag; nothing changes.
        for (patch, field) in [
            (
                json!({"alert_secret": "whsec_tooshort", "lease_ms": 5000}),
                "alert_secret",
            ),
            (
                json!({"alert_secret": "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}),
                "alert_secret",
            ),
            (json!({"alert_secret": 42}), "alert_secret"),
            (json!({"alert_secret_set": false}), "alert_secret_set"),
        ] {
            let r = app.patch_namespace("pay", patch.clone()).await;
            let p = r.problem(422, "invalid_field");
            assert_eq!(p["field"], field, "{backend:?}: {patch}: {}", r.text);
            assert!(!r.text.contains("MfKQ9r8G"), "{backend:?}: {}", r.text);
            let after = app.namespace("pay").await;
            assert_eq!(
                after.body["policy"]["alert_secret_set"], true,
                "{backend:?}: {patch}"
            );
            assert_eq!(
                after.body["policy"]["lease_ms"], 30000,
                "{backend:?}: {patch}"
            );
            assert_eq!(
                stored(&app).await.as_deref(),
                Some(SECRET),
                "{backend:?}: {patch}"
            );
        }

        // null removes it.
        let r = app
            .patch_namespace("pay", json!({"alert_secret": null}))
            .await;
        assert_eq!(
            r.body["policy"]["alert_secret_set"], false,
            "{backend:?}: {}",
            r.text
        );
        assert_eq!(
            app.namespace("pay").await.body["policy"]["alert_secret_set"],
            false
        );
        assert_eq!(stored(&app).await, None, "{backend:?}");
        app.stop().await.expect("stop");
    }
}

#[tokio::test]
async fn config_file_alert_secret_is_applied_and_never_shown() {
    let app = spawn_with(Options {
        namespaces: vec![("pay", json!({"alert_secret": SECRET}))],
        ..Default::default()
    })
    .await;
    let r = app.namespace("pay").await;
    assert_eq!(r.body["policy"]["alert_secret_set"], true, "{}", r.text);
    assert!(!r.text.contains("MfKQ9r8G"));
}

#[tokio::test]
async fn openapi_alert_secret_schema_is_the_servers_rule() {
    let app = spawn_app().await;
    let doc = app.get("/openapi.json").await.body;
    // Written in a PATCH, shown on reads only as whether it is set.
    let patch = &doc["components"]["schemas"]["PolicyPatchBody"]["properties"];
    assert_eq!(
        patch["alert_secret"]["pattern"],
        idem::webhook::SECRET_PATTERN,
        "{patch}"
    );
    assert_eq!(patch["alert_secret"]["writeOnly"], true, "{patch}");
    assert!(patch.get("alert_secret_set").is_none(), "{patch}");
    let read = &doc["components"]["schemas"]["PolicyDoc"]["properties"];
    assert_eq!(read["alert_secret_set"]["readOnly"], true, "{read}");
    assert!(read.get("alert_secret").is_none(), "{read}");
}
