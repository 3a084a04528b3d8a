//! The action document (`ACTIONS.md`): reading and validating it when it is written, and the
//! pure steps of a call — the identity check, argument validation against the compiled JSON
//! Schema, the key from the template, the identity fingerprint and the placeholders of the
//! delivery filled from the arguments.
//!
//! Invariants: an action that reads without error can always be called (its schema compiled,
//! each `{name}` of `key` a required string or integer property, each `{{name}}` a declared
//! property, exactly one of `deliver.http` / `deliver.mcp`, the HTTP delivery valid by the
//! effect's own rules); header values are taken out of the document into [`Headers`] and
//! never shown (`Debug` prints their names only). Nothing here does I/O.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

mod deliver;
mod headers;

use crate::api::effect_request::EffectBody;
use crate::error::ApiError;
use crate::input::read_body;
use deliver::placeholders;
pub use deliver::{effect_body, fill, mcp_effect_body, upstream_tool};
pub use headers::Headers;

/// Longest `description`.
pub const MAX_DESCRIPTION: usize = 4000;
/// Longest `title`.
pub const MAX_TITLE: usize = 200;

/// The members of an action document.
const FIELDS: &[&str] = &[
    "title",
    "description",
    "input_schema",
    "key",
    "identity",
    "deliver",
    "approval",
    "result",
];
const HTTP_FIELDS: &[&str] = &[
    "method",
    "url",
    "headers",
    "body",
    "idempotency_header",
    "timeout_ms",
    "success",
    "destination_idempotent",
    "reconcile",
];
const MCP_FIELDS: &[&str] = &["url", "tool", "headers", "timeout_ms"];

/// A tool name: 1–64 of `[A-Za-z0-9_-]`.
pub fn valid_name(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
}

/// `approval`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Approval {
    None,
    Required,
}

/// `result`: what a successful call returns to the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResultMode {
    Response,
    Summary,
}

/// One part of the key template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Arg(String),
}

/// An action, validated.
#[derive(Clone)]
pub struct Action {
    pub name: String,
    /// The document as stored (no header values).
    pub doc: Value,
    pub title: Option<String>,
    pub description: String,
    pub input_schema: Value,
    key: Vec<Part>,
    /// The argument names of `key`, in template order.
    pub key_args: Vec<String>,
    pub identity: Vec<String>,
    pub approval: Approval,
    pub result: ResultMode,
    /// `deliver.http` as written (without header values), or `None` for `deliver.mcp`.
    pub http: Option<Value>,
    pub mcp: Option<Value>,
    validator: Arc<jsonschema::Validator>,
}

impl std::fmt::Debug for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Action").field("name", &self.name).finish()
    }
}

fn invalid(field: &str, msg: impl std::fmt::Display) -> ApiError {
    ApiError::invalid_field(field, format!("`{field}` {msg}"))
}

fn unknown(m: &Map<String, Value>, allowed: &[&str], prefix: &str) -> Result<(), ApiError> {
    match m.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(ApiError::UnknownField {
            field: format!("{prefix}{k}"),
        }),
        None => Ok(()),
    }
}

/// Parses the key template: literal text and `{name}` placeholders.
fn parse_key(t: &str) -> Result<Vec<Part>, ApiError> {
    let mut parts = vec![];
    let mut rest = t;
    while let Some(i) = rest.find('{') {
        if i > 0 {
            parts.push(Part::Text(rest[..i].to_owned()));
        }
        let after = &rest[i + 1..];
        let Some(j) = after.find('}') else {
            return Err(invalid("key", "has a `{` without its `}`"));
        };
        let name = &after[..j];
        if name.is_empty() || name.contains('{') {
            return Err(invalid("key", "has an empty or nested `{…}` placeholder"));
        }
        parts.push(Part::Arg(name.to_owned()));
        rest = &after[j + 1..];
    }
    if rest.contains('}') {
        return Err(invalid("key", "has a `}` without its `{`"));
    }
    if !rest.is_empty() {
        parts.push(Part::Text(rest.to_owned()));
    }
    if !parts.iter().any(|p| matches!(p, Part::Arg(_))) {
        return Err(invalid(
            "key",
            "must name at least one argument (`{order_id}`): a key without one would make \
             every call the same operation",
        ));
    }
    for p in &parts {
        if let Part::Text(s) = p {
            if !s.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
                return Err(invalid("key", "text must be visible ASCII (no spaces)"));
            }
        }
    }
    Ok(parts)
}

