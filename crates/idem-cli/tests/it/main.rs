//! Integration tests of the `idem` binary: each test runs the real executable.
//!
//! Tests that need no server use a SQLite file in a temp dir (`idem run --db`); the others
//! start `idem serve` on a free loopback port with a fresh database (see [`helpers::Server`]).
//! The PostgreSQL tests run when `IDEM_TEST_PG` (an admin URL) is set, each in a fresh
//! database dropped afterwards.

mod action;
mod audit;
mod bench;
mod db_secrets;
mod derive;
mod diskfull;
mod effect;
mod faults;
mod helpers;
mod https;
mod intake;
mod ops;
mod postgres;
mod run_local;
mod server;
mod token;
mod traces;
