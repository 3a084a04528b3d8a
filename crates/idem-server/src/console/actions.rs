//! The console's actions page: a namespace's actions (`ACTIONS.md`) as the API reads them —
//! name, title, a shortened description, key template, identity, approval, the delivery's
//! kind and target, the header names with their hints — and, for a record of an action, the
//! action it belongs to (the record page shows it beside the stored arguments).
//!
//! The list is the API's own handler (`crate::api::v1::actions::list_actions`) called with
//! the session's caller, so what the console shows is the API's read shape: header values
//! never reach this file (they live in the secrets table; the read shape carries hints).
//! What this file must never do: show a header value, a URL's query string or user info (a
//! credential may hide there), or anything from the document without escaping it.

use axum::extract::{Path, State};
use axum::response::Html;
use axum::{Extension, Json};
use maud::{html, Markup};
use serde_json::Value;

use super::session::Viewer;
use super::view::{self, enc, layout, ns_href};
use super::ConsoleResult;
use crate::api::v1::shared::Authed;
use crate::state::AppState;

/// Descriptions longer than this (characters) are shortened in the list; the full text is
/// behind a "show all" that needs no script.
pub const SHORT_DESCRIPTION: usize = 160;

/// The path of a namespace's actions page.
pub fn actions_href(ns: &str) -> String {
    format!("{}/actions", ns_href(ns))
}

/// The anchor of one action on its namespace's actions page.
pub fn action_href(ns: &str, name: &str) -> String {
    format!("{}#action-{}", actions_href(ns), enc(name))
}

/// The action a record belongs to: its owner names it (`crate::actions::owner_of`).
pub fn action_of(owner: Option<&str>) -> Option<&str> {
    owner
        .and_then(|o| o.strip_prefix("action:"))
        .filter(|n| crate::actions::model::valid_name(n))
}

/// The namespace's actions in the API's read shape (the session's scope is checked first).
pub async fn read(
    st: &AppState,
    viewer: &Viewer,
    ns: &idem::Namespace,
) -> ConsoleResult<Vec<Value>> {
    let authed = Authed {
        st: st.clone(),
        caller: viewer.caller.clone(),
    };
    let Json(list) =
        crate::api::v1::actions::list_actions(authed, Path(ns.as_str().to_owned())).await?;
    Ok(list
        .get("items")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default())
}

/// `/console/ns/{ns}/actions`.
pub async fn list(
    State(st): State<AppState>,
    Extension(viewer): Extension<Viewer>,
    Path(ns): Path<String>,
) -> ConsoleResult<Html<String>> {
    let ns = super::scoped_ns(&viewer, &ns)?;
    let items = read(&st, &viewer, &ns).await?;
    let columns = [
        "Name",
        "Title",
        "Description",
        "Key",
        "Identity",
        "Approval",
        "Deliver",
        "Headers",
        "Updated",
    ];
    let review = format!(
        "/console/review?namespace={}&state=awaiting_approval",
        enc(ns.as_str())
    );
    Ok(layout(
        &format!("Actions of {}", ns.as_str()),
        Some(&viewer),
        html! {
            p.crumbs { a href=(ns_href(ns.as_str())) { (ns.as_str()) } " / actions" }
            h1 { "Actions" }
            p.hint {
                "The tools this namespace serves to agents at " code { "/mcp/" (ns.as_str()) }
                ". Header values are never shown (only their last characters). Drafts waiting "
                "for a person: " a href=(review) { "awaiting approval" } "."
            }
            (view::table("actions", &columns, html! {
                @for a in &items { (row(ns.as_str(), a)) }
                @if items.is_empty() {
                    (view::empty_row(columns.len(), "This namespace has no actions."))
                }
            }))
        },
    ))
}

fn text<'a>(v: &'a Value, name: &str) -> &'a str {
    v.get(name).and_then(Value::as_str).unwrap_or("")
}

