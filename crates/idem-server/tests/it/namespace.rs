use serde_json::json;

use idem_testkit::app::*;

#[tokio::test]
async fn unused_namespace_answers_with_the_defaults() {
    let app = spawn_app().await;
    let r = app.namespace("fresh").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["namespace"], "fresh");
    assert_eq!(r.body["paused"], false);
    // The default policy, whose values the core's own tests pin to the spec.
    assert_eq!(r.body["policy"], idem::Policy::default().to_json());
    let counts = r.body["counts"].as_object().expect("counts");
    assert_eq!(counts.len(), 7);
    assert!(counts.values().all(|v| v == 0));
    app.namespace("bad%20ns")
        .await
        .problem(400, "invalid_namespace");
}

#[tokio::test]
async fn patch_merges_recursively_and_names_bad_fields() {
    let app = spawn_app().await;
    let r = app
        .patch_namespace(
            "ns",
            json!({"retry": {"max_attempts": 3}, "lease_expiry": "review"}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.body["policy"]["retry"],
        json!({"max_attempts": 3, "base_ms": 1000, "max_ms": 300000, "window_ms": 86_400_000})
    );
    assert_eq!(r.body["policy"]["lease_expiry"], "review");
    assert_eq!(r.body["policy"]["lease_ms"], 30000);
    let r = app.patch_namespace("ns", json!({"bogus": 1})).await;
    assert_eq!(r.problem(400, "unknown_field")["field"], "bogus");
    let r = app
        .patch_namespace("ns", json!({"retry": {"tries": 1}}))
        .await;
    assert_eq!(r.problem(400, "unknown_field")["field"], "retry.tries");
    let r = app.patch_namespace("ns", json!({"lease_ms": "30s"})).await;
    assert_eq!(r.problem(422, "invalid_field")["field"], "lease_ms");
    let r = app
        .patch_namespace("ns", json!({"retry": {"max_attempts": 0}}))
        .await;
    assert_eq!(
        r.problem(422, "invalid_field")["field"],
        "retry.max_attempts"
    );
    let r = app
        .patch_namespace("ns", json!({"alert_url": "ftp://x"}))
        .await;
    assert_eq!(r.problem(422, "invalid_field")["field"], "alert_url");
    let r = app.post_raw("/v1/namespaces/ns", "x").await;
    assert_eq!(r.status, 405);
    // Nothing of the refused patches stuck.
    let g = app.namespace("ns").await;
    assert_eq!(g.body["policy"]["retry"]["max_attempts"], 3);
    assert_eq!(g.body["policy"]["alert_url"], json!(null));
}

#[tokio::test]
async fn pause_stops_claims_but_lets_in_flight_work_land() {
    let app = spawn_app().await;
    let t = Api::acquired(&app.claim("ns", "a", json!({})).await);
    let t2 = Api::acquired(&app.claim("ns", "b", json!({})).await);
    let p = app.pause("ns").await;
    assert_eq!(p.status, 200, "{}", p.text);
    assert_eq!(p.body["paused"], true);
    let r = app.claim("ns", "c", json!({})).await;
    assert_eq!(r.status, 503, "{}", r.text);
    assert_eq!(r.body["outcome"], "paused");
    assert_eq!(r.body["record"], json!(null));
    // In-flight work lands while paused.
    assert_eq!(
        app.heartbeat("ns", "a", json!({"token": t})).await.status,
        200
    );
    assert_eq!(
        app.complete("ns", "a", json!({"token": t})).await.status,
        200
    );
    assert_eq!(
        app.fail("ns", "b", json!({"token": t2, "http_status": 429}))
            .await
            .status,
        200
    );
    // Replays too get 503 while paused.
    assert_eq!(app.claim("ns", "a", json!({})).await.status, 503);
    app.record("ns", "c").await.problem(404, "not_found");
    let r = app.resume("ns").await;
    assert_eq!(r.body["paused"], false);
    assert_eq!(app.claim("ns", "c", json!({})).await.status, 201);
    assert_eq!(app.claim("ns", "a", json!({})).await.status, 200);
    // Other namespaces were never paused.
    let counts = app.namespace("ns").await.body["counts"].clone();
    assert_eq!(counts["completed"], 1);
    assert_eq!(counts["processing"], 1);
}

#[tokio::test]
async fn daily_limit_answers_429_with_retry_after_until_midnight() {
    for backend in backends() {
        let app = spawn_on(backend).await;
        app.patch_namespace("ns", json!({"daily_limit": 1})).await;
        let t = Api::acquired(&app.claim("ns", "first", json!({})).await);
        let r = app.claim("ns", "second", json!({})).await;
        assert_eq!(r.status, 429, "{}", r.text);
        assert_eq!(r.body["outcome"], "limited");
        assert_eq!(r.body["record"], json!(null));
        let secs: i64 = r
            .header("retry-after")
            .and_then(|v| v.parse().ok())
            .expect("Retry-After");
        let expect = (app.now().ms_to_next_utc_midnight() + 999) / 1000;
        assert!((secs - expect).abs() <= 2, "{secs} vs {expect}");
        // Existing keys are not first-time acquisitions: not limited.
        assert_eq!(
            app.claim("ns", "first", json!({})).await.body["outcome"],
            "in_flight"
        );
        app.complete("ns", "first", json!({"token": t})).await;
        assert_eq!(app.claim("ns", "first", json!({})).await.status, 200);
        app.record("ns", "second").await.problem(404, "not_found");
    }
}

/// What the console's namespace page shows as today's first-time acquisitions of `ns`
/// ("count / limit").
async fn acquired_today_shown(app: &TestApp, ns: &str) -> String {
    let r = app
        .http
        .get(format!("{}/console/ns/{ns}", app.base))
        .send()
        .await
        .expect("console");
    assert_eq!(r.status(), 200);
    let page = r.text().await.expect("page");
    let from = page
        .find("First-time acquisitions today: ")
        .unwrap_or_else(|| panic!("no count on {page}"))
        + "First-time acquisitions today: ".len();
    let rest = &page[from..];
    rest[..rest.find('.').expect("end")].to_owned()
}

/// The ceiling is of the day's first-time acquisitions, also those made while no
/// `daily_limit` was set: the console counts them, and a limit set later counts them too.
#[tokio::test]
async fn first_time_claims_made_without_a_limit_count_against_a_later_one() {
    for backend in backends() {
        let app = spawn_on(backend).await;
        for k in ["k0", "k1", "k2"] {
            assert_eq!(
                app.claim("a", k, json!({})).await.status,
                201,
                "{backend:?}"
            );
        }
        assert_eq!(acquired_today_shown(&app, "a").await, "3 / no limit");
        assert_eq!(app.namespace("a").await.body["stats"]["acquired_first"], 3);
        let r = app.patch_namespace("a", json!({"daily_limit": 5})).await;
        assert_eq!(r.status, 200, "{}", r.text);
        let mut statuses = Vec::new();
        for k in ["m0", "m1", "m2", "m3"] {
            statuses.push(app.claim("a", k, json!({})).await.status);
        }
        assert_eq!(statuses, [201, 201, 429, 429], "{backend:?}");
        assert_eq!(acquired_today_shown(&app, "a").await, "5 / 5");
        // A ceiling below today's count: limited at once.
        app.patch_namespace("a", json!({"daily_limit": 2})).await;
        assert_eq!(app.claim("a", "x", json!({})).await.status, 429);
        assert_eq!(acquired_today_shown(&app, "a").await, "5 / 2");
    }
}

#[tokio::test]
async fn config_file_policy_is_applied_at_start() {
    let app = spawn_with(Options {
        namespaces: vec![(
            "pay",
            json!({"lease_expiry": "review", "retry": {"max_attempts": 2}}),
        )],
        ..Default::default()
    })
    .await;
    let r = app.namespace("pay").await;
    assert_eq!(r.body["policy"]["lease_expiry"], "review");
    assert_eq!(r.body["policy"]["retry"]["max_attempts"], 2);
    assert_eq!(r.body["policy"]["retry"]["base_ms"], 1000);
}

/// `counts` of `GET /v1/namespaces/{ns}` maps every state to a number, zeros included, exact
/// in the answer read right after each write, on both stores (PostgreSQL's statements count
/// the records they write since schema 16). A key of every visible ASCII character counts
/// like any other; a replay changes nothing.
#[tokio::test]
async fn counts_are_exact_right_after_each_write_on_both_stores() {
    async fn expect(app: &TestApp, step: &str, want: &[(&str, i64)]) {
        let r = app.namespace("c").await;
        assert_eq!(r.status, 200, "{step}: {}", r.text);
        let counts = r.body["counts"].as_object().expect("counts");
        assert_eq!(counts.len(), 7, "{step}: {counts:?}");
        for (state, n) in counts {
            let w = want.iter().find(|(s, _)| s == state).map_or(0, |(_, n)| *n);
            assert_eq!(n.as_i64(), Some(w), "{step}: {state} in {counts:?}");
        }
    }
    let every: String = (0x21u8..=0x7e).map(char::from).collect();
    for backend in backends() {
        let app = spawn_on(backend).await;
        let step = |s: &str| format!("{backend:?}: {s}");
        expect(&app, &step("fresh"), &[]).await;
        let a = Api::acquired(&app.claim("c", "a", json!({})).await);
        expect(&app, &step("claim a"), &[("processing", 1)]).await;
        let w = Api::acquired(&app.claim("c", &every, json!({})).await);
        expect(&app, &step("claim every"), &[("processing", 2)]).await;
        let r = app.complete("c", "a", json!({"token": a})).await;
        assert_eq!(r.status, 200, "{}", r.text);
        expect(
            &app,
            &step("complete a"),
            &[("processing", 1), ("completed", 1)],
        )
        .await;
        assert_eq!(app.claim("c", "a", json!({})).await.status, 200);
        expect(
            &app,
            &step("replay a"),
            &[("processing", 1), ("completed", 1)],
        )
        .await;
        let r = app
            .fail("c", &every, json!({"token": w, "kind": "ambiguous"}))
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
        let after_fail = [("completed", 1), ("needs_review", 1)];
        expect(&app, &step("ambiguous fail"), &after_fail).await;
        for (key, kind, state) in [
            ("r", "retryable", "failed_retryable"),
            ("p", "permanent", "failed_permanent"),
        ] {
            let t = Api::acquired(&app.claim("c", key, json!({})).await);
            let r = app.fail("c", key, json!({"token": t, "kind": kind})).await;
            assert_eq!(r.body["state"], state, "{}", r.text);
        }
        let all = [
            ("completed", 1),
            ("needs_review", 1),
            ("failed_retryable", 1),
            ("failed_permanent", 1),
        ];
        expect(&app, &step("retryable and permanent fails"), &all).await;
    }
}
