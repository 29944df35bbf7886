//! Connections lent by a member that has left its hostgroup: a server the monitor takes out
//! and puts back, or one removed and added anew, while sessions hold its connections.

use super::*;

#[tokio::test(start_paused = true)]
async fn a_connection_lent_before_its_server_left_and_came_back_is_counted_and_closed() {
    // The monitor takes a server out of a hostgroup and puts the same server back (a primary
    // switched over and back, a replica fenced and restored) while a session holds one of
    // its connections.
    let hg = hostgroup(&[("a:1", 2)], settings(1_000, 10));
    let c = Arc::new(FakeConnector::default());
    let server = hg.servers()[0].clone();
    let held = hg.acquire(&key("u"), &c).await.unwrap();
    hg.remove_server(&server);
    hg.add_server(server.clone());
    let st = &hg.pool_stats()[0];
    assert_eq!(
        (st.idle, st.in_use, st.open),
        (0, 1, 1),
        "still open, out there"
    );
    // The limit counts it: one more may open, not two.
    let second = hg.acquire(&key("u"), &c).await.unwrap();
    assert!(hg.acquire(&key("u"), &c).await.is_err(), "at the limit");
    assert_eq!(c.opened.load(SeqCst), 2);
    // It comes back to a pool it was not lent from: closed, and no longer counted.
    drop(held);
    let st = &hg.pool_stats()[0];
    assert_eq!((st.idle, st.in_use, st.open), (0, 1, 1));
    drop(second);
    let st = &hg.pool_stats()[0];
    assert_eq!((st.idle, st.in_use, st.open), (1, 0, 1));
    // A discarded one (its session ended) is counted off the same way.
    let held = hg.acquire(&key("u"), &c).await.unwrap();
    hg.remove_server(&server);
    hg.add_server(server.clone());
    let mut held = held;
    held.discard();
    drop(held);
    let st = &hg.pool_stats()[0];
    assert_eq!((st.idle, st.in_use, st.open), (0, 0, 0));
    drop(hg.acquire(&key("u"), &c).await.unwrap());
    let st = &hg.pool_stats()[0];
    assert_eq!((st.idle, st.in_use, st.open), (1, 0, 1));
}

#[tokio::test(start_paused = true)]
async fn a_server_removed_and_added_anew_counts_the_connections_still_lent() {
    // The admin API or a reload removes a server and adds it again: a new entry for the same
    // address, while sessions still hold connections of the old one.
    let hg = hostgroup(&[("a:1", 2)], settings(1_000, 10));
    let c = Arc::new(FakeConnector::default());
    let old = hg.servers()[0].clone();
    let a = hg.acquire(&key("u"), &c).await.unwrap();
    let b = hg.acquire(&key("u"), &c).await.unwrap();
    hg.remove_server(&old);
    hg.add_server(Arc::new(Server::new("a:1", "hg", 1, 2)));
    let st = &hg.pool_stats()[0];
    assert_eq!((st.idle, st.in_use, st.open), (0, 2, 2));
    assert!(hg.acquire(&key("u"), &c).await.is_err(), "both still count");
    drop(a);
    let st = &hg.pool_stats()[0];
    assert_eq!(st.open, 1, "one came back and closed");
    let fresh = hg.acquire(&key("u"), &c).await.unwrap();
    assert!(Arc::ptr_eq(fresh.server(), &hg.servers()[0]));
    drop(b);
    drop(fresh);
    let st = &hg.pool_stats()[0];
    assert_eq!((st.idle, st.in_use, st.open), (1, 0, 1));
    assert_eq!(c.opened.load(SeqCst), 3);
}

#[tokio::test(start_paused = true)]
async fn a_connect_under_way_when_its_server_left_and_came_back_is_counted_until_it_ends() {
    let hg = hostgroup(&[("a:1", 1)], settings(60_000, 10));
    let c = Arc::new(FakeConnector {
        delay: Duration::from_millis(100),
        ..Default::default()
    });
    let server = hg.servers()[0].clone();
    let (hg2, c2) = (hg.clone(), c.clone());
    let waiter =
        tokio::spawn(async move { hg2.acquire(&key("u"), &c2).await.map(|l| l.conn_ref().0) });
    tokio::time::sleep(Duration::from_millis(10)).await;
    hg.remove_server(&server);
    hg.add_server(server.clone());
    // The connect under way fills the limit of 1: no second one starts meanwhile.
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(
        (c.in_flight.load(SeqCst), c.max_in_flight.load(SeqCst)),
        (1, 1)
    );
    // It ends for a member that left: closed; then the waiter gets a connection of its own.
    assert_eq!(waiter.await.unwrap().unwrap(), 1);
    let st = &hg.pool_stats()[0];
    assert_eq!((st.idle, st.in_use, st.open), (1, 0, 1));
    assert_eq!(c.opened.load(SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn a_connection_lost_after_its_member_left_takes_the_idle_ones_to_its_address_along() {
    let hg = hostgroup(&[("a:1", 4)], settings(1_000, 10));
    let c = Arc::new(FakeConnector::default());
    let old = hg.servers()[0].clone();
    let mut held = hg.acquire(&key("u"), &c).await.unwrap();
    hg.remove_server(&old);
    hg.add_server(Arc::new(Server::new("a:1", "hg", 1, 4)));
    drop(hg.acquire(&key("u"), &c).await.unwrap());
    let st = &hg.pool_stats()[0];
    assert_eq!((st.idle, st.in_use, st.open), (1, 1, 2));
    // Its server closed it under a statement: the server's idle connections are suspect too.
    held.lost();
    drop(held);
    let st = &hg.pool_stats()[0];
    assert_eq!((st.idle, st.in_use, st.open), (0, 0, 0));
}
