//! Every Store method once, through the Ledger where there is one.

use idem_core::{
    ClaimOutcome, ClaimRequest, Class, EventType, FailRequest, OpError, Policy, PrepareRequest,
    State,
};
use idem_store::{hash_secret, LedgerError, NamespaceChange, NewApiToken, Role, Store, StoreError};
use serde_json::json;

use crate::helpers::{key, kinds, ns, TestLedger};

#[tokio::test]
async fn claim_complete_then_duplicate_replays_result() {
    let t = TestLedger::new();
    let (n, k) = (ns("pay"), key("evt_1:charge"));
    let first = t.claim(&n, &k).await;
    assert_eq!(first.outcome, ClaimOutcome::Acquired);
    assert_eq!(first.resumed, Some(false));
    let token = first.token.expect("token").secret();
    let charge = json!({"charge": "ch_1"});
    let rec = t
        .complete(&n, &k, token, Some(charge), Some("ch_1".into()))
        .await
        .expect("complete");
    assert_eq!(rec.state, State::Completed);

    let again = t.claim(&n, &k).await;
    assert_eq!(again.outcome, ClaimOutcome::Completed);
    let rec = again.record.expect("record");
    assert_eq!(rec.result, Some(json!({"charge": "ch_1"})));
    assert_eq!(rec.external_ref.as_deref(), Some("ch_1"));

    let got = t.store.get(&n, &k).await.expect("get").expect("known");
    assert_eq!(
        kinds(&got.events),
        [
            EventType::Acquired,
            EventType::Completed,
            EventType::DuplicateHit
        ]
    );
    assert!(got.events.windows(2).all(|w| w[0].seq < w[1].seq));
    assert_eq!(got.record, rec);
    assert!(t
        .store
        .get(&n, &key("unknown"))
        .await
        .expect("get")
        .is_none());
}

#[tokio::test]
async fn executed_reports_numbered_events_and_from_state() {
    let t = TestLedger::new();
    let (n, k) = (ns("pay"), key("k"));
    let ex = t
        .ledger
        .execute(&n, &k, idem_core::Op::Claim(ClaimRequest::default()), None)
        .await
        .expect("execute");
    assert_eq!(ex.from_state, None);
    assert_eq!(ex.events.len(), 1);
    let stored = t.store.get(&n, &k).await.expect("get").expect("known");
    assert_eq!(stored.events, ex.events);
}

#[tokio::test]
async fn every_record_field_round_trips() {
    let t = TestLedger::new();
    let (n, k) = (ns("ai"), key("draft:1"));
    let c = t
        .ledger
        .claim(
            &n,
            &k,
            ClaimRequest {
                fingerprint: Some(
                    idem_core::Fingerprint::of_payload(&json!({"a": 1})).expect("fp"),
                ),
                owner: Some("exec-9".into()),
                lease_ms: Some(60_000),
                correlation_id: Some("corr".into()),
                lease_expiry: Some(idem_core::LeaseExpiry::Review),
            },
        )
        .await
        .expect("claim");
    let token = c.token.expect("token").secret();
    let prepared = t
        .ledger
        .prepare(
            &n,
            &k,
            PrepareRequest {
                token: token.clone(),
                payload: json!({"draft": "hello", "null": null}),
                approval_required: false,
            },
        )
        .await
        .expect("prepare");
    let failed = t
        .ledger
        .fail(
            &n,
            &k,
            FailRequest {
                token,
                http_status: Some(502),
                error: Some(idem_core::FailErrorInput {
                    category: "http".into(),
                    message: "bad gateway".into(),
                }),
                ..FailRequest::default()
            },
        )
        .await
        .expect("fail");
    assert_eq!(failed.class, Class::Ambiguous);
    assert_eq!(failed.record.state, State::NeedsReview);
    assert_eq!(failed.record.prepared_payload, prepared.prepared_payload);
    let got = t.store.get(&n, &k).await.expect("get").expect("known");
    // Bookkeeping included: the record read back is exactly the one decided.
    assert_eq!(got.record, failed.record);
}

#[tokio::test]
async fn stale_token_is_refused_and_the_refusal_is_recorded() {
    let t = TestLedger::new();
    let (n, k) = (ns("pay"), key("k"));
    t.claim(&n, &k).await;
    let stale = "1.00000000000000000000000000000000".to_owned();
    let err = t
        .complete(&n, &k, stale, None, None)
        .await
        .expect_err("refused");
    assert!(
        matches!(err, LedgerError::Op(OpError::LeaseLost)),
        "{err:?}"
    );
    let got = t.store.get(&n, &k).await.expect("get").expect("known");
    assert_eq!(got.record.state, State::Processing);
    assert_eq!(got.record.version, 1);
    assert_eq!(
        got.events.last().map(|e| e.kind),
        Some(EventType::LeaseLost)
    );
}

