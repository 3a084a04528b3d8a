//! Console sign-in: sessions, their cookie, and the CSRF check of every POST.
//!
//! A session is a random 32-byte value in the `idem_session` cookie (`HttpOnly`,
//! `SameSite=Strict`, `Path=/console`, `Secure` when the console is served over https, 12 h).
//! The store keeps only its SHA-256, the hash of the API token that signed in and the
//! session's CSRF token, so several instances on one PostgreSQL share sessions. Each request
//! reads the token again by its hash: a revoked or expired token ends its sessions on the very
//! next request, on every instance. Only operator and admin tokens sign in. With no token
//! configured at all the console is open, as the API is; it still gets a session (for its
//! CSRF token), and such a session stops working once a token exists.
//!
//! CSRF: every POST carries the session's token as the hidden form field `csrf` (or the
//! `X-CSRF-Token` header, for script). [`gate`] checks it before any handler runs, so a POST
//! without it is a 403 that changed nothing; the sign-in form, which has no session yet,
//! carries a double-submit token bound to a short-lived cookie instead.
//!
//! Never logged: the cookie value, its hash, the token, the CSRF token.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::Extension;
use idem::{NewConsoleSession, Role};
use sha2::Digest;
use subtle::ConstantTimeEq;

pub use super::Viewer;
use super::{is_write, path_and_query, view, ConsoleError};
use crate::auth::Caller;
use crate::error::ErrorCode;
use crate::state::AppState;

/// The session cookie.
pub const COOKIE: &str = "idem_session";
/// The sign-in form's double-submit cookie.
const LOGIN_COOKIE: &str = "idem_login";
/// How long a session lives.
pub const SESSION_MS: i64 = 12 * 3_600_000;

/// A POST's form fields, read (and CSRF-checked) by [`gate`].
#[derive(Clone, Default)]
pub struct FormData(pub Vec<(String, String)>);

