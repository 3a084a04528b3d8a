//! The worker side of a key: claim, prepare, heartbeat, complete, fail, and the reads (one
//! record with its events, a namespace's records).
//!
//! Each handler translates HTTP into one ledger operation and the result back; no rule of the
//! product lives here (those are in `idem-core`). Invariant: a request refused while reading
//! its input never reaches the store, so it writes nothing.

use axum::extract::{RawQuery, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Json;
use idem::classify::parse_retry_after;
use idem::{
    ClaimReply, ClaimRequest, Class, CompleteRequest, EventType, FailErrorInput, FailRequest,
    Fingerprint, HeartbeatRequest, LeaseExpiry, ListQuery, Op, PrepareRequest, Record, Reply, Role,
};
use serde::Serialize;
use serde_json::Value;
use utoipa::{OpenApi, ToSchema};

use super::claim_wait::claim_and_wait;
use super::shared::{
    answer_headers, exec, log_op, query_limit, query_pairs, query_state, record_len_hint, refused,
    state_write, SizedJson,
};
use crate::api::{
    json_schema, CostBody, LeaseExpiryDoc, RecordDoc, RecordWithEventsDoc, StateResponse,
};
use crate::error::{outcome_status, ApiError, ApiResult};
use crate::fields::{
    Category, CorrelationId, ErrorMessage, ExternalRef, FencingToken, FingerprintText, HttpStatus,
    LeaseMs, Owner, WaitMs,
};
use crate::input::{Body, NsKey, NsPath};
use crate::metrics;
use crate::route::{r, Route};
use crate::state::AppState;

/// The routes of this file.
pub fn routes() -> Vec<Route> {
    use Role::{Operator, Worker};
    vec![
        r(
            "post",
            "/v1/namespaces/{ns}/keys/{key}/claim",
            Some(Worker),
            post(claim),
        ),
        r(
            "post",
            "/v1/namespaces/{ns}/keys/{key}/prepare",
            Some(Worker),
            post(prepare),
        ),
        r(
            "post",
            "/v1/namespaces/{ns}/keys/{key}/heartbeat",
            Some(Worker),
            post(heartbeat),
        ),
        r(
            "post",
            "/v1/namespaces/{ns}/keys/{key}/complete",
            Some(Worker),
            post(complete),
        ),
        r(
            "post",
            "/v1/namespaces/{ns}/keys/{key}/fail",
            Some(Worker),
            post(fail),
        ),
        r(
            "get",
            "/v1/namespaces/{ns}/keys/{key}",
            Some(Worker),
            get(get_record),
        ),
        r("get", "/v1/namespaces/{ns}/keys", Some(Operator), get(list)),
    ]
}

/// The OpenAPI of this file.
#[derive(OpenApi)]
#[openapi(
    paths(claim, prepare, heartbeat, complete, fail, get_record, list),
    components(schemas(
        ClaimBody,
        ClaimResponse,
        PrepareBody,
        HeartbeatBody,
        CompleteBody,
        CostBody,
        FailBody,
        FailErrorBody,
        FailResponse,
        RetryDoc,
        ListResponse,
        ClassDoc,
    ))
)]
pub struct Doc;

// ------------------------------------------------------------------ claim

crate::fields::request_body! {
    optional;
    /// `POST …/claim` (every member optional; an empty body is `{}`). A `null` member counts as
    /// absent. `payload` and `fingerprint` together are refused (422 `invalid_field`).
    #[derive(Debug, ToSchema)]
    #[serde(deny_unknown_fields)]
    pub struct ClaimBody {
        /// The operation's payload; the server fingerprints it (JCS + SHA-256).
        pub payload: Option<Value>,
        /// A precomputed fingerprint (64 hex digits, either case). Not together with `payload`.
        #[schema(value_type = Option<String>, pattern = "^[0-9A-Fa-f]{64}$")]
        pub fingerprint: Option<FingerprintText>,
        /// Informational (e.g. the n8n execution id), at most 255 characters, no NUL.
        #[schema(value_type = Option<String>, max_length = 255, pattern = "^[^\\x00]*$")]
        pub owner: Option<Owner>,
        /// Lease length, 1 ms to 7 days; default from the namespace policy.
        #[schema(value_type = Option<i64>, minimum = 1, maximum = 604_800_000)]
        pub lease_ms: Option<LeaseMs>,
        /// At most 255 characters, no NUL.
        #[schema(value_type = Option<String>, max_length = 255, pattern = "^[^\\x00]*$")]
        pub correlation_id: Option<CorrelationId>,
        /// Overrides the namespace policy for this lease.
        #[schema(value_type = Option<LeaseExpiryDoc>)]
        pub lease_expiry: Option<LeaseExpiry>,
        /// Wait up to this long for a holder to finish instead of answering `in_flight`; larger
        /// values are capped at 30000.
        #[schema(value_type = Option<i64>, minimum = 0)]
        pub wait_ms: Option<WaitMs>,
    }
}

