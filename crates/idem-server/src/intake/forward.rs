//! The delivery worker: forwards stored inbound events to their source's `forward.url`, on
//! the store's outbox (kind `forward`).
//!
//! One [`Forwarder::step`] claims due items (leased for the longest source timeout plus a
//! margin), and runs each delivery in its own task under two bounds: a global cap per
//! instance and `forward.concurrency` per source. While deliveries run, the next step waits
//! for a quarter of the global cap to come free (or [`ROOM_WAIT`]) and claims again at once,
//! so a backlog drains without waiting out the loop's interval between batches. A delivery takes the record's lease first
//! (`ForwardStart`: refused while another attempt holds it, the namespace is paused or the
//! retry is not due — then the item waits), sends the stored body verbatim with its
//! `Content-Type`, the forwarded headers, `Idem-Source`, `Idem-Key`, `Idem-Event-Id`,
//! `Idem-Attempt`, `Idem-Received-At` and, with `forward.secret`, the Standard Webhooks
//! `webhook-id` / `webhook-timestamp` / `webhook-signature` (which replace inbound ones),
//! then reports the outcome (`ForwardReport`: completed, failed_retryable with its
//! not-before, or needs_review with an alert) in one atomic step with the attempt appended
//! to the event's row and the item finished as the new state implies (done, retry at the
//! record's not-before, or dead: `idem_store::ReportRider`); a report that no longer holds
//! the record's lease moves nothing, and then the attempt is appended and the item retried
//! on their own.
//!
//! Fan-out: an item names its destination (none: `default`); the delivery uses that
//! destination's URL, timeout, headers, secret and retry budget, is bounded by its
//! `concurrency` per instance, and, with a `rate`, first takes the destination's next slot
//! from the ledger (`Store::pace_take`; an item whose slot is not due yet waits for it in the
//! outbox). The body comes from the event's row, which the item names. A delivery whose record
//! is not made yet (its row is written with the event's) makes it first, in the same pass.
//!
//! Never here: following a redirect, reading more of an answer than its status and
//! `Retry-After`, keeping a response body, or logging a body, a header value or a secret.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idem::{
    EgressPolicy, ForwardOutcome, ForwardReportRequest, ForwardRetry, ForwardStartRequest,
    IntakeReceiveRequest, IntakeReply, IntakeUpdate, Key, Ledger, Namespace, Op, OpError,
    OutboxClaim, OutboxFinish, OutboxItem, OutboxKind, OutboxOutcome, Reply, ReportRider, State,
    Store, StoreError, Timestamp,
};
use idem_egress::{Egress, HeaderMap, HeaderName, HeaderValue, Method, Outbound, Outcome};
use serde_json::json;
use tokio::sync::{Notify, Semaphore};

use super::receive::ForwardItem;
use super::{LoadedSource, SourceCache};
use crate::telemetry::TraceHeaders;
use idem_intake::fanout::{held_delivery_key, DEFAULT};
use idem_intake::source::Forward;
use tracing::Instrument;

/// Added to `forward.timeout_ms` for the record's lease of one attempt.
pub const LEASE_MARGIN_MS: i64 = 5000;
/// Deliveries in flight per instance, all sources together.
pub const MAX_IN_FLIGHT: usize = 64;
/// While deliveries run, a step claims once this many places are free (or after
/// [`ROOM_WAIT`]): fewer, larger claims.
pub const CLAIM_AT_FREE: usize = MAX_IN_FLIGHT / 4;
/// The longest a busy step waits for [`CLAIM_AT_FREE`] places.
pub const ROOM_WAIT: Duration = Duration::from_millis(20);
/// How long the longest source timeout (the items' lease) is reused between steps.
const LONGEST_TTL: Duration = Duration::from_secs(1);

/// The worker's shared state.
pub struct Forwarder {
    store: Arc<dyn Store>,
    ledger: Ledger,
    egress: Egress,
    global: Arc<Semaphore>,
    /// Signalled by each delivery that ends (a place in `global` came free).
    freed: Notify,
    sources: Arc<SourceCache>,
    /// The longest `forward.timeout_ms` of all sources, and when it was read.
    longest: Mutex<Option<(Instant, i64)>>,
    /// One semaphore per destination of a source (`{source}/{destination}`), sized by its
    /// `concurrency` (remade when it changes).
    per_source: Mutex<HashMap<String, (u32, Arc<Semaphore>)>>,
}

