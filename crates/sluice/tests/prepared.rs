//! Binary-protocol prepared statements through sluice at the packet level: cursors
//! (COM_STMT_FETCH), long data (COM_STMT_SEND_LONG_DATA), and the servers'
//! max_prepared_stmt_count never being exhausted by the proxy, and the statements' texts held
//! within `[mysql] max_statement_memory`.
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::raw::{err_text, Raw};
use mysql_async::prelude::*;
use sluice_mysql::wire::consts::{com, status};

/// Prepares `sql`; returns (statement id, params, columns), reading the whole answer.
async fn prepare(r: &mut Raw, sql: &str) -> (u32, u16, u16) {
    let mut p = vec![com::STMT_PREPARE];
    p.extend_from_slice(sql.as_bytes());
    let ok = r.command(&p).await;
    assert_eq!(ok.payload[0], 0, "prepare failed: {:?}", err_text(&ok));
    let id = u32::from_le_bytes(ok.payload[1..5].try_into().unwrap());
    let cols = u16::from_le_bytes([ok.payload[5], ok.payload[6]]);
    let params = u16::from_le_bytes([ok.payload[7], ok.payload[8]]);
    if params > 0 {
        assert_eq!(r.recv_until_eof().await.len(), params as usize + 1);
    }
    if cols > 0 {
        assert_eq!(r.recv_until_eof().await.len(), cols as usize + 1);
    }
    (id, params, cols)
}

