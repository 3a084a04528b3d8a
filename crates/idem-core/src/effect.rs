//! The rules of an effect: idem itself sends one outbound HTTP request under a key.
//!
//! This module owns what an effect request is ([`Method`], [`Body`], [`Success`]), what it is
//! fingerprinted as ([`fingerprint_input`]: `{method, url, body}` with the body tagged
//! `{"json"|"text"|"base64"}` or `null`; headers never), what the record shows of it
//! ([`RequestSummary`]: method, URL without query string, idempotency header name), the
//! outcome table ([`classify`]: answered status / transport phase × `success` ×
//! `destination_idempotent` → [`Verdict`]), the reconcile lookup's reading
//! ([`reconcile_result`]) and how a response is kept ([`capture`]: a few headers, lowercase;
//! JSON, text or base64 body; a size cap with a `truncated` flag).
//!
//! What it must never do: keep or show a request header or the request body (the record
//! holds the fingerprint only), show a URL's query string or userinfo, or call a 5xx or a
//! timeout anything but ambiguous unless the destination dedupes by the key.

use std::collections::BTreeMap;

use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::fingerprint::{Fingerprint, FingerprintError};

/// Longest `timeout_ms` of an effect.
pub const MAX_TIMEOUT_MS: i64 = 300_000;
/// Default `timeout_ms`.
pub const DEFAULT_TIMEOUT_MS: i64 = 30_000;
/// What the lease adds to `timeout_ms`: the holder must still be able to report after a
/// request that took the whole timeout.
pub const LEASE_MARGIN_MS: i64 = 5_000;
/// Default idempotency header.
pub const DEFAULT_IDEMPOTENCY_HEADER: &str = "Idempotency-Key";
/// Default cap of a stored response body.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 256 * 1024;

/// The methods an effect may use (effects change something; reads are not effects).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Method {
    Post,
    Put,
    Patch,
    Delete,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Patch => "PATCH",
            Method::Delete => "DELETE",
        }
    }
    /// Exactly `POST`, `PUT`, `PATCH` or `DELETE`.
    pub fn parse(s: &str) -> Option<Method> {
        [Method::Post, Method::Put, Method::Patch, Method::Delete]
            .into_iter()
            .find(|m| m.as_str() == s)
    }
}

/// The request body, as given.
#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    /// Sent as `application/json` unless a `Content-Type` header says otherwise.
    Json(Value),
    Text(String),
    /// Bytes, standard base64 (validated by [`Body::bytes`]).
    Base64(String),
}

impl Body {
    /// The bytes sent.
    pub fn bytes(&self) -> Result<Vec<u8>, String> {
        match self {
            Body::Json(v) => serde_json::to_vec(v).map_err(|e| e.to_string()),
            Body::Text(s) => Ok(s.as_bytes().to_vec()),
            Body::Base64(b) => base64::engine::general_purpose::STANDARD
                .decode(b)
                .map_err(|_| "is not standard base64".to_string()),
        }
    }

    fn tagged(&self) -> Value {
        match self {
            Body::Json(v) => json!({"json": v}),
            Body::Text(s) => json!({"text": s}),
            Body::Base64(b) => json!({"base64": b}),
        }
    }
}

/// The statuses that mean the effect happened.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Success {
    #[default]
    TwoXx,
    List(Vec<u16>),
}

impl Success {
    pub fn contains(&self, status: u16) -> bool {
        match self {
            Success::TwoXx => (200..300).contains(&status),
            Success::List(l) => l.contains(&status),
        }
    }
}

/// What a request is fingerprinted as: `{method, url, body}`, the URL with its query string,
/// the body tagged or `null`. Headers are not part of it.
pub fn fingerprint_input(method: Method, url: &str, body: Option<&Body>) -> Value {
    json!({
        "method": method.as_str(),
        "url": url,
        "body": body.map_or(Value::Null, Body::tagged),
    })
}

/// The fingerprint of an effect request (RFC 8785 + SHA-256 of [`fingerprint_input`]).
pub fn fingerprint(
    method: Method,
    url: &str,
    body: Option<&Body>,
) -> Result<Fingerprint, FingerprintError> {
    Fingerprint::of_payload(&fingerprint_input(method, url, body))
}

