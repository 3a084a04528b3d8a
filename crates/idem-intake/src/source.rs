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

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::fanout::{Filter, Rate, DEFAULT, MAX_DESTINATIONS, MAX_FILTER_VALUES};
use crate::ids::EventIdRule;
use crate::provider::{HmacAlgorithm, HmacEncoding, HmacScheme, HmacSigned, Provider};

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
        created_at: Value,
        updated_at: Value,
    ) -> Value {
        let read = |name: &str, f: &Forward| {
            json!({
                "url": f.url,
                "timeout_ms": f.timeout_ms,
                "concurrency": f.concurrency,
                "headers": self.headers_of(f),
                "retry": retry_json(&f.retry),
                "secret_hint": forward_hints.get(name),
                "filter": f.filter.as_ref().map(filter_json),
                "rate": f.rate.as_ref().map(rate_json),
            })
        };
        let forwards: Map<String, Value> = self
            .forwards
            .iter()
            .map(|(n, f)| (n.clone(), read(n, f)))
            .collect();
        let event_id = self
            .event_id
            .clone()
            .or_else(|| default_event_id(self.provider));
        json!({
            "source": self.name,
            "provider": self.provider.as_str(),
            "namespace": self.namespace(),
            "tolerance_ms": self.tolerance_ms,
            "event_id": event_id.as_ref().map(rule_json),
            "split": self.split(),
            "forward": self.forward.as_ref().map(|f| read(DEFAULT, f)),
            "forwards": forwards,
            "hmac": self.hmac.as_ref().map(hmac_json),
            "public_url": self.public_url,
            "max_body_bytes": self.max_body_bytes,
            "secret_hints": hints,
            "created_at": created_at,
            "updated_at": updated_at,
        })
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
struct Obj<'a> {
    path: String,
    map: &'a Map<String, Value>,
}

impl<'a> Obj<'a> {
    fn new(path: &str, v: &'a Value, known: &[&str]) -> Result<Obj<'a>, SourceError> {
        let Value::Object(map) = v else {
            return Err(SourceError::invalid(path, "must be a JSON object"));
        };
        let o = Obj {
            path: path.to_owned(),
            map,
        };
        let mut names: Vec<&String> = map.keys().collect();
        names.sort();
        if let Some(k) = names.into_iter().find(|k| !known.contains(&k.as_str())) {
            return Err(SourceError::Unknown { field: o.name(k) });
        }
        Ok(o)
    }
    fn name(&self, member: &str) -> String {
        if self.path.is_empty() {
            member.to_owned()
        } else {
            format!("{}.{member}", self.path)
        }
    }
    /// A member that is present and not null.
    fn get(&self, member: &str) -> Option<&'a Value> {
        self.map.get(member).filter(|v| !v.is_null())
    }
    fn bad(&self, member: &str, message: &str) -> SourceError {
        SourceError::invalid(self.name(member), message)
    }
    fn string(&self, member: &str, max: usize) -> Result<Option<String>, SourceError> {
        match self.get(member) {
            None => Ok(None),
            Some(Value::String(s)) if s.chars().count() <= max && !s.contains('\0') => {
                Ok(Some(s.clone()))
            }
            Some(Value::String(_)) => {
                Err(self.bad(member, &format!("must be at most {max} characters, no NUL")))
            }
            Some(_) => Err(self.bad(member, "must be a string")),
        }
    }
    fn int(&self, member: &str, min: i64, max: i64) -> Result<Option<i64>, SourceError> {
        match self.get(member) {
            None => Ok(None),
            Some(v) => match v.as_i64() {
                Some(n) if (min..=max).contains(&n) => Ok(Some(n)),
                _ => Err(self.bad(member, &format!("must be an integer from {min} to {max}"))),
            },
        }
    }
}

fn header_name(field: &str, s: &str) -> Result<String, SourceError> {
    http::HeaderName::from_bytes(s.as_bytes())
        .map(|_| s.to_owned())
        .map_err(|_| SourceError::invalid(field, "is not a valid HTTP header name"))
}

