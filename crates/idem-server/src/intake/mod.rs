//! The webhook intake (`INTAKE.md`) in the server: `POST /in/{source}` ([`receive`]), the
//! delivery worker that forwards stored events to their source's `forward.url`
//! ([`forward`]), and the loading of a source with its secrets ([`load`]). The sources API
//! and the event reads live in `api::v1::sources`.
//!
//! Design (where the contract leaves it open):
//! - An event is a ledger record in the source's namespace under its key (the pure rules are
//!   `idem_core`'s intake ops), plus a row of the store's `intake_events` table (raw body or
//!   split element, content type, forwarded headers with lowercase names, `received_at`, the
//!   attempt list, `delivered_at`). The row and the event's first outbox item (kind
//!   `forward`) ride on the record's creation (`idem_store::Rider`): the engine's step that
//!   inserts the record writes them in the same transaction, and a step that finds the
//!   record writes no row. The 200 goes out only after that step is durable. (A row without
//!   a record, from a version that wrote them in two steps, is completed by the worker.)
//! - Each delivery attempt holds the record's lease (`forward.timeout_ms` + a margin): that
//!   lease, not the outbox item, is what keeps at most one delivery of an event in flight
//!   across instances; a stale or duplicated outbox item only ever waits or finishes.
//! - Forward URLs are written by admins (a source is admin-only), and n8n usually sits on a
//!   loopback or private address, so a forward is checked by the egress guard against a
//!   policy that lists exactly the forward URL's own host and port (an exact entry, which
//!   opens a private or loopback address for that host only). The guard still resolves once
//!   and connects only to the addresses it checked, never follows a redirect and never
//!   reaches a multicast or unspecified address. The namespace `egress` policy (meant for
//!   effects, whose URLs workers send) does not apply to forwards.
//! - Retention follows the records: the janitor drops a delivered event's body when its
//!   record's result expires (`retention_ms`; the tombstone still answers `duplicate`) and
//!   the row when the tombstone goes (`audit_retention_ms`); undelivered and `needs_review`
//!   events are never touched.
//! - The hot paths (`POST /in/{source}` and each delivery) read a source through
//!   [`SourceCache`]: a loaded source is reused for [`SOURCE_TTL`] (1 s), and a write or
//!   delete through this instance's API forgets it at once. A change made through another
//!   instance on the same PostgreSQL (or by a second process on the SQLite file) is seen here
//!   within that second. The API's own reads always go to the store.
//! - A source's namespace should hold only its events: a claim on one of their keys there
//!   would meet the intake's record (a `prepared` record whose lease ran out resumes).
//!
//! What this module must never do: write anything for a request that was refused, acknowledge
//! an event before it is durable, log or answer a body, a signature or a secret, or start a
//! delivery the record's lease does not cover.

pub mod forward;
pub mod receive;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idem::{AlertSecret, Secret, Store, StoreError, Timestamp};
use idem_intake::source::{Source, SourceRead};
use serde_json::Value;

/// A source as the intake uses it: the configuration and its secrets.
pub struct LoadedSource {
    pub source: Source,
    /// The signing secrets, oldest first.
    pub secrets: Vec<Secret>,
    pub forward_secret: Option<AlertSecret>,
    /// The signing secrets of the named destinations that have one.
    pub destination_secrets: BTreeMap<String, AlertSecret>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

impl LoadedSource {
    /// The contract's read shape (hints only, never a secret).
    pub fn read_shape(&self) -> SourceRead {
        let hint = |s: &AlertSecret| Secret::new(s.expose()).hint();
        let mut forward_hints: BTreeMap<String, String> = self
            .destination_secrets
            .iter()
            .map(|(n, s)| (n.clone(), hint(s)))
            .collect();
        if let Some(s) = &self.forward_secret {
            forward_hints.insert(idem_intake::fanout::DEFAULT.to_owned(), hint(s));
        }
        self.source.read_shape(
            &self.secrets.iter().map(Secret::hint).collect::<Vec<_>>(),
            &forward_hints,
            self.created_at.to_rfc3339(),
            self.updated_at.to_rfc3339(),
        )
    }

