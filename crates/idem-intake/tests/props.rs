//! Properties: sign-then-verify round trips for every provider, any single-bit flip of the
//! body fails, any secret of the list passes, tolerance edges to the millisecond, and the
//! parsers are total (arbitrary headers and bodies never panic).

mod common;

use common::{headers, timed};
use http::{HeaderMap, HeaderName, HeaderValue};
use idem_intake::sign::{sign, Delivery};
use idem_intake::{
    read_events, slack_challenge, verify, EventIdRule, HmacAlgorithm, HmacEncoding, HmacScheme,
    HmacSigned, Provider, Refusal, VerifyConfig,
};
use proptest::prelude::*;

const URL: &str = "https://hooks.example.com/in/src?a=1";

fn scheme() -> HmacScheme {
    HmacScheme {
        header: "X-Sig".into(),
        algorithm: HmacAlgorithm::Sha512,
        encoding: HmacEncoding::Base64,
        prefix: Some("v=".into()),
        timestamp_header: Some("X-Ts".into()),
        signed: HmacSigned::TimestampBody,
    }
}

fn provider() -> impl Strategy<Value = Provider> {
    prop::sample::select(Provider::ALL.to_vec())
}

/// A secret the provider accepts: Standard Webhooks needs `whsec_` + base64 of 24–64 bytes.
fn secret_for(p: Provider, seed: &[u8]) -> String {
    use base64::Engine;
    match p {
        Provider::StandardWebhooks => {
            let mut k = seed.to_vec();
            k.resize(24 + seed.len() % 40, 7);
            format!(
                "whsec_{}",
                base64::engine::general_purpose::STANDARD.encode(k)
            )
        }
        _ => format!("s{}", hex::encode(seed)),
    }
}

fn signed(p: Provider, secret: &str, body: &[u8], at_ms: i64, s: &HmacScheme) -> HeaderMap {
    let d = Delivery {
        provider: p,
        secret,
        body,
        at_ms,
        method: "POST",
        public_url: Some(URL),
        // Twilio signs JSON bodies byte for byte (a form body is signed as decoded params).
        content_type: Some("application/json"),
        hmac: Some(s),
        id: "msg_1",
    };
    let mut h = headers(&sign(&d).expect("signable"));
    h.insert("content-type", HeaderValue::from_static("application/json"));
    h
}

