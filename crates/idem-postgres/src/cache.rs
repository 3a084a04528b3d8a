//! In-process caches that let the hot paths skip the decision read.
//!
//! Neither cache is ever trusted on its own: every write decided on cached data carries a
//! guard that the database checks in the same statement (the namespace's `revision` and
//! `updated_at`; the record's `version` and `created_at`). A guard that fails means another
//! instance, an operator or the janitor changed the row: the entry is dropped and the operation
//! is decided again on a fresh read. So a stale entry costs one round trip, never a wrong
//! answer, and several idem instances can share one database.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use idem_core::{Key, Namespace, Policy, Record};
use serde_json::Value;

/// `revision` stored for a namespace that has no row (default settings).
pub(crate) const NO_ROW: i64 = -1;

/// A namespace's settings as read, with the values its guard compares.
#[derive(Debug, Clone)]
pub(crate) struct NsSettings {
    pub policy: Policy,
    pub paused: bool,
    /// `namespaces.revision`, or [`NO_ROW`].
    pub revision: i64,
    /// `namespaces.updated_at`, or [`NO_ROW`].
    pub updated_at: i64,
}

impl idem_store::engine::NsView for NsSettings {
    fn policy(&self) -> &Policy {
        &self.policy
    }
    fn paused(&self) -> bool {
        self.paused
    }
}

/// Namespace settings per namespace. Small (one entry per namespace in use); cleared whole
/// when it reaches its bound.
#[derive(Debug, Default)]
pub(crate) struct NsCache {
    map: Mutex<HashMap<String, Arc<NsSettings>>>,
}

const NS_CACHE_MAX: usize = 1024;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock cannot leave a map half-updated in a way that matters
    // (every entry is guarded anyway): keep using it.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl NsCache {
    pub fn get(&self, ns: &Namespace) -> Option<Arc<NsSettings>> {
        lock(&self.map).get(ns.as_str()).cloned()
    }

    pub fn put(&self, ns: &Namespace, s: Arc<NsSettings>) {
        let mut map = lock(&self.map);
        if map.len() >= NS_CACHE_MAX && !map.contains_key(ns.as_str()) {
            map.clear();
        }
        map.insert(ns.as_str().to_owned(), s);
    }

    pub fn remove(&self, ns: &Namespace) {
        lock(&self.map).remove(ns.as_str());
    }
}

type RecKey = (String, String);

/// The records this instance last wrote or read, bounded by entries and by approximate bytes.
///
/// Two generations approximate LRU at O(1): entries go into `young`; when it is full it becomes
/// `old` (dropping the previous `old`), and a hit in `old` moves the entry back to `young`.
#[derive(Debug)]
pub(crate) struct RecordCache {
    inner: Mutex<Generations>,
    /// Half of the entry bound and of the byte bound (one generation each).
    gen_entries: usize,
    gen_bytes: usize,
}

#[derive(Debug, Default)]
struct Generations {
    young: HashMap<RecKey, (Arc<Record>, usize)>,
    young_bytes: usize,
    old: HashMap<RecKey, (Arc<Record>, usize)>,
}

/// Bytes the whole record cache may hold (approximately), besides its entry bound.
const RECORD_CACHE_BYTES: usize = 16 << 20;

impl RecordCache {
    /// A cache of at most `entries` records (0 disables it).
    pub fn new(entries: usize) -> Self {
        RecordCache {
            inner: Mutex::new(Generations::default()),
            gen_entries: entries / 2,
            gen_bytes: RECORD_CACHE_BYTES / 2,
        }
    }

    pub fn enabled(&self) -> bool {
        self.gen_entries > 0
    }

    pub fn get(&self, ns: &Namespace, key: &Key) -> Option<Arc<Record>> {
        if !self.enabled() {
            return None;
        }
        let k = (ns.as_str().to_owned(), key.as_str().to_owned());
        let mut g = lock(&self.inner);
        if let Some((r, _)) = g.young.get(&k) {
            return Some(r.clone());
        }
        let (r, size) = g.old.remove(&k)?;
        let out = r.clone();
        self.insert_young(&mut g, k, r, size);
        Some(out)
    }

