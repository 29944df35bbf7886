//! Batches ended by a Flush instead of a Sync: where their implicit transaction stays, and
//! where the batch after one goes (a transaction block the batch opened stays with its
//! session; a write after a read fetched on a replica goes to the primary).

use super::pg::raw::Raw;
use super::pg::{start, wait_replayed};
use super::pins::{direct_then_sluice, POOL};
use super::routing::run;
use postgres_protocol::message::frontend;

/// Sends a Flush, and reads until the type bytes end with `last` (ParameterStatus and
/// notices left out): the type bytes, and the first column of the rows.
async fn flushed(c: &mut Raw, last: &str) -> (String, Vec<String>) {
    frontend::flush(&mut c.out);
    c.flush().await;
    let (mut tags, mut msgs) = (String::new(), Vec::new());
    while !tags.ends_with(last) {
        let m = c.next().await;
        if !matches!(m.tag, b'S' | b'N') {
            tags.push(m.tag as char);
            msgs.push(m);
        }
    }
    (tags, Raw::column(&msgs))
}

/// A batch that opens a transaction block itself and ends with a Flush: when its next
/// statement belongs elsewhere, the Sync sluice sends finds the block open, and the session
/// stays in it, on its connection (it was given back, inside the transaction, to the next
/// client, who saw the uncommitted row).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_opened_in_a_flushed_batch_stays_with_its_session() {
    let env = start(1, "").await;
    let mut setup = Raw::connect(env.topo.primary().port, "app", "app", "postgres").await;
    run(&mut setup, &["CREATE TABLE t (x int)"]).await.unwrap();
    wait_replayed(&env.topo).await;
    let mut c = Raw::connect(env.port, "app", "app", "postgres").await;
    c.extended("", Some("BEGIN"), &[]);
    c.extended("", Some("INSERT INTO t VALUES (42)"), &[]);
    frontend::close(b'P', "", &mut c.out).unwrap();
    frontend::flush(&mut c.out);
    c.flush().await;
    let mut tags = String::new();
    while !tags.ends_with('3') {
        tags.push(c.next().await.tag as char);
    }
    assert_eq!(tags, "12C12C3");
    c.extended("", Some("SELECT count(*) FROM t WHERE x = 42"), &[]);
    frontend::sync(&mut c.out);
    let (tags, msgs) = c.round(1).await;
    assert_eq!(tags, "12DCZ");
    assert_eq!(Raw::column(&msgs), ["1"], "its own transaction's row");
    assert_eq!(msgs.last().unwrap().body, b"T");
    // Another client's autocommit write is its own, outside that transaction.
    let mut other = Raw::connect(env.port, "app", "app", "postgres").await;
    frontend::query("INSERT INTO t VALUES (43)", &mut other.out).unwrap();
    let (_, msgs) = other.round(1).await;
    assert_eq!(
        msgs.last().unwrap().body,
        b"I",
        "not lent the open transaction"
    );
    run(&mut c, &["ROLLBACK"]).await.unwrap();
    let left = run(&mut setup, &["SELECT x FROM t"]).await;
    assert_eq!(
        left,
        Ok(vec!["43".into()]),
        "the other client's row committed, 42 not"
    );
}

