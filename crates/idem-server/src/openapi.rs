//! The OpenAPI document, generated from the handlers' `#[utoipa::path]` annotations and the
//! shapes of each resource file (`api::v1::*::Doc`, merged here), then completed from the route table and the error type so that it says
//! what the server does:
//!
//! - security from the route table's role column: a route with a role takes a bearer token
//!   (needed once any token exists; a server without tokens, loopback only, takes calls
//!   without one); the probes and this document take none;
//! - the `{ns}` and `{key}` path parameters with their real limits;
//! - every problem+json answer an operation can give, by status, built from [`ApiError`]
//!   itself (status and `code`), so a status cannot be documented that the error type does
//!   not map to;
//! - the request-body rules JSON Schema can only state as alternatives (`anyOf`/`not`).
//!
//! It is given the route table and the resources' `Doc`s by the assembly
//! ([`crate::routes`]), and imports neither. A test checks that every route of `routes::routes()` is in it and that
//! nothing else is.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::api::{
    EventCostDoc, EventDoc, LastErrorDoc, LeaseExpiryDoc, NoteBody, RecordDoc, RecordWithEventsDoc,
    RequestDoc, StateResponse,
};
use crate::error::{ApiError, ErrorCode, Problem};
use crate::outcome::EffectOutcome;
use crate::route::Route;

#[derive(OpenApi)]
#[openapi(
    info(title = "idem", description = "Idempotency gate and side-effect ledger. \
        Claim before every irreversible side effect, report after it.\n\n\
        Auth: once any API token exists, every `/v1` call needs `Authorization: Bearer <token>` \
        (401 `unauthorized` without one; 403 `forbidden` for a role below the route's or a \
        namespace outside the token's scope). A server with no token at all (it then listens \
        on loopback only) takes `/v1` calls without one. `/healthz`, `/readyz`, `/metrics` and \
        `/openapi.json` never need one.\n\n\
        Errors are RFC 9457 `application/problem+json` with a machine-readable `code` and, \
        where there is one, the offending `field`."),
    components(schemas(
        Problem, RecordDoc, LastErrorDoc, EventDoc, StateResponse, RecordWithEventsDoc, NoteBody,
        LeaseExpiryDoc, EventCostDoc, RequestDoc,
    )),
    modifiers(&Bearer),
)]
pub struct ApiDoc;

struct Bearer;

