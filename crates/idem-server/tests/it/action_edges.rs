//! The edges of the actions contract a client hits first: the tool-name syntax at its limits
//! (64 characters, the allowed set, percent-encoded names in the path) and
//! `idem_action_calls_total` read at the scrape right after a call (a counter that lags would
//! hide a doubled call from an alert), and a `tools/call` answered alike however its message
//! is spelled (the typed read of a plain call and the whole read of any other), and a kept
//! call checked against the egress policy of the moment. On both stores.

use serde_json::{json, Value};

use idem_testkit::app::*;

use super::intake::Sink;

/// An action delivering to `url`, keyed by `ref`.
fn ping(url: &str) -> Value {
    json!({
        "description": "Pings the destination once per ref.",
        "input_schema": {
            "type": "object",
            "properties": {"ref": {"type": "string"}, "note": {"type": "string"}},
            "required": ["ref"]
        },
        "key": "{ref}:ping",
        "deliver": {"http": {"method": "POST", "url": url}}
    })
}

async fn put(app: &TestApp, ns: &str, raw_name: &str, doc: &Value) -> Resp {
    app.send(
        app.http
            .put(format!(
                "{}/v1/namespaces/{ns}/actions/{raw_name}",
                app.base
            ))
            .json(doc),
    )
    .await
}

#[tokio::test]
async fn tool_names_at_the_edges_of_their_syntax() {
    for backend in backends() {
        let app = spawn_on(backend).await;
        let doc = ping("http://127.0.0.1:9/x");
        let longest = "a".repeat(64);
        for ok in [longest.as_str(), "A-b_9", "x", "-", "_"] {
            let r = put(&app, "edges", ok, &doc).await;
            assert_eq!(r.status, 201, "{ok:?}: {}", r.text);
            assert_eq!(r.body["name"], ok, "{}", r.text);
            let back = app.get(&format!("/v1/namespaces/edges/actions/{ok}")).await;
            assert_eq!(back.status, 200, "{ok:?}: {}", back.text);
        }
        let too_long = "a".repeat(65);
        // Raw path segments: a space, a dot, a non-ASCII letter, a colon, percent-encoded.
        for bad in [
            too_long.as_str(),
            "send%20it",
            "a.b",
            "caf%C3%A9",
            "a%3Ab",
            "a%2Fb",
        ] {
            let r = put(&app, "edges", bad, &doc).await;
            let p = r.problem(422, "invalid_field");
            assert_eq!(p["field"], "name", "{bad:?}: {}", r.text);
        }
        // Nothing of the refused ones was written: the five good names only.
        let list = app.get("/v1/namespaces/edges/actions").await;
        assert_eq!(list.status, 200, "{}", list.text);
        let mut names: Vec<String> = list.body["items"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|i| i["name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        let mut want = vec![
            longest.clone(),
            "A-b_9".into(),
            "x".into(),
            "-".into(),
            "_".into(),
        ];
        want.sort();
        assert_eq!(names, want);
        // tools/list serves them under the same names.
        let r = app
            .post(
                "/mcp/edges",
                json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
        let mut tools: Vec<String> = r.body["result"]["tools"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|t| t["name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        tools.sort();
        assert_eq!(tools, want);
        app.stop().await.expect("stop");
    }
}

/// The value of the first `/metrics` line that starts with `prefix`.
fn sample(m: &str, prefix: &str) -> Option<f64> {
    m.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l[prefix.len()..].trim().parse().ok())
}

#[tokio::test]
async fn the_call_counter_is_current_at_the_scrape_right_after_a_call() {
    for (i, backend) in backends().into_iter().enumerate() {
        let app = spawn_on(backend).await;
        let sink = Sink::start(vec![]).await;
        // A namespace of its own per backend: the registry is shared by this test binary.
        let ns = format!("callcount{i}");
        allow_sink(&app, &ns, &sink).await;
        let r = put(&app, &ns, "ping_it", &ping(&sink.url)).await;
        assert_eq!(r.status, 201, "{}", r.text);
        let series = |outcome: &str| {
            format!(
                r#"idem_action_calls_total{{namespace="{ns}",action="ping_it",outcome="{outcome}"}}"#
            )
        };
        let call = |reference: &str, note: &str| {
            json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                   "params": {"name": "ping_it", "arguments": {"ref": reference, "note": note}}})
        };
        let mcp = format!("/mcp/{ns}");
        let r = app.post(&mcp, call("r1", "first")).await;
        assert_eq!(
            r.body["result"]["structuredContent"]["outcome"], "performed",
            "{}",
            r.text
        );
        let m = app.get("/metrics").await.text;
        assert_eq!(sample(&m, &series("performed")), Some(1.0), "{m}");
        assert_eq!(sample(&m, &series("completed")), None, "{m}");
        let r = app.post(&mcp, call("r1", "regenerated")).await;
        assert_eq!(
            r.body["result"]["structuredContent"]["outcome"], "completed",
            "{}",
            r.text
        );
        let m = app.get("/metrics").await.text;
        assert_eq!(sample(&m, &series("performed")), Some(1.0), "{m}");
        assert_eq!(sample(&m, &series("completed")), Some(1.0), "{m}");
        // A refused call (the key argument missing) counts under its outcome, nothing sent.
        let r = app
            .post(
                &mcp,
                json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                       "params": {"name": "ping_it", "arguments": {"note": "no ref"}}}),
            )
            .await;
        assert_eq!(
            r.body["result"]["structuredContent"]["outcome"], "missing_identity_field",
            "{}",
            r.text
        );
        let m = app.get("/metrics").await.text;
        assert_eq!(
            sample(&m, &series("missing_identity_field")),
            Some(1.0),
            "{m}"
        );
        assert_eq!(sink.count(), 1);
        app.stop().await.expect("stop");
    }
}

