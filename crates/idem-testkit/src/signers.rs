//! Webhook signatures made by the providers' **official libraries** (Python `stripe`,
//! `standardwebhooks`, `slack_sdk`, `twilio`, `hubspot-api-client`; Node
//! `@octokit/webhooks-methods`, `stripe`), for tests that must not trust idem's own signer.
//!
//! The libraries live in one directory named by `IDEM_TEST_SIGNERS` (holding `venv/bin/python`
//! and `node_modules`; `.ci/signers.sh` creates it). Convention: when neither `CI` nor
//! `IDEM_TEST_SIGNERS` is set, tests using this module skip (see [`skip`]); with either set, a
//! missing directory or library is an error, so CI cannot pass without the cross check. The
//! scripts are `crates/idem-intake/tests/official/sign.{py,mjs}`; they never print a secret.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

const PY: &str = include_str!("../../idem-intake/tests/official/sign.py");
const MJS: &str = include_str!("../../idem-intake/tests/official/sign.mjs");

/// Provider names the harness signs for: the intake's provider names (the Python library,
/// GitHub's through Node), plus `stripe_node` (Stripe's Node library).
pub const OFFICIAL_PROVIDERS: [&str; 9] = [
    "stripe",
    "stripe_node",
    "standard_webhooks",
    "github",
    "shopify",
    "slack",
    "hubspot",
    "typeform",
    "twilio",
];

/// Whether the cross tests are required (CI, or the directory named explicitly).
pub fn required() -> bool {
    std::env::var_os("CI").is_some() || signers_env().is_some()
}

fn signers_env() -> Option<PathBuf> {
    std::env::var_os("IDEM_TEST_SIGNERS")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// The signers directory: `IDEM_TEST_SIGNERS`, else (in CI) the default that `.ci/signers.sh`
/// fills, `$HOME/.cache/idem/signers`.
pub fn signers_dir() -> Option<PathBuf> {
    signers_env().or_else(|| {
        std::env::var_os("CI")?;
        let home = std::env::var_os("HOME")?;
        Some(PathBuf::from(home).join(".cache/idem/signers"))
    })
}

/// `true` (after printing why) when a test should skip the official cross check: neither
/// `CI` nor `IDEM_TEST_SIGNERS` is set.
pub fn skip(test: &str) -> bool {
    if required() {
        return false;
    }
    eprintln!(
        "{test}: skipped (set IDEM_TEST_SIGNERS to the directory `bash .ci/signers.sh` prints \
         to run the official-library cross check)"
    );
    true
}

/// One delivery to sign.
#[derive(Clone, Copy)]
pub struct OfficialRequest<'a> {
    /// One of [`OFFICIAL_PROVIDERS`].
    pub provider: &'a str,
    pub secret: &'a str,
    /// UTF-8 (the libraries sign text).
    pub body: &'a [u8],
    /// Signing time, unix milliseconds (seconds-based schemes use its whole seconds).
    pub timestamp_ms: i64,
    /// The URL signed (HubSpot, Twilio).
    pub url: Option<&'a str>,
    /// Twilio's form parameters (the body must be their urlencoded form); `None` for a JSON
    /// body, which Twilio signs through `bodySHA256`.
    pub params: Option<&'a [(&'a str, &'a str)]>,
    /// Standard Webhooks' message id (default `msg_official`).
    pub id: Option<&'a str>,
    /// HubSpot's method (default `POST`).
    pub method: Option<&'a str>,
}

impl<'a> OfficialRequest<'a> {
    pub fn new(provider: &'a str, secret: &'a str, body: &'a [u8], timestamp_ms: i64) -> Self {
        OfficialRequest {
            provider,
            secret,
            body,
            timestamp_ms,
            url: None,
            params: None,
            id: None,
            method: None,
        }
    }
}

/// The headers the provider's official library produces for `req`.
pub fn official_sign(req: &OfficialRequest<'_>) -> Result<Vec<(String, String)>, String> {
    let dir = signers_dir().ok_or_else(|| {
        "no signers directory: set IDEM_TEST_SIGNERS (`bash .ci/signers.sh` prints it)".to_owned()
    })?;
    let mut args = serde_json::json!({
        "provider": req.provider,
        "secret": req.secret,
        "timestamp_ms": req.timestamp_ms,
        "url": req.url,
        "id": req.id,
        "method": req.method,
    });
    if let Some(p) = req.params {
        args["params"] = serde_json::Value::from(
            p.iter()
                .map(|(k, v)| serde_json::json!([k, v]))
                .collect::<Vec<_>>(),
        );
    }
    let node = matches!(req.provider, "github" | "stripe_node");
    let mut cmd = if node {
        let mut c = Command::new("node");
        c.arg("--input-type=module").arg("-e").arg(MJS).arg("--");
        c
    } else {
        let python = dir.join("venv/bin/python");
        if !python.exists() {
            return Err(format!(
                "{} has no venv/bin/python (run `bash .ci/signers.sh`)",
                dir.display()
            ));
        }
        let mut c = Command::new(python);
        c.arg("-c").arg(PY);
        c
    };
    let mut child = cmd
        .arg(args.to_string())
        .current_dir(&dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run the {} signer: {e}", req.provider))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(req.body)
            .map_err(|e| format!("writing the body to the signer: {e}"))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("waiting for the signer: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "the official {} signer failed ({}): {}",
            req.provider,
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let pairs: Vec<(String, String)> = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("the {} signer printed no header list: {e}", req.provider))?;
    Ok(pairs)
}

/// Shorthand for [`official_sign`]: `url` for HubSpot/Twilio, `params` for a Twilio form.
pub fn official_headers(
    provider: &str,
    secret: &str,
    body: &[u8],
    timestamp_ms: i64,
    url: Option<&str>,
    params: Option<&[(&str, &str)]>,
) -> Result<Vec<(String, String)>, String> {
    official_sign(&OfficialRequest {
        url,
        params,
        ..OfficialRequest::new(provider, secret, body, timestamp_ms)
    })
}
