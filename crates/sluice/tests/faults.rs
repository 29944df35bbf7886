//! A dead, lying or hanging server hurts no one else: a server that sends garbage is named as
//! such (not taken for a slow one), a result cut in the middle ends with an error packet, and
//! a server that stops sending mid-result is given up after `[pool] read_timeout`. Hostile
//! servers are a relay in front of a real MariaDB server that misbehaves on command, or a
//! listener that answers with garbage.
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::fault::{garbage_server, lying_server, Fault, FaultRelay};
use common::raw::{err_text, Raw, CLIENT_CAPS};
use mysql_async::prelude::*;
use mysql_async::{Conn, Opts};
use sluice_mysql::wire::consts::NATIVE_PASSWORD;
use sluice_mysql::MysqlFrontend as Proxy;
use sluice_runtime::Running;
use sluice_testkit::Topology;
use std::sync::Arc;
use std::time::Duration;

/// Generous: only guards against a hang.
const HANG: Duration = Duration::from_secs(60);

const HTTP: &[u8] = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";

/// One real server, reached through a fault relay, behind sluice (no monitor: faults are
/// injected on purpose and the monitor's own connection would see them).
struct Setup {
    topo: Topology,
    relay: FaultRelay,
    proxy: Arc<Proxy>,
    _running: Running,
    port: u16,
    /// The configuration it runs.
    text: String,
}

async fn setup(extra: &str) -> Setup {
    let topo = common::one_primary().await;
    let relay = FaultRelay::start(topo.primary().addr()).await;
    let text = format!(
        "[proxy]\nlisten = \"127.0.0.1:0\"\n[monitor]\nenabled = false\n[[users]]\nname = \"app\"\npassword = \"app\"\n[[servers]]\naddress = \"{}\"\nhostgroup = \"writer\"\n{extra}",
        relay.addr()
    );
    let (proxy, running) = common::start_proxy(&text).await;
    let port = running.addrs[0].port();
    Setup {
        topo,
        relay,
        proxy,
        _running: running,
        port,
        text,
    }
}

async fn conn(port: u16) -> Conn {
    let url = format!("mysql://app:app@127.0.0.1:{port}/test?prefer_socket=false");
    Conn::new(Opts::from_url(&url).unwrap())
        .await
        .expect("connect through sluice")
}

/// Logs in naming no schema (which needs no server) and runs `SELECT 1`: the error it gets.
async fn first_statement_error(port: u16) -> (u16, String) {
    let mut r = Raw::connect(port).await;
    let ok = r
        .hello("app", "app", NATIVE_PASSWORD, CLIENT_CAPS, None)
        .await;
    assert_eq!(ok.payload[0], 0, "logged in");
    r.send(0, b"\x03SELECT 1").await;
    let p = tokio::time::timeout(HANG, r.recv())
        .await
        .expect("an answer, not a wait for the connect timeout")
        .unwrap();
    err_text(&p).expect("an error packet")
}

/// Reads a result row by row: rows received, and how it ended.
async fn stream_rows(c: &mut Conn, sql: &str) -> (usize, Result<(), mysql_async::Error>) {
    let run = async {
        let mut rows = 0;
        let mut q = match c.query_iter(sql).await {
            Ok(q) => q,
            Err(e) => return (rows, Err(e)),
        };
        loop {
            match q.next().await {
                Ok(Some(_)) => rows += 1,
                Ok(None) => return (rows, Ok(())),
                Err(e) => return (rows, Err(e)),
            }
        }
    };
    tokio::time::timeout(HANG, run)
        .await
        .expect("the statement must end, not hang")
}

/// The server error `r` must be (code, SQLSTATE), and its message.
fn server_error(r: Result<(), mysql_async::Error>, code: u16, state: &str) -> String {
    match r {
        Err(mysql_async::Error::Server(e)) => {
            assert_eq!((e.code, e.state.as_str()), (code, state), "{e:?}");
            e.message
        }
        other => panic!("expected server error {code}, got {other:?}"),
    }
}

