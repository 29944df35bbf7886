//! The connection phase over the raw protocol: every plugin a client may announce, in the
//! handshake and in COM_CHANGE_USER, with either `default_auth_plugin`; sequence ids checked
//! like MariaDB does; a failed COM_CHANGE_USER keeps the connection, as on MariaDB.
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::raw::{err_text, Raw, CLIENT_CAPS};
use sluice_mysql::wire::consts::{CACHING_SHA2_PASSWORD, NATIVE_PASSWORD};
use sluice_mysql::wire::handshake::decode_auth_switch;

/// Plugins clients announce: the two sluice speaks, and others it switches away from.
const PLUGINS: &[&str] = &[
    NATIVE_PASSWORD,
    CACHING_SHA2_PASSWORD,
    "sha256_password",
    "mysql_clear_password",
    "client_ed25519",
    "dialog",
    "no_such_plugin",
];

/// A topology with a second user, `other`.
async fn start_with_other_user() -> common::Env {
    let env = common::start(
        0,
        "\n[[users]]\nname = \"other\"\npassword = \"other\"\n\n[[users]]\nname = \"solo\"\npassword = \"solo\"\nmax_connections = 1\n",
    )
    .await;
    env.topo
        .primary()
        .sql("CREATE USER 'other'@'%' IDENTIFIED BY 'other'; GRANT ALL ON *.* TO 'other'@'%'; CREATE USER 'solo'@'%' IDENTIFIED BY 'solo'; GRANT ALL ON *.* TO 'solo'@'%'")
        .unwrap();
    env
}

fn current_user(rows: &[Vec<Option<String>>]) -> Option<&str> {
    rows.first()?.first()?.as_deref()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_announced_plugin_logs_in_and_changes_user() {
    let env = start_with_other_user().await;
    // A second sluice on the same servers that announces caching_sha2_password.
    let mut cfg = (*env.proxy.rt.loaded.load_full()).clone();
    cfg.mysql.default_auth_plugin = sluice_config::AuthPlugin::CachingSha2Password;
    let (_sha2_proxy, sha2) = common::start_proxy(&cfg.to_toml()).await;
    for (port, default) in [
        (env.port, NATIVE_PASSWORD),
        (sha2.addrs[0].port(), CACHING_SHA2_PASSWORD),
    ] {
        for &plugin in PLUGINS {
            let what = format!("default {default}, client announces {plugin}");
            let mut r = Raw::connect(port).await;
            assert_eq!(r.greeting.auth_plugin, default);
            let p = r
                .hello("app", "app", plugin, CLIENT_CAPS, Some("test"))
                .await;
            let speaks = plugin == NATIVE_PASSWORD || plugin == CACHING_SHA2_PASSWORD;
            if !speaks {
                let (to, _) = decode_auth_switch(&p.payload).unwrap_or_else(|| panic!("{what}"));
                assert_eq!(to, default, "{what}: switched to the default plugin");
            } else {
                assert_ne!(p.payload[0], 0xfe, "{what}: no switch needed");
            }
            let ok = r.finish_auth(p, "app").await;
            assert_eq!(ok.payload[0], 0x00, "{what}: {:?}", err_text(&ok));

            // COM_CHANGE_USER announcing the same plugin.
            let p = r.change_user("other", "other", plugin, None).await;
            let ok = r.finish_auth(p, "other").await;
            assert_eq!(
                ok.payload[0],
                0x00,
                "{what}, change user: {:?}",
                err_text(&ok)
            );
            let rows = r.query_rows("SELECT CURRENT_USER()").await.unwrap();
            assert_eq!(current_user(&rows), Some("other@%"), "{what}");
        }
        // libmysqlclient's COM_CHANGE_USER: caching_sha2_password without an answer. sluice
        // asks again in the same plugin and verifies the scramble itself (no TLS, no RSA).
        let mut r = Raw::login(port).await;
        let p = r
            .change_user_with("other", &[], CACHING_SHA2_PASSWORD, Some("test"))
            .await;
        let (to, _) = decode_auth_switch(&p.payload).expect("asked again");
        assert_eq!(to, CACHING_SHA2_PASSWORD);
        let ok = r.finish_auth(p, "other").await;
        assert_eq!(ok.payload[0], 0x00, "{:?}", err_text(&ok));
        let rows = r.query_rows("SELECT CURRENT_USER()").await.unwrap();
        assert_eq!(current_user(&rows), Some("other@%"));
    }
}

/// MariaDB answers a packet with the wrong sequence id in the connection phase with error
/// 1156 (SQLSTATE 08S01) "Got packets out of order", sent with the sequence id it expected,
/// and closes the connection (checked against mariadbd 10.11 with a raw client).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequence_ids_are_checked_like_mariadb() {
    let env = start_with_other_user().await;
    let out_of_order = |p: &sluice_mysql::wire::packet::Packet, seq: u8, what: &str| {
        assert_eq!(
            err_text(p),
            Some((1156, "Got packets out of order".to_string())),
            "{what}"
        );
        assert_eq!(p.seq, seq, "{what}: sent with the expected sequence id");
        assert_eq!(&p.payload[3..9], b"#08S01", "{what}");
    };
    let closed = |r: Result<_, _>, what: &str| assert!(r.is_err(), "{what}: connection closed");

    // The handshake response must be packet 1.
    for seq in [0u8, 2, 5] {
        let mut r = Raw::connect(env.port).await;
        let p = r
            .hello_seq("app", "app", NATIVE_PASSWORD, CLIENT_CAPS, None, seq)
            .await;
        out_of_order(&p, 1, &format!("handshake response with seq {seq}"));
        closed(r.recv().await, "handshake response");
    }

    // The answer to an auth switch must follow it.
    let mut r = Raw::connect(env.port).await;
    let p = r
        .hello("app", "app", "client_ed25519", CLIENT_CAPS, None)
        .await;
    let (_, nonce) = decode_auth_switch(&p.payload).expect("auth switch");
    let answer = sluice_mysql::auth::native::scramble(b"app", &nonce);
    r.send(p.seq + 3, &answer).await;
    let e = r.recv().await.unwrap();
    out_of_order(&e, p.seq + 1, "auth switch answer");
    closed(r.recv().await, "auth switch answer");

    // The same in COM_CHANGE_USER: the connection closes (its state is unknown).
    let mut r = Raw::login(env.port).await;
    let p = r
        .change_user("other", "other", "client_ed25519", None)
        .await;
    let (_, nonce) = decode_auth_switch(&p.payload).expect("auth switch");
    r.send(
        p.seq,
        &sluice_mysql::auth::native::scramble(b"other", &nonce),
    )
    .await;
    let e = r.recv().await.unwrap();
    out_of_order(&e, p.seq + 1, "change user continuation");
    closed(r.recv().await, "change user continuation");
}

