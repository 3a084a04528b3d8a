//! The command line of `idem` (clap derive). The `///` comments are the `--help` text.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::audit::AUDIT_EXIT_HELP;
use crate::client::DEFAULT_URL;
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
    /// IDEM001–IDEM016: see docs/audit.md. Prints a table (one line per finding and a
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

// ------------------------------------------------------------------ operations

#[derive(Debug, Args)]
pub struct BackupCmd {
    /// The ledger to copy: sqlite://PATH or a bare path.
    #[arg(
        long,
        env = "IDEM_DB",
        default_value = "sqlite://idem.db",
        value_name = "URL",
        hide_env_values = true
    )]
    pub db: String,
    /// The backup file to write.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// Skip `PRAGMA integrity_check` on the copy (it reads the whole file).
    #[arg(long)]
    pub no_check: bool,
}

#[derive(Debug, Args)]
pub struct HealthcheckCmd {
    /// Base URL of the idem server.
    #[arg(long, env = "IDEM_URL", default_value = DEFAULT_URL)]
    pub url: String,
    /// Check /readyz (the store answers) instead of /healthz (the process answers).
    #[arg(long)]
    pub ready: bool,
    /// Give up after this long, e.g. 3s.
    #[arg(long, value_name = "DURATION", default_value = "5s")]
    pub timeout: String,
}

// ------------------------------------------------------------------ audit

