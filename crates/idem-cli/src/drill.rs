//! `idem drill`: failure drills against a running idem.
//!
//! Each drill plays one failure story from the field (duplicate delivery, a timeout after the
//! destination committed, a worker dying with a lease, …) against the server, with a local
//! counter ([`Destination`]) standing in for the destination's side effects, and checks both
//! what the workers were told and how many effects happened.
//!
//! `zombie-after-reclaim` also listens on 127.0.0.1 for the one alert it expects (its
//! namespace's `alert_url` points there), so it passes only when the server can reach this
//! machine's loopback — the usual way of running drills, next to the server.
//!
//! Safety: a drill only ever uses a namespace it created for itself
//! (`PREFIX-<run id>-<drill>`); before using one it checks that the namespace has never held a
//! record, and it gives up on that drill otherwise. Drills never list, pause or patch anything
//! else.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;
use serde_json::{json, Value};

use crate::args::DrillCmd;
use crate::client::{Answer, ApiError, Client};
use crate::exit::{self, CliError};
use crate::table::render;

/// Lease used by the lease drills: short so that expiry is quick to wait for.
const SHORT_LEASE_MS: i64 = 300;
/// How long a drill waits for a short lease to be over.
const PAST_LEASE: Duration = Duration::from_millis(SHORT_LEASE_MS as u64 + 200);

/// The stand-in for the destination: counts side effects.
#[derive(Debug, Default)]
pub struct Destination(AtomicU64);

impl Destination {
    /// Performs the irreversible side effect (charge, e-mail, …).
    pub fn send(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
    pub fn effects(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// One drill's result.
#[derive(Debug, Clone, Serialize)]
pub struct DrillReport {
    pub drill: &'static str,
    pub namespace: String,
    pub expectation: &'static str,
    pub expected_effects: u64,
    pub effects: u64,
    /// The record's state after the drill (from GET), or `-`.
    pub state: String,
    pub pass: bool,
    /// What went wrong (empty on PASS).
    pub detail: String,
}

struct Spec {
    name: &'static str,
    expectation: &'static str,
    expected_effects: u64,
}

const DRILLS: [Spec; 12] = [
    Spec {
        name: "same-payload-twice",
        expectation: "2nd delivery replays `completed`",
        expected_effects: 1,
    },
    Spec {
        name: "concurrent-duplicates",
        expectation: "50 concurrent claims: exactly 1 acquired",
        expected_effects: 1,
    },
    Spec {
        name: "timeout-after-commit",
        expectation: "timeout after commit → needs_review, no retry",
        expected_effects: 1,
    },
    Spec {
        name: "failure-before-write",
        expectation: "sent:false → retry → completed on attempt 2",
        expected_effects: 1,
    },
    Spec {
        name: "lease-holder-dies-reclaim",
        expectation: "reclaim: attempt 2 resumes, old token fenced",
        expected_effects: 1,
    },
    Spec {
        name: "lease-holder-dies-review",
        expectation: "review: expired lease → needs_review",
        expected_effects: 0,
    },
    Spec {
        name: "different-payload",
        expectation: "same key, other payload → conflict",
        expected_effects: 1,
    },
    Spec {
        name: "stale-token-after-reclaim",
        expectation: "slow worker after reclaim → lease_lost",
        expected_effects: 1,
    },
    Spec {
        name: "retry-budget-exhausted",
        expectation: "3 retryable failures → needs_review",
        expected_effects: 0,
    },
    Spec {
        name: "paused-namespace",
        expectation: "paused → 503 paused; resume → runs once",
        expected_effects: 1,
    },
    Spec {
        name: "replay-old-execution",
        expectation: "old execution re-run replays, 0 new effects",
        expected_effects: 1,
    },
    Spec {
        name: "zombie-after-reclaim",
        expectation: "worker completes after reclaim → 1 completion kept, fenced_completion alerted + counted",
        // The zombie's effect happened outside: idem cannot undo it, only make it seen.
        expected_effects: 2,
    },
];

/// How long the zombie drill waits for its alert (the server's alert sender runs every
/// `alert_interval`, 2 s by default).
const ALERT_WAIT: Duration = Duration::from_secs(15);

/// A one-request-at-a-time HTTP receiver on 127.0.0.1 that keeps the bodies it is sent and
/// answers 204: the alert endpoint of the zombie drill.
struct AlertSink {
    url: String,
    bodies: tokio::sync::mpsc::UnboundedReceiver<Value>,
    task: tokio::task::JoinHandle<()>,
}

impl AlertSink {
    async fn start() -> Result<AlertSink, String> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| format!("alert listener: {e}"))?;
        let addr = listener
            .local_addr()
            .map_err(|e| format!("alert listener: {e}"))?;
        let (tx, bodies) = tokio::sync::mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                if let Some(body) = read_request_body(&mut conn).await {
                    let _ = tx.send(body);
                }
                use tokio::io::AsyncWriteExt;
                let _ = conn
                    .write_all(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    .await;
            }
        });
        Ok(AlertSink {
            url: format!("http://{addr}/idem-drill-alerts"),
            bodies,
            task,
        })
    }

    /// The first alert body with `reason`, waiting up to `wait`.
    async fn wait_for(&mut self, reason: &str, wait: Duration) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            match tokio::time::timeout_at(deadline, self.bodies.recv()).await {
                Ok(Some(b)) if b["reason"] == reason => return Some(b),
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => return None,
            }
        }
    }
}