impl FormData {
    /// The first value of `name`, if given.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// 32 random bytes in hex.
fn random_hex() -> String {
    let bytes: [u8; 32] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn sha256_hex(s: &str) -> String {
    sha2::Sha256::digest(s.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn equal(a: &str, b: &str) -> bool {
    bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// The value of cookie `name`, if the request carries it.
pub fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
}

/// Whether the console is reached over https (its cookies are then `Secure`): served with
/// TLS, or behind a proxy that says so.
fn https(st: &AppState, headers: &HeaderMap) -> bool {
    st.config.tls_cert.is_some()
        || headers
            .get("x-forwarded-proto")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case("https"))
}

fn set_cookie(name: &str, value: &str, max_age_s: i64, secure: bool) -> Option<HeaderValue> {
    let secure = if secure { "; Secure" } else { "" };
    HeaderValue::from_str(&format!(
        "{name}={value}; HttpOnly; SameSite=Strict; Path=/console; Max-Age={max_age_s}{secure}"
    ))
    .ok()
}

/// What [`resolve`] found for a request.
enum Found {
    Viewer(Box<Viewer>, Option<HeaderValue>),
    /// Sign in first (with this message, if any).
    SignIn(Option<&'static str>),
}

/// Finds the request's session and its caller; in open mode makes one when there is none.
async fn resolve(st: &AppState, headers: &HeaderMap) -> Result<Found, ConsoleError> {
    let store = st.ledger.store();
    let now = st.ledger.now();
    let open = st.auth.token_count().await? == 0;
    let presented = cookie(headers, COOKIE).filter(|v| !v.is_empty());
    let session = match &presented {
        Some(v) => store.session_find(&sha256_hex(v), now).await?,
        None => None,
    };
    match (session, open) {
        (Some(s), true) if s.token_hash.is_none() => Ok(Found::Viewer(
            Box::new(Viewer {
                caller: Caller::Anonymous,
                csrf: s.csrf,
                id_hash: s.id_hash,
                open: true,
            }),
            None,
        )),
        (_, true) => {
            let (id, csrf) = (random_hex(), random_hex());
            let id_hash = sha256_hex(&id);
            store
                .session_create(NewConsoleSession {
                    id_hash: id_hash.clone(),
                    token_hash: None,
                    csrf: csrf.clone(),
                    created_at: now,
                    expires_at: now.plus_ms(SESSION_MS),
                })
                .await?;
            let cookie = set_cookie(COOKIE, &id, SESSION_MS / 1000, https(st, headers));
            Ok(Found::Viewer(
                Box::new(Viewer {
                    caller: Caller::Anonymous,
                    csrf,
                    id_hash,
                    open: true,
                }),
                cookie,
            ))
        }
        // A cookie that names no live session: it ran out (or was signed out elsewhere).
        (None, false) if presented.is_some() => Ok(Found::SignIn(Some(
            "Your session has ended: sign in again.",
        ))),
        (None, false) => Ok(Found::SignIn(None)),
        (Some(s), false) => {
            let Some(hash) = &s.token_hash else {
                // Made while the console was open; tokens exist now.
                return Ok(Found::SignIn(Some("Sign in with a token.")));
            };
            match store.find_token(hash).await? {
                None => Ok(Found::SignIn(Some(
                    "Your session ended: its token was revoked.",
                ))),
                Some(t) if t.expired(now) => Ok(Found::SignIn(Some(
                    "Your session ended: its token has expired.",
                ))),
                Some(t) if t.role < Role::Operator => Ok(Found::SignIn(Some(
                    "Your session ended: its token has the worker role; the console needs an \
                     operator or admin token.",
                ))),
                Some(t) => {
                    st.auth.touch(&t, now).await;
                    Ok(Found::Viewer(
                        Box::new(Viewer {
                            caller: Caller::Token(t),
                            csrf: s.csrf,
                            id_hash: s.id_hash,
                            open: false,
                        }),
                        None,
                    ))
                }
            }
        }
    }
}

/// Reads a urlencoded POST body (at most the server's body limit).
async fn read_form(st: &AppState, body: Body) -> Result<FormData, ConsoleError> {
    let bytes = axum::body::to_bytes(body, st.config.body_limit)
        .await
        .map_err(|_| {
            ConsoleError::Page(
                ErrorCode::BodyTooLarge,
                format!(
                    "The form is larger than {} bytes; nothing was changed.",
                    st.config.body_limit
                ),
            )
        })?;
    parse_form(&bytes).map(FormData).ok_or_else(|| {
        ConsoleError::Page(
            ErrorCode::InvalidJson,
            "The form is not valid UTF-8 text; nothing was changed.".into(),
        )
    })
}

/// The fields of a urlencoded body (`application/x-www-form-urlencoded`: `&`-separated
/// `name=value` pairs, `+` for a space, percent-escapes), or `None` when a name or a value
/// is not UTF-8 once decoded. A form is text, as the API's JSON bodies are: bytes that are
/// not UTF-8 are refused, never stored as replacement characters.
fn parse_form(bytes: &[u8]) -> Option<Vec<(String, String)>> {
    let decode = |raw: &[u8]| {
        let spaced: Vec<u8> = raw
            .iter()
            .map(|&b| if b == b'+' { b' ' } else { b })
            .collect();
        String::from_utf8(percent_encoding::percent_decode(&spaced).collect()).ok()
    };
    bytes
        .split(|&b| b == b'&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = match pair.iter().position(|&b| b == b'=') {
                Some(i) => (&pair[..i], &pair[i + 1..]),
                None => (pair, &[][..]),
            };
            Some((decode(name)?, decode(value)?))
        })
        .collect()
}

fn csrf_refused() -> ConsoleError {
    ConsoleError::forbidden(
        "This form's security token is missing or out of date; nothing was changed. \
         Go back, reload the page and try again.",
    )
}

/// The console's middleware: finds the session (the sign-in page when there is none), checks
/// the CSRF token of every POST and hands its form to the handler.
pub async fn gate(State(st): State<AppState>, req: Request, next: Next) -> Response {
    match gate_inner(&st, req, next).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn gate_inner(st: &AppState, req: Request, next: Next) -> Result<Response, ConsoleError> {
    let path = req.uri().path().to_owned();
    if path.starts_with("/console/assets/") {
        return Ok(next.run(req).await);
    }
    if path == "/console/login" {
        if !is_write(req.method()) {
            return Ok(next.run(req).await);
        }
        // The sign-in form: double-submit token against its cookie.
        let (parts, body) = req.into_parts();
        let form = read_form(st, body).await?;
        let expected = cookie(&parts.headers, LOGIN_COOKIE).unwrap_or_default();
        let given = form.get("csrf").unwrap_or_default();
        if expected.is_empty() || !equal(&expected, given) {
            return Err(csrf_refused());
        }
        let mut req = Request::from_parts(parts, Body::empty());
        req.extensions_mut().insert(form);
        return Ok(next.run(req).await);
    }
    let found = resolve(st, req.headers()).await?;
    let (viewer, new_cookie) = match found {
        Found::Viewer(v, c) => (v, c),
        Found::SignIn(message) => {
            if is_write(req.method()) {
                // No session: nothing a form says is acted on.
                return Err(csrf_refused());
            }
            let next_path = path_and_query(&req);
            return Ok(login_response(
                st,
                req.headers(),
                ErrorCode::Unauthorized.status(),
                message,
                &next_path,
            ));
        }
    };
    let mut req = req;
    if is_write(req.method()) {
        let (parts, body) = req.into_parts();
        let form = read_form(st, body).await?;
        let header_token = parts
            .headers
            .get("x-csrf-token")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let given = form
            .get("csrf")
            .map(str::to_owned)
            .or(header_token)
            .unwrap_or_default();
        if !equal(&viewer.csrf, &given) {
            return Err(csrf_refused());
        }
        req = Request::from_parts(parts, Body::empty());
        req.extensions_mut().insert(form);
    }
    req.extensions_mut().insert(*viewer);
    let mut resp = next.run(req).await;
    if let Some(c) = new_cookie {
        resp.headers_mut().append(header::SET_COOKIE, c);
    }
    Ok(resp)
}

/// Only a console path (never `//host`, never another site, never a `..` that climbs out of
/// `/console`) is a place to return to. It is sent back as a `Location` header, so it is
/// visible ASCII only (a request's own path and query always are): a control character
/// there made the redirect a 500.
pub fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n)
            if (n == "/console" || n.starts_with("/console/") || n.starts_with("/console?"))
                && n.bytes().all(|b| b.is_ascii_graphic())
                && !has_dot_segment(n)
                && !n.contains("//")
                && !n.contains('\\')
                && !n.starts_with("/console/login")
                && !n.starts_with("/console/logout") =>
        {
            n.to_owned()
        }
        _ => "/console".to_owned(),
    }
}