    /// Whether [`RecordCache::put`] would keep `rec`: the cache is on and the record is not
    /// one of the large ones it forgets instead. A writer asks before it builds the record as
    /// stored (a copy of its JSON, parsed back from the text written), so an effect's answer of
    /// hundreds of KiB is not copied twice more only to be dropped.
    pub fn admits(&self, rec: &Record) -> bool {
        self.enabled() && approx_size(rec) <= self.max_record_bytes()
    }

    fn max_record_bytes(&self) -> usize {
        self.gen_bytes / 64
    }

    /// Remembers `rec` unless an entry of the same incarnation with a newer version is there
    /// (concurrent operations of this instance may finish out of order).
    pub fn put(&self, rec: Record) {
        if !self.enabled() {
            return;
        }
        let size = approx_size(&rec);
        if size > self.max_record_bytes() {
            // Large results are rare and cheap to read again; do not let them evict hundreds.
            self.remove(&rec.namespace, &rec.key);
            return;
        }
        let k = (
            rec.namespace.as_str().to_owned(),
            rec.key.as_str().to_owned(),
        );
        let mut g = lock(&self.inner);
        let newer_known = g
            .young
            .get(&k)
            .or_else(|| g.old.get(&k))
            .is_some_and(|(have, _)| {
                have.created_at == rec.created_at && have.version > rec.version
            });
        if newer_known {
            return;
        }
        g.old.remove(&k);
        self.insert_young(&mut g, k, Arc::new(rec), size);
    }

    fn insert_young(&self, g: &mut Generations, k: RecKey, r: Arc<Record>, size: usize) {
        if let Some((_, old_size)) = g.young.insert(k, (r, size)) {
            g.young_bytes = g.young_bytes.saturating_sub(old_size);
        }
        g.young_bytes += size;
        if g.young.len() >= self.gen_entries || g.young_bytes >= self.gen_bytes {
            g.old = std::mem::take(&mut g.young);
            g.young_bytes = 0;
        }
    }

    pub fn remove(&self, ns: &Namespace, key: &Key) {
        if !self.enabled() {
            return;
        }
        let k = (ns.as_str().to_owned(), key.as_str().to_owned());
        let mut g = lock(&self.inner);
        if let Some((_, size)) = g.young.remove(&k) {
            g.young_bytes = g.young_bytes.saturating_sub(size);
        }
        g.old.remove(&k);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        let g = lock(&self.inner);
        g.young.len() + g.old.len()
    }
}

/// Roughly the heap and inline bytes a cached record holds.
fn approx_size(r: &Record) -> usize {
    fn opt(s: &Option<String>) -> usize {
        s.as_ref().map_or(0, String::len)
    }
    fn json(v: &Value) -> usize {
        16 + match v {
            Value::Null | Value::Bool(_) | Value::Number(_) => 8,
            Value::String(s) => s.len(),
            Value::Array(a) => a.iter().map(json).sum(),
            Value::Object(o) => o.iter().map(|(k, v)| 48 + k.len() + json(v)).sum(),
        }
    }
    std::mem::size_of::<Record>()
        + 64 // the map's key and bookkeeping
        + 2 * (r.namespace.as_str().len() + r.key.as_str().len())
        + r.fingerprint.as_ref().map_or(0, |f| f.as_str().len())
        + opt(&r.owner)
        + opt(&r.correlation_id)
        + opt(&r.external_ref)
        + r.lease_id.as_ref().map_or(0, |l| l.as_str().len())
        + r.last_error
            .as_ref()
            .map_or(0, |e| e.category.len() + e.message.len())
        + r.prepared_payload.as_ref().map_or(0, json)
        + r.result.as_ref().map_or(0, json)
}

