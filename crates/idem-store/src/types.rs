//! Data exchanged with stores.

use idem_core::{
    AlertSecret, Ctx, Event, LeaseId, OpError, Policy, PolicyError, Record, Reply, State, Timestamp,
};
use serde::Serialize;

/// Inputs of one execution that do not come from the store: the time, the random draws
/// (chosen by the caller so tests can fix them) and the actor of operator actions.
#[derive(Debug, Clone)]
pub struct ExecCtx {
    pub now: Timestamp,
    pub lease_id: LeaseId,
    pub jitter: f64,
    pub actor: Option<String>,
    /// The W3C `traceparent` of the request that runs the operation (validated by the
    /// server), stored with any alert it queues so the delivery continues that trace.
    pub traceparent: Option<String>,
    /// Rows to write with the record in the same atomic step, only if the step creates it
    /// (see [`Rider`]).
    pub rider: Option<Box<Rider>>,
    /// Rows to write with the record in the same atomic step, only if the step updates it
    /// (see [`ReportRider`]).
    pub report: Option<Box<ReportRider>>,
    /// An effect's claim: when it acquires, also record that this request is about to leave
    /// (`Op::EffectSent` under the new token), in the same atomic step. A store may do so
    /// (its answer then carries the `sent` event after the claim's) or leave it to the caller,
    /// who sends `Op::EffectSent` itself when no `sent` event came back.
    pub then_sent: Option<idem_core::effect::RequestSummary>,
    /// An action's claim: when it acquires a record that holds no draft, first save this one
    /// (`Op::Prepare`), and record `then_sent` only if the draft does not wait for approval.
    /// The same contract as `then_sent`: the answer's events say what was done.
    pub then_prepare: Option<ThenPrepare>,
}

/// The draft [`ExecCtx::then_prepare`] saves.
#[derive(Debug, Clone, PartialEq)]
pub struct ThenPrepare {
    pub payload: serde_json::Value,
    pub approval_required: bool,
}

/// Rows that ride on a record's creation: written in the atomic step that inserts the
/// record, never by a step that finds the record there. The webhook intake's event row and
/// its first forward item are one: a delivery stores them exactly when it makes the event's
/// record, so a record never exists without its body, and a duplicate writes no row.
///
/// A key whose row belongs to something else ([`crate::NewIntakeEvent::is_same`] false: a
/// delivery of another event, another source's event) is not this event's to take: the step
/// then writes nothing at all — no record, no row — and answers `rider_stored: false`, as for
/// a duplicate; the caller reads the row to tell which. The named destinations' rows are
/// written only where neither a row nor a record holds their key (a delivery whose key is
/// taken gets its item all the same: the delivery worker finds the key taken and holds it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rider {
    /// The inbound event's row (kept once: `ON CONFLICT DO NOTHING` on its key).
    pub intake: crate::NewIntakeEvent,
    /// The event's first forward item (destination `default`), enqueued only when the row
    /// was stored.
    pub forward: Option<crate::NewOutboxItem>,
    /// The event's deliveries to named destinations: each row and first item stored only
    /// when the event's row was.
    pub deliveries: Vec<crate::NewDelivery>,
}

/// Rows that ride on a forward report's update of an event's record: the attempt on the
/// event's row and the finish of the outbox item that carried the delivery, written in the
/// atomic step that updates the record and never by a step that leaves it (a report refused
/// because another attempt took the lease). So whoever sees the record's new state sees the
/// attempt that led there, and the item's outcome is the one that state implies
/// ([`crate::intake::forward_finish`]): one commit where there were three.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportRider {
    /// The attempt to append and the change of `delivered_at` (of the row of the record the
    /// rider rides on: backends write the row of that record's namespace and key).
    pub update: crate::IntakeUpdate,
    /// The outbox item that carried this delivery, finished under its holder's lease.
    pub item: i64,
    pub lease: crate::OutboxLease,
}

impl ExecCtx {
    /// Fresh random inputs at `now`.
    pub fn at(now: Timestamp) -> Self {
        ExecCtx {
            now,
            lease_id: LeaseId::random(),
            jitter: rand::random::<f64>(),
            actor: None,
            traceparent: None,
            rider: None,
            report: None,
            then_sent: None,
            then_prepare: None,
        }
    }

    /// The decision context of `idem_core::apply`: these inputs plus what the store read.
    pub fn decision<'a>(&self, policy: &'a Policy, paused: bool, daily_count: u64) -> Ctx<'a> {
        Ctx {
            now: self.now,
            policy,
            paused,
            daily_count,
            new_lease_id: self.lease_id.clone(),
            jitter: self.jitter,
            actor: self.actor.clone(),
        }
    }
}