/// The JSON types a property schema allows (`type` as a string or a list).
fn prop_types(schema: &Value, name: &str) -> Option<Vec<String>> {
    let p = schema.get("properties")?.get(name)?;
    Some(match p.get("type") {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|x| x.as_str().map(str::to_owned))
            .collect(),
        _ => vec![],
    })
}

fn required_names(schema: &Value) -> Vec<&str> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn opt_text(m: &Map<String, Value>, field: &str, max: usize) -> Result<Option<String>, ApiError> {
    match m.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.chars().count() <= max && !s.contains('\0') => {
            Ok(Some(s.clone()))
        }
        Some(_) => Err(invalid(
            field,
            format!("must be a string of at most {max} characters"),
        )),
    }
}

/// Takes `headers` (object of name → string) out of `m`, checked like an effect's.
fn take_headers(m: &mut Map<String, Value>, field: &str) -> Result<Map<String, Value>, ApiError> {
    match m.shift_remove("headers") {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(h)) => {
            for (k, v) in &h {
                let at = format!("{field}.{k}");
                if axum::http::HeaderName::from_bytes(k.as_bytes()).is_err() {
                    return Err(invalid(&at, "is not a valid header name"));
                }
                match v {
                    // The value may be a credential: the message never repeats it.
                    Value::String(s) if axum::http::HeaderValue::from_str(s).is_ok() => {}
                    _ => return Err(invalid(&at, "must be a string of visible ASCII text")),
                }
            }
            Ok(h)
        }
        Some(_) => Err(invalid(field, "must be an object of header → string")),
    }
}

/// Renames the effect's member paths in an effect validation error to `deliver.http`'s.
fn as_http_error(e: ApiError) -> ApiError {
    renamed_error(
        e,
        "deliver.http",
        &[
            "reconcile.",
            "timeout_ms`",
            "success`",
            "idempotency_header`",
        ],
    )
}

/// Renames the effect's member paths in an effect validation error to those under `to`
/// (`deliver.http`, `deliver.mcp`): `request` and `request.*` become `to` and `to.*`, every
/// other field is put under `to`; in the message, `request`, `request.*` and each of
/// `members` (what follows a member name's opening backtick, such as "timeout_ms" with its
/// closing backtick, or "reconcile.") are renamed the same way.
fn renamed_error(e: ApiError, to: &str, members: &[&str]) -> ApiError {
    let rename = |s: &str| {
        let mut s = s
            .replace("`request.", &format!("`{to}."))
            .replace("`request`", &format!("`{to}`"));
        for m in members {
            s = s.replace(&format!("`{m}"), &format!("`{to}.{m}"));
        }
        s
    };
    let path = |f: &str| {
        if let Some(rest) = f.strip_prefix("request.") {
            format!("{to}.{rest}")
        } else if f == "request" {
            to.to_owned()
        } else {
            format!("{to}.{f}")
        }
    };
    match e {
        ApiError::InvalidField { field, message } => ApiError::InvalidField {
            field: path(&field),
            message: rename(&message),
        },
        ApiError::UnknownField { field } => ApiError::UnknownField {
            field: path(&field),
        },
        other => other,
    }
}

/// Headers of the MCP transport, set by idem on every request to an upstream MCP server.
const MCP_RESERVED_HEADERS: &[&str] = &[
    "accept",
    "content-type",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
];

