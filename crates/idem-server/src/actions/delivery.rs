//! The approved deliveries: the background step that takes an approved action's queued
//! outbox items (queued by [`super::approved`]) and delivers each record's saved arguments
//! through the same call path as a tool call ([`super::call`]).
//!
//! It sits above the call path and is run only by the server's background loop. What it must
//! never do: deliver anything the record does not hold as approved arguments, or send
//! outside the effect path (it never classifies an answer itself).

use idem::{Namespace, OutboxClaim, OutboxFinish, OutboxKind, OutboxOutcome, StoreError};

use crate::state::AppState;

/// Outbox items are held this long while their delivery runs (longer than any attempt).
const DELIVERY_LEASE_MS: i64 = idem::effect::MAX_TIMEOUT_MS + 60_000;

/// One step of the approved deliveries: claims due items and delivers each approved record's
/// saved arguments through the effect path. `true` after a full batch.
pub async fn deliveries_once(st: &AppState) -> Result<bool, StoreError> {
    const BATCH: usize = 16;
    let store = st.ledger.store();
    let items = store
        .outbox_claim(OutboxClaim {
            kind: OutboxKind::Effect,
            now: st.ledger.now(),
            limit: BATCH,
            lease_ms: DELIVERY_LEASE_MS,
        })
        .await?;
    let full = items.len() == BATCH;
    for item in items {
        let Some(lease) = item.lease.clone() else {
            continue;
        };
        let outcome = deliver_item(st, &item).await;
        store
            .outbox_finish(OutboxFinish {
                id: item.id,
                lease,
                outcome,
                now: st.ledger.now(),
            })
            .await?;
    }
    Ok(full)
}

async fn deliver_item(st: &AppState, item: &idem::OutboxItem) -> OutboxOutcome {
    let later = |ms: i64, why: &str| OutboxOutcome::Retry {
        at: idem::Timestamp(st.ledger.now().0 + ms),
        error: Some(why.to_owned()),
    };
    let dead = |why: &str| OutboxOutcome::Dead {
        error: Some(why.to_owned()),
    };
    let name = serde_json::from_slice::<serde_json::Value>(&item.payload)
        .ok()
        .and_then(|v| v.get("action").and_then(|a| a.as_str()).map(str::to_owned));
    let (Some(name), Ok(ns), Ok(key)) = (
        name,
        Namespace::try_from(item.namespace.as_str()),
        idem::Key::try_from(item.key.as_str()),
    ) else {
        return dead("not an action delivery");
    };
    let loaded = match super::load(st, &ns, &name).await {
        Ok(Some(l)) => l,
        // Nothing can send it now: the record says so (failed, with why), never a silent
        // wait in `prepared`.
        Ok(None) => {
            let why = format!("the action `{name}` was deleted before its approved delivery");
            return match super::call::refuse_saved(st, &ns, &name, &key, why).await {
                Ok(Some("in_flight")) => later(1_000, "in flight"),
                Ok(_) => dead("the action was deleted"),
                Err(e) if e.status().is_server_error() => later(5_000, "the store did not answer"),
                Err(_) => dead("the action was deleted"),
            };
        }
        Err(_) => return later(5_000, "the store did not answer"),
    };
    match super::call::deliver_saved(st, &ns, &loaded.action, &loaded.headers, &key).await {
        Ok(None) => dead("the record holds no approved arguments"),
        // Held by another call right now, or waiting for its retry time: come back later
        // (the record's own budget and classification decide the rest).
        Ok(Some("in_flight")) => later(1_000, "in flight"),
        Ok(Some("backoff")) => match st.ledger.store().get(&ns, &key).await {
            Ok(Some(r)) => {
                let at = r
                    .record
                    .not_before
                    .map_or(5_000, |nb| (nb.0 - st.ledger.now().0).max(0));
                later(at, "backoff")
            }
            _ => later(5_000, "backoff"),
        },
        Ok(Some(_)) => OutboxOutcome::Done,
        Err(e) if e.status().is_server_error() => later(5_000, "the store did not answer"),
        Err(_) => dead("the delivery was refused"),
    }
}
