//! Hostile servers for tests: a relay in front of a real MariaDB server that misbehaves on
//! command (cuts, stalls or garbles what the server sends), and a listener that answers with
//! garbage instead of a greeting.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// What the relay does with the next bytes a server sends (on whichever connection they come).
/// Each fault happens once; then the relay passes everything again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Pass everything.
    None,
    /// Pass this many more bytes, then close that connection (both ways).
    CutAfter(usize),
    /// Pass this many more bytes, then pass nothing more on that connection (kept open).
    StallAfter(usize),
    /// Send these bytes instead of the server's, then pass nothing more on that connection.
    Garbage(Vec<u8>),
}

/// A TCP relay to a server.
pub struct FaultRelay {
    pub port: u16,
    fault: Arc<Mutex<Fault>>,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl FaultRelay {
    /// Relays connections on a free port to `target` (`host:port`).
    pub async fn start(target: String) -> FaultRelay {
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind relay");
        let port = l.local_addr().unwrap().port();
        let fault = Arc::new(Mutex::new(Fault::None));
        let tasks: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let (f, t) = (fault.clone(), tasks.clone());
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = l.accept().await {
                let Ok(server) = TcpStream::connect(&target).await else {
                    continue;
                };
                let (f2, t2) = (f.clone(), t.clone());
                let h = tokio::spawn(relay(client, server, f2, t2));
                t.lock().unwrap().push(h);
            }
        });
        tasks.lock().unwrap().push(accept);
        FaultRelay { port, fault, tasks }
    }

    /// The relay's address, for `[[servers]] address`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Arms `fault` for the next bytes a server sends.
    pub fn arm(&self, fault: Fault) {
        *self.fault.lock().unwrap() = fault;
    }

    /// True once the armed fault has happened.
    pub fn fired(&self) -> bool {
        *self.fault.lock().unwrap() == Fault::None
    }
}

impl Drop for FaultRelay {
    fn drop(&mut self) {
        for t in self.tasks.lock().unwrap().drain(..) {
            t.abort();
        }
    }
}

async fn relay(
    client: TcpStream,
    server: TcpStream,
    fault: Arc<Mutex<Fault>>,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
) {
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let up = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut cr, &mut sw).await;
        let _ = sw.shutdown().await;
    });
    tasks.lock().unwrap().push(up);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match sr.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let (pass, then) = {
            let mut f = fault.lock().unwrap();
            match &mut *f {
                Fault::None => (n, None),
                Fault::CutAfter(left) | Fault::StallAfter(left) if *left >= n => {
                    *left -= n;
                    (n, None)
                }
                Fault::CutAfter(left) | Fault::StallAfter(left) => {
                    let pass = *left;
                    (pass, Some(std::mem::replace(&mut *f, Fault::None)))
                }
                Fault::Garbage(_) => (0, Some(std::mem::replace(&mut *f, Fault::None))),
            }
        };
        if cw.write_all(&buf[..pass]).await.is_err() {
            break;
        }
        match then {
            None => {}
            Some(Fault::CutAfter(_)) => return, // both halves dropped: closed
            Some(Fault::Garbage(g)) => {
                let _ = cw.write_all(&g).await;
                return hold(cw, sr).await;
            }
            Some(_) => return hold(cw, sr).await,
        }
    }
    let _ = cw.shutdown().await;
}

/// Keeps a stalled connection open (until the relay is dropped).
async fn hold<A, B>(_a: A, _b: B) {
    std::future::pending::<()>().await
}

/// A listener that answers every connection with `garbage` and then says nothing more
/// (connections are kept open): something that is not a MySQL server.
pub async fn garbage_server(garbage: &'static [u8]) -> (u16, JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = l.local_addr().unwrap().port();
    let h = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((mut s, _)) = l.accept().await {
            let _ = s.write_all(garbage).await;
            open.push(s);
        }
    });
    (port, h)
}

/// A listener that logs clients in halfway: it passes on a real greeting from `target`, takes
/// the client's handshake response, then answers with `garbage` and says nothing more.
pub async fn lying_server(target: String, garbage: &'static [u8]) -> (u16, JoinHandle<()>) {
    use sluice_mysql::wire::packet::{frame, read_packet};
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = l.local_addr().unwrap().port();
    let h = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((mut client, _)) = l.accept().await {
            let Ok(mut server) = TcpStream::connect(&target).await else {
                continue;
            };
            let mut buf = bytes::BytesMut::new();
            let Ok(greeting) = read_packet(&mut server, &mut buf, 1 << 16).await else {
                continue;
            };
            let mut out = Vec::new();
            frame(&mut out, greeting.seq, &greeting.payload);
            let mut from_client = bytes::BytesMut::new();
            if client.write_all(&out).await.is_err()
                || read_packet(&mut client, &mut from_client, 1 << 16)
                    .await
                    .is_err()
            {
                continue;
            }
            let _ = client.write_all(garbage).await;
            open.push((client, server));
        }
    });
    (port, h)
}
