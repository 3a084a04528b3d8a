//! The intake rows' events: the source name and secret, 1 KiB Stripe-like event bodies and
//! their signature headers, shared by the intake rows, the backlog run and the outbound run.
//!
//! It only builds and signs request bodies; it must never send them.

use anyhow::Context;

/// The intake rows' source: Stripe-signed events, forwarded to a loopback sink.
pub(crate) const INTAKE_SOURCE: &str = "bench-in";
/// The source's signing secret (Stripe keys its HMAC with the whole `whsec_…` text).
pub(crate) const INTAKE_SECRET: &str = "whsec_bench_intake_signing_secret_0123456789";

/// A Stripe-like event of 1 KiB with id `id`.
pub(crate) fn intake_body(id: &str) -> bytes::Bytes {
    const HEAD: &str = "{\"id\":\"";
    const MID: &str = "\",\"object\":\"event\",\"type\":\"charge.succeeded\",\"data\":{\"pad\":\"";
    const TAIL: &str = "\"}}";
    let fixed = HEAD.len() + id.len() + MID.len() + TAIL.len();
    let pad = 1024usize.saturating_sub(fixed);
    let mut s = String::with_capacity(fixed + pad);
    s.push_str(HEAD);
    s.push_str(id);
    s.push_str(MID);
    s.extend(std::iter::repeat_n('x', pad));
    s.push_str(TAIL);
    bytes::Bytes::from(s)
}

/// Stripe's signature headers for `body`, signed now.
pub(crate) fn stripe_headers(body: &[u8]) -> anyhow::Result<Vec<(String, String)>> {
    let at_ms = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis(),
    )?;
    let delivery = idem_intake::sign::Delivery::json_post(
        idem_intake::Provider::Stripe,
        INTAKE_SECRET,
        body,
        at_ms,
    );
    idem_intake::sign::sign(&delivery).context("signing a Stripe event")
}
