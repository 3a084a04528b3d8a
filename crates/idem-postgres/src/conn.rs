//! How statements reach PostgreSQL: through a connection that knows whether a pooler sits in
//! front of the database.
//!
//! Directly connected (`pooler=none`, the default), every statement is a named prepared
//! statement cached per connection: parsed and planned once, then one Bind/Execute round trip
//! per call. Behind a transaction pooler (`pooler=transaction` in the URL: PgBouncer in
//! transaction mode, Supabase's and Neon's pooled endpoints, RDS Proxy) consecutive
//! transactions of one client connection run on different server connections, so a statement
//! prepared in one is unknown in the next ("prepared statement \"s32\" does not exist"), and
//! one left behind on a server connection would be found by another client that uses the same
//! name — tokio-postgres names them `s1`, `s2`, … in every process, so two idem instances
//! behind one pooler would run each other's statements. There every statement goes out
//! unnamed (Parse, Bind, Describe, Execute, Sync in one message train, so still one round
//! trip), with its parameter types taken from the Rust values, and nothing outlives the
//! transaction that sent it. A statement that keeps answering is then sent as a call of a
//! server-side function that carries it (`wrap.rs`), so its plan is kept after all. A
//! transaction pooler that carries named statements itself (PgBouncer ≥ 1.21 with
//! `max_prepared_statements`, which 1.22 turned on by default) prepares them on whichever
//! server connection a transaction gets, under names of its own: idem finds that out at start
//! (`connect.rs`) and then uses named statements as when connected directly
//! (`statements=named|unnamed` in the URL decides instead of the check).
//!
//! [`Conn`] and [`Tx`] are the only way this crate talks to PostgreSQL: neither hands out the
//! driver's client, so no statement can bypass the mode.

use std::sync::Arc;

use bytes::BytesMut;
use deadpool_postgres::{Client, Transaction};
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Error, Row, Statement};

use crate::wrap::{self, Entry, Wrappers};

/// What sits between idem and PostgreSQL, from the URL parameter `pooler`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pooler {
    /// A direct connection (or a proxy that keeps one server connection per client
    /// connection): named prepared statements, startup `options` for the timeouts.
    #[default]
    None,
    /// A session pooler (PgBouncer `pool_mode = session`, Supabase's session pooler): one
    /// server connection per client connection, but startup `options` may be dropped, so idem
    /// sends none. Named prepared statements are kept.
    Session,
    /// A transaction pooler: only what is sent inside one transaction (or one autocommit
    /// statement) may rely on the server connection; no startup `options`. Named statements
    /// only if the pooler carries them from one server connection to the next (PgBouncer ≥
    /// 1.21 with `max_prepared_statements`), else unnamed ones.
    Transaction { statements: Statements },
}

/// Behind a transaction pooler, how statements go out (URL parameter `statements`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Statements {
    /// Named if the check at start finds the pooler carrying them, else unnamed (the default).
    #[default]
    Auto,
    /// Named; the store refuses to start if the check finds the pooler not carrying them.
    Named,
    /// Unnamed, whatever the pooler can do.
    Unnamed,
}

impl Pooler {
    /// Parses the value of the `pooler` URL parameter.
    pub fn parse(v: &str) -> Result<Pooler, String> {
        match v {
            "none" | "" => Ok(Pooler::None),
            "session" => Ok(Pooler::Session),
            "transaction" => Ok(Pooler::Transaction {
                statements: Statements::Auto,
            }),
            other => Err(format!(
                "pooler={other} is not one of none, session, transaction"
            )),
        }
    }

    /// Whether startup `options` (statement and idle-in-transaction timeouts) are sent.
    pub(crate) fn sends_options(self) -> bool {
        self == Pooler::None
    }

    /// How statements go out before the check at start, and after it unless it finds a
    /// transaction pooler carrying named statements (`Statements::Auto`).
    pub(crate) fn mode(self) -> Mode {
        match self {
            Pooler::None
            | Pooler::Session
            | Pooler::Transaction {
                statements: Statements::Named,
            } => Mode::Prepared,
            Pooler::Transaction {
                statements: Statements::Auto | Statements::Unnamed,
            } => Mode::Unnamed,
        }
    }

