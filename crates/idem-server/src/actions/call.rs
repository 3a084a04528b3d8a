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

use super::cache::Loaded;
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

impl ToolAnswer {
    /// The `CallToolResult` object (its members moved, not copied).
    pub fn into_json(self) -> Value {
        let mut text = Map::with_capacity(2);
        text.insert("type".into(), Value::String("text".into()));
        text.insert("text".into(), Value::String(self.text));
        let mut out = Map::with_capacity(3);
        out.insert("content".into(), Value::Array(vec![Value::Object(text)]));
        out.insert("structuredContent".into(), self.structured);
        out.insert("isError".into(), Value::Bool(self.is_error));
        Value::Object(out)
    }

    /// A call refused before anything was stored (`missing_identity_field`, `invalid_field`,
    /// `destination_forbidden`).
    fn refused(outcome: &'static str, field: &str, message: String) -> ToolAnswer {
        ToolAnswer {
            outcome,
            is_error: true,
            structured: json!({"outcome": outcome, "field": field, "message": message,
                               "replayed": false}),
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
            "Not sent (key {key}). It may be called again after {} seconds with the same \
             arguments.",
            (retry_after_ms.unwrap_or(0).max(0) + 999) / 1000
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
            "Not now: the namespace's daily limit is reached; try again after {} seconds. \
             Nothing was sent.",
            (retry_after_ms.unwrap_or(0).max(0) + 999) / 1000
        ),
        other => format!("Outcome {other} (key {key})."),
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
fn tool_answer(action: &Action, key: &str, a: Answer) -> ToolAnswer {
    let outcome = a.outcome;
    let reason = reason_of(a.record.as_ref(), a.response());
    let mut structured = json!({
        "outcome": outcome,
        "key": key,
        "state": a.record.as_ref().map(|r| r.state.as_str()),
        "replayed": a.replayed,
    });
    if action.result == ResultMode::Response {
        if let Some(r) = a.response() {
            structured["response"] = r.clone();
        }
    }
    if let Some(ms) = a.retry_after_ms {
        structured["retry_after_ms"] = json!(ms);
    }
    ToolAnswer {
        outcome,
        is_error: is_error(outcome),
        text: sentence(outcome, key, a.retry_after_ms, &reason),
        structured,
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

/// [`input_for`], answered from the loaded action's [`Inputs`](super::cache::Inputs) when
/// these arguments were read lately (an agent's repeated call). Not kept: a call with a cost
/// (it differs per attempt) and a refused input (it is answered, never sent).
fn memoized_input(
    loaded: &Loaded,
    args: &Map<String, Value>,
    cost: Option<&Value>,
) -> ApiResult<effects::Input> {
    let text = match cost {
        None => serde_json::to_string(args).ok(),
        Some(_) => None,
    };
    if let Some(input) = text.as_deref().and_then(|t| loaded.inputs.get(t)) {
        return Ok(input);
    }
    let input = input_for(&loaded.action, &loaded.headers, args, cost)?;
    if let Some(t) = text {
        loaded.inputs.put(t, &input);
    }
    Ok(input)
}

/// Runs one call of `action` in `ns`, counted in `idem_action_calls_total` under its
/// outcome: refusals (`missing_identity_field`, `invalid_field`, `destination_forbidden`)
/// too, so an agent that keeps leaving out its identity shows on the dashboard.
pub async fn call(
    st: &AppState,
    ns: &idem::Namespace,
    loaded: &Loaded,
    arguments: Option<&Value>,
    meta: Option<&Value>,
) -> ApiResult<ToolAnswer> {
    let (action, headers) = (&loaded.action, &loaded.headers);
    let answer: ApiResult<ToolAnswer> = async {
        let args = match arguments {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(m)) => m.clone(),
            Some(_) => {
                return Ok(ToolAnswer::refused(
                    "invalid_field",
                    "arguments",
                    "`arguments` must be an object".into(),
                ))
            }
        };
        // The identity first: the agent learns which one it left out.
        if let Some(missing) = action.missing_identity(&args) {
            return Ok(ToolAnswer::refused(
                "missing_identity_field",
                missing,
                format!("the identity argument `{missing}` is missing or empty"),
            ));
        }
        if let Err((field, message)) = action.check_arguments(&Value::Object(args.clone())) {
            return Ok(ToolAnswer::refused(
                "invalid_field",
                &field,
                format!("argument `{field}` is invalid: {message}"),
            ));
        }
        let key = match action.key_for(&args) {
            Ok(k) => k,
            Err(e) => return Ok(ToolAnswer::refused("invalid_field", "key", e.to_string())),
        };
        let fp = Fingerprint::of_payload(&action.identity_of(&args))
            .map_err(|e| ApiError::internal(format!("identity fingerprint: {e}")))?;
        let cost = meta.and_then(|m| m.get("idem/cost"));
        let mut input = match memoized_input(loaded, &args, cost) {
            Ok(i) => i,
            Err(ApiError::InvalidField { field, message }) => {
                return Ok(ToolAnswer::refused("invalid_field", &field, message))
            }
            Err(e) => return Err(e),
        };
        let nk = NsKey {
            ns: ns.clone(),
            key,
        };
        let key = nk.key.as_str().to_owned();
        let policy = st.policies.get(st.ledger.store().as_ref(), ns).await?;
        let mut guarded = match effects::guard(st, &policy, &input, &key).await {
            Ok(g) => g,
            Err(ApiError::DestinationForbidden { field, message }) => {
                return Ok(ToolAnswer::refused(
                    "destination_forbidden",
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
                payload: Value::Object(args.clone()),
                approval_required: approval,
            }),
            sent: effects::sent_follow_up(&input, &guarded),
        };
        let claimed = effects::claim(st, &nk, &input, fp, &guarded, then).await?;
        let (token, record, mut sent, prepared) = match claimed {
            Claimed::Answered(a) => return Ok(finish(action, &key, *a)),
            Claimed::Acquired {
                token,
                record,
                sent,
                prepared,
            } => (token, record, sent, prepared),
        };
        let drafted = match (prepared, &record.prepared_payload) {
            // This call's draft, saved by the claim's step.
            (true, _) => Some(*record),
            // A resumed record delivers what was saved (approved, or prepared by the first
            // call), never this call's arguments.
            (false, Some(Value::Object(saved))) if *saved != args => {
                input = input_for(action, headers, saved, cost)?;
                guarded = effects::guard(st, &policy, &input, &key).await?;
                sent = false;
                None
            }
            (false, Some(_)) => None,
            (false, None) => {
                let op = Op::Prepare(PrepareRequest {
                    token: token.clone(),
                    payload: Value::Object(args.clone()),
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
                return Ok(finish(action, &key, a));
            }
        }
        let a = effects::send(st, &nk, token, &input, &guarded, sent).await?;
        Ok(finish(action, &key, a))
    }
    .await;
    let answer = answer?;
    crate::metrics::action_call(ns.as_str(), &action.name, answer.outcome);
    Ok(answer)
}

/// Delivers an approved record's saved arguments (the outbox's work after an approval): the
/// same claim (the record's own fingerprint) and effect path as a call. `None` when the
/// record is gone or holds no arguments.
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
    let input = input_for(action, headers, &saved, None)?;
    let nk = NsKey {
        ns: ns.clone(),
        key: key.clone(),
    };
    let policy = st.policies.get(st.ledger.store().as_ref(), ns).await?;
    let guarded = effects::guard(st, &policy, &input, key.as_str()).await?;
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

fn finish(action: &Action, key: &str, a: Answer) -> ToolAnswer {
    tool_answer(action, key, a)
}

#[cfg(test)]
mod tests {
    use super::*;

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
