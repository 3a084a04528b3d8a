//! Signature verification: known answers from the providers' documents and libraries, every
//! refusal path, rotation, tolerance edges, header oddities.

mod common;

use common::{headers, timed};
use http::{HeaderMap, HeaderName, HeaderValue};
use idem_intake::sign::{sign, Delivery};
use idem_intake::{
    secret_usable, verify, HmacAlgorithm, HmacEncoding, HmacScheme, HmacSigned, Provider, Refusal,
    VerifyConfig,
};

const NOW_MS: i64 = 1_700_000_000_000;
const TOL: i64 = 300_000;

struct Src {
    provider: Provider,
    secrets: Vec<String>,
    hmac: Option<HmacScheme>,
    public_url: Option<String>,
}

impl Src {
    fn new(provider: Provider, secrets: &[&str]) -> Src {
        Src {
            provider,
            secrets: secrets.iter().map(|s| (*s).to_owned()).collect(),
            hmac: None,
            public_url: None,
        }
    }
    fn url(mut self, u: &str) -> Src {
        self.public_url = Some(u.to_owned());
        self
    }
    fn check(&self, method: &str, h: &HeaderMap, body: &[u8], now: i64) -> Result<(), Refusal> {
        let cfg = VerifyConfig {
            provider: self.provider,
            secrets: &self.secrets,
            tolerance_ms: TOL,
            hmac: self.hmac.as_ref(),
            public_url: self.public_url.as_deref(),
        };
        verify(&cfg, method, h, body, now)
    }
}

const INVALID: Result<(), Refusal> = Err(Refusal::InvalidSignature);
const STALE: Result<(), Refusal> = Err(Refusal::StaleSignature);

// ---------------------------------------------------------------- known answers

#[test]
fn standard_webhooks_specification_example() {
    let src = Src::new(
        Provider::StandardWebhooks,
        &["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"],
    );
    let body = br#"{"test": 2432232314}"#;
    let sig = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
    let at = 1_614_265_330_000;
    let h = headers(&[
        ("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek"),
        ("webhook-timestamp", "1614265330"),
        ("webhook-signature", sig),
    ]);
    assert_eq!(src.check("POST", &h, body, at), Ok(()));
    // Svix's header names carry the same scheme.
    let h = headers(&[
        ("svix-id", "msg_p5jXN8AQM9LWM0D4loKWxJek"),
        ("svix-timestamp", "1614265330"),
        ("svix-signature", sig),
    ]);
    assert_eq!(src.check("POST", &h, body, at), Ok(()));
    // The secret without its prefix is the same key.
    let bare = Src::new(
        Provider::StandardWebhooks,
        &["MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"],
    );
    assert_eq!(bare.check("POST", &h, body, at), Ok(()));
    // Among several signatures any v1 counts; unknown versions are skipped.
    let h = headers(&[
        ("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek"),
        ("webhook-timestamp", "1614265330"),
        ("webhook-signature", &format!("v2,abc v1,AAAA {sig}")),
    ]);
    assert_eq!(src.check("POST", &h, body, at), Ok(()));
    // The id is signed: a missing one is invalid, not merely "no id".
    let h = headers(&[
        ("webhook-timestamp", "1614265330"),
        ("webhook-signature", sig),
    ]);
    assert_eq!(src.check("POST", &h, body, at), INVALID);
    let h = headers(&[
        ("webhook-id", "msg_other"),
        ("webhook-timestamp", "1614265330"),
        ("webhook-signature", sig),
    ]);
    assert_eq!(src.check("POST", &h, body, at), INVALID);
    // Only another version → invalid.
    let h = headers(&[
        ("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek"),
        ("webhook-timestamp", "1614265330"),
        ("webhook-signature", &sig.replacen("v1,", "v2,", 1)),
    ]);
    assert_eq!(src.check("POST", &h, body, at), INVALID);
}

