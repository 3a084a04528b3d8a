//! How long a JSON value's text will be, to size a buffer once before serializing a large
//! stored result (an effect's 256 KiB answer) instead of growing it by doubling, which
//! allocates and frees every power of two on the way and may leave up to twice the text
//! reserved.
//!
//! The count walks the value's nodes, not its bytes: it is exact for strings that need no
//! escaping and for integers, counts a float as the longest text one can have, and counts an
//! escaped character as one byte (so a string full of escapes is under-counted, which only
//! costs a growth). It never reads a clock or performs I/O.

use serde_json::Value;

/// The longest text of an `f64` as serde_json writes it (`-1.7976931348623157e308`).
const FLOAT_MAX: usize = 24;

/// The length of `serde_json::to_string(v)`, as described in the module's text.
pub fn json_len_hint(v: &Value) -> usize {
    match v {
        Value::Null => 4,
        Value::Bool(true) => 4,
        Value::Bool(false) => 5,
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                digits(u)
            } else if let Some(i) = n.as_i64() {
                1 + digits(i.unsigned_abs())
            } else {
                FLOAT_MAX
            }
        }
        Value::String(s) => s.len() + 2,
        Value::Array(items) => {
            2 + items.len().saturating_sub(1) + items.iter().map(json_len_hint).sum::<usize>()
        }
        Value::Object(map) => {
            2 + map.len().saturating_sub(1)
                + map
                    .iter()
                    .map(|(k, v)| k.len() + 3 + json_len_hint(v))
                    .sum::<usize>()
        }
    }
}

/// `serde_json::to_string(v)`, written into a buffer sized once by [`json_len_hint`].
pub fn to_text_sized(v: &Value) -> Result<String, serde_json::Error> {
    let mut text = Vec::with_capacity(json_len_hint(v));
    serde_json::to_writer(&mut text, v)?;
    String::from_utf8(text).map_err(<serde_json::Error as serde::ser::Error>::custom)
}

fn digits(mut n: u64) -> usize {
    let mut d = 1;
    while n >= 10 {
        n /= 10;
        d += 1;
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn plain_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<u64>().prop_map(|n| json!(n)),
            any::<i64>().prop_map(|n| json!(n)),
            "[a-zA-Z0-9 _.:-]{0,40}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                prop::collection::btree_map("[a-z_]{0,12}", inner, 0..8)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Without escapes or floats the count is the text's length, byte for byte.
        #[test]
        fn exact_for_plain_values(v in plain_value()) {
            let text = serde_json::to_string(&v).expect("serializes");
            prop_assert_eq!(json_len_hint(&v), text.len());
        }

        /// A float is counted as the longest text one can have; an escape as one byte.
        #[test]
        fn floats_over_and_escapes_under(f in any::<f64>().prop_filter("finite", |f| f.is_finite()),
                                         s in "[\"\\\\\n\t\u{1}a]{0,40}") {
            let float = json!(f);
            prop_assert!(json_len_hint(&float) >= serde_json::to_string(&float).expect("float").len());
            let text = Value::String(s.clone());
            prop_assert_eq!(json_len_hint(&text), s.len() + 2);
            prop_assert!(json_len_hint(&text) <= serde_json::to_string(&text).expect("text").len());
        }
    }

    #[test]
    fn the_sized_text_is_the_text() {
        for v in [
            json!(null),
            json!({"a": [1, 2.5, "x\n"], "b": {"c": true}}),
            json!("é"),
        ] {
            assert_eq!(
                to_text_sized(&v).expect("sized"),
                serde_json::to_string(&v).expect("text")
            );
        }
    }

    #[test]
    fn an_effect_answer_of_256_kib_is_counted_to_the_byte() {
        let v = json!({"status": 200, "headers": {"content-type": "application/json"},
                       "body": {"id": "ch_1", "pad": "x".repeat(256 * 1024)}, "truncated": false});
        assert_eq!(
            json_len_hint(&v),
            serde_json::to_string(&v).expect("serializes").len()
        );
    }
}