impl ClaimBody {
    /// The ledger's claim and the wait granted (ms, 0 for none).
    pub fn into_request(self) -> ApiResult<(ClaimRequest, i64)> {
        let fingerprint = match (self.payload, self.fingerprint) {
            (Some(_), Some(_)) => {
                return Err(ApiError::invalid_field(
                    "fingerprint",
                    "give either `payload` or `fingerprint`, not both",
                ))
            }
            (Some(p), None) => Some(
                Fingerprint::of_payload(&p)
                    .map_err(|e| ApiError::invalid_field("payload", e.to_string()))?,
            ),
            (None, Some(f)) => Some(Fingerprint::parse(f.as_str()).map_err(|_| {
                ApiError::invalid_field(
                    "fingerprint",
                    "`fingerprint` must be 64 hex digits (SHA-256 of the JCS payload)",
                )
            })?),
            (None, None) => None,
        };
        let req = ClaimRequest {
            fingerprint,
            owner: self.owner.map(Owner::into_string),
            lease_ms: self.lease_ms.map(|l| l.0),
            correlation_id: self.correlation_id.map(CorrelationId::into_string),
            lease_expiry: self.lease_expiry,
        };
        Ok((req, self.wait_ms.map_or(0, WaitMs::ms)))
    }
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

/// Claim: "may I do this now?"
#[utoipa::path(post, path = "/v1/namespaces/{ns}/keys/{key}/claim", tag = "keys",
    params(("ns" = String, Path), ("key" = String, Path)),
    request_body(content = ClaimBody, description = "all members optional; an empty body is {}"),
    responses(
        (status = 201, description = "acquired (fresh or resumed)", body = ClaimResponse),
        (status = 200, description = "completed / failed_permanent replayed", body = ClaimResponse,
            headers(("Idempotent-Replayed" = String, description = "`true` on every replayed answer"))),
        (status = 409, description = "in_flight, backoff, needs_review, awaiting_approval", body = ClaimResponse,
            headers(("Retry-After" = String, description = "seconds, with in_flight and backoff"))),
        (status = 422, description = "outcome conflict (a different fingerprint)", body = ClaimResponse),
        (status = 429, description = "outcome limited (daily ceiling reached)", body = ClaimResponse,
            headers(("Retry-After" = String, description = "seconds to the next UTC midnight"))),
        (status = 503, description = "outcome paused (namespace paused by an operator)", body = ClaimResponse),
    ))]
pub async fn claim(
    State(st): State<AppState>,
    nk: NsKey,
    Body(body): Body<ClaimBody>,
) -> ApiResult<Response> {
    let (req, wait_ms) = body.into_request()?;
    let (reply, ex) = claim_and_wait(&st, &nk, req, wait_ms, Default::default()).await?;
    let duplicate = ex.events.iter().any(|e| e.kind == EventType::DuplicateHit);
    metrics::claim(reply.outcome, reply.resumed, reply.reclaimed, duplicate);
    log_op(
        "claim",
        &nk,
        ex.from_state,
        reply.record.as_ref(),
        reply.outcome.as_str(),
    );
    Ok(claim_response(reply))
}

