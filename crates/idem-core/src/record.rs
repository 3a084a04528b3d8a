//! The ledger row ([`Record`]), its audit trail ([`Event`]) and the JSON shapes the API shows.
//!
//! A record carries public fields (what clients see) and bookkeeping the rules need but a
//! read never shows: the current lease id (half of the fencing token), whether the holder has
//! already reported, the start of the current retry budget, when it reached a final state and
//! why it sits in review. `version` increases on every write so stores can guard updates.

use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;

use crate::effect::RequestSummary;
use crate::fingerprint::Fingerprint;
use crate::ids::{Key, LeaseId, Namespace};
use crate::policy::LeaseExpiry;
use crate::time::Timestamp;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    Processing,
    Prepared,
    AwaitingApproval,
    Completed,
    FailedRetryable,
    FailedPermanent,
    NeedsReview,
}

impl State {
    pub const ALL: [State; 7] = [
        State::Processing,
        State::Prepared,
        State::AwaitingApproval,
        State::Completed,
        State::FailedRetryable,
        State::FailedPermanent,
        State::NeedsReview,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            State::Processing => "processing",
            State::Prepared => "prepared",
            State::AwaitingApproval => "awaiting_approval",
            State::Completed => "completed",
            State::FailedRetryable => "failed_retryable",
            State::FailedPermanent => "failed_permanent",
            State::NeedsReview => "needs_review",
        }
    }
    pub fn parse(s: &str) -> Option<State> {
        State::ALL.into_iter().find(|st| st.as_str() == s)
    }
    /// Final states: retention applies to them.
    pub fn is_final(self) -> bool {
        matches!(self, State::Completed | State::FailedPermanent)
    }
    /// States in which a lease may be held.
    pub fn is_leased(self) -> bool {
        matches!(self, State::Processing | State::Prepared)
    }
}

/// Why a record sits in `needs_review`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReviewReason {
    /// The holder reported an ambiguous failure (the effect may have happened).
    Ambiguous,
    /// The retry budget (attempts or window) is spent.
    BudgetExhausted,
    /// The lease expired under `lease_expiry = review`.
    LeaseExpired,
    /// Processing past `stuck_after_ms` under `lease_expiry = review`.
    Stuck,
}

impl ReviewReason {
    pub fn as_str(self) -> &'static str {
        match self {
            ReviewReason::Ambiguous => "ambiguous",
            ReviewReason::BudgetExhausted => "budget_exhausted",
            ReviewReason::LeaseExpired => "lease_expired",
            ReviewReason::Stuck => "stuck",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        [
            Self::Ambiguous,
            Self::BudgetExhausted,
            Self::LeaseExpired,
            Self::Stuck,
        ]
        .into_iter()
        .find(|r| r.as_str() == s)
    }
}

/// The last error a worker reported (message already sanitized).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastError {
    pub category: String,
    pub message: String,
    pub http_status: Option<u16>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub namespace: Namespace,
    pub key: Key,
    pub state: State,
    pub attempt: u32,
    pub fingerprint: Option<Fingerprint>,
    pub owner: Option<String>,
    pub correlation_id: Option<String>,
    pub lease_expires_at: Option<Timestamp>,
    pub not_before: Option<Timestamp>,
    pub prepared_payload: Option<Value>,
    pub result: Option<Value>,
    pub result_expired: bool,
    pub external_ref: Option<String>,
    pub last_error: Option<LastError>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// What the attempts of this record reported spending (public as `record.cost`).
    pub cost: CostTotals,
    /// What an effect sent (method, URL without query, idempotency header); `None` for keys
    /// driven by claim/complete.
    pub request: Option<RequestSummary>,

    // Bookkeeping, never shown.
    /// Lease id of the newest acquisition; `None` once no lease can be held (after approve).
    pub lease_id: Option<LeaseId>,
    /// Lease-expiry behaviour chosen for the current lease (namespace default or claim override).
    pub lease_expiry: LeaseExpiry,
    /// The holder of the newest token already reported (complete or fail).
    pub reported: bool,
    /// Attempt count when the current retry budget began (0, or the attempt at `resolve retry`).
    pub budget_base: u32,
    /// When the current retry budget began (creation, or `resolve retry`).
    pub window_start: Timestamp,
    /// When the record reached a final state (retention counts from here).
    pub final_at: Option<Timestamp>,
    /// Last acquisition or heartbeat (stuck detection counts from here).
    pub active_at: Timestamp,
    pub review_reason: Option<ReviewReason>,
    /// When the record entered `needs_review` (set on entering, cleared on leaving): the
    /// review-queue age and the time to recovery count from here.
    pub review_since: Option<Timestamp>,
    /// A stuck alert was already raised for the current attempt.
    pub stuck_alerted: bool,
    /// Increases on every write; stores guard updates with it.
    pub version: i64,
}

