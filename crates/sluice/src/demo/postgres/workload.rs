//! The `--postgres` demo's workload: 8 clients of sluice (tokio-postgres, which prepares
//! every statement: the extended protocol, named statements) sending transfers in
//! transactions, single writes and reads.

use super::wait_replayed;
use sluice_testkit::PgTopology;

/// Creates and fills `demo_accounts`, then 8 clients each run 60 rounds: a transfer in a
/// transaction, a write and a read, or two reads.
pub async fn run(port: u16, topo: &PgTopology) -> Result<(), String> {
    let c = connect(port).await.map_err(pg_error)?;
    c.batch_execute(
        "CREATE TABLE IF NOT EXISTS demo_accounts (id int PRIMARY KEY, balance int NOT NULL, updated timestamptz NOT NULL DEFAULT now());
         INSERT INTO demo_accounts (id, balance) SELECT g, 1000 FROM generate_series(1, 100) g ON CONFLICT DO NOTHING",
    )
    .await
    .map_err(pg_error)?;
    drop(c);
    // The replicas have the table before anyone reads it there.
    tokio::task::block_in_place(|| wait_replayed(topo))?;
    let mut tasks = Vec::new();
    for w in 0..8i32 {
        tasks.push(tokio::spawn(async move {
            let mut c = connect(port).await.map_err(pg_error)?;
            let balance = "SELECT balance FROM demo_accounts WHERE id = $1";
            for i in 0..60i32 {
                let x = (w * 31 + i * 7) % 100 + 1;
                let y = (w * 17 + i * 13) % 100 + 1;
                // Lock rows in id order so concurrent transfers cannot deadlock.
                let (a, b) = (x.min(y), x.max(y));
                match i % 3 {
                    0 => {
                        let tx = c.transaction().await.map_err(pg_error)?;
                        let update =
                            "UPDATE demo_accounts SET balance = balance + $2 WHERE id = $1";
                        tx.execute(update, &[&a, &-1]).await.map_err(pg_error)?;
                        tx.execute(update, &[&b, &1]).await.map_err(pg_error)?;
                        tx.query_one("SELECT sum(balance)::int FROM demo_accounts", &[])
                            .await
                            .map_err(pg_error)?;
                        tx.commit().await.map_err(pg_error)?;
                    }
                    1 => {
                        c.execute(
                            "UPDATE demo_accounts SET updated = now() WHERE id = $1",
                            &[&a],
                        )
                        .await
                        .map_err(pg_error)?;
                        c.query_one(balance, &[&b]).await.map_err(pg_error)?;
                    }
                    _ => {
                        c.query_one(balance, &[&a]).await.map_err(pg_error)?;
                        c.query_one(balance, &[&b]).await.map_err(pg_error)?;
                    }
                }
            }
            Ok::<_, String>(())
        }));
    }
    for t in tasks {
        t.await.map_err(|e| e.to_string())??;
    }
    Ok(())
}

/// A client of sluice as `app`.
async fn connect(port: u16) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(
        &format!(
            "host=127.0.0.1 port={port} user=app password=app dbname=postgres connect_timeout=10"
        ),
        tokio_postgres::NoTls,
    )
    .await?;
    tokio::spawn(connection);
    Ok(client)
}

/// A client error with the server's message, when there is one.
fn pg_error(e: tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => db.to_string(),
        None => e.to_string(),
    }
}
