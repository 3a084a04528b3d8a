//! Background loops: the janitor (lease expiry, stuck detection, retention — of records, and
//! of the intake's stored bodies following their records), the store
//! gauges and the alert sender.
//!
//! Each is one public `*_once()` step that tests drive deterministically, plus a thin loop
//! that runs the step again at once after a full batch (there is more to do), sleeps the
//! interval after a partial one, backs off exponentially after an error, and stops at
//! shutdown. Steps work in bounded batches so they never hold the store for long.
//! Alerts carry no payloads, results or secrets: only the namespace, the masked key and its
//! SHA-256, the state, the reason and the error category. Every alert carries the Standard
//! Webhooks `webhook-id` (stable across retries) and `webhook-timestamp`; a namespace with an
//! `alert_secret` adds `webhook-signature` over the exact body bytes sent. Redirects are never
//! followed ([`alert_client`]): a 3xx answer is a failed delivery, retried like any other.
//! Alerts are items of the store's durable outbox: queued in the transaction that caused
//! them, claimed with a lease (one sender per alert across instances), retried on
//! [`alert_schedule`] and dead after the budget.

use std::sync::Arc;
use std::time::Duration;

use idem::{
    AlertOutcome, Jitter, Key, OutboxOutcome, PendingAlert, RetrySchedule, Stats, Store,
    StoreError, Timestamp,
};
use serde::Serialize;
use tokio::sync::watch;

/// Longest pause after repeated errors.
const MAX_ERROR_BACKOFF: Duration = Duration::from_secs(300);

/// What one janitor step did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JanitorReport {
    pub examined: usize,
    pub moved_to_review: usize,
    pub stuck_alerts: usize,
    pub results_expired: usize,
    pub tombstones_deleted: usize,
    /// Some part filled its batch: run again without waiting.
    pub full_batch: bool,
}

/// One janitor step at `now`: sweep leases, apply retention. The store gauges are read at
/// scrape time ([`gauges_once`]), never per batch.
pub async fn janitor_once(
    store: &Arc<dyn Store>,
    now: Timestamp,
    batch: usize,
) -> Result<JanitorReport, StoreError> {
    let sweep = store.sweep_once(now, batch).await?;
    // Intake bodies and rows go in the retention step's transaction, with their records.
    let ret = store.retention_once(now, batch).await?;
    let expired = ret.results_expired + ret.tombstones_deleted;
    if expired > 0 {
        metrics::counter!("idem_janitor_expired_total").increment(expired as u64);
    }
    let report = JanitorReport {
        examined: sweep.examined,
        moved_to_review: sweep.moved_to_review,
        stuck_alerts: sweep.stuck_alerts,
        results_expired: ret.results_expired,
        tombstones_deleted: ret.tombstones_deleted,
        full_batch: sweep.examined >= batch
            || ret.results_expired >= batch
            || ret.tombstones_deleted >= batch,
    };
    if report.moved_to_review + report.stuck_alerts + expired > 0 {
        tracing::info!(
            moved_to_review = report.moved_to_review,
            stuck = report.stuck_alerts,
            results_expired = report.results_expired,
            tombstones_deleted = report.tombstones_deleted,
            "janitor"
        );
    }
    Ok(report)
}

/// Reads the store gauges (records per state, review-queue depth, oldest `processing`) and
/// sets them. Cheap at any ledger size: the counts come from counters the store keeps exact
/// in the transaction of every write, the oldest `processing` from an index.
pub async fn gauges_once(store: &Arc<dyn Store>, now: Timestamp) -> Result<Stats, StoreError> {
    let stats = store.stats(now).await?;
    crate::metrics::set_stats(&stats);
    intake_backlog_once(store).await?;
    Ok(stats)
}

/// Sets `idem_intake_backlog{source,destination}` (deliveries not yet made) for every
/// destination of every source, from the store's partial index of undelivered rows (so it has
/// no lag behind the writes). Destinations are read from each source's stored configuration
/// (`forward` is `default`); a pair with a backlog but no such destination any more is shown
/// too, so nothing undelivered hides.
pub async fn intake_backlog_once(store: &Arc<dyn Store>) -> Result<(), StoreError> {
    let backlog = store.intake_backlog().await?;
    let mut pairs: Vec<(String, String)> = vec![];
    for row in store.source_list().await? {
        let cfg: serde_json::Value = serde_json::from_str(&row.config).unwrap_or_default();
        if cfg.get("forward").is_some_and(|f| !f.is_null()) {
            pairs.push((row.name.clone(), idem_intake::fanout::DEFAULT.to_owned()));
        }
        if let Some(serde_json::Value::Object(named)) = cfg.get("forwards") {
            pairs.extend(named.keys().map(|d| (row.name.clone(), d.clone())));
        }
    }
    for (s, d, _) in &backlog {
        if !pairs.iter().any(|(ps, pd)| ps == s && pd == d) {
            pairs.push((s.clone(), d.clone()));
        }
    }
    for (source, destination) in pairs {
        let n = backlog
            .iter()
            .find(|(s, d, _)| *s == source && *d == destination)
            .map_or(0, |(_, _, n)| *n);
        metrics::gauge!("idem_intake_backlog", "source" => source, "destination" => destination)
            .set(n as f64);
    }
    Ok(())
}

