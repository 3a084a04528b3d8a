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

/// `POST …/claim` (every member optional; an empty body is `{}`). A `null` member counts as
/// absent. `payload` and `fingerprint` together are refused (422 `invalid_field`).
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct ClaimBody {
    /// The operation's payload; the server fingerprints it (JCS + SHA-256).
    payload: Option<Value>,
    /// A precomputed fingerprint (64 hex digits, either case). Not together with `payload`.
    #[schema(pattern = "^[0-9A-Fa-f]{64}$")]
    fingerprint: Option<String>,
    /// Informational (e.g. the n8n execution id), at most 255 characters, no NUL.
    #[schema(max_length = 255, pattern = "^[^\\x00]*$")]
    owner: Option<String>,
    /// Lease length, 1 ms to 7 days; default from the namespace policy.
    #[schema(minimum = 1, maximum = 604_800_000)]
    lease_ms: Option<i64>,
    /// At most 255 characters, no NUL.
    #[schema(max_length = 255, pattern = "^[^\\x00]*$")]
    correlation_id: Option<String>,
    /// Overrides the namespace policy for this lease.
    lease_expiry: Option<LeaseExpiryDoc>,
    /// Wait up to this long for a holder to finish instead of answering `in_flight`; larger
    /// values are capped at 30000.
    #[schema(minimum = 0)]
    wait_ms: Option<i64>,
}

/// What happens when a lease expires.
#[derive(ToSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub enum LeaseExpiryDoc {
    Reclaim,
    Review,
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
#[serde(deny_unknown_fields)]
pub struct PrepareBody {
    /// The fencing token of the claim.
    #[schema(min_length = 1, max_length = 256, pattern = "^[^\\x00]*$")]
    token: String,
    /// The payload to deliver (e.g. an AI draft; any JSON but `null`); a later attempt must
    /// reuse it.
    payload: Value,
    approval_required: Option<bool>,
}

impl PrepareBody {
    pub const FIELDS: &'static [&'static str] = &["token", "payload", "approval_required"];
}

/// `POST …/heartbeat`.
#[derive(ToSchema)]
#[allow(dead_code)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatBody {
    #[schema(min_length = 1, max_length = 256, pattern = "^[^\\x00]*$")]
    token: String,
    /// New lease length from now, 1 ms to 7 days; default from the namespace policy.
    #[schema(minimum = 1, maximum = 604_800_000)]
    lease_ms: Option<i64>,
}

impl HeartbeatBody {
    pub const FIELDS: &'static [&'static str] = &["token", "lease_ms"];
}

/// `POST …/complete`.
#[derive(ToSchema)]
#[allow(dead_code)]
#[serde(deny_unknown_fields)]
pub struct CompleteBody {
    #[schema(min_length = 1, max_length = 256, pattern = "^[^\\x00]*$")]
    token: String,
    /// Stored and replayed to every later claim.
    result: Option<Value>,
    /// At most 512 characters, no NUL.
    #[schema(max_length = 512, pattern = "^[^\\x00]*$")]
    external_ref: Option<String>,
}

impl CompleteBody {
    pub const FIELDS: &'static [&'static str] = &["token", "result", "external_ref"];
}

/// `POST …/fail`. The server must be able to classify the failure: give `kind`, or an
/// `http_status` of 400–599, or (without `http_status`) an `error.category` of timeout,
/// connection, validation, auth or business; otherwise 422 `invalid_field`.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct FailBody {
    #[schema(min_length = 1, max_length = 256, pattern = "^[^\\x00]*$")]
    token: String,
    /// Decided by the caller (else the server classifies).
    kind: Option<ClassDoc>,
    /// The destination's HTTP status; 100–399 only together with `kind`.
    #[schema(minimum = 100, maximum = 599)]
    http_status: Option<u16>,
    /// The destination's Retry-After: delay seconds (integer, or a string of digits) up to
    /// 316224000 (10 years). An HTTP-date string is accepted as well.
    #[schema(schema_with = retry_after_schema)]
    retry_after: Option<Value>,
    /// false when the request certainly never left (connection refused, DNS failure).
    sent: Option<bool>,
    error: Option<FailErrorBody>,
}

/// A failure class.
#[derive(ToSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub enum ClassDoc {
    Retryable,
    Permanent,
    Ambiguous,
}

