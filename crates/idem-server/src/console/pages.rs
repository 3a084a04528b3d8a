//! The console's pages and the actions behind their forms. Reads go to the store's read
//! methods; every change is one ledger operation built from the API's own request bodies
//! (so a form is validated exactly like the API call it stands for) and recorded with the
//! session token as actor. After a POST the answer is a redirect (post/redirect/get); a
//! refused action shows the API's message on the page it came from and changed nothing.

use axum::extract::{FromRequestParts, Path, RawQuery, State};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::Extension;
use idem::{Key, ListQuery, Namespace, NamespaceChange, Op, ResolveRequest};
use maud::html;
use serde_json::{json, Map, Value};

use super::session::{FormData, Viewer};
use super::view::{self, csrf, enc, layout, ns_href, record_href};
use super::{scoped_ns, ConsoleError, ConsoleResult};
use crate::api::v1::namespaces::visible_namespaces;
use crate::api::v1::review::ResolveBody;
use crate::api::v1::review::{self, review_page, review_query};
use crate::api::v1::shared::Acting;
use crate::api::v1::shared::{query_pairs, query_state};
use crate::api::NoteBody;
use crate::error::ApiError;
use crate::fields::ExternalRef;
use crate::input::{parse_key, parse_namespace, read_body, NsKey};
use crate::state::AppState;

/// Records per page on the namespace page.
const PAGE: usize = 50;

fn scoped_key(viewer: &Viewer, ns: &str, key: &str) -> ConsoleResult<NsKey> {
    let ns = scoped_ns(viewer, ns)?;
    let key: Key = parse_key(key)?;
    Ok(NsKey { ns, key })
}

// ------------------------------------------------------------------ overview

/// `/console`: one row per namespace the session may see.
pub async fn overview(
    State(st): State<AppState>,
    Extension(viewer): Extension<Viewer>,
) -> ConsoleResult<Html<String>> {
    let now = st.ledger.now();
    let infos = visible_namespaces(&st, &viewer.caller).await?;
    let mut rows = Vec::with_capacity(infos.len());
    for info in infos {
        let ns = parse_namespace(&info.namespace)?;
        let activity = st.ledger.store().namespace_activity(&ns, now).await?;
        rows.push((info, activity));
    }
    let sources = super::sources::sources_rows(&st, &viewer).await?;
    let mut columns = vec!["Namespace"];
    columns.extend(idem::State::ALL.map(idem::State::as_str));
    columns.extend([
        "paused",
        "review depth",
        "oldest processing",
        "first-time acquisitions today",
    ]);
    Ok(layout(
        "Namespaces",
        Some(&viewer),
        html! {
            h1 { "Namespaces" }
            (view::table("namespaces", &columns, html! {
                @for (info, act) in &rows {
                    tr {
                        td { a href=(ns_href(&info.namespace)) { (info.namespace) } }
                        @for s in idem::State::ALL { td.num { (info.counts.get(s)) } }
                        td { @if info.paused { strong.paused { "paused" } } @else { "no" } }
                        td.num {
                            (info.counts.get(idem::State::NeedsReview)
                                + info.counts.get(idem::State::AwaitingApproval))
                        }
                        td { (act.oldest_processing_at.map_or_else(|| "—".to_owned(), |t| view::age(now.0 - t.0))) }
                        td.num {
                            (act.acquired_today) " / "
                            (info.policy.daily_limit.map_or_else(|| "no limit".to_owned(), |l| l.to_string()))
                        }
                    }
                }
                @if rows.is_empty() {
                    (view::empty_row(columns.len(), "No namespace has records yet."))
                }
            }))
            @if !sources.is_empty() {
                section aria-labelledby="sources-h" {
                    h2 #sources-h { "Sources" }
                    (super::sources::sources_table(&sources))
                }
            }
        },
    ))
}

// ------------------------------------------------------------------ review queue

