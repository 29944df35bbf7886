//! A TCP relay in front of a real server that can misbehave on command, for tests of what a
//! slow or silent server does to sluice. Plain threads: usable from any test, sync or async.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the relay does.
#[derive(Default)]
pub struct Controls {
    /// The next answers to connections logged in as this user (one per connection, this
    /// many connections) stall until the client closes the connection (armed by
    /// [`Relay::stall_answers_to`]).
    stall_user: Mutex<Option<(String, u32)>>,
    /// Connections stalled so far whose client then closed them.
    pub stalled_and_closed: AtomicU64,
    stop: AtomicBool,
}

/// A running relay.
pub struct Relay {
    /// The port clients connect to.
    pub port: u16,
    /// Its controls.
    pub controls: Arc<Controls>,
}

impl Relay {
    /// Relays 127.0.0.1:<new port> to 127.0.0.1:`target`.
    pub fn start(target: u16) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").expect("relay binds");
        let port = listener.local_addr().unwrap().port();
        let controls = Arc::new(Controls::default());
        let c = controls.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if c.stop.load(SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                let c = c.clone();
                std::thread::spawn(move || pump_pair(client, server, c));
            }
        });
        Relay { port, controls }
    }

    /// The next answer the server sends to a connection logged in as `user` is held back
    /// until the client gives up and closes the connection; so for the next `connections`
    /// connections of that user.
    pub fn stall_answers_to(&self, user: &str, connections: u32) {
        *lock(&self.controls.stall_user) = Some((user.to_string(), connections));
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.controls.stop.store(true, SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The user name in a MySQL handshake response (client's first packet after the greeting).
fn handshake_user(packet: &[u8]) -> Option<String> {
    // 4-byte header, capabilities (4), max packet (4), collation (1), 23 zero bytes.
    let body = packet.get(4 + 32..)?;
    let end = body.iter().position(|b| *b == 0)?;
    Some(String::from_utf8_lossy(&body[..end]).into_owned())
}

fn pump_pair(client: TcpStream, server: TcpStream, c: Arc<Controls>) {
    let user: Arc<Mutex<Option<String>>> = Default::default();
    let (mut c_read, mut s_write) = (client.try_clone().unwrap(), server.try_clone().unwrap());
    let u = user.clone();
    // Client to server: learn the user from the handshake response.
    let up = std::thread::spawn(move || {
        let mut buf = [0u8; 16384];
        let mut first = true;
        loop {
            let n = match c_read.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if first {
                first = false;
                *lock(&u) = handshake_user(&buf[..n]);
            }
            if s_write.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = s_write.shutdown(Shutdown::Write);
    });
    // Server to client, possibly stalling.
    let (mut s_read, mut c_write) = (server, client);
    let mut buf = [0u8; 16384];
    loop {
        let n = match s_read.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let stall = {
            let me = lock(&user).clone();
            let mut armed = lock(&c.stall_user);
            match (&mut *armed, me) {
                (Some((u, n)), Some(me)) if *u == me && *n > 0 => {
                    *n -= 1;
                    true
                }
                _ => false,
            }
        };
        if stall {
            // Hold the answer: wait for the client to close (its read returns 0).
            let _ = c_write.set_read_timeout(Some(Duration::from_secs(120)));
            let mut probe = [0u8; 1];
            loop {
                match c_write.read(&mut probe) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => continue,
                }
            }
            c.stalled_and_closed.fetch_add(1, SeqCst);
            break;
        }
        if c_write.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = c_write.shutdown(Shutdown::Both);
    let _ = s_read.shutdown(Shutdown::Both);
    let _ = up.join();
}
