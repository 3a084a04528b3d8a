use super::*;
use idem_core::{AlertReason, ClaimRequest, EventType, Fingerprint, LeaseId, Reply, Timestamp};

fn ns() -> Namespace {
    Namespace::try_from("n").expect("ns")
}
fn key() -> Key {
    Key::try_from("k").expect("key")
}
fn exec_ctx(now: i64) -> ExecCtx {
    ExecCtx {
        now: Timestamp(now),
        lease_id: LeaseId::random(),
        jitter: 0.5,
        actor: None,
        traceparent: None,
        rider: None,
        report: None,
        then_sent: None,
        then_prepare: None,
    }
}
fn claim() -> Op {
    Op::Claim(ClaimRequest::default())
}

/// A record as a fresh claim makes it.
fn record() -> Record {
    let p = Policy::default();
    let t = idem_core::apply(
        &ns(),
        &key(),
        None,
        &claim(),
        &exec_ctx(1).decision(&p, false, 0),
    );
    match t.write {
        Write::Insert(r) => *r,
        other => panic!("a fresh claim inserts, got {other:?}"),
    }
}

/// An event as the decision table drafts it (the fresh claim's), of another kind.
fn draft(kind: EventType) -> EventDraft {
    let p = Policy::default();
    let mut t = idem_core::apply(
        &ns(),
        &key(),
        None,
        &claim(),
        &exec_ctx(1).decision(&p, false, 0),
    );
    let mut e = t.events.remove(0);
    e.kind = kind;
    e
}

fn alert(reason: AlertReason) -> AlertDraft {
    AlertDraft {
        reason,
        state: State::NeedsReview,
        error_category: None,
        attempt: 1,
        at: Timestamp(1),
    }
}

