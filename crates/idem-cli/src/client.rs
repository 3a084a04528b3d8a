//! A small HTTP client for the idem v1 API (reqwest with rustls).
//!
//! Every path segment is pushed through `Url::path_segments_mut`, so keys are percent-encoded
//! (a key may hold `/`, `?`, `#` or `%`). Answers are kept as JSON values: the CLI shows them
//! or passes them through, it does not re-model the contract. Errors keep the server's
//! problem+json `code` so exit codes and messages can depend on it. The bearer token is never
//! part of an error message.

use std::time::Duration;

use idem_server::error::ErrorCode;
use reqwest::{Method, StatusCode};
use serde_json::Value;
use url::Url;

/// Default server address (the default of `idem serve --listen`).
pub const DEFAULT_URL: &str = "http://127.0.0.1:7780";

/// Why a call to idem (server or local ledger) did not give an answer.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ApiError {
    /// The server could not be reached (exit 21).
    #[error("cannot reach idem at {url}: {message}")]
    Connection { url: String, message: String },
    /// The server (or the local ledger) refused: a problem+json with a `code` (exit 20, or 18
    /// for `lease_lost`).
    #[error("{status} {code}: {detail}")]
    Problem {
        status: u16,
        code: String,
        detail: String,
    },
    /// The answer was not what the contract says (exit 20).
    #[error("unexpected answer from idem: {0}")]
    Protocol(String),
    /// The local ledger failed (exit 1).
    #[error("ledger error: {0}")]
    Store(String),
}

impl ApiError {
    pub fn exit_code(&self) -> u8 {
        use crate::exit;
        match self {
            ApiError::Connection { .. } => exit::CONNECTION,
            ApiError::Problem { code, .. }
                if ErrorCode::parse(code) == Some(ErrorCode::LeaseLost) =>
            {
                exit::LEASE_LOST
            }
            ApiError::Problem { .. } | ApiError::Protocol(_) => exit::HTTP_ERROR,
            ApiError::Store(_) => exit::ERROR,
        }
    }

    /// Worth retrying the same call a little later (nothing was decided).
    pub fn is_transient(&self) -> bool {
        match self {
            ApiError::Connection { .. } => true,
            ApiError::Problem { status, .. } => matches!(status, 502..=504),
            ApiError::Protocol(_) => false,
            ApiError::Store(m) => m.contains("unavailable"),
        }
    }

    pub fn code(&self) -> Option<&str> {
        match self {
            ApiError::Problem { code, .. } => Some(code),
            _ => None,
        }
    }
}

/// One HTTP answer: status, the `Idempotent-Replayed` header, the body as text and JSON (the
/// drills' type, so their calls take the client's answers as they are).
pub use idem_drill::Answer;

/// What the CLI reads from an [`Answer`] beyond its fields.
pub trait AnswerExt: Sized {
    /// This answer as a problem error (for non-2xx answers that are not claim outcomes).
    fn problem(&self) -> ApiError;
    /// 2xx → the answer; anything else → its problem.
    fn ok(self) -> Result<Answer, ApiError>;
}

impl AnswerExt for Answer {
    fn problem(&self) -> ApiError {
        let code = self.body["code"]
            .as_str()
            .unwrap_or("http_error")
            .to_owned();
        let detail = self.body["detail"]
            .as_str()
            .or_else(|| self.body["title"].as_str())
            .map(str::to_owned)
            .unwrap_or_else(|| truncate(&self.text, 300));
        ApiError::Problem {
            status: self.status,
            code,
            detail,
        }
    }

