//! The JSON shapes of the HTTP API that several resources share (records, events, the
//! `{state, record}` answer, the note body, the cost of an attempt, the review queue's
//! states, the effect request in [`effect_request`]), and the resources themselves in [`v1`].
//! The shapes here sit below every handler: they import only the member readers, never a
//! resource (the `pub use` lines below re-export resource bodies for the crate's users).
//! Each
//! request body is one struct declared with `fields::request_body!`: its
//! schema, its member list and its validation at once; the strict reader refuses any other
//! member, and a test checks that the OpenAPI schema documents exactly these members.
//!
//! What must never be here: a rule of the product (those are in `idem-core`) or a status
//! mapping (those are in [`crate::error`]).

pub mod effect_request;
pub mod v1;

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use idem::{AttemptCost, Record};

use crate::error::{ApiError, ApiResult};
use crate::fields::{CostTokens, CostUsd, Note};

pub use effect_request::{EffectBody, EffectRequestBody, ReconcileBody};
pub use v1::derive::DeriveBody;
pub use v1::keys::{ClaimBody, CompleteBody, FailBody, FailErrorBody, HeartbeatBody, PrepareBody};
pub use v1::namespaces::PolicyPatchBody;
pub use v1::review::ResolveBody;
pub use v1::tokens::TokenBody;

/// A ledger record as the API shows it (no lease token, no bookkeeping).
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct RecordDoc {
    namespace: String,
    key: String,
    /// processing | prepared | awaiting_approval | completed | failed_retryable | failed_permanent | needs_review
    state: String,
    attempt: u32,
    /// SHA-256 (lowercase hex) of the JCS payload, or null.
    fingerprint: Option<String>,
    owner: Option<String>,
    correlation_id: Option<String>,
    /// RFC 3339 UTC with milliseconds.
    lease_expires_at: Option<String>,
    not_before: Option<String>,
    prepared_payload: Option<Value>,
    result: Option<Value>,
    result_expired: bool,
    external_ref: Option<String>,
    last_error: Option<LastErrorDoc>,
    created_at: String,
    updated_at: String,
    /// What the attempts reported spending, summed (zeros when none was reported).
    cost: v1::namespaces::CostTotalsDoc,
    /// What an effect sent (null for keys driven by claim/complete): never headers, the
    /// query string or the body.
    request: Option<RequestDoc>,
}

/// `record.request`.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct RequestDoc {
    /// POST, PUT, PATCH or DELETE.
    method: String,
    /// Without userinfo, query string and fragment.
    url: String,
    /// The header that carried the key; null when none was sent.
    idempotency_header: Option<String>,
}

#[derive(ToSchema)]
#[allow(dead_code)]
pub struct LastErrorDoc {
    category: String,
    message: String,
    http_status: Option<u16>,
}

/// One entry of a record's audit trail.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct EventDoc {
    seq: i64,
    at: String,
    /// acquired, resumed, duplicate_hit, conflict, in_flight, prepared, completed, failed,
    /// lease_lost, moved_to_review, resolved, approved, rejected, result_expired, alert_sent,
    /// sent, reconciled
    #[schema(rename = "type")]
    kind: String,
    from_state: Option<String>,
    to_state: Option<String>,
    attempt: u32,
    owner: Option<String>,
    correlation_id: Option<String>,
    note: Option<String>,
    /// Who performed an operator action (token label or role).
    actor: Option<String>,
    /// What the attempt reported spending with this event (complete, fail, or the
    /// `lease_lost` of a fenced report), or null.
    cost: Option<EventCostDoc>,
}

/// One attempt's reported cost as an event shows it.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct EventCostDoc {
    tokens: u64,
    usd: f64,
}

/// What happens when a lease expires.
#[derive(ToSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub enum LeaseExpiryDoc {
    Reclaim,
    Review,
}

/// The answer to prepare, heartbeat, complete, resolve, approve and reject.
#[derive(Serialize, ToSchema)]
pub struct StateResponse {
    #[schema(value_type = String)]
    pub state: idem::State,
    #[schema(value_type = RecordDoc)]
    pub record: Record,
}

/// `GET …` (one record).
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct RecordWithEventsDoc {
    record: RecordDoc,
    /// Oldest first.
    events: Vec<EventDoc>,
}

/// A schema written as JSON (for what the derive cannot say: alternatives of types).
pub(crate) fn json_schema(v: Value) -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    serde_json::from_value(v).unwrap_or_else(|_| utoipa::openapi::RefOr::T(Default::default()))
}

crate::fields::request_body! {
    optional;
    /// `POST …/approve`, `…/reject`, `/pause`, `/resume` (body optional).
    #[derive(Debug, ToSchema)]
    #[serde(deny_unknown_fields)]
    pub struct NoteBody {
        /// At most 2000 characters, no NUL.
        #[schema(value_type = Option<String>, max_length = 2000, pattern = "^[^\\x00]*$")]
        pub note: Option<Note>,
    }
}

impl NoteBody {
    pub fn into_note(self) -> Option<String> {
        self.note.map(Note::into_string)
    }
}

crate::fields::request_body! {
    optional;
    /// `cost` of complete, fail (and effect): what the attempt spent. Absent members count
    /// as 0; negative or non-numeric values are 422 `invalid_field` naming `cost.tokens` or
    /// `cost.usd`.
    #[derive(Debug, ToSchema)]
    #[serde(deny_unknown_fields)]
    pub struct CostBody {
        /// Model tokens (a non-negative integer).
        #[schema(value_type = Option<u64>, minimum = 0, maximum = 1_000_000_000_000_000i64)]
        pub tokens: Option<CostTokens>,
        /// US dollars (a non-negative number; kept to the nano-dollar).
        #[schema(value_type = Option<f64>, minimum = 0, maximum = 1_000_000)]
        pub usd: Option<CostUsd>,
    }
}

impl CostBody {
    /// The core's cost (the members are already validated; a refusal still names them).
    pub fn into_cost(self) -> ApiResult<AttemptCost> {
        AttemptCost::new(self.tokens.map(|t| t.0), self.usd.map(|u| u.0)).map_err(|e| {
            let field = format!("cost.{}", e.field);
            ApiError::invalid_field(field.clone(), format!("`{field}` {}", e.message))
        })
    }

    /// An optional body member as the core's optional cost.
    pub fn of(body: Option<CostBody>) -> ApiResult<Option<AttemptCost>> {
        body.map(CostBody::into_cost).transpose()
    }
}

/// The states the review queue can be filtered by.
pub(crate) const QUEUE_STATES: [idem::State; 3] = [
    idem::State::NeedsReview,
    idem::State::AwaitingApproval,
    idem::State::Processing,
];
