//! Operator commands around a running service: `backup` (online copy of a SQLite ledger) and
//! `healthcheck` (the probe of a container image that has no curl).
//!
//! Neither ever changes the ledger: `backup` reads it through SQLite's backup API
//! ([`idem_sqlite::backup`]), `healthcheck` only sends one GET. Their stdout stays empty:
//! what they say goes to stderr, their answer is the exit code.

use std::time::{Duration, Instant};

use idem::DbUrl;

use crate::args::{BackupCmd, HealthcheckCmd};
use crate::client::Client;
use crate::exit::{self, CliError};
use crate::util::duration_ms;

/// Copies the SQLite ledger `--db` into `--out`.
pub async fn backup(cmd: BackupCmd) -> Result<u8, CliError> {
    let path = match DbUrl::parse(&cmd.db).map_err(|e| CliError::input(format!("--db: {e}")))? {
        DbUrl::Sqlite(p) => p,
        DbUrl::Postgres(_) => {
            return Err(CliError::input(
                "--db: a PostgreSQL ledger is backed up with the database's own tools \
                 (pg_dump, or base backups with WAL archiving; see docs/operations.md)",
            ))
        }
    };
    let shown = DbUrl::Sqlite(path.clone()).redacted();
    let out = cmd.out.clone();
    let check = !cmd.no_check;
    let started = Instant::now();
    // The copy is blocking file work: off the async runtime's threads.
    let report =
        tokio::task::spawn_blocking(move || idem_sqlite::backup::backup(&path, &out, check))
            .await
            .map_err(|e| CliError::Other(anyhow::anyhow!("the backup task failed: {e}")))?
            .map_err(|e| CliError::Other(e.into()))?;
    eprintln!(
        "idem: backed up {shown} to {}: {} records, {} bytes, schema version {}, {} ({:.2}s)",
        cmd.out.display(),
        report.records,
        report.bytes,
        report.schema_version,
        if report.checked {
            "integrity ok"
        } else {
            "integrity not checked"
        },
        started.elapsed().as_secs_f64()
    );
    Ok(exit::OK)
}

/// GETs /healthz (or /readyz); 0 on a 200, 1 on anything else, as container health checks
/// expect (Docker reserves 2).
pub async fn healthcheck(cmd: &HealthcheckCmd) -> Result<u8, CliError> {
    let timeout = Duration::from_millis(
        u64::try_from(duration_ms("--timeout", &cmd.timeout)?).unwrap_or(u64::MAX),
    );
    let client = Client::new(&cmd.url, None).map_err(|e| CliError::input(format!("--url: {e}")))?;
    let path = if cmd.ready { "readyz" } else { "healthz" };
    let url = client.url(&[path]);
    match tokio::time::timeout(timeout, client.get(url)).await {
        Ok(Ok(answer)) if answer.status == 200 => Ok(exit::OK),
        Ok(Ok(answer)) => {
            eprintln!("idem: /{path} answered {}", answer.status);
            Ok(exit::ERROR)
        }
        Ok(Err(e)) => {
            eprintln!("idem: /{path}: {e}");
            Ok(exit::ERROR)
        }
        Err(_) => {
            eprintln!("idem: /{path} did not answer within {timeout:?}");
            Ok(exit::ERROR)
        }
    }
}
