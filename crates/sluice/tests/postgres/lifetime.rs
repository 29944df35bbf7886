//! `[pool] max_lifetime`: a server connection that has served its time is closed at its next
//! lease and replaced, never cut under a session that holds it.

use super::pg::start;
use std::time::{Duration, Instant};
use tokio_postgres::{Client, NoTls};

async fn connect(port: u16) -> Client {
    let dsn = format!("host=127.0.0.1 port={port} user=app password=app dbname=postgres");
    let (client, conn) = tokio_postgres::connect(&dsn, NoTls).await.unwrap();
    tokio::spawn(conn);
    client
}

async fn backend_pid(c: &Client) -> i32 {
    c.query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_past_its_lifetime_is_replaced_at_its_next_lease_but_never_cut() {
    // One connection allowed: its replacement can only open once it is closed.
    let env = start(
        0,
        "\n[pool]\nmax_connections = 1\nqueue_timeout = \"20s\"\nmax_lifetime = \"1s\"\n",
    )
    .await;
    let c = connect(env.port).await;
    c.batch_execute("BEGIN").await.unwrap();
    let first = backend_pid(&c).await;
    // Held by the transaction past its lifetime: it serves the transaction to its end.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        backend_pid(&c).await,
        first,
        "a transaction keeps its connection"
    );
    c.batch_execute("COMMIT").await.unwrap();
    // Lent again, it is found past its lifetime: closed, and a new one serves.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut now = backend_pid(&c).await;
    while now == first && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        now = backend_pid(&c).await;
    }
    assert_ne!(now, first, "replaced once past max_lifetime");
    // Closed by sluice; its server process ends as it reads the end of the stream.
    let left = || {
        env.topo
            .primary()
            .sql(&format!(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = {first}"
            ))
            .unwrap()
            .trim()
            .to_string()
    };
    let mut gone = left();
    while gone != "0" && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        gone = left();
    }
    assert_eq!(gone, "0", "the old connection was closed");
}