    /// Takes `pooler=…` and `statements=…` out of a URL's query string (tokio-postgres would
    /// refuse the unknown parameters), returning the URL without them. A URL without `pooler`
    /// is direct. `statements` (`auto`, the default, `named` or `unnamed`) is only for
    /// `pooler=transaction`: directly and behind a session pooler statements are always named.
    pub fn split_url(url: &str) -> Result<(String, Pooler), String> {
        let Some((base, query)) = url.split_once('?') else {
            return Ok((url.to_owned(), Pooler::None));
        };
        let mut pooler = Pooler::None;
        let mut statements = None;
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("pooler", v)) => pooler = Pooler::parse(v)?,
                Some(("statements", v)) => {
                    statements = Some(match v {
                        "auto" => Statements::Auto,
                        "named" => Statements::Named,
                        "unnamed" => Statements::Unnamed,
                        other => {
                            return Err(format!(
                                "statements={other} is not one of auto, named, unnamed"
                            ))
                        }
                    })
                }
                None if pair == "pooler" || pair == "statements" => {
                    return Err(format!("{pair} needs a value"))
                }
                _ => kept.push(pair),
            }
        }
        match (pooler, statements) {
            (_, None) => {}
            (Pooler::Transaction { .. }, Some(statements)) => {
                pooler = Pooler::Transaction { statements }
            }
            (_, Some(_)) => {
                return Err(
                    "statements=… is only for pooler=transaction (directly and behind \
                            a session pooler statements are always named)"
                        .into(),
                )
            }
        }
        let url = if kept.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        Ok((url, pooler))
    }
}

/// `url` with its database name replaced by `db` (the query string, if any, is kept): the
/// URL of a scratch database beside the one an admin URL names.
pub fn with_database(url: &str, db: &str) -> String {
    let (main, query) = match url.split_once('?') {
        Some((m, q)) => (m, format!("?{q}")),
        None => (url, String::new()),
    };
    let after_scheme = main.find("://").map_or(0, |i| i + 3);
    let host_end = main[after_scheme..]
        .find('/')
        .map_or(main.len(), |i| after_scheme + i);
    format!("{}/{db}{query}", &main[..host_end])
}

/// How a statement is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Named, prepared once per connection (deadpool's statement cache).
    Prepared,
    /// Unnamed, parsed with every call; parameter types from the values ([`typed`]).
    Unnamed,
}

/// A statement ready to run: prepared on this connection, or text to send unnamed (or as a
/// call of its wrapper, once it has one).
pub(crate) enum Stmt {
    Prepared(Statement),
    Unnamed(Arc<Entry>),
}

/// What the query methods accept: a [`Stmt`] or statement text.
pub(crate) trait Sql {
    fn sql(&self) -> SqlRef<'_>;
}

pub(crate) enum SqlRef<'a> {
    Prepared(&'a Statement),
    Text(&'a str),
    Unnamed(&'a Arc<Entry>),
}

impl Sql for Stmt {
    fn sql(&self) -> SqlRef<'_> {
        match self {
            Stmt::Prepared(s) => SqlRef::Prepared(s),
            Stmt::Unnamed(e) => SqlRef::Unnamed(e),
        }
    }
}
impl Sql for str {
    fn sql(&self) -> SqlRef<'_> {
        SqlRef::Text(self)
    }
}
impl Sql for String {
    fn sql(&self) -> SqlRef<'_> {
        SqlRef::Text(self)
    }
}

/// The PostgreSQL types a parameter is tried against, in order. Every Rust type idem binds
/// accepts exactly one of them (`&str`/`String` → TEXT, `i64` → INT8, `i32` → INT4, `bool`,
/// `Vec<u8>` → BYTEA, and arrays of those); `Option<T>` answers like `T` even when `None`.
const CANDIDATES: [Type; 12] = [
    Type::TEXT,
    Type::INT8,
    Type::INT4,
    Type::BOOL,
    Type::BYTEA,
    Type::INT2,
    Type::FLOAT8,
    Type::TEXT_ARRAY,
    Type::INT8_ARRAY,
    Type::INT4_ARRAY,
    Type::BOOL_ARRAY,
    Type::BYTEA_ARRAY,
];

