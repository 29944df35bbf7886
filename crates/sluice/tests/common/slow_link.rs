//! A TCP hop with latency in front of a real server: every connection through it starts
//! `delay` late, as over a long network path. A backend connect through it takes at least
//! `delay` on any machine, so a test can tell one connect round from fifty by the clock
//! without depending on how fast the machine is.

use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};

/// The hop; stops accepting when dropped (connections already through it run to their end).
pub struct SlowLink {
    /// Where to connect instead of the server.
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl SlowLink {
    /// Forwards connections to `upstream`, each opened `delay` after it was accepted.
    pub async fn start(upstream: String, delay: Duration) -> SlowLink {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    if let Ok(mut server) = TcpStream::connect(&upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
            }
        });
        SlowLink { addr, task }
    }
}

impl Drop for SlowLink {
    fn drop(&mut self) {
        self.task.abort();
    }
}
