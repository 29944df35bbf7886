//! Lag-aware reads and broken replication: a replica above its lag limit, or whose
//! replication stopped, takes no reads until it recovers; with no replica left, reads go to
//! the primary, or fail with a clear error when the configuration says so.
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::Managed;
use mysql_async::prelude::*;
use mysql_async::{Conn, Opts};
use std::time::Duration;

const LONG: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lagging_or_broken_replicas_take_no_reads() {
    let lag_limit = "[[hostgroups]]\nname = \"reader\"\nmax_replication_lag = \"2s\"\n";
    let env = common::start_managed(Managed {
        replicas: 2,
        extra: lag_limit.into(),
        ..Default::default()
    })
    .await;
    // A second proxy over the same servers that refuses to send reads to the primary.
    let strict_cfg = common::managed_config(
        &env.topo,
        false,
        "reads_fallback_to_writer = false",
        lag_limit,
    );
    let (_strict, strict_running) = common::start_proxy(&strict_cfg).await;
    let strict_url = format!(
        "mysql://app:app@127.0.0.1:{}/test?prefer_socket=false",
        strict_running.addrs[0].port()
    );

    // (Connected while replicas are healthy: the driver's own start-up queries are reads.)
    let mut strict = Conn::new(Opts::from_url(&strict_url).unwrap())
        .await
        .unwrap();
    let mut c = Conn::new(Opts::from_url(&env.url("test")).unwrap())
        .await
        .unwrap();
    c.query_drop("CREATE TABLE w (id INT PRIMARY KEY, sid INT)")
        .await
        .unwrap();
    env.sync();
    // The monitor's view may be a round older than the sync (a replica that lagged past the
    // bound while applying the CREATE on a loaded machine is still out): both back first.
    env.wait_for("both replicas to take reads", LONG, || {
        env.topo.servers[1..].iter().all(|t| {
            env.proxy
                .topology
                .servers()
                .iter()
                .any(|s| *s.name == *t.addr() && s.is_usable() && s.monitor_block().is_none())
        })
    })
    .await;
    assert_eq!(common::server_ids(&mut c, 40).await, [2, 3].into());

    // Replica 1 (server_id 2) falls behind: its applier holds events for an hour.
    let lagging = &env.topo.servers[1];
    lagging
        .sql("STOP SLAVE; CHANGE MASTER TO MASTER_DELAY=3600; START SLAVE")
        .unwrap();
    c.query_drop("INSERT INTO w VALUES (1, @@server_id)")
        .await
        .unwrap();
    env.wait_for("replica 1 to be shunned for lag", LONG, || {
        env.server(1).state_text().contains("lag")
    })
    .await;
    let state = env.server(1).state_text();
    assert!(state.starts_with("SHUNNED (replication lag"), "{state}");
    assert!(env.server(1).observed().lag.unwrap() > Duration::from_secs(2));
    assert_eq!(
        common::server_ids(&mut c, 30).await,
        [3].into(),
        "reads avoid the lagging replica"
    );

    // Replica 2 (server_id 3) breaks: a row of its own conflicts with the next write.
    let broken = &env.topo.servers[2];
    broken
        .sql("SET sql_log_bin=0; INSERT INTO test.w VALUES (2, 0)")
        .unwrap();
    c.query_drop("INSERT INTO w VALUES (2, @@server_id)")
        .await
        .unwrap();
    env.wait_for("replica 2 to be shunned as broken", LONG, || {
        env.server(2).state_text().contains("replication broken")
    })
    .await;
    let state = env.server(2).state_text();
    assert!(
        state.contains("applying: no") && state.contains("Duplicate entry"),
        "{state}"
    );

    // No replica left: reads go to the primary...
    assert_eq!(
        common::server_ids(&mut c, 10).await,
        [1].into(),
        "reads fall back to the primary"
    );
    // ...or, configured so, fail with a clear error.

    env.wait_for("the strict proxy to see both replicas out", LONG, || {
        _strict.topology.all()[1].monitor_block().is_some()
            && _strict.topology.all()[2].monitor_block().is_some()
    })
    .await;
    let err = strict
        .query_first::<u32, _>("SELECT @@server_id")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("reader") && err.contains("no usable server"),
        "clear error: {err}"
    );
    // Writes are unaffected.
    strict
        .query_drop("INSERT INTO w VALUES (3, @@server_id)")
        .await
        .unwrap();

    // Repairs: both come back into the read pool once caught up.
    broken
        .sql("STOP SLAVE; SET sql_log_bin=0; DELETE FROM test.w WHERE id = 2; START SLAVE")
        .unwrap();
    lagging
        .sql("STOP SLAVE; CHANGE MASTER TO MASTER_DELAY=0; START SLAVE")
        .unwrap();
    env.wait_for("both replicas back online", LONG, || {
        env.server(1).state_text() == "ONLINE" && env.server(2).state_text() == "ONLINE"
    })
    .await;
    env.sync();
    assert_eq!(
        common::server_ids(&mut c, 40).await,
        [2, 3].into(),
        "reads spread over both replicas again"
    );
    assert_eq!(
        broken.sql("SELECT sid FROM test.w WHERE id = 2").unwrap(),
        "1",
        "the replica applied the primary's row"
    );
    drop(strict_running);
}
