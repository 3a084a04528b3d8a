//! The steps the drills are made of, written once: claim and check the outcome, do the
//! effect and complete, report a failure, a stale token refused with `lease_lost`. A [`Play`]
//! is one drill's run in its own namespace and collects what it saw.
//!
//! A step only acts on the drill's own namespace and key, and only touches the destination
//! where the story says a worker would; it must never decide whether a drill passed (that is
//! the story's checks and the report's effect count).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::{Answer, Api, Destination};

/// Lease used by the lease drills: short so that expiry is quick to wait for.
pub(crate) const SHORT_LEASE_MS: i64 = 300;
/// How long a drill waits for a short lease to be over.
pub(crate) const PAST_LEASE: Duration = Duration::from_millis(SHORT_LEASE_MS as u64 + 200);

/// What a drill saw; `problems` empty means PASS.
#[derive(Default)]
pub(crate) struct Seen {
    pub(crate) problems: Vec<String>,
}

impl Seen {
    pub(crate) fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            self.problems.push(what());
        }
    }
}

pub(crate) fn outcome(a: &Answer) -> &str {
    a.body["outcome"].as_str().unwrap_or("-")
}

pub(crate) fn token(a: &Answer) -> String {
    a.body["token"].as_str().unwrap_or_default().to_owned()
}

fn ms(v: &Value) -> Duration {
    Duration::from_millis(v.as_u64().unwrap_or(50).clamp(1, 5_000))
}

/// One drill's run: its namespace and key, the destination, the usual claim body and what it
/// saw. A step's `Err` is fatal to the drill (its message is reported).
pub(crate) struct Play<'a> {
    pub(crate) api: &'a Arc<dyn Api>,
    pub(crate) ns: String,
    pub(crate) key: &'static str,
    pub(crate) dest: Arc<Destination>,
    pub(crate) seen: Seen,
    /// The order the drills charge.
    pub(crate) payload: Value,
    /// The claim body of the drill's worker.
    pub(crate) body: Value,
}

impl<'a> Play<'a> {
    pub(crate) fn new(
        api: &'a Arc<dyn Api>,
        ns: String,
        key: &'static str,
        dest: Arc<Destination>,
    ) -> Play<'a> {
        let payload = json!({"order": 1001, "amount_cents": 4200, "currency": "EUR"});
        let body = json!({"payload": payload, "owner": "drill-worker-1"});
        Play {
            api,
            ns,
            key,
            dest,
            seen: Seen::default(),
            payload,
            body,
        }
    }

    pub(crate) fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        self.seen.check(ok, what);
    }

    /// A claim with `body`.
    pub(crate) async fn claim_with(&self, body: &Value) -> Result<Answer, String> {
        self.api
            .claim(&self.ns, self.key, body)
            .await
            .map_err(|e| format!("claim: {e}"))
    }

    /// A claim with the worker's usual body.
    pub(crate) async fn claim(&self) -> Result<Answer, String> {
        self.claim_with(&self.body).await
    }

    /// A claim that should answer `want` (`label: <outcome>` when it does not).
    pub(crate) async fn claim_expecting(
        &mut self,
        label: &str,
        want: &str,
    ) -> Result<Answer, String> {
        let a = self.claim().await?;
        self.check(outcome(&a) == want, || format!("{label}: {}", outcome(&a)));
        Ok(a)
    }

    /// A duplicate delivery that should answer `want`; should it acquire, its worker does the
    /// effect.
    pub(crate) async fn duplicate(&mut self, label: &str, want: &str) -> Result<Answer, String> {
        let b = self.claim().await?;
        self.effect_if_acquired(&b);
        self.check(outcome(&b) == want, || format!("{label}: {}", outcome(&b)));
        Ok(b)
    }

    /// Claims until acquired, honouring backoff (bounded).
    pub(crate) async fn claim_until_acquired(&self) -> Result<Answer, String> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let a = self.claim().await?;
            if outcome(&a) != "backoff" || Instant::now() > deadline {
                return Ok(a);
            }
            tokio::time::sleep(ms(&a.body["retry_after_ms"])).await;
        }
    }

    /// The worker that holds `a` does the effect (nothing when `a` did not acquire).
    pub(crate) fn effect_if_acquired(&self, a: &Answer) {
        if outcome(a) == "acquired" {
            self.dest.send();
        }
    }

    /// The worker that holds `a` does the effect and completes with `{"charge": charge}`
    /// (nothing when `a` did not acquire).
    pub(crate) async fn effect_and_complete(&self, a: &Answer, charge: &str) -> Result<(), String> {
        if outcome(a) == "acquired" {
            self.dest.send();
            self.complete(&token(a), json!({"charge": charge})).await?;
        }
        Ok(())
    }

    /// A completion with `tok` that must be accepted.
    pub(crate) async fn complete(&self, tok: &str, result: Value) -> Result<(), String> {
        self.api
            .complete(&self.ns, self.key, &json!({"token": tok, "result": result}))
            .await
            .map(drop)
            .map_err(|e| format!("complete: {e}"))
    }

    /// A worker write; answers the HTTP answer whatever its status.
    pub(crate) async fn write(&self, action: &str, body: Value) -> Result<Answer, String> {
        self.api
            .post_key(&self.ns, self.key, action, &body)
            .await
            .map_err(|e| format!("{action}: {e}"))
    }

    /// `a` must be the refusal of a stale token (409 `lease_lost`).
    pub(crate) fn lease_lost(&mut self, a: &Answer, label: &str) {
        self.check(a.status == 409 && a.body["code"] == "lease_lost", || {
            format!("{label}: {} {}", a.status, a.text)
        });
    }

    /// The worker stalls (or dies) past its short lease.
    pub(crate) async fn outlive_lease(&self) {
        tokio::time::sleep(PAST_LEASE).await;
    }
}
