//! The monitor's decisions as pure functions, table by table.

use crate::agent::ReplicaStatus;
use crate::failover::{failover_due, rank_candidates};
use crate::health::{bytes_verdict, replica_verdict, Following};
use sluice_core::Server;
use std::cmp::Ordering;
use std::time::Duration;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

#[test]
fn failover_starts_only_for_a_primary_down_long_enough_when_allowed() {
    let detection = secs(5);
    // (reachable, down for, schedule due) -> fail over after
    let table = [
        (true, None, true, None),
        (true, Some(secs(60)), true, None),
        (false, None, true, None),
        (false, Some(secs(4)), true, None),
        (false, Some(secs(5)), true, Some(secs(5))),
        (false, Some(secs(60)), true, Some(secs(60))),
        (false, Some(secs(60)), false, None),
    ];
    for (reachable, down_for, due, want) in table {
        assert_eq!(
            failover_due(reachable, down_for, detection, due),
            want,
            "reachable={reachable} down_for={down_for:?} due={due}"
        );
    }
}

#[test]
fn candidates_rank_by_what_they_received_then_by_lag() {
    // Positions compare as numbers here (a real agent compares GTIDs).
    let compare = |a: &str, b: &str| a.parse::<u64>().unwrap().cmp(&b.parse().unwrap());
    let mut c = vec![
        ("lagging", "100".to_string(), Some(secs(9))),
        ("behind", "90".to_string(), Some(secs(0))),
        ("unknown lag", "100".to_string(), None),
        ("best", "100".to_string(), Some(secs(1))),
        ("most", "101".to_string(), None),
    ];
    rank_candidates(&mut c, compare);
    let order: Vec<&str> = c.iter().map(|x| x.0).collect();
    assert_eq!(order, ["most", "best", "lagging", "unknown lag", "behind"]);
    let mut one = vec![("only", "1".to_string(), None)];
    rank_candidates(&mut one, |_, _| Ordering::Equal);
    assert_eq!(one[0].0, "only");
}

#[test]
fn a_replica_takes_reads_only_while_it_follows_the_primary_and_keeps_up() {
    let primary = Server::new("10.0.0.1:3306", "writer", 1, 10);
    let healthy = ReplicaStatus {
        source: "10.0.0.1:3306".into(),
        io_running: true,
        io_connected: true,
        sql_running: true,
        lag: Some(secs(1)),
        received: "0-1-10".into(),
        error: None,
        name: String::new(),
    };
    let following = |up: bool, other: bool, ours: bool| Following {
        primary: Some(&primary),
        primary_up: up,
        follows_other: other,
        stopped_by_us: ours,
    };
    let max = Some(secs(5));
    assert_eq!(
        replica_verdict(&healthy, max, &following(true, false, false)),
        None
    );
    let lagging = ReplicaStatus {
        lag: Some(secs(6)),
        ..healthy.clone()
    };
    let v = replica_verdict(&lagging, max, &following(true, false, false));
    assert!(v.is_some_and(|v| v.contains("lag 6 s")));
    assert_eq!(
        replica_verdict(&lagging, None, &following(true, false, false)),
        None
    );
    let v = replica_verdict(&healthy, max, &following(true, true, false));
    assert!(v.is_some_and(|v| v.contains("not from the primary")));
    let broken = ReplicaStatus {
        sql_running: false,
        error: Some("duplicate key".into()),
        ..healthy.clone()
    };
    let v = replica_verdict(&broken, max, &following(true, false, false));
    assert!(v.is_some_and(|v| v.contains("replication broken")));
    // Stopped by the monitor itself while the primary is down: still serves reads.
    let stopped = ReplicaStatus {
        io_running: false,
        sql_running: false,
        ..healthy.clone()
    };
    assert_eq!(
        replica_verdict(&stopped, max, &following(false, false, true)),
        None
    );
    // Its receiver reconnecting to a dead primary: as fresh as any, keeps serving.
    let reconnecting = ReplicaStatus {
        io_connected: false,
        error: Some("can't connect".into()),
        ..healthy.clone()
    };
    assert_eq!(
        replica_verdict(&reconnecting, max, &following(false, false, false)),
        None
    );
    let v = replica_verdict(&reconnecting, max, &following(true, false, false));
    assert!(v.is_some_and(|v| v.contains("cannot connect")));
}

#[test]
fn a_replica_too_many_wal_bytes_behind_takes_no_reads() {
    assert_eq!(bytes_verdict(Some(10), Some(10)), None);
    assert_eq!(bytes_verdict(Some(10), None), None);
    assert_eq!(bytes_verdict(None, Some(10)), None);
    assert_eq!(
        bytes_verdict(Some(11), Some(10)).as_deref(),
        Some("replication lag 11 bytes > 10 bytes")
    );
}
