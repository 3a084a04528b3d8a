//! The test kit of idem: the plumbing every crate's tests share, written once.
//!
//! It owns a fresh PostgreSQL database per test ([`pg::PgDb`], created on the server named by
//! `IDEM_TEST_PG` and dropped afterwards), a private throw-away PostgreSQL cluster that outage
//! tests may stop and start ([`cluster::Cluster`]), clean `idem` processes on free ports
//! ([`process`]), a real server on port 0 with typed HTTP helpers ([`app`], feature `server`),
//! the store contract suite run against every backend ([`contract`]), and webhook signatures
//! made by the providers' official libraries ([`signers`]).
//!
//! It is test code only: it never ships in a binary, and nothing in it may decide product
//! behaviour. Helpers panic with a message on set-up failures (a test that cannot set up must
//! fail loudly), and skip with a printed line, never silently, when `IDEM_TEST_PG` is unset.

#[cfg(feature = "server")]
pub mod app;
pub mod cluster;
pub mod contract;
pub mod pg;
pub mod process;
pub mod signers;