impl Forwarder {
    pub fn new(ledger: Ledger, egress: Egress, sources: Arc<SourceCache>) -> Arc<Forwarder> {
        Arc::new(Forwarder {
            store: ledger.store().clone(),
            ledger,
            egress,
            global: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
            freed: Notify::new(),
            sources,
            longest: Mutex::new(None),
            per_source: Mutex::new(HashMap::new()),
        })
    }

    fn source_gate(&self, name: &str, concurrency: u32) -> Arc<Semaphore> {
        let mut m = self
            .per_source
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match m.get(name) {
            Some((n, s)) if *n == concurrency => s.clone(),
            _ => {
                let s = Arc::new(Semaphore::new(concurrency.max(1) as usize));
                m.insert(name.to_owned(), (concurrency, s.clone()));
                s
            }
        }
    }

    /// The longest `timeout_ms` of every destination of every source (read at most once a
    /// second).
    async fn longest_timeout(&self) -> Result<i64, StoreError> {
        let lock = || {
            self.longest
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        };
        if let Some((at, ms)) = *lock() {
            if at.elapsed() < LONGEST_TTL {
                return Ok(ms);
            }
        }
        let ms = self
            .store
            .source_list()
            .await?
            .iter()
            .filter_map(|r| serde_json::from_str::<serde_json::Value>(&r.config).ok())
            .flat_map(|v| {
                let mut ms: Vec<i64> = v
                    .pointer("/forward/timeout_ms")
                    .and_then(|t| t.as_i64())
                    .into_iter()
                    .collect();
                if let Some(serde_json::Value::Object(named)) = v.get("forwards") {
                    ms.extend(
                        named
                            .values()
                            .filter_map(|f| f.get("timeout_ms").and_then(|t| t.as_i64())),
                    );
                }
                ms
            })
            .max()
            .unwrap_or(idem_intake::source::DEFAULT_TIMEOUT_MS);
        *lock() = Some((Instant::now(), ms));
        Ok(ms)
    }

    /// Claims due items and starts their deliveries; `true` when the loop should come back at
    /// once: it claimed some, or every place is taken (the next step then waits for room
    /// rather than the loop's interval). `false` when nothing was due.
    pub async fn step(self: &Arc<Self>) -> Result<bool, StoreError> {
        let waited_until = tokio::time::Instant::now() + ROOM_WAIT;
        while self.global.available_permits() < CLAIM_AT_FREE {
            if tokio::time::timeout_at(waited_until, self.freed.notified())
                .await
                .is_err()
            {
                break;
            }
        }
        let free = self.global.available_permits();
        if free == 0 {
            return Ok(true);
        }
        let now = self.ledger.now();
        let longest = self.longest_timeout().await?;
        let items = self
            .store
            .outbox_claim(OutboxClaim {
                kind: OutboxKind::Forward,
                now,
                limit: free,
                lease_ms: longest + LEASE_MARGIN_MS,
            })
            .await?;
        let claimed = !items.is_empty();
        for item in items {
            let Ok(permit) = self.global.clone().acquire_owned().await else {
                break;
            };
            let me = self.clone();
            // Boxed: the delivery's future is large, and the task would move it by value.
            tokio::spawn(async move {
                if let Err(e) = Box::pin(me.deliver(item)).await {
                    tracing::warn!(error = %e, "forward: store error; the item is retried after its lease");
                }
                drop(permit);
                me.freed.notify_one();
            });
        }
        Ok(claimed)
    }

    async fn finish(&self, item: &OutboxItem, outcome: OutboxOutcome) -> Result<(), StoreError> {
        let Some(lease) = item.lease.clone() else {
            return Ok(());
        };
        self.store
            .outbox_finish(OutboxFinish {
                id: item.id,
                lease,
                outcome,
                now: self.ledger.now(),
            })
            .await?;
        Ok(())
    }

