use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idem::{
    AlertOutcome, ApiToken, ExecCtx, Executed, Key, ListQuery, Namespace, NamespaceChange,
    NamespaceInfo, NewApiToken, Op, Page, PendingAlert, RecordWithEvents, RetentionReport, Stats,
    Store, StoreError, SweepReport, Timestamp,
};
use serde_json::json;

use idem_testkit::app::*;

#[tokio::test]
async fn metrics_are_present_after_traffic() {
    let app = spawn_app().await;
    let t = Api::acquired(&app.claim("m", "secret-key-123", json!({})).await);
    app.complete("m", "secret-key-123", json!({"token": t}))
        .await;
    app.claim("m", "secret-key-123", json!({})).await;
    let t = Api::acquired(&app.claim("m", "k2", json!({})).await);
    app.fail("m", "k2", json!({"token": t, "http_status": 503}))
        .await;
    idem_server::background::janitor_once(&app.store, app.now(), 100)
        .await
        .expect("janitor");
    let stats = idem_server::background::gauges_once(&app.store, app.now())
        .await
        .expect("gauges");
    assert_eq!(stats.records.get(idem::State::Completed), 1);
    assert_eq!(stats.records.get(idem::State::Processing), 0);
    assert_eq!(app.get("/no/such/route").await.status, 404);
    assert_eq!(app.get("/v1/namespaces/m/keys/k/claim").await.status, 405);
    let r = app.get("/metrics").await;
    assert_eq!(r.status, 200);
    assert!(r
        .header("content-type")
        .is_some_and(|c| c.starts_with("text/plain")));
    let m = &r.text;
    for name in [
        "idem_claims_total{outcome=\"acquired\"}",
        "idem_claims_total{outcome=\"completed\"}",
        "idem_duplicate_hits_total",
        "idem_acquired_total{resumed=\"false\"}",
        "idem_fails_total{class=\"retryable\",status=\"503\"}",
        "idem_reclaims_total",
        "idem_records{state=\"completed\"}",
        "idem_oldest_processing_seconds",
        "idem_review_queue_depth",
        "idem_janitor_expired_total",
        "idem_alerts_total{result=\"sent\"}",
        "idem_http_request_duration_seconds_bucket{route=\"/v1/namespaces/{ns}/keys/{key}/claim\",status=\"201\"",
        "idem_http_request_duration_seconds_bucket{route=\"/v1/namespaces/{ns}/keys/{key}/claim\",status=\"405\"",
        "idem_http_request_duration_seconds_bucket{route=\"unmatched\",status=\"404\"",
    ] {
        assert!(m.contains(name), "missing {name} in\n{m}");
    }
    assert!(!m.contains("secret-key-123"), "a key leaked into metrics");
}

