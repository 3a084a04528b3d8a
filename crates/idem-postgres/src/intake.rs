//! The intake's tables in PostgreSQL: `sources` (configuration JSON, no secrets) and
//! `intake_events` (one row per inbound event beside its record). A source and its secrets,
//! an event row and its forward item, are each written in one transaction. This module must
//! never log a body, a header value or a secret (driver errors name no parameter values).

use std::sync::LazyLock;

use idem_core::{State, Timestamp};
use idem_store::intake::{destination_owner, forward_owner, source_owner};
use idem_store::{
    Delivered, IntakeEventRow, IntakeQuery, IntakeUpdate, Rider, SourceDelete, SourceRow,
    SourceWrite, StoreError,
};
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use crate::column;
use crate::error::PgError;
use crate::rows::typed_params;
use crate::secrets::{delete_secrets, upsert_with_secrets};
use crate::PgStore;

pub(crate) async fn source_put(
    store: &PgStore,
    w: &SourceWrite,
    now: Timestamp,
) -> Result<bool, PgError> {
    let mut writes: Vec<(idem_store::SecretOwner, Vec<String>)> = vec![];
    if let Some(list) = &w.secrets {
        writes.push((
            source_owner(&w.name),
            list.iter().map(|s| s.expose().to_owned()).collect(),
        ));
    }
    if let Some(fs) = &w.forward_secret {
        writes.push((
            forward_owner(&w.name),
            fs.iter().map(|s| s.expose().to_owned()).collect(),
        ));
    }
    for (dest, s) in &w.destination_secrets {
        writes.push((
            destination_owner(&w.name, dest),
            s.iter().map(|s| s.expose().to_owned()).collect(),
        ));
    }
    upsert_with_secrets(
        store,
        "INSERT INTO sources (name, config, created_at, updated_at) VALUES ($1, $2, $3, $3) \
         ON CONFLICT (name) DO UPDATE SET config = excluded.config, \
         updated_at = excluded.updated_at RETURNING (xmax = 0)",
        &[&w.name, &w.config, &now.0],
        writes,
        now,
    )
    .await
}

fn source_row(r: &Row) -> Result<SourceRow, PgError> {
    Ok(SourceRow {
        name: column(r, 0)?,
        config: column(r, 1)?,
        created_at: Timestamp(column(r, 2)?),
        updated_at: Timestamp(column(r, 3)?),
    })
}

pub(crate) async fn source_get(store: &PgStore, name: &str) -> Result<Option<SourceRow>, PgError> {
    let client = store.client().await?;
    let rows = client
        .query(
            "SELECT name, config, created_at, updated_at FROM sources WHERE name = $1",
            &[&name],
        )
        .await?;
    rows.first().map(source_row).transpose()
}

pub(crate) async fn source_list(store: &PgStore) -> Result<Vec<SourceRow>, PgError> {
    let client = store.client().await?;
    let rows = client
        .query(
            "SELECT name, config, created_at, updated_at FROM sources ORDER BY name",
            &[],
        )
        .await?;
    rows.iter().map(source_row).collect()
}

pub(crate) async fn source_delete(
    store: &PgStore,
    name: &str,
    force: bool,
) -> Result<SourceDelete, PgError> {
    let mut client = store.client().await?;
    let tx = client.transaction().await?;
    let found = tx
        .query("SELECT 1 FROM sources WHERE name = $1 FOR UPDATE", &[&name])
        .await?;
    if found.is_empty() {
        return Ok(SourceDelete::NotFound);
    }
    if !force {
        let row = tx
            .query_one(
                "SELECT COUNT(*) FROM intake_events e LEFT JOIN records r \
                 ON r.namespace = e.namespace AND r.key = e.key \
                 WHERE e.source = $1 AND (r.state IS NULL OR r.state <> 'completed')",
                &[&name],
            )
            .await?;
        let n: i64 = column(&row, 0)?;
        if n > 0 {
            return Ok(SourceDelete::Undelivered(n as u64));
        }
    }
    tx.execute("DELETE FROM sources WHERE name = $1", &[&name])
        .await?;
    for owner in [source_owner(name), forward_owner(name)] {
        delete_secrets(&tx, &owner).await?;
    }
    // The named destinations' secrets (`{source}/{destination}`).
    tx.execute(
        "DELETE FROM secrets WHERE kind = $1 AND left(owner, $2) = $3",
        &[
            &forward_owner(name).kind.as_str(),
            &(name.len() as i32 + 1),
            &format!("{name}/"),
        ],
    )
    .await?;
    tx.commit().await?;
    Ok(SourceDelete::Deleted)
}

