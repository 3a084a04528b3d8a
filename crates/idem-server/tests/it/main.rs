//! Integration tests of the HTTP service: a real server on 127.0.0.1:0 over a fresh SQLite
//! file per test, driven through a real socket.

mod helpers;

mod alerts;
mod audit;
mod auth;
mod claim;
mod drills;
mod errors;
mod namespace;
mod observability;
mod operator;
mod worker;
