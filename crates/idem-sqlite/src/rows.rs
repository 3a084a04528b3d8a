//! Rows ↔ domain values: records, events, namespace settings, per-state counts.
//!
//! Invariants: a record row holds every field of [`Record`], bookkeeping included, so reading
//! a row back yields exactly the record that was written (JSON values as text, where SQL
//! NULL means "absent" and the text `null` means a JSON null; times as integer ms). A stored
//! value that does not parse back is reported as [`StoreError::Corrupt`], never guessed.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use idem_core::{
    AttemptCost, CostTotals, Event, EventDraft, EventType, Fingerprint, Key, LastError,
    LeaseExpiry, LeaseId, Namespace, Policy, Record, ReviewReason, State, Timestamp,
};
use idem_store::{StateCounts, StoreError};
use rusqlite::types::Value as Sql;
use rusqlite::{params, Connection, OptionalExtension, Row};
use serde_json::Value;

use crate::error::{corrupt, SqlResult};

/// Record columns in the order of [`record_values`] and [`record_from_row`] (one list for
/// every backend).
pub(crate) use idem_store::sql::RECORD_COLUMNS;

/// `namespace, key, …` for SELECTs.
pub(crate) static RECORD_SELECT: LazyLock<String> = LazyLock::new(|| RECORD_COLUMNS.join(", "));

static INSERT_RECORD: LazyLock<String> = LazyLock::new(|| {
    let marks: Vec<String> = (1..=RECORD_COLUMNS.len())
        .map(|i| format!("?{i}"))
        .collect();
    format!(
        "INSERT INTO records ({}) VALUES ({})",
        RECORD_COLUMNS.join(", "),
        marks.join(", ")
    )
});

// Parameters 1 and 2 (namespace, key) identify the row, then the new values, and the last one
// is the version the row must still have: the optimistic guard of the design.
static UPDATE_RECORD: LazyLock<String> = LazyLock::new(|| idem_store::sql::update_record('?'));

fn text(s: Option<&str>) -> Sql {
    s.map_or(Sql::Null, |s| Sql::Text(s.to_owned()))
}

fn int(n: Option<i64>) -> Sql {
    n.map_or(Sql::Null, Sql::Integer)
}

fn json(v: &Option<Value>) -> Result<Sql, StoreError> {
    let Some(v) = v else {
        return Ok(Sql::Null);
    };
    // Sized once from the value (a stored result may be an answer of hundreds of KiB).
    idem_core::to_text_sized(v)
        .map(Sql::Text)
        .map_err(|e| StoreError::Internal(format!("JSON value cannot be stored: {e}")))
}

/// `LIMIT n` for a statement's text. SQLite compiles a `LIMIT ?` whose binding is an integer
/// as that constant and marks the parameter, so every new binding (even of the same value)
/// expires the statement and the next step prepares it again — about 300 k instructions, more
/// than the rest of a background pass. Written into the text, each limit is one cached
/// statement with the plan the bound value gave. Only for limits the program chooses (batch
/// sizes): a limit per request would fill the statement cache.
pub(crate) fn limit_clause(n: usize) -> String {
    format!("LIMIT {}", i64::try_from(n).unwrap_or(i64::MAX))
}

