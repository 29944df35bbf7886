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

/// A server a test process never dropped (a binary's shared server) dies with the process
/// and leaves its System V segment behind; the next test process removes it with the dead
/// process's directory. Run again by itself as the two later processes (`ROLE`).
#[test]
fn a_dead_test_processs_server_segments_are_removed_by_the_next() {
    const ROLE: &str = "SLUICE_TESTKIT_STALE_ROLE";
    const TEST: &str = "a_dead_test_processs_server_segments_are_removed_by_the_next";
    match std::env::var(ROLE).as_deref() {
        Ok("leave") => {
            let p = sluice_testkit::Postgres::start_primary().unwrap();
            let (key, id) = p.interlock_segment().unwrap();
            println!("LEFT {key} {id} {}", p.pid().unwrap());
            // Ends without dropping the server, as a binary's shared server ends.
            std::process::exit(0);
        }
        Ok("next") => {
            drop(sluice_testkit::Postgres::start_primary().unwrap());
            return;
        }
        _ => {}
    }
    let run = |role: &str| {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", TEST, "--nocapture", "--test-threads", "1"])
            .env(ROLE, role)
            .output()
            .unwrap();
        assert!(out.status.success(), "{role}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let left = run("leave");
    // (On libtest's own line: "test … ... LEFT key id pid".)
    let line = left.split("LEFT ").nth(1).expect(&left);
    let line = line.lines().next().unwrap_or_default();
    let f: Vec<i64> = line.split(' ').map(|v| v.parse().unwrap()).collect();
    let (segment, pid) = ((f[0], f[1] as i32), f[2]);
    // Its postmaster dies with the process (parent-death signal).
    let started = Instant::now();
    while std::path::Path::new(&format!("/proc/{pid}")).exists() {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if state.contains(") Z ") {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "server {pid} dies"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(segment_present(segment), "{segment:?} left behind");
    run("next");
    assert!(!segment_present(segment), "{segment:?} removed");
}
