//! Loopback servers the tests stand up in place of destinations, receivers and sinks.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use axum::Router;
use tokio::net::TcpListener;

/// A listener on a fresh loopback port, and the port.
pub(crate) async fn listener() -> (TcpListener, u16) {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = l.local_addr().expect("addr").port();
    (l, port)
}

/// Serves `app` on a fresh loopback port; the port.
pub(crate) async fn serve(app: Router) -> u16 {
    let (l, port) = listener().await;
    tokio::spawn(async move { axum::serve(l, app).await });
    port
}

/// A loopback port nothing listens on (bound, then let go).
pub(crate) fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// What a scripted destination saw (`S` a request) and the statuses it is to answer next.
#[derive(Clone)]
pub(crate) struct Dest<S> {
    pub(crate) seen: Arc<Mutex<Vec<S>>>,
    /// Statuses to answer with, in order (then the handler's default).
    script: Arc<Mutex<VecDeque<u16>>>,
}

impl<S> Default for Dest<S> {
    fn default() -> Self {
        Dest {
            seen: Arc::default(),
            script: Arc::default(),
        }
    }
}

impl<S: Clone> Dest<S> {
    /// How many requests it received.
    pub(crate) fn count(&self) -> usize {
        self.seen.lock().expect("lock").len()
    }
    /// Every request it received, oldest first.
    pub(crate) fn all(&self) -> Vec<S> {
        self.seen.lock().expect("lock").clone()
    }
    /// Records `s`; how many requests it has received, this one included.
    pub(crate) fn push(&self, s: S) -> usize {
        let mut seen = self.seen.lock().expect("lock");
        seen.push(s);
        seen.len()
    }
    /// Queues `statuses` to answer the next requests with.
    pub(crate) fn script(&self, statuses: &[u16]) {
        self.script.lock().expect("lock").extend(statuses);
    }
    /// The next scripted status, or `default`.
    pub(crate) fn next_status(&self, default: u16) -> u16 {
        self.script
            .lock()
            .expect("lock")
            .pop_front()
            .unwrap_or(default)
    }
}