/// The alert body posted to a namespace `alert_url`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct AlertBody {
    pub namespace: String,
    pub key_masked: String,
    pub key_sha256: String,
    pub state: &'static str,
    pub reason: String,
    pub error_category: Option<String>,
    pub at: String,
}

impl AlertBody {
    pub fn of(a: &PendingAlert) -> AlertBody {
        AlertBody {
            namespace: a.namespace.clone(),
            key_masked: idem::mask_key(&a.key),
            key_sha256: Key::try_from(a.key.as_str())
                .map(|k| k.sha256_hex())
                .unwrap_or_default(),
            state: a.state.as_str(),
            reason: a.reason.clone(),
            error_category: a.error_category.clone(),
            at: a.created_at.to_rfc3339(),
        }
    }
}

/// What one alert step did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AlertsReport {
    pub sent: usize,
    pub retried: usize,
    pub gave_up: usize,
    /// No alert_url any more: nothing to send to.
    pub dropped: usize,
    pub full_batch: bool,
}

/// Alerts handled per step.
pub const ALERT_BATCH: usize = 50;
/// How long a claimed alert is reserved for this instance.
const ALERT_LEASE_MS: i64 = 60_000;

/// The alert retry budget on the outbox: `max_tries` deliveries in all, 1 s, 2 s, 4 s …
/// apart, capped at 5 min, without jitter (the documented schedule; alert receivers are few).
pub fn alert_schedule(max_tries: u32) -> RetrySchedule {
    RetrySchedule {
        max_attempts: max_tries,
        base_ms: 1000,
        max_ms: 300_000,
        jitter: Jitter::None,
    }
}

/// How alerts leave the process: through the egress client every outbound request of idem
/// uses (resolve once, connect to exactly the checked address, no proxy from the
/// environment, no redirects — a 3xx would otherwise carry a signed alert to an address
/// nobody configured), each delivery bounded by `timeout`.
#[derive(Clone)]
pub struct AlertSender {
    egress: idem_egress::Egress,
    timeout: Duration,
}

impl AlertSender {
    pub fn new(egress: idem_egress::Egress, timeout: Duration) -> AlertSender {
        AlertSender { egress, timeout }
    }
}

/// An [`AlertSender`] with an egress client of its own (default settings).
pub fn alert_client(timeout: Duration) -> Result<AlertSender, idem_egress::EgressError> {
    let egress = idem_egress::Egress::new(&idem_egress::EgressOptions::default())?;
    Ok(AlertSender::new(egress, timeout))
}

/// The headers and body of one delivery of `alert`: the JSON body as bytes (exactly what is
/// signed), `webhook-id` and `webhook-timestamp` always, `webhook-signature` with a secret.
pub fn alert_request(alert: &PendingAlert, now: Timestamp) -> (idem_egress::HeaderMap, Vec<u8>) {
    use idem_egress::{HeaderName, HeaderValue};
    let body = match serde_json::to_vec(&AlertBody::of(alert)) {
        Ok(b) => b,
        // A struct of strings always serializes; an empty object would still be signed right.
        Err(_) => b"{}".to_vec(),
    };
    let id = idem::webhook::alert_message_id(alert.id, alert.created_at.0);
    let timestamp = now.0.div_euclid(1000);
    let mut headers = idem_egress::HeaderMap::new();
    let mut set = |name: &'static str, value: &str| {
        if let Ok(v) = HeaderValue::from_str(value) {
            headers.insert(HeaderName::from_static(name), v);
        }
    };
    set("content-type", "application/json");
    set("user-agent", concat!("idem/", env!("CARGO_PKG_VERSION")));
    set("webhook-id", &id);
    set("webhook-timestamp", &timestamp.to_string());
    if let Some(secret) = &alert.alert_secret {
        set("webhook-signature", &secret.sign(&id, timestamp, &body));
    }
    (headers, body)
}

/// Sends one delivery; `Ok(status)` when the receiver answered, else why not (no response
/// body is ever read into a message).
async fn send_alert(
    sender: &AlertSender,
    url: &str,
    headers: idem_egress::HeaderMap,
    body: Vec<u8>,
) -> Result<u16, String> {
    let Some(policy) = idem::egress::EgressPolicy::exactly(url) else {
        return Err("alert_url has no host".into());
    };
    let target = sender
        .egress
        .check(&policy, url)
        .await
        .map_err(|e| format!("alert_url refused: {e}"))?;
    let out = idem_egress::Outbound {
        method: idem_egress::Method::POST,
        headers,
        body: Some(body),
        timeout: sender.timeout,
    };
    match sender.egress.send(&target, out).await {
        idem_egress::Outcome::Answered(a) => Ok(a.status),
        idem_egress::Outcome::NotSent(_) => Err("connection failed".into()),
        idem_egress::Outcome::Lost(idem::effect::Lost::Timeout) => Err("timeout".into()),
        idem_egress::Outcome::Lost(idem::effect::Lost::Broken) => Err("request failed".into()),
    }
}

