//! The answer of an effect: the response and record an effect (or an action's delivery)
//! answers with, its OpenAPI schemas, and how a claim's reply or a reported attempt turns
//! into it.
//!
//! It owns only the shape of the answer and the mapping from outcome to status. It must
//! never send, claim or write anything, nor carry a request header into what it answers.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use idem::{ClaimReply, Record, State as RecState};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::api::v1::shared::{answer_headers, record_len_hint, SizedJson};
use crate::api::RecordDoc;
use crate::error::{effect_status, outcome_status};
use crate::outcome::EffectOutcome;

/// A response as stored and answered.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct ResponseDoc {
    status: u16,
    /// Only content-type, location, retry-after, request-id, x-request-id, idempotency-key,
    /// idempotent-replayed (lowercase).
    headers: Object,
    /// JSON when the destination sent JSON, else text (absent when `body_base64` is given).
    body: Option<Value>,
    /// The bytes, base64, when they are neither JSON nor text.
    body_base64: Option<String>,
    /// The body was longer than the server's max_response_bytes.
    truncated: bool,
}

/// Free-form object (for the schema).
#[derive(ToSchema)]
pub struct Object;

/// The answer to an effect.
#[derive(Serialize, ToSchema)]
pub struct EffectResponse<'a> {
    /// performed | completed | failed_permanent | backoff | needs_review | in_flight |
    /// awaiting_approval | conflict | paused | limited
    pub outcome: &'static str,
    /// The destination's answer of this attempt, or the stored one on a replay; null when
    /// none came back.
    #[schema(value_type = Option<ResponseDoc>)]
    pub response: Option<&'a Value>,
    #[schema(value_type = Option<RecordDoc>)]
    pub record: Option<&'a Record>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<i64>,
    /// Present (true) only when a reconcile lookup ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reconciled: Option<bool>,
}

/// What an effect (or an action's delivery) answers.
pub(crate) struct Answer {
    pub(crate) outcome: &'static str,
    pub(crate) status: StatusCode,
    pub(crate) replayed: bool,
    /// The destination's answer; `None` with `response_is_result`: the record's result is
    /// the answer (a performed attempt's, kept once).
    pub(crate) response: Option<Value>,
    pub(crate) response_is_result: bool,
    pub(crate) record: Option<Record>,
    pub(crate) retry_after_ms: Option<i64>,
    pub(crate) reconciled: Option<bool>,
}

impl Answer {
    /// The destination's answer of this attempt, or the stored one on a replay.
    pub(crate) fn response(&self) -> Option<&Value> {
        match (&self.response, self.response_is_result) {
            (None, true) => self.record.as_ref().and_then(|r| r.result.as_ref()),
            (r, _) => r.as_ref(),
        }
    }

    /// [`Answer::response`], moved out of the answer.
    pub(crate) fn take_response(&mut self) -> Option<Value> {
        match (&self.response, self.response_is_result) {
            (None, true) => self.record.as_mut().and_then(|r| r.result.take()),
            _ => self.response.take(),
        }
    }
}

/// From this size on, a performed attempt's answer (its `response` and `record.result` are
/// the one stored result) is written once and sent from one buffer in both places
/// ([`super::splice`]); below it, the copy costs less than the cutting.
const SPLICE_FROM: usize = 16 * 1024;

impl Answer {
    /// The answer with its stored result written once, in both places; `None` (nothing
    /// taken) when the answer does not carry a large result twice.
    fn spliced(&mut self) -> Option<Response> {
        if self.response.is_some() || !self.response_is_result {
            return None;
        }
        let record = self.record.as_mut()?;
        let hint = record.result.as_ref().map(idem::json_len_hint)?;
        if hint < SPLICE_FROM {
            return None;
        }
        let result = record.result.replace(super::splice::placeholder())?;
        let restore = |a: &mut Answer, result: Value| {
            if let Some(r) = a.record.as_mut() {
                r.result = Some(result);
            }
        };
        let mut value = Vec::with_capacity(hint);
        let mut text = Vec::with_capacity(record_len_hint(record) + 256);
        let placeholder = super::splice::placeholder();
        let body = EffectResponse {
            outcome: self.outcome,
            response: Some(&placeholder),
            record: Some(record),
            retry_after_ms: self.retry_after_ms,
            reconciled: self.reconciled,
        };
        if serde_json::to_writer(&mut value, &result).is_err()
            || serde_json::to_writer(&mut text, &body).is_err()
        {
            restore(self, result);
            return None;
        }
        let Some(spliced) = super::splice::splice(text, &bytes::Bytes::from(value), 2) else {
            restore(self, result);
            return None;
        };
        drop(result);
        let headers = answer_headers(self.replayed, self.retry_after_ms);
        Some(
            (
                self.status,
                headers,
                [(
                    axum::http::header::CONTENT_TYPE,
                    axum::http::HeaderValue::from_static("application/json"),
                )],
                axum::body::Body::new(spliced),
            )
                .into_response(),
        )
    }
}

impl IntoResponse for Answer {
    fn into_response(mut self) -> Response {
        if let Some(r) = self.spliced() {
            return r;
        }
        let headers = answer_headers(self.replayed, self.retry_after_ms);
        let response = self.response();
        let capacity = response.map_or(0, idem::json_len_hint)
            + self.record.as_ref().map_or(256, record_len_hint);
        let body = EffectResponse {
            outcome: self.outcome,
            response,
            record: self.record.as_ref(),
            retry_after_ms: self.retry_after_ms,
            reconciled: self.reconciled,
        };
        (self.status, headers, SizedJson { body, capacity }).into_response()
    }
}

/// The answer of a claim that did not acquire (replays carry the stored response).
pub(crate) fn claim_answer(reply: ClaimReply) -> Answer {
    let replayed = reply.outcome.is_replay();
    Answer {
        outcome: reply.outcome.as_str(),
        status: outcome_status(reply.outcome),
        replayed,
        response: None,
        response_is_result: replayed,
        record: reply.record,
        retry_after_ms: reply.retry_after_ms,
        reconciled: None,
    }
}

/// The answer after this call's attempt was reported, read from the record it left. A
/// `response` of `None` on a completed record is the record's result (where a performed
/// attempt's response is kept).
pub(crate) fn attempt_answer(
    record: Record,
    response: Option<Value>,
    reconciled: bool,
    now: idem::Timestamp,
) -> Answer {
    let outcome = match record.state {
        RecState::Completed => EffectOutcome::Performed,
        RecState::FailedPermanent => EffectOutcome::FailedPermanent,
        RecState::FailedRetryable => EffectOutcome::Backoff,
        _ => EffectOutcome::NeedsReview,
    };
    let retry_after_ms = (record.state == RecState::FailedRetryable)
        .then(|| record.not_before.map_or(0, |nb| (nb.0 - now.0).max(0)));
    Answer {
        outcome: outcome.as_str(),
        status: effect_status(outcome),
        replayed: false,
        response_is_result: response.is_none() && record.state == RecState::Completed,
        response,
        record: Some(record),
        retry_after_ms,
        reconciled: reconciled.then_some(true),
    }
}
