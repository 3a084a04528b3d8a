//! OpenTelemetry traces: export over OTLP/HTTP (protobuf), the W3C `traceparent` of incoming
//! requests and of outbound calls, and the trace id in log lines.
//!
//! Off by default. With an endpoint, `tracing` spans (the `request` span of every call, the
//! `store.execute` step under it, `effect.send` and `effect.reconcile` for an effect's
//! outbound calls, `alert.send` for each outbound alert, `intake.forward` for each delivery of
//! a webhook event) are exported by the SDK's batch processor on its own thread, through a
//! bounded queue that drops spans when the collector is slow: exporting never blocks or fails
//! a request. Spans carry what log lines carry (method, route pattern, namespace, operation,
//! destination host and port, status) and never payloads, results, keys in clear, headers,
//! tokens or secrets.
//!
//! Every outbound call carries W3C trace context ([`TraceHeaders`]): its client span's when
//! spans are exported, else the caller's as it came in (or as stored with the work queued by
//! the caller's request), else none. idem's own context replaces a `traceparent` or
//! `tracestate` among the headers it was asked to send, so a destination never sees two.
//!
//! The `trace_id` field of the `request` span is what puts the trace id on every log line of
//! the request; without an exporter it is still set from an incoming `traceparent`, so logs
//! correlate with the caller's trace either way.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{TraceContextExt, TraceId};
use opentelemetry_http::{Bytes, HeaderExtractor, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// `service.name` unless `OTEL_SERVICE_NAME` says otherwise.
pub const SERVICE_NAME: &str = "idem";
/// One export request is abandoned after this (the batch is dropped, the next one goes on).
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// Set once an exporting subscriber is installed: spans then get OpenTelemetry names and
/// contexts. Without it the request path does no OpenTelemetry work beyond reading an
/// incoming `traceparent`.
static EXPORTING: AtomicBool = AtomicBool::new(false);

/// Whether spans are exported.
pub fn exporting() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

pub(crate) fn set_exporting() {
    EXPORTING.store(true, Ordering::Relaxed);
}

/// Why trace export could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("OTLP endpoint {0:?}: {1}")]
    Endpoint(String, String),
}

/// `<endpoint>/v1/traces`, as the OTLP specification derives it from
/// `OTEL_EXPORTER_OTLP_ENDPOINT` (an endpoint that already names the path is kept).
pub fn traces_url(endpoint: &str) -> String {
    let base = endpoint.trim().trim_end_matches('/');
    if base.ends_with("/v1/traces") {
        base.to_owned()
    } else {
        format!("{base}/v1/traces")
    }
}

/// The tracer provider exporting to `endpoint` (OTLP/HTTP protobuf). Keep it until exit and
/// shut it down then ([`crate::logging::LogGuard`] does), or the last batch is lost.
pub fn tracer_provider(endpoint: &str) -> Result<SdkTracerProvider, TelemetryError> {
    let url = traces_url(endpoint);
    let err = |e: String| TelemetryError::Endpoint(endpoint.to_owned(), e);
    // The blocking client owns a runtime thread of its own; it is built off any async
    // context because reqwest refuses to start one inside another.
    let client = std::thread::spawn(|| {
        reqwest::blocking::Client::builder()
            .timeout(EXPORT_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("idem/", env!("CARGO_PKG_VERSION")))
            .build()
    })
    .join()
    .map_err(|_| err("the HTTP client could not be built".into()))?
    .map_err(|e| err(e.to_string()))?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(BlockingHttp(client))
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(url)
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|e| err(e.to_string()))?;
    let mut resource = Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name(SERVICE_NAME);
    }
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource.build())
        .build())
}

/// The exporter's HTTP client: the SDK's batch thread drives the export future to
/// completion itself, outside any async runtime, so a blocking client fits it (and keeps
/// rustls with ring, like every other client of idem).
#[derive(Debug)]
struct BlockingHttp(reqwest::blocking::Client);

#[async_trait::async_trait]
impl HttpClient for BlockingHttp {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let request = reqwest::blocking::Request::try_from(request)?;
        let resp = self.0.execute(request)?;
        let status = resp.status();
        let headers = resp.headers().clone();
        let body = resp.bytes()?;
        let mut out = Response::builder().status(status).body(body)?;
        *out.headers_mut() = headers;
        Ok(out)
    }
}

/// The W3C trace context of an outbound call: a `traceparent` and, when the trace has one,
/// its `tracestate`. Only ever built from a parsed context, so both are valid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceHeaders {
    pub traceparent: String,
    pub tracestate: Option<String>,
}

