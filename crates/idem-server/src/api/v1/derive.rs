//! `POST /v1/keys/derive` (worker): a stable idempotency key from the identity fields of an
//! event, the same derivation `idem key derive` runs (`idem::derive`).
//!
//! Invariant: nothing of the event is logged or kept; the answer is the key only.

use axum::routing::post;
use axum::Json;
use idem::derive::{derive_key, DeriveError};
use idem::{Key, Role};
use serde::Serialize;
use utoipa::{OpenApi, ToSchema};

use crate::error::{ApiError, ApiResult};
use crate::fields::{Event, KeyAffix, Pointers};
use crate::input::Body;
use crate::route::{r, Route};

/// The routes of this file.
pub fn routes() -> Vec<Route> {
    vec![r(
        "post",
        "/v1/keys/derive",
        Some(Role::Worker),
        post(derive),
    )]
}

/// The OpenAPI of this file.
#[derive(OpenApi)]
#[openapi(
    paths(derive),
    components(schemas(DeriveBody, DeriveResponse, JsonPointerDoc))
)]
pub struct Doc;

crate::fields::request_body! {
    required;
    /// `POST /v1/keys/derive`.
    #[derive(Debug, ToSchema)]
    #[serde(deny_unknown_fields)]
    pub struct DeriveBody {
        /// The incoming event: a JSON object or array (every pointer starts with `/`, so
        /// nothing else holds a value a pointer can find).
        #[schema(value_type = serde_json::Value)]
        pub event: Event,
        /// RFC 6901 JSON pointers to the identity fields, in order (at least one). A pointer that
        /// finds nothing (or `null`) in the event is 422 `missing_identity_field`.
        #[schema(min_items = 1, inline, value_type = Vec<JsonPointerDoc>)]
        pub fields: Pointers,
        /// 1 to 255 visible ASCII characters; the derived key as a whole is at most 255.
        #[schema(value_type = Option<String>, min_length = 1, max_length = 255, pattern = "^[\\x21-\\x7E]+$")]
        pub prefix: Option<KeyAffix>,
        /// 1 to 255 visible ASCII characters.
        #[schema(value_type = Option<String>, min_length = 1, max_length = 255, pattern = "^[\\x21-\\x7E]+$")]
        pub suffix: Option<KeyAffix>,
        /// Always hash the values.
        pub hash: Option<bool>,
    }
}

/// An RFC 6901 JSON pointer (`/a/b`, `~0` for `~`, `~1` for `/`).
#[derive(ToSchema)]
#[schema(pattern = "^(/([^/~]|~[01])*)+$")]
#[allow(dead_code)]
pub struct JsonPointerDoc(String);

#[derive(Serialize, ToSchema)]
pub struct DeriveResponse {
    pub key: String,
}

/// A stable key from identity fields of an event.
#[utoipa::path(post, path = "/v1/keys/derive", tag = "keys", request_body = DeriveBody,
    responses((status = 200, description = "the derived key", body = DeriveResponse)))]
pub async fn derive(Body(body): Body<DeriveBody>) -> ApiResult<Json<DeriveResponse>> {
    let prefix = body.prefix.as_ref().map(KeyAffix::as_str);
    let suffix = body.suffix.as_ref().map(KeyAffix::as_str);
    let hash = body.hash.unwrap_or(false);
    let key: Key =
        derive_key(&body.event.0, &body.fields.0, prefix, suffix, hash).map_err(|e| match e {
            DeriveError::InvalidField { field, message } => {
                ApiError::InvalidField { field, message }
            }
            DeriveError::MissingField { pointer } => {
                ApiError::MissingIdentityField { field: pointer }
            }
        })?;
    Ok(Json(DeriveResponse {
        key: key.as_str().to_owned(),
    }))
}
