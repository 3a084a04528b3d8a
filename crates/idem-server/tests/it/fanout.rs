//! Intake fan-out over HTTP (`INTAKE.md`, "Fan-out and destination limits"): one event, several
//! destinations, each delivered under its own key with its own state, attempts, budget, dead
//! letter and redeliver; filters; an upgrade from a `forward`-only source; on SQLite and on
//! PostgreSQL when `IDEM_TEST_PG` is set.

use std::time::Duration;

use idem_testkit::app::{backends, eventually, spawn_on, spawn_with, Backend, Options, TestApp};
use serde_json::{json, Value};

use super::intake::{answer, event, listed, post_stripe, put_source, Sink, SECRET};

/// A Stripe source with three named destinations, retried quickly, at most 3 attempts.
fn three(crm: &str, receipt: &str, slack: &str) -> Value {
    let retry = json!({"max_attempts": 3, "base_ms": 1, "max_ms": 1});
    json!({
        "provider": "stripe",
        "secrets": [SECRET],
        "forwards": {
            "crm": {"url": crm, "timeout_ms": 1000, "retry": retry},
            "receipt": {"url": receipt, "timeout_ms": 1000, "retry": retry},
            "slack": {"url": slack, "timeout_ms": 1000, "retry": retry},
        },
    })
}

