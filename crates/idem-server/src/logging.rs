//! Log output of `idem serve`: `tracing` lines (text or JSON) on stderr.
//!
//! Every operation writes one INFO line, so under load the write itself (one syscall per
//! line, and a pipe to journald or a container runtime can make it block) would sit on the
//! request path. Lines are therefore appended to a buffer in memory, and a dedicated thread
//! (`idem-log`) writes whatever has gathered, at most every [`BATCH`], in one write.
//!
//! No line is ever dropped: when the buffer holds [`MAX_BUFFERED`] bytes (stderr slower than
//! the server), the logging thread writes it out itself, as an unbuffered writer would. When
//! the [`LogGuard`] is dropped (end of `idem serve`), the buffer is written out and every
//! later line is written directly. What a hard kill (SIGKILL, abort) loses is at most the
//! last [`BATCH`] of lines.
//!
//! With an OTLP endpoint the same subscriber also exports spans ([`crate::telemetry`]); the
//! log filter applies to both, so spans below the log level are neither logged nor exported.

use std::io::Write;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::fmt::MakeWriter;

use crate::config::LogFormat;

/// How long lines may gather before they are written.
pub const BATCH: Duration = Duration::from_millis(5);

/// Bytes buffered before the logging thread writes them itself.
pub const MAX_BUFFERED: usize = 4 << 20;

/// Sets up `tracing` (text or JSON on stderr). Text lines carry ANSI colours only when
/// stderr is a terminal. Does nothing if a subscriber is already set. Keep the guard for the
/// life of the process: dropping it writes out what is buffered.
pub fn init_logging(format: LogFormat, level: &str) -> LogGuard {
    init_telemetry(format, level, None)
}

/// [`init_logging`], and with `traces` every span is also exported through that provider
/// (shut down, so its last batch is sent, when the guard is dropped).
pub fn init_telemetry(
    format: LogFormat,
    level: &str,
    traces: Option<SdkTracerProvider>,
) -> LogGuard {
    use tracing_subscriber::layer::{Layer as _, SubscriberExt};
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_new(level).unwrap_or_else(|_| EnvFilter::new("info"));
    let (writer, mut guard) = batched(Box::new(std::io::stderr()), MAX_BUFFERED);
    let fmt = tracing_subscriber::fmt::layer()
        // Plain text on a terminal too: the crate is built without its `ansi` feature.
        .with_ansi(false)
        .with_writer(writer);
    let fmt = match format {
        LogFormat::Json => fmt.json().flatten_event(true).boxed(),
        LogFormat::Text => fmt.boxed(),
    };
    let otel = traces.as_ref().map(|p| {
        use opentelemetry::trace::TracerProvider as _;
        tracing_opentelemetry::layer().with_tracer(p.tracer(crate::telemetry::SERVICE_NAME))
    });
    let exporting = otel.is_some();
    let installed = tracing_subscriber::registry()
        .with(filter)
        .with(tracing_subscriber::filter::filter_fn(|m| {
            !never_logged(m.target())
        }))
        .with(fmt)
        .with(otel)
        .try_init()
        .is_ok();
    if installed && exporting {
        crate::telemetry::set_exporting();
    }
    guard.traces = traces;
    guard
}

/// Targets whose lines carry what a log must never hold, at any level: PostgreSQL's driver
/// logs every statement's parameters at DEBUG (stored results, keys, payloads).
fn never_logged(target: &str) -> bool {
    target == "tokio_postgres::query" || target.starts_with("tokio_postgres::query::")
}

struct Buffer {
    data: Vec<u8>,
    /// The guard was dropped: write directly.
    closed: bool,
}

