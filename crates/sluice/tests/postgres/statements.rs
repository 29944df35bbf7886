//! Prepared statements shared on pooled connections: what one client's batch does to the
//! statements sluice holds there must never break another client's.

use super::pg::raw::Raw;
use super::pg::{start, PgEnv};
use postgres_protocol::message::frontend;

pub(crate) const ONE_CONNECTION: &str = "\n[pool]\nmax_connections = 1\nqueue_timeout = \"30s\"\n";

/// sluice with [`ONE_CONNECTION`], and two clients A and B served by that one connection, A
/// with statement `name` (`SELECT 41 AS v`) prepared and run once.
async fn two_clients_on_one_connection(name: &str) -> (PgEnv, Raw, Raw) {
    let env = start(0, ONE_CONNECTION).await;
    let mut a = Raw::connect(env.port, "app", "app", "postgres").await;
    let b = Raw::connect(env.port, "app", "app", "postgres").await;
    a.extended(name, Some("SELECT 41 AS v"), &[]);
    frontend::sync(&mut a.out);
    assert_eq!(a.round(1).await.0, "12DCZ");
    (env, a, b)
}

/// A batch that fails early makes the server skip the rest up to its Sync, including what
/// sluice added there: the Close and Parse that prepare a text afresh on the connection.
/// The connection still has the statement another client uses, and sluice must know it:
/// that client's statement keeps working (it got 42P05 `already exists` at every later use).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_server_skips_after_an_error_leaves_other_clients_statements_working() {
    let (_env, mut a, mut b) = two_clients_on_one_connection("a").await;
    // B: an error, then a Parse of the same text (skipped by the server).
    b.extended("", Some("SELECT 1/0"), &[]);
    frontend::parse("b", "SELECT 41 AS v", [], &mut b.out).unwrap();
    frontend::sync(&mut b.out);
    let (tags, msgs) = b.round(1).await;
    // (PostgreSQL folds 1/0 when it plans the Bind.)
    assert_eq!(tags, "1EZ");
    assert_eq!(msgs[1].sqlstate().as_deref(), Some("22012"));
    for _ in 0..2 {
        a.extended("a", None, &[]);
        frontend::sync(&mut a.out);
        let (tags, msgs) = a.round(1).await;
        assert_eq!(tags, "2DCZ", "{msgs:?}");
        assert_eq!(Raw::column(&msgs), ["41"]);
    }
    // B never had "b": directly, binding it fails.
    b.extended("b", None, &[]);
    frontend::sync(&mut b.out);
    let (tags, msgs) = b.round(1).await;
    assert_eq!(tags, "EZ");
    assert_eq!(msgs[0].sqlstate().as_deref(), Some("26000"));
}

/// In a failed transaction PostgreSQL refuses to parse anything but what ends it: a
/// `ROLLBACK` (or `COMMIT`, `ROLLBACK TO`) prepared there, named or not, parses, binds and
/// runs, and the session leaves the failed transaction (it stayed in it, holding the pool's
/// one connection).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_prepared_in_a_failed_transaction_ends_it() {
    let env = start(0, ONE_CONNECTION).await;
    let mut a = Raw::connect(env.port, "app", "app", "postgres").await;
    for name in ["", "rb"] {
        a.try_simple("BEGIN").await.unwrap();
        assert!(a.try_simple("SELECT 1/0").await.is_err());
        a.extended(name, Some("ROLLBACK"), &[]);
        frontend::sync(&mut a.out);
        let (tags, msgs) = a.round(1).await;
        assert_eq!(tags, "12CZ", "{name:?}: {msgs:?}");
        assert_eq!(msgs[3].body, b"I", "{name:?}");
    }
    // A COMMIT of a failed transaction rolls it back, and a ROLLBACK TO recovers it.
    a.try_simple("CREATE TABLE kept (id int)").await.unwrap();
    a.try_simple("BEGIN").await.unwrap();
    a.try_simple("INSERT INTO kept VALUES (1); SAVEPOINT s")
        .await
        .unwrap();
    assert!(a.try_simple("SELECT 1/0").await.is_err());
    a.extended("", Some("ROLLBACK TO s"), &[]);
    frontend::sync(&mut a.out);
    let (tags, msgs) = a.round(1).await;
    assert_eq!(
        (tags.as_str(), msgs[3].body.as_slice()),
        ("12CZ", &b"T"[..])
    );
    a.extended("", Some("COMMIT"), &[]);
    frontend::sync(&mut a.out);
    let (tags, msgs) = a.round(1).await;
    assert_eq!(
        (tags.as_str(), msgs[3].body.as_slice()),
        ("12CZ", &b"I"[..])
    );
    let rows = a.try_simple("SELECT count(*) FROM kept").await.unwrap();
    assert_eq!(Raw::column(&rows), ["1"]);
    // Another client is served: nothing holds the connection.
    let mut b = Raw::connect(env.port, "app", "app", "postgres").await;
    b.try_simple("SELECT 1").await.unwrap();
}

