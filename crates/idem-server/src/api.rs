//! The JSON shapes of the HTTP API: request bodies (documentation of what `handlers` parse,
//! member by member) and responses (serialized as is). Each request type lists its members in
//! `FIELDS`; the strict parser refuses any other member, and a test checks that the OpenAPI
//! schema documents exactly these members.

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use idem::Record;

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
    /// lease_lost, moved_to_review, resolved, approved, rejected, result_expired, alert_sent
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
}

/// `POST …/claim` (every member optional; an empty body is `{}`).
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct ClaimBody {
    /// The operation's payload; the server fingerprints it (JCS + SHA-256).
    payload: Option<Value>,
    /// A precomputed fingerprint (64 hex digits). Not together with `payload`.
    fingerprint: Option<String>,
    /// Informational (e.g. the n8n execution id), at most 255 characters.
    owner: Option<String>,
    /// Lease length, 1 ms to 7 days; default from the namespace policy.
    lease_ms: Option<i64>,
    /// At most 255 characters.
    correlation_id: Option<String>,
    /// reclaim | review (overrides the namespace policy for this lease).
    lease_expiry: Option<String>,
    /// Wait up to this long (capped at 30000) for a holder to finish instead of `in_flight`.
    wait_ms: Option<i64>,
}

impl ClaimBody {
    pub const FIELDS: &'static [&'static str] = &[
        "payload",
        "fingerprint",
        "owner",
        "lease_ms",
        "correlation_id",
        "lease_expiry",
        "wait_ms",
    ];
}

/// The answer to a claim.
#[derive(Serialize, ToSchema)]
pub struct ClaimResponse {
    /// acquired | completed | failed_permanent | conflict | in_flight | backoff | needs_review |
    /// awaiting_approval | paused | limited
    pub outcome: &'static str,
    /// null for `paused` and `limited`.
    #[schema(value_type = Option<RecordDoc>)]
    pub record: Option<Record>,
    /// The fencing token (only on `acquired`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// Present on every `acquired` (false when fresh), absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resumed: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<i64>,
}

/// `POST …/prepare`.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct PrepareBody {
    token: String,
    /// The payload to deliver (e.g. an AI draft); a later attempt must reuse it.
    payload: Value,
    approval_required: Option<bool>,
}

impl PrepareBody {
    pub const FIELDS: &'static [&'static str] = &["token", "payload", "approval_required"];
}

/// `POST …/heartbeat`.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct HeartbeatBody {
    token: String,
    lease_ms: Option<i64>,
}

impl HeartbeatBody {
    pub const FIELDS: &'static [&'static str] = &["token", "lease_ms"];
}

/// `POST …/complete`.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct CompleteBody {
    token: String,
    result: Option<Value>,
    /// At most 512 characters.
    external_ref: Option<String>,
}

impl CompleteBody {
    pub const FIELDS: &'static [&'static str] = &["token", "result", "external_ref"];
}

/// `POST …/fail`.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct FailBody {
    token: String,
    /// retryable | permanent | ambiguous (else the server classifies).
    kind: Option<String>,
    /// The destination's HTTP status (4xx/5xx).
    http_status: Option<u16>,
    /// The destination's Retry-After: seconds (integer or string) or an HTTP-date.
    #[schema(value_type = Option<String>)]
    retry_after: Option<Value>,
    /// false when the request certainly never left (connection refused, DNS failure).
    sent: Option<bool>,
    error: Option<FailErrorBody>,
}

impl FailBody {
    pub const FIELDS: &'static [&'static str] = &[
        "token",
        "kind",
        "http_status",
        "retry_after",
        "sent",
        "error",
    ];
}

#[derive(ToSchema)]
#[allow(dead_code)]
pub struct FailErrorBody {
    /// timeout | connection | validation | auth | business | … (at most 64 characters)
    category: String,
    /// Stored sanitized and cut to 1000 characters; never put secrets here.
    message: Option<String>,
}

impl FailErrorBody {
    pub const FIELDS: &'static [&'static str] = &["category", "message"];
}

/// The answer to prepare, heartbeat, complete, resolve, approve and reject.
#[derive(Serialize, ToSchema)]
pub struct StateResponse {
    #[schema(value_type = String)]
    pub state: idem::State,
    #[schema(value_type = RecordDoc)]
    pub record: Record,
}