/// A read whose rows a Flush fetched on a replica, then a write before the Sync (psycopg's
/// pipeline mode fetches so): the implicit transaction on the replica ran only reads, so the
/// write goes to the primary, as directly it runs there (it failed with 25006 on the
/// replica). A batch that goes on with the read's portal stays with it; so does one that
/// leaves a suspended portal alone (a later batch may take more of its rows).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_after_a_read_fetched_with_a_flush_goes_to_the_primary() {
    let env = start(1, "").await;
    let mut setup = Raw::connect(env.topo.primary().port, "app", "app", "postgres").await;
    run(&mut setup, &["CREATE TABLE fl (x int)"]).await.unwrap();
    wait_replayed(&env.topo).await;
    let mut c = Raw::connect(env.port, "app", "app", "postgres").await;
    for round in 0..2 {
        c.extended("", Some("SELECT pg_is_in_recovery()"), &[]);
        let got = flushed(&mut c, "C").await;
        assert_eq!(got, ("12DC".into(), vec!["t".into()]), "round {round}");
        let sql = format!("INSERT INTO fl VALUES ({round}) RETURNING pg_is_in_recovery()");
        c.extended("", Some(&sql), &[]);
        frontend::sync(&mut c.out);
        let (tags, msgs) = c.round(1).await;
        assert_eq!(tags, "12DCZ", "round {round}: {msgs:?}");
        assert_eq!(Raw::column(&msgs), ["f"], "round {round}");
    }
    let rows = run(
        &mut setup,
        &["SELECT string_agg(x::text, ',' ORDER BY x) FROM fl"],
    )
    .await;
    assert_eq!(rows, Ok(vec!["0,1".into()]));

    // A portal suspended after one of its rows: the next batch takes more of it, there.
    let rows = "SELECT pg_is_in_recovery() FROM generate_series(1, 3)";
    // Bind of the unnamed statement, without parameters, to `portal`.
    fn bind(c: &mut Raw, portal: &str) {
        let no_params: [Option<&str>; 0] = [];
        frontend::bind(
            portal,
            "",
            [],
            no_params,
            |_, _| Ok(postgres_protocol::IsNull::Yes),
            [],
            &mut c.out,
        )
        .map_err(|_| "bind")
        .unwrap();
    }
    frontend::parse("", rows, [], &mut c.out).unwrap();
    bind(&mut c, "");
    frontend::execute("", 1, &mut c.out).unwrap();
    assert_eq!(
        flushed(&mut c, "s").await,
        ("12Ds".into(), vec!["t".into()])
    );
    frontend::execute("", 1, &mut c.out).unwrap();
    assert_eq!(flushed(&mut c, "s").await, ("Ds".into(), vec!["t".into()]));
    // A write that leaves it alone stays in its implicit transaction, on the replica.
    frontend::parse("", "INSERT INTO fl VALUES (9)", [], &mut c.out).unwrap();
    bind(&mut c, "w");
    frontend::execute("w", 0, &mut c.out).unwrap();
    frontend::sync(&mut c.out);
    let (tags, msgs) = c.round(1).await;
    assert_eq!(tags, "12EZ", "{msgs:?}");
    assert_eq!(msgs[2].sqlstate().as_deref(), Some("25006"));
    // The session carries on, and its next write reaches the primary.
    run(&mut c, &["INSERT INTO fl VALUES (2)"]).await.unwrap();
    let rows = run(
        &mut setup,
        &["SELECT string_agg(x::text, ',' ORDER BY x) FROM fl"],
    )
    .await;
    assert_eq!(rows, Ok(vec!["0,1,2".into()]));
    // Transactions of one snapshot: the read and the write are not split into two.
    run(
        &mut c,
        &["SET default_transaction_isolation = 'repeatable read'"],
    )
    .await
    .unwrap();
    c.extended("", Some("SELECT pg_is_in_recovery()"), &[]);
    assert_eq!(
        flushed(&mut c, "C").await,
        ("12DC".into(), vec!["t".into()])
    );
    c.extended("", Some("INSERT INTO fl VALUES (3)"), &[]);
    frontend::sync(&mut c.out);
    let (tags, msgs) = c.round(1).await;
    assert_eq!(tags, "12EZ", "{msgs:?}");
    assert_eq!(msgs[2].sqlstate().as_deref(), Some("25006"));
}

/// A `SET` in a batch ended by a Flush runs in the batch's implicit transaction: an error
/// later in the batch, before its Sync, rolls it back, and the session does not have it.
/// sluice took it when the Flush was answered and set it again on the next connection the
/// session was given (another client held the one it had run on). A batch that ends without
/// an error keeps it, also on another connection; and so does a batch too long to be one
/// unit (sent on in parts, ahead of its Sync) only if nothing in it fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_in_a_flushed_batch_counts_only_once_its_batch_commits() {
    let env = start(0, POOL).await;
    direct_then_sluice(&env, async |port| {
        let mut a = Raw::connect(port, "app", "app", "postgres").await;
        let mut b = Raw::connect(port, "app", "app", "postgres").await;
        let mut steps = Vec::new();
        for (value, then, long) in [
            ("7MB", "SELECT 1/0", false),
            ("9MB", "SELECT 1", false),
            ("5MB", "SELECT 1/0", true),
            ("6MB", "SELECT 1", true),
        ] {
            a.extended("", Some(&format!("SET work_mem = '{value}'")), &[]);
            if long {
                // 1,200 more messages: more than a unit holds.
                a.extended("", Some("SELECT 2"), &[]);
                for _ in 0..599 {
                    a.extended("", None, &[]);
                }
            } else {
                steps.push(flushed(&mut a, "C").await.0);
            }
            a.extended("", Some(then), &[]);
            frontend::sync(&mut a.out);
            let (tags, msgs) = a.round(1).await;
            let state = msgs.iter().find_map(|m| m.sqlstate()).unwrap_or_default();
            // (The end of a long batch's answers.)
            steps.push(format!("{} {state}", &tags[tags.len().saturating_sub(4)..]));
            // The other client takes the connection `a` ran on; `a` is given the other one.
            run(&mut b, &["BEGIN", "SELECT 1"]).await.unwrap();
            steps.push(run(&mut a, &["SHOW work_mem"]).await.unwrap().join(","));
            run(&mut b, &["COMMIT"]).await.unwrap();
        }
        assert_eq!(
            steps,
            [
                "12C",
                "1EZ 22012",
                "4MB",
                "12C",
                "2DCZ ",
                "9MB",
                "C1EZ 22012",
                "9MB",
                "2DCZ ",
                "6MB"
            ]
        );
        steps
    })
    .await;
}