#[derive(Debug, Args)]
pub struct AuditCmd {
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    pub format: AuditFormat,
    /// Lowest severity that makes the exit code 1 (`never`: findings never fail the run).
    #[arg(long, value_enum, value_name = "SEVERITY", default_value = "error")]
    pub fail_on: FailOn,
    /// Also count this node type as a side effect (every operation), e.g.
    /// n8n-nodes-base.mailchimp or a bare n8n-nodes-base name (mailchimp); repeat for more.
    #[arg(long = "side-effect", value_name = "NODE_TYPE")]
    pub side_effects: Vec<String>,
    /// Exported workflow files, directories (searched recursively for *.json), or - for
    /// stdin.
    #[arg(required = true, value_name = "FILE|DIR|-")]
    pub inputs: Vec<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AuditFormat {
    Table,
    Json,
    Sarif,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FailOn {
    Error,
    Warning,
    Info,
    Never,
}

#[derive(Debug, Args)]
pub struct BenchCmd {
    /// Which stores to measure.
    #[arg(long, value_enum, default_value = "all")]
    pub backend: BenchBackend,
    /// PostgreSQL server URL; each row creates and drops its own database on it.
    #[arg(
        long,
        value_name = "URL",
        default_value = "postgres://postgres@127.0.0.1:5432/postgres"
    )]
    pub db: String,
    /// The same PostgreSQL server through a pooler, e.g.
    /// postgres://postgres@127.0.0.1:6432/postgres?pooler=transaction for PgBouncer in
    /// transaction mode: each PostgreSQL library and HTTP row then runs a second time through
    /// it, right after the direct one, as backend `pg_pooled` with its ratio to the direct row
    /// (column "x direct"). Databases are created and dropped through --db.
    #[arg(long, value_name = "URL")]
    pub pooler_url: Option<String>,
    /// How long each row runs, e.g. 10s.
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    pub duration: String,
    /// Concurrent clients, comma-separated.
    #[arg(
        long,
        value_name = "LIST",
        default_value = "1,16,64",
        value_delimiter = ','
    )]
    pub concurrency: Vec<usize>,
    /// Modes to run, comma-separated: bare, library, http, direct (effect workloads only:
    /// the destination called without idem), redis (the SET NX recipe against a
    /// redis-server the bench starts, with AOF `appendfsync always` and without persistence;
    /// claim workloads only, once whatever --backend; skipped with a note when the binary is
    /// missing).
    #[arg(
        long,
        value_name = "LIST",
        default_value = "bare,library,http,direct",
        value_delimiter = ','
    )]
    pub modes: Vec<String>,
    /// The redis-server binary for the redis rows.
    #[arg(
        long,
        value_name = "PATH",
        env = "IDEM_BENCH_REDIS_SERVER",
        default_value = "redis-server"
    )]
    pub redis_server: PathBuf,
    /// Workloads, comma-separated: first_time_pair, duplicate, effect, effect_256k,
    /// effect_tls (to an HTTPS destination), intake, intake_fanout3 (events of a source with
    /// three destinations), intake_duplicate (effects run in the http and direct modes only,
    /// intake in http only).
    #[arg(
        long,
        value_name = "LIST",
        default_value = "first_time_pair,duplicate,effect,effect_256k,effect_tls,intake,intake_duplicate",
        value_delimiter = ','
    )]
    pub workloads: Vec<String>,
    /// Also write the report as JSON to this file (keep them under bench/results/).
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Scale runs instead of the side-by-side table.
    #[arg(long)]
    pub scale: bool,
    /// Scale runs: ledger sizes (records), comma-separated.
    #[arg(
        long,
        value_name = "LIST",
        default_value = "0,1000000,10000000",
        value_delimiter = ','
    )]
    pub sizes: Vec<u64>,
    /// Scale runs: records the janitor expires while claims run (0 skips it).
    #[arg(long, value_name = "N", default_value = "1000000")]
    pub janitor_records: u64,
    /// Scale runs: janitor batch size (the server's default is 100 on SQLite, 1000 on
    /// PostgreSQL).
    #[arg(long, value_name = "N", default_value = "100")]
    pub janitor_batch: usize,
    /// Directory for temporary SQLite files (default: the system temp dir).
    #[arg(long, value_name = "DIR")]
    pub tmp_dir: Option<PathBuf>,
    /// Fault run instead of the table: this many rounds of load, `kill -9` of the server and
    /// restart, then the history checker (docs/reliability.md). Clients: the largest
    /// --concurrency value; one backend (--backend sqlite or postgres).
    #[arg(long, value_name = "N", default_value = "0")]
    pub kill9_rounds: u32,
    /// Database fault run instead of the table: serve --db as given (not a fresh database:
    /// e.g. a multi-host URL with target_session_attrs=read-write), load for --round-time, run
    /// this shell command under the load (kill the primary and promote the standby, restart
    /// the server, …), load --round-time more, then the history checker; also counts 5xx
    /// answers other than 503 store_unavailable and measures the outage the clients saw
    /// (.ci/failover.sh, docs/reliability.md). Clients: the largest --concurrency value.
    #[arg(long, value_name = "CMD")]
    pub fault_cmd: Option<String>,
    /// Fault run: load time before each kill.
    #[arg(long, value_name = "DURATION", default_value = "1s")]
    pub round_time: String,
    /// Soak instead of the table: serve a fresh SQLite ledger this long under a paced load
    /// (the largest --concurrency value of workers, 5 ms between requests), sampling RSS,
    /// open files and a probe's p99 every --soak-window; then the history checker.
    #[arg(long, value_name = "DURATION")]
    pub soak: Option<String>,
    /// Backlog run instead of the table: hold deliveries (namespace paused) while this many
    /// Stripe-signed events are posted, then resume and measure the drain into a loopback
    /// sink while intake goes on (one client, ~100 events/s; the backlog is filled by the
    /// largest --concurrency value of clients), the server's
    /// RSS with the backlog stored, and that nothing was lost or delivered twice.
    #[arg(long, value_name = "N")]
    pub backlog: Option<u64>,
    /// Backlog run: destinations per event, a comma-separated list run side by side (1: the
    /// plain `forward`; more: that many named `forwards` on the same sink, the drain counted
    /// in deliveries).
    #[arg(long, value_name = "N,…", value_delimiter = ',', default_value = "1")]
    pub destinations: Vec<u32>,
    /// Soak: sampling window.
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    pub soak_window: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BenchBackend {
    Sqlite,
    Postgres,
    All,
}

