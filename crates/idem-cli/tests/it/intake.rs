//! The intake's durability against the real binary: an event acknowledged with 200 is
//! forwarded after a `kill -9` of `idem serve`, whether the kill came before the forward
//! started or while the receiver held it (then after the attempt's lease, with the same
//! `Idem-Key` and the next `Idem-Attempt`).

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::helpers::{http_client as http, Server};

const SECRET: &str = "whsec_stripe_crash_secret";

/// A receiver on 127.0.0.1 that records `(idem-key, idem-attempt)` of every request and
/// holds the first `hang` requests without answering; the others get 200.
/// `(idem-key, idem-attempt)` of each request, in arrival order.
type Seen = Arc<Mutex<Vec<(String, String)>>>;

fn receiver(hang: usize) -> (u16, Seen) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    let got: Seen = Arc::default();
    let seen = got.clone();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut s) = conn else { continue };
            let seen = seen.clone();
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(k) => buf.extend_from_slice(&chunk[..k]),
                    }
                }
                let head = String::from_utf8_lossy(&buf).to_ascii_lowercase();
                let header = |n: &str| {
                    head.lines()
                        .find_map(|l| l.strip_prefix(&format!("{n}: ")).map(str::to_owned))
                        .unwrap_or_default()
                };
                let n = {
                    let mut g = seen.lock().expect("lock");
                    g.push((header("idem-key"), header("idem-attempt")));
                    g.len()
                };
                if n <= hang {
                    std::thread::sleep(Duration::from_secs(60));
                    return;
                }
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                );
            });
        }
    });
    (port, got)
}

fn post_event(srv: &Server, id: &str) {
    let url = format!("{}/in/pay", srv.url);
    crate::helpers::post_stripe_event(&http(), &url, SECRET, id, &[]);
}

