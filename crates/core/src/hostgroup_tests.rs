//! Pool mechanics with a stand-in connection type (no protocol involved). Time is paused
//! (tokio's test clock advances only when every task waits), so what the tests see does not
//! depend on how fast or busy the machine is.

use super::*;
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

/// A connection lost under a statement closes, and so do the idle connections to its
/// server (of any user): a dead server's connections close one by one as its process is torn
/// down, and one still open when lent would take the next statement with it. A connection
/// lent at the time comes back as usual; another server's idle ones stay.
#[tokio::test(start_paused = true)]
async fn a_lost_connection_closes_its_servers_idle_ones() {
    let hg = hostgroup(&[("a:1", 10)], settings(1_000, 10));
    let c = Arc::new(FakeConnector::default());
    let mut leases = Vec::new();
    for user in ["u", "u", "v", "u"] {
        leases.push(hg.acquire(&key(user), &c).await.unwrap());
    }
    let busy = leases.pop().unwrap();
    let mut lost = leases.pop().unwrap();
    drop(leases);
    let st = &hg.pool_stats()[0];
    assert_eq!((st.idle, st.in_use, st.open), (2, 2, 4));
    lost.lost();
    drop(lost);
    let st = &hg.pool_stats()[0];
    assert_eq!(
        (st.idle, st.in_use, st.open),
        (0, 1, 1),
        "the idle ones closed"
    );
    drop(busy);
    let st = &hg.pool_stats()[0];
    assert_eq!(
        (st.idle, st.in_use, st.open),
        (1, 0, 1),
        "a lent one comes back"
    );
    // The one that came back is lent again; another user's statement gets a fresh one.
    assert_eq!(hg.acquire(&key("u"), &c).await.unwrap().conn_ref().0, 3);
    let fresh = hg.acquire(&key("v"), &c).await.unwrap();
    assert_eq!(fresh.conn_ref().0, 4, "a fresh connection");
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

/// A reload that lowers a server's connection limit below its idle connections: the next
/// sweep closes the excess (it waited for the idle timeout).
#[tokio::test(start_paused = true)]
async fn idle_connections_beyond_a_lowered_limit_close_at_the_next_sweep() {
    let hg = hostgroup(&[("a:1", 5)], settings(1_000, 10));
    let c = Arc::new(FakeConnector::default());
    let leases: Vec<_> = leases_at_once(&hg, &c, 4).await;
    drop(leases);
    assert_eq!(hg.pool_stats()[0].idle, 4);
    hg.servers()[0].set_max_connections(2);
    assert_eq!(hg.close_idle(std::time::Instant::now()), 2);
    let st = &hg.pool_stats()[0];
    assert_eq!((st.idle, st.open), (2, 2));
}

/// `n` leases of `hg` at once.
async fn leases_at_once(
    hg: &Arc<Hostgroup<FakeConn>>,
    c: &Arc<FakeConnector>,
    n: usize,
) -> Vec<Lease<FakeConn>> {
    let mut leases = Vec::new();
    for _ in 0..n {
        leases.push(hg.acquire(&key("u"), c).await.unwrap());
    }
    leases
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
    // No server may take the statement any more: it is let go, as a new one is refused.
    let err = waiter.await.unwrap().unwrap_err();
    assert!(matches!(err, AcquireError::NoServer { .. }), "{err}");
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

/// Statements waiting for a connection are let go as soon as no server of the hostgroup may
/// take them (drained, weight 0, removed), with the reason a statement arriving then gets,
/// instead of waiting out the queue timeout; while another server may, they wait on.
#[tokio::test(start_paused = true)]
async fn waiters_are_let_go_when_no_server_may_take_them() {
    for how in ["drain", "weight 0", "remove"] {
        let hg = hostgroup(&[("a:1", 1), ("b:1", 1)], settings(60_000, 10));
        let c = Arc::new(FakeConnector::default());
        let servers = hg.servers();
        // Both servers' one connection held: the next statements wait.
        let held = [
            hg.acquire(&key("u"), &c).await.unwrap(),
            hg.acquire(&key("u"), &c).await.unwrap(),
        ];
        let started = tokio::time::Instant::now();
        let waiting: Vec<_> = (0..3)
            .map(|_| {
                let (hg, c) = (hg.clone(), c.clone());
                tokio::spawn(async move { hg.acquire(&key("u"), &c).await.map(|_| ()) })
            })
            .collect();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(hg.waiting(), 3);
        let leave = |s: &Arc<crate::Server>| match how {
            "drain" => s.set_offline(Some("drained by operator".into())),
            "weight 0" => s.set_weight(0),
            _ => hg.remove_server(s),
        };
        // One server left: they still wait, for it.
        leave(&servers[0]);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(hg.waiting(), 3, "{how}");
        leave(&servers[1]);
        for w in waiting {
            let err = w.await.unwrap().unwrap_err();
            assert!(matches!(err, AcquireError::NoServer { .. }), "{how}: {err}");
        }
        assert!(started.elapsed() < Duration::from_secs(10), "{how}");
        drop(held);
    }
}

#[path = "hostgroup_departed_tests.rs"]
mod departed;

#[path = "hostgroup_growth_tests.rs"]
mod growth;
