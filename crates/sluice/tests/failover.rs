//! Health monitoring and automatic failover against real MariaDB servers: roles discovered
//! from replication state, a primary that is killed, hangs or refuses connections, the old
//! primary coming back (rejoined, or fenced when it has errant transactions).
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::load::{ids_on, Writer};
use common::{Env, Managed};
use mysql_async::prelude::*;
use mysql_async::{Conn, Opts};
use sluice_core::Role;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(60);

async fn conn(env: &Env) -> Conn {
    Conn::new(Opts::from_url(&env.url("test")).unwrap())
        .await
        .expect("connect through sluice")
}

async fn managed(failover: bool) -> Env {
    managed_with(failover, false).await
}

/// `semi_sync`: semi-synchronous replication (AFTER_SYNC), so that no acknowledged write can
/// be missing from every replica when the primary dies.
async fn managed_with(failover: bool, semi_sync: bool) -> Env {
    let env = common::start_managed(Managed {
        replicas: 2,
        failover,
        semi_sync,
        ..Default::default()
    })
    .await;
    // The first round ran before the listener opened: roles are known, unless a check
    // outlived the monitor's 500 ms limit on a busy machine; then a later round places them.
    env.wait_for("server 0 the primary, 1 and 2 replicas", LONG, || {
        env.primary_index() == Some(0)
            && env.role(1) == Role::Replica
            && env.role(2) == Role::Replica
    })
    .await;
    let mut c = conn(&env).await;
    c.query_drop("CREATE TABLE w (id INT PRIMARY KEY, sid INT)")
        .await
        .unwrap();
    // Replication is asynchronous (semi-sync waits for one replica to receive, not apply):
    // the readers below must not meet a replica that has not created the table yet.
    env.sync();
    env
}

/// `Master_Port` a server replicates from (None if it does not).
fn source_port(env: &Env, i: usize) -> Option<u16> {
    env.topo.servers[i].source_port().unwrap()
}