impl Drop for AlertSink {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads one HTTP/1.1 request with a `content-length` body (at most 64 KiB) as JSON.
async fn read_request_body(conn: &mut tokio::net::TcpStream) -> Option<Value> {
    use tokio::io::AsyncReadExt;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let read = async {
        loop {
            let n = conn.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            buf.extend_from_slice(&chunk[..n]);
            if buf.len() > 65_536 {
                return None;
            }
            let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                continue;
            };
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if buf.len() >= end + 4 + len {
                return serde_json::from_slice(&buf[end + 4..end + 4 + len]).ok();
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .ok()
        .flatten()
}

/// `idem_fenced_completions_total` as the server's `/metrics` shows it now.
async fn fenced_completions(client: &Client) -> Option<f64> {
    let text = client.get_text(client.url(&["metrics"])).await.ok()?;
    text.lines().find_map(|l| {
        l.strip_prefix("idem_fenced_completions_total ")
            .and_then(|v| v.trim().parse().ok())
    })
}

/// What a drill saw; `problems` empty means PASS.
#[derive(Default)]
struct Seen {
    problems: Vec<String>,
}

impl Seen {
    fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            self.problems.push(what());
        }
    }
}

/// The drills' view of the server.
struct Drills {
    client: Client,
    prefix: String,
    run_id: String,
}

fn outcome(a: &Answer) -> &str {
    a.body["outcome"].as_str().unwrap_or("-")
}

fn token(a: &Answer) -> String {
    a.body["token"].as_str().unwrap_or_default().to_owned()
}

fn ms(v: &Value) -> Duration {
    Duration::from_millis(v.as_u64().unwrap_or(50).clamp(1, 5_000))
}

impl Drills {
    /// Creates this drill's namespace (refusing one that was ever used) with `policy`.
    async fn namespace(&self, name: &str, policy: Value) -> Result<String, String> {
        let ns = format!("{}-{}-{name}", self.prefix, self.run_id);
        let info = self
            .client
            .namespace(&ns)
            .await
            .map_err(|e| e.to_string())?;
        let used: u64 = info.body["counts"]
            .as_object()
            .map(|m| m.values().filter_map(Value::as_u64).sum())
            .unwrap_or(0);
        if used > 0 || info.body["paused"].as_bool() == Some(true) {
            return Err(format!(
                "namespace {ns} already exists; not touching it (pick another --ns prefix)"
            ));
        }
        if policy.as_object().is_some_and(|o| !o.is_empty()) {
            self.client
                .patch_namespace(&ns, &policy)
                .await
                .map_err(|e| format!("PATCH {ns}: {e}"))?;
        }
        Ok(ns)
    }

