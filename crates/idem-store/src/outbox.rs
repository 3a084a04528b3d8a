//! The durable outbox: work that must leave the process after a write commits (alerts today;
//! webhook forwards and HTTP effects next), kept in one table by every backend.
//!
//! An item is enqueued in the same transaction as the record write that caused it, so it
//! exists exactly when the write does. Senders take items with [`crate::Store::outbox_claim`],
//! which leases each one to a fresh [`OutboxLease`] for `lease_ms`; while that lease runs no
//! other claim (from this process, another handle, or another instance on the same
//! PostgreSQL) hands the item out again. A sender that dies simply lets the lease run out and
//! the item is claimed again. [`crate::Store::outbox_finish`] records the outcome only for the
//! lease holder: done, retry at a time (attempts + 1, the error kept), or dead after the
//! budget ([`RetrySchedule::after_failure`]). This module owns those types and the retry
//! arithmetic; it must never hand one item to two senders at once, and never print a
//! payload (its `Debug` shows only the length: payloads may carry customer data).

use idem_core::{AlertDraft, Timestamp};
use serde::{Deserialize, Serialize};

/// What an outbox item is for; each kind has its own sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OutboxKind {
    /// A namespace alert (`needs_review`, `stuck`) posted to its `alert_url`.
    Alert,
    /// A verified inbound webhook event forwarded to its source's `forward.url`.
    Forward,
    /// An exactly-once outbound HTTP effect.
    Effect,
}

impl OutboxKind {
    pub const ALL: [OutboxKind; 3] = [OutboxKind::Alert, OutboxKind::Forward, OutboxKind::Effect];

    pub fn as_str(self) -> &'static str {
        match self {
            OutboxKind::Alert => "alert",
            OutboxKind::Forward => "forward",
            OutboxKind::Effect => "effect",
        }
    }

    pub fn parse(s: &str) -> Option<OutboxKind> {
        OutboxKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// Where an item is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OutboxState {
    /// Waiting for `due_at`.
    Pending,
    /// Handed to a sender until its lease runs out.
    Leased,
    /// Delivered.
    Done,
    /// Given up after the budget (or nothing to deliver to).
    Dead,
}

impl OutboxState {
    pub const ALL: [OutboxState; 4] = [
        OutboxState::Pending,
        OutboxState::Leased,
        OutboxState::Done,
        OutboxState::Dead,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            OutboxState::Pending => "pending",
            OutboxState::Leased => "leased",
            OutboxState::Done => "done",
            OutboxState::Dead => "dead",
        }
    }

    pub fn parse(s: &str) -> Option<OutboxState> {
        OutboxState::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// An item to enqueue. `(namespace, key, kind, dedupe)` is unique: enqueueing the same item
/// twice (a retried transaction, a second entry into review for the same attempt) keeps one.
#[derive(Clone, PartialEq, Eq)]
pub struct NewOutboxItem {
    pub kind: OutboxKind,
    /// The record (or source) the item belongs to; retention deletes it with the record.
    pub namespace: String,
    pub key: String,
    /// Distinguishes items of one kind on one record (an alert's reason and attempt, a
    /// forward's event id).
    pub dedupe: String,
    /// What the sender needs, opaque to the store.
    pub payload: Vec<u8>,
    pub due_at: Timestamp,
}

impl NewOutboxItem {
    /// The outbox form of an alert the rules queued.
    pub fn alert(
        namespace: &str,
        key: &str,
        a: &AlertDraft,
        traceparent: Option<&str>,
    ) -> NewOutboxItem {
        let payload = AlertPayload {
            reason: a.reason.as_str().to_owned(),
            state: a.state.as_str().to_owned(),
            error_category: a.error_category.clone(),
            attempt: a.attempt,
            traceparent: traceparent.map(str::to_owned),
        };
        NewOutboxItem {
            kind: OutboxKind::Alert,
            namespace: namespace.to_owned(),
            key: key.to_owned(),
            dedupe: payload.dedupe(),
            payload: payload.encode(),
            due_at: a.at,
        }
    }
}

impl std::fmt::Debug for NewOutboxItem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewOutboxItem")
            .field("kind", &self.kind)
            .field("namespace", &self.namespace)
            .field("key", &idem_core::mask_key(&self.key))
            .field("dedupe", &self.dedupe)
            .field("payload", &PayloadLen(self.payload.len()))
            .field("due_at", &self.due_at)
            .finish()
    }
}

/// Shown in place of a payload.
struct PayloadLen(usize);

impl std::fmt::Debug for PayloadLen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{} bytes]", self.0)
    }
}

/// Who holds a claimed item, and until when. Only the holder may finish it; a new claim
/// after `until` makes a new holder and the old one's finish is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxLease {
    pub owner: String,
    pub until: Timestamp,
}

impl OutboxLease {
    /// A new holder (128 random bits), leased until `until`.
    pub fn fresh(until: Timestamp) -> OutboxLease {
        let bytes: [u8; 16] = rand::random();
        OutboxLease {
            owner: hex::encode(bytes),
            until,
        }
    }
}