#[test]
fn slack_documentation_example() {
    // The example request of Slack's "Verifying requests from Slack".
    let src = Src::new(Provider::Slack, &["8f742231b10e8888abcd99yyyzzz85a5"]);
    let body = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
    let h = headers(&[
        (
            "X-Slack-Signature",
            "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503",
        ),
        ("X-Slack-Request-Timestamp", "1531420618"),
    ]);
    assert_eq!(src.check("POST", &h, body, 1_531_420_618_000), Ok(()));
    assert_eq!(src.check("POST", &h, body, NOW_MS), STALE);
    assert_eq!(
        src.check("POST", &h, &body[1..], 1_531_420_618_000),
        INVALID
    );
}

#[test]
fn twilio_documentation_example() {
    // Twilio's "Webhooks security" example (auth token 12345).
    let src =
        Src::new(Provider::Twilio, &["12345"]).url("https://mycompany.com/myapp.php?foo=1&bar=2");
    let body = b"CallSid=CA1234567890ABCDE&Caller=%2B12349013030&Digits=1234&From=%2B12349013030&To=%2B18005551212";
    let h = headers(&[
        ("X-Twilio-Signature", "0/KCTR6DLpKmkAf8muzZqo1nDgQ="),
        ("Content-Type", "application/x-www-form-urlencoded"),
    ]);
    assert_eq!(src.check("POST", &h, body, NOW_MS), Ok(()));
    // Parameter order on the wire does not matter: they are sorted.
    let shuffled = b"To=%2B18005551212&Digits=1234&CallSid=CA1234567890ABCDE&From=%2B12349013030&Caller=%2B12349013030";
    assert_eq!(src.check("POST", &h, shuffled, NOW_MS), Ok(()));
    // The URL is signed; a port variant of it still matches (Twilio's libraries do this).
    let with_port = Src::new(Provider::Twilio, &["12345"])
        .url("https://mycompany.com:443/myapp.php?foo=1&bar=2");
    assert_eq!(with_port.check("POST", &h, body, NOW_MS), Ok(()));
    let other =
        Src::new(Provider::Twilio, &["12345"]).url("https://mycompany.com/myapp.php?foo=1&bar=3");
    assert_eq!(other.check("POST", &h, body, NOW_MS), INVALID);
    let tampered = b"CallSid=CA1234567890ABCDE&Caller=%2B12349013030&Digits=1235&From=%2B12349013030&To=%2B18005551212";
    assert_eq!(src.check("POST", &h, tampered, NOW_MS), INVALID);
}

// ---------------------------------------------------------------- round trips per provider

fn scheme(signed: HmacSigned, ts: bool, enc: HmacEncoding, alg: HmacAlgorithm) -> HmacScheme {
    HmacScheme {
        header: "X-Signature".into(),
        algorithm: alg,
        encoding: enc,
        prefix: Some("sha=".into()),
        timestamp_header: ts.then(|| "X-Timestamp".into()),
        signed,
    }
}

const SW_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const SW_SECRET2: &str = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

/// Every provider with a source and a matching signer.
fn cases() -> Vec<(Src, &'static str, &'static str)> {
    let mut v = Vec::new();
    for p in Provider::ALL {
        let (a, b) = match p {
            Provider::StandardWebhooks => (SW_SECRET, SW_SECRET2),
            Provider::Stripe => ("whsec_first", "whsec_second"),
            _ => ("first-secret", "second-secret"),
        };
        let mut src = Src::new(p, &[a]);
        if p.needs_public_url() {
            src.public_url = Some("https://hooks.example.com/in/src?x=1".into());
        }
        if p == Provider::Hmac {
            src.hmac = Some(scheme(
                HmacSigned::TimestampBody,
                true,
                HmacEncoding::Hex,
                HmacAlgorithm::Sha256,
            ));
        }
        v.push((src, a, b));
    }
    v
}

fn signed(src: &Src, secret: &str, body: &[u8], at_ms: i64) -> HeaderMap {
    let d = Delivery {
        provider: src.provider,
        secret,
        body,
        at_ms,
        method: "POST",
        public_url: src.public_url.as_deref(),
        content_type: None,
        hmac: src.hmac.as_ref(),
        id: "evt_1",
    };
    headers(&sign(&d).expect("signable"))
}

