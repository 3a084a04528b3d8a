//! The outbox in PostgreSQL: the statements behind the `outbox_*` methods of the store and
//! the alert wrappers (`due_alerts`, `finish_alert`), shared by every instance on one
//! database.
//!
//! Exactly one sender per item, across instances: a claim selects due rows
//! `FOR UPDATE SKIP LOCKED` and, in the same statement, moves them to `leased` with a fresh
//! owner and `due_at` = the end of the lease. A concurrent claim skips the rows being claimed
//! and, once that commits, re-checks them against `due_at <= now` and finds them not due; a
//! leased row is claimable again only when its lease ran out. A finish changes a row only
//! while the finishing lease still owns it. This module must never hand one item to two live
//! leases, and never log a payload.

use std::sync::LazyLock;

use idem_core::Timestamp;
use idem_store::{
    NewOutboxItem, OutboxClaim, OutboxItem, OutboxKind, OutboxLease, OutboxOutcome, OutboxState,
};
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use crate::corrupt;
use crate::error::PgError;
use crate::rows::as_i64;
use crate::PgStore;

const ITEM_COLS: &str = "o.id, o.kind, o.namespace, o.key, o.dedupe, o.payload, o.created_at, \
    o.due_at, o.attempts, o.state, o.lease_owner, o.lease_until, o.last_error";

/// Enqueues one item; the unique key makes a repeat a no-op (no row back).
pub(crate) const ENQUEUE: &str = "INSERT INTO outbox \
    (kind, namespace, key, dedupe, payload, created_at, due_at) \
    VALUES ($1, $2, $3, $4, $5, $6, $7) \
    ON CONFLICT (namespace, key, kind, dedupe) DO NOTHING RETURNING id";

/// The values of [`ENQUEUE`] for one item, bound wherever an item is enqueued (on its own,
/// or in the transaction of the write that caused it).
pub(crate) struct Enqueue<'a> {
    kind: &'static str,
    item: &'a NewOutboxItem,
    now: i64,
}

impl<'a> Enqueue<'a> {
    pub(crate) fn new(item: &'a NewOutboxItem, now: Timestamp) -> Self {
        Enqueue {
            kind: item.kind.as_str(),
            item,
            now: now.0,
        }
    }

    pub(crate) fn params(&self) -> [&(dyn ToSql + Sync); 7] {
        let i = self.item;
        [
            &self.kind,
            &i.namespace,
            &i.key,
            &i.dedupe,
            &i.payload,
            &self.now,
            &i.due_at.0,
        ]
    }
}

fn item_from_row(r: &Row) -> Result<OutboxItem, PgError> {
    let kind: String = r.try_get(1).map_err(|e| corrupt(&e))?;
    let state: String = r.try_get(9).map_err(|e| corrupt(&e))?;
    let attempts: i64 = r.try_get(8).map_err(|e| corrupt(&e))?;
    let owner: Option<String> = r.try_get(10).map_err(|e| corrupt(&e))?;
    let until: Option<i64> = r.try_get(11).map_err(|e| corrupt(&e))?;
    let bad = |what: &str, v: &str| {
        PgError::Store(idem_store::StoreError::Corrupt(format!(
            "outbox {what}: {v}"
        )))
    };
    Ok(OutboxItem {
        id: r.try_get(0).map_err(|e| corrupt(&e))?,
        kind: OutboxKind::parse(&kind).ok_or_else(|| bad("kind", &kind))?,
        namespace: r.try_get(2).map_err(|e| corrupt(&e))?,
        key: r.try_get(3).map_err(|e| corrupt(&e))?,
        dedupe: r.try_get(4).map_err(|e| corrupt(&e))?,
        payload: r.try_get(5).map_err(|e| corrupt(&e))?,
        created_at: Timestamp(r.try_get(6).map_err(|e| corrupt(&e))?),
        due_at: Timestamp(r.try_get(7).map_err(|e| corrupt(&e))?),
        attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
        state: OutboxState::parse(&state).ok_or_else(|| bad("state", &state))?,
        lease: match (owner, until) {
            (Some(owner), Some(until)) => Some(OutboxLease {
                owner,
                until: Timestamp(until),
            }),
            _ => None,
        },
        last_error: r.try_get(12).map_err(|e| corrupt(&e))?,
    })
}

pub(crate) async fn enqueue(
    store: &PgStore,
    item: &NewOutboxItem,
    now: Timestamp,
) -> Result<Option<i64>, PgError> {
    let client = store.client().await?;
    let stmt = client.prepare_cached(ENQUEUE).await?;
    let rows = client
        .query(&stmt, &Enqueue::new(item, now).params())
        .await?;
    rows.first()
        .map(|r| r.try_get(0).map_err(|e| corrupt(&e)))
        .transpose()
}

