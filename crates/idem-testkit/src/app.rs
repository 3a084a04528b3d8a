//! `spawn_app()`: a real server on 127.0.0.1:0 over a fresh SQLite file, with typed helpers.
//! `spawn_on(Backend::Postgres, …)`: the same over a fresh PostgreSQL database (created from
//! `IDEM_TEST_PG`, dropped when the app is dropped); `backends()` lists what this run has.
//!
//! It drives the server only through its public entry point (`idem_server::run`) and a real
//! socket, so a test sees exactly what a client sees; it must never reach into handlers.

use std::future::Future;

use std::sync::Arc;
use std::time::Duration;

use idem::{Clock, NewApiToken, Role, Store, TestClock, Timestamp};

use crate::pg::PgDb;
use reqwest::header::HeaderMap;
use serde_json::{json, Value};
use tokio::sync::oneshot;

pub struct Options {
    /// Create these tokens (role, scope) before the server starts; secrets in `TestApp::tokens`.
    pub tokens: Vec<(Role, &'static str)>,
    pub alert_interval: Duration,
    pub body_limit: usize,
    /// Policy patches applied at start, as from the config file.
    pub namespaces: Vec<(&'static str, Value)>,
    /// The store under the server.
    pub backend: Backend,
    /// Ledger URL given as is (wins over `backend`); `None`: a fresh one on `backend`.
    pub db: Option<String>,
    /// Effects: the cap of a kept response body.
    pub max_response_bytes: usize,
    /// Connection limits (timeouts, head size, connections).
    pub http: idem_server::conn::HttpLimits,
}

/// Which store a test server runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// SQLite always; PostgreSQL too when `IDEM_TEST_PG` is set (CI sets it). With
/// `IDEM_TEST_SKIP_SQLITE=1` only PostgreSQL (the CI run through PgBouncer, which has nothing to
/// add on SQLite).
pub fn backends() -> Vec<Backend> {
    let mut v = Vec::new();
    if std::env::var("IDEM_TEST_SKIP_SQLITE").as_deref() != Ok("1") {
        v.push(Backend::Sqlite);
    }
    if crate::pg::admin_url().is_some() {
        v.push(Backend::Postgres);
    } else {
        eprintln!("PostgreSQL part skipped: IDEM_TEST_PG is not set");
    }
    v
}

impl Default for Options {
    fn default() -> Self {
        Options {
            tokens: vec![],
            alert_interval: Duration::from_secs(3600),
            body_limit: 1 << 20,
            namespaces: vec![],
            backend: Backend::Sqlite,
            db: None,
            max_response_bytes: 256 * 1024,
            http: idem_server::conn::HttpLimits::default(),
        }
    }
}

pub struct TestApp {
    pub api: Api,
    pub store: Arc<dyn Store>,
    pub clock: TestClock,
    pub tokens: Vec<String>,
    stop: Option<oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    _dir: tempfile::TempDir,
    _pg: Option<PgDb>,
}

impl std::ops::Deref for TestApp {
    type Target = Api;
    fn deref(&self) -> &Api {
        &self.api
    }
}

pub async fn spawn_app() -> TestApp {
    spawn_with(Options::default()).await
}

/// A server on `backend` with default options.
pub async fn spawn_on(backend: Backend) -> TestApp {
    spawn_with(Options {
        backend,
        ..Default::default()
    })
    .await
}

pub async fn spawn_with(opts: Options) -> TestApp {
    let dir = tempfile::tempdir().expect("tempdir");
    let (pg, url) = match (&opts.db, opts.backend) {
        (Some(url), _) => (None, url.clone()),
        (None, Backend::Sqlite) => (
            None,
            format!("sqlite://{}", dir.path().join("idem.db").display()),
        ),
        (None, Backend::Postgres) => {
            let db = PgDb::create("a server on PostgreSQL")
                .expect("Backend::Postgres needs IDEM_TEST_PG (see backends())");
            let url = db.url().to_owned();
            (Some(db), url)
        }
    };
    let store = idem::open_store(&url).await.expect("open store");
    let clock = TestClock::new(Timestamp(chrono::Utc::now().timestamp_millis()));
    let mut tokens = vec![];
    for (role, scope) in &opts.tokens {
        let secret = idem::generate_secret();
        store
            .create_token(
                NewApiToken {
                    secret_hash: idem::hash_secret(&secret),
                    role: *role,
                    scope: (*scope).to_owned(),
                    label: Some(format!("{}-{scope}", role.as_str())),
                    expires_at: None,
                },
                clock.now(),
            )
            .await
            .expect("create token");
        tokens.push(secret);
    }
    let ledger = idem::Ledger::with_clock(store.clone(), Arc::new(clock.clone()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let config = idem_server::Config {
        listen: addr,
        db: url,
        janitor_interval: Duration::from_secs(3600),
        alert_interval: opts.alert_interval,
        body_limit: opts.body_limit,
        max_response_bytes: opts.max_response_bytes,
        http: opts.http,
        namespaces: opts
            .namespaces
            .iter()
            .map(|(n, p)| ((*n).to_owned(), p.clone()))
            .collect(),
        ..Default::default()
    };
    let (tx, rx) = oneshot::channel::<()>();
    let server = tokio::spawn(idem_server::run(config, ledger, listener, async move {
        let _ = rx.await;
    }));
    let api = Api::new(format!("http://{addr}"), tokens.first().cloned());
    // Wait until it answers.
    for _ in 0..100 {
        if api.get("/healthz").await.status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    TestApp {
        api,
        store,
        clock,
        tokens,
        stop: Some(tx),
        server: Some(server),
        _dir: dir,
        _pg: pg,
    }
}

impl TestApp {
    /// An API client presenting another token (or none).
    pub fn as_token(&self, secret: Option<&str>) -> Api {
        Api::new(self.api.base.clone(), secret.map(str::to_owned))
    }
    pub fn advance(&self, ms: i64) {
        self.clock.advance_ms(ms);
    }
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }
    /// Stops the server gracefully and waits for it.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        match self.server.take() {
            Some(h) => h.await.expect("join"),
            None => Ok(()),
        }
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Value,
    pub text: String,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
    /// Asserts a problem+json error with this status and code; returns its body.
    #[track_caller]
    pub fn problem(&self, status: u16, code: &str) -> &Value {
        assert_eq!(self.status, status, "{}", self.text);
        assert_eq!(self.body["code"], code, "{}", self.text);
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json"),
            "{}",
            self.text
        );
        assert_eq!(self.body["status"], status);
        &self.body
    }
    #[track_caller]
    pub fn token(&self) -> String {
        self.body["token"]
            .as_str()
            .unwrap_or_else(|| panic!("no token in {}", self.text))
            .to_owned()
    }
}

/// Percent-encodes everything but unreserved characters (as the server's console does).
pub fn enc(s: &str) -> String {
    idem_server::percent::encode(s)
}

#[derive(Clone)]
pub struct Api {
    pub base: String,
    pub http: reqwest::Client,
    pub bearer: Option<String>,
}

impl Api {
    pub fn new(base: String, bearer: Option<String>) -> Self {
        Api {
            base,
            http: reqwest::Client::new(),
            bearer,
        }
    }

    pub async fn send(&self, req: reqwest::RequestBuilder) -> Resp {
        let req = match &self.bearer {
            Some(t) => req.bearer_auth(t),
            None => req,
        };
        let resp = req.send().await.expect("request");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let text = resp.text().await.expect("body");
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Resp {
            status,
            headers,
            body,
            text,
        }
    }

    pub async fn get(&self, path: &str) -> Resp {
        self.send(self.http.get(format!("{}{path}", self.base)))
            .await
    }
    pub async fn post(&self, path: &str, body: Value) -> Resp {
        self.send(self.http.post(format!("{}{path}", self.base)).json(&body))
            .await
    }
    pub async fn post_raw(&self, path: &str, body: impl Into<reqwest::Body>) -> Resp {
        self.send(self.http.post(format!("{}{path}", self.base)).body(body))
            .await
    }
    /// Posts `text` as it is, as `application/json` (a body whose exact bytes matter, such
    /// as the order of its members).
    pub async fn post_json_text(&self, path: &str, text: &str) -> Resp {
        self.send(
            self.http
                .post(format!("{}{path}", self.base))
                .header("content-type", "application/json")
                .body(text.to_owned()),
        )
        .await
    }
    pub async fn patch(&self, path: &str, body: Value) -> Resp {
        self.send(self.http.patch(format!("{}{path}", self.base)).json(&body))
            .await
    }

    pub fn key_path(ns: &str, key: &str) -> String {
        format!("/v1/namespaces/{ns}/keys/{}", enc(key))
    }
    pub async fn claim(&self, ns: &str, key: &str, body: Value) -> Resp {
        self.post(&format!("{}/claim", Self::key_path(ns, key)), body)
            .await
    }
    pub async fn prepare(&self, ns: &str, key: &str, body: Value) -> Resp {
        self.post(&format!("{}/prepare", Self::key_path(ns, key)), body)
            .await
    }
    pub async fn heartbeat(&self, ns: &str, key: &str, body: Value) -> Resp {
        self.post(&format!("{}/heartbeat", Self::key_path(ns, key)), body)
            .await
    }
    pub async fn complete(&self, ns: &str, key: &str, body: Value) -> Resp {
        self.post(&format!("{}/complete", Self::key_path(ns, key)), body)
            .await
    }
    pub async fn fail(&self, ns: &str, key: &str, body: Value) -> Resp {
        self.post(&format!("{}/fail", Self::key_path(ns, key)), body)
            .await
    }
    pub async fn resolve(&self, ns: &str, key: &str, body: Value) -> Resp {
        self.post(&format!("{}/resolve", Self::key_path(ns, key)), body)
            .await
    }
    pub async fn approve(&self, ns: &str, key: &str, body: Value) -> Resp {
        self.post(&format!("{}/approve", Self::key_path(ns, key)), body)
            .await
    }
    pub async fn reject(&self, ns: &str, key: &str, body: Value) -> Resp {
        self.post(&format!("{}/reject", Self::key_path(ns, key)), body)
            .await
    }
    pub async fn record(&self, ns: &str, key: &str) -> Resp {
        self.get(&Self::key_path(ns, key)).await
    }
    pub async fn list(&self, ns: &str, query: &str) -> Resp {
        self.get(&format!("/v1/namespaces/{ns}/keys?{query}")).await
    }
    pub async fn namespace(&self, ns: &str) -> Resp {
        self.get(&format!("/v1/namespaces/{ns}")).await
    }
    pub async fn patch_namespace(&self, ns: &str, body: Value) -> Resp {
        self.patch(&format!("/v1/namespaces/{ns}"), body).await
    }
    pub async fn pause(&self, ns: &str) -> Resp {
        self.post(&format!("/v1/namespaces/{ns}/pause"), json!({}))
            .await
    }
    pub async fn resume(&self, ns: &str) -> Resp {
        self.post(&format!("/v1/namespaces/{ns}/resume"), json!({}))
            .await
    }
    pub async fn derive(&self, body: Value) -> Resp {
        self.post("/v1/keys/derive", body).await
    }

    /// Claims and asserts `acquired`; returns the token.
    #[track_caller]
    pub fn acquired(r: &Resp) -> String {
        assert_eq!(r.status, 201, "{}", r.text);
        assert_eq!(r.body["outcome"], "acquired", "{}", r.text);
        r.token()
    }

    /// Event types of a record, oldest first.
    pub async fn event_types(&self, ns: &str, key: &str) -> Vec<String> {
        let r = self.record(ns, key).await;
        r.body["events"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|e| e["type"].as_str().unwrap_or("?").to_owned())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Polls `f` until it returns true or `timeout` passes.
pub async fn eventually<F, Fut>(timeout: Duration, mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if f().await {
            return true;
        }
        if tokio::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
