//! Conversions between idem's types and table rows.
//!
//! Every column of a record has one fixed position ([`RECORD_COLS`]); reading checks each
//! stored enum spelling and JSON text and reports a damaged row as [`StoreError::Corrupt`]
//! instead of guessing.

use std::sync::LazyLock;

use bytes::{BufMut, BytesMut};
use idem_core::{
    AttemptCost, CostTotals, Event, EventDraft, EventType, Fingerprint, Key, LastError,
    LeaseExpiry, LeaseId, Namespace, Policy, Record, ReviewReason, State, Timestamp,
};
use idem_store::StoreError;
use serde_json::Value;
use tokio_postgres::types::{to_sql_checked, IsNull, ToSql, Type};
use tokio_postgres::Row;

/// The record columns, in the order [`record_from_row`] and [`RecordParams`] use (one list for
/// every backend).
pub(crate) use idem_store::sql::RECORD_COLUMNS;

/// The SQL type of each of [`RECORD_COLUMNS`] (for parameters in a `SELECT` list, which
/// PostgreSQL cannot type from the target column).
const RECORD_TYPES: [&str; 34] = [
    "TEXT", "TEXT", "TEXT", "BIGINT", "TEXT", "TEXT", "TEXT", "BIGINT", "BIGINT", "TEXT", "TEXT",
    "BOOLEAN", "TEXT", "TEXT", "TEXT", "INTEGER", "BIGINT", "BIGINT", "TEXT", "TEXT", "BOOLEAN",
    "BIGINT", "BIGINT", "BIGINT", "BIGINT", "TEXT", "BOOLEAN", "BIGINT",
    // cost and recovery
    "BIGINT", "BIGINT", "BIGINT", "BIGINT", "BIGINT", // effects:
    "TEXT",
];

/// `$1::TEXT, $2::TEXT, …, $33::BIGINT`: a record's parameters as a typed `SELECT` list.
pub(crate) static TYPED_RECORD_PARAMS: LazyLock<String> = LazyLock::new(|| {
    RECORD_TYPES
        .iter()
        .enumerate()
        .map(|(i, t)| format!("${}::{t}", i + 1))
        .collect::<Vec<_>>()
        .join(", ")
});

/// `namespace, key, …` (unqualified).
pub(crate) static RECORD_COLS: LazyLock<String> = LazyLock::new(|| cols(""));
/// `r.namespace, r.key, …` (for joins).
pub(crate) static R_RECORD_COLS: LazyLock<String> = LazyLock::new(|| cols("r."));

fn cols(prefix: &str) -> String {
    RECORD_COLUMNS
        .iter()
        .map(|c| format!("{prefix}{c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn corrupt(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{what}: {e}"))
}

fn get<'a, T: tokio_postgres::types::FromSql<'a>>(
    row: &'a Row,
    idx: usize,
) -> Result<T, StoreError> {
    row.try_get(idx)
        .map_err(|e| corrupt(&format!("column {idx}"), e))
}

pub(crate) fn json_text(v: &Option<Value>) -> Result<Option<String>, StoreError> {
    // Sized once from the value (a stored result may be an answer of hundreds of KiB).
    v.as_ref()
        .map(idem_core::to_text_sized)
        .transpose()
        .map_err(|e| StoreError::Internal(format!("json encoding: {e}")))
}

fn json_value(s: Option<String>, what: &str) -> Result<Option<Value>, StoreError> {
    s.map(|t| serde_json::from_str(&t))
        .transpose()
        .map_err(|e| corrupt(what, e))
}

pub(crate) fn parse_state(s: &str) -> Result<State, StoreError> {
    State::parse(s).ok_or_else(|| corrupt("state", s))
}

fn opt_state(s: Option<String>) -> Result<Option<State>, StoreError> {
    s.map(|s| parse_state(&s)).transpose()
}

fn u32_of(n: i64, what: &str) -> Result<u32, StoreError> {
    u32::try_from(n).map_err(|e| corrupt(what, e))
}