/// A "server" that answers with an HTTP error instead of a greeting is reported as what it
/// is — to the client, in the pool's reason for shunning it, and by the monitor — not as a
/// server that does not answer within the connect timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_instead_of_a_greeting_is_named_not_taken_for_a_timeout() {
    common::init_tracing();
    let (port, _server) = garbage_server(HTTP).await;
    let config = |monitor: &str| {
        format!(
            "[proxy]\nlisten = \"127.0.0.1:0\"\n[pool]\nconnect_timeout = \"20s\"\n[monitor]\n{monitor}\n[[users]]\nname = \"app\"\npassword = \"app\"\n[[servers]]\naddress = \"127.0.0.1:{port}\"\nhostgroup = \"writer\"\n"
        )
    };
    let expected = format!("127.0.0.1:{port}: malformed greeting");

    // A statement: the pool tries to connect.
    let (_proxy, running) =
        tokio::time::timeout(HANG, common::start_proxy(&config("enabled = false")))
            .await
            .expect("starts");
    let (code, msg) = first_statement_error(running.addrs[0].port()).await;
    assert_eq!(code, 9001, "{msg}");
    assert!(
        msg.contains(&expected)
            && msg.contains("protocol version 47")
            && msg.contains("\"HTTP/1.1 400 Bad"),
        "{msg}"
    );
    assert!(!msg.contains("within"), "{msg}");

    // The monitor's check says the same.
    let (proxy, _running) = tokio::time::timeout(
        HANG,
        common::start_proxy(&config("timeout = \"20s\"\ninterval = \"100ms\"")),
    )
    .await
    .expect("starts");
    let server = proxy.topology.all()[0].clone();
    // Taken out of service after `[monitor] failure_threshold` failed checks.
    common::wait_for("the monitor's verdict", HANG, || {
        server.monitor_block().is_some()
    })
    .await;
    let seen = server.observed().error.unwrap_or_default();
    assert!(seen.contains(&expected), "{seen}");
    let block = server.monitor_block().unwrap_or_default();
    assert!(block.contains(&expected), "{block}");
}

/// A server that sends a real greeting and then garbage in place of the answer to the login:
/// the reason it is shunned, which the client sees, says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_during_the_login_exchange_is_named_not_taken_for_a_timeout() {
    let topo = common::one_primary().await;
    let (port, _server) = lying_server(topo.primary().addr(), HTTP).await;
    let text = format!(
        "[proxy]\nlisten = \"127.0.0.1:0\"\n[pool]\nconnect_timeout = \"20s\"\n[monitor]\nenabled = false\n[[users]]\nname = \"app\"\npassword = \"app\"\n[[servers]]\naddress = \"127.0.0.1:{port}\"\nhostgroup = \"writer\"\n"
    );
    let (_proxy, running) = tokio::time::timeout(HANG, common::start_proxy(&text))
        .await
        .expect("starts");
    let (code, msg) = first_statement_error(running.addrs[0].port()).await;
    assert_eq!(code, 9001, "{msg}");
    assert!(
        msg.contains(&format!(
            "127.0.0.1:{port}: during login, the server sent a malformed packet: sequence id 80 where 2 was expected"
        )) && msg.contains("\"HTTP/1.1 400 Bad"),
        "{msg}"
    );
}

