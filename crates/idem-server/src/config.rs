//! Service configuration in layers: defaults → `--config` TOML file → `IDEM_*` environment →
//! command-line flags, each layer overriding the one before. Validated once, at start, with
//! errors that name the setting and where it came from.
//!
//! Durations are human (`300ms`, `15m`, `30d`). Per-namespace policy may be set in the file
//! (`[namespaces.NAME]`); it uses the policy fields of the API, where a `*_ms` field also
//! accepts a human duration string, and a field without `_ms` (`lease = "45s"`) means the
//! same thing. The database URL is only ever printed through [`Config::db_redacted`].

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

pub use crate::fields::MAX_WAIT_MS;

/// What `idem serve` was given on the command line (each overrides config file and env).
/// `Debug` shows the database URL redacted.
#[derive(Clone, Default)]
pub struct ServeArgs {
    pub listen: Option<String>,
    pub db: Option<String>,
    pub config: Option<PathBuf>,
    pub janitor_interval: Option<String>,
    pub log_format: Option<String>,
    pub tls_cert: Option<String>,
    pub tls_key: Option<String>,
    pub otlp_endpoint: Option<String>,
    /// Effects: cap of a stored response body (`256KiB`).
    pub max_response_bytes: Option<String>,
    /// Effects: PEM file of extra CA certificates for outbound HTTPS.
    pub extra_ca: Option<String>,
}

impl std::fmt::Debug for ServeArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ServeArgs {
            listen,
            db,
            config,
            janitor_interval,
            log_format,
            tls_cert,
            tls_key,
            otlp_endpoint,
            max_response_bytes,
            extra_ca,
        } = self;
        f.debug_struct("ServeArgs")
            .field("listen", listen)
            .field("db", &db.as_deref().map(idem::redact_db_url))
            .field("config", config)
            .field("janitor_interval", janitor_interval)
            .field("log_format", log_format)
            .field("tls_cert", tls_cert)
            .field("tls_key", tls_key)
            .field(
                "otlp_endpoint",
                &otlp_endpoint.as_deref().map(idem::redact_db_url),
            )
            .field("max_response_bytes", max_response_bytes)
            .field("extra_ca", extra_ca)
            .finish()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

impl LogFormat {
    fn parse(s: &str) -> Option<LogFormat> {
        match s.trim().to_ascii_lowercase().as_str() {
            "text" | "pretty" | "plain" => Some(LogFormat::Text),
            "json" => Some(LogFormat::Json),
            _ => None,
        }
    }
}

/// The validated configuration of one server. `Debug` shows the database URL redacted.
#[derive(Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub db: String,
    pub janitor_interval: Duration,
    /// Records per janitor batch (sweep and retention); `None` takes the backend's measured
    /// default ([`Config::janitor_batch_for`]).
    pub janitor_batch: Option<usize>,
    /// How long one scrape's store gauges (records per state, review queue, oldest
    /// `processing`) are reused by the next scrapes. The gauges are read at scrape time from
    /// counters the store keeps exact on every write; this only stops a scrape storm from
    /// becoming a query storm. From 0 (every scrape reads) to 1s.
    pub stats_interval: Duration,
    /// PostgreSQL connections per instance.
    pub pg_pool: usize,
    pub alert_interval: Duration,
    /// How often the intake's delivery worker looks for due forwards when it found none.
    pub forward_interval: Duration,
    /// Alert delivery attempts before giving up.
    pub alert_max_tries: u32,
    pub alert_timeout: Duration,
    pub log_format: LogFormat,
    /// `tracing` filter directive (`info`, `idem_server=debug`, …).
    pub log_level: String,
    /// Largest request body, bytes.
    pub body_limit: usize,
    /// Policy patches applied at start, by namespace (JSON merge patches with `*_ms` integers).
    pub namespaces: NamespacePolicies,
    /// Intake sources created or replaced at start (`[sources.NAME]`: the fields of
    /// `PUT /v1/sources/NAME`, secrets already read from `secrets_env` / `forward.secret_env`).
    pub sources: SourceDocs,
    /// Actions created or replaced at start (`[namespaces.NS.actions.NAME]`: the fields of
    /// `PUT /v1/namespaces/NS/actions/NAME`, header values already read from `headers_env`).
    pub actions: ActionDocs,
    /// PEM certificate chain for HTTPS (with [`Config::tls_key`]); unset: plain HTTP.
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of [`Config::tls_cert`].
    pub tls_key: Option<PathBuf>,
    /// OTLP/HTTP collector base URL (`/v1/traces` is appended); unset: no trace export.
    pub otlp_endpoint: Option<String>,
    /// Effects: most bytes of a destination's response body kept (`effects.max_response_bytes`,
    /// `--max-response-bytes`); longer ones are cut and marked `truncated`.
    pub max_response_bytes: usize,
    /// Effects: PEM file of CA certificates trusted for outbound HTTPS besides the web roots
    /// (`effects.extra_ca`, `--extra-ca`).
    pub extra_ca: Option<PathBuf>,
    /// Connection limits: header and body read timeouts, head size, connections
    /// (`[http]`, see [`crate::conn`]).
    pub http: crate::conn::HttpLimits,
    /// Settings written for an earlier version that were accepted with a change: what was
    /// asked and what is used instead. `idem serve` logs each as a warning once logging is
    /// up (CHANGELOG.md, "Upgrading", lists them).
    pub upgrade_warnings: Vec<String>,
}

/// The `[sources.NAME]` documents by source name. Its `Debug` shows only the names: the
/// documents hold signing secrets.
#[derive(Clone, Default, PartialEq)]
pub struct SourceDocs(pub BTreeMap<String, Value>);

impl std::fmt::Debug for SourceDocs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.keys()).finish()
    }
}

/// The `[namespaces.NS.actions.NAME]` documents by (namespace, action). Its `Debug` shows
/// only the names: the documents hold header values (credentials).
#[derive(Clone, Default, PartialEq)]
pub struct ActionDocs(pub BTreeMap<(String, String), Value>);

impl std::fmt::Debug for ActionDocs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.keys().map(|(ns, a)| format!("{ns}/{a}")))
            .finish()
    }
}

/// The `[namespaces.NAME]` policy patches by namespace. Its `Debug` shows `alert_secret` as
/// `***`, so printing a [`Config`] never prints a signing secret.
#[derive(Clone, Default, PartialEq)]
pub struct NamespacePolicies(pub BTreeMap<String, Value>);

