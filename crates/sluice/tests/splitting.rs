//! Read/write splitting through the proxy against a real primary and replicas.

mod common;
use mysql_async::prelude::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_create() {
    let env = common::start(2, "").await;
    let mut c = mysql_async::Conn::new(mysql_async::Opts::from_url(&env.url("test")).unwrap())
        .await
        .unwrap();
    let r = c.query_drop("CREATE TABLE t1 (id INT PRIMARY KEY)").await;
    println!("create: {r:?}");
    let r: Result<Vec<u32>, _> = c.query("SELECT @@server_id").await;
    println!("select: {r:?}");
}