/// A `SET` in a batch ended by a Flush (its portal closed), then a read: sluice ends the
/// primary's implicit transaction with a Sync of its own, where the `SET` commits, and sends
/// the read to a replica. The session has the setting from then on, wherever it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_flushed_before_a_read_elsewhere_stays_with_the_session() {
    let env = start(1, "").await;
    direct_then_sluice(&env, async |port| {
        let mut c = Raw::connect(port, "app", "app", "postgres").await;
        let mut steps = Vec::new();
        c.extended("", Some("SET work_mem = '7MB'"), &[]);
        frontend::close(b'P', "", &mut c.out).unwrap();
        steps.push(flushed(&mut c, "3").await.0);
        let read = "SELECT current_setting('work_mem')";
        c.extended("", Some(read), &[]);
        frontend::sync(&mut c.out);
        let (tags, msgs) = c.round(1).await;
        steps.push(format!("{tags} {}", Raw::column(&msgs).join(",")));
        // Again, on the primary, and on a replica's connection other than the one it ran on.
        let mut b = Raw::connect(port, "app", "app", "postgres").await;
        run(&mut b, &["BEGIN READ ONLY", "SELECT 1"]).await.unwrap();
        for sql in ["SHOW work_mem", "BEGIN; SHOW work_mem; COMMIT"] {
            steps.push(run(&mut c, &[sql]).await.unwrap().join(","));
        }
        run(&mut b, &["COMMIT"]).await.unwrap();
        assert_eq!(steps, ["12C3", "12DCZ 7MB", "7MB", "7MB"]);
        steps
    })
    .await;
}

/// A statement sluice refuses itself (here a `SET` past the session's bound of 1,000
/// settings, 54000) after a write a Flush left in the server's implicit transaction: the
/// client is told of an error before the Sync, so the batch rolls back, as it does after any
/// error there; the write is not committed behind the client's back. The session goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_after_a_flushed_write_rolls_its_batch_back() {
    let env = start(0, "").await;
    let mut setup = Raw::connect(env.topo.primary().port, "app", "app", "postgres").await;
    run(&mut setup, &["CREATE TABLE rf (x int)"]).await.unwrap();
    let mut c = Raw::connect(env.port, "app", "app", "postgres").await;
    let sets: String = (0..1000).map(|i| format!("SET x.k{i} = '{i}';")).collect();
    c.try_simple(&sets).await.unwrap();
    c.extended("", Some("INSERT INTO rf VALUES (1)"), &[]);
    assert_eq!(flushed(&mut c, "C").await.0, "12C");
    c.extended("", Some("SET x.over = '1'"), &[]);
    frontend::sync(&mut c.out);
    let (tags, msgs) = c.round(1).await;
    assert_eq!(tags, "EZ", "{msgs:?}");
    assert_eq!(msgs[0].sqlstate().as_deref(), Some("54000"));
    assert_eq!(msgs[1].body, b"I");
    let rows = run(&mut setup, &["SELECT count(*) FROM rf"]).await;
    assert_eq!(rows, Ok(vec!["0".into()]), "the flushed write rolled back");
    // The session goes on, with its settings, and its next write commits.
    run(&mut c, &["INSERT INTO rf VALUES (2)"]).await.unwrap();
    assert_eq!(run(&mut c, &["SHOW x.k999"]).await, Ok(vec!["999".into()]));
    let rows = run(&mut setup, &["SELECT string_agg(x::text, ',') FROM rf"]).await;
    assert_eq!(rows, Ok(vec!["2".into()]));
    // Refused in a unit of its own (ended by a Flush): the error at once, ReadyForQuery at
    // the Sync; a `SET` the batch made before rolls back with it.
    c.extended("", Some("SET x.k5 = 'five'"), &[]);
    c.extended("", Some("INSERT INTO rf VALUES (3)"), &[]);
    assert_eq!(flushed(&mut c, "C").await.0, "12C");
    assert_eq!(flushed(&mut c, "C").await.0, "12C");
    c.extended("", Some("SET x.over = '1'"), &[]);
    let (tags, _) = flushed(&mut c, "E").await;
    assert_eq!(tags, "E");
    frontend::sync(&mut c.out);
    let (tags, msgs) = c.round(1).await;
    assert_eq!((tags.as_str(), &msgs[0].body[..]), ("Z", &b"I"[..]));
    assert_eq!(run(&mut c, &["SHOW x.k5"]).await, Ok(vec!["5".into()]));
    // In a block the batch opened: the block fails, as after an error of the server's.
    c.extended("", Some("BEGIN"), &[]);
    c.extended("", Some("INSERT INTO rf VALUES (4)"), &[]);
    assert_eq!(flushed(&mut c, "C").await.0, "12C");
    assert_eq!(flushed(&mut c, "C").await.0, "12C");
    c.extended("", Some("SET x.over = '1'"), &[]);
    frontend::sync(&mut c.out);
    let (tags, msgs) = c.round(1).await;
    assert_eq!(tags, "EZ", "{msgs:?}");
    assert_eq!(msgs[1].body, b"E");
    let e = c.try_simple("SELECT 1").await.unwrap_err();
    assert!(e.starts_with("25P02 "), "{e}");
    run(&mut c, &["ROLLBACK"]).await.unwrap();
    let rows = run(&mut setup, &["SELECT string_agg(x::text, ',') FROM rf"]).await;
    assert_eq!(rows, Ok(vec!["2".into()]), "neither 3 nor 4 committed");
}

