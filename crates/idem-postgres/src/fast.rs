//! One-round-trip paths for the common operations, decided on cached data and persisted by a
//! single statement whose guards make the database confirm that the data the decision was
//! made on is still what is stored.
//!
//! - **Speculative fresh claim.** A claim of a key this instance knows nothing about is first
//!   decided as if no record existed ([`idem_core::apply`] with `existing = None`), with the
//!   follow-ups of an effect's or an action's claim folded in ([`engine::follow_ups`]: the
//!   draft saved, the request recorded as about to leave). When that decides an insert, one
//!   statement inserts the record `ON CONFLICT DO NOTHING`, appends its events only if the
//!   insert happened, checks the namespace guard, and — when the key was taken — returns the
//!   stored record from the same snapshot, so the claim is then decided on
//!   it like after a normal read (no extra round trip for a duplicate of an unknown key).
//!   Only for namespaces without a `daily_limit`: with one, the decision depends on today's
//!   count, which is read on the normal path. A webhook delivery of an unseen event
//!   (`intake_receive` with its [`idem_store::Rider`]) goes the same way: the record, its
//!   `prepared` event, the event's row and its forward item in one statement, the row and the
//!   item only when the record was inserted.
//! - **Cached record.** An operation on a key whose record this instance wrote or read last is
//!   decided on that record; the write is guarded by the record's `version` *and*
//!   `created_at` (a record deleted by retention and created again starts at version 1 again)
//!   and by the namespace guard. A decision that only appends an event (a duplicate hit, an
//!   `in_flight`, a `lease_lost`) inserts it only if the record still has that version.
//!
//! A claim that acquires on a cached record (a later attempt) is persisted without its
//! follow-ups, which its caller then sends as operations of their own. Anything else
//! (several events, alerts to queue, a decision that depends on today's count —
//! `engine::decide_known` refuses those —, a decision with nothing to write) is left to the
//! normal read-decide-write path of the engine, and so is every guard miss.

use std::sync::LazyLock;

use crate::conn::Conn as Client;
use idem_core::{Key, Namespace, Op, Record, Write};
use idem_store::engine::{self, Persisted, Ran, Seqs};
use idem_store::ExecCtx;
use tokio_postgres::types::ToSql;

use crate::cache::{NsSettings, RecordCache};
use crate::error::PgError;
use crate::execute::fits_one_statement;
use crate::intake::{intake_update_sql, rider_ctes, RiderParams, UpdateParams};
use crate::outbox::{finish_sql, FinishParams};
use crate::rows::{
    counted_insert, counted_move, event_tail, numbered, record_from_row, stats_cte, stats_params,
    EventParams, RecordParams, EVENT_INSERT_COLUMNS, EVENT_TAIL_LEN, RECORD_COLS, RECORD_COLUMNS,
    R_RECORD_COLS, TYPED_RECORD_PARAMS, UPDATE_RECORD_BARE,
};

static EVENT_INSERT_COLS: LazyLock<String> =
    LazyLock::new(|| format!("INSERT INTO events {EVENT_INSERT_COLUMNS}"));

/// True when the namespace row of `$1` still has the cached `revision` and `updated_at`
/// (parameters `rev` and `upd`), or still does not exist when `rev` is -1. A scalar subquery
/// (NULL when there is no row), not an aggregate: it runs on every fast write.
fn ns_guard(rev: usize, upd: usize) -> String {
    format!(
        "COALESCE((SELECT n.revision = ${rev}::BIGINT AND n.updated_at = ${upd}::BIGINT \
         FROM namespaces n WHERE n.namespace = $1), ${rev}::BIGINT = -1)"
    )
}

