//! The pool's growth under a line of statements: how many connections it opens at once,
//! and how soon a statement behind others is served (see `pool_growth`).

use super::*;
use crate::pool_growth::{rounds_to_serve, Growth};

/// Starts `n` statements that each hold a connection for `hold`, all at once. The counter
/// tells how many have asked for their connection.
fn burst(
    hg: &Arc<Hostgroup<FakeConn>>,
    c: &Arc<FakeConnector>,
    n: usize,
    hold: Duration,
) -> (Vec<tokio::task::JoinHandle<()>>, Arc<AtomicUsize>) {
    let asked = Arc::new(AtomicUsize::new(0));
    let tasks = (0..n)
        .map(|_| {
            let (hg, c, asked) = (hg.clone(), c.clone(), asked.clone());
            tokio::spawn(async move {
                // Counted in the same poll that joins the queue (the test runtime has one
                // thread): once all have counted, all are in line.
                asked.fetch_add(1, SeqCst);
                let lease = hg.acquire(&key("u"), &c).await.unwrap();
                tokio::time::sleep(hold).await;
                drop(lease);
            })
        })
        .collect();
    (tasks, asked)
}

#[tokio::test(start_paused = true)]
async fn while_connections_come_back_a_burst_opens_few_at_a_time() {
    let mut s = settings(5_000, 1000);
    s.max_connecting = 2;
    let hg = hostgroup(&[("a:1", 50)], s);
    let c = Arc::new(FakeConnector {
        delay: Duration::from_millis(20),
        ..Default::default()
    });
    for t in burst(&hg, &c, 100, Duration::from_millis(1)).0 {
        t.await.unwrap();
    }
    // Connects started for statements that returns served meanwhile complete too.
    tokio::time::sleep(Duration::from_secs(1)).await;
    // The first round finds nothing in use to come back, so it doubles the limit once; then
    // returns keep it at max_connecting.
    assert!(
        c.max_in_flight.load(SeqCst) <= 4,
        "at most 2 connects at once, 4 after a silent round"
    );
    let opened = c.opened.load(SeqCst);
    assert!(
        opened < 20,
        "100 short statements opened {opened} connections"
    );
    let st = &hg.pool_stats()[0];
    assert_eq!((st.in_use, st.open as usize), (0, opened));
    assert!(st.peak_open <= hg.peak_demand());
}

