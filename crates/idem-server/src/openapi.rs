//! The OpenAPI document, generated from the handlers' `#[utoipa::path]` annotations and the
//! shapes in `api`. A test checks that every route of `routes::routes()` is in it and that
//! nothing else is.

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::api::*;
use crate::audit::{AuditBody, AuditFindingDoc, AuditResponse};
use crate::error::Problem;
use crate::handlers as h;

#[derive(OpenApi)]
#[openapi(
    info(title = "idem", description = "Idempotency gate and side-effect ledger. \
        Claim before every irreversible side effect, report after it."),
    paths(
        h::claim, h::prepare, h::heartbeat, h::complete, h::fail, h::get_record, h::list,
        h::resolve, h::approve, h::reject, h::get_namespace, h::patch_namespace, h::pause,
        h::resume, h::derive, h::create_token, h::healthz, h::readyz, h::metrics_text,
        h::openapi_json, crate::audit::audit,
    ),
    components(schemas(
        Problem, RecordDoc, LastErrorDoc, EventDoc, ClaimBody, ClaimResponse, PrepareBody,
        HeartbeatBody, CompleteBody, FailBody, FailErrorBody, StateResponse, FailResponse,
        RetryDoc, RecordWithEventsDoc, ListResponse, ResolveBody, NoteBody, PolicyDoc,
        RetryPolicyDoc, NamespaceResponse, DeriveBody, DeriveResponse, TokenBody, TokenResponse,
        StatusResponse, AuditBody, AuditFindingDoc, AuditResponse,
    )),
    modifiers(&Bearer),
    security(("bearer" = [])),
)]
pub struct ApiDoc;

struct Bearer;

impl Modify for Bearer {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The generated document.
pub fn doc() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}
