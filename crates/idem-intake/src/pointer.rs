//! The value an RFC 6901 pointer names in a JSON text, read in one pass without building
//! the document: the members and elements off the pointer's path are parsed and checked but
//! not kept, so a 1 KiB Stripe event yields its `id` without a map, a key or a copy of its
//! strings.
//!
//! It must answer exactly what `serde_json::from_slice::<Value>(text)` followed by
//! [`Value::pointer`] answers, for every input: the same texts are JSON (every skipped value
//! goes through the same parser as a `Value` would, numbers, escapes and UTF-8 included; the
//! same nesting limit; only whitespace after the document), a repeated member name resolves
//! to its last occurrence (as a `Value` object keeps it), and tokens are unescaped and array
//! indexes read as `Value::pointer` reads them. The tests compare the two on generated and
//! hand-picked texts; the `intake_ids` fuzz target does too.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;

/// The value `pointer` names in the JSON text `text`; `None` when `text` is not JSON or the
/// pointer does not resolve (or is not a pointer: not empty and not starting with `/`).
pub(crate) fn value_at(text: &[u8], pointer: &str) -> Option<Value> {
    let tokens: Vec<String> = if pointer.is_empty() {
        Vec::new()
    } else {
        let rest = pointer.strip_prefix('/')?;
        // `Value::pointer`'s unescaping, in its order: `~1` first, then `~0`.
        rest.split('/')
            .map(|t| t.replace("~1", "/").replace("~0", "~"))
            .collect()
    };
    let mut de = serde_json::Deserializer::from_slice(text);
    let found = At { tokens: &tokens }.deserialize(&mut de).ok()?;
    de.end().ok()?;
    found
}

/// `Value::pointer`'s array index: decimal, no sign, no leading zero.
fn index(token: &str) -> Option<usize> {
    if token.starts_with('+') || (token.starts_with('0') && token.len() != 1) {
        return None;
    }
    token.parse().ok()
}

/// Reads one value, keeping only what `tokens` (the rest of the pointer) names in it.
struct At<'p> {
    tokens: &'p [String],
}

impl<'de> DeserializeSeed<'de> for At<'_> {
    type Value = Option<Value>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<Value>, D::Error> {
        if self.tokens.is_empty() {
            return Value::deserialize(d).map(Some);
        }
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for At<'_> {
    type Value = Option<Value>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (head, rest) = self
            .tokens
            .split_first()
            .map_or((None, &[][..]), |(h, r)| (Some(h), r));
        let mut found = None;
        while let Some(name) = map.next_key::<Name<'_>>()? {
            if name.is(head) {
                // A repeated name: the last occurrence is the member, as in a `Value`.
                found = map.next_value_seed(At { tokens: rest })?;
            } else {
                map.next_value::<Checked>()?;
            }
        }
        Ok(found)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let (head, rest) = self
            .tokens
            .split_first()
            .map_or((None, &[][..]), |(h, r)| (Some(h), r));
        let wanted = head.and_then(|t| index(t));
        let mut found = None;
        let mut i = 0usize;
        loop {
            if Some(i) == wanted {
                match seq.next_element_seed(At { tokens: rest })? {
                    Some(v) => found = v,
                    None => break,
                }
            } else if seq.next_element::<Checked>()?.is_none() {
                break;
            }
            i = i.saturating_add(1);
        }
        Ok(found)
    }
}

/// A member name, borrowed from the text when it has no escapes.
struct Name<'a>(std::borrow::Cow<'a, str>);

impl Name<'_> {
    fn is(&self, token: Option<&String>) -> bool {
        token.is_some_and(|t| *t == *self.0)
    }
}

impl<'de> Deserialize<'de> for Name<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Name<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Name<'de>, E> {
                Ok(Name(s.into()))
            }
            fn visit_str<E>(self, s: &str) -> Result<Name<'de>, E> {
                Ok(Name(s.to_owned().into()))
            }
            fn visit_string<E>(self, s: String) -> Result<Name<'de>, E> {
                Ok(Name(s.into()))
            }
        }
        d.deserialize_str(V)
    }
}

/// A value off the pointer's path: parsed as a `Value` would be (`deserialize_any`, so
/// numbers are read and range-checked, strings unescaped and UTF-8 checked), then dropped.
/// `IgnoredAny` alone would not do: serde_json skips it without those checks.
struct Checked;

impl<'de> Deserialize<'de> for Checked {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(CheckedVisitor)
    }
}

struct CheckedVisitor;

impl<'de> Visitor<'de> for CheckedVisitor {
    type Value = Checked;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_str<E>(self, _: &str) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_unit<E>(self) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Checked, A::Error> {
        while map.next_entry::<Checked, Checked>()?.is_some() {}
        Ok(Checked)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Checked, A::Error> {
        while seq.next_element::<Checked>()?.is_some() {}
        Ok(Checked)
    }
}

#[cfg(test)]
mod tests;
