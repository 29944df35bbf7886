//! Protocol edges where sluice answers or holds something itself: what the client sees is
//! what PostgreSQL would send on a direct connection.

use super::pg::raw::Raw;
use super::pg::start;
use postgres_protocol::message::frontend;
use std::time::Duration;

/// A batch longer than sluice forwards at once (its first 1,000 messages go to the server
/// before the rest has come) whose answers arrive while the client pauses: they are relayed
/// with the rest when the client ends the batch, and the session goes on. (They were once
/// passed on while sluice waited for the client, and then awaited for ever.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_batch_answered_while_its_client_pauses_is_relayed_in_full() {
    let env = start(0, "").await;
    let mut c = Raw::connect(env.port, "app", "app", "postgres").await;
    // 1,002 messages and no Sync: answers of about 70 KiB, flushed by the server meanwhile.
    for _ in 0..334 {
        c.extended("", Some("SELECT repeat('x', 200)"), &[]);
    }
    c.flush().await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    frontend::sync(&mut c.out);
    let (tags, _) = c.round(1).await;
    assert_eq!(tags, format!("{}Z", "12DC".repeat(334)));
    let rows = c.try_simple("SELECT 1").await.unwrap();
    assert_eq!(Raw::column(&rows), ["1"]);
}

/// `BEGIN`, `COMMIT` and `ROLLBACK` that sluice would answer itself (the BEGIN waiting for
/// the transaction's first statement) are answered so only when PostgreSQL would take them
/// as they are: a stray comma or word after them, or a second BEGIN, gets the server's
/// answer. And like any simple query, they end the unnamed statement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transaction_statements_sluice_answers_are_answered_as_postgres_does() {
    let env = start(0, "").await;
    let mut c = Raw::connect(env.port, "app", "app", "postgres").await;
    // Syntax errors, and the session goes on outside a transaction.
    for sql in [
        "BEGIN ,",
        "BEGIN ISOLATION LEVEL SERIALIZABLE,",
        "START TRANSACTION , READ ONLY",
    ] {
        let err = c.try_simple(sql).await.unwrap_err();
        assert!(err.starts_with("42601 syntax error"), "{sql}: {err}");
        let shown = c.try_simple("SHOW transaction_isolation").await.unwrap();
        assert_eq!(Raw::column(&shown), ["read committed"], "{sql}");
    }
    c.try_simple("BEGIN").await.unwrap();
    let err = c.try_simple("COMMIT foo").await.unwrap_err();
    assert!(err.starts_with("42601 syntax error"), "{err}");
    let err = c.try_simple("SELECT 1").await.unwrap_err();
    assert!(err.starts_with("25P02 "), "the transaction failed: {err}");
    c.try_simple("ROLLBACK").await.unwrap();

    // A second BEGIN: PostgreSQL's warning, and the first one's modes stay.
    c.try_simple("BEGIN ISOLATION LEVEL SERIALIZABLE")
        .await
        .unwrap();
    frontend::query("BEGIN", &mut c.out).unwrap();
    c.flush().await;
    let mut msgs = vec![c.next().await];
    while msgs.last().unwrap().tag != b'Z' {
        msgs.push(c.next().await);
    }
    let tags: String = msgs
        .iter()
        .map(|m| m.tag as char)
        .filter(|t| *t != 'S')
        .collect();
    assert_eq!(tags, "NCZ");
    let warning = msgs.iter().find(|m| m.tag == b'N').unwrap();
    assert_eq!(warning.sqlstate().as_deref(), Some("25001"));
    assert_eq!(msgs.last().unwrap().body, b"T");
    let shown = c.try_simple("SHOW transaction_isolation").await.unwrap();
    assert_eq!(Raw::column(&shown), ["serializable"]);
    c.try_simple("COMMIT").await.unwrap();

    // The unnamed statement does not outlive a simple query, even one sluice answers.
    frontend::parse("", "SELECT 1", [], &mut c.out).unwrap();
    frontend::sync(&mut c.out);
    assert_eq!(c.round(1).await.0, "1Z");
    c.try_simple("BEGIN").await.unwrap();
    c.extended("", None, &[]);
    frontend::sync(&mut c.out);
    let (tags, msgs) = c.round(1).await;
    assert_eq!(tags, "EZ");
    assert_eq!(msgs[0].sqlstate().as_deref(), Some("26000"));
    assert_eq!(
        msgs[0].field(b'M').as_deref(),
        Some("unnamed prepared statement does not exist")
    );
    assert_eq!(msgs[1].body, b"E");
    c.try_simple("ROLLBACK").await.unwrap();
    // Nor the unnamed portal (the one of the BEGIN sluice sends ahead is not the client's).
    c.try_simple("BEGIN").await.unwrap();
    frontend::execute("", 0, &mut c.out).unwrap();
    frontend::sync(&mut c.out);
    let (tags, msgs) = c.round(1).await;
    assert_eq!(tags, "EZ");
    assert_eq!(
        (msgs[0].sqlstate(), msgs[0].field(b'M')),
        (
            Some("34000".into()),
            Some("portal \"\" does not exist".into())
        )
    );
    c.try_simple("ROLLBACK").await.unwrap();
    // Nor one the server runs; and Describe of it fails alike.
    frontend::parse("", "SELECT 2", [], &mut c.out).unwrap();
    frontend::sync(&mut c.out);
    assert_eq!(c.round(1).await.0, "1Z");
    c.try_simple("SELECT 3").await.unwrap();
    frontend::describe(b'S', "", &mut c.out).unwrap();
    frontend::sync(&mut c.out);
    let (tags, msgs) = c.round(1).await;
    assert_eq!(tags, "EZ");
    assert_eq!(msgs[0].sqlstate().as_deref(), Some("26000"));
    // A statement parsed again works as before.
    c.extended("", Some("SELECT 4"), &[]);
    frontend::sync(&mut c.out);
    let (tags, msgs) = c.round(1).await;
    assert_eq!(tags, "12DCZ");
    assert_eq!(Raw::column(&msgs), ["4"]);
}

