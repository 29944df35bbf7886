//! The admin HTTP listener can never starve the data path: idle, silent and half-sent
//! connections hold at most `admin.max_connections` of sluice's file descriptors (the rest
//! are answered 503 and closed at once), each is closed after `admin.header_timeout` or
//! `admin.idle_timeout`, oversized bodies are refused, and database logins carry on.
//! sluice runs in this process: its accepted admin sockets are read from /proc/self/fd.
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use mysql_async::prelude::*;
use mysql_async::{Conn, Opts};
use sluice_config::{AdminConfig, HumanDuration};
use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const HANG: Duration = Duration::from_secs(90);

/// Sockets this process holds whose local port is `port` and that are not listening: the
/// admin connections sluice accepted (the test's own ends have other local ports).
fn accepted_sockets(port: u16) -> usize {
    let mut inodes = HashSet::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            let f: Vec<&str> = line.split_whitespace().collect();
            let local = f[1].rsplit(':').next().unwrap();
            if u16::from_str_radix(local, 16) == Ok(port) && f[3] != "0A" {
                inodes.insert(format!("socket:[{}]", f[9]));
            }
        }
    }
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|l| inodes.contains(l.to_string_lossy().as_ref()))
        .count()
}

/// Reads until sluice closes the connection (EOF or reset); what arrived, or None if it
/// stayed open past the hang guard.
async fn until_closed(mut s: TcpStream) -> Option<String> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + HANG;
    loop {
        match tokio::time::timeout_at(deadline.into(), s.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(String::from_utf8_lossy(&got).into_owned()),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// One request with `Connection: close`; the status, if an answer came.
async fn try_request(addr: SocketAddr, head: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(addr).await.ok()?;
    s.write_all(head.as_bytes()).await.ok()?;
    let text = until_closed(s).await?;
    let (status_line, _) = text.split_once("\r\n")?;
    let status = status_line.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, text))
}

fn admin_config(max_connections: u32, header: u64, idle: u64) -> AdminConfig {
    let mut cfg = AdminConfig::new("127.0.0.1:0");
    cfg.max_connections = max_connections;
    cfg.header_timeout = HumanDuration::from_millis(header);
    cfg.idle_timeout = HumanDuration::from_millis(idle);
    cfg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_idle_admin_connections_is_capped_and_closed() {
    const CAP: usize = 8;
    const OPENED: usize = 40;
    let env = common::start(0, "").await;
    // The held connections stay open at least 10 s: the refusals below cannot race them.
    let admin = env
        .admin_with(&admin_config(CAP as u32, 10_000, 10_000))
        .await;
    let port = admin.addr.port();
    assert_eq!(accepted_sockets(port), 0);

    // The first ones (accepted first: the accept queue is in order) half with a request
    // sent half-way, half silent; then silent ones over the cap.
    let mut readers = Vec::new();
    for i in 0..OPENED {
        let mut s = TcpStream::connect(admin.addr).await.unwrap();
        if i < CAP && i % 2 == 0 {
            s.write_all(b"GET /api/servers HTTP/1.1\r\nHost: sluice\r\n")
                .await
                .unwrap();
        }
        readers.push(tokio::spawn(until_closed(s)));
    }

    // While they are open: a database login through the client port works.
    let mut c = tokio::time::timeout(HANG, Conn::new(Opts::from_url(&env.url("test")).unwrap()))
        .await
        .expect("login did not hang")
        .expect("a database login works while the admin port is flooded");
    let one: Option<u32> = c.query_first("SELECT 1").await.unwrap();
    assert_eq!(one, Some(1));

    // sluice's admin sockets never exceed the cap (plus, for an instant, the one being
    // turned away), and reach it.
    let mut most = 0;
    let start = Instant::now();
    while readers.iter().any(|r| !r.is_finished()) {
        assert!(start.elapsed() < HANG, "admin connections left open");
        let n = accepted_sockets(port);
        assert!(
            n <= CAP + 1,
            "{n} admin sockets open, over the cap of {CAP}"
        );
        most = most.max(n);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        most >= CAP,
        "the first {CAP} connections were held ({most})"
    );
    assert_eq!(accepted_sockets(port), 0, "every admin socket was closed");

    // Those over the cap were told why; those held were closed without an answer.
    let mut refused = 0;
    for r in readers {
        let got = r.await.unwrap().expect("closed by sluice");
        if got.is_empty() {
            continue;
        }
        assert!(got.starts_with("HTTP/1.1 503 "), "{got}");
        assert!(got.contains("admin.max_connections = 8"), "{got}");
        refused += 1;
    }
    assert_eq!(refused, OPENED - CAP);

    // The admin API answers a proper client again (503 while the held ones time out).
    let start = Instant::now();
    loop {
        assert!(start.elapsed() < HANG, "the admin API never answered again");
        let head = "GET /api/servers HTTP/1.1\r\nHost: sluice\r\nConnection: close\r\n\r\n";
        match try_request(admin.addr, head).await {
            Some((200, body)) => {
                assert!(body.contains(&env.topo.primary().addr()), "{body}");
                break;
            }
            Some((503, _)) | None => tokio::time::sleep(Duration::from_millis(200)).await,
            Some((status, body)) => panic!("{status}: {body}"),
        }
    }
    c.query_drop("SELECT 1").await.unwrap();
    drop(c);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_heads_idle_keep_alives_and_big_bodies_are_cut_off() {
    let env = common::start(0, "").await;
    let mut cfg = admin_config(32, 1_000, 2_000);
    cfg.max_body_size = 4096;
    let admin = env.admin_with(&cfg).await;

    // A head trickling in byte after byte is closed after header_timeout, though bytes move.
    let (mut r, mut w) = TcpStream::connect(admin.addr).await.unwrap().into_split();
    w.write_all(b"GET /api/servers HTTP/1.1\r\nHost: sluice\r\nX-Slow: ")
        .await
        .unwrap();
    let closed = tokio::spawn(async move {
        let mut buf = [0u8; 1024];
        while let Ok(n) = r.read(&mut buf).await {
            if n == 0 {
                break;
            }
        }
    });
    let start = Instant::now();
    while !closed.is_finished() && start.elapsed() < HANG {
        if w.write_all(b"a").await.is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        tokio::time::timeout(Duration::from_secs(10), closed)
            .await
            .is_ok(),
        "a trickling request head was kept open"
    );

    // A keep-alive connection is answered, then closed once idle.
    let mut s = TcpStream::connect(admin.addr).await.unwrap();
    s.write_all(b"GET /api/servers HTTP/1.1\r\nHost: sluice\r\n\r\n")
        .await
        .unwrap();
    let got = until_closed(s)
        .await
        .expect("an idle keep-alive connection was kept open");
    assert!(got.starts_with("HTTP/1.1 200 "), "{got}");

    // A body over max_body_size is refused before anything reads it.
    let head = "POST /api/reload HTTP/1.1\r\nHost: sluice\r\nContent-Length: 10000000\r\nConnection: close\r\n\r\n";
    let (status, text) = try_request(admin.addr, head).await.expect("an answer");
    assert_eq!(status, 413, "{text}");
    assert!(
        text.contains("over admin.max_body_size (4096 bytes)"),
        "{text}"
    );
    // Within the limit, the request goes through (here: no configuration file to reload).
    let head =
        "POST /api/reload HTTP/1.1\r\nHost: sluice\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}";
    let (status, text) = try_request(admin.addr, head).await.expect("an answer");
    assert_eq!(status, 409, "{text}");
}