impl TraceHeaders {
    /// The headers that continue `cx`; `None` when it holds no valid span context.
    fn of(cx: &opentelemetry::Context) -> Option<TraceHeaders> {
        let mut carrier: HashMap<String, String> = HashMap::new();
        TraceContextPropagator::new().inject_context(cx, &mut carrier);
        let traceparent = carrier.remove("traceparent")?;
        let tracestate = carrier.remove("tracestate").filter(|s| !s.is_empty());
        Some(TraceHeaders {
            traceparent,
            tracestate,
        })
    }

    /// Parses stored values: `None` unless `traceparent` is valid W3C trace context (an
    /// invalid `tracestate` is dropped, the `traceparent` kept).
    pub fn parse(traceparent: &str, tracestate: Option<&str>) -> Option<TraceHeaders> {
        TraceHeaders::of(&Self::extract(traceparent, tracestate))
    }

    fn extract(traceparent: &str, tracestate: Option<&str>) -> opentelemetry::Context {
        let mut carrier = HashMap::from([("traceparent".to_owned(), traceparent.to_owned())]);
        if let Some(ts) = tracestate {
            carrier.insert("tracestate".to_owned(), ts.to_owned());
        }
        TraceContextPropagator::new().extract(&carrier)
    }

    /// Sets both headers on an outbound request, replacing any `traceparent` or `tracestate`
    /// already there (both go, so a `tracestate` never rides with another trace's parent).
    pub fn set_on(&self, headers: &mut HeaderMap) {
        let Ok(tp) = HeaderValue::from_str(&self.traceparent) else {
            return;
        };
        headers.remove(TRACESTATE);
        headers.insert(TRACEPARENT, tp);
        if let Some(v) = self
            .tracestate
            .as_deref()
            .and_then(|ts| HeaderValue::from_str(ts).ok())
        {
            headers.insert(TRACESTATE, v);
        }
    }
}

const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

tokio::task_local! {
    /// The caller's trace context (validated, normalised) while its request runs, when spans
    /// are not exported: what the request's outbound calls carry and its operations store
    /// with the alerts and forwards they queue.
    static INCOMING: Option<TraceHeaders>;
}

/// Runs `fut` (a request) with the caller's trace context from [`link_request`] at hand.
///
/// The task-local's own future, not an `async fn` around it: that would hold `fut` twice in
/// its state (as the argument and as the value awaited), doubling the size of every
/// request's future, which is copied whole when it is boxed.
pub fn with_incoming<F: std::future::Future>(
    incoming: Option<TraceHeaders>,
    fut: F,
) -> tokio::task::futures::TaskLocalFuture<Option<TraceHeaders>, F> {
    INCOMING.scope(incoming, fut)
}

/// Spawns `fut` as a task of its own that keeps the current request's span and caller's
/// trace context (a task-local does not pass to a spawned task by itself).
///
/// The future is boxed first: an effect's future is several KiB, and tokio moves a task's
/// future (and later its output, which shares the slot) by value a few times while it
/// spawns, polls and reads it; boxed, those moves are of a pointer.
pub fn spawn_in_request<F>(fut: F) -> tokio::task::JoinHandle<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    use tracing::Instrument;
    let span = tracing::Span::current();
    let incoming = INCOMING.try_with(Clone::clone).ok().flatten();
    tokio::spawn(with_incoming(incoming, Box::pin(fut)).instrument(span))
}

/// The caller's trace context while its request runs (only when spans are not exported).
fn incoming() -> Option<TraceHeaders> {
    INCOMING.try_with(Clone::clone).ok().flatten()
}

/// The trace context an operation of the current request stores with what it queues (an
/// alert, a forward): the request span's own when spans are exported (the later delivery
/// becomes part of the same trace), else the caller's as it came in; `None` without either.
pub fn operation_trace() -> Option<TraceHeaders> {
    if exporting() {
        return trace_headers(&tracing::Span::current());
    }
    incoming()
}

/// The `traceparent` of [`operation_trace`] (what alerts store).
pub fn operation_traceparent() -> Option<String> {
    operation_trace().map(|t| t.traceparent)
}

/// What an outbound call made under `span` (a client span of the current request) carries:
/// the span's context when spans are exported, else the caller's as it came in.
pub fn outbound_trace(span: &tracing::Span) -> Option<TraceHeaders> {
    if exporting() {
        return trace_headers(span);
    }
    incoming()
}

