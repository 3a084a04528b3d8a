//! `POST /mcp/{ns}`: the Model Context Protocol over Streamable HTTP, one JSON-RPC message
//! per request, answered with one `application/json` body (the transport lets a server answer
//! a request that way instead of opening an event stream; idem has nothing to stream).
//!
//! Revisions: the stateless one (`2026-07-28`: no handshake, `server/discover` instead, the
//! revision in every request's `_meta`; every request stands alone) and the session ones (`2025-03-26`, `2025-06-18`, `2025-11-25`: `initialize`
//! answers an `Mcp-Session-Id`). idem keeps no session state: every call is keyed by the
//! identity of its arguments, so a session carries nothing a call needs and any session id is
//! accepted — an instance behind a load balancer answers the same as the one that initialized.
//! Auth is the API's (the worker role on `{ns}`, by the route table's gate). Methods:
//! `initialize`, `server/discover`, `ping`, `tools/list`, `tools/call` and notifications (202,
//! no body); a revision idem does not serve is HTTP 400 with `-32022`; any
//! other method is `-32601`, an unknown tool `-32602`. A message that is not a JSON-RPC 2.0
//! request, notification or response is HTTP 400 with a JSON-RPC error; nothing is stored.
//!
//! Two reads of one message: a plain `tools/call` (what agents send on every call) is read in
//! place ([`fast_call`]: strings borrowed, `id` and `arguments` kept as their JSON text, the
//! answer written from typed parts); anything else, errors included, is read whole as a
//! `Value`. The typed read declines whatever it would not answer exactly as the whole read
//! does, so a message's answer does not depend on which read took it.
//!
//! What it must never do: answer a header value or log an argument.

use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, Value};
use utoipa::ToSchema;

use super::call;
pub use super::upstream::{STATELESS, VERSION_META};
use crate::api::v1::shared::Authed;
use crate::error::ApiResult;
use crate::input::{NsPath, RawBody};

/// Every revision served, newest first.
pub const REVISIONS: [&str; 4] = [STATELESS, "2025-11-25", "2025-06-18", "2025-03-26"];
/// What `initialize` answers when the client asks for a revision idem does not serve.
pub const DEFAULT_SESSION_REVISION: &str = "2025-11-25";

/// A JSON-RPC message sent to `/mcp/{ns}`: a request (`id` and `method`), a notification
/// (`method` only) or a response to the server (`id` with `result` or `error`).
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct McpMessage {
    /// Always "2.0".
    #[schema(pattern = "^2\\.0$")]
    jsonrpc: String,
    /// A string or an integer; absent for a notification.
    #[schema(value_type = Option<Value>)]
    id: Option<Value>,
    /// initialize, ping, tools/list, tools/call, notifications/…; others answer -32601.
    method: Option<String>,
    #[schema(value_type = Option<Object>)]
    params: Option<Value>,
}

/// A JSON-RPC answer: `result` or `error` (`{code, message}`).
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct McpAnswer {
    jsonrpc: String,
    #[schema(value_type = Option<Value>)]
    id: Option<Value>,
    #[schema(value_type = Option<Object>)]
    result: Option<Value>,
    #[schema(value_type = Option<Object>)]
    error: Option<Value>,
}

/// Free-form object (for the schema).
#[derive(ToSchema)]
pub struct Object;

/// The largest JSON-RPC integer id (2^53 - 1, what the OpenAPI document states).
const MAX_ID: f64 = 9_007_199_254_740_991.0;

const INSTRUCTIONS: &str = "Each tool performs its side effect at most once per business \
    identity. Read the text of every result: it says whether the action was done, is waiting \
    for a person, or may be called again.";

fn server_info() -> Value {
    json!({"name": "idem", "title": "idem actions", "version": env!("CARGO_PKG_VERSION")})
}

