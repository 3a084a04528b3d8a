//! The source model: one provider endpoint of the intake — how its events are verified, where
//! their ids are read, where they are forwarded — with the validation of a source document
//! (`PUT`/`PATCH /v1/sources/{source}`, the config file's `[sources.NAME]`).
//!
//! [`SourceInput::parse`] reads a whole document (defaults filled in), [`Source::patch`]
//! merges a partial one into a stored source recursively (like a namespace PATCH; `secrets`
//! replaces the list; a partial `forward.retry` keeps the other members). Errors name the
//! field: [`SourceError::Unknown`] (400 `unknown_field`) or [`SourceError::Invalid`] (422
//! `invalid_field`).
//!
//! Secrets (`secrets`, `forward.secret`) never enter a [`Source`]: parsing hands them out
//! apart ([`SourceSecrets`]), the store keeps them in its secrets table, and the stored
//! configuration ([`Source::to_stored`]) and every read ([`Source::read_shape`]) hold none —
//! reads show only `secret_hints` (last 4 characters). No error message ever quotes a value
//! of a secret member.
//!
//! The model, its defaults, the patch merge and the stored and read shapes are here; reading
//! and validating a document is the `parse` module.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::fanout::{Filter, Rate, DEFAULT};
use crate::ids::EventIdRule;
use crate::provider::{HmacAlgorithm, HmacEncoding, HmacScheme, HmacSigned, Provider};

mod parse;

use parse::{parse_doc, read_forward_secret, read_secrets, usable};

/// Most signing secrets of a source (rotation keeps a few).
pub const MAX_SECRETS: usize = 4;
/// Longest signing secret accepted, characters.
pub const MAX_SECRET_LEN: usize = 512;
/// Longest URL.
pub const MAX_URL: usize = 2048;
/// Most forwarded header names.
pub const MAX_FORWARD_HEADERS: usize = 50;

pub const DEFAULT_TOLERANCE_MS: i64 = 300_000;
pub const DEFAULT_TIMEOUT_MS: i64 = 10_000;
pub const DEFAULT_CONCURRENCY: u32 = 4;
pub const DEFAULT_MAX_BODY_BYTES: usize = 1 << 20;
/// The largest `max_body_bytes` a source may set.
pub const MAX_MAX_BODY_BYTES: usize = 16 << 20;
pub const DEFAULT_RETRY: Retry = Retry {
    max_attempts: 8,
    base_ms: 5000,
    max_ms: 3_600_000,
    window_ms: 3 * 86_400_000,
};

/// Why a source document was refused; `field` is the member's path (`forward.retry.base_ms`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    #[error("unknown field `{field}`")]
    Unknown { field: String },
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
}

impl SourceError {
    fn invalid(field: impl Into<String>, message: impl Into<String>) -> SourceError {
        SourceError::Invalid {
            field: field.into(),
            message: message.into(),
        }
    }
    pub fn field(&self) -> &str {
        match self {
            SourceError::Unknown { field } | SourceError::Invalid { field, .. } => field,
        }
    }
}

/// `forward.retry`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    pub max_attempts: u32,
    pub base_ms: i64,
    pub max_ms: i64,
    pub window_ms: i64,
}

/// One destination: `forward` (the destination `default`) or a member of `forwards`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forward {
    pub url: String,
    pub timeout_ms: i64,
    pub concurrency: u32,
    /// `None`: the provider's default list.
    pub headers: Option<Vec<String>>,
    pub retry: Retry,
    /// `None`: every event.
    pub filter: Option<Filter>,
    /// `None`: unpaced.
    pub rate: Option<Rate>,
}

/// A source without its secrets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    pub name: String,
    pub provider: Provider,
    /// `None`: the source name.
    pub namespace: Option<String>,
    pub tolerance_ms: i64,
    /// `None`: the provider's default.
    pub event_id: Option<EventIdRule>,
    /// `None`: the provider's default (`""` for hubspot, else no split). `Some("")` splits
    /// the document itself.
    pub split: Option<String>,
    /// The destination `default` (`forwards.default` in a document lands here too).
    pub forward: Option<Forward>,
    /// The other destinations by name (never `default`). With `forward`, at least one.
    pub forwards: BTreeMap<String, Forward>,
    pub hmac: Option<HmacScheme>,
    pub public_url: Option<String>,
    pub max_body_bytes: usize,
}

