//! [`value_at`] against its oracle: the whole text parsed as a `Value`, then
//! `Value::pointer`.

use proptest::prelude::*;
use serde_json::Value;

use super::value_at;

fn oracle(text: &[u8], pointer: &str) -> Option<Value> {
    serde_json::from_slice::<Value>(text)
        .ok()
        .and_then(|d| d.pointer(pointer).cloned())
}

const POINTERS: [&str; 20] = [
    "", "/", "/id", "/a", "/a/0", "/a/1", "/a/1/b", "/0", "/1", "/a/b", "/~0", "/~1", "/a~1b",
    "/~01", "/01", "/-", "/+1", "/a/01", "bad", "/id/0",
];

fn check(text: &str) {
    for p in POINTERS {
        assert_eq!(
            value_at(text.as_bytes(), p),
            oracle(text.as_bytes(), p),
            "text {text:?}, pointer {p:?}"
        );
    }
}

#[test]
fn hand_picked_texts_answer_as_the_parsed_document() {
    for text in [
        r#"{"id":"evt_1","object":"event","data":{"pad":"xxxx"}}"#,
        r#"{"id":42}"#,
        r#"{"id":-7.5e3}"#,
        r#"{"id":"first","id":"last"}"#,
        r#"{"a":{"b":1},"a":2}"#,
        r#"{"a":[{"b":1},{"b":"two"}],"a":[0,{"b":3}]}"#,
        r#"{"a":[10,[11,12],{"b":null}]}"#,
        r#"{"~":1,"/":2,"a/b":3,"~1":4}"#,
        r#"{"":"empty name"}"#,
        r#"["zero","one"]"#,
        r#""just a string""#,
        "17",
        "null",
        " \n\t{ \"id\" : \"spaced\" } \r\n",
        // Not JSON, or not JSON as serde_json reads it: each must give nothing anywhere.
        r#"{"id":"evt","x":1e999}"#,
        r#"{"id":"evt","x":"\ud800"}"#,
        r#"{"id":"evt","x":"\q"}"#,
        r#"{"id":"evt"} trailing"#,
        r#"{"id":"evt",}"#,
        r#"{"id":"evt""#,
        r#"{"id":"evt","x":[1,2}"#,
        r#"{"id":"evt","x":01}"#,
        r#"{"id":"evt","x":tru}"#,
        "",
        "   ",
        // Escaped names and values.
        r#"{"\u0069d":"escaped name","i\"d":1}"#,
        r#"{"id":"tab\there \u00e9 \ud83d\ude00"}"#,
    ] {
        check(text);
    }
}

#[test]
fn invalid_utf8_is_not_json_even_off_the_path() {
    let mut text = br#"{"id":"evt_1","pad":"ab"}"#.to_vec();
    let at = text.len() - 3;
    text[at] = 0xff;
    assert_eq!(value_at(&text, "/id"), None);
    assert_eq!(oracle(&text, "/id"), None);
}

#[test]
fn nesting_past_the_parser_limit_is_not_json_on_or_off_the_path() {
    let deep = |n: usize| {
        format!(
            "{{\"id\":\"evt\",\"x\":{}1{}}}",
            "[".repeat(n),
            "]".repeat(n)
        )
    };
    for n in [100, 126, 127, 128, 200] {
        let text = deep(n);
        check(&text);
        let on_path = format!("{}\"evt\"{}", "[".repeat(n), "]".repeat(n));
        let p = "/0".repeat(n);
        assert_eq!(
            value_at(on_path.as_bytes(), &p),
            oracle(on_path.as_bytes(), &p)
        );
    }
}

/// A JSON-ish text: valid documents most of the time, with repeated names, escapes,
/// out-of-range numbers and, through `mangle`, every kind of broken text.
fn text() -> impl Strategy<Value = String> {
    let name = prop_oneof![
        Just("id".to_owned()),
        Just("a".to_owned()),
        Just("b".to_owned()),
        Just("0".to_owned()),
        Just("~".to_owned()),
        Just("/".to_owned()),
        Just("a/b".to_owned()),
        Just(String::new()),
        "[a-z~/]{0,3}",
    ]
    .prop_map(|n| serde_json::to_string(&n).unwrap_or_default());
    let leaf = prop_oneof![
        Just("null".to_owned()),
        Just("true".to_owned()),
        Just("1e999".to_owned()),
        Just("-0".to_owned()),
        Just("18446744073709551616".to_owned()),
        Just("\"\\ud800\"".to_owned()),
        Just("\"\\u00e9\\n\"".to_owned()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| format!("{f:e}")),
        any::<String>().prop_map(|s| serde_json::to_string(&s).unwrap_or_default()),
    ];
    let doc = leaf.prop_recursive(5, 48, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(|v| format!("[{}]", v.join(","))),
            prop::collection::vec((name.clone(), inner), 0..6).prop_map(|m| {
                let members: Vec<String> = m.into_iter().map(|(k, v)| format!("{k}:{v}")).collect();
                format!("{{{}}}", members.join(" , "))
            }),
        ]
    });
    (doc, 0u8..8, any::<prop::sample::Index>(), any::<u8>()).prop_map(|(d, how, at, byte)| {
        let mut b = d.into_bytes();
        if !b.is_empty() {
            let i = at.index(b.len());
            match how {
                0 => b.truncate(i),
                1 => b.insert(i, byte),
                2 => b[i] = byte,
                _ => {}
            }
        }
        String::from_utf8_lossy(&b).into_owned()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn every_text_and_pointer_answers_as_the_parsed_document(t in text()) {
        for p in POINTERS {
            prop_assert_eq!(value_at(t.as_bytes(), p), oracle(t.as_bytes(), p), "pointer {:?}", p);
        }
    }

    #[test]
    fn raw_bytes_answer_as_the_parsed_document(b in prop::collection::vec(any::<u8>(), 0..64)) {
        for p in POINTERS {
            prop_assert_eq!(value_at(&b, p), oracle(&b, p));
        }
    }
}