/// `/console/review`: what waits for a person, oldest first.
pub async fn review(
    State(st): State<AppState>,
    Extension(viewer): Extension<Viewer>,
    RawQuery(raw): RawQuery,
) -> ConsoleResult<Html<String>> {
    let raw = raw.unwrap_or_default();
    let q = review_query(&viewer.caller, &raw)?;
    let page = review_page(&st, &q).await?;
    let now = st.ledger.now();
    let given = |name: &str| -> String {
        url::form_urlencoded::parse(raw.as_bytes())
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
            .unwrap_or_default()
    };
    let state = given("state");
    let next_href = page.next_cursor.as_ref().map(|c| {
        let mut ser = url::form_urlencoded::Serializer::new(String::new());
        for (k, v) in url::form_urlencoded::parse(raw.as_bytes()) {
            if k != "cursor" {
                ser.append_pair(&k, &v);
            }
        }
        ser.append_pair("cursor", c);
        format!("/console/review?{}", ser.finish())
    });
    Ok(layout(
        "Review queue",
        Some(&viewer),
        html! {
            h1 { "Review queue" }
            form.filters method="get" action="/console/review" aria-label="Filter" {
                label { "Namespace " input type="text" name="namespace" value=(given("namespace")); }
                label { "State "
                    select name="state" {
                        option value="" selected[state.is_empty()] { "all" }
                        @for s in ["needs_review", "awaiting_approval", "processing"] {
                            option value=(s) selected[state == s] { (s) }
                        }
                    }
                }
                label { "Owner " input type="text" name="owner" value=(given("owner")); }
                label { "Correlation id " input type="text" name="correlation_id" value=(given("correlation_id")); }
                button type="submit" { "Filter" }
            }
            p.hint { "needs_review, awaiting_approval, and processing past the namespace's stuck_after_ms; oldest first." }
            (view::records_table(&page.items, now, true))
            @if let Some(h) = next_href { p { a rel="next" href=(h) { "Next page" } } }
        },
    ))
}

// ------------------------------------------------------------------ record

/// What a record page shows besides the record (a refused action's message).
struct Notice {
    status: StatusCode,
    error: Option<String>,
    done: Option<String>,
}

/// `/console/ns/{ns}/keys/{key}`.
pub async fn record(
    State(st): State<AppState>,
    Extension(viewer): Extension<Viewer>,
    Path((ns, key)): Path<(String, String)>,
    RawQuery(raw): RawQuery,
) -> ConsoleResult<Response> {
    let nk = scoped_key(&viewer, &ns, &key)?;
    let done = url::form_urlencoded::parse(raw.unwrap_or_default().as_bytes())
        .find(|(k, _)| k == "done")
        .map(|(_, v)| v.into_owned())
        .filter(|d| ["resolved", "approved", "rejected"].contains(&d.as_str()));
    record_page(
        &st,
        &viewer,
        &nk,
        Notice {
            status: StatusCode::OK,
            error: None,
            done,
        },
    )
    .await
}