/// An upstream tool name: 1–128 visible ASCII characters (the names MCP servers use).
fn valid_upstream_tool(s: &str) -> bool {
    (1..=128).contains(&s.len()) && s.bytes().all(|b| (0x21..=0x7e).contains(&b))
}

/// Renames the effect's member paths in an effect validation error to `deliver.mcp`'s.
fn as_mcp_error(e: ApiError) -> ApiError {
    renamed_error(e, "deliver.mcp", &["timeout_ms`"])
}

/// An action read from its document, with its header values apart.
#[derive(Debug)]
pub struct ActionInput {
    pub action: Action,
    pub headers: Headers,
}

impl Action {
    /// Reads and validates an action document (`PUT …/actions/{name}`, the config file).
    pub fn parse(name: &str, v: &Value) -> Result<ActionInput, ApiError> {
        if !valid_name(name) {
            return Err(ApiError::invalid_field(
                "name",
                "an action name is 1-64 characters of A-Z, a-z, 0-9, `_` and `-`",
            ));
        }
        let Value::Object(m) = v else {
            return Err(ApiError::InvalidJson(
                "the request body must be a JSON object".into(),
            ));
        };
        unknown(m, FIELDS, "")?;
        let mut doc = m.clone();
        let title = opt_text(m, "title", MAX_TITLE)?;
        let description = opt_text(m, "description", MAX_DESCRIPTION)?
            .filter(|d| !d.trim().is_empty())
            .ok_or_else(|| {
                invalid(
                    "description",
                    "is required: the agent reads it to decide when to call the tool",
                )
            })?;
        let schema = match m.get("input_schema") {
            Some(s @ Value::Object(_)) => s.clone(),
            _ => {
                return Err(invalid(
                    "input_schema",
                    "is required (a JSON Schema object)",
                ))
            }
        };
        if schema.get("type") != Some(&json!("object")) {
            return Err(invalid(
                "input_schema",
                "must be an object schema (`\"type\": \"object\"`)",
            ));
        }
        if let Err(e) = jsonschema::draft202012::meta::validate(&schema) {
            return Err(invalid(
                "input_schema",
                format!("is not a valid JSON Schema (draft 2020-12): {}", e.masked()),
            ));
        }
        let validator = jsonschema::draft202012::new(&schema)
            .map_err(|e| invalid("input_schema", format!("does not compile: {}", e.masked())))?;
        let template = match m.get("key") {
            Some(Value::String(s)) if !s.is_empty() && s.len() <= 255 => s.clone(),
            _ => {
                return Err(invalid(
                    "key",
                    "is required (a template such as \"{order_id}:followup:v1\")",
                ))
            }
        };
        let key = parse_key(&template)?;
        let required = required_names(&schema);
        let mut key_args = vec![];
        for p in &key {
            if let Part::Arg(a) = p {
                let types = prop_types(&schema, a).unwrap_or_default();
                if !required.contains(&a.as_str())
                    || types.is_empty()
                    || !types.iter().all(|t| t == "string" || t == "integer")
                {
                    return Err(invalid(
                        "key",
                        format!(
                            "names `{a}`, which must be a required property of `input_schema` \
                             of type string or integer"
                        ),
                    ));
                }
                if !key_args.contains(a) {
                    key_args.push(a.clone());
                }
            }
        }
        let identity = match m.get("identity") {
            None | Some(Value::Null) => key_args.clone(),
            Some(Value::Array(a)) if !a.is_empty() => {
                let mut out = vec![];
                for (i, x) in a.iter().enumerate() {
                    let at = format!("identity[{i}]");
                    let Some(n) = x.as_str() else {
                        return Err(invalid(&at, "must be an argument name"));
                    };
                    if prop_types(&schema, n).is_none() {
                        return Err(invalid(
                            &at,
                            format!("names `{n}`, not a property of `input_schema`"),
                        ));
                    }
                    if !out.iter().any(|o: &String| o == n) {
                        out.push(n.to_owned());
                    }
                }
                out
            }
            Some(_) => {
                return Err(invalid(
                    "identity",
                    "must be a non-empty list of argument names",
                ))
            }
        };
        let approval = match m.get("approval") {
            None | Some(Value::Null) => Approval::None,
            Some(Value::String(s)) if s == "none" => Approval::None,
            Some(Value::String(s)) if s == "required" => Approval::Required,
            Some(_) => return Err(invalid("approval", "must be \"none\" or \"required\"")),
        };
        let result = match m.get("result") {
            None | Some(Value::Null) => ResultMode::Response,
            Some(Value::String(s)) if s == "response" => ResultMode::Response,
            Some(Value::String(s)) if s == "summary" => ResultMode::Summary,
            Some(_) => return Err(invalid("result", "must be \"response\" or \"summary\"")),
        };
        let Some(Value::Object(deliver)) = m.get("deliver") else {
            return Err(invalid(
                "deliver",
                "is required: an object with `http` or `mcp`",
            ));
        };
        unknown(deliver, &["http", "mcp"], "deliver.")?;
        let given = |k: &str| deliver.get(k).is_some_and(|v| !v.is_null());
        let mut headers = Headers::default();
        let mut mcp: Option<Value> = None;
        let http = match (given("http"), given("mcp")) {
            (true, false) => {
                let Some(Value::Object(h)) = deliver.get("http") else {
                    return Err(invalid("deliver.http", "must be an object"));
                };
                unknown(h, HTTP_FIELDS, "deliver.http.")?;
                let mut h = h.clone();
                headers.request = take_headers(&mut h, "deliver.http.headers")?;
                if let Some(Value::Object(rc)) = h.get_mut("reconcile") {
                    headers.reconcile = take_headers(rc, "deliver.http.reconcile.headers")?;
                }
                Some(Value::Object(h))
            }
            (false, true) => {
                let Some(Value::Object(h)) = deliver.get("mcp") else {
                    return Err(invalid("deliver.mcp", "must be an object"));
                };
                unknown(h, MCP_FIELDS, "deliver.mcp.")?;
                let mut h = h.clone();
                headers.request = take_headers(&mut h, "deliver.mcp.headers")?;
                for name in headers.request.keys() {
                    let lower = name.to_ascii_lowercase();
                    if MCP_RESERVED_HEADERS.contains(&lower.as_str()) {
                        return Err(invalid(
                            &format!("deliver.mcp.headers.{name}"),
                            "is set by idem itself (the MCP transport's own header)",
                        ));
                    }
                }
                match h.get("tool") {
                    Some(Value::String(t)) if valid_upstream_tool(t) => {}
                    _ => {
                        return Err(invalid(
                            "deliver.mcp.tool",
                            "is required: the upstream tool's name, 1-128 visible ASCII \
                             characters",
                        ))
                    }
                }
                mcp = Some(Value::Object(h));
                None
            }
            _ => {
                return Err(invalid(
                    "deliver",
                    "must have exactly one of `http` and `mcp`",
                ))
            }
        };
        // Every `{{name}}` names a declared argument.
        let mut names = vec![];
        if let Some(h) = &http {
            placeholders(h, &mut names);
        }
        if http.is_some() {
            placeholders(&Value::Object(headers.request.clone()), &mut names);
            placeholders(&Value::Object(headers.reconcile.clone()), &mut names);
        }
        for n in &names {
            if prop_types(&schema, n).is_none() {
                return Err(invalid(
                    "deliver.http",
                    format!("uses `{{{{{n}}}}}`, which is not a property of `input_schema`"),
                ));
            }
        }
        // The delivery must read as an effect, whatever the arguments: checked with sample
        // values in the placeholders.
        if let Some(h) = &http {
            let sample: Map<String, Value> =
                names.iter().map(|n| (n.clone(), json!("x"))).collect();
            let body = effect_body(h, &headers, &sample);
            read_body::<EffectBody>(body)
                .and_then(EffectBody::into_input)
                .map_err(as_http_error)?;
        }
        if let Some(m) = &mcp {
            let body = mcp_effect_body(m, &headers, &Map::new());
            read_body::<EffectBody>(body)
                .and_then(EffectBody::into_input)
                .map_err(as_mcp_error)?;
        }
        // The stored document holds no header value.
        let mut deliver_doc = Map::new();
        if let Some(h) = &http {
            deliver_doc.insert("http".into(), h.clone());
        }
        if let Some(h) = &mcp {
            deliver_doc.insert("mcp".into(), h.clone());
        }
        doc.insert("deliver".into(), Value::Object(deliver_doc));
        Ok(ActionInput {
            action: Action {
                name: name.to_owned(),
                doc: Value::Object(doc),
                title,
                description,
                input_schema: schema,
                key,
                key_args,
                identity,
                approval,
                result,
                http,
                mcp,
                validator: Arc::new(validator),
            },
            headers,
        })
    }

