//! Integration tests of the HTTP service: a real server on 127.0.0.1:0 over a fresh SQLite
//! file per test, driven through a real socket. Tests that care about storage also run on a
//! fresh PostgreSQL database when `IDEM_TEST_PG` (an admin URL) is set; the server, the
//! databases and the typed HTTP helpers come from `idem_testkit::app`.

mod action_edges;
mod actions;
mod alerts;
mod audit;
mod auth;
mod claim;
mod console;
mod cost;
mod deploy;
mod drills;
mod effects;
mod errors;
mod fanout;
mod hostile;
mod intake;
mod loopback;
mod namespace;
mod observability;
mod openapi;
mod operator;
mod source_bodies;
mod standard_webhooks;
mod tokens;
mod worker;
