//! Routing where the text alone misleads a scanner, and where a replica refuses what the
//! primary runs: each statement here succeeds on a direct connection to the primary, and
//! must through sluice (found by a differential review of routing).

use super::pg::raw::Raw;
use super::pg::{start, wait_replayed, PgEnv};
use postgres_protocol::message::frontend;
use std::time::Duration;

/// Waits until a session of `env` keeps its connection for `reason` (the admin API's view;
/// set once the statement's answer is relayed).
async fn wait_pinned(env: &PgEnv, reason: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let all = env.pin_reasons();
        if all.iter().any(|r| r.contains(&reason)) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no session pinned for {reason:?}: {all:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The first column of the last statement's rows, or the first error.
pub(super) async fn run(c: &mut Raw, statements: &[&str]) -> Result<Vec<String>, String> {
    let mut last = Vec::new();
    for s in statements {
        last = Raw::column(&c.try_simple(s).await.map_err(|e| format!("{s}: {e}"))?);
    }
    Ok(last)
}

/// One thread: every session on the thread's table of classifications by shape.
#[tokio::test(flavor = "current_thread")]
async fn what_the_scanner_cannot_see_and_what_a_replica_refuses_go_to_the_primary() {
    let env = start(1, "").await;
    let mut setup = Raw::connect(env.topo.primary().port, "app", "app", "postgres").await;
    run(
        &mut setup,
        &["CREATE SEQUENCE s; CREATE TABLE log (x int); CREATE TABLE uq (a int PRIMARY KEY)"],
    )
    .await
    .unwrap();
    wait_replayed(&env.topo).await;
    let connect = || Raw::connect(env.port, "app", "app", "postgres");

    // A carriage return ends a `--` comment, as in PostgreSQL's lexer: what follows it is
    // seen (a write, a lock that pins).
    let mut c = connect().await;
    assert_eq!(
        run(&mut c, &["SELECT 1 --x\r, nextval('s')"]).await,
        Ok(vec!["1".into()])
    );
    run(
        &mut c,
        &["INSERT INTO log VALUES (1) --\r; SELECT pg_advisory_lock(4242)"],
    )
    .await
    .unwrap();
    wait_pinned(&env, "session advisory lock").await;
    drop(c);

    // set_config's `is_local` is a literal: a text of the same shape with `'false'` after
    // ones with `'true'` still pins (the setting stays with the session).
    let mut c = connect().await;
    let same_shape = |v: &str, local: &str| {
        format!("INSERT INTO log SELECT length(set_config('my.v', '{v}', '{local}'))")
    };
    let (a, b) = (same_shape("1", "true"), same_shape("2", "false"));
    let got = run(
        &mut c,
        &[
            &a,
            &a,
            &b,
            "SELECT coalesce(current_setting('my.v', true), 'unset')",
        ],
    )
    .await;
    assert_eq!(got, Ok(vec!["2".into()]));
    drop(c);

    // `EXPLAIN ("analyze")` runs its statement (an option's name may be quoted).
    let mut c = connect().await;
    let explain = "EXPLAIN (\"analyze\") INSERT INTO log VALUES (6)";
    run(&mut c, &[explain]).await.unwrap();
    c.extended("", Some(explain), &[]);
    frontend::sync(&mut c.out);
    let (tags, msgs) = c.round(1).await;
    assert!(!tags.contains('E'), "{tags} {msgs:?}");

    // A read-only transaction whose first statement needs the primary runs there.
    for first in [
        "NOTIFY ch, 'x'",
        "SELECT txid_current() > 0",
        "LOCK TABLE log IN SHARE MODE",
    ] {
        run(&mut c, &["BEGIN READ ONLY", first, "COMMIT"])
            .await
            .unwrap();
    }
    drop(c);

    // Transactions serializable by default: a standby refuses them.
    let mut c = connect().await;
    let got = run(
        &mut c,
        &[
            "SET default_transaction_isolation = 'serializable'",
            "SELECT count(*) FROM uq",
        ],
    )
    .await;
    assert_eq!(got, Ok(vec!["0".into()]));
    drop(c);

    // standard_conforming_strings off: `'\''` is one string there, which the scanner does not
    // follow; the session goes to the primary and stays with its connection.
    let mut c = connect().await;
    let got = run(
        &mut c,
        &[
            "SET standard_conforming_strings = off",
            "SELECT '\\'', nextval('s') -- '",
        ],
    )
    .await;
    assert_eq!(got, Ok(vec!["'".into()]));
    wait_pinned(&env, "standard_conforming_strings off").await;
    drop(c);

    // Read-your-writes asks the primary where its WAL is only once the transaction is over:
    // not after a Flush, inside the implicit transaction of a batch that may yet fail (the
    // hidden query committed it).
    let mut c = connect().await;
    run(&mut c, &["SET sluice.read_your_writes = on"])
        .await
        .unwrap();
    c.extended("", Some("INSERT INTO uq VALUES (1)"), &[]);
    frontend::flush(&mut c.out);
    c.flush().await;
    let mut tags = String::new();
    while !tags.ends_with('C') {
        tags.push(c.next().await.tag as char);
    }
    assert_eq!(tags, "12C");
    c.extended("", Some("INSERT INTO uq VALUES (1)"), &[]);
    frontend::sync(&mut c.out);
    let (tags, msgs) = c.round(1).await;
    assert_eq!(tags, "12EZ", "{msgs:?}");
    let left = run(&mut setup, &["SELECT count(*) FROM uq"]).await;
    assert_eq!(left, Ok(vec!["0".into()]), "the failed batch rolled back");
    drop(c);

    // Serializable by default, then SET TRANSACTION READ ONLY: still the primary.
    let mut c = connect().await;
    let got = run(
        &mut c,
        &[
            "SET default_transaction_isolation = serializable",
            "BEGIN",
            "SET TRANSACTION READ ONLY",
            "SELECT count(*) FROM uq",
            "COMMIT",
        ],
    )
    .await;
    assert_eq!(got, Ok(vec![]));
    drop(c);

    // standard_conforming_strings turned off inside a read-only transaction on a replica:
    // the session's writes after it still reach the primary.
    let mut c = connect().await;
    let got = run(
        &mut c,
        &[
            "BEGIN READ ONLY",
            "SELECT 1",
            "SET standard_conforming_strings = off",
            "COMMIT",
            "INSERT INTO log VALUES (7)",
        ],
    )
    .await;
    assert_eq!(got, Ok(vec![]));
    drop(c);

    // Read-your-writes: a write a Flush left in its batch's implicit transaction, committed
    // by the Sync sluice sends when the session's next statement goes elsewhere, is read
    // back (the replica has stopped replaying).
    let mut c = connect().await;
    run(
        &mut c,
        &[
            "SET sluice.read_your_writes = on",
            "INSERT INTO log VALUES (8)",
        ],
    )
    .await
    .unwrap();
    wait_replayed(&env.topo).await;
    env.topo.replicas()[0]
        .sql("SELECT pg_wal_replay_pause()")
        .unwrap();
    c.extended("", Some("INSERT INTO log VALUES (8)"), &[]);
    frontend::close(b'P', "", &mut c.out).unwrap();
    frontend::flush(&mut c.out);
    c.flush().await;
    let mut tags = String::new();
    while !tags.ends_with('3') {
        tags.push(c.next().await.tag as char);
    }
    assert_eq!(tags, "12C3");
    let seen = run(&mut c, &["SELECT count(*) FROM log WHERE x = 8"]).await;
    env.topo.replicas()[0]
        .sql("SELECT pg_wal_replay_resume()")
        .unwrap();
    assert_eq!(
        seen,
        Ok(vec!["2".into()]),
        "the session reads its own writes"
    );
}

/// Texts of several statements with their own COMMIT or ROLLBACK: what they release or set
/// may have been undone (or done after the transaction ended), which sluice does not follow;
/// the session keeps its connection, where the server has it right (found by a differential
/// review: the state reached the next client on the connection, and the session lost it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_text_with_its_own_transaction_control_keeps_its_state_with_the_session() {
    let env = start(1, "").await;
    let mut c = Raw::connect(env.port, "app", "app", "postgres").await;
    // A release rolled back: the temporary table is still there (the session stays pinned,
    // so the next read is not sent to the replica).
    let got = run(
        &mut c,
        &[
            "CREATE TEMP TABLE keep (x int)",
            "BEGIN; DISCARD TEMP; ROLLBACK",
            "SELECT count(*) FROM keep",
        ],
    )
    .await;
    assert_eq!(got, Ok(vec!["0".into()]));
    drop(c);
    // A SET after the text's ROLLBACK stays with the session.
    let mut c = Raw::connect(env.port, "app", "app", "postgres").await;
    let got = run(&mut c, &["ROLLBACK; SET work_mem = '7MB'", "SHOW work_mem"]).await;
    assert_eq!(got, Ok(vec!["7MB".into()]));
    wait_pinned(
        &env,
        "SET or release in a text or pipeline with its own COMMIT/ROLLBACK",
    )
    .await;
    // START TRANSACTION is answered with its own tag (after a comment too).
    for text in ["START TRANSACTION", "/* app */ START TRANSACTION READ ONLY"] {
        let msgs = c.try_simple(text).await.unwrap();
        assert_eq!(msgs[0].tag, b'C');
        assert_eq!(msgs[0].body, b"START TRANSACTION\0", "{text}");
        run(&mut c, &["COMMIT"]).await.unwrap();
    }
    drop(c);
    // Such a text in a read-only transaction on a replica: the session's writes after it
    // still reach the primary.
    let mut c = Raw::connect(env.port, "app", "app", "postgres").await;
    let got = run(
        &mut c,
        &[
            "CREATE TABLE w (x int)",
            "BEGIN READ ONLY",
            "SELECT 1",
            "SET work_mem = '7MB'; COMMIT",
            "INSERT INTO w VALUES (1)",
        ],
    )
    .await;
    assert_eq!(got, Ok(vec![]));
    // standard_conforming_strings turned off with an escape string is seen as off (the
    // statement after it goes to the primary: the replica would refuse the nextval()).
    run(&mut c, &["CREATE SEQUENCE s"]).await.unwrap();
    wait_replayed(&env.topo).await;
    let got = run(
        &mut c,
        &[
            "SET standard_conforming_strings = E'off'",
            "SELECT '\\'', nextval('s') -- '",
        ],
    )
    .await;
    assert_eq!(got, Ok(vec!["'".into()]));
}

/// A standby reports `in_hot_standby = on` to its sessions; sluice's reads there must not
/// tell the client so (and the primary's `off` again at the next write): directly, a client
/// hears the server's once, at its login, and never again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_on_a_replica_tell_the_client_no_new_parameters() {
    let env = start(1, "").await;
    let mut c = Raw::connect(env.port, "app", "app", "postgres").await;
    c.try_simple("CREATE TABLE IF NOT EXISTS hs (id int)")
        .await
        .unwrap();
    for sql in [
        "SELECT pg_is_in_recovery()",
        "INSERT INTO hs VALUES (1)",
        "SELECT pg_is_in_recovery()",
    ] {
        frontend::query(sql, &mut c.out).unwrap();
        c.flush().await;
        let mut said = Vec::new();
        loop {
            let m = c.next().await;
            match m.tag {
                b'S' => said.push(String::from_utf8_lossy(&m.body).replace('\0', "=")),
                b'Z' => break,
                _ => {}
            }
        }
        assert!(said.is_empty(), "{sql}: {said:?}");
    }
    // The reads did run on the replica.
    wait_replayed(&env.topo).await;
    let rows = c.try_simple("SELECT pg_is_in_recovery()").await.unwrap();
    assert_eq!(Raw::column(&rows), ["t"]);
}

