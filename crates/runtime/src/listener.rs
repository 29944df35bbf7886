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
    // Passed on to accepted sockets (Linux): no setsockopt per client (see `serve`).
    sock.set_nodelay(true)?;
    sock.bind(sa)?;
    sock.listen(4096)
}

/// Turns Nagle's algorithm off on a client socket (replies are written whole): nothing to do
/// when it inherited that from its listener, as `inherits` says once the first one told.
fn nodelay(stream: &TcpStream, inherits: &mut Option<bool>) {
    if *inherits == Some(true) {
        return;
    }
    if inherits.is_none() {
        let inherited = stream.nodelay().unwrap_or(false);
        *inherits = Some(inherited);
        if inherited {
            return;
        }
    }
    let _ = stream.set_nodelay(true);
}

/// Accepts clients until `shutdown` turns true.
pub async fn serve<H: Handler + ?Sized>(
    listener: TcpListener,
    info: Arc<ListenerInfo>,
    handler: Arc<H>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut backoff = Duration::from_millis(5);
    // Whether accepted sockets inherit TCP_NODELAY from the listener: learnt from the first.
    let mut inherits_nodelay = None;
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = shutdown.changed() => return,
        };
        match accepted {
            Ok((stream, peer)) => {
                backoff = Duration::from_millis(5);
                nodelay(&stream, &mut inherits_nodelay);
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc;

    /// Tells whether each client's socket has TCP_NODELAY.
    struct Probe(mpsc::UnboundedSender<bool>);

    impl Handler for Probe {
        fn handle(
            self: Arc<Self>,
            stream: TcpStream,
            _peer: SocketAddr,
            _listener: Arc<ListenerInfo>,
        ) -> HandlerFuture {
            let _ = self.0.send(stream.nodelay().unwrap_or(false));
            Box::pin(async {})
        }
    }

    #[tokio::test]
    async fn every_client_socket_has_nodelay() {
        for listener in [bind("127.0.0.1:0", false).unwrap(), {
            // A listener bound elsewhere, without the option: set on each client.
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.set_nonblocking(true).unwrap();
            TcpListener::from_std(l).unwrap()
        }] {
            let addr = listener.local_addr().unwrap();
            let info = Arc::new(ListenerInfo {
                addr,
                hostgroup: None,
            });
            let (tx, mut rx) = mpsc::unbounded_channel();
            let (stop, shutdown) = watch::channel(false);
            let task = tokio::spawn(serve(listener, info, Arc::new(Probe(tx)), shutdown));
            for _ in 0..3 {
                let _client = TcpStream::connect(addr).await.unwrap();
                assert_eq!(rx.recv().await, Some(true));
            }
            stop.send(true).unwrap();
            task.await.unwrap();
        }
    }
}
