//! The console's sign-in reads two things a browser (or anyone) sends: the `Cookie` header,
//! where the session is found by the cookie's exact name, and the `next` field of the sign-in
//! form, the place the answer redirects to. Cookie lookup on any header bytes never panics
//! and agrees with a plain reading of `name=value; …` (the first pair with exactly that name,
//! across every `Cookie` header). A place to return to is always a console page of this site:
//! `/console` itself or below it (never `//`, `\`, the sign-in or sign-out pages), the input
//! unchanged when it is one, and always a valid `Location` value that a browser resolves to
//! this origin under `/console`.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use http::header::COOKIE;
use http::{HeaderMap, HeaderValue};
use idem_server::fuzzing::{cookie, safe_next};
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
struct Pair<'a> {
    name: &'a str,
    value: &'a str,
    /// Spaces before the name (browsers write `; ` between pairs).
    pad: u8,
}

fn check_next(n: &str) {
    let out = safe_next(Some(n));
    assert!(
        out == "/console" || out.starts_with("/console/") || out.starts_with("/console?"),
        "{n:?} -> {out:?}"
    );
    assert!(
        !out.contains("//") && !out.contains('\\'),
        "{n:?} -> {out:?}"
    );
    assert!(
        !out.starts_with("/console/login") && !out.starts_with("/console/logout"),
        "{n:?} -> {out:?}"
    );
    assert!(out == n || out == "/console", "{n:?} -> {out:?}");
    // Sent as `Location`: it must be a header value (else the redirect is a 500).
    assert!(HeaderValue::from_str(&out).is_ok(), "{n:?} -> {out:?}");
    // What a browser makes of it: this site, under /console.
    let base = url::Url::parse("https://idem.example/console/review").expect("base");
    let at = base.join(&out).expect("a path joins");
    assert_eq!(at.origin(), base.origin(), "{n:?} -> {out:?}");
    assert!(at.path().starts_with("/console"), "{n:?} -> {at}");
    assert_eq!(safe_next(Some(&out)), out, "not a fixed point: {out:?}");
}

/// The value of `name` read the plain way: split every header at `;`, trim, split at the
/// first `=`, the first pair whose name is exactly `name`.
fn reference(headers: &[Vec<u8>], name: &str) -> Option<String> {
    headers
        .iter()
        // What a header's text is: visible ASCII, spaces and tabs only.
        .filter(|h| h.iter().all(|&b| (0x20..0x7f).contains(&b) || b == b'\t'))
        .filter_map(|h| std::str::from_utf8(h).ok())
        .flat_map(|h| h.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    // The input as a place to return to, raw and below /console.
    let text = String::from_utf8_lossy(data);
    check_next(&text);
    check_next(&format!("/console/{text}"));
    check_next(&format!("/console?{text}"));

    // Cookie headers: written from pairs, or arbitrary bytes.
    let Ok(pairs) = u.arbitrary::<Vec<Pair>>() else {
        return;
    };
    let Ok(raw) = u.arbitrary::<Vec<Vec<u8>>>() else {
        return;
    };
    let Ok(wanted) = u.arbitrary::<&str>() else {
        return;
    };
    let written: String = pairs
        .iter()
        .map(|p| {
            format!(
                "{}{}={}",
                " ".repeat(usize::from(p.pad % 3)),
                p.name,
                p.value
            )
        })
        .collect::<Vec<_>>()
        .join(";");
    let mut headers = HeaderMap::new();
    let mut sent = Vec::new();
    for h in std::iter::once(written.into_bytes()).chain(raw) {
        if let Ok(v) = HeaderValue::from_bytes(&h) {
            headers.append(COOKIE, v);
            sent.push(h);
        }
    }
    for name in std::iter::once(wanted).chain(pairs.iter().map(|p| p.name)) {
        let got = cookie(&headers, name);
        assert_eq!(got, reference(&sent, name), "{name:?}");
        if let Some(v) = &got {
            assert!(!v.contains(';'), "{name:?}: {v:?}");
        }
    }
    // A session cookie written the way the console writes it is found again.
    if let Some(p) = pairs.first() {
        let v: String = p
            .value
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .collect();
        if let Ok(h) = HeaderValue::from_str(&format!("other=1; idem_session={v}; x=y")) {
            let mut one = HeaderMap::new();
            one.append(COOKIE, h);
            assert_eq!(cookie(&one, "idem_session"), Some(v));
        }
    }
});
