//! Riders: the intake row and its forward item stored exactly with the record write they ride
//! on (once, also under concurrent first deliveries), the report rider that moves with a
//! forward's outcome, and intake updates that append attempts and set `delivered_at`.
//!
//! Its cases only read and write the fresh database they are given; they must never share
//! state with another case or depend on the order cases run in.

use std::sync::Arc;

use idem_core::{
    ForwardOutcome, ForwardReportRequest, ForwardRetry, ForwardStartRequest, IntakeReceiveRequest,
    IntakeReply, Reply,
};
use idem_core::{Op, State, Timestamp};
use idem_store::{
    Delivered, Executed, IntakeUpdate, NewIntakeEvent, OutboxItem, OutboxKind, OutboxState,
    ReportRider, Rider,
};
use serde_json::json;
use tokio::sync::Barrier;

use super::{claim, forward, item};
use crate::contract::{key, ok_reply, Backend, DAY_MS, H};

/// A webhook delivery of event `id` (`None`: held) of source `src` on record `k`, with its
/// row (body `body`) and, unless held, its forward item riding on the record's creation.
async fn receive(h: &H, k: &str, id: Option<&str>, body: &[u8]) -> Executed {
    let rider = Rider {
        intake: NewIntakeEvent {
            namespace: h.ns.as_str().to_owned(),
            key: k.to_owned(),
            source: "src".into(),
            event_id: id.map(str::to_owned),
            content_type: Some("application/json".into()),
            headers: "{}".into(),
            body: body.to_vec(),
            received_at: h.now(),
            destinations: None,
            delivered_at: None,
            event_key: None,
            destination: None,
        },
        forward: id.map(|_| forward(h, k, "0")),
        deliveries: vec![],
    };
    let op = Op::IntakeReceive(IntakeReceiveRequest {
        source: "src".into(),
        event_id: id.map(str::to_owned),
        delivers: true,
        destination: None,
        collides_with: None,
    });
    h.ledger
        .execute_riding(&h.ns, &key(k), op, rider)
        .await
        .unwrap_or_else(|e| panic!("intake receive {k}: {e}"))
}

fn intake_reply(e: &Executed) -> &'static str {
    match &e.reply {
        Ok(Reply::Intake(IntakeReply::Accepted { .. })) => "accepted",
        Ok(Reply::Intake(IntakeReply::Held { .. })) => "held",
        Ok(Reply::Intake(IntakeReply::Duplicate { .. })) => "duplicate",
        Ok(Reply::Intake(IntakeReply::Collision { .. })) => "collision",
        other => panic!("not an intake reply: {other:?}"),
    }
}

async fn row_body(h: &H, k: &str) -> Option<Vec<u8>> {
    h.store
        .intake_event(h.ns.as_str(), k)
        .await
        .unwrap_or_else(|e| panic!("intake_event: {e}"))
        .map(|r| r.body.unwrap_or_default())
}

