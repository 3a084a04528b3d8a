//! The operator console at `/console`: server-rendered pages for the decisions the ledger
//! leaves to a person (the review queue, a record with its history and the resolve /
//! approve / reject forms, a namespace with its pause switch, a namespace's actions and the
//! action a draft belongs to ([`actions`]), the intake's sources with their events and the
//! redeliver forms ([`sources`])), served by the same binary on SQLite and PostgreSQL alike.
//!
//! It owns: the console's routes, its sign-in sessions and CSRF check ([`session`]), its HTML
//! ([`view`], [maud](https://maud.lambda.xyz) templates: compiled with the binary, every
//! interpolation HTML-escaped) and the one asset it serves (a CSS file embedded with
//! `include_str!`), and what every page shares: who is looking ([`Viewer`]) and the scope
//! check of a namespace in a path. It is a client of the same rules as the API: the same
//! roles and scopes ([`crate::auth::Caller`]), the same request validation (the API's request
//! bodies read the forms), and every change goes through the ledger ([`idem::Ledger`]) like
//! an API call.
//!
//! What it must never do: bypass the ledger's rules (write to the store directly, or decide
//! a transition itself), show anything a client sent without escaping it, answer a POST
//! whose CSRF token is missing or wrong with anything but a 403 that changed nothing, show a
//! record outside the session token's scope, load anything from another origin (every page
//! carries `Content-Security-Policy: default-src 'self'`, and no page has inline script),
//! or log a token or a session id.

mod actions;
mod pages;
pub mod session;
mod sources;
mod view;

use axum::extract::Request;
use axum::http::{header, HeaderValue, Method};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use idem::{Namespace, Role};

use crate::auth::Caller;
use crate::error::{ApiError, ErrorCode};
use crate::input::parse_namespace;
use crate::state::AppState;

/// Who is looking, as [`session::gate`] found them: the API's caller plus the session's CSRF token.
#[derive(Clone)]
pub struct Viewer {
    pub caller: Caller,
    pub csrf: String,
    /// The session's hash (for sign-out).
    id_hash: String,
    /// Whether the console is open (no token exists): no sign-out then.
    pub open: bool,
}

/// The namespace of a path, within the viewer's scope (403 page otherwise).
fn scoped_ns(viewer: &Viewer, raw: &str) -> ConsoleResult<Namespace> {
    let ns = parse_namespace(raw)?;
    viewer.caller.authorize(Role::Operator, Some(&ns))?;
    Ok(ns)
}

/// The console's routes (merged into the application router).
pub fn router(state: AppState) -> Router<AppState> {
    Router::new()
        .route("/console", get(pages::overview))
        .route("/console/", get(pages::overview))
        .route(
            "/console/login",
            get(session::login_page).post(session::login),
        )
        .route("/console/logout", post(session::logout))
        .route("/console/review", get(pages::review))
        .route("/console/ns/{ns}", get(pages::namespace))
        .route(
            "/console/ns/{ns}/pause",
            get(pages::confirm_pause).post(pages::pause),
        )
        .route(
            "/console/ns/{ns}/resume",
            get(pages::confirm_resume).post(pages::resume),
        )
        .route("/console/ns/{ns}/actions", get(actions::list))
        .route("/console/ns/{ns}/keys/{key}", get(pages::record))
        .route("/console/ns/{ns}/keys/{key}/resolve", post(pages::resolve))
        .route("/console/ns/{ns}/keys/{key}/approve", post(pages::approve))
        .route("/console/ns/{ns}/keys/{key}/reject", post(pages::reject))
        .route("/console/sources", get(sources::list))
        .route("/console/sources/{source}", get(sources::source))
        .route(
            "/console/sources/{source}/redeliver",
            post(sources::redeliver_dead),
        )
        .route(
            "/console/sources/{source}/events/{key}",
            get(sources::event),
        )
        .route(
            "/console/sources/{source}/events/{key}/redeliver",
            post(sources::redeliver),
        )
        .route("/console/assets/console.css", get(stylesheet))
        .route("/console/{*rest}", get(not_found).post(not_found))
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(state, session::gate))
        .layer(axum::middleware::map_response(
            |resp: Response| async move { secured(resp) },
        ))
}

