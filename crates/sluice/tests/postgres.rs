//! PostgreSQL through sluice with psql and pgbench against real PostgreSQL 15 servers: the
//! issue's configuration, logins, read/write splitting, transactions, session state across
//! pooled connections, pins, COPY, errors and cancel; and tokio-postgres (`tokio_driver`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "postgres/admin.rs"]
mod admin;
#[path = "postgres/budgets.rs"]
mod budgets;
#[path = "postgres/cancel.rs"]
mod cancel;
#[path = "postgres/copy_in.rs"]
mod copy_in;
#[path = "postgres/cursors.rs"]
mod cursors;
#[path = "postgres/custom_settings.rs"]
mod custom_settings;
#[path = "postgres/edges.rs"]
mod edges;
#[path = "postgres/encodings.rs"]
mod encodings;
#[path = "postgres/extended.rs"]
mod extended;
#[path = "postgres/fault_relays.rs"]
mod fault_relays;
#[path = "postgres/faults.rs"]
mod faults;
#[path = "postgres/flushes.rs"]
mod flushes;
#[path = "postgres/held_begins.rs"]
mod held_begins;
#[path = "postgres/lifetime.rs"]
mod lifetime;
#[path = "postgres/login_auth.rs"]
mod login_auth;
#[path = "postgres/logins.rs"]
mod logins;
#[path = "postgres/long_texts.rs"]
mod long_texts;
#[path = "postgres/notify.rs"]
mod notify;
#[path = "postgres/own_statements.rs"]
mod own_statements;
#[path = "postgres/param_types.rs"]
mod param_types;
#[path = "postgres/parameters.rs"]
mod parameters;
mod pg;
#[path = "postgres/pins.rs"]
mod pins;
#[path = "postgres/pins_as_postgres.rs"]
mod pins_as_postgres;
#[path = "postgres/pipelines.rs"]
mod pipelines;
#[path = "postgres/replica_locks.rs"]
mod replica_locks;
#[path = "postgres/result_changes.rs"]
mod result_changes;
#[path = "postgres/routing.rs"]
mod routing;
#[path = "postgres/server_faults.rs"]
mod server_faults;
#[path = "postgres/startup_resets.rs"]
mod startup_resets;
#[path = "postgres/statements.rs"]
mod statements;
#[path = "postgres/tls.rs"]
mod tls;
#[path = "postgres/tokio_driver.rs"]
mod tokio_driver;

