//! The execution of one operation on one record, written once for every backend.
//!
//! [`execute`] loads the record and the namespace context through a [`Backend`], reads
//! today's acquisition count only when [`idem_core::needs_daily_count`] says the decision
//! depends on it, calls [`idem_core::apply`], turns the [`Transition`] into exactly the writes
//! to persist ([`plan`] → [`Plan`]), has the backend persist them atomically under its guards,
//! and decides again on fresh data when a guard reports a lost race ([`TxError::Race`]). A
//! backend is then only the narrow [`Backend`] trait plus its SQL: it never calls `apply`,
//! never decides which writes a transition implies and never retries on its own.
//!
//! Fast paths (a decision on a read snapshot, on cached rows, a speculative insert) plug in
//! through [`Backend::shortcut`] or decide through [`decide_known`] and [`plan`]: they may
//! answer from data they did not read in the normal way, but never on a decision that
//! depends on something they do not know — [`decide_known`] refuses those.
//!
//! This module never performs I/O itself and never sleeps except through the backend's
//! [`Backend::lost_race`].

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use idem_core::{
    needs_daily_count, Acquired, AlertDraft, AlertReason, Event, EventDraft, Key, Namespace, Op,
    Policy, Record, Reply, State, Tally, Transition, Write,
};
use serde_json::Value;

use crate::{ExecCtx, Executed, StoreError};

/// Why one attempt of [`execute`] ended without an answer.
#[derive(Debug)]
pub enum TxError {
    /// A guard found the data moved (a concurrent insert, a newer version, a full daily
    /// ceiling) or the database rolled the transaction back: decide again on fresh data.
    Race,
    /// Give up with this error.
    Store(StoreError),
}

impl From<StoreError> for TxError {
    fn from(e: StoreError) -> Self {
        TxError::Store(e)
    }
}

/// The namespace settings a decision reads, in whatever form a backend keeps them (owned,
/// or shared with a cache).
pub trait NsView {
    fn policy(&self) -> &Policy;
    fn paused(&self) -> bool;
}

impl<T: NsView + ?Sized> NsView for std::sync::Arc<T> {
    fn policy(&self) -> &Policy {
        (**self).policy()
    }
    fn paused(&self) -> bool {
        (**self).paused()
    }
}

/// Settings read for one decision and owned by it.
#[derive(Debug, Clone)]
pub struct NsOwned {
    pub policy: Policy,
    pub paused: bool,
}

impl NsView for NsOwned {
    fn policy(&self) -> &Policy {
        &self.policy
    }
    fn paused(&self) -> bool {
        self.paused
    }
}

/// What a decision is made on: the record (if any) and the namespace context, read in one
/// snapshot.
#[derive(Debug)]
pub struct Loaded<N> {
    pub record: Option<Record>,
    pub ns: N,
    /// Today's first-time acquisitions when the read included them; `None` makes the engine
    /// ask [`Backend::daily_count`] if (and only if) the decision needs it.
    pub daily_count: Option<u64>,
}

/// What a fast path found before the normal read.
#[derive(Debug)]
pub enum Shortcut<N> {
    /// Nothing: read normally.
    Read,
    /// Decide on this (read in one snapshot with guards that held) instead of reading.
    Decide(Loaded<N>),
    /// Persisted and answered already.
    Done(Ran),
}

/// The record write of a plan.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PlanWrite<'a> {
    None,
    /// A new record; guarded by the `(namespace, key)` uniqueness.
    Insert(&'a Record),
    /// The new row; guarded by the stored version being `expected_version`.
    Update {
        record: &'a Record,
        expected_version: i64,
    },
}

/// A first-time acquisition to count against today's ceiling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acquisition {
    /// `Timestamp::utc_day` of the decision.
    pub day: i64,
    /// The ceiling the decision checked (a concurrent writer may have filled it since; a
    /// backend with concurrent writers guards the increment by it and reports a race).
    pub limit: Option<u64>,
}

/// Exactly what one transition must persist, in one atomic step.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan<'a> {
    pub write: PlanWrite<'a>,
    /// Appended in order; every one is about this record.
    pub events: &'a [EventDraft],
    pub acquisition: Option<Acquisition>,
    /// Alerts to queue: empty when the namespace has nowhere to send them (the rows would pile
    /// up undeliverable).
    pub alerts: &'a [AlertDraft],
    /// The caller's `traceparent`, stored with the alerts.
    pub traceparent: Option<&'a str>,
    /// What to add to the namespace's hourly stats bucket, in the same atomic step.
    pub stats: Option<StatsBump>,
    /// Rows to store with the record's creation: set only when the plan inserts the record.
    pub rider: Option<&'a crate::Rider>,
    /// Rows to store with the record's update: set only when the plan updates the record.
    pub report: Option<PlannedReport<'a>>,
}

