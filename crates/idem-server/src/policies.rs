//! Namespace policies as the call paths read them (`POST …/effect`, an action's
//! `tools/call`): each is reused for up to [`POLICY_TTL`] instead of being read from the store
//! on every call, the way sources and actions are.
//!
//! This module owns that cache and nothing else. What it serves is only what a call checks
//! before its claim: the egress rules and the `destination_idempotent` default. It must never
//! stand in for what the engine decides inside the claim's own transaction (a pause, the daily
//! limit, the lease and retry policy the record is written with): those stay exact. A change
//! through this instance drops the entry at once ([`PolicyCache::forget`]); another instance
//! on the same ledger sees it within [`POLICY_TTL`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use idem::{Namespace, Policy, Store, StoreError};

/// How long a read policy is reused by calls.
pub const POLICY_TTL: Duration = Duration::from_secs(1);

/// The cached policies, by namespace.
#[derive(Default)]
pub struct PolicyCache {
    entries: Mutex<HashMap<String, (Instant, Arc<Policy>)>>,
    /// Bumped by every `forget`: a read that began before a change is not kept.
    generation: AtomicU64,
}

impl PolicyCache {
    fn entries(&self) -> MutexGuard<'_, HashMap<String, (Instant, Arc<Policy>)>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The policy of `ns` as read at most [`POLICY_TTL`] ago.
    pub async fn get(&self, store: &dyn Store, ns: &Namespace) -> Result<Arc<Policy>, StoreError> {
        if let Some((at, p)) = self.entries().get(ns.as_str()) {
            if at.elapsed() < POLICY_TTL {
                return Ok(p.clone());
            }
        }
        let generation = self.generation.load(Ordering::Acquire);
        let policy = Arc::new(store.namespace(ns).await?.policy);
        if self.generation.load(Ordering::Acquire) == generation {
            self.entries()
                .insert(ns.as_str().to_owned(), (Instant::now(), policy.clone()));
        }
        Ok(policy)
    }

    /// Drops the cached policy of `ns` (after a change through this instance).
    pub fn forget(&self, ns: &Namespace) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.entries().remove(ns.as_str());
    }
}
