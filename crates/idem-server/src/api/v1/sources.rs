//! Intake sources (`INTAKE.md`): `PUT/PATCH/GET/DELETE /v1/sources/{source}`,
//! `GET /v1/sources` (admin writes, operator reads), and the operator's view of a source's
//! events: list, one event with its attempts, redeliver one, redeliver many. Also the route
//! of the provider-facing `POST /in/{source}` (its handler is `crate::intake::receive`).
//!
//! The rules of a source document are `idem_intake::source`'s; the rules of a redeliver are
//! the core's (`Op::Redeliver`). What this file must never do: answer, log or store in the
//! configuration a secret (reads show `secret_hints`), or write anything for a refused
//! request.

use axum::extract::{Path, RawQuery};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, on, post, put, MethodFilter};
use axum::Json;
use base64::Engine;
use idem::{
    Delivered, IntakeQuery, IntakeUpdate, Key, Namespace, Op, Reply, Role, Secret, SourceDelete,
    SourceWrite, State as RecState, Timestamp,
};
use idem_intake::source::{Source, SourceInput, SourceRead};
use serde::Serialize;
use serde_json::{json, Value};
use utoipa::{OpenApi, ToSchema};

use super::shared::{query_limit, query_pairs, query_state, Authed};
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::fields::{DestinationName, Note, RedeliverState, Rfc3339};
use crate::input::{read_body, JsonBody};
use crate::intake::receive::ForwardItem;
use crate::intake::{load, LoadedSource};
use crate::route::{r, Route};
use crate::state::AppState;
use idem_intake::fanout::{delivery_key, held_delivery_key, DEFAULT};

/// The routes of this file.
pub fn routes() -> Vec<Route> {
    use Role::{Admin, Operator};
    vec![
        // Every method reaches the handler: an unknown source is 404 before a wrong method is
        // 405 (the contract's order), so the method is checked after the source is found.
        r(
            "post",
            "/in/{source}",
            None,
            on(every_method(), crate::intake::receive::receive),
        ),
        r("get", "/v1/sources", Some(Operator), get(list_sources)),
        r("put", "/v1/sources/{source}", Some(Admin), put(put_source)),
        r(
            "patch",
            "/v1/sources/{source}",
            Some(Admin),
            axum::routing::patch(patch_source),
        ),
        r(
            "get",
            "/v1/sources/{source}",
            Some(Operator),
            get(get_source),
        ),
        r(
            "delete",
            "/v1/sources/{source}",
            Some(Admin),
            axum::routing::delete(delete_source),
        ),
        r(
            "get",
            "/v1/sources/{source}/events",
            Some(Operator),
            get(list_events),
        ),
        r(
            "get",
            "/v1/sources/{source}/events/{key}",
            Some(Operator),
            get(get_event),
        ),
        r(
            "post",
            "/v1/sources/{source}/events/{key}/redeliver",
            Some(Operator),
            post(redeliver_one),
        ),
        r(
            "post",
            "/v1/sources/{source}/redeliver",
            Some(Operator),
            post(redeliver_many),
        ),
    ]
}

/// The OpenAPI of this file.
#[derive(OpenApi)]
#[openapi(
    paths(
        crate::intake::receive::receive,
        list_sources,
        put_source,
        patch_source,
        get_source,
        delete_source,
        list_events,
        get_event,
        redeliver_one,
        redeliver_many
    ),
    components(schemas(
        SourceDoc,
        SourceList,
        EventSummaryDoc,
        EventList,
        RedeliverBody,
        BulkRedeliverBody,
        RedeliverStateDoc,
        RedeliverResponse,
        ScheduledDelivery,
        Scheduled,
        crate::intake::receive::IntakeResponse,
        crate::intake::receive::IntakeEventStatus
    ))
)]
pub struct Doc;

/// A source as reads show it (defaults filled in; secrets only as `secret_hints`).
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct SourceDoc {
    source: String,
    /// stripe | standard_webhooks | github | shopify | slack | hubspot | typeform | twilio | hmac
    provider: String,
    namespace: String,
    tolerance_ms: i64,
    /// `{header}` or `{pointer}`; null when the provider's rule has no such form (twilio).
    event_id: Option<Object>,
    split: Option<String>,
    /// The destination `default`: `{url, timeout_ms, concurrency, headers, retry:
    /// {max_attempts, base_ms, max_ms, window_ms}, secret_hint, filter, rate}`; null when the
    /// source has only named destinations.
    forward: Option<Object>,
    /// The named destinations, each in the shape of `forward` (`{}` when none).
    forwards: Object,
    hmac: Option<Object>,
    public_url: Option<String>,
    max_body_bytes: u64,
    /// The last 4 characters of each signing secret (empty for secrets of 8 characters or
    /// fewer).
    secret_hints: Vec<String>,
    created_at: String,
    updated_at: String,
}

