//! A PostgreSQL 15 primary with two streaming standbys managed by sluice (the release binary,
//! a child process): the set-up of `crates/sluice/tests/postgres_failover.rs`, shared by the
//! `pgfailover` and `pgryw` benchmarks.
//!
//! Roles `app` (superuser, password `app`) and `monitor` (password `monitor`, `pg_monitor`
//! plus the grants failover needs), every non-`postgres` login by SCRAM; sluice with one
//! PostgreSQL listener, the three servers without a hostgroup, `[monitor]`, `[failover]
//! enabled = true` and defaults for everything else, and an admin API to see its state.

use crate::pg::{run_bounded, Proc};
use crate::{sluice_bin, wait_port};
use sluice_testkit::{free_port, PgTopology};
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The grants the monitor's role needs for failover (as in the failover test).
const GRANTS: &[&str] = &[
    "GRANT EXECUTE ON FUNCTION pg_promote(boolean, integer) TO monitor",
    "GRANT EXECUTE ON FUNCTION pg_reload_conf() TO monitor",
    "GRANT EXECUTE ON FUNCTION pg_read_file(text) TO monitor",
    "GRANT ALTER SYSTEM ON PARAMETER primary_conninfo, default_transaction_read_only, synchronous_standby_names TO monitor",
];

/// A client user of sluice: name (= password) and `read_your_writes`.
pub struct User {
    /// Name and password.
    pub name: &'static str,
    /// `[[users]] read_your_writes`.
    pub read_your_writes: bool,
}

/// The servers with sluice in front. Dropping it stops sluice, thaws a paused server, then
/// stops the servers.
pub struct Managed {
    /// sluice (stopped first).
    sluice: Option<Proc>,
    /// The primary first, then the standbys.
    pub topo: PgTopology,
    /// sluice's PostgreSQL port.
    pub port: u16,
    /// Its admin API port.
    pub admin: u16,
    /// Where sluice logs.
    pub log: std::path::PathBuf,
    /// Servers frozen with SIGSTOP (indexes into `topo.servers`), thawed on drop.
    pub paused: Vec<usize>,
}

impl Managed {
    /// Starts the servers, runs `prepare` on them (as `postgres`, before sluice starts; the
    /// standbys replay it), then sluice with `users`; returns once sluice's monitor sees one
    /// primary and two online standbys.
    pub fn start(
        users: &[User],
        prepare: impl FnOnce(&PgTopology) -> Result<(), String>,
    ) -> Result<Managed, String> {
        let topo = PgTopology::start(2).map_err(|e| format!("PostgreSQL: {e}"))?;
        let p = topo.primary();
        let sql = |s: &str| p.sql(s).map(drop).map_err(|e| format!("{s}: {e}"));
        for u in users {
            sql(&format!(
                "CREATE ROLE {0} LOGIN SUPERUSER PASSWORD '{0}'",
                u.name
            ))?;
        }
        sql("CREATE ROLE monitor LOGIN PASSWORD 'monitor'; GRANT pg_monitor TO monitor")?;
        for g in GRANTS {
            sql(g)?;
        }
        for s in &topo.servers {
            s.require_passwords(&[]).map_err(|e| e.to_string())?;
        }
        prepare(&topo)?;
        wait_replayed(&topo)?;
        let port = free_port().map_err(|e| e.to_string())?;
        let admin = free_port().map_err(|e| e.to_string())?;
        let mut cfg = format!(
            "[[listeners]]\nlisten = \"127.0.0.1:{port}\"\nprotocol = \"postgres\"\n\n[admin]\nlisten = \"127.0.0.1:{admin}\"\n\n[monitor]\nuser = \"monitor\"\npassword = \"monitor\"\n\n[failover]\nenabled = true\n\n"
        );
        for u in users {
            cfg.push_str(&format!(
                "[[users]]\nname = \"{0}\"\npassword = \"{0}\"\nread_your_writes = {1}\n\n",
                u.name, u.read_your_writes
            ));
        }
        for s in &topo.servers {
            cfg.push_str(&format!(
                "[[servers]]\naddress = \"{}\"\nprotocol = \"postgres\"\n\n",
                s.addr()
            ));
        }
        let dir = std::env::temp_dir();
        let path = dir.join(format!("sluice-pgbench-{}-{port}.toml", std::process::id()));
        std::fs::write(&path, &cfg).map_err(|e| e.to_string())?;
        let log = dir.join(format!("sluice-pgbench-{port}.log"));
        let out = std::fs::File::create(&log).map_err(|e| e.to_string())?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let mut cmd = Command::new(sluice_bin());
        cmd.arg("--config").arg(&path).stdout(out).stderr(err);
        let sluice = Proc::spawn("sluice", cmd, libc::SIGTERM)?;
        let mut m = Managed {
            sluice: Some(sluice),
            topo,
            port,
            admin,
            log,
            paused: Vec::new(),
        };
        wait_port(port).map_err(|e| format!("{e}\n{}", m.log_tail(30)))?;
        wait_port(admin)?;
        m.wait_monitor()?;
        Ok(m)
    }

