//! The history checker: a load client that records every request and answer, and the check
//! of that history against the ledger afterwards; plus the `kill -9` fault run that uses it.
//!
//! The load: `clients` keep-alive connections, each a worker that claims a key of a sliding
//! window (so several workers contend for each key and fresh keys keep coming), then
//! heartbeats, completes or fails it (`retryable`, `permanent`, `ambiguous`) with the token it
//! got. Every request is recorded with what the client knew (key, attempt, the result it
//! sent) and its answer, or as *unknown* when the connection broke before an answer (the
//! write may or may not have happened).
//!
//! The invariants checked against the ledger (each record read back with its events):
//! - every acknowledged write is there: a 201 claim's attempt has its `acquired`/`resumed`
//!   event; a 200 complete's record is `completed` with that result; an acknowledged fail
//!   that moved the record to a final state left it there;
//! - never two `acquired` for one key and attempt (neither in the answers nor in the events);
//! - no record in a state this workload cannot produce, and none `completed` with a result
//!   nobody sent, nor `failed_permanent` without a permanent fail;
//! - every acknowledged `ambiguous` fail is in `needs_review`.
//!
//! It only ever writes to its own namespace (`hist-<random>`), and it never decides anything
//! for the server: it is a client and a judge.
//!
//! The load and the check are here; the fault runs that use them (`kill -9`, an injected
//! fault, the soak) are the `faults` module.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
mod faults;

pub use faults::{
    rss_mib, run_fault, run_kill9, run_soak, FaultOpts, FaultReport, Kill9Opts, Kill9Report,
    SoakReport, SoakWindow,
};

/// Upper bound of one request (a server that hangs shows as unknown answers, not a hang).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
/// Keys a worker picks from: the window slides by one key every few claims.
const WINDOW: u64 = 128;

/// What one worker did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verb {
    Claim,
    Heartbeat,
    Complete,
    FailRetryable,
    FailPermanent,
    FailAmbiguous,
}

/// One request and its answer.
#[derive(Debug, Clone)]
pub struct Entry {
    pub key: u64,
    pub verb: Verb,
    /// The attempt of the lease the worker held (claims: the attempt it was given).
    pub attempt: Option<u64>,
    /// Complete: the result tag sent.
    pub result: Option<String>,
    /// `None`: no answer (connection broken or timed out): the write may or may not be there.
    pub status: Option<u16>,
    /// The record state the answer reported, when it did.
    pub state: Option<String>,
    /// The problem `code` of a non-2xx answer (e.g. `store_unavailable`), when it had one.
    pub code: Option<String>,
}

/// Every entry of a run.
#[derive(Debug, Default)]
pub struct History {
    pub namespace: String,
    pub entries: Vec<Entry>,
}

/// The status code on the status line of an HTTP/1.1 answer's head.
pub fn status_code(head: &str) -> Option<u16> {
    head.split(' ').nth(1)?.parse().ok()
}

/// The `Content-Length` of an HTTP/1.1 answer's head (0 without one).
pub fn content_length(head: &str) -> usize {
    head.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0)
}

/// One raw HTTP/1.1 exchange on a keep-alive connection.
async fn exchange(
    s: &mut TcpStream,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: Option<&str>,
) -> anyhow::Result<(u16, Value)> {
    let body = body.unwrap_or("");
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: idem\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    head.push_str(body);
    s.write_all(head.as_bytes()).await?;
    let mut buf = Vec::with_capacity(512);
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        anyhow::ensure!(s.read(&mut byte).await? == 1, "closed before an answer");
        buf.push(byte[0]);
        anyhow::ensure!(buf.len() < 64 * 1024, "answer head too large");
    }
    let head = String::from_utf8_lossy(&buf);
    let status = status_code(&head).context("status line")?;
    let mut body = vec![0u8; content_length(&head)];
    s.read_exact(&mut body).await?;
    Ok((status, serde_json::from_slice(&body).unwrap_or(Value::Null)))
}

/// A connection that reconnects when broken.
pub(crate) struct Conn {
    pub(crate) addr: String,
    s: Option<TcpStream>,
}