/// Reads a record whose columns start at `off` (in [`RECORD_COLUMNS`] order).
pub(crate) fn record_from_row(row: &Row, off: usize) -> Result<Record, StoreError> {
    let ns: String = get(row, off)?;
    let key: String = get(row, off + 1)?;
    let state: String = get(row, off + 2)?;
    let fingerprint: Option<String> = get(row, off + 4)?;
    let error_category: Option<String> = get(row, off + 13)?;
    let error_message: Option<String> = get(row, off + 14)?;
    let error_http_status: Option<i32> = get(row, off + 15)?;
    let lease_id: Option<String> = get(row, off + 18)?;
    let lease_expiry: String = get(row, off + 19)?;
    let review_reason: Option<String> = get(row, off + 25)?;
    let request: Option<String> = get(row, off + 33)?;
    Ok(Record {
        namespace: Namespace::try_from(ns).map_err(|e| corrupt("namespace", e))?,
        key: Key::try_from(key).map_err(|e| corrupt("key", e))?,
        state: parse_state(&state)?,
        attempt: u32_of(get(row, off + 3)?, "attempt")?,
        fingerprint: fingerprint
            .map(|f| Fingerprint::parse(&f))
            .transpose()
            .map_err(|e| corrupt("fingerprint", e))?,
        owner: get(row, off + 5)?,
        correlation_id: get(row, off + 6)?,
        lease_expires_at: get::<Option<i64>>(row, off + 7)?.map(Timestamp),
        not_before: get::<Option<i64>>(row, off + 8)?.map(Timestamp),
        prepared_payload: json_value(get(row, off + 9)?, "prepared_payload")?,
        result: json_value(get(row, off + 10)?, "result")?,
        result_expired: get(row, off + 11)?,
        external_ref: get(row, off + 12)?,
        last_error: match error_category {
            Some(category) => Some(LastError {
                category,
                message: error_message.unwrap_or_default(),
                http_status: error_http_status
                    .map(u16::try_from)
                    .transpose()
                    .map_err(|e| corrupt("error_http_status", e))?,
            }),
            None => None,
        },
        created_at: Timestamp(get(row, off + 16)?),
        updated_at: Timestamp(get(row, off + 17)?),
        lease_id: lease_id.map(LeaseId::from_stored),
        lease_expiry: LeaseExpiry::parse(&lease_expiry)
            .ok_or_else(|| corrupt("lease_expiry", &lease_expiry))?,
        reported: get(row, off + 20)?,
        budget_base: u32_of(get(row, off + 21)?, "budget_base")?,
        window_start: Timestamp(get(row, off + 22)?),
        final_at: get::<Option<i64>>(row, off + 23)?.map(Timestamp),
        active_at: Timestamp(get(row, off + 24)?),
        review_reason: review_reason
            .map(|r| ReviewReason::parse(&r).ok_or_else(|| corrupt("review_reason", &r)))
            .transpose()?,
        stuck_alerted: get(row, off + 26)?,
        version: get(row, off + 27)?,
        cost: CostTotals {
            tokens: amount_of(get(row, off + 28)?, "cost_tokens")?,
            usd_nanos: amount_of(get(row, off + 29)?, "cost_usd_nanos")?,
            retry_tokens: amount_of(get(row, off + 30)?, "retry_tokens")?,
            retry_usd_nanos: amount_of(get(row, off + 31)?, "retry_usd_nanos")?,
        },
        review_since: get::<Option<i64>>(row, off + 32)?.map(Timestamp),
        request: request
            .map(|s| serde_json::from_str(&s))
            .transpose()
            .map_err(|e| corrupt("request", e))?,
    })
}

fn amount_of(n: i64, what: &str) -> Result<u64, StoreError> {
    u64::try_from(n).map_err(|e| corrupt(what, e))
}

