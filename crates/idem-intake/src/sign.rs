//! The signing side of every provider's scheme, as the provider itself would sign a
//! delivery: for tests, benchmarks and local tooling. The intake never signs inbound
//! requests; [`crate::verify`] is the side that matters, and it is cross-checked against the
//! providers' official libraries, not only against this module.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use idem_core::webhook::AlertSecret;

use crate::provider::{HmacAlgorithm, HmacEncoding, HmacScheme, HmacSigned, Provider};
use crate::verify::{hubspot_decode_uri, mac, twilio_json_url, twilio_params_text};

/// One delivery to sign. `content_type` matters only for Twilio (a form body is signed as
/// parameters, anything else the JSON way); `id` only for Standard Webhooks.
pub struct Delivery<'a> {
    pub provider: Provider,
    pub secret: &'a str,
    pub body: &'a [u8],
    /// The signing time in unix milliseconds (seconds for providers that sign seconds).
    pub at_ms: i64,
    pub method: &'a str,
    pub public_url: Option<&'a str>,
    pub content_type: Option<&'a str>,
    pub hmac: Option<&'a HmacScheme>,
    pub id: &'a str,
}

impl<'a> Delivery<'a> {
    /// A JSON `POST` of `body` for `provider`, signed with `secret` at `at_ms` (no public URL,
    /// HMAC scheme or id).
    pub fn json_post(provider: Provider, secret: &'a str, body: &'a [u8], at_ms: i64) -> Self {
        Delivery {
            provider,
            secret,
            body,
            at_ms,
            method: "POST",
            public_url: None,
            content_type: Some("application/json"),
            hmac: None,
            id: "",
        }
    }
}

/// The current time in unix milliseconds, as a delivery signed now carries it.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The headers a provider would send with `d` (names as the providers spell them); `None`
/// when the delivery cannot be signed (a Standard Webhooks secret that does not decode, no
/// `public_url` for HubSpot/Twilio, no scheme for `hmac`).
pub fn sign(d: &Delivery<'_>) -> Option<Vec<(String, String)>> {
    let key = d.secret.as_bytes();
    let secs = d.at_ms.div_euclid(1000);
    let h = |n: &str, v: String| (n.to_owned(), v);
    let out = match d.provider {
        Provider::Stripe => {
            let t = secs.to_string();
            let tag = mac(HmacAlgorithm::Sha256, key, &[t.as_bytes(), b".", d.body]);
            vec![h(
                "Stripe-Signature",
                format!("t={t},v1={}", hex::encode(tag)),
            )]
        }
        Provider::StandardWebhooks => {
            let s = match AlertSecret::parse(d.secret) {
                Ok(s) => s,
                Err(_) => AlertSecret::parse(&format!("whsec_{}", d.secret)).ok()?,
            };
            vec![
                h("webhook-id", d.id.to_owned()),
                h("webhook-timestamp", secs.to_string()),
                h("webhook-signature", s.sign(d.id, secs, d.body)),
            ]
        }
        Provider::Github => {
            let tag = mac(HmacAlgorithm::Sha256, key, &[d.body]);
            vec![
                h(
                    "X-Hub-Signature-256",
                    format!("sha256={}", hex::encode(tag)),
                ),
                h("X-GitHub-Delivery", d.id.to_owned()),
            ]
        }
        Provider::Shopify => {
            let tag = mac(HmacAlgorithm::Sha256, key, &[d.body]);
            vec![
                h("X-Shopify-Hmac-Sha256", STANDARD.encode(tag)),
                h("X-Shopify-Webhook-Id", d.id.to_owned()),
            ]
        }
        Provider::Typeform => {
            let tag = mac(HmacAlgorithm::Sha256, key, &[d.body]);
            vec![h(
                "Typeform-Signature",
                format!("sha256={}", STANDARD.encode(tag)),
            )]
        }
        Provider::Slack => {
            let t = secs.to_string();
            let tag = mac(
                HmacAlgorithm::Sha256,
                key,
                &[b"v0:", t.as_bytes(), b":", d.body],
            );
            vec![
                h("X-Slack-Signature", format!("v0={}", hex::encode(tag))),
                h("X-Slack-Request-Timestamp", t),
            ]
        }
        Provider::Hubspot => {
            let url = hubspot_decode_uri(d.public_url?);
            let t = d.at_ms.to_string();
            let method = d.method.to_ascii_uppercase();
            let tag = mac(
                HmacAlgorithm::Sha256,
                key,
                &[method.as_bytes(), url.as_bytes(), d.body, t.as_bytes()],
            );
            vec![
                h("X-HubSpot-Signature-v3", STANDARD.encode(tag)),
                h("X-HubSpot-Request-Timestamp", t),
            ]
        }
        Provider::Twilio => {
            let url = d.public_url?;
            let form = d.content_type.is_none_or(|c| {
                c.split(';').next().is_some_and(|m| {
                    m.trim()
                        .eq_ignore_ascii_case("application/x-www-form-urlencoded")
                })
            });
            let signed = if form {
                format!("{url}{}", twilio_params_text(d.body))
            } else {
                twilio_json_url(url, d.body)
            };
            let tag = mac(HmacAlgorithm::Sha1, key, &[signed.as_bytes()]);
            vec![h("X-Twilio-Signature", STANDARD.encode(tag))]
        }
        Provider::Hmac => {
            let s = d.hmac?;
            let t = secs.to_string();
            let tag = match s.signed {
                HmacSigned::Body => mac(s.algorithm, key, &[d.body]),
                HmacSigned::TimestampBody => mac(s.algorithm, key, &[t.as_bytes(), b".", d.body]),
            };
            let enc = match s.encoding {
                HmacEncoding::Hex => hex::encode(tag),
                HmacEncoding::Base64 => STANDARD.encode(tag),
            };
            let mut v = vec![h(
                &s.header,
                format!("{}{enc}", s.prefix.as_deref().unwrap_or("")),
            )];
            if let Some(th) = &s.timestamp_header {
                v.push(h(th, t));
            }
            v
        }
    };
    Some(out)
}