use pg::{psql, start};
use std::time::Duration;

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_go_to_replicas_and_writes_to_the_primary() {
    let env = start(
        1,
        "\n[postgres]\nread_only_functions = [\"report_total\"]\n",
    )
    .await;
    // A plain read: a replica.
    assert_eq!(env.psql("SELECT pg_is_in_recovery()").trim(), "t");
    // Writes: the primary, verified there directly.
    env.psql("CREATE TABLE t (id int primary key, v text)");
    env.psql("INSERT INTO t VALUES (1, 'one')");
    assert_eq!(
        env.topo
            .primary()
            .sql("SELECT v FROM t WHERE id = 1")
            .unwrap()
            .trim(),
        "one"
    );
    // What can write or lock: the primary.
    for sql in [
        "SELECT pg_is_in_recovery() FROM t FOR UPDATE",
        "SELECT pg_is_in_recovery(), nextval('s')",
        "WITH w AS (UPDATE t SET v = 'uno' WHERE id = 1 RETURNING id) SELECT pg_is_in_recovery() FROM w",
    ] {
        if sql.contains("nextval") {
            env.psql("CREATE SEQUENCE IF NOT EXISTS s");
        }
        assert!(env.psql(sql).trim().starts_with('f'), "{sql}");
    }
    // A transaction stays on one connection: the primary.
    let out = env.psql_script(
        "BEGIN;\nSELECT pg_is_in_recovery();\nSELECT pg_backend_pid() = pg_backend_pid();\nCOMMIT;\n",
    );
    assert_eq!(out.0.trim(), "f\nt", "{out:?}");
    // A read-only transaction may go to a replica (its connection is chosen by its first
    // statement).
    let out = env.psql_script("BEGIN READ ONLY;\nSELECT pg_is_in_recovery();\nCOMMIT;\n");
    assert_eq!(out.0.trim(), "t", "{out:?}");
    let out = env
        .psql_script("BEGIN;\nSET TRANSACTION READ ONLY;\nSELECT pg_is_in_recovery();\nCOMMIT;\n");
    assert_eq!(out.0.trim(), "t", "{out:?}");
    // Unless its first statement makes it read-write or serializable (a standby refuses
    // both, the primary takes them): then the primary.
    for set in ["READ WRITE", "ISOLATION LEVEL SERIALIZABLE"] {
        let out = env.psql_script(&format!(
            "BEGIN READ ONLY;\nSET TRANSACTION {set};\nSELECT pg_is_in_recovery();\nCOMMIT;\n"
        ));
        assert_eq!(out.0.trim(), "f", "{set}: {out:?}");
    }
    // A function sluice does not know may write: the primary, unless configured as
    // read-only.
    env.psql("CREATE FUNCTION report_total() RETURNS bigint LANGUAGE sql STABLE AS 'SELECT count(*) FROM t'");
    env.psql(
        "CREATE FUNCTION bump() RETURNS int LANGUAGE sql AS 'UPDATE t SET v = v RETURNING id'",
    );
    pg::wait_replayed(&env.topo).await;
    assert_eq!(
        env.psql("SELECT pg_is_in_recovery(), report_total()")
            .trim(),
        "t|1"
    );
    assert_eq!(env.psql("SELECT pg_is_in_recovery(), bump()").trim(), "f|1");
    assert_eq!(
        env.psql("SELECT pg_is_in_recovery(), public.report_total(), bump()")
            .trim(),
        "f|1|1"
    );
    // A hint overrides the scanner.
    assert_eq!(
        env.psql("SELECT /* sluice:writer */ pg_is_in_recovery()")
            .trim(),
        "f"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logins_fail_as_postgresql_says() {
    let env = start(0, "").await;
    let out = env.psql_as("app", "wrong", "postgres", "SELECT 1");
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("password authentication failed for user \"app\""),
        "{}",
        stderr(&out)
    );
    let out = env.psql_as("nobody", "x", "postgres", "SELECT 1");
    assert!(stderr(&out).contains("password authentication failed for user \"nobody\""));
    let out = env.psql_as("app", "app", "nosuchdb", "SELECT 1");
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("database \"nosuchdb\" does not exist"),
        "{}",
        stderr(&out)
    );
    // The database a client names is the servers'.
    env.topo.primary().sql("CREATE DATABASE other").unwrap();
    let out = psql(
        env.port,
        "app",
        "app",
        "other",
        &["-c", "SELECT current_database()"],
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "other");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_state_follows_the_client_across_pooled_connections() {
    // One connection per server at most: sessions take turns on it.
    let env = start(1, "\n[pool]\nmax_connections = 1\n").await;
    env.psql(
        "CREATE SCHEMA s1; CREATE TABLE s1.only_here (x int); INSERT INTO s1.only_here VALUES (7)",
    );
    pg::wait_replayed(&env.topo).await;
    let (out, err) = env.psql_script(
        "SET search_path = s1, public;\nSET application_name = 'mine';\nSET statement_timeout = '12s';\n\
         SELECT x FROM only_here;\nINSERT INTO only_here VALUES (8);\nSELECT current_setting('application_name'), current_setting('statement_timeout');\n\
         BEGIN; SET LOCAL statement_timeout = '1s'; COMMIT;\nSHOW statement_timeout;\n\
         RESET search_path;\nSELECT count(*) FROM pg_tables WHERE tablename = 'only_here';\nSHOW search_path;\n",
    );
    assert_eq!(
        out.trim(),
        "7\nmine|12s\n12s\n1\n\"$user\", public",
        "stderr: {err}"
    );
    // Another client on the same connections sees none of it.
    assert_eq!(env.psql("SHOW search_path").trim(), "\"$user\", public");
    assert_eq!(
        env.psql("SELECT current_setting('application_name')")
            .trim(),
        "psql"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinned_state_keeps_the_connection_and_the_admin_view_says_why() {
    let env = start(1, "").await;
    let (out, err) = env.psql_script(
        "CREATE TEMP TABLE tmp (x int);\nINSERT INTO tmp VALUES (1);\nSELECT count(*) FROM tmp;\n\
         SELECT pg_advisory_lock(42);\nSELECT pg_advisory_unlock(42);\nSELECT count(*) FROM tmp;\n",
    );
    assert_eq!(out.trim(), "1\n\nt\n1", "stderr: {err}");
    // While a session holds a temporary table, the registry (the admin API's sessions view)
    // says why it keeps its connection.
    // (The holder's psql reads its script from a pipe left open until the pin was seen: no
    // timing involved.)
    let mut holder = pg::psql_command(env.port, "app", "app", "postgres");
    holder
        .args(["-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut holder = holder.spawn().unwrap();
    let mut script = holder.stdin.take().unwrap();
    std::io::Write::write_all(&mut script, b"CREATE TEMP TABLE held (x int);\n").unwrap();
    std::io::Write::flush(&mut script).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let reasons = env.pin_reasons();
        if reasons.iter().any(|r| r == &vec!["temporary table"]) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no pinned session seen: {reasons:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(script);
    assert!(holder.wait_with_output().unwrap().status.success());
    // LISTEN/NOTIFY: the notification reaches the listening session.
    let (out, err) = env.psql_script("LISTEN ch;\nNOTIFY ch, 'hello';\nSELECT 1;\n");
    assert!(err.is_empty() || !err.contains("ERROR"), "{err}");
    assert!(
        out.contains("Asynchronous notification \"ch\" with payload \"hello\""),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_leave_the_session_usable() {
    let env = start(0, "").await;
    let (out, err) = env.psql_script(
        "BEGIN;\nSELECT 1/0;\nSELECT 1;\nROLLBACK;\nSELECT 2;\nSELECT nosuchcolumn;\nSELECT 3;\n",
    );
    assert_eq!(out.trim(), "2\n3", "{err}");
    assert!(err.contains("division by zero"), "{err}");
    assert!(err.contains("current transaction is aborted"), "{err}");
    assert!(
        err.contains("column \"nosuchcolumn\" does not exist"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_round_trips() {
    let env = start(0, "").await;
    env.psql("CREATE TABLE c (id int, v text)");
    let dir = tempdir();
    let input = dir.join("in.csv");
    let rows: String = (0..5000).map(|i| format!("{i},row {i}\n")).collect();
    std::fs::write(&input, &rows).unwrap();
    env.psql(&format!(
        "\\copy c FROM '{}' WITH (FORMAT csv)",
        input.display()
    ));
    assert_eq!(
        env.topo
            .primary()
            .sql("SELECT count(*) FROM c")
            .unwrap()
            .trim(),
        "5000"
    );
    let output = dir.join("out.csv");
    env.psql(&format!(
        "\\copy (SELECT * FROM c ORDER BY id) TO '{}' WITH (FORMAT csv)",
        output.display()
    ));
    assert_eq!(std::fs::read_to_string(&output).unwrap(), rows);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_cancels_a_running_statement() {
    let env = start(0, "").await;
    let mut cmd = pg::psql_command(env.port, "app", "app", "postgres");
    cmd.args(["-c", "SELECT pg_sleep(60)"]);
    cmd.stderr(std::process::Stdio::piped());
    let child = cmd.spawn().unwrap();
    let pid = child.id() as i32;
    // Wait until the statement runs on the server, then Ctrl-C.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while env
        .topo
        .primary()
        .sql("SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(60)' AND state = 'active'")
        .unwrap()
        .trim()
        != "1"
    {
        assert!(std::time::Instant::now() < deadline, "the statement never ran");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    unsafe_free_kill(pid);
    let out = child.wait_with_output().unwrap();
    assert!(
        stderr(&out).contains("canceling statement due to user request"),
        "{}",
        stderr(&out)
    );
}

/// SIGINT to a process, through the kill command (no unsafe code in tests).
fn unsafe_free_kill(pid: i32) {
    std::process::Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap();
}

fn tempdir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!(
        "sluice-pg-{}-{}",
        std::process::id(),
        rand_suffix()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn rand_suffix() -> u64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// pgbench through sluice: select-only and TPC-B-like, in the simple, extended and prepared
/// protocols, with more clients than server connections; no transaction may fail. Two
/// threads for eight clients: pgbench 15 prepares synchronously (PQprepare) while the
/// thread's other clients hold the pool's connections inside their transactions, which
/// works because sluice answers a Parse on its own without a connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgbench_runs_without_a_failed_transaction() {
    let env = start(
        1,
        "\n[pool]\nmax_connections = 4\nqueue_timeout = \"60s\"\n",
    )
    .await;
    pg::pgbench_init(&env).await;
    let pgbench = sluice_testkit::find_program("pgbench", "postgresql-client-15").unwrap();
    for (mode, builtin) in [
        ("simple", "select-only"),
        ("extended", "select-only"),
        ("prepared", "select-only"),
        ("simple", "tpcb-like"),
        ("prepared", "tpcb-like"),
    ] {
        let port = env.port.to_string();
        let out = tokio::task::spawn_blocking({
            let pgbench = pgbench.clone();
            move || {
                std::process::Command::new(&pgbench)
                    .env("PGPASSWORD", "app")
                    .args([
                        "-h",
                        "127.0.0.1",
                        "-U",
                        "app",
                        "-n",
                        "-c",
                        "8",
                        "-j",
                        "2",
                        "-t",
                        "100",
                        "-M",
                        mode,
                        "-b",
                        builtin,
                        "-p",
                        &port,
                        "postgres",
                    ])
                    .output()
                    .unwrap()
            }
        })
        .await
        .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "pgbench -M {mode} -b {builtin}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains("number of transactions actually processed: 800/800"),
            "-M {mode} -b {builtin}: {stdout}"
        );
        assert!(
            stdout.contains("number of failed transactions: 0"),
            "{stdout}"
        );
    }
    // TPC-B wrote on the primary: the history has every transaction.
    assert_eq!(
        env.topo
            .primary()
            .sql("SELECT count(*) FROM pgbench_history")
            .unwrap()
            .trim(),
        "1600"
    );
}

/// A pooled connection whose server backend was terminated while it sat idle is not lent to
/// the next session: that session's statement runs on another connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_idle_connection_is_not_lent() {
    let env = start(1, "").await;
    let pid = env.psql("SELECT pg_backend_pid()").trim().to_string();
    let replica = &env.topo.replicas()[0];
    assert_eq!(
        replica
            .sql(&format!("SELECT pg_terminate_backend({pid})"))
            .unwrap()
            .trim(),
        "t"
    );
    // Gone on the server: its socket is closed.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while replica
        .sql(&format!(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = {pid}"
        ))
        .unwrap()
        .trim()
        != "0"
    {
        assert!(
            std::time::Instant::now() < deadline,
            "backend {pid} still there"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let out = env.psql("SELECT pg_is_in_recovery(), pg_backend_pid()");
    assert!(out.trim().starts_with("t|"), "{out}");
    assert_ne!(out.trim().split('|').nth(1), Some(pid.as_str()));
}

/// Users configured without their password: with the SCRAM secret the servers store, sluice
/// logs in to the servers with the client key the client's own SCRAM proof revealed (SCRAM
/// pass-through); with PostgreSQL's MD5 hash, it answers MD5 requests. A secret the servers
/// do not store (another salt) gets an error that says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_configured_with_secrets_only_reach_the_servers() {
    let env = start(1, "").await;
    let primary = env.topo.primary();
    primary
        .sql("SET password_encryption = 'scram-sha-256'; CREATE ROLE vault LOGIN SUPERUSER PASSWORD 'vault-pw'")
        .unwrap();
    primary
        .sql("SET password_encryption = 'md5'; CREATE ROLE hashy LOGIN SUPERUSER PASSWORD 'hashy-pw'")
        .unwrap();
    primary
        .sql("CREATE ROLE salty LOGIN SUPERUSER PASSWORD 'salty-pw'")
        .unwrap();
    for s in &env.topo.servers {
        s.require_passwords(&[("hashy", "md5")]).unwrap();
    }
    pg::wait_replayed(&env.topo).await;
    let secret = |role: &str| {
        primary
            .sql(&format!(
                "SELECT rolpassword FROM pg_authid WHERE rolname = '{role}'"
            ))
            .unwrap()
            .trim()
            .to_string()
    };
    let vault = secret("vault");
    let hashy = secret("hashy");
    assert!(vault.starts_with("SCRAM-SHA-256$") && hashy.starts_with("md5"));
    // The same password, another salt: not what the servers store.
    let salty = sluice_postgres::scram::Verifier::from_password("salty-pw", b"another salt", 4096)
        .to_secret();
    let users = format!(
        "[[users]]\nname = \"vault\"\npassword = \"{vault}\"\n\n[[users]]\nname = \"hashy\"\npassword = \"{hashy}\"\nauth_method = \"md5\"\n\n[[users]]\nname = \"salty\"\npassword = \"{salty}\"\n"
    );
    let text = pg::config(&env.topo, "")
        .replace("[[users]]\nname = \"app\"\npassword = \"app\"\n", &users);
    let (_process, running) = pg::start_sluice(&text).await;
    let port = running.addrs[0].port();
    let read = "SELECT pg_is_in_recovery()";
    let locking = "SELECT pg_is_in_recovery() FROM pg_class LIMIT 1 FOR UPDATE";
    for (user, password) in [("vault", "vault-pw"), ("hashy", "hashy-pw")] {
        let out = pg::psql(
            port,
            user,
            password,
            "postgres",
            &["-c", read, "-c", locking],
        );
        assert!(
            out.status.success(),
            "{user}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // A read on the replica, a locking read on the primary.
        assert_eq!(String::from_utf8_lossy(&out.stdout), "t\nf\n", "{user}");
    }
    let out = pg::psql(port, "salty", "salty-pw", "postgres", &["-c", "SELECT 1"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("salt or iteration count differs from the configured secret"),
        "{err}"
    );
}
