//! The operator side of a key: resolve a record a person must decide, approve or reject a
//! prepared payload. Each action is recorded with who did it (the token's label or role).
//!
//! Invariant: a request refused while reading its input never reaches the store.

use axum::extract::State;
use axum::routing::post;
use axum::{Extension, Json};
use idem::{Op, ResolveAction, ResolveRequest, Role};
use serde_json::Value;
use utoipa::{OpenApi, ToSchema};

use super::shared::{state_write, Acting};
use crate::api::{NoteBody, StateResponse};
use crate::auth::Caller;
use crate::error::ApiResult;
use crate::fields::{ExternalRef, Note};
use crate::input::{Body, NsKey};
use crate::routes::{r, Route};
use crate::state::AppState;

/// The routes of this file.
pub fn routes() -> Vec<Route> {
    use Role::Operator;
    vec![
        r(
            "post",
            "/v1/namespaces/{ns}/keys/{key}/resolve",
            Some(Operator),
            post(resolve),
        ),
        r(
            "post",
            "/v1/namespaces/{ns}/keys/{key}/approve",
            Some(Operator),
            post(approve),
        ),
        r(
            "post",
            "/v1/namespaces/{ns}/keys/{key}/reject",
            Some(Operator),
            post(reject),
        ),
    ]
}

/// The OpenAPI of this file.
#[derive(OpenApi)]
#[openapi(
    paths(resolve, approve, reject),
    components(schemas(ResolveBody, ResolveActionDoc))
)]
pub struct Doc;

crate::request_body! {
    required;
    /// `POST …/resolve` (operator).
    #[derive(Debug, ToSchema)]
    #[serde(deny_unknown_fields)]
    pub struct ResolveBody {
        #[schema(value_type = ResolveActionDoc)]
        pub action: ResolveAction,
        #[schema(value_type = Option<String>, max_length = 512, pattern = "^[^\\x00]*$")]
        pub external_ref: Option<ExternalRef>,
        pub result: Option<Value>,
        /// Why (required, 1 to 2000 characters, no NUL; recorded with who).
        #[schema(value_type = String, min_length = 1, max_length = 2000, pattern = "^[^\\x00]*$")]
        pub note: Note,
    }
}

/// What an operator decides.
#[derive(ToSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub enum ResolveActionDoc {
    Completed,
    Retry,
    FailedPermanent,
}

/// Decide an ambiguous or failed record (operator).
#[utoipa::path(post, path = "/v1/namespaces/{ns}/keys/{key}/resolve", tag = "operator",
    params(("ns" = String, Path), ("key" = String, Path)), request_body = ResolveBody,
    responses((status = 200, description = "the decision is recorded", body = StateResponse)))]
pub async fn resolve(
    State(st): State<AppState>,
    Extension(caller): Extension<Caller>,
    nk: NsKey,
    Body(body): Body<ResolveBody>,
) -> ApiResult<Json<StateResponse>> {
    let op = Op::Resolve(ResolveRequest {
        action: body.action,
        external_ref: body.external_ref.map(ExternalRef::into_string),
        result: body.result,
        note: body.note.into_string(),
    });
    state_write(&st, &nk, "resolve", op, caller.actor()).await
}

/// Approve a prepared payload waiting for a person (operator).
#[utoipa::path(post, path = "/v1/namespaces/{ns}/keys/{key}/approve", tag = "operator",
    params(("ns" = String, Path), ("key" = String, Path)), request_body = NoteBody,
    responses((status = 200, description = "the decision is recorded", body = StateResponse)))]
pub async fn approve(req: Acting<NsKey, NoteBody>) -> ApiResult<Json<StateResponse>> {
    decide(req, "approve", |note| Op::Approve { note }).await
}

/// Reject a prepared payload waiting for a person (operator).
#[utoipa::path(post, path = "/v1/namespaces/{ns}/keys/{key}/reject", tag = "operator",
    params(("ns" = String, Path), ("key" = String, Path)), request_body = NoteBody,
    responses((status = 200, description = "the decision is recorded", body = StateResponse)))]
pub async fn reject(req: Acting<NsKey, NoteBody>) -> ApiResult<Json<StateResponse>> {
    decide(req, "reject", |note| Op::Reject { note }).await
}

/// A person's decision on a prepared payload, recorded with who made it.
async fn decide(
    req: Acting<NsKey, NoteBody>,
    name: &str,
    op: impl FnOnce(Option<String>) -> Op,
) -> ApiResult<Json<StateResponse>> {
    let op = op(req.body.into_note());
    state_write(&req.st, &req.path, name, op, req.caller.actor()).await
}