/// A cost amount as stored (sums saturate far below `i64::MAX`).
pub(crate) fn amount(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A record's JSON column as a statement parameter (TEXT).
#[derive(Debug)]
pub(crate) enum JsonParam<'a> {
    /// Written as its JSON text straight into the statement's message: a stored answer of
    /// hundreds of KiB is not held as a text of its own while the write waits and runs.
    Value(&'a Value),
    /// The text already made (parameters that outlive the record they were made from).
    Text(String),
}

impl JsonParam<'_> {
    fn text(&self) -> Result<String, StoreError> {
        match self {
            JsonParam::Value(v) => idem_core::to_text_sized(v)
                .map_err(|e| StoreError::Internal(format!("json encoding: {e}"))),
            JsonParam::Text(t) => Ok(t.clone()),
        }
    }
}

impl ToSql for JsonParam<'_> {
    fn to_sql(
        &self,
        _ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self {
            JsonParam::Value(v) => {
                out.reserve(idem_core::json_len_hint(v));
                serde_json::to_writer(out.writer(), v)?;
            }
            JsonParam::Text(t) => out.extend_from_slice(t.as_bytes()),
        }
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        <String as ToSql>::accepts(ty)
    }

    to_sql_checked!();
}

/// A record as SQL parameters ($1..$n in [`RECORD_COLUMNS`] order): owned, except the JSON
/// columns of [`RecordParams::new`], which borrow the record's values.
pub(crate) struct RecordParams<'a> {
    namespace: String,
    key: String,
    state: &'static str,
    attempt: i64,
    fingerprint: Option<String>,
    owner: Option<String>,
    correlation_id: Option<String>,
    lease_expires_at: Option<i64>,
    not_before: Option<i64>,
    prepared_payload: Option<JsonParam<'a>>,
    result: Option<JsonParam<'a>>,
    result_expired: bool,
    external_ref: Option<String>,
    error_category: Option<String>,
    error_message: Option<String>,
    error_http_status: Option<i32>,
    created_at: i64,
    updated_at: i64,
    lease_id: Option<String>,
    lease_expiry: &'static str,
    reported: bool,
    budget_base: i64,
    window_start: i64,
    final_at: Option<i64>,
    active_at: i64,
    review_reason: Option<&'static str>,
    stuck_alerted: bool,
    pub(crate) version: i64,
    cost_tokens: i64,
    cost_usd_nanos: i64,
    retry_tokens: i64,
    retry_usd_nanos: i64,
    review_since: Option<i64>,
    // effects
    request: Option<String>,
}

impl<'a> RecordParams<'a> {
    /// The parameters of `r`, its JSON columns borrowed.
    pub(crate) fn new(r: &'a Record) -> Result<Self, StoreError> {
        Self::with_json(
            r,
            r.prepared_payload.as_ref().map(JsonParam::Value),
            r.result.as_ref().map(JsonParam::Value),
        )
    }