    /// Waits (at most 30 s) until the admin API shows one primary and two online standbys.
    fn wait_monitor(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut body = String::new();
        while Instant::now() < deadline {
            body = http_get(self.admin, "/api/servers")?;
            let n = |s: &str| body.matches(s).count();
            if n("\"role\":\"primary\"") == 1
                && n("\"role\":\"replica\"") == 2
                && n("\"state\":\"ONLINE\"") == 3
            {
                return Ok(());
            }
            if let Some(e) = self.sluice.as_mut().and_then(Proc::exited) {
                return Err(format!("{e}\n{}", self.log_tail(30)));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(format!(
            "sluice's monitor did not see a primary and two online standbys within 30 s: {body}"
        ))
    }

    /// The last `n` lines of sluice's log.
    pub fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        format!(
            "--- sluice log {} (last {n} lines) ---\n{}",
            self.log.display(),
            lines[lines.len().saturating_sub(n)..].join("\n")
        )
    }

    /// The monitor's events (`GET /api/events`), as JSON text.
    pub fn events(&self) -> String {
        http_get(self.admin, "/api/events").unwrap_or_else(|e| e)
    }
}

impl Drop for Managed {
    fn drop(&mut self) {
        if let Some(mut s) = self.sluice.take() {
            s.stop();
        }
        for &i in &self.paused {
            let _ = self.topo.servers[i].resume();
        }
    }
}

/// Waits (at most 30 s) until every standby replayed the primary's current WAL position.
pub fn wait_replayed(topo: &PgTopology) -> Result<(), String> {
    let lsn = topo
        .primary()
        .sql("SELECT pg_current_wal_insert_lsn()")
        .map_err(|e| e.to_string())?;
    let q = format!(
        "SELECT pg_last_wal_replay_lsn() >= '{}'::pg_lsn",
        lsn.trim()
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    for r in topo.replicas() {
        while r.sql(&q).map_err(|e| e.to_string())?.trim() != "t" {
            if Instant::now() > deadline {
                return Err(format!("standby {} did not replay {lsn} in 30 s", r.addr()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    Ok(())
}

/// `GET path` on the admin API at 127.0.0.1:`port`: the body of a 200 answer.
pub fn http_get(port: u16, path: &str) -> Result<String, String> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))
        .map_err(|e| format!("admin API on port {port}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut text = String::new();
    s.read_to_string(&mut text).map_err(|e| e.to_string())?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("GET {path}: not an HTTP answer: {text:?}"))?;
    if !head.starts_with("HTTP/1.1 200") {
        return Err(format!("GET {path}: {head}"));
    }
    Ok(body.to_string())
}

/// The pgbench binary: PostgreSQL 15's, else the one on `PATH`.
pub fn pgbench_bin() -> Result<std::path::PathBuf, String> {
    let debian = std::path::PathBuf::from("/usr/lib/postgresql/15/bin/pgbench");
    if debian.is_file() {
        return Ok(debian);
    }
    sluice_testkit::find_program("pgbench", "postgresql-client-15").map_err(|e| e.to_string())
}

/// Runs a quick `pgbench --version` (checks the binary before the long part starts).
pub fn pgbench_version(bin: &std::path::Path) -> Result<String, String> {
    let mut cmd = Command::new(bin);
    cmd.arg("--version").stdin(Stdio::null());
    let (status, out, err) = run_bounded(cmd, Duration::from_secs(10))?;
    if !status.success() {
        return Err(format!("{} --version: {err}", bin.display()));
    }
    Ok(out.trim().to_string())
}
