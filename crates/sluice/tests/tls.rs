//! Clients over TLS (rustls, certificate and key from the config): the mariadb CLI with
//! `--ssl`, PyMySQL with caching_sha2_password full authentication over TLS (the password in
//! clear inside TLS), and a user that must use TLS.
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

/// A self-signed certificate for 127.0.0.1 and its key (openssl CLI), named `name`.
fn make_cert_named(dir: &Path, name: &str) -> (String, String) {
    common::certs::self_signed(dir, name, "127.0.0.1")
}

/// The certificate sluice offers its clients.
fn make_cert(dir: &Path) -> (String, String) {
    make_cert_named(dir, "proxy")
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

    // PyMySQL: caching_sha2_password over TLS (sluice verifies the scramble; it never needs
    // the password itself).
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

    // A client over TLS that leaves large results unread for a while gets all of each.
    // Sluice writes a result into its socket to the client until the socket is full (the
    // kernel grows its send buffer to 2-3.5 MB here), and the rest into TLS records kept in
    // rustls (up to 64 KiB). A result a little larger than the socket holds is written
    // whole, its end in those records, which stayed there while sluice waited for the
    // client's next command (the client waited for them until its read timeout). The sizes
    // step by less than rustls keeps, across what the socket may hold.
    let out = common::python(
        port,
        r#"
import os, ssl, time, pymysql, pymysql.cursors
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
c = pymysql.connect(host="127.0.0.1", port=int(os.environ["PORT"]), user="app",
                    password="app", database="test", ssl=ctx, read_timeout=60,
                    cursorclass=pymysql.cursors.SSCursor)
n = 0
for kib in range(1024, 4609, 48):
    cur = c.cursor()
    cur.execute("SELECT LENGTH(REPEAT('x', %s)), REPEAT('x', %s)", (kib * 1024, kib * 1024))
    time.sleep(0.1)
    row = cur.fetchone()
    assert row[0] == kib * 1024 == len(row[1]), (kib, row[0])
    cur.close()
    n += 1
print("read", n)
c.close()
"#,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "read 75");

    // Certificate rotation: a reload re-reads the files; new connections get the new one.
    let subject = || {
        let out = std::process::Command::new("openssl")
            .args(["s_client", "-starttls", "mysql", "-connect"])
            .arg(format!("127.0.0.1:{port}"))
            .stdin(std::process::Stdio::null())
            .output()
            .expect("openssl s_client");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find(|l| l.starts_with("subject="))
            .unwrap_or("")
            .to_string()
    };
    assert!(subject().contains("CN = 127.0.0.1"), "{}", subject());
    let (cert2, key2) = common::certs::self_signed(dir.path(), "rotated", "rotated.example");
    let mut cfg = (*env.proxy.rt.loaded.load_full()).clone();
    cfg.proxy.tls_cert = Some(cert2);
    cfg.proxy.tls_key = Some(key2);
    let changes = env.running.process.reload(cfg).await.expect("reload");
    assert!(
        changes.iter().any(|c| c.contains("TLS certificate")),
        "{changes:?}"
    );
    assert!(subject().contains("CN = rotated.example"), "{}", subject());
}

/// sluice to the servers over TLS, verifying their certificate: the application's user is
/// declared `REQUIRE SSL` on the servers, so nothing works unless the backend connections use
/// TLS; a proxy given the wrong CA refuses the servers' certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_connections_use_verified_tls() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = common::certs::signed(dir.path(), "server");
    let (other_ca, _, _) = common::certs::signed(dir.path(), "other");
    let extra = vec![
        format!("--ssl-cert={cert}"),
        format!("--ssl-key={key}"),
        format!("--ssl-ca={ca}"),
    ];
    let topo = common::topology(sluice_testkit::TopologyOptions {
        replicas: 1,
        extra,
        ..Default::default()
    })
    .await;
    topo.primary()
        .sql("ALTER USER 'app'@'%' REQUIRE SSL")
        .unwrap();
    topo.sync_replicas(std::time::Duration::from_secs(30))
        .unwrap();
    let config = |ca: &str| {
        let mut t = format!(
            "[proxy]\nlisten = \"127.0.0.1:0\"\n[pool]\ntls = true\ntls_ca = \"{ca}\"\n[[users]]\nname = \"app\"\npassword = \"app\"\n[[servers]]\naddress = \"{}\"\nhostgroup = \"writer\"\n",
            topo.primary().addr()
        );
        for r in topo.replicas() {
            t.push_str(&format!(
                "[[servers]]\naddress = \"{}\"\nhostgroup = \"reader\"\n",
                r.addr()
            ));
        }
        t
    };
    let (proxy, running) = common::start_proxy(&config(&ca)).await;
    let port = running.addrs[0].port();
    // Reads (replica) and writes (primary), each over a TLS connection sluice opened.
    let out = common::cli_raw(
        port,
        "app",
        "app",
        Some("test"),
        "SELECT /* sluice:writer */ VARIABLE_VALUE FROM information_schema.SESSION_STATUS WHERE VARIABLE_NAME = 'SSL_VERSION'; SELECT VARIABLE_VALUE FROM information_schema.SESSION_STATUS WHERE VARIABLE_NAME = 'SSL_VERSION'",
        &["--comments"],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let versions: Vec<&str> = stdout.lines().collect();
    assert_eq!(versions.len(), 2, "{stdout}");
    assert!(versions.iter().all(|v| v.starts_with("TLSv1.")), "{stdout}");
    // The monitor's connections use TLS too (it sees the servers).
    let server = proxy.topology.all()[0].clone();
    common::wait_for(
        "the monitor to check over TLS",
        std::time::Duration::from_secs(60),
        || server.observed().reachable,
    )
    .await;
    // Idle pooled connections their server ended (KILL: its error packet and the end of the
    // connection come in TLS records) are found closed before they are lent, by a look at the
    // socket (they looked alive, and the next statement failed with them).
    let app = "SELECT GROUP_CONCAT(ID) FROM information_schema.PROCESSLIST WHERE USER = 'app'";
    let ids = topo.primary().sql(app).unwrap();
    for id in ids
        .trim()
        .split(',')
        .filter(|i| !i.is_empty() && *i != "NULL")
    {
        let _ = topo.primary().sql(&format!("KILL {id}"));
    }
    common::wait_for(
        "the killed connections to end",
        std::time::Duration::from_secs(60),
        || {
            topo.primary()
                .sql(app)
                .is_ok_and(|v| v.trim() == "NULL" || v.trim().is_empty())
        },
    )
    .await;
    let out = common::cli_raw(
        port,
        "app",
        "app",
        Some("test"),
        "CREATE TABLE IF NOT EXISTS after_kill (x int); INSERT INTO after_kill VALUES (1)",
        &[],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Pooled connections sluice closes (idle longer than a lowered `idle_timeout`) say
    // COM_QUIT inside TLS: the servers count no aborted client (they counted every one).
    let aborted = "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'ABORTED_CLIENTS'";
    let before: Vec<String> = topo
        .servers
        .iter()
        .map(|s| s.sql(aborted).unwrap())
        .collect();
    let lowered = config(&ca).replace("[pool]\n", "[pool]\nidle_timeout = \"1s\"\n");
    let cfg = sluice_config::Config::from_toml(&lowered).unwrap();
    running.process.reload(cfg).await.expect("reload");
    // (The pooled connections are those in the clients' database; the monitor's, also as
    // `app`, stay.)
    let pooled =
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = 'app' AND DB = 'test'";
    for s in &topo.servers {
        common::wait_for(
            "sluice to close its idle connections",
            std::time::Duration::from_secs(60),
            || s.sql(pooled).is_ok_and(|v| v.trim() == "0"),
        )
        .await;
    }
    let after: Vec<String> = topo
        .servers
        .iter()
        .map(|s| s.sql(aborted).unwrap())
        .collect();
    assert_eq!(before, after, "Aborted_clients");
    running.shutdown();

    // The wrong CA: the servers' certificate does not verify; the client gets the reason.
    let (_p, wrong) = common::start_proxy(&config(&other_ca)).await;
    let out = common::cli_raw(
        wrong.addrs[0].port(),
        "app",
        "app",
        Some("test"),
        "SELECT 1",
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "must fail");
    assert!(
        stderr.contains("TLS") && stderr.to_lowercase().contains("certificate"),
        "{stderr}"
    );
}

/// How both protocols class a failed TLS handshake with a server (real rustls on both
/// ends): a certificate that does not verify, or a peer that does not speak TLS, is the
/// configuration's and refused (the client hears why); a connection lost during the
/// handshake (a server restarting) is the server's, counted as down.
#[tokio::test]
async fn a_failed_server_handshake_is_classed_by_its_cause() {
    use sluice_runtime::tls::backend::handshake_refused;
    use sluice_runtime::tls::BackendTls;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = common::certs::signed(dir.path(), "server");
    let (other_ca, _, _) = common::certs::signed(dir.path(), "other");
    let acceptor = sluice_runtime::tls::acceptor(Path::new(&cert), Path::new(&key)).unwrap();
    #[derive(Clone, Copy, Debug)]
    enum Peer {
        /// Completes the handshake.
        Tls,
        /// Reads the ClientHello, then closes.
        Cuts,
        /// Answers with bytes that are not TLS, then waits for the client to close.
        Garbage,
    }
    let handshake = |peer: Peer, ca: String| {
        let acceptor = acceptor.clone();
        async move {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let address = listener.local_addr().unwrap().to_string();
            let server = tokio::spawn(async move {
                let (mut s, _) = listener.accept().await.unwrap();
                match peer {
                    Peer::Tls => drop(acceptor.accept(s).await),
                    Peer::Cuts => drop(s.read(&mut [0; 512]).await),
                    Peer::Garbage => {
                        let _ = s.read(&mut [0; 512]).await;
                        let _ = s.write_all(b"this is not TLS\n").await;
                        // Open until the client gives up: a socket closed with the rest of
                        // its ClientHello unread would be reset, and the reset could reach
                        // the client before the garbage is read.
                        while s.read(&mut [0; 4096]).await.is_ok_and(|n| n > 0) {}
                    }
                }
            });
            let tls = BackendTls::from_ca_file(Path::new(&ca)).unwrap();
            let tcp = TcpStream::connect(&address).await.unwrap();
            let r = tls.connect(&address, tcp).await.map(drop);
            server.await.unwrap();
            r
        }
    };
    handshake(Peer::Tls, ca.clone()).await.expect("verified");
    for (peer, ca, refused) in [
        (Peer::Tls, other_ca, true),
        (Peer::Garbage, ca.clone(), true),
        (Peer::Cuts, ca, false),
    ] {
        let e = handshake(peer, ca).await.expect_err("fails");
        assert_eq!(handshake_refused(&e), refused, "{peer:?}: {e}");
    }
}
