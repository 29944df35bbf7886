//! Session fidelity through the splitter: what pins a session and for how long, state that
//! refers to the previous statement, LAST_INSERT_ID, KILL, procedures, errors.
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use mysql_async::prelude::*;
use mysql_async::{Conn, Opts, Row};

async fn conn(url: &str) -> Conn {
    Conn::new(Opts::from_url(url).unwrap())
        .await
        .expect("connect through sluice")
}

/// (pinned, reasons) from SHOW SLUICE SESSION.
async fn pins(c: &mut Conn) -> (String, String) {
    let row: Row = c.query_first("SHOW SLUICE SESSION").await.unwrap().unwrap();
    (
        row.get::<String, _>("pinned").unwrap(),
        row.get::<String, _>("pin_reasons").unwrap(),
    )
}

async fn sid(c: &mut Conn) -> u32 {
    c.query_first("SELECT @@server_id").await.unwrap().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pins_last_exactly_as_long_as_their_state() {
    let env = common::start(1, "").await;
    let mut c = conn(&env.url("test")).await;
    c.query_drop("CREATE TABLE t (id INT AUTO_INCREMENT PRIMARY KEY, v INT)")
        .await
        .unwrap();
    assert_eq!(pins(&mut c).await, ("NO".into(), "".into()));

    // Transaction.
    c.query_drop("BEGIN").await.unwrap();
    assert_eq!(pins(&mut c).await, ("YES".into(), "transaction".into()));
    c.query_drop("COMMIT").await.unwrap();
    assert_eq!(pins(&mut c).await.0, "NO");

    // Implicit transaction with autocommit=0.
    c.query_drop("SET autocommit = 0").await.unwrap();
    c.query_drop("SELECT * FROM t").await.unwrap();
    assert_eq!(pins(&mut c).await.1, "transaction");
    c.query_drop("COMMIT").await.unwrap();
    c.query_drop("SET autocommit = 1").await.unwrap();
    assert_eq!(pins(&mut c).await.0, "NO");

    // LOCK TABLES, from the server's transaction-state tracker.
    c.query_drop("LOCK TABLES t WRITE").await.unwrap();
    assert_eq!(pins(&mut c).await.1, "lock_tables");
    c.query_drop("INSERT INTO t (v) VALUES (1)").await.unwrap();
    c.query_drop("UNLOCK TABLES").await.unwrap();
    assert_eq!(pins(&mut c).await.0, "NO");

    // Temporary tables: every statement sees them until the last is dropped.
    c.query_drop("CREATE TEMPORARY TABLE tmp1 (a INT)")
        .await
        .unwrap();
    c.query_drop("CREATE TEMPORARY TABLE tmp2 (a INT)")
        .await
        .unwrap();
    assert_eq!(pins(&mut c).await.1, "temporary_tables");
    for i in 0..5 {
        c.exec_drop("INSERT INTO tmp1 VALUES (?)", (i,))
            .await
            .unwrap();
        let n: u32 = c
            .query_first("SELECT COUNT(*) FROM tmp1")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(n, i + 1);
    }
    c.query_drop("DROP TEMPORARY TABLE tmp1").await.unwrap();
    assert_eq!(pins(&mut c).await.1, "temporary_tables");
    c.query_drop("DROP TABLE tmp2").await.unwrap();
    assert_eq!(pins(&mut c).await.0, "NO");
    let err = c.query_drop("SELECT * FROM tmp2").await.unwrap_err();
    assert!(err.to_string().contains("1146"), "{err}");

    // Text-protocol PREPARE.
    c.query_drop("PREPARE s1 FROM 'SELECT @@server_id'")
        .await
        .unwrap();
    assert_eq!(pins(&mut c).await.1, "text_prepare");
    let a: u32 = c.query_first("EXECUTE s1").await.unwrap().unwrap();
    let b: u32 = c.query_first("EXECUTE s1").await.unwrap().unwrap();
    assert_eq!(a, b, "EXECUTE runs where PREPARE ran");
    c.query_drop("DEALLOCATE PREPARE s1").await.unwrap();
    assert_eq!(pins(&mut c).await.0, "NO");

    // SET TRANSACTION (next transaction only).
    c.query_drop("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE")
        .await
        .unwrap();
    assert_eq!(pins(&mut c).await.1, "next_transaction_characteristics");
    c.query_drop("BEGIN").await.unwrap();
    c.query_drop("COMMIT").await.unwrap();
    assert_eq!(pins(&mut c).await.0, "NO");

    // XA.
    c.query_drop("XA START 'x1'").await.unwrap();
    c.query_drop("INSERT INTO t (v) VALUES (2)").await.unwrap();
    assert!(pins(&mut c).await.1.contains("xa_transaction"));
    c.query_drop("XA END 'x1'").await.unwrap();
    c.query_drop("XA PREPARE 'x1'").await.unwrap();
    c.query_drop("XA COMMIT 'x1'").await.unwrap();
    assert_eq!(pins(&mut c).await.0, "NO");
    assert_eq!(
        env.topo
            .primary()
            .sql("SELECT COUNT(*) FROM test.t")
            .unwrap(),
        "2"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_variables_and_locks_pin_only_the_statements_that_use_them() {
    let env = common::start(1, "").await;
    let mut c = conn(&env.url("test")).await;
    c.query_drop("SET @x = 42").await.unwrap();
    assert_eq!(pins(&mut c).await.1, "user_variables");
    for _ in 0..5 {
        let x: i64 = c.query_first("SELECT @x").await.unwrap().unwrap();
        assert_eq!(x, 42);
        // Statements that do not touch user variables still read from the replica.
        assert_eq!(sid(&mut c).await, 2);
    }
    c.query_drop("SELECT @y := @x + 1").await.unwrap();
    let y: i64 = c.query_first("SELECT @y").await.unwrap().unwrap();
    assert_eq!(y, 43);

    // GET_LOCK holds the lock on one connection; others see it taken.
    let got: i64 = c
        .query_first("SELECT GET_LOCK('sluice-test', 0)")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got, 1);
    assert!(pins(&mut c).await.1.contains("user_locks"));
    let mut other = conn(&env.url("test")).await;
    let free: i64 = other
        .query_first("SELECT IS_FREE_LOCK('sluice-test')")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(free, 0);
    let released: i64 = c
        .query_first("SELECT RELEASE_LOCK('sluice-test')")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(released, 1, "released on the connection that holds it");

    // COM_RESET_CONNECTION forgets user variables and unpins.
    c.reset().await.unwrap();
    assert_eq!(pins(&mut c).await.0, "NO");
    let x: Option<i64> = c.query_first("SELECT @x").await.unwrap().unwrap();
    assert_eq!(x, None);
    // The lock was released by the backend reset; another session can take it (GET_LOCK
    // waits for it, should the reset still be on its way).
    let got: i64 = other
        .query_first("SELECT GET_LOCK('sluice-test', 60)")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_insert_id_is_always_the_sessions_own() {
    let env = common::start_with(1, "", |t| {
        // One writer connection: sessions share it, so any leak would show.
        *t = t.replace(
            "hostgroup = \"writer\"\n",
            "hostgroup = \"writer\"\nmax_connections = 1\n",
        );
    })
    .await;
    let mut a = conn(&env.url("test")).await;
    let mut b = conn(&env.url("test")).await;
    a.query_drop("CREATE TABLE ai (id INT AUTO_INCREMENT PRIMARY KEY, v INT)")
        .await
        .unwrap();
    a.query_drop("INSERT INTO ai (v) VALUES (1)").await.unwrap();
    assert_eq!(a.last_insert_id(), Some(1));
    b.query_drop("INSERT INTO ai (v) VALUES (2), (3)")
        .await
        .unwrap();
    assert_eq!(b.last_insert_id(), Some(2));
    let a_lid: u64 = a
        .query_first("SELECT LAST_INSERT_ID()")
        .await
        .unwrap()
        .unwrap();
    let b_lid: u64 = b
        .query_first("SELECT LAST_INSERT_ID()")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((a_lid, b_lid), (1, 2));
    // Not the exact form the proxy answers itself: runs on a replica after
    // `SET last_insert_id`.
    let (a_lid, sid): (u64, u32) = a
        .query_first("SELECT LAST_INSERT_ID() + 0, @@server_id")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((a_lid, sid), (1, 2));
    let via_writer: u64 = b
        .query_first("SELECT /* sluice:writer */ LAST_INSERT_ID() * 1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(via_writer, 2);
    // Used inside a write on the shared connection.
    a.query_drop("CREATE TABLE child (parent BIGINT)")
        .await
        .unwrap();
    a.query_drop("INSERT INTO child VALUES (LAST_INSERT_ID())")
        .await
        .unwrap();
    assert_eq!(
        env.topo
            .primary()
            .sql("SELECT parent FROM test.child")
            .unwrap(),
        "1"
    );
    // An explicit id does not change LAST_INSERT_ID(), as on a direct connection.
    a.query_drop("INSERT INTO ai VALUES (100, 4)")
        .await
        .unwrap();
    let a_lid: u64 = a
        .query_first("SELECT LAST_INSERT_ID()")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(a_lid, 1);
    // LAST_INSERT_ID(expr) sets it.
    a.query_drop("UPDATE ai SET v = LAST_INSERT_ID(v + 10) WHERE id = 100")
        .await
        .unwrap();
    let a_lid: u64 = a.query_first("SELECT @@identity").await.unwrap().unwrap();
    assert_eq!(a_lid, 14);
    // Inside a transaction, and after it.
    b.query_drop("BEGIN").await.unwrap();
    b.query_drop("INSERT INTO ai (v) VALUES (5)").await.unwrap();
    let in_trx: u64 = b
        .query_first("SELECT LAST_INSERT_ID()")
        .await
        .unwrap()
        .unwrap();
    b.query_drop("COMMIT").await.unwrap();
    a.query_drop("INSERT INTO ai (v) VALUES (6)").await.unwrap();
    let after: u64 = b
        .query_first("SELECT LAST_INSERT_ID()")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(in_trx, after);
    assert_eq!(in_trx, 101);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warnings_found_rows_row_count_refer_to_the_previous_statement() {
    let env = common::start(1, "").await;
    let mut c = conn(&env.url("test")).await;
    let mut noisy = conn(&env.url("test")).await;
    c.query_drop("CREATE TABLE w (id INT PRIMARY KEY, s VARCHAR(3))")
        .await
        .unwrap();
    c.query_drop("INSERT INTO w VALUES (1,'a'),(2,'b'),(3,'c'),(4,'d')")
        .await
        .unwrap();
    env.sync();
    // Another session leaves warnings on pooled connections.
    for _ in 0..4 {
        noisy
            .query_drop("SELECT CAST('zz' AS SIGNED)")
            .await
            .unwrap();
    }
    // A statement without warnings: SHOW WARNINGS is empty, whichever connection answers.
    c.query_drop("SELECT 1").await.unwrap();
    let w: Vec<Row> = c.query("SHOW WARNINGS").await.unwrap();
    assert!(w.is_empty(), "foreign warnings leaked: {w:?}");
    let n: u32 = c
        .query_first("SELECT @@warning_count")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(n, 0);
    // A statement with warnings: SHOW WARNINGS shows them, repeatedly.
    c.query_drop("SELECT CAST('x1' AS SIGNED), CAST('x2' AS SIGNED)")
        .await
        .unwrap();
    for _ in 0..2 {
        let w: Vec<(String, u32, String)> = c.query("SHOW WARNINGS").await.unwrap();
        assert_eq!(w.len(), 2);
        assert_eq!(w[0].1, 1292);
        assert!(w[0].2.contains("'x1'"));
    }
    // Errors too.
    let _ = c
        .query_drop("SELECT * FROM no_such_table")
        .await
        .unwrap_err();
    let e: Vec<(String, u32, String)> = c.query("SHOW ERRORS").await.unwrap();
    assert_eq!(e[0].1, 1146);
    // SQL_CALC_FOUND_ROWS / FOUND_ROWS().
    let _: Vec<u32> = c
        .query("SELECT SQL_CALC_FOUND_ROWS id FROM w LIMIT 1")
        .await
        .unwrap();
    let found: u64 = c.query_first("SELECT FOUND_ROWS()").await.unwrap().unwrap();
    assert_eq!(found, 4);
    // FOUND_ROWS() after a plain SELECT, ROW_COUNT() after DML.
    let _: Vec<u32> = c.query("SELECT id FROM w WHERE id < 3").await.unwrap();
    let found: u64 = c.query_first("SELECT FOUND_ROWS()").await.unwrap().unwrap();
    assert_eq!(found, 2);
    c.query_drop("UPDATE w SET s = 'z' WHERE id <= 3")
        .await
        .unwrap();
    let rc: i64 = c.query_first("SELECT ROW_COUNT()").await.unwrap().unwrap();
    assert_eq!(rc, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn procedures_errors_and_kill() {
    let env = common::start(1, "").await;
    let mut c = conn(&env.url("test")).await;
    c.query_drop("CREATE TABLE e (id INT PRIMARY KEY)")
        .await
        .unwrap();
    c.query_drop(
        "CREATE PROCEDURE two_results() BEGIN SELECT @@server_id AS a; SELECT 2 AS b, 3 AS c; END",
    )
    .await
    .unwrap();
    env.sync();
    // CALL goes to the writer; every result set comes back.
    let mut sets = Vec::new();
    let mut q = c.query_iter("CALL two_results()").await.unwrap();
    while !q.is_empty() {
        let rows: Vec<Row> = q.collect().await.unwrap();
        sets.push(rows);
    }
    drop(q);
    assert_eq!(sets.len(), 2);
    assert_eq!(sets[0][0].get::<u32, _>(0), Some(1));
    assert_eq!(sets[1][0].get::<u32, _>(1), Some(3));

    // Server errors keep their code, state and message; the connection stays usable.
    c.query_drop("INSERT INTO e VALUES (1)").await.unwrap();
    match c.query_drop("INSERT INTO e VALUES (1)").await.unwrap_err() {
        mysql_async::Error::Server(e) => {
            assert_eq!((e.code, e.state.as_str()), (1062, "23000"));
            assert_eq!(e.message, "Duplicate entry '1' for key 'PRIMARY'");
        }
        other => panic!("{other:?}"),
    }
    let one: u32 = c.query_first("SELECT 1").await.unwrap().unwrap();
    assert_eq!(one, 1);

    // CONNECTION_ID() is the id the proxy gave; KILL QUERY with it reaches the backend.
    let id: u32 = c
        .query_first("SELECT CONNECTION_ID()")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(id, c.id());
    let url = env.url("test");
    let sleeper = tokio::spawn(async move {
        let mut v = conn(&url).await;
        let vid = v.id();
        let r: Result<Option<u32>, _> = v.query_first("SELECT SLEEP(30)").await;
        (vid, r, v)
    });
    // KILL QUERY before the SLEEP starts would kill nothing: wait until a server runs it.
    let servers = &env.topo.servers;
    common::wait_for("the SLEEP to run", std::time::Duration::from_secs(60), || {
        tokio::task::block_in_place(|| {
            servers.iter().any(|s| {
                s.sql("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO = 'SELECT SLEEP(30)'")
                    .is_ok_and(|n| n.trim() == "1")
            })
        })
    })
    .await;
    let victim = env
        .proxy
        .rt
        .sessions
        .all()
        .into_iter()
        .map(|h| h.id)
        .max()
        .unwrap();
    c.query_drop(format!("KILL QUERY {victim}")).await.unwrap();
    let (vid, r, mut v) = sleeper.await.unwrap();
    assert_eq!(vid, victim);
    // SLEEP interrupted by KILL QUERY returns 1 (or fails with 1317); run to its end, 0.
    match r {
        Ok(Some(1)) => {}
        Err(mysql_async::Error::Server(e)) if e.code == 1317 => {}
        other => panic!("KILL QUERY did not interrupt the SLEEP: {other:?}"),
    }
    let one: u32 = v.query_first("SELECT 1").await.unwrap().unwrap();
    assert_eq!(one, 1);
    // KILL CONNECTION ends that session.
    c.query_drop(format!("KILL {victim}")).await.unwrap();
    let sessions = &env.proxy.rt.sessions;
    common::wait_for(
        "the killed session to end",
        std::time::Duration::from_secs(60),
        || sessions.all().iter().all(|h| h.id != victim),
    )
    .await;
    assert!(v.query_drop("SELECT 1").await.is_err());
    // Unknown ids and other users' sessions are refused like a server would.
    let err = c.query_drop("KILL 999999").await.unwrap_err();
    assert!(err.to_string().contains("1094"), "{err}");
}

/// KILL CONNECTION ends a session whose client stalled in the middle of a command packet
/// (a slow or hostile client): the session is not left reading until that client sends more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_ends_a_session_stalled_in_the_middle_of_a_packet() {
    let env = common::start(1, "").await;
    let mut admin = conn(&env.url("test")).await;
    let mut stalled = common::raw::Raw::login(env.port).await;
    // COM_PING: OK.
    assert_eq!(stalled.command(&[0x0e]).await.payload[0], 0);
    let sessions = &env.proxy.rt.sessions;
    let victim = sessions.all().into_iter().map(|h| h.id).max().unwrap();
    // A COM_QUERY packet announcing 100 bytes, of which 7 come.
    stalled
        .send_raw(&[100, 0, 0, 0, 0x03, b'S', b'E', b'L', b'E', b'C', b'T'])
        .await;
    // The session has read what came (it waits for the rest) before the KILL.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    admin.query_drop(format!("KILL {victim}")).await.unwrap();
    common::wait_for(
        "the killed session to end",
        std::time::Duration::from_secs(60),
        || sessions.all().iter().all(|h| h.id != victim),
    )
    .await;
    // Its client finds the connection closed.
    assert!(stalled.recv().await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn character_set_and_collation_follow_set_names() {
    let env = common::start(2, "").await;
    let mut c = conn(&env.url("test")).await;
    c.query_drop("SET NAMES utf8mb4 COLLATE utf8mb4_unicode_ci")
        .await
        .unwrap();
    for _ in 0..10 {
        let (cs, coll): (String, String) = c
            .query_first("SELECT @@character_set_connection, @@collation_connection")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (cs.as_str(), coll.as_str()),
            ("utf8mb4", "utf8mb4_unicode_ci")
        );
    }
    let (cs, coll): (String, String) = c
        .query_first(
            "SELECT /* sluice:writer */ @@character_set_connection, @@collation_connection",
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (cs.as_str(), coll.as_str()),
        ("utf8mb4", "utf8mb4_unicode_ci")
    );
    c.query_drop("SET NAMES latin1").await.unwrap();
    for sql in [
        "SELECT @@character_set_connection, @@collation_connection",
        "SELECT /* sluice:writer */ @@character_set_connection, @@collation_connection",
    ] {
        for _ in 0..4 {
            let (cs, coll): (String, String) = c.query_first(sql).await.unwrap().unwrap();
            assert_eq!(
                (cs.as_str(), coll.as_str()),
                ("latin1", "latin1_swedish_ci"),
                "{sql}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_statement_option_survives_a_backend_reset() {
    // The next client waits in line for the one connection while it is reset.
    let env = common::start_with(0, "\n[pool]\nqueue_timeout = \"120s\"\n", |t| {
        *t = t.replace(
            "hostgroup = \"writer\"\n",
            "hostgroup = \"writer\"\nmax_connections = 1\n",
        );
    })
    .await;
    // A client without CLIENT_MULTI_STATEMENTS pins the only connection (user variable) and
    // leaves: the connection is reset and reused.
    {
        let mut r = common::raw::Raw::connect(env.port).await;
        let caps = common::raw::CLIENT_CAPS & !sluice_mysql::wire::consts::cap::MULTI_STATEMENTS;
        let ok = r
            .hello("app", "app", "mysql_native_password", caps, Some("test"))
            .await;
        assert_eq!(ok.payload[0], 0);
        assert_eq!(r.command(b"\x03SET @x = 1").await.payload[0], 0);
    }
    let mut c = conn(&env.url("test")).await;
    let mut sets = 0;
    let mut q = c.query_iter("SELECT 1; SELECT 2").await.unwrap();
    while !q.is_empty() {
        let _: Vec<mysql_async::Row> = q.collect().await.unwrap();
        sets += 1;
    }
    assert_eq!(sets, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_functions_inside_larger_statements() {
    let env = common::start(1, "").await;
    let mut c = conn(&env.url("test")).await;
    c.query_drop("CREATE TABLE f (id INT PRIMARY KEY)")
        .await
        .unwrap();
    c.query_drop("INSERT INTO f VALUES (1),(2),(3)")
        .await
        .unwrap();
    env.sync();
    // CONNECTION_ID() anywhere is the id KILL understands, with its usual column name.
    let row: mysql_async::Row = c
        .query_first("SELECT CONNECTION_ID(), 1 + 1 AS two")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.columns_ref()[0].name_str(), "CONNECTION_ID()");
    assert_eq!(row.get::<u32, _>(0), Some(c.id()));
    let n: u32 = c
        .query_first("SELECT CONNECTION_ID() * 2")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(n, c.id() * 2);
    // Prepared statements too, for each session its own.
    let mut d = conn(&env.url("test")).await;
    for x in [&mut c, &mut d] {
        let id = x.id();
        let got: u32 = x
            .exec_first("SELECT CONNECTION_ID() + ?", (0,))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got, id);
    }
    // FOUND_ROWS() / ROW_COUNT() in expressions refer to this session's previous statement.
    let _: Vec<u32> = c.query("SELECT id FROM f WHERE id > 1").await.unwrap();
    let found: u64 = c
        .query_first("SELECT FOUND_ROWS() + 0")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(found, 2);
    c.query_drop("UPDATE f SET id = id + 10 WHERE id >= 2")
        .await
        .unwrap();
    let rc: i64 = c
        .query_first("SELECT ROW_COUNT() * 1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rc, 2);
}
