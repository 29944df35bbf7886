//! Prepared statements whose result DDL changed since their clients parsed them, as
//! PostgreSQL answers them (`RevalidateCachedQuery`'s 0A000), whichever server connection
//! serves each use: copies prepared elsewhere, statements checked against the description
//! their client holds, after a Flush, and after a change rolled back or undone.

use super::pg::raw::Raw;
use super::pg::start;
use super::statements::ONE_CONNECTION;
use postgres_protocol::message::frontend;

/// Binds and executes the client's statement `name` to its Sync: the answers' types, then the
/// error's SQLSTATE or the rows' first column.
async fn run_named(c: &mut Raw, name: &str) -> String {
    c.extended(name, None, &[]);
    frontend::sync(&mut c.out);
    let (tags, msgs) = c.round(1).await;
    match msgs.iter().find(|m| m.tag == b'E') {
        Some(e) => format!("{tags} {}", e.sqlstate().unwrap_or_default()),
        None => format!("{tags} {}", Raw::column(&msgs).join(",")),
    }
}

/// Parses each `(name, text)` and describes it, each with its Sync: the answers' types.
async fn parse_and_describe(c: &mut Raw, statements: &[(&str, &str)]) -> Vec<String> {
    let mut got = Vec::new();
    for (name, sql) in statements {
        frontend::parse(name, sql, [], &mut c.out).unwrap();
        frontend::describe(b'S', name, &mut c.out).unwrap();
        frontend::sync(&mut c.out);
        got.push(c.round(1).await.0);
    }
    got
}

/// After DDL changed a statement's result (`ALTER COLUMN … TYPE`), every client that prepared
/// it before gets PostgreSQL's 0A000 at each use, as from PostgreSQL directly, until it
/// prepares it again: also the clients whose copy sluice never ran since (a copy prepared
/// again would give them rows of the new type under the description they hold: asyncpg
/// read a float's bits as an integer). Run directly and through sluice (one connection,
/// shared by all) alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_whose_result_changed_fails_for_every_client_that_prepared_it() {
    let env = start(0, ONE_CONNECTION).await;
    env.psql("CREATE TABLE rc (id int, a int); INSERT INTO rc VALUES (1, 1), (2, 100)");
    // What a client got for its statement `name` (parsed first if `parse`).
    async fn run(c: &mut Raw, name: &str, parse: bool) -> String {
        c.extended(
            name,
            parse.then_some("SELECT a FROM rc WHERE id > $1 ORDER BY id"),
            &[Some("0")],
        );
        frontend::sync(&mut c.out);
        let (tags, msgs) = c.round(1).await;
        match msgs.iter().find(|m| m.tag == b'E') {
            // (asyncpg tells this 0A000 by its routine, and then prepares again.)
            Some(e) => format!("{tags} {} {}", e.text(), e.field(b'R').unwrap_or_default()),
            None => format!("{tags} {}", Raw::column(&msgs).join(",")),
        }
    }
    let mut seen = Vec::new();
    for (n, port) in [env.topo.primary().port, env.port].into_iter().enumerate() {
        let table = format!(
            "ALTER TABLE rc ALTER COLUMN a TYPE {}",
            ["float4", "int"][n]
        );
        let mut clients = Vec::new();
        for _ in 0..3 {
            // A startup parameter that its statements' analysis reads (their key, and so
            // where their change is recorded, depends on it).
            let params = [
                ("user", "app"),
                ("database", "postgres"),
                ("TimeZone", "UTC"),
            ];
            let mut c = Raw::connect_with(port, "app", &params).await.unwrap();
            assert!(run(&mut c, "s", true).await.ends_with(" 1,100"));
            clients.push(c);
        }
        env.topo.primary().sql(&table).unwrap();
        let mut got = Vec::new();
        for c in clients.iter_mut() {
            got.push(run(c, "s", false).await);
            got.push(run(c, "s", false).await);
        }
        // Prepared again: the new type's rows.
        for (i, c) in clients.iter_mut().enumerate() {
            got.push(run(c, &format!("s{i}"), true).await);
        }
        seen.push(got);
    }
    let refused = "EZ 0A000 cached plan must not change result type RevalidateCachedQuery";
    assert_eq!(seen[0][..6], [refused; 6], "directly");
    assert_eq!(seen[1], seen[0], "through sluice as directly");
}

