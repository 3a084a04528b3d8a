//! The intake's tables in SQLite: `sources` (configuration JSON, no secrets) and
//! `intake_events` (one row per inbound event beside its record). Every write here runs in
//! the writer's transaction with whatever else the job does (a source with its secrets, an
//! event row with its forward item). This module must never log a body, a header value or a
//! secret.

use idem_core::{State, Timestamp};
use idem_store::intake::{append_attempt, destination_owner, forward_owner, source_owner};
use idem_store::{
    Delivered, IntakeEventRow, IntakeQuery, IntakeUpdate, NewSecret, Rider, SourceDelete,
    SourceRow, SourceWrite, StoreError,
};
use rusqlite::{params, Connection, OptionalExtension, Row};

use crate::error::SqlResult;
use crate::{outbox, secrets};

pub(crate) fn source_put(
    conn: &Connection,
    w: &SourceWrite,
    now: Timestamp,
) -> Result<bool, StoreError> {
    let existed: bool = conn
        .prepare_cached("SELECT 1 FROM sources WHERE name = ?1")
        .db()?
        .query_row(params![w.name], |_| Ok(()))
        .optional()
        .db()?
        .is_some();
    conn.prepare_cached(
        "INSERT INTO sources (name, config, created_at, updated_at) VALUES (?1, ?2, ?3, ?3) \
         ON CONFLICT (name) DO UPDATE SET config = excluded.config, updated_at = excluded.updated_at",
    )
    .db()?
    .execute(params![w.name, w.config, now.0])
    .db()?;
    if let Some(list) = &w.secrets {
        let owner = source_owner(&w.name);
        secrets::secrets_remove(conn, &owner)?;
        for s in list {
            secrets::secret_add(conn, &NewSecret::new(owner.clone(), s.clone()), now)?;
        }
    }
    if let Some(fs) = &w.forward_secret {
        let owner = forward_owner(&w.name);
        secrets::secrets_remove(conn, &owner)?;
        if let Some(s) = fs {
            secrets::secret_add(conn, &NewSecret::new(owner, s.clone()), now)?;
        }
    }
    for (dest, s) in &w.destination_secrets {
        let owner = destination_owner(&w.name, dest);
        secrets::secrets_remove(conn, &owner)?;
        if let Some(s) = s {
            secrets::secret_add(conn, &NewSecret::new(owner, s.clone()), now)?;
        }
    }
    Ok(!existed)
}

fn source_row(r: &Row<'_>) -> rusqlite::Result<SourceRow> {
    Ok(SourceRow {
        name: r.get(0)?,
        config: r.get(1)?,
        created_at: Timestamp(r.get(2)?),
        updated_at: Timestamp(r.get(3)?),
    })
}

pub(crate) fn source_get(conn: &Connection, name: &str) -> Result<Option<SourceRow>, StoreError> {
    conn.prepare_cached("SELECT name, config, created_at, updated_at FROM sources WHERE name = ?1")
        .db()?
        .query_row(params![name], source_row)
        .optional()
        .db()
}

pub(crate) fn source_list(conn: &Connection) -> Result<Vec<SourceRow>, StoreError> {
    let mut stmt = conn
        .prepare_cached("SELECT name, config, created_at, updated_at FROM sources ORDER BY name")
        .db()?;
    let rows = stmt.query_map([], source_row).db()?;
    rows.collect::<Result<_, _>>().db()
}

pub(crate) fn source_delete(
    conn: &Connection,
    name: &str,
    force: bool,
) -> Result<SourceDelete, StoreError> {
    if source_get(conn, name)?.is_none() {
        return Ok(SourceDelete::NotFound);
    }
    if !force {
        let n: i64 = conn
            .prepare_cached(
                "SELECT COUNT(*) FROM intake_events e LEFT JOIN records r \
                 ON r.namespace = e.namespace AND r.key = e.key \
                 WHERE e.source = ?1 AND (r.state IS NULL OR r.state <> 'completed')",
            )
            .db()?
            .query_row(params![name], |r| r.get(0))
            .db()?;
        if n > 0 {
            return Ok(SourceDelete::Undelivered(n as u64));
        }
    }
    conn.prepare_cached("DELETE FROM sources WHERE name = ?1")
        .db()?
        .execute(params![name])
        .db()?;
    secrets::secrets_remove(conn, &source_owner(name))?;
    secrets::secrets_remove(conn, &forward_owner(name))?;
    conn.prepare_cached("DELETE FROM secrets WHERE kind = ?1 AND substr(owner, 1, ?2) = ?3")
        .db()?
        .execute(params![
            forward_owner(name).kind.as_str(),
            name.len() as i64 + 1,
            format!("{name}/")
        ])
        .db()?;
    Ok(SourceDelete::Deleted)
}