async fn record_page(
    st: &AppState,
    viewer: &Viewer,
    nk: &NsKey,
    notice: Notice,
) -> ConsoleResult<Response> {
    let Some(rw) = st.ledger.store().get(&nk.ns, &nk.key).await? else {
        return Err(ConsoleError::not_found(format!(
            "No record for this key in namespace {}.",
            nk.ns
        )));
    };
    let now = st.ledger.now();
    let r = &rw.record;
    let base = record_href(r.namespace.as_str(), r.key.as_str());
    let lease_expired =
        matches!(r.state, idem::State::Processing | idem::State::Prepared) && !r.lease_valid(now);
    let resolvable = matches!(
        r.state,
        idem::State::NeedsReview | idem::State::FailedRetryable | idem::State::FailedPermanent
    ) || lease_expired;
    // A record of an action names it (its owner); the page shows which tool the draft is of.
    let action = super::actions::action_of(r.owner.as_deref());
    let declared = match action {
        Some(name) => Some(
            crate::actions::load(st, &nk.ns, name)
                .await
                .map(|l| l.map(|l| l.action.title)),
        ),
        None => None,
    };
    let body = html! {
        p.crumbs { a href=(ns_href(r.namespace.as_str())) { (r.namespace.as_str()) } " / record" }
        h1.key { (r.key.as_str()) }
        @if let Some(e) = &notice.error {
            p.error role="alert" { "Refused: " (e) }
        }
        @if let Some(d) = &notice.done {
            p.done role="status" { "Done: " (d) "." }
        }
        dl.fields {
            dt { "State" } dd { (view::state_badge(r.state)) @if lease_expired { " (lease expired)" } }
            dt { "Attempt" } dd { (r.attempt) }
            dt { "Namespace" } dd { (r.namespace.as_str()) }
            dt { "Owner" } dd { (r.owner.as_deref().unwrap_or("—")) }
            @if let Some(name) = action {
                dt { "Action" } dd {
                    a href=(super::actions::action_href(r.namespace.as_str(), name)) { (name) }
                    @match &declared {
                        Some(Ok(Some(Some(title)))) => { " — " (title) }
                        Some(Ok(None)) => { " (no longer declared)" }
                        Some(Err(_)) => { " (could not be read)" }
                        _ => {}
                    }
                }
            }
            dt { "Correlation id" } dd { (r.correlation_id.as_deref().unwrap_or("—")) }
            dt { "External ref" } dd { (r.external_ref.as_deref().unwrap_or("—")) }
            dt { "Last error" } dd {
                @match &r.last_error {
                    Some(e) => {
                        (e.category) ": " (view::text_block(&e.message))
                        @if let Some(s) = e.http_status { " (HTTP " (s) ")" }
                    }
                    None => "—",
                }
            }
            dt { "Fingerprint" } dd.mono { (r.fingerprint.as_ref().map_or_else(|| "—".to_owned(), |f| f.to_string())) }
            dt { "Lease expires" } dd { (view::opt_time(r.lease_expires_at)) }
            dt { "Not before" } dd { (view::opt_time(r.not_before)) }
            dt { "Created" } dd { (view::time(r.created_at)) }
            dt { "Updated" } dd { (view::time(r.updated_at)) }
        }
        @if r.state == idem::State::AwaitingApproval {
            section aria-labelledby="draft-h" {
                h2 #draft-h { "Draft to approve" }
                @if let Some(name) = action {
                    p #draft-about {
                        "The arguments the agent's call of action " strong { (name) }
                        " stored. Approve makes idem deliver exactly these arguments, once, \
                         through its outbox; the agent is not asked again and a later call \
                         with other text does not replace them. Reject fails the call for good."
                    }
                    @if matches!(declared, Some(Ok(None))) {
                        p.error role="alert" {
                            "The action " (name) " is no longer declared: an approval is \
                             recorded, but nothing can be delivered."
                        }
                    }
                }
                @match &r.prepared_payload {
                    Some(p) => (view::json_block(p, false)),
                    None => p { "—" },
                }
                form.card method="post" action={ (base) "/approve" } aria-label="Approve or reject" {
                    (csrf(viewer))
                    label for="approve-note" { "Note" }
                    textarea #approve-note name="note" rows="2" {}
                    div.buttons {
                        button type="submit" { "Approve" }
                        button.danger type="submit" formaction={ (base) "/reject" } { "Reject" }
                    }
                }
            }
        } @else {
            section aria-labelledby="payload-h" {
                h2 #payload-h {
                    @if action.is_some() { "Arguments (prepared payload)" } @else { "Prepared payload" }
                }
                @match &r.prepared_payload {
                    Some(p) => (view::json_block(p, true)),
                    None => p { "—" },
                }
            }
        }
        section aria-labelledby="result-h" {
            h2 #result-h { "Result" }
            @match &r.result {
                Some(v) => (view::json_block(v, true)),
                None => p { @if r.result_expired { "expired (retention)" } @else { "—" } },
            }
        }
        @if resolvable {
            section aria-labelledby="resolve-h" {
                h2 #resolve-h { "Resolve" }
                form.card method="post" action={ (base) "/resolve" } aria-label="Resolve" {
                    (csrf(viewer))
                    label for="action" { "Action" }
                    select #action name="action" {
                        option value="completed" { "completed" }
                        option value="retry" { "retry" }
                        option value="failed_permanent" { "failed_permanent" }
                    }
                    label for="external_ref" { "External ref" }
                    input #external_ref type="text" name="external_ref";
                    label for="result" { "Result (JSON)" }
                    textarea #result name="result" rows="3" {}
                    label for="note" { "Note (required)" }
                    textarea #note name="note" rows="2" aria-required="true" {}
                    button type="submit" { "Resolve" }
                }
            }
        }
        section aria-labelledby="history-h" {
            h2 #history-h { "History" }
            (view::history(&rw.events))
        }
    };
    let page = layout(r.key.as_str(), Some(viewer), body);
    Ok((notice.status, page).into_response())
}