#[tokio::test]
async fn openapi_documents_every_route_and_nothing_else() {
    let app = spawn_app().await;
    let r = app.get("/openapi.json").await;
    assert_eq!(r.status, 200);
    let paths = r.body["paths"].as_object().expect("paths");
    let mut documented = BTreeSet::new();
    for (path, item) in paths {
        for method in ["get", "post", "patch", "put", "delete"] {
            if item.get(method).is_some() {
                documented.insert((method.to_owned(), path.clone()));
            }
        }
    }
    let routed: BTreeSet<(String, String)> = idem_server::route_table()
        .into_iter()
        .map(|(m, p)| (m.to_owned(), p.to_owned()))
        .collect();
    assert_eq!(documented, routed);
    // And every route really answers (not the 404 fallback).
    for (m, p) in &routed {
        let path = p.replace("{ns}", "ns").replace("{key}", "k");
        let url = format!("{}{path}", app.base);
        let req = match m.as_str() {
            "get" => app.http.get(url),
            "post" => app.http.post(url),
            _ => app.http.patch(url),
        };
        let resp = app.send(req).await;
        assert!(
            !(resp.status == 404
                && resp.body["detail"]
                    .as_str()
                    .is_some_and(|d| d.starts_with("no such route"))),
            "{m} {p}"
        );
    }
    // The documented request bodies name exactly the members the parser accepts.
    let schemas = &r.body["components"]["schemas"];
    for (name, fields) in [
        ("ClaimBody", idem_server::api::ClaimBody::FIELDS),
        ("PrepareBody", idem_server::api::PrepareBody::FIELDS),
        ("HeartbeatBody", idem_server::api::HeartbeatBody::FIELDS),
        ("CompleteBody", idem_server::api::CompleteBody::FIELDS),
        ("FailBody", idem_server::api::FailBody::FIELDS),
        ("ResolveBody", idem_server::api::ResolveBody::FIELDS),
        ("NoteBody", idem_server::api::NoteBody::FIELDS),
        ("DeriveBody", idem_server::api::DeriveBody::FIELDS),
        ("TokenBody", idem_server::api::TokenBody::FIELDS),
        ("PolicyPatchBody", idem_server::api::PolicyPatchBody::FIELDS),
        ("EffectBody", idem_server::api::EffectBody::FIELDS),
        (
            "EffectRequestBody",
            idem_server::api::EffectRequestBody::FIELDS,
        ),
        ("ReconcileBody", idem_server::api::ReconcileBody::FIELDS),
    ] {
        let props: BTreeSet<&str> = schemas[name]["properties"]
            .as_object()
            .unwrap_or_else(|| panic!("{name} missing"))
            .keys()
            .map(String::as_str)
            .collect();
        let want: BTreeSet<&str> = fields.iter().copied().collect();
        assert_eq!(props, want, "{name}");
    }
}

#[tokio::test]
async fn health_and_readiness() {
    let app = spawn_app().await;
    assert_eq!(app.get("/healthz").await.body, json!({"status": "ok"}));
    assert_eq!(app.get("/readyz").await.body, json!({"status": "ready"}));
}

