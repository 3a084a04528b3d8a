//! Prometheus metrics.
//!
//! The recorder is process-global: it is installed once (tests start many servers in one
//! process) and every server renders the same registry. Every metric the contract names is
//! registered at zero when a server starts, so `/metrics` lists them before any traffic.
//! Labels are bounded sets (outcome, state, class, HTTP status, route pattern) — never a key,
//! a namespace or other caller-controlled text.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{OnceLock, RwLock};
use std::time::Duration;

use idem::{ClaimOutcome, State, Stats, Tally};
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

/// Time-to-recovery buckets, seconds: a minute to a week.
const RECOVERY_BUCKETS: &[f64] = &[
    60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 14_400.0, 28_800.0, 86_400.0, 259_200.0, 604_800.0,
];

/// Dollars reported, in nano-dollars, for attempt="first" and attempt="retry". The `metrics`
/// crate's counters are integers, so this one counter is kept here and written into the
/// exposition by [`render`] (as dollars, a float, which is what Prometheus counters are).
static COST_USD_NANOS: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];

/// Outbound call buckets, seconds (effects wait for someone else's server).
const EFFECT_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

/// How often [`upkeep`] runs. The recorder keeps every histogram sample until it is folded
/// into its buckets: a scrape does that, and so does the upkeep, which must therefore run
/// whether anyone scrapes or not (unscraped, a busy server grew by every request's samples).
pub const UPKEEP_INTERVAL: Duration = Duration::from_secs(1);

/// Folds the histogram samples recorded since the last upkeep (or scrape) into their
/// buckets, freeing them. Cheap: one pass over the registered histograms.
pub fn upkeep() {
    if let Some(h) = handle() {
        h.run_upkeep();
    }
}

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
                    Matcher::Full("idem_recovery_seconds".into()),
                    RECOVERY_BUCKETS,
                )
                .ok()?
                .set_buckets_for_metric(
                    Matcher::Full("idem_effect_duration_seconds".into()),
                    EFFECT_BUCKETS,
                )
                .ok()?
                .set_buckets_for_metric(
                    Matcher::Full("idem_delivery_duration_seconds".into()),
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
    metrics::describe_counter!(
        "idem_cost_tokens_total",
        "Model tokens reported by attempts (first attempt or retry)."
    );
    metrics::describe_histogram!(
        "idem_recovery_seconds",
        metrics::Unit::Seconds,
        "Time from entering needs_review to the resolve that left it."
    );
    metrics::describe_counter!(
        "idem_fenced_completions_total",
        "Reports of an effect (complete, or fail with sent not false) refused with lease_lost."
    );
    metrics::describe_gauge!(
        "idem_review_oldest_seconds",
        "Age of the oldest needs_review record (since it entered review)."
    );
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
    metrics::describe_counter!(
        "idem_action_calls_total",
        "MCP tool calls of actions by namespace, action and outcome."
    );
    metrics::describe_counter!(
        "idem_intake_requests_total",
        "Webhook intake answers by source and result."
    );
    metrics::describe_counter!(
        "idem_deliveries_total",
        "Forward attempts of inbound events by source, destination and result (delivered, retry, dead)."
    );
    metrics::describe_histogram!(
        "idem_delivery_duration_seconds",
        "Duration of one forward attempt, by source."
    );
    metrics::describe_gauge!(
        "idem_intake_backlog",
        "Deliveries of inbound events not yet made, by source and destination."
    );
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
    for o in crate::outcome::EffectOutcome::ALL {
        metrics::counter!("idem_effects_total", "outcome" => o.as_str()).increment(0);
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
    metrics::gauge!("idem_review_oldest_seconds").increment(0.0);
    for a in ["first", "retry"] {
        metrics::counter!("idem_cost_tokens_total", "attempt" => a).increment(0);
    }
    metrics::counter!("idem_fenced_completions_total").increment(0);
    metrics::describe_counter!(
        "idem_store_unavailable_total",
        "Requests answered 503 store_unavailable (the store did not answer)."
    );
    metrics::counter!("idem_store_unavailable_total").increment(0);
    // Registered with no observation: the histogram shows its buckets at zero.
    let _ = metrics::histogram!("idem_recovery_seconds");
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
    metrics::gauge!("idem_review_oldest_seconds").set(stats.review_oldest_seconds);
}

/// Records what one ledger step counted: reported cost, a fenced completion, a recovery.
pub fn tally(t: &Tally) {
    if let Some((c, retry)) = t.cost {
        let attempt = if retry { "retry" } else { "first" };
        metrics::counter!("idem_cost_tokens_total", "attempt" => attempt).increment(c.tokens);
        COST_USD_NANOS[usize::from(retry)].fetch_add(c.usd_nanos, Ordering::Relaxed);
    }
    if t.fenced_completion {
        metrics::counter!("idem_fenced_completions_total").increment(1);
    }
    if let Some(ms) = t.recovery_ms {
        metrics::histogram!("idem_recovery_seconds").record(ms as f64 / 1000.0);
    }
}

/// The `idem_cost_usd_total` family in the text format.
fn cost_usd_text() -> String {
    let v = |i: usize| COST_USD_NANOS[i].load(Ordering::Relaxed) as f64 / 1e9;
    format!(
        "# HELP idem_cost_usd_total US dollars reported by attempts (first attempt or retry).\n\
         # TYPE idem_cost_usd_total counter\n\
         idem_cost_usd_total{{attempt=\"first\"}} {}\n\
         idem_cost_usd_total{{attempt=\"retry\"}} {}\n",
        v(0),
        v(1)
    )
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
    match handle() {
        Some(h) => {
            let mut text = h.render();
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&cost_usd_text());
            text
        }
        None => String::new(),
    }
}

/// Records one effect answer (`outcome` from the bounded set of the effect answers).
pub fn effect(outcome: &'static str) {
    metrics::counter!("idem_effects_total", "outcome" => outcome).increment(1);
}

/// Records one action call (`idem_action_calls_total`): the namespace and the action are
/// bounded by what admins declared, the outcome by the answers of a call.
pub fn action_call(namespace: &str, action: &str, outcome: &'static str) {
    metrics::counter!("idem_action_calls_total", "namespace" => namespace.to_owned(),
        "action" => action.to_owned(), "outcome" => outcome)
    .increment(1);
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