/// The speculative fresh insert with `k` events. With n = `RECORD_COLUMNS.len()` and t =
/// `EVENT_TAIL_LEN`: $1..$n record, then each event's tail ($n+1.. for the first, t more for
/// each next one), then the namespace guard's two, then the parameters of `after_e` (more
/// CTEs, each written only when the insert happened). One row: guard held, each event's seq
/// when the record was inserted, `flags` (more columns), and otherwise the record that was
/// already there (as of the statement's snapshot; NULLs when it is not visible yet). The
/// lookup of that record sits behind a one-time filter: it is not run when the insert
/// happened. Each event after the first is inserted from the row of the one before it, so
/// their seqs follow the order of the transition (data-modifying CTEs run in no set order
/// otherwise).
/// `also` is appended to the record insert's condition (` AND …`).
fn speculative(k: usize, after_e: &str, flags: &str, also: &str) -> String {
    let n = RECORD_COLUMNS.len();
    let name = |i: usize| {
        if i == 0 {
            "e".to_owned()
        } else {
            format!("e{}", i + 1)
        }
    };
    let events: Vec<String> = (0..k)
        .map(|i| {
            let src = if i == 0 { "w".to_owned() } else { name(i - 1) };
            format!(
                "{} AS ({ev} SELECT $1, $2, {tail} FROM {src} RETURNING seq)",
                name(i),
                ev = *EVENT_INSERT_COLS,
                tail = event_tail(n + 1 + i * EVENT_TAIL_LEN),
            )
        })
        .collect();
    let seqs: Vec<String> = (0..k)
        .map(|i| format!("(SELECT seq FROM {}), ", name(i)))
        .collect();
    let g = n + 1 + k * EVENT_TAIL_LEN;
    format!(
        "WITH g AS (SELECT {guard} AS ok), \
         w AS (INSERT INTO records ({cols}) SELECT {typed} FROM g WHERE g.ok{also} \
               ON CONFLICT (namespace, key) DO NOTHING RETURNING version){nc}, \
         {events}{after_e} \
         SELECT g.ok, {seqs}{flags}{rcols} FROM g \
         LEFT JOIN (SELECT * FROM records WHERE namespace = $1 AND key = $2 \
             AND NOT EXISTS (SELECT 1 FROM w)) r ON TRUE",
        guard = ns_guard(g, g + 1),
        cols = *RECORD_COLS,
        typed = *TYPED_RECORD_PARAMS,
        events = events.join(", "),
        seqs = seqs.concat(),
        rcols = *R_RECORD_COLS,
        nc = counted_insert("w"),
    )
}

/// Events a fresh claim inserts with its record at most: the claim's, and its follow-ups'
/// (an action's draft and the request about to leave; see [`engine::follow_ups`]).
const MAX_CLAIM_EVENTS: usize = 3;

/// [`speculative`] for a fresh claim with 1, 2 or 3 events (index `k - 1`): the stats bump
/// of its acquisition rides along, once.
static SPECULATIVE_INSERT: LazyLock<[String; MAX_CLAIM_EVENTS]> = LazyLock::new(|| {
    std::array::from_fn(|i| {
        let k = i + 1;
        speculative(
            k,
            &stats_cte("w", RECORD_COLUMNS.len() + 3 + k * EVENT_TAIL_LEN),
            "",
            "",
        )
    })
});

/// [`speculative`] for a webhook delivery: no stats bump (receiving counts no acquisition);
/// the rider's row and forward item ride on the record insert (`RIDER_PARAMS` more), and
/// the row's flag says whether the row was stored. Where the key has no row yet, or where
/// its row is the rider's own (`NewIntakeEvent::is_same`: a delivery's row, written with its
/// event's, whose record its first pass makes now; the row is then kept and the flag is
/// false, as on the normal path). Another record's row there is for the normal path to judge
/// (see `idem_store::Rider`), and so is one a concurrent transaction committed after this
/// statement's snapshot: a record inserted without its row, and with no row of its own in
/// the snapshot, then fails the statement ([`TAKEN_MEANWHILE`]), which rolls it back.
static SPECULATIVE_INTAKE: LazyLock<String> = LazyLock::new(|| {
    let p = RECORD_COLUMNS.len() + 3 + EVENT_TAIL_LEN;
    let rider = rider_ctes("FROM w", p);
    let row = |own: &str| {
        format!(
            "SELECT 1 FROM intake_events x WHERE x.namespace = $1 AND x.key = $2 AND {own}({})",
            riders_own(p)
        )
    };
    speculative(
        1,
        &format!(", {rider}"),
        &format!(
            "EXISTS (SELECT 1 FROM i), CASE WHEN EXISTS (SELECT 1 FROM w) \
             AND NOT EXISTS (SELECT 1 FROM i) AND NOT EXISTS ({}) \
             THEN 1 / (SELECT COUNT(*)::INT FROM i) END, ",
            row("")
        ),
        &format!(" AND NOT EXISTS ({})", row("NOT ")),
    )
});