fn check(
    p: Provider,
    secrets: &[String],
    h: &HeaderMap,
    body: &[u8],
    now: i64,
    tol: i64,
    s: &HmacScheme,
) -> Result<(), Refusal> {
    let cfg = VerifyConfig {
        provider: p,
        secrets,
        tolerance_ms: tol,
        hmac: Some(s),
        public_url: Some(URL),
    };
    verify(&cfg, "POST", h, body, now)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn round_trip_and_any_bit_flip_fails(
        p in provider(),
        seed in prop::collection::vec(any::<u8>(), 1..48),
        body in prop::collection::vec(any::<u8>(), 1..512),
        bit in any::<prop::sample::Index>(),
        at_s in 1_000_000_000i64..4_000_000_000,
    ) {
        let s = scheme();
        let secret = secret_for(p, &seed);
        let at = at_s * 1000;
        let h = signed(p, &secret, &body, at, &s);
        let secrets = vec![secret];
        prop_assert_eq!(check(p, &secrets, &h, &body, at, 300_000, &s), Ok(()));
        let mut flipped = body.clone();
        let i = bit.index(body.len() * 8);
        flipped[i / 8] ^= 1 << (i % 8);
        prop_assert_eq!(
            check(p, &secrets, &h, &flipped, at, 300_000, &s),
            Err(Refusal::InvalidSignature)
        );
    }

    #[test]
    fn any_secret_of_the_list_passes(
        p in provider(),
        seeds in prop::collection::vec(prop::collection::vec(any::<u8>(), 1..40), 1..=4),
        pick in any::<prop::sample::Index>(),
        body in prop::collection::vec(any::<u8>(), 0..256),
    ) {
        let s = scheme();
        let secrets: Vec<String> = seeds.iter().map(|k| secret_for(p, k)).collect();
        let chosen = &secrets[pick.index(secrets.len())];
        let at = 1_700_000_000_000;
        let h = signed(p, chosen, &body, at, &s);
        prop_assert_eq!(check(p, &secrets, &h, &body, at, 300_000, &s), Ok(()));
        // A secret outside the list fails.
        let outsider = secret_for(p, b"outsider-outsider-outsider");
        if !secrets.contains(&outsider) {
            let h = signed(p, &outsider, &body, at, &s);
            prop_assert_eq!(
                check(p, &secrets, &h, &body, at, 300_000, &s),
                Err(Refusal::InvalidSignature)
            );
        }
    }

    #[test]
    fn tolerance_edges(
        p in provider().prop_filter("signs a time", |p| timed(*p)),
        at_s in 1_000_000_000i64..4_000_000_000,
        tol in 0i64..10_000_000,
    ) {
        let s = scheme();
        let secrets = vec![secret_for(p, b"k")];
        let at = at_s * 1000;
        let h = signed(p, &secrets[0], b"{}", at, &s);
        for (now, ok) in [
            (at + tol, true),
            (at - tol, true),
            (at + tol + 1, false),
            (at - tol - 1, false),
        ] {
            let want = if ok { Ok(()) } else { Err(Refusal::StaleSignature) };
            prop_assert_eq!(check(p, &secrets, &h, b"{}", now, tol, &s), want, "now={}", now);
        }
    }

    #[test]
    fn verify_is_total_on_arbitrary_headers(
        p in provider(),
        values in prop::collection::vec(
            (prop::sample::select(vec![
                "stripe-signature", "webhook-id", "webhook-timestamp", "webhook-signature",
                "svix-id", "svix-timestamp", "svix-signature", "x-hub-signature-256",
                "x-shopify-hmac-sha256", "x-slack-signature", "x-slack-request-timestamp",
                "x-hubspot-signature-v3", "x-hubspot-request-timestamp", "typeform-signature",
                "x-twilio-signature", "content-type", "x-sig", "x-ts",
            ]),
            prop_oneof![
                "[ -~]{0,80}",
                "(t=[0-9]{0,12}|v1=[0-9a-f]{0,64}|v0=[0-9a-z]{0,8}|,|=| ){0,8}",
                "(v1,[A-Za-z0-9+/=]{0,44}| ){0,6}",
                "(sha256=|v0=|v=)?[0-9A-Za-z+/=]{0,90}",
            ]),
            0..8,
        ),
        body in prop::collection::vec(any::<u8>(), 0..256),
        now in any::<i64>(),
        tol in any::<i64>(),
    ) {
        let mut h = HeaderMap::new();
        for (k, v) in &values {
            if let Ok(v) = HeaderValue::from_str(v) {
                h.append(HeaderName::from_static(k), v);
            }
        }
        let s = scheme();
        let secrets = vec![secret_for(p, b"k"), String::new()];
        // Random headers must never verify (or panic).
        prop_assert_eq!(
            check(p, &secrets, &h, &body, now, tol, &s),
            Err(Refusal::InvalidSignature)
        );
    }

    #[test]
    fn read_events_is_total_and_keys_are_valid(
        p in provider(),
        body in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..256),
            "\\[(\\{\"eventId\":[0-9]{1,5}\\},?){0,5}\\]".prop_map(String::into_bytes),
            "\\{\"id\":(\"[ -~]{0,300}\"|[0-9]{1,25}|-?[0-9]\\.[0-9]|null),\"a\":\\[1,\\{\\}\\]\\}".prop_map(String::into_bytes),
        ],
        split in prop::option::of(prop_oneof![Just(String::new()), Just("/".into()), "(/[a-z0-9~]{0,3}){0,3}"]),
        rule in prop::option::of(prop_oneof![
            "(/[a-z0-9~]{0,3}){0,3}".prop_map(EventIdRule::Pointer),
            "[a-z-]{1,12}".prop_map(EventIdRule::Header),
        ]),
        header_id in "[ -~]{0,300}",
    ) {
        let mut h = HeaderMap::new();
        if let Ok(v) = HeaderValue::from_str(&header_id) {
            for name in ["webhook-id", "x-github-delivery", "x-shopify-webhook-id", "i-twilio-idempotency-token"] {
                h.insert(name, v.clone());
            }
        }
        let events = read_events(p, rule.as_ref(), split.as_deref(), &h, &body);
        prop_assert!(!events.is_empty());
        if split.is_none() {
            prop_assert_eq!(events.len(), 1);
            prop_assert_eq!(&events[0].body, &body);
        }
        for e in &events {
            prop_assert!(idem_core::ids::Key::try_from(e.key.as_str()).is_ok(), "{}", e.key);
            prop_assert_eq!(e.held(), e.key.starts_with("body-sha256:"));
            if e.held() {
                prop_assert_eq!(&e.key, &idem_intake::held_key(&e.body));
            }
        }
        let _ = slack_challenge(&body);
    }

    #[test]
    fn url_helpers_are_total(u in "\\PC{0,64}") {
        let d = idem_intake::verify::hubspot_decode_uri(&u);
        prop_assert!(d.len() <= u.len());
        let v = idem_intake::verify::twilio_url_variants(&u);
        prop_assert_eq!(&v[0], &u);
        prop_assert!(v.len() <= 2);
    }
}
