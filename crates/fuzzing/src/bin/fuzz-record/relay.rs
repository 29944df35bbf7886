//! A recording relay: accepts clients, connects each to the server, copies bytes both ways
//! and keeps a copy of each direction.

use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Bytes kept per direction of one connection; the rest is relayed but not recorded.
const KEEP: usize = 4 << 20;

/// One recorded connection.
#[derive(Default)]
pub struct Recorded {
    /// Client to server.
    pub client: Vec<u8>,
    /// Server to client.
    pub server: Vec<u8>,
}

/// Every connection recorded so far.
pub type Recordings = Arc<Mutex<Vec<Arc<Mutex<Recorded>>>>>;

/// Starts relaying from a free local port to `server`; returns the port and the recordings.
pub async fn start(server: String) -> std::io::Result<(u16, Recordings)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let all: Recordings = Arc::default();
    let keep = all.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(upstream) = TcpStream::connect(&server).await else {
                continue;
            };
            let rec = Arc::new(Mutex::new(Recorded::default()));
            keep.lock().expect("recordings").push(rec.clone());
            tokio::spawn(pair(client, upstream, rec));
        }
    });
    Ok((port, all))
}

async fn pair(client: TcpStream, server: TcpStream, rec: Arc<Mutex<Recorded>>) {
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    let up = tokio::spawn(copy(cr, sw, rec.clone(), true));
    let down = tokio::spawn(copy(sr, cw, rec, false));
    let _ = tokio::join!(up, down);
}

async fn copy(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    rec: Arc<Mutex<Recorded>>,
    from_client: bool,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        {
            let mut r = rec.lock().expect("recording");
            let side = if from_client {
                &mut r.client
            } else {
                &mut r.server
            };
            let room = KEEP.saturating_sub(side.len()).min(n);
            side.extend_from_slice(&buf[..room]);
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}
