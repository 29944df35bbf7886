//! Pool mechanics with a stand-in connection type (no protocol involved). Time is paused
//! (tokio's test clock advances only when every task waits), so what the tests see does not
//! depend on how fast or busy the machine is.

use super::*;
use crate::pool_growth::{rounds_to_serve, Growth};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use tokio::time::Instant as Clock;

struct FakeConn(usize);

#[derive(Default)]
struct FakeConnector {
    opened: AtomicUsize,
    /// Addresses that refuse connections.
    down: Mutex<Vec<String>>,
    /// Time a connect takes.
    delay: Duration,
    /// Refuse logins (as a server with bad credentials would).
    refuse: bool,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

impl Connector<FakeConn> for FakeConnector {
    fn connect<'a>(
        &'a self,
        server: &'a Arc<Server>,
        _key: &'a PoolKey,
    ) -> Pin<Box<dyn Future<Output = Result<FakeConn, ConnectError>> + Send + 'a>> {
        Box::pin(async move {
            if self.down.lock().iter().any(|a| **a == *server.address) {
                return Err(ConnectError::down("connection refused"));
            }
            if self.refuse {
                return Err(ConnectError::refused(1045, *b"28000", "access denied"));
            }
            let now = self.in_flight.fetch_add(1, SeqCst) + 1;
            self.max_in_flight.fetch_max(now, SeqCst);
            tokio::time::sleep(self.delay).await;
            self.in_flight.fetch_sub(1, SeqCst);
            Ok(FakeConn(self.opened.fetch_add(1, SeqCst)))
        })
    }
}

fn settings(queue_ms: u64, limit: usize) -> PoolSettings {
    PoolSettings {
        queue_timeout: Duration::from_millis(queue_ms),
        queue_limit: limit,
        connect_timeout: Duration::from_secs(1),
        retry_after: Duration::from_secs(60),
        idle_timeout: Duration::from_secs(60),
        max_connecting: 4,
    }
}

fn key(user: &str) -> PoolKey {
    PoolKey {
        user: Arc::from(user),
        database: None,
        variant: 0,
    }
}

fn hostgroup(servers: &[(&str, u32)], s: PoolSettings) -> Arc<Hostgroup<FakeConn>> {
    let servers = servers
        .iter()
        .map(|(a, max)| Arc::new(Server::new(a, "hg", 1, *max)))
        .collect();
    Hostgroup::new("hg", servers, Balance::Weighted, s)
}

#[tokio::test(start_paused = true)]
async fn reuses_idle_connections() {
    let hg = hostgroup(&[("a:1", 10)], settings(100, 10));
    let c = Arc::new(FakeConnector::default());
    for _ in 0..5 {
        let lease = hg.acquire(&key("u"), &c).await.unwrap();
        drop(lease);
    }
    assert_eq!(c.opened.load(SeqCst), 1);
    let st = &hg.pool_stats()[0];
    assert_eq!((st.idle, st.in_use, st.open), (1, 0, 1));
}

#[tokio::test(start_paused = true)]
async fn connections_bound_to_another_database_are_not_reused() {
    let hg = hostgroup(&[("a:1", 10)], settings(100, 10));
    let c = Arc::new(FakeConnector::default());
    let on = |db: &str| PoolKey {
        database: Some(Arc::from(db)),
        ..key("u")
    };
    drop(hg.acquire(&on("sales"), &c).await.unwrap());
    drop(hg.acquire(&on("sales"), &c).await.unwrap());
    assert_eq!(c.opened.load(SeqCst), 1, "same user and database: reused");
    let lease = hg.acquire(&on("billing"), &c).await.unwrap();
    assert_eq!(lease.key().database.as_deref(), Some("billing"));
    assert_eq!(
        c.opened.load(SeqCst),
        2,
        "another database: a connection of its own"
    );
}

#[tokio::test(start_paused = true)]
async fn waiters_get_connections_in_order_and_time_out_with_a_precise_message() {
    let hg = hostgroup(&[("a:1", 1)], settings(300, 10));
    let c = Arc::new(FakeConnector::default());
    let held = hg.acquire(&key("u"), &c).await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..3 {
        let (hg, c, order) = (hg.clone(), c.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let lease = hg.acquire(&key("u"), &c).await.unwrap();
            order.lock().push(i);
            tokio::time::sleep(Duration::from_millis(5)).await;
            drop(lease);
        }));
        tokio::time::sleep(Duration::from_millis(10)).await; // queue in a known order
    }
    assert_eq!(hg.waiting(), 3);
    drop(held);
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(*order.lock(), vec![0, 1, 2]);
    assert_eq!(
        c.opened.load(SeqCst),
        1,
        "the one connection was handed from waiter to waiter"
    );

    let _held = hg.acquire(&key("u"), &c).await.unwrap();
    let err = match hg.acquire(&key("u"), &c).await {
        Err(e) => e,
        Ok(_) => panic!("must time out"),
    };
    let msg = err.to_string();
    assert!(
        msg.contains("hostgroup 'hg'")
            && msg.contains("within 3")
            && msg.contains("1 of 1 connections busy"),
        "{msg}"
    );
}

