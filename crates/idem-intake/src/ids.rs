//! Event ids, ledger keys and batch splitting.
//!
//! Called only on a request whose signature verified; it never fails and never drops bytes:
//! whatever cannot be read as the contract describes is *held* (kept without an id under
//! `body-sha256:{hex}`, for an operator to look at), never guessed.
//!
//! - **Ids.** A string id is taken as is; an integer id (JSON integer, signed or unsigned)
//!   becomes its decimal text. Anything else at the id's place (absent, empty string, a
//!   fraction, `true`, `null`, an object, an array) is no id. A header id is its value as
//!   UTF-8 (a header that is absent, empty, repeated, or not UTF-8 is no id). For
//!   `standard_webhooks` the id header is `webhook-id` when present, else `svix-id` (always
//!   the one the signature covered). For `twilio` the id is `I-Twilio-Idempotency-Token`, else the form
//!   body's `MessageSid`, else its `CallSid`. `hmac` has no default: without an explicit
//!   rule every event is held.
//! - **Keys.** The id itself when it is a valid idem key (1–255 bytes of visible ASCII),
//!   else `sha256:{hex of the id's bytes}` (also when the id itself starts with `sha256:` or
//!   `body-sha256:`, so an id never collides with a derived key); a held event's key is
//!   `body-sha256:{hex}` of the bytes stored for it.
//! - **Split.** `split` is an RFC 6901 pointer; `""` and `"/"` both name the document. Each
//!   element of the array found there is one event, stored as its compact JSON, its id read
//!   relative to the element (a pointer rule) — with a header rule, element `i` of a batch
//!   whose header id is `H` gets the id `H/i` (a redelivery of the same batch repeats the
//!   same ids). A body that is not JSON, or a pointer that does not resolve to an array,
//!   yields one held event holding the raw body; so does an empty array (a signed request
//!   always yields at least one event).
//! - **Pointer rule on an unsplit body.** A body that is not JSON has no id (held).

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::provider::Provider;

/// Where a source reads its dedupe id (the `event_id` field); `None` in a source means the
/// provider's default from the contract's table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventIdRule {
    Header(String),
    /// An RFC 6901 pointer into the event's JSON (the element's, for a split batch).
    Pointer(String),
}

/// One event read from a verified request. Its `Debug` shows the body's length only.
#[derive(Clone, PartialEq, Eq)]
pub struct IncomingEvent {
    /// The provider's id as text (an integer id as its decimal text); `None` when the event
    /// carries none (then it is held).
    pub event_id: Option<String>,
    /// The ledger key: the id when it is a valid key of ≤ 255 bytes, else `sha256:{hex}` of
    /// the id; `body-sha256:{hex of the stored bytes}` when there is no id.
    pub key: String,
    /// The bytes stored and forwarded: the raw body, or the element's compact JSON.
    pub body: Vec<u8>,
}

impl std::fmt::Debug for IncomingEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IncomingEvent")
            .field("event_id", &self.event_id)
            .field("key", &self.key)
            .field("body_bytes", &self.body.len())
            .finish()
    }
}

impl IncomingEvent {
    pub fn held(&self) -> bool {
        self.event_id.is_none()
    }

    fn new(event_id: Option<String>, body: Vec<u8>) -> IncomingEvent {
        let key = match &event_id {
            Some(id) => key_for_event_id(id),
            None => held_key(&body),
        };
        IncomingEvent {
            event_id,
            key,
            body,
        }
    }
}

/// The key under which an event id is kept.
pub fn key_for_event_id(id: &str) -> String {
    // An id that itself looks like a derived key is hashed too, so a provider's id can never
    // collide with the key of another (hashed or held) event.
    let derived = id.starts_with("sha256:") || id.starts_with("body-sha256:");
    match idem_core::ids::Key::try_from(id) {
        Ok(k) if !derived => k.as_str().to_owned(),
        _ => format!("sha256:{}", hex::encode(Sha256::digest(id.as_bytes()))),
    }
}

/// The key of a signed event without an id: `body-sha256:{hex}`.
pub fn held_key(raw: &[u8]) -> String {
    format!("body-sha256:{}", hex::encode(Sha256::digest(raw)))
}

/// Whether `p` is an acceptable `split` or `event_id.pointer` value: `""`, or a pointer
/// starting with `/` (RFC 6901; `~` only as `~0` or `~1`).
pub fn valid_pointer(p: &str) -> bool {
    if p.is_empty() {
        return true;
    }
    if !p.starts_with('/') {
        return false;
    }
    let b = p.as_bytes();
    b.iter()
        .enumerate()
        .all(|(i, &c)| c != b'~' || matches!(b.get(i + 1), Some(b'0') | Some(b'1')))
}

/// The value a `split` pointer names (`""` and `"/"` = the document).
fn split_target<'v>(doc: &'v Value, split: &str) -> Option<&'v Value> {
    if split.is_empty() || split == "/" {
        Some(doc)
    } else {
        doc.pointer(split)
    }
}

