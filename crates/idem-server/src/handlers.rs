//! Request handlers: each one translates HTTP into one ledger operation and the result back.
//! No rule of the product lives here (those are in `idem-core`); what does live here is the
//! reading of bodies, the shape of answers, the request log line and the metrics.
//!
//! Invariant: a request refused while reading its input never reaches the store, so it
//! writes nothing.

use std::time::{Duration, Instant};

use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use idem::classify::parse_retry_after;
use idem::derive::{derive_key, DeriveError};
use idem::policy::MAX_LEASE_MS;
use idem::{
    ClaimOutcome, ClaimReply, ClaimRequest, Class, CompleteRequest, EventType, Executed,
    FailErrorInput, FailRequest, Fingerprint, HeartbeatRequest, Key, LeaseExpiry, ListQuery,
    Namespace, NamespaceChange, NamespaceInfo, NewApiToken, Op, PrepareRequest, Record, Reply,
    ResolveAction, ResolveRequest, Role, State as RecState,
};
use serde_json::Value;

use crate::api::*;
use crate::auth::Caller;
use crate::config::MAX_WAIT_MS;
use crate::error::{ApiError, ApiResult};
use crate::input::{JsonBody, NsKey, NsPath, Obj};
use crate::metrics;
use crate::state::AppState;

const MAX_OWNER: usize = 255;
const MAX_CORRELATION_ID: usize = 255;
const MAX_EXTERNAL_REF: usize = 512;
const MAX_NOTE: usize = 2000;
const MAX_TOKEN: usize = 256;
const MAX_CATEGORY: usize = 64;
const MAX_MESSAGE: usize = 100_000;
const MAX_LABEL: usize = 255;

/// How often a `wait_ms` claim looks at the record again.
const WAIT_POLL: Duration = Duration::from_millis(50);

// ------------------------------------------------------------------ helpers

/// Runs one operation and returns what the store did (the refusal stays inside).
async fn exec(st: &AppState, nk: &NsKey, op: Op, actor: Option<String>) -> ApiResult<Executed> {
    let span = crate::telemetry::store_span(nk.ns.as_str(), op.name());
    let run = st.ledger.execute(&nk.ns, &nk.key, op, actor);
    Ok(tracing::Instrument::instrument(run, span).await?)
}

/// The request log line: never payloads, results, tokens or secrets.
fn log_op(
    op: &str,
    nk: &NsKey,
    from_state: Option<RecState>,
    record: Option<&Record>,
    outcome: &str,
) {
    let from = from_state.map_or("none", RecState::as_str);
    let to = record.map_or(from, |r| r.state.as_str());
    let (owner, attempt, correlation_id) = record.map_or((None, 0, None), |r| {
        (r.owner.as_deref(), r.attempt, r.correlation_id.as_deref())
    });
    tracing::info!(
        op,
        namespace = %nk.ns,
        key = %MaskedKey(nk.key.as_str()),
        owner,
        attempt,
        from,
        to,
        outcome,
        correlation_id,
        "{op}"
    );
}

/// A key as logged: [`Key::masked`] (first 6 characters, `…`, first 8 hex digits of its
/// SHA-256), written straight into the log line instead of through three strings.
struct MaskedKey<'a>(&'a str);