/// Whether the row under a rider's key belongs to something else (see
/// [`idem_store::NewIntakeEvent::is_same`]): then the step that would insert the rider's record
/// writes nothing at all. Runs on the writer's connection, before the insert: nothing can come
/// between the look and the write.
pub(crate) fn rider_key_taken(conn: &Connection, rider: &Rider) -> Result<bool, StoreError> {
    let ev = &rider.intake;
    let row = conn
        .prepare_cached(
            "SELECT source, event_id, event_key, destination FROM intake_events \
             WHERE namespace = ?1 AND key = ?2",
        )
        .db()?
        .query_row(params![ev.namespace, ev.key], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, Option<String>>(1)?,
                r.get::<_, Option<String>>(2)?,
                r.get::<_, Option<String>>(3)?,
            ))
        })
        .optional()
        .db()?;
    Ok(row.is_some_and(|(source, id, ek, dest)| {
        !ev.is_same(&source, id.as_deref(), ek.as_deref(), dest.as_deref())
    }))
}

/// Stores a rider on the step that just inserted its record: the event's row (kept once) and,
/// when the row is new, its first forward item and its deliveries to named destinations (each
/// a row where neither a row nor a record holds its key, and a first item). `true` when the
/// row was stored.
pub(crate) fn store_rider(conn: &Connection, rider: &Rider) -> Result<bool, StoreError> {
    let ev = &rider.intake;
    // A delivery's row keeps no body: its event's row does.
    let body = ev.event_key.is_none().then_some(ev.body.as_slice());
    let n = conn
        .prepare_cached(
            "INSERT INTO intake_events (namespace, key, source, event_id, content_type, headers, \
             body, received_at, destinations, delivered_at, event_key, destination) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12) \
             ON CONFLICT (namespace, key) DO NOTHING",
        )
        .db()?
        .execute(params![
            ev.namespace,
            ev.key,
            ev.source,
            ev.event_id,
            ev.content_type,
            ev.headers,
            body,
            ev.received_at.0,
            ev.destinations,
            ev.delivered_at.map(|t| t.0),
            ev.event_key,
            ev.destination,
        ])
        .db()?;
    if n == 1 {
        if let Some(item) = &rider.forward {
            outbox::enqueue(conn, item, ev.received_at)?;
        }
        for d in &rider.deliveries {
            // A key some record holds already is not this delivery's: no row (the event's
            // read must not show that record's state as this delivery's); the item goes all
            // the same, and the delivery worker holds the delivery for review.
            conn.prepare_cached(
                "INSERT INTO intake_events (namespace, key, source, event_id, content_type, \
                 headers, body, received_at, event_key, destination) \
                 SELECT ?1, ?2, ?3, ?4, ?5, '{}', NULL, ?6, ?7, ?8 WHERE NOT EXISTS \
                 (SELECT 1 FROM records WHERE namespace = ?1 AND key = ?2) \
                 ON CONFLICT (namespace, key) DO NOTHING",
            )
            .db()?
            .execute(params![
                ev.namespace,
                d.key,
                ev.source,
                ev.event_id,
                ev.content_type,
                ev.received_at.0,
                ev.key,
                d.destination,
            ])
            .db()?;
            outbox::enqueue(conn, &d.item, ev.received_at)?;
        }
    }
    Ok(n == 1)
}

/// The columns of an event row `e` (its record joined as `r`), with `state` the state it
/// shows (column 10).
fn event_cols(state: &str) -> String {
    format!(
        "e.namespace, e.key, e.source, e.event_id, e.content_type, e.headers, e.body, \
         e.received_at, e.attempts, e.delivered_at, {state}, e.event_key, e.destination, \
         e.destinations"
    )
}

fn event_row(r: &Row<'_>) -> rusqlite::Result<(IntakeEventRow, Option<String>)> {
    Ok((
        IntakeEventRow {
            namespace: r.get(0)?,
            key: r.get(1)?,
            source: r.get(2)?,
            event_id: r.get(3)?,
            content_type: r.get(4)?,
            headers: r.get(5)?,
            body: r.get(6)?,
            received_at: Timestamp(r.get(7)?),
            attempts: r.get(8)?,
            delivered_at: r.get::<_, Option<i64>>(9)?.map(Timestamp),
            state: None,
            event_key: r.get(11)?,
            destination: r.get(12)?,
            destinations: r.get(13)?,
        },
        r.get(10)?,
    ))
}

fn with_state(
    (mut row, state): (IntakeEventRow, Option<String>),
) -> Result<IntakeEventRow, StoreError> {
    row.state = match state {
        None => None,
        Some(s) => {
            Some(State::parse(&s).ok_or_else(|| StoreError::Corrupt(format!("record state {s}")))?)
        }
    };
    Ok(row)
}

pub(crate) fn intake_event(
    conn: &Connection,
    ns: &str,
    key: &str,
) -> Result<Option<IntakeEventRow>, StoreError> {
    let sql = format!(
        "SELECT {} FROM intake_events e LEFT JOIN records r \
         ON r.namespace = e.namespace AND r.key = e.key WHERE e.namespace = ?1 AND e.key = ?2",
        event_cols("r.state")
    );
    let row = conn
        .prepare_cached(&sql)
        .db()?
        .query_row(params![ns, key], event_row)
        .optional()
        .db()?;
    row.map(with_state).transpose()
}