#[tokio::test(start_paused = true)]
async fn full_queue_fails_at_once() {
    let hg = hostgroup(&[("a:1", 1)], settings(5_000, 1));
    let c = Arc::new(FakeConnector::default());
    let _held = hg.acquire(&key("u"), &c).await.unwrap();
    let (hg2, c2) = (hg.clone(), c.clone());
    let _waiter = tokio::spawn(async move { hg2.acquire(&key("u"), &c2).await.map(|_| ()) });
    tokio::time::sleep(Duration::from_millis(20)).await;
    let started = Clock::now();
    let err = hg
        .acquire(&key("u"), &c)
        .await
        .err()
        .expect("queue is full");
    assert!(matches!(err, AcquireError::QueueFull { .. }), "{err}");
    assert_eq!(started.elapsed(), Duration::ZERO, "it did not wait");
}

#[tokio::test(start_paused = true)]
async fn refused_server_is_shunned_and_others_serve() {
    let hg = hostgroup(&[("down:1", 10), ("up:1", 10)], settings(1_000, 10));
    let c = Arc::new(FakeConnector::default());
    c.down.lock().push("down:1".into());
    for _ in 0..20 {
        let lease = hg.acquire(&key("u"), &c).await.unwrap();
        assert_eq!(&*lease.server().address, "up:1");
    }
    let servers = hg.servers();
    assert!(matches!(servers[0].health(), crate::Health::Shunned { .. }));
    assert!(servers[1].is_usable());

    // With every server down the error names the hostgroup and the reason.
    c.down.lock().push("up:1".into());
    servers[1].shun("test".into(), Duration::from_secs(60));
    let err = hg.acquire(&key("u"), &c).await.err().expect("no server");
    assert!(
        err.to_string()
            .contains("no usable server in hostgroup 'hg'"),
        "{err}"
    );
}