/// What became of one request.
pub(crate) enum Sent {
    /// No connection could be made: nothing was sent.
    NotConnected,
    /// Sent, and no answer came: it may or may not have been applied.
    Lost,
    Answer(u16, Value),
}

impl Conn {
    pub(crate) fn new(addr: &str) -> Conn {
        Conn {
            addr: addr.to_owned(),
            s: None,
        }
    }

    pub(crate) async fn send(
        &mut self,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> Option<(u16, Value)> {
        match self.try_send(method, path, &[], body).await {
            Sent::Answer(s, v) => Some((s, v)),
            Sent::NotConnected | Sent::Lost => None,
        }
    }

    pub(crate) async fn try_send(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(String, String)],
        body: Option<&str>,
    ) -> Sent {
        if self.s.is_none() {
            let Ok(s) = TcpStream::connect(&self.addr).await else {
                return Sent::NotConnected;
            };
            let _ = s.set_nodelay(true);
            self.s = Some(s);
        }
        let Some(s) = self.s.as_mut() else {
            return Sent::NotConnected;
        };
        match tokio::time::timeout(REQUEST_TIMEOUT, exchange(s, method, path, headers, body)).await
        {
            Ok(Ok((status, v))) => Sent::Answer(status, v),
            _ => {
                self.s = None;
                Sent::Lost
            }
        }
    }

