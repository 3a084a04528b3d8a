//! Reading requests: the body (size-limited, raw or JSON), typed request bodies, path
//! identifiers and strict member access.
//!
//! Invariants: a body larger than the configured limit is refused before it is parsed (413),
//! the same for every route, raw or JSON; malformed JSON is 400 `invalid_json`; a member the
//! endpoint does not know is 400 `unknown_field` naming it, before any value is looked at; a
//! member of the wrong type, range or length is 422 `invalid_field` naming it (dotted path for
//! nested members). A JSON `null` counts as absent for optional members. `Content-Type` is not
//! required: n8n and curl users often send JSON without it, and an idempotency gate that
//! refuses such a call would only push people to skip it. A body declared as something other
//! than JSON is still parsed as JSON. Nothing here logs a body.
//!
//! It sits below the server state: the extractors work for any state that gives a body
//! limit ([`BodyLimit`]), so authentication and the state can use the path readers here.

use axum::body::Bytes;
use axum::extract::rejection::RawPathParamsRejection;
use axum::extract::{FromRequest, FromRequestParts, RawPathParams, Request};
use axum::http::request::Parts;
use axum::http::HeaderMap;
use idem::{Key, Namespace, ValidationError};
use serde_json::{Map, Value};

use crate::error::ApiError;

/// The state the body extractors read their limit from (the server's `body_limit`): this
/// module sits below the server state, which implements it.
pub trait BodyLimit {
    fn body_limit(&self) -> usize;
}

/// Reads a whole body of at most `limit` bytes: a declared `Content-Length` over the limit is
/// refused before a byte is read, a body that grows past it while streaming too.
async fn read_limited(req: Request, limit: usize) -> Result<(Parts, Bytes), ApiError> {
    let (parts, body) = req.into_parts();
    if let Some(len) = parts
        .headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
    {
        if len > limit as u64 {
            return Err(ApiError::BodyTooLarge { limit });
        }
    }
    let bytes = axum::body::to_bytes(body, limit)
        .await
        .map_err(|_| ApiError::BodyTooLarge { limit })?;
    Ok((parts, bytes))
}

/// A request body exactly as sent, with the request headers: for routes that must see the
/// bytes themselves (a signature over the body is checked against these bytes, never against
/// a re-serialization). Same limit and the same 413 problem as [`JsonBody`].
#[derive(Debug)]
pub struct RawBody {
    pub headers: HeaderMap,
    pub bytes: Bytes,
}

impl RawBody {
    /// Reads `req` under `limit` (the extractor with the server's `body_limit`).
    pub async fn read(req: Request, limit: usize) -> Result<RawBody, ApiError> {
        let (parts, bytes) = read_limited(req, limit).await?;
        Ok(RawBody {
            headers: parts.headers,
            bytes,
        })
    }
}

impl<S: BodyLimit + Send + Sync> FromRequest<S> for RawBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        RawBody::read(req, state.body_limit()).await
    }
}

/// A request body read as JSON (`Value::Null` when the body is empty).
#[derive(Debug)]
pub struct JsonBody(pub Value);

impl<S: BodyLimit + Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let (_, bytes) = read_limited(req, state.body_limit()).await?;
        parse_json(&bytes).map(JsonBody)
    }
}

/// A typed request body: its struct is the OpenAPI schema (`ToSchema`), its member list (the
/// unknown-field refusal) and its validation (each member's type reads itself). Declared with
/// `fields::request_body!`, which writes `FIELDS` and `read` from the struct.
pub trait RequestBody: Sized {
    /// The members the body may have, in the order they are read.
    fn fields() -> &'static [&'static str];
    /// Whether an empty body (no bytes) reads as `{}`.
    const EMPTY_OK: bool;
    /// Reads every member from an object already checked for unknown members.
    fn read(o: &mut Obj) -> Result<Self, ApiError>;
}

/// The extractor of a typed body: JSON, then unknown members, then each member in order.
#[derive(Debug)]
pub struct Body<T>(pub T);

impl<S: BodyLimit + Send + Sync, T: RequestBody> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let JsonBody(v) = JsonBody::from_request(req, state).await?;
        read_body(v).map(Body)
    }
}