    /// The parameters of `r`, owning everything (to keep beyond `r`).
    pub(crate) fn owned(r: &Record) -> Result<RecordParams<'static>, StoreError> {
        RecordParams::with_json(
            r,
            json_text(&r.prepared_payload)?.map(JsonParam::Text),
            json_text(&r.result)?.map(JsonParam::Text),
        )
    }

    fn with_json(
        r: &Record,
        prepared_payload: Option<JsonParam<'a>>,
        result: Option<JsonParam<'a>>,
    ) -> Result<Self, StoreError> {
        Ok(RecordParams {
            namespace: r.namespace.as_str().to_owned(),
            key: r.key.as_str().to_owned(),
            state: r.state.as_str(),
            attempt: i64::from(r.attempt),
            fingerprint: r.fingerprint.as_ref().map(|f| f.as_str().to_owned()),
            owner: r.owner.clone(),
            correlation_id: r.correlation_id.clone(),
            lease_expires_at: r.lease_expires_at.map(|t| t.0),
            not_before: r.not_before.map(|t| t.0),
            prepared_payload,
            result,
            result_expired: r.result_expired,
            external_ref: r.external_ref.clone(),
            error_category: r.last_error.as_ref().map(|e| e.category.clone()),
            error_message: r.last_error.as_ref().map(|e| e.message.clone()),
            error_http_status: r
                .last_error
                .as_ref()
                .and_then(|e| e.http_status)
                .map(i32::from),
            created_at: r.created_at.0,
            updated_at: r.updated_at.0,
            lease_id: r.lease_id.as_ref().map(|l| l.as_str().to_owned()),
            lease_expiry: r.lease_expiry.as_str(),
            reported: r.reported,
            budget_base: i64::from(r.budget_base),
            window_start: r.window_start.0,
            final_at: r.final_at.map(|t| t.0),
            active_at: r.active_at.0,
            review_reason: r.review_reason.map(|x| x.as_str()),
            stuck_alerted: r.stuck_alerted,
            version: r.version,
            cost_tokens: amount(r.cost.tokens),
            cost_usd_nanos: amount(r.cost.usd_nanos),
            retry_tokens: amount(r.cost.retry_tokens),
            retry_usd_nanos: amount(r.cost.retry_usd_nanos),
            review_since: r.review_since.map(|t| t.0),
            request: r
                .request
                .as_ref()
                .map(serde_json::to_string)
                .transpose()
                .map_err(|e| StoreError::Internal(format!("json encoding: {e}")))?,
        })
    }

    /// `r` (the record these parameters were made from) exactly as a read of the stored row
    /// returns it: JSON values parsed back from the text that is written.
    pub(crate) fn stored(&self, r: &Record) -> Result<Record, StoreError> {
        let mut out = r.clone();
        out.prepared_payload = json_value(
            self.prepared_payload
                .as_ref()
                .map(JsonParam::text)
                .transpose()?,
            "prepared_payload",
        )?;
        out.result = json_value(
            self.result.as_ref().map(JsonParam::text).transpose()?,
            "result",
        )?;
        Ok(out)
    }

    pub(crate) fn params(&self) -> [&(dyn ToSql + Sync); 34] {
        [
            &self.namespace,
            &self.key,
            &self.state,
            &self.attempt,
            &self.fingerprint,
            &self.owner,
            &self.correlation_id,
            &self.lease_expires_at,
            &self.not_before,
            &self.prepared_payload,
            &self.result,
            &self.result_expired,
            &self.external_ref,
            &self.error_category,
            &self.error_message,
            &self.error_http_status,
            &self.created_at,
            &self.updated_at,
            &self.lease_id,
            &self.lease_expiry,
            &self.reported,
            &self.budget_base,
            &self.window_start,
            &self.final_at,
            &self.active_at,
            &self.review_reason,
            &self.stuck_alerted,
            &self.version,
            &self.cost_tokens,
            &self.cost_usd_nanos,
            &self.retry_tokens,
            &self.retry_usd_nanos,
            &self.review_since,
            &self.request,
        ]
    }
}

/// The mark of a statement that counts the records it writes ([`counted_insert`],
/// [`counted_move`]): schema V17's row triggers skip the rows of a statement whose text
/// (`current_query()`) holds it. The mark travels with the statement itself, so it survives
/// any pooler; a statement without it (an older idem, a person in `psql`) is counted by the
/// triggers as before.
pub(crate) const COUNTS_ITSELF: &str = "/* idem:counts-itself */";

/// The bare guarded `INSERT` of a record: no row back means another writer got there first.
/// Not to be run on its own: a statement that inserts a record counts it ([`counted_insert`]).
static INSERT_RECORD_BARE: LazyLock<String> = LazyLock::new(|| {
    let placeholders: Vec<String> = (1..=RECORD_COLUMNS.len())
        .map(|i| format!("${i}"))
        .collect();
    format!(
        "INSERT INTO records ({}) VALUES ({}) ON CONFLICT (namespace, key) DO NOTHING \
         RETURNING version",
        *RECORD_COLS,
        placeholders.join(", ")
    )
});

