//! What the endpoints share: running one ledger operation, the request log line, the
//! `{state, record}` answer of a write, the headers of a claim's answer, the query parameters
//! several lists take, and [`Acting`], the request of an operator action.
//!
//! Invariant: the log line never carries payloads, results, tokens or secrets; a key is
//! written masked.

use std::borrow::Cow;

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue};
use axum::Json;
use idem::{ClaimReply, Executed, Op, Record, Reply, State as RecState};

use crate::api::StateResponse;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::input::{Body, NsKey, RequestBody};
use crate::state::AppState;

/// The request of an action someone takes on a namespace or a record (pause, resume, approve,
/// reject): who acts, the path `P` and the typed body `B`, read in the order every handler
/// reads its extractors (caller, path, then body), so refusals are the same as before.
pub struct Acting<P, B> {
    pub st: AppState,
    pub caller: Caller,
    pub path: P,
    pub body: B,
}

impl<P, B> FromRequest<AppState> for Acting<P, B>
where
    P: FromRequestParts<AppState, Rejection = ApiError> + Send,
    B: RequestBody + Send,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, st: &AppState) -> Result<Self, ApiError> {
        let (mut parts, body) = req.into_parts();
        let caller = caller_of(&parts)?;
        let path = P::from_request_parts(&mut parts, st).await?;
        let Body(body) = Body::<B>::from_request(Request::from_parts(parts, body), st).await?;
        Ok(Acting {
            st: st.clone(),
            caller,
            path,
            body,
        })
    }
}

/// Who asks, with the server's state: the request of a handler that needs nothing else (the
/// lists). The caller is the one the authentication layer put on the request.
pub struct Authed {
    pub st: AppState,
    pub caller: Caller,
}

impl FromRequestParts<AppState> for Authed {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, st: &AppState) -> Result<Self, ApiError> {
        Ok(Authed {
            st: st.clone(),
            caller: caller_of(parts)?,
        })
    }
}

/// The caller the authentication layer put on the request.
fn caller_of(parts: &Parts) -> Result<Caller, ApiError> {
    parts
        .extensions
        .get::<Caller>()
        .cloned()
        .ok_or_else(|| ApiError::internal("no caller on an authenticated route"))
}

/// Runs one operation and returns what the store did (the refusal stays inside).
pub async fn exec(st: &AppState, nk: &NsKey, op: Op, actor: Option<String>) -> ApiResult<Executed> {
    exec_then(st, nk, op, actor, FollowUps::default()).await
}

/// What an effect's or an action's claim does in its own step when it acquires, where the
/// store can (see `idem_store::ExecCtx::then_prepare` and `then_sent`); the answer's events
/// say what was done.
#[derive(Debug, Clone, Default)]
pub struct FollowUps {
    pub prepare: Option<idem::ThenPrepare>,
    pub sent: Option<idem::RequestSummary>,
}

/// [`exec`] of a claim with its [`FollowUps`].
pub async fn exec_then(
    st: &AppState,
    nk: &NsKey,
    op: Op,
    actor: Option<String>,
    then: FollowUps,
) -> ApiResult<Executed> {
    let traceparent = crate::telemetry::operation_traceparent();
    let span = crate::telemetry::store_span(nk.ns.as_str(), op.name());
    let run = st.ledger.execute_then(
        &nk.ns,
        &nk.key,
        op,
        actor,
        traceparent,
        then.prepare,
        then.sent,
    );
    let ex = tracing::Instrument::instrument(run, span).await?;
    crate::metrics::tally(&ex.tally);
    if ex.tally.fenced_completion {
        // Never silent: the alert is queued with the event; the log says it too.
        tracing::warn!(namespace = %nk.ns, key = %MaskedKey(nk.key.as_str()),
            "fenced completion: a worker reported an effect after its lease was taken over");
    }
    Ok(ex)
}

/// The request log line: never payloads, results, tokens or secrets.
pub fn log_op(
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

/// A key as logged: [`idem::Key::masked`] (first 6 characters, `…`, first 8 hex digits of its
/// SHA-256), as a log field.
struct MaskedKey<'a>(&'a str);

impl std::fmt::Display for MaskedKey<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&idem::mask_key(self.0))
    }
}

/// The record a worker or operator write answers with.
fn record_reply(reply: Result<Reply, idem::OpError>) -> ApiResult<Record> {
    match reply {
        Ok(Reply::Record(r)) => Ok(r),
        Ok(Reply::Fail(f)) => Ok(f.record),
        Ok(other) => Err(ApiError::internal(format!("unexpected reply {other:?}"))),
        Err(e) => Err(e.into()),
    }
}