fn state(srv: &Server, key: &str) -> String {
    http()
        .get(format!("{}/v1/namespaces/pay/keys/{key}", srv.url))
        .send()
        .ok()
        .and_then(|r| r.json::<Value>().ok())
        .and_then(|v| v["record"]["state"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

fn wait_completed(srv: &Server, key: &str, within: Duration) {
    let deadline = Instant::now() + within;
    while state(srv, key) != "completed" {
        assert!(
            Instant::now() < deadline,
            "{key} never delivered: {}",
            state(srv, key)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn an_acknowledged_event_is_forwarded_after_a_kill_9() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("idem.db");
    let (port, got) = receiver(1);
    let srv = Server::start_on(&db);
    let source = json!({
        "provider": "stripe", "secrets": [SECRET],
        "forward": {"url": format!("http://127.0.0.1:{port}/webhook"), "timeout_ms": 1000},
    });
    let r = http()
        .put(format!("{}/v1/sources/pay", srv.url))
        .json(&source)
        .send()
        .expect("put");
    assert_eq!(r.status().as_u16(), 201);
    // 1: killed while the receiver holds the forward (the first request hangs).
    post_event(&srv, "evt_held");
    let deadline = Instant::now() + Duration::from_secs(15);
    while got.lock().expect("lock").is_empty() {
        assert!(
            Instant::now() < deadline,
            "the receiver never got the forward"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // 2: acknowledged while the namespace is paused (no forward started), then killed.
    let paused = http()
        .post(format!("{}/v1/namespaces/pay/pause", srv.url))
        .send()
        .expect("pause");
    assert_eq!(paused.status().as_u16(), 200);
    post_event(&srv, "evt_waiting");
    drop(srv); // kill -9 (Child::kill is SIGKILL)
    let srv = Server::start_on(&db);
    let resumed = http()
        .post(format!("{}/v1/namespaces/pay/resume", srv.url))
        .send()
        .expect("resume");
    assert_eq!(resumed.status().as_u16(), 200);
    wait_completed(&srv, "evt_waiting", Duration::from_secs(20));
    // The interrupted one goes again after its lease (timeout 1 s + the margin).
    wait_completed(&srv, "evt_held", Duration::from_secs(30));
    let got = got.lock().expect("lock").clone();
    let held: Vec<&str> = got
        .iter()
        .filter(|(k, _)| k == "evt_held")
        .map(|(_, a)| a.as_str())
        .collect();
    assert_eq!(held, ["1", "2"], "{got:?}");
    let waiting = got.iter().filter(|(k, _)| k == "evt_waiting").count();
    assert_eq!(waiting, 1, "{got:?}");
}

/// `idem serve --config` applies `[sources.NAME]` at start (secrets from the environment),
/// and `idem source put|get|list|delete` drive the sources API.
#[test]
fn config_sources_and_the_source_verbs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("idem.toml");
    std::fs::write(
        &config,
        "[sources.pay]\nprovider = \"stripe\"\nsecrets_env = [\"PAY_SECRET\"]\n\
         tolerance_ms = 60000\n\
         [sources.pay.forward]\nurl = \"http://127.0.0.1:9/hook\"\n\
         secret_env = \"PAY_FORWARD_SECRET\"\n",
    )
    .expect("config");
    let srv = crate::helpers::Server::start_config(
        dir.path(),
        &config,
        &[
            ("PAY_SECRET", "whsec_from_the_environment"),
            (
                "PAY_FORWARD_SECRET",
                "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            ),
        ],
    );
    let run = |args: &[&str], env: &[(&str, &str)]| srv.idem_with(args, env);
    let got = run(&["source", "get", "pay", "--json"], &[]);
    assert_eq!(got.code, 0, "{got:?}");
    let v = got.json();
    assert_eq!(v["tolerance_ms"], 60000);
    assert_eq!(v["secret_hints"], json!(["ment"]));
    assert_eq!(v["forward"]["secret_hint"], "LaSw");
    assert!(!got.stdout.contains("from_the_environment"), "{got:?}");
    // put with the secret from the environment, then list and delete.
    let put = run(
        &[
            "source",
            "put",
            "gh",
            "--json",
            r#"{"provider": "github", "forward": {"url": "http://127.0.0.1:9/gh"}}"#,
            "--secret-env",
            "GH_SECRET",
        ],
        &[("GH_SECRET", "github-webhook-secret")],
    );
    assert_eq!(put.code, 0, "{put:?}");
    assert_eq!(put.json()["secret_hints"], json!(["cret"]));
    assert!(!put.stdout.contains("github-webhook-secret"), "{put:?}");
    let patched = run(
        &[
            "source",
            "put",
            "gh",
            "--patch",
            "--json",
            r#"{"tolerance_ms": 1000}"#,
        ],
        &[],
    );
    assert_eq!(patched.code, 0, "{patched:?}");
    assert_eq!(patched.json()["tolerance_ms"], 1000);
    let list = run(&["source", "list"], &[]);
    assert!(
        list.stdout.contains("gh") && list.stdout.contains("github"),
        "{list:?}"
    );
    assert!(
        list.stdout.contains("pay") && list.stdout.contains("stripe"),
        "{list:?}"
    );
    let bad = run(
        &["source", "put", "x", "--json", r#"{"provider": "nope"}"#],
        &[],
    );
    assert_ne!(bad.code, 0, "{bad:?}");
    assert!(
        bad.stderr.contains("invalid_field") || bad.stderr.contains("provider"),
        "{bad:?}"
    );
    let refused = run(&["source", "delete", "gh"], &[]);
    assert_ne!(refused.code, 0, "needs --yes");
    let del = run(&["source", "delete", "gh", "--yes"], &[]);
    assert_eq!(del.code, 0, "{del:?}");
    let gone = run(&["source", "get", "gh"], &[]);
    assert_ne!(gone.code, 0, "{gone:?}");
    drop(srv);
    let log = std::fs::read_to_string(dir.path().join("log")).unwrap_or_default();
    assert!(
        !log.contains("from_the_environment") && !log.contains("MfKQ"),
        "{log}"
    );
}
