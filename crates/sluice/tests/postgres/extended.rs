//! The extended protocol at the message level, against PostgreSQL's own answers.

use super::pg::raw::Raw;
use super::pg::start;
use postgres_protocol::message::frontend;

/// The extended protocol at the message level: a Parse on its own is answered without a
/// server and its statement prepared where it is first used (an invalid text fails there);
/// a Parse over an existing name fails with PostgreSQL's 42P05, in the batch where it comes
/// (so the rest of the batch is skipped as PostgreSQL skips it); several Syncs in one
/// write; Flush; COPY in and out through the extended protocol.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extended_protocol_parse_pipelining_flush_and_copy() {
    let env = start(1, "").await;
    env.psql("CREATE TABLE ext (id int primary key, v text)");
    let mut c = Raw::connect(env.port, "app", "app", "postgres").await;

    // A Parse and its Sync alone: answered at once; the statement runs on a replica.
    frontend::parse("s1", "SELECT pg_is_in_recovery()", [], &mut c.out).unwrap();
    frontend::sync(&mut c.out);
    assert_eq!(c.round(1).await.0, "1Z");
    frontend::parse("s1", "SELECT 2", [], &mut c.out).unwrap();
    frontend::sync(&mut c.out);
    let (tags, msgs) = c.round(1).await;
    assert_eq!(tags, "EZ");
    assert_eq!(msgs[0].sqlstate().as_deref(), Some("42P05"));
    assert_eq!(
        msgs[0].field(b'M').as_deref(),
        Some("prepared statement \"s1\" already exists")
    );
    c.extended("s1", None, &[]);
    frontend::sync(&mut c.out);
    let (tags, msgs) = c.round(1).await;
    assert_eq!(tags, "2DCZ");
    assert_eq!(Raw::column(&msgs), ["t"]);
    // A text the server rejects: reported where the statement is first used.
    frontend::parse("bad", "SELEC 1", [], &mut c.out).unwrap();
    frontend::sync(&mut c.out);
    assert_eq!(c.round(1).await.0, "1Z");
    c.extended("bad", None, &[]);
    frontend::sync(&mut c.out);
    let (tags, msgs) = c.round(1).await;
    assert_eq!(tags, "EZ");
    assert_eq!(msgs[0].sqlstate().as_deref(), Some("42601"));

    // A duplicate Parse inside a batch: the messages before it ran, the ones after it are
    // skipped, and the implicit transaction rolls back as on PostgreSQL.
    c.extended(
        "ins",
        Some("INSERT INTO ext VALUES ($1, 'implicit') RETURNING pg_is_in_recovery()"),
        &[Some("1")],
    );
    c.extended("s1", Some("SELECT 3"), &[]);
    c.extended("", Some("INSERT INTO ext VALUES (2, 'skipped')"), &[]);
    frontend::sync(&mut c.out);
    let (tags, msgs) = c.round(1).await;
    assert_eq!(tags, "12DCEZ", "{msgs:?}");
    assert_eq!(Raw::column(&msgs), ["f"]);
    assert_eq!(msgs[4].sqlstate().as_deref(), Some("42P05"));
    assert_eq!(
        env.topo
            .primary()
            .sql("SELECT count(*) FROM ext")
            .unwrap()
            .trim(),
        "0"
    );
    // ... and inside a transaction block the failure is the transaction's.
    frontend::query("BEGIN", &mut c.out).unwrap();
    assert_eq!(c.round(1).await.0, "CZ");
    c.extended("ins", None, &[Some("3")]);
    frontend::sync(&mut c.out);
    assert_eq!(c.round(1).await.0, "2DCZ");
    frontend::parse("ins", "SELECT 1", [], &mut c.out).unwrap();
    frontend::sync(&mut c.out);
    let (tags, msgs) = c.round(1).await;
    assert_eq!(tags, "EZ");
    assert_eq!(msgs[1].body, b"E", "the transaction failed");
    c.extended("s1", None, &[]);
    frontend::sync(&mut c.out);
    let (tags, msgs) = c.round(1).await;
    assert_eq!(tags, "EZ");
    assert_eq!(msgs[0].sqlstate().as_deref(), Some("25P02"));
    frontend::query("ROLLBACK", &mut c.out).unwrap();
    assert_eq!(c.round(1).await.0, "CZ");

    // Three Syncs in one write, the second failing: each answered in order, the third runs.
    c.extended("", Some("SELECT $1::int + 1"), &[Some("1")]);
    frontend::sync(&mut c.out);
    c.extended("", Some("SELECT 1/0"), &[]);
    frontend::sync(&mut c.out);
    c.extended("", Some("SELECT $1::text"), &[None]);
    frontend::sync(&mut c.out);
    let (tags, msgs) = c.round(3).await;
    assert_eq!(tags, "12DCZ1EZ12DCZ", "{msgs:?}");
    assert_eq!(Raw::column(&msgs), ["2", "NULL"]);

    // A batch is routed by the statement it parses, not by the session's last one: a read
    // after a write goes to the replica.
    c.extended(
        "",
        Some("INSERT INTO ext VALUES (20, 'w') RETURNING pg_is_in_recovery()"),
        &[],
    );
    frontend::sync(&mut c.out);
    let (tags, msgs) = c.round(1).await;
    assert_eq!(
        (tags.as_str(), Raw::column(&msgs)),
        ("12DCZ", vec!["f".into()])
    );
    c.extended("", Some("SELECT pg_is_in_recovery()"), &[]);
    frontend::sync(&mut c.out);
    let (tags, msgs) = c.round(1).await;
    assert_eq!(
        (tags.as_str(), Raw::column(&msgs)),
        ("12DCZ", vec!["t".into()])
    );
    frontend::query("DELETE FROM ext WHERE id = 20", &mut c.out).unwrap();
    assert_eq!(c.round(1).await.0, "CZ");

    // Flush: the answers so far come without a ReadyForQuery; the Sync brings it.
    c.extended("", Some("SELECT 42"), &[]);
    frontend::flush(&mut c.out);
    c.flush().await;
    let mut tags = String::new();
    while !tags.ends_with('C') {
        let m = c.next().await;
        if !matches!(m.tag, b'S' | b'N') {
            tags.push(m.tag as char);
        }
    }
    assert_eq!(tags, "12DC");
    frontend::sync(&mut c.out);
    assert_eq!(c.round(1).await.0, "Z");

    // An error before a Flush: the server skips up to the next Sync, which alone is answered;
    // then the session carries on.
    frontend::parse("", "SELEC 1", [], &mut c.out).unwrap();
    frontend::flush(&mut c.out);
    c.flush().await;
    let mut m = c.next().await;
    while matches!(m.tag, b'S' | b'N') {
        m = c.next().await;
    }
    assert_eq!(m.sqlstate().as_deref(), Some("42601"), "{m:?}");
    c.extended("", None, &[]);
    frontend::sync(&mut c.out);
    assert_eq!(c.round(1).await.0, "Z");
    frontend::query("SELECT 7", &mut c.out).unwrap();
    let (tags, msgs) = c.round(1).await;
    assert_eq!(
        (tags.as_str(), Raw::column(&msgs)),
        ("TDCZ", vec!["7".into()])
    );

    // COPY FROM STDIN through the extended protocol (libpq's way: the Sync comes first and
    // the server ignores it while copying; another follows CopyDone).
    c.extended("", Some("COPY ext FROM STDIN"), &[]);
    frontend::sync(&mut c.out);
    c.flush().await;
    let mut tags = String::new();
    while !tags.ends_with('G') {
        tags.push(c.next().await.tag as char);
    }
    assert!(tags.ends_with("12G"), "{tags}");
    for i in 10..13 {
        let row = format!("{i}\tcopied\n");
        frontend::CopyData::new(row.as_bytes())
            .unwrap()
            .write(&mut c.out);
    }
    frontend::copy_done(&mut c.out);
    frontend::sync(&mut c.out);
    let (tags, msgs) = c.round(1).await;
    assert_eq!(tags, "CZ", "{msgs:?}");
    assert_eq!(msgs[0].body, b"COPY 3\0");
    // COPY TO STDOUT the same way (inside a transaction: it reads the primary's rows).
    frontend::query("BEGIN", &mut c.out).unwrap();
    c.extended(
        "",
        Some("COPY (SELECT v FROM ext ORDER BY id) TO STDOUT"),
        &[],
    );
    frontend::sync(&mut c.out);
    let (tags, msgs) = c.round(2).await;
    assert_eq!(tags, "CZ12HdddcCZ", "{msgs:?}");
    frontend::query("COMMIT", &mut c.out).unwrap();
    assert_eq!(c.round(1).await.0, "CZ");
    assert_eq!(
        env.topo
            .primary()
            .sql("SELECT count(*) FROM ext WHERE v = 'copied'")
            .unwrap()
            .trim(),
        "3"
    );
}
