//! A namespace: its policy, pause flag and counts; the policy patch; the stop control.
//!
//! The policy patch is validated by `idem::policy` (a recursive merge whose rules depend on
//! the current policy), so [`PolicyPatchBody`] is the schema of what that merge accepts and
//! the handler passes the object on as is. Invariant: a patch is validated against the
//! current policy before anything is written, so the answer names the field whatever the
//! backend does.

use axum::extract::State;
use axum::routing::{get, patch, post};
use axum::Json;
use idem::{Namespace, NamespaceChange, NamespaceInfo, NamespaceStats, Role};
use serde::Serialize;
use serde_json::Value;
use utoipa::{OpenApi, ToSchema};

use super::shared::{Acting, Authed};
use crate::api::{LeaseExpiryDoc, NoteBody};
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::input::{JsonBody, NsPath};
use crate::route::{r, Route};
use crate::state::AppState;

/// The routes of this file.
pub fn routes() -> Vec<Route> {
    use Role::{Operator, Worker};
    vec![
        r(
            "get",
            "/v1/namespaces",
            Some(Operator),
            get(list_namespaces),
        ),
        r(
            "get",
            "/v1/namespaces/{ns}",
            Some(Worker),
            get(get_namespace),
        ),
        r(
            "patch",
            "/v1/namespaces/{ns}",
            Some(Operator),
            patch(patch_namespace),
        ),
        r(
            "post",
            "/v1/namespaces/{ns}/pause",
            Some(Operator),
            post(pause),
        ),
        r(
            "post",
            "/v1/namespaces/{ns}/resume",
            Some(Operator),
            post(resume),
        ),
    ]
}

/// The OpenAPI of this file.
#[derive(OpenApi)]
#[openapi(
    paths(list_namespaces, get_namespace, patch_namespace, pause, resume),
    components(schemas(
        NamespaceList,
        NamespaceItem,
        PolicyDoc,
        RetryPolicyDoc,
        PolicyPatchBody,
        RetryPatchBody,
        EgressDoc,
        EgressPatchBody,
        NamespaceResponse,
        NamespaceStatsDoc,
        CostTotalsDoc,
    ))
)]
pub struct Doc;

/// The namespace policy as reads show it.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct PolicyDoc {
    lease_ms: i64,
    lease_expiry: LeaseExpiryDoc,
    retention_ms: i64,
    audit_retention_ms: i64,
    stuck_after_ms: i64,
    retry: RetryPolicyDoc,
    daily_limit: Option<u64>,
    alert_url: Option<String>,
    /// Whether an `alert_secret` is set (the secret itself is write-only, never shown).
    #[schema(read_only)]
    alert_secret_set: bool,
    destination_idempotent: bool,
    egress: EgressDoc,
}

/// Where effects may send requests (see `EFFECTS.md`).
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct EgressDoc {
    /// Host names (exact or `*.suffix`), `host:port`, IP addresses, CIDR blocks. Non-empty:
    /// only listed destinations pass.
    allow: Vec<String>,
    /// Opens the private ranges (RFC 1918, fc00::/7, CGNAT); never loopback, link-local or
    /// the metadata address.
    allow_private: bool,
}

/// The egress fields of a policy patch.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct EgressPatchBody {
    /// Replaces the list; at most 256 entries.
    #[schema(nullable = false, max_items = 256)]
    allow: Option<Vec<String>>,
    #[schema(nullable = false)]
    allow_private: Option<bool>,
}

#[derive(ToSchema)]
#[allow(dead_code)]
pub struct RetryPolicyDoc {
    max_attempts: u32,
    base_ms: i64,
    max_ms: i64,
    window_ms: i64,
}