/// Runs one operator action; a refusal re-renders the record page with the API's message.
async fn act(a: RecordAction, op: Result<Op, ApiError>, done: &str) -> ConsoleResult<Response> {
    let outcome = match op {
        Ok(op) => {
            crate::api::v1::shared::state_write(&a.st, &a.nk, done, op, a.viewer.caller.actor())
                .await
                .map(drop)
        }
        Err(e) => Err(e),
    };
    answer(a, outcome, done).await
}

/// After an operator action: a redirect to the record saying it is done, or the record page
/// with the API's message when it was refused.
async fn answer(
    a: RecordAction,
    outcome: Result<(), ApiError>,
    done: &str,
) -> ConsoleResult<Response> {
    let RecordAction { st, viewer, nk, .. } = a;
    match outcome {
        Ok(_) => {
            let to = format!(
                "{}?done={done}",
                record_href(nk.ns.as_str(), nk.key.as_str())
            );
            Ok(Redirect::to(&to).into_response())
        }
        Err(e) if e.status().is_client_error() && e.status() != StatusCode::FORBIDDEN => {
            let notice = Notice {
                status: e.status(),
                error: Some(e.to_string()),
                done: None,
            };
            record_page(&st, &viewer, &nk, notice).await
        }
        Err(e) => Err(e.into()),
    }
}

/// The resolve form as the API's body: the same validation, the same messages.
fn resolve_op(form: &FormData) -> Result<Op, ApiError> {
    let mut body = Map::new();
    body.insert(
        "action".into(),
        json!(form.get("action").unwrap_or_default()),
    );
    body.insert("note".into(), json!(form.get("note").unwrap_or_default()));
    if let Some(x) = form.get("external_ref").filter(|x| !x.trim().is_empty()) {
        body.insert("external_ref".into(), json!(x));
    }
    if let Some(text) = form.get("result").filter(|x| !x.trim().is_empty()) {
        let v: Value = serde_json::from_str(text).map_err(|e| {
            ApiError::invalid_field("result", format!("Result (JSON) is not valid JSON: {e}"))
        })?;
        body.insert("result".into(), v);
    }
    let b: ResolveBody = read_body(Value::Object(body))?;
    Ok(Op::Resolve(ResolveRequest {
        action: b.action,
        external_ref: b.external_ref.map(ExternalRef::into_string),
        result: b.result,
        note: b.note.into_string(),
    }))
}

/// The approve/reject form as the API's body (the note is optional).
fn note_body(form: &FormData) -> Result<NoteBody, ApiError> {
    let mut body = Map::new();
    if let Some(n) = form.get("note").filter(|n| !n.trim().is_empty()) {
        body.insert("note".into(), json!(n));
    }
    read_body(Value::Object(body))
}

/// The note of a form (pause and resume), read as the API's body.
fn note_of(form: &FormData) -> Result<Option<String>, ApiError> {
    note_body(form).map(NoteBody::into_note)
}

/// A decision on a draft as the API's own request: the API's handler runs it (the same
/// transition, the same refusals, and for an action's draft the same queueing of its
/// delivery), with the session's caller as actor.
fn acting(a: &RecordAction, body: NoteBody) -> Acting<NsKey, NoteBody> {
    Acting {
        st: a.st.clone(),
        caller: a.viewer.caller.clone(),
        path: a.nk.clone(),
        body,
    }
}

/// An operator's action on a record from its page: who acts, the submitted form, and the
/// record's namespace and key, read in the order the action handlers always read them (a key
/// outside the viewer's scope is the 403 page before anything runs).
pub struct RecordAction {
    st: AppState,
    viewer: Viewer,
    form: FormData,
    nk: NsKey,
}