fn pointer(field: &str, s: &str) -> Result<String, SourceError> {
    match s {
        "" | "/" => Ok(String::new()),
        p if crate::ids::valid_pointer(p) => Ok(p.to_owned()),
        _ => Err(SourceError::invalid(
            field,
            "must be a JSON pointer (RFC 6901): \"\" or starting with \"/\", with \"~\" only \
             as \"~0\" or \"~1\"",
        )),
    }
}

fn http_url(field: &str, s: &str) -> Result<String, SourceError> {
    let u = url::Url::parse(s)
        .map_err(|e| SourceError::invalid(field, format!("is not an absolute URL ({e})")))?;
    if !matches!(u.scheme(), "http" | "https") || u.host_str().is_none_or(str::is_empty) {
        return Err(SourceError::invalid(
            field,
            "must be an http:// or https:// URL with a host",
        ));
    }
    if !u.username().is_empty() || u.password().is_some() {
        return Err(SourceError::invalid(
            field,
            "must not carry credentials (user:password@): use forward.secret or forward.headers",
        ));
    }
    Ok(s.to_owned())
}

fn read_secrets(v: &Value) -> Result<Vec<String>, SourceError> {
    let Value::Array(items) = v else {
        return Err(SourceError::invalid(
            "secrets",
            "must be an array of 1 to 4 secrets",
        ));
    };
    if items.is_empty() || items.len() > MAX_SECRETS {
        return Err(SourceError::invalid(
            "secrets",
            "must hold 1 to 4 secrets (a source without a secret cannot exist)",
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, s)| match s {
            Value::String(s)
                if !s.is_empty()
                    && s.chars().count() <= MAX_SECRET_LEN
                    && !s.chars().any(char::is_control) =>
            {
                Ok(s.clone())
            }
            _ => Err(SourceError::invalid(
                format!("secrets[{i}]"),
                format!("must be a non-empty string of at most {MAX_SECRET_LEN} characters without control characters"),
            )),
        })
        .collect()
}

/// Secrets the provider's scheme can use (a Standard Webhooks secret must decode).
fn usable(provider: Provider, secrets: Vec<String>) -> Result<Vec<String>, SourceError> {
    match secrets
        .iter()
        .position(|s| !crate::verify::secret_usable(provider, s))
    {
        Some(i) => Err(SourceError::invalid(
            format!("secrets[{i}]"),
            "is not a secret this provider signs with (standard_webhooks: whsec_ + base64)",
        )),
        None => Ok(secrets),
    }
}

fn read_forward_secret(field: &str, v: &Value) -> Result<Option<String>, SourceError> {
    match v {
        Value::Null => Ok(None),
        Value::String(s) => idem_core::AlertSecret::parse(s)
            .map(|_| Some(s.clone()))
            .map_err(|why| SourceError::invalid(field, why)),
        _ => Err(SourceError::invalid(
            field,
            "must be a whsec_ string or null",
        )),
    }
}

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

const TOP: [&str; 12] = [
    "provider",
    "secrets",
    "namespace",
    "tolerance_ms",
    "event_id",
    "split",
    "forward",
    "forwards",
    "hmac",
    "public_url",
    "max_body_bytes",
    // Accepted and ignored only when it names this source (a read shape sent back).
    "source",
];

fn parse_doc(name: &str, doc: &Value, need_secrets: bool) -> Result<SourceInput, SourceError> {
    let o = Obj::new("", doc, &TOP)?;
    if let Some(s) = o.get("source") {
        if s.as_str() != Some(name) {
            return Err(o.bad("source", "must be the source name of the path, or absent"));
        }
    }
    let provider = match o.get("provider") {
        None => return Err(o.bad("provider", "is required")),
        Some(Value::String(s)) => Provider::parse(s).ok_or_else(|| {
            o.bad(
                "provider",
                "must be one of stripe, standard_webhooks, github, shopify, slack, hubspot, \
                 typeform, twilio, hmac",
            )
        })?,
        Some(_) => return Err(o.bad("provider", "must be a string")),
    };
    let secrets = match o.map.get("secrets") {
        Some(v) => Some(usable(provider, read_secrets(v)?)?),
        None if need_secrets => {
            return Err(o.bad(
                "secrets",
                "is required: a source without a signing secret cannot be created",
            ))
        }
        None => None,
    };
    let namespace = match o.string("namespace", 255)? {
        None => None,
        Some(ns) => {
            idem_core::Namespace::try_from(ns.as_str())
                .map_err(|e| o.bad("namespace", &e.to_string()))?;
            Some(ns)
        }
    };
    let tolerance_ms = o
        .int("tolerance_ms", 0, 7 * 86_400_000)?
        .unwrap_or(DEFAULT_TOLERANCE_MS);
    let event_id = match o.get("event_id") {
        None => None,
        Some(v) => {
            let e = Obj::new("event_id", v, &["header", "pointer"])?;
            match (e.string("header", 200)?, e.string("pointer", 1000)?) {
                (Some(h), None) => Some(EventIdRule::Header(header_name("event_id.header", &h)?)),
                (None, Some(p)) => Some(EventIdRule::Pointer(pointer("event_id.pointer", &p)?)),
                _ => return Err(o.bad("event_id", "must have exactly one of header or pointer")),
            }
        }
    };
    if event_id.is_none() && provider == Provider::Hmac {
        return Err(o.bad("event_id", "is required for provider hmac"));
    }
    let split = match o.string("split", 1000)? {
        None => None,
        Some(s) => Some(pointer("split", &s)?),
    };
    let (mut forward, mut forward_secret) = match o.get("forward") {
        None => (None, None),
        Some(v) => {
            let (f, s) = parse_forward("forward", v)?;
            (Some(f), s)
        }
    };
    let mut forwards = BTreeMap::new();
    let mut destination_secrets = BTreeMap::new();
    if let Some(v) = o.get("forwards") {
        let Value::Object(named) = v else {
            return Err(o.bad("forwards", "must be a JSON object of destinations by name"));
        };
        if named.len() > MAX_DESTINATIONS {
            return Err(o.bad(
                "forwards",
                &format!("must name at most {MAX_DESTINATIONS} destinations"),
            ));
        }
        let mut names: Vec<&String> = named.keys().collect();
        names.sort();
        for name in names {
            let path = format!("forwards.{name}");
            idem_core::Namespace::try_from(name.as_str()).map_err(|e| {
                SourceError::invalid(
                    path.clone(),
                    format!("is not a destination name (the namespace syntax): {e}"),
                )
            })?;
            let (f, s) = parse_forward(&path, &named[name])?;
            if name == DEFAULT {
                if forward.is_some() {
                    return Err(SourceError::invalid(
                        path,
                        "is the destination `forward`: give one of forward or forwards.default",
                    ));
                }
                forward = Some(f);
                forward_secret = s;
            } else {
                if let Some(s) = s {
                    destination_secrets.insert(name.clone(), s);
                }
                forwards.insert(name.clone(), f);
            }
        }
    }
    if forward.is_none() && forwards.is_empty() {
        return Err(o.bad(
            "forward",
            "is required: forward or forwards (at least one destination: where events are \
             delivered)",
        ));
    }
    let hmac = match o.get("hmac") {
        None if provider == Provider::Hmac => {
            return Err(o.bad("hmac", "is required for provider hmac"))
        }
        None => None,
        Some(_) if provider != Provider::Hmac => {
            return Err(o.bad("hmac", "is only for provider hmac"))
        }
        Some(v) => Some(parse_hmac(v)?),
    };
    let public_url =
        match o.string("public_url", MAX_URL)? {
            None if provider.needs_public_url() => return Err(o.bad(
                "public_url",
                "is required for this provider: the full URL the provider calls, as it signs it",
            )),
            None => None,
            Some(u) => Some(http_url("public_url", &u)?),
        };
    let max_body_bytes = o
        .int("max_body_bytes", 1, MAX_MAX_BODY_BYTES as i64)?
        .map_or(DEFAULT_MAX_BODY_BYTES, |n| n as usize);
    Ok(SourceInput {
        source: Source {
            name: name.to_owned(),
            provider,
            namespace,
            tolerance_ms,
            event_id,
            split,
            forward,
            forwards,
            hmac,
            public_url,
            max_body_bytes,
        },
        secrets: SourceSecrets {
            secrets,
            forward_secret,
            destination_secrets,
        },
    })
}

fn parse_forward(path: &str, v: &Value) -> Result<(Forward, Option<Option<String>>), SourceError> {
    let o = Obj::new(
        path,
        v,
        &[
            "url",
            "timeout_ms",
            "concurrency",
            "headers",
            "secret",
            "retry",
            "filter",
            "rate",
        ],
    )?;
    let url = o
        .string("url", MAX_URL)?
        .ok_or_else(|| o.bad("url", "is required"))?;
    let url = http_url(&o.name("url"), &url)?;
    let timeout_ms = o
        .int("timeout_ms", 1, 300_000)?
        .unwrap_or(DEFAULT_TIMEOUT_MS);
    let concurrency = o
        .int("concurrency", 1, 256)?
        .map_or(DEFAULT_CONCURRENCY, |n| n as u32);
    let headers = match o.get("headers") {
        None => None,
        Some(Value::Array(items)) if items.len() <= MAX_FORWARD_HEADERS => Some(
            items
                .iter()
                .enumerate()
                .map(|(i, h)| {
                    let field = format!("{path}.headers[{i}]");
                    match h {
                        Value::String(s) => header_name(&field, s),
                        _ => Err(SourceError::invalid(field, "must be a header name")),
                    }
                })
                .collect::<Result<Vec<_>, _>>()?,
        ),
        Some(_) => {
            return Err(o.bad(
                "headers",
                &format!("must be an array of at most {MAX_FORWARD_HEADERS} header names"),
            ))
        }
    };
    let secret = match o.map.get("secret") {
        None => None,
        Some(v) => Some(read_forward_secret(&o.name("secret"), v)?),
    };
    let filter = match o.get("filter") {
        None => None,
        Some(v) => Some(parse_filter(&o.name("filter"), v)?),
    };
    let rate = match o.get("rate") {
        None => None,
        Some(v) => {
            let r = Obj::new(&o.name("rate"), v, &["per_second", "per_minute"])?;
            let rate = Rate {
                per_second: r.int("per_second", 1, 10_000)?.map(|n| n as u32),
                per_minute: r.int("per_minute", 1, 600_000)?.map(|n| n as u32),
            };
            if rate.per_second.is_none() && rate.per_minute.is_none() {
                return Err(o.bad("rate", "must set per_second, per_minute or both"));
            }
            Some(rate)
        }
    };
    let retry = match o.get("retry") {
        None => DEFAULT_RETRY,
        Some(v) => {
            let r = Obj::new(
                &o.name("retry"),
                v,
                &["max_attempts", "base_ms", "max_ms", "window_ms"],
            )?;
            let d = DEFAULT_RETRY;
            let retry = Retry {
                max_attempts: r
                    .int("max_attempts", 1, 1000)?
                    .map_or(d.max_attempts, |n| n as u32),
                base_ms: r.int("base_ms", 1, 86_400_000)?.unwrap_or(d.base_ms),
                max_ms: r.int("max_ms", 1, 7 * 86_400_000)?.unwrap_or(d.max_ms),
                window_ms: r
                    .int("window_ms", 1, 30 * 86_400_000)?
                    .unwrap_or(d.window_ms),
            };
            if retry.max_ms < retry.base_ms {
                return Err(r.bad("max_ms", "must be at least base_ms"));
            }
            retry
        }
    };
    Ok((
        Forward {
            url,
            timeout_ms,
            concurrency,
            headers,
            retry,
            filter,
            rate,
        },
        secret,
    ))
}

fn parse_filter(path: &str, v: &Value) -> Result<Filter, SourceError> {
    let o = Obj::new(path, v, &["pointer", "header", "in"])?;
    let values = match o.get("in") {
        Some(Value::Array(items)) if !items.is_empty() && items.len() <= MAX_FILTER_VALUES => items,
        _ => {
            return Err(o.bad(
                "in",
                &format!("is required: an array of 1 to {MAX_FILTER_VALUES} values"),
            ))
        }
    };
    match (o.string("pointer", 1000)?, o.string("header", 200)?) {
        (Some(p), None) => {
            let pointer = pointer(&o.name("pointer"), &p)?;
            Ok(Filter::Pointer {
                pointer,
                values: values.clone(),
            })
        }
        (None, Some(h)) => {
            let header = header_name(&o.name("header"), &h)?.to_ascii_lowercase();
            let values = values
                .iter()
                .enumerate()
                .map(|(i, v)| match v {
                    Value::String(s) => Ok(s.clone()),
                    _ => Err(SourceError::invalid(
                        format!("{path}.in[{i}]"),
                        "must be a string (header values are text)",
                    )),
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Filter::Header { header, values })
        }
        _ => Err(SourceError::invalid(
            path,
            "must have exactly one of pointer or header",
        )),
    }
}

fn parse_hmac(v: &Value) -> Result<HmacScheme, SourceError> {
    let o = Obj::new(
        "hmac",
        v,
        &[
            "header",
            "algorithm",
            "encoding",
            "prefix",
            "timestamp_header",
            "signed",
        ],
    )?;
    let header = o
        .string("header", 200)?
        .ok_or_else(|| o.bad("header", "is required"))?;
    let header = header_name("hmac.header", &header)?;
    let algorithm = match o.string("algorithm", 20)?.as_deref() {
        Some("sha1") => HmacAlgorithm::Sha1,
        Some("sha256") => HmacAlgorithm::Sha256,
        Some("sha512") => HmacAlgorithm::Sha512,
        _ => return Err(o.bad("algorithm", "must be sha1, sha256 or sha512")),
    };
    let encoding = match o.string("encoding", 20)?.as_deref() {
        Some("hex") => HmacEncoding::Hex,
        Some("base64") => HmacEncoding::Base64,
        _ => return Err(o.bad("encoding", "must be hex or base64")),
    };
    let prefix = o.string("prefix", 100)?;
    let timestamp_header = match o.string("timestamp_header", 200)? {
        None => None,
        Some(h) => Some(header_name("hmac.timestamp_header", &h)?),
    };
    let signed = match o.string("signed", 20)?.as_deref() {
        None | Some("body") => HmacSigned::Body,
        Some("timestamp.body") => HmacSigned::TimestampBody,
        Some(_) => return Err(o.bad("signed", "must be \"body\" or \"timestamp.body\"")),
    };
    if signed == HmacSigned::TimestampBody && timestamp_header.is_none() {
        return Err(o.bad(
            "timestamp_header",
            "is required when signed is \"timestamp.body\"",
        ));
    }
    Ok(HmacScheme {
        header,
        algorithm,
        encoding,
        prefix,
        timestamp_header,
        signed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FWD: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    fn stripe() -> Value {
        json!({"provider": "stripe", "secrets": ["whsec_abc123456789"],
               "forward": {"url": "http://127.0.0.1:5678/webhook/x"}})
    }

    fn fwd(s: &Source) -> &Forward {
        s.forward.as_ref().expect("forward")
    }

    fn err(doc: Value) -> SourceError {
        SourceInput::parse("pay", &doc).expect_err("refused")
    }

    #[test]
    fn defaults_are_filled_in() {
        let i = SourceInput::parse("pay", &stripe()).expect("valid");
        let s = &i.source;
        assert_eq!(s.namespace(), "pay");
        assert_eq!(s.tolerance_ms, 300_000);
        assert_eq!(fwd(s).timeout_ms, 10_000);
        assert_eq!(fwd(s).concurrency, 4);
        assert_eq!(fwd(s).retry, DEFAULT_RETRY);
        assert_eq!(s.max_body_bytes, 1 << 20);
        assert_eq!(s.split(), None);
        assert_eq!(s.forward_headers(), ["Stripe-Signature"]);
        let read = s.read_shape(&["6789".into()], &BTreeMap::new(), json!(null), json!(null));
        assert_eq!(read["event_id"], json!({"pointer": "/id"}));
        assert_eq!(read["secret_hints"], json!(["6789"]));
        assert_eq!(read["forward"]["secret_hint"], json!(null));
        assert!(!read.to_string().contains("abc123456789"));
    }

    #[test]
    fn the_stored_form_reads_back_and_holds_no_secret() {
        let mut doc = stripe();
        doc["forward"]["secret"] = json!(FWD);
        doc["event_id"] = json!({"header": "X-Id"});
        let i = SourceInput::parse("pay", &doc).expect("valid");
        let stored = i.source.to_stored();
        assert!(!stored.to_string().contains("whsec"), "{stored}");
        assert_eq!(Source::load("pay", &stored).expect("load"), i.source);
        assert_eq!(i.secrets.forward_secret, Some(Some(FWD.into())));
        assert!(!format!("{:?}", i.secrets).contains("whsec"));
    }

    #[test]
    fn unknown_and_invalid_fields_are_named() {
        let mut d = stripe();
        d["nope"] = json!(1);
        assert_eq!(
            err(d),
            SourceError::Unknown {
                field: "nope".into()
            }
        );
        let mut d = stripe();
        d["forward"]["retry"] = json!({"tries": 3});
        assert_eq!(err(d).field(), "forward.retry.tries");
        let mut d = stripe();
        d["provider"] = json!("paypal");
        assert_eq!(err(d).field(), "provider");
        let mut d = stripe();
        d["secrets"] = json!([]);
        assert_eq!(err(d).field(), "secrets");
        let mut d = stripe();
        d["secrets"] = json!(["a", "b", "c", "d", "e"]);
        assert_eq!(err(d).field(), "secrets");
        let mut d = stripe();
        d["secrets"] = json!(["ok", 5]);
        assert_eq!(err(d).field(), "secrets[1]");
        let mut d = stripe();
        d.as_object_mut().expect("obj").remove("secrets");
        assert_eq!(err(d).field(), "secrets");
        let mut d = stripe();
        d["forward"]["url"] = json!("ftp://x/");
        assert_eq!(err(d).field(), "forward.url");
        let mut d = stripe();
        d["forward"]["secret"] = json!("plain");
        let e = err(d);
        assert_eq!(e.field(), "forward.secret");
        assert!(!e.to_string().contains("plain"), "{e}");
        let mut d = stripe();
        d["split"] = json!("items");
        assert_eq!(err(d).field(), "split");
        // A `~` that is not `~0` or `~1` names nothing (RFC 6901): refused when written, not
        // found to hold every event later.
        for (field, bad) in [("split", "/items~2"), ("event_id.pointer", "/id~")] {
            let mut d = stripe();
            if field == "split" {
                d["split"] = json!(bad);
            } else {
                d["event_id"] = json!({"pointer": bad});
            }
            assert_eq!(err(d).field(), field, "{bad}");
        }
        let mut d = stripe();
        d["event_id"] = json!({"header": "X", "pointer": "/id"});
        assert_eq!(err(d).field(), "event_id");
        let mut d = stripe();
        d["hmac"] = json!({"header": "X"});
        assert_eq!(err(d).field(), "hmac");
        let mut d = stripe();
        d["forward"]["retry"] = json!({"base_ms": 10, "max_ms": 5});
        assert_eq!(err(d).field(), "forward.retry.max_ms");
        let mut d = stripe();
        d["tolerance_ms"] = json!("5m");
        assert_eq!(err(d).field(), "tolerance_ms");
    }

    #[test]
    fn providers_that_sign_the_url_need_public_url_and_hmac_needs_its_scheme() {
        for p in ["twilio", "hubspot"] {
            let mut d = stripe();
            d["provider"] = json!(p);
            assert_eq!(err(d.clone()).field(), "public_url");
            d["public_url"] = json!("https://hooks.example.com/in/pay");
            let i = SourceInput::parse("pay", &d).expect("valid");
            if p == "hubspot" {
                assert_eq!(i.source.split(), Some(""));
            }
        }
        let mut d = stripe();
        d["provider"] = json!("hmac");
        d["event_id"] = json!({"pointer": "/id"});
        assert_eq!(err(d.clone()).field(), "hmac");
        d["hmac"] = json!({"header": "X-Sig", "algorithm": "sha256", "encoding": "hex",
                           "signed": "timestamp.body"});
        assert_eq!(err(d.clone()).field(), "hmac.timestamp_header");
        d["hmac"]["timestamp_header"] = json!("X-Ts");
        let i = SourceInput::parse("pay", &d).expect("valid");
        assert_eq!(
            i.source.hmac.expect("hmac").signed,
            HmacSigned::TimestampBody
        );
        d.as_object_mut().expect("obj").remove("event_id");
        assert_eq!(err(d).field(), "event_id");
    }

    #[test]
    fn patch_merges_recursively_and_completes_retry() {
        let mut d = stripe();
        d["forward"]["retry"] = json!({"max_attempts": 3, "base_ms": 10});
        d["forward"]["concurrency"] = json!(2);
        let s = SourceInput::parse("pay", &d).expect("valid").source;
        assert_eq!(fwd(&s).retry.max_ms, DEFAULT_RETRY.max_ms);
        let p = s
            .patch(&json!({"forward": {"retry": {"max_attempts": 5}}, "tolerance_ms": 1000}))
            .expect("patch");
        assert_eq!(fwd(&p.source).retry.max_attempts, 5);
        assert_eq!(fwd(&p.source).retry.base_ms, 10);
        assert_eq!(fwd(&p.source).concurrency, 2);
        assert_eq!(p.source.tolerance_ms, 1000);
        assert_eq!(p.secrets, SourceSecrets::default());
        let p = s
            .patch(&json!({"secrets": ["new-secret-1"], "forward": {"secret": FWD}}))
            .expect("patch");
        assert_eq!(p.secrets.secrets, Some(vec!["new-secret-1".to_owned()]));
        assert_eq!(p.secrets.forward_secret, Some(Some(FWD.into())));
        let p = s
            .patch(&json!({"forward": {"secret": null}}))
            .expect("patch");
        assert_eq!(p.secrets.forward_secret, Some(None));
        let p = s.patch(&json!({"tolerance_ms": null})).expect("patch");
        assert_eq!(p.source.tolerance_ms, DEFAULT_TOLERANCE_MS);
        assert_eq!(
            s.patch(&json!({"forward": {"bogus": 1}}))
                .expect_err("unknown")
                .field(),
            "forward.bogus"
        );
        assert_eq!(
            s.patch(&json!({"secrets": []})).expect_err("empty").field(),
            "secrets"
        );
    }

    #[test]
    fn a_read_shape_sent_back_names_its_own_source_only() {
        let mut d = stripe();
        d["source"] = json!("pay");
        assert!(SourceInput::parse("pay", &d).is_ok());
        d["source"] = json!("other");
        assert_eq!(err(d).field(), "source");
    }

    fn fanout() -> Value {
        json!({"provider": "stripe", "secrets": ["whsec_abc123456789"],
               "forwards": {
                   "crm": {"url": "http://127.0.0.1:5678/webhook/crm"},
                   "receipt": {"url": "http://127.0.0.1:5678/webhook/receipt",
                               "filter": {"pointer": "/type", "in": ["invoice.paid"]},
                               "secret": FWD},
                   "slack": {"url": "http://127.0.0.1:5678/webhook/slack",
                             "filter": {"header": "X-Mode", "in": ["live"]},
                             "rate": {"per_second": 2}}}})
    }

    #[test]
    fn named_destinations_parse_store_and_read_back() {
        let i = SourceInput::parse("pay", &fanout()).expect("valid");
        let s = &i.source;
        assert!(s.forward.is_none());
        let names: Vec<&str> = s.destinations().iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["crm", "receipt", "slack"]);
        assert_eq!(
            s.destination("slack").and_then(|f| f.rate),
            Some(Rate {
                per_second: Some(2),
                per_minute: None
            })
        );
        assert_eq!(
            i.secrets.destination_secrets.get("receipt"),
            Some(&Some(FWD.to_owned()))
        );
        let stored = s.to_stored();
        assert!(!stored.to_string().contains("whsec"), "{stored}");
        assert_eq!(&Source::load("pay", &stored).expect("load"), s);
        let hints = BTreeMap::from([("receipt".to_owned(), "aSw".to_owned())]);
        let read = s.read_shape(&[], &hints, json!(null), json!(null));
        assert_eq!(read["forward"], json!(null));
        assert_eq!(read["forwards"]["receipt"]["secret_hint"], json!("aSw"));
        assert_eq!(read["forwards"]["crm"]["secret_hint"], json!(null));
        assert_eq!(
            read["forwards"]["slack"]["filter"],
            json!({"header": "x-mode", "in": ["live"]})
        );
        assert_eq!(read["forwards"]["slack"]["rate"], json!({"per_second": 2}));
        // `forward` beside `forwards` is the destination default, listed first.
        let mut d = fanout();
        d["forward"] = json!({"url": "http://127.0.0.1:5678/webhook/all"});
        let s = SourceInput::parse("pay", &d).expect("valid").source;
        assert_eq!(s.destinations()[0].0, "default");
        // `forwards.default` is the same destination.
        let mut d = fanout();
        d["forwards"]["default"] = json!({"url": "http://127.0.0.1:5678/webhook/all"});
        let s2 = SourceInput::parse("pay", &d).expect("valid").source;
        assert_eq!(s2, s);
    }

    #[test]
    fn bad_destinations_are_named() {
        let mut d = stripe();
        d.as_object_mut().expect("obj").remove("forward");
        assert_eq!(err(d.clone()).field(), "forward");
        d["forwards"] = json!({});
        assert_eq!(err(d).field(), "forward");
        let mut d = fanout();
        d["forwards"]["bad name!"] = json!({"url": "http://x/"});
        assert_eq!(err(d).field(), "forwards.bad name!");
        let mut d = fanout();
        d["forwards"]["crm"]["url"] = json!("ftp://x/");
        assert_eq!(err(d).field(), "forwards.crm.url");
        let mut d = fanout();
        d["forwards"]["crm"]["filter"] = json!({"pointer": "/type"});
        assert_eq!(err(d).field(), "forwards.crm.filter.in");
        let mut d = fanout();
        d["forwards"]["crm"]["filter"] = json!({"pointer": "/t", "header": "X", "in": [1]});
        assert_eq!(err(d).field(), "forwards.crm.filter");
        let mut d = fanout();
        d["forwards"]["crm"]["filter"] = json!({"header": "X", "in": [1]});
        assert_eq!(err(d).field(), "forwards.crm.filter.in[0]");
        let mut d = fanout();
        d["forwards"]["crm"]["rate"] = json!({});
        assert_eq!(err(d).field(), "forwards.crm.rate");
        let mut d = fanout();
        d["forwards"]["crm"]["rate"] = json!({"per_second": 0});
        assert_eq!(err(d).field(), "forwards.crm.rate.per_second");
        let mut d = fanout();
        d["forwards"]["crm"]["secret"] = json!("plain-text-secret");
        let e = err(d);
        assert_eq!(e.field(), "forwards.crm.secret");
        assert!(!e.to_string().contains("plain-text"), "{e}");
        let mut d = fanout();
        d["forwards"]["crm"]["bogus"] = json!(1);
        assert_eq!(err(d).field(), "forwards.crm.bogus");
        let mut d = fanout();
        d["forward"] = json!({"url": "http://x/"});
        d["forwards"]["default"] = json!({"url": "http://y/"});
        assert_eq!(err(d).field(), "forwards.default");
        let mut d = fanout();
        let many: Map<String, Value> = (0..17)
            .map(|i| (format!("d{i}"), json!({"url": "http://x/"})))
            .collect();
        d["forwards"] = Value::Object(many);
        assert_eq!(err(d).field(), "forwards");
    }

    #[test]
    fn patch_adds_changes_and_removes_destinations() {
        let s = SourceInput::parse("pay", &stripe()).expect("valid").source;
        let p = s
            .patch(&json!({"forwards": {"crm": {"url": "http://127.0.0.1:1/crm", "secret": FWD}}}))
            .expect("patch");
        assert!(p.source.forward.is_some());
        assert!(p.source.forwards.contains_key("crm"));
        assert_eq!(
            p.secrets.destination_secrets.get("crm"),
            Some(&Some(FWD.to_owned()))
        );
        let s = p.source;
        let p = s
            .patch(&json!({"forwards": {"crm": {"timeout_ms": 500}}}))
            .expect("patch");
        assert_eq!(p.source.forwards["crm"].timeout_ms, 500);
        assert_eq!(p.source.forwards["crm"].url, "http://127.0.0.1:1/crm");
        let p = s.patch(&json!({"forwards": {"crm": null}})).expect("patch");
        assert!(p.source.forwards.is_empty());
        // The last destination cannot go.
        assert_eq!(
            p.source
                .patch(&json!({"forward": null}))
                .expect_err("none left")
                .field(),
            "forward"
        );
    }
}
