//! Bearer-token authentication and authorization.
//!
//! Tokens are looked up by the SHA-256 of the presented secret (`idem::hash_secret`), and the
//! stored hash is compared again in constant time. Once any token exists, every `/v1` call
//! needs one: missing or unknown → 401; a role below the route's or a namespace outside the
//! token's scope → 403. With no token at all auth is off (the server then only listens on
//! loopback, checked at start).
//!
//! A token past its `expires_at` is refused like an unknown one (401). A found token is never
//! cached: every call reads it from the store (one indexed lookup), so a revocation made on
//! any instance, or at the command line, holds on the very next call everywhere. Only misses
//! (unknown secrets) and the token count are cached for about a second; a token created
//! through this server invalidates that cache at once, one created by `idem token create` or
//! on another instance is accepted within a second.
//!
//! `last_used_at` is written at most once a minute per token: only when the stored value is
//! missing or a minute old, so a busy token costs one small write per minute, not per call.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::http::HeaderMap;
use idem::{ApiToken, Namespace, Role, Store, StoreError, Timestamp};
use subtle::ConstantTimeEq;

use crate::error::ApiError;
use crate::input::{parse_namespace, path_params};

/// Entries kept before the lookup cache is cleared (bounds memory under random tokens).
const MAX_CACHED: usize = 10_000;

/// How stale a token's stored `last_used_at` may get before a call refreshes it.
const TOUCH_EVERY_MS: i64 = 60_000;

/// Cached token lookups.
#[derive(Debug)]
pub struct AuthCache {
    store: Arc<dyn Store>,
    ttl: Duration,
    count: Mutex<Option<(Instant, u64)>>,
    /// Recent misses by secret hash (hits are never cached, see the module docs).
    misses: Mutex<HashMap<String, Instant>>,
}

impl AuthCache {
    pub fn new(store: Arc<dyn Store>) -> Self {
        AuthCache {
            store,
            ttl: Duration::from_secs(1),
            count: Mutex::new(None),
            misses: Mutex::new(HashMap::new()),
        }
    }

    /// Number of tokens (cached).
    pub async fn token_count(&self) -> Result<u64, StoreError> {
        if let Ok(g) = self.count.lock() {
            if let Some((at, n)) = *g {
                if at.elapsed() < self.ttl {
                    return Ok(n);
                }
            }
        }
        let n = self.store.token_count().await?;
        if let Ok(mut g) = self.count.lock() {
            *g = Some((Instant::now(), n));
        }
        Ok(n)
    }

    /// The live token whose secret this is, if any (misses cached, hits never).
    pub async fn lookup(&self, secret: &str) -> Result<Option<ApiToken>, StoreError> {
        let hash = idem::hash_secret(secret);
        let missed = self
            .misses
            .lock()
            .ok()
            .is_some_and(|g| g.get(&hash).is_some_and(|at| at.elapsed() < self.ttl));
        if missed {
            return Ok(None);
        }
        let found = self.store.find_token(&hash).await?;
        if found.is_none() {
            if let Ok(mut g) = self.misses.lock() {
                if g.len() >= MAX_CACHED {
                    g.clear();
                }
                g.insert(hash.clone(), Instant::now());
            }
        }
        // The store found it by hash; compare again in constant time so a backend that
        // matched loosely (collation, prefix) can never let a different secret in.
        Ok(found.filter(|t| bool::from(t.secret_hash.as_bytes().ct_eq(hash.as_bytes()))))
    }

    /// Records a use of `token` at `now` when its stored last use is a minute old or missing.
    /// A failed write is logged and the call goes on: usage bookkeeping never refuses a call.
    pub async fn touch(&self, token: &ApiToken, now: Timestamp) {
        let fresh = token
            .last_used_at
            .is_some_and(|t| now.0.saturating_sub(t.0) < TOUCH_EVERY_MS);
        if fresh {
            return;
        }
        if let Err(e) = self.store.touch_token(token.id, now).await {
            tracing::warn!(token_id = token.id, error = %e, "could not record the token's last use");
        }
    }

