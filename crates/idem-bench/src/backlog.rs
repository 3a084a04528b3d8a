//! `idem bench --backlog N`: how fast a backlog of webhook events drains into n8n once it is
//! reachable again, while new events keep coming in, and what the backlog costs the server
//! in memory.
//!
//! One run on a fresh ledger: a Stripe source forwarding to a loopback sink; the source's
//! namespace is paused (deliveries held, events still accepted) while `N` signed 1 KiB
//! events are posted; the server's RSS is read with the whole backlog stored; then the
//! namespace is resumed and the backlog drains while one connection goes on posting fresh
//! events, paced at about 100 per second (new traffic next to the drain, not a second
//! saturating load); the run ends when every accepted event reached the sink. The sink records
//! each forward's `Idem-Key`, so the run also checks that no accepted event was lost and
//! none was delivered twice. It only ever binds and calls 127.0.0.1.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;

use crate::{dest, http, intake_body, stripe_headers, Backend, ServerProcess};

/// The backlog run's source (its namespace has the same name).
const SOURCE: &str = "bench-backlog";
/// The source's `forward.concurrency` (deliveries in flight): the default 4 is sized for an
/// n8n that should not be flooded; a drain at speed is what a user raises it for.
pub const FORWARD_CONCURRENCY: u32 = 32;

/// The figures of one backlog run.
#[derive(Debug, Clone, Serialize)]
pub struct BacklogReport {
    pub backend: Backend,
    /// Events in the backlog when deliveries resumed.
    pub backlog: u64,
    /// Connections that filled the backlog.
    pub clients: usize,
    /// The source's `forward.concurrency`.
    pub forward_concurrency: u32,
    /// Filling the backlog (deliveries paused): events accepted per second.
    pub fill_per_s: f64,
    /// The server's resident memory with the whole backlog stored, before the drain.
    pub rss_mib_with_backlog: f64,
    /// From the resume to the delivery of as many events as the backlog held, and that
    /// count divided by it.
    pub drain_s: f64,
    pub drain_per_s: f64,
    /// Fresh events accepted while the backlog drained, per second.
    pub intake_during_drain_per_s: f64,
    /// Every accepted event (backlog and during the drain), and the distinct ones the sink
    /// received: `lost` must be 0, `doubled` (forwards beyond the first per event) too.
    pub accepted: u64,
    pub delivered_distinct: u64,
    pub lost: u64,
    pub doubled: u64,
    /// The server's peak resident memory over the whole run.
    pub peak_rss_mib: f64,
}

/// `clients` connections posting fresh events (ids `evt_<run>_<tag>_<n>`), `pause` apart,
/// until `n` were accepted (`until_count`) or `stop` is set; returns how many were accepted.
async fn post_events(
    target: &http::Target,
    run: u64,
    tag: &'static str,
    clients: usize,
    until_count: Option<u64>,
    pause: Duration,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<u64> {
    let next = Arc::new(AtomicU64::new(0));
    let accepted = Arc::new(AtomicU64::new(0));
    let uri = hyper::Uri::try_from(format!("/in/{SOURCE}"))?;
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (target, next, accepted, stop, uri) = (
            target.clone(),
            next.clone(),
            accepted.clone(),
            stop.clone(),
            uri.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let (mut conn, driver) = http::connect(&target).await?;
            http::on_conn(driver, async {
                loop {
                    if stop.load(Ordering::Relaxed) {
                        return anyhow::Ok(());
                    }
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if until_count.is_some_and(|n| i >= n) {
                        return Ok(());
                    }
                    let body = intake_body(&format!("evt_{run:x}_{tag}_{i}"));
                    let headers = stripe_headers(&body)?;
                    http::intake(&mut conn, uri.clone(), body, &headers, "accepted").await?;
                    accepted.fetch_add(1, Ordering::Relaxed);
                    if !pause.is_zero() {
                        tokio::time::sleep(pause).await;
                    }
                }
            })
            .await
        }));
    }
    for t in tasks {
        t.await.context("an intake client panicked")??;
    }
    Ok(accepted.load(Ordering::Relaxed))
}

/// One backlog run against a server on `db_url` (a fresh ledger).
pub async fn run(
    backend: Backend,
    bin: &std::path::Path,
    db_url: &str,
    backlog: u64,
    clients: usize,
) -> anyhow::Result<BacklogReport> {
    let server = ServerProcess::start(bin, db_url).await?;
    let result = drain_run(backend, &server, backlog, clients).await;
    server.stop().await;
    result
}