#[tokio::test(start_paused = true)]
async fn no_server_ever_has_more_connections_than_statements_wanted_one_at_once() {
    for (hold_ms, max) in [(1, 50), (30, 50), (500, 50), (500, 7)] {
        let mut s = settings(600_000, 1000);
        s.max_connecting = 3;
        let hg = hostgroup(&[("a:1", max), ("b:1", max)], s);
        let c = Arc::new(FakeConnector {
            delay: Duration::from_millis(20),
            ..Default::default()
        });
        // Three waves, so that idle connections and returns mix with new ones.
        for n in [40, 5, 80] {
            for t in burst(&hg, &c, n, Duration::from_millis(hold_ms)).0 {
                t.await.unwrap();
            }
        }
        let demand = hg.peak_demand();
        for st in hg.pool_stats() {
            assert!(
                st.peak_open <= demand.min(max),
                "hold {hold_ms} ms: {} had {} open; peak demand {demand}, max {max}",
                st.server.name,
                st.peak_open
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_short_statement_behind_long_ones_waits_log_rounds_not_a_round_per_few() {
    let mut s = settings(60_000, 1000);
    s.max_connecting = 2;
    let hg = hostgroup(&[("a:1", 500)], s);
    let round = Duration::from_millis(100);
    let c = Arc::new(FakeConnector {
        delay: round,
        ..Default::default()
    });
    // 60 long statements: nothing comes back while the short one waits.
    let (long, asked) = burst(&hg, &c, 60, Duration::from_secs(3600));
    for _ in 0..1000 {
        if asked.load(SeqCst) == 60 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(
        asked.load(SeqCst),
        60,
        "the long statements are in line first"
    );
    let started = Clock::now();
    let short = hg.acquire(&key("u"), &c).await.unwrap();
    let waited = started.elapsed();
    let rounds = rounds_to_serve(61, 2);
    assert_eq!(rounds, 5);
    assert!(
        waited <= round * rounds,
        "served after {waited:?}, more than {rounds} connect rounds of {round:?} (a round per 2 statements would be 31)"
    );
    assert_eq!(
        c.opened.load(SeqCst),
        61,
        "a connection per waiting statement, none more"
    );
    drop(short);
    long.iter().for_each(|t| t.abort());
}

#[tokio::test(start_paused = true)]
async fn a_connection_coming_back_serves_a_waiter_before_its_connect_ends() {
    let hg = hostgroup(&[("a:1", 10)], settings(60_000, 10));
    let c = Arc::new(FakeConnector::default());
    let held = hg.acquire(&key("u"), &c).await.unwrap();
    let slow = Arc::new(FakeConnector {
        delay: Duration::from_millis(500),
        ..Default::default()
    });
    let (hg2, slow2) = (hg.clone(), slow.clone());
    let waiter = tokio::spawn(async move {
        let started = Clock::now();
        let lease = hg2.acquire(&key("u"), &slow2).await.unwrap();
        (started.elapsed(), lease.conn_ref().0)
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(
        slow.in_flight.load(SeqCst),
        1,
        "a connect runs for the waiter"
    );
    drop(held);
    let (waited, conn) = waiter.await.unwrap();
    assert_eq!(conn, 0, "the connection that came back");
    assert_eq!(
        waited,
        Duration::from_millis(10),
        "served when it came back"
    );
    // The connect still completes, and its connection waits idle for the next statement.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let st = &hg.pool_stats()[0];
    assert_eq!((st.idle, st.in_use, st.open), (2, 0, 2));
}

#[tokio::test(start_paused = true)]
async fn a_statement_that_leaves_while_its_connection_opens_leaks_nothing() {
    let hg = hostgroup(&[("a:1", 1)], settings(60_000, 10));
    let c = Arc::new(FakeConnector {
        delay: Duration::from_secs(1),
        ..Default::default()
    });
    let (hg2, c2) = (hg.clone(), c.clone());
    let waiter = tokio::spawn(async move { hg2.acquire(&key("u"), &c2).await.map(|_| ()) });
    tokio::time::sleep(Duration::from_millis(10)).await;
    waiter.abort(); // its client left
    let _ = waiter.await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let st = &hg.pool_stats()[0];
    assert_eq!((st.idle, st.in_use, st.open), (1, 0, 1), "nothing leaked");
    drop(hg.acquire(&key("u"), &c).await.unwrap());
    assert_eq!(c.opened.load(SeqCst), 1, "the next statement used it");
}

#[tokio::test(start_paused = true)]
async fn a_refused_login_reaches_the_waiting_statement() {
    let hg = hostgroup(&[("a:1", 10)], settings(60_000, 10));
    let c = Arc::new(FakeConnector {
        refuse: true,
        ..Default::default()
    });
    let err = hg.acquire(&key("u"), &c).await.err().expect("refused");
    assert!(matches!(err, AcquireError::Connect(_)), "{err}");
    assert!(err.to_string().contains("access denied"), "{err}");
    assert!(
        hg.servers()[0].is_usable(),
        "the server answered: not shunned"
    );
    let st = &hg.pool_stats()[0];
    assert_eq!((st.idle, st.in_use, st.open), (0, 0, 0));
}

#[test]
fn the_connect_limit_doubles_each_silent_round_and_resets_when_a_connection_returns() {
    let (base, max) = (4, 100);
    let mut g = Growth::default();
    assert_eq!(g.limit(base, max), 4);
    // A round: as many connects complete as the limit allowed, none saw a return.
    let mut limits = Vec::new();
    for _ in 0..5 {
        for _ in 0..g.limit(base, max) {
            g.connected(false, max);
        }
        limits.push(g.limit(base, max));
    }
    assert_eq!(
        limits,
        vec![8, 16, 32, 64, 100],
        "doubling, capped by max_connections"
    );
    g.returned();
    assert_eq!(g.limit(base, max), 4, "a return resets it");
    g.connected(true, max);
    assert_eq!(
        g.limit(base, max),
        4,
        "a connect that saw a return does not grow it"
    );
    // A server allowing fewer connections than max_connecting.
    assert_eq!(Growth::default().limit(4, 2), 4);
    let mut g = Growth::default();
    (0..10).for_each(|_| g.connected(false, 2));
    assert_eq!(g.limit(4, 2), 4);
}

#[test]
fn rounds_to_serve_a_queue_position() {
    let cases = [
        (1, 4, 1),
        (4, 4, 1),
        (5, 4, 2),
        (12, 4, 2),
        (13, 4, 3),
        (201, 4, 6),
        (201, 1, 8),
        (1000, 0, 10), // max_connecting 0 counts as 1
    ];
    for (position, base, rounds) in cases {
        assert_eq!(rounds_to_serve(position, base), rounds, "{position} {base}");
    }
}