/// Every write kind × first acquisition or not × events × alerts × alert URL × ceiling: the
/// plan writes exactly the transition, counts exactly first acquisitions (with the ceiling the
/// decision saw), guards updates on the version before, and queues alerts only where they can
/// be sent.
#[test]
fn a_plan_is_exactly_the_transition() {
    let rec = record();
    let mut updated = rec.clone();
    updated.version = 7;
    let writes = [
        Write::None,
        Write::Insert(Box::new(rec.clone())),
        Write::Update(Box::new(updated.clone())),
    ];
    for write in writes {
        for first in [false, true] {
            for events in [
                vec![],
                vec![draft(EventType::Acquired)],
                vec![draft(EventType::Failed), draft(EventType::MovedToReview)],
            ] {
                for alerts in [vec![], vec![alert(AlertReason::NeedsReview)]] {
                    for url in [None, Some("https://example.invalid/a".to_owned())] {
                        for limit in [None, Some(3)] {
                            let policy = Policy {
                                alert_url: url.clone(),
                                daily_limit: limit,
                                ..Policy::default()
                            };
                            let t = Transition {
                                write: write.clone(),
                                events: events.clone(),
                                first_acquisition: first,
                                alerts: alerts.clone(),
                                reply: Err(idem_core::OpError::NotFound),
                                tally: Default::default(),
                            };
                            let p = plan(&t, &policy, idem_core::Timestamp(42 * 86_400_000), None);
                            match (&write, p.write) {
                                (Write::None, PlanWrite::None) => {}
                                (Write::Insert(r), PlanWrite::Insert(x)) => assert_eq!(**r, *x),
                                (
                                    Write::Update(r),
                                    PlanWrite::Update {
                                        record,
                                        expected_version,
                                    },
                                ) => {
                                    assert_eq!(**r, *record);
                                    assert_eq!(expected_version, 6);
                                }
                                (w, pw) => panic!("{w:?} planned as {pw:?}"),
                            }
                            assert_eq!(p.events, events.as_slice());
                            assert_eq!(
                                p.acquisition,
                                first.then_some(Acquisition { day: 42, limit })
                            );
                            let want_alerts: &[AlertDraft] =
                                if url.is_some() { &alerts } else { &[] };
                            assert_eq!(p.alerts, want_alerts);
                            let nothing = matches!(write, Write::None)
                                && events.is_empty()
                                && !first
                                && want_alerts.is_empty();
                            assert_eq!(p.is_empty(), nothing);
                            let audit = matches!(write, Write::None)
                                && events.len() <= 1
                                && !first
                                && want_alerts.is_empty();
                            assert_eq!(p.only_audit(), audit);
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn events_are_numbered_by_what_the_backend_reported() {
    let mut seqs = Seqs::default();
    assert_eq!(seqs.get(0), 0);
    seqs.push(10);
    seqs.push(11);
    seqs.push(12);
    assert_eq!(
        (seqs.get(0), seqs.get(1), seqs.get(2), seqs.get(3)),
        (10, 11, 12, 0)
    );
    assert_eq!(Seqs::one(5).get(0), 5);

    let t = Transition {
        write: Write::None,
        events: vec![draft(EventType::Failed), draft(EventType::MovedToReview)],
        first_acquisition: false,
        alerts: vec![alert(AlertReason::Stuck), alert(AlertReason::NeedsReview)],
        reply: Ok(Reply::Swept { changed: true }),
        tally: Default::default(),
    };
    let mut seqs = Seqs::default();
    seqs.push(3);
    seqs.push(4);
    let ran = finish(
        t,
        Persisted {
            seqs,
            alerts_queued: 2,
            rider_stored: false,
        },
        Some(State::Processing),
    );
    let got: Vec<(i64, EventType)> = ran
        .executed
        .events
        .iter()
        .map(|e| (e.seq, e.kind))
        .collect();
    assert_eq!(
        got,
        vec![(3, EventType::Failed), (4, EventType::MovedToReview)]
    );
    assert_eq!(ran.executed.alerts_queued, 2);
    assert_eq!(ran.executed.from_state, Some(State::Processing));
    assert_eq!(ran.stuck_alerts, 1);
}

#[test]
fn a_fast_path_never_decides_what_needs_the_count() {
    let limited = NsOwned {
        policy: Policy {
            daily_limit: Some(1),
            ..Policy::default()
        },
        paused: false,
    };
    let open = NsOwned {
        policy: Policy::default(),
        paused: false,
    };
    let ctx = exec_ctx(1);
    assert!(decide_known(&ns(), &key(), None, &claim(), &ctx, &limited).is_none());
    assert!(decide_known(&ns(), &key(), None, &claim(), &ctx, &open).is_some());
    let rec = record();
    assert!(decide_known(&ns(), &key(), Some(&rec), &claim(), &ctx, &limited).is_some());
}

/// A claim decided on an owned record, its JSON members stood in for, answers exactly what
/// the decision on the whole record answers: every state, with and without a draft and a
/// result, lease valid or expired, backoff over or not, the same or another fingerprint,
/// paused or not, an approval's delivering claim.
#[test]
fn a_claim_on_an_owned_record_decides_as_on_the_whole_record() {
    let fp = |p: &str| Fingerprint::of_payload(&serde_json::json!({"p": p})).expect("fp");
    let draft = serde_json::json!({"order_id": "o-1", "amount": 1000});
    let result = serde_json::json!({"status": 200, "body": {"id": "ch_1", "pad": "p".repeat(300)}});
    let mut compared = 0;
    for state in State::ALL {
        for (draft, result) in [
            (None, None),
            (Some(draft.clone()), None),
            (None, Some(result.clone())),
            (Some(draft.clone()), Some(result.clone())),
        ] {
            for lease in [None, Some(5), Some(50)] {
                for not_before in [None, Some(5), Some(50)] {
                    for have in [None, Some(fp("a"))] {
                        let mut rec = record();
                        rec.state = state;
                        rec.prepared_payload = draft.clone();
                        rec.result = result.clone();
                        rec.lease_expires_at = lease.map(Timestamp);
                        rec.not_before = not_before.map(Timestamp);
                        rec.fingerprint = have;
                        for want in [None, Some(fp("a")), Some(fp("b"))] {
                            for paused in [false, true] {
                                let settings = NsOwned {
                                    policy: Policy::default(),
                                    paused,
                                };
                                let op = Op::Claim(ClaimRequest {
                                    fingerprint: want.clone(),
                                    ..ClaimRequest::default()
                                });
                                let ctx = exec_ctx(10);
                                let whole =
                                    decide_known(&ns(), &key(), Some(&rec), &op, &ctx, &settings);
                                let owned = decide_known_owned(
                                    &ns(),
                                    &key(),
                                    rec.clone(),
                                    &op,
                                    &ctx,
                                    &settings,
                                );
                                assert_eq!(
                                    owned, whole,
                                    "{state:?} lease {lease:?} nb {not_before:?}"
                                );
                                compared += 1;
                            }
                        }
                    }
                }
            }
        }
    }
    assert_eq!(compared, 7 * 4 * 3 * 3 * 2 * 3 * 2);
}

/// A decision on an owned record of any other op is [`decide_known`]'s.
#[test]
fn other_ops_on_an_owned_record_decide_as_decide_known() {
    let settings = NsOwned {
        policy: Policy::default(),
        paused: false,
    };
    let mut rec = record();
    rec.prepared_payload = Some(serde_json::json!({"a": 1}));
    let ctx = exec_ctx(10);
    let op = Op::Sweep;
    assert_eq!(
        decide_known_owned(&ns(), &key(), rec.clone(), &op, &ctx, &settings),
        decide_known(&ns(), &key(), Some(&rec), &op, &ctx, &settings)
    );
}

/// A scripted backend: loses `races` races, then persists; counts what the engine asked.
#[derive(Default)]
struct Script {
    races: u32,
    record: Option<Record>,
    limit: Option<u64>,
    count_in_load: Option<u64>,
    daily_asked: u32,
    loads: u32,
    persists: u32,
    failed: u32,
    paused_between: u32,
    /// The last persisted record write: the record and the version its update was guarded
    /// by (`None` for an insert).
    written: Option<(Record, Option<i64>)>,
}

impl Backend for Script {
    const NAME: &'static str = "script";
    type Ns = NsOwned;

    async fn load(&mut self, _: &Namespace, _: &Key, day: i64) -> Result<Loaded<NsOwned>, TxError> {
        assert_eq!(day, Timestamp(1).utc_day());
        self.loads += 1;
        Ok(Loaded {
            record: self.record.clone(),
            ns: NsOwned {
                policy: Policy {
                    daily_limit: self.limit,
                    ..Policy::default()
                },
                paused: false,
            },
            daily_count: self.count_in_load,
        })
    }

    async fn daily_count(&mut self, _: &Namespace, _: i64) -> Result<u64, TxError> {
        self.daily_asked += 1;
        Ok(5)
    }

    async fn persist(
        &mut self,
        _: &Namespace,
        _: &Key,
        plan: &Plan<'_>,
        _: Loaded<NsOwned>,
    ) -> Result<Persisted, TxError> {
        self.persists += 1;
        if self.races > 0 {
            self.races -= 1;
            return Err(TxError::Race);
        }
        self.written = match plan.write {
            PlanWrite::None => None,
            PlanWrite::Insert(r) => Some((r.clone(), None)),
            PlanWrite::Update {
                record,
                expected_version,
            } => Some((record.clone(), Some(expected_version))),
        };
        let mut seqs = Seqs::default();
        for (i, _) in plan.events.iter().enumerate() {
            seqs.push(100 + i as i64);
        }
        Ok(Persisted {
            seqs,
            alerts_queued: 0,
            rider_stored: plan.rider.is_some(),
        })
    }

    fn attempt_failed(&mut self, _: &Namespace, _: &Key) {
        self.failed += 1;
    }

    async fn lost_race(&mut self, _: u32) {
        self.paused_between += 1;
    }
}

fn rider() -> crate::Rider {
    crate::Rider {
        intake: crate::NewIntakeEvent {
            namespace: "n".into(),
            key: "k".into(),
            source: "s".into(),
            event_id: Some("e".into()),
            content_type: None,
            headers: "{}".into(),
            body: b"{}".to_vec(),
            received_at: Timestamp(1),
            destinations: None,
            delivered_at: None,
            event_key: None,
            destination: None,
        },
        forward: None,
        deliveries: vec![],
    }
}

#[test]
fn a_rider_reaches_only_the_step_that_creates_the_record() {
    // Fresh key: the claim inserts, the rider goes with it.
    let mut ctx = exec_ctx(1);
    ctx.rider = Some(Box::new(rider()));
    let mut b = Script::default();
    let ran = run_ready(execute(&mut b, &ns(), &key(), &claim(), &ctx, 1)).expect("ran");
    assert!(ran.executed.rider_stored);
    // Known key: the duplicate only appends its event; no rider reaches the backend.
    let mut b = Script {
        record: Some(record()),
        ..Script::default()
    };
    let ran = run_ready(execute(&mut b, &ns(), &key(), &claim(), &ctx, 1)).expect("ran");
    assert_eq!(b.persists, 1);
    assert!(!ran.executed.rider_stored);
    // And without a rider nothing is stored, insert or not.
    let mut b = Script::default();
    assert!(!run(&mut b, &claim(), 1).expect("ran").executed.rider_stored);
}

fn run(b: &mut Script, op: &Op, attempts: u32) -> Result<Ran, StoreError> {
    run_ready(execute(b, &ns(), &key(), op, &exec_ctx(1), attempts))
}

#[test]
fn a_lost_race_is_decided_again_on_fresh_data() {
    let mut b = Script {
        races: 2,
        ..Script::default()
    };
    let ran = run(&mut b, &claim(), 5).expect("ran");
    assert_eq!(
        (b.loads, b.persists, b.failed, b.paused_between),
        (3, 3, 2, 2)
    );
    assert_eq!(ran.executed.events.len(), 1);
    assert_eq!(ran.executed.events[0].seq, 100);
    assert!(matches!(ran.executed.reply, Ok(Reply::Claim(_))));

    let mut b = Script {
        races: 10,
        ..Script::default()
    };
    match run(&mut b, &claim(), 3) {
        Err(StoreError::Unavailable(m)) => assert!(m.contains("script: claim"), "{m}"),
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert_eq!(b.persists, 3);
}

#[test]
fn the_daily_count_is_read_only_when_the_decision_needs_it() {
    // No ceiling: never asked.
    let mut b = Script::default();
    run(&mut b, &claim(), 1).expect("ran");
    assert_eq!(b.daily_asked, 0);
    // A ceiling and no record: asked, and its value decides (5 ≥ 5: limited, nothing written).
    let mut b = Script {
        limit: Some(5),
        ..Script::default()
    };
    let ran = run(&mut b, &claim(), 1).expect("ran");
    assert_eq!(b.daily_asked, 1);
    match ran.executed.reply {
        Ok(Reply::Claim(c)) => assert_eq!(c.outcome, idem_core::ClaimOutcome::Limited),
        other => panic!("{other:?}"),
    }
    // Read with the record already: not asked again.
    let mut b = Script {
        limit: Some(5),
        count_in_load: Some(0),
        ..Script::default()
    };
    run(&mut b, &claim(), 1).expect("ran");
    assert_eq!(b.daily_asked, 0);
    // A known record: the count does not matter, not asked.
    let mut b = Script {
        limit: Some(5),
        record: Some(record()),
        ..Script::default()
    };
    run(&mut b, &claim(), 1).expect("ran");
    assert_eq!(b.daily_asked, 0);
}

#[test]
fn a_step_that_waits_is_reported_not_blocked_on() {
    let pending = std::future::pending::<Result<(), StoreError>>();
    assert!(matches!(run_ready(pending), Err(StoreError::Internal(_))));
    assert_eq!(
        run_ready(async { Ok::<_, StoreError>(7) }).expect("ready"),
        7
    );
}

fn report_rider() -> crate::ReportRider {
    crate::ReportRider {
        update: crate::IntakeUpdate {
            namespace: "n".into(),
            key: "k".into(),
            attempt: Some("{\"attempt\":1}".into()),
            delivered: crate::Delivered::Keep,
        },
        item: 7,
        lease: crate::OutboxLease {
            owner: "holder".into(),
            until: Timestamp(90),
        },
    }
}

/// A transition writing `write` with one `failed` event.
fn one_event(write: Write) -> Transition {
    Transition {
        write,
        events: vec![draft(EventType::Failed)],
        first_acquisition: false,
        alerts: vec![],
        reply: Ok(Reply::Swept { changed: true }),
        tally: Default::default(),
    }
}

#[test]
fn a_report_rider_reaches_only_a_step_that_updates_the_record_with_the_outcome_it_implies() {
    use crate::OutboxOutcome;
    let mut ctx = exec_ctx(5);
    ctx.report = Some(Box::new(report_rider()));
    let http = Some(idem_core::LastError {
        category: "http".into(),
        message: "m".into(),
        http_status: Some(503),
    });
    let cases = [
        (State::Completed, None, None, OutboxOutcome::Done),
        (
            State::FailedRetryable,
            Some(Timestamp(50)),
            http.clone(),
            OutboxOutcome::Retry {
                at: Timestamp(50),
                error: Some("http".into()),
            },
        ),
        // No not_before: due at once.
        (
            State::FailedRetryable,
            None,
            None,
            OutboxOutcome::Retry {
                at: Timestamp(5),
                error: None,
            },
        ),
        (
            State::NeedsReview,
            None,
            http.clone(),
            OutboxOutcome::Dead {
                error: Some("http".into()),
            },
        ),
        (
            State::Prepared,
            None,
            None,
            OutboxOutcome::Dead { error: None },
        ),
    ];
    for (state, not_before, last_error, want) in cases {
        let mut rec = record();
        rec.state = state;
        rec.not_before = not_before;
        rec.last_error = last_error;
        rec.version = 2;
        let t = one_event(Write::Update(Box::new(rec)));
        let p = plan(&t, &Policy::default(), ctx.now, None).riding(&ctx);
        let got = p
            .report
            .as_ref()
            .map(|r| (r.rider.item, r.outcome.clone(), r.now));
        assert_eq!(got, Some((7, want, Timestamp(5))), "{state:?}");
        assert!(p.rider.is_none());
    }
    // A step that inserts or leaves the record carries no report rider.
    for write in [Write::Insert(Box::new(record())), Write::None] {
        let t = one_event(write);
        let p = plan(&t, &Policy::default(), ctx.now, None).riding(&ctx);
        assert!(p.report.is_none(), "{:?}", t.write);
    }
}

/// The follow-ups as the model has them: the claim, then (only if it acquired) the draft
/// saved unless the record holds one, then `sent` unless the draft waits for approval, each
/// step on the record the one before left, stopping at the first that does not answer a
/// record.
fn follow_ups_one_by_one(
    rec: Option<&Record>,
    ctx: &ExecCtx,
    settings: &NsOwned,
) -> (Vec<EventType>, Option<Record>, Option<Record>) {
    let d = ctx.decision(&settings.policy, settings.paused, 0);
    let t = idem_core::apply(&ns(), &key(), rec, &claim(), &d);
    let mut events: Vec<EventType> = t.events.iter().map(|e| e.kind).collect();
    let (token, mut current) = match (&t.reply, &t.write) {
        (Ok(Reply::Claim(c)), Write::Insert(r) | Write::Update(r))
            if c.outcome == idem_core::ClaimOutcome::Acquired =>
        {
            (c.token.as_ref().expect("token").secret(), (**r).clone())
        }
        (Ok(Reply::Claim(c)), _) => return (events, c.record.clone(), None),
        _ => return (events, None, None),
    };
    let written_at_claim = current.clone();
    let mut ops = Vec::new();
    match &ctx.then_prepare {
        Some(_) if current.prepared_payload.is_some() => {
            return (events, Some(current), Some(written_at_claim))
        }
        Some(p) => ops.push(Op::Prepare(idem_core::PrepareRequest {
            token: token.clone(),
            payload: p.payload.clone(),
            approval_required: p.approval_required,
        })),
        None => {}
    }
    let waits = ctx
        .then_prepare
        .as_ref()
        .is_some_and(|p| p.approval_required);
    if let (Some(r), false) = (&ctx.then_sent, waits) {
        ops.push(Op::EffectSent(idem_core::EffectSentRequest {
            token,
            request: r.clone(),
        }));
    }
    for op in ops {
        let step = idem_core::apply(&ns(), &key(), Some(&current), &op, &d);
        match (step.write, step.reply) {
            (Write::Update(r), Ok(Reply::Written)) => {
                current = *r;
                events.extend(step.events.iter().map(|e| e.kind));
            }
            _ => break,
        }
    }
    (events, Some(current.clone()), Some(current))
}

/// Every state a claim may meet × a draft stored or not × lease and backoff absent, over or
/// pending × the follow-ups asked (none, a draft, one that waits for approval, `sent`, both):
/// the folded transition is the steps applied one after another, answered with the record the
/// last one left, and persisted through the engine as one write guarded by the version the
/// claim was decided on.
#[test]
fn follow_ups_fold_into_the_claim_as_the_steps_one_after_another() {
    let settings = NsOwned {
        policy: Policy::default(),
        paused: false,
    };
    let request = idem_core::RequestSummary {
        method: "POST".into(),
        url: "https://api.example.com/v1/x".into(),
        idempotency_header: None,
    };
    let stored_draft = serde_json::json!({"text": "first"});
    let mut compared = 0;
    let mut folded = 0;
    let mut existing: Vec<Option<Record>> = vec![None];
    for state in State::ALL {
        for draft in [None, Some(stored_draft.clone())] {
            for lease in [None, Some(0), Some(50)] {
                for not_before in [None, Some(0), Some(50)] {
                    let mut rec = record();
                    rec.state = state;
                    rec.version = 4;
                    rec.prepared_payload = draft.clone();
                    rec.lease_expires_at = lease.map(Timestamp);
                    rec.not_before = not_before.map(Timestamp);
                    existing.push(Some(rec));
                }
            }
        }
    }
    for rec in &existing {
        for prepare in [None, Some(false), Some(true)] {
            for sent in [None, Some(request.clone())] {
                let mut ctx = exec_ctx(1);
                ctx.then_prepare = prepare.map(|approval_required| crate::ThenPrepare {
                    payload: serde_json::json!({"text": "new"}),
                    approval_required,
                });
                ctx.then_sent = sent;
                let (want_events, want_answer, want_written) =
                    follow_ups_one_by_one(rec.as_ref(), &ctx, &settings);
                let d = ctx.decision(&settings.policy, settings.paused, 0);
                let claimed = idem_core::apply(&ns(), &key(), rec.as_ref(), &claim(), &d);
                let t = follow_ups(&ns(), &key(), claimed.clone(), &ctx, &d);
                let kinds: Vec<EventType> = t.events.iter().map(|e| e.kind).collect();
                assert_eq!(kinds, want_events, "{rec:?} {prepare:?}");
                let answer = match &t.reply {
                    Ok(Reply::Claim(c)) => c.record.clone(),
                    _ => None,
                };
                assert_eq!(answer, want_answer);
                if kinds.len() == claimed.events.len() {
                    assert_eq!(t, claimed, "nothing folded: the claim as it was");
                } else {
                    folded += 1;
                    assert_eq!(
                        (&t.alerts, t.first_acquisition, t.tally),
                        (&claimed.alerts, claimed.first_acquisition, claimed.tally)
                    );
                }
                // Through the engine: one write of the last record, guarded by the version
                // the claim was decided on.
                let mut b = Script {
                    record: rec.clone(),
                    ..Script::default()
                };
                let ran =
                    run_ready(execute(&mut b, &ns(), &key(), &claim(), &ctx, 1)).expect("ran");
                assert_eq!(b.persists, 1);
                let ran_kinds: Vec<EventType> =
                    ran.executed.events.iter().map(|e| e.kind).collect();
                assert_eq!(ran_kinds, want_events);
                let written = b.written.as_ref().map(|(r, _)| r.clone());
                if want_written.is_some() {
                    assert_eq!(
                        written.as_ref().map(|r| &r.prepared_payload),
                        want_written.as_ref().map(|r| &r.prepared_payload)
                    );
                    assert_eq!(
                        written.as_ref().map(|r| (r.state, r.version)),
                        want_written.as_ref().map(|r| (r.state, r.version))
                    );
                    let guard = b.written.as_ref().and_then(|(_, v)| *v);
                    assert_eq!(guard, rec.as_ref().map(|r| r.version));
                }
                compared += 1;
            }
        }
    }
    assert_eq!(compared, (1 + 7 * 2 * 3 * 3) * 3 * 2);
    assert!(folded > 20, "the cases fold follow-ups: {folded}");
}