pub(crate) static CLAIM: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "WITH due AS ( \
            SELECT id FROM outbox WHERE kind = $1 AND state IN ('pending', 'leased') \
            AND due_at <= $2 ORDER BY due_at, id LIMIT $3 FOR UPDATE SKIP LOCKED \
        ) \
        UPDATE outbox o SET state = 'leased', lease_owner = $4, lease_until = $5, due_at = $5 \
        FROM due WHERE o.id = due.id RETURNING {ITEM_COLS}"
    )
});

pub(crate) async fn claim(store: &PgStore, c: &OutboxClaim) -> Result<Vec<OutboxItem>, PgError> {
    let OutboxClaim {
        kind, now, limit, ..
    } = *c;
    let lease = c.fresh_lease();
    let client = store.client().await?;
    let stmt = client.prepare_cached(&CLAIM).await?;
    let rows = client
        .query(
            &stmt,
            &[
                &kind.as_str(),
                &now.0,
                &as_i64(limit),
                &lease.owner,
                &lease.until.0,
            ],
        )
        .await?;
    let mut out = rows
        .iter()
        .map(item_from_row)
        .collect::<Result<Vec<_>, _>>()?;
    // RETURNING gives no order; senders work oldest first.
    out.sort_by_key(|i| (i.created_at, i.id));
    if kind == OutboxKind::Forward && !out.is_empty() && store.records.enabled() {
        // Only a head start: the items are claimed whatever this read does (failing the
        // claim now would leave them leased to nobody until their lease ran out).
        if let Err(PgError::Store(e)) = remember_records(store, &client, &out).await {
            tracing::debug!(error = %e, "postgres: reading the claimed items' records failed");
        }
    }
    Ok(out)
}

/// The records of claimed forward items, read in one statement (they are sent next).
static ITEM_RECORDS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {} FROM records r \
         JOIN unnest($1::TEXT[], $2::TEXT[]) AS u(namespace, key) \
         ON r.namespace = u.namespace AND r.key = u.key",
        *crate::rows::R_RECORD_COLS
    )
});

/// Remembers the records of claimed forward items in the instance's record cache, so that
/// each delivery's start is one guarded statement rather than a read and a write (a record
/// moved meanwhile fails the guard and is read again: the cache is never trusted blindly).
async fn remember_records(
    store: &PgStore,
    client: &crate::conn::Conn,
    items: &[OutboxItem],
) -> Result<(), PgError> {
    // Records the instance remembers already (it received them, say) are not read again.
    let unknown = |i: &&OutboxItem| match (
        idem_core::Namespace::try_from(i.namespace.as_str()),
        idem_core::Key::try_from(i.key.as_str()),
    ) {
        (Ok(ns), Ok(key)) => store.records.get(&ns, &key).is_none(),
        _ => false,
    };
    let (namespaces, keys): (Vec<&str>, Vec<&str>) = items
        .iter()
        .filter(unknown)
        .map(|i| (i.namespace.as_str(), i.key.as_str()))
        .unzip();
    if keys.is_empty() {
        return Ok(());
    }
    let stmt = client.prepare_cached(&ITEM_RECORDS).await?;
    for row in client.query(&stmt, &[&namespaces, &keys]).await? {
        store.records.put(crate::rows::record_from_row(&row, 0)?);
    }
    Ok(())
}

/// The columns a finish writes (`$p+2..$p+5` of [`finish_sql`]): state, due_at, error,
/// finished_at.
fn finish_params(
    outcome: &OutboxOutcome,
    now: Timestamp,
) -> (&'static str, Option<i64>, Option<&str>, Option<i64>) {
    match outcome {
        OutboxOutcome::Done => (OutboxState::Done.as_str(), None, None, Some(now.0)),
        OutboxOutcome::Retry { at, error } => (
            OutboxState::Pending.as_str(),
            Some(at.0),
            error.as_deref(),
            None,
        ),
        OutboxOutcome::Dead { error } => (
            OutboxState::Dead.as_str(),
            None,
            error.as_deref(),
            Some(now.0),
        ),
    }
}

