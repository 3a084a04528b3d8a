//! Actions end to end on both stores: the resource (`PUT/GET/DELETE …/actions/{name}`), the
//! MCP endpoint (`POST /mcp/{ns}`: initialize, ping, tools/list, tools/call) and every row of
//! the outcome table of a call, against a loopback destination written here that counts every
//! request it receives. Each call test asserts that count: an action's promise is that the
//! destination sees the request once (or never).

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use serde_json::{json, Value};

use idem_testkit::app::*;

use crate::loopback::{self, closed_port};

/// One request the destination received: path, JSON body, `Authorization` header.
type Seen = (String, Value, Option<String>);

/// The destination: answers its script, then 201.
type Dest = loopback::Dest<Seen>;

impl Dest {
    fn bodies(&self) -> Vec<Value> {
        self.all().into_iter().map(|s| s.1).collect()
    }
}

async fn handle(State(d): State<Dest>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, 1 << 20)
        .await
        .unwrap_or_default();
    let auth = parts
        .headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let n = d.push((
        parts.uri.path().to_owned(),
        serde_json::from_slice(&body).unwrap_or(Value::Null),
        auth,
    ));
    if parts.uri.path().starts_with("/slow") {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
    let status = d.next_status(201);
    let mut resp = (
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        [("content-type", "application/json")],
        json!({"id": format!("msg_{n}"), "status": status}).to_string(),
    )
        .into_response();
    if status == 503 {
        resp.headers_mut()
            .insert("retry-after", "2".parse().expect("header"));
    }
    resp
}

async fn destination() -> (Dest, u16) {
    let d = Dest::default();
    let port = loopback::serve(Router::new().fallback(any(handle)).with_state(d.clone())).await;
    (d, port)
}

/// The input schema of the mail actions: an order, a recipient and a `text` as given, all
/// required.
fn order_schema(text: Value) -> Value {
    json!({
        "type": "object",
        "properties": {"order_id": {"type": "string"}, "to": {"type": "string"}, "text": text},
        "required": ["order_id", "to", "text"]
    })
}

/// The follow-up action: keyed by the order, identity the order and the recipient, the text
/// free (a regenerated draft).
fn followup(port: u16, path: &str) -> Value {
    json!({
        "title": "Send the follow-up",
        "description": "Sends the follow-up e-mail of an order to its customer.",
        "input_schema": order_schema(json!({"type": "string", "maxLength": 200})),
        "key": "{order_id}:followup:v1",
        "identity": ["order_id", "to"],
        "deliver": {"http": {
            "method": "POST",
            "url": format!("http://127.0.0.1:{port}{path}/{{{{order_id}}}}"),
            "headers": {"Authorization": "Bearer s3cr3t-mail-token-9876"},
            "body": {"to": "{{to}}", "text": "{{text}}", "order": "{{order_id}}"}
        }}
    })
}

async fn put_action(app: &TestApp, ns: &str, name: &str, doc: Value) -> Resp {
    app.send(
        app.http
            .put(format!("{}/v1/namespaces/{ns}/actions/{name}", app.base))
            .json(&doc),
    )
    .await
}

async fn rpc(app: &TestApp, ns: &str, method: &str, params: Value) -> Resp {
    app.post(
        &format!("/mcp/{ns}"),
        json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}),
    )
    .await
}

/// The params of a request of the stateless revision at protocol `version`.
fn at_version(version: &str) -> Value {
    json!({"_meta": {"io.modelcontextprotocol/protocolVersion": version}})
}