/// A free-form JSON object.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct Object {}

#[derive(Serialize, ToSchema)]
pub struct SourceList {
    #[schema(value_type = Vec<SourceDoc>)]
    pub items: Vec<SourceRead>,
}

/// One event of a source, as the list shows it.
#[derive(Serialize, ToSchema)]
pub struct EventSummaryDoc {
    pub key: String,
    pub event_id: Option<String>,
    pub state: Option<String>,
    pub attempts: usize,
    pub received_at: String,
    pub delivered_at: Option<String>,
    /// `{category, message}`: the last attempt's error; for an event in review that had no
    /// attempt (held: `missing_identity`, `key_collision`), its record's.
    #[schema(value_type = Option<Object>)]
    pub last_error: Option<Value>,
    /// The destinations the event goes to (`default` delivers under the event's own key).
    pub destinations: Vec<String>,
}

#[derive(Serialize, ToSchema)]
pub struct EventList {
    pub items: Vec<EventSummaryDoc>,
    pub next_cursor: Option<String>,
}

crate::fields::request_body! {
    optional;
    /// `POST …/events/{key}/redeliver`.
    #[derive(Debug, ToSchema)]
    #[serde(deny_unknown_fields)]
    pub struct RedeliverBody {
        /// Why (required, 1 to 2000 characters, no NUL; recorded with who).
        #[schema(value_type = String, min_length = 1, max_length = 2000, pattern = "^[^\\x00]*$")]
        pub note: Note,
        /// Only this destination; without it every destination of the event not `completed`
        /// (the only one, whatever its state, for an event with one destination).
        #[schema(value_type = Option<String>, max_length = 255, pattern = "^[^\\x00]*$")]
        pub destination: Option<DestinationName>,
    }
}

crate::fields::request_body! {
    optional;
    /// `POST /v1/sources/{source}/redeliver`.
    #[derive(Debug, ToSchema)]
    #[serde(deny_unknown_fields)]
    pub struct BulkRedeliverBody {
        /// needs_review (default), failed_retryable or completed.
        #[schema(value_type = Option<RedeliverStateDoc>)]
        pub state: Option<RedeliverState>,
        /// RFC 3339 lower bound on `received_at`.
        #[schema(value_type = Option<String>, format = DateTime)]
        pub since: Option<Rfc3339>,
        /// RFC 3339 upper bound on `received_at`.
        #[schema(value_type = Option<String>, format = DateTime)]
        pub until: Option<Rfc3339>,
        /// Why (required, 1 to 2000 characters, no NUL; recorded with who).
        #[schema(value_type = String, min_length = 1, max_length = 2000, pattern = "^[^\\x00]*$")]
        pub note: Note,
    }
}

/// The states a bulk redeliver selects by.
#[derive(ToSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub enum RedeliverStateDoc {
    NeedsReview,
    FailedRetryable,
    Completed,
}

#[derive(Serialize, ToSchema)]
pub struct RedeliverResponse {
    pub key: String,
    /// The state of the (first) scheduled delivery.
    pub state: String,
    /// Each scheduled delivery.
    pub destinations: Vec<ScheduledDelivery>,
}

#[derive(Serialize, ToSchema)]
pub struct ScheduledDelivery {
    pub name: String,
    pub key: String,
    pub state: String,
}

#[derive(Serialize, ToSchema)]
pub struct Scheduled {
    pub scheduled: usize,
}

fn every_method() -> MethodFilter {
    [
        MethodFilter::GET,
        MethodFilter::HEAD,
        MethodFilter::PUT,
        MethodFilter::PATCH,
        MethodFilter::DELETE,
        MethodFilter::OPTIONS,
        MethodFilter::TRACE,
    ]
    .into_iter()
    .fold(MethodFilter::POST, MethodFilter::or)
}

pub(crate) fn source_name(s: &str) -> ApiResult<String> {
    Namespace::try_from(s)
        .map(|_| s.to_owned())
        .map_err(|e| ApiError::InvalidNamespace(format!("source name: {e}")))
}

pub(crate) fn source_ns(src: &Source) -> ApiResult<Namespace> {
    Namespace::try_from(src.namespace())
        .map_err(|e| ApiError::internal(format!("source namespace: {e}")))
}

