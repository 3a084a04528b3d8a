//! `POST …/keys/{key}/effect`: idem sends one outbound HTTP request under the key, exactly
//! once, and answers with the destination's response (replayed to every later call).
//!
//! The handler only sequences: request validation → egress guard (422
//! `destination_forbidden`, nothing written, nothing sent) → the claim (pause, conflict,
//! replay, in flight, budget: all the claim's rules) → on acquisition the `sent` event,
//! durably, before the first byte leaves → the request through the egress client (the key as
//! the idempotency header value, identical on every attempt) → the reconcile lookup of an
//! ambiguous answer → the report. Every rule lives in `idem-core` (`effect`, `decide`), the
//! guard and the connection in `idem-egress`.
//!
//! What it must never do: store, log or answer a request header (the types below print only
//! how many there are), send anything for a refused destination, or send an attempt the
//! claim did not acquire.

use std::time::Instant;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use idem::effect::{
    self, capture, classify, fingerprint, reconcile_result, shown_url, Body as EffBody,
    Method as EffMethod, Reconciled, RequestSummary, Transport, Verdict,
};
use idem::{
    ClaimOutcome, ClaimRequest, EffectReportRequest, EffectSentRequest, LeaseExpiry, Op, Record,
    Reply, Role,
};
use idem_egress::{Forbidden, Outbound, Outcome, Target};
use serde_json::Value;
use tracing::Instrument;
use utoipa::OpenApi;

mod answer;
pub(crate) mod input;
mod splice;

pub(crate) use input::Input;
use input::Lookup;

use super::claim_wait::claim_and_wait;
use super::shared::{exec, log_op, refused, FollowUps};
use crate::actions::upstream::{self, Step};
use crate::api::effect_request::UrlMember;
pub use crate::api::effect_request::{
    EffectBody, EffectRequestBody, ReconcileBody, MAX_HEADERS, MAX_URL, RESERVED_HEADERS,
};
use crate::api::CostBody;
use crate::error::{ApiError, ApiResult};
use crate::fields::{CorrelationId, Owner, WaitMs};
use crate::input::{Body, NsKey};
use crate::metrics;
use crate::route::{r, Route};
use crate::state::AppState;
use answer::attempt_answer;
pub(crate) use answer::{claim_answer, Answer};
pub use answer::{EffectResponse, Object, ResponseDoc};

/// The routes of this file.
pub fn routes() -> Vec<Route> {
    vec![r(
        "post",
        "/v1/namespaces/{ns}/keys/{key}/effect",
        Some(Role::Worker),
        post(effect),
    )]
}

/// The OpenAPI of this file.
#[derive(OpenApi)]
#[openapi(
    paths(effect),
    components(schemas(
        EffectBody,
        EffectRequestBody,
        ReconcileBody,
        EffectResponse,
        ResponseDoc
    ))
)]
pub struct Doc;

fn required<T>(v: Option<T>, field: &str, what: &str) -> ApiResult<T> {
    v.ok_or_else(|| ApiError::invalid_field(field, format!("`{field}` is required ({what})")))
}

