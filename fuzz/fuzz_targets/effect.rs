//! The effect rules that read what a caller or a destination sent: the URL a record shows
//! has no userinfo, query string or fragment (and showing it twice changes nothing); a kept
//! response holds only the listed headers, lowercase, without control characters, and a body
//! that is exactly what was read (JSON only for a JSON type and an untruncated body that
//! parses; text when UTF-8; else base64 of the bytes); request bodies give back their bytes;
//! the request fingerprint ignores nothing it should keep and is deterministic.
#![no_main]

use arbitrary::Arbitrary;
use base64::Engine;
use idem_core::effect::{
    self, capture, kept_header, reconcile_result, url_without_query, Body, CapturedBody, Method,
    Reconciled, KEPT_HEADERS,
};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

#[derive(Debug, Arbitrary)]
struct Input<'a> {
    url: &'a str,
    status: u16,
    headers: Vec<(u8, &'a str, &'a [u8])>,
    body: &'a [u8],
    truncated: bool,
    method: &'a str,
    found: Vec<u16>,
    not_found: Vec<u16>,
    lookup: Option<u16>,
}

const NAMES: [&str; 9] = [
    "Content-Type",
    "content-type",
    "Location",
    "Retry-After",
    "X-Request-Id",
    "Idempotency-Key",
    "Idempotent-Replayed",
    "Set-Cookie",
    "Authorization",
];

fuzz_target!(|inp: Input<'_>| {
    // The URL a record shows.
    let shown = url_without_query(inp.url);
    if !shown.is_empty() {
        let u = url::Url::parse(&shown).expect("what is shown is a URL");
        assert_eq!(u.query(), None, "{shown}");
        assert_eq!(u.fragment(), None, "{shown}");
        assert_eq!(u.password(), None, "{shown}");
        if !u.cannot_be_a_base() {
            assert_eq!(u.username(), "", "{shown}");
        }
        assert_eq!(url_without_query(&shown), shown, "idempotent");
    } else {
        assert!(
            url::Url::parse(inp.url).is_err(),
            "{:?} parses but shows nothing",
            inp.url
        );
    }

    // A kept response.
    let headers: Vec<(&str, &[u8])> = inp
        .headers
        .iter()
        .take(16)
        .map(|(pick, name, value)| {
            let name = if pick.is_multiple_of(2) {
                NAMES[usize::from(pick / 2) % NAMES.len()]
            } else {
                name
            };
            (name, *value)
        })
        .collect();
    let c = capture(inp.status, headers.iter().copied(), inp.body, inp.truncated);
    assert_eq!(c.status, inp.status);
    assert_eq!(c.truncated, inp.truncated);
    for (name, value) in &c.headers {
        assert!(KEPT_HEADERS.contains(&name.as_str()), "{name} kept");
        assert!(
            !value.chars().any(|ch| ch.is_control() && ch != '\t'),
            "{value:?}"
        );
        let sent = headers.iter().any(|(n, v)| {
            n.eq_ignore_ascii_case(name) && std::str::from_utf8(v).is_ok_and(|v| value.contains(v))
        });
        assert!(sent, "{name}: {value:?} was not sent");
    }
    for (name, value) in &headers {
        let visible = std::str::from_utf8(value)
            .is_ok_and(|v| !v.chars().any(|ch| ch.is_control() && ch != '\t'));
        if kept_header(name) && visible {
            assert!(
                c.headers.contains_key(&name.to_ascii_lowercase()),
                "{name} dropped"
            );
        }
        if !kept_header(name) {
            assert!(
                !c.headers.contains_key(&name.to_ascii_lowercase()),
                "{name} kept"
            );
        }
    }
    match &c.body {
        CapturedBody::Empty => assert!(inp.body.is_empty()),
        CapturedBody::Json(v) => {
            assert!(!inp.truncated);
            assert_eq!(
                serde_json::from_slice::<Value>(inp.body).ok().as_ref(),
                Some(v)
            );
            let ct = c
                .headers
                .get("content-type")
                .expect("a JSON body has a JSON type");
            let mime = ct
                .split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase();
            assert!(
                mime == "application/json"
                    || (mime.starts_with("application/") && mime.ends_with("+json")),
                "{ct}"
            );
        }
        CapturedBody::Text(s) => {
            if std::str::from_utf8(inp.body).is_ok() {
                assert_eq!(s.as_bytes(), inp.body);
            } else {
                assert!(inp.truncated);
                assert!(inp.body.starts_with(s.as_bytes()));
                assert!(
                    inp.body.len() - s.len() < 4,
                    "only a cut character is left out"
                );
            }
        }
        CapturedBody::Base64(b) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(b)
                .expect("base64");
            assert_eq!(bytes, inp.body);
            assert!(std::str::from_utf8(inp.body).is_err());
        }
    }
    let j = c.to_json();
    assert_eq!(j["status"], Value::from(inp.status));
    assert_eq!(j["truncated"], Value::Bool(inp.truncated));
    assert!(j.get("body").is_some() != j.get("body_base64").is_some());

    // Request bodies and the request fingerprint.
    let text = String::from_utf8_lossy(inp.body).into_owned();
    assert_eq!(
        Body::Text(text.clone()).bytes().ok(),
        Some(text.clone().into_bytes())
    );
    let b64 = base64::engine::general_purpose::STANDARD.encode(inp.body);
    assert_eq!(
        Body::Base64(b64.clone()).bytes().ok().as_deref(),
        Some(inp.body)
    );
    let given_b64 = Body::Base64(text.clone()).bytes();
    assert_eq!(
        given_b64.is_ok(),
        base64::engine::general_purpose::STANDARD
            .decode(&text)
            .is_ok()
    );
    if let Ok(v) = serde_json::from_slice::<Value>(inp.body) {
        let bytes = Body::Json(v.clone()).bytes().expect("a value serializes");
        assert_eq!(serde_json::from_slice::<Value>(&bytes).ok(), Some(v));
    }
    let method = Method::parse(inp.method);
    if let Some(m) = method {
        assert_eq!(m.as_str(), inp.method);
        let t = effect::fingerprint(m, inp.url, Some(&Body::Text(text.clone())));
        assert_eq!(
            t,
            effect::fingerprint(m, inp.url, Some(&Body::Text(text.clone())))
        );
        let b = effect::fingerprint(m, inp.url, Some(&Body::Base64(b64)));
        let none = effect::fingerprint(m, inp.url, None);
        assert!(t.is_ok() && b.is_ok() && none.is_ok());
        assert_ne!(t, b, "text and base64 bodies are tagged apart");
        assert_ne!(t, none);
    } else {
        assert!(!["POST", "PUT", "PATCH", "DELETE"].contains(&inp.method));
    }

    // The reconcile lookup: `found` wins, no answer is unknown.
    let r = reconcile_result(inp.lookup, &inp.found, &inp.not_found);
    let want = match inp.lookup {
        Some(s) if inp.found.contains(&s) => Reconciled::Found,
        Some(s) if inp.not_found.contains(&s) => Reconciled::NotFound,
        _ => Reconciled::Unknown,
    };
    assert_eq!(r, want);
});
