//! The one API error type and every HTTP status the service answers with.
//!
//! Every refusal the service gives goes through [`ApiError`]: its status, problem+json `code`
//! and title come from one table ([`ErrorCode`]), the `field` it names is decided here, and a
//! claim outcome's status is [`outcome_status`]. Nothing else maps statuses: not the core,
//! not the handlers, not the command line (it takes the `code` it receives, or this table for
//! the local ledger). Invariant: the detail of a 5xx is never shown to the caller (it may
//! carry driver messages or paths); it is logged with where it was raised and the caller gets
//! a generic sentence.

use std::panic::Location;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use idem::{ClaimOutcome, LedgerError, OpError, PolicyError, StoreError};
use serde::Serialize;

pub use crate::outage::RaisedAt;
use crate::outcome::EffectOutcome;

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
    #[error("the lease was lost: this token no longer holds the key (a later claim acquired it, or an operator decided it)")]
    LeaseLost,
    #[error("{0}")]
    InvalidTransition(String),
    /// `field`: `result` or `external_ref`, whichever differs (`result` when both do).
    #[error("the key was already completed with a different {field}")]
    ResultMismatch { field: &'static str },
    #[error("this route does not accept that method")]
    MethodNotAllowed,
    /// An effect's destination is refused by the namespace's egress policy.
    #[error("{message}")]
    DestinationForbidden { field: String, message: String },
    /// The request body did not arrive within the body read timeout.
    #[error("the request body did not arrive within {0:?}")]
    RequestTimeout(std::time::Duration),
    /// An intake request's signature is missing, malformed or matches no secret (never
    /// which secret or which byte).
    #[error("the request signature is missing or does not verify")]
    InvalidSignature,
    /// An intake request's signed timestamp is outside the source's tolerance.
    #[error("the request signature's timestamp is outside the accepted tolerance")]
    StaleSignature,
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    Forbidden(String),
    /// The store did not answer: logged with its cause and where, never shown.
    #[error("the store is unavailable; nothing was written, try again")]
    StoreUnavailable { cause: String, at: RaisedAt },
    /// A bug or a damaged store: logged with where it was raised, never shown.
    #[error("internal error")]
    Internal { cause: String, at: RaisedAt },
}

/// The machine-readable `code` of a problem document, with its status and title: the one
/// table of the service's error statuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    InvalidJson,
    UnknownField,
    InvalidKey,
    InvalidNamespace,
    BodyTooLarge,
    InvalidField,
    MissingIdentityField,
    NotFound,
    LeaseLost,
    InvalidTransition,
    ResultMismatch,
    MethodNotAllowed,
    Unauthorized,
    Forbidden,
    StoreUnavailable,
    Internal,
    DestinationForbidden,
    RequestTimeout,
    InvalidSignature,
    StaleSignature,
}

impl ErrorCode {
    pub const ALL: [ErrorCode; 20] = [
        Self::InvalidJson,
        Self::UnknownField,
        Self::InvalidKey,
        Self::InvalidNamespace,
        Self::BodyTooLarge,
        Self::InvalidField,
        Self::MissingIdentityField,
        Self::NotFound,
        Self::LeaseLost,
        Self::InvalidTransition,
        Self::ResultMismatch,
        Self::MethodNotAllowed,
        Self::Unauthorized,
        Self::Forbidden,
        Self::StoreUnavailable,
        Self::Internal,
        Self::DestinationForbidden,
        Self::RequestTimeout,
        Self::InvalidSignature,
        Self::StaleSignature,
    ];