/// Captures every log line of the process.
#[derive(Clone, Default)]
struct Capture(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut v) = self.0.lock() {
            v.extend_from_slice(buf);
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn logs_carry_masked_keys_and_never_payloads_results_or_tokens() {
    // A process-wide subscriber: a thread-local one races with other tests over tracing's
    // callsite interest cache. Other tests' lines land in it too; we only look for ours.
    static CAPTURE: std::sync::OnceLock<Capture> = std::sync::OnceLock::new();
    let cap = CAPTURE
        .get_or_init(|| {
            let cap = Capture::default();
            let writer = cap.clone();
            let sub = tracing_subscriber::fmt()
                .json()
                .with_max_level(tracing::Level::INFO)
                .with_writer(move || writer.clone())
                .finish();
            let _ = tracing::subscriber::set_global_default(sub);
            cap
        })
        .clone();
    let app = spawn_app().await;
    let key = "customer-4711:charge";
    let c = app
        .claim("logs", key, json!({"payload": {"card": "PAYLOAD-SECRET"}, "owner": "exec-77", "correlation_id": "corr-9"}))
        .await;
    let token = c.token();
    app.complete(
        "logs",
        key,
        json!({"token": token, "result": {"r": "RESULT-SECRET"}}),
    )
    .await;
    app.claim("logs", key, json!({"payload": {"card": "PAYLOAD-SECRET"}}))
        .await;
    let text = String::from_utf8(cap.0.lock().expect("lock").clone()).expect("utf8");
    let masked = idem::mask_key(key);
    assert!(text.contains(&masked), "no masked key in logs:\n{text}");
    assert!(
        text.contains("exec-77") && text.contains("corr-9"),
        "{text}"
    );
    assert!(
        text.contains("\"from\":\"processing\"") && text.contains("\"to\":\"completed\""),
        "{text}"
    );
    for secret in ["PAYLOAD-SECRET", "RESULT-SECRET", key, token.as_str()] {
        assert!(!text.contains(secret), "{secret} leaked into logs");
    }
}

#[tokio::test]
async fn exactly_one_of_many_concurrent_claims_acquires() {
    let app = spawn_app().await;
    let mut tasks = vec![];
    for i in 0..32 {
        let api = app.api.clone();
        tasks.push(tokio::spawn(async move {
            api.claim(
                "race",
                "evt_race",
                json!({"payload": {"n": 1}, "owner": format!("w{i}")}),
            )
            .await
            .status
        }));
    }
    let mut statuses = vec![];
    for t in tasks {
        statuses.push(t.await.expect("join"));
    }
    assert_eq!(
        statuses.iter().filter(|s| **s == 201).count(),
        1,
        "{statuses:?}"
    );
    assert!(
        statuses.iter().all(|s| *s == 201 || *s == 409),
        "{statuses:?}"
    );
}

/// The real store, counting the full recounts (`stats`) made through it.
#[derive(Debug)]
struct CountingStats {
    inner: Arc<dyn Store>,
    stats_calls: AtomicUsize,
}

/// What every method of the store returns.
type StoreResult<T> = Result<T, StoreError>;

#[async_trait::async_trait]
impl Store for CountingStats {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }
    async fn execute(
        &self,
        ns: &Namespace,
        key: &Key,
        op: Op,
        cx: ExecCtx,
    ) -> StoreResult<Executed> {
        self.inner.execute(ns, key, op, cx).await
    }
    async fn get(&self, ns: &Namespace, key: &Key) -> StoreResult<Option<RecordWithEvents>> {
        self.inner.get(ns, key).await
    }
    async fn list(&self, ns: &Namespace, query: &ListQuery) -> StoreResult<Page> {
        self.inner.list(ns, query).await
    }
    async fn namespace(&self, ns: &Namespace) -> StoreResult<NamespaceInfo> {
        self.inner.namespace(ns).await
    }
    async fn namespace_stats(
        &self,
        ns: &Namespace,
        now: Timestamp,
    ) -> StoreResult<idem::NamespaceStats> {
        self.inner.namespace_stats(ns, now).await
    }
    async fn update_namespace(
        &self,
        ns: &Namespace,
        change: NamespaceChange,
        now: Timestamp,
    ) -> StoreResult<NamespaceInfo> {
        self.inner.update_namespace(ns, change, now).await
    }
    async fn sweep_once(&self, now: Timestamp, batch: usize) -> StoreResult<SweepReport> {
        self.inner.sweep_once(now, batch).await
    }
    async fn retention_once(&self, now: Timestamp, batch: usize) -> StoreResult<RetentionReport> {
        self.inner.retention_once(now, batch).await
    }
    async fn stats(&self, now: Timestamp) -> StoreResult<Stats> {
        self.stats_calls.fetch_add(1, Ordering::SeqCst);
        self.inner.stats(now).await
    }
    async fn due_alerts(
        &self,
        now: Timestamp,
        limit: usize,
        lease_ms: i64,
    ) -> StoreResult<Vec<PendingAlert>> {
        self.inner.due_alerts(now, limit, lease_ms).await
    }
    async fn finish_alert(
        &self,
        id: i64,
        outcome: AlertOutcome,
        now: Timestamp,
    ) -> StoreResult<()> {
        self.inner.finish_alert(id, outcome, now).await
    }
    async fn create_token(&self, token: NewApiToken, now: Timestamp) -> StoreResult<()> {
        self.inner.create_token(token, now).await
    }
    async fn find_token(&self, secret_hash: &str) -> StoreResult<Option<ApiToken>> {
        self.inner.find_token(secret_hash).await
    }
    async fn token_count(&self) -> StoreResult<u64> {
        self.inner.token_count().await
    }
    async fn list_tokens(&self) -> StoreResult<Vec<ApiToken>> {
        self.inner.list_tokens().await
    }
    async fn revoke_token(&self, id: i64, now: Timestamp) -> StoreResult<bool> {
        self.inner.revoke_token(id, now).await
    }
    async fn touch_token(&self, id: i64, now: Timestamp) -> StoreResult<()> {
        self.inner.touch_token(id, now).await
    }
    async fn ping(&self) -> StoreResult<()> {
        self.inner.ping().await
    }
    async fn outbox_enqueue(
        &self,
        item: idem::NewOutboxItem,
        now: Timestamp,
    ) -> StoreResult<Option<i64>> {
        self.inner.outbox_enqueue(item, now).await
    }
    async fn outbox_claim(&self, claim: idem::OutboxClaim) -> StoreResult<Vec<idem::OutboxItem>> {
        self.inner.outbox_claim(claim).await
    }
    async fn outbox_finish(&self, finish: idem::OutboxFinish) -> StoreResult<bool> {
        self.inner.outbox_finish(finish).await
    }
    async fn outbox_item(&self, id: i64) -> StoreResult<Option<idem::OutboxItem>> {
        self.inner.outbox_item(id).await
    }
    async fn secret_add(&self, new: idem::NewSecret, now: Timestamp) -> StoreResult<i64> {
        self.inner.secret_add(new, now).await
    }
    async fn secrets(
        &self,
        owner: &idem::SecretOwner,
        now: Timestamp,
    ) -> StoreResult<Vec<idem::StoredSecret>> {
        self.inner.secrets(owner, now).await
    }
    async fn secrets_remove(&self, owner: &idem::SecretOwner) -> StoreResult<usize> {
        self.inner.secrets_remove(owner).await
    }
    async fn namespace_names(&self) -> StoreResult<Vec<String>> {
        self.inner.namespace_names().await
    }
    async fn namespace_activity(
        &self,
        ns: &Namespace,
        now: Timestamp,
    ) -> StoreResult<idem::NamespaceActivity> {
        self.inner.namespace_activity(ns, now).await
    }
    async fn review_queue(
        &self,
        q: &idem::ReviewQuery,
        now: Timestamp,
    ) -> StoreResult<idem::ReviewPage> {
        self.inner.review_queue(q, now).await
    }
    async fn session_create(&self, s: idem::NewConsoleSession) -> StoreResult<()> {
        self.inner.session_create(s).await
    }
    async fn session_find(
        &self,
        id_hash: &str,
        now: Timestamp,
    ) -> StoreResult<Option<idem::ConsoleSession>> {
        self.inner.session_find(id_hash, now).await
    }
    async fn session_delete(&self, id_hash: &str) -> StoreResult<()> {
        self.inner.session_delete(id_hash).await
    }
    async fn source_put(&self, w: idem::SourceWrite, now: Timestamp) -> StoreResult<bool> {
        self.inner.source_put(w, now).await
    }
    async fn source_get(&self, name: &str) -> StoreResult<Option<idem::SourceRow>> {
        self.inner.source_get(name).await
    }
    async fn source_list(&self) -> StoreResult<Vec<idem::SourceRow>> {
        self.inner.source_list().await
    }
    async fn source_delete(&self, name: &str, force: bool) -> StoreResult<idem::SourceDelete> {
        self.inner.source_delete(name, force).await
    }
    async fn intake_event(&self, ns: &str, key: &str) -> StoreResult<Option<idem::IntakeEventRow>> {
        self.inner.intake_event(ns, key).await
    }
    async fn intake_list(&self, q: &idem::IntakeQuery) -> StoreResult<Vec<idem::IntakeEventRow>> {
        self.inner.intake_list(q).await
    }
    async fn intake_update(&self, u: idem::IntakeUpdate) -> StoreResult<()> {
        self.inner.intake_update(u).await
    }
    async fn pace_take(
        &self,
        source: &str,
        destination: &str,
        interval_ms: i64,
        now: idem::Timestamp,
    ) -> StoreResult<Option<idem::Timestamp>> {
        self.inner
            .pace_take(source, destination, interval_ms, now)
            .await
    }

