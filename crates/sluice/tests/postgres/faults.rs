//! What a broken or departing client leaves behind: nothing another session sees.

use super::pg::raw::{self, Raw};
use super::pg::{config, start, start_with};
use postgres_protocol::message::frontend;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A client that runs an INSERT through the extended protocol, ends the batch with a Flush
/// instead of a Sync (the server answers, the implicit transaction stays open) and leaves
/// had its INSERT rolled back by its departure, as with PostgreSQL directly: its connection
/// is closed, not lent to the next client, whose own statement would commit it. And a
/// client that sends a message type no client sends gets PostgreSQL's FATAL from sluice,
/// after the answers to what came before it; no server connection is spent on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_departing_or_broken_client_leaves_nothing_behind() {
    // One connection per server: the next client would be lent the very same one.
    let env = start(
        1,
        "\n[pool]\nmax_connections = 1\nqueue_timeout = \"60s\"\n",
    )
    .await;
    env.psql("CREATE TABLE abandoned (id int)");

    let mut a = Raw::connect(env.port, "app", "app", "postgres").await;
    a.extended("", Some("INSERT INTO abandoned VALUES (1)"), &[]);
    frontend::flush(&mut a.out);
    a.flush().await;
    let mut answered = String::new();
    for _ in 0..3 {
        answered.push(a.next().await.tag as char);
    }
    assert_eq!(
        answered, "12C",
        "ParseComplete, BindComplete, CommandComplete"
    );
    drop(a);
    // The next write waits for the writer's one connection (or a new one).
    env.psql("INSERT INTO abandoned VALUES (2)");
    let rows = env
        .topo
        .primary()
        .sql("SELECT string_agg(id::text, ',' ORDER BY id) FROM abandoned")
        .unwrap();
    assert_eq!(
        rows.trim(),
        "2",
        "the departed client's INSERT was committed"
    );

    // A message type no client sends ('Z'), after a query in the same write.
    let pids = || {
        (
            env.psql("SELECT pg_backend_pid()"),
            env.psql("INSERT INTO abandoned VALUES (3) RETURNING pg_backend_pid()"),
        )
    };
    let before = pids();
    let mut c = Raw::connect(env.port, "app", "app", "postgres").await;
    frontend::query("SELECT 1", &mut c.out).unwrap();
    c.out.extend_from_slice(b"Z\0\0\0\x04");
    c.flush().await;
    let answer: String = c
        .until_ready()
        .await
        .iter()
        .map(|m| m.tag as char)
        .collect();
    assert_eq!(answer, "TDCZ");
    assert_eq!(
        c.try_next().await.unwrap_err(),
        "08P01 invalid frontend message type 90"
    );
    // The same with 16 MiB after it, more than the sockets' buffers hold: sluice reads what
    // the client still sends until it leaves, so the client's write goes through and it
    // reads the FATAL (a socket closed with bytes unread would be reset, the FATAL lost).
    let mut c = Raw::connect(env.port, "app", "app", "postgres").await;
    let mut rest = b"Z\0\0\0\x04".to_vec();
    rest.resize(rest.len() + (16 << 20), 0);
    c.try_send_raw(&rest).await.unwrap();
    assert_eq!(
        c.try_next().await.unwrap_err(),
        "08P01 invalid frontend message type 90"
    );
    // Both servers' one connection is the one they had.
    assert_eq!(pids(), before);
}

/// A relay to `target` that holds every connection opening with a CancelRequest back for
/// `delay` (a cancel that takes long to reach the server: a slow network, a TLS handshake).
fn cancel_delaying_relay(target: String, delay: Duration) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let target = target.clone();
            tokio::spawn(async move {
                let mut head = [0u8; 8];
                if client.read_exact(&mut head).await.is_err() {
                    return;
                }
                if head[4..] == 80_877_102u32.to_be_bytes() {
                    tokio::time::sleep(delay).await;
                }
                let Ok(mut server) = TcpStream::connect(&target).await else {
                    return;
                };
                if server.write_all(&head).await.is_ok() {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                }
            });
        }
    });
    addr
}