    async fn deliver(&self, item: OutboxItem) -> Result<(), StoreError> {
        let queued = match serde_json::from_slice::<ForwardItem>(&item.payload) {
            Ok(p) => p,
            Err(_) => {
                let error = Some("unreadable forward item".to_owned());
                return self.finish(&item, OutboxOutcome::Dead { error }).await;
            }
        };
        let src_name = queued.source.clone();
        let (Ok(ns), Ok(key)) = (
            Namespace::try_from(item.namespace.as_str()),
            Key::try_from(item.key.as_str()),
        ) else {
            let error = Some("bad namespace or key".to_owned());
            return self.finish(&item, OutboxOutcome::Dead { error }).await;
        };
        let Some(src) = self.sources.get(&src_name, self.ledger.now()).await? else {
            // A deleted source forwards nothing more (its records stay).
            let error = Some("source deleted".to_owned());
            return self.finish(&item, OutboxOutcome::Dead { error }).await;
        };
        let dest = queued
            .destination
            .clone()
            .unwrap_or_else(|| DEFAULT.to_owned());
        let Some(fwd) = src.source.destination(&dest).cloned() else {
            // A destination removed from the source forwards nothing more (its record stays).
            let error = Some("destination removed".to_owned());
            return self.finish(&item, OutboxOutcome::Dead { error }).await;
        };
        let gate = self.source_gate(&format!("{src_name}/{dest}"), fwd.concurrency);
        let Ok(_slot) = gate.acquire_owned().await else {
            return Ok(());
        };
        // A paced destination: take its next slot from the ledger (shared by every instance),
        // or wait for it. The record's own not-before (a Retry-After) is checked after, by
        // the start, so the later of both wins.
        if let Some(rate) = fwd.rate {
            let now = self.ledger.now();
            if let Some(until) = self
                .store
                .pace_take(&src_name, &dest, rate.interval_ms(), now)
                .await?
            {
                let at = until.max(now);
                return self
                    .finish(&item, OutboxOutcome::Retry { at, error: None })
                    .await;
            }
        }
        let lease_ms = fwd.timeout_ms + LEASE_MARGIN_MS;
        let expect = queued.expects();
        // The event's row, when this pass already read it (it made the delivery's record).
        let mut made: Option<idem::IntakeEventRow> = None;
        let (token, attempt) = loop {
            let started = self
                .ledger
                .execute(
                    &ns,
                    &key,
                    Op::ForwardStart(ForwardStartRequest {
                        lease_ms,
                        expect: expect.clone(),
                    }),
                    None,
                )
                .await?;
            break match started.reply {
                Ok(Reply::Intake(IntakeReply::Started { token, attempt, .. })) => (token, attempt),
                Ok(Reply::Intake(IntakeReply::Wait { until })) => {
                    return self
                        .finish(
                            &item,
                            OutboxOutcome::Retry {
                                at: until,
                                error: None,
                            },
                        )
                        .await;
                }
                // The key is another record's: this delivery is held for review under its
                // held key, and that record is left alone.
                Ok(Reply::Intake(IntakeReply::Collision { record })) => {
                    // A tombstone is this delivery's when its row is (retention dropped what
                    // the record stood for): nothing left to deliver.
                    if super::receive::is_tombstone(&record)
                        && self
                            .store
                            .intake_event(ns.as_str(), key.as_str())
                            .await?
                            .is_some_and(|row| is_delivery(&row, &queued, &dest))
                    {
                        return self.finish(&item, OutboxOutcome::Done).await;
                    }
                    return self.hold_collided(&item, &queued, &dest, &ns, &key).await;
                }
                Err(OpError::NotFound) if expect.is_some() && made.is_none() => {
                    // A delivery's first pass: its record is made now (with its row, if the
                    // receive could not write it), then it is started in this same pass.
                    match self.make_delivery(&item, &queued, &dest, &ns, &key).await? {
                        Some(event) => {
                            made = Some(event);
                            continue;
                        }
                        None => return Ok(()),
                    }
                }
                Err(OpError::NotFound) if expect.is_some() => {
                    // Made a moment ago and gone again (retention, a forced drop): the next pass
                    // sees why.
                    let at = self.ledger.now();
                    return self
                        .finish(&item, OutboxOutcome::Retry { at, error: None })
                        .await;
                }
                Err(OpError::NotFound) => {
                    // The body was stored but the record not (the receive did not finish): make
                    // the record now, then deliver on the next pass.
                    if let Some(row) = self.store.intake_event(ns.as_str(), key.as_str()).await? {
                        // A delivery row (or an event row with a forward item) is delivered under
                        // its own key.
                        let op = Op::IntakeReceive(IntakeReceiveRequest {
                            source: src_name.clone(),
                            event_id: row.event_id,
                            delivers: true,
                            destination: row.destination,
                            collides_with: None,
                        });
                        let made = self.ledger.execute(&ns, &key, op, None).await?;
                        if matches!(made.reply, Ok(Reply::Intake(IntakeReply::Collision { .. }))) {
                            let error = Some("the key is another record's".to_owned());
                            return self.finish(&item, OutboxOutcome::Dead { error }).await;
                        }
                        let at = self.ledger.now();
                        return self
                            .finish(&item, OutboxOutcome::Retry { at, error: None })
                            .await;
                    }
                    let error = Some("no stored event".to_owned());
                    return self.finish(&item, OutboxOutcome::Dead { error }).await;
                }
                // Delivered, in review, or not an intake record: nothing to send for this item.
                _ => return self.finish(&item, OutboxOutcome::Done).await,
            };
        };
        // A delivery to a named destination reads the body from its event's row, which its
        // item names (read already when this pass made the delivery's record).
        let event = match made {
            Some(event) => Some(event),
            None if queued.event_key.is_some() => self.event_of(&ns, &queued).await?,
            None => match self.store.intake_event(ns.as_str(), key.as_str()).await? {
                // An item queued without its event's key, for a delivery's row.
                Some(row) => match &row.event_key {
                    None => Some(row),
                    Some(ek) => self.store.intake_event(ns.as_str(), ek).await?,
                },
                None => None,
            },
        };
        let Some(event) = event else {
            let error = Some("no stored event".to_owned());
            return self.finish(&item, OutboxOutcome::Dead { error }).await;
        };
        let row = &event;
        // Each attempt is an `intake.forward` span in the trace of the request that queued the
        // item (a root span for items queued without one), from the send to the report.
        let span = crate::telemetry::forward_span(&src_name, ns.as_str(), &dest, attempt, &fwd.url);
        let trace = crate::telemetry::continue_outbound(
            &span,
            queued.traceparent.as_deref(),
            queued.tracestate.as_deref(),
        );
        let at = self.ledger.now();
        let began = Instant::now();
        let target = Destination {
            name: &dest,
            forward: &fwd,
            secret: src.secret_of(&dest),
        };
        let outcome = self
            .send(&src, &target, &key, row, attempt, at, trace.as_ref())
            .instrument(span.clone())
            .await;
        match &outcome {
            SendResult::Status(status, _) => {
                span.record("http.response.status_code", *status);
            }
            SendResult::Error(category, _) => {
                span.record("error.type", *category);
            }
        }
        let duration_ms = began.elapsed().as_millis() as i64;
        let outcome = match outcome {
            SendResult::Status(status, _) if (200..300).contains(&status) => {
                ForwardOutcome::Delivered {
                    status,
                    duration_ms,
                }
            }
            SendResult::Status(status, retry_after_ms) => ForwardOutcome::Failed {
                status: Some(status),
                category: "http".into(),
                message: format!("the receiver answered HTTP {status}"),
                retry_after_ms,
                duration_ms,
            },
            SendResult::Error(category, message) => ForwardOutcome::Failed {
                status: None,
                category: category.into(),
                message,
                retry_after_ms: None,
                duration_ms,
            },
        };
        metrics::histogram!("idem_delivery_duration_seconds", "source" => src_name.clone())
            .record(duration_ms as f64 / 1000.0);
        let attempt_json = match &outcome {
            ForwardOutcome::Delivered { status, .. } => json!({
                "attempt": attempt, "at": at.to_rfc3339(), "status": status,
                "duration_ms": duration_ms, "error": null,
            }),
            ForwardOutcome::Failed {
                status,
                category,
                message,
                ..
            } => json!({
                "attempt": attempt, "at": at.to_rfc3339(), "status": status,
                "duration_ms": duration_ms,
                "error": {"category": category, "message": message},
            }),
        };
        let r = fwd.retry;
        let report = Op::ForwardReport(ForwardReportRequest {
            token,
            outcome,
            retry: ForwardRetry {
                max_attempts: r.max_attempts,
                base_ms: r.base_ms,
                max_ms: r.max_ms,
                window_ms: r.window_ms,
            },
        });
        let delivered = match &report {
            Op::ForwardReport(r) if matches!(r.outcome, ForwardOutcome::Delivered { .. }) => {
                idem::Delivered::At(self.ledger.now())
            }
            _ => idem::Delivered::Keep,
        };
        let update = IntakeUpdate {
            namespace: ns.as_str().to_owned(),
            key: key.as_str().to_owned(),
            attempt: Some(attempt_json.to_string()),
            delivered,
        };
        // The attempt and the item's finish ride on the report's update of the record (one
        // atomic step): whoever sees the new state sees the attempt that led there, and a
        // crash before it leaves neither (the lease runs out and the next attempt follows).
        let reported = match item.lease.clone() {
            Some(lease) => {
                let rider = ReportRider {
                    update: update.clone(),
                    item: item.id,
                    lease,
                };
                self.ledger
                    .execute_reporting(&ns, &key, report, rider)
                    .await?
            }
            None => self.ledger.execute(&ns, &key, report, None).await?,
        };
        let rec = match reported.reply {
            Ok(Reply::Record(rec)) => Some(rec),
            _ => None,
        };
        let result = match &rec {
            Some(r) if r.state == State::Completed => "delivered",
            Some(r) if r.state == State::FailedRetryable => "retry",
            Some(_) => "dead",
            None => "retry",
        };
        if !reported.rider_stored {
            // The report did not move the record (another attempt took the lease over): the
            // attempt is still listed, and that attempt's item goes on.
            self.store.intake_update(update).await?;
            let next = match &rec {
                Some(r) => idem::forward_finish(r, self.ledger.now()),
                None => OutboxOutcome::Retry {
                    at: self.ledger.now(),
                    error: None,
                },
            };
            self.finish(&item, next).await?;
        }
        span.record("result", result);
        drop(span);
        metrics::counter!("idem_deliveries_total", "source" => src_name.clone(),
            "destination" => dest.clone(), "result" => result)
        .increment(1);
        tracing::info!(source = %src_name, destination = %dest,
            key = %idem::mask_key(key.as_str()), attempt, result, "forward");
        Ok(())
    }