/// The rider (an inbound event's row and forward item) is written by the step that creates
/// the record and by no other: a duplicate stores nothing, a held event no forward item, a
/// key whose record was made otherwise no row. Several fresh keys, so that a backend's fast
/// path (PostgreSQL's speculative insert once the namespace is cached) is taken as well as
/// its normal one.
pub async fn a_rider_is_stored_exactly_with_the_record_it_rides_on<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "hooks").await;
    for i in 0..4 {
        let k = format!("src:evt_{i}");
        let first = receive(&h, &k, Some(&format!("evt_{i}")), b"first").await;
        assert_eq!(
            (intake_reply(&first), first.rider_stored),
            ("accepted", true),
            "{k}"
        );
        assert_eq!(h.rec(&key(&k)).await.state, State::Prepared);
        let again = receive(&h, &k, Some(&format!("evt_{i}")), b"second").await;
        assert_eq!(
            (intake_reply(&again), again.rider_stored),
            ("duplicate", false),
            "{k}"
        );
        assert_eq!(
            row_body(&h, &k).await.as_deref(),
            Some(&b"first"[..]),
            "{k}"
        );
    }
    // Exactly one forward item per event, none for the duplicates.
    let items = claim(&h, OutboxKind::Forward, 100).await;
    let mut keys: Vec<&str> = items.iter().map(|i| i.key.as_str()).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["src:evt_0", "src:evt_1", "src:evt_2", "src:evt_3"]);

    // Held (no event id): the row is stored, the record goes to review, nothing is forwarded.
    let held = receive(&h, "src:sha256:ab", None, b"held").await;
    assert_eq!((intake_reply(&held), held.rider_stored), ("held", true));
    assert_eq!(h.rec(&key("src:sha256:ab")).await.state, State::NeedsReview);
    assert_eq!(
        row_body(&h, "src:sha256:ab").await.as_deref(),
        Some(&b"held"[..])
    );
    assert!(claim(&h, OutboxKind::Forward, 100).await.is_empty());

    // A record made by another operation: no duplicate of it (the event is not that record)
    // but a collision, and nothing is stored.
    let taken = key("src:evt_taken");
    ok_reply(&h.exec(&taken, Op::Claim(Default::default()), None).await);
    let late = receive(&h, "src:evt_taken", Some("evt_taken"), b"late").await;
    assert_eq!(
        (intake_reply(&late), late.rider_stored),
        ("collision", false)
    );
    assert_eq!(row_body(&h, "src:evt_taken").await, None);
    assert!(claim(&h, OutboxKind::Forward, 100).await.is_empty());
}

/// Receives event `parent` fanned out to `crm`, its delivery's row under `d` riding along,
/// and answers the rider it stored.
async fn receive_fanned_out(h: &H, parent: &str, d: &str) -> Rider {
    let rider = Rider {
        intake: NewIntakeEvent {
            namespace: h.ns.as_str().to_owned(),
            key: parent.to_owned(),
            source: "src".into(),
            event_id: Some(parent.to_owned()),
            content_type: None,
            headers: "{}".into(),
            body: b"parent".to_vec(),
            received_at: h.now(),
            destinations: Some(r#"["crm"]"#.into()),
            delivered_at: Some(h.now()),
            event_key: None,
            destination: None,
        },
        forward: None,
        deliveries: vec![idem_store::NewDelivery {
            key: d.to_owned(),
            destination: "crm".into(),
            item: forward(h, d, "0"),
        }],
    };
    let op = Op::IntakeReceive(IntakeReceiveRequest {
        source: "src".into(),
        event_id: Some(parent.to_owned()),
        delivers: false,
        destination: None,
        collides_with: None,
    });
    let first = h
        .ledger
        .execute_riding(&h.ns, &key(parent), op, rider.clone())
        .await
        .unwrap_or_else(|e| panic!("receive {parent}: {e}"));
    assert!(first.rider_stored, "{parent}");
    rider
}

/// A key whose row is another record's (the row of a delivery of another event, written
/// before its record is made) is not an event's to take: the receive writes nothing — no
/// record, no row, no item — and says `rider_stored: false`. A delivery's row is written
/// only where no record holds its key (its item goes all the same). Several keys, so that a
/// backend's fast path is taken as well as its normal one.
pub async fn a_key_holding_another_records_row_is_not_taken_by_a_receive<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "hooks").await;
    // A claim holds `p3:crm`: the delivery of `p3` to crm gets no row there.
    ok_reply(
        &h.exec(&key("p3:crm"), Op::Claim(Default::default()), None)
            .await,
    );
    for i in 0..4 {
        let (parent, d) = (format!("p{i}"), format!("p{i}:crm"));
        let mut rider = receive_fanned_out(&h, &parent, &d).await;
        if i == 3 {
            // Claimed: no delivery row under the claim's key.
            let row = h.store.intake_event(h.ns.as_str(), &d).await.ok().flatten();
            assert!(row.is_none(), "{row:?}");
            continue;
        }
        // Now the event whose id is the delivery's key, before the delivery's record exists.
        rider.intake.key = d.clone();
        rider.intake.event_id = Some(d.clone());
        rider.intake.body = b"other".to_vec();
        rider.intake.destinations = None;
        rider.intake.delivered_at = None;
        rider.forward = Some(forward(&h, &d, "other"));
        rider.deliveries = vec![];
        let op = Op::IntakeReceive(IntakeReceiveRequest {
            source: "src".into(),
            event_id: Some(d.clone()),
            delivers: true,
            destination: None,
            collides_with: None,
        });
        let other = h
            .ledger
            .execute_riding(&h.ns, &key(&d), op, rider)
            .await
            .unwrap_or_else(|e| panic!("receive {d}: {e}"));
        assert!(!other.rider_stored, "{d}");
        let rec = h.store.get(&h.ns, &key(&d)).await;
        assert!(matches!(rec, Ok(None)), "{d}: {rec:?}");
        let row = h
            .store
            .intake_event(h.ns.as_str(), &d)
            .await
            .ok()
            .flatten()
            .expect("the delivery's row");
        assert_eq!(
            (row.event_key.as_deref(), row.destination.as_deref()),
            (Some(parent.as_str()), Some("crm")),
            "{d}"
        );
    }
    // One item per delivery (the claimed key's too), none for the event that was not taken.
    let items = claim(&h, OutboxKind::Forward, 100).await;
    let mut got: Vec<(&str, &str)> = items
        .iter()
        .map(|i| (i.key.as_str(), i.dedupe.as_str()))
        .collect();
    got.sort_unstable();
    assert_eq!(
        got,
        [
            ("p0:crm", "0"),
            ("p1:crm", "0"),
            ("p2:crm", "0"),
            ("p3:crm", "0")
        ]
    );
}