/// `, nc AS (…)`: a data-modifying CTE that counts a record inserted by the CTE `src` (one row
/// when the guarded insert happened, none otherwise) in `namespace_counts`, under its state
/// (`$3`) and this connection's slot (its backend pid, as the triggers did; schema V16).
pub(crate) fn counted_insert(src: &str) -> String {
    format!(
        ", nc AS ({COUNTS_ITSELF} INSERT INTO namespace_counts (namespace, state, slot, n) \
         SELECT $1::TEXT, $3::TEXT, pg_backend_pid(), 1 FROM {src} \
         ON CONFLICT (namespace, state, slot) DO UPDATE SET n = namespace_counts.n + 1)"
    )
}

/// The placeholder of the state a record moves from, in the statement forms built with
/// [`counted_move`]; [`numbered`] gives it the number after every other parameter.
const FROM_STATE: &str = "$FROM_STATE";

/// `, nc AS (…)`: a data-modifying CTE that moves an updated record's count from the state
/// it had (the parameter [`FROM_STATE`]: the state of the version the update's guard
/// required, so exactly the row it changed) to its new state (`$3`), once per row of `src`,
/// and writes nothing when the state did not change. Wrap the finished statement in
/// [`numbered`].
pub(crate) fn counted_move(src: &str) -> String {
    format!(
        ", nc AS ({COUNTS_ITSELF} INSERT INTO namespace_counts (namespace, state, slot, n) \
         SELECT $1::TEXT, m.state, pg_backend_pid(), m.n FROM {src} \
         CROSS JOIN (VALUES ({FROM_STATE}::TEXT, -1::BIGINT), ($3::TEXT, 1::BIGINT)) AS m (state, n) \
         WHERE {FROM_STATE}::TEXT <> $3::TEXT \
         ON CONFLICT (namespace, state, slot) DO UPDATE SET n = namespace_counts.n + EXCLUDED.n)"
    )
}

/// `sql` with [`FROM_STATE`] numbered after its highest parameter: the caller pushes the
/// state the record moves from last.
pub(crate) fn numbered(sql: &str) -> String {
    let highest = sql
        .match_indices('$')
        .filter_map(|(i, _)| {
            let digits: String = sql[i + 1..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse::<usize>().ok()
        })
        .max()
        .unwrap_or(0);
    sql.replace(FROM_STATE, &format!("${}", highest + 1))
}

/// The guarded `INSERT` of a record, counted: no row back means another writer got there
/// first.
pub(crate) static INSERT_RECORD: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH w AS ({}){} SELECT version FROM w",
        *INSERT_RECORD_BARE,
        counted_insert("w")
    )
});

/// The bare `UPDATE` guarded by the version that was read (parameter `RECORD_COLUMNS.len() +
/// 1`): 0 rows means the record moved. Not to be run on its own: a statement that updates a
/// record moves its count ([`counted_move`]).
pub(crate) static UPDATE_RECORD_BARE: LazyLock<String> =
    LazyLock::new(|| idem_store::sql::update_record('$'));

/// The guarded update, counted; the state moved from is the last parameter. One row back
/// when the guard held.
pub(crate) static UPDATE_RECORD: LazyLock<String> = LazyLock::new(|| {
    numbered(&format!(
        "WITH w AS ({} RETURNING version){} SELECT version FROM w",
        *UPDATE_RECORD_BARE,
        counted_move("w")
    ))
});

/// Parameters of an event after `(namespace, key)` ([`EventParams::tail_params`]).
pub(crate) const EVENT_TAIL_LEN: usize = 11;

/// The event columns, `(namespace, key)` first.
pub(crate) const EVENT_INSERT_COLUMNS: &str = "(namespace, key, at, type, from_state, to_state, \
    attempt, owner, correlation_id, note, actor, cost_tokens, cost_usd_nanos)";

