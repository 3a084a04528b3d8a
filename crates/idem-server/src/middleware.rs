//! The one middleware around every route: the request span, authentication and
//! authorization, the latency metric and the request trace lines, in a single service.
//!
//! It replaces a stack of four layers (tower-http's `TraceLayer`, a `from_fn` for the
//! latency metric, a `from_fn` per route for auth, and a body-limit layer no extractor read):
//! axum wraps each layer in its own boxed, cloned service and boxes its future, which cost
//! several allocations per request. What each of them did is kept, in the same order:
//!
//! 1. the `request` span (`method`, `route` pattern, and `trace_id` from an incoming W3C
//!    `traceparent` or the exported trace, see [`crate::telemetry`]) around everything
//!    below, so every log line of the request carries it; the DEBUG "started processing
//!    request" line;
//! 2. for a method with a role, [`crate::auth::check`] (bearer token, role, `{ns}` scope):
//!    a refusal answers at once, an accepted caller goes into the request extensions; under
//!    `/v1` a path no route matches, or a method the path does not route, needs a valid
//!    token too once any exists ([`crate::auth::authenticate`]: 401 before the 404 or 405,
//!    so the API's routes are not mapped out without one); elsewhere those get no check;
//! 3. `idem_http_request_duration_seconds` by route pattern and status;
//! 4. the DEBUG "finished processing request" line and, for a 5xx other than 503, the ERROR
//!    "response failed" line, written by tower-http's own default callbacks (a 503 is logged
//!    once per outage by [`crate::outage`], not once per request).
//!
//! Request bodies arrive here already read in full by [`crate::conn`] (under the body limit
//! and the body read timeout); the body extractors of `input` (`JsonBody`, `Body<T>`,
//! `RawBody`: problem+json 413) check the limit again for routers served some other way.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::extract::Request;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use idem::Role;
use tower::{Layer, Service};
use tower_http::classify::ServerErrorsFailureClass;
use tower_http::trace::{
    DefaultOnFailure, DefaultOnRequest, DefaultOnResponse, OnFailure, OnRequest, OnResponse,
};
use tracing::Instrument;

use crate::state::AppState;

/// The route label of requests no route matched.
pub const UNMATCHED: &str = "unmatched";

/// The middleware of one path.
#[derive(Clone)]
pub struct Gate {
    route: &'static str,
    /// The lowest role each routed method needs (`None`: no token needed).
    roles: Arc<[(Method, Option<Role>)]>,
    state: AppState,
}

impl Gate {
    pub fn new(route: &'static str, roles: Vec<(Method, Option<Role>)>, state: AppState) -> Gate {
        Gate {
            route,
            roles: roles.into(),
            state,
        }
    }

    /// The role `method` needs on this path; HEAD is routed (and checked) as GET.
    fn role_for(&self, method: &Method) -> Option<Role> {
        let method = if method == Method::HEAD {
            &Method::GET
        } else {
            method
        };
        self.roles
            .iter()
            .find(|(m, _)| m == method)
            .and_then(|(_, r)| *r)
    }
}

impl<S> Layer<S> for Gate {
    type Service = GateService<S>;
    fn layer(&self, inner: S) -> GateService<S> {
        GateService {
            gate: self.clone(),
            inner,
        }
    }
}

#[derive(Clone)]
pub struct GateService<S> {
    gate: Gate,
    inner: S,
}

impl<S> Service<Request> for GateService<S>
where
    S: Service<Request, Error = Infallible> + Clone + Send + 'static,
    S::Response: IntoResponse,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let start = Instant::now();
        let route = self.gate.route;
        let span = tracing::info_span!(
            "request",
            method = %req.method(),
            route,
            trace_id = tracing::field::Empty,
            otel.name = tracing::field::Empty,
            otel.kind = tracing::field::Empty,
        );
        let incoming =
            crate::telemetry::link_request(&span, req.headers(), req.method().as_str(), route);
        span.in_scope(|| DefaultOnRequest::default().on_request(&req, &span));
        let role = self.gate.role_for(req.method());
        let method = req.method().clone();
        // Every `/v1` call needs a token once one exists, an unrouted one included.
        let token_only = role.is_none() && under_v1(req.uri().path());
        let state = (role.is_some() || token_only).then(|| self.gate.state.clone());
        // The service that was polled ready is the one to call; a clone takes its place.
        let ready = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, ready);
        let fut = async move {
            let resp = match (role, state) {
                (Some(role), Some(state)) => {
                    match crate::auth::check(role, &state.auth, &state.ledger, req).await {
                        Ok(req) => into_response(inner.call(req).await),
                        Err(e) => e.into_response(),
                    }
                }
                (None, Some(state)) => {
                    match crate::auth::authenticate(&state.auth, &state.ledger, req.headers()).await
                    {
                        Ok(_) => into_response(inner.call(req).await),
                        Err(e) => e.into_response(),
                    }
                }
                _ => into_response(inner.call(req).await),
            };
            let latency = start.elapsed();
            let status = resp.status();
            crate::metrics::request_done(route, status.as_u16(), latency.as_secs_f64());
            let span = tracing::Span::current();
            DefaultOnResponse::default().on_response(&resp, latency, &span);
            if role.is_some() && method == Method::POST && status.is_success() {
                crate::outage::answered();
            }
            // A 503 (store unavailable, namespace paused) is an answer the caller acts on,
            // not a failure of the server; store outages are logged by `outage`.
            if status.is_server_error() && status != StatusCode::SERVICE_UNAVAILABLE {
                DefaultOnFailure::default().on_failure(
                    ServerErrorsFailureClass::StatusCode(status),
                    latency,
                    &span,
                );
            }
            Ok(resp)
        };
        Box::pin(crate::telemetry::with_incoming(incoming, fut).instrument(span))
    }
}

/// Whether `path` is the API's (`/v1` or below it).
fn under_v1(path: &str) -> bool {
    path.strip_prefix("/v1")
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

fn into_response<R: IntoResponse>(r: Result<R, Infallible>) -> Response {
    match r {
        Ok(r) => r.into_response(),
        Err(never) => match never {},
    }
}
