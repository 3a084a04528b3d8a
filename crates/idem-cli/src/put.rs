//! What `source put` and `action put` share: the document from `--json` or `--file`, a value
//! taken from the environment (so secrets never sit in shell history), the write and the
//! answer shown.
//!
//! It only reads the arguments and the environment it is pointed at and sends the one write
//! it is given; it must never print a value it read from the environment (answers show only
//! their hints).

use std::path::PathBuf;

use reqwest::Method;
use serde_json::Value;
use url::Url;

use crate::client::{Answer, AnswerExt, Client};
use crate::exit::{self, CliError};
use crate::util::json_arg;

/// The document of `--json TEXT` or `--file PATH`; `None` when neither was given.
pub fn document(doc: &Option<String>, file: &Option<PathBuf>) -> Result<Option<Value>, CliError> {
    match (doc, file) {
        (Some(j), _) => json_arg("--json", j).map(Some),
        (None, Some(f)) => {
            let text = std::fs::read_to_string(f)
                .map_err(|e| CliError::input(format!("--file {}: {e}", f.display())))?;
            json_arg("--file", &text).map(Some)
        }
        (None, None) => Ok(None),
    }
}

/// The value of environment variable `var`; unset or empty is an input error.
pub fn env_value(var: &str) -> Result<String, CliError> {
    std::env::var(var)
        .ok()
        .filter(|v| !v.is_empty())
        .ok_or_else(|| CliError::input(format!("environment variable {var} is not set")))
}

/// Prints an answer: its text as received with `raw`, else its JSON pretty-printed.
pub fn show(ans: &Answer, raw: bool) {
    if raw {
        println!("{}", ans.text.trim_end());
    } else {
        println!(
            "{}",
            serde_json::to_string_pretty(&ans.body).unwrap_or_else(|_| ans.text.clone())
        );
    }
}

/// Sends `doc` with `method` to `url` (2xx required), says `created` on stderr when the
/// answer is 201, and shows the answer.
pub async fn write(
    c: &Client,
    method: Method,
    url: Url,
    doc: &Value,
    created: &str,
    raw: bool,
) -> Result<u8, CliError> {
    let ans = c.send(method, url, Some(doc)).await?.ok()?;
    if ans.status == 201 {
        eprintln!("{created}");
    }
    show(&ans, raw);
    Ok(exit::OK)
}
