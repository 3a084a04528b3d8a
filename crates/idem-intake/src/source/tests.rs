use super::*;

const FWD: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn stripe() -> Value {
    json!({"provider": "stripe", "secrets": ["whsec_abc123456789"],
               "forward": {"url": "http://127.0.0.1:5678/webhook/x"}})
}

fn fwd(s: &Source) -> &Forward {
    s.forward.as_ref().expect("forward")
}

fn err(doc: Value) -> SourceError {
    SourceInput::parse("pay", &doc).expect_err("refused")
}

#[test]
fn defaults_are_filled_in() {
    let i = SourceInput::parse("pay", &stripe()).expect("valid");
    let s = &i.source;
    assert_eq!(s.namespace(), "pay");
    assert_eq!(s.tolerance_ms, 300_000);
    assert_eq!(fwd(s).timeout_ms, 10_000);
    assert_eq!(fwd(s).concurrency, 4);
    assert_eq!(fwd(s).retry, DEFAULT_RETRY);
    assert_eq!(s.max_body_bytes, 1 << 20);
    assert_eq!(s.split(), None);
    assert_eq!(s.forward_headers(), ["Stripe-Signature"]);
    let no_hints = BTreeMap::new();
    let read = shape(s.read_shape(&["6789".into()], &no_hints, String::new(), String::new()));
    assert_eq!(read["event_id"], json!({"pointer": "/id"}));
    assert_eq!(read["secret_hints"], json!(["6789"]));
    assert_eq!(read["forward"]["secret_hint"], json!(null));
    assert!(!read.to_string().contains("abc123456789"));
}

#[test]
fn the_stored_form_reads_back_and_holds_no_secret() {
    let mut doc = stripe();
    doc["forward"]["secret"] = json!(FWD);
    doc["event_id"] = json!({"header": "X-Id"});
    let i = SourceInput::parse("pay", &doc).expect("valid");
    let stored = i.source.to_stored();
    assert!(!stored.to_string().contains("whsec"), "{stored}");
    assert_eq!(Source::load("pay", &stored).expect("load"), i.source);
    assert_eq!(i.secrets.forward_secret, Some(Some(FWD.into())));
    assert!(!format!("{:?}", i.secrets).contains("whsec"));
}

#[test]
fn unknown_and_invalid_fields_are_named() {
    let mut d = stripe();
    d["nope"] = json!(1);
    assert_eq!(
        err(d),
        SourceError::Unknown {
            field: "nope".into()
        }
    );
    let mut d = stripe();
    d["forward"]["retry"] = json!({"tries": 3});
    assert_eq!(err(d).field(), "forward.retry.tries");
    let mut d = stripe();
    d["provider"] = json!("paypal");
    assert_eq!(err(d).field(), "provider");
    let mut d = stripe();
    d["secrets"] = json!([]);
    assert_eq!(err(d).field(), "secrets");
    let mut d = stripe();
    d["secrets"] = json!(["a", "b", "c", "d", "e"]);
    assert_eq!(err(d).field(), "secrets");
    let mut d = stripe();
    d["secrets"] = json!(["ok", 5]);
    assert_eq!(err(d).field(), "secrets[1]");
    let mut d = stripe();
    d.as_object_mut().expect("obj").remove("secrets");
    assert_eq!(err(d).field(), "secrets");
    let mut d = stripe();
    d["forward"]["url"] = json!("ftp://x/");
    assert_eq!(err(d).field(), "forward.url");
    let mut d = stripe();
    d["forward"]["secret"] = json!("plain");
    let e = err(d);
    assert_eq!(e.field(), "forward.secret");
    assert!(!e.to_string().contains("plain"), "{e}");
    let mut d = stripe();
    d["split"] = json!("items");
    assert_eq!(err(d).field(), "split");
    // The framing and connection headers are the delivery's own, never the inbound ones.
    for h in [
        "Content-Length",
        "host",
        "Transfer-Encoding",
        "Connection",
        "Keep-Alive",
    ] {
        let mut d = stripe();
        d["forward"]["headers"] = json!(["X-GitHub-Event", h]);
        assert_eq!(err(d).field(), "forward.headers[1]", "{h}");
    }
    let mut d = stripe();
    d["forward"]["headers"] = json!(["X-GitHub-Event", "Authorization"]);
    assert!(SourceInput::parse("pay", &d).is_ok());
    // A `~` that is not `~0` or `~1` names nothing (RFC 6901): refused when written, not
    // found to hold every event later.
    for (field, bad) in [("split", "/items~2"), ("event_id.pointer", "/id~")] {
        let mut d = stripe();
        if field == "split" {
            d["split"] = json!(bad);
        } else {
            d["event_id"] = json!({"pointer": bad});
        }
        assert_eq!(err(d).field(), field, "{bad}");
    }
    let mut d = stripe();
    d["event_id"] = json!({"header": "X", "pointer": "/id"});
    assert_eq!(err(d).field(), "event_id");
    let mut d = stripe();
    d["hmac"] = json!({"header": "X"});
    assert_eq!(err(d).field(), "hmac");
    let mut d = stripe();
    d["forward"]["retry"] = json!({"base_ms": 10, "max_ms": 5});
    assert_eq!(err(d).field(), "forward.retry.max_ms");
    let mut d = stripe();
    d["tolerance_ms"] = json!("5m");
    assert_eq!(err(d).field(), "tolerance_ms");
}