struct Shared {
    buf: Mutex<Buffer>,
    wake: Condvar,
    max: usize,
    /// Where lines go (stderr). Lock order: `buf` before `sink`.
    sink: Mutex<Box<dyn Write + Send>>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Buffer> {
        self.buf.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn write_out(&self, bytes: &[u8]) -> std::io::Result<()> {
        let mut sink = self.sink.lock().unwrap_or_else(PoisonError::into_inner);
        sink.write_all(bytes)?;
        sink.flush()
    }
}

/// The `MakeWriter` of the subscriber.
#[derive(Clone)]
pub struct Batched(Arc<Shared>);

/// Stops the logging thread after writing out what is buffered.
pub struct LogGuard {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Exported spans, flushed before the log lines (its errors are logged).
    traces: Option<SdkTracerProvider>,
}

/// A batched writer to `sink` (at most `max` bytes buffered) and the guard of its thread.
pub fn batched(sink: Box<dyn Write + Send>, max: usize) -> (Batched, LogGuard) {
    let shared = Arc::new(Shared {
        buf: Mutex::new(Buffer {
            data: Vec::with_capacity(64 << 10),
            closed: false,
        }),
        wake: Condvar::new(),
        max,
        sink: Mutex::new(sink),
    });
    let thread = {
        let shared = shared.clone();
        std::thread::Builder::new()
            .name("idem-log".into())
            .spawn(move || flush_loop(&shared))
            .ok()
    };
    if thread.is_none() {
        // No thread: write directly.
        shared.lock().closed = true;
    }
    (
        Batched(shared.clone()),
        LogGuard {
            shared,
            thread,
            traces: None,
        },
    )
}

fn flush_loop(shared: &Shared) {
    let mut out = Vec::with_capacity(64 << 10);
    loop {
        let closed = {
            let mut b = shared.lock();
            while b.data.is_empty() && !b.closed {
                b = shared.wake.wait(b).unwrap_or_else(PoisonError::into_inner);
            }
            std::mem::swap(&mut b.data, &mut out);
            b.closed
        };
        if !out.is_empty() {
            let _ = shared.write_out(&out);
            out.clear();
        }
        if closed {
            return;
        }
        std::thread::sleep(BATCH);
    }
}

impl Drop for LogGuard {
    fn drop(&mut self) {
        if let Some(traces) = self.traces.take() {
            // Shutdown blocks until the last batch is sent (bounded by the export timeout);
            // on a thread of its own it cannot stall an async runtime's worker.
            let done = std::thread::spawn(move || traces.shutdown()).join();
            if !matches!(done, Ok(Ok(()))) {
                tracing::warn!("the last spans could not be exported");
            }
        }
        self.shared.lock().closed = true;
        self.shared.wake.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // Lines that raced with the last swap.
        let mut b = self.shared.lock();
        if !b.data.is_empty() {
            let _ = self.shared.write_out(&b.data);
            b.data.clear();
        }
    }
}

impl<'a> MakeWriter<'a> for Batched {
    type Writer = Line<'a>;
    fn make_writer(&'a self) -> Line<'a> {
        Line(&self.0)
    }
}

/// One event's output (the subscriber formats a whole line, then writes it once).
pub struct Line<'a>(&'a Shared);

impl Write for Line<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let mut b = self.0.lock();
        if b.closed || b.data.len() + bytes.len() > self.0.max {
            // Never drop a line: write what is buffered, then this one, ourselves.
            if !b.data.is_empty() {
                self.0.write_out(&b.data)?;
                b.data.clear();
            }
            self.0.write_out(bytes)?;
            return Ok(bytes.len());
        }
        let was_empty = b.data.is_empty();
        b.data.extend_from_slice(bytes);
        drop(b);
        if was_empty {
            self.0.wake.notify_one();
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drivers_statement_parameters_are_never_logged() {
        assert!(never_logged("tokio_postgres::query"));
        assert!(!never_logged("tokio_postgres::connection"));
        assert!(!never_logged("tokio_postgres::queryx"));
        assert!(!never_logged("idem_server::api"));
    }

    /// A sink the test can read.
    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<u8>>>);

    impl Write for Capture {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("capture").extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn lines(c: &Capture) -> Vec<String> {
        let text = String::from_utf8(c.0.lock().expect("capture").clone()).expect("utf8");
        text.lines().map(str::to_owned).collect()
    }

    fn run(max: usize) {
        let cap = Capture::default();
        let (w, guard) = batched(Box::new(cap.clone()), max);
        std::thread::scope(|s| {
            for t in 0..4 {
                let w = w.clone();
                s.spawn(move || {
                    for i in 0..500 {
                        let mut line = w.make_writer();
                        line.write_all(format!("t{t} {i}\n").as_bytes())
                            .expect("write");
                    }
                });
            }
        });
        // Lines gather in memory (unless the buffer is full) until written out.
        drop(guard);
        w.make_writer().write_all(b"after\n").expect("write");
        let got = lines(&cap);
        assert_eq!(got.len(), 2001, "max {max}");
        assert_eq!(got.last().map(String::as_str), Some("after"));
        for t in 0..4 {
            let mine: Vec<&String> = got
                .iter()
                .filter(|l| l.starts_with(&format!("t{t} ")))
                .collect();
            let want: Vec<String> = (0..500).map(|i| format!("t{t} {i}")).collect();
            assert!(
                mine.iter().zip(&want).all(|(a, b)| *a == b),
                "order of t{t}"
            );
            assert_eq!(mine.len(), 500);
        }
    }

    #[test]
    fn every_line_is_written_once_and_in_order() {
        run(MAX_BUFFERED);
    }

    #[test]
    fn a_full_buffer_is_written_by_the_logging_thread_not_dropped() {
        run(64);
    }
}
