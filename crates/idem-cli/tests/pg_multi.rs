//! Several real `idem serve` processes on one PostgreSQL ledger, over HTTP (issue 4):
//!
//! 1. three instances, one database: 200 concurrent claims of 20 keys → one `acquired` each;
//! 2. fencing across instances: a reclaim on one instance fences the old token on another;
//! 3. outage: a private cluster stopped under a running instance → fast 503
//!    `store_unavailable`, `/readyz` red, recovery without restarting idem.
//!
//! Every test is skipped (with a note on stderr) unless `IDEM_TEST_PG` is set to an admin URL
//! such as `postgres://postgres@127.0.0.1:5432/postgres`. Each test works in a fresh database
//! `idem_t_<random>` dropped afterwards; the outage test never touches that server at all: it
//! creates, stops and restarts its own cluster in a temp dir.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_testkit::cluster::Cluster;
use idem_testkit::pg::{admin_url_or_skip, PgDb};
use idem_testkit::process::{clean_command, free_port};
use reqwest::StatusCode;
use serde_json::{json, Value};

/// Upper bound of any single HTTP request a test makes (a hang fails the test, never blocks it).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(REQUEST_TIMEOUT)
        .no_proxy()
        .build()
        .expect("HTTP client")
}

/// One `idem serve` process on a loopback port; killed on drop.
struct Serve {
    name: String,
    url: String,
    log: PathBuf,
    child: Child,
    _dir: tempfile::TempDir,
}