    fn ok(self) -> Result<Answer, ApiError> {
        if self.is_success() {
            Ok(self)
        } else {
            Err(self.problem())
        }
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// Client of one idem server.
#[derive(Clone)]
pub struct Client {
    base: Url,
    bearer: Option<String>,
    http: reqwest::Client,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The bearer token is a credential: never print it.
        f.debug_struct("Client")
            .field("base", &self.base.as_str())
            .field("bearer", &self.bearer.as_ref().map(|_| "***"))
            .finish()
    }
}

impl Client {
    /// `base` like `http://127.0.0.1:7780`; `bearer` is the API token (if auth is on).
    pub fn new(base: &str, bearer: Option<String>) -> Result<Client, ApiError> {
        let base = Url::parse(base)
            .map_err(|e| ApiError::Protocol(format!("invalid server URL {base:?}: {e}")))?;
        if base.cannot_be_a_base() || !matches!(base.scheme(), "http" | "https") {
            return Err(ApiError::Protocol(format!(
                "invalid server URL {:?}: use http://HOST:PORT or https://…",
                base.as_str()
            )));
        }
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            // wait_ms is capped at 30 s by the server; leave room above it.
            .timeout(Duration::from_secs(60))
            .user_agent(concat!("idem-cli/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ApiError::Protocol(format!("cannot build HTTP client: {e}")))?;
        Ok(Client {
            base,
            bearer: bearer.filter(|t| !t.is_empty()),
            http,
        })
    }

    pub fn base(&self) -> &str {
        self.base.as_str()
    }

    /// The URL of `segments` under the base (each segment percent-encoded).
    pub fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty();
            path.extend(segments);
        }
        url
    }

    /// `/v1/namespaces/{ns}/keys/{key}[/{action}]`
    pub fn key_url(&self, ns: &str, key: &str, action: Option<&str>) -> Url {
        match action {
            Some(a) => self.url(&["v1", "namespaces", ns, "keys", key, a]),
            None => self.url(&["v1", "namespaces", ns, "keys", key]),
        }
    }

