//! Plans kept behind a transaction pooler: idem's repeated statements carried by server-side
//! PL/pgSQL functions.
//!
//! Behind a transaction pooler every statement goes out unnamed (`conn.rs`), so PostgreSQL
//! parses and plans it on every call — for idem's large single-statement writes (the fresh
//! claim with its event, counter and statistics CTEs) that planning is most of the cost. A
//! PL/pgSQL function keeps the plans of its statements per server connection, and that cache
//! belongs to the server connection, not to a client session, so it survives the pooler
//! moving transactions between connections. So once a row-returning statement has answered a
//! few times, this module creates `idem_q_<hash>(idem_p idem_p_<hash>) RETURNS SETOF
//! idem_r_<hash>` whose body is `RETURN QUERY <the statement>` with its `$k` read as the fields
//! `idem_p.ak` of one argument (`pack`), and from then on sends `SELECT * FROM
//! idem_q_<hash>($1::idem_p_<hash>)` with the parameters packed into one row ([`Packed`]):
//! a trivial statement to plan, with one argument to parse and set up where the statement has
//! fifty-odd, the same rows back, in the same transaction. A
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

use bytes::{BufMut, BytesMut};
use deadpool_postgres::Pool;
use sha2::{Digest, Sha256};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{to_sql_checked, IsNull, ToSql, Type};
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
/// What every wrapper's row type's name starts with.
pub(crate) const ROW_PREFIX: &str = "idem_r_";
/// What every wrapper's parameter row type's name starts with.
pub(crate) const PARAM_PREFIX: &str = "idem_p_";
/// The name of a packed wrapper's one argument in its body.
const PACKED_ARG: &str = "idem_p";
/// The dollar quote around a function body; a statement containing it is never wrapped.
const QUOTE: &str = "$idem_q$";
/// The dollar quote around the block that makes a wrapper's row type.
const TYPE_QUOTE: &str = "$idem_t$";
/// Hashed into every wrapper's name: a function of an earlier shape (one with
/// `RETURNS TABLE`) is never called as one of this shape.
const SHAPE: &str = "setof-row-type, packed parameters\0";

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
    /// `SELECT * FROM idem_q_…($1::idem_p_…)` (or `($1, …, $n)`, not packed).
    pub call: String,
    params: Vec<Type>,
    /// The parameters go as one [`Packed`] value.
    pub packed: bool,
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
    let ours = |s: Option<&str>| {
        s.is_some_and(|s| {
            [PREFIX, PARAM_PREFIX, ROW_PREFIX]
                .iter()
                .any(|p| s.contains(p))
        })
    };
    // The function or its parameter row type is gone (42883, 42704), or its result no longer
    // matches the statement (42804).
    (*db.code() == SqlState::UNDEFINED_FUNCTION
        || *db.code() == SqlState::UNDEFINED_OBJECT
        || *db.code() == SqlState::DATATYPE_MISMATCH)
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
                    packed: def.packed,
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
    packed: bool,
}

/// Makes a row type unless it exists: one of this name is the same type, as the name is a
/// hash of its fields (its function was dropped, or another instance made it concurrently).
fn row_type_sql(name: &str, fields: &[String]) -> String {
    format!(
        "DO {TYPE_QUOTE} BEGIN CREATE TYPE {name} AS ({}); \
         EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END {TYPE_QUOTE}; ",
        fields.join(", ")
    )
}