/// Joins the `request` span to the caller's trace (W3C `traceparent`, when valid) and
/// records its `trace_id`, so every log line of the request carries it. The span must
/// declare the fields `trace_id`, `otel.name` and `otel.kind` (empty). Without an exporter,
/// returns the caller's trace context (re-encoded from its parsed form, so only a valid one
/// is ever passed on) for [`with_incoming`].
pub fn link_request(
    span: &tracing::Span,
    headers: &HeaderMap,
    method: &str,
    route: &str,
) -> Option<TraceHeaders> {
    let propagator = TraceContextPropagator::new();
    let parent = propagator.extract(&HeaderExtractor(headers));
    let incoming = parent.span().span_context().trace_id();
    if !exporting() {
        if incoming == TraceId::INVALID {
            return None;
        }
        span.record("trace_id", tracing::field::display(incoming));
        return TraceHeaders::of(&parent);
    }
    // Name and kind first: reading the context below starts the OpenTelemetry span.
    span.record("otel.name", format!("{method} {route}"));
    span.record("otel.kind", "server");
    if incoming != TraceId::INVALID {
        let _ = span.set_parent(parent);
    }
    let id = span.context().span().span_context().trace_id();
    if id != TraceId::INVALID {
        span.record("trace_id", tracing::field::display(id));
    }
    None
}

/// Makes `span` (not yet entered) a child of the stored `traceparent` of the operation that
/// caused it; an invalid value is ignored (the span starts a trace of its own).
pub fn continue_trace(span: &tracing::Span, traceparent: &str) {
    continue_stored(span, traceparent, None);
}

/// [`continue_trace`] with the stored `tracestate` too (kept by the spans of that trace).
pub fn continue_stored(span: &tracing::Span, traceparent: &str, tracestate: Option<&str>) {
    if !exporting() {
        return;
    }
    let parent = TraceHeaders::extract(traceparent, tracestate);
    if parent.span().span_context().is_valid() {
        let _ = span.set_parent(parent);
    }
}

/// The span of one store step (`store.execute`), under the request span; `Span::none()`
/// when spans are not exported, so the hot path pays nothing for it then.
pub fn store_span(namespace: &str, op: &'static str) -> tracing::Span {
    if !exporting() {
        return tracing::Span::none();
    }
    tracing::info_span!("store.execute", otel.kind = "internal", namespace, op)
}

/// The span of one outbound call (`otel.kind = client`); `Span::none()` when spans are not
/// exported.
pub fn client_span(name: &'static str, namespace: &str, reason: &str) -> tracing::Span {
    let span = outbound_span(name, namespace);
    span.record("reason", reason);
    span
}

/// The span of an effect's outbound call (`effect.send`, or `effect.reconcile` for its
/// lookup), a client span under the current (request) span; `Span::none()` when spans are
/// not exported. Only the destination's host and port are named: a URL's path and query may
/// hold the key or a credential.
pub fn effect_span(
    name: &'static str,
    namespace: &str,
    method: &str,
    url: &url::Url,
) -> tracing::Span {
    let span = outbound_span(name, namespace);
    span.record("http.request.method", method);
    span.record("server.address", url.host_str().unwrap_or_default());
    span.record(
        "server.port",
        url.port_or_known_default().unwrap_or_default(),
    );
    span
}

/// An `outbound` client span with every member an outbound call may record (a member never
/// recorded is not exported); `Span::none()` when spans are not exported.
fn outbound_span(name: &'static str, namespace: &str) -> tracing::Span {
    if !exporting() {
        return tracing::Span::none();
    }
    tracing::info_span!(
        "outbound",
        otel.name = name,
        otel.kind = "client",
        namespace,
        reason = tracing::field::Empty,
        http.request.method = tracing::field::Empty,
        server.address = tracing::field::Empty,
        server.port = tracing::field::Empty,
        http.response.status_code = tracing::field::Empty,
        "error.type" = tracing::field::Empty,
        outcome = tracing::field::Empty,
    )
}

/// The span of one delivery attempt of a webhook event to its forward destination
/// (`intake.forward`): a client span with no parent of its own (the delivery runs from the
/// background loop), to be joined to the stored context of the request that accepted the
/// event with [`continue_stored`]; `Span::none()` when spans are not exported.
pub fn forward_span(
    source: &str,
    namespace: &str,
    destination: &str,
    attempt: u32,
    url: &str,
) -> tracing::Span {
    if !exporting() {
        return tracing::Span::none();
    }
    let url = url::Url::parse(url).ok();
    let url = url.as_ref();
    tracing::info_span!(
        parent: None,
        "outbound",
        otel.name = "intake.forward",
        otel.kind = "client",
        source,
        namespace,
        destination,
        attempt,
        http.request.method = "POST",
        server.address = url.and_then(url::Url::host_str).unwrap_or_default(),
        server.port = url
            .and_then(url::Url::port_or_known_default)
            .unwrap_or_default(),
        http.response.status_code = tracing::field::Empty,
        "error.type" = tracing::field::Empty,
        result = tracing::field::Empty,
    )
}

