//! Key derivation from identity fields: total (a key or a typed error, never a panic),
//! deterministic, independent of the event's member order and formatting (its re-serialization
//! and a re-spelled copy give the same answer), a malformed pointer is refused before any
//! value is looked up, and a derived key is either the plain values joined by `:` or 64 hex
//! digits, with the prefix and suffix around it.
//!
//! Input: the first 24 bytes choose the pointers, prefix, suffix and `hash`; the rest is the
//! event as JSON text.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use idem_core::derive::{derive_key, DeriveError};
use idem_fuzz::{as_floats, json, respell, safe_numbers};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

const HEAD: usize = 24;

/// Every JSON pointer that names a member or element of `v` (RFC 6901 escapes applied).
fn pointers(v: &Value, at: String, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let p = format!("{at}/{}", k.replace('~', "~0").replace('/', "~1"));
                out.push(p.clone());
                pointers(x, p, out);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                let p = format!("{at}/{i}");
                out.push(p.clone());
                pointers(x, p, out);
            }
        }
        _ => {}
    }
}

fn plain_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-')
}

fuzz_target!(|data: &[u8]| {
    let (head, body) = data.split_at(data.len().min(HEAD));
    let event = json(body).unwrap_or_else(|| Value::String(String::from_utf8_lossy(body).into()));
    let mut known = Vec::new();
    pointers(&event, String::new(), &mut known);

    let mut u = Unstructured::new(head);
    let force_hash = bool::arbitrary(&mut u).unwrap_or(false);
    let n = u.int_in_range(0..=4u8).unwrap_or(1);
    let mut fields = Vec::new();
    for _ in 0..n {
        let pick = u8::arbitrary(&mut u).unwrap_or(0);
        let field = match (pick % 4, known.is_empty()) {
            // Mostly pointers that exist, so the rules past the lookup are reached.
            (0..=2, false) => known[usize::from(pick) % known.len()].clone(),
            _ => <&str>::arbitrary(&mut u).unwrap_or("/").to_owned(),
        };
        fields.push(field);
    }
    let affix = |u: &mut Unstructured, sel: u8| -> Option<String> {
        match sel % 3 {
            0 => None,
            1 => Some(["crm", "receipt", "v2", "x:y"][usize::from(sel / 3) % 4].to_owned()),
            _ => Some(<&str>::arbitrary(u).unwrap_or("").to_owned()),
        }
    };
    let sel_p = u8::arbitrary(&mut u).unwrap_or(0);
    let prefix = affix(&mut u, sel_p);
    let sel_s = u8::arbitrary(&mut u).unwrap_or(0);
    let suffix = affix(&mut u, sel_s);

    let run = |ev: &Value| {
        derive_key(
            ev,
            &fields,
            prefix.as_deref(),
            suffix.as_deref(),
            force_hash,
        )
    };
    let got = run(&event);
    assert_eq!(got, run(&event), "derive is deterministic");

    // The event's formatting never matters.
    let compact: Value = serde_json::from_str(&serde_json::to_string(&event).expect("serializes"))
        .expect("reads back");
    assert_eq!(run(&compact), got);
    if safe_numbers(&event) {
        let respelled: Value = serde_json::from_str(&respell(&event)).expect("reads back");
        assert_eq!(respelled, as_floats(&event));
        assert_eq!(
            run(&respelled),
            got,
            "a re-spelled event derives another answer: {}",
            respell(&event)
        );
    }

    let malformed = fields.iter().any(|p| {
        let b = p.as_bytes();
        !p.starts_with('/')
            || b.iter()
                .enumerate()
                .any(|(i, &c)| c == b'~' && !matches!(b.get(i + 1), Some(b'0' | b'1')))
    });
    match &got {
        Ok(key) => {
            assert!(!fields.is_empty() && !malformed, "{fields:?}");
            let mut middle = key.as_str();
            if let Some(p) = &prefix {
                middle = middle
                    .strip_prefix(p.as_str())
                    .and_then(|m| m.strip_prefix(':'))
                    .expect("the key starts with the prefix");
            }
            if let Some(s) = &suffix {
                middle = middle
                    .strip_suffix(s.as_str())
                    .and_then(|m| m.strip_suffix(':'))
                    .expect("the key ends with the suffix");
            }
            let hashed = middle.len() == 64
                && middle
                    .bytes()
                    .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
            let plain = middle.split(':').count() == fields.len()
                && middle.split(':').all(|part| {
                    !part.is_empty() && part.len() <= 64 && part.bytes().all(plain_char)
                });
            assert!(hashed || plain, "{middle:?}");
            if force_hash {
                assert!(hashed, "hash asked for: {middle:?}");
            }
            for p in &fields {
                assert!(!matches!(event.pointer(p), None | Some(Value::Null)));
            }
        }
        Err(DeriveError::MissingField { pointer }) => {
            assert!(
                !malformed,
                "a malformed pointer is reported as such: {fields:?}"
            );
            assert!(fields.contains(pointer));
            assert!(matches!(event.pointer(pointer), None | Some(Value::Null)));
        }
        Err(DeriveError::InvalidField { field, message }) => {
            assert!(!field.is_empty() && !message.is_empty());
        }
    }
});