/// `text` with each parameter reference `$k` (1 ≤ k ≤ `n`) read as the field `idem_p.ak` of
/// the packed argument. Quoted literals and identifiers and comments are copied as they are;
/// `None` for a text this reading cannot be sure of: a backslash (an escape string), a `$`
/// that is not a parameter (a dollar quote, an identifier holding `$`), a reference out of
/// range, an unterminated quote or comment.
fn pack(text: &str, n: usize) -> Option<String> {
    // An escape string (`E'…\''`) would end where the quote reading below does not.
    if text.contains('\\') {
        return None;
    }
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len() + 8 * n);
    let (mut i, mut copied) = (0, 0);
    while i < b.len() {
        match b[i] {
            q @ (b'\'' | b'"') => {
                i += 1;
                loop {
                    i += b.get(i..)?.iter().position(|&c| c == q)? + 1;
                    if b.get(i) != Some(&q) {
                        break;
                    }
                    i += 1;
                }
            }
            b'-' if b.get(i + 1) == Some(&b'-') => {
                i = b[i..]
                    .iter()
                    .position(|&c| c == b'\n')
                    .map_or(b.len(), |p| i + p);
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i = text.get(i + 2..)?.find("*/").map(|p| i + 2 + p + 2)?;
            }
            b'$' => {
                let digits = b[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
                let in_identifier = i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
                if digits == 0 || in_identifier {
                    return None;
                }
                let end = i + 1 + digits;
                let k: usize = text[i + 1..end].parse().ok()?;
                if k == 0 || k > n {
                    return None;
                }
                out.push_str(&text[copied..i]);
                out.push_str(PACKED_ARG);
                out.push_str(".a");
                out.push_str(&text[i + 1..end]);
                copied = end;
                i = end;
            }
            _ => i += 1,
        }
    }
    out.push_str(&text[copied..]);
    Some(out)
}

/// A call's parameters as one value of its wrapper's parameter row type, in the binary form
/// of a row (`record_recv`: the field count, then each field's type, length and bytes). Sent
/// with the type left to the server (`unknown`), which takes it from the cast in the call.
pub(crate) struct Packed<'a, 'p> {
    values: &'a Typed<'p>,
}

impl<'a, 'p> Packed<'a, 'p> {
    pub(crate) fn new(values: &'a Typed<'p>) -> Self {
        Packed { values }
    }
}

impl std::fmt::Debug for Packed<'_, '_> {
    // Never the values: they are payloads and secrets.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Packed({} parameters)", self.values.len())
    }
}

impl ToSql for Packed<'_, '_> {
    fn to_sql(
        &self,
        _ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        out.put_i32(i32::try_from(self.values.len())?);
        for (value, ty) in self.values {
            out.put_u32(ty.oid());
            let at = out.len();
            out.put_i32(0);
            let len = match value.to_sql_checked(ty, out)? {
                IsNull::Yes => -1,
                IsNull::No => i32::try_from(out.len() - at - 4)?,
            };
            out[at..at + 4].copy_from_slice(&len.to_be_bytes());
        }
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::UNKNOWN
    }