/// `[[rules]]` route PostgreSQL statements as they route MySQL's: the first match wins, after
/// a comment hint and before the scanner's classification (a rule may send a write to a
/// replica, which refuses it), in both protocols; `user` limits a rule to a user, `schema` to
/// the database the session logged in to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_route_statements_as_for_mysql() {
    let rules = [
        ("r1", "writer", ""),
        ("r2", "writer", "schema = \"otherdb\"\n"),
        ("r3", "writer", "user = \"bob\"\n"),
        ("r4", "reader", ""),
    ]
    .iter()
    .map(|(m, hg, extra)| format!("\n[[rules]]\nmatch = \"{m}\"\nhostgroup = \"{hg}\"\n{extra}"))
    .collect::<String>();
    let env = super::pg::start_prepared(
        1,
        |topo| {
            for sql in [
                "CREATE ROLE bob LOGIN PASSWORD 'bob'",
                "CREATE DATABASE otherdb",
                "CREATE TABLE ruled (x int)",
                "GRANT ALL ON ruled TO bob",
            ] {
                topo.primary().sql(sql).unwrap();
            }
        },
        |topo| {
            super::pg::config(
                topo,
                &format!("\n[[users]]\nname = \"bob\"\npassword = \"bob\"\n{rules}"),
            )
        },
    )
    .await;
    // Whether the statement ran on a replica, in the simple and in the extended protocol.
    async fn on_replica(c: &mut Raw, sql: &str) -> (String, String) {
        let simple = Raw::column(&c.try_simple(sql).await.unwrap()).concat();
        c.extended("", Some(sql), &[]);
        frontend::sync(&mut c.out);
        let (tags, msgs) = c.round(1).await;
        assert_eq!(tags, "12DCZ", "{msgs:?}");
        (simple, Raw::column(&msgs).concat())
    }
    let replica = || ("t".to_string(), "t".to_string());
    let primary = || ("f".to_string(), "f".to_string());
    let mut app = Raw::connect(env.port, "app", "app", "postgres").await;
    let mut other = Raw::connect(env.port, "app", "app", "otherdb").await;
    let mut bob = Raw::connect(env.port, "bob", "bob", "postgres").await;
    let q = |rule: &str| format!("SELECT pg_is_in_recovery() /* {rule} */");

    assert_eq!(on_replica(&mut app, &q("none")).await, replica());
    assert_eq!(on_replica(&mut app, &q("r1")).await, primary());
    // A rule reads the whole text of a long simple query (sluice's record of the statement
    // keeps only its first 64 KiB).
    let long = format!("SELECT pg_is_in_recovery() /* {} r1 */", "x".repeat(70_000));
    assert_eq!(Raw::column(&app.try_simple(&long).await.unwrap()), ["f"]);
    // A hint comes before the rules.
    assert_eq!(
        on_replica(&mut app, &format!("/* sluice:reader */ {}", q("r1"))).await,
        replica()
    );
    // `schema`: the database logged in to.
    assert_eq!(on_replica(&mut app, &q("r2")).await, replica());
    assert_eq!(on_replica(&mut other, &q("r2")).await, primary());
    // `user`.
    assert_eq!(on_replica(&mut app, &q("r3")).await, replica());
    assert_eq!(on_replica(&mut bob, &q("r3")).await, primary());
    // A rule before the classification: this write goes to the replica, which refuses it.
    let e = bob
        .try_simple("INSERT INTO ruled VALUES (1) /* r4 */")
        .await
        .unwrap_err();
    assert!(e.starts_with("25006 "), "{e}");
    bob.try_simple("INSERT INTO ruled VALUES (2)")
        .await
        .unwrap();
    assert_eq!(
        env.topo
            .primary()
            .sql("SELECT string_agg(x::text, ',') FROM ruled")
            .unwrap()
            .trim(),
        "2"
    );
    // Each rule counted its matches.
    let hits: Vec<(String, u64)> = sluice_runtime::tables::rules(&env.process.clusters())
        .into_iter()
        .map(|r| (r.pattern, r.hits))
        .collect();
    assert_eq!(
        hits,
        [("r1", 3), ("r2", 2), ("r3", 2), ("r4", 1)].map(|(p, n)| (p.to_string(), n))
    );
}