/// `tools/call`: the `CallToolResult`.
async fn call(app: &TestApp, ns: &str, tool: &str, args: Value) -> Value {
    let r = rpc(
        app,
        ns,
        "tools/call",
        json!({"name": tool, "arguments": args}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["id"], 7, "{}", r.text);
    r.body["result"].clone()
}

fn outcome(res: &Value) -> &str {
    res["structuredContent"]["outcome"].as_str().unwrap_or("?")
}

/// A server on `backend` whose namespace `shop` may reach the destination.
async fn app_for(backend: Backend, port: u16) -> TestApp {
    app_reaching(backend, &[port]).await
}

/// A destination, and a server on `backend` whose `shop` has the `send_followup` action
/// delivering to the destination's `path`.
async fn followup_app(backend: Backend, path: &str) -> (Dest, u16, TestApp) {
    let (d, port) = destination().await;
    let app = app_for(backend, port).await;
    put_action(&app, "shop", "send_followup", followup(port, path)).await;
    (d, port, app)
}

/// Exactly one of the concurrent `results` performed, the others were in flight or replayed it.
fn assert_one_performed(results: &[Value], label: &str) {
    let outcomes: Vec<&str> = results.iter().map(outcome).collect();
    assert_eq!(
        outcomes.iter().filter(|o| **o == "performed").count(),
        1,
        "{label}{outcomes:?}"
    );
    assert!(
        outcomes
            .iter()
            .all(|o| matches!(*o, "performed" | "in_flight" | "completed")),
        "{label}{outcomes:?}"
    );
}

fn args(order: &str, to: &str, text: &str) -> Value {
    json!({"order_id": order, "to": to, "text": text})
}

/// [`call_args`] of the `send_followup` action.
async fn followup_call(app: &TestApp, ns: &str, order: &str, to: &str, text: &str) -> Value {
    call_args(app, ns, "send_followup", order, to, text).await
}

/// [`call`] of `tool` in `ns` with [`args`].
async fn call_args(
    app: &TestApp,
    ns: &str,
    tool: &str,
    order: &str,
    to: &str,
    text: &str,
) -> Value {
    call(app, ns, tool, args(order, to, text)).await
}

#[tokio::test]
async fn actions_are_validated_stored_and_read_back_without_header_values() {
    for backend in backends() {
        let app = spawn_on(backend).await;
        let doc = followup(9, "/send");
        let r = put_action(&app, "shop", "send_followup", doc.clone()).await;
        assert_eq!(r.status, 201, "{}", r.text);
        assert_eq!(r.body["name"], "send_followup");
        assert_eq!(r.body["header_hints"], json!({"Authorization": "9876"}));
        assert_eq!(r.body["identity"], json!(["order_id", "to"]));
        assert_eq!(r.body["approval"], "none");
        assert!(!r.text.contains("s3cr3t"), "{}", r.text);
        let again = put_action(&app, "shop", "send_followup", doc.clone()).await;
        assert_eq!(again.status, 200, "{}", again.text);
        let got = app.get("/v1/namespaces/shop/actions/send_followup").await;
        assert_eq!(got.status, 200, "{}", got.text);
        assert!(!got.text.contains("s3cr3t"), "{}", got.text);
        let list = app.get("/v1/namespaces/shop/actions").await;
        assert_eq!(list.body["items"].as_array().map(Vec::len), Some(1));
        assert_eq!(
            app.get("/v1/namespaces/other/actions").await.body["items"],
            json!([])
        );

        // A key placeholder that is not a required string/integer property: 422 naming `key`,
        // nothing written.
        let mut bad = doc.clone();
        bad["key"] = json!("{text_missing}:x");
        put_action(&app, "shop", "bad", bad)
            .await
            .problem(422, "invalid_field");
        let mut both = doc.clone();
        both["deliver"]["mcp"] = json!({"url": "http://127.0.0.1:9/mcp", "tool": "t"});
        let p = put_action(&app, "shop", "bad", both).await;
        assert_eq!(p.problem(422, "invalid_field")["field"], "deliver");
        let mut not_object = doc.clone();
        not_object["input_schema"] = json!({"type": "array"});
        let p = put_action(&app, "shop", "bad", not_object).await;
        assert_eq!(p.problem(422, "invalid_field")["field"], "input_schema");
        put_action(&app, "shop", "bad name!", doc.clone())
            .await
            .problem(422, "invalid_field");
        let mut unknown = doc.clone();
        unknown["colour"] = json!("red");
        put_action(&app, "shop", "bad", unknown)
            .await
            .problem(400, "unknown_field");
        app.get("/v1/namespaces/shop/actions/bad")
            .await
            .problem(404, "not_found");

        let del = app
            .send(app.http.delete(format!(
                "{}/v1/namespaces/shop/actions/send_followup",
                app.base
            )))
            .await;
        assert_eq!(del.status, 204, "{}", del.text);
        app.get("/v1/namespaces/shop/actions/send_followup")
            .await
            .problem(404, "not_found");
        // The header values went with it.
        let left = app
            .store
            .secrets(&idem::action_owner("shop", "send_followup"), app.now())
            .await
            .expect("secrets");
        assert!(left.is_empty());
    }
}

#[tokio::test]
async fn the_mcp_endpoint_speaks_the_session_and_the_stateless_revisions() {
    for backend in backends() {
        let app = spawn_on(backend).await;
        put_action(&app, "shop", "send_followup", followup(9, "/send")).await;

        for (asked, session) in [
            ("2025-06-18", true),
            ("2025-11-25", true),
            ("2026-07-28", false),
        ] {
            let init = rpc(
                &app,
                "shop",
                "initialize",
                json!({"protocolVersion": asked, "capabilities": {},
                       "clientInfo": {"name": "test", "version": "1"}}),
            )
            .await;
            assert_eq!(init.status, 200, "{}", init.text);
            assert_eq!(init.body["result"]["protocolVersion"], asked);
            assert_eq!(init.body["result"]["serverInfo"]["name"], "idem");
            assert!(init.body["result"]["capabilities"]["tools"].is_object());
            assert_eq!(init.header("mcp-session-id").is_some(), session, "{asked}");
        }
        let note = app
            .post(
                "/mcp/shop",
                json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            )
            .await;
        assert_eq!(note.status, 202, "{}", note.text);
        // A session revision's `ping` answers an empty result; only the stateless revision
        // marks every result `resultType: complete`.
        assert_eq!(
            rpc(&app, "shop", "ping", json!({})).await.body["result"],
            json!({})
        );
        assert_eq!(
            rpc(&app, "shop", "ping", at_version("2026-07-28"))
                .await
                .body["result"],
            json!({"resultType": "complete"})
        );
        let pinged = app
            .send(
                app.http
                    .post(format!("{}/mcp/shop", app.base))
                    .header("mcp-protocol-version", "2025-06-18")
                    .json(&json!({"jsonrpc": "2.0", "id": 4, "method": "ping"})),
            )
            .await;
        assert_eq!(pinged.body["result"], json!({}), "{}", pinged.text);
        // `initialize` without its required params is invalid params.
        let bare = rpc(&app, "shop", "initialize", Value::Null).await;
        assert_eq!(bare.status, 200, "{}", bare.text);
        assert_eq!(bare.body["error"]["code"], -32602, "{}", bare.text);
        assert!(bare.header("mcp-session-id").is_none());
        // The stateless revision: discovery without a handshake, its version in `_meta`.
        let discover = rpc(&app, "shop", "server/discover", at_version("2026-07-28")).await;
        assert_eq!(discover.status, 200, "{}", discover.text);
        assert!(discover.body["result"]["supportedVersions"]
            .as_array()
            .is_some_and(|v| v.contains(&json!("2026-07-28"))));
        assert!(discover.header("mcp-session-id").is_none());
        let old = rpc(&app, "shop", "tools/list", at_version("2024-01-01")).await;
        assert_eq!(old.status, 400, "{}", old.text);
        assert_eq!(old.body["error"]["code"], -32022);

        let modern = rpc(&app, "shop", "tools/list", at_version("2026-07-28")).await;
        assert_eq!(modern.body["result"]["resultType"], "complete");
        assert_eq!(modern.body["result"]["ttlMs"], 0);
        let list = rpc(&app, "shop", "tools/list", json!({})).await;
        let keys: Vec<&String> = list.body["result"]
            .as_object()
            .map(|m| m.keys().collect())
            .unwrap_or_default();
        assert_eq!(keys, ["tools"], "a session revision's list: {}", list.text);
        let tools = list.body["result"]["tools"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(tools.len(), 1, "{}", list.text);
        assert_eq!(tools[0]["name"], "send_followup");
        assert_eq!(tools[0]["title"], "Send the follow-up");
        assert_eq!(
            tools[0]["inputSchema"]["required"],
            json!(["order_id", "to", "text"])
        );
        assert_eq!(
            tools[0]["annotations"],
            json!({"destructiveHint": true, "idempotentHint": true, "openWorldHint": true})
        );
        assert!(!list.text.contains("s3cr3t"));

        let other = rpc(&app, "shop", "resources/list", json!({})).await;
        assert_eq!(other.status, 200);
        assert_eq!(other.body["error"]["code"], -32601);
        let unknown = rpc(
            &app,
            "shop",
            "tools/call",
            json!({"name": "nope", "arguments": {}}),
        )
        .await;
        assert_eq!(unknown.body["error"]["code"], -32602);

        let post_mcp = |body: Value| app.post("/mcp/shop", body);
        let bad = post_mcp(json!({"jsonrpc": "1.0", "id": 1, "method": "ping"})).await;
        assert_eq!(bad.status, 400);
        assert_eq!(bad.body["error"]["code"], -32600);
        let big_id =
            post_mcp(json!({"jsonrpc": "2.0", "id": 9_007_199_254_740_992_u64, "method": "ping"}))
                .await;
        assert_eq!(big_id.status, 400, "an id no client holds exactly");
        let no_method = post_mcp(json!({"jsonrpc": "2.0", "id": 3})).await;
        assert_eq!(no_method.status, 400);
        let response = post_mcp(json!({"jsonrpc": "2.0", "id": 3, "result": {}})).await;
        assert_eq!(response.status, 202, "a response to the server is accepted");
        // Not JSON (nothing at all included): a parse error; JSON that is not a request
        // object (`null` included): an invalid request.
        for (body, code) in [
            ("{not json", -32700),
            ("", -32700),
            ("  \n", -32700),
            ("null", -32600),
            ("5", -32600),
            ("\"ping\"", -32600),
        ] {
            let r = app.post_raw("/mcp/shop", body).await;
            assert_eq!(r.status, 400, "{body:?}: {}", r.text);
            assert_eq!(r.body["error"]["code"], code, "{body:?}: {}", r.text);
            assert_eq!(r.body["id"], Value::Null);
        }
        let wrong_version = app
            .send(
                app.http
                    .post(format!("{}/mcp/shop", app.base))
                    .header("mcp-protocol-version", "1999-01-01")
                    .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})),
            )
            .await;
        assert_eq!(wrong_version.status, 400);
        assert_eq!(wrong_version.body["error"]["code"], -32022);
        assert_eq!(
            wrong_version.body["id"], 1,
            "the request's id: {}",
            wrong_version.text
        );
        let get = app.get("/mcp/shop").await;
        assert_eq!(get.status, 405, "no event stream: {}", get.text);
    }
}