impl Modify for Bearer {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The problem+json media type every error is sent with.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// A key: 1–255 bytes of visible ASCII (percent-encoded in the path).
pub const KEY_PATTERN: &str = r"^[\x21-\x7E]{1,255}$";
/// A namespace: 1–128 of `A-Z a-z 0-9 . _ - :`.
pub const NAMESPACE_PATTERN: &str = r"^[A-Za-z0-9._:-]{1,128}$";
/// An HTTP header name: one or more RFC 9110 token characters (any case).
pub const HEADER_NAME_PATTERN: &str = r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$";
/// An http(s) URL as the server reads one: the scheme (any case), `://`, an authority without
/// userinfo (no `@`) and without white space or control characters, then anything without
/// U+0000 after a `/`, `?`, `#` or `\`. That the authority is a valid host (and port) is the
/// URL standard's rule, which the server applies too (422 `invalid_field`).
pub const URL_PATTERN: &str =
    r"^[Hh][Tt][Tt][Pp][Ss]?://[^/?#\\@\s\x00-\x1F\x7F-\x9F]+(?:[/?#\\][^\x00]*)?$";

/// The document of the routes `routes` whose paths and shapes the resources' `docs` give
/// (the assembly, `crate::routes::document`, builds it once and serves it).
pub fn build(routes: &[Route], docs: Vec<utoipa::openapi::OpenApi>) -> Value {
    let mut api = ApiDoc::openapi();
    for resource in docs {
        api.merge(resource);
    }
    let mut doc = serde_json::to_value(api).unwrap_or_else(|_| json!({}));
    if let Some(root) = doc.as_object_mut() {
        root.shift_remove("security");
    }
    for route in routes {
        let Some(op) = doc
            .pointer_mut(&format!("/paths/{}/{}", escape(route.path), route.method))
            .and_then(Value::as_object_mut)
        else {
            continue;
        };
        if route.role.is_some() {
            op.insert("security".into(), json!([{"bearer": []}, {}]));
        } else {
            op.shift_remove("security");
        }
        describe_params(op);
        if body_optional(route.method, route.path) {
            if let Some(body) = op.get_mut("requestBody") {
                body["required"] = json!(false);
            }
        }
        let errors = errors_of(route.method, route.path, route.role.is_some(), op);
        add_problems(op, &errors);
        describe_contract_refusals(op);
        if route.path == "/v1/audit" {
            // One exported workflow, or an array of them.
            if let Some(body) = op.get_mut("requestBody") {
                body["content"]["application/json"]["schema"] = json!({"anyOf": [
                    {"$ref": "#/components/schemas/AuditBody"},
                    {"type": "array", "items": {"$ref": "#/components/schemas/AuditBody"}},
                ]});
            }
        }
        if route.path == "/v1/sources/{source}" && matches!(route.method, "put" | "patch") {
            if let Some(body) = op.get_mut("requestBody") {
                let name = if route.method == "put" {
                    "SourceWrite"
                } else {
                    "SourcePatch"
                };
                body["content"]["application/json"]["schema"] =
                    json!({"$ref": format!("#/components/schemas/{name}")});
            }
        }
        if route.path == "/v1/tokens" {
            if let Some(resp) = op.get_mut("responses").and_then(|r| r.get_mut("403")) {
                resp["description"] = json!(
                    "problem+json: `forbidden`: the token is not an admin token or its scope \
                     does not cover the new token's, or the server has no tokens yet (create \
                     the first one with `idem token create`; nothing is written)"
                );
            }
        }
    }
    add_links(&mut doc);
    if let Some(schemas) = doc
        .pointer_mut("/components/schemas")
        .and_then(Value::as_object_mut)
    {
        refine_schemas(schemas);
    }
    doc
}

/// OpenAPI links of the worker flow: what a client does with an answer (the claim's token
/// goes into the writes of the same key), for generated clients and stateful API testers.
fn add_links(doc: &mut Value) {
    let same_key = json!({"ns": "$request.path.ns", "key": "$request.path.key"});
    let link = |op: &str, body: Option<Value>| {
        let mut l = json!({"operationId": op, "parameters": same_key.clone()});
        if let Some(b) = body {
            l["requestBody"] = b;
        }
        l
    };
    let claimed = json!({"token": "$response.body#/token"});
    let held = json!({"token": "$request.body#/token"});
    let key = "/v1/namespaces/{ns}/keys/{key}";
    let links = [
        (
            format!("{key}/claim"),
            "201",
            json!({
                "prepare": link("prepare", Some(claimed.clone())),
                "heartbeat": link("heartbeat", Some(claimed.clone())),
                "complete": link("complete", Some(claimed.clone())),
                "fail": link("fail", Some(claimed)),
                "get_record": link("get_record", None),
            }),
        ),
        (
            format!("{key}/prepare"),
            "200",
            json!({
                "complete": link("complete", Some(held.clone())),
                "approve": link("approve", None),
                "reject": link("reject", None),
            }),
        ),
        (
            format!("{key}/heartbeat"),
            "200",
            json!({"complete": link("complete", Some(held.clone()))}),
        ),
        (
            format!("{key}/complete"),
            "200",
            json!({
                "complete_again": link("complete", Some(held)),
                "get_record": link("get_record", None),
            }),
        ),
        (
            format!("{key}/fail"),
            "200",
            json!({
                "resolve": link("resolve", None),
                "get_record": link("get_record", None),
            }),
        ),
    ];
    for (path, status, l) in links {
        let pointer = format!("/paths/{}/post/responses/{status}", escape(&path));
        if let Some(resp) = doc.pointer_mut(&pointer) {
            resp["links"] = l;
        }
    }
}

/// A JSON-pointer token for a path (`/` → `~1`).
fn escape(path: &str) -> String {
    path.replace('~', "~0").replace('/', "~1")
}

/// The path parameters `{ns}` and `{key}`, and the list's query parameters, with the limits
/// the server applies.
fn describe_params(op: &mut Map<String, Value>) {
    // The review queue is filtered by the states a person acts on; key lists by any state.
    let review = op.get("operationId").and_then(Value::as_str) == Some("review_queue");
    let Some(params) = op.get_mut("parameters").and_then(Value::as_array_mut) else {
        return;
    };
    for p in params {
        if p["in"] == "path" && p["name"] == "name" {
            // An action's name: the tool name of `ACTIONS.md`.
            p["schema"] = json!({"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$",
                                 "minLength": 1, "maxLength": 64});
        }
        if p["in"] == "query" {
            match p["name"].as_str() {
                Some("state") => {
                    let mut states: Vec<&str> = if review {
                        crate::api::QUEUE_STATES
                            .iter()
                            .map(|s| s.as_str())
                            .collect()
                    } else {
                        idem::State::ALL.iter().map(|s| s.as_str()).collect()
                    };
                    states.push("");
                    p["schema"] = json!({"type": "string", "enum": states});
                }
                Some("limit") => {
                    p["schema"] = json!({"anyOf": [
                        {"type": "integer", "minimum": 1, "maximum": 1000},
                        {"type": "string", "maxLength": 0},
                    ]});
                }
                Some("namespace") => {
                    // A namespace filter: the namespace rule, or empty for every namespace.
                    p["schema"] = json!({
                        "type": "string",
                        "pattern": "^([A-Za-z0-9._:-]{1,128})?$",
                        "maxLength": 128,
                    });
                }
                Some("cursor") if review => {
                    // What the review queue hands out: hex of
                    // "r<updated_at ms>\n<namespace>\n<key>".
                    p["schema"] = json!({
                        "type": "string",
                        "pattern": "^(72(2[BbDd])?(3[0-9]){1,18}0[Aa]\
                                    (3[0-9Aa]|4[1-9A-Fa-f]|5[0-9AaFf]|6[1-9A-Fa-f]|7[0-9Aa]|2[DEde]){1,128}\
                                    0[Aa](2[1-9A-Fa-f]|[3-6][0-9A-Fa-f]|7[0-9A-Ea-e]){1,255})?$",
                    });
                }
                Some("cursor") => {
                    // What the server hands out: hex of "<updated_at ms>\n<key>".
                    p["schema"] = json!({
                        "type": "string",
                        "pattern": "^((2[BbDd])?(3[0-9]){1,18}0[Aa]\
                                    (2[1-9A-Fa-f]|[3-6][0-9A-Fa-f]|7[0-9A-Ea-e]){1,255})?$",
                    });
                }
                _ => {}
            }
            continue;
        }
        match p["name"].as_str() {
            Some("ns") => {
                p["description"] = json!(
                    "The namespace: 1 to 128 characters of A-Z a-z 0-9 . _ - : \
                     (anything else is 400 `invalid_namespace`)."
                );
                p["schema"] = json!({
                    "type": "string", "minLength": 1, "maxLength": 128,
                    "pattern": NAMESPACE_PATTERN,
                });
            }
            Some("source") => {
                p["description"] = json!(
                    "The source name: 1 to 128 characters of A-Z a-z 0-9 . _ - : (the \
                     namespace syntax)."
                );
                p["schema"] = json!({
                    "type": "string", "minLength": 1, "maxLength": 128,
                    "pattern": NAMESPACE_PATTERN,
                });
            }
            Some("key") => {
                p["description"] = json!(
                    "The key: 1 to 255 bytes of visible ASCII (0x21-0x7E), percent-encoded in \
                     the path (encodeURIComponent). Anything else is 400 `invalid_key`."
                );
                p["schema"] = json!({
                    "type": "string", "minLength": 1, "maxLength": 255,
                    "pattern": KEY_PATTERN,
                });
            }
            _ => {}
        }
    }
}

/// The 422 answers an operation gives to requests its schema cannot tell from good ones
/// (comparisons between members, with the path, or with stored state), by operation id.
/// `.ci/schemathesis.toml` accepts a 422 to schema-valid data from these operations and no
/// others (a test keeps the two lists equal).
pub fn contract_refusals(operation_id: &str) -> Option<&'static str> {
    Some(match operation_id {
        "claim" => {
            "outcome `conflict` (a claim answer, not a problem): the key was claimed before \
             with a different fingerprint (another payload, or another `fingerprint`)"
        }
        "effect" => {
            "outcome `conflict`: the key was used before with another request; \
             `destination_forbidden`: the egress guard refuses where the URL's host resolves \
             to (loopback, private or reserved addresses, or outside the namespace's \
             `egress.allow`); `invalid_field`: `request.headers` names the idempotency header, \
             or a URL's host or port is not valid by the URL standard"
        }
        "derive" => {
            "`missing_identity_field`: a pointer of `fields` finds nothing (or `null`) in \
             `event`; `invalid_field`: the derived key as a whole is longer than 255 bytes"
        }
        "patch_namespace" => {
            "`invalid_field`: after the merge with the stored policy `audit_retention_ms` is \
             below `retention_ms` or `retry.max_ms` below `retry.base_ms`"
        }
        "audit" => {
            "`invalid_field` naming the node: two nodes of one workflow have the same `name`, \
             or a connection from a named node does not have n8n's shape \
             (`{\"main\": [[{node, type, index}]]}`)"
        }
        "put_source" => SOURCE_REFUSALS,
        "put_action" => {
            "`invalid_field`: `input_schema` is not a valid JSON Schema (draft 2020-12) of an \
             object; a `{name}` of `key` is not a required string or integer property of \
             `input_schema`; an `identity` name or a `{{name}}` placeholder of `deliver.http` \
             is not one of its properties; the name in the path is not 1-64 of \
             `[A-Za-z0-9_-]`; a URL's host or port is not valid by the URL standard; \
             `deliver.mcp.tool` is not 1-128 visible ASCII characters; a header of \
             `deliver.mcp.headers` is one idem sets itself (`Accept`, `Content-Type`, \
             `Mcp-Session-Id`, `MCP-Protocol-Version`, `Idempotency-Key`, …)"
        }
        "patch_source" => {
            "`invalid_field`: the source after the merge is not a whole source (as for `PUT`, \
             with the stored provider: `public_url` for hubspot and twilio, `hmac` and \
             `event_id` for hmac and `hmac` for no other, secrets the provider can use, \
             `hmac.timestamp_header` with `signed: timestamp.body`); `source` differs from \
             the path's name; `forward.retry.max_ms` below `forward.retry.base_ms`; a URL \
             whose host or port is not valid by the URL standard"
        }
        _ => return None,
    })
}

