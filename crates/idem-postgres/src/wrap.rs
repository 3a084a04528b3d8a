//! Plans kept behind a transaction pooler: idem's repeated statements carried by server-side
//! PL/pgSQL functions.
//!
//! Behind a transaction pooler every statement goes out unnamed (`conn.rs`), so PostgreSQL
//! parses and plans it on every call — for idem's large single-statement writes (the fresh
//! claim with its event, counter and statistics CTEs) that planning is most of the cost. A
//! PL/pgSQL function keeps the plans of its statements per server connection, and that cache
//! belongs to the server connection, not to a client session, so it survives the pooler
//! moving transactions between connections. So once a row-returning statement has answered a
//! few times, this module creates `idem_q_<hash>(<parameter types>) RETURNS TABLE(<the
//! columns it answered with>)` whose body is `RETURN QUERY <the statement>` (its `$n` are the
//! function's parameters), and from then on sends `SELECT * FROM idem_q_<hash>($1, …)`
//! instead: a trivial statement to plan, the same rows back, in the same transaction. A
//! statement that counts its own records (`rows::COUNTS_ITSELF`) is called with that mark, as
//! the counter triggers read the text of the top-level statement.
//!
//! What it owns: the per-process map from statement text to its wrapper state and the creation
//! of the functions. What it must never do: change what a statement does or answers (the
//! function is named by a hash of the exact text, parameter types and result columns, so two
//! instances or two versions never call each other's statements; a changed statement is a new
//! function), run anything inside a caller's transaction other than the call itself, or make a
//! call fail because a function could not be made — a statement that cannot be wrapped (no
//! `CREATE` right on the schema, a read-only server) simply keeps going out unnamed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use deadpool_postgres::Pool;
use sha2::{Digest, Sha256};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Column;

use crate::rows::COUNTS_ITSELF;

/// Successful row-returning calls before a statement is wrapped: one-off statements
/// (migrations, start-up checks) never are.
const CALLS_BEFORE_WRAPPING: u32 = 3;
/// At most this many statements per process are tracked; past it, new texts go out unnamed.
const MAX_ENTRIES: usize = 512;
/// After a creation failed for a reason that may pass (a failover, a lost connection).
const RETRY_AFTER: Duration = Duration::from_secs(30);
/// What every wrapper's name starts with.
pub(crate) const PREFIX: &str = "idem_q_";
/// The dollar quote around a function body; a statement containing it is never wrapped.
const QUOTE: &str = "$idem_q$";

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One statement text and what is known about wrapping it.
#[derive(Debug)]
pub(crate) struct Entry {
    text: Box<str>,
    state: Mutex<State>,
}

#[derive(Debug)]
enum State {
    /// Sent unnamed; `calls` row-returning calls answered so far.
    Learning {
        calls: u32,
        not_before: Option<Instant>,
    },
    /// A task is creating the function.
    Creating,
    /// Sent as a call of the function, for exactly these parameter types.
    Ready(Arc<Ready>),
    /// Never wrapped (not tracked, or the database refused the function for good).
    Off,
}

#[derive(Debug)]
pub(crate) struct Ready {
    /// `SELECT * FROM idem_q_…($1, …, $n)`.
    pub call: String,
    params: Vec<Type>,
}

/// The parameters of a call as sent: each value with its type (`conn::typed`).
pub(crate) type Typed<'a> = [(&'a (dyn ToSql + Sync), Type)];

impl Entry {
    /// An entry that is never wrapped (a connection without [`Wrappers`], or past the bound).
    pub(crate) fn unwrapped(text: &str) -> Arc<Entry> {
        Arc::new(Entry {
            text: text.into(),
            state: Mutex::new(State::Off),
        })
    }

    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// The wrapped call when it exists for these parameter types.
    pub(crate) fn ready(&self, params: &Typed<'_>) -> Option<Arc<Ready>> {
        match &*lock(&self.state) {
            State::Ready(r)
                if r.params.len() == params.len()
                    && r.params.iter().zip(params).all(|(a, (_, b))| a == b) =>
            {
                Some(r.clone())
            }
            _ => None,
        }
    }