/// `retry_after`: delay seconds 0–316224000 as an integer or a string of digits (surrounding
/// blanks allowed), or `null`. (HTTP-dates are accepted too but have no JSON Schema form: a
/// pattern cannot check the weekday against the date.)
fn retry_after_schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    json_schema(serde_json::json!({
        "anyOf": [
            {"type": "integer", "minimum": 0, "maximum": 316_224_000},
            {"type": "string", "pattern": RETRY_AFTER_SECONDS},
            {"type": "null"}
        ]
    }))
}

/// Digits for 0 to 316224000 seconds, optionally padded with zeros and blanks.
const RETRY_AFTER_SECONDS: &str = "^[ \\t\\r\\n]*0*([0-9]{1,8}|[12][0-9]{8}|30[0-9]{7}|31[0-5][0-9]{6}|316[01][0-9]{5}|3162[01][0-9]{4}|31622[0-3][0-9]{3}|316224000)[ \\t\\r\\n]*$";

/// A schema written as JSON (for what the derive cannot say: alternatives of types).
pub(crate) fn json_schema(v: Value) -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    serde_json::from_value(v).unwrap_or_else(|_| utoipa::openapi::RefOr::T(Default::default()))
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
#[serde(deny_unknown_fields)]
pub struct FailErrorBody {
    /// timeout | connection | validation | auth | business | … (1 to 64 characters)
    #[schema(min_length = 1, max_length = 64, pattern = "^[^\\x00]*$")]
    category: String,
    /// At most 100000 characters; stored sanitized and cut to 1000. Never put secrets here.
    #[schema(max_length = 100_000)]
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
#[serde(deny_unknown_fields)]
pub struct ResolveBody {
    action: ResolveActionDoc,
    #[schema(max_length = 512, pattern = "^[^\\x00]*$")]
    external_ref: Option<String>,
    result: Option<Value>,
    /// Why (required, 1 to 2000 characters, no NUL; recorded with who).
    #[schema(min_length = 1, max_length = 2000, pattern = "^[^\\x00]*$")]
    note: String,
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

impl ResolveBody {
    pub const FIELDS: &'static [&'static str] = &["action", "external_ref", "result", "note"];
}

/// `POST …/approve`, `…/reject`, `/pause`, `/resume` (body optional).
#[derive(ToSchema)]
#[allow(dead_code)]
#[serde(deny_unknown_fields)]
pub struct NoteBody {
    /// At most 2000 characters, no NUL.
    #[schema(max_length = 2000, pattern = "^[^\\x00]*$")]
    note: Option<String>,
}

impl NoteBody {
    pub const FIELDS: &'static [&'static str] = &["note"];
}

/// The namespace policy as reads show it.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct PolicyDoc {
    lease_ms: i64,
    lease_expiry: LeaseExpiryDoc,
    retention_ms: i64,
    audit_retention_ms: i64,
    stuck_after_ms: i64,
    retry: RetryPolicyDoc,
    daily_limit: Option<u64>,
    alert_url: Option<String>,
    /// Whether an `alert_secret` is set (the secret itself is write-only, never shown).
    #[schema(read_only)]
    alert_secret_set: bool,
    destination_idempotent: bool,
}

#[derive(ToSchema)]
#[allow(dead_code)]
pub struct RetryPolicyDoc {
    max_attempts: u32,
    base_ms: i64,
    max_ms: i64,
    window_ms: i64,
}