/// A [`crate::ReportRider`] with the outbox outcome the updated record implies.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedReport<'a> {
    pub rider: &'a crate::ReportRider,
    pub outcome: crate::OutboxOutcome,
    /// The decision's time (the item's `finished_at`).
    pub now: idem_core::Timestamp,
}

/// Milliseconds per stats bucket.
pub const HOUR_MS: i64 = 3_600_000;

/// Additions to one namespace's hourly stats bucket (`GET /v1/namespaces/{ns}` sums the
/// buckets of the last 24 hours). Counters, never a scan of records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatsBump {
    /// `now / HOUR_MS`: the bucket.
    pub hour: i64,
    pub acquired_first: i64,
    pub acquired_retry: i64,
    pub tokens: i64,
    pub usd_nanos: i64,
    pub retry_tokens: i64,
    pub retry_usd_nanos: i64,
}

impl StatsBump {
    /// The bump a step's tally implies at `now`; `None` when it counts nothing.
    pub fn of(tally: &Tally, now: idem_core::Timestamp) -> Option<StatsBump> {
        let mut b = StatsBump {
            hour: now.0.div_euclid(HOUR_MS),
            ..StatsBump::default()
        };
        match tally.acquired {
            Some(Acquired::First) => b.acquired_first = 1,
            Some(Acquired::Retry) => b.acquired_retry = 1,
            None => {}
        }
        if let Some((c, retry)) = tally.cost {
            let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
            b.tokens = n(c.tokens);
            b.usd_nanos = n(c.usd_nanos);
            if retry {
                b.retry_tokens = b.tokens;
                b.retry_usd_nanos = b.usd_nanos;
            }
        }
        (b != StatsBump {
            hour: b.hour,
            ..StatsBump::default()
        })
        .then_some(b)
    }
}

impl Plan<'_> {
    /// Nothing to write: the answer needs no transaction.
    pub fn is_empty(&self) -> bool {
        matches!(self.write, PlanWrite::None)
            && self.events.is_empty()
            && self.acquisition.is_none()
            && self.alerts.is_empty()
            && self.stats.is_none()
    }

    /// The record is left as it is; at most one event is appended (a duplicate hit, an
    /// `in_flight`, a conflict, a refusal): what may be decided on a read snapshot.
    pub fn only_audit(&self) -> bool {
        matches!(self.write, PlanWrite::None)
            && self.events.len() <= 1
            && self.acquisition.is_none()
            && self.alerts.is_empty()
            && self.stats.is_none()
    }
}

impl<'a> Plan<'a> {
    /// This plan with the caller's riders: a [`crate::Rider`] kept only when the plan
    /// creates the record (a step that finds the record there writes no rider), a
    /// [`crate::ReportRider`] only when it updates the record (with the outbox outcome the
    /// updated record implies).
    pub fn riding(self, ctx: &'a ExecCtx) -> Self {
        let rider = ctx
            .rider
            .as_deref()
            .filter(|_| matches!(self.write, PlanWrite::Insert(_)));
        let report = match (&self.write, ctx.report.as_deref()) {
            (PlanWrite::Update { record, .. }, Some(r)) => Some(PlannedReport {
                rider: r,
                outcome: crate::intake::forward_finish(record, ctx.now),
                now: ctx.now,
            }),
            _ => None,
        };
        Plan {
            rider,
            report,
            ..self
        }
    }
}

/// The transition → persist rule, for a decision made at `now` (its UTC day counts the
/// acquisition, its hour bucket the stats).
pub fn plan<'a>(
    t: &'a Transition,
    policy: &Policy,
    now: idem_core::Timestamp,
    traceparent: Option<&'a str>,
) -> Plan<'a> {
    let day = now.utc_day();
    let write = match &t.write {
        Write::None => PlanWrite::None,
        Write::Insert(r) => PlanWrite::Insert(r),
        Write::Update(r) => PlanWrite::Update {
            record: r,
            expected_version: r.version - 1,
        },
    };
    Plan {
        write,
        events: &t.events,
        acquisition: t.first_acquisition.then_some(Acquisition {
            day,
            limit: policy.daily_limit,
        }),
        alerts: if policy.alert_url.is_some() {
            &t.alerts
        } else {
            &[]
        },
        traceparent,
        stats: StatsBump::of(&t.tally, now),
        rider: None,
        report: None,
    }
}