#[test]
fn providers_that_sign_the_url_need_public_url_and_hmac_needs_its_scheme() {
    for p in ["twilio", "hubspot"] {
        let mut d = stripe();
        d["provider"] = json!(p);
        assert_eq!(err(d.clone()).field(), "public_url");
        d["public_url"] = json!("https://hooks.example.com/in/pay");
        let i = SourceInput::parse("pay", &d).expect("valid");
        if p == "hubspot" {
            assert_eq!(i.source.split(), Some(""));
        }
    }
    let mut d = stripe();
    d["provider"] = json!("hmac");
    d["event_id"] = json!({"pointer": "/id"});
    assert_eq!(err(d.clone()).field(), "hmac");
    d["hmac"] = json!({"header": "X-Sig", "algorithm": "sha256", "encoding": "hex",
                           "signed": "timestamp.body"});
    assert_eq!(err(d.clone()).field(), "hmac.timestamp_header");
    d["hmac"]["timestamp_header"] = json!("X-Ts");
    let i = SourceInput::parse("pay", &d).expect("valid");
    assert_eq!(
        i.source.hmac.expect("hmac").signed,
        HmacSigned::TimestampBody
    );
    d.as_object_mut().expect("obj").remove("event_id");
    assert_eq!(err(d).field(), "event_id");
}

#[test]
fn patch_merges_recursively_and_completes_retry() {
    let mut d = stripe();
    d["forward"]["retry"] = json!({"max_attempts": 3, "base_ms": 10});
    d["forward"]["concurrency"] = json!(2);
    let s = SourceInput::parse("pay", &d).expect("valid").source;
    assert_eq!(fwd(&s).retry.max_ms, DEFAULT_RETRY.max_ms);
    let p = s
        .patch(&json!({"forward": {"retry": {"max_attempts": 5}}, "tolerance_ms": 1000}))
        .expect("patch");
    assert_eq!(fwd(&p.source).retry.max_attempts, 5);
    assert_eq!(fwd(&p.source).retry.base_ms, 10);
    assert_eq!(fwd(&p.source).concurrency, 2);
    assert_eq!(p.source.tolerance_ms, 1000);
    assert_eq!(p.secrets, SourceSecrets::default());
    let p = s
        .patch(&json!({"secrets": ["new-secret-1"], "forward": {"secret": FWD}}))
        .expect("patch");
    assert_eq!(p.secrets.secrets, Some(vec!["new-secret-1".to_owned()]));
    assert_eq!(p.secrets.forward_secret, Some(Some(FWD.into())));
    let p = s
        .patch(&json!({"forward": {"secret": null}}))
        .expect("patch");
    assert_eq!(p.secrets.forward_secret, Some(None));
    let p = s.patch(&json!({"tolerance_ms": null})).expect("patch");
    assert_eq!(p.source.tolerance_ms, DEFAULT_TOLERANCE_MS);
    assert_eq!(
        s.patch(&json!({"forward": {"bogus": 1}}))
            .expect_err("unknown")
            .field(),
        "forward.bogus"
    );
    assert_eq!(
        s.patch(&json!({"secrets": []})).expect_err("empty").field(),
        "secrets"
    );
}

#[test]
fn a_read_shape_sent_back_names_its_own_source_only() {
    let mut d = stripe();
    d["source"] = json!("pay");
    assert!(SourceInput::parse("pay", &d).is_ok());
    d["source"] = json!("other");
    assert_eq!(err(d).field(), "source");
}

fn fanout() -> Value {
    json!({"provider": "stripe", "secrets": ["whsec_abc123456789"],
               "forwards": {
                   "crm": {"url": "http://127.0.0.1:5678/webhook/crm"},
                   "receipt": {"url": "http://127.0.0.1:5678/webhook/receipt",
                               "filter": {"pointer": "/type", "in": ["invoice.paid"]},
                               "secret": FWD},
                   "slack": {"url": "http://127.0.0.1:5678/webhook/slack",
                             "filter": {"header": "X-Mode", "in": ["live"]},
                             "rate": {"per_second": 2}}}})
}

