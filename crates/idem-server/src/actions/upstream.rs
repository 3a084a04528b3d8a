//! The MCP client of `deliver.mcp`: one `tools/call` of an upstream MCP server's tool over the
//! Streamable HTTP transport, every request through the egress client (the addresses the
//! namespace's egress policy passed, pinned: no second resolution), and what the answer
//! means for the record.
//!
//! A call is: `initialize` (offering a session revision, `2025-11-25`) → the server's
//! `Mcp-Session-Id` when it gives one → `notifications/initialized` → `tools/call`, then a
//! best-effort `DELETE` of the session. A server of the stateless revision only (`2026-07-28`,
//! which refuses `initialize` with `-32601` or `-32022`) gets the `tools/call` alone, with the
//! revision and the client's capabilities in `_meta`. Answers are read as `application/json`
//! or as an event stream (`text/event-stream`: the JSON-RPC response with the request's id;
//! notifications and server requests on the stream are skipped). A session is opened per
//! call: a call carries nothing a session could keep, and nothing has to be expired.
//!
//! The handshake runs before the record's `sent` event: it reaches no tool, so any failure
//! of it is "nothing sent" (retryable) — except a 4xx refusal or a JSON-RPC error, which a
//! retry would only meet again (permanent). After `sent`, the `tools/call` reads as:
//!
//! | what came back | verdict |
//! |---|---|
//! | a `CallToolResult` | performed (`isError: false`) / permanent (`isError: true`) |
//! | a JSON-RPC error (unknown tool `-32602`, …) | permanent |
//! | an HTTP status other than 2xx | the effect's table for that status |
//! | nothing: connection refused, DNS | retryable, `sent: false` |
//! | nothing: timeout or broken connection after the request left | ambiguous |
//! | a 2xx whose body broke off (timeout, reset) before the response | as the line above |
//! | a 2xx without the response (stream ended early, not JSON-RPC) | ambiguous |
//!
//! It also owns `Step`, what one send step left (verdict, kept answer, `last_error`), which
//! the effect path reads alike for a plain request and for this delivery, and the revision
//! names the MCP endpoint (`actions::mcp`) shares with it: it imports nothing of the
//! handlers.
//!
//! What it must never do: log or answer a header value or the arguments (the messages of a
//! failure name the step and the status only), or send the `tools/call` before `sent` is
//! recorded.

use std::time::Duration;

use idem::effect::{self, classify, Lost, NotSent, Success, Transport, Verdict};
use idem_egress::Target;
use idem_egress::{Answer, Egress, HeaderMap, HeaderName, HeaderValue, Method, Outbound, Outcome};
use serde_json::{json, Map, Value};
use tokio::time::Instant;

/// The stateless revision.
pub const STATELESS: &str = "2026-07-28";
/// The `_meta` member that carries the revision of a stateless request.
pub const VERSION_META: &str = "io.modelcontextprotocol/protocolVersion";

/// What the send step of one attempt left: the verdict, the kept answer, the `last_error` of
/// a failure (category, message, HTTP status) and whether anything left (`sent`).
pub(crate) struct Step {
    pub(crate) verdict: Verdict,
    pub(crate) response: Option<Value>,
    pub(crate) category: &'static str,
    pub(crate) message: String,
    pub(crate) http_status: Option<u16>,
    pub(crate) sent: bool,
}

/// The session revision idem offers in `initialize`.
pub const CLIENT_REVISION: &str = "2025-11-25";
/// The `_meta` member of the stateless revision that carries the client's capabilities.
pub const CAPABILITIES_META: &str = "io.modelcontextprotocol/clientCapabilities";
/// The `_meta` member of the stateless revision that names the client.
pub const CLIENT_INFO_META: &str = "io.modelcontextprotocol/clientInfo";
/// The `_meta` member of `tools/call` that carries the key.
pub const KEY_META: &str = "idem/key";

const ACCEPT: &str = "application/json, text/event-stream";
const INIT_ID: i64 = 0;
const CALL_ID: i64 = 1;

fn client_info() -> Value {
    json!({"name": "idem", "version": env!("CARGO_PKG_VERSION")})
}

/// The revision and session a `tools/call` is sent with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub revision: String,
    /// `Mcp-Session-Id`, when the server gave one.
    pub id: Option<HeaderValue>,
}