/// Event columns after `(namespace, key)`, with casts so the single-statement forms below can
/// take them as parameters of a `SELECT` list.
pub(crate) fn event_tail(first: usize) -> String {
    let casts: [&str; EVENT_TAIL_LEN] = [
        "BIGINT", "TEXT", "TEXT", "TEXT", "BIGINT", "TEXT", "TEXT", "TEXT", "TEXT", "BIGINT",
        "BIGINT",
    ];
    typed_params(first, &casts)
}

/// `$first::cast0, $first+1::cast1, …`: parameters with explicit types, for a `SELECT` list
/// (an `INSERT … SELECT` does not infer them from the target columns).
pub(crate) fn typed_params(first: usize, casts: &[&str]) -> String {
    casts
        .iter()
        .enumerate()
        .map(|(i, t)| format!("${}::{t}", first + i))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A fresh record and its one event in one autocommit statement: the event is inserted only
/// when the guarded insert was (no row back = another writer got there first).
pub(crate) static INSERT_RECORD_WITH_EVENT: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH w AS ({}){} INSERT INTO events {EVENT_INSERT_COLUMNS} \
         SELECT $1, $2, {} FROM w RETURNING seq",
        *INSERT_RECORD_BARE,
        counted_insert("w"),
        event_tail(RECORD_COLUMNS.len() + 1)
    )
});

/// A guarded update and its one event in one autocommit statement ($n+1 = version read, the
/// state moved from last).
pub(crate) static UPDATE_RECORD_WITH_EVENT: LazyLock<String> = LazyLock::new(|| {
    numbered(&format!(
        "WITH w AS ({} RETURNING version){} INSERT INTO events {EVENT_INSERT_COLUMNS} \
         SELECT $1, $2, {} FROM w RETURNING seq",
        *UPDATE_RECORD_BARE,
        counted_move("w"),
        event_tail(RECORD_COLUMNS.len() + 2)
    ))
});

/// Parameters of a stats bump after those of the statement it joins: hour, then the six
/// counters ([`stats_params`]).
pub(crate) const STATS_LEN: usize = 7;

/// `, st AS (…)`: a data-modifying CTE that adds a step's counts (parameters `$first` …
/// `$first+6`) to the namespace's hourly bucket of this connection's slot, once per row of
/// `src` (the CTE whose row says the guarded write happened). See schema V7.
pub(crate) fn stats_cte(src: &str, first: usize) -> String {
    let p = |i: usize| format!("${}::BIGINT", first + i);
    format!(
        ", st AS (INSERT INTO ns_stats (namespace, hour, slot, {}) \
         SELECT $1::TEXT, {}, pg_backend_pid(), {}, {}, {}, {}, {}, {} FROM {src} \
         ON CONFLICT (namespace, hour, slot) DO UPDATE SET {})",
        idem_store::sql::BUMP_NS_STATS_COLUMNS,
        p(0),
        p(1),
        p(2),
        p(3),
        p(4),
        p(5),
        p(6),
        idem_store::sql::ns_stats_additions()
    )
}

/// A stats bump's parameters in [`stats_cte`] order.
pub(crate) fn stats_params(b: &idem_store::engine::StatsBump) -> [&(dyn ToSql + Sync); STATS_LEN] {
    [
        &b.hour,
        &b.acquired_first,
        &b.acquired_retry,
        &b.tokens,
        &b.usd_nanos,
        &b.retry_tokens,
        &b.retry_usd_nanos,
    ]
}

/// [`INSERT_RECORD_WITH_EVENT`] that also bumps the namespace's stats ($45..$51).
pub(crate) static INSERT_RECORD_WITH_EVENT_STATS: LazyLock<String> = LazyLock::new(|| {
    let n = RECORD_COLUMNS.len();
    format!(
        "WITH w AS ({}){}, e AS (INSERT INTO events {EVENT_INSERT_COLUMNS} \
         SELECT $1, $2, {} FROM w RETURNING seq){} SELECT seq FROM e",
        *INSERT_RECORD_BARE,
        counted_insert("w"),
        event_tail(n + 1),
        stats_cte("e", n + 1 + EVENT_TAIL_LEN)
    )
});

