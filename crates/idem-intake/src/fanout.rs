//! Fan-out (`INTAKE.md`, "Fan-out and destination limits"): which destinations of a source an
//! event goes to, under which key each delivery is kept, and how fast one destination may be
//! called.
//!
//! - A destination is `forward` (named [`DEFAULT`]) or a member of `forwards`. Its delivery
//!   of an event is kept under [`delivery_key`]: the event key itself for [`DEFAULT`] (so a
//!   source that only has `forward` reads exactly as before fan-out existed), else
//!   `{event key}:{NAME}` (hashed like an over-long id when that exceeds a key's 255 bytes).
//! - A [`Filter`] passes an event when the value at its JSON pointer (of the stored body: the
//!   element, for `split`) or of its inbound header is one of its `in` values; a destination
//!   without a filter takes every event. Matching never fails: a body that is not JSON simply
//!   has no value at any pointer.
//! - A [`Rate`] is the smallest spacing between two deliveries to one destination,
//!   [`Rate::interval_ms`]; the slot bookkeeping itself is the store's (shared by every
//!   instance on one ledger).
//!
//! Pure functions only: no I/O, and no body byte or header value in any error.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// The name of the destination `forward`.
pub const DEFAULT: &str = "default";
/// Most destinations of one source.
pub const MAX_DESTINATIONS: usize = 16;
/// Most values of one filter's `in`.
pub const MAX_FILTER_VALUES: usize = 100;

/// Which events a destination takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Filter {
    /// The JSON value at `pointer` of the event's body is one of `values`.
    Pointer { pointer: String, values: Vec<Value> },
    /// The inbound header `header` (its first value) is one of `values`.
    Header { header: String, values: Vec<String> },
}

impl Filter {
    /// Whether the event (its parsed body, `None` when not JSON, and its inbound headers)
    /// passes.
    pub fn passes(&self, doc: Option<&Value>, headers: &http::HeaderMap) -> bool {
        match self {
            Filter::Pointer { pointer, values } => doc
                .and_then(|d| d.pointer(pointer))
                .is_some_and(|v| values.contains(v)),
            Filter::Header { header, values } => headers
                .get(header.as_str())
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| values.iter().any(|x| x == v)),
        }
    }

    /// Whether checking this filter needs the body parsed.
    pub fn reads_body(&self) -> bool {
        matches!(self, Filter::Pointer { .. })
    }
}

/// How fast one destination may be called, across every instance sharing the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub per_second: Option<u32>,
    pub per_minute: Option<u32>,
}

impl Rate {
    /// The smallest spacing between two deliveries, ms (the stricter of both limits, at
    /// least 1).
    pub fn interval_ms(&self) -> i64 {
        let spacing =
            |per: Option<u32>, window: u64| per.map_or(0, |n| window.div_ceil(u64::from(n.max(1))));
        let ms = spacing(self.per_second, 1000).max(spacing(self.per_minute, 60_000));
        i64::try_from(ms).unwrap_or(i64::MAX).max(1)
    }
}

/// The ledger key of the delivery of the event `event_key` to destination `name`.
pub fn delivery_key(event_key: &str, name: &str) -> String {
    if name == DEFAULT {
        return event_key.to_owned();
    }
    let k = format!("{event_key}:{name}");
    if k.len() <= 255 {
        k
    } else {
        format!("sha256:{}", hex::encode(Sha256::digest(k.as_bytes())))
    }
}

/// The ledger key of the delivery of the event `event_key` to destination `name` when its
/// own key ([`delivery_key`]) was taken by a record that is not that delivery (an event whose
/// id is that key, a claim): the delivery is held for review under this key instead,
/// `sha256:{hex}` of a text with a line break, which no key and no other delivery key is
/// (an id is hashed only when it is no valid key, so only an event whose id is exactly that
/// text could meet it). Stable: the same event and destination always hold here.
pub fn held_delivery_key(event_key: &str, name: &str) -> String {
    let text = format!("held delivery\n{event_key}\n{name}");
    format!("sha256:{}", hex::encode(Sha256::digest(text.as_bytes())))
}