pub(crate) async fn existing(st: &AppState, name: &str) -> ApiResult<LoadedSource> {
    load(st.ledger.store(), name, st.ledger.now())
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no source named {name:?}")))
}

/// The source named by the path segment `raw`, when the caller may see it with `role` (a
/// scoped token sees sources of its namespace): its checked name and the source.
async fn visible(
    st: &AppState,
    caller: &Caller,
    raw: &str,
    role: Role,
) -> ApiResult<(String, LoadedSource)> {
    let name = source_name(raw)?;
    let l = existing(st, &name).await?;
    caller.authorize(role, Some(&source_ns(&l.source)?))?;
    Ok((name, l))
}

async fn write(
    st: &AppState,
    caller: &Caller,
    input: SourceInput,
    replace_forward: bool,
    force: bool,
) -> ApiResult<(bool, LoadedSource)> {
    let src = &input.source;
    caller.authorize(Role::Admin, Some(&source_ns(src)?))?;
    let before = load(st.ledger.store(), &src.name, st.ledger.now()).await?;
    // A source that exists is written only by a caller who may write its namespace: a token
    // scoped elsewhere must not move it (its secrets, its forward URL) into its own.
    if let Some(b) = &before {
        caller.authorize(Role::Admin, Some(&source_ns(&b.source)?))?;
        if !force {
            keeps_undelivered(st, &b.source, src).await?;
        }
    }
    let w = SourceWrite {
        name: src.name.clone(),
        config: src.to_stored().to_string(),
        destination_secrets: destination_secret_writes(
            &input,
            before.as_ref().map(|b| &b.source),
            replace_forward,
        ),
        secrets: input
            .secrets
            .secrets
            .map(|v| v.into_iter().map(Secret::new).collect()),
        forward_secret: match input.secrets.forward_secret {
            Some(fs) => Some(fs.map(Secret::new)),
            None if replace_forward => Some(None),
            None => None,
        },
    };
    let created = st.ledger.store().source_put(w, st.ledger.now()).await;
    st.sources.forget(&src.name);
    let created = created?;
    tracing::info!(source = %src.name, created, "source written");
    Ok((created, existing(st, &src.name).await?))
}

/// A destination is not dropped while deliveries to it are undelivered (waiting, retrying
/// or dead letters): they could never be delivered, redelivered or counted out of the
/// backlog again. 409 `invalid_transition`, as a `DELETE` of the source is, unless
/// `?force=true` (their records stay; nothing more is forwarded to it).
async fn keeps_undelivered(st: &AppState, before: &Source, after: &Source) -> ApiResult<()> {
    let kept: Vec<&str> = after.destinations().iter().map(|(n, _)| *n).collect();
    let gone: Vec<&str> = before
        .destinations()
        .iter()
        .map(|(n, _)| *n)
        .filter(|n| !kept.contains(n))
        .collect();
    if gone.is_empty() {
        return Ok(());
    }
    let backlog = st.ledger.store().intake_backlog().await?;
    let stranded = backlog
        .iter()
        .find(|(s, d, n)| *s == before.name && gone.contains(&d.as_str()) && *n > 0);
    match stranded {
        None => Ok(()),
        Some((_, d, n)) => Err(ApiError::InvalidTransition(format!(
            "{n} deliveries to destination `{d}` are not delivered yet; keep it until they are \
             (or redeliver them), or write with ?force=true to drop it and forward nothing \
             more to it"
        ))),
    }
}

/// `?force=true` of a write or a delete.
fn force_of(q: Option<String>) -> ApiResult<bool> {
    let mut force = false;
    for (k, v) in url::form_urlencoded::parse(q.unwrap_or_default().as_bytes()) {
        if k == "force" {
            force = match v.as_ref() {
                "true" | "1" => true,
                "false" | "0" | "" => false,
                _ => return Err(ApiError::invalid_field("force", "must be true or false")),
            };
        }
    }
    Ok(force)
}

/// The writes of the named destinations' secrets: those given; with `replace` (a PUT, the
/// config file) every other destination's is removed; a destination the source no longer has
/// loses its secret either way.
pub(crate) fn destination_secret_writes(
    input: &SourceInput,
    before: Option<&Source>,
    replace: bool,
) -> Vec<(String, Option<Secret>)> {
    let given = &input.secrets.destination_secrets;
    let mut out: Vec<(String, Option<Secret>)> = given
        .iter()
        .map(|(n, s)| (n.clone(), s.clone().map(Secret::new)))
        .collect();
    if replace {
        for n in input.source.forwards.keys() {
            if !given.contains_key(n) {
                out.push((n.clone(), None));
            }
        }
    }
    if let Some(b) = before {
        for n in b.forwards.keys() {
            if !input.source.forwards.contains_key(n) && !given.contains_key(n) {
                out.push((n.clone(), None));
            }
        }
    }
    out
}