/// A delivery's row is written with its event's; the delivery's first pass makes its record
/// over that row, which is its own ([`idem_store::NewIntakeEvent::is_same`]): the record is
/// made, the row is kept as it is (`rider_stored: false`, nothing else written), and a second
/// pass is a duplicate. Several deliveries, so that a backend's fast path is taken as well as
/// its normal one.
pub async fn a_deliverys_record_is_made_over_its_own_row<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "hooks").await;
    for i in 0..4 {
        let (parent, d) = (format!("q{i}"), format!("q{i}:crm"));
        let event = receive_fanned_out(&h, &parent, &d).await.intake;
        // The delivery's first pass, as the delivery worker sends it.
        let delivery = || {
            let op = Op::IntakeReceive(IntakeReceiveRequest {
                source: "src".into(),
                event_id: Some(parent.clone()),
                delivers: true,
                destination: Some("crm".into()),
                collides_with: None,
            });
            let rider = Rider {
                intake: NewIntakeEvent {
                    key: d.clone(),
                    headers: "{}".into(),
                    body: Vec::new(),
                    destinations: None,
                    delivered_at: None,
                    event_key: Some(parent.clone()),
                    destination: Some("crm".into()),
                    ..event.clone()
                },
                forward: None,
                deliveries: vec![],
            };
            (op, rider)
        };
        let (op, rider) = delivery();
        let made = h
            .ledger
            .execute_riding(&h.ns, &key(&d), op, rider)
            .await
            .unwrap_or_else(|e| panic!("delivery {d}: {e}"));
        assert_eq!(
            (intake_reply(&made), made.rider_stored),
            ("accepted", false),
            "{d}"
        );
        let rec = h.store.get(&h.ns, &key(&d)).await;
        assert!(
            matches!(&rec, Ok(Some(r)) if r.record.state == State::Prepared),
            "{d}: {rec:?}"
        );
        let row = h
            .store
            .intake_event(h.ns.as_str(), &d)
            .await
            .ok()
            .flatten()
            .expect("the delivery's row");
        assert_eq!(
            (
                row.event_key.as_deref(),
                row.destination.as_deref(),
                row.body
            ),
            (Some(parent.as_str()), Some("crm"), None),
            "{d}"
        );
        let (op, rider) = delivery();
        let again = h
            .ledger
            .execute_riding(&h.ns, &key(&d), op, rider)
            .await
            .unwrap_or_else(|e| panic!("delivery {d} again: {e}"));
        assert_eq!(
            (intake_reply(&again), again.rider_stored),
            ("duplicate", false),
            "{d}"
        );
    }
    // One item per delivery: the passes queued none.
    let items = claim(&h, OutboxKind::Forward, 100).await;
    let mut got: Vec<&str> = items.iter().map(|i| i.key.as_str()).collect();
    got.sort_unstable();
    assert_eq!(got, ["q0:crm", "q1:crm", "q2:crm", "q3:crm"]);
}

