//! One pass over every `Store` method through `Ledger` and a `TestClock`.

use idem_core::{
    ClaimOutcome, ClaimRequest, CompleteRequest, EventType, FailErrorInput, FailRequest,
    HeartbeatRequest, Op, PrepareRequest, State, TestClock,
};
use idem_store::{
    generate_secret, hash_secret, AlertOutcome, ListQuery, NamespaceChange, NewApiToken, Role,
    Store, StoreError,
};
use serde_json::json;

use crate::helpers::*;

/// A failure the caller classified only by its HTTP status (the kind is left to the ledger).
fn http_fail(
    token: String,
    status: u16,
    retry_after_ms: Option<i64>,
    error: Option<FailErrorInput>,
) -> FailRequest {
    FailRequest {
        cost: None,
        token,
        kind: None,
        http_status: Some(status),
        retry_after_ms,
        sent: None,
        error,
    }
}

#[tokio::test]
async fn claim_complete_replay_and_read_back() {
    let Some((_db, store, clock, l)) = setup("claim_complete_replay_and_read_back").await else {
        return;
    };
    let (n, k) = (ns("pay"), key("evt_1:charge"));

    let first = l.claim(&n, &k, claim_req()).await.expect("claim");
    assert_eq!(first.outcome, ClaimOutcome::Acquired);
    assert_eq!(first.resumed, Some(false));
    let token = first.token.expect("token").secret();

    let again = l.claim(&n, &k, claim_req()).await.expect("claim");
    assert_eq!(again.outcome, ClaimOutcome::InFlight);
    assert!(again.retry_after_ms.is_some());

    let rec = l
        .heartbeat(
            &n,
            &k,
            HeartbeatRequest {
                token: token.clone(),
                lease_ms: Some(60_000),
            },
        )
        .await
        .expect("heartbeat");
    assert_eq!(rec.lease_expires_at, Some(T0.plus_ms(60_000)));

    clock.advance_ms(10);
    let done = l
        .complete(
            &n,
            &k,
            CompleteRequest {
                cost: None,
                token: token.clone(),
                result: Some(json!({"id": "ch_1", "amount": 1.5, "big": 12345678901234i64})),
                external_ref: Some("ch_1".into()),
            },
        )
        .await
        .expect("complete");
    assert_eq!(done.state, State::Completed);

    // Same complete again: no-op; different result: mismatch.
    l.complete(
        &n,
        &k,
        CompleteRequest {
            cost: None,
            token: token.clone(),
            result: Some(json!({"big": 12345678901234i64, "amount": 1.5, "id": "ch_1"})),
            external_ref: Some("ch_1".into()),
        },
    )
    .await
    .expect("repeat complete");
    assert!(l
        .complete(
            &n,
            &k,
            CompleteRequest {
                cost: None,
                token,
                result: Some(json!({"id": "other"})),
                external_ref: Some("ch_1".into()),
            },
        )
        .await
        .is_err());

    let replay = l.claim(&n, &k, claim_req()).await.expect("claim");
    assert_eq!(replay.outcome, ClaimOutcome::Completed);
    let rec = replay.record.expect("record");
    assert_eq!(
        rec.result,
        Some(json!({"id": "ch_1", "amount": 1.5, "big": 12345678901234i64}))
    );
    assert_eq!(rec.external_ref.as_deref(), Some("ch_1"));

    let got = store.get(&n, &k).await.expect("get").expect("exists");
    let kinds: Vec<EventType> = got.events.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        vec![
            EventType::Acquired,
            EventType::InFlight,
            EventType::Completed,
            EventType::DuplicateHit
        ]
    );
    assert!(got.events.windows(2).all(|w| w[0].seq < w[1].seq));
    assert_eq!(got.record, rec);
    assert!(store.get(&n, &key("nope")).await.expect("get").is_none());

    let info = store.namespace(&n).await.expect("namespace");
    assert_eq!(info.counts.get(State::Completed), 1);
    assert!(!info.paused);
    store.ping().await.expect("ping");
    assert_eq!(store.backend(), "postgres");
}