impl std::ops::Deref for NamespacePolicies {
    type Target = BTreeMap<String, Value>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for NamespacePolicies {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl<'a> IntoIterator for &'a NamespacePolicies {
    type Item = (&'a String, &'a Value);
    type IntoIter = std::collections::btree_map::Iter<'a, String, Value>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl FromIterator<(String, Value)> for NamespacePolicies {
    fn from_iter<I: IntoIterator<Item = (String, Value)>>(iter: I) -> Self {
        NamespacePolicies(iter.into_iter().collect())
    }
}

impl std::fmt::Debug for NamespacePolicies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown = self.0.iter().map(|(name, patch)| {
            let mut patch = patch.clone();
            if let Some(s) = patch.get_mut("alert_secret").filter(|s| !s.is_null()) {
                *s = Value::from("***");
            }
            (name, patch)
        });
        f.debug_map().entries(shown).finish()
    }
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Destructured so that a new field cannot be added without deciding how it prints.
        let Config {
            listen,
            db: _,
            janitor_interval,
            janitor_batch,
            stats_interval,
            pg_pool,
            alert_interval,
            forward_interval,
            alert_max_tries,
            alert_timeout,
            log_format,
            log_level,
            body_limit,
            namespaces,
            sources,
            actions,
            tls_cert,
            tls_key,
            otlp_endpoint,
            max_response_bytes,
            extra_ca,
            http,
            upgrade_warnings,
        } = self;
        f.debug_struct("Config")
            .field("listen", listen)
            .field("db", &self.db_redacted())
            .field("janitor_interval", janitor_interval)
            .field("janitor_batch", janitor_batch)
            .field("stats_interval", stats_interval)
            .field("pg_pool", pg_pool)
            .field("alert_interval", alert_interval)
            .field("forward_interval", forward_interval)
            .field("alert_max_tries", alert_max_tries)
            .field("alert_timeout", alert_timeout)
            .field("log_format", log_format)
            .field("log_level", log_level)
            .field("body_limit", body_limit)
            .field("namespaces", namespaces)
            .field("sources", sources)
            .field("actions", actions)
            .field("tls_cert", tls_cert)
            .field("tls_key", tls_key)
            // A collector URL may carry credentials in its userinfo.
            .field(
                "otlp_endpoint",
                &otlp_endpoint.as_deref().map(idem::redact_db_url),
            )
            .field("max_response_bytes", max_response_bytes)
            .field("extra_ca", extra_ca)
            .field("http", http)
            .field("upgrade_warnings", upgrade_warnings)
            .finish()
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 7780)),
            db: "sqlite://idem.db".into(),
            janitor_interval: Duration::from_secs(30),
            janitor_batch: None,
            stats_interval: Duration::ZERO,
            pg_pool: 16,
            alert_interval: Duration::from_secs(2),
            forward_interval: Duration::from_millis(200),
            alert_max_tries: 6,
            alert_timeout: Duration::from_secs(5),
            log_format: LogFormat::Text,
            log_level: "info".into(),
            body_limit: 1024 * 1024,
            namespaces: NamespacePolicies::default(),
            sources: SourceDocs::default(),
            actions: ActionDocs::default(),
            tls_cert: None,
            tls_key: None,
            otlp_endpoint: None,
            max_response_bytes: idem::effect::DEFAULT_MAX_RESPONSE_BYTES,
            extra_ca: None,
            http: crate::conn::HttpLimits::default(),
            upgrade_warnings: Vec::new(),
        }
    }
}

/// The longest a scrape's store gauges are reused (`stats_interval`). A longer value, as
/// earlier versions' configs have (`30s`), is taken as this with an upgrade warning.
pub const MAX_STATS_INTERVAL: Duration = Duration::from_secs(1);

/// Janitor batch on SQLite when none is configured: measured in docs/performance.md (claim
/// p99 1.6-1.9x of idle while expiring 79,000-89,000 records/s).
pub const SQLITE_JANITOR_BATCH: usize = 100;
/// Janitor batch on PostgreSQL when none is configured: the measured best expiry rate, with
/// claim p99 within 2x of idle (docs/performance.md).
pub const POSTGRES_JANITOR_BATCH: usize = 1000;

impl Config {
    /// The janitor batch for this configuration's backend: the configured one, else the
    /// backend's measured default.
    pub fn janitor_batch_for(&self) -> usize {
        self.janitor_batch
            .unwrap_or_else(|| match idem::DbUrl::parse(&self.db) {
                Ok(idem::DbUrl::Postgres(_)) => POSTGRES_JANITOR_BATCH,
                _ => SQLITE_JANITOR_BATCH,
            })
    }

    /// The database URL with any password replaced by `***`.
    pub fn db_redacted(&self) -> String {
        idem::redact_db_url(&self.db)
    }