/// Whether the row `x` is the rider's own (its source, event id, event key and destination:
/// `NewIntakeEvent::is_same`); `p` is the rider's first parameter ([`rider_ctes`]).
fn riders_own(p: usize) -> String {
    let [src, id, ek, dest] = [2, 3, 23, 24].map(|i| p + i);
    format!(
        "x.source = ${src}::TEXT AND x.event_id IS NOT DISTINCT FROM ${id}::TEXT \
         AND x.event_key IS NOT DISTINCT FROM ${ek}::TEXT \
         AND x.destination IS NOT DISTINCT FROM ${dest}::TEXT"
    )
}

/// How [`SPECULATIVE_INTAKE`] fails when its record went in but the key's row was there (a
/// division by zero: plain SQL raises nothing else).
const TAKEN_MEANWHILE: &tokio_postgres::error::SqlState =
    &tokio_postgres::error::SqlState::DIVISION_BY_ZERO;

/// $1/$2 namespace and key, $3..$13 event tail, $14/$15 namespace guard, $16/$17 the cached
/// record's version and created_at. No row back: a guard missed.
static GUARDED_EVENT: LazyLock<String> = LazyLock::new(|| {
    let g = 3 + EVENT_TAIL_LEN;
    format!(
        "{ev} SELECT $1::TEXT, $2::TEXT, {tail} \
         WHERE {guard} AND EXISTS (SELECT 1 FROM records r WHERE r.namespace = $1 \
         AND r.key = $2 AND r.version = ${v}::BIGINT AND r.created_at = ${c}::BIGINT) \
         RETURNING seq",
        ev = *EVENT_INSERT_COLS,
        tail = event_tail(3),
        guard = ns_guard(g, g + 1),
        v = g + 2,
        c = g + 3,
    )
});

/// [`UPDATE_RECORD`] ($n+1 = version decided on) also guarded by `created_at` ($17, unchanged
/// by every update) and the namespace ($n+2/$n+3).
static GUARDED_UPDATE: LazyLock<String> = LazyLock::new(|| {
    let n = RECORD_COLUMNS.len();
    numbered(&format!(
        "WITH w AS ({} AND created_at = $17 AND {} RETURNING version){} SELECT version FROM w",
        *UPDATE_RECORD_BARE,
        ns_guard(n + 2, n + 3),
        counted_move("w")
    ))
});

/// [`GUARDED_UPDATE_WITH_EVENT`] that also bumps the namespace's stats (after the guard).
static GUARDED_UPDATE_WITH_EVENT_STATS: LazyLock<String> = LazyLock::new(|| {
    let n = RECORD_COLUMNS.len();
    numbered(&format!(
        "WITH w AS ({} AND created_at = $17 AND {} RETURNING version){}, \
         e AS ({} SELECT $1, $2, {} FROM w RETURNING seq){} SELECT seq FROM e",
        *UPDATE_RECORD_BARE,
        ns_guard(n + 2 + EVENT_TAIL_LEN, n + 3 + EVENT_TAIL_LEN),
        counted_move("w"),
        *EVENT_INSERT_COLS,
        event_tail(n + 2),
        stats_cte("e", n + 4 + EVENT_TAIL_LEN)
    ))
});

/// [`GUARDED_UPDATE`] with its one event: $n+2..$n+t+1 event tail, $n+t+2/$n+t+3 namespace
/// guard (t = `EVENT_TAIL_LEN`).
static GUARDED_UPDATE_WITH_EVENT: LazyLock<String> = LazyLock::new(|| {
    let n = RECORD_COLUMNS.len();
    numbered(&format!(
        "WITH w AS ({} AND created_at = $17 AND {} RETURNING version){} \
         {} SELECT $1, $2, {} FROM w RETURNING seq",
        *UPDATE_RECORD_BARE,
        ns_guard(n + 2 + EVENT_TAIL_LEN, n + 3 + EVENT_TAIL_LEN),
        counted_move("w"),
        *EVENT_INSERT_COLS,
        event_tail(n + 2)
    ))
});

