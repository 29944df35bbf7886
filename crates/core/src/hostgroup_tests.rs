//! Pool mechanics with a stand-in connection type (no protocol involved).

use super::*;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

struct FakeConn(usize);

#[derive(Default)]
struct FakeConnector {
    opened: AtomicUsize,
    /// Addresses that refuse connections.
    down: Mutex<Vec<String>>,
    /// Time a connect takes.
    delay: Duration,
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

#[tokio::test]
async fn reuses_idle_connections() {
    let hg = hostgroup(&[("a:1", 10)], settings(100, 10));
    let c = FakeConnector::default();
    for _ in 0..5 {
        let lease = hg.acquire(&key("u"), &c).await.unwrap();
        drop(lease);
    }
    assert_eq!(c.opened.load(SeqCst), 1);
    let st = &hg.pool_stats()[0];
    assert_eq!((st.idle, st.in_use, st.open), (1, 0, 1));
}

#[tokio::test]
async fn waiters_get_connections_in_order_and_time_out_with_a_precise_message() {
    let hg = hostgroup(&[("a:1", 1)], settings(300, 10));
    let c = Arc::new(FakeConnector::default());
    let held = hg.acquire(&key("u"), &*c).await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..3 {
        let (hg, c, order) = (hg.clone(), c.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let lease = hg.acquire(&key("u"), &*c).await.unwrap();
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

    let _held = hg.acquire(&key("u"), &*c).await.unwrap();
    let err = match hg.acquire(&key("u"), &*c).await {
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

#[tokio::test]
async fn full_queue_fails_at_once() {
    let hg = hostgroup(&[("a:1", 1)], settings(5_000, 1));
    let c = Arc::new(FakeConnector::default());
    let _held = hg.acquire(&key("u"), &*c).await.unwrap();
    let (hg2, c2) = (hg.clone(), c.clone());
    let _waiter = tokio::spawn(async move { hg2.acquire(&key("u"), &*c2).await.map(|_| ()) });
    tokio::time::sleep(Duration::from_millis(20)).await;
    let started = Instant::now();
    let err = hg
        .acquire(&key("u"), &*c)
        .await
        .err()
        .expect("queue is full");
    assert!(matches!(err, AcquireError::QueueFull { .. }), "{err}");
    assert!(started.elapsed() < Duration::from_secs(1));
}

#[tokio::test]
async fn refused_server_is_shunned_and_others_serve() {
    let hg = hostgroup(&[("down:1", 10), ("up:1", 10)], settings(1_000, 10));
    let c = FakeConnector::default();
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

#[tokio::test]
async fn connections_of_another_user_make_room_when_full() {
    let hg = hostgroup(&[("a:1", 1)], settings(1_000, 10));
    let c = FakeConnector::default();
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

#[tokio::test]
async fn discarded_leases_free_their_slot_for_waiters() {
    let hg = hostgroup(&[("a:1", 1)], settings(1_000, 10));
    let c = Arc::new(FakeConnector::default());
    let mut held = hg.acquire(&key("u"), &*c).await.unwrap();
    let (hg2, c2) = (hg.clone(), c.clone());
    let waiter =
        tokio::spawn(async move { hg2.acquire(&key("u"), &*c2).await.map(|l| l.conn_ref().0) });
    tokio::time::sleep(Duration::from_millis(20)).await;
    held.discard();
    drop(held);
    assert_eq!(
        waiter.await.unwrap().unwrap(),
        1,
        "waiter opened a fresh connection"
    );
}

#[tokio::test]
async fn idle_connections_expire() {
    let mut s = settings(1_000, 10);
    s.idle_timeout = Duration::from_millis(10);
    let hg = hostgroup(&[("a:1", 5)], s);
    let c = FakeConnector::default();
    drop(hg.acquire(&key("u"), &c).await.unwrap());
    assert_eq!(hg.close_idle(Instant::now()), 0);
    assert_eq!(hg.close_idle(Instant::now() + Duration::from_millis(50)), 1);
    assert_eq!(hg.pool_stats()[0].open, 0);
}

#[tokio::test]
async fn a_burst_opens_few_connections_at_a_time() {
    let mut s = settings(5_000, 1000);
    s.max_connecting = 2;
    let hg = hostgroup(&[("a:1", 50)], s);
    let c = Arc::new(FakeConnector {
        delay: Duration::from_millis(20),
        ..Default::default()
    });
    let mut tasks = Vec::new();
    for _ in 0..100 {
        let (hg, c) = (hg.clone(), c.clone());
        tasks.push(tokio::spawn(async move {
            let lease = hg.acquire(&key("u"), &*c).await.unwrap();
            tokio::time::sleep(Duration::from_millis(1)).await;
            drop(lease);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert!(
        c.max_in_flight.load(SeqCst) <= 2,
        "at most 2 connects at once"
    );
    let opened = c.opened.load(SeqCst);
    assert!(
        opened < 50,
        "100 short statements opened {opened} connections"
    );
    let st = &hg.pool_stats()[0];
    assert_eq!((st.in_use, st.open as usize), (0, opened));
}

#[tokio::test]
async fn a_grant_to_a_waiter_that_left_comes_back() {
    let hg = hostgroup(&[("a:1", 1)], settings(5_000, 10));
    let c = Arc::new(FakeConnector::default());
    let held = hg.acquire(&key("u"), &*c).await.unwrap();
    let (hg2, c2) = (hg.clone(), c.clone());
    let waiter = tokio::spawn(async move { hg2.acquire(&key("u"), &*c2).await.map(|_| ()) });
    tokio::task::yield_now().await; // the waiter queues
    assert_eq!(hg.waiting(), 1);
    drop(held); // the connection is handed to the waiter...
    waiter.abort(); // ...which leaves before taking it
    let _ = waiter.await;
    let st = &hg.pool_stats()[0];
    assert_eq!((st.idle, st.in_use, st.open), (1, 0, 1), "nothing leaked");
    // And the pool still serves.
    drop(hg.acquire(&key("u"), &*c).await.unwrap());
}

#[tokio::test]
async fn waiters_that_gave_up_do_not_block_later_requests() {
    let hg = hostgroup(&[("a:1", 1)], settings(100, 10));
    let c = FakeConnector::default();
    let held = hg.acquire(&key("u"), &c).await.unwrap();
    assert!(hg.acquire(&key("u"), &c).await.is_err(), "times out");
    drop(held);
    // The connection is idle now; the next request must get it at once.
    let started = Instant::now();
    drop(hg.acquire(&key("u"), &c).await.unwrap());
    assert!(started.elapsed() < Duration::from_millis(50));
}
