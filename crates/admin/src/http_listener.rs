//! The admin API's HTTP/1.1 listener, bounded so that it can never starve the data path: at
//! most `admin.max_connections` connections (its own budget of file descriptors; more are
//! answered 503 and closed at once), each closed when its request head takes longer than
//! `admin.header_timeout` or nothing moves for `admin.idle_timeout` while nothing is being
//! answered.

use crate::connection_watch::{Activity, Verdict, Watched};
use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use sluice_config::AdminConfig;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

/// After a failed accept (out of file descriptors, say), wait this long before the next.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// At most one warning about refused connections this often.
const WARN_EVERY: Duration = Duration::from_secs(10);
/// Largest request head buffered per connection.
const MAX_HEAD: usize = 64 * 1024;

/// The listener's bounds, from `[admin]`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    pub(crate) max_connections: u32,
    pub(crate) header_timeout: Duration,
    pub(crate) idle_timeout: Duration,
}

impl Limits {
    pub(crate) fn of(cfg: &AdminConfig) -> Limits {
        Limits {
            max_connections: cfg.max_connections.max(1),
            header_timeout: cfg.header_timeout.get(),
            idle_timeout: cfg.idle_timeout.get(),
        }
    }
}

/// Serves `app` on `listener` until `shutdown` turns true, then waits for the connections
/// still open to finish (each is told to close after its request in progress).
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    mut shutdown: watch::Receiver<bool>,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections as usize));
    let mut warned: Option<Instant> = None;
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = stopped(&mut shutdown) => break,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, "admin API: accept failed");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        match permits.clone().try_acquire_owned() {
            Ok(permit) => {
                tokio::spawn(connection(
                    stream,
                    peer,
                    app.clone(),
                    limits,
                    permit,
                    shutdown.clone(),
                ));
            }
            Err(_) => {
                if warned.is_none_or(|t| t.elapsed() >= WARN_EVERY) {
                    warned = Some(Instant::now());
                    tracing::warn!(%peer, max_connections = limits.max_connections, "admin API: connection limit reached; refusing connections");
                }
                refuse(&stream, limits.max_connections);
            }
        }
    }
    drop(listener);
    // Every connection holds a permit: all of them back means every connection ended.
    let _ = permits.acquire_many(limits.max_connections).await;
}

/// Resolves once `shutdown` is true (or its sender is gone).
async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    while !*shutdown.borrow() {
        if shutdown.changed().await.is_err() {
            return;
        }
    }
}

/// Answers 503 without waiting (a fresh socket's send buffer is empty); the socket is
/// closed when the caller drops it. What the client already sent is read first, so that
/// the close is a FIN after the answer rather than a reset that may discard it.
fn refuse(stream: &TcpStream, max: u32) {
    let mut sink = [0u8; 4096];
    for _ in 0..16 {
        if !matches!(stream.try_read(&mut sink), Ok(n) if n > 0) {
            break;
        }
    }
    let body =
        format!("{{\"error\":\"too many admin API connections (admin.max_connections = {max})\"}}");
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.try_write(answer.as_bytes());
}

/// One connection: HTTP/1.1 with keep-alive, watched by [`Activity`].
async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    app: Router,
    limits: Limits,
    _permit: OwnedSemaphorePermit,
    mut shutdown: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let activity = Activity::new();
    let io = TokioIo::new(Watched::new(stream, activity.clone()));
    let app = TowerToHyperService::new(app);
    let requests = activity.clone();
    let service = hyper::service::service_fn(move |req| {
        use hyper::service::Service;
        let answering = requests.request_started();
        let answer = app.call(req);
        async move {
            let r = answer.await;
            drop(answering);
            r
        }
    });
    let conn = http1::Builder::new()
        .max_buf_size(MAX_HEAD)
        .serve_connection(io, service);
    let mut conn = std::pin::pin!(conn);
    let mut stopping = false;
    loop {
        let wait = match activity.verdict(limits.header_timeout, limits.idle_timeout) {
            Verdict::Open(wait) => wait,
            Verdict::Close(why) => {
                tracing::debug!(%peer, why, "admin API: connection closed");
                return;
            }
        };
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(%peer, error = %e, "admin API: connection ended");
                }
                return;
            }
            _ = tokio::time::sleep(wait) => {}
            _ = shutdown.changed(), if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}
