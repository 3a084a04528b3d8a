//! API tokens over the API: `POST /v1/tokens` (admin) makes one, with an optional lifetime;
//! the secret is generated here, shown once in the answer and stored only as its hash.
//! `GET /v1/tokens` lists the live ones, `DELETE /v1/tokens/{token_id}` revokes one (both
//! admin) and `GET /v1/whoami` tells any caller who it is.
//!
//! What this must never do: log, store or list a secret or its hash, create the first token
//! (that switches auth on for every client, so it is made at the command line), create a
//! token wider than the creating token's scope, or revoke the last live admin token (nobody
//! could manage tokens over the API any more).

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Extension, Json};
use idem::{ApiToken, Namespace, NewApiToken, Role};
use serde::Serialize;
use utoipa::{OpenApi, ToSchema};

use super::shared::Authed;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::fields::{ExpiresInMs, Label, ScopeText};
use crate::input::{path_params, read_body, JsonBody};
use crate::route::{r, Route};
use crate::state::AppState;

/// The routes of this file.
pub fn routes() -> Vec<Route> {
    vec![
        r("post", "/v1/tokens", Some(Role::Admin), post(create_token)),
        r("get", "/v1/tokens", Some(Role::Admin), get(list_tokens)),
        r(
            "delete",
            "/v1/tokens/{token_id}",
            Some(Role::Admin),
            delete(revoke_token),
        ),
        r("get", "/v1/whoami", Some(Role::Worker), get(whoami)),
    ]
}

/// The OpenAPI of this file.
#[derive(OpenApi)]
#[openapi(
    paths(create_token, list_tokens, revoke_token, whoami),
    components(schemas(TokenBody, TokenResponse, RoleDoc, TokenInfo, TokenList, WhoAmI))
)]
pub struct Doc;

crate::fields::request_body! {
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
        /// Lifetime in milliseconds (1 ms to about 10 years); absent: the token never expires.
        #[schema(value_type = Option<i64>, minimum = 1, maximum = 315_360_000_000_i64)]
        pub expires_in_ms: Option<ExpiresInMs>,
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
    pub token_id: i64,
    /// RFC 3339; `null` when the token never expires.
    pub expires_at: Option<String>,
}

/// Create an API token; the secret is shown once (admin).
///
/// Only a server that already has tokens creates them here: the first token switches auth on
/// for every client, so it is made at the command line (`idem token create`), and without
/// tokens this answers 403 `forbidden`, writing nothing.
#[utoipa::path(post, path = "/v1/tokens", tag = "admin", request_body = TokenBody,
    responses((status = 201, description = "the new token (its secret is never shown again)", body = TokenResponse)))]
