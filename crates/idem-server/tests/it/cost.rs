//! Cost and recovery over HTTP, on every store this run has: `cost` on complete and fail
//! (validation naming `cost.tokens` / `cost.usd`, nothing written on a refusal), the record's
//! and the events' cost, fenced completions, the namespace's 24-hour `stats`, and the metrics
//! of the section moving — `idem_review_oldest_seconds` at scrape time, without a tick.
//!
//! Metrics are process-wide and tests run in parallel, so counters are checked as having
//! grown by at least what a test did; the gauges are checked against this test's own clock.

use serde_json::{json, Value};

use idem_testkit::app::*;

/// The value of the first sample line starting with `name` (labels included) in `text`.
fn sample(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| {
            l.strip_prefix(name)
                .and_then(|rest| rest.strip_prefix(' '))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0.0)
}

async fn metrics(app: &TestApp) -> String {
    let r = app.get("/metrics").await;
    assert_eq!(r.status, 200);
    r.text
}

#[tokio::test]
async fn bad_cost_is_422_naming_the_member_and_writes_nothing() {
    for backend in backends() {
        let app = spawn_on(backend).await;
        let t = Api::acquired(&app.claim("c", "k", json!({})).await);
        let before = app.record("c", "k").await.body;
        for (cost, field) in [
            (json!({"tokens": -1}), "cost.tokens"),
            (json!({"tokens": 1.5}), "cost.tokens"),
            (json!({"tokens": "12"}), "cost.tokens"),
            (json!({"usd": -0.01}), "cost.usd"),
            (json!({"usd": "0.5"}), "cost.usd"),
            (json!({"usd": true}), "cost.usd"),
            (json!("a lot"), "cost"),
        ] {
            for action in ["complete", "fail"] {
                let body = json!({"token": t, "kind": "retryable", "cost": cost});
                let body = if action == "complete" {
                    json!({"token": t, "cost": body["cost"]})
                } else {
                    body
                };
                let r = app
                    .post(&format!("{}/{action}", Api::key_path("c", "k")), body)
                    .await;
                let p = r.problem(422, "invalid_field");
                assert_eq!(p["field"], field, "{backend:?} {action} {cost}: {}", r.text);
            }
        }
        // An unknown member is refused like every unknown member, naming its full path.
        let r = app
            .complete(
                "c",
                "k",
                json!({"token": t, "cost": {"tokens": 1, "eur": 2}}),
            )
            .await;
        assert_eq!(r.problem(400, "unknown_field")["field"], "cost.eur");
        assert_eq!(
            app.record("c", "k").await.body,
            before,
            "{backend:?}: nothing written"
        );
    }
}

