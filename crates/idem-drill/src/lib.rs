//! Failure drills against a running idem: the engine behind `idem drill`.
//!
//! Each drill plays one failure story from the field (duplicate delivery, a timeout after the
//! destination committed, a worker dying with a lease, …) against the server, with a local
//! counter ([`Destination`]) standing in for the destination's side effects, and checks both
//! what the workers were told and how many effects happened. The stories are one table
//! ([`DRILLS`]: name, expectation, expected effects, the namespace policy, the story); the
//! steps they share (claim and check the outcome, do the effect and complete, a stale token
//! refused) are written once ([`play`]).
//!
//! `zombie-after-reclaim` also listens on 127.0.0.1 for the one alert it expects (its
//! namespace's `alert_url` points there), so it passes only when the server can reach this
//! machine's loopback — the usual way of running drills, next to the server.
//!
//! Safety: a drill only ever uses a namespace it created for itself
//! (`PREFIX-<run id>-<drill>`); before using one it checks that the namespace has never held a
//! record, and it gives up on that drill otherwise. Drills never list, pause or patch anything
//! else.
//!
//! The engine reaches the server only through [`Api`], which the caller implements with its
//! HTTP client; it prints nothing (the caller renders the [`DrillReport`]s).

mod alert;
mod play;
mod scenarios;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use serde::Serialize;
use serde_json::Value;

use play::{Play, Seen};
pub use scenarios::{Drill, DRILLS};

/// One HTTP answer: status, the `Idempotent-Replayed` header, the body as text and JSON.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub replayed: bool,
    pub text: String,
    pub body: Value,
}

impl Answer {
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// What an [`Api`] call answers: the answer, or the message to report.
pub type Reply<T = Answer> = Result<T, String>;

/// The calls the drills make to the idem v1 API. An error is the message to report (it must
/// never carry the bearer token).
#[async_trait]
pub trait Api: Send + Sync {
    /// `POST …/keys/{key}/claim`: an answer without an `outcome` is an error.
    async fn claim(&self, ns: &str, key: &str, body: &Value) -> Reply;
    /// `POST …/keys/{key}/{action}`, whatever the status.
    async fn post_key(&self, ns: &str, key: &str, action: &str, body: &Value) -> Reply;
    /// `POST …/keys/{key}/complete`; an answer that is not 2xx is an error (its problem).
    async fn complete(&self, ns: &str, key: &str, body: &Value) -> Reply;
    /// `GET …/keys/{key}`, whatever the status.
    async fn get_key(&self, ns: &str, key: &str) -> Reply;
    /// `GET /v1/namespaces/{ns}` (2xx required).
    async fn namespace(&self, ns: &str) -> Reply;
    /// `PATCH /v1/namespaces/{ns}` (2xx required).
    async fn patch_namespace(&self, ns: &str, patch: &Value) -> Reply;
    /// `POST /v1/namespaces/{ns}/pause` or `/resume` (2xx required).
    async fn switch_namespace(&self, ns: &str, action: &str) -> Reply;
    /// The text of `GET /metrics` (2xx required).
    async fn metrics(&self) -> Reply<String>;
}

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

/// The drills whose name contains `only` (all of them without it), in table order.
pub fn select(only: Option<&str>) -> Vec<&'static Drill> {
    DRILLS
        .iter()
        .filter(|d| only.is_none_or(|o| d.name.contains(o)))
        .collect()
}

/// The key every drill plays on, in its own namespace.
const KEY: &str = "order-1001:charge";

/// The drills' view of one server, for one run.
pub struct Drills {
    api: Arc<dyn Api>,
    prefix: String,
    run_id: String,
}

impl Drills {
    /// Drills through `api` in namespaces `PREFIX-<run_id>-<drill>`.
    pub fn new(api: Arc<dyn Api>, prefix: impl Into<String>, run_id: impl Into<String>) -> Drills {
        Drills {
            api,
            prefix: prefix.into(),
            run_id: run_id.into(),
        }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// Plays `drill` in a fresh namespace of its own and reports what happened.
    pub async fn run_one(&self, drill: &Drill) -> DrillReport {
        let dest = Arc::new(Destination::default());
        let mut seen = Seen::default();
        let ns = match self.namespace(drill.name, drill.policy.json()).await {
            Ok(ns) => {
                let mut play = Play::new(&self.api, ns.clone(), KEY, dest.clone());
                if let Err(e) = drill.story.play(&mut play).await {
                    play.seen.problems.push(e);
                }
                seen = play.seen;
                ns
            }
            Err(e) => {
                seen.problems.push(e);
                String::new()
            }
        };
        let state = if ns.is_empty() {
            "-".into()
        } else {
            self.state(&ns, KEY).await
        };
        let effects = dest.effects();
        seen.check(effects == drill.expected_effects, || {
            format!(
                "{effects} side effects, expected {}",
                drill.expected_effects
            )
        });
        DrillReport {
            drill: drill.name,
            namespace: ns,
            expectation: drill.expectation,
            expected_effects: drill.expected_effects,
            effects,
            state,
            pass: seen.problems.is_empty(),
            detail: seen.problems.join("; "),
        }
    }

    /// Creates this drill's namespace (refusing one that was ever used) with `policy`.
    async fn namespace(&self, name: &str, policy: Value) -> Result<String, String> {
        let ns = format!("{}-{}-{name}", self.prefix, self.run_id);
        let info = self.api.namespace(&ns).await?;
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
            self.api
                .patch_namespace(&ns, &policy)
                .await
                .map_err(|e| format!("PATCH {ns}: {e}"))?;
        }
        Ok(ns)
    }

    /// The record's state as GET shows it, `(status)` for an error answer, `-` without one.
    async fn state(&self, ns: &str, key: &str) -> String {
        match self.api.get_key(ns, key).await {
            Ok(a) if a.is_success() => a.body["record"]["state"].as_str().unwrap_or("-").to_owned(),
            Ok(a) => format!("({})", a.status),
            Err(_) => "-".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::{select, DRILLS};

    #[test]
    fn names_are_unique_and_only_filters_by_substring() {
        let names: HashSet<_> = DRILLS.iter().map(|d| d.name).collect();
        assert_eq!(names.len(), DRILLS.len());
        assert_eq!(select(None).len(), 12);
        let lease: Vec<_> = select(Some("lease-holder"))
            .iter()
            .map(|d| d.name)
            .collect();
        assert_eq!(
            lease,
            ["lease-holder-dies-reclaim", "lease-holder-dies-review"]
        );
        assert!(select(Some("no such drill")).is_empty());
    }

    #[test]
    fn policies_patch_only_what_the_story_needs() {
        let policy = |name: &str| {
            let d = DRILLS.iter().find(|d| d.name == name).expect("drill");
            d.policy.json()
        };
        assert_eq!(policy("same-payload-twice"), serde_json::json!({}));
        assert_eq!(
            policy("zombie-after-reclaim"),
            serde_json::json!({"lease_ms": 300, "lease_expiry": "reclaim"})
        );
        assert_eq!(
            policy("retry-budget-exhausted"),
            serde_json::json!({"retry": {"max_attempts": 3, "base_ms": 10, "max_ms": 20}})
        );
    }
}
