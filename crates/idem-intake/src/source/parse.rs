//! Reading a source document: the members of each object checked against the ones it may
//! have (an unknown one is [`SourceError::Unknown`]), each value validated where it is read
//! (URLs, header names, JSON pointers, secrets, `forward`/`forwards`, filters, rates, `hmac`),
//! defaults filled in, the secrets handed out apart from the [`Source`].
//!
//! Errors name the field; they must never quote the value of a secret member.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::{
    Forward, Retry, Source, SourceError, SourceInput, SourceSecrets, DEFAULT_CONCURRENCY,
    DEFAULT_MAX_BODY_BYTES, DEFAULT_RETRY, DEFAULT_TIMEOUT_MS, DEFAULT_TOLERANCE_MS,
    MAX_FORWARD_HEADERS, MAX_MAX_BODY_BYTES, MAX_SECRETS, MAX_SECRET_LEN, MAX_URL,
};
use crate::fanout::{Filter, Rate, DEFAULT, MAX_DESTINATIONS, MAX_FILTER_VALUES};
use crate::ids::EventIdRule;
use crate::provider::{HmacAlgorithm, HmacEncoding, HmacScheme, HmacSigned, Provider};

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

fn forwarded_header(field: &str, s: &str) -> Result<String, SourceError> {
    let name = header_name(field, s)?;
    // The framing and connection headers describe the inbound message and connection.
    if idem_core::egress::CONNECTION_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
        return Err(SourceError::invalid(
            field,
            "is set by the delivery itself and cannot be forwarded",
        ));
    }
    Ok(name)
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

pub(super) fn read_secrets(v: &Value) -> Result<Vec<String>, SourceError> {
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
pub(super) fn usable(provider: Provider, secrets: Vec<String>) -> Result<Vec<String>, SourceError> {
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

pub(super) fn read_forward_secret(field: &str, v: &Value) -> Result<Option<String>, SourceError> {
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

pub(super) fn parse_doc(
    name: &str,
    doc: &Value,
    need_secrets: bool,
) -> Result<SourceInput, SourceError> {
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
                        Value::String(s) => forwarded_header(&field, s),
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