    async fn claim(&self, ns: &str, key: &str, body: Value) -> Result<Answer, String> {
        self.client
            .claim(ns, key, &body)
            .await
            .map_err(|e| format!("claim: {e}"))
    }

    /// A worker write; answers the HTTP answer whatever its status.
    async fn write(
        &self,
        ns: &str,
        key: &str,
        action: &str,
        body: Value,
    ) -> Result<Answer, String> {
        self.client
            .post(self.client.key_url(ns, key, Some(action)), &body)
            .await
            .map_err(|e| format!("{action}: {e}"))
    }

    async fn complete(&self, ns: &str, key: &str, tok: &str, result: Value) -> Result<(), String> {
        let a = self
            .write(ns, key, "complete", json!({"token": tok, "result": result}))
            .await?;
        if a.is_success() {
            Ok(())
        } else {
            Err(format!("complete: {}", a.problem()))
        }
    }

    async fn state(&self, ns: &str, key: &str) -> String {
        match self.client.get(self.client.key_url(ns, key, None)).await {
            Ok(a) if a.is_success() => a.body["record"]["state"].as_str().unwrap_or("-").to_owned(),
            Ok(a) => format!("({})", a.status),
            Err(_) => "-".into(),
        }
    }

    /// Claims until acquired, honouring backoff (bounded).
    async fn claim_until_acquired(
        &self,
        ns: &str,
        key: &str,
        body: Value,
    ) -> Result<Answer, String> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let a = self.claim(ns, key, body.clone()).await?;
            if outcome(&a) != "backoff" || Instant::now() > deadline {
                return Ok(a);
            }
            tokio::time::sleep(ms(&a.body["retry_after_ms"])).await;
        }
    }

    async fn run_one(&self, spec: &Spec) -> DrillReport {
        let dest = Arc::new(Destination::default());
        let key = "order-1001:charge";
        let mut seen = Seen::default();
        let ns = match self.drill(spec.name, key, &dest, &mut seen).await {
            Ok(ns) => ns,
            Err((ns, e)) => {
                seen.problems.push(e);
                ns
            }
        };
        let state = if ns.is_empty() {
            "-".into()
        } else {
            self.state(&ns, key).await
        };
        let effects = dest.effects();
        seen.check(effects == spec.expected_effects, || {
            format!("{effects} side effects, expected {}", spec.expected_effects)
        });
        DrillReport {
            drill: spec.name,
            namespace: ns,
            expectation: spec.expectation,
            expected_effects: spec.expected_effects,
            effects,
            state,
            pass: seen.problems.is_empty(),
            detail: seen.problems.join("; "),
        }
    }

    /// Runs one drill; answers its namespace (or the namespace and a fatal error).
    async fn drill(
        &self,
        name: &str,
        key: &str,
        dest: &Arc<Destination>,
        seen: &mut Seen,
    ) -> Result<String, (String, String)> {
        let fast_retry = json!({"retry": {"base_ms": 10, "max_ms": 50}});
        let policy = match name {
            "lease-holder-dies-reclaim" | "stale-token-after-reclaim" => {
                json!({"lease_ms": SHORT_LEASE_MS, "lease_expiry": "reclaim"})
            }
            "zombie-after-reclaim" => {
                json!({"lease_ms": SHORT_LEASE_MS, "lease_expiry": "reclaim"})
            }
            "lease-holder-dies-review" => {
                json!({"lease_ms": SHORT_LEASE_MS, "lease_expiry": "review"})
            }
            "failure-before-write" => fast_retry,
            "retry-budget-exhausted" => {
                json!({"retry": {"max_attempts": 3, "base_ms": 10, "max_ms": 20}})
            }
            _ => json!({}),
        };
        let ns = self
            .namespace(name, policy)
            .await
            .map_err(|e| (String::new(), e))?;
        let fatal = |e: String| (ns.clone(), e);
        let payload = json!({"order": 1001, "amount_cents": 4200, "currency": "EUR"});
        let claim_body = json!({"payload": payload, "owner": "drill-worker-1"});

        match name {
            "same-payload-twice" => {
                let a = self
                    .claim(&ns, key, claim_body.clone())
                    .await
                    .map_err(fatal)?;
                seen.check(outcome(&a) == "acquired", || {
                    format!("1st claim: {}", outcome(&a))
                });
                if outcome(&a) == "acquired" {
                    dest.send();
                    self.complete(&ns, key, &token(&a), json!({"charge": "ch_1"}))
                        .await
                        .map_err(fatal)?;
                }
                let b = self.claim(&ns, key, claim_body).await.map_err(fatal)?;
                if outcome(&b) == "acquired" {
                    dest.send();
                }
                seen.check(outcome(&b) == "completed" && b.replayed, || {
                    format!("2nd claim: {} (replayed: {})", outcome(&b), b.replayed)
                });
                seen.check(
                    b.body["record"]["result"] == json!({"charge": "ch_1"}),
                    || "2nd claim did not replay the stored result".into(),
                );
            }
            "concurrent-duplicates" => {
                let mut tasks = Vec::new();
                for i in 0..50 {
                    let client = self.client.clone();
                    let ns = ns.clone();
                    let dest = dest.clone();
                    let key = key.to_owned();
                    let body = json!({"payload": payload, "owner": format!("delivery-{i}")});
                    tasks.push(tokio::spawn(async move {
                        let key = key.as_str();
                        let a = client.claim(&ns, key, &body).await?;
                        let o = outcome(&a).to_owned();
                        if o == "acquired" {
                            dest.send();
                            let body = json!({"token": token(&a), "result": {"charge": "ch_1"}});
                            client.key_action(&ns, key, "complete", &body).await?;
                        }
                        Ok::<String, ApiError>(o)
                    }));
                }
                let mut acquired = 0;
                for t in tasks {
                    match t.await {
                        Ok(Ok(o)) if o == "acquired" => acquired += 1,
                        Ok(Ok(o)) => seen.check(o == "in_flight" || o == "completed", || {
                            format!("a duplicate got {o}")
                        }),
                        Ok(Err(e)) => seen.problems.push(e.to_string()),
                        Err(e) => seen.problems.push(format!("task: {e}")),
                    }
                }
                seen.check(acquired == 1, || format!("{acquired} claims acquired"));
            }
            "timeout-after-commit" => {
                let a = self
                    .claim(&ns, key, claim_body.clone())
                    .await
                    .map_err(fatal)?;
                seen.check(outcome(&a) == "acquired", || {
                    format!("claim: {}", outcome(&a))
                });
                dest.send(); // the destination commits, but its answer never arrives
                let f = self
                    .write(
                        &ns,
                        key,
                        "fail",
                        json!({
                            "token": token(&a),
                            "error": {"category": "timeout", "message": "read timed out after 30s"},
                        }),
                    )
                    .await
                    .map_err(fatal)?;
                seen.check(f.body["state"] == "needs_review", || {
                    format!("fail answered {}", f.text)
                });
                let b = self.claim(&ns, key, claim_body).await.map_err(fatal)?;
                if outcome(&b) == "acquired" {
                    dest.send();
                }
                seen.check(outcome(&b) == "needs_review", || {
                    format!("retry claim: {}", outcome(&b))
                });
            }
            "failure-before-write" => {
                let a = self
                    .claim(&ns, key, claim_body.clone())
                    .await
                    .map_err(fatal)?;
                seen.check(outcome(&a) == "acquired", || {
                    format!("claim: {}", outcome(&a))
                });
                let f = self
                    .write(
                        &ns,
                        key,
                        "fail",
                        json!({
                            "token": token(&a),
                            "sent": false,
                            "error": {"category": "connection", "message": "connection refused"},
                        }),
                    )
                    .await
                    .map_err(fatal)?;
                seen.check(
                    f.body["state"] == "failed_retryable" && f.body["retry"]["allowed"] == true,
                    || format!("fail answered {}", f.text),
                );
                let b = self
                    .claim_until_acquired(&ns, key, claim_body)
                    .await
                    .map_err(fatal)?;
                seen.check(
                    outcome(&b) == "acquired" && b.body["record"]["attempt"] == 2,
                    || {
                        format!(
                            "retry claim: {} attempt {}",
                            outcome(&b),
                            b.body["record"]["attempt"]
                        )
                    },
                );
                if outcome(&b) == "acquired" {
                    dest.send();
                    self.complete(&ns, key, &token(&b), json!({"charge": "ch_1"}))
                        .await
                        .map_err(fatal)?;
                }
            }
            "lease-holder-dies-reclaim" => {
                let a = self
                    .claim(&ns, key, claim_body.clone())
                    .await
                    .map_err(fatal)?;
                seen.check(outcome(&a) == "acquired", || {
                    format!("claim: {}", outcome(&a))
                });
                // The worker dies before doing anything; its lease runs out.
                tokio::time::sleep(PAST_LEASE).await;
                let b = self.claim(&ns, key, claim_body).await.map_err(fatal)?;
                seen.check(
                    outcome(&b) == "acquired"
                        && b.body["resumed"] == true
                        && b.body["record"]["attempt"] == 2,
                    || format!("reclaim: {} {}", outcome(&b), b.body["record"]["attempt"]),
                );
                if outcome(&b) == "acquired" {
                    dest.send();
                    self.complete(&ns, key, &token(&b), json!({"charge": "ch_1"}))
                        .await
                        .map_err(fatal)?;
                }
                let stale = self
                    .write(
                        &ns,
                        key,
                        "complete",
                        json!({"token": token(&a), "result": {}}),
                    )
                    .await
                    .map_err(fatal)?;
                seen.check(
                    stale.status == 409 && stale.body["code"] == "lease_lost",
                    || format!("stale token's complete: {} {}", stale.status, stale.text),
                );
            }
            "lease-holder-dies-review" => {
                let a = self
                    .claim(&ns, key, claim_body.clone())
                    .await
                    .map_err(fatal)?;
                seen.check(outcome(&a) == "acquired", || {
                    format!("claim: {}", outcome(&a))
                });
                tokio::time::sleep(PAST_LEASE).await;
                let b = self.claim(&ns, key, claim_body).await.map_err(fatal)?;
                if outcome(&b) == "acquired" {
                    dest.send();
                }
                seen.check(outcome(&b) == "needs_review", || {
                    format!("claim after expiry: {}", outcome(&b))
                });
            }
            "different-payload" => {
                let a = self.claim(&ns, key, claim_body).await.map_err(fatal)?;
                if outcome(&a) == "acquired" {
                    dest.send();
                    self.complete(&ns, key, &token(&a), json!({"charge": "ch_1"}))
                        .await
                        .map_err(fatal)?;
                }
                let other =
                    json!({"payload": {"order": 1001, "amount_cents": 9900, "currency": "EUR"}});
                let b = self.claim(&ns, key, other).await.map_err(fatal)?;
                if outcome(&b) == "acquired" {
                    dest.send();
                }
                seen.check(outcome(&b) == "conflict" && b.status == 422, || {
                    format!("other payload: {} ({})", outcome(&b), b.status)
                });
            }
            "stale-token-after-reclaim" => {
                let slow = self
                    .claim(&ns, key, claim_body.clone())
                    .await
                    .map_err(fatal)?;
                seen.check(outcome(&slow) == "acquired", || {
                    format!("claim: {}", outcome(&slow))
                });
                // The slow worker stalls (GC pause, network partition) past its lease…
                tokio::time::sleep(PAST_LEASE).await;
                let b = self.claim(&ns, key, claim_body).await.map_err(fatal)?;
                seen.check(outcome(&b) == "acquired", || {
                    format!("reclaim: {}", outcome(&b))
                });
                if outcome(&b) == "acquired" {
                    dest.send();
                    self.complete(&ns, key, &token(&b), json!({"charge": "ch_2"}))
                        .await
                        .map_err(fatal)?;
                }
                // …then wakes up and checks its lease before the effect, as workers should.
                let hb = self
                    .write(&ns, key, "heartbeat", json!({"token": token(&slow)}))
                    .await
                    .map_err(fatal)?;
                if hb.is_success() {
                    dest.send();
                }
                seen.check(hb.status == 409 && hb.body["code"] == "lease_lost", || {
                    format!("stale heartbeat: {} {}", hb.status, hb.text)
                });
                let c = self
                    .write(
                        &ns,
                        key,
                        "complete",
                        json!({"token": token(&slow), "result": {"charge": "ch_1"}}),
                    )
                    .await
                    .map_err(fatal)?;
                seen.check(c.status == 409 && c.body["code"] == "lease_lost", || {
                    format!("stale complete: {} {}", c.status, c.text)
                });
            }
            "retry-budget-exhausted" => {
                let mut attempts = 0;
                let mut last = String::new();
                for _ in 0..6 {
                    let a = self
                        .claim_until_acquired(&ns, key, claim_body.clone())
                        .await
                        .map_err(fatal)?;
                    last = outcome(&a).to_owned();
                    if last != "acquired" {
                        break;
                    }
                    attempts += 1;
                    // The destination answers 503: nothing happened, try later.
                    let f = self
                        .write(
                            &ns,
                            key,
                            "fail",
                            json!({
                                "token": token(&a),
                                "http_status": 503,
                                "error": {"category": "http", "message": "service unavailable"},
                            }),
                        )
                        .await
                        .map_err(fatal)?;
                    if f.body["retry"]["allowed"] == false {
                        last = f.body["state"].as_str().unwrap_or("-").to_owned();
                        break;
                    }
                }
                seen.check(attempts == 3, || {
                    format!("{attempts} attempts ran, expected 3")
                });
                seen.check(last == "needs_review", || format!("ended in {last}"));
                let b = self.claim(&ns, key, claim_body).await.map_err(fatal)?;
                seen.check(outcome(&b) == "needs_review", || {
                    format!("claim after budget: {}", outcome(&b))
                });
            }
            "paused-namespace" => {
                self.client
                    .switch_namespace(&ns, "pause")
                    .await
                    .map_err(|e| fatal(format!("pause: {e}")))?;
                let a = self
                    .claim(&ns, key, claim_body.clone())
                    .await
                    .map_err(fatal)?;
                if outcome(&a) == "acquired" {
                    dest.send();
                }
                seen.check(outcome(&a) == "paused" && a.status == 503, || {
                    format!("claim while paused: {} ({})", outcome(&a), a.status)
                });
                self.client
                    .switch_namespace(&ns, "resume")
                    .await
                    .map_err(|e| fatal(format!("resume: {e}")))?;
                let b = self.claim(&ns, key, claim_body).await.map_err(fatal)?;
                seen.check(outcome(&b) == "acquired", || {
                    format!("claim after resume: {}", outcome(&b))
                });
                if outcome(&b) == "acquired" {
                    dest.send();
                    self.complete(&ns, key, &token(&b), json!({"charge": "ch_1"}))
                        .await
                        .map_err(fatal)?;
                }
            }
            "replay-old-execution" => {
                let body = json!({"payload": payload, "owner": "exec-41"});
                let a = self.claim(&ns, key, body.clone()).await.map_err(fatal)?;
                if outcome(&a) == "acquired" {
                    dest.send();
                    let c = self
                        .write(&ns, key, "complete", json!({
                            "token": token(&a), "result": {"charge": "ch_1"}, "external_ref": "ch_1",
                        }))
                        .await
                        .map_err(fatal)?;
                    seen.check(c.is_success(), || format!("complete: {}", c.text));
                }
                let before = dest.effects();
                // Days later someone re-runs execution 41 from the n8n history.
                let b = self.claim(&ns, key, body).await.map_err(fatal)?;
                if outcome(&b) == "acquired" {
                    dest.send();
                }
                seen.check(
                    outcome(&b) == "completed"
                        && b.replayed
                        && b.body["record"]["external_ref"] == "ch_1",
                    || {
                        format!(
                            "replay: {} (replayed: {}) {}",
                            outcome(&b),
                            b.replayed,
                            b.text
                        )
                    },
                );
                seen.check(dest.effects() == before, || {
                    "the replay caused an effect".into()
                });
            }
            "zombie-after-reclaim" => {
                let mut sink = AlertSink::start().await.map_err(fatal)?;
                self.client
                    .patch_namespace(&ns, &json!({"alert_url": sink.url}))
                    .await
                    .map_err(|e| fatal(format!("PATCH alert_url: {e}")))?;
                let counted_before = fenced_completions(&self.client).await;
                let zombie = self
                    .claim(&ns, key, claim_body.clone())
                    .await
                    .map_err(fatal)?;
                seen.check(outcome(&zombie) == "acquired", || {
                    format!("claim: {}", outcome(&zombie))
                });
                // The worker stalls past its lease (a long model call, a GC pause)…
                tokio::time::sleep(PAST_LEASE).await;
                let b = self.claim(&ns, key, claim_body).await.map_err(fatal)?;
                seen.check(
                    outcome(&b) == "acquired" && b.body["resumed"] == true,
                    || format!("reclaim: {}", outcome(&b)),
                );
                if outcome(&b) == "acquired" {
                    dest.send();
                    let c = self
                        .write(&ns, key, "complete", json!({
                            "token": token(&b), "result": {"charge": "ch_2"}, "external_ref": "ch_2",
                        }))
                        .await
                        .map_err(fatal)?;
                    seen.check(c.is_success(), || format!("complete: {}", c.text));
                }
                // …then wakes up and does its effect without checking its lease first: the
                // outside world now has it twice. It reports it, with what it spent.
                dest.send();
                let z = self
                    .write(
                        &ns,
                        key,
                        "complete",
                        json!({
                            "token": token(&zombie), "result": {"charge": "ch_1"},
                            "external_ref": "ch_1", "cost": {"tokens": 350, "usd": 0.004},
                        }),
                    )
                    .await
                    .map_err(fatal)?;
                seen.check(z.status == 409 && z.body["code"] == "lease_lost", || {
                    format!("zombie complete: {} {}", z.status, z.text)
                });
                // The ledger keeps one completion, and its history shows the fenced one.
                let got = self
                    .client
                    .get(self.client.key_url(&ns, key, None))
                    .await
                    .map_err(|e| fatal(e.to_string()))?;
                let rec = &got.body["record"];
                seen.check(
                    rec["state"] == "completed" && rec["external_ref"] == "ch_2",
                    || format!("record: {} {}", rec["state"], rec["external_ref"]),
                );
                let events = got.body["events"].as_array().cloned().unwrap_or_default();
                let completions = events.iter().filter(|e| e["type"] == "completed").count();
                seen.check(completions == 1, || {
                    format!("{completions} completions recorded")
                });
                let fenced = events.iter().any(|e| {
                    e["type"] == "lease_lost"
                        && e["note"]
                            .as_str()
                            .is_some_and(|n| n.starts_with("fenced_completion"))
                        && e["cost"]["tokens"] == 350
                });
                seen.check(fenced, || {
                    "no lease_lost event noted fenced_completion with the zombie's cost".into()
                });
                seen.check(rec["cost"]["tokens"] == 350, || {
                    format!("record cost: {}", rec["cost"])
                });
                // Counted…
                let counted_after = fenced_completions(&self.client).await;
                match (counted_before, counted_after) {
                    (Some(a), Some(b)) => seen.check(b >= a + 1.0, || {
                        format!("idem_fenced_completions_total went from {a} to {b}")
                    }),
                    _ => seen
                        .problems
                        .push("idem_fenced_completions_total not found in /metrics".into()),
                }
                // …and alerted (masked, like every alert).
                match sink.wait_for("fenced_completion", ALERT_WAIT).await {
                    Some(alert) => {
                        seen.check(alert["namespace"] == ns.as_str(), || {
                            format!("alert for {}", alert["namespace"])
                        });
                        seen.check(!alert.to_string().contains(key), || {
                            "the alert carries the key unmasked".into()
                        });
                    }
                    None => seen.problems.push(format!(
                        "no fenced_completion alert reached {} within {}s",
                        sink.url,
                        ALERT_WAIT.as_secs()
                    )),
                }
            }
            other => return Err((ns, format!("unknown drill {other}"))),
        }
        Ok(ns)
    }
}