    /// The first pass of a delivery to a named destination whose record is not made yet:
    /// makes it (`IntakeReceive` for that destination, its row riding on it when the receive
    /// could not write it) and answers the event's row, so the same pass starts and sends the
    /// delivery. A key that turns out to be another record's (its record, or its row) holds
    /// the delivery instead; then, or when the event's row is gone, the item is finished here
    /// and the answer is `None`.
    async fn make_delivery(
        &self,
        item: &OutboxItem,
        queued: &ForwardItem,
        dest: &str,
        ns: &Namespace,
        key: &Key,
    ) -> Result<Option<idem::IntakeEventRow>, StoreError> {
        let Some(event) = self.event_of(ns, queued).await? else {
            let error = Some("no stored event".to_owned());
            self.finish(item, OutboxOutcome::Dead { error }).await?;
            return Ok(None);
        };
        let (op, rider) = delivery_receive(ns, key, queued, dest, &event, None);
        let made = self.ledger.execute_riding(ns, key, op, rider).await?;
        let taken = match &made.reply {
            Ok(Reply::Intake(IntakeReply::Collision { .. })) => true,
            Ok(Reply::Intake(IntakeReply::Accepted { .. })) if !made.rider_stored => self
                .store
                .intake_event(ns.as_str(), key.as_str())
                .await?
                .is_some_and(|row| !is_delivery(&row, queued, dest)),
            _ => false,
        };
        if taken {
            self.hold_collided(item, queued, dest, ns, key).await?;
            return Ok(None);
        }
        Ok(Some(event))
    }

