//! The store contract suite of idem: written once against the [`Store`] trait and run against
//! every backend.
//!
//! A backend's test binary implements [`Backend`] (a fresh empty database per test, more
//! handles onto the same database, cleanup) and expands [`crate::contract_suite!`], which generates
//! one named `#[tokio::test]` per case. The cases hold the store to the product contract
//! (`spec/API.md`): the claim table through a real store, exactly-one-winner under concurrency
//! from tasks and from separate handles, fencing tokens, lease expiry both lazily and through
//! the janitor, retention and tombstones, events, paging, namespace policy, alerts, API
//! tokens, durability across handles, and a proptest model that checks random operation
//! sequences against an independent restatement of the rules ([`model`]).
//!
//! Time never comes from the wall clock: every case drives a [`TestClock`] (or passes `now`
//! explicitly), so leases and retention are tested without sleeping.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use idem_core::{
    ClaimOutcome, ClaimReply, ClaimRequest, Clock, Key, LeaseId, Namespace, Op, OpError, Record,
    Reply, TestClock, Timestamp,
};
use idem_store::{
    ExecCtx, Executed, Ledger, LedgerError, NamespaceChange, NamespaceInfo, RecordWithEvents, Store,
};

pub mod action_cases;
pub mod cases;
pub mod cost_cases;
pub mod model;
pub mod outbox_cases;

/// A storage backend under test.
#[async_trait]
pub trait Backend: Send + Sync + Sized + 'static {
    /// `Err(why)` when the backend cannot be tested here (e.g. no database URL configured);
    /// every case then prints a skip line and passes.
    fn available() -> Result<(), String> {
        Ok(())
    }
    /// A fresh, empty database.
    async fn fresh() -> Self;
    /// Another handle (its own connections) onto the same database.
    async fn open(&self) -> Arc<dyn Store>;
    /// Removes the database; called after the case, also when it failed.
    async fn cleanup(&self);
    /// The per-namespace, per-state record counters that disagree with the records they
    /// count, one line each (see [`COUNTER_DRIFT_SQL`]); empty when they agree. Checked after
    /// every case that passed: the counters are kept in the transaction of every write to
    /// `records`, and a write path that missed them would make the gauges and the console lie
    /// for good. A backend without counters keeps the default.
    async fn counter_drift(&self) -> Vec<String> {
        Vec::new()
    }
}

/// Rows `(namespace, state, counted, stored)` where the counters (`namespace_counts`, summed
/// over its slots where a backend keeps several) disagree with `count(*)` of `records`. The
/// same text on SQLite and PostgreSQL.
pub const COUNTER_DRIFT_SQL: &str = "\
    SELECT COALESCE(c.namespace, r.namespace), COALESCE(c.state, r.state), \
           COALESCE(c.n, 0), COALESCE(r.n, 0) \
    FROM (SELECT namespace, state, CAST(sum(n) AS BIGINT) AS n FROM namespace_counts \
          GROUP BY namespace, state) c \
    FULL JOIN (SELECT namespace, state, count(*) AS n FROM records \
               GROUP BY namespace, state) r \
      ON c.namespace = r.namespace AND c.state = r.state \
    WHERE COALESCE(c.n, 0) <> COALESCE(r.n, 0)";

/// One line of [`Backend::counter_drift`].
pub fn drift_line(namespace: &str, state: &str, counted: i64, stored: i64) -> String {
    format!("{namespace}/{state}: counted {counted}, stored {stored}")
}

/// Longest a single case may run before it counts as hung.
pub const CASE_TIMEOUT: Duration = Duration::from_secs(180);

/// Runs one case against a fresh database of `B` and cleans up afterwards.
pub async fn run<B, F, Fut>(name: &str, case: F)
where
    B: Backend,
    F: FnOnce(Arc<B>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    if let Err(why) = B::available() {
        eprintln!("SKIPPED {name}: {why}");
        return;
    }
    let backend = Arc::new(B::fresh().await);
    let outcome = tokio::time::timeout(CASE_TIMEOUT, tokio::spawn(case(backend.clone()))).await;
    let drift = match outcome {
        Ok(Ok(())) => backend.counter_drift().await,
        _ => Vec::new(),
    };
    backend.cleanup().await;
    match outcome {
        Err(_) => panic!("{name}: timed out after {CASE_TIMEOUT:?}"),
        Ok(Err(join)) if join.is_panic() => std::panic::resume_unwind(join.into_panic()),
        Ok(Err(join)) => panic!("{name}: {join}"),
        Ok(Ok(())) => assert!(
            drift.is_empty(),
            "{name}: the record counters disagree with the records: {drift:?}"
        ),
    }
}

