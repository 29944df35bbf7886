//! Shared setup for the PostgreSQL tests: a real PostgreSQL 15 primary with streaming
//! replicas (the testkit), sluice in process in front of it with the configuration,
//! and psql/pgbench run against it.
#![allow(dead_code)]

#[path = "../common/certs.rs"]
pub mod certs;
#[path = "../common/http.rs"]
pub mod http;
pub mod raw;

use sluice_config::Config;
use sluice_runtime::{Process, Running};
use sluice_testkit::{find_program, PgTopology};
use std::net::SocketAddr;
use std::process::{Command, Output};
use std::sync::Arc;

/// Servers with sluice in front.
pub struct PgEnv {
    /// The primary first, then the replicas.
    pub topo: PgTopology,
    /// The process.
    pub process: Arc<Process>,
    /// It runs.
    pub running: Running,
    /// The PostgreSQL listener's port.
    pub port: u16,
}

/// The configuration for these servers: one PostgreSQL listener that splits, user
/// `app`, the primary in `writer`, the replicas in `reader`; `extra` appended.
pub fn config(topo: &PgTopology, extra: &str) -> String {
    let mut text = String::from(
        "[[listeners]]\nlisten = \"127.0.0.1:0\"\nprotocol = \"postgres\"\n\n[[users]]\nname = \"app\"\npassword = \"app\"\n\n",
    );
    text.push_str(&format!(
        "[[servers]]\naddress = \"{}\"\nprotocol = \"postgres\"\nhostgroup = \"writer\"\n",
        topo.primary().addr()
    ));
    for r in topo.replicas() {
        text.push_str(&format!(
            "[[servers]]\naddress = \"{}\"\nprotocol = \"postgres\"\nhostgroup = \"reader\"\n",
            r.addr()
        ));
    }
    text.push_str("\n[monitor]\nenabled = false\n");
    text.push_str(extra);
    text
}

/// The issue-13 configuration for these servers: the listener and user of [`config`], every
/// server listed without a hostgroup (roles come from the monitor, logging in as `monitor`),
/// the `i`-th with `server_extra[i]` if given (the primary first); `extra` appended.
pub fn managed_config(topo: &PgTopology, server_extra: &[&str], extra: &str) -> String {
    let mut text = String::from(
        "[[listeners]]\nlisten = \"127.0.0.1:0\"\nprotocol = \"postgres\"\n\n[[users]]\nname = \"app\"\npassword = \"app\"\n\n",
    );
    for (i, s) in topo.servers.iter().enumerate() {
        text.push_str(&format!(
            "[[servers]]\naddress = \"{}\"\nprotocol = \"postgres\"\n{}\n",
            s.addr(),
            server_extra.get(i).copied().unwrap_or("")
        ));
    }
    text.push_str("\n[monitor]\nuser = \"monitor\"\npassword = \"monitor\"\n");
    text.push_str(extra);
    text
}

/// Starts a primary with `replicas` replicas, the `app` role (password `app`, SCRAM on the
/// servers) and sluice with [`config`] plus `extra`.
pub async fn start(replicas: usize, extra: &str) -> PgEnv {
    start_with(replicas, |topo| config(topo, extra)).await
}

/// As [`start`], with the configuration `config` makes for the servers; the servers also have
/// the role `monitor` (password `monitor`, member of `pg_monitor`).
pub async fn start_with(replicas: usize, config: impl FnOnce(&PgTopology) -> String) -> PgEnv {
    start_prepared(replicas, |_| {}, config).await
}

