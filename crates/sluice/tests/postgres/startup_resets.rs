//! Startup values a `RESET` returned to the server's defaults. Pooled connections start
//! without the client's startup parameters, so a statement after such a `RESET` in the same
//! unit is refused; in a flushed batch sluice owes the values to the connection until the
//! server stands at a Sync outside a block, sets them again before the session's next
//! statement, and records what the connection holds so the next session on it resets the
//! rest. The tests of flushed batches run the same steps through sluice and directly and
//! compare what every step gave.

use super::own_statements::{execute, round, simple, sync, unnamed, until};
use super::pg::raw::Raw;
use super::pg::start;
use super::pins::{connect_with_startup, direct_then_sluice, POOL};
use postgres_protocol::message::frontend;

/// Startup values a `RESET` in a flushed batch returned to the server's defaults are owed to
/// the connection until the server stands at a Sync outside a block. Meanwhile the batch may
/// `SET` more (recorded with the connection, so that the next session on it resets it: it
/// ran with the first session's `work_mem`) or open a block (where the owed values were set
/// again with a simple query, which dropped the block's suspended portal).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owed_startup_values_wait_for_the_block_and_the_record_keeps_the_rest() {
    let env = start(0, POOL).await;
    let direct = direct_then_sluice(&env, async |port| {
        let mut a = connect_with_startup(port, &[("application_name", "own_app")]).await;
        let mut b = Raw::connect(port, "app", "app", "postgres").await;
        let mut steps = Vec::new();
        unnamed(&mut a, "RESET application_name", 0);
        frontend::flush(&mut a.out);
        steps.push(until(&mut a, b'C').await);
        unnamed(&mut a, "SET work_mem = '1MB'", 0);
        sync(&mut a);
        steps.push(round(&mut a).await);
        // b is given the connection a gave back.
        steps.push(simple(&mut b, "SHOW work_mem").await);
        steps.push(simple(&mut a, "SHOW work_mem").await);
        steps.push(simple(&mut a, "SHOW application_name").await);
        // A block the batch opens after the RESET keeps its portal.
        unnamed(&mut a, "RESET application_name", 0);
        frontend::flush(&mut a.out);
        steps.push(until(&mut a, b'C').await);
        unnamed(&mut a, "BEGIN", 0);
        unnamed(&mut a, "SELECT g FROM generate_series(1, 3) g", 1);
        sync(&mut a);
        steps.push(round(&mut a).await);
        execute(&mut a, "", 1);
        sync(&mut a);
        steps.push(round(&mut a).await);
        steps.push(simple(&mut a, "COMMIT").await);
        steps.push(simple(&mut a, "SHOW application_name").await);
        steps
    })
    .await;
    assert_eq!(
        direct,
        [
            "1 2 C(RESET)",
            "1 2 C(SET) Z(I)",
            "T D(4MB) C(SHOW) Z(I)",
            "T D(1MB) C(SHOW) Z(I)",
            "T D(own_app) C(SHOW) Z(I)",
            "1 2 C(RESET)",
            "1 2 C(BEGIN) 1 2 D(1) s Z(T)",
            "D(2) s Z(T)",
            "C(COMMIT) Z(I)",
            "T D(own_app) C(SHOW) Z(I)",
        ]
    );
}

/// A `RESET` of one startup value returns it to the server's default on the connection,
/// which sluice sets again before the session's next statement; the session's other startup
/// values stay there. The connection's record said the session had set none of them: given
/// back before the session's next statement, the next session on it kept the first one's
/// `statement_timeout`. Likewise when the value was still owed after a flushed batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_given_back_after_a_reset_keeps_no_other_startup_value() {
    let env = start(0, POOL).await;
    let direct = direct_then_sluice(&env, async |port| {
        let mut a = connect_with_startup(
            port,
            &[
                ("application_name", "own_app"),
                ("options", "-c statement_timeout=5s"),
            ],
        )
        .await;
        let mut b = Raw::connect(port, "app", "app", "postgres").await;
        let mut steps = vec![simple(&mut a, "SHOW statement_timeout").await];
        steps.push(simple(&mut a, "RESET application_name").await);
        // b is given the connection a gave back.
        steps.push(simple(&mut b, "SHOW statement_timeout").await);
        steps.push(simple(&mut a, "SHOW statement_timeout").await);
        // Owed across a flushed batch and the batch after it.
        unnamed(&mut a, "RESET application_name", 0);
        frontend::flush(&mut a.out);
        steps.push(until(&mut a, b'C').await);
        unnamed(&mut a, "SET work_mem = '1MB'", 0);
        sync(&mut a);
        steps.push(round(&mut a).await);
        steps.push(simple(&mut b, "SHOW statement_timeout").await);
        steps.push(simple(&mut b, "SHOW work_mem").await);
        steps.push(simple(&mut a, "SHOW statement_timeout").await);
        steps.push(simple(&mut a, "SHOW application_name").await);
        steps
    })
    .await;
    assert_eq!(
        direct,
        [
            "T D(5s) C(SHOW) Z(I)",
            "C(RESET) Z(I)",
            "T D(0) C(SHOW) Z(I)",
            "T D(5s) C(SHOW) Z(I)",
            "1 2 C(RESET)",
            "1 2 C(SET) Z(I)",
            "T D(0) C(SHOW) Z(I)",
            "T D(4MB) C(SHOW) Z(I)",
            "T D(5s) C(SHOW) Z(I)",
            "T D(own_app) C(SHOW) Z(I)",
        ]
    );
}

