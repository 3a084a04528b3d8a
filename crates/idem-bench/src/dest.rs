//! The effect rows' destination: a loopback HTTP/1.1 server in the bench process that answers
//! every request `200` with a JSON body of a fixed size, like a payment API acknowledging a
//! charge. It counts the requests it received, so a row can check that every performed
//! effect reached it exactly once. It must only ever bind 127.0.0.1.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

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
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let requests = Arc::new(AtomicU64::new(0));
        let count = requests.clone();
        let accept = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let _ = tcp.set_nodelay(true);
                let (body, count) = (body.clone(), count.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let (body, count) = (body.clone(), count.clone());
                        async move {
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
            accept,
        })
    }

    /// Requests received so far.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
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
