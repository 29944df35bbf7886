//! A PostgreSQL server of the benchmark's own settings, in a directory of its own.

use super::{
    as_server_user, chown_to_server_user, owned_dir, pg_bin_dir, run_bounded, write_owned, Proc,
};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// One PostgreSQL server in a directory of its own (trust for `postgres` and `hba` for the
/// rest), on a free port of 127.0.0.1.
pub struct PgServer {
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Its directory (data, socket, log).
    pub dir: PathBuf,
    bin: PathBuf,
    proc: Proc,
}

impl PgServer {
    /// `initdb` in `dir` (created), then starts `postgres` with `settings` (`name=value`,
    /// given with `-c`); `hba` lines are added to pg_hba.conf after trust for `postgres`.
    pub fn start(dir: &Path, settings: &[String], hba: &str) -> Result<PgServer, String> {
        let bin = pg_bin_dir()?;
        owned_dir(dir)?;
        let data = dir.join("data");
        let mut initdb = Command::new(bin.join("initdb"));
        initdb
            .args([
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-sync",
                "-D",
            ])
            .arg(&data);
        as_server_user(&mut initdb)?;
        let (status, out, err) = run_bounded(initdb, Duration::from_secs(120))?;
        if !status.success() {
            return Err(format!("initdb failed ({status}):\n{out}{err}"));
        }
        write_owned(
            &data.join("pg_hba.conf"),
            &format!("local all all trust\nhost all postgres 127.0.0.1/32 trust\n{hba}"),
        )?;
        let port = sluice_testkit::free_port().map_err(|e| e.to_string())?;
        let log_path = dir.join("server.log");
        let log = std::fs::File::create(&log_path).map_err(|e| e.to_string())?;
        chown_to_server_user(&log_path)?;
        let mut cmd = Command::new(bin.join("postgres"));
        cmd.arg("-D").arg(&data).arg("-p").arg(port.to_string());
        cmd.arg("-c").arg("listen_addresses=127.0.0.1");
        cmd.arg("-c")
            .arg(format!("unix_socket_directories={}", dir.display()));
        for s in settings {
            cmd.arg("-c").arg(s);
        }
        cmd.stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log);
        as_server_user(&mut cmd)?;
        // SIGINT: fast shutdown.
        let proc = Proc::spawn("postgres", cmd, libc::SIGINT)?;
        let mut server = PgServer {
            port,
            dir: dir.to_path_buf(),
            bin,
            proc,
        };
        let started = Instant::now();
        loop {
            if let Some(e) = server.proc.exited() {
                return Err(format!("{e}\n{}", server.log_tail()));
            }
            if server.sql("SELECT 1").is_ok() {
                return Ok(server);
            }
            if started.elapsed() > Duration::from_secs(60) {
                return Err(format!(
                    "postgres not ready within 60 s\n{}",
                    server.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// A program of the server's installation (`pgbench`, `psql`...).
    pub fn program(&self, name: &str) -> PathBuf {
        self.bin.join(name)
    }

    /// The postmaster's pid.
    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Runs `sql` with psql as `postgres` in database `postgres` (unaligned, tuples only).
    pub fn sql(&self, sql: &str) -> Result<String, String> {
        let mut cmd = Command::new(self.program("psql"));
        cmd.args([
            "-h",
            "127.0.0.1",
            "-U",
            "postgres",
            "-d",
            "postgres",
            "-XAtq",
        ])
        .args(["-v", "ON_ERROR_STOP=1"])
        .arg("-p")
        .arg(self.port.to_string())
        .arg("-c")
        .arg(sql)
        .env("PGCONNECT_TIMEOUT", "5");
        let (status, out, err) = run_bounded(cmd, Duration::from_secs(600))?;
        if !status.success() {
            return Err(format!("psql {sql:?}: {err}"));
        }
        Ok(out.trim_end().to_string())
    }
}
