//! The route table: one list of (method, path, role, handler) from which the router is built.
//! The OpenAPI test walks the same list, so a route cannot exist without being documented.
//! The role column is the authorization rule of the contract, readable in one place.

use axum::handler::Handler;
use axum::http::{HeaderValue, Method};
use axum::routing::{get, patch, post, MethodRouter};
use axum::Router;
use idem::Role;
use tower::Layer;

use crate::handlers as h;
use crate::middleware::{Gate, UNMATCHED};
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
        r("post", "/v1/audit", Some(Worker), post(crate::audit::audit)),
        r("post", "/v1/tokens", Some(Admin), post(h::create_token)),
        r("get", "/healthz", None, get(h::healthz)),
        r("get", "/readyz", None, get(h::readyz)),
        r("get", "/metrics", None, get(h::metrics_text)),
        r("get", "/openapi.json", None, get(h::openapi_json)),
    ]
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
        let not_allowed = move || h::method_not_allowed(allow);
        app = app.route(path, handler.fallback(not_allowed).layer(gate));
    }
    let not_found = Gate::new(UNMATCHED, Vec::new(), state.clone()).layer(
        Handler::<_, AppState>::with_state(h::not_found, state.clone()),
    );
    app.fallback_service(not_found).with_state(state)
}