/// A cost amount as stored (sums saturate far below `i64::MAX`).
pub(crate) fn amount(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn get_amount(row: &Row<'_>, i: usize, what: &str) -> Result<u64, StoreError> {
    let n: i64 = row.get(i).db()?;
    u64::try_from(n).map_err(|_| corrupt(what, n))
}

/// An event's `cost` from its two columns (both NULL: none reported).
fn get_event_cost(row: &Row<'_>, i: usize) -> Result<Option<AttemptCost>, StoreError> {
    let tokens: Option<i64> = row.get(i).db()?;
    let usd: Option<i64> = row.get(i + 1).db()?;
    match (tokens, usd) {
        (None, None) => Ok(None),
        (t, u) => Ok(Some(AttemptCost {
            tokens: u64::try_from(t.unwrap_or(0)).map_err(|_| corrupt("event cost", i))?,
            usd_nanos: u64::try_from(u.unwrap_or(0)).map_err(|_| corrupt("event cost", i))?,
        })),
    }
}

fn record_values(r: &Record) -> Result<Vec<Sql>, StoreError> {
    let err = r.last_error.as_ref();
    Ok(vec![
        Sql::Text(r.namespace.as_str().to_owned()),
        Sql::Text(r.key.as_str().to_owned()),
        Sql::Text(r.state.as_str().to_owned()),
        Sql::Integer(i64::from(r.attempt)),
        text(r.fingerprint.as_ref().map(Fingerprint::as_str)),
        text(r.owner.as_deref()),
        text(r.correlation_id.as_deref()),
        int(r.lease_expires_at.map(Timestamp::millis)),
        int(r.not_before.map(Timestamp::millis)),
        json(&r.prepared_payload)?,
        json(&r.result)?,
        Sql::Integer(i64::from(r.result_expired)),
        text(r.external_ref.as_deref()),
        text(err.map(|e| e.category.as_str())),
        text(err.map(|e| e.message.as_str())),
        int(err.and_then(|e| e.http_status).map(i64::from)),
        Sql::Integer(r.created_at.0),
        Sql::Integer(r.updated_at.0),
        text(r.lease_id.as_ref().map(LeaseId::as_str)),
        Sql::Text(r.lease_expiry.as_str().to_owned()),
        Sql::Integer(i64::from(r.reported)),
        Sql::Integer(i64::from(r.budget_base)),
        Sql::Integer(r.window_start.0),
        int(r.final_at.map(Timestamp::millis)),
        Sql::Integer(r.active_at.0),
        text(r.review_reason.map(ReviewReason::as_str)),
        Sql::Integer(i64::from(r.stuck_alerted)),
        Sql::Integer(r.version),
        Sql::Integer(amount(r.cost.tokens)),
        Sql::Integer(amount(r.cost.usd_nanos)),
        Sql::Integer(amount(r.cost.retry_tokens)),
        Sql::Integer(amount(r.cost.retry_usd_nanos)),
        int(r.review_since.map(Timestamp::millis)),
        match &r.request {
            None => Sql::Null,
            Some(q) => serde_json::to_string(q)
                .map(Sql::Text)
                .map_err(|e| StoreError::Internal(format!("request cannot be stored: {e}")))?,
        },
    ])
}

/// Inserts a new record (the primary key refuses a second one for the same key) and returns
/// its row id.
pub(crate) fn insert_record(conn: &Connection, r: &Record) -> Result<i64, StoreError> {
    let values = record_values(r)?;
    conn.prepare_cached(&INSERT_RECORD)
        .db()?
        .execute(rusqlite::params_from_iter(values))
        .db()?;
    crate::counts::note(r.namespace.as_str(), None, r.state);
    Ok(conn.last_insert_rowid())
}

/// Writes `r` over the row whose version is `expected_version` (the version the decision was
/// made on: one less than `r.version`, or more with a claim's follow-ups folded in). With one
/// writer per file and `BEGIN IMMEDIATE` the guard always holds; a miss means the decision was
/// made on stale data, so it is an internal error and the job's savepoint is rolled back.
/// `from` is the state the row had (read by the same transaction), for the namespace's counts.
pub(crate) fn update_record(
    conn: &Connection,
    r: &Record,
    expected_version: i64,
    from: State,
) -> Result<(), StoreError> {
    let mut values = record_values(r)?;
    values.push(Sql::Integer(expected_version));
    let n = conn
        .prepare_cached(&UPDATE_RECORD)
        .db()?
        .execute(rusqlite::params_from_iter(values))
        .db()?;
    if n != 1 {
        return Err(StoreError::Internal(format!(
            "version guard: record moved under the writer (expected version {expected_version})"
        )));
    }
    crate::counts::note(r.namespace.as_str(), Some(from), r.state);
    Ok(())
}

fn get_u32(row: &Row<'_>, i: usize, what: &str) -> Result<u32, StoreError> {
    let n: i64 = row.get(i).db()?;
    u32::try_from(n).map_err(|_| corrupt(what, n))
}

fn get_bool(row: &Row<'_>, i: usize) -> Result<bool, StoreError> {
    Ok(row.get::<_, i64>(i).db()? != 0)
}

fn get_ts(row: &Row<'_>, i: usize) -> Result<Timestamp, StoreError> {
    Ok(Timestamp(row.get(i).db()?))
}

fn get_opt_ts(row: &Row<'_>, i: usize) -> Result<Option<Timestamp>, StoreError> {
    Ok(row.get::<_, Option<i64>>(i).db()?.map(Timestamp))
}

fn get_json(row: &Row<'_>, i: usize, what: &str) -> Result<Option<Value>, StoreError> {
    match row.get::<_, Option<String>>(i).db()? {
        None => Ok(None),
        Some(s) => serde_json::from_str(&s)
            .map(Some)
            .map_err(|e| corrupt(what, e)),
    }
}

pub(crate) fn parse_state(s: &str) -> Result<State, StoreError> {
    State::parse(s).ok_or_else(|| corrupt("state", s))
}

fn get_opt_state(row: &Row<'_>, i: usize) -> Result<Option<State>, StoreError> {
    row.get::<_, Option<String>>(i)
        .db()?
        .map(|s| parse_state(&s))
        .transpose()
}

/// Reads a row selected with [`RECORD_SELECT`].
pub(crate) fn record_from_row(row: &Row<'_>) -> Result<Record, StoreError> {
    let namespace: String = row.get(0).db()?;
    let key: String = row.get(1).db()?;
    let state: String = row.get(2).db()?;
    let last_error = match row.get::<_, Option<String>>(13).db()? {
        None => None,
        Some(category) => Some(LastError {
            category,
            message: row.get::<_, Option<String>>(14).db()?.unwrap_or_default(),
            http_status: match row.get::<_, Option<i64>>(15).db()? {
                None => None,
                Some(n) => Some(u16::try_from(n).map_err(|_| corrupt("error_http_status", n))?),
            },
        }),
    };
    let lease_expiry: String = row.get(19).db()?;
    Ok(Record {
        namespace: Namespace::try_from(namespace.as_str()).map_err(|e| corrupt("namespace", e))?,
        key: Key::try_from(key.as_str()).map_err(|e| corrupt("key", e))?,
        state: parse_state(&state)?,
        attempt: get_u32(row, 3, "attempt")?,
        fingerprint: row
            .get::<_, Option<String>>(4)
            .db()?
            .map(|s| Fingerprint::parse(&s).map_err(|e| corrupt("fingerprint", e)))
            .transpose()?,
        owner: row.get(5).db()?,
        correlation_id: row.get(6).db()?,
        lease_expires_at: get_opt_ts(row, 7)?,
        not_before: get_opt_ts(row, 8)?,
        prepared_payload: get_json(row, 9, "prepared_payload")?,
        result: get_json(row, 10, "result")?,
        result_expired: get_bool(row, 11)?,
        external_ref: row.get(12).db()?,
        last_error,
        created_at: get_ts(row, 16)?,
        updated_at: get_ts(row, 17)?,
        lease_id: row
            .get::<_, Option<String>>(18)
            .db()?
            .map(LeaseId::from_stored),
        lease_expiry: LeaseExpiry::parse(&lease_expiry)
            .ok_or_else(|| corrupt("lease_expiry", &lease_expiry))?,
        reported: get_bool(row, 20)?,
        budget_base: get_u32(row, 21, "budget_base")?,
        window_start: get_ts(row, 22)?,
        final_at: get_opt_ts(row, 23)?,
        active_at: get_ts(row, 24)?,
        review_reason: row
            .get::<_, Option<String>>(25)
            .db()?
            .map(|s| ReviewReason::parse(&s).ok_or_else(|| corrupt("review_reason", &s)))
            .transpose()?,
        stuck_alerted: get_bool(row, 26)?,
        version: row.get(27).db()?,
        cost: CostTotals {
            tokens: get_amount(row, 28, "cost_tokens")?,
            usd_nanos: get_amount(row, 29, "cost_usd_nanos")?,
            retry_tokens: get_amount(row, 30, "retry_tokens")?,
            retry_usd_nanos: get_amount(row, 31, "retry_usd_nanos")?,
        },
        review_since: get_opt_ts(row, 32)?,
        request: row
            .get::<_, Option<String>>(33)
            .db()?
            .map(|s| serde_json::from_str(&s).map_err(|e| corrupt("request", e)))
            .transpose()?,
    })
}

// The rowid is the record's id: its events point at it (`events.rid`).
static SELECT_RECORD: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {}, rowid FROM records WHERE namespace = ?1 AND key = ?2",
        *RECORD_SELECT
    )
});