    /// (code, status, title).
    fn row(self) -> (&'static str, StatusCode, &'static str) {
        use StatusCode as S;
        match self {
            Self::InvalidJson => ("invalid_json", S::BAD_REQUEST, "Malformed JSON"),
            Self::UnknownField => ("unknown_field", S::BAD_REQUEST, "Unknown field"),
            Self::InvalidKey => ("invalid_key", S::BAD_REQUEST, "Invalid key"),
            Self::InvalidNamespace => ("invalid_namespace", S::BAD_REQUEST, "Invalid namespace"),
            Self::BodyTooLarge => (
                "body_too_large",
                S::PAYLOAD_TOO_LARGE,
                "Request body too large",
            ),
            Self::InvalidField => ("invalid_field", S::UNPROCESSABLE_ENTITY, "Invalid field"),
            Self::MissingIdentityField => (
                "missing_identity_field",
                S::UNPROCESSABLE_ENTITY,
                "Missing identity field",
            ),
            Self::NotFound => ("not_found", S::NOT_FOUND, "Not found"),
            Self::LeaseLost => ("lease_lost", S::CONFLICT, "Lease lost"),
            Self::InvalidTransition => ("invalid_transition", S::CONFLICT, "Invalid transition"),
            Self::ResultMismatch => ("result_mismatch", S::CONFLICT, "Result mismatch"),
            Self::MethodNotAllowed => (
                "method_not_allowed",
                S::METHOD_NOT_ALLOWED,
                "Method not allowed",
            ),
            Self::Unauthorized => ("unauthorized", S::UNAUTHORIZED, "Unauthorized"),
            Self::Forbidden => ("forbidden", S::FORBIDDEN, "Forbidden"),
            Self::StoreUnavailable => (
                "store_unavailable",
                S::SERVICE_UNAVAILABLE,
                "Store unavailable",
            ),
            Self::Internal => ("internal", S::INTERNAL_SERVER_ERROR, "Internal error"),
            Self::DestinationForbidden => (
                "destination_forbidden",
                S::UNPROCESSABLE_ENTITY,
                "Destination forbidden",
            ),
            Self::RequestTimeout => ("request_timeout", S::REQUEST_TIMEOUT, "Request timeout"),
            Self::InvalidSignature => ("invalid_signature", S::UNAUTHORIZED, "Invalid signature"),
            Self::StaleSignature => ("stale_signature", S::UNAUTHORIZED, "Stale signature"),
        }
    }

