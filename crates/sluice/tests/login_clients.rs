//! Every login path of real clients: mysql-connector-python's C extension (libmysqlclient,
//! caching_sha2_password by default) runs `tests/drivers/python/cext_login.py` — handshake,
//! COM_CHANGE_USER, re-authentication, a failed change of user, COM_RESET_CONNECTION,
//! reconnect — over plain TCP and TLS, against sluice announcing either plugin; the mariadb
//! CLI logs in with every plugin it has, over plain TCP and TLS.
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};

/// Runs the C-extension script against `port`; returns its stdout, asserting success.
async fn cext(port: u16, tls: bool) -> String {
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/drivers/python/cext_login.py");
    let out = tokio::task::spawn_blocking(move || {
        Command::new("python3")
            .arg(&script)
            .env("PORT", port.to_string())
            .env("TLS", if tls { "1" } else { "0" })
            .stdin(Stdio::null())
            .output()
            .expect("python3 must be on PATH (scripts/test.sh puts target/pyenv first)")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("ModuleNotFoundError"),
        "mysql-connector-python is missing (pip install mysql-connector-python):\n{stderr}"
    );
    assert!(
        out.status.success(),
        "C-extension client failed (tls {tls}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_extension_and_mariadb_cli_every_login_path() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = common::certs::self_signed(dir.path(), "proxy", "127.0.0.1");
    let env = common::start_with(
        0,
        "\n[[users]]\nname = \"other\"\npassword = \"other\"\n",
        |t| {
            *t = t.replacen(
                "listen = \"127.0.0.1:0\"\n",
                &format!("listen = \"127.0.0.1:0\"\ntls_cert = \"{cert}\"\ntls_key = \"{key}\"\n"),
                1,
            );
        },
    )
    .await;
    env.topo
        .primary()
        .sql("CREATE USER 'other'@'%' IDENTIFIED BY 'other'; GRANT ALL ON *.* TO 'other'@'%'")
        .unwrap();
    let mut cfg = (*env.proxy.rt.loaded.load_full()).clone();
    cfg.mysql.default_auth_plugin = sluice_config::AuthPlugin::CachingSha2Password;
    let (_sha2_proxy, sha2) = common::start_proxy(&cfg.to_toml()).await;

    for (port, default) in [(env.port, "native"), (sha2.addrs[0].port(), "caching_sha2")] {
        for tls in [false, true] {
            let out = cext(port, tls).await;
            let expected = format!(
                "tls {}\nconnect app@% test\nchange_user other@% test\nchange_back app@% test\n\
                 reauthenticate app@% test\nfailed_change_user 1045\nafter_failure app@% test\n\
                 reset_session app@% test\nreconnect app@% test\n",
                if tls { "yes" } else { "no" }
            );
            assert_eq!(out, expected, "default plugin {default}, TLS {tls}");
        }
    }

    // The mariadb CLI with each of its plugins as its default, plain and TLS.
    for (port, default) in [(env.port, "native"), (sha2.addrs[0].port(), "caching_sha2")] {
        for plugin in [
            "mysql_native_password",
            "caching_sha2_password",
            "sha256_password",
            "mysql_clear_password",
            "client_ed25519",
            "dialog",
        ] {
            for tls in ["--ssl", "--skip-ssl"] {
                let auth = format!("--default-auth={plugin}");
                let out = tokio::task::spawn_blocking(move || {
                    common::cli_raw(
                        port,
                        "app",
                        "app",
                        None,
                        "SELECT CURRENT_USER()",
                        &[&auth, tls],
                    )
                })
                .await
                .unwrap();
                assert!(
                    out.status.success(),
                    "mariadb CLI {plugin} {tls}, sluice default {default}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "app@%");
            }
        }
    }
}
