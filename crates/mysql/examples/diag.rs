//! Does COM_PING clear the diagnostics area? (a probe for the proxy's error handling)
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]
use sluice_mysql::backend::stmt_cache::StmtCache;
use sluice_mysql::backend::BackendConn;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut c = BackendConn::connect(
        &args[0],
        &args[1],
        &args[2],
        0,
        StmtCache::new(16, Default::default()),
    )
    .await
    .expect("connect");
    let e = c.exec("SELECT * FROM no_such_db.no_such_table").await;
    println!("error: {e:?}");
    let st = c.ping().await.unwrap();
    println!("ping status {st:#x}");
    println!(
        "warnings after ping: {:?}",
        c.query_rows("SHOW WARNINGS").await
    );
    let _ = c.exec("SELECT CAST('x1' AS SIGNED)").await;
    println!(
        "warnings after cast: {:?}",
        c.query_rows("SHOW WARNINGS").await
    );
}
