use super::*;

fn doc() -> Value {
    json!({
        "title": "Send the follow-up",
        "description": "Sends the follow-up e-mail of an order.",
        "input_schema": {
            "type": "object",
            "properties": {
                "order_id": {"type": "string"},
                "n": {"type": "integer"},
                "to": {"type": "string"},
                "text": {"type": "string", "maxLength": 50}
            },
            "required": ["order_id", "n", "text"]
        },
        "key": "{order_id}:followup:{n}",
        "deliver": {"http": {
            "method": "POST",
            "url": "https://mail.example/orders/{{order_id}}/send",
            "headers": {"Authorization": "Bearer s3cr3t-value-1234"},
            "body": {"to": "{{to}}", "subject": "Order {{order_id}}", "text": "{{text}}"}
        }}
    })
}

fn field_of(v: Value) -> String {
    match Action::parse("send_followup", &v) {
        Ok(_) => "ok".into(),
        Err(ApiError::InvalidField { field, message }) => {
            assert!(!message.contains("s3cr3t"), "{message}");
            field
        }
        Err(ApiError::UnknownField { field }) => format!("unknown:{field}"),
        Err(e) => format!("{e:?}"),
    }
}

fn with(path: &str, v: Value) -> Value {
    let mut d = doc();
    let mut at = &mut d;
    let parts: Vec<&str> = path.split('.').collect();
    for p in &parts[..parts.len() - 1] {
        at = &mut at[*p];
    }
    at[parts[parts.len() - 1]] = v;
    d
}

#[test]
fn a_valid_action_reads_and_keeps_no_header_value() {
    let a = Action::parse("send_followup", &doc()).expect("valid");
    assert_eq!(a.action.key_args, ["order_id", "n"]);
    assert_eq!(a.action.identity, ["order_id", "n"]);
    assert_eq!(a.action.approval, Approval::None);
    assert!(!a.action.doc.to_string().contains("s3cr3t"));
    assert!(a.headers.to_secret_text().contains("s3cr3t"));
    assert!(!format!("{:?}", a.headers).contains("s3cr3t"));
    let back = Headers::from_secret_text(&a.headers.to_secret_text());
    assert_eq!(back, a.headers);
    assert_eq!(
        Headers::hints(&a.headers.request),
        json!({"Authorization": "1234"})
    );
}

#[test]
fn invalid_actions_name_the_member() {
    for (v, want) in [
        (with("description", json!(null)), "description"),
        (with("description", json!("x".repeat(4001))), "description"),
        (
            with("input_schema", json!({"type": "string"})),
            "input_schema",
        ),
        (
            with(
                "input_schema",
                json!({"type": "object", "minProperties": "x"}),
            ),
            "input_schema",
        ),
        (with("key", json!("static")), "key"),
        (with("key", json!("{to}:x")), "key"),
        (with("key", json!("{text}:{missing}")), "key"),
        (with("key", json!("{order_id} x")), "key"),
        (with("key", json!("{order_id")), "key"),
        (with("identity", json!(["nope"])), "identity[0]"),
        (with("approval", json!("maybe")), "approval"),
        (with("result", json!("all")), "result"),
        (with("deliver", json!({})), "deliver"),
        (
            with(
                "deliver",
                json!({"http": {"method": "POST", "url": "https://x.example/"},
                                    "mcp": {"url": "https://y.example/mcp", "tool": "t"}}),
            ),
            "deliver",
        ),
        (
            with("deliver.http.method", json!("GET")),
            "deliver.http.method",
        ),
        (
            with("deliver.http.url", json!("ftp://x/")),
            "deliver.http.url",
        ),
        (
            with("deliver.http.timeout_ms", json!(0)),
            "deliver.http.timeout_ms",
        ),
        (
            with("deliver.http.headers", json!({"X-A": 1})),
            "deliver.http.headers.X-A",
        ),
        (with("deliver.http.body", json!("{{nope}}")), "deliver.http"),
        (
            with("deliver.http.extra", json!(1)),
            "unknown:deliver.http.extra",
        ),
        (with("extra", json!(1)), "unknown:extra"),
    ] {
        assert_eq!(field_of(v.clone()), want, "{v}");
    }
    assert!(matches!(
        Action::parse("bad name", &doc()),
        Err(ApiError::InvalidField { .. })
    ));
}

