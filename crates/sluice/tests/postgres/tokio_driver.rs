//! tokio-postgres, Rust's asynchronous driver, through sluice: it pipelines whatever its
//! futures ask for at once on one connection (each query its own Parse/Bind/Execute/Sync
//! batch, written back to back before any answer), prepares with named statements it closes
//! when they drop, and binds typed unnamed statements (`query_typed`). Each batch is routed
//! on its own: reads on the replica, writes on the primary, in the order the client sent them.

use super::pg::{start, wait_replayed};
use futures_util::future::join_all;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

async fn connect(port: u16) -> Client {
    let dsn = format!("host=127.0.0.1 port={port} user=app password=app dbname=postgres");
    let (client, conn) = tokio_postgres::connect(&dsn, NoTls).await.unwrap();
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            panic!("tokio-postgres connection: {e}");
        }
    });
    client
}

/// Whether the server that ran a one-row, one-boolean query is a replica.
fn on_replica(rows: Result<Vec<tokio_postgres::Row>, tokio_postgres::Error>) -> bool {
    rows.unwrap()[0].get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_batches_are_routed_each_on_its_own() {
    let env = start(1, "").await;
    let c = connect(env.port).await;
    c.batch_execute("CREATE TABLE tp (id serial PRIMARY KEY, v int)")
        .await
        .unwrap();
    wait_replayed(&env.topo).await;
    // Read, write, read, pipelined: three batches in one write, each routed on its own.
    for round in 0..5i32 {
        let p: [&(dyn ToSql + Sync); 1] = [&round];
        let (read, write, again) = tokio::join!(
            c.query("SELECT pg_is_in_recovery()", &[]),
            c.query(
                "INSERT INTO tp (v) VALUES ($1) RETURNING pg_is_in_recovery()",
                &p
            ),
            c.query("SELECT pg_is_in_recovery()", &[]),
        );
        assert_eq!(
            (on_replica(read), on_replica(write), on_replica(again)),
            (true, false, true),
            "round {round}"
        );
    }
    // Typed unnamed statements (Parse "", Bind, Describe portal, Execute, Sync), twenty at
    // once, every third a write.
    let batches = (0..20i32).map(|i| {
        let c = &c;
        async move {
            let sql = if i % 3 == 0 {
                "INSERT INTO tp (v) VALUES ($1) RETURNING pg_is_in_recovery()"
            } else {
                "SELECT pg_is_in_recovery() FROM (SELECT $1::int) AS x"
            };
            (i, on_replica(c.query_typed(sql, &[(&i, Type::INT4)]).await))
        }
    });
    for (i, replica) in join_all(batches).await {
        assert_eq!(replica, i % 3 != 0, "batch {i}");
    }
    // Statements prepared once and executed many times, reads and writes interleaved in
    // one pipeline (each named statement prepared on whichever connection runs it).
    let count = c
        .prepare("SELECT count(*) FROM tp WHERE v >= $1")
        .await
        .unwrap();
    let insert = c.prepare("INSERT INTO tp (v) VALUES ($1)").await.unwrap();
    let batches = (0..10i32).map(|i| {
        let (c, count, insert) = (&c, &count, &insert);
        async move {
            if i % 2 == 0 {
                c.execute(insert, &[&(100 + i)]).await.unwrap() as i64
            } else {
                c.query_one(count, &[&0i32]).await.unwrap().get::<_, i64>(0)
            }
        }
    });
    let done = join_all(batches).await;
    for (i, n) in done.iter().enumerate() {
        if i % 2 == 0 {
            assert_eq!(*n, 1, "insert {i}");
        }
    }
    // Every write is on the primary: 5 + 7 + 5 rows.
    let rows = env.topo.primary().sql("SELECT count(*) FROM tp").unwrap();
    assert_eq!(rows.trim(), "17");
    // A multi-statement simple query with a write runs on the primary, whole.
    let msgs = c
        .simple_query(
            "SELECT pg_is_in_recovery(); INSERT INTO tp (v) VALUES (7) RETURNING pg_is_in_recovery()",
        )
        .await
        .unwrap();
    let values: Vec<&str> = msgs
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => r.get(0),
            _ => None,
        })
        .collect();
    assert_eq!(values, ["f", "f"]);
}

/// A transaction with a portal read a few rows at a time (`bind` + `query_portal`): on one
/// connection, the primary, to its commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_portal_in_a_transaction_is_read_in_pieces_on_one_connection() {
    let env = start(1, "").await;
    let mut c = connect(env.port).await;
    c.batch_execute(
        "CREATE TABLE tq (id int PRIMARY KEY); INSERT INTO tq SELECT generate_series(1, 5)",
    )
    .await
    .unwrap();
    let tx = c.transaction().await.unwrap();
    let st = tx
        .prepare("SELECT id, pg_is_in_recovery() FROM tq ORDER BY id")
        .await
        .unwrap();
    let portal = tx.bind(&st, &[]).await.unwrap();
    let mut seen = Vec::new();
    for _ in 0..3 {
        for row in tx.query_portal(&portal, 2).await.unwrap() {
            assert!(!row.get::<_, bool>(1), "in the transaction: the primary");
            seen.push(row.get::<_, i32>(0));
        }
    }
    assert_eq!(seen, [1, 2, 3, 4, 5]);
    tx.execute("INSERT INTO tq VALUES (6)", &[]).await.unwrap();
    tx.commit().await.unwrap();
    let rows = env.topo.primary().sql("SELECT count(*) FROM tq").unwrap();
    assert_eq!(rows.trim(), "6");
}