pub async fn create_token(
    Authed { st, caller }: Authed,
    JsonBody(body): JsonBody,
) -> ApiResult<Response> {
    if matches!(caller, Caller::Anonymous) {
        return Err(ApiError::Forbidden(FIRST_TOKEN_AT_THE_COMMAND_LINE.into()));
    }
    let TokenBody {
        role,
        namespace,
        label,
        expires_in_ms,
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
    let now = st.ledger.now();
    let expires_at = expires_in_ms.map(|ms| now.plus_ms(ms.0));
    let secret_hash = idem::hash_secret(&secret);
    st.ledger
        .store()
        .create_token(
            NewApiToken {
                secret_hash: secret_hash.clone(),
                role,
                scope: scope.clone(),
                label: label.clone(),
                expires_at,
            },
            now,
        )
        .await?;
    st.auth.invalidate();
    tracing::info!(
        role = role.as_str(),
        scope,
        actor = caller.actor(),
        "token created"
    );
    // The id is the store's; read it back by the hash just written.
    let token_id = st
        .ledger
        .store()
        .find_token(&secret_hash)
        .await?
        .map(|t| t.id)
        .ok_or_else(|| ApiError::internal("the token just created cannot be found"))?;
    let body = TokenResponse {
        token: secret,
        role: role.as_str(),
        namespace: scope,
        label,
        token_id,
        expires_at: expires_at.map(|t| t.to_rfc3339()),
    };
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

/// Why a server without tokens refuses to create one over the API.
pub const FIRST_TOKEN_AT_THE_COMMAND_LINE: &str = "this server has no API tokens, so its API \
    is open to every local client; creating the first token would lock all of them out. \
    Create it at the command line: idem token create --namespace <ns|'*'> --role \
    <worker|operator|admin> (with the server's --db); then call this with an admin token";

/// One live token as listed: never its secret or hash.
#[derive(Serialize, ToSchema)]
pub struct TokenInfo {
    pub token_id: i64,
    #[schema(value_type = RoleDoc)]
    pub role: &'static str,
    /// A namespace, or `*` for all.
    pub namespace: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339; `null` when the token never expires.
    pub expires_at: Option<String>,
    /// RFC 3339, recorded at most about once a minute; `null` before the first use.
    pub last_used_at: Option<String>,
}

impl From<&ApiToken> for TokenInfo {
    fn from(t: &ApiToken) -> Self {
        TokenInfo {
            token_id: t.id,
            role: t.role.as_str(),
            namespace: t.scope.clone(),
            label: t.label.clone(),
            created_at: t.created_at.to_rfc3339(),
            expires_at: t.expires_at.map(|e| e.to_rfc3339()),
            last_used_at: t.last_used_at.map(|e| e.to_rfc3339()),
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct TokenList {
    /// Live tokens (expired ones included, revoked ones not), oldest first.
    pub items: Vec<TokenInfo>,
}

/// List the live API tokens within the caller's scope, never their secrets (admin).
#[utoipa::path(get, path = "/v1/tokens", tag = "admin",
    responses((status = 200, description = "the live tokens, oldest first", body = TokenList)))]
pub async fn list_tokens(Authed { st, caller }: Authed) -> ApiResult<Json<TokenList>> {
    let tokens = st.ledger.store().list_tokens().await?;
    // An admin scoped to one namespace sees only the tokens of that namespace.
    Ok(Json(TokenList {
        items: tokens
            .iter()
            .filter(|t| caller.covers_scope(&t.scope))
            .map(TokenInfo::from)
            .collect(),
    }))
}

/// The `{token_id}` path segment; anything but a token id is an unknown token (404).
pub struct TokenIdPath(pub i64);

impl FromRequestParts<AppState> for TokenIdPath {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, _: &AppState) -> Result<Self, ApiError> {
        path_params(parts)
            .await?
            .into_iter()
            .find(|(k, _)| k == "token_id")
            .and_then(|(_, v)| v.parse::<i64>().ok())
            .map(TokenIdPath)
            .ok_or_else(unknown_token)
    }
}

fn unknown_token() -> ApiError {
    ApiError::NotFound("no live token has this id".into())
}

/// Revoke an API token at once, on every instance (admin).
///
/// The last live admin token (expired ones do not count) is not revoked here: nobody could
/// manage tokens over the API afterwards. Create another admin token first, or revoke it at
/// the command line (`idem token revoke`). Revoked tokens still count as configured, so
/// revoking every token never switches auth off.
#[utoipa::path(delete, path = "/v1/tokens/{token_id}", tag = "admin",
    params(("token_id" = i64, Path, description = "the token's id, from GET /v1/tokens")),
    responses((status = 204, description = "revoked: refused from the next call on")))]
pub async fn revoke_token(
    Authed { st, caller }: Authed,
    TokenIdPath(id): TokenIdPath,
) -> ApiResult<Response> {
    let store = st.ledger.store();
    let now = st.ledger.now();
    let live = store.list_tokens().await?;
    // Tokens outside the caller's scope are not listed to it, so they are unknown here too.
    let target = live
        .iter()
        .find(|t| t.id == id && caller.covers_scope(&t.scope))
        .ok_or_else(unknown_token)?;
    let other_admins = live
        .iter()
        .filter(|t| t.id != id && t.role == Role::Admin && !t.expired(now))
        .count();
    if target.role == Role::Admin && !target.expired(now) && other_admins == 0 {
        return Err(ApiError::Forbidden(
            "this is the last live admin token: create another admin token first, or revoke \
             it at the command line (idem token revoke)"
                .into(),
        ));
    }
    if !store.revoke_token(id, now).await? {
        return Err(unknown_token());
    }
    st.auth.invalidate();
    tracing::info!(token_id = id, actor = caller.actor(), "token revoked");
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Who the caller is.
#[derive(Serialize, ToSchema)]
pub struct WhoAmI {
    #[schema(value_type = RoleDoc)]
    pub role: &'static str,
    /// A namespace, or `*` for all.
    pub namespace: String,
    /// `null` when the server has no tokens (open loopback mode).
    pub token_id: Option<i64>,
}

/// The calling token's role, scope and id (any valid token).
///
/// Without any token configured the API is open on loopback and every caller may do
/// everything, so this answers `{"role": "admin", "namespace": "*", "token_id": null}`.
#[utoipa::path(get, path = "/v1/whoami", tag = "admin",
    responses((status = 200, description = "the caller", body = WhoAmI)))]
pub async fn whoami(Extension(caller): Extension<Caller>) -> Json<WhoAmI> {
    Json(match caller {
        Caller::Anonymous => WhoAmI {
            role: Role::Admin.as_str(),
            namespace: "*".into(),
            token_id: None,
        },
        Caller::Token(t) => WhoAmI {
            role: t.role.as_str(),
            namespace: t.scope,
            token_id: Some(t.id),
        },
    })
}
