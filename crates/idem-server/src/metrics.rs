//! Prometheus metrics.
//!
//! The recorder is process-global: it is installed once (tests start many servers in one
//! process) and every server renders the same registry. Every metric the contract names is
//! registered at zero when a server starts, so `/metrics` lists them before any traffic.
//! Labels are bounded sets (outcome, state, class, HTTP status, route pattern) — never a key,
//! a namespace or other caller-controlled text.

use std::collections::HashMap;
use std::sync::{OnceLock, RwLock};

use idem::{ClaimOutcome, State, Stats};
use metrics::{Counter, Histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Handles of the per-request metrics, registered once: the `counter!`/`histogram!` macros
/// build, hash and look up a labelled key on every call. Only used once this module's
/// recorder is the process's recorder (a handle taken before would stay a no-op).
struct Hot {
    claims: [(ClaimOutcome, Counter); ClaimOutcome::ALL.len()],
    acquired: [Counter; 2],
    reclaims: Counter,
    duplicate_hits: Counter,
    /// Request latency by route pattern, then by status.
    requests: RwLock<HashMap<Box<str>, ByStatus>>,
}

type ByStatus = Vec<(u16, Histogram)>;

static HOT: OnceLock<Hot> = OnceLock::new();

fn hot() -> Option<&'static Hot> {
    if let Some(h) = HOT.get() {
        return Some(h);
    }
    HANDLE.get()?.as_ref()?;
    Some(HOT.get_or_init(|| Hot {
        claims: ClaimOutcome::ALL.map(|o| {
            (
                o,
                metrics::counter!("idem_claims_total", "outcome" => o.as_str()),
            )
        }),
        acquired: [
            metrics::counter!("idem_acquired_total", "resumed" => "false"),
            metrics::counter!("idem_acquired_total", "resumed" => "true"),
        ],
        reclaims: metrics::counter!("idem_reclaims_total"),
        duplicate_hits: metrics::counter!("idem_duplicate_hits_total"),
        requests: RwLock::new(HashMap::new()),
    }))
}

/// Latency buckets, seconds.
const BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Outbound call buckets, seconds (effects wait for someone else's server).
const EFFECT_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

/// Installs the recorder if nobody did yet; `None` if another recorder owns the process.
pub fn handle() -> Option<&'static PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Full("idem_http_request_duration_seconds".into()),
                    BUCKETS,
                )
                .ok()?
                .set_buckets_for_metric(
                    Matcher::Full("idem_effect_duration_seconds".into()),
                    EFFECT_BUCKETS,
                )
                .ok()?;
            match builder.install_recorder() {
                Ok(h) => Some(h),
                Err(e) => {
                    tracing::warn!(error = %e, "metrics recorder not installed; /metrics is empty");
                    None
                }
            }
        })
        .as_ref()
}

/// Registers every metric at zero.
pub fn register_all() {
    metrics::describe_counter!("idem_claims_total", "Claims by outcome.");
    metrics::describe_counter!(
        "idem_duplicate_hits_total",
        "Claims that replayed a final outcome."
    );
    metrics::describe_counter!("idem_acquired_total", "Acquisitions (fresh or resumed).");
    metrics::describe_counter!(
        "idem_fails_total",
        "Reported failures by class and HTTP status."
    );
    metrics::describe_counter!(
        "idem_reclaims_total",
        "Acquisitions that took over an expired lease."
    );
    metrics::describe_gauge!("idem_records", "Records per state.");
    metrics::describe_gauge!(
        "idem_oldest_processing_seconds",
        "Age of the oldest processing record."
    );
    metrics::describe_gauge!("idem_review_queue_depth", "Records in needs_review.");
    metrics::describe_counter!(
        "idem_janitor_expired_total",
        "Results expired and tombstones deleted by the janitor."
    );
    metrics::describe_counter!("idem_alerts_total", "Alert deliveries by result.");
    metrics::describe_histogram!(
        "idem_http_request_duration_seconds",
        metrics::Unit::Seconds,
        "HTTP request latency by route pattern and status."
    );
    for o in ClaimOutcome::ALL {
        metrics::counter!("idem_claims_total", "outcome" => o.as_str()).increment(0);
    }
    // effects
    metrics::describe_counter!("idem_effects_total", "Effect calls by outcome.");
    metrics::describe_histogram!(
        "idem_effect_duration_seconds",
        metrics::Unit::Seconds,
        "Duration of an effect's outbound call."
    );
    metrics::describe_counter!(
        "idem_reconciles_total",
        "Reconcile lookups of ambiguous effects by result."
    );
    metrics::describe_counter!(
        "idem_egress_refused_total",
        "Effect destinations refused by the egress guard."
    );
    for o in crate::api::v1::effects::OUTCOMES {
        metrics::counter!("idem_effects_total", "outcome" => o).increment(0);
    }
    for r in idem::Reconciled::ALL {
        metrics::counter!("idem_reconciles_total", "result" => r.as_str()).increment(0);
    }
    metrics::counter!("idem_egress_refused_total").increment(0);
    metrics::counter!("idem_duplicate_hits_total").increment(0);
    for r in ["false", "true"] {
        metrics::counter!("idem_acquired_total", "resumed" => r).increment(0);
    }
    metrics::counter!("idem_fails_total", "class" => "retryable", "status" => "none").increment(0);
    metrics::counter!("idem_reclaims_total").increment(0);
    metrics::counter!("idem_janitor_expired_total").increment(0);
    for r in ["sent", "retry", "gave_up", "dropped"] {
        metrics::counter!("idem_alerts_total", "result" => r).increment(0);
    }
    metrics::gauge!("idem_oldest_processing_seconds").increment(0.0);
    metrics::gauge!("idem_review_queue_depth").increment(0.0);
    for s in State::ALL {
        metrics::gauge!("idem_records", "state" => s.as_str()).increment(0.0);
    }
}

