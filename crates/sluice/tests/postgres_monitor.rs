//! The PostgreSQL monitor against a real primary with two streaming standbys: servers listed
//! without hostgroups are placed by what they report (`pg_is_in_recovery()`, the WAL
//! receiver's upstream), a standby whose replay falls behind `max_replication_lag` or whose
//! WAL receiver stopped takes no reads until it catches up, and with every standby out the
//! primary serves the reads.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod pg;

use pg::http::get_json;
use pg::wait_view;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_monitor_places_postgres_servers_and_keeps_lagging_standbys_from_reads() {
    // The configuration as written ([failover] enabled included), with a lag bound
    // per standby: the first one in WAL bytes, the second one in time.
    let env = pg::start_with(2, |topo| {
        pg::managed_config(
            topo,
            &[
                "",
                "max_replication_lag_bytes = 1048576",
                "max_replication_lag = \"1s\"",
            ],
            // (A generous check time limit: a primary check that times out leaves its
            // position unknown, and with it the bytes a standby is behind.)
            "interval = \"100ms\"\ntimeout = \"5s\"\n\n[failover]\nenabled = true\n",
        )
    })
    .await;
    let admin = env.admin().await;
    let primary = env.topo.primary().addr();
    let standbys: Vec<String> = env.topo.replicas().iter().map(|r| r.addr()).collect();

    // Roles come from the servers: the primary writes, the standbys read and say whom they
    // stream from.
    wait_view(admin.addr, &primary, "the primary in writer", |v| {
        (&*v.0, &*v.1, &*v.2) == ("writer", "primary", "ONLINE")
    })
    .await;
    for s in &standbys {
        wait_view(admin.addr, s, "a streaming replica in reader", |v| {
            v.0 == "reader" && v.1 == "replica" && v.2 == "ONLINE" && v.3 == primary
        })
        .await;
    }
    // Every server reports the timeline it is on: the first, as nothing was ever promoted.
    let servers = get_json(admin.addr, "/api/servers");
    for s in servers.as_array().unwrap() {
        assert_eq!(s["timeline"], 1, "{s}");
    }
    let port_of = |a: &str| a.rsplit_once(':').unwrap().1.to_string();
    assert_eq!(env.psql("SELECT pg_is_in_recovery()").trim(), "t");
    env.psql("CREATE TABLE lagged (x int, pad text)");
    assert_eq!(
        env.topo
            .primary()
            .sql("SELECT count(*) FROM lagged")
            .unwrap()
            .trim(),
        "0"
    );

    // The first standby applies commits 10 minutes late: its replay stops at the next commit
    // record (PostgreSQL delays only those) and receives everything after it. Once the
    // primary has written more than 1 MiB of WAL past that point, it takes no reads, and
    // stays out while its replay waits.
    pg::delay_replay(&env.topo, &env.topo.replicas()[0]).await;
    env.psql("INSERT INTO lagged SELECT g, repeat('x', 100) FROM generate_series(1, 30000) g");
    wait_view(
        admin.addr,
        &standbys[0],
        "out of reads for its WAL bytes",
        |v| v.2.starts_with("SHUNNED (replication lag") && v.2.contains("bytes"),
    )
    .await;
    // (The other standby may be out for a moment too while it replays the insert: the
    // guarantee checked is that the lagging one takes no read.)
    for _ in 0..10 {
        let port = env.psql("SELECT inet_server_port()");
        assert_ne!(
            port.trim(),
            port_of(&standbys[0]),
            "a read on a lagging standby"
        );
    }

    // The second one too, and its bound is in time: once a transaction waits longer than 1 s
    // to be replayed there, it is out as well, and the primary serves the reads.
    let second = &env.topo.replicas()[1];
    pg::delay_replay(&env.topo, second).await;
    env.psql("INSERT INTO lagged VALUES (0, 'late')");
    wait_view(
        admin.addr,
        &standbys[1],
        "out of reads for its lag in time",
        |v| v.2.starts_with("SHUNNED (replication lag") && v.2.contains(" s > "),
    )
    .await;
    for _ in 0..5 {
        assert_eq!(env.psql("SELECT pg_is_in_recovery()").trim(), "f");
    }

    // Both catch up: they take reads again.
    for r in env.topo.replicas() {
        r.sql("ALTER SYSTEM RESET recovery_min_apply_delay")
            .unwrap();
        r.sql("SELECT pg_reload_conf()").unwrap();
    }
    for s in &standbys {
        wait_view(admin.addr, s, "back in reader once caught up", |v| {
            v.0 == "reader" && v.2 == "ONLINE"
        })
        .await;
    }
    pg::wait_replayed(&env.topo).await;
    assert_eq!(
        env.psql("SELECT pg_is_in_recovery(), count(*) FROM lagged")
            .trim(),
        "t|30001"
    );

    // A standby whose WAL receiver stops (no upstream) takes no reads until it streams again.
    let conninfo = second
        .sql("SHOW primary_conninfo")
        .unwrap()
        .trim()
        .to_string();
    assert!(!conninfo.is_empty());
    second
        .sql("ALTER SYSTEM SET primary_conninfo = ''")
        .unwrap();
    second.sql("SELECT pg_reload_conf()").unwrap();
    wait_view(
        admin.addr,
        &standbys[1],
        "out of reads without a WAL receiver",
        |v| v.2.starts_with("SHUNNED (replication"),
    )
    .await;
    for _ in 0..5 {
        let port = env.psql("SELECT inet_server_port()");
        assert_ne!(
            port.trim(),
            port_of(&standbys[1]),
            "a read on a stopped standby"
        );
    }
    second
        .sql(&format!(
            "ALTER SYSTEM SET primary_conninfo = '{}'",
            conninfo.replace('\'', "''")
        ))
        .unwrap();
    second.sql("SELECT pg_reload_conf()").unwrap();
    wait_view(
        admin.addr,
        &standbys[1],
        "back once it streams again",
        |v| v.0 == "reader" && v.2 == "ONLINE",
    )
    .await;
}