    async fn intake_backlog(&self) -> StoreResult<Vec<(String, String, u64)>> {
        self.inner.intake_backlog().await
    }

    async fn intake_dead_letters(&self) -> StoreResult<Vec<(String, u64)>> {
        self.inner.intake_dead_letters().await
    }
    async fn action_put(&self, w: idem::ActionWrite, now: Timestamp) -> StoreResult<bool> {
        self.inner.action_put(w, now).await
    }
    async fn action_get(&self, ns: &str, name: &str) -> StoreResult<Option<idem::ActionRow>> {
        self.inner.action_get(ns, name).await
    }
    async fn action_list(&self, ns: &str) -> StoreResult<Vec<idem::ActionRow>> {
        self.inner.action_list(ns).await
    }
    async fn action_delete(&self, ns: &str, name: &str) -> StoreResult<bool> {
        self.inner.action_delete(ns, name).await
    }
}

/// A janitor draining a backlog runs batch after batch: none of them may recount every
/// record (that made a big PostgreSQL ledger spend most of the janitor's time counting).
/// The gauges are recounted by their own step.
#[tokio::test]
async fn janitor_batches_do_not_recount_the_gauges() {
    let app = spawn_app().await;
    for i in 0..5 {
        let key = format!("k{i}");
        let t = Api::acquired(&app.claim("jg", &key, json!({})).await);
        app.complete("jg", &key, json!({"token": t})).await;
    }
    app.advance(31 * 24 * 3600 * 1000);
    let counting = Arc::new(CountingStats {
        inner: app.store.clone(),
        stats_calls: AtomicUsize::new(0),
    });
    let store: Arc<dyn Store> = counting.clone();
    let mut expired = 0;
    loop {
        let rep = idem_server::background::janitor_once(&store, app.now(), 2)
            .await
            .expect("janitor");
        expired += rep.results_expired;
        if !rep.full_batch {
            break;
        }
    }
    assert_eq!(expired, 5, "retention expired every record in batches of 2");
    assert_eq!(counting.stats_calls.load(Ordering::SeqCst), 0);
    let stats = idem_server::background::gauges_once(&store, app.now())
        .await
        .expect("gauges");
    assert_eq!(counting.stats_calls.load(Ordering::SeqCst), 1);
    assert_eq!(stats.records.get(idem::State::Completed), 5);
}