/// The change of a statement's result is its database's: after DDL in one database, a client
/// of another database (another pool) that prepared the same text goes on as directly,
/// without an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_change_in_one_database_is_no_other_databases() {
    let env = super::pg::start_prepared(
        0,
        |topo| {
            for sql in [
                "CREATE ROLE other LOGIN PASSWORD 'other'",
                "CREATE DATABASE otherdb OWNER other",
                "CREATE TABLE tt (a int)",
                "INSERT INTO tt VALUES (1)",
            ] {
                topo.primary().sql(sql).unwrap();
            }
        },
        |topo| {
            super::pg::config(
                topo,
                // Room for both pools' connections: each keeps its copy.
                "\n[pool]\nmax_connections = 4\n\n[[users]]\nname = \"other\"\npassword = \"other\"\n",
            )
        },
    )
    .await;
    let mut y = Raw::connect(env.port, "other", "other", "otherdb").await;
    y.try_simple("CREATE TABLE tt (a int); INSERT INTO tt VALUES (2)")
        .await
        .unwrap();
    let mut x = Raw::connect(env.port, "app", "app", "postgres").await;
    async fn run(c: &mut Raw, parse: bool) -> String {
        c.extended("s", parse.then_some("SELECT * FROM tt"), &[]);
        frontend::sync(&mut c.out);
        let (tags, msgs) = c.round(1).await;
        match msgs.iter().find(|m| m.tag == b'E') {
            Some(e) => format!("{tags} {}", e.text()),
            None => format!("{tags} {}", Raw::column(&msgs).join(",")),
        }
    }
    assert_eq!(run(&mut x, true).await, "12DCZ 1");
    assert_eq!(run(&mut y, true).await, "12DCZ 2");
    env.topo
        .primary()
        .sql("ALTER TABLE tt ADD COLUMN b int")
        .unwrap();
    let refused = "EZ 0A000 cached plan must not change result type";
    for _ in 0..2 {
        assert_eq!(run(&mut x, false).await, refused);
        assert_eq!(run(&mut y, false).await, "2DCZ 2", "the other database's");
    }
}

