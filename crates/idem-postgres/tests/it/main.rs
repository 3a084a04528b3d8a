//! Integration tests of the PostgreSQL store against a real server.
//!
//! The base URL comes from `IDEM_TEST_PG` (CI sets it); without it every test prints a skip
//! line and passes. Each test works in a fresh database `idem_t_<random>` that is dropped
//! afterwards. The outage test runs its own throw-away cluster and never touches the shared
//! one.

mod cache;
mod concurrency;
mod helpers;
mod janitor;
mod outage;
mod outbox;
mod pooler;
mod smoke;
mod tls;