#[test]
fn every_provider_round_trips_and_refuses_tampering() {
    let body = br#"{"id":"evt_1","event_id":"e1","n":1}"#;
    for (src, secret, other) in cases() {
        let p = src.provider.as_str();
        let h = signed(&src, secret, body, NOW_MS);
        assert_eq!(src.check("POST", &h, body, NOW_MS), Ok(()), "{p}");
        assert_eq!(
            src.check(
                "POST",
                &h,
                br#"{"id":"evt_1","event_id":"e1","n":2}"#,
                NOW_MS
            ),
            INVALID,
            "{p} tampered body"
        );
        assert_eq!(
            src.check("POST", &h, b"", NOW_MS),
            INVALID,
            "{p} empty body"
        );
        let wrong = signed(&src, other, body, NOW_MS);
        assert_eq!(
            src.check("POST", &wrong, body, NOW_MS),
            INVALID,
            "{p} wrong secret"
        );
        // Rotation: a source holding both secrets accepts either signer.
        let mut rotated = Src::new(src.provider, &[other, secret]);
        rotated.public_url = src.public_url.clone();
        rotated.hmac = src.hmac.clone();
        assert_eq!(
            rotated.check("POST", &h, body, NOW_MS),
            Ok(()),
            "{p} rotated old"
        );
        assert_eq!(
            rotated.check("POST", &wrong, body, NOW_MS),
            Ok(()),
            "{p} rotated new"
        );
        // No headers at all.
        assert_eq!(
            src.check("POST", &HeaderMap::new(), body, NOW_MS),
            INVALID,
            "{p}"
        );
        // Each signing header missing in turn.
        for (name, _) in h.iter() {
            let mut less = h.clone();
            less.remove(name);
            let id_only = matches!(name.as_str(), "x-github-delivery" | "x-shopify-webhook-id");
            let expect = if id_only { Ok(()) } else { INVALID };
            assert_eq!(
                src.check("POST", &less, body, NOW_MS),
                expect,
                "{p} without {name}"
            );
        }
        // No secrets: nothing passes.
        let mut none = Src::new(src.provider, &[]);
        none.public_url = src.public_url.clone();
        none.hmac = src.hmac.clone();
        assert_eq!(none.check("POST", &h, body, NOW_MS), INVALID, "{p}");
        if timed(src.provider) {
            // Stale and future beyond the tolerance; edges inside it (second precision for
            // providers that sign seconds).
            let old = signed(&src, secret, body, NOW_MS - TOL - 1000);
            assert_eq!(src.check("POST", &old, body, NOW_MS), STALE, "{p} stale");
            let future = signed(&src, secret, body, NOW_MS + TOL + 1000);
            assert_eq!(
                src.check("POST", &future, body, NOW_MS),
                STALE,
                "{p} future"
            );
            let edge = signed(&src, secret, body, NOW_MS - TOL);
            assert_eq!(src.check("POST", &edge, body, NOW_MS), Ok(()), "{p} edge");
            let edge = signed(&src, secret, body, NOW_MS + TOL);
            assert_eq!(src.check("POST", &edge, body, NOW_MS), Ok(()), "{p} edge");
            // The signature is checked first: a bad signature over a stale time is invalid.
            let old_wrong = signed(&src, other, body, NOW_MS - 10 * TOL);
            assert_eq!(
                src.check("POST", &old_wrong, body, NOW_MS),
                INVALID,
                "{p} order"
            );
        } else {
            // No signed time: any clock passes.
            assert_eq!(src.check("POST", &h, body, 0), Ok(()), "{p}");
        }
    }
}

