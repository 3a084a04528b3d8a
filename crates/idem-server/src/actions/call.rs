//! One `tools/call` of an action: the identity check, argument validation, the key and the
//! identity fingerprint, then the effect path of `POST …/effect` (egress guard, claim, the
//! `sent` event, the request, classification, reconcile, report — `api::v1::effects`, never
//! a copy), with the arguments saved as the record's prepared payload before anything is
//! sent, and the answer the agent reads.
//!
//! Invariants: nothing is stored for a call refused before the claim (missing identity,
//! invalid arguments, a refused destination); a resumed record delivers its stored arguments,
//! never the ones of this call (a regenerated draft never replaces the first); with
//! `approval: required` the first call stores the arguments and sends nothing. What it must
//! never do: put a header value, the request body or a secret in a log line or an answer.

use idem::{Fingerprint, Op, PrepareRequest, Record, Reply};
use serde_json::{json, Map, Value};
use std::sync::Arc;

use super::cache::{Derived, Loaded};
use super::model::{
    effect_body, mcp_effect_body, upstream_tool, Action, Approval, Headers, ResultMode,
};
use crate::api::v1::effects::{self, Answer, Claimed, EffectBody};
use crate::api::v1::shared::{exec, log_op, FollowUps};
use crate::error::{effect_status, ApiError, ApiResult};
use crate::input::{read_body, NsKey};
use crate::outcome::EffectOutcome;
use crate::state::AppState;

/// What the agent is told: a `CallToolResult`.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolAnswer {
    pub outcome: &'static str,
    pub is_error: bool,
    pub structured: Value,
    pub text: String,
}

/// A `CallToolResult` as it is written: one text content, the structured content, whether
/// it is a tool error, and in the stateless revision `resultType` (always `complete`: idem
/// never asks for more input).
#[derive(Debug, serde::Serialize)]
pub struct ToolResult {
    content: [TextContent; 1],
    #[serde(rename = "structuredContent")]
    structured: Value,
    #[serde(rename = "isError")]
    is_error: bool,
    #[serde(rename = "resultType", skip_serializing_if = "Option::is_none")]
    result_type: Option<&'static str>,
}

#[derive(Debug, serde::Serialize)]
struct TextContent {
    #[serde(rename = "type")]
    kind: &'static str,
    text: String,
}

impl ToolAnswer {
    /// The `CallToolResult` (its members moved, not copied); `modern`: of the stateless
    /// revision, which marks it `resultType: complete`.
    pub fn into_result(self, modern: bool) -> ToolResult {
        ToolResult {
            content: [TextContent {
                kind: "text",
                text: self.text,
            }],
            structured: self.structured,
            is_error: self.is_error,
            result_type: modern.then_some("complete"),
        }
    }

    /// The `CallToolResult` object.
    pub fn into_json(self) -> Value {
        serde_json::to_value(self.into_result(true)).unwrap_or(Value::Null)
    }

    /// A call refused before anything was stored (`missing_identity_field`, `invalid_field`,
    /// `destination_forbidden`): the contract's members with `key` (when it was built) and
    /// `state` null, plus the `field` and why.
    fn refused(outcome: &'static str, field: &str, message: String) -> ToolAnswer {
        Self::refused_at(outcome, None, field, message)
    }

    fn refused_at(
        outcome: &'static str,
        key: Option<&str>,
        field: &str,
        message: String,
    ) -> ToolAnswer {
        ToolAnswer {
            outcome,
            is_error: true,
            structured: json!({"outcome": outcome, "key": key, "state": null,
                               "replayed": false, "field": field, "message": message}),
            text: format!("Not done: {message}. Nothing was stored or sent; fix the arguments and call again."),
        }
    }
}