/// A server that answers a statement with garbage: the client gets an error naming the
/// server and what was wrong, at once (not after waiting for the megabytes the garbage's
/// length field claims); its session goes on on a new connection. A read that saw nothing
/// yet is retried on another connection and succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_instead_of_a_response_is_named_and_only_that_statement_fails() {
    let s = setup("").await;
    let mut c = conn(s.port).await;
    c.query_drop("CREATE TABLE g (id INT PRIMARY KEY)")
        .await
        .unwrap();
    s.relay.arm(Fault::Garbage(HTTP.to_vec()));
    let r = tokio::time::timeout(HANG, c.query_drop("INSERT INTO g VALUES (1)"))
        .await
        .expect("the statement must end, not wait for the garbage's length");
    let msg = server_error(r, 1053, "08S01");
    assert!(s.relay.fired());
    assert!(
        msg.contains(&format!(
            "backend {} sent a malformed response",
            s.relay.addr()
        )) && msg.contains("sequence id 80 where 1 was expected")
            && msg.contains("its outcome is unknown"),
        "{msg}"
    );
    // The same session goes on.
    c.query_drop("INSERT INTO g VALUES (2)").await.unwrap();
    s.relay.arm(Fault::Garbage(HTTP.to_vec()));
    let n: u32 = tokio::time::timeout(HANG, c.query_first("SELECT COUNT(*) FROM g"))
        .await
        .expect("no hang")
        .expect("a read is retried on a good connection")
        .unwrap();
    assert!(s.relay.fired());
    assert!(n >= 1);
}

/// The backend connection breaks after part of a result reached the client: the client gets
/// an error packet in place of the next row (1053, "the result is incomplete"), not a closed
/// connection; then the session follows the policy of docs/sessions.md: it goes on when it
/// lost no state, its transaction is reported rolled back (1213) and it goes on outside it,
/// and it is disconnected after the error when it lost a temporary table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_cut_in_the_middle_ends_with_an_error_packet() {
    let s = setup("").await;
    let big = "SELECT seq, REPEAT('x', 1000) FROM seq_1_to_5000";
    // Cut at a byte offset that falls inside a row.
    let cut = Fault::CutAfter(300_007);

    let mut c = conn(s.port).await;
    s.relay.arm(cut.clone());
    let (rows, r) = stream_rows(&mut c, big).await;
    let msg = server_error(r, 1053, "08S01");
    assert!(rows > 100 && rows < 5000, "{rows} rows before the error");
    assert!(
        msg.contains(&format!("lost connection to backend {}", s.relay.addr()))
            && msg.contains("in the middle of the result")
            && msg.contains("the result is incomplete"),
        "{msg}"
    );
    let one: u32 = c.query_first("SELECT 1").await.unwrap().unwrap();
    assert_eq!(one, 1, "the session goes on");

    // The binary protocol, likewise.
    s.relay.arm(cut.clone());
    let run = async {
        let mut rows = 0;
        let mut q = c
            .exec_iter(
                "SELECT seq, REPEAT('y', 1000) FROM seq_1_to_5000 WHERE seq > ?",
                (0,),
            )
            .await?;
        while q.next().await?.is_some() {
            rows += 1;
        }
        Ok::<usize, mysql_async::Error>(rows)
    };
    let r = tokio::time::timeout(HANG, run).await.expect("no hang");
    let msg = server_error(r.map(|_| ()), 1053, "08S01");
    assert!(msg.contains("the result is incomplete"), "{msg}");
    let one: u32 = c.query_first("SELECT 1").await.unwrap().unwrap();
    assert_eq!(one, 1);

    // Inside a transaction: it is over, and the client is told to restart it.
    c.query_drop("CREATE TABLE t (id INT PRIMARY KEY)")
        .await
        .unwrap();
    c.query_drop("BEGIN").await.unwrap();
    c.query_drop("INSERT INTO t VALUES (1)").await.unwrap();
    s.relay.arm(cut.clone());
    let (_, r) = stream_rows(&mut c, big).await;
    let msg = server_error(r, 1213, "40001");
    assert!(
        msg.contains("transaction was rolled back") && msg.contains("incomplete"),
        "{msg}"
    );
    let in_trx: u32 = c
        .query_first("SELECT @@in_transaction")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(in_trx, 0);
    let rows = s.topo.primary().sql("SELECT COUNT(*) FROM test.t").unwrap();
    assert_eq!(rows.trim(), "0", "the transaction was rolled back");

    // A temporary table lived on the lost connection: error, then disconnected.
    c.query_drop("CREATE TEMPORARY TABLE tmp (a INT)")
        .await
        .unwrap();
    s.relay.arm(cut.clone());
    let (_, r) = stream_rows(&mut c, big).await;
    let msg = server_error(r, 1053, "08S01");
    assert!(msg.contains("incomplete"), "{msg}");
    assert!(
        c.query_drop("SELECT 1").await.is_err(),
        "disconnected after losing its temporary table"
    );

    // The mariadb CLI (libmariadb) reports the error as sent, not as a malformed packet or
    // a lost connection.
    s.relay.arm(cut);
    let port = s.port;
    let out = tokio::task::spawn_blocking(move || {
        common::cli_raw(port, "app", "app", Some("test"), big, &[])
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("ERROR 1053 (08S01)") && stderr.contains("the result is incomplete"),
        "{stderr}"
    );
}