    /// [`Conn::try_send`], trying again while no connection can be made (the server is
    /// restarting) until `stop`; `None` when the request was sent and not answered.
    async fn send_recorded(
        &mut self,
        method: &str,
        path: &str,
        body: &str,
        stop: &AtomicBool,
    ) -> Option<(u16, Value)> {
        loop {
            match self.try_send(method, path, &[], Some(body)).await {
                Sent::Answer(s, v) => return Some((s, v)),
                Sent::Lost => return None,
                Sent::NotConnected if stop.load(Ordering::Relaxed) => return None,
                Sent::NotConnected => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    }
}

/// Answers so far, readable while a load runs (to see when a fault starts to show and when
/// the service is back).
#[derive(Debug, Default)]
pub struct Tally {
    /// 2xx answers.
    pub acknowledged: AtomicU64,
    /// 503 answers.
    pub unavailable: AtomicU64,
    /// Requests sent and not answered.
    pub unknown: AtomicU64,
}

impl Tally {
    fn count(&self, status: Option<u16>) {
        let c = match status {
            Some(s) if (200..300).contains(&s) => &self.acknowledged,
            Some(503) => &self.unavailable,
            Some(_) => return,
            None => &self.unknown,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    pub fn acknowledged(&self) -> u64 {
        self.acknowledged.load(Ordering::Relaxed)
    }

    pub fn unavailable(&self) -> u64 {
        self.unavailable.load(Ordering::Relaxed)
    }
}

/// The problem `code` of an answer that is not a 2xx.
fn problem_code(status: Option<u16>, v: Option<&Value>) -> Option<String> {
    match (status, v) {
        (Some(s), Some(v)) if !(200..300).contains(&s) => v["code"].as_str().map(str::to_owned),
        _ => None,
    }
}

fn key_name(k: u64) -> String {
    format!("k{k}")
}

/// One worker until `stop`.
async fn worker(
    addr: String,
    ns: String,
    id: usize,
    stop: Arc<AtomicBool>,
    claims: Arc<AtomicU64>,
    pause: Duration,
    tally: Arc<Tally>,
) -> Vec<Entry> {
    let mut conn = Conn { addr, s: None };
    let mut out = Vec::new();
    let mut rng = StdRng::seed_from_u64(rand::random());
    let mut held: Option<(u64, String, u64)> = None;
    let mut seq = 0u64;
    while !stop.load(Ordering::Relaxed) {
        seq += 1;
        if !pause.is_zero() {
            tokio::time::sleep(pause).await;
        }
        match held.take() {
            None => {
                let base = claims.fetch_add(1, Ordering::Relaxed) / 4;
                let key = base + rng.random_range(0..WINDOW);
                let path = format!("/v1/namespaces/{ns}/keys/{}/claim", key_name(key));
                let body = format!("{{\"owner\":\"w{id}\"}}");
                let a = conn.send_recorded("POST", &path, &body, &stop).await;
                let mut e = Entry {
                    key,
                    verb: Verb::Claim,
                    attempt: None,
                    result: None,
                    status: a.as_ref().map(|a| a.0),
                    state: None,
                    code: problem_code(a.as_ref().map(|a| a.0), a.as_ref().map(|a| &a.1)),
                };
                tally.count(e.status);
                match a {
                    Some((201, v)) => {
                        let attempt = v["record"]["attempt"].as_u64();
                        e.attempt = attempt;
                        if let (Some(t), Some(at)) = (v["token"].as_str(), attempt) {
                            held = Some((key, t.to_owned(), at));
                        }
                    }
                    Some((_, v)) => e.state = v["record"]["state"].as_str().map(str::to_owned),
                    None => {}
                }
                out.push(e);
                if matches!(out.last().and_then(|e| e.status), Some(503) | Some(409)) {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }
            Some((key, token, attempt)) => {
                let roll = rng.random_range(0..100);
                let verb = match roll {
                    0..20 => Verb::Heartbeat,
                    20..70 => Verb::Complete,
                    70..85 => Verb::FailRetryable,
                    85..92 => Verb::FailPermanent,
                    _ => Verb::FailAmbiguous,
                };
                let token_json = serde_json::to_string(&token).unwrap_or_default();
                let result = format!("w{id}-{seq}");
                let (path_verb, body) = match verb {
                    Verb::Heartbeat => ("heartbeat", format!("{{\"token\":{token_json}}}")),
                    Verb::Complete => (
                        "complete",
                        json!({"token": token, "result": {"tag": result}}).to_string(),
                    ),
                    Verb::FailRetryable => (
                        "fail",
                        json!({"token": token, "kind": "retryable",
                               "error": {"category": "http", "message": "busy"}})
                        .to_string(),
                    ),
                    Verb::FailPermanent => (
                        "fail",
                        json!({"token": token, "kind": "permanent",
                               "error": {"category": "business", "message": "no"}})
                        .to_string(),
                    ),
                    Verb::FailAmbiguous | Verb::Claim => (
                        "fail",
                        json!({"token": token, "kind": "ambiguous",
                               "error": {"category": "timeout", "message": "unknown"}})
                        .to_string(),
                    ),
                };
                let path = format!("/v1/namespaces/{ns}/keys/{}/{path_verb}", key_name(key));
                let a = conn.send_recorded("POST", &path, &body, &stop).await;
                let status = a.as_ref().map(|a| a.0);
                let state = a
                    .as_ref()
                    .and_then(|(_, v)| v["record"]["state"].as_str().or(v["state"].as_str()))
                    .map(str::to_owned);
                tally.count(status);
                out.push(Entry {
                    key,
                    verb,
                    attempt: Some(attempt),
                    result: (verb == Verb::Complete).then_some(result),
                    status,
                    state,
                    code: problem_code(status, a.as_ref().map(|a| &a.1)),
                });
                if verb == Verb::Heartbeat && status == Some(200) {
                    held = Some((key, token, attempt));
                }
            }
        }
    }
    out
}

/// A running load: [`Load::finish`] stops it and returns the history.
pub struct Load {
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<Vec<Entry>>>,
    namespace: String,
    tally: Arc<Tally>,
}

impl Load {
    /// `clients` workers against the server at `addr` (`127.0.0.1:PORT`) in `namespace`.
    pub fn start(addr: &str, namespace: &str, clients: usize) -> Load {
        Load::start_paced(addr, namespace, clients, Duration::ZERO)
    }

    /// [`Load::start`] with a pause before every request of each worker (a rate below
    /// capacity).
    pub fn start_paced(addr: &str, namespace: &str, clients: usize, pause: Duration) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let claims = Arc::new(AtomicU64::new(0));
        let tally = Arc::new(Tally::default());
        let tasks = (0..clients.max(1))
            .map(|id| {
                tokio::spawn(worker(
                    addr.to_owned(),
                    namespace.to_owned(),
                    id,
                    stop.clone(),
                    claims.clone(),
                    pause,
                    tally.clone(),
                ))
            })
            .collect();
        Load {
            stop,
            tasks,
            namespace: namespace.to_owned(),
            tally,
        }
    }

    /// The answers so far.
    pub fn tally(&self) -> &Tally {
        &self.tally
    }

    pub async fn finish(self) -> anyhow::Result<History> {
        self.stop.store(true, Ordering::Relaxed);
        let mut h = History {
            namespace: self.namespace,
            entries: Vec::new(),
        };
        for t in self.tasks {
            h.entries.extend(t.await?);
        }
        Ok(h)
    }
}

/// Sets the namespace policy the workload needs: short leases (a killed server's leases end
/// soon and are reclaimed) and a retry budget that backs off for a millisecond.
pub async fn prepare_namespace(addr: &str, namespace: &str) -> anyhow::Result<()> {
    let mut c = Conn {
        addr: addr.to_owned(),
        s: None,
    };
    let body = json!({
        "lease_ms": 1500,
        "retry": {"max_attempts": 20, "base_ms": 1, "max_ms": 5}
    })
    .to_string();
    let (status, v) = c
        .send("PATCH", &format!("/v1/namespaces/{namespace}"), Some(&body))
        .await
        .context("PATCH namespace: no answer")?;
    anyhow::ensure!(status == 200, "PATCH namespace answered {status}: {v}");
    Ok(())
}

/// What the check found (every count but `acknowledged` and `unknown` must be 0).
#[derive(Debug, Default, Serialize)]
pub struct Verdict {
    pub requests: u64,
    /// Requests answered 2xx that wrote something (claims 201, heartbeats, completes, fails).
    pub acknowledged: u64,
    /// Requests without an answer (the server was killed under them).
    pub unknown: u64,
    pub answers: BTreeMap<u16, u64>,
    pub keys_checked: u64,
    pub lost: u64,
    pub double_acquired: u64,
    pub bad_state: u64,
    pub ambiguous_not_in_review: u64,
    /// The first few violations, described.
    pub violations: Vec<String>,
}

impl Verdict {
    pub fn ok(&self) -> bool {
        self.lost == 0
            && self.double_acquired == 0
            && self.bad_state == 0
            && self.ambiguous_not_in_review == 0
    }

    fn violation(&mut self, what: String) {
        if self.violations.len() < 20 {
            self.violations.push(what);
        }
    }
}

/// States this workload can produce (no prepare, no approval, no operator).
const ALLOWED: [&str; 5] = [
    "processing",
    "completed",
    "failed_retryable",
    "failed_permanent",
    "needs_review",
];

/// Checks `history` against the ledger of the server at `addr`.
pub async fn check(addr: &str, history: &History) -> anyhow::Result<Verdict> {
    let mut v = Verdict {
        requests: history.entries.len() as u64,
        ..Default::default()
    };
    let mut by_key: HashMap<u64, Vec<&Entry>> = HashMap::new();
    for e in &history.entries {
        match e.status {
            Some(s) => {
                *v.answers.entry(s).or_default() += 1;
                if (200..300).contains(&s) {
                    v.acknowledged += 1;
                }
            }
            None => v.unknown += 1,
        }
        by_key.entry(e.key).or_default().push(e);
    }
    let mut conn = Conn {
        addr: addr.to_owned(),
        s: None,
    };
    let mut keys: Vec<u64> = by_key.keys().copied().collect();
    keys.sort_unstable();
    for key in keys {
        let entries = &by_key[&key];
        // Never two 201s for one key and attempt.
        let mut granted: HashMap<u64, u64> = HashMap::new();
        for e in entries.iter().filter(|e| e.status == Some(201)) {
            if let Some(a) = e.attempt {
                *granted.entry(a).or_default() += 1;
            }
        }
        for (a, n) in &granted {
            if *n > 1 {
                v.double_acquired += 1;
                v.violation(format!(
                    "{}: {n} claims acquired attempt {a}",
                    key_name(key)
                ));
            }
        }
        let path = format!(
            "/v1/namespaces/{}/keys/{}",
            history.namespace,
            key_name(key)
        );
        let Some((status, rec)) = conn.send("GET", &path, None).await else {
            anyhow::bail!("GET {path}: no answer");
        };
        let acquired_any = !granted.is_empty();
        if status == 404 {
            if acquired_any {
                v.lost += 1;
                v.violation(format!("{}: acknowledged claims, no record", key_name(key)));
            }
            continue;
        }
        anyhow::ensure!(status == 200, "GET {path} answered {status}: {rec}");
        v.keys_checked += 1;
        let state = rec["record"]["state"].as_str().unwrap_or("").to_owned();
        let attempt = rec["record"]["attempt"].as_u64().unwrap_or(0);
        let result = rec["record"]["result"]["tag"].as_str().map(str::to_owned);
        let events = rec["events"].as_array().cloned().unwrap_or_default();
        let mut ev_acq: HashMap<u64, u64> = HashMap::new();
        let mut ev_failed: HashSet<u64> = HashSet::new();
        for ev in &events {
            let a = ev["attempt"].as_u64().unwrap_or(0);
            match ev["type"].as_str() {
                Some("acquired") | Some("resumed") => *ev_acq.entry(a).or_default() += 1,
                Some("failed") | Some("moved_to_review") => {
                    ev_failed.insert(a);
                }
                _ => {}
            }
        }
        for (a, n) in &ev_acq {
            if *n > 1 {
                v.double_acquired += 1;
                v.violation(format!(
                    "{}: {n} acquisition events for attempt {a}",
                    key_name(key)
                ));
            }
        }
        if !ALLOWED.contains(&state.as_str()) {
            v.bad_state += 1;
            v.violation(format!("{}: state {state:?}", key_name(key)));
        }
        let sent_results: HashSet<&str> = entries
            .iter()
            .filter(|e| e.verb == Verb::Complete)
            .filter_map(|e| e.result.as_deref())
            .collect();
        if state == "completed" && !result.as_deref().is_some_and(|r| sent_results.contains(r)) {
            v.bad_state += 1;
            v.violation(format!(
                "{}: completed with a result nobody sent",
                key_name(key)
            ));
        }
        if state == "failed_permanent" && !entries.iter().any(|e| e.verb == Verb::FailPermanent) {
            v.bad_state += 1;
            v.violation(format!(
                "{}: failed_permanent, no permanent fail",
                key_name(key)
            ));
        }
        for e in entries
            .iter()
            .filter(|e| e.status.is_some_and(|s| (200..300).contains(&s)))
        {
            let a = e.attempt.unwrap_or(0);
            let lost = match e.verb {
                // A 201 handed out attempt `a`; a 200 replayed a final state.
                Verb::Claim if e.status == Some(201) => {
                    attempt < a || ev_acq.get(&a).copied().unwrap_or(0) == 0
                }
                Verb::Claim => e.state.as_deref() != Some(state.as_str()),
                Verb::Complete => state != "completed" || result.as_deref() != e.result.as_deref(),
                Verb::FailPermanent | Verb::FailAmbiguous | Verb::FailRetryable => {
                    let final_state = e.state.as_deref();
                    match final_state {
                        Some("failed_permanent") | Some("needs_review") => {
                            Some(state.as_str()) != final_state
                        }
                        _ => attempt < a || !ev_failed.contains(&a),
                    }
                }
                Verb::Heartbeat => attempt < a,
            };
            if lost {
                v.lost += 1;
                v.violation(format!(
                    "{}: acknowledged {:?} of attempt {a} not in the ledger (state {state}, \
                     attempt {attempt})",
                    key_name(key),
                    e.verb
                ));
            }
            if e.verb == Verb::FailAmbiguous && state != "needs_review" {
                v.ambiguous_not_in_review += 1;
                v.violation(format!(
                    "{}: acknowledged ambiguous fail, record {state}",
                    key_name(key)
                ));
            }
        }
    }
    Ok(v)
}
