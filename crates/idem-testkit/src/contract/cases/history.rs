//! What the ledger tells afterwards: events of every transition, operator actions with who
//! and why, listing pages, stats, and a reopened handle seeing every acknowledged change.
//!
//! Its cases only read and write the fresh database they are given; they must never share
//! state with another case or depend on the order cases run in.

use std::sync::Arc;

use idem_core::{
    ClaimOutcome, ClaimRequest, Class, EventType, Op, ResolveAction, ResolveRequest, State,
    TestClock, Timestamp,
};
use idem_store::{hash_secret, ListQuery, NamespaceChange, NewApiToken, Role, StoreError};
use serde_json::json;

use super::{
    complete, fail, heartbeat, into_state, ok, owned, prepare, record_of, resolve, with_fp,
};
use crate::contract::{key, ok_reply, Backend, H, T0};

// ================================================================ events and operator actions

pub async fn events_record_every_transition_with_owner_attempt_and_correlation<B: Backend>(
    b: Arc<B>,
) {
    let h = H::new(&*b, "ns").await;
    let k = key("k");
    let tok = h
        .claim_with(&k, owned("exec-1", "corr-1"))
        .await
        .token
        .expect("token")
        .secret();
    h.advance(1_000);
    ok(&h, &k, prepare(&tok, json!({"draft": 1}), false)).await;
    h.advance(1_000);
    ok(&h, &k, heartbeat(&tok, None)).await;
    ok(&h, &k, fail(&tok, Class::Retryable)).await;
    h.advance(1_000);
    let tok = h
        .claim_with(&k, owned("exec-2", "corr-2"))
        .await
        .token
        .expect("token")
        .secret();
    ok(&h, &k, complete(&tok, Some(json!(1)), None)).await;
    h.claim_with(&k, owned("exec-3", "corr-3")).await;
    let events = h.get(&k).await.events;
    let events: Vec<_> = events
        .into_iter()
        .filter(|e| e.kind != EventType::Heartbeat)
        .collect();
    use EventType as E;
    use State as S;
    let expected = [
        (
            E::Acquired,
            None,
            Some(S::Processing),
            1,
            "exec-1",
            "corr-1",
        ),
        (
            E::Prepared,
            Some(S::Processing),
            Some(S::Prepared),
            1,
            "exec-1",
            "corr-1",
        ),
        (
            E::Failed,
            Some(S::Prepared),
            Some(S::FailedRetryable),
            1,
            "exec-1",
            "corr-1",
        ),
        (
            E::Resumed,
            Some(S::FailedRetryable),
            Some(S::Prepared),
            2,
            "exec-2",
            "corr-2",
        ),
        (
            E::Completed,
            Some(S::Prepared),
            Some(S::Completed),
            2,
            "exec-2",
            "corr-2",
        ),
        (
            E::DuplicateHit,
            Some(S::Completed),
            Some(S::Completed),
            2,
            "exec-3",
            "corr-3",
        ),
    ];
    assert_eq!(events.len(), expected.len(), "{events:?}");
    for (e, (kind, from, to, attempt, owner, corr)) in events.iter().zip(expected) {
        assert_eq!(e.kind, kind);
        assert_eq!((e.from_state, e.to_state), (from, to), "{kind:?}");
        assert_eq!(e.attempt, attempt, "{kind:?}");
        assert_eq!(e.owner.as_deref(), Some(owner), "{kind:?}");
        assert_eq!(e.correlation_id.as_deref(), Some(corr), "{kind:?}");
    }
    assert!(
        events.windows(2).all(|w| w[0].seq < w[1].seq),
        "seq increases"
    );
    assert!(
        events.windows(2).all(|w| w[0].at <= w[1].at),
        "oldest first"
    );
    assert_eq!(events[0].at, Timestamp(T0));
    assert_eq!(events[1].at, Timestamp(T0 + 1_000));
}