/// A connection lost under a statement takes the idle connections to its server with it:
/// when a server dies its connections end one by one as its process is torn down, and one
/// still open when lent would fail the next statement with an unknown outcome. Here one
/// connection is cut; the two idle ones sluice held to that server are closed, and the next
/// statement gets a fresh connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_connection_takes_its_servers_idle_ones_with_it() {
    let s = setup("").await;
    // (Counted on the server: sluice gives each client an id of its own.)
    let backends = || {
        s.topo
            .primary()
            .sql("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = 'app'")
            .unwrap()
            .trim()
            .to_string()
    };
    let mut holders = Vec::new();
    for _ in 0..2 {
        let mut h = conn(s.port).await;
        h.query_drop("BEGIN").await.unwrap();
        h.query_drop("SELECT 1").await.unwrap();
        holders.push(h);
    }
    let mut c = conn(s.port).await;
    c.query_drop("BEGIN").await.unwrap();
    c.query_drop("SELECT 1").await.unwrap();
    for h in &mut holders {
        h.query_drop("COMMIT").await.unwrap();
    }
    assert_eq!(backends(), "3", "two idle, one in a transaction");
    s.relay.arm(Fault::CutAfter(300_007));
    let (_, r) = stream_rows(&mut c, "SELECT seq, REPEAT('x', 1000) FROM seq_1_to_5000").await;
    server_error(r, 1213, "40001");
    let deadline = std::time::Instant::now() + HANG;
    while backends() != "0" {
        assert!(
            std::time::Instant::now() < deadline,
            "the idle connections were not closed: {} left",
            backends()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let one: u32 = holders[0].query_first("SELECT 1").await.unwrap().unwrap();
    assert_eq!(one, 1, "served by a fresh connection");
    assert_eq!(backends(), "1");
}

/// A server that stops sending in the middle of a result (SIGSTOP) is given up after
/// `[pool] read_timeout`: the client gets an error naming the server and the timeout, and its
/// session goes on once the server is back. A statement that is only slow — silent for less
/// than the timeout — is not affected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_silent_mid_result_is_given_up_after_read_timeout() {
    let s = setup("[pool]\nread_timeout = \"4s\"\n").await;
    let mut c = conn(s.port).await;
    let slept: u32 = c.query_first("SELECT SLEEP(1)").await.unwrap().unwrap();
    assert_eq!(slept, 0, "a slow statement within the timeout succeeds");

    // Rows of 10 kB, one every 200 ms: the server sends the result as it goes.
    let mut q = c
        .query_iter("SELECT seq, REPEAT('z', 10000), SLEEP(0.2) FROM seq_1_to_100")
        .await
        .unwrap();
    assert!(q.next().await.unwrap().is_some(), "the first row arrives");
    let server = s.topo.primary();
    server.pause().unwrap();
    let rest = async {
        let mut rows = 1;
        loop {
            match q.next().await {
                Ok(Some(_)) => rows += 1,
                Ok(None) => return (rows, Ok(())),
                Err(e) => return (rows, Err(e)),
            }
        }
    };
    let (rows, r) = tokio::time::timeout(HANG, rest)
        .await
        .expect("a hung server must not leave the client waiting forever");
    drop(q);
    server.resume().unwrap();
    assert!(rows < 100, "{rows}");
    let msg = server_error(r, 1053, "08S01");
    assert!(
        msg.contains(&format!(
            "backend {} sent nothing for 4s ([pool] read_timeout)",
            s.relay.addr()
        )) && msg.contains("the result is incomplete"),
        "{msg}"
    );
    let one: u32 = c.query_first("SELECT 1").await.unwrap().unwrap();
    assert_eq!(one, 1, "the session goes on");
}