impl Session {
    fn stateless() -> Session {
        Session {
            revision: STATELESS.to_owned(),
            id: None,
        }
    }
    fn is_stateless(&self) -> bool {
        self.revision == STATELESS
    }
}

/// Why the handshake did not open a session (the tool was not called).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handshake {
    /// Nothing reached the server.
    NotSent(NotSent),
    /// The server refused it in a way a retry would meet again: a 4xx (not 408, 425, 429)
    /// or a JSON-RPC error.
    Refused { status: Option<u16>, what: String },
    /// No usable answer (timeout, broken connection, 5xx, not JSON-RPC): try again later.
    Failed { status: Option<u16>, what: String },
}

/// What the `tools/call` brought back.
#[derive(Debug, Clone, PartialEq)]
pub enum Called {
    NotSent(NotSent),
    Lost(Lost),
    /// A status other than 2xx.
    Status {
        status: u16,
        retry_after_ms: Option<i64>,
    },
    /// The `CallToolResult`.
    Result(Value),
    /// A JSON-RPC error.
    Error {
        code: i64,
        message: String,
    },
    /// A 2xx without the response.
    Unreadable,
}

/// One upstream server as reached for one call.
pub struct Upstream<'a> {
    egress: &'a Egress,
    target: &'a Target,
    /// The action's headers (secrets): sent on every request, never shown.
    headers: &'a HeaderMap,
    /// Each request's own timeout (one value, so requests share the kept client).
    timeout: Duration,
    /// The whole call (handshake and `tools/call`) ends here.
    deadline: Instant,
}