/// Publishes the store gauges.
pub fn set_stats(stats: &Stats) {
    for (s, n) in &stats.records.0 {
        metrics::gauge!("idem_records", "state" => s.as_str()).set(*n as f64);
    }
    metrics::gauge!("idem_oldest_processing_seconds").set(stats.oldest_processing_seconds);
    metrics::gauge!("idem_review_queue_depth").set(stats.review_queue_depth as f64);
}

/// Records one claim answer.
pub fn claim(outcome: ClaimOutcome, resumed: Option<bool>, reclaimed: bool, duplicate: bool) {
    if let Some(h) = hot() {
        if let Some((_, c)) = h.claims.iter().find(|(o, _)| *o == outcome) {
            c.increment(1);
        }
        if let Some(r) = resumed {
            h.acquired[usize::from(r)].increment(1);
        }
        if reclaimed {
            h.reclaims.increment(1);
        }
        if duplicate {
            h.duplicate_hits.increment(1);
        }
        return;
    }
    metrics::counter!("idem_claims_total", "outcome" => outcome.as_str()).increment(1);
    if let Some(r) = resumed {
        metrics::counter!("idem_acquired_total", "resumed" => if r { "true" } else { "false" })
            .increment(1);
    }
    if reclaimed {
        metrics::counter!("idem_reclaims_total").increment(1);
    }
    if duplicate {
        metrics::counter!("idem_duplicate_hits_total").increment(1);
    }
}

/// Records one reported failure.
pub fn fail(class: &'static str, http_status: Option<u16>) {
    let status = http_status.map_or_else(|| "none".to_string(), |s| s.to_string());
    metrics::counter!("idem_fails_total", "class" => class, "status" => status).increment(1);
}

/// Records one request's latency under its route pattern (never the concrete path) and
/// status.
pub fn request_done(route: &str, status: u16, seconds: f64) {
    let register = || {
        metrics::histogram!(
            "idem_http_request_duration_seconds",
            "route" => route.to_owned(),
            "status" => status.to_string()
        )
    };
    let Some(h) = hot() else {
        register().record(seconds);
        return;
    };
    let recorded = h.requests.read().is_ok_and(|m| {
        m.get(route)
            .and_then(|v| v.iter().find(|(s, _)| *s == status))
            .map(|(_, hist)| hist.record(seconds))
            .is_some()
    });
    if !recorded {
        let hist = register();
        hist.record(seconds);
        if let Ok(mut m) = h.requests.write() {
            let v = m.entry(route.into()).or_default();
            if !v.iter().any(|(s, _)| *s == status) {
                v.push((status, hist));
            }
        }
    }
}

/// The Prometheus text exposition.
pub fn render() -> String {
    handle().map(PrometheusHandle::render).unwrap_or_default()
}

/// Records one effect answer (`outcome` from the bounded set of the effect answers).
pub fn effect(outcome: &'static str) {
    metrics::counter!("idem_effects_total", "outcome" => outcome).increment(1);
}

/// Records the duration of one outbound call.
pub fn effect_duration(seconds: f64) {
    metrics::histogram!("idem_effect_duration_seconds").record(seconds);
}

/// Records one reconcile lookup (`found`, `not_found`, `unknown`).
pub fn reconcile(result: &'static str) {
    metrics::counter!("idem_reconciles_total", "result" => result).increment(1);
}

/// Records one destination refused by the egress guard.
pub fn egress_refused() {
    metrics::counter!("idem_egress_refused_total").increment(1);
}