/// What [`crate::Store::outbox_claim`] asks for: at most `limit` due items of `kind`, leased
/// to one fresh holder for `lease_ms` from `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutboxClaim {
    pub kind: OutboxKind,
    pub now: Timestamp,
    pub limit: usize,
    pub lease_ms: i64,
}

impl OutboxClaim {
    /// The lease the claimed items get: a new holder until `now + lease_ms` (never before
    /// `now`).
    pub fn fresh_lease(&self) -> OutboxLease {
        OutboxLease::fresh(self.now.plus_ms(self.lease_ms.max(0)))
    }
}

/// What [`crate::Store::outbox_finish`] records: how the attempt on item `id` by the holder
/// of `lease` ended, at `now`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxFinish {
    pub id: i64,
    pub lease: OutboxLease,
    pub outcome: OutboxOutcome,
    pub now: Timestamp,
}

/// One item as read back from the outbox.
#[derive(Clone, PartialEq, Eq)]
pub struct OutboxItem {
    pub id: i64,
    pub kind: OutboxKind,
    pub namespace: String,
    pub key: String,
    pub dedupe: String,
    pub payload: Vec<u8>,
    pub created_at: Timestamp,
    pub due_at: Timestamp,
    /// Finished attempts so far (an attempt cut short by a crash is not counted).
    pub attempts: u32,
    pub state: OutboxState,
    /// The current holder, while leased (also after the lease ran out, until reclaimed).
    pub lease: Option<OutboxLease>,
    /// What the last failed attempt reported (a short cause, never a payload).
    pub last_error: Option<String>,
}

impl std::fmt::Debug for OutboxItem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutboxItem")
            .field("id", &self.id)
            .field("kind", &self.kind)
            .field("namespace", &self.namespace)
            .field("key", &idem_core::mask_key(&self.key))
            .field("dedupe", &self.dedupe)
            .field("payload", &PayloadLen(self.payload.len()))
            .field("created_at", &self.created_at)
            .field("due_at", &self.due_at)
            .field("attempts", &self.attempts)
            .field("state", &self.state)
            .field("lease", &self.lease)
            .field("last_error", &self.last_error)
            .finish()
    }
}

/// How one attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutboxOutcome {
    Done,
    /// Pending again from `at`.
    Retry {
        at: Timestamp,
        error: Option<String>,
    },
    /// No more attempts.
    Dead {
        error: Option<String>,
    },
}

impl From<&crate::AlertOutcome> for OutboxOutcome {
    /// An alert delivery's outcome in the outbox's terms (alerts record no error text).
    fn from(a: &crate::AlertOutcome) -> Self {
        match a {
            crate::AlertOutcome::Sent => OutboxOutcome::Done,
            crate::AlertOutcome::RetryAt(at) => OutboxOutcome::Retry {
                at: *at,
                error: None,
            },
            crate::AlertOutcome::GaveUp => OutboxOutcome::Dead { error: None },
        }
    }
}

/// How delays grow between attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Jitter {
    /// Exactly `base * 2^(attempts-1)` (capped): alerts keep their documented 1 s, 2 s, 4 s …
    None,
    /// Uniform in `[0, base * 2^(attempts-1)]` (capped), so senders retrying one receiver
    /// after an outage do not arrive together.
    Full,
}

/// A retry budget: `max_attempts` attempts in all, delays from `base_ms` doubling up to
/// `max_ms`, never sooner than the receiver's `Retry-After`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetrySchedule {
    pub max_attempts: u32,
    pub base_ms: i64,
    pub max_ms: i64,
    pub jitter: Jitter,
}

impl RetrySchedule {
    /// Delay after the `attempts`-th failed attempt (1 for the first), with `draw` in `[0, 1)`
    /// used only by [`Jitter::Full`], and at least `retry_after_ms`.
    pub fn delay_ms(&self, attempts: u32, draw: f64, retry_after_ms: Option<i64>) -> i64 {
        let ceiling = idem_core::classify::backoff_ms(attempts, self.base_ms, self.max_ms, 1.0);
        let delay = match self.jitter {
            Jitter::None => ceiling,
            Jitter::Full => {
                idem_core::classify::backoff_ms(attempts, self.base_ms, self.max_ms, draw)
            }
        };
        // A Retry-After beyond our own cap is still honoured: the receiver asked for it.
        delay.max(retry_after_ms.unwrap_or(0).max(0))
    }

    /// The outcome of a failed attempt of an item that had `attempts_before` finished
    /// attempts: dead when this was the last one the budget allows, else a retry.
    pub fn after_failure(
        &self,
        attempts_before: u32,
        now: Timestamp,
        draw: f64,
        retry_after_ms: Option<i64>,
        error: Option<String>,
    ) -> OutboxOutcome {
        let attempts = attempts_before.saturating_add(1);
        if attempts >= self.max_attempts {
            OutboxOutcome::Dead { error }
        } else {
            OutboxOutcome::Retry {
                at: now.plus_ms(self.delay_ms(attempts, draw, retry_after_ms)),
                error,
            }
        }
    }
}