/// A `DEALLOCATE` sluice answers itself (of a statement prepared only in sluice so far) after
/// a write a Flush left in the server's implicit transaction: as a simple query it ends that
/// transaction directly, committing the write; through sluice too, before the client hears
/// `DEALLOCATE` (it was left open on the server, and rolled back when the client then left).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deallocate_sluice_answers_after_a_flushed_write_commits_it() {
    let env = start(0, "").await;
    let primary = env.topo.primary().port;
    let mut setup = Raw::connect(primary, "app", "app", "postgres").await;
    run(&mut setup, &["CREATE TABLE fd (x int)"]).await.unwrap();
    direct_then_sluice(&env, async |port| {
        let mut c = Raw::connect(port, "app", "app", "postgres").await;
        frontend::parse("s", "SELECT 1", [], &mut c.out).unwrap();
        frontend::sync(&mut c.out);
        let mut steps = vec![c.round(1).await.0];
        c.extended("", Some("INSERT INTO fd VALUES (1)"), &[]);
        steps.push(flushed(&mut c, "C").await.0);
        frontend::query("DEALLOCATE s", &mut c.out).unwrap();
        let (tags, msgs) = c.round(1).await;
        steps.push(format!("{tags} {}", String::from_utf8_lossy(&msgs[1].body)));
        drop(c);
        let mut check = Raw::connect(primary, "app", "app", "postgres").await;
        let rows = run(&mut check, &["SELECT count(*) FROM fd"]).await.unwrap();
        steps.push(rows.join(","));
        run(&mut check, &["TRUNCATE fd"]).await.unwrap();
        steps
    })
    .await;
}

/// A `COMMIT` sent through the extended protocol in a batch ended by a Flush ends the block
/// there and then: what the block set stays the session's (and the role it took), wherever it
/// runs next, and never reaches another client. The ReadyForQuery that came with the next
/// batch was taken for the end of a block that never committed: the session lost its
/// settings, and the next client on that connection ran as its role.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_in_a_flushed_batch_keeps_the_blocks_settings() {
    let env = start(0, POOL).await;
    env.topo.primary().sql("CREATE ROLE r3").unwrap();
    let who = "SELECT current_user || '/' || current_setting('work_mem')";
    direct_then_sluice(&env, async |port| {
        let mut a = Raw::connect(port, "app", "app", "postgres").await;
        let mut b = Raw::connect(port, "app", "app", "postgres").await;
        let mut steps = Vec::new();
        for commit in ["COMMIT", "END"] {
            run(&mut a, &["BEGIN", "SET work_mem = '7MB'", "SET ROLE r3"])
                .await
                .unwrap();
            a.extended("", Some(commit), &[]);
            steps.push(flushed(&mut a, "C").await.0);
            frontend::sync(&mut a.out);
            steps.push(a.round(1).await.0);
            // The other client takes the connection `a` ran on (or the other one).
            run(&mut b, &["BEGIN"]).await.unwrap();
            steps.extend(run(&mut b, &[who]).await.unwrap());
            steps.extend(run(&mut a, &[who]).await.unwrap());
            run(&mut b, &["COMMIT"]).await.unwrap();
            steps.extend(run(&mut a, &[who]).await.unwrap());
            run(&mut a, &["RESET ROLE", "RESET work_mem"])
                .await
                .unwrap();
        }
        steps
    })
    .await;
}
