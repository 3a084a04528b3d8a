//! Keys, namespaces and fencing tokens: an identifier is accepted exactly when it obeys its
//! rule (key: 1–255 bytes of 0x21–0x7E; namespace: 1–128 of `A-Z a-z 0-9 . _ - :`; token:
//! `<u32>.<32 lowercase hex>`), what is accepted reads back unchanged, the error of a refused
//! key names the first offending byte, a masked key never shows more than its first six
//! characters, and a key as a URL path segment decodes back to itself.
#![no_main]

use idem_core::effect::{encode_path_segment, reconcile_url};
use idem_core::ids::{mask_key, Key, LeaseId, Namespace, Token, ValidationError};
use libfuzzer_sys::fuzz_target;

fn key_rule(s: &str) -> Result<(), ValidationError> {
    let b = s.as_bytes();
    if b.is_empty() || b.len() > 255 {
        return Err(ValidationError::KeyLength(b.len()));
    }
    match b.iter().position(|c| !(0x21..=0x7e).contains(c)) {
        Some(pos) => Err(ValidationError::KeyByte { byte: b[pos], pos }),
        None => Ok(()),
    }
}

fn namespace_ok(s: &str) -> bool {
    let n = s.chars().count();
    (1..=128).contains(&n)
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b':'))
}

fn percent_decode(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(&b[i + 1..i + 3]).expect("ascii escape");
            out.push(u8::from_str_radix(hex, 16).expect("two hex digits"));
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let s = String::from_utf8_lossy(data);
    let s: &str = &s;

    // Key.
    let key = Key::try_from(s);
    assert_eq!(key.as_ref().map(|_| ()), key_rule(s).as_ref().map(|_| ()));
    if let Err(e) = &key {
        assert_eq!(Err(e.clone()), key_rule(s), "{s:?}");
        assert!(!e.to_string().is_empty());
    }
    if let Ok(k) = &key {
        assert_eq!(k.as_str(), s);
        assert_eq!(k.to_string(), s);
        assert_eq!(Key::try_from(k.to_string()).as_ref(), Ok(k));
        assert_eq!(k.sha256_hex().len(), 64);
        // A key is visible ASCII, so its path segment is unreserved bytes and %XX only, and
        // decodes to the key.
        let seg = encode_path_segment(k.as_str());
        assert!(seg
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'%')));
        assert_eq!(percent_decode(&seg), s.as_bytes());
        let url = reconcile_url("https://h.example/orders/{key}?k={key}", k.as_str());
        assert!(!url.contains("{key}"), "{url}");
        assert_eq!(url.matches('?').count(), 1, "{url}");
    }

    // Masking: six characters, an ellipsis, eight hex digits; never the rest of the text.
    let m = mask_key(s);
    let head: String = s.chars().take(6).collect();
    let tail = m
        .strip_prefix(head.as_str())
        .expect("mask starts with the head");
    let hex = tail.strip_prefix('…').expect("then an ellipsis");
    assert_eq!(hex.len(), 8);
    assert!(hex.bytes().all(|b| b.is_ascii_hexdigit()));
    if let Ok(k) = &key {
        assert_eq!(k.masked(), m);
    }

    // Namespace.
    let ns = Namespace::try_from(s);
    assert_eq!(ns.is_ok(), namespace_ok(s), "{s:?}");
    if let Ok(n) = &ns {
        assert_eq!(n.as_str(), s);
        assert_eq!(Namespace::try_from(n.to_string()).as_ref(), Ok(n));
        // A namespace is always a valid key too (the alphabet is a subset).
        assert!(Key::try_from(s).is_ok());
    }

    // Fencing token.
    match Token::parse(s) {
        Some(t) => {
            let (a, l) = s.split_once('.').expect("a token has a dot");
            assert_eq!(a.parse::<u32>().ok(), Some(t.attempt));
            assert_eq!(t.lease_id.as_str(), l);
            assert_eq!(l.len(), 32);
            // Its own string form parses to the same token, and Debug never shows the lease.
            assert!(Token::parse(&t.secret()) == Some(t.clone()));
            assert!(!format!("{t:?}").contains(l));
            assert!(!format!("{:?}", t.lease_id).contains(l));
        }
        None => {
            if let Some((a, l)) = s.split_once('.') {
                let ok = a.parse::<u32>().is_ok()
                    && l.len() == 32
                    && l.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
                assert!(!ok, "{s:?} refused");
            }
        }
    }
    if let Ok(attempt) = s.parse::<u32>() {
        let t = Token::new(
            attempt,
            LeaseId::from_stored("0123456789abcdef0123456789abcdef".into()),
        );
        assert!(Token::parse(&t.secret()) == Some(t));
    }
});