pub async fn operator_actions_are_recorded_with_who_and_why<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    let k = key("k");
    into_state(&h, &k, State::NeedsReview, ClaimRequest::default()).await;
    let e = h
        .exec(
            &k,
            Op::Resolve(ResolveRequest {
                action: ResolveAction::Completed,
                external_ref: Some("ch_9".into()),
                result: Some(json!({"found": true})),
                note: "found it in the PSP".into(),
            }),
            Some("operator:alice"),
        )
        .await;
    let rec = record_of(ok_reply(&e));
    assert_eq!(rec.state, State::Completed);
    assert_eq!(rec.external_ref.as_deref(), Some("ch_9"));
    let got = h.get(&k).await;
    assert_eq!(got.record, rec);
    let last = got.events.last().expect("event");
    assert_eq!(last.kind, EventType::Resolved);
    assert_eq!(last.note.as_deref(), Some("found it in the PSP"));
    assert_eq!(last.actor.as_deref(), Some("operator:alice"));
    assert_eq!(h.claim(&k).await.outcome, ClaimOutcome::Completed);

    // resolve retry: a fresh budget, claimable at once
    let k = key("retry");
    into_state(&h, &k, State::FailedPermanent, ClaimRequest::default()).await;
    let rec = ok(&h, &k, resolve(ResolveAction::Retry, "fixed the address")).await;
    assert_eq!(rec.state, State::FailedRetryable);
    let c = h.claim(&k).await;
    assert_eq!(c.outcome, ClaimOutcome::Acquired);
    assert_eq!(c.token.expect("token").attempt, 2);

    let k = key("approve");
    into_state(&h, &k, State::AwaitingApproval, ClaimRequest::default()).await;
    ok(&h, &k, Op::Approve { note: None }).await;
    let last = h.get(&k).await.events.pop().expect("event");
    assert_eq!(last.kind, EventType::Approved);
    assert_eq!(last.actor.as_deref(), Some("operator:alice"));
}

// ================================================================ listing

pub async fn list_pages_newest_first_with_cursor_and_state_filter<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    let mut tokens = Vec::new();
    for i in 0..5 {
        tokens.push(h.acquire(&key(&format!("k{i}"))).await);
        h.advance(1_000);
    }
    // two records at the same instant: the order is still total (key descending)
    h.acquire(&key("same-a")).await;
    h.acquire(&key("same-b")).await;
    h.advance(1_000);
    // touching k1 moves it to the front
    ok(&h, &key("k1"), complete(&tokens[1], None, None)).await;
    ok(&h, &key("k3"), complete(&tokens[3], None, None)).await;
    H::on(h.store.clone(), "elsewhere", h.clock.clone())
        .acquire(&key("zzz"))
        .await;

    let want = ["k3", "k1", "same-b", "same-a", "k4", "k2", "k0"];
    let mut seen = Vec::new();
    let mut cursor = None;
    for page_no in 0.. {
        let page = h
            .store
            .list(
                &h.ns,
                &ListQuery {
                    state: None,
                    limit: 2,
                    cursor: cursor.clone(),
                    ..Default::default()
                },
            )
            .await
            .expect("list");
        assert!(page.items.len() <= 2);
        seen.extend(page.items.iter().map(|r| r.key.as_str().to_owned()));
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
        assert!(page_no < 10, "paging does not end");
    }
    assert_eq!(seen, want);
    let all = h
        .store
        .list(
            &h.ns,
            &ListQuery {
                state: None,
                limit: 100,
                cursor: None,
                ..Default::default()
            },
        )
        .await
        .expect("list");
    assert_eq!(all.items.len(), 7);
    assert_eq!(all.next_cursor, None, "null at the end");
    assert_eq!(all.items[0], h.rec(&key("k3")).await);
    let done = h
        .store
        .list(
            &h.ns,
            &ListQuery {
                state: Some(State::Completed),
                limit: 100,
                cursor: None,
                ..Default::default()
            },
        )
        .await
        .expect("list");
    let keys: Vec<_> = done.items.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(keys, ["k3", "k1"]);
    let none = h
        .store
        .list(
            &h.ns,
            &ListQuery {
                state: Some(State::NeedsReview),
                limit: 10,
                cursor: None,
                ..Default::default()
            },
        )
        .await
        .expect("list");
    assert!(none.items.is_empty());
    assert_eq!(none.next_cursor, None);
    let bad = h
        .store
        .list(
            &h.ns,
            &ListQuery {
                state: None,
                limit: 10,
                cursor: Some("not a cursor".into()),
                ..Default::default()
            },
        )
        .await;
    assert!(
        matches!(bad, Err(StoreError::InvalidCursor)),
        "{:?}",
        bad.map(|p| p.items.len())
    );
}