/// HTTP 400 with JSON-RPC `-32022` (unsupported protocol version) naming what is served.
fn unsupported(id: Value, asked: &str) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": id, "error": {
        "code": -32022,
        "message": format!("unsupported protocol version; served: {}", REVISIONS.join(", ")),
        "data": {"supported": REVISIONS, "requested": asked},
    }});
    (StatusCode::BAD_REQUEST, Json(body)).into_response()
}

fn rpc_error(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

fn bad(id: Value, code: i64, message: &str) -> Response {
    (StatusCode::BAD_REQUEST, Json(rpc_error(id, code, message))).into_response()
}

/// Whether a request is of the stateless revision (its `MCP-Protocol-Version` header or its
/// `_meta` says so): only its results carry `resultType` and the cache hints. A request that
/// names no revision is of a session revision (a 2025-03-26 client sends no header).
fn modern(revision: Option<&str>) -> bool {
    revision == Some(STATELESS)
}

/// The `id` of a message, when the body is a JSON object with a usable one (for an error
/// answered before the message is read); `null` otherwise.
fn id_of(bytes: &[u8]) -> Value {
    #[derive(Deserialize)]
    struct Id {
        id: Option<Value>,
    }
    match serde_json::from_slice::<Id>(bytes).ok().and_then(|m| m.id) {
        Some(id @ Value::String(_)) => id,
        Some(Value::Number(n)) if n.is_i64() || n.is_u64() => Value::Number(n),
        _ => Value::Null,
    }
}

/// A `tools/call` request as clients send it, read in place: its strings borrowed, its `id`
/// and `arguments` kept as their JSON text, no `Value` built for the message.
#[derive(Deserialize)]
struct FastCall<'a> {
    #[serde(borrow)]
    jsonrpc: &'a str,
    #[serde(borrow)]
    id: &'a RawValue,
    #[serde(borrow)]
    method: &'a str,
    #[serde(borrow)]
    params: FastParams<'a>,
}

#[derive(Deserialize)]
struct FastParams<'a> {
    #[serde(borrow)]
    name: &'a str,
    #[serde(borrow, default)]
    arguments: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "_meta")]
    meta: Option<FastMeta<'a>>,
}

/// `_meta`'s members as written: `Some` when present, `null` included (the whole read treats a
/// `null` revision as an unserved one).
#[derive(Deserialize)]
struct FastMeta<'a> {
    #[serde(
        borrow,
        default,
        deserialize_with = "present",
        rename = "io.modelcontextprotocol/protocolVersion"
    )]
    version: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present", rename = "idem/cost")]
    cost: Option<&'a RawValue>,
}

/// A member that is present, whatever its value (`null` too, which `Option` would read as
/// absent).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

/// A revision's JSON text naming one idem serves (a string without escapes).
fn served(raw: &RawValue) -> bool {
    let t = raw.get();
    t.len() >= 2
        && t.starts_with('"')
        && !t.contains('\\')
        && REVISIONS.contains(&&t[1..t.len() - 1])
}

/// The answer to a `tools/call` read by [`fast_call`]: its `id` written back as it came.
#[derive(Serialize)]
struct FastAnswer<'a> {
    jsonrpc: &'static str,
    id: &'a RawValue,
    result: call::ToolResult,
}

/// Whether a request id's JSON text is one the general path would write back the same: a
/// string without escapes, or an integer written plainly that every client holds exactly.
fn plain_id(raw: &str) -> bool {
    match raw.as_bytes().first() {
        Some(b'"') => !raw.contains('\\'),
        Some(b'-' | b'0'..=b'9') => raw
            .parse::<i64>()
            .is_ok_and(|n| n.unsigned_abs() <= MAX_ID as u64 && n.to_string() == raw),
        _ => false,
    }
}

/// The deepest arguments the typed read takes: well inside the whole read's nesting limit
/// (128 levels for the message, whose arguments sit two levels down).
const FAST_DEPTH: usize = 100;