/// As [`start_with`], `prepare` run on the servers (as `postgres`, through the testkit)
/// before sluice starts.
pub async fn start_prepared(
    replicas: usize,
    prepare: impl FnOnce(&PgTopology) + Send + 'static,
    config: impl FnOnce(&PgTopology) -> String,
) -> PgEnv {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_test_writer()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .try_init();
    }
    let topo = tokio::task::spawn_blocking(move || {
        let topo = PgTopology::start(replicas)
            .expect("PostgreSQL must start (is postgresql-15 installed?)");
        topo.primary()
            .sql("CREATE ROLE app LOGIN SUPERUSER PASSWORD 'app'")
            .unwrap();
        topo.primary()
            .sql("CREATE ROLE monitor LOGIN PASSWORD 'monitor'; GRANT pg_monitor TO monitor")
            .unwrap();
        for s in &topo.servers {
            s.require_passwords(&[]).unwrap();
        }
        prepare(&topo);
        topo
    })
    .await
    .unwrap();
    // The role reaches the replicas before anyone logs in there.
    wait_replayed(&topo).await;
    let text = config(&topo);
    let (process, running) = start_sluice(&text).await;
    let port = running.addrs[0].port();
    PgEnv {
        topo,
        process,
        running,
        port,
    }
}

/// Starts sluice in process for a configuration.
pub async fn start_sluice(text: &str) -> (Arc<Process>, Running) {
    let cfg = Config::from_toml(text).unwrap_or_else(|e| panic!("config: {e}\n{text}"));
    let rt = sluice_runtime::Runtime::new(cfg).unwrap();
    let mut frontends: Vec<Arc<dyn sluice_runtime::Frontend>> = Vec::new();
    for p in rt.config.protocols() {
        match p {
            sluice_config::Protocol::Postgres => {
                frontends.push(sluice_postgres::PostgresFrontend::new(rt.clone()))
            }
            sluice_config::Protocol::Mysql => {
                frontends.push(sluice_mysql::MysqlFrontend::new(rt.clone()))
            }
        }
    }
    let process = Process::new(rt, frontends);
    let running = process.start().await.unwrap();
    (process, running)
}