/// `PATCH /v1/namespaces/{ns}`: the policy fields to change, merged recursively into the
/// current policy (`{"retry": {"max_attempts": 3}}` keeps the other retry fields). Only
/// `daily_limit` and `alert_url` may be `null` (to clear them). After the merge
/// `audit_retention_ms` must be at least `retention_ms` and `retry.max_ms` at least
/// `retry.base_ms`, else 422 `invalid_field`.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct PolicyPatchBody {
    /// 1 ms to 7 days.
    #[schema(nullable = false, minimum = 1, maximum = 604_800_000)]
    lease_ms: Option<i64>,
    #[schema(nullable = false)]
    lease_expiry: Option<LeaseExpiryDoc>,
    /// 0 to 10 years (316224000000 ms).
    #[schema(nullable = false, minimum = 0, maximum = 316_224_000_000i64)]
    retention_ms: Option<i64>,
    /// 0 to 10 years, at least `retention_ms`.
    #[schema(nullable = false, minimum = 0, maximum = 316_224_000_000i64)]
    audit_retention_ms: Option<i64>,
    /// 1 ms to 10 years.
    #[schema(nullable = false, minimum = 1, maximum = 316_224_000_000i64)]
    stuck_after_ms: Option<i64>,
    #[schema(nullable = false)]
    retry: Option<RetryPatchBody>,
    /// First-time acquisitions per UTC day; `null` for no ceiling.
    #[schema(minimum = 0, maximum = 9_223_372_036_854_775_807i64)]
    daily_limit: Option<i64>,
    /// Absolute http(s) URL (the scheme in any case) with a host and no user info, at most
    /// 2048 bytes; `null` for no alerts.
    #[schema(
        max_length = 2048,
        pattern = "^[Hh][Tt][Tt][Pp][Ss]?://[^/?#\\\\@\\s\\x00-\\x1F\\x7F-\\x9F]+(?:[/?#\\\\][^\\s\\x00-\\x1F\\x7F-\\x9F]*)?$"
    )]
    alert_url: Option<String>,
    /// Write-only: `whsec_` + base64 of 24-64 random bytes, or `null` to remove it. With a
    /// secret every alert is signed the Standard Webhooks way. Never shown on reads (they
    /// show `alert_secret_set`, which a PATCH may not name). The pattern is
    /// `idem::webhook::SECRET_PATTERN` (a test keeps them equal).
    #[schema(
        write_only,
        pattern = "^whsec_(?:(?:[A-Za-z0-9+/]{4}){8,20}(?:[A-Za-z0-9+/]{2}={0,2}|[A-Za-z0-9+/]{3}=?)?|(?:[A-Za-z0-9+/]{4}){21}(?:[A-Za-z0-9+/]{2}={0,2})?)$"
    )]
    alert_secret: Option<String>,
    #[schema(nullable = false)]
    destination_idempotent: Option<bool>,
    #[schema(nullable = false)]
    egress: Option<EgressPatchBody>,
}

/// The retry budget fields of a policy patch.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct RetryPatchBody {
    /// 1 to 1000 (the first attempt included).
    #[schema(nullable = false, minimum = 1, maximum = 1000)]
    max_attempts: Option<u32>,
    /// 0 to 10 years.
    #[schema(nullable = false, minimum = 0, maximum = 316_224_000_000i64)]
    base_ms: Option<i64>,
    /// 0 to 10 years, at least `base_ms`.
    #[schema(nullable = false, minimum = 0, maximum = 316_224_000_000i64)]
    max_ms: Option<i64>,
    /// 0 to 10 years.
    #[schema(nullable = false, minimum = 0, maximum = 316_224_000_000i64)]
    window_ms: Option<i64>,
}

impl PolicyPatchBody {
    pub const FIELDS: &'static [&'static str] = &[
        "lease_ms",
        "lease_expiry",
        "retention_ms",
        "audit_retention_ms",
        "stuck_after_ms",
        "retry",
        "daily_limit",
        "alert_url",
        "alert_secret",
        "destination_idempotent",
        "egress",
    ];
}

/// `GET /v1/namespaces/{ns}`.
#[derive(Serialize, ToSchema)]
pub struct NamespaceResponse {
    pub namespace: String,
    pub paused: bool,
    #[schema(value_type = PolicyDoc)]
    pub policy: Value,
    /// Every state with its count, zeros included.
    #[schema(value_type = Object)]
    pub counts: Value,
    /// Acquisitions and cost over the last 24 hours.
    #[schema(value_type = NamespaceStatsDoc)]
    pub stats: NamespaceStats,
}

/// A namespace's counters over a sliding 24 hours (hourly buckets: the current hour and the
/// 23 before it).
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct NamespaceStatsDoc {
    /// Fresh acquisitions (attempt 1).
    acquired_first: u64,
    /// Resumed acquisitions (retries, reclaims, resumes after approval).
    acquired_retry: u64,
    cost: CostTotalsDoc,
}

/// What attempts reported spending (`cost` on complete, fail, effect); `retry_*` is the
/// part spent by attempts after the first. All zeros when nothing was reported.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct CostTotalsDoc {
    tokens: u64,
    usd: f64,
    retry_tokens: u64,
    retry_usd: f64,
}

/// The answer of every namespace endpoint: the namespace and its 24-hour stats.
async fn ns_response(st: &AppState, info: NamespaceInfo) -> ApiResult<Json<NamespaceResponse>> {
    let ns = Namespace::try_from(info.namespace.as_str())
        .map_err(|e| ApiError::internal(format!("namespace: {e}")))?;
    let stats = st
        .ledger
        .store()
        .namespace_stats(&ns, st.ledger.now())
        .await?;
    Ok(Json(NamespaceResponse {
        namespace: info.namespace,
        paused: info.paused,
        policy: info.policy.to_json(),
        counts: info.counts.to_json(),
        stats,
    }))
}

/// One namespace of `GET /v1/namespaces`.
#[derive(Serialize, ToSchema)]
pub struct NamespaceItem {
    pub namespace: String,
    pub paused: bool,
    /// Every state with its count, zeros included.
    #[schema(value_type = Object)]
    pub counts: Value,
}

