use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::helpers::*;

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
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/alert", l.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(l, app).await });
    (url, got)
}

#[tokio::test]
async fn needs_review_alert_is_delivered_once_without_payloads() {
    let (url, got) = receiver(0).await;
    let app = spawn_with(Options {
        alert_interval: Duration::from_millis(50),
        ..Default::default()
    })
    .await;
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
    let t = Api::acquired(&app.claim("pay", "k", json!({})).await);
    app.fail("pay", "k", json!({"token": t, "kind": "ambiguous"}))
        .await;
    let client = reqwest::Client::new();
    let first = idem_server::background::alerts_once(&app.store, &client, app.now(), 6)
        .await
        .expect("step");
    assert_eq!((first.sent, first.retried), (0, 1));
    // Not due again before its backoff.
    let early = idem_server::background::alerts_once(&app.store, &client, app.now(), 6)
        .await
        .expect("step");
    assert_eq!(early.sent + early.retried, 0);
    app.advance(120_000);
    let second = idem_server::background::alerts_once(&app.store, &client, app.now(), 6)
        .await
        .expect("step");
    assert_eq!(second.sent, 1);
    assert_eq!(got.lock().expect("lock").len(), 1);
}

#[tokio::test]
async fn an_unreachable_receiver_is_given_up_after_the_budget() {
    let app = spawn_app().await;
    // Nothing listens on this port (bound then dropped).
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/a", l.local_addr().expect("addr"));
    drop(l);
    app.patch_namespace("pay", json!({"alert_url": url})).await;
    let t = Api::acquired(&app.claim("pay", "k", json!({})).await);
    app.fail("pay", "k", json!({"token": t, "kind": "ambiguous"}))
        .await;
    let client = reqwest::Client::new();
    let mut gave_up = 0;
    for _ in 0..10 {
        let r = idem_server::background::alerts_once(&app.store, &client, app.now(), 3)
            .await
            .expect("step");
        gave_up += r.gave_up;
        app.advance(600_000);
    }
    assert_eq!(gave_up, 1);
}
