//! A `BEGIN` sluice holds back until the transaction's first statement: after `SET
//! TRANSACTION READ ONLY` as a simple query of its own, sent through the extended protocol
//! alone, and with statements prepared while it waits (found by differential reviews of
//! routing and of pgbench `-M prepared`).

use super::pg::raw::Raw;
use super::pg::{start, wait_replayed};
use super::routing::run;
use postgres_protocol::message::frontend;

/// `BEGIN` then `SET TRANSACTION READ ONLY`, each a simple query (as psql sends them): the
/// transaction's first statement proper chooses where it runs, as after `BEGIN READ ONLY`. The
/// `SET TRANSACTION` was taken for that statement and sent the transaction to a replica, where
/// `txid_current()`, `NOTIFY` and `SET TRANSACTION READ WRITE` failed (25006, 0A000); and after
/// a serializable `BEGIN` the standby refused the transaction (the session ended).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_transaction_read_only_waits_for_the_first_statement() {
    let env = start(1, "").await;
    env.topo
        .primary()
        .sql("CREATE TABLE sr (x int); INSERT INTO sr VALUES (1)")
        .unwrap();
    wait_replayed(&env.topo).await;
    let mut c = Raw::connect(env.port, "app", "app", "postgres").await;
    for (begin, first, want) in [
        ("BEGIN", "SELECT pg_is_in_recovery()", "t"),
        (
            "START TRANSACTION -- a comment",
            "SELECT pg_is_in_recovery()",
            "t",
        ),
        ("BEGIN", "SELECT txid_current() > 0", "t"),
        (
            "BEGIN ISOLATION LEVEL REPEATABLE READ",
            "SELECT pg_is_in_recovery()",
            "t",
        ),
        (
            "BEGIN",
            "SET TRANSACTION READ WRITE; SELECT pg_is_in_recovery()",
            "f",
        ),
        (
            "BEGIN",
            "NOTIFY sr_channel; SELECT pg_is_in_recovery()",
            "f",
        ),
        (
            "BEGIN ISOLATION LEVEL SERIALIZABLE",
            "SELECT pg_is_in_recovery()",
            "f",
        ),
    ] {
        let got = run(&mut c, &[begin, "SET TRANSACTION READ ONLY", first]).await;
        assert_eq!(got, Ok(vec![want.to_string()]), "{begin}; {first}");
        // Read-only all the same, wherever it runs (unless made read-write).
        let write = c.try_simple("INSERT INTO sr VALUES (2)").await;
        match first.contains("READ WRITE") {
            true => assert!(write.is_ok(), "{begin}; {first}: {write:?}"),
            false => assert!(
                write.as_ref().is_err_and(|e| e.starts_with("25006")),
                "{begin}; {first}: {write:?}"
            ),
        }
        run(&mut c, &["ROLLBACK"]).await.unwrap();
    }
    let rows = run(&mut c, &["SELECT count(*) FROM sr"]).await;
    assert_eq!(rows, Ok(vec!["1".to_string()]));
}