fn claim_response(reply: ClaimReply) -> Response {
    let status = outcome_status(reply.outcome);
    let headers = answer_headers(reply.outcome.is_replay(), reply.retry_after_ms);
    let capacity = reply.record.as_ref().map_or(256, record_len_hint);
    let body = ClaimResponse {
        outcome: reply.outcome.as_str(),
        record: reply.record,
        token: reply.token.map(|t| t.secret()),
        resumed: reply.resumed,
        retry_after_ms: reply.retry_after_ms,
    };
    (status, headers, SizedJson { body, capacity }).into_response()
}

// ------------------------------------------------------------------ worker writes

crate::fields::request_body! {
    required;
    /// `POST …/prepare`.
    #[derive(Debug, ToSchema)]
    #[serde(deny_unknown_fields)]
    pub struct PrepareBody {
        /// The fencing token of the claim.
        #[schema(value_type = String, min_length = 1, max_length = 256, pattern = "^[^\\x00]*$")]
        pub token: FencingToken,
        /// The payload to deliver (e.g. an AI draft; any JSON but `null`); a later attempt must
        /// reuse it.
        pub payload: Value,
        pub approval_required: Option<bool>,
    }
}

/// Save the payload to deliver (optionally waiting for approval).
#[utoipa::path(post, path = "/v1/namespaces/{ns}/keys/{key}/prepare", tag = "keys",
    params(("ns" = String, Path), ("key" = String, Path)), request_body = PrepareBody,
    responses((status = 200, description = "prepared or awaiting_approval", body = StateResponse)))]
pub async fn prepare(
    State(st): State<AppState>,
    nk: NsKey,
    Body(body): Body<PrepareBody>,
) -> ApiResult<Json<StateResponse>> {
    let op = Op::Prepare(PrepareRequest {
        token: body.token.into_string(),
        payload: body.payload,
        approval_required: body.approval_required.unwrap_or(false),
    });
    state_write(&st, &nk, "prepare", op, None).await
}

crate::fields::request_body! {
    required;
    /// `POST …/heartbeat`.
    #[derive(Debug, ToSchema)]
    #[serde(deny_unknown_fields)]
    pub struct HeartbeatBody {
        #[schema(value_type = String, min_length = 1, max_length = 256, pattern = "^[^\\x00]*$")]
        pub token: FencingToken,
        /// New lease length from now, 1 ms to 7 days; default from the namespace policy.
        #[schema(value_type = Option<i64>, minimum = 1, maximum = 604_800_000)]
        pub lease_ms: Option<LeaseMs>,
    }
}

/// Extend the lease.
#[utoipa::path(post, path = "/v1/namespaces/{ns}/keys/{key}/heartbeat", tag = "keys",
    params(("ns" = String, Path), ("key" = String, Path)), request_body = HeartbeatBody,
    responses((status = 200, description = "the lease is extended", body = StateResponse)))]
pub async fn heartbeat(
    State(st): State<AppState>,
    nk: NsKey,
    Body(body): Body<HeartbeatBody>,
) -> ApiResult<Json<StateResponse>> {
    let op = Op::Heartbeat(HeartbeatRequest {
        token: body.token.into_string(),
        lease_ms: body.lease_ms.map(|l| l.0),
    });
    state_write(&st, &nk, "heartbeat", op, None).await
}

crate::fields::request_body! {
    required;
    /// `POST …/complete`.
    #[derive(Debug, ToSchema)]
    #[serde(deny_unknown_fields)]
    pub struct CompleteBody {
        #[schema(value_type = String, min_length = 1, max_length = 256, pattern = "^[^\\x00]*$")]
        pub token: FencingToken,
        /// Stored and replayed to every later claim.
        pub result: Option<Value>,
        /// At most 512 characters, no NUL.
        #[schema(value_type = Option<String>, max_length = 512, pattern = "^[^\\x00]*$")]
        pub external_ref: Option<ExternalRef>,
        /// What this attempt spent: recorded on its event and summed on the record.
        #[schema(value_type = Option<CostBody>)]
        pub cost: Option<CostBody>,
    }
}

/// The side effect happened: store the result for replay.
#[utoipa::path(post, path = "/v1/namespaces/{ns}/keys/{key}/complete", tag = "keys",
    params(("ns" = String, Path), ("key" = String, Path)), request_body = CompleteBody,
    responses((status = 200, description = "completed (also a repeated identical complete)", body = StateResponse)))]