impl std::fmt::Display for MaskedKey<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use sha2::Digest;
        use std::fmt::Write;
        for c in self.0.chars().take(6) {
            f.write_char(c)?;
        }
        f.write_char('…')?;
        for b in &sha2::Sha256::digest(self.0.as_bytes())[..4] {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// The record a worker or operator write answers with.
fn record_reply(reply: Result<Reply, idem::OpError>) -> ApiResult<Record> {
    match reply {
        Ok(Reply::Record(r)) => Ok(r),
        Ok(Reply::Fail(f)) => Ok(f.record),
        Ok(other) => Err(ApiError::Internal(format!("unexpected reply {other:?}"))),
        Err(e) => Err(e.into()),
    }
}

/// Logs a refused operation and turns it into its API error.
fn refused(op: &str, nk: &NsKey, from_state: Option<RecState>, e: ApiError) -> ApiError {
    log_op(op, nk, from_state, None, e.code());
    e
}

/// Runs a worker or operator write that answers `{state, record}`.
async fn state_write(
    st: &AppState,
    nk: &NsKey,
    name: &str,
    op: Op,
    actor: Option<String>,
) -> ApiResult<Json<StateResponse>> {
    let Executed {
        reply, from_state, ..
    } = exec(st, nk, op, actor).await?;
    match record_reply(reply) {
        Ok(record) => {
            log_op(name, nk, from_state, Some(&record), "ok");
            Ok(Json(StateResponse {
                state: record.state,
                record,
            }))
        }
        Err(e) => Err(refused(name, nk, from_state, e)),
    }
}

/// A JSON number with no fractional part as an integer value; anything else as is.
fn json_integer_value(v: &Value) -> Value {
    match v {
        Value::Number(_) => idem::policy::json_integer(v).map_or_else(|| v.clone(), Value::from),
        _ => v.clone(),
    }
}

fn token_of(o: &mut Obj) -> ApiResult<String> {
    o.req_str("token", MAX_TOKEN)
}

// ------------------------------------------------------------------ claim

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
    JsonBody(body): JsonBody,
) -> ApiResult<Response> {
    let (req, wait_ms) = parse_claim(body)?;
    let again = (wait_ms > 0).then(|| req.clone());
    let (mut reply, mut ex) = claim_of(exec(&st, &nk, Op::Claim(req), None).await?)?;
    if let (ClaimOutcome::InFlight, Some(req)) = (reply.outcome, again) {
        let deadline = Instant::now() + Duration::from_millis(wait_ms as u64);
        match wait_for_holder(&st, &nk, deadline).await? {
            WaitEnd::Changed => {
                (reply, ex) = claim_of(exec(&st, &nk, Op::Claim(req), None).await?)?;
            }
            WaitEnd::Still(Some(rec)) => {
                reply.retry_after_ms = Some(rec.lease_remaining_ms(st.ledger.now()));
                reply.record = Some(*rec);
            }
            WaitEnd::Still(None) => {}
        }
    }
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

/// The claim answer, taken out of what the store did (the rest is kept for the log line and
/// the metrics).
fn claim_of(mut ex: Executed) -> ApiResult<(ClaimReply, Executed)> {
    let reply = std::mem::replace(&mut ex.reply, Ok(Reply::Swept { changed: false }));
    match reply {
        Ok(Reply::Claim(c)) => Ok((c, ex)),
        Ok(other) => Err(ApiError::Internal(format!("unexpected reply {other:?}"))),
        Err(e) => Err(e.into()),
    }
}

fn parse_claim(body: Value) -> ApiResult<(ClaimRequest, i64)> {
    let mut o = Obj::body(body, ClaimBody::FIELDS, true)?;
    let payload = o.value("payload");
    let fingerprint = o.opt_str("fingerprint", 128)?;
    let fingerprint = match (payload, fingerprint) {
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
        (None, Some(f)) => Some(Fingerprint::parse(&f).map_err(|_| {
            ApiError::invalid_field(
                "fingerprint",
                "`fingerprint` must be 64 hex digits (SHA-256 of the JCS payload)",
            )
        })?),
        (None, None) => None,
    };
    let req = ClaimRequest {
        fingerprint,
        owner: o.opt_str("owner", MAX_OWNER)?,
        lease_ms: o.opt_i64("lease_ms", 1, MAX_LEASE_MS)?,
        correlation_id: o.opt_str("correlation_id", MAX_CORRELATION_ID)?,
        lease_expiry: o.opt_enum("lease_expiry", LeaseExpiry::parse, "reclaim, review")?,
    };
    let wait_ms = o
        .opt_i64("wait_ms", 0, i64::MAX)?
        .unwrap_or(0)
        .min(MAX_WAIT_MS);
    Ok((req, wait_ms))
}

enum WaitEnd {
    /// The holder finished or the lease expired: claim again.
    Changed,
    /// Deadline (or shutdown) reached; the newest record seen.
    Still(Option<Box<Record>>),
}

/// Polls the record read-only (no event per look) until the lease is no longer held.
async fn wait_for_holder(st: &AppState, nk: &NsKey, deadline: Instant) -> ApiResult<WaitEnd> {
    let mut shutdown = st.shutdown.clone();
    let mut last = None;
    loop {
        let now = Instant::now();
        if now >= deadline || *shutdown.borrow() {
            return Ok(WaitEnd::Still(last));
        }
        let nap = WAIT_POLL.min(deadline - now);
        tokio::select! {
            _ = tokio::time::sleep(nap) => {}
            _ = shutdown.changed() => return Ok(WaitEnd::Still(last)),
        }
        match st.ledger.store().get(&nk.ns, &nk.key).await? {
            None => return Ok(WaitEnd::Changed),
            Some(rw) if !rw.record.lease_valid(st.ledger.now()) => return Ok(WaitEnd::Changed),
            Some(rw) => last = Some(Box::new(rw.record)),
        }
    }
}

fn claim_response(reply: ClaimReply) -> Response {
    let status = StatusCode::from_u16(reply.outcome.http_status())
        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut headers = HeaderMap::new();
    if reply.outcome.is_replay() {
        headers.insert(
            HeaderName::from_static("idempotent-replayed"),
            HeaderValue::from_static("true"),
        );
    }
    if let Some(ms) = reply.retry_after_ms {
        let secs = (ms.max(0) + 999) / 1000;
        if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
            headers.insert(axum::http::header::RETRY_AFTER, v);
        }
    }
    let body = ClaimResponse {
        outcome: reply.outcome.as_str(),
        record: reply.record,
        token: reply.token.map(|t| t.secret()),
        resumed: reply.resumed,
        retry_after_ms: reply.retry_after_ms,
    };
    (status, headers, Json(body)).into_response()
}

