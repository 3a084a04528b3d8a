//! The validated effect request ([`Input`]): what `POST …/effect` and an action's delivery
//! read into, and what the send, classify and reconcile steps of `effects` take. A leaf: it
//! holds data only, so the action cache can keep inputs without reaching the effect path.
//!
//! What it must never do: validate (that is `EffectBody::into_input`'s, the one parser) or
//! show a header value (they are secrets; `Input` has no `Debug`).

use axum::http::{HeaderMap, HeaderName};
use idem::effect::{Body as EffBody, Method as EffMethod, Success};

/// The reconcile lookup, validated.
#[derive(Clone)]
pub(crate) struct Lookup {
    pub(crate) url: String,
    pub(crate) headers: HeaderMap,
    pub(crate) found: Vec<u16>,
    pub(crate) not_found: Vec<u16>,
}

/// An effect request, validated (also what an action's delivery reads as).
#[derive(Clone)]
pub(crate) struct Input {
    pub(crate) method: EffMethod,
    pub(crate) url: String,
    /// `url` as read when it was checked (it is never changed after).
    pub(crate) parsed_url: url::Url,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Option<EffBody>,
    pub(crate) bytes: Option<Vec<u8>>,
    pub(crate) idempotency_header: Option<HeaderName>,
    pub(crate) timeout_ms: i64,
    pub(crate) success: Success,
    pub(crate) destination_idempotent: Option<bool>,
    pub(crate) reconcile: Option<Lookup>,
    pub(crate) owner: Option<String>,
    pub(crate) correlation_id: Option<String>,
    pub(crate) wait_ms: i64,
    pub(crate) lease_ms: Option<i64>,
    pub(crate) cost: Option<idem::AttemptCost>,
    /// An action's MCP delivery: the request's JSON body is the arguments of a `tools/call`
    /// of this upstream tool at the URL (`actions::upstream`), not a request of its own.
    pub(crate) mcp_tool: Option<String>,
}

impl Input {
    /// This input as the `tools/call` of `tool` (an action's `deliver.mcp`).
    pub(crate) fn calling_tool(mut self, tool: &str) -> Input {
        self.mcp_tool = Some(tool.to_owned());
        self
    }
}
