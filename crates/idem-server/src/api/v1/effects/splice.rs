//! An answer that carries one large JSON value in several places — an effect's `response`
//! and its `record.result` are the same stored answer — written once and sent from that one
//! buffer.
//!
//! The answer is serialized with a placeholder string in place of the value; the placeholder
//! is a per-process random text that nothing a client sends can guess. The text is then cut at
//! every quoted placeholder and sent as its parts with the value's bytes between them, one
//! shared buffer for every place. The client reads the same bytes as from
//! `serde_json::to_vec` of the whole answer, with a `Content-Length`. When the placeholder
//! is not found exactly where expected, the caller serializes the whole answer instead.
//!
//! It owns only the cutting and the body; it must never change what an answer says.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::LazyLock;
use std::task::{Context, Poll};

use bytes::Bytes;
use serde_json::Value;

/// A value only this process writes: 128 random bits.
static PLACEHOLDER: LazyLock<String> = LazyLock::new(|| {
    let bits: u128 = rand::random();
    format!("idem-splice-{bits:032x}")
});

/// The placeholder as a JSON string, to put where the value goes.
pub(crate) fn placeholder() -> Value {
    Value::String(PLACEHOLDER.clone())
}

/// The parts of `text` (serialized with [`placeholder`] in `places` places) with `value`'s
/// bytes in each place; `None` when the quoted placeholder does not occur exactly `places`
/// times.
pub(crate) fn splice(text: Vec<u8>, value: &Bytes, places: usize) -> Option<SplicedBody> {
    let quoted = format!("\"{}\"", *PLACEHOLDER);
    let pat = quoted.as_bytes();
    let text = Bytes::from(text);
    let mut parts = VecDeque::with_capacity(2 * places + 1);
    let mut from = 0;
    let mut found = 0;
    let mut at = 0;
    while at + pat.len() <= text.len() {
        if &text[at..at + pat.len()] == pat {
            parts.push_back(text.slice(from..at));
            parts.push_back(value.clone());
            found += 1;
            at += pat.len();
            from = at;
        } else {
            at += 1;
        }
    }
    if found != places {
        return None;
    }
    parts.push_back(text.slice(from..));
    parts.retain(|p| !p.is_empty());
    let len = parts.iter().map(|p| p.len() as u64).sum();
    Some(SplicedBody { parts, len })
}

/// The parts of an answer, sent one after the other with their exact total length.
pub(crate) struct SplicedBody {
    parts: VecDeque<Bytes>,
    len: u64,
}

impl SplicedBody {
    /// The answer's bytes, joined (for tests).
    #[cfg(test)]
    pub(crate) fn joined(&self) -> Vec<u8> {
        self.parts.iter().flat_map(|p| p.iter().copied()).collect()
    }
}

impl http_body::Body for SplicedBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        match self.parts.pop_front() {
            Some(part) => {
                self.len -= part.len() as u64;
                Poll::Ready(Some(Ok(http_body::Frame::data(part))))
            }
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.parts.is_empty()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_spliced_answer_is_the_whole_answer_byte_for_byte() {
        let big = json!({"status": 200, "body": {"id": "ch_1", "pad": "x".repeat(70_000)}});
        let whole =
            serde_json::to_vec(&json!({"response": big, "record": {"result": big, "k": 1}}))
                .expect("whole");
        let text = serde_json::to_vec(&json!({"response": placeholder(),
            "record": {"result": placeholder(), "k": 1}}))
        .expect("text");
        let value = Bytes::from(serde_json::to_vec(&big).expect("value"));
        let body = splice(text, &value, 2).expect("two places");
        assert_eq!(body.joined(), whole);
        assert_eq!(
            http_body::Body::size_hint(&body).exact(),
            Some(whole.len() as u64)
        );
    }

    #[test]
    fn a_placeholder_count_other_than_expected_gives_none() {
        let text = serde_json::to_vec(&json!({"response": placeholder()})).expect("text");
        assert!(splice(text.clone(), &Bytes::from_static(b"1"), 2).is_none());
        assert!(splice(text, &Bytes::from_static(b"1"), 1).is_some());
        // The placeholder's text inside a longer string is not a place.
        let inside = format!("a{}", *PLACEHOLDER);
        let text = serde_json::to_vec(&json!({ "k": inside })).expect("text");
        assert!(splice(text, &Bytes::from_static(b"1"), 1).is_none());
    }
}
