//! Shared setup for integration tests: a real MariaDB topology and an in-process sluice in
//! front of it, plus helpers to drive it with real clients.
#![allow(dead_code)]

pub mod certs;
pub mod fault;
pub mod http;
pub mod load;
pub mod raw;

use sluice_config::Config;
use sluice_mysql::MysqlFrontend as Proxy;
use sluice_runtime::Running;
use sluice_testkit::{find_program, Topology, TopologyOptions};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::Duration;

/// A topology with sluice in front.
pub struct Env {
    pub topo: Topology,
    pub proxy: Arc<Proxy>,
    pub running: Running,
    /// Main (read/write split) port.
    pub port: u16,
    /// Ports of the extra `[[listeners]]`, in order.
    pub extra_ports: Vec<u16>,
}

/// Options for a topology whose roles the monitor discovers.
#[derive(Default)]
pub struct Managed {
    /// Replicas behind the primary.
    pub replicas: usize,
    /// Lossless semi-synchronous replication.
    pub semi_sync: bool,
    /// Fail over automatically.
    pub failover: bool,
    /// Keys added to the `[proxy]` table.
    pub proxy_keys: String,
    /// TOML appended to the generated config.
    pub extra: String,
}

/// Starts a MariaDB primary with `options.replicas` replicas (off the async runtime), failing
/// loudly when MariaDB cannot start.
pub async fn topology(options: TopologyOptions) -> Topology {
    init_tracing();
    tokio::task::spawn_blocking(move || Topology::start(options))
        .await
        .unwrap()
        .expect("MariaDB topology must start (is mariadb-server installed?)")
}

/// A MariaDB primary alone.
pub async fn one_primary() -> Topology {
    topology(TopologyOptions::default()).await
}

/// Starts a primary and replicas, and sluice with the simplest configuration: servers
/// listed without hostgroups, a monitor user, failover on or off, plus `extra`.
pub async fn start_managed(m: Managed) -> Env {
    let topo = topology(TopologyOptions {
        replicas: m.replicas,
        semi_sync: m.semi_sync,
        ..Default::default()
    })
    .await;
    let (proxy, running) =
        start_proxy(&managed_config(&topo, m.failover, &m.proxy_keys, &m.extra)).await;
    let port = running.addrs[0].port();
    let extra_ports = running.addrs[1..].iter().map(|a| a.port()).collect();
    Env {
        topo,
        proxy,
        running,
        port,
        extra_ports,
    }
}

/// The simplest configuration for `topo`: servers without hostgroups, the monitor user,
/// failover on or off, `proxy_keys` in `[proxy]`, then `extra` appended. Writes wait up to
/// 30 s for a new primary (10 s by default): a failover on a loaded machine may take longer
/// than the default, and the tests' waiting writes must not give up before it is done.
pub fn managed_config(topo: &Topology, failover: bool, proxy_keys: &str, extra: &str) -> String {
    let mut text = format!(
        "[proxy]\nlisten = \"127.0.0.1:0\"\n{proxy_keys}\n[monitor]\nuser = \"monitor\"\npassword = \"monitor\"\n[failover]\nenabled = {failover}\nwrite_wait = \"30s\"\n[[users]]\nname = \"app\"\npassword = \"app\"\n"
    );
    for s in &topo.servers {
        text.push_str(&format!("[[servers]]\naddress = \"{}\"\n", s.addr()));
    }
    text.push_str(extra);
    text
}

/// Starts a proxy from config text.
pub async fn start_proxy(text: &str) -> (Arc<Proxy>, Running) {
    let cfg =
        Config::from_toml(text).unwrap_or_else(|e| panic!("test config invalid: {e}\n{text}"));
    let (process, proxy) = Proxy::process(cfg).expect("proxy");
    let running = process.start().await.expect("proxy starts");
    (proxy, running)
}