/// Prepared statements across pooled connections keep PostgreSQL's semantics where the
/// server's copy and the client's view could part: a Parse after DDL that changed the
/// statement's result is analysed afresh (a copy prepared before it would fail with
/// 0A000); a `DISCARD ALL` that failed dropped nothing; a Close of the unnamed statement
/// ends it; a Parse in a failed transaction is refused by the server (25P02), not answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_statements_follow_the_servers_view() {
    let env = start(
        0,
        "\n[pool]\nmax_connections = 1\nqueue_timeout = \"60s\"\n",
    )
    .await;
    env.psql("CREATE TABLE t2 (a int); INSERT INTO t2 VALUES (1)");
    let mut a = Raw::connect(env.port, "app", "app", "postgres").await;
    a.extended("s", Some("SELECT * FROM t2"), &[]);
    frontend::sync(&mut a.out);
    assert_eq!(a.round(1).await.0, "12DCZ");
    env.topo
        .primary()
        .sql("ALTER TABLE t2 ADD COLUMN b int")
        .unwrap();
    let mut b = Raw::connect(env.port, "app", "app", "postgres").await;
    b.extended("s", Some("SELECT * FROM t2"), &[]);
    frontend::sync(&mut b.out);
    let (tags, msgs) = b.round(1).await;
    assert_eq!(tags, "12DCZ", "{msgs:?}");

    // A DISCARD ALL refused inside a transaction block drops nothing.
    b.try_simple("BEGIN").await.unwrap();
    b.try_simple("SELECT 1").await.unwrap();
    let err = b.try_simple("DISCARD ALL").await.unwrap_err();
    assert!(err.starts_with("25001 "), "{err}");
    b.try_simple("ROLLBACK").await.unwrap();
    b.extended("s", None, &[]);
    frontend::sync(&mut b.out);
    assert_eq!(b.round(1).await.0, "2DCZ");

    // Close of the unnamed statement ends it.
    frontend::parse("", "SELECT 'a1'", [], &mut b.out).unwrap();
    frontend::sync(&mut b.out);
    assert_eq!(b.round(1).await.0, "1Z");
    frontend::close(b'S', "", &mut b.out).unwrap();
    frontend::sync(&mut b.out);
    assert_eq!(b.round(1).await.0, "3Z");
    b.extended("", None, &[]);
    frontend::sync(&mut b.out);
    let (tags, msgs) = b.round(1).await;
    assert_eq!(tags, "EZ");
    assert_eq!(msgs[0].sqlstate().as_deref(), Some("26000"));

    // DEALLOCATE of a protocol-level statement inside a transaction (psycopg evicts so from
    // its cache): the name goes, the transaction goes on.
    frontend::parse("g1", "SELECT 'g'", [], &mut b.out).unwrap();
    frontend::sync(&mut b.out);
    assert_eq!(b.round(1).await.0, "1Z");
    b.try_simple("BEGIN").await.unwrap();
    b.try_simple("SELECT 1").await.unwrap();
    b.try_simple("DEALLOCATE g1").await.unwrap();
    b.try_simple("SELECT 2").await.unwrap();
    b.try_simple("COMMIT").await.unwrap();
    b.extended("g1", None, &[]);
    frontend::sync(&mut b.out);
    let (tags, msgs) = b.round(1).await;
    assert_eq!(tags, "EZ");
    assert_eq!(msgs[0].sqlstate().as_deref(), Some("26000"));

    // A Close in the batch of the Parse it closes: the name is gone (and free again).
    frontend::parse("e1", "SELECT 'first'", [], &mut b.out).unwrap();
    frontend::close(b'S', "e1", &mut b.out).unwrap();
    frontend::parse("e1", "SELECT 'second'", [], &mut b.out).unwrap();
    b.extended("e1", None, &[]);
    frontend::sync(&mut b.out);
    let (tags, msgs) = b.round(1).await;
    assert_eq!(tags, "1312DCZ");
    assert_eq!(Raw::column(&msgs), ["second"]);
    frontend::close(b'S', "e1", &mut b.out).unwrap();
    frontend::sync(&mut b.out);
    assert_eq!(b.round(1).await.0, "3Z");
    frontend::parse("e2", "SELECT 'x'", [], &mut b.out).unwrap();
    frontend::close(b'S', "e2", &mut b.out).unwrap();
    frontend::sync(&mut b.out);
    assert_eq!(b.round(1).await.0, "13Z");
    frontend::parse("e2", "SELECT 'y'", [], &mut b.out).unwrap();
    frontend::sync(&mut b.out);
    assert_eq!(b.round(1).await.0, "1Z", "the name was free again");

    // A Parse in a failed transaction.
    b.try_simple("BEGIN").await.unwrap();
    b.try_simple("SELECT 1/0").await.unwrap_err();
    frontend::parse("f1", "SELECT 'f'", [], &mut b.out).unwrap();
    frontend::sync(&mut b.out);
    let (tags, msgs) = b.round(1).await;
    assert_eq!(tags, "EZ");
    assert_eq!(msgs[0].sqlstate().as_deref(), Some("25P02"));
    b.try_simple("ROLLBACK").await.unwrap();
    b.extended("f1", None, &[]);
    frontend::sync(&mut b.out);
    let (tags, msgs) = b.round(1).await;
    assert_eq!(tags, "EZ");
    assert_eq!(msgs[0].sqlstate().as_deref(), Some("26000"));
}