    /// Builds the configuration from every layer; `env` reads one environment variable.
    pub fn load(
        args: &ServeArgs,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let mut c = Config::default();
        let path = args.config.clone().or_else(|| {
            env("IDEM_CONFIG")
                .filter(|s| !s.is_empty())
                .map(PathBuf::from)
        });
        if let Some(p) = path {
            let text = std::fs::read_to_string(&p).map_err(|e| ConfigError::File {
                path: p.clone(),
                message: e.to_string(),
            })?;
            c.apply_file(&text).map_err(|e| e.in_file(&p))?;
        }
        let vars = [
            ("IDEM_LISTEN", "listen"),
            ("IDEM_DB", "db"),
            ("IDEM_JANITOR_INTERVAL", "janitor_interval"),
            ("IDEM_JANITOR_BATCH", "janitor_batch"),
            ("IDEM_STATS_INTERVAL", "stats_interval"),
            ("IDEM_PG_POOL", "pg_pool"),
            ("IDEM_ALERT_INTERVAL", "alert_interval"),
            ("IDEM_LOG_FORMAT", "log_format"),
            ("IDEM_LOG", "log_level"),
            ("IDEM_BODY_LIMIT", "body_limit"),
            ("IDEM_TLS_CERT", "tls_cert"),
            ("IDEM_TLS_KEY", "tls_key"),
            // The OpenTelemetry variable first, so that idem's own one wins.
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "otlp_endpoint"),
            ("IDEM_OTLP_ENDPOINT", "otlp_endpoint"),
            ("IDEM_MAX_RESPONSE_BYTES", "max_response_bytes"),
            ("IDEM_EXTRA_CA", "extra_ca"),
            ("IDEM_HEADER_READ_TIMEOUT", "http.header_read_timeout"),
            ("IDEM_BODY_READ_TIMEOUT", "http.body_read_timeout"),
            ("IDEM_MAX_HEADER_BYTES", "http.max_header_bytes"),
            ("IDEM_MAX_CONNECTIONS", "http.max_connections"),
        ];
        for (var, setting) in vars {
            if let Some(v) = env(var).filter(|v| !v.is_empty()) {
                c.set(setting, &v).map_err(|m| ConfigError::Setting {
                    setting: var.into(),
                    message: m,
                })?;
            }
        }
        let flags = [
            ("--listen", "listen", &args.listen),
            ("--db", "db", &args.db),
            (
                "--janitor-interval",
                "janitor_interval",
                &args.janitor_interval,
            ),
            ("--log-format", "log_format", &args.log_format),
            ("--tls-cert", "tls_cert", &args.tls_cert),
            ("--tls-key", "tls_key", &args.tls_key),
            ("--otlp-endpoint", "otlp_endpoint", &args.otlp_endpoint),
            (
                "--max-response-bytes",
                "max_response_bytes",
                &args.max_response_bytes,
            ),
            ("--extra-ca", "extra_ca", &args.extra_ca),
        ];
        for (flag, setting, v) in flags {
            if let Some(v) = v {
                c.set(setting, v).map_err(|m| ConfigError::Setting {
                    setting: flag.into(),
                    message: m,
                })?;
            }
        }
        c.validate()?;
        Ok(c)
    }

    /// Sets one scalar setting from its text form.
    fn set(&mut self, setting: &str, v: &str) -> Result<(), String> {
        match setting {
            "listen" => {
                self.listen = v.trim().parse().map_err(|_| {
                    format!("{v:?} is not an address: use IP:PORT, e.g. 127.0.0.1:7780")
                })?
            }
            "db" => {
                idem::DbUrl::parse(v).map_err(|e| e.to_string())?;
                self.db = v.to_owned();
            }
            "janitor_interval" => self.janitor_interval = parse_duration(v)?,
            "alert_interval" => self.alert_interval = parse_duration(v)?,
            "stats_interval" => {
                let asked = parse_duration(v)?;
                self.stats_interval = asked.min(MAX_STATS_INTERVAL);
                if asked > MAX_STATS_INTERVAL {
                    // Earlier versions recounted the gauges on a timer (default 30s, at least
                    // 1s); the gauges are now exact at every scrape and this is only the
                    // longest a scrape's reading is reused.
                    self.upgrade_warnings.push(format!(
                        "stats_interval = {v:?} is from an earlier version (the store gauges \
                         were recounted on that timer); they are now read at every scrape and \
                         reused for at most 1s: using 1s (set a value from 0s to 1s, or remove the setting, to silence this)"
                    ));
                }
            }
            "janitor_batch" => {
                self.janitor_batch = Some(
                    v.trim()
                        .parse()
                        .map_err(|_| format!("{v:?} is not a positive integer"))?,
                )
            }
            "pg_pool" => {
                self.pg_pool = v
                    .trim()
                    .parse()
                    .map_err(|_| format!("{v:?} is not a positive integer"))?
            }
            "log_format" => {
                self.log_format = LogFormat::parse(v)
                    .ok_or_else(|| format!("{v:?} is not a log format: use text or json"))?
            }
            "log_level" => self.log_level = v.to_owned(),
            "body_limit" => self.body_limit = parse_size(v)?,
            "max_response_bytes" => self.max_response_bytes = parse_size(v)?,
            "extra_ca" => self.extra_ca = Some(PathBuf::from(v)),
            "http.header_read_timeout" => self.http.header_read_timeout = parse_duration(v)?,
            "http.body_read_timeout" => self.http.body_read_timeout = parse_duration(v)?,
            "http.max_header_bytes" => self.http.max_header_bytes = parse_size(v)?,
            "http.max_connections" => {
                self.http.max_connections = v
                    .trim()
                    .parse()
                    .map_err(|_| format!("{v:?} is not a positive integer"))?
            }
            "tls_cert" => self.tls_cert = Some(PathBuf::from(v)),
            "tls_key" => self.tls_key = Some(PathBuf::from(v)),
            "otlp_endpoint" => {
                let u = url::Url::parse(v.trim()).map_err(|e| {
                    format!("{v:?} is not a URL ({e}): use e.g. http://127.0.0.1:4318")
                })?;
                if !matches!(u.scheme(), "http" | "https") {
                    return Err(format!("{v:?}: use an http:// or https:// URL"));
                }
                self.otlp_endpoint = Some(v.trim().to_owned());
            }
            other => return Err(format!("unknown setting {other}")),
        }
        Ok(())
    }

    fn apply_file(&mut self, text: &str) -> Result<(), ConfigError> {
        let file: FileConfig = toml::from_str(text).map_err(|e| ConfigError::Setting {
            setting: "file".into(),
            message: toml_error_without_text(text, &e),
        })?;
        let mut set = |name: &str, v: Option<String>| -> Result<(), ConfigError> {
            match v {
                Some(v) => self.set(name, &v).map_err(|m| ConfigError::Setting {
                    setting: name.into(),
                    message: m,
                }),
                None => Ok(()),
            }
        };
        set("listen", file.listen)?;
        set("db", file.db)?;
        set("janitor_interval", file.janitor_interval)?;
        set("janitor_batch", file.janitor_batch.map(|n| n.to_string()))?;
        set("alert_interval", file.alert_interval)?;
        set("stats_interval", file.stats_interval)?;
        set("pg_pool", file.pg_pool.map(|n| n.to_string()))?;
        set("log_format", file.log_format)?;
        set("log_level", file.log_level)?;
        set("tls_cert", file.tls_cert)?;
        set("tls_key", file.tls_key)?;
        set("otlp_endpoint", file.otlp_endpoint)?;
        set(
            "body_limit",
            file.body_limit.map(|v| match v {
                toml::Value::String(s) => s,
                other => other.to_string(),
            }),
        )?;
        if let Some(http) = file.http {
            let text = |v: toml::Value| match v {
                toml::Value::String(s) => s,
                other => other.to_string(),
            };
            set("http.header_read_timeout", http.header_read_timeout)?;
            set("http.body_read_timeout", http.body_read_timeout)?;
            set("http.max_header_bytes", http.max_header_bytes.map(text))?;
            set(
                "http.max_connections",
                http.max_connections.map(|n| n.to_string()),
            )?;
        }
        if let Some(effects) = file.effects {
            set("extra_ca", effects.extra_ca)?;
            set(
                "max_response_bytes",
                effects.max_response_bytes.map(|v| match v {
                    toml::Value::String(s) => s,
                    other => other.to_string(),
                }),
            )?;
        }
        for (name, mut table) in file.namespaces {
            if let Some(actions) = table.remove("actions") {
                let Some(actions) = actions.as_table() else {
                    return Err(ConfigError::Setting {
                        setting: format!("namespaces.{name}.actions"),
                        message: "must be a table of actions by name".into(),
                    });
                };
                for (action, t) in actions {
                    let doc = action_from_toml(&name, action, t)?;
                    self.actions.0.insert((name.clone(), action.clone()), doc);
                }
            }
            let patch = policy_from_toml(&table).map_err(|m| ConfigError::Setting {
                setting: format!("namespaces.{name}"),
                message: m,
            })?;
            self.namespaces.insert(name, patch);
        }
        for (name, table) in file.sources {
            let doc = source_from_toml(&name, &table)?;
            self.sources.0.insert(name, doc);
        }
        Ok(())
    }

    /// Cross-setting checks and the namespace patches (validated against the default policy).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |setting: &str, message: &str| ConfigError::Setting {
            setting: setting.into(),
            message: message.into(),
        };
        if self.janitor_interval < Duration::from_millis(10) {
            return Err(bad("janitor_interval", "must be at least 10ms"));
        }
        if self.alert_interval < Duration::from_millis(10) {
            return Err(bad("alert_interval", "must be at least 10ms"));
        }
        if self.stats_interval > MAX_STATS_INTERVAL {
            return Err(bad(
                "stats_interval",
                "must be at most 1s: the gauges are read at every scrape and may be reused \
                 for at most a second",
            ));
        }
        if let Some(b) = self.janitor_batch {
            if !(1..=100_000).contains(&b) {
                return Err(bad("janitor_batch", "must be from 1 to 100000"));
            }
        }
        if !(1..=1000).contains(&self.pg_pool) {
            return Err(bad("pg_pool", "must be from 1 to 1000"));
        }
        if !(1024..=1024 * 1024 * 1024).contains(&self.body_limit) {
            return Err(bad("body_limit", "must be from 1KiB to 1GiB"));
        }
        if !(1..=64 * 1024 * 1024).contains(&self.max_response_bytes) {
            return Err(bad(
                "effects.max_response_bytes",
                "must be from 1 byte to 64MiB",
            ));
        }
        self.http.validate().map_err(|(s, m)| bad(s, m))?;
        match (&self.tls_cert, &self.tls_key) {
            (Some(_), None) => return Err(bad("tls_key", "tls_cert is set: set tls_key too")),
            (None, Some(_)) => return Err(bad("tls_cert", "tls_key is set: set tls_cert too")),
            _ => {}
        }
        for (name, doc) in &self.sources.0 {
            idem::Namespace::try_from(name.as_str())
                .map_err(|e| bad(&format!("sources.{name}"), &e.to_string()))?;
            idem_intake::source::SourceInput::parse(name, doc)
                .map_err(|e| bad(&format!("sources.{name}.{}", e.field()), &e.to_string()))?;
        }
        for ((ns, name), doc) in &self.actions.0 {
            let at = format!("namespaces.{ns}.actions.{name}");
            idem::Namespace::try_from(ns.as_str()).map_err(|e| bad(&at, &e.to_string()))?;
            crate::actions::model::Action::parse(name, doc).map_err(|e| {
                let field = match &e {
                    crate::error::ApiError::InvalidField { field, .. }
                    | crate::error::ApiError::UnknownField { field } => format!("{at}.{field}"),
                    _ => at.clone(),
                };
                bad(&field, &e.to_string())
            })?;
        }
        for (name, patch) in &self.namespaces {
            idem::Namespace::try_from(name.as_str())
                .map_err(|e| bad(&format!("namespaces.{name}"), &e.to_string()))?;
            idem::Policy::default()
                .patch(patch)
                .map_err(|e| bad(&format!("namespaces.{name}"), &e.to_string()))?;
        }
        Ok(())
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<String>,
    db: Option<String>,
    janitor_interval: Option<String>,
    janitor_batch: Option<u64>,
    alert_interval: Option<String>,
    stats_interval: Option<String>,
    pg_pool: Option<u64>,
    log_format: Option<String>,
    log_level: Option<String>,
    body_limit: Option<toml::Value>,
    tls_cert: Option<String>,
    tls_key: Option<String>,
    otlp_endpoint: Option<String>,
    effects: Option<EffectsFile>,
    http: Option<HttpFile>,
    #[serde(default)]
    namespaces: BTreeMap<String, toml::Table>,
    #[serde(default)]
    sources: BTreeMap<String, toml::Table>,
}

