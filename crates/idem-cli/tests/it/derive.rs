//! `idem key derive`.

use crate::helpers::run_with;

fn derive(args: &[&str], event: &str) -> crate::helpers::Out {
    let mut all = vec!["key", "derive"];
    all.extend(args);
    run_with(&all, event, &[])
}

#[test]
fn plain_fields_join_with_prefix_and_suffix() {
    let out = derive(
        &[
            "--field", "/id", "--field", "/type", "--prefix", "stripe", "--suffix", "charge",
        ],
        r#"{"id": "evt_1NQ2", "type": "charge.succeeded"}"#,
    );
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.stdout, "stripe:evt_1NQ2:charge.succeeded:charge\n");
}

#[test]
fn key_is_stable_across_member_order_and_formatting() {
    let args = [
        "--field",
        "/customer/email",
        "--field",
        "/order",
        "--prefix",
        "shop",
    ];
    let a = derive(
        &args,
        r#"{"order": 847, "customer": {"email": "a@b.example", "x": 1}}"#,
    );
    let b = derive(
        &args,
        "{\n  \"customer\" : { \"x\" : 1, \"email\" : \"a@b.example\" },\n  \"order\" : 847\n}",
    );
    assert_eq!(a.code, 0, "{a:?}");
    assert_eq!(a.stdout, b.stdout);
    // An e-mail address is never put in a key: it is hashed.
    assert!(!a.stdout.contains('@'), "{}", a.stdout);
    assert!(a.stdout.starts_with("shop:"), "{}", a.stdout);
    assert_eq!(a.stdout.trim().len(), "shop:".len() + 64);
}

#[test]
fn hash_flag_always_hashes() {
    let out = derive(&["--field", "/id", "--hash"], r#"{"id": "evt_1"}"#);
    assert_eq!(out.code, 0, "{out:?}");
    let key = out.stdout.trim();
    assert_eq!(key.len(), 64);
    assert!(key.bytes().all(|b| b.is_ascii_hexdigit()));
}

#[test]
fn missing_field_is_an_error_naming_it() {
    let out = derive(
        &["--field", "/id", "--field", "/data/object/id"],
        r#"{"id": "evt_1"}"#,
    );
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    assert!(out.stderr.contains("/data/object/id"), "{out:?}");
}

#[test]
fn null_field_is_an_error_naming_it() {
    let out = derive(&["--field", "/id"], r#"{"id": null}"#);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("/id"), "{out:?}");
}

#[test]
fn bad_pointer_and_bad_json_are_errors() {
    let out = derive(&["--field", "id"], r#"{"id": "x"}"#);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("--field"), "{out:?}");
    let out = derive(&["--field", "/id"], "{not json");
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("not valid JSON"), "{out:?}");
}

#[test]
fn no_field_is_a_usage_error() {
    let out = derive(&[], r#"{"id": "x"}"#);
    assert_eq!(out.code, 2, "{out:?}");
}

#[test]
fn default_config_prints_the_example_toml() {
    let out = crate::helpers::run(&["default-config"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("listen = "), "{out:?}");
}
