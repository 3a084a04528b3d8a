//! The alert endpoint of the zombie drill: a one-request-at-a-time HTTP receiver on 127.0.0.1
//! that keeps the JSON bodies it is sent and answers 204.
//!
//! It only listens on loopback on a port of its own and only reads what it is sent; it must
//! never answer anything but 204 nor forward what it received.

use std::time::Duration;

use serde_json::Value;

/// A running receiver; it stops when dropped.
pub(crate) struct AlertSink {
    pub(crate) url: String,
    bodies: tokio::sync::mpsc::UnboundedReceiver<Value>,
    task: tokio::task::JoinHandle<()>,
}

impl AlertSink {
    pub(crate) async fn start() -> Result<AlertSink, String> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| format!("alert listener: {e}"))?;
        let addr = listener
            .local_addr()
            .map_err(|e| format!("alert listener: {e}"))?;
        let (tx, bodies) = tokio::sync::mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                if let Some(body) = read_request_body(&mut conn).await {
                    let _ = tx.send(body);
                }
                use tokio::io::AsyncWriteExt;
                let _ = conn
                    .write_all(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    .await;
            }
        });
        Ok(AlertSink {
            url: format!("http://{addr}/idem-drill-alerts"),
            bodies,
            task,
        })
    }

    /// The first alert body with `reason`, waiting up to `wait`.
    pub(crate) async fn wait_for(&mut self, reason: &str, wait: Duration) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            match tokio::time::timeout_at(deadline, self.bodies.recv()).await {
                Ok(Some(b)) if b["reason"] == reason => return Some(b),
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => return None,
            }
        }
    }
}

impl Drop for AlertSink {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads one HTTP/1.1 request with a `content-length` body (at most 64 KiB) as JSON.
async fn read_request_body(conn: &mut tokio::net::TcpStream) -> Option<Value> {
    use tokio::io::AsyncReadExt;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let read = async {
        loop {
            let n = conn.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            buf.extend_from_slice(&chunk[..n]);
            if buf.len() > 65_536 {
                return None;
            }
            let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                continue;
            };
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if buf.len() >= end + 4 + len {
                return serde_json::from_slice(&buf[end + 4..end + 4 + len]).ok();
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .ok()
        .flatten()
}
