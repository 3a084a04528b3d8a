//! The human units of the configuration: durations (`300ms`, `15m`, `30d`) and sizes
//! (`512KiB`, `1MiB`).
//!
//! Pure parsers of one value each: they must never read a layer, the environment or a file,
//! and their messages name the value's form, never the setting (the caller names that).

use std::time::Duration;

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
