//! The PostgreSQL testkit starts a real primary with streaming replicas and cleans up.
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use sluice_testkit::{segment_present, PgTopology};
use std::time::{Duration, Instant};

#[test]
fn a_primary_and_two_streaming_replicas_start_replicate_and_are_removed() {
    let topo = PgTopology::start(2).expect("PostgreSQL starts (is postgresql-15 installed?)");
    let p = topo.primary();
    assert_eq!(p.sql("SELECT pg_is_in_recovery()").unwrap(), "f");
    p.sql("CREATE TABLE t (id int PRIMARY KEY, v text); INSERT INTO t VALUES (1, 'one')")
        .unwrap();
    let lsn = p.sql("SELECT pg_current_wal_insert_lsn()").unwrap();
    for r in topo.replicas() {
        assert_eq!(r.primary_port, Some(p.port));
        assert_eq!(r.sql("SELECT pg_is_in_recovery()").unwrap(), "t");
        // Replication is asynchronous: wait (bounded) for the replica to replay the write.
        let started = Instant::now();
        let caught_up = format!("SELECT pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn");
        while r.sql(&caught_up).unwrap() != "t" {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "replica replays the write"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(r.sql("SELECT v FROM t WHERE id = 1").unwrap(), "one");
        let refused = r
            .sql("INSERT INTO t VALUES (2, 'two')")
            .unwrap_err()
            .to_string();
        assert!(refused.contains("read-only transaction"), "{refused}");
    }
    let left: Vec<(u32, std::path::PathBuf, (i64, i32))> = topo
        .servers
        .iter()
        .map(|s| {
            let segment = s.interlock_segment().unwrap();
            assert!(segment_present(segment));
            (s.pid().unwrap(), s.dir().to_path_buf(), segment)
        })
        .collect();
    drop(topo);
    for (pid, dir, segment) in left {
        assert!(!dir.exists(), "{} removed", dir.display());
        // Its System V segment too (a machine holds 4,096).
        assert!(!segment_present(segment), "{segment:?} removed");
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // Gone, or at most a zombie not yet reaped by a sibling's wait.
        assert!(
            state.is_empty() || state.contains(") Z "),
            "server {pid} stopped: {state}"
        );
    }
}