impl Serve {
    async fn start(name: &str, db_url: &str) -> Serve {
        let dir = tempfile::tempdir().expect("tempdir for the server log");
        let log = dir.path().join(format!("{name}.log"));
        let addr = format!("127.0.0.1:{}", free_port());
        let child = clean_command(env!("CARGO_BIN_EXE_idem"))
            .args(["serve", "--listen", &addr, "--db", db_url])
            .args(["--janitor-interval", "200ms"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("server log file"))
            .spawn()
            .expect("spawn idem serve");
        let mut s = Serve {
            name: name.to_owned(),
            url: format!("http://{addr}"),
            log,
            child,
            _dir: dir,
        };
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .no_proxy()
            .build()
            .expect("HTTP client");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(r) = http.get(format!("{}/healthz", s.url)).send().await {
                if r.status() == StatusCode::OK {
                    return s;
                }
            }
            if let Ok(Some(st)) = s.child.try_wait() {
                panic!("{name}: idem serve exited with {st}:\n{}", s.log_text());
            }
            assert!(
                Instant::now() < deadline,
                "{name}: idem serve did not answer /healthz within 30 s:\n{}",
                s.log_text()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn child_alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn key_url(&self, ns: &str, key: &str, verb: &str) -> String {
        let base = format!("{}/v1/namespaces/{ns}/keys/{key}", self.url);
        if verb.is_empty() {
            base
        } else {
            format!("{base}/{verb}")
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- log of {} ---\n{}", self.name, self.log_text());
        }
    }
}

/// A response read in full: status, the headers that matter, JSON body.
#[derive(Debug, Clone)]
struct Answer {
    status: StatusCode,
    content_type: String,
    replayed: Option<String>,
    body: Value,
}

async fn read(resp: reqwest::Response) -> Answer {
    let status = resp.status();
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let content_type = header("content-type").unwrap_or_default();
    let replayed = header("idempotent-replayed");
    let text = resp.text().await.expect("read the response body");
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    Answer {
        status,
        content_type,
        replayed,
        body,
    }
}

async fn post(http: &reqwest::Client, url: &str, body: Value) -> Answer {
    let resp = http
        .post(url)
        .json(&body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST {url}: {e}"));
    read(resp).await
}

async fn get(http: &reqwest::Client, url: &str) -> Answer {
    let resp = http
        .get(url)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    read(resp).await
}

fn count_events(record: &Value, kind: &str) -> usize {
    record["events"]
        .as_array()
        .map_or(0, |es| es.iter().filter(|e| e["type"] == kind).count())
}

fn assert_problem(a: &Answer, status: StatusCode, code: &str, what: &str) {
    assert_eq!(a.status, status, "{what}: {a:?}");
    assert!(
        a.content_type.starts_with("application/problem+json"),
        "{what}: content type {:?}: {a:?}",
        a.content_type
    );
    assert_eq!(a.body["code"], code, "{what}: {a:?}");
}

// ------------------------------------------------------------------ 1. three instances

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_instances_one_database_one_acquirer_per_key() {
    let Some(admin) = admin_url_or_skip("three_instances_one_database_one_acquirer_per_key") else {
        return;
    };
    let db = PgDb::create_on(&admin);
    let servers = Arc::new(vec![
        Serve::start("idem-a", db.url()).await,
        Serve::start("idem-b", db.url()).await,
        Serve::start("idem-c", db.url()).await,
    ]);
    let http = client();
    const KEYS: usize = 20;
    const CLAIMS: usize = 200;
    let ns = "multi";

    // All 200 claims wait at the barrier, then go out together.
    let barrier = Arc::new(tokio::sync::Barrier::new(CLAIMS));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..CLAIMS {
        let (servers, http, barrier) = (servers.clone(), http.clone(), barrier.clone());
        tasks.spawn(async move {
            let key = format!("order-{}:charge", i % KEYS);
            let s = &servers[i % servers.len()];
            let body =
                json!({"payload": {"order": i % KEYS, "amount": 100}, "owner": format!("w{i}")});
            barrier.wait().await;
            let started = Instant::now();
            let claim = post(&http, &s.key_url(ns, &key, "claim"), body).await;
            let took = started.elapsed();
            // The acquirer completes at once (on the same instance), so that later claims
            // see `completed` while earlier ones saw `in_flight`.
            let mut result = None;
            if claim.status == StatusCode::CREATED {
                let token = claim.body["token"].as_str().expect("acquired has a token");
                let r = json!({"charge": format!("ch_{i}")});
                let done = post(
                    &http,
                    &s.key_url(ns, &key, "complete"),
                    json!({"token": token, "result": r, "external_ref": format!("ch_{i}")}),
                )
                .await;
                assert_eq!(done.status, StatusCode::OK, "complete {key}: {done:?}");
                assert_eq!(done.body["record"]["state"], "completed", "{done:?}");
                result = Some(r);
            }
            (i, key, claim, took, result)
        });
    }

    let mut per_key: HashMap<String, Vec<(usize, Answer)>> = HashMap::new();
    let mut results: HashMap<String, Value> = HashMap::new();
    let mut slowest = Duration::ZERO;
    let deadline = Instant::now() + Duration::from_secs(120);
    while let Some(joined) = tokio::time::timeout_at(deadline.into(), tasks.join_next())
        .await
        .expect("all 200 claims answered within 120 s")
    {
        let (i, key, claim, took, result) = joined.expect("claim task");
        slowest = slowest.max(took);
        if let Some(r) = result {
            results.insert(key.clone(), r);
        }
        per_key.entry(key).or_default().push((i, claim));
    }
    assert_eq!(per_key.len(), KEYS);

    let (mut in_flight, mut replayed) = (0usize, 0usize);
    for (key, answers) in &per_key {
        assert_eq!(answers.len(), CLAIMS / KEYS, "{key}");
        let acquired: Vec<&(usize, Answer)> = answers
            .iter()
            .filter(|(_, a)| a.status == StatusCode::CREATED)
            .collect();
        assert_eq!(
            acquired.len(),
            1,
            "{key}: exactly one acquired, got {acquired:?}"
        );
        let (_, acq) = acquired[0];
        assert_eq!(acq.body["outcome"], "acquired", "{acq:?}");
        assert_eq!(acq.body["resumed"], false, "{acq:?}");
        assert_eq!(acq.body["record"]["attempt"], 1, "{acq:?}");
        assert!(
            acq.replayed.is_none(),
            "acquired is never replayed: {acq:?}"
        );
        let result = &results[key];
        let (mut key_in_flight, mut key_replayed) = (0usize, 0usize);
        for (i, a) in answers {
            match a.status {
                StatusCode::CREATED => {}
                StatusCode::CONFLICT => {
                    assert_eq!(a.body["outcome"], "in_flight", "claim {i} of {key}: {a:?}");
                    assert_eq!(a.body["record"]["state"], "processing", "{a:?}");
                    assert!(a.body["retry_after_ms"].as_u64().is_some(), "{a:?}");
                    assert!(a.body.get("token").is_none(), "{a:?}");
                    assert!(a.replayed.is_none(), "{a:?}");
                    key_in_flight += 1;
                }
                StatusCode::OK => {
                    assert_eq!(a.body["outcome"], "completed", "claim {i} of {key}: {a:?}");
                    assert_eq!(a.replayed.as_deref(), Some("true"), "{a:?}");
                    assert_eq!(
                        &a.body["record"]["result"], result,
                        "replayed result: {a:?}"
                    );
                    assert!(a.body.get("token").is_none(), "{a:?}");
                    key_replayed += 1;
                }
                other => panic!("claim {i} of {key}: unexpected {other}: {a:?}"),
            }
        }
        in_flight += key_in_flight;
        replayed += key_replayed;

        // The ledger, read through any instance, agrees.
        let reader = &servers[key.len() % servers.len()];
        let rec = get(&http, &reader.key_url(ns, key, "")).await;
        assert_eq!(rec.status, StatusCode::OK, "{rec:?}");
        assert_eq!(rec.body["record"]["state"], "completed", "{key}: {rec:?}");
        assert_eq!(rec.body["record"]["attempt"], 1, "{key}: {rec:?}");
        assert_eq!(&rec.body["record"]["result"], result, "{key}: {rec:?}");
        assert_eq!(count_events(&rec.body, "acquired"), 1, "{key}: {rec:?}");
        assert_eq!(count_events(&rec.body, "resumed"), 0, "{key}: {rec:?}");
        assert_eq!(count_events(&rec.body, "completed"), 1, "{key}: {rec:?}");
        assert_eq!(
            count_events(&rec.body, "in_flight"),
            key_in_flight,
            "{key}: one in_flight event per in_flight answer: {rec:?}"
        );
        assert_eq!(
            count_events(&rec.body, "duplicate_hit"),
            key_replayed,
            "{key}: one duplicate_hit event per replay: {rec:?}"
        );
    }
    eprintln!(
        "200 claims over 3 instances: 20 acquired, {in_flight} in_flight, {replayed} \
         completed replays; slowest claim {slowest:?}"
    );
    assert_eq!(in_flight + replayed, CLAIMS - KEYS);
    assert!(in_flight > 0, "no claim of the burst saw in_flight");

    // How many claims of the burst arrive after their key's completion depends on scheduling
    // (often a handful, sometimes none), so the replay path is also checked deterministically:
    // one more claim per key, round-robin over the instances, now that every key is completed.
    for (k, key) in (0..KEYS).map(|k| (k, format!("order-{k}:charge"))) {
        let s = &servers[k % servers.len()];
        let body = json!({"payload": {"order": k, "amount": 100}});
        let a = post(&http, &s.key_url(ns, &key, "claim"), body).await;
        assert_eq!(a.status, StatusCode::OK, "{key} on {}: {a:?}", s.name);
        assert_eq!(a.body["outcome"], "completed", "{a:?}");
        assert_eq!(a.replayed.as_deref(), Some("true"), "{a:?}");
        assert_eq!(&a.body["record"]["result"], &results[&key], "{a:?}");
        assert_eq!(a.body["record"]["attempt"], 1, "{a:?}");
    }
    drop(servers);
    drop(db);
}

// ------------------------------------------------------------------ 2. fencing

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_on_one_instance_fences_the_old_token_on_another() {
    let Some(admin) = admin_url_or_skip("reclaim_on_one_instance_fences_the_old_token_on_another")
    else {
        return;
    };
    let db = PgDb::create_on(&admin);
    let a = Serve::start("idem-a", db.url()).await;
    let b = Serve::start("idem-b", db.url()).await;
    let c = Serve::start("idem-c", db.url()).await;
    let http = client();
    let (ns, key) = ("fence", "evt_42:email");

    let first = post(
        &http,
        &a.key_url(ns, key, "claim"),
        json!({"lease_ms": 200, "owner": "worker-a"}),
    )
    .await;
    assert_eq!(first.status, StatusCode::CREATED, "{first:?}");
    assert_eq!(first.body["resumed"], false, "{first:?}");
    let old = first.body["token"]
        .as_str()
        .expect("first claim token")
        .to_owned();

    // Wait out the lease, then reclaim on B (bounded: a claim still inside the lease is
    // `in_flight`, so try again a few times).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let second = loop {
        let r = post(
            &http,
            &b.key_url(ns, key, "claim"),
            json!({"owner": "worker-b"}),
        )
        .await;
        if r.status == StatusCode::CONFLICT
            && r.body["outcome"] == "in_flight"
            && Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        break r;
    };
    assert_eq!(second.status, StatusCode::CREATED, "{second:?}");
    assert_eq!(second.body["outcome"], "acquired", "{second:?}");
    assert_eq!(second.body["resumed"], true, "{second:?}");
    assert_eq!(second.body["record"]["attempt"], 2, "{second:?}");
    let new = second.body["token"]
        .as_str()
        .expect("second claim token")
        .to_owned();
    assert_ne!(old, new, "a reclaim hands out a new token");

    // The old holder reports through yet another instance: fenced.
    let stale = post(
        &http,
        &c.key_url(ns, key, "complete"),
        json!({"token": old, "result": {"by": "a"}}),
    )
    .await;
    assert_problem(
        &stale,
        StatusCode::CONFLICT,
        "lease_lost",
        "complete with the old token",
    );
    let mid = get(&http, &c.key_url(ns, key, "")).await;
    assert_eq!(mid.body["record"]["state"], "processing", "{mid:?}");
    assert_eq!(mid.body["record"]["attempt"], 2, "{mid:?}");
    assert!(mid.body["record"]["result"].is_null(), "{mid:?}");
    assert_eq!(count_events(&mid.body, "lease_lost"), 1, "{mid:?}");

    // The new holder completes through the first instance.
    let done = post(
        &http,
        &a.key_url(ns, key, "complete"),
        json!({"token": new, "result": {"by": "b"}}),
    )
    .await;
    assert_eq!(done.status, StatusCode::OK, "{done:?}");
    assert_eq!(done.body["record"]["state"], "completed", "{done:?}");
    assert_eq!(done.body["record"]["attempt"], 2, "{done:?}");
    assert_eq!(
        done.body["record"]["result"],
        json!({"by": "b"}),
        "{done:?}"
    );

    // And the old token stays fenced after completion too.
    let late = post(
        &http,
        &b.key_url(ns, key, "complete"),
        json!({"token": old, "result": {"by": "b"}}),
    )
    .await;
    assert_problem(
        &late,
        StatusCode::CONFLICT,
        "lease_lost",
        "old token after completion",
    );
    drop((a, b, c));
    drop(db);
}

// ------------------------------------------------------------------ 3. outage

/// One request during the outage: answered quickly, and with a 503 `store_unavailable`.
async fn expect_unavailable(what: &str, req: reqwest::RequestBuilder) {
    let started = Instant::now();
    let resp = req.send().await;
    let took = started.elapsed();
    let a = read(resp.unwrap_or_else(|e| panic!("{what} during the outage: {e}"))).await;
    assert!(
        took < Duration::from_secs(12),
        "{what} during the outage took {took:?}: {a:?}"
    );
    assert!(
        !a.status.is_success(),
        "{what} during the outage answered {}: {a:?}",
        a.status
    );
    assert_problem(
        &a,
        StatusCode::SERVICE_UNAVAILABLE,
        "store_unavailable",
        what,
    );
    eprintln!("{what} during the outage: 503 store_unavailable in {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_outage_answers_503_fast_and_recovers_without_restart() {
    if admin_url_or_skip("database_outage_answers_503_fast_and_recovers_without_restart").is_none()
    {
        return;
    }
    let Some(cluster) = Cluster::create() else {
        return;
    };
    let db = PgDb::create_on(&cluster.admin_url());
    let mut s = Serve::start("idem-outage", db.url()).await;
    let http = client();
    let ns = "outage";

    let before = post(
        &http,
        &s.key_url(ns, "before", "claim"),
        json!({"owner": "w1"}),
    )
    .await;
    assert_eq!(before.status, StatusCode::CREATED, "{before:?}");
    let token = before.body["token"]
        .as_str()
        .expect("claim token")
        .to_owned();
    let ready = get(&http, &format!("{}/readyz", s.url)).await;
    assert_eq!(ready.status, StatusCode::OK, "{ready:?}");

    assert!(cluster.stop(), "stop the private cluster");
    let stopped_at = Instant::now();

    // Claims of new and of held keys, a read and a worker write: all 503, all fast.
    for i in 0..3 {
        let url = s.key_url(ns, &format!("during-{i}"), "claim");
        expect_unavailable(
            &format!("claim during-{i}"),
            http.post(url).json(&json!({})),
        )
        .await;
    }
    expect_unavailable(
        "claim of the held key",
        http.post(s.key_url(ns, "before", "claim")).json(&json!({})),
    )
    .await;
    expect_unavailable("GET record", http.get(s.key_url(ns, "before", ""))).await;
    expect_unavailable(
        "heartbeat",
        http.post(s.key_url(ns, "before", "heartbeat"))
            .json(&json!({"token": token})),
    )
    .await;

    // Readiness turns red, liveness stays green.
    let started = Instant::now();
    let ready = get(&http, &format!("{}/readyz", s.url)).await;
    assert!(
        !ready.status.is_success(),
        "/readyz during the outage: {ready:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(12), "/readyz slow");
    let health = get(&http, &format!("{}/healthz", s.url)).await;
    assert_eq!(health.status, StatusCode::OK, "/healthz: {health:?}");
    eprintln!(
        "outage checks done {:?} after the stop",
        stopped_at.elapsed()
    );

    assert!(cluster.start(), "start the private cluster again");
    let restarted_at = Instant::now();

    // Ready again within ~20 s, without restarting idem.
    let deadline = restarted_at + Duration::from_secs(20);
    loop {
        let r = get(&http, &format!("{}/readyz", s.url)).await;
        if r.status == StatusCode::OK {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "/readyz still {} 20 s after PostgreSQL came back: {r:?}",
            r.status
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!("ready again {:?} after the restart", restarted_at.elapsed());
    assert!(
        s.child_alive(),
        "the same idem process served before and after"
    );

    // Claims work again; nothing was written for the refused ones.
    let after = post(&http, &s.key_url(ns, "after", "claim"), json!({})).await;
    assert_eq!(after.status, StatusCode::CREATED, "{after:?}");
    let during = get(&http, &s.key_url(ns, "during-0", "")).await;
    assert_problem(
        &during,
        StatusCode::NOT_FOUND,
        "not_found",
        "a key refused during the outage",
    );
    // The work acknowledged before the outage is intact; its holder completes it.
    let held = get(&http, &s.key_url(ns, "before", "")).await;
    assert_eq!(held.status, StatusCode::OK, "{held:?}");
    assert_eq!(held.body["record"]["state"], "processing", "{held:?}");
    assert_eq!(held.body["record"]["attempt"], 1, "{held:?}");
    let done = post(
        &http,
        &s.key_url(ns, "before", "complete"),
        json!({"token": token, "result": {"ok": true}}),
    )
    .await;
    assert_eq!(done.status, StatusCode::OK, "{done:?}");
    assert_eq!(done.body["record"]["state"], "completed", "{done:?}");
    let replay = post(&http, &s.key_url(ns, "before", "claim"), json!({})).await;
    assert_eq!(replay.status, StatusCode::OK, "{replay:?}");
    assert_eq!(replay.body["outcome"], "completed", "{replay:?}");
    assert_eq!(replay.replayed.as_deref(), Some("true"), "{replay:?}");

    drop(s);
    drop(db);
    drop(cluster);
}
