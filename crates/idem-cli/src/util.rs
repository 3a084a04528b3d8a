//! Small input helpers: human durations and JSON arguments.

use std::path::Path;

use serde_json::Value;

use crate::exit::CliError;

/// `300ms`, `30s`, `15m`, `1h 30m` → milliseconds (at least 1).
pub fn duration_ms(flag: &str, text: &str) -> Result<i64, CliError> {
    let d = humantime::parse_duration(text.trim()).map_err(|e| {
        CliError::input(format!(
            "{flag}: {text:?} is not a duration ({e}); use e.g. 300ms, 30s, 15m"
        ))
    })?;
    let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    if ms < 1 {
        return Err(CliError::input(format!("{flag}: must be at least 1ms")));
    }
    Ok(ms)
}

pub fn opt_duration_ms(flag: &str, text: Option<&str>) -> Result<Option<i64>, CliError> {
    text.map(|t| duration_ms(flag, t)).transpose()
}

/// Parses a JSON argument, naming the flag on error.
pub fn json_arg(flag: &str, text: &str) -> Result<Value, CliError> {
    serde_json::from_str(text).map_err(|e| CliError::input(format!("{flag}: invalid JSON: {e}")))
}

/// Reads a JSON file, naming it on error.
pub fn json_file(flag: &str, path: &Path) -> Result<Value, CliError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::input(format!("{flag}: cannot read {}: {e}", path.display())))?;
    serde_json::from_str(&text)
        .map_err(|e| CliError::input(format!("{flag}: {} is not valid JSON: {e}", path.display())))
}

/// The payload from `--payload JSON` or `--payload-file F` (at most one is given).
pub fn payload(inline: Option<&str>, file: Option<&Path>) -> Result<Option<Value>, CliError> {
    match (inline, file) {
        (Some(t), _) => Ok(Some(json_arg("--payload", t)?)),
        (None, Some(p)) => Ok(Some(json_file("--payload-file", p)?)),
        (None, None) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(duration_ms("--lease", "300ms").ok(), Some(300));
        assert_eq!(duration_ms("--lease", "30s").ok(), Some(30_000));
        assert_eq!(duration_ms("--lease", "15m").ok(), Some(900_000));
        assert!(duration_ms("--lease", "soon").is_err());
        assert!(duration_ms("--lease", "0s").is_err());
    }
}
