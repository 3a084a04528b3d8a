//! RFC 8785 (JSON Canonicalization Scheme) text of a `serde_json::Value`, written in one pass
//! into one buffer: the text every fingerprint hashes.
//!
//! JCS fixes everything JSON leaves open: object members sorted by their names' UTF-16 code
//! units, no whitespace, strings with only the escapes JSON requires (`\"`, `\\`, `\b`, `\f`,
//! `\n`, `\r`, `\t`, other controls as lowercase `\u00xx`), and every number written as
//! ECMAScript writes the double it denotes (`ryu-js`; an integer beyond 2^53 is rounded to
//! that double first, as JavaScript would read it).
//!
//! This walks the value's tree directly. The general-purpose route (a `serde` serializer
//! with a formatter that buffers each member and parses each member's name again to sort
//! it) allocated several buffers per member; a duplicate claim spent about a sixth of its
//! request in it. The `serde_json_canonicalizer` crate is kept as the oracle the tests
//! compare this with, on fixed vectors and generated values: the text — and so every
//! fingerprint already stored — must stay byte for byte the same.
//!
//! What it must never do: write anything but the canonical text (a fingerprint that moved
//! would turn every replay of a stored key into a conflict), or fail on a value
//! `serde_json` can hold, other than a number that is not finite.

use std::cmp::Ordering;

use serde_json::{Map, Number, Value};

use crate::jsonsize::json_len_hint;

/// A number that has no JCS text (not finite). `serde_json` cannot hold one without its
/// `arbitrary_precision` feature, which idem does not use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("NaN and +/-Infinity are not permitted in JSON")]
pub struct NotFinite;

/// The canonical text of `v`.
pub fn to_string(v: &Value) -> Result<String, NotFinite> {
    let mut out = String::with_capacity(json_len_hint(v));
    write_value(v, &mut out)?;
    Ok(out)
}

fn write_value(v: &Value, out: &mut String) -> Result<(), NotFinite> {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => write_number(n, out)?,
        Value::String(s) => write_str(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(item, out)?;
            }
            out.push(']');
        }
        Value::Object(map) => write_object(map, out)?,
    }
    Ok(())
}

fn write_object(map: &Map<String, Value>, out: &mut String) -> Result<(), NotFinite> {
    let mut members: Vec<(&String, &Value)> = map.iter().collect();
    members.sort_unstable_by(|a, b| utf16_order(a.0, b.0));
    out.push('{');
    for (i, (name, value)) in members.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_str(name, out);
        out.push(':');
        write_value(value, out)?;
    }
    out.push('}');
    Ok(())
}

/// Names in the order of their UTF-16 code units (RFC 8785 §3.2.3). UTF-8 bytes sort as code
/// points, which is the same order except where a character beyond U+FFFF (a surrogate pair
/// in UTF-16, 0xD800–0xDFFF) meets one in U+E000–U+FFFF; names without four-byte characters
/// are compared as bytes.
fn utf16_order(a: &str, b: &str) -> Ordering {
    // A four-byte UTF-8 sequence starts with a byte ≥ 0xF0.
    if a.bytes().any(|c| c >= 0xF0) || b.bytes().any(|c| c >= 0xF0) {
        a.encode_utf16().cmp(b.encode_utf16())
    } else {
        a.as_bytes().cmp(b.as_bytes())
    }
}

fn write_number(n: &Number, out: &mut String) -> Result<(), NotFinite> {
    // `as_f64` is the double the number denotes (an i64 or u64 rounded as JavaScript reads it).
    let f = n.as_f64().filter(|f| f.is_finite()).ok_or(NotFinite)?;
    if f.fract() == 0.0 && f.abs() < 1e15 {
        // An integral double below 10^15 prints as its integer (ECMAScript's Number#toString
        // for such a value has no exponent and no fraction); `-0` prints as `0`.
        out.push_str(itoa::Buffer::new().format(f as i64));
    } else {
        out.push_str(ryu_js::Buffer::new().format_finite(f));
    }
    Ok(())
}

fn write_str(s: &str, out: &mut String) {
    out.push('"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: &str = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            0x08 => "\\b",
            0x0C => "\\f",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x00..=0x1F => "",
            _ => continue,
        };
        // Every byte escaped is ASCII, so `start..i` ends on a character boundary.
        out.push_str(&s[start..i]);
        if escape.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.push_str("\\u00");
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xF)]));
        } else {
            out.push_str(escape);
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

#[cfg(test)]
mod tests;
