//! The effect request as a caller writes it: the body of `POST …/keys/{key}/effect` (and of
//! an action's delivery, which `actions::model` checks when the action is written), its
//! members as validated types and their limits. The OpenAPI schema of each member is written
//! on its field here; `api::v1::effects` turns a body into the request it sends.
//!
//! It sits below the handlers and the action model: it imports only the member and body
//! readers. What it must never do: log, store or format a header value into an error (a
//! header is often a credential; the types below print only how many there are), or send.

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use idem::effect::{self, Method as EffMethod, Success};
use serde_json::Value;
use utoipa::ToSchema;

use crate::api::CostBody;
use crate::error::ApiError;
use crate::fields::{CorrelationId, LeaseMs, Member, Owner, WaitMs};
use crate::input::Obj;

// ------------------------------------------------------------------ members

/// Longest URL accepted.
pub const MAX_URL: usize = 2048;
/// Most request headers.
pub const MAX_HEADERS: usize = 100;

/// `request.method`: POST, PUT, PATCH or DELETE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MethodMember(pub EffMethod);

impl Member for Option<MethodMember> {
    fn read(o: &mut Obj, name: &str) -> Result<Self, ApiError> {
        Ok(
            o.opt_enum(name, EffMethod::parse, "POST, PUT, PATCH, DELETE")?
                .map(MethodMember),
        )
    }
}

/// An http(s) URL with a host, without userinfo (it would be stored), at most 2048
/// characters: as sent, and as read (the egress check and the `sent` summary use the URL
/// read here instead of reading the text again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlMember(pub String, pub url::Url);

impl Member for Option<UrlMember> {
    fn read(o: &mut Obj, name: &str) -> Result<Self, ApiError> {
        let Some(s) = o.opt_str(name, MAX_URL)? else {
            return Ok(None);
        };
        let u = url::Url::parse(&s)
            .map_err(|e| o.invalid(name, &format!("is not an absolute URL ({e})")))?;
        if !matches!(u.scheme(), "http" | "https") || u.host_str().is_none_or(str::is_empty) {
            return Err(o.invalid(name, "must be an http:// or https:// URL with a host"));
        }
        if !u.username().is_empty() || u.password().is_some() {
            return Err(o.invalid(
                name,
                "must not carry credentials (user:password@): send them in a header, which \
                 is never stored",
            ));
        }
        Ok(Some(UrlMember(s, u)))
    }
}

/// Request headers: names and values checked, values never shown (not even by `Debug`);
/// with the names as the request spelled them, for the messages that name one.
#[derive(Clone, Default)]
pub struct HeadersMember(pub HeaderMap, Vec<String>);

impl HeadersMember {
    /// `h` as the request spelled it (the map keeps names in lowercase).
    pub fn given_name(&self, h: &HeaderName) -> String {
        self.1
            .iter()
            .find(|n| n.eq_ignore_ascii_case(h.as_str()))
            .cloned()
            .unwrap_or_else(|| h.as_str().to_owned())
    }
}

impl std::fmt::Debug for HeadersMember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HeadersMember({} headers)", self.0.len())
    }
}

/// Headers the client sets itself: the message's framing and the connection's (hop-by-hop)
/// headers, which a request must never carry from elsewhere.
pub const RESERVED_HEADERS: [&str; 9] = idem::egress::CONNECTION_HEADERS;

impl Member for Option<HeadersMember> {
    fn read(o: &mut Obj, name: &str) -> Result<Self, ApiError> {
        let field = o.name(name);
        let map = match o.value(name) {
            None => return Ok(None),
            Some(Value::Object(m)) => m,
            Some(_) => return Err(o.invalid(name, "must be an object of header → string")),
        };
        if map.len() > MAX_HEADERS {
            return Err(o.invalid(name, &format!("must have at most {MAX_HEADERS} headers")));
        }
        let mut out = HeaderMap::new();
        let given = map.keys().cloned().collect();
        for (k, v) in map {
            let at = format!("{field}.{k}");
            let hn = HeaderName::from_bytes(k.as_bytes()).map_err(|_| {
                ApiError::invalid_field(&at, format!("`{at}` is not a valid header name"))
            })?;
            if RESERVED_HEADERS.contains(&hn.as_str()) {
                return Err(ApiError::invalid_field(
                    &at,
                    format!("`{at}` is set by idem itself"),
                ));
            }
            let Value::String(s) = v else {
                return Err(ApiError::invalid_field(
                    &at,
                    format!("`{at}` must be a string"),
                ));
            };
            // The value may be a credential: the message never repeats it.
            let hv = HeaderValue::from_str(&s).map_err(|_| {
                ApiError::invalid_field(
                    &at,
                    format!("`{at}` must be visible ASCII text (no control characters)"),
                )
            })?;
            out.append(hn, hv);
        }
        Ok(Some(HeadersMember(out, given)))
    }
}

