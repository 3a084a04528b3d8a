//! Helpers shared by the fuzz targets: JSON text of a value spelled differently from
//! serde_json's own output (members in reverse order, other whitespace, numbers in another
//! notation, strings with `\u` escapes), so a target can check that a rule depends on the
//! JSON value and never on how its text was written.
//!
//! It must never change the JSON value it spells: [`respell`] of `v` parses back to
//! [`as_floats`] of `v` (the same JSON numbers, read as floats), and the targets check that.

#![forbid(unsafe_code)]

use std::fmt::Write;

use serde_json::{Number, Value};

/// The input as JSON, when it is UTF-8 JSON text.
pub fn json(data: &[u8]) -> Option<Value> {
    serde_json::from_slice(data).ok()
}

/// The input as UTF-8 text (lossy: the targets that take text want text).
pub fn text(data: &[u8]) -> String {
    String::from_utf8_lossy(data).into_owned()
}

/// JSON text of `v` with every object's members in reverse order, a newline and a tab
/// around tokens, integers written as floats (`5.0`, `-3e0`), floats in exponent form and
/// every non-ASCII or quote character of a string as a `\u` escape (surrogate pairs above
/// U+FFFF).
pub fn respell(v: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, v);
    out
}

fn write_value(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(out, n),
        Value::String(s) => write_string(out, s),
        Value::Array(a) => {
            out.push_str("[\n");
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str(" ,\t");
                }
                write_value(out, x);
            }
            out.push_str("\n]");
        }
        Value::Object(m) => {
            out.push_str("{\t");
            for (i, (k, x)) in m.iter().rev().enumerate() {
                if i > 0 {
                    out.push_str(",\n ");
                }
                write_string(out, k);
                out.push_str(" :\r\n");
                write_value(out, x);
            }
            out.push_str(" }");
        }
    }
}

fn write_number(out: &mut String, n: &Number) {
    if let Some(u) = n.as_u64() {
        let _ = write!(out, "{u}.0");
    } else if let Some(i) = n.as_i64() {
        let _ = write!(out, "{i}e0");
    } else if let Some(f) = n.as_f64() {
        // `{:e}` is the shortest exponent form that reads back as the same f64.
        let _ = write!(out, "{f:e}");
    } else {
        let _ = write!(out, "{n}");
    }
}

fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        if c.is_ascii() && c != '"' && c != '\\' && !c.is_ascii_control() {
            out.push(c);
        } else {
            let mut buf = [0u16; 2];
            for unit in c.encode_utf16(&mut buf) {
                let _ = write!(out, "\\u{unit:04X}");
            }
        }
    }
    out.push('"');
}

/// `v` with its integers read as the floats they equal (what `5.0` instead of `5` parses to):
/// the same JSON number, another Rust type.
pub fn as_floats(v: &Value) -> Value {
    match v {
        Value::Number(n) => n
            .as_f64()
            .and_then(Number::from_f64)
            .map_or_else(|| v.clone(), Value::Number),
        Value::Array(a) => Value::Array(a.iter().map(as_floats).collect()),
        Value::Object(m) => {
            Value::Object(m.iter().map(|(k, x)| (k.clone(), as_floats(x))).collect())
        }
        other => other.clone(),
    }
}

/// Integers up to 2^53 read back the same as floats; beyond, a float spelling may round.
pub const SAFE_INTEGER: f64 = 9_007_199_254_740_992.0;

/// Every number of `v` is within ±2^53 (so [`respell`] and [`as_floats`] keep its value
/// exactly, whatever type reads it).
pub fn safe_numbers(v: &Value) -> bool {
    match v {
        // Integers by their exact value: -(2^53 + 1) reads as the float -2^53, which is
        // within the bound although the integer is not (CI's fuzzer found that).
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => i.unsigned_abs() <= SAFE_INTEGER as u64,
            (None, Some(u)) => u <= SAFE_INTEGER as u64,
            (None, None) => n.as_f64().is_some_and(|f| f.abs() <= SAFE_INTEGER),
        },
        Value::Array(a) => a.iter().all(safe_numbers),
        Value::Object(m) => m.values().all(safe_numbers),
        _ => true,
    }
}