impl Record {
    /// Milliseconds of lease left at `now` (0 when expired or unleased).
    pub fn lease_remaining_ms(&self, now: Timestamp) -> i64 {
        self.lease_expires_at.map_or(0, |t| (t.0 - now.0).max(0))
    }
    /// The lease is held (state leased and expiry in the future).
    pub fn lease_valid(&self, now: Timestamp) -> bool {
        self.state.is_leased() && self.lease_expires_at.is_some_and(|t| t > now)
    }

    /// The public JSON form (no token, no bookkeeping).
    pub fn public(&self) -> PublicRecord<'_> {
        PublicRecord(self)
    }
}

/// Serializes a record as the API shows it.
pub struct PublicRecord<'a>(pub &'a Record);

impl Serialize for PublicRecord<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let r = self.0;
        let mut m = s.serialize_map(Some(17))?;
        m.serialize_entry("namespace", &r.namespace)?;
        m.serialize_entry("key", &r.key)?;
        m.serialize_entry("state", &r.state)?;
        m.serialize_entry("attempt", &r.attempt)?;
        m.serialize_entry("fingerprint", &r.fingerprint)?;
        m.serialize_entry("owner", &r.owner)?;
        m.serialize_entry("correlation_id", &r.correlation_id)?;
        m.serialize_entry("lease_expires_at", &r.lease_expires_at)?;
        m.serialize_entry("not_before", &r.not_before)?;
        m.serialize_entry("prepared_payload", &r.prepared_payload)?;
        m.serialize_entry("result", &r.result)?;
        m.serialize_entry("result_expired", &r.result_expired)?;
        m.serialize_entry("external_ref", &r.external_ref)?;
        m.serialize_entry("last_error", &r.last_error)?;
        m.serialize_entry("created_at", &r.created_at)?;
        m.serialize_entry("updated_at", &r.updated_at)?;
        m.serialize_entry("cost", &r.cost)?;
        m.serialize_entry("request", &r.request)?;
        m.end()
    }
}

impl Serialize for Record {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.public().serialize(s)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventType {
    Acquired,
    Resumed,
    DuplicateHit,
    Conflict,
    InFlight,
    Prepared,
    Completed,
    Failed,
    LeaseLost,
    MovedToReview,
    Resolved,
    Approved,
    Rejected,
    ResultExpired,
    AlertSent,
    /// An effect's request is about to leave (recorded durably before the first byte).
    Sent,
    /// An effect's reconcile lookup ran (note: found, not_found or unknown).
    Reconciled,
    /// Extension: a heartbeat extended the lease (not recorded by default; reserved).
    Heartbeat,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Acquired => "acquired",
            EventType::Resumed => "resumed",
            EventType::DuplicateHit => "duplicate_hit",
            EventType::Conflict => "conflict",
            EventType::InFlight => "in_flight",
            EventType::Prepared => "prepared",
            EventType::Completed => "completed",
            EventType::Failed => "failed",
            EventType::LeaseLost => "lease_lost",
            EventType::MovedToReview => "moved_to_review",
            EventType::Resolved => "resolved",
            EventType::Approved => "approved",
            EventType::Rejected => "rejected",
            EventType::ResultExpired => "result_expired",
            EventType::AlertSent => "alert_sent",
            EventType::Sent => "sent",
            EventType::Reconciled => "reconciled",
            EventType::Heartbeat => "heartbeat",
        }
    }
    pub fn parse(s: &str) -> Option<EventType> {
        use EventType::*;
        [
            Acquired,
            Resumed,
            DuplicateHit,
            Conflict,
            InFlight,
            Prepared,
            Completed,
            Failed,
            LeaseLost,
            MovedToReview,
            Resolved,
            Approved,
            Rejected,
            ResultExpired,
            AlertSent,
            Sent,
            Reconciled,
            Heartbeat,
        ]
        .into_iter()
        .find(|t| t.as_str() == s)
    }
}

