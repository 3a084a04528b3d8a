//! The one-round-trip paths (namespace cache, speculative fresh claims, remembered records)
//! against a second store on the same database that changes what the first one remembers.

use std::sync::Arc;

use idem_core::{
    ClaimOutcome, CompleteRequest, EventType, HeartbeatRequest, Key, Namespace, OpError, State,
    TestClock, Timestamp,
};
use idem_postgres::{FastPathStats, PgOptions, PgStore};
use idem_store::{Ledger, LedgerError, NamespaceChange, Store};
use serde_json::json;

use crate::helpers::*;

const DAY_MS: i64 = 86_400_000;

fn now(clock: &TestClock) -> Timestamp {
    idem_core::Clock::now(clock)
}

fn complete_req(token: String, result: serde_json::Value) -> CompleteRequest {
    CompleteRequest {
        cost: None,
        token,
        result: Some(result),
        external_ref: None,
    }
}

/// Patches `n`'s policy through `store` at the clock's time.
async fn patch(store: &PgStore, n: &Namespace, p: serde_json::Value, clock: &TestClock) {
    store
        .update_namespace(n, NamespaceChange::Patch(p), now(clock))
        .await
        .expect("patch");
}

/// Asserts that a claim of `k` through `l` replays a completion with `result`.
async fn assert_replays(l: &Ledger, n: &Namespace, k: &Key, result: serde_json::Value) {
    let dup = l.claim(n, k, claim_req()).await.expect("dup");
    assert_eq!(dup.outcome, ClaimOutcome::Completed);
    assert_eq!(dup.record.and_then(|r| r.result), Some(result));
}

/// Asserts that `store`'s one operation since `before` found the record with its speculative
/// statement, without a separate read.
fn assert_found_speculatively(store: &PgStore, before: FastPathStats) {
    let after = store.fast_path_stats();
    assert_eq!(after.speculative_existing, before.speculative_existing + 1);
    assert_eq!(after.full_reads, before.full_reads, "{after:?}");
}

/// Claims and completes a fresh key through `l`.
async fn pair(l: &idem_store::Ledger, n: &str, k: &str, result: serde_json::Value) {
    let c = l.claim(&ns(n), &key(k), claim_req()).await.expect("claim");
    assert_eq!(c.outcome, ClaimOutcome::Acquired, "{k}");
    l.complete(
        &ns(n),
        &key(k),
        complete_req(c.token.expect("token").secret(), result),
    )
    .await
    .expect("complete");
}

#[tokio::test]
async fn warm_pair_and_duplicate_take_one_statement_each() {
    let Some((db, store, clock, l)) = setup("warm_pair_one_statement").await else {
        return;
    };
    pair(&l, "hot", "warm-up", json!(1)).await; // reads the namespace settings once
    let before = store.fast_path_stats();
    pair(&l, "hot", "k", json!({"ok": true})).await;
    assert_replays(&l, &ns("hot"), &key("k"), json!({"ok": true})).await;
    let after = store.fast_path_stats();
    assert_eq!(after.full_reads, before.full_reads, "{after:?}");
    assert_eq!(after.speculative_inserts, before.speculative_inserts + 1);
    assert_eq!(after.cached_writes, before.cached_writes + 2);
    let got = store
        .get(&ns("hot"), &key("k"))
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(
        kinds(&got.events),
        [
            EventType::Acquired,
            EventType::Completed,
            EventType::DuplicateHit
        ]
    );
    assert_eq!(got.record.version, 2);

    // Another instance that never saw the key: its speculative insert finds the record and
    // decides on it (a duplicate), without a separate read.
    let (other, lo) = store_and_ledger(&db, &clock).await;
    pair(&lo, "hot", "warm-up-2", json!(1)).await;
    let before = other.fast_path_stats();
    assert_replays(&lo, &ns("hot"), &key("k"), json!({"ok": true})).await;
    assert_found_speculatively(&other, before);
    let got = other
        .get(&ns("hot"), &key("k"))
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(got.events.len(), 4);
    assert_eq!(got.record.version, 2);
}