// ------------------------------------------------------------------ worker writes

/// Save the payload to deliver (optionally waiting for approval).
#[utoipa::path(post, path = "/v1/namespaces/{ns}/keys/{key}/prepare", tag = "keys",
    params(("ns" = String, Path), ("key" = String, Path)), request_body = PrepareBody,
    responses((status = 200, description = "prepared or awaiting_approval", body = StateResponse)))]
pub async fn prepare(
    State(st): State<AppState>,
    nk: NsKey,
    JsonBody(body): JsonBody,
) -> ApiResult<Json<StateResponse>> {
    let mut o = Obj::body(body, PrepareBody::FIELDS, false)?;
    let token = token_of(&mut o)?;
    let payload = o
        .value("payload")
        .ok_or_else(|| o.error("payload", "is required"))?;
    let approval_required = o.opt_bool("approval_required")?.unwrap_or(false);
    let op = Op::Prepare(PrepareRequest {
        token,
        payload,
        approval_required,
    });
    state_write(&st, &nk, "prepare", op, None).await
}

/// Extend the lease.
#[utoipa::path(post, path = "/v1/namespaces/{ns}/keys/{key}/heartbeat", tag = "keys",
    params(("ns" = String, Path), ("key" = String, Path)), request_body = HeartbeatBody,
    responses((status = 200, description = "the lease is extended", body = StateResponse)))]
pub async fn heartbeat(
    State(st): State<AppState>,
    nk: NsKey,
    JsonBody(body): JsonBody,
) -> ApiResult<Json<StateResponse>> {
    let mut o = Obj::body(body, HeartbeatBody::FIELDS, false)?;
    let token = token_of(&mut o)?;
    let lease_ms = o.opt_i64("lease_ms", 1, MAX_LEASE_MS)?;
    state_write(
        &st,
        &nk,
        "heartbeat",
        Op::Heartbeat(HeartbeatRequest { token, lease_ms }),
        None,
    )
    .await
}

