//! The schema pass of the OpenAPI document: the request-body rules JSON Schema can only state
//! as alternatives (`anyOf`/`oneOf`/`not`), the effect and action bodies as the server reads
//! them, the source write shapes, and the `code` list of the problem document.
//!
//! It edits `components/schemas` only and must never touch an operation, nor state a rule the
//! server does not apply (what no schema can relate is listed in [`SOURCE_REFUSALS`]).

use serde_json::{json, Map, Value};

use super::patterns::{HEADER_NAME_PATTERN, NAMESPACE_PATTERN, URL_PATTERN};
use crate::error::ErrorCode;
use crate::outcome::EffectOutcome;

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

/// The rules of request bodies that are alternatives of whole members, and the `code` list
/// of the problem document.
pub(super) fn refine_schemas(schemas: &mut Map<String, Value>) {
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
