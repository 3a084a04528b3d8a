//! Processes under test: an `idem` command that cannot see the developer's idem settings, and
//! free loopback ports to serve on.
//!
//! It only builds commands and picks ports; it never runs anything by itself.

use std::net::TcpListener;
use std::process::Command;

/// Environment variables of idem that must not leak from the developer's shell into tests.
pub const IDEM_ENV: [&str; 8] = [
    "IDEM_URL",
    "IDEM_TOKEN",
    "IDEM_LEASE_TOKEN",
    "IDEM_DB",
    "IDEM_LISTEN",
    "IDEM_CONFIG",
    "IDEM_JANITOR_INTERVAL",
    "IDEM_LOG",
];

/// `program` with every variable of [`IDEM_ENV`] removed from its environment.
pub fn clean_command(program: &str) -> Command {
    let mut c = Command::new(program);
    for v in IDEM_ENV {
        c.env_remove(v);
    }
    c
}

/// A free loopback port (bound then released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}
