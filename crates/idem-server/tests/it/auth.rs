use std::time::Duration;

use idem::Role;
use serde_json::json;

use idem_testkit::app::*;

fn with_tokens() -> Options {
    Options {
        tokens: vec![
            (Role::Admin, "*"),
            (Role::Worker, "pay"),
            (Role::Operator, "pay"),
            (Role::Admin, "pay"),
        ],
        ..Default::default()
    }
}

#[tokio::test]
async fn once_a_token_exists_every_v1_call_needs_one() {
    let app = spawn_with(with_tokens()).await;
    let anon = app.as_token(None);
    let r = anon.claim("pay", "k", json!({})).await;
    r.problem(401, "unauthorized");
    assert_eq!(r.header("www-authenticate"), Some("Bearer"));
    anon.namespace("pay").await.problem(401, "unauthorized");
    anon.derive(json!({"event": {"id": 1}, "fields": ["/id"]}))
        .await
        .problem(401, "unauthorized");
    app.as_token(Some("idem_wrong"))
        .claim("pay", "k", json!({}))
        .await
        .problem(401, "unauthorized");
    let r = anon
        .send(
            anon.http
                .post(format!("{}/v1/tokens", anon.base))
                .header("authorization", "Basic abc"),
        )
        .await;
    r.problem(401, "unauthorized");
    // Probes need none.
    for p in ["/healthz", "/readyz", "/metrics", "/openapi.json"] {
        assert_eq!(anon.get(p).await.status, 200, "{p}");
    }
    app.record("pay", "k").await.problem(404, "not_found");
    // Under /v1 an unknown path, or a method the path does not route, needs a token too:
    // 401 without one, then the 404 / 405 with any valid token (whatever its role or scope).
    let worker = app.as_token(Some(&app.tokens[1]));
    for path in ["/v1/nope", "/v1", "/v1/namespaces/pay/keys/k/nope"] {
        anon.get(path).await.problem(401, "unauthorized");
        app.as_token(Some("idem_wrong"))
            .get(path)
            .await
            .problem(401, "unauthorized");
        worker.get(path).await.problem(404, "not_found");
    }
    let delete = |c: &Api| {
        c.http
            .delete(format!("{}/v1/namespaces/pay/keys/k", c.base))
    };
    anon.send(delete(&anon)).await.problem(401, "unauthorized");
    let r = worker.send(delete(&worker)).await;
    r.problem(405, "method_not_allowed");
    assert!(
        r.header("allow").is_some_and(|a| a.contains("GET")),
        "{}",
        r.text
    );
    // Outside /v1 an unknown path is a 404 without a token.
    anon.get("/v1nope").await.problem(404, "not_found");
    anon.get("/nope").await.problem(404, "not_found");
}