    /// Forgets everything cached (after a token was created here).
    pub fn invalidate(&self) {
        if let Ok(mut g) = self.count.lock() {
            *g = None;
        }
        if let Ok(mut g) = self.misses.lock() {
            g.clear();
        }
    }
}

/// Who is calling.
#[derive(Debug, Clone)]
pub enum Caller {
    /// Auth is off (no token exists).
    Anonymous,
    Token(ApiToken),
}

impl Caller {
    /// The name recorded on operator events: the token label, else its role and id.
    pub fn actor(&self) -> Option<String> {
        match self {
            Caller::Anonymous => None,
            Caller::Token(t) => Some(
                t.label
                    .clone()
                    .unwrap_or_else(|| format!("{}#{}", t.role.as_str(), t.id)),
            ),
        }
    }

    /// May this caller act on `ns` (when the route has one) with at least `role`?
    pub fn authorize(&self, role: Role, ns: Option<&Namespace>) -> Result<(), ApiError> {
        let Caller::Token(t) = self else {
            return Ok(());
        };
        if let Some(ns) = ns {
            if !in_scope(&t.scope, ns.as_str()) {
                return Err(ApiError::Forbidden(format!(
                    "this token is scoped to namespace {:?}",
                    t.scope
                )));
            }
        }
        if t.role < role {
            return Err(ApiError::Forbidden(format!(
                "this call needs the {} role; the token has {}",
                role.as_str(),
                t.role.as_str()
            )));
        }
        Ok(())
    }

    /// The caller's scope covers `scope` (a namespace or `*`).
    pub fn covers_scope(&self, scope: &str) -> bool {
        match self {
            Caller::Anonymous => true,
            Caller::Token(t) => t.scope == "*" || t.scope == scope,
        }
    }
}

fn in_scope(token_scope: &str, ns: &str) -> bool {
    token_scope == "*" || token_scope == ns
}

/// The bearer secret of a request, if it carries one.
pub fn bearer(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(v) = headers.get(axum::http::header::AUTHORIZATION) else {
        return Ok(None);
    };
    let s = v
        .to_str()
        .map_err(|_| ApiError::Unauthorized("malformed Authorization header".into()))?;
    let (scheme, secret) = s
        .trim()
        .split_once(' ')
        .ok_or_else(|| ApiError::Unauthorized("use Authorization: Bearer <token>".into()))?;
    if !scheme.eq_ignore_ascii_case("bearer") || secret.trim().is_empty() {
        return Err(ApiError::Unauthorized(
            "use Authorization: Bearer <token>".into(),
        ));
    }
    Ok(Some(secret.trim().to_owned()))
}

/// Authenticates the caller and checks the route's `role` and the `{ns}` scope; puts the
/// [`Caller`] into the request extensions for handlers (run by [`crate::middleware::Gate`]).
pub async fn check(
    role: Role,
    auth: &AuthCache,
    ledger: &idem::Ledger,
    req: Request,
) -> Result<Request, ApiError> {
    let caller = authenticate(auth, ledger, req.headers()).await?;
    let (mut parts, body) = req.into_parts();
    let ns = match path_params(&mut parts)
        .await?
        .iter()
        .find(|(k, _)| k == "ns")
    {
        Some((_, decoded)) => Some(parse_namespace(decoded)?),
        None => None,
    };
    caller.authorize(role, ns.as_ref())?;
    parts.extensions.insert(caller);
    Ok(Request::from_parts(parts, body))
}

