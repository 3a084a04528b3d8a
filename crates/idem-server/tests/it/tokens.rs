//! Tokens for people over HTTP: expiry, the list (never a secret), revocation (on every
//! instance) and whoami, on SQLite and PostgreSQL.

use idem::Role;
use serde_json::{json, Value};

use idem_testkit::app::*;
use idem_testkit::pg::PgDb;

fn admin_and_worker(backend: Backend) -> Options {
    Options {
        tokens: vec![(Role::Admin, "*"), (Role::Worker, "pay")],
        backend,
        ..Default::default()
    }
}

async fn delete(api: &Api, path: &str) -> Resp {
    api.send(api.http.delete(format!("{}{path}", api.base)))
        .await
}

/// The id `GET /v1/whoami` reports for `secret`.
async fn id_of(app: &TestApp, secret: &str) -> i64 {
    let r = app.as_token(Some(secret)).get("/v1/whoami").await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.body["token_id"]
        .as_i64()
        .unwrap_or_else(|| panic!("no token_id in {}", r.text))
}

#[tokio::test]
async fn an_expired_token_is_refused_on_every_endpoint() {
    for backend in backends() {
        let app = spawn_with(admin_and_worker(backend)).await;
        let r = app
            .post(
                "/v1/tokens",
                json!({"role": "operator", "namespace": "pay", "expires_in_ms": 60_000}),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.text);
        let expected = app.now().plus_ms(60_000).to_rfc3339();
        assert_eq!(r.body["expires_at"], expected.as_str());
        let op = app.as_token(Some(&r.token()));
        assert_eq!(op.namespace("pay").await.status, 200);
        app.advance(59_999);
        assert_eq!(op.get("/v1/whoami").await.status, 200);
        app.advance(1);
        op.namespace("pay").await.problem(401, "unauthorized");
        op.get("/v1/whoami").await.problem(401, "unauthorized");
        op.claim("pay", "k", json!({}))
            .await
            .problem(401, "unauthorized");
        op.record("pay", "k").await.problem(401, "unauthorized");
        // Still listed (with its expiry), so an admin sees what ran out.
        let list = app.get("/v1/tokens").await;
        let items = list.body["items"].as_array().cloned().unwrap_or_default();
        assert!(
            items.iter().any(|t| t["expires_at"] == expected.as_str()),
            "{}",
            list.text
        );
        app.post(
            "/v1/tokens",
            json!({"role": "worker", "namespace": "pay", "expires_in_ms": 0}),
        )
        .await
        .problem(422, "invalid_field");
    }
}

#[tokio::test]
async fn the_list_shows_every_live_token_and_never_a_secret() {
    for backend in backends() {
        let app = spawn_with(admin_and_worker(backend)).await;
        let r = app.get("/v1/tokens").await;
        assert_eq!(r.status, 200, "{}", r.text);
        let items = r.body["items"].as_array().cloned().unwrap_or_default();
        assert_eq!(items.len(), 2, "{}", r.text);
        let keys = |t: &Value| {
            let mut k: Vec<String> = t
                .as_object()
                .map(|o| o.keys().cloned().collect())
                .unwrap_or_default();
            k.sort();
            k
        };
        for t in &items {
            let k = keys(t);
            for needed in [
                "created_at",
                "expires_at",
                "last_used_at",
                "namespace",
                "role",
                "token_id",
            ] {
                assert!(k.iter().any(|x| x == needed), "{needed} in {}", r.text);
            }
            assert!(
                !k.iter()
                    .any(|x| x.contains("secret") || x.contains("hash") || x == "token"),
                "{}",
                r.text
            );
        }
        for secret in &app.tokens {
            assert!(!r.text.contains(secret.as_str()), "a secret is listed");
            assert!(
                !r.text.contains(&idem::hash_secret(secret)),
                "a hash is listed"
            );
        }
        assert_eq!(items[0]["role"], "admin");
        assert_eq!(items[0]["namespace"], "*");
        assert_eq!(items[1]["role"], "worker");
        assert_eq!(items[1]["namespace"], "pay");
        assert_eq!(items[1]["expires_at"], Value::Null);
        // The admin has called, the worker not yet.
        assert!(items[0]["last_used_at"].is_string(), "{}", r.text);
        assert_eq!(items[1]["last_used_at"], Value::Null, "{}", r.text);
        // Admin only.
        app.as_token(Some(&app.tokens[1]))
            .get("/v1/tokens")
            .await
            .problem(403, "forbidden");
    }
}

#[tokio::test]
async fn last_used_at_is_written_at_most_once_a_minute() {
    let app = spawn_with(admin_and_worker(Backend::Sqlite)).await;
    let worker = app.as_token(Some(&app.tokens[1]));
    let first = app.now();
    assert_eq!(worker.namespace("pay").await.status, 200);
    app.advance(30_000);
    assert_eq!(worker.namespace("pay").await.status, 200);
    let stored = |list: &Resp| list.body["items"][1]["last_used_at"].clone();
    let list = app.get("/v1/tokens").await;
    assert_eq!(stored(&list), first.to_rfc3339().as_str(), "{}", list.text);
    app.advance(30_000);
    assert_eq!(worker.namespace("pay").await.status, 200);
    let list = app.get("/v1/tokens").await;
    assert_eq!(
        stored(&list),
        app.now().to_rfc3339().as_str(),
        "{}",
        list.text
    );
}

