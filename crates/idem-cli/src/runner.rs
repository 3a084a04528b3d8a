//! `idem run`: run a command exactly once per key.
//!
//! Claim → (acquired) spawn the command with the lease in its environment, heartbeat every
//! third of the lease while it runs, tee its stdout (the first [`CAPTURE_LIMIT`] bytes are
//! kept) → complete with `{"stdout": …}` on exit 0, or fail: 75 (EX_TEMPFAIL) is retryable, a
//! signal is ambiguous (the command may have done its effect), anything else is permanent.
//! A `completed` claim replays the stored stdout without running anything and exits
//! [`exit::COMPLETED`] (19), like `idem claim`, so `idem run … && next` does not repeat `next`
//! for a duplicate. The logic is
//! written once over [`Gate`], so it is the same against a server and a local ledger.
//!
//! After the command ran, reporting its outcome matters more than anything else: transient
//! failures of complete/fail are retried for a while, and when the report cannot be made the
//! exit code is non-zero even if the command succeeded, so the operator learns that the
//! ledger does not know.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem::{ClaimOutcome, Class};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::args::RunCmd;
use crate::client::{ApiError, Client};
use crate::exit::{self, CliError};
use crate::gate::{ClaimInput, FailInput, Gate};
use crate::util::{opt_duration_ms, payload};

/// Most stdout bytes stored as the result (the rest is still passed through).
pub const CAPTURE_LIMIT: usize = 64 * 1024;
/// The exit code that means "temporary failure, try again" (sysexits EX_TEMPFAIL).
pub const EX_TEMPFAIL: i32 = 75;
/// Lease used to pace heartbeats when neither --lease nor the namespace told us (the
/// namespace default).
const DEFAULT_LEASE_MS: i64 = 30_000;
/// How long to keep reading stdout after the command exited.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

pub async fn run(cmd: RunCmd) -> Result<u8, CliError> {
    let gate = open_gate(&cmd).await?;
    let input = ClaimInput {
        payload: payload(cmd.payload.as_deref(), cmd.payload_file.as_deref())?,
        owner: Some(cmd.owner.clone().unwrap_or_else(default_owner)),
        lease_ms: opt_duration_ms("--lease", cmd.lease.as_deref())?,
    };
    let ns = cmd.ns.as_str();
    let key = cmd.key.as_str();
    let claim = gate.claim(ns, key, &input).await?;
    let rec = &claim.record;
    match claim.outcome {
        ClaimOutcome::Acquired => {}
        ClaimOutcome::Completed => {
            if rec["result_expired"].as_bool() == Some(true) {
                eprintln!(
                    "idem: {ns}/{key} already completed; its stored output has expired \
                     (retention), not running again"
                );
            } else {
                if let Some(out) = rec["result"]["stdout"].as_str() {
                    let mut so = tokio::io::stdout();
                    so.write_all(out.as_bytes()).await?;
                    so.flush().await?;
                }
                eprintln!(
                    "idem: {ns}/{key} already completed; replayed its stored output, \
                     not running again"
                );
            }
            return Ok(exit::COMPLETED);
        }
        other => {
            eprintln!("idem: {ns}/{key}: {}; not running", describe(other, &claim));
            return Ok(exit::for_outcome(other));
        }
    }
    let Some(token) = claim.token.clone() else {
        return Err(ApiError::Protocol("acquired claim without a token".into()).into());
    };
    let attempt = rec["attempt"].as_u64().unwrap_or(1);
    let lease_ms = input.lease_ms.unwrap_or_else(|| lease_of(rec));

    let (program, args) = match cmd.command.split_first() {
        Some(x) => x,
        None => return Err(CliError::input("give the command to run after --")),
    };
    let mut child_cmd = tokio::process::Command::new(program);
    child_cmd
        .args(args)
        .env("IDEM_NAMESPACE", ns)
        .env("IDEM_KEY", key)
        .env("IDEM_ATTEMPT", attempt.to_string())
        // Only IDEM_LEASE_TOKEN: IDEM_TOKEN is the API token every `idem` verb reads, and the
        // command inherits the operator's one untouched (a child calling `idem get` works).
        .env("IDEM_LEASE_TOKEN", &token)
        .stdin(Stdio::inherit())
        .stderr(Stdio::inherit())
        .stdout(Stdio::piped());
    let mut child = match child_cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            // It never ran: no effect happened, and retrying will not make it exist.
            let fail = FailInput {
                kind: Class::Permanent,
                category: "validation".into(),
                message: format!("could not start {program:?}: {e}"),
            };
            eprintln!("idem: could not start {program:?}: {e}");
            report_fail(&gate, ns, key, &token, &fail).await?;
            return Ok(exit::CANNOT_RUN);
        }
    };

    let heartbeat = tokio::spawn(heartbeat_loop(
        gate.clone(),
        ns.to_owned(),
        key.to_owned(),
        token.clone(),
        lease_ms,
    ));
    let captured = Arc::new(Mutex::new(Captured::default()));
    let pump = child
        .stdout
        .take()
        .map(|out| tokio::spawn(tee(out, captured.clone())));
    let status = wait_reporting_signals(&mut child).await;
    if let Some(mut p) = pump {
        // A background process the command left behind may hold its stdout open forever:
        // drain briefly, then stop capturing rather than wait for it.
        if tokio::time::timeout(DRAIN_GRACE, &mut p).await.is_err() {
            p.abort();
            eprintln!("idem: the command left a process holding its stdout; stopped capturing");
        }
    }
    heartbeat.abort();
    let status = status?;
    let captured = match captured.lock() {
        Ok(c) => c.clone(),
        Err(poisoned) => poisoned.into_inner().clone(),
    };

    if status.success() {
        let mut result = json!({ "stdout": captured.text() });
        if captured.truncated {
            result["stdout_truncated"] = json!(true);
        }
        retry_transient(|| gate.complete(ns, key, &token, result.clone()))
            .await
            .map_err(|e| report_error("the command succeeded but", &e))?;
        return Ok(exit::OK);
    }
    let (kind, message, code) = classify_exit(&status);
    let fail = FailInput {
        kind,
        category: if kind == Class::Ambiguous {
            "signal"
        } else {
            "exit"
        }
        .into(),
        message,
    };
    report_fail(&gate, ns, key, &token, &fail).await?;
    Ok(code)
}