/// Many first deliveries of one event at once, on separate handles: one stores the row and
/// its forward item, every other one is a duplicate.
pub async fn concurrent_first_deliveries_store_one_rider<B: Backend>(b: Arc<B>) {
    const N: usize = 12;
    let warm = H::new(&*b, "hooks").await;
    // Cache the namespace on PostgreSQL handles, so that the fast path races too.
    receive(&warm, "src:warm", Some("warm"), b"w").await;
    let barrier = Arc::new(Barrier::new(N));
    let mut tasks = Vec::new();
    for i in 0..N {
        let h = H::on(b.open().await, "hooks", warm.clock.clone());
        receive(&h, &format!("src:warm{i}"), Some("warm"), b"w").await;
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let e = receive(
                &h,
                "src:evt_race",
                Some("evt_race"),
                format!("{i}").as_bytes(),
            )
            .await;
            (intake_reply(&e), e.rider_stored)
        }));
    }
    let mut got = Vec::new();
    for t in tasks {
        got.push(t.await.expect("task"));
    }
    let stored = got.iter().filter(|(_, s)| *s).count();
    let accepted = got.iter().filter(|(r, _)| *r == "accepted").count();
    assert_eq!((stored, accepted), (1, 1), "{got:?}");
    assert!(row_body(&warm, "src:evt_race").await.is_some());
    let items = claim(&warm, OutboxKind::Forward, 100).await;
    assert_eq!(
        items.iter().filter(|i| i.key == "src:evt_race").count(),
        1,
        "one forward item"
    );
}

/// Starts the forward attempt of `k` on `h`: its token.
async fn forward_start(h: &H, k: &str) -> String {
    let e = h
        .exec(
            &key(k),
            Op::ForwardStart(ForwardStartRequest {
                lease_ms: 30_000,
                expect: None,
            }),
            None,
        )
        .await;
    match e.reply {
        Ok(Reply::Intake(IntakeReply::Started { token, .. })) => token,
        other => panic!("forward start of {k}: {other:?}"),
    }
}

/// Reports the attempt `token` of `k` on `h` with `outcome`, the attempt and the finish of
/// `item` riding on it.
async fn forward_report(
    h: &H,
    k: &str,
    token: String,
    outcome: ForwardOutcome,
    item: &OutboxItem,
    attempt: serde_json::Value,
) -> Executed {
    let delivered = match outcome {
        ForwardOutcome::Delivered { .. } => Delivered::At(h.now()),
        ForwardOutcome::Failed { .. } => Delivered::Keep,
    };
    let op = Op::ForwardReport(ForwardReportRequest {
        token,
        outcome,
        retry: ForwardRetry {
            max_attempts: 2,
            base_ms: 1_000,
            max_ms: 10_000,
            window_ms: DAY_MS,
        },
    });
    let rider = ReportRider {
        update: IntakeUpdate {
            namespace: h.ns.as_str().to_owned(),
            key: k.to_owned(),
            attempt: Some(attempt.to_string()),
            delivered,
        },
        item: item.id,
        lease: item
            .lease
            .clone()
            .expect("a claimed item carries its lease"),
    };
    h.ledger
        .execute_reporting(&h.ns, &key(k), op, rider)
        .await
        .unwrap_or_else(|e| panic!("forward report {k}: {e}"))
}

