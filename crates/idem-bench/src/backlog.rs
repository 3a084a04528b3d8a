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
//! none was delivered twice. With `destinations` above 1 the source fans each event out to
//! that many named destinations on the same sink (`forwards`), so every event is that many
//! deliveries, each under its own `Idem-Key`; the drain is then counted in deliveries. It only
//! ever binds and calls 127.0.0.1.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;

use crate::signed::{intake_body, stripe_headers};
use crate::{dest, http, Backend, ServerProcess};

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
    /// Destinations per event (`forward` alone for 1, else `forwards` d1…dN).
    pub destinations: u32,
    /// Connections that filled the backlog.
    pub clients: usize,
    /// The source's `forward.concurrency`.
    pub forward_concurrency: u32,
    /// Filling the backlog (deliveries paused): events accepted per second.
    pub fill_per_s: f64,
    /// The server's resident memory with the whole backlog stored, before the drain.
    pub rss_mib_with_backlog: f64,
    /// From the resume to as many deliveries as the backlog held (events × destinations),
    /// the backlog's events divided by it, and its deliveries divided by it.
    pub drain_s: f64,
    pub drain_per_s: f64,
    pub deliveries_per_s: f64,
    /// Fresh events accepted while the backlog drained, per second.
    pub intake_during_drain_per_s: f64,
    /// Every accepted event (backlog and during the drain), and the distinct deliveries
    /// (`Idem-Key`s) the sink received: `lost` (deliveries owed, events × destinations, that
    /// never came) must be 0, `doubled` (forwards beyond the first per key) too.
    pub accepted: u64,
    pub delivered_distinct: u64,
    pub lost: u64,
    pub doubled: u64,
    /// The server's peak resident memory over the whole run.
    pub peak_rss_mib: f64,
    /// PostgreSQL only, from `pg_stat_database` of the ledger's database over the drain
    /// (from the resume until every delivery was made and the server went quiet), divided by
    /// the deliveries made meanwhile: committed transactions, and rows inserted, updated or
    /// deleted. They count the fresh events accepted meanwhile too (about one in ten
    /// deliveries at this pace), and the workers' polls. Unlike the rates they do not move
    /// with the machine's load.
    pub pg_commits_per_delivery: Option<f64>,
    pub pg_rows_per_delivery: Option<f64>,
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
    destinations: u32,
) -> anyhow::Result<BacklogReport> {
    anyhow::ensure!(destinations >= 1, "at least one destination");
    let server = ServerProcess::start(bin, db_url).await?;
    let pg = match backend {
        Backend::Postgres => Some(db_url),
        _ => None,
    };
    let result = drain_run(backend, &server, pg, backlog, clients, destinations).await;
    server.stop().await;
    result
}

