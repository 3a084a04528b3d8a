//! Actions as a resource (`ACTIONS.md`): `PUT/GET/DELETE /v1/namespaces/{ns}/actions/{name}`
//! (admin writes, operator reads), `GET /v1/namespaces/{ns}/actions`, and the route of the
//! MCP endpoint `POST /mcp/{ns}` (worker; its handler is `crate::actions::mcp::mcp`).
//!
//! The rules of an action document are `crate::actions::model`'s. What this file must never
//! do: answer, log or store in the document a header value (reads show `header_hints`), or
//! write anything for a refused request.

use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use axum::Json;
use idem::{ActionWrite, Namespace, Role, Secret};
use serde_json::{json, Value};
use utoipa::{OpenApi, ToSchema};

use super::shared::Authed;
use crate::actions::model::{self, Action, Headers};
use crate::actions::{load, load_all, Loaded};
use crate::error::{ApiError, ApiResult};
use crate::input::{parse_namespace, JsonBody};
use crate::route::{r, Route};
use crate::state::AppState;

/// The routes of this file.
pub fn routes() -> Vec<Route> {
    use Role::{Admin, Operator, Worker};
    vec![
        r(
            "get",
            "/v1/namespaces/{ns}/actions",
            Some(Operator),
            get(list_actions),
        ),
        r(
            "put",
            "/v1/namespaces/{ns}/actions/{name}",
            Some(Admin),
            put(put_action),
        ),
        r(
            "get",
            "/v1/namespaces/{ns}/actions/{name}",
            Some(Operator),
            get(get_action),
        ),
        r(
            "delete",
            "/v1/namespaces/{ns}/actions/{name}",
            Some(Admin),
            delete(delete_action),
        ),
        r(
            "post",
            "/mcp/{ns}",
            Some(Worker),
            post(crate::actions::mcp::mcp),
        ),
    ]
}

/// The OpenAPI of this file.
#[derive(OpenApi)]
#[openapi(
    paths(
        list_actions,
        put_action,
        get_action,
        delete_action,
        crate::actions::mcp::mcp
    ),
    components(schemas(
        ActionWriteDoc,
        ActionDoc,
        ActionList,
        DeliverDoc,
        HttpDeliverDoc,
        McpDeliverDoc,
        crate::actions::mcp::McpMessage,
        crate::actions::mcp::McpAnswer
    ))
)]
pub struct Doc;

/// A free-form JSON object.
#[derive(ToSchema)]
pub struct Object;

/// `deliver.http`: the request an effect would send, with `{{name}}` placeholders.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct HttpDeliverDoc {
    /// POST, PUT, PATCH or DELETE.
    #[schema(pattern = "^(POST|PUT|PATCH|DELETE)$")]
    method: String,
    /// http(s) URL; `{{name}}` is replaced by the argument, percent-encoded.
    #[schema(max_length = 2048)]
    url: String,
    /// Header → string (`{{name}}` allowed); secrets: never answered, only their hints.
    #[schema(value_type = Option<Object>)]
    headers: Option<Value>,
    /// JSON body with placeholders; without it the arguments object is sent.
    #[schema(value_type = Option<Value>)]
    body: Option<Value>,
    /// As for an effect; null sends none.
    #[schema(value_type = Option<String>)]
    idempotency_header: Option<String>,
    #[schema(minimum = 1, maximum = 300_000)]
    timeout_ms: Option<i64>,
    #[schema(value_type = Option<Value>)]
    success: Option<Value>,
    destination_idempotent: Option<bool>,
    #[schema(value_type = Option<Object>)]
    reconcile: Option<Value>,
}