#[derive(Serialize, ToSchema)]
pub struct RetryDoc {
    pub allowed: bool,
    pub attempt: u32,
    pub max_attempts: u32,
    #[schema(value_type = Option<String>)]
    pub not_before: Option<idem::Timestamp>,
}

/// The answer to fail: the decision and the record.
#[derive(Serialize, ToSchema)]
pub struct FailResponse {
    #[schema(value_type = String)]
    pub state: idem::State,
    /// retryable | permanent | ambiguous
    #[schema(value_type = String)]
    pub class: idem::Class,
    pub retry: RetryDoc,
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

/// `GET /v1/namespaces/{ns}/keys`.
#[derive(Serialize, ToSchema)]
pub struct ListResponse {
    #[schema(value_type = Vec<RecordDoc>)]
    pub items: Vec<Record>,
    /// null at the end.
    pub next_cursor: Option<String>,
}

/// `POST …/resolve` (operator).
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct ResolveBody {
    /// completed | retry | failed_permanent
    action: String,
    external_ref: Option<String>,
    result: Option<Value>,
    /// Why (required; recorded with who).
    note: String,
}

impl ResolveBody {
    pub const FIELDS: &'static [&'static str] = &["action", "external_ref", "result", "note"];
}

/// `POST …/approve`, `…/reject`, `/pause`, `/resume` (body optional).
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct NoteBody {
    note: Option<String>,
}

impl NoteBody {
    pub const FIELDS: &'static [&'static str] = &["note"];
}

/// The namespace policy (all fields optional in a PATCH, merged recursively).
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct PolicyDoc {
    lease_ms: Option<i64>,
    /// reclaim | review
    lease_expiry: Option<String>,
    retention_ms: Option<i64>,
    audit_retention_ms: Option<i64>,
    stuck_after_ms: Option<i64>,
    retry: Option<RetryPolicyDoc>,
    daily_limit: Option<u64>,
    alert_url: Option<String>,
    /// Write-only: `whsec_` + base64 of 24-64 random bytes, or null to remove it. With a
    /// secret every alert is signed the Standard Webhooks way. Never shown on reads. The
    /// pattern is `idem::webhook::SECRET_PATTERN` (a test keeps them equal).
    #[schema(
        write_only,
        pattern = "^whsec_(?:(?:[A-Za-z0-9+/]{4}){8,20}(?:[A-Za-z0-9+/]{2}={0,2}|[A-Za-z0-9+/]{3}=?)?|(?:[A-Za-z0-9+/]{4}){21}(?:[A-Za-z0-9+/]{2}={0,2})?)$"
    )]
    alert_secret: Option<String>,
    /// Read-only: whether an `alert_secret` is set (a PATCH naming it is refused with 422).
    #[schema(read_only)]
    alert_secret_set: Option<bool>,
    destination_idempotent: Option<bool>,
}

#[derive(ToSchema)]
#[allow(dead_code)]
pub struct RetryPolicyDoc {
    max_attempts: Option<u32>,
    base_ms: Option<i64>,
    max_ms: Option<i64>,
    window_ms: Option<i64>,
}

/// `GET /v1/namespaces/{ns}`.
#[derive(Serialize, ToSchema)]
pub struct NamespaceResponse {
    pub namespace: String,
    pub paused: bool,
    #[schema(value_type = PolicyDoc)]
    pub policy: Value,
    /// Every state with its count, zeros included.
    #[schema(value_type = Object)]
    pub counts: Value,
}

/// `POST /v1/keys/derive`.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct DeriveBody {
    /// The incoming event (any JSON).
    event: Value,
    /// RFC 6901 JSON pointers to the identity fields, in order.
    fields: Vec<String>,
    prefix: Option<String>,
    suffix: Option<String>,
    /// Always hash the values.
    hash: Option<bool>,
}

impl DeriveBody {
    pub const FIELDS: &'static [&'static str] = &["event", "fields", "prefix", "suffix", "hash"];
}

#[derive(Serialize, ToSchema)]
pub struct DeriveResponse {
    pub key: String,
}

/// `POST /v1/tokens` (admin).
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct TokenBody {
    /// worker | operator | admin
    role: String,
    /// A namespace, or `*` for all.
    namespace: String,
    label: Option<String>,
}

impl TokenBody {
    pub const FIELDS: &'static [&'static str] = &["role", "namespace", "label"];
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

#[derive(Serialize, ToSchema)]
pub struct StatusResponse {
    pub status: &'static str,
}
