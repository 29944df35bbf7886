//! TLS on both sides: to the servers (`[pool] tls`: sessions, the monitor and cancel requests
//! over TLS, the servers' certificates verified), and to a client that reads its answers
//! slowly.

use super::pg::raw::Raw;
use super::pg::{certs, managed_config, start, start_prepared, wait_view};
use postgres_protocol::message::frontend;
use sluice_runtime::tls::BackendTls;
use std::path::Path;
use std::time::Duration;

/// Makes `server` accept TLS with `cert` and `key` and refuse every login over TCP without it
/// but `postgres`'s (the tests' own), then reloads its configuration.
fn require_tls(server: &sluice_testkit::Postgres, cert: &str, key: &str) {
    let data = server.dir().join("data");
    for (from, to) in [(cert, "server.crt"), (key, "server.key")] {
        let path = data.join(to);
        std::fs::copy(from, &path).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        if let Some((uid, gid)) = sluice_testkit::pg_server_user().unwrap() {
            std::os::unix::fs::chown(&path, Some(uid), Some(gid)).unwrap();
        }
    }
    let conf = data.join("postgresql.conf");
    let mut text = std::fs::read_to_string(&conf).unwrap();
    text.push_str("\nssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n");
    std::fs::write(&conf, text).unwrap();
    std::fs::write(
        data.join("pg_hba.conf"),
        "local all all trust\nhost all postgres 127.0.0.1/32 trust\nhost replication all 127.0.0.1/32 trust\nhostssl all all 127.0.0.1/32 scram-sha-256\nhost all all 127.0.0.1/32 reject\n",
    )
    .unwrap();
    server.sql("SELECT pg_reload_conf()").unwrap();
}