/// [`GUARDED_UPDATE_WITH_EVENT`] of a forward report with its rider: the attempt appended to
/// the event's row (`$n+t+4..$n+t+6`) and the outbox item finished (`$n+t+7..$n+t+12`), both
/// only when the guarded update happened. One statement, one commit.
static GUARDED_UPDATE_WITH_EVENT_REPORT: LazyLock<String> = LazyLock::new(|| {
    let n = RECORD_COLUMNS.len();
    let moved = "EXISTS (SELECT 1 FROM w)";
    numbered(&format!(
        "WITH w AS ({} AND created_at = $17 AND {} RETURNING version){}, \
         e AS ({} SELECT $1, $2, {} FROM w RETURNING seq), \
         a AS ({}), f AS ({}) SELECT seq FROM e",
        *UPDATE_RECORD_BARE,
        ns_guard(n + 2 + EVENT_TAIL_LEN, n + 3 + EVENT_TAIL_LEN),
        counted_move("w"),
        *EVENT_INSERT_COLS,
        event_tail(n + 2),
        intake_update_sql(n + 4 + EVENT_TAIL_LEN, moved),
        finish_sql(n + 7 + EVENT_TAIL_LEN, moved),
    ))
});

/// What a fast path did.
pub(crate) enum Fast {
    /// Persisted and answered, with what the record cache does about it.
    Done(Box<Ran>, Remember),
    /// The key exists: decide on this record (read in the same snapshot as a namespace guard
    /// that held) and persist on the normal path.
    Existing(Box<Record>),
    /// Not attempted: this decision needs the normal path.
    Skip,
    /// A guard failed: the cached namespace or record is stale.
    Miss,
}

/// What the record cache does after a fast write.
pub(crate) enum Remember {
    /// The record did not change (an appended event only): the entry stays.
    Unchanged,
    /// The record as now stored.
    Put(Box<Record>),
    /// The record changed and the cache does not keep it (too large): its entry goes.
    Forget,
}

impl Remember {
    /// `new` as stored (built only when the cache keeps it, and only once the write is done).
    fn written(records: &RecordCache, rp: &RecordParams, new: &Record) -> Result<Self, PgError> {
        Ok(if records.admits(new) {
            Remember::Put(Box::new(rp.stored(new)?))
        } else {
            Remember::Forget
        })
    }
}

/// The answer of a fast write that appended (at most) the event numbered `seq`.
fn done(t: idem_core::Transition, seq: Option<i64>, from: Option<idem_core::State>) -> Ran {
    done_riding(t, seq, from, false)
}

fn done_riding(
    t: idem_core::Transition,
    seq: Option<i64>,
    from: Option<idem_core::State>,
    rider_stored: bool,
) -> Ran {
    let seqs = seq.map(Seqs::one).unwrap_or_default();
    engine::finish(
        t,
        Persisted {
            seqs,
            alerts_queued: 0,
            rider_stored,
        },
        from,
    )
}

/// An operation tried on the fast path, with what deciding it needs: the connection, the
/// key, the operation, its context and the namespace's cached settings.
#[derive(Clone, Copy)]
pub(crate) struct FastOp<'a> {
    pub(crate) client: &'a Client,
    /// The record cache: asked whether it keeps the written record before that record is
    /// built as stored.
    pub(crate) records: &'a RecordCache,
    pub(crate) ns: &'a Namespace,
    pub(crate) key: &'a Key,
    pub(crate) op: &'a Op,
    pub(crate) ctx: &'a ExecCtx,
    pub(crate) s: &'a NsSettings,
}