    /// A wrapped call failed because the function is gone or no longer matches its statement
    /// (dropped by an operator, a column type changed under it): send the text again and learn
    /// anew.
    pub(crate) fn forget(&self) {
        let mut st = lock(&self.state);
        if matches!(*st, State::Ready(_)) {
            *st = State::Learning {
                calls: 0,
                not_before: Some(Instant::now() + RETRY_AFTER),
            };
        }
    }
}

/// Whether an error means that a wrapper no longer fits its statement: its function is gone or
/// answers other columns than the statement now does. The call changed nothing (the statement
/// failed), the entry is forgotten by the connection that saw it, and the error is a retry
/// (`error.rs`), which sends the text again.
pub(crate) fn is_stale_wrapper(e: &tokio_postgres::Error) -> bool {
    let Some(db) = e.as_db_error() else {
        return false;
    };
    let ours = |s: Option<&str>| s.is_some_and(|s| s.contains(PREFIX));
    (*db.code() == SqlState::UNDEFINED_FUNCTION || *db.code() == SqlState::DATATYPE_MISMATCH)
        && (ours(Some(db.message())) || ours(db.where_()))
}

/// The statements of one store and the pool their functions are created through.
pub(crate) struct Wrappers {
    pool: Pool,
    entries: Mutex<HashMap<(usize, usize), Arc<Entry>>>,
}

impl std::fmt::Debug for Wrappers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wrappers")
            .field("entries", &lock(&self.entries).len())
            .finish()
    }
}

impl Wrappers {
    pub(crate) fn new(pool: Pool) -> Arc<Wrappers> {
        Arc::new(Wrappers {
            pool,
            entries: Mutex::new(HashMap::new()),
        })
    }

    /// The entry of a statement text. Keyed by where the text lives (idem's statements are
    /// built once per process) and checked against its content, so a text rebuilt at the same
    /// address is a new entry, never the old one's wrapper.
    pub(crate) fn entry(&self, text: &str) -> Arc<Entry> {
        let at = (text.as_ptr() as usize, text.len());
        let mut map = lock(&self.entries);
        if let Some(e) = map.get(&at) {
            if &*e.text == text {
                return e.clone();
            }
        } else if map.len() >= MAX_ENTRIES {
            return Entry::unwrapped(text);
        }
        let e = Arc::new(Entry {
            text: text.into(),
            state: Mutex::new(if text.contains(QUOTE) {
                State::Off
            } else {
                State::Learning {
                    calls: 0,
                    not_before: None,
                }
            }),
        });
        map.insert(at, e.clone());
        e
    }

    /// How many statements are sent as function calls now (diagnostics and tests).
    pub(crate) fn ready_count(&self) -> usize {
        lock(&self.entries)
            .values()
            .filter(|e| matches!(*lock(&e.state), State::Ready(_)))
            .count()
    }

    /// Counts a row-returning call of `entry` sent unnamed; past the threshold, starts creating
    /// its function in a task of its own, on a connection of its own.
    pub(crate) fn learned(&self, entry: &Arc<Entry>, typed: &Typed<'_>, columns: &[Column]) {
        let def = {
            let mut st = lock(&entry.state);
            let State::Learning { calls, not_before } = &mut *st else {
                return;
            };
            if not_before.is_some_and(|t| Instant::now() < t) {
                return;
            }
            *calls += 1;
            if *calls < CALLS_BEFORE_WRAPPING {
                return;
            }
            let params: Vec<Type> = typed.iter().map(|(_, t)| t.clone()).collect();
            let columns = columns.iter().map(|c| (c.name(), c.type_()));
            match Definition::new(&entry.text, &params, columns) {
                Some(def) => {
                    *st = State::Creating;
                    def
                }
                None => {
                    *st = State::Off;
                    return;
                }
            }
        };
        let pool = self.pool.clone();
        let entry = entry.clone();
        tokio::spawn(async move {
            let outcome = create(&pool, &def).await;
            let mut st = lock(&entry.state);
            *st = match outcome {
                Created::Yes => State::Ready(Arc::new(Ready {
                    call: def.call,
                    params: def.params,
                })),
                Created::Never => State::Off,
                Created::Later => State::Learning {
                    calls: 0,
                    not_before: Some(Instant::now() + RETRY_AFTER),
                },
            };
        });
    }
}

