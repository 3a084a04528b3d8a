//! The contract cases. Each is `pub async fn <behaviour><B: Backend>(b: Arc<B>)` and gets a
//! fresh, empty database; [`crate::contract_suite!`] turns each into a named test.
//!
//! Cases compare full [`Record`]s read back from the store with the ones the operation
//! answered, so a backend that loses or mangles any field (bookkeeping included) fails here.
//!
//! The cases are grouped by what they hold the store to, one module each (the claim table,
//! races, late writes, the janitor, history, namespaces and tokens, alerts); the request
//! helpers they share live here and must never assert anything a case does not ask for.

use std::sync::Arc;

use idem_core::{
    ClaimOutcome, ClaimRequest, Class, CompleteRequest, EventType, FailErrorInput, FailRequest,
    Fingerprint, HeartbeatRequest, Op, OpError, PrepareRequest, Record, Reply, ResolveAction,
    ResolveRequest, State, Timestamp,
};
use idem_store::Store;
use serde_json::{json, Value};

use super::{ok_reply, Backend, H};

mod alerts;
mod claim;
mod follow_ups;
mod history;
mod janitor;
mod namespaces;
mod races;
mod writes;

pub use alerts::*;
pub use claim::*;
pub use follow_ups::*;
pub use history::*;
pub use janitor::*;
pub use namespaces::*;
pub use races::*;
pub use writes::*;

// ---------------------------------------------------------------- request helpers

fn fp(v: &Value) -> Fingerprint {
    Fingerprint::of_payload(v).expect("fingerprint")
}

fn with_fp(v: &Value) -> ClaimRequest {
    ClaimRequest {
        fingerprint: Some(fp(v)),
        ..Default::default()
    }
}

fn owned(owner: &str, corr: &str) -> ClaimRequest {
    ClaimRequest {
        owner: Some(owner.into()),
        correlation_id: Some(corr.into()),
        ..Default::default()
    }
}

fn prepare(token: &str, payload: Value, approval: bool) -> Op {
    Op::Prepare(PrepareRequest {
        token: token.into(),
        payload,
        approval_required: approval,
    })
}

fn heartbeat(token: &str, lease_ms: Option<i64>) -> Op {
    Op::Heartbeat(HeartbeatRequest {
        token: token.into(),
        lease_ms,
    })
}

fn complete(token: &str, result: Option<Value>, external_ref: Option<&str>) -> Op {
    Op::Complete(CompleteRequest {
        cost: None,
        token: token.into(),
        result,
        external_ref: external_ref.map(str::to_owned),
    })
}

fn fail(token: &str, kind: Class) -> Op {
    let error = FailErrorInput {
        category: "http".into(),
        message: "upstream said no".into(),
    };
    Op::Fail(FailRequest {
        token: token.into(),
        kind: Some(kind),
        error: Some(error),
        ..FailRequest::default()
    })
}

fn resolve(action: ResolveAction, note: &str) -> Op {
    Op::Resolve(ResolveRequest {
        action,
        external_ref: None,
        result: None,
        note: note.into(),
    })
}

fn result_v() -> Value {
    json!({"charge": "ch_1", "amount": 100})
}

fn record_of(reply: &Reply) -> Record {
    match reply {
        Reply::Record(r) => r.clone(),
        Reply::Fail(f) => f.record.clone(),
        Reply::Claim(c) => c.record.clone().expect("claim reply with a record"),
        Reply::Swept { .. } => panic!("sweep reply has no record"),
        Reply::Written => panic!("a store answered `Written` instead of the record it wrote"),
        Reply::Intake(i) => match i {
            idem_core::IntakeReply::Accepted { record }
            | idem_core::IntakeReply::Duplicate { record }
            | idem_core::IntakeReply::Held { record }
            | idem_core::IntakeReply::Started { record, .. } => (**record).clone(),
            other => panic!("intake reply without a record: {other:?}"),
        },
    }
}

/// Runs `op` and expects it accepted; returns the record it answered with.
async fn ok(h: &H, k: &idem_core::Key, op: Op) -> Record {
    let e = h.exec(k, op, Some("operator:alice")).await;
    record_of(ok_reply(&e))
}

/// Runs `op` and expects a refusal.
async fn refused(h: &H, k: &idem_core::Key, op: Op) -> OpError {
    let e = h.exec(k, op, None).await;
    match e.reply {
        Err(err) => err,
        Ok(r) => panic!("expected a refusal on {k}, got {r:?}"),
    }
}

fn is_invalid(e: &OpError) -> bool {
    matches!(e, OpError::InvalidTransition { .. })
}

fn kinds(events: &[idem_core::Event]) -> Vec<EventType> {
    events
        .iter()
        .map(|e| e.kind)
        .filter(|k| *k != EventType::Heartbeat)
        .collect()
}

fn count(events: &[idem_core::Event], kind: EventType) -> usize {
    events.iter().filter(|e| e.kind == kind).count()
}

/// Drives a fresh key into `state` the ordinary way; returns the holder's token.
async fn into_state(h: &H, k: &idem_core::Key, state: State, req: ClaimRequest) -> String {
    let c = h.claim_with(k, req).await;
    assert_eq!(c.outcome, ClaimOutcome::Acquired, "{k}: {c:?}");
    let tok = c.token.expect("token").secret();
    match state {
        State::Processing => {}
        State::Prepared => {
            ok(h, k, prepare(&tok, json!({"draft": "hello"}), false)).await;
        }
        State::AwaitingApproval => {
            ok(h, k, prepare(&tok, json!({"draft": "hello"}), true)).await;
        }
        State::Completed => {
            ok(h, k, complete(&tok, Some(result_v()), Some("ch_1"))).await;
        }
        State::FailedRetryable => {
            ok(h, k, fail(&tok, Class::Retryable)).await;
        }
        State::FailedPermanent => {
            ok(h, k, fail(&tok, Class::Permanent)).await;
        }
        State::NeedsReview => {
            ok(h, k, fail(&tok, Class::Ambiguous)).await;
        }
    }
    assert_eq!(h.rec(k).await.state, state, "{k}");
    tok
}

async fn sweep_all(store: &Arc<dyn Store>, now: Timestamp) -> idem_store::SweepReport {
    store
        .sweep_once(now, 1000)
        .await
        .unwrap_or_else(|e| panic!("sweep_once: {e}"))
}

async fn retention_all(store: &Arc<dyn Store>, now: Timestamp) -> idem_store::RetentionReport {
    store
        .retention_once(now, 1000)
        .await
        .unwrap_or_else(|e| panic!("retention_once: {e}"))
}

// ================================================================ model

pub async fn model_random_operation_sequences_agree_with_the_rules<B: Backend>(b: Arc<B>) {
    super::model::run_model(b.open().await).await;
}