/// Two clients prepare the same text under settings that change what it means: another
/// `TimeZone` (the literal is converted when the text is analysed), another `search_path`
/// (other tables, other parameter types). Sharing one copy on the connection gave one
/// client the other's answer; each gets its own, as directly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_text_prepared_under_other_settings_is_another_statement() {
    let env = start(0, ONE_CONNECTION).await;
    let mut setup = Raw::connect(env.port, "app", "app", "postgres").await;
    setup
        .try_simple(
            "CREATE SCHEMA ra; CREATE TABLE ra.t (k int, v text); INSERT INTO ra.t VALUES (1, 'a'); \
             CREATE SCHEMA rb; CREATE TABLE rb.t (k text, v text); INSERT INTO rb.t VALUES ('1', 'b')",
        )
        .await
        .unwrap();
    let mut a = Raw::connect(env.port, "app", "app", "postgres").await;
    let mut b = Raw::connect(env.port, "app", "app", "postgres").await;
    a.try_simple("SET TimeZone = 'UTC'").await.unwrap();
    b.try_simple("SET TimeZone = 'Asia/Tokyo'").await.unwrap();
    let literal = "SELECT '2020-01-01 00:00'::timestamptz AS t";
    let lookup = "SELECT v FROM t WHERE k = $1";
    let run = |c: &mut Raw, name: &str, sql: Option<&str>, param: &[Option<&str>]| {
        c.extended(name, sql, param);
        frontend::sync(&mut c.out);
    };
    for (c, want) in [
        (&mut a, "2020-01-01 00:00:00+00"),
        (&mut b, "2020-01-01 00:00:00+09"),
    ] {
        run(c, "lit", Some(literal), &[]);
        assert_eq!(Raw::column(&c.round(1).await.1), [want]);
    }
    // A again, after B prepared the same text on the same connection. (With another
    // search_path PostgreSQL would analyse it again itself.)
    run(&mut a, "lit", None, &[]);
    assert_eq!(Raw::column(&a.round(1).await.1), ["2020-01-01 00:00:00+00"]);
    a.try_simple("SET search_path = ra").await.unwrap();
    b.try_simple("SET search_path = rb").await.unwrap();
    for (c, want) in [(&mut a, "a"), (&mut b, "b")] {
        run(c, "look", Some(lookup), &[Some("1")]);
        assert_eq!(Raw::column(&c.round(1).await.1), [want]);
    }
    frontend::describe(b'S', "look", &mut a.out).unwrap();
    frontend::sync(&mut a.out);
    let (tags, msgs) = a.round(1).await;
    assert_eq!(tags, "tTZ");
    // ParameterDescription: one parameter, int4 (23) as under ra.
    assert_eq!(msgs[0].body, [0, 1, 0, 0, 0, 23]);
    run(&mut a, "look", None, &[Some("1")]);
    assert_eq!(Raw::column(&a.round(1).await.1), ["a"]);
    // Prepared again inside a block with a setting of its own (SET LOCAL): that copy is no
    // one else's, nor the session's own once the block is over.
    a.try_simple("BEGIN; SET LOCAL TimeZone = 'Asia/Tokyo'")
        .await
        .unwrap();
    run(&mut a, "lit_local", Some(literal), &[]);
    assert_eq!(Raw::column(&a.round(1).await.1), ["2020-01-01 00:00:00+09"]);
    a.try_simple("COMMIT").await.unwrap();
    run(&mut a, "lit", None, &[]);
    assert_eq!(Raw::column(&a.round(1).await.1), ["2020-01-01 00:00:00+00"]);
    // B changes its time zone in the batch that prepares the text again: its copy is not A's.
    frontend::parse("", "SET TimeZone = 'Pacific/Kiritimati'", [], &mut b.out).unwrap();
    b.extended("", None, &[]);
    b.extended("lit_kiri", Some(literal), &[]);
    frontend::sync(&mut b.out);
    assert_eq!(Raw::column(&b.round(1).await.1), ["2020-01-01 00:00:00+14"]);
    run(&mut a, "lit", None, &[]);
    assert_eq!(Raw::column(&a.round(1).await.1), ["2020-01-01 00:00:00+00"]);
    // And a session that changes its time zone after preparing keeps the analysis of its
    // Parse, as PostgreSQL keeps it (the epoch of UTC midnight, shown in the new zone).
    a.try_simple("SET TimeZone = 'Asia/Tokyo'").await.unwrap();
    run(&mut a, "lit", None, &[]);
    assert_eq!(Raw::column(&a.round(1).await.1), ["2020-01-01 09:00:00+09"]);
}

