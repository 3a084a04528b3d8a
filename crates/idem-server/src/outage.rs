//! Store outages in the log and the metrics: one WARN line when the store stops answering,
//! one WARN line with the count of refused requests every [`REPORT_EVERY`] while it stays
//! down, one INFO line when it answers again, and the counter
//! `idem_store_unavailable_total` for every 503 `store_unavailable`.
//!
//! It also names where an error was raised ([`RaisedAt`], logged with 5xx answers), so that
//! it imports nothing of this crate and [`crate::error`] can count a refusal here.
//!
//! It exists so that an outage cannot become a log flood (a line per refused request was
//! thousands of lines a second). It owns only that bookkeeping: it never decides an answer,
//! and what it logs is the cause of the first refusal (a driver message, never a payload)
//! and counts.
//!
//! "Answers again" is the first write through the API (a `POST` on a route that needs a
//! role) answered with a 2xx after a refusal: such a write always reached the store.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Where in the server an error was raised (logged with 5xx answers, never sent).
pub type RaisedAt = &'static std::panic::Location<'static>;

/// How often a count is written while the store stays unavailable.
pub const REPORT_EVERY: Duration = Duration::from_secs(10);

/// Fast check for the common case (the store is up): no lock per request.
static DOWN: AtomicBool = AtomicBool::new(false);
static TRACKER: Mutex<Tracker> = Mutex::new(Tracker {
    since: None,
    last_report: None,
    unreported: 0,
    total: 0,
});

struct Tracker {
    since: Option<Instant>,
    last_report: Option<Instant>,
    unreported: u64,
    total: u64,
}

/// A request was refused with 503 `store_unavailable`.
pub fn refused(cause: &str, at: RaisedAt) {
    metrics::counter!("idem_store_unavailable_total").increment(1);
    let Ok(mut t) = TRACKER.lock() else { return };
    let now = Instant::now();
    t.total += 1;
    match t.since {
        None => {
            t.since = Some(now);
            t.last_report = Some(now);
            t.unreported = 0;
            DOWN.store(true, Ordering::Release);
            tracing::warn!(
                cause = %cause,
                at = %at,
                "store unavailable: requests get 503 store_unavailable until it answers again"
            );
        }
        Some(since) => {
            t.unreported += 1;
            if t.last_report
                .is_none_or(|r| now.duration_since(r) >= REPORT_EVERY)
            {
                tracing::warn!(
                    refused = t.unreported,
                    down_for_ms = now.duration_since(since).as_millis() as u64,
                    cause = %cause,
                    "store still unavailable"
                );
                t.last_report = Some(now);
                t.unreported = 0;
            }
        }
    }
}

/// A write reached the store and succeeded: ends an outage if one was under way.
pub fn answered() {
    if !DOWN.load(Ordering::Acquire) {
        return;
    }
    let Ok(mut t) = TRACKER.lock() else { return };
    if let Some(since) = t.since.take() {
        DOWN.store(false, Ordering::Release);
        tracing::info!(
            down_for_ms = since.elapsed().as_millis() as u64,
            refused = t.total,
            "store answering again"
        );
        t.total = 0;
        t.unreported = 0;
        t.last_report = None;
    }
}
