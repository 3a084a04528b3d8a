//! Closed-loop load: C clients, each doing one operation after another until the deadline,
//! every operation's latency recorded in an HDR histogram (microseconds).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

#[derive(Debug, Clone)]
pub struct Measurement {
    pub ops: u64,
    pub errors: u64,
    pub elapsed: Duration,
    pub hist: Histogram<u64>,
    /// First error seen, to make a broken run visible.
    pub first_error: Option<String>,
}

impl Measurement {
    pub(crate) fn new() -> Self {
        Measurement {
            ops: 0,
            errors: 0,
            elapsed: Duration::ZERO,
            hist: Histogram::new_with_bounds(1, 120_000_000, 3)
                .expect("constant histogram bounds are valid"),
            first_error: None,
        }
    }
    pub fn ops_per_s(&self) -> f64 {
        let s = self.elapsed.as_secs_f64();
        if s > 0.0 {
            (self.ops as f64 / s).round()
        } else {
            0.0
        }
    }
    pub fn quantile_ms(&self, q: f64) -> f64 {
        round3(self.hist.value_at_quantile(q) as f64 / 1000.0)
    }
    pub fn max_ms(&self) -> f64 {
        round3(self.hist.max() as f64 / 1000.0)
    }
    pub(crate) fn merge(&mut self, other: Measurement) {
        self.ops += other.ops;
        self.errors += other.errors;
        let _ = self.hist.add(&other.hist);
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
    }
    pub(crate) fn record(&mut self, started: Instant, ok: Result<(), anyhow::Error>) {
        match ok {
            Ok(()) => {
                self.ops += 1;
                let us = started.elapsed().as_micros().clamp(1, 120_000_000) as u64;
                let _ = self.hist.record(us);
            }
            Err(e) => {
                self.errors += 1;
                if self.first_error.is_none() {
                    self.first_error = Some(format!("{e:#}"));
                }
            }
        }
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// C async clients (tokio tasks) running `op(client, seq)` until `duration` has passed.
pub async fn drive_async<F, Fut>(c: usize, duration: Duration, op: F) -> anyhow::Result<Measurement>
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
{
    let op = Arc::new(op);
    let start = Instant::now();
    let deadline = start + duration;
    let mut tasks = Vec::with_capacity(c);
    for client in 0..c.max(1) {
        let op = op.clone();
        tasks.push(tokio::spawn(async move {
            let mut m = Measurement::new();
            let mut seq = 0u64;
            while Instant::now() < deadline {
                let t = Instant::now();
                let r = op(client, seq).await;
                m.record(t, r);
                seq += 1;
                if m.errors > 1000 {
                    break;
                }
            }
            m
        }));
    }
    let mut total = Measurement::new();
    for t in tasks {
        total.merge(t.await?);
    }
    total.elapsed = start.elapsed();
    Ok(total)
}

/// Like [`drive_async`], but runs until `done` is set (or `max` has passed).
pub async fn drive_until<F, Fut>(
    c: usize,
    max: Duration,
    done: Arc<std::sync::atomic::AtomicBool>,
    op: F,
) -> anyhow::Result<Measurement>
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
{
    let op = Arc::new(op);
    let start = Instant::now();
    let deadline = start + max;
    let mut tasks = Vec::with_capacity(c);
    for client in 0..c.max(1) {
        let (op, done) = (op.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            let mut m = Measurement::new();
            let mut seq = 0u64;
            while Instant::now() < deadline && !done.load(std::sync::atomic::Ordering::SeqCst) {
                let t = Instant::now();
                let r = op(client, seq).await;
                m.record(t, r);
                seq += 1;
            }
            m
        }));
    }
    let mut total = Measurement::new();
    for t in tasks {
        total.merge(t.await?);
    }
    total.elapsed = start.elapsed();
    Ok(total)
}

/// C OS threads running a blocking `op(state, client, seq)`, each with its own state
/// (e.g. its own database connection) made by `init(client)`.
pub fn drive_threads<S, I, F>(
    c: usize,
    duration: Duration,
    init: I,
    op: F,
) -> anyhow::Result<Measurement>
where
    S: Send + 'static,
    I: Fn(usize) -> anyhow::Result<S> + Send + Sync + 'static,
    F: Fn(&mut S, usize, u64) -> anyhow::Result<()> + Send + Sync + 'static,
{
    let init = Arc::new(init);
    let op = Arc::new(op);
    let barrier = Arc::new(std::sync::Barrier::new(c.max(1) + 1));
    let mut handles = Vec::new();
    for client in 0..c.max(1) {
        let (init, op, barrier) = (init.clone(), op.clone(), barrier.clone());
        handles.push(std::thread::spawn(
            move || -> anyhow::Result<Measurement> {
                let state = init(client);
                barrier.wait();
                let mut state = state?;
                let mut m = Measurement::new();
                let deadline = Instant::now() + duration;
                let mut seq = 0u64;
                while Instant::now() < deadline {
                    let t = Instant::now();
                    let r = op(&mut state, client, seq);
                    m.record(t, r);
                    seq += 1;
                    if m.errors > 1000 {
                        break;
                    }
                }
                Ok(m)
            },
        ));
    }
    barrier.wait();
    let start = Instant::now();
    let mut total = Measurement::new();
    for h in handles {
        let m = h
            .join()
            .map_err(|_| anyhow::anyhow!("a load thread panicked"))??;
        total.merge(m);
    }
    total.elapsed = start.elapsed();
    Ok(total)
}

/// The prepared item a duplicate-style operation uses next: operation `seq` of `client`
/// strides through `items` by a prime, so clients spread over the set instead of marching in
/// step on the same rows.
pub(crate) fn pick<T>(items: &[T], client: usize, seq: u64) -> &T {
    &items[(seq as usize).wrapping_mul(7919).wrapping_add(client) % items.len()]
}

#[cfg(test)]
mod pick_tests {
    #[test]
    fn pick_stays_in_range_and_spreads_clients() {
        let items: Vec<u32> = (0..10).collect();
        for client in 0..5 {
            for seq in 0..100 {
                assert!(*super::pick(&items, client, seq) < 10);
            }
        }
        assert_ne!(super::pick(&items, 0, 0), super::pick(&items, 1, 0));
    }
}