/// Each parameter with the type it is sent as. The type is what the value's `ToSql` accepts
/// (its encoding is checked against it); a value none of [`CANDIDATES`] fits is sent as TEXT,
/// and the driver then refuses it with its own "cannot convert" error before anything is sent.
pub(crate) fn typed<'p>(params: &[&'p (dyn ToSql + Sync)]) -> Vec<(&'p (dyn ToSql + Sync), Type)> {
    let mut scratch = BytesMut::new();
    params
        .iter()
        .map(|p| {
            let ty = CANDIDATES
                .iter()
                .find(|ty| {
                    scratch.clear();
                    p.to_sql_checked(ty, &mut scratch).is_ok()
                })
                .cloned()
                .unwrap_or(Type::TEXT);
            (*p, ty)
        })
        .collect()
}

/// The first row of an answer, whatever the method returned.
macro_rules! first_row {
    (query, $a:expr) => {
        $a.first()
    };
    (query_one, $a:expr) => {
        Some(&$a)
    };
    (query_opt, $a:expr) => {
        $a.as_ref()
    };
}

/// A row-returning call of an unnamed statement: as the call of its wrapper when it has one
/// for these parameter types (a wrapper found gone or stale is forgotten, and its error is a
/// retry), else as text, the answer counting towards wrapping it (`wrap.rs`).
macro_rules! unnamed {
    ($self:ident, $e:ident, $params:ident, $typed_method:ident, $kind:ident) => {{
        let typed = typed($params);
        match $e.ready(&typed) {
            Some(w) => {
                let packed = wrap::Packed::new(&typed);
                let one = [(&packed as &(dyn ToSql + Sync), Type::UNKNOWN)];
                let args: &[(&(dyn ToSql + Sync), Type)] = if w.packed { &one } else { &typed };
                let answer = $self.inner.$typed_method(&w.call, args).await;
                if let Err(err) = &answer {
                    if wrap::is_stale_wrapper(err) {
                        $e.forget();
                    }
                }
                answer
            }
            None => {
                let answer = $self.inner.$typed_method($e.text(), &typed).await?;
                $self.learned($e, &typed, first_row!($kind, answer));
                Ok(answer)
            }
        }
    }};
}

