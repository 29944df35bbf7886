//! The MySQL-protocol admin listener with the mariadb CLI: SHOW SERVERS, POOLS, HOSTGROUPS,
//! SESSIONS, DIGESTS, RULES; only the admin user gets in.
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use mysql_async::prelude::*;
use mysql_async::{Conn, Opts};

/// Runs `sql` on the admin listener with the mariadb CLI; (success, stdout, stderr).
fn admin(port: u16, user: &str, password: &str, sql: &str) -> (bool, String, String) {
    let out = common::cli_raw(port, user, password, None, sql, &[]);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_commands_answer_with_the_proxy_state() {
    let env = common::start(
        1,
        "\n[[rules]]\nname = \"pinned_reads\"\nmatch = \"^SELECT 7\"\nhostgroup = \"writer\"\n\n[admin]\nlisten = \"127.0.0.1:0\"\nsql_listen = \"127.0.0.1:0\"\nsql_password = \"adm1n\"\n",
    )
    .await;
    let port = env.admin_sql_port();
    let mut c = Conn::new(Opts::from_url(&env.url("test")).unwrap())
        .await
        .unwrap();
    c.query_drop("SELECT 7").await.unwrap();
    c.query_drop("BEGIN").await.unwrap();
    c.query_drop("SELECT 1").await.unwrap();

    let run =
        |sql: &'static str| tokio::task::spawn_blocking(move || admin(port, "admin", "adm1n", sql));
    let (ok, out, err) = run("SHOW SERVERS").await.unwrap();
    assert!(ok, "{err}");
    let primary = env.topo.primary().addr();
    let line = out
        .lines()
        .find(|l| l.starts_with(&primary))
        .unwrap_or_else(|| panic!("{out}"));
    let cols: Vec<&str> = line.split('\t').collect();
    assert_eq!(cols[1], "writer", "{line}");
    // Fixed hostgroups: the role is what the monitor sees (writable, replicating from no one).
    assert_eq!(cols[2], "primary", "{line}");
    assert_eq!(cols[5], "YES", "reachable: {line}");
    assert_eq!(cols[3], "ONLINE", "{line}");

    let (ok, out, err) = run("show pools;").await.unwrap();
    assert!(ok, "{err}");
    assert!(out.lines().any(|l| l.starts_with("writer\t")), "{out}");

    let (ok, out, _) = run("SHOW HOSTGROUPS").await.unwrap();
    assert!(ok && out.contains("reader\t"), "{out}");

    let (ok, out, err) = run("SHOW SESSIONS").await.unwrap();
    assert!(ok, "{err}");
    let session = out
        .lines()
        .next()
        .unwrap_or_else(|| panic!("no session: {out}"));
    let cols: Vec<&str> = session.split('\t').collect();
    assert_eq!(cols[1], "app", "{session}");
    assert_eq!(
        cols[4], "transaction",
        "pinned by its transaction: {session}"
    );
    assert_eq!(cols[5], primary, "{session}");

    let (ok, out, err) = run("SHOW RULES").await.unwrap();
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "pinned_reads\t^SELECT 7\twriter\tNULL\tNULL\t1");

    let (ok, out, err) = run("SHOW DIGESTS").await.unwrap();
    assert!(ok, "{err}");
    assert!(
        out.lines()
            .any(|l| l.split('\t').nth(1) == Some("SELECT ?") && l.contains("\twriter\t")),
        "{out}"
    );

    // Anything else is refused, with the list of what is understood.
    let (ok, _, err) = run("SELECT * FROM mysql.user").await.unwrap();
    assert!(
        !ok && err.contains("ERROR 1047") && err.contains("SHOW SERVERS"),
        "{err}"
    );
    // Only the admin user logs in; the application's user does not.
    let (ok, _, err) =
        tokio::task::spawn_blocking(move || admin(port, "app", "app", "SHOW SERVERS"))
            .await
            .unwrap();
    assert!(!ok && err.contains("1045"), "{err}");
    let (ok, _, err) =
        tokio::task::spawn_blocking(move || admin(port, "admin", "wrong", "SHOW SERVERS"))
            .await
            .unwrap();
    assert!(!ok && err.contains("1045"), "{err}");
    c.query_drop("COMMIT").await.unwrap();
}