#[tokio::test]
async fn conflict_fail_backoff_resume_and_review() {
    let Some((_db, store, clock, l)) = setup("conflict_fail_backoff_resume_and_review").await
    else {
        return;
    };
    let (n, k) = (ns("crm"), key("order-1"));
    let fp = |v: serde_json::Value| idem_core::Fingerprint::of_payload(&v).expect("fp");
    let req = |f| ClaimRequest {
        fingerprint: Some(f),
        ..ClaimRequest::default()
    };

    let c = l
        .claim(&n, &k, req(fp(json!({"a": 1}))))
        .await
        .expect("claim");
    let token = c.token.expect("token").secret();
    let conflict = l
        .claim(&n, &k, req(fp(json!({"a": 2}))))
        .await
        .expect("claim");
    assert_eq!(conflict.outcome, ClaimOutcome::Conflict);

    let unavailable = FailErrorInput {
        category: "http".into(),
        message: "unavailable".into(),
    };
    let failed = l
        .fail(
            &n,
            &k,
            http_fail(token, 503, Some(5_000), Some(unavailable)),
        )
        .await
        .expect("fail");
    assert_eq!(failed.record.state, State::FailedRetryable);
    assert!(failed.retry.allowed);

    let b = l
        .claim(&n, &k, req(fp(json!({"a": 1}))))
        .await
        .expect("claim");
    assert_eq!(b.outcome, ClaimOutcome::Backoff);
    clock.advance_ms(301_000);
    let r = l
        .claim(&n, &k, req(fp(json!({"a": 1}))))
        .await
        .expect("claim");
    assert_eq!(r.outcome, ClaimOutcome::Acquired);
    assert_eq!(r.resumed, Some(true));
    let token = r.token.expect("token").secret();

    // prepare with approval, approve, resume with the prepared payload
    let p = l
        .prepare(
            &n,
            &k,
            PrepareRequest {
                token: token.clone(),
                payload: json!({"draft": "hello"}),
                approval_required: true,
            },
        )
        .await
        .expect("prepare");
    assert_eq!(p.state, State::AwaitingApproval);
    let a = l
        .approve(&n, &k, Some("ok".into()), Some("ops".into()))
        .await
        .expect("approve");
    assert_eq!(a.state, State::Prepared);
    let r = l
        .claim(&n, &k, req(fp(json!({"a": 1}))))
        .await
        .expect("claim");
    assert_eq!(r.outcome, ClaimOutcome::Acquired);
    assert_eq!(
        r.record.expect("record").prepared_payload,
        Some(json!({"draft": "hello"}))
    );
    let token = r.token.expect("token").secret();
    let amb = l
        .fail(&n, &k, http_fail(token, 502, None, None))
        .await
        .expect("fail");
    assert_eq!(amb.record.state, State::NeedsReview);
    let resolved = l
        .resolve(
            &n,
            &k,
            idem_core::ResolveRequest {
                action: idem_core::ResolveAction::Completed,
                external_ref: Some("x".into()),
                result: None,
                note: "checked by hand".into(),
            },
            Some("ops".into()),
        )
        .await
        .expect("resolve");
    assert_eq!(resolved.state, State::Completed);
    let got = store.get(&n, &k).await.expect("get").expect("exists");
    let last = got.events.last().expect("events");
    assert_eq!(last.kind, EventType::Resolved);
    assert_eq!(last.actor.as_deref(), Some("ops"));
}

#[tokio::test]
async fn namespace_policy_pause_and_daily_limit() {
    let Some((_db, store, clock, l)) = setup("namespace_policy_pause_and_daily_limit").await else {
        return;
    };
    let n = ns("mail");

    let d = store.namespace(&n).await.expect("defaults");
    assert_eq!(d.policy, idem_core::Policy::default());
    let p = store
        .update_namespace(
            &n,
            NamespaceChange::Patch(json!({"daily_limit": 2, "retry": {"max_attempts": 3}})),
            T0,
        )
        .await
        .expect("patch");
    assert_eq!(p.policy.daily_limit, Some(2));
    assert_eq!(p.policy.retry.max_attempts, 3);
    assert_eq!(p.policy.retry.base_ms, 1000);
    let bad = store
        .update_namespace(&n, NamespaceChange::Patch(json!({"bogus": 1})), T0)
        .await;
    assert!(matches!(bad, Err(StoreError::Policy(_))));

    for i in 0..2 {
        let c = l
            .claim(&n, &key(&format!("k{i}")), claim_req())
            .await
            .expect("claim");
        assert_eq!(c.outcome, ClaimOutcome::Acquired);
    }
    let limited = l.claim(&n, &key("k2"), claim_req()).await.expect("claim");
    assert_eq!(limited.outcome, ClaimOutcome::Limited);
    // The next UTC day starts a new count.
    clock.advance_ms(86_400_000);
    let next_day = l.claim(&n, &key("k2"), claim_req()).await.expect("claim");
    assert_eq!(next_day.outcome, ClaimOutcome::Acquired);

    let paused = store
        .update_namespace(&n, NamespaceChange::Pause, T0)
        .await
        .expect("pause");
    assert!(paused.paused);
    assert_eq!(paused.policy.daily_limit, Some(2));
    let c = l.claim(&n, &key("k0"), claim_req()).await.expect("claim");
    assert_eq!(c.outcome, ClaimOutcome::Paused);
    store
        .update_namespace(&n, NamespaceChange::Resume, T0)
        .await
        .expect("resume");
    // k2 was acquired after the day change: its lease is still held.
    let c = l.claim(&n, &key("k2"), claim_req()).await.expect("claim");
    assert_eq!(c.outcome, ClaimOutcome::InFlight);
}

