//! The drills: one table row each (name, expectation, expected effects, the namespace policy,
//! the story), and the stories, each a few steps of [`Play`].
//!
//! A story only plays on its own namespace and key through its [`Play`]; it must never reach
//! another namespace, and it never decides the effect count check (the report does).

use std::time::Duration;

use serde_json::{json, Value};

use crate::alert::AlertSink;
use crate::play::{outcome, token, Play, SHORT_LEASE_MS};
use crate::Api;

/// One drill of the table.
pub struct Drill {
    pub name: &'static str,
    pub expectation: &'static str,
    pub expected_effects: u64,
    pub(crate) policy: Policy,
    pub(crate) story: Story,
}

/// The namespace policy a drill needs (patched before the story starts).
#[derive(Clone, Copy)]
pub(crate) enum Policy {
    /// The server's defaults.
    Default,
    /// A short lease with this `lease_expiry`.
    ShortLease(&'static str),
    /// Quick retries.
    FastRetry,
    /// A budget of three attempts, quick retries.
    ThreeAttempts,
}

impl Policy {
    pub(crate) fn json(self) -> Value {
        match self {
            Policy::Default => json!({}),
            Policy::ShortLease(expiry) => {
                json!({"lease_ms": SHORT_LEASE_MS, "lease_expiry": expiry})
            }
            Policy::FastRetry => json!({"retry": {"base_ms": 10, "max_ms": 50}}),
            Policy::ThreeAttempts => {
                json!({"retry": {"max_attempts": 3, "base_ms": 10, "max_ms": 20}})
            }
        }
    }
}

/// The story a drill plays.
#[derive(Clone, Copy)]
pub(crate) enum Story {
    SamePayloadTwice,
    ConcurrentDuplicates,
    TimeoutAfterCommit,
    FailureBeforeWrite,
    LeaseHolderDiesReclaim,
    LeaseHolderDiesReview,
    DifferentPayload,
    StaleTokenAfterReclaim,
    RetryBudgetExhausted,
    PausedNamespace,
    ReplayOldExecution,
    ZombieAfterReclaim,
}

const fn drill(
    name: &'static str,
    expectation: &'static str,
    expected_effects: u64,
    policy: Policy,
    story: Story,
) -> Drill {
    Drill {
        name,
        expectation,
        expected_effects,
        policy,
        story,
    }
}

/// Every drill, in the order they run.
#[rustfmt::skip]
pub const DRILLS: [Drill; 12] = [
    drill("same-payload-twice", "2nd delivery replays `completed`", 1,
        Policy::Default, Story::SamePayloadTwice),
    drill("concurrent-duplicates", "50 concurrent claims: exactly 1 acquired", 1,
        Policy::Default, Story::ConcurrentDuplicates),
    drill("timeout-after-commit", "timeout after commit → needs_review, no retry", 1,
        Policy::Default, Story::TimeoutAfterCommit),
    drill("failure-before-write", "sent:false → retry → completed on attempt 2", 1,
        Policy::FastRetry, Story::FailureBeforeWrite),
    drill("lease-holder-dies-reclaim", "reclaim: attempt 2 resumes, old token fenced", 1,
        Policy::ShortLease("reclaim"), Story::LeaseHolderDiesReclaim),
    drill("lease-holder-dies-review", "review: expired lease → needs_review", 0,
        Policy::ShortLease("review"), Story::LeaseHolderDiesReview),
    drill("different-payload", "same key, other payload → conflict", 1,
        Policy::Default, Story::DifferentPayload),
    drill("stale-token-after-reclaim", "slow worker after reclaim → lease_lost", 1,
        Policy::ShortLease("reclaim"), Story::StaleTokenAfterReclaim),
    drill("retry-budget-exhausted", "3 retryable failures → needs_review", 0,
        Policy::ThreeAttempts, Story::RetryBudgetExhausted),
    drill("paused-namespace", "paused → 503 paused; resume → runs once", 1,
        Policy::Default, Story::PausedNamespace),
    drill("replay-old-execution", "old execution re-run replays, 0 new effects", 1,
        Policy::Default, Story::ReplayOldExecution),
    // The zombie's effect happened outside: idem cannot undo it, only make it seen.
    drill("zombie-after-reclaim",
        "worker completes after reclaim → 1 completion kept, fenced_completion alerted + counted",
        2, Policy::ShortLease("reclaim"), Story::ZombieAfterReclaim),
];

impl Story {
    pub(crate) async fn play(self, p: &mut Play<'_>) -> Result<(), String> {
        match self {
            Story::SamePayloadTwice => same_payload_twice(p).await,
            Story::ConcurrentDuplicates => concurrent_duplicates(p).await,
            Story::TimeoutAfterCommit => timeout_after_commit(p).await,
            Story::FailureBeforeWrite => failure_before_write(p).await,
            Story::LeaseHolderDiesReclaim => lease_holder_dies_reclaim(p).await,
            Story::LeaseHolderDiesReview => lease_holder_dies_review(p).await,
            Story::DifferentPayload => different_payload(p).await,
            Story::StaleTokenAfterReclaim => stale_token_after_reclaim(p).await,
            Story::RetryBudgetExhausted => retry_budget_exhausted(p).await,
            Story::PausedNamespace => paused_namespace(p).await,
            Story::ReplayOldExecution => replay_old_execution(p).await,
            Story::ZombieAfterReclaim => zombie_after_reclaim(p).await,
        }
    }
}

async fn same_payload_twice(p: &mut Play<'_>) -> Result<(), String> {
    let a = p.claim_expecting("1st claim", "acquired").await?;
    p.effect_and_complete(&a, "ch_1").await?;
    let b = p.claim().await?;
    p.effect_if_acquired(&b);
    p.check(outcome(&b) == "completed" && b.replayed, || {
        format!("2nd claim: {} (replayed: {})", outcome(&b), b.replayed)
    });
    p.check(
        b.body["record"]["result"] == json!({"charge": "ch_1"}),
        || "2nd claim did not replay the stored result".into(),
    );
    Ok(())
}

async fn concurrent_duplicates(p: &mut Play<'_>) -> Result<(), String> {
    let mut tasks = Vec::new();
    for i in 0..50 {
        let (api, ns, dest, key) = (p.api.clone(), p.ns.clone(), p.dest.clone(), p.key);
        let body = json!({"payload": p.payload, "owner": format!("delivery-{i}")});
        tasks.push(tokio::spawn(async move {
            let a = api.claim(&ns, key, &body).await?;
            let o = outcome(&a).to_owned();
            if o == "acquired" {
                dest.send();
                let body = json!({"token": token(&a), "result": {"charge": "ch_1"}});
                api.complete(&ns, key, &body).await?;
            }
            Ok::<String, String>(o)
        }));
    }
    let mut acquired = 0;
    for t in tasks {
        match t.await {
            Ok(Ok(o)) if o == "acquired" => acquired += 1,
            Ok(Ok(o)) => p.check(o == "in_flight" || o == "completed", || {
                format!("a duplicate got {o}")
            }),
            Ok(Err(e)) => p.seen.problems.push(e),
            Err(e) => p.seen.problems.push(format!("task: {e}")),
        }
    }
    p.check(acquired == 1, || format!("{acquired} claims acquired"));
    Ok(())
}

async fn timeout_after_commit(p: &mut Play<'_>) -> Result<(), String> {
    let a = p.claim_expecting("claim", "acquired").await?;
    p.dest.send(); // the destination commits, but its answer never arrives
    let f = p
        .write(
            "fail",
            json!({
                "token": token(&a),
                "error": {"category": "timeout", "message": "read timed out after 30s"},
            }),
        )
        .await?;
    p.check(f.body["state"] == "needs_review", || {
        format!("fail answered {}", f.text)
    });
    p.duplicate("retry claim", "needs_review").await?;
    Ok(())
}

async fn failure_before_write(p: &mut Play<'_>) -> Result<(), String> {
    let a = p.claim_expecting("claim", "acquired").await?;
    let f = p
        .write(
            "fail",
            json!({
                "token": token(&a),
                "sent": false,
                "error": {"category": "connection", "message": "connection refused"},
            }),
        )
        .await?;
    p.check(
        f.body["state"] == "failed_retryable" && f.body["retry"]["allowed"] == true,
        || format!("fail answered {}", f.text),
    );
    let b = p.claim_until_acquired().await?;
    p.check(
        outcome(&b) == "acquired" && b.body["record"]["attempt"] == 2,
        || {
            format!(
                "retry claim: {} attempt {}",
                outcome(&b),
                b.body["record"]["attempt"]
            )
        },
    );
    p.effect_and_complete(&b, "ch_1").await
}

async fn lease_holder_dies_reclaim(p: &mut Play<'_>) -> Result<(), String> {
    let a = p.claim_expecting("claim", "acquired").await?;
    // The worker dies before doing anything; its lease runs out.
    p.outlive_lease().await;
    let b = p.claim().await?;
    p.check(
        outcome(&b) == "acquired" && b.body["resumed"] == true && b.body["record"]["attempt"] == 2,
        || format!("reclaim: {} {}", outcome(&b), b.body["record"]["attempt"]),
    );
    p.effect_and_complete(&b, "ch_1").await?;
    let stale = p
        .write("complete", json!({"token": token(&a), "result": {}}))
        .await?;
    p.lease_lost(&stale, "stale token's complete");
    Ok(())
}

async fn lease_holder_dies_review(p: &mut Play<'_>) -> Result<(), String> {
    p.claim_expecting("claim", "acquired").await?;
    p.outlive_lease().await;
    p.duplicate("claim after expiry", "needs_review").await?;
    Ok(())
}

async fn different_payload(p: &mut Play<'_>) -> Result<(), String> {
    let a = p.claim().await?;
    p.effect_and_complete(&a, "ch_1").await?;
    let other = json!({"payload": {"order": 1001, "amount_cents": 9900, "currency": "EUR"}});
    let b = p.claim_with(&other).await?;
    p.effect_if_acquired(&b);
    p.check(outcome(&b) == "conflict" && b.status == 422, || {
        format!("other payload: {} ({})", outcome(&b), b.status)
    });
    Ok(())
}

async fn stale_token_after_reclaim(p: &mut Play<'_>) -> Result<(), String> {
    let slow = p.claim_expecting("claim", "acquired").await?;
    // The slow worker stalls (GC pause, network partition) past its lease…
    p.outlive_lease().await;
    let b = p.claim_expecting("reclaim", "acquired").await?;
    p.effect_and_complete(&b, "ch_2").await?;
    // …then wakes up and checks its lease before the effect, as workers should.
    let hb = p.write("heartbeat", json!({"token": token(&slow)})).await?;
    if hb.is_success() {
        p.dest.send();
    }
    p.lease_lost(&hb, "stale heartbeat");
    let c = p
        .write(
            "complete",
            json!({"token": token(&slow), "result": {"charge": "ch_1"}}),
        )
        .await?;
    p.lease_lost(&c, "stale complete");
    Ok(())
}

async fn retry_budget_exhausted(p: &mut Play<'_>) -> Result<(), String> {
    let mut attempts = 0;
    let mut last = String::new();
    for _ in 0..6 {
        let a = p.claim_until_acquired().await?;
        last = outcome(&a).to_owned();
        if last != "acquired" {
            break;
        }
        attempts += 1;
        // The destination answers 503: nothing happened, try later.
        let f = p
            .write(
                "fail",
                json!({
                    "token": token(&a),
                    "http_status": 503,
                    "error": {"category": "http", "message": "service unavailable"},
                }),
            )
            .await?;
        if f.body["retry"]["allowed"] == false {
            last = f.body["state"].as_str().unwrap_or("-").to_owned();
            break;
        }
    }
    p.check(attempts == 3, || {
        format!("{attempts} attempts ran, expected 3")
    });
    p.check(last == "needs_review", || format!("ended in {last}"));
    let b = p.claim().await?;
    p.check(outcome(&b) == "needs_review", || {
        format!("claim after budget: {}", outcome(&b))
    });
    Ok(())
}

async fn paused_namespace(p: &mut Play<'_>) -> Result<(), String> {
    p.api
        .switch_namespace(&p.ns, "pause")
        .await
        .map_err(|e| format!("pause: {e}"))?;
    let a = p.claim().await?;
    p.effect_if_acquired(&a);
    p.check(outcome(&a) == "paused" && a.status == 503, || {
        format!("claim while paused: {} ({})", outcome(&a), a.status)
    });
    p.api
        .switch_namespace(&p.ns, "resume")
        .await
        .map_err(|e| format!("resume: {e}"))?;
    let b = p.claim_expecting("claim after resume", "acquired").await?;
    p.effect_and_complete(&b, "ch_1").await
}

async fn replay_old_execution(p: &mut Play<'_>) -> Result<(), String> {
    let body = json!({"payload": p.payload, "owner": "exec-41"});
    let a = p.claim_with(&body).await?;
    if outcome(&a) == "acquired" {
        p.dest.send();
        let c = p
            .write(
                "complete",
                json!({"token": token(&a), "result": {"charge": "ch_1"}, "external_ref": "ch_1"}),
            )
            .await?;
        p.check(c.is_success(), || format!("complete: {}", c.text));
    }
    let before = p.dest.effects();
    // Days later someone re-runs execution 41 from the n8n history.
    let b = p.claim_with(&body).await?;
    p.effect_if_acquired(&b);
    p.check(
        outcome(&b) == "completed" && b.replayed && b.body["record"]["external_ref"] == "ch_1",
        || {
            format!(
                "replay: {} (replayed: {}) {}",
                outcome(&b),
                b.replayed,
                b.text
            )
        },
    );
    let after = p.dest.effects();
    p.check(after == before, || "the replay caused an effect".into());
    Ok(())
}

/// How long the zombie drill waits for its alert (the server's alert sender runs every
/// `alert_interval`, 2 s by default).
const ALERT_WAIT: Duration = Duration::from_secs(15);

/// `idem_fenced_completions_total` as the server's `/metrics` shows it now.
async fn fenced_completions(api: &dyn Api) -> Option<f64> {
    let text = api.metrics().await.ok()?;
    text.lines().find_map(|l| {
        l.strip_prefix("idem_fenced_completions_total ")
            .and_then(|v| v.trim().parse().ok())
    })
}

async fn zombie_after_reclaim(p: &mut Play<'_>) -> Result<(), String> {
    let mut sink = AlertSink::start().await?;
    p.api
        .patch_namespace(&p.ns, &json!({"alert_url": sink.url}))
        .await
        .map_err(|e| format!("PATCH alert_url: {e}"))?;
    let counted_before = fenced_completions(p.api.as_ref()).await;
    let zombie = p.claim_expecting("claim", "acquired").await?;
    // The worker stalls past its lease (a long model call, a GC pause)…
    p.outlive_lease().await;
    let b = p.claim().await?;
    p.check(
        outcome(&b) == "acquired" && b.body["resumed"] == true,
        || format!("reclaim: {}", outcome(&b)),
    );
    if outcome(&b) == "acquired" {
        p.dest.send();
        let c = p
            .write(
                "complete",
                json!({"token": token(&b), "result": {"charge": "ch_2"}, "external_ref": "ch_2"}),
            )
            .await?;
        p.check(c.is_success(), || format!("complete: {}", c.text));
    }
    // …then wakes up and does its effect without checking its lease first: the outside world
    // now has it twice. It reports it, with what it spent.
    p.dest.send();
    let z = p
        .write(
            "complete",
            json!({
                "token": token(&zombie), "result": {"charge": "ch_1"},
                "external_ref": "ch_1", "cost": {"tokens": 350, "usd": 0.004},
            }),
        )
        .await?;
    p.lease_lost(&z, "zombie complete");
    // The ledger keeps one completion, and its history shows the fenced one.
    let got = p.api.get_key(&p.ns, p.key).await?;
    let rec = &got.body["record"];
    p.check(
        rec["state"] == "completed" && rec["external_ref"] == "ch_2",
        || format!("record: {} {}", rec["state"], rec["external_ref"]),
    );
    let events = got.body["events"].as_array().cloned().unwrap_or_default();
    let completions = events.iter().filter(|e| e["type"] == "completed").count();
    p.check(completions == 1, || {
        format!("{completions} completions recorded")
    });
    let fenced = events.iter().any(|e| {
        e["type"] == "lease_lost"
            && e["note"]
                .as_str()
                .is_some_and(|n| n.starts_with("fenced_completion"))
            && e["cost"]["tokens"] == 350
    });
    p.check(fenced, || {
        "no lease_lost event noted fenced_completion with the zombie's cost".into()
    });
    p.check(rec["cost"]["tokens"] == 350, || {
        format!("record cost: {}", rec["cost"])
    });
    // Counted…
    let counted_after = fenced_completions(p.api.as_ref()).await;
    match (counted_before, counted_after) {
        (Some(a), Some(b)) => p.check(b >= a + 1.0, || {
            format!("idem_fenced_completions_total went from {a} to {b}")
        }),
        _ => p
            .seen
            .problems
            .push("idem_fenced_completions_total not found in /metrics".into()),
    }
    // …and alerted (masked, like every alert).
    match sink.wait_for("fenced_completion", ALERT_WAIT).await {
        Some(alert) => {
            p.check(alert["namespace"] == p.ns.as_str(), || {
                format!("alert for {}", alert["namespace"])
            });
            let key = p.key;
            p.check(!alert.to_string().contains(key), || {
                "the alert carries the key unmasked".into()
            });
        }
        None => p.seen.problems.push(format!(
            "no fenced_completion alert reached {} within {}s",
            sink.url,
            ALERT_WAIT.as_secs()
        )),
    }
    Ok(())
}