impl<'a> Upstream<'a> {
    pub fn new(
        egress: &'a Egress,
        target: &'a Target,
        headers: &'a HeaderMap,
        timeout_ms: i64,
    ) -> Upstream<'a> {
        let timeout = Duration::from_millis(u64::try_from(timeout_ms.max(1)).unwrap_or(1));
        Upstream {
            egress,
            target,
            headers,
            timeout,
            deadline: Instant::now() + timeout,
        }
    }

    /// POSTs one JSON-RPC message, within what is left of the deadline (a request cut by it
    /// is lost after it left).
    async fn post(&self, session: Option<&Session>, msg: &Value, extra: HeaderMap) -> Outcome {
        let mut headers = self.headers.clone();
        headers.insert(
            HeaderName::from_static("content-type"),
            HeaderValue::from_static("application/json"),
        );
        headers.insert(
            HeaderName::from_static("accept"),
            HeaderValue::from_static(ACCEPT),
        );
        if let Some(s) = session {
            if let Ok(v) = HeaderValue::from_str(&s.revision) {
                headers.insert(HeaderName::from_static("mcp-protocol-version"), v);
            }
            if let Some(id) = &s.id {
                headers.insert(HeaderName::from_static("mcp-session-id"), id.clone());
            }
        }
        for (n, v) in &extra {
            headers.insert(n.clone(), v.clone());
        }
        let out = Outbound {
            method: Method::POST,
            headers,
            body: Some(msg.to_string().into_bytes()),
            timeout: self.timeout,
        };
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Outcome::Lost(Lost::Timeout);
        }
        match tokio::time::timeout(left, self.egress.send(self.target, out)).await {
            Ok(o) => o,
            Err(_) => Outcome::Lost(Lost::Timeout),
        }
    }

    /// The handshake: a session revision through `initialize`, or the stateless revision
    /// when the server serves only that.
    pub async fn open(&self) -> Result<Session, Handshake> {
        let init = json!({"jsonrpc": "2.0", "id": INIT_ID, "method": "initialize", "params": {
            "protocolVersion": CLIENT_REVISION,
            "capabilities": {},
            "clientInfo": client_info(),
        }});
        let a = match self.post(None, &init, HeaderMap::new()).await {
            Outcome::Answered(a) => a,
            Outcome::NotSent(n) => return Err(Handshake::NotSent(n)),
            Outcome::Lost(l) => {
                return Err(Handshake::Failed {
                    status: None,
                    what: lost_text("initialize", l),
                })
            }
        };
        let found = response_of(&a, &json!(INIT_ID));
        if let Some(r) = &found {
            if stateless_only(r) {
                return Ok(Session::stateless());
            }
        }
        if !(200..300).contains(&a.status) {
            return Err(status_refusal("initialize", a.status));
        }
        let result = match found {
            Some(r) => match (r.get("result"), r.get("error")) {
                (Some(res), _) => res.clone(),
                (None, Some(e)) => {
                    return Err(Handshake::Refused {
                        status: None,
                        what: format!(
                            "the upstream MCP server refused initialize (JSON-RPC error {})",
                            error_code(e)
                        ),
                    })
                }
                (None, None) => return Err(unreadable("initialize")),
            },
            None => return Err(unreadable("initialize")),
        };
        let revision = result
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or(CLIENT_REVISION)
            .to_owned();
        if revision == STATELESS {
            return Ok(Session::stateless());
        }
        let id = a
            .headers
            .iter()
            .find(|(n, _)| n == "mcp-session-id")
            .and_then(|(_, v)| HeaderValue::from_bytes(v).ok());
        let session = Session { revision, id };
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        match self.post(Some(&session), &note, HeaderMap::new()).await {
            Outcome::Answered(a) if (200..300).contains(&a.status) => Ok(session),
            Outcome::Answered(a) => Err(status_refusal("notifications/initialized", a.status)),
            Outcome::NotSent(n) => Err(Handshake::NotSent(n)),
            Outcome::Lost(l) => Err(Handshake::Failed {
                status: None,
                what: lost_text("notifications/initialized", l),
            }),
        }
    }

    /// The `tools/call` of `tool` with `arguments`, the key in `_meta` and `extra` headers
    /// (the idempotency header, the trace context).
    pub async fn call(
        &self,
        session: &Session,
        tool: &str,
        arguments: &Value,
        key: &str,
        extra: HeaderMap,
    ) -> Called {
        let mut meta = Map::new();
        meta.insert(KEY_META.into(), json!(key));
        if session.is_stateless() {
            meta.insert(VERSION_META.into(), json!(STATELESS));
            meta.insert(CAPABILITIES_META.into(), json!({}));
            meta.insert(CLIENT_INFO_META.into(), client_info());
        }
        let msg = json!({"jsonrpc": "2.0", "id": CALL_ID, "method": "tools/call", "params": {
            "name": tool,
            "arguments": arguments,
            "_meta": meta,
        }});
        match self.post(Some(session), &msg, extra).await {
            Outcome::Answered(a) => called_of(&a),
            Outcome::NotSent(n) => Called::NotSent(n),
            Outcome::Lost(l) => Called::Lost(l),
        }
    }

    /// Ends a session the server opened (best effort, in the background: the answer to the
    /// agent does not wait for it).
    pub fn close(&self, session: Session) {
        let Some(id) = session.id else {
            return;
        };
        let mut headers = self.headers.clone();
        headers.insert(HeaderName::from_static("mcp-session-id"), id);
        if let Ok(v) = HeaderValue::from_str(&session.revision) {
            headers.insert(HeaderName::from_static("mcp-protocol-version"), v);
        }
        let out = Outbound {
            method: Method::DELETE,
            headers,
            body: None,
            timeout: self.timeout,
        };
        let (egress, target) = (self.egress.clone(), self.target.clone());
        tokio::spawn(async move {
            let _ = egress.send(&target, out).await;
        });
    }
}

fn lost_text(step: &str, l: Lost) -> String {
    match l {
        Lost::Timeout => format!("the upstream MCP server did not answer {step} within timeout_ms"),
        Lost::Broken => format!("the connection to the upstream MCP server broke during {step}"),
    }
}

fn unreadable(step: &str) -> Handshake {
    Handshake::Failed {
        status: None,
        what: format!("the upstream MCP server's answer to {step} held no JSON-RPC response"),
    }
}

fn status_refusal(step: &str, status: u16) -> Handshake {
    let what = format!("the upstream MCP server answered {step} with HTTP {status}");
    if (400..500).contains(&status) && !matches!(status, 408 | 425 | 429) {
        Handshake::Refused {
            status: Some(status),
            what,
        }
    } else {
        Handshake::Failed {
            status: Some(status),
            what,
        }
    }
}

fn error_code(e: &Value) -> i64 {
    e.get("code").and_then(Value::as_i64).unwrap_or(0)
}