#[test]
fn named_destinations_parse_store_and_read_back() {
    let i = SourceInput::parse("pay", &fanout()).expect("valid");
    let s = &i.source;
    assert!(s.forward.is_none());
    let names: Vec<&str> = s.destinations().iter().map(|(n, _)| *n).collect();
    assert_eq!(names, ["crm", "receipt", "slack"]);
    assert_eq!(
        s.destination("slack").and_then(|f| f.rate),
        Some(Rate {
            per_second: Some(2),
            per_minute: None
        })
    );
    assert_eq!(
        i.secrets.destination_secrets.get("receipt"),
        Some(&Some(FWD.to_owned()))
    );
    let stored = s.to_stored();
    assert!(!stored.to_string().contains("whsec"), "{stored}");
    assert_eq!(&Source::load("pay", &stored).expect("load"), s);
    let hints = BTreeMap::from([("receipt".to_owned(), "aSw".to_owned())]);
    let read = shape(s.read_shape(&[], &hints, String::new(), String::new()));
    assert_eq!(read["forward"], json!(null));
    assert_eq!(read["forwards"]["receipt"]["secret_hint"], json!("aSw"));
    assert_eq!(read["forwards"]["crm"]["secret_hint"], json!(null));
    assert_eq!(
        read["forwards"]["slack"]["filter"],
        json!({"header": "x-mode", "in": ["live"]})
    );
    assert_eq!(read["forwards"]["slack"]["rate"], json!({"per_second": 2}));
    // `forward` beside `forwards` is the destination default, listed first.
    let mut d = fanout();
    d["forward"] = json!({"url": "http://127.0.0.1:5678/webhook/all"});
    let s = SourceInput::parse("pay", &d).expect("valid").source;
    assert_eq!(s.destinations()[0].0, "default");
    // `forwards.default` is the same destination.
    let mut d = fanout();
    d["forwards"]["default"] = json!({"url": "http://127.0.0.1:5678/webhook/all"});
    let s2 = SourceInput::parse("pay", &d).expect("valid").source;
    assert_eq!(s2, s);
}

#[test]
fn bad_destinations_are_named() {
    let mut d = stripe();
    d.as_object_mut().expect("obj").remove("forward");
    assert_eq!(err(d.clone()).field(), "forward");
    d["forwards"] = json!({});
    assert_eq!(err(d).field(), "forward");
    let mut d = fanout();
    d["forwards"]["bad name!"] = json!({"url": "http://x/"});
    assert_eq!(err(d).field(), "forwards.bad name!");
    let mut d = fanout();
    d["forwards"]["crm"]["url"] = json!("ftp://x/");
    assert_eq!(err(d).field(), "forwards.crm.url");
    let mut d = fanout();
    d["forwards"]["crm"]["filter"] = json!({"pointer": "/type"});
    assert_eq!(err(d).field(), "forwards.crm.filter.in");
    let mut d = fanout();
    d["forwards"]["crm"]["filter"] = json!({"pointer": "/t", "header": "X", "in": [1]});
    assert_eq!(err(d).field(), "forwards.crm.filter");
    let mut d = fanout();
    d["forwards"]["crm"]["filter"] = json!({"header": "X", "in": [1]});
    assert_eq!(err(d).field(), "forwards.crm.filter.in[0]");
    let mut d = fanout();
    d["forwards"]["crm"]["rate"] = json!({});
    assert_eq!(err(d).field(), "forwards.crm.rate");
    let mut d = fanout();
    d["forwards"]["crm"]["rate"] = json!({"per_second": 0});
    assert_eq!(err(d).field(), "forwards.crm.rate.per_second");
    let mut d = fanout();
    d["forwards"]["crm"]["secret"] = json!("plain-text-secret");
    let e = err(d);
    assert_eq!(e.field(), "forwards.crm.secret");
    assert!(!e.to_string().contains("plain-text"), "{e}");
    let mut d = fanout();
    d["forwards"]["crm"]["bogus"] = json!(1);
    assert_eq!(err(d).field(), "forwards.crm.bogus");
    let mut d = fanout();
    d["forward"] = json!({"url": "http://x/"});
    d["forwards"]["default"] = json!({"url": "http://y/"});
    assert_eq!(err(d).field(), "forwards.default");
    let mut d = fanout();
    let many: Map<String, Value> = (0..17)
        .map(|i| (format!("d{i}"), json!({"url": "http://x/"})))
        .collect();
    d["forwards"] = Value::Object(many);
    assert_eq!(err(d).field(), "forwards");
}

#[test]
fn patch_adds_changes_and_removes_destinations() {
    let s = SourceInput::parse("pay", &stripe()).expect("valid").source;
    let p = s
        .patch(&json!({"forwards": {"crm": {"url": "http://127.0.0.1:1/crm", "secret": FWD}}}))
        .expect("patch");
    assert!(p.source.forward.is_some());
    assert!(p.source.forwards.contains_key("crm"));
    assert_eq!(
        p.secrets.destination_secrets.get("crm"),
        Some(&Some(FWD.to_owned()))
    );
    let s = p.source;
    let p = s
        .patch(&json!({"forwards": {"crm": {"timeout_ms": 500}}}))
        .expect("patch");
    assert_eq!(p.source.forwards["crm"].timeout_ms, 500);
    assert_eq!(p.source.forwards["crm"].url, "http://127.0.0.1:1/crm");
    let p = s.patch(&json!({"forwards": {"crm": null}})).expect("patch");
    assert!(p.source.forwards.is_empty());
    // The last destination cannot go.
    assert_eq!(
        p.source
            .patch(&json!({"forward": null}))
            .expect_err("none left")
            .field(),
        "forward"
    );
}

/// A read shape as the JSON it answers.
fn shape(read: SourceRead) -> Value {
    serde_json::to_value(read).expect("a read shape is JSON")
}
