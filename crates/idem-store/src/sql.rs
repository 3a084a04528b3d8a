//! SQL spellings of the domain's names, built from `idem_core` so that no statement of any
//! backend spells a state, a lease-expiry mode or an event type by hand.
//!
//! Backends format their statements with these once (a `LazyLock`), so the names in SQL can
//! never drift from [`State::as_str`] and friends. Only names from the closed enums pass
//! through here (lowercase ASCII and `_`), never user data: quoting them is exact.

use idem_core::{EventType, LeaseExpiry, State, RETAINED_STATES};

/// `'name'`: an SQL string literal of a domain name.
fn quote(name: &str) -> String {
    debug_assert!(name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'));
    format!("'{name}'")
}

/// `'processing'`.
pub fn state(s: State) -> String {
    quote(s.as_str())
}

/// `'completed', 'failed_permanent'`: a list for `state IN (…)`.
pub fn states(list: &[State]) -> String {
    list.iter()
        .map(|s| state(*s))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The states retention may touch ([`RETAINED_STATES`]), for `state IN (…)`.
pub fn retained_states() -> String {
    states(&RETAINED_STATES)
}

/// `'review'`.
pub fn lease_expiry(l: LeaseExpiry) -> String {
    quote(l.as_str())
}

/// `'result_expired'`.
pub fn event_type(e: EventType) -> String {
    quote(e.as_str())
}

/// The note of the `result_expired` event retention writes, the same on every store.
pub const RESULT_EXPIRED_NOTE: &str = "retention: result and payloads dropped, tombstone kept";

/// What the note of an `alert_sent` event starts with, the same on every store; the alert's
/// reason (`needs_review`, `stuck`, …) follows.
pub const ALERT_SENT_NOTE: &str = "alert delivered: ";

/// [`RESULT_EXPIRED_NOTE`] as an SQL string literal.
pub fn result_expired_note() -> String {
    format!("'{RESULT_EXPIRED_NOTE}'")
}

/// [`ALERT_SENT_NOTE`] as an SQL string literal.
pub fn alert_sent_note() -> String {
    format!("'{ALERT_SENT_NOTE}'")
}

/// When the oldest `processing` record was last active (the `records_processing` index).
pub fn oldest_processing() -> String {
    format!(
        "SELECT MIN(active_at) FROM records WHERE state = {}",
        state(State::Processing)
    )
}

/// When the oldest `needs_review` record entered review (the `records_review` index).
pub fn oldest_review() -> String {
    format!(
        "SELECT MIN(review_since) FROM records WHERE state = {}",
        state(State::NeedsReview)
    )
}

/// The columns of a stored record, in the order every backend binds and reads them.
pub const RECORD_COLUMNS: [&str; 34] = [
    "namespace",
    "key",
    "state",
    "attempt",
    "fingerprint",
    "owner",
    "correlation_id",
    "lease_expires_at",
    "not_before",
    "prepared_payload",
    "result",
    "result_expired",
    "external_ref",
    "error_category",
    "error_message",
    "error_http_status",
    "created_at",
    "updated_at",
    "lease_id",
    "lease_expiry",
    "reported",
    "budget_base",
    "window_start",
    "final_at",
    "active_at",
    "review_reason",
    "stuck_alerted",
    "version",
    // cost and recovery
    "cost_tokens",
    "cost_usd_nanos",
    "retry_tokens",
    "retry_usd_nanos",
    "review_since",
    // effects
    "request",
];

/// The six counters of an hourly stats bucket (`ns_stats`), in the order every backend binds
/// them (after namespace and hour).
pub const BUMP_NS_STATS_COLUMNS: &str =
    "acquired_first, acquired_retry, tokens, usd_nanos, retry_tokens, retry_usd_nanos";

/// The `DO UPDATE SET` list of the stats bucket upsert: every counter of
/// [`BUMP_NS_STATS_COLUMNS`] adds the new row's (`EXCLUDED`) to the stored one.
pub fn ns_stats_additions() -> String {
    BUMP_NS_STATS_COLUMNS
        .split(", ")
        .map(|c| format!("{c} = ns_stats.{c} + EXCLUDED.{c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The guarded record update in a dialect's placeholder style (`?` or `$`): parameters 1 and
/// 2 (namespace, key) find the row, the next ones are the new values of the other
/// [`RECORD_COLUMNS`] in their order, and the last one (`RECORD_COLUMNS.len() + 1`) is the
/// version the row must still have (the optimistic guard: 0 rows changed means the record
/// moved).
pub fn update_record(placeholder: char) -> String {
    let sets: Vec<String> = RECORD_COLUMNS
        .iter()
        .enumerate()
        .skip(2)
        .map(|(i, c)| format!("{c} = {placeholder}{}", i + 1))
        .collect();
    format!(
        "UPDATE records SET {} WHERE namespace = {placeholder}1 AND key = {placeholder}2 \
         AND version = {placeholder}{}",
        sets.join(", "),
        RECORD_COLUMNS.len() + 1
    )
}

/// The `outbox` and `secrets` tables with their indexes, written once for every dialect so
/// the backends' schemas cannot drift apart; each backend names its column types and the
/// statements to run between the two tables (moving older data in). A macro, so that the
/// result is a `&'static str` in the backend's list of migrations.
///
/// `outbox`: `kind` is `alert | forward | effect`; `state` is `pending | leased | done |
/// dead`; while an item is leased, `due_at` is the end of its lease, so one partial index
/// serves both "due" and "lease ran out". `secrets`: `kind` is `alert | source | forward`,
/// `owner` a namespace or source name.
#[macro_export]
macro_rules! outbox_and_secrets_tables {
    (id: $id:literal, name: $name:literal, bytes: $bytes:literal, int: $int:literal,
     between: $between:literal) => {
        concat!(
            "
CREATE TABLE outbox (
    id          ",
            $id,
            ",
    kind        TEXT NOT NULL,
    namespace   ",
            $name,
            ",
    key         ",
            $name,
            ",
    dedupe      TEXT NOT NULL,
    payload     ",
            $bytes,
            " NOT NULL,
    created_at  ",
            $int,
            " NOT NULL,
    due_at      ",
            $int,
            " NOT NULL,
    attempts    ",
            $int,
            " NOT NULL DEFAULT 0,
    state       TEXT NOT NULL DEFAULT 'pending',
    lease_owner TEXT,
    lease_until ",
            $int,
            ",
    last_error  TEXT,
    finished_at ",
            $int,
            ",
    UNIQUE (namespace, key, kind, dedupe)
);
CREATE INDEX outbox_due ON outbox (kind, due_at) WHERE state IN ('pending', 'leased');",
            $between,
            "
CREATE TABLE secrets (
    id         ",
            $id,
            ",
    kind       TEXT NOT NULL,
    owner      ",
            $name,
            ",
    value      TEXT NOT NULL,
    created_at ",
            $int,
            " NOT NULL,
    expires_at ",
            $int,
            "
);
CREATE INDEX secrets_by_owner ON secrets (kind, owner, id);
"
        )
    };
}

/// Cost and recovery: what each record's attempts reported spending (`retry_*` = attempts
/// after the first; dollars in nano-dollars so sums are exact) and when it entered
/// `needs_review` (records already in review count from their last change), the cost an
/// event carried, and the `ns_stats` hourly counters per namespace. Each backend names its
/// integer type and the columns that key a counter row (`key_columns`, each line ending in a
/// comma) and closes the table (`table_end`). A macro for the same reason as
/// [`outbox_and_secrets_tables!`].
#[macro_export]
macro_rules! cost_and_recovery_columns {
    (int: $int:literal, key_columns: $key:literal, table_end: $end:literal) => {
        concat!(
            "
ALTER TABLE records ADD COLUMN cost_tokens ",
            $int,
            " NOT NULL DEFAULT 0;
ALTER TABLE records ADD COLUMN cost_usd_nanos ",
            $int,
            " NOT NULL DEFAULT 0;
ALTER TABLE records ADD COLUMN retry_tokens ",
            $int,
            " NOT NULL DEFAULT 0;
ALTER TABLE records ADD COLUMN retry_usd_nanos ",
            $int,
            " NOT NULL DEFAULT 0;
ALTER TABLE records ADD COLUMN review_since ",
            $int,
            ";
UPDATE records SET review_since = updated_at WHERE state = 'needs_review';
CREATE INDEX records_review ON records (review_since) WHERE state = 'needs_review';
ALTER TABLE events ADD COLUMN cost_tokens ",
            $int,
            ";
ALTER TABLE events ADD COLUMN cost_usd_nanos ",
            $int,
            ";
CREATE TABLE ns_stats (
",
            $key,
            "
    acquired_first  ",
            $int,
            " NOT NULL,
    acquired_retry  ",
            $int,
            " NOT NULL,
    tokens          ",
            $int,
            " NOT NULL,
    usd_nanos       ",
            $int,
            " NOT NULL,
    retry_tokens    ",
            $int,
            " NOT NULL,
    retry_usd_nanos ",
            $int,
            " NOT NULL,
",
            $end,
            "
"
        )
    };
}

/// The operator console's sessions (stored by hashes only) and the partial index the review
/// queue reads `needs_review` and `awaiting_approval` through, oldest first across
/// namespaces; `then` is what the backend's migration does next. A macro for the same reason
/// as [`outbox_and_secrets_tables!`].
#[macro_export]
macro_rules! console_sessions_table {
    (int: $int:literal, then: $then:literal) => {
        concat!(
            "
CREATE TABLE console_sessions (
    id_hash    TEXT    PRIMARY KEY,
    token_hash TEXT,
    csrf       TEXT    NOT NULL,
    created_at ",
            $int,
            " NOT NULL,
    expires_at ",
            $int,
            " NOT NULL
);
CREATE INDEX console_sessions_expiry ON console_sessions (expires_at);
CREATE INDEX records_review_queue ON records (updated_at, namespace, key)
    WHERE state IN ('needs_review', 'awaiting_approval');
",
            $then
        )
    };
}

/// The webhook intake's tables: sources (configuration without secrets: those are rows of
/// `secrets`, kinds `source` and `forward`) and one row per inbound event beside its record
/// (body, content type, forwarded headers, attempts, delivery time). A macro for the same
/// reason as [`outbox_and_secrets_tables!`].
#[macro_export]
macro_rules! intake_tables {
    (int: $int:literal, bytes: $bytes:literal) => {
        concat!(
            "
CREATE TABLE sources (
    name       TEXT    PRIMARY KEY,
    config     TEXT    NOT NULL,
    created_at ",
            $int,
            " NOT NULL,
    updated_at ",
            $int,
            " NOT NULL
);
CREATE TABLE intake_events (
    namespace    TEXT    NOT NULL,
    key          TEXT    NOT NULL,
    source       TEXT    NOT NULL,
    event_id     TEXT,
    content_type TEXT,
    headers      TEXT    NOT NULL,
    body         ",
            $bytes,
            ",
    received_at  ",
            $int,
            " NOT NULL,
    attempts     TEXT    NOT NULL DEFAULT '[]',
    delivered_at ",
            $int,
            ",
    PRIMARY KEY (namespace, key)
);
CREATE INDEX intake_events_by_source ON intake_events (source, received_at, key);
CREATE INDEX intake_events_undelivered ON intake_events (source) WHERE delivered_at IS NULL;
"
        )
    };
}

/// Fan-out: the columns of a delivery's row and of an event's destinations in
/// `intake_events`, and the `destination_pace` table. The same text on both backends.
pub const FAN_OUT_TABLES: &str = r#"
ALTER TABLE intake_events ADD COLUMN event_key TEXT;
ALTER TABLE intake_events ADD COLUMN destination TEXT;
ALTER TABLE intake_events ADD COLUMN destinations TEXT;
CREATE INDEX intake_events_deliveries ON intake_events (namespace, event_key)
    WHERE event_key IS NOT NULL;
CREATE TABLE destination_pace (
    source      TEXT   NOT NULL,
    destination TEXT   NOT NULL,
    next_at     BIGINT NOT NULL,
    PRIMARY KEY (source, destination)
);
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_update_binds_every_column_and_guards_the_version() {
        let q = update_record('$');
        let sets: Vec<String> = RECORD_COLUMNS[2..]
            .iter()
            .zip(3..)
            .map(|(c, i)| format!("{c} = ${i}"))
            .collect();
        let guard = RECORD_COLUMNS.len() + 1;
        assert_eq!(
            q,
            format!(
                "UPDATE records SET {} WHERE namespace = $1 AND key = $2 AND version = ${guard}",
                sets.join(", ")
            )
        );
        assert!(
            q.starts_with("UPDATE records SET state = $3, attempt = $4, "),
            "{q}"
        );
        assert_eq!(update_record('?'), q.replace('$', "?"));
    }

    #[test]
    fn every_stats_counter_adds_the_new_rows_value() {
        assert_eq!(
            ns_stats_additions(),
            "acquired_first = ns_stats.acquired_first + EXCLUDED.acquired_first, \
             acquired_retry = ns_stats.acquired_retry + EXCLUDED.acquired_retry, \
             tokens = ns_stats.tokens + EXCLUDED.tokens, \
             usd_nanos = ns_stats.usd_nanos + EXCLUDED.usd_nanos, \
             retry_tokens = ns_stats.retry_tokens + EXCLUDED.retry_tokens, \
             retry_usd_nanos = ns_stats.retry_usd_nanos + EXCLUDED.retry_usd_nanos"
        );
    }

    #[test]
    fn names_are_quoted_as_the_domain_spells_them() {
        assert_eq!(state(State::Processing), "'processing'");
        assert_eq!(retained_states(), "'completed', 'failed_permanent'");
        assert_eq!(
            states(&State::ALL),
            "'processing', 'prepared', 'awaiting_approval', 'completed', 'failed_retryable', \
             'failed_permanent', 'needs_review'"
        );
        assert_eq!(lease_expiry(LeaseExpiry::Review), "'review'");
        assert_eq!(event_type(EventType::ResultExpired), "'result_expired'");
    }
}