/// A function for one statement: its name, `CREATE FUNCTION` text and call text.
#[derive(Debug)]
struct Definition {
    name: String,
    create: String,
    call: String,
    params: Vec<Type>,
}

/// A type as SQL: schema-qualified and quoted (`"pg_catalog"."int8"`, `"pg_catalog"."_text"`).
fn type_sql(t: &Type) -> String {
    format!("\"{}\".\"{}\"", t.schema(), t.name())
}

fn quoted(name: &str) -> Option<String> {
    (!name.contains('"') && !name.contains('\0')).then(|| format!("\"{name}\""))
}

impl Definition {
    /// `None` when the answer cannot be a function's result (two columns of one name).
    fn new<'c>(
        text: &str,
        param_types: &[Type],
        columns: impl Iterator<Item = (&'c str, &'c Type)>,
    ) -> Option<Definition> {
        let mut cols: Vec<(String, String)> = Vec::new();
        for (name, ty) in columns {
            let name = quoted(name)?;
            if cols.iter().any(|(n, _)| *n == name) {
                return None;
            }
            cols.push((name, type_sql(ty)));
        }
        let params: Vec<String> = param_types.iter().map(type_sql).collect();
        let mut h = Sha256::new();
        for part in [text.as_bytes(), b"\0"] {
            h.update(part);
        }
        for p in &params {
            h.update(p.as_bytes());
            h.update(b",");
        }
        h.update(b"\0");
        for (n, t) in &cols {
            h.update(n.as_bytes());
            h.update(b" ");
            h.update(t.as_bytes());
            h.update(b",");
        }
        let name = format!("{PREFIX}{}", &hex::encode(h.finalize())[..24]);
        let columns: Vec<String> = cols.iter().map(|(n, t)| format!("{n} {t}")).collect();
        let create = format!(
            "CREATE FUNCTION {name}({params}) RETURNS TABLE({columns}) LANGUAGE plpgsql AS \
             {QUOTE}\n#variable_conflict use_column\nBEGIN\nRETURN QUERY {text};\nEND\n{QUOTE}",
            params = params.join(", "),
            columns = columns.join(", "),
        );
        let args: Vec<String> = (1..=params.len()).map(|i| format!("${i}")).collect();
        // The record counters' triggers skip the rows of a statement whose text holds the
        // counts-itself mark, and the text they read is the top-level one (`current_query()`):
        // the call carries the mark of the statement it runs.
        let mark = if text.contains(COUNTS_ITSELF) {
            format!(" {COUNTS_ITSELF}")
        } else {
            String::new()
        };
        let call = format!("SELECT * FROM {name}({}){mark}", args.join(", "));
        Some(Definition {
            name,
            create,
            call,
            params: param_types.to_vec(),
        })
    }
}

enum Created {
    Yes,
    /// Refused for a reason that will not pass (no right to create, a statement PL/pgSQL
    /// cannot carry): this process keeps sending the text.
    Never,
    /// Failed for a reason that may pass: try again later.
    Later,
}