#[tokio::test]
async fn the_mcp_endpoint_needs_a_worker_token_of_the_namespace() {
    let app = spawn_with(Options {
        tokens: vec![(idem::Role::Worker, "shop"), (idem::Role::Worker, "other")],
        ..Default::default()
    })
    .await;
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    let none = app.as_token(None).post("/mcp/shop", ping.clone()).await;
    none.problem(401, "unauthorized");
    let other = app
        .as_token(Some(&app.tokens[1]))
        .post("/mcp/shop", ping.clone())
        .await;
    other.problem(403, "forbidden");
    let ok = app
        .as_token(Some(&app.tokens[0]))
        .post("/mcp/shop", ping)
        .await;
    assert_eq!(ok.status, 200, "{}", ok.text);
}

#[tokio::test]
async fn a_call_is_delivered_once_and_a_regenerated_draft_is_replayed() {
    for backend in backends() {
        let (d, _, app) = followup_app(backend, "/send").await;

        let first = followup_call(&app, "shop", "847", "ann@example.com", "Hi Ann").await;
        assert_eq!(outcome(&first), "performed", "{first}");
        assert_eq!(first["isError"], false);
        assert_eq!(first["structuredContent"]["key"], "847:followup:v1");
        assert_eq!(first["structuredContent"]["state"], "completed");
        assert_eq!(first["structuredContent"]["replayed"], false);
        assert_eq!(first["structuredContent"]["response"]["status"], 201);
        assert!(first["content"][0]["text"]
            .as_str()
            .unwrap_or("")
            .starts_with("Done"));
        assert_eq!(d.count(), 1);
        {
            let seen = d.all();
            assert_eq!(seen[0].0, "/send/847");
            assert_eq!(
                seen[0].1,
                json!({"to": "ann@example.com", "text": "Hi Ann", "order": "847"})
            );
            assert_eq!(seen[0].2.as_deref(), Some("Bearer s3cr3t-mail-token-9876"));
        }

        // The model regenerates the draft: same identity, other text → the first delivery
        // stands, nothing new is sent.
        let again = followup_call(&app, "shop", "847", "ann@example.com", "Hello again").await;
        assert_eq!(outcome(&again), "completed", "{again}");
        assert_eq!(again["isError"], false);
        assert_eq!(again["structuredContent"]["replayed"], true);
        assert_eq!(
            again["structuredContent"]["response"],
            first["structuredContent"]["response"]
        );
        assert_eq!(d.count(), 1, "a regenerated draft sent nothing");

        // Another recipient under the same key: conflict, nothing sent.
        let other = followup_call(&app, "shop", "847", "bob@example.com", "Hi Bob").await;
        assert_eq!(outcome(&other), "conflict", "{other}");
        assert_eq!(other["isError"], true);
        assert_eq!(d.count(), 1, "a conflict sent nothing");

        // The record is the key's, with the first call's arguments as its prepared payload.
        let rec = app.record("shop", "847:followup:v1").await;
        assert_eq!(rec.body["record"]["state"], "completed");
        assert_eq!(
            rec.body["record"]["prepared_payload"],
            args("847", "ann@example.com", "Hi Ann")
        );
        assert!(!rec.text.contains("s3cr3t"));
        assert_eq!(
            app.event_types("shop", "847:followup:v1").await,
            [
                "acquired",
                "prepared",
                "sent",
                "completed",
                "duplicate_hit",
                "conflict"
            ]
        );
    }
}

