//! What the store keeps for the operator console: the review queue across namespaces (its
//! query, keyset cursor and the statements every backend runs for it), the activity figures
//! of a namespace overview, and sign-in sessions.
//!
//! Invariants: a session is stored only by the SHA-256 of its cookie value and names its API
//! token only by the token's stored hash, so neither the cookie nor a token secret ever
//! reaches the database; the review queue is keyset-paged (`updated_at`, namespace, key
//! ascending) so a page costs the same on the millionth record as on the first.

use idem_core::{Namespace, Policy, Record, State, Timestamp};

use crate::{sql, StoreError};

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

/// Every namespace that has records or a stored policy, in name order: the distinct
/// namespaces of the ledger by a loose index scan (one index probe per namespace, not one row
/// per record), plus those with only a stored policy. The same text on every backend.
pub const NAMESPACE_NAMES: &str = "WITH RECURSIVE n(ns) AS ( \
       SELECT (SELECT MIN(namespace) FROM records) \
       UNION ALL \
       SELECT (SELECT MIN(namespace) FROM records WHERE namespace > n.ns) FROM n \
       WHERE n.ns IS NOT NULL) \
     SELECT ns FROM n WHERE ns IS NOT NULL \
     UNION SELECT namespace FROM namespaces ORDER BY 1";

/// When the oldest `processing` record of a namespace (parameter 1) was last active, in a
/// dialect's placeholder style (`?` or `$`).
pub fn oldest_processing_of(placeholder: char) -> String {
    format!(
        "SELECT MIN(active_at) FROM records WHERE namespace = {placeholder}1 AND state = {}",
        sql::state(State::Processing)
    )
}

/// The smallest `stuck_after_ms` of any namespace ([`ReviewPlan::stuck`] needs it).
pub const SMALLEST_STUCK_AFTER: &str = "SELECT MIN(stuck_after_ms) FROM namespaces";

/// A value a review statement binds: times and the page size are integers, names and cursor
/// parts text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SqlArg {
    Int(i64),
    Text(String),
}

/// One statement and the values of its placeholders, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement {
    pub sql: String,
    pub args: Vec<SqlArg>,
}

/// The review queue as statements, written once for every backend: the waiting half
/// (`needs_review`, `awaiting_approval`, through the `records_review_queue` partial index,
/// whose predicate it spells exactly) and the stuck half (`processing` past its namespace's
/// `stuck_after_ms`, a range on `active_at` through `records_processing`). Each half is cut
/// to `limit + 1` in review order; [`ReviewPlan::page`] merges them. A backend runs the
/// statements and reads the records; it decides nothing here.
#[derive(Debug)]
pub struct ReviewPlan<'q> {
    q: &'q ReviewQuery,
    cursor: Option<ReviewCursor>,
    limit: usize,
    placeholder: char,
    columns: &'q str,
}