/// States the operation's [`contract_refusals`] in its description and its 422 answer.
fn describe_contract_refusals(op: &mut Map<String, Value>) {
    let Some(text) = op
        .get("operationId")
        .and_then(Value::as_str)
        .and_then(contract_refusals)
    else {
        return;
    };
    let said = format!(
        "Refused although the schema allows it (422; no JSON Schema can state it): {text}."
    );
    let description = match op.get("description").and_then(Value::as_str) {
        Some(d) if !d.is_empty() => format!("{d}\n\n{said}"),
        _ => said.clone(),
    };
    op.insert("description".into(), json!(description));
    if let Some(resp) = op.get_mut("responses").and_then(|r| r.get_mut("422")) {
        let d = resp["description"].as_str().unwrap_or_default().to_owned();
        resp["description"] = json!(format!("{d}. {said}"));
    }
}

/// Operations whose body may be left out (read as `{}`).
fn body_optional(method: &str, path: &str) -> bool {
    let last = path.rsplit('/').next().unwrap_or_default();
    method == "post" && matches!(last, "claim" | "approve" | "reject" | "pause" | "resume")
}

/// Actions and the MCP endpoint: an action document takes its members and no others (400
/// `unknown_field`); a JSON-RPC message is a request or notification (`method`) or a response
/// (`id` with `result` or `error`), `jsonrpc` exactly "2.0", `id` a string or an integer.
fn refine_actions(schemas: &mut Map<String, Value>) {
    for name in [
        "ActionWriteDoc",
        "DeliverDoc",
        "HttpDeliverDoc",
        "McpDeliverDoc",
    ] {
        if let Some(body) = schemas.get_mut(name) {
            body["additionalProperties"] = json!(false);
        }
    }
    // `deliver`: exactly one of `http` and `mcp` (a null member counts as absent).
    if let Some(d) = schemas.get_mut("DeliverDoc") {
        d["oneOf"] = json!([
            {"required": ["http"], "properties": {"http": {"type": "object"}}},
            {"required": ["mcp"], "properties": {"mcp": {"type": "object"}}},
        ]);
    }
    if let Some(m) = schemas.get_mut("McpMessage") {
        m["properties"]["jsonrpc"] = json!({"type": "string", "enum": ["2.0"]});
        m["properties"]["id"] = json!({"oneOf": [
            {"type": "string"},
            {"type": "integer", "minimum": -9_007_199_254_740_991_i64,
             "maximum": 9_007_199_254_740_991_i64},
        ]});
        m["properties"]["method"] = json!({"type": "string"});
        m["properties"]["params"] = json!({"type": ["object", "null"]});
        m["properties"]["result"] = json!({});
        m["properties"]["error"] = json!({});
        m["required"] = json!(["jsonrpc"]);
        m["anyOf"] = json!([
            {"required": ["method"], "properties": {"method": {"type": "string"}}},
            {"required": ["id", "result"]},
            {"required": ["id", "error"]},
        ]);
    }
}