/// A stored record and its row id (the `rid` its events carry).
pub(crate) struct Stored {
    pub(crate) record: Record,
    pub(crate) rid: i64,
}

pub(crate) fn load_record(
    conn: &Connection,
    ns: &Namespace,
    key: &Key,
) -> Result<Option<Stored>, StoreError> {
    let mut stmt = conn.prepare_cached(&SELECT_RECORD).db()?;
    let mut rows = stmt.query(params![ns.as_str(), key.as_str()]).db()?;
    match rows.next().db()? {
        None => Ok(None),
        Some(row) => Ok(Some(Stored {
            record: record_from_row(row)?,
            rid: row.get(RECORD_COLUMNS.len()).db()?,
        })),
    }
}

/// Appends one event of the record with row id `rid` and returns its sequence number.
pub(crate) fn insert_event(
    conn: &Connection,
    rid: i64,
    ns: &str,
    key: &str,
    e: &EventDraft,
) -> Result<i64, StoreError> {
    conn.prepare_cached(
        "INSERT INTO events (rid, namespace, key, at, type, from_state, to_state, attempt, \
         owner, correlation_id, note, actor, cost_tokens, cost_usd_nanos) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
    )
    .db()?
    .execute(params![
        rid,
        ns,
        key,
        e.at.0,
        e.kind.as_str(),
        e.from_state.map(State::as_str),
        e.to_state.map(State::as_str),
        i64::from(e.attempt),
        e.owner,
        e.correlation_id,
        e.note,
        e.actor,
        e.cost.map(|c| amount(c.tokens)),
        e.cost.map(|c| amount(c.usd_nanos)),
    ])
    .db()?;
    Ok(conn.last_insert_rowid())
}