/// Whether the path of `n` has a `.` or `..` segment, written plainly or percent-encoded
/// (`%2e`), which a browser resolves away.
fn has_dot_segment(n: &str) -> bool {
    let path = n.split(['?', '#']).next().unwrap_or_default();
    path.split('/').any(|s| {
        let s = s.to_ascii_lowercase().replace("%2e", ".");
        s == "." || s == ".."
    })
}

/// The sign-in page with a fresh double-submit token (and its cookie).
fn login_response(
    st: &AppState,
    headers: &HeaderMap,
    status: StatusCode,
    message: Option<&str>,
    next: &str,
) -> Response {
    let token = random_hex();
    let mut resp = (
        status,
        view::login_page(&token, message, &safe_next(Some(next))),
    )
        .into_response();
    if let Some(c) = set_cookie(LOGIN_COOKIE, &token, 3600, https(st, headers)) {
        resp.headers_mut().append(header::SET_COOKIE, c);
    }
    resp
}

#[derive(serde::Deserialize)]
pub struct LoginQuery {
    next: Option<String>,
}

/// `GET /console/login`.
pub async fn login_page(
    State(st): State<AppState>,
    headers: HeaderMap,
    axum::extract::Query(q): axum::extract::Query<LoginQuery>,
) -> Response {
    login_response(
        &st,
        &headers,
        StatusCode::OK,
        None,
        q.next.as_deref().unwrap_or("/console"),
    )
}

/// `POST /console/login`: an operator or admin token opens a session.
pub async fn login(
    State(st): State<AppState>,
    headers: HeaderMap,
    Extension(form): Extension<FormData>,
) -> Result<Response, ConsoleError> {
    let next = safe_next(form.get("next"));
    let store = st.ledger.store();
    let now = st.ledger.now();
    if st.auth.token_count().await? == 0 {
        // Open console: nothing to sign in to.
        return Ok(Redirect::to(&next).into_response());
    }
    let secret = form.get("token").unwrap_or_default().trim();
    let refused = |m: &str| {
        login_response(
            &st,
            &headers,
            ErrorCode::Unauthorized.status(),
            Some(m),
            &next,
        )
    };
    if secret.is_empty() {
        return Ok(refused("Enter a token."));
    }
    let token =
        match st.auth.lookup(secret).await? {
            None => return Ok(refused("Unknown token.")),
            Some(t) if t.expired(now) => return Ok(refused("This token has expired.")),
            Some(t) if t.role < Role::Operator => return Ok(refused(
                "A worker token cannot open the console: sign in with an operator or admin token.",
            )),
            Some(t) => t,
        };
    let (id, csrf) = (random_hex(), random_hex());
    store
        .session_create(NewConsoleSession {
            id_hash: sha256_hex(&id),
            token_hash: Some(token.secret_hash.clone()),
            csrf,
            created_at: now,
            expires_at: now.plus_ms(SESSION_MS),
        })
        .await?;
    tracing::info!(
        token_id = token.id,
        role = token.role.as_str(),
        "console: signed in"
    );
    let mut resp = Redirect::to(&next).into_response();
    let secure = https(&st, &headers);
    if let Some(c) = set_cookie(COOKIE, &id, SESSION_MS / 1000, secure) {
        resp.headers_mut().append(header::SET_COOKIE, c);
    }
    if let Some(c) = set_cookie(LOGIN_COOKIE, "", 0, secure) {
        resp.headers_mut().append(header::SET_COOKIE, c);
    }
    Ok(resp)
}