/// A JSON value as an id: strings as they are (non-empty), integers as decimal text.
fn json_id(v: &Value) -> Option<String> {
    match v {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => n
            .as_i64()
            .map(|i| i.to_string())
            .or_else(|| n.as_u64().map(|u| u.to_string())),
        _ => None,
    }
}

/// A header's single value as text.
fn header_id(headers: &http::HeaderMap, name: &str) -> Option<String> {
    let mut all = headers.get_all(name).iter();
    let v = all.next()?;
    if all.next().is_some() {
        return None;
    }
    let s = std::str::from_utf8(v.as_bytes()).ok()?;
    (!s.is_empty()).then(|| s.to_owned())
}

fn form_id(body: &[u8], names: &[&str]) -> Option<String> {
    names.iter().find_map(|n| {
        url::form_urlencoded::parse(body)
            .find(|(k, _)| k == n)
            .map(|(_, v)| v.into_owned())
            .filter(|v| !v.is_empty())
    })
}

/// An event's JSON as [`event_id`] reads it: already parsed (an element of a split batch;
/// `None` when the body is not JSON), or the raw text, read only along the id's pointer.
#[derive(Clone, Copy)]
enum Doc<'a> {
    Parsed(Option<&'a Value>),
    Text(&'a [u8]),
}

impl Doc<'_> {
    /// The id at RFC 6901 pointer `p` (`""`: the document itself).
    fn id_at(self, p: &str) -> Option<String> {
        match self {
            Doc::Parsed(d) => d.and_then(|d| d.pointer(p)).and_then(json_id),
            Doc::Text(t) => crate::pointer::value_at(t, p).as_ref().and_then(json_id),
        }
    }
}

/// The id of one event: `doc` is its JSON, `raw` its bytes.
fn event_id(
    provider: Provider,
    rule: Option<&EventIdRule>,
    headers: &http::HeaderMap,
    doc: Doc<'_>,
    raw: &[u8],
) -> Option<String> {
    let pointer = |p: &str| doc.id_at(p);
    if let Some(rule) = rule {
        return match rule {
            EventIdRule::Header(h) => header_id(headers, h),
            EventIdRule::Pointer(p) => pointer(p),
        };
    }
    match provider {
        Provider::Stripe => pointer("/id"),
        // The header the signature covered: `webhook-id` whenever it is present (even empty,
        // which is then no id), `svix-id` only in its absence; never an unsigned fallback.
        Provider::StandardWebhooks if headers.contains_key("webhook-id") => {
            header_id(headers, "webhook-id")
        }
        Provider::StandardWebhooks => header_id(headers, "svix-id"),
        Provider::Github => header_id(headers, "x-github-delivery"),
        Provider::Shopify => header_id(headers, "x-shopify-webhook-id"),
        Provider::Slack | Provider::Typeform => pointer("/event_id"),
        Provider::Hubspot => pointer("/eventId"),
        Provider::Twilio => header_id(headers, "i-twilio-idempotency-token")
            .or_else(|| form_id(raw, &["MessageSid", "CallSid"])),
        Provider::Hmac => None,
    }
}

/// Whether the id of an event under this rule comes from a header (shared by a batch).
fn header_rule(provider: Provider, rule: Option<&EventIdRule>) -> bool {
    match rule {
        Some(EventIdRule::Header(_)) => true,
        Some(EventIdRule::Pointer(_)) => false,
        None => matches!(
            provider,
            Provider::StandardWebhooks | Provider::Github | Provider::Shopify | Provider::Twilio
        ),
    }
}

/// Reads the events of a verified request: applies `split` (None = the body is one event)
/// and the id rule (`rule` overrides the provider default). Never empty.
pub fn read_events(
    provider: crate::Provider,
    rule: Option<&EventIdRule>,
    split: Option<&str>,
    headers: &http::HeaderMap,
    body: &[u8],
) -> Vec<IncomingEvent> {
    let Some(split) = split else {
        // One event: only the id's pointer is read (a header id reads nothing of the body).
        let id = event_id(provider, rule, headers, Doc::Text(body), body);
        return vec![IncomingEvent::new(id, body.to_vec())];
    };
    let doc: Option<Value> = serde_json::from_slice(body).ok();
    let items = match doc.as_ref().and_then(|d| split_target(d, split)) {
        Some(Value::Array(items)) if !items.is_empty() => items,
        _ => return vec![IncomingEvent::new(None, body.to_vec())],
    };
    let by_header = header_rule(provider, rule);
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            // Serializing a parsed `Value` cannot fail (its keys are strings).
            let bytes = serde_json::to_vec(item).unwrap_or_default();
            let id = event_id(provider, rule, headers, Doc::Parsed(Some(item)), &bytes);
            let id = if by_header {
                id.map(|h| format!("{h}/{i}"))
            } else {
                id
            };
            IncomingEvent::new(id, bytes)
        })
        .collect()
}

/// Slack's `url_verification`: the challenge to answer, when the (verified) body is one.
pub fn slack_challenge(body: &[u8]) -> Option<String> {
    let doc: Value = serde_json::from_slice(body).ok()?;
    if doc.get("type")?.as_str()? != "url_verification" {
        return None;
    }
    doc.get("challenge")?.as_str().map(str::to_owned)
}