/// A `RESET` of a startup value in a batch the client ended with a Flush returns it to the
/// server's default on the connection, where sluice sets nothing again until the batch's
/// Sync: a statement of the same batch after it (in a transaction block the batch opens, or
/// the client's) is refused with 0A000, and the batch fails as after an error of the
/// server's (what it ran before rolls back, the RESET with it). Directly, the statement
/// would read the startup value. After the Sync, the startup value is there again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_after_a_reset_in_a_flushed_part_of_its_batch_is_refused() {
    let env = start(0, POOL).await;
    let date = "SELECT date '2020-01-31'::text";
    let mut a = connect_with_startup(env.port, &[("DateStyle", "SQL, MDY")]).await;
    let mut steps = Vec::new();
    let reset_flushed = async |a: &mut Raw| {
        unnamed(a, "RESET DateStyle", 0);
        frontend::flush(&mut a.out);
        until(a, b'C').await
    };
    steps.push(reset_flushed(&mut a).await);
    unnamed(&mut a, date, 0);
    sync(&mut a);
    steps.push(round(&mut a).await);
    steps.push(simple(&mut a, date).await);
    // A block the batch opens.
    steps.push(reset_flushed(&mut a).await);
    unnamed(&mut a, "BEGIN", 0);
    unnamed(&mut a, date, 0);
    sync(&mut a);
    steps.push(round(&mut a).await);
    steps.push(simple(&mut a, date).await);
    // The client's block.
    steps.push(simple(&mut a, "BEGIN").await);
    steps.push(simple(&mut a, "SELECT 1").await);
    steps.push(reset_flushed(&mut a).await);
    unnamed(&mut a, date, 0);
    sync(&mut a);
    steps.push(round(&mut a).await);
    steps.push(simple(&mut a, date).await);
    steps.push(simple(&mut a, "ROLLBACK").await);
    steps.push(simple(&mut a, date).await);
    // A simple query of several statements sent on in the batch.
    steps.push(reset_flushed(&mut a).await);
    steps.push(simple(&mut a, &format!("SELECT 1; {date}")).await);
    steps.push(simple(&mut a, date).await);
    // What only sets may follow; after the Sync, the startup value is there again.
    steps.push(reset_flushed(&mut a).await);
    unnamed(&mut a, "SET work_mem = '2MB'", 0);
    sync(&mut a);
    steps.push(round(&mut a).await);
    steps.push(simple(&mut a, date).await);
    assert_eq!(
        steps,
        [
            "1 2 C(RESET)",
            "E(0A000) Z(I)",
            "T D(01/31/2020) C(SELECT 1) Z(I)",
            "1 2 C(RESET)",
            "E(0A000) Z(I)",
            "T D(01/31/2020) C(SELECT 1) Z(I)",
            "C(BEGIN) Z(T)",
            "T D(1) C(SELECT 1) Z(T)",
            "1 2 C(RESET)",
            "E(0A000) Z(E)",
            "E(25P02) Z(E)",
            "C(ROLLBACK) Z(I)",
            "T D(01/31/2020) C(SELECT 1) Z(I)",
            "1 2 C(RESET)",
            "E(0A000) Z(I)",
            "T D(01/31/2020) C(SELECT 1) Z(I)",
            "1 2 C(RESET)",
            "1 2 C(SET) Z(I)",
            "T D(01/31/2020) C(SELECT 1) Z(I)",
        ]
    );
}

