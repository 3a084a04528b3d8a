//! `verify` against signatures made by the providers' official libraries (the harness of
//! `idem_testkit::signers`): valid, tampered body, wrong secret, rotated secrets, stale and
//! future timestamps, each signing header missing. Skips (saying so) only when neither `CI`
//! nor `IDEM_TEST_SIGNERS` is set; otherwise a missing library fails.

mod common;

use common::headers;
use http::{HeaderMap, HeaderName, HeaderValue};
use idem_intake::{verify, Provider, Refusal, VerifyConfig};
use idem_testkit::signers::{self, OfficialRequest};

const TOL: i64 = 300_000;
const BODY: &[u8] =
    "{\"id\":\"evt_1\",\"event_id\":\"ev_1\",\"name\":\"Zoë ✓\",\"n\":[1,2]}".as_bytes();

fn now_ms() -> i64 {
    // The official signers of Standard Webhooks read the wall clock for nothing, but take
    // the time we give them; a fixed recent second keeps runs reproducible.
    1_764_600_000_000
}

/// One cross check: a provider, its secrets, and the request the official library signs.
#[derive(Clone, Copy)]
struct Case {
    /// The harness's provider name.
    lib: &'static str,
    provider: Provider,
    secret: &'static str,
    other: &'static str,
    url: Option<&'static str>,
    params: Option<&'static [(&'static str, &'static str)]>,
    body: &'static [u8],
    content_type: Option<&'static str>,
    timed: bool,
}

const FORM: &[(&str, &str)] = &[
    ("MessageSid", "SM0123456789abcdef"),
    ("From", "+15551234567"),
    ("Body", "Hello, wörld & more"),
    ("AccountSid", "AC01"),
];
const FORM_BODY: &[u8] =
    b"MessageSid=SM0123456789abcdef&From=%2B15551234567&Body=Hello%2C+w%C3%B6rld+%26+more&AccountSid=AC01";

fn cases() -> Vec<Case> {
    let base = |lib, provider, secret, other, timed| Case {
        lib,
        provider,
        secret,
        other,
        url: None,
        params: None,
        body: BODY,
        content_type: Some("application/json"),
        timed,
    };
    // The providers that sign the URL, each case with its own.
    let hubspot = base(
        "hubspot",
        Provider::Hubspot,
        "client-secret-1",
        "client-secret-2",
        true,
    );
    let twilio = base(
        "twilio",
        Provider::Twilio,
        "auth-token-1",
        "auth-token-2",
        false,
    );
    vec![
        base(
            "stripe",
            Provider::Stripe,
            "whsec_official_one",
            "whsec_official_two",
            true,
        ),
        base(
            "stripe_node",
            Provider::Stripe,
            "whsec_official_one",
            "whsec_official_two",
            true,
        ),
        base(
            "standard_webhooks",
            Provider::StandardWebhooks,
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
            true,
        ),
        base(
            "github",
            Provider::Github,
            "It's a Secret to Everybody",
            "another",
            false,
        ),
        base(
            "shopify",
            Provider::Shopify,
            "shpss_0123",
            "shpss_4567",
            false,
        ),
        base(
            "slack",
            Provider::Slack,
            "8f742231b10e8888abcd99yyyzzz85a5",
            "other",
            true,
        ),
        Case {
            url: Some("https://hooks.example.com/in/hubspot?portal=42"),
            ..hubspot
        },
        // A URL with an escape HubSpot documents decoding; the library signs it as written.
        Case {
            url: Some("https://hooks.example.com/in/hub%3Aspot?x=a%2Fb"),
            ..hubspot
        },
        base(
            "typeform",
            Provider::Typeform,
            "tf-secret",
            "tf-other",
            false,
        ),
        Case {
            params: Some(FORM),
            body: FORM_BODY,
            content_type: Some("application/x-www-form-urlencoded"),
            url: Some("https://hooks.example.com/in/twilio?source=sms"),
            ..twilio
        },
        Case {
            url: Some("https://hooks.example.com:443/in/twilio"),
            ..twilio
        },
    ]
}

impl Case {
    fn sign(&self, secret: &str, at_ms: i64) -> HeaderMap {
        let req = OfficialRequest {
            url: self.url,
            params: self.params,
            ..OfficialRequest::new(self.lib, secret, self.body, at_ms)
        };
        let pairs = signers::official_sign(&req).unwrap_or_else(|e| panic!("{}: {e}", self.lib));
        let mut h = headers(&pairs);
        if let Some(ct) = self.content_type {
            h.insert(http::header::CONTENT_TYPE, HeaderValue::from_static(ct));
        }
        h
    }