pub(crate) fn intake_list(
    conn: &Connection,
    q: &IntakeQuery,
) -> Result<Vec<IntakeEventRow>, StoreError> {
    // Event rows alone show their event's state; a list with delivery rows shows each row's
    // own record's (see `IntakeQuery::deliveries`). The filter reads what the row shows.
    let state = if q.deliveries {
        "r.state".to_owned()
    } else {
        idem_store::intake::event_list_state()
    };
    let sql = format!(
        "SELECT {} FROM intake_events e LEFT JOIN records r \
         ON r.namespace = e.namespace AND r.key = e.key \
         WHERE e.source = ?1 \
         AND (?2 IS NULL OR {state} = ?2) \
         AND (?3 IS NULL OR e.received_at < ?3 OR (e.received_at = ?3 AND e.key < ?4)) \
         AND (?5 IS NULL OR e.received_at >= ?5) AND (?6 IS NULL OR e.received_at <= ?6) \
         AND (?8 OR e.event_key IS NULL) \
         ORDER BY e.received_at DESC, e.key DESC LIMIT ?7",
        event_cols(&state)
    );
    let (at, key) = match &q.after {
        Some((t, k)) => (Some(*t), k.clone()),
        None => (None, String::new()),
    };
    let mut stmt = conn.prepare_cached(&sql).db()?;
    let rows = stmt
        .query_map(
            params![
                q.source,
                q.state.map(State::as_str),
                at,
                key,
                q.since.map(|t| t.0),
                q.until.map(|t| t.0),
                q.limit as i64,
                q.deliveries,
            ],
            event_row,
        )
        .db()?;
    rows.map(|r| r.db().and_then(with_state)).collect()
}

pub(crate) fn intake_update(conn: &Connection, u: &IntakeUpdate) -> Result<(), StoreError> {
    if let Some(a) = &u.attempt {
        let current: Option<String> = conn
            .prepare_cached("SELECT attempts FROM intake_events WHERE namespace = ?1 AND key = ?2")
            .db()?
            .query_row(params![u.namespace, u.key], |r| r.get(0))
            .optional()
            .db()?;
        if let Some(cur) = current {
            conn.prepare_cached(
                "UPDATE intake_events SET attempts = ?3 WHERE namespace = ?1 AND key = ?2",
            )
            .db()?
            .execute(params![u.namespace, u.key, append_attempt(&cur, a)])
            .db()?;
        }
    }
    let delivered = match u.delivered {
        Delivered::Keep => return Ok(()),
        Delivered::At(t) => Some(t.0),
        Delivered::Clear => None,
    };
    conn.prepare_cached(
        "UPDATE intake_events SET delivered_at = ?3 WHERE namespace = ?1 AND key = ?2",
    )
    .db()?
    .execute(params![u.namespace, u.key, delivered])
    .db()?;
    Ok(())
}

pub(crate) fn intake_backlog(conn: &Connection) -> Result<Vec<(String, String, u64)>, StoreError> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT source, COALESCE(destination, 'default'), COUNT(*) FROM intake_events \
             WHERE delivered_at IS NULL GROUP BY 1, 2 ORDER BY 1, 2",
        )
        .db()?;
    let rows = stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)? as u64,
            ))
        })
        .db()?;
    rows.collect::<Result<_, _>>().db()
}

pub(crate) fn intake_dead_letters(conn: &Connection) -> Result<Vec<(String, u64)>, StoreError> {
    let sql = format!(
        "SELECT e.source, COUNT(*) FROM intake_events e JOIN records r \
         ON r.namespace = e.namespace AND r.key = e.key \
         WHERE e.delivered_at IS NULL AND r.state = {} GROUP BY e.source ORDER BY e.source",
        idem_store::sql::state(State::NeedsReview)
    );
    let mut stmt = conn.prepare_cached(&sql).db()?;
    let rows = stmt
        .query_map([], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64))
        })
        .db()?;
    rows.collect::<Result<_, _>>().db()
}

/// Takes a paced destination's slot (see `Store::pace_take`); runs in the writer's
/// transaction, which serialises it with every other writer of the file.
pub(crate) fn pace_take(
    conn: &Connection,
    source: &str,
    destination: &str,
    interval_ms: i64,
    now: Timestamp,
) -> Result<Option<Timestamp>, StoreError> {
    conn.prepare_cached(
        "INSERT INTO destination_pace (source, destination, next_at) VALUES (?1, ?2, 0) \
         ON CONFLICT (source, destination) DO NOTHING",
    )
    .db()?
    .execute(params![source, destination])
    .db()?;
    let taken = conn
        .prepare_cached(
            "UPDATE destination_pace SET next_at = ?3 + ?4 \
             WHERE source = ?1 AND destination = ?2 AND next_at <= ?3",
        )
        .db()?
        .execute(params![source, destination, now.0, interval_ms.max(1)])
        .db()?;
    if taken == 1 {
        return Ok(None);
    }
    let next: i64 = conn
        .prepare_cached(
            "SELECT next_at FROM destination_pace WHERE source = ?1 AND destination = ?2",
        )
        .db()?
        .query_row(params![source, destination], |r| r.get(0))
        .db()?;
    Ok(Some(Timestamp(next)))
}