#[tokio::test]
async fn roles_and_scopes_are_enforced() {
    let app = spawn_with(with_tokens()).await;
    let worker = app.as_token(Some(&app.tokens[1]));
    let operator = app.as_token(Some(&app.tokens[2]));
    let t = Api::acquired(&worker.claim("pay", "k", json!({})).await);
    assert_eq!(worker.record("pay", "k").await.status, 200);
    assert_eq!(worker.namespace("pay").await.status, 200);
    assert_eq!(
        worker
            .derive(json!({"event": {"id": 1}, "fields": ["/id"]}))
            .await
            .status,
        200
    );
    // Worker: no operator calls.
    worker.list("pay", "").await.problem(403, "forbidden");
    worker
        .resolve("pay", "k", json!({"action": "retry", "note": "x"}))
        .await
        .problem(403, "forbidden");
    worker.pause("pay").await.problem(403, "forbidden");
    worker
        .patch_namespace("pay", json!({"lease_ms": 5}))
        .await
        .problem(403, "forbidden");
    // Out of scope.
    worker
        .claim("other", "k", json!({}))
        .await
        .problem(403, "forbidden");
    operator.list("other", "").await.problem(403, "forbidden");
    app.record("other", "k").await.problem(404, "not_found");
    // Operator within scope.
    assert_eq!(operator.list("pay", "").await.status, 200);
    assert_eq!(operator.pause("pay").await.status, 200);
    assert_eq!(operator.resume("pay").await.status, 200);
    operator
        .post("/v1/tokens", json!({"role": "worker", "namespace": "pay"}))
        .await
        .problem(403, "forbidden");
    assert_eq!(
        worker
            .complete("pay", "k", json!({"token": t}))
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn admin_creates_tokens_that_work_at_once() {
    let app = spawn_with(with_tokens()).await;
    let r = app
        .post(
            "/v1/tokens",
            json!({"role": "worker", "namespace": "mail", "label": "n8n"}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.body["role"], "worker");
    assert_eq!(r.body["namespace"], "mail");
    let secret = r.token();
    let new = app.as_token(Some(&secret));
    assert_eq!(new.claim("mail", "k", json!({})).await.status, 201);
    new.claim("pay", "k", json!({}))
        .await
        .problem(403, "forbidden");
    // A namespace-scoped admin cannot mint tokens outside its scope.
    let scoped_admin = app.as_token(Some(&app.tokens[3]));
    scoped_admin
        .post("/v1/tokens", json!({"role": "admin", "namespace": "*"}))
        .await
        .problem(403, "forbidden");
    assert_eq!(
        scoped_admin
            .post("/v1/tokens", json!({"role": "worker", "namespace": "pay"}))
            .await
            .status,
        201
    );
    let r = app
        .post("/v1/tokens", json!({"role": "root", "namespace": "*"}))
        .await;
    assert_eq!(r.problem(422, "invalid_field")["field"], "role");
    let r = app
        .post("/v1/tokens", json!({"role": "worker", "namespace": "a b"}))
        .await;
    assert_eq!(r.problem(422, "invalid_field")["field"], "namespace");
    let r = app.post("/v1/tokens", json!({"role": "worker"})).await;
    assert_eq!(r.problem(422, "invalid_field")["field"], "namespace");
}

#[tokio::test]
async fn without_tokens_auth_is_off_on_loopback_and_turns_on_with_the_first_token() {
    let app = spawn_app().await;
    assert_eq!(app.claim("ns", "k", json!({})).await.status, 201);
    // The first token comes from the command line (`idem token create` writes the store).
    let secret = idem::generate_secret();
    app.store
        .create_token(
            idem::NewApiToken {
                secret_hash: idem::hash_secret(&secret),
                role: Role::Admin,
                scope: "*".into(),
                label: None,
                expires_at: None,
            },
            app.now(),
        )
        .await
        .expect("create token");
    // Seen within the auth cache's second.
    assert!(
        eventually(Duration::from_secs(3), || async {
            app.namespace("ns").await.status == 401
        })
        .await,
        "auth must turn on"
    );
    let admin = app.as_token(Some(&secret));
    assert_eq!(admin.claim("ns", "k2", json!({})).await.status, 201);
}

#[tokio::test]
async fn without_tokens_the_api_refuses_to_create_the_first_one_and_locks_nobody_out() {
    for backend in backends() {
        let app = spawn_on(backend).await;
        for body in [
            json!({"role": "admin", "namespace": "*"}),
            json!({"role": "worker", "namespace": "pay", "label": "n8n"}),
        ] {
            let r = app.post("/v1/tokens", body).await;
            let p = r.problem(403, "forbidden");
            let detail = p["detail"].as_str().unwrap_or_default();
            assert!(
                detail.contains("idem token create --namespace") && detail.contains("--role"),
                "{backend:?}: {detail}"
            );
        }
        // Nothing was written, and every client still gets in without a token.
        assert_eq!(
            app.store.token_count().await.expect("count"),
            0,
            "{backend:?}"
        );
        let r = app.claim("ns", "k", json!({})).await;
        assert_eq!(r.status, 201, "{backend:?}: {}", r.text);
        assert_eq!(app.namespace("ns").await.status, 200, "{backend:?}");
    }
}

#[tokio::test]
async fn with_tokens_an_admin_still_creates_tokens_over_the_api() {
    for backend in backends() {
        let app = spawn_with(Options {
            backend,
            ..with_tokens()
        })
        .await;
        let r = app
            .post("/v1/tokens", json!({"role": "worker", "namespace": "pay"}))
            .await;
        assert_eq!(r.status, 201, "{backend:?}: {}", r.text);
        let worker = app.as_token(Some(&r.token()));
        assert_eq!(worker.claim("pay", "k", json!({})).await.status, 201);
        assert_eq!(
            app.store.token_count().await.expect("count"),
            5,
            "{backend:?}"
        );
    }
}

#[tokio::test]
async fn refuses_a_non_loopback_address_without_tokens() {
    let dir = tempfile::tempdir().expect("tmp");
    let url = format!("sqlite://{}", dir.path().join("idem.db").display());
    let ledger = idem::open(&url).await.expect("open");
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0")
        .await
        .expect("bind");
    let run = idem_server::run(idem_server::Config::default(), ledger, listener, async {
        tokio::time::sleep(Duration::from_secs(5)).await
    });
    let err = tokio::time::timeout(Duration::from_secs(3), run)
        .await
        .expect("refused at once")
        .expect_err("must refuse");
    let msg = err.to_string();
    assert!(msg.contains("without API tokens"), "{msg}");
}

#[tokio::test]
async fn head_is_checked_like_get_and_wrong_methods_answer_405() {
    let app = spawn_with(with_tokens()).await;
    let anon = app.as_token(None);
    // HEAD is routed as GET, so it needs what GET needs.
    let url = format!("{}/v1/namespaces/pay/keys/k", anon.base);
    assert_eq!(anon.send(anon.http.head(&url)).await.status, 401);
    let worker = app.as_token(Some(&app.tokens[1]));
    assert_eq!(worker.send(worker.http.head(&url)).await.status, 404);
    // A method the path does not route: 405 with a token; like every /v1 call, 401
    // without one.
    let claim = format!("{}/v1/namespaces/pay/keys/k/claim", anon.base);
    anon.send(anon.http.get(&claim))
        .await
        .problem(401, "unauthorized");
    worker
        .send(worker.http.get(&claim))
        .await
        .problem(405, "method_not_allowed");
    worker
        .send(
            worker
                .http
                .delete(format!("{}/v1/namespaces/pay", worker.base)),
        )
        .await
        .problem(405, "method_not_allowed");
    // Each method of a shared path keeps its own role.
    assert_eq!(worker.namespace("pay").await.status, 200);
    worker
        .patch("/v1/namespaces/pay", json!({"retry": {"max_attempts": 3}}))
        .await
        .problem(403, "forbidden");
}

/// A claim of `key` in `pay` carrying `Origin: origin`, as `api` (its token, if any).
async fn claim_from(api: &Api, origin: &str, key: &str) -> Resp {
    let req = api
        .http
        .post(format!("{}/v1/namespaces/pay/keys/{key}/claim", api.base))
        .header("origin", origin)
        .header("content-type", "text/plain;charset=UTF-8")
        .body("{}");
    api.send(req).await
}

#[tokio::test]
async fn a_web_page_elsewhere_cannot_make_a_browser_call_idem() {
    // Without tokens: a cross-site "simple" POST (no preflight) from another site, or from
    // a DNS-rebound name, is refused and writes nothing; a loopback page and a client that
    // is not a browser (no Origin) are served.
    let app = spawn_app().await;
    let port = app.base.rsplit(':').next().unwrap_or("0").to_owned();
    for origin in [
        "https://evil.example".to_owned(),
        format!("http://rebound.example:{port}"),
        "null".to_owned(),
    ] {
        claim_from(&app, &origin, "k1")
            .await
            .problem(403, "forbidden");
    }
    app.record("pay", "k1").await.problem(404, "not_found");
    let mcp = app
        .send(
            app.http
                .post(format!("{}/mcp/pay", app.base))
                .header("origin", "https://evil.example")
                .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})),
        )
        .await;
    mcp.problem(403, "forbidden");
    let ok = claim_from(&app, &format!("http://127.0.0.1:{port}"), "k2").await;
    assert_eq!(ok.status, 201, "{}", ok.text);
    let ok = app.claim("pay", "k3", json!({})).await;
    assert_eq!(ok.status, 201, "{}", ok.text);

    // With tokens: 401 first; with a token, another site is still refused.
    let app = spawn_with(with_tokens()).await;
    let admin = app.as_token(Some(&app.tokens[0]));
    claim_from(&app.as_token(None), "https://evil.example", "k1")
        .await
        .problem(401, "unauthorized");
    claim_from(&admin, "https://evil.example", "k1")
        .await
        .problem(403, "forbidden");
    let own = app.base.trim_start_matches("http://").to_owned();
    let ok = claim_from(&admin, &format!("http://{own}"), "k1").await;
    assert_eq!(ok.status, 201, "{}", ok.text);
}