/// Parameters of [`rider_ctes`]: the event row's ten, its forward item's seven, six arrays of
/// its deliveries to named destinations, then the row's `event_key` and `destination` (a
/// delivery's row held under another key).
pub(crate) const RIDER_PARAMS: usize = 25;

/// Four CTEs writing a [`Rider`]: `i` stores the event's row (once: `ON CONFLICT DO NOTHING`)
/// for each row of `from` (`""`: once), `o` its forward item when `i` stored the row and the
/// rider has one (its kind, `$p+10`, is not NULL), `d` the rows of its deliveries to named
/// destinations (each only where neither a row nor a record holds its key) and `dq` their
/// forward items, both only when `i` stored the row. Parameters `$p` .. `$p+24`
/// ([`RiderParams`]).
pub(crate) fn rider_ctes(from: &str, p: usize) -> String {
    let row = typed_params(
        p,
        &[
            "TEXT", "TEXT", "TEXT", "TEXT", "TEXT", "TEXT", "BYTEA", "BIGINT", "TEXT", "BIGINT",
        ],
    );
    let item = typed_params(
        p + 10,
        &["TEXT", "TEXT", "TEXT", "TEXT", "BYTEA", "BIGINT", "BIGINT"],
    );
    // After the row's namespace (`$p`): its key, source, event id, content type and
    // received_at, the item's kind; the deliveries' keys, names, kinds, dedupes, payloads and
    // due times.
    let [p1, p2, p3, p4, p7, k] = [1, 2, 3, 4, 7, 10].map(|i| p + i);
    let [dk, dn, qk, qd, qp, qt, ek, ed] = [17, 18, 19, 20, 21, 22, 23, 24].map(|i| p + i);
    format!(
        "i AS (INSERT INTO intake_events (namespace, key, source, event_id, content_type, \
         headers, body, received_at, destinations, delivered_at, event_key, destination) \
         SELECT {row}, ${ek}::TEXT, ${ed}::TEXT {from} \
         ON CONFLICT (namespace, key) DO NOTHING RETURNING 1), \
         o AS (INSERT INTO outbox (kind, namespace, key, dedupe, payload, created_at, due_at) \
         SELECT {item} FROM i WHERE ${k}::TEXT IS NOT NULL \
         ON CONFLICT (namespace, key, kind, dedupe) DO NOTHING RETURNING id), \
         d AS (INSERT INTO intake_events (namespace, key, source, event_id, content_type, \
         headers, body, received_at, event_key, destination) \
         SELECT ${p}::TEXT, u.k, ${p2}::TEXT, ${p3}::TEXT, ${p4}::TEXT, '{{}}', NULL, \
         ${p7}::BIGINT, ${p1}::TEXT, u.n FROM i, unnest(${dk}::TEXT[], ${dn}::TEXT[]) AS u(k, n) \
         WHERE NOT EXISTS (SELECT 1 FROM records r WHERE r.namespace = ${p}::TEXT AND r.key = u.k) \
         ON CONFLICT (namespace, key) DO NOTHING RETURNING 1), \
         dq AS (INSERT INTO outbox (kind, namespace, key, dedupe, payload, created_at, due_at) \
         SELECT u.kind, ${p}::TEXT, u.k, u.dd, u.pl, ${p7}::BIGINT, u.due FROM i, \
         unnest(${qk}::TEXT[], ${dk}::TEXT[], ${qd}::TEXT[], ${qp}::BYTEA[], ${qt}::BIGINT[]) \
         AS u(kind, k, dd, pl, due) \
         ON CONFLICT (namespace, key, kind, dedupe) DO NOTHING RETURNING id)"
    )
}

/// Whether the row under a rider's key belongs to something else
/// ([`idem_store::NewIntakeEvent::is_same`]): `$1` namespace, `$2` key; the row's identity back
/// (no row: nothing there). Run as a statement of its own inside the transaction that
/// inserted the record, after the rider found the key's row there: it sees a row a concurrent
/// transaction committed meanwhile, which the rider's own statement could not.
pub(crate) const RIDER_KEY_ROW: &str = "SELECT source, event_id, event_key, destination \
     FROM intake_events WHERE namespace = $1 AND key = $2";

