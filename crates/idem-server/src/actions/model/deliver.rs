//! The delivery of an action call as an effect body: the `{{name}}` placeholders filled from
//! the arguments (percent-encoded in URLs), the header values put back, for HTTP and MCP
//! deliveries alike.
//!
//! Pure functions over values already validated when the action was read: it must never do
//! I/O, validate a document, or keep a header value beyond the body it builds.

use serde_json::{json, Map, Value};

use super::headers::Headers;

/// The names of the `{{name}}` placeholders in every string of `v`.
pub(super) fn placeholders(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => {
            let mut rest = s.as_str();
            while let Some(i) = rest.find("{{") {
                let after = &rest[i + 2..];
                match after.find("}}") {
                    Some(j) => {
                        out.push(after[..j].trim().to_owned());
                        rest = &after[j + 2..];
                    }
                    None => break,
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| placeholders(x, out)),
        Value::Object(m) => m.values().for_each(|x| placeholders(x, out)),
        _ => {}
    }
}

/// The text of an argument inside a longer string.
fn text_of(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// Fills the `{{name}}` placeholders of `v` from `args`: a string that is only a placeholder
/// takes the argument's JSON value (null when absent), one inside a longer string its text
/// (percent-encoded when `encode`).
pub fn fill(v: &Value, args: &Map<String, Value>, encode: bool) -> Value {
    match v {
        Value::String(s) => {
            if !encode {
                if let Some(name) = whole_placeholder(s) {
                    return args.get(name).cloned().unwrap_or(Value::Null);
                }
            }
            let mut out = String::new();
            let mut rest = s.as_str();
            while let Some(i) = rest.find("{{") {
                let after = &rest[i + 2..];
                let Some(j) = after.find("}}") else { break };
                out.push_str(&rest[..i]);
                let text = text_of(args.get(after[..j].trim()));
                if encode {
                    out.extend(percent_encoding::utf8_percent_encode(
                        &text,
                        crate::percent::NOT_UNRESERVED,
                    ));
                } else {
                    out.push_str(&text);
                }
                rest = &after[j + 2..];
            }
            out.push_str(rest);
            Value::String(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(|x| fill(x, args, encode)).collect()),
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, x)| (k.clone(), fill(x, args, encode)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The name of a string that is one placeholder and nothing else (`"{{amount}}"`).
fn whole_placeholder(s: &str) -> Option<&str> {
    let inner = s.trim().strip_prefix("{{")?.strip_suffix("}}")?;
    (!inner.contains("{{") && !inner.contains("}}")).then(|| inner.trim())
}

/// The effect body an HTTP delivery sends for `args` (placeholders filled, header values
/// put back): read by the effect's own parser, so a delivery is validated and sent by the
/// same code as `POST …/effect`.
pub fn effect_body(http: &Value, headers: &Headers, args: &Map<String, Value>) -> Value {
    let mut h = http.as_object().cloned().unwrap_or_default();
    let mut request = Map::new();
    for m in ["method", "url", "body"] {
        if let Some(v) = h.shift_remove(m) {
            let v = match m {
                "url" => fill(&v, args, true),
                "body" => fill(&v, args, false),
                _ => v,
            };
            request.insert(m.to_owned(), v);
        }
    }
    if !request.contains_key("body") {
        request.insert("body".into(), Value::Object(args.clone()));
    }
    if !headers.request.is_empty() {
        request.insert(
            "headers".into(),
            fill(&Value::Object(headers.request.clone()), args, false),
        );
    }
    if let Some(Value::Object(rc)) = h.get_mut("reconcile") {
        if let Some(u) = rc.get("url").cloned() {
            rc.insert("url".into(), fill(&u, args, true));
        }
        if !headers.reconcile.is_empty() {
            rc.insert(
                "headers".into(),
                fill(&Value::Object(headers.reconcile.clone()), args, false),
            );
        }
    }
    h.insert("request".into(), Value::Object(request));
    Value::Object(h)
}

/// The upstream tool of an MCP delivery (`deliver.mcp.tool`).
pub fn upstream_tool(mcp: &Value) -> Option<&str> {
    mcp.get("tool").and_then(Value::as_str)
}

/// The effect body of an MCP delivery for `args`: the `tools/call` is POSTed to
/// `deliver.mcp.url` with the header values, the key in `Idempotency-Key`, within
/// `timeout_ms`; the upstream is never taken to dedupe (a timeout after the call left is
/// ambiguous). Read by the effect's own parser, like an HTTP delivery.
pub fn mcp_effect_body(mcp: &Value, headers: &Headers, args: &Map<String, Value>) -> Value {
    let mut request = Map::new();
    request.insert("method".into(), json!("POST"));
    if let Some(u) = mcp.get("url") {
        request.insert("url".into(), u.clone());
    }
    request.insert("body".into(), Value::Object(args.clone()));
    if !headers.request.is_empty() {
        request.insert("headers".into(), Value::Object(headers.request.clone()));
    }
    let mut body = json!({"request": request, "destination_idempotent": false});
    if let Some(t) = mcp.get("timeout_ms") {
        body["timeout_ms"] = t.clone();
    }
    body
}
