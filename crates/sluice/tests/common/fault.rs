//! Hostile or slow servers for tests: a relay in front of a real MariaDB server that
//! misbehaves on command (cuts, stalls or garbles what the server sends, holds back the
//! answers to one user, or opens every connection late, as over a long network path), and
//! listeners that answer with garbage instead of a greeting or a login.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;
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
    /// Hold back the next answer on connections logged in as `user` until the client closes
    /// the connection; so for the next `connections` such connections.
    StallAnswersTo {
        /// The user name in the handshake response.
        user: String,
        /// How many connections.
        connections: u32,
    },
}

/// A TCP relay to a server.
pub struct FaultRelay {
    pub port: u16,
    fault: Arc<Mutex<Fault>>,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
    /// Connections held back by [`Fault::StallAnswersTo`] that their client then closed.
    pub stalled_and_closed: Arc<AtomicU64>,
}

impl FaultRelay {
    /// Relays connections on a free port to `target` (`host:port`).
    pub async fn start(target: String) -> FaultRelay {
        FaultRelay::start_now(target, Duration::ZERO)
    }

    /// Like [`FaultRelay::start`], each connection to `target` opened `delay` after it was
    /// accepted (a connect through it takes at least `delay`, on any machine).
    pub async fn slow(target: String, delay: Duration) -> FaultRelay {
        FaultRelay::start_now(target, delay)
    }

    /// Like [`FaultRelay::start`], from synchronous code running inside a tokio runtime.
    pub fn start_now(target: String, delay: Duration) -> FaultRelay {
        let std = std::net::TcpListener::bind("127.0.0.1:0").expect("bind relay");
        std.set_nonblocking(true).unwrap();
        let l = TcpListener::from_std(std).expect("relay listener");
        let port = l.local_addr().unwrap().port();
        let fault = Arc::new(Mutex::new(Fault::None));
        let tasks: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let stalled = Arc::new(AtomicU64::new(0));
        let (f, t, st) = (fault.clone(), tasks.clone(), stalled.clone());
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = l.accept().await {
                let (f2, t2, st2, target) = (f.clone(), t.clone(), st.clone(), target.clone());
                let h = tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    if let Ok(server) = TcpStream::connect(&target).await {
                        relay(client, server, f2, t2, st2).await;
                    }
                });
                t.lock().unwrap().push(h);
            }
        });
        tasks.lock().unwrap().push(accept);
        FaultRelay {
            port,
            fault,
            tasks,
            stalled_and_closed: stalled,
        }
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

/// The user name in a MySQL handshake response (the client's first packet).
fn handshake_user(packet: &[u8]) -> Option<String> {
    // 4-byte header, capabilities (4), max packet (4), collation (1), 23 zero bytes.
    let body = packet.get(4 + 32..)?;
    let end = body.iter().position(|b| *b == 0)?;
    Some(String::from_utf8_lossy(&body[..end]).into_owned())
}

async fn relay(
    client: TcpStream,
    server: TcpStream,
    fault: Arc<Mutex<Fault>>,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
    stalled: Arc<AtomicU64>,
) {
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let user: Arc<Mutex<Option<String>>> = Arc::default();
    let (client_gone_tx, mut client_gone) = tokio::sync::watch::channel(false);
    let u = user.clone();
    let up = tokio::spawn(async move {
        // The first packet names the user; then plain copying.
        let mut first = vec![0u8; 16 * 1024];
        if let Ok(n) = cr.read(&mut first).await {
            if n > 0 {
                *u.lock().unwrap() = handshake_user(&first[..n]);
                if sw.write_all(&first[..n]).await.is_ok() {
                    let _ = tokio::io::copy(&mut cr, &mut sw).await;
                }
            }
        }
        let _ = sw.shutdown().await;
        let _ = client_gone_tx.send(true);
    });
    tasks.lock().unwrap().push(up);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match sr.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let (pass, then) = {
            let me = user.lock().unwrap().clone();
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
                Fault::StallAnswersTo { user, connections } if me.as_ref() == Some(user) => {
                    *connections -= 1;
                    let this = Fault::StallAnswersTo {
                        user: user.clone(),
                        connections: 1,
                    };
                    if *connections == 0 {
                        *f = Fault::None;
                    }
                    (0, Some(this))
                }
                Fault::StallAnswersTo { .. } => (n, None),
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
            Some(Fault::StallAnswersTo { .. }) => {
                // Until the client gives up and closes.
                while !*client_gone.borrow() {
                    if client_gone.changed().await.is_err() {
                        break;
                    }
                }
                stalled.fetch_add(1, SeqCst);
                return;
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