#[tokio::test(start_paused = true)]
async fn connections_of_another_user_make_room_when_full() {
    let hg = hostgroup(&[("a:1", 1)], settings(1_000, 10));
    let c = Arc::new(FakeConnector::default());
    drop(hg.acquire(&key("alice"), &c).await.unwrap());
    let lease = hg.acquire(&key("bob"), &c).await.unwrap();
    assert_eq!(
        lease.conn_ref().0,
        1,
        "alice's idle connection was replaced"
    );
    drop(lease);
    let st = &hg.pool_stats()[0];
    assert_eq!((st.idle, st.open), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn discarded_leases_free_their_slot_for_waiters() {
    let hg = hostgroup(&[("a:1", 1)], settings(1_000, 10));
    let c = Arc::new(FakeConnector::default());
    let mut held = hg.acquire(&key("u"), &c).await.unwrap();
    let (hg2, c2) = (hg.clone(), c.clone());
    let waiter =
        tokio::spawn(async move { hg2.acquire(&key("u"), &c2).await.map(|l| l.conn_ref().0) });
    tokio::time::sleep(Duration::from_millis(20)).await;
    held.discard();
    drop(held);
    assert_eq!(
        waiter.await.unwrap().unwrap(),
        1,
        "waiter opened a fresh connection"
    );
}

/// A session task that panics while it holds a lease (tokio catches the panic; the task's
/// state is dropped as the panic unwinds): its connection is closed, not lent to the next
/// session in whatever state the panic left it.
#[tokio::test(start_paused = true)]
async fn a_lease_dropped_by_a_panic_closes_its_connection() {
    let hg = hostgroup(&[("a:1", 1)], settings(1_000, 10));
    let c = Arc::new(FakeConnector::default());
    let lease = hg.acquire(&key("u"), &c).await.unwrap();
    let task = tokio::spawn(async move {
        // Held across an await, as a session holds it: in the task's state, which tokio
        // drops while the panic unwinds.
        let held = lease;
        tokio::task::yield_now().await;
        assert!(held.conn_ref().0 == usize::MAX, "a session's bug");
    });
    assert!(task.await.unwrap_err().is_panic());
    let st = &hg.pool_stats()[0];
    assert_eq!((st.idle, st.in_use, st.open), (0, 0, 0), "closed, not idle");
    // The slot is free: the next session gets a fresh connection.
    let next = hg.acquire(&key("u"), &c).await.unwrap();
    assert_eq!(next.conn_ref().0, 1);
    drop(next);
    // Without a panic, the same lease goes back to the pool.
    let st = &hg.pool_stats()[0];
    assert_eq!((st.idle, st.in_use, st.open), (1, 0, 1));
}

#[tokio::test(start_paused = true)]
async fn idle_connections_expire() {
    let mut s = settings(1_000, 10);
    s.idle_timeout = Duration::from_millis(10);
    let hg = hostgroup(&[("a:1", 5)], s);
    let c = Arc::new(FakeConnector::default());
    let t0 = std::time::Instant::now();
    let at = |ms| t0 + Duration::from_millis(ms);
    drop(hg.acquire(&key("u"), &c).await.unwrap());
    // Its idle time counts from the first sweep that found it idle (no clock read when a
    // connection comes back)...
    assert_eq!(hg.close_idle(at(0)), 0);
    // ...and starts again once it was lent in between.
    drop(hg.try_acquire(&key("u")).expect("the idle connection"));
    assert_eq!(hg.close_idle(at(50)), 0);
    assert_eq!(hg.close_idle(at(55)), 0);
    assert_eq!(hg.close_idle(at(61)), 1);
    assert_eq!(hg.pool_stats()[0].open, 0);
}

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

#[tokio::test(start_paused = true)]
async fn a_grant_to_a_waiter_that_left_comes_back() {
    let hg = hostgroup(&[("a:1", 1)], settings(5_000, 10));
    let c = Arc::new(FakeConnector::default());
    let held = hg.acquire(&key("u"), &c).await.unwrap();
    let (hg2, c2) = (hg.clone(), c.clone());
    let waiter = tokio::spawn(async move { hg2.acquire(&key("u"), &c2).await.map(|_| ()) });
    tokio::task::yield_now().await; // the waiter queues
    assert_eq!(hg.waiting(), 1);
    drop(held); // the connection is handed to the waiter...
    waiter.abort(); // ...which leaves before taking it
    let _ = waiter.await;
    let st = &hg.pool_stats()[0];
    assert_eq!((st.idle, st.in_use, st.open), (1, 0, 1), "nothing leaked");
    // And the pool still serves.
    drop(hg.acquire(&key("u"), &c).await.unwrap());
}

#[tokio::test(start_paused = true)]
async fn waiters_that_gave_up_do_not_block_later_requests() {
    let hg = hostgroup(&[("a:1", 1)], settings(100, 10));
    let c = Arc::new(FakeConnector::default());
    let held = hg.acquire(&key("u"), &c).await.unwrap();
    assert!(hg.acquire(&key("u"), &c).await.is_err(), "times out");
    drop(held);
    // The connection is idle now; the next request must get it at once.
    let started = Clock::now();
    drop(hg.acquire(&key("u"), &c).await.unwrap());
    assert_eq!(started.elapsed(), Duration::ZERO, "it did not wait");
}

#[tokio::test(start_paused = true)]
async fn a_connection_opened_to_a_server_that_left_service_meanwhile_is_closed() {
    let hg = hostgroup(&[("a:1", 10)], settings(60_000, 10));
    let c = Arc::new(FakeConnector {
        delay: Duration::from_millis(100),
        ..Default::default()
    });
    let (hg2, c2) = (hg.clone(), c.clone());
    let waiter = tokio::spawn(async move { hg2.acquire(&key("u"), &c2).await.map(|_| ()) });
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(c.in_flight.load(SeqCst), 1, "a connect runs for the waiter");
    hg.servers()[0].set_weight(0); // a reload takes the server out while it connects
    tokio::time::sleep(Duration::from_millis(200)).await;
    let st = &hg.pool_stats()[0];
    assert_eq!((st.idle, st.in_use, st.open), (0, 0, 0), "closed, not lent");
    assert!(
        !waiter.is_finished(),
        "the statement still waits for a usable server"
    );
    waiter.abort();
}

#[tokio::test(start_paused = true)]
async fn try_acquire_lends_only_an_idle_connection_and_changes_nothing_else() {
    let hg = hostgroup(&[("a:1", 1)], settings(1_000, 10));
    let c = Arc::new(FakeConnector::default());
    // Nothing idle: no lease, no place in line, no connection opened.
    assert!(hg.try_acquire(&key("u")).is_none());
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!((hg.waiting(), c.opened.load(SeqCst)), (0, 0));
    // One idle connection: lent at once, and it is the pool's.
    drop(hg.acquire(&key("u"), &c).await.unwrap());
    let lease = hg.try_acquire(&key("u")).expect("the idle connection");
    assert_eq!(lease.conn_ref().0, 0);
    let st = &hg.pool_stats()[0];
    assert_eq!((st.idle, st.in_use, st.open), (0, 1, 1));
    // Another user's key, or a connection already lent: nothing, and still no one in line.
    assert!(hg.try_acquire(&key("v")).is_none());
    assert!(hg.try_acquire(&key("u")).is_none());
    assert_eq!((hg.waiting(), c.opened.load(SeqCst)), (0, 1));
    drop(lease);
    // Someone in line is served first: try_acquire does not jump the queue.
    let held = hg.acquire(&key("u"), &c).await.unwrap();
    let (hg2, c2) = (hg.clone(), c.clone());
    let waiter =
        tokio::spawn(async move { hg2.acquire(&key("u"), &c2).await.map(|l| l.conn_ref().0) });
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(hg.waiting(), 1);
    drop(held);
    assert!(hg.try_acquire(&key("u")).is_none(), "the waiter's turn");
    assert_eq!(waiter.await.unwrap().unwrap(), 0);
}

#[test]
fn pool_keys_compare_by_content_whatever_the_allocation() {
    let a = PoolKey {
        user: Arc::from("app"),
        database: Some(Arc::from("db")),
        variant: 1,
    };
    // Same text from other allocations: the same pool.
    let b = PoolKey {
        user: Arc::from(String::from("app")),
        database: Some(Arc::from(String::from("db"))),
        variant: 1,
    };
    assert_eq!(a, b);
    assert_eq!(a, a.clone());
    let differ = [
        PoolKey {
            user: Arc::from("app2"),
            ..a.clone()
        },
        PoolKey {
            database: Some(Arc::from("db2")),
            ..a.clone()
        },
        PoolKey {
            database: None,
            ..a.clone()
        },
        PoolKey {
            variant: 2,
            ..a.clone()
        },
    ];
    for d in &differ {
        assert_ne!(&a, d);
        assert_ne!(d, &a);
    }
}

#[tokio::test(start_paused = true)]
async fn each_waiter_times_out_at_its_own_deadline_even_after_a_reload_shortens_the_wait() {
    let hg = hostgroup(&[("a:1", 1)], settings(10_000, 10));
    let c = Arc::new(FakeConnector::default());
    let _held = hg.acquire(&key("u"), &c).await.unwrap();
    let start = Clock::now();
    let long = {
        let (hg, c) = (hg.clone(), c.clone());
        tokio::spawn(async move { (hg.acquire(&key("u"), &c).await.is_err(), start.elapsed()) })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    // A reload: whoever joins the line now waits 100 ms, before the one already waiting 10 s.
    hg.set_settings(settings(100, 10));
    let (err, waited) = match hg.acquire(&key("u"), &c).await {
        Err(e) => (e, start.elapsed()),
        Ok(_) => panic!("must time out"),
    };
    assert!(err.to_string().contains("within 100 ms"), "{err}");
    assert_eq!(
        waited,
        Duration::from_millis(110),
        "its own deadline, not the line's first"
    );
    assert_eq!(hg.waiting(), 1, "the first waiter still waits");
    let (failed, waited) = long.await.unwrap();
    assert!(failed);
    assert_eq!(waited, Duration::from_secs(10));
    assert_eq!(hg.waiting(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_statement_held_for_a_server_longer_than_the_queue_timeout_is_served_when_one_returns() {
    let hg = hostgroup(&[("a:1", 1)], settings(5_000, 10));
    hg.set_hold_when_empty(Some(Duration::from_secs(30)));
    let c = Arc::new(FakeConnector::default());
    let server = hg.pool_stats()[0].server.clone();
    server.set_offline(Some("switchover: draining".into()));
    let held = {
        let (hg, c) = (hg.clone(), c.clone());
        tokio::spawn(async move { hg.acquire(&key("u"), &c).await.map(|_| ()) })
    };
    // No server for 6 s: longer than queue_timeout, well within the hold.
    tokio::time::sleep(Duration::from_secs(6)).await;
    server.set_offline(None);
    let r = held.await.unwrap();
    assert!(r.is_ok(), "{:?}", r.err().map(|e| e.to_string()));
}