/// The session's pin reasons. A PING first: the proxy answers a command before it finishes
/// its bookkeeping, and handles the next command only after.
async fn pins_of(env: &common::Env, r: &mut Raw) -> Vec<&'static str> {
    assert_eq!(r.command(&[com::PING]).await.payload[0], 0);
    env.proxy
        .rt
        .sessions
        .get(r.greeting.connection_id)
        .expect("session")
        .pin_reasons()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursor_fetch_pins_until_the_last_row() {
    let env = common::start(1, "").await;
    let mut r = Raw::login(env.port).await;
    let (id, _, cols) = prepare(&mut r, "SELECT seq FROM seq_1_to_10").await;
    assert_eq!(cols, 1);
    // Execute with CURSOR_TYPE_READ_ONLY: metadata only, then rows on demand.
    let mut exec = vec![com::STMT_EXECUTE];
    exec.extend_from_slice(&id.to_le_bytes());
    exec.push(1);
    exec.extend_from_slice(&1u32.to_le_bytes());
    let first = r.command(&exec).await;
    assert_eq!(first.payload[0], 1, "one column");
    let rest = r.recv_until_eof().await;
    let eof = rest.last().unwrap();
    let st = u16::from_le_bytes([eof.payload[3], eof.payload[4]]);
    assert!(st & status::CURSOR_EXISTS != 0, "server opened a cursor");
    assert_eq!(pins_of(&env, &mut r).await, vec!["cursor"]);

    let fetch = |n: u32| {
        let mut f = vec![com::STMT_FETCH];
        f.extend_from_slice(&id.to_le_bytes());
        f.extend_from_slice(&n.to_le_bytes());
        f
    };
    r.send(0, &fetch(4)).await;
    let rows = r.recv_until_eof().await;
    assert_eq!(rows.len(), 5, "4 rows and EOF");
    assert_eq!(pins_of(&env, &mut r).await, vec!["cursor"]);
    r.send(0, &fetch(100)).await;
    let rows = r.recv_until_eof().await;
    assert_eq!(rows.len(), 7, "the remaining 6 rows and EOF");
    let eof = rows.last().unwrap();
    let st = u16::from_le_bytes([eof.payload[3], eof.payload[4]]);
    assert!(st & status::LAST_ROW_SENT != 0);
    assert!(
        pins_of(&env, &mut r).await.is_empty(),
        "unpinned after the last row"
    );
    // Fetching without an open cursor is an error, and the session goes on.
    r.send(0, &fetch(1)).await;
    let p = r.recv().await.unwrap();
    assert_eq!(err_text(&p).unwrap().0, 1421);
    assert_eq!(r.command(&[com::PING]).await.payload[0], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_data_goes_to_the_connection_that_executes() {
    let env = common::start(1, "").await;
    env.topo
        .primary()
        .sql("CREATE TABLE test.ld (id INT AUTO_INCREMENT PRIMARY KEY, b LONGBLOB)")
        .unwrap();
    env.sync();
    let mut r = Raw::login(env.port).await;
    let (id, params, _) = prepare(&mut r, "INSERT INTO ld (b) VALUES (?)").await;
    assert_eq!(params, 1);
    let mut expected = Vec::new();
    for chunk in 0..5u8 {
        let data = vec![chunk; 100_000];
        expected.extend_from_slice(&data);
        let mut p = vec![com::STMT_SEND_LONG_DATA];
        p.extend_from_slice(&id.to_le_bytes());
        p.extend_from_slice(&0u16.to_le_bytes());
        p.extend_from_slice(&data);
        r.send(0, &p).await; // no response
        assert_eq!(pins_of(&env, &mut r).await, vec!["long_data"]);
    }
    // Execute: one BLOB parameter whose value came as long data.
    let mut exec = vec![com::STMT_EXECUTE];
    exec.extend_from_slice(&id.to_le_bytes());
    exec.push(0);
    exec.extend_from_slice(&1u32.to_le_bytes());
    exec.push(0); // null bitmap
    exec.push(1); // new params bound
    exec.extend_from_slice(&[0xfc, 0]); // MYSQL_TYPE_BLOB
    let ok = r.command(&exec).await;
    assert_eq!(ok.payload[0], 0, "{:?}", err_text(&ok));
    assert!(pins_of(&env, &mut r).await.is_empty());
    let on_primary = env
        .topo
        .primary()
        .sql("SELECT LENGTH(b), MD5(b) FROM test.ld")
        .unwrap();
    let md5 = {
        let out = std::process::Command::new("md5sum")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write;
                c.stdin.take().unwrap().write_all(&expected)?;
                c.wait_with_output()
            })
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .next()
            .unwrap()
            .to_string()
    };
    assert_eq!(on_primary, format!("{}\t{md5}", expected.len()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_statement_limit_is_never_exhausted() {
    // The proxy may cache up to 100 statements per connection, but the servers allow only
    // 16 in total: when a server says it is full, the proxy closes some of its cached
    // statements and retries, so clients never see error 1461.
    let env = common::start(1, "\n[pool]\nstmt_cache_size = 100\n").await;
    for s in &env.topo.servers {
        s.sql("SET GLOBAL max_prepared_stmt_count = 16").unwrap();
    }
    let mut tasks = Vec::new();
    for client in 0..3 {
        let url = env.url("test");
        tasks.push(tokio::spawn(async move {
            let mut c = mysql_async::Conn::new(mysql_async::Opts::from_url(&url).unwrap())
                .await
                .unwrap();
            for i in 0..40 {
                let sql = format!("SELECT {client} + {i} + ?");
                let v: i64 = c.exec_first(sql.as_str(), (1,)).await.unwrap().unwrap();
                assert_eq!(v, client + i + 1);
                // And again, now from the proxy's cache where it survived.
                let v: i64 = c.exec_first(sql.as_str(), (2,)).await.unwrap().unwrap();
                assert_eq!(v, client + i + 2);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    for s in &env.topo.servers {
        let n: u32 = s
            .sql("SHOW GLOBAL STATUS LIKE 'Prepared_stmt_count'")
            .unwrap()
            .split('\t')
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        assert!(n <= 16, "server {} holds {n} statements", s.port);
    }
}

/// Of 512 KiB for the whole process's statement texts, 300 KiB for any one session.
const SHARES: &str =
    "\n[mysql]\nmax_statement_memory = 524288\nmax_statement_memory_per_session = 307200\n";

/// Prepares `sql`, expecting a refusal: its error code and message.
async fn refused(r: &mut Raw, sql: &str) -> (u16, String) {
    let mut p = vec![com::STMT_PREPARE];
    p.extend_from_slice(sql.as_bytes());
    err_text(&r.command(&p).await).expect("an error")
}

/// Prepared statements' texts are held for as long as their session holds them: one session
/// holds at most `[mysql] max_statement_memory_per_session`, all of them at most
/// `max_statement_memory`; a COM_STMT_PREPARE beyond either gets error 1041 naming which,
/// and the session goes on (a statement closed gives its bytes back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statement_texts_are_held_within_the_session_and_process_budgets() {
    let env = common::start(1, SHARES).await;
    let text = |n: u32| format!("SELECT {n}, length('{}')", "x".repeat(200 << 10));
    let mut a = Raw::login(env.port).await;
    let mut b = Raw::login(env.port).await;
    let mut c = Raw::login(env.port).await;
    let (first, _, _) = prepare(&mut a, &text(1)).await;
    let (code, msg) = refused(&mut a, &text(2)).await;
    assert_eq!(code, 1041, "{msg}");
    assert!(
        msg.starts_with("sluice: out of memory for prepared statements: ")
            && msg.contains(
                "one session may hold at most 307200 bytes ([mysql] max_statement_memory_per_session)"
            ),
        "{msg}"
    );
    // Another session has a share of its own.
    prepare(&mut b, &text(3)).await;
    // Two sessions' texts leave no room for a third's in the process's budget.
    let (code, msg) = refused(&mut c, &text(4)).await;
    assert_eq!(code, 1041, "{msg}");
    assert!(
        msg.contains("all sessions may hold at most 524288 bytes ([mysql] max_statement_memory)"),
        "{msg}"
    );
    // The refused sessions go on.
    for r in [&mut a, &mut c] {
        assert_eq!(r.command(&[com::PING]).await.payload[0], 0);
    }
    // A closed statement gives its bytes back (COM_STMT_CLOSE has no answer).
    let mut close = vec![com::STMT_CLOSE];
    close.extend_from_slice(&first.to_le_bytes());
    a.send(0, &close).await;
    assert_eq!(a.command(&[com::PING]).await.payload[0], 0);
    prepare(&mut a, &text(5)).await;
}

/// Statement texts of 256 KiB or more are scanned, keyed and digested off the event loop
/// (`sluice_runtime::off_loop`): prepared, routed and counted as the same statements written
/// short.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_statement_texts_are_prepared_routed_and_counted_as_short_ones() {
    let env = common::start(1, "").await;
    let mut c = mysql_async::Conn::new(mysql_async::Opts::from_url(&env.url("test")).unwrap())
        .await
        .unwrap();
    c.query_drop("CREATE TABLE lp (id INT PRIMARY KEY, sid INT)")
        .await
        .unwrap();
    let pad = format!("/* {} */", "x".repeat(300 << 10));
    assert!(pad.len() > sluice_runtime::off_loop::OFF_LOOP_TEXT);
    let (primary, replica) = (env.topo.servers[0].server_id, env.topo.servers[1].server_id);
    // A read, prepared once and executed twice, runs on the replica.
    let read = format!("SELECT @@server_id + ? {pad}");
    for _ in 0..2 {
        let sid: u32 = c.exec_first(read.as_str(), (0,)).await.unwrap().unwrap();
        assert_eq!(sid, replica);
    }
    // A write, on the primary; and the same statement written short.
    let write = format!("INSERT INTO lp VALUES (?, @@server_id) {pad}");
    c.exec_drop(write.as_str(), (1,)).await.unwrap();
    c.exec_drop("INSERT INTO lp VALUES (?, @@server_id)", (2,))
        .await
        .unwrap();
    let rows = env
        .topo
        .primary()
        .sql("SELECT GROUP_CONCAT(id, ':', sid ORDER BY id) FROM test.lp")
        .unwrap();
    assert_eq!(rows, format!("1:{primary},2:{primary}"));
    // One digest for both, counted twice, on the writer.
    let inserts: Vec<_> = env
        .proxy
        .rt
        .digests
        .snapshot()
        .into_iter()
        .filter(|d| d.text.starts_with("INSERT INTO lp"))
        .map(|d| (d.text.to_string(), d.count, d.hostgroup.to_string()))
        .collect();
    assert_eq!(inserts.len(), 1, "{inserts:?}");
    assert_eq!(
        (inserts[0].1, inserts[0].2.as_str()),
        (2, "writer"),
        "{inserts:?}"
    );
}