pub async fn complete(
    State(st): State<AppState>,
    nk: NsKey,
    Body(body): Body<CompleteBody>,
) -> ApiResult<Json<StateResponse>> {
    let op = Op::Complete(CompleteRequest {
        cost: CostBody::of(body.cost)?,
        token: body.token.into_string(),
        result: body.result,
        external_ref: body.external_ref.map(ExternalRef::into_string),
    });
    state_write(&st, &nk, "complete", op, None).await
}

crate::fields::request_body! {
    required;
    /// `POST …/fail`. The server must be able to classify the failure: give `kind`, or an
    /// `http_status` of 400–599, or (without `http_status`) an `error.category` of timeout,
    /// connection, validation, auth or business; otherwise 422 `invalid_field`.
    #[derive(Debug, ToSchema)]
    #[serde(deny_unknown_fields)]
    pub struct FailBody {
        #[schema(value_type = String, min_length = 1, max_length = 256, pattern = "^[^\\x00]*$")]
        pub token: FencingToken,
        /// Decided by the caller (else the server classifies).
        #[schema(value_type = Option<ClassDoc>)]
        pub kind: Option<Class>,
        /// The destination's HTTP status; 100–399 only together with `kind`.
        #[schema(value_type = Option<u16>, minimum = 100, maximum = 599)]
        pub http_status: Option<HttpStatus>,
        /// The destination's Retry-After: delay seconds (integer, or a string of digits) up to
        /// 316224000 (10 years). An HTTP-date string is accepted as well.
        #[schema(schema_with = retry_after_schema)]
        pub retry_after: Option<Value>,
        /// false when the request certainly never left (connection refused, DNS failure).
        pub sent: Option<bool>,
        pub error: Option<FailErrorBody>,
        /// What this attempt spent: recorded on its event and summed on the record.
        #[schema(value_type = Option<CostBody>)]
        pub cost: Option<CostBody>,
    }
}

crate::fields::request_body! {
    required;
    #[derive(Debug, ToSchema)]
    #[serde(deny_unknown_fields)]
    pub struct FailErrorBody {
        /// timeout | connection | validation | auth | business | … (1 to 64 characters)
        #[schema(value_type = String, min_length = 1, max_length = 64, pattern = "^[^\\x00]*$")]
        pub category: Category,
        /// At most 100000 characters; stored sanitized and cut to 1000. Never put secrets here.
        #[schema(value_type = Option<String>, max_length = 100_000)]
        pub message: Option<ErrorMessage>,
    }
}

impl FailBody {
    /// The ledger's failure report; `now_ms` dates a Retry-After given as an HTTP-date.
    pub fn into_request(self, now_ms: i64) -> ApiResult<FailRequest> {
        let retry_after_ms =
            match self.retry_after {
                None => None,
                // 972.0 is the JSON number 972.
                Some(v) => Some(parse_retry_after(&json_integer_value(&v), now_ms).map_err(
                    |m| ApiError::invalid_field("retry_after", format!("`retry_after` {m}")),
                )?),
            };
        Ok(FailRequest {
            cost: CostBody::of(self.cost)?,
            token: self.token.into_string(),
            kind: self.kind,
            http_status: self.http_status.map(|s| s.0),
            retry_after_ms,
            sent: self.sent,
            error: self.error.map(|e| FailErrorInput {
                category: e.category.into_string(),
                message: e.message.map(ErrorMessage::into_string).unwrap_or_default(),
            }),
        })
    }
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

/// A JSON number with no fractional part as an integer value; anything else as is.
fn json_integer_value(v: &Value) -> Value {
    match v {
        Value::Number(_) => idem::policy::json_integer(v).map_or_else(|| v.clone(), Value::from),
        _ => v.clone(),
    }
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

/// The side effect failed: the server classifies and decides about a retry.
#[utoipa::path(post, path = "/v1/namespaces/{ns}/keys/{key}/fail", tag = "keys",
    params(("ns" = String, Path), ("key" = String, Path)), request_body = FailBody,
    responses((status = 200, description = "the decision and the record", body = FailResponse)))]
