//! The worker side of idem over either transport: a server (`--url`) or a ledger opened
//! in-process (`--db`). `idem run` is written once against [`Gate`].
//!
//! Both transports answer in the API's terms: claim outcomes as [`ClaimOutcome`], records as
//! the public JSON shape, refusals as [`ApiError::Problem`] with the API's `code`
//! (`lease_lost`, `invalid_transition`, …), so callers cannot tell them apart.

use idem::{
    ClaimOutcome, ClaimRequest, Class, CompleteRequest, FailErrorInput, FailRequest, Fingerprint,
    HeartbeatRequest, Key, Ledger, LedgerError, Namespace, OpError, StoreError,
};
use idem_server::error::ErrorCode;
use serde_json::{json, Value};

use crate::client::{ApiError, Client};

/// A claim as the caller describes it.
#[derive(Debug, Clone, Default)]
pub struct ClaimInput {
    /// Fingerprinted by the server (or locally for `--db`).
    pub payload: Option<Value>,
    pub owner: Option<String>,
    pub lease_ms: Option<i64>,
}

/// A claim answer, transport-independent.
#[derive(Debug, Clone)]
pub struct ClaimAnswer {
    pub outcome: ClaimOutcome,
    /// The public record JSON (null for paused/limited).
    pub record: Value,
    /// The fencing token (acquired only).
    pub token: Option<String>,
    pub resumed: bool,
    pub retry_after_ms: Option<i64>,
}

/// What a failed attempt reports.
#[derive(Debug, Clone)]
pub struct FailInput {
    pub kind: Class,
    pub category: String,
    pub message: String,
}

/// Worker calls over a server or a local ledger.
#[derive(Debug, Clone)]
pub enum Gate {
    Http(Client),
    Local(Ledger),
}

/// Parses an `outcome` string of the API.
pub fn parse_outcome(s: &str) -> Option<ClaimOutcome> {
    ClaimOutcome::ALL.into_iter().find(|o| o.as_str() == s)
}

fn ids(ns: &str, key: &str) -> Result<(Namespace, Key), ApiError> {
    let n = Namespace::try_from(ns).map_err(|e| problem(ErrorCode::InvalidNamespace, e))?;
    let k = Key::try_from(key).map_err(|e| problem(ErrorCode::InvalidKey, e))?;
    Ok((n, k))
}

/// A refusal of the local ledger as the server answers it: the status comes from the
/// server's one table, the detail is the ledger's own sentence.
fn problem(code: ErrorCode, detail: impl std::fmt::Display) -> ApiError {
    ApiError::Problem {
        status: code.status().as_u16(),
        code: code.as_str().to_owned(),
        detail: detail.to_string(),
    }
}

/// The API's view of a ledger error (the server's own mapping, so the codes are the same as
/// its problem+json).
fn ledger_error(e: LedgerError) -> ApiError {
    match e {
        LedgerError::Op(op) => {
            let code = idem_server::ApiError::from(op.clone()).error_code();
            match op {
                OpError::InvalidField { field, message } => {
                    problem(code, format!("{field}: {message}"))
                }
                other => problem(code, other),
            }
        }
        LedgerError::Store(s) => store_error(s),
    }
}

fn store_error(e: StoreError) -> ApiError {
    ApiError::Store(e.to_string())
}

impl Gate {
    /// Where this gate points, for messages (database passwords redacted).
    pub fn describe(&self) -> String {
        match self {
            Gate::Http(c) => c.base().to_owned(),
            Gate::Local(l) => format!("local {} ledger", l.store().backend()),
        }
    }