#[test]
fn tolerance_edges_to_the_millisecond() {
    // Signed at a whole second, so ±1 ms around the edge is exact.
    let at = NOW_MS;
    for (src, secret, _) in cases().into_iter().filter(|(s, _, _)| timed(s.provider)) {
        let p = src.provider.as_str();
        let h = signed(&src, secret, b"{}", at);
        assert_eq!(src.check("POST", &h, b"{}", at + TOL), Ok(()), "{p}");
        assert_eq!(src.check("POST", &h, b"{}", at + TOL + 1), STALE, "{p}");
        assert_eq!(src.check("POST", &h, b"{}", at - TOL), Ok(()), "{p}");
        assert_eq!(src.check("POST", &h, b"{}", at - TOL - 1), STALE, "{p}");
    }
    // A negative tolerance accepts no time at all; a huge one never overflows.
    let src = Src::new(Provider::Slack, &["s"]);
    let h = signed(&src, "s", b"{}", NOW_MS);
    let cfg = |tol| VerifyConfig {
        provider: Provider::Slack,
        secrets: &src.secrets,
        tolerance_ms: tol,
        hmac: None,
        public_url: None,
    };
    assert_eq!(verify(&cfg(-1), "POST", &h, b"{}", NOW_MS), STALE);
    assert_eq!(verify(&cfg(0), "POST", &h, b"{}", NOW_MS), Ok(()));
    assert_eq!(verify(&cfg(i64::MAX), "POST", &h, b"{}", 0), Ok(()));
    assert_eq!(verify(&cfg(i64::MAX), "POST", &h, b"{}", i64::MAX), Ok(()));
    // A skew beyond i64 (now = i64::MIN) is computed exactly: stale, not wrapped around.
    assert_eq!(verify(&cfg(i64::MAX), "POST", &h, b"{}", i64::MIN), STALE);
    // HubSpot signs milliseconds: its edges are at the millisecond of the signing time.
    let src = Src::new(Provider::Hubspot, &["s"]).url("https://h.example/in");
    let at = NOW_MS + 123;
    let h = signed(&src, "s", b"[]", at);
    assert_eq!(src.check("POST", &h, b"[]", at + TOL), Ok(()));
    assert_eq!(src.check("POST", &h, b"[]", at + TOL + 1), STALE);
    assert_eq!(src.check("POST", &h, b"[]", at - TOL - 1), STALE);
}

// ---------------------------------------------------------------- provider specifics

#[test]
fn stripe_header_forms() {
    let src = Src::new(Provider::Stripe, &["whsec_test"]);
    let body = br#"{"id":"evt_1"}"#;
    let h = signed(&src, "whsec_test", body, NOW_MS);
    let value = h["stripe-signature"].to_str().expect("ascii").to_owned();
    let t = format!("t={}", NOW_MS / 1000);
    let v1 = value.split(',').nth(1).expect("v1").to_owned();
    let sig = v1.trim_start_matches("v1=");
    let fake = "0".repeat(64);
    let ok = |s: &str| src.check("POST", &headers(&[("Stripe-Signature", s)]), body, NOW_MS);
    assert_eq!(ok(&value), Ok(()));
    // Several v1 (Stripe sends one per active secret), in any position, with v0 noise.
    assert_eq!(ok(&format!("{t},v1={fake},{v1},v0={fake}")), Ok(()));
    assert_eq!(ok(&format!("{v1},{t}")), Ok(()));
    assert_eq!(ok(&format!("{t}, {v1}")), Ok(()));
    // Upper-case hex decodes to the same bytes.
    assert_eq!(ok(&format!("{t},v1={}", sig.to_uppercase())), Ok(()));
    // Only an unknown scheme.
    assert_eq!(ok(&format!("{t},v0={sig}")), INVALID);
    // No timestamp, two timestamps, malformed timestamps and hex.
    assert_eq!(ok(&v1), INVALID);
    assert_eq!(ok(&format!("{t},{t},{v1}")), INVALID);
    assert_eq!(ok(&format!("t=-1,{v1}")), INVALID);
    assert_eq!(ok(&format!("t=12x,{v1}")), INVALID);
    assert_eq!(ok(&format!("t=99999999999999999999,{v1}")), INVALID);
    assert_eq!(ok(&format!("{t},v1=zz{}", &sig[2..])), INVALID);
    assert_eq!(ok(&format!("{t},v1={}", &sig[1..])), INVALID);
    assert_eq!(ok(""), INVALID);
    assert_eq!(ok(",,,==,="), INVALID);
    // The whole `whsec_…` string is the key (not its decoding).
    let other = Src::new(Provider::Stripe, &["test"]);
    assert_eq!(other.check("POST", &h, body, NOW_MS), INVALID);
}