/// Records an outcome of item `$p` for lease owner `$p+1` (NULL: whoever holds a live item —
/// only the alert wrapper, whose callers predate leases), writing `$p+2..$p+5` (state,
/// due_at, error, finished_at); `and` adds a condition (empty: none). One row changed: the
/// outcome was recorded.
pub(crate) fn finish_sql(p: usize, and: &str) -> String {
    let and = if and.is_empty() {
        String::new()
    } else {
        format!(" AND {and}")
    };
    format!(
        "UPDATE outbox SET state = ${s}, attempts = attempts + 1, \
         due_at = COALESCE(${d}::BIGINT, due_at), last_error = COALESCE(${e}::TEXT, last_error), \
         finished_at = ${f}::BIGINT, lease_owner = NULL, lease_until = NULL \
         WHERE id = ${p}::BIGINT AND state IN ('pending', 'leased') \
           AND (${o}::TEXT IS NULL OR (state = 'leased' AND lease_owner = ${o})){and}",
        s = p + 2,
        d = p + 3,
        e = p + 4,
        f = p + 5,
        o = p + 1,
    )
}

/// [`finish_sql`] on its own: `$1` item, `$2` owner, `$3..$6` what it writes.
pub(crate) static FINISH: LazyLock<String> = LazyLock::new(|| finish_sql(1, ""));

/// The parameters of [`finish_sql`], in order.
pub(crate) struct FinishParams<'a> {
    id: i64,
    owner: Option<&'a str>,
    state: &'static str,
    due_at: Option<i64>,
    error: Option<&'a str>,
    finished_at: Option<i64>,
}

impl<'a> FinishParams<'a> {
    pub(crate) fn new(
        id: i64,
        lease: Option<&'a OutboxLease>,
        outcome: &'a OutboxOutcome,
        now: Timestamp,
    ) -> Self {
        let (state, due_at, error, finished_at) = finish_params(outcome, now);
        FinishParams {
            id,
            owner: lease.map(|l| l.owner.as_str()),
            state,
            due_at,
            error,
            finished_at,
        }
    }

    pub(crate) fn params(&self) -> [&(dyn ToSql + Sync); 6] {
        [
            &self.id,
            &self.owner,
            &self.state,
            &self.due_at,
            &self.error,
            &self.finished_at,
        ]
    }
}

pub(crate) async fn finish(
    store: &PgStore,
    id: i64,
    lease: &OutboxLease,
    outcome: &OutboxOutcome,
    now: Timestamp,
) -> Result<bool, PgError> {
    let client = store.client().await?;
    let stmt = client.prepare_cached(&FINISH).await?;
    let p = FinishParams::new(id, Some(lease), outcome, now);
    let n = client.execute(&stmt, &p.params()).await?;
    Ok(n == 1)
}

/// The alert wrapper's finish: any live holder; on `Done` the record gets its `alert_sent`
/// event in the same statement (if the record still exists), noting the reason from its
/// payload.
static FINISH_ALERT_SENT: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH a AS ( \
        UPDATE outbox SET state = 'done', attempts = attempts + 1, finished_at = $2, \
            lease_owner = NULL, lease_until = NULL \
        WHERE id = $1 AND kind = 'alert' AND state IN ('pending', 'leased') \
        RETURNING namespace, key, convert_from(payload, 'UTF8')::json AS p \
    ) \
    INSERT INTO events (namespace, key, at, type, from_state, to_state, attempt, owner, \
        correlation_id, note) \
    SELECT r.namespace, r.key, $2, 'alert_sent', r.state, r.state, (a.p->>'attempt')::BIGINT, \
        r.owner, r.correlation_id, {note} || (a.p->>'reason') \
    FROM a JOIN records r ON r.namespace = a.namespace AND r.key = a.key",
        note = idem_store::sql::alert_sent_note()
    )
});

/// Records one delivery attempt of a live alert; `Done` also records `alert_sent` on its
/// record (if the record still exists), in the same statement.
pub(crate) async fn finish_alert(
    store: &PgStore,
    id: i64,
    outcome: &OutboxOutcome,
    now: Timestamp,
) -> Result<(), PgError> {
    let client = store.client().await?;
    if *outcome == OutboxOutcome::Done {
        let stmt = client.prepare_cached(&FINISH_ALERT_SENT).await?;
        client.execute(&stmt, &[&id, &now.0]).await?;
        return Ok(());
    }
    let stmt = client.prepare_cached(&FINISH).await?;
    let p = FinishParams::new(id, None, outcome, now);
    client.execute(&stmt, &p.params()).await?;
    Ok(())
}

pub(crate) async fn item(store: &PgStore, id: i64) -> Result<Option<OutboxItem>, PgError> {
    let client = store.client().await?;
    let sql = format!("SELECT {ITEM_COLS} FROM outbox o WHERE o.id = $1");
    let stmt = client.prepare_cached(&sql).await?;
    let rows = client.query(&stmt, &[&id]).await?;
    rows.first().map(item_from_row).transpose()
}