/// The names of the destinations (`(name, filter)`, in the source's order) that an event
/// with this body and these headers goes to. The body is parsed only when a filter needs it.
pub fn matching<'a>(
    destinations: impl IntoIterator<Item = (&'a str, Option<&'a Filter>)>,
    body: &[u8],
    headers: &http::HeaderMap,
) -> Vec<String> {
    let mut doc: Option<Option<Value>> = None;
    let mut out = Vec::new();
    for (name, filter) in destinations {
        let pass = match filter {
            None => true,
            Some(f) => {
                let d = if f.reads_body() {
                    doc.get_or_insert_with(|| serde_json::from_slice(body).ok())
                        .as_ref()
                } else {
                    None
                };
                f.passes(d, headers)
            }
        };
        if pass {
            out.push(name.to_owned());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn headers(pairs: &[(&'static str, &'static str)]) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        for (n, v) in pairs {
            h.insert(*n, http::HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn default_keeps_the_plain_key_and_others_get_a_suffix() {
        assert_eq!(delivery_key("evt_1", DEFAULT), "evt_1");
        assert_eq!(delivery_key("evt_1", "crm"), "evt_1:crm");
        let long = "k".repeat(250);
        let k = delivery_key(&long, "receipt");
        assert!(k.starts_with("sha256:") && k.len() == 71, "{k}");
        assert_eq!(k, delivery_key(&long, "receipt"));
        assert_ne!(k, delivery_key(&long, "slack"));
        // A delivery held because its key was taken: stable, its own, never a delivery key.
        let h = held_delivery_key("evt_1", "crm");
        assert!(h.starts_with("sha256:") && h.len() == 71, "{h}");
        assert_eq!(h, held_delivery_key("evt_1", "crm"));
        assert_ne!(h, held_delivery_key("evt_1", "email"));
        assert_ne!(h, held_delivery_key("evt_2", "crm"));
        assert_ne!(h, delivery_key("evt_1", "crm"));
    }

    #[test]
    fn filters_pick_destinations_by_pointer_or_header() {
        let paid = Filter::Pointer {
            pointer: "/type".into(),
            values: vec![json!("invoice.paid"), json!("charge.succeeded")],
        };
        let live = Filter::Header {
            header: "x-mode".into(),
            values: vec!["live".into()],
        };
        let dests = [
            ("crm", None),
            ("receipt", Some(&paid)),
            ("slack", Some(&live)),
        ];
        let body = br#"{"id":"evt_1","type":"invoice.paid"}"#;
        assert_eq!(
            matching(dests, body, &headers(&[("x-mode", "live")])),
            ["crm", "receipt", "slack"]
        );
        assert_eq!(
            matching(dests, br#"{"type":"invoice.created"}"#, &headers(&[])),
            ["crm"]
        );
        // Not JSON: no pointer has a value; the header filter still works.
        assert_eq!(
            matching(dests, b"not json", &headers(&[("x-mode", "live")])),
            ["crm", "slack"]
        );
        // Values compare as JSON: the number 1 is not the string "1".
        let one = Filter::Pointer {
            pointer: "/n".into(),
            values: vec![json!(1)],
        };
        assert!(one.passes(Some(&json!({"n": 1})), &headers(&[])));
        assert!(!one.passes(Some(&json!({"n": "1"})), &headers(&[])));
        assert!(matching([("a", Some(&one))], b"{}", &headers(&[])).is_empty());
    }

    #[test]
    fn a_rate_is_the_stricter_spacing() {
        let r = |s, m| Rate {
            per_second: s,
            per_minute: m,
        };
        assert_eq!(r(Some(5), None).interval_ms(), 200);
        assert_eq!(r(None, Some(60)).interval_ms(), 1000);
        assert_eq!(r(Some(10), Some(60)).interval_ms(), 1000);
        assert_eq!(r(Some(3), None).interval_ms(), 334);
        assert_eq!(r(Some(5000), None).interval_ms(), 1);
    }
}