/// List sources (operator).
#[utoipa::path(get, path = "/v1/sources", tag = "intake",
    responses((status = 200, description = "every source the token may see, by name", body = SourceList)))]
pub async fn list_sources(Authed { st, caller }: Authed) -> ApiResult<Json<SourceList>> {
    let mut items = vec![];
    for row in st.ledger.store().source_list().await? {
        if let Some(l) = load(st.ledger.store(), &row.name, st.ledger.now()).await? {
            if caller
                .authorize(Role::Operator, Some(&source_ns(&l.source)?))
                .is_ok()
            {
                items.push(l.read_shape());
            }
        }
    }
    Ok(Json(SourceList { items }))
}

/// Create or replace a source (admin): 201 when created, 200 when replaced.
#[utoipa::path(put, path = "/v1/sources/{source}", tag = "intake",
    params(("source" = String, Path), ("force" = Option<bool>, Query, description = "drop a destination even with undelivered deliveries")), request_body = Object,
    responses(
        (status = 201, description = "created", body = SourceDoc),
        (status = 200, description = "replaced", body = SourceDoc)))]
pub async fn put_source(
    Authed { st, caller }: Authed,
    Path(name): Path<String>,
    RawQuery(q): RawQuery,
    JsonBody(body): JsonBody,
) -> ApiResult<Response> {
    let name = source_name(&name)?;
    let force = force_of(q)?;
    object_body(&body)?;
    let input = SourceInput::parse(&name, &body)?;
    let (created, l) = write(&st, &caller, input, true, force).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(l.read_shape())).into_response())
}

/// A source document is a JSON object: anything else is 400 `invalid_json`, as for every
/// other body of the API.
fn object_body(body: &serde_json::Value) -> ApiResult<()> {
    if body.is_object() {
        Ok(())
    } else {
        Err(ApiError::InvalidJson(
            "the request body must be a JSON object".into(),
        ))
    }
}

/// Change a source (admin): the body merges into it recursively.
#[utoipa::path(patch, path = "/v1/sources/{source}", tag = "intake",
    params(("source" = String, Path), ("force" = Option<bool>, Query, description = "drop a destination even with undelivered deliveries")), request_body = Object,
    responses((status = 200, description = "the source after the change", body = SourceDoc)))]
pub async fn patch_source(
    Authed { st, caller }: Authed,
    Path(name): Path<String>,
    RawQuery(q): RawQuery,
    JsonBody(body): JsonBody,
) -> ApiResult<Json<SourceRead>> {
    let (_, l) = visible(&st, &caller, &name, Role::Admin).await?;
    let force = force_of(q)?;
    object_body(&body)?;
    let input = l.source.patch(&body)?;
    let (_, l) = write(&st, &caller, input, false, force).await?;
    Ok(Json(l.read_shape()))
}

/// Read a source (operator).
#[utoipa::path(get, path = "/v1/sources/{source}", tag = "intake",
    params(("source" = String, Path)),
    responses((status = 200, description = "the source", body = SourceDoc)))]
pub async fn get_source(
    Authed { st, caller }: Authed,
    Path(name): Path<String>,
) -> ApiResult<Json<SourceRead>> {
    let (_, l) = visible(&st, &caller, &name, Role::Operator).await?;
    Ok(Json(l.read_shape()))
}

/// Delete a source (admin); refused (409) while some of its events are not delivered,
/// unless `?force=true` (their records stay in the namespace; nothing more is forwarded).
#[utoipa::path(delete, path = "/v1/sources/{source}", tag = "intake",
    params(("source" = String, Path), ("force" = Option<bool>, Query, description = "delete even with undelivered events")),
    responses((status = 204, description = "deleted")))]
pub async fn delete_source(
    Authed { st, caller }: Authed,
    Path(name): Path<String>,
    RawQuery(q): RawQuery,
) -> ApiResult<Response> {
    let name = source_name(&name)?;
    let force = force_of(q)?;
    visible(&st, &caller, &name, Role::Admin).await?;
    let deleted = st.ledger.store().source_delete(&name, force).await;
    st.sources.forget(&name);
    match deleted? {
        SourceDelete::NotFound => Err(ApiError::NotFound(format!("no source named {name:?}"))),
        SourceDelete::Undelivered(n) => Err(ApiError::InvalidTransition(format!(
            "{n} events of this source are not delivered yet; delete with ?force=true to \
             keep their records and forward nothing more"
        ))),
        SourceDelete::Deleted => {
            tracing::info!(source = %name, force, "source deleted");
            Ok(StatusCode::NO_CONTENT.into_response())
        }
    }
}

