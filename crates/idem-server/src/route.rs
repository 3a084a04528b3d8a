//! One line of the route table: (method, path, role, handler). Each resource file of
//! [`crate::api::v1`] lists its own lines with [`r`]; the router and the OpenAPI document
//! are assembled from them in [`crate::routes`]. The role column is the authorization rule
//! of the contract, one line per route.
//!
//! It only names the type: what it must never do is import a resource or build the router
//! (that would tie every resource file to all the others).

use axum::routing::MethodRouter;
use idem::Role;

use crate::state::AppState;

/// One route of the service.
pub struct Route {
    pub method: &'static str,
    pub path: &'static str,
    /// Lowest role allowed (`None`: no token needed).
    pub role: Option<Role>,
    pub handler: MethodRouter<AppState>,
}

/// One line of the route table.
pub fn r(
    method: &'static str,
    path: &'static str,
    role: Option<Role>,
    handler: MethodRouter<AppState>,
) -> Route {
    Route {
        method,
        path,
        role,
        handler,
    }
}