/// What an alert item carries: enough to build the alert body. The namespace and key are the
/// item's own; the URL and secret are read at delivery time, never stored with the item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlertPayload {
    pub reason: String,
    pub state: String,
    pub error_category: Option<String>,
    pub attempt: u32,
    /// The W3C `traceparent` of the request that queued the alert (absent in rows written
    /// before it was kept, and for alerts of the janitor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

impl AlertPayload {
    /// One alert per record, reason and attempt.
    pub fn dedupe(&self) -> String {
        format!("{}:{}", self.reason, self.attempt)
    }

    pub fn encode(&self) -> Vec<u8> {
        // A struct of strings and integers always serializes.
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub fn decode(bytes: &[u8]) -> Result<AlertPayload, crate::StoreError> {
        serde_json::from_slice(bytes)
            .map_err(|e| crate::StoreError::Corrupt(format!("alert outbox payload: {e}")))
    }
}

impl crate::PendingAlert {
    /// An alert item as the alert sender needs it, without the namespace's URL and secret
    /// (the caller reads those at delivery time and fills them in).
    pub fn from_outbox(item: OutboxItem) -> Result<crate::PendingAlert, crate::StoreError> {
        let a = AlertPayload::decode(&item.payload)?;
        let state = idem_core::State::parse(&a.state).ok_or_else(|| {
            crate::StoreError::Corrupt(format!("alert outbox state: {}", a.state))
        })?;
        Ok(crate::PendingAlert {
            id: item.id,
            namespace: item.namespace,
            key: item.key,
            reason: a.reason,
            state,
            error_category: a.error_category,
            attempt: a.attempt,
            created_at: item.created_at,
            tries: item.attempts,
            alert_url: None,
            alert_secret: None,
            traceparent: a.traceparent,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alert_schedule_is_the_documented_doubling() {
        let s = RetrySchedule {
            max_attempts: 6,
            base_ms: 1000,
            max_ms: 300_000,
            jitter: Jitter::None,
        };
        let delays: Vec<i64> = (1..=10).map(|n| s.delay_ms(n, 0.0, None)).collect();
        assert_eq!(
            delays,
            [1000, 2000, 4000, 8000, 16000, 32000, 64000, 128_000, 256_000, 300_000]
        );
    }

    #[test]
    fn full_jitter_stays_under_the_ceiling_and_retry_after_is_a_floor() {
        let s = RetrySchedule {
            max_attempts: 8,
            base_ms: 5000,
            max_ms: 3_600_000,
            jitter: Jitter::Full,
        };
        assert_eq!(s.delay_ms(3, 0.5, None), 10_000);
        assert_eq!(s.delay_ms(3, 0.0, None), 0);
        assert!(s.delay_ms(3, 0.999, None) < 20_000);
        assert_eq!(s.delay_ms(3, 0.0, Some(90_000)), 90_000);
        assert_eq!(s.delay_ms(3, 0.5, Some(-5)), 10_000);
    }

    #[test]
    fn the_last_attempt_of_the_budget_is_dead() {
        let s = RetrySchedule {
            max_attempts: 3,
            base_ms: 1000,
            max_ms: 10_000,
            jitter: Jitter::None,
        };
        let now = Timestamp(1_000_000);
        assert_eq!(
            s.after_failure(0, now, 0.0, None, Some("HTTP 500".into())),
            OutboxOutcome::Retry {
                at: Timestamp(1_001_000),
                error: Some("HTTP 500".into())
            }
        );
        assert_eq!(
            s.after_failure(1, now, 0.0, Some(7000), None),
            OutboxOutcome::Retry {
                at: Timestamp(1_007_000),
                error: None
            }
        );
        assert_eq!(
            s.after_failure(2, now, 0.0, None, None),
            OutboxOutcome::Dead { error: None }
        );
    }

    #[test]
    fn debug_never_shows_a_payload() {
        let item = NewOutboxItem {
            kind: OutboxKind::Forward,
            namespace: "ns".into(),
            key: "evt_1234567890".into(),
            dedupe: "evt".into(),
            payload: b"{\"card\":\"4242424242424242\"}".to_vec(),
            due_at: Timestamp(0),
        };
        let shown = format!("{item:?}");
        assert!(!shown.contains("4242"), "{shown}");
        assert!(!shown.contains("evt_1234567890"), "{shown}");
        assert!(shown.contains("[27 bytes]"), "{shown}");
    }

    #[test]
    fn kinds_and_states_round_trip() {
        for k in OutboxKind::ALL {
            assert_eq!(OutboxKind::parse(k.as_str()), Some(k));
        }
        for s in OutboxState::ALL {
            assert_eq!(OutboxState::parse(s.as_str()), Some(s));
        }
        assert_eq!(OutboxKind::parse("nope"), None);
    }
}
