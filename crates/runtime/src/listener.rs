//! Client listeners: bind (optionally with SO_REUSEPORT), accept, back off on accept errors
//! (out of file descriptors), and hand each client to the protocol's handler on its own task.
//! Limits are the handler's: connections that are still logging in have their own budget
//! (see `connecting`), and only authenticated clients count against the client limit.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;

/// A listener's identity as sessions see it.
#[derive(Debug)]
pub struct ListenerInfo {
    /// Bound address.
    pub addr: SocketAddr,
    /// Hostgroup every statement from this listener goes to; `None` for read/write splitting.
    pub hostgroup: Option<Arc<str>>,
}

/// Boxed future returned by handlers.
pub type HandlerFuture = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// The protocol side of a listener.
pub trait Handler: Send + Sync + 'static {
    /// Serves one client from the connection phase until it leaves.
    fn handle(
        self: Arc<Self>,
        stream: TcpStream,
        peer: SocketAddr,
        listener: Arc<ListenerInfo>,
    ) -> HandlerFuture;
}

/// Binds a TCP listener. With `reuse_port`, several processes can bind the same address and
/// the kernel spreads connections over them.
pub fn bind(addr: &str, reuse_port: bool) -> io::Result<TcpListener> {
    let sa: SocketAddr = match addr.parse() {
        Ok(sa) => sa,
        Err(_) => std::net::ToSocketAddrs::to_socket_addrs(addr)?
            .next()
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("cannot resolve {addr}"),
                )
            })?,
    };
    let sock = if sa.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    sock.set_reuseaddr(true)?;
    if reuse_port {
        sock.set_reuseport(true)?;
    }
    sock.bind(sa)?;
    sock.listen(4096)
}

/// Accepts clients until `shutdown` turns true.
pub async fn serve<H: Handler + ?Sized>(
    listener: TcpListener,
    info: Arc<ListenerInfo>,
    handler: Arc<H>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut backoff = Duration::from_millis(5);
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = shutdown.changed() => return,
        };
        match accepted {
            Ok((stream, peer)) => {
                backoff = Duration::from_millis(5);
                let _ = stream.set_nodelay(true);
                // One span per client session: everything it logs carries its peer, and the
                // id and user the front end records once it knows them.
                let span = tracing::info_span!(
                    "session",
                    %peer,
                    id = tracing::field::Empty,
                    user = tracing::field::Empty
                );
                let session = handler.clone().handle(stream, peer, info.clone());
                tokio::spawn(tracing::Instrument::instrument(session, span));
            }
            Err(e) => {
                // EMFILE/ENFILE/ENOBUFS: wait for descriptors to free up instead of spinning.
                tracing::warn!(listener = %info.addr, error = %e, "accept failed; backing off {} ms", backoff.as_millis());
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
        }
    }
}