pub async fn run(cmd: DrillCmd) -> Result<u8, CliError> {
    let client = Client::new(&cmd.url, cmd.token.clone())?;
    // Fail fast (exit 21) when nothing listens there.
    client.get(client.url(&["healthz"])).await?;
    let run_id = format!("{:08x}", rand::random::<u32>());
    let drills = Drills {
        client,
        prefix: cmd.ns.clone(),
        run_id,
    };
    let specs: Vec<&Spec> = DRILLS
        .iter()
        .filter(|s| cmd.only.as_deref().is_none_or(|o| s.name.contains(o)))
        .collect();
    if specs.is_empty() {
        return Err(CliError::input("--only matches no drill"));
    }
    let bar = ProgressBar::with_draw_target(Some(specs.len() as u64), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template("{spinner} drill {pos}/{len} {wide_msg}") {
        bar.set_style(style);
    }
    bar.enable_steady_tick(Duration::from_millis(100));
    let started = Instant::now();
    let mut reports = Vec::new();
    for spec in specs {
        bar.set_message(spec.name);
        let r = drills.run_one(spec).await;
        bar.inc(1);
        reports.push(r);
    }
    bar.finish_and_clear();
    let passed = reports.iter().all(|r| r.pass);
    if cmd.json {
        let out = json!({
            "passed": passed,
            "run_id": drills.run_id,
            "elapsed_ms": started.elapsed().as_millis() as u64,
            "drills": reports,
        });
        println!("{out}");
    } else {
        let rows: Vec<Vec<String>> = reports
            .iter()
            .map(|r| {
                vec![
                    r.drill.to_owned(),
                    r.expectation.to_owned(),
                    format!("{} (want {})", r.effects, r.expected_effects),
                    r.state.clone(),
                    if r.pass { "PASS" } else { "FAIL" }.to_owned(),
                ]
            })
            .collect();
        print!(
            "{}",
            render(
                &[
                    "DRILL",
                    "EXPECTATION",
                    "SIDE EFFECTS",
                    "LEDGER STATE",
                    "RESULT"
                ],
                &rows
            )
        );
        for r in reports.iter().filter(|r| !r.pass) {
            println!("FAIL {} ({}): {}", r.drill, r.namespace, r.detail);
        }
        let n_pass = reports.iter().filter(|r| r.pass).count();
        println!(
            "{n_pass}/{} drills passed in {:.1}s (namespaces {}-{}-*)",
            reports.len(),
            started.elapsed().as_secs_f64(),
            drills.prefix,
            drills.run_id
        );
    }
    Ok(if passed { exit::OK } else { exit::ERROR })
}