#[test]
fn an_mcp_delivery_is_validated_and_keeps_its_header_values_apart() {
    let mcp = |m: Value| {
        let mut d = doc();
        d["deliver"] = json!({"mcp": m});
        d
    };
    let ok = mcp(
        json!({"url": "https://mail.example/mcp", "tool": "send_mail",
                        "headers": {"Authorization": "Bearer s3cr3t-1234"},
                        "timeout_ms": 2000}),
    );
    let a = Action::parse("mail", &ok).expect("valid");
    assert!(a.action.http.is_none());
    assert_eq!(a.action.doc["deliver"]["mcp"]["tool"], "send_mail");
    assert!(!a.action.doc.to_string().contains("s3cr3t"));
    assert_eq!(
        a.headers.request.get("Authorization"),
        Some(&json!("Bearer s3cr3t-1234"))
    );
    let m = a.action.mcp.as_ref().expect("mcp");
    assert_eq!(upstream_tool(m), Some("send_mail"));
    let args = json!({"order_id": "847", "n": 1});
    let body = mcp_effect_body(m, &a.headers, args.as_object().expect("obj"));
    assert_eq!(body["request"]["body"], args);
    assert_eq!(body["request"]["method"], "POST");
    assert_eq!(body["timeout_ms"], 2000);
    assert_eq!(body["destination_idempotent"], false);
    for (m, want) in [
        (json!({"tool": "t"}), "deliver.mcp.url"),
        (json!({"url": "ftp://x/", "tool": "t"}), "deliver.mcp.url"),
        (json!({"url": "https://x.example/mcp"}), "deliver.mcp.tool"),
        (
            json!({"url": "https://x.example/mcp", "tool": "a b"}),
            "deliver.mcp.tool",
        ),
        (
            json!({"url": "https://x.example/mcp", "tool": "t", "timeout_ms": 0}),
            "deliver.mcp.timeout_ms",
        ),
        (
            json!({"url": "https://x.example/mcp", "tool": "t",
                   "headers": {"Mcp-Session-Id": "s3cr3t"}}),
            "deliver.mcp.headers.Mcp-Session-Id",
        ),
        (
            json!({"url": "https://x.example/mcp", "tool": "t", "headers": {"X": 1}}),
            "deliver.mcp.headers.X",
        ),
        (
            json!({"url": "https://x.example/mcp", "tool": "t", "method": "GET"}),
            "unknown:deliver.mcp.method",
        ),
    ] {
        assert_eq!(field_of(mcp(m.clone())), want, "{m}");
    }
}

#[test]
fn the_key_keeps_plain_values_and_hashes_the_rest() {
    let a = Action::parse("send_followup", &doc())
        .expect("valid")
        .action;
    let args = json!({"order_id": "847", "n": 1, "text": "hi"});
    let m = args.as_object().expect("obj");
    assert_eq!(a.key_for(m).expect("key").as_str(), "847:followup:1");
    let mail = json!({"order_id": "ann@example.com", "n": 1, "text": "hi"});
    let k = a.key_for(mail.as_object().expect("obj")).expect("key");
    assert!(!k.as_str().contains('@'), "{k:?}");
    assert_eq!(k.as_str().len(), 64 + ":followup:1".len());
    // An integer argument written as an integral float is that integer: one key, not a hash
    // that would let the same call through twice.
    for n in [
        json!(1.0),
        json!(1e0),
        serde_json::from_str::<Value>("1.000").expect("n"),
    ] {
        let args = json!({"order_id": "847", "n": n, "text": "hi"});
        let k = a.key_for(args.as_object().expect("obj")).expect("key");
        assert_eq!(k.as_str(), "847:followup:1", "{n}");
    }
    let zero = json!({"order_id": "847", "n": serde_json::from_str::<Value>("-0").expect("n")});
    let k = a.key_for(zero.as_object().expect("obj")).expect("key");
    assert_eq!(k.as_str(), "847:followup:0");
    let half = json!({"order_id": "847", "n": 1.5});
    let k = a.key_for(half.as_object().expect("obj")).expect("key");
    assert_eq!(k.as_str().len(), 64 + ":followup:".len() + 3, "{k:?}");
}

#[test]
fn identity_is_checked_first_and_other_text_does_not_change_it() {
    let a = Action::parse("send_followup", &doc())
        .expect("valid")
        .action;
    let m = |v: Value| v.as_object().cloned().expect("obj");
    assert_eq!(a.missing_identity(&m(json!({"n": 1}))), Some("order_id"));
    assert_eq!(
        a.missing_identity(&m(json!({"order_id": "", "n": 1}))),
        Some("order_id")
    );
    assert_eq!(
        a.missing_identity(&m(json!({"order_id": "1", "n": null}))),
        Some("n")
    );
    let one = a.identity_of(&m(json!({"order_id": "1", "n": 2, "text": "a"})));
    let two = a.identity_of(&m(json!({"order_id": "1", "n": 2, "text": "b"})));
    assert_eq!(one, two);
    assert_eq!(one, json!({"n": 2, "order_id": "1"}));
}

