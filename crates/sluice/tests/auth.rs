//! Client authentication: mysql_native_password, caching_sha2_password (always the fast
//! path: sluice knows the passwords), wrong passwords.
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::raw::{err_text, Raw, CLIENT_CAPS};
use sluice_mysql::auth;
use sluice_mysql::wire::consts::{CACHING_SHA2_PASSWORD, NATIVE_PASSWORD};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_and_caching_sha2_with_real_and_raw_clients() {
    let env = common::start(
        1,
        "\n[[users]]\nname = \"shauser\"\npassword = \"s3cret!\"\n",
    )
    .await;
    // The backend needs the second user too.
    env.topo
        .primary()
        .sql("CREATE USER 'shauser'@'%' IDENTIFIED BY 's3cret!'; GRANT ALL ON *.* TO 'shauser'@'%'")
        .unwrap();
    env.sync();

    // mysql_native_password with the mariadb CLI.
    assert_eq!(env.cli("SELECT CURRENT_USER()"), "app@%");

    // caching_sha2_password, raw: sluice knows the password, so even the first login of the
    // user takes the fast path (no RSA key, no TLS needed), and so does the next.
    for _ in 0..2 {
        let mut r = Raw::connect(env.port).await;
        let p = r
            .hello(
                "shauser",
                "s3cret!",
                CACHING_SHA2_PASSWORD,
                CLIENT_CAPS,
                None,
            )
            .await;
        assert_eq!(
            &p.payload[..],
            &[0x01, auth::sha2::FAST_AUTH_SUCCESS],
            "fast path: {:?}",
            err_text(&p)
        );
        let ok = r.recv().await.unwrap();
        assert_eq!(ok.payload[0], 0x00);
    }

    // The mariadb CLI's caching_sha2_password plugin logs in on the fast path; a wrong
    // password is refused.
    let sha2 = ["--default-auth=caching_sha2_password"];
    let out = common::cli_raw(
        env.port,
        "shauser",
        "s3cret!",
        None,
        "SELECT CURRENT_USER()",
        &sha2,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "shauser@%");
    let out = common::cli_raw(env.port, "shauser", "bad", None, "SELECT 1", &sha2);
    assert!(String::from_utf8_lossy(&out.stderr).contains("ERROR 1045"));

    // A wrong password on the fast path is refused with 1045.
    let mut r = Raw::connect(env.port).await;
    let p = r
        .hello("shauser", "wrong", CACHING_SHA2_PASSWORD, CLIENT_CAPS, None)
        .await;
    let (code, msg) = err_text(&p).expect("error");
    assert_eq!(code, 1045);
    assert_eq!(
        msg,
        "Access denied for user 'shauser'@'127.0.0.1' (using password: YES)"
    );

    // An unknown plugin gets an auth switch to mysql_native_password.
    let mut r = Raw::connect(env.port).await;
    let p = r
        .hello("app", "app", "client_ed25519", CLIENT_CAPS, None)
        .await;
    let (plugin, nonce) =
        sluice_mysql::wire::handshake::decode_auth_switch(&p.payload).expect("auth switch");
    assert_eq!(plugin, NATIVE_PASSWORD);
    r.send(p.last_seq + 1, &auth::native::scramble(b"app", &nonce))
        .await;
    assert_eq!(r.recv().await.unwrap().payload[0], 0x00);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pymysql_with_caching_sha2() {
    // Announce caching_sha2_password like MySQL 8, so PyMySQL uses it.
    let env = common::start_with(1, "", |t| {
        *t = t.replace(
            "[proxy]\n",
            "[proxy]\ndefault_auth_plugin = \"caching_sha2_password\"\n",
        );
    })
    .await;
    let script = r#"
import os, pymysql
port = int(os.environ["PORT"])
for i in range(2):
    c = pymysql.connect(host="127.0.0.1", port=port, user="app", password="app", database="test", autocommit=True)
    cur = c.cursor()
    cur.execute("SELECT CURRENT_USER(), @@server_id")
    print(cur.fetchone())
    c.close()
try:
    pymysql.connect(host="127.0.0.1", port=port, user="app", password="bad", database="test")
    print("NO ERROR")
except pymysql.err.OperationalError as e:
    print("ERR", e.args[0], e.args[1])
"#;
    let out = common::python(env.port, script);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "('app@%', 2)");
    assert_eq!(lines[1], "('app@%', 2)");
    assert_eq!(
        lines[2],
        "ERR 1045 Access denied for user 'app'@'127.0.0.1' (using password: YES)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_password_and_unknown_user_get_1045_without_hanging() {
    let env = common::start(0, "").await;
    let started = std::time::Instant::now();
    let out = common::cli_raw(env.port, "app", "nope", Some("test"), "SELECT 1", &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "ERROR 1045 (28000): Access denied for user 'app'@'127.0.0.1' (using password: YES)"
        ),
        "{err}"
    );
    let out = common::cli_raw(env.port, "ghost", "x", None, "SELECT 1", &[]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("ERROR 1045"));
    let out = common::cli_raw(env.port, "app", "", None, "SELECT 1", &[]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("(using password: NO)"));
    // The mariadb CLI's caching_sha2_password plugin over plain TCP: sluice verifies its
    // scramble and never asks for the password itself (which this client would send in
    // clear), so the login succeeds without TLS or an RSA key.
    let out = common::cli_raw(
        env.port,
        "app",
        "app",
        Some("test"),
        "SELECT 1",
        &["--default-auth=caching_sha2_password"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A hang guard (no login path may stall), not a speed limit.
    assert!(started.elapsed() < std::time::Duration::from_secs(120));
    // An unknown initial database is refused like a server would.
    let out = common::cli_raw(env.port, "app", "app", Some("nosuchdb"), "SELECT 1", &[]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("ERROR 1049"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