/// A typed body from JSON already read (for a handler that must refuse the caller before it
/// looks at the body): the same checks, in the same order, as [`Body`].
pub fn read_body<T: RequestBody>(v: Value) -> Result<T, ApiError> {
    let mut o = Obj::body(v, T::fields(), T::EMPTY_OK)?;
    T::read(&mut o)
}

/// Parses a body: empty (or only whitespace) means `null` (no body). A body that is the JSON
/// literal `null` is not an object and is refused like any other non-object.
pub fn parse_json(bytes: &[u8]) -> Result<Value, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Null);
    }
    match serde_json::from_slice(bytes) {
        Ok(Value::Null) => Err(ApiError::InvalidJson(
            "the request body must be a JSON object, not null".into(),
        )),
        Ok(v) => Ok(v),
        Err(e) => Err(ApiError::InvalidJson(format!("malformed JSON: {e}"))),
    }
}

/// The `{ns}` and `{key}` path segments, percent-decoded and validated.
#[derive(Debug, Clone)]
pub struct NsKey {
    pub ns: Namespace,
    pub key: Key,
}

impl<S: Send + Sync> FromRequestParts<S> for NsKey {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let ns = NsPath::from_request_parts(parts, state).await?.0;
        let raw = raw_param(parts, "key").await?;
        Ok(NsKey {
            ns,
            key: parse_key(&raw)?,
        })
    }
}

/// The `{ns}` path segment, percent-decoded and validated.
#[derive(Debug, Clone)]
pub struct NsPath(pub Namespace);

impl<S: Send + Sync> FromRequestParts<S> for NsPath {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        let raw = raw_param(parts, "ns").await?;
        parse_namespace(&raw).map(NsPath)
    }
}

/// The value of the `{name}` path parameter, already percent-decoded by the router.
///
/// axum's router decodes every captured segment exactly once (`%25` → `%`, `%2F` → `/`), so
/// the value is the key itself: decoding it again would turn the key `a%41` into `aA` and
/// refuse `100%` — the bug that made keys with `%` unusable.
async fn raw_param(parts: &mut Parts, name: &str) -> Result<String, ApiError> {
    let params = path_params(parts).await?;
    params
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
        .ok_or_else(|| ApiError::internal(format!("route has no {{{name}}} segment")))
}

/// Every path parameter of the matched route, percent-decoded once. A segment that does
/// not decode to UTF-8 (`%FF`) is a 400 naming the identifier it was meant to be.
pub async fn path_params(parts: &mut Parts) -> Result<Vec<(String, String)>, ApiError> {
    match RawPathParams::from_request_parts(parts, &()).await {
        Ok(params) => Ok(params
            .iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()),
        Err(RawPathParamsRejection::InvalidUtf8InPathParam(e)) => {
            // The rejection names the parameter only in its text (`Invalid UTF-8 in `ns``).
            if e.body_text().contains("`ns`") {
                Err(ApiError::InvalidNamespace(
                    "namespace: percent-escapes do not decode to UTF-8".into(),
                ))
            } else {
                Err(ApiError::InvalidKey(
                    "key: percent-escapes do not decode to visible ASCII".into(),
                ))
            }
        }
        Err(e) => Err(ApiError::internal(format!("path parameters: {e}"))),
    }
}

/// A key from its (already percent-decoded) path segment: 1–255 bytes of visible ASCII.
pub fn parse_key(decoded: &str) -> Result<Key, ApiError> {
    let bytes = decoded.as_bytes();
    if bytes.is_empty() || bytes.len() > 255 {
        return Err(ApiError::InvalidKey(
            ValidationError::KeyLength(bytes.len()).to_string(),
        ));
    }
    if let Some((pos, &byte)) = bytes
        .iter()
        .enumerate()
        .find(|(_, b)| !(0x21..=0x7e).contains(*b))
    {
        return Err(ApiError::InvalidKey(
            ValidationError::KeyByte { byte, pos }.to_string(),
        ));
    }
    Key::try_from(decoded.to_owned()).map_err(|e| ApiError::InvalidKey(e.to_string()))
}