/// With `[pool] tls`, sluice reaches the servers over TLS only: reads on the standby and
/// writes on the primary run on TLS connections, the monitor places the servers over TLS, a
/// cancel reaches the statement, and servers that refuse logins without TLS serve every
/// client. Given a CA that did not sign the servers' certificates, sluice connects to
/// nothing and the client hears why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_are_reached_over_verified_tls() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = certs::signed(dir.path(), "server");
    let (other_ca, _, _) = certs::signed(dir.path(), "other");
    let (c, k) = (cert.clone(), key.clone());
    let pool = format!("\n[pool]\ntls = true\ntls_ca = \"{ca}\"\n");
    let env = start_prepared(
        1,
        move |topo| {
            for s in &topo.servers {
                require_tls(s, &c, &k);
            }
        },
        |topo| managed_config(topo, &[], &format!("interval = \"100ms\"\n{pool}")),
    )
    .await;
    let admin = env.admin().await;
    let primary = env.topo.primary().addr();
    let standby = env.topo.replicas()[0].addr();
    // The monitor's checks, over TLS, place both servers.
    wait_view(admin.addr, &primary, "the primary in writer", |v| {
        (&*v.0, &*v.2) == ("writer", "ONLINE")
    })
    .await;
    wait_view(admin.addr, &standby, "the standby in reader", |v| {
        (&*v.0, &*v.2) == ("reader", "ONLINE") && v.3 == primary
    })
    .await;
    // (The servers refuse `app` without TLS: that anything runs shows TLS in use.)
    let mut a = Raw::connect(env.port, "app", "app", "postgres").await;
    let read = a.try_simple("SELECT pg_is_in_recovery()").await.unwrap();
    assert_eq!(Raw::column(&read), ["t"], "a read on the standby");
    let own = "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()";
    let write = a.try_simple(own).await.unwrap();
    assert_eq!(Raw::column(&write), ["t"], "on the primary, over TLS");
    let plain = "SELECT count(*) FROM pg_stat_ssl JOIN pg_stat_activity USING (pid) WHERE usename IN ('app', 'monitor') AND NOT ssl";
    for s in &env.topo.servers {
        assert_eq!(s.sql(plain).unwrap().trim(), "0", "{}", s.addr());
    }
    // A batch too long for one unit, whose answers outgrow the sockets: it is sent in parts
    // while the server's answers are read, over TLS as over TCP.
    const PAIRS: usize = 100_000;
    let long = super::pipelines::long_batch(PAIRS, true);
    a.try_send_raw(&long).await.unwrap();
    let answers = super::pipelines::long_batch_answers(&mut a).await;
    assert_eq!(answers, (PAIRS, PAIRS));
    // A cancel reaches the statement (its request goes over TLS too).
    frontend::query("SELECT pg_sleep(60) /* sluice:writer */", &mut a.out).unwrap();
    a.flush().await;
    let sleeping = "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND query LIKE '%pg_sleep(60)%' AND pid <> pg_backend_pid()";
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while env.topo.primary().sql(sleeping).unwrap().trim() != "1" {
        assert!(std::time::Instant::now() < deadline, "never ran");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    super::pg::raw::cancel(env.port, a.key).await;
    let (tags, msgs) = a.round(1).await;
    let e = msgs.iter().find(|m| m.tag == b'E').expect("an error");
    assert_eq!(
        e.sqlstate().as_deref(),
        Some("57014"),
        "{tags} {}",
        e.text()
    );
    assert_eq!(Raw::column(&a.try_simple("SELECT 1").await.unwrap()), ["1"]);
    // Idle pooled connections their server ended (its FATAL and close_notify in TLS records)
    // are found closed before they are lent, by a look at the socket: the next statements
    // run on new ones. (On the primary a statement lost with its connection is not run
    // again.)
    let app = "SELECT count(*) FROM pg_stat_activity WHERE usename = 'app'";
    for s in &env.topo.servers {
        s.sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'app'")
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while s.sql(app).unwrap().trim() != "0" {
            assert!(std::time::Instant::now() < deadline, "still there");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    for sql in ["SELECT 2 /* sluice:writer */", "SELECT 2"] {
        assert_eq!(
            Raw::column(&a.try_simple(sql).await.unwrap()),
            ["2"],
            "{sql}"
        );
    }

    // A notification reaches an idle session pinned by its LISTEN (sluice watches that
    // connection for what the server sends between statements, over TLS as over TCP).
    a.try_simple("LISTEN over_tls").await.unwrap();
    env.topo.primary().sql("NOTIFY over_tls, 'sent'").unwrap();
    let m = a.next().await;
    assert_eq!(m.tag, b'A', "{m:?}");
    assert!(m.body.ends_with(b"over_tls\0sent\0"), "{m:?}");
    a.try_simple("UNLISTEN *").await.unwrap();
    drop(a);

    // Pooled connections sluice closes (idle longer than a lowered `idle_timeout`) end with
    // a close_notify: the servers log no cut stream ("could not receive data from client:
    // Connection reset by peer" without one).
    let lowered = format!("{pool}idle_timeout = \"1s\"\n");
    let text = managed_config(&env.topo, &[], &format!("interval = \"100ms\"\n{lowered}"));
    let cfg = sluice_config::Config::from_toml(&text).unwrap();
    env.process.reload(cfg).await.unwrap();
    for s in &env.topo.servers {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while s.sql(app).unwrap().trim() != "0" {
            assert!(std::time::Instant::now() < deadline, "still open");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let log = std::fs::read_to_string(s.dir().join("server.log")).unwrap();
        let cut: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("could not receive data") || l.contains("SSL error"))
            .collect();
        assert!(cut.is_empty(), "{}: {cut:?}", s.addr());
    }

    // A CA that did not sign the servers' certificates: no connection is made, and the
    // client hears why (at its login, or at its first statement).
    let text = super::pg::config(
        &env.topo,
        &format!("\n[pool]\ntls = true\ntls_ca = \"{other_ca}\"\n"),
    );
    let (_p, wrong) = super::pg::start_sluice(&text).await;
    let port = wrong.addrs[0].port();
    let e = match Raw::try_connect(port, "app", "app", "postgres").await {
        Err(e) => e,
        Ok(mut r) => r.try_simple("SELECT 1").await.unwrap_err(),
    };
    assert!(
        e.contains("TLS") && e.to_lowercase().contains("certificate"),
        "{e}"
    );
    drop(dir);
}

/// More dead idle TLS connections than a task's cooperative budget (128 units a poll) are
/// all found dead when a statement looks for one: the idle check takes no budget. (It did:
/// once the budget ran out, the check called the next dead connection alive, and the
/// statement was lent it and failed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_dead_idle_tls_connections_are_all_found_dead() {
    const HELD: usize = 140;
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = certs::signed(dir.path(), "server");
    let (c, k) = (cert.clone(), key.clone());
    let extra = format!("\n[pool]\ntls = true\ntls_ca = \"{ca}\"\nmax_connections = 160\n");
    let env = start_prepared(
        0,
        move |topo| require_tls(topo.primary(), &c, &k),
        |topo| super::pg::config(topo, &extra),
    )
    .await;
    // HELD connections in the pool at once, then all idle.
    let mut clients = Vec::new();
    for _ in 0..HELD {
        let mut r = Raw::connect(env.port, "app", "app", "postgres").await;
        r.try_simple("BEGIN").await.unwrap();
        r.try_simple("SELECT 1").await.unwrap();
        clients.push(r);
    }
    for r in &mut clients {
        r.try_simple("COMMIT").await.unwrap();
    }
    let app = "SELECT count(*) FROM pg_stat_activity WHERE usename = 'app'";
    let primary = env.topo.primary();
    assert_eq!(primary.sql(app).unwrap().trim(), HELD.to_string());
    primary
        .sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'app'")
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while primary.sql(app).unwrap().trim() != "0" {
        assert!(std::time::Instant::now() < deadline, "still there");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // One statement looks through all of them, in one poll of its task.
    let one = clients[0].try_simple("SELECT 2").await;
    assert_eq!(Raw::column(&one.unwrap()), ["2"]);
    drop(dir);
}

/// A client over TLS that reads a large result slowly gets all of it: TLS records of its
/// answer's end that did not fit in the socket at once are sent on, not kept in sluice while
/// it waits for the client's next message (the client waited for its ReadyForQuery forever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_over_tls_gets_all_of_a_large_result() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = certs::signed(dir.path(), "proxy");
    let env = start(
        0,
        &format!("\n[proxy]\ntls_cert = \"{cert}\"\ntls_key = \"{key}\"\n"),
    )
    .await;
    let tls = BackendTls::from_ca_file(Path::new(&ca)).unwrap();
    let mut c = Raw::connect_tls(env.port, "app", "app", "postgres", &tls).await;
    // Answers of growing sizes, each left unread for a while: sluice writes it into its
    // socket to the client until the socket is full (the kernel grows sluice's send buffer
    // to 2-3.5 MB here), and the rest into TLS records kept in rustls (up to 64 KiB). An
    // answer a little larger than the socket holds is written whole, its end in those
    // records: only sending them on brings the client its ReadyForQuery. (The steps are
    // smaller than what rustls keeps; a machine whose socket holds more or less than this
    // range would not show the loss, and the test would pass without the fix.)
    for kib in (1024..=4608).step_by(48) {
        let sql = format!("SELECT repeat('x', {})", kib * 1024);
        frontend::query(&sql, &mut c.out).unwrap();
        c.flush().await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (tags, msgs) = c.round(1).await;
        assert_eq!(tags, "TDCZ", "{kib} KiB: {msgs:?}");
    }
    drop(dir);
}