/// One action's row.
fn row(ns: &str, a: &Value) -> Markup {
    let name = text(a, "name");
    let description = text(a, "description");
    let identity: Vec<&str> = a
        .get("identity")
        .and_then(Value::as_array)
        .map(|v| v.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let hints = a.get("header_hints").cloned().unwrap_or(Value::Null);
    html! {
        tr id={ "action-" (enc(name)) } {
            td.mono { (name) }
            td { (a.get("title").and_then(Value::as_str).unwrap_or("—")) }
            td.desc { (short_description(description)) }
            td.mono { (text(a, "key")) }
            td.mono { (identity.join(", ")) }
            td {
                @if text(a, "approval") == "required" {
                    strong { "required" } " "
                    a href={ "/console/review?namespace=" (enc(ns)) "&state=awaiting_approval&owner="
                             (enc(&crate::actions::owner_of(name))) } { "drafts" }
                } @else { "none" }
            }
            td { (deliver(a.get("deliver").unwrap_or(&Value::Null))) }
            td.mono { (header_hints(&hints)) }
            td { (text(a, "updated_at")) }
        }
    }
}

/// A description shortened to [`SHORT_DESCRIPTION`] characters, the rest behind "show all".
fn short_description(s: &str) -> Markup {
    if s.chars().count() <= SHORT_DESCRIPTION {
        return html! { (s) };
    }
    let start: String = s.chars().take(SHORT_DESCRIPTION).collect();
    html! {
        (start) "…"
        details { summary { "show all" } p { (s) } }
    }
}

/// The delivery in words: `HTTP POST host/path` or `MCP tool at host/path`.
fn deliver(d: &Value) -> Markup {
    if let Some(h) = d.get("http") {
        let method = h.get("method").and_then(Value::as_str).unwrap_or("POST");
        let url = h.get("url").and_then(Value::as_str).unwrap_or("");
        return html! { "HTTP " (method) " " span.mono { (url_target(url)) } };
    }
    if let Some(m) = d.get("mcp") {
        let tool = m.get("tool").and_then(Value::as_str).unwrap_or("?");
        let url = m.get("url").and_then(Value::as_str).unwrap_or("");
        return html! { "MCP tool " span.mono { (tool) } " at " span.mono { (url_target(url)) } };
    }
    html! { "—" }
}

/// A URL as the console shows it: scheme, host and path, without user info, query or
/// fragment (a credential may be written in any of those).
pub fn url_shown(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, _)) => format!("{scheme}://{}", url_target(url)),
        None => url_target(url),
    }
}

/// The host and path of a URL: no scheme, no user info, no query, no fragment (a credential
/// may be written in any of those).
pub fn url_target(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let end = rest.find(['?', '#']).unwrap_or(rest.len());
    let rest = &rest[..end];
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    format!("{host}{path}")
}

/// A header's hint as shown: the last characters of a long value, or only that it is set.
fn hinted(name: &str, hint: &Value) -> String {
    format!(
        "{name}: {}",
        super::view::hint_shown(hint.as_str().unwrap_or_default())
    )
}

/// `name: …hint` per header, one a line (request headers; `reconcile` ones prefixed).
fn header_hints(h: &Value) -> String {
    let Some(m) = h.as_object() else {
        return "—".into();
    };
    let mut out = vec![];
    for (k, v) in m {
        match v {
            Value::Object(r) if k == "reconcile" => {
                for (rk, rv) in r {
                    out.push(hinted(&format!("reconcile {rk}"), rv));
                }
            }
            v => out.push(hinted(k, v)),
        }
    }
    if out.is_empty() {
        "—".into()
    } else {
        out.join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_shown_without_credentials_query_or_fragment() {
        for (url, shown) in [
            ("https://api.example.com/v1/send", "api.example.com/v1/send"),
            (
                "https://user:pw@api.example.com/v1/send?api_key=s3cr3t#x",
                "api.example.com/v1/send",
            ),
            (
                "http://127.0.0.1:8080/send/{{order_id}}",
                "127.0.0.1:8080/send/{{order_id}}",
            ),
            ("https://mcp.example.com", "mcp.example.com"),
            ("https://h.example/p?q=1", "h.example/p"),
        ] {
            assert_eq!(url_target(url), shown, "{url}");
        }
        assert_eq!(
            url_shown("https://user:pw@hooks.example.com/in?apikey=s3cr3t#f"),
            "https://hooks.example.com/in"
        );
        assert_eq!(url_shown("http://127.0.0.1:9/x"), "http://127.0.0.1:9/x");
    }

    #[test]
    fn an_action_owner_names_its_action() {
        assert_eq!(
            action_of(Some("action:send_followup")),
            Some("send_followup")
        );
        assert_eq!(action_of(Some("n8n-exec-1")), None);
        assert_eq!(action_of(Some("action:")), None);
        assert_eq!(action_of(Some("action:<b>")), None);
        assert_eq!(action_of(None), None);
    }

    #[test]
    fn a_long_description_is_shortened_and_kept_in_full_behind_show_all() {
        let long = "word ".repeat(100);
        let html = short_description(&long).into_string();
        assert!(html.contains("<details><summary>show all"), "{html}");
        assert!(html.contains(long.trim_end()), "in full");
        let short = short_description("Sends the follow-up.").into_string();
        assert_eq!(short, "Sends the follow-up.");
    }

    #[test]
    fn header_hints_name_headers_and_never_more_than_the_hint() {
        let h = serde_json::json!({"Authorization": "9876", "X-Short": "",
                                   "reconcile": {"X-Key": "abcd"}});
        assert_eq!(
            header_hints(&h),
            "Authorization: …9876\nX-Short: (set)\nreconcile X-Key: …abcd"
        );
        assert_eq!(header_hints(&serde_json::json!({})), "—");
    }
}
