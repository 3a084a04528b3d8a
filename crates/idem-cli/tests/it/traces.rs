//! `idem serve --otlp-endpoint`: spans are exported over OTLP/HTTP (protobuf) to a local
//! receiver that decodes every export request, the caller's W3C `traceparent` is the parent
//! of the request span, the store step is a child of it, log lines carry the trace id, and
//! every outbound call is an exported client span in the trace of the request that caused it
//! and carries that span's `traceparent`: an alert (`alert.send`), an effect (`effect.send`,
//! `effect.reconcile`, under the effect's request span) and a webhook forward
//! (`intake.forward`, under the `/in` request span, from the context stored with the event,
//! across a restart too, on SQLite and PostgreSQL). Without an exporter the outbound calls
//! carry the caller's own trace context, or none.

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

impl Span {
    fn attr(&self, name: &str) -> &str {
        self.attributes.get(name).map_or("", String::as_str)
    }

    /// Asserts that each attribute `(name, text)` contains its text.
    fn assert_attrs(&self, want: &[(&str, &str)]) {
        for (name, text) in want {
            assert!(self.attr(name).contains(text), "{name}: {self:?}");
        }
    }
}

/// One request to any path but `/v1/traces`: an alert, an effect, a lookup, a forward.
#[derive(Debug, Clone)]
struct Call {
    path: String,
    /// Every header line, names lowercase, in order (a repeated header shows twice).
    headers: Vec<(String, String)>,
}

impl Call {
    fn all(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }
    /// The only value of `name`; panics when it came more than once.
    fn one(&self, name: &str) -> Option<&str> {
        let all = self.all(name);
        assert!(all.len() <= 1, "{name} sent {} times: {self:?}", all.len());
        all.first().copied()
    }
}

#[derive(Default)]
struct Received {
    spans: Vec<Span>,
    /// Every request to any other path.
    calls: Vec<Call>,
}

impl Received {
    /// The headers of the first call to a path starting with `prefix`.
    fn first(&self, prefix: &str) -> Option<Call> {
        self.calls
            .iter()
            .find(|c| c.path.starts_with(prefix))
            .cloned()
    }
    fn alerts(&self) -> Vec<HashMap<String, String>> {
        self.calls
            .iter()
            .filter(|c| c.path.starts_with("/alert"))
            .map(|c| c.headers.iter().cloned().collect())
            .collect()
    }
}

/// An HTTP/1.1 server on 127.0.0.1: `POST /v1/traces` bodies are decoded as OTLP export
/// requests, any other request is recorded and answered 204, or 500 on a path that starts
/// with `/fail`. Threads end with the test process.
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
        let mut lines = vec![];
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
                let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_owned());
                headers.insert(k.clone(), v.clone());
                lines.push((k, v));
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
            let fail = path.starts_with("/fail");
            got.lock().expect("lock").calls.push(Call {
                path,
                headers: lines,
            });
            if fail {
                "500 Internal Server Error"
            } else {
                "204 No Content"
            }
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
                "{what}: not received; spans {:#?}, calls {:?}",
                r.spans, r.calls
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

/// A running `idem serve` whose namespace `pay` sends alerts to `{base}/alert` every 50 ms,
/// exporting spans to `base` when `export` (every 100 ms), its log in `log`.
struct Served {
    addr: String,
    log: std::path::PathBuf,
    _server: Killed,
    // Held so the ledger and the config live as long as the server (when it owns them).
    _dir: Option<tempfile::TempDir>,
}