/// Whether `path` is the console's (its pages, forms and asset).
pub fn is_console_path(path: &str) -> bool {
    path == "/console" || path.starts_with("/console/")
}

/// A refusal made before the console's router ran (`crate::conn`: a body over the limit, a
/// body that timed out or could not be read) as the console answers: its HTML error page,
/// with its security headers.
pub fn early_refusal(e: ApiError) -> Response {
    secured(ConsoleError::Api(e).into_response())
}

/// The stylesheet, compiled into the binary.
const CSS: &str = include_str!("assets/console.css");

async fn stylesheet() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        CSS,
    )
        .into_response()
}

async fn not_found() -> ConsoleError {
    ConsoleError::not_found("There is no such page.")
}

async fn method_not_allowed() -> ConsoleError {
    ConsoleError::Page(
        ErrorCode::MethodNotAllowed,
        "This page does not accept that method.".into(),
    )
}

/// The headers every console response carries, error pages included: no script or style
/// from anywhere but this origin (and no inline script at all), never framed, never sniffed,
/// never cached (pages show live ledger data and a CSRF token), no referrer sent elsewhere.
/// Set on everything the router answers, and by [`early_refusal`] on what is answered before.
fn secured(mut resp: Response) -> Response {
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'self'; frame-ancestors 'none'; form-action 'self'"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    resp
}

/// Whether `method` changes something (and so must carry the CSRF token).
fn is_write(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// A console page that could not be shown: rendered as an HTML error page.
#[derive(Debug)]
pub enum ConsoleError {
    /// A refusal of the console's own, shown with the status of its code in the one table
    /// of the service's statuses ([`ErrorCode`]).
    Page(ErrorCode, String),
    /// Anything the API would refuse with, shown with the API's status and message.
    Api(ApiError),
}

impl ConsoleError {
    /// 404: the page, or what it shows, does not exist (or is not the viewer's to see).
    pub fn not_found(message: impl Into<String>) -> ConsoleError {
        ConsoleError::Page(ErrorCode::NotFound, message.into())
    }

    /// 403: the viewer may not do this.
    pub fn forbidden(message: impl Into<String>) -> ConsoleError {
        ConsoleError::Page(ErrorCode::Forbidden, message.into())
    }
}

impl From<ApiError> for ConsoleError {
    #[track_caller]
    fn from(e: ApiError) -> Self {
        match e {
            ApiError::Forbidden(m) => ConsoleError::Page(ErrorCode::Forbidden, m),
            ApiError::NotFound(m) => ConsoleError::Page(ErrorCode::NotFound, m),
            e => ConsoleError::Api(e),
        }
    }
}

impl From<idem::StoreError> for ConsoleError {
    #[track_caller]
    fn from(e: idem::StoreError) -> Self {
        ConsoleError::Api(e.into())
    }
}

impl IntoResponse for ConsoleError {
    fn into_response(self) -> Response {
        let (status, message) = match self {
            ConsoleError::Page(code, m) => (code.status(), m),
            ConsoleError::Api(e) => {
                let status = e.status();
                // 5xx details are logged (by the API error's own rendering), never shown.
                if status.is_server_error() {
                    let _ = e.into_response();
                    (
                        status,
                        "The ledger could not answer; nothing was changed. Try again.".into(),
                    )
                } else {
                    (status, e.to_string())
                }
            }
        };
        (status, view::error_page(status, &message)).into_response()
    }
}

/// Handler results.
pub type ConsoleResult<T> = Result<T, ConsoleError>;

/// The request the console is answering (for the sign-in page's return address).
pub(crate) fn path_and_query(req: &Request) -> String {
    req.uri()
        .path_and_query()
        .map_or_else(|| "/console".to_owned(), |p| p.as_str().to_owned())
}