/// The row of event `id` under key `k` in namespace `hooks` (source `src`, no body).
fn intake_row(l: &idem_store::Ledger, k: &str, id: &str) -> idem_store::NewIntakeEvent {
    idem_store::NewIntakeEvent {
        namespace: "hooks".into(),
        key: k.into(),
        source: "src".into(),
        event_id: Some(id.into()),
        content_type: None,
        headers: "{}".into(),
        body: vec![],
        received_at: l.now(),
        destinations: None,
        delivered_at: None,
        event_key: None,
        destination: None,
    }
}

/// A webhook delivery with its rider (`Ledger::execute_riding`).
async fn receive(l: &idem_store::Ledger, k: &str) -> idem_store::Executed {
    let rider = idem_store::Rider {
        intake: idem_store::NewIntakeEvent {
            body: vec![b'x'; 1024],
            ..intake_row(l, k, k)
        },
        forward: Some(idem_store::NewOutboxItem {
            kind: idem_store::OutboxKind::Forward,
            namespace: "hooks".into(),
            key: k.into(),
            dedupe: "0".into(),
            payload: b"{}".to_vec(),
            due_at: l.now(),
        }),
        deliveries: vec![],
    };
    let op = idem_core::Op::IntakeReceive(idem_core::IntakeReceiveRequest {
        source: "src".into(),
        event_id: Some(k.into()),
        delivers: true,
        destination: None,
        collides_with: None,
    });
    l.execute_riding(&ns("hooks"), &key(k), op, rider)
        .await
        .expect("receive")
}

#[tokio::test]
async fn warm_intake_receive_and_duplicate_take_one_statement_each() {
    let Some((db, store, clock, l)) = setup("warm_intake_one_statement").await else {
        return;
    };
    assert!(receive(&l, "warm-up").await.rider_stored); // reads the namespace settings once
    let before = store.fast_path_stats();
    let first = receive(&l, "evt_1").await;
    assert!(first.rider_stored);
    let dup = receive(&l, "evt_1").await;
    assert!(!dup.rider_stored);
    assert!(matches!(
        dup.reply,
        Ok(idem_core::Reply::Intake(
            idem_core::IntakeReply::Duplicate { .. }
        ))
    ));
    let after = store.fast_path_stats();
    assert_eq!(after.full_reads, before.full_reads, "{after:?}");
    assert_eq!(after.speculative_inserts, before.speculative_inserts + 1);
    assert_eq!(after.cached_writes, before.cached_writes + 1);
    // The row and the forward item went with the record, once.
    let row = store
        .intake_event("hooks", "evt_1")
        .await
        .expect("row")
        .expect("stored");
    assert_eq!(row.body.map(|b| b.len()), Some(1024));
    assert_eq!(row.state, Some(State::Prepared));
    let items = store
        .outbox_claim(idem_store::OutboxClaim {
            kind: idem_store::OutboxKind::Forward,
            now: now(&clock),
            limit: 10,
            lease_ms: 1_000,
        })
        .await
        .expect("claim");
    let mut keys: Vec<&str> = items.iter().map(|i| i.key.as_str()).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["evt_1", "warm-up"]);

    // Another instance: its speculative statement finds the record and answers duplicate
    // without a separate read and without a row.
    let (other, lo) = store_and_ledger(&db, &clock).await;
    assert!(receive(&lo, "warm-up-2").await.rider_stored);
    let before = other.fast_path_stats();
    let dup = receive(&lo, "evt_1").await;
    assert!(!dup.rider_stored);
    assert_found_speculatively(&other, before);
    let got = other
        .get(&ns("hooks"), &key("evt_1"))
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(
        kinds(&got.events),
        [
            EventType::Prepared,
            EventType::DuplicateHit,
            EventType::DuplicateHit
        ]
    );
}

/// The rider of a delivery's first pass (`Ledger::execute_riding` as the delivery worker
/// sends it), for the delivery of event `event` to `crm` under `event:crm`.
async fn make_delivery(l: &idem_store::Ledger, event: &str) -> idem_store::Executed {
    let d = format!("{event}:crm");
    let rider = idem_store::Rider {
        intake: idem_store::NewIntakeEvent {
            event_key: Some(event.into()),
            destination: Some("crm".into()),
            ..intake_row(l, &d, event)
        },
        forward: None,
        deliveries: vec![],
    };
    let op = idem_core::Op::IntakeReceive(idem_core::IntakeReceiveRequest {
        source: "src".into(),
        event_id: Some(event.into()),
        delivers: true,
        destination: Some("crm".into()),
        collides_with: None,
    });
    l.execute_riding(&ns("hooks"), &key(&d), op, rider)
        .await
        .expect("make the delivery")
}

