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
//! is completed by the delivery worker.)
//!
//! Fan-out: an event of a source with several destinations keeps its body once, on the event's
//! row (key: the event key). The destination `default` delivers under that same key, as before
//! fan-out; every other matching destination gets a delivery row of its own (key
//! `{event key}:{NAME}`, no body, `event_key` naming the event's row, `destination` its name),
//! written with its forward item in the same rider ([`NewDelivery`]). Each delivery row holds
//! its own attempts and `delivered_at`; its ledger record (state, budget, dead letter) is made
//! by the delivery worker on its first pass. An event row whose destinations leave out
//! `default` is born delivered (`delivered_at` = `received_at`: nothing is sent under its own
//! key). Retention keeps an event's body and row while any of its deliveries is undelivered.
//! This module owns those types; it must never print a body, a header value or a secret
//! (`Debug` shows sizes).

use idem_core::{State, Timestamp};

use crate::secrets::{Secret, SecretKind, SecretOwner};

/// The owner of a source's inbound signing secrets.
pub fn source_owner(name: &str) -> SecretOwner {
    SecretOwner::new(SecretKind::Source, name)
}

/// The owner of a source's forward signing secret (the destination `default`).
pub fn forward_owner(name: &str) -> SecretOwner {
    SecretOwner::new(SecretKind::Forward, name)
}

/// The owner of the signing secret of a source's named destination (`/` is outside the
/// source name syntax, so it never meets a source's own owner).
pub fn destination_owner(source: &str, destination: &str) -> SecretOwner {
    SecretOwner::new(SecretKind::Forward, format!("{source}/{destination}"))
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
    /// The same per named destination (`None`: removed); a destination not listed is
    /// unchanged.
    pub destination_secrets: Vec<(String, Option<Secret>)>,
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
    /// JSON array of the destinations the event goes to (`None`: as before fan-out, the
    /// destination `default` alone).
    pub destinations: Option<String>,
    /// `Some(received_at)` when nothing is delivered under the event's own key (its
    /// destinations leave out `default`).
    pub delivered_at: Option<Timestamp>,
    /// `Some`: this is not an event's row but the row of the delivery of the event under
    /// this key to [`NewIntakeEvent::destination`] (stored without a body: the event's row
    /// keeps it). Used for a delivery held under another key because its own was taken.
    pub event_key: Option<String>,
    pub destination: Option<String>,
}

impl NewIntakeEvent {
    /// Whether the stored row `(source, event_id, event_key, destination)` is this row's
    /// event (or delivery): anything else under its key is another record's row, and the
    /// record this row rides on must not be made (see [`crate::Rider`]).
    pub fn is_same(
        &self,
        source: &str,
        event_id: Option<&str>,
        event_key: Option<&str>,
        destination: Option<&str>,
    ) -> bool {
        self.source == source
            && self.event_id.as_deref() == event_id
            && self.event_key.as_deref() == event_key
            && self.destination.as_deref() == destination
    }
}

/// The delivery of an event to a named destination, stored with the event's row: its row
/// (under `key`) and its first forward item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewDelivery {
    pub key: String,
    pub destination: String,
    pub item: crate::NewOutboxItem,
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
    /// A delivery row: the key of its event's row (which holds the body).
    pub event_key: Option<String>,
    /// A delivery row: its destination's name.
    pub destination: Option<String>,
    /// An event row: JSON array of its destinations (`None`: `["default"]`).
    pub destinations: Option<String>,
}

impl IntakeEventRow {
    /// The destination this row delivers to (`default` for an event row).
    pub fn destination_name(&self) -> &str {
        self.destination.as_deref().unwrap_or("default")
    }

    /// An event row's destinations (`["default"]` for rows from before fan-out).
    pub fn destination_names(&self) -> Vec<String> {
        self.destinations
            .as_deref()
            .and_then(|d| serde_json::from_str(d).ok())
            .unwrap_or_else(|| vec!["default".to_owned()])
    }
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
    /// Only rows in this state: each row's [`IntakeEventRow::state`] as this query reads it
    /// (see [`IntakeQuery::deliveries`]).
    pub state: Option<State>,
    /// Rows to fetch (the caller asks one more than it shows).
    pub limit: usize,
    /// Strictly after this position in the order: `(received_at, key)`.
    pub after: Option<(i64, String)>,
    /// `received_at >= since`.
    pub since: Option<Timestamp>,
    /// `received_at <= until`.
    pub until: Option<Timestamp>,
    /// Also list delivery rows, each row with its own record's state; else event rows only,
    /// each with its event's state ([`event_list_state`]: the worst of its record's and its
    /// deliveries'), which `state` filters on too.
    pub deliveries: bool,
}

/// The states, worst first, by which an event shows the worst of its own record's state and
/// its deliveries' states: a dead letter, then a final failure, then the states of a
/// delivery not done yet, then `completed`.
pub const EVENT_STATE_ORDER: [State; 7] = [
    State::NeedsReview,
    State::FailedPermanent,
    State::FailedRetryable,
    State::Processing,
    State::AwaitingApproval,
    State::Prepared,
    State::Completed,
];

/// SQL, the same on both backends: the state an event row `e` (its record joined as `r`)
/// shows in the list of events — the first in [`EVENT_STATE_ORDER`] of its record's state
/// and the state of each of its delivery rows' records (`prepared` while a delivery's record
/// is not made yet). An event that delivers under its own key alone shows its record's
/// state; a fan-out event's record (`completed` at once) yields to a dead delivery. A
/// delivery without a row (its key another record's until its first pass holds it, or its
/// row gone with its record at retention) counts for nothing. `NULL`: no record and no
/// delivery.
pub fn event_list_state() -> String {
    let rank: String = EVENT_STATE_ORDER
        .iter()
        .enumerate()
        .map(|(i, st)| format!(" WHEN {} THEN {i}", crate::sql::state(*st)))
        .collect();
    format!(
        "(SELECT s FROM (SELECT r.state AS s UNION ALL \
         SELECT COALESCE(dr.state, {prepared}) FROM intake_events d LEFT JOIN records dr \
         ON dr.namespace = d.namespace AND dr.key = d.key \
         WHERE d.namespace = e.namespace AND d.event_key = e.key) x \
         WHERE s IS NOT NULL ORDER BY CASE s{rank} ELSE {last} END LIMIT 1)",
        prepared = crate::sql::state(State::Prepared),
        last = EVENT_STATE_ORDER.len(),
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_event_state_order_ranks_every_state_once() {
        for st in State::ALL {
            let n = EVENT_STATE_ORDER.iter().filter(|s| **s == st).count();
            assert_eq!(n, 1, "{st:?}");
        }
        let sql = event_list_state();
        assert!(sql.contains("WHEN 'needs_review' THEN 0 "), "{sql}");
        assert!(sql.contains("WHEN 'completed' THEN 6 ELSE 7 END"), "{sql}");
    }
}
