//! What the store keeps for the operator console: the review queue across namespaces (its
//! query and keyset cursor), the activity figures of a namespace overview, and sign-in
//! sessions.
//!
//! Invariants: a session is stored only by the SHA-256 of its cookie value and names its API
//! token only by the token's stored hash, so neither the cookie nor a token secret ever
//! reaches the database; the review queue is keyset-paged (`updated_at`, namespace, key
//! ascending) so a page costs the same on the millionth record as on the first.

use idem_core::{Namespace, Record, State, Timestamp};

/// The states a person must look at (besides `processing` past `stuck_after_ms`).
pub const REVIEW_STATES: [State; 2] = [State::NeedsReview, State::AwaitingApproval];

/// `GET /v1/review`: filters, page size and position.
#[derive(Debug, Clone, Default)]
pub struct ReviewQuery {
    pub namespace: Option<Namespace>,
    /// `needs_review`, `awaiting_approval` or `processing` (stuck ones only); `None`: all three.
    pub state: Option<State>,
    pub owner: Option<String>,
    pub correlation_id: Option<String>,
    /// 1..=1000.
    pub limit: usize,
    /// Opaque cursor from a previous page.
    pub cursor: Option<String>,
}

/// Position in the review order (oldest `updated_at` first, then namespace, then key).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ReviewCursor {
    pub updated_at: i64,
    pub namespace: String,
    pub key: String,
}

impl ReviewCursor {
    pub fn of(r: &Record) -> ReviewCursor {
        ReviewCursor {
            updated_at: r.updated_at.0,
            namespace: r.namespace.as_str().to_owned(),
            key: r.key.as_str().to_owned(),
        }
    }

    pub fn encode(&self) -> String {
        hex::encode(format!(
            "r{}\n{}\n{}",
            self.updated_at, self.namespace, self.key
        ))
    }

    /// `None` for anything this store did not make (the parts must be a namespace and a key).
    pub fn decode(s: &str) -> Option<ReviewCursor> {
        let raw = String::from_utf8(hex::decode(s).ok()?).ok()?;
        let raw = raw.strip_prefix('r')?;
        let mut parts = raw.splitn(3, '\n');
        let t = parts.next()?.parse().ok()?;
        let ns = Namespace::try_from(parts.next()?).ok()?;
        let key = idem_core::Key::try_from(parts.next()?).ok()?;
        Some(ReviewCursor {
            updated_at: t,
            namespace: ns.as_str().to_owned(),
            key: key.as_str().to_owned(),
        })
    }
}

/// One page of the review queue.
#[derive(Debug, Clone)]
pub struct ReviewPage {
    pub items: Vec<Record>,
    pub next_cursor: Option<String>,
}

impl ReviewPage {
    /// From candidates of several sub-queries (each already cut to `limit + 1` in review
    /// order): sorts, keeps `limit`, and the cursor is the last kept when more exist.
    pub fn from_candidates(mut items: Vec<Record>, limit: usize) -> ReviewPage {
        items.sort_by_cached_key(ReviewCursor::of);
        let next_cursor = if items.len() > limit {
            items.truncate(limit);
            items.last().map(|r| ReviewCursor::of(r).encode())
        } else {
            None
        };
        ReviewPage { items, next_cursor }
    }
}

/// The activity figures of a namespace the overview shows besides its counts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamespaceActivity {
    /// First-time acquisitions of the current UTC day (what `daily_limit` caps).
    pub acquired_today: u64,
    /// When the oldest `processing` record was last active (acquired or heartbeat).
    pub oldest_processing_at: Option<Timestamp>,
}

/// A new console session (stored by hashes only).
#[derive(Debug, Clone)]
pub struct NewConsoleSession {
    /// SHA-256 hex of the cookie value.
    pub id_hash: String,
    /// The stored hash of the API token that signed in; `None` when no token exists (open
    /// console).
    pub token_hash: Option<String>,
    /// The per-session CSRF token every form carries.
    pub csrf: String,
    pub created_at: Timestamp,
    pub expires_at: Timestamp,
}

/// A live console session.
pub type ConsoleSession = NewConsoleSession;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn review_cursors_round_trip_and_made_up_ones_are_refused() {
        let c = ReviewCursor {
            updated_at: 1_764_581_000_123,
            namespace: "pay".into(),
            key: "a%b/c?d#e\n".trim_end().into(),
        };
        assert_eq!(ReviewCursor::decode(&c.encode()), Some(c));
        for bad in [
            "",
            "zz",
            &hex::encode("r1\nbad ns\nk"),
            &hex::encode("1\nns\nk"),
        ] {
            assert_eq!(ReviewCursor::decode(bad), None, "{bad}");
        }
        // A list cursor is not a review cursor.
        let list = crate::Cursor {
            updated_at: 5,
            key: "k".into(),
        };
        assert_eq!(ReviewCursor::decode(&list.encode()), None);
    }
}