#[tokio::test]
async fn list_pages_newest_first_with_state_filter() {
    let Some((_db, store, clock, l)) = setup("list_pages_newest_first_with_state_filter").await
    else {
        return;
    };
    let n = ns("list");
    for i in 0..5 {
        clock.advance_ms(1);
        l.claim(&n, &key(&format!("k{i}")), claim_req())
            .await
            .expect("claim");
    }
    // Two with the same updated_at: the key breaks the tie.
    l.claim(&n, &key("same-a"), claim_req())
        .await
        .expect("claim");
    l.claim(&n, &key("same-b"), claim_req())
        .await
        .expect("claim");

    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let page = store
            .list(
                &n,
                &ListQuery {
                    state: Some(State::Processing),
                    limit: 3,
                    cursor: cursor.clone(),
                    ..Default::default()
                },
            )
            .await
            .expect("list");
        seen.extend(page.items.iter().map(|r| r.key.as_str().to_owned()));
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(seen, vec!["same-b", "same-a", "k4", "k3", "k2", "k1", "k0"]);
    let none = store
        .list(
            &n,
            &ListQuery {
                state: Some(State::Completed),
                limit: 10,
                cursor: None,
                ..Default::default()
            },
        )
        .await
        .expect("list");
    assert!(none.items.is_empty() && none.next_cursor.is_none());
    let bad = store
        .list(
            &n,
            &ListQuery {
                state: None,
                limit: 10,
                cursor: Some("zz".into()),
                ..Default::default()
            },
        )
        .await;
    assert!(matches!(bad, Err(StoreError::InvalidCursor)));
}

#[tokio::test]
async fn sweep_moves_expired_review_lease_and_alerts_are_delivered_once() {
    let Some((_db, store, clock, l)) = setup("sweep_moves_expired_review_lease").await else {
        return;
    };
    let n = ns("money");
    store
        .update_namespace(
            &n,
            NamespaceChange::Patch(
                json!({"lease_expiry": "review", "alert_url": "http://127.0.0.1:9/hook"}),
            ),
            T0,
        )
        .await
        .expect("patch");
    let k = key("charge-1");
    l.claim(&n, &k, claim_req()).await.expect("claim");
    l.claim(&n, &key("fresh"), claim_req())
        .await
        .expect("claim");

    assert_eq!(
        store
            .sweep_once(clock.now_ts(), 10)
            .await
            .expect("sweep")
            .examined,
        0
    );
    clock.advance_ms(31_000);
    let rep = store.sweep_once(clock.now_ts(), 10).await.expect("sweep");
    assert_eq!(rep.moved_to_review, 2);
    let stats = store.stats(clock.now_ts()).await.expect("stats");
    assert_eq!(stats.review_queue_depth, 2);
    assert_eq!(stats.records.get(State::NeedsReview), 2);

    let due = store
        .due_alerts(clock.now_ts(), 10, 60_000)
        .await
        .expect("due");
    assert_eq!(due.len(), 2);
    assert!(due
        .iter()
        .all(|a| a.alert_url.as_deref() == Some("http://127.0.0.1:9/hook")));
    assert!(store
        .due_alerts(clock.now_ts(), 10, 60_000)
        .await
        .expect("due")
        .is_empty());
    let charge = due.iter().find(|a| a.key == "charge-1").expect("alert");
    store
        .finish_alert(charge.id, AlertOutcome::Sent, clock.now_ts())
        .await
        .expect("finish");
    let other = due.iter().find(|a| a.key == "fresh").expect("alert");
    store
        .finish_alert(
            other.id,
            AlertOutcome::RetryAt(clock.now_ts().plus_ms(1000)),
            clock.now_ts(),
        )
        .await
        .expect("finish");
    clock.advance_ms(1000);
    let due = store
        .due_alerts(clock.now_ts(), 10, 60_000)
        .await
        .expect("due");
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].tries, 1);
    store
        .finish_alert(due[0].id, AlertOutcome::GaveUp, clock.now_ts())
        .await
        .expect("finish");
    clock.advance_ms(120_000);
    assert!(store
        .due_alerts(clock.now_ts(), 10, 60_000)
        .await
        .expect("due")
        .is_empty());
    let got = store.get(&n, &k).await.expect("get").expect("exists");
    assert!(got.events.iter().any(|e| e.kind == EventType::AlertSent));
}

