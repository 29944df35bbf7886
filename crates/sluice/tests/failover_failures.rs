//! A failover or switchover step that fails leaves the cluster as sluice found it, against
//! real MariaDB servers: the monitor's user loses a privilege before the promotion, the
//! candidate dies while it applies its relay log, another replica cannot be repointed, a
//! switchover's promotion is refused — and failover is refused up front when the monitor's
//! user cannot complete it. Replicas keep serving reads throughout, nobody is fenced for what
//! sluice did, and the cluster heals once the cause is fixed.
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::load::ids_on;
use common::{Env, Managed};
use mysql_async::prelude::*;
use mysql_async::{Conn, Opts};
use sluice_core::Role;
use sluice_monitor::FailoverStep;
use std::collections::BTreeSet;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(90);

async fn conn(env: &Env) -> Conn {
    Conn::new(Opts::from_url(&env.url("test")).unwrap())
        .await
        .expect("connect through sluice")
}

/// Two replicas, failover on, table `w` with rows 1..=20 everywhere.
async fn cluster() -> Env {
    let env = common::start_managed(Managed {
        replicas: 2,
        failover: true,
        ..Default::default()
    })
    .await;
    assert_eq!(env.primary_index(), Some(0), "{}", env.events());
    let mut c = conn(&env).await;
    c.query_drop("CREATE TABLE w (id INT PRIMARY KEY)")
        .await
        .unwrap();
    c.query_drop("INSERT INTO w SELECT seq FROM seq_1_to_20")
        .await
        .unwrap();
    env.sync();
    env
}

/// Runs SQL as root on server `i` without writing it to its binary log (a local change that
/// replicas must not see and that leaves no errant transaction).
fn local_sql(env: &Env, i: usize, sql: &str) {
    env.topo.servers[i]
        .sql(&format!("SET sql_log_bin=0; {sql}; FLUSH PRIVILEGES"))
        .unwrap_or_else(|e| panic!("{sql} on server {i}: {e}"));
}

fn revoke(env: &Env, i: usize, privilege: &str) {
    local_sql(
        env,
        i,
        &format!("REVOKE {privilege} ON *.* FROM 'monitor'@'%'"),
    );
}

fn grant(env: &Env, i: usize, privilege: &str) {
    local_sql(
        env,
        i,
        &format!("GRANT {privilege} ON *.* TO 'monitor'@'%'"),
    );
}

/// `(Master_Port, Slave_IO_Running, Slave_SQL_Running)` of server `i`.
fn replication(env: &Env, i: usize) -> (Option<u16>, String, String) {
    let rows = env.topo.servers[i]
        .query_named("SHOW SLAVE STATUS")
        .unwrap();
    let r = rows.first().cloned().unwrap_or_default();
    let get = |k: &str| r.get(k).cloned().unwrap_or_default();
    (
        get("Master_Port").parse().ok(),
        get("Slave_IO_Running"),
        get("Slave_SQL_Running"),
    )
}

/// Replica `i` replicates from server `source` as before: configured, both threads running
/// (the receiver reconnecting to a dead source counts), read-only, a replica for sluice.
fn replicates_as_before(env: &Env, i: usize, source: usize) {
    let (port, io, sql) = replication(env, i);
    assert_eq!(
        port,
        Some(env.topo.servers[source].port),
        "replica {i} still replicates from server {source}\n{}",
        env.events()
    );
    assert!(
        io == "Yes" || io == "Connecting",
        "replica {i}: receiver {io}\n{}",
        env.events()
    );
    assert_eq!(sql, "Yes", "replica {i}: applier running\n{}", env.events());
    assert!(env.read_only(i), "replica {i} is read-only");
    assert_eq!(env.role(i), Role::Replica, "{}", env.events());
}

/// Reads through sluice are served, and only by the given servers (by server_id).
async fn reads_served_by(env: &Env, ids: &[u32]) {
    let mut c = conn(env).await;
    let seen = common::server_ids(&mut c, 20).await;
    let allowed: BTreeSet<u32> = ids.iter().copied().collect();
    assert!(
        !seen.is_empty() && seen.is_subset(&allowed),
        "reads answered by {seen:?}, expected only {allowed:?}\n{}",
        env.events()
    );
}