/// The side effect happened: store the result for replay.
#[utoipa::path(post, path = "/v1/namespaces/{ns}/keys/{key}/complete", tag = "keys",
    params(("ns" = String, Path), ("key" = String, Path)), request_body = CompleteBody,
    responses((status = 200, description = "completed (also a repeated identical complete)", body = StateResponse)))]
pub async fn complete(
    State(st): State<AppState>,
    nk: NsKey,
    JsonBody(body): JsonBody,
) -> ApiResult<Json<StateResponse>> {
    let mut o = Obj::body(body, CompleteBody::FIELDS, false)?;
    let token = token_of(&mut o)?;
    let result = o.value("result");
    let external_ref = o.opt_str("external_ref", MAX_EXTERNAL_REF)?;
    let op = Op::Complete(CompleteRequest {
        token,
        result,
        external_ref,
    });
    state_write(&st, &nk, "complete", op, None).await
}

/// The side effect failed: the server classifies and decides about a retry.
#[utoipa::path(post, path = "/v1/namespaces/{ns}/keys/{key}/fail", tag = "keys",
    params(("ns" = String, Path), ("key" = String, Path)), request_body = FailBody,
    responses((status = 200, description = "the decision and the record", body = FailResponse)))]
pub async fn fail(
    State(st): State<AppState>,
    nk: NsKey,
    JsonBody(body): JsonBody,
) -> ApiResult<Json<FailResponse>> {
    let mut o = Obj::body(body, FailBody::FIELDS, false)?;
    let token = token_of(&mut o)?;
    let kind = o.opt_enum("kind", Class::parse, "retryable, permanent, ambiguous")?;
    let http_status = o.opt_i64("http_status", 100, 599)?.map(|s| s as u16);
    let retry_after_ms = match o.value("retry_after") {
        None => None,
        // 972.0 is the JSON number 972.
        Some(v) => Some(
            parse_retry_after(&json_integer_value(&v), st.ledger.now().millis())
                .map_err(|m| o.error("retry_after", &m))?,
        ),
    };
    let sent = o.opt_bool("sent")?;
    let error = match o.opt_obj("error", FailErrorBody::FIELDS)? {
        None => None,
        Some(mut e) => Some(FailErrorInput {
            category: e.req_str("category", MAX_CATEGORY)?,
            message: e.opt_text("message", MAX_MESSAGE)?.unwrap_or_default(),
        }),
    };
    let op = Op::Fail(FailRequest {
        token,
        kind,
        http_status,
        retry_after_ms,
        sent,
        error,
    });
    let ex = exec(&st, &nk, op, None).await?;
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
        Ok(other) => Err(ApiError::Internal(format!("unexpected reply {other:?}"))),
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

/// Records of a namespace, newest `updated_at` first (review queue: `state=needs_review`).
#[utoipa::path(get, path = "/v1/namespaces/{ns}/keys", tag = "keys",
    params(("ns" = String, Path),
        ("state" = Option<String>, Query, description = "only records in this state (empty: all)"),
        ("limit" = Option<u32>, Query, description = "1 to 1000, default 100 (empty: the default)"),
        ("cursor" = Option<String>, Query, description = "next_cursor of the previous page as is (empty: the first page)")),
    responses((status = 200, description = "one page, newest updated_at first", body = ListResponse)))]
pub async fn list(
    State(st): State<AppState>,
    NsPath(ns): NsPath,
    RawQuery(q): RawQuery,
) -> ApiResult<Json<ListResponse>> {
    let mut query = ListQuery {
        state: None,
        limit: 100,
        cursor: None,
    };
    for (k, v) in url::form_urlencoded::parse(q.unwrap_or_default().as_bytes()) {
        match k.as_ref() {
            "state" if !v.is_empty() => {
                query.state = Some(RecState::parse(&v).ok_or_else(|| {
                    ApiError::invalid_field("state", format!("{v:?} is not a state"))
                })?)
            }
            "limit" if !v.is_empty() => {
                query.limit = v
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=1000).contains(n))
                    .ok_or_else(|| {
                        ApiError::invalid_field("limit", "must be an integer from 1 to 1000")
                    })?
            }
            "cursor" if !v.is_empty() => query.cursor = Some(v.into_owned()),
            _ => {}
        }
    }
    let page = st.ledger.store().list(&ns, &query).await?;
    Ok(Json(ListResponse {
        items: page.items,
        next_cursor: page.next_cursor,
    }))
}