    fn check(&self, secrets: &[&str], h: &HeaderMap, body: &[u8], now: i64) -> Result<(), Refusal> {
        let secrets: Vec<String> = secrets.iter().map(|s| (*s).to_owned()).collect();
        let cfg = VerifyConfig {
            provider: self.provider,
            secrets: &secrets,
            tolerance_ms: TOL,
            hmac: None,
            public_url: self.url,
        };
        verify(&cfg, "POST", h, body, now)
    }
}

#[test]
fn verify_agrees_with_the_official_libraries() {
    if signers::skip("verify_agrees_with_the_official_libraries") {
        return;
    }
    let now = now_ms();
    let mut checks = 0usize;
    let mut expect = |what: String, got: Result<(), Refusal>, want: Result<(), Refusal>| {
        assert_eq!(got, want, "{what}");
        checks += 1;
    };
    for c in cases() {
        let name = format!("{} {}", c.lib, c.url.unwrap_or(""));
        let h = c.sign(c.secret, now);
        expect(
            format!("{name}: valid"),
            c.check(&[c.secret], &h, c.body, now),
            Ok(()),
        );
        let mut tampered = c.body.to_vec();
        tampered[1] ^= 0x01;
        expect(
            format!("{name}: tampered"),
            c.check(&[c.secret], &h, &tampered, now),
            Err(Refusal::InvalidSignature),
        );
        expect(
            format!("{name}: wrong secret"),
            c.check(&[c.other], &h, c.body, now),
            Err(Refusal::InvalidSignature),
        );
        // Rotation: the old secret's signature and the new one's both pass a source with both.
        let newer = c.sign(c.other, now);
        expect(
            format!("{name}: rotated (old)"),
            c.check(&[c.other, c.secret], &h, c.body, now),
            Ok(()),
        );
        expect(
            format!("{name}: rotated (new)"),
            c.check(&[c.secret, c.other], &newer, c.body, now),
            Ok(()),
        );
        if c.provider == Provider::Stripe {
            // While a secret rolls, Stripe sends one v1 per secret in one header.
            let both = format!(
                "{},{}",
                h["stripe-signature"].to_str().expect("ascii"),
                newer["stripe-signature"]
                    .to_str()
                    .expect("ascii")
                    .split(',')
                    .filter(|i| i.starts_with("v1="))
                    .collect::<Vec<_>>()
                    .join(",")
            );
            let mut m = h.clone();
            m.insert(
                "stripe-signature",
                HeaderValue::from_str(&both).expect("value"),
            );
            for (which, secret) in [("new", c.other), ("old", c.secret)] {
                expect(
                    format!("{name}: two v1, {which} secret"),
                    c.check(&[secret], &m, c.body, now),
                    Ok(()),
                );
            }
        }
        if c.provider == Provider::StandardWebhooks {
            // Svix sends the same scheme under `svix-*` names.
            let mut svix = HeaderMap::new();
            for (k, v) in h.iter() {
                let name = k.as_str().replacen("webhook-", "svix-", 1);
                svix.insert(
                    HeaderName::from_bytes(name.as_bytes()).expect("name"),
                    v.clone(),
                );
            }
            expect(
                format!("{name}: svix names"),
                c.check(&[c.secret], &svix, c.body, now),
                Ok(()),
            );
        }
        for (header, _) in h.iter().filter(|(n, _)| *n != http::header::CONTENT_TYPE) {
            let mut less = h.clone();
            less.remove(header);
            expect(
                format!("{name}: without {header}"),
                c.check(&[c.secret], &less, c.body, now),
                Err(Refusal::InvalidSignature),
            );
        }
        if c.timed {
            let stale = c.sign(c.secret, now - TOL - 1000);
            let future = c.sign(c.secret, now + TOL + 1000);
            let edge = c.sign(c.secret, now - TOL);
            for (what, secret, h, want) in [
                ("stale", c.secret, &stale, Err(Refusal::StaleSignature)),
                ("future", c.secret, &future, Err(Refusal::StaleSignature)),
                ("at the tolerance's edge", c.secret, &edge, Ok(())),
                // A stale timestamp under a wrong secret is invalid (signature first).
                (
                    "stale and wrong secret",
                    c.other,
                    &stale,
                    Err(Refusal::InvalidSignature),
                ),
            ] {
                expect(
                    format!("{name}: {what}"),
                    c.check(&[secret], h, c.body, now),
                    want,
                );
            }
        }
    }
    eprintln!("official cross checks: {checks} passed, 0 failed");
    assert!(checks > 80, "too few checks ran: {checks}");
}

#[test]
fn every_signing_provider_has_an_official_case() {
    let covered: Vec<&str> = cases().iter().map(|c| c.lib).collect();
    for p in signers::OFFICIAL_PROVIDERS {
        assert!(covered.contains(&p), "{p} has no cross case");
    }
}
