//! The command line of `idem` (clap derive). The `///` comments are the `--help` text.
//!
//! The top level (`Cli`, `Command`) is here; the arguments of the local commands and of the
//! commands that talk to a server have a module each.

mod local;
mod remote;

use clap::{Parser, Subcommand};

pub use local::*;
pub use remote::*;

use crate::audit::AUDIT_EXIT_HELP;
use crate::exit::EXIT_CODES_HELP;

/// idem — an idempotency gate and side-effect ledger.
///
/// Ask it "may I do this now?" before every irreversible side effect (charge, e-mail, CRM
/// create) and tell it afterwards what happened: retries, replays and duplicate deliveries then
/// become exactly-once business outcomes, and every ambiguous case lands in a review queue.
#[derive(Debug, Parser)]
#[command(name = "idem", version, after_long_help = EXIT_CODES_HELP, after_help = EXIT_CODES_HELP)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the HTTP service.
    ///
    /// Settings come in layers: built-in defaults, then the config file, then IDEM_* environment
    /// variables, then the flags given here. Only flags you actually pass are handed to the
    /// server as overrides; the server reads the environment itself.
    Serve(ServeCmd),
    /// Print a commented example configuration file (TOML) for `idem serve --config`.
    DefaultConfig,
    /// Manage API tokens (stored hashed in the ledger database).
    #[command(subcommand)]
    Token(TokenCmd),
    /// Work with keys offline.
    #[command(subcommand)]
    Key(KeyCmd),
    /// Claim a key: "may I do this now?" (exit code = outcome: 0 only when acquired, 19 for a
    /// completed duplicate; see `idem --help`).
    Claim(ClaimCmd),
    /// Let the server send one HTTP request under the key, exactly once, and print the
    /// destination's response (a repeat prints the stored one; exit codes as for `claim`, 0
    /// when this call performed it).
    Effect(EffectCmd),
    /// Save the payload to deliver (e.g. an AI draft) under the lease; optionally hold it for
    /// approval.
    Prepare(PrepareCmd),
    /// Extend the lease you hold.
    Heartbeat(HeartbeatCmd),
    /// Report that the side effect happened (stores the result for replays).
    Complete(CompleteCmd),
    /// Report that the side effect failed; idem decides retry, permanent or review.
    Fail(FailCmd),
    /// Show a record and its audit trail.
    Get(KeyTarget),
    /// List the records of a namespace (the review queue: `--state needs_review`).
    Ls(LsCmd),
    /// Operator: the review queue across namespaces, oldest first — needs_review,
    /// awaiting_approval, and processing past the namespace's stuck_after_ms.
    Review(ReviewCmd),
    /// Operator: settle a record in review (or a failed one).
    Resolve(ResolveCmd),
    /// Operator: approve a prepared payload waiting for approval.
    Approve(NoteCmd),
    /// Operator: reject a prepared payload waiting for approval (→ failed_permanent).
    Reject(NoteCmd),
    /// Operator: stop all claims in a namespace (in-flight work may still report).
    Pause(NsTarget),
    /// Operator: let claims in a paused namespace through again.
    Resume(NsTarget),
    /// Show or change a namespace's policy.
    #[command(subcommand)]
    Ns(NsCmd),
    /// Webhook intake sources (where provider webhooks come in, how they are verified, where
    /// they are forwarded): admin writes, operator reads.
    #[command(subcommand)]
    Source(SourceCmd),
    /// A namespace's actions: side effects served to AI agents as MCP tools at /mcp/NS,
    /// delivered once per business identity (admin writes, operator reads).
    #[command(subcommand)]
    Action(ActionCmd),
    /// Run a command exactly once per key (cron, scripts, queue consumers).
    ///
    /// Claims the key; runs COMMAND only when the claim is acquired, with IDEM_KEY,
    /// IDEM_NAMESPACE, IDEM_ATTEMPT and IDEM_LEASE_TOKEN (the lease's fencing token) in its
    /// environment; IDEM_TOKEN (the API token) is passed on untouched, so the command may call
    /// `idem get` etc. itself. Heartbeats the lease every third of it while it runs; passes its
    /// stdout through and stores the first 64 KiB as the result on exit 0. Non-zero exits are
    /// reported as failures: 75 (EX_TEMPFAIL) → retryable, killed by a signal → ambiguous
    /// (needs_review), anything else → permanent. A duplicate of a completed run prints the
    /// stored stdout and exits 19 (completed) without running anything.
    ///
    /// Example, an exactly-once cron job with no server (a bare path is a SQLite file):
    ///
    ///   idem run --db ~/.idem.db --ns cron --key "renewal-reminders:$(date +%F)" -- ./send.sh
    #[command(verbatim_doc_comment)]
    Run(RunCmd),
    /// Run the failure drills against a running idem and report PASS/FAIL per drill.
    ///
    /// Each drill runs in a fresh namespace it creates (PREFIX-<random>-<drill>) and never
    /// touches any other; a local counter stands in for the destination's side effects. The
    /// token (if the server has auth on) needs the operator role and scope `*`.
    Drill(DrillCmd),
    /// Measure idem side by side with the bare store (see docs/performance.md).
    ///
    /// Rows: `bare` (the hand-rolled INSERT … ON CONFLICT recipe through the same driver, one
    /// connection per client), `library` (idem in process) and `http` (a real `idem serve`
    /// child on loopback, keep-alive clients), for first-time claim+complete pairs and for
    /// duplicate claims, with p50/p99/max latency and the ratio to the bare row. With
    /// `--scale`, measures instead claim latency with 0/1M/10M records in the ledger and the
    /// janitor's expiry rate with claim p99 while it runs. Uses fresh temporary databases
    /// only (a fresh PostgreSQL database per row, dropped afterwards).
    Bench(BenchCmd),
    /// Lint exported n8n workflows for the mistakes that let duplicate side effects through.
    ///
    /// Reads the JSON of n8n's Download or `n8n export:workflow` (one workflow or an array,
    /// as `--all` writes); a DIR is searched recursively for *.json, `-` reads stdin. Rules
    /// IDEM001–IDEM017: see docs/audit.md. Prints a table (one line per finding and a
    /// summary), JSON ({findings, errors}) or SARIF 2.1.0 for code-scanning upload.
    ///
    /// Example, in CI: idem audit --format sarif workflows/ > idem-audit.sarif
    #[command(verbatim_doc_comment, after_help = AUDIT_EXIT_HELP, after_long_help = AUDIT_EXIT_HELP)]
    Audit(AuditCmd),
    /// Copy a SQLite ledger into a backup file while idem keeps running (online, consistent).
    ///
    /// Uses SQLite's backup API: one consistent snapshot, taken without stopping writers. The
    /// copy is one self-contained file (no -wal), checked with `PRAGMA integrity_check`, and
    /// only then renamed to FILE (an existing FILE is replaced atomically). PostgreSQL
    /// ledgers are backed up with pg_dump or base backups (see docs/operations.md).
    ///
    /// Example: idem backup --db sqlite:///var/lib/idem/idem.db --out /backup/idem-$(date +%F).db
    #[command(verbatim_doc_comment)]
    Backup(BackupCmd),
    /// Exit 0 when a running idem answers GET /healthz (or /readyz with --ready), else 1.
    ///
    /// For container and supervisor health checks where no curl exists (the container image
    /// has nothing but idem).
    Healthcheck(HealthcheckCmd),
}