/// `GET /v1/namespaces`.
#[derive(Serialize, ToSchema)]
pub struct NamespaceList {
    pub items: Vec<NamespaceItem>,
}

/// The namespaces `caller` may see, in name order: every namespace with records or a stored
/// policy (a token of one namespace: that one, used or not).
pub async fn visible_namespaces(st: &AppState, caller: &Caller) -> ApiResult<Vec<NamespaceInfo>> {
    let names = match caller {
        Caller::Token(t) if t.scope != "*" => vec![t.scope.clone()],
        _ => st.ledger.store().namespace_names().await?,
    };
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let ns = Namespace::try_from(name.as_str())
            .map_err(|e| ApiError::internal(format!("stored namespace {name:?}: {e}")))?;
        out.push(st.ledger.store().namespace(&ns).await?);
    }
    Ok(out)
}

/// The namespaces the token may see, with pause flag and counts (operator).
#[utoipa::path(get, path = "/v1/namespaces", tag = "namespaces",
    responses((status = 200, description = "the namespaces, in name order", body = NamespaceList)))]
pub async fn list_namespaces(Authed { st, caller }: Authed) -> ApiResult<Json<NamespaceList>> {
    let items = visible_namespaces(&st, &caller)
        .await?
        .into_iter()
        .map(|i| NamespaceItem {
            namespace: i.namespace,
            paused: i.paused,
            counts: i.counts.to_json(),
        })
        .collect();
    Ok(Json(NamespaceList { items }))
}

/// Policy, pause flag and counts (defaults for a never-used namespace).
#[utoipa::path(get, path = "/v1/namespaces/{ns}", tag = "namespaces",
    params(("ns" = String, Path)),
    responses((status = 200, description = "the namespace (defaults if never used)", body = NamespaceResponse)))]
pub async fn get_namespace(
    State(st): State<AppState>,
    NsPath(ns): NsPath,
) -> ApiResult<Json<NamespaceResponse>> {
    let info = st.ledger.store().namespace(&ns).await?;
    ns_response(&st, info).await
}

/// Merge policy fields (recursively; unknown fields are refused) (operator).
#[utoipa::path(patch, path = "/v1/namespaces/{ns}", tag = "namespaces",
    params(("ns" = String, Path)), request_body = PolicyPatchBody,
    responses((status = 200, description = "the namespace after the change", body = NamespaceResponse)))]
pub async fn patch_namespace(
    Authed { st, caller }: Authed,
    NsPath(ns): NsPath,
    JsonBody(body): JsonBody,
) -> ApiResult<Json<NamespaceResponse>> {
    if !body.is_object() {
        return Err(ApiError::InvalidJson(
            "the request body must be a JSON object of policy fields".into(),
        ));
    }
    // Validate before writing so the answer names the field whatever the backend does.
    let current = st.ledger.store().namespace(&ns).await?;
    current.policy.patch(&body)?;
    let info = st
        .ledger
        .store()
        .update_namespace(&ns, NamespaceChange::Patch(body), st.ledger.now())
        .await?;
    st.policies.forget(&ns);
    tracing::info!(namespace = %ns, actor = caller.actor(), "namespace policy changed");
    ns_response(&st, info).await
}

/// Pause or resume, logged with who did it and their note.
async fn switch(
    req: Acting<NsPath, NoteBody>,
    change: NamespaceChange,
) -> ApiResult<Json<NamespaceResponse>> {
    let Acting {
        st,
        caller,
        path: NsPath(ns),
        body,
    } = req;
    let note = body.into_note();
    let what = if matches!(change, NamespaceChange::Pause) {
        "paused"
    } else {
        "resumed"
    };
    let info = st
        .ledger
        .store()
        .update_namespace(&ns, change, st.ledger.now())
        .await?;
    tracing::warn!(namespace = %ns, actor = caller.actor(), note, "namespace {what}");
    ns_response(&st, info).await
}

/// Stop control: claims get 503 `paused`; in-flight work can still land (operator).
#[utoipa::path(post, path = "/v1/namespaces/{ns}/pause", tag = "namespaces",
    params(("ns" = String, Path)), request_body = NoteBody,
    responses((status = 200, description = "the namespace after the change", body = NamespaceResponse)))]
pub async fn pause(req: Acting<NsPath, NoteBody>) -> ApiResult<Json<NamespaceResponse>> {
    switch(req, NamespaceChange::Pause).await
}

/// Lift the stop control (operator).
#[utoipa::path(post, path = "/v1/namespaces/{ns}/resume", tag = "namespaces",
    params(("ns" = String, Path)), request_body = NoteBody,
    responses((status = 200, description = "the namespace after the change", body = NamespaceResponse)))]
pub async fn resume(req: Acting<NsPath, NoteBody>) -> ApiResult<Json<NamespaceResponse>> {
    switch(req, NamespaceChange::Resume).await
}
