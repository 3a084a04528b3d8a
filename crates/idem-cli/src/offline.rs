//! Commands that need no server: `key derive`, `token create|list|revoke`, `serve`,
//! `default-config`.

use std::io::Read;

use idem::derive::{derive_key, DeriveError};
use idem::{generate_secret, hash_secret, Namespace, NewApiToken, Role};

use crate::args::{DeriveCmd, RoleArg, ServeCmd, TokenCreate, TokenList, TokenRevoke};
use crate::exit::{self, CliError};

/// Reads the event on stdin and prints its key.
pub fn key_derive(cmd: &DeriveCmd, stdin: &mut dyn Read) -> Result<u8, CliError> {
    let mut text = String::new();
    stdin
        .read_to_string(&mut text)
        .map_err(|e| CliError::input(format!("cannot read the event on stdin: {e}")))?;
    if text.trim().is_empty() {
        return Err(CliError::input(
            "no event on stdin: pipe the JSON event in, e.g. `idem key derive --field /id < event.json`",
        ));
    }
    let event: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| CliError::input(format!("the event on stdin is not valid JSON: {e}")))?;
    let key = derive_key(
        &event,
        &cmd.fields,
        cmd.prefix.as_deref(),
        cmd.suffix.as_deref(),
        cmd.hash,
    )
    .map_err(|e| match e {
        DeriveError::MissingField { pointer } => CliError::input(format!(
            "identity field {pointer} is missing or null in the event: refusing to derive a \
             key without it (a missing key must never skip the gate)"
        )),
        DeriveError::InvalidField { field, message } => {
            let flag = match field.as_str() {
                "prefix" => "--prefix".to_owned(),
                "suffix" => "--suffix".to_owned(),
                f if f.starts_with("fields") => "--field".to_owned(),
                f => f.to_owned(),
            };
            CliError::input(format!("{flag}: {message}"))
        }
    })?;
    println!("{key}");
    Ok(exit::OK)
}

/// Creates an API token and prints its secret alone on stdout.
pub async fn token_create(cmd: &TokenCreate) -> Result<u8, CliError> {
    let scope = cmd.namespace.trim();
    if scope != "*" {
        Namespace::try_from(scope)
            .map_err(|e| CliError::input(format!("--namespace: {e} (or '*' for all)")))?;
    }
    let role = match cmd.role {
        RoleArg::Worker => Role::Worker,
        RoleArg::Operator => Role::Operator,
        RoleArg::Admin => Role::Admin,
    };
    let expires_ms = crate::util::opt_duration_ms("--expires", cmd.expires.as_deref())?;
    let store = open_ledger(&cmd.db.db).await?;
    let secret = generate_secret();
    let now = idem::Clock::now(&idem::SystemClock);
    let expires_at = expires_ms.map(|ms| now.plus_ms(ms));
    store
        .create_token(
            NewApiToken {
                secret_hash: hash_secret(&secret),
                role,
                scope: scope.to_owned(),
                label: cmd.label.clone(),
                expires_at,
            },
            now,
        )
        .await
        .map_err(|e| CliError::input(format!("cannot store the token: {e}")))?;
    // The secret alone on stdout (scripts capture it); everything else on stderr.
    println!("{secret}");
    let db = idem::redact_db_url(&cmd.db.db);
    let until =
        expires_at.map_or_else(String::new, |t| format!(", valid until {}", t.to_rfc3339()));
    eprintln!(
        "idem: created a {} token for namespace {scope} in {db}{until}; it is shown only once",
        role.as_str()
    );
    Ok(exit::OK)
}

async fn open_ledger(db: &str) -> Result<std::sync::Arc<dyn idem::Store>, CliError> {
    idem::open_store(db)
        .await
        .map_err(|e| CliError::input(format!("--db: cannot open the ledger: {e}")))
}

/// Prints the live tokens as a table; never a secret or hash.
pub async fn token_list(cmd: &TokenList) -> Result<u8, CliError> {
    let store = open_ledger(&cmd.db.db).await?;
    let tokens = store
        .list_tokens()
        .await
        .map_err(|e| CliError::input(format!("cannot read the tokens: {e}")))?;
    let now = idem::Clock::now(&idem::SystemClock);
    let opt = |t: Option<idem::Timestamp>| t.map_or_else(|| "-".to_owned(), |t| t.to_rfc3339());
    let rows: Vec<Vec<String>> = tokens
        .iter()
        .map(|t| {
            let expires = match t.expires_at {
                Some(e) if t.expired(now) => format!("{} (expired)", e.to_rfc3339()),
                e => opt(e),
            };
            vec![
                t.id.to_string(),
                t.role.as_str().to_owned(),
                t.scope.clone(),
                t.label.clone().unwrap_or_default(),
                t.created_at.to_rfc3339(),
                expires,
                opt(t.last_used_at),
            ]
        })
        .collect();
    print!(
        "{}",
        crate::table::render(
            &[
                "ID",
                "ROLE",
                "NAMESPACE",
                "LABEL",
                "CREATED",
                "EXPIRES",
                "LAST USED"
            ],
            &rows
        )
    );
    Ok(exit::OK)
}

/// Revokes one token (only with `--yes`). Unlike the API this may revoke the last admin
/// token: whoever holds the database can always create a new one here.
pub async fn token_revoke(cmd: &TokenRevoke) -> Result<u8, CliError> {
    if !cmd.yes {
        eprintln!(
            "idem: revoking token {} stops it at once for every client that uses it; \
             repeat with --yes to do it",
            cmd.id
        );
        return Ok(exit::USAGE);
    }
    let store = open_ledger(&cmd.db.db).await?;
    let now = idem::Clock::now(&idem::SystemClock);
    let revoked = store
        .revoke_token(cmd.id, now)
        .await
        .map_err(|e| CliError::input(format!("cannot revoke the token: {e}")))?;
    if !revoked {
        return Err(CliError::input(format!(
            "no live token has id {} (see idem token list)",
            cmd.id
        )));
    }
    eprintln!("idem: revoked token {}", cmd.id);
    Ok(exit::OK)
}

/// The flags given to `idem serve`, as overrides for the server's own layering.
pub fn serve_args(cmd: ServeCmd) -> idem_server::ServeArgs {
    idem_server::ServeArgs {
        listen: cmd.listen,
        db: cmd.db,
        config: cmd.config,
        janitor_interval: cmd.janitor_interval,
        log_format: cmd.log_format.map(|f| f.as_str().to_owned()),
        tls_cert: cmd.tls_cert,
        tls_key: cmd.tls_key,
        otlp_endpoint: cmd.otlp_endpoint,
        max_response_bytes: cmd.max_response_bytes,
        extra_ca: cmd.extra_ca,
    }
}

pub async fn serve(cmd: ServeCmd) -> Result<u8, CliError> {
    idem_server::serve(serve_args(cmd)).await?;
    Ok(exit::OK)
}

/// Prints the server's commented example configuration.
pub fn default_config() -> Result<u8, CliError> {
    print!("{}", idem_server::default_config_toml());
    Ok(exit::OK)
}