async fn create(pool: &Pool, def: &Definition) -> Created {
    let client = match pool.get().await {
        Ok(c) => c,
        Err(e) => {
            tracing::debug!(function = %def.name, error = %e, "statement wrapper: no connection");
            return Created::Later;
        }
    };
    // One autocommit statement: nothing of it is left on the server connection but the
    // function, which is what a pooler may share.
    match client.batch_execute(&def.create).await {
        Ok(()) => Created::Yes,
        Err(e) => match e.code() {
            // Made already, by this instance, another one, or concurrently.
            Some(c) if *c == SqlState::DUPLICATE_FUNCTION || *c == SqlState::UNIQUE_VIOLATION => {
                Created::Yes
            }
            Some(c) if c.code().starts_with("42") || c.code().starts_with("0A") => {
                tracing::warn!(
                    function = %def.name,
                    code = c.code(),
                    error = %e,
                    "statement wrapper refused: this statement is planned on every call \
                     behind the pooler (grant CREATE on the schema to let idem keep its plans)"
                );
                Created::Never
            }
            _ => {
                tracing::debug!(function = %def.name, error = %e, "statement wrapper: try later");
                Created::Later
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_type_is_schema_qualified_and_quoted() {
        assert_eq!(type_sql(&Type::INT8), "\"pg_catalog\".\"int8\"");
        assert_eq!(type_sql(&Type::TEXT_ARRAY), "\"pg_catalog\".\"_text\"");
    }

    #[test]
    fn the_function_is_named_by_text_parameters_and_columns() {
        let cols = [("ok", &Type::BOOL), ("seq", &Type::INT8)];
        let def = |text: &str, params: &[Type], cols: &[(&'static str, &'static Type)]| {
            Definition::new(text, params, cols.iter().copied()).expect("definition")
        };
        let a = def("SELECT $1 = 'x', 1::int8", &[Type::TEXT], &cols);
        assert_eq!(
            a.name,
            def("SELECT $1 = 'x', 1::int8", &[Type::TEXT], &cols).name
        );
        assert_ne!(
            a.name,
            def("SELECT $1 = 'y', 1::int8", &[Type::TEXT], &cols).name
        );
        assert_ne!(
            a.name,
            def("SELECT $1 = 'x', 1::int8", &[Type::INT8], &cols).name
        );
        assert_ne!(
            a.name,
            def(
                "SELECT $1 = 'x', 1::int8",
                &[Type::TEXT],
                &[("ok", &Type::BOOL), ("seq", &Type::INT4)]
            )
            .name
        );
        assert_eq!(a.call, format!("SELECT * FROM {}($1)", a.name));
        // A statement that counts its own records: its call says so to the counter triggers.
        let counted = format!(
            "WITH w AS (SELECT 1), nc AS ({COUNTS_ITSELF} SELECT 2) SELECT $1 = 'x', 1::int8"
        );
        let c = def(&counted, &[Type::TEXT], &cols);
        assert_eq!(
            c.call,
            format!("SELECT * FROM {}($1) {COUNTS_ITSELF}", c.name)
        );
        assert!(a.create.starts_with(&format!(
            "CREATE FUNCTION {}(\"pg_catalog\".\"text\") RETURNS TABLE(\"ok\" \"pg_catalog\".\"bool\", \"seq\" \"pg_catalog\".\"int8\") LANGUAGE plpgsql",
            a.name
        )), "{}", a.create);
        assert!(
            a.create.contains("RETURN QUERY SELECT $1 = 'x', 1::int8;"),
            "{}",
            a.create
        );
        // Two columns of one name cannot be a function's result.
        assert!(Definition::new(
            "SELECT 1, 2",
            &[],
            [("a", &Type::INT4), ("a", &Type::INT4)].into_iter()
        )
        .is_none());
    }

    #[test]
    fn a_name_with_a_quote_cannot_be_a_column() {
        assert_eq!(quoted("seq").as_deref(), Some("\"seq\""));
        assert_eq!(quoted("?column?").as_deref(), Some("\"?column?\""));
        assert_eq!(quoted("a\"b"), None);
    }
}
