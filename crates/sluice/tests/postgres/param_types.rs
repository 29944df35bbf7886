//! A prepared statement's parameter types are fixed by its analysis, when the client parses
//! it, from the tables as they are then; PostgreSQL analyses a prepared statement again
//! after DDL with those types kept. Through sluice, where server connections share copies of
//! a text, every client must get what its own Parse would get directly: a client that
//! parses after a column's type changed gets the new types, one that parsed before keeps
//! the old ones, on whichever connection its statement runs. Each scenario runs directly and
//! through sluice, and the two transcripts must be the same.

use super::pg::raw::{Msg, Raw};
use super::pg::{start, PgEnv};
use postgres_protocol::message::frontend;

/// One server connection: every client's statement meets the copies the others made.
const ONE: &str = "\n[pool]\nmax_connections = 1\nqueue_timeout = \"10s\"\n";
/// Two: a statement can run where it was never prepared.
const TWO: &str = "\n[pool]\nmax_connections = 2\nqueue_timeout = \"10s\"\n";

/// A Parse on its own and its Sync (libpq's `PQprepare`, psycopg's `prepare=True`).
async fn prepare(c: &mut Raw, name: &str, sql: &str) -> String {
    frontend::parse(name, sql, [], &mut c.out).unwrap();
    frontend::sync(&mut c.out);
    c.round(1).await.0
}

/// Bind, Execute and Sync of statement `name` with text parameters: what came back, as the
/// tags, the SQLSTATE of an error and the first column of each row.
async fn run(c: &mut Raw, name: &str, params: &[Option<&str>]) -> String {
    c.extended(name, None, params);
    frontend::sync(&mut c.out);
    outcome(&c.round(1).await.1)
}

fn outcome(msgs: &[Msg]) -> String {
    let tags: String = msgs.iter().map(|m| m.tag as char).collect();
    let codes: Vec<String> = msgs.iter().filter_map(|m| m.sqlstate()).collect();
    format!("{tags} {codes:?} {:?}", Raw::column(msgs))
}

async fn connect(port: u16) -> Raw {
    Raw::connect(port, "app", "app", "postgres").await
}

async fn sql(c: &mut Raw, text: &str) -> String {
    match c.try_simple(text).await {
        Ok(msgs) => format!("{:?}", Raw::column(&msgs)),
        Err(e) => e,
    }
}

fn direct_port(env: &PgEnv) -> u16 {
    env.topo.primary().port
}

/// `h1` and `h2` each hold a server connection in a transaction block (through sluice: both
/// of a pool of two); then `h1`'s is let go if `free_h1` holds for its backend's pid, else
/// `h2`'s. The holder still in its block.
async fn hold_both_free_one<'a>(
    h1: &'a mut Raw,
    h2: &'a mut Raw,
    free_h1: impl Fn(&str) -> bool,
) -> &'a mut Raw {
    sql(h1, "BEGIN").await;
    let p1 = sql(h1, "SELECT pg_backend_pid()").await;
    sql(h2, "BEGIN").await;
    sql(h2, "SELECT 1").await;
    let (free, held) = if free_h1(&p1) { (h1, h2) } else { (h2, h1) };
    sql(free, "COMMIT").await;
    held
}