/// The secret members of a document, as given (never shown).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SourceSecrets {
    /// `Some`: the new list (1–4).
    pub secrets: Option<Vec<String>>,
    /// `None`: unchanged; `Some(None)`: removed; `Some(Some(s))`: set.
    pub forward_secret: Option<Option<String>>,
    /// The same for the named destinations: a name absent here is unchanged.
    pub destination_secrets: BTreeMap<String, Option<String>>,
}

impl std::fmt::Debug for SourceSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SourceSecrets")
            .field("secrets", &self.secrets.as_ref().map(Vec::len))
            .field(
                "forward_secret",
                &self.forward_secret.as_ref().map(Option::is_some),
            )
            .field("destination_secrets", &self.destination_secrets.len())
            .finish()
    }
}

/// A parsed document: the source and its secret members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceInput {
    pub source: Source,
    pub secrets: SourceSecrets,
}

/// The provider's default event id rule, where the contract's table has one a rule can say
/// (twilio's header-else-body default and hmac's required rule have none).
pub fn default_event_id(p: Provider) -> Option<EventIdRule> {
    let h = |s: &str| Some(EventIdRule::Header(s.into()));
    let b = |s: &str| Some(EventIdRule::Pointer(s.into()));
    match p {
        Provider::Stripe => b("/id"),
        Provider::StandardWebhooks => h("webhook-id"),
        Provider::Github => h("X-GitHub-Delivery"),
        Provider::Shopify => h("X-Shopify-Webhook-Id"),
        Provider::Slack => b("/event_id"),
        Provider::Hubspot => b("/eventId"),
        Provider::Typeform => b("/event_id"),
        Provider::Twilio | Provider::Hmac => None,
    }
}

/// A source as reads show it: defaults filled in, secrets only as hints (the last 4
/// characters). Its members are the contract's (`INTAKE.md`); `retry`, `filter`, `rate`,
/// `event_id` and `hmac` are the same small objects a source document is written with.
#[derive(Debug, Serialize)]
pub struct SourceRead {
    pub source: String,
    pub provider: String,
    pub namespace: String,
    pub tolerance_ms: i64,
    pub event_id: Option<Value>,
    pub split: Option<String>,
    /// The destination `default`; `None` when the source has only named destinations.
    pub forward: Option<ForwardRead>,
    /// The named destinations.
    pub forwards: BTreeMap<String, ForwardRead>,
    pub hmac: Option<Value>,
    pub public_url: Option<String>,
    pub max_body_bytes: usize,
    pub secret_hints: Vec<String>,
    pub created_at: String,
    pub updated_at: String,
}

/// One destination of a source as reads show it.
#[derive(Debug, Serialize)]
pub struct ForwardRead {
    pub url: String,
    pub timeout_ms: i64,
    pub concurrency: u32,
    pub headers: Vec<String>,
    pub retry: Value,
    /// The last 4 characters of the destination's signing secret, when it has one.
    pub secret_hint: Option<String>,
    pub filter: Option<Value>,
    pub rate: Option<Value>,
}

impl Source {
    /// The ledger namespace of this source's events.
    pub fn namespace(&self) -> &str {
        self.namespace.as_deref().unwrap_or(&self.name)
    }

    /// The effective split pointer (`None`: the body is one event).
    pub fn split(&self) -> Option<&str> {
        match &self.split {
            Some(s) => Some(s.as_str()),
            None => self.provider.default_split(),
        }
    }

    /// Every destination with its name, `default` first, then by name.
    pub fn destinations(&self) -> Vec<(&str, &Forward)> {
        let mut out: Vec<(&str, &Forward)> = Vec::with_capacity(self.forwards.len() + 1);
        if let Some(f) = &self.forward {
            out.push((DEFAULT, f));
        }
        out.extend(self.forwards.iter().map(|(n, f)| (n.as_str(), f)));
        out
    }

    /// The destination `name`.
    pub fn destination(&self, name: &str) -> Option<&Forward> {
        if name == DEFAULT {
            self.forward.as_ref()
        } else {
            self.forwards.get(name)
        }
    }

    /// The destinations an event with this body and these inbound headers goes to.
    pub fn matching(&self, body: &[u8], headers: &http::HeaderMap) -> Vec<String> {
        crate::fanout::matching(
            self.destinations()
                .into_iter()
                .map(|(n, f)| (n, f.filter.as_ref())),
            body,
            headers,
        )
    }