/// What mariadbd 10.11 does after a failed COM_CHANGE_USER (checked with a raw client): error
/// 1045, the connection stays open as the previous user with the previous schema, but the
/// session was reset (user variables gone); an unknown schema fails the change the same way;
/// after three failures COM_CHANGE_USER gets 1047 "Unknown command" while queries still run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_change_user_keeps_the_connection_like_mariadb() {
    let env = start_with_other_user().await;
    let mut r = Raw::login(env.port).await;
    r.query_rows("SET @a = 5").await.unwrap();
    let p = r.change_user("other", "wrong", NATIVE_PASSWORD, None).await;
    let e = r.finish_auth(p, "wrong").await;
    assert_eq!(
        err_text(&e),
        Some((
            1045,
            "Access denied for user 'other'@'127.0.0.1' (using password: YES)".to_string()
        ))
    );
    let who = "SELECT CURRENT_USER(), DATABASE(), @a";
    let rows = r.query_rows(who).await.expect("the connection stays open");
    assert_eq!(
        rows,
        vec![vec![Some("app@%".into()), Some("test".into()), None]],
        "previous user and schema, session reset"
    );

    // A schema that does not exist: the change fails, the previous user stays.
    let p = r
        .change_user("other", "other", NATIVE_PASSWORD, Some("nosuchdb"))
        .await;
    let e = r.finish_auth(p, "other").await;
    assert_eq!(err_text(&e).map(|e| e.0), Some(1049), "{:?}", err_text(&e));
    let rows = r.query_rows(who).await.unwrap();
    assert_eq!(rows[0][..2], [Some("app@%".into()), Some("test".into())]);

    let p = r.change_user("ghost", "x", NATIVE_PASSWORD, None).await;
    let e = r.finish_auth(p, "x").await;
    assert_eq!(err_text(&e).map(|e| e.0), Some(1045));
    // Three failures: no more changes of user on this connection, even with the right
    // password; the connection itself carries on.
    let p = r.change_user("other", "other", NATIVE_PASSWORD, None).await;
    assert_eq!(err_text(&p), Some((1047, "Unknown command".to_string())));
    let rows = r.query_rows("SELECT CURRENT_USER()").await.unwrap();
    assert_eq!(current_user(&rows), Some("app@%"));

    // A successful change of user still works on a fresh connection.
    let mut r = Raw::login(env.port).await;
    let p = r
        .change_user("other", "other", NATIVE_PASSWORD, Some("test"))
        .await;
    let ok = r.finish_auth(p, "other").await;
    assert_eq!(ok.payload[0], 0x00, "{:?}", err_text(&ok));
    let rows = r.query_rows(who).await.unwrap();
    assert_eq!(
        rows,
        vec![vec![Some("other@%".into()), Some("test".into()), None]]
    );
}