/// A column's type changes between one client's Parse and another's (`numeric` to `int`,
/// `int` to `bigint`), and a column is added: the later client's statement is analysed
/// afresh (its parameter is an `int`, a `bigint`; its rows have the new column), the
/// earlier client's keeps its analysis (a `numeric` parameter rounded into the `int`
/// column, an `int` parameter too small for the new value, 0A000 for the changed result).
async fn scenario(port: u16, tag: &str) -> Vec<String> {
    let mut log = Vec::new();
    let mut admin = connect(port).await;
    let mut x = connect(port).await;
    let (n, w, u) = (format!("n_{tag}"), format!("w_{tag}"), format!("u_{tag}"));
    sql(
        &mut admin,
        &format!(
            "CREATE TABLE {n} (a numeric); CREATE TABLE {w} (a int, b text); \
             INSERT INTO {w} VALUES (1, 'one'); CREATE TABLE {u} (a int); INSERT INTO {u} VALUES (1)"
        ),
    )
    .await;
    let insert = format!("INSERT INTO {n} (a) VALUES ($1)");
    let select_w = format!("SELECT b FROM {w} WHERE a = $1");
    let select_u = format!("SELECT * FROM {u} WHERE a = $1");
    for (name, text) in [("ins", &insert), ("selw", &select_w), ("selu", &select_u)] {
        log.push(prepare(&mut x, name, text).await);
    }
    log.push(run(&mut x, "ins", &[Some("1")]).await);
    log.push(run(&mut x, "selw", &[Some("1")]).await);
    log.push(run(&mut x, "selu", &[Some("1")]).await);
    log.push(
        sql(
            &mut admin,
            &format!(
                "ALTER TABLE {n} ALTER COLUMN a TYPE int; ALTER TABLE {w} ALTER COLUMN a TYPE bigint; \
                 INSERT INTO {w} VALUES (3000000000, 'big'); ALTER TABLE {u} ADD COLUMN c int"
            ),
        )
        .await,
    );
    // A client that parses now: the tables as they are now.
    let mut z = connect(port).await;
    for (name, text) in [("ins", &insert), ("selw", &select_w), ("selu", &select_u)] {
        log.push(prepare(&mut z, name, text).await);
    }
    log.push(run(&mut z, "ins", &[Some("1.6")]).await);
    log.push(run(&mut z, "selw", &[Some("3000000000")]).await);
    log.push(run(&mut z, "selu", &[Some("1")]).await);
    // The client that parsed before: its analysis, kept.
    log.push(run(&mut x, "ins", &[Some("1.6")]).await);
    log.push(run(&mut x, "selw", &[Some("3000000000")]).await);
    log.push(run(&mut x, "selu", &[Some("1")]).await);
    log.push(sql(&mut admin, &format!("SELECT a FROM {n} ORDER BY a")).await);
    log
}

/// What PostgreSQL itself answers, checked here so that the comparison below cannot pass on
/// a scenario that tests nothing.
fn assert_meaningful(direct: &[String]) {
    // The later client: an int parameter refuses 1.6; a bigint one takes 3000000000; rows
    // of the new shape.
    assert!(direct[10].contains("22P02"), "{direct:?}");
    assert!(direct[11].contains("[\"big\"]"), "{direct:?}");
    assert!(direct[12].starts_with("2DCZ"), "{direct:?}");
    // The earlier one: 1.6 rounded into the int column; 3000000000 too big for its int
    // parameter; its result changed.
    assert!(direct[13].starts_with("2CZ"), "{direct:?}");
    assert!(direct[14].contains("22003"), "{direct:?}");
    assert!(direct[15].contains("0A000"), "{direct:?}");
    assert_eq!(direct[16], "[\"1\", \"2\"]", "{direct:?}");
}

/// One server connection: every copy of a text the later client could be given was
/// prepared before the DDL, by the earlier client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_client_gets_the_parameter_types_of_its_own_parse() {
    let env = start(0, ONE).await;
    let direct = scenario(direct_port(&env), "d1").await;
    assert_meaningful(&direct);
    let through = scenario(env.port, "s1").await;
    assert_eq!(through, direct);
}

