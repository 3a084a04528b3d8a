//! Integration tests of the SQLite store: real files in a temp dir, driven through `Ledger`.
//! The full store contract suite lives in `idem-testkit` (`idem_testkit::contract`); these
//! focus on what is specific to this backend (group commit, several stores on one file, retention SQL, crash safety).

mod crash;
mod group_commit;
mod helpers;
mod janitor;
mod smoke;