/// Sequence numbers of the appended events, in plan order (no allocation for one event).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seqs {
    first: Option<i64>,
    rest: Vec<i64>,
}

impl Seqs {
    pub fn one(seq: i64) -> Self {
        Seqs {
            first: Some(seq),
            rest: Vec::new(),
        }
    }
    pub fn push(&mut self, seq: i64) {
        if self.first.is_none() {
            self.first = Some(seq);
        } else {
            self.rest.push(seq);
        }
    }
    /// The seq of event `i` (0 when the backend did not report one).
    pub fn get(&self, i: usize) -> i64 {
        match i {
            0 => self.first.unwrap_or(0),
            _ => self.rest.get(i - 1).copied().unwrap_or(0),
        }
    }
}

/// What persisting a plan produced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Persisted {
    pub seqs: Seqs,
    /// Alerts actually queued (deduplicated ones are not counted).
    pub alerts_queued: usize,
    /// The plan's rider was stored (its row was new).
    pub rider_stored: bool,
}

/// An answered operation.
#[derive(Debug, Clone)]
pub struct Ran {
    pub executed: Executed,
    /// `stuck` alerts the decision raised (queued or not): the janitor reports them.
    pub stuck_alerts: usize,
}

/// Builds the answer of a persisted transition.
pub fn finish(t: Transition, persisted: Persisted, from_state: Option<State>) -> Ran {
    let stuck_alerts = t
        .alerts
        .iter()
        .filter(|a| a.reason == AlertReason::Stuck)
        .count();
    let events = t
        .events
        .into_iter()
        .enumerate()
        .map(|(i, d)| Event::from_draft(persisted.seqs.get(i), d))
        .collect();
    Ran {
        executed: Executed {
            // The record written becomes the answer: moved, it was held once.
            reply: idem_core::written_reply(t.write, t.reply),
            events,
            from_state,
            alerts_queued: persisted.alerts_queued,
            tally: t.tally,
            rider_stored: persisted.rider_stored,
        },
        stuck_alerts,
    }
}

/// Decides on data a fast path holds without the daily count: `None` when the decision may
/// depend on the count (the normal path must read it).
pub fn decide_known(
    ns: &Namespace,
    key: &Key,
    existing: Option<&Record>,
    op: &Op,
    ctx: &ExecCtx,
    settings: &impl NsView,
) -> Option<Transition> {
    let (policy, paused) = (settings.policy(), settings.paused());
    if needs_daily_count(op, existing, policy, paused) {
        return None;
    }
    // Not needed, so any value decides the same (see `idem_core::inputs`).
    Some(idem_core::apply(
        ns,
        key,
        existing,
        op,
        &ctx.decision(policy, paused, 0),
    ))
}

/// [`decide_known`] of a claim on a record the caller read and owns (a store's snapshot).
///
/// A claim that leaves the record as it is (a replay, a conflict, in flight, …) answers with
/// a copy of it, and its JSON members (the draft and the result) are most of what that copy
/// costs. A claim reads them only for whether they are there, so the decision is made on the
/// record with each present one stood in for by `null`, and the answer then gets the members
/// themselves, moved. A decision that writes, or answers with no record, is made again on the
/// whole record: a stand-in never reaches a write or an answer. Any other op:
/// [`decide_known`].
pub fn decide_known_owned(
    ns: &Namespace,
    key: &Key,
    mut existing: Record,
    op: &Op,
    ctx: &ExecCtx,
    settings: &impl NsView,
) -> Option<Transition> {
    if !matches!(op, Op::Claim(_)) {
        return decide_known(ns, key, Some(&existing), op, ctx, settings);
    }
    let stand_in = |m: &mut Option<Value>| m.as_mut().map(std::mem::take);
    let draft = stand_in(&mut existing.prepared_payload);
    let result = stand_in(&mut existing.result);
    let mut t = decide_known(ns, key, Some(&existing), op, ctx, settings)?;
    let answered = match (&t.write, &t.alerts[..], &mut t.reply) {
        (Write::None, [], Ok(Reply::Claim(c))) => c.record.as_mut(),
        _ => None,
    };
    match answered {
        Some(r) => {
            r.prepared_payload = draft.or(r.prepared_payload.take());
            r.result = result.or(r.result.take());
            Some(t)
        }
        None => {
            existing.prepared_payload = draft.or(existing.prepared_payload);
            existing.result = result.or(existing.result);
            decide_known(ns, key, Some(&existing), op, ctx, settings)
        }
    }
}

