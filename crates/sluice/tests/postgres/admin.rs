//! What the admin API and the metrics show of PostgreSQL sessions and statements.

use super::pg::{self, start};

/// The admin API and the metrics count PostgreSQL servers' statements as they count
/// MySQL's: per server (statements, errors) and per statement shape in the digest table,
/// and show their pools.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_api_and_metrics_count_postgres_statements() {
    let env = start(1, "").await;
    let admin = env.admin().await;
    env.psql("CREATE TABLE counted (id int)");
    for i in 0..3 {
        env.psql(&format!("INSERT INTO counted VALUES ({i})"));
    }
    for _ in 0..4 {
        assert_eq!(env.psql("SELECT pg_is_in_recovery()").trim(), "t");
    }
    assert!(!env
        .psql_as("app", "app", "postgres", "SELECT 1/0")
        .status
        .success());

    let servers = pg::http::get_json(admin.addr, "/api/servers");
    let row = |addr: String| {
        servers
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["address"] == addr.as_str())
            .cloned()
            .unwrap_or_else(|| panic!("{addr} not in {servers}"))
    };
    let primary = row(env.topo.primary().addr());
    let replica = row(env.topo.replicas()[0].addr());
    assert_eq!(primary["protocol"], "postgres");
    assert_eq!(
        (&primary["queries"], &primary["errors"]),
        (&4.into(), &0.into()),
        "{primary}"
    );
    assert_eq!(
        (&replica["queries"], &replica["errors"]),
        (&5.into(), &1.into()),
        "{replica}"
    );
    assert!(
        primary["pool_idle"].as_u64().unwrap() + primary["pool_in_use"].as_u64().unwrap() >= 1,
        "{primary}"
    );

    let digests = pg::http::get_json(admin.addr, "/api/digests");
    let insert = digests["digests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| {
            d["text"]
                .as_str()
                .unwrap_or("")
                .starts_with("INSERT INTO counted")
        })
        .unwrap_or_else(|| panic!("no INSERT digest in {digests}"));
    assert_eq!(insert["count"], 3, "{insert}");
    assert_eq!(insert["hostgroup"], "writer", "{insert}");
    assert_eq!(insert["user"], "app", "{insert}");
    // A digest first seen in a query over 64 KiB has the text of the whole query (sluice's
    // record of a query keeps only its first 64 KiB).
    let long = format!(
        "/* {} */ SELECT length('{}') AS long_digest_marker",
        "c".repeat(35_000),
        "x".repeat(35_000)
    );
    let out = env.psql(&long);
    assert!(out.lines().any(|l| l.trim() == "35000"), "{out}");
    let digests = pg::http::get_json(admin.addr, "/api/digests");
    assert!(
        digests["digests"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["text"] == "SELECT length(?) AS long_digest_marker"),
        "no digest of the long query in {digests}"
    );

    let (status, metrics) = pg::http::request(admin.addr, "GET", "/metrics", None);
    assert_eq!(status, 200);
    let line = format!(
        "sluice_server_queries_total{{server=\"{}\",protocol=\"postgres\"}} 4",
        env.topo.primary().addr()
    );
    assert!(
        metrics.lines().any(|l| l == line),
        "{line} not in\n{metrics}"
    );

    // Twenty statements of one shape in one session: each looked up by shape, and found on
    // every lookup but each thread's first (the counters are the process's: other tests of
    // this binary only add to them). No table: the reads go to a replica, which may not have
    // replayed this test's CREATE TABLE yet.
    let shape_counts = |metrics: &str| {
        let get = |name: &str| -> u64 {
            metrics
                .lines()
                .find_map(|l| {
                    l.strip_prefix(name)?
                        .trim_start_matches("{}")
                        .trim()
                        .parse()
                        .ok()
                })
                .unwrap_or_else(|| panic!("no {name} in\n{metrics}"))
        };
        (
            get("sluice_statement_shape_lookups_total"),
            get("sluice_statement_shape_hits_total"),
        )
    };
    let before = shape_counts(&metrics);
    let script: String = (0..20).map(|i| format!("SELECT {i} + 1 AS n;\n")).collect();
    let (_, err) = env.psql_script(&script);
    assert!(err.is_empty(), "{err}");
    let (_, metrics) = pg::http::request(admin.addr, "GET", "/metrics", None);
    let after = shape_counts(&metrics);
    let threads = 2;
    assert!(after.0 - before.0 >= 20, "{before:?} -> {after:?}");
    assert!(
        after.1 - before.1 >= 20 - threads,
        "{before:?} -> {after:?}"
    );
}

/// A replica removed over the admin API and added again while a session's read-only
/// transaction holds one of its connections: the new entry counts that connection against
/// the server's limit until it comes back, and then it is closed, not pooled. (The reader
/// hostgroup goes with its only server and comes back with it: the same hostgroup.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_lent_by_a_removed_entry_counts_until_it_comes_back() {
    let env = start(1, "").await;
    let admin = env.admin().await;
    let replica = env.topo.replicas()[0].addr();
    // A count of the replica's pool, as `GET /api/servers` shows it.
    let pool = |field: &str| {
        let servers = pg::http::get_json(admin.addr, "/api/servers");
        servers
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["address"] == replica.as_str())
            .map(|s| s[field].as_u64().unwrap())
    };
    let in_use = || pool("pool_in_use");
    let dsn = format!(
        "host=127.0.0.1 port={} user=app password=app dbname=postgres",
        env.port
    );
    let (client, conn) = tokio_postgres::connect(&dsn, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client.batch_execute("BEGIN READ ONLY").await.unwrap();
    let row = client
        .query_one("SELECT pg_is_in_recovery()", &[])
        .await
        .unwrap();
    assert!(row.get::<_, bool>(0), "the transaction runs on the replica");
    assert_eq!(in_use(), Some(1));
    let request = |method: &'static str, path: String| {
        let addr = admin.addr;
        tokio::task::spawn_blocking(move || pg::http::request(addr, method, &path, None))
    };
    let (status, body) = request("DELETE", format!("/api/servers/{replica}"))
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    let (status, body) = request(
        "POST",
        format!("/api/servers?address={replica}&hostgroup=reader&protocol=postgres"),
    )
    .await
    .unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        in_use(),
        Some(1),
        "the new entry counts the connection still lent"
    );
    // The transaction carries on where it began, and ends there.
    let row = client
        .query_one("SELECT pg_is_in_recovery()", &[])
        .await
        .unwrap();
    assert!(row.get::<_, bool>(0));
    client.batch_execute("COMMIT").await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut left = in_use();
    while left != Some(0) && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        left = in_use();
    }
    assert_eq!(left, Some(0), "it came back, and is counted no more");
    assert_eq!(
        pool("pool_idle"),
        Some(0),
        "closed, not pooled for the new entry"
    );
    // The new entry serves reads with connections of its own.
    let row = client
        .query_one("SELECT pg_is_in_recovery()", &[])
        .await
        .unwrap();
    assert!(row.get::<_, bool>(0));
}