/// [`UPDATE_RECORD_WITH_EVENT`] that also bumps the namespace's stats ($46..$52).
pub(crate) static UPDATE_RECORD_WITH_EVENT_STATS: LazyLock<String> = LazyLock::new(|| {
    let n = RECORD_COLUMNS.len();
    numbered(&format!(
        "WITH w AS ({} RETURNING version){}, e AS (INSERT INTO events {EVENT_INSERT_COLUMNS} \
         SELECT $1, $2, {} FROM w RETURNING seq){} SELECT seq FROM e",
        *UPDATE_RECORD_BARE,
        counted_move("w"),
        event_tail(n + 2),
        stats_cte("e", n + 2 + EVENT_TAIL_LEN)
    ))
});

pub(crate) static INSERT_EVENT: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT INTO events {EVENT_INSERT_COLUMNS} \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) RETURNING seq"
    )
});

pub(crate) const EVENT_COLS: &str = "seq, at, type, from_state, to_state, attempt, owner, \
    correlation_id, note, actor, cost_tokens, cost_usd_nanos";

/// An event draft as owned SQL parameters for [`INSERT_EVENT`].
pub(crate) struct EventParams {
    namespace: String,
    key: String,
    at: i64,
    kind: &'static str,
    from_state: Option<&'static str>,
    to_state: Option<&'static str>,
    attempt: i64,
    owner: Option<String>,
    correlation_id: Option<String>,
    note: Option<String>,
    actor: Option<String>,
    cost_tokens: Option<i64>,
    cost_usd_nanos: Option<i64>,
}

impl EventParams {
    pub(crate) fn new(ns: &Namespace, key: &Key, e: &EventDraft) -> Self {
        EventParams {
            namespace: ns.as_str().to_owned(),
            key: key.as_str().to_owned(),
            at: e.at.0,
            kind: e.kind.as_str(),
            from_state: e.from_state.map(State::as_str),
            to_state: e.to_state.map(State::as_str),
            attempt: i64::from(e.attempt),
            owner: e.owner.clone(),
            correlation_id: e.correlation_id.clone(),
            note: e.note.clone(),
            actor: e.actor.clone(),
            cost_tokens: e.cost.map(|c| amount(c.tokens)),
            cost_usd_nanos: e.cost.map(|c| amount(c.usd_nanos)),
        }
    }

    /// The parameters after `(namespace, key)` (for the single-statement forms).
    pub(crate) fn tail_params(&self) -> [&(dyn ToSql + Sync); EVENT_TAIL_LEN] {
        [
            &self.at,
            &self.kind,
            &self.from_state,
            &self.to_state,
            &self.attempt,
            &self.owner,
            &self.correlation_id,
            &self.note,
            &self.actor,
            &self.cost_tokens,
            &self.cost_usd_nanos,
        ]
    }

    /// Every parameter: `(namespace, key)`, then [`EventParams::tail_params`].
    pub(crate) fn params(&self) -> [&(dyn ToSql + Sync); EVENT_TAIL_LEN + 2] {
        let tail = self.tail_params();
        std::array::from_fn(|i| match i {
            0 => &self.namespace as &(dyn ToSql + Sync),
            1 => &self.key,
            _ => tail[i - 2],
        })
    }
}

/// Reads an event selected with [`EVENT_COLS`].
pub(crate) fn event_from_row(row: &Row) -> Result<Event, StoreError> {
    let kind: String = get(row, 2)?;
    Ok(Event {
        seq: get(row, 0)?,
        at: Timestamp(get(row, 1)?),
        kind: EventType::parse(&kind).ok_or_else(|| corrupt("event type", &kind))?,
        from_state: opt_state(get(row, 3)?)?,
        to_state: opt_state(get(row, 4)?)?,
        attempt: u32_of(get(row, 5)?, "event attempt")?,
        owner: get(row, 6)?,
        correlation_id: get(row, 7)?,
        note: get(row, 8)?,
        actor: get(row, 9)?,
        cost: match (get::<Option<i64>>(row, 10)?, get::<Option<i64>>(row, 11)?) {
            (None, None) => None,
            (t, u) => Some(AttemptCost {
                tokens: amount_of(t.unwrap_or(0), "event cost_tokens")?,
                usd_nanos: amount_of(u.unwrap_or(0), "event cost_usd_nanos")?,
            }),
        },
    })
}