#[tokio::test]
async fn retention_expires_results_then_deletes_tombstones() {
    let Some((_db, store, clock, l)) = setup("retention_expires_results_then_deletes").await else {
        return;
    };
    let n = ns("short");
    store
        .update_namespace(
            &n,
            NamespaceChange::Patch(json!({"retention_ms": 1000, "audit_retention_ms": 5000})),
            T0,
        )
        .await
        .expect("patch");
    let k = key("k");
    let t = l.claim(&n, &k, claim_req()).await.expect("claim");
    l.complete(
        &n,
        &k,
        CompleteRequest {
            cost: None,
            token: t.token.expect("token").secret(),
            result: Some(json!({"ok": true})),
            external_ref: Some("ref".into()),
        },
    )
    .await
    .expect("complete");
    // A processing record and one in the default namespace are never touched here.
    l.claim(&n, &key("busy"), claim_req()).await.expect("claim");

    let r = store
        .retention_once(clock.now_ts(), 10)
        .await
        .expect("retention");
    assert_eq!((r.results_expired, r.tombstones_deleted), (0, 0));
    clock.advance_ms(1500);
    let r = store
        .retention_once(clock.now_ts(), 10)
        .await
        .expect("retention");
    assert_eq!((r.results_expired, r.tombstones_deleted), (1, 0));
    let replay = l.claim(&n, &k, claim_req()).await.expect("claim");
    assert_eq!(replay.outcome, ClaimOutcome::Completed);
    let rec = replay.record.expect("record");
    assert!(rec.result_expired);
    assert_eq!(rec.result, None);
    assert_eq!(rec.external_ref.as_deref(), Some("ref"));

    clock.advance_ms(5000);
    let r = store
        .retention_once(clock.now_ts(), 10)
        .await
        .expect("retention");
    assert_eq!((r.results_expired, r.tombstones_deleted), (0, 1));
    assert!(store.get(&n, &k).await.expect("get").is_none());
    assert!(store.get(&n, &key("busy")).await.expect("get").is_some());
}

#[tokio::test]
async fn tokens_are_stored_hashed() {
    let Some(db) = PgDb::create("tokens_are_stored_hashed") else {
        return;
    };
    let store = db.store().await;
    assert_eq!(store.token_count().await.expect("count"), 0);
    let secret = generate_secret();
    store
        .create_token(
            NewApiToken {
                secret_hash: hash_secret(&secret),
                role: Role::Operator,
                scope: "*".into(),
                label: Some("ops".into()),
                expires_at: None,
            },
            T0,
        )
        .await
        .expect("create");
    assert_eq!(store.token_count().await.expect("count"), 1);
    let t = store
        .find_token(&hash_secret(&secret))
        .await
        .expect("find")
        .expect("exists");
    assert_eq!(t.role, Role::Operator);
    assert_eq!(t.label.as_deref(), Some("ops"));
    assert!(store
        .find_token(&hash_secret("nope"))
        .await
        .expect("find")
        .is_none());
}

