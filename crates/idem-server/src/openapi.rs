//! The OpenAPI document, generated from the handlers' `#[utoipa::path]` annotations and the
//! shapes of each resource file (`api::v1::*::Doc`, merged here), then completed from the route table and the error type so that it says
//! what the server does:
//!
//! - security from the route table's role column: a route with a role takes a bearer token
//!   (needed once any token exists; a server without tokens, loopback only, takes calls
//!   without one); the probes and this document take none;
//! - the `{ns}` and `{key}` path parameters with their real limits;
//! - every problem+json answer an operation can give, by status, built from [`ApiError`](crate::error::ApiError)
//!   itself (status and `code`), so a status cannot be documented that the error type does
//!   not map to;
//! - the request-body rules JSON Schema can only state as alternatives (`anyOf`/`not`).
//!
//! It is given the route table and the resources' `Doc`s by the assembly
//! ([`crate::routes`]), and imports neither. A test checks that every route of `routes::routes()` is in it and that
//! nothing else is.

mod operations;
mod patterns;
mod schemas;

use serde_json::{json, Value};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::api::{
    EventCostDoc, EventDoc, LastErrorDoc, LeaseExpiryDoc, NoteBody, RecordDoc, RecordWithEventsDoc,
    RequestDoc, StateResponse,
};
use crate::error::Problem;
use crate::route::Route;
pub use operations::contract_refusals;
use operations::{
    add_problems, body_optional, describe_contract_refusals, describe_params, errors_of,
};
pub use patterns::{
    HEADER_NAME_PATTERN, KEY_PATTERN, NAMESPACE_PATTERN, PROBLEM_JSON, URL_PATTERN,
};
use schemas::refine_schemas;
pub use schemas::{all_codes, SOURCE_REFUSALS};

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