impl Served {
    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

/// On a fresh SQLite file.
fn serve_alerting_to(base: &str, export: bool) -> Served {
    let dir = tempfile::tempdir().expect("tmp");
    let db = format!("sqlite://{}", dir.path().join("idem.db").display());
    let mut served = serve_on(base, export, &db, dir.path());
    served._dir = Some(dir);
    served
}

/// On the database `db`; the config and the log go to `dir`.
fn serve_on(base: &str, export: bool, db: &str, dir: &std::path::Path) -> Served {
    let config = dir.join("idem.toml");
    std::fs::write(
        &config,
        format!("alert_interval = \"50ms\"\n[namespaces.pay]\nalert_url = \"{base}/alert\"\n"),
    )
    .expect("config");
    let addr = format!("127.0.0.1:{}", free_port());
    let log = dir.join("serve.log");
    let db = db.to_owned();
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
        _dir: None,
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
    let token = token_of(claim);

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
        r.alerts().first().map(|h| h.get("traceparent").cloned())
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
    let token = token_of(claim);
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
    let alert = wait_for("the alert", &got, |r| r.alerts().first().cloned());
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

/// Lets namespace `pay` send effects to the receiver at `base`.
fn allow_effects_to(app: &Served, base: &str) {
    let hostport = base.trim_start_matches("http://");
    let r = reqwest::blocking::Client::new()
        .patch(app.url("/v1/namespaces/pay"))
        .json(&serde_json::json!({"egress": {"allow": [hostport]}}))
        .send()
        .expect("patch");
    assert_eq!(r.status(), 200);
}

/// The receiver's port, as spans name it.
fn port_of(base: &str) -> String {
    base.rsplit(':').next().expect("port").to_owned()
}

/// `(trace id, parent id)` of a `traceparent` value.
fn parts_of(traceparent: &str) -> (String, String) {
    let p: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(p.len(), 4, "{traceparent}");
    (p[1].to_owned(), p[2].to_owned())
}

/// The server span of a request in `trace` whose name starts with `name`.
fn request_span(got: &Mutex<Received>, trace: &str, name: &str) -> Span {
    wait_for("the request span", got, |r| {
        r.spans
            .iter()
            .find(|s| s.trace_id == trace && s.kind == 2 && s.name.starts_with(name))
            .cloned()
    })
}

/// The exported span `span_id` of `trace`.
/// The lease token of a claim, asserted answered 201.
fn token_of(claim: reqwest::blocking::Response) -> String {
    assert_eq!(claim.status(), 201);
    claim.json::<serde_json::Value>().expect("json")["token"]
        .as_str()
        .expect("token")
        .to_owned()
}

/// The server span `name` of `trace`, asserted a child of `parent` and the parent of `child`.
fn request_between(
    got: &Mutex<Received>,
    trace: &str,
    name: &str,
    parent: &str,
    child: &Span,
) -> Span {
    let request = request_span(got, trace, name);
    assert_eq!(request.parent_span_id, parent, "{request:?}");
    assert_eq!(child.parent_span_id, request.span_id, "{child:?}");
    request
}

fn span_by_id(got: &Mutex<Received>, trace: &str, span_id: &str) -> Span {
    wait_for("the client span", got, |r| {
        r.spans
            .iter()
            .find(|s| s.trace_id == trace && s.span_id == span_id)
            .cloned()
    })
}

#[test]
fn an_effect_is_an_effect_send_span_under_its_request_and_carries_its_traceparent() {
    let (base, got) = receiver();
    let app = serve_alerting_to(&base, true);
    allow_effects_to(&app, &base);
    let http = reqwest::blocking::Client::new();
    let trace_id = "7af92f3577b34da6a3ce929d0e0e4711";
    let caller_span = "00f067aa0ba902b7";
    let effect = |key: &str, body: serde_json::Value| {
        http.post(app.url(&format!("/v1/namespaces/pay/keys/{key}/effect")))
            .header("traceparent", format!("00-{trace_id}-{caller_span}-01"))
            .header("tracestate", "vendor=abc")
            .json(&body)
            .send()
            .expect("effect")
    };
    // A traceparent among the request's own headers gives way to idem's (never both).
    let r = effect(
        "ord_QxZ77%3Acharge",
        serde_json::json!({"request": {"method": "POST", "url": format!("{base}/effect/charge"),
            "headers": {"traceparent": "00-11111111111111111111111111111111-2222222222222222-01",
                        "tracestate": "mine=1", "Authorization": "Bearer sk_QxZ_SECRET"},
            "body": {"card": "card_QxZ4242vW"}}}),
    );
    assert_eq!(r.status(), 200);
    let call = wait_for("the effect", &got, |r| r.first("/effect/"));
    let (trace, parent) = parts_of(call.one("traceparent").expect("a traceparent"));
    assert_eq!(trace, trace_id, "{call:?}");
    assert_eq!(call.one("tracestate"), Some("vendor=abc"), "{call:?}");
    assert_eq!(call.one("idempotency-key"), Some("ord_QxZ77:charge"));
    let send = span_by_id(&got, trace_id, &parent);
    assert_eq!(
        (send.name.as_str(), send.kind),
        ("effect.send", 3),
        "{send:?}"
    );
    let request = request_between(
        &got,
        trace_id,
        "POST /v1/namespaces/{ns}/keys/{key}/effect",
        caller_span,
        &send,
    );
    let port = port_of(&base);
    send.assert_attrs(&[
        ("namespace", "\"pay\""),
        ("http.request.method", "POST"),
        ("server.address", "127.0.0.1"),
        ("server.port", &port),
        ("http.response.status_code", "204"),
        ("outcome", "performed"),
    ]);

    // An ambiguous answer runs the lookup: `effect.reconcile`, its own traceparent.
    let r = effect(
        "ord_QxZ78",
        serde_json::json!({"request": {"method": "POST", "url": format!("{base}/fail/charge")},
            "reconcile": {"url": format!("{base}/lookup/{{key}}"), "found": [200],
                          "not_found": [404]}}),
    );
    assert_eq!(r.status(), 409);
    let failed = wait_for("the failing effect", &got, |r| r.first("/fail/"));
    let (_, failed_parent) = parts_of(failed.one("traceparent").expect("a traceparent"));
    let lookup = wait_for("the lookup", &got, |r| r.first("/lookup/"));
    let (trace, parent) = parts_of(lookup.one("traceparent").expect("a traceparent"));
    assert_eq!(trace, trace_id);
    assert_ne!(parent, failed_parent, "one span per call");
    let reconcile = span_by_id(&got, trace_id, &parent);
    assert_eq!(
        (reconcile.name.as_str(), reconcile.kind),
        ("effect.reconcile", 3),
        "{reconcile:?}"
    );
    reconcile.assert_attrs(&[("http.request.method", "GET"), ("outcome", "unknown")]);
    let send = span_by_id(&got, trace_id, &failed_parent);
    send.assert_attrs(&[
        ("http.response.status_code", "500"),
        ("outcome", "ambiguous"),
    ]);
    let second = wait_for("the second request span", &got, |r| {
        r.spans
            .iter()
            .find(|s| s.trace_id == trace_id && s.kind == 2 && s.span_id != request.span_id)
            .cloned()
    });
    assert_eq!(send.parent_span_id, second.span_id, "{send:?}");
    assert_eq!(reconcile.parent_span_id, second.span_id, "{reconcile:?}");

    let shown = format!("{:?}", got.lock().expect("lock").spans);
    assert!(
        !shown.contains("QxZ"),
        "no key, header or body in a span: {shown}"
    );
    drop(app);
}

#[test]
fn without_an_exporter_an_effect_carries_the_callers_traceparent_or_none() {
    let (base, got) = receiver();
    let app = serve_alerting_to(&base, false);
    allow_effects_to(&app, &base);
    let http = reqwest::blocking::Client::new();
    let caller = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let send = |key: &str, traced: bool, headers: serde_json::Value| {
        let mut req = http
            .post(app.url(&format!("/v1/namespaces/pay/keys/{key}/effect")))
            .json(&serde_json::json!({"request": {"method": "POST",
                "url": format!("{base}/effect/{key}/x"), "headers": headers}}));
        if traced {
            req = req
                .header("traceparent", caller)
                .header("tracestate", "vendor=abc");
        }
        let r = req.send().expect("effect");
        assert_eq!(r.status(), 200);
        wait_for("the effect", &got, |r| r.first(&format!("/effect/{key}/")))
    };
    let own = "00-11111111111111111111111111111111-2222222222222222-01";
    let traced = send("k1", true, serde_json::json!({"traceparent": own}));
    assert_eq!(traced.one("traceparent"), Some(caller), "{traced:?}");
    assert_eq!(traced.one("tracestate"), Some("vendor=abc"), "{traced:?}");
    let untraced = send("k2", false, serde_json::json!({}));
    assert_eq!(untraced.one("traceparent"), None, "{untraced:?}");
    assert_eq!(untraced.one("tracestate"), None, "{untraced:?}");
    // With no trace context of its own, idem sends the request's headers as given.
    let given = send("k3", false, serde_json::json!({"traceparent": own}));
    assert_eq!(given.one("traceparent"), Some(own), "{given:?}");
    assert!(
        got.lock().expect("lock").spans.is_empty(),
        "nothing is exported"
    );
    drop(app);
}

const HOOK_SECRET: &str = "whsec_traces_hook_secret";

/// Source `hooks` (Stripe) forwarding to `{base}/forward`, passing the provider's own trace
/// headers on (idem's must replace them, never go beside them).
fn put_hooks_source(app: &Served, base: &str) {
    let r = reqwest::blocking::Client::new()
        .put(app.url("/v1/sources/hooks"))
        .json(
            &serde_json::json!({"provider": "stripe", "secrets": [HOOK_SECRET],
            "forward": {"url": format!("{base}/forward"), "timeout_ms": 2000,
                        "headers": ["stripe-signature", "traceparent", "tracestate"]}}),
        )
        .send()
        .expect("put source");
    assert!(r.status().is_success(), "{}", r.status());
}

/// A signed Stripe event `id` to `/in/hooks`, with the provider's `traceparent` if any.
fn post_hook(app: &Served, id: &str, traceparent: Option<&str>) {
    let extra = match traceparent {
        Some(tp) => vec![("traceparent", tp), ("tracestate", "vendor=abc")],
        None => Vec::new(),
    };
    let client = reqwest::blocking::Client::new();
    crate::helpers::post_stripe_event(&client, &app.url("/in/hooks"), HOOK_SECRET, id, &extra);
}

/// The forward of event `key`, and the `intake.forward` span its `traceparent` names.
fn forwarded(got: &Mutex<Received>, key: &str) -> (Call, Span) {
    let call = wait_for("the forward", got, |r| {
        r.calls
            .iter()
            .find(|c| c.path.starts_with("/forward") && c.one("idem-key") == Some(key))
            .cloned()
    });
    let (trace, parent) = parts_of(call.one("traceparent").expect("a traceparent"));
    let span = span_by_id(got, &trace, &parent);
    assert_eq!(
        (span.name.as_str(), span.kind),
        ("intake.forward", 3),
        "{span:?}"
    );
    (call, span)
}

fn pause(app: &Served, ns: &str, verb: &str) {
    let r = reqwest::blocking::Client::new()
        .post(app.url(&format!("/v1/namespaces/{ns}/{verb}")))
        .send()
        .expect(verb);
    assert_eq!(r.status(), 200);
}

/// Events accepted by a server that exports (with and without the provider's traceparent) and
/// by one that did not and was stopped before delivering them (with the provider's context,
/// and with none, as items queued before contexts were kept look): each forward is an
/// `intake.forward` span whose parent is the stored context, and carries that span's
/// `traceparent`.
fn forwards_continue_the_stored_trace(db: &str, dir: &std::path::Path) {
    let (base, got) = receiver();
    let caller = "00f067aa0ba902b7";
    let stored_trace = "2bf92f3577b34da6a3ce929d0e0e4722";
    {
        let quiet = serve_on(&base, false, db, dir);
        put_hooks_source(&quiet, &base);
        pause(&quiet, "hooks", "pause");
        post_hook(
            &quiet,
            "evt_stored",
            Some(&format!("00-{stored_trace}-{caller}-01")),
        );
        post_hook(&quiet, "evt_old", None);
    }
    let app = serve_on(&base, true, db, dir);
    pause(&app, "hooks", "resume");
    let trace_id = "1bf92f3577b34da6a3ce929d0e0e4711";
    post_hook(
        &app,
        "evt_traced",
        Some(&format!("00-{trace_id}-{caller}-01")),
    );
    let (call, span) = forwarded(&got, "evt_traced");
    assert_eq!(span.trace_id, trace_id, "{span:?}");
    assert_eq!(call.one("tracestate"), Some("vendor=abc"), "{call:?}");
    request_between(&got, trace_id, "POST /in/", caller, &span);
    let port = port_of(&base);
    span.assert_attrs(&[
        ("source", "\"hooks\""),
        ("namespace", "\"hooks\""),
        ("destination", "\"default\""),
        ("attempt", "1"),
        ("server.port", &port),
        ("http.response.status_code", "204"),
        ("result", "delivered"),
    ]);

    // A provider without a traceparent: the `/in` request span is still the parent.
    post_hook(&app, "evt_plain", None);
    let (_, span) = forwarded(&got, "evt_plain");
    request_between(&got, &span.trace_id, "POST /in/", "", &span);

    // Accepted before the restart, without export: the provider's span is the parent.
    let (_, span) = forwarded(&got, "evt_stored");
    assert_eq!(
        (span.trace_id.as_str(), span.parent_span_id.as_str()),
        (stored_trace, caller),
        "{span:?}"
    );
    // Queued with no context at all: a root span.
    let (_, span) = forwarded(&got, "evt_old");
    assert_eq!(span.parent_span_id, "", "{span:?}");
    assert_ne!(span.trace_id, stored_trace);
    drop(app);
}

#[test]
fn a_forward_is_an_intake_forward_span_under_the_intake_request_on_sqlite() {
    let dir = tempfile::tempdir().expect("tmp");
    let db = format!("sqlite://{}", dir.path().join("idem.db").display());
    forwards_continue_the_stored_trace(&db, dir.path());
}

#[test]
fn a_forward_is_an_intake_forward_span_under_the_intake_request_on_postgres() {
    let Some(pg) = idem_testkit::pg::PgDb::create("traces_forward") else {
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    forwards_continue_the_stored_trace(pg.url(), dir.path());
}