/// Every refusal an operation can answer with (one value of each kind; only its status,
/// code and field matter here).
fn errors_of(method: &str, path: &str, authed: bool, op: &Map<String, Value>) -> Vec<ApiError> {
    let s = String::new;
    let mut e = Vec::new();
    if path.starts_with("/in/") {
        // The provider-facing intake: no token, no JSON rules, the contract's refusals.
        return vec![
            ApiError::NotFound(s()),
            ApiError::MethodNotAllowed,
            ApiError::BodyTooLarge { limit: 0 },
            ApiError::InvalidSignature,
            ApiError::StaleSignature,
            ApiError::store_unavailable(s()),
        ];
    }
    if path.contains("{source}") {
        e.push(ApiError::InvalidNamespace(s()));
        if method != "put" {
            e.push(ApiError::NotFound(s()));
        }
    }
    if path.contains("{ns}") {
        e.push(ApiError::InvalidNamespace(s()));
    }
    if path.contains("{key}") {
        e.push(ApiError::InvalidKey(s()));
    }
    if op.contains_key("requestBody") {
        e.push(ApiError::InvalidJson(s()));
        e.push(ApiError::UnknownField { field: s() });
        e.push(ApiError::BodyTooLarge { limit: 0 });
    }
    if authed {
        // The token lookup reads the store, so every authenticated route can also be 503.
        e.push(ApiError::Unauthorized(s()));
        e.push(ApiError::Forbidden(s()));
        e.push(ApiError::store_unavailable(s()));
    }
    let invalid = || ApiError::invalid_field(s(), s());
    let last_segment = path.rsplit('/').next().unwrap_or_default();
    match (method, last_segment) {
        ("post", "claim") => e.push(invalid()),
        ("post", "effect") => e.extend([
            invalid(),
            ApiError::DestinationForbidden {
                field: s(),
                message: s(),
            },
            ApiError::LeaseLost,
            ApiError::InvalidTransition(s()),
        ]),
        ("post", "prepare" | "heartbeat" | "fail") => e.extend([
            invalid(),
            ApiError::NotFound(s()),
            ApiError::LeaseLost,
            ApiError::InvalidTransition(s()),
        ]),
        ("post", "complete") => e.extend([
            invalid(),
            ApiError::NotFound(s()),
            ApiError::LeaseLost,
            ApiError::InvalidTransition(s()),
            ApiError::ResultMismatch,
        ]),
        ("post", "resolve" | "approve" | "reject") => e.extend([
            invalid(),
            ApiError::NotFound(s()),
            ApiError::InvalidTransition(s()),
        ]),
        ("get", "{key}") | ("delete", "{token_id}") => e.push(ApiError::NotFound(s())),
        ("get", "keys" | "review") => e.push(invalid()),
        ("patch", "{ns}") | ("post", "pause" | "resume" | "tokens") => e.push(invalid()),
        ("post", "derive") => e.extend([invalid(), ApiError::MissingIdentityField { field: s() }]),
        ("post", "audit") => e.push(invalid()),
        ("get", "readyz") => e.push(ApiError::store_unavailable(s())),
        ("put" | "patch", "{source}") | ("get", "events") => e.push(invalid()),
        ("put", "{name}") => e.push(invalid()),
        ("get" | "delete", "{name}") => e.extend([invalid(), ApiError::NotFound(s())]),
        ("delete", "{source}") => e.extend([invalid(), ApiError::InvalidTransition(s())]),
        ("post", "redeliver") if path.contains("/events/") => {
            e.extend([invalid(), ApiError::InvalidTransition(s())])
        }
        ("post", "redeliver") => e.push(invalid()),
        _ => {}
    }
    e
}