#[tokio::test]
async fn twenty_concurrent_calls_with_one_identity_send_one_request() {
    for backend in backends() {
        let (d, _, app) = followup_app(backend, "/slow").await;
        let calls = (0..20).map(|i| {
            let app = &app;
            async move {
                followup_call(app, "shop", "9", "ann@example.com", &format!("draft {i}")).await
            }
        });
        let results = futures::future::join_all(calls).await;
        assert_one_performed(&results, "");
        for r in &results {
            assert_eq!(r["isError"], false, "{r}");
        }
        assert_eq!(d.count(), 1, "one request at the destination");
        let after = followup_call(&app, "shop", "9", "ann@example.com", "late").await;
        assert_eq!(outcome(&after), "completed");
        assert_eq!(d.count(), 1);
    }
}

#[tokio::test]
async fn every_failure_row_of_the_outcome_table() {
    for backend in backends() {
        let (d, port, app) = followup_app(backend, "/send").await;
        let send = |order: &'static str| {
            let app = &app;
            async move { followup_call(app, "shop", order, "a@example.com", "t").await }
        };

        // Missing identity (checked first, even with other arguments wrong too): nothing stored.
        let r = call(
            &app,
            "shop",
            "send_followup",
            json!({"to": "a@example.com", "text": 5}),
        )
        .await;
        assert_eq!(outcome(&r), "missing_identity_field", "{r}");
        assert_eq!(r["isError"], true);
        assert_eq!(r["structuredContent"]["field"], "order_id");
        // The contract's members are all there: no key was built, nothing is stored.
        for member in ["key", "state"] {
            assert_eq!(
                r["structuredContent"].get(member),
                Some(&Value::Null),
                "{r}"
            );
        }
        assert_eq!(r["structuredContent"]["replayed"], false);
        let r = followup_call(&app, "shop", "", "a@example.com", "t").await;
        assert_eq!(outcome(&r), "missing_identity_field");
        // Invalid arguments: a tool error naming the field, nothing stored.
        let r = followup_call(&app, "shop", "1", "a@example.com", &"x".repeat(201)).await;
        assert_eq!(outcome(&r), "invalid_field", "{r}");
        assert_eq!(r["isError"], true);
        assert_eq!(r["structuredContent"]["field"], "text");
        app.record("shop", "1:followup:v1")
            .await
            .problem(404, "not_found");
        assert_eq!(d.count(), 0);

        // 402: failed_permanent, replayed later.
        d.script(&[402]);
        let r = send("p1").await;
        assert_eq!(outcome(&r), "failed_permanent", "{r}");
        assert_eq!(r["isError"], true);
        assert!(r["content"][0]["text"]
            .as_str()
            .unwrap_or("")
            .contains("HTTP 402"));
        let r = send("p1").await;
        assert_eq!(outcome(&r), "failed_permanent");
        assert_eq!(r["structuredContent"]["replayed"], true);
        assert_eq!(d.count(), 1);

        // 503: backoff with retry_after_ms, nothing delivered; the retry after it sends the
        // stored arguments with the same key.
        d.script(&[503]);
        let r = send("b1").await;
        assert_eq!(outcome(&r), "backoff", "{r}");
        assert_eq!(r["isError"], true);
        assert!(
            r["structuredContent"]["retry_after_ms"]
                .as_i64()
                .unwrap_or(0)
                >= 2000
        );
        let early = send("b1").await;
        assert_eq!(outcome(&early), "backoff");
        assert_eq!(d.count(), 2);
        app.advance(10_000);
        let regenerated = followup_call(&app, "shop", "b1", "a@example.com", "other text").await;
        assert_eq!(outcome(&regenerated), "performed", "{regenerated}");
        assert_eq!(d.count(), 3);
        assert_eq!(d.bodies()[2]["text"], "t", "the stored arguments were sent");

        // 500: the outcome is unknown → needs_review, not an error, never resent.
        d.script(&[500]);
        let r = send("r1").await;
        assert_eq!(outcome(&r), "needs_review", "{r}");
        assert_eq!(r["isError"], false);
        let r = send("r1").await;
        assert_eq!(outcome(&r), "needs_review");
        assert_eq!(d.count(), 4);

        // Paused namespace: not now, nothing sent.
        assert_eq!(app.pause("shop").await.status, 200);
        let r = send("z1").await;
        assert_eq!(outcome(&r), "paused", "{r}");
        assert_eq!(r["isError"], true);
        assert_eq!(app.resume("shop").await.status, 200);

        // Daily ceiling (a namespace of its own, limit 1): the second first-time call is
        // limited.
        put_action(&app, "cap", "send_followup", followup(port, "/send")).await;
        let r = app
            .patch_namespace(
                "cap",
                json!({"daily_limit": 1, "egress": {"allow": [format!("127.0.0.1:{port}")]}}),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
        let r = followup_call(&app, "cap", "c1", "a@example.com", "t").await;
        assert_eq!(outcome(&r), "performed", "{r}");
        let r = followup_call(&app, "cap", "c2", "a@example.com", "t").await;
        assert_eq!(outcome(&r), "limited", "{r}");
        assert_eq!(r["isError"], true);
        assert_eq!(d.count(), 5);
    }
}