/// The statements sluice shares on a connection are no client's: a client that finds one's
/// name (in `pg_prepared_statements`) can neither deallocate nor bind it, as directly a
/// session cannot touch another's; and `DEALLOCATE` written with a comment deallocates the
/// client's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_statements_are_no_clients_and_deallocate_is_read_as_postgresql_reads_it() {
    let (_env, mut a, mut b) = two_clients_on_one_connection("s").await;
    let names = b
        .try_simple("SELECT name FROM pg_prepared_statements WHERE name LIKE 'sluice%'")
        .await
        .unwrap();
    let shared = Raw::column(&names);
    assert_eq!(shared.len(), 1, "{shared:?}");
    let err = b
        .try_simple(&format!("DEALLOCATE {}", shared[0]))
        .await
        .unwrap_err();
    assert!(err.starts_with("26000"), "{err}");
    b.extended(&shared[0], None, &[]);
    frontend::sync(&mut b.out);
    let (tags, msgs) = b.round(1).await;
    assert_eq!(tags, "EZ");
    assert_eq!(msgs[0].sqlstate().as_deref(), Some("26000"));
    let err = b
        .try_simple(&format!("EXECUTE {}", shared[0]))
        .await
        .unwrap_err();
    assert!(err.starts_with("26000"), "{err}");
    a.extended("s", None, &[]);
    frontend::sync(&mut a.out);
    assert_eq!(Raw::column(&a.round(1).await.1), ["41"]);
    // Inside a block the DEALLOCATE reaches the server (its failure would have to be the
    // server's): A's statement is prepared again where it is next used.
    b.try_simple("BEGIN").await.unwrap();
    b.try_simple("SELECT 1").await.unwrap();
    let _ = b.try_simple(&format!("DEALLOCATE {}", shared[0])).await;
    b.try_simple("ROLLBACK").await.unwrap();
    a.extended("s", None, &[]);
    frontend::sync(&mut a.out);
    assert_eq!(Raw::column(&a.round(1).await.1), ["41"]);
    // A's own, deallocated with a comment after the name: gone, and its name free again.
    a.try_simple("DEALLOCATE s -- done with it").await.unwrap();
    a.extended("s", None, &[]);
    frontend::sync(&mut a.out);
    let (tags, msgs) = a.round(1).await;
    assert_eq!(
        (tags.as_str(), msgs[0].sqlstate()),
        ("EZ", Some("26000".into()))
    );
    a.extended("s", Some("SELECT 42 AS v"), &[]);
    frontend::sync(&mut a.out);
    assert_eq!(Raw::column(&a.round(1).await.1), ["42"]);
}

/// A `DEALLOCATE` sluice cannot see (in a `DO` block or a function, by another client on the
/// same connection) takes the shared statements off the server: the one use that finds its
/// statement gone fails (26000, as it would directly if the client's own session had run
/// it), and the statement is prepared afresh at the next (it failed at every use until some
/// client parsed the same text again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_statement_deallocated_where_sluice_cannot_see_is_prepared_again() {
    let (_env, mut a, mut b) = two_clients_on_one_connection("s").await;
    b.try_simple("DO $$ BEGIN EXECUTE 'DEALLOCATE ALL'; END $$")
        .await
        .unwrap();
    a.extended("s", None, &[]);
    frontend::sync(&mut a.out);
    let (tags, msgs) = a.round(1).await;
    assert_eq!(
        (tags.as_str(), msgs[0].sqlstate()),
        ("EZ", Some("26000".into()))
    );
    for _ in 0..2 {
        a.extended("s", None, &[]);
        frontend::sync(&mut a.out);
        let (tags, msgs) = a.round(1).await;
        assert_eq!(tags, "2DCZ", "{msgs:?}");
        assert_eq!(Raw::column(&msgs), ["41"]);
    }
}