/// `deliver.mcp`: a tool of an upstream MCP server (Streamable HTTP) called with the
/// arguments; its `CallToolResult` is the response.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct McpDeliverDoc {
    /// http(s) URL of the upstream's MCP endpoint, taken as written.
    #[schema(max_length = 2048)]
    url: String,
    /// The upstream tool's name.
    #[schema(min_length = 1, max_length = 128)]
    tool: String,
    /// Header → string, sent on every request to the upstream; secrets: never answered, only
    /// their hints.
    #[schema(value_type = Option<Object>)]
    headers: Option<Value>,
    /// The whole call, handshake included; default 30000.
    #[schema(minimum = 1, maximum = 300_000)]
    timeout_ms: Option<i64>,
}

/// `deliver`: exactly one of `http` or `mcp`.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct DeliverDoc {
    http: Option<HttpDeliverDoc>,
    mcp: Option<McpDeliverDoc>,
}

/// `PUT …/actions/{name}`.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct ActionWriteDoc {
    #[schema(max_length = 200)]
    title: Option<String>,
    /// Shown to the agent (required, at most 4000 characters).
    #[schema(min_length = 1, max_length = 4000)]
    description: String,
    /// JSON Schema (draft 2020-12) of the arguments, `"type": "object"`.
    #[schema(value_type = Object)]
    input_schema: Value,
    /// Template over the arguments: `"{order_id}:followup:v1"`.
    #[schema(min_length = 1, max_length = 255)]
    key: String,
    /// Argument names whose values make the fingerprint (default: the names in `key`).
    identity: Option<Vec<String>>,
    deliver: DeliverDoc,
    /// none (default) or required.
    #[schema(pattern = "^(none|required)$")]
    approval: Option<String>,
    /// response (default) or summary.
    #[schema(pattern = "^(response|summary)$")]
    result: Option<String>,
}

/// An action as reads show it (header values only as `header_hints`).
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct ActionDoc {
    name: String,
    namespace: String,
    title: Option<String>,
    description: String,
    #[schema(value_type = Object)]
    input_schema: Value,
    key: String,
    identity: Vec<String>,
    #[schema(value_type = Object)]
    deliver: Value,
    approval: String,
    result: String,
    /// Header name → its last 4 characters (empty for values of 8 characters or fewer).
    #[schema(value_type = Object)]
    header_hints: Value,
    created_at: String,
    updated_at: String,
}

#[derive(ToSchema)]
#[allow(dead_code)]
pub struct ActionList {
    items: Vec<ActionDoc>,
}

fn read_shape(ns: &Namespace, l: &Loaded) -> Value {
    let a = &l.action;
    let d = &a.doc;
    let mut hints = Headers::hints(&l.headers.request);
    if !l.headers.reconcile.is_empty() {
        hints["reconcile"] = Headers::hints(&l.headers.reconcile);
    }
    json!({
        "name": a.name,
        "namespace": ns.as_str(),
        "title": a.title,
        "description": a.description,
        "input_schema": a.input_schema,
        "key": d.get("key"),
        "identity": a.identity,
        "deliver": d.get("deliver"),
        "approval": match a.approval { model::Approval::None => "none", model::Approval::Required => "required" },
        "result": match a.result { model::ResultMode::Response => "response", model::ResultMode::Summary => "summary" },
        "header_hints": hints,
        "created_at": l.created_at.to_rfc3339(),
        "updated_at": l.updated_at.to_rfc3339(),
    })
}

fn ns_of(raw: &str) -> ApiResult<Namespace> {
    parse_namespace(raw)
}

fn name_of(raw: &str) -> ApiResult<String> {
    if model::valid_name(raw) {
        Ok(raw.to_owned())
    } else {
        Err(ApiError::invalid_field(
            "name",
            "an action name is 1-64 characters of A-Z, a-z, 0-9, `_` and `-`",
        ))
    }
}

async fn existing(st: &AppState, ns: &Namespace, name: &str) -> ApiResult<Loaded> {
    load(st, ns, name)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no action named {name:?} in this namespace")))
}

