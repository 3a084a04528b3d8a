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

/// Sends raw HTTP/1.1 requests on one keep-alive connection and returns each answer's head
/// (status line and headers, lowercased), reading bodies by their Content-Length.
async fn keep_alive_heads(base: &str, requests: &[String]) -> Vec<Option<String>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = base.trim_start_matches("http://");
    let mut tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let mut heads = Vec::new();
    for req in requests {
        if tcp.write_all(req.as_bytes()).await.is_err() {
            heads.push(None);
            continue;
        }
        let mut buf = Vec::new();
        let mut byte = [0u8; 1];
        let head = loop {
            match tokio::time::timeout(std::time::Duration::from_secs(5), tcp.read(&mut byte)).await
            {
                Ok(Ok(1)) => buf.push(byte[0]),
                _ => break None,
            }
            if buf.ends_with(b"\r\n\r\n") {
                break Some(String::from_utf8_lossy(&buf).to_ascii_lowercase());
            }
        };
        if let Some(h) = &head {
            let len = h
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            let mut body = vec![0u8; len];
            tcp.read_exact(&mut body).await.expect("body");
        }
        heads.push(head);
    }
    heads
}

fn raw_post(path: &str, body: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// A POST refused before its handler read the body (a bad key in the path) keeps the
/// keep-alive connection usable: the server has read the whole body before routing, so
/// nothing is left on the socket; the next request on the same connection is answered. A
/// POST whose body was read keeps the connection open too.
#[tokio::test]
async fn a_refusal_before_the_body_is_read_keeps_the_connection_usable() {
    let app = spawn_app().await;
    let good = raw_post("/v1/namespaces/ns/keys/k1/claim", "{}");
    let heads = keep_alive_heads(&app.base, &[good.clone(), good.clone()]).await;
    let first = heads[0].as_deref().expect("an answer");
    assert!(first.starts_with("http/1.1 201"), "{first}");
    assert!(!first.contains("connection: close"), "{first}");
    let second = heads[1]
        .as_deref()
        .expect("the same connection answers again");
    assert!(second.starts_with("http/1.1 409"), "{second}");

    let bad = raw_post(
        "/v1/namespaces/ns/keys/k%20k/claim",
        "{\"owner\": \"someone\"}",
    );
    let next = raw_post("/v1/namespaces/ns/keys/k2/claim", "{}");
    let heads = keep_alive_heads(&app.base, &[bad, next]).await;
    let h = heads[0].as_deref().expect("an answer");
    assert!(h.starts_with("http/1.1 400"), "{h}");
    assert!(!h.contains("connection: close"), "{h}");
    let after = heads[1]
        .as_deref()
        .expect("the same connection answers after the refusal");
    assert!(after.starts_with("http/1.1 201"), "{after}");
}
