//! A server that nobody scrapes keeps its memory: the Prometheus recorder holds every
//! histogram sample until they are folded into their buckets, which a scrape of `/metrics`
//! does and otherwise only the recorder's upkeep. Without a periodic upkeep an unscraped
//! server grew by every request's samples (the 30-minute soak: RSS 38 → 86 MiB).
//!
//! Its own test binary, one test: the resident memory measured is this process's alone.

use std::time::Duration;

use idem_testkit::app::spawn_app;

/// The resident memory of this process, in KiB.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .expect("VmRSS in /proc/self/status")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn histogram_samples_of_an_unscraped_server_do_not_pile_up() {
    let app = spawn_app().await;
    // Real requests first: every lazy part of the server and the recorder is in place.
    for _ in 0..200 {
        assert_eq!(app.get("/healthz").await.status, 200);
    }
    let before = rss_kib();
    // 2.4 M samples (about 19 MiB if they were all kept), in rounds a little longer apart
    // than the upkeep interval, as a busy server records them.
    for round in 0..12 {
        for i in 0..200_000u32 {
            let seconds = f64::from(i % 1000) * 1e-6 + f64::from(round) * 1e-9;
            idem_server::metrics::request_done("/healthz", 200, seconds);
        }
        tokio::time::sleep(idem_server::metrics::UPKEEP_INTERVAL + Duration::from_millis(300))
            .await;
    }
    let grew = rss_kib().saturating_sub(before);
    eprintln!("RSS grew {grew} KiB over 2.4 M histogram samples, no scrape");
    assert!(
        grew < 12 * 1024,
        "RSS grew {grew} KiB over 2.4 M histogram samples with nobody scraping"
    );
    // The samples were counted, not dropped: a scrape shows them.
    let text = app.get("/metrics").await.text;
    let count = text
        .lines()
        .find(|l| {
            l.starts_with("idem_http_request_duration_seconds_count")
                && l.contains("route=\"/healthz\"")
                && l.contains("status=\"200\"")
        })
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .expect("the histogram's count in /metrics");
    assert!(count >= 2_400_000.0, "count {count}");
}
