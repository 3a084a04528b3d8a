//! The arguments of the commands that work on this machine: `serve`, `backup`,
//! `healthcheck`, `token`, `key`, `audit` and `bench`. The `///` comments are the `--help`
//! text.
//!
//! Only declarations for clap: parsing, defaults and help; this module must never run
//! anything or read a ledger.

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};

use crate::client::DEFAULT_URL;

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
    /// three destinations), intake_duplicate, action (an MCP tools/call of a fresh identity),
    /// action_duplicate (a repeated identity, replayed) (effects run in the http and direct
    /// modes only, intake and actions in http only).
    #[arg(
        long,
        value_name = "LIST",
        default_value = "first_time_pair,duplicate,action_duplicate,effect,action,effect_256k,effect_tls,intake,intake_duplicate",
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