// ------------------------------------------------------------------ serve

#[derive(Debug, Args)]
pub struct ServeCmd {
    /// Address to listen on [default: 127.0.0.1:7780] [env: IDEM_LISTEN].
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// Ledger database: sqlite://PATH (or a bare path) or postgres://…
    /// [default: sqlite://idem.db] [env: IDEM_DB].
    #[arg(long, value_name = "URL")]
    pub db: Option<String>,
    /// TOML configuration file (see `idem default-config`) [env: IDEM_CONFIG].
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// How often the janitor sweeps expired leases and retention, e.g. 30s
    /// [default: 30s] [env: IDEM_JANITOR_INTERVAL].
    #[arg(long, value_name = "DURATION")]
    pub janitor_interval: Option<String>,
    /// Log format on stderr.
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub log_format: Option<LogFormat>,
    /// Serve HTTPS with this PEM certificate chain (with --tls-key); SIGHUP re-reads both
    /// [env: IDEM_TLS_CERT].
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<String>,
    /// PEM private key of --tls-cert [env: IDEM_TLS_KEY].
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<String>,
    /// Export traces over OTLP/HTTP to this collector (e.g. http://127.0.0.1:4318; spans go
    /// to <URL>/v1/traces) [env: IDEM_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_ENDPOINT].
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// Effects: keep at most this much of a destination's response body (e.g. 256KiB, the
    /// default; longer ones are cut and marked truncated) [env: IDEM_MAX_RESPONSE_BYTES].
    #[arg(long, value_name = "SIZE")]
    pub max_response_bytes: Option<String>,
    /// Effects: also trust the CA certificates in this PEM file for outbound HTTPS (a private
    /// CA, tests) [env: IDEM_EXTRA_CA].
    #[arg(long, value_name = "FILE")]
    pub extra_ca: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

impl LogFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

// ------------------------------------------------------------------ token

#[derive(Debug, Subcommand)]
pub enum TokenCmd {
    /// Create an API token: prints the secret alone on stdout (shown once, stored hashed).
    Create(TokenCreate),
    /// List the live API tokens (id, role, namespace, created, expires, last used); never a
    /// secret.
    List(TokenList),
    /// Revoke an API token: every server refuses it from its next call on. Needs --yes.
    Revoke(TokenRevoke),
}

#[derive(Debug, Args)]
pub struct TokenDb {
    /// Ledger database the server uses (same URL as `idem serve --db`).
    #[arg(
        long,
        env = "IDEM_DB",
        default_value = "sqlite://idem.db",
        value_name = "URL"
    )]
    pub db: String,
}

#[derive(Debug, Args)]
pub struct TokenList {
    #[command(flatten)]
    pub db: TokenDb,
}

#[derive(Debug, Args)]
pub struct TokenRevoke {
    /// The token's id, as `idem token list` shows it.
    pub id: i64,
    /// Confirm: the token stops working at once, for every client that uses it.
    #[arg(long)]
    pub yes: bool,
    #[command(flatten)]
    pub db: TokenDb,
}

