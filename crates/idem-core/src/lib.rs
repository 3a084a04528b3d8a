//! The pure rules of idem.
//!
//! Everything that decides what happens to a ledger record lives here, as functions over
//! plain data: validated identifiers ([`Namespace`], [`Key`], [`Fingerprint`], [`Token`]),
//! the namespace [`Policy`], the [`Record`] and its [`Event`]s, and [`decide::apply`], the one
//! function that turns (existing record, operation, namespace context, now) into the record
//! to write, the events to append and the answer to give. Stores execute its output
//! atomically; they never decide. Nothing in this crate performs I/O or reads a clock.

pub mod classify;
pub mod decide;
pub mod derive;
pub mod effect;
pub mod egress;
pub mod fingerprint;
pub mod ids;
pub mod inputs;
pub mod jcs;
pub mod jsonsize;
pub mod policy;
pub mod record;
pub mod redact;
pub mod retention;
pub mod time;
pub mod webhook;

pub use classify::{classify, Class, FailSignal};
pub use decide::sanitize_message;
pub use decide::written_reply;
pub use decide::{
    apply, reports_effect, Acquired, ClaimOutcome, ClaimReply, ClaimRequest, CompleteRequest, Ctx,
    EffectReportRequest, EffectSentRequest, FailErrorInput, FailReply, FailRequest,
    HeartbeatRequest, Op, OpError, PrepareRequest, Reply, ResolveAction, ResolveRequest,
    RetryDecision, Tally, Transition, Write, FENCED_COMPLETION_NOTE,
};
pub use decide::{
    DeliveryOf, ForwardOutcome, ForwardReportRequest, ForwardRetry, ForwardStartRequest,
    IntakeReceiveRequest, IntakeReply, COLLISION_MESSAGE, FORWARD_OWNER, PAUSED_RECHECK_MS,
};
pub use effect::{Reconciled, RequestSummary, Verdict};
pub use egress::{AllowEntry, EgressPolicy};
pub use fingerprint::Fingerprint;
pub use ids::{mask_key, Key, LeaseId, Namespace, Token, ValidationError};
pub use inputs::needs_daily_count;
pub use jsonsize::{json_len_hint, to_text_sized};
pub use policy::{LeaseExpiry, Policy, PolicyError, RetryPolicy};
pub use record::{
    AlertDraft, Event, EventDraft, EventType, LastError, Record, ReviewReason, State,
};
pub use record::{AlertReason, PublicRecord};
pub use record::{AttemptCost, CostError, CostTotals, MAX_COST_TOKENS, MAX_COST_USD};
pub use redact::redact_db_url;
pub use retention::{retention_action, RetentionAction, RETAINED_STATES};
pub use time::{Clock, SystemClock, TestClock, Timestamp};
pub use webhook::AlertSecret;