/// A statement its client described is prepared afresh on a connection that never had it
/// (the one it was parsed on is held by another client's transaction): after DDL that
/// changed its result, the client gets PostgreSQL's 0A000 there too, not rows of the new
/// type under the description it holds (of the statement, or of a portal bound to it, as
/// PgJDBC keeps); after DDL that left its result alone, its rows;
/// after DDL that leaves it unparsable, inside a transaction block, the error where its
/// Bind is, after what the batch ran before it (and the block as PostgreSQL leaves it).
/// Directly and through sluice (two connections) alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_described_statement_prepared_elsewhere_after_ddl_fails_as_directly() {
    let env = start(
        0,
        "\n[pool]\nmax_connections = 2\nqueue_timeout = \"30s\"\n",
    )
    .await;
    let mut seen = Vec::new();
    for port in [env.topo.primary().port, env.port] {
        let primary = env.topo.primary();
        primary
            .sql("DROP TABLE IF EXISTS sh; CREATE TABLE sh (id int, a int, b int); INSERT INTO sh VALUES (1, 7, 8)")
            .unwrap();
        let mut a = Raw::connect(port, "app", "app", "postgres").await;
        let mut got = parse_and_describe(
            &mut a,
            &[
                ("same", "SELECT a FROM sh WHERE id = 1"),
                ("changed", "SELECT a FROM sh"),
                ("gone", "SELECT b FROM sh"),
            ],
        )
        .await;
        // Described as a portal (at its first run, as PgJDBC does), not as a statement.
        frontend::parse("bound", "SELECT id, a FROM sh", [], &mut a.out).unwrap();
        a.extended("bound", None, &[]);
        frontend::describe(b'P', "", &mut a.out).unwrap();
        frontend::sync(&mut a.out);
        got.push(a.round(1).await.0);
        // The connection that holds them is another client's until it ends its block.
        let mut h = Raw::connect(port, "app", "app", "postgres").await;
        h.try_simple("BEGIN; SELECT 1").await.unwrap();
        // No result changes.
        primary.sql("ALTER TABLE sh ADD COLUMN c int").unwrap();
        got.push(run_named(&mut a, "same").await);
        // Its column's type changes.
        primary
            .sql("ALTER TABLE sh ALTER COLUMN a TYPE float8")
            .unwrap();
        got.push(run_named(&mut a, "changed").await);
        got.push(run_named(&mut a, "changed").await);
        got.push(run_named(&mut a, "bound").await);
        // Gone, inside a block that ran something before it in the same batch.
        primary.sql("ALTER TABLE sh DROP COLUMN b").unwrap();
        a.try_simple("BEGIN; SELECT 1").await.unwrap();
        a.extended("t", Some("SELECT 2"), &[]);
        a.extended("gone", None, &[]);
        frontend::sync(&mut a.out);
        let (tags, msgs) = a.round(1).await;
        let code = msgs
            .iter()
            .find(|m| m.tag == b'E')
            .and_then(|e| e.sqlstate());
        got.push(format!("{tags} {} {code:?}", Raw::column(&msgs).join(",")));
        let after = a.try_simple("ROLLBACK").await.unwrap();
        got.push(after.iter().map(|m| m.tag as char).collect());
        h.try_simple("COMMIT").await.unwrap();
        seen.push(got);
    }
    assert_eq!(
        seen[0],
        [
            "1tTZ",
            "1tTZ",
            "1tTZ",
            "12DCTZ",
            "2DCZ 7",
            "EZ 0A000",
            "EZ 0A000",
            "EZ 0A000",
            "12DCEZ 2 Some(\"42703\")",
            "C"
        ],
        "directly"
    );
    assert_eq!(seen[1], seen[0], "through sluice as directly");
}

/// As above, after a batch the client ended with a Flush (libpq's `PQsendFlushRequest`,
/// pgx's `SendFlushRequest`): the statement is checked where it is prepared afresh too (a
/// round trip ended by a Flush), and one that no longer parses puts the server where the
/// client's message would have: skipping to the client's Sync, with the error told there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_described_statement_prepared_after_a_flush_fails_as_directly() {
    let env = start(
        0,
        "\n[pool]\nmax_connections = 2\nqueue_timeout = \"30s\"\n",
    )
    .await;
    async fn flushed(c: &mut Raw, sql: &str) -> String {
        c.extended("", Some(sql), &[]);
        frontend::flush(&mut c.out);
        c.flush().await;
        let mut tags = String::new();
        while !tags.ends_with('C') {
            tags.push(c.next().await.tag as char);
        }
        tags
    }
    let mut seen = Vec::new();
    for port in [env.topo.primary().port, env.port] {
        let primary = env.topo.primary();
        primary
            .sql("DROP TABLE IF EXISTS fl; CREATE TABLE fl (id int, a int, b int); INSERT INTO fl VALUES (1, 7, 8)")
            .unwrap();
        let mut a = Raw::connect(port, "app", "app", "postgres").await;
        let mut got = parse_and_describe(
            &mut a,
            &[
                ("changed", "SELECT a FROM fl"),
                ("gone", "SELECT b FROM fl"),
            ],
        )
        .await;
        // The connection that holds them is another client's until it ends its block.
        let mut h = Raw::connect(port, "app", "app", "postgres").await;
        h.try_simple("BEGIN; SELECT 1").await.unwrap();
        primary
            .sql("ALTER TABLE fl ALTER COLUMN a TYPE float8")
            .unwrap();
        got.push(flushed(&mut a, "SELECT 5").await);
        got.push(run_named(&mut a, "changed").await);
        primary.sql("ALTER TABLE fl DROP COLUMN b").unwrap();
        got.push(flushed(&mut a, "SELECT 6").await);
        got.push(run_named(&mut a, "gone").await);
        let after = a.try_simple("SELECT 1").await.unwrap();
        got.push(Raw::column(&after).join(","));
        h.try_simple("COMMIT").await.unwrap();
        seen.push(got);
    }
    assert_eq!(
        seen[0],
        ["1tTZ", "1tTZ", "12DC", "EZ 0A000", "12DC", "EZ 42703", "1"],
        "directly"
    );
    assert_eq!(seen[1], seen[0], "through sluice as directly");
}

