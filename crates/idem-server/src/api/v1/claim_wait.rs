//! Claim, and wait for the holder: the one claim-and-wait every claiming path runs
//! (`POST …/claim`, `POST …/effect`, and an action's call through the effect path). A claim
//! answered `in_flight` with a `wait_ms` polls the record read-only until the holder is done
//! or its lease expired, then claims again; when the wait ends with the key still held, the
//! answer carries the newest record seen and its lease's remaining time as `retry_after_ms`.
//!
//! It sits between the shared operation runner ([`super::shared`]) and the handlers, which
//! keep their own metrics, log line and answer. What it must never do: write anything while
//! it waits (one claim before, at most one after), or hold a graceful shutdown up.

use std::time::{Duration, Instant};

use idem::{ClaimOutcome, ClaimReply, ClaimRequest, Executed, Op, Record};

use super::shared::{claim_of, exec_then, FollowUps};
use crate::error::ApiResult;
use crate::input::NsKey;
use crate::state::AppState;

/// How often a waiting claim looks at the record.
const WAIT_POLL: Duration = Duration::from_millis(50);

/// Claims `req` under `nk`. An `in_flight` answer with `wait_ms` > 0 waits up to `wait_ms`
/// for the holder: claimed again once the holder is gone, else the answer is refreshed from
/// the newest record seen (its `record` and `retry_after_ms`).
pub(crate) async fn claim_and_wait(
    st: &AppState,
    nk: &NsKey,
    req: ClaimRequest,
    wait_ms: i64,
    then: FollowUps,
) -> ApiResult<(ClaimReply, Executed)> {
    let again = (wait_ms > 0).then(|| (req.clone(), then.clone()));
    let (mut reply, mut ex) = claim_of(exec_then(st, nk, Op::Claim(req), None, then).await?)?;
    if let (ClaimOutcome::InFlight, Some((req, then))) = (reply.outcome, again) {
        let deadline = Instant::now() + Duration::from_millis(wait_ms as u64);
        match wait_for_holder(st, nk, deadline).await? {
            WaitEnd::Changed => {
                (reply, ex) = claim_of(exec_then(st, nk, Op::Claim(req), None, then).await?)?;
            }
            WaitEnd::Still(Some(rec)) => {
                reply.retry_after_ms = Some(rec.lease_remaining_ms(st.ledger.now()));
                reply.record = Some(*rec);
            }
            WaitEnd::Still(None) => {}
        }
    }
    Ok((reply, ex))
}

/// How a wait for the holder ended.
enum WaitEnd {
    /// The holder finished or the lease expired: claim again.
    Changed,
    /// Deadline (or shutdown) reached; the newest record seen.
    Still(Option<Box<Record>>),
}

/// Polls the record read-only (no event per look) until the lease is no longer held.
async fn wait_for_holder(st: &AppState, nk: &NsKey, deadline: Instant) -> ApiResult<WaitEnd> {
    let mut shutdown = st.shutdown.clone();
    let mut last = None;
    loop {
        let now = Instant::now();
        if now >= deadline || *shutdown.borrow() {
            return Ok(WaitEnd::Still(last));
        }
        let nap = WAIT_POLL.min(deadline - now);
        tokio::select! {
            _ = tokio::time::sleep(nap) => {}
            _ = shutdown.changed() => return Ok(WaitEnd::Still(last)),
        }
        match st.ledger.store().get(&nk.ns, &nk.key).await? {
            None => return Ok(WaitEnd::Changed),
            Some(rw) if !rw.record.lease_valid(st.ledger.now()) => return Ok(WaitEnd::Changed),
            Some(rw) => last = Some(Box::new(rw.record)),
        }
    }
}