/// The audit trail of one record, oldest first.
pub(crate) fn load_events(conn: &Connection, rid: i64) -> Result<Vec<Event>, StoreError> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT seq, at, type, from_state, to_state, attempt, owner, correlation_id, note, \
             actor, cost_tokens, cost_usd_nanos FROM events WHERE rid = ?1 ORDER BY seq",
        )
        .db()?;
    let mut rows = stmt.query(params![rid]).db()?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().db()? {
        let kind: String = row.get(2).db()?;
        out.push(Event {
            seq: row.get(0).db()?,
            at: get_ts(row, 1)?,
            kind: EventType::parse(&kind).ok_or_else(|| corrupt("event type", &kind))?,
            from_state: get_opt_state(row, 3)?,
            to_state: get_opt_state(row, 4)?,
            attempt: get_u32(row, 5, "event attempt")?,
            owner: row.get(6).db()?,
            correlation_id: row.get(7).db()?,
            note: row.get(8).db()?,
            actor: row.get(9).db()?,
            cost: get_event_cost(row, 10)?,
        });
    }
    Ok(out)
}

/// The namespace settings: its policy (defaults when never configured) and pause flag. The
/// policy's `alert_secret` is `None` here (decisions never read it); reads that show or use
/// it take [`load_namespace_with_secret`].
pub(crate) fn load_namespace(conn: &Connection, ns: &str) -> Result<(Policy, bool), StoreError> {
    let row: Option<(String, i64)> = conn
        .prepare_cached("SELECT policy, paused FROM namespaces WHERE namespace = ?1")
        .db()?
        .query_row(params![ns], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()
        .db()?;
    match row {
        None => Ok((Policy::default(), false)),
        Some((json, paused)) => Ok((parsed_policy(json)?, paused != 0)),
    }
}

/// Stored policy texts and what they parse to, at most [`POLICY_MEMO_LEN`] of them (cleared
/// whole when full). Every claim reads its namespace's policy, and parsing the JSON cost a
/// duplicate claim about as much as reading the row; a text seen before is cloned from here
/// instead. It is a memo of a pure function of the text — the row is still read every time,
/// so a changed policy is a new text and is parsed — never a cache of the namespace.
static POLICY_MEMO: LazyLock<Mutex<HashMap<Box<str>, Policy>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));
const POLICY_MEMO_LEN: usize = 256;

fn parsed_policy(json: String) -> Result<Policy, StoreError> {
    let mut memo = POLICY_MEMO
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(p) = memo.get(json.as_str()) {
        return Ok(p.clone());
    }
    let policy: Policy = serde_json::from_str(&json).map_err(|e| corrupt("namespace policy", e))?;
    if memo.len() >= POLICY_MEMO_LEN {
        memo.clear();
    }
    memo.insert(json.into_boxed_str(), policy.clone());
    Ok(policy)
}

/// The namespace settings with the policy's `alert_secret` from the secrets table.
pub(crate) fn load_namespace_with_secret(
    conn: &Connection,
    ns: &str,
) -> Result<(Policy, bool), StoreError> {
    let (mut policy, paused) = load_namespace(conn, ns)?;
    policy.alert_secret = crate::secrets::alert_secret(conn, ns)?;
    Ok((policy, paused))
}