/// `[effects]` of the config file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EffectsFile {
    max_response_bytes: Option<toml::Value>,
    extra_ca: Option<String>,
}

/// `[http]` of the config file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpFile {
    header_read_timeout: Option<String>,
    body_read_timeout: Option<String>,
    max_header_bytes: Option<toml::Value>,
    max_connections: Option<u64>,
}

/// Why the configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {message}")]
    File { path: PathBuf, message: String },
    #[error("invalid setting {setting}: {message}")]
    Setting { setting: String, message: String },
    #[error("in config file {path}: {source}")]
    InFile {
        path: PathBuf,
        #[source]
        source: Box<ConfigError>,
    },
}

impl ConfigError {
    fn in_file(self, path: &Path) -> ConfigError {
        ConfigError::InFile {
            path: path.to_owned(),
            source: Box::new(self),
        }
    }
}

/// `300ms`, `15m`, `30d`, or a bare number of milliseconds.
pub fn parse_duration(v: &str) -> Result<Duration, String> {
    let t = v.trim();
    if let Ok(ms) = t.parse::<u64>() {
        return Ok(Duration::from_millis(ms));
    }
    humantime::parse_duration(t)
        .map_err(|e| format!("{v:?} is not a duration ({e}); use e.g. 300ms, 30s, 15m, 30d"))
}

/// Bytes: `1048576`, `512KiB`, `1MiB`, `2MB`.
pub fn parse_size(v: &str) -> Result<usize, String> {
    let t = v.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: usize = num
        .parse()
        .map_err(|_| format!("{v:?} is not a size: use bytes or e.g. 512KiB, 1MiB"))?;
    let mult = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1000,
        "kib" => 1024,
        "m" | "mb" => 1_000_000,
        "mib" => 1024 * 1024,
        "g" | "gb" => 1_000_000_000,
        "gib" => 1024 * 1024 * 1024,
        _ => {
            return Err(format!(
                "{v:?} has an unknown unit: use B, KiB, MiB, KB, MB"
            ))
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("{v:?} is too large"))
}

/// Policy fields that are durations, without their `_ms` suffix.
const DURATION_FIELDS: [&str; 7] = [
    "lease",
    "retention",
    "audit_retention",
    "stuck_after",
    "base",
    "max",
    "window",
];

