//! The actions as the call path reuses them: a stored action with its header values
//! ([`Loaded`]) and the per-instance cache that keeps each for [`ACTION_TTL`]. It sits below
//! the server state (which holds one [`ActionCache`]); reading the store is the parent
//! module's (`actions::cached`, `actions::load`).
//!
//! What it must never do: reach the store or the server state, or keep a missing action.

use super::model::{Action, Headers};
use crate::api::v1::effects::input::Input;

/// A stored action with its header values, ready to call.
pub struct Loaded {
    pub action: Action,
    pub headers: Headers,
    pub created_at: idem::Timestamp,
    pub updated_at: idem::Timestamp,
    /// What the arguments called lately derived to (see [`Calls`]).
    pub calls: std::sync::Arc<Calls>,
    /// The stored document and the header values it was loaded from: a later load from the
    /// same keeps these [`Calls`].
    pub(crate) source: String,
}

impl std::fmt::Debug for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loaded")
            .field("action", &self.action)
            .field("headers", &self.headers)
            .field("created_at", &self.created_at)
            .field("updated_at", &self.updated_at)
            .finish_non_exhaustive()
    }
}

/// What a call's arguments derive to, for one loaded action: the validated arguments, the
/// key, the identity fingerprint and the effect input of the delivery. Each is a pure function
/// of the action, its header values and the arguments, all fixed for the life of a
/// [`Loaded`]. (No `Debug`: the input holds header values.)
pub struct Derived {
    pub(crate) args: serde_json::Map<String, serde_json::Value>,
    pub(crate) key: idem::Key,
    pub(crate) fp: idem::Fingerprint,
    pub(crate) input: Input,
    /// The input's URL as the egress guard reads it (`None` when it does not read: the guard
    /// reads it again and refuses it).
    pub(crate) url: Option<url::Url>,
    /// What the `sent` event records of the input's request.
    pub(crate) summary: idem::RequestSummary,
}

/// Arguments (their JSON text) → what they derived to ([`Derived`]), for one loaded action.
/// An agent's repeated call (the same identity, the same arguments) is then answered without
/// validating its arguments, building its key and fingerprint, or reading its delivery again.
/// Only arguments that passed every check are kept (a refusal is derived afresh each time).
/// Bounded by entries, by the size of one argument text and by the size of all of them;
/// cleared whole when full. Handed on to the next load of the action when its document and
/// header values are unchanged (see `actions::cached`).
#[derive(Default)]
pub struct Calls(std::sync::Mutex<CallMap>);

/// At most this many derivations per loaded action (a replayed batch of this many items
/// finds each of its calls kept).
const CALLS_MAX: usize = 4096;
/// Arguments longer than this (as JSON text) are not kept.
pub const CALL_ARGS_MAX: usize = 4096;
/// At most this much argument text kept per loaded action.
const CALL_BYTES_MAX: usize = 1 << 20;

#[derive(Default)]
struct CallMap {
    map: std::collections::HashMap<String, std::sync::Arc<Derived>>,
    /// The length of every text in `map`.
    bytes: usize,
}

impl Calls {
    fn map(&self) -> std::sync::MutexGuard<'_, CallMap> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// What these arguments derived to, when kept.
    pub(crate) fn get(&self, args: &str) -> Option<std::sync::Arc<Derived>> {
        self.map().map.get(args).cloned()
    }

    /// Keeps `derived` for `args` (not when the arguments are longer than [`CALL_ARGS_MAX`]).
    pub(crate) fn put(&self, args: &str, derived: &std::sync::Arc<Derived>) {
        if args.len() > CALL_ARGS_MAX {
            return;
        }
        let mut m = self.map();
        if m.map.contains_key(args) {
            return;
        }
        if m.map.len() >= CALLS_MAX || m.bytes + args.len() > CALL_BYTES_MAX {
            m.map.clear();
            m.bytes = 0;
        }
        m.bytes += args.len();
        m.map.insert(args.to_owned(), derived.clone());
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::v1::effects::EffectBody;
    use crate::input::read_body;
    use std::sync::Arc;

    fn derived(url: &str) -> Arc<Derived> {
        let input =
            read_body::<EffectBody>(serde_json::json!({"request": {"method": "POST", "url": url}}))
                .and_then(EffectBody::into_input)
                .expect("input");
        Arc::new(Derived {
            args: serde_json::Map::new(),
            key: idem::Key::try_from("k1").expect("key"),
            fp: idem::Fingerprint::of_payload(&serde_json::json!({})).expect("fp"),
            summary: crate::api::v1::effects::request_summary(&input),
            url: None,
            input,
        })
    }

    #[test]
    fn derivations_are_kept_per_argument_text_within_their_bounds() {
        let memo = Calls::default();
        memo.put(r#"{"a":1}"#, &derived("https://a.example/x"));
        assert_eq!(
            memo.get(r#"{"a":1}"#).map(|d| d.input.url.clone()),
            Some("https://a.example/x".to_owned())
        );
        // Other arguments (or the same in another order) are another entry.
        assert!(memo.get(r#"{"a":2}"#).is_none());
        // Long arguments are not kept.
        let long = format!(r#"{{"a":"{}"}}"#, "x".repeat(CALL_ARGS_MAX));
        memo.put(&long, &derived("https://a.example/x"));
        assert!(memo.get(&long).is_none());
        // Full: cleared whole, then the new entry kept.
        for i in 0..CALLS_MAX {
            memo.put(&format!(r#"{{"n":{i}}}"#), &derived("https://a.example/x"));
        }
        assert!(memo.get(r#"{"a":1}"#).is_none(), "cleared when full");
        assert!(memo.get(&format!(r#"{{"n":{}}}"#, CALLS_MAX - 1)).is_some());
        // The text of all of them is bounded too: 300 texts of 4,000 bytes do not all stay.
        let memo = Calls::default();
        let text = |i: usize| format!(r#"{{"n":{i:04},"x":"{}"}}"#, "x".repeat(3985));
        for i in 0..300 {
            memo.put(&text(i), &derived("https://a.example/x"));
        }
        let kept = (0..300).filter(|i| memo.get(&text(*i)).is_some()).count();
        assert!(kept > 0 && kept <= CALL_BYTES_MAX / 4000, "{kept}");
        assert!(memo.get(&text(299)).is_some(), "the latest is kept");
    }
}