/// A cancel request that reaches the server only after its statement ended must not cancel
/// the statement another session runs next on the same server connection (PgBouncer's
/// cancel race): the connection is not lent again while a cancel for it is under way, and a
/// cancel for a lease that is over is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_cancel_never_reaches_another_sessions_statement() {
    let env = start_with(0, |topo| {
        let primary = topo.primary().addr();
        let relay = cancel_delaying_relay(primary.clone(), Duration::from_millis(1500));
        // One connection: the next session would be lent the very same one.
        config(
            topo,
            "\n[pool]\nmax_connections = 1\nqueue_timeout = \"60s\"\n",
        )
        .replace(&primary, &relay)
    })
    .await;
    let mut a = Raw::connect(env.port, "app", "app", "postgres").await;
    frontend::query("SELECT pg_sleep(0.5)", &mut a.out).unwrap();
    a.flush().await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Held back by the relay for 1.5 s: it reaches the server after A's statement ended.
    let cancel = tokio::spawn(raw::cancel(env.port, a.key));
    a.until_ready().await;
    // B's statement runs while A's cancel is still on its way.
    let mut b = Raw::connect(env.port, "app", "app", "postgres").await;
    let answer = b.try_simple("SELECT pg_sleep(2.5)").await;
    assert!(answer.is_ok(), "{answer:?}");
    cancel.await.unwrap();
}

