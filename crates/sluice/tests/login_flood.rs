//! Connections that never log in cannot keep a real client out: they do not count against
//! `max_client_connections` (nor the SQL admin port's `sql_max_connections`), and they have
//! their own connection-phase budget, which makes room for new connections by closing the one
//! that has been logging in the longest.
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::raw::{connect_from, err_text, Raw};
use std::net::Ipv4Addr;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// Hang guard for anything that should happen at once.
const GUARD: Duration = Duration::from_secs(60);

/// Opens `n` connections to `port` that never send a byte, from source addresses
/// 127.0.0.2 to 127.0.0.5 in turn.
async fn silent(port: u16, n: usize) -> Vec<TcpStream> {
    let mut v = Vec::with_capacity(n);
    for i in 0..n {
        let from = Ipv4Addr::new(127, 0, 0, 2 + (i % 4) as u8);
        v.push(connect_from(from, port).await);
    }
    v
}

/// Runs `sql` with the mariadb CLI on `port` (its own 10 s connect timeout, plus a guard).
async fn cli(port: u16, user: &'static str, password: &'static str, sql: &'static str) -> String {
    let out = tokio::time::timeout(
        GUARD,
        tokio::task::spawn_blocking(move || common::cli_raw(port, user, password, None, sql, &[])),
    )
    .await
    .expect("the mariadb CLI hangs")
    .unwrap();
    assert!(
        out.status.success(),
        "a real login on port {port} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Reads until the server closes `s` (after its greeting); panics if it stays open.
async fn closed_by_server(s: &mut TcpStream, what: &str) {
    let mut buf = [0u8; 1024];
    let end = tokio::time::timeout(GUARD, async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(end.is_ok(), "{what}: still open");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_sockets_never_lock_out_a_real_login() {
    let env = common::start_with(
        0,
        "\n[admin]\nlisten = \"127.0.0.1:0\"\nsql_listen = \"127.0.0.1:0\"\nsql_password = \"adm1n\"\n",
        |t| {
            *t = t.replacen(
                "[proxy]\n",
                "[proxy]\nmax_client_connections = 50\n",
                1,
            )
        },
    )
    .await;
    let admin_port = env.admin_sql_port();
    // More silent sockets than either port's limit (50 clients, 64 admin sessions).
    let _clients = silent(env.port, 300).await;
    let _admins = silent(admin_port, 200).await;
    assert_eq!(cli(env.port, "app", "app", "SELECT 42").await.trim(), "42");
    assert!(cli(admin_port, "admin", "adm1n", "SHOW SERVERS")
        .await
        .contains(&env.topo.primary().addr()));

    // Logged-in clients still count: the limit holds for them.
    let mut logged_in = Vec::new();
    for _ in 0..50 {
        logged_in.push(Raw::login(env.port).await);
    }
    let mut r = Raw::connect(env.port).await;
    let p = r
        .hello(
            "app",
            "app",
            sluice_mysql::wire::consts::NATIVE_PASSWORD,
            common::raw::CLIENT_CAPS,
            None,
        )
        .await;
    assert_eq!(
        err_text(&p),
        Some((1040, "Too many connections".to_string()))
    );
    drop(logged_in);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_connection_phase_budget_closes_the_oldest() {
    // A long handshake timeout: a silent socket closed within the guard was evicted.
    let env = common::start(
        0,
        "\n[login]\nmax_connecting = 16\nhandshake_timeout = \"5m\"\n\n[admin]\nlisten = \"127.0.0.1:0\"\nsql_listen = \"127.0.0.1:0\"\nsql_password = \"adm1n\"\nsql_max_connections = 2\n",
    )
    .await;
    let admin_port = env.admin_sql_port();
    let mut clients = silent(env.port, 100).await;
    let mut admins = silent(admin_port, 40).await;
    closed_by_server(&mut clients[0], "the oldest silent client").await;
    closed_by_server(&mut admins[0], "the oldest silent admin client").await;
    assert_eq!(cli(env.port, "app", "app", "SELECT 7").await.trim(), "7");
    assert!(!cli(admin_port, "admin", "adm1n", "SHOW POOLS")
        .await
        .is_empty());
    // The newest silent sockets are still waiting for their turn to log in.
    let mut last = clients.pop().unwrap();
    let mut buf = [0u8; 256];
    let greeting = tokio::time::timeout(GUARD, last.read(&mut buf)).await;
    assert!(matches!(greeting, Ok(Ok(n)) if n > 0), "greeted");
    let still_open = tokio::time::timeout(Duration::from_millis(200), last.read(&mut buf)).await;
    assert!(still_open.is_err(), "the newest silent socket stays open");
}