/// Adds (or merges into an existing response) one problem+json response per status.
fn add_problems(op: &mut Map<String, Value>, errors: &[ApiError]) {
    let mut by_status: BTreeMap<u16, Vec<&'static str>> = BTreeMap::new();
    for e in errors {
        let codes = by_status.entry(e.status().as_u16()).or_default();
        if !codes.contains(&e.code()) {
            codes.push(e.code());
        }
    }
    let responses = op
        .entry("responses")
        .or_insert_with(|| json!({}))
        .as_object_mut();
    let Some(responses) = responses else { return };
    for (status, codes) in by_status {
        let list = codes
            .iter()
            .map(|c| format!("`{c}`"))
            .collect::<Vec<_>>()
            .join(", ");
        let resp = responses
            .entry(status.to_string())
            .or_insert_with(|| json!({"description": ""}));
        let desc = resp["description"].as_str().unwrap_or_default().to_owned();
        resp["description"] = json!(if desc.is_empty() {
            format!("problem+json: {list}")
        } else {
            format!("{desc}; or problem+json: {list}")
        });
        if !resp["content"].is_object() {
            resp["content"] = json!({});
        }
        resp["content"][PROBLEM_JSON] = json!({
            "schema": {
                "allOf": [{"$ref": "#/components/schemas/Problem"}],
                "properties": {"status": {"const": status}, "code": {"enum": codes}},
            }
        });
    }
}