/// An event before the store numbered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventDraft {
    pub at: Timestamp,
    pub kind: EventType,
    pub from_state: Option<State>,
    pub to_state: Option<State>,
    pub attempt: u32,
    pub owner: Option<String>,
    pub correlation_id: Option<String>,
    pub note: Option<String>,
    /// Who did it, for operator actions (the token's label or role).
    pub actor: Option<String>,
    /// What the attempt reported spending, on the event of its report (complete, fail, or
    /// the `lease_lost` of a fenced report).
    pub cost: Option<AttemptCost>,
}

/// An event of the audit trail; `seq` is assigned by the store and increases over time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Event {
    pub seq: i64,
    pub at: Timestamp,
    #[serde(rename = "type")]
    pub kind: EventType,
    pub from_state: Option<State>,
    pub to_state: Option<State>,
    pub attempt: u32,
    pub owner: Option<String>,
    pub correlation_id: Option<String>,
    pub note: Option<String>,
    pub actor: Option<String>,
    /// `{tokens, usd}` reported with this event, or null.
    pub cost: Option<AttemptCost>,
}

impl Event {
    pub fn from_draft(seq: i64, d: EventDraft) -> Event {
        Event {
            seq,
            at: d.at,
            kind: d.kind,
            from_state: d.from_state,
            to_state: d.to_state,
            attempt: d.attempt,
            owner: d.owner,
            correlation_id: d.correlation_id,
            note: d.note,
            actor: d.actor,
            cost: d.cost,
        }
    }
}

/// Why an alert is raised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AlertReason {
    NeedsReview,
    Stuck,
    /// A worker reported an effect (complete, or fail with `sent` not false) with a token
    /// that was fenced out: the ledger stayed right, the outside world may have seen the
    /// effect twice.
    FencedCompletion,
    /// A correctly signed inbound event without its id was held (`INTAKE.md`).
    MissingIdentity,
    /// A forward's receiver answered 410 Gone: the event went to review at once.
    DeliveryGone,
    /// A forward's retries (attempts or window) are spent: the event went to review.
    DeliveryExhausted,
    /// An inbound event's key, or the key of one of its deliveries, was already taken by a
    /// record that is not that event or that delivery: it was held for review.
    KeyCollision,
}

impl AlertReason {
    pub fn as_str(self) -> &'static str {
        match self {
            AlertReason::NeedsReview => "needs_review",
            AlertReason::Stuck => "stuck",
            AlertReason::FencedCompletion => "fenced_completion",
            AlertReason::MissingIdentity => "missing_identity",
            AlertReason::DeliveryGone => "delivery_gone",
            AlertReason::DeliveryExhausted => "delivery_exhausted",
            AlertReason::KeyCollision => "key_collision",
        }
    }
}

/// An alert to deliver to the namespace `alert_url` (queued in the same atomic step as the
/// transition that caused it; deduplicated per record, reason and attempt).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlertDraft {
    pub reason: AlertReason,
    pub state: State,
    pub error_category: Option<String>,
    pub attempt: u32,
    pub at: Timestamp,
}

// ------------------------------------------------------------------ cost

/// The most tokens one attempt may report.
pub const MAX_COST_TOKENS: u64 = 1_000_000_000_000_000;
/// The most US dollars one attempt may report.
pub const MAX_COST_USD: f64 = 1_000_000.0;
/// Dollars are kept as whole nano-dollars so that sums are exact on every store (a float
/// sum of `0.1 + 0.2` would not be).
const NANOS_PER_USD: f64 = 1_000_000_000.0;

/// Why a reported cost was refused; `field` is the member (`tokens` or `usd`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct CostError {
    pub field: &'static str,
    pub message: String,
}

/// What one attempt reported spending: `cost: {tokens?, usd?}` on complete, fail or effect.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct AttemptCost {
    pub tokens: u64,
    /// US dollars in nano-dollars (rounded to the nearest one).
    pub usd_nanos: u64,
}