/// A claim (or a webhook delivery with its rider) of a key with no cached record,
/// speculating that it is new. A claim's follow-ups ([`engine::follow_ups`]) ride on its
/// insert: the record as the last one left it and every event, in the one statement.
pub(crate) async fn speculative_insert(f: FastOp<'_>) -> Result<Fast, PgError> {
    let rider = match (f.op, f.ctx.rider.as_deref()) {
        (Op::Claim(_), _) => None,
        (Op::IntakeReceive(_), Some(r)) => Some(r),
        _ => return Ok(Fast::Skip),
    };
    // A decision that depends on today's count (a daily ceiling) is left to the normal read.
    let Some(t) = engine::decide_known(f.ns, f.key, None, f.op, f.ctx, f.s) else {
        return Ok(Fast::Skip);
    };
    let t = engine::follow_ups(
        f.ns,
        f.key,
        t,
        f.ctx,
        &f.ctx.decision(&f.s.policy, f.s.paused, 0),
    );
    let k = t.events.len();
    let Write::Insert(new) = &t.write else {
        return Ok(Fast::Skip);
    };
    if k == 0 || k > MAX_CLAIM_EVENTS || (rider.is_some() && k != 1) {
        return Ok(Fast::Skip);
    }
    let plan = engine::plan(&t, &f.s.policy, f.ctx.now, f.ctx.traceparent.as_deref());
    // One statement: no alert, no daily ceiling to guard (`fits_one_statement` with the
    // events this form inserts). The acquisition is counted by the stats bump it carries.
    if !plan.alerts.is_empty() || plan.acquisition.and_then(|a| a.limit).is_some() {
        return Ok(Fast::Skip);
    }
    let rp = RecordParams::new(new)?;
    let eps: Vec<EventParams> = t
        .events
        .iter()
        .map(|d| EventParams::new(f.ns, f.key, d))
        .collect();
    let mut params: Vec<&(dyn ToSql + Sync)> = Vec::with_capacity(50 + k * EVENT_TAIL_LEN);
    params.extend(rp.params());
    for ep in &eps {
        params.extend(ep.tail_params());
    }
    params.push(&f.s.revision);
    params.push(&f.s.updated_at);
    let bump;
    let rider_params;
    let sql: &str = match rider {
        None => {
            // A fresh acquisition always counts one `acquired_first` (and nothing else).
            let Some(b) = plan.stats.filter(|b| b.acquired_first == 1) else {
                return Ok(Fast::Skip);
            };
            bump = b;
            params.extend(stats_params(&bump));
            &SPECULATIVE_INSERT[k - 1]
        }
        Some(r) => {
            // Receiving counts nothing; a plan that would is left to the normal path.
            if plan.stats.is_some() {
                return Ok(Fast::Skip);
            }
            rider_params = RiderParams::new(r);
            params.extend(rider_params.params());
            &SPECULATIVE_INTAKE
        }
    };
    let stmt = f.client.prepare_cached(sql).await?;
    let row = match f.client.query_one(&stmt, &params).await {
        Ok(row) => row,
        // Rolled back: the normal path judges the key's row.
        Err(e) if rider.is_some() && e.code() == Some(TAKEN_MEANWHILE) => return Ok(Fast::Skip),
        Err(e) => return Err(e.into()),
    };
    let ok: Option<bool> = row.try_get(0).map_err(|e| crate::corrupt(&e))?;
    if ok != Some(true) {
        return Ok(Fast::Miss);
    }
    let mut seqs = Seqs::default();
    for i in 0..k {
        match row
            .try_get::<_, Option<i64>>(1 + i)
            .map_err(|e| crate::corrupt(&e))?
        {
            Some(seq) => seqs.push(seq),
            None => break,
        }
    }
    // The record's columns follow the seqs, and the rider's flag and check in the intake
    // form.
    let (rider_stored, at) = match rider {
        None => (false, 1 + k),
        Some(_) => (
            row.try_get::<_, bool>(1 + k)
                .map_err(|e| crate::corrupt(&e))?,
            3 + k,
        ),
    };
    if seqs.get(0) != 0 {
        let remember = Remember::written(f.records, &rp, new)?;
        let ran = engine::finish(
            t,
            Persisted {
                seqs,
                alerts_queued: 0,
                rider_stored,
            },
            None,
        );
        return Ok(Fast::Done(Box::new(ran), remember));
    }
    let there: Option<String> = row.try_get(at).map_err(|e| crate::corrupt(&e))?;
    match there {
        Some(_) => Ok(Fast::Existing(Box::new(record_from_row(&row, at)?))),
        // Inserted concurrently by a transaction our snapshot does not see: read again.
        None => Ok(Fast::Skip),
    }
}

