//! Pool growth under a burst of long statements: a short statement that arrives behind them is
//! served by connections opened while they all still run, after a few connect rounds
//! (the limit doubles every round nothing comes back), not one round per `max_connecting`
//! statements ahead of it.
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::fault::FaultRelay;
use mysql_async::prelude::*;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SLEEPERS: usize = 200;
/// Every backend connect takes at least this long (the slow link).
const CONNECT: Duration = Duration::from_millis(1000);
/// How long each long statement runs.
const SLEEP_SECS: u64 = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_statement_behind_200_long_ones_is_served_while_they_all_still_run() {
    // With max_connecting = 4 and nothing coming back, a round per 4 statements ahead means
    // the short one is served after at least 50 connect rounds, 50 s through this link: after
    // the first long statements (40 s) end. Doubling serves it after
    // rounds_to_serve(201, 4) = 6 rounds: 6 s plus the logins, which a busy machine may
    // stretch by 34 s before this test fails.
    assert_eq!(sluice_core::pool_growth::rounds_to_serve(201, 4), 6);
    let topo = common::one_primary().await;
    let link = FaultRelay::slow(topo.primary().addr(), CONNECT).await;
    let cfg = format!(
        "[proxy]\nlisten = \"127.0.0.1:0\"\n[pool]\nmax_connections = 400\nmax_connecting = 4\nqueue_timeout = \"300s\"\nconnect_timeout = \"60s\"\n[monitor]\nenabled = false\n[[users]]\nname = \"app\"\npassword = \"app\"\n[[servers]]\naddress = \"{}\"\nhostgroup = \"writer\"\n",
        link.addr()
    );
    let (proxy, running) = common::start_proxy(&cfg).await;
    let url = format!(
        "mysql://app:app@127.0.0.1:{}/test?prefer_socket=false",
        running.addrs[0].port()
    );
    let mut conns = Vec::new();
    for _ in 0..=SLEEPERS {
        conns.push(
            mysql_async::Conn::new(mysql_async::Opts::from_url(&url).unwrap())
                .await
                .unwrap(),
        );
    }
    let mut short = conns.pop().expect("one for the short statement");

    let finished = Arc::new(AtomicUsize::new(0));
    let sleepers: Vec<_> = conns
        .into_iter()
        .map(|mut c| {
            let finished = finished.clone();
            tokio::spawn(async move {
                let r: Option<i64> = c
                    .query_first(format!("SELECT SLEEP({SLEEP_SECS})"))
                    .await
                    .unwrap();
                finished.fetch_add(1, SeqCst);
                (r, c)
            })
        })
        .collect();
    // Every long statement has a connection or waits in line for one.
    let at_pool = || -> usize {
        proxy
            .topology
            .hostgroups()
            .iter()
            .map(|h| {
                let lent: u32 = h.pool_stats().iter().map(|p| p.in_use - p.connecting).sum();
                h.waiting() + lent as usize
            })
            .sum()
    };
    common::wait_for(
        "the long statements to reach the pool",
        Duration::from_secs(120),
        || at_pool() >= SLEEPERS,
    )
    .await;

    let started = Instant::now();
    let one: Option<i64> =
        tokio::time::timeout(Duration::from_secs(300), short.query_first("SELECT 1"))
            .await
            .expect("the short statement hangs")
            .unwrap();
    let waited = started.elapsed();
    let done_before = finished.load(SeqCst);
    println!("SELECT 1 behind {SLEEPERS} sleepers took {waited:?}; {done_before} had finished");
    assert_eq!(one, Some(1));
    assert_eq!(
        done_before, 0,
        "the short statement waited {waited:?}, until long statements ended: the pool grew a round per few statements"
    );

    for s in sleepers {
        let (r, c) = s.await.unwrap();
        assert_eq!(r, Some(0), "SLEEP ran to its end");
        drop(c);
    }
    let opened: u64 = proxy
        .topology
        .servers()
        .iter()
        .map(|s| s.stats.connects.load(SeqCst))
        .sum();
    assert!(
        opened <= SLEEPERS as u64 + 2,
        "{opened} connections for {SLEEPERS} long statements, a short one and the login check"
    );
    drop(short);
    drop(link);
}