/// psql through sluice as `user` running each of `sqls` in one session; stdout lines.
fn session(env: &pg::PgEnv, user: &str, sqls: &[&str]) -> Vec<String> {
    let mut args = Vec::new();
    for s in sqls {
        args.extend(["-c", s]);
    }
    let out = pg::psql(env.port, user, user, "postgres", &args);
    assert!(
        out.status.success(),
        "{sqls:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_that_asks_reads_its_own_writes_from_standbys_that_replayed_them() {
    let env = pg::start_prepared(
        2,
        |topo| {
            topo.primary()
                .sql("CREATE ROLE ryw LOGIN PASSWORD 'ryw'; CREATE TABLE seen (x int); GRANT ALL ON seen TO app, ryw")
                .unwrap();
        },
        |topo| {
            pg::managed_config(
                topo,
                &[],
                "interval = \"100ms\"\n\n[[users]]\nname = \"ryw\"\npassword = \"ryw\"\nread_your_writes = true\n",
            )
        },
    )
    .await;
    let admin = env.admin().await;
    let primary_port = env.topo.primary().port.to_string();
    for r in env.topo.replicas() {
        wait_view(admin.addr, &r.addr(), "a streaming replica", |v| {
            v.1 == "replica" && v.2 == "ONLINE"
        })
        .await;
    }
    // The standbys stop replaying at the next commit (they keep receiving, and keep taking
    // reads: no lag bound is configured).
    for r in env.topo.replicas() {
        pg::delay_replay(&env.topo, r).await;
    }

    // Without read-your-writes a session's read does not see its write: it is on a standby.
    let plain = session(
        &env,
        "app",
        &[
            "INSERT INTO seen VALUES (1)",
            "SELECT count(*), inet_server_port() <> inet_server_port() FROM seen",
            "SELECT inet_server_port()",
        ],
    );
    assert_eq!(plain[0], "0|f", "{plain:?}");
    assert_ne!(plain[1], primary_port);

    // Asked for with SET: the read goes where the write is (the primary, as no standby
    // replayed it).
    let asked = session(
        &env,
        "app",
        &[
            "SET sluice.read_your_writes = on",
            "INSERT INTO seen VALUES (2)",
            "SELECT count(*) FROM seen",
            "SELECT inet_server_port()",
        ],
    );
    assert_eq!(asked, vec!["2".to_string(), primary_port.clone()]);
    // The user's default: the same; a read before any write still goes to a standby.
    let by_user = session(
        &env,
        "ryw",
        &[
            "SELECT inet_server_port()",
            "BEGIN",
            "INSERT INTO seen VALUES (3)",
            "COMMIT",
            "SELECT count(*) FROM seen",
        ],
    );
    assert_ne!(by_user[0], primary_port, "{by_user:?}");
    assert_eq!(by_user[1], "3", "{by_user:?}");
    // And turned off again, reads go back to the standbys.
    let off = session(
        &env,
        "ryw",
        &[
            "INSERT INTO seen VALUES (4)",
            "SET sluice.read_your_writes = off",
            "SELECT count(*) FROM seen",
        ],
    );
    assert_eq!(off, vec!["0".to_string()]);

    // Once the standbys replayed the write, they serve the session's reads again, and every
    // read sees it (bounded wait: a hang guard).
    for r in env.topo.replicas() {
        r.sql("ALTER SYSTEM RESET recovery_min_apply_delay")
            .unwrap();
        r.sql("SELECT pg_reload_conf()").unwrap();
    }
    // One session writes, then (the test waits until both standbys replayed it) reads: on
    // a standby, seeing the write.
    let mut c = pg::raw::Raw::connect(env.port, "ryw", "ryw", "postgres").await;
    c.try_simple("INSERT INTO seen VALUES (5)").await.unwrap();
    pg::wait_replayed(&env.topo).await;
    let read = c
        .try_simple("SELECT count(*) || ' ' || inet_server_port() FROM seen")
        .await
        .unwrap();
    let row = pg::raw::Raw::column(&read);
    assert_eq!(row.len(), 1);
    let (count, port) = row[0].split_once(' ').unwrap();
    assert_eq!(count, "5");
    assert_ne!(
        port, primary_port,
        "a read after the standbys replayed the write"
    );
}