    /// The effective forwarded header names of one destination.
    pub fn headers_of(&self, f: &Forward) -> Vec<String> {
        match &f.headers {
            Some(h) => h.clone(),
            None => self
                .provider
                .default_forward_headers()
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
        }
    }

    /// The inbound header names stored with an event: those of every destination (each
    /// delivery passes on its own destination's list).
    pub fn forward_headers(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for (_, f) in self.destinations() {
            for h in self.headers_of(f) {
                if !out.iter().any(|x| x.eq_ignore_ascii_case(&h)) {
                    out.push(h);
                }
            }
        }
        out
    }

    /// The stored configuration: the document without secrets (read back by [`Source::load`]).
    pub fn to_stored(&self) -> Value {
        let mut m = Map::new();
        m.insert("provider".into(), json!(self.provider.as_str()));
        if let Some(ns) = &self.namespace {
            m.insert("namespace".into(), json!(ns));
        }
        m.insert("tolerance_ms".into(), json!(self.tolerance_ms));
        if let Some(r) = &self.event_id {
            m.insert("event_id".into(), rule_json(r));
        }
        if let Some(s) = &self.split {
            m.insert("split".into(), json!(s));
        }
        if let Some(f) = &self.forward {
            m.insert("forward".into(), forward_stored(f));
        }
        if !self.forwards.is_empty() {
            let named: Map<String, Value> = self
                .forwards
                .iter()
                .map(|(n, f)| (n.clone(), forward_stored(f)))
                .collect();
            m.insert("forwards".into(), Value::Object(named));
        }
        if let Some(h) = &self.hmac {
            m.insert("hmac".into(), hmac_json(h));
        }
        if let Some(u) = &self.public_url {
            m.insert("public_url".into(), json!(u));
        }
        m.insert("max_body_bytes".into(), json!(self.max_body_bytes));
        Value::Object(m)
    }

    /// A stored configuration read back (it was valid when stored; an error means damage).
    pub fn load(name: &str, stored: &Value) -> Result<Source, SourceError> {
        parse_doc(name, stored, false).map(|i| i.source)
    }

    /// The read shape of the contract ("Source reads"), defaults filled in. `hints` are the
    /// last 4 characters of each signing secret, `forward_hints` those of each destination's
    /// secret by destination name (`default` for `forward.secret`). `forward` is `null` when
    /// the source has only named destinations; `forwards` lists the named ones.
    pub fn read_shape(
        &self,
        hints: &[String],
        forward_hints: &BTreeMap<String, String>,
        created_at: String,
        updated_at: String,
    ) -> SourceRead {
        let read = |name: &str, f: &Forward| ForwardRead {
            url: f.url.clone(),
            timeout_ms: f.timeout_ms,
            concurrency: f.concurrency,
            headers: self.headers_of(f),
            retry: retry_json(&f.retry),
            secret_hint: forward_hints.get(name).cloned(),
            filter: f.filter.as_ref().map(filter_json),
            rate: f.rate.as_ref().map(rate_json),
        };
        let event_id = self
            .event_id
            .clone()
            .or_else(|| default_event_id(self.provider));
        SourceRead {
            source: self.name.clone(),
            provider: self.provider.as_str().to_owned(),
            namespace: self.namespace().to_owned(),
            tolerance_ms: self.tolerance_ms,
            event_id: event_id.as_ref().map(rule_json),
            split: self.split().map(str::to_owned),
            forward: self.forward.as_ref().map(|f| read(DEFAULT, f)),
            forwards: self
                .forwards
                .iter()
                .map(|(n, f)| (n.clone(), read(n, f)))
                .collect(),
            hmac: self.hmac.as_ref().map(hmac_json),
            public_url: self.public_url.clone(),
            max_body_bytes: self.max_body_bytes,
            secret_hints: hints.to_vec(),
            created_at,
            updated_at,
        }
    }