fn ts(t: Timestamp) -> String {
    t.to_rfc3339()
}

fn summary(row: &idem::IntakeEventRow) -> EventSummaryDoc {
    let attempts: Vec<Value> = serde_json::from_str(&row.attempts).unwrap_or_default();
    let last_error = attempts
        .last()
        .and_then(|a| a.get("error"))
        .filter(|e| !e.is_null())
        .cloned();
    EventSummaryDoc {
        key: row.key.clone(),
        event_id: row.event_id.clone(),
        state: row.state.map(|s| s.as_str().to_owned()),
        attempts: attempts.len(),
        received_at: ts(row.received_at),
        delivered_at: row.delivered_at.map(ts),
        last_error,
        destinations: row.destination_names(),
    }
}

pub fn cursor_of(row: &idem::IntakeEventRow) -> String {
    hex_encode(format!("{}\n{}", row.received_at.0, row.key).as_bytes())
}

fn hex_encode(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub fn parse_cursor(s: &str) -> Option<(i64, String)> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect();
    let text = String::from_utf8(bytes?).ok()?;
    let (t, k) = text.split_once('\n')?;
    Key::try_from(k).ok()?;
    Some((t.parse().ok()?, k.to_owned()))
}

/// A source's events, newest first (operator).
#[utoipa::path(get, path = "/v1/sources/{source}/events", tag = "intake",
    params(("source" = String, Path),
        ("state" = Option<String>, Query, description = "only events whose record is in this state (empty: all)"),
        ("limit" = Option<u32>, Query, description = "1 to 1000, default 100"),
        ("cursor" = Option<String>, Query, description = "next_cursor of the previous page")),
    responses((status = 200, description = "one page, newest received_at first", body = EventList)))]
pub async fn list_events(
    Authed { st, caller }: Authed,
    Path(name): Path<String>,
    RawQuery(q): RawQuery,
) -> ApiResult<Json<EventList>> {
    let (name, _) = visible(&st, &caller, &name, Role::Operator).await?;
    let mut query = IntakeQuery {
        source: name,
        limit: 100,
        ..IntakeQuery::default()
    };
    for (k, v) in query_pairs(q.as_deref()) {
        match k.as_ref() {
            "state" => query.state = Some(query_state(&v)?),
            "limit" => query.limit = query_limit(&v)?,
            "cursor" => {
                query.after = Some(parse_cursor(&v).ok_or_else(|| {
                    ApiError::invalid_field("cursor", "not a cursor this server returned")
                })?)
            }
            _ => {}
        }
    }
    let limit = query.limit;
    query.limit = limit + 1;
    let mut rows = st.ledger.store().intake_list(&query).await?;
    let next_cursor = if rows.len() > limit {
        rows.truncate(limit);
        rows.last().map(cursor_of)
    } else {
        None
    };
    let mut items = Vec::with_capacity(rows.len());
    for row in &rows {
        let mut item = summary(row);
        if item.last_error.is_none() {
            item.last_error = shown_error(&st, row, item.attempts).await?;
        }
        items.push(item);
    }
    Ok(Json(EventList { items, next_cursor }))
}

/// The `last_error` of a listed event whose own attempts name none: a fan-out event shown in
/// a failed state (its record completed at once) shows the error of the first delivery in
/// that state; a held event in review, its record's. Others show none. Read only for such
/// items (dead letters, mostly).
async fn shown_error(
    st: &AppState,
    row: &idem::IntakeEventRow,
    attempts: usize,
) -> ApiResult<Option<Value>> {
    let Some(state) = row.state else {
        return Ok(None);
    };
    let failed = matches!(
        state,
        RecState::NeedsReview | RecState::FailedPermanent | RecState::FailedRetryable
    );
    let fan_out = || {
        row.destination_names()
            .iter()
            .any(|n| delivery_key(&row.key, n) != row.key)
    };
    if failed && row.event_key.is_none() && fan_out() {
        let Ok(ns) = Namespace::try_from(row.namespace.as_str()) else {
            return Ok(None);
        };
        let reads = destination_reads(st, &ns, row).await?;
        let Some(d) = reads.iter().find(|d| d.state == state.as_str()) else {
            return Ok(None);
        };
        let last = d
            .attempts
            .as_array()
            .and_then(|a| a.last())
            .and_then(|a| a.get("error"))
            .filter(|e| !e.is_null())
            .cloned();
        return match last {
            Some(e) => Ok(Some(e)),
            // A held delivery has made no attempt: its record says why it is held.
            None => record_error_at(st, &ns, &d.key).await,
        };
    }
    if state == RecState::NeedsReview && attempts == 0 {
        return record_error(st, row).await;
    }
    Ok(None)
}