#[tokio::test]
async fn refused_operations_write_nothing_but_lease_lost() {
    let Some((_db, store, _clock, l)) = setup("refused_operations_write_nothing").await else {
        return;
    };
    let (n, k) = (ns("x"), key("k"));
    let missing = l
        .execute(&n, &k, Op::Approve { note: None }, None)
        .await
        .expect("exec");
    assert!(missing.reply.is_err());
    assert!(store.get(&n, &k).await.expect("get").is_none());
    l.claim(&n, &k, claim_req()).await.expect("claim");
    let lost = l
        .complete(
            &n,
            &k,
            CompleteRequest {
                cost: None,
                token: "1.00000000000000000000000000000000".into(),
                result: None,
                external_ref: None,
            },
        )
        .await;
    assert!(lost.is_err());
    let got = store.get(&n, &k).await.expect("get").expect("exists");
    assert_eq!(
        got.events.last().map(|e| e.kind),
        Some(EventType::LeaseLost)
    );
    assert_eq!(got.record.state, State::Processing);
}

/// `TestClock::now` as a method without importing the trait everywhere.
trait NowTs {
    fn now_ts(&self) -> idem_core::Timestamp;
}

impl NowTs for TestClock {
    fn now_ts(&self) -> idem_core::Timestamp {
        idem_core::Clock::now(self)
    }
}

/// A ledger from before the per-namespace counters (migration 10) gets them counted at
/// upgrade; the ledger-wide gauges read them (migration 14 dropped the ledger-wide counters of
/// migration 4), and every write after it moves them.
#[tokio::test]
async fn migration_10_counts_an_existing_ledger_into_the_state_counters() {
    let Some(db) = PgDb::create("migration_10_counts_an_existing_ledger") else {
        return;
    };
    let clock = TestClock::new(T0);
    {
        let l = ledger(db.store().await, &clock);
        for i in 0..5 {
            let k = key(&format!("done-{i}"));
            let t = l.claim(&ns("m"), &k, claim_req()).await.expect("claim");
            let token = t.token.expect("token").secret();
            l.complete(
                &ns("m"),
                &k,
                CompleteRequest {
                    cost: None,
                    token,
                    result: None,
                    external_ref: None,
                },
            )
            .await
            .expect("complete");
        }
        l.claim(&ns("m"), &key("busy"), claim_req())
            .await
            .expect("claim");
    }
    // Back to the schema as version 9 left it (migration 10 also made the console's table and
    // review index), less the ledger-wide counters migration 14 dropped.
    let (client, task) = db.raw().await;
    client
        .batch_execute(
            "DROP TRIGGER records_ns_count_row_insert ON records; \
             DROP TRIGGER records_ns_count_row_update ON records; \
             DROP TRIGGER records_ns_count_delete ON records; \
             DROP FUNCTION idem_ns_count_row_inserted(); DROP FUNCTION idem_ns_count_row_moved(); \
             DROP FUNCTION idem_ns_count_deleted(); DROP TABLE namespace_counts; \
             DROP TABLE console_sessions; DROP INDEX records_review_queue; \
             DELETE FROM idem_schema_migrations WHERE version IN (10, 15, 16, 17);",
        )
        .await
        .expect("downgrade");
    drop(client);
    let _ = task.await;
    let store = db.store().await;
    let s = store.stats(T0).await.expect("stats");
    assert_eq!(s.records.get(State::Completed), 5, "{s:?}");
    assert_eq!(s.records.get(State::Processing), 1, "{s:?}");
    let l = ledger(store.clone(), &clock);
    l.claim(&ns("m"), &key("new"), claim_req())
        .await
        .expect("claim");
    let s = store.stats(T0).await.expect("stats");
    assert_eq!(s.records.get(State::Processing), 2, "{s:?}");
}

