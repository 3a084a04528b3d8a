//! The assembly: the route table (the route lines each resource file of [`crate::api::v1`]
//! keeps beside its handlers, plus `/openapi.json`), the router built from it, and the OpenAPI
//! document generated from the same table and the resources' `Doc`s (by [`crate::openapi`]),
//! served here. The OpenAPI test walks the same list, so a route cannot exist without being
//! documented.
//!
//! This is the top of the handlers' layers: it imports the resources, the console and the
//! middleware; nothing below imports it. What it must never do: hold a handler's logic or a
//! rule of the contract (those are in the resource files and `idem-core`).

use axum::handler::Handler;
use axum::http::{HeaderValue, Method};
use axum::response::{IntoResponse, Response};
use std::sync::OnceLock;

use axum::routing::{get, MethodRouter};
use axum::{Json, Router};
use idem::Role;
use serde_json::Value;
use tower::Layer;
use utoipa::OpenApi;

use crate::error::ApiError;
use crate::middleware::{Gate, UNMATCHED};
pub use crate::route::{r, Route};
use crate::state::AppState;

/// Every route the server answers (each resource file lists its own; this document's line
/// is the assembly's).
pub fn routes() -> Vec<Route> {
    let mut all = crate::api::v1::routes();
    all.push(r("get", "/openapi.json", None, get(openapi_json)));
    all
}

/// The OpenAPI paths of this file.
#[derive(OpenApi)]
#[openapi(paths(openapi_json))]
struct Doc;

/// The generated document (built once, from [`routes`] and every resource's `Doc`).
pub fn document() -> &'static Value {
    static DOC: OnceLock<Value> = OnceLock::new();
    DOC.get_or_init(|| {
        let mut docs = crate::api::v1::docs();
        docs.push(Doc::openapi());
        crate::openapi::build(&routes(), docs)
    })
}

/// This document.
#[utoipa::path(get, path = "/openapi.json", tag = "ops",
    responses((status = 200, description = "OpenAPI 3.1", content_type = "application/json", body = Object)))]
pub async fn openapi_json() -> Response {
    Json(document()).into_response()
}

/// The `Allow` header of a path's 405 answer (RFC 9110): its methods, HEAD with GET.
fn allow_header(roles: &[(Method, Option<Role>)]) -> HeaderValue {
    let mut methods: Vec<&str> = Vec::new();
    for (m, _) in roles {
        methods.push(m.as_str());
        if m == Method::GET {
            methods.push("HEAD");
        }
    }
    HeaderValue::from_str(&methods.join(", ")).unwrap_or(HeaderValue::from_static("GET"))
}

/// (method, path) of every route, for tests and docs.
pub fn route_table() -> Vec<(&'static str, &'static str)> {
    routes().into_iter().map(|r| (r.method, r.path)).collect()
}

/// One path: its pattern, its methods' handlers, and each method's role.
type PathRoutes = (
    &'static str,
    MethodRouter<AppState>,
    Vec<(Method, Option<Role>)>,
);

/// The application router. Routes of one path share one [`Gate`] (span, auth by method,
/// latency metric, trace lines), which also wraps the path's 405 answer and the 404 fallback.
pub fn router(state: AppState) -> Router {
    let mut paths: Vec<PathRoutes> = Vec::new();
    for route in routes() {
        let method = Method::from_bytes(route.method.to_ascii_uppercase().as_bytes())
            .expect("the route table names valid methods");
        match paths.iter_mut().find(|(p, ..)| *p == route.path) {
            Some((_, handler, roles)) => {
                *handler = std::mem::take(handler).merge(route.handler);
                roles.push((method, route.role));
            }
            None => paths.push((route.path, route.handler, vec![(method, route.role)])),
        }
    }
    let mut app: Router<AppState> = Router::new();
    for (path, handler, roles) in paths {
        let allow = allow_header(&roles);
        let gate = Gate::new(path, roles, state.clone());
        let not_allowed = move || method_not_allowed(allow);
        app = app.route(path, handler.fallback(not_allowed).layer(gate));
    }
    // The operator console: HTML pages with their own session gate and headers.
    app = app.merge(crate::console::router(state.clone()));
    let not_found = Gate::new(UNMATCHED, Vec::new(), state.clone())
        .layer(Handler::<_, AppState>::with_state(not_found, state.clone()));
    // Request bodies are read in full before the router runs (`crate::conn`), so an early
    // refusal leaves nothing unread on the connection and it stays usable.
    app.fallback_service(not_found).with_state(state)
}

/// Unknown routes: 404 problem+json.
async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::NotFound(format!("no such route: {}", uri.path()))
}

/// Known route, wrong method: 405 with the `Allow` header of the path.
async fn method_not_allowed(allow: HeaderValue) -> Response {
    let mut resp = ApiError::MethodNotAllowed.into_response();
    resp.headers_mut().insert(axum::http::header::ALLOW, allow);
    resp
}