async fn drain_run(
    backend: Backend,
    server: &ServerProcess,
    pg: Option<&str>,
    backlog: u64,
    clients: usize,
    destinations: u32,
) -> anyhow::Result<BacklogReport> {
    let sink = dest::Destination::start_recording(dest::json_of_size(24)).await?;
    let source = source_doc(&sink.addr.to_string(), destinations);
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
    let d = u64::from(destinations);
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
    let pg_before = match pg {
        Some(url) => Some(crate::bare::pg_writes(url).await?),
        None => None,
    };

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
    let owed = filled * d;
    while sink.requests() < owed {
        anyhow::ensure!(
            resumed.elapsed() < limit,
            "the backlog did not drain within {limit:?}: {} of {owed} deliveries made",
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
    while sink.distinct() < accepted * d && settle.elapsed() < Duration::from_secs(120) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A moment more: a second forward of an event would show now.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let distinct = sink.distinct();
    // A backend reports what it did at most once a second, and when it goes idle.
    let per_delivery = match (pg, pg_before) {
        (Some(url), Some(before)) => {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            let after = crate::bare::pg_writes(url).await?;
            let made = sink.requests().max(1) as f64;
            Some((
                after.commits.saturating_sub(before.commits) as f64 / made,
                after.rows.saturating_sub(before.rows) as f64 / made,
            ))
        }
        _ => None,
    };
    Ok(BacklogReport {
        backend,
        backlog: filled,
        destinations,
        clients,
        forward_concurrency: FORWARD_CONCURRENCY,
        fill_per_s: filled as f64 / fill_s,
        rss_mib_with_backlog,
        drain_s: (drain_s * 100.0).round() / 100.0,
        drain_per_s: filled as f64 / drain_s,
        deliveries_per_s: owed as f64 / drain_s,
        intake_during_drain_per_s: during_n as f64 / drain_s,
        accepted,
        delivered_distinct: distinct,
        lost: (accepted * d).saturating_sub(distinct),
        doubled: sink.requests().saturating_sub(distinct),
        peak_rss_mib: server.peak_rss_mib(),
        pg_commits_per_delivery: per_delivery.map(|p| (p.0 * 100.0).round() / 100.0),
        pg_rows_per_delivery: per_delivery.map(|p| (p.1 * 100.0).round() / 100.0),
    })
}

/// The report as a table of one line per backend.
pub fn render(rows: &[BacklogReport]) -> String {
    let mut out = format!(
        "{:<9} {:>8} {:>5} {:>5} {:>5} {:>9} {:>11} {:>8} {:>10} {:>12} {:>12} {:>9} {:>5} {:>7} {:>9} {:>14} {:>11}\n",
        "backend",
        "backlog",
        "dests",
        "conc",
        "fwd",
        "fill/s",
        "rss@backlog",
        "drain s",
        "drain/s",
        "deliveries/s",
        "intake/s",
        "accepted",
        "lost",
        "doubled",
        "peak MiB",
        "commits/deliv",
        "rows/deliv"
    );
    for r in rows {
        out.push_str(&format!(
            "{:<9} {:>8} {:>5} {:>5} {:>5} {:>9.0} {:>11.1} {:>8.2} {:>10.0} {:>12.0} {:>12.0} {:>9} {:>5} {:>7} {:>9.1} {:>14} {:>11}\n",
            r.backend.as_str(),
            r.backlog,
            r.destinations,
            r.clients,
            r.forward_concurrency,
            r.fill_per_s,
            r.rss_mib_with_backlog,
            r.drain_s,
            r.drain_per_s,
            r.deliveries_per_s,
            r.intake_during_drain_per_s,
            r.accepted,
            r.lost,
            r.doubled,
            r.peak_rss_mib,
            r.pg_commits_per_delivery
                .map_or("-".to_owned(), |v| format!("{v:.2}")),
            r.pg_rows_per_delivery
                .map_or("-".to_owned(), |v| format!("{v:.2}"))
        ));
    }
    out
}

/// The backlog source: `forward` to the sink for one destination, else `forwards` `d1`…`dN`,
/// each to its own path on the same sink and each with the drain's concurrency.
fn source_doc(sink: &str, destinations: u32) -> serde_json::Value {
    let dest = |name: &str| {
        serde_json::json!({
            "url": format!("http://{sink}/{name}"),
            "concurrency": FORWARD_CONCURRENCY,
        })
    };
    let mut doc = serde_json::json!({
        "provider": "stripe",
        "secrets": [crate::signed::INTAKE_SECRET],
    });
    if destinations <= 1 {
        doc["forward"] = dest("webhook");
    } else {
        let forwards: serde_json::Map<String, serde_json::Value> = (1..=destinations)
            .map(|i| (format!("d{i}"), dest(&format!("d{i}"))))
            .collect();
        doc["forwards"] = serde_json::Value::Object(forwards);
    }
    doc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_destination_is_the_plain_forward_and_more_are_named_forwards() {
        let one = source_doc("127.0.0.1:9", 1);
        assert_eq!(one["forward"]["url"], "http://127.0.0.1:9/webhook");
        assert!(one.get("forwards").is_none());
        let three = source_doc("127.0.0.1:9", 3);
        assert!(three.get("forward").is_none());
        let names: Vec<&String> = three["forwards"]
            .as_object()
            .map_or(vec![], |m| m.keys().collect());
        assert_eq!(names, ["d1", "d2", "d3"]);
        assert_eq!(three["forwards"]["d2"]["url"], "http://127.0.0.1:9/d2");
        assert_eq!(three["forwards"]["d3"]["concurrency"], FORWARD_CONCURRENCY);
    }
}
