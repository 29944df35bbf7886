//! Clients over TLS (rustls, certificate and key from the config): the mariadb CLI with
//! `--ssl`, PyMySQL with caching_sha2_password full authentication over TLS (the password in
//! clear inside TLS), and a user that must use TLS.

mod common;

use std::path::Path;
use std::process::Command;

/// A self-signed certificate and key (openssl CLI).
fn make_cert(dir: &Path) -> (String, String) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let openssl = sluice_testkit::find_program("openssl", "openssl").expect("openssl");
    let out = Command::new(openssl)
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args(["-subj", "/CN=127.0.0.1", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (cert.display().to_string(), key.display().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_connect_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = make_cert(dir.path());
    let env = common::start_with(
        1,
        "\n[[users]]\nname = \"secure\"\npassword = \"s3cure\"\nrequire_tls = true\n",
        |t| {
            *t = t.replacen(
                "listen = \"127.0.0.1:0\"\n",
                &format!(
                    "listen = \"127.0.0.1:0\"\ntls_cert = \"{cert}\"\ntls_key = \"{key}\"\ndefault_auth_plugin = \"caching_sha2_password\"\n"
                ),
                1,
            );
        },
    )
    .await;
    env.topo
        .primary()
        .sql("CREATE USER 'secure'@'%' IDENTIFIED BY 's3cure'; GRANT ALL ON *.* TO 'secure'@'%'")
        .unwrap();
    env.sync();
    let port = env.port;

    // The mariadb CLI over TLS: its status reports the cipher; statements run.
    let out = common::cli_raw(port, "app", "app", Some("test"), "status", &["--ssl"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("Cipher in use is"), "{stdout}");
    let out = common::cli_raw(
        port,
        "app",
        "app",
        Some("test"),
        "SELECT 40 + 2",
        &["--ssl"],
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "42");
    // TLS stays optional for other users (this CLI uses TLS by default: --skip-ssl).
    let out = common::cli_raw(port, "app", "app", Some("test"), "status", &["--skip-ssl"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("SSL:\t\t\tNot in use"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A user that must use TLS: refused without, served with.
    let out = common::cli_raw(
        port,
        "secure",
        "s3cure",
        Some("test"),
        "SELECT 1",
        &["--skip-ssl"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("1045") && stderr.contains("TLS"),
        "{stderr}"
    );
    let out = common::cli_raw(
        port,
        "secure",
        "s3cure",
        Some("test"),
        "SELECT 7",
        &["--ssl"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "7");

    // PyMySQL: caching_sha2_password full authentication over TLS (first login of the user
    // since sluice started: the password travels in clear inside TLS, not RSA-encrypted).
    let out = common::python(
        port,
        r#"
import os, ssl, pymysql
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
c = pymysql.connect(host="127.0.0.1", port=int(os.environ["PORT"]), user="secure",
                    password="s3cure", database="test", ssl=ctx)
cur = c.cursor()
cur.execute("SELECT 99")
print(cur.fetchone()[0], c._sock.version())
c.close()
"#,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.starts_with("99 TLSv1."), "{stdout}");
    let user = env.proxy.users.load().get("secure").cloned().unwrap();
    assert!(
        user.sha2_cached.load(std::sync::atomic::Ordering::Relaxed),
        "full authentication succeeded over TLS"
    );
}