/// Turns a `[sources.NAME]` table into the JSON document of `PUT /v1/sources/NAME`:
/// `secrets_env = ["VAR", …]` becomes `secrets`, `forward.secret_env` becomes `forward.secret`
/// and `forwards.DEST.secret_env` becomes `forwards.DEST.secret`, read from the environment (an unset variable names the setting, never
/// a value).
fn source_from_toml(name: &str, table: &toml::Table) -> Result<Value, ConfigError> {
    let setting = |s: &str| format!("sources.{name}.{s}");
    let bad = |s: &str, m: String| ConfigError::Setting {
        setting: setting(s),
        message: m,
    };
    let env = |s: &str, var: &str| -> Result<String, ConfigError> {
        std::env::var(var)
            .ok()
            .filter(|v| !v.is_empty())
            .ok_or_else(|| bad(s, format!("environment variable {var} is not set")))
    };
    let mut doc = serde_json::to_value(table)
        .map_err(|e| bad("", format!("not representable as JSON: {e}")))?;
    let Some(obj) = doc.as_object_mut() else {
        return Err(bad("", "must be a table".into()));
    };
    if let Some(vars) = obj.shift_remove("secrets_env") {
        if obj.contains_key("secrets") {
            return Err(bad(
                "secrets_env",
                "give secrets or secrets_env, not both".into(),
            ));
        }
        let vars = vars
            .as_array()
            .ok_or_else(|| bad("secrets_env", "must be a list of variable names".into()))?;
        let mut secrets = vec![];
        for v in vars {
            let var = v
                .as_str()
                .ok_or_else(|| bad("secrets_env", "must be a list of variable names".into()))?;
            secrets.push(Value::String(env("secrets_env", var)?));
        }
        obj.insert("secrets".into(), Value::Array(secrets));
    }
    if let Some(Value::Object(fwd)) = obj.get_mut("forward") {
        if let Some(var) = fwd.shift_remove("secret_env") {
            let var = var
                .as_str()
                .ok_or_else(|| bad("forward.secret_env", "must be a variable name".into()))?;
            fwd.insert(
                "secret".into(),
                Value::String(env("forward.secret_env", var)?),
            );
        }
    }
    if let Some(Value::Object(named)) = obj.get_mut("forwards") {
        for (dest, fwd) in named.iter_mut() {
            let Value::Object(fwd) = fwd else { continue };
            if let Some(var) = fwd.shift_remove("secret_env") {
                let s = format!("forwards.{dest}.secret_env");
                let var = var
                    .as_str()
                    .ok_or_else(|| bad(&s, "must be a variable name".into()))?;
                fwd.insert("secret".into(), Value::String(env(&s, var)?));
            }
        }
    }
    Ok(doc)
}

/// Turns a `[namespaces.NS.actions.NAME]` table into the JSON document of
/// `PUT /v1/namespaces/NS/actions/NAME`: `deliver.http.headers_env = {Header = "VAR"}` becomes
/// `deliver.http.headers`, read from the environment (an unset variable names the setting,
/// never a value).
fn action_from_toml(ns: &str, name: &str, table: &toml::Value) -> Result<Value, ConfigError> {
    let setting = |s: &str| format!("namespaces.{ns}.actions.{name}{s}");
    let bad = |s: &str, m: String| ConfigError::Setting {
        setting: setting(s),
        message: m,
    };
    let mut doc = serde_json::to_value(table)
        .map_err(|e| bad("", format!("not representable as JSON: {e}")))?;
    if !doc.is_object() {
        return Err(bad("", "must be a table".into()));
    }
    for via in ["http", "mcp"] {
        let Some(Value::Object(d)) = doc.pointer_mut(&format!("/deliver/{via}")) else {
            continue;
        };
        let Some(vars) = d.shift_remove("headers_env") else {
            continue;
        };
        let at = format!(".deliver.{via}.headers_env");
        let Value::Object(vars) = vars else {
            return Err(bad(&at, "must be a table of header = \"VARIABLE\"".into()));
        };
        let headers = d
            .entry("headers")
            .or_insert_with(|| Value::Object(Default::default()));
        let Value::Object(headers) = headers else {
            return Err(bad(
                &format!(".deliver.{via}.headers"),
                "must be a table".into(),
            ));
        };
        for (header, var) in vars {
            let var = var
                .as_str()
                .ok_or_else(|| bad(&at, "must be a table of header = \"VARIABLE\"".into()))?;
            let value = std::env::var(var)
                .ok()
                .filter(|v| !v.is_empty())
                .ok_or_else(|| bad(&at, format!("environment variable {var} is not set")))?;
            headers.insert(header, Value::String(value));
        }
    }
    Ok(doc)
}

/// Turns a `[namespaces.NAME]` table into a JSON policy patch (`*_ms` integers).
/// A TOML error as line, column and message, without the excerpt of the file that
/// `toml`'s `Display` prints: the offending line may hold the database password or an
/// `alert_secret`, and this message reaches the log.
fn toml_error_without_text(text: &str, e: &toml::de::Error) -> String {
    match e.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
            format!("line {line}, column {col}: {}", e.message())
        }
        None => e.message().to_owned(),
    }
}

fn policy_from_toml(table: &toml::Table) -> Result<Value, String> {
    let mut out = serde_json::Map::new();
    for (k, v) in table {
        let (name, value) = policy_member(k, v)?;
        out.insert(name, value);
    }
    Ok(Value::Object(out))
}

fn policy_member(k: &str, v: &toml::Value) -> Result<(String, Value), String> {
    let base = k.strip_suffix("_ms").unwrap_or(k);
    let is_duration = DURATION_FIELDS.contains(&base);
    if k == "retry" {
        let t = v
            .as_table()
            .ok_or_else(|| "retry must be a table".to_string())?;
        let mut m = serde_json::Map::new();
        for (rk, rv) in t {
            let (n, val) = policy_member(rk, rv).map_err(|e| format!("retry.{e}"))?;
            m.insert(n, val);
        }
        return Ok((k.into(), Value::Object(m)));
    }
    if is_duration {
        let ms = match v {
            toml::Value::String(s) => parse_duration(s)
                .map_err(|e| format!("{k}: {e}"))?
                .as_millis() as i64,
            toml::Value::Integer(n) => *n,
            _ => {
                return Err(format!(
                    "{k}: must be a duration like \"30s\" or milliseconds"
                ))
            }
        };
        return Ok((format!("{base}_ms"), Value::from(ms)));
    }
    let json = serde_json::to_value(v).map_err(|e| format!("{k}: {e}"))?;
    Ok((k.into(), json))
}

/// A commented example configuration (`idem default-config`).
pub fn default_config_toml() -> &'static str {
    r#"# idem server configuration.
