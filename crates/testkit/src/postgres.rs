//! Real PostgreSQL servers for tests: a primary from `initdb` and streaming replicas cloned
//! from it with `pg_basebackup -R`, on free ports, in temporary directories removed on drop.
//! PostgreSQL refuses to run as root, so when the tests run as root the servers run as the
//! `postgres` system user (created by Debian's `postgresql-15` package).

use crate::server::{set_parent_death_signal, spawn_from_long_lived_thread, unsafe_is_root};
use crate::{free_port, work_root, Error, Result};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The Debian package that provides the server binaries.
const PACKAGE: &str = "postgresql-15";

/// How long a server may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(60);

static NEXT: AtomicU32 = AtomicU32::new(0);

/// The directory holding `initdb`, `postgres`, `pg_basebackup` (Debian keeps them out of
/// PATH): `SLUICE_PG_BIN`, else the newest `/usr/lib/postgresql/*/bin`; an error naming the
/// package to install when one of them is not there.
pub fn pg_bin_dir() -> Result<PathBuf> {
    let dir = match std::env::var_os("SLUICE_PG_BIN") {
        Some(d) => PathBuf::from(d),
        None => {
            let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
                .map(|r| r.flatten().map(|e| e.path().join("bin")).collect())
                .unwrap_or_default();
            dirs.retain(|d| d.join("postgres").is_file());
            dirs.sort();
            dirs.pop().ok_or(Error::Missing {
                program: "postgres",
                package: PACKAGE,
            })?
        }
    };
    for program in ["initdb", "postgres", "pg_basebackup"] {
        if !dir.join(program).is_file() {
            return Err(Error::Missing {
                program,
                package: PACKAGE,
            });
        }
    }
    Ok(dir)
}

/// The user servers run as: `postgres` when running as root, else the current user.
pub fn pg_server_user() -> Result<Option<(u32, u32)>> {
    if !unsafe_is_root() {
        return Ok(None);
    }
    let passwd = std::fs::read_to_string("/etc/passwd")?;
    passwd
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.first() == Some(&"postgres"))
        .and_then(|f| Some((f.get(2)?.parse().ok()?, f.get(3)?.parse().ok()?)))
        .map(Some)
        .ok_or(Error::Missing {
            program: "the postgres user",
            package: PACKAGE,
        })
}

/// A command run as the servers' user.
fn command(program: &Path, user: Option<(u32, u32)>) -> Command {
    let mut cmd = Command::new(program);
    if let Some((uid, gid)) = user {
        cmd.uid(uid).gid(gid);
    }
    cmd
}

/// A directory the servers' user owns.
fn owned_dir(path: &Path, user: Option<(u32, u32)>) -> Result<()> {
    let _ = std::fs::remove_dir_all(path);
    std::fs::create_dir_all(path)?;
    if let Some((uid, gid)) = user {
        std::os::unix::fs::chown(path, Some(uid), Some(gid))?;
    }
    Ok(())
}