#[tokio::test]
async fn list_pages_newest_first_with_state_filter_and_cursor() {
    let t = TestLedger::new();
    let n = ns("list");
    for i in 0..25 {
        t.clock.advance_ms(1000);
        let k = key(&format!("k{i:02}"));
        if i % 2 == 0 {
            t.claim_complete(&n, &k).await;
        } else {
            t.claim(&n, &k).await;
        }
    }
    // Same updated_at for two keys: the key breaks the tie, descending.
    t.clock.advance_ms(1000);
    t.claim(&n, &key("z-same")).await;
    t.claim(&n, &key("a-same")).await;

    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let page = t.list(&n, None, 10, cursor.clone()).await.expect("list");
        assert!(page.items.len() <= 10);
        seen.extend(page.items.iter().map(|r| r.key.as_str().to_owned()));
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(seen.len(), 27);
    assert_eq!(&seen[..3], ["z-same", "a-same", "k24"]);
    assert_eq!(seen.last().map(String::as_str), Some("k00"));

    let processing = t
        .list(&n, Some(State::Processing), 1000, None)
        .await
        .expect("list");
    assert_eq!(processing.items.len(), 14);
    assert!(processing.next_cursor.is_none());
    assert!(processing
        .items
        .iter()
        .all(|r| r.state == State::Processing));

    // limit 0 is clamped to 1
    let one = t
        .list(&n, Some(State::Completed), 0, None)
        .await
        .expect("list");
    assert_eq!(one.items.len(), 1);
    assert!(one.next_cursor.is_some());

    let bad = t.list(&n, None, 10, Some("not-a-cursor".into())).await;
    assert!(matches!(bad, Err(StoreError::InvalidCursor)), "{bad:?}");
}

#[tokio::test]
async fn namespace_defaults_patch_pause_resume_and_counts() {
    let t = TestLedger::new();
    let n = ns("ops");
    let info = t.store.namespace(&n).await.expect("namespace");
    assert!(!info.paused);
    assert_eq!(info.policy, idem_core::Policy::default());
    assert_eq!(info.counts.0.len(), State::ALL.len());

    let bad = t
        .store
        .update_namespace(&n, NamespaceChange::Patch(json!({"bogus": 1})), t.now())
        .await;
    assert!(matches!(bad, Err(StoreError::Policy(_))), "{bad:?}");

    let info = t
        .store
        .update_namespace(
            &n,
            NamespaceChange::Patch(json!({"retry": {"max_attempts": 3}, "daily_limit": 2})),
            t.now(),
        )
        .await
        .expect("patch");
    assert_eq!(info.policy.retry.max_attempts, 3);
    assert_eq!(info.policy.retry.base_ms, 1000);
    assert_eq!(info.policy.daily_limit, Some(2));

    t.claim(&n, &key("a")).await;
    t.claim_complete(&n, &key("b")).await;
    let limited = t.claim(&n, &key("c")).await;
    assert_eq!(limited.outcome, ClaimOutcome::Limited);
    assert!(limited.retry_after_ms.is_some());
    // What the console shows as today's acquisitions is the count the ceiling used.
    assert_eq!(t.acquired_today(&n).await, 2);

    let paused = t
        .store
        .update_namespace(&n, NamespaceChange::Pause, t.now())
        .await
        .expect("pause");
    assert!(paused.paused);
    assert_eq!(paused.policy.daily_limit, Some(2));
    assert_eq!(t.claim(&n, &key("b")).await.outcome, ClaimOutcome::Paused);
    let info = t
        .store
        .update_namespace(&n, NamespaceChange::Resume, t.now())
        .await
        .expect("resume");
    assert!(!info.paused);
    assert_eq!(info.counts.get(State::Processing), 1);
    assert_eq!(info.counts.get(State::Completed), 1);
    assert_eq!(info.counts.get(State::NeedsReview), 0);

    // The daily counter starts again the next UTC day.
    t.clock.advance_ms(crate::helpers::DAY);
    assert_eq!(t.claim(&n, &key("c")).await.outcome, ClaimOutcome::Acquired);
    assert_eq!(t.acquired_today(&n).await, 1);
}