/// The same methods on a connection and on a transaction.
macro_rules! statement_methods {
    () => {
        pub(crate) async fn query<S: Sql + ?Sized>(
            &self,
            s: &S,
            params: &[&(dyn ToSql + Sync)],
        ) -> Result<Vec<Row>, Error> {
            match (s.sql(), self.mode) {
                (SqlRef::Prepared(st), _) => self.inner.query(st, params).await,
                (SqlRef::Unnamed(e), _) => unnamed!(self, e, params, query_typed, query),
                (SqlRef::Text(t), Mode::Unnamed) => self.inner.query_typed(t, &typed(params)).await,
                (SqlRef::Text(t), Mode::Prepared) => {
                    let st = self.inner.prepare_cached(t).await?;
                    self.inner.query(&st, params).await
                }
            }
        }

        pub(crate) async fn query_one<S: Sql + ?Sized>(
            &self,
            s: &S,
            params: &[&(dyn ToSql + Sync)],
        ) -> Result<Row, Error> {
            match (s.sql(), self.mode) {
                (SqlRef::Prepared(st), _) => self.inner.query_one(st, params).await,
                (SqlRef::Unnamed(e), _) => unnamed!(self, e, params, query_typed_one, query_one),
                (SqlRef::Text(t), Mode::Unnamed) => {
                    self.inner.query_typed_one(t, &typed(params)).await
                }
                (SqlRef::Text(t), Mode::Prepared) => {
                    let st = self.inner.prepare_cached(t).await?;
                    self.inner.query_one(&st, params).await
                }
            }
        }

        pub(crate) async fn query_opt<S: Sql + ?Sized>(
            &self,
            s: &S,
            params: &[&(dyn ToSql + Sync)],
        ) -> Result<Option<Row>, Error> {
            match (s.sql(), self.mode) {
                (SqlRef::Prepared(st), _) => self.inner.query_opt(st, params).await,
                (SqlRef::Unnamed(e), _) => unnamed!(self, e, params, query_typed_opt, query_opt),
                (SqlRef::Text(t), Mode::Unnamed) => {
                    self.inner.query_typed_opt(t, &typed(params)).await
                }
                (SqlRef::Text(t), Mode::Prepared) => {
                    let st = self.inner.prepare_cached(t).await?;
                    self.inner.query_opt(&st, params).await
                }
            }
        }

        /// Runs a statement; the number of rows it wrote.
        pub(crate) async fn execute<S: Sql + ?Sized>(
            &self,
            s: &S,
            params: &[&(dyn ToSql + Sync)],
        ) -> Result<u64, Error> {
            match (s.sql(), self.mode) {
                (SqlRef::Prepared(st), _) => self.inner.execute(st, params).await,
                // Not wrapped: a function cannot answer a row count for every kind of
                // statement (one with `RETURNING` would need a destination for its rows).
                (SqlRef::Unnamed(e), _) => self.inner.execute_typed(e.text(), &typed(params)).await,
                (SqlRef::Text(t), Mode::Unnamed) => {
                    self.inner.execute_typed(t, &typed(params)).await
                }
                (SqlRef::Text(t), Mode::Prepared) => {
                    let st = self.inner.prepare_cached(t).await?;
                    self.inner.execute(&st, params).await
                }
            }
        }

        /// Counts a row-returning unnamed call towards wrapping its statement.
        fn learned(
            &self,
            e: &Arc<Entry>,
            typed: &[(&(dyn ToSql + Sync), Type)],
            row: Option<&Row>,
        ) {
            if let (Some(w), Some(row)) = (&self.wrap, row) {
                w.learned(e, typed, row.columns());
            }
        }

        /// Runs parameterless statements over the simple query protocol (never prepared).
        pub(crate) async fn batch_execute(&self, sql: &str) -> Result<(), Error> {
            self.inner.batch_execute(sql).await
        }
    };
}

/// A pooled connection, the statement mode of its store and, behind a transaction pooler,
/// the store's statement wrappers.
pub(crate) struct Conn {
    inner: Client,
    mode: Mode,
    wrap: Option<Arc<Wrappers>>,
}

impl Conn {
    pub(crate) fn new(inner: Client, mode: Mode, wrap: Option<Arc<Wrappers>>) -> Self {
        Conn { inner, mode, wrap }
    }

    statement_methods!();

    /// Prepares `sql` on this connection (cached), or keeps its text to send unnamed.
    pub(crate) async fn prepare_cached(&self, sql: &str) -> Result<Stmt, Error> {
        match self.mode {
            Mode::Prepared => Ok(Stmt::Prepared(self.inner.prepare_cached(sql).await?)),
            Mode::Unnamed => Ok(Stmt::Unnamed(match &self.wrap {
                Some(w) => w.entry(sql),
                None => Entry::unwrapped(sql),
            })),
        }
    }

    pub(crate) async fn transaction(&mut self) -> Result<Tx<'_>, Error> {
        Ok(Tx {
            inner: self.inner.transaction().await?,
            mode: self.mode,
            wrap: self.wrap.clone(),
        })
    }
}

/// A transaction on a [`Conn`]; rolled back when dropped without [`Tx::commit`].
pub(crate) struct Tx<'c> {
    inner: Transaction<'c>,
    mode: Mode,
    wrap: Option<Arc<Wrappers>>,
}