impl<'q> ReviewPlan<'q> {
    /// The plan of `q` in a dialect's placeholder style (`?` or `$`), selecting `columns` (the
    /// backend's record columns); [`StoreError::InvalidCursor`] for a cursor this store did
    /// not make.
    pub fn new(
        q: &'q ReviewQuery,
        placeholder: char,
        columns: &'q str,
    ) -> Result<ReviewPlan<'q>, StoreError> {
        let cursor = match &q.cursor {
            None => None,
            Some(c) => Some(ReviewCursor::decode(c).ok_or(StoreError::InvalidCursor)?),
        };
        Ok(ReviewPlan {
            q,
            cursor,
            limit: q.limit.clamp(1, 1000),
            placeholder,
            columns,
        })
    }

    /// The waiting half; `None` when the state filter leaves it out.
    pub fn waiting(&self) -> Option<Statement> {
        let waiting: Vec<State> = match self.q.state {
            None => REVIEW_STATES.to_vec(),
            Some(s) if REVIEW_STATES.contains(&s) => vec![s],
            Some(_) => vec![],
        };
        if waiting.is_empty() {
            return None;
        }
        // The predicate spells the partial index's exactly, so the planner may use it.
        let mut sql = format!(
            "SELECT {} FROM records WHERE state IN ({})",
            self.columns,
            sql::states(&REVIEW_STATES)
        );
        if waiting.len() == 1 {
            sql.push_str(&format!(" AND state = {}", sql::state(waiting[0])));
        }
        Some(self.finish(sql, Vec::new()))
    }

    /// Whether the stuck half runs (no state filter, or `processing`).
    pub fn wants_stuck(&self) -> bool {
        matches!(self.q.state, None | Some(State::Processing))
    }

    /// The stuck half at `now`, given the smallest `stuck_after_ms` of any namespace
    /// ([`SMALLEST_STUCK_AFTER`]): the range on `active_at` uses the smallest threshold (or
    /// the default, when smaller), and each row is then held to its own namespace's.
    pub fn stuck(&self, smallest: Option<i64>, now: Timestamp) -> Statement {
        let default_stuck = Policy::default().stuck_after_ms;
        let bound = now.0 - smallest.map_or(default_stuck, |s| s.min(default_stuck));
        let p = self.placeholder;
        let sql = format!(
            "SELECT {} FROM records WHERE state = {} AND active_at <= {p}1 \
             AND active_at <= {p}2 - COALESCE((SELECT n.stuck_after_ms FROM namespaces n \
             WHERE n.namespace = records.namespace), {p}3)",
            self.columns,
            sql::state(State::Processing)
        );
        let args = vec![
            SqlArg::Int(bound),
            SqlArg::Int(now.0),
            SqlArg::Int(default_stuck),
        ];
        self.finish(sql, args)
    }

    /// The page of the candidates both halves returned.
    pub fn page(&self, items: Vec<Record>) -> ReviewPage {
        ReviewPage::from_candidates(items, self.limit)
    }

    /// Appends the filters both halves share (numbered after `args`), the review order and
    /// the `limit + 1` cut.
    fn finish(&self, mut sql: String, mut args: Vec<SqlArg>) -> Statement {
        let p = self.placeholder;
        let mut filter = |sql: &mut String, column: &str, v: &str| {
            args.push(SqlArg::Text(v.to_owned()));
            sql.push_str(&format!(" AND {column} = {p}{}", args.len()));
        };
        if let Some(ns) = &self.q.namespace {
            filter(&mut sql, "namespace", ns.as_str());
        }
        if let Some(o) = &self.q.owner {
            filter(&mut sql, "owner", o);
        }
        if let Some(c) = &self.q.correlation_id {
            filter(&mut sql, "correlation_id", c);
        }
        if let Some(c) = &self.cursor {
            args.push(SqlArg::Int(c.updated_at));
            args.push(SqlArg::Text(c.namespace.clone()));
            args.push(SqlArg::Text(c.key.clone()));
            let n = args.len();
            sql.push_str(&format!(
                " AND (updated_at, namespace, key) > ({p}{}, {p}{}, {p}{n})",
                n - 2,
                n - 1
            ));
        }
        args.push(SqlArg::Int((self.limit + 1) as i64));
        sql.push_str(&format!(
            " ORDER BY updated_at, namespace, key LIMIT {p}{}",
            args.len()
        ));
        Statement { sql, args }
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
    fn the_review_plan_numbers_its_filters_after_the_halves_own_values() {
        let q = ReviewQuery {
            namespace: Some(Namespace::try_from("pay").expect("ns")),
            owner: Some("w1".into()),
            limit: 5000,
            cursor: Some(
                ReviewCursor {
                    updated_at: 7,
                    namespace: "pay".into(),
                    key: "k".into(),
                }
                .encode(),
            ),
            ..ReviewQuery::default()
        };
        let plan = ReviewPlan::new(&q, '$', "*").expect("plan");
        let waiting = plan.waiting().expect("both waiting states");
        assert_eq!(
            waiting.sql,
            "SELECT * FROM records WHERE state IN ('needs_review', 'awaiting_approval') \
             AND namespace = $1 AND owner = $2 AND (updated_at, namespace, key) > ($3, $4, $5) \
             ORDER BY updated_at, namespace, key LIMIT $6"
        );
        let text = |s: &str| SqlArg::Text(s.into());
        assert_eq!(
            waiting.args,
            [
                text("pay"),
                text("w1"),
                SqlArg::Int(7),
                text("pay"),
                text("k"),
                SqlArg::Int(1001)
            ]
        );
        assert!(plan.wants_stuck());
        let stuck = plan.stuck(Some(10), Timestamp(100));
        assert!(stuck
            .sql
            .contains("active_at <= $1 AND active_at <= $2 - COALESCE"));
        assert!(stuck.sql.ends_with(
            "AND namespace = $4 AND owner = $5 \
             AND (updated_at, namespace, key) > ($6, $7, $8) \
             ORDER BY updated_at, namespace, key LIMIT $9"
        ));
        assert_eq!(
            stuck.args[..3],
            [
                SqlArg::Int(90),
                SqlArg::Int(100),
                SqlArg::Int(Policy::default().stuck_after_ms)
            ]
        );
    }

    #[test]
    fn a_state_filter_leaves_out_the_other_half() {
        let only = |s: State| ReviewQuery {
            state: Some(s),
            limit: 10,
            ..ReviewQuery::default()
        };
        let q = only(State::Processing);
        let plan = ReviewPlan::new(&q, '?', "*").expect("plan");
        assert!(plan.waiting().is_none() && plan.wants_stuck());
        let q = only(State::AwaitingApproval);
        let plan = ReviewPlan::new(&q, '?', "*").expect("plan");
        assert!(!plan.wants_stuck());
        let w = plan.waiting().expect("waiting");
        assert!(
            w.sql.contains(" AND state = 'awaiting_approval' ORDER BY"),
            "{}",
            w.sql
        );
        assert_eq!(w.args, [SqlArg::Int(11)]);
        let q = ReviewQuery {
            cursor: Some("zz".into()),
            ..ReviewQuery::default()
        };
        assert!(matches!(
            ReviewPlan::new(&q, '?', "*"),
            Err(StoreError::InvalidCursor)
        ));
    }

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