/// `set_config(name, value, false)` sets the parameter for the rest of the session on its
/// server connection, and PostgreSQL reports most parameters to no one: with a name the
/// scanner cannot read (an expression; a literal name is read back, see `parameters`), the
/// session keeps that connection (pinned, saying why), and when it leaves, the connection is
/// closed rather than lent to a client that would inherit the setting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setting_made_with_set_config_never_reaches_another_client() {
    // One connection: the next client would be lent the very same one.
    let env = start(
        0,
        "\n[pool]\nmax_connections = 1\nqueue_timeout = \"60s\"\n",
    )
    .await;
    let mut a = Raw::connect(env.port, "app", "app", "postgres").await;
    a.try_simple("SELECT set_config(lower('STATEMENT_TIMEOUT'), '1234', false)")
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !env
        .process
        .runtime
        .sessions
        .all()
        .iter()
        .any(|s| s.pin_reasons() == vec!["set_config(..., false)"])
    {
        assert!(std::time::Instant::now() < deadline, "no pinned session");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let shown = a.try_simple("SHOW statement_timeout").await.unwrap();
    assert_eq!(Raw::column(&shown), ["1234ms"]);
    // B waits for the one connection while A holds it, and gets a fresh one when A leaves.
    let port = env.port;
    let b = tokio::spawn(async move {
        let mut b = Raw::connect(port, "app", "app", "postgres").await;
        Raw::column(&b.try_simple("SHOW statement_timeout").await.unwrap())
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(a);
    assert_eq!(b.await.unwrap(), ["0"]);
}

/// `currval` and `lastval` read state PostgreSQL keeps per server connection: through the pool
/// a session never reads another client's values, only its own or, where its values were left
/// on a connection another client has used since, the server's own "not yet defined" error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn currval_and_lastval_never_return_another_clients_value() {
    // One connection: every session is lent the very same one.
    let env = start(
        0,
        "\n[pool]\nmax_connections = 1\nqueue_timeout = \"60s\"\n",
    )
    .await;
    env.psql("CREATE TABLE ids (id serial)");
    let (mut a, mut b) = (
        Raw::connect(env.port, "app", "app", "postgres").await,
        Raw::connect(env.port, "app", "app", "postgres").await,
    );
    let one = |msgs: Vec<raw::Msg>| Raw::column(&msgs).concat();
    let insert = "INSERT INTO ids DEFAULT VALUES RETURNING id";
    let currval = "SELECT currval('ids_id_seq')";
    let undefined = "55000 currval of sequence \"ids_id_seq\" is not yet defined in this session";
    assert_eq!(one(a.try_simple(insert).await.unwrap()), "1");
    assert_eq!(one(a.try_simple("SELECT lastval()").await.unwrap()), "1");
    // B never advanced the sequence: as on a direct connection, it is not defined for B.
    assert_eq!(b.try_simple(currval).await.unwrap_err(), undefined);
    assert_eq!(one(b.try_simple(insert).await.unwrap()), "2");
    assert_eq!(one(b.try_simple("SELECT lastval()").await.unwrap()), "2");
    // A's value was left on the connection B has advanced the sequence on since: the
    // server's error for A, never B's value.
    assert_eq!(a.try_simple(currval).await.unwrap_err(), undefined);
    // In a transaction, the session's own value.
    let (_, msgs) = {
        frontend::query(
            "BEGIN; INSERT INTO ids DEFAULT VALUES; SELECT currval('ids_id_seq'); COMMIT",
            &mut a.out,
        )
        .unwrap();
        a.round(1).await
    };
    assert_eq!(Raw::column(&msgs), ["3"]);
    // A transaction opened by a BEGIN of its own (sent with the session's first statement,
    // the discard ahead of it in the same round trip): B's value is not A's.
    assert_eq!(b.try_simple("BEGIN").await.unwrap().len(), 1);
    assert_eq!(b.try_simple(currval).await.unwrap_err(), undefined);
    b.try_simple("ROLLBACK").await.unwrap();
    assert_eq!(
        a.try_simple("BEGIN ISOLATION LEVEL REPEATABLE READ")
            .await
            .unwrap()
            .len(),
        1
    );
    assert_eq!(one(a.try_simple(insert).await.unwrap()), "4");
    assert_eq!(one(a.try_simple(currval).await.unwrap()), "4");
    a.try_simple("COMMIT").await.unwrap();
    assert_eq!(b.try_simple("BEGIN").await.unwrap().len(), 1);
    assert_eq!(
        b.try_simple("SELECT lastval()").await.unwrap_err(),
        "55000 lastval is not yet defined in this session"
    );
    b.try_simple("ROLLBACK").await.unwrap();

    // The extended protocol, the discard sent ahead of the batch in the same write.
    assert_eq!(one(a.try_simple(insert).await.unwrap()), "5");
    b.extended("", Some(currval), &[]);
    frontend::sync(&mut b.out);
    let (tags, msgs) = b.round(1).await;
    assert_eq!(
        tags, "12EZ",
        "ParseComplete, BindComplete, then the server's error"
    );
    assert_eq!(msgs[2].sqlstate().as_deref(), Some("55000"));
    // A batch ended by a Flush behind the discard is still unsynced: the client's departure
    // rolls its INSERT back, as directly, and the connection is not lent to anyone.
    assert_eq!(one(a.try_simple(insert).await.unwrap()), "6");
    b.extended("", Some("INSERT INTO ids VALUES (100)"), &[]);
    frontend::flush(&mut b.out);
    b.flush().await;
    for tag in [b'1', b'2', b'C'] {
        assert_eq!(b.next().await.tag, tag);
    }
    drop(b);
    assert_eq!(
        env.psql("SELECT count(*) FROM ids WHERE id = 100").trim(),
        "0",
        "the departed client's INSERT was committed"
    );

    // nextval through the protocol's FunctionCall (libpq's PQfn): the same.
    a.out.extend_from_slice(&function_call(1574, "ids_id_seq")); // nextval(regclass)
    let (tags, _) = a.round(1).await;
    assert_eq!(tags, "VZ");
    let mut c = Raw::connect(env.port, "app", "app", "postgres").await;
    assert_eq!(c.try_simple(currval).await.unwrap_err(), undefined);
}

/// A FunctionCall message: function `oid`, one argument in text, a text result.
fn function_call(oid: u32, arg: &str) -> Vec<u8> {
    let mut body = oid.to_be_bytes().to_vec();
    body.extend_from_slice(&[0, 1, 0, 0, 0, 1]);
    body.extend_from_slice(&(arg.len() as i32).to_be_bytes());
    body.extend_from_slice(arg.as_bytes());
    body.extend_from_slice(&[0, 0]);
    let mut m = vec![b'F'];
    m.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
    m.extend_from_slice(&body);
    m
}

/// A `BEGIN` sluice would answer itself (sending it with the first statement after it) is
/// one whose modes are PostgreSQL's: one with a typo goes to the server, and the client gets
/// the server's syntax error and goes on, as directly (it once got `BEGIN`, and then a FATAL
/// when the server refused it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_begin_postgres_would_refuse_gets_the_servers_error() {
    let env = start(0, "").await;
    let mut c = Raw::connect(env.port, "app", "app", "postgres").await;
    let err = c
        .try_simple("BEGIN ISOLATION LEVEL REPEATABLE WRITE")
        .await
        .unwrap_err();
    assert!(err.starts_with("42601 syntax error"), "{err}");
    let shown = c.try_simple("SHOW transaction_isolation").await.unwrap();
    assert_eq!(Raw::column(&shown), ["read committed"]);
    // PostgreSQL's own modes are answered as before.
    c.try_simple("BEGIN ISOLATION LEVEL REPEATABLE READ, READ WRITE NOT DEFERRABLE")
        .await
        .unwrap();
    let shown = c.try_simple("SHOW transaction_isolation").await.unwrap();
    assert_eq!(Raw::column(&shown), ["repeatable read"]);
    c.try_simple("COMMIT").await.unwrap();
}