/// A body member given as text (`body_text`, `body_base64`), any length the body limit lets
/// through.
#[derive(Clone, PartialEq, Eq)]
pub struct TextBody(pub String);

impl std::fmt::Debug for TextBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TextBody({} chars)", self.0.chars().count())
    }
}

impl Member for Option<TextBody> {
    fn read(o: &mut Obj, name: &str) -> Result<Self, ApiError> {
        Ok(o.opt_text(name, usize::MAX)?.map(TextBody))
    }
}

/// `idempotency_header`: a header name, or `null` for none (absent: `Idempotency-Key`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyHeader(pub Option<HeaderName>);

impl Member for IdempotencyHeader {
    fn read(o: &mut Obj, name: &str) -> Result<Self, ApiError> {
        match o.raw(name) {
            None => Ok(IdempotencyHeader(Some(HeaderName::from_static(
                "idempotency-key",
            )))),
            Some(Value::Null) => Ok(IdempotencyHeader(None)),
            Some(Value::String(s)) => HeaderName::from_bytes(s.as_bytes())
                .ok()
                .filter(|h| !RESERVED_HEADERS.contains(&h.as_str()))
                .map(|h| IdempotencyHeader(Some(h)))
                .ok_or_else(|| o.invalid(name, "must be a valid header name, or null for none")),
            Some(_) => Err(o.invalid(name, "must be a header name string, or null for none")),
        }
    }
}

/// `timeout_ms`: 1 to 300000.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeoutMs(pub i64);

impl Member for Option<TimeoutMs> {
    fn read(o: &mut Obj, name: &str) -> Result<Self, ApiError> {
        Ok(o.opt_i64(name, 1, effect::MAX_TIMEOUT_MS)?.map(TimeoutMs))
    }
}

fn status_list(o: &Obj, name: &str, v: Value) -> Result<Vec<u16>, ApiError> {
    let Value::Array(items) = v else {
        return Err(o.invalid(name, "must be a list of HTTP statuses (100-599)"));
    };
    items
        .iter()
        .map(|i| {
            idem::policy::json_integer(i)
                .and_then(|n| u16::try_from(n).ok())
                .filter(|n| (100..=599).contains(n))
                .ok_or_else(|| o.invalid(name, "must be a list of HTTP statuses (100-599)"))
        })
        .collect()
}

/// `success`: `"2xx"` or a list of statuses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SuccessMember(pub Success);

impl Member for Option<SuccessMember> {
    fn read(o: &mut Obj, name: &str) -> Result<Self, ApiError> {
        match o.value(name) {
            None => Ok(None),
            Some(Value::String(s)) if s == "2xx" => Ok(Some(SuccessMember(Success::TwoXx))),
            Some(v @ Value::Array(_)) => {
                let l = status_list(o, name, v)?;
                if l.is_empty() {
                    return Err(o.invalid(name, "must name at least one status"));
                }
                Ok(Some(SuccessMember(Success::List(l))))
            }
            Some(_) => Err(o.invalid(name, "must be \"2xx\" or a list of HTTP statuses")),
        }
    }
}

/// `reconcile.found` / `reconcile.not_found`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Statuses(pub Vec<u16>);

impl Member for Option<Statuses> {
    fn read(o: &mut Obj, name: &str) -> Result<Self, ApiError> {
        match o.value(name) {
            None => Ok(None),
            Some(v) => status_list(o, name, v).map(|l| Some(Statuses(l))),
        }
    }
}

/// `reconcile.method`: only `GET`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GetOnly;

