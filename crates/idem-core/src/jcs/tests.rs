use super::*;
use proptest::prelude::*;
use serde_json::json;

/// What the general-purpose canonicalizer writes: the text every stored fingerprint hashes.
fn oracle(v: &Value) -> String {
    serde_json_canonicalizer::to_string(v).expect("oracle")
}

fn same_as_oracle(v: &Value) {
    assert_eq!(to_string(v).expect("jcs"), oracle(v), "value {v:?}");
}

#[test]
fn rfc8785_examples() {
    // RFC 8785 §3.2.2 and §3.2.3 (sorting by UTF-16 code units, numbers as ECMAScript).
    let v: Value = serde_json::from_str(
        r#"{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],
            "string":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/","literals":[null,true,false]}"#,
    )
    .expect("json");
    assert_eq!(
        to_string(&v).expect("jcs"),
        r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#
    );
    let sorted: Value = serde_json::from_str(
        r#"{"\u20ac":"Euro Sign","\r":"Carriage Return","\ufb33":"Hebrew Letter Dalet With Dagesh",
            "1":"One","\ud83d\ude00":"Emoji: Grinning Face","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis"}"#,
    )
    .expect("json");
    let text = to_string(&sorted).expect("jcs");
    let order: Vec<&str> = ["\\r", "1", "\u{80}", "ö", "€", "😀", "\u{fb33}"].to_vec();
    let mut at = 0;
    for name in order {
        let found = text[at..].find(&format!("\"{name}\"")).expect("in order");
        at += found + 1;
    }
    same_as_oracle(&v);
    same_as_oracle(&sorted);
}

#[test]
fn edges_match_the_oracle() {
    for v in [
        json!(null),
        json!({}),
        json!([]),
        json!(""),
        json!(0),
        json!(-0.0),
        json!(1e15),
        json!(999_999_999_999_999i64),
        json!(-999_999_999_999_999i64),
        json!(9_007_199_254_740_993u64),
        json!(u64::MAX),
        json!(i64::MIN),
        json!(1e21),
        json!(1e-7),
        json!(123e-20),
        json!(f64::MAX),
        json!(f64::MIN_POSITIVE),
        json!(5e-324),
        json!(0.1),
        json!("\u{0}\u{1f}\u{7f}\u{2028}\u{fffd}"),
        json!({"a": {"b": [1, {"d": 1, "c": 2}]}, "\u{e000}": 1, "\u{10000}": 2}),
    ] {
        same_as_oracle(&v);
    }
}

/// Any JSON value, with names and strings drawn from every plane and all the characters that
/// need escapes, and numbers of every kind `serde_json` keeps (u64, i64, f64).
fn any_value() -> impl Strategy<Value = Value> {
    let text = prop_oneof![
        "[a-c\\\\\"/\\x00-\\x1f]{0,6}",
        "\\PC{0,6}",
        "[\u{e000}-\u{e002}\u{fffe}\u{ffff}\u{10000}\u{1f600}\u{10ffff}a]{0,4}",
    ];
    let number = prop_oneof![
        any::<u64>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        (-1_000_000i64..1_000_000, -30i32..30)
            .prop_map(|(m, e)| Value::from(m as f64 * 10f64.powi(e))),
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number,
        text.clone().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((text.clone(), inner), 0..6)
                .prop_map(|members| Value::Object(members.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn every_value_is_written_as_the_oracle_writes_it(v in any_value()) {
        prop_assert_eq!(to_string(&v).expect("jcs"), oracle(&v));
    }

    #[test]
    fn member_order_never_matters(v in any_value()) {
        if let Value::Object(map) = &v {
            let reversed: Map<String, Value> =
                map.iter().rev().map(|(k, v)| (k.clone(), v.clone())).collect();
            prop_assert_eq!(to_string(&v).expect("jcs"), to_string(&Value::Object(reversed)).expect("jcs"));
        }
    }
}