impl FromRequestParts<AppState> for RecordAction {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, st: &AppState) -> Result<Self, Response> {
        let Extension(viewer) = Extension::<Viewer>::from_request_parts(parts, st)
            .await
            .map_err(IntoResponse::into_response)?;
        let Extension(form) = Extension::<FormData>::from_request_parts(parts, st)
            .await
            .map_err(IntoResponse::into_response)?;
        let Path((ns, key)) = Path::<(String, String)>::from_request_parts(parts, st)
            .await
            .map_err(IntoResponse::into_response)?;
        let nk = scoped_key(&viewer, &ns, &key).map_err(IntoResponse::into_response)?;
        Ok(RecordAction {
            st: st.clone(),
            viewer,
            form,
            nk,
        })
    }
}

pub async fn resolve(a: RecordAction) -> ConsoleResult<Response> {
    let op = resolve_op(&a.form);
    act(a, op, "resolved").await
}

pub async fn approve(a: RecordAction) -> ConsoleResult<Response> {
    let outcome = match note_body(&a.form) {
        Ok(body) => review::approve(acting(&a, body)).await.map(drop),
        Err(e) => Err(e),
    };
    answer(a, outcome, "approved").await
}

pub async fn reject(a: RecordAction) -> ConsoleResult<Response> {
    let outcome = match note_body(&a.form) {
        Ok(body) => review::reject(acting(&a, body)).await.map(drop),
        Err(e) => Err(e),
    };
    answer(a, outcome, "rejected").await
}

// ------------------------------------------------------------------ namespace

/// `/console/ns/{ns}`: policy, counts, the pause switch, records by state (keyset pages).
pub async fn namespace(
    State(st): State<AppState>,
    Extension(viewer): Extension<Viewer>,
    Path(ns): Path<String>,
    RawQuery(raw): RawQuery,
) -> ConsoleResult<Html<String>> {
    let ns = scoped_ns(&viewer, &ns)?;
    let mut query = ListQuery {
        limit: PAGE,
        ..ListQuery::default()
    };
    for (k, v) in query_pairs(raw.as_deref()) {
        match k.as_ref() {
            "state" => query.state = Some(query_state(&v)?),
            "cursor" => query.cursor = Some(v.into_owned()),
            _ => {}
        }
    }
    let store = st.ledger.store();
    let info = store.namespace(&ns).await?;
    let page = store.list(&ns, &query).await?;
    let now = st.ledger.now();
    let activity = store.namespace_activity(&ns, now).await?;
    let href = ns_href(ns.as_str());
    let state_q = query.state.map(|s| s.as_str()).unwrap_or("");
    let mut policy = info.policy.to_json();
    // The alert URL without user info or query: a credential may be written there.
    if let Some(u) = policy.get("alert_url").and_then(|u| u.as_str()) {
        policy["alert_url"] = serde_json::json!(super::actions::url_shown(u));
    }
    let actions = super::actions::read(&st, &viewer, &ns).await?;
    Ok(layout(
        ns.as_str(),
        Some(&viewer),
        html! {
            h1 { (ns.as_str()) }
            p {
                @if info.paused {
                    strong.paused { "Paused" } ": claims are refused (503) until resumed. "
                    form.inline method="get" action={ (href) "/resume" } {
                        button type="submit" { "Resume" }
                    }
                } @else {
                    "Running. "
                    form.inline method="get" action={ (href) "/pause" } {
                        button.danger type="submit" { "Pause" }
                    }
                }
            }
            section aria-labelledby="counts-h" {
                h2 #counts-h { "Counts" }
                table.counts {
                    thead { tr { @for s in idem::State::ALL { th scope="col" { (s.as_str()) } } } }
                    tbody { tr { @for s in idem::State::ALL {
                        td.num { a href={ (href) "?state=" (s.as_str()) } { (info.counts.get(s)) } }
                    } } }
                }
                p {
                    "First-time acquisitions today: " (activity.acquired_today)
                    " / " (info.policy.daily_limit.map_or_else(|| "no limit".to_owned(), |l| l.to_string()))
                    ". Oldest processing: "
                    (activity.oldest_processing_at.map_or_else(|| "—".to_owned(), |t| view::age(now.0 - t.0)))
                    "."
                }
            }
            @if !actions.is_empty() {
                section aria-labelledby="actions-h" {
                    h2 #actions-h { "Actions" }
                    p {
                        (actions.len()) @if actions.len() == 1 { " action" } @else { " actions" }
                        " served to agents at " code { "/mcp/" (ns.as_str()) } ": "
                        @for (i, a) in actions.iter().enumerate() {
                            @if i > 0 { ", " }
                            @let name = a.get("name").and_then(Value::as_str).unwrap_or("?");
                            a href=(super::actions::action_href(ns.as_str(), name)) { (name) }
                        }
                        ". "
                        a href=(super::actions::actions_href(ns.as_str())) { "All actions" }
                    }
                }
            }
            section aria-labelledby="policy-h" {
                h2 #policy-h { "Policy" }
                (view::json_block(&policy, false))
            }
            section aria-labelledby="records-h" {
                h2 #records-h { "Records" }
                (view::state_tabs("Records by state", &href, state_q))
                (view::records_table(&page.items, now, false))
                @if let Some(c) = &page.next_cursor {
                    p { a rel="next" href={ (href) "?state=" (state_q) "&cursor=" (enc(c)) } { "Next page" } }
                }
            }
        },
    ))
}