// ------------------------------------------------------------------ operator actions

fn note_of(body: Value) -> ApiResult<Option<String>> {
    let mut o = Obj::body(body, NoteBody::FIELDS, true)?;
    o.opt_str("note", MAX_NOTE)
}

/// Decide an ambiguous or failed record (operator).
#[utoipa::path(post, path = "/v1/namespaces/{ns}/keys/{key}/resolve", tag = "operator",
    params(("ns" = String, Path), ("key" = String, Path)), request_body = ResolveBody,
    responses((status = 200, description = "the decision is recorded", body = StateResponse)))]
pub async fn resolve(
    State(st): State<AppState>,
    Extension(caller): Extension<Caller>,
    nk: NsKey,
    JsonBody(body): JsonBody,
) -> ApiResult<Json<StateResponse>> {
    let mut o = Obj::body(body, ResolveBody::FIELDS, false)?;
    let action = o
        .opt_enum(
            "action",
            ResolveAction::parse,
            "completed, retry, failed_permanent",
        )?
        .ok_or_else(|| {
            o.error(
                "action",
                "is required: completed, retry or failed_permanent",
            )
        })?;
    let external_ref = o.opt_str("external_ref", MAX_EXTERNAL_REF)?;
    let result = o.value("result");
    let note = o.req_str("note", MAX_NOTE)?;
    let op = Op::Resolve(ResolveRequest {
        action,
        external_ref,
        result,
        note,
    });
    state_write(&st, &nk, "resolve", op, caller.actor()).await
}

/// Approve a prepared payload waiting for a person (operator).
#[utoipa::path(post, path = "/v1/namespaces/{ns}/keys/{key}/approve", tag = "operator",
    params(("ns" = String, Path), ("key" = String, Path)), request_body = NoteBody,
    responses((status = 200, description = "the decision is recorded", body = StateResponse)))]
pub async fn approve(
    State(st): State<AppState>,
    Extension(caller): Extension<Caller>,
    nk: NsKey,
    JsonBody(body): JsonBody,
) -> ApiResult<Json<StateResponse>> {
    let note = note_of(body)?;
    state_write(&st, &nk, "approve", Op::Approve { note }, caller.actor()).await
}

/// Reject a prepared payload waiting for a person (operator).
#[utoipa::path(post, path = "/v1/namespaces/{ns}/keys/{key}/reject", tag = "operator",
    params(("ns" = String, Path), ("key" = String, Path)), request_body = NoteBody,
    responses((status = 200, description = "the decision is recorded", body = StateResponse)))]
pub async fn reject(
    State(st): State<AppState>,
    Extension(caller): Extension<Caller>,
    nk: NsKey,
    JsonBody(body): JsonBody,
) -> ApiResult<Json<StateResponse>> {
    let note = note_of(body)?;
    state_write(&st, &nk, "reject", Op::Reject { note }, caller.actor()).await
}

// ------------------------------------------------------------------ namespaces

fn ns_response(info: NamespaceInfo) -> Json<NamespaceResponse> {
    Json(NamespaceResponse {
        namespace: info.namespace,
        paused: info.paused,
        policy: info.policy.to_json(),
        counts: info.counts.to_json(),
    })
}

/// Policy, pause flag and counts (defaults for a never-used namespace).
#[utoipa::path(get, path = "/v1/namespaces/{ns}", tag = "namespaces",
    params(("ns" = String, Path)),
    responses((status = 200, description = "the namespace (defaults if never used)", body = NamespaceResponse)))]
pub async fn get_namespace(
    State(st): State<AppState>,
    NsPath(ns): NsPath,
) -> ApiResult<Json<NamespaceResponse>> {
    Ok(ns_response(st.ledger.store().namespace(&ns).await?))
}