/// Reads through the proxy in a loop; counts failures.
fn reader(
    env: &Env,
    stop: Arc<AtomicBool>,
) -> (Arc<AtomicU64>, Arc<AtomicU64>, tokio::task::JoinHandle<()>) {
    let url = env.url("test");
    let ok = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let (o, f) = (ok.clone(), failed.clone());
    let task = tokio::spawn(async move {
        let mut c = Conn::new(Opts::from_url(&url).unwrap())
            .await
            .expect("reader connects");
        let deadline = Instant::now() + Duration::from_secs(120);
        while !stop.load(Relaxed) && Instant::now() < deadline {
            match c.query_first::<u32, _>("SELECT COUNT(*) FROM w").await {
                Ok(_) => o.fetch_add(1, Relaxed),
                Err(e) => {
                    eprintln!("read failed: {e}");
                    f.fetch_add(1, Relaxed)
                }
            };
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    (ok, failed, task)
}

/// After a failover to `new`: the other replica follows it, it is writable, every
/// acknowledged row is there.
fn check_after_failover(env: &Env, old: usize, new: usize, acked: &BTreeSet<u32>) {
    assert_ne!(new, old);
    assert!(!env.read_only(new), "the new primary is writable");
    assert_eq!(
        source_port(env, new),
        None,
        "the new primary replicates from no one"
    );
    for i in (0..env.topo.servers.len()).filter(|i| *i != old && *i != new) {
        assert_eq!(
            source_port(env, i),
            Some(env.topo.servers[new].port),
            "replica {i} follows the new primary\n{}",
            env.events()
        );
        assert!(env.read_only(i));
    }
    let on_new = ids_on(env, new);
    let lost: Vec<_> = acked.difference(&on_new).collect();
    assert!(
        lost.is_empty(),
        "acknowledged rows missing on the new primary: {lost:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simplest_config_discovers_roles_and_splits() {
    let env = managed(false).await;
    let mut c = conn(&env).await;
    // Writes reach the primary, reads the replicas (roles came from the monitor).
    c.query_drop("INSERT INTO w VALUES (1, @@server_id)")
        .await
        .unwrap();
    assert_eq!(
        env.topo.primary().sql("SELECT sid FROM test.w").unwrap(),
        "1"
    );
    env.sync();
    let mut seen = BTreeSet::new();
    for _ in 0..40 {
        seen.insert(
            c.query_first::<u32, _>("SELECT @@server_id")
                .await
                .unwrap()
                .unwrap(),
        );
    }
    assert_eq!(seen, [2, 3].into_iter().collect::<BTreeSet<u32>>());
    // What the operator sees.
    assert_eq!(&*env.server(0).hostgroup(), "writer");
    assert_eq!(&*env.server(1).hostgroup(), "reader");
    assert_eq!(env.server(1).state_text(), "ONLINE");
    let o = env.server(1).observed();
    assert!(o.reachable && o.read_only == Some(true) && o.replication_running == Some(true));
    assert_eq!(
        o.source.as_deref(),
        Some(env.topo.primary().addr().as_str())
    );
    assert!(o.rtt.is_some());
    // No failover without [failover] enabled: a dead primary stays the primary.
    env.topo.primary().kill().unwrap();
    env.wait_for("the dead primary taken out of service", LONG, || {
        env.server(0)
            .state_text()
            .starts_with("SHUNNED (unreachable")
    })
    .await;
    assert_eq!(env.primary_index(), Some(0));
    let err = c
        .query_drop("INSERT INTO w VALUES (2, 0)")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("writer"),
        "writes fail with a clear error: {err}"
    );
    // Reads still work.
    c.query_first::<u32, _>("SELECT COUNT(*) FROM w")
        .await
        .unwrap();
}

/// Kill -9 the primary under write load: writes resume on the most advanced replica, reads
/// never fail, the other replica follows the new primary, no acknowledged write is lost
/// (semi-synchronous replication: asynchronously, a write acknowledged just before the kill
/// may not have reached any replica yet).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_when_the_primary_is_killed() {
    let env = managed_with(true, true).await;
    let w = Writer::start(env.url("test"), 1);
    let stop = Arc::new(AtomicBool::new(false));
    let (reads_ok, reads_failed, rtask) = reader(&env, stop.clone());
    env.wait_for("some writes", LONG, || w.acked_ids().len() > 50)
        .await;
    // Two mariadb CLI sessions (libmariadb) with a statement in flight on the primary: an
    // autocommit write (its outcome unknown when the primary dies) and a transaction.
    let port = env.port;
    let in_flight = |sql: &'static str| {
        std::thread::spawn(move || {
            let out = common::cli_raw(port, "app", "app", Some("test"), sql, &[]);
            String::from_utf8_lossy(&out.stderr).into_owned()
        })
    };
    let autocommit = in_flight("INSERT INTO w SELECT 900001, SLEEP(30)");
    let trx = in_flight("BEGIN; INSERT INTO w VALUES (900002, 0); SELECT SLEEP(30)");
    env.wait_for("both statements running on the primary", LONG, || {
        env.topo
            .primary()
            .sql("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE '%SLEEP(30)%' AND INFO NOT LIKE '%PROCESSLIST%'")
            .is_ok_and(|n| n.trim() == "2")
    })
    .await;

    env.topo.primary().kill().unwrap();
    let killed = Instant::now();
    env.wait_for("a write after the kill", LONG, || {
        w.first_ack_after(killed).is_some()
    })
    .await;
    let resumed = w.first_ack_after(killed).unwrap() - killed;
    eprintln!(
        "first write acknowledged {} ms after SIGKILL",
        resumed.as_millis()
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let reads_before_stop = reads_ok.load(Relaxed);
    stop.store(true, Relaxed);
    rtask.await.unwrap();
    let (acked, errors) = w.finish().await;

    let new = env.primary_index().expect("a new primary");
    assert_ne!(new, 0, "{}", env.events());
    assert_eq!(env.role(new), Role::Primary);
    check_after_failover(&env, 0, new, &acked);
    // Writes after the kill landed on the new primary.
    let sid = env.topo.servers[new].server_id;
    let landed = env.topo.servers[new]
        .sql(&format!(
            "SELECT COUNT(*) > 0 FROM test.w WHERE sid = {sid}"
        ))
        .unwrap();
    assert_eq!(
        landed, "1",
        "writes after the kill landed on the new primary"
    );
    assert_eq!(
        reads_failed.load(Relaxed),
        0,
        "autocommit reads keep being served by replicas"
    );
    assert!(reads_before_stop > 0);
    // Only statements in flight at the moment of death may fail (and then the writer
    // reconnects): never after writes resumed.
    for (n, e, at) in &errors {
        assert!(
            *at < killed + resumed,
            "error after writes resumed (row {n}): {e}"
        );
    }
    assert!(
        errors.len() <= 2,
        "at most the statement in flight fails: {errors:?}"
    );
    let ev = env.events();
    for step in [
        "applied its relay log in",
        "promoted (read_only=0) in",
        "writes go to",
        "now replicates from",
        "complete in",
    ] {
        assert!(ev.contains(step), "event log lacks {step:?}:\n{ev}");
    }
    assert_eq!(env.monitor().stats.failovers.load(Relaxed), 1);
    // What the CLI sessions were told, in error codes their client library accepts.
    let autocommit = autocommit.join().unwrap();
    assert!(
        autocommit.contains("ERROR 1053 (08S01)")
            && autocommit.contains("lost connection to backend")
            && autocommit.contains("its outcome is unknown"),
        "{autocommit}"
    );
    let trx = trx.join().unwrap();
    assert!(
        trx.contains("ERROR 1213 (40001)") && trx.contains("the transaction was rolled back"),
        "{trx}"
    );
    let rows = ids_on(&env, new);
    assert!(!rows.contains(&900001) && !rows.contains(&900002));
}

/// SIGSTOP the primary: a statement in flight there fails with a clear error once it is
/// declared failed and its session (a transaction) ends; a new write waits and succeeds on the
/// new primary; the transaction is not replayed; the old primary, thawed, is fenced and
/// rejoins as a replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_when_the_primary_hangs_then_it_rejoins() {
    let env = managed(true).await;
    let mut trx = conn(&env).await;
    trx.query_drop("BEGIN").await.unwrap();
    trx.query_drop("INSERT INTO w VALUES (1000, @@server_id)")
        .await
        .unwrap();
    env.sync();

    env.topo.primary().pause().unwrap();
    let paused = Instant::now();
    // A new autocommit write waits for the new primary.
    let url = env.url("test");
    let waiting = tokio::spawn(async move {
        let mut c = Conn::new(Opts::from_url(&url).unwrap()).await.unwrap();
        c.query_drop("INSERT INTO w VALUES (2000, @@server_id)")
            .await
            .map(|_| Instant::now())
    });
    // A statement of an open transaction in flight on the hung primary: the transaction is
    // rolled back for certain; the client is told so (1213, restart the transaction) and its
    // session goes on.
    let r = tokio::time::timeout(
        Duration::from_secs(30),
        trx.query_drop("INSERT INTO w VALUES (1001, @@server_id)"),
    )
    .await;
    let err = r
        .expect("the in-flight statement must not hang forever")
        .unwrap_err();
    eprintln!(
        "in-flight statement failed after {} ms: {err}",
        paused.elapsed().as_millis()
    );
    match &err {
        mysql_async::Error::Server(e) => {
            assert_eq!((e.code, e.state.as_str()), (1213, "40001"), "{e:?}");
            assert!(
                e.message.contains("transaction was rolled back") && e.message.contains("failover"),
                "{e:?}"
            );
        }
        other => panic!("expected a server error, got {other}"),
    }
    // Outside any transaction now; nothing of the old one is replayed.
    let in_trx: u32 = trx
        .query_first("SELECT @@in_transaction")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(in_trx, 0);
    let done = tokio::time::timeout(Duration::from_secs(60), waiting)
        .await
        .expect("waiting write completes")
        .unwrap();
    let done = done.expect("the waiting write succeeds on the new primary");
    eprintln!(
        "waiting write acknowledged {} ms after SIGSTOP",
        (done - paused).as_millis()
    );

    let new = env.primary_index().unwrap();
    assert_ne!(new, 0);
    check_after_failover(&env, 0, new, &[2000].into_iter().collect());
    let rows = ids_on(&env, new);
    assert!(
        !rows.contains(&1000) && !rows.contains(&1001),
        "the failed transaction is not replayed: {rows:?}"
    );

    // Thawed: fenced (read-only) and rejoined as a replica of the new primary.
    env.topo.primary().resume().unwrap();
    env.wait_for("the old primary to rejoin", LONG, || {
        env.role(0) == Role::Replica
    })
    .await;
    assert!(env.read_only(0));
    assert_eq!(source_port(&env, 0), Some(env.topo.servers[new].port));
    let ev = env.events();
    assert!(ev.contains("rejoined as a replica"), "{ev}");
    // It catches up, and takes reads again.
    env.wait_for("the old primary to replicate row 2000", LONG, || {
        ids_on(&env, 0).contains(&2000)
    })
    .await;
    assert!(
        !ids_on(&env, 0).contains(&1000),
        "the rolled-back transaction stays rolled back"
    );
    let mut c = conn(&env).await;
    let mut seen = BTreeSet::new();
    for _ in 0..60 {
        seen.insert(
            c.query_first::<u32, _>("SELECT @@server_id")
                .await
                .unwrap()
                .unwrap(),
        );
    }
    assert!(
        seen.contains(&1),
        "the rejoined server serves reads: {seen:?}"
    );
    assert!(
        !seen.contains(&env.topo.servers[new].server_id),
        "reads avoid the primary: {seen:?}"
    );
}

/// Clean shutdown of the primary (connections refused): failover; a write waiting for it
/// succeeds on the new primary; restarted, the old primary rejoins. (Writes stop before the
/// shutdown: asynchronously, a row the old primary committed but never sent would make it
/// errant, and it would rightly be fenced instead: see the errant-transactions test.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_when_the_primary_refuses_connections() {
    let env = managed(true).await;
    let w = Writer::start(env.url("test"), 1);
    env.wait_for("some writes", LONG, || w.acked_ids().len() > 20)
        .await;
    let (mut acked, errors) = w.finish().await;
    assert!(errors.is_empty(), "{errors:?}");
    env.sync();
    env.topo.primary().stop().unwrap();
    let mut c = conn(&env).await;
    c.query_drop("INSERT INTO w VALUES (100000, @@server_id)")
        .await
        .expect("a write waits for the new primary");
    acked.insert(100000);
    let new = env.primary_index().unwrap();
    check_after_failover(&env, 0, new, &acked);

    env.topo.primary().restart().unwrap();
    env.wait_for("the old primary to rejoin", LONG, || {
        env.role(0) == Role::Replica
    })
    .await;
    assert_eq!(source_port(&env, 0), Some(env.topo.servers[new].port));
    env.wait_for("it to catch up", LONG, || {
        ids_on(&env, 0) == ids_on(&env, new)
    })
    .await;
}

