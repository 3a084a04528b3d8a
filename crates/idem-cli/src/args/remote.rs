//! The arguments of the commands that talk to a running idem: the client verbs (claim,
//! effect, prepare, heartbeat, complete, fail, ls, review, resolve, note, ns), `source`,
//! `action`, `run` and `drill`, and the server and connection options they share. The `///`
//! comments are the `--help` text.
//!
//! Only declarations for clap: parsing, defaults and help; this module must never send a
//! request.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::client::DEFAULT_URL;
use crate::exit::EXIT_CODES_HELP;

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
    /// Set deliver.http.headers.HEADER (deliver.mcp.headers.HEADER for an MCP delivery) from
    /// this environment variable (repeatable). Keeps credentials off the command line.
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
