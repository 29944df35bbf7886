//! No acknowledged write lost: with semi-synchronous replication (`AFTER_SYNC`), a client
//! writes numbered rows through sluice while the primary is killed with SIGKILL at random
//! moments, round after round. After every failover each acknowledged row is on the new
//! primary; at the end, the rows' writers (`@@server_id`) follow the succession of primaries
//! in blocks, so no two servers ever accepted writes at the same time.
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::load::{ids_on, Writer};
use common::{wait_for, Managed};
use mysql_async::prelude::*;
use mysql_async::{Conn, Opts};
use rand::RngExt;
use sluice_core::Role;
use std::time::{Duration, Instant};

const ROUNDS: usize = 4;
const LONG: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_acknowledged_write_is_lost_across_repeated_sigkill_failovers() {
    let env = common::start_managed(Managed {
        replicas: 2,
        semi_sync: true,
        failover: true,
        ..Default::default()
    })
    .await;
    let semi = env
        .topo
        .primary()
        .sql("SELECT @@rpl_semi_sync_master_enabled, @@rpl_semi_sync_master_wait_point")
        .unwrap();
    assert_eq!(semi, "1\tAFTER_SYNC");
    let mut c = Conn::new(Opts::from_url(&env.url("test")).unwrap())
        .await
        .unwrap();
    c.query_drop("CREATE TABLE w (id INT PRIMARY KEY, sid INT)")
        .await
        .unwrap();
    drop(c);

    let mut primaries = vec![env.topo.servers[env.primary_index().unwrap()].server_id];
    let w = Writer::start(env.url("test"), 1);
    for round in 1..=ROUNDS {
        let pause = rand::rng().random_range(300..1500);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let old = env.primary_index().expect("a primary");
        // In even rounds the replicas apply 3 s late: at the failover, the acknowledged
        // tail is only in their relay logs, which the candidate must apply before promotion.
        let slow = round % 2 == 0;
        if slow {
            for (i, r) in env
                .topo
                .servers
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != old)
            {
                r.sql("STOP SLAVE; CHANGE MASTER TO MASTER_DELAY=3; START SLAVE")
                    .unwrap();
                wait_for("the delayed replica to be placed again", LONG, || {
                    env.server(i).monitor_block().is_none()
                })
                .await;
            }
            tokio::time::sleep(Duration::from_millis(3500)).await;
        }
        let before = w.acked_ids().len();
        env.topo.servers[old].kill().unwrap();
        let killed = Instant::now();
        wait_for("writes to resume", LONG, || {
            w.first_ack_after(killed).is_some()
        })
        .await;
        let resumed = w.first_ack_after(killed).unwrap() - killed;
        let new = env.primary_index().expect("a new primary");
        assert_ne!(
            new,
            old,
            "round {round}: the primary changed\n{}",
            env.events()
        );
        primaries.push(env.topo.servers[new].server_id);

        // Every row acknowledged so far is on the new primary.
        let acked = w.acked_ids();
        let present = ids_on(&env, new);
        let lost: Vec<_> = acked.difference(&present).collect();
        assert!(
            lost.is_empty(),
            "round {round}: acknowledged rows missing on the new primary: {lost:?}\n{}",
            env.events()
        );
        eprintln!(
            "round {round}{}: killed server {} after {pause} ms ({before} rows acknowledged); writes resumed on server {} after {} ms; {} acknowledged rows all present",
            if slow { " (replicas applying 3 s late)" } else { "" },
            env.topo.servers[old].server_id,
            env.topo.servers[new].server_id,
            resumed.as_millis(),
            acked.len()
        );

        if slow {
            for r in env
                .topo
                .servers
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != old && *i != new)
                .map(|(_, r)| r)
            {
                r.sql("STOP SLAVE; CHANGE MASTER TO MASTER_DELAY=0; START SLAVE")
                    .unwrap();
            }
        }

        // The killed server restarts (dropping any transaction no replica acknowledged) and
        // rejoins as a replica.
        let restarting = &env.topo.servers[old];
        tokio::task::block_in_place(|| restarting.restart_with(&["--init-rpl-role=SLAVE"]))
            .unwrap();
        wait_for("the killed server to rejoin", LONG, || {
            env.role(old) == Role::Replica
        })
        .await;
    }
    let (acked, errors) = w.finish().await;
    eprintln!(
        "{} rows acknowledged, {} statements failed (outcome unknown)",
        acked.len(),
        errors.len()
    );

    let last = env.primary_index().unwrap();
    // The last primary (promoted by sluice) committed semi-synchronously, never falling back.
    let status = |name: &str| {
        env.topo.servers[last]
            .sql(&format!("SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = '{name}'"))
            .unwrap()
    };
    assert_eq!(status("RPL_SEMI_SYNC_MASTER_STATUS"), "ON");
    assert_eq!(
        status("RPL_SEMI_SYNC_MASTER_NO_TX"),
        "0",
        "no commit went without an acknowledgement"
    );
    assert!(
        status("RPL_SEMI_SYNC_MASTER_YES_TX")
            .parse::<u64>()
            .unwrap()
            > 0
    );
    env.topo
        .sync_replicas_of(last, Duration::from_secs(60))
        .unwrap();
    let on_primary = ids_on(&env, last);
    let lost: Vec<_> = acked.difference(&on_primary).collect();
    assert!(lost.is_empty(), "acknowledged rows lost: {lost:?}");
    for i in 0..env.topo.servers.len() {
        assert_eq!(
            ids_on(&env, i),
            on_primary,
            "server {i} has exactly the primary's rows"
        );
    }
    // Writers in row order: blocks following the succession of primaries.
    let sids: Vec<u32> = env.topo.servers[last]
        .sql("SELECT sid FROM test.w ORDER BY id")
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    let mut blocks: Vec<u32> = Vec::new();
    for s in sids {
        if blocks.last() != Some(&s) {
            blocks.push(s);
        }
    }
    let mut expected = primaries.iter();
    for b in &blocks {
        assert!(
            expected.any(|p| p == b),
            "rows written by server {b} out of turn: writer blocks {blocks:?}, primaries in turn {primaries:?}"
        );
    }
    assert_eq!(
        env.monitor()
            .stats
            .failovers
            .load(std::sync::atomic::Ordering::Relaxed),
        ROUNDS as u64
    );
}