/// `POST /console/logout` (CSRF-checked by [`gate`]): ends the session.
pub async fn logout(
    State(st): State<AppState>,
    headers: HeaderMap,
    Extension(viewer): Extension<Viewer>,
) -> Result<Response, ConsoleError> {
    st.ledger.store().session_delete(&viewer.id_hash).await?;
    let mut resp = Redirect::to("/console/login").into_response();
    if let Some(c) = set_cookie(COOKIE, "", 0, https(&st, &headers)) {
        resp.headers_mut().append(header::SET_COOKIE, c);
    }
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sign_in_only_returns_to_console_pages() {
        for ok in [
            "/console",
            "/console/review?state=needs_review",
            "/console/ns/a",
            "/console/ns/a.b/keys/x..y?state=a.b",
        ] {
            assert_eq!(safe_next(Some(ok)), ok);
        }
        for bad in [
            "//evil.example/console",
            "https://evil.example/console",
            "/consolex",
            "/console//evil.example",
            "/console/\\evil",
            "/console/logout",
            "/console/login?next=/x",
            "",
        ] {
            assert_eq!(safe_next(Some(bad)), "/console", "{bad}");
        }
        assert_eq!(safe_next(None), "/console");
    }

    #[test]
    fn a_place_to_return_to_is_always_a_redirect() {
        // The sign-in form's `next` is form-decoded text: a control character in it made
        // the `Location` header invalid and the sign-in a 500 (found by the console_session
        // fuzz target).
        for bad in [
            "/console/\n",
            "/console/a\r\nSet-Cookie: x=y",
            "/console?\0",
            "/console/\x7f",
            "/console/\u{e9}",
            "/console/a b",
            "/console\t",
        ] {
            assert_eq!(safe_next(Some(bad)), "/console", "{bad:?}");
        }
        // Dot segments climb out of /console once a browser resolves them.
        for bad in [
            "/console/..",
            "/console/../v1/namespaces",
            "/console/ns/%2e%2E/../x",
            "/console/%2e./x",
            "/console/./review",
        ] {
            assert_eq!(safe_next(Some(bad)), "/console", "{bad:?}");
        }
        for next in ["/console/\n", "/console/review?state=needs_review"] {
            let resp = Redirect::to(&safe_next(Some(next))).into_response();
            assert_eq!(resp.status(), StatusCode::SEE_OTHER, "{next:?}");
        }
    }

    #[test]
    fn a_form_is_read_as_urlencoded_utf8_text_or_refused() {
        let fields = |b: &[u8]| parse_form(b).expect("a readable form");
        assert_eq!(
            fields(b"csrf=abc&note=a+b%20c%C3%A9&&flag&empty=&x=1=2"),
            [
                ("csrf", "abc"),
                ("note", "a b c\u{e9}"),
                ("flag", ""),
                ("empty", ""),
                ("x", "1=2"),
            ]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
        );
        assert_eq!(fields(b""), vec![]);
        assert_eq!(
            fields(b"note=%2B%26"),
            [("note".to_owned(), "+&".to_owned())]
        );
        for bad in [
            &b"note=%FF%FE"[..],
            b"csrf=x&note=ok&%C3=1",
            b"note=\xff",
            b"note=%C3",
        ] {
            assert_eq!(parse_form(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn cookies_are_found_by_exact_name() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("x_idem_session=no; idem_session=abc; other=1"),
        );
        assert_eq!(cookie(&h, COOKIE).as_deref(), Some("abc"));
        assert_eq!(cookie(&h, LOGIN_COOKIE), None);
        let c = set_cookie(COOKIE, "v", 60, true).expect("header");
        let c = c.to_str().expect("ascii");
        for attr in [
            "HttpOnly",
            "SameSite=Strict",
            "Path=/console",
            "Max-Age=60",
            "Secure",
        ] {
            assert!(c.contains(attr), "{c}");
        }
    }
}
