//! The pure rules of the webhook intake (`INTAKE.md`): which providers exist and how each
//! signs, verifying a request's signature on its raw bytes (constant-time, any of 1–4
//! secrets), reading each event's id and turning it into a ledger key, splitting batches.
//! [`sign`] is the providers' side of each scheme, for tests and benchmarks only.
//!
//! This crate owns decisions only. It must never do I/O, never log, and never put a secret,
//! a signature or a body byte into an error or a `Debug` string: a refusal says only
//! `invalid_signature` or `stale_signature`, never which secret or which byte failed.

pub mod fanout;
pub mod ids;
mod pointer;
pub mod provider;
pub mod sign;
pub mod source;
pub mod verify;

pub use ids::{
    held_key, key_for_event_id, read_events, slack_challenge, valid_pointer, EventIdRule,
    IncomingEvent,
};
pub use provider::{HmacAlgorithm, HmacEncoding, HmacScheme, HmacSigned, Provider};
pub use verify::{secret_usable, verify, Refusal, VerifyConfig};