/// Whether `row` ([`RIDER_KEY_ROW`]) is another record's row than the rider's.
pub(crate) fn rider_key_taken(rider: &Rider, row: Option<&Row>) -> Result<bool, PgError> {
    let Some(row) = row else {
        return Ok(false);
    };
    let source: String = column(row, 0)?;
    let id: Option<String> = column(row, 1)?;
    let ek: Option<String> = column(row, 2)?;
    let dest: Option<String> = column(row, 3)?;
    Ok(!rider
        .intake
        .is_same(&source, id.as_deref(), ek.as_deref(), dest.as_deref()))
}

/// A rider on its own, in the transaction that inserts its record: one row back, whether the
/// event's row was stored.
pub(crate) static STORE_RIDER: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!("WITH {} SELECT EXISTS (SELECT 1 FROM i)", rider_ctes("", 1))
});

/// The values of [`rider_ctes`] for one rider (the item's all NULL when it has none).
pub(crate) struct RiderParams<'a> {
    r: &'a Rider,
    /// A delivery's row keeps no body (its event's row does).
    body: Option<&'a [u8]>,
    delivered_at: Option<i64>,
    kind: Option<&'static str>,
    namespace: Option<&'a str>,
    key: Option<&'a str>,
    dedupe: Option<&'a str>,
    payload: Option<&'a [u8]>,
    created_at: Option<i64>,
    due_at: Option<i64>,
    d_keys: Vec<String>,
    d_names: Vec<String>,
    d_kinds: Vec<String>,
    d_dedupes: Vec<String>,
    d_payloads: Vec<Vec<u8>>,
    d_due: Vec<i64>,
}

impl<'a> RiderParams<'a> {
    pub(crate) fn new(r: &'a Rider) -> Self {
        let f = r.forward.as_ref();
        let ds = &r.deliveries;
        RiderParams {
            r,
            body: r
                .intake
                .event_key
                .is_none()
                .then_some(r.intake.body.as_slice()),
            delivered_at: r.intake.delivered_at.map(|t| t.0),
            kind: f.map(|f| f.kind.as_str()),
            namespace: f.map(|f| f.namespace.as_str()),
            key: f.map(|f| f.key.as_str()),
            dedupe: f.map(|f| f.dedupe.as_str()),
            payload: f.map(|f| f.payload.as_slice()),
            created_at: f.map(|_| r.intake.received_at.0),
            due_at: f.map(|f| f.due_at.0),
            d_keys: ds.iter().map(|d| d.key.clone()).collect(),
            d_names: ds.iter().map(|d| d.destination.clone()).collect(),
            d_kinds: ds.iter().map(|d| d.item.kind.as_str().to_owned()).collect(),
            d_dedupes: ds.iter().map(|d| d.item.dedupe.clone()).collect(),
            d_payloads: ds.iter().map(|d| d.item.payload.clone()).collect(),
            d_due: ds.iter().map(|d| d.item.due_at.0).collect(),
        }
    }

    pub(crate) fn params(&self) -> [&(dyn ToSql + Sync); RIDER_PARAMS] {
        let ev = &self.r.intake;
        [
            &ev.namespace,
            &ev.key,
            &ev.source,
            &ev.event_id,
            &ev.content_type,
            &ev.headers,
            &self.body,
            &ev.received_at.0,
            &ev.destinations,
            &self.delivered_at,
            &self.kind,
            &self.namespace,
            &self.key,
            &self.dedupe,
            &self.payload,
            &self.created_at,
            &self.due_at,
            &self.d_keys,
            &self.d_names,
            &self.d_kinds,
            &self.d_dedupes,
            &self.d_payloads,
            &self.d_due,
            &ev.event_key,
            &ev.destination,
        ]
    }
}

/// `SELECT` of the columns of every event row `e` (its record joined as `r`), with `state`
/// the state it shows (column 10).
fn select_events(state: &str) -> String {
    format!(
        "SELECT e.namespace, e.key, e.source, e.event_id, e.content_type, e.headers, e.body, \
         e.received_at, e.attempts, e.delivered_at, {state}, e.event_key, e.destination, \
         e.destinations FROM intake_events e LEFT JOIN records r \
         ON r.namespace = e.namespace AND r.key = e.key"
    )
}

/// Every event row with its record's state.
static SELECT_EVENTS: LazyLock<String> = LazyLock::new(|| select_events("r.state"));