impl Tx<'_> {
    statement_methods!();

    pub(crate) async fn commit(self) -> Result<(), Error> {
        self.inner.commit().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scratch_database_url_keeps_host_and_parameters() {
        assert_eq!(
            with_database("postgres://u@h:5432/postgres?sslmode=require", "t1"),
            "postgres://u@h:5432/t1?sslmode=require"
        );
        assert_eq!(with_database("postgres://h", "t1"), "postgres://h/t1");
    }

    #[test]
    fn the_pooler_parameter_is_taken_out_of_the_url() {
        let (url, p) = Pooler::split_url(
            "postgres://u:p@pool:6432/idem?sslmode=require&pooler=transaction&application_name=x",
        )
        .expect("ok");
        assert_eq!(
            (url.as_str(), p),
            (
                "postgres://u:p@pool:6432/idem?sslmode=require&application_name=x",
                Pooler::Transaction {
                    statements: Statements::Auto
                }
            )
        );
        let (url, p) = Pooler::split_url("postgres://u@db/idem?pooler=session").expect("ok");
        assert_eq!((url.as_str(), p), ("postgres://u@db/idem", Pooler::Session));
        let (url, p) = Pooler::split_url("postgres://u@a:5432,b:5432/idem").expect("ok");
        assert_eq!(
            (url.as_str(), p),
            ("postgres://u@a:5432,b:5432/idem", Pooler::None)
        );
        // `statements` goes with a transaction pooler, in either order.
        for (url, statements) in [
            (
                "postgres://u@pool/idem?pooler=transaction",
                Statements::Auto,
            ),
            (
                "postgres://u@pool/idem?pooler=transaction&statements=auto",
                Statements::Auto,
            ),
            (
                "postgres://u@pool/idem?pooler=transaction&statements=named",
                Statements::Named,
            ),
            (
                "postgres://u@pool/idem?statements=named&pooler=transaction",
                Statements::Named,
            ),
            (
                "postgres://u@pool/idem?pooler=transaction&statements=unnamed",
                Statements::Unnamed,
            ),
        ] {
            let (rest, p) = Pooler::split_url(url).expect("ok");
            assert_eq!(
                (rest.as_str(), p),
                ("postgres://u@pool/idem", Pooler::Transaction { statements }),
                "{url}"
            );
        }
        for bad in [
            "postgres://u@db/idem?pooler=statement",
            "postgres://u@db/idem?pooler",
            "postgres://u@db/idem?pooler=transaction&statements",
            "postgres://u@db/idem?pooler=transaction&statements=prepared",
            "postgres://u@db/idem?statements=named",
            "postgres://u@db/idem?pooler=session&statements=unnamed",
            "postgres://u@db/idem?pooler=none&statements=named",
        ] {
            assert!(Pooler::split_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn only_a_transaction_pooler_gives_up_named_statements_unless_told_and_any_pooler_the_options()
    {
        assert_eq!(Pooler::None.mode(), Mode::Prepared);
        assert_eq!(Pooler::Session.mode(), Mode::Prepared);
        for (statements, mode) in [
            (Statements::Auto, Mode::Unnamed),
            (Statements::Unnamed, Mode::Unnamed),
            (Statements::Named, Mode::Prepared),
        ] {
            assert_eq!(Pooler::Transaction { statements }.mode(), mode);
            assert!(!Pooler::Transaction { statements }.sends_options());
        }
        assert!(Pooler::None.sends_options());
        assert!(!Pooler::Session.sends_options());
    }

    #[test]
    fn parameter_types_come_from_the_values_none_included() {
        let s = String::from("x");
        let none_i64: Option<i64> = None;
        let none_text: Option<&str> = None;
        let bytes: Vec<u8> = vec![1, 2];
        let names: Vec<String> = vec!["a".into()];
        let params: [&(dyn ToSql + Sync); 9] = [
            &"a", &s, &7i64, &7i32, &true, &none_i64, &none_text, &bytes, &names,
        ];
        let types: Vec<Type> = typed(&params).into_iter().map(|(_, t)| t).collect();
        assert_eq!(
            types,
            [
                Type::TEXT,
                Type::TEXT,
                Type::INT8,
                Type::INT4,
                Type::BOOL,
                Type::INT8,
                Type::TEXT,
                Type::BYTEA,
                Type::TEXT_ARRAY
            ]
        );
    }
}