/// What the record shows of the request: never headers, query string or body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestSummary {
    pub method: String,
    /// Scheme, host, port and path; no userinfo, query string or fragment.
    pub url: String,
    /// The header that carried the key; `None` when none was sent.
    pub idempotency_header: Option<String>,
}

/// `url` without userinfo, query string and fragment (the form a record shows). A string
/// that is not a URL is shown as nothing rather than as is.
pub fn url_without_query(url: &str) -> String {
    url::Url::parse(url).map_or_else(|_| String::new(), |u| shown_url(&u))
}

/// [`url_without_query`] of a URL already read.
pub fn shown_url(u: &url::Url) -> String {
    let mut u = u.clone();
    u.set_query(None);
    u.set_fragment(None);
    let _ = u.set_username("");
    let _ = u.set_password(None);
    u.to_string()
}

/// How far one attempt got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// The destination answered with this status (and `Retry-After`, in ms from now).
    Answered {
        status: u16,
        retry_after_ms: Option<i64>,
    },
    /// Nothing left: the name did not resolve, the connection was refused, TCP or TLS failed
    /// before the request was written.
    NotSent(NotSent),
    /// The request was sent (or may have been) and no status came back.
    Lost(Lost),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotSent {
    /// The name does not resolve.
    Dns,
    /// Refused, unreachable, TLS handshake failed, connect timed out.
    Connect,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lost {
    /// The whole-attempt timeout ran out after the request left.
    Timeout,
    /// The connection broke after the request left (reset, closed without an answer).
    Broken,
}

/// What an attempt means for the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// It happened: `completed`.
    Performed,
    /// It will not work by retrying: `failed_permanent` (the response kept).
    Permanent,
    /// It certainly did not happen (or the destination dedupes): `failed_retryable`, no
    /// sooner than `retry_after_ms`.
    Retryable { retry_after_ms: Option<i64> },
    /// It may have happened: reconcile, else `needs_review`.
    Ambiguous,
}

/// The outcome table of an effect attempt.
///
/// | what happened | not idempotent | `destination_idempotent` |
/// |---|---|---|
/// | status in `success` | performed | performed |
/// | 408, 425, 429, 503 | retryable (Retry-After) | retryable |
/// | 409 | permanent | retryable |
/// | other 4xx, any 3xx | permanent | permanent |
/// | 500, 502, 504, other 5xx | ambiguous | retryable |
/// | 1xx/2xx not in `success` | ambiguous | ambiguous |
/// | nothing sent (DNS, connect, TLS) | retryable | retryable |
/// | sent, then timeout or reset | ambiguous | retryable |
///
/// A 2xx outside `success` stays ambiguous even for an idempotent destination: a resend
/// would only be answered the same way, so a person looks at it.
pub fn classify(t: &Transport, success: &Success, destination_idempotent: bool) -> Verdict {
    let idem = destination_idempotent;
    match *t {
        Transport::Answered {
            status,
            retry_after_ms,
        } => {
            if success.contains(status) {
                return Verdict::Performed;
            }
            let retry = Verdict::Retryable { retry_after_ms };
            match status {
                408 | 425 | 429 | 503 => retry,
                409 if idem => retry,
                409 => Verdict::Permanent,
                300..=499 => Verdict::Permanent,
                500..=599 if idem => retry,
                _ => Verdict::Ambiguous,
            }
        }
        Transport::NotSent(_) => Verdict::Retryable {
            retry_after_ms: None,
        },
        Transport::Lost(_) if idem => Verdict::Retryable {
            retry_after_ms: None,
        },
        Transport::Lost(_) => Verdict::Ambiguous,
    }
}

/// The `last_error` of a failed attempt: (category, message, http status). Never a header
/// or body of the request or the response.
pub fn failure(t: &Transport) -> (&'static str, String, Option<u16>) {
    match t {
        Transport::Answered { status, .. } => (
            "http",
            format!("the destination answered HTTP {status}"),
            Some(*status),
        ),
        Transport::NotSent(NotSent::Dns) => (
            "connection",
            "the destination's name did not resolve; nothing was sent".into(),
            None,
        ),
        Transport::NotSent(NotSent::Connect) => (
            "connection",
            "could not connect to the destination; nothing was sent".into(),
            None,
        ),
        Transport::Lost(Lost::Timeout) => (
            "timeout",
            "no answer within timeout_ms after the request was sent".into(),
            None,
        ),
        Transport::Lost(Lost::Broken) => (
            "connection",
            "the connection broke after the request was sent".into(),
            None,
        ),
    }
}