#[derive(Debug, Args)]
pub struct TokenCreate {
    /// Namespace the token may use, or '*' for all namespaces.
    #[arg(long, value_name = "NS|*")]
    pub namespace: String,
    /// worker: claim/report/read; operator: also list, resolve, approve, pause, policy;
    /// admin: also token management.
    #[arg(long, value_enum)]
    pub role: RoleArg,
    /// Free text to recognise the token later (e.g. "n8n prod").
    #[arg(long)]
    pub label: Option<String>,
    /// Lifetime, e.g. 90d, 12h, 30m; the token is refused from then on. Default: never expires.
    #[arg(long, value_name = "DURATION")]
    pub expires: Option<String>,
    #[command(flatten)]
    pub db: TokenDb,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RoleArg {
    Worker,
    Operator,
    Admin,
}

// ------------------------------------------------------------------ key

#[derive(Debug, Subcommand)]
pub enum KeyCmd {
    /// Derive a stable key from identity fields of a JSON event read on stdin.
    ///
    /// Same algorithm as POST /v1/keys/derive: prefix:v1:v2:…:suffix when every value is a
    /// short plain token ([A-Za-z0-9_.-], ≤ 64 chars), otherwise the SHA-256 of the values
    /// (so e-mail addresses and free text never appear in a key). Member order and formatting
    /// of the event never matter. A missing or null field is an error (exit 1) naming it.
    ///
    /// Example: idem key derive --field /id --field /type --prefix stripe < event.json
    Derive(DeriveCmd),
}

#[derive(Debug, Args)]
pub struct DeriveCmd {
    /// JSON pointer (RFC 6901) of an identity field, e.g. /id or /data/object/id; repeat, in
    /// order.
    #[arg(long = "field", value_name = "POINTER", required = true)]
    pub fields: Vec<String>,
    /// Text put before the values (e.g. the provider or workflow name).
    #[arg(long)]
    pub prefix: Option<String>,
    /// Text put after the values (e.g. the side effect: charge, email).
    #[arg(long)]
    pub suffix: Option<String>,
    /// Always hash the values, even when they are short plain tokens.
    #[arg(long)]
    pub hash: bool,
}

// ------------------------------------------------------------------ client verbs

/// How to reach the server.
#[derive(Debug, Clone, Args)]
pub struct Server {
    /// Base URL of the idem server.
    #[arg(long, env = "IDEM_URL", default_value = DEFAULT_URL)]
    pub url: String,
    /// API token (Bearer), when the server has tokens.
    #[arg(long, env = "IDEM_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

/// The server, and how to print its answer.
#[derive(Debug, Clone, Args)]
pub struct Conn {
    #[command(flatten)]
    pub server: Server,
    /// Print the server's raw JSON answer instead of a table (for scripts).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct NsTarget {
    /// Namespace.
    pub ns: String,
    #[command(flatten)]
    pub conn: Conn,
}

#[derive(Debug, Args)]
pub struct KeyTarget {
    /// Namespace.
    pub ns: String,
    /// Key (any visible ASCII; percent-encoded for you).
    pub key: String,
    #[command(flatten)]
    pub conn: Conn,
}

#[derive(Debug, Args)]
#[command(after_help = EXIT_CODES_HELP)]
pub struct ClaimCmd {
    #[command(flatten)]
    pub target: KeyTarget,
    /// The operation's payload (JSON); the server fingerprints it to detect a key reused for
    /// a different operation.
    #[arg(long, group = "fp", value_name = "JSON")]
    pub payload: Option<String>,
    /// Read the payload from a JSON file.
    #[arg(long, group = "fp", value_name = "FILE")]
    pub payload_file: Option<PathBuf>,
    /// A precomputed fingerprint (SHA-256 hex of the JCS canonical payload).
    #[arg(long, group = "fp", value_name = "HEX")]
    pub fingerprint: Option<String>,
    /// Who is claiming (e.g. the n8n execution id): recorded, never part of the key.
    #[arg(long)]
    pub owner: Option<String>,
    /// Lease length, e.g. 30s (default: the namespace policy).
    #[arg(long, value_name = "DURATION")]
    pub lease: Option<String>,
    /// Instead of answering in_flight at once, wait up to this long for the holder to finish
    /// (server caps it at 30s).
    #[arg(long, value_name = "DURATION")]
    pub wait: Option<String>,
    /// Correlation id recorded with the claim.
    #[arg(long)]
    pub correlation_id: Option<String>,
    /// Lease-expiry behaviour for this claim: reclaim or review.
    #[arg(long, value_name = "POLICY")]
    pub lease_expiry: Option<String>,
}

#[derive(Debug, Args)]
#[command(after_help = EXIT_CODES_HELP)]
pub struct EffectCmd {
    /// Namespace.
    #[arg(long)]
    pub ns: String,
    /// Key (any visible ASCII; percent-encoded for you); sent as the idempotency header.
    #[arg(long)]
    pub key: String,
    /// POST, PUT, PATCH or DELETE.
    #[arg(long, default_value = "POST")]
    pub method: String,
    /// The destination (must pass the namespace's egress policy).
    #[arg(long)]
    pub url: String,
    /// A request header `Name: value` (repeatable). Sent, never stored or printed.
    #[arg(short = 'H', long = "header", value_name = "NAME: VALUE")]
    pub headers: Vec<String>,
    /// JSON body, or @FILE to read it from a file.
    #[arg(long, value_name = "JSON|@FILE")]
    pub data: Option<String>,
    /// Header that carries the key (default Idempotency-Key).
    #[arg(long, value_name = "NAME", conflicts_with = "no_idempotency_header")]
    pub idempotency_header: Option<String>,
    /// Send no idempotency header.
    #[arg(long)]
    pub no_idempotency_header: bool,
    /// The whole attempt, milliseconds (default 30000, at most 300000).
    #[arg(long, value_name = "MS")]
    pub timeout_ms: Option<u64>,
    /// The destination dedupes by the idempotency header (5xx and timeouts become retryable).
    #[arg(long)]
    pub destination_idempotent: bool,
    /// Recorded as the owner (e.g. the cron job's run id).
    #[arg(long)]
    pub owner: Option<String>,
    /// Base URL of the idem server (`--url` names the destination here).
    #[arg(long, env = "IDEM_URL", default_value = DEFAULT_URL, value_name = "URL")]
    pub server: String,
    /// API token (Bearer), when the server has tokens.
    #[arg(long, env = "IDEM_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Print the server's whole JSON answer instead of the response.
    #[arg(long)]
    pub json: bool,
}

/// The fencing token of the lease you hold (from the claim's `.token`).
#[derive(Debug, Args)]
pub struct LeaseTokenArg {
    /// Lease token returned by the claim (`idem claim --json | jq -r .token`).
    #[arg(
        long,
        env = "IDEM_LEASE_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub lease_token: String,
}

#[derive(Debug, Args)]
pub struct PrepareCmd {
    #[command(flatten)]
    pub target: KeyTarget,
    #[command(flatten)]
    pub lease: LeaseTokenArg,
    /// The payload to deliver (JSON).
    #[arg(long, value_name = "JSON", required_unless_present = "payload_file")]
    pub payload: Option<String>,
    /// Read the payload to deliver from a JSON file.
    #[arg(long, value_name = "FILE", conflicts_with = "payload")]
    pub payload_file: Option<PathBuf>,
    /// Hold it for an operator's approval (→ awaiting_approval).
    #[arg(long)]
    pub approval_required: bool,
}

#[derive(Debug, Args)]
pub struct HeartbeatCmd {
    #[command(flatten)]
    pub target: KeyTarget,
    #[command(flatten)]
    pub lease: LeaseTokenArg,
    /// New lease length from now, e.g. 30s (default: the namespace policy).
    #[arg(long, value_name = "DURATION")]
    pub lease_for: Option<String>,
}

#[derive(Debug, Args)]
pub struct CompleteCmd {
    #[command(flatten)]
    pub target: KeyTarget,
    #[command(flatten)]
    pub lease: LeaseTokenArg,
    /// Result to store and replay to duplicates (JSON).
    #[arg(long, value_name = "JSON")]
    pub result: Option<String>,
    /// The destination's id for the effect (charge id, message id).
    #[arg(long)]
    pub external_ref: Option<String>,
    #[command(flatten)]
    pub cost: CostArgs,
}

/// What the attempt spent (recorded on its event and summed on the record).
#[derive(Debug, Args)]
pub struct CostArgs {
    /// Model tokens this attempt spent (a non-negative integer).
    #[arg(long, value_name = "N")]
    pub cost_tokens: Option<u64>,
    /// US dollars this attempt spent (a non-negative number, e.g. 0.0042).
    #[arg(long, value_name = "USD", allow_negative_numbers = true)]
    pub cost_usd: Option<f64>,
}

impl CostArgs {
    /// The `cost` member of a complete or fail body, if any flag was given.
    pub fn to_json(&self) -> Option<serde_json::Value> {
        if self.cost_tokens.is_none() && self.cost_usd.is_none() {
            return None;
        }
        let mut c = serde_json::Map::new();
        if let Some(t) = self.cost_tokens {
            c.insert("tokens".into(), t.into());
        }
        if let Some(u) = self.cost_usd {
            c.insert("usd".into(), serde_json::json!(u));
        }
        Some(serde_json::Value::Object(c))
    }
}

#[derive(Debug, Args)]
pub struct FailCmd {
    #[command(flatten)]
    pub target: KeyTarget,
    #[command(flatten)]
    pub lease: LeaseTokenArg,
    /// Decide the class yourself: retryable, permanent or ambiguous.
    #[arg(long)]
    pub kind: Option<String>,
    /// HTTP status the destination answered (classified by the server).
    #[arg(long)]
    pub http_status: Option<u16>,
    /// Error category: timeout, connection, validation, auth, business, …
    #[arg(long)]
    pub category: Option<String>,
    /// Error message (sanitized and stored for operators).
    #[arg(long)]
    pub message: Option<String>,
    /// Whether the request may have reached the destination (false: it certainly did not).
    #[arg(long, value_name = "true|false")]
    pub sent: Option<bool>,
    /// The destination's Retry-After (seconds or HTTP-date).
    #[arg(long)]
    pub retry_after: Option<String>,
    #[command(flatten)]
    pub cost: CostArgs,
}

#[derive(Debug, Args)]
pub struct LsCmd {
    #[command(flatten)]
    pub target: NsTarget,
    /// Only records in this state (e.g. needs_review).
    #[arg(long)]
    pub state: Option<String>,
    /// Page size (1–1000).
    #[arg(long)]
    pub limit: Option<u32>,
    /// Continue after a previous page (its next_cursor).
    #[arg(long)]
    pub cursor: Option<String>,
    /// Only records with this owner.
    #[arg(long)]
    pub owner: Option<String>,
    /// Only records with this correlation id.
    #[arg(long)]
    pub correlation_id: Option<String>,
}

#[derive(Debug, Args)]
pub struct ReviewCmd {
    /// Only this namespace (default: every namespace the token may see).
    #[arg(long)]
    pub namespace: Option<String>,
    /// needs_review, awaiting_approval or processing (stuck only); default: all three.
    #[arg(long)]
    pub state: Option<String>,
    /// Only records with this owner.
    #[arg(long)]
    pub owner: Option<String>,
    /// Only records with this correlation id.
    #[arg(long)]
    pub correlation_id: Option<String>,
    /// Page size (1–1000).
    #[arg(long)]
    pub limit: Option<u32>,
    /// Continue after a previous page (its next_cursor).
    #[arg(long)]
    pub cursor: Option<String>,
    #[command(flatten)]
    pub conn: Conn,
}

#[derive(Debug, Args)]
pub struct ResolveCmd {
    #[command(flatten)]
    pub target: KeyTarget,
    /// completed (it happened), retry (fresh retry budget) or failed_permanent.
    #[arg(long, value_name = "ACTION")]
    pub action: String,
    /// Why (recorded with who resolved it).
    #[arg(long)]
    pub note: String,
    /// The destination's id, when you confirmed the effect happened.
    #[arg(long)]
    pub external_ref: Option<String>,
    /// Result to store (JSON), with --action completed.
    #[arg(long, value_name = "JSON")]
    pub result: Option<String>,
}

#[derive(Debug, Args)]
pub struct NoteCmd {
    #[command(flatten)]
    pub target: KeyTarget,
    /// Why (recorded).
    #[arg(long)]
    pub note: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum NsCmd {
    /// Show a namespace: paused, policy and record counts per state.
    Get(NsTarget),
    /// Merge policy fields (JSON, durations in *_ms milliseconds), e.g.
    /// idem ns set payments --json '{"lease_expiry": "review", "retry": {"max_attempts": 3}}'
    Set(NsSetCmd),
}

#[derive(Debug, Args)]
pub struct NsSetCmd {
    /// Namespace.
    pub ns: String,
    /// The policy patch (JSON object); fields not given keep their value.
    #[arg(long = "json", value_name = "JSON")]
    pub patch: String,
    /// Print the server's raw JSON answer instead of a table.
    #[arg(long)]
    pub raw: bool,
    #[command(flatten)]
    pub server: Server,
}

// ------------------------------------------------------------------ source

#[derive(Debug, Subcommand)]
pub enum SourceCmd {
    /// Create or replace a source from a JSON document (the fields of PUT /v1/sources/NAME),
    /// e.g. idem source put stripe --json '{"provider": "stripe", "forward": {"url":
    /// "http://127.0.0.1:5678/webhook/stripe"}}' --secret-env STRIPE_WEBHOOK_SECRET.
    /// With --patch the document is merged into the existing source instead.
    Put(SourcePutCmd),
    /// Show a source (secrets only as their last 4 characters).
    Get(SourceTarget),
    /// List the sources.
    List(SourceList),
    /// Delete a source; refused while some of its events are not delivered, unless --force
    /// (their records stay; nothing more is forwarded).
    Delete(SourceDeleteCmd),
}

#[derive(Debug, Args)]
pub struct SourcePutCmd {
    /// Source name (the namespace syntax).
    pub name: String,
    /// The source document (JSON object) inline.
    #[arg(long = "json", value_name = "JSON", conflicts_with = "file")]
    pub doc: Option<String>,
    /// The source document from a file.
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Read a signing secret from this environment variable (repeat for rotation, oldest
    /// first); replaces `secrets` of the document. Keeps secrets off the command line.
    #[arg(long = "secret-env", value_name = "VAR")]
    pub secret_env: Vec<String>,
    /// Read forward.secret (whsec_…) from this environment variable; also the secret of every
    /// `forwards` destination that names none.
    #[arg(long = "forward-secret-env", value_name = "VAR")]
    pub forward_secret_env: Option<String>,
    /// Merge into the existing source (PATCH) instead of replacing it.
    #[arg(long)]
    pub patch: bool,
    /// Print the server's raw JSON answer (one line) instead of indented JSON.
    #[arg(long)]
    pub raw: bool,
    #[command(flatten)]
    pub server: Server,
}

#[derive(Debug, Args)]
pub struct SourceTarget {
    /// Source name.
    pub name: String,
    #[command(flatten)]
    pub conn: Conn,
}

#[derive(Debug, Args)]
pub struct SourceList {
    #[command(flatten)]
    pub conn: Conn,
}

#[derive(Debug, Args)]
pub struct SourceDeleteCmd {
    /// Source name.
    pub name: String,
    /// Delete even while events are not delivered.
    #[arg(long)]
    pub force: bool,
    /// Confirm the deletion.
    #[arg(long)]
    pub yes: bool,
    #[command(flatten)]
    pub conn: Conn,
}

// ------------------------------------------------------------------ action

#[derive(Debug, Subcommand)]
pub enum ActionCmd {
    /// Create or replace an action from a JSON document (the fields of
    /// PUT /v1/namespaces/NS/actions/NAME), e.g. idem action put shop send_followup --file
    /// followup.json --header-env Authorization=MAIL_API_AUTHORIZATION.
    Put(ActionPutCmd),
    /// Show an action (header values only as their last 4 characters).
    Get(ActionTarget),
    /// List a namespace's actions.
    List(ActionList),
    /// Delete an action (the records of its calls stay).
    Delete(ActionDeleteCmd),
}

#[derive(Debug, Args)]
pub struct ActionPutCmd {
    /// Namespace.
    pub namespace: String,
    /// Action name: the tool name agents see (1-64 of A-Z a-z 0-9 _ -).
    pub name: String,
    /// The action document (JSON object) inline.
    #[arg(long = "json", value_name = "JSON", conflicts_with = "file")]
    pub doc: Option<String>,
    /// The action document from a file.
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Set deliver.http.headers.HEADER from this environment variable (repeatable). Keeps
    /// credentials off the command line.
    #[arg(long = "header-env", value_name = "HEADER=VAR")]
    pub header_env: Vec<String>,
    /// Print the server's raw JSON answer (one line) instead of indented JSON.
    #[arg(long)]
    pub raw: bool,
    #[command(flatten)]
    pub server: Server,
}

#[derive(Debug, Args)]
pub struct ActionTarget {
    /// Namespace.
    pub namespace: String,
    /// Action name.
    pub name: String,
    #[command(flatten)]
    pub conn: Conn,
}

#[derive(Debug, Args)]
pub struct ActionList {
    /// Namespace.
    pub namespace: String,
    #[command(flatten)]
    pub conn: Conn,
}

#[derive(Debug, Args)]
pub struct ActionDeleteCmd {
    /// Namespace.
    pub namespace: String,
    /// Action name.
    pub name: String,
    /// Confirm the deletion.
    #[arg(long)]
    pub yes: bool,
    #[command(flatten)]
    pub conn: Conn,
}

// ------------------------------------------------------------------ run

#[derive(Debug, Args)]
#[command(after_help = EXIT_CODES_HELP)]
pub struct RunCmd {
    /// Namespace of the key.
    #[arg(long)]
    pub ns: String,
    /// The key of this operation (one business operation, not one attempt).
    #[arg(long)]
    pub key: String,
    /// The operation's payload as a JSON file: the same key with a different payload is a
    /// conflict (exit 14) instead of a silent replay.
    #[arg(long, value_name = "FILE", conflicts_with = "payload")]
    pub payload_file: Option<PathBuf>,
    /// The operation's payload as inline JSON.
    #[arg(long, value_name = "JSON")]
    pub payload: Option<String>,
    /// Lease length, e.g. 30s (default: the namespace policy); heartbeats every third of it.
    #[arg(long, value_name = "DURATION")]
    pub lease: Option<String>,
    /// Who runs it (recorded) [default: idem-run@HOST/PID].
    #[arg(long)]
    pub owner: Option<String>,
    /// idem server to use [env: IDEM_URL].
    #[arg(long, value_name = "URL", conflicts_with = "db")]
    pub url: Option<String>,
    /// Use this ledger directly, no server: sqlite://PATH, a bare path (SQLite file), or
    /// postgres://…
    #[arg(long, value_name = "URL")]
    pub db: Option<String>,
    /// API token for --url.
    #[arg(long, env = "IDEM_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// The command and its arguments (after `--`).
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

// ------------------------------------------------------------------ drill

#[derive(Debug, Args)]
pub struct DrillCmd {
    /// Base URL of the idem server to drill.
    #[arg(long, env = "IDEM_URL", default_value = DEFAULT_URL)]
    pub url: String,
    /// Prefix of the namespaces the drills create.
    #[arg(long, value_name = "PREFIX", default_value = "drill")]
    pub ns: String,
    /// API token (operator role, scope `*`) when the server has tokens.
    #[arg(long, env = "IDEM_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Run only the drills whose name contains this text.
    #[arg(long)]
    pub only: Option<String>,
}