fn failed_with(status: u16) -> ForwardOutcome {
    ForwardOutcome::Failed {
        status: Some(status),
        category: "http".into(),
        message: format!("the receiver answered HTTP {status}"),
        retry_after_ms: None,
        duration_ms: 3,
    }
}

/// A forward report's rider (the attempt on the event's row, the finish of the item that
/// carried the delivery) is written by the step that updates the record and by no other, and
/// the item's outcome is the one the record's new state implies: delivered → `done`, a retry
/// → `pending` again at the record's `not_before`, the dead letter → `dead` (with its alert
/// queued in the same step). A report that no longer holds the lease writes nothing. The
/// reports run on the handle that started the attempts (PostgreSQL's cached-record
/// statement) and on a fresh handle (its read and transaction).
pub async fn a_report_rider_moves_with_the_record_it_rides_on<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "hooks").await;
    h.patch(json!({"alert_url": "http://127.0.0.1:9/hook"}))
        .await;
    let fresh = H::on(b.open().await, "hooks", h.clock.clone());
    let row = |k: &'static str| {
        let h = &h;
        async move {
            h.store
                .intake_event("hooks", k)
                .await
                .expect("intake_event")
                .expect("row")
        }
    };
    for k in [
        "src:evt_ok",
        "src:evt_retry",
        "src:evt_dead",
        "src:evt_late",
    ] {
        let id = k.trim_start_matches("src:");
        assert!(receive(&h, k, Some(id), b"{}").await.rider_stored);
    }
    let items = claim(&h, OutboxKind::Forward, 10).await;
    let held = |k: &str| {
        items
            .iter()
            .find(|i| i.key == k)
            .unwrap_or_else(|| panic!("no item for {k}"))
    };

    // Delivered, on the handle that started it.
    let token = forward_start(&h, "src:evt_ok").await;
    let a1 = json!({"attempt": 1, "status": 200, "error": null});
    let ok = forward_report(
        &h,
        "src:evt_ok",
        token,
        ForwardOutcome::Delivered {
            status: 200,
            duration_ms: 3,
        },
        held("src:evt_ok"),
        a1.clone(),
    )
    .await;
    assert!(ok.rider_stored, "{:?}", ok.reply);
    assert_eq!(h.rec(&key("src:evt_ok")).await.state, State::Completed);
    let r = row("src:evt_ok").await;
    assert_eq!(r.attempts, format!("[{a1}]"));
    assert_eq!(r.delivered_at, Some(h.now()));
    let it = item(&h, held("src:evt_ok").id).await;
    assert_eq!((it.state, it.attempts), (OutboxState::Done, 1));

    // A retry, reported on a fresh handle: the item is due again at the record's not_before.
    let token = forward_start(&h, "src:evt_retry").await;
    let a2 = json!({"attempt": 1, "status": 503, "error": {"category": "http", "message": "m"}});
    let retry = forward_report(
        &fresh,
        "src:evt_retry",
        token,
        failed_with(503),
        held("src:evt_retry"),
        a2.clone(),
    )
    .await;
    assert!(retry.rider_stored, "{:?}", retry.reply);
    let rec = h.rec(&key("src:evt_retry")).await;
    assert_eq!(rec.state, State::FailedRetryable);
    let it = item(&h, held("src:evt_retry").id).await;
    assert_eq!(
        (
            it.state,
            it.attempts,
            Some(it.due_at),
            it.last_error.as_deref()
        ),
        (OutboxState::Pending, 1, rec.not_before, Some("http"))
    );
    let r = row("src:evt_retry").await;
    assert_eq!((r.attempts, r.delivered_at), (format!("[{a2}]"), None));

    // 410 Gone: the dead letter, in review with its alert, the item dead.
    let token = forward_start(&h, "src:evt_dead").await;
    let a3 = json!({"attempt": 1, "status": 410, "error": {"category": "http", "message": "g"}});
    let dead = forward_report(
        &h,
        "src:evt_dead",
        token,
        failed_with(410),
        held("src:evt_dead"),
        a3.clone(),
    )
    .await;
    assert!(dead.rider_stored, "{:?}", dead.reply);
    assert_eq!(dead.alerts_queued, 1);
    assert_eq!(h.rec(&key("src:evt_dead")).await.state, State::NeedsReview);
    let it = item(&h, held("src:evt_dead").id).await;
    assert_eq!((it.state, it.attempts), (OutboxState::Dead, 1));
    assert_eq!(row("src:evt_dead").await.attempts, format!("[{a3}]"));

    // A report whose lease is gone: refused, nothing rides.
    let token = forward_start(&h, "src:evt_late").await;
    let made_up = token.replace(|c: char| c.is_ascii_hexdigit(), "0");
    let late = forward_report(
        &h,
        "src:evt_late",
        made_up,
        failed_with(500),
        held("src:evt_late"),
        json!({"attempt": 1}),
    )
    .await;
    assert!(late.reply.is_err(), "{:?}", late.reply);
    assert!(!late.rider_stored);
    assert_eq!(row("src:evt_late").await.attempts, "[]");
    let it = item(&h, held("src:evt_late").id).await;
    assert_eq!((it.state, it.attempts), (OutboxState::Leased, 0));
    assert_eq!(h.rec(&key("src:evt_late")).await.state, State::Prepared);
}

