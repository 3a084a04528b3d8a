//! Service configuration in layers: defaults → `--config` TOML file → `IDEM_*` environment →
//! command-line flags, each layer overriding the one before. Validated once, at start, with
//! errors that name the setting and where it came from.
//!
//! Durations are human (`300ms`, `15m`, `30d`). Per-namespace policy may be set in the file
//! (`[namespaces.NAME]`); it uses the policy fields of the API, where a `*_ms` field also
//! accepts a human duration string, and a field without `_ms` (`lease = "45s"`) means the
//! same thing. The database URL is only ever printed through [`Config::db_redacted`].

mod error;
mod example;
mod file;
mod units;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

pub use crate::fields::MAX_WAIT_MS;
pub use error::ConfigError;
pub use example::default_config_toml;
use file::{
    action_from_toml, policy_from_toml, source_from_toml, toml_error_without_text, FileConfig,
};
pub use units::{parse_duration, parse_size};

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

/// Adds each named local (a destructured field) to a `DebugStruct` under its own name.
macro_rules! debug_fields {
    ($d:expr; $($f:ident),* $(,)?) => {
        $( $d.field(stringify!($f), $f); )*
    };
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
        let mut d = f.debug_struct("ServeArgs");
        debug_fields!(d; listen, config, janitor_interval, log_format, tls_cert, tls_key);
        debug_fields!(d; max_response_bytes, extra_ca);
        // A database or collector URL may carry credentials in its userinfo.
        d.field("db", &db.as_deref().map(idem::redact_db_url))
            .field(
                "otlp_endpoint",
                &otlp_endpoint.as_deref().map(idem::redact_db_url),
            )
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
        let mut d = f.debug_struct("Config");
        debug_fields!(d; listen, janitor_interval, janitor_batch, stats_interval, pg_pool);
        debug_fields!(d; alert_interval, forward_interval, alert_max_tries, alert_timeout);
        debug_fields!(d; log_format, log_level, body_limit, namespaces, sources, actions);
        debug_fields!(d; tls_cert, tls_key, max_response_bytes, extra_ca, http);
        debug_fields!(d; upgrade_warnings);
        // A database or collector URL may carry credentials in its userinfo.
        d.field("db", &self.db_redacted())
            .field(
                "otlp_endpoint",
                &otlp_endpoint.as_deref().map(idem::redact_db_url),
            )
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
                c.set_from(var, setting, &v)?;
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
                c.set_from(flag, setting, v)?;
            }
        }
        c.validate()?;
        Ok(c)
    }

    /// Sets `setting` from `v` as given under `given` (an environment variable or a flag,
    /// which a refusal names).
    fn set_from(&mut self, given: &str, setting: &str, v: &str) -> Result<(), ConfigError> {
        self.set(setting, v).map_err(|m| ConfigError::Setting {
            setting: given.into(),
            message: m,
        })
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

#[cfg(test)]
mod tests;