/// Expands to one `#[tokio::test]` per contract case for backend type `$backend`.
#[macro_export]
macro_rules! contract_suite {
    ($backend:ty) => {
        $crate::contract_suite!(@cases $backend;
            claim_of_unseen_key_acquires_and_is_durable,
            claim_of_failed_retryable_backs_off_then_resumes,
            claim_after_lease_expiry_reclaims_with_a_new_token,
            claim_after_lease_expiry_under_review_moves_to_needs_review,
            per_claim_lease_expiry_override_is_kept_on_the_record,
            claim_of_expired_prepared_resumes_with_the_saved_payload,
            claim_of_approved_prepared_resumes_and_increments_attempt,
            an_acquiring_claim_saves_its_draft_and_records_sent_in_its_step,
            a_draft_that_waits_for_approval_is_saved_and_nothing_is_recorded_as_sent,
            a_later_attempt_records_sent_in_its_step_or_leaves_it_to_the_caller,
            racing_claims_with_follow_ups_save_one_draft_and_record_one_send,
            second_claim_of_completed_key_replays_result,
            stored_json_keeps_its_member_order,
            claim_of_failed_permanent_replays_the_stored_error,
            different_fingerprint_conflicts_in_every_state,
            jcs_equal_payloads_do_not_conflict,
            claim_during_a_valid_lease_is_in_flight,
            claims_of_needs_review_and_awaiting_approval_are_refused,
            paused_namespace_refuses_claims_but_lets_work_land,
            daily_limit_limits_only_first_time_acquisitions,
            first_time_acquisitions_count_with_or_without_a_limit,
            concurrent_claims_from_tasks_yield_exactly_one_acquired,
            concurrent_claims_from_separate_handles_yield_exactly_one_acquired,
            concurrent_reclaims_of_an_expired_lease_yield_one_acquisition,
            concurrent_first_acquisitions_never_exceed_the_daily_limit,
            racing_first_acquisitions_count_those_made_without_a_limit,
            stale_token_writes_after_reclaim_are_lease_lost_and_recorded,
            made_up_tokens_are_lease_lost,
            late_completion_by_the_newest_holder_is_accepted,
            writes_after_the_fact_follow_the_rules,
            sweep_moves_expired_processing_to_review_under_review_policy,
            sweep_leaves_reclaim_leases_for_the_next_claim,
            stuck_processing_alerts_once_and_moves_under_review,
            tombstone_answers_completed_with_result_expired,
            tombstone_and_events_are_deleted_after_audit_retention,
            retention_never_deletes_processing_or_needs_review,
            events_record_every_transition_with_owner_attempt_and_correlation,
            operator_actions_are_recorded_with_who_and_why,
            list_pages_newest_first_with_cursor_and_state_filter,
            namespace_defaults_patch_and_pause,
            namespace_patch_refuses_bad_fields_and_changes_nothing,
            entering_review_queues_exactly_one_alert_per_record_reason_and_attempt,
            alert_outbox_delivery_lifecycle,
            alert_secret_is_stored_and_reaches_the_alert_sender,
            no_alerts_are_queued_without_an_alert_url,
            api_tokens_create_find_and_count,
            api_tokens_expire_list_revoke_and_touch,
            stats_count_states_and_oldest_processing,
            reopened_handle_sees_every_acknowledged_change,
            model_random_operation_sequences_agree_with_the_rules,
            racing_late_completion_and_reclaim_never_both_win,
            concurrent_sweeps_move_each_record_once,
            concurrent_alert_senders_never_get_the_same_alert,
            refused_bad_input_writes_nothing,
        );
        $crate::contract_suite!(@cost $backend;
            cost_is_recorded_on_events_and_summed_first_and_retry,
            fenced_completion_is_recorded_alerted_and_keeps_one_completion,
            review_clock_drives_review_age_and_recovery,
            namespace_stats_count_acquisitions_and_cost_over_24_hours,
        );
    };
    (@cost $backend:ty; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                $crate::contract::run::<$backend, _, _>(stringify!($case), |b| $crate::contract::cost_cases::$case(b)).await;
            }
        )*
    };
    (@cases $backend:ty; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                $crate::contract::run::<$backend, _, _>(stringify!($case), |b| $crate::contract::cases::$case(b)).await;
            }
        )*
    };
}