#[tokio::test]
async fn stats_count_states_oldest_processing_and_review_depth() {
    let t = TestLedger::new();
    let n = ns("s");
    let empty = t.store.stats(t.now()).await.expect("stats");
    assert_eq!(empty.oldest_processing_seconds, 0.0);
    t.claim(&n, &key("old")).await;
    t.clock.advance_ms(90_000);
    t.claim(&n, &key("new")).await;
    t.claim_complete(&n, &key("done")).await;
    let c = t.claim(&n, &key("amb")).await;
    t.ledger
        .fail(
            &n,
            &key("amb"),
            FailRequest {
                cost: None,
                token: c.token.expect("token").secret(),
                kind: Some(Class::Ambiguous),
                http_status: None,
                retry_after_ms: None,
                sent: None,
                error: None,
            },
        )
        .await
        .expect("fail");
    t.clock.advance_ms(10_000);
    let s = t.store.stats(t.now()).await.expect("stats");
    assert_eq!(s.records.get(State::Processing), 2);
    assert_eq!(s.records.get(State::Completed), 1);
    assert_eq!(s.review_queue_depth, 1);
    assert_eq!(s.oldest_processing_seconds, 100.0);
}

#[tokio::test]
async fn tokens_are_stored_by_hash_and_counted() {
    let t = TestLedger::new();
    assert_eq!(t.store.token_count().await.expect("count"), 0);
    let hash = hash_secret("idem_secret");
    let token = NewApiToken {
        secret_hash: hash.clone(),
        role: Role::Operator,
        scope: "*".into(),
        label: Some("ci".into()),
        expires_at: None,
    };
    t.store
        .create_token(token.clone(), t.now())
        .await
        .expect("create");
    assert!(t.store.create_token(token, t.now()).await.is_err());
    let found = t
        .store
        .find_token(&hash)
        .await
        .expect("find")
        .expect("known");
    assert_eq!(found.role, Role::Operator);
    assert_eq!(found.scope, "*");
    assert_eq!(found.label.as_deref(), Some("ci"));
    assert!(t
        .store
        .find_token(&hash_secret("other"))
        .await
        .expect("find")
        .is_none());
    assert_eq!(t.store.token_count().await.expect("count"), 1);
    t.store.ping().await.expect("ping");
    assert_eq!(t.store.backend(), "sqlite");
}

#[tokio::test]
async fn reopen_keeps_records_events_namespaces_tokens_and_schema() {
    let t = TestLedger::new();
    let n = ns("keep");
    t.claim_complete(&n, &key("a")).await;
    t.claim(&n, &key("b")).await;
    t.store
        .update_namespace(&n, NamespaceChange::Pause, t.now())
        .await
        .expect("pause");
    t.store
        .create_token(
            NewApiToken {
                secret_hash: hash_secret("s"),
                role: Role::Admin,
                scope: "keep".into(),
                label: None,
                expires_at: None,
            },
            t.now(),
        )
        .await
        .expect("token");
    let before = t
        .store
        .get(&n, &key("a"))
        .await
        .expect("get")
        .expect("known");
    let path = t.path();
    let t = t.reopen();
    let after = t
        .store
        .get(&n, &key("a"))
        .await
        .expect("get")
        .expect("known");
    assert_eq!(after.record, before.record);
    assert_eq!(after.events, before.events);
    let info = t.store.namespace(&n).await.expect("namespace");
    assert!(info.paused);
    assert_eq!(info.counts.get(State::Processing), 1);
    assert_eq!(t.store.token_count().await.expect("count"), 1);
    let conn = rusqlite::Connection::open(path).expect("open raw");
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .expect("user_version");
    assert_eq!(version, idem_sqlite::schema_version());
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .expect("journal_mode");
    assert_eq!(mode, "wal");
}

