//! The console's intake pages: the sources a session may see, one source with its events
//! (newest first, by state, keyset pages), one event with its stored request, attempts and
//! record, and the **Redeliver** forms (one event, or every dead letter of a source).
//!
//! Every read and every redeliver is the API's own handler (`crate::api::v1::sources`)
//! called with the session's caller, so validation, role, scope and messages are the API's.
//! What this file must never do: show a secret (sources are shown in their read shape, with
//! hints only; a stored header whose name says it may carry a credential is shown as a hint
//! too), show a request body or header without escaping it, or reveal a source of another
//! namespace to a scoped session (such a source is answered like a missing one).

use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::{Extension, Json};
use idem::Role;
use idem_intake::source::SourceRead;
use maud::{html, Markup};
use serde_json::{json, Value};

use super::session::{FormData, Viewer};
use super::view::{self, csrf, enc, layout, record_href};
use super::{ConsoleError, ConsoleResult};
use crate::api::v1::shared::Authed;
use crate::api::v1::sources as api;
use crate::error::ApiError;
use crate::input::JsonBody;
use crate::intake::LoadedSource;
use crate::state::AppState;

/// Events per page on a source's page.
const PAGE: usize = 50;

/// The columns of a source's events table.
const EVENT_COLUMNS: [&str; 7] = [
    "Key",
    "Event id",
    "State",
    "Attempts",
    "Received",
    "Delivered",
    "Last error",
];

/// The columns of an event's destinations.
const DESTINATION_COLUMNS: [&str; 6] = ["Destination", "Key", "State", "Attempts", "Delivered", ""];

/// The columns of an event's delivery attempts.
const ATTEMPT_COLUMNS: [&str; 5] = ["Attempt", "At", "Status", "Duration (ms)", "Error"];

/// The path of a source's page.
pub fn source_href(name: &str) -> String {
    format!("/console/sources/{}", enc(name))
}

fn event_href(source: &str, key: &str) -> String {
    format!("{}/events/{}", source_href(source), enc(key))
}

/// A source the viewer may see; another namespace's source is answered as a missing one.
async fn scoped_source(st: &AppState, viewer: &Viewer, raw: &str) -> ConsoleResult<LoadedSource> {
    let name = api::source_name(raw)?;
    let missing = || ConsoleError::not_found(format!("There is no source named {name:?}."));
    let l = match api::existing(st, &name).await {
        Ok(l) => l,
        Err(ApiError::NotFound(_)) => return Err(missing()),
        Err(e) => return Err(e.into()),
    };
    let ns = api::source_ns(&l.source)?;
    if !viewer.caller.covers_scope(ns.as_str()) {
        return Err(missing());
    }
    viewer.caller.authorize(Role::Operator, Some(&ns))?;
    Ok(l)
}

fn s<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or("—")
}

/// A JSON value as short text ("—" for null or absent).
fn short(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => "—".to_owned(),
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
    }
}

fn error_text(e: &Value) -> String {
    match (e.get("category").and_then(Value::as_str), e.get("message")) {
        (Some(c), Some(Value::String(m))) => format!("{c}: {m}"),
        (Some(c), _) => c.to_owned(),
        _ => short(Some(e)),
    }
}

fn state_cell(state: Option<&str>) -> Markup {
    match state.and_then(idem::State::parse) {
        Some(st) => view::state_badge(st),
        None => html! { "—" },
    }
}