#[tokio::test]
async fn a_revoked_token_is_refused_at_once() {
    for backend in backends() {
        let app = spawn_with(admin_and_worker(backend)).await;
        let worker = app.as_token(Some(&app.tokens[1]));
        assert_eq!(worker.namespace("pay").await.status, 200);
        let id = id_of(&app, &app.tokens[1]).await;
        let r = delete(&app, &format!("/v1/tokens/{id}")).await;
        assert_eq!(r.status, 204, "{}", r.text);
        worker.namespace("pay").await.problem(401, "unauthorized");
        worker.get("/v1/whoami").await.problem(401, "unauthorized");
        let list = app.get("/v1/tokens").await;
        assert_eq!(list.body["items"].as_array().map(Vec::len), Some(1));
        delete(&app, &format!("/v1/tokens/{id}"))
            .await
            .problem(404, "not_found");
        delete(&app, "/v1/tokens/999999")
            .await
            .problem(404, "not_found");
        delete(&app, "/v1/tokens/abc")
            .await
            .problem(404, "not_found");
        // Revoking every other token does not switch auth off.
        app.as_token(None)
            .namespace("pay")
            .await
            .problem(401, "unauthorized");
    }
}

#[tokio::test]
async fn the_last_live_admin_token_is_not_revoked_over_the_api() {
    let app = spawn_with(admin_and_worker(Backend::Sqlite)).await;
    let admin = id_of(&app, &app.tokens[0]).await;
    delete(&app, &format!("/v1/tokens/{admin}"))
        .await
        .problem(403, "forbidden");
    assert_eq!(app.get("/v1/whoami").await.status, 200);
    // With a second admin the first can go.
    let r = app
        .post("/v1/tokens", json!({"role": "admin", "namespace": "*"}))
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let second = app.as_token(Some(&r.token()));
    let r = delete(&second, &format!("/v1/tokens/{admin}")).await;
    assert_eq!(r.status, 204, "{}", r.text);
    app.get("/v1/whoami").await.problem(401, "unauthorized");
}

#[tokio::test]
async fn a_revocation_holds_on_another_instance_of_the_same_database() {
    let Some(db) = PgDb::create("a revocation seen by a second instance") else {
        return;
    };
    let one = spawn_with(Options {
        tokens: vec![(Role::Admin, "*"), (Role::Worker, "pay")],
        db: Some(db.url().to_owned()),
        ..Default::default()
    })
    .await;
    let two = spawn_with(Options {
        db: Some(db.url().to_owned()),
        ..Default::default()
    })
    .await;
    let worker_on_two = two.as_token(Some(&one.tokens[1]));
    // Warm the second instance up with the token it is about to lose.
    assert_eq!(worker_on_two.namespace("pay").await.status, 200);
    let id = id_of(&one, &one.tokens[1]).await;
    assert_eq!(delete(&one, &format!("/v1/tokens/{id}")).await.status, 204);
    worker_on_two
        .namespace("pay")
        .await
        .problem(401, "unauthorized");
}

#[tokio::test]
async fn whoami_names_the_caller_for_each_role() {
    for backend in backends() {
        let app = spawn_with(Options {
            tokens: vec![
                (Role::Admin, "*"),
                (Role::Worker, "pay"),
                (Role::Operator, "pay"),
            ],
            backend,
            ..Default::default()
        })
        .await;
        let mut ids = vec![];
        for (secret, role, ns) in [
            (&app.tokens[0], "admin", "*"),
            (&app.tokens[1], "worker", "pay"),
            (&app.tokens[2], "operator", "pay"),
        ] {
            let r = app.as_token(Some(secret)).get("/v1/whoami").await;
            assert_eq!(r.status, 200, "{}", r.text);
            assert_eq!(r.body["role"], role);
            assert_eq!(r.body["namespace"], ns);
            let keys = r.body.as_object().map(|o| o.len());
            assert_eq!(keys, Some(3), "{}", r.text);
            ids.push(r.body["token_id"].as_i64());
        }
        let listed: Vec<Option<i64>> = app.get("/v1/tokens").await.body["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|t| t["token_id"].as_i64())
            .collect();
        assert_eq!(ids, listed);
        app.as_token(None)
            .get("/v1/whoami")
            .await
            .problem(401, "unauthorized");
        app.as_token(Some("idem_wrong"))
            .get("/v1/whoami")
            .await
            .problem(401, "unauthorized");
    }
}

#[tokio::test]
async fn whoami_without_any_token_is_the_open_loopback_admin() {
    let app = spawn_app().await;
    let r = app.get("/v1/whoami").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.body,
        json!({"role": "admin", "namespace": "*", "token_id": null})
    );
}
