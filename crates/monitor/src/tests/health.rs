//! Health checks against the fake agent: failed and timed-out checks, starvation, and reads.

use super::*;

#[tokio::test(start_paused = true)]
async fn one_failed_check_takes_nothing_out_of_service() {
    let (m, _agent) = cluster().await;
    let r = server(&m, R1);
    let fail = || Outcome::Checked(Err(AgentError::unreachable("connection refused")));
    m.apply(&r, fail(), Instant::now(), None);
    assert!(r.is_usable(), "one failure (threshold 2): {:?}", r.state());
    // A time-out while the monitor was starved does not count.
    m.apply(
        &r,
        Outcome::TimedOut,
        Instant::now(),
        Some(Duration::from_millis(300)),
    );
    assert!(r.is_usable(), "{:?}", r.state());
    assert_eq!(
        m.stats
            .starved_checks
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    m.apply(&r, fail(), Instant::now(), None);
    assert!(!r.is_usable(), "two failures in a row");
    assert!(r
        .monitor_block()
        .unwrap_or_default()
        .contains("unreachable (2 checks failed)"));
}

#[tokio::test(start_paused = true)]
async fn a_starved_monitor_does_not_hide_a_dead_server_for_ever() {
    let (m, _agent) = cluster().await;
    let r = server(&m, R1);
    let starved = Some(Duration::from_millis(300));
    // Up to the threshold (2), time-outs while starved are not counted.
    for _ in 0..2 {
        m.apply(&r, Outcome::TimedOut, Instant::now(), starved);
    }
    assert!(r.is_usable(), "{:?}", r.state());
    // Then they count, starved or not.
    m.apply(&r, Outcome::TimedOut, Instant::now(), starved);
    m.apply(&r, Outcome::TimedOut, Instant::now(), starved);
    assert!(!r.is_usable(), "{:?}", r.state());
}

/// A primary whose check times out once (a slow answer) leaves its position at its last
/// answer: a standby too many bytes behind that stays out of reads, and one that catches up
/// with it comes back.
#[tokio::test(start_paused = true)]
async fn a_slow_primary_check_keeps_a_lagging_standby_out_of_reads() {
    let (m, _agent) = cluster().await;
    let (p, r) = (server(&m, P), server(&m, R1));
    r.set_max_lag_bytes(Some(1_000));
    let report = |position: &str, replica: bool| Report {
        position: position.into(),
        read_only: replica,
        replica: replica.then(|| ReplicaStatus {
            source: P.into(),
            io_running: true,
            io_connected: true,
            sql_running: true,
            received: position.into(),
            ..ReplicaStatus::default()
        }),
        ..Report::default()
    };
    let now = Instant::now;
    m.apply(
        &p,
        Outcome::Checked(Ok(report("0-1-5000", false))),
        now(),
        None,
    );
    m.apply(
        &r,
        Outcome::Checked(Ok(report("0-1-10", true))),
        now(),
        None,
    );
    assert!(!r.is_usable(), "4,990 bytes behind: {:?}", r.state());
    m.apply(&p, Outcome::TimedOut, now(), None);
    m.apply(
        &r,
        Outcome::Checked(Ok(report("0-1-10", true))),
        now(),
        None,
    );
    assert!(
        !r.is_usable(),
        "still behind the primary's last known position: {:?}",
        r.state()
    );
    m.apply(
        &r,
        Outcome::Checked(Ok(report("0-1-4500", true))),
        now(),
        None,
    );
    assert!(r.is_usable(), "500 bytes behind it: {:?}", r.state());
}