/// Writes an action (and its header values) from a document, validated first; `true` when
/// created. Used by `PUT` and by the config file at start.
pub async fn write(
    store: &dyn idem::Store,
    now: idem::Timestamp,
    ns: &Namespace,
    name: &str,
    body: &Value,
) -> ApiResult<bool> {
    let input = Action::parse(name, body)?;
    let w = ActionWrite {
        namespace: ns.as_str().to_owned(),
        name: name.to_owned(),
        config: input.action.doc.to_string(),
        headers: (!input.headers.is_empty()).then(|| Secret::new(input.headers.to_secret_text())),
    };
    let created = store.action_put(w, now).await?;
    tracing::info!(namespace = %ns, action = name, created, "action written");
    Ok(created)
}

/// List a namespace's actions (operator).
#[utoipa::path(get, path = "/v1/namespaces/{ns}/actions", tag = "actions",
    params(("ns" = String, Path)),
    responses((status = 200, description = "the namespace's actions, by name", body = ActionList)))]
pub async fn list_actions(
    Authed { st, .. }: Authed,
    Path(ns): Path<String>,
) -> ApiResult<Json<Value>> {
    let ns = ns_of(&ns)?;
    let items: Vec<Value> = load_all(&st, &ns)
        .await?
        .iter()
        .map(|l| read_shape(&ns, l))
        .collect();
    Ok(Json(json!({ "items": items })))
}

/// Create or replace an action (admin): 201 when created, 200 when replaced.
#[utoipa::path(put, path = "/v1/namespaces/{ns}/actions/{name}", tag = "actions",
    operation_id = "put_action",
    params(("ns" = String, Path), ("name" = String, Path, description = "the tool name: 1-64 of A-Z a-z 0-9 _ -")),
    request_body = ActionWriteDoc,
    responses(
        (status = 201, description = "created", body = ActionDoc),
        (status = 200, description = "replaced", body = ActionDoc)))]
pub async fn put_action(
    Authed { st, .. }: Authed,
    Path((ns, name)): Path<(String, String)>,
    JsonBody(body): JsonBody,
) -> ApiResult<Response> {
    let ns = ns_of(&ns)?;
    let name = name_of(&name)?;
    let created = write(
        st.ledger.store().as_ref(),
        st.ledger.now(),
        &ns,
        &name,
        &body,
    )
    .await?;
    st.actions.forget(ns.as_str(), &name);
    let l = existing(&st, &ns, &name).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(read_shape(&ns, &l))).into_response())
}

/// Read an action (operator).
#[utoipa::path(get, path = "/v1/namespaces/{ns}/actions/{name}", tag = "actions",
    params(("ns" = String, Path), ("name" = String, Path)),
    responses((status = 200, description = "the action", body = ActionDoc)))]
pub async fn get_action(
    Authed { st, .. }: Authed,
    Path((ns, name)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    let ns = ns_of(&ns)?;
    let name = name_of(&name)?;
    let l = existing(&st, &ns, &name).await?;
    Ok(Json(read_shape(&ns, &l)))
}

/// Delete an action (admin); the records of its calls stay.
#[utoipa::path(delete, path = "/v1/namespaces/{ns}/actions/{name}", tag = "actions",
    params(("ns" = String, Path), ("name" = String, Path)),
    responses((status = 204, description = "deleted")))]
pub async fn delete_action(
    Authed { st, .. }: Authed,
    Path((ns, name)): Path<(String, String)>,
) -> ApiResult<Response> {
    let ns = ns_of(&ns)?;
    let name = name_of(&name)?;
    let deleted = st.ledger.store().action_delete(ns.as_str(), &name).await;
    st.actions.forget(ns.as_str(), &name);
    if !deleted? {
        return Err(ApiError::NotFound(format!(
            "no action named {name:?} in this namespace"
        )));
    }
    tracing::info!(namespace = %ns, action = %name, "action deleted");
    Ok(StatusCode::NO_CONTENT.into_response())
}