/// Merge policy fields (recursively; unknown fields are refused) (operator).
#[utoipa::path(patch, path = "/v1/namespaces/{ns}", tag = "namespaces",
    params(("ns" = String, Path)), request_body = PolicyPatchBody,
    responses((status = 200, description = "the namespace after the change", body = NamespaceResponse)))]
pub async fn patch_namespace(
    State(st): State<AppState>,
    Extension(caller): Extension<Caller>,
    NsPath(ns): NsPath,
    JsonBody(body): JsonBody,
) -> ApiResult<Json<NamespaceResponse>> {
    if !body.is_object() {
        return Err(ApiError::InvalidJson(
            "the request body must be a JSON object of policy fields".into(),
        ));
    }
    // Validate before writing so the answer names the field whatever the backend does.
    let current = st.ledger.store().namespace(&ns).await?;
    current.policy.patch(&body)?;
    let info = st
        .ledger
        .store()
        .update_namespace(&ns, NamespaceChange::Patch(body), st.ledger.now())
        .await?;
    tracing::info!(namespace = %ns, actor = caller.actor(), "namespace policy changed");
    Ok(ns_response(info))
}

async fn switch(
    st: &AppState,
    caller: &Caller,
    ns: &Namespace,
    body: Value,
    change: NamespaceChange,
) -> ApiResult<Json<NamespaceResponse>> {
    let note = note_of(body)?;
    let what = if matches!(change, NamespaceChange::Pause) {
        "paused"
    } else {
        "resumed"
    };
    let info = st
        .ledger
        .store()
        .update_namespace(ns, change, st.ledger.now())
        .await?;
    tracing::warn!(namespace = %ns, actor = caller.actor(), note, "namespace {what}");
    Ok(ns_response(info))
}

/// Stop control: claims get 503 `paused`; in-flight work can still land (operator).
#[utoipa::path(post, path = "/v1/namespaces/{ns}/pause", tag = "namespaces",
    params(("ns" = String, Path)), request_body = NoteBody,
    responses((status = 200, description = "the namespace after the change", body = NamespaceResponse)))]
pub async fn pause(
    State(st): State<AppState>,
    Extension(caller): Extension<Caller>,
    NsPath(ns): NsPath,
    JsonBody(body): JsonBody,
) -> ApiResult<Json<NamespaceResponse>> {
    switch(&st, &caller, &ns, body, NamespaceChange::Pause).await
}

/// Lift the stop control (operator).
#[utoipa::path(post, path = "/v1/namespaces/{ns}/resume", tag = "namespaces",
    params(("ns" = String, Path)), request_body = NoteBody,
    responses((status = 200, description = "the namespace after the change", body = NamespaceResponse)))]
pub async fn resume(
    State(st): State<AppState>,
    Extension(caller): Extension<Caller>,
    NsPath(ns): NsPath,
    JsonBody(body): JsonBody,
) -> ApiResult<Json<NamespaceResponse>> {
    switch(&st, &caller, &ns, body, NamespaceChange::Resume).await
}

// ------------------------------------------------------------------ keys, tokens

/// A stable key from identity fields of an event.
#[utoipa::path(post, path = "/v1/keys/derive", tag = "keys", request_body = DeriveBody,
    responses((status = 200, description = "the derived key", body = DeriveResponse)))]
