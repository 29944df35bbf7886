//! Cancel requests that arrive while sluice, not the server, has the statement: waiting in
//! line for a connection, or while the session's settings are replayed ahead of it.

use super::pg::http::get_json;
use super::pg::raw::{self, Raw};
use super::pg::start;
use postgres_protocol::message::frontend;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A statement waiting in line for a connection when its client cancels it never runs: the
/// client gets 57014 as from a statement cancelled while running (directly, a statement
/// waiting on a lock is cancelled alike and writes nothing), and the session goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_cancelled_while_it_waits_for_a_connection_never_runs() {
    let env = start(
        0,
        "\n[pool]\nmax_connections = 1\nqueue_timeout = \"20s\"\n",
    )
    .await;
    let admin = env.admin().await;
    let mut holder = Raw::connect(env.port, "app", "app", "postgres").await;
    holder
        .try_simple("CREATE TABLE waited (id int)")
        .await
        .unwrap();
    // (Logged in first: a login proves the database on a connection.)
    let mut w = Raw::connect(env.port, "app", "app", "postgres").await;
    // The pool's one connection, held in a transaction.
    holder.try_simple("BEGIN").await.unwrap();
    holder.try_simple("SELECT txid_current()").await.unwrap();
    frontend::query("INSERT INTO waited VALUES (42)", &mut w.out).unwrap();
    w.flush().await;
    // In line (the admin API's count), so the cancel is for a statement sluice holds.
    wait_in_line(admin.addr).await;
    // The cancel ends the wait (the connection is still held), as one ends a wait on a lock.
    raw::cancel(env.port, w.key).await;
    let answer = w.until_ready().await;
    let tags: String = answer.iter().map(|m| m.tag as char).collect();
    assert_eq!(tags, "EZ", "{answer:?}");
    assert_eq!(answer[0].sqlstate().as_deref(), Some("57014"));
    assert_eq!(
        answer[0].field(b'M').as_deref(),
        Some("canceling statement due to user request")
    );
    assert_eq!(answer[1].body, b"I");
    holder.try_simple("COMMIT").await.unwrap();
    let rows = w.try_simple("SELECT count(*) FROM waited").await.unwrap();
    assert_eq!(
        Raw::column(&rows),
        ["0"],
        "the cancelled INSERT wrote nothing"
    );
    // A cancel is for one statement: the next one runs.
    w.try_simple("INSERT INTO waited VALUES (7)").await.unwrap();
    let rows = w.try_simple("SELECT count(*) FROM waited").await.unwrap();
    assert_eq!(Raw::column(&rows), ["1"]);
    // Inside a block whose BEGIN sluice still holds back, and in a batch ended by Flush: the
    // block fails as on PostgreSQL (25P02 until it ends; its COMMIT rolls back) and what the
    // client sends up to its Sync is skipped.
    holder.try_simple("BEGIN").await.unwrap();
    holder.try_simple("SELECT txid_current()").await.unwrap();
    w.try_simple("BEGIN").await.unwrap();
    w.extended("", Some("INSERT INTO waited VALUES (8)"), &[]);
    frontend::flush(&mut w.out);
    w.flush().await;
    wait_in_line(admin.addr).await;
    raw::cancel(env.port, w.key).await;
    let error = w.next().await;
    assert_eq!(
        (error.tag, error.sqlstate().as_deref()),
        (b'E', Some("57014"))
    );
    w.extended("", Some("INSERT INTO waited VALUES (9)"), &[]);
    frontend::sync(&mut w.out);
    let (tags, msgs) = w.round(1).await;
    assert_eq!((tags.as_str(), msgs[0].body.as_slice()), ("Z", &b"E"[..]));
    // (The block is now opened, failed, on the server: it needs the pool's one connection.)
    holder.try_simple("COMMIT").await.unwrap();
    let refused = w.try_simple("INSERT INTO waited VALUES (10)").await;
    assert!(
        matches!(&refused, Err(e) if e.starts_with("25P02")),
        "{refused:?}"
    );
    frontend::query("COMMIT", &mut w.out).unwrap();
    let (tags, msgs) = w.round(1).await;
    assert_eq!(tags, "CZ");
    assert_eq!(
        (msgs[0].body.as_slice(), msgs[1].body.as_slice()),
        (&b"ROLLBACK\0"[..], &b"I"[..])
    );
    let rows = w.try_simple("SELECT count(*) FROM waited").await.unwrap();
    assert_eq!(
        Raw::column(&rows),
        ["1"],
        "nothing of the failed block was written"
    );
}