/// The sentence the agent reads for each outcome: what happened and whether to call again.
pub fn sentence(outcome: &str, key: &str, retry_after_ms: Option<i64>, reason: &str) -> String {
    match outcome {
        "performed" => format!("Done: the action was performed now (key {key})."),
        "completed" => format!(
            "Already done earlier under key {key}: the earlier result stands and nothing was \
             repeated. Do not call again."
        ),
        "awaiting_approval" => format!(
            "Saved for a person's approval (key {key}); it will be sent once approved. Do not \
             call again."
        ),
        "in_flight" => format!(
            "In progress: another call with key {key} is being delivered now. Do not call again."
        ),
        "needs_review" => format!(
            "The outcome is unknown (key {key}): it may or may not have happened, and a person \
             will check. Do not call again."
        ),
        "backoff" => format!(
            "Not sent (key {key}). It may be called again after {} with the same arguments.",
            seconds(retry_after_ms)
        ),
        "failed_permanent" => format!(
            "Failed and will not be retried (key {key}){}. Do not call again with these \
             arguments.",
            if reason.is_empty() {
                String::new()
            } else {
                format!(": {reason}")
            }
        ),
        "conflict" => format!(
            "Refused: key {key} was already used for a different request (other identity \
             values). Nothing was sent."
        ),
        "paused" => "Not now: this namespace is paused by an operator. Nothing was sent.".into(),
        "limited" => format!(
            "Not now: the namespace's daily limit is reached; try again after {}. Nothing was \
             sent.",
            seconds(retry_after_ms)
        ),
        other => format!("Outcome {other} (key {key})."),
    }
}

/// A wait in whole seconds, rounded up: "1 second", "3 seconds".
fn seconds(ms: Option<i64>) -> String {
    match (ms.unwrap_or(0).max(0) + 999) / 1000 {
        1 => "1 second".to_owned(),
        n => format!("{n} seconds"),
    }
}

/// Whether an outcome is a tool error (`isError: true`) by the contract's table.
pub fn is_error(outcome: &str) -> bool {
    matches!(
        outcome,
        "backoff" | "failed_permanent" | "conflict" | "paused" | "limited"
    ) || outcome == "missing_identity_field"
}

/// Why a record failed, in a few words, for the agent (the sanitized last error or the
/// destination's status).
fn reason_of(record: Option<&Record>, response: Option<&Value>) -> String {
    if let Some(status) = response
        .and_then(|r| r.get("status"))
        .and_then(Value::as_u64)
    {
        return format!("the destination answered HTTP {status}");
    }
    match record.and_then(|r| r.last_error.as_ref()) {
        Some(e) => e.message.clone(),
        None => String::new(),
    }
}

/// The agent's answer for an effect answer.
fn tool_answer(action: &Action, key: &str, mut a: Answer) -> ToolAnswer {
    let outcome = a.outcome;
    // Only a permanent failure's sentence gives its reason.
    let reason = if outcome == "failed_permanent" {
        reason_of(a.record.as_ref(), a.response())
    } else {
        String::new()
    };
    let mut structured = Map::with_capacity(6);
    structured.insert("outcome".into(), Value::String(outcome.into()));
    structured.insert("key".into(), Value::String(key.into()));
    let state = a.record.as_ref().map(|r| r.state.as_str());
    structured.insert(
        "state".into(),
        state.map_or(Value::Null, |s| Value::String(s.into())),
    );
    structured.insert("replayed".into(), Value::Bool(a.replayed));
    if action.result == ResultMode::Response {
        if let Some(r) = a.take_response() {
            structured.insert("response".into(), r);
        }
    }
    if let Some(ms) = a.retry_after_ms {
        structured.insert("retry_after_ms".into(), json!(ms));
    }
    ToolAnswer {
        outcome,
        is_error: is_error(outcome),
        text: sentence(outcome, key, a.retry_after_ms, &reason),
        structured: Value::Object(structured),
    }
}