# Layers: defaults -> this file (--config / IDEM_CONFIG) -> IDEM_* environment -> flags.
# Durations are human: 300ms, 30s, 15m, 30d.

# Address to listen on (IDEM_LISTEN, --listen). Without any API token the server only
# accepts a loopback address; create one with `idem token create` to listen elsewhere.
listen = "127.0.0.1:7780"

# Ledger database (IDEM_DB, --db): sqlite://PATH (embedded, default) or
# postgres://user:password@host/db (shared by several instances).
db = "sqlite://idem.db"

# How often the janitor expires leases, detects stuck work and applies retention
# (IDEM_JANITOR_INTERVAL, --janitor-interval), and how many records it handles per batch
# (IDEM_JANITOR_BATCH). Batches run back to back while there is a backlog. Unset, it is
# the backend's measured default: 100 on SQLite (claim p99 under 2x of idle while expiring
# about 80,000 records/s), 1000 on PostgreSQL (docs/performance.md).
janitor_interval = "30s"
# janitor_batch = 100

# The store gauges (idem_records, idem_review_queue_depth, idem_oldest_processing_seconds)
# are read at every scrape from counters the store keeps exact; one read is reused by the
# scrapes of the next stats_interval (IDEM_STATS_INTERVAL), so a scrape storm is no query
# storm. From 0 (default: every scrape reads; concurrent scrapes still share one read) to 1s.
stats_interval = "0s"

# PostgreSQL connections per instance (IDEM_PG_POOL). Size the sum over all instances
# against the server's max_connections (docs/deployment.md).
pg_pool = 16

# How often pending alerts are delivered to namespace alert_urls (IDEM_ALERT_INTERVAL).
alert_interval = "2s"

# Logs: "text" or "json" (IDEM_LOG_FORMAT, --log-format); filter (IDEM_LOG), e.g. "info".
log_format = "text"
log_level = "info"

# Largest accepted request body (IDEM_BODY_LIMIT): bytes, or e.g. "512KiB", "1MiB".
body_limit = "1MiB"

# HTTPS (IDEM_TLS_CERT / IDEM_TLS_KEY, --tls-cert / --tls-key): PEM certificate chain (leaf
# first) and its private key. SIGHUP re-reads both; a bad new file keeps the old certificate.
# tls_cert = "/etc/idem/tls/cert.pem"
# tls_key = "/etc/idem/tls/key.pem"

# OpenTelemetry traces over OTLP/HTTP (IDEM_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_ENDPOINT,
# --otlp-endpoint): the collector's base URL; spans go to <url>/v1/traces. Off when unset.
# otlp_endpoint = "http://127.0.0.1:4318"

# Effects (POST .../effect, idem sends the request itself): the most bytes of a destination's
# response body kept (IDEM_MAX_RESPONSE_BYTES, --max-response-bytes; longer ones are cut and
# marked truncated) and a PEM file of extra CA certificates for outbound HTTPS
# (IDEM_EXTRA_CA, --extra-ca).
# [effects]
# max_response_bytes = "256KiB"
# extra_ca = "/etc/idem/private-ca.pem"

# Connection limits (docs/reliability.md). A request head must arrive within
# header_read_timeout, which also closes a keep-alive connection idle that long
# (IDEM_HEADER_READ_TIMEOUT); its body within body_read_timeout, else 408
# (IDEM_BODY_READ_TIMEOUT); a head over max_header_bytes gets 431 (IDEM_MAX_HEADER_BYTES);
# at most max_connections are served at once, the next ones wait in the listen backlog
# (IDEM_MAX_CONNECTIONS; keep it under the process's open-files limit, `ulimit -n`).
# [http]
# header_read_timeout = "20s"
# body_read_timeout = "30s"
# max_header_bytes = "64KiB"
# max_connections = 10000