    /// Sends one request and reads the whole answer (any status).
    pub async fn send(
        &self,
        method: Method,
        url: Url,
        body: Option<&Value>,
    ) -> Result<Answer, ApiError> {
        let mut req = self.http.request(method, url.clone());
        if let Some(t) = &self.bearer {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(b);
        }
        let (status, replayed, text) = self.exchange(req).await?;
        let body = if text.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::Null)
        };
        if body.is_null() && status != StatusCode::NO_CONTENT && status.is_success() {
            return Err(ApiError::Protocol(format!(
                "{} answered {status} without a JSON body",
                url.path()
            )));
        }
        Ok(Answer {
            status: status.as_u16(),
            replayed,
            text,
            body,
        })
    }

    /// Sends `req`; answers the status, whether `Idempotent-Replayed` is `true`, and the text.
    async fn exchange(
        &self,
        req: reqwest::RequestBuilder,
    ) -> Result<(StatusCode, bool, String), ApiError> {
        let resp = req.send().await.map_err(|e| self.connection_error(&e))?;
        let status = resp.status();
        let replayed = resp
            .headers()
            .get("idempotent-replayed")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case("true"));
        let text = resp.text().await.map_err(|e| self.connection_error(&e))?;
        Ok((status, replayed, text))
    }

    fn connection_error(&self, e: &reqwest::Error) -> ApiError {
        // reqwest's Display includes the URL; the chain says why (refused, DNS, timeout).
        let mut message = e.to_string();
        let mut src = std::error::Error::source(e);
        while let Some(s) = src {
            message.push_str(": ");
            message.push_str(&s.to_string());
            src = s.source();
        }
        ApiError::Connection {
            url: self.base.to_string(),
            message,
        }
    }

    /// A GET whose answer is text (`/metrics`): the body, when the status is a success.
    pub async fn get_text(&self, url: Url) -> Result<String, ApiError> {
        let mut req = self.http.get(url.clone());
        if let Some(t) = &self.bearer {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.map_err(|e| self.connection_error(&e))?;
        let status = resp.status();
        let text = resp.text().await.map_err(|e| self.connection_error(&e))?;
        if status.is_success() {
            Ok(text)
        } else {
            Err(ApiError::Protocol(format!(
                "{} answered {status}",
                url.path()
            )))
        }
    }

    pub async fn get(&self, url: Url) -> Result<Answer, ApiError> {
        self.send(Method::GET, url, None).await
    }

    pub async fn post(&self, url: Url, body: &Value) -> Result<Answer, ApiError> {
        self.send(Method::POST, url, Some(body)).await
    }

    pub async fn patch(&self, url: Url, body: &Value) -> Result<Answer, ApiError> {
        self.send(Method::PATCH, url, Some(body)).await
    }

    /// `POST …/{action}` on a key; 2xx required.
    pub async fn key_action(
        &self,
        ns: &str,
        key: &str,
        action: &str,
        body: &Value,
    ) -> Result<Answer, ApiError> {
        self.post(self.key_url(ns, key, Some(action)), body)
            .await?
            .ok()
    }

    /// `POST …/claim`: claim outcomes come with 200/201/409/422/429/503 and an `outcome`
    /// field; anything without one is an error.
    pub async fn claim(&self, ns: &str, key: &str, body: &Value) -> Result<Answer, ApiError> {
        let ans = self
            .post(self.key_url(ns, key, Some("claim")), body)
            .await?;
        if ans.body.get("outcome").and_then(Value::as_str).is_some() {
            Ok(ans)
        } else {
            Err(ans.problem())
        }
    }

    /// `POST …/effect`: like a claim, answers carry an `outcome`; the server may wait for the
    /// destination up to `timeout_ms`, so the request may take that long and more.
    pub async fn effect(
        &self,
        ns: &str,
        key: &str,
        body: &Value,
        timeout: Duration,
    ) -> Result<Answer, ApiError> {
        let url = self.key_url(ns, key, Some("effect"));
        let mut req = self.http.post(url.clone()).json(body).timeout(timeout);
        if let Some(t) = &self.bearer {
            req = req.bearer_auth(t);
        }
        let (status, replayed, text) = self.exchange(req).await?;
        let status = status.as_u16();
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        let ans = Answer {
            status,
            replayed,
            text,
            body,
        };
        if ans.body.get("outcome").and_then(Value::as_str).is_some() {
            Ok(ans)
        } else {
            Err(ans.problem())
        }
    }

    /// `GET /v1/namespaces/{ns}`
    pub async fn namespace(&self, ns: &str) -> Result<Answer, ApiError> {
        self.get(self.url(&["v1", "namespaces", ns])).await?.ok()
    }

    /// `PATCH /v1/namespaces/{ns}`
    pub async fn patch_namespace(&self, ns: &str, patch: &Value) -> Result<Answer, ApiError> {
        self.patch(self.url(&["v1", "namespaces", ns]), patch)
            .await?
            .ok()
    }

    /// `POST /v1/namespaces/{ns}/pause` or `/resume`.
    pub async fn switch_namespace(&self, ns: &str, action: &str) -> Result<Answer, ApiError> {
        self.post(
            self.url(&["v1", "namespaces", ns, action]),
            &Value::Object(Default::default()),
        )
        .await?
        .ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_percent_encoded_as_one_segment() {
        let c = Client::new("http://127.0.0.1:7780", None).unwrap();
        let u = c.key_url("pay", "a/b?c#d%e f", Some("claim"));
        assert_eq!(
            u.as_str(),
            "http://127.0.0.1:7780/v1/namespaces/pay/keys/a%2Fb%3Fc%23d%25e%20f/claim"
        );
        let c = Client::new("http://h:1/base/", None).unwrap();
        assert_eq!(
            c.url(&["v1", "namespaces", "x"]).as_str(),
            "http://h:1/base/v1/namespaces/x"
        );
    }

    #[test]
    fn debug_hides_the_bearer_token() {
        let c = Client::new("http://h:1", Some("idem_secret".into())).unwrap();
        assert!(!format!("{c:?}").contains("idem_secret"));
    }

    #[test]
    fn rejects_non_http_urls() {
        assert!(Client::new("ftp://x", None).is_err());
        assert!(Client::new("nope", None).is_err());
    }
}