#[tokio::test]
async fn a_deliverys_first_pass_over_its_own_row_takes_one_statement() {
    let Some((_db, store, _clock, l)) = setup("delivery_first_pass_one_statement").await else {
        return;
    };
    // Reads the namespace settings once.
    assert!(receive(&l, "warm-up").await.rider_stored);
    // An event fanned out to crm: its row and the delivery's row, written together.
    assert!(receive_fanned_out(&l, "evt_f").await.rider_stored);
    let before = store.fast_path_stats();
    let made = make_delivery(&l, "evt_f").await;
    assert!(
        matches!(
            made.reply,
            Ok(idem_core::Reply::Intake(
                idem_core::IntakeReply::Accepted { .. }
            ))
        ),
        "{:?}",
        made.reply
    );
    // The row was the delivery's own: kept, not stored again.
    assert!(!made.rider_stored);
    let after = store.fast_path_stats();
    assert_eq!(after.speculative_inserts, before.speculative_inserts + 1);
    assert_eq!(
        (after.full_reads, after.guard_misses),
        (before.full_reads, before.guard_misses),
        "{after:?}"
    );
    let rec = store
        .get(&ns("hooks"), &key("evt_f:crm"))
        .await
        .expect("get")
        .expect("made");
    assert_eq!(rec.record.state, State::Prepared);
    let row = store
        .intake_event("hooks", "evt_f:crm")
        .await
        .expect("row")
        .expect("kept");
    assert_eq!(
        (row.event_key.as_deref(), row.destination.as_deref()),
        (Some("evt_f"), Some("crm"))
    );
}

#[tokio::test]
async fn a_claimed_forward_items_record_is_started_in_one_statement() {
    let Some((db, store, clock, l)) = setup("claimed_items_records").await else {
        return;
    };
    // Received through another instance: this one has not seen the record.
    let (_other, lo) = store_and_ledger(&db, &clock).await;
    assert!(receive(&lo, "evt_c").await.rider_stored);
    assert!(receive(&l, "warm-up").await.rider_stored); // reads the namespace settings once
    let items = store
        .outbox_claim(idem_store::OutboxClaim {
            kind: idem_store::OutboxKind::Forward,
            now: now(&clock),
            limit: 10,
            lease_ms: 1_000,
        })
        .await
        .expect("claim");
    assert!(items.iter().any(|i| i.key == "evt_c"), "{items:?}");
    let before = store.fast_path_stats();
    let started = l
        .execute(
            &ns("hooks"),
            &key("evt_c"),
            idem_core::Op::ForwardStart(idem_core::ForwardStartRequest {
                lease_ms: 1_000,
                expect: None,
            }),
            None,
        )
        .await
        .expect("start");
    assert!(
        matches!(
            started.reply,
            Ok(idem_core::Reply::Intake(
                idem_core::IntakeReply::Started { .. }
            ))
        ),
        "{:?}",
        started.reply
    );
    let after = store.fast_path_stats();
    assert_eq!(after.cached_writes, before.cached_writes + 1, "{after:?}");
    assert_eq!(after.full_reads, before.full_reads, "{after:?}");
}