    /// The first key argument that is missing, `null` or `""`.
    pub fn missing_identity(&self, args: &Map<String, Value>) -> Option<&str> {
        self.key_args
            .iter()
            .find(|a| {
                matches!(args.get(*a), None | Some(Value::Null)) || args.get(*a) == Some(&json!(""))
            })
            .map(String::as_str)
    }

    /// The arguments against `input_schema`: `Err((field, message))` naming the first
    /// offending member (its JSON pointer; the root is `arguments`). The message never quotes
    /// the value.
    pub fn check_arguments(&self, args: &Value) -> Result<(), (String, String)> {
        match self.validator.iter_errors(args).next() {
            None => Ok(()),
            Some(e) => {
                let path = e.instance_path().as_str().to_owned();
                let field = if path.is_empty() {
                    "arguments".to_owned()
                } else {
                    path.trim_start_matches('/').replace('/', ".")
                };
                Err((field, e.masked().to_string()))
            }
        }
    }

    /// The key for `args` (already validated): each `{name}` is the argument as written
    /// when it is at most 64 characters of `[A-Za-z0-9_.-]`, else the SHA-256 hex of its
    /// canonical JSON (so e-mail addresses and free text never appear in a key).
    pub fn key_for(&self, args: &Map<String, Value>) -> Result<idem::Key, ApiError> {
        let mut out = String::new();
        for p in &self.key {
            match p {
                Part::Text(t) => out.push_str(t),
                Part::Arg(a) => {
                    let v = args.get(a).cloned().unwrap_or(Value::Null);
                    let plain = idem::derive::plain(&v);
                    match plain {
                        Some(s) => out.push_str(&s),
                        None => {
                            let canon = idem::fingerprint::canonical_json(&v)
                                .map_err(|e| ApiError::invalid_field(a, e.to_string()))?;
                            out.push_str(&hex(&Sha256::digest(canon.as_bytes())));
                        }
                    }
                }
            }
        }
        idem::Key::try_from(out.as_str()).map_err(|e| {
            ApiError::invalid_field("key", format!("the key built from the arguments: {e}"))
        })
    }

    /// The identity of a call: `{name: value}` of the `identity` arguments (null when
    /// absent), whose RFC 8785 SHA-256 is the record's fingerprint.
    pub fn identity_of(&self, args: &Map<String, Value>) -> Value {
        let m: BTreeMap<&str, Value> = self
            .identity
            .iter()
            .map(|n| (n.as_str(), args.get(n).cloned().unwrap_or(Value::Null)))
            .collect();
        json!(m)
    }

    /// The tool as `tools/list` shows it.
    pub fn tool(&self) -> Value {
        let mut t = json!({
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
            "annotations": {
                "destructiveHint": true,
                "idempotentHint": true,
                "openWorldHint": true,
            },
        });
        if let Some(title) = &self.title {
            t["title"] = json!(title);
        }
        t
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests;