#[test]
fn repeated_oversized_and_non_ascii_headers_are_malformed() {
    let src = Src::new(Provider::Github, &["s"]);
    let body = b"payload";
    let h = signed(&src, "s", body, NOW_MS);
    let good = h["x-hub-signature-256"].clone();
    let mut twice = HeaderMap::new();
    twice.append("x-hub-signature-256", good.clone());
    twice.append("x-hub-signature-256", good.clone());
    assert_eq!(src.check("POST", &twice, body, NOW_MS), INVALID);
    // Header names are case-insensitive.
    let mut upper = HeaderMap::new();
    upper.insert(HeaderName::from_static("x-hub-signature-256"), good.clone());
    assert_eq!(
        src.check(
            "POST",
            &headers(&[("X-HUB-SIGNATURE-256", good.to_str().expect("a"))]),
            body,
            NOW_MS
        ),
        Ok(())
    );
    let huge = format!(
        "sha256={}",
        "a".repeat(idem_intake::verify::MAX_HEADER_BYTES)
    );
    assert_eq!(
        src.check(
            "POST",
            &headers(&[("x-hub-signature-256", &huge)]),
            body,
            NOW_MS
        ),
        INVALID
    );
    let mut latin = HeaderMap::new();
    latin.insert(
        "x-hub-signature-256",
        HeaderValue::from_bytes(b"sha256=\xe9\xe9").expect("obs-text"),
    );
    assert_eq!(src.check("POST", &latin, body, NOW_MS), INVALID);
    // Wrong prefix; the right digest without its prefix.
    let bare = good
        .to_str()
        .expect("a")
        .trim_start_matches("sha256=")
        .to_owned();
    assert_eq!(
        src.check(
            "POST",
            &headers(&[("x-hub-signature-256", &bare)]),
            body,
            NOW_MS
        ),
        INVALID
    );
    assert_eq!(
        src.check(
            "POST",
            &headers(&[("x-hub-signature-256", &format!("sha1={bare}"))]),
            body,
            NOW_MS
        ),
        INVALID
    );
    // Stripe with 300 v1 candidates still verifies (one MAC per secret, not per candidate).
    let stripe = Src::new(Provider::Stripe, &["whsec_x"]);
    let sh = signed(&stripe, "whsec_x", body, NOW_MS);
    let v = sh["stripe-signature"].to_str().expect("a");
    let noise = format!(",v1={}", "0".repeat(64)).repeat(100);
    assert_eq!(
        stripe.check(
            "POST",
            &headers(&[("stripe-signature", &format!("{v}{noise}"))]),
            body,
            NOW_MS
        ),
        Ok(())
    );
}

#[test]
fn shopify_and_typeform_use_base64() {
    for p in [Provider::Shopify, Provider::Typeform] {
        let src = Src::new(p, &["hush"]);
        let body = b"{\"event_id\":\"x\"}";
        let h = signed(&src, "hush", body, NOW_MS);
        assert_eq!(src.check("POST", &h, body, NOW_MS), Ok(()));
        let name = if p == Provider::Shopify {
            "x-shopify-hmac-sha256"
        } else {
            "typeform-signature"
        };
        let v = h[name].to_str().expect("a").to_owned();
        // Base64 of another alphabet or garbage fails, never panics.
        for bad in ["", "sha256=", "!!!!", "sha256=####", "sha256=AAAA"] {
            let mut m = h.clone();
            m.insert(HeaderName::from_static(name), HeaderValue::from_static(bad));
            assert_eq!(src.check("POST", &m, body, NOW_MS), INVALID, "{p:?} {bad}");
        }
        // Without padding the same bytes decode.
        let mut m = h.clone();
        m.insert(
            HeaderName::from_static(name),
            HeaderValue::from_str(v.trim_end_matches('=')).expect("v"),
        );
        assert_eq!(src.check("POST", &m, body, NOW_MS), Ok(()), "{p:?}");
    }
}

