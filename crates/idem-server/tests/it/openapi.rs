//! The OpenAPI document says what the server does: security only where a token is needed,
//! every problem status an operation answers with, the real limits of keys, namespaces and
//! body members. (`.ci/schemathesis.sh` checks the same black-box with generated requests.)

use std::collections::BTreeSet;

use serde_json::{json, Value};

use idem_testkit::app::*;

async fn document() -> (TestApp, Value) {
    let app = spawn_app().await;
    let r = app.get("/openapi.json").await;
    assert_eq!(r.status, 200, "{}", r.text);
    let doc = r.body.clone();
    (app, doc)
}

fn op<'a>(doc: &'a Value, method: &str, path: &str) -> &'a Value {
    let op = &doc["paths"][path][method];
    assert!(op.is_object(), "{method} {path} is not documented");
    op
}

fn statuses(op: &Value) -> BTreeSet<u16> {
    op["responses"]
        .as_object()
        .map(|r| r.keys().filter_map(|k| k.parse().ok()).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn openapi_probes_need_no_token_and_every_v1_route_takes_a_bearer_token() {
    let (_app, doc) = document().await;
    assert!(
        doc.get("security").is_none(),
        "no document-wide security: the probes need none"
    );
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    for route in idem_server::routes::routes() {
        let op = op(&doc, route.method, route.path);
        match route.role {
            None => assert!(
                op.get("security").is_none(),
                "{} {} needs no token",
                route.method,
                route.path
            ),
            Some(_) => {
                // A bearer token, or none while the server has no tokens at all.
                assert_eq!(
                    op["security"],
                    json!([{"bearer": []}, {}]),
                    "{} {}",
                    route.method,
                    route.path
                );
                for status in [401, 403, 503] {
                    assert!(
                        statuses(op).contains(&status),
                        "{} {} lacks {status}",
                        route.method,
                        route.path
                    );
                }
            }
        }
    }
    for p in ["/healthz", "/readyz", "/metrics", "/openapi.json"] {
        assert!(op(&doc, "get", p).get("security").is_none(), "{p}");
    }
}

#[tokio::test]
async fn openapi_lists_the_problem_statuses_each_operation_answers_with() {
    let (_app, doc) = document().await;
    let key = "/v1/namespaces/{ns}/keys/{key}";
    // Each operation: its method, its path and the statuses it answers.
    let table = [
        "post /v1/namespaces/{ns}/keys/{key}/claim: 200 201 400 401 403 409 413 422 429 503",
        "post /v1/namespaces/{ns}/keys/{key}/effect: 200 400 401 403 409 413 422 429 503",
        "post /v1/namespaces/{ns}/keys/{key}/prepare: 200 400 401 403 404 409 413 422 503",
        "post /v1/namespaces/{ns}/keys/{key}/heartbeat: 200 400 401 403 404 409 413 422 503",
        "post /v1/namespaces/{ns}/keys/{key}/complete: 200 400 401 403 404 409 413 422 503",
        "post /v1/namespaces/{ns}/keys/{key}/fail: 200 400 401 403 404 409 413 422 503",
        "get /v1/namespaces/{ns}/keys/{key}: 200 400 401 403 404 503",
        "post /v1/namespaces/{ns}/keys/{key}/resolve: 200 400 401 403 404 409 413 422 503",
        "post /v1/namespaces/{ns}/keys/{key}/approve: 200 400 401 403 404 409 413 422 503",
        "post /v1/namespaces/{ns}/keys/{key}/reject: 200 400 401 403 404 409 413 422 503",
        "get /v1/namespaces/{ns}/keys: 200 400 401 403 422 503",
        "get /v1/namespaces/{ns}: 200 400 401 403 503",
        "patch /v1/namespaces/{ns}: 200 400 401 403 413 422 503",
        "post /v1/namespaces/{ns}/pause: 200 400 401 403 413 422 503",
        "post /v1/namespaces/{ns}/resume: 200 400 401 403 413 422 503",
        "post /v1/keys/derive: 200 400 401 403 413 422 503",
        "post /v1/tokens: 201 400 401 403 413 422 503",
        "get /v1/tokens: 200 401 403 503",
        "delete /v1/tokens/{token_id}: 204 401 403 404 503",
        "get /v1/whoami: 200 401 403 503",
        "get /v1/namespaces: 200 401 403 503",
        "get /v1/review: 200 401 403 422 503",
        "post /v1/audit: 200 400 401 403 413 422 503",
        "post /in/{source}: 200 401 404 405 413 503",
        "get /v1/sources: 200 401 403 503",
        "put /v1/sources/{source}: 200 201 400 401 403 413 422 503",
        "patch /v1/sources/{source}: 200 400 401 403 404 413 422 503",
        "get /v1/sources/{source}: 200 400 401 403 404 503",
        "delete /v1/sources/{source}: 204 400 401 403 404 409 422 503",
        "get /v1/sources/{source}/events: 200 400 401 403 404 422 503",
        "get /v1/sources/{source}/events/{key}: 200 400 401 403 404 503",
        "post /v1/sources/{source}/events/{key}/redeliver: 202 400 401 403 404 409 413 422 503",
        "post /v1/sources/{source}/redeliver: 200 400 401 403 404 413 422 503",
        "get /v1/namespaces/{ns}/actions: 200 400 401 403 503",
        "put /v1/namespaces/{ns}/actions/{name}: 200 201 400 401 403 413 422 503",
        "get /v1/namespaces/{ns}/actions/{name}: 200 400 401 403 404 422 503",
        "delete /v1/namespaces/{ns}/actions/{name}: 204 400 401 403 404 422 503",
        "post /mcp/{ns}: 200 202 400 401 403 413 503",
        "get /healthz: 200",
        "get /readyz: 200 503",
        "get /metrics: 200",
        "get /openapi.json: 200",
    ];
    let want: Vec<(&str, &str, Vec<u16>)> = table
        .iter()
        .map(|row| {
            let (head, statuses) = row.split_once(": ").expect("method path: statuses");
            let (method, path) = head.split_once(' ').expect("method path");
            let statuses = statuses.split(' ').map(|s| s.parse().expect("status"));
            (method, path, statuses.collect())
        })
        .collect();
    assert_eq!(want.len(), idem_server::route_table().len());
    let codes: BTreeSet<&str> = doc["components"]["schemas"]["Problem"]["properties"]["code"]
        ["enum"]
        .as_array()
        .expect("the Problem code enum")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for (method, path, statuses_wanted) in &want {
        let op = op(&doc, method, path);
        let got = statuses(op);
        let wanted: BTreeSet<u16> = statuses_wanted.iter().copied().collect();
        assert_eq!(got, wanted, "{method} {path}");
        for status in got.iter().filter(|s| **s >= 400) {
            let resp = &op["responses"][status.to_string()];
            if resp["content"].get("application/problem+json").is_none()
                && (path.ends_with("/claim") || path.ends_with("/effect"))
            {
                // A claim outcome only (in_flight, limited…), checked below.
                assert!(resp["content"]["application/json"].is_object(), "{status}");
                continue;
            }
            let problem = &resp["content"]["application/problem+json"]["schema"];
            assert_eq!(
                problem["allOf"][0]["$ref"], "#/components/schemas/Problem",
                "{method} {path} {status} is problem+json"
            );
            assert_eq!(problem["properties"]["status"]["const"], *status);
            let listed = problem["properties"]["code"]["enum"]
                .as_array()
                .expect("codes");
            assert!(!listed.is_empty(), "{method} {path} {status}");
            for c in listed {
                assert!(codes.contains(c.as_str().unwrap_or_default()), "{c}");
            }
        }
    }
    // Claim outcomes that are not 2xx are claim answers (JSON); its 422 and 503 can also be
    // problems (invalid_field, store_unavailable).
    let claim = op(&doc, "post", &format!("{key}/claim"));
    for status in ["409", "422", "429", "503"] {
        assert_eq!(
            claim["responses"][status]["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/ClaimResponse",
            "{status}"
        );
    }
    for status in ["422", "503"] {
        assert!(claim["responses"][status]["content"]["application/problem+json"].is_object());
    }
    // The token route documents the refusal without tokens.
    let tokens = op(&doc, "post", "/v1/tokens");
    for text in [
        &tokens["description"],
        &tokens["responses"]["403"]["description"],
    ] {
        assert!(
            text.as_str()
                .is_some_and(|d| d.contains("idem token create")),
            "{text}"
        );
    }
}

#[tokio::test]
async fn openapi_statuses_match_what_the_server_answers() {
    let (app, doc) = document().await;
    let claim = op(&doc, "post", "/v1/namespaces/{ns}/keys/{key}/claim");
    // Real refusals, each documented with its code.
    let cases = [
        (
            app.post("/v1/namespaces/ns/keys/a%20b/claim", json!({}))
                .await,
            "invalid_key",
        ),
        (
            app.post("/v1/namespaces/a%20b/keys/k/claim", json!({}))
                .await,
            "invalid_namespace",
        ),
        (
            app.post("/v1/namespaces/ns/keys/k/claim", json!({"nope": 1}))
                .await,
            "unknown_field",
        ),
        (
            app.post("/v1/namespaces/ns/keys/k/claim", json!({"lease_ms": 0}))
                .await,
            "invalid_field",
        ),
        (
            app.post_raw("/v1/namespaces/ns/keys/k/claim", "null").await,
            "invalid_json",
        ),
    ];
    for (r, code) in cases {
        assert_eq!(r.body["code"], code, "{}", r.text);
        assert_eq!(r.header("content-type"), Some("application/problem+json"));
        let resp = &claim["responses"][r.status.to_string()];
        let listed =
            &resp["content"]["application/problem+json"]["schema"]["properties"]["code"]["enum"];
        assert!(
            listed.as_array().is_some_and(|l| l.contains(&json!(code))),
            "{code} under {}: {resp}",
            r.status
        );
    }
    // A 405 names the methods the path has (RFC 9110).
    let r = app
        .send(app.http.delete(format!("{}/v1/namespaces/ns", app.base)))
        .await;
    r.problem(405, "method_not_allowed");
    assert_eq!(r.header("allow"), Some("GET, HEAD, PATCH"));
}

#[tokio::test]
async fn openapi_key_and_namespace_parameters_have_the_real_limits() {
    let (_app, doc) = document().await;
    let mut seen = 0;
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (_, op) in item.as_object().expect("path item") {
            for p in op["parameters"].as_array().into_iter().flatten() {
                if p["in"] != "path" {
                    continue;
                }
                let schema = &p["schema"];
                match p["name"].as_str() {
                    Some("key") => {
                        assert_eq!(schema["pattern"], r"^[\x21-\x7E]{1,255}$", "{path}");
                        assert_eq!(schema["minLength"], 1, "{path}");
                        assert_eq!(schema["maxLength"], 255, "{path}");
                        seen += 1;
                    }
                    Some("ns" | "source") => {
                        assert_eq!(schema["pattern"], r"^[A-Za-z0-9._:-]{1,128}$", "{path}");
                        assert_eq!(schema["maxLength"], 128, "{path}");
                    }
                    Some("name") => {
                        assert!(path.ends_with("/actions/{name}"), "{path}");
                        assert_eq!(schema["pattern"], "^[A-Za-z0-9_-]{1,64}$", "{path}");
                    }
                    Some("token_id") => {
                        assert_eq!(path, "/v1/tokens/{token_id}");
                        assert_eq!(schema["type"], "integer", "{path}");
                    }
                    other => panic!("{path}: unexpected path parameter {other:?}"),
                }
            }
        }
    }
    assert_eq!(seen, 12, "every key route has the key parameter");
    // The namespace pattern is the server's rule: `;` is refused, `:` is not.
    let app = spawn_app().await;
    app.namespace("a;b").await.problem(400, "invalid_namespace");
    assert_eq!(app.namespace("a:b.c_d-e").await.status, 200);
}

#[tokio::test]
async fn openapi_request_bodies_state_the_parsers_limits() {
    let (_app, doc) = document().await;
    let s = &doc["components"]["schemas"];
    for name in [
        "ClaimBody",
        "PrepareBody",
        "HeartbeatBody",
        "CompleteBody",
        "FailBody",
        "FailErrorBody",
        "ResolveBody",
        "NoteBody",
        "DeriveBody",
        "TokenBody",
        "PolicyPatchBody",
        "RetryPatchBody",
    ] {
        assert_eq!(
            s[name]["additionalProperties"],
            json!(false),
            "{name} refuses unknown members like the server"
        );
    }
    let claim = &s["ClaimBody"]["properties"];
    assert_eq!(claim["lease_ms"]["minimum"], 1);
    assert_eq!(claim["lease_ms"]["maximum"], idem::policy::MAX_LEASE_MS);
    assert_eq!(claim["wait_ms"]["minimum"], 0);
    assert_eq!(claim["owner"]["maxLength"], 255);
    assert_eq!(claim["correlation_id"]["maxLength"], 255);
    assert_eq!(claim["fingerprint"]["pattern"], "^[0-9A-Fa-f]{64}$");
    assert!(
        s["ClaimBody"]["not"]["required"].is_array(),
        "payload xor fingerprint"
    );
    for body in ["PrepareBody", "HeartbeatBody", "CompleteBody", "FailBody"] {
        assert_eq!(s[body]["required"][0], "token", "{body}");
        assert_eq!(s[body]["properties"]["token"]["minLength"], 1, "{body}");
    }
    assert_eq!(
        s["CompleteBody"]["properties"]["external_ref"]["maxLength"],
        512
    );
    assert_eq!(s["FailBody"]["properties"]["http_status"]["minimum"], 100);
    assert_eq!(s["FailBody"]["properties"]["http_status"]["maximum"], 599);
    assert!(
        s["FailBody"]["anyOf"].is_array(),
        "what the classifier needs"
    );
    assert_eq!(s["ResolveBody"]["properties"]["note"]["maxLength"], 2000);
    assert_eq!(s["DeriveBody"]["properties"]["fields"]["minItems"], 1);
    let patch = &s["PolicyPatchBody"]["properties"];
    assert_eq!(patch["lease_ms"]["type"], "integer", "null is refused");
    assert_eq!(patch["daily_limit"]["type"], json!(["integer", "null"]));
    assert_eq!(
        s["RetryPatchBody"]["properties"]["max_attempts"]["maximum"],
        1000
    );
    // The optional bodies are documented as optional.
    for path in ["claim", "approve", "reject"] {
        let op = op(
            &doc,
            "post",
            &format!("/v1/namespaces/{{ns}}/keys/{{key}}/{path}"),
        );
        assert_eq!(op["requestBody"]["required"], false, "{path}");
    }
    assert_eq!(
        op(&doc, "post", "/v1/namespaces/{ns}/keys/{key}/complete")["requestBody"]["required"],
        true
    );
}

#[tokio::test]
async fn integral_floats_are_integers_and_a_null_body_is_not_an_object() {
    let app = spawn_app().await;
    // 41.0 is the JSON number 41 (JSON Schema's integer admits it).
    let r = app
        .claim("ns", "k", json!({"lease_ms": 41000.0, "wait_ms": 0.0}))
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let t = Api::acquired(&r);
    let r = app
        .heartbeat("ns", "k", json!({"token": t, "lease_ms": 5000.0}))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = app
        .fail(
            "ns",
            "k",
            json!({"token": t, "http_status": 503.0, "retry_after": 7.0}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = app.claim("ns", "k2", json!({"lease_ms": 41000.5})).await;
    assert_eq!(r.problem(422, "invalid_field")["field"], "lease_ms");
    let r = app
        .patch_namespace("ns", json!({"retry": {"max_attempts": 3.0}}))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["policy"]["retry"]["max_attempts"], 3);
    // `null` is not a JSON object (an empty body still is `{}` where the body is optional).
    app.post_raw("/v1/namespaces/ns/resume", "null")
        .await
        .problem(400, "invalid_json");
    assert_eq!(
        app.post_raw("/v1/namespaces/ns/resume", "").await.status,
        200
    );
}

#[tokio::test]
async fn openapi_answers_require_what_the_server_always_writes() {
    let (app, doc) = document().await;
    let s = &doc["components"]["schemas"];
    let required = |name: &str| -> BTreeSet<String> {
        s[name]["required"]
            .as_array()
            .unwrap_or_else(|| panic!("{name}.required"))
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect()
    };
    assert_eq!(
        required("ClaimResponse"),
        ["outcome", "record"].map(String::from).into()
    );
    let states: Vec<&str> = idem::State::ALL.iter().map(|s| s.as_str()).collect();
    assert_eq!(s["RecordDoc"]["properties"]["state"]["enum"], json!(states));
    // A real claim answer and record carry every required member, nothing else.
    let r = app.claim("ns", "k", json!({"payload": {"a": 1}})).await;
    assert_eq!(r.status, 201);
    for (value, name) in [(&r.body, "ClaimResponse"), (&r.body["record"], "RecordDoc")] {
        let members: BTreeSet<String> =
            value.as_object().expect("object").keys().cloned().collect();
        let documented: BTreeSet<String> = s[name]["properties"]
            .as_object()
            .expect("properties")
            .keys()
            .cloned()
            .collect();
        assert!(required(name).is_subset(&members), "{name}: {members:?}");
        assert!(members.is_subset(&documented), "{name}: {members:?}");
    }
    let got = app.record("ns", "k").await;
    let event = &got.body["events"][0];
    let event_members: BTreeSet<String> =
        event.as_object().expect("event").keys().cloned().collect();
    assert_eq!(required("EventDoc"), event_members);
    assert!(s["EventDoc"]["properties"]["type"]["enum"]
        .as_array()
        .is_some_and(|e| e.contains(&event["type"])));
    // The policy as reads show it: the documented members are the members.
    let ns = app.namespace("ns").await;
    let keys = |v: &Value| -> BTreeSet<String> {
        v.as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default()
    };
    assert_eq!(
        keys(&s["PolicyDoc"]["properties"]),
        keys(&ns.body["policy"])
    );
    assert_eq!(
        keys(&s["RetryPolicyDoc"]["properties"]),
        keys(&ns.body["policy"]["retry"])
    );
    assert_eq!(keys(&s["NamespaceResponse"]["properties"]), keys(&ns.body));
    // The worker flow is linked: the acquired claim's token goes into the writes of its key.
    let links =
        &op(&doc, "post", "/v1/namespaces/{ns}/keys/{key}/claim")["responses"]["201"]["links"];
    for write in ["prepare", "heartbeat", "complete", "fail"] {
        assert_eq!(links[write]["operationId"], write);
        assert_eq!(
            links[write]["requestBody"]["token"],
            "$response.body#/token"
        );
        assert_eq!(links[write]["parameters"]["key"], "$request.path.key");
    }
}

/// The cursors the server hands out match the patterns the document gives them (a generated
/// schema-valid cursor is then one the server can read: schemathesis checks that side).
#[tokio::test]
async fn openapi_cursor_patterns_match_the_cursors_the_server_hands_out() {
    let (app, doc) = document().await;
    for key in ["k-1", "k%2", "k:3"] {
        let c = app.claim("q.ns_1:a-b", key, json!({})).await;
        let token = c.body["token"].as_str().expect("token").to_owned();
        let f = app
            .fail(
                "q.ns_1:a-b",
                key,
                json!({"token": token, "kind": "ambiguous", "error": {"category": "timeout", "message": "t"}}),
            )
            .await;
        assert_eq!(f.body["record"]["state"], "needs_review", "{}", f.text);
        app.advance(1);
    }
    let pattern_of = |path: &str| {
        let p = op(&doc, "get", path)["parameters"]
            .as_array()
            .expect("parameters")
            .iter()
            .find(|p| p["name"] == "cursor")
            .expect("cursor parameter")["schema"]["pattern"]
            .as_str()
            .expect("pattern")
            .to_owned();
        regex::Regex::new(&p).expect("pattern compiles")
    };
    for (path, list) in [
        ("/v1/review", "/v1/review?limit=1".to_owned()),
        (
            "/v1/namespaces/{ns}/keys",
            "/v1/namespaces/q.ns_1:a-b/keys?limit=1".to_owned(),
        ),
    ] {
        let re = pattern_of(path);
        let page = app.get(&list).await;
        let cursor = page.body["next_cursor"]
            .as_str()
            .expect("a next page")
            .to_owned();
        assert!(re.is_match(&cursor), "{path}: {cursor} does not match {re}");
        let next = app.get(&format!("{list}&cursor={cursor}")).await;
        assert_eq!(next.status, 200, "{}", next.text);
        assert!(re.is_match(""), "{path}: empty means the first page");
    }
    // The review queue's state filter names only the states it can list.
    let states: Vec<&str> = op(&doc, "get", "/v1/review")["parameters"]
        .as_array()
        .expect("parameters")
        .iter()
        .find(|p| p["name"] == "state")
        .expect("state")["schema"]["enum"]
        .as_array()
        .expect("enum")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        states,
        ["needs_review", "awaiting_approval", "processing", ""]
    );
}

/// A validator for one of the document's component schemas (its `$ref`s resolved in the
/// document).
fn validator(doc: &Value, name: &str) -> jsonschema::Validator {
    let schema = json!({
        "$ref": format!("#/components/schemas/{name}"),
        "components": doc["components"].clone(),
    });
    jsonschema::draft202012::new(&schema).expect("the schema compiles")
}

/// What a store answered to a body, and what the schema says of it.
fn agree(valid: bool, r: &Resp, what: &str) {
    if valid {
        assert!(
            (200..300).contains(&r.status),
            "schema-valid {what} refused: {}",
            r.text
        );
    } else {
        assert!(
            (400..500).contains(&r.status),
            "schema-invalid {what} accepted: {} {}",
            r.status,
            r.text
        );
    }
}

/// A source write the schema calls valid is created, one it calls invalid is refused: the
/// secrets' form (Standard Webhooks secrets decode), the members each provider needs, header
/// names, URLs, on both stores.
#[tokio::test]
async fn openapi_source_writes_valid_by_the_schema_are_the_ones_the_server_takes() {
    let sw = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let base = json!({"provider": "stripe", "secrets": ["s3cret"],
        "forward": {"url": "http://127.0.0.1:9/in"}});
    let with = |changes: Value| {
        let mut d = base.clone();
        for (k, v) in changes.as_object().expect("changes") {
            d[k] = v.clone();
        }
        d
    };
    let hmac = json!({"header": "X-Sig", "algorithm": "sha256", "encoding": "hex"});
    let cases: Vec<(bool, Value)> = vec![
        (true, base.clone()),
        // A secret with a control character (what schemathesis sent).
        (false, with(json!({"secrets": ["\u{1}"]}))),
        (false, with(json!({"secrets": [""]}))),
        (false, with(json!({"secrets": ["x".repeat(513)]}))),
        (true, with(json!({"secrets": ["x".repeat(512)]}))),
        // Standard Webhooks: base64 of 24 to 64 bytes, `whsec_` or not.
        (
            false,
            with(json!({"provider": "standard_webhooks", "secrets": ["s3cret"]})),
        ),
        (
            true,
            with(json!({"provider": "standard_webhooks", "secrets": [sw]})),
        ),
        (
            true,
            with(json!({"provider": "standard_webhooks", "secrets": [&sw[6..]]})),
        ),
        (
            true,
            with(json!({"provider": "github", "secrets": ["s3cret"]})),
        ),
        // hubspot and twilio sign the URL they call.
        (false, with(json!({"provider": "hubspot"}))),
        (
            false,
            with(json!({"provider": "twilio", "public_url": null})),
        ),
        (
            true,
            with(json!({"provider": "hubspot", "public_url": "https://idem.example/in/h"})),
        ),
        // hmac needs its scheme and where the id is; no other provider takes a scheme.
        (false, with(json!({"provider": "hmac", "hmac": hmac}))),
        (
            false,
            with(json!({"provider": "hmac", "event_id": {"header": "X-Id"}})),
        ),
        (
            true,
            with(json!({"provider": "hmac", "hmac": hmac, "event_id": {"header": "X-Id"}})),
        ),
        (false, with(json!({"hmac": hmac}))),
        (true, with(json!({"hmac": null}))),
        (
            false,
            with(json!({"provider": "hmac", "event_id": {"header": "X-Id"},
                "hmac": {"header": "X-Sig", "algorithm": "sha256", "encoding": "hex",
                    "signed": "timestamp.body"}})),
        ),
        // Header names are tokens; one of `header` and `pointer`.
        (false, with(json!({"event_id": {"header": ""}}))),
        (false, with(json!({"event_id": {"header": "X Id"}}))),
        (
            true,
            with(json!({"event_id": {"header": "X-Id", "pointer": null}})),
        ),
        (
            false,
            with(json!({"event_id": {"header": "X-Id", "pointer": "/id"}})),
        ),
        (
            true,
            with(json!({"event_id": {"pointer": "/"}, "split": ""})),
        ),
        (false, with(json!({"split": "id"}))),
        (
            false,
            with(json!({"forward": {"url": "http://127.0.0.1:9/in", "headers": ["a:b"]}})),
        ),
        (
            true,
            with(json!({"forward": {"url": "http://127.0.0.1:9/in", "headers": ["X-Tenant"]}})),
        ),
        // URLs: http(s), a host, no userinfo; the scheme in any case.
        (false, with(json!({"forward": {"url": ""}}))),
        (
            false,
            with(json!({"forward": {"url": "ftp://example.com/"}})),
        ),
        (false, with(json!({"forward": {"url": "http://"}}))),
        (
            false,
            with(json!({"forward": {"url": "http://u:p@example.com/"}})),
        ),
        (
            true,
            with(json!({"forward": {"url": "HTTPS://example.com:8443/a b?c#d"}})),
        ),
        (true, with(json!({"forward": {"url": "http://[::1]:9/in"}}))),
        (false, with(json!({"namespace": "a b"}))),
    ];
    for backend in backends() {
        let app = spawn_on(backend).await;
        let r = app.get("/openapi.json").await;
        let v = validator(&r.body, "SourceWrite");
        for (i, (valid, body)) in cases.iter().enumerate() {
            assert_eq!(v.is_valid(body), *valid, "case {i}: {body}");
            let r = app
                .send(
                    app.http
                        .put(format!("{}/v1/sources/s{i}", app.base))
                        .json(body),
                )
                .await;
            agree(*valid, &r, &format!("case {i} ({backend:?}): {body}"));
        }
    }
}

/// The effect body: `request` is required and not `null` (the server refuses both with 422
/// naming `request`), headers are names → values idem does not set itself, at most one body.
#[tokio::test]
async fn openapi_effect_body_requires_a_request_as_the_server_does() {
    let (app, doc) = document().await;
    let s = &doc["components"]["schemas"]["EffectBody"];
    assert!(
        s["required"]
            .as_array()
            .is_some_and(|r| r.contains(&json!("request"))),
        "{s}"
    );
    let v = validator(&doc, "EffectBody");
    let request = json!({"method": "POST", "url": "http://127.0.0.1:9/x"});
    let with = |r: Value| json!({"request": r});
    let cases = [
        json!({}),
        json!({"request": null}),
        with(json!({"method": "POST", "url": "http://u:p@example.com/"})),
        with(json!({"method": "POST", "url": "http://127.0.0.1:9/x", "headers": {"Host": "x"}})),
        with(json!({"method": "POST", "url": "http://127.0.0.1:9/x", "headers": {"a b": "x"}})),
        with(json!({"method": "POST", "url": "http://127.0.0.1:9/x", "headers": {"X": "a\nb"}})),
        with(json!({"method": "POST", "url": "http://127.0.0.1:9/x", "body": 1, "body_text": "t"})),
        with(json!({"method": "POST", "url": "http://127.0.0.1:9/x", "body_base64": "YQ"})),
        with(json!({"method": "POST", "url": "http://127.0.0.1:9/x", "body_base64": "YR=="})),
        json!({"request": request, "success": []}),
        json!({"request": request, "success": [600]}),
        json!({"request": request, "idempotency_header": "Content-Length"}),
    ];
    for (i, body) in cases.iter().enumerate() {
        assert!(!v.is_valid(body), "case {i} is schema-invalid: {body}");
        let r = app
            .post(&format!("/v1/namespaces/ns/keys/k{i}/effect"), body.clone())
            .await;
        assert_eq!(r.status, 422, "case {i}: {}", r.text);
    }
    let r = app
        .post("/v1/namespaces/ns/keys/k/effect", json!({"request": null}))
        .await;
    assert_eq!(r.problem(422, "invalid_field")["field"], "request");
    // Schema-valid, and refused only by the egress guard (loopback): the contract refusal.
    let ok = json!({"request": {"method": "PUT", "url": "http://127.0.0.1:9/x",
        "headers": {"X-Tenant": "a\tb é"}, "body_base64": "YQ=="},
        "idempotency_header": null, "success": [200, 201]});
    assert!(v.is_valid(&ok));
    let r = app.post("/v1/namespaces/ns/keys/ok/effect", ok).await;
    r.problem(422, "destination_forbidden");
}

/// `/` is the RFC 6901 pointer to the member named "": the server reads it so, and a scalar
/// event (where no pointer finds anything) is outside the schema.
#[tokio::test]
async fn openapi_derive_event_is_an_object_or_array_and_slash_is_the_empty_member() {
    let (app, doc) = document().await;
    let v = validator(&doc, "DeriveBody");
    // What schemathesis sent: `false` holds nothing a pointer can find.
    let scalar = json!({"event": false, "fields": ["/"], "prefix": "0"});
    assert!(!v.is_valid(&scalar));
    app.derive(scalar)
        .await
        .problem(422, "missing_identity_field");
    let named_empty = json!({"event": {"": "x", "a": {"": 7}}, "fields": ["/", "/a/"]});
    assert!(v.is_valid(&named_empty));
    let r = app.derive(named_empty).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["key"], "x:7");
    let r = app.derive(json!({"event": ["y"], "fields": ["/0"]})).await;
    assert_eq!(r.body["key"], "y", "{}", r.text);
    // Schema-valid, refused by the contract (documented on the operation).
    let missing = json!({"event": {"a": 1}, "fields": ["/"]});
    assert!(v.is_valid(&missing));
    assert_eq!(
        app.derive(missing)
            .await
            .problem(422, "missing_identity_field")["field"],
        "/"
    );
}

/// The operations `.ci/schemathesis.toml` lets answer 422 to schema-valid data are exactly
/// the ones whose OpenAPI description and 422 answer say what they refuse and why; the
/// refusals behind two of them are real.
#[tokio::test]
async fn openapi_documents_every_refusal_the_schemathesis_config_accepts() {
    let (app, doc) = document().await;
    let toml = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../.ci/schemathesis.toml"
    ))
    .expect(".ci/schemathesis.toml");
    let mut configured = BTreeSet::new();
    let mut current = None;
    for line in toml.lines().map(str::trim) {
        if let Some(id) = line.strip_prefix("include-operation-id = ") {
            current = Some(id.trim_matches('"').to_owned());
        } else if line.starts_with("checks.positive_data_acceptance.expected-statuses")
            && line.contains("\"422\"")
        {
            configured.insert(current.clone().expect("an operation block"));
        }
    }
    let marker = "Refused although the schema allows it (422";
    let mut documented = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("path item") {
            let description = op["description"].as_str().unwrap_or_default();
            let Some(at) = description.find(marker) else {
                continue;
            };
            // The same sentence in the 422 answer, and it names what is refused.
            let said = &description[at..];
            let r422 = op["responses"]["422"]["description"]
                .as_str()
                .unwrap_or_default();
            assert!(r422.contains(said), "{method} {path}: {r422}");
            assert!(said.len() > marker.len() + 40, "{method} {path}: {said}");
            documented.insert(op["operationId"].as_str().expect("operationId").to_owned());
        }
    }
    assert_eq!(configured, documented);
    assert_eq!(configured.len(), 8, "{configured:?}");
    // Two of them for real: a retry cap below its base, two nodes of one name.
    let patch = op(&doc, "patch", "/v1/namespaces/{ns}");
    assert!(patch["description"]
        .as_str()
        .is_some_and(|d| d.contains("`retry.max_ms` below `retry.base_ms`")));
    let r = app
        .patch_namespace(
            "ns",
            json!({"retry": {"base_ms": 316_223_999_999i64, "max_ms": 0}}),
        )
        .await;
    assert_eq!(r.problem(422, "invalid_field")["field"], "retry.max_ms");
    let audit = op(&doc, "post", "/v1/audit");
    assert!(audit["description"]
        .as_str()
        .is_some_and(|d| d.contains("same `name`")));
    let nodes = json!([{"name": "", "type": "t"}, {"name": "", "type": "u"}]);
    let r = app.post("/v1/audit", json!({"nodes": nodes})).await;
    assert_eq!(r.problem(422, "invalid_field")["field"], "nodes[1].name");
    // A claim meeting a record of another fingerprint: outcome conflict, a claim answer.
    let claim = op(&doc, "post", "/v1/namespaces/{ns}/keys/{key}/claim");
    assert!(claim["responses"]["422"]["description"]
        .as_str()
        .is_some_and(|d| d.contains("different fingerprint")));
    let f = |c: char| c.to_string().repeat(64);
    assert_eq!(
        app.claim("ns", "k", json!({"fingerprint": f('0')}))
            .await
            .status,
        201
    );
    let r = app.claim("ns", "k", json!({"fingerprint": f('1')})).await;
    assert_eq!((r.status, &r.body["outcome"]), (422, &json!("conflict")));
}