    to_sql_checked!();
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
        // The shape of the function (a row type of its own, below): a function of another
        // shape made by an older version is never taken for this one.
        h.update(SHAPE.as_bytes());
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
        let hash = hex::encode(h.finalize());
        let name = format!("{PREFIX}{}", &hash[..24]);
        let row_type = format!("{ROW_PREFIX}{}", &hash[..24]);
        let columns: Vec<String> = cols.iter().map(|(n, t)| format!("{n} {t}")).collect();
        // The statement's parameters arrive as one value of a row type of their own (fields
        // `a1`…`an`), read in the body as `idem_p.a1`…: PostgreSQL parses, plans and sets up one
        // argument per call instead of one per parameter (fifty-odd for a fresh claim).
        // A text the rewrite cannot read safely keeps one argument per parameter.
        let packed = if param_types.is_empty() {
            None
        } else {
            pack(text, param_types.len())
        };
        let param_type = format!("{PARAM_PREFIX}{}", &hash[..24]);
        // The result is a row type of its own, not `RETURNS TABLE(…)`: PostgreSQL then takes
        // the call's row description from its type cache, where for a table result it
        // rebuilds it from the function's argument arrays at every parse and executor start
        // (a fifth of what the call cost it). The types are made first, in the same
        // transaction as the function.
        let mut create = row_type_sql(&row_type, &columns);
        let (signature, body) = match &packed {
            Some(body) => {
                let fields: Vec<String> = params
                    .iter()
                    .enumerate()
                    .map(|(i, t)| format!("a{} {t}", i + 1))
                    .collect();
                create.push_str(&row_type_sql(&param_type, &fields));
                (format!("{PACKED_ARG} {param_type}"), body.as_str())
            }
            None => (params.join(", "), text),
        };
        create.push_str(&format!(
            "CREATE FUNCTION {name}({signature}) RETURNS SETOF {row_type} LANGUAGE plpgsql AS \
             {QUOTE}\n#variable_conflict use_column\nBEGIN\nRETURN QUERY {body};\nEND\n{QUOTE}"
        ));
        let args: Vec<String> = match packed {
            Some(_) => vec![format!("$1::{param_type}")],
            None => (1..=params.len()).map(|i| format!("${i}")).collect(),
        };
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
            packed: packed.is_some(),
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
        let param_type = a.name.replace(PREFIX, PARAM_PREFIX);
        assert!(a.packed);
        assert_eq!(
            a.call,
            format!("SELECT * FROM {}($1::{param_type})", a.name)
        );
        // A statement that counts its own records: its call says so to the counter triggers.
        let counted = format!(
            "WITH w AS (SELECT 1), nc AS ({COUNTS_ITSELF} SELECT 2) SELECT $1 = 'x', 1::int8"
        );
        let c = def(&counted, &[Type::TEXT], &cols);
        assert_eq!(
            c.call,
            format!(
                "SELECT * FROM {}($1::{}) {COUNTS_ITSELF}",
                c.name,
                c.name.replace(PREFIX, PARAM_PREFIX)
            )
        );
        let row_type = a.name.replace(PREFIX, ROW_PREFIX);
        assert_eq!(
            a.create,
            format!(
                "DO $idem_t$ BEGIN CREATE TYPE {row_type} AS (\"ok\" \"pg_catalog\".\"bool\", \"seq\" \"pg_catalog\".\"int8\"); \
                 EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $idem_t$; \
                 DO $idem_t$ BEGIN CREATE TYPE {param_type} AS (a1 \"pg_catalog\".\"text\"); \
                 EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $idem_t$; \
                 CREATE FUNCTION {}(idem_p {param_type}) RETURNS SETOF {row_type} LANGUAGE plpgsql AS \
                 $idem_q$\n#variable_conflict use_column\nBEGIN\nRETURN QUERY SELECT idem_p.a1 = 'x', 1::int8;\nEND\n$idem_q$",
                a.name
            )
        );
        // A text the rewrite cannot read safely keeps one argument per parameter.
        let e = def("SELECT $1 = E'\\x', 1::int8", &[Type::TEXT], &cols);
        assert!(!e.packed);
        assert_eq!(e.call, format!("SELECT * FROM {}($1)", e.name));
        assert!(e.create.contains(&format!(
            "CREATE FUNCTION {}(\"pg_catalog\".\"text\") RETURNS SETOF",
            e.name
        )));
        assert!(e
            .create
            .contains("RETURN QUERY SELECT $1 = E'\\x', 1::int8;"));
        assert!(!e.create.contains(PARAM_PREFIX));
        // No parameters: nothing to pack.
        let z = def("SELECT true, 1::int8", &[], &cols);
        assert!(!z.packed);
        assert_eq!(z.call, format!("SELECT * FROM {}()", z.name));
        // Two columns of one name cannot be a function's result.
        assert!(Definition::new(
            "SELECT 1, 2",
            &[],
            [("a", &Type::INT4), ("a", &Type::INT4)].into_iter()
        )
        .is_none());
    }

    #[test]
    fn parameters_are_read_as_fields_outside_quotes_and_comments() {
        assert_eq!(
            pack("SELECT $1, $2::BIGINT, $10 FROM t WHERE a = $2", 10).as_deref(),
            Some("SELECT idem_p.a1, idem_p.a2::BIGINT, idem_p.a10 FROM t WHERE a = idem_p.a2")
        );
        assert_eq!(
            pack(
                "SELECT '$1', 'it''s $2', \"$3\"\"x\", $1 /* $2 */ -- $3\n, $3",
                3
            )
            .as_deref(),
            Some("SELECT '$1', 'it''s $2', \"$3\"\"x\", idem_p.a1 /* $2 */ -- $3\n, idem_p.a3")
        );
        assert_eq!(pack("SELECT 1 -- $9", 1).as_deref(), Some("SELECT 1 -- $9"));
        assert_eq!(pack("SELECT 1", 1).as_deref(), Some("SELECT 1"));
        // What it cannot be sure of.
        for text in [
            "SELECT $2",
            "SELECT $0",
            "SELECT $$x$$",
            "SELECT $tag$x$tag$",
            "SELECT a$1 FROM t",
            "SELECT E'\\'' || $1",
            "SELECT 'open",
            "SELECT \"open",
            "SELECT /* open",
            "SELECT $",
        ] {
            assert_eq!(pack(text, 1), None, "{text}");
        }
    }

    /// A piece of statement text: a parameter reference, or something the reading must copy
    /// as it is.
    fn fragment() -> impl proptest::strategy::Strategy<Value = (String, Option<usize>)> {
        use proptest::prelude::*;
        prop_oneof![
            (1_usize..=12).prop_map(|k| (format!(" ${k}"), Some(k))),
            (1_usize..=12).prop_map(|k| (format!("(${k}::BIGINT)"), Some(k))),
            // Never starting with a digit, which would lengthen a reference before it.
            "([a-z_ ,()=*.;][a-z_ ,()=*.;0-9]{0,7})?".prop_map(|t| (t, None)),
            "[a-z $0-9]{0,6}".prop_map(|t| (format!("'{t}''{t}'"), None)),
            "[a-z $0-9]{0,6}".prop_map(|t| (format!("\"{t}\""), None)),
            "[a-z $0-9*/]{0,6}".prop_map(|t| (format!("/* {} */", t.replace("*/", "")), None)),
            "[a-z $0-9']{0,6}".prop_map(|t| (format!("-- {t}\n"), None)),
        ]
    }

    proptest::proptest! {
        /// Every reference is read as its field and nothing else changes: putting the
        /// references back gives the text again.
        #[test]
        fn packing_rewrites_exactly_the_references(
            parts in proptest::collection::vec(fragment(), 0..24)
        ) {
            let text: String = parts.iter().map(|(t, _)| t.as_str()).collect();
            let packed: String = parts
                .iter()
                .map(|(t, k)| match k {
                    Some(k) => t.replace(&format!("${k}"), &format!("idem_p.a{k}")),
                    None => t.clone(),
                })
                .collect();
            proptest::prop_assert_eq!(pack(&text, 12), Some(packed));
        }
    }

    #[test]
    fn packed_parameters_are_one_row_in_binary() {
        let (a, b, c): (i64, Option<&str>, &str) = (7, None, "hé");
        let typed: Vec<(&(dyn ToSql + Sync), Type)> =
            vec![(&a, Type::INT8), (&b, Type::TEXT), (&c, Type::TEXT)];
        let packed = Packed::new(&typed);
        assert_eq!(format!("{packed:?}"), "Packed(3 parameters)");
        let mut out = BytesMut::new();
        assert!(matches!(
            packed.to_sql_checked(&Type::UNKNOWN, &mut out),
            Ok(IsNull::No)
        ));
        let mut want: Vec<u8> = Vec::new();
        want.extend(3_i32.to_be_bytes());
        want.extend(20_u32.to_be_bytes());
        want.extend(8_i32.to_be_bytes());
        want.extend(7_i64.to_be_bytes());
        want.extend(25_u32.to_be_bytes());
        want.extend((-1_i32).to_be_bytes());
        want.extend(25_u32.to_be_bytes());
        want.extend(3_i32.to_be_bytes());
        want.extend("hé".as_bytes());
        assert_eq!(&out[..], &want[..]);
        // Only as the value of the call's one parameter, whose type the server decides.
        assert!(packed.to_sql_checked(&Type::TEXT, &mut out).is_err());
    }

    #[test]
    fn a_name_with_a_quote_cannot_be_a_column() {
        assert_eq!(quoted("seq").as_deref(), Some("\"seq\""));
        assert_eq!(quoted("?column?").as_deref(), Some("\"?column?\""));
        assert_eq!(quoted("a\"b"), None);
    }
}