/// The follow-ups of an effect's or an action's claim that acquired ([`ExecCtx::then_prepare`],
/// [`ExecCtx::then_sent`]), decided on the record the claim left and folded into the claim's
/// transition: one atomic step, one commit, where the caller would otherwise wait for two or
/// three. The record written is the one the last step left (its version counts every step),
/// the events are every step's in order, and the answer is the claim's with that record.
///
/// Anything but an acquisition, a record that already holds a draft (a later attempt: the
/// draft is the one saved first), a draft that waits for approval (nothing is sent), or a
/// step that is refused, raises an alert or counts something stops there: the caller does the
/// rest itself, reading from the events what was done. Pure: no I/O.
pub fn follow_ups(
    ns: &Namespace,
    key: &Key,
    mut t: Transition,
    ctx: &ExecCtx,
    decision: &idem_core::Ctx<'_>,
) -> Transition {
    if ctx.then_prepare.is_none() && ctx.then_sent.is_none() {
        return t;
    }
    let token = match &t.reply {
        Ok(Reply::Claim(c)) if c.outcome == idem_core::ClaimOutcome::Acquired => {
            match (&c.token, &c.record) {
                (Some(tok), Some(_)) => tok.secret(),
                _ => return t,
            }
        }
        _ => return t,
    };
    let mut current = match &t.write {
        Write::Insert(r) | Write::Update(r) => r.clone(),
        Write::None => return t,
    };
    let mut steps = Vec::with_capacity(2);
    if let Some(p) = &ctx.then_prepare {
        if current.prepared_payload.is_some() {
            return t;
        }
        steps.push(Op::Prepare(idem_core::PrepareRequest {
            token: token.clone(),
            payload: p.payload.clone(),
            approval_required: p.approval_required,
        }));
    }
    let waits = ctx
        .then_prepare
        .as_ref()
        .is_some_and(|p| p.approval_required);
    if let (Some(request), false) = (&ctx.then_sent, waits) {
        steps.push(Op::EffectSent(idem_core::EffectSentRequest {
            token,
            request: request.clone(),
        }));
    }
    let mut folded = false;
    for op in &steps {
        let step = idem_core::apply(ns, key, Some(&current), op, decision);
        match (step.write, step.reply) {
            (Write::Update(r), Ok(Reply::Written))
                if step.alerts.is_empty()
                    && !step.first_acquisition
                    && step.tally == idem_core::Tally::default() =>
            {
                current = r;
                t.events.extend(step.events);
                folded = true;
            }
            _ => break,
        }
    }
    if !folded {
        return t;
    }
    if let Ok(Reply::Claim(c)) = &mut t.reply {
        c.record = Some((*current).clone());
    }
    t.write = match t.write {
        Write::Insert(_) => Write::Insert(current),
        _ => Write::Update(current),
    };
    t
}

/// The narrow storage side of [`execute`]: one unit of work on one record.
///
/// Futures of an implementation need not be `Send`: the SQLite writer runs them on its own
/// thread (they never wait there; see [`run_ready`]) and PostgreSQL's are awaited where the
/// concrete type is known.
#[allow(async_fn_in_trait)]
pub trait Backend {
    /// Name for logs and errors (`sqlite`, `postgres`).
    const NAME: &'static str;
    type Ns: NsView;

    /// Optional fast path, asked first on every attempt. Whatever it answers must come from
    /// [`decide_known`] (or `apply` on data read with every input) and be persisted under
    /// guards that make the database confirm what the decision was made on.
    async fn shortcut(
        &mut self,
        _ns: &Namespace,
        _key: &Key,
        _op: &Op,
        _ctx: &ExecCtx,
    ) -> Result<Shortcut<Self::Ns>, TxError> {
        Ok(Shortcut::Read)
    }

    /// Reads the record and the namespace context in one snapshot (today's count too, if it
    /// is as cheap to read with them).
    async fn load(
        &mut self,
        ns: &Namespace,
        key: &Key,
        day: i64,
    ) -> Result<Loaded<Self::Ns>, TxError>;