/// The alert secret a patch sets lives in the secrets table, never in the policy text: one
/// version per namespace, replaced by a new secret, untouched by other changes, removed by
/// `null`; reads and the alert sender see it as before.
#[tokio::test]
async fn alert_secret_is_kept_in_the_secrets_table_not_in_the_policy_row() {
    const S1: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const S2: &str = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    let Some(db) = PgDb::create("alert_secret_is_kept_in_the_secrets_table") else {
        return;
    };
    let store = db.store().await;
    let n = ns("signed");
    let patch = |v: serde_json::Value| store.update_namespace(&n, NamespaceChange::Patch(v), T0);
    let info = patch(json!({"alert_url": "http://127.0.0.1:9/hook", "alert_secret": S1}))
        .await
        .expect("patch");
    assert_eq!(
        info.policy.alert_secret.as_ref().map(|s| s.expose()),
        Some(S1)
    );
    let (raw, task) = db.raw().await;
    let policy_text = || async {
        raw.query_one(
            "SELECT policy FROM namespaces WHERE namespace = 'signed'",
            &[],
        )
        .await
        .expect("policy row")
        .get::<_, String>(0)
    };
    let secrets = || async {
        raw.query(
            "SELECT id, kind, owner, value FROM secrets ORDER BY id",
            &[],
        )
        .await
        .expect("secrets")
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect::<Vec<(i64, String, String, String)>>()
    };
    let text = policy_text().await;
    assert!(
        !text.contains("alert_secret") && !text.contains("MfKQ"),
        "{text}"
    );
    assert!(text.contains("http://127.0.0.1:9/hook"), "{text}");
    let first = secrets().await;
    assert_eq!(first.len(), 1, "{first:?}");
    assert_eq!(
        (first[0].1.as_str(), first[0].2.as_str()),
        ("alert", "signed")
    );
    assert_eq!(first[0].3, S1);

    // Another field or the pause switch: the secret is not rewritten.
    patch(json!({"lease_ms": 5000})).await.expect("patch");
    assert_eq!(secrets().await, first);
    store
        .update_namespace(&n, NamespaceChange::Pause, T0)
        .await
        .expect("pause");
    assert_eq!(secrets().await, first);
    // A new secret replaces the old one.
    patch(json!({"alert_secret": S2})).await.expect("patch");
    let second = secrets().await;
    assert_eq!(second.len(), 1, "{second:?}");
    assert_eq!(second[0].3, S2);
    assert!(!policy_text().await.contains("alert_secret"));
    let read = store.namespace(&n).await.expect("read").policy;
    assert_eq!(read.alert_secret.as_ref().map(|s| s.expose()), Some(S2));
    assert_eq!(read.lease_ms, 5000);
    // null removes it.
    patch(json!({"alert_secret": null})).await.expect("patch");
    assert_eq!(secrets().await, []);
    assert_eq!(
        store.namespace(&n).await.expect("read").policy.alert_secret,
        None
    );
    drop(raw);
    let _ = task.await;
}