/// Writes the namespace settings (creating the row on first change); the policy text holds
/// no alert secret ([`idem_store::policy_at_rest`]).
pub(crate) fn save_namespace(
    conn: &Connection,
    ns: &str,
    policy: &Policy,
    paused: bool,
    now: Timestamp,
) -> Result<(), StoreError> {
    let json = idem_store::policy_at_rest(policy)?;
    conn.prepare_cached(
        "INSERT INTO namespaces (namespace, policy, paused, updated_at, retention_ms, \
         audit_retention_ms, stuck_after_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) \
         ON CONFLICT (namespace) DO UPDATE SET policy = excluded.policy, \
         paused = excluded.paused, updated_at = excluded.updated_at, \
         retention_ms = excluded.retention_ms, audit_retention_ms = excluded.audit_retention_ms, \
         stuck_after_ms = excluded.stuck_after_ms",
    )
    .db()?
    .execute(params![
        ns,
        json,
        i64::from(paused),
        now.0,
        policy.retention_ms,
        policy.audit_retention_ms,
        policy.stuck_after_ms,
    ])
    .db()?;
    Ok(())
}

/// Per-state record counts of one namespace, every state present (from `namespace_counts`,
/// kept exact by [`crate::counts`], plus what the open write transaction noted).
pub(crate) fn count_states(conn: &Connection, ns: &str) -> Result<StateCounts, StoreError> {
    let mut stmt = conn
        .prepare_cached("SELECT state, n FROM namespace_counts WHERE namespace = ?1 AND n > 0")
        .db()?;
    let rows = stmt.query(params![ns]).db()?;
    let mut counts = collect_counts(rows)?;
    // The writer's own open transaction counts what it wrote and has not flushed yet.
    for (s, d) in crate::counts::pending(ns) {
        if let Some(e) = counts.0.iter_mut().find(|(x, _)| *x == s) {
            e.1 = e.1.saturating_add_signed(d);
        }
    }
    Ok(counts)
}

/// Reads `(state, count)` rows into [`StateCounts`].
pub(crate) fn collect_counts(mut rows: rusqlite::Rows<'_>) -> Result<StateCounts, StoreError> {
    let mut pairs = Vec::new();
    while let Some(row) = rows.next().db()? {
        let s: String = row.get(0).db()?;
        let n: i64 = row.get(1).db()?;
        pairs.push((parse_state(&s)?, u64::try_from(n).unwrap_or(0)));
    }
    Ok(StateCounts::from_pairs(pairs))
}

#[cfg(test)]
mod policy_memo_tests {
    use super::*;

    fn with_policy(conn: &Connection, text: &str) {
        conn.execute(
            "INSERT INTO namespaces (namespace, policy, paused) VALUES ('n', ?1, 0) \
             ON CONFLICT (namespace) DO UPDATE SET policy = excluded.policy",
            params![text],
        )
        .expect("write");
    }

    fn text_with_lease(lease_ms: i64) -> String {
        let p = Policy {
            lease_ms,
            ..Policy::default()
        };
        serde_json::to_string(&p).expect("policy text")
    }

    #[test]
    fn a_changed_policy_text_is_read_as_changed_and_a_bad_one_stays_corrupt() {
        let conn = Connection::open_in_memory().expect("open");
        conn.execute_batch(
            "CREATE TABLE namespaces (namespace TEXT PRIMARY KEY, policy TEXT NOT NULL, \
             paused INTEGER NOT NULL)",
        )
        .expect("table");
        assert_eq!(
            load_namespace(&conn, "n").expect("load").0,
            Policy::default()
        );
        for lease_ms in [7_000, 9_000, 7_000, 9_000] {
            with_policy(&conn, &text_with_lease(lease_ms));
            assert_eq!(
                load_namespace(&conn, "n").expect("load").0.lease_ms,
                lease_ms
            );
        }
        // More texts than the memo keeps: every one still reads as written.
        for lease_ms in 1..=(POLICY_MEMO_LEN as i64 + 20) {
            with_policy(&conn, &text_with_lease(lease_ms));
            assert_eq!(
                load_namespace(&conn, "n").expect("load").0.lease_ms,
                lease_ms
            );
        }
        with_policy(&conn, "{\"lease_ms\":");
        for _ in 0..2 {
            assert!(matches!(
                load_namespace(&conn, "n"),
                Err(StoreError::Corrupt(_))
            ));
        }
    }
}
