//! Fuzzes the intake's event reading: JSON and form bodies, RFC 6901 pointers, batch
//! splitting, header ids, key derivation and Slack's challenge.
//!
//! Input layout: byte 0 picks the provider, byte 1 the `split` and `event_id` rule; the rest
//! is `name: value` header lines, an empty line, then the body. Nothing may panic, every key
//! must be a valid idem key, a held event's key is the hash of its stored bytes, and an
//! unsplit body's pointer id (read in one pass without building the document) is the one
//! the parsed document has at that pointer.
#![no_main]

use http::{HeaderMap, HeaderName, HeaderValue};
use idem_intake::{held_key, read_events, slack_challenge, EventIdRule, Provider};
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

/// The id the parsed document has at `p`, as the contract reads ids: a non-empty string, or
/// an integer's decimal text.
fn parsed_id(body: &[u8], p: &str) -> Option<String> {
    let doc: serde_json::Value = serde_json::from_slice(body).ok()?;
    match doc.pointer(p)? {
        serde_json::Value::String(s) if !s.is_empty() => Some(s.clone()),
        serde_json::Value::Number(n) => n
            .as_i64()
            .map(|i| i.to_string())
            .or_else(|| n.as_u64().map(|u| u.to_string())),
        _ => None,
    }
}

const POINTERS: [&str; 8] = ["", "/", "/id", "/items", "/a/0/b", "/~0~1", "/-", "bad"];

fuzz_target!(|data: &[u8]| {
    let [p, sel, rest @ ..] = data else {
        return;
    };
    let provider = Provider::ALL[usize::from(*p) % Provider::ALL.len()];
    let split = match sel & 15 {
        n if n < 8 => Some(POINTERS[usize::from(n)]),
        8 => provider.default_split(),
        _ => None,
    };
    let rule = match sel >> 4 {
        0..=7 => Some(EventIdRule::Pointer(POINTERS[usize::from(sel >> 4)].into())),
        8 => Some(EventIdRule::Header("x-event-id".into())),
        _ => None,
    };
    let (headers, body) = split_request(rest);
    let events = read_events(provider, rule.as_ref(), split, &headers, body);
    assert!(!events.is_empty());
    if split.is_none() {
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].body, body);
        if let Some(EventIdRule::Pointer(p)) = &rule {
            assert_eq!(events[0].event_id, parsed_id(body, p));
        }
    }
    for e in &events {
        assert!(idem_core::ids::Key::try_from(e.key.as_str()).is_ok());
        assert_eq!(e.held(), e.key.starts_with("body-sha256:"));
        if e.held() {
            assert_eq!(e.key, held_key(&e.body));
        }
    }
    let _ = slack_challenge(body);
});