pub async fn derive(JsonBody(body): JsonBody) -> ApiResult<Json<DeriveResponse>> {
    let mut o = Obj::body(body, DeriveBody::FIELDS, false)?;
    let event = o
        .value("event")
        .ok_or_else(|| o.error("event", "is required (the event JSON)"))?;
    let fields: Vec<String> = match o.value("fields") {
        Some(Value::Array(a)) => a
            .into_iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => Ok(s),
                _ => Err(ApiError::invalid_field(
                    format!("fields[{i}]"),
                    "must be a JSON pointer string",
                )),
            })
            .collect::<Result<_, _>>()?,
        _ => return Err(o.error("fields", "is required: an array of JSON pointers")),
    };
    let prefix = o.opt_str("prefix", 255)?;
    let suffix = o.opt_str("suffix", 255)?;
    let hash = o.opt_bool("hash")?.unwrap_or(false);
    let key: Key = derive_key(&event, &fields, prefix.as_deref(), suffix.as_deref(), hash)
        .map_err(|e| match e {
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
    let mut o = Obj::body(body, TokenBody::FIELDS, false)?;
    let role = o
        .opt_enum("role", Role::parse, "worker, operator, admin")?
        .ok_or_else(|| o.error("role", "is required: worker, operator or admin"))?;
    let scope = o.req_str("namespace", 128)?;
    if scope != "*" {
        Namespace::try_from(scope.as_str())
            .map_err(|e| ApiError::invalid_field("namespace", e.to_string()))?;
    }
    let label = o.opt_str("label", MAX_LABEL)?;
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

// ------------------------------------------------------------------ operations

/// The process is up.
#[utoipa::path(get, path = "/healthz", tag = "ops",
    responses((status = 200, description = "the process is up", body = StatusResponse)))]
pub async fn healthz() -> Json<StatusResponse> {
    Json(StatusResponse { status: "ok" })
}

/// The store answers.
#[utoipa::path(get, path = "/readyz", tag = "ops",
    responses((status = 200, description = "the store answers", body = StatusResponse)))]
pub async fn readyz(State(st): State<AppState>) -> ApiResult<Json<StatusResponse>> {
    st.ledger.store().ping().await?;
    Ok(Json(StatusResponse { status: "ready" }))
}

/// Prometheus text exposition.
#[utoipa::path(get, path = "/metrics", tag = "ops",
    responses((status = 200, description = "Prometheus text format 0.0.4", content_type = "text/plain", body = String)))]
pub async fn metrics_text(State(st): State<AppState>) -> Response {
    refresh_gauges(&st).await;
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        metrics::render(),
    )
        .into_response()
}

/// Reads the store gauges for this scrape. One read at a time: a scrape that waited for
/// another's read takes its values when that read began after this scrape arrived (they are
/// as current as its own would be), so a scrape storm costs one read per round, never a
/// query each. With `stats_interval` > 0 (at most 1 s), a read younger than that is reused
/// too. A store that does not answer leaves the last values (the failure shows in `/readyz`
/// and in the request metrics) rather than failing the scrape of every other metric.
async fn refresh_gauges(st: &AppState) {
    let arrived = std::time::Instant::now();
    let mut cached = st.gauges.lock().await;
    let fresh = cached
        .as_ref()
        .is_some_and(|(at, _)| *at >= arrived || at.elapsed() < st.config.stats_interval);
    if fresh {
        if let Some((_, stats)) = cached.as_ref() {
            crate::metrics::set_stats(stats);
        }
        return;
    }
    let began = std::time::Instant::now();
    match crate::background::gauges_once(st.ledger.store(), st.ledger.now()).await {
        Ok(stats) => *cached = Some((began, stats)),
        Err(e) => tracing::warn!(error = %e, "metrics: store gauges not refreshed"),
    }
}

/// This document.
#[utoipa::path(get, path = "/openapi.json", tag = "ops",
    responses((status = 200, description = "OpenAPI 3.1", content_type = "application/json", body = Object)))]
pub async fn openapi_json() -> Response {
    Json(crate::openapi::document()).into_response()
}

/// Unknown routes: 404 problem+json.
pub async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::NotFound(format!("no such route: {}", uri.path()))
}

/// Known route, wrong method: 405 with the `Allow` header of the path.
pub async fn method_not_allowed(allow: HeaderValue) -> Response {
    let mut resp = ApiError::MethodNotAllowed.into_response();
    resp.headers_mut().insert(axum::http::header::ALLOW, allow);
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masked_keys_are_written_as_the_core_masks_them() {
        for k in [
            "evt_123:charge",
            "a",
            "abcdef",
            "abcdefg",
            "customer-4711:charge",
        ] {
            let key = Key::try_from(k).expect("key");
            assert_eq!(MaskedKey(k).to_string(), key.masked(), "{k}");
        }
    }
}
