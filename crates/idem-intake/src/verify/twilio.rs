//! `twilio`: a form body (`application/x-www-form-urlencoded`, or no content type) is
//! signed as `public_url` + the parameters sorted by name, each distinct value of a name
//! sorted, `name+value` appended (the official Python library's order); any other body is
//! signed as Twilio signs JSON bodies: the URL with `bodySHA256=<hex sha256 of the body>`
//! appended to its query, and no parameters. Like the official libraries, the URL is tried
//! as configured, without its port, and with the scheme's default port. A form body is
//! signed over its *decoded* parameters, so encodings of the same parameters (`%2b` and
//! `%2B`, another order) verify alike, by Twilio's design.

use sha2::{Digest, Sha256};

use super::parts::{decode_b64, one_header, plain_match};
use super::{Refusal, Request, VerifyConfig};
use crate::provider::HmacAlgorithm;

/// The URL variants Twilio's libraries try: as given, without the port, with the default port.
pub fn twilio_url_variants(url: &str) -> Vec<String> {
    let mut out = vec![url.to_owned()];
    let Some(scheme_end) = url.find("://") else {
        return out;
    };
    let scheme = &url[..scheme_end];
    let auth_start = scheme_end + 3;
    let auth_end = url[auth_start..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| auth_start + i);
    let authority = &url[auth_start..auth_end];
    let host_start = authority.rfind('@').map_or(0, |i| i + 1);
    let hostport = &authority[host_start..];
    // The port is after the last ':' that follows any IPv6 literal's ']'.
    let port_colon = match hostport.rfind(']') {
        Some(b) => hostport[b..].rfind(':').map(|i| b + i),
        None => hostport.rfind(':'),
    };
    let prefix = &url[..auth_start + host_start];
    let suffix = &url[auth_end..];
    let variant = match port_colon {
        Some(c) => format!("{prefix}{}{suffix}", &hostport[..c]),
        None => {
            let port = if scheme.eq_ignore_ascii_case("https") {
                443
            } else {
                80
            };
            format!("{prefix}{hostport}:{port}{suffix}")
        }
    };
    if variant != url {
        out.push(variant);
    }
    out
}

/// Whether a Twilio request's body is signed as form parameters.
fn is_form(headers: &http::HeaderMap) -> bool {
    match headers.get(http::header::CONTENT_TYPE) {
        None => true,
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|s| s.split(';').next())
            .is_some_and(|m| {
                m.trim()
                    .eq_ignore_ascii_case("application/x-www-form-urlencoded")
            }),
    }
}

/// The text Twilio signs for a form body after the URL: sorted names, each name's distinct
/// values sorted, `name+value` each.
pub fn twilio_params_text(body: &[u8]) -> String {
    let mut pairs: Vec<(String, String)> = url::form_urlencoded::parse(body)
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    pairs.sort();
    pairs.dedup();
    let mut s = String::new();
    for (k, v) in pairs {
        s.push_str(&k);
        s.push_str(&v);
    }
    s
}

/// The URL Twilio signs for a JSON (non-form) body: `bodySHA256` appended to the query.
pub fn twilio_json_url(url: &str, body: &[u8]) -> String {
    let hash = hex::encode(Sha256::digest(body));
    let (base, frag) = match url.find('#') {
        Some(i) => (&url[..i], &url[i..]),
        None => (url, ""),
    };
    let sep = if base.contains('?') { '&' } else { '?' };
    format!("{base}{sep}bodySHA256={hash}{frag}")
}

pub(super) fn check(cfg: &VerifyConfig<'_>, req: &Request<'_>) -> Result<Option<i64>, Refusal> {
    let url = cfg.public_url.ok_or(Refusal::InvalidSignature)?;
    let sig = one_header(req.headers, "x-twilio-signature")?;
    let cand = decode_b64(sig);
    let (secrets, headers, body) = (cfg.secrets, req.headers, req.body);
    let cands = [cand];
    let ok = if is_form(headers) {
        let params = twilio_params_text(body);
        twilio_url_variants(url).iter().any(|u| {
            plain_match(
                secrets,
                HmacAlgorithm::Sha1,
                &[u.as_bytes(), params.as_bytes()],
                &cands,
            )
            .is_ok()
        })
    } else {
        twilio_url_variants(url).iter().any(|u| {
            let signed = twilio_json_url(u, body);
            plain_match(secrets, HmacAlgorithm::Sha1, &[signed.as_bytes()], &cands).is_ok()
        })
    };
    if ok {
        Ok(None)
    } else {
        Err(Refusal::InvalidSignature)
    }
}