/// Every statement kind the issue names, through psql: what can write or lock runs on the
/// primary (each succeeds, where a standby refuses it, and what it wrote is on the primary
/// with the primary's `pg_is_in_recovery()`), and what may read on a replica does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_statement_kind_runs_where_the_issue_says() {
    let env = start(1, "").await;
    env.psql(
        "CREATE TABLE k (n int, on_standby bool); CREATE SEQUENCE ks; \
         CREATE PROCEDURE kp(i int) LANGUAGE sql AS $$INSERT INTO k VALUES (i, pg_is_in_recovery())$$",
    );
    wait_replayed(&env.topo).await;
    let primary_only = [
        "SELECT pg_is_in_recovery() FROM k FOR NO KEY UPDATE",
        "SELECT pg_is_in_recovery() FROM k FOR SHARE",
        "SELECT pg_is_in_recovery() FROM k FOR KEY SHARE",
        "SELECT pg_is_in_recovery(), setval('ks', 10)",
        "SELECT pg_is_in_recovery() FROM (SELECT nextval('ks')) s",
    ];
    env.psql("INSERT INTO k VALUES (0, pg_is_in_recovery())");
    for sql in primary_only {
        let out = env.psql(sql);
        assert_eq!(out.split(['|', '\n']).next(), Some("f"), "{sql}");
    }
    // Each of these writes its number with where it ran.
    let writes = [
        (
            1,
            "SELECT 1 AS n, pg_is_in_recovery() AS on_standby INTO k1",
        ),
        (
            2,
            "WITH w AS (INSERT INTO k VALUES (2, pg_is_in_recovery()) RETURNING n) SELECT n FROM w",
        ),
        (3, "CALL kp(3)"),
        (
            4,
            "DO $$BEGIN INSERT INTO k VALUES (4, pg_is_in_recovery()); END$$",
        ),
        (
            5,
            "EXPLAIN ANALYZE INSERT INTO k VALUES (5, pg_is_in_recovery())",
        ),
        (6, "COPY k FROM PROGRAM 'echo 6,f' WITH (FORMAT csv)"),
    ];
    for (_, sql) in writes {
        env.psql(sql);
    }
    let on_primary = env
        .topo
        .primary()
        .sql("SELECT string_agg(n || ':' || on_standby, ',' ORDER BY n) FROM (SELECT * FROM k UNION ALL SELECT * FROM k1) a")
        .unwrap();
    assert_eq!(
        on_primary.trim(),
        "0:false,1:false,2:false,3:false,4:false,5:false,6:false"
    );
    // Session state the primary holds: temp-table DDL, LISTEN, NOTIFY.
    let (out, err) = env.psql_script(
        "CREATE TEMP TABLE kt (x int);\nINSERT INTO kt VALUES (7);\nSELECT x FROM kt;\nLISTEN kc;\nNOTIFY kc, 'hi';\nSELECT 8;\n",
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out} {err}");
    assert_eq!((lines[0], lines[2]), ("7", "8"), "{err}");
    assert!(
        lines[1].starts_with("Asynchronous notification \"kc\" with payload \"hi\""),
        "{out}"
    );
    assert!(!err.contains("ERROR"), "{err}");
    // What may read on a replica: plain reads, SHOW, COPY ... TO, a read-only transaction.
    let replica_port = env.topo.replicas()[0].port.to_string();
    assert_eq!(env.psql("SHOW port").trim(), replica_port);
    // But whether the server is a standby is the primary's to say, as directly.
    assert_eq!(env.psql("SHOW transaction_read_only").trim(), "off");
    assert_eq!(env.psql("SHOW in_hot_standby").trim(), "off");
    assert_eq!(
        env.psql("COPY (SELECT pg_is_in_recovery()) TO STDOUT")
            .trim(),
        "t"
    );
    let (out, _) = env.psql_script("BEGIN READ ONLY;\nSELECT pg_is_in_recovery();\nCOMMIT;\n");
    assert_eq!(out.trim(), "t");
    // A serializable transaction: the primary (a standby refuses it).
    let (out, err) = env
        .psql_script("BEGIN ISOLATION LEVEL SERIALIZABLE;\nSELECT pg_is_in_recovery();\nCOMMIT;\n");
    assert_eq!(out.trim(), "f", "{err}");
}

