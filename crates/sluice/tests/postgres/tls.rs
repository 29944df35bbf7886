//! TLS to a client that reads its answers slowly.

use super::pg::raw::Raw;
use super::pg::{certs, start};
use postgres_protocol::message::frontend;
use sluice_runtime::tls::BackendTls;
use std::path::Path;
use std::time::Duration;

/// A client over TLS that reads a large result slowly gets all of it: TLS records of its
/// answer's end that did not fit in the socket at once are sent on, not kept in sluice while
/// it waits for the client's next message (the client waited for its ReadyForQuery forever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_over_tls_gets_all_of_a_large_result() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = certs::signed(dir.path(), "proxy");
    let env = start(
        0,
        &format!("\n[proxy]\ntls_cert = \"{cert}\"\ntls_key = \"{key}\"\n"),
    )
    .await;
    let tls = BackendTls::from_ca_file(Path::new(&ca)).unwrap();
    let mut c = Raw::connect_tls(env.port, "app", "app", "postgres", &tls).await;
    // Answers of growing sizes, each left unread for a while: sluice writes it into its
    // socket to the client until the socket is full (the kernel grows sluice's send buffer
    // to 2-3.5 MB here), and the rest into TLS records kept in rustls (up to 64 KiB). An
    // answer a little larger than the socket holds is written whole, its end in those
    // records: only sending them on brings the client its ReadyForQuery. (The steps are
    // smaller than what rustls keeps; a machine whose socket holds more or less than this
    // range would not show the loss, and the test would pass without the fix.)
    for kib in (1024..=4608).step_by(48) {
        let sql = format!("SELECT repeat('x', {})", kib * 1024);
        frontend::query(&sql, &mut c.out).unwrap();
        c.flush().await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (tags, msgs) = c.round(1).await;
        assert_eq!(tags, "TDCZ", "{kib} KiB: {msgs:?}");
    }
    drop(dir);
}