/// The rules of request bodies that are alternatives of whole members, and the `code` list
/// of the problem document.
fn refine_schemas(schemas: &mut Map<String, Value>) {
    refine_actions(schemas);
    let (write, patch) = source_write_schemas();
    schemas.insert("SourceWrite".into(), write);
    schemas.insert("SourcePatch".into(), patch);
    // The redeliver bodies take their members and no others (400 `unknown_field`).
    for name in ["RedeliverBody", "BulkRedeliverBody"] {
        if let Some(body) = schemas.get_mut(name) {
            body["additionalProperties"] = json!(false);
        }
    }
    let not_null = json!({"not": {"type": "null"}});
    if let Some(claim) = schemas.get_mut("ClaimBody") {
        // `payload` and `fingerprint` together are 422 (a `null` counts as absent).
        claim["not"] = json!({
            "required": ["payload", "fingerprint"],
            "properties": {"payload": not_null, "fingerprint": not_null},
        });
    }
    if let Some(prepare) = schemas.get_mut("PrepareBody") {
        prepare["properties"]["payload"] = not_null.clone();
    }
    if let Some(derive) = schemas.get_mut("DeriveBody") {
        // Every pointer starts with `/`, so only an object or an array can hold a value.
        let event = &mut derive["properties"]["event"];
        if let Some(e) = event.as_object_mut() {
            e.remove("not");
            e.insert("type".into(), json!(["object", "array"]));
        }
    }
    refine_effect(schemas);
    if let Some(fail) = schemas.get_mut("FailBody") {
        // What the classifier needs (precedence kind > http_status > error.category).
        fail["anyOf"] = json!([
            {"required": ["kind"], "properties": {"kind": not_null}},
            {"required": ["http_status"], "properties": {"http_status": {"minimum": 400}}},
            {
                "required": ["error"],
                "properties": {
                    "http_status": {"type": "null"},
                    "error": {
                        "type": "object",
                        "required": ["category"],
                        "properties": {"category": {
                            "enum": ["timeout", "connection", "validation", "auth", "business"]
                        }},
                    },
                },
            },
        ]);
    }
    if let Some(audit) = schemas.get_mut("AuditBody") {
        // What the workflow reader refuses on its own (a wrong type is 422 naming the member);
        // `id` and `settings` of any type are read or ignored, never refused. Whether node
        // names are unique and what a connection from a named node holds cannot be said here.
        let p = &mut audit["properties"];
        p["id"] =
            json!({"description": "A string or number is reported; anything else is ignored."});
        p["settings"] =
            json!({"description": "`errorWorkflow` is read; anything else is ignored."});
        p["name"] = json!({"type": ["string", "null"]});
        p["connections"] = json!({
            "type": ["object", "null"],
            "description": "`{\"Node name\": {\"main\": [[{node, type, index}], …]}}`",
        });
        p["nodes"]["items"] = json!({
            "type": "object",
            "required": ["name", "type"],
            "properties": {
                "name": {"type": "string"},
                "type": {"type": "string", "minLength": 1},
                "typeVersion": {"type": ["number", "null"]},
                "parameters": {"type": ["object", "null"]},
            },
        });
    }
    if let Some(problem) = schemas.get_mut("Problem") {
        problem["properties"]["code"]["enum"] = json!(all_codes());
    }
    // Answers: every member the server always writes is required; closed sets are enums.
    for (name, optional) in [
        ("RecordDoc", &[][..]),
        ("LastErrorDoc", &[]),
        ("EventDoc", &[]),
        ("ClaimResponse", &["token", "resumed", "retry_after_ms"]),
        ("EffectResponse", &["retry_after_ms", "reconciled"]),
        ("RequestDoc", &[]),
        ("StateResponse", &[]),
        ("FailResponse", &[]),
        ("RetryDoc", &[]),
        ("RecordWithEventsDoc", &[]),
        ("ListResponse", &[]),
        ("NamespaceResponse", &[]),
        ("PolicyDoc", &[]),
        ("RetryPolicyDoc", &[]),
        ("NamespaceStatsDoc", &[]),
        ("CostTotalsDoc", &[]),
        ("EventCostDoc", &[]),
        ("EgressDoc", &[]),
        ("TokenResponse", &["label"]),
        ("DeriveResponse", &[]),
        ("StatusResponse", &[]),
    ] {
        if let Some(schema) = schemas.get_mut(name) {
            let required: Vec<String> = schema["properties"]
                .as_object()
                .map(|p| {
                    p.keys()
                        .filter(|k| !optional.contains(&k.as_str()))
                        .cloned()
                        .collect()
                })
                .unwrap_or_default();
            schema["required"] = json!(required);
        }
    }
    let states: Vec<&str> = idem::State::ALL.iter().map(|s| s.as_str()).collect();
    let mut nullable: Vec<Value> = states.iter().map(|s| json!(s)).collect();
    nullable.push(Value::Null);
    let set = |schemas: &mut Map<String, Value>, name: &str, member: &str, v: Value| {
        if let Some(p) = schemas
            .get_mut(name)
            .and_then(|s| s["properties"].get_mut(member))
        {
            let description = p.get("description").cloned();
            *p = v;
            if let Some(d) = description {
                p["description"] = d;
            }
        }
    };
    set(
        schemas,
        "RecordDoc",
        "state",
        json!({"type": "string", "enum": states}),
    );
    set(
        schemas,
        "StateResponse",
        "state",
        json!({"type": "string", "enum": states}),
    );
    set(
        schemas,
        "FailResponse",
        "state",
        json!({"type": "string", "enum": states}),
    );
    set(schemas, "EventDoc", "from_state", json!({"enum": nullable}));
    set(schemas, "EventDoc", "to_state", json!({"enum": nullable}));
    set(
        schemas,
        "EventDoc",
        "type",
        json!({"type": "string", "enum": [
            "acquired", "resumed", "duplicate_hit", "conflict", "in_flight", "prepared",
            "completed", "failed", "lease_lost", "moved_to_review", "resolved", "approved",
            "rejected", "result_expired", "alert_sent", "sent", "reconciled", "heartbeat",
        ]}),
    );
    set(
        schemas,
        "EffectResponse",
        "outcome",
        json!({"type": "string", "enum": EffectOutcome::ALL.map(EffectOutcome::as_str)}),
    );
    let outcomes: Vec<&str> = idem::ClaimOutcome::ALL.iter().map(|o| o.as_str()).collect();
    set(
        schemas,
        "ClaimResponse",
        "outcome",
        json!({"type": "string", "enum": outcomes}),
    );
    set(
        schemas,
        "FailResponse",
        "class",
        json!({"type": "string", "enum": ["retryable", "permanent", "ambiguous"]}),
    );
}

