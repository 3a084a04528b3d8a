//! `idem serve --otlp-endpoint`: spans are exported over OTLP/HTTP (protobuf) to a local
//! receiver that decodes every export request, the caller's W3C `traceparent` is the parent
//! of the request span, the store step is a child of it, log lines carry the trace id, and
//! an outbound alert is an exported `alert.send` span in the trace of the request that caused
//! it and carries its `traceparent`; without an exporter the alert carries the caller's.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;

use crate::helpers::{free_port, http_status, idem};

/// One exported span, as the receiver decoded it.
#[derive(Debug, Clone)]
struct Span {
    name: String,
    trace_id: String,
    span_id: String,
    parent_span_id: String,
    /// SPAN_KIND_* number: 2 server, 3 client.
    kind: i32,
    attributes: HashMap<String, String>,
}

#[derive(Default)]
struct Received {
    spans: Vec<Span>,
    /// Headers of every request to any other path (the alert receiver).
    alerts: Vec<HashMap<String, String>>,
}

/// An HTTP/1.1 server on 127.0.0.1: `POST /v1/traces` bodies are decoded as OTLP export
/// requests, any other request is recorded as an alert delivery. Threads end with the test
/// process.
fn receiver() -> (String, Arc<Mutex<Received>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let got: Arc<Mutex<Received>> = Arc::default();
    let shared = got.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let got = shared.clone();
            std::thread::spawn(move || serve_conn(conn, &got));
        }
    });
    (base, got)
}

fn serve_conn(conn: TcpStream, got: &Mutex<Received>) {
    let mut out = match conn.try_clone() {
        Ok(c) => c,
        Err(_) => return,
    };
    let mut reader = BufReader::new(conn);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line.split_whitespace().nth(1).unwrap_or("").to_owned();
        let mut headers = HashMap::new();
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
            }
        }
        let len: usize = headers
            .get("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; len];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let status = if path == "/v1/traces" {
            match ExportTraceServiceRequest::decode(body.as_slice()) {
                Ok(req) => {
                    got.lock().expect("lock").spans.extend(spans_of(req));
                    "200 OK"
                }
                Err(_) => "400 Bad Request",
            }
        } else {
            got.lock().expect("lock").alerts.push(headers);
            "204 No Content"
        };
        let reply = format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\n\r\n");
        if out.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn spans_of(req: ExportTraceServiceRequest) -> Vec<Span> {
    let mut out = vec![];
    for rs in req.resource_spans {
        for ss in rs.scope_spans {
            for s in ss.spans {
                let attributes = s
                    .attributes
                    .iter()
                    .map(|kv| {
                        let v = kv.value.as_ref().and_then(|v| v.value.as_ref());
                        (kv.key.clone(), format!("{v:?}"))
                    })
                    .collect();
                out.push(Span {
                    name: s.name,
                    trace_id: hex(&s.trace_id),
                    span_id: hex(&s.span_id),
                    parent_span_id: hex(&s.parent_span_id),
                    kind: s.kind,
                    attributes,
                });
            }
        }
    }
    out
}