/// Logs a refused operation and turns it into its API error.
pub fn refused(op: &str, nk: &NsKey, from_state: Option<RecState>, e: ApiError) -> ApiError {
    log_op(op, nk, from_state, None, e.code());
    e
}

/// The claim answer, taken out of what the store did (the rest is kept for the log line and
/// the metrics).
pub fn claim_of(mut ex: Executed) -> ApiResult<(ClaimReply, Executed)> {
    let reply = std::mem::replace(&mut ex.reply, Ok(Reply::Swept { changed: false }));
    match reply {
        Ok(Reply::Claim(c)) => Ok((c, ex)),
        Ok(other) => Err(ApiError::internal(format!("unexpected reply {other:?}"))),
        Err(e) => Err(e.into()),
    }
}

/// The headers of a claim-like answer: `Idempotent-Replayed: true` on a replay, and
/// `Retry-After` in whole seconds (rounded up) when the answer says when to come back.
pub fn answer_headers(replayed: bool, retry_after_ms: Option<i64>) -> HeaderMap {
    let mut headers = HeaderMap::new();
    if replayed {
        headers.insert(
            HeaderName::from_static("idempotent-replayed"),
            HeaderValue::from_static("true"),
        );
    }
    if let Some(ms) = retry_after_ms {
        let secs = (ms.max(0) + 999) / 1000;
        if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
            headers.insert(header::RETRY_AFTER, v);
        }
    }
    headers
}

/// The `name=value` pairs of a list's query string that have a value: an empty value counts
/// as absent (`?state=` is every state), so no list refuses one.
pub fn query_pairs(raw: Option<&str>) -> impl Iterator<Item = (Cow<'_, str>, Cow<'_, str>)> {
    url::form_urlencoded::parse(raw.unwrap_or_default().as_bytes()).filter(|(_, v)| !v.is_empty())
}

/// A list's `limit`: an integer from 1 to 1000, else 422 naming it.
pub fn query_limit(v: &str) -> ApiResult<usize> {
    v.parse::<usize>()
        .ok()
        .filter(|n| (1..=1000).contains(n))
        .ok_or_else(|| ApiError::invalid_field("limit", "must be an integer from 1 to 1000"))
}

/// A list's `state`: a state name, else 422 naming it.
pub fn query_state(v: &str) -> ApiResult<RecState> {
    RecState::parse(v)
        .ok_or_else(|| ApiError::invalid_field("state", format!("{v:?} is not a state")))
}

/// Runs a worker or operator write that answers `{state, record}`.
pub async fn state_write(
    st: &AppState,
    nk: &NsKey,
    name: &str,
    op: Op,
    actor: Option<String>,
) -> ApiResult<Json<StateResponse>> {
    let approving = matches!(op, Op::Approve { .. });
    let Executed {
        reply, from_state, ..
    } = exec(st, nk, op, actor).await?;
    match record_reply(reply) {
        Ok(record) => {
            log_op(name, nk, from_state, Some(&record), "ok");
            if approving {
                // An approved action is delivered by idem itself (`crate::actions`).
                crate::actions::approved(st, &nk.ns, &record).await;
            }
            Ok(Json(StateResponse {
                state: record.state,
                record,
            }))
        }
        Err(e) => Err(refused(name, nk, from_state, e)),
    }
}

/// A JSON answer written into a buffer sized once: `capacity` is what the caller counted
/// (see [`record_len_hint`]). `axum::Json` starts at 128 bytes and doubles, which for an
/// effect's 256 KiB answer (kept twice in its body: `response` and `record.result`)
/// allocates and frees every power of two up to 1 MiB and may keep half of it unused while
/// the body is written out.
pub(crate) struct SizedJson<T> {
    pub(crate) body: T,
    pub(crate) capacity: usize,
}

impl<T: serde::Serialize> axum::response::IntoResponse for SizedJson<T> {
    fn into_response(self) -> axum::response::Response {
        let mut buf = Vec::with_capacity(self.capacity);
        match serde_json::to_writer(&mut buf, &self.body) {
            Ok(()) => (
                [(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                )],
                buf,
            )
                .into_response(),
            Err(e) => ApiError::internal(format!("answer not serializable: {e}")).into_response(),
        }
    }
}

/// About how many bytes a record takes in an answer: its fixed fields, then its JSON values
/// counted by [`idem::json_len_hint`] (a result may be hundreds of KiB).
pub(crate) fn record_len_hint(r: &Record) -> usize {
    const FIXED: usize = 1536;
    FIXED
        + r.key.as_str().len()
        + r.result.as_ref().map_or(0, idem::json_len_hint)
        + r.prepared_payload.as_ref().map_or(0, idem::json_len_hint)
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem::Key;

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