/// `PATCH /v1/namespaces/{ns}`: the policy fields to change, merged recursively into the
/// current policy (`{"retry": {"max_attempts": 3}}` keeps the other retry fields). Only
/// `daily_limit` and `alert_url` may be `null` (to clear them). After the merge
/// `audit_retention_ms` must be at least `retention_ms` and `retry.max_ms` at least
/// `retry.base_ms`, else 422 `invalid_field`.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct PolicyPatchBody {
    /// 1 ms to 7 days.
    #[schema(nullable = false, minimum = 1, maximum = 604_800_000)]
    lease_ms: Option<i64>,
    #[schema(nullable = false)]
    lease_expiry: Option<LeaseExpiryDoc>,
    /// 0 to 10 years (316224000000 ms).
    #[schema(nullable = false, minimum = 0, maximum = 316_224_000_000i64)]
    retention_ms: Option<i64>,
    /// 0 to 10 years, at least `retention_ms`.
    #[schema(nullable = false, minimum = 0, maximum = 316_224_000_000i64)]
    audit_retention_ms: Option<i64>,
    /// 1 ms to 10 years.
    #[schema(nullable = false, minimum = 1, maximum = 316_224_000_000i64)]
    stuck_after_ms: Option<i64>,
    #[schema(nullable = false)]
    retry: Option<RetryPatchBody>,
    /// First-time acquisitions per UTC day; `null` for no ceiling.
    #[schema(minimum = 0, maximum = 9_223_372_036_854_775_807i64)]
    daily_limit: Option<i64>,
    /// Absolute http(s) URL with a host, at most 2048 bytes; `null` for no alerts.
    #[schema(
        max_length = 2048,
        pattern = "^https?://[^/\\s\\x00-\\x1F\\x7F-\\x9F][^\\s\\x00-\\x1F\\x7F-\\x9F]*$"
    )]
    alert_url: Option<String>,
    /// Write-only: `whsec_` + base64 of 24-64 random bytes, or `null` to remove it. With a
    /// secret every alert is signed the Standard Webhooks way. Never shown on reads (they
    /// show `alert_secret_set`, which a PATCH may not name). The pattern is
    /// `idem::webhook::SECRET_PATTERN` (a test keeps them equal).
    #[schema(
        write_only,
        pattern = "^whsec_(?:(?:[A-Za-z0-9+/]{4}){8,20}(?:[A-Za-z0-9+/]{2}={0,2}|[A-Za-z0-9+/]{3}=?)?|(?:[A-Za-z0-9+/]{4}){21}(?:[A-Za-z0-9+/]{2}={0,2})?)$"
    )]
    alert_secret: Option<String>,
    #[schema(nullable = false)]
    destination_idempotent: Option<bool>,
}

/// The retry budget fields of a policy patch.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct RetryPatchBody {
    /// 1 to 1000 (the first attempt included).
    #[schema(nullable = false, minimum = 1, maximum = 1000)]
    max_attempts: Option<u32>,
    /// 0 to 10 years.
    #[schema(nullable = false, minimum = 0, maximum = 316_224_000_000i64)]
    base_ms: Option<i64>,
    /// 0 to 10 years, at least `base_ms`.
    #[schema(nullable = false, minimum = 0, maximum = 316_224_000_000i64)]
    max_ms: Option<i64>,
    /// 0 to 10 years.
    #[schema(nullable = false, minimum = 0, maximum = 316_224_000_000i64)]
    window_ms: Option<i64>,
}

impl PolicyPatchBody {
    pub const FIELDS: &'static [&'static str] = &[
        "lease_ms",
        "lease_expiry",
        "retention_ms",
        "audit_retention_ms",
        "stuck_after_ms",
        "retry",
        "daily_limit",
        "alert_url",
        "alert_secret",
        "destination_idempotent",
    ];
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
#[serde(deny_unknown_fields)]
pub struct DeriveBody {
    /// The incoming event (any JSON but `null`).
    event: Value,
    /// RFC 6901 JSON pointers to the identity fields, in order (at least one). A pointer that
    /// finds nothing (or `null`) in the event is 422 `missing_identity_field`.
    #[schema(min_items = 1, inline, value_type = Vec<JsonPointerDoc>)]
    fields: Vec<String>,
    /// 1 to 255 visible ASCII characters; the derived key as a whole is at most 255.
    #[schema(min_length = 1, max_length = 255, pattern = "^[\\x21-\\x7E]+$")]
    prefix: Option<String>,
    /// 1 to 255 visible ASCII characters.
    #[schema(min_length = 1, max_length = 255, pattern = "^[\\x21-\\x7E]+$")]
    suffix: Option<String>,
    /// Always hash the values.
    hash: Option<bool>,
}

/// An RFC 6901 JSON pointer (`/a/b`, `~0` for `~`, `~1` for `/`).
#[derive(ToSchema)]
#[schema(pattern = "^(/([^/~]|~[01])*)+$")]
#[allow(dead_code)]
pub struct JsonPointerDoc(String);

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
#[serde(deny_unknown_fields)]
pub struct TokenBody {
    role: RoleDoc,
    /// A namespace, or `*` for all.
    #[schema(pattern = "^([A-Za-z0-9._:-]{1,128}|\\*)$")]
    namespace: String,
    /// Recorded as the actor of the token's operator actions; at most 255 characters, no NUL.
    #[schema(max_length = 255, pattern = "^[^\\x00]*$")]
    label: Option<String>,
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