async fn wait_event(env: &Env, what: &str) {
    env.wait_for(&format!("event {what:?}"), LONG, || {
        env.events().contains(what)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_promotion_is_undone_and_completes_once_granted() {
    let env = cluster().await;
    // The monitor's user loses READ_ONLY ADMIN on the replicas after sluice started (its
    // start-up check passed): the promotion itself fails.
    revoke(&env, 1, "READ_ONLY ADMIN");
    revoke(&env, 2, "READ_ONLY ADMIN");
    env.topo.primary().kill().unwrap();
    wait_event(&env, "failed at step promote").await;
    let ev = env.events();
    assert!(ev.contains("READ_ONLY ADMIN"), "the reason is named:\n{ev}");
    assert!(ev.contains("replication restarted on"), "{ev}");
    let m = env.monitor();
    assert!(m.stats.failover_failures(FailoverStep::Promote) >= 1);

    // As sluice found it: both replicas replicate from the dead primary again, read-only,
    // serving reads; nobody fenced; the dead server is not the primary (the writer is
    // empty).
    replicates_as_before(&env, 1, 0);
    replicates_as_before(&env, 2, 0);
    assert_ne!(env.role(0), Role::Primary, "{}", env.events());
    assert!(env.server(0).monitor_block().is_some() || !env.server(0).is_usable());
    reads_served_by(&env, &[2, 3]).await;
    // The preflight check ran again after the failure: failover is now refused, and said.
    env.wait_for("failover refused after the failure", LONG, || {
        m.status().failover_refused.is_some()
    })
    .await;
    let refusal = m.status().failover_refused.unwrap_or_default();
    assert!(refusal.contains("READ_ONLY ADMIN"), "{refusal}");

    // Fixed: the next attempt completes.
    grant(&env, 1, "READ_ONLY ADMIN");
    grant(&env, 2, "READ_ONLY ADMIN");
    env.wait_for("failover after the grant", LONG, || {
        env.primary_index()
            .is_some_and(|p| p != 0 && env.role(p) == Role::Primary)
    })
    .await;
    let new = env.primary_index().unwrap();
    let other = 3 - new;
    assert!(!env.read_only(new));
    env.wait_for("the other replica follows the new primary", LONG, || {
        replication(&env, other).0 == Some(env.topo.servers[new].port)
    })
    .await;
    let mut c = conn(&env).await;
    c.query_drop("INSERT INTO w VALUES (21)").await.unwrap();
    assert_eq!(ids_on(&env, new), (1..=21).collect());
    assert!(m.status().failover_refused.is_none());
    assert!(m.status().last_failover_error.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_is_refused_when_the_monitor_user_cannot_complete_it() {
    // The monitor's user lacks READ_ONLY ADMIN everywhere before sluice starts.
    let topo = common::topology(sluice_testkit::TopologyOptions {
        replicas: 2,
        ..Default::default()
    })
    .await;
    topo.primary()
        .sql("REVOKE READ_ONLY ADMIN ON *.* FROM 'monitor'@'%'; FLUSH PRIVILEGES")
        .unwrap();
    topo.sync_replicas(Duration::from_secs(30)).unwrap();
    let (proxy, running) = common::start_proxy(&common::managed_config(&topo, true, "", "")).await;
    let port = running.addrs[0].port();
    let env = Env {
        topo,
        proxy,
        running,
        port,
        extra_ports: vec![],
    };
    let m = env.monitor();
    // Said at start: in events (and the log) and in the API.
    let refusal = m
        .status()
        .failover_refused
        .expect("failover refused at start");
    assert!(refusal.contains("READ_ONLY ADMIN"), "{refusal}");
    assert!(
        env.events().contains("lacks privileges"),
        "{}",
        env.events()
    );
    let admin = env.admin(None).await;
    let addr = admin.addr;
    let api = tokio::task::spawn_blocking(move || common::http::get_json(addr, "/api/monitor"))
        .await
        .unwrap();
    assert!(
        api["failover_refused"]
            .as_str()
            .is_some_and(|s| s.contains("READ_ONLY ADMIN")),
        "{api}"
    );

    env.topo.primary().kill().unwrap();
    wait_event(
        &env,
        &format!("failover of {} refused", env.topo.servers[0].addr()),
    )
    .await;
    assert!(m.stats.failover_failures(FailoverStep::Refused) >= 1);
    // Nothing was touched: the replicas never stopped replicating, and serve reads.
    replicates_as_before(&env, 1, 0);
    replicates_as_before(&env, 2, 0);
    assert!(!env.events().contains("promoting"), "{}", env.events());
    assert!(
        env.server(0)
            .monitor_block()
            .is_some_and(|b| b.starts_with("unreachable")),
        "{:?}",
        env.server(0).state()
    );
    reads_served_by(&env, &[2, 3]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn candidate_dying_while_it_catches_up_hands_over_to_the_other_replica() {
    let env = cluster().await;
    // Both replicas receive new rows but cannot apply them (a client holds a write lock on
    // the table), so the candidate's catch-up takes as long as the test wants.
    let mut locks = Vec::new();
    for i in 1..=2 {
        let mut c = Conn::new(Opts::from_url(&env.direct_url(i, "test")).unwrap())
            .await
            .unwrap();
        c.query_drop("LOCK TABLES w WRITE").await.unwrap();
        locks.push(Some(c));
    }
    let mut c = conn(&env).await;
    c.query_drop("INSERT INTO w SELECT seq FROM seq_21_to_40")
        .await
        .unwrap();
    let pos = env.topo.primary().sql("SELECT @@gtid_binlog_pos").unwrap();
    env.wait_for("both replicas received the new rows", LONG, || {
        (1..=2).all(|i| {
            let got = env.topo.servers[i]
                .query_named("SHOW SLAVE STATUS")
                .unwrap()
                .first()
                .and_then(|r| r.get("Gtid_IO_Pos").cloned())
                .unwrap_or_default();
            got.trim() == pos.trim()
        })
    })
    .await;

    env.topo.primary().kill().unwrap();
    wait_event(&env, "promoting").await;
    let ev = env.events();
    let cand = (1..=2)
        .find(|i| ev.contains(&format!("promoting {}", env.topo.servers[*i].addr())))
        .expect("a candidate named");
    let other = 3 - cand;
    // The candidate dies while it applies its relay log; the other one's lock goes.
    env.topo.servers[cand].kill().unwrap();
    locks[cand - 1] = None;
    drop(locks[other - 1].take());
    wait_event(&env, "failed at step catch_up").await;
    env.wait_for("the other replica promoted", LONG, || {
        env.primary_index() == Some(other) && env.role(other) == Role::Primary
    })
    .await;
    assert!(env.monitor().stats.failover_failures(FailoverStep::CatchUp) >= 1);
    assert!(!env.read_only(other));
    // Everything the primary had reached the new primary.
    assert_eq!(ids_on(&env, other), (1..=40).collect());
    let mut c = conn(&env).await;
    c.query_drop("INSERT INTO w VALUES (41)").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_that_cannot_be_repointed_takes_no_reads_until_it_follows() {
    let env = cluster().await;
    // Server 2 falls behind (its receiver stopped), so server 1 is the candidate; the
    // monitor's user cannot stop or repoint server 2's replication.
    env.topo.servers[2].sql("STOP SLAVE IO_THREAD").unwrap();
    let mut c = conn(&env).await;
    c.query_drop("INSERT INTO w SELECT seq FROM seq_21_to_30")
        .await
        .unwrap();
    env.wait_for("server 1 applied the new rows", LONG, || {
        ids_on(&env, 1).len() == 30
    })
    .await;
    revoke(&env, 2, "REPLICATION SLAVE ADMIN");

    env.topo.primary().kill().unwrap();
    env.wait_for("server 1 promoted", LONG, || {
        env.primary_index() == Some(1) && env.role(1) == Role::Primary
    })
    .await;
    wait_event(&env, "cannot follow the primary yet").await;
    let s2 = env.server(2);
    assert!(
        !s2.is_usable(),
        "server 2 follows the dead primary: no reads"
    );
    assert!(
        s2.monitor_block()
            .unwrap_or_default()
            .contains("not from the primary"),
        "{:?}",
        s2.state()
    );
    let repairs = env.monitor().status().repairs;
    assert!(
        repairs.iter().any(|r| r.action == "follow the primary"),
        "{repairs:?}"
    );
    reads_served_by(&env, &[2]).await; // the new primary (reads fall back to the writer)

    grant(&env, 2, "REPLICATION SLAVE ADMIN");
    env.wait_for(
        "server 2 follows the new primary and takes reads",
        LONG,
        || replication(&env, 2).0 == Some(env.topo.servers[1].port) && env.server(2).is_usable(),
    )
    .await;
    env.wait_for("server 2 caught up", LONG, || ids_on(&env, 2).len() == 30)
        .await;
    assert!(env.monitor().status().repairs.is_empty());
    assert_eq!(env.role(2), Role::Replica);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switchover_whose_promotion_fails_is_undone() {
    let env = cluster().await;
    revoke(&env, 1, "READ_ONLY ADMIN");
    let target = env.topo.servers[1].addr();
    let err = env
        .monitor()
        .switchover(Some(&target))
        .await
        .expect_err("the promotion is refused");
    assert!(err.contains("READ_ONLY ADMIN"), "{err}");
    assert_eq!(
        env.monitor()
            .stats
            .switchover_failures
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    // As before: the old primary writable and taking writes, the target replicating again.
    assert_eq!(env.primary_index(), Some(0));
    assert!(!env.read_only(0), "the old primary is writable again");
    replicates_as_before(&env, 1, 0);
    replicates_as_before(&env, 2, 0);
    let mut c = conn(&env).await;
    c.query_drop("INSERT INTO w VALUES (21)").await.unwrap();
    env.sync();
    assert_eq!(ids_on(&env, 1), (1..=21).collect());
}