/// Runs a set-up program to its end; its output is the error when it fails.
fn run(mut cmd: Command, what: &str) -> Result<()> {
    let out = cmd.stdin(Stdio::null()).output()?;
    if out.status.success() {
        return Ok(());
    }
    Err(Error::Other(format!(
        "{what} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )))
}

/// One running PostgreSQL server.
pub struct Postgres {
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// The primary it streams from, when it is a replica.
    pub primary_port: Option<u16>,
    dir: PathBuf,
    child: Option<Child>,
}

impl Postgres {
    /// Creates and starts a primary (trust authentication on 127.0.0.1, WAL for replicas).
    pub fn start_primary() -> Result<Postgres> {
        let bin = pg_bin_dir()?;
        let user = pg_server_user()?;
        let dir = work_root()?.join(format!("pg-{}", NEXT.fetch_add(1, Ordering::Relaxed)));
        owned_dir(&dir, user)?;
        let data = dir.join("data");
        let mut initdb = command(&bin.join("initdb"), user);
        initdb.args([
            "-U",
            "postgres",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--no-sync",
            "-D",
        ]);
        initdb.arg(&data);
        run(initdb, "initdb")?;
        Postgres::run_server(&bin, dir, None, user)
    }

    /// Clones `primary` with `pg_basebackup -R` and starts it as a streaming replica.
    pub fn start_replica_of(primary: &Postgres) -> Result<Postgres> {
        let bin = pg_bin_dir()?;
        let user = pg_server_user()?;
        let dir = work_root()?.join(format!("pg-{}", NEXT.fetch_add(1, Ordering::Relaxed)));
        owned_dir(&dir, user)?;
        let mut backup = command(&bin.join("pg_basebackup"), user);
        backup.args([
            "-h",
            "127.0.0.1",
            "-U",
            "postgres",
            "-R",
            "-X",
            "stream",
            "--no-sync",
        ]);
        backup.arg("-p").arg(primary.port.to_string());
        backup.arg("-D").arg(dir.join("data"));
        run(backup, "pg_basebackup")?;
        Postgres::run_server(&bin, dir, Some(primary.port), user)
    }

    fn run_server(
        bin: &Path,
        dir: PathBuf,
        primary_port: Option<u16>,
        user: Option<(u32, u32)>,
    ) -> Result<Postgres> {
        let port = free_port()?;
        let log = std::fs::File::create(dir.join("server.log"))?;
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(dir.join("server.log"), Some(uid), Some(gid))?;
        }
        let mut cmd = command(&bin.join("postgres"), user);
        cmd.arg("-D").arg(dir.join("data"));
        cmd.arg("-p").arg(port.to_string());
        for setting in [
            "listen_addresses=127.0.0.1".to_string(),
            format!("unix_socket_directories={}", dir.display()),
            "fsync=off".into(),
            "synchronous_commit=off".into(),
            "full_page_writes=off".into(),
            "wal_level=replica".into(),
            "max_wal_senders=10".into(),
            "hot_standby=on".into(),
            "max_connections=200".into(),
            "shared_buffers=32MB".into(),
        ] {
            cmd.arg("-c").arg(setting);
        }
        cmd.stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        set_parent_death_signal(&mut cmd);
        let child = spawn_from_long_lived_thread(cmd)?;
        let mut server = Postgres {
            port,
            primary_port,
            dir,
            child: Some(child),
        };
        server.wait_ready()?;
        Ok(server)
    }

    /// Waits until it answers a query.
    fn wait_ready(&mut self) -> Result<()> {
        let started = Instant::now();
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Some(status) = child.try_wait()? {
                    return Err(self.start_error(format!("exited with {status}")));
                }
            }
            if self.sql("SELECT 1").is_ok() {
                return Ok(());
            }
            if started.elapsed() > START_TIMEOUT {
                return Err(self.start_error(format!("not ready within {START_TIMEOUT:?}")));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn start_error(&self, reason: String) -> Error {
        let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(30).collect();
        Error::Other(format!(
            "postgres on port {} did not start: {reason}\n--- server log ---\n{}",
            self.port,
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        ))
    }

    /// Its directory (data directory, socket, log); removed on drop.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The server process's id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Runs `sql` with psql as `postgres` in database `postgres`; returns its unaligned,
    /// tuples-only output.
    pub fn sql(&self, sql: &str) -> Result<String> {
        let psql = crate::find_program("psql", "postgresql-client-15")?;
        let mut cmd = Command::new(psql);
        cmd.args([
            "-h",
            "127.0.0.1",
            "-U",
            "postgres",
            "-d",
            "postgres",
            "-XAtq",
        ])
        .arg("-p")
        .arg(self.port.to_string())
        .arg("-c")
        .arg(sql);
        crate::client_output(cmd, self.port, sql)
    }

    /// Makes every user but `postgres` log in over TCP with a password, by `methods`
    /// (user, `scram-sha-256` / `md5` / `password`; the others `scram-sha-256`), and
    /// reloads the configuration.
    pub fn require_passwords(&self, methods: &[(&str, &str)]) -> Result<()> {
        let mut hba = String::from(
            "local all all trust\nhost all postgres 127.0.0.1/32 trust\nhost replication all 127.0.0.1/32 trust\n",
        );
        for (user, method) in methods {
            hba.push_str(&format!("host all {user} 127.0.0.1/32 {method}\n"));
        }
        hba.push_str("host all all 127.0.0.1/32 scram-sha-256\n");
        let path = self.dir.join("data").join("pg_hba.conf");
        std::fs::write(&path, hba)?;
        self.sql("SELECT pg_reload_conf()")?;
        Ok(())
    }

    /// Stops it at once (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A primary and its streaming replicas.
pub struct PgTopology {
    /// The primary first, then the replicas.
    pub servers: Vec<Postgres>,
}

impl PgTopology {
    /// Starts a primary and `replicas` streaming replicas of it.
    pub fn start(replicas: usize) -> Result<PgTopology> {
        let primary = Postgres::start_primary()?;
        let mut servers = Vec::with_capacity(replicas + 1);
        let mut clones = Vec::with_capacity(replicas);
        for _ in 0..replicas {
            clones.push(Postgres::start_replica_of(&primary)?);
        }
        servers.push(primary);
        servers.extend(clones);
        Ok(PgTopology { servers })
    }

    /// The primary.
    pub fn primary(&self) -> &Postgres {
        &self.servers[0]
    }

    /// The replicas.
    pub fn replicas(&self) -> &[Postgres] {
        &self.servers[1..]
    }
}
