//! Page cursors are opaque text a client sends back: decoding any text never panics, a cursor
//! that decodes carries a valid key (and namespace), encodes to text that decodes to the same
//! cursor, and a cursor of one list is never taken for a cursor of the other.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use idem_core::ids::{Key, Namespace};
use idem_store::{Cursor, ReviewCursor};
use libfuzzer_sys::fuzz_target;

fn check_list(c: &Cursor) {
    assert!(Key::try_from(c.key.as_str()).is_ok(), "{c:?}");
    let text = c.encode();
    assert!(text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')));
    assert_eq!(Cursor::decode(&text).as_ref(), Some(c));
    assert_eq!(
        ReviewCursor::decode(&text),
        None,
        "list cursor read as a review cursor"
    );
}

fn check_review(c: &ReviewCursor) {
    assert!(Key::try_from(c.key.as_str()).is_ok(), "{c:?}");
    assert!(Namespace::try_from(c.namespace.as_str()).is_ok(), "{c:?}");
    let text = c.encode();
    assert_eq!(ReviewCursor::decode(&text).as_ref(), Some(c));
    assert_eq!(
        Cursor::decode(&text),
        None,
        "review cursor read as a list cursor"
    );
}

fuzz_target!(|data: &[u8]| {
    // The input as cursor text, raw and as the hex of the input (to reach the inner parser).
    for text in [
        String::from_utf8_lossy(data).into_owned(),
        hex::encode(data),
    ] {
        if let Some(c) = Cursor::decode(&text) {
            check_list(&c);
        }
        if let Some(c) = ReviewCursor::decode(&text) {
            check_review(&c);
        }
    }

    // Cursors built from parts: every valid one round-trips.
    let mut u = Unstructured::new(data);
    let (Ok(t), Ok(ns), Ok(key)) = (
        i64::arbitrary(&mut u),
        <&str>::arbitrary(&mut u),
        <&str>::arbitrary(&mut u),
    ) else {
        return;
    };
    if let Ok(k) = Key::try_from(key) {
        check_list(&Cursor {
            updated_at: t,
            key: k.as_str().to_owned(),
        });
        if let Ok(n) = Namespace::try_from(ns) {
            check_review(&ReviewCursor {
                updated_at: t,
                namespace: n.as_str().to_owned(),
                key: k.as_str().to_owned(),
            });
        }
    }
});
