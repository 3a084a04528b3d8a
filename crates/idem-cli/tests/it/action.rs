//! `idem serve --config` applies `[namespaces.NS.actions.NAME]` at start (header values from
//! the environment), and `idem action put|get|list|delete` drive the actions API; no header
//! value reaches an answer or the log.

use std::time::{Duration, Instant};

use serde_json::json;

#[test]
fn config_actions_and_the_action_verbs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("idem.db");
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
         headers_env = { Authorization = \"MAIL_TOKEN\" }\n",
    )
    .expect("config");
    let port = crate::helpers::free_port();
    let addr = format!("127.0.0.1:{port}");
    let log = std::fs::File::create(dir.path().join("log")).expect("log");
    let mut child = crate::helpers::idem()
        .args(["serve", "--listen", &addr, "--db"])
        .arg(format!("sqlite://{}", db.display()))
        .arg("--config")
        .arg(&config)
        .env("MAIL_TOKEN", "Bearer mail-token-from-env-7777")
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn");
    let url = format!("http://{addr}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while crate::helpers::http_status(&addr, "/healthz") != Some(200) {
        assert!(Instant::now() < deadline, "server did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--url", url.as_str()]);
        crate::helpers::run_with(&all, "", env)
    };
    let got = run(&["action", "get", "shop", "notify", "--json"], &[]);
    assert_eq!(got.code, 0, "{got:?}");
    assert_eq!(got.json()["header_hints"], json!({"Authorization": "7777"}));
    assert!(!got.stdout.contains("from-env"), "{got:?}");

    let doc = r#"{"description": "Refunds an order once.",
        "input_schema": {"type": "object", "required": ["order_id"],
                         "properties": {"order_id": {"type": "integer"}}},
        "key": "{order_id}:refund", "approval": "required",
        "deliver": {"http": {"method": "POST", "url": "https://pay.example/refunds"}}}"#;
    let put = run(
        &[
            "action",
            "put",
            "shop",
            "refund",
            "--json",
            doc,
            "--header-env",
            "Authorization=PAY_KEY",
        ],
        &[("PAY_KEY", "Bearer sk_test_refund_secret_1234")],
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
    let _ = child.kill();
    let _ = child.wait();
    let log = std::fs::read_to_string(dir.path().join("log")).unwrap_or_default();
    assert!(
        !log.contains("from-env") && !log.contains("refund_secret"),
        "{log}"
    );
}
