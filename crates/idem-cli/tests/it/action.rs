//! `idem serve --config` applies `[namespaces.NS.actions.NAME]` at start (header values from
//! the environment), and `idem action put|get|list|delete` drive the actions API; no header
//! value reaches an answer or the log.

use std::time::{Duration, Instant};

use serde_json::json;

#[test]
fn config_actions_and_the_action_verbs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("idem.toml");
    std::fs::write(
        &config,
        "[namespaces.shop.actions.notify]\n\
         description = \"Notifies the customer of an order, once.\"\n\
         key = \"{order_id}:notify\"\n\
         input_schema = { type = \"object\", required = [\"order_id\"], \
         properties = { order_id = { type = \"string\" } } }\n\
         [namespaces.shop.actions.notify.deliver.http]\n\
         method = \"POST\"\nurl = \"https://mail.example/notify\"\n\
         headers_env = { Authorization = \"MAIL_TOKEN\" }\n\
         [namespaces.shop.actions.ticket]\n\
         description = \"Opens a support ticket through the desk's MCP server, once.\"\n\
         key = \"{order_id}:ticket\"\n\
         input_schema = { type = \"object\", required = [\"order_id\"], \
         properties = { order_id = { type = \"string\" } } }\n\
         [namespaces.shop.actions.ticket.deliver.mcp]\n\
         url = \"https://desk.example/mcp\"\ntool = \"open_ticket\"\n\
         headers_env = { Authorization = \"MAIL_TOKEN\" }\n",
    )
    .expect("config");
    let srv = crate::helpers::Server::start_config(
        dir.path(),
        &config,
        &[("MAIL_TOKEN", "Bearer mail-token-from-env-7777")],
    );
    let run = |args: &[&str], env: &[(&str, &str)]| srv.idem_with(args, env);
    // `action put shop NAME --json DOC` with its Authorization header from the variable `var`.
    let put_with_header = |name: &str, doc: &str, (var, value): (&str, &str)| {
        let header_env = format!("Authorization={var}");
        let args = [
            "action",
            "put",
            "shop",
            name,
            "--json",
            doc,
            "--header-env",
            &header_env,
        ];
        run(&args, &[(var, value)])
    };
    let got = run(&["action", "get", "shop", "notify", "--json"], &[]);
    assert_eq!(got.code, 0, "{got:?}");
    assert_eq!(got.json()["header_hints"], json!({"Authorization": "7777"}));
    assert!(!got.stdout.contains("from-env"), "{got:?}");
    let ticket = run(&["action", "get", "shop", "ticket", "--json"], &[]);
    assert_eq!(ticket.code, 0, "{ticket:?}");
    assert_eq!(ticket.json()["deliver"]["mcp"]["tool"], "open_ticket");
    assert_eq!(
        ticket.json()["header_hints"],
        json!({"Authorization": "7777"})
    );
    assert!(!ticket.stdout.contains("from-env"), "{ticket:?}");
    let mcp_doc = r#"{"description": "Closes a ticket once.",
        "input_schema": {"type": "object", "required": ["ticket_id"],
                         "properties": {"ticket_id": {"type": "string"}}},
        "key": "{ticket_id}:close",
        "deliver": {"mcp": {"url": "https://desk.example/mcp", "tool": "close_ticket"}}}"#;
    let put = put_with_header("close", mcp_doc, ("DESK_KEY", "Bearer desk_secret_5678"));
    assert_eq!(put.code, 0, "{put:?}");
    assert_eq!(put.json()["header_hints"], json!({"Authorization": "5678"}));
    assert!(!put.stdout.contains("desk_secret"), "{put:?}");

    let doc = r#"{"description": "Refunds an order once.",
        "input_schema": {"type": "object", "required": ["order_id"],
                         "properties": {"order_id": {"type": "integer"}}},
        "key": "{order_id}:refund", "approval": "required",
        "deliver": {"http": {"method": "POST", "url": "https://pay.example/refunds"}}}"#;
    let put = put_with_header(
        "refund",
        doc,
        ("PAY_KEY", "Bearer sk_test_refund_secret_1234"),
    );
    assert_eq!(put.code, 0, "{put:?}");
    assert_eq!(put.json()["approval"], "required");
    assert_eq!(put.json()["header_hints"], json!({"Authorization": "1234"}));
    assert!(!put.stdout.contains("refund_secret"), "{put:?}");
    let list = run(&["action", "list", "shop"], &[]);
    assert!(
        list.stdout.contains("notify") && list.stdout.contains("refund"),
        "{list:?}"
    );
    let bad = run(
        &[
            "action",
            "put",
            "shop",
            "bad",
            "--json",
            r#"{"description": "x", "input_schema": {"type": "object"}, "key": "{id}",
              "deliver": {"http": {"method": "POST", "url": "https://x.example/"}}}"#,
        ],
        &[],
    );
    assert_ne!(bad.code, 0, "{bad:?}");
    assert!(bad.stderr.contains("key"), "{bad:?}");
    let refused = run(&["action", "delete", "shop", "refund"], &[]);
    assert_ne!(refused.code, 0, "needs --yes");
    let del = run(&["action", "delete", "shop", "refund", "--yes"], &[]);
    assert_eq!(del.code, 0, "{del:?}");
    let gone = run(&["action", "get", "shop", "refund"], &[]);
    assert_ne!(gone.code, 0, "{gone:?}");
    drop(srv);
    let log = std::fs::read_to_string(dir.path().join("log")).unwrap_or_default();
    assert!(
        !log.contains("from-env") && !log.contains("refund_secret") && !log.contains("desk_secret"),
        "{log}"
    );
}