async fn drain_run(
    backend: Backend,
    server: &ServerProcess,
    backlog: u64,
    clients: usize,
) -> anyhow::Result<BacklogReport> {
    let sink = dest::Destination::start_recording(dest::json_of_size(24)).await?;
    let source = serde_json::json!({
        "provider": "stripe",
        "secrets": [crate::INTAKE_SECRET],
        "forward": {
            "url": format!("http://{}/webhook", sink.addr),
            "concurrency": FORWARD_CONCURRENCY,
        },
    });
    let json = |v: serde_json::Value| bytes::Bytes::from(v.to_string());
    http::put(
        &server.target,
        &format!("/v1/sources/{SOURCE}"),
        json(source),
    )
    .await?;
    let ns = format!("/v1/namespaces/{SOURCE}");
    http::post_path(
        &server.target,
        &format!("{ns}/pause"),
        json(serde_json::json!({})),
    )
    .await?;

    let run: u64 = rand::random();
    let never = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    let filled = post_events(
        &server.target,
        run,
        "b",
        clients,
        Some(backlog),
        Duration::ZERO,
        never,
    )
    .await?;
    let fill_s = t0.elapsed().as_secs_f64();
    anyhow::ensure!(
        sink.requests() == 0,
        "{} forwards reached the sink while the namespace was paused",
        sink.requests()
    );
    // Let the server settle (its write buffers, the janitor's first pass) before reading
    // what the stored backlog costs it.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_mib_with_backlog = crate::history::rss_mib(server.pid);

    http::post_path(
        &server.target,
        &format!("{ns}/resume"),
        json(serde_json::json!({})),
    )
    .await?;
    let resumed = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let during = {
        let (target, stop) = (server.target.clone(), stop.clone());
        let pause = Duration::from_millis(10);
        tokio::spawn(async move { post_events(&target, run, "d", 1, None, pause, stop).await })
    };
    // The drain: as many deliveries as the backlog held (new events are delivered meanwhile
    // too, in no promised order).
    let limit = Duration::from_secs(600);
    while sink.requests() < filled {
        anyhow::ensure!(
            resumed.elapsed() < limit,
            "the backlog did not drain within {limit:?}: {} of {filled} delivered",
            sink.requests()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let drain_s = resumed.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let during_n = during.await.context("the intake load panicked")??;
    let accepted = filled + during_n;
    // Everything accepted is delivered in the end.
    let settle = Instant::now();
    while sink.distinct() < accepted && settle.elapsed() < Duration::from_secs(120) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A moment more: a second forward of an event would show now.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let distinct = sink.distinct();
    Ok(BacklogReport {
        backend,
        backlog: filled,
        clients,
        forward_concurrency: FORWARD_CONCURRENCY,
        fill_per_s: filled as f64 / fill_s,
        rss_mib_with_backlog,
        drain_s: (drain_s * 100.0).round() / 100.0,
        drain_per_s: filled as f64 / drain_s,
        intake_during_drain_per_s: during_n as f64 / drain_s,
        accepted,
        delivered_distinct: distinct,
        lost: accepted.saturating_sub(distinct),
        doubled: sink.requests().saturating_sub(distinct),
        peak_rss_mib: server.peak_rss_mib(),
    })
}

/// The report as a table of one line per backend.
pub fn render(rows: &[BacklogReport]) -> String {
    let mut out = format!(
        "{:<9} {:>8} {:>5} {:>5} {:>9} {:>11} {:>8} {:>10} {:>12} {:>9} {:>5} {:>7} {:>9}\n",
        "backend",
        "backlog",
        "conc",
        "fwd",
        "fill/s",
        "rss@backlog",
        "drain s",
        "drain/s",
        "intake/s",
        "accepted",
        "lost",
        "doubled",
        "peak MiB"
    );
    for r in rows {
        out.push_str(&format!(
            "{:<9} {:>8} {:>5} {:>5} {:>9.0} {:>11.1} {:>8.2} {:>10.0} {:>12.0} {:>9} {:>5} {:>7} {:>9.1}\n",
            r.backend.as_str(),
            r.backlog,
            r.clients,
            r.forward_concurrency,
            r.fill_per_s,
            r.rss_mib_with_backlog,
            r.drain_s,
            r.drain_per_s,
            r.intake_during_drain_per_s,
            r.accepted,
            r.lost,
            r.doubled,
            r.peak_rss_mib
        ));
    }
    out
}