/// An extended-protocol `BEGIN READ ONLY` sent alone up to its Sync (psycopg's pipeline mode;
/// a statement prepared once and bound again) waits for the transaction's first statement, as
/// a simple-query one does: it went to a replica by itself, where `txid_current()` failed
/// (25006). Answered as PostgreSQL answers it, described or not, named or unnamed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extended_begin_read_only_waits_for_the_first_statement() {
    let env = start(1, "").await;
    wait_replayed(&env.topo).await;
    let mut c = Raw::connect(env.port, "app", "app", "postgres").await;
    async fn first(c: &mut Raw, sql: &str) -> (String, Vec<String>) {
        c.extended("", Some(sql), &[]);
        frontend::sync(&mut c.out);
        let (tags, msgs) = c.round(1).await;
        (tags, Raw::column(&msgs))
    }
    let ro = "BEGIN READ ONLY";
    // Parse, Bind, Execute; then Parse, Bind, Describe, Execute of a named statement; then
    // that statement bound again.
    for (round, query) in ["SELECT txid_current() > 0", "SELECT pg_is_in_recovery()"]
        .iter()
        .enumerate()
    {
        c.extended("", Some(ro), &[]);
        frontend::sync(&mut c.out);
        let (tags, msgs) = c.round(1).await;
        assert_eq!(tags, "12CZ", "{msgs:?}");
        assert_eq!(msgs.last().unwrap().body, b"T");
        let want = if round == 0 { "f" } else { "t" };
        let got = first(&mut c, &format!("{query}, pg_is_in_recovery()")).await;
        assert_eq!(got.0, "12DCZ", "{got:?}");
        let got = Raw::column(&c.try_simple("SELECT pg_is_in_recovery()").await.unwrap());
        assert_eq!(got, [want], "{query}");
        run(&mut c, &["COMMIT"]).await.unwrap();

        let name = format!("b{round}");
        frontend::parse(&name, ro, [], &mut c.out).unwrap();
        for bound in [true, false] {
            if !bound {
                frontend::parse("", "SELECT 1", [], &mut c.out).unwrap();
                frontend::sync(&mut c.out);
                c.round(1).await;
            }
            frontend::bind(
                "",
                &name,
                [],
                [None::<&str>; 0].iter(),
                |_, _| Ok(postgres_protocol::IsNull::Yes),
                [],
                &mut c.out,
            )
            .map_err(|_| "bind")
            .unwrap();
            frontend::describe(b'P', "", &mut c.out).unwrap();
            frontend::execute("", 0, &mut c.out).unwrap();
            frontend::sync(&mut c.out);
            let (tags, _) = c.round(1).await;
            assert_eq!(tags, if bound { "12nCZ" } else { "2nCZ" });
            let got = first(&mut c, query).await;
            assert_eq!(got, ("12DCZ".to_string(), vec!["t".to_string()]), "{query}");
            let got = Raw::column(&c.try_simple("SELECT pg_is_in_recovery()").await.unwrap());
            assert_eq!(got, [want], "{query}");
            // Read-only all the same.
            let write = c.try_simple("CREATE TABLE x (a int)").await.unwrap_err();
            assert!(write.starts_with("25006"), "{write}");
            run(&mut c, &["ROLLBACK"]).await.unwrap();
        }
    }
    // A BEGIN parsed with a parameter type, bound without a parameter: the server's error,
    // and no transaction, as directly.
    frontend::parse("", ro, [23], &mut c.out).unwrap();
    frontend::bind(
        "",
        "",
        [],
        [None::<&str>; 0].iter(),
        |_, _| Ok(postgres_protocol::IsNull::Yes),
        [],
        &mut c.out,
    )
    .map_err(|_| "bind")
    .unwrap();
    frontend::execute("", 0, &mut c.out).unwrap();
    frontend::sync(&mut c.out);
    let (tags, msgs) = c.round(1).await;
    assert_eq!(tags, "1EZ", "{msgs:?}");
    assert_eq!(msgs[1].sqlstate().as_deref(), Some("08P01"));
    assert_eq!(msgs.last().unwrap().body, b"I");
}

/// A statement prepared (Parse, Sync) inside a transaction whose `BEGIN` sluice holds back is
/// answered without a connection, as outside one: pgbench `-M prepared` prepares each
/// statement of its script there and waits for the answer, and with its other clients
/// holding the pool's connections it waited for the queue timeout (its clients aborted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_prepared_in_a_held_block_waits_for_no_connection() {
    let env = start(0, super::pins::POOL).await;
    let mut holders = Vec::new();
    for _ in 0..2 {
        let mut h = Raw::connect(env.port, "app", "app", "postgres").await;
        run(&mut h, &["BEGIN", "SELECT 1"]).await.unwrap();
        holders.push(h);
    }
    let mut c = Raw::connect(env.port, "app", "app", "postgres").await;
    for begin in ["BEGIN", "EXTENDED"] {
        match begin {
            "BEGIN" => drop(c.try_simple(begin).await.unwrap()),
            _ => {
                c.extended("", Some("BEGIN"), &[]);
                frontend::sync(&mut c.out);
                assert_eq!(c.round(1).await.0, "12CZ");
            }
        }
        frontend::parse("p1", "SELECT 1", [], &mut c.out).unwrap();
        frontend::sync(&mut c.out);
        // (Waiting for a connection, it got the queue timeout's error.)
        let (tags, msgs) = c.round(1).await;
        assert_eq!(tags, "1Z", "{msgs:?}");
        assert_eq!(msgs.last().unwrap().body, b"T");
        frontend::close(b'S', "p1", &mut c.out).unwrap();
        frontend::sync(&mut c.out);
        assert_eq!(c.round(1).await.0, "3Z");
        drop(c.try_simple("ROLLBACK").await.unwrap());
    }
    for mut h in holders {
        run(&mut h, &["COMMIT"]).await.unwrap();
    }
}