/// A ledger from before the move (migration 7) keeps its alert secret in the policy text; at
/// upgrade it moves to the secrets table, the policy keeps every other field, and the store
/// reads and signs with it as before.
#[tokio::test]
async fn migration_7_moves_an_alert_secret_out_of_the_policy_text() {
    const S: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let Some(db) = PgDb::create("migration_7_moves_an_alert_secret") else {
        return;
    };
    let plain = r#"{"lease_ms":6000}"#;
    {
        let store = db.store().await;
        for n in ["signed", "plain"] {
            store
                .update_namespace(&ns(n), NamespaceChange::Pause, T0)
                .await
                .expect("row");
        }
    }
    // Back to the data as version 6 left it: the secret inside the policy text.
    let (raw, task) = db.raw().await;
    let old =
        format!(r#"{{"lease_ms":7000,"alert_url":"http://127.0.0.1:9/h","alert_secret":"{S}"}}"#);
    raw.execute(
        "UPDATE namespaces SET policy = $1, updated_at = 1234 WHERE namespace = 'signed'",
        &[&old],
    )
    .await
    .expect("old row");
    raw.execute(
        "UPDATE namespaces SET policy = $1 WHERE namespace = 'plain'",
        &[&plain],
    )
    .await
    .expect("old row");
    // The version of the migration that moves alert secrets (V9 in `src/schema.rs`).
    const MOVE: i32 = 9;
    raw.batch_execute(&format!(
        "DELETE FROM secrets; DELETE FROM idem_schema_migrations WHERE version = {MOVE};"
    ))
    .await
    .expect("downgrade");
    let store = db.store().await;
    let text: String = raw
        .query_one(
            "SELECT policy FROM namespaces WHERE namespace = 'signed'",
            &[],
        )
        .await
        .expect("policy")
        .get(0);
    assert!(
        !text.contains("alert_secret") && !text.contains("MfKQ"),
        "{text}"
    );
    let plain_now: String = raw
        .query_one(
            "SELECT policy FROM namespaces WHERE namespace = 'plain'",
            &[],
        )
        .await
        .expect("policy")
        .get(0);
    assert_eq!(
        plain_now, plain,
        "a policy without a secret is left as it was"
    );
    let rows: Vec<(String, String, String, i64)> = raw
        .query("SELECT kind, owner, value, created_at FROM secrets", &[])
        .await
        .expect("secrets")
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    assert_eq!(rows, [("alert".into(), "signed".into(), S.into(), 1234)]);
    let p = store.namespace(&ns("signed")).await.expect("read").policy;
    assert_eq!(p.lease_ms, 7000);
    assert_eq!(p.alert_url.as_deref(), Some("http://127.0.0.1:9/h"));
    assert_eq!(p.alert_secret.as_ref().map(|s| s.expose()), Some(S));
    drop(raw);
    let _ = task.await;
}

/// During a rolling upgrade a process of an older version writes beside this one: its
/// statements carry no `/* idem:counts-itself */` mark, so the triggers count its writes
/// (schema V17), while this version's statements count their own. The counts stay exact
/// through both; and both switches are real: a write on a connection that says it counts
/// itself (`idem.self_count`, the previous version's startup setting), or a statement marked
/// as counting itself, that does not, is missed.
#[tokio::test]
async fn counts_stay_exact_with_an_older_process_writing_beside_this_one() {
    let Some((db, store, _clock, l)) = setup("counts_stay_exact_with_an_older_process").await
    else {
        return;
    };
    let n = ns("mixed");
    let complete = |token: String| CompleteRequest {
        cost: None,
        token,
        result: None,
        external_ref: None,
    };
    for k in ["a", "b"] {
        let c = l.claim(&n, &key(k), claim_req()).await.expect("claim");
        if k == "a" {
            let token = c.token.expect("token").secret();
            l.complete(&n, &key(k), complete(token))
                .await
                .expect("complete");
        }
    }
    let (old, task) = db.raw().await;
    let drift = || async {
        old.query(idem_testkit::contract::COUNTER_DRIFT_SQL, &[])
            .await
            .expect("drift")
            .len()
    };
    assert_eq!(drift().await, 0, "this version's own writes");
    // The older process: moves `b` to review and inserts `c` (as its engine would: a new
    // version with every move).
    old.batch_execute(
        "UPDATE records SET state = 'needs_review', review_reason = 'ambiguous', \
             version = version + 1 WHERE namespace = 'mixed' AND key = 'b'; \
         CREATE TEMP TABLE c AS SELECT * FROM records WHERE namespace = 'mixed' AND key = 'a'; \
         UPDATE c SET key = 'c'; INSERT INTO records SELECT * FROM c; DROP TABLE c;",
    )
    .await
    .expect("older writes");
    assert_eq!(drift().await, 0, "the older process's writes");
    // This version again, on a record the other process moved (remembered here at its
    // previous version) and on new ones.
    let again = l.claim(&n, &key("b"), claim_req()).await.expect("claim");
    assert_eq!(
        again.record.as_ref().map(|r| r.state),
        Some(State::NeedsReview),
        "{again:?}"
    );
    let d = l.claim(&n, &key("d"), claim_req()).await.expect("claim");
    l.complete(&n, &key("d"), complete(d.token.expect("token").secret()))
        .await
        .expect("complete");
    assert_eq!(drift().await, 0, "both, one after the other");
    let counts = store.namespace(&n).await.expect("namespace").counts;
    assert_eq!(counts.get(State::Completed), 3, "{counts:?}");
    assert_eq!(counts.get(State::NeedsReview), 1, "{counts:?}");
    // A connection that says it counts itself and does not is missed: the triggers do skip.
    old.batch_execute(
        "SET idem.self_count = on; \
         UPDATE records SET state = 'failed_retryable', version = version + 1 \
             WHERE namespace = 'mixed' AND key = 'c';",
    )
    .await
    .expect("uncounted write");
    assert_eq!(drift().await, 2, "completed over, failed_retryable under");
    old.batch_execute(
        "RESET idem.self_count; \
         /* idem:counts-itself */ UPDATE records SET state = 'needs_review', \
             version = version + 1 WHERE namespace = 'mixed' AND key = 'd';",
    )
    .await
    .expect("uncounted marked write");
    assert_eq!(
        drift().await,
        3,
        "completed further over, needs_review under too"
    );
    drop(old);
    let _ = task.await;
}
