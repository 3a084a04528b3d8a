//! The history checker for outbound traffic: intake posts and effects against a faulty
//! destination, every request and every arrival at the destination recorded, then checked
//! against the ledger.
//!
//! The destination ([`FaultSink`]) is a raw loopback HTTP/1.1 server that, while faulty,
//! treats each request at random: answers `200` at once, answers `200` slowly (within the
//! caller's timeout), hangs until the caller gives up, resets the connection after reading
//! the request, resets it before reading anything, answers `503`, or answers `500`. It
//! records, for every request it read, the key it carried (`Idem-Key` for a forward,
//! `Idempotency-Key` for an effect), when it arrived, when it ended (answer written, reset,
//! or the caller closed), and what it did. Healthy, it answers `200` at once.
//!
//! The invariants ([`check`]):
//! - intake: every event answered `accepted` or `duplicate` is in the ledger; once the sink
//!   is healthy again each ends `completed` (and then the sink answered `200` to one of its
//!   forwards) or in the dead letter (`needs_review`, and then it never answered one `200`:
//!   the source's retry budget of 3 attempts ran out); never two forwards of one event at the
//!   sink at the same time; never a forward after the sink answered one of the event `200`
//!   (no crash here, so nothing allows a second delivery);
//! - effects (destination not idempotent): each key reaches the destination at most once,
//!   except after an explicit refusal (`503`: nothing was done, the contract resends after the
//!   backoff); never two sends of one key at the same time; a key whose send was ambiguous (a
//!   hang, a reset after the request was read, a `500`) is in `needs_review`, and every answer
//!   `needs_review` leaves the record there; an answer `performed` means the destination
//!   answered that key `200`, and a `completed` record was answered `200` exactly once.
//!
//! It writes only to its own namespace and source, and only talks to loopback.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::history::{Conn, Sent};

/// What the sink did with one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Treatment {
    Ok,
    Slow,
    Hang,
    ResetAfterRead,
    ResetAtAccept,
    Refuse503,
    Error500,
}

/// One request the sink read.
#[derive(Debug, Clone)]
pub struct Hit {
    /// `Idem-Key` (forwards) or `Idempotency-Key` (effects).
    pub key: String,
    pub forward: bool,
    pub treatment: Treatment,
    pub start: Instant,
    pub end: Instant,
    /// A 200 was written in full (the caller may still have given up just then; slow answers
    /// are far inside the caller's timeout, so it did not).
    pub answered_ok: bool,
}

/// How long a slow answer waits (well inside the callers' timeouts of [`FORWARD_TIMEOUT_MS`]
/// and [`EFFECT_TIMEOUT_MS`]).
pub const SLOW: Duration = Duration::from_millis(200);
/// The forward timeout of the source this module creates.
pub const FORWARD_TIMEOUT_MS: u64 = 700;
/// The `timeout_ms` of every effect.
pub const EFFECT_TIMEOUT_MS: u64 = 700;

#[derive(Default)]
struct SinkState {
    hits: Vec<Hit>,
    at_accept_resets: u64,
    /// Connections accepted whose hit is not recorded yet.
    open: u64,
}

/// Counts one accepted connection as open until dropped, on every way out of `serve_one`.
struct Open(Arc<Mutex<SinkState>>);

impl Open {
    fn new(state: Arc<Mutex<SinkState>>) -> Open {
        if let Ok(mut s) = state.lock() {
            s.open += 1;
        }
        Open(state)
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        if let Ok(mut s) = self.0.lock() {
            s.open -= 1;
        }
    }
}

/// The faulty destination: forwards at `/webhook`, effects at `/charge`.
pub struct FaultSink {
    pub addr: std::net::SocketAddr,
    faulty: Arc<AtomicBool>,
    state: Arc<Mutex<SinkState>>,
    accept: tokio::task::JoinHandle<()>,
}

fn pick(rng: &mut StdRng) -> Treatment {
    match rng.random_range(0..100) {
        0..30 => Treatment::Ok,
        30..45 => Treatment::Slow,
        45..57 => Treatment::Hang,
        57..69 => Treatment::ResetAfterRead,
        69..75 => Treatment::ResetAtAccept,
        75..88 => Treatment::Refuse503,
        _ => Treatment::Error500,
    }
}

