//! The official Standard Webhooks library (Python `standardwebhooks`) as the judge of the
//! signatures idem puts on alerts and forwards.

use axum::http::HeaderMap;
use serde_json::Value;

/// Verifies one delivery with the official Standard Webhooks library for Python
/// (`standardwebhooks`), run by `IDEM_TEST_PYTHON` (CI's venv) or `python3`. Returns
/// `Some(true|false)` for accepted/rejected, `None` when the library is not importable and
/// neither `CI` nor `IDEM_TEST_PYTHON` is set (then the caller skips with a note); with either
/// set a missing library fails the test.
pub(crate) fn official_verify(secret: &str, headers: &HeaderMap, body: &[u8]) -> Option<bool> {
    const SCRIPT: &str = r#"
import json, sys
try:
    from standardwebhooks import Webhook
    from standardwebhooks.webhooks import WebhookVerificationError
except ImportError as e:
    print("cannot import standardwebhooks:", e)
    sys.exit(3)
secret, headers, path = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
with open(path, "rb") as f:
    body = f.read()
try:
    Webhook(secret).verify(body, headers)
except WebhookVerificationError as e:
    print("rejected:", e)
    sys.exit(1)
print("verified")
"#;
    let configured = std::env::var("IDEM_TEST_PYTHON")
        .ok()
        .filter(|s| !s.is_empty());
    let required = configured.is_some() || std::env::var_os("CI").is_some();
    let python = configured.unwrap_or_else(|| "python3".into());
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("body");
    std::fs::write(&path, body).expect("write body");
    let headers: serde_json::Map<String, Value> =
        ["webhook-id", "webhook-timestamp", "webhook-signature"]
            .iter()
            .filter_map(|h| {
                let v = headers.get(*h)?.to_str().ok()?;
                Some(((*h).to_owned(), Value::from(v)))
            })
            .collect();
    let out = std::process::Command::new(&python)
        .arg("-c")
        .arg(SCRIPT)
        .arg(secret)
        .arg(Value::Object(headers).to_string())
        .arg(&path)
        .output();
    let hint = "install it with `pip install standardwebhooks` (.ci/run does so into \
                $HOME/.cache/idem/venv) and set IDEM_TEST_PYTHON to that Python";
    let out = match out {
        Ok(o) => o,
        Err(e) if required => panic!("cannot run {python}: {e}; {hint}"),
        Err(e) => {
            eprintln!(
                "SKIPPED the official Standard Webhooks check: cannot run {python}: {e}; {hint}"
            );
            return None;
        }
    };
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    match out.status.code() {
        Some(0) => Some(true),
        Some(1) => Some(false),
        Some(3) if !required => {
            eprintln!("SKIPPED the official Standard Webhooks check: {said}; {hint}");
            None
        }
        _ => panic!("the Standard Webhooks check did not run ({python}): {said}; {hint}"),
    }
}