    /// The signing secret of destination `name`, when it has one.
    pub fn secret_of(&self, name: &str) -> Option<&AlertSecret> {
        if name == idem_intake::fanout::DEFAULT {
            self.forward_secret.as_ref()
        } else {
            self.destination_secrets.get(name)
        }
    }
}

/// How long the hot paths reuse a loaded source.
pub const SOURCE_TTL: Duration = Duration::from_secs(1);

/// Loaded sources for the hot paths (see the module doc): each is reused for [`SOURCE_TTL`];
/// [`SourceCache::forget`] drops one at once. A missing source is never cached (so a source
/// created here answers at once, and unknown names cost a read, as before).
pub struct SourceCache {
    store: Arc<dyn Store>,
    entries: Mutex<HashMap<String, (Instant, Arc<LoadedSource>)>>,
    /// Bumped by every `forget`: a load that began before a change is not kept.
    generation: AtomicU64,
}

impl SourceCache {
    pub fn new(store: Arc<dyn Store>) -> SourceCache {
        SourceCache {
            store,
            entries: Mutex::new(HashMap::new()),
            generation: AtomicU64::new(0),
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, Arc<LoadedSource>)>> {
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The source `name` as loaded at most [`SOURCE_TTL`] ago; `None` when it does not exist.
    pub async fn get(
        &self,
        name: &str,
        now: Timestamp,
    ) -> Result<Option<Arc<LoadedSource>>, StoreError> {
        if let Some((at, l)) = self.entries().get(name) {
            if at.elapsed() < SOURCE_TTL {
                return Ok(Some(l.clone()));
            }
        }
        let generation = self.generation.load(Ordering::Acquire);
        let loaded = load(&self.store, name, now).await?.map(Arc::new);
        let mut entries = self.entries();
        match &loaded {
            Some(l) if self.generation.load(Ordering::Acquire) == generation => {
                entries.insert(name.to_owned(), (Instant::now(), l.clone()));
            }
            _ => {
                entries.remove(name);
            }
        }
        Ok(loaded)
    }

    /// Forgets `name` (it was written or deleted): the next use reads the store.
    pub fn forget(&self, name: &str) {
        let mut entries = self.entries();
        self.generation.fetch_add(1, Ordering::AcqRel);
        entries.remove(name);
    }
}

/// Loads a source with its secrets; `None` when it does not exist.
pub async fn load(
    store: &Arc<dyn Store>,
    name: &str,
    now: Timestamp,
) -> Result<Option<LoadedSource>, StoreError> {
    let Some(row) = store.source_get(name).await? else {
        return Ok(None);
    };
    let stored: Value = serde_json::from_str(&row.config)
        .map_err(|e| StoreError::Corrupt(format!("source {name} configuration: {e}")))?;
    let source = Source::load(name, &stored)
        .map_err(|e| StoreError::Corrupt(format!("source {name} configuration: {e}")))?;
    let mut secrets: Vec<Secret> = store
        .secrets(&idem::intake_source_owner(name), now)
        .await?
        .into_iter()
        .map(|s| s.value)
        .collect();
    secrets.reverse();
    let forward_secret =
        newest_forward_secret(store, &idem::intake_forward_owner(name), name, now).await?;
    let mut destination_secrets = BTreeMap::new();
    for dest in source.forwards.keys() {
        let owner = idem::intake_destination_owner(name, dest);
        if let Some(s) = newest_forward_secret(store, &owner, name, now).await? {
            destination_secrets.insert(dest.clone(), s);
        }
    }
    Ok(Some(LoadedSource {
        source,
        secrets,
        forward_secret,
        destination_secrets,
        created_at: row.created_at,
        updated_at: row.updated_at,
    }))
}

/// The newest signing secret of one destination of source `name`.
async fn newest_forward_secret(
    store: &Arc<dyn Store>,
    owner: &idem::SecretOwner,
    name: &str,
    now: Timestamp,
) -> Result<Option<AlertSecret>, StoreError> {
    match store.secrets(owner, now).await?.into_iter().next() {
        None => Ok(None),
        Some(s) => Ok(Some(AlertSecret::parse(s.value.expose()).map_err(
            |_| {
                StoreError::Corrupt(format!(
                    "source {name}: stored forward secret is not whsec_"
                ))
            },
        )?)),
    }
}