/// Both settings are applied by a reload, `read_timeout` to connections already open too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_timeout_and_request_memory_are_reloaded() {
    let s = setup("").await;
    let mut c = conn(s.port).await;
    c.query_drop("DO 1").await.unwrap(); // a pooled connection now exists
    let text = format!(
        "{}[pool]\nread_timeout = \"1s\"\n",
        s.text
            .replace("[proxy]\n", "[proxy]\nmax_request_memory = 134217728\n")
    );
    let changes = s
        ._running
        .process
        .reload(sluice_config::Config::from_toml(&text).unwrap())
        .await
        .expect("applied without a restart");
    assert!(
        changes.iter().any(|c| c == "[pool] read_timeout 1s")
            && changes
                .iter()
                .any(|c| c == "[proxy] max_request_memory 134217728"),
        "{changes:?}"
    );
    assert_eq!(s.proxy.rt.request_memory.limit(), 134217728);
    let r = tokio::time::timeout(HANG, c.query_drop("SELECT SLEEP(3)"))
        .await
        .expect("no hang");
    let msg = server_error(r, 1053, "08S01");
    assert!(msg.contains("sent nothing for 1s"), "{msg}");
}

/// A `KILL QUERY` that reaches the server only after its statement ended must not kill the
/// statement another session runs next on the same backend connection: the connection is not
/// lent again while the KILL is under way. (The relay opens every connection 1.5 s late, the
/// KILL's own among them, well within the connect timeout; the pool has one connection, so
/// the next session would be lent it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_kill_query_never_reaches_another_sessions_statement() {
    let topo = common::one_primary().await;
    let relay = FaultRelay::slow(topo.primary().addr(), Duration::from_millis(1500)).await;
    let text = format!(
        "[proxy]\nlisten = \"127.0.0.1:0\"\n[pool]\nmax_connections = 1\nqueue_timeout = \"60s\"\nconnect_timeout = \"30s\"\n[monitor]\nenabled = false\n[[users]]\nname = \"app\"\npassword = \"app\"\n[[servers]]\naddress = \"{}\"\nhostgroup = \"writer\"\n",
        relay.addr()
    );
    let (_proxy, running) = common::start_proxy(&text).await;
    let port = running.addrs[0].port();
    let (mut a, mut b, mut killer) = (conn(port).await, conn(port).await, conn(port).await);
    a.query_drop("SELECT 1").await.unwrap();
    let a_id = a.id();
    // A's own statement may be the one the KILL reaches, on a machine slow enough: either
    // outcome is right for A.
    let sleeper = tokio::spawn(async move {
        let _: Result<Option<u32>, _> = a.query_first("SELECT SLEEP(0.5)").await;
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let kill = tokio::spawn(async move { killer.query_drop(format!("KILL QUERY {a_id}")).await });
    sleeper.await.unwrap();
    // B's statement runs while A's KILL is still on its way.
    let slept: Result<Option<u32>, _> = b.query_first("SELECT SLEEP(2.5)").await;
    assert_eq!(slept.unwrap(), Some(0), "B's SLEEP was interrupted");
    kill.await.unwrap().unwrap();
    drop(relay);
}