    pub fn as_str(self) -> &'static str {
        self.row().0
    }

    pub fn status(self) -> StatusCode {
        self.row().1
    }

    pub fn title(self) -> &'static str {
        self.row().2
    }

    /// The code of a problem document's `code` string.
    pub fn parse(s: &str) -> Option<ErrorCode> {
        Self::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

/// The HTTP status the contract gives a claim outcome.
pub fn outcome_status(outcome: ClaimOutcome) -> StatusCode {
    match outcome {
        ClaimOutcome::Acquired => StatusCode::CREATED,
        ClaimOutcome::Completed | ClaimOutcome::FailedPermanent => StatusCode::OK,
        ClaimOutcome::Conflict => StatusCode::UNPROCESSABLE_ENTITY,
        ClaimOutcome::InFlight
        | ClaimOutcome::Backoff
        | ClaimOutcome::NeedsReview
        | ClaimOutcome::AwaitingApproval => StatusCode::CONFLICT,
        ClaimOutcome::Paused => StatusCode::SERVICE_UNAVAILABLE,
        ClaimOutcome::Limited => StatusCode::TOO_MANY_REQUESTS,
    }
}

/// The HTTP status the contract gives an effect's (or an action delivery's) outcome: a
/// claim outcome's own where the effect answers one ([`outcome_status`]), 200 for an effect
/// that ran to an end this call, 409 for one that needs a later call or a person.
pub fn effect_status(outcome: EffectOutcome) -> StatusCode {
    match outcome {
        EffectOutcome::Performed | EffectOutcome::Completed | EffectOutcome::FailedPermanent => {
            StatusCode::OK
        }
        EffectOutcome::Backoff
        | EffectOutcome::NeedsReview
        | EffectOutcome::InFlight
        | EffectOutcome::AwaitingApproval => StatusCode::CONFLICT,
        EffectOutcome::Conflict => StatusCode::UNPROCESSABLE_ENTITY,
        EffectOutcome::Paused => StatusCode::SERVICE_UNAVAILABLE,
        EffectOutcome::Limited => StatusCode::TOO_MANY_REQUESTS,
    }
}

impl ApiError {
    pub fn invalid_field(field: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError::InvalidField {
            field: field.into(),
            message: message.into(),
        }
    }

    /// A bug or damaged data, recorded with the place that called this.
    #[track_caller]
    pub fn internal(cause: impl Into<String>) -> Self {
        ApiError::Internal {
            cause: cause.into(),
            at: Location::caller(),
        }
    }

    /// The store did not answer, recorded with the place that called this.
    #[track_caller]
    pub fn store_unavailable(cause: impl Into<String>) -> Self {
        ApiError::StoreUnavailable {
            cause: cause.into(),
            at: Location::caller(),
        }
    }

    /// Its row of the table.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            ApiError::InvalidJson(_) => ErrorCode::InvalidJson,
            ApiError::UnknownField { .. } => ErrorCode::UnknownField,
            ApiError::InvalidKey(_) => ErrorCode::InvalidKey,
            ApiError::InvalidNamespace(_) => ErrorCode::InvalidNamespace,
            ApiError::BodyTooLarge { .. } => ErrorCode::BodyTooLarge,
            ApiError::InvalidField { .. } => ErrorCode::InvalidField,
            ApiError::MissingIdentityField { .. } => ErrorCode::MissingIdentityField,
            ApiError::NotFound(_) => ErrorCode::NotFound,
            ApiError::LeaseLost => ErrorCode::LeaseLost,
            ApiError::InvalidTransition(_) => ErrorCode::InvalidTransition,
            ApiError::ResultMismatch { .. } => ErrorCode::ResultMismatch,
            ApiError::MethodNotAllowed => ErrorCode::MethodNotAllowed,
            ApiError::DestinationForbidden { .. } => ErrorCode::DestinationForbidden,
            ApiError::RequestTimeout(_) => ErrorCode::RequestTimeout,
            ApiError::InvalidSignature => ErrorCode::InvalidSignature,
            ApiError::StaleSignature => ErrorCode::StaleSignature,
            ApiError::Unauthorized(_) => ErrorCode::Unauthorized,
            ApiError::Forbidden(_) => ErrorCode::Forbidden,
            ApiError::StoreUnavailable { .. } => ErrorCode::StoreUnavailable,
            ApiError::Internal { .. } => ErrorCode::Internal,
        }
    }

    pub fn status(&self) -> StatusCode {
        self.error_code().status()
    }

    /// The machine-readable `code` of the problem document.
    pub fn code(&self) -> &'static str {
        self.error_code().as_str()
    }

    /// The field the error is about, when there is one.
    pub fn field(&self) -> Option<&str> {
        match self {
            ApiError::UnknownField { field }
            | ApiError::InvalidField { field, .. }
            | ApiError::MissingIdentityField { field }
            | ApiError::DestinationForbidden { field, .. } => Some(field),
            ApiError::InvalidKey(_) => Some("key"),
            ApiError::InvalidNamespace(_) => Some("namespace"),
            ApiError::LeaseLost => Some("token"),
            ApiError::ResultMismatch { field } => Some(field),
            _ => None,
        }
    }

    /// The RFC 9457 problem document.
    pub fn problem(&self) -> Problem {
        let code = self.error_code();
        Problem {
            kind: format!(
                "https://idem.dev/problems/{}",
                code.as_str().replace('_', "-")
            ),
            title: code.title(),
            status: code.status().as_u16(),
            detail: self.to_string(),
            code: code.as_str(),
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
            ApiError::Internal { cause, at } => {
                tracing::error!(cause = %cause, at = %at, "internal error");
            }
            // One line per outage and a periodic count, not one per request.
            ApiError::StoreUnavailable { cause, at } => crate::outage::refused(cause, at),
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
    #[track_caller]
    fn from(e: OpError) -> Self {
        match e {
            OpError::NotFound => ApiError::NotFound("no record for this key".into()),
            OpError::LeaseLost => ApiError::LeaseLost,
            OpError::InvalidTransition { message, .. } => ApiError::InvalidTransition(message),
            OpError::ResultMismatch { field } => ApiError::ResultMismatch { field },
            OpError::InvalidField { field, message } => ApiError::InvalidField { field, message },
        }
    }
}

impl From<StoreError> for ApiError {
    /// `?` on a store call records the line of the `?`.
    #[track_caller]
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unavailable(m) => ApiError::store_unavailable(m),
            StoreError::Policy(p) => p.into(),
            StoreError::InvalidCursor => ApiError::invalid_field(
                "cursor",
                "not a cursor this server returned (use next_cursor as is)",
            ),
            StoreError::Corrupt(m) => ApiError::internal(format!("corrupt stored data: {m}")),
            StoreError::Internal(m) => ApiError::internal(m),
        }
    }
}