    /// Today's first-time acquisitions in `ns` (asked only when the decision needs them).
    async fn daily_count(&mut self, ns: &Namespace, day: i64) -> Result<u64, TxError>;

    /// Persists `plan` atomically: the guarded record write, the events, the acquisition count
    /// and the alerts, committed together, or nothing. `basis` is what the decision was made
    /// on (a backend with a cache remembers the outcome).
    async fn persist(
        &mut self,
        ns: &Namespace,
        key: &Key,
        plan: &Plan<'_>,
        basis: Loaded<Self::Ns>,
    ) -> Result<Persisted, TxError>;

    /// An attempt ended with an error or a lost race: forget what it may have cached.
    fn attempt_failed(&mut self, _ns: &Namespace, _key: &Key) {}

    /// Called before attempt `attempt + 1` after a lost race (a pause against lockstep).
    async fn lost_race(&mut self, _attempt: u32) {}
}

/// Runs `op` on `(ns, key)`: decides and persists, again on fresh data after each lost race,
/// at most `max_attempts` times (then `Unavailable`).
pub async fn execute<B: Backend>(
    b: &mut B,
    ns: &Namespace,
    key: &Key,
    op: &Op,
    ctx: &ExecCtx,
    max_attempts: u32,
) -> Result<Ran, StoreError> {
    for attempt in 0..max_attempts {
        match once(b, ns, key, op, ctx).await {
            Ok(ran) => return Ok(ran),
            Err(TxError::Store(e)) => {
                b.attempt_failed(ns, key);
                return Err(e);
            }
            Err(TxError::Race) => {
                b.attempt_failed(ns, key);
                b.lost_race(attempt).await;
            }
        }
    }
    tracing::warn!(
        op = op.name(),
        "{}: gave up after repeated write conflicts",
        B::NAME
    );
    Err(StoreError::Unavailable(format!(
        "{}: {} kept conflicting with concurrent writers; try again",
        B::NAME,
        op.name()
    )))
}

async fn once<B: Backend>(
    b: &mut B,
    ns: &Namespace,
    key: &Key,
    op: &Op,
    ctx: &ExecCtx,
) -> Result<Ran, TxError> {
    let day = ctx.now.utc_day();
    let loaded = match b.shortcut(ns, key, op, ctx).await? {
        Shortcut::Done(ran) => return Ok(ran),
        Shortcut::Decide(loaded) => loaded,
        Shortcut::Read => b.load(ns, key, day).await?,
    };
    let (policy, paused) = (loaded.ns.policy(), loaded.ns.paused());
    let daily_count = match loaded.daily_count {
        Some(n) => n,
        None if needs_daily_count(op, loaded.record.as_ref(), policy, paused) => {
            b.daily_count(ns, day).await?
        }
        // Not needed: every value decides the same.
        None => 0,
    };
    let decision = ctx.decision(policy, paused, daily_count);
    let t = idem_core::apply(ns, key, loaded.record.as_ref(), op, &decision);
    let t = follow_ups(ns, key, t, ctx, &decision);
    let from_state = loaded.record.as_ref().map(|r| r.state);
    let persisted = {
        let mut plan =
            plan(&t, loaded.ns.policy(), ctx.now, ctx.traceparent.as_deref()).riding(ctx);
        // An update is guarded by the version it was decided on (with follow-ups folded in,
        // the record written is more than one version ahead of it).
        if let (
            PlanWrite::Update {
                expected_version, ..
            },
            Some(r),
        ) = (&mut plan.write, &loaded.record)
        {
            *expected_version = r.version;
        }
        // Boxed: this future is the largest of `once`'s, and without the box every call's
        // state (fast paths included) is as large as it, and copied whole as it is moved.
        Box::pin(b.persist(ns, key, &plan, loaded)).await?
    };
    Ok(finish(t, persisted, from_state))
}

/// Drives a future that never waits (a backend whose every step is synchronous, like the
/// SQLite writer's) to completion on the current thread. A future that does wait is a bug in
/// such a backend: it is reported, never blocked on.
pub fn run_ready<T>(fut: impl Future<Output = Result<T, StoreError>>) -> Result<T, StoreError> {
    let mut fut = pin!(fut);
    match fut.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(out) => out,
        Poll::Pending => Err(StoreError::Internal(
            "a synchronous backend step waited".into(),
        )),
    }
}

#[cfg(test)]
mod tests;
