//! What the intake's test files share: header maps from pairs, the providers that sign a time.
#![allow(dead_code)]

use http::{HeaderMap, HeaderName, HeaderValue};
use idem_intake::Provider;

/// A header map of `(name, value)` pairs, in order (a repeated name keeps every value).
pub fn headers<K: AsRef<str>, V: AsRef<str>>(pairs: &[(K, V)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(
            HeaderName::from_bytes(k.as_ref().as_bytes()).expect("header name"),
            HeaderValue::from_str(v.as_ref()).expect("header value"),
        );
    }
    h
}

/// Whether a provider signs a timestamp.
pub fn timed(p: Provider) -> bool {
    matches!(
        p,
        Provider::Stripe
            | Provider::StandardWebhooks
            | Provider::Slack
            | Provider::Hubspot
            | Provider::Hmac
    )
}