/// The `last_error` of the record under `row`'s key, as `{category, message}` (a held event
/// has one from the moment it is held, and no attempt).
async fn record_error(st: &AppState, row: &idem::IntakeEventRow) -> ApiResult<Option<Value>> {
    let Ok(ns) = Namespace::try_from(row.namespace.as_str()) else {
        return Ok(None);
    };
    record_error_at(st, &ns, &row.key).await
}

/// The `last_error` of the record under `key`, as `{category, message}`.
async fn record_error_at(st: &AppState, ns: &Namespace, key: &str) -> ApiResult<Option<Value>> {
    let Ok(key) = Key::try_from(key) else {
        return Ok(None);
    };
    let stored = st.ledger.store().get(ns, &key).await?;
    Ok(stored
        .and_then(|r| r.record.last_error)
        .map(|e| json!({"category": e.category, "message": e.message})))
}

fn event_key(s: &str) -> ApiResult<Key> {
    Key::try_from(s).map_err(|e| ApiError::InvalidKey(e.to_string()))
}

/// One event with its stored body, its record and its attempts (operator).
#[utoipa::path(get, path = "/v1/sources/{source}/events/{key}", tag = "intake",
    params(("source" = String, Path), ("key" = String, Path)),
    responses((status = 200, description = "`{event: {key, event_id, received_at, content_type, headers, body | body_base64}, record, attempts}`", body = Object)))]
pub async fn get_event(
    Authed { st, caller }: Authed,
    Path((name, key)): Path<(String, String)>,
) -> ApiResult<Json<EventDoc>> {
    let (name, l) = visible(&st, &caller, &name, Role::Operator).await?;
    let key = event_key(&key)?;
    let ns = source_ns(&l.source)?;
    let row = st
        .ledger
        .store()
        .intake_event(ns.as_str(), key.as_str())
        .await?
        // A delivery's row is no event (its event's read shows it).
        .filter(|r| r.source == name && r.event_key.is_none())
        .ok_or_else(|| ApiError::NotFound("no such event for this source".into()))?;
    let stored = st.ledger.store().get(&ns, &key).await?;
    let destinations = destination_reads(&st, &ns, &row).await?;
    let body = match row.body {
        None => StoredBody::Text { body: None },
        Some(b) => match String::from_utf8(b) {
            Ok(s) => StoredBody::Text { body: Some(s) },
            Err(e) => StoredBody::Base64 {
                body_base64: base64::engine::general_purpose::STANDARD.encode(e.as_bytes()),
            },
        },
    };
    let (record, events) = stored.map(|r| (r.record, r.events)).unzip();
    Ok(Json(EventDoc {
        event: StoredEvent {
            key: row.key,
            event_id: row.event_id,
            received_at: ts(row.received_at),
            content_type: row.content_type,
            headers: serde_json::from_str(&row.headers).unwrap_or_else(|_| json!({})),
            body,
        },
        record,
        events,
        attempts: serde_json::from_str(&row.attempts).unwrap_or_else(|_| json!([])),
        destinations,
    }))
}

/// One event as `GET …/events/{key}` answers it.
#[derive(Serialize)]
pub struct EventDoc {
    pub event: StoredEvent,
    /// The event's record (`null` while it is not made yet).
    pub record: Option<idem::Record>,
    /// The record's history.
    pub events: Option<Vec<idem::Event>>,
    /// Every forwarding attempt of the event's own key.
    pub attempts: Value,
    pub destinations: Vec<DeliveryRead>,
}

/// The event as it was received.
#[derive(Serialize)]
pub struct StoredEvent {
    pub key: String,
    pub event_id: Option<String>,
    pub received_at: String,
    pub content_type: Option<String>,
    /// Lowercase header names to values.
    pub headers: Value,
    #[serde(flatten)]
    pub body: StoredBody,
}

/// The stored body: text as `body` (`null` once retention dropped it), other bytes as
/// `body_base64`.
#[derive(Serialize)]
#[serde(untagged)]
pub enum StoredBody {
    Text { body: Option<String> },
    Base64 { body_base64: String },
}