/// A block that failed before the server had it (its BEGIN held back by sluice, its first
/// statement refused by sluice) answers the rest as PostgreSQL does: a text that goes on after
/// the failure writes nothing, an extended `COMMIT` rolls back (and says so), `COMMIT AND
/// CHAIN` opens the next block.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_that_failed_before_the_server_had_it_fails_as_postgresqls() {
    let env = start(0, ONE_CONNECTION).await;
    let mut c = Raw::connect(env.port, "app", "app", "postgres").await;
    c.try_simple("CREATE TABLE fb (k int)").await.unwrap();
    let fail = |c: &mut Raw| {
        frontend::query("BEGIN", &mut c.out).unwrap();
        frontend::query("EXECUTE sluice_00000000000000ab", &mut c.out).unwrap();
    };
    fail(&mut c);
    let (tags, _) = c.round(2).await;
    assert_eq!(tags, "CZEZ");
    let err = c
        .try_simple("INSERT INTO fb VALUES (1); COMMIT")
        .await
        .unwrap_err();
    assert!(err.starts_with("25P02"), "{err}");
    c.extended("", Some("INSERT INTO fb VALUES (2)"), &[]);
    c.extended("", Some("COMMIT"), &[]);
    frontend::sync(&mut c.out);
    let (tags, msgs) = c.round(1).await;
    assert_eq!((tags.as_str(), msgs[1].body.as_slice()), ("EZ", &b"E"[..]));
    c.extended("", Some("COMMIT"), &[]);
    frontend::sync(&mut c.out);
    let (tags, msgs) = c.round(1).await;
    assert_eq!(tags, "12CZ");
    assert_eq!(
        (msgs[2].body.as_slice(), msgs[3].body.as_slice()),
        (&b"ROLLBACK\0"[..], &b"I"[..])
    );
    fail(&mut c);
    c.round(2).await;
    let chained = c.try_simple("COMMIT AND CHAIN").await.unwrap();
    assert_eq!(chained[0].body, b"ROLLBACK\0");
    c.try_simple("INSERT INTO fb VALUES (3)").await.unwrap();
    c.try_simple("ROLLBACK").await.unwrap();
    let rows = c.try_simple("SELECT count(*) FROM fb").await.unwrap();
    assert_eq!(Raw::column(&rows), ["0"]);
}

/// A statement parsed before a block and first prepared on the connection inside it, after
/// the block changed a setting its analysis reads: that copy is no other client's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_prepared_under_a_blocks_own_settings_is_no_one_elses() {
    let env = start(0, ONE_CONNECTION).await;
    let literal = "SELECT '2020-01-01 00:00'::timestamptz AS t";
    let mut a = Raw::connect(env.port, "app", "app", "postgres").await;
    let mut b = Raw::connect(env.port, "app", "app", "postgres").await;
    for c in [&mut a, &mut b] {
        c.try_simple("SET TimeZone = 'UTC'").await.unwrap();
    }
    // A Parse on its own: answered by sluice, prepared where it is first bound.
    frontend::parse("early", literal, [], &mut a.out).unwrap();
    frontend::sync(&mut a.out);
    assert_eq!(a.round(1).await.0, "1Z");
    a.try_simple("BEGIN; SET LOCAL TimeZone = 'Pacific/Kiritimati'")
        .await
        .unwrap();
    a.extended("early", None, &[]);
    frontend::sync(&mut a.out);
    assert_eq!(Raw::column(&a.round(1).await.1), ["2020-01-01 00:00:00+14"]);
    a.try_simple("ROLLBACK").await.unwrap();
    // B prepares the text the same way, and binds it where A's copy is.
    frontend::parse("mine", literal, [], &mut b.out).unwrap();
    frontend::sync(&mut b.out);
    assert_eq!(b.round(1).await.0, "1Z");
    b.extended("mine", None, &[]);
    frontend::sync(&mut b.out);
    assert_eq!(Raw::column(&b.round(1).await.1), ["2020-01-01 00:00:00+00"]);
}