/// How deeply `v` nests (a scalar: `at`), counted no further than past [`FAST_DEPTH`].
fn depth(v: &Value, at: usize) -> usize {
    if at > FAST_DEPTH {
        return at;
    }
    match v {
        Value::Array(a) => a.iter().map(|x| depth(x, at + 1)).max().unwrap_or(at + 1),
        Value::Object(m) => m.values().map(|x| depth(x, at + 1)).max().unwrap_or(at + 1),
        _ => at,
    }
}

/// A well-formed `tools/call` of a known tool, answered without reading the message as a
/// `Value` (most of what an agent's repeated call costs beyond its claim). `None`: anything
/// else (another method, an escaped string, an unusual id, a duplicate member, a cost, an
/// unknown tool, a revision not served), which the general path reads whole and answers,
/// errors included, so both paths answer a message the same.
async fn fast_call(
    st: &crate::state::AppState,
    ns: &idem::Namespace,
    header: Option<&str>,
    bytes: &[u8],
) -> Option<ApiResult<Response>> {
    let msg: FastCall<'_> = serde_json::from_slice(bytes).ok()?;
    let meta = msg.params.meta.as_ref();
    if msg.jsonrpc != "2.0"
        || msg.method != "tools/call"
        || !plain_id(msg.id.get())
        || meta.is_some_and(|m| m.cost.is_some())
        || meta.and_then(|m| m.version).is_some_and(|v| !served(v))
    {
        return None;
    }
    let loaded = match super::cached(st, ns, msg.params.name).await {
        Ok(Some(l)) => l,
        Ok(None) => return None,
        Err(e) => return Some(Err(e)),
    };
    let arguments = match msg.params.arguments {
        None => call::Arguments::Value(None),
        Some(raw) => match loaded.calls.get(raw.get()) {
            Some(kept) => call::Arguments::Kept(kept),
            None => {
                // Read here (the typed read only checked that it is JSON): arguments nested
                // deeper than the whole read takes are the whole read's to refuse.
                let value: Value = serde_json::from_str(raw.get()).ok()?;
                if depth(&value, 0) > FAST_DEPTH {
                    return None;
                }
                call::Arguments::Read {
                    text: raw.get(),
                    value,
                }
            }
        },
    };
    let answer = match call::call(st, ns, &loaded, arguments, None).await {
        Ok(a) => a,
        Err(e) => return Some(Err(e)),
    };
    // A `_meta` version is one of [`REVISIONS`], quoted and unescaped (`served`).
    let revision = match meta.and_then(|m| m.version) {
        Some(v) => Some(v.get().trim_matches('"')),
        None => header,
    };
    let body = FastAnswer {
        jsonrpc: "2.0",
        id: msg.id,
        result: answer.into_result(modern(revision)),
    };
    Some(match serde_json::to_vec(&body) {
        Ok(b) => Ok((
            [(
                axum::http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            b,
        )
            .into_response()),
        Err(e) => Err(crate::error::ApiError::internal(format!("answer: {e}"))),
    })
}

/// The revision `initialize` settles on.
pub fn negotiate(asked: Option<&str>) -> &'static str {
    REVISIONS
        .iter()
        .find(|r| Some(**r) == asked)
        .copied()
        .unwrap_or(DEFAULT_SESSION_REVISION)
}

/// The MCP endpoint of a namespace.
#[utoipa::path(post, path = "/mcp/{ns}", tag = "actions", operation_id = "mcp",
    params(("ns" = String, Path)),
    request_body = McpMessage,
    responses(
        (status = 200, description = "the JSON-RPC answer to a request (a result, or an \
            error: -32601 unknown method, -32602 unknown tool or bad params); `initialize` \
            of a session revision also sets `Mcp-Session-Id`", body = McpAnswer),
        (status = 202, description = "a notification or a response was accepted"),
        (status = 400, description = "not a JSON-RPC 2.0 message (-32700 parse error, -32600 \
            invalid request), or an `MCP-Protocol-Version` idem does not serve",
            body = McpAnswer),
    ))]
