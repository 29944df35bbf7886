//! The monitor under adverse conditions: one missed check takes no server out of service,
//! and a proxy whose worker threads are all busy does not stop the monitor's checks (it runs
//! on a thread of its own).
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::fault::{Fault, FaultRelay};
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(60);

/// A replica behind a relay that holds back the monitor's next answers: two checks in a row
/// time out. With `failure_threshold = 3` the replica never stops taking reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missed_checks_below_the_threshold_keep_the_server_in_service() {
    let mut relay = None;
    let env = common::start_with(
        2,
        "[monitor]\nuser = \"monitor\"\npassword = \"monitor\"\ntimeout = \"2s\"\nfailure_threshold = 3\n",
        |text| {
            // Replica 1 is reached through the relay (by sluice and its monitor).
            let port: u16 = text
                .lines()
                .filter_map(|l| l.strip_prefix("address = \"127.0.0.1:"))
                .nth(1)
                .and_then(|p| p.trim_end_matches('"').parse().ok())
                .expect("replica address");
            let r = FaultRelay::start_now(format!("127.0.0.1:{port}"), Duration::ZERO);
            *text = text.replace(
                &format!("127.0.0.1:{port}\""),
                &format!("127.0.0.1:{}\"", r.port),
            );
            relay = Some(r);
        },
    )
    .await;
    let relay = relay.expect("relay started");
    let server = env
        .proxy
        .topology
        .all()
        .iter()
        .find(|s| s.address.ends_with(&format!(":{}", relay.port)))
        .cloned()
        .expect("the relayed replica");
    env.wait_for("the relayed replica checked", LONG, || {
        server.observed().reachable
    })
    .await;

    // Watch it (from a plain thread) while one check times out.
    let watching = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let (w, s) = (watching.clone(), server.clone());
    let watcher = std::thread::spawn(move || {
        let mut blocked = Vec::new();
        while w.load(SeqCst) {
            if let Some(b) = s.monitor_block() {
                blocked.push(b);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        blocked
    });
    relay.arm(Fault::StallAnswersTo {
        user: "monitor".into(),
        connections: 2,
    });
    env.wait_for("the monitor gave up on two checks", LONG, || {
        relay.stalled_and_closed.load(SeqCst) == 2
    })
    .await;
    let failed_at = Instant::now();
    env.wait_for("a check succeeded after that", LONG, || {
        let o = server.observed();
        o.reachable && o.checked.is_some_and(|t| t > failed_at)
    })
    .await;
    watching.store(false, SeqCst);
    let blocked = watcher.join().unwrap();
    assert!(
        blocked.is_empty(),
        "two failed checks took the replica out of service: {:?}",
        blocked.first()
    );
    // Reads still reach it.
    let mut c = mysql_async::Conn::new(mysql_async::Opts::from_url(&env.url("test")).unwrap())
        .await
        .unwrap();
    let seen = common::server_ids(&mut c, 40).await;
    assert!(seen.len() == 2, "both replicas take reads: {seen:?}");
}

/// Every worker thread of the runtime sluice runs on is blocked until the monitor, on its own
/// thread, has finished two more rounds of checks (30 s at most): it goes on checking and
/// finds every server healthy meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn monitor_keeps_checking_while_the_proxy_runtime_is_blocked() {
    let env = common::start_managed(common::Managed {
        replicas: 2,
        ..Default::default()
    })
    .await;
    let m = env.monitor().clone();
    let servers = env.proxy.topology.servers();
    let barrier = Arc::new(Barrier::new(3));
    let released = Arc::new(std::sync::atomic::AtomicBool::new(false));
    for _ in 0..2 {
        let (b, released) = (barrier.clone(), released.clone());
        // Deliberately blocking: each task holds a worker thread until the sampler is done.
        tokio::spawn(async move {
            b.wait();
            let until = Instant::now() + Duration::from_secs(60);
            while !released.load(Relaxed) && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(10));
            }
        });
    }
    let release = released.clone();
    let sampler = std::thread::spawn(move || {
        barrier.wait();
        let before = m.stats.rounds.load(Relaxed);
        // Two rounds, however long a loaded machine makes them (the bound is for a hung
        // monitor only).
        let until = Instant::now() + Duration::from_secs(30);
        let mut blocked = Vec::new();
        while m.stats.rounds.load(Relaxed) - before < 2 && Instant::now() < until {
            for s in &servers {
                if let Some(b) = s.monitor_block() {
                    blocked.push(format!("{}: {b}", s.name));
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let rounds = m.stats.rounds.load(Relaxed) - before;
        release.store(true, Relaxed);
        (rounds, blocked)
    });
    let (rounds, blocked) = tokio::task::spawn_blocking(move || sampler.join().unwrap())
        .await
        .unwrap();
    assert!(
        rounds >= 2,
        "the monitor ran {rounds} rounds in 30 s while the proxy's workers were blocked"
    );
    assert!(blocked.is_empty(), "servers taken out: {blocked:?}");
}