/// What an execution did: the answer, and the events it appended (numbered).
#[derive(Debug, Clone)]
pub struct Executed {
    pub reply: Result<Reply, OpError>,
    pub events: Vec<Event>,
    /// The record state before the operation (for logs: old → new).
    pub from_state: Option<State>,
    /// Alerts queued by this step.
    pub alerts_queued: usize,
    /// What the step counted (acquisitions, cost, fenced completions, time to recovery):
    /// the server turns it into metrics.
    pub tally: idem_core::Tally,
    /// Whether the step stored its [`Rider`] (it created the record and the row was new) or
    /// its [`ReportRider`] (it updated the record).
    pub rider_stored: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct RecordWithEvents {
    pub record: Record,
    pub events: Vec<Event>,
}

#[derive(Debug, Clone, Default)]
pub struct ListQuery {
    pub state: Option<State>,
    /// 1..=1000; the API defaults to 100.
    pub limit: usize,
    /// Opaque cursor from a previous page.
    pub cursor: Option<String>,
    /// Only records with this owner.
    pub owner: Option<String>,
    /// Only records with this correlation id.
    pub correlation_id: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Page {
    pub items: Vec<Record>,
    pub next_cursor: Option<String>,
}

impl Page {
    /// A page from up to `limit + 1` records fetched in list order: the extra one only says
    /// that a next page exists (its cursor is the last record kept).
    pub fn from_fetched(mut items: Vec<Record>, limit: usize) -> Page {
        let next_cursor = if items.len() > limit {
            items.truncate(limit);
            items.last().map(|r| {
                Cursor {
                    updated_at: r.updated_at.0,
                    key: r.key.as_str().to_owned(),
                }
                .encode()
            })
        } else {
            None
        };
        Page { items, next_cursor }
    }
}

/// Position in the list order (newest `updated_at` first, then key descending).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    pub updated_at: i64,
    pub key: String,
}

impl Cursor {
    pub fn encode(&self) -> String {
        hex::encode(format!("{}\n{}", self.updated_at, self.key))
    }
    /// `None` for anything that is not a cursor this store made: the key part must be a key
    /// (visible ASCII), so no made-up cursor carries bytes a store cannot compare (NUL).
    pub fn decode(s: &str) -> Option<Cursor> {
        let raw = String::from_utf8(hex::decode(s).ok()?).ok()?;
        let (t, k) = raw.split_once('\n')?;
        let key = idem_core::Key::try_from(k).ok()?;
        Some(Cursor {
            updated_at: t.parse().ok()?,
            key: key.as_str().to_owned(),
        })
    }
}

#[cfg(test)]
mod cursor_tests {
    use super::Cursor;

    #[test]
    fn cursors_round_trip_and_made_up_ones_are_refused() {
        let c = Cursor {
            updated_at: 1_764_581_000_123,
            key: "a%b/c?d#e".into(),
        };
        assert_eq!(Cursor::decode(&c.encode()), Some(c));
        // "61620405\n" + a key with a vertical tab, NUL and CR (PostgreSQL refuses NUL).
        assert_eq!(Cursor::decode("36313632303430350A0b000D"), None);
        assert_eq!(Cursor::decode(&hex::encode("5\n")), None, "empty key");
        assert_eq!(Cursor::decode(&hex::encode("5\na b")), None, "space");
        assert_eq!(Cursor::decode(&hex::encode("x\nk")), None, "time");
        assert_eq!(Cursor::decode("zz"), None);
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StateCounts(pub Vec<(State, u64)>);

impl StateCounts {
    /// Every state with its count, zeros included.
    pub fn from_pairs(pairs: impl IntoIterator<Item = (State, u64)>) -> Self {
        let mut all: Vec<(State, u64)> = State::ALL.iter().map(|s| (*s, 0)).collect();
        for (s, n) in pairs {
            if let Some(e) = all.iter_mut().find(|(x, _)| *x == s) {
                e.1 += n;
            }
        }
        StateCounts(all)
    }
    pub fn get(&self, s: State) -> u64 {
        self.0.iter().find(|(x, _)| *x == s).map_or(0, |(_, n)| *n)
    }
    pub fn to_json(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        for (s, n) in &self.0 {
            m.insert(s.as_str().to_owned(), (*n).into());
        }
        serde_json::Value::Object(m)
    }
}

#[derive(Debug, Clone)]
pub struct NamespaceInfo {
    pub namespace: String,
    pub paused: bool,
    pub policy: Policy,
    pub counts: StateCounts,
}

/// A namespace's counters over a sliding 24 hours: the sum of its hourly buckets from the
/// hour 23 hours before the current one up to the current one (so a window of 23 to 24
/// hours, moving by the hour). Kept in the transaction of every step that counts, never
/// recomputed from records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct NamespaceStats {
    pub acquired_first: u64,
    pub acquired_retry: u64,
    pub cost: idem_core::CostTotals,
}

impl NamespaceStats {
    /// Hours summed: the current one and the 23 before it.
    pub const HOURS: i64 = 24;