/// Attempts are appended in order, exactly as `append_attempt` would write the array, and
/// `delivered_at` is set, kept and cleared; an update of a row that does not exist changes
/// nothing.
pub async fn intake_updates_append_attempts_and_set_delivered_at<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "hooks").await;
    receive(&h, "src:evt_1", Some("evt_1"), b"{}").await;
    let update = |attempt: Option<serde_json::Value>, delivered| IntakeUpdate {
        namespace: "hooks".into(),
        key: "src:evt_1".into(),
        attempt: attempt.map(|a| a.to_string()),
        delivered,
    };
    let row = || async {
        h.store
            .intake_event("hooks", "src:evt_1")
            .await
            .expect("intake_event")
            .expect("row")
    };
    let attempts = [
        json!({"attempt": 1, "status": 500, "error": {"category": "http", "message": "a \"b\" ,]"}}),
        json!({"attempt": 2, "status": null, "error": {"category": "timeout", "message": "ü"}}),
        json!({"attempt": 3, "status": 200, "error": null, "duration_ms": 7}),
    ];
    let mut expected = "[]".to_owned();
    for (i, a) in attempts.iter().enumerate() {
        let delivered = if i == 2 {
            Delivered::At(Timestamp(h.now().0 + 5))
        } else {
            Delivered::Keep
        };
        h.store
            .intake_update(update(Some(a.clone()), delivered))
            .await
            .expect("intake_update");
        expected = idem_store::intake::append_attempt(&expected, &a.to_string());
        let got = row().await;
        assert_eq!(got.attempts, expected, "after attempt {}", i + 1);
        let parsed: serde_json::Value = serde_json::from_str(&got.attempts).expect("json");
        assert_eq!(parsed.as_array().map(Vec::len), Some(i + 1));
    }
    assert_eq!(row().await.delivered_at, Some(Timestamp(h.now().0 + 5)));
    // Nothing to do changes nothing; `Clear` clears.
    h.store
        .intake_update(update(None, Delivered::Keep))
        .await
        .expect("noop");
    assert_eq!(row().await.attempts, expected);
    h.store
        .intake_update(update(None, Delivered::Clear))
        .await
        .expect("clear");
    let got = row().await;
    assert_eq!((got.attempts, got.delivered_at), (expected, None));
    // A row that does not exist: no error, no row.
    h.store
        .intake_update(IntakeUpdate {
            key: "src:none".into(),
            ..update(Some(json!({"attempt": 1})), Delivered::At(h.now()))
        })
        .await
        .expect("missing row");
    assert!(h
        .store
        .intake_event("hooks", "src:none")
        .await
        .expect("read")
        .is_none());
}
