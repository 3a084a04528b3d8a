//! The operations endpoints: liveness, readiness and Prometheus metrics (the OpenAPI
//! document is served by the assembly, `crate::routes`). None needs a token (probes and
//! scrapers carry none); none takes a body.
//!
//! What this must never do: write to the store, or let a store that does not answer fail
//! the scrape of every other metric.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Json;
use serde::Serialize;
use utoipa::{OpenApi, ToSchema};

use crate::error::ApiResult;
use crate::metrics;
use crate::route::{r, Route};
use crate::state::AppState;

/// The routes of this file.
pub fn routes() -> Vec<Route> {
    vec![
        r("get", "/healthz", None, get(healthz)),
        r("get", "/readyz", None, get(readyz)),
        r("get", "/metrics", None, get(metrics_text)),
    ]
}

/// The OpenAPI of this file.
#[derive(OpenApi)]
#[openapi(
    paths(healthz, readyz, metrics_text),
    components(schemas(StatusResponse))
)]
pub struct Doc;

#[derive(Serialize, ToSchema)]
pub struct StatusResponse {
    pub status: &'static str,
}

/// The process is up.
#[utoipa::path(get, path = "/healthz", tag = "ops",
    responses((status = 200, description = "the process is up", body = StatusResponse)))]
pub async fn healthz() -> Json<StatusResponse> {
    Json(StatusResponse { status: "ok" })
}

/// The store answers.
#[utoipa::path(get, path = "/readyz", tag = "ops",
    responses((status = 200, description = "the store answers", body = StatusResponse)))]
pub async fn readyz(State(st): State<AppState>) -> ApiResult<Json<StatusResponse>> {
    st.ledger.store().ping().await?;
    Ok(Json(StatusResponse { status: "ready" }))
}

/// Prometheus text exposition.
#[utoipa::path(get, path = "/metrics", tag = "ops",
    responses((status = 200, description = "Prometheus text format 0.0.4", content_type = "text/plain", body = String)))]
pub async fn metrics_text(State(st): State<AppState>) -> Response {
    refresh_gauges(&st).await;
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        metrics::render(),
    )
        .into_response()
}

/// Reads the store gauges for this scrape. One read at a time: a scrape that waited for
/// another's read takes its values when that read began after this scrape arrived (they are
/// as current as its own would be), so a scrape storm costs one read per round, never a
/// query each. With `stats_interval` > 0 (at most 1 s), a read younger than that is reused
/// too. A store that does not answer leaves the last values (the failure shows in `/readyz`
/// and in the request metrics) rather than failing the scrape of every other metric.
async fn refresh_gauges(st: &AppState) {
    let arrived = std::time::Instant::now();
    let mut cached = st.gauges.lock().await;
    let fresh = cached
        .as_ref()
        .is_some_and(|(at, _)| *at >= arrived || at.elapsed() < st.config.stats_interval);
    if fresh {
        if let Some((_, stats)) = cached.as_ref() {
            crate::metrics::set_stats(stats);
        }
        return;
    }
    let began = std::time::Instant::now();
    match crate::background::gauges_once(st.ledger.store(), st.ledger.now()).await {
        Ok(stats) => *cached = Some((began, stats)),
        Err(e) => tracing::warn!(error = %e, "metrics: store gauges not refreshed"),
    }
}