    /// A delivery whose key is another record's: kept under its held key
    /// ([`held_delivery_key`]) in `needs_review` with a `key_collision` alert (with its row,
    /// so the event's read shows it and an operator can redeliver it there), counted as
    /// dead. The item is done.
    async fn hold_collided(
        &self,
        item: &OutboxItem,
        queued: &ForwardItem,
        dest: &str,
        ns: &Namespace,
        key: &Key,
    ) -> Result<(), StoreError> {
        let src_name = &queued.source;
        let (Some(event_key), Some(event)) = (&queued.event_key, self.event_of(ns, queued).await?)
        else {
            let error = Some("the key is another record's".to_owned());
            return self.finish(item, OutboxOutcome::Dead { error }).await;
        };
        let held = held_delivery_key(event_key, dest);
        let Ok(held_key) = Key::try_from(held.as_str()) else {
            let error = Some("bad held key".to_owned());
            return self.finish(item, OutboxOutcome::Dead { error }).await;
        };
        let (op, rider) = delivery_receive(ns, &held_key, queued, dest, &event, Some(key.as_str()));
        let made = self.ledger.execute_riding(ns, &held_key, op, rider).await?;
        let kept = match &made.reply {
            Ok(Reply::Intake(IntakeReply::Held { .. })) if !made.rider_stored => self
                .store
                .intake_event(ns.as_str(), &held)
                .await?
                .is_some_and(|row| is_delivery(&row, queued, dest)),
            Ok(Reply::Intake(IntakeReply::Held { .. } | IntakeReply::Duplicate { .. })) => true,
            _ => false,
        };
        metrics::counter!("idem_deliveries_total", "source" => src_name.clone(),
            "destination" => dest.to_owned(), "result" => "dead")
        .increment(1);
        if !kept {
            // Only an event whose id is exactly the held key's text could hold it.
            tracing::warn!(source = %src_name, destination = %dest,
                key = %idem::mask_key(key.as_str()),
                "forward: the delivery's key and its held key are other records'; not delivered");
            let error = Some("the delivery's key and its held key are other records'".to_owned());
            return self.finish(item, OutboxOutcome::Dead { error }).await;
        }
        tracing::warn!(source = %src_name, destination = %dest,
            key = %idem::mask_key(key.as_str()), held = %idem::mask_key(&held),
            "forward: the delivery's key is another record's; held for review");
        self.finish(item, OutboxOutcome::Done).await
    }

