//! [`Ledger`]: the in-process API of idem over any [`Store`].

use std::sync::Arc;

use idem_core::{
    ClaimReply, ClaimRequest, Clock, CompleteRequest, FailReply, FailRequest, HeartbeatRequest,
    Key, Namespace, Op, OpError, PrepareRequest, Record, Reply, ResolveRequest, SystemClock,
    Timestamp,
};

use crate::{ExecCtx, Executed, ReportRider, Rider, Store, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// The rules refused the operation (lease lost, invalid transition, …).
    #[error(transparent)]
    Op(#[from] OpError),
    /// The store failed; nothing was acknowledged.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The idempotency ledger: claim before a side effect, report after it.
#[derive(Debug, Clone)]
pub struct Ledger {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
}

impl Ledger {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Ledger {
            store,
            clock: Arc::new(SystemClock),
        }
    }

    /// A ledger whose "now" comes from `clock` (tests move a `TestClock`).
    pub fn with_clock(store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> Self {
        Ledger { store, clock }
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// Runs any operation; `actor` names who performs operator actions.
    pub async fn execute(
        &self,
        ns: &Namespace,
        key: &Key,
        op: Op,
        actor: Option<String>,
    ) -> Result<Executed, StoreError> {
        self.execute_traced(ns, key, op, actor, None).await
    }

    /// [`Ledger::execute`] for a caller with a W3C `traceparent`: alerts the operation queues
    /// keep it, so their delivery continues the caller's trace.
    pub async fn execute_traced(
        &self,
        ns: &Namespace,
        key: &Key,
        op: Op,
        actor: Option<String>,
        traceparent: Option<String>,
    ) -> Result<Executed, StoreError> {
        self.execute_then(ns, key, op, actor, traceparent, None, None)
            .await
    }

    /// [`Ledger::execute_traced`] with follow-ups of an effect's or an action's claim
    /// ([`ExecCtx::then_prepare`], [`ExecCtx::then_sent`]), done in the claim's step where
    /// the store can.
    #[allow(clippy::too_many_arguments)]
    pub async fn execute_then(
        &self,
        ns: &Namespace,
        key: &Key,
        op: Op,
        actor: Option<String>,
        traceparent: Option<String>,
        then_prepare: Option<crate::ThenPrepare>,
        then_sent: Option<idem_core::RequestSummary>,
    ) -> Result<Executed, StoreError> {
        let mut ctx = ExecCtx::at(self.clock.now());
        ctx.actor = actor;
        ctx.traceparent = traceparent;
        ctx.then_prepare = then_prepare;
        ctx.then_sent = then_sent;
        self.store.execute(ns, key, op, ctx).await
    }

    /// [`Ledger::execute`] with rows to store if (and only if) this step creates the record:
    /// [`Executed::rider_stored`] says whether it did.
    pub async fn execute_riding(
        &self,
        ns: &Namespace,
        key: &Key,
        op: Op,
        rider: Rider,
    ) -> Result<Executed, StoreError> {
        let mut ctx = ExecCtx::at(self.clock.now());
        ctx.rider = Some(Box::new(rider));
        self.store.execute(ns, key, op, ctx).await
    }

    /// [`Ledger::execute`] of a forward report with the rows to store if (and only if) this
    /// step updates the record: [`Executed::rider_stored`] says whether it did.
    pub async fn execute_reporting(
        &self,
        ns: &Namespace,
        key: &Key,
        op: Op,
        report: ReportRider,
    ) -> Result<Executed, StoreError> {
        let mut ctx = ExecCtx::at(self.clock.now());
        ctx.report = Some(Box::new(report));
        self.store.execute(ns, key, op, ctx).await
    }

    async fn run(
        &self,
        ns: &Namespace,
        key: &Key,
        op: Op,
        actor: Option<String>,
    ) -> Result<Reply, LedgerError> {
        Ok(self.execute(ns, key, op, actor).await?.reply?)
    }

    /// "May I do this now?" — see the claim table of the contract.
    pub async fn claim(
        &self,
        ns: &Namespace,
        key: &Key,
        req: ClaimRequest,
    ) -> Result<ClaimReply, LedgerError> {
        match self.run(ns, key, Op::Claim(req), None).await? {
            Reply::Claim(c) => Ok(c),
            other => Err(unexpected(other)),
        }
    }

    pub async fn prepare(
        &self,
        ns: &Namespace,
        key: &Key,
        req: PrepareRequest,
    ) -> Result<Record, LedgerError> {
        record(self.run(ns, key, Op::Prepare(req), None).await?)
    }

    pub async fn heartbeat(
        &self,
        ns: &Namespace,
        key: &Key,
        req: HeartbeatRequest,
    ) -> Result<Record, LedgerError> {
        record(self.run(ns, key, Op::Heartbeat(req), None).await?)
    }

    pub async fn complete(
        &self,
        ns: &Namespace,
        key: &Key,
        req: CompleteRequest,
    ) -> Result<Record, LedgerError> {
        record(self.run(ns, key, Op::Complete(req), None).await?)
    }

    pub async fn fail(
        &self,
        ns: &Namespace,
        key: &Key,
        req: FailRequest,
    ) -> Result<FailReply, LedgerError> {
        match self.run(ns, key, Op::Fail(req), None).await? {
            Reply::Fail(f) => Ok(f),
            other => Err(unexpected(other)),
        }
    }

    pub async fn resolve(
        &self,
        ns: &Namespace,
        key: &Key,
        req: ResolveRequest,
        actor: Option<String>,
    ) -> Result<Record, LedgerError> {
        record(self.run(ns, key, Op::Resolve(req), actor).await?)
    }

    pub async fn approve(
        &self,
        ns: &Namespace,
        key: &Key,
        note: Option<String>,
        actor: Option<String>,
    ) -> Result<Record, LedgerError> {
        record(self.run(ns, key, Op::Approve { note }, actor).await?)
    }

    pub async fn reject(
        &self,
        ns: &Namespace,
        key: &Key,
        note: Option<String>,
        actor: Option<String>,
    ) -> Result<Record, LedgerError> {
        record(self.run(ns, key, Op::Reject { note }, actor).await?)
    }
}

fn record(reply: Reply) -> Result<Record, LedgerError> {
    match reply {
        Reply::Record(r) => Ok(r),
        Reply::Fail(f) => Ok(f.record),
        other => Err(unexpected(other)),
    }
}

fn unexpected(reply: Reply) -> LedgerError {
    LedgerError::Store(StoreError::Internal(format!(
        "unexpected reply kind: {reply:?}"
    )))
}