/// The list of a source's rows (see `IntakeQuery`): `$2` filters on the state each row shows,
/// its event's ([`idem_store::intake::event_list_state`]) for event rows alone, each row's
/// own record's when delivery rows are listed too.
fn list_sql(state: &str) -> String {
    format!(
        "{} \
         WHERE e.source = $1 \
         AND ($2::text IS NULL OR {state} = $2) \
         AND ($3::bigint IS NULL OR e.received_at < $3 OR (e.received_at = $3 AND e.key < $4)) \
         AND ($5::bigint IS NULL OR e.received_at >= $5) \
         AND ($6::bigint IS NULL OR e.received_at <= $6) \
         AND ($8::boolean OR e.event_key IS NULL) \
         ORDER BY e.received_at DESC, e.key DESC LIMIT $7",
        select_events(state)
    )
}

static LIST_EVENTS: LazyLock<String> =
    LazyLock::new(|| list_sql(&idem_store::intake::event_list_state()));
static LIST_ROWS: LazyLock<String> = LazyLock::new(|| list_sql("r.state"));

fn event_row(r: &Row) -> Result<IntakeEventRow, PgError> {
    let state: Option<String> = column(r, 10)?;
    Ok(IntakeEventRow {
        namespace: column(r, 0)?,
        key: column(r, 1)?,
        source: column(r, 2)?,
        event_id: column(r, 3)?,
        content_type: column(r, 4)?,
        headers: column(r, 5)?,
        body: column(r, 6)?,
        received_at: Timestamp(column(r, 7)?),
        attempts: column(r, 8)?,
        delivered_at: column::<Option<i64>>(r, 9)?.map(Timestamp),
        state: match state {
            None => None,
            Some(s) => {
                Some(State::parse(&s).ok_or_else(|| {
                    PgError::from(StoreError::Corrupt(format!("record state {s}")))
                })?)
            }
        },
        event_key: column(r, 11)?,
        destination: column(r, 12)?,
        destinations: column(r, 13)?,
    })
}

pub(crate) async fn intake_event(
    store: &PgStore,
    ns: &str,
    key: &str,
) -> Result<Option<IntakeEventRow>, PgError> {
    let client = store.client().await?;
    let sql = format!("{} WHERE e.namespace = $1 AND e.key = $2", *SELECT_EVENTS);
    let rows = client.query(&sql, &[&ns, &key]).await?;
    rows.first().map(event_row).transpose()
}

pub(crate) async fn intake_list(
    store: &PgStore,
    q: &IntakeQuery,
) -> Result<Vec<IntakeEventRow>, PgError> {
    let client = store.client().await?;
    let sql: &str = if q.deliveries {
        &LIST_ROWS
    } else {
        &LIST_EVENTS
    };
    let (at, key) = match &q.after {
        Some((t, k)) => (Some(*t), k.clone()),
        None => (None, String::new()),
    };
    let rows = client
        .query(
            sql,
            &[
                &q.source,
                &q.state.map(State::as_str),
                &at,
                &key,
                &q.since.map(|t| t.0),
                &q.until.map(|t| t.0),
                &(q.limit as i64),
                &q.deliveries,
            ],
        )
        .await?;
    rows.iter().map(event_row).collect()
}

/// Appends an attempt and/or sets `delivered_at` of the event `$1`/`$2`: `$p` the attempt
/// (NULL: none), `$p+1` whether `delivered_at` changes, `$p+2` its new value; `and` adds a
/// condition (empty: none). The attempt (one compact JSON object, from the same serializer
/// that wrote the array) is spliced into the stored array as text, which gives exactly what
/// [`idem_store::intake::append_attempt`] would (`[]` or anything that is not an array
/// starts a new one).
pub(crate) fn intake_update_sql(p: usize, and: &str) -> String {
    let and = if and.is_empty() {
        String::new()
    } else {
        format!(" AND {and}")
    };
    let (a, set, at) = (p, p + 1, p + 2);
    format!(
        "UPDATE intake_events SET \
         attempts = CASE WHEN ${a}::TEXT IS NULL THEN attempts \
             WHEN attempts = '[]' OR left(attempts, 1) <> '[' OR right(attempts, 1) <> ']' \
                 THEN '[' || ${a}::TEXT || ']' \
             ELSE left(attempts, -1) || ',' || ${a}::TEXT || ']' END, \
         delivered_at = CASE WHEN ${set}::BOOLEAN THEN ${at}::BIGINT ELSE delivered_at END \
         WHERE namespace = $1 AND key = $2{and}"
    )
}