    /// The first hour bucket of the window ending in the hour of `now`.
    pub fn first_hour(now: Timestamp) -> i64 {
        now.0.div_euclid(crate::engine::HOUR_MS) - (Self::HOURS - 1)
    }

    /// Adds one bucket row (acquired_first, acquired_retry, tokens, usd_nanos, retry_tokens,
    /// retry_usd_nanos); negative values (never written) count as 0.
    pub fn add_row(&mut self, v: [i64; 6]) {
        let u = |n: i64| u64::try_from(n).unwrap_or(0);
        self.acquired_first = self.acquired_first.saturating_add(u(v[0]));
        self.acquired_retry = self.acquired_retry.saturating_add(u(v[1]));
        self.cost.merge(&idem_core::CostTotals {
            tokens: u(v[2]),
            usd_nanos: u(v[3]),
            retry_tokens: u(v[4]),
            retry_usd_nanos: u(v[5]),
        });
    }
}

#[derive(Debug, Clone)]
pub enum NamespaceChange {
    /// A JSON merge patch of the policy (validated by `Policy::patch`).
    Patch(serde_json::Value),
    Pause,
    Resume,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepReport {
    pub examined: usize,
    pub moved_to_review: usize,
    pub stuck_alerts: usize,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetentionReport {
    pub results_expired: usize,
    pub tombstones_deleted: usize,
}

#[derive(Debug, Clone, Default)]
pub struct Stats {
    pub records: StateCounts,
    /// Age of the oldest `processing` record's last acquisition/heartbeat, seconds.
    pub oldest_processing_seconds: f64,
    pub review_queue_depth: u64,
    /// Age of the oldest `needs_review` record (since it entered review), seconds.
    pub review_oldest_seconds: f64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingAlert {
    pub id: i64,
    pub namespace: String,
    pub key: String,
    pub reason: String,
    pub state: State,
    pub error_category: Option<String>,
    pub attempt: u32,
    pub created_at: Timestamp,
    /// Deliveries tried so far.
    pub tries: u32,
    /// The namespace's current alert_url (None: nothing to send to; the alert is dropped).
    pub alert_url: Option<String>,
    /// The namespace's current alert_secret (Some: sign the delivery). Read with the URL, at
    /// delivery time. Its `Debug` hides the value.
    pub alert_secret: Option<AlertSecret>,
    /// The `traceparent` of the request whose operation queued the alert (None for alerts of
    /// the janitor), so the delivery continues the caller's trace.
    pub traceparent: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlertOutcome {
    Sent,
    RetryAt(Timestamp),
    GaveUp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Worker,
    Operator,
    Admin,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Worker => "worker",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }
    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "worker" => Some(Role::Worker),
            "operator" => Some(Role::Operator),
            "admin" => Some(Role::Admin),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct NewApiToken {
    /// SHA-256 hex of the secret; the secret itself is never stored.
    pub secret_hash: String,
    pub role: Role,
    /// A namespace name, or `*` for all.
    pub scope: String,
    pub label: Option<String>,
    /// From this instant on the token is refused; `None` never expires.
    pub expires_at: Option<Timestamp>,
}

/// A live (not revoked) token as stored. Expired tokens are still returned: the caller
/// compares `expires_at` with its own clock, so tests can move time.
#[derive(Debug, Clone)]
pub struct ApiToken {
    pub id: i64,
    pub secret_hash: String,
    pub role: Role,
    pub scope: String,
    pub label: Option<String>,
    pub created_at: Timestamp,
    pub expires_at: Option<Timestamp>,
    /// Last authenticated use, recorded at most about once a minute (see the server's auth).
    pub last_used_at: Option<Timestamp>,
}

impl ApiToken {
    /// Is the token past its expiry at `now`?
    pub fn expired(&self, now: Timestamp) -> bool {
        self.expires_at.is_some_and(|e| now >= e)
    }
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The store cannot be reached or answered with a transient failure (503 `store_unavailable`).
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// A namespace change was refused by the policy rules (400/422 naming the field).
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// Bad paging input.
    #[error("invalid cursor")]
    InvalidCursor,
    /// Stored data could not be read back (a bug or a damaged store).
    #[error("corrupt stored data: {0}")]
    Corrupt(String),
    /// Anything else the backend reports.
    #[error("store error: {0}")]
    Internal(String),
}

/// SHA-256 hex of an API token secret: what stores keep and look up.
pub fn hash_secret(secret: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(secret.as_bytes()))
}

/// A new random API token secret (`idem_` + 48 hex digits, 192 bits).
pub fn generate_secret() -> String {
    let bytes: [u8; 24] = rand::random();
    format!("idem_{}", hex::encode(bytes))
}
