//! `idem action put|get|list|delete`: a namespace's actions (MCP tools,
//! `/v1/namespaces/NS/actions`) from the command line. Header values can come from the
//! environment (`--header-env Header=VAR`) so they never sit in shell history; answers show
//! only their hints.

use reqwest::Method;
use serde_json::{json, Value};

use crate::args::{ActionDeleteCmd, ActionList, ActionPutCmd, ActionTarget};
use crate::client::{AnswerExt, Client};
use crate::exit::{self, CliError};
use crate::put::{document, env_value, show, write};
use crate::table::render;

pub async fn put(cmd: ActionPutCmd) -> Result<u8, CliError> {
    let Some(mut doc) = document(&cmd.doc, &cmd.file)? else {
        return Err(CliError::input("give the action as --json or --file"));
    };
    for spec in &cmd.header_env {
        let (header, var) = spec
            .split_once('=')
            .ok_or_else(|| CliError::input(format!("--header-env {spec}: use Header=VAR")))?;
        let value = env_value(var)?;
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
    let created = format!("created action {} in {}", cmd.name, cmd.namespace);
    write(&c, Method::PUT, url, &doc, &created, cmd.raw).await
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