    pub async fn claim(
        &self,
        ns: &str,
        key: &str,
        input: &ClaimInput,
    ) -> Result<ClaimAnswer, ApiError> {
        match self {
            Gate::Http(c) => {
                let mut body = json!({});
                if let Some(p) = &input.payload {
                    body["payload"] = p.clone();
                }
                if let Some(o) = &input.owner {
                    body["owner"] = json!(o);
                }
                if let Some(l) = input.lease_ms {
                    body["lease_ms"] = json!(l);
                }
                let ans = c.claim(ns, key, &body).await?;
                let outcome = ans.body["outcome"]
                    .as_str()
                    .and_then(parse_outcome)
                    .ok_or_else(|| {
                        ApiError::Protocol(format!("unknown claim outcome in {}", ans.text))
                    })?;
                Ok(ClaimAnswer {
                    outcome,
                    record: ans.body["record"].clone(),
                    token: ans.body["token"].as_str().map(str::to_owned),
                    resumed: ans.body["resumed"].as_bool().unwrap_or(false),
                    retry_after_ms: ans.body["retry_after_ms"].as_i64(),
                })
            }
            Gate::Local(l) => {
                let (n, k) = ids(ns, key)?;
                let fingerprint =
                    match &input.payload {
                        Some(p) => Some(Fingerprint::of_payload(p).map_err(|e| {
                            problem(ErrorCode::InvalidField, format!("payload: {e}"))
                        })?),
                        None => None,
                    };
                let req = ClaimRequest {
                    fingerprint,
                    owner: input.owner.clone(),
                    lease_ms: input.lease_ms,
                    ..ClaimRequest::default()
                };
                let reply = l.claim(&n, &k, req).await.map_err(ledger_error)?;
                let record = match &reply.record {
                    Some(r) => serde_json::to_value(r)
                        .map_err(|e| ApiError::Store(format!("cannot show record: {e}")))?,
                    None => Value::Null,
                };
                Ok(ClaimAnswer {
                    outcome: reply.outcome,
                    record,
                    token: reply.token.map(|t| t.secret()),
                    resumed: reply.resumed.unwrap_or(false),
                    retry_after_ms: reply.retry_after_ms,
                })
            }
        }
    }

    pub async fn heartbeat(
        &self,
        ns: &str,
        key: &str,
        token: &str,
        lease_ms: Option<i64>,
    ) -> Result<(), ApiError> {
        match self {
            Gate::Http(c) => {
                let mut body = json!({ "token": token });
                if let Some(l) = lease_ms {
                    body["lease_ms"] = json!(l);
                }
                c.key_action(ns, key, "heartbeat", &body).await.map(drop)
            }
            Gate::Local(l) => {
                let (n, k) = ids(ns, key)?;
                let req = HeartbeatRequest {
                    token: token.to_owned(),
                    lease_ms,
                };
                l.heartbeat(&n, &k, req)
                    .await
                    .map_err(ledger_error)
                    .map(drop)
            }
        }
    }

    pub async fn complete(
        &self,
        ns: &str,
        key: &str,
        token: &str,
        result: Value,
    ) -> Result<(), ApiError> {
        match self {
            Gate::Http(c) => {
                let body = json!({ "token": token, "result": result });
                c.key_action(ns, key, "complete", &body).await.map(drop)
            }
            Gate::Local(l) => {
                let (n, k) = ids(ns, key)?;
                let req = CompleteRequest {
                    cost: None,
                    token: token.to_owned(),
                    result: Some(result),
                    external_ref: None,
                };
                l.complete(&n, &k, req)
                    .await
                    .map_err(ledger_error)
                    .map(drop)
            }
        }
    }

    /// Reports a failure; answers the record state the ledger decided.
    pub async fn fail(
        &self,
        ns: &str,
        key: &str,
        token: &str,
        input: &FailInput,
    ) -> Result<String, ApiError> {
        match self {
            Gate::Http(c) => {
                let body = json!({
                    "token": token,
                    "kind": input.kind.as_str(),
                    "error": {"category": input.category, "message": input.message},
                });
                let ans = c.key_action(ns, key, "fail", &body).await?;
                Ok(ans.body["state"].as_str().unwrap_or("unknown").to_owned())
            }
            Gate::Local(l) => {
                let (n, k) = ids(ns, key)?;
                let req = FailRequest {
                    cost: None,
                    token: token.to_owned(),
                    kind: Some(input.kind),
                    http_status: None,
                    retry_after_ms: None,
                    sent: None,
                    error: Some(FailErrorInput {
                        category: input.category.clone(),
                        message: input.message.clone(),
                    }),
                };
                let reply = l.fail(&n, &k, req).await.map_err(ledger_error)?;
                Ok(reply.record.state.as_str().to_owned())
            }
        }
    }
}