/// Allows `sink` as a destination of `ns`.
async fn allow_sink(app: &TestApp, ns: &str, sink: &Sink) {
    let port = sink
        .url
        .rsplit(':')
        .next()
        .and_then(|p| p.split('/').next())
        .unwrap_or_default()
        .to_owned();
    let r = app
        .patch_namespace(
            ns,
            json!({"egress": {"allow": [format!("127.0.0.1:{port}")]}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
}

#[tokio::test]
async fn a_call_is_answered_alike_however_its_message_is_spelled() {
    for backend in backends() {
        let app = spawn_on(backend).await;
        let sink = Sink::start(vec![]).await;
        allow_sink(&app, "spelled", &sink).await;
        let r = put(&app, "spelled", "ping_it", &ping(&sink.url)).await;
        assert_eq!(r.status, 201, "{}", r.text);
        let mcp = "/mcp/spelled";
        let first = app
            .post_json_text(
                mcp,
                r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"ping_it","arguments":{"ref":"r1","note":"a"}}}"#,
            )
            .await;
        assert_eq!(first.status, 200, "{}", first.text);
        assert_eq!(
            first.body["result"]["structuredContent"]["outcome"], "performed",
            "{}",
            first.text
        );
        // The repeated call, as a plain message (read in place) and as messages only the
        // whole read takes (an escaped method, a duplicate member, a cost): the same bytes.
        let plain = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"ping_it","arguments":{"ref":"r1","note":"a"}}}"#;
        let want = app.post_json_text(mcp, plain).await;
        assert_eq!(want.status, 200, "{}", want.text);
        assert_eq!(
            want.body["result"]["structuredContent"]["outcome"], "completed",
            "{}",
            want.text
        );
        assert_eq!(want.header("content-type"), Some("application/json"));
        for spelled in [
            r#"{"jsonrpc":"2.0","id":7,"method":"tools\/call","params":{"name":"ping_it","arguments":{"ref":"r1","note":"a"}}}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"nope","name":"ping_it","arguments":{"ref":"r1","note":"a"}}}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"ping_it","arguments":{"ref":"r1","note":"a"},"_meta":{"idem/cost":{"tokens":5}}}}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"ping_it","arguments":{"ref":"r1","note":"a"},"_meta":{"idem/cost":null,"progressToken":3}}}"#,
        ] {
            let r = app.post_json_text(mcp, spelled).await;
            assert_eq!(r.status, 200, "{spelled}: {}", r.text);
            assert_eq!(r.text, want.text, "{spelled}");
        }
        // Of the stateless revision (`resultType` in its result): read in place, and spelled
        // so that only the whole read takes it.
        let modern = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"ping_it","arguments":{"ref":"r1","note":"a"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
        let want_modern = app.post_json_text(mcp, modern).await;
        assert_eq!(
            want_modern.body["result"]["resultType"], "complete",
            "{}",
            want_modern.text
        );
        assert!(
            want.body["result"].get("resultType").is_none(),
            "{}",
            want.text
        );
        for spelled in [
            r#" { "params" : { "arguments" : { "note" : "a" , "ref" : "r1" } , "name" : "ping_it" , "_meta" : { "io.modelcontextprotocol/protocolVersion" : "2026-07-28" } } , "method" : "tools/call" , "id" : 7 , "jsonrpc" : "2.0" } "#,
            r#"{"jsonrpc":"2.0","id":7,"method":"tools\/call","params":{"name":"ping_it","arguments":{"ref":"r1","note":"a"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#,
        ] {
            let r = app.post_json_text(mcp, spelled).await;
            assert_eq!(r.status, 200, "{spelled}: {}", r.text);
            assert_eq!(r.text, want_modern.text, "{spelled}");
        }
        // Ids are written back as they came: a string, the largest integer, and (the whole
        // read) an integer spelled as a float.
        for (id, back) in [
            (r#""a-1""#, json!("a-1")),
            ("9007199254740991", json!(9_007_199_254_740_991_i64)),
            ("-3", json!(-3)),
        ] {
            let text = plain.replacen(r#""id":7"#, &format!(r#""id":{id}"#), 1);
            let r = app.post_json_text(mcp, &text).await;
            assert_eq!(r.status, 200, "{id}: {}", r.text);
            assert_eq!(r.body["id"], back, "{id}: {}", r.text);
            assert_eq!(r.body["result"], want.body["result"], "{id}");
        }
        for bad in ["9007199254740992", "null", "true", "[7]"] {
            let text = plain.replacen(r#""id":7"#, &format!(r#""id":{bad}"#), 1);
            let r = app.post_json_text(mcp, &text).await;
            assert_eq!(r.status, 400, "{bad}: {}", r.text);
            assert_eq!(r.body["error"]["code"], -32600, "{bad}: {}", r.text);
        }
        // A revision idem does not serve in `_meta` (`null` and a number included): -32022,
        // the id written back.
        for version in [r#""1999-01-01""#, "null", "20260728", r#""2026-07-28 ""#] {
            let text = format!(
                r#"{{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{{"name":"ping_it","arguments":{{"ref":"r1"}},"_meta":{{"io.modelcontextprotocol/protocolVersion":{version}}}}}}}"#
            );
            let r = app.post_json_text(mcp, &text).await;
            assert_eq!(r.status, 400, "{version}: {}", r.text);
            assert_eq!(r.body["error"]["code"], -32022, "{version}: {}", r.text);
            assert_eq!(r.body["id"], 8, "{version}: {}", r.text);
        }
        // An unknown tool: -32602.
        let r = app
            .post_json_text(
                mcp,
                r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"nope","arguments":{"ref":"r1"}}}"#,
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(r.body["error"]["code"], -32602, "{}", r.text);
        assert_eq!(r.body["id"], 9, "{}", r.text);
        // Refusals, each asked twice (a refusal is never kept as a call's derivation):
        // arguments absent or null (the identity missing), not an object, of the wrong type.
        for (args, outcome, field) in [
            ("", "missing_identity_field", "ref"),
            (r#","arguments":null"#, "missing_identity_field", "ref"),
            (r#","arguments":[1]"#, "invalid_field", "arguments"),
            (r#","arguments":{"ref":5}"#, "invalid_field", "ref"),
            (
                r#","arguments":{"ref":"r2","note":7}"#,
                "invalid_field",
                "note",
            ),
        ] {
            let text = format!(
                r#"{{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{{"name":"ping_it"{args}}}}}"#
            );
            for _ in 0..2 {
                let r = app.post_json_text(mcp, &text).await;
                assert_eq!(r.status, 200, "{text}: {}", r.text);
                let sc = &r.body["result"]["structuredContent"];
                assert_eq!(sc["outcome"], outcome, "{text}: {}", r.text);
                assert_eq!(sc["field"], field, "{text}: {}", r.text);
                assert_eq!(r.body["result"]["isError"], true, "{text}: {}", r.text);
            }
        }
        // Arguments nested deeper than the message's reader takes: a parse error (HTTP 400,
        // -32700), as for any message, never a 500; nested less deeply, a refusal.
        for (levels, status) in [(130, 400), (110, 200)] {
            let note = format!("{}{}", "[".repeat(levels), "]".repeat(levels));
            let text = format!(
                r#"{{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{{"name":"ping_it","arguments":{{"ref":"r3","note":{note}}}}}}}"#
            );
            let r = app.post_json_text(mcp, &text).await;
            assert_eq!(r.status, status, "{levels}: {}", r.text);
            if status == 400 {
                assert_eq!(r.body["error"]["code"], -32700, "{}", r.text);
            } else {
                let sc = &r.body["result"]["structuredContent"];
                assert_eq!(sc["outcome"], "invalid_field", "{}", r.text);
                assert_eq!(sc["field"], "note", "{}", r.text);
            }
        }
        // Nothing refused was stored: r2 was never claimed.
        let r = app.get("/v1/namespaces/spelled/keys/r2:ping").await;
        assert_eq!(r.status, 404, "{}", r.text);
        assert_eq!(sink.count(), 1, "one delivery in all");
        app.stop().await.expect("stop");
    }
}

/// An action changed through another instance on the same ledger: once this instance loads it
/// again (after its 1 s cache), a repeated call derives its arguments under the new document,
/// never the kept derivation of the old one (here: a new key template, so the same arguments
/// are a new key and are delivered again).
#[tokio::test]
async fn a_call_after_another_instance_changed_the_action_uses_the_new_document() {
    for backend in backends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pg = match backend {
            Backend::Postgres => idem_testkit::pg::PgDb::create("two instances, one action"),
            Backend::Sqlite => None,
        };
        let url = match &pg {
            Some(db) => db.url().to_owned(),
            None => format!("sqlite://{}", dir.path().join("idem.db").display()),
        };
        let on = |url: String| Options {
            backend,
            db: Some(url),
            ..Default::default()
        };
        let a = spawn_with(on(url.clone())).await;
        let b = spawn_with(on(url)).await;
        let sink = Sink::start(vec![]).await;
        allow_sink(&a, "twice", &sink).await;
        let r = put(&a, "twice", "ping_it", &ping(&sink.url)).await;
        assert_eq!(r.status, 201, "{}", r.text);
        let call = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ping_it","arguments":{"ref":"r1"}}}"#;
        let outcome = |r: &Resp| {
            (
                r.body["result"]["structuredContent"]["outcome"].clone(),
                r.body["result"]["structuredContent"]["key"].clone(),
            )
        };
        let r = b.post_json_text("/mcp/twice", call).await;
        assert_eq!(
            outcome(&r),
            (json!("performed"), json!("r1:ping")),
            "{}",
            r.text
        );
        let r = b.post_json_text("/mcp/twice", call).await;
        assert_eq!(
            outcome(&r),
            (json!("completed"), json!("r1:ping")),
            "{}",
            r.text
        );
        let mut doc = ping(&sink.url);
        doc["key"] = json!("{ref}:pong");
        let r = put(&a, "twice", "ping_it", &doc).await;
        assert_eq!(r.status, 200, "{}", r.text);
        // Within its cache the other instance may answer from the old document; after it,
        // never.
        tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
        let r = b.post_json_text("/mcp/twice", call).await;
        assert_eq!(
            outcome(&r),
            (json!("performed"), json!("r1:pong")),
            "{}",
            r.text
        );
        assert_eq!(sink.count(), 2);
        a.stop().await.expect("stop");
        b.stop().await.expect("stop");
    }
}

/// A repeated call keeps its derivation (the delivery's URL read once), never the egress
/// answer: closing the namespace's egress refuses the next repeat as it refuses a call
/// derived afresh (`destination_forbidden`, nothing sent), and opening it again replays the
/// stored result.
#[tokio::test]
async fn a_kept_call_is_checked_against_the_egress_policy_of_the_moment() {
    for backend in backends() {
        let app = spawn_on(backend).await;
        let sink = Sink::start(vec![]).await;
        allow_sink(&app, "gated", &sink).await;
        let r = put(&app, "gated", "ping_it", &ping(&sink.url)).await;
        assert_eq!(r.status, 201, "{}", r.text);
        let call = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ping_it","arguments":{"ref":"r1"}}}"#;
        // With a cost the derivation is never kept: read afresh on every call.
        let fresh = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ping_it","arguments":{"ref":"r1"},"_meta":{"idem/cost":{"tokens":1}}}}"#;
        let outcome = |r: &Resp| r.body["result"]["structuredContent"]["outcome"].clone();
        for want in ["performed", "completed"] {
            let r = app.post_json_text("/mcp/gated", call).await;
            assert_eq!(outcome(&r), json!(want), "{}", r.text);
        }
        let r = app
            .patch_namespace("gated", json!({"egress": {"allow": []}}))
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
        for body in [call, fresh, call] {
            let r = app.post_json_text("/mcp/gated", body).await;
            assert_eq!(outcome(&r), json!("destination_forbidden"), "{}", r.text);
            assert_eq!(
                r.body["result"]["structuredContent"]["field"],
                json!("request.url"),
                "{}",
                r.text
            );
            assert_eq!(r.body["result"]["isError"], json!(true), "{}", r.text);
        }
        allow_sink(&app, "gated", &sink).await;
        let r = app.post_json_text("/mcp/gated", call).await;
        assert_eq!(outcome(&r), json!("completed"), "{}", r.text);
        assert_eq!(sink.count(), 1, "one delivery in all");
        app.stop().await.expect("stop");
    }
}