/// A user's `max_connections` holds in COM_CHANGE_USER (error 1226, the connection stays the
/// previous user's), and a connection may re-authenticate as the user it already is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn change_user_respects_max_connections() {
    let env = start_with_other_user().await;
    let mut solo = Raw::connect(env.port).await;
    let p = solo
        .hello("solo", "solo", NATIVE_PASSWORD, CLIENT_CAPS, Some("test"))
        .await;
    assert_eq!(p.payload[0], 0x00, "{:?}", err_text(&p));
    let mut app = Raw::login(env.port).await;
    let p = app.change_user("solo", "solo", NATIVE_PASSWORD, None).await;
    let (code, msg) = err_text(&p).expect("refused");
    assert_eq!(code, 1226, "{msg}");
    let rows = app.query_rows("SELECT CURRENT_USER()").await.unwrap();
    assert_eq!(current_user(&rows), Some("app@%"));
    let p = solo
        .change_user("solo", "solo", NATIVE_PASSWORD, None)
        .await;
    assert_eq!(p.payload[0], 0x00, "{:?}", err_text(&p));
    // Leaving the user frees its place.
    let p = solo.change_user("app", "app", NATIVE_PASSWORD, None).await;
    assert_eq!(p.payload[0], 0x00, "{:?}", err_text(&p));
    let p = app.change_user("solo", "solo", NATIVE_PASSWORD, None).await;
    assert_eq!(p.payload[0], 0x00, "{:?}", err_text(&p));
    let rows = app.query_rows("SELECT CURRENT_USER()").await.unwrap();
    assert_eq!(current_user(&rows), Some("solo@%"));
}

/// A user whose password is configured in one of PostgreSQL's stored forms (a SCRAM secret,
/// an MD5 hash, for its PostgreSQL clients) has no password a MySQL exchange can check:
/// sending the stored form as the password is refused with 1045, as an unknown user is, with
/// every plugin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgresql_stored_form_is_not_a_mysql_password() {
    let secret = "SCRAM-SHA-256$4096:c2FsdHNhbHRzYWx0c2FsdA==$c3RvcmVkc3RvcmVkc3RvcmVkc3RvcmVkc3RvcmU=:c2VydmVyc2VydmVyc2VydmVyc2VydmVyc2VydmU=";
    let hash = "md5f47de2e3bd4e8f7b4e0b2d61d9e3f00a";
    let env = common::start(
        0,
        &format!(
            "\n[[users]]\nname = \"scram\"\npassword = \"{secret}\"\n\n[[users]]\nname = \"hashed\"\npassword = \"{hash}\"\nauth_method = \"md5\"\n"
        ),
    )
    .await;
    for (user, password) in [("scram", secret), ("hashed", hash)] {
        for plugin in [NATIVE_PASSWORD, CACHING_SHA2_PASSWORD] {
            let mut r = Raw::connect(env.port).await;
            let p = r.hello(user, password, plugin, CLIENT_CAPS, None).await;
            let e = r.finish_auth(p, password).await;
            assert_eq!(
                err_text(&e).map(|e| e.0),
                Some(1045),
                "{user} {plugin}: {:?}",
                String::from_utf8_lossy(&e.payload)
            );
        }
    }
    // The configured users still log in.
    Raw::login(env.port).await;
}