/// The effect input of a delivery for `args` (`deliver.http`, or `deliver.mcp` as the
/// `tools/call` of its tool), read by the effect's own parser; `_meta` `idem/cost` is the
/// attempt's cost.
fn input_for(
    action: &Action,
    headers: &Headers,
    args: &Map<String, Value>,
    cost: Option<&Value>,
) -> ApiResult<effects::Input> {
    let (mut body, tool) = match (&action.http, &action.mcp) {
        (Some(http), _) => (effect_body(http, headers, args), None),
        (None, Some(mcp)) => (
            mcp_effect_body(mcp, headers, args),
            Some(
                upstream_tool(mcp)
                    .ok_or_else(|| ApiError::internal("an MCP delivery without its tool"))?,
            ),
        ),
        (None, None) => return Err(ApiError::internal("an action without a delivery")),
    };
    if let Some(c) = cost {
        body["cost"] = c.clone();
    }
    // The record names its action, so an approval knows what to deliver.
    body["owner"] = json!(super::owner_of(&action.name));
    let input = read_body::<EffectBody>(body)?.into_input()?;
    Ok(match tool {
        Some(t) => input.calling_tool(t),
        None => input,
    })
}

/// The arguments of one call, as the message gave them.
pub enum Arguments<'a> {
    /// Arguments whose derivation is kept (the typed read of a `tools/call` found it by their
    /// JSON text).
    Kept(Arc<Derived>),
    /// `params.arguments` as its JSON text and what it reads to (the typed read of a
    /// `tools/call`).
    Read { text: &'a str, value: Value },
    /// `params.arguments` of a message read whole (`None`: absent).
    Value(Option<&'a Value>),
}

impl<'a> Arguments<'a> {
    /// The text the derivation of these arguments is kept under: the JSON text as sent, or
    /// (a message read whole) `~` and the arguments written out again; the two never meet.
    fn memo_key(&self) -> Option<std::borrow::Cow<'a, str>> {
        match self {
            Arguments::Kept(_) => None,
            Arguments::Read { text, .. } => Some(std::borrow::Cow::Borrowed(*text)),
            Arguments::Value(v) => {
                let text = serde_json::to_string(v.unwrap_or(&Value::Null)).ok()?;
                Some(std::borrow::Cow::Owned(format!("~{text}")))
            }
        }
    }
}

/// What `arguments` derive to for `loaded` (answered from its [`Calls`](super::cache::Calls)
/// when these arguments were derived lately: an agent's repeated call), or the refusal the
/// agent is answered. Not kept: a call with a cost (its input differs per attempt) and a
/// refusal.
fn derive(
    loaded: &Loaded,
    arguments: Arguments<'_>,
    cost: Option<&Value>,
) -> ApiResult<Result<Arc<Derived>, ToolAnswer>> {
    let memo = match cost {
        None => arguments.memo_key(),
        Some(_) => None,
    };
    // (The typed read looked its text up already.)
    let looked_up = matches!(arguments, Arguments::Read { .. });
    if let Some(d) = memo
        .as_deref()
        .filter(|_| !looked_up)
        .and_then(|t| loaded.calls.get(t))
    {
        return Ok(Ok(d));
    }
    let args = match arguments {
        Arguments::Kept(d) => return Ok(Ok(d)),
        Arguments::Read { value, .. } => match value {
            Value::Null => Some(Map::new()),
            Value::Object(m) => Some(m),
            _ => None,
        },
        Arguments::Value(v) => match v {
            None | Some(Value::Null) => Some(Map::new()),
            Some(Value::Object(m)) => Some(m.clone()),
            Some(_) => None,
        },
    };
    let action = &loaded.action;
    let Some(args) = args else {
        return Ok(Err(ToolAnswer::refused(
            "invalid_field",
            "arguments",
            "`arguments` must be an object".into(),
        )));
    };
    // The identity first: the agent learns which one it left out.
    if let Some(missing) = action.missing_identity(&args) {
        return Ok(Err(ToolAnswer::refused(
            "missing_identity_field",
            missing,
            format!("the identity argument `{missing}` is missing or empty"),
        )));
    }
    let args = Value::Object(args);
    if let Err((field, message)) = action.check_arguments(&args) {
        return Ok(Err(ToolAnswer::refused(
            "invalid_field",
            &field,
            format!("argument `{field}` is invalid: {message}"),
        )));
    }
    let Value::Object(args) = args else {
        return Err(ApiError::internal("arguments are an object"));
    };
    let key = match action.key_for(&args) {
        Ok(k) => k,
        Err(e) => {
            return Ok(Err(ToolAnswer::refused(
                "invalid_field",
                "key",
                e.to_string(),
            )))
        }
    };
    let fp = Fingerprint::of_payload(&action.identity_of(&args))
        .map_err(|e| ApiError::internal(format!("identity fingerprint: {e}")))?;
    let input = match input_for(action, &loaded.headers, &args, cost) {
        Ok(i) => i,
        Err(ApiError::InvalidField { field, message }) => {
            return Ok(Err(ToolAnswer::refused("invalid_field", &field, message)))
        }
        // A member `_meta` `idem/cost` does not have: a tool error like the cost's other
        // refusals, never an HTTP problem an MCP client cannot match to its request.
        Err(e @ ApiError::UnknownField { .. }) => {
            let field = match &e {
                ApiError::UnknownField { field } => field.clone(),
                _ => String::new(),
            };
            let message = format!("`{field}` is not a member of `_meta` `idem/cost` (tokens, usd)");
            return Ok(Err(ToolAnswer::refused("invalid_field", &field, message)));
        }
        Err(e) => return Err(e),
    };
    let d = Arc::new(Derived {
        args,
        key,
        fp,
        summary: effects::request_summary(&input),
        url: Some(input.parsed_url.clone()),
        input,
    });
    if let Some(t) = memo {
        loaded.calls.put(&t, &d);
    }
    Ok(Ok(d))
}