/// Two server connections, the earlier client's statement runs on the one it never ran on:
/// prepared there with the type its Parse fixed (`numeric`), not the table's new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_keeps_its_parameter_types_on_a_connection_it_never_ran_on() {
    let env = start(0, TWO).await;
    let mut logs = Vec::new();
    for (port, tag) in [(direct_port(&env), "d2"), (env.port, "s2")] {
        let mut admin = connect(port).await;
        let mut x = connect(port).await;
        let mut h1 = connect(port).await;
        let mut h2 = connect(port).await;
        let n = format!("n_{tag}");
        sql(&mut admin, &format!("CREATE TABLE {n} (a numeric)")).await;
        let insert = format!("INSERT INTO {n} (a) VALUES ($1)");
        let mut log = vec![prepare(&mut x, "ins", &insert).await];
        // x's first run, on one connection while h1 holds the other (through sluice).
        sql(&mut h1, "BEGIN").await;
        let h1_pid = sql(&mut h1, "SELECT pg_backend_pid()").await;
        sql(&mut x, "BEGIN").await;
        let x_pid = sql(&mut x, "SELECT pg_backend_pid()").await;
        log.push(run(&mut x, "ins", &[Some("1")]).await);
        sql(&mut x, "COMMIT").await;
        sql(&mut h1, "COMMIT").await;
        if port == env.port {
            assert_ne!(h1_pid, x_pid, "two server connections");
        }
        log.push(
            sql(
                &mut admin,
                &format!("ALTER TABLE {n} ALTER COLUMN a TYPE int"),
            )
            .await,
        );
        // Both connections held; the one x never ran on is let go: x runs there.
        let held = hold_both_free_one(&mut h1, &mut h2, |p| p != x_pid).await;
        log.push(run(&mut x, "ins", &[Some("1.6")]).await);
        sql(held, "COMMIT").await;
        log.push(run(&mut x, "ins", &[Some("2.4")]).await);
        log.push(sql(&mut admin, &format!("SELECT a FROM {n} ORDER BY a")).await);
        logs.push(log);
    }
    // Directly: the numeric parameter is rounded into the int column.
    assert_eq!(logs[0][5], "[\"1\", \"2\", \"2\"]", "{:?}", logs[0]);
    assert_eq!(logs[1], logs[0]);
}

/// `timezone_abbreviations` decides what a literal's `IST` means when the statement is
/// analysed. One client reads it as India's, the other as Israel's; both run their prepared
/// statement on one server connection, then on the other (where neither ran it yet: the
/// copies of the text there are shared): each still gets its own reading, as directly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_copy_is_analysed_under_the_settings_of_its_clients_parse() {
    let env = start(0, TWO).await;
    let text = "SELECT ('2020-01-01 12:00 IST'::timestamptz AT TIME ZONE 'UTC')::text";
    let mut logs = Vec::new();
    for port in [direct_port(&env), env.port] {
        let (mut a, mut b) = (connect(port).await, connect(port).await);
        let (mut h1, mut h2) = (connect(port).await, connect(port).await);
        sql(&mut a, "SET timezone_abbreviations = 'India'").await;
        let mut log = vec![
            prepare(&mut a, "q", text).await,
            prepare(&mut b, "q", text).await,
        ];
        // h1 holds one connection: a and b run on the other.
        sql(&mut h1, "BEGIN").await;
        let unused = sql(&mut h1, "SELECT pg_backend_pid()").await;
        log.push(run(&mut a, "q", &[]).await);
        log.push(run(&mut b, "q", &[]).await);
        sql(&mut h1, "COMMIT").await;
        // Both held, then the one neither ran on is let go: a, then b, run there.
        let held = hold_both_free_one(&mut h1, &mut h2, |p| p == unused).await;
        log.push(run(&mut a, "q", &[]).await);
        log.push(run(&mut b, "q", &[]).await);
        sql(held, "COMMIT").await;
        logs.push(log);
    }
    // Directly: India's IST is UTC+5:30, Israel's (the default list's) UTC+2.
    let (india, israel) = (
        "2DCZ [] [\"2020-01-01 06:30:00\"]",
        "2DCZ [] [\"2020-01-01 10:00:00\"]",
    );
    assert_eq!(
        logs[0][2..],
        [india, israel, india, israel],
        "{:?}",
        logs[0]
    );
    assert_eq!(logs[1], logs[0]);
}