/// A plain read (a lone simple-query read from a session with nothing in play: sluice's short
/// path) is cancelled as any statement: while it waits in line for a connection (it never
/// runs, and the connection it waited for serves the next statement) and while it runs (the
/// server cancels it). While it runs, the sessions view shows its text and its server; once
/// it is over, neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_read_is_cancelled_in_line_and_running_and_shown_while_it_runs() {
    let env = start(
        0,
        "\n[pool]\nmax_connections = 1\nqueue_timeout = \"20s\"\n",
    )
    .await;
    let admin = env.admin().await;
    let mut holder = Raw::connect(env.port, "app", "app", "postgres").await;
    let mut r = Raw::connect(env.port, "app", "app", "postgres").await;
    // (`tags`: what may come; in line, the error alone; running, after the row description
    // if the server had sent it, as directly.)
    let cancelled = |answer: &[raw::Msg], tags: &[&str]| {
        let got: String = answer.iter().map(|m| m.tag as char).collect();
        assert!(tags.contains(&got.as_str()), "{answer:?}");
        let n = answer.len();
        assert_eq!(answer[n - 2].sqlstate().as_deref(), Some("57014"));
        assert_eq!(answer[n - 1].body, b"I");
    };
    // In line behind a transaction holding the writer's one connection (the hint sends the
    // read there).
    holder.try_simple("BEGIN").await.unwrap();
    holder.try_simple("SELECT txid_current()").await.unwrap();
    frontend::query("SELECT 1 /* sluice:writer */", &mut r.out).unwrap();
    r.flush().await;
    wait_in_line(admin.addr).await;
    raw::cancel(env.port, r.key).await;
    cancelled(&r.until_ready().await, &["EZ"]);
    holder.try_simple("COMMIT").await.unwrap();
    let rows = r.try_simple("SELECT 2 /* sluice:writer */").await.unwrap();
    assert_eq!(Raw::column(&rows), ["2"]);
    // Running on the server.
    let text = "SELECT pg_sleep(60) /* sluice:writer */";
    frontend::query(text, &mut r.out).unwrap();
    r.flush().await;
    let id = r.key.0;
    let shown = |want_running: bool| {
        let all = env.process.runtime.sessions.all();
        let s = all.iter().find(|s| s.key().id == id).expect("the session");
        let now = s.current();
        let statement = now
            .statement
            .map(|(sql, _)| String::from_utf8_lossy(&sql).into_owned());
        let backend = now.backend.map(|(server, _)| server.address.to_string());
        match want_running {
            true => {
                statement.as_deref() == Some(text) && backend == Some(env.topo.primary().addr())
            }
            false => statement.is_none() && backend.is_none(),
        }
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !shown(true) {
        assert!(
            Instant::now() < deadline,
            "the running read was never shown"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Running on the server (a cancel that came before the query would find nothing to stop).
    let active = format!(
        "SELECT count(*) FROM pg_stat_activity WHERE query = '{text}' AND state = 'active'"
    );
    while env.topo.primary().sql(&active).unwrap().trim() != "1" {
        assert!(
            Instant::now() < deadline,
            "the read never ran on the server"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    raw::cancel(env.port, r.key).await;
    cancelled(&r.until_ready().await, &["TEZ", "EZ"]);
    // (Cleared once the answer is relayed: awaited, not raced.)
    while !shown(false) {
        assert!(Instant::now() < deadline, "still shown after it ended");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let rows = r.try_simple("SELECT 3").await.unwrap();
    assert_eq!(Raw::column(&rows), ["3"]);
}

/// Waits until one statement waits in line for the writer's connection (the admin API).
async fn wait_in_line(admin: std::net::SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let hgs = get_json(admin, "/api/hostgroups");
        let writer = hgs
            .as_array()
            .unwrap()
            .iter()
            .find(|h| h["name"] == "writer");
        if writer.unwrap()["waiting"].as_u64() == Some(1) {
            return;
        }
        assert!(Instant::now() < deadline, "nothing waited: {hgs}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A client that cancels its own statements over and over, sharing the pool's one connection
/// with another client (so that its many settings are replayed ahead of each statement):
/// directly, a cancel only ever fails a statement with 57014 and the session goes on. Through
/// sluice it must never hit the replay (which would end the session), whichever moment it
/// lands in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancels_never_hit_the_settings_replayed_ahead_of_a_statement() {
    let env = start(
        0,
        "\n[pool]\nmax_connections = 1\nqueue_timeout = \"60s\"\n",
    )
    .await;
    let port = env.port;
    let mut a = Raw::connect(port, "app", "app", "postgres").await;
    a.try_simple(
        "SET work_mem = '3MB'; SET lock_timeout = '9s'; SET DateStyle = 'German'; \
         SET TimeZone = 'Asia/Tokyo'; SET extra_float_digits = 2; SET random_page_cost = 3; \
         SET seq_page_cost = 2; SET cpu_tuple_cost = 0.02; SET enable_seqscan = off; \
         SET enable_hashjoin = off; SET enable_mergejoin = off; SET geqo = off; SET jit = off; \
         SET maintenance_work_mem = '70MB'; SET IntervalStyle = 'iso_8601'",
    )
    .await
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let key = a.key;
    let spam = {
        let stop = stop.clone();
        tokio::spawn(async move {
            while !stop.load(Relaxed) {
                raw::cancel(port, key).await;
            }
        })
    };
    let other = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut b = Raw::connect(port, "app", "app", "postgres").await;
            while !stop.load(Relaxed) {
                b.try_simple("SELECT 1").await.unwrap();
            }
        })
    };
    let mut cancelled = 0;
    for _ in 0..200 {
        frontend::query("SELECT pg_sleep(0.002)", &mut a.out).unwrap();
        a.flush().await;
        for m in a.until_ready().await {
            if m.tag == b'E' {
                assert_eq!(
                    (m.sqlstate().as_deref(), m.field(b'S').as_deref()),
                    (Some("57014"), Some("ERROR")),
                    "{:?}",
                    m.field(b'M')
                );
                cancelled += 1;
            }
        }
    }
    stop.store(true, Relaxed);
    spam.await.unwrap();
    other.await.unwrap();
    // Its settings are still its own.
    let rows = a.try_simple("SHOW DateStyle").await.unwrap();
    assert_eq!(Raw::column(&rows), ["German, DMY"]);
    println!("{cancelled} of 200 statements cancelled");
}