/// Runs one call of `action` in `ns`, counted in `idem_action_calls_total` under its
/// outcome: refusals (`missing_identity_field`, `invalid_field`, `destination_forbidden`)
/// too, so an agent that keeps leaving out its identity shows on the dashboard. `cost`: the
/// call's `_meta` `idem/cost`.
pub async fn call(
    st: &AppState,
    ns: &idem::Namespace,
    loaded: &Loaded,
    arguments: Arguments<'_>,
    cost: Option<&Value>,
) -> ApiResult<ToolAnswer> {
    let (action, headers) = (&loaded.action, &loaded.headers);
    let answer: ApiResult<ToolAnswer> = async {
        let d = match derive(loaded, arguments, cost)? {
            Ok(d) => d,
            Err(refused) => return Ok(refused),
        };
        let nk = NsKey {
            ns: ns.clone(),
            key: d.key.clone(),
        };
        let key = nk.key.as_str();
        let policy = st.policies.get(st.ledger.store().as_ref(), ns).await?;
        let mut guarded =
            match effects::guard_read(st, &policy, &d.input, d.url.as_ref(), key).await {
                Ok(g) => g,
                Err(ApiError::DestinationForbidden { field, message }) => {
                    return Ok(ToolAnswer::refused_at(
                        "destination_forbidden",
                        Some(key),
                        &field,
                        message,
                    ))
                }
                Err(e) => return Err(e),
            };
        // The draft (and, without approval, `sent`) ride on the acquisition where the store
        // can: one commit for claim, draft and `sent`.
        let approval = action.approval == Approval::Required;
        let then = FollowUps {
            prepare: Some(idem::ThenPrepare {
                payload: Value::Object(d.args.clone()),
                approval_required: approval,
            }),
            sent: effects::sent_follow_up_of(&d.input, &guarded, &d.summary),
        };
        let claimed = effects::claim(st, &nk, &d.input, d.fp.clone(), &guarded, then).await?;
        let (token, record, mut sent, prepared) = match claimed {
            Claimed::Answered(a) => return Ok(finish(action, key, *a)),
            Claimed::Acquired {
                token,
                record,
                sent,
                prepared,
            } => (token, record, sent, prepared),
        };
        // A resumed record's saved arguments, when they are not this call's.
        let mut saved_input = None;
        let drafted = match (prepared, &record.prepared_payload) {
            // This call's draft, saved by the claim's step.
            (true, _) => Some(*record),
            // A resumed record delivers what was saved (approved, or prepared by the first
            // call), never this call's arguments.
            (false, Some(Value::Object(saved))) if *saved != d.args => {
                match unsendable(
                    saved_request(st, &policy, action, headers, saved, cost, key).await,
                )? {
                    Ok((i, g)) => {
                        guarded = g;
                        saved_input = Some(i);
                    }
                    Err(why) => {
                        let a = effects::fail_unsent(st, &nk, token, why).await?;
                        return Ok(finish(action, key, a));
                    }
                }
                sent = false;
                None
            }
            (false, Some(_)) => None,
            (false, None) => {
                let op = Op::Prepare(PrepareRequest {
                    token: token.clone(),
                    payload: Value::Object(d.args.clone()),
                    approval_required: approval,
                });
                let ex = exec(st, &nk, op, None).await?;
                match ex.reply {
                    Ok(Reply::Record(r)) => Some(r),
                    Ok(other) => {
                        return Err(ApiError::internal(format!("unexpected reply {other:?}")))
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        };
        if let Some(rec) = drafted {
            log_op(
                "action",
                &nk,
                Some(idem::State::Processing),
                Some(&rec),
                rec.state.as_str(),
            );
            if approval {
                let a = Answer {
                    outcome: EffectOutcome::AwaitingApproval.as_str(),
                    status: effect_status(EffectOutcome::AwaitingApproval),
                    replayed: false,
                    response: None,
                    response_is_result: false,
                    record: Some(rec),
                    retry_after_ms: None,
                    reconciled: None,
                };
                return Ok(finish(action, key, a));
            }
        }
        let input = saved_input.as_ref().unwrap_or(&d.input);
        let a = effects::send(st, &nk, token, input, &guarded, sent).await?;
        Ok(finish(action, key, a))
    }
    .await;
    let answer = answer?;
    crate::metrics::action_call(ns.as_str(), &action.name, answer.outcome);
    Ok(answer)
}

/// Delivers an approved record's saved arguments (the outbox's work after an approval): the
/// same claim (the record's own fingerprint) and effect path as a call. `None` when the
/// record is gone or holds no arguments.
/// The request of a record's saved arguments under the action as it now stands, through the
/// egress guard.
async fn saved_request(
    st: &AppState,
    policy: &idem::Policy,
    action: &Action,
    headers: &Headers,
    saved: &Map<String, Value>,
    cost: Option<&Value>,
    key: &str,
) -> ApiResult<(effects::Input, effects::Guarded)> {
    let input = input_for(action, headers, saved, cost)?;
    let guarded = effects::guard(st, policy, &input, key).await?;
    Ok((input, guarded))
}

/// Splits a refusal of saved arguments (they no longer fit the action, or egress now refuses
/// the destination: `Ok(Err(why))`, nothing can be sent) from a store or server failure
/// (`Err`).
fn unsendable<T>(r: ApiResult<T>) -> ApiResult<Result<T, String>> {
    match r {
        Ok(v) => Ok(Ok(v)),
        Err(e) if e.status().is_client_error() => {
            Ok(Err(format!("the saved arguments cannot be sent: {e}")))
        }
        Err(e) => Err(e),
    }
}

pub async fn deliver_saved(
    st: &AppState,
    ns: &idem::Namespace,
    action: &Action,
    headers: &Headers,
    key: &idem::Key,
) -> ApiResult<Option<&'static str>> {
    let Some(found) = st.ledger.store().get(ns, key).await? else {
        return Ok(None);
    };
    let rec = found.record;
    let (Some(Value::Object(saved)), Some(fp)) = (rec.prepared_payload, rec.fingerprint) else {
        return Ok(None);
    };
    let nk = NsKey {
        ns: ns.clone(),
        key: key.clone(),
    };
    let policy = st.policies.get(st.ledger.store().as_ref(), ns).await?;
    let saved_req = saved_request(st, &policy, action, headers, &saved, None, key.as_str());
    let (input, guarded) = match unsendable(saved_req.await)? {
        Ok(v) => v,
        Err(why) => return fail_saved(st, &nk, &action.name, fp, why).await,
    };
    let then = FollowUps {
        prepare: None,
        sent: effects::sent_follow_up(&input, &guarded),
    };
    let a = match effects::claim(st, &nk, &input, fp, &guarded, then).await? {
        Claimed::Answered(a) => *a,
        Claimed::Acquired { token, sent, .. } => {
            effects::send(st, &nk, token, &input, &guarded, sent).await?
        }
    };
    crate::metrics::action_call(ns.as_str(), &action.name, a.outcome);
    log_op("action", &nk, None, a.record.as_ref(), a.outcome);
    Ok(Some(a.outcome))
}

/// An approved draft that cannot be delivered (see [`effects::fail_unsent`]): the background
/// delivery takes the record's lease as a call would and fails the attempt with why, so the
/// person who approved it sees it failed instead of waiting in `prepared` unseen. `Ok(None)`
/// when the record holds no approved arguments; else the outcome, as [`deliver_saved`].
pub async fn refuse_saved(
    st: &AppState,
    ns: &idem::Namespace,
    name: &str,
    key: &idem::Key,
    why: String,
) -> ApiResult<Option<&'static str>> {
    let Some(found) = st.ledger.store().get(ns, key).await? else {
        return Ok(None);
    };
    let rec = found.record;
    let (Some(Value::Object(_)), Some(fp)) = (rec.prepared_payload, rec.fingerprint) else {
        return Ok(None);
    };
    let nk = NsKey {
        ns: ns.clone(),
        key: key.clone(),
    };
    fail_saved(st, &nk, name, fp, why).await
}

async fn fail_saved(
    st: &AppState,
    nk: &NsKey,
    name: &str,
    fp: idem::Fingerprint,
    why: String,
) -> ApiResult<Option<&'static str>> {
    let claim = idem::ClaimRequest {
        fingerprint: Some(fp),
        owner: Some(format!("action:{name}")),
        lease_ms: None,
        correlation_id: None,
        lease_expiry: None,
    };
    let ex = exec(st, nk, Op::Claim(claim), None).await?;
    let reply = match ex.reply {
        Ok(idem::Reply::Claim(c)) => c,
        Ok(other) => return Err(ApiError::internal(format!("unexpected reply {other:?}"))),
        Err(e) => return Err(e.into()),
    };
    crate::metrics::claim(reply.outcome, reply.resumed, reply.reclaimed, false);
    if reply.outcome != idem::ClaimOutcome::Acquired {
        return Ok(Some(reply.outcome.as_str()));
    }
    let token = reply
        .token
        .as_ref()
        .map(|t| t.secret())
        .ok_or_else(|| ApiError::internal("acquired claim without a token"))?;
    let a = effects::fail_unsent(st, nk, token, why).await?;
    crate::metrics::action_call(nk.ns.as_str(), name, a.outcome);
    Ok(Some(a.outcome))
}