impl AttemptCost {
    /// A validated cost: `tokens` a non-negative integer up to [`MAX_COST_TOKENS`], `usd` a
    /// non-negative finite number up to [`MAX_COST_USD`] (absent members count as 0).
    pub fn new(tokens: Option<u64>, usd: Option<f64>) -> Result<AttemptCost, CostError> {
        let tokens = tokens.unwrap_or(0);
        if tokens > MAX_COST_TOKENS {
            return Err(CostError {
                field: "tokens",
                message: format!("must be an integer from 0 to {MAX_COST_TOKENS}"),
            });
        }
        let usd = usd.unwrap_or(0.0);
        if !usd.is_finite() || !(0.0..=MAX_COST_USD).contains(&usd) {
            return Err(CostError {
                field: "usd",
                message: format!("must be a number from 0 to {MAX_COST_USD}"),
            });
        }
        // In range, so the product fits (at most 1e15).
        let usd_nanos = (usd * NANOS_PER_USD).round() as u64;
        Ok(AttemptCost { tokens, usd_nanos })
    }

    /// The dollars as a JSON number.
    pub fn usd(&self) -> f64 {
        nanos_to_usd(self.usd_nanos)
    }
}

fn nanos_to_usd(n: u64) -> f64 {
    n as f64 / NANOS_PER_USD
}

impl Serialize for AttemptCost {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(2))?;
        m.serialize_entry("tokens", &self.tokens)?;
        m.serialize_entry("usd", &self.usd())?;
        m.end()
    }
}

/// The sums on a record (`record.cost`) and in a namespace's stats: every attempt, and the
/// part spent by attempts after the first.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct CostTotals {
    pub tokens: u64,
    pub usd_nanos: u64,
    pub retry_tokens: u64,
    pub retry_usd_nanos: u64,
}

impl CostTotals {
    /// Adds one attempt's cost; `retry` when it was not the first attempt. Saturates.
    pub fn add(&mut self, c: AttemptCost, retry: bool) {
        self.tokens = self.tokens.saturating_add(c.tokens);
        self.usd_nanos = self.usd_nanos.saturating_add(c.usd_nanos);
        if retry {
            self.retry_tokens = self.retry_tokens.saturating_add(c.tokens);
            self.retry_usd_nanos = self.retry_usd_nanos.saturating_add(c.usd_nanos);
        }
    }

    /// Adds other sums (e.g. hourly buckets). Saturates.
    pub fn merge(&mut self, o: &CostTotals) {
        self.tokens = self.tokens.saturating_add(o.tokens);
        self.usd_nanos = self.usd_nanos.saturating_add(o.usd_nanos);
        self.retry_tokens = self.retry_tokens.saturating_add(o.retry_tokens);
        self.retry_usd_nanos = self.retry_usd_nanos.saturating_add(o.retry_usd_nanos);
    }
}

impl Serialize for CostTotals {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(4))?;
        m.serialize_entry("tokens", &self.tokens)?;
        m.serialize_entry("usd", &nanos_to_usd(self.usd_nanos))?;
        m.serialize_entry("retry_tokens", &self.retry_tokens)?;
        m.serialize_entry("retry_usd", &nanos_to_usd(self.retry_usd_nanos))?;
        m.end()
    }
}

#[cfg(test)]
mod cost_tests {
    use super::*;

    #[test]
    fn costs_are_validated_and_dollars_sum_exactly() {
        assert_eq!(AttemptCost::new(None, None), Ok(AttemptCost::default()));
        assert_eq!(
            AttemptCost::new(Some(MAX_COST_TOKENS + 1), None).map_err(|e| e.field),
            Err("tokens")
        );
        for bad in [-0.01, f64::NAN, f64::INFINITY, MAX_COST_USD * 2.0] {
            assert_eq!(
                AttemptCost::new(None, Some(bad)).map_err(|e| e.field),
                Err("usd"),
                "{bad}"
            );
        }
        let a = AttemptCost::new(Some(7), Some(0.1)).expect("ok");
        let b = AttemptCost::new(Some(5), Some(0.2)).expect("ok");
        let mut t = CostTotals::default();
        t.add(a, false);
        t.add(b, true);
        let v = serde_json::to_value(t).expect("json");
        assert_eq!(
            v,
            serde_json::json!({"tokens": 12, "usd": 0.3, "retry_tokens": 5, "retry_usd": 0.2})
        );
        assert_eq!(
            serde_json::to_value(CostTotals::default()).expect("json"),
            serde_json::json!({"tokens": 0, "usd": 0.0, "retry_tokens": 0, "retry_usd": 0.0})
        );
    }
}
