//! `POST /v1/tokens` (admin): API tokens made over the API. The secret is generated here,
//! shown once in the answer and stored only as its hash.
//!
//! What this must never do: log or store a secret, create the first token (that switches
//! auth on for every client, so it is made at the command line), or create a token wider
//! than the creating token's scope.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Json};
use idem::{Namespace, NewApiToken, Role};
use serde::Serialize;
use utoipa::{OpenApi, ToSchema};

use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::fields::{Label, ScopeText};
use crate::input::{read_body, JsonBody};
use crate::routes::{r, Route};
use crate::state::AppState;

/// The routes of this file.
pub fn routes() -> Vec<Route> {
    vec![r(
        "post",
        "/v1/tokens",
        Some(Role::Admin),
        post(create_token),
    )]
}

/// The OpenAPI of this file.
#[derive(OpenApi)]
#[openapi(
    paths(create_token),
    components(schemas(TokenBody, TokenResponse, RoleDoc))
)]
pub struct Doc;

crate::request_body! {
    required;
    /// `POST /v1/tokens` (admin).
    #[derive(Debug, ToSchema)]
    #[serde(deny_unknown_fields)]
    pub struct TokenBody {
        #[schema(value_type = RoleDoc)]
        pub role: Role,
        /// A namespace, or `*` for all.
        #[schema(value_type = String, pattern = "^([A-Za-z0-9._:-]{1,128}|\\*)$")]
        pub namespace: ScopeText,
        /// Recorded as the actor of the token's operator actions; at most 255 characters, no NUL.
        #[schema(value_type = Option<String>, max_length = 255, pattern = "^[^\\x00]*$")]
        pub label: Option<Label>,
    }
}

/// A token's role (each includes the ones before it).
#[derive(ToSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub enum RoleDoc {
    Worker,
    Operator,
    Admin,
}

#[derive(Serialize, ToSchema)]
pub struct TokenResponse {
    /// The secret: shown once, stored only as a hash.
    pub token: String,
    pub role: &'static str,
    pub namespace: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// Create an API token; the secret is shown once (admin).
///
/// Only a server that already has tokens creates them here: the first token switches auth on
/// for every client, so it is made at the command line (`idem token create`), and without
/// tokens this answers 403 `forbidden`, writing nothing.
#[utoipa::path(post, path = "/v1/tokens", tag = "admin", request_body = TokenBody,
    responses((status = 201, description = "the new token (its secret is never shown again)", body = TokenResponse)))]
pub async fn create_token(
    State(st): State<AppState>,
    Extension(caller): Extension<Caller>,
    JsonBody(body): JsonBody,
) -> ApiResult<Response> {
    if matches!(caller, Caller::Anonymous) {
        return Err(ApiError::Forbidden(FIRST_TOKEN_AT_THE_COMMAND_LINE.into()));
    }
    let TokenBody {
        role,
        namespace,
        label,
    } = read_body(body)?;
    let scope = namespace.into_string();
    if scope != "*" {
        Namespace::try_from(scope.as_str())
            .map_err(|e| ApiError::invalid_field("namespace", e.to_string()))?;
    }
    let label = label.map(Label::into_string);
    if !caller.covers_scope(&scope) {
        return Err(ApiError::Forbidden(
            "a token can only be created within the creating token's scope".into(),
        ));
    }
    let secret = idem::generate_secret();
    st.ledger
        .store()
        .create_token(
            NewApiToken {
                secret_hash: idem::hash_secret(&secret),
                role,
                scope: scope.clone(),
                label: label.clone(),
            },
            st.ledger.now(),
        )
        .await?;
    st.auth.invalidate();
    tracing::info!(
        role = role.as_str(),
        scope,
        actor = caller.actor(),
        "token created"
    );
    let body = TokenResponse {
        token: secret,
        role: role.as_str(),
        namespace: scope,
        label,
    };
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

/// Why a server without tokens refuses to create one over the API.
pub const FIRST_TOKEN_AT_THE_COMMAND_LINE: &str = "this server has no API tokens, so its API \
    is open to every local client; creating the first token would lock all of them out. \
    Create it at the command line: idem token create --namespace <ns|'*'> --role \
    <worker|operator|admin> (with the server's --db); then call this with an admin token";