/// How often the fast paths were taken (for tests and diagnostics).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub speculative_inserts: AtomicU64,
    pub speculative_existing: AtomicU64,
    pub cached_writes: AtomicU64,
    pub guard_misses: AtomicU64,
    pub full_reads: AtomicU64,
    /// Every `execute`, for the one-time analyze of a young table.
    pub ops: AtomicU64,
}

impl Counters {
    pub fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }
    pub fn snapshot(&self) -> crate::FastPathStats {
        crate::FastPathStats {
            speculative_inserts: self.speculative_inserts.load(Ordering::Relaxed),
            speculative_existing: self.speculative_existing.load(Ordering::Relaxed),
            cached_writes: self.cached_writes.load(Ordering::Relaxed),
            guard_misses: self.guard_misses.load(Ordering::Relaxed),
            full_reads: self.full_reads.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use idem_core::{ClaimRequest, Op, Timestamp, Write};

    /// The record a fresh claim of `k` at `created` makes, at `version`.
    pub(crate) fn rec(k: &str, version: i64, created: i64) -> Record {
        let policy = Policy::default();
        let ctx = idem_store::ExecCtx::at(Timestamp(created));
        let claim = Op::Claim(ClaimRequest::default());
        let t = idem_core::apply(
            &ns(),
            &key(k),
            None,
            &claim,
            &ctx.decision(&policy, false, 0),
        );
        match t.write {
            Write::Insert(r) => Record { version, ..*r },
            other => panic!("a fresh claim inserts, got {other:?}"),
        }
    }

    fn ns() -> Namespace {
        Namespace::try_from("ns").expect("ns")
    }
    fn key(k: &str) -> Key {
        Key::try_from(k).expect("key")
    }

    #[test]
    fn bounded_and_keeps_recent_entries() {
        let c = RecordCache::new(100);
        for i in 0..1000 {
            c.put(rec(&format!("k{i}"), 1, 0));
        }
        assert!(c.len() <= 100, "{} entries", c.len());
        assert!(c.get(&ns(), &key("k999")).is_some());
        assert!(c.get(&ns(), &key("k0")).is_none());
    }

    #[test]
    fn an_older_version_never_replaces_a_newer_one() {
        let c = RecordCache::new(10);
        c.put(rec("a", 3, 5));
        c.put(rec("a", 2, 5));
        assert_eq!(c.get(&ns(), &key("a")).map(|r| r.version), Some(3));
        // Another incarnation (deleted and created again) always replaces.
        c.put(rec("a", 1, 9));
        assert_eq!(c.get(&ns(), &key("a")).map(|r| r.version), Some(1));
        c.remove(&ns(), &key("a"));
        assert!(c.get(&ns(), &key("a")).is_none());
    }

    #[test]
    fn disabled_cache_holds_nothing() {
        let c = RecordCache::new(0);
        c.put(rec("a", 1, 0));
        assert!(c.get(&ns(), &key("a")).is_none());
    }

    #[test]
    fn huge_records_are_not_cached() {
        let c = RecordCache::new(10);
        let mut r = rec("big", 1, 0);
        r.result = Some(Value::String("x".repeat(1 << 20)));
        c.put(r);
        assert!(c.get(&ns(), &key("big")).is_none());
    }

    #[test]
    fn admits_what_put_keeps_and_nothing_else() {
        let c = RecordCache::new(10);
        let small = rec("small", 1, 0);
        let mut edge = rec("edge", 1, 0);
        // Just under and just over the per-record bound (a string's size is its length + 16).
        let room = c.max_record_bytes() - approx_size(&edge) - 16;
        edge.result = Some(Value::String("x".repeat(room)));
        let mut over = rec("over", 1, 0);
        over.result = Some(Value::String("x".repeat(room + 1)));
        for (r, kept) in [(small, true), (edge, true), (over, false)] {
            assert_eq!(c.admits(&r), kept, "{}", r.key.as_str());
            let k = r.key.clone();
            c.put(r);
            assert_eq!(c.get(&ns(), &k).is_some(), kept, "{}", k.as_str());
        }
        assert!(!RecordCache::new(0).admits(&rec("small", 1, 0)));
    }
}
