//! Alert signing secrets (`whsec_…`, set by an operator) and signature headers: a secret is
//! accepted exactly when it matches the published pattern (`SECRET_PATTERN`, the OpenAPI
//! schema's), its `Debug` never shows it, a message's own signature verifies and a signature
//! of another message, another id or another timestamp does not, and any header text is
//! checked without a panic.
#![no_main]

use std::sync::LazyLock;

use arbitrary::Arbitrary;
use idem_core::webhook::{AlertSecret, SECRET_PATTERN};
use libfuzzer_sys::fuzz_target;
use regex::Regex;

static PATTERN: LazyLock<Regex> = LazyLock::new(|| Regex::new(SECRET_PATTERN).expect("pattern"));

#[derive(Debug, Arbitrary)]
struct Input<'a> {
    secret: &'a str,
    key: Vec<u8>,
    padded: bool,
    msg_id: &'a str,
    timestamp: i64,
    body: &'a [u8],
    header: &'a str,
}

fuzz_target!(|inp: Input<'_>| {
    let parsed = AlertSecret::parse(inp.secret);
    assert_eq!(
        parsed.is_ok(),
        PATTERN.is_match(inp.secret),
        "parse and SECRET_PATTERN disagree on {:?}",
        inp.secret
    );
    if let Err(e) = &parsed {
        // The sentence says what is wrong, never the value.
        assert!(e.starts_with("must be \"whsec_\""), "{e}");
    }

    // A secret made from key bytes, with and without padding.
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(&inp.key);
    let b64 = if inp.padded {
        b64
    } else {
        b64.trim_end_matches('=').to_owned()
    };
    let text = format!("whsec_{b64}");
    let made = AlertSecret::parse(&text);
    assert_eq!(
        made.is_ok(),
        (24..=64).contains(&inp.key.len()),
        "{} bytes",
        inp.key.len()
    );
    assert_eq!(made.is_ok(), PATTERN.is_match(&text), "{text}");

    for secret in [parsed.ok(), made.ok()].into_iter().flatten() {
        assert!(!format!("{secret:?}").contains(secret.expose()));
        let sig = secret.sign(inp.msg_id, inp.timestamp, inp.body);
        assert!(sig.starts_with("v1,"));
        assert!(secret.verify(inp.msg_id, inp.timestamp, inp.body, &sig));
        assert!(secret.verify(
            inp.msg_id,
            inp.timestamp,
            inp.body,
            &format!("v1a,x {sig} v2,y")
        ));
        let unpadded = sig.trim_end_matches('=');
        assert!(secret.verify(inp.msg_id, inp.timestamp, inp.body, unpadded));
        assert!(!secret.verify(inp.msg_id, inp.timestamp.wrapping_add(1), inp.body, &sig));
        assert!(!secret.verify(&format!("{}x", inp.msg_id), inp.timestamp, inp.body, &sig));
        let mut other = inp.body.to_vec();
        other.push(b'!');
        assert!(!secret.verify(inp.msg_id, inp.timestamp, &other, &sig));
        // Whatever the header says, checking it never panics; it verifies only when it holds
        // this signature.
        let ok = secret.verify(inp.msg_id, inp.timestamp, inp.body, inp.header);
        if ok {
            assert!(inp
                .header
                .split(' ')
                .any(|p| p.strip_prefix("v1,").is_some()));
        }
    }
});