/// Reads one request head and body; the lowercase header map.
async fn read_request(s: &mut TcpStream) -> Option<(String, HashMap<String, String>)> {
    let mut buf = Vec::with_capacity(2048);
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 || buf.len() > 1 << 20 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.lines();
    let path = lines.next()?.split(' ').nth(1)?.to_owned();
    let headers: HashMap<String, String> = lines
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            Some((k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        })
        .collect();
    let len: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + len {
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Some((path, headers))
}

async fn answer(s: &mut TcpStream, status: &str) -> bool {
    let body = "{\"id\":\"ch_1\"}";
    let msg = format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(msg.as_bytes()).await.is_ok() && s.flush().await.is_ok()
}

async fn serve_one(
    mut s: TcpStream,
    treatment: Treatment,
    state: Arc<Mutex<SinkState>>,
    _open: Open,
) -> Option<()> {
    if treatment == Treatment::ResetAtAccept {
        let _ = s.set_zero_linger();
        drop(s);
        state.lock().ok()?.at_accept_resets += 1;
        return Some(());
    }
    let (path, headers) = read_request(&mut s).await?;
    let start = Instant::now();
    let forward = path.starts_with("/webhook");
    let key = headers
        .get(if forward {
            "idem-key"
        } else {
            "idempotency-key"
        })
        .cloned()
        .unwrap_or_default();
    let answered_ok = match treatment {
        Treatment::Ok => answer(&mut s, "200 OK").await,
        Treatment::Slow => {
            tokio::time::sleep(SLOW).await;
            answer(&mut s, "200 OK").await
        }
        Treatment::Hang => {
            // Until the caller gives up and closes (or 30 s).
            let mut sink = [0u8; 512];
            let _ = tokio::time::timeout(Duration::from_secs(30), async {
                while matches!(s.read(&mut sink).await, Ok(n) if n > 0) {}
            })
            .await;
            false
        }
        Treatment::ResetAfterRead | Treatment::ResetAtAccept => {
            let _ = s.set_zero_linger();
            false
        }
        Treatment::Refuse503 => {
            let _ = answer(&mut s, "503 Service Unavailable").await;
            false
        }
        Treatment::Error500 => {
            let _ = answer(&mut s, "500 Internal Server Error").await;
            false
        }
    };
    drop(s);
    let hit = Hit {
        key,
        forward,
        treatment,
        start,
        end: Instant::now(),
        answered_ok,
    };
    state.lock().ok()?.hits.push(hit);
    Some(())
}

impl FaultSink {
    /// Starts on a free loopback port, faulty.
    pub async fn start() -> anyhow::Result<FaultSink> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let faulty = Arc::new(AtomicBool::new(true));
        let state = Arc::new(Mutex::new(SinkState::default()));
        let (f, st) = (faulty.clone(), state.clone());
        let accept = tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(rand::random());
            while let Ok((tcp, _)) = listener.accept().await {
                let _ = tcp.set_nodelay(true);
                let t = if f.load(Ordering::Relaxed) {
                    pick(&mut rng)
                } else {
                    Treatment::Ok
                };
                // Counted before the task runs, so `hits` cannot miss a connection whose
                // task has not started yet.
                let open = Open::new(st.clone());
                tokio::spawn(serve_one(tcp, t, st.clone(), open));
            }
        });
        Ok(FaultSink {
            addr,
            faulty,
            state,
            accept,
        })
    }

    /// From now on every request is answered `200` at once.
    pub fn heal(&self) {
        self.faulty.store(false, Ordering::Relaxed);
    }

    /// Every request read so far, once every accepted connection has been recorded (or
    /// after `wait`). The caller may have its answer before the sink's task records the hit
    /// (the answer is written, then the hit pushed): a check read at once could miss the 200
    /// the caller acted on. Err when connections are still open after `wait`.
    pub async fn hits(&self, wait: Duration) -> anyhow::Result<Vec<Hit>> {
        let deadline = Instant::now() + wait;
        loop {
            let (open, hits) = {
                let s = self
                    .state
                    .lock()
                    .map_err(|_| anyhow::anyhow!("sink state poisoned"))?;
                (s.open, s.hits.clone())
            };
            if open == 0 {
                return Ok(hits);
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "{open} sink connections still open after {wait:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Connections reset before anything was read.
    pub fn resets_at_accept(&self) -> u64 {
        self.state.lock().map_or(0, |s| s.at_accept_resets)
    }
}

impl Drop for FaultSink {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// One intake post.
#[derive(Debug, Clone)]
pub struct IntakeEntry {
    pub event_id: String,
    pub status: Option<u16>,
    /// `accepted`, `duplicate` or `held`.
    pub result: Option<String>,
    pub code: Option<String>,
}

/// One effect call.
#[derive(Debug, Clone)]
pub struct EffectEntry {
    pub key: String,
    pub status: Option<u16>,
    pub outcome: Option<String>,
    pub code: Option<String>,
}

/// The source this module creates.
pub const SOURCE: &str = "faulty-sink";

/// Creates the source (Stripe, forwarding to `sink`, short timeout, fast retries) and the
/// effects' namespace policy (the sink allowed, a destination that does not dedupe).
pub async fn prepare(addr: &str, effects_ns: &str, sink: &FaultSink) -> anyhow::Result<()> {
    let mut c = Conn::new(addr);
    let source = json!({
        "provider": "stripe",
        "secrets": [crate::signed::INTAKE_SECRET],
        "forward": {
            "url": format!("http://{}/webhook", sink.addr),
            "timeout_ms": FORWARD_TIMEOUT_MS,
            "concurrency": 8,
            "retry": {"max_attempts": 3, "base_ms": 20, "max_ms": 200, "window_ms": 600000}
        }
    })
    .to_string();
    let (status, v) = c
        .send("PUT", &format!("/v1/sources/{SOURCE}"), Some(&source))
        .await
        .context("PUT source: no answer")?;
    anyhow::ensure!(status == 201 || status == 200, "PUT source: {status} {v}");
    let policy = json!({
        "egress": {"allow": [sink.addr.to_string()]},
        "retry": {"max_attempts": 50, "base_ms": 1, "max_ms": 5},
        "destination_idempotent": false
    })
    .to_string();
    let (status, v) = c
        .send(
            "PATCH",
            &format!("/v1/namespaces/{effects_ns}"),
            Some(&policy),
        )
        .await
        .context("PATCH namespace: no answer")?;
    anyhow::ensure!(status == 200, "PATCH namespace: {status} {v}");
    Ok(())
}

fn code_of(status: Option<u16>, v: &Value) -> Option<String> {
    match status {
        Some(s) if !(200..300).contains(&s) => v["code"].as_str().map(str::to_owned),
        _ => None,
    }
}

async fn intake_worker(addr: String, id: usize, stop: Arc<AtomicBool>) -> Vec<IntakeEntry> {
    let mut conn = Conn::new(&addr);
    let mut rng = StdRng::seed_from_u64(rand::random());
    let run: u32 = rand::random();
    let mut out: Vec<IntakeEntry> = Vec::new();
    let mut seq = 0u64;
    while !stop.load(Ordering::Relaxed) {
        // One in five posts repeats an event this worker sent before (a provider's retry).
        let event_id = match out.len() {
            n if n > 0 && rng.random_range(0..5) == 0 => {
                out[rng.random_range(0..n)].event_id.clone()
            }
            _ => {
                seq += 1;
                format!("evt_{run:08x}_{id}_{seq}")
            }
        };
        let body = crate::signed::intake_body(&event_id);
        let text = String::from_utf8_lossy(&body).into_owned();
        let Ok(headers) = crate::signed::stripe_headers(&body) else {
            break;
        };
        let path = format!("/in/{SOURCE}");
        let (status, v) = match conn.try_send("POST", &path, &headers, Some(&text)).await {
            Sent::Answer(s, v) => (Some(s), v),
            Sent::Lost => (None, Value::Null),
            Sent::NotConnected => {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        out.push(IntakeEntry {
            event_id,
            status,
            result: v["events"][0]["status"].as_str().map(str::to_owned),
            code: code_of(status, &v),
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    out
}

async fn effect_worker(
    addr: String,
    ns: String,
    sink: std::net::SocketAddr,
    stop: Arc<AtomicBool>,
    next: Arc<AtomicU64>,
) -> Vec<EffectEntry> {
    let mut conn = Conn::new(&addr);
    let mut rng = StdRng::seed_from_u64(rand::random());
    let mut out = Vec::new();
    let body = json!({
        "request": {"method": "POST", "url": format!("http://{sink}/charge"),
                    "body": {"amount": 1000, "currency": "eur"}},
        "timeout_ms": EFFECT_TIMEOUT_MS
    })
    .to_string();
    while !stop.load(Ordering::Relaxed) {
        // A sliding window of 24 keys: calls repeat keys (replays, resumes after a backoff).
        let base = next.fetch_add(1, Ordering::Relaxed) / 3;
        let key = format!("fx{}", base + rng.random_range(0..24));
        let path = format!("/v1/namespaces/{ns}/keys/{key}/effect");
        let (status, v) = match conn.try_send("POST", &path, &[], Some(&body)).await {
            Sent::Answer(s, v) => (Some(s), v),
            Sent::Lost => (None, Value::Null),
            Sent::NotConnected => {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        out.push(EffectEntry {
            key,
            status,
            outcome: v["outcome"].as_str().map(str::to_owned),
            code: code_of(status, &v),
        });
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    out
}

/// What a run recorded.
#[derive(Debug, Default, Clone)]
pub struct Recorded {
    pub intake: Vec<IntakeEntry>,
    pub effects: Vec<EffectEntry>,
    pub hits: Vec<Hit>,
}

/// A running intake and effect load.
pub struct OutboundLoad {
    stop: Arc<AtomicBool>,
    intake: Vec<tokio::task::JoinHandle<Vec<IntakeEntry>>>,
    effects: Vec<tokio::task::JoinHandle<Vec<EffectEntry>>>,
}

impl OutboundLoad {
    pub fn start(
        addr: &str,
        effects_ns: &str,
        sink: &FaultSink,
        intake_clients: usize,
        effect_clients: usize,
    ) -> OutboundLoad {
        let stop = Arc::new(AtomicBool::new(false));
        let next = Arc::new(AtomicU64::new(0));
        let intake = (0..intake_clients)
            .map(|id| tokio::spawn(intake_worker(addr.to_owned(), id, stop.clone())))
            .collect();
        let effects = (0..effect_clients)
            .map(|_| {
                tokio::spawn(effect_worker(
                    addr.to_owned(),
                    effects_ns.to_owned(),
                    sink.addr,
                    stop.clone(),
                    next.clone(),
                ))
            })
            .collect();
        OutboundLoad {
            stop,
            intake,
            effects,
        }
    }

    /// Stops the clients (each finishes its request in flight).
    pub async fn finish(self) -> anyhow::Result<(Vec<IntakeEntry>, Vec<EffectEntry>)> {
        self.stop.store(true, Ordering::Relaxed);
        let mut i = Vec::new();
        for t in self.intake {
            i.extend(t.await?);
        }
        let mut e = Vec::new();
        for t in self.effects {
            e.extend(t.await?);
        }
        Ok((i, e))
    }
}

/// Waits until no event of the source is `prepared`, `processing` or `failed_retryable`
/// (every forward settled), up to `within`; `false` when some still are. `processing` counts:
/// a forward whose start is recorded may not have connected to the sink yet, and the sink's
/// [`FaultSink::hits`] only waits for connections it has accepted.
pub async fn wait_settled(addr: &str, within: Duration) -> anyhow::Result<bool> {
    let mut c = Conn::new(addr);
    let deadline = Instant::now() + within;
    loop {
        let mut pending = 0;
        for state in ["prepared", "processing", "failed_retryable"] {
            let path = format!("/v1/sources/{SOURCE}/events?state={state}&limit=1");
            let (status, v) = c
                .send("GET", &path, None)
                .await
                .context("list: no answer")?;
            anyhow::ensure!(status == 200, "GET {path}: {status} {v}");
            pending += v["items"].as_array().map_or(0, Vec::len);
        }
        if pending == 0 {
            return Ok(true);
        }
        if Instant::now() > deadline {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What [`check`] found. Every count under "violations" must be 0.
#[derive(Debug, Default, Serialize, Clone)]
pub struct OutboundVerdict {
    pub intake_posts: u64,
    pub intake_answers: BTreeMap<u16, u64>,
    /// Distinct events answered `accepted` or `duplicate`.
    pub intake_events: u64,
    pub delivered: u64,
    pub dead_lettered: u64,
    pub forwards_at_sink: u64,
    pub effect_calls: u64,
    pub effect_answers: BTreeMap<String, u64>,
    pub effect_keys: u64,
    pub effects_at_sink: u64,
    pub effects_in_review: u64,
    pub effects_completed: u64,
    pub treatments: BTreeMap<String, u64>,
    pub unanswered: u64,
    // Violations.
    pub intake_lost: u64,
    pub intake_unsettled: u64,
    pub delivered_without_ok: u64,
    pub dead_lettered_though_delivered: u64,
    pub forward_overlap: u64,
    pub forward_after_delivered: u64,
    pub effect_sent_twice: u64,
    pub effect_overlap: u64,
    pub ambiguous_not_in_review: u64,
    pub performed_without_ok: u64,
    pub completed_not_once: u64,
    pub bad_state: u64,
    pub violations: Vec<String>,
}

impl OutboundVerdict {
    pub fn ok(&self) -> bool {
        self.intake_lost == 0
            && self.intake_unsettled == 0
            && self.delivered_without_ok == 0
            && self.dead_lettered_though_delivered == 0
            && self.forward_overlap == 0
            && self.forward_after_delivered == 0
            && self.effect_sent_twice == 0
            && self.effect_overlap == 0
            && self.ambiguous_not_in_review == 0
            && self.performed_without_ok == 0
            && self.completed_not_once == 0
            && self.bad_state == 0
    }

    fn violation(&mut self, what: String) {
        if self.violations.len() < 20 {
            self.violations.push(what);
        }
    }
}

fn overlaps(hits: &[&Hit]) -> bool {
    let mut h: Vec<&&Hit> = hits.iter().collect();
    h.sort_by_key(|h| h.start);
    h.windows(2).any(|w| w[1].start < w[0].end)
}

fn tname(t: Treatment) -> String {
    serde_json::to_value(t)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// Checks what was recorded against the ledger of the server at `addr`.
pub async fn check(
    addr: &str,
    effects_ns: &str,
    rec: &Recorded,
) -> anyhow::Result<OutboundVerdict> {
    let mut v = OutboundVerdict::default();
    let mut conn = Conn::new(addr);
    let mut fwd: HashMap<&str, Vec<&Hit>> = HashMap::new();
    let mut fx: HashMap<&str, Vec<&Hit>> = HashMap::new();
    for h in &rec.hits {
        *v.treatments.entry(tname(h.treatment)).or_default() += 1;
        if h.forward {
            v.forwards_at_sink += 1;
            fwd.entry(&h.key).or_default().push(h);
        } else {
            v.effects_at_sink += 1;
            fx.entry(&h.key).or_default().push(h);
        }
    }

    // Intake.
    let mut acked: Vec<&str> = Vec::new();
    for e in &rec.intake {
        v.intake_posts += 1;
        match e.status {
            Some(s) => *v.intake_answers.entry(s).or_default() += 1,
            None => v.unanswered += 1,
        }
        if e.status == Some(200)
            && matches!(e.result.as_deref(), Some("accepted") | Some("duplicate"))
        {
            acked.push(&e.event_id);
        }
    }
    acked.sort_unstable();
    acked.dedup();
    v.intake_events = acked.len() as u64;
    for id in acked {
        let path = format!("/v1/sources/{SOURCE}/events/{id}");
        let (status, ev) = conn
            .send("GET", &path, None)
            .await
            .with_context(|| format!("GET {path}: no answer"))?;
        if status == 404 {
            v.intake_lost += 1;
            v.violation(format!("event {id}: acknowledged, not in the ledger"));
            continue;
        }
        anyhow::ensure!(status == 200, "GET {path}: {status} {ev}");
        let state = ev["record"]["state"].as_str().unwrap_or("");
        let hits = fwd.get(id).cloned().unwrap_or_default();
        if overlaps(&hits) {
            v.forward_overlap += 1;
            v.violation(format!("event {id}: two forwards at the sink at once"));
        }
        let mut sorted = hits.clone();
        sorted.sort_by_key(|h| h.start);
        if let Some(first_ok) = sorted.iter().position(|h| h.answered_ok) {
            if first_ok + 1 < sorted.len() {
                v.forward_after_delivered += 1;
                v.violation(format!(
                    "event {id}: {} forwards after the sink answered 200",
                    sorted.len() - first_ok - 1
                ));
            }
        }
        match state {
            "completed" => {
                v.delivered += 1;
                if !hits.iter().any(|h| h.answered_ok) {
                    v.delivered_without_ok += 1;
                    v.violation(format!(
                        "event {id}: completed, the sink never answered 200"
                    ));
                }
            }
            "needs_review" => {
                v.dead_lettered += 1;
                if hits.iter().any(|h| h.answered_ok) {
                    v.dead_lettered_though_delivered += 1;
                    v.violation(format!(
                        "event {id}: dead-lettered, the sink answered it 200"
                    ));
                }
            }
            "prepared" | "failed_retryable" => {
                v.intake_unsettled += 1;
                v.violation(format!("event {id}: still {state} after the sink healed"));
            }
            other => {
                v.bad_state += 1;
                v.violation(format!("event {id}: state {other:?}"));
            }
        }
    }

    // Effects.
    let mut by_key: HashMap<&str, Vec<&EffectEntry>> = HashMap::new();
    for e in &rec.effects {
        v.effect_calls += 1;
        let label = match (&e.outcome, e.status) {
            (Some(o), _) => o.clone(),
            (None, Some(s)) => format!("{s} {}", e.code.as_deref().unwrap_or("")),
            (None, None) => {
                v.unanswered += 1;
                "no answer".into()
            }
        };
        *v.effect_answers.entry(label).or_default() += 1;
        by_key.entry(&e.key).or_default().push(e);
    }
    let mut keys: Vec<&str> = by_key.keys().copied().collect();
    keys.sort_unstable();
    v.effect_keys = keys.len() as u64;
    for key in keys {
        let path = format!("/v1/namespaces/{effects_ns}/keys/{key}");
        let (status, r) = conn
            .send("GET", &path, None)
            .await
            .with_context(|| format!("GET {path}: no answer"))?;
        let hits = fx.get(key).cloned().unwrap_or_default();
        let state = if status == 404 {
            String::new()
        } else {
            anyhow::ensure!(status == 200, "GET {path}: {status} {r}");
            r["record"]["state"].as_str().unwrap_or("").to_owned()
        };
        let sends = hits
            .iter()
            .filter(|h| h.treatment != Treatment::Refuse503)
            .count();
        if sends > 1 {
            v.effect_sent_twice += 1;
            v.violation(format!(
                "effect {key}: {sends} sends not refused by the sink"
            ));
        }
        if overlaps(&hits) {
            v.effect_overlap += 1;
            v.violation(format!("effect {key}: two sends at the sink at once"));
        }
        let ambiguous = hits.iter().any(|h| {
            matches!(
                h.treatment,
                Treatment::Hang | Treatment::ResetAfterRead | Treatment::Error500
            ) || (matches!(h.treatment, Treatment::Ok | Treatment::Slow) && !h.answered_ok)
        });
        let said_review = by_key[key]
            .iter()
            .any(|e| e.outcome.as_deref() == Some("needs_review"));
        if (ambiguous || said_review) && state != "needs_review" {
            v.ambiguous_not_in_review += 1;
            v.violation(format!(
                "effect {key}: ambiguous send (answer needs_review: {said_review}), record {state:?}"
            ));
        }
        let oks = hits.iter().filter(|h| h.answered_ok).count();
        if by_key[key]
            .iter()
            .any(|e| e.outcome.as_deref() == Some("performed"))
            && oks == 0
        {
            v.performed_without_ok += 1;
            v.violation(format!(
                "effect {key}: answered performed, the sink answered no 200"
            ));
        }
        match state.as_str() {
            "completed" => {
                v.effects_completed += 1;
                if oks != 1 {
                    v.completed_not_once += 1;
                    v.violation(format!(
                        "effect {key}: completed, {oks} answers 200 at the sink"
                    ));
                }
            }
            "needs_review" => v.effects_in_review += 1,
            // The last send was refused (503) or never made it (reset at accept): the next
            // call resumes; or every call found the key busy or in backoff.
            "failed_retryable" | "" => {}
            other => {
                v.bad_state += 1;
                v.violation(format!("effect {key}: state {other:?}"));
            }
        }
    }
    Ok(v)
}
