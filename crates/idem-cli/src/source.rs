//! `idem source put|get|list|delete`: the sources API (`/v1/sources`) from the command line.
//! Secrets can come from the environment (`--secret-env`, `--forward-secret-env`) so they
//! never sit in shell history; answers show only their hints.

use reqwest::Method;
use serde_json::{json, Value};

use crate::args::{SourceDeleteCmd, SourceList, SourcePutCmd, SourceTarget};
use crate::client::{AnswerExt, Client};
use crate::exit::{self, CliError};
use crate::put::{document, env_value, show, write};
use crate::table::render;

fn client(c: &crate::args::Conn) -> Result<Client, CliError> {
    server_client(&c.server)
}

fn server_client(s: &crate::args::Server) -> Result<Client, CliError> {
    Ok(Client::new(&s.url, s.token.clone())?)
}

pub async fn put(cmd: SourcePutCmd) -> Result<u8, CliError> {
    let mut doc = match document(&cmd.doc, &cmd.file)? {
        Some(doc) => doc,
        None if cmd.patch => json!({}),
        None => return Err(CliError::input("give the source as --json or --file")),
    };
    let Some(obj) = doc.as_object_mut() else {
        return Err(CliError::input("the source document must be a JSON object"));
    };
    if !cmd.secret_env.is_empty() {
        let secrets = cmd
            .secret_env
            .iter()
            .map(|v| env_value(v))
            .collect::<Result<Vec<_>, _>>()?;
        obj.insert("secrets".into(), json!(secrets));
    }
    if let Some(var) = &cmd.forward_secret_env {
        set_forward_secret(obj, env_value(var)?)?;
    }
    let c = server_client(&cmd.server)?;
    let url = c.url(&["v1", "sources", &cmd.name]);
    let method = if cmd.patch {
        Method::PATCH
    } else {
        Method::PUT
    };
    let created = format!("created source {}", cmd.name);
    write(&c, method, url, &doc, &created, cmd.raw).await
}

/// `--forward-secret-env`: the secret of `forward`, and of every destination in `forwards`
/// that names none of its own (a fan-out source signs all its forwards with one secret unless
/// the document says otherwise). A document with `forwards` and no `forward` gains no
/// `forward`.
fn set_forward_secret(
    obj: &mut serde_json::Map<String, Value>,
    secret: String,
) -> Result<(), CliError> {
    let named = match obj.get_mut("forwards") {
        None | Some(Value::Null) => false,
        Some(Value::Object(m)) => {
            for (name, d) in m.iter_mut() {
                let Some(d) = d.as_object_mut() else {
                    return Err(CliError::input(format!(
                        "forwards.{name} must be a JSON object"
                    )));
                };
                d.entry("secret")
                    .or_insert_with(|| Value::String(secret.clone()));
            }
            true
        }
        Some(_) => return Err(CliError::input("forwards must be a JSON object")),
    };
    if named && !obj.contains_key("forward") {
        return Ok(());
    }
    match obj
        .entry("forward")
        .or_insert_with(|| json!({}))
        .as_object_mut()
    {
        Some(f) => {
            f.insert("secret".into(), Value::String(secret));
            Ok(())
        }
        None => Err(CliError::input("forward must be a JSON object")),
    }
}

pub async fn get(t: SourceTarget) -> Result<u8, CliError> {
    let c = client(&t.conn)?;
    let ans = c.get(c.url(&["v1", "sources", &t.name])).await?.ok()?;
    show(&ans, t.conn.json);
    Ok(exit::OK)
}

pub async fn list(t: SourceList) -> Result<u8, CliError> {
    let c = client(&t.conn)?;
    let ans = c.get(c.url(&["v1", "sources"])).await?.ok()?;
    if t.conn.json {
        show(&ans, true);
        return Ok(exit::OK);
    }
    let text = |v: &Value| v.as_str().unwrap_or("").to_owned();
    let rows: Vec<Vec<String>> = ans.body["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|s| {
                    vec![
                        text(&s["source"]),
                        text(&s["provider"]),
                        text(&s["namespace"]),
                        text(&s["forward"]["url"]),
                    ]
                })
                .collect()
        })
        .unwrap_or_default();
    print!(
        "{}",
        render(&["SOURCE", "PROVIDER", "NAMESPACE", "FORWARD"], &rows)
    );
    Ok(exit::OK)
}

pub async fn delete(cmd: SourceDeleteCmd) -> Result<u8, CliError> {
    if !cmd.yes {
        return Err(CliError::input(format!(
            "deleting source {} needs --yes",
            cmd.name
        )));
    }
    let c = client(&cmd.conn)?;
    let mut url = c.url(&["v1", "sources", &cmd.name]);
    if cmd.force {
        url.set_query(Some("force=true"));
    }
    c.send(Method::DELETE, url, None).await?.ok()?;
    eprintln!("deleted source {}", cmd.name);
    Ok(exit::OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_secret(doc: Value) -> Result<Value, CliError> {
        let mut doc = doc;
        let obj = doc.as_object_mut().expect("object");
        set_forward_secret(obj, "whsec_x".into())?;
        Ok(doc)
    }

    #[test]
    fn the_forward_secret_goes_to_forward_and_to_destinations_without_their_own() {
        let d = with_secret(json!({"forward": {"url": "u"}})).expect("ok");
        assert_eq!(d["forward"]["secret"], "whsec_x");
        // --patch without a document: forward.secret alone.
        let d = with_secret(json!({})).expect("ok");
        assert_eq!(d, json!({"forward": {"secret": "whsec_x"}}));
        let d = with_secret(json!({"forwards": {
            "crm": {"url": "a"},
            "slack": {"url": "b", "secret": "whsec_own"},
        }}))
        .expect("ok");
        assert_eq!(d["forwards"]["crm"]["secret"], "whsec_x");
        assert_eq!(d["forwards"]["slack"]["secret"], "whsec_own");
        assert!(d.get("forward").is_none(), "{d}");
        let d = with_secret(json!({"forward": {"url": "u"}, "forwards": {"crm": {"url": "a"}}}))
            .expect("ok");
        assert_eq!(d["forward"]["secret"], "whsec_x");
        assert_eq!(d["forwards"]["crm"]["secret"], "whsec_x");
    }

    #[test]
    fn a_forward_or_destination_that_is_not_an_object_is_refused() {
        for bad in [
            json!({"forward": "u"}),
            json!({"forwards": ["a"]}),
            json!({"forwards": {"crm": "a"}}),
        ] {
            assert!(with_secret(bad.clone()).is_err(), "{bad}");
        }
    }
}
