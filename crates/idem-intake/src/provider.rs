//! The providers of the intake and the configurable `hmac` scheme.

use serde::{Deserialize, Serialize};

/// A provider's signing scheme (the `provider` field of a source).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Provider {
    Stripe,
    StandardWebhooks,
    Github,
    Shopify,
    Slack,
    Hubspot,
    Typeform,
    Twilio,
    Hmac,
}

impl Provider {
    pub const ALL: [Provider; 9] = [
        Provider::Stripe,
        Provider::StandardWebhooks,
        Provider::Github,
        Provider::Shopify,
        Provider::Slack,
        Provider::Hubspot,
        Provider::Typeform,
        Provider::Twilio,
        Provider::Hmac,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Stripe => "stripe",
            Provider::StandardWebhooks => "standard_webhooks",
            Provider::Github => "github",
            Provider::Shopify => "shopify",
            Provider::Slack => "slack",
            Provider::Hubspot => "hubspot",
            Provider::Typeform => "typeform",
            Provider::Twilio => "twilio",
            Provider::Hmac => "hmac",
        }
    }

    pub fn parse(s: &str) -> Option<Provider> {
        Provider::ALL.into_iter().find(|p| p.as_str() == s)
    }

    /// Inbound header names passed on to the forward by default (`forward.headers`), as the
    /// contract's table spells them.
    pub fn default_forward_headers(self) -> &'static [&'static str] {
        match self {
            Provider::Stripe => &["Stripe-Signature"],
            Provider::StandardWebhooks => &["webhook-id", "webhook-timestamp", "webhook-signature"],
            Provider::Github => &["X-GitHub-Event", "X-GitHub-Delivery", "X-GitHub-Hook-ID"],
            Provider::Shopify => &[
                "X-Shopify-Topic",
                "X-Shopify-Shop-Domain",
                "X-Shopify-Webhook-Id",
            ],
            Provider::Slack => &["X-Slack-Retry-Num"],
            Provider::Hubspot | Provider::Typeform | Provider::Twilio | Provider::Hmac => &[],
        }
    }

    /// Whether a source of this provider must carry `public_url` (the URL is signed).
    pub fn needs_public_url(self) -> bool {
        matches!(self, Provider::Hubspot | Provider::Twilio)
    }

    /// The default `split` pointer (`Some("")` = the document itself is the array).
    pub fn default_split(self) -> Option<&'static str> {
        match self {
            Provider::Hubspot => Some(""),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HmacAlgorithm {
    Sha1,
    Sha256,
    Sha512,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HmacEncoding {
    Hex,
    Base64,
}

/// What a configured `hmac` source signs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum HmacSigned {
    /// The raw body.
    #[default]
    #[serde(rename = "body")]
    Body,
    /// `{ts}.{body}` with `ts` read from `timestamp_header` (unix seconds).
    #[serde(rename = "timestamp.body")]
    TimestampBody,
}

/// The `hmac` member of a source with `provider: hmac`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HmacScheme {
    /// The header carrying the signature.
    pub header: String,
    pub algorithm: HmacAlgorithm,
    pub encoding: HmacEncoding,
    /// Text before the encoded digest in the header (e.g. `sha256=`); none by default.
    #[serde(default)]
    pub prefix: Option<String>,
    #[serde(default)]
    pub timestamp_header: Option<String>,
    #[serde(default)]
    pub signed: HmacSigned,
}
