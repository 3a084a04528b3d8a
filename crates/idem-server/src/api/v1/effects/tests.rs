use super::*;
use crate::input::read_body;
use axum::http::HeaderName;
use idem::effect::Success;
use serde_json::json;

fn input(v: Value) -> ApiResult<Input> {
    read_body::<EffectBody>(v)?.into_input()
}
fn field(r: ApiResult<Input>) -> String {
    match r {
        Err(ApiError::InvalidField { field, message }) => {
            assert!(!message.contains("s3cr3t"), "{message}");
            field
        }
        Err(ApiError::UnknownField { field }) => format!("unknown:{field}"),
        Err(e) => format!("{e:?}"),
        Ok(_) => "ok".into(),
    }
}

#[test]
fn requests_are_validated_naming_the_member() {
    let url = "https://api.example.com/v1/x";
    for (body, want) in [
        (json!({}), "request"),
        (json!({"request": {"url": url}}), "request.method"),
        (
            json!({"request": {"method": "GET", "url": url}}),
            "request.method",
        ),
        (json!({"request": {"method": "POST"}}), "request.url"),
        (
            json!({"request": {"method": "POST", "url": "ftp://x/"}}),
            "request.url",
        ),
        (
            json!({"request": {"method": "POST", "url": "/relative"}}),
            "request.url",
        ),
        (
            json!({"request": {"method": "POST", "url": "https://u:p@x.example/"}}),
            "request.url",
        ),
        (
            json!({"request": {"method": "POST", "url": url, "body": {}, "body_text": "x"}}),
            "request.body",
        ),
        (
            json!({"request": {"method": "POST", "url": url, "body_base64": "!!"}}),
            "request.body_base64",
        ),
        (
            json!({"request": {"method": "POST", "url": url, "headers": {"X-A": 1}}}),
            "request.headers.X-A",
        ),
        (
            json!({"request": {"method": "POST", "url": url, "headers": {"X-A": "s3cr3t\n"}}}),
            "request.headers.X-A",
        ),
        (
            json!({"request": {"method": "POST", "url": url, "headers": {"Host": "x"}}}),
            "request.headers.Host",
        ),
        (
            json!({"request": {"method": "POST", "url": url,
                   "headers": {"Idempotency-Key": "s3cr3t"}}}),
            "request.headers.Idempotency-Key",
        ),
        (
            json!({"request": {"method": "POST", "url": url}, "timeout_ms": 300_001}),
            "timeout_ms",
        ),
        (
            json!({"request": {"method": "POST", "url": url}, "timeout_ms": 0}),
            "timeout_ms",
        ),
        (
            json!({"request": {"method": "POST", "url": url}, "success": "3xx"}),
            "success",
        ),
        (
            json!({"request": {"method": "POST", "url": url}, "success": [700]}),
            "success",
        ),
        (
            json!({"request": {"method": "POST", "url": url}, "success": []}),
            "success",
        ),
        (
            json!({"request": {"method": "POST", "url": url}, "idempotency_header": "a b"}),
            "idempotency_header",
        ),
        (
            json!({"request": {"method": "POST", "url": url},
                   "reconcile": {"url": url, "found": [200]}}),
            "reconcile.not_found",
        ),
        (
            json!({"request": {"method": "POST", "url": url},
                   "reconcile": {"method": "POST", "url": url, "found": [200], "not_found": [404]}}),
            "reconcile.method",
        ),
        (
            json!({"request": {"method": "POST", "url": url, "extra": 1}}),
            "unknown:request.extra",
        ),
        (
            json!({"request": {"method": "POST", "url": url}, "cost": {"tokens": -1}}),
            "cost.tokens",
        ),
        (
            json!({"request": {"method": "POST", "url": url}, "cost": {"eur": 1}}),
            "unknown:cost.eur",
        ),
    ] {
        assert_eq!(field(input(body.clone())), want, "{body}");
    }
}

#[test]
fn defaults_and_the_idempotency_header() {
    let i = input(
        json!({"request": {"method": "POST", "url": "https://x.example/a?b=1",
                                      "body": {"a": 1}, "headers": {"Authorization": "s3cr3t"}}}),
    )
    .expect("valid");
    assert_eq!(i.timeout_ms, 30_000);
    assert_eq!(i.success, Success::TwoXx);
    assert_eq!(
        i.idempotency_header.as_ref().map(HeaderName::as_str),
        Some("idempotency-key")
    );
    assert_eq!(
        i.headers.get("content-type").map(|v| v.as_bytes()),
        Some(&b"application/json"[..])
    );
    assert_eq!(i.bytes.as_deref(), Some(&br#"{"a":1}"#[..]));
    let shown = format!(
        "{:?}",
        read_body::<EffectBody>(json!({"request": {"method": "POST",
        "url": "https://x.example/", "headers": {"Authorization": "s3cr3t"}}}))
    );
    assert!(!shown.contains("s3cr3t"), "{shown}");
    let none = input(
        json!({"request": {"method": "PUT", "url": "https://x.example/"},
                             "idempotency_header": null}),
    )
    .expect("valid");
    assert_eq!(none.idempotency_header, None);
    assert!(none.body.is_none() && none.bytes.is_none());
    let text = input(
        json!({"request": {"method": "PATCH", "url": "https://x.example/",
                             "body_text": "hi", "headers": {"content-type": "text/plain"}}}),
    )
    .expect("valid");
    assert_eq!(
        text.headers.get("content-type").map(|v| v.as_bytes()),
        Some(&b"text/plain"[..])
    );
    assert_eq!(canonical_header_name("idempotency-key"), "Idempotency-Key");
    assert_eq!(canonical_header_name("x-idem"), "X-Idem");
}