/// The alert secret a patch sets lives in the secrets table, never in the policy text: one
/// version per namespace, replaced by a new secret, untouched by other patches, removed by
/// `null`; reads and the alert sender see it as before.
#[tokio::test]
async fn alert_secret_is_kept_in_the_secrets_table_not_in_the_policy_row() {
    const S1: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const S2: &str = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    let t = TestLedger::new();
    let n = ns("signed");
    let patch = |v: serde_json::Value| {
        t.store
            .update_namespace(&n, NamespaceChange::Patch(v), t.now())
    };
    let exposed = |p: &Policy| p.alert_secret.as_ref().map(|s| s.expose().to_owned());
    let info = patch(json!({"alert_url": "http://127.0.0.1:9/hook", "alert_secret": S1}))
        .await
        .expect("patch");
    assert_eq!(exposed(&info.policy).as_deref(), Some(S1));
    let raw = rusqlite::Connection::open(t.path()).expect("open raw");
    let policy_text = || -> String {
        raw.query_row(
            "SELECT policy FROM namespaces WHERE namespace = 'signed'",
            [],
            |r| r.get(0),
        )
        .expect("policy row")
    };
    let secrets = || -> Vec<(i64, String, String, String)> {
        raw.prepare("SELECT id, kind, owner, value FROM secrets ORDER BY id")
            .expect("prepare")
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows")
    };
    let text = policy_text();
    assert!(
        !text.contains("alert_secret") && !text.contains("MfKQ"),
        "{text}"
    );
    assert!(text.contains("http://127.0.0.1:9/hook"), "{text}");
    let first = secrets();
    assert_eq!(first.len(), 1, "{first:?}");
    let (_, kind, owner, value) = &first[0];
    assert_eq!(
        (kind.as_str(), owner.as_str(), value.as_str()),
        ("alert", "signed", S1)
    );

    // Another field: the secret is not rewritten.
    patch(json!({"lease_ms": 5000})).await.expect("patch");
    assert_eq!(secrets(), first);
    t.store
        .update_namespace(&n, NamespaceChange::Pause, t.now())
        .await
        .expect("pause");
    assert_eq!(secrets(), first);
    // A new secret replaces the old one.
    patch(json!({"alert_secret": S2})).await.expect("patch");
    let second = secrets();
    assert_eq!(second.len(), 1, "{second:?}");
    assert_eq!(second[0].3, S2);
    assert!(!policy_text().contains("alert_secret"));
    let read = t.store.namespace(&n).await.expect("read").policy;
    assert_eq!(exposed(&read).as_deref(), Some(S2));
    assert_eq!(read.lease_ms, 5000);
    // null removes it.
    patch(json!({"alert_secret": null})).await.expect("patch");
    assert_eq!(secrets(), []);
    assert_eq!(
        t.store
            .namespace(&n)
            .await
            .expect("read")
            .policy
            .alert_secret,
        None
    );
}

/// The per-namespace counters the console reads stay equal to a real count through claims,
/// state changes and deletes.
#[tokio::test]
async fn namespace_counts_follow_every_write() {
    let t = TestLedger::new();
    for (name, n) in [("a", 5), ("b", 3)] {
        let n_s = ns(name);
        for i in 0..n {
            let k = key(&format!("k{i}"));
            let c = t.claim(&n_s, &k).await;
            if i % 2 == 0 {
                let token = c.token.expect("token").secret();
                t.complete(&n_s, &k, token, None, None)
                    .await
                    .expect("complete");
            }
        }
    }
    let raw = rusqlite::Connection::open(t.path()).expect("open raw");
    raw.execute(
        "DELETE FROM records WHERE namespace = 'b' AND key = 'k0'",
        [],
    )
    .expect("delete");
    for name in ["a", "b"] {
        let info = t.store.namespace(&ns(name)).await.expect("namespace");
        for s in State::ALL {
            let counted: i64 = raw
                .query_row(
                    "SELECT COUNT(*) FROM records WHERE namespace = ?1 AND state = ?2",
                    rusqlite::params![name, s.as_str()],
                    |r| r.get(0),
                )
                .expect("count");
            assert_eq!(info.counts.get(s), counted as u64, "{name} {s:?}");
        }
    }
    let a = t.store.namespace(&ns("a")).await.expect("namespace");
    assert_eq!(
        (
            a.counts.get(State::Completed),
            a.counts.get(State::Processing)
        ),
        (3, 2)
    );
}

/// An effect's claim with `then_sent`: an acquisition records `sent` in the same step (one
/// commit); a claim that does not acquire (a replay) records nothing more.
#[tokio::test]
async fn an_effect_claim_records_sent_with_its_acquisition() {
    use idem_core::{Reply, RequestSummary};
    let t = TestLedger::new();
    let (n, k) = (ns("pay"), key("evt_9:charge"));
    let request = RequestSummary {
        method: "POST".into(),
        url: "https://api.example.com/v1/charges".into(),
        idempotency_header: Some("Idempotency-Key".into()),
    };
    let ex = t.claim_then(&n, &k, None, Some(request.clone())).await;
    assert_eq!(kinds(&ex.events), [EventType::Acquired, EventType::Sent]);
    let Ok(Reply::Claim(c)) = ex.reply else {
        panic!("a claim reply: {:?}", ex.reply);
    };
    assert_eq!(c.outcome, ClaimOutcome::Acquired);
    let rec = c.record.expect("record");
    assert_eq!(
        rec.request.as_ref(),
        Some(&request),
        "the reply shows the record as sent"
    );
    let got = t.store.get(&n, &k).await.expect("get").expect("known");
    assert_eq!(kinds(&got.events), [EventType::Acquired, EventType::Sent]);
    assert_eq!(got.record.request, Some(request.clone()));
    assert_eq!(got.record.version, rec.version);
    // The token still holds the record: the effect's report completes it.
    let token = c.token.expect("token").secret();
    t.complete(&n, &k, token, None, None)
        .await
        .expect("complete");

    // A replay does not acquire: nothing is recorded but its duplicate hit.
    let again = t.claim_then(&n, &k, None, Some(request)).await;
    assert_eq!(kinds(&again.events), [EventType::DuplicateHit]);
    let got = t.store.get(&n, &k).await.expect("get").expect("known");
    assert_eq!(
        kinds(&got.events),
        [
            EventType::Acquired,
            EventType::Sent,
            EventType::Completed,
            EventType::DuplicateHit
        ]
    );
}

