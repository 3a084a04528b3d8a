//! The actions as the call path reuses them: a stored action with its header values
//! ([`Loaded`]) and the per-instance cache that keeps each for [`ACTION_TTL`]. It sits below
//! the server state (which holds one [`ActionCache`]); reading the store is the parent
//! module's (`actions::cached`, `actions::load`).
//!
//! What it must never do: reach the store or the server state, or keep a missing action.

use super::model::{Action, Headers};

/// A stored action with its header values, ready to call.
#[derive(Debug)]
pub struct Loaded {
    pub action: Action,
    pub headers: Headers,
    pub created_at: idem::Timestamp,
    pub updated_at: idem::Timestamp,
}

/// How long a loaded action is reused by calls.
pub const ACTION_TTL: std::time::Duration = std::time::Duration::from_secs(1);

/// Loaded actions for the call path: each is reused for [`ACTION_TTL`] (its JSON Schema
/// compiled once, not on every call); [`ActionCache::forget`] drops one at once (a write or a
/// delete through this instance). A missing action is never cached. Another instance on the
/// same ledger sees a change within [`ACTION_TTL`].
#[derive(Default)]
pub struct ActionCache {
    pub(super) entries: std::sync::Mutex<std::collections::HashMap<(String, String), Cached>>,
    /// Bumped by every `forget`: a load that began before a change is not kept.
    pub(super) generation: std::sync::atomic::AtomicU64,
}

type Cached = (std::time::Instant, std::sync::Arc<Loaded>);

impl ActionCache {
    pub(super) fn entries(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<(String, String), Cached>> {
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Drops the cached `ns`/`name` (after a write or a delete).
    pub fn forget(&self, ns: &str, name: &str) {
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        self.entries().remove(&(ns.to_owned(), name.to_owned()));
    }
}