/// `kill -9` of `idem serve` between sending an action's request and recording its answer:
/// after the lease the record is in review, the agent's next call is told `needs_review`,
/// and the destination saw exactly one request.
#[test]
fn a_killed_server_leaves_the_action_to_review_never_resends() {
    use std::sync::atomic::Ordering;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("idem.db");
    let srv = crate::helpers::Server::start_on(&db);
    let (port, n) = crate::effect::destination(true);
    let http = crate::helpers::http_client();
    let r = http
        .patch(format!("{}/v1/namespaces/shop", srv.url))
        .json(&json!({"egress": {"allow": [format!("127.0.0.1:{port}")]}}))
        .send()
        .expect("patch");
    assert_eq!(r.status().as_u16(), 200);
    let r = http
        .put(format!("{}/v1/namespaces/shop/actions/notify", srv.url))
        .json(&json!({
            "description": "Notifies the customer of an order, once.",
            "input_schema": {"type": "object", "required": ["order_id"],
                             "properties": {"order_id": {"type": "string"}}},
            "key": "{order_id}:notify",
            "deliver": {"http": {"method": "POST", "timeout_ms": 2000,
                                 "url": format!("http://127.0.0.1:{port}/notify")}}
        }))
        .send()
        .expect("put");
    assert_eq!(r.status().as_u16(), 201);
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "notify", "arguments": {"order_id": "o-9"}}});
    let (c, u, body) = (http.clone(), format!("{}/mcp/shop", srv.url), call.clone());
    let inflight = std::thread::spawn(move || {
        let _ = c.post(u).json(&body).send();
    });
    crate::effect::kill_mid_request(&n, srv, inflight);
    let srv = crate::helpers::Server::start_on(&db);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r: serde_json::Value = http
            .post(format!("{}/mcp/shop", srv.url))
            .json(&call)
            .send()
            .expect("post")
            .json()
            .expect("json");
        let outcome = r["result"]["structuredContent"]["outcome"].clone();
        if outcome == "needs_review" {
            assert_eq!(r["result"]["isError"], false, "{r}");
            break;
        }
        assert_eq!(outcome, "in_flight", "held until the lease runs out: {r}");
        assert!(Instant::now() < deadline, "never moved to review: {r}");
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(n.load(Ordering::SeqCst), 1, "never resent");
}
