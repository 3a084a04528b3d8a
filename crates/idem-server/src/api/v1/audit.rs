//! `POST /v1/audit` (worker): the n8n workflow audit of `idem-audit` over HTTP. The body is
//! one exported workflow or an array of them; the answer is `{findings: [...]}` with the
//! same findings `idem audit --format json` prints (without `file`).
//!
//! Invariant: the handler only translates HTTP — malformed JSON is `invalid_json` (400), a
//! document that is not an n8n workflow is `invalid_field` (422) naming where it stopped
//! making sense; the body limit is the server's, as for every other endpoint. One leading
//! UTF-8 byte order mark is skipped, as `idem audit FILE` skips it (editors on Windows save
//! exports with one). Nothing of the body is logged (workflows carry URLs, names and
//! sometimes secrets in parameters).

use axum::routing::post;
use axum::Json;
use idem::Role;
use serde::Serialize;
use serde_json::Value;
use utoipa::{OpenApi, ToSchema};

use crate::error::{ApiError, ApiResult};
use crate::input::{parse_json, RawBody};
use crate::route::{r, Route};

/// The routes of this file.
pub fn routes() -> Vec<Route> {
    vec![r("post", "/v1/audit", Some(Role::Worker), post(audit))]
}

/// The OpenAPI of this file.
#[derive(OpenApi)]
#[openapi(
    paths(audit),
    components(schemas(AuditBody, AuditFindingDoc, AuditResponse))
)]
pub struct Doc;

/// An n8n workflow as exported (*Download* or `n8n export:workflow`); other members
/// (`pinData`, `meta`, `tags`, …) are ignored. The body may also be an array of these.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct AuditBody {
    name: Option<String>,
    id: Option<String>,
    /// Nodes: `{name, type, typeVersion, parameters, …}`.
    nodes: Vec<Value>,
    /// `{"Node name": {"main": [[{node, type, index}], …]}}`.
    connections: Option<Value>,
    /// `errorWorkflow` is read.
    settings: Option<Value>,
}

/// One finding of the audit.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct AuditFindingDoc {
    /// IDEM001 … IDEM017 (see docs/audit.md).
    rule: String,
    /// error | warning | info
    severity: String,
    /// The workflow's name.
    workflow: String,
    /// The workflow's id, when the export has one.
    workflow_id: Option<String>,
    /// The node's name; null for a workflow-wide finding.
    node: Option<String>,
    /// Names the node and says why, in one sentence.
    message: String,
    /// What to change on the canvas.
    fix: String,
}

#[derive(Serialize, ToSchema)]
pub struct AuditResponse {
    #[schema(value_type = Vec<AuditFindingDoc>)]
    pub findings: Vec<idem_audit::Finding>,
}

/// U+FEFF in UTF-8.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Audit exported n8n workflows for the mistakes that let duplicate side effects through.
#[utoipa::path(post, path = "/v1/audit", tag = "audit", request_body = AuditBody,
    responses((status = 200, description = "the findings (none: nothing to fix)", body = AuditResponse)))]
pub async fn audit(raw: RawBody) -> ApiResult<Json<AuditResponse>> {
    let bytes = raw.bytes.strip_prefix(BOM).unwrap_or(&raw.bytes);
    let body = parse_json(bytes)?;
    let findings =
        idem_audit::audit_value(&body, &idem_audit::Options::default()).map_err(|e| {
            let field = if e.path.is_empty() {
                "body".to_owned()
            } else {
                e.path.clone()
            };
            ApiError::invalid_field(field, format!("not an n8n workflow: {e}"))
        })?;
    Ok(Json(AuditResponse { findings }))
}