/// The effect body's members as the server reads them: header names and values, at most one
/// request body, base64 that decodes, `success` and the reconcile statuses.
fn refine_effect(schemas: &mut Map<String, Value>) {
    let url = json!({"type": "string", "maxLength": crate::api::effect_request::MAX_URL,
        "pattern": URL_PATTERN});
    // A header name idem does not set itself (compared without regard to case).
    let reserved = crate::api::effect_request::RESERVED_HEADERS
        .iter()
        .map(|h| {
            h.chars()
                .map(|c| match c {
                    'a'..='z' => format!("[{}{c}]", c.to_ascii_uppercase()),
                    '-' => "-".to_owned(),
                    c => c.to_string(),
                })
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join("|");
    let name = json!({"type": "string", "pattern": HEADER_NAME_PATTERN,
        "not": {"pattern": format!("^(?:{reserved})$")}});
    let headers = json!({"anyOf": [
        {
            "type": "object",
            "maxProperties": crate::api::effect_request::MAX_HEADERS,
            "propertyNames": name,
            // Any byte but control characters (tab allowed).
            "additionalProperties": {
                "type": "string",
                "pattern": "^[^\\x00-\\x08\\x0A-\\x1F\\x7F]*$",
            },
        },
        {"type": "null"},
    ]});
    let status = json!({"type": "integer", "minimum": 100, "maximum": 599});
    let statuses = json!({"type": "array", "items": status});
    let not_null = json!({"not": {"type": "null"}});
    if let Some(req) = schemas.get_mut("EffectRequestBody") {
        let p = &mut req["properties"];
        p["url"] = url.clone();
        p["headers"] = headers.clone();
        // Standard base64 with its padding and no stray bits (what decodes).
        p["body_base64"]["pattern"] = json!(
            "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/][AQgw]==|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=)?$"
        );
        // At most one of the three bodies (`null` counts as absent).
        let both = |a: &str, b: &str| {
            json!({"required": [a, b],
                "properties": {a: not_null.clone(), b: not_null.clone()}})
        };
        req["not"] = json!({"anyOf": [
            both("body", "body_text"),
            both("body", "body_base64"),
            both("body_text", "body_base64"),
        ]});
    }
    if let Some(rc) = schemas.get_mut("ReconcileBody") {
        let p = &mut rc["properties"];
        p["url"] = url;
        p["headers"] = headers;
        p["found"] = statuses.clone();
        p["not_found"] = statuses.clone();
    }
    if let Some(body) = schemas.get_mut("EffectBody") {
        let p = &mut body["properties"];
        let description = p["idempotency_header"]["description"].clone();
        p["idempotency_header"] = json!({
            "anyOf": [name, {"type": "null"}],
            "default": "Idempotency-Key",
            "description": description,
        });
        let description = p["success"]["description"].clone();
        p["success"] = json!({
            "anyOf": [
                {"const": "2xx"},
                {"type": "array", "minItems": 1, "items": status},
                {"type": "null"},
            ],
            "description": description,
        });
    }
}

/// Every `code` the server can answer with.
pub fn all_codes() -> Vec<&'static str> {
    ErrorCode::ALL.iter().map(|c| c.as_str()).collect()
}

/// The body of `PUT /v1/sources/{source}` (`SourceWrite`) and of its `PATCH` (`SourcePatch`:
/// every member optional, nested objects merged, `null` removes one): the members, their
/// types, ranges, lengths and forms, and no others, as the server checks them. A whole source
/// (`PUT`) is one shape per kind of provider (`oneOf` on `provider`): what its secrets look
/// like (Standard Webhooks: `whsec_` + base64), whether it needs `public_url` (hubspot,
/// twilio) or `hmac` and `event_id` (hmac), and that only hmac takes `hmac`. What no schema
/// relates is checked by the server too (422 `invalid_field`), see [`SOURCE_REFUSALS`].
fn source_write_schemas() -> (Value, Value) {
    use idem_intake::Provider;
    let int = |min: i64, max: i64| json!({"type": "integer", "minimum": min, "maximum": max});
    // An optional member may also be `null`: the server reads it as absent.
    let opt = |v: Value| json!({"anyOf": [v, {"type": "null"}]});
    // Every string member is read without U+0000.
    let text = |max: usize| json!({"type": "string", "maxLength": max, "pattern": "^[^\\x00]*$"});
    let header = |max: usize| {
        json!({"type": "string", "minLength": 1, "maxLength": max,
            "pattern": HEADER_NAME_PATTERN})
    };
    let pointer = json!({"type": "string", "maxLength": 1000, "pattern": "^(/[^\\x00]*)?$"});
    let url = json!({"type": "string", "maxLength": idem_intake::source::MAX_URL,
        "pattern": URL_PATTERN});
    let object = |required: &[&str], properties: Value| {
        let mut o = json!({"type": "object", "additionalProperties": false,
            "properties": properties});
        if !required.is_empty() {
            o["required"] = json!(required);
        }
        o
    };
    // Any secret: what `secrets[i]` takes whatever the provider.
    let secret = json!({"type": "string", "minLength": 1,
        "maxLength": idem_intake::source::MAX_SECRET_LEN,
        "pattern": "^[^\\x00-\\x1F\\x7F-\\x9F]+$"});
    // A Standard Webhooks secret: base64 of 24 to 64 bytes, `whsec_` in front or not (so
    // also one of the above).
    let sw_secret = json!({"type": "string",
        "pattern": idem::webhook::SECRET_PATTERN.replacen("^whsec_", "^(?:whsec_)?", 1)});
    let secrets = |item: Value| {
        json!({"type": "array", "minItems": 1,
            "maxItems": idem_intake::source::MAX_SECRETS, "items": item})
    };
    let retry = object(
        &[],
        json!({
            "max_attempts": opt(int(1, 1000)),
            "base_ms": opt(int(1, 86_400_000)),
            "max_ms": opt(int(1, 7 * 86_400_000)),
            "window_ms": opt(int(1, 30 * 86_400_000)),
        }),
    );
    let forward = |patch: bool| {
        object(
            if patch { &[] } else { &["url"] },
            json!({
                "url": url.clone(),
                "timeout_ms": opt(int(1, 300_000)),
                "concurrency": opt(int(1, 256)),
                "headers": opt(json!({"type": "array",
                    "maxItems": idem_intake::source::MAX_FORWARD_HEADERS,
                    "items": header(usize::from(u16::MAX))})),
                "secret": opt(json!({"type": "string", "pattern": idem::webhook::SECRET_PATTERN})),
                "retry": opt(retry.clone()),
            }),
        )
    };
    let hmac = |patch: bool| {
        let mut h = object(
            if patch {
                &[]
            } else {
                &["header", "algorithm", "encoding"]
            },
            json!({
                "header": header(200),
                "algorithm": {"enum": ["sha1", "sha256", "sha512"]},
                "encoding": {"enum": ["hex", "base64"]},
                "prefix": opt(text(100)),
                "timestamp_header": opt(header(200)),
                "signed": opt(json!({"enum": ["body", "timestamp.body"]})),
            }),
        );
        if !patch {
            // `signed: "timestamp.body"` needs the header the timestamp comes in.
            h["anyOf"] = json!([
                {"properties": {"signed": {"not": {"const": "timestamp.body"}}}},
                {"required": ["timestamp_header"],
                    "properties": {"timestamp_header": {"type": "string"}}},
            ]);
        }
        h
    };
    // Exactly one of the two (the other absent or null).
    let absent = json!({"type": "null"});
    let event_id = json!({"oneOf": [
        object(&["header"], json!({"header": header(200), "pointer": absent.clone()})),
        object(&["pointer"], json!({"pointer": pointer.clone(), "header": absent.clone()})),
    ]});
    let members = |providers: Vec<&str>, secret: Value, patch: bool| {
        json!({
            "provider": {"enum": providers},
            "secrets": secrets(secret),
            "namespace": opt(json!({"type": "string", "pattern": NAMESPACE_PATTERN})),
            "tolerance_ms": opt(int(0, 7 * 86_400_000)),
            "event_id": if patch {
                opt(object(
                    &[],
                    json!({"header": opt(header(200)), "pointer": opt(pointer.clone())}),
                ))
            } else {
                opt(event_id.clone())
            },
            "split": opt(pointer.clone()),
            "forward": forward(patch),
            "hmac": opt(hmac(patch)),
            "public_url": opt(url.clone()),
            "max_body_bytes": opt(int(1, idem_intake::source::MAX_MAX_BODY_BYTES as i64)),
            "source": opt(json!({"type": "string"})),
        })
    };
    // One shape per kind of provider (each kind's rules are the provider's own methods).
    let kinds: [fn(&Provider) -> bool; 4] = [
        |p| *p == Provider::StandardWebhooks,
        |p| p.needs_public_url(),
        |p| *p == Provider::Hmac,
        |p| *p != Provider::StandardWebhooks && *p != Provider::Hmac && !p.needs_public_url(),
    ];
    let mut shapes = Vec::new();
    for is in kinds {
        let group: Vec<Provider> = Provider::ALL.iter().copied().filter(is).collect();
        let Some(&first) = group.first() else {
            continue;
        };
        let item = if first == Provider::StandardWebhooks {
            sw_secret.clone()
        } else {
            secret.clone()
        };
        let mut required = vec!["provider", "secrets", "forward"];
        let mut m = members(group.iter().map(|p| p.as_str()).collect(), item, false);
        if first.needs_public_url() {
            required.push("public_url");
            m["public_url"] = url.clone();
        }
        if first == Provider::Hmac {
            required.extend(["hmac", "event_id"]);
            m["hmac"] = hmac(false);
            m["event_id"] = event_id.clone();
        } else {
            m["hmac"] = absent.clone();
        }
        shapes.push(object(&required, m));
    }
    let all: Vec<&str> = Provider::ALL.iter().map(|p| p.as_str()).collect();
    let write = json!({"oneOf": shapes});
    let patch = object(&[], members(all, secret.clone(), true));
    (write, patch)
}

/// What the server refuses in a source write that no schema can say (422 `invalid_field`
/// naming the member).
pub const SOURCE_REFUSALS: &str = "`invalid_field`: `source` differs from the path's name; \
     `forward.retry.max_ms` below `forward.retry.base_ms`; a URL (`forward.url`, \
     `public_url`) whose host or port is not valid by the URL standard";