/// Waits for the command while keeping this process alive through SIGINT/SIGTERM, so the
/// outcome is still recorded: Ctrl-C reaches the command through the terminal's process
/// group and we wait for it to end; SIGTERM sent to us (a supervisor stopping the job) kills
/// the command, which is then reported as ambiguous (it may have done its effect).
#[cfg(unix)]
async fn wait_reporting_signals(
    child: &mut tokio::process::Child,
) -> std::io::Result<std::process::ExitStatus> {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return child.wait().await;
    };
    loop {
        tokio::select! {
            st = child.wait() => return st,
            _ = int.recv() => {
                eprintln!("idem: interrupted; waiting for the command to end to record its outcome");
            }
            _ = term.recv() => {
                eprintln!("idem: terminated; stopping the command and recording its outcome");
                let _ = child.start_kill();
            }
        }
    }
}

#[cfg(not(unix))]
async fn wait_reporting_signals(
    child: &mut tokio::process::Child,
) -> std::io::Result<std::process::ExitStatus> {
    child.wait().await
}

/// Reports a failure, retrying transient errors.
async fn report_fail(
    gate: &Gate,
    ns: &str,
    key: &str,
    token: &str,
    fail: &FailInput,
) -> Result<(), CliError> {
    let state = retry_transient(|| gate.fail(ns, key, token, fail))
        .await
        .map_err(|e| report_error("the command failed and", &e))?;
    eprintln!("idem: {ns}/{key}: {} → {state}", fail.message);
    Ok(())
}

fn report_error(what: &str, e: &ApiError) -> CliError {
    eprintln!("idem: {what} its outcome could not be recorded: {e}");
    CliError::Api(e.clone())
}

async fn retry_transient<T, F, Fut>(mut f: F) -> Result<T, ApiError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, ApiError>>,
{
    let mut delay = Duration::from_millis(200);
    let mut tries = 0;
    loop {
        match f().await {
            Err(e) if e.is_transient() && tries < 8 => {
                tries += 1;
                eprintln!("idem: {e}; retrying in {delay:?}");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
            other => return other,
        }
    }
}

/// (class, message, our exit code) for a non-zero exit.
fn classify_exit(status: &std::process::ExitStatus) -> (Class, String, u8) {
    if let Some(code) = status.code() {
        let class = if code == EX_TEMPFAIL {
            Class::Retryable
        } else {
            Class::Permanent
        };
        let what = if code == EX_TEMPFAIL {
            " (EX_TEMPFAIL: retry later)"
        } else {
            ""
        };
        return (
            class,
            format!("command exited with {code}{what}"),
            u8::try_from(code & 0xff).unwrap_or(exit::ERROR),
        );
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            return (
                Class::Ambiguous,
                format!("command killed by signal {sig}; its effect may have happened"),
                u8::try_from((128 + sig) & 0xff).unwrap_or(exit::ERROR),
            );
        }
    }
    (
        Class::Ambiguous,
        "command ended without an exit code".into(),
        exit::ERROR,
    )
}