/// A change of a prepared statement's result that is rolled back, or undone, gives its
/// clients rows again, as PostgreSQL (which checks a prepared statement's result at each
/// use) gives them: a client that holds a description is checked against it where its
/// statement is prepared afresh, not refused for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_change_rolled_back_or_undone_gives_rows_again() {
    let env = start(
        0,
        "\n[pool]\nmax_connections = 2\nqueue_timeout = \"30s\"\n",
    )
    .await;
    let mut seen = Vec::new();
    for port in [env.topo.primary().port, env.port] {
        let primary = env.topo.primary();
        primary
            .sql("DROP TABLE IF EXISTS rb; CREATE TABLE rb (id int, a int); INSERT INTO rb VALUES (1, 7)")
            .unwrap();
        let (mut x, mut y) = (
            Raw::connect(port, "app", "app", "postgres").await,
            Raw::connect(port, "app", "app", "postgres").await,
        );
        let mut got = Vec::new();
        for c in [&mut x, &mut y] {
            frontend::parse("s", "SELECT a FROM rb", [], &mut c.out).unwrap();
            frontend::describe(b'S', "s", &mut c.out).unwrap();
            frontend::sync(&mut c.out);
            got.push(c.round(1).await.0);
        }
        // Changed inside a block that is rolled back.
        x.try_simple("BEGIN; ALTER TABLE rb ALTER COLUMN a TYPE bigint")
            .await
            .unwrap();
        got.push(run_named(&mut x, "s").await);
        x.try_simple("ROLLBACK").await.unwrap();
        got.push(run_named(&mut x, "s").await);
        got.push(run_named(&mut y, "s").await);
        // Changed, then changed back.
        primary
            .sql("ALTER TABLE rb ALTER COLUMN a TYPE float8")
            .unwrap();
        got.push(run_named(&mut y, "s").await);
        got.push(run_named(&mut x, "s").await);
        primary
            .sql("ALTER TABLE rb ALTER COLUMN a TYPE int")
            .unwrap();
        got.push(run_named(&mut y, "s").await);
        got.push(run_named(&mut x, "s").await);
        seen.push(got);
    }
    assert_eq!(
        seen[0],
        [
            "1tTZ", "1tTZ", "EZ 0A000", "2DCZ 7", "2DCZ 7", "EZ 0A000", "EZ 0A000", "2DCZ 7",
            "2DCZ 7"
        ],
        "directly"
    );
    assert_eq!(seen[1], seen[0], "through sluice as directly");
}