/// A batch of messages that ask the server for nothing the session's connection would
/// hold (a Sync alone, a Flush alone, Closes of statements and portals) is answered at once
/// while the session holds no connection, as PostgreSQL answers it, however busy the pool:
/// it waited for a connection (and got 08006 after `queue_timeout`; a psycopg pipeline's
/// closing Sync broke the connection for good).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_that_need_no_connection_are_answered_while_the_pool_is_busy() {
    let env = start(
        0,
        "\n[pool]\nmax_connections = 1\nqueue_timeout = \"60s\"\n",
    )
    .await;
    let mut holder = Raw::connect(env.port, "app", "app", "postgres").await;
    let mut c = Raw::connect(env.port, "app", "app", "postgres").await;
    frontend::parse("s", "SELECT 1", [], &mut c.out).unwrap();
    frontend::sync(&mut c.out);
    assert_eq!(c.round(1).await.0, "1Z");
    holder.try_simple("BEGIN; SELECT 1").await.unwrap();
    let answers = async {
        frontend::sync(&mut c.out);
        let bare = c.round(1).await.0;
        frontend::close(b'S', "s", &mut c.out).unwrap();
        frontend::close(b'S', "never", &mut c.out).unwrap();
        frontend::close(b'P', "p", &mut c.out).unwrap();
        frontend::sync(&mut c.out);
        let closes = c.round(1).await.0;
        // A Flush alone answers nothing; the query after it waits for the connection.
        frontend::flush(&mut c.out);
        c.flush().await;
        (bare, closes)
    };
    let (bare, closes) = tokio::time::timeout(std::time::Duration::from_secs(20), answers)
        .await
        .expect("answered without a connection");
    assert_eq!((bare.as_str(), closes.as_str()), ("Z", "333Z"));
    let query = tokio::spawn(async move {
        let rows = c.try_simple("SELECT 2").await.map(|m| Raw::column(&m));
        (rows, c)
    });
    holder.try_simple("COMMIT").await.unwrap();
    let (rows, mut c) = query.await.unwrap();
    assert_eq!(rows.unwrap(), ["2"]);
    // The statement closed is gone, as directly.
    c.extended("s", None, &[]);
    frontend::sync(&mut c.out);
    let (tags, msgs) = c.round(1).await;
    let code = msgs
        .iter()
        .find(|m| m.tag == b'E')
        .and_then(|e| e.sqlstate());
    assert_eq!((tags.as_str(), code.as_deref()), ("EZ", Some("26000")));
}

/// Statement and portal names alike in their first 63 bytes are one name in PostgreSQL (its
/// tables keep no more of a name): a second Parse is refused with 42P05 and a third spelling
/// binds the first statement, through sluice (which renames statements on its connections)
/// as directly. A session's open portals are bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_alike_in_their_first_63_bytes_are_one_and_portals_are_bounded() {
    let env = start(0, "").await;
    let long = |tail: &str| format!("{}{tail}", "s".repeat(63));
    for (port, via) in [(env.topo.primary().port, "directly"), (env.port, "sluice")] {
        let mut c = Raw::connect(port, "app", "app", "postgres").await;
        frontend::parse(&long("A"), "SELECT 1", [], &mut c.out).unwrap();
        frontend::sync(&mut c.out);
        frontend::parse(&long("B"), "SELECT 2", [], &mut c.out).unwrap();
        frontend::sync(&mut c.out);
        let (tags, msgs) = c.round(2).await;
        assert_eq!(tags, "1ZEZ", "{via}");
        assert_eq!(msgs[2].sqlstate().as_deref(), Some("42P05"), "{via}");
        c.extended(&long("C"), None, &[]);
        frontend::sync(&mut c.out);
        let (tags, msgs) = c.round(1).await;
        assert_eq!(
            (tags.as_str(), Raw::column(&msgs)),
            ("2DCZ", vec!["1".into()]),
            "{via}"
        );
    }
    // Portals: sluice keeps at most PORTALS_PER_SESSION (10,000) open in a transaction.
    let mut c = Raw::connect(env.port, "app", "app", "postgres").await;
    c.simple_all("BEGIN").await;
    frontend::parse("p", "SELECT 1", [], &mut c.out).unwrap();
    let bind = |c: &mut Raw, portal: &str| {
        frontend::bind(
            portal,
            "p",
            [],
            [] as [Option<&str>; 0],
            |_, _| unreachable!(),
            [],
            &mut c.out,
        )
        .map_err(|_| "bind")
        .unwrap()
    };
    for i in 0..10_000 {
        bind(&mut c, &format!("portal {i}"));
    }
    frontend::sync(&mut c.out);
    let (tags, _) = c.round(1).await;
    assert_eq!(tags, format!("1{}Z", "2".repeat(10_000)));
    // The unnamed portal is still there to bind; one more named one is refused, and the
    // transaction fails.
    bind(&mut c, "");
    bind(&mut c, "one too many");
    frontend::sync(&mut c.out);
    let (tags, msgs) = c.round(1).await;
    assert_eq!(tags, "2EZ");
    assert_eq!(msgs[1].sqlstate().as_deref(), Some("54000"));
    assert!(
        msgs[1].text().contains("at most 10000 open portals"),
        "{}",
        msgs[1].text()
    );
    // The transaction ends, and its portals with it: binding works again.
    c.simple_all("ROLLBACK").await;
    frontend::parse("", "SELECT 2", [], &mut c.out).unwrap();
    bind(&mut c, "after");
    frontend::sync(&mut c.out);
    assert_eq!(c.round(1).await.0, "12Z");
}