/// Event `k` of source `src`, fanned out to `crm` (its delivery's row and item ride along).
async fn receive_fanned_out(l: &idem_store::Ledger, k: &str) -> idem_store::Executed {
    let d = format!("{k}:crm");
    let rider = idem_store::Rider {
        intake: idem_store::NewIntakeEvent {
            body: vec![b'x'; 64],
            destinations: Some(r#"["crm"]"#.into()),
            delivered_at: Some(l.now()),
            ..intake_row(l, k, k)
        },
        forward: None,
        deliveries: vec![idem_store::NewDelivery {
            key: d.clone(),
            destination: "crm".into(),
            item: idem_store::NewOutboxItem {
                kind: idem_store::OutboxKind::Forward,
                namespace: "hooks".into(),
                key: d,
                dedupe: "0".into(),
                payload: b"{}".to_vec(),
                due_at: l.now(),
            },
        }],
    };
    let op = idem_core::Op::IntakeReceive(idem_core::IntakeReceiveRequest {
        source: "src".into(),
        event_id: Some(k.into()),
        delivers: false,
        destination: None,
        collides_with: None,
    });
    l.execute_riding(&ns("hooks"), &key(k), op, rider)
        .await
        .expect("receive")
}

#[tokio::test]
async fn namespace_change_through_another_store_is_honoured_on_the_next_operation() {
    let Some((_db, clock, [(a, la), (b, _)])) = setup_two("stale_namespace_cache").await else {
        return;
    };
    let n = ns("pol");
    pair(&la, "pol", "done", json!(1)).await;
    pair(&la, "pol", "warm", json!(2)).await;
    assert!(a.fast_path_stats().speculative_inserts >= 1);

    // Paused through B: A's cached settings say "not paused".
    b.update_namespace(&n, NamespaceChange::Pause, now(&clock))
        .await
        .expect("pause");
    let misses = a.fast_path_stats().guard_misses;
    let fresh = la.claim(&n, &key("new"), claim_req()).await.expect("claim");
    assert_eq!(fresh.outcome, ClaimOutcome::Paused);
    assert!(a.fast_path_stats().guard_misses > misses);
    let dup = la.claim(&n, &key("done"), claim_req()).await.expect("dup");
    assert_eq!(dup.outcome, ClaimOutcome::Paused);
    assert!(b.get(&n, &key("new")).await.expect("get").is_none());

    b.update_namespace(&n, NamespaceChange::Resume, now(&clock))
        .await
        .expect("resume");
    let c = la.claim(&n, &key("new"), claim_req()).await.expect("claim");
    assert_eq!(c.outcome, ClaimOutcome::Acquired);

    // A policy patch through B changes the next fresh claim on A.
    patch(&b, &n, json!({"lease_ms": 1234}), &clock).await;
    let c = la
        .claim(&n, &key("short"), claim_req())
        .await
        .expect("claim");
    assert_eq!(c.outcome, ClaimOutcome::Acquired);
    let rec = c.record.expect("record");
    assert_eq!(rec.lease_expires_at, Some(now(&clock).plus_ms(1234)));

    // A daily limit set through B is counted on A (the limit takes the read path), with the
    // acquisitions A made before it was set: room for one more.
    let today = b
        .namespace_activity(&n, now(&clock))
        .await
        .expect("activity")
        .acquired_today;
    assert_eq!(today, 4, "done, warm, new and short");
    patch(&b, &n, json!({"daily_limit": today + 1}), &clock).await;
    let first = la.claim(&n, &key("l1"), claim_req()).await.expect("claim");
    assert_eq!(first.outcome, ClaimOutcome::Acquired);
    let second = la.claim(&n, &key("l2"), claim_req()).await.expect("claim");
    assert_eq!(second.outcome, ClaimOutcome::Limited);

    // A namespace row created by B where A remembered "no row" (defaults) is seen too.
    let m = ns("later");
    pair(&la, "later", "x", json!(1)).await;
    b.update_namespace(&m, NamespaceChange::Pause, now(&clock))
        .await
        .expect("pause");
    let c = la.claim(&m, &key("y"), claim_req()).await.expect("claim");
    assert_eq!(c.outcome, ClaimOutcome::Paused);
}

#[tokio::test]
async fn record_moved_by_another_store_is_decided_again_on_the_stored_record() {
    let Some((_db, clock, [(a, la), (b, lb)])) = setup_two("stale_record_cache").await else {
        return;
    };
    let n = ns("jobs");
    pair(&la, "jobs", "warm", json!(0)).await;

    // A holds the lease (and remembers the record); it expires and B reclaims.
    let first = claim_with_lease(&la, &n, &key("k"), 1000).await;
    let stale = first.token.expect("token").secret();
    clock.advance_ms(1500);
    let second = lb.claim(&n, &key("k"), claim_req()).await.expect("claim");
    assert_eq!(second.outcome, ClaimOutcome::Acquired);
    let fresh = second.token.expect("token").secret();

    let misses = a.fast_path_stats().guard_misses;
    let hb = la
        .heartbeat(
            &n,
            &key("k"),
            HeartbeatRequest {
                token: stale.clone(),
                lease_ms: None,
            },
        )
        .await;
    assert!(
        matches!(hb, Err(LedgerError::Op(OpError::LeaseLost))),
        "{hb:?}"
    );
    assert!(a.fast_path_stats().guard_misses > misses);
    let lost = la
        .complete(&n, &key("k"), complete_req(stale, json!("a")))
        .await;
    assert!(matches!(lost, Err(LedgerError::Op(OpError::LeaseLost))));
    let c = la.claim(&n, &key("k"), claim_req()).await.expect("claim");
    assert_eq!(c.outcome, ClaimOutcome::InFlight);
    let got = b.get(&n, &key("k")).await.expect("get").expect("exists");
    assert_eq!(got.record.state, State::Processing);
    assert_eq!(got.record.attempt, 2);
    assert_eq!(
        kinds(&got.events),
        [
            EventType::Acquired,
            EventType::Resumed,
            EventType::LeaseLost,
            EventType::LeaseLost,
            EventType::InFlight
        ]
    );

    // B completes; A (which remembers attempt 2 processing) replays B's result.
    lb.complete(&n, &key("k"), complete_req(fresh, json!("b")))
        .await
        .expect("complete");
    assert_replays(&la, &n, &key("k"), json!("b")).await;
}

#[tokio::test]
async fn records_moved_by_the_janitor_are_decided_again() {
    let Some((_db, clock, [(a, la), (b, lb)])) = setup_two("janitor_moves_cached_records").await
    else {
        return;
    };
    let n = ns("jan");
    patch(&a, &n, json!({"lease_expiry": "review"}), &clock).await;

    // Sweep (through B) moves A's expired lease to review; A's late completion is then
    // decided on needs_review, not on the processing record A remembers.
    let c = claim_with_lease(&la, &n, &key("late"), 1000).await;
    let token = c.token.expect("token").secret();
    clock.advance_ms(2000);
    let swept = b.sweep_once(now(&clock), 10).await.expect("sweep");
    assert_eq!(swept.moved_to_review, 1);
    la.complete(&n, &key("late"), complete_req(token, json!("late")))
        .await
        .expect("late completion");
    let got = b.get(&n, &key("late")).await.expect("get").expect("exists");
    let last = got.events.last().expect("events");
    assert_eq!(last.kind, EventType::Completed);
    assert_eq!(last.from_state, Some(State::NeedsReview));
    assert_eq!(
        last.note.as_deref(),
        Some("late completion by the lease holder resolved the review")
    );

    // Retention (through B) drops a result A remembers: A's duplicate replays the tombstone.
    pair(&la, "jan", "kept", json!({"big": "result"})).await;
    let rep = b
        .retention_once(now(&clock).plus_ms(31 * DAY_MS), 100)
        .await
        .expect("retention");
    assert!(rep.results_expired >= 1);
    let dup = la.claim(&n, &key("kept"), claim_req()).await.expect("dup");
    assert_eq!(dup.outcome, ClaimOutcome::Completed);
    let rec = dup.record.expect("record");
    assert!(rec.result_expired);
    assert_eq!(rec.result, None);

    // Retention deletes the tombstone and B creates the key again, up to the same version A
    // remembers: only created_at tells the two apart, and A must replay B's result.
    pair(&la, "jan", "reborn", json!("first life")).await;
    clock.advance_ms(401 * DAY_MS);
    let rep = b.retention_once(now(&clock), 100).await.expect("retention");
    assert!(rep.tombstones_deleted >= 1);
    assert!(b.get(&n, &key("reborn")).await.expect("get").is_none());
    pair(&lb, "jan", "reborn", json!("second life")).await;
    let misses = a.fast_path_stats().guard_misses;
    assert_replays(&la, &n, &key("reborn"), json!("second life")).await;
    assert!(a.fast_path_stats().guard_misses > misses);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_fresh_claims_from_two_stores_acquire_exactly_once() {
    let Some(db) = PgDb::create("concurrent_speculative_claims") else {
        return;
    };
    let (a, b) = (db.store_with(4).await, db.store_with(4).await);
    let clock = TestClock::new(T0);
    let (la, lb) = (
        Arc::new(ledger(a.clone(), &clock)),
        Arc::new(ledger(b.clone(), &clock)),
    );
    pair(&la, "race", "warm-a", json!(0)).await;
    pair(&lb, "race", "warm-b", json!(0)).await;
    let mut winners = Vec::new();
    for i in 0..60 {
        let k = format!("k{i}");
        // Two claimers per store, all at once.
        let claims = [la.clone(), lb.clone(), la.clone(), lb.clone()].map(|l| {
            let k = k.clone();
            tokio::spawn(async move { l.claim(&ns("race"), &key(&k), claim_req()).await })
        });
        let mut acquired = Vec::new();
        for (i, t) in claims.into_iter().enumerate() {
            let c = t.await.expect("task").expect("claim");
            match c.outcome {
                ClaimOutcome::Acquired => acquired.push((i, c.token.expect("token").secret())),
                ClaimOutcome::InFlight => {}
                other => panic!("{k}: unexpected {other:?}"),
            }
        }
        assert_eq!(acquired.len(), 1, "{k}: {acquired:?}");
        winners.push((k, acquired.remove(0)));
    }
    let (sa, sb) = (a.fast_path_stats(), b.fast_path_stats());
    assert!(
        sa.speculative_inserts + sb.speculative_inserts >= 60,
        "{sa:?} {sb:?}"
    );
    // The winner completes on its store; the other store replays the result.
    for (k, (i, token)) in winners {
        let (mine, other) = if i % 2 == 0 { (&la, &lb) } else { (&lb, &la) };
        mine.complete(&ns("race"), &key(&k), complete_req(token, json!(k)))
            .await
            .expect("complete");
        let dup = other
            .claim(&ns("race"), &key(&k), claim_req())
            .await
            .expect("dup");
        assert_eq!(dup.outcome, ClaimOutcome::Completed);
        assert_eq!(dup.record.and_then(|r| r.result), Some(json!(k)));
        let got = a
            .get(&ns("race"), &key(&k))
            .await
            .expect("get")
            .expect("exists");
        assert_eq!(got.record.attempt, 1);
        assert_eq!(
            got.events.len(),
            6,
            "acquired, 3 in_flight, completed, duplicate_hit"
        );
    }
}

#[tokio::test]
async fn record_cache_can_be_turned_off() {
    let Some(db) = PgDb::create("record_cache_off") else {
        return;
    };
    let store = Arc::new(
        PgStore::connect_with(
            db.url(),
            PgOptions {
                max_connections: 2,
                record_cache: 0,
                ..PgOptions::default()
            },
        )
        .await
        .expect("connect"),
    );
    let clock = TestClock::new(T0);
    let l = ledger(store.clone(), &clock);
    pair(&l, "off", "a", json!(1)).await;
    pair(&l, "off", "b", json!(2)).await;
    let dup = l
        .claim(&ns("off"), &key("b"), claim_req())
        .await
        .expect("dup");
    assert_eq!(dup.outcome, ClaimOutcome::Completed);
    let s = store.fast_path_stats();
    assert_eq!(s.cached_writes, 0, "{s:?}");
    assert_eq!(s.speculative_inserts, 1, "{s:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_young_records_table_gets_statistics_so_lookups_use_the_primary_key() {
    let Some(db) = PgDb::create("first_analyze") else {
        return;
    };
    let store = db.store().await;
    let clock = TestClock::new(T0);
    let l = Arc::new(ledger(store.clone(), &clock));
    let tasks: Vec<_> = (0..4)
        .map(|t| {
            let l = l.clone();
            tokio::spawn(async move {
                for i in 0..260 {
                    let c = l
                        .claim(&ns("young"), &key(&format!("k{t}-{i}")), claim_req())
                        .await
                        .expect("claim");
                    assert_eq!(c.outcome, ClaimOutcome::Acquired);
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("task");
    }
    let (client, _conn) = db.raw().await;
    let mut analyzed = false;
    for _ in 0..100 {
        let row = client
            .query_one(
                "SELECT reltuples::BIGINT FROM pg_class WHERE oid = 'records'::regclass",
                &[],
            )
            .await
            .expect("reltuples");
        if row.get::<_, i64>(0) > 0 {
            analyzed = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(analyzed, "records was not analyzed after 1000 operations");
    // Without statistics this plan walks records_state_list (see PgStore::first_analyze).
    client
        .batch_execute(
            "PREPARE lookup(text, text) AS SELECT version FROM records \
             WHERE namespace = $1 AND key = $2; SET plan_cache_mode = force_generic_plan",
        )
        .await
        .expect("prepare");
    let plan = plan_of(&client, "EXPLAIN EXECUTE lookup('young', 'k0-0')").await;
    assert!(plan.contains("records_pkey"), "{plan}");
}