/// A Parse sluice refuses itself inside a held block (a name the session has, 42P05) fails
/// the block, as the server's refusal fails it: 25P02 until it ends, and a `COMMIT` that rolls
/// back. The block went on and committed what followed, as if nothing had failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parse_refused_in_a_held_block_fails_it() {
    let env = start(0, "").await;
    let primary = env.topo.primary().port;
    let mut setup = Raw::connect(primary, "app", "app", "postgres").await;
    run(&mut setup, &["CREATE TABLE hp (x int)"]).await.unwrap();
    super::pins::direct_then_sluice(&env, async |port| {
        let mut c = Raw::connect(port, "app", "app", "postgres").await;
        let mut steps = Vec::new();
        for extended_begin in [false, true] {
            frontend::parse("s1", "SELECT 1", [], &mut c.out).unwrap();
            frontend::sync(&mut c.out);
            steps.push(c.round(1).await.0);
            if extended_begin {
                c.extended("", Some("BEGIN"), &[]);
                frontend::sync(&mut c.out);
            } else {
                frontend::query("BEGIN", &mut c.out).unwrap();
            }
            steps.push(c.round(1).await.0);
            frontend::parse("s1", "SELECT 2", [], &mut c.out).unwrap();
            frontend::sync(&mut c.out);
            let (tags, msgs) = c.round(1).await;
            let code = msgs[0].sqlstate().unwrap_or_default();
            let status = String::from_utf8_lossy(&msgs[1].body).into_owned();
            steps.push(format!("{tags} {code} {status}"));
            for sql in ["INSERT INTO hp VALUES (1)", "COMMIT"] {
                frontend::query(sql, &mut c.out).unwrap();
                let (tags, msgs) = c.round(1).await;
                let first = &msgs[0];
                let what = match first.sqlstate() {
                    Some(code) => code,
                    None => String::from_utf8_lossy(&first.body).into_owned(),
                };
                steps.push(format!("{tags} {what}"));
            }
            frontend::close(b'S', "s1", &mut c.out).unwrap();
            frontend::sync(&mut c.out);
            steps.push(c.round(1).await.0);
        }
        let mut check = Raw::connect(primary, "app", "app", "postgres").await;
        steps.extend(run(&mut check, &["SELECT count(*) FROM hp"]).await.unwrap());
        steps
    })
    .await;
}

/// A block whose first statement found no connection (the writer's only one busy past the
/// queue timeout) failed before any server had it; a prepared `ROLLBACK` of it (Bind and
/// Execute of a statement the session prepared, as psycopg and PgJDBC send it after a few
/// uses), or a `COMMIT` that rolls it back, is answered at once, without a connection, as a
/// simple one is. It needed the failed block opened on a server first: with no connection
/// free it failed too, and the client stayed in the failed block until one was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepared_rollback_of_a_block_no_server_has_needs_no_connection() {
    let env = start(
        0,
        "\n[pool]\nmax_connections = 1\nqueue_timeout = \"300ms\"\n",
    )
    .await;
    let mut holder = Raw::connect(env.port, "app", "app", "postgres").await;
    run(&mut holder, &["BEGIN", "SELECT txid_current()"])
        .await
        .unwrap();
    let mut c = Raw::connect(env.port, "app", "app", "postgres").await;
    for end in ["ROLLBACK", "COMMIT"] {
        frontend::parse("end", end, [], &mut c.out).unwrap();
        frontend::sync(&mut c.out);
        assert_eq!(c.round(1).await.0, "1Z");
        drop(c.try_simple("BEGIN").await.unwrap());
        let e = c.try_simple("SELECT txid_current()").await.unwrap_err();
        assert!(e.contains("became free within 300 ms"), "{e}");
        // Bind, Describe and Execute of the prepared statement, and Sync.
        frontend::bind(
            "",
            "end",
            [0i16],
            [None::<&str>; 0].iter(),
            |_: &Option<&str>, _| Ok(postgres_protocol::IsNull::No),
            [0i16],
            &mut c.out,
        )
        .map_err(|_| "bind")
        .unwrap();
        frontend::describe(b'P', "", &mut c.out).unwrap();
        frontend::execute("", 0, &mut c.out).unwrap();
        frontend::sync(&mut c.out);
        let (tags, msgs) = c.round(1).await;
        assert_eq!(tags, "2nCZ", "{end}: {msgs:?}");
        assert_eq!(msgs[2].body, b"ROLLBACK\0", "a failed block rolls back");
        assert_eq!(msgs[3].body, b"I");
        frontend::close(b'S', "end", &mut c.out).unwrap();
        frontend::sync(&mut c.out);
        assert_eq!(c.round(1).await.0, "3Z");
    }
    run(&mut holder, &["COMMIT"]).await.unwrap();
    assert_eq!(Raw::column(&c.try_simple("SELECT 1").await.unwrap()), ["1"]);
}