/// A COMMIT in flight when the primary hangs is in doubt: the client is told the outcome is
/// unknown (1053, SQLSTATE 08S01); its session goes on outside any transaction. A session
/// whose temporary table was on the lost connection is closed after the error, as a server
/// crash would close it. When the frozen primary thaws after the failover its sessions are
/// ended before its history is compared: the COMMIT waiting there either ran first — a
/// transaction the new primary never got: the old primary is set read-only and kept out of
/// service, reported, never merged — or never runs, and the old primary rejoins without it.
/// Which of the two depends on which the thawed server gets to first; that the transaction
/// never reaches a server in service does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_doubt_commit_and_old_primary_with_errant_transactions_is_fenced() {
    let env = managed(true).await;
    let mut c = conn(&env).await;
    c.query_drop("INSERT INTO w VALUES (1, @@server_id)")
        .await
        .unwrap();
    let mut committing = conn(&env).await;
    committing.query_drop("BEGIN").await.unwrap();
    committing
        .query_drop("INSERT INTO w VALUES (99, @@server_id)")
        .await
        .unwrap();
    let mut temp = conn(&env).await;
    temp.query_drop("CREATE TEMPORARY TABLE tt (a INT)")
        .await
        .unwrap();
    env.sync();

    env.topo.primary().pause().unwrap();
    let commit = tokio::spawn(async move {
        let r = committing.query_drop("COMMIT").await;
        let after = committing
            .query_first::<u32, _>("SELECT @@in_transaction")
            .await;
        (r, after)
    });
    let temp = tokio::spawn(async move {
        let r = temp.query_drop("INSERT INTO tt VALUES (1)").await;
        let after = temp.query_drop("SELECT 1").await;
        (r, after)
    });
    let (commit_result, after_commit) = tokio::time::timeout(Duration::from_secs(30), commit)
        .await
        .expect("the in-doubt COMMIT must not hang forever")
        .unwrap();
    let cerr = commit_result
        .expect_err("the in-doubt COMMIT fails")
        .to_string();
    assert!(
        cerr.contains("1053")
            && cerr.contains("lost connection")
            && cerr.contains("may have been committed or rolled back"),
        "{cerr}"
    );
    assert_eq!(
        after_commit.expect("the session goes on"),
        Some(0),
        "outside any transaction"
    );
    let (temp_result, after_temp) = tokio::time::timeout(Duration::from_secs(30), temp)
        .await
        .expect("the statement on the lost temporary table must not hang")
        .unwrap();
    let terr = temp_result.expect_err("it fails").to_string();
    assert!(
        terr.contains("1053") && terr.contains("its outcome is unknown"),
        "{terr}"
    );
    assert!(
        after_temp.is_err(),
        "a session whose temporary table is lost is closed"
    );
    env.wait_for("a failover", LONG, || {
        env.primary_index().is_some_and(|p| p != 0)
    })
    .await;
    let new = env.primary_index().unwrap();
    assert!(!ids_on(&env, new).contains(&99), "nothing is replayed");

    // Thawed, the old primary runs the COMMIT that was waiting in its socket.
    env.topo.primary().resume().unwrap();

    env.wait_for("the old primary to be fenced or to rejoin", LONG, || {
        matches!(env.role(0), Role::Fenced | Role::Replica)
    })
    .await;
    assert!(env.read_only(0), "read-only");
    if env.role(0) == Role::Replica {
        // Its sessions were ended before the COMMIT ran: it never runs, anywhere.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            !ids_on(&env, 0).contains(&99),
            "the COMMIT ran after the comparison"
        );
        assert!(!ids_on(&env, new).contains(&99));
        assert_eq!(env.role(0), Role::Replica);
        return;
    }
    assert!(
        ids_on(&env, 0).contains(&99),
        "the old primary committed the in-doubt transaction"
    );
    assert_eq!(source_port(&env, 0), None, "not merged into replication");
    let state = env.server(0).state_text();
    assert!(
        state.starts_with("OFFLINE (errant transactions: 0-1-"),
        "{state}"
    );
    let ev = env.events();
    assert!(ev.contains("has transactions the primary"), "{ev}");
    // It takes no traffic; writes go on at the new primary; the errant row stays out.
    c.query_drop("INSERT INTO w VALUES (2, @@server_id)")
        .await
        .unwrap();
    for _ in 0..30 {
        let sid = c
            .query_first::<u32, _>("SELECT @@server_id")
            .await
            .unwrap()
            .unwrap();
        assert_ne!(sid, 1, "the fenced server serves nothing");
    }
    assert!(!ids_on(&env, new).contains(&99));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(env.role(0), Role::Fenced, "stays fenced");
}