/// Reads of the server's own state — its locks, statistics, prepared transactions (what
/// PgJDBC's XA recovery reads), sequences' values — are answered by the primary, as by the
/// one server a client takes the endpoint for. A replica answered them about itself,
/// plausibly and wrongly: no locks, no prepared transactions, sequence values ahead. Other
/// reads still go to the replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_of_the_servers_own_state_go_to_the_primary() {
    let env = start(1, "").await;
    let mut c = Raw::connect(env.port, "app", "app", "postgres").await;
    for view in [
        "pg_locks",
        "pg_prepared_xacts",
        "pg_catalog.pg_stat_activity",
        "PG_STAT_USER_TABLES",
        "pg_statio_user_tables",
        "pg_sequences",
    ] {
        let sql = format!("SELECT pg_is_in_recovery(), count(*) FROM {view}");
        assert_eq!(run(&mut c, &[&sql]).await, Ok(vec!["f".into()]), "{sql}");
    }
    assert_eq!(
        run(
            &mut c,
            &["SELECT pg_is_in_recovery(), count(*) FROM pg_class"]
        )
        .await,
        Ok(vec!["t".into()]),
        "a catalog's rows are the primary's on the replica too"
    );
}

/// A read waiting for the replica's only connection is let go once a reload takes the
/// replica out of service (weight 0), and falls back to the primary as a read arriving then
/// does. It waited out its queue timeout for a connection that could not come.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_waiting_for_a_replica_taken_out_of_service_goes_to_the_primary() {
    let text = std::sync::Mutex::new(String::new());
    let env = super::pg::start_with(1, |topo| {
        let t = super::pg::config(
            topo,
            "\n[pool]\nmax_connections = 1\nqueue_timeout = \"60s\"\n",
        );
        *text.lock().unwrap() = t.clone();
        t
    })
    .await;
    let text = text.into_inner().unwrap();
    let mut holder = Raw::connect(env.port, "app", "app", "postgres").await;
    drop(holder.try_simple("BEGIN READ ONLY").await.unwrap());
    assert_eq!(
        Raw::column(
            &holder
                .try_simple("SELECT pg_is_in_recovery()")
                .await
                .unwrap()
        ),
        ["t"]
    );
    let mut reader = Raw::connect(env.port, "app", "app", "postgres").await;
    let read = tokio::spawn(async move {
        let r = reader.try_simple("SELECT pg_is_in_recovery()").await;
        r.map(|msgs| Raw::column(&msgs))
    });
    let queued = || {
        sluice_runtime::tables::hostgroups(&env.process.clusters())
            .iter()
            .any(|h| &*h.name == "reader" && h.waiting == 1)
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60); // a hang guard
    while !queued() {
        assert!(
            std::time::Instant::now() < deadline,
            "the read never queued"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let out = text.replace(
        "hostgroup = \"reader\"\n",
        "hostgroup = \"reader\"\nweight = 0\n",
    );
    let cfg = sluice_config::Config::from_toml(&out).unwrap();
    env.process.reload(cfg).await.unwrap();
    assert_eq!(read.await.unwrap().unwrap(), ["f"], "on the primary");
    drop(holder.try_simple("COMMIT").await.unwrap());
}