/// The policy stored for a namespace (defaults when there is no row). Stored policies are
/// merged over the defaults, so fields added by later versions get their default. Its
/// `alert_secret` is `None`: reads that show or use it add it from `secrets`.
pub(crate) fn policy_from_text(text: Option<&str>) -> Result<Policy, StoreError> {
    match text {
        None => Ok(Policy::default()),
        Some(t) => {
            let v: Value = serde_json::from_str(t).map_err(|e| corrupt("policy", e))?;
            Policy::default()
                .patch(&v)
                .map_err(|e| corrupt("policy", e))
        }
    }
}

/// The stored form of a policy: no `alert_secret` (it lives in `secrets`, see
/// [`idem_store::policy_at_rest`]); read back by [`policy_from_text`].
pub(crate) fn policy_text(p: &Policy) -> Result<String, StoreError> {
    idem_store::policy_at_rest(p)
}

/// Conversions for counts and limits coming from the API (`usize`) into SQL (`BIGINT`).
pub(crate) fn as_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

pub(crate) fn as_u64(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_parameter_is_sent_as_the_text_a_string_of_it_would_be() {
        let v = serde_json::json!({
            "b": [1, 2.5, -0.0, null, true],
            "a": "line\nbreak \"quoted\" é \u{1F600}",
            "big": "x".repeat(300 * 1024),
        });
        let text = serde_json::to_string(&v).expect("text");
        for p in [JsonParam::Value(&v), JsonParam::Text(text.clone())] {
            let mut out = BytesMut::new();
            assert!(matches!(
                p.to_sql_checked(&Type::TEXT, &mut out),
                Ok(IsNull::No)
            ));
            assert_eq!(&out[..], text.as_bytes());
            assert_eq!(p.text().expect("text"), text);
            // Typed like the text it replaces, and refused where text would be.
            assert!(p.to_sql_checked(&Type::INT8, &mut BytesMut::new()).is_err());
        }
        // The record as stored parses the same text back.
        let mut r = crate::cache::tests::rec("k", 1, 0);
        r.result = Some(v.clone());
        let rp = RecordParams::new(&r).expect("params");
        assert_eq!(rp.stored(&r).expect("stored").result, Some(v));
        let owned = RecordParams::owned(&r).expect("owned");
        assert!(matches!(owned.result, Some(JsonParam::Text(ref t)) if *t == text));
    }

    #[test]
    fn the_state_moved_from_is_numbered_after_every_other_parameter() {
        assert_eq!(
            numbered("SELECT $1, $12, $3 WHERE $FROM_STATE <> $3"),
            "SELECT $1, $12, $3 WHERE $13 <> $3"
        );
        assert_eq!(numbered("SELECT $FROM_STATE, $FROM_STATE"), "SELECT $1, $1");
        let n = RECORD_COLUMNS.len();
        // The plain update: the record, the version, then the state moved from.
        assert!(UPDATE_RECORD.contains(&format!("version = ${}", n + 1)));
        assert!(UPDATE_RECORD.contains(&format!("VALUES (${}::TEXT, -1::BIGINT)", n + 2)));
        assert!(!UPDATE_RECORD_WITH_EVENT_STATS.contains(FROM_STATE));
        // An insert counts under its own state and needs no more parameters.
        assert!(INSERT_RECORD.contains("SELECT $1::TEXT, $3::TEXT, pg_backend_pid(), 1 FROM w"));
    }
}
