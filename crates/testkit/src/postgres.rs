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
        let mut server = Postgres {
            port,
            primary_port,
            dir,
            child: None,
        };
        server.spawn(bin, user)?;
        Ok(server)
    }

    /// Starts its `postgres` process (the data directory as it is) and waits until it
    /// answers.
    fn spawn(&mut self, bin: &Path, user: Option<(u32, u32)>) -> Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("server.log"))?;
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(self.dir.join("server.log"), Some(uid), Some(gid))?;
        }
        let mut cmd = command(&bin.join("postgres"), user);
        cmd.arg("-D").arg(self.dir.join("data"));
        for setting in settings(&self.dir, self.port) {
            cmd.arg("-c").arg(setting);
        }
        cmd.stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        set_parent_death_signal(&mut cmd);
        self.child = Some(spawn_from_long_lived_thread(cmd)?);
        self.wait_ready()
    }

    /// Starts it again after [`Postgres::kill`], on the same port, from its data directory
    /// (crash recovery, then the role that directory gives it).
    pub fn start_again(&mut self) -> Result<()> {
        self.kill();
        let bin = pg_bin_dir()?;
        let user = pg_server_user()?;
        self.spawn(&bin, user)
    }

    /// Freezes the whole server (SIGSTOP to the postmaster, then to every process it
    /// started): sockets stay open, nothing is answered, as a hung host.
    pub fn pause(&self) -> Result<()> {
        self.signal(libc::SIGSTOP)?;
        for child in self.children() {
            // SAFETY: kill(2) on a process whose parent is this server's postmaster.
            unsafe { libc::kill(child, libc::SIGSTOP) };
        }
        Ok(())
    }

    /// Thaws it (SIGCONT to its processes, then to the postmaster).
    pub fn resume(&self) -> Result<()> {
        for child in self.children() {
            // SAFETY: as in `pause`.
            unsafe { libc::kill(child, libc::SIGCONT) };
        }
        self.signal(libc::SIGCONT)
    }

    /// The processes its postmaster started.
    fn children(&self) -> Vec<i32> {
        let Some(pid) = self.pid() else {
            return Vec::new();
        };
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|p| {
                // /proc/PID/stat: "pid (comm) state ppid ...", comm may hold spaces.
                std::fs::read_to_string(format!("/proc/{p}/stat"))
                    .ok()
                    .and_then(|st| {
                        let after = &st[st.rfind(')')? + 2..];
                        after.split(' ').nth(1)?.parse::<u32>().ok()
                    })
                    == Some(pid)
            })
            .collect()
    }

    fn signal(&self, signal: i32) -> Result<()> {
        let pid = self
            .pid()
            .ok_or_else(|| Error::Other("postgres is not running".into()))?;
        // SAFETY: kill(2) with a pid read from the server's own lock file.
        if unsafe { libc::kill(pid as i32, signal) } != 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        Ok(())
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

    /// The last `n` lines of its server log.
    pub fn log_tail(&self, n: usize) -> String {
        let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Its directory (data directory, socket, log); removed on drop.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The postmaster's process id, from its lock file (it may have been restarted by
    /// something else than this handle: a rewind command), else the process this handle
    /// started.
    pub fn pid(&self) -> Option<u32> {
        std::fs::read_to_string(self.dir.join("data").join("postmaster.pid"))
            .ok()
            .and_then(|t| t.lines().next()?.trim().parse().ok())
            .or_else(|| self.child.as_ref().map(|c| c.id()))
    }

    /// The System V shared memory segment its postmaster made as the data directory's
    /// interlock: its key and id, from line 7 of the lock file.
    pub fn interlock_segment(&self) -> Option<(i64, i32)> {
        segment_of(&self.dir)
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

    /// Stops it at once (SIGKILL), as a crash would: the process this handle started, and
    /// a postmaster started in its directory by something else (a rewind command).
    pub fn kill(&mut self) {
        // The postmaster frozen first: seeing a child killed, it would start a crash restart
        // and make a new shared memory segment, which its own SIGKILL then leaves behind
        // (no drop could know it: it did not exist when the server was read).
        if let Some(pid) = self.live_postmaster() {
            // SAFETY: kill(2) on the postmaster named by the server's own lock file.
            unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
        }
        // Then its processes: a frozen one (see `pause`) would outlive the postmaster.
        for child in self.children() {
            // SAFETY: kill(2) on a process whose parent is this server's postmaster.
            unsafe { libc::kill(child, libc::SIGKILL) };
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(pid) = self.live_postmaster() {
            // SAFETY: kill(2) on the postmaster named by the server's own lock file.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            let deadline = Instant::now() + Duration::from_secs(10);
            while std::path::Path::new(&format!("/proc/{pid}")).exists()
                && Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// The postmaster's process id (see [`Postgres::pid`]) while that process is a running
    /// `postgres` (not a pid reused since).
    fn live_postmaster(&self) -> Option<u32> {
        let pid = self.pid()?;
        std::fs::read_link(format!("/proc/{pid}/exe"))
            .is_ok_and(|exe| exe.ends_with("postgres"))
            .then_some(pid)
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // A postmaster killed with SIGKILL leaves its segment behind, and a machine holds at
        // most `kernel.shmmni` (4,096): every server a test run starts would take one for
        // good, until no PostgreSQL could start there.
        let before = self.interlock_segment();
        self.kill();
        // Read again once it is dead: a crash restart under way made a new one.
        for segment in [before, self.interlock_segment()].into_iter().flatten() {
            remove_segment(segment);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The interlock segment named by the lock file of the server kept in `dir` (line 7 of
/// `data/postmaster.pid`).
fn segment_of(dir: &Path) -> Option<(i64, i32)> {
    let text = std::fs::read_to_string(dir.join("data").join("postmaster.pid")).ok()?;
    let mut f = text.lines().nth(6)?.split_whitespace();
    Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?))
}

/// Removes the interlock segments of the servers a dead test process left in `root` (its
/// servers shared by the tests of a binary are never dropped: they die with the process,
/// by SIGKILL, and leave their segments behind).
pub(crate) fn remove_stale_segments(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for e in entries.flatten() {
        if let Some(segment) = segment_of(&e.path()) {
            remove_segment(segment);
        }
    }
}

/// True while System V segment `(key, id)` exists (the id not reused under another key).
pub fn segment_present((key, id): (i64, i32)) -> bool {
    // SAFETY: shmctl(2) with IPC_STAT writes only into the zeroed struct it is given.
    unsafe {
        let mut ds: libc::shmid_ds = std::mem::zeroed();
        libc::shmctl(id, libc::IPC_STAT, &mut ds) == 0 && i64::from(ds.shm_perm.__key) == key
    }
}

/// Removes System V segment `(key, id)` if it is still there (destroyed once nothing is
/// attached to it).
fn remove_segment(segment: (i64, i32)) {
    if segment_present(segment) {
        // SAFETY: shmctl(2) with IPC_RMID takes no buffer.
        unsafe { libc::shmctl(segment.1, libc::IPC_RMID, std::ptr::null_mut()) };
    }
}

/// The settings every test server runs with (on the command line, where they win over the
/// configuration files a base backup or `pg_rewind` copies from another server; except
/// `synchronous_commit`, which roles and sessions may change). `cluster_name` is the name
/// it streams under as a standby (`pg<port>`).
fn settings(dir: &Path, port: u16) -> Vec<String> {
    vec![
        format!("port={port}"),
        "listen_addresses=127.0.0.1".into(),
        format!("unix_socket_directories={}", dir.display()),
        format!("cluster_name=pg{port}"),
        "fsync=off".into(),
        "synchronous_commit=off".into(),
        // pg_rewind needs both, and the WAL back to the last checkpoint before the fork.
        "full_page_writes=on".into(),
        "wal_log_hints=on".into(),
        "wal_keep_size=128MB".into(),
        "wal_level=replica".into(),
        "max_wal_senders=10".into(),
        "hot_standby=on".into(),
        "max_connections=200".into(),
        "shared_buffers=32MB".into(),
        // Two-phase commit (PREPARE TRANSACTION) is exercised through sluice.
        "max_prepared_transactions=4".into(),
    ]
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

    /// Writes a script, for `[failover] rewind_command`, that makes the server named by
    /// `SLUICE_SERVER_PORT` a standby of `SLUICE_PRIMARY_HOST`:`SLUICE_PRIMARY_PORT`: fast
    /// shutdown, `pg_rewind -R` from the primary (as `postgres`), start with the test
    /// settings (after a `CHECKPOINT` on the primary: see the script). Returns the command
    /// line that runs it.
    pub fn rewind_command(&self) -> Result<String> {
        let bin = pg_bin_dir()?;
        let as_server_user = match pg_server_user()? {
            Some((uid, gid)) => format!("setpriv --reuid={uid} --regid={gid} --clear-groups --"),
            None => String::new(),
        };
        let mut script = String::from("#!/bin/sh\nset -e\ncase \"$SLUICE_SERVER_PORT\" in\n");
        for s in &self.servers {
            script.push_str(&format!("{}) DIR={} ;;\n", s.port, s.dir.display()));
        }
        script.push_str("*) echo \"unknown server $SLUICE_SERVER\" >&2; exit 1 ;;\nesac\n");
        let bin = bin.display();
        script.push_str(&format!(
            "{as_server_user} {bin}/pg_ctl -D \"$DIR/data\" -m fast -w stop >/dev/null 2>&1 || true\n"
        ));
        // pg_rewind reads the source's timeline from its control file, which a server
        // promoted a moment ago updates only at its next checkpoint.
        script.push_str(&format!(
            "{bin}/psql -XAtq -h \"$SLUICE_PRIMARY_HOST\" -p \"$SLUICE_PRIMARY_PORT\" -U postgres -d postgres -c CHECKPOINT\n"
        ));
        script.push_str(&format!(
            "{as_server_user} {bin}/pg_rewind -D \"$DIR/data\" -R --source-server=\"host=$SLUICE_PRIMARY_HOST port=$SLUICE_PRIMARY_PORT user=postgres dbname=postgres\"\n"
        ));
        let opts: Vec<String> = settings(Path::new("$DIR"), 0)
            .into_iter()
            .filter(|s| !s.starts_with("port=") && !s.starts_with("cluster_name="))
            .map(|s| format!("-c {s}"))
            .collect();
        script.push_str(&format!(
            "{as_server_user} {bin}/pg_ctl -D \"$DIR/data\" -l \"$DIR/server.log\" -w -t 60 -o \"-c port=$SLUICE_SERVER_PORT -c cluster_name=pg$SLUICE_SERVER_PORT {}\" start >/dev/null\n",
            opts.join(" ")
        ));
        // Removed with the first server's directory.
        let path = self.servers[0].dir.join("rewind.sh");
        std::fs::write(&path, script)?;
        Ok(format!("sh {}", path.display()))
    }
}