#[test]
fn hubspot_signs_method_url_body_and_millisecond_time() {
    let url = "https://hooks.example.com/in/hs?portal=1";
    let src = Src::new(Provider::Hubspot, &["client-secret"]).url(url);
    let body = br#"[{"eventId":1}]"#;
    let h = signed(&src, "client-secret", body, NOW_MS);
    assert_eq!(src.check("POST", &h, body, NOW_MS), Ok(()));
    assert_eq!(src.check("post", &h, body, NOW_MS), Ok(()));
    assert_eq!(src.check("PUT", &h, body, NOW_MS), INVALID);
    let moved = Src::new(Provider::Hubspot, &["client-secret"])
        .url("https://hooks.example.com/in/hs?portal=2");
    assert_eq!(moved.check("POST", &h, body, NOW_MS), INVALID);
    // No public_url configured: nothing can verify.
    let none = Src::new(Provider::Hubspot, &["client-secret"]);
    assert_eq!(none.check("POST", &h, body, NOW_MS), INVALID);
    // HubSpot decodes some escapes in the URI before signing; a public_url written with them
    // verifies HubSpot's signature, and one signed over the URL as written also verifies.
    let escaped = "https://hooks.example.com/in/hs%3Aa?x=%2Fy%20z";
    assert_eq!(
        idem_intake::verify::hubspot_decode_uri(escaped),
        "https://hooks.example.com/in/hs:a?x=/y%20z"
    );
    let src = Src::new(Provider::Hubspot, &["client-secret"]).url(escaped);
    let h = signed(&src, "client-secret", body, NOW_MS); // signs the decoded form
    assert_eq!(src.check("POST", &h, body, NOW_MS), Ok(()));
    let as_written = {
        use base64::Engine;
        use hmac::Mac;
        let ts = NOW_MS.to_string();
        let mut m = hmac::Hmac::<sha2::Sha256>::new_from_slice(b"client-secret").expect("key");
        m.update(format!("POST{escaped}").as_bytes());
        m.update(body);
        m.update(ts.as_bytes());
        let sig = base64::engine::general_purpose::STANDARD.encode(m.finalize().into_bytes());
        headers(&[
            ("X-HubSpot-Signature-v3", &sig),
            ("X-HubSpot-Request-Timestamp", &ts),
        ])
    };
    assert_eq!(src.check("POST", &as_written, body, NOW_MS), Ok(()));
}

