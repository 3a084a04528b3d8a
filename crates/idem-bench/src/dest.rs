//! The effect rows' destination: a loopback HTTP/1.1 server in the bench process that answers
//! every request `200` with a JSON body of a fixed size, like a payment API acknowledging a
//! charge. It counts the requests it received, so a row can check that every performed
//! effect reached it exactly once; a recording one also keeps each request's `Idem-Key`
//! (the intake's forwards carry one per event), so a run can tell lost events from doubled
//! ones. It must only ever bind 127.0.0.1.

use std::collections::HashSet;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

/// A running destination; dropping it stops accepting connections.
pub struct Destination {
    pub addr: SocketAddr,
    requests: Arc<AtomicU64>,
    /// The distinct `Idem-Key` values received, when recording.
    keys: Option<Arc<Mutex<HashSet<String>>>>,
    accept: tokio::task::JoinHandle<()>,
}

/// A JSON object of exactly `n` bytes (at least the 24 of its smallest form).
pub fn json_of_size(n: usize) -> Bytes {
    const HEAD: &str = "{\"id\":\"ch_1\",\"pad\":\"";
    const TAIL: &str = "\"}";
    let pad = n.saturating_sub(HEAD.len() + TAIL.len());
    let mut s = String::with_capacity(HEAD.len() + pad + TAIL.len());
    s.push_str(HEAD);
    s.extend(std::iter::repeat_n('x', pad));
    s.push_str(TAIL);
    Bytes::from(s)
}

impl Destination {
    /// Starts on a free loopback port; every answer carries `body`.
    pub async fn start(body: Bytes) -> anyhow::Result<Destination> {
        Self::start_with(body, None).await
    }

    /// [`Destination::start`], also keeping every request's `Idem-Key`.
    pub async fn start_recording(body: Bytes) -> anyhow::Result<Destination> {
        Self::start_with(body, Some(Arc::default())).await
    }

    async fn start_with(
        body: Bytes,
        keys: Option<Arc<Mutex<HashSet<String>>>>,
    ) -> anyhow::Result<Destination> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let requests = Arc::new(AtomicU64::new(0));
        let count = requests.clone();
        let seen = keys.clone();
        let accept = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let _ = tcp.set_nodelay(true);
                let (body, count, seen) = (body.clone(), count.clone(), seen.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let (body, count, seen) = (body.clone(), count.clone(), seen.clone());
                        async move {
                            if let Some(seen) = &seen {
                                let key = req
                                    .headers()
                                    .get("idem-key")
                                    .and_then(|v| v.to_str().ok())
                                    .unwrap_or_default()
                                    .to_owned();
                                if let Ok(mut set) = seen.lock() {
                                    set.insert(key);
                                }
                            }
                            // Read the whole request, as a real API would, before answering.
                            let _ = req.into_body().collect().await;
                            count.fetch_add(1, Ordering::Relaxed);
                            let mut resp = Response::new(Full::new(body));
                            resp.headers_mut()
                                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                            Ok::<_, Infallible>(resp)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .keep_alive(true)
                        .serve_connection(TokioIo::new(tcp), service)
                        .await;
                });
            }
        });
        Ok(Destination {
            addr,
            requests,
            keys,
            accept,
        })
    }

    /// Requests received so far.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Distinct `Idem-Key` values received so far (0 unless recording).
    pub fn distinct(&self) -> u64 {
        self.keys
            .as_ref()
            .and_then(|k| k.lock().ok().map(|set| set.len() as u64))
            .unwrap_or(0)
    }
}

impl Drop for Destination {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_of_size_is_exact_and_valid() {
        for n in [24, 64, 1000, 256 * 1024] {
            let b = json_of_size(n);
            assert_eq!(b.len(), n);
            let v: serde_json::Value = serde_json::from_slice(&b).expect("json");
            assert_eq!(v["id"], "ch_1");
        }
    }
}
