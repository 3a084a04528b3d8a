//! What stores keep for the webhook intake (`INTAKE.md`): sources (their configuration as
//! JSON without secrets; the signing and forward secrets live in [`crate::secrets`] under
//! [`SecretKind::Source`] / [`SecretKind::Forward`], written in the same transaction) and
//! one row per inbound event beside its record (`intake_events`: the stored body, its
//! content type, the forwarded headers, `received_at`, the forward attempts, `delivered_at`).
//!
//! The record of an event (state, attempts, audit trail) is an ordinary ledger record in the
//! source's namespace, written by the engine with the intake ops of `idem_core`. The event
//! row and its first forward item ride on the record's creation ([`crate::Rider`]): the step
//! that inserts the record stores them in the same transaction, a step that finds the record
//! writes no row. So a record never exists without its body, and a duplicate costs no row
//! write. (A row without a record, left by an earlier version that wrote them in two steps,
//! is completed by the delivery worker.) This module owns those
//! types; it must never print a body, a header value or a secret (`Debug` shows sizes).

use idem_core::{State, Timestamp};

use crate::secrets::{Secret, SecretKind, SecretOwner};

/// The owner of a source's inbound signing secrets.
pub fn source_owner(name: &str) -> SecretOwner {
    SecretOwner::new(SecretKind::Source, name)
}

/// The owner of a source's forward signing secret.
pub fn forward_owner(name: &str) -> SecretOwner {
    SecretOwner::new(SecretKind::Forward, name)
}

/// A stored source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceRow {
    pub name: String,
    /// The configuration JSON (no secrets).
    pub config: String,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// A source to create or replace, with its secrets, in one transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceWrite {
    pub name: String,
    pub config: String,
    /// `Some`: the signing secrets become exactly these (oldest first).
    pub secrets: Option<Vec<Secret>>,
    /// `None`: unchanged; `Some(None)`: removed; `Some(Some(s))`: replaced.
    pub forward_secret: Option<Option<Secret>>,
}

/// What [`crate::Store::source_delete`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceDelete {
    NotFound,
    /// Refused: this many events are not `completed` (and `force` was not given).
    Undelivered(u64),
    Deleted,
}

/// An inbound event's row.
#[derive(Clone, PartialEq, Eq)]
pub struct NewIntakeEvent {
    pub namespace: String,
    pub key: String,
    pub source: String,
    pub event_id: Option<String>,
    pub content_type: Option<String>,
    /// JSON object of the forwarded headers (lowercase names).
    pub headers: String,
    pub body: Vec<u8>,
    pub received_at: Timestamp,
}

impl std::fmt::Debug for NewIntakeEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewIntakeEvent")
            .field("namespace", &self.namespace)
            .field("key", &idem_core::mask_key(&self.key))
            .field("source", &self.source)
            .field("body_bytes", &self.body.len())
            .field("received_at", &self.received_at)
            .finish()
    }
}

/// An inbound event's row as read back, with its record's state.
#[derive(Clone, PartialEq, Eq)]
pub struct IntakeEventRow {
    pub namespace: String,
    pub key: String,
    pub source: String,
    pub event_id: Option<String>,
    pub content_type: Option<String>,
    pub headers: String,
    /// `None` after retention dropped it.
    pub body: Option<Vec<u8>>,
    pub received_at: Timestamp,
    /// JSON array of the attempts.
    pub attempts: String,
    pub delivered_at: Option<Timestamp>,
    /// The record's state (`None`: no record yet).
    pub state: Option<State>,
}

impl std::fmt::Debug for IntakeEventRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IntakeEventRow")
            .field("namespace", &self.namespace)
            .field("key", &idem_core::mask_key(&self.key))
            .field("source", &self.source)
            .field("body_bytes", &self.body.as_ref().map(Vec::len))
            .field("state", &self.state)
            .finish()
    }
}

/// A page of a source's events: newest `received_at` first (then key descending).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IntakeQuery {
    pub source: String,
    pub state: Option<State>,
    /// Rows to fetch (the caller asks one more than it shows).
    pub limit: usize,
    /// Strictly after this position in the order: `(received_at, key)`.
    pub after: Option<(i64, String)>,
    /// `received_at >= since`.
    pub since: Option<Timestamp>,
    /// `received_at <= until`.
    pub until: Option<Timestamp>,
}

/// How an update changes `delivered_at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivered {
    Keep,
    At(Timestamp),
    Clear,
}

/// An attempt to append and/or a change of `delivered_at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntakeUpdate {
    pub namespace: String,
    pub key: String,
    /// One attempt's JSON object, appended to `attempts`.
    pub attempt: Option<String>,
    pub delivered: Delivered,
}

/// What becomes of a forward item once its delivery's report left the event's record `rec`:
/// done when delivered, due again at the record's `not_before` when a retry is scheduled,
/// dead otherwise (in review: the dead letter). The error is the last attempt's category.
pub fn forward_finish(rec: &idem_core::Record, now: Timestamp) -> crate::OutboxOutcome {
    let error = || rec.last_error.as_ref().map(|e| e.category.clone());
    match rec.state {
        State::Completed => crate::OutboxOutcome::Done,
        State::FailedRetryable => crate::OutboxOutcome::Retry {
            at: rec.not_before.unwrap_or(now),
            error: error(),
        },
        _ => crate::OutboxOutcome::Dead { error: error() },
    }
}

/// Appends one JSON object to a JSON array text (`[]` when the text is not an array).
pub fn append_attempt(attempts: &str, attempt: &str) -> String {
    let mut list: Vec<serde_json::Value> = serde_json::from_str(attempts).unwrap_or_default();
    if let Ok(v) = serde_json::from_str(attempt) {
        list.push(v);
    }
    serde_json::to_string(&list).unwrap_or_else(|_| "[]".into())
}
