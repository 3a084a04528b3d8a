//! The route table: one list of (method, path, role, handler) from which the router is built.
//! The OpenAPI test walks the same list, so a route cannot exist without being documented.
//! The role column is the authorization rule of the contract, readable in one place.

use axum::routing::{get, patch, post, MethodRouter};
use axum::Router;
use idem::Role;
use tower_http::trace::TraceLayer;

use crate::handlers as h;
use crate::state::AppState;

/// One route of the service.
pub struct Route {
    pub method: &'static str,
    pub path: &'static str,
    /// Lowest role allowed (`None`: no token needed).
    pub role: Option<Role>,
    pub handler: MethodRouter<AppState>,
}

fn r(
    method: &'static str,
    path: &'static str,
    role: Option<Role>,
    handler: MethodRouter<AppState>,
) -> Route {
    Route {
        method,
        path,
        role,
        handler,
    }
}

/// Every route the server answers.
pub fn routes() -> Vec<Route> {
    use Role::{Admin, Operator, Worker};

    vec![
        r(
            "post",
            "/v1/namespaces/{ns}/keys/{key}/claim",
            Some(Worker),
            post(h::claim),
        ),
        r(
            "post",
            "/v1/namespaces/{ns}/keys/{key}/prepare",
            Some(Worker),
            post(h::prepare),
        ),
        r(
            "post",
            "/v1/namespaces/{ns}/keys/{key}/heartbeat",
            Some(Worker),
            post(h::heartbeat),
        ),
        r(
            "post",
            "/v1/namespaces/{ns}/keys/{key}/complete",
            Some(Worker),
            post(h::complete),
        ),
        r(
            "post",
            "/v1/namespaces/{ns}/keys/{key}/fail",
            Some(Worker),
            post(h::fail),
        ),
        r(
            "get",
            "/v1/namespaces/{ns}/keys/{key}",
            Some(Worker),
            get(h::get_record),
        ),
        r(
            "post",
            "/v1/namespaces/{ns}/keys/{key}/resolve",
            Some(Operator),
            post(h::resolve),
        ),
        r(
            "post",
            "/v1/namespaces/{ns}/keys/{key}/approve",
            Some(Operator),
            post(h::approve),
        ),
        r(
            "post",
            "/v1/namespaces/{ns}/keys/{key}/reject",
            Some(Operator),
            post(h::reject),
        ),
        r(
            "get",
            "/v1/namespaces/{ns}/keys",
            Some(Operator),
            get(h::list),
        ),
        r(
            "get",
            "/v1/namespaces/{ns}",
            Some(Worker),
            get(h::get_namespace),
        ),
        r(
            "patch",
            "/v1/namespaces/{ns}",
            Some(Operator),
            patch(h::patch_namespace),
        ),
        r(
            "post",
            "/v1/namespaces/{ns}/pause",
            Some(Operator),
            post(h::pause),
        ),
        r(
            "post",
            "/v1/namespaces/{ns}/resume",
            Some(Operator),
            post(h::resume),
        ),
        r("post", "/v1/keys/derive", Some(Worker), post(h::derive)),
        r("post", "/v1/tokens", Some(Admin), post(h::create_token)),
        r("get", "/healthz", None, get(h::healthz)),
        r("get", "/readyz", None, get(h::readyz)),
        r("get", "/metrics", None, get(h::metrics_text)),
        r("get", "/openapi.json", None, get(h::openapi_json)),
    ]
}

/// (method, path) of every route, for tests and docs.
pub fn route_table() -> Vec<(&'static str, &'static str)> {
    routes().into_iter().map(|r| (r.method, r.path)).collect()
}

/// The application router.
pub fn router(state: AppState) -> Router {
    let mut app: Router<AppState> = Router::new();
    for route in routes() {
        let handler = match route.role {
            Some(role) => route
                .handler
                .route_layer(axum::middleware::from_fn_with_state(
                    state.clone(),
                    move |axum::extract::State(s): axum::extract::State<AppState>,
                          req: axum::extract::Request,
                          next: axum::middleware::Next| {
                        crate::auth::require(role, s, req, next)
                    },
                )),
            None => route.handler,
        };
        app = app.route(route.path, handler);
    }
    app.fallback(h::not_found)
        .method_not_allowed_fallback(h::method_not_allowed)
        // Body limits are enforced by `JsonBody` (problem+json 413), not by axum's default.
        .layer(axum::extract::DefaultBodyLimit::disable())
        .layer(axum::middleware::from_fn(crate::metrics::track))
        .layer(
            TraceLayer::new_for_http().make_span_with(|req: &axum::http::Request<_>| {
                let route = req
                    .extensions()
                    .get::<axum::extract::MatchedPath>()
                    .map_or("unmatched", |m| m.as_str())
                    .to_owned();
                tracing::info_span!("request", method = %req.method(), route)
            }),
        )
        .with_state(state)
}
