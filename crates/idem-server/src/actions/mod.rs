//! Actions (`ACTIONS.md`): a namespace's side effects declared once and served as MCP tools,
//! each call keyed by the business identity of its arguments and delivered exactly once
//! through the effect path of `POST …/effect`.
//!
//! This module owns the action document ([`model`]: validation, key template, identity,
//! placeholders), a call ([`call`]: the outcome table and what the agent is told) and the
//! MCP endpoint ([`mcp`]: JSON-RPC over Streamable HTTP). The REST resource is
//! `api::v1::actions`. What it must never do: send, classify or reconcile by itself (that is
//! `api::v1::effects` and `idem-egress`, called, never copied), store anything for a call
//! refused before its claim, or show a header value (they live in the secrets table and are
//! answered as hints).

pub mod call;
pub mod mcp;
pub mod model;

use idem::{action_owner, Namespace};

use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use model::{Action, Headers};

/// A stored action with its header values, ready to call.
#[derive(Debug)]
pub struct Loaded {
    pub action: Action,
    pub headers: Headers,
    pub created_at: idem::Timestamp,
    pub updated_at: idem::Timestamp,
}

/// Reads an action of `ns` from the store (`None` when there is none). A stored document
/// that no longer reads is a damaged store, never a silent skip.
pub async fn load(st: &AppState, ns: &Namespace, name: &str) -> ApiResult<Option<Loaded>> {
    let store = st.ledger.store();
    let Some(row) = store.action_get(ns.as_str(), name).await? else {
        return Ok(None);
    };
    loaded(st, row).await.map(Some)
}

/// Every action of `ns`, in name order.
pub async fn load_all(st: &AppState, ns: &Namespace) -> ApiResult<Vec<Loaded>> {
    let mut out = vec![];
    for row in st.ledger.store().action_list(ns.as_str()).await? {
        out.push(loaded(st, row).await?);
    }
    Ok(out)
}

async fn loaded(st: &AppState, row: idem::ActionRow) -> ApiResult<Loaded> {
    let doc: serde_json::Value = serde_json::from_str(&row.config)
        .map_err(|e| ApiError::internal(format!("stored action {}: {e}", row.name)))?;
    let action = Action::parse(&row.name, &doc)
        .map_err(|e| ApiError::internal(format!("stored action {}: {e}", row.name)))?
        .action;
    let secrets = st
        .ledger
        .store()
        .secrets(&action_owner(&row.namespace, &row.name), st.ledger.now())
        .await?;
    let headers = secrets
        .first()
        .map(|s| Headers::from_secret_text(s.value.expose()))
        .unwrap_or_default();
    Ok(Loaded {
        action,
        headers,
        created_at: row.created_at,
        updated_at: row.updated_at,
    })
}