fn confirm_page(viewer: &Viewer, ns: &Namespace, pause: bool) -> Html<String> {
    let (what, title) = if pause {
        (
            "pause",
            "Every claim in this namespace will get 503 paused until it is resumed; work in \
             flight can still complete or fail.",
        )
    } else {
        ("resume", "Claims in this namespace will be answered again.")
    };
    let href = ns_href(ns.as_str());
    layout(
        &format!("Confirm {what}"),
        Some(viewer),
        html! {
            h1 { @if pause { "Pause " } @else { "Resume " } (ns.as_str()) "?" }
            p { (title) }
            form.card method="post" action={ (href) "/" (what) } aria-label={ "Confirm " (what) } {
                (csrf(viewer))
                label for="note" { "Note" }
                textarea #note name="note" rows="2" {}
                div.buttons {
                    button type="submit" { "Confirm" }
                    a href=(href) { "Cancel" }
                }
            }
        },
    )
}

pub async fn confirm_pause(
    Extension(viewer): Extension<Viewer>,
    Path(ns): Path<String>,
) -> ConsoleResult<Html<String>> {
    let ns = scoped_ns(&viewer, &ns)?;
    Ok(confirm_page(&viewer, &ns, true))
}

pub async fn confirm_resume(
    Extension(viewer): Extension<Viewer>,
    Path(ns): Path<String>,
) -> ConsoleResult<Html<String>> {
    let ns = scoped_ns(&viewer, &ns)?;
    Ok(confirm_page(&viewer, &ns, false))
}

async fn switch(
    st: &AppState,
    viewer: &Viewer,
    form: &FormData,
    ns: &str,
    change: NamespaceChange,
) -> ConsoleResult<Response> {
    let ns = scoped_ns(viewer, ns)?;
    let note = note_of(form)?;
    let what = if matches!(change, NamespaceChange::Pause) {
        "paused"
    } else {
        "resumed"
    };
    st.ledger
        .store()
        .update_namespace(&ns, change, st.ledger.now())
        .await?;
    tracing::warn!(namespace = %ns, actor = viewer.caller.actor(), note, "namespace {what} (console)");
    Ok(Redirect::to(&ns_href(ns.as_str())).into_response())
}

pub async fn pause(
    State(st): State<AppState>,
    Extension(viewer): Extension<Viewer>,
    Extension(form): Extension<FormData>,
    Path(ns): Path<String>,
) -> ConsoleResult<Response> {
    switch(&st, &viewer, &form, &ns, NamespaceChange::Pause).await
}

pub async fn resume(
    State(st): State<AppState>,
    Extension(viewer): Extension<Viewer>,
    Extension(form): Extension<FormData>,
    Path(ns): Path<String>,
) -> ConsoleResult<Response> {
    switch(&st, &viewer, &form, &ns, NamespaceChange::Resume).await
}