/// An action's claim with its draft: saved and `sent` in the claim's step; a draft that
/// waits for approval is saved and nothing is recorded as sent; a record that already holds
/// a draft gets no follow-up (the caller decides what to deliver).
#[tokio::test]
async fn an_action_claim_saves_its_draft_and_records_sent_with_its_acquisition() {
    use idem_core::{Op, Reply, RequestSummary};
    use idem_store::ThenPrepare;
    let t = TestLedger::new();
    let n = ns("agents");
    let request = RequestSummary {
        method: "POST".into(),
        url: "https://api.example.com/v1/emails".into(),
        idempotency_header: None,
    };
    let draft = |approval_required| ThenPrepare {
        payload: json!({"to": "a@example.com", "text": "hello"}),
        approval_required,
    };
    let claim = |k: &'static str, approval: bool| {
        let (t, n, k, request) = (&t, &n, key(k), request.clone());
        async move {
            t.claim_then(n, &k, Some(draft(approval)), Some(request))
                .await
        }
    };
    let state_of = |ex: &idem_store::Executed| match &ex.reply {
        Ok(Reply::Claim(c)) => c.record.as_ref().map(|r| r.state),
        other => panic!("a claim reply: {other:?}"),
    };

    let sent = claim("ord_1:send", false).await;
    assert_eq!(
        kinds(&sent.events),
        [EventType::Acquired, EventType::Prepared, EventType::Sent]
    );
    assert_eq!(state_of(&sent), Some(State::Prepared));
    let got = t
        .store
        .get(&n, &key("ord_1:send"))
        .await
        .expect("get")
        .expect("known");
    assert_eq!(got.record.prepared_payload, Some(draft(false).payload));
    assert_eq!(got.record.request, Some(request.clone()));

    let held = claim("ord_2:send", true).await;
    assert_eq!(
        kinds(&held.events),
        [EventType::Acquired, EventType::Prepared]
    );
    assert_eq!(state_of(&held), Some(State::AwaitingApproval));
    let got = t
        .store
        .get(&n, &key("ord_2:send"))
        .await
        .expect("get")
        .expect("known");
    assert_eq!(
        got.record.request, None,
        "nothing is recorded as sent before approval"
    );

    // Approved: the delivering claim resumes a record that holds its draft.
    t.ledger
        .execute(
            &n,
            &key("ord_2:send"),
            Op::Approve { note: None },
            Some("ops".into()),
        )
        .await
        .expect("approve")
        .reply
        .expect("approved");
    let resumed = claim("ord_2:send", false).await;
    assert_eq!(kinds(&resumed.events), [EventType::Resumed]);
    assert_eq!(state_of(&resumed), Some(State::Prepared));
}

/// Replays answer before their `duplicate_hit` is written, yet a read right after the answers
/// finds every one of them (reads wait for the queued events).
#[tokio::test]
async fn a_read_right_after_concurrent_replays_shows_every_duplicate_hit() {
    let t = std::sync::Arc::new(TestLedger::new());
    let (n, k) = (ns("pay"), key("evt_many:charge"));
    t.claim_complete(&n, &k).await;
    let replays: Vec<_> = (0..50)
        .map(|_| {
            let (t, n, k) = (t.clone(), n.clone(), k.clone());
            tokio::spawn(async move { t.claim(&n, &k).await.outcome })
        })
        .collect();
    for r in replays {
        assert_eq!(r.await.expect("task"), ClaimOutcome::Completed);
    }
    let got = t.store.get(&n, &k).await.expect("get").expect("known");
    let hits = got
        .events
        .iter()
        .filter(|e| e.kind == EventType::DuplicateHit)
        .count();
    assert_eq!(hits, 50, "{:?}", kinds(&got.events));
}