fn finish(action: &Action, key: &str, a: Answer) -> ToolAnswer {
    tool_answer(action, key, a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_is_said_in_whole_seconds_rounded_up() {
        assert_eq!(seconds(Some(1)), "1 second");
        assert_eq!(seconds(Some(1000)), "1 second");
        assert_eq!(seconds(Some(1001)), "2 seconds");
        assert_eq!(seconds(Some(0)), "0 seconds");
        assert_eq!(seconds(None), "0 seconds");
        assert_eq!(seconds(Some(-5)), "0 seconds");
        assert!(sentence("backoff", "k", Some(900), "").contains("after 1 second with"));
        assert!(sentence("limited", "k", Some(3_600_000), "").contains("after 3600 seconds."));
    }

    #[test]
    fn every_outcome_says_whether_to_call_again() {
        for (outcome, error, says) in [
            ("performed", false, "Done"),
            ("completed", false, "nothing was repeated"),
            ("awaiting_approval", false, "Do not call again"),
            ("in_flight", false, "Do not call again"),
            ("needs_review", false, "a person will check"),
            ("backoff", true, "after 3 seconds"),
            ("failed_permanent", true, "will not be retried"),
            ("conflict", true, "different request"),
            ("paused", true, "Not now"),
            ("limited", true, "Not now"),
            ("missing_identity_field", true, ""),
        ] {
            assert_eq!(is_error(outcome), error, "{outcome}");
            let s = sentence(outcome, "k1", Some(2500), "");
            assert!(s.contains(says), "{outcome}: {s}");
        }
    }
}