pub async fn fail(
    State(st): State<AppState>,
    nk: NsKey,
    Body(body): Body<FailBody>,
) -> ApiResult<Json<FailResponse>> {
    let req = body.into_request(st.ledger.now().millis())?;
    let http_status = req.http_status;
    let ex = exec(&st, &nk, Op::Fail(req), None).await?;
    match &ex.reply {
        Ok(Reply::Fail(f)) => {
            metrics::fail(f.class.as_str(), http_status);
            log_op(
                "fail",
                &nk,
                ex.from_state,
                Some(&f.record),
                f.class.as_str(),
            );
            Ok(Json(FailResponse {
                state: f.record.state,
                class: f.class,
                retry: RetryDoc {
                    allowed: f.retry.allowed,
                    attempt: f.retry.attempt,
                    max_attempts: f.retry.max_attempts,
                    not_before: f.retry.not_before,
                },
                record: f.record.clone(),
            }))
        }
        Ok(other) => Err(ApiError::internal(format!("unexpected reply {other:?}"))),
        Err(e) => Err(refused("fail", &nk, ex.from_state, e.clone().into())),
    }
}

// ------------------------------------------------------------------ reading

/// One record and its events (oldest first).
#[utoipa::path(get, path = "/v1/namespaces/{ns}/keys/{key}", tag = "keys",
    params(("ns" = String, Path), ("key" = String, Path)),
    responses((status = 200, description = "the record and its events", body = RecordWithEventsDoc)))]
pub async fn get_record(State(st): State<AppState>, nk: NsKey) -> ApiResult<Response> {
    match st.ledger.store().get(&nk.ns, &nk.key).await? {
        Some(rw) => Ok(Json(rw).into_response()),
        None => Err(ApiError::NotFound(format!(
            "no record for this key in namespace {}",
            nk.ns
        ))),
    }
}

/// `GET /v1/namespaces/{ns}/keys`.
#[derive(Serialize, ToSchema)]
pub struct ListResponse {
    #[schema(value_type = Vec<RecordDoc>)]
    pub items: Vec<Record>,
    /// null at the end.
    pub next_cursor: Option<String>,
}

/// Records of a namespace, newest `updated_at` first (review queue: `state=needs_review`).
#[utoipa::path(get, path = "/v1/namespaces/{ns}/keys", tag = "keys",
    params(("ns" = String, Path),
        ("state" = Option<String>, Query, description = "only records in this state (empty: all)"),
        ("limit" = Option<u32>, Query, description = "1 to 1000, default 100 (empty: the default)"),
        ("cursor" = Option<String>, Query, description = "next_cursor of the previous page as is (empty: the first page)"),
        ("owner" = Option<String>, Query, description = "only records with this owner (empty: any)"),
        ("correlation_id" = Option<String>, Query, description = "only records with this correlation id (empty: any)")),
    responses((status = 200, description = "one page, newest updated_at first", body = ListResponse)))]
pub async fn list(
    State(st): State<AppState>,
    NsPath(ns): NsPath,
    RawQuery(q): RawQuery,
) -> ApiResult<Json<ListResponse>> {
    let mut query = ListQuery {
        limit: 100,
        ..ListQuery::default()
    };
    for (k, v) in query_pairs(q.as_deref()) {
        match k.as_ref() {
            "state" => query.state = Some(query_state(&v)?),
            "limit" => query.limit = query_limit(&v)?,
            "cursor" => query.cursor = Some(v.into_owned()),
            "owner" => query.owner = Some(filter_text("owner", &v)?),
            "correlation_id" => query.correlation_id = Some(filter_text("correlation_id", &v)?),
            _ => {}
        }
    }
    let page = st.ledger.store().list(&ns, &query).await?;
    Ok(Json(ListResponse {
        items: page.items,
        next_cursor: page.next_cursor,
    }))
}

/// An `owner` or `correlation_id` filter: what a claim may have recorded (at most 255
/// characters, no NUL), else 422 naming the parameter.
pub(crate) fn filter_text(field: &str, v: &str) -> ApiResult<String> {
    if v.chars().count() > 255 || v.contains('\0') {
        return Err(ApiError::invalid_field(
            field,
            format!("`{field}` is at most 255 characters, without NUL"),
        ));
    }
    Ok(v.to_owned())
}