fn wait_for<T>(what: &str, got: &Mutex<Received>, f: impl Fn(&Received) -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(v) = f(&got.lock().expect("lock")) {
            return v;
        }
        if Instant::now() > deadline {
            let r = got.lock().expect("lock");
            panic!(
                "{what}: not received; spans {:#?}, alerts {:?}",
                r.spans, r.alerts
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A running `idem serve` on SQLite whose namespace `pay` sends alerts to `{base}/alert`
/// every 50 ms, exporting spans to `base` when `export` (every 100 ms), its log in `log`.
struct Served {
    addr: String,
    log: std::path::PathBuf,
    _server: Killed,
    // Held so the ledger and the config live as long as the server.
    _dir: tempfile::TempDir,
}

fn serve_alerting_to(base: &str, export: bool) -> Served {
    let dir = tempfile::tempdir().expect("tmp");
    let config = dir.path().join("idem.toml");
    std::fs::write(
        &config,
        format!("alert_interval = \"50ms\"\n[namespaces.pay]\nalert_url = \"{base}/alert\"\n"),
    )
    .expect("config");
    let addr = format!("127.0.0.1:{}", free_port());
    let log = dir.path().join("serve.log");
    let db = format!("sqlite://{}", dir.path().join("idem.db").display());
    let mut child = idem();
    child
        .args(["serve", "--listen", &addr, "--db", &db])
        .arg("--config")
        .arg(&config)
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("IDEM_OTLP_ENDPOINT")
        .env_remove("OTEL_SERVICE_NAME")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"));
    if export {
        // Export every 100 ms instead of every 5 s.
        child
            .args(["--otlp-endpoint", base])
            .env("OTEL_BSP_SCHEDULE_DELAY", "100");
    }
    let server = Killed(child.spawn().expect("spawn idem serve"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while http_status(&addr, "/healthz") != Some(200) {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(Instant::now() < deadline, "not serving:\n{text}");
        std::thread::sleep(Duration::from_millis(50));
    }
    Served {
        addr,
        log,
        _server: server,
        _dir: dir,
    }
}

#[test]
fn spans_reach_an_otlp_receiver_under_the_callers_trace_and_alerts_carry_traceparent() {
    let (base, got) = receiver();
    let app = serve_alerting_to(&base, true);
    let addr = &app.addr;
    let log_text = || std::fs::read_to_string(&app.log).unwrap_or_default();

    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller_span = "00f067aa0ba902b7";
    let http = reqwest::blocking::Client::new();
    let key_url = format!("http://{addr}/v1/namespaces/pay/keys/evt_1%3Acharge");
    let claim = http
        .post(format!("{key_url}/claim"))
        .header("traceparent", format!("00-{trace_id}-{caller_span}-01"))
        .json(&serde_json::json!({"payload": {"card": "card_QxZ4242vW"}}))
        .send()
        .expect("claim");
    assert_eq!(claim.status(), 201);
    let token = claim.json::<serde_json::Value>().expect("json")["token"]
        .as_str()
        .expect("token")
        .to_owned();

    // The request span is a server span whose parent is the caller's span.
    let request = wait_for("the request span", &got, |r| {
        r.spans
            .iter()
            .find(|s| s.trace_id == trace_id && s.parent_span_id == caller_span)
            .cloned()
    });
    assert_eq!(request.kind, 2, "{request:?}");
    assert!(
        request.name.starts_with("POST /v1/namespaces/"),
        "{request:?}"
    );
    // The store step is its child, and says what it did without the key or the payload.
    let store = wait_for("the store span", &got, |r| {
        r.spans
            .iter()
            .find(|s| s.trace_id == trace_id && s.parent_span_id == request.span_id)
            .cloned()
    });
    assert_eq!(store.name, "store.execute");
    assert!(
        store
            .attributes
            .get("op")
            .is_some_and(|v| v.contains("claim")),
        "{store:?}"
    );
    let shown = format!("{:?}", got.lock().expect("lock").spans);
    assert!(
        // Markers no span field can spell by chance (a bare "4242" once matched a busy_ns).
        !shown.contains("QxZ4242vW") && !shown.contains("evt_1"),
        "{shown}"
    );

    // Every log line of the request carries the trace id.
    let lines = log_text();
    assert!(
        lines
            .lines()
            .any(|l| l.contains(trace_id) && l.contains("claim")),
        "{lines}"
    );

    // A failure that needs review sends an alert: its `alert.send` span belongs to the trace
    // of the failing request (a different caller trace), under that request's span.
    let fail_trace = "5cf92f3577b34da6a3ce929d0e0e4799";
    let fail = http
        .post(format!("{key_url}/fail"))
        .header("traceparent", format!("00-{fail_trace}-{caller_span}-01"))
        .json(
            &serde_json::json!({"token": token, "error": {"category": "timeout", "message": "x"}}),
        )
        .send()
        .expect("fail");
    assert_eq!(fail.status(), 200);
    let traceparent = wait_for("the alert", &got, |r| {
        r.alerts.first().map(|h| h.get("traceparent").cloned())
    })
    .expect("the alert carries a traceparent");
    let parts: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(parts.len(), 4, "{traceparent}");
    let send = wait_for("the alert.send span", &got, |r| {
        r.spans
            .iter()
            .find(|s| s.trace_id == parts[1] && s.span_id == parts[2])
            .cloned()
    });
    assert_eq!(
        (send.name.as_str(), send.kind),
        ("alert.send", 3),
        "{send:?}"
    );
    assert!(
        send.attributes
            .get("http.response.status_code")
            .is_some_and(|v| v.contains("204")),
        "{send:?}"
    );
    assert_eq!(send.trace_id, fail_trace, "{send:?}");
    let fail_request = wait_for("the fail request span", &got, |r| {
        r.spans
            .iter()
            .find(|s| s.trace_id == fail_trace && s.parent_span_id == caller_span)
            .cloned()
    });
    assert_eq!(send.parent_span_id, fail_request.span_id, "{send:?}");
    drop(app);
}

#[test]
fn without_an_exporter_an_alert_carries_the_callers_traceparent() {
    let (base, got) = receiver();
    let app = serve_alerting_to(&base, false);
    let addr = &app.addr;
    let http = reqwest::blocking::Client::new();
    let key_url = format!("http://{addr}/v1/namespaces/pay/keys/evt_2");
    let claim = http
        .post(format!("{key_url}/claim"))
        .json(&serde_json::json!({}))
        .send()
        .expect("claim");
    assert_eq!(claim.status(), 201);
    let token = claim.json::<serde_json::Value>().expect("json")["token"]
        .as_str()
        .expect("token")
        .to_owned();
    let caller = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let fail = http
        .post(format!("{key_url}/fail"))
        .header("traceparent", caller)
        .json(
            &serde_json::json!({"token": token, "error": {"category": "timeout", "message": "x"}}),
        )
        .send()
        .expect("fail");
    assert_eq!(fail.status(), 200);
    let alert = wait_for("the alert", &got, |r| r.alerts.first().cloned());
    assert_eq!(
        alert.get("traceparent").map(String::as_str),
        Some(caller),
        "{alert:?}"
    );
    assert!(
        got.lock().expect("lock").spans.is_empty(),
        "nothing is exported"
    );
    drop(app);
}

#[test]
fn without_an_endpoint_an_incoming_trace_id_is_still_logged() {
    let dir = tempfile::tempdir().expect("tmp");
    let log = dir.path().join("serve.log");
    let addr = format!("127.0.0.1:{}", free_port());
    let db = format!("sqlite://{}", dir.path().join("idem.db").display());
    let mut child = idem();
    child
        .args(["serve", "--listen", &addr, "--db", &db])
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"));
    let server = Killed(child.spawn().expect("spawn"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while http_status(&addr, "/healthz") != Some(200) {
        assert!(Instant::now() < deadline, "not serving");
        std::thread::sleep(Duration::from_millis(50));
    }
    let trace_id = "0af7651916cd43dd8448eb211c80319c";
    let r = reqwest::blocking::Client::new()
        .post(format!("http://{addr}/v1/namespaces/cron/keys/job_1/claim"))
        .header("traceparent", format!("00-{trace_id}-b7ad6b7169203331-01"))
        .json(&serde_json::json!({}))
        .send()
        .expect("claim");
    assert_eq!(r.status(), 201);
    std::thread::sleep(Duration::from_millis(300));
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(text.contains(trace_id), "{text}");
    assert!(!text.contains("exporting traces"), "{text}");
    drop(server);
}