impl EffectBody {
    pub(crate) fn into_input(self) -> ApiResult<Input> {
        let req = required(self.request, "request", "the request to send")?;
        let method = required(req.method, "request.method", "POST, PUT, PATCH or DELETE")?.0;
        let UrlMember(url, parsed_url) = required(req.url, "request.url", "an http(s) URL")?;
        let body = match (req.body, req.body_text, req.body_base64) {
            (None, None, None) => None,
            (Some(v), None, None) => Some(EffBody::Json(v)),
            (None, Some(t), None) => Some(EffBody::Text(t.0)),
            (None, None, Some(b)) => Some(EffBody::Base64(b.0)),
            _ => {
                return Err(ApiError::invalid_field(
                    "request.body",
                    "give at most one of `request.body`, `request.body_text`, \
                     `request.body_base64`",
                ))
            }
        };
        let bytes = match &body {
            None => None,
            Some(b) => Some(b.bytes().map_err(|m| {
                ApiError::invalid_field("request.body_base64", format!("`request.body_base64` {m}"))
            })?),
        };
        let given = req.headers.unwrap_or_default();
        let idempotency_header = self.idempotency_header.0;
        if let Some(h) = &idempotency_header {
            if given.0.contains_key(h) {
                let at = format!("request.headers.{}", given.given_name(h));
                return Err(ApiError::invalid_field(
                    &at,
                    format!("`{at}` is the idempotency header: idem sends the key in it"),
                ));
            }
        }
        let mut headers = given.0;
        if matches!(body, Some(EffBody::Json(_)))
            && !headers.contains_key(axum::http::header::CONTENT_TYPE)
        {
            headers.insert(
                axum::http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
        }
        let reconcile = match self.reconcile {
            None => None,
            Some(rc) => Some(Lookup {
                url: required(rc.url, "reconcile.url", "the lookup URL")?.0,
                headers: rc.headers.map(|h| h.0).unwrap_or_default(),
                found: required(rc.found, "reconcile.found", "a list of statuses")?.0,
                not_found: required(rc.not_found, "reconcile.not_found", "a list of statuses")?.0,
            }),
        };
        Ok(Input {
            method,
            url,
            parsed_url,
            headers,
            body,
            bytes,
            idempotency_header,
            timeout_ms: self.timeout_ms.map_or(effect::DEFAULT_TIMEOUT_MS, |t| t.0),
            success: self.success.map(|s| s.0).unwrap_or_default(),
            destination_idempotent: self.destination_idempotent,
            reconcile,
            owner: self.owner.map(Owner::into_string),
            correlation_id: self.correlation_id.map(CorrelationId::into_string),
            wait_ms: self.wait_ms.map_or(0, WaitMs::ms),
            lease_ms: self.lease_ms.map(|l| l.0),
            cost: CostBody::of(self.cost)?,
            mcp_tool: None,
        })
    }
}

// ------------------------------------------------------------------ handler

fn forbidden(field: &str, e: Forbidden) -> ApiError {
    metrics::egress_refused();
    ApiError::DestinationForbidden {
        field: field.to_owned(),
        message: format!("`{field}` is not an allowed destination: {e}"),
    }
}

/// Send one request under the key, exactly once; replay its stored response afterwards.
#[utoipa::path(post, path = "/v1/namespaces/{ns}/keys/{key}/effect", tag = "keys",
    params(("ns" = String, Path), ("key" = String, Path)),
    request_body = EffectBody,
    responses(
        (status = 200, description = "performed; completed or failed_permanent replayed (with \
            `Idempotent-Replayed: true`); failed_permanent of this attempt", body = EffectResponse,
            headers(("Idempotent-Replayed" = String, description = "`true` on every replayed answer"))),
        (status = 409, description = "backoff, needs_review, in_flight, awaiting_approval",
            body = EffectResponse,
            headers(("Retry-After" = String, description = "seconds, with backoff and in_flight"))),
        (status = 422, description = "outcome conflict (a different request under this key)",
            body = EffectResponse),
        (status = 429, description = "outcome limited", body = EffectResponse),
        (status = 503, description = "outcome paused", body = EffectResponse),
    ))]
pub async fn effect(
    State(st): State<AppState>,
    nk: NsKey,
    Body(body): Body<EffectBody>,
) -> ApiResult<Response> {
    detached(perform(st, nk, body)).await
}

/// Runs an effect (or an action's call) in a task of its own, so a caller that hangs up
/// mid-request does not cancel it: the claim, the request and the report of the
/// destination's answer run to their end, and the answer is stored for the next call to
/// replay — where dropping the handler would leave the attempt `processing` with its answer
/// lost (then `needs_review`, or sent again to an idempotent destination).
pub(crate) async fn detached<F>(work: F) -> ApiResult<Response>
where
    F: std::future::Future<Output = ApiResult<Response>> + Send + 'static,
{
    match crate::telemetry::spawn_in_request(work).await {
        Ok(r) => r,
        Err(e) => Err(ApiError::internal(format!("the effect's task ended: {e}"))),
    }
}