/// Who is calling: anonymous while no token exists, else the bearer token's holder (missing,
/// unknown or expired → 401). No role or scope is checked here.
pub async fn authenticate(
    auth: &AuthCache,
    ledger: &idem::Ledger,
    headers: &HeaderMap,
) -> Result<Caller, ApiError> {
    let secret = bearer(headers)?;
    if auth.token_count().await? == 0 {
        check_origin(headers, true)?;
        return Ok(Caller::Anonymous);
    }
    let secret =
        secret.ok_or_else(|| ApiError::Unauthorized("a bearer token is required".into()))?;
    let now = ledger.now();
    match auth.lookup(&secret).await? {
        Some(t) if t.expired(now) => Err(ApiError::Unauthorized("this token has expired".into())),
        Some(t) => {
            check_origin(headers, false)?;
            auth.touch(&t, now).await;
            Ok(Caller::Token(t))
        }
        None => Err(ApiError::Unauthorized("unknown token".into())),
    }
}

/// A call made by a web page (it carries `Origin`; clients that are not browsers send none)
/// is served only from a page on the loopback or, once tokens exist, from the server's own
/// origin. Without tokens a page elsewhere could otherwise make the visitor's browser claim,
/// resolve or call an action (a cross-site "simple" POST needs no preflight), or reach a
/// loopback server through DNS rebinding, whose pages share the attacker's name with the
/// server's `Host` — so there only a loopback `Origin` counts. MCP's Streamable HTTP
/// transport asks the same of `/mcp` (403 for an invalid `Origin`).
fn check_origin(headers: &HeaderMap, open: bool) -> Result<(), ApiError> {
    let Some(origin) = headers.get(axum::http::header::ORIGIN) else {
        return Ok(());
    };
    let origin = origin.to_str().unwrap_or("");
    if origin_allowed(origin, headers, open) {
        return Ok(());
    }
    let shown: String = origin.chars().take(100).collect();
    Err(ApiError::Forbidden(format!(
        "a call from the web page at `{shown}` is refused: only pages on the loopback{} may \
         call idem from a browser",
        if open {
            ""
        } else {
            " or on the server's own origin"
        }
    )))
}

fn origin_allowed(origin: &str, headers: &HeaderMap, open: bool) -> bool {
    let Some((scheme, authority)) = origin.split_once("://") else {
        // `null` (a sandboxed frame, a file) and anything else that is not an origin.
        return false;
    };
    if !(scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https"))
        || authority.is_empty()
        || authority.contains(['/', '@', '?', '#'])
    {
        return false;
    }
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if loopback {
        return true;
    }
    !open
        && headers
            .get(axum::http::header::HOST)
            .and_then(|h| h.to_str().ok())
            .is_some_and(|h| h.eq_ignore_ascii_case(authority))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(h: &str) -> HeaderMap {
        let mut m = HeaderMap::new();
        m.insert(
            axum::http::header::HOST,
            axum::http::HeaderValue::from_str(h).expect("host"),
        );
        m
    }

    #[test]
    fn only_loopback_pages_without_tokens_and_the_own_origin_with_them() {
        let h = host("idem.example.com:7780");
        for (origin, open, ok) in [
            ("http://127.0.0.1:5173", true, true),
            ("http://localhost:6274", true, true),
            ("HTTP://LOCALHOST", true, true),
            ("http://[::1]:3000", true, true),
            ("http://127.9.9.9", true, true),
            ("https://evil.example", true, false),
            // DNS rebinding: the page's name is the server's Host, and still refused.
            ("http://idem.example.com:7780", true, false),
            ("http://idem.example.com:7780", false, true),
            ("http://idem.example.com", false, false),
            ("https://evil.example", false, false),
            ("null", true, false),
            ("null", false, false),
            ("file://", true, false),
            ("http://user@127.0.0.1", true, false),
            ("ftp://127.0.0.1", true, false),
            ("http://127.0.0.1.evil.example", true, false),
            ("http://localhost.evil.example", true, false),
        ] {
            assert_eq!(origin_allowed(origin, &h, open), ok, "{origin} open={open}");
        }
    }

    #[test]
    fn no_origin_is_a_client_that_is_not_a_browser() {
        assert!(check_origin(&host("x"), true).is_ok());
    }
}
