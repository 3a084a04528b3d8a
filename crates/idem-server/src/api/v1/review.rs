//! The operator side of a key: resolve a record a person must decide, approve or reject a
//! prepared payload. Each action is recorded with who did it (the token's label or role).
//! And the review queue across namespaces (`GET /v1/review`), which the console's queue page
//! reads through the same [`review_page`], so both show exactly the same records to the same
//! token.
//!
//! Invariant: a request refused while reading its input never reaches the store.

use axum::extract::RawQuery;
use axum::routing::{get, post};
use axum::Json;
use idem::{Namespace, Op, Record, ResolveAction, ResolveRequest, ReviewQuery, Role};
use serde::Serialize;
use serde_json::Value;
use utoipa::{OpenApi, ToSchema};

use super::keys::filter_text;
use super::shared::{query_limit, query_pairs, state_write, Acting, Authed};
use crate::api::{NoteBody, RecordDoc, StateResponse, QUEUE_STATES};
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::fields::{ExternalRef, Note};
use crate::input::{Body, NsKey};
use crate::route::{r, Route};
use crate::state::AppState;

/// The routes of this file.
pub fn routes() -> Vec<Route> {
    use Role::Operator;
    vec![
        r("get", "/v1/review", Some(Operator), get(review_queue)),
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
    paths(review_queue, resolve, approve, reject),
    components(schemas(ResolveBody, ResolveActionDoc, ReviewResponse))
)]
pub struct Doc;

crate::fields::request_body! {
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
    Authed { st, caller }: Authed,
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

/// `GET /v1/review`.
#[derive(Serialize, ToSchema)]
pub struct ReviewResponse {
    #[schema(value_type = Vec<RecordDoc>)]
    pub items: Vec<Record>,
    /// null at the end.
    pub next_cursor: Option<String>,
}

/// Reads the review queue's query string (`namespace, state, owner, correlation_id, limit,
/// cursor`; empty values count as absent) and applies the caller's scope: a token of one
/// namespace asking for another is refused (403), and without a `namespace` it sees its own.
pub fn review_query(caller: &Caller, raw: &str) -> ApiResult<ReviewQuery> {
    let mut q = ReviewQuery {
        limit: 100,
        ..ReviewQuery::default()
    };
    for (k, v) in query_pairs(Some(raw)) {
        match k.as_ref() {
            "namespace" => {
                q.namespace = Some(
                    Namespace::try_from(v.as_ref())
                        .map_err(|e| ApiError::invalid_field("namespace", e.to_string()))?,
                )
            }
            "state" => {
                q.state = Some(
                    idem::State::parse(&v)
                        .filter(|s| QUEUE_STATES.contains(s))
                        .ok_or_else(|| {
                            ApiError::invalid_field(
                                "state",
                                format!(
                                    "{v:?} is not a review state \
                                     (needs_review, awaiting_approval, processing)"
                                ),
                            )
                        })?,
                )
            }
            "owner" => q.owner = Some(filter_text("owner", &v)?),
            "correlation_id" => q.correlation_id = Some(filter_text("correlation_id", &v)?),
            "limit" => q.limit = query_limit(&v)?,
            "cursor" => q.cursor = Some(v.into_owned()),
            _ => {}
        }
    }
    if let Caller::Token(t) = caller {
        if t.scope != "*" {
            match &q.namespace {
                Some(ns) => caller.authorize(Role::Operator, Some(ns))?,
                None => {
                    q.namespace = Some(
                        Namespace::try_from(t.scope.as_str())
                            .map_err(|_| ApiError::internal("a token scope is not a namespace"))?,
                    )
                }
            }
        }
    }
    Ok(q)
}

/// One page of the review queue for `caller` (see [`review_query`]).
pub async fn review_page(st: &AppState, q: &ReviewQuery) -> ApiResult<idem::ReviewPage> {
    Ok(st.ledger.store().review_queue(q, st.ledger.now()).await?)
}

/// The review queue across namespaces, oldest `updated_at` first (operator): records in
/// `needs_review` and `awaiting_approval`, and `processing` past its namespace's
/// `stuck_after_ms`. A token scoped to one namespace sees that namespace only.
#[utoipa::path(get, path = "/v1/review", tag = "operator",
    params(
        ("namespace" = Option<String>, Query, description = "only this namespace (empty: every namespace the token may see)"),
        ("state" = Option<String>, Query, description = "needs_review, awaiting_approval or processing (stuck only); empty: all three"),
        ("owner" = Option<String>, Query, description = "only records with this owner (empty: any)"),
        ("correlation_id" = Option<String>, Query, description = "only records with this correlation id (empty: any)"),
        ("limit" = Option<u32>, Query, description = "1 to 1000, default 100 (empty: the default)"),
        ("cursor" = Option<String>, Query, description = "next_cursor of the previous page as is (empty: the first page)")),
    responses((status = 200, description = "one page, oldest updated_at first", body = ReviewResponse)))]
pub async fn review_queue(
    Authed { st, caller }: Authed,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<ReviewResponse>> {
    let q = review_query(&caller, raw.as_deref().unwrap_or_default())?;
    let page = review_page(&st, &q).await?;
    Ok(Json(ReviewResponse {
        items: page.items,
        next_cursor: page.next_cursor,
    }))
}
