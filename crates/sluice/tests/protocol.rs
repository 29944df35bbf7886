//! Protocol coverage through sluice: split packets both ways, malformed input, commands,
//! prepared statements, multi-statements, LOAD DATA LOCAL, pool limits.
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::raw::{err_text, Raw};
use mysql_async::prelude::*;
use mysql_async::{Conn, Opts, Value};
use sha2::{Digest, Sha256};
use sluice_mysql::wire::consts::com;

async fn conn(url: &str) -> Conn {
    Conn::new(Opts::from_url(url).unwrap())
        .await
        .expect("connect through sluice")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_mib_blob_round_trips_byte_for_byte() {
    let env = common::start(1, "").await;
    let mut c = conn(&env.url("test")).await;
    c.query_drop("CREATE TABLE blobs (id INT PRIMARY KEY, b LONGBLOB)")
        .await
        .unwrap();
    let blob: Vec<u8> = (0..20 * 1024 * 1024u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let digest: String = Sha256::digest(&blob)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();

    // Binary protocol: a > 16 MiB COM_STMT_EXECUTE from the client (split packets).
    c.exec_drop("INSERT INTO blobs VALUES (?, ?)", (1, blob.clone()))
        .await
        .unwrap();
    // Text protocol: a > 16 MiB COM_QUERY.
    let hex: String = blob.iter().map(|b| format!("{b:02x}")).collect();
    c.query_drop(format!("INSERT INTO blobs VALUES (2, x'{hex}')"))
        .await
        .unwrap();

    let on_primary = env
        .topo
        .primary()
        .sql("SELECT LENGTH(b), SHA2(b, 256) FROM test.blobs ORDER BY id")
        .unwrap();
    let expected = format!("{len}\t{digest}\n{len}\t{digest}", len = blob.len());
    assert_eq!(on_primary, expected);

    // Server to client: > 16 MiB rows, text and binary protocol, from the replica.
    env.sync();
    let back: Vec<u8> = c
        .query_first("SELECT b FROM blobs WHERE id = 1")
        .await
        .unwrap()
        .unwrap();
    assert!(back == blob, "text-protocol row differs");
    let back: Vec<u8> = c
        .exec_first("SELECT b FROM blobs WHERE id = ?", (2,))
        .await
        .unwrap()
        .unwrap();
    assert!(back == blob, "binary-protocol row differs");
    // The connection is still in sync afterwards.
    let one: u8 = c.query_first("SELECT 1").await.unwrap().unwrap();
    assert_eq!(one, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_packets_close_only_that_client() {
    let env = common::start_with(1, "", |t| {
        *t = t.replace("[proxy]\n", "[proxy]\nmax_packet_size = 4096\n")
    })
    .await;
    let mut good = conn(&env.url("test")).await;
    good.query_drop("CREATE TABLE k (id INT PRIMARY KEY)")
        .await
        .unwrap();
    good.query_drop("BEGIN").await.unwrap();
    good.query_drop("INSERT INTO k VALUES (1)").await.unwrap();

    // 1. Garbage instead of a handshake response.
    let mut r = Raw::connect(env.port).await;
    r.send(1, b"\x01\x02garbage").await;
    let p = r.recv().await.unwrap();
    assert_eq!(err_text(&p).unwrap().0, 1043);
    assert!(
        r.recv().await.is_err(),
        "connection closed after a bad handshake"
    );

    // 2. A command with a wrong sequence id.
    let mut r = Raw::login(env.port).await;
    r.send(5, &[com::QUERY, b'S', b'E']).await;
    let p = r.recv().await.unwrap();
    assert_eq!(err_text(&p).unwrap().0, 1156);
    assert!(r.recv().await.is_err());

    // 3. An empty command.
    let mut r = Raw::login(env.port).await;
    r.send(0, &[]).await;
    let p = r.recv().await.unwrap();
    assert_eq!(err_text(&p).unwrap().0, 1835);
    assert!(r.recv().await.is_err());

    // 4. A packet that announces more than it sends, then hangs up.
    let mut r = Raw::login(env.port).await;
    r.send_raw(&[0xff, 0xff, 0x00, 0x00, com::QUERY, b'x'])
        .await;
    drop(r);

    // 5. Malformed prepared-statement commands get errors and the connection goes on.
    let mut r = Raw::login(env.port).await;
    let p = r.command(&[com::STMT_EXECUTE, 1]).await;
    assert_eq!(err_text(&p).unwrap().0, 1835);
    let p = r
        .command(&[com::STMT_EXECUTE, 9, 0, 0, 0, 0, 1, 0, 0, 0])
        .await;
    assert_eq!(err_text(&p).unwrap().0, 1243);
    let p = r.command(&[0x42]).await;
    assert_eq!(err_text(&p).unwrap().0, 1047);
    let p = r.command(&[com::PING]).await;
    assert_eq!(p.payload[0], 0);

    // 6. A request larger than max_packet_size is refused with 1153 before it is buffered,
    // and that connection is closed.
    let mut r = Raw::login(env.port).await;
    let mut big = vec![com::QUERY];
    big.extend(std::iter::repeat_n(b' ', 5000));
    r.send(0, &big).await;
    let p = r.recv().await.unwrap();
    assert_eq!(err_text(&p).unwrap().0, 1153);
    assert!(r.recv().await.is_err());
    // A driver still sending a request far over the limit, more than the socket buffers
    // between it and sluice hold, gets the same error: sluice reads and drops the rest
    // before it answers or closes (a socket closed with bytes unread is reset, and the
    // driver's write would fail on the reset before it reads the error). 12 MiB is one
    // packet; 32 MiB is three, and the answer follows the last.
    for mib in [12, 32] {
        let mut big = conn(&env.url("test")).await;
        let q = format!("SELECT '{}'", "x".repeat(mib << 20));
        match big.query_drop(&q).await {
            Err(mysql_async::Error::Server(e)) => assert_eq!(e.code, 1153, "{mib} MiB: {e}"),
            other => panic!("{mib} MiB: expected error 1153, got {other:?}"),
        }
    }

    // The other client's transaction was never disturbed.
    good.query_drop("INSERT INTO k VALUES (2)").await.unwrap();
    good.query_drop("COMMIT").await.unwrap();
    assert_eq!(
        env.topo
            .primary()
            .sql("SELECT COUNT(*) FROM test.k")
            .unwrap(),
        "2"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_ping_init_db_field_list_statistics_set_option_reset_change_user() {
    let env = common::start(1, "\n[[users]]\nname = \"u2\"\npassword = \"p2\"\n").await;
    env.topo
        .primary()
        .sql("CREATE TABLE test.f (a INT, b VARCHAR(3)); CREATE DATABASE db2; CREATE USER 'u2'@'%' IDENTIFIED BY 'p2'; GRANT SELECT ON *.* TO 'u2'@'%'")
        .unwrap();
    env.sync();
    let mut c = conn(&env.url("test")).await;
    c.ping().await.unwrap();
    // COM_INIT_DB
    c.query_drop("SELECT 1").await.unwrap();
    let mut r = Raw::login(env.port).await;
    let p = r.command(&[&[com::INIT_DB][..], b"db2"].concat()).await;
    assert_eq!(p.payload[0], 0, "{:?}", err_text(&p));
    let p = r.command(&[&[com::INIT_DB][..], b"nope"].concat()).await;
    assert_eq!(err_text(&p).unwrap().0, 1049);
    let p = r
        .command(&[&[com::QUERY][..], b"SELECT DATABASE()"].concat())
        .await;
    assert_eq!(p.payload[0], 1, "one column");
    let rest = r.recv_until_eof().await; // column def, EOF
    let rows = r.recv_until_eof().await;
    assert!(rest.len() == 2 && rows.len() == 2);
    assert_eq!(&rows[0].payload[1..], b"db2");
    // COM_FIELD_LIST
    let p = r.command(&[&[com::INIT_DB][..], b"test"].concat()).await;
    assert_eq!(p.payload[0], 0);
    let mut fl = vec![com::FIELD_LIST];
    fl.extend_from_slice(b"f\0");
    r.send(0, &fl).await;
    let defs = r.recv_until_eof().await;
    assert_eq!(defs.len(), 3, "two column definitions and EOF");
    // COM_STATISTICS
    let p = r.command(&[com::STATISTICS]).await;
    assert!(String::from_utf8_lossy(&p.payload).starts_with("Uptime:"));
    // COM_SET_OPTION: multi-statements off makes "SELECT 1; SELECT 2" a syntax error.
    let p = r.command(&[com::SET_OPTION, 1, 0]).await;
    assert_eq!(p.payload[0], 0xfe);
    let p = r
        .command(&[&[com::QUERY][..], b"SELECT 1; SELECT 2"].concat())
        .await;
    assert_eq!(err_text(&p).unwrap().0, 1064);
    let p = r.command(&[com::SET_OPTION, 0, 0]).await;
    assert_eq!(p.payload[0], 0xfe);

    // COM_RESET_CONNECTION clears session variables, and user variables.
    c.query_drop("SET @x = 5, SESSION sql_select_limit = 3")
        .await
        .unwrap();
    c.reset().await.unwrap();
    let (x, l): (Option<i64>, u64) = c
        .query_first("SELECT @x, @@sql_select_limit")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((x, l), (None, 18446744073709551615));

    // COM_CHANGE_USER.
    let mut c = conn(&env.url("test")).await;
    c.query_drop("SET @y = 1").await.unwrap();
    c.change_user(
        mysql_async::ChangeUserOpts::default()
            .with_user(Some("u2".into()))
            .with_pass(Some("p2".into())),
    )
    .await
    .unwrap();
    let (u, y): (String, Option<i64>) = c
        .query_first("SELECT CURRENT_USER(), @y")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((u.as_str(), y), ("u2@%", None));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_statements_multi_statements_and_local_infile() {
    let env = common::start(2, "").await;
    let mut c = conn(&env.url("test")).await;
    c.query_drop(
        "CREATE TABLE p (id INT PRIMARY KEY, s VARCHAR(50), d DOUBLE, n INT NULL, b VARBINARY(10))",
    )
    .await
    .unwrap();
    let ins = c
        .prep("INSERT INTO p VALUES (?, ?, ?, ?, ?)")
        .await
        .unwrap();
    for i in 0..20i32 {
        let n: Option<i32> = if i % 2 == 0 { None } else { Some(i) };
        c.exec_drop(
            &ins,
            (
                i,
                format!("row {i}"),
                i as f64 / 4.0,
                n,
                vec![0u8, 1, 255, i as u8],
            ),
        )
        .await
        .unwrap();
    }
    env.sync();
    // The same statement executed many times lands on different replicas, prepared lazily.
    let sel = c
        .prep("SELECT s, d, n, b, @@server_id FROM p WHERE id = ?")
        .await
        .unwrap();
    let mut servers = std::collections::BTreeSet::new();
    for i in 0..20i32 {
        let row: (String, f64, Option<i32>, Vec<u8>, u32) =
            c.exec_first(&sel, (i,)).await.unwrap().unwrap();
        assert_eq!(row.0, format!("row {i}"));
        assert_eq!(row.1, i as f64 / 4.0);
        assert_eq!(row.2, if i % 2 == 0 { None } else { Some(i) });
        assert_eq!(row.3, vec![0u8, 1, 255, i as u8]);
        servers.insert(row.4);
    }
    assert_eq!(servers, [2, 3].into_iter().collect());
    c.close(sel).await.unwrap();

    // Multi-statements: several result sets in one COM_QUERY.
    let mut results = Vec::new();
    let mut q = c
        .query_iter("SELECT 1; SELECT 2, 3; SELECT id FROM p WHERE id < 3 ORDER BY id")
        .await
        .unwrap();
    while !q.is_empty() {
        let rows: Vec<mysql_async::Row> = q.collect().await.unwrap();
        results.push(rows.len());
    }
    drop(q);
    assert_eq!(results, vec![1, 1, 3]);
    let v: Value = c.query_first("SELECT 42").await.unwrap().unwrap();
    assert_eq!(v, Value::Bytes(b"42".to_vec()));

    // LOAD DATA LOCAL INFILE through the mariadb CLI.
    let file = std::env::temp_dir().join(format!("sluice-infile-{}.csv", std::process::id()));
    std::fs::write(&file, "100,alpha\n101,beta\n102,gamma\n").unwrap();
    let sql = format!(
        "LOAD DATA LOCAL INFILE '{}' INTO TABLE p FIELDS TERMINATED BY ',' (id, s)",
        file.display()
    );
    let out = common::cli_raw(
        env.port,
        "app",
        "app",
        Some("test"),
        &sql,
        &["--local-infile=1"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_file(&file).ok();
    assert_eq!(
        env.topo
            .primary()
            .sql("SELECT GROUP_CONCAT(s ORDER BY id) FROM test.p WHERE id >= 100")
            .unwrap(),
        "alpha,beta,gamma"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_pool_waits_then_fails_with_a_precise_error() {
    let env = common::start_with(0, "\n[pool]\nqueue_timeout = \"300ms\"\n", |t| {
        *t = t.replace(
            "hostgroup = \"writer\"\n",
            "hostgroup = \"writer\"\nmax_connections = 1\n",
        );
    })
    .await;
    let mut a = conn(&env.url("test")).await;
    let mut b = conn(&env.url("test")).await;
    a.query_drop("BEGIN").await.unwrap(); // pins the only writer connection
    a.query_drop("SELECT 1").await.unwrap();
    let started = std::time::Instant::now();
    let err = b.query_drop("SELECT 1").await.unwrap_err();
    let waited = started.elapsed();
    let msg = err.to_string();
    assert!(
        msg.contains("9001")
            && msg.contains("hostgroup 'writer'")
            && msg.contains("within 3")
            && msg.contains("all 1 of 1 connections busy"),
        "{msg}"
    );
    assert!(
        waited >= std::time::Duration::from_millis(250),
        "waited {waited:?}"
    );
    // The waiting client is fine afterwards, and gets the connection once it is free.
    a.query_drop("COMMIT").await.unwrap();
    let one: u8 = b.query_first("SELECT 1").await.unwrap().unwrap();
    assert_eq!(one, 1);
    // While the other session is idle (not pinned), both share the one connection.
    for _ in 0..10 {
        a.query_drop("SELECT 1").await.unwrap();
        b.query_drop("SELECT 1").await.unwrap();
    }
    let stats = &env.proxy.topology.hostgroup("writer").unwrap().pool_stats()[0];
    assert_eq!(stats.open, 1);
}