fn describe(outcome: ClaimOutcome, claim: &crate::gate::ClaimAnswer) -> String {
    let rec = &claim.record;
    let after = claim
        .retry_after_ms
        .map(|ms| format!(" (retry after {})", humantime::format_duration(ms_dur(ms))))
        .unwrap_or_default();
    match outcome {
        ClaimOutcome::InFlight => format!("in flight: another run holds the lease{after}"),
        ClaimOutcome::Backoff => format!("failed earlier, next attempt not allowed yet{after}"),
        ClaimOutcome::NeedsReview => {
            "needs review: the outcome is ambiguous; resolve it with `idem resolve`".into()
        }
        ClaimOutcome::AwaitingApproval => "awaiting approval by an operator".into(),
        ClaimOutcome::Conflict => "conflict: this key was used with a different payload".into(),
        ClaimOutcome::Paused => "the namespace is paused".into(),
        ClaimOutcome::Limited => format!("the namespace's daily limit is reached{after}"),
        ClaimOutcome::FailedPermanent => format!(
            "failed permanently earlier: {}",
            rec["last_error"]["message"]
                .as_str()
                .unwrap_or("no message")
        ),
        ClaimOutcome::Acquired | ClaimOutcome::Completed => outcome.as_str().into(),
    }
}

fn ms_dur(ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// The lease length the ledger granted (expiry − update time), else the default.
fn lease_of(rec: &Value) -> i64 {
    let parse = |v: &Value| v.as_str().and_then(|s| humantime::parse_rfc3339(s).ok());
    match (parse(&rec["lease_expires_at"]), parse(&rec["updated_at"])) {
        (Some(exp), Some(upd)) => exp
            .duration_since(upd)
            .ok()
            .and_then(|d| i64::try_from(d.as_millis()).ok())
            .filter(|ms| *ms > 0)
            .unwrap_or(DEFAULT_LEASE_MS),
        _ => DEFAULT_LEASE_MS,
    }
}

async fn heartbeat_loop(gate: Gate, ns: String, key: String, token: String, lease_ms: i64) {
    let every = ms_dur((lease_ms / 3).max(50));
    loop {
        tokio::time::sleep(every).await;
        match gate.heartbeat(&ns, &key, &token, Some(lease_ms)).await {
            Ok(()) => {}
            Err(e) if e.code() == Some("lease_lost") => {
                eprintln!(
                    "idem: warning: lease on {ns}/{key} lost (a newer claim took it); \
                     this run's outcome will be refused"
                );
                return;
            }
            Err(e) => eprintln!("idem: warning: heartbeat failed: {e}"),
        }
    }
}

#[derive(Debug, Default, Clone)]
struct Captured {
    bytes: Vec<u8>,
    truncated: bool,
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }
}

/// Copies the child's stdout to ours, keeping the first [`CAPTURE_LIMIT`] bytes in `cap`.
async fn tee(mut from: tokio::process::ChildStdout, cap: Arc<Mutex<Captured>>) {
    let mut out = tokio::io::stdout();
    let mut buf = vec![0u8; 8192];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let chunk = &buf[..n];
        // Our stdout may be closed (e.g. `| head`); keep draining so the child never blocks.
        let _ = out.write_all(chunk).await;
        let _ = out.flush().await;
        let Ok(mut cap) = cap.lock() else { continue };
        let room = CAPTURE_LIMIT - cap.bytes.len();
        if chunk.len() > room {
            cap.truncated = true;
        }
        cap.bytes.extend_from_slice(&chunk[..chunk.len().min(room)]);
    }
}

fn default_owner() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|s| s.trim().to_owned())
        })
        .unwrap_or_else(|| "localhost".into());
    format!("idem-run@{host}/{}", std::process::id())
}

/// `~/x` → `$HOME/x` (for `--db=~/…`, where the shell does not expand it).
fn expand_home(db: &str) -> String {
    match (db.strip_prefix("~/"), std::env::var("HOME")) {
        (Some(rest), Ok(home)) if !home.is_empty() => format!("{home}/{rest}"),
        _ => db.to_owned(),
    }
}

async fn open_gate(cmd: &RunCmd) -> Result<Gate, CliError> {
    if let Some(db) = &cmd.db {
        let db = expand_home(db);
        let ledger = idem::open(&db)
            .await
            .map_err(|e| CliError::input(format!("--db: cannot open the ledger: {e}")))?;
        return Ok(Gate::Local(ledger));
    }
    let url = match &cmd.url {
        Some(u) => u.clone(),
        None => std::env::var("IDEM_URL").map_err(|_| {
            CliError::input(
                "give --url URL (or IDEM_URL) for a server, or --db URL for a local ledger",
            )
        })?,
    };
    Ok(Gate::Http(Client::new(&url, cmd.token.clone())?))
}