async fn perform(st: AppState, nk: NsKey, body: EffectBody) -> ApiResult<Response> {
    let input = body.into_input()?;
    let policy = st.policies.get(st.ledger.store().as_ref(), &nk.ns).await?;
    let guarded = guard(&st, &policy, &input, nk.key.as_str()).await?;
    let fp = fingerprint(input.method, &input.url, input.body.as_ref())
        .map_err(|e| ApiError::invalid_field("request.body", e.to_string()))?;
    // Nothing stands between the claim and the request here (no draft to save): the claim
    // records `sent` with its acquisition where the store can (one commit, not two).
    let then = FollowUps {
        prepare: None,
        sent: sent_follow_up(&input, &guarded),
    };
    let claimed = claim(&st, &nk, &input, fp, &guarded, then).await?;
    let answer = match claimed {
        Claimed::Answered(a) => *a,
        Claimed::Acquired { token, sent, .. } => {
            send(&st, &nk, token, &input, &guarded, sent).await?
        }
    };
    metrics::effect(answer.outcome);
    Ok(answer.into_response())
}

/// The destinations of a request, checked by the egress guard, and whether the destination
/// dedupes by the key.
pub(crate) struct Guarded {
    target: Target,
    lookup: Option<Target>,
    pub(crate) destination_idempotent: bool,
}

/// The egress guard over the request's URL and its lookup's (422 `destination_forbidden`
/// naming it: nothing written, nothing sent).
pub(crate) async fn guard(
    st: &AppState,
    policy: &idem::Policy,
    input: &Input,
    key: &str,
) -> ApiResult<Guarded> {
    guard_read(st, policy, input, None, key).await
}

/// [`guard`] with the input's URL already read (`url`: `input.url` as the egress reads it;
/// an action keeps it with a call's derivation). `None`: read here.
pub(crate) async fn guard_read(
    st: &AppState,
    policy: &idem::Policy,
    input: &Input,
    url: Option<&url::Url>,
    key: &str,
) -> ApiResult<Guarded> {
    let u = url.unwrap_or(&input.parsed_url).clone();
    let checked = st.egress.check_url(&policy.egress, u).await;
    let target = checked.map_err(|e| forbidden("request.url", e))?;
    let lookup = match &input.reconcile {
        None => None,
        Some(rc) => Some(
            st.egress
                .check(&policy.egress, &effect::reconcile_url(&rc.url, key))
                .await
                .map_err(|e| forbidden("reconcile.url", e))?,
        ),
    };
    Ok(Guarded {
        target,
        lookup,
        destination_idempotent: input
            .destination_idempotent
            .unwrap_or(policy.destination_idempotent),
    })
}

/// What the claim of an effect left: an answer (every outcome but `acquired`), or the lease.
pub(crate) enum Claimed {
    Answered(Box<Answer>),
    /// `sent`: the claim also recorded the request as sent, `prepared`: it saved the draft
    /// (see [`claim`]); `record` is the record as the claim's step left it.
    Acquired {
        token: String,
        record: Box<Record>,
        sent: bool,
        prepared: bool,
    },
}