/// What the reconcile lookup said.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reconciled {
    /// The effect landed: `completed` with the lookup's answer.
    Found,
    /// Evidence it did not land: `failed_retryable`.
    NotFound,
    /// No answer either way (another status, or the lookup failed): `needs_review`.
    Unknown,
}

impl Reconciled {
    pub const ALL: [Reconciled; 3] = [Reconciled::Found, Reconciled::NotFound, Reconciled::Unknown];
    pub fn as_str(self) -> &'static str {
        match self {
            Reconciled::Found => "found",
            Reconciled::NotFound => "not_found",
            Reconciled::Unknown => "unknown",
        }
    }
}

/// Reads the lookup's status (`None`: it got no answer). `found` wins when a status is in
/// both lists.
pub fn reconcile_result(status: Option<u16>, found: &[u16], not_found: &[u16]) -> Reconciled {
    match status {
        Some(s) if found.contains(&s) => Reconciled::Found,
        Some(s) if not_found.contains(&s) => Reconciled::NotFound,
        _ => Reconciled::Unknown,
    }
}

/// `key` percent-encoded as one path segment (everything but RFC 3986 unreserved).
pub fn encode_path_segment(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for b in key.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The reconcile URL for `key`: every `{key}` replaced by the encoded key.
pub fn reconcile_url(template: &str, key: &str) -> String {
    template.replace("{key}", &encode_path_segment(key))
}

/// The response headers kept (lowercase): what a workflow needs to go on, nothing that could
/// be a credential.
pub const KEPT_HEADERS: [&str; 7] = [
    "content-type",
    "location",
    "retry-after",
    "request-id",
    "x-request-id",
    "idempotency-key",
    "idempotent-replayed",
];

pub fn kept_header(name: &str) -> bool {
    KEPT_HEADERS.iter().any(|h| h.eq_ignore_ascii_case(name))
}

/// A kept response body.
#[derive(Debug, Clone, PartialEq)]
pub enum CapturedBody {
    /// No bytes.
    Empty,
    Json(Value),
    Text(String),
    Base64(String),
}

/// A response as stored and answered.
#[derive(Debug, Clone, PartialEq)]
pub struct Captured {
    pub status: u16,
    pub headers: BTreeMap<String, String>,
    pub body: CapturedBody,
    pub truncated: bool,
}

fn is_json_type(content_type: &str) -> bool {
    let mime = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    mime == "application/json" || (mime.starts_with("application/") && mime.ends_with("+json"))
}

/// Keeps a response: the [`KEPT_HEADERS`] (lowercase names; several values joined with
/// `, `; values that are not visible text dropped), the body as JSON when the content type
/// is JSON and the whole body parses, else as text when it is UTF-8, else as base64.
/// `bytes` is what was read (at most the cap); `truncated` says the body was longer.
pub fn capture<'a>(
    status: u16,
    headers: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    bytes: &[u8],
    truncated: bool,
) -> Captured {
    let mut kept: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in headers {
        if !kept_header(name) {
            continue;
        }
        let Ok(v) = std::str::from_utf8(value) else {
            continue;
        };
        if v.chars().any(|c| c.is_control() && c != '\t') {
            continue;
        }
        kept.entry(name.to_ascii_lowercase())
            .and_modify(|have| {
                have.push_str(", ");
                have.push_str(v);
            })
            .or_insert_with(|| v.to_owned());
    }
    let json_type = kept.get("content-type").is_some_and(|c| is_json_type(c));
    let body = if bytes.is_empty() {
        CapturedBody::Empty
    } else if let (true, false, Ok(v)) =
        (json_type, truncated, serde_json::from_slice::<Value>(bytes))
    {
        CapturedBody::Json(v)
    } else {
        match std::str::from_utf8(bytes) {
            Ok(s) => CapturedBody::Text(s.to_owned()),
            // A cut may split a character: keep the text up to it.
            Err(e) if truncated && e.error_len().is_none() => {
                CapturedBody::Text(String::from_utf8_lossy(&bytes[..e.valid_up_to()]).into_owned())
            }
            Err(_) => CapturedBody::Base64(base64::engine::general_purpose::STANDARD.encode(bytes)),
        }
    };
    Captured {
        status,
        headers: kept,
        body,
        truncated,
    }
}

