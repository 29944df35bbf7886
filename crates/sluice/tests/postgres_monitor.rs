//! The PostgreSQL monitor against a real primary with two streaming standbys: servers listed
//! without hostgroups are placed by what they report (`pg_is_in_recovery()`, the WAL
//! receiver's upstream), a standby whose replay falls behind `max_replication_lag` or whose
//! WAL receiver stopped takes no reads until it catches up, and with every standby out the
//! primary serves the reads.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod pg;

use pg::http::get_json;
use pg::{server_view, wait_view};

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
            "interval = \"100ms\"\n\n[failover]\nenabled = true\n",
        )
    })
    .await;
    let admin = env.admin().await;
    let primary = env.topo.primary().addr();
    let standbys: Vec<String> = env.topo.replicas().iter().map(|r| r.addr()).collect();

    // Roles come from the servers: the primary writes, the standbys read and say whom they
    // stream from.
    let (hg, role, state, _) = server_view(admin.addr, &primary);
    assert_eq!((&*hg, &*role, &*state), ("writer", "primary", "ONLINE"));
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
    let first = &env.topo.replicas()[0];
    first
        .sql("ALTER SYSTEM SET recovery_min_apply_delay = '10min'")
        .unwrap();
    first.sql("SELECT pg_reload_conf()").unwrap();
    env.psql("CREATE TABLE replay_stops_here ()");
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
    second
        .sql("ALTER SYSTEM SET recovery_min_apply_delay = '10min'")
        .unwrap();
    second.sql("SELECT pg_reload_conf()").unwrap();
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