/// The claim under `fp` with the effect's lease (the attempt's timeout + margin) and lease
/// expiry (review, unless the destination dedupes), waiting for a holder up to `wait_ms`.
/// With `then`, an acquisition also saves the draft and records the request as about to
/// leave, in the same step where the store can (`Claimed::Acquired` says what was done).
pub(crate) async fn claim(
    st: &AppState,
    nk: &NsKey,
    input: &Input,
    fp: idem::Fingerprint,
    guarded: &Guarded,
    then: FollowUps,
) -> ApiResult<Claimed> {
    let idem_dest = guarded.destination_idempotent;
    let lease_ms = (input.timeout_ms + effect::LEASE_MARGIN_MS).max(input.lease_ms.unwrap_or(0));
    let claim = ClaimRequest {
        fingerprint: Some(fp),
        owner: input.owner.clone(),
        lease_ms: Some(lease_ms),
        correlation_id: input.correlation_id.clone(),
        // A lost holder may have sent: a person decides, unless the destination dedupes.
        lease_expiry: Some(if idem_dest {
            LeaseExpiry::Reclaim
        } else {
            LeaseExpiry::Review
        }),
    };
    let (reply, ex) = claim_and_wait(st, nk, claim, input.wait_ms, then).await?;
    let duplicate = ex
        .events
        .iter()
        .any(|e| e.kind == idem::EventType::DuplicateHit);
    let sent = ex.events.iter().any(|e| e.kind == idem::EventType::Sent);
    let prepared = ex
        .events
        .iter()
        .any(|e| e.kind == idem::EventType::Prepared);
    metrics::claim(reply.outcome, reply.resumed, reply.reclaimed, duplicate);
    if reply.outcome != ClaimOutcome::Acquired {
        log_op(
            "effect",
            nk,
            ex.from_state,
            reply.record.as_ref(),
            reply.outcome.as_str(),
        );
        return Ok(Claimed::Answered(Box::new(claim_answer(reply))));
    }
    let token = reply
        .token
        .as_ref()
        .map(|t| t.secret())
        .ok_or_else(|| ApiError::internal("acquired claim without a token"))?;
    let record = reply
        .record
        .ok_or_else(|| ApiError::internal("acquired claim without a record"))?;
    Ok(Claimed::Acquired {
        token,
        record: Box::new(record),
        sent,
        prepared,
    })
}

/// An acquired attempt whose request cannot be sent as things now stand: a resumed record's
/// saved arguments no longer fit the action, the action was deleted, or the namespace's egress
/// now refuses the destination. Nothing is sent; the attempt is failed permanently with why
/// (category `validation`, `sent: false`), so the record neither waits unseen in `prepared`
/// nor holds its lease until expiry. An operator's `resolve` (`retry`) sends it again once
/// the cause is fixed.
pub(crate) async fn fail_unsent(
    st: &AppState,
    nk: &NsKey,
    token: String,
    why: String,
) -> ApiResult<Answer> {
    let op = Op::Fail(idem::FailRequest {
        token,
        kind: Some(idem::Class::Permanent),
        sent: Some(false),
        error: Some(idem::FailErrorInput {
            category: "validation".to_owned(),
            message: why,
        }),
        ..Default::default()
    });
    let ex = exec(st, nk, op, None).await?;
    let record = match ex.reply {
        Ok(Reply::Fail(f)) => {
            metrics::fail(f.class.as_str(), None);
            f.record
        }
        Ok(other) => return Err(ApiError::internal(format!("unexpected reply {other:?}"))),
        Err(e) => return Err(refused("effect", nk, ex.from_state, e.into())),
    };
    log_op(
        "effect",
        nk,
        ex.from_state,
        Some(&record),
        record.state.as_str(),
    );
    Ok(attempt_answer(record, None, false, st.ledger.now()))
}

/// The `sent` follow-up of a claim whose request leaves right after it: an HTTP request to
/// a destination that resolved (an MCP tool call first opens its session, which may fail
/// with nothing sent).
pub(crate) fn sent_follow_up(input: &Input, guarded: &Guarded) -> Option<RequestSummary> {
    leaves_after_claim(input, guarded).then(|| request_summary(input))
}

/// [`sent_follow_up`] with the request's summary made earlier (an action's kept derivation).
pub(crate) fn sent_follow_up_of(
    input: &Input,
    guarded: &Guarded,
    summary: &RequestSummary,
) -> Option<RequestSummary> {
    leaves_after_claim(input, guarded).then(|| summary.clone())
}

fn leaves_after_claim(input: &Input, guarded: &Guarded) -> bool {
    input.mcp_tool.is_none() && !guarded.target.unresolvable()
}

/// What the `sent` event records of an effect's request.
pub(crate) fn request_summary(input: &Input) -> RequestSummary {
    RequestSummary {
        method: input.method.as_str().to_owned(),
        url: shown_url(&input.parsed_url),
        idempotency_header: input
            .idempotency_header
            .as_ref()
            .map(|h| canonical_header_name(h.as_str())),
    }
}