/// A server that serves only the stateless revision refuses `initialize`: method not found,
/// or unsupported protocol version with the stateless one among those it supports.
fn stateless_only(r: &Map<String, Value>) -> bool {
    let Some(e) = r.get("error") else {
        return false;
    };
    match error_code(e) {
        -32601 => true,
        -32022 => e
            .pointer("/data/supported")
            .and_then(Value::as_array)
            .is_some_and(|s| s.iter().any(|v| v == STATELESS)),
        _ => false,
    }
}

/// What an answer to `tools/call` brought back. A 2xx whose body broke off before it held
/// the JSON-RPC response is the request lost after it left (by the timeout, or a broken
/// connection), as if no status had come: an event stream's status comes before the tool
/// has even run.
fn called_of(a: &Answer) -> Called {
    if !(200..300).contains(&a.status) {
        let retry_after_ms = a
            .headers
            .iter()
            .find(|(n, _)| n == "retry-after")
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
            .and_then(|v| v.trim().parse::<i64>().ok())
            .map(|s| s.saturating_mul(1000));
        return Called::Status {
            status: a.status,
            retry_after_ms,
        };
    }
    match response_of(a, &json!(CALL_ID)) {
        Some(r) => match (r.get("result"), r.get("error")) {
            (Some(res), _) if res.is_object() => Called::Result(res.clone()),
            (None, Some(e)) => Called::Error {
                code: error_code(e),
                message: e
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .chars()
                    .take(500)
                    .collect(),
            },
            _ => Called::Unreadable,
        },
        None => match a.broke_off {
            Some(l) => Called::Lost(l),
            None => Called::Unreadable,
        },
    }
}

/// The JSON-RPC response with `id` in an answer: its body as one JSON message (or a batch),
/// or the `data` of the events of a `text/event-stream`.
pub fn response_of(a: &Answer, id: &Value) -> Option<Map<String, Value>> {
    let ct = a
        .headers
        .iter()
        .find(|(n, _)| n == "content-type")
        .and_then(|(_, v)| std::str::from_utf8(v).ok())
        .unwrap_or_default()
        .to_ascii_lowercase();
    if ct.starts_with("text/event-stream") {
        let text = std::str::from_utf8(&a.body).ok()?;
        return sse_data(text)
            .iter()
            .filter_map(|d| serde_json::from_str::<Value>(d).ok())
            .find_map(|v| matching(v, id));
    }
    serde_json::from_slice::<Value>(&a.body)
        .ok()
        .and_then(|v| matching(v, id))
}

/// The response with `id` in one message or a batch (requests and notifications skipped).
fn matching(v: Value, id: &Value) -> Option<Map<String, Value>> {
    match v {
        Value::Object(m)
            if m.get("id") == Some(id)
                && !m.contains_key("method")
                && (m.contains_key("result") || m.contains_key("error")) =>
        {
            Some(m)
        }
        Value::Array(items) => items.into_iter().find_map(|i| matching(i, id)),
        _ => None,
    }
}

/// The `data` of each complete event of an event stream (lines joined by `\n`).
fn sse_data(text: &str) -> Vec<String> {
    let mut out = vec![];
    let mut data: Option<String> = None;
    for line in text.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.is_empty() {
            if let Some(d) = data.take() {
                out.push(d);
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("data:") {
            let rest = rest.strip_prefix(' ').unwrap_or(rest);
            match &mut data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(rest);
                }
                None => data = Some(rest.to_owned()),
            }
        }
    }
    // A stream that ended right after its last data line still delivered it.
    if let Some(d) = data {
        out.push(d);
    }
    out
}

/// The step of a handshake that did not open: the tool was not called.
pub(crate) fn handshake_step(h: Handshake) -> Step {
    match h {
        Handshake::NotSent(n) => {
            let (category, message, _) = effect::failure(&Transport::NotSent(n));
            Step {
                verdict: Verdict::Retryable {
                    retry_after_ms: None,
                },
                response: None,
                category,
                message,
                http_status: None,
                sent: false,
            }
        }
        Handshake::Refused { status, what } => Step {
            verdict: Verdict::Permanent,
            response: None,
            category: "mcp",
            message: format!("{what}; the tool was not called"),
            http_status: status,
            sent: false,
        },
        Handshake::Failed { status, what } => Step {
            verdict: Verdict::Retryable {
                retry_after_ms: None,
            },
            response: None,
            category: "mcp",
            message: format!("{what}; the tool was not called"),
            http_status: status,
            sent: false,
        },
    }
}