/// The `done` / `scheduled` notice after a redirect.
fn param(raw: &str, name: &str) -> Option<String> {
    url::form_urlencoded::parse(raw.as_bytes())
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

// ------------------------------------------------------------------ list

/// `/console/sources`: every source the session may see, with its backlog.
pub async fn list(
    State(st): State<AppState>,
    Extension(viewer): Extension<Viewer>,
) -> ConsoleResult<Html<String>> {
    let rows = sources_rows(&st, &viewer).await?;
    Ok(layout(
        "Sources",
        Some(&viewer),
        html! {
            h1 { "Sources" }
            (sources_table(&rows))
        },
    ))
}

/// The request the API's handlers take, made of the console's viewer: the console shows what
/// the API answers this caller, with the same scope checks and refusals.
fn authed(st: &AppState, viewer: &Viewer) -> Authed {
    Authed {
        st: st.clone(),
        caller: viewer.caller.clone(),
    }
}

/// The sources the viewer may see (read shape) with their undelivered and dead-letter counts.
pub(crate) async fn sources_rows(
    st: &AppState,
    viewer: &Viewer,
) -> ConsoleResult<Vec<(SourceRead, u64, u64)>> {
    let Json(list) = api::list_sources(authed(st, viewer)).await?;
    let backlog = per_source(st.ledger.store().intake_backlog().await?);
    let dead = st.ledger.store().intake_dead_letters().await?;
    Ok(list
        .items
        .into_iter()
        .map(|item| {
            let of = |counts: &[(String, u64)]| {
                counts
                    .iter()
                    .find(|(name, _)| *name == item.source)
                    .map_or(0, |(_, n)| *n)
            };
            let (n, d) = (of(&backlog), of(&dead));
            (item, n, d)
        })
        .collect())
}

/// The table of sources (the sources page and the overview).
pub(crate) fn sources_table(rows: &[(SourceRead, u64, u64)]) -> Markup {
    let columns = [
        "Source",
        "Provider",
        "Namespace",
        "Backlog (not delivered)",
        "Dead letters",
    ];
    let body = html! {
        @for (item, backlog, dead) in rows {
            tr {
                td { a href=(source_href(&item.source)) { (item.source) } }
                td { (item.provider) }
                td { a href=(view::ns_href(&item.namespace)) { (item.namespace) } }
                td.num { (backlog) }
                td.num { (dead) }
            }
        }
        @if rows.is_empty() { (view::empty_row(columns.len(), "No source yet.")) }
    };
    view::table("sources", &columns, body)
}

// ------------------------------------------------------------------ one source

/// `/console/sources/{source}`: the source (hints only) and its events, newest first.
pub async fn source(
    State(st): State<AppState>,
    Extension(viewer): Extension<Viewer>,
    Path(name): Path<String>,
    RawQuery(raw): RawQuery,
) -> ConsoleResult<Response> {
    let raw = raw.unwrap_or_default();
    source_page(&st, &viewer, &name, &raw, StatusCode::OK, None).await
}

async fn source_page(
    st: &AppState,
    viewer: &Viewer,
    name: &str,
    raw: &str,
    status: StatusCode,
    error: Option<String>,
) -> ConsoleResult<Response> {
    let l = scoped_source(st, viewer, name).await?;
    let name = l.source.name.clone();
    let state = param(raw, "state").unwrap_or_default();
    let cursor = param(raw, "cursor").unwrap_or_default();
    let query = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("state", &state)
        .append_pair("cursor", &cursor)
        .append_pair("limit", &PAGE.to_string())
        .finish();
    let Json(page) = api::list_events(
        authed(st, viewer),
        Path(name.clone()),
        RawQuery(Some(query)),
    )
    .await?;
    let doc = l.read_shape();
    let backlog = st
        .ledger
        .store()
        .intake_backlog()
        .await?
        .into_iter()
        .filter(|(n, _, _)| *n == name)
        .map(|(_, _, n)| n)
        .sum::<u64>();
    let scheduled = param(raw, "scheduled").filter(|n| n.parse::<u64>().is_ok());
    let href = source_href(&name);
    let hints = doc
        .secret_hints
        .iter()
        .map(|h| format!("…{h}"))
        .collect::<Vec<_>>()
        .join(", ");
    let forward = doc.forward.as_ref();
    let body = html! {
        p.crumbs { a href="/console/sources" { "Sources" } " / source" }
        h1 { (name) }
        @if let Some(e) = &error {
            p.error role="alert" { "Refused: " (e) }
        }
        @if let Some(n) = &scheduled {
            p.done role="status" { "Done: " (n) " dead letters scheduled again." }
        }
        dl.fields {
            dt { "Provider" } dd { (doc.provider) }
            dt { "Namespace" } dd { a href=(view::ns_href(&doc.namespace)) { (doc.namespace) } }
            dt { "Forward URL" } dd.mono { (forward.map_or_else(|| "—".to_owned(), |f| super::actions::url_shown(&f.url))) }
            dt { "Signing secrets" } dd { @if hints.is_empty() { "—" } @else { "hints: " (hints) } }
            dt { "Forward secret" } dd { (forward.and_then(|f| f.secret_hint.as_deref()).map_or_else(|| "—".to_owned(), |h| format!("hint: …{h}"))) }
            dt { "Backlog (not delivered)" } dd { (backlog) }
            dt { "Created" } dd { (doc.created_at) }
            dt { "Updated" } dd { (doc.updated_at) }
        }
        details {
            summary { "Configuration (secrets shown as hints only, URLs without user info or query)" }
            (view::json_block(&shown_config(&doc), false))
        }
        section aria-labelledby="events-h" {
            h2 #events-h { "Events" }
            (view::state_tabs("Events by state", &href, &state))
            (view::table("events", &EVENT_COLUMNS, html! {
                @for e in &page.items {
                    tr {
                        td { a href=(event_href(&name, &e.key)) { (e.key) } }
                        td { (e.event_id.as_deref().unwrap_or("—")) }
                        td { (state_cell(e.state.as_deref())) }
                        td.num { (e.attempts) }
                        td { (e.received_at) }
                        td { (e.delivered_at.as_deref().unwrap_or("—")) }
                        td { (e.last_error.as_ref().map_or_else(|| "—".to_owned(), error_text)) }
                    }
                }
                @if page.items.is_empty() { (view::empty_row(EVENT_COLUMNS.len(), "Nothing here.")) }
            }))
            @if let Some(c) = &page.next_cursor {
                p { a rel="next" href={ (href) "?state=" (enc(&state)) "&cursor=" (enc(c)) } { "Next page" } }
            }
        }
        section aria-labelledby="bulk-h" {
            h2 #bulk-h { "Redeliver dead letters" }
            p { "Schedules every event of this source whose record is in needs_review (dead letters and held events) again now, with a fresh budget." }
            form.card method="post" action={ (href) "/redeliver" } aria-label="Redeliver dead letters" {
                (csrf(viewer))
                label for="bulk-note" { "Note (required)" }
                textarea #bulk-note name="note" rows="2" aria-required="true" {}
                button type="submit" { "Redeliver dead letters" }
            }
        }
    };
    Ok((status, layout(&name, Some(viewer), body)).into_response())
}

/// `POST /console/sources/{source}/redeliver`: every dead letter again (the API's bulk call).
pub async fn redeliver_dead(
    State(st): State<AppState>,
    Extension(viewer): Extension<Viewer>,
    Extension(form): Extension<FormData>,
    Path(name): Path<String>,
) -> ConsoleResult<Response> {
    let l = scoped_source(&st, &viewer, &name).await?;
    let name = l.source.name.clone();
    let body = json!({ "note": form.get("note").unwrap_or_default() });
    match api::redeliver_many(authed(&st, &viewer), Path(name.clone()), JsonBody(body)).await {
        Ok(Json(n)) => {
            Ok(
                Redirect::to(&format!("{}?scheduled={}", source_href(&name), n.scheduled))
                    .into_response(),
            )
        }
        Err(e) if refusal(&e) => {
            source_page(&st, &viewer, &name, "", e.status(), Some(refusal_text(&e))).await
        }
        Err(e) => Err(e.into()),
    }
}

/// A source's configuration as the console shows it: every destination URL without user
/// info, query or fragment (a credential may be written there), secrets as hints already.
fn shown_config(doc: &SourceRead) -> serde_json::Value {
    let mut v = serde_json::to_value(doc).unwrap_or_default();
    let mut strip = |d: &mut serde_json::Value| {
        if let Some(u) = d.get("url").and_then(|u| u.as_str()) {
            d["url"] = serde_json::json!(super::actions::url_shown(u));
        }
    };
    if let Some(f) = v.get_mut("forward").filter(|f| f.is_object()) {
        strip(f);
    }
    if let Some(fs) = v.get_mut("forwards").and_then(|f| f.as_object_mut()) {
        fs.values_mut().for_each(&mut strip);
    }
    v
}

/// The API's message of a refusal, naming its field when it has one (once: most messages
/// start with it already).
fn refusal_text(e: &ApiError) -> String {
    match e {
        ApiError::InvalidField { field, message }
            if !field.is_empty() && !message.starts_with(&format!("`{field}`")) =>
        {
            format!("`{field}` {message}")
        }
        e => e.to_string(),
    }
}

/// A refusal shown on the page it came from (the rest are error pages).
fn refusal(e: &ApiError) -> bool {
    e.status().is_client_error()
        && !matches!(e.status(), StatusCode::FORBIDDEN | StatusCode::NOT_FOUND)
}

// ------------------------------------------------------------------ one event

/// `/console/sources/{source}/events/{key}`.
pub async fn event(
    State(st): State<AppState>,
    Extension(viewer): Extension<Viewer>,
    Path((name, key)): Path<(String, String)>,
    RawQuery(raw): RawQuery,
) -> ConsoleResult<Response> {
    let done = param(&raw.unwrap_or_default(), "done").filter(|d| d == "redelivered");
    event_page(&st, &viewer, &name, &key, StatusCode::OK, None, done).await
}

async fn event_page(
    st: &AppState,
    viewer: &Viewer,
    name: &str,
    key: &str,
    status: StatusCode,
    error: Option<String>,
    done: Option<String>,
) -> ConsoleResult<Response> {
    let l = scoped_source(st, viewer, name).await?;
    let name = l.source.name.clone();
    let Json(doc) =
        api::get_event(authed(st, viewer), Path((name.clone(), key.to_owned()))).await?;
    // The page reads the answer as the JSON a client gets.
    let doc = serde_json::to_value(doc).unwrap_or_default();
    let ev = &doc["event"];
    let rec = &doc["record"];
    let ns = s(&doc, "/record/namespace");
    let key = s(ev, "/key");
    // A forwarded header may carry a credential (`Authorization`, `Cookie`, a token): its
    // value is shown as a hint only, as an action's header values are.
    let headers: Vec<(String, String)> = ev
        .get("headers")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), view::header_value_shown(k, &short(Some(v)))))
                .collect()
        })
        .unwrap_or_default();
    let attempts = doc
        .get("attempts")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let destinations = doc
        .get("destinations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let body = html! {
        p.crumbs {
            a href="/console/sources" { "Sources" } " / "
            a href=(source_href(&name)) { (name) } " / event"
        }
        h1.key { (key) }
        @if let Some(e) = &error {
            p.error role="alert" { "Refused: " (e) }
        }
        @if let Some(d) = &done {
            p.done role="status" { "Done: " (d) "." }
        }
        dl.fields {
            dt { "State" } dd { (state_cell(rec.get("state").and_then(Value::as_str))) }
            dt { "Attempt" } dd { (short(rec.get("attempt"))) }
            dt { "Event id" } dd { (short(ev.get("event_id"))) }
            dt { "Received" } dd { (s(ev, "/received_at")) }
            dt { "Content type" } dd { (short(ev.get("content_type"))) }
            dt { "Record" } dd {
                @if rec.is_null() { "—" } @else {
                    a href=(record_href(ns, key)) { "the record and its history" }
                }
            }
        }
        section aria-labelledby="headers-h" {
            h2 #headers-h { "Headers" }
            (view::table("headers", &["Name", "Value"], html! {
                @for (k, v) in &headers { tr { td.mono { (k) } td.mono { (view::text_block(v)) } } }
                @if headers.is_empty() { (view::empty_row(2, "—")) }
            }))
        }
        section aria-labelledby="body-h" {
            h2 #body-h { "Body" }
            @match (ev.get("body"), ev.get("body_base64")) {
                (Some(Value::String(b)), _) => pre.body { (view::text_block(b)) },
                (_, Some(Value::String(b))) => {
                    p { "Not UTF-8; base64:" }
                    pre.body { (view::text_block(b)) }
                },
                _ => p { "— (dropped after retention)" },
            }
        }
        section aria-labelledby="destinations-h" {
            h2 #destinations-h { "Destinations" }
            p { "Each destination delivers the event under its own key, with its own state, attempts and redeliver." }
            (view::table("destinations", &DESTINATION_COLUMNS, html! {
                @for d in &destinations {
                    tr {
                        td.mono { (s(d, "/name")) }
                        td.mono {
                            @if ns.is_empty() { (s(d, "/key")) } @else {
                                a href=(record_href(ns, s(d, "/key"))) { (s(d, "/key")) }
                            }
                        }
                        td { (state_cell(d.get("state").and_then(Value::as_str))) }
                        td.num { (d.get("attempts").and_then(Value::as_array).map_or(0, Vec::len)) }
                        td { (short(d.get("delivered_at"))) }
                        td {
                            form method="post" action={ (event_href(&name, key)) "/redeliver" } aria-label={ "Redeliver to " (s(d, "/name")) } {
                                (csrf(viewer))
                                input type="hidden" name="destination" value=(s(d, "/name"));
                                label { "Note " input name="note" required aria-required="true"; }
                                button type="submit" { "Redeliver to " (s(d, "/name")) }
                            }
                        }
                    }
                }
                @if destinations.is_empty() {
                    (view::empty_row(DESTINATION_COLUMNS.len(), "No destination matched this event."))
                }
            }))
        }
        section aria-labelledby="attempts-h" {
            h2 #attempts-h { "Attempts" }
            (view::table("attempts", &ATTEMPT_COLUMNS, html! {
                @for a in &attempts {
                    tr {
                        td.num { (short(a.get("attempt"))) }
                        td { (short(a.get("at"))) }
                        td.num { (short(a.get("status"))) }
                        td.num { (short(a.get("duration_ms"))) }
                        td { (a.get("error").filter(|e| !e.is_null()).map_or_else(|| "—".to_owned(), error_text)) }
                    }
                }
                @if attempts.is_empty() {
                    (view::empty_row(ATTEMPT_COLUMNS.len(), "No delivery attempt yet."))
                }
            }))
        }
        section aria-labelledby="redeliver-h" {
            h2 #redeliver-h { "Redeliver" }
            p { "Schedules this event's delivery again now, with a fresh budget (from needs_review, failed_retryable or completed) — to every destination not completed, or to its only one; recorded with who and why. To replay one destination alone, use its row above." }
            form.card method="post" action={ (event_href(&name, key)) "/redeliver" } aria-label="Redeliver" {
                (csrf(viewer))
                label for="note" { "Note (required)" }
                textarea #note name="note" rows="2" aria-required="true" {}
                button type="submit" { "Redeliver" }
            }
        }
    };
    Ok((status, layout(key, Some(viewer), body)).into_response())
}