# Per-namespace policy applied at start (same fields as PATCH /v1/namespaces/{ns};
# durations may be written "30s" or as integer milliseconds in the *_ms fields).
# [namespaces.payments]
# lease_ms = "30s"
# lease_expiry = "review"          # money paths: an expired lease goes to a person
# retention_ms = "30d"
# audit_retention_ms = "400d"
# stuck_after_ms = "15m"
# daily_limit = 10000
# alert_url = "https://alerts.example.com/idem"
# Signs every alert the Standard Webhooks way (webhook-signature): "whsec_" + base64 of
# 24-64 random bytes, e.g. from `echo "whsec_$(openssl rand -base64 32)"`. Keep this file
# private; the API never shows the value (only alert_secret_set).
# alert_secret = "whsec_..."
# destination_idempotent = false
# Where effects may send requests: host names (exact or "*.suffix"), "host:port", CIDR.
# Loopback, private, link-local and metadata addresses are refused unless listed.
# [namespaces.payments.egress]
# allow = ["api.stripe.com"]
# allow_private = false
# [namespaces.payments.retry]
# max_attempts = 5
# base_ms = "1s"
# max_ms = "5m"
# window_ms = "24h"
"#
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn defaults() {
        let c = Config::load(&ServeArgs::default(), &env(&[])).expect("ok");
        assert_eq!(c.listen.to_string(), "127.0.0.1:7780");
        assert_eq!(c.db, "sqlite://idem.db");
        assert_eq!(c.janitor_interval, Duration::from_secs(30));
        assert_eq!(c.body_limit, 1 << 20);
    }

    #[test]
    fn actions_come_from_the_namespace_tables_with_header_values_from_the_environment() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("idem.toml");
        let doc = "[namespaces.shop]\nlease = \"45s\"\n\
             [namespaces.shop.actions.send_followup]\n\
             description = \"Sends the follow-up.\"\nkey = \"{order_id}:followup:v1\"\n\
             input_schema = { type = \"object\", required = [\"order_id\"], \
             properties = { order_id = { type = \"string\" } } }\n\
             [namespaces.shop.actions.send_followup.deliver.http]\n\
             method = \"POST\"\nurl = \"https://mail.example/send\"\n\
             headers_env = { Authorization = \"IDEM_TEST_ACTION_TOKEN_4711\" }\n";
        std::fs::write(&p, doc).expect("write");
        let args = ServeArgs {
            config: Some(p.clone()),
            ..Default::default()
        };
        let unset = Config::load(&args, &env(&[])).expect_err("the variable is not set");
        assert!(unset.to_string().contains("headers_env"), "{unset}");
        std::env::set_var("IDEM_TEST_ACTION_TOKEN_4711", "Bearer s3cr3t-from-env");
        let c = Config::load(&args, &env(&[])).expect("ok");
        let a = &c.actions.0[&("shop".to_owned(), "send_followup".to_owned())];
        assert_eq!(
            a["deliver"]["http"]["headers"]["Authorization"],
            "Bearer s3cr3t-from-env"
        );
        assert!(a["deliver"]["http"].get("headers_env").is_none());
        assert_eq!(
            c.namespaces.get("shop").map(|p| p["lease_ms"].clone()),
            Some(serde_json::json!(45000))
        );
        assert!(!format!("{c:?}").contains("s3cr3t"));
        // A bad action is refused at load, naming it.
        std::fs::write(&p, doc.replace("{order_id}:followup", "{nope}:followup")).expect("write");
        let e = Config::load(&args, &env(&[])).expect_err("bad key");
        assert!(
            e.to_string()
                .contains("namespaces.shop.actions.send_followup.key"),
            "{e}"
        );
    }

    #[test]
    fn layers_override_in_order() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("idem.toml");
        std::fs::write(
            &p,
            "listen = \"127.0.0.1:1\"\ndb = \"sqlite://file.db\"\njanitor_interval = \"5m\"\n\
             [namespaces.pay]\nlease = \"45s\"\nlease_expiry = \"review\"\n\
             [namespaces.pay.retry]\nmax_attempts = 3\nwindow_ms = \"2h\"\n",
        )
        .expect("write");
        let args = ServeArgs {
            config: Some(p),
            listen: Some("127.0.0.1:3".into()),
            ..Default::default()
        };
        let c = Config::load(
            &args,
            &env(&[
                ("IDEM_LISTEN", "127.0.0.1:2"),
                ("IDEM_DB", "sqlite://env.db"),
            ]),
        )
        .expect("ok");
        assert_eq!(c.listen.to_string(), "127.0.0.1:3");
        assert_eq!(c.db, "sqlite://env.db");
        assert_eq!(c.janitor_interval, Duration::from_secs(300));
        assert_eq!(
            c.namespaces.get("pay"),
            Some(
                &serde_json::json!({"lease_ms": 45000, "lease_expiry": "review",
                "retry": {"max_attempts": 3, "window_ms": 7_200_000}})
            )
        );
    }

    #[test]
    fn debug_never_shows_the_database_password() {
        let url = "postgres://idem:p@ss:w0rd%2F@db:5432/idem?sslmode=disable&PassWord=two";
        let c = Config::load(&ServeArgs::default(), &env(&[("IDEM_DB", url)])).expect("ok");
        assert_eq!(c.db, url, "the real URL is kept for connecting");
        let dbg = format!("{c:?}");
        assert!(dbg.contains("postgres://idem:***@db:5432/idem"), "{dbg}");
        for secret in ["p@ss", "w0rd", "two"] {
            assert!(!dbg.contains(secret), "{secret} in {dbg}");
        }
        assert!(!format!("{c:#?}").contains("w0rd"));
        assert!(
            dbg.contains("listen") && dbg.contains("body_limit"),
            "{dbg}"
        );
        let args = ServeArgs {
            db: Some(url.into()),
            ..Default::default()
        };
        let dbg = format!("{args:?}");
        assert!(!dbg.contains("w0rd") && !dbg.contains("two"), "{dbg}");
        assert_eq!(c.db_redacted(), idem::redact_db_url(url));
    }

    #[test]
    fn a_refused_database_url_is_named_without_its_password() {
        let args = ServeArgs {
            db: Some("mysql://root:hunter2@h/db".into()),
            ..Default::default()
        };
        let e = Config::load(&args, &env(&[])).expect_err("unsupported");
        assert!(!e.to_string().contains("hunter2"), "{e}");
        assert!(e.to_string().contains("mysql://root:***@h/db"), "{e}");
    }

    #[test]
    fn file_alert_secret_is_a_policy_field_that_debug_hides() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("idem.toml");
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        std::fs::write(
            &p,
            format!("[namespaces.pay]\nalert_url = \"http://127.0.0.1:9/a\"\nalert_secret = \"{secret}\"\n"),
        )
        .expect("write");
        let args = ServeArgs {
            config: Some(p.clone()),
            ..Default::default()
        };
        let c = Config::load(&args, &env(&[])).expect("ok");
        assert_eq!(
            c.namespaces.get("pay").and_then(|v| v.get("alert_secret")),
            Some(&serde_json::json!(secret))
        );
        let shown = format!("{c:?}");
        assert!(
            shown.contains("alert_secret") && !shown.contains("MfKQ9r8G"),
            "{shown}"
        );

        std::fs::write(&p, "[namespaces.pay]\nalert_secret = \"whsec_MfKQ9r8G\"\n").expect("write");
        let e = Config::load(&args, &env(&[])).expect_err("bad secret");
        let text = e.to_string();
        assert!(
            text.contains("namespaces.pay") && text.contains("alert_secret"),
            "{text}"
        );
        assert!(!text.contains("MfKQ9r8G"), "{text}");
    }

    #[test]
    fn errors_name_the_setting() {
        let e = Config::load(
            &ServeArgs::default(),
            &env(&[("IDEM_JANITOR_INTERVAL", "soon")]),
        )
        .expect_err("bad");
        assert!(e.to_string().contains("IDEM_JANITOR_INTERVAL"), "{e}");
        let args = ServeArgs {
            listen: Some("nope".into()),
            ..Default::default()
        };
        let e = Config::load(&args, &env(&[])).expect_err("bad");
        assert!(e.to_string().contains("--listen"), "{e}");
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("idem.toml");
        std::fs::write(&p, "[namespaces.pay]\nbogus = 1\n").expect("write");
        let args = ServeArgs {
            config: Some(p),
            ..Default::default()
        };
        let e = Config::load(&args, &env(&[])).expect_err("bad");
        assert!(e.to_string().contains("bogus"), "{e}");
    }

    #[test]
    fn janitor_batch_defaults_per_backend_and_pool_and_gauges_settings() {
        let c = Config::load(&ServeArgs::default(), &env(&[])).expect("ok");
        assert_eq!(c.janitor_batch_for(), SQLITE_JANITOR_BATCH);
        assert_eq!(c.stats_interval, Duration::ZERO);
        assert_eq!(c.pg_pool, 16);
        let c = Config::load(
            &ServeArgs::default(),
            &env(&[("IDEM_DB", "postgres://u@h/db")]),
        )
        .expect("ok");
        assert_eq!(c.janitor_batch_for(), POSTGRES_JANITOR_BATCH);
        let c = Config::load(
            &ServeArgs::default(),
            &env(&[
                ("IDEM_DB", "postgres://u@h/db"),
                ("IDEM_JANITOR_BATCH", "77"),
                ("IDEM_PG_POOL", "40"),
                ("IDEM_STATS_INTERVAL", "250ms"),
            ]),
        )
        .expect("ok");
        assert_eq!(c.janitor_batch_for(), 77);
        assert_eq!(c.pg_pool, 40);
        assert_eq!(c.stats_interval, Duration::from_millis(250));
        for (var, v) in [
            ("IDEM_PG_POOL", "0"),
            ("IDEM_PG_POOL", "many"),
            ("IDEM_JANITOR_BATCH", "0"),
        ] {
            let e = Config::load(&ServeArgs::default(), &env(&[(var, v)])).expect_err(v);
            let setting = var.trim_start_matches("IDEM_").to_ascii_lowercase();
            let text = e.to_string();
            assert!(text.contains(var) || text.contains(&setting), "{text}");
        }
    }

    #[test]
    fn an_earlier_versions_config_starts_with_a_warning_for_what_changed() {
        let text = include_str!("../tests/fixtures/earlier-default-config.toml");
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("idem.toml");
        std::fs::write(&p, text).expect("write");
        let args = ServeArgs {
            config: Some(p),
            ..Default::default()
        };
        let c = Config::load(&args, &env(&[])).expect("an earlier version's config loads");
        assert_eq!(c.stats_interval, MAX_STATS_INTERVAL);
        assert_eq!(c.upgrade_warnings.len(), 1, "{:?}", c.upgrade_warnings);
        let w = &c.upgrade_warnings[0];
        assert!(w.contains("stats_interval = \"30s\""), "{w}");
        assert!(w.contains("using 1s"), "{w}");
        // The same from the environment; a value within the range warns nothing.
        let c = Config::load(
            &ServeArgs::default(),
            &env(&[("IDEM_STATS_INTERVAL", "2s")]),
        )
        .expect("accepted");
        assert_eq!(c.stats_interval, MAX_STATS_INTERVAL);
        assert_eq!(c.upgrade_warnings.len(), 1);
        let c = Config::load(
            &ServeArgs::default(),
            &env(&[("IDEM_STATS_INTERVAL", "1s")]),
        )
        .expect("ok");
        assert!(c.upgrade_warnings.is_empty());
        // Today's template warns nothing.
        let mut c = Config::default();
        c.apply_file(default_config_toml()).expect("parses");
        assert!(c.upgrade_warnings.is_empty(), "{:?}", c.upgrade_warnings);
        // A value that is no duration is still refused.
        Config::load(
            &ServeArgs::default(),
            &env(&[("IDEM_STATS_INTERVAL", "soon")]),
        )
        .expect_err("not a duration");
    }

    #[test]
    fn a_broken_config_line_is_located_but_never_quoted() {
        let mut c = Config::default();
        let text = "listen = \"127.0.0.1:7780\"\ndb = \"postgres://u:hunter2@h/db\n\
                    [namespaces.pay]\nalert_secret = whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n";
        let e = c.apply_file(text).expect_err("broken");
        let shown = e.to_string();
        assert!(shown.contains("line 2"), "{shown}");
        assert!(
            !shown.contains("hunter2") && !shown.contains("MfKQ9r8G"),
            "{shown}"
        );
        let text = "[namespaces.pay]\nalert_secret = whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n";
        let shown = c.apply_file(text).expect_err("broken").to_string();
        assert!(
            shown.contains("line 2") && !shown.contains("MfKQ9r8G"),
            "{shown}"
        );
    }

    #[test]
    fn tls_and_otlp_settings_layer_and_are_checked() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("idem.toml");
        std::fs::write(
            &p,
            "tls_cert = \"/file/cert.pem\"\ntls_key = \"/file/key.pem\"\n\
             otlp_endpoint = \"http://file:4318\"\n",
        )
        .expect("write");
        let file_only = ServeArgs {
            config: Some(p.clone()),
            ..Default::default()
        };
        let c = Config::load(&file_only, &env(&[])).expect("ok");
        assert_eq!(c.tls_cert.as_deref(), Some(Path::new("/file/cert.pem")));
        assert_eq!(c.tls_key.as_deref(), Some(Path::new("/file/key.pem")));
        assert_eq!(c.otlp_endpoint.as_deref(), Some("http://file:4318"));
        // The standard variable overrides the file; idem's own one wins over it; flags win.
        let c = Config::load(
            &file_only,
            &env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel:4318")]),
        )
        .expect("ok");
        assert_eq!(c.otlp_endpoint.as_deref(), Some("http://otel:4318"));
        let both = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel:4318"),
            ("IDEM_OTLP_ENDPOINT", "http://idem:4318"),
            ("IDEM_TLS_KEY", "/env/key.pem"),
        ]);
        let c = Config::load(&file_only, &both).expect("ok");
        assert_eq!(c.otlp_endpoint.as_deref(), Some("http://idem:4318"));
        assert_eq!(c.tls_key.as_deref(), Some(Path::new("/env/key.pem")));
        let flags = ServeArgs {
            config: Some(p),
            tls_cert: Some("/flag/cert.pem".into()),
            otlp_endpoint: Some("https://flag:4318".into()),
            ..Default::default()
        };
        let c = Config::load(&flags, &both).expect("ok");
        assert_eq!(c.tls_cert.as_deref(), Some(Path::new("/flag/cert.pem")));
        assert_eq!(c.otlp_endpoint.as_deref(), Some("https://flag:4318"));

        // Both or neither, and an endpoint must be an http(s) URL.
        let e = Config::load(&ServeArgs::default(), &env(&[("IDEM_TLS_CERT", "/c.pem")]))
            .expect_err("no key");
        assert!(e.to_string().contains("tls_key"), "{e}");
        let e = Config::load(&ServeArgs::default(), &env(&[("IDEM_TLS_KEY", "/k.pem")]))
            .expect_err("no cert");
        assert!(e.to_string().contains("tls_cert"), "{e}");
        for bad in ["localhost:4318", "grpc://c:4317"] {
            let e = Config::load(&ServeArgs::default(), &env(&[("IDEM_OTLP_ENDPOINT", bad)]))
                .expect_err(bad);
            assert!(e.to_string().contains("IDEM_OTLP_ENDPOINT"), "{e}");
        }
        // Credentials in a collector URL never print.
        let c = Config::load(
            &ServeArgs::default(),
            &env(&[("IDEM_OTLP_ENDPOINT", "https://u:hunter2@otel.example.com")]),
        )
        .expect("ok");
        assert!(!format!("{c:?}").contains("hunter2"), "{c:?}");
    }

    #[test]
    fn example_config_parses() {
        let mut c = Config::default();
        c.apply_file(default_config_toml()).expect("example parses");
        c.validate().expect("example is valid");
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert_eq!(parse_size("512KiB"), Ok(512 * 1024));
    }
}