/// What a `tools/call` answer means for the record (the table of the module doc);
/// `destination_idempotent` as for an effect (an MCP delivery sets it false).
pub(crate) fn call_step(c: Called, tool: &str, destination_idempotent: bool) -> Step {
    let transport = |t: Transport, response: Option<Value>| {
        let verdict = classify(&t, &Success::TwoXx, destination_idempotent);
        let (category, message, http_status) = effect::failure(&t);
        Step {
            verdict,
            response,
            category,
            message,
            http_status,
            sent: !matches!(t, Transport::NotSent(_)),
        }
    };
    match c {
        Called::NotSent(n) => transport(Transport::NotSent(n), None),
        Called::Lost(l) => transport(Transport::Lost(l), None),
        Called::Status {
            status,
            retry_after_ms,
        } => transport(
            Transport::Answered {
                status,
                retry_after_ms,
            },
            Some(json!({"status": status})),
        ),
        Called::Result(r) => {
            let failed = r.get("isError") == Some(&Value::Bool(true));
            Step {
                verdict: if failed {
                    Verdict::Permanent
                } else {
                    Verdict::Performed
                },
                response: Some(r),
                category: "mcp",
                message: if failed {
                    format!("the upstream tool {tool} answered isError: true")
                } else {
                    String::new()
                },
                http_status: None,
                sent: true,
            }
        }
        Called::Error { code, message } => Step {
            verdict: Verdict::Permanent,
            response: Some(json!({"error": {"code": code, "message": message}})),
            category: "mcp",
            message: format!(
                "the upstream MCP server answered tools/call with JSON-RPC error {code}"
            ),
            http_status: None,
            sent: true,
        },
        Called::Unreadable => Step {
            verdict: if destination_idempotent {
                Verdict::Retryable {
                    retry_after_ms: None,
                }
            } else {
                Verdict::Ambiguous
            },
            response: None,
            category: "mcp",
            message: "the upstream MCP server's answer to tools/call held no JSON-RPC response"
                .into(),
            http_status: None,
            sent: true,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(ct: &str, body: &str) -> Answer {
        Answer {
            status: 200,
            headers: vec![("content-type".into(), ct.as_bytes().to_vec())],
            body: body.as_bytes().to_vec(),
            truncated: false,
            broke_off: None,
        }
    }

    #[test]
    fn the_response_is_found_in_json_and_in_an_event_stream() {
        let id = json!(1);
        let a = answer(
            "application/json",
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#,
        );
        assert!(response_of(&a, &id).is_some_and(|m| m.contains_key("result")));
        let other = answer(
            "application/json",
            r#"{"jsonrpc":"2.0","id":2,"result":{}}"#,
        );
        assert!(response_of(&other, &id).is_none());
        // A notification and a server request first, CRLF lines, a multi-line data field.
        let stream = "event: message\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\r\n\r\n\
                      data: {\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"sampling/createMessage\"}\n\n\
                      event: message\ndata: {\"jsonrpc\":\"2.0\",\ndata: \"id\":1,\"error\":{\"code\":-32602,\"message\":\"x\"}}\n\n";
        let found = response_of(&answer("text/event-stream", stream), &id).expect("found");
        assert_eq!(found["error"]["code"], -32602);
        let cut = "data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"isError\":false}}";
        assert!(response_of(&answer("text/event-stream", cut), &id).is_some());
        assert!(response_of(&answer("text/event-stream", ": ping\n\n"), &id).is_none());
        assert!(response_of(&answer("application/json", "not json"), &id).is_none());
    }

    #[test]
    fn a_call_whose_body_broke_off_before_the_response_is_lost_after_it_left() {
        let stream = "text/event-stream";
        let done = "data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"isError\":false}}\n\n";
        let broke = |body: &str, why: Option<Lost>| Answer {
            truncated: why.is_some(),
            broke_off: why,
            ..answer(stream, body)
        };
        // The stream's status came, then the timeout or a reset, before the response.
        assert_eq!(
            called_of(&broke(": ping\n\n", Some(Lost::Timeout))),
            Called::Lost(Lost::Timeout)
        );
        assert_eq!(
            called_of(&broke("", Some(Lost::Broken))),
            Called::Lost(Lost::Broken)
        );
        // A response read whole before the break stands.
        assert!(matches!(
            called_of(&broke(done, Some(Lost::Broken))),
            Called::Result(_)
        ));
        // A body that ended without the response is unreadable, not lost.
        assert_eq!(called_of(&broke(": ping\n\n", None)), Called::Unreadable);
        // A status other than 2xx is the status, whatever its body.
        let refused = Answer {
            status: 503,
            headers: vec![("retry-after".into(), b"2".to_vec())],
            ..broke("", Some(Lost::Timeout))
        };
        assert_eq!(
            called_of(&refused),
            Called::Status {
                status: 503,
                retry_after_ms: Some(2000)
            }
        );
        // What each means for the record: a timeout after sending is ambiguous, category
        // `timeout`, as the contract says.
        let s = call_step(Called::Lost(Lost::Timeout), "t", false);
        assert_eq!(
            (s.verdict, s.category, s.sent),
            (Verdict::Ambiguous, "timeout", true)
        );
    }

    #[test]
    fn a_stateless_only_server_is_recognised_by_its_refusal() {
        let m = |v: Value| v.as_object().cloned().expect("object");
        assert!(stateless_only(&m(
            json!({"id": 0, "error": {"code": -32601, "message": "no"}})
        )));
        assert!(stateless_only(&m(
            json!({"id": 0, "error": {"code": -32022,
            "message": "no", "data": {"supported": [STATELESS]}}})
        )));
        assert!(!stateless_only(&m(
            json!({"id": 0, "error": {"code": -32022,
            "message": "no", "data": {"supported": ["2030-01-01"]}}})
        )));
        assert!(!stateless_only(&m(json!({"id": 0, "result": {}}))));
    }

    #[test]
    fn every_row_of_the_call_table() {
        let v = |c: Called| call_step(c, "send", false);
        let ok = v(Called::Result(json!({"content": [], "isError": false})));
        assert_eq!((ok.verdict, ok.sent), (Verdict::Performed, true));
        let err = v(Called::Result(json!({"content": [], "isError": true})));
        assert_eq!(err.verdict, Verdict::Permanent);
        assert!(err.response.is_some());
        let rpc = v(Called::Error {
            code: -32602,
            message: "unknown tool".into(),
        });
        assert_eq!(rpc.verdict, Verdict::Permanent);
        let refused = v(Called::NotSent(NotSent::Connect));
        assert!(matches!(refused.verdict, Verdict::Retryable { .. }));
        assert!(!refused.sent);
        let lost = v(Called::Lost(Lost::Timeout));
        assert_eq!((lost.verdict, lost.sent), (Verdict::Ambiguous, true));
        assert_eq!(v(Called::Unreadable).verdict, Verdict::Ambiguous);
        assert_eq!(
            v(Called::Status {
                status: 500,
                retry_after_ms: None
            })
            .verdict,
            Verdict::Ambiguous
        );
        assert_eq!(
            v(Called::Status {
                status: 404,
                retry_after_ms: None
            })
            .verdict,
            Verdict::Permanent
        );
        assert!(matches!(
            v(Called::Status {
                status: 429,
                retry_after_ms: Some(2000)
            })
            .verdict,
            Verdict::Retryable {
                retry_after_ms: Some(2000)
            }
        ));
        // The handshake reaches no tool: nothing sent, permanent only for a refusal.
        for (h, permanent) in [
            (Handshake::NotSent(NotSent::Connect), false),
            (
                Handshake::Failed {
                    status: Some(502),
                    what: "x".into(),
                },
                false,
            ),
            (
                Handshake::Refused {
                    status: Some(401),
                    what: "x".into(),
                },
                true,
            ),
        ] {
            let s = handshake_step(h);
            assert!(!s.sent);
            assert_eq!(s.verdict == Verdict::Permanent, permanent);
        }
        assert!(matches!(
            status_refusal("initialize", 429),
            Handshake::Failed { .. }
        ));
        assert!(matches!(
            status_refusal("initialize", 403),
            Handshake::Refused { .. }
        ));
    }
}