/// `POST /console/sources/{source}/events/{key}/redeliver` (the API's single redeliver).
pub async fn redeliver(
    State(st): State<AppState>,
    Extension(viewer): Extension<Viewer>,
    Extension(form): Extension<FormData>,
    Path((name, key)): Path<(String, String)>,
) -> ConsoleResult<Response> {
    let l = scoped_source(&st, &viewer, &name).await?;
    let name = l.source.name.clone();
    let mut body = json!({ "note": form.get("note").unwrap_or_default() });
    if let Some(d) = form.get("destination").filter(|d| !d.is_empty()) {
        body["destination"] = json!(d);
    }
    match api::redeliver_one(
        authed(&st, &viewer),
        Path((name.clone(), key.clone())),
        JsonBody(body),
    )
    .await
    {
        Ok(_) => Ok(
            Redirect::to(&format!("{}?done=redelivered", event_href(&name, &key))).into_response(),
        ),
        Err(e) if refusal(&e) => {
            let message = if e.status() == StatusCode::CONFLICT {
                format!(
                    "a delivery of this event is in flight, or its state cannot be redelivered \
                     now; try again once it has settled ({e})"
                )
            } else {
                refusal_text(&e)
            };
            event_page(&st, &viewer, &name, &key, e.status(), Some(message), None).await
        }
        Err(e) => Err(e.into()),
    }
}

/// A backlog per source and destination summed per source.
fn per_source(rows: Vec<(String, String, u64)>) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = vec![];
    for (s, _, n) in rows {
        match out.iter_mut().find(|(x, _)| *x == s) {
            Some((_, m)) => *m += n,
            None => out.push((s, n)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_its_field_once() {
        let named = ApiError::InvalidField {
            field: "note".into(),
            message: "`note` is required (a non-empty string)".into(),
        };
        assert_eq!(
            refusal_text(&named),
            "`note` is required (a non-empty string)"
        );
        let bare = ApiError::InvalidField {
            field: "destination".into(),
            message: "is not a destination of this event".into(),
        };
        assert_eq!(
            refusal_text(&bare),
            "`destination` is not a destination of this event"
        );
    }
}