/// One acquired attempt: `sent` (durably) → the request → classification → the lookup of
/// an ambiguous answer → the report.
/// `sent`: the claim already recorded it.
pub(crate) async fn send(
    st: &AppState,
    nk: &NsKey,
    token: String,
    input: &Input,
    guarded: &Guarded,
    sent: bool,
) -> ApiResult<Answer> {
    Attempt {
        st,
        nk,
        token,
        input,
        target: &guarded.target,
        lookup: guarded.lookup.as_ref(),
        destination_idempotent: guarded.destination_idempotent,
        sent_recorded: sent,
    }
    .run()
    .await
}

/// One acquired attempt.
struct Attempt<'a> {
    st: &'a AppState,
    nk: &'a NsKey,
    token: String,
    input: &'a Input,
    target: &'a Target,
    lookup: Option<&'a Target>,
    destination_idempotent: bool,
    /// The claim recorded `sent` with its acquisition.
    sent_recorded: bool,
}

impl Attempt<'_> {
    async fn run(&self) -> ApiResult<Answer> {
        let input = self.input;
        let step = match &input.mcp_tool {
            Some(tool) => self.call_tool(tool).await?,
            None => self.request().await?,
        };
        let Step {
            mut verdict,
            mut response,
            category,
            message,
            http_status,
            sent,
        } = step;
        let mut reconciled = None;
        if let (Verdict::Ambiguous, Some(rc), Some(target), false) = (
            verdict,
            &input.reconcile,
            self.lookup,
            self.destination_idempotent,
        ) {
            let (result, lookup_response) = self.reconcile(rc, target).await;
            metrics::reconcile(result.as_str());
            reconciled = Some(result);
            match result {
                Reconciled::Found => {
                    verdict = Verdict::Performed;
                    response = lookup_response;
                }
                Reconciled::NotFound => {
                    verdict = Verdict::Retryable {
                        retry_after_ms: None,
                    }
                }
                Reconciled::Unknown => {}
            }
        }
        // A performed attempt's record keeps the response as its result: it is answered from
        // there, so the response is not held twice while the store writes it.
        let performed = verdict == Verdict::Performed;
        let (reported, response) = if performed {
            (response, None)
        } else {
            (response.clone(), response)
        };
        let op = Op::EffectReport(EffectReportRequest {
            token: self.token.clone(),
            verdict,
            response: reported,
            category: category.to_owned(),
            message,
            http_status,
            sent,
            reconciled,
            cost: self.input.cost,
            request: (!sent).then(|| request_summary(self.input)),
        });
        let ex = exec(self.st, self.nk, op, None).await?;
        let record = match ex.reply {
            Ok(Reply::Record(r)) => r,
            Ok(Reply::Fail(f)) => {
                metrics::fail(f.class.as_str(), http_status);
                f.record
            }
            Ok(other) => return Err(ApiError::internal(format!("unexpected reply {other:?}"))),
            Err(e) => return Err(refused("effect", self.nk, ex.from_state, e.into())),
        };
        log_op(
            "effect",
            self.nk,
            ex.from_state,
            Some(&record),
            record.state.as_str(),
        );
        Ok(attempt_answer(
            record,
            response,
            reconciled.is_some(),
            self.st.ledger.now(),
        ))
    }

    /// The HTTP request of an effect: `sent` (durably), the request, its classification.
    async fn request(&self) -> ApiResult<Step> {
        let input = self.input;
        let (transport, response, span) = if self.target.unresolvable() {
            // Nothing can leave: no `sent` event, a retryable failure (and no span: no call).
            (
                Transport::NotSent(effect::NotSent::Dns),
                None,
                tracing::Span::none(),
            )
        } else {
            if !self.sent_recorded {
                self.record_sent().await?;
            }
            let span = crate::telemetry::effect_span(
                "effect.send",
                self.nk.ns.as_str(),
                input.method.as_str(),
                self.target.url(),
            );
            let mut headers = input.headers.clone();
            // idem's trace context replaces one among the request's headers; the key still
            // goes in the idempotency header, whatever its name.
            if let Some(t) = crate::telemetry::outbound_trace(&span) {
                t.set_on(&mut headers);
            }
            if let Some(h) = &input.idempotency_header {
                // Visible ASCII by construction of the key.
                let v = HeaderValue::from_str(self.nk.key.as_str())
                    .map_err(|_| ApiError::internal("key is not a header value"))?;
                headers.insert(h.clone(), v);
            }
            let out = Outbound {
                method: method_of(input.method),
                headers,
                body: input.bytes.clone(),
                timeout: std::time::Duration::from_millis(input.timeout_ms as u64),
            };
            let started = Instant::now();
            let outcome = self
                .st
                .egress
                .send(self.target, out)
                .instrument(span.clone())
                .await;
            metrics::effect_duration(started.elapsed().as_secs_f64());
            let (transport, response) = self.read(outcome);
            (transport, response, span)
        };
        let verdict = classify(&transport, &input.success, self.destination_idempotent);
        record_transport(&span, &transport);
        span.record("outcome", verdict_name(verdict));
        let (category, message, http_status) = effect::failure(&transport);
        Ok(Step {
            verdict,
            response,
            category,
            message,
            http_status,
            sent: !matches!(transport, Transport::NotSent(_)),
        })
    }

    /// An action's MCP delivery: the upstream's handshake (it reaches no tool: nothing is
    /// recorded as sent), `sent` (durably), then the `tools/call` with the arguments, read
    /// by `actions::upstream`.
    async fn call_tool(&self, tool: &str) -> ApiResult<Step> {
        let input = self.input;
        if self.target.unresolvable() {
            return Ok(upstream::handshake_step(upstream::Handshake::NotSent(
                effect::NotSent::Dns,
            )));
        }
        let span = crate::telemetry::effect_span(
            "effect.send",
            self.nk.ns.as_str(),
            input.method.as_str(),
            self.target.url(),
        );
        let client = upstream::Upstream::new(
            &self.st.egress,
            self.target,
            &input.headers,
            input.timeout_ms,
        );
        let started = Instant::now();
        let step = match client.open().instrument(span.clone()).await {
            Err(h) => upstream::handshake_step(h),
            Ok(session) => {
                self.record_sent().await?;
                let mut extra = HeaderMap::new();
                if let Some(t) = crate::telemetry::outbound_trace(&span) {
                    t.set_on(&mut extra);
                }
                if let Some(h) = &input.idempotency_header {
                    let v = HeaderValue::from_str(self.nk.key.as_str())
                        .map_err(|_| ApiError::internal("key is not a header value"))?;
                    extra.insert(h.clone(), v);
                }
                let arguments = match &input.body {
                    Some(EffBody::Json(v)) => v.clone(),
                    _ => Value::Object(Default::default()),
                };
                let called = client
                    .call(&session, tool, &arguments, self.nk.key.as_str(), extra)
                    .instrument(span.clone())
                    .await;
                client.close(session);
                upstream::call_step(called, tool, self.destination_idempotent)
            }
        };
        metrics::effect_duration(started.elapsed().as_secs_f64());
        if let Some(s) = step.http_status {
            span.record("http.response.status_code", s);
        }
        span.record("outcome", verdict_name(step.verdict));
        Ok(step)
    }

    /// `sent`, durably, before the first byte leaves.
    async fn record_sent(&self) -> ApiResult<()> {
        let op = Op::EffectSent(EffectSentRequest {
            token: self.token.clone(),
            request: request_summary(self.input),
        });
        let ex = exec(self.st, self.nk, op, None).await?;
        match ex.reply {
            Ok(_) => Ok(()),
            Err(e) => Err(refused("effect", self.nk, ex.from_state, e.into())),
        }
    }

    /// The transport reading and the kept response of an outcome.
    fn read(&self, outcome: Outcome) -> (Transport, Option<Value>) {
        match outcome {
            Outcome::NotSent(n) => (Transport::NotSent(n), None),
            Outcome::Lost(l) => (Transport::Lost(l), None),
            Outcome::Answered(a) => {
                let now = self.st.ledger.now().millis();
                let retry_after_ms = a
                    .headers
                    .iter()
                    .find(|(n, _)| n == "retry-after")
                    .and_then(|(_, v)| std::str::from_utf8(v).ok())
                    .and_then(|v| {
                        idem::classify::parse_retry_after(&Value::String(v.to_owned()), now).ok()
                    });
                let status = a.status;
                let kept = capture(
                    status,
                    a.headers.iter().map(|(n, v)| (n.as_str(), v.as_slice())),
                    &a.body,
                    a.truncated,
                );
                // The bytes are kept (as JSON, text or base64): not held twice from here on.
                drop(a);
                (
                    Transport::Answered {
                        status,
                        retry_after_ms,
                    },
                    Some(kept.into_json()),
                )
            }
        }
    }

    /// The lookup: a GET without the idempotency header, the effect's timeout.
    async fn reconcile(&self, rc: &Lookup, target: &Target) -> (Reconciled, Option<Value>) {
        let span = crate::telemetry::effect_span(
            "effect.reconcile",
            self.nk.ns.as_str(),
            "GET",
            target.url(),
        );
        let mut headers = rc.headers.clone();
        if let Some(t) = crate::telemetry::outbound_trace(&span) {
            t.set_on(&mut headers);
        }
        let out = Outbound {
            method: idem_egress::Method::GET,
            headers,
            body: None,
            timeout: std::time::Duration::from_millis(self.input.timeout_ms as u64),
        };
        let (result, kept) = match self
            .st
            .egress
            .send(target, out)
            .instrument(span.clone())
            .await
        {
            Outcome::Answered(a) => {
                span.record("http.response.status_code", a.status);
                let result = reconcile_result(Some(a.status), &rc.found, &rc.not_found);
                let kept = capture(
                    a.status,
                    a.headers.iter().map(|(n, v)| (n.as_str(), v.as_slice())),
                    &a.body,
                    a.truncated,
                );
                (result, Some(kept.into_json()))
            }
            Outcome::NotSent(n) => {
                record_transport(&span, &Transport::NotSent(n));
                (Reconciled::Unknown, None)
            }
            Outcome::Lost(l) => {
                record_transport(&span, &Transport::Lost(l));
                (Reconciled::Unknown, None)
            }
        };
        span.record("outcome", result.as_str());
        (result, kept)
    }
}