#[tokio::test]
async fn approval_required_stores_the_draft_and_idem_delivers_it_once_approved() {
    for backend in backends() {
        let (d, port) = destination().await;
        let app = app_for(backend, port).await;
        let mut doc = followup(port, "/send");
        doc["approval"] = json!("required");
        put_action(&app, "shop", "send_followup", doc).await;
        let r = followup_call(&app, "shop", "a1", "ann@example.com", "Draft one").await;
        assert_eq!(outcome(&r), "awaiting_approval", "{r}");
        assert_eq!(r["isError"], false);
        assert_eq!(r["structuredContent"]["state"], "awaiting_approval");
        let again = followup_call(&app, "shop", "a1", "ann@example.com", "Draft two").await;
        assert_eq!(outcome(&again), "awaiting_approval");
        assert_eq!(d.count(), 0, "nothing is sent before approval");
        let rec = app.record("shop", "a1:followup:v1").await;
        assert_eq!(
            rec.body["record"]["prepared_payload"],
            args("a1", "ann@example.com", "Draft one")
        );

        // Approved: idem delivers the stored draft itself (the outbox), once; the agent is
        // not asked again, and a later call replays the delivery.
        let ok = app
            .approve("shop", "a1:followup:v1", json!({"note": "fine"}))
            .await;
        assert_eq!(ok.status, 200, "{}", ok.text);
        for _ in 0..100 {
            if d.count() > 0 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert_eq!(d.count(), 1, "the approved draft was delivered");
        assert_eq!(d.bodies()[0]["text"], "Draft one");
        for _ in 0..100 {
            let rec = app.record("shop", "a1:followup:v1").await;
            if rec.body["record"]["state"] == "completed" {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let after = followup_call(&app, "shop", "a1", "ann@example.com", "Draft three").await;
        assert_eq!(outcome(&after), "completed", "{after}");
        assert_eq!(after["structuredContent"]["replayed"], true);
        assert_eq!(d.count(), 1, "delivered once");

        // Rejected: failed_permanent, replayed to later calls.
        let r = followup_call(&app, "shop", "a2", "ann@example.com", "x").await;
        assert_eq!(outcome(&r), "awaiting_approval");
        let rej = app
            .reject("shop", "a2:followup:v1", json!({"note": "wrong tone"}))
            .await;
        assert_eq!(rej.status, 200, "{}", rej.text);
        let r = followup_call(&app, "shop", "a2", "ann@example.com", "x").await;
        assert_eq!(outcome(&r), "failed_permanent", "{r}");
        assert_eq!(r["isError"], true);
        assert_eq!(d.count(), 1, "a rejected draft is never sent");
    }
}

/// The state of `key` in `shop` once it is not `state` any more (or after 5 s).
async fn state_after(app: &TestApp, key: &str, state: &str) -> Value {
    for _ in 0..100 {
        let rec = app.record("shop", key).await;
        if rec.body["record"]["state"] != state {
            return rec.body["record"].clone();
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    app.record("shop", key).await.body["record"].clone()
}

#[tokio::test]
async fn an_approved_draft_that_can_no_longer_be_sent_fails_visibly() {
    for backend in backends() {
        let (d, port) = destination().await;
        let app = app_for(backend, port).await;
        let mut doc = followup(port, "/send");
        doc["approval"] = json!("required");
        put_action(&app, "shop", "send_followup", doc).await;

        // The namespace's egress stops allowing the destination between the draft and its
        // approval: nothing is sent, and the record says why instead of waiting in
        // `prepared` unseen.
        let r = followup_call(&app, "shop", "e1", "ann@example.com", "Draft").await;
        assert_eq!(outcome(&r), "awaiting_approval", "{r}");
        let p = app
            .patch_namespace("shop", json!({"egress": {"allow": ["example.com"]}}))
            .await;
        assert_eq!(p.status, 200, "{}", p.text);
        let ok = app
            .approve("shop", "e1:followup:v1", json!({"note": "fine"}))
            .await;
        assert_eq!(ok.status, 200, "{}", ok.text);
        let rec = state_after(&app, "e1:followup:v1", "prepared").await;
        assert_eq!(rec["state"], "failed_permanent", "{rec}");
        assert_eq!(rec["last_error"]["category"], "validation", "{rec}");
        let msg = rec["last_error"]["message"].as_str().unwrap_or("");
        assert!(msg.contains("not an allowed destination"), "{msg}");
        assert_eq!(d.count(), 0, "a refused destination is never sent to");
        // Once the destination is allowed again, a call is answered with that failure (a
        // person's `resolve retry` sends it), not sent behind the person's back.
        let allow = format!("127.0.0.1:{port}");
        app.patch_namespace("shop", json!({"egress": {"allow": [allow]}}))
            .await;
        let again = followup_call(&app, "shop", "e1", "ann@example.com", "Draft").await;
        assert_eq!(outcome(&again), "failed_permanent", "{again}");
        assert_eq!(d.count(), 0);

        // The action is deleted before the approval: the same.
        let r = followup_call(&app, "shop", "e2", "ann@example.com", "Draft").await;
        assert_eq!(outcome(&r), "awaiting_approval", "{r}");
        let del = app
            .send(app.http.delete(format!(
                "{}/v1/namespaces/shop/actions/send_followup",
                app.base
            )))
            .await;
        assert_eq!(del.status, 204, "{}", del.text);
        let ok = app
            .approve("shop", "e2:followup:v1", json!({"note": "fine"}))
            .await;
        assert_eq!(ok.status, 200, "{}", ok.text);
        let rec = state_after(&app, "e2:followup:v1", "prepared").await;
        assert_eq!(rec["state"], "failed_permanent", "{rec}");
        let msg = rec["last_error"]["message"].as_str().unwrap_or("");
        assert!(msg.contains("was deleted"), "{msg}");
        assert_eq!(d.count(), 0);
    }
}

#[tokio::test]
async fn a_bad_cost_member_is_a_tool_error_not_an_http_problem() {
    for backend in backends() {
        let (_d, _port, app) = followup_app(backend, "/send").await;
        let r = rpc(
            &app,
            "shop",
            "tools/call",
            json!({"name": "send_followup", "arguments": args("c1", "ann@example.com", "x"),
                   "_meta": {"idem/cost": {"tokens": 1, "bogus": 2}}}),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(r.body["id"], 7, "{}", r.text);
        let res = &r.body["result"];
        assert_eq!(res["isError"], true, "{res}");
        assert_eq!(
            res["structuredContent"]["outcome"], "invalid_field",
            "{res}"
        );
        assert_eq!(res["structuredContent"]["field"], "cost.bogus", "{res}");
    }
}

// ------------------------------------------------------------------ deliver.mcp

/// An upstream MCP server written with the official Python SDK (`mcp` from PyPI: its
/// `MCPServer` over Streamable HTTP on a loopback port). Every call of a tool appends a line
/// to a file before the tool does anything else, so the file is what the upstream did.
/// `session` mode answers in event streams with an `Mcp-Session-Id`; `json` mode is the SDK's
/// stateless server answering `application/json`.
const UPSTREAM: &str = r#"
import asyncio, json, sys
try:
    from mcp.server.mcpserver import MCPServer
except ImportError as e:
    print("cannot import mcp:", e)
    sys.exit(3)
port, log, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
server = MCPServer("upstream", log_level="WARNING")

def note(tool, order_id, text):
    with open(log, "a") as f:
        f.write(json.dumps({"tool": tool, "order_id": order_id, "text": text}) + "\n")

@server.tool()
async def send_mail(order_id: str, to: str, text: str) -> str:
    """Sends a mail."""
    note("send_mail", order_id, text)
    await asyncio.sleep(0.3)
    return f"mail for order {order_id} sent"

@server.tool()
def refuse(order_id: str, to: str, text: str) -> str:
    """Always fails."""
    note("refuse", order_id, text)
    raise ValueError("mailbox full")

@server.tool()
async def hang(order_id: str, to: str, text: str) -> str:
    """Never answers in time."""
    note("hang", order_id, text)
    await asyncio.sleep(30)
    return "late"

server.run(transport="streamable-http", host="127.0.0.1", port=port,
           json_response=(mode == "json"), stateless_http=(mode == "json"))
"#;

struct Upstream {
    child: std::process::Child,
    port: u16,
    log: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Upstream {
    /// The calls the upstream received: (tool, order_id, text).
    fn calls(&self) -> Vec<(String, String, String)> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .map(|v| {
                let s = |k: &str| v[k].as_str().unwrap_or_default().to_owned();
                (s("tool"), s("order_id"), s("text"))
            })
            .collect()
    }
    fn count(&self, tool: &str, order: &str) -> usize {
        self.calls()
            .iter()
            .filter(|(t, o, _)| t == tool && o == order)
            .count()
    }
}

/// Starts [`UPSTREAM`] with `IDEM_TEST_MCP_PYTHON`, else `IDEM_TEST_PYTHON`, else `python3`.
/// `None` (the caller skips with a note) when the SDK is not importable and neither `CI` nor
/// `IDEM_TEST_MCP_PYTHON` is set; with either set, a missing SDK fails the test.
async fn upstream(mode: &str) -> Option<Upstream> {
    let pinned = std::env::var("IDEM_TEST_MCP_PYTHON")
        .ok()
        .filter(|s| !s.is_empty());
    let required = pinned.is_some() || std::env::var_os("CI").is_some();
    let python = pinned
        .or_else(|| {
            std::env::var("IDEM_TEST_PYTHON")
                .ok()
                .filter(|s| !s.is_empty())
        })
        .unwrap_or_else(|| "python3".into());
    let hint = "install the official MCP SDK with `pip install mcp==2.3.0` (.ci/run does so \
                into $HOME/.cache/idem/venv) and set IDEM_TEST_MCP_PYTHON to that Python";
    let dir = tempfile::tempdir().expect("tmp");
    let log = dir.path().join("calls.jsonl");
    let err_path = dir.path().join("stderr");
    let port = closed_port();
    let spawned = std::process::Command::new(&python)
        .arg("-c")
        .arg(UPSTREAM)
        .arg(port.to_string())
        .arg(&log)
        .arg(mode)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&err_path).expect("stderr file"))
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) if required => panic!("cannot run {python}: {e}; {hint}"),
        Err(e) => {
            eprintln!("SKIPPED the deliver.mcp tests: cannot run {python}: {e}; {hint}");
            return None;
        }
    };
    for _ in 0..300 {
        if let Ok(Some(status)) = child.try_wait() {
            let said = std::fs::read_to_string(&err_path).unwrap_or_default();
            if status.code() == Some(3) && !required {
                eprintln!(
                    "SKIPPED the deliver.mcp tests: the MCP SDK is missing ({python}); {hint}"
                );
                return None;
            }
            panic!("the upstream MCP server did not start ({python}): {said}; {hint}");
        }
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return Some(Upstream {
                child,
                port,
                log,
                _dir: dir,
            });
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let _ = child.kill();
    panic!(
        "the upstream MCP server did not listen within 15 s: {}",
        std::fs::read_to_string(&err_path).unwrap_or_default()
    );
}

/// The mail action delivered through the upstream's `tool`.
fn mcp_action(port: u16, tool: &str, timeout_ms: i64) -> Value {
    json!({
        "description": "Sends the mail of an order through the mail server's tool.",
        "input_schema": order_schema(json!({"type": "string"})),
        "key": "{order_id}:mail:v1",
        "identity": ["order_id", "to"],
        "deliver": {"mcp": {
            "url": format!("http://127.0.0.1:{port}/mcp"),
            "tool": tool,
            "headers": {"Authorization": "Bearer s3cr3t-upstream-4321"},
            "timeout_ms": timeout_ms
        }}
    })
}

/// A server on `backend` whose namespace `shop` may reach `ports` on the loopback.
async fn app_reaching(backend: Backend, ports: &[u16]) -> TestApp {
    let app = spawn_on(backend).await;
    let allow: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let r = app
        .patch_namespace("shop", json!({"egress": {"allow": allow}}))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    app
}

#[tokio::test]
async fn deliver_mcp_calls_the_upstream_tool_once_per_identity() {
    for mode in ["session", "json"] {
        let Some(up) = upstream(mode).await else {
            return;
        };
        for backend in backends() {
            let app = app_reaching(backend, &[up.port]).await;
            let r = put_action(
                &app,
                "shop",
                "mail",
                mcp_action(up.port, "send_mail", 5_000),
            )
            .await;
            assert_eq!(r.status, 201, "{}", r.text);
            assert_eq!(r.body["header_hints"], json!({"Authorization": "4321"}));
            assert_eq!(r.body["deliver"]["mcp"]["tool"], "send_mail");
            assert!(!r.text.contains("s3cr3t"), "{}", r.text);

            // 20 concurrent calls of one identity (each its own draft): the tool runs once.
            let order = format!("{mode}-{backend:?}");
            let calls = (0..20).map(|i| {
                let (app, order) = (&app, &order);
                async move {
                    call_args(
                        app,
                        "shop",
                        "mail",
                        order,
                        "ann@example.com",
                        &format!("draft {i}"),
                    )
                    .await
                }
            });
            let results = futures::future::join_all(calls).await;
            assert_one_performed(&results, &format!("{mode}: "));
            assert_eq!(
                up.count("send_mail", &order),
                1,
                "{mode}: one call upstream"
            );
            let performed = results
                .iter()
                .find(|r| outcome(r) == "performed")
                .expect("performed");
            assert_eq!(performed["isError"], false);
            // The upstream's CallToolResult is the response.
            let response = &performed["structuredContent"]["response"];
            assert_eq!(response["isError"], false, "{performed}");
            assert_eq!(
                response["content"][0]["text"],
                format!("mail for order {order} sent"),
                "{performed}"
            );

            // A replay: the first delivery stands, the tool is not called again.
            let again = call_args(&app, "shop", "mail", &order, "ann@example.com", "other").await;
            assert_eq!(outcome(&again), "completed", "{again}");
            assert_eq!(again["structuredContent"]["replayed"], true);
            assert_eq!(again["structuredContent"]["response"], *response);
            assert_eq!(
                up.count("send_mail", &order),
                1,
                "{mode}: a replay calls nothing"
            );
            let key = format!("{order}:mail:v1");
            let rec = app.record("shop", &key).await;
            assert_eq!(rec.body["record"]["state"], "completed");
            assert!(!rec.text.contains("s3cr3t"));
            let events: Vec<String> = app
                .event_types("shop", &key)
                .await
                .into_iter()
                .filter(|e| !matches!(e.as_str(), "in_flight" | "duplicate_hit"))
                .collect();
            assert_eq!(events, ["acquired", "prepared", "sent", "completed"]);
        }
    }
}

#[tokio::test]
async fn deliver_mcp_failures_are_classified_as_the_contract_says() {
    let Some(up) = upstream("session").await else {
        return;
    };
    for backend in backends() {
        let closed = closed_port();
        let app = app_reaching(backend, &[up.port, closed]).await;
        let b = format!("{backend:?}");

        // The tool answers isError: true → failed_permanent, replayed, called once.
        put_action(&app, "shop", "refuse", mcp_action(up.port, "refuse", 5_000)).await;
        let r = call_args(&app, "shop", "refuse", &b, "a@example.com", "t").await;
        assert_eq!(outcome(&r), "failed_permanent", "{r}");
        assert_eq!(r["isError"], true);
        assert_eq!(r["structuredContent"]["response"]["isError"], true, "{r}");
        let again = call_args(&app, "shop", "refuse", &b, "a@example.com", "t").await;
        assert_eq!(outcome(&again), "failed_permanent", "{again}");
        assert_eq!(again["structuredContent"]["replayed"], true);
        assert_eq!(up.count("refuse", &b), 1);
        let rec = app.record("shop", &format!("{b}:mail:v1")).await;
        assert_eq!(rec.body["record"]["state"], "failed_permanent");
        assert_eq!(rec.body["record"]["last_error"]["category"], "mcp");

        // An upstream that is not listening: backoff, nothing recorded as sent.
        put_action(&app, "shop", "down", mcp_action(closed, "send_mail", 5_000)).await;
        let order = format!("down-{b}");
        let r = call_args(&app, "shop", "down", &order, "a@example.com", "t").await;
        assert_eq!(outcome(&r), "backoff", "{r}");
        assert_eq!(r["isError"], true);
        assert!(r["structuredContent"]["retry_after_ms"].is_i64(), "{r}");
        let key = format!("{order}:mail:v1");
        let rec = app.record("shop", &key).await;
        assert_eq!(
            rec.body["record"]["state"], "failed_retryable",
            "{}",
            rec.text
        );
        assert_eq!(rec.body["record"]["last_error"]["category"], "connection");
        assert!(rec.body["record"]["last_error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("nothing was sent"));
        let events = app.event_types("shop", &key).await;
        assert!(!events.iter().any(|e| e == "sent"), "{events:?}");

        // An upstream tool that hangs past timeout_ms: the call left, the outcome is unknown
        // → needs_review, never called again.
        put_action(&app, "shop", "hang", mcp_action(up.port, "hang", 1_000)).await;
        let order = format!("hang-{b}");
        let started = std::time::Instant::now();
        let r = call_args(&app, "shop", "hang", &order, "a@example.com", "t").await;
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
        assert_eq!(outcome(&r), "needs_review", "{r}");
        assert_eq!(r["isError"], false);
        let again = call_args(&app, "shop", "hang", &order, "a@example.com", "t").await;
        assert_eq!(outcome(&again), "needs_review", "{again}");
        assert_eq!(up.count("hang", &order), 1);
        let rec = app.record("shop", &format!("{order}:mail:v1")).await;
        assert_eq!(rec.body["record"]["state"], "needs_review");
        assert_eq!(rec.body["record"]["last_error"]["category"], "timeout");

        // A tool the upstream does not have: failed_permanent, nothing done upstream.
        put_action(
            &app,
            "shop",
            "nope",
            mcp_action(up.port, "no_such_tool", 5_000),
        )
        .await;
        let order = format!("nope-{b}");
        let r = call_args(&app, "shop", "nope", &order, "a@example.com", "t").await;
        assert_eq!(outcome(&r), "failed_permanent", "{r}");
        assert!(!up.calls().iter().any(|(_, o, _)| *o == order));

        // The egress policy holds: an upstream outside it is refused before anything is
        // stored. (A port freed by the OS may be handed out again: never one the policy
        // opens.)
        let other = std::iter::repeat_with(closed_port)
            .find(|p| *p != closed && *p != up.port)
            .unwrap_or_default();
        put_action(
            &app,
            "shop",
            "outside",
            mcp_action(other, "send_mail", 5_000),
        )
        .await;
        let r = call_args(&app, "shop", "outside", "out-1", "a@example.com", "t").await;
        assert_eq!(outcome(&r), "destination_forbidden", "{r}");
        assert_eq!(r["structuredContent"]["key"], "out-1:mail:v1", "{r}");
        assert_eq!(r["structuredContent"]["state"], Value::Null, "{r}");
        app.record("shop", "out-1:mail:v1")
            .await
            .problem(404, "not_found");
    }
}

#[tokio::test]
async fn deliver_mcp_with_approval_is_called_once_by_the_outbox() {
    let Some(up) = upstream("session").await else {
        return;
    };
    for backend in backends() {
        let app = app_reaching(backend, &[up.port]).await;
        let mut doc = mcp_action(up.port, "send_mail", 5_000);
        doc["approval"] = json!("required");
        put_action(&app, "shop", "mail", doc).await;
        let order = format!("appr-{backend:?}");
        let key = format!("{order}:mail:v1");
        let r = call_args(&app, "shop", "mail", &order, "ann@example.com", "Draft one").await;
        assert_eq!(outcome(&r), "awaiting_approval", "{r}");
        let r = call_args(&app, "shop", "mail", &order, "ann@example.com", "Draft two").await;
        assert_eq!(outcome(&r), "awaiting_approval", "{r}");
        assert_eq!(up.count("send_mail", &order), 0, "nothing before approval");

        let ok = app.approve("shop", &key, json!({"note": "fine"})).await;
        assert_eq!(ok.status, 200, "{}", ok.text);
        for _ in 0..200 {
            let rec = app.record("shop", &key).await;
            if rec.body["record"]["state"] == "completed" {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let rec = app.record("shop", &key).await;
        assert_eq!(rec.body["record"]["state"], "completed", "{}", rec.text);
        let sent: Vec<_> = up
            .calls()
            .into_iter()
            .filter(|(t, o, _)| t == "send_mail" && *o == order)
            .collect();
        assert_eq!(sent.len(), 1, "the approved draft was delivered once");
        assert_eq!(sent[0].2, "Draft one", "the approved arguments were sent");
        let after = call_args(
            &app,
            "shop",
            "mail",
            &order,
            "ann@example.com",
            "Draft three",
        )
        .await;
        assert_eq!(outcome(&after), "completed", "{after}");
        assert_eq!(after["structuredContent"]["replayed"], true);
        assert_eq!(up.count("send_mail", &order), 1, "delivered once");
    }
}