/// A statement after a `RESET` of a startup parameter in the same query or batch is refused
/// (0A000) before any of the unit runs. Through sluice it would run with the server's default
/// (pooled connections start without the client's startup parameters, and sluice sets the
/// startup value again only between units), where directly it has the startup value:
/// `RESET search_path; INSERT INTO t …` would write another schema's table. Statements that
/// only set or control transactions may follow, as may any after a `SET` that gave the value
/// again, or one that does not read `application_name` by name after a `RESET` of it alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_after_a_reset_of_a_startup_value_in_its_unit_is_refused() {
    let env = start(0, "").await;
    let mut c = Raw::connect_with(
        env.port,
        "app",
        &[
            ("user", "app"),
            ("database", "postgres"),
            ("DateStyle", "SQL, MDY"),
            ("application_name", "mine"),
        ],
    )
    .await
    .unwrap();
    let one = |msgs: Vec<super::pg::raw::Msg>| Raw::column(&msgs).concat();
    let date = "SELECT date '2020-01-31'::text";
    let refused = |e: String| {
        assert!(
            e.starts_with("0A000") && e.contains("RESET of \"datestyle\""),
            "{e}"
        );
    };
    // A simple query: none of it runs (not the SET before the RESET either).
    refused(
        c.try_simple(&format!("SET work_mem = '1MB'; RESET DateStyle; {date}"))
            .await
            .unwrap_err(),
    );
    assert_eq!(one(c.try_simple("SHOW work_mem").await.unwrap()), "4MB");
    assert_eq!(one(c.try_simple(date).await.unwrap()), "01/31/2020");
    refused(
        c.try_simple(&format!("SET DateStyle TO DEFAULT; {date}"))
            .await
            .unwrap_err(),
    );
    refused(c.try_simple("RESET ALL; SHOW work_mem").await.unwrap_err());
    // A batch: its RESET and the statement after it in two Executes.
    c.extended("", Some("RESET DateStyle"), &[]);
    c.extended("", Some(date), &[]);
    frontend::sync(&mut c.out);
    let (tags, msgs) = c.round(1).await;
    assert_eq!(tags, "EZ");
    refused(msgs[0].text());
    // A statement prepared before, bound after the RESET.
    frontend::parse("d", date, [], &mut c.out).unwrap();
    frontend::sync(&mut c.out);
    assert_eq!(c.round(1).await.0, "1Z");
    c.extended("", Some("RESET DateStyle"), &[]);
    c.extended("d", None, &[]);
    frontend::sync(&mut c.out);
    assert_eq!(c.round(1).await.0, "EZ");
    assert_eq!(one(c.try_simple(date).await.unwrap()), "01/31/2020");
    // Inside a transaction block the server has, the block fails, as after an error of its
    // own.
    c.try_simple("BEGIN").await.unwrap();
    c.try_simple("SELECT 1").await.unwrap();
    refused(
        c.try_simple(&format!("RESET DateStyle; {date}"))
            .await
            .unwrap_err(),
    );
    let e = c.try_simple("SELECT 1").await.unwrap_err();
    assert!(e.starts_with("25P02"), "{e}");
    c.try_simple("ROLLBACK").await.unwrap();
    // A portal bound before, run on after the RESET.
    c.try_simple("BEGIN").await.unwrap();
    let dates = "SELECT (date '2020-01-31' + g)::text FROM generate_series(0, 2) g";
    frontend::parse("", dates, [], &mut c.out).unwrap();
    super::own_statements::bind(&mut c, "p", "");
    frontend::execute("p", 1, &mut c.out).unwrap();
    frontend::sync(&mut c.out);
    assert_eq!(c.round(1).await.0, "12DsZ");
    c.extended("", Some("RESET DateStyle"), &[]);
    frontend::execute("p", 0, &mut c.out).unwrap();
    frontend::sync(&mut c.out);
    let (tags, msgs) = c.round(1).await;
    assert_eq!(tags, "EZ");
    refused(msgs[0].text());
    c.try_simple("ROLLBACK").await.unwrap();
    // What may follow the RESET.
    assert_eq!(
        one(c
            .try_simple(&format!(
                "RESET DateStyle; SET DateStyle = 'German'; {date}"
            ))
            .await
            .unwrap()),
        "31.01.2020"
    );
    c.try_simple("RESET DateStyle").await.unwrap();
    assert_eq!(one(c.try_simple(date).await.unwrap()), "01/31/2020");
    c.try_simple("RESET DateStyle; SET work_mem = '2MB'; BEGIN; COMMIT")
        .await
        .unwrap();
    assert_eq!(
        one(c
            .try_simple("RESET application_name; SHOW work_mem")
            .await
            .unwrap()),
        "2MB"
    );
    // Unless the statement reads application_name.
    let e = c
        .try_simple("RESET application_name; SELECT current_setting('application_name')")
        .await
        .unwrap_err();
    assert!(e.contains("RESET of \"application_name\""), "{e}");
    c.extended("", Some("RESET application_name"), &[]);
    c.extended("", Some("SHOW application_name"), &[]);
    frontend::sync(&mut c.out);
    assert_eq!(c.round(1).await.0, "EZ");
    assert_eq!(
        one(c.try_simple("SHOW application_name").await.unwrap()),
        "mine"
    );
}
