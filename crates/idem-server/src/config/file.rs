//! The configuration file's layer: the shape of the TOML file (unknown members refused), and
//! its `[namespaces.NAME]`, `[namespaces.NS.actions.NAME]` and `[sources.NAME]` tables turned
//! into the JSON documents the API takes, with `*_env` members read from the environment.
//!
//! It must never put a secret's value into an error (an unset variable names the setting, a
//! TOML error gives line and column without the file's text), and it never applies a setting
//! to the configuration itself (the layering does).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::error::ConfigError;
use super::units::parse_duration;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileConfig {
    pub(super) listen: Option<String>,
    pub(super) db: Option<String>,
    pub(super) janitor_interval: Option<String>,
    pub(super) janitor_batch: Option<u64>,
    pub(super) alert_interval: Option<String>,
    pub(super) stats_interval: Option<String>,
    pub(super) pg_pool: Option<u64>,
    pub(super) log_format: Option<String>,
    pub(super) log_level: Option<String>,
    pub(super) body_limit: Option<toml::Value>,
    pub(super) tls_cert: Option<String>,
    pub(super) tls_key: Option<String>,
    pub(super) otlp_endpoint: Option<String>,
    pub(super) effects: Option<EffectsFile>,
    pub(super) http: Option<HttpFile>,
    #[serde(default)]
    pub(super) namespaces: BTreeMap<String, toml::Table>,
    #[serde(default)]
    pub(super) sources: BTreeMap<String, toml::Table>,
}

/// `[effects]` of the config file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EffectsFile {
    pub(super) max_response_bytes: Option<toml::Value>,
    pub(super) extra_ca: Option<String>,
}

/// `[http]` of the config file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct HttpFile {
    pub(super) header_read_timeout: Option<String>,
    pub(super) body_read_timeout: Option<String>,
    pub(super) max_header_bytes: Option<toml::Value>,
    pub(super) max_connections: Option<u64>,
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
pub(super) fn source_from_toml(name: &str, table: &toml::Table) -> Result<Value, ConfigError> {
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
pub(super) fn action_from_toml(
    ns: &str,
    name: &str,
    table: &toml::Value,
) -> Result<Value, ConfigError> {
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

/// A TOML error as line, column and message, without the excerpt of the file that
/// `toml`'s `Display` prints: the offending line may hold the database password or an
/// `alert_secret`, and this message reaches the log.
pub(super) fn toml_error_without_text(text: &str, e: &toml::de::Error) -> String {
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

/// Turns a `[namespaces.NAME]` table into a JSON policy patch (`*_ms` integers).
pub(super) fn policy_from_toml(table: &toml::Table) -> Result<Value, String> {
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
