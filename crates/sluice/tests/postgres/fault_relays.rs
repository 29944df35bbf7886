//! Relays that stand between sluice and a PostgreSQL server and make the server misbehave on
//! cue: rewrite what it sends, cut the connection or go silent at a marker (used by
//! `server_faults`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A relay to `target` that passes each whole message the server sends through `rewrite`
/// (what it returns goes to the client in its place, in the same write).
pub fn rewriting_relay(target: String, rewrite: fn(Vec<u8>) -> Vec<u8>) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = TcpStream::connect(&target).await else {
                return;
            };
            let (mut from_client, mut to_client) = client.into_split();
            let (mut from_server, mut to_server) = server.into_split();
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut from_client, &mut to_server).await;
            });
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 8192];
                while let Ok(n @ 1..) = from_server.read(&mut chunk).await {
                    buf.extend_from_slice(&chunk[..n]);
                    let mut out = Vec::new();
                    if buf == b"N" {
                        // The answer to an SSLRequest (no TLS): one byte, no length.
                        out.push(buf.remove(0));
                    }
                    while buf.len() >= 5 {
                        let len = u32::from_be_bytes(buf[1..5].try_into().unwrap()) as usize;
                        if buf.len() < 1 + len {
                            break;
                        }
                        let msg: Vec<u8> = buf.drain(..1 + len).collect();
                        out.extend_from_slice(&rewrite(msg));
                    }
                    if to_client.write_all(&out).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// A relay to `target` that, once `armed`, closes the first connection (both ways, nothing
/// answered) on which the client sends `marker`, as a server that died or closed it would,
/// and disarms.
pub fn cutting_relay(target: String, marker: &'static [u8], armed: Arc<AtomicBool>) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = TcpStream::connect(&target).await else {
                return;
            };
            let armed = armed.clone();
            let (mut from_client, mut to_client) = client.into_split();
            let (mut from_server, mut to_server) = server.into_split();
            let down = tokio::spawn(async move {
                let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
            });
            tokio::spawn(async move {
                let mut chunk = [0u8; 8192];
                while let Ok(n @ 1..) = from_client.read(&mut chunk).await {
                    let seen = chunk[..n].windows(marker.len()).any(|w| w == marker);
                    if seen && armed.swap(false, Ordering::SeqCst) {
                        // Both halves dropped: the connection closes.
                        down.abort();
                        return;
                    }
                    if to_server.write_all(&chunk[..n]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// A relay to `target` that, once `armed`, passes the first message carrying `marker` on to
/// the server, drops everything the server answers from then on and closes the connection
/// once that answer's ReadyForQuery came: a connection lost after its statement ran, before
/// its answer arrived. Disarms.
pub fn muting_relay(target: String, marker: &'static [u8], armed: Arc<AtomicBool>) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = TcpStream::connect(&target).await else {
                return;
            };
            let armed = armed.clone();
            let muted = Arc::new(AtomicBool::new(false));
            let mute = muted.clone();
            let (mut from_client, mut to_client) = client.into_split();
            let (mut from_server, mut to_server) = server.into_split();
            let up = tokio::spawn(async move {
                let mut chunk = [0u8; 8192];
                while let Ok(n @ 1..) = from_client.read(&mut chunk).await {
                    let seen = chunk[..n].windows(marker.len()).any(|w| w == marker);
                    if seen && armed.swap(false, Ordering::SeqCst) {
                        mute.store(true, Ordering::SeqCst);
                    }
                    if to_server.write_all(&chunk[..n]).await.is_err() {
                        return;
                    }
                }
            });
            tokio::spawn(async move {
                let mut chunk = [0u8; 8192];
                let mut dropped = Vec::new();
                while let Ok(n @ 1..) = from_server.read(&mut chunk).await {
                    if muted.load(Ordering::SeqCst) {
                        dropped.extend_from_slice(&chunk[..n]);
                        if dropped.windows(5).any(|w| w == b"Z\0\0\0\x05") {
                            // Both halves dropped: the connection closes.
                            up.abort();
                            return;
                        }
                        continue;
                    }
                    if to_client.write_all(&chunk[..n]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// A relay to `target` that, after a ReadyForQuery inside a transaction ('T'), sends a
/// NoticeResponse: the server's own asynchronous notice (a shutdown warning, say), arriving
/// with the answer before it in one read.
pub fn notice_after_ready_relay(target: String) -> String {
    rewriting_relay(target, |mut msg| {
        if msg == b"Z\0\0\0\x05T" {
            let body = b"SWARNING\0VWARNING\0C01000\0Masynchronous notice\0\0";
            msg.push(b'N');
            msg.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
            msg.extend_from_slice(body);
        }
        msg
    })
}