fn body(id: &str, kind: &str) -> Vec<u8> {
    format!(r#"{{"id":"{id}","type":"{kind}"}}"#).into_bytes()
}

/// `{name: state}` of an event's destinations.
async fn states(app: &TestApp, source: &str, key: &str) -> Value {
    let e = event(app, source, key).await;
    let mut m = serde_json::Map::new();
    for d in e.body["destinations"]
        .as_array()
        .cloned()
        .unwrap_or_default()
    {
        m.insert(
            d["name"].as_str().unwrap_or_default().to_owned(),
            d["state"].clone(),
        );
    }
    Value::Object(m)
}

async fn until_states(app: &TestApp, source: &str, key: &str, want: Value) -> bool {
    eventually(Duration::from_secs(15), || async {
        app.advance(10);
        states(app, source, key).await == want
    })
    .await
}

/// `(key, attempts, state)` of every forward item in the outbox (a fresh ledger's ids).
async fn forward_items(app: &TestApp) -> Vec<(String, u32, String)> {
    let mut out = vec![];
    for id in 1..=200 {
        if let Some(item) = app.store.outbox_item(id).await.expect("outbox item") {
            if item.kind == idem::OutboxKind::Forward {
                out.push((item.key, item.attempts, format!("{:?}", item.state)));
            }
        }
    }
    out.sort();
    out
}

fn keys(sink: &Sink) -> Vec<String> {
    sink.got()
        .iter()
        .filter_map(|g| g.header("idem-key").map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn three_destinations_one_failing_is_dead_lettered_and_redelivered_alone() {
    for backend in backends() {
        let app = spawn_on(backend).await;
        let crm = Sink::start(vec![]).await;
        let receipt = Sink::start(vec![]).await;
        let slack = Sink::start(vec![answer(500), answer(503), answer(500)]).await;
        let r = put_source(&app, "pay", &three(&crm.url, &receipt.url, &slack.url)).await;
        assert_eq!(r.status, 201, "{}", r.text);
        assert_eq!(r.body["forward"], Value::Null);
        assert_eq!(r.body["forwards"]["slack"]["url"], json!(slack.url));
        let r = post_stripe(&app, "pay", SECRET, &body("evt_1", "invoice.paid")).await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(
            r.body["events"],
            json!([{"key": "evt_1", "status": "accepted"}])
        );
        let settled = until_states(
            &app,
            "pay",
            "evt_1",
            json!({"crm": "completed", "receipt": "completed", "slack": "needs_review"}),
        )
        .await;
        assert!(settled, "{}", states(&app, "pay", "evt_1").await);
        // The event's own record is not a delivery: it completed when it fanned out.
        let e = event(&app, "pay", "evt_1").await;
        assert_eq!(e.body["record"]["state"], "completed");
        assert_eq!(e.body["record"]["result"], json!({"fan_out": true}));
        assert_eq!(keys(&crm), ["evt_1:crm"]);
        assert_eq!(keys(&receipt), ["evt_1:receipt"]);
        assert_eq!(keys(&slack), ["evt_1:slack"; 3]);
        // A delivery's first pass makes its record and sends it: its item is done in one
        // attempt (the failing one took one per send).
        let items = forward_items(&app).await;
        let done_once = |k: &str| {
            items
                .iter()
                .any(|(key, n, st)| key == k && *n == 1 && st == "Done")
        };
        assert!(
            done_once("evt_1:crm") && done_once("evt_1:receipt"),
            "{items:?}"
        );
        assert!(slack
            .got()
            .iter()
            .all(|g| g.header("idem-destination") == Some("slack")
                && g.header("idem-event-id") == Some("evt_1")
                && g.body.as_ref() == body("evt_1", "invoice.paid").as_slice()));
        let d = &e.body["destinations"];
        let slack_read = d
            .as_array()
            .and_then(|a| a.iter().find(|x| x["name"] == "slack"))
            .cloned()
            .unwrap_or_default();
        assert_eq!(slack_read["key"], "evt_1:slack");
        assert_eq!(slack_read["attempts"].as_array().map(Vec::len), Some(3));
        // The dead letter is an ordinary record of its own, with its alert reason.
        let rec = app.record("pay", "evt_1:slack").await;
        assert_eq!(rec.body["record"]["state"], "needs_review", "{}", rec.text);
        // (Metrics are shared by every test of this binary: only the series are checked.)
        let m = app.get("/metrics").await.text;
        assert!(
            m.contains(r#"idem_deliveries_total{source="pay",destination="slack",result="dead"}"#),
            "{m}"
        );
        assert!(
            m.contains(
                r#"idem_deliveries_total{source="pay",destination="crm",result="delivered"}"#
            ),
            "{m}"
        );

        // A duplicate changes none of them.
        let r = post_stripe(&app, "pay", SECRET, &body("evt_1", "invoice.paid")).await;
        assert_eq!(r.body["events"][0]["status"], "duplicate", "{}", r.text);
        assert_eq!(r.header("idempotent-replayed"), Some("true"));
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!((crm.count(), receipt.count(), slack.count()), (1, 1, 3));
        assert_eq!(
            states(&app, "pay", "evt_1").await,
            json!({"crm": "completed", "receipt": "completed", "slack": "needs_review"})
        );

        // A destination with a dead letter is not dropped: 409, the source unchanged.
        let r = app
            .patch("/v1/sources/pay", json!({"forwards": {"slack": null}}))
            .await;
        assert!(
            r.problem(409, "invalid_transition")["detail"]
                .as_str()
                .is_some_and(|d| d.contains("`slack`") && d.contains("force=true")),
            "{}",
            r.text
        );
        let src = app.get("/v1/sources/pay").await;
        assert!(src.body["forwards"]["slack"].is_object(), "{}", src.text);

        // Redeliver without a destination: every one not completed (slack alone).
        let r = app
            .post(
                "/v1/sources/pay/events/evt_1/redeliver",
                json!({"note": "slack is back"}),
            )
            .await;
        assert_eq!(r.status, 202, "{}", r.text);
        assert_eq!(
            r.body["destinations"],
            json!([{"name": "slack", "key": "evt_1:slack", "state": "prepared"}])
        );
        assert!(
            until_states(
                &app,
                "pay",
                "evt_1",
                json!({"crm": "completed", "receipt": "completed", "slack": "completed"}),
            )
            .await
        );
        assert_eq!((crm.count(), receipt.count(), slack.count()), (1, 1, 4));
        assert_eq!(
            slack.got()[3].header("idem-attempt"),
            Some("4"),
            "attempt numbers keep counting"
        );

        // Every one completed: replaying needs a name, and replays that one alone.
        let r = app
            .post(
                "/v1/sources/pay/events/evt_1/redeliver",
                json!({"note": "again"}),
            )
            .await;
        r.problem(409, "invalid_transition");
        let r = app
            .post(
                "/v1/sources/pay/events/evt_1/redeliver",
                json!({"note": "replay the receipt", "destination": "receipt"}),
            )
            .await;
        assert_eq!(r.status, 202, "{}", r.text);
        let replayed = eventually(Duration::from_secs(10), || async { receipt.count() == 2 }).await;
        assert!(replayed);
        assert_eq!((crm.count(), slack.count()), (1, 4));
        let r = app
            .post(
                "/v1/sources/pay/events/evt_1/redeliver",
                json!({"note": "x", "destination": "nope"}),
            )
            .await;
        assert_eq!(r.problem(422, "invalid_field")["field"], "destination");
        // Everything delivered to slack: it may go now.
        let r = app
            .patch("/v1/sources/pay", json!({"forwards": {"slack": null}}))
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(r.body["forwards"]["slack"], Value::Null, "{}", r.text);
        app.stop().await.expect("stop");
    }
}

#[tokio::test]
async fn a_filter_sends_an_event_to_its_destinations_only() {
    for backend in backends() {
        let app = spawn_on(backend).await;
        let crm = Sink::start(vec![]).await;
        let receipt = Sink::start(vec![]).await;
        let mut doc = three(&crm.url, &receipt.url, &crm.url);
        doc["forwards"]["receipt"]["filter"] = json!({"pointer": "/type", "in": ["invoice.paid"]});
        doc["forwards"]["crm"]["filter"] = json!({"pointer": "/type", "in": ["customer.created"]});
        doc["forwards"]["slack"]["filter"] = json!({"header": "X-Mode", "in": ["live"]});
        let r = put_source(&app, "pay", &doc).await;
        assert_eq!(r.status, 201, "{}", r.text);
        assert_eq!(
            r.body["forwards"]["slack"]["filter"],
            json!({"header": "x-mode", "in": ["live"]})
        );
        post_stripe(&app, "pay", SECRET, &body("evt_2", "invoice.paid")).await;
        assert!(until_states(&app, "pay", "evt_2", json!({"receipt": "completed"})).await);
        assert_eq!(keys(&receipt), ["evt_2:receipt"]);
        assert_eq!(crm.count(), 0);
        // The destinations it did not match got no record and no row.
        assert_eq!(app.record("pay", "evt_2:crm").await.status, 404);
        assert_eq!(event(&app, "pay", "evt_2:slack").await.status, 404);
        // An event that passes no filter is stored and answered like any other.
        let r = post_stripe(&app, "pay", SECRET, &body("evt_3", "charge.refunded")).await;
        assert_eq!(r.body["events"][0]["status"], "accepted", "{}", r.text);
        let e = event(&app, "pay", "evt_3").await;
        assert_eq!(e.body["destinations"], json!([]));
        assert_eq!(e.body["record"]["state"], "completed");
        let l = app.get("/v1/sources/pay/events").await;
        let listed: Vec<(Value, Value)> = l.body["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|i| (i["key"].clone(), i["destinations"].clone()))
            .collect();
        assert_eq!(
            listed,
            [
                (json!("evt_3"), json!([])),
                (json!("evt_2"), json!(["receipt"]))
            ],
            "the list shows events, not their deliveries"
        );
        let m = app.get("/metrics").await.text;
        assert!(
            m.contains(r#"idem_intake_backlog{source="pay",destination="receipt"} 0"#),
            "{m}"
        );
        app.stop().await.expect("stop");
    }
}

#[tokio::test]
async fn a_forward_only_source_keeps_its_keys_and_records_when_it_gains_destinations() {
    for backend in backends() {
        let app = spawn_on(backend).await;
        let main = Sink::start(vec![]).await;
        let crm = Sink::start(vec![]).await;
        let doc = json!({
            "provider": "stripe",
            "secrets": [SECRET],
            "forward": {"url": main.url, "timeout_ms": 1000},
        });
        put_source(&app, "pay", &doc).await;
        post_stripe(&app, "pay", SECRET, &body("evt_1", "invoice.paid")).await;
        assert!(until_states(&app, "pay", "evt_1", json!({"default": "completed"})).await);
        let before = event(&app, "pay", "evt_1").await.body;
        assert_eq!(keys(&main), ["evt_1"]);
        assert_eq!(before["record"]["key"], "evt_1");
        assert_eq!(before["record"]["state"], "completed");

        let r = app
            .patch(
                "/v1/sources/pay",
                json!({"forwards": {"crm": {"url": crm.url, "timeout_ms": 1000}}}),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(r.body["forward"]["url"], json!(main.url));
        // The earlier event reads as before: its record, attempts and one destination.
        let after = event(&app, "pay", "evt_1").await.body;
        assert_eq!(after["record"], before["record"]);
        assert_eq!(after["attempts"], before["attempts"]);
        assert_eq!(
            states(&app, "pay", "evt_1").await,
            json!({"default": "completed"})
        );
        // A redeliver of it still goes to `default` under its plain key.
        let r = app
            .post(
                "/v1/sources/pay/events/evt_1/redeliver",
                json!({"note": "replay"}),
            )
            .await;
        assert_eq!(r.status, 202, "{}", r.text);
        assert!(eventually(Duration::from_secs(10), || async { main.count() == 2 }).await);
        assert_eq!(keys(&main), ["evt_1", "evt_1"]);
        // A new event goes to both: `default` under its plain key.
        post_stripe(&app, "pay", SECRET, &body("evt_2", "invoice.paid")).await;
        assert!(
            until_states(
                &app,
                "pay",
                "evt_2",
                json!({"default": "completed", "crm": "completed"})
            )
            .await
        );
        assert_eq!(keys(&main), ["evt_1", "evt_1", "evt_2"]);
        assert_eq!(keys(&crm), ["evt_2:crm"]);
        assert_eq!(crm.count(), 1);
        app.stop().await.expect("stop");
    }
}

#[tokio::test]
async fn bad_destinations_are_refused_with_the_field_and_write_nothing() {
    let app = spawn_on(backends()[0]).await;
    let doc = three(
        "http://127.0.0.1:9/a",
        "http://127.0.0.1:9/b",
        "http://127.0.0.1:9/c",
    );
    let cases = [
        (
            json!({"forwards": {"Bad Name": {"url": "http://x/"}}}),
            422,
            "forwards.Bad Name",
        ),
        (
            json!({"forwards": {"crm": {"url": "http://x/", "rate": {}}}}),
            422,
            "forwards.crm.rate",
        ),
        (
            json!({"forwards": {"crm": {"url": "http://x/", "filter": {"pointer": "/t"}}}}),
            422,
            "forwards.crm.filter.in",
        ),
        (
            json!({"forwards": {"crm": {"url": "http://x/", "nope": 1}}}),
            400,
            "forwards.crm.nope",
        ),
        (json!({"forwards": {}}), 422, "forward"),
    ];
    for (patch, status, field) in cases {
        let mut d = doc.clone();
        d["forwards"] = patch["forwards"].clone();
        let r = put_source(&app, "pay", &d).await;
        let code = if status == 400 {
            "unknown_field"
        } else {
            "invalid_field"
        };
        assert_eq!(r.problem(status, code)["field"], field, "{}", r.text);
    }
    assert_eq!(app.get("/v1/sources/pay").await.status, 404);
    // A destination's secret is write-only: reads show its hint.
    let mut d = doc.clone();
    d["forwards"]["crm"]["secret"] = json!("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
    let r = put_source(&app, "pay", &d).await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert!(!r.text.contains("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"));
    assert_eq!(r.body["forwards"]["crm"]["secret_hint"], "LaSw");
    assert_eq!(r.body["forwards"]["receipt"]["secret_hint"], Value::Null);
    app.stop().await.expect("stop");
}

/// Two instances on one PostgreSQL (one on SQLite) deliver to a destination with `rate:
/// {per_second: 5}`: together they stay within 5 deliveries in any second, plus one burst.
/// The ledger clocks follow real time (the test drives them), so the sink's arrival times
/// measure the pace.
#[tokio::test]
async fn a_paced_destination_keeps_its_rate_across_instances() {
    for backend in backends() {
        let (a, b, _db) = match backend {
            Backend::Sqlite => (spawn_on(backend).await, None, None),
            Backend::Postgres => {
                let Some(db) = idem_testkit::pg::PgDb::create("paced destination") else {
                    continue;
                };
                let opts = || Options {
                    db: Some(db.url().to_owned()),
                    backend: Backend::Postgres,
                    ..Default::default()
                };
                let a = spawn_with(opts()).await;
                let b = spawn_with(opts()).await;
                (a, Some(b), Some(db))
            }
        };
        let sink = Sink::start(vec![]).await;
        let doc = json!({
            "provider": "stripe",
            "secrets": [SECRET],
            "forwards": {"slow": {"url": sink.url, "timeout_ms": 1000,
                                  "rate": {"per_second": 5}}},
        });
        assert_eq!(put_source(&a, "pay", &doc).await.status, 201);
        let n = 20;
        for i in 0..n {
            let app = match (&b, i % 2) {
                (Some(b), 1) => b,
                _ => &a,
            };
            let r = post_stripe(app, "pay", SECRET, &body(&format!("evt_{i}"), "x")).await;
            assert_eq!(r.body["events"][0]["status"], "accepted", "{}", r.text);
        }
        // Both ledger clocks follow real time from here.
        let start = a.now();
        let real = std::time::Instant::now();
        let clocks: Vec<_> = std::iter::once(a.clock.clone())
            .chain(b.as_ref().map(|b| b.clock.clone()))
            .collect();
        let driver = tokio::spawn(async move {
            loop {
                let t = idem::Timestamp(start.0 + real.elapsed().as_millis() as i64);
                for c in &clocks {
                    c.set(t);
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        let all = eventually(Duration::from_secs(30), || async { sink.count() == n }).await;
        driver.abort();
        assert!(all, "delivered {} of {n}", sink.count());
        let mut times: Vec<std::time::Instant> = sink.got().iter().map(|g| g.at).collect();
        times.sort();
        let most_in_a_second = (0..times.len())
            .map(|i| {
                times[i..]
                    .iter()
                    .take_while(|t| t.duration_since(times[i]) < Duration::from_secs(1))
                    .count()
            })
            .max()
            .unwrap_or(0);
        let span = times[times.len() - 1].duration_since(times[0]);
        eprintln!(
            "paced ({backend:?}, {} instance(s)): {n} deliveries in {:.2} s, at most {most_in_a_second} in any second",
            1 + usize::from(b.is_some()),
            span.as_secs_f64()
        );
        assert!(
            most_in_a_second <= 5 + 1,
            "{most_in_a_second} in one second"
        );
        let mut keys = keys(&sink);
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), n, "each event delivered once");
        if let Some(b) = b {
            b.stop().await.expect("stop");
        }
        a.stop().await.expect("stop");
    }
}

/// The `destination` label through a dead letter and its redeliver: the dead destination's
/// backlog reads 1 at the scrape right after it died and 0 right after its redeliver landed,
/// the other destination's 0 throughout, and the redelivered destination gains its
/// `delivered` series. A source name no other test uses: the registry is shared by every test
/// of this binary, and each scrape sets the gauges from the scraping server's ledger.
#[tokio::test]
async fn the_destination_label_follows_a_dead_letter_through_its_redeliver() {
    let line = |m: &str, prefix: &str| -> Option<String> {
        m.lines()
            .find(|l| l.starts_with(prefix))
            .map(|l| l[prefix.len()..].trim().to_owned())
    };
    for backend in backends() {
        let app = spawn_on(backend).await;
        let ok = Sink::start(vec![]).await;
        let flaky = Sink::start(vec![answer(500), answer(500), answer(500)]).await;
        let retry = json!({"max_attempts": 3, "base_ms": 1, "max_ms": 1});
        let doc = json!({
            "provider": "stripe",
            "secrets": [SECRET],
            "forwards": {
                "ok": {"url": ok.url, "timeout_ms": 1000, "retry": retry},
                "flaky": {"url": flaky.url, "timeout_ms": 1000, "retry": retry},
            },
        });
        let r = put_source(&app, "fanlabel", &doc).await;
        assert_eq!(r.status, 201, "{}", r.text);
        let r = post_stripe(&app, "fanlabel", SECRET, &body("evt_l", "invoice.paid")).await;
        assert_eq!(r.status, 200, "{}", r.text);
        let dead = until_states(
            &app,
            "fanlabel",
            "evt_l",
            json!({"ok": "completed", "flaky": "needs_review"}),
        )
        .await;
        assert!(dead, "{}", states(&app, "fanlabel", "evt_l").await);
        let m = app.get("/metrics").await.text;
        let backlog =
            |d: &str| format!(r#"idem_intake_backlog{{source="fanlabel",destination="{d}"}}"#);
        assert_eq!(line(&m, &backlog("flaky")).as_deref(), Some("1"), "{m}");
        assert_eq!(line(&m, &backlog("ok")).as_deref(), Some("0"), "{m}");
        assert!(
            m.contains(
                r#"idem_deliveries_total{source="fanlabel",destination="flaky",result="dead"}"#
            ),
            "{m}"
        );

        let r = app
            .post(
                "/v1/sources/fanlabel/events/evt_l/redeliver",
                json!({"note": "flaky is back", "destination": "flaky"}),
            )
            .await;
        assert_eq!(r.status, 202, "{}", r.text);
        let back = until_states(
            &app,
            "fanlabel",
            "evt_l",
            json!({"ok": "completed", "flaky": "completed"}),
        )
        .await;
        assert!(back, "{}", states(&app, "fanlabel", "evt_l").await);
        let m = app.get("/metrics").await.text;
        assert_eq!(line(&m, &backlog("flaky")).as_deref(), Some("0"), "{m}");
        assert_eq!(line(&m, &backlog("ok")).as_deref(), Some("0"), "{m}");
        assert!(
            m.contains(
                r#"idem_deliveries_total{source="fanlabel",destination="flaky",result="delivered"}"#
            ),
            "{m}"
        );
        assert_eq!((ok.count(), flaky.count()), (1, 4));
        app.stop().await.expect("stop");
    }
}

/// A source with `forward` (the destination `default`) and `forwards.crm`.
fn default_and_crm(default: &str, crm: &str) -> Value {
    let retry = json!({"max_attempts": 3, "base_ms": 1, "max_ms": 1});
    json!({
        "provider": "stripe",
        "secrets": [SECRET],
        "forward": {"url": default, "timeout_ms": 1000, "retry": retry},
        "forwards": {"crm": {"url": crm, "timeout_ms": 1000, "retry": retry}},
    })
}

/// The read of one destination of an event.
async fn destination(app: &TestApp, source: &str, key: &str, name: &str) -> Value {
    let e = event(app, source, key).await;
    e.body["destinations"]
        .as_array()
        .and_then(|a| a.iter().find(|d| d["name"] == name))
        .cloned()
        .unwrap_or_default()
}

#[tokio::test]
async fn an_intake_event_whose_id_is_another_events_delivery_key_is_held_not_dropped() {
    for backend in backends() {
        let app = spawn_on(backend).await;
        let default = Sink::start(vec![]).await;
        let crm = Sink::start(vec![]).await;
        let r = put_source(&app, "c", &default_and_crm(&default.url, &crm.url)).await;
        assert_eq!(r.status, 201, "{}", r.text);
        let r = post_stripe(&app, "c", SECRET, &body("y", "invoice.paid")).await;
        assert_eq!(
            r.body["events"],
            json!([{"key": "y", "status": "accepted"}])
        );
        let delivered = json!({"default": "completed", "crm": "completed"});
        assert!(until_states(&app, "c", "y", delivered.clone()).await);
        // Event `y:crm` is new: the key `y:crm` holds `y`'s delivery to crm, not it.
        let raw = body("y:crm", "invoice.paid");
        let r = post_stripe(&app, "c", SECRET, &raw).await;
        assert_eq!(r.status, 200, "{}", r.text);
        let held = r.body["events"][0]["key"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(held.starts_with("body-sha256:"), "{}", r.text);
        assert_eq!(r.body["events"][0]["status"], "held", "{}", r.text);
        assert_eq!(r.header("idempotent-replayed"), None);
        let e = event(&app, "c", &held).await;
        assert_eq!(e.body["event"]["event_id"], "y:crm", "{}", e.text);
        assert_eq!(e.body["record"]["state"], "needs_review");
        assert_eq!(e.body["record"]["last_error"]["category"], "key_collision");
        // The delivery row does not pose as an event; `y`'s delivery is untouched.
        assert_eq!(event(&app, "c", "y:crm").await.status, 404);
        assert_eq!(states(&app, "c", "y").await, delivered);
        // The provider's retry is a duplicate of the held event, not of the delivery.
        let again = post_stripe(&app, "c", SECRET, &raw).await;
        assert_eq!(
            again.body["events"],
            json!([{"key": held, "status": "duplicate"}]),
            "{}",
            again.text
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(keys(&default), ["y"]);
        assert_eq!(keys(&crm), ["y:crm"]);
        // An operator lets it go: delivered under its held key, with its own id.
        let r = app
            .post(
                &format!("/v1/sources/c/events/{held}/redeliver"),
                json!({"note": "a real event, checked"}),
            )
            .await;
        assert_eq!(r.status, 202, "{}", r.text);
        let got = eventually(Duration::from_secs(10), || async {
            app.advance(10);
            default.count() == 2
        })
        .await;
        assert!(got, "{:?}", keys(&default));
        let last = default.got().pop().expect("a forward");
        assert_eq!(last.header("idem-key"), Some(held.as_str()));
        assert_eq!(last.header("idem-event-id"), Some("y:crm"));
        assert_eq!(last.body.as_ref(), raw.as_slice());

        // A key some claim holds is no event's either.
        let r = app.post("/v1/namespaces/c/keys/z/claim", json!({})).await;
        assert!(r.status < 300, "{}", r.text);
        let r = post_stripe(&app, "c", SECRET, &body("z", "invoice.paid")).await;
        assert_eq!(r.body["events"][0]["status"], "held", "{}", r.text);
    }
}

#[tokio::test]
async fn an_intake_delivery_whose_key_is_another_event_is_held_never_read_as_delivered() {
    for backend in backends() {
        let app = spawn_on(backend).await;
        let default = Sink::start(vec![]).await;
        let crm = Sink::start(vec![]).await;
        put_source(&app, "c", &default_and_crm(&default.url, &crm.url)).await;
        // Event `x:crm` first: it holds the key that `x`'s delivery to crm would use.
        let r = post_stripe(&app, "c", SECRET, &body("x:crm", "invoice.paid")).await;
        assert_eq!(
            r.body["events"],
            json!([{"key": "x:crm", "status": "accepted"}])
        );
        let done = json!({"default": "completed", "crm": "completed"});
        assert!(until_states(&app, "c", "x:crm", done).await);
        let r = post_stripe(&app, "c", SECRET, &body("x", "invoice.paid")).await;
        assert_eq!(
            r.body["events"],
            json!([{"key": "x", "status": "accepted"}])
        );
        let want = json!({"default": "completed", "crm": "needs_review"});
        assert!(
            until_states(&app, "c", "x", want).await,
            "{}",
            event(&app, "c", "x").await.text
        );
        let d = destination(&app, "c", "x", "crm").await;
        assert_eq!(d["collides_with"], "x:crm", "{d}");
        let held = d["key"].as_str().unwrap_or_default().to_owned();
        assert!(held.starts_with("sha256:"), "{d}");
        let rec = app.record("c", &held).await;
        assert_eq!(rec.body["record"]["state"], "needs_review", "{}", rec.text);
        assert_eq!(
            rec.body["record"]["last_error"]["category"],
            "key_collision"
        );
        // Nothing went to crm for `x`; event `x:crm` is as it was.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(keys(&crm), ["x:crm:crm"]);
        let other = event(&app, "c", "x:crm").await;
        assert_eq!(other.body["event"]["event_id"], "x:crm");
        assert_eq!(other.body["record"]["state"], "completed");
        assert_eq!(other.body["record"]["attempt"], 1);
        let m = app.get("/metrics").await.text;
        assert!(
            m.contains(r#"idem_deliveries_total{source="c",destination="crm",result="dead"}"#),
            "{m}"
        );
        // A duplicate of `x` changes nothing.
        let r = post_stripe(&app, "c", SECRET, &body("x", "invoice.paid")).await;
        assert_eq!(r.body["events"][0]["status"], "duplicate");
        // Redelivered by an operator: sent under its held key, with `x`'s body.
        let r = app
            .post(
                "/v1/sources/c/events/x/redeliver",
                json!({"note": "checked", "destination": "crm"}),
            )
            .await;
        assert_eq!(r.status, 202, "{}", r.text);
        let done = json!({"default": "completed", "crm": "completed"});
        assert!(until_states(&app, "c", "x", done).await);
        let last = crm.got().pop().expect("a forward");
        assert_eq!(last.header("idem-key"), Some(held.as_str()));
        assert_eq!(last.header("idem-event-id"), Some("x"));
        assert_eq!(last.body.as_ref(), body("x", "invoice.paid").as_slice());
    }
}

#[tokio::test]
async fn a_destination_with_undelivered_deliveries_is_dropped_only_when_forced() {
    for backend in backends() {
        let app = spawn_on(backend).await;
        let ok = Sink::start(vec![]).await;
        let slack = Sink::start(vec![answer(500), answer(500), answer(500)]).await;
        let r = put_source(&app, "pay", &three(&ok.url, &ok.url, &slack.url)).await;
        assert_eq!(r.status, 201, "{}", r.text);
        let r = post_stripe(&app, "pay", SECRET, &body("evt_f", "invoice.paid")).await;
        assert_eq!(r.status, 200, "{}", r.text);
        let want = json!({"crm": "completed", "receipt": "completed", "slack": "needs_review"});
        assert!(until_states(&app, "pay", "evt_f", want).await);
        // A PUT without slack is refused like the PATCH; `?force=true` drops it.
        let r = put_source(&app, "pay", &three(&ok.url, &ok.url, &slack.url)).await;
        assert_eq!(r.status, 200, "{}", r.text);
        let mut without = three(&ok.url, &ok.url, &slack.url);
        without["forwards"]
            .as_object_mut()
            .map(|m| m.remove("slack"));
        put_source(&app, "pay", &without)
            .await
            .problem(409, "invalid_transition");
        app.patch(
            "/v1/sources/pay?force=maybe",
            json!({"forwards": {"slack": null}}),
        )
        .await
        .problem(422, "invalid_field");
        let r = app
            .patch(
                "/v1/sources/pay?force=true",
                json!({"forwards": {"slack": null}}),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(r.body["forwards"]["slack"], Value::Null, "{}", r.text);
    }
}

/// Three sources share one namespace and receive the same event: the first takes its key,
/// the second is held under the key of its bytes, the third — that key taken by the second's
/// held record — under a key of its own (its source, key and bytes). Every provider gets its
/// 200, each hold raises `key_collision`, and each redelivery finds its own record.
#[tokio::test]
async fn a_third_source_with_the_same_event_is_held_under_a_key_of_its_own() {
    for backend in backends() {
        let alerts = Sink::start(vec![]).await;
        let app = spawn_with(Options {
            alert_interval: Duration::from_millis(50),
            backend,
            ..Default::default()
        })
        .await;
        let sink = Sink::start(vec![]).await;
        app.patch_namespace(
            "shared",
            json!({"alert_url": alerts.url, "egress": {"allow": ["127.0.0.1"]}}),
        )
        .await;
        for name in ["a", "b", "c"] {
            let mut doc = super::intake::stripe_source(&sink.url);
            doc["namespace"] = json!("shared");
            assert_eq!(put_source(&app, name, &doc).await.status, 201);
        }
        let raw = body("evt_s", "invoice.paid");
        let mut held = vec![];
        for name in ["a", "b", "c"] {
            let r = post_stripe(&app, name, SECRET, &raw).await;
            assert_eq!(r.status, 200, "{name}: {}", r.text);
            let status = if name == "a" { "accepted" } else { "held" };
            assert_eq!(r.body["events"][0]["status"], status, "{name}: {}", r.text);
            held.push(r.body["events"][0]["key"].as_str().expect("key").to_owned());
        }
        assert_eq!(held[0], "evt_s");
        assert!(held[1].starts_with("body-sha256:"), "{held:?}");
        assert!(held[2].starts_with("body-sha256:"), "{held:?}");
        assert_ne!(held[1], held[2]);
        for (name, key) in [("b", &held[1]), ("c", &held[2])] {
            let e = event(&app, name, key).await;
            assert_eq!(e.body["event"]["event_id"], "evt_s", "{}", e.text);
            assert_eq!(e.body["record"]["state"], "needs_review");
            assert_eq!(e.body["record"]["last_error"]["category"], "key_collision");
            let item = listed(&app, name, "?state=needs_review", key).await;
            assert_eq!(item["last_error"]["category"], "key_collision", "{item}");
        }
        let collisions = eventually(Duration::from_secs(10), || async {
            let n = alerts
                .got()
                .iter()
                .filter_map(|g| serde_json::from_slice::<Value>(&g.body).ok())
                .filter(|v| v["reason"] == "key_collision")
                .count();
            n == 2
        })
        .await;
        assert!(collisions, "two key_collision alerts");
        // Each provider's retry is a duplicate of its own record.
        for (name, key) in [("a", &held[0]), ("b", &held[1]), ("c", &held[2])] {
            let r = post_stripe(&app, name, SECRET, &raw).await;
            assert_eq!(
                r.body["events"],
                json!([{"key": key, "status": "duplicate"}]),
                "{name}: {}",
                r.text
            );
            assert_eq!(r.header("idempotent-replayed"), Some("true"));
        }
        assert!(eventually(Duration::from_secs(10), || async { sink.count() == 1 }).await);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(keys(&sink), ["evt_s"], "the held ones wait for an operator");
        app.stop().await.expect("stop");
    }
}

/// A fan-out event's record completes at once; the list shows the event by its worst
/// delivery, and its `state` filter agrees with what each item shows.
#[tokio::test]
async fn a_fan_out_event_with_a_dead_delivery_is_listed_in_review() {
    for backend in backends() {
        let app = spawn_on(backend).await;
        let ok = Sink::start(vec![]).await;
        let gone = Sink::start(vec![answer(410)]).await;
        let doc = json!({
            "provider": "stripe",
            "secrets": [SECRET],
            "forwards": {
                "ok": {"url": ok.url, "timeout_ms": 1000},
                "gone": {"url": gone.url, "timeout_ms": 1000},
            },
        });
        assert_eq!(put_source(&app, "fan", &doc).await.status, 201);
        // `gone` answers its first delivery 410 (a dead letter at once), then 200.
        post_stripe(&app, "fan", SECRET, &body("evt_d", "invoice.paid")).await;
        let dead = json!({"ok": "completed", "gone": "needs_review"});
        assert!(until_states(&app, "fan", "evt_d", dead).await);
        let e = event(&app, "fan", "evt_d").await;
        assert_eq!(e.body["record"]["state"], "completed");
        post_stripe(&app, "fan", SECRET, &body("evt_e", "invoice.paid")).await;
        let all = json!({"ok": "completed", "gone": "completed"});
        assert!(until_states(&app, "fan", "evt_e", all.clone()).await);
        let shown = |item: Value| item["state"].clone();
        assert_eq!(
            shown(listed(&app, "fan", "", "evt_d").await),
            "needs_review"
        );
        assert_eq!(shown(listed(&app, "fan", "", "evt_e").await), "completed");
        let in_review = listed(&app, "fan", "?state=needs_review", "evt_d").await;
        assert_eq!(shown(in_review.clone()), "needs_review");
        // It shows why: the dead delivery's last error, as the event's read has it.
        let e = event(&app, "fan", "evt_d").await;
        let gone_read = e.body["destinations"]
            .as_array()
            .and_then(|d| d.iter().find(|d| d["name"] == "gone"))
            .cloned()
            .unwrap_or_default();
        let why = gone_read["attempts"]
            .as_array()
            .and_then(|a| a.last())
            .map(|a| a["error"].clone())
            .unwrap_or_default();
        assert!(why.is_object(), "{}", e.text);
        assert_eq!(in_review["last_error"], why, "{in_review}");
        assert_eq!(listed(&app, "fan", "", "evt_d").await["last_error"], why);
        assert_eq!(
            listed(&app, "fan", "", "evt_e").await["last_error"],
            Value::Null
        );
        assert_eq!(
            listed(&app, "fan", "?state=needs_review", "evt_e").await,
            Value::Null
        );
        assert_eq!(
            listed(&app, "fan", "?state=completed", "evt_d").await,
            Value::Null
        );
        assert_eq!(
            shown(listed(&app, "fan", "?state=completed", "evt_e").await),
            "completed"
        );
        // Redelivered: it leaves review in the list as it does in its read.
        let r = app
            .post(
                "/v1/sources/fan/events/evt_d/redeliver",
                json!({"note": "gone is back", "destination": "gone"}),
            )
            .await;
        assert_eq!(r.status, 202, "{}", r.text);
        assert!(until_states(&app, "fan", "evt_d", all).await);
        assert_eq!(shown(listed(&app, "fan", "", "evt_d").await), "completed");
        assert_eq!(
            listed(&app, "fan", "", "evt_d").await["last_error"],
            Value::Null
        );
        let l = app.get("/v1/sources/fan/events?state=needs_review").await;
        assert_eq!(l.body["items"], json!([]), "{}", l.text);
        app.stop().await.expect("stop");
    }
}