/// A namespace from its (already percent-decoded) path segment.
pub fn parse_namespace(decoded: &str) -> Result<Namespace, ApiError> {
    Namespace::try_from(decoded.to_owned()).map_err(|e| ApiError::InvalidNamespace(e.to_string()))
}

/// Strict access to the members of a JSON object body.
///
/// Built with the list of members the endpoint knows; any other member is refused at once
/// (400 `unknown_field`), before any value is looked at.
#[derive(Debug)]
pub struct Obj {
    map: Map<String, Value>,
    /// Dotted prefix for nested objects (`error.`), so errors name the full path.
    prefix: String,
}

impl Obj {
    /// A top-level body: `null` (empty body) is `{}` when `empty_ok`.
    pub fn body(v: Value, allowed: &[&str], empty_ok: bool) -> Result<Obj, ApiError> {
        match v {
            Value::Null if empty_ok => Obj::new(Map::new(), allowed, ""),
            Value::Null => Err(ApiError::InvalidJson(
                "a JSON object body is required".into(),
            )),
            Value::Object(m) => Obj::new(m, allowed, ""),
            _ => Err(ApiError::InvalidJson(
                "the request body must be a JSON object".into(),
            )),
        }
    }

    fn new(map: Map<String, Value>, allowed: &[&str], prefix: &str) -> Result<Obj, ApiError> {
        if let Some(k) = map.keys().find(|k| !allowed.contains(&k.as_str())) {
            return Err(ApiError::UnknownField {
                field: format!("{prefix}{k}"),
            });
        }
        Ok(Obj {
            map,
            prefix: prefix.to_owned(),
        })
    }

    /// The member's full name (with the nested prefix, `error.category`).
    pub fn name(&self, field: &str) -> String {
        format!("{}{field}", self.prefix)
    }

    /// 422 `invalid_field` naming the member: "`name` msg".
    pub fn invalid(&self, field: &str, msg: &str) -> ApiError {
        let name = self.name(field);
        ApiError::InvalidField {
            message: format!("`{name}` {msg}"),
            field: name,
        }
    }

    /// The raw value (absent or `null` → `None`).
    pub fn value(&mut self, field: &str) -> Option<Value> {
        match self.map.remove(field) {
            None | Some(Value::Null) => None,
            Some(v) => Some(v),
        }
    }

    /// The raw value with `null` kept (`Some(Value::Null)`), for the members where `null`
    /// means something other than absent.
    pub fn raw(&mut self, field: &str) -> Option<Value> {
        self.map.remove(field)
    }

    /// A string of at most `max_len` characters without U+0000 (a store may not keep it:
    /// PostgreSQL text cannot hold NUL, so it is refused the same on every store).
    pub fn opt_str(&mut self, field: &str, max_len: usize) -> Result<Option<String>, ApiError> {
        match self.opt_text(field, max_len)? {
            Some(s) if s.contains('\0') => {
                Err(self.invalid(field, "must not contain U+0000 (NUL)"))
            }
            other => Ok(other),
        }
    }

    /// A string of at most `max_len` characters, any content (for text the core sanitizes
    /// before it is stored, such as an error message).
    pub fn opt_text(&mut self, field: &str, max_len: usize) -> Result<Option<String>, ApiError> {
        match self.value(field) {
            None => Ok(None),
            Some(Value::String(s)) if s.chars().count() <= max_len => Ok(Some(s)),
            Some(Value::String(_)) => {
                Err(self.invalid(field, &format!("must be at most {max_len} characters")))
            }
            Some(_) => Err(self.invalid(field, "must be a string")),
        }
    }

    pub fn req_str(&mut self, field: &str, max_len: usize) -> Result<String, ApiError> {
        match self.opt_str(field, max_len)? {
            Some(s) if !s.is_empty() => Ok(s),
            _ => Err(self.invalid(field, "is required (a non-empty string)")),
        }
    }

    pub fn opt_i64(&mut self, field: &str, min: i64, max: i64) -> Result<Option<i64>, ApiError> {
        match self.value(field) {
            None => Ok(None),
            Some(v) => match idem::policy::json_integer(&v) {
                Some(n) if (min..=max).contains(&n) => Ok(Some(n)),
                _ => Err(self.invalid(field, &format!("must be an integer from {min} to {max}"))),
            },
        }
    }