impl Member for Option<GetOnly> {
    fn read(o: &mut Obj, name: &str) -> Result<Self, ApiError> {
        o.opt_enum(name, |s| (s == "GET").then_some(GetOnly), "GET")
    }
}

// ------------------------------------------------------------------ body

crate::fields::request_body! {
    required;
    /// `request`: what to send.
    #[derive(Debug, ToSchema)]
    #[serde(deny_unknown_fields)]
    pub struct EffectRequestBody {
        /// POST, PUT, PATCH or DELETE.
        #[schema(value_type = String, pattern = "^(POST|PUT|PATCH|DELETE)$")]
        pub method: Option<MethodMember>,
        /// http:// or https:// URL (query string included in the fingerprint, never shown on
        /// the record); no user:password@. At most 2048 characters.
        #[schema(value_type = String, max_length = 2048)]
        pub url: Option<UrlMember>,
        /// Header → string. Sent, never stored, logged or returned.
        #[schema(value_type = Option<Object>)]
        pub headers: Option<HeadersMember>,
        /// JSON body (sent as application/json unless a Content-Type header says otherwise).
        pub body: Option<Value>,
        /// Text body.
        #[schema(value_type = Option<String>)]
        pub body_text: Option<TextBody>,
        /// Bytes, standard base64.
        #[schema(value_type = Option<String>)]
        pub body_base64: Option<TextBody>,
    }
}

crate::fields::request_body! {
    required;
    /// `reconcile`: how to ask the destination whether an ambiguous attempt landed.
    #[derive(Debug, ToSchema)]
    #[serde(deny_unknown_fields)]
    pub struct ReconcileBody {
        /// Only GET (the default).
        #[schema(value_type = Option<String>, pattern = "^GET$")]
        pub method: Option<GetOnly>,
        /// `{key}` is replaced by the key, percent-encoded as a path segment.
        #[schema(value_type = String, max_length = 2048)]
        pub url: Option<UrlMember>,
        #[schema(value_type = Option<Object>)]
        pub headers: Option<HeadersMember>,
        /// Statuses that mean the effect landed.
        #[schema(value_type = Vec<u16>)]
        pub found: Option<Statuses>,
        /// Statuses that mean it did not.
        #[schema(value_type = Vec<u16>)]
        pub not_found: Option<Statuses>,
    }
}

crate::fields::request_body! {
    required;
    /// `POST …/effect`.
    #[derive(Debug, ToSchema)]
    #[serde(deny_unknown_fields)]
    pub struct EffectBody {
        /// What to send (required; `null` counts as absent).
        #[schema(required = true, nullable = false)]
        pub request: Option<EffectRequestBody>,
        /// The header that carries the key (the same value on every attempt); null: none.
        #[schema(value_type = Option<String>, default = "Idempotency-Key")]
        pub idempotency_header: IdempotencyHeader,
        /// The whole attempt (connect + send + response), 1 to 300000; default 30000.
        #[schema(value_type = Option<i64>, minimum = 1, maximum = 300_000)]
        pub timeout_ms: Option<TimeoutMs>,
        /// "2xx" (default) or a list of statuses that mean the effect happened.
        #[schema(value_type = Option<Value>)]
        pub success: Option<SuccessMember>,
        /// The destination dedupes by the idempotency header: 5xx and timeouts are then
        /// retryable. Default: the namespace policy.
        pub destination_idempotent: Option<bool>,
        pub reconcile: Option<ReconcileBody>,
        #[schema(value_type = Option<String>, max_length = 255)]
        pub owner: Option<Owner>,
        #[schema(value_type = Option<String>, max_length = 255)]
        pub correlation_id: Option<CorrelationId>,
        /// As for a claim (capped at 30000).
        #[schema(value_type = Option<i64>, minimum = 0)]
        pub wait_ms: Option<WaitMs>,
        /// At least timeout_ms + 5000 is used.
        #[schema(value_type = Option<i64>, minimum = 1, maximum = 604_800_000)]
        pub lease_ms: Option<LeaseMs>,
        /// What this attempt spent (as on complete and fail): recorded on the attempt's event
        /// and summed on the record.
        #[schema(value_type = Option<CostBody>)]
        pub cost: Option<CostBody>,
    }
}

/// Free-form object (for the schema).
#[derive(ToSchema)]
pub struct Object;