/// The value of one sample line (`name` with its labels, as rendered) in a scrape.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// Scrapes until `series` has the value `want` (the registry is process-wide and other
/// tests' servers scrape too) or a bound passes; returns the last value seen.
async fn scrape_until(app: &TestApp, series: &str, want: f64) -> Option<f64> {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let last = sample(&app.get("/metrics").await.text, series);
        if last == Some(want) || std::time::Instant::now() > deadline {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test]
async fn store_gauges_are_current_at_the_next_scrape_on_both_stores() {
    for backend in backends() {
        let app = spawn_on(backend).await;
        let t = Api::acquired(&app.claim("g", "k1", json!({})).await);
        // A worker that hangs: its processing record ages with the clock, seen at once.
        app.advance(90_000);
        let oldest = scrape_until(&app, "idem_oldest_processing_seconds", 90.0).await;
        assert_eq!(oldest, Some(90.0), "{backend:?}");
        assert_eq!(
            scrape_until(&app, "idem_records{state=\"processing\"}", 1.0).await,
            Some(1.0),
            "{backend:?}"
        );
        // Into the review queue: the depth moves within the one-second scrape cache.
        let r = app
            .fail(
                "g",
                "k1",
                json!({"token": t, "error": {"category": "timeout", "message": "read timed out"}}),
            )
            .await;
        assert_eq!(r.body["state"], "needs_review", "{}", r.text);
        let started = std::time::Instant::now();
        assert_eq!(
            scrape_until(&app, "idem_review_queue_depth", 1.0).await,
            Some(1.0),
            "{backend:?}"
        );
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "{backend:?}"
        );
        assert_eq!(
            scrape_until(&app, "idem_oldest_processing_seconds", 0.0).await,
            Some(0.0)
        );
        // The operator resolves the last item: the queue reads empty at the next scrape.
        let r = app
            .resolve(
                "g",
                "k1",
                json!({"action": "completed", "note": "charged once, checked in Stripe"}),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
        let started = std::time::Instant::now();
        assert_eq!(
            scrape_until(&app, "idem_review_queue_depth", 0.0).await,
            Some(0.0),
            "{backend:?}"
        );
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "{backend:?}"
        );
        assert_eq!(
            scrape_until(&app, "idem_records{state=\"completed\"}", 1.0).await,
            Some(1.0)
        );
        assert_eq!(
            scrape_until(&app, "idem_records{state=\"needs_review\"}", 0.0).await,
            Some(0.0)
        );
    }
}