    /// Merges `patch` (recursively; `null` removes a member, so it takes its default) into
    /// this source. `secrets` in the patch replaces the list; `forward.secret` sets or (with
    /// `null`) removes the forward secret.
    pub fn patch(&self, patch: &Value) -> Result<SourceInput, SourceError> {
        let Value::Object(p) = patch else {
            return Err(SourceError::invalid("", "must be a JSON object"));
        };
        let mut doc = self.to_stored();
        let mut p = p.clone();
        let secrets = p.shift_remove("secrets");
        let mut forward_secret = None;
        if let Some(Value::Object(f)) = p.get_mut("forward") {
            forward_secret = f.shift_remove("secret");
        }
        let mut named_secrets: Vec<(String, Value)> = Vec::new();
        if let Some(Value::Object(fs)) = p.get_mut("forwards") {
            for (name, f) in fs.iter_mut() {
                if let Value::Object(f) = f {
                    if let Some(s) = f.shift_remove("secret") {
                        named_secrets.push((name.clone(), s));
                    }
                }
            }
        }
        merge(&mut doc, &Value::Object(p));
        let mut input = parse_doc(&self.name, &doc, false)?;
        if let Some(s) = secrets {
            input.secrets.secrets = Some(usable(input.source.provider, read_secrets(&s)?)?);
        }
        if let Some(fs) = forward_secret {
            input.secrets.forward_secret = Some(read_forward_secret("forward.secret", &fs)?);
        }
        for (name, s) in named_secrets {
            let field = format!("forwards.{name}.secret");
            let s = read_forward_secret(&field, &s)?;
            if name == DEFAULT {
                input.secrets.forward_secret = Some(s);
            } else if input.source.forwards.contains_key(&name) {
                input.secrets.destination_secrets.insert(name, s);
            }
        }
        Ok(input)
    }
}

impl SourceInput {
    /// Reads a whole document (`PUT`, the config file): `secrets` required.
    pub fn parse(name: &str, doc: &Value) -> Result<SourceInput, SourceError> {
        parse_doc(name, doc, true)
    }
}

/// RFC 7396-style recursive merge: objects merge, `null` removes, anything else replaces.
fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.shift_remove(k);
                } else if let Some(tv) = t.get_mut(k) {
                    if tv.is_object() && v.is_object() {
                        merge(tv, v);
                    } else {
                        *tv = v.clone();
                    }
                } else {
                    t.insert(k.clone(), v.clone());
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

fn retry_json(r: &Retry) -> Value {
    json!({
        "max_attempts": r.max_attempts,
        "base_ms": r.base_ms,
        "max_ms": r.max_ms,
        "window_ms": r.window_ms,
    })
}

fn rule_json(r: &EventIdRule) -> Value {
    match r {
        EventIdRule::Header(h) => json!({"header": h}),
        EventIdRule::Pointer(p) => json!({"pointer": p}),
    }
}

fn hmac_json(h: &HmacScheme) -> Value {
    let alg = match h.algorithm {
        HmacAlgorithm::Sha1 => "sha1",
        HmacAlgorithm::Sha256 => "sha256",
        HmacAlgorithm::Sha512 => "sha512",
    };
    let enc = match h.encoding {
        HmacEncoding::Hex => "hex",
        HmacEncoding::Base64 => "base64",
    };
    let signed = match h.signed {
        HmacSigned::Body => "body",
        HmacSigned::TimestampBody => "timestamp.body",
    };
    json!({
        "header": h.header,
        "algorithm": alg,
        "encoding": enc,
        "prefix": h.prefix,
        "timestamp_header": h.timestamp_header,
        "signed": signed,
    })
}

/// Reads the members of one object, refusing any it does not know.
fn forward_stored(f: &Forward) -> Value {
    let mut forward = json!({
        "url": f.url,
        "timeout_ms": f.timeout_ms,
        "concurrency": f.concurrency,
        "retry": retry_json(&f.retry),
    });
    if let Some(h) = &f.headers {
        forward["headers"] = json!(h);
    }
    if let Some(x) = &f.filter {
        forward["filter"] = filter_json(x);
    }
    if let Some(r) = &f.rate {
        forward["rate"] = rate_json(r);
    }
    forward
}

fn filter_json(f: &Filter) -> Value {
    match f {
        Filter::Pointer { pointer, values } => json!({"pointer": pointer, "in": values}),
        Filter::Header { header, values } => json!({"header": header, "in": values}),
    }
}

fn rate_json(r: &Rate) -> Value {
    let mut m = Map::new();
    if let Some(n) = r.per_second {
        m.insert("per_second".into(), json!(n));
    }
    if let Some(n) = r.per_minute {
        m.insert("per_minute".into(), json!(n));
    }
    Value::Object(m)
}

#[cfg(test)]
mod tests;
