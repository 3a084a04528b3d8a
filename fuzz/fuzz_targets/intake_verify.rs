//! Fuzzes the intake's signature verification: every provider's header parsers (Stripe's
//! `t=…,v1=…` list, Standard Webhooks' `v1,<b64>` list, prefixed hex/base64 digests,
//! timestamps, Twilio's form parameters and URL variants, HubSpot's URI decoding).
//!
//! Input layout: byte 0 picks the provider, byte 1 the configured `hmac` scheme and the
//! number of secrets; the rest is `name: value` header lines, an empty line, then the body.
//! Nothing may panic, and nothing unsigned may verify.
#![no_main]

use http::{HeaderMap, HeaderName, HeaderValue};
use idem_intake::{
    verify, HmacAlgorithm, HmacEncoding, HmacScheme, HmacSigned, Provider, VerifyConfig,
};
use libfuzzer_sys::fuzz_target;

fn split_request(data: &[u8]) -> (HeaderMap, &[u8]) {
    let (head, body) = match data.windows(2).position(|w| w == b"\n\n") {
        Some(i) => (&data[..i], &data[i + 2..]),
        None => (data, &[][..]),
    };
    let mut headers = HeaderMap::new();
    for line in head.split(|b| *b == b'\n') {
        let Some(colon) = line.iter().position(|b| *b == b':') else {
            continue;
        };
        let value = line[colon + 1..]
            .strip_prefix(b" ")
            .unwrap_or(&line[colon + 1..]);
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(&line[..colon]),
            HeaderValue::from_bytes(value),
        ) {
            headers.append(n, v);
        }
    }
    (headers, body)
}

fuzz_target!(|data: &[u8]| {
    let [p, cfg, rest @ ..] = data else {
        return;
    };
    let provider = Provider::ALL[usize::from(*p) % Provider::ALL.len()];
    let scheme = HmacScheme {
        header: "x-signature".into(),
        algorithm: [
            HmacAlgorithm::Sha1,
            HmacAlgorithm::Sha256,
            HmacAlgorithm::Sha512,
        ][usize::from(cfg & 3) % 3],
        encoding: if cfg & 4 == 0 {
            HmacEncoding::Hex
        } else {
            HmacEncoding::Base64
        },
        prefix: (cfg & 8 != 0).then(|| "sha256=".into()),
        timestamp_header: (cfg & 16 != 0).then(|| "x-timestamp".into()),
        signed: if cfg & 32 == 0 {
            HmacSigned::Body
        } else {
            HmacSigned::TimestampBody
        },
    };
    let secrets: Vec<String> = [
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "plain-secret",
        "",
        "whsec_not-base64",
    ]
    .iter()
    .take(1 + usize::from(cfg >> 6))
    .map(|s| (*s).to_owned())
    .collect();
    let (headers, body) = split_request(rest);
    let cfg = VerifyConfig {
        provider,
        secrets: &secrets,
        tolerance_ms: 300_000,
        hmac: Some(&scheme),
        public_url: Some("https://hooks.example.com:8443/in/src?x=%3A"),
    };
    let outcome = verify(&cfg, "POST", &headers, body, 1_700_000_000_000);
    // An input the fuzzer made up carries no valid MAC: accepting one is a bug.
    assert!(outcome.is_err(), "unsigned input verified");

    let text = String::from_utf8_lossy(rest);
    let _ = idem_intake::verify::hubspot_decode_uri(&text);
    let _ = idem_intake::verify::twilio_url_variants(&text);
    let _ = idem_intake::verify::twilio_params_text(body);
    let _ = idem_intake::verify::twilio_json_url(&text, body);
});