pub async fn mcp(Authed { st, .. }: Authed, NsPath(ns): NsPath, raw: RawBody) -> Response {
    // In a task of its own: an agent that hangs up mid-call does not cancel the action's
    // request or the report of its answer (see `effects::detached`).
    let work = async move { handle(&st, &ns, &raw.headers, &raw.bytes).await };
    match crate::api::v1::effects::detached(work).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn handle(
    st: &crate::state::AppState,
    ns: &idem::Namespace,
    headers: &HeaderMap,
    bytes: &[u8],
) -> ApiResult<Response> {
    let header = match headers.get("mcp-protocol-version") {
        Some(v) => {
            let v = v.to_str().unwrap_or_default();
            match REVISIONS.iter().find(|r| **r == v) {
                Some(r) => Some(*r),
                None => return Ok(unsupported(id_of(bytes), v)),
            }
        }
        None => None,
    };
    if let Some(answered) = fast_call(st, ns, header, bytes).await {
        return answered;
    }
    // JSON-RPC: a body that is not JSON (nothing at all included) is a parse error; JSON that
    // is not a request object (`null` included) an invalid request.
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(bad(Value::Null, -32700, "parse error: the body is empty"));
    }
    let msg = match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(m)) => m,
        Ok(Value::Array(_)) => {
            return Ok(bad(
                Value::Null,
                -32600,
                "batches are not served: send one message",
            ))
        }
        Ok(_) => return Ok(bad(Value::Null, -32600, "a JSON-RPC message is an object")),
        Err(_) => {
            return Ok(bad(
                Value::Null,
                -32700,
                "parse error: the body is not JSON",
            ))
        }
    };
    let id = msg.get("id").cloned();
    let id_ok = match &id {
        None => true,
        Some(Value::String(_)) => true,
        // An integer that every client can hold exactly (|id| < 2^53), also when written as
        // `7.0` (one JSON number, however it is spelled).
        Some(Value::Number(n)) => n
            .as_f64()
            .is_some_and(|f| f.fract() == 0.0 && f.abs() <= MAX_ID),
        Some(_) => false,
    };
    if msg.get("jsonrpc") != Some(&json!("2.0")) || !id_ok {
        return Ok(bad(
            Value::Null,
            -32600,
            "invalid request: `jsonrpc` must be \"2.0\" and `id` a string or an integer",
        ));
    }
    let method = match msg.get("method") {
        Some(Value::String(m)) => m.clone(),
        Some(_) => {
            return Ok(bad(
                id.unwrap_or(Value::Null),
                -32600,
                "`method` must be a string",
            ))
        }
        // A response to the server (idem never asks the client anything): accepted.
        None if id.is_some() && (msg.contains_key("result") || msg.contains_key("error")) => {
            return Ok(StatusCode::ACCEPTED.into_response())
        }
        None => {
            return Ok(bad(
                id.unwrap_or(Value::Null),
                -32600,
                "`method` is required",
            ))
        }
    };
    let params = match msg.get("params") {
        None | Some(Value::Null) => None,
        Some(p @ Value::Object(_)) => Some(p),
        Some(_) => {
            return Ok(bad(
                id.unwrap_or(Value::Null),
                -32600,
                "`params` must be an object",
            ))
        }
    };
    // The stateless revision carries its version in every request's `_meta`.
    let mut revision = header;
    if let Some(v) = params
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get(VERSION_META))
    {
        let v = v.as_str().unwrap_or_default();
        match REVISIONS.iter().find(|r| **r == v) {
            Some(r) => revision = Some(*r),
            None => return Ok(unsupported(id.unwrap_or(Value::Null), v)),
        }
    }
    let Some(id) = id else {
        // Notifications (initialized, cancelled, …): nothing to answer.
        return Ok(StatusCode::ACCEPTED.into_response());
    };
    let mut session = None;
    let outcome: Result<Value, (i64, String)> = match method.as_str() {
        "initialize" => match params
            .and_then(|p| p.get("protocolVersion"))
            .and_then(Value::as_str)
        {
            // `protocolVersion`, `capabilities` and `clientInfo` are required params.
            None => Err((
                -32602,
                "`params.protocolVersion` (a string) is required".to_owned(),
            )),
            Some(asked) => {
                let settled = negotiate(Some(asked));
                revision = Some(settled);
                if settled != STATELESS {
                    session = Some(idem::generate_secret());
                }
                Ok(json!({
                    "protocolVersion": settled,
                    "capabilities": {"tools": {"listChanged": false}},
                    "serverInfo": server_info(),
                    "instructions": INSTRUCTIONS,
                }))
            }
        },
        // The stateless revision's handshake-free discovery.
        "server/discover" => Ok(json!({
            "supportedVersions": REVISIONS,
            "capabilities": {"tools": {"listChanged": false}},
            "serverInfo": server_info(),
            "instructions": INSTRUCTIONS,
            "cacheScope": "private",
            "ttlMs": 0,
        })),
        "ping" => Ok(json!({})),
        "tools/list" => {
            let tools: Vec<Value> = super::load_all(st, ns)
                .await?
                .iter()
                .map(|l| l.action.tool())
                .collect();
            Ok(if modern(revision) {
                json!({"tools": tools, "cacheScope": "private", "ttlMs": 0})
            } else {
                json!({ "tools": tools })
            })
        }
        "tools/call" => match params.and_then(|p| p.get("name")).and_then(Value::as_str) {
            None => Err((-32602, "`params.name` (the tool) is required".to_owned())),
            Some(name) => match super::cached(st, ns, name).await? {
                None => Err((-32602, format!("unknown tool: {name}"))),
                Some(l) => {
                    let p = params.unwrap_or(&Value::Null);
                    let arguments = call::Arguments::Value(p.get("arguments"));
                    let cost = p.get("_meta").and_then(|m| m.get("idem/cost"));
                    let answer = call::call(st, ns, &l, arguments, cost).await?;
                    Ok(answer.into_json())
                }
            },
        },
        _ => Err((-32601, format!("method not found: {method}"))),
    };
    let body = match outcome {
        Ok(mut result) => {
            // The stateless revision requires `resultType` on every result: every answer is
            // complete (idem never asks the client for more input). The session revisions
            // have no such member (`ping` answers `{}`).
            if modern(revision) {
                result["resultType"] = json!("complete");
            } else if let Some(r) = result.as_object_mut() {
                r.remove("resultType");
            }
            json!({"jsonrpc": "2.0", "id": id, "result": result})
        }
        Err((code, message)) => rpc_error(id, code, &message),
    };
    let mut resp = Json(body).into_response();
    if let Some(s) = session.and_then(|s| HeaderValue::from_str(&s).ok()) {
        resp.headers_mut().insert("mcp-session-id", s);
    }
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_ids_written_back_unchanged_are_read_in_place() {
        for id in ["1", "0", "-7", "9007199254740991", "\"a-1\"", "\"\""] {
            assert!(plain_id(id), "{id}");
        }
        for id in [
            "9007199254740992",
            "-0",
            "7.0",
            "1e3",
            "\"a\\u0041\"",
            "null",
            "true",
            "{}",
            "[1]",
        ] {
            assert!(!plain_id(id), "{id}");
        }
    }

    #[test]
    fn initialize_settles_on_a_served_revision() {
        assert_eq!(negotiate(Some("2025-06-18")), "2025-06-18");
        assert_eq!(negotiate(Some(STATELESS)), STATELESS);
        assert_eq!(negotiate(Some("2024-11-05")), DEFAULT_SESSION_REVISION);
        assert_eq!(negotiate(None), DEFAULT_SESSION_REVISION);
    }
}
