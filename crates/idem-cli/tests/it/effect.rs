//! `idem effect` and the crash safety of effects against the real binary: a loopback
//! destination written here counts every request it receives.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::helpers::{http_client as http, run_with, Server};

/// A destination on 127.0.0.1: reads each request, counts it, then answers 201 JSON or, with
/// `hang`, holds the connection without answering.
pub(crate) fn destination(hang: bool) -> (u16, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    let n = Arc::new(AtomicUsize::new(0));
    let count = n.clone();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut s) = conn else { continue };
            let count = count.clone();
            std::thread::spawn(move || {
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(k) => got.extend_from_slice(&buf[..k]),
                    }
                }
                count.fetch_add(1, Ordering::SeqCst);
                if hang {
                    std::thread::sleep(Duration::from_secs(60));
                    return;
                }
                let body = r#"{"id":"ch_1"}"#;
                let _ = write!(
                    s,
                    "HTTP/1.1 201 Created\r\ncontent-type: application/json\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    (port, n)
}

/// Waits (15 s at the most) until the destination counting in `n` has a request, then kills
/// `srv` with SIGKILL (what `Child::kill` sends) and lets the `inflight` caller end.
pub(crate) fn kill_mid_request(
    n: &AtomicUsize,
    srv: Server,
    inflight: std::thread::JoinHandle<()>,
) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while n.load(Ordering::SeqCst) == 0 {
        assert!(
            Instant::now() < deadline,
            "the destination never got the request"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(srv);
    let _ = inflight.join();
}

fn allow(server: &str, port: u16) {
    let r = http()
        .patch(format!("{server}/v1/namespaces/pay"))
        .json(&json!({"egress": {"allow": [format!("127.0.0.1:{port}")]}}))
        .send()
        .expect("patch");
    assert_eq!(r.status().as_u16(), 200);
}

fn record(server: &str, key: &str) -> Value {
    http()
        .get(format!("{server}/v1/namespaces/pay/keys/{key}"))
        .send()
        .expect("get")
        .json()
        .unwrap_or(Value::Null)
}

#[test]
fn idem_effect_prints_the_response_and_exits_like_a_claim() {
    let srv = Server::start();
    let (port, n) = destination(false);
    allow(&srv.url, port);
    let url = format!("http://127.0.0.1:{port}/v1/charges?expand=x");
    let args = [
        "effect",
        "--ns",
        "pay",
        "--key",
        "evt_1:charge",
        "--url",
        url.as_str(),
        "-H",
        "Authorization: Bearer sk_cli_SECRET",
        "--data",
        r#"{"amount": 100}"#,
        "--timeout-ms",
        "5000",
    ];
    let env = [("IDEM_URL", srv.url.as_str())];
    let first = run_with(&args, "", &env);
    assert_eq!(first.code, 0, "{first:?}");
    let response = first.json();
    assert_eq!(response["status"], 201);
    assert_eq!(response["body"]["id"], "ch_1");
    assert!(first.stderr.contains("performed"), "{first:?}");
    assert!(!first.stdout.contains("sk_cli_SECRET") && !first.stderr.contains("sk_cli_SECRET"));
    let again = run_with(&args, "", &env);
    assert_eq!(
        again.code, 19,
        "a replay exits like a completed claim: {again:?}"
    );
    assert_eq!(again.json()["status"], 201);
    assert!(again.stderr.contains("replayed"), "{again:?}");
    assert_eq!(n.load(Ordering::SeqCst), 1, "sent exactly once");
    // The whole answer with --json; a different request under the key is a conflict (14).
    let mut other = args.to_vec();
    other[10] = r#"{"amount": 5}"#;
    other.push("--json");
    let conflict = run_with(&other, "", &env);
    assert_eq!(conflict.code, 14, "{conflict:?}");
    assert_eq!(conflict.json()["outcome"], "conflict");
    // A refused destination is an HTTP error (20) naming the member.
    let refused = run_with(
        &[
            "effect",
            "--ns",
            "pay",
            "--key",
            "k2",
            "--url",
            "http://10.0.0.1/x",
        ],
        "",
        &env,
    );
    assert_eq!(refused.code, 20, "{refused:?}");
    assert!(
        refused.stderr.contains("destination_forbidden"),
        "{refused:?}"
    );
    assert_eq!(n.load(Ordering::SeqCst), 1);
}

/// `kill -9` of `idem serve` while the destination holds the request: after the lease the
/// record is in review and the destination saw exactly one request; no blind resend.
#[test]
fn a_killed_server_leaves_the_effect_to_review_never_resends() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("idem.db");
    let srv = Server::start_on(&db);
    let (port, n) = destination(true);
    allow(&srv.url, port);
    let secret = "sk_live_CRASH_SECRET";
    let body = json!({
        "request": {"method": "POST", "url": format!("http://127.0.0.1:{port}/charge"),
                    "headers": {"Authorization": format!("Bearer {secret}")},
                    "body": {"amount": 100}},
        "timeout_ms": 2000,
    });
    let url = format!("{}/v1/namespaces/pay/keys/evt_crash/effect", srv.url);
    let b = body.clone();
    let u = url.clone();
    let inflight = std::thread::spawn(move || {
        let _ = http().post(u).json(&b).send();
    });
    kill_mid_request(&n, srv, inflight);
    let log = std::fs::read_to_string(db.with_extension("log")).unwrap_or_default();
    assert!(!log.contains(secret), "{log}");
    let srv = Server::start_on(&db);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = record(&srv.url, "evt_crash");
        if r["record"]["state"] == "needs_review" {
            let types: Vec<&str> = r["events"]
                .as_array()
                .map(|a| a.iter().filter_map(|e| e["type"].as_str()).collect())
                .unwrap_or_default();
            assert_eq!(types, ["acquired", "sent", "moved_to_review"], "{r}");
            assert_eq!(
                r["record"]["request"]["url"],
                format!("http://127.0.0.1:{port}/charge")
            );
            assert!(!r.to_string().contains(secret));
            break;
        }
        assert!(Instant::now() < deadline, "never moved to review: {r}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let url = format!("{}/v1/namespaces/pay/keys/evt_crash/effect", srv.url);
    let again = http().post(url).json(&body).send().expect("post");
    assert_eq!(again.status().as_u16(), 409);
    let again: Value = again.json().expect("json");
    assert_eq!(again["outcome"], "needs_review");
    assert_eq!(n.load(Ordering::SeqCst), 1, "never resent");
}