/// [`intake_update_sql`] on its own, one autocommit statement.
pub(crate) static INTAKE_UPDATE: LazyLock<String> = LazyLock::new(|| intake_update_sql(3, ""));

/// The parameters of [`intake_update_sql`] after the namespace and the key, in order.
pub(crate) struct UpdateParams {
    attempt: Option<String>,
    set: bool,
    delivered: Option<i64>,
}

impl UpdateParams {
    pub(crate) fn new(u: &IntakeUpdate) -> Self {
        // Re-serialized as `append_attempt` does (an attempt that is not JSON is dropped
        // there too).
        let attempt: Option<String> = u
            .attempt
            .as_deref()
            .and_then(|a| serde_json::from_str::<serde_json::Value>(a).ok())
            .map(|v| v.to_string());
        let (set, delivered) = match u.delivered {
            Delivered::Keep => (false, None),
            Delivered::At(t) => (true, Some(t.0)),
            Delivered::Clear => (true, None),
        };
        UpdateParams {
            attempt,
            set,
            delivered,
        }
    }

    /// Nothing to change.
    pub(crate) fn is_noop(&self) -> bool {
        self.attempt.is_none() && !self.set
    }

    pub(crate) fn params(&self) -> [&(dyn ToSql + Sync); 3] {
        [&self.attempt, &self.set, &self.delivered]
    }
}

pub(crate) async fn intake_update(store: &PgStore, u: &IntakeUpdate) -> Result<(), PgError> {
    let p = UpdateParams::new(u);
    if p.is_noop() {
        return Ok(());
    }
    let client = store.client().await?;
    let stmt = client.prepare_cached(&INTAKE_UPDATE).await?;
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![&u.namespace, &u.key];
    params.extend(p.params());
    client.execute(&stmt, &params).await?;
    Ok(())
}

pub(crate) async fn intake_backlog(store: &PgStore) -> Result<Vec<(String, String, u64)>, PgError> {
    let client = store.client().await?;
    let rows = client
        .query(
            "SELECT source, COALESCE(destination, 'default'), COUNT(*) FROM intake_events \
             WHERE delivered_at IS NULL GROUP BY 1, 2 ORDER BY 1, 2",
            &[],
        )
        .await?;
    rows.iter()
        .map(|r| {
            Ok((
                column::<String>(r, 0)?,
                column::<String>(r, 1)?,
                column::<i64>(r, 2)? as u64,
            ))
        })
        .collect()
}

pub(crate) async fn intake_dead_letters(store: &PgStore) -> Result<Vec<(String, u64)>, PgError> {
    let client = store.client().await?;
    let sql = format!(
        "SELECT e.source, COUNT(*) FROM intake_events e JOIN records r \
         ON r.namespace = e.namespace AND r.key = e.key \
         WHERE e.delivered_at IS NULL AND r.state = {} GROUP BY e.source ORDER BY e.source",
        idem_store::sql::state(State::NeedsReview)
    );
    let rows = client.query(&sql, &[]).await?;
    rows.iter()
        .map(|r| Ok((column::<String>(r, 0)?, column::<i64>(r, 1)? as u64)))
        .collect()
}

/// Takes a paced destination's slot (see `Store::pace_take`). The guarded `UPDATE` is the
/// whole protocol: of two instances at once, the second waits for the first's row lock and
/// then re-checks `next_at <= now` against the committed value, so one slot goes to one
/// delivery.
pub(crate) async fn pace_take(
    store: &PgStore,
    source: &str,
    destination: &str,
    interval_ms: i64,
    now: Timestamp,
) -> Result<Option<Timestamp>, PgError> {
    let client = store.client().await?;
    client
        .execute(
            "INSERT INTO destination_pace (source, destination, next_at) VALUES ($1, $2, 0) \
             ON CONFLICT (source, destination) DO NOTHING",
            &[&source, &destination],
        )
        .await?;
    let taken = client
        .execute(
            "UPDATE destination_pace SET next_at = $3 + $4 \
             WHERE source = $1 AND destination = $2 AND next_at <= $3",
            &[&source, &destination, &now.0, &interval_ms.max(1)],
        )
        .await?;
    if taken == 1 {
        return Ok(None);
    }
    let row = client
        .query_one(
            "SELECT next_at FROM destination_pace WHERE source = $1 AND destination = $2",
            &[&source, &destination],
        )
        .await?;
    Ok(Some(Timestamp(column(&row, 0)?)))
}