/// One alert step: delivers due alerts, each at most once per step.
pub async fn alerts_once(
    store: &Arc<dyn Store>,
    client: &AlertSender,
    now: Timestamp,
    max_tries: u32,
) -> Result<AlertsReport, StoreError> {
    let schedule = alert_schedule(max_tries);
    let due = store.due_alerts(now, ALERT_BATCH, ALERT_LEASE_MS).await?;
    let mut report = AlertsReport {
        full_batch: due.len() >= ALERT_BATCH,
        ..Default::default()
    };
    for alert in due {
        let masked = idem::mask_key(&alert.key);
        let Some(url) = alert.alert_url.clone() else {
            store
                .finish_alert(alert.id, AlertOutcome::GaveUp, now)
                .await?;
            metrics::counter!("idem_alerts_total", "result" => "dropped").increment(1);
            report.dropped += 1;
            continue;
        };
        // Each delivery is a span of its own (`alert.send`) in the trace of the request that
        // caused the alert, and the receiver gets a `traceparent` to continue it: the span's
        // when spans are exported, else the caller's as stored with the alert.
        let span = crate::telemetry::client_span("alert.send", &alert.namespace, &alert.reason);
        if let Some(tp) = alert.traceparent.as_deref() {
            crate::telemetry::continue_trace(&span, tp);
        }
        let (mut headers, body) = alert_request(&alert, now);
        if let Some(tp) = crate::telemetry::traceparent(&span).or_else(|| alert.traceparent.clone())
        {
            if let Ok(v) = idem_egress::HeaderValue::from_str(&tp) {
                headers.insert(idem_egress::HeaderName::from_static("traceparent"), v);
            }
        }
        let sent =
            tracing::Instrument::instrument(send_alert(client, &url, headers, body), span.clone())
                .await;
        if let Ok(status) = &sent {
            span.record("http.response.status_code", *status);
        }
        let outcome = match sent {
            Ok(status) if (200..300).contains(&status) => Ok(()),
            Ok(status) if (300..400).contains(&status) => Err(format!(
                "HTTP {status} (redirects are not followed: set alert_url to the final address)"
            )),
            Ok(status) => Err(format!("HTTP {status}")),
            Err(why) => Err(why),
        };
        let tries = alert.tries.saturating_add(1);
        let failed = outcome.map_err(|why| {
            let next = schedule.after_failure(alert.tries, now, 0.0, None, None);
            (why, next)
        });
        match failed {
            Ok(()) => {
                store
                    .finish_alert(alert.id, AlertOutcome::Sent, now)
                    .await?;
                metrics::counter!("idem_alerts_total", "result" => "sent").increment(1);
                tracing::info!(namespace = %alert.namespace, key = %masked, reason = %alert.reason, "alert sent");
                report.sent += 1;
            }
            // (`after_failure` never answers `Done`; were it to, giving up is the safe reading.)
            Err((why, OutboxOutcome::Dead { .. } | OutboxOutcome::Done)) => {
                store
                    .finish_alert(alert.id, AlertOutcome::GaveUp, now)
                    .await?;
                metrics::counter!("idem_alerts_total", "result" => "gave_up").increment(1);
                tracing::warn!(namespace = %alert.namespace, key = %masked, tries, why, "alert given up");
                report.gave_up += 1;
            }
            Err((why, OutboxOutcome::Retry { at, .. })) => {
                store
                    .finish_alert(alert.id, AlertOutcome::RetryAt(at), now)
                    .await?;
                metrics::counter!("idem_alerts_total", "result" => "retry").increment(1);
                tracing::warn!(namespace = %alert.namespace, key = %masked, tries, why, "alert delivery failed; will retry");
                report.retried += 1;
            }
        }
    }
    Ok(report)
}

/// Runs `step` until shutdown: again at once after a full batch, after `interval` after a
/// partial one, with exponential backoff after errors.
pub async fn run_loop<F, Fut>(
    name: &'static str,
    interval: Duration,
    mut shutdown: watch::Receiver<bool>,
    mut step: F,
) where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool, StoreError>>,
{
    let mut error_delay = interval;
    loop {
        if *shutdown.borrow() {
            break;
        }
        let delay = match step().await {
            Ok(true) => Duration::ZERO,
            Ok(false) => {
                error_delay = interval;
                interval
            }
            Err(e) => {
                error_delay = (error_delay * 2).min(MAX_ERROR_BACKOFF).max(interval);
                tracing::warn!(loop_name = name, error = %e, retry_in = ?error_delay, "background step failed");
                error_delay
            }
        };
        if delay.is_zero() {
            tokio::task::yield_now().await;
            continue;
        }
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            r = shutdown.changed() => if r.is_err() { break },
        }
    }
    tracing::debug!(loop_name = name, "stopped");
}