/// Session state follows PostgreSQL's own rules where they are easy to get wrong (found by
/// comparing with direct connections): `RESET ALL` keeps the role; a pin is released only by
/// a release that ran and committed; a `COMMIT` of a failed transaction keeps none of its
/// `SET`s; `RESET` of a startup parameter returns to the startup value (the server's own
/// connections start without it); a `SET` ending in a comment and quoted parameter names are
/// replayed right; `RESET SESSION AUTHORIZATION` ends a `SET ROLE`. Two connections, two
/// clients: what one leaves on a connection must never reach the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_state_follows_postgres_rules() {
    let env = start(
        0,
        "\n[pool]\nmax_connections = 2\nqueue_timeout = \"60s\"\n",
    )
    .await;
    env.topo
        .primary()
        .sql("CREATE ROLE r1; GRANT r1 TO app")
        .unwrap();
    let mut a = Raw::connect(env.port, "app", "app", "postgres").await;
    let mut b = Raw::connect(env.port, "app", "app", "postgres").await;
    let one = |msgs: Vec<super::pg::raw::Msg>| Raw::column(&msgs).concat();

    // RESET ALL keeps the role.
    a.try_simple("SET ROLE r1").await.unwrap();
    a.try_simple("RESET ALL").await.unwrap();
    assert_eq!(
        one(b.try_simple("SELECT current_user").await.unwrap()),
        "app"
    );
    assert_eq!(
        one(a.try_simple("SELECT current_user").await.unwrap()),
        "r1"
    );
    a.try_simple("RESET ROLE").await.unwrap();

    // A temporary table stays A's until a release that ran and committed.
    a.try_simple("CREATE TEMP TABLE mytmp (x text)")
        .await
        .unwrap();
    a.try_simple("INSERT INTO mytmp VALUES ('A-secret')")
        .await
        .unwrap();
    for release in [
        &["BEGIN", "SELECT 1/0", "DISCARD TEMP", "ROLLBACK"][..],
        &["BEGIN", "DISCARD TEMP", "ROLLBACK"],
    ] {
        for sql in release {
            let _ = a.try_simple(sql).await;
        }
        let err = b.try_simple("SELECT x FROM mytmp").await.unwrap_err();
        assert!(err.starts_with("42P01 "), "{release:?}: {err}");
        assert_eq!(
            one(a.try_simple("SELECT x FROM mytmp").await.unwrap()),
            "A-secret"
        );
    }
    a.try_simple("DISCARD TEMP").await.unwrap();

    // A COMMIT of a failed transaction keeps none of its SETs.
    a.try_simple("BEGIN").await.unwrap();
    a.try_simple("SET statement_timeout = '7s'").await.unwrap();
    a.try_simple("SELECT 1/0").await.unwrap_err();
    a.try_simple("COMMIT").await.unwrap();
    b.try_simple("SET statement_timeout = '3s'").await.unwrap();
    b.try_simple("SELECT 1").await.unwrap();
    assert_eq!(
        one(a.try_simple("SHOW statement_timeout").await.unwrap()),
        "0"
    );

    // COMMIT AND CHAIN keeps the block's SETs (the ROLLBACK after it undoes only what
    // follows it); ROLLBACK AND CHAIN drops them.
    for (end, want) in [("COMMIT AND CHAIN", "7s"), ("ROLLBACK AND CHAIN", "0")] {
        a.try_simple("RESET statement_timeout").await.unwrap();
        a.try_simple("BEGIN").await.unwrap();
        a.try_simple("SET statement_timeout = '7s'").await.unwrap();
        a.try_simple(end).await.unwrap();
        a.try_simple("ROLLBACK").await.unwrap();
        let mut c = Raw::connect(env.port, "app", "app", "postgres").await;
        assert_eq!(
            one(c.try_simple("SHOW statement_timeout").await.unwrap()),
            "0",
            "{end}: another client got A's setting"
        );
        c.try_simple("SET statement_timeout = '3s'").await.unwrap();
        assert_eq!(
            one(a.try_simple("SHOW statement_timeout").await.unwrap()),
            want,
            "{end}"
        );
    }
    a.try_simple("RESET statement_timeout").await.unwrap();

    // A SET ending in a comment, and a quoted parameter name.
    a.try_simple("SET search_path = public -- my schema")
        .await
        .unwrap();
    a.try_simple("SET statement_timeout = '5s'").await.unwrap();
    a.try_simple("SET datestyle = 'SQL, DMY'").await.unwrap();
    a.try_simple("SET \"DateStyle\" = 'German'").await.unwrap();
    b.try_simple("SET statement_timeout = '60s'").await.unwrap();
    b.try_simple("SELECT 1").await.unwrap();
    assert_eq!(
        one(a.try_simple("SHOW statement_timeout").await.unwrap()),
        "5s"
    );
    assert_eq!(
        one(a.try_simple("SHOW DateStyle").await.unwrap()),
        "German, DMY"
    );

    // RESET SESSION AUTHORIZATION ends a SET ROLE.
    a.try_simple("RESET ALL").await.unwrap();
    a.try_simple("SET ROLE r1").await.unwrap();
    a.try_simple("SET SESSION AUTHORIZATION app").await.unwrap();
    a.try_simple("RESET SESSION AUTHORIZATION").await.unwrap();
    b.try_simple("SELECT 1").await.unwrap();
    assert_eq!(
        one(a.try_simple("SELECT current_user").await.unwrap()),
        "app"
    );

    // RESET of a startup parameter: its startup value.
    let out = super::pg::psql_command(env.port, "app", "app", "postgres")
        .env("PGAPPNAME", "foo")
        .args([
            "-c",
            "SET application_name = 'bar'",
            "-c",
            "RESET application_name",
            "-c",
            "SHOW application_name",
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "foo",
        "{out:?}"
    );

    // Inside a transaction block too: its later statements run with the startup value (the
    // client told so), and it commits or rolls back with the block.
    let mut c = Raw::connect_with(
        env.port,
        "app",
        &[
            ("user", "app"),
            ("database", "postgres"),
            ("DateStyle", "SQL, MDY"),
        ],
    )
    .await
    .unwrap();
    let date = "SELECT date '2020-01-31'::text";
    let told = |msgs: &[super::pg::raw::Msg]| {
        msgs.iter()
            .filter(|m| m.tag == b'S' && m.body.starts_with(b"DateStyle\0"))
            .map(|m| String::from_utf8_lossy(&m.body[10..m.body.len() - 1]).into_owned())
            .next_back()
    };
    c.try_simple("SET DateStyle = 'German'").await.unwrap();
    c.try_simple("BEGIN").await.unwrap();
    let mut heard = c.simple_all("RESET DateStyle").await;
    heard.extend(c.simple_all(date).await);
    assert_eq!(one(heard.clone()), "01/31/2020");
    assert_eq!(told(&heard).as_deref(), Some("SQL, MDY"));
    c.try_simple("ROLLBACK").await.unwrap();
    assert_eq!(one(c.try_simple(date).await.unwrap()), "31.01.2020");
    c.try_simple("BEGIN").await.unwrap();
    c.try_simple("RESET ALL").await.unwrap();
    assert_eq!(one(c.try_simple(date).await.unwrap()), "01/31/2020");
    c.try_simple("COMMIT").await.unwrap();
    assert_eq!(one(c.try_simple(date).await.unwrap()), "01/31/2020");
    // A SET after the RESET in the same text is the one that counts.
    c.try_simple("BEGIN").await.unwrap();
    c.try_simple("RESET DateStyle; SET DateStyle = 'German'")
        .await
        .unwrap();
    assert_eq!(one(c.try_simple(date).await.unwrap()), "31.01.2020");
    c.try_simple("ROLLBACK").await.unwrap();
    assert_eq!(one(c.try_simple(date).await.unwrap()), "01/31/2020");
    // So is a SET LOCAL after it, until the block ends.
    c.try_simple("BEGIN").await.unwrap();
    c.try_simple("RESET DateStyle; SET LOCAL DateStyle = 'German'")
        .await
        .unwrap();
    assert_eq!(one(c.try_simple(date).await.unwrap()), "31.01.2020");
    c.try_simple("COMMIT").await.unwrap();
    assert_eq!(one(c.try_simple(date).await.unwrap()), "01/31/2020");
    // A RESET that COMMIT AND CHAIN in its text commits: the chained block, and what
    // follows it, have the startup value.
    c.try_simple("SET DateStyle = 'German'").await.unwrap();
    c.try_simple("BEGIN").await.unwrap();
    c.try_simple("RESET DateStyle; COMMIT AND CHAIN")
        .await
        .unwrap();
    assert_eq!(one(c.try_simple(date).await.unwrap()), "01/31/2020");
    c.try_simple("ROLLBACK").await.unwrap();
    assert_eq!(one(c.try_simple(date).await.unwrap()), "01/31/2020");

    // Settings in the startup packet's options (PGOPTIONS) are the session's; other
    // switches there are refused, not dropped.
    let out = super::pg::psql_command(env.port, "app", "app", "postgres")
        .env(
            "PGOPTIONS",
            "-c statement_timeout=5s --search-path=pg_catalog,\\ public",
        )
        .args(["-c", "SHOW statement_timeout", "-c", "SHOW search_path"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "5s\npg_catalog, public",
        "{out:?}"
    );
    let out = super::pg::psql_command(env.port, "app", "app", "postgres")
        .env("PGOPTIONS", "-B 100")
        .args(["-c", "SELECT 1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("startup option \"-B\" is not supported"),
        "{out:?}"
    );
}

/// The sessions view (admin API, `SHOW SESSIONS`) shows a session inside a transaction block
/// holding its connection between statements: `pinned_by` says `transaction`, `backend` names
/// the server; once the block ends, neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_in_a_transaction_shows_its_connection_between_statements() {
    let env = start(0, "").await;
    let mut c = Raw::connect(env.port, "app", "app", "postgres").await;
    let view = || {
        let all = env.process.runtime.sessions.all();
        assert_eq!(all.len(), 1);
        let s = &all[0];
        (
            s.pin_reasons(),
            s.current()
                .backend
                .map(|(server, _)| server.address.to_string()),
        )
    };
    // Published once the statement's answer is relayed: awaited, not raced.
    let shows = |want: (Vec<&'static str>, Option<String>)| {
        let view = &view;
        async move {
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            loop {
                let got = view();
                if got == want {
                    return;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "{got:?}, not {want:?}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    c.try_simple("BEGIN").await.unwrap();
    c.try_simple("SELECT 1").await.unwrap();
    shows((vec!["transaction"], Some(env.topo.primary().addr()))).await;
    c.try_simple("COMMIT").await.unwrap();
    shows((vec![], None)).await;
}