/// `pgbench -i -s 1` on the primary, then waits until the replicas have the tables.
pub async fn pgbench_init(env: &PgEnv) {
    let pgbench = sluice_testkit::find_program("pgbench", "postgresql-client-15").unwrap();
    let port = env.topo.primary().port.to_string();
    let init = tokio::task::spawn_blocking(move || {
        Command::new(&pgbench)
            .args([
                "-i",
                "-s",
                "1",
                "-q",
                "-h",
                "127.0.0.1",
                "-U",
                "postgres",
                "-p",
            ])
            .arg(port)
            .arg("postgres")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        init.status.success(),
        "pgbench -i: {}",
        String::from_utf8_lossy(&init.stderr)
    );
    wait_replayed(&env.topo).await;
}

/// Waits until every replica has replayed the primary's WAL as of now.
pub async fn wait_replayed(topo: &PgTopology) {
    let lsn = topo
        .primary()
        .sql("SELECT pg_current_wal_insert_lsn()")
        .unwrap()
        .trim()
        .to_string();
    for r in topo.replicas() {
        let q = format!("SELECT pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while r.sql(&q).unwrap().trim() != "t" {
            assert!(
                std::time::Instant::now() < deadline,
                "replica did not replay {lsn}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

/// Makes `standby` apply commits 10 minutes late (`recovery_min_apply_delay`) and waits until
/// it does: its startup process holds a marker commit back (wait event `RecoveryApplyDelay`).
/// The setting takes effect only once the startup process has read it: a marker replayed
/// before that is followed by another. (At most 60 s: a hang guard, not a timing.)
pub async fn delay_replay(topo: &PgTopology, standby: &sluice_testkit::Postgres) {
    standby
        .sql("ALTER SYSTEM SET recovery_min_apply_delay = '10min'")
        .unwrap();
    standby.sql("SELECT pg_reload_conf()").unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    for n in 0.. {
        let marker = format!("replay_delayed_{}_{n}", standby.port);
        topo.primary()
            .sql(&format!("CREATE TABLE {marker} ()"))
            .unwrap();
        loop {
            let waiting = standby
                .sql("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'startup' AND wait_event = 'RecoveryApplyDelay'")
                .unwrap();
            if waiting.trim() == "1" {
                return;
            }
            let replayed = standby
                .sql(&format!("SELECT to_regclass('{marker}') IS NOT NULL"))
                .unwrap();
            assert!(
                std::time::Instant::now() < deadline,
                "{} never delayed its replay",
                standby.addr()
            );
            if replayed.trim() == "t" {
                break; // replayed before the setting was read: another marker
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

/// Waits until every one of `standbys` has received the primary's WAL up to `lsn` (replayed
/// or not: a standby that delays or cannot replay still receives).
pub async fn wait_received(standbys: &[&sluice_testkit::Postgres], lsn: &str) {
    let q = format!(
        "SELECT pg_last_wal_receive_lsn() >= '{}'::pg_lsn",
        lsn.trim()
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    for s in standbys {
        while s.sql(&q).unwrap().trim() != "t" {
            assert!(
                std::time::Instant::now() < deadline,
                "{} did not receive {lsn}",
                s.addr()
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

/// What the admin API at `admin` says of the server at `addr`: (hostgroup, role, state,
/// replicates from).
pub fn server_view(admin: SocketAddr, addr: &str) -> (String, String, String, String) {
    try_server_view(admin, addr).unwrap_or_else(|| panic!("{addr} is not listed"))
}

/// As [`server_view`]; `None` while the server is not listed.
pub fn try_server_view(admin: SocketAddr, addr: &str) -> Option<(String, String, String, String)> {
    let servers = http::get_json(admin, "/api/servers");
    let s = servers
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["address"] == addr)?
        .clone();
    let text = |k: &str| s[k].as_str().unwrap_or("").to_string();
    Some((
        text("hostgroup"),
        text("role"),
        text("state"),
        text("replicates_from"),
    ))
}

/// Waits (at most 60 s: a hang guard, not a timing) until the server at `addr` is listed and
/// `ok` holds for its view.
pub async fn wait_view(
    admin: SocketAddr,
    addr: &str,
    what: &str,
    ok: impl Fn(&(String, String, String, String)) -> bool,
) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let v = try_server_view(admin, addr);
        if v.as_ref().is_some_and(&ok) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{addr}: {what}; still {v:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

impl PgEnv {
    /// Every session's pin reasons, as the admin API's sessions view shows them.
    pub fn pin_reasons(&self) -> Vec<Vec<&'static str>> {
        self.process
            .runtime
            .sessions
            .all()
            .iter()
            .map(|s| s.pin_reasons())
            .collect()
    }

    /// Serves the admin API for this process on a free loopback port.
    pub async fn admin(&self) -> sluice_admin::Admin {
        sluice_admin::serve(
            &sluice_config::AdminConfig::new("127.0.0.1:0"),
            self.process.clone(),
            self.running.shutdown_signal(),
        )
        .await
        .expect("admin API listens")
    }

    /// psql through sluice as `user`/`password` to `db`, running `sql` (`-c`); its output.
    pub fn psql_as(&self, user: &str, password: &str, db: &str, sql: &str) -> Output {
        psql(self.port, user, password, db, &["-c", sql])
    }

    /// psql through sluice as `app` to `postgres`; stdout, failing the test on an error.
    pub fn psql(&self, sql: &str) -> String {
        let out = self.psql_as("app", "app", "postgres", sql);
        assert!(
            out.status.success(),
            "psql {sql:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// psql through sluice running a script from standard input (`-f -`), errors not
    /// stopping it; stdout and stderr.
    pub fn psql_script(&self, script: &str) -> (String, String) {
        use std::io::Write;
        let mut cmd = psql_command(self.port, "app", "app", "postgres");
        cmd.args(["-f", "-"]);
        cmd.stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(script.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

/// A psql command line (unaligned, tuples only, no psqlrc).
pub fn psql_command(port: u16, user: &str, password: &str, db: &str) -> Command {
    let bin = find_program("psql", "postgresql-client-15").unwrap();
    let mut cmd = Command::new(bin);
    cmd.env("PGPASSWORD", password)
        .env("PGCONNECT_TIMEOUT", "10")
        .args(["-h", "127.0.0.1", "-U", user, "-d", db, "-XAtq"])
        .arg("-p")
        .arg(port.to_string());
    cmd
}

/// Runs psql with `args`.
pub fn psql(port: u16, user: &str, password: &str, db: &str, args: &[&str]) -> Output {
    let mut cmd = psql_command(port, user, password, db);
    cmd.args(args);
    cmd.output().unwrap()
}
