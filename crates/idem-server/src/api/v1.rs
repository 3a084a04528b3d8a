//! The v1 resources, one file each. A file owns its request and answer shapes, its handlers,
//! its route lines (`routes()`) and its OpenAPI paths (`Doc`); this list is the only place
//! that names the files. A new endpoint is one handler plus one route line in its resource's
//! file (and its name in that file's `Doc`); a new resource is one file plus a line in each
//! list below.
//!
//! Two files are not resources: `shared` (running one ledger operation, the log line, the
//! common answers) and `claim_wait` (the claim-and-wait of every claiming path), which the
//! resources import and which import no resource. Shapes more than one resource (or the
//! action model) reads live below, in [`crate::api`]; the route type is [`crate::route`]. The
//! router and the OpenAPI document are assembled from the lists below in [`crate::routes`].

pub mod actions;
pub mod audit;
pub(crate) mod claim_wait;
pub mod derive;
pub mod effects;
pub mod keys;
pub mod namespaces;
pub mod operations;
pub mod review;
pub(crate) mod shared;
pub mod sources;
pub mod tokens;

use utoipa::OpenApi;

use crate::route::Route;

/// Every route of the resources, in the order the route table lists them.
pub fn routes() -> Vec<Route> {
    [
        keys::routes(),
        effects::routes(),
        review::routes(),
        namespaces::routes(),
        derive::routes(),
        audit::routes(),
        tokens::routes(),
        operations::routes(),
        sources::routes(),
        actions::routes(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The OpenAPI paths and schemas of every resource, merged by [`crate::openapi`].
pub fn docs() -> Vec<utoipa::openapi::OpenApi> {
    vec![
        keys::Doc::openapi(),
        effects::Doc::openapi(),
        review::Doc::openapi(),
        namespaces::Doc::openapi(),
        derive::Doc::openapi(),
        audit::Doc::openapi(),
        tokens::Doc::openapi(),
        operations::Doc::openapi(),
        sources::Doc::openapi(),
        actions::Doc::openapi(),
    ]
}