impl From<idem_intake::source::SourceError> for ApiError {
    fn from(e: idem_intake::source::SourceError) -> Self {
        use idem_intake::source::SourceError;
        match e {
            SourceError::Unknown { field } => ApiError::UnknownField { field },
            SourceError::Invalid { field, message } => {
                let message = format!("invalid value for `{field}`: {message}");
                ApiError::InvalidField { field, message }
            }
        }
    }
}

impl From<idem_intake::Refusal> for ApiError {
    fn from(r: idem_intake::Refusal) -> Self {
        match r {
            idem_intake::Refusal::InvalidSignature => ApiError::InvalidSignature,
            idem_intake::Refusal::StaleSignature => ApiError::StaleSignature,
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
    #[track_caller]
    fn from(e: LedgerError) -> Self {
        match e {
            LedgerError::Op(o) => o.into(),
            LedgerError::Store(s) => s.into(),
        }
    }
}

/// Shorthand for handler results.
pub type ApiResult<T> = Result<T, ApiError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_effect_answers_a_claim_outcome_with_the_claim_status() {
        for c in ClaimOutcome::ALL {
            if let Some(e) = EffectOutcome::ALL
                .into_iter()
                .find(|e| e.as_str() == c.as_str())
            {
                assert_eq!(effect_status(e), outcome_status(c), "{}", c.as_str());
            }
        }
        assert_eq!(effect_status(EffectOutcome::Performed), StatusCode::OK);
        assert_eq!(effect_status(EffectOutcome::Backoff), StatusCode::CONFLICT);
    }

    #[test]
    fn the_table_has_one_row_per_code() {
        let mut seen = std::collections::HashSet::new();
        for c in ErrorCode::ALL {
            assert!(seen.insert(c.as_str()), "{c:?}");
            assert_eq!(ErrorCode::parse(c.as_str()), Some(c));
            assert!(c.status().is_client_error() || c.status().is_server_error());
        }
        assert_eq!(ErrorCode::parse("nope"), None);
    }

    #[test]
    fn every_claim_outcome_has_its_contract_status() {
        use ClaimOutcome as O;
        for (o, s) in [
            (O::Acquired, 201),
            (O::Completed, 200),
            (O::FailedPermanent, 200),
            (O::Conflict, 422),
            (O::InFlight, 409),
            (O::Backoff, 409),
            (O::NeedsReview, 409),
            (O::AwaitingApproval, 409),
            (O::Paused, 503),
            (O::Limited, 429),
        ] {
            assert_eq!(outcome_status(o).as_u16(), s, "{o:?}");
        }
        assert_eq!(
            ClaimOutcome::ALL.len(),
            10,
            "a new outcome needs its row above"
        );
    }

    #[test]
    fn internal_errors_record_where_they_were_raised_and_show_nothing() {
        fn store_call() -> Result<(), StoreError> {
            Err(StoreError::Internal(
                "driver said: /var/lib/secret.db".into(),
            ))
        }
        fn handler() -> ApiResult<()> {
            store_call()?;
            Ok(())
        }
        let e = handler().expect_err("fails");
        let ApiError::Internal { at, .. } = &e else {
            panic!("{e:?}")
        };
        assert!(at.file().ends_with("error.rs"), "{at}");
        // The `?` line in `handler`, not the conversion inside `From`.
        assert_eq!(at.line(), line!() - 9, "{at}");
        let p = e.problem();
        assert_eq!((p.status, p.code), (500, "internal"));
        assert!(!p.detail.contains("secret"), "{}", p.detail);
        let at = ApiError::store_unavailable("down").problem();
        assert_eq!((at.status, at.code), (503, "store_unavailable"));
    }
}