#[tokio::test]
async fn cost_is_summed_on_the_record_and_shown_on_its_events() {
    for backend in backends() {
        let app = spawn_on(backend).await;
        let t = Api::acquired(&app.claim("c", "draft", json!({})).await);
        let r = app
            .fail(
                "c",
                "draft",
                json!({"token": t, "kind": "retryable", "cost": {"tokens": 900, "usd": 0.012}}),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(
            r.body["record"]["cost"],
            json!({"tokens": 900, "usd": 0.012, "retry_tokens": 0, "retry_usd": 0.0})
        );
        app.advance(120_000);
        let t2 = Api::acquired(&app.claim("c", "draft", json!({})).await);
        let r = app
            .complete("c", "draft", json!({"token": t2, "cost": {"tokens": 100}}))
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
        let got = app.record("c", "draft").await.body;
        assert_eq!(
            got["record"]["cost"],
            json!({"tokens": 1000, "usd": 0.012, "retry_tokens": 100, "retry_usd": 0.0}),
            "{backend:?}"
        );
        let costs: Vec<Value> = got["events"]
            .as_array()
            .expect("events")
            .iter()
            .map(|e| e["cost"].clone())
            .collect();
        assert_eq!(
            costs,
            [
                json!(null),
                json!({"tokens": 900, "usd": 0.012}),
                json!(null),
                json!({"tokens": 100, "usd": 0.0})
            ],
            "{backend:?}"
        );
        // A record that reported nothing shows zeros.
        let r = app.claim("c", "plain", json!({})).await;
        assert_eq!(
            r.body["record"]["cost"],
            json!({"tokens": 0, "usd": 0.0, "retry_tokens": 0, "retry_usd": 0.0})
        );
    }
}

#[tokio::test]
async fn namespace_stats_count_the_last_24_hours() {
    for backend in backends() {
        let app = spawn_on(backend).await;
        let s = &app.namespace("s").await.body["stats"];
        assert_eq!(
            *s,
            json!({"acquired_first": 0, "acquired_retry": 0,
                   "cost": {"tokens": 0, "usd": 0.0, "retry_tokens": 0, "retry_usd": 0.0}})
        );
        let t = Api::acquired(&app.claim("s", "a", json!({})).await);
        app.fail(
            "s",
            "a",
            json!({"token": t, "kind": "retryable", "cost": {"tokens": 10, "usd": 0.5}}),
        )
        .await;
        app.advance(60_000);
        let t = Api::acquired(&app.claim("s", "a", json!({})).await);
        app.complete(
            "s",
            "a",
            json!({"token": t, "cost": {"tokens": 5, "usd": 0.25}}),
        )
        .await;
        Api::acquired(&app.claim("s", "b", json!({})).await);
        let r = app.namespace("s").await;
        assert_eq!(
            r.body["stats"],
            json!({"acquired_first": 2, "acquired_retry": 1,
                   "cost": {"tokens": 15, "usd": 0.75, "retry_tokens": 5, "retry_usd": 0.25}}),
            "{backend:?}"
        );
        // PATCH answers like GET, stats included.
        let r = app.patch_namespace("s", json!({"lease_ms": 20000})).await;
        assert_eq!(r.body["stats"]["acquired_first"], 2);
        // A day later the window has moved past them.
        app.advance(25 * 3_600_000);
        assert_eq!(app.namespace("s").await.body["stats"]["acquired_first"], 0);
    }
}

#[tokio::test]
async fn fenced_completion_is_answered_lease_lost_recorded_counted_and_alert_queued() {
    for backend in backends() {
        let app = spawn_on(backend).await;
        app.patch_namespace("z", json!({"alert_url": "http://127.0.0.1:9/hook"}))
            .await;
        let before = sample(&metrics(&app).await, "idem_fenced_completions_total");
        let zombie = Api::acquired(&app.claim("z", "k", json!({"lease_ms": 1000})).await);
        app.advance(1001);
        let fresh = Api::acquired(&app.claim("z", "k", json!({})).await);
        app.complete("z", "k", json!({"token": fresh, "external_ref": "ch_2"}))
            .await;
        let r = app
            .complete(
                "z",
                "k",
                json!({"token": zombie, "external_ref": "ch_1", "cost": {"tokens": 7}}),
            )
            .await;
        r.problem(409, "lease_lost");
        let got = app.record("z", "k").await.body;
        assert_eq!(got["record"]["external_ref"], "ch_2", "one completion kept");
        assert_eq!(got["record"]["cost"]["tokens"], 7);
        let last = &got["events"][got["events"].as_array().map_or(0, |a| a.len() - 1)];
        assert_eq!(last["type"], "lease_lost");
        assert!(last["note"]
            .as_str()
            .is_some_and(|n| n.starts_with("fenced_completion")));
        let after = sample(&metrics(&app).await, "idem_fenced_completions_total");
        assert!(after >= before + 1.0, "{backend:?}: {before} → {after}");
        let due = app
            .store
            .due_alerts(app.now(), 10, 60_000)
            .await
            .expect("due");
        assert!(
            due.iter().any(|a| a.reason == "fenced_completion"),
            "{backend:?}: {due:?}"
        );
        // fail with sent:false is not a fenced completion (see the core's exhaustive table);
        // it is still lease_lost.
        app.fail(
            "z",
            "k",
            json!({"token": zombie, "sent": false, "error": {"category": "connection"}}),
        )
        .await
        .problem(409, "lease_lost");
    }
}

#[tokio::test]
async fn cost_and_recovery_metrics_move_and_review_age_is_current_at_scrape() {
    for backend in backends() {
        let app = spawn_on(backend).await;
        let m = metrics(&app).await;
        for name in [
            "idem_cost_tokens_total{attempt=\"first\"}",
            "idem_cost_tokens_total{attempt=\"retry\"}",
            "idem_cost_usd_total{attempt=\"first\"}",
            "idem_cost_usd_total{attempt=\"retry\"}",
            "idem_fenced_completions_total",
            "idem_review_oldest_seconds",
            "# TYPE idem_recovery_seconds histogram",
            "# TYPE idem_cost_usd_total counter",
        ] {
            assert!(m.contains(name), "missing {name} in\n{m}");
        }
        let first = sample(&m, "idem_cost_tokens_total{attempt=\"first\"}");
        let retry = sample(&m, "idem_cost_tokens_total{attempt=\"retry\"}");
        let usd_retry = sample(&m, "idem_cost_usd_total{attempt=\"retry\"}");
        let recovered = sample(&m, "idem_recovery_seconds_count");

        let t = Api::acquired(&app.claim("m", "a", json!({})).await);
        app.fail(
            "m",
            "a",
            json!({"token": t, "kind": "retryable", "cost": {"tokens": 40}}),
        )
        .await;
        app.advance(60_000);
        let t = Api::acquired(&app.claim("m", "a", json!({})).await);
        // The retry ends in doubt: it goes to a person.
        app.fail(
            "m",
            "a",
            json!({"token": t, "kind": "ambiguous", "cost": {"tokens": 60, "usd": 0.5}}),
        )
        .await;
        let m = metrics(&app).await;
        assert!(sample(&m, "idem_cost_tokens_total{attempt=\"first\"}") >= first + 40.0);
        assert!(sample(&m, "idem_cost_tokens_total{attempt=\"retry\"}") >= retry + 60.0);
        assert!(sample(&m, "idem_cost_usd_total{attempt=\"retry\"}") >= usd_retry + 0.5);

        // The review age is computed at scrape time from this server's clock: it moves as
        // the clock does, with no background tick in between.
        let age0 = sample(&m, "idem_review_oldest_seconds");
        app.advance(300_000);
        let age1 = sample(&metrics(&app).await, "idem_review_oldest_seconds");
        assert!(
            (age1 - age0 - 300.0).abs() < 1.0,
            "{backend:?}: {age0} → {age1}"
        );
        app.advance(60_000);
        let age2 = sample(&metrics(&app).await, "idem_review_oldest_seconds");
        assert!(
            (age2 - age1 - 60.0).abs() < 1.0,
            "{backend:?}: {age1} → {age2}"
        );

        // Resolving it observes the time to recovery (360 s) and empties the gauge.
        let r = app
            .resolve(
                "m",
                "a",
                json!({"action": "completed", "note": "sent, per the CRM"}),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
        let m = metrics(&app).await;
        assert!(sample(&m, "idem_recovery_seconds_count") >= recovered + 1.0);
        assert_eq!(sample(&m, "idem_review_oldest_seconds"), 0.0, "{backend:?}");
    }
}
