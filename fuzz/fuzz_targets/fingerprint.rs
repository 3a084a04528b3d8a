//! The JCS fingerprint of a payload depends on the JSON value only: member order, whitespace,
//! number spelling and string escapes never change it, its canonical text reads back as the
//! same fingerprint, every fingerprint is 64 lowercase hex digits that `parse` accepts, and
//! the canonical text is byte for byte what the general-purpose RFC 8785 writer
//! (`serde_json_canonicalizer`) makes of the same value.
#![no_main]

use idem_core::fingerprint::{canonical_json, Fingerprint};
use idem_fuzz::{as_floats, json, respell};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fn reread(text: &str) -> Value {
    match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => panic!("re-spelled JSON does not read back: {e}\n{text}"),
    }
}

fuzz_target!(|data: &[u8]| {
    // Any text as a precomputed fingerprint: accepted exactly when it is 64 hex digits.
    if let Ok(s) = std::str::from_utf8(data) {
        let hex64 = s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit());
        match Fingerprint::parse(s) {
            Ok(f) => {
                assert!(hex64, "{s:?} accepted");
                assert_eq!(f.as_str(), s.to_ascii_lowercase());
            }
            Err(_) => assert!(!hex64, "{s:?} refused"),
        }
    }

    let Some(v) = json(data) else { return };
    let fp = Fingerprint::of_payload(&v);
    let canon = canonical_json(&v);
    let Ok(fp) = fp else {
        // A value that cannot be canonicalized cannot be in any other spelling either.
        assert!(canon.is_err());
        assert!(Fingerprint::of_payload(&reread(&respell(&v))).is_err());
        return;
    };
    let canon = canon.expect("fingerprinted, so canonicalized");
    match serde_json_canonicalizer::to_string(&v) {
        Ok(oracle) => assert_eq!(canon, oracle, "canonical text differs from the oracle's"),
        Err(e) => panic!("canonicalized here, refused by the oracle: {e}"),
    }

    // The fingerprint's own form.
    assert_eq!(fp.as_str().len(), 64);
    assert!(fp
        .as_str()
        .bytes()
        .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')));
    assert_eq!(Fingerprint::parse(fp.as_str()).ok().as_ref(), Some(&fp));
    assert_eq!(
        Fingerprint::parse(&fp.as_str().to_ascii_uppercase())
            .ok()
            .as_ref(),
        Some(&fp)
    );

    // serde_json's compact and pretty re-serializations.
    for text in [
        serde_json::to_string(&v).expect("a Value serializes"),
        serde_json::to_string_pretty(&v).expect("a Value serializes"),
    ] {
        let again = reread(&text);
        assert_eq!(again, v, "re-serialization changed the value: {text}");
        assert_eq!(Fingerprint::of_payload(&again).ok().as_ref(), Some(&fp));
    }

    // Members reversed, other whitespace, integers as floats, strings as \u escapes.
    let text = respell(&v);
    let again = reread(&text);
    assert_eq!(
        again,
        as_floats(&v),
        "re-spelling changed the value: {text}"
    );
    assert_eq!(
        Fingerprint::of_payload(&again).ok().as_ref(),
        Some(&fp),
        "re-spelled payload fingerprints differently: {text}"
    );

    // The canonical text is JSON, is its own canonical form, and fingerprints the same.
    let from_canon = reread(&canon);
    assert_eq!(
        canonical_json(&from_canon).ok().as_deref(),
        Some(canon.as_str())
    );
    assert_eq!(
        Fingerprint::of_payload(&from_canon).ok().as_ref(),
        Some(&fp)
    );
});