impl Captured {
    /// `{status, headers, body | body_base64, truncated}` (`body: null` for an empty one).
    pub fn to_json(&self) -> Value {
        self.clone().into_json()
    }

    /// [`Captured::to_json`], moving the body into the value (a kept body may be the size of
    /// the response cap: it is not copied).
    pub fn into_json(self) -> Value {
        let mut m = serde_json::Map::new();
        m.insert("status".into(), json!(self.status));
        m.insert("headers".into(), json!(self.headers));
        match self.body {
            CapturedBody::Empty => {
                m.insert("body".into(), Value::Null);
            }
            CapturedBody::Json(v) => {
                m.insert("body".into(), v);
            }
            CapturedBody::Text(s) => {
                m.insert("body".into(), Value::String(s));
            }
            CapturedBody::Base64(b) => {
                m.insert("body_base64".into(), Value::String(b));
            }
        }
        m.insert("truncated".into(), json!(self.truncated));
        Value::Object(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(status: u16) -> Transport {
        Transport::Answered {
            status,
            retry_after_ms: None,
        }
    }

    #[test]
    fn the_outcome_table_for_every_status() {
        use Verdict::*;
        let two = Success::TwoXx;
        for status in 100u16..=599 {
            for idem in [false, true] {
                let got = classify(&answered(status), &two, idem);
                let want = match status {
                    200..=299 => Performed,
                    408 | 425 | 429 | 503 => Retryable {
                        retry_after_ms: None,
                    },
                    409 if idem => Retryable {
                        retry_after_ms: None,
                    },
                    300..=499 => Permanent,
                    500..=599 if idem => Retryable {
                        retry_after_ms: None,
                    },
                    500..=599 => Ambiguous,
                    _ => Ambiguous,
                };
                assert_eq!(got, want, "{status} idempotent={idem}");
            }
        }
        // Spot checks of the contract's rows, spelled out.
        assert_eq!(classify(&answered(402), &two, false), Permanent);
        assert_eq!(classify(&answered(402), &two, true), Permanent);
        assert_eq!(classify(&answered(302), &two, true), Permanent);
        assert_eq!(classify(&answered(409), &two, false), Permanent);
        assert_eq!(classify(&answered(500), &two, false), Ambiguous);
        assert_eq!(classify(&answered(502), &two, false), Ambiguous);
        assert_eq!(classify(&answered(504), &two, false), Ambiguous);
        assert_eq!(classify(&answered(599), &two, false), Ambiguous);
    }

    #[test]
    fn retry_after_is_carried_on_retryable_answers() {
        for status in [408, 425, 429, 503] {
            let t = Transport::Answered {
                status,
                retry_after_ms: Some(7_000),
            };
            assert_eq!(
                classify(&t, &Success::TwoXx, false),
                Verdict::Retryable {
                    retry_after_ms: Some(7_000)
                }
            );
        }
        let t = Transport::Answered {
            status: 500,
            retry_after_ms: Some(1_000),
        };
        assert_eq!(
            classify(&t, &Success::TwoXx, true),
            Verdict::Retryable {
                retry_after_ms: Some(1_000)
            }
        );
        assert_eq!(classify(&t, &Success::TwoXx, false), Verdict::Ambiguous);
    }

    #[test]
    fn a_success_list_decides_first() {
        let s = Success::List(vec![201, 409]);
        assert_eq!(classify(&answered(201), &s, false), Verdict::Performed);
        assert_eq!(classify(&answered(409), &s, false), Verdict::Performed);
        assert_eq!(classify(&answered(200), &s, false), Verdict::Ambiguous);
        assert_eq!(classify(&answered(200), &s, true), Verdict::Ambiguous);
        assert_eq!(classify(&answered(204), &s, false), Verdict::Ambiguous);
        assert_eq!(classify(&answered(400), &s, false), Verdict::Permanent);
    }

    #[test]
    fn transport_rows() {
        let two = Success::TwoXx;
        let retry = Verdict::Retryable {
            retry_after_ms: None,
        };
        for idem in [false, true] {
            assert_eq!(
                classify(&Transport::NotSent(NotSent::Dns), &two, idem),
                retry
            );
            assert_eq!(
                classify(&Transport::NotSent(NotSent::Connect), &two, idem),
                retry
            );
        }
        for lost in [Lost::Timeout, Lost::Broken] {
            assert_eq!(
                classify(&Transport::Lost(lost), &two, false),
                Verdict::Ambiguous
            );
            assert_eq!(classify(&Transport::Lost(lost), &two, true), retry);
        }
        assert_eq!(failure(&answered(502)).2, Some(502));
        assert_eq!(failure(&Transport::Lost(Lost::Timeout)).0, "timeout");
        assert_eq!(failure(&Transport::NotSent(NotSent::Dns)).0, "connection");
    }

    #[test]
    fn reconcile_reading() {
        assert_eq!(
            reconcile_result(Some(200), &[200], &[404]),
            Reconciled::Found
        );
        assert_eq!(
            reconcile_result(Some(404), &[200], &[404]),
            Reconciled::NotFound
        );
        assert_eq!(
            reconcile_result(Some(500), &[200], &[404]),
            Reconciled::Unknown
        );
        assert_eq!(reconcile_result(None, &[200], &[404]), Reconciled::Unknown);
        assert_eq!(
            reconcile_result(Some(200), &[200], &[200]),
            Reconciled::Found
        );
        assert_eq!(reconcile_result(Some(200), &[], &[]), Reconciled::Unknown);
    }

    #[test]
    fn fingerprint_input_is_tagged_and_ignores_headers() {
        let url = "https://api.example.com/v1/charges?expand=x";
        assert_eq!(
            fingerprint_input(Method::Post, url, Some(&Body::Json(json!({"a": 1})))),
            json!({"method": "POST", "url": url, "body": {"json": {"a": 1}}})
        );
        assert_eq!(
            fingerprint_input(Method::Delete, url, None),
            json!({"method": "DELETE", "url": url, "body": null})
        );
        let text = fingerprint(Method::Post, url, Some(&Body::Text("{\"a\":1}".into())));
        let js = fingerprint(Method::Post, url, Some(&Body::Json(json!({"a": 1}))));
        assert_ne!(text.ok(), js.clone().ok(), "text and JSON differ");
        // Member order never matters (JCS).
        let a = fingerprint(
            Method::Post,
            url,
            Some(&Body::Json(json!({"a": 1, "b": 2}))),
        );
        let b = fingerprint(
            Method::Post,
            url,
            Some(&Body::Json(json!({"b": 2, "a": 1}))),
        );
        assert_eq!(a.ok(), b.ok());
        // The query string is part of it.
        let other = fingerprint(
            Method::Post,
            "https://api.example.com/v1/charges?expand=y",
            Some(&Body::Json(json!({"a": 1}))),
        );
        assert_ne!(other.ok(), js.ok());
        let put = fingerprint(Method::Put, url, None);
        let post = fingerprint(Method::Post, url, None);
        assert_ne!(put.ok(), post.ok());
    }

    #[test]
    fn bodies_as_bytes() {
        assert_eq!(
            Body::Json(json!({"a": [1, "x"]})).bytes().ok(),
            Some(br#"{"a":[1,"x"]}"#.to_vec())
        );
        assert_eq!(
            Body::Text("hé".into()).bytes().ok(),
            Some("hé".as_bytes().to_vec())
        );
        assert_eq!(
            Body::Base64("AAH/".into()).bytes().ok(),
            Some(vec![0, 1, 255])
        );
        assert!(Body::Base64("not base64!".into()).bytes().is_err());
    }

    #[test]
    fn methods_are_the_four_that_change_something() {
        for m in ["POST", "PUT", "PATCH", "DELETE"] {
            assert_eq!(Method::parse(m).map(Method::as_str), Some(m));
        }
        for m in ["GET", "post", "HEAD", "OPTIONS", ""] {
            assert_eq!(Method::parse(m), None, "{m}");
        }
    }

    #[test]
    fn urls_shown_without_query_userinfo_or_fragment() {
        assert_eq!(
            url_without_query("https://u:p@api.example.com:8443/v1/x?secret=1#frag"),
            "https://api.example.com:8443/v1/x"
        );
        assert_eq!(
            url_without_query("http://127.0.0.1:9/hook"),
            "http://127.0.0.1:9/hook"
        );
        assert_eq!(url_without_query("not a url"), "");
    }

    #[test]
    fn keys_are_encoded_as_one_path_segment() {
        assert_eq!(
            encode_path_segment("evt_1:charge/x y"),
            "evt_1%3Acharge%2Fx%20y"
        );
        assert_eq!(encode_path_segment("a-b.c~d"), "a-b.c~d");
        assert_eq!(
            reconcile_url("https://x/v1/search?ref={key}&k={key}", "a/b"),
            "https://x/v1/search?ref=a%2Fb&k=a%2Fb"
        );
    }

    #[test]
    fn a_kept_json_response_keeps_the_destination_member_order() {
        // The response is replayed to every duplicate as the destination wrote it: its
        // members (nested ones too) in their order, not sorted; the envelope in the
        // documented order `{status, headers, body, truncated}`.
        let h: Vec<(&str, &[u8])> = vec![("Content-Type", b"application/json")];
        let c = capture(
            201,
            h,
            br#"{"z":1,"a":2,"m":{"y":[{"d":0,"c":1}],"b":null}}"#,
            false,
        );
        assert_eq!(
            serde_json::to_string(&c.to_json()).expect("json"),
            r#"{"status":201,"headers":{"content-type":"application/json"},"body":{"z":1,"a":2,"m":{"y":[{"d":0,"c":1}],"b":null}},"truncated":false}"#
        );
    }

    #[test]
    fn responses_keep_few_headers_and_the_right_body_form() {
        let h: Vec<(&str, &[u8])> = vec![
            ("Content-Type", b"application/json; charset=utf-8"),
            ("Set-Cookie", b"session=secret"),
            ("Authorization", b"Bearer x"),
            ("Request-Id", b"req_1"),
            ("X-Request-Id", b"a"),
            ("x-request-id", b"b"),
            ("Location", b"/v1/charges/ch_1"),
            ("Idempotent-Replayed", b"true"),
            ("Retry-After", b"\x01bad"),
        ];
        let c = capture(201, h.clone(), br#"{"id":"ch_1"}"#, false);
        assert_eq!(c.body, CapturedBody::Json(json!({"id": "ch_1"})));
        let keys: Vec<&str> = c.headers.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "content-type",
                "idempotent-replayed",
                "location",
                "request-id",
                "x-request-id"
            ]
        );
        assert_eq!(c.headers["x-request-id"], "a, b");
        assert_eq!(
            c.to_json(),
            json!({"status": 201, "headers": c.headers, "body": {"id": "ch_1"}, "truncated": false})
        );
        // +json types are JSON; JSON that does not parse (or was cut) is text.
        let p: Vec<(&str, &[u8])> = vec![("content-type", b"application/problem+json")];
        assert_eq!(
            capture(400, p.clone(), br#"{"e":1}"#, false).body,
            CapturedBody::Json(json!({"e": 1}))
        );
        assert_eq!(
            capture(400, p.clone(), br#"{"e":1"#, true).body,
            CapturedBody::Text(r#"{"e":1"#.into())
        );
        // Text without a JSON type stays text even when it parses.
        assert_eq!(
            capture(
                200,
                vec![("content-type", &b"text/plain"[..])],
                b"{}",
                false
            )
            .body,
            CapturedBody::Text("{}".into())
        );
        let bin = capture(200, Vec::<(&str, &[u8])>::new(), &[0xff, 0x00, 0x01], false);
        assert_eq!(bin.body, CapturedBody::Base64("/wAB".into()));
        assert_eq!(bin.to_json()["body_base64"], "/wAB");
        assert!(bin.to_json().get("body").is_none());
        // A cut inside a multi-byte character keeps the text before it.
        let cut = capture(
            200,
            Vec::<(&str, &[u8])>::new(),
            &"hé".as_bytes()[..2],
            true,
        );
        assert_eq!(cut.body, CapturedBody::Text("h".into()));
        let empty = capture(204, Vec::<(&str, &[u8])>::new(), b"", false);
        assert_eq!(empty.to_json()["body"], Value::Null);
    }
}