/// One delivery of an event as reads show it.
#[derive(Serialize)]
pub struct DeliveryRead {
    pub name: String,
    pub key: String,
    /// The delivery record's state (`prepared` while its record is not made yet).
    pub state: String,
    pub attempts: Value,
    pub delivered_at: Option<String>,
    /// Set when the delivery's own key was another record's: that key (the delivery is held
    /// under `key`, in `needs_review`, until an operator redelivers it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub collides_with: Option<String>,
}

/// Each destination of the event `row`: its key, state and attempts. A named destination's
/// delivery is the row under its key that names this event and destination, or — when that
/// key was another record's — the one under its held key ([`held_delivery_key`]); a key
/// that holds something else never lends its state to this delivery (while neither row is
/// there, the delivery waits for its first pass: `prepared`).
pub async fn destination_reads(
    st: &AppState,
    ns: &Namespace,
    row: &idem::IntakeEventRow,
) -> ApiResult<Vec<DeliveryRead>> {
    let mut out = vec![];
    let store = st.ledger.store();
    for name in row.destination_names() {
        let own = delivery_key(&row.key, &name);
        let mut key = own.clone();
        let ours = |d: &idem::IntakeEventRow| {
            d.event_key.as_deref() == Some(row.key.as_str())
                && d.destination.as_deref() == Some(name.as_str())
        };
        let d = if key == row.key {
            Some(row.clone())
        } else {
            let held = held_delivery_key(&row.key, &name);
            match store.intake_event(ns.as_str(), &held).await?.filter(ours) {
                Some(d) => {
                    key = held;
                    Some(d)
                }
                None => store.intake_event(ns.as_str(), &key).await?.filter(ours),
            }
        };
        let (state, attempts, delivered_at) = match &d {
            Some(d) => (
                d.state.unwrap_or(RecState::Prepared),
                serde_json::from_str(&d.attempts).unwrap_or_else(|_| json!([])),
                d.delivered_at.map(ts),
            ),
            None => (RecState::Prepared, json!([]), None),
        };
        out.push(DeliveryRead {
            name,
            collides_with: (key != own).then_some(own),
            key,
            state: state.as_str().to_owned(),
            attempts,
            delivered_at,
        });
    }
    Ok(out)
}

/// Redelivers one delivery (the event's own key for `default`, else the destination's
/// delivery key): `Op::Redeliver` on its record, then a new forward item.
async fn redeliver(
    st: &AppState,
    l: &LoadedSource,
    key: &Key,
    destination: &str,
    note: &str,
    actor: Option<String>,
) -> ApiResult<idem::Record> {
    if l.source.destination(destination).is_none() {
        return Err(ApiError::InvalidTransition(format!(
            "the source has no destination {destination} any more: nothing to deliver to"
        )));
    }
    let ns = source_ns(&l.source)?;
    let ex = st
        .ledger
        .execute(
            &ns,
            key,
            Op::Redeliver {
                note: note.to_owned(),
            },
            actor,
        )
        .await?;
    let rec = match ex.reply {
        Ok(Reply::Record(r)) => r,
        Ok(_) => return Err(ApiError::internal("redeliver: unexpected reply")),
        Err(e) => return Err(e.into()),
    };
    let store = st.ledger.store();
    store
        .intake_update(IntakeUpdate {
            namespace: ns.as_str().to_owned(),
            key: key.as_str().to_owned(),
            attempt: None,
            delivered: Delivered::Clear,
        })
        .await?;
    let now = st.ledger.now();
    let item = ForwardItem::item(
        &l.source.name,
        destination,
        ns.as_str(),
        key.as_str(),
        format!("r{}", rec.version),
        now,
        crate::telemetry::operation_trace(),
    );
    store.outbox_enqueue(item, now).await?;
    tracing::info!(source = %l.source.name, key = %idem::mask_key(key.as_str()), "redeliver scheduled");
    Ok(rec)
}

/// Schedules one event's delivery again now, with a fresh budget (operator).
#[utoipa::path(post, path = "/v1/sources/{source}/events/{key}/redeliver", tag = "intake",
    params(("source" = String, Path), ("key" = String, Path)), request_body = RedeliverBody,
    responses((status = 202, description = "scheduled", body = RedeliverResponse)))]
