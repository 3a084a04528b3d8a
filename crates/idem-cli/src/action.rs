//! `idem action put|get|list|delete`: a namespace's actions (MCP tools,
//! `/v1/namespaces/NS/actions`) from the command line. Header values can come from the
//! environment (`--header-env Header=VAR`) so they never sit in shell history; answers show
//! only their hints.

use reqwest::Method;
use serde_json::{json, Value};

use crate::args::{ActionDeleteCmd, ActionList, ActionPutCmd, ActionTarget};
use crate::client::{Answer, Client};
use crate::exit::{self, CliError};
use crate::table::render;
use crate::util::json_arg;

fn show(ans: &Answer, raw: bool) {
    if raw {
        println!("{}", ans.text.trim_end());
    } else {
        println!(
            "{}",
            serde_json::to_string_pretty(&ans.body).unwrap_or_else(|_| ans.text.clone())
        );
    }
}

pub async fn put(cmd: ActionPutCmd) -> Result<u8, CliError> {
    let mut doc = match (&cmd.doc, &cmd.file) {
        (Some(j), _) => json_arg("--json", j)?,
        (None, Some(f)) => {
            let text = std::fs::read_to_string(f)
                .map_err(|e| CliError::input(format!("--file {}: {e}", f.display())))?;
            json_arg("--file", &text)?
        }
        (None, None) => return Err(CliError::input("give the action as --json or --file")),
    };
    for spec in &cmd.header_env {
        let (header, var) = spec
            .split_once('=')
            .ok_or_else(|| CliError::input(format!("--header-env {spec}: use Header=VAR")))?;
        let value = std::env::var(var)
            .ok()
            .filter(|v| !v.is_empty())
            .ok_or_else(|| CliError::input(format!("environment variable {var} is not set")))?;
        let via = if doc.pointer("/deliver/mcp").is_some_and(Value::is_object) {
            "mcp"
        } else {
            "http"
        };
        let Some(delivery) = doc
            .pointer_mut(&format!("/deliver/{via}"))
            .and_then(Value::as_object_mut)
        else {
            return Err(CliError::input(
                "--header-env needs a deliver.http or deliver.mcp object in the action",
            ));
        };
        let headers = delivery.entry("headers").or_insert_with(|| json!({}));
        match headers.as_object_mut() {
            Some(h) => {
                h.insert(header.to_owned(), Value::String(value));
            }
            None => {
                return Err(CliError::input(format!(
                    "deliver.{via}.headers must be an object"
                )))
            }
        }
    }
    let c = Client::new(&cmd.server.url, cmd.server.token.clone())?;
    let url = c.url(&["v1", "namespaces", &cmd.namespace, "actions", &cmd.name]);
    let ans = c.send(Method::PUT, url, Some(&doc)).await?.ok()?;
    if ans.status == 201 {
        eprintln!("created action {} in {}", cmd.name, cmd.namespace);
    }
    show(&ans, cmd.raw);
    Ok(exit::OK)
}

pub async fn get(t: ActionTarget) -> Result<u8, CliError> {
    let c = Client::new(&t.conn.server.url, t.conn.server.token.clone())?;
    let url = c.url(&["v1", "namespaces", &t.namespace, "actions", &t.name]);
    let ans = c.get(url).await?.ok()?;
    show(&ans, t.conn.json);
    Ok(exit::OK)
}

pub async fn list(t: ActionList) -> Result<u8, CliError> {
    let c = Client::new(&t.conn.server.url, t.conn.server.token.clone())?;
    let ans = c
        .get(c.url(&["v1", "namespaces", &t.namespace, "actions"]))
        .await?
        .ok()?;
    if t.conn.json {
        show(&ans, true);
        return Ok(exit::OK);
    }
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    let rows: Vec<Vec<String>> = ans.body["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|a| {
                    vec![
                        text(&a["name"]),
                        text(&a["key"]),
                        text(&a["approval"]),
                        text(&a["deliver"]["http"]["url"]),
                    ]
                })
                .collect()
        })
        .unwrap_or_default();
    print!(
        "{}",
        render(&["ACTION", "KEY", "APPROVAL", "DELIVER"], &rows)
    );
    Ok(exit::OK)
}

pub async fn delete(cmd: ActionDeleteCmd) -> Result<u8, CliError> {
    if !cmd.yes {
        return Err(CliError::input(format!(
            "deleting action {} needs --yes",
            cmd.name
        )));
    }
    let c = Client::new(&cmd.conn.server.url, cmd.conn.server.token.clone())?;
    let url = c.url(&["v1", "namespaces", &cmd.namespace, "actions", &cmd.name]);
    c.send(Method::DELETE, url, None).await?.ok()?;
    eprintln!("deleted action {} from {}", cmd.name, cmd.namespace);
    Ok(exit::OK)
}