#[test]
fn arguments_are_validated_naming_the_member_without_its_value() {
    let a = Action::parse("send_followup", &doc())
        .expect("valid")
        .action;
    let (f, msg) = a
        .check_arguments(&json!({"order_id": "1", "n": 1, "text": "s3cr3t".repeat(20)}))
        .expect_err("too long");
    assert_eq!(f, "text");
    assert!(!msg.contains("s3cr3t"), "{msg}");
    let (f, _) = a
        .check_arguments(&json!({"order_id": "1", "n": "x", "text": "t"}))
        .expect_err("type");
    assert_eq!(f, "n");
    assert!(a
        .check_arguments(&json!({"order_id": "1", "n": 1, "text": "t"}))
        .is_ok());
}

#[test]
fn placeholders_take_the_value_or_its_text() {
    let args = json!({"id": "a b/c", "n": 3, "o": {"x": 1}});
    let m = args.as_object().expect("obj");
    assert_eq!(fill(&json!("{{n}}"), m, false), json!(3));
    assert_eq!(fill(&json!("{{o}}"), m, false), json!({"x": 1}));
    assert_eq!(
        fill(&json!("n={{n}}, id={{id}}"), m, false),
        json!("n=3, id=a b/c")
    );
    assert_eq!(
        fill(&json!("https://x.example/o/{{id}}"), m, true),
        json!("https://x.example/o/a%20b%2Fc")
    );
    assert_eq!(fill(&json!("{{missing}}"), m, false), Value::Null);
    assert_eq!(
        fill(&json!([{"k": "{{id}}"}]), m, false),
        json!([{"k": "a b/c"}])
    );
}

#[test]
fn the_effect_body_is_what_an_effect_would_be_sent() {
    let a = Action::parse("send_followup", &doc()).expect("valid");
    let args = json!({"order_id": "847", "n": 1, "to": "ann@example.com", "text": "Hello"});
    let body = effect_body(
        a.action.http.as_ref().expect("http"),
        &a.headers,
        args.as_object().expect("obj"),
    );
    assert_eq!(
        body["request"]["url"],
        "https://mail.example/orders/847/send"
    );
    assert_eq!(
        body["request"]["body"],
        json!({"to": "ann@example.com", "subject": "Order 847", "text": "Hello"})
    );
    assert_eq!(
        body["request"]["headers"]["Authorization"],
        "Bearer s3cr3t-value-1234"
    );
    read_body::<EffectBody>(body)
        .and_then(EffectBody::into_input)
        .expect("an effect");
}

#[test]
fn effect_errors_are_renamed_to_the_delivery_members_in_field_and_message() {
    let e = || ApiError::InvalidField {
        field: "request.url".into(),
        message: "`request.url` bad; `request` odd; `timeout_ms` low; `reconcile.url` far; \
                  `success` empty; `idempotency_header` long; `reconcile` kept"
            .into(),
    };
    let ApiError::InvalidField { field, message } = as_http_error(e()) else {
        panic!("not an invalid_field");
    };
    assert_eq!(field, "deliver.http.url");
    assert_eq!(
        message,
        "`deliver.http.url` bad; `deliver.http` odd; `deliver.http.timeout_ms` low; \
         `deliver.http.reconcile.url` far; `deliver.http.success` empty; \
         `deliver.http.idempotency_header` long; `reconcile` kept"
    );
    let ApiError::InvalidField { field, message } = as_mcp_error(e()) else {
        panic!("not an invalid_field");
    };
    assert_eq!(field, "deliver.mcp.url");
    assert_eq!(
        message,
        "`deliver.mcp.url` bad; `deliver.mcp` odd; `deliver.mcp.timeout_ms` low; \
         `reconcile.url` far; `success` empty; `idempotency_header` long; `reconcile` kept"
    );
    let ApiError::UnknownField { field } = as_mcp_error(ApiError::UnknownField {
        field: "extra".into(),
    }) else {
        panic!("not an unknown_field");
    };
    assert_eq!(field, "deliver.mcp.extra");
}