// ================================================================ stats and durability

pub async fn stats_count_states_and_oldest_processing<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    h.store.ping().await.expect("ping");
    let empty = h.store.stats(h.now()).await.expect("stats");
    assert_eq!(empty.records.get(State::Processing), 0);
    assert_eq!(empty.review_queue_depth, 0);
    assert_eq!(empty.oldest_processing_seconds, 0.0);
    h.acquire(&key("old")).await;
    h.advance(10_000);
    h.acquire(&key("young")).await;
    into_state(&h, &key("r1"), State::NeedsReview, ClaimRequest::default()).await;
    into_state(&h, &key("r2"), State::NeedsReview, ClaimRequest::default()).await;
    into_state(&h, &key("c"), State::Completed, ClaimRequest::default()).await;
    H::on(h.store.clone(), "other", h.clock.clone())
        .acquire(&key("x"))
        .await;
    h.advance(5_000);
    let s = h.store.stats(h.now()).await.expect("stats");
    assert_eq!(s.records.get(State::Processing), 3);
    assert_eq!(s.records.get(State::NeedsReview), 2);
    assert_eq!(s.records.get(State::Completed), 1);
    assert_eq!(s.review_queue_depth, 2);
    assert!(
        (s.oldest_processing_seconds - 15.0).abs() < 0.01,
        "{}",
        s.oldest_processing_seconds
    );
}

pub async fn reopened_handle_sees_every_acknowledged_change<B: Backend>(b: Arc<B>) {
    let clock = TestClock::new(Timestamp(T0));
    let keys: Vec<_> = State::ALL
        .iter()
        .map(|s| key(&format!("k-{}", s.as_str())))
        .collect();
    let (records, policy) = {
        let h = H::on(b.open().await, "ns", clock.clone());
        h.patch(json!({"alert_url": "http://127.0.0.1:9/a", "retry": {"max_attempts": 7}}))
            .await;
        h.change(NamespaceChange::Pause).await;
        h.change(NamespaceChange::Resume).await;
        for (s, k) in State::ALL.iter().zip(&keys) {
            into_state(&h, k, *s, with_fp(&json!({"k": k.as_str()}))).await;
        }
        h.store
            .create_token(
                NewApiToken {
                    secret_hash: hash_secret("idem_s"),
                    role: Role::Worker,
                    scope: "ns".into(),
                    label: None,
                    expires_at: None,
                },
                h.now(),
            )
            .await
            .expect("token");
        let mut records = Vec::new();
        for k in &keys {
            records.push(h.get(k).await);
        }
        let policy = h.store.namespace(&h.ns).await.expect("ns").policy;
        (records, policy)
        // the first handle is dropped here
    };
    let h = H::on(b.open().await, "ns", clock.clone());
    for (k, before) in keys.iter().zip(records) {
        let after = h.get(k).await;
        assert_eq!(after.record, before.record, "{k}");
        assert_eq!(after.events, before.events, "{k}");
    }
    let info = h.store.namespace(&h.ns).await.expect("ns");
    assert_eq!(info.policy, policy);
    assert_eq!(info.policy.retry.max_attempts, 7);
    assert!(!info.paused);
    assert_eq!(h.store.token_count().await.expect("count"), 1);
    assert!(h
        .store
        .find_token(&hash_secret("idem_s"))
        .await
        .expect("find")
        .is_some());
    let alerts = h.store.due_alerts(h.now(), 100, 1000).await.expect("due");
    assert_eq!(alerts.len(), 1, "the needs_review alert survived");
    assert_eq!(
        h.claim(&keys[3]).await.outcome,
        ClaimOutcome::Completed,
        "{}",
        keys[3]
    );
}