/// An operation on a key whose record is cached.
pub(crate) async fn cached_record(f: FastOp<'_>, rec: &Record) -> Result<Fast, PgError> {
    let Some(t) = engine::decide_known(f.ns, f.key, Some(rec), f.op, f.ctx, f.s) else {
        return Ok(Fast::Skip);
    };
    let plan = engine::plan(&t, &f.s.policy, f.ctx.now, f.ctx.traceparent.as_deref()).riding(f.ctx);
    if plan.acquisition.is_some() || !fits_one_statement(&plan) {
        return Ok(Fast::Skip);
    }
    let from = Some(rec.state);
    match &t.write {
        Write::Insert(_) => Ok(Fast::Skip),
        Write::None => {
            // Nothing to write (a refusal, a backoff, an idempotent repeat): the answer is
            // only as fresh as the data, so it comes from a real read.
            let [draft] = t.events.as_slice() else {
                return Ok(Fast::Skip);
            };
            if plan.stats.is_some() {
                return Ok(Fast::Skip);
            }
            let ep = EventParams::new(f.ns, f.key, draft);
            let created = rec.created_at.0;
            let mut params: Vec<&(dyn ToSql + Sync)> = Vec::with_capacity(15);
            params.extend(ep.params());
            params.push(&f.s.revision);
            params.push(&f.s.updated_at);
            params.push(&rec.version);
            params.push(&created);
            let stmt = f.client.prepare_cached(&GUARDED_EVENT).await?;
            match f.client.query_opt(&stmt, &params).await? {
                None => Ok(Fast::Miss),
                Some(row) => {
                    let seq: i64 = row.try_get(0).map_err(|e| crate::corrupt(&e))?;
                    Ok(Fast::Done(
                        Box::new(done(t, Some(seq), from)),
                        Remember::Unchanged,
                    ))
                }
            }
        }
        Write::Update(new) => {
            // The guard must compare exactly the version the decision was made on.
            if new.version != rec.version + 1 || new.created_at != rec.created_at {
                return Ok(Fast::Skip);
            }
            let rp = RecordParams::new(new)?;
            let mut params: Vec<&(dyn ToSql + Sync)> = Vec::with_capacity(40);
            params.extend(rp.params());
            params.push(&rec.version);
            let stats = plan.stats;
            let report = plan.report.as_ref().map(|r| {
                (
                    UpdateParams::new(&r.rider.update),
                    FinishParams::new(r.rider.item, Some(&r.rider.lease), &r.outcome, r.now),
                )
            });
            let rode = report.is_some();
            // The state the guarded version has: its count moves to the new state.
            let from_state = rec.state.as_str();
            match t.events.as_slice() {
                // A report's rider rides only on the one-event form below.
                [] | [_] if report.is_some() && stats.is_some() => Ok(Fast::Skip),
                [] if report.is_some() || stats.is_some() => Ok(Fast::Skip),
                [] => {
                    params.push(&f.s.revision);
                    params.push(&f.s.updated_at);
                    params.push(&from_state);
                    let stmt = f.client.prepare_cached(&GUARDED_UPDATE).await?;
                    if f.client.execute(&stmt, &params).await? == 1 {
                        let remember = Remember::written(f.records, &rp, new)?;
                        Ok(Fast::Done(Box::new(done(t, None, from)), remember))
                    } else {
                        Ok(Fast::Miss)
                    }
                }
                [draft] => {
                    let ep = EventParams::new(f.ns, f.key, draft);
                    params.extend(ep.tail_params());
                    params.push(&f.s.revision);
                    params.push(&f.s.updated_at);
                    let sql: &str = match (&stats, &report) {
                        (Some(b), _) => {
                            params.extend(stats_params(b));
                            &GUARDED_UPDATE_WITH_EVENT_STATS
                        }
                        (None, Some((up, fp))) => {
                            params.extend(up.params());
                            params.extend(fp.params());
                            &GUARDED_UPDATE_WITH_EVENT_REPORT
                        }
                        (None, None) => &GUARDED_UPDATE_WITH_EVENT,
                    };
                    params.push(&from_state);
                    let stmt = f.client.prepare_cached(sql).await?;
                    match f.client.query_opt(&stmt, &params).await? {
                        None => Ok(Fast::Miss),
                        Some(row) => {
                            let seq: i64 = row.try_get(0).map_err(|e| crate::corrupt(&e))?;
                            let remember = Remember::written(f.records, &rp, new)?;
                            Ok(Fast::Done(
                                Box::new(done_riding(t, Some(seq), from, rode)),
                                remember,
                            ))
                        }
                    }
                }
                _ => Ok(Fast::Skip),
            }
        }
    }
}