pub async fn redeliver_one(
    Authed { st, caller }: Authed,
    Path((name, key)): Path<(String, String)>,
    JsonBody(body): JsonBody,
) -> ApiResult<Response> {
    let (name, l) = visible(&st, &caller, &name, Role::Operator).await?;
    let key = event_key(&key)?;
    let body: RedeliverBody = read_body(body)?;
    let note = body.note.into_string();
    let wanted = body.destination.map(DestinationName::into_string);
    let ns = source_ns(&l.source)?;
    let row = st
        .ledger
        .store()
        .intake_event(ns.as_str(), key.as_str())
        .await?
        .filter(|r| r.source == name && r.event_key.is_none())
        .ok_or_else(|| ApiError::NotFound("no such event for this source".into()))?;
    let reads = destination_reads(&st, &ns, &row).await?;
    let targets: Vec<&DeliveryRead> = match &wanted {
        Some(w) => vec![reads.iter().find(|d| &d.name == w).ok_or_else(|| {
            ApiError::invalid_field("destination", "is not a destination of this event")
        })?],
        None if reads.len() <= 1 => reads.iter().collect(),
        None => reads
            .iter()
            .filter(|d| d.state != RecState::Completed.as_str())
            .collect(),
    };
    if targets.is_empty() {
        return Err(ApiError::InvalidTransition(if reads.is_empty() {
            "the event matched no destination: nothing to redeliver".into()
        } else {
            "every destination of this event is completed: name one with `destination` to \
             replay it"
                .into()
        }));
    }
    let mut scheduled = vec![];
    let mut refused = None;
    for d in targets {
        let dkey = event_key(&d.key)?;
        match redeliver(&st, &l, &dkey, &d.name, &note, caller.actor()).await {
            Ok(rec) => scheduled.push(ScheduledDelivery {
                name: d.name.clone(),
                key: d.key.clone(),
                state: rec.state.as_str().to_owned(),
            }),
            // A named destination whose record is not made yet is waiting for its first
            // delivery already.
            Err(ApiError::NotFound(_)) if d.key != row.key => scheduled.push(ScheduledDelivery {
                name: d.name.clone(),
                key: d.key.clone(),
                state: RecState::Prepared.as_str().to_owned(),
            }),
            Err(e) => {
                refused.get_or_insert(e);
            }
        }
    }
    if let (Some(e), true) = (refused, scheduled.is_empty()) {
        return Err(e);
    }
    Ok((
        StatusCode::ACCEPTED,
        Json(RedeliverResponse {
            key: key.as_str().to_owned(),
            state: scheduled
                .first()
                .map_or_else(|| "prepared".to_owned(), |d| d.state.clone()),
            destinations: scheduled,
        }),
    )
        .into_response())
}

/// Schedules many events again (operator): by state (default `needs_review`) and
/// `received_at` bounds.
#[utoipa::path(post, path = "/v1/sources/{source}/redeliver", tag = "intake",
    params(("source" = String, Path)), request_body = BulkRedeliverBody,
    responses((status = 200, description = "how many were scheduled", body = Scheduled)))]
pub async fn redeliver_many(
    Authed { st, caller }: Authed,
    Path(name): Path<String>,
    JsonBody(body): JsonBody,
) -> ApiResult<Json<Scheduled>> {
    let (name, l) = visible(&st, &caller, &name, Role::Operator).await?;
    let body: BulkRedeliverBody = read_body(body)?;
    let note = body.note.into_string();
    let mut query = IntakeQuery {
        source: name,
        state: Some(body.state.map_or(RecState::NeedsReview, |s| s.0)),
        limit: 500,
        since: body.since.map(|t| t.0),
        until: body.until.map(|t| t.0),
        deliveries: true,
        ..IntakeQuery::default()
    };
    let mut scheduled = 0;
    loop {
        let rows = st.ledger.store().intake_list(&query).await?;
        let last = rows.last().map(|r| (r.received_at.0, r.key.clone()));
        for row in &rows {
            let Ok(key) = Key::try_from(row.key.as_str()) else {
                continue;
            };
            // An event row delivers under its own key only to `default`; its other
            // destinations are rows of their own in this list.
            if row.event_key.is_none() && !row.destination_names().iter().any(|n| n == DEFAULT) {
                continue;
            }
            let dest = row.destination_name();
            match redeliver(&st, &l, &key, dest, &note, caller.actor()).await {
                Ok(_) => scheduled += 1,
                // Moved on since it was listed (in flight, delivered): left as it is.
                Err(ApiError::InvalidTransition(_)) => {}
                Err(e) => return Err(e),
            }
        }
        match last {
            Some(after) if rows.len() >= query.limit => query.after = Some(after),
            _ => break,
        }
    }
    Ok(Json(Scheduled { scheduled }))
}