    /// The event row of a delivery's item.
    async fn event_of(
        &self,
        ns: &Namespace,
        queued: &ForwardItem,
    ) -> Result<Option<idem::IntakeEventRow>, StoreError> {
        match &queued.event_key {
            Some(k) => Ok(self
                .store
                .intake_event(ns.as_str(), k)
                .await?
                .filter(|e| e.event_key.is_none())),
            None => Ok(None),
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn send(
        &self,
        src: &LoadedSource,
        to: &Destination<'_>,
        key: &Key,
        row: &idem::IntakeEventRow,
        attempt: u32,
        at: Timestamp,
        trace: Option<&TraceHeaders>,
    ) -> SendResult {
        let url = &to.forward.url;
        let policy = match forward_policy(url) {
            Some(p) => p,
            None => return SendResult::Error("connection", "forward.url has no host".into()),
        };
        let target = match self.egress.check(&policy, url).await {
            Ok(t) if t.unresolvable() => {
                return SendResult::Error("connection", "forward.url does not resolve".into())
            }
            Ok(t) => t,
            Err(e) => return SendResult::Error("connection", format!("forward.url refused: {e}")),
        };
        let body = row.body.clone().unwrap_or_default();
        let mut headers = HeaderMap::new();
        let secret = to.secret;
        // The event's row keeps the inbound headers of every destination; this one passes on
        // its own list.
        let passed: Vec<String> = src
            .source
            .headers_of(to.forward)
            .iter()
            .map(|h| h.to_ascii_lowercase())
            .collect();
        if let Ok(serde_json::Value::Object(m)) = serde_json::from_str(&row.headers) {
            for (name, v) in m {
                if secret.is_some() && name.starts_with("webhook-") {
                    continue;
                }
                if !passed.contains(&name) {
                    continue;
                }
                if let (Ok(n), Some(Ok(v))) = (
                    HeaderName::from_bytes(name.as_bytes()),
                    v.as_str().map(HeaderValue::from_str),
                ) {
                    headers.insert(n, v);
                }
            }
        }
        // idem's trace context replaces a forwarded `traceparent` / `tracestate`.
        if let Some(t) = trace {
            t.set_on(&mut headers);
        }
        let mut set = |name: &'static str, value: &str| {
            if let Ok(v) = HeaderValue::from_str(value) {
                headers.insert(HeaderName::from_static(name), v);
            }
        };
        set(
            "content-type",
            row.content_type
                .as_deref()
                .unwrap_or("application/octet-stream"),
        );
        set("idem-source", &src.source.name);
        set("idem-destination", to.name);
        set("idem-key", key.as_str());
        if let Some(id) = &row.event_id {
            set("idem-event-id", id);
        }
        set("idem-attempt", &attempt.to_string());
        set("idem-received-at", &row.received_at.to_rfc3339());
        if let Some(s) = secret {
            let ts = at.0.div_euclid(1000);
            set("webhook-id", key.as_str());
            set("webhook-timestamp", &ts.to_string());
            set("webhook-signature", &s.sign(key.as_str(), ts, &body));
        }
        let out = Outbound {
            method: Method::POST,
            headers,
            body: Some(body),
            timeout: Duration::from_millis(to.forward.timeout_ms.max(1) as u64),
        };
        match self.egress.send(&target, out).await {
            Outcome::Answered(a) => {
                let retry_after = a
                    .headers
                    .iter()
                    .find(|(n, _)| n == "retry-after")
                    .and_then(|(_, v)| std::str::from_utf8(v).ok())
                    .and_then(|v| {
                        idem::classify::parse_retry_after(
                            &serde_json::Value::String(v.trim().to_owned()),
                            at.0,
                        )
                        .ok()
                    });
                SendResult::Status(a.status, retry_after)
            }
            Outcome::NotSent(n) => SendResult::Error(
                "connection",
                match n {
                    idem::effect::NotSent::Dns => "the name did not resolve".into(),
                    idem::effect::NotSent::Connect => "could not connect".into(),
                },
            ),
            Outcome::Lost(idem::effect::Lost::Timeout) => SendResult::Error(
                "timeout",
                format!(
                    "no answer within forward.timeout_ms ({} ms)",
                    to.forward.timeout_ms
                ),
            ),
            Outcome::Lost(idem::effect::Lost::Broken) => {
                SendResult::Error("connection", "the connection broke before an answer".into())
            }
        }
    }
}

/// The receive that makes the record of `queued`'s delivery to `dest` under `key` (its own
/// key, or its held key with `collides_with`), with the delivery's row riding on it.
fn delivery_receive(
    ns: &Namespace,
    key: &Key,
    queued: &ForwardItem,
    dest: &str,
    event: &idem::IntakeEventRow,
    collides_with: Option<&str>,
) -> (Op, idem::Rider) {
    let op = Op::IntakeReceive(IntakeReceiveRequest {
        source: queued.source.clone(),
        event_id: queued.event_id.clone(),
        delivers: true,
        destination: Some(dest.to_owned()),
        collides_with: collides_with.map(str::to_owned),
    });
    let row = idem::NewIntakeEvent {
        namespace: ns.as_str().to_owned(),
        key: key.as_str().to_owned(),
        source: queued.source.clone(),
        event_id: queued.event_id.clone(),
        content_type: event.content_type.clone(),
        headers: "{}".to_owned(),
        body: Vec::new(),
        received_at: event.received_at,
        destinations: None,
        delivered_at: None,
        event_key: queued.event_key.clone(),
        destination: Some(dest.to_owned()),
    };
    let rider = idem::Rider {
        intake: row,
        forward: None,
        deliveries: vec![],
    };
    (op, rider)
}

/// Whether `row` is the row of `queued`'s delivery to `dest`.
fn is_delivery(row: &idem::IntakeEventRow, queued: &ForwardItem, dest: &str) -> bool {
    row.source == queued.source
        && row.event_key == queued.event_key
        && row.destination.as_deref() == Some(dest)
}

/// Where one delivery goes: the destination's name, settings and signing secret.
struct Destination<'a> {
    name: &'a str,
    forward: &'a Forward,
    secret: Option<&'a idem::AlertSecret>,
}

enum SendResult {
    Status(u16, Option<i64>),
    Error(&'static str, String),
}

/// The egress policy of a forward: exactly the URL's own host and port (see the module doc
/// of [`crate::intake`]).
pub fn forward_policy(url: &str) -> Option<EgressPolicy> {
    EgressPolicy::exactly(url)
}