// ---------------------------------------------------------------- helpers for cases

/// 2026-06-22T10:00:00.000Z: every case starts its clock here.
pub const T0: i64 = 1_782_122_400_000;

pub const DAY_MS: i64 = 86_400_000;

/// One namespace on one store handle, with a test clock.
#[derive(Debug, Clone)]
pub struct H {
    pub store: Arc<dyn Store>,
    pub ledger: Ledger,
    pub clock: TestClock,
    pub ns: Namespace,
}

pub fn key(s: &str) -> Key {
    Key::try_from(s).expect("valid test key")
}

pub fn ns(s: &str) -> Namespace {
    Namespace::try_from(s).expect("valid test namespace")
}

impl H {
    /// A handle on a new store connection set, namespace `ns`, clock at [`T0`].
    pub async fn new<B: Backend>(b: &B, ns_name: &str) -> H {
        Self::on(b.open().await, ns_name, TestClock::new(Timestamp(T0)))
    }

    pub fn on(store: Arc<dyn Store>, ns_name: &str, clock: TestClock) -> H {
        H {
            ledger: Ledger::with_clock(store.clone(), Arc::new(clock.clone())),
            store,
            clock,
            ns: ns(ns_name),
        }
    }

    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    pub fn advance(&self, ms: i64) {
        self.clock.advance_ms(ms);
    }

    /// Runs `op` through the store with a random lease id, a fixed jitter (0.5) and `actor`.
    pub async fn exec(&self, k: &Key, op: Op, actor: Option<&str>) -> Executed {
        let ctx = ExecCtx {
            now: self.now(),
            lease_id: LeaseId::random(),
            jitter: 0.5,
            actor: actor.map(str::to_owned),
            traceparent: None,
            rider: None,
            report: None,
            then_sent: None,
            then_prepare: None,
        };
        self.store
            .execute(&self.ns, k, op, ctx)
            .await
            .unwrap_or_else(|e| panic!("store error on {k}: {e}"))
    }

    pub async fn claim_with(&self, k: &Key, req: ClaimRequest) -> ClaimReply {
        self.ledger
            .claim(&self.ns, k, req)
            .await
            .unwrap_or_else(|e| panic!("claim of {k} failed: {e}"))
    }

    pub async fn claim(&self, k: &Key) -> ClaimReply {
        self.claim_with(k, ClaimRequest::default()).await
    }

    /// Claims and expects `acquired`; returns the token string.
    pub async fn acquire(&self, k: &Key) -> String {
        let c = self.claim(k).await;
        assert_eq!(c.outcome, ClaimOutcome::Acquired, "claim of {k}: {c:?}");
        c.token.expect("acquired carries a token").secret()
    }

    pub async fn get(&self, k: &Key) -> RecordWithEvents {
        self.store
            .get(&self.ns, k)
            .await
            .unwrap_or_else(|e| panic!("get {k}: {e}"))
            .unwrap_or_else(|| panic!("no record for {k}"))
    }

    pub async fn rec(&self, k: &Key) -> Record {
        self.get(k).await.record
    }

    pub async fn patch(&self, patch: serde_json::Value) -> NamespaceInfo {
        self.store
            .update_namespace(&self.ns, NamespaceChange::Patch(patch), self.now())
            .await
            .unwrap_or_else(|e| panic!("patch namespace: {e}"))
    }

    pub async fn change(&self, change: NamespaceChange) -> NamespaceInfo {
        self.store
            .update_namespace(&self.ns, change, self.now())
            .await
            .unwrap_or_else(|e| panic!("update namespace: {e}"))
    }
}

/// The rules' refusal inside a ledger error; panics on a store failure.
pub fn op_err<T: std::fmt::Debug>(r: Result<T, LedgerError>) -> OpError {
    match r {
        Err(LedgerError::Op(e)) => e,
        Err(LedgerError::Store(e)) => panic!("store error where a refusal was expected: {e}"),
        Ok(v) => panic!("expected a refusal, got {v:?}"),
    }
}

/// The reply of an execution; panics on a refusal.
pub fn ok_reply(e: &Executed) -> &Reply {
    match &e.reply {
        Ok(r) => r,
        Err(err) => panic!("unexpected refusal {err:?}"),
    }
}
