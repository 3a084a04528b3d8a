//! The one API error type and its mapping to HTTP.
//!
//! Every refusal the service gives goes through [`ApiError`]: its status, problem+json `code`
//! and the `field` it names are decided here and nowhere else. Invariant: the detail of a 5xx
//! is never shown to the caller (it may carry driver messages or paths); it is logged with
//! where it was raised and the caller gets a generic sentence.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use idem::{LedgerError, OpError, PolicyError, StoreError};
use serde::Serialize;

/// Everything a request can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    InvalidJson(String),
    #[error("unknown field `{field}`")]
    UnknownField { field: String },
    #[error("{0}")]
    InvalidKey(String),
    #[error("{0}")]
    InvalidNamespace(String),
    #[error("request body is larger than {limit} bytes")]
    BodyTooLarge { limit: usize },
    #[error("{message}")]
    InvalidField { field: String, message: String },
    #[error("identity field {field} is missing or null")]
    MissingIdentityField { field: String },
    #[error("{0}")]
    NotFound(String),
    #[error("the lease was lost: this token is not the newest for this key")]
    LeaseLost,
    #[error("{0}")]
    InvalidTransition(String),
    #[error("the key was already completed with a different result or external_ref")]
    ResultMismatch,
    #[error("this route does not accept that method")]
    MethodNotAllowed,
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("the store is unavailable; nothing was written, try again")]
    StoreUnavailable(String),
    /// A bug or a damaged store: logged, never shown.
    #[error("internal error")]
    Internal(String),
}

impl ApiError {
    pub fn invalid_field(field: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError::InvalidField {
            field: field.into(),
            message: message.into(),
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::InvalidJson(_)
            | ApiError::UnknownField { .. }
            | ApiError::InvalidKey(_)
            | ApiError::InvalidNamespace(_) => StatusCode::BAD_REQUEST,
            ApiError::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::InvalidField { .. } | ApiError::MissingIdentityField { .. } => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::LeaseLost | ApiError::InvalidTransition(_) | ApiError::ResultMismatch => {
                StatusCode::CONFLICT
            }
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::StoreUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The machine-readable `code` of the problem document.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::InvalidJson(_) => "invalid_json",
            ApiError::UnknownField { .. } => "unknown_field",
            ApiError::InvalidKey(_) => "invalid_key",
            ApiError::InvalidNamespace(_) => "invalid_namespace",
            ApiError::BodyTooLarge { .. } => "body_too_large",
            ApiError::InvalidField { .. } => "invalid_field",
            ApiError::MissingIdentityField { .. } => "missing_identity_field",
            ApiError::NotFound(_) => "not_found",
            ApiError::LeaseLost => "lease_lost",
            ApiError::InvalidTransition(_) => "invalid_transition",
            ApiError::ResultMismatch => "result_mismatch",
            ApiError::MethodNotAllowed => "method_not_allowed",
            ApiError::Unauthorized(_) => "unauthorized",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::StoreUnavailable(_) => "store_unavailable",
            ApiError::Internal(_) => "internal",
        }
    }

    fn title(&self) -> &'static str {
        match self {
            ApiError::InvalidJson(_) => "Malformed JSON",
            ApiError::UnknownField { .. } => "Unknown field",
            ApiError::InvalidKey(_) => "Invalid key",
            ApiError::InvalidNamespace(_) => "Invalid namespace",
            ApiError::BodyTooLarge { .. } => "Request body too large",
            ApiError::InvalidField { .. } => "Invalid field",
            ApiError::MissingIdentityField { .. } => "Missing identity field",
            ApiError::NotFound(_) => "Not found",
            ApiError::LeaseLost => "Lease lost",
            ApiError::InvalidTransition(_) => "Invalid transition",
            ApiError::ResultMismatch => "Result mismatch",
            ApiError::MethodNotAllowed => "Method not allowed",
            ApiError::Unauthorized(_) => "Unauthorized",
            ApiError::Forbidden(_) => "Forbidden",
            ApiError::StoreUnavailable(_) => "Store unavailable",
            ApiError::Internal(_) => "Internal error",
        }
    }

    /// The field the error is about, when there is one.
    pub fn field(&self) -> Option<&str> {
        match self {
            ApiError::UnknownField { field }
            | ApiError::InvalidField { field, .. }
            | ApiError::MissingIdentityField { field } => Some(field),
            ApiError::InvalidKey(_) => Some("key"),
            ApiError::InvalidNamespace(_) => Some("namespace"),
            ApiError::LeaseLost => Some("token"),
            _ => None,
        }
    }

    /// The RFC 9457 problem document.
    pub fn problem(&self) -> Problem {
        let status = self.status();
        Problem {
            kind: format!(
                "https://idem.dev/problems/{}",
                self.code().replace('_', "-")
            ),
            title: self.title(),
            status: status.as_u16(),
            detail: self.to_string(),
            code: self.code(),
            field: self.field().map(str::to_owned),
        }
    }
}

/// RFC 9457 problem details with the machine-readable `code` and the offending `field`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Problem {
    #[serde(rename = "type")]
    #[schema(rename = "type")]
    pub kind: String,
    pub title: &'static str,
    pub status: u16,
    pub detail: String,
    pub code: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match &self {
            ApiError::Internal(cause) => {
                tracing::error!(cause = %cause, "internal error");
            }
            ApiError::StoreUnavailable(cause) => {
                tracing::warn!(cause = %cause, "store unavailable");
            }
            _ => {}
        }
        let problem = self.problem();
        let body = serde_json::to_vec(&problem).unwrap_or_default();
        let mut resp = (self.status(), body).into_response();
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if matches!(self, ApiError::Unauthorized(_)) {
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        resp
    }
}

impl From<OpError> for ApiError {
    fn from(e: OpError) -> Self {
        match e {
            OpError::NotFound => ApiError::NotFound("no record for this key".into()),
            OpError::LeaseLost => ApiError::LeaseLost,
            OpError::InvalidTransition { message, .. } => ApiError::InvalidTransition(message),
            OpError::ResultMismatch => ApiError::ResultMismatch,
            OpError::InvalidField { field, message } => ApiError::InvalidField { field, message },
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unavailable(m) => ApiError::StoreUnavailable(m),
            StoreError::Policy(p) => p.into(),
            StoreError::InvalidCursor => ApiError::invalid_field(
                "cursor",
                "not a cursor this server returned (use next_cursor as is)",
            ),
            StoreError::Corrupt(m) => ApiError::Internal(format!("corrupt stored data: {m}")),
            StoreError::Internal(m) => ApiError::Internal(m),
        }
    }
}

impl From<PolicyError> for ApiError {
    fn from(e: PolicyError) -> Self {
        match e {
            PolicyError::UnknownField { field } => ApiError::UnknownField { field },
            PolicyError::InvalidField { field, message } => {
                let message = format!("invalid value for `{field}`: {message}");
                ApiError::InvalidField { field, message }
            }
        }
    }
}

impl From<LedgerError> for ApiError {
    fn from(e: LedgerError) -> Self {
        match e {
            LedgerError::Op(o) => o.into(),
            LedgerError::Store(s) => s.into(),
        }
    }
}

/// Shorthand for handler results.
pub type ApiResult<T> = Result<T, ApiError>;