/// Joins `span` (not yet entered) to the trace context stored with queued work, and says
/// what the outbound call made under it carries: the span's context when spans are exported
/// (a root span of its own when nothing was stored), else the stored context as it is.
pub fn continue_outbound(
    span: &tracing::Span,
    traceparent: Option<&str>,
    tracestate: Option<&str>,
) -> Option<TraceHeaders> {
    if let Some(tp) = traceparent {
        continue_stored(span, tp, tracestate);
    }
    if exporting() {
        return trace_headers(span);
    }
    traceparent.and_then(|tp| TraceHeaders::parse(tp, tracestate))
}

/// The `traceparent` header value that continues `span`'s trace in an outbound call; `None`
/// when spans are not exported (there is no trace to continue).
pub fn traceparent(span: &tracing::Span) -> Option<String> {
    trace_headers(span).map(|t| t.traceparent)
}

/// [`traceparent`] with the trace's `tracestate`.
pub fn trace_headers(span: &tracing::Span) -> Option<TraceHeaders> {
    if !exporting() {
        return None;
    }
    TraceHeaders::of(&span.context())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_valid_incoming_traceparent_is_passed_on() {
        let valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        for (value, want) in [
            (valid, Some(valid)),
            ("garbage", None),
            (
                "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                None,
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
                None,
            ),
        ] {
            let mut headers = HeaderMap::new();
            headers.insert("traceparent", value.parse().expect("header"));
            let got = link_request(&tracing::Span::none(), &headers, "POST", "/x");
            assert_eq!(
                got.as_ref().map(|t| t.traceparent.as_str()),
                want,
                "{value}"
            );
        }
        let got = link_request(&tracing::Span::none(), &HeaderMap::new(), "POST", "/x");
        assert_eq!(got, None);
    }

    #[test]
    fn idem_trace_headers_replace_the_callers_both_at_once() {
        let ours = TraceHeaders::parse(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            Some("vendor=abc"),
        )
        .expect("valid");
        assert_eq!(ours.tracestate.as_deref(), Some("vendor=abc"));
        let mut headers = HeaderMap::new();
        headers.append("traceparent", "00-1-2-01".parse().expect("header"));
        headers.append("traceparent", "00-3-4-01".parse().expect("header"));
        headers.append("tracestate", "mine=1".parse().expect("header"));
        headers.append("x-other", "kept".parse().expect("header"));
        ours.set_on(&mut headers);
        let all = |n: &str| -> Vec<&str> {
            headers
                .get_all(n)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .collect()
        };
        assert_eq!(all("traceparent"), [ours.traceparent.as_str()]);
        assert_eq!(all("tracestate"), ["vendor=abc"]);
        assert_eq!(all("x-other"), ["kept"]);
        // A context without tracestate takes the caller's tracestate away too.
        let bare = TraceHeaders::parse(&ours.traceparent, None).expect("valid");
        headers.insert("tracestate", "mine=1".parse().expect("header"));
        bare.set_on(&mut headers);
        assert!(headers.get("tracestate").is_none());
        assert_eq!(TraceHeaders::parse("garbage", Some("vendor=abc")), None);
    }

    #[test]
    fn the_traces_path_is_appended_once() {
        assert_eq!(
            traces_url("http://127.0.0.1:4318"),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            traces_url("https://otel.example.com/base/"),
            "https://otel.example.com/base/v1/traces"
        );
        assert_eq!(
            traces_url("http://c:4318/v1/traces"),
            "http://c:4318/v1/traces"
        );
    }

    #[test]
    fn an_incoming_trace_id_reaches_the_log_fields_without_an_exporter() {
        use std::sync::{Arc, Mutex};
        use tracing_subscriber::layer::SubscriberExt;

        #[derive(Clone, Default)]
        struct Sink(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Sink {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0
                    .lock()
                    .map_err(|_| std::io::ErrorKind::Other)?
                    .extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let sink = Sink::default();
        let writer = {
            let sink = sink.clone();
            move || sink.clone()
        };
        let subscriber = tracing_subscriber::registry().with(
            tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .with_writer(writer),
        );
        let mut headers = HeaderMap::new();
        headers.insert(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
                .parse()
                .expect("header"),
        );
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!(
                "request",
                trace_id = tracing::field::Empty,
                otel.name = tracing::field::Empty,
                otel.kind = tracing::field::Empty
            );
            link_request(&span, &headers, "GET", "/healthz");
            span.in_scope(|| tracing::info!("inside"));
            assert_eq!(
                traceparent(&span),
                None,
                "nothing exported, nothing continued"
            );
        });
        let text = String::from_utf8(sink.0.lock().expect("sink").clone()).expect("utf8");
        assert!(
            text.contains("trace_id=4bf92f3577b34da6a3ce929d0e0e4736") && text.contains("inside"),
            "{text}"
        );
    }
}