/// A `BEGIN` sluice answered itself and sends with the first statement after it, which the
/// server then refuses: the statement never runs outside the transaction the client was told
/// it had opened (the server skips it), and the session ends with 40001, as when its
/// connection is lost inside a transaction; the server connection is not left waiting. Here
/// a hint sends a serializable transaction to a standby, which refuses serializable mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_begin_the_server_refuses_ends_the_session_before_anything_runs() {
    let env = start(1, "").await;
    for extended in [false, true] {
        let mut c = Raw::connect(env.port, "app", "app", "postgres").await;
        c.try_simple("BEGIN ISOLATION LEVEL SERIALIZABLE")
            .await
            .unwrap();
        let sql = "/* sluice:reader */ SELECT 1";
        let err = if extended {
            c.extended("", Some(sql), &[]);
            frontend::sync(&mut c.out);
            c.flush().await;
            // Nothing but parameters and the FATAL the connection closes with.
            loop {
                match c.try_next().await {
                    Ok(m) if matches!(m.tag, b'S' | b'N') => {}
                    Ok(m) => panic!("{m:?}"),
                    Err(e) => break e,
                }
            }
        } else {
            c.try_simple(sql).await.unwrap_err()
        };
        assert!(
            err.starts_with("40001 ")
                && err.contains("cannot use serializable mode in a hot standby"),
            "{err}"
        );
    }
    // The standby's connections are as good as before: reads go on.
    let rows = env.psql("/* sluice:reader */ SELECT pg_is_in_recovery()");
    assert_eq!(rows.trim(), "t");
}

/// The `BEGIN` sluice sends in the same write as the first statement after it opens the
/// transaction that statement runs in, whether the statement is a simple query or an
/// extended-protocol batch; and it takes no snapshot, so `SET TRANSACTION` may still come
/// first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_begin_sent_with_the_first_statement_opens_the_transaction_it_runs_in() {
    let env = start(0, "").await;
    env.psql("CREATE TABLE ahead (id int)");
    let mut c = Raw::connect(env.port, "app", "app", "postgres").await;
    c.try_simple("BEGIN").await.unwrap();
    c.try_simple("INSERT INTO ahead VALUES (1)").await.unwrap();
    c.try_simple("ROLLBACK").await.unwrap();
    c.try_simple("BEGIN").await.unwrap();
    c.extended("", Some("INSERT INTO ahead VALUES (2)"), &[]);
    frontend::sync(&mut c.out);
    let (tags, msgs) = c.round(1).await;
    assert_eq!(tags, "12CZ");
    assert_eq!(msgs[3].body, b"T", "ReadyForQuery: in a transaction");
    c.try_simple("ROLLBACK").await.unwrap();
    let count = env
        .topo
        .primary()
        .sql("SELECT count(*) FROM ahead")
        .unwrap();
    assert_eq!(count.trim(), "0", "rolled back rows were committed");

    c.try_simple("BEGIN").await.unwrap();
    c.try_simple("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE")
        .await
        .unwrap();
    let shown = c.try_simple("SHOW transaction_isolation").await.unwrap();
    assert_eq!(Raw::column(&shown), ["serializable"]);
    c.try_simple("COMMIT").await.unwrap();
}

/// A client that leaves while its statement runs (an application's timeout closing the
/// socket) has the statement cancelled on the server and its connection closed at once,
/// inside a transaction block or not: the pool's one connection serves the next client
/// without waiting for the statement's end, and no server process goes on running it
/// beyond the pool's bound (directly, the backend would run on until the statement ended).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_whose_client_left_is_cancelled_and_its_connection_freed() {
    let env = start(
        0,
        "\n[pool]\nmax_connections = 1\nqueue_timeout = \"20s\"\n",
    )
    .await;
    env.psql("CREATE TABLE left_behind (id int)");
    let sleeping = || {
        env.topo
            .primary()
            .sql("SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE '%pg_sleep(60)%' AND pid <> pg_backend_pid()")
            .unwrap()
            .trim()
            .to_string()
    };
    for (n, opening) in ["", "BEGIN"].into_iter().enumerate() {
        let mut a = Raw::connect(env.port, "app", "app", "postgres").await;
        if !opening.is_empty() {
            a.try_simple(opening).await.unwrap();
        }
        frontend::query(
            &format!("INSERT INTO left_behind VALUES ({n}); SELECT pg_sleep(60)"),
            &mut a.out,
        )
        .unwrap();
        a.flush().await;
        // Running on the server before the client leaves.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while sleeping() != "1" {
            assert!(
                std::time::Instant::now() < deadline,
                "the statement never ran"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        drop(a);
        // The next client gets the pool's one connection within the queue timeout (20 s),
        // though the statement would run for 60 s.
        let mut b = Raw::connect(env.port, "app", "app", "postgres").await;
        assert_eq!(
            Raw::column(
                &b.try_simple("SELECT /* sluice:writer */ count(*) FROM left_behind")
                    .await
                    .unwrap()
            ),
            // Cancelled with its statement: the INSERT (in the block, or in the text's
            // implicit transaction) is rolled back.
            ["0"],
            "{opening:?}"
        );
        // The cancel reaches the server (it would run 60 s).
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while sleeping() != "0" {
            assert!(
                std::time::Instant::now() < deadline,
                "{opening:?}: the server still runs it"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
