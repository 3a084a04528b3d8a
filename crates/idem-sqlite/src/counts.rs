//! Records per namespace and state (`namespace_counts`), kept exact by the writer itself
//! instead of by row triggers (schema 14).
//!
//! Owns the log of count changes the open write transaction made: one entry per record
//! inserted or moved to another state, noted by [`crate::rows::insert_record`] and
//! [`crate::rows::update_record`] right after their statement succeeded; its rollback to a
//! savepoint's [`mark`]; and its [`flush`] into `namespace_counts` just before `COMMIT`, one
//! upsert per namespace and state the batch touched. A trigger set ran two or three counter
//! statements per write, a third of SQLite's work for a claim and its completion; a batch of
//! such pairs now pays two upserts in all. Retention's set-based deletes keep their trigger
//! (`namespace_count_delete`): they are rare and remove many rows at once.
//!
//! Must never: be flushed inside a savepoint that can still roll back (the flushed rows would
//! go while the log kept nothing of them), outlive its transaction ([`clear`] runs at `BEGIN`,
//! after `ROLLBACK` and after `COMMIT`), or be used off the writer thread: the log is
//! thread-local, and the writer's transaction is the only one that writes records.

use std::cell::RefCell;
use std::collections::HashMap;

use idem_core::State;
use idem_store::StoreError;
use rusqlite::{params, Connection};

use crate::error::SqlResult;

thread_local! {
    static LOG: RefCell<Vec<(String, State, i64)>> = const { RefCell::new(Vec::new()) };
}

/// Notes a record of `ns` written in state `to`, having been in `from` (`None`: inserted).
pub(crate) fn note(ns: &str, from: Option<State>, to: State) {
    if from == Some(to) {
        return;
    }
    LOG.with_borrow_mut(|log| {
        if let Some(from) = from {
            log.push((ns.to_owned(), from, -1));
        }
        log.push((ns.to_owned(), to, 1));
    });
}

/// Where a savepoint starts in the log.
pub(crate) fn mark() -> usize {
    LOG.with_borrow(Vec::len)
}

/// Forgets what was noted since `mark` (its savepoint was rolled back).
pub(crate) fn rollback_to(mark: usize) {
    LOG.with_borrow_mut(|log| log.truncate(mark));
}

/// Forgets everything noted (the transaction ended or starts).
pub(crate) fn clear() {
    LOG.with_borrow_mut(Vec::clear);
}

/// Net changes per state noted for `ns` and not yet flushed (what the open transaction's own
/// reads of `namespace_counts` must add).
pub(crate) fn pending(ns: &str) -> Vec<(State, i64)> {
    LOG.with_borrow(|log| {
        let mut net: Vec<(State, i64)> = Vec::new();
        for (_, s, d) in log.iter().filter(|(n, _, _)| n == ns) {
            match net.iter_mut().find(|(x, _)| x == s) {
                Some(e) => e.1 += d,
                None => net.push((*s, *d)),
            }
        }
        net
    })
}

/// Writes the log's net changes into `namespace_counts` and empties it. Called by the writer
/// right before `COMMIT`, outside every savepoint; on an error the caller rolls back.
pub(crate) fn flush(conn: &Connection) -> Result<(), StoreError> {
    let log = LOG.with_borrow_mut(std::mem::take);
    if log.is_empty() {
        return Ok(());
    }
    let mut net: HashMap<(&str, State), i64> = HashMap::new();
    for (ns, s, d) in &log {
        *net.entry((ns.as_str(), *s)).or_default() += d;
    }
    let mut stmt = conn
        .prepare_cached(
            "INSERT INTO namespace_counts (namespace, state, n) VALUES (?1, ?2, ?3) \
             ON CONFLICT (namespace, state) DO UPDATE SET n = n + excluded.n",
        )
        .db()?;
    for ((ns, s), d) in net {
        if d != 0 {
            stmt.execute(params![ns, s.as_str(), d]).db()?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_forgets_only_what_came_after_it_and_nets_per_state() {
        clear();
        note("a", None, State::Processing);
        let m = mark();
        note("a", Some(State::Processing), State::Completed);
        note("b", None, State::Processing);
        note("a", Some(State::Completed), State::Completed);
        assert_eq!(
            pending("a"),
            [(State::Processing, 0), (State::Completed, 1)]
        );
        rollback_to(m);
        assert_eq!(pending("a"), [(State::Processing, 1)]);
        assert!(pending("b").is_empty());
        clear();
        assert!(pending("a").is_empty());
    }
}
