//! The per-operation pass of the OpenAPI document: path and query parameters with their
//! limits, the problem+json answers an operation can give (built from `ApiError` itself), the
//! 422 refusals its schema cannot express, and which bodies may be left out.
//!
//! It edits one operation object at a time and must never touch `components/schemas` (the
//! schema pass owns those) nor document a status the error type does not map to.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::patterns::{KEY_PATTERN, NAMESPACE_PATTERN, PROBLEM_JSON};
use super::schemas::SOURCE_REFUSALS;
use crate::error::ApiError;

/// The path parameters `{ns}` and `{key}`, and the list's query parameters, with the limits
/// the server applies.
pub(super) fn describe_params(op: &mut Map<String, Value>) {
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
pub(super) fn describe_contract_refusals(op: &mut Map<String, Value>) {
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
pub(super) fn body_optional(method: &str, path: &str) -> bool {
    let last = path.rsplit('/').next().unwrap_or_default();
    method == "post" && matches!(last, "claim" | "approve" | "reject" | "pause" | "resume")
}

/// Every refusal an operation can answer with (one value of each kind; only its status,
/// code and field matter here).
pub(super) fn errors_of(
    method: &str,
    path: &str,
    authed: bool,
    op: &Map<String, Value>,
) -> Vec<ApiError> {
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
            ApiError::ResultMismatch { field: "result" },
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
pub(super) fn add_problems(op: &mut Map<String, Value>, errors: &[ApiError]) {
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