/// Polls `cond` every 50 ms until it holds; panics with `what` after `limit`.
pub async fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !cond() {
        if start.elapsed() > limit {
            panic!("timed out after {limit:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Starts `replicas` replicas and sluice with the default config plus `extra` TOML appended.
pub async fn start(replicas: usize, extra: &str) -> Env {
    start_with(replicas, extra, |_| {}).await
}

/// Like [`start`], with a hook to edit the generated config text.
pub async fn start_with(replicas: usize, extra: &str, edit: impl FnOnce(&mut String)) -> Env {
    let topo = topology(TopologyOptions {
        replicas,
        ..Default::default()
    })
    .await;
    let mut text = format!(
        "[proxy]\nlisten = \"127.0.0.1:0\"\n\n[[users]]\nname = \"app\"\npassword = \"app\"\n\n[[servers]]\naddress = \"{}\"\nhostgroup = \"writer\"\n",
        topo.primary().addr()
    );
    for r in topo.replicas() {
        text.push_str(&format!(
            "\n[[servers]]\naddress = \"{}\"\nhostgroup = \"reader\"\n",
            r.addr()
        ));
    }
    text.push_str(extra);
    edit(&mut text);
    let cfg =
        Config::from_toml(&text).unwrap_or_else(|e| panic!("test config invalid: {e}\n{text}"));
    let (process, proxy) = Proxy::process(cfg).expect("proxy");
    let running = process.start().await.expect("proxy starts");
    let port = running.addrs[0].port();
    let extra_ports = running.addrs[1..].iter().map(|a| a.port()).collect();
    Env {
        topo,
        proxy,
        running,
        port,
        extra_ports,
    }
}

impl Env {
    /// A mysql_async URL for the proxy.
    pub fn url(&self, db: &str) -> String {
        format!(
            "mysql://app:app@127.0.0.1:{}/{db}?prefer_socket=false",
            self.port
        )
    }

    /// A direct URL to server `i`.
    pub fn direct_url(&self, i: usize, db: &str) -> String {
        format!(
            "mysql://app:app@127.0.0.1:{}/{db}?prefer_socket=false",
            self.topo.servers[i].port
        )
    }

    /// Runs SQL through the proxy with the mariadb CLI; returns its output (asserting success).
    pub fn cli(&self, sql: &str) -> String {
        let out = cli_raw(self.port, "app", "app", Some("test"), sql, &[]);
        assert!(
            out.status.success(),
            "mariadb CLI failed for {sql:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim_end().to_string()
    }

    /// Serves the admin API for this proxy on a free loopback port (with `token`, if any).
    #[allow(dead_code)]
    pub async fn admin(&self, token: Option<&str>) -> sluice_admin::Admin {
        let mut cfg = sluice_config::AdminConfig::new("127.0.0.1:0");
        cfg.token = token.map(str::to_string);
        self.admin_with(&cfg).await
    }

    /// Serves the admin API for this proxy as `cfg` says (bounds, token).
    #[allow(dead_code)]
    pub async fn admin_with(&self, cfg: &sluice_config::AdminConfig) -> sluice_admin::Admin {
        sluice_admin::serve(
            cfg,
            self.running.process.clone(),
            self.running.shutdown_signal(),
        )
        .await
        .expect("admin API listens")
    }

    /// The monitor.
    pub fn monitor(&self) -> &Arc<sluice_monitor::Monitor> {
        self.proxy.monitor.as_ref().expect("monitor enabled")
    }

    /// Index (in `topo.servers`) of the server the monitor considers the primary.
    pub fn primary_index(&self) -> Option<usize> {
        let p = self.monitor().primary()?;
        self.topo
            .servers
            .iter()
            .position(|s| s.addr() == *p.address)
    }

    /// The proxy's view of server `i`.
    pub fn server(&self, i: usize) -> Arc<sluice_core::Server> {
        let addr = self.topo.servers[i].addr();
        self.proxy
            .topology
            .all()
            .iter()
            .find(|s| *s.address == addr)
            .cloned()
            .expect("server configured")
    }

    /// Role of server `i` as the monitor sees it.
    pub fn role(&self, i: usize) -> sluice_core::Role {
        self.server(i).observed().role
    }

    /// The monitor's events, one per line.
    pub fn events(&self) -> String {
        self.monitor()
            .events
            .all()
            .iter()
            .map(|e| format!("[{}] {}", e.kind, e.message))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Like [`wait_for`], saying what the monitor did when the wait times out.
    pub async fn wait_for(&self, what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
        let start = std::time::Instant::now();
        while !cond() {
            if start.elapsed() > limit {
                panic!(
                    "timed out after {limit:?} waiting for {what}; the monitor's events:\n{}",
                    self.events()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The port of the MySQL-protocol admin listener (`[admin] sql_listen`).
    pub fn admin_sql_port(&self) -> u16 {
        self.running
            .own_listener(sluice_mysql::front::ADMIN_SQL)
            .expect("admin SQL listener")
            .port()
    }

    /// True if server `i` has `read_only` on.
    pub fn read_only(&self, i: usize) -> bool {
        self.topo.servers[i]
            .sql("SELECT @@read_only")
            .unwrap()
            .trim()
            == "1"
    }

    /// Waits for replicas to catch up.
    pub fn sync(&self) {
        self.topo
            .sync_replicas(Duration::from_secs(30))
            .expect("replicas catch up");
    }
}

/// Runs the mariadb CLI against `port`.
pub fn cli_raw(
    port: u16,
    user: &str,
    password: &str,
    db: Option<&str>,
    sql: &str,
    extra: &[&str],
) -> Output {
    let bin = find_program("mariadb", "mariadb-client").expect("mariadb client");
    let mut c = Command::new(bin);
    c.arg("--no-defaults")
        .arg("-h127.0.0.1")
        .arg(format!("-P{port}"))
        .arg(format!("-u{user}"))
        .arg(format!("-p{password}"))
        .arg("--batch")
        .arg("--skip-column-names")
        .arg("--connect-timeout=10")
        .args(extra);
    if let Some(db) = db {
        c.arg(db);
    }
    c.arg("-e").arg(sql).stdin(Stdio::null());
    c.output().expect("run mariadb CLI")
}

/// Runs a Python script with `PORT` in its environment; fails loudly if a module is missing.
pub fn python(port: u16, script: &str) -> Output {
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .env("PORT", port.to_string())
        .stdin(Stdio::null())
        .output()
        .expect("python3 must be installed");
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("ModuleNotFoundError") {
        panic!("a Python driver is missing (the test command installs them: pip install PyMySQL cryptography mysql-connector-python): {stderr}");
    }
    out
}

/// Logs to the test's output when RUST_LOG is set.
pub fn init_tracing() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_test_writer()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .try_init();
    }
}

/// Runs sysbench (MySQL driver) against sluice on `port` as app/app, schema `test`; returns
/// its report, asserting it succeeded.
#[allow(dead_code)]
pub fn sysbench(port: u16, args: &[&str]) -> String {
    let bin = sluice_testkit::find_program("sysbench", "sysbench").expect("sysbench");
    let out = Command::new(bin)
        .args(args)
        .arg("--db-driver=mysql")
        .arg("--mysql-host=127.0.0.1")
        .arg(format!("--mysql-port={port}"))
        .arg("--mysql-user=app")
        .arg("--mysql-password=app")
        .arg("--mysql-db=test")
        .output()
        .expect("run sysbench");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "sysbench {args:?} failed:\n{text}");
    text
}

/// The number after `label:` in sysbench's report.
#[allow(dead_code)]
pub fn sysbench_counter(report: &str, label: &str) -> u64 {
    report
        .lines()
        .find_map(|l| {
            l.trim().strip_prefix(label).map(|r| {
                r.trim_start_matches(':')
                    .split_whitespace()
                    .next()
                    .unwrap_or("")
                    .to_string()
            })
        })
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {label:?} in sysbench report:\n{report}"))
}

/// The `@@server_id`s that answer `n` autocommit reads on `c` (which servers take reads).
#[allow(dead_code)]
pub async fn server_ids(c: &mut mysql_async::Conn, n: usize) -> std::collections::BTreeSet<u32> {
    use mysql_async::prelude::Queryable;
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..n {
        seen.insert(
            c.query_first::<u32, _>("SELECT @@server_id")
                .await
                .unwrap()
                .unwrap(),
        );
    }
    seen
}
