//! Actions (`ACTIONS.md`): a namespace's side effects declared once and served as MCP tools,
//! each call keyed by the business identity of its arguments and delivered exactly once
//! through the effect path of `POST …/effect`.
//!
//! This module owns the action document ([`model`]: validation, key template, identity,
//! placeholders), a call ([`call`]: the outcome table and what the agent is told), the MCP
//! endpoint ([`mcp`]: JSON-RPC over Streamable HTTP), the loaded actions calls reuse
//! ([`cache`]), the MCP client of a `deliver.mcp` ([`upstream`]) and the background step of
//! approved deliveries ([`delivery`]). This file holds only what they share, below all of
//! them: the owner an action's calls claim with, loading an action, and queueing an approved
//! record's delivery (called by the approval paths). The REST resource is
//! `api::v1::actions`. What it must never do: send, classify or reconcile by itself (that is
//! `api::v1::effects` and `idem-egress`, called, never copied), store anything for a call
//! refused before its claim, or show a header value (they live in the secrets table and are
//! answered as hints).

pub mod cache;
pub mod call;
pub mod delivery;
pub mod mcp;
pub mod model;
pub mod upstream;

pub use cache::{ActionCache, Loaded, ACTION_TTL};

use idem::{action_owner, Namespace, NewOutboxItem, OutboxKind, Record, State};
use serde_json::json;

use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use model::{Action, Headers};

/// The owner an action's calls claim with (shown on the record): names the action, so that
/// an approval knows what to deliver.
pub fn owner_of(action: &str) -> String {
    format!("action:{action}")
}

/// After an approval (API or console): a record of an action, now `prepared`, is queued for
/// delivery on the outbox (kind `effect`, one item per approved attempt). An item that cannot
/// be queued leaves the record `prepared`: the next call of the tool delivers the approved
/// arguments then.
pub async fn approved(st: &AppState, ns: &Namespace, record: &Record) {
    let Some(action) = record
        .owner
        .as_deref()
        .and_then(|o| o.strip_prefix("action:"))
    else {
        return;
    };
    if record.state != State::Prepared {
        return;
    }
    let now = st.ledger.now();
    let item = NewOutboxItem {
        kind: OutboxKind::Effect,
        namespace: ns.as_str().to_owned(),
        key: record.key.as_str().to_owned(),
        dedupe: format!("approved:{}", record.attempt),
        payload: json!({"action": action}).to_string().into_bytes(),
        due_at: now,
    };
    if let Err(e) = st.ledger.store().outbox_enqueue(item, now).await {
        tracing::warn!(namespace = %ns, error = %e,
            "an approved action could not be queued; the next call of the tool delivers it");
    }
}

/// The action `name` of `ns` as loaded at most [`ACTION_TTL`] ago (the call path).
pub async fn cached(
    st: &AppState,
    ns: &Namespace,
    name: &str,
) -> ApiResult<Option<std::sync::Arc<Loaded>>> {
    let cache = &st.actions;
    let k = (ns.as_str().to_owned(), name.to_owned());
    if let Some((at, l)) = cache.entries().get(&k) {
        if at.elapsed() < ACTION_TTL {
            return Ok(Some(l.clone()));
        }
    }
    let generation = cache.generation.load(std::sync::atomic::Ordering::Acquire);
    let mut loaded = load(st, ns, name).await?;
    // Unchanged since the last load (document and header values): its calls' derivations
    // still hold.
    if let Some(l) = loaded.as_mut() {
        if let Some((_, old)) = cache.entries().get(&k) {
            if old.source == l.source {
                l.calls = old.calls.clone();
            }
        }
    }
    let loaded = loaded.map(std::sync::Arc::new);
    if let Some(l) = &loaded {
        if cache.generation.load(std::sync::atomic::Ordering::Acquire) == generation {
            cache
                .entries()
                .insert(k, (std::time::Instant::now(), l.clone()));
        }
    }
    Ok(loaded)
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
    let secret = secrets.first().map(|s| s.value.expose());
    let headers = secret.map(Headers::from_secret_text).unwrap_or_default();
    let source = format!("{}\0{}", row.config, secret.unwrap_or_default());
    Ok(Loaded {
        action,
        headers,
        created_at: row.created_at,
        updated_at: row.updated_at,
        calls: Default::default(),
        source,
    })
}
