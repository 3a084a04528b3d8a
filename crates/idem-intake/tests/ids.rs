//! Event ids, keys, batch splitting and Slack's challenge.

mod common;

use common::headers;
use http::{HeaderMap, HeaderValue};
use idem_intake::{
    held_key, key_for_event_id, read_events, slack_challenge, valid_pointer, EventIdRule,
    IncomingEvent, Provider,
};
use sha2::{Digest, Sha256};

fn sha(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

fn one(p: Provider, h: &HeaderMap, body: &[u8]) -> IncomingEvent {
    let mut v = read_events(p, None, p.default_split(), h, body);
    assert_eq!(v.len(), 1, "{p:?}");
    v.remove(0)
}

fn ids(v: &[IncomingEvent]) -> Vec<Option<&str>> {
    v.iter().map(|e| e.event_id.as_deref()).collect()
}

#[test]
fn keys_are_the_id_or_its_hash() {
    assert_eq!(key_for_event_id("evt_1"), "evt_1");
    let max = "k".repeat(255);
    assert_eq!(key_for_event_id(&max), max);
    let long = "k".repeat(256);
    assert_eq!(
        key_for_event_id(&long),
        format!("sha256:{}", sha(long.as_bytes()))
    );
    for odd in ["with space", "zoë", "tab\t", ""] {
        assert_eq!(
            key_for_event_id(odd),
            format!("sha256:{}", sha(odd.as_bytes())),
            "{odd:?}"
        );
    }
    assert_eq!(held_key(b"raw"), format!("body-sha256:{}", sha(b"raw")));
    // An id shaped like a derived key is hashed as well: no collisions with derived keys.
    for derived in [format!("sha256:{}", sha(b"x")), held_key(b"x")] {
        assert_eq!(
            key_for_event_id(&derived),
            format!("sha256:{}", sha(derived.as_bytes()))
        );
    }
    // Every key produced is a valid idem key.
    for id in ["a", &long, "zoë", "with space"] {
        assert!(idem_core::ids::Key::try_from(key_for_event_id(id)).is_ok());
    }
    assert!(idem_core::ids::Key::try_from(held_key(b"")).is_ok());
}

#[test]
fn provider_defaults() {
    let none = HeaderMap::new();
    let e = one(Provider::Stripe, &none, br#"{"id":"evt_1","type":"x"}"#);
    assert_eq!(
        (e.event_id.as_deref(), e.key.as_str()),
        (Some("evt_1"), "evt_1")
    );
    assert_eq!(
        e.body, br#"{"id":"evt_1","type":"x"}"#,
        "the raw body, not re-serialized"
    );
    let e = one(
        Provider::Slack,
        &none,
        br#"{"event_id":"Ev01","type":"event_callback"}"#,
    );
    assert_eq!(e.event_id.as_deref(), Some("Ev01"));
    let e = one(
        Provider::Typeform,
        &none,
        br#"{"event_id":"01H","form_response":{}}"#,
    );
    assert_eq!(e.event_id.as_deref(), Some("01H"));

    let h = headers(&[("webhook-id", "msg_1"), ("svix-id", "msg_2")]);
    assert_eq!(
        one(Provider::StandardWebhooks, &h, b"{}")
            .event_id
            .as_deref(),
        Some("msg_1")
    );
    let h = headers(&[("svix-id", "msg_2")]);
    assert_eq!(
        one(Provider::StandardWebhooks, &h, b"{}")
            .event_id
            .as_deref(),
        Some("msg_2")
    );
    // An empty `webhook-id` was what got signed: the unsigned `svix-id` does not stand in.
    let h = headers(&[("webhook-id", ""), ("svix-id", "msg_2")]);
    assert!(one(Provider::StandardWebhooks, &h, b"{}").held());
    let h = headers(&[("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958")]);
    assert_eq!(
        one(Provider::Github, &h, b"{}").event_id.as_deref(),
        Some("72d3162e-cc78-11e3-81ab-4c9367dc0958")
    );
    let h = headers(&[("X-Shopify-Webhook-Id", "b54557e4")]);
    assert_eq!(
        one(Provider::Shopify, &h, b"{}").event_id.as_deref(),
        Some("b54557e4")
    );

    // Twilio: the idempotency token, else MessageSid, else CallSid.
    let form = b"AccountSid=AC1&MessageSid=SM1&CallSid=CA1";
    let h = headers(&[("I-Twilio-Idempotency-Token", "tok-1")]);
    assert_eq!(
        one(Provider::Twilio, &h, form).event_id.as_deref(),
        Some("tok-1")
    );
    assert_eq!(
        one(Provider::Twilio, &none, form).event_id.as_deref(),
        Some("SM1")
    );
    assert_eq!(
        one(Provider::Twilio, &none, b"CallSid=CA1&From=%2B1")
            .event_id
            .as_deref(),
        Some("CA1")
    );
    assert!(one(Provider::Twilio, &none, b"From=%2B1").held());

    // `hmac` has no default id: held without a rule.
    let e = one(Provider::Hmac, &none, br#"{"id":"x"}"#);
    assert!(e.held());
    assert_eq!(e.key, held_key(br#"{"id":"x"}"#));
}

#[test]
fn explicit_rules_override_the_default() {
    let h = headers(&[("X-Event", "ev-9")]);
    let body = br#"{"id":"evt_1","meta":{"uid":42,"a/b":"slash","t~":"tilde"}}"#;
    let rule = |r: EventIdRule| read_events(Provider::Stripe, Some(&r), None, &h, body);
    assert_eq!(
        ids(&rule(EventIdRule::Header("x-event".into()))),
        [Some("ev-9")]
    );
    assert_eq!(
        ids(&rule(EventIdRule::Header("X-Event".into()))),
        [Some("ev-9")]
    );
    assert_eq!(ids(&rule(EventIdRule::Header("not a name".into()))), [None]);
    assert_eq!(
        ids(&rule(EventIdRule::Pointer("/meta/uid".into()))),
        [Some("42")]
    );
    assert_eq!(
        ids(&rule(EventIdRule::Pointer("/meta/a~1b".into()))),
        [Some("slash")]
    );
    assert_eq!(
        ids(&rule(EventIdRule::Pointer("/meta/t~0".into()))),
        [Some("tilde")]
    );
    assert_eq!(ids(&rule(EventIdRule::Pointer("/missing".into()))), [None]);
    assert_eq!(ids(&rule(EventIdRule::Header("x-missing".into()))), [None]);
    // The whole document as the id only when it is a string or integer.
    let v = read_events(
        Provider::Hmac,
        Some(&EventIdRule::Pointer(String::new())),
        None,
        &h,
        b"\"doc-id\"",
    );
    assert_eq!(ids(&v), [Some("doc-id")]);
    let v = read_events(
        Provider::Hmac,
        Some(&EventIdRule::Pointer(String::new())),
        None,
        &h,
        b"{}",
    );
    assert_eq!(ids(&v), [None]);
}

#[test]
fn ids_of_every_json_type() {
    let cases: [(&[u8], Option<&str>); 12] = [
        (br#"{"id":"evt"}"#, Some("evt")),
        (br#"{"id":17}"#, Some("17")),
        (br#"{"id":-3}"#, Some("-3")),
        (
            br#"{"id":18446744073709551615}"#,
            Some("18446744073709551615"),
        ),
        (br#"{"id":1.5}"#, None),
        (br#"{"id":1e3}"#, None),
        (br#"{"id":""}"#, None),
        (br#"{"id":true}"#, None),
        (br#"{"id":null}"#, None),
        (br#"{"id":{"a":1}}"#, None),
        (br#"{"id":["a"]}"#, None),
        (b"not json at all", None),
    ];
    for (body, want) in cases {
        let e = one(Provider::Stripe, &HeaderMap::new(), body);
        assert_eq!(
            e.event_id.as_deref(),
            want,
            "{}",
            String::from_utf8_lossy(body)
        );
        match want {
            Some(id) => assert_eq!(e.key, id),
            None => assert_eq!(e.key, held_key(body)),
        }
        assert_eq!(e.body, body);
    }
}

#[test]
fn header_ids_that_are_not_one_utf8_value_are_no_id() {
    let mut h = HeaderMap::new();
    h.append("x-github-delivery", HeaderValue::from_static("a"));
    h.append("x-github-delivery", HeaderValue::from_static("b"));
    assert!(one(Provider::Github, &h, b"{}").held());
    let h = headers(&[("x-github-delivery", "")]);
    assert!(one(Provider::Github, &h, b"{}").held());
    let mut h = HeaderMap::new();
    h.insert(
        "x-github-delivery",
        HeaderValue::from_bytes(b"\xff\xfe").expect("obs-text"),
    );
    assert!(one(Provider::Github, &h, b"{}").held());
    // UTF-8 beyond ASCII is an id, keyed by its hash.
    let mut h = HeaderMap::new();
    h.insert(
        "x-github-delivery",
        HeaderValue::from_bytes("zoë".as_bytes()).expect("utf8"),
    );
    let e = one(Provider::Github, &h, b"{}");
    assert_eq!(e.event_id.as_deref(), Some("zoë"));
    assert_eq!(e.key, format!("sha256:{}", sha("zoë".as_bytes())));
}

#[test]
fn hubspot_batches_split_into_compact_elements() {
    let body = br#"[ {"eventId": 100, "subscriptionType": "contact.creation"},
                     {"eventId": "101"},
                     {"objectId": 5} ]"#;
    let v = read_events(
        Provider::Hubspot,
        None,
        Provider::Hubspot.default_split(),
        &HeaderMap::new(),
        body,
    );
    assert_eq!(ids(&v), [Some("100"), Some("101"), None]);
    assert_eq!(
        v[0].body,
        br#"{"eventId":100,"subscriptionType":"contact.creation"}"#
    );
    assert_eq!(v[1].body, br#"{"eventId":"101"}"#);
    assert_eq!(v[2].body, br#"{"objectId":5}"#);
    assert_eq!(
        v[2].key,
        held_key(br#"{"objectId":5}"#),
        "held under the stored element"
    );
    // `"/"` is the document too.
    let slash = read_events(Provider::Hubspot, None, Some("/"), &HeaderMap::new(), body);
    assert_eq!(slash, v);
    // An empty batch is held whole, like anything else that cannot be split.
    let v = read_events(Provider::Hubspot, None, Some(""), &HeaderMap::new(), b"[]");
    assert_eq!(v.len(), 1);
    assert!(v[0].held());
    assert_eq!(
        (v[0].body.as_slice(), v[0].key.clone()),
        (&b"[]"[..], held_key(b"[]"))
    );
}

#[test]
fn split_at_a_pointer_and_what_cannot_be_split_is_held() {
    let body = br#"{"batch":{"items":[{"id":"a"},{"id":"b","x":[1, 2]}]}}"#;
    let v = read_events(
        Provider::Stripe,
        None,
        Some("/batch/items"),
        &HeaderMap::new(),
        body,
    );
    assert_eq!(ids(&v), [Some("a"), Some("b")]);
    assert_eq!(v[1].body, br#"{"id":"b","x":[1,2]}"#);
    // Not JSON, not an array, a missing pointer: one held event holding the raw body.
    for (split, body) in [
        ("", &b"<xml/>"[..]),
        ("", br#"{"eventId":1}"#),
        ("/batch", body),
        ("/nowhere", body),
        ("no-slash", body),
    ] {
        let v = read_events(
            Provider::Hubspot,
            None,
            Some(split),
            &HeaderMap::new(),
            body,
        );
        assert_eq!(v.len(), 1, "{split}");
        assert!(v[0].held(), "{split}");
        assert_eq!(v[0].body, body, "{split}");
        assert_eq!(v[0].key, held_key(body), "{split}");
    }
    // A header id shared by a batch: element i gets `{id}/{i}`.
    let h = headers(&[("webhook-id", "msg_7")]);
    let v = read_events(
        Provider::StandardWebhooks,
        None,
        Some(""),
        &h,
        br#"[{"a":1},{"a":2}]"#,
    );
    assert_eq!(ids(&v), [Some("msg_7/0"), Some("msg_7/1")]);
    let rule = EventIdRule::Header("x-batch".into());
    let v = read_events(
        Provider::Hmac,
        Some(&rule),
        Some(""),
        &HeaderMap::new(),
        b"[1]",
    );
    assert_eq!(ids(&v), [None]);
    assert_eq!(v[0].key, held_key(b"1"));
}

#[test]
fn slack_url_verification() {
    let body = br#"{"token":"t","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}"#;
    assert_eq!(
        slack_challenge(body).as_deref(),
        Some("3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P")
    );
    assert_eq!(
        slack_challenge(br#"{"type":"event_callback","challenge":"x"}"#),
        None
    );
    assert_eq!(slack_challenge(br#"{"type":"url_verification"}"#), None);
    assert_eq!(
        slack_challenge(br#"{"type":"url_verification","challenge":5}"#),
        None
    );
    assert_eq!(slack_challenge(b"type=url_verification"), None);
    assert_eq!(slack_challenge(b""), None);
}

#[test]
fn pointers() {
    for ok in ["", "/", "/a", "/a/0", "/a~0b/~1", "/ "] {
        assert!(valid_pointer(ok), "{ok:?}");
    }
    for bad in ["a", "a/b", "/~", "/~2", "/a~"] {
        assert!(!valid_pointer(bad), "{bad:?}");
    }
}

#[test]
fn debug_never_shows_the_body() {
    let v = read_events(
        Provider::Stripe,
        None,
        None,
        &HeaderMap::new(),
        br#"{"id":"e","card":"4242"}"#,
    );
    let dbg = format!("{v:?}");
    assert!(!dbg.contains("4242"), "{dbg}");
    assert!(dbg.contains("body_bytes: 24"), "{dbg}");
}