    pub fn opt_bool(&mut self, field: &str) -> Result<Option<bool>, ApiError> {
        match self.value(field) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(b)),
            Some(_) => Err(self.invalid(field, "must be true or false")),
        }
    }

    /// One of a fixed set of strings.
    pub fn opt_enum<T>(
        &mut self,
        field: &str,
        parse: impl Fn(&str) -> Option<T>,
        choices: &str,
    ) -> Result<Option<T>, ApiError> {
        match self.value(field) {
            None => Ok(None),
            Some(Value::String(s)) => match parse(&s) {
                Some(t) => Ok(Some(t)),
                None => Err(self.invalid(field, &format!("must be one of {choices}"))),
            },
            Some(_) => Err(self.invalid(field, &format!("must be one of {choices}"))),
        }
    }

    /// A nested object with its own list of known members.
    pub fn opt_obj(&mut self, field: &str, allowed: &[&str]) -> Result<Option<Obj>, ApiError> {
        match self.value(field) {
            None => Ok(None),
            Some(Value::Object(m)) => {
                Obj::new(m, allowed, &format!("{}.", self.name(field))).map(Some)
            }
            Some(_) => Err(self.invalid(field, "must be a JSON object")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::response::IntoResponse;
    use serde_json::json;

    fn request(body: &'static [u8], content_length: Option<usize>) -> Request {
        let mut b = Request::builder()
            .method("POST")
            .uri("/test-only")
            .header("webhook-signature", "v1,c2lnbmF0dXJl");
        if let Some(n) = content_length {
            b = b.header(axum::http::header::CONTENT_LENGTH, n);
        }
        b.body(axum::body::Body::from(body)).expect("a request")
    }

    #[tokio::test]
    async fn raw_bodies_are_the_exact_bytes_with_the_headers() {
        // Member order, blanks and the trailing newline are what a signature covers.
        let sent: &[u8] = b"{\"b\": 1,  \"a\":[2, 3]}\n";
        let raw = RawBody::read(request(sent, Some(sent.len())), 64)
            .await
            .expect("under the limit");
        assert_eq!(&raw.bytes[..], sent);
        assert_eq!(
            raw.headers.get("webhook-signature").map(|v| v.as_bytes()),
            Some(&b"v1,c2lnbmF0dXJl"[..])
        );
        let empty = RawBody::read(request(b"", None), 64).await.expect("empty");
        assert!(empty.bytes.is_empty());
        // Not JSON at all is still a body: the route decides what the bytes mean.
        let raw = RawBody::read(request(b"\xff\x00not json", None), 64)
            .await
            .expect("any bytes");
        assert_eq!(&raw.bytes[..], b"\xff\x00not json");
    }

    #[tokio::test]
    async fn raw_bodies_over_the_limit_get_the_json_extractors_413() {
        let limit = 10;
        let declared = RawBody::read(request(b"0123456789", Some(11)), limit).await;
        let streamed = RawBody::read(request(b"0123456789A", None), limit).await;
        let at_limit = RawBody::read(request(b"0123456789", Some(10)), limit).await;
        assert!(at_limit.is_ok());
        for refused in [declared, streamed] {
            let e = refused.expect_err("over the limit");
            assert!(matches!(e, ApiError::BodyTooLarge { limit: 10 }), "{e:?}");
            let resp = e.into_response();
            assert_eq!(resp.status().as_u16(), 413);
            assert_eq!(
                resp.headers().get(axum::http::header::CONTENT_TYPE),
                Some(&axum::http::HeaderValue::from_static(
                    "application/problem+json"
                ))
            );
            let body = axum::body::to_bytes(resp.into_body(), 4096)
                .await
                .expect("body");
            let problem: Value = serde_json::from_slice(&body).expect("problem+json");
            assert_eq!(problem["code"], "body_too_large");
            assert_eq!(problem["status"], 413);
        }
        // The JSON extractor reads through the same function, so it refuses the same way.
        let json = read_limited(request(b"0123456789A", None), limit).await;
        assert!(matches!(json, Err(ApiError::BodyTooLarge { limit: 10 })));
    }

    #[test]
    fn typed_bodies_refuse_unknown_members_before_reading_any() {
        use crate::api::{FailBody, NoteBody};
        // An unknown member wins over an invalid known one, as it always did.
        let e = read_body::<FailBody>(json!({"token": 5, "extra": 1})).map(|_| ());
        assert!(matches!(e, Err(ApiError::UnknownField { field }) if field == "extra"));
        let e = read_body::<FailBody>(json!({"token": "t", "error": {"category": "x", "why": 1}}))
            .map(|_| ());
        assert!(matches!(e, Err(ApiError::UnknownField { field }) if field == "error.why"));
        let e = read_body::<FailBody>(json!({"token": "t", "error": {"category": ""}})).map(|_| ());
        assert!(
            matches!(e, Err(ApiError::InvalidField { field, .. }) if field == "error.category")
        );
        // Optional bodies may be empty; required ones may not.
        assert!(read_body::<NoteBody>(Value::Null).is_ok());
        assert!(matches!(
            read_body::<FailBody>(Value::Null),
            Err(ApiError::InvalidJson(_))
        ));
        assert_eq!(
            FailBody::FIELDS,
            [
                "token",
                "kind",
                "http_status",
                "retry_after",
                "sent",
                "error",
                "cost"
            ]
        );
    }

    #[test]
    fn keys_are_validated_as_decoded_by_the_router() {
        // Every visible ASCII character is a key character, `%` included: the router has
        // already decoded the segment, so nothing here decodes again.
        let all: String = (0x21u8..=0x7e).map(char::from).collect();
        assert_eq!(parse_key(&all).map(|k| k.to_string()).ok(), Some(all));
        for ok in ["a%b/c?d#e", "100%", "%25", "a%2", "%zz", "a+b", "..", "~"] {
            assert_eq!(
                parse_key(ok).map(|k| k.to_string()).ok().as_deref(),
                Some(ok)
            );
        }
        for bad in ["a b", "\u{e9}", "", "tab\there", "\u{7f}"] {
            assert!(
                matches!(parse_key(bad), Err(ApiError::InvalidKey(_))),
                "{bad}"
            );
        }
        let long = "k".repeat(256);
        assert!(matches!(parse_key(&long), Err(ApiError::InvalidKey(m)) if m.contains("256")));
        assert!(parse_key(&"k".repeat(255)).is_ok());
    }

    #[test]
    fn strict_objects_name_fields() {
        let e = Obj::body(json!({"x": 1}), &["a"], true).map(|_| ());
        assert!(matches!(e, Err(ApiError::UnknownField { field }) if field == "x"));
        let mut o = Obj::body(
            json!({"a": "s", "n": 5, "e": {"z": 1}}),
            &["a", "n", "e"],
            true,
        )
        .expect("ok");
        assert!(
            matches!(o.opt_i64("a", 0, 1), Err(ApiError::InvalidField { field, .. }) if field == "a")
        );
        assert!(matches!(
            o.opt_i64("n", 0, 1),
            Err(ApiError::InvalidField { .. })
        ));
        assert!(
            matches!(o.opt_obj("e", &["y"]), Err(ApiError::UnknownField { field }) if field == "e.z")
        );
        assert!(Obj::body(Value::Null, &[], true).is_ok());
        assert!(matches!(
            parse_json(b" null "),
            Err(ApiError::InvalidJson(_))
        ));
        assert_eq!(parse_json(b"  ").ok(), Some(Value::Null));
        let mut o = Obj::body(json!({"n": 5.0, "f": 5.5}), &["n", "f"], true).expect("ok");
        assert_eq!(o.opt_i64("n", 0, 9).ok(), Some(Some(5)));
        assert!(o.opt_i64("f", 0, 9).is_err());
        let mut o =
            Obj::body(json!({"a": "x\u{0}", "m": "x\u{0}"}), &["a", "m"], true).expect("ok");
        assert!(
            matches!(o.opt_str("a", 9), Err(ApiError::InvalidField { field, .. }) if field == "a")
        );
        assert_eq!(o.opt_text("m", 9).ok(), Some(Some("x\0".to_owned())));
        assert!(matches!(
            Obj::body(json!([1]), &[], true),
            Err(ApiError::InvalidJson(_))
        ));
    }
}
