//! Time as integer milliseconds since the Unix epoch, and the [`Clock`] that supplies "now".
//!
//! Every rule takes `now` as an argument so that leases, backoff and retention are tested
//! without sleeping: production code passes [`SystemClock`], tests pass a [`TestClock`] they
//! move by hand.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize, Serializer};

/// Milliseconds since the Unix epoch (UTC).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(pub i64);

impl Timestamp {
    pub fn millis(self) -> i64 {
        self.0
    }
    pub fn plus_ms(self, ms: i64) -> Timestamp {
        Timestamp(self.0.saturating_add(ms))
    }
    /// RFC 3339 UTC with milliseconds, e.g. `2026-11-30T12:00:00.000Z`.
    pub fn to_rfc3339(self) -> String {
        match DateTime::<Utc>::from_timestamp_millis(self.0) {
            Some(dt) => dt.to_rfc3339_opts(SecondsFormat::Millis, true),
            None => String::from("1970-01-01T00:00:00.000Z"),
        }
    }
    /// The UTC day number (days since the epoch) this instant falls in.
    pub fn utc_day(self) -> i64 {
        self.0.div_euclid(86_400_000)
    }
    /// Milliseconds from this instant to the next UTC midnight (never 0).
    pub fn ms_to_next_utc_midnight(self) -> i64 {
        let next = (self.utc_day() + 1) * 86_400_000;
        next - self.0
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_rfc3339())
    }
}

/// A source of "now".
pub trait Clock: Send + Sync + std::fmt::Debug {
    fn now(&self) -> Timestamp;
}

/// The wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp(Utc::now().timestamp_millis())
    }
}

/// A clock that only moves when told to; clones share the same time.
#[derive(Debug, Clone)]
pub struct TestClock(Arc<AtomicI64>);

impl TestClock {
    pub fn new(start: Timestamp) -> Self {
        TestClock(Arc::new(AtomicI64::new(start.0)))
    }
    pub fn advance_ms(&self, ms: i64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
    pub fn set(&self, t: Timestamp) {
        self.0.store(t.0, Ordering::SeqCst);
    }
}

impl Clock for TestClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.0.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_has_millis_and_z() {
        assert_eq!(Timestamp(0).to_rfc3339(), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            Timestamp(1_700_000_000_123).to_rfc3339(),
            "2023-11-14T22:13:20.123Z"
        );
    }

    #[test]
    fn next_midnight_is_within_a_day() {
        let t = Timestamp(86_400_000 * 3 + 1000);
        assert_eq!(t.ms_to_next_utc_midnight(), 86_400_000 - 1000);
        assert_eq!(
            Timestamp(86_400_000 * 3).ms_to_next_utc_midnight(),
            86_400_000
        );
    }

    #[test]
    fn test_clock_moves_only_when_told() {
        let c = TestClock::new(Timestamp(10));
        let c2 = c.clone();
        c.advance_ms(5);
        assert_eq!(c2.now(), Timestamp(15));
    }
}