#[test]
fn twilio_json_bodies_and_port_variants() {
    let src = Src::new(Provider::Twilio, &["token"]).url("https://h.example.com/in/tw");
    let body = br#"{"MessageSid":"SM1"}"#;
    let d = Delivery {
        provider: Provider::Twilio,
        secret: "token",
        body,
        at_ms: NOW_MS,
        method: "POST",
        public_url: Some("https://h.example.com/in/tw"),
        content_type: Some("application/json"),
        hmac: None,
        id: "",
    };
    let mut h = headers(&sign(&d).expect("sign"));
    h.insert("content-type", HeaderValue::from_static("application/json"));
    assert_eq!(src.check("POST", &h, body, NOW_MS), Ok(()));
    // The body hash is part of what was signed.
    assert_eq!(
        src.check("POST", &h, br#"{"MessageSid":"SM2"}"#, NOW_MS),
        INVALID
    );
    // Signed as a JSON body, presented as a form: invalid.
    h.insert(
        "content-type",
        HeaderValue::from_static("application/x-www-form-urlencoded"),
    );
    assert_eq!(src.check("POST", &h, body, NOW_MS), INVALID);
    assert_eq!(
        idem_intake::verify::twilio_url_variants("https://u:p@h.example:8443/a?b=1"),
        vec![
            "https://u:p@h.example:8443/a?b=1".to_owned(),
            "https://u:p@h.example/a?b=1".to_owned()
        ]
    );
    assert_eq!(
        idem_intake::verify::twilio_url_variants("http://[::1]/x"),
        vec!["http://[::1]/x".to_owned(), "http://[::1]:80/x".to_owned()]
    );
    assert_eq!(
        idem_intake::verify::twilio_url_variants("not a url"),
        vec!["not a url".to_owned()]
    );
}

#[test]
fn configured_hmac_every_combination() {
    let body = b"a body";
    for alg in [
        HmacAlgorithm::Sha1,
        HmacAlgorithm::Sha256,
        HmacAlgorithm::Sha512,
    ] {
        for enc in [HmacEncoding::Hex, HmacEncoding::Base64] {
            for (signed_what, ts) in [
                (HmacSigned::Body, false),
                (HmacSigned::Body, true),
                (HmacSigned::TimestampBody, true),
            ] {
                let mut src = Src::new(Provider::Hmac, &["k1"]);
                src.hmac = Some(scheme(signed_what, ts, enc, alg));
                let h = signed(&src, "k1", body, NOW_MS);
                let what = format!("{alg:?} {enc:?} {signed_what:?} ts={ts}");
                assert_eq!(src.check("POST", &h, body, NOW_MS), Ok(()), "{what}");
                assert_eq!(src.check("POST", &h, b"a bodY", NOW_MS), INVALID, "{what}");
                if ts {
                    assert_eq!(
                        src.check("POST", &h, body, NOW_MS + TOL + 1000),
                        STALE,
                        "{what}"
                    );
                    let mut no_ts = h.clone();
                    no_ts.remove("x-timestamp");
                    assert_eq!(src.check("POST", &no_ts, body, NOW_MS), INVALID, "{what}");
                }
                // The configured prefix is required.
                let mut m = h.clone();
                let v = m["x-signature"]
                    .to_str()
                    .expect("a")
                    .replacen("sha=", "", 1);
                m.insert("x-signature", HeaderValue::from_str(&v).expect("v"));
                assert_eq!(src.check("POST", &m, body, NOW_MS), INVALID, "{what}");
            }
        }
    }
    // `timestamp.body` without a timestamp header cannot verify; no scheme at all neither.
    let mut src = Src::new(Provider::Hmac, &["k1"]);
    let mut bad = scheme(
        HmacSigned::TimestampBody,
        false,
        HmacEncoding::Hex,
        HmacAlgorithm::Sha256,
    );
    bad.prefix = None;
    src.hmac = Some(bad);
    let h = headers(&[("x-signature", "00")]);
    assert_eq!(src.check("POST", &h, body, NOW_MS), INVALID);
    src.hmac = None;
    assert_eq!(src.check("POST", &h, body, NOW_MS), INVALID);
    // An impossible header name in the scheme refuses, never panics.
    let mut weird = scheme(
        HmacSigned::Body,
        false,
        HmacEncoding::Hex,
        HmacAlgorithm::Sha256,
    );
    weird.header = "bad header\n".into();
    src.hmac = Some(weird);
    assert_eq!(src.check("POST", &h, body, NOW_MS), INVALID);
}

#[test]
fn refusals_say_nothing_but_their_code_and_configs_do_not_leak() {
    assert_eq!(Refusal::InvalidSignature.to_string(), "invalid_signature");
    assert_eq!(Refusal::StaleSignature.to_string(), "stale_signature");
    assert_eq!(
        format!("{:?}", Refusal::InvalidSignature),
        "InvalidSignature"
    );
    assert_eq!(Refusal::StaleSignature.code(), "stale_signature");
    // A scheme's Debug has no secret to show (secrets live only in VerifyConfig, which has
    // no Debug at all).
    let s = scheme(
        HmacSigned::Body,
        false,
        HmacEncoding::Hex,
        HmacAlgorithm::Sha256,
    );
    assert!(!format!("{s:?}").contains("k1"));
}

#[test]
fn secrets_usable_per_provider() {
    assert!(secret_usable(Provider::StandardWebhooks, SW_SECRET));
    assert!(secret_usable(
        Provider::StandardWebhooks,
        "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    ));
    assert!(!secret_usable(Provider::StandardWebhooks, "whsec_short"));
    assert!(!secret_usable(
        Provider::StandardWebhooks,
        "whsec_not base64 at all!!!!!!!!!!"
    ));
    assert!(secret_usable(Provider::Stripe, "whsec_anything"));
    assert!(!secret_usable(Provider::Github, ""));
}
