//! Read/write splitting through sluice against a real primary and two replicas.
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use mysql_async::prelude::*;
use mysql_async::{Conn, Opts};
use std::time::Duration;

async fn conn(url: &str) -> Conn {
    Conn::new(Opts::from_url(url).unwrap())
        .await
        .expect("connect through sluice")
}

async fn server_id(c: &mut Conn, sql: &str) -> u32 {
    c.query_first::<u32, _>(sql)
        .await
        .unwrap()
        .expect("one row")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_go_to_replicas_writes_to_primary_transactions_stay() {
    let env = common::start(2, "").await;
    let mut c = conn(&env.url("test")).await;
    c.query_drop("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))")
        .await
        .unwrap();

    // Autocommit reads: answered by replicas only, and by both over enough statements.
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..40 {
        seen.insert(server_id(&mut c, "SELECT @@server_id").await);
    }
    assert_eq!(
        seen,
        [2, 3].into_iter().collect(),
        "reads must be spread over the replicas"
    );

    // Writes land on the primary: check directly on it.
    c.query_drop("INSERT INTO t VALUES (1, 'one')")
        .await
        .unwrap();
    let on_primary = env
        .topo
        .primary()
        .sql("SELECT v FROM test.t WHERE id = 1")
        .unwrap();
    assert_eq!(on_primary, "one");

    // A locking read goes to the writer.
    assert_eq!(
        server_id(&mut c, "SELECT @@server_id FROM t WHERE id = 1 FOR UPDATE").await,
        1
    );

    // Everything in a transaction runs on the primary, reads included, until COMMIT.
    c.query_drop("BEGIN").await.unwrap();
    for _ in 0..5 {
        assert_eq!(server_id(&mut c, "SELECT @@server_id").await, 1);
    }
    c.query_drop("INSERT INTO t VALUES (2, 'two')")
        .await
        .unwrap();
    // Our own uncommitted row is visible inside the transaction (same connection).
    let v: Option<String> = c.query_first("SELECT v FROM t WHERE id = 2").await.unwrap();
    assert_eq!(v.as_deref(), Some("two"));
    c.query_drop("COMMIT").await.unwrap();
    assert_ne!(
        server_id(&mut c, "SELECT @@server_id").await,
        1,
        "after COMMIT reads go back to replicas"
    );

    // START TRANSACTION and ROLLBACK.
    c.query_drop("START TRANSACTION").await.unwrap();
    c.query_drop("INSERT INTO t VALUES (3, 'three')")
        .await
        .unwrap();
    assert_eq!(server_id(&mut c, "SELECT @@server_id").await, 1);
    c.query_drop("ROLLBACK").await.unwrap();
    assert_eq!(
        env.topo
            .primary()
            .sql("SELECT COUNT(*) FROM test.t WHERE id = 3")
            .unwrap(),
        "0"
    );

    // autocommit=0: an implicit transaction; everything goes to the writer.
    c.query_drop("SET autocommit = 0").await.unwrap();
    for _ in 0..3 {
        assert_eq!(server_id(&mut c, "SELECT @@server_id").await, 1);
    }
    c.query_drop("INSERT INTO t VALUES (4, 'four')")
        .await
        .unwrap();
    assert_eq!(
        env.topo
            .primary()
            .sql("SELECT COUNT(*) FROM test.t WHERE id = 4")
            .unwrap(),
        "0",
        "not committed yet"
    );
    c.query_drop("COMMIT").await.unwrap();
    assert_eq!(
        env.topo
            .primary()
            .sql("SELECT COUNT(*) FROM test.t WHERE id = 4")
            .unwrap(),
        "1"
    );
    c.query_drop("SET autocommit = 1").await.unwrap();
    assert_ne!(server_id(&mut c, "SELECT @@server_id").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_and_session_variables_follow_the_session() {
    let env = common::start(2, "").await;
    env.topo
        .primary()
        .sql("CREATE DATABASE other; CREATE TABLE other.o (id INT); INSERT INTO other.o VALUES (7)")
        .unwrap();
    env.sync();
    let mut c = conn(&env.url("test")).await;
    c.query_drop("USE other").await.unwrap();
    c.query_drop("SET SESSION sql_mode = 'ANSI_QUOTES,STRICT_ALL_TABLES', time_zone = '+03:00', sql_select_limit = 1")
        .await
        .unwrap();
    // Many statements on whichever servers serve them: the state is always the session's.
    for i in 0..20 {
        let (db, mode, tz, limit): (String, String, String, u64) = c
            .query_first("SELECT DATABASE(), @@sql_mode, @@time_zone, @@sql_select_limit")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(db, "other", "iteration {i}");
        assert_eq!(mode, "ANSI_QUOTES,STRICT_ALL_TABLES");
        assert_eq!(tz, "+03:00");
        assert_eq!(limit, 1);
        // Writes, on the primary, too.
        c.query_drop("INSERT INTO o VALUES (8)").await.unwrap();
    }
    // sql_select_limit=1 applies: one row although there are many.
    let n: Vec<u32> = c.query("SELECT id FROM o").await.unwrap();
    assert_eq!(n.len(), 1);

    // Another client is not affected by this one's settings (connections are shared).
    let mut d = conn(&env.url("test")).await;
    for _ in 0..10 {
        let (db, limit, tz): (String, u64, String) = d
            .query_first("SELECT DATABASE(), @@sql_select_limit, @@time_zone")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(db, "test");
        assert_eq!(limit, 18446744073709551615);
        assert_eq!(tz, "SYSTEM");
    }
    // Character set of the session: SET NAMES follows too.
    c.query_drop("SET NAMES latin1").await.unwrap();
    for _ in 0..5 {
        let cs: String = c
            .query_first("SELECT @@character_set_client")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(cs, "latin1");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinned_listener_only_reaches_its_hostgroup() {
    let env = common::start(
        2,
        "\n[[listeners]]\nlisten = \"127.0.0.1:0\"\nhostgroup = \"reader\"\n",
    )
    .await;
    let url = format!(
        "mysql://app:app@127.0.0.1:{}/test?prefer_socket=false",
        env.extra_ports[0]
    );
    let mut c = conn(&url).await;
    for _ in 0..20 {
        let id = server_id(&mut c, "SELECT @@server_id").await;
        assert!(id == 2 || id == 3, "reader listener reached server {id}");
    }
    // Even statements that would go to the writer stay in the pinned hostgroup.
    c.query_drop("BEGIN").await.unwrap();
    let id = server_id(&mut c, "SELECT @@server_id FOR UPDATE").await;
    assert!(id == 2 || id == 3);
    c.query_drop("COMMIT").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hints_and_rules_route_statements() {
    let extra = r#"
[[rules]]
match = "(?i)^\\s*SELECT .* FOR UPDATE"
hostgroup = "writer"
[[rules]]
match = "(?i)from\\s+heavy_report"
hostgroup = "writer"
"#;
    let env = common::start(1, extra).await;
    let mut c = conn(&env.url("test")).await;
    c.query_drop("CREATE TABLE heavy_report (id INT)")
        .await
        .unwrap();
    assert_eq!(
        server_id(&mut c, "SELECT /* sluice:writer */ @@server_id").await,
        1
    );
    assert_eq!(
        server_id(
            &mut c,
            "SELECT @@server_id FROM heavy_report UNION SELECT @@server_id"
        )
        .await,
        1
    );
    assert_eq!(server_id(&mut c, "SELECT @@server_id").await, 2);
    assert_eq!(
        server_id(&mut c, "/* sluice:reader */ SELECT @@server_id").await,
        2
    );
    let rules = env.proxy.topology.router.rules();
    assert_eq!(rules[1].hits.load(std::sync::atomic::Ordering::Relaxed), 1);
    // A hint naming an unknown hostgroup is an error, and the connection stays usable.
    let err = c
        .query_drop("SELECT /* sluice:nowhere */ 1")
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("unknown hostgroup 'nowhere'"),
        "{err}"
    );
    assert_eq!(server_id(&mut c, "SELECT @@server_id").await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_replica_does_not_break_reads() {
    let env = common::start(
        2,
        // A stopped replica refuses at once; the live one may be slow on a busy machine.
        "\n[pool]\nretry_after = \"60s\"\nconnect_timeout = \"30s\"\n",
    )
    .await;
    let mut c = conn(&env.url("test")).await;
    // Warm both replicas' pools.
    for _ in 0..20 {
        server_id(&mut c, "SELECT @@server_id").await;
    }
    env.topo.replicas()[0].stop().unwrap();
    // Reads keep working and only reach the live replica (pooled connections to the dead
    // one fail once and are retried elsewhere).
    for _ in 0..30 {
        assert_eq!(server_id(&mut c, "SELECT @@server_id").await, 3);
    }
    // Other clients connect and read too.
    let mut d = conn(&env.url("test")).await;
    assert_eq!(server_id(&mut d, "SELECT @@server_id").await, 3);
    // With no replica left, reads fall back to the writer.
    env.topo.replicas()[1].stop().unwrap();
    for _ in 0..5 {
        assert_eq!(server_id(&mut c, "SELECT @@server_id").await, 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weights_and_least_outstanding_spread_reads() {
    // Replica 2 has weight 1, replica 3 weight 3: about a quarter of reads go to server 2.
    let env = common::start_with(2, "", |t| {
        let r = "hostgroup = \"reader\"\n";
        let parts: Vec<&str> = t.split(r).collect();
        *t = format!(
            "{}{r}weight = 1\n{}{r}weight = 3\n{}",
            parts[0], parts[1], parts[2]
        );
    })
    .await;
    let mut c = conn(&env.url("test")).await;
    let mut on2 = 0;
    for _ in 0..400 {
        if server_id(&mut c, "SELECT @@server_id").await == 2 {
            on2 += 1;
        }
    }
    assert!(
        (60..=140).contains(&on2),
        "{on2} of 400 reads on the weight-1 replica"
    );

    // least_outstanding: with one replica busy (a long statement in flight), reads go to the
    // other.
    let env = common::start(
        2,
        "\n[[hostgroups]]\nname = \"reader\"\nbalance = \"least_outstanding\"\n",
    )
    .await;
    // The long statement stays in flight until the test ends it (KILL QUERY), however slow
    // the machine.
    let mut busy = conn(&env.url("test")).await;
    let busy_session = busy.id();
    let sleeper = tokio::spawn(async move {
        // Ended by KILL QUERY: SLEEP returns 1, or the statement fails with 1317.
        let r: Result<Option<i64>, _> = busy.query_first("SELECT SLEEP(300) + @@server_id").await;
        if let Err(e) = r {
            assert!(e.to_string().contains("1317"), "{e}");
        }
        busy
    });
    let reader = env.proxy.topology.hostgroup("reader").unwrap();
    common::wait_for(
        "the long statement to hold a replica",
        Duration::from_secs(60),
        || reader.pool_stats().iter().any(|p| p.in_use > p.connecting),
    )
    .await;
    let busy_server = reader
        .pool_stats()
        .into_iter()
        .find(|p| p.in_use > p.connecting)
        .map(|p| p.server.name.to_string())
        .expect("one replica is busy");
    let mut c = conn(&env.url("test")).await;
    for _ in 0..20 {
        let s = server_id(&mut c, "SELECT @@server_id").await;
        let name = &env.topo.servers[s as usize - 1].addr();
        assert_ne!(
            name, &busy_server,
            "least_outstanding sent a read to the busy replica"
        );
    }
    c.query_drop(format!("KILL QUERY {busy_session}"))
        .await
        .unwrap();
    sleeper.await.unwrap();
}