/// The status, or why none came back, on an outbound call's span.
fn record_transport(span: &tracing::Span, t: &Transport) {
    match t {
        Transport::Answered { status, .. } => {
            span.record("http.response.status_code", *status);
        }
        Transport::NotSent(effect::NotSent::Dns) => {
            span.record("error.type", "dns");
        }
        Transport::NotSent(effect::NotSent::Connect) => {
            span.record("error.type", "connect");
        }
        Transport::Lost(effect::Lost::Timeout) => {
            span.record("error.type", "timeout");
        }
        Transport::Lost(effect::Lost::Broken) => {
            span.record("error.type", "broken");
        }
    }
}

/// What an attempt means, as an `effect.send` span says it.
fn verdict_name(v: Verdict) -> &'static str {
    match v {
        Verdict::Performed => "performed",
        Verdict::Permanent => "permanent",
        Verdict::Retryable { .. } => "retryable",
        Verdict::Ambiguous => "ambiguous",
    }
}

fn method_of(m: EffMethod) -> idem_egress::Method {
    match m {
        EffMethod::Post => idem_egress::Method::POST,
        EffMethod::Put => idem_egress::Method::PUT,
        EffMethod::Patch => idem_egress::Method::PATCH,
        EffMethod::Delete => idem_egress::Method::DELETE,
    }
}

/// `idempotency-key` → `Idempotency-Key` (how people write header names; the record shows
/// it so).
fn canonical_header_name(h: &str) -> String {
    h.split('-')
        .map(|part| {
            let mut c = part.chars();
            match c.next() {
                Some(f) => f.to_ascii_uppercase().to_string() + &c.as_str().to_ascii_lowercase(),
                None => String::new(),
            }
        })
        .collect::<Vec<_>>()
        .join("-")
}

#[cfg(test)]
mod tests;