/// In a failed transaction block PostgreSQL refuses every Bind with 25P02 before it looks at
/// the statement: also one whose result changed (its 0A000 comes only outside the failed
/// block). Directly and through sluice alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_statement_in_a_failed_block_gets_25p02_as_directly() {
    let env = start(0, ONE_CONNECTION).await;
    env.psql("CREATE TABLE rcf (id int, a int); INSERT INTO rcf VALUES (1, 1)");
    let direct = env.topo.primary().port;
    let mut logs = Vec::new();
    for port in [direct, env.port] {
        let mut a = Raw::connect(port, "app", "app", "postgres").await;
        let mut log = parse_and_describe(&mut a, &[("s", "SELECT a FROM rcf")]).await;
        log.push(run_named(&mut a, "s").await);
        env.psql(if port == direct {
            "ALTER TABLE rcf ALTER COLUMN a TYPE bigint"
        } else {
            "ALTER TABLE rcf ALTER COLUMN a TYPE int"
        });
        a.try_simple("BEGIN").await.unwrap();
        // Fails the block (0A000), then 25P02 until its end, for every statement.
        log.push(run_named(&mut a, "s").await);
        log.push(run_named(&mut a, "s").await);
        log.push(a.try_simple("SELECT 1").await.unwrap_err()[..5].to_string());
        log.push(run_named(&mut a, "s").await);
        a.try_simple("ROLLBACK").await.unwrap();
        log.push(run_named(&mut a, "s").await);
        logs.push(log);
    }
    assert_eq!(
        logs[0],
        ["1tTZ", "2DCZ 1", "EZ 0A000", "EZ 25P02", "25P02", "EZ 25P02", "EZ 0A000"]
    );
    assert_eq!(logs[1], logs[0]);
}

/// A statement parsed after DDL changed its text's result, whose Parse waited for a server
/// connection while another client's older statement of that text showed the change (0A000):
/// the server analyses the new one only when it is sent, under the new table, as PostgreSQL
/// analyses a direct client's Parse that arrives after the change. sluice took its result
/// epoch when it read the Parse and refused it with 0A000, and node-postgres, which parses a
/// named query once, kept failing (a differential review with asyncpg and node-postgres).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_parsed_while_a_change_came_to_light_is_not_refused() {
    let env = start(0, ONE_CONNECTION).await;
    env.psql("CREATE TABLE rw (id int, v int); INSERT INTO rw VALUES (1, 10)");
    const TEXT: &str = "SELECT * FROM rw";
    let mut transcripts = Vec::new();
    for port in [env.topo.primary().port, env.port] {
        let mut a = Raw::connect(port, "app", "app", "postgres").await;
        let mut b = Raw::connect(port, "app", "app", "postgres").await;
        let mut holder = Raw::connect(port, "app", "app", "postgres").await;
        let mut steps = parse_and_describe(&mut a, &[("sa", TEXT)]).await;
        env.topo
            .primary()
            .sql("ALTER TABLE rw ADD COLUMN w int DEFAULT 7")
            .unwrap();
        // The one server connection is busy: a's Bind, then b's Parse, wait for it.
        holder.try_simple("BEGIN").await.unwrap();
        holder.try_simple("SELECT 1").await.unwrap();
        a.extended("sa", None, &[]);
        frontend::sync(&mut a.out);
        a.flush().await;
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        frontend::parse("sb", TEXT, [], &mut b.out).unwrap();
        frontend::describe(b'S', "sb", &mut b.out).unwrap();
        frontend::sync(&mut b.out);
        b.flush().await;
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        holder.try_simple("COMMIT").await.unwrap();
        let a_got = a.until_ready().await;
        let error = a_got.iter().find(|m| m.tag == b'E');
        steps.push(error.and_then(|e| e.sqlstate()).unwrap_or_default());
        steps.push(
            b.until_ready()
                .await
                .iter()
                .map(|m| m.tag as char)
                .collect(),
        );
        steps.push(run_named(&mut b, "sb").await);
        steps.push(run_named(&mut b, "sb").await);
        transcripts.push(steps);
        env.topo
            .primary()
            .sql("ALTER TABLE rw DROP COLUMN w")
            .unwrap();
    }
    assert_eq!(transcripts[1], transcripts[0], "through sluice as directly");
    assert_eq!(
        transcripts[0],
        ["1tTZ", "0A000", "1tTZ", "2DCZ 1", "2DCZ 1"]
    );
}
