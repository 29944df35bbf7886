//! One `mariadbd` process.

use crate::{find_program, free_port, work_root, Error, Result};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Options for one server.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// `server_id`.
    pub server_id: u32,
    /// Extra `--option=value` arguments.
    pub extra: Vec<String>,
    /// InnoDB buffer pool size.
    pub buffer_pool: &'static str,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            server_id: 1,
            extra: Vec::new(),
            buffer_pool: "64M",
        }
    }
}

/// A running (or stopped) MariaDB server with its own data directory.
pub struct MariaDb {
    /// TCP port on 127.0.0.1.
    pub port: u16,
    /// `server_id`.
    pub server_id: u32,
    /// Data directory.
    pub datadir: PathBuf,
    dir: PathBuf,
    opts: ServerOptions,
    child: Mutex<Option<Child>>,
    /// Extra arguments for the next start only.
    next_extra: Mutex<Vec<String>>,
    /// The one-off arguments of the current start.
    started_with: Mutex<Vec<String>>,
    /// Remove the directory on drop.
    pub remove_on_drop: bool,
}

static NEXT: AtomicU32 = AtomicU32::new(0);

fn template() -> Result<PathBuf> {
    static T: Mutex<Option<PathBuf>> = Mutex::new(None);
    let mut t = T.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = &*t {
        return Ok(p.clone());
    }
    let install = find_program("mariadb-install-db", "mariadb-server")?;
    let dir = work_root()?.join("template");
    let _ = std::fs::remove_dir_all(&dir);
    // Temporary tables in a directory of its own, not the shared /tmp: the bootstrap failed
    // there ("Could not remove temporary table") while other test runs shared the machine.
    let tmp = work_root()?.join("template-tmp");
    std::fs::create_dir_all(&tmp)?;
    let out = Command::new(install)
        .arg("--no-defaults")
        .arg(format!("--datadir={}", dir.display()))
        .arg(format!("--tmpdir={}", tmp.display()))
        .arg("--auth-root-authentication-method=normal")
        .arg("--skip-test-db")
        .arg("--innodb-log-file-size=16M")
        .arg("--innodb-buffer-pool-size=32M")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()?;
    if !out.status.success() {
        return Err(Error::Other(format!(
            "mariadb-install-db failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    *t = Some(dir.clone());
    Ok(dir)
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    let st = Command::new("cp").arg("-a").arg(from).arg(to).status()?;
    if !st.success() {
        return Err(Error::Other(format!(
            "cp -a {} {} failed",
            from.display(),
            to.display()
        )));
    }
    Ok(())
}

impl MariaDb {
    /// Creates a data directory from a fresh template and starts the server on a free port.
    pub fn start(opts: ServerOptions) -> Result<MariaDb> {
        find_program("mariadbd", "mariadb-server")?;
        find_program("mariadb", "mariadb-client")?;
        let tpl = template()?;
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = work_root()?.join(format!("server-{n}-{}", opts.server_id));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let datadir = dir.join("data");
        copy_dir(&tpl, &datadir)?;
        let port = free_port()?;
        let db = MariaDb {
            port,
            server_id: opts.server_id,
            datadir,
            dir,
            opts,
            child: Mutex::new(None),
            next_extra: Mutex::new(Vec::new()),
            started_with: Mutex::new(Vec::new()),
            remove_on_drop: true,
        };
        db.spawn()?;
        Ok(db)
    }

    /// `127.0.0.1:port`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The server's Unix socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.join("mysqld.sock")
    }

    /// The error log.
    pub fn error_log(&self) -> PathBuf {
        self.dir.join("error.log")
    }

    fn spawn(&self) -> Result<()> {
        let mariadbd = find_program("mariadbd", "mariadb-server")?;
        let mut cmd = Command::new(mariadbd);
        let tmp = self.dir.join("tmp");
        std::fs::create_dir_all(&tmp)?;
        cmd.arg("--no-defaults")
            .arg(format!("--datadir={}", self.datadir.display()))
            .arg(format!("--tmpdir={}", tmp.display()))
            .arg(format!("--port={}", self.port))
            .arg(format!("--socket={}", self.socket().display()))
            .arg(format!(
                "--pid-file={}",
                self.dir.join("mysqld.pid").display()
            ))
            .arg(format!("--log-error={}", self.error_log().display()))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--server-id={}", self.opts.server_id))
            // What SHOW REPLICA HOSTS reports of it on its primary (discovery).
            .arg("--report-host=127.0.0.1")
            .arg(format!("--report-port={}", self.port))
            .arg("--log-bin=mysql-bin")
            .arg("--log-slave-updates=1")
            .arg("--binlog-format=ROW")
            .arg("--gtid-strict-mode=1")
            .arg(format!(
                "--innodb-buffer-pool-size={}",
                self.opts.buffer_pool
            ))
            .arg("--innodb-log-file-size=16M")
            .arg("--innodb-flush-log-at-trx-commit=2")
            .arg("--sync-binlog=0")
            .arg("--skip-name-resolve")
            .arg("--character-set-server=utf8mb4")
            .arg("--collation-server=utf8mb4_general_ci")
            .arg("--max-connections=2000")
            .arg("--max-allowed-packet=256M")
            .arg("--performance-schema=OFF")
            .arg("--skip-log-warnings")
            .args(&self.opts.extra)
            .args({
                let once =
                    std::mem::take(&mut *self.next_extra.lock().unwrap_or_else(|e| e.into_inner()));
                *self.started_with.lock().unwrap_or_else(|e| e.into_inner()) = once.clone();
                once
            })
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if unsafe_is_root() {
            cmd.arg("--user=root");
        }
        // Die with the process that started the server, even if it is killed.
        set_parent_death_signal(&mut cmd);
        let child = spawn_from_long_lived_thread(cmd)?;
        *self.child.lock().unwrap_or_else(|e| e.into_inner()) = Some(child);
        self.wait_ready(Duration::from_secs(60))
    }

    fn wait_ready(&self, timeout: Duration) -> Result<()> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.try_exit_status() {
                return Err(self.start_error(format!("exited with {status}")));
            }
            let networking = !self
                .opts
                .extra
                .iter()
                .chain(
                    self.started_with
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .iter(),
                )
                .any(|a| a == "--skip-networking");
            let port_open = !networking || std::net::TcpStream::connect(self.addr()).is_ok();
            if port_open && self.sql("SELECT 1").is_ok() {
                return Ok(());
            }
            if start.elapsed() > timeout {
                return Err(self.start_error(format!("not ready after {} s", timeout.as_secs())));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn try_exit_status(&self) -> Option<std::process::ExitStatus> {
        let mut c = self.child.lock().unwrap_or_else(|e| e.into_inner());
        c.as_mut().and_then(|c| c.try_wait().ok().flatten())
    }

    fn start_error(&self, reason: String) -> Error {
        let log = std::fs::read_to_string(self.error_log()).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(30).collect();
        Error::Start {
            port: self.port,
            reason,
            log: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
        }
    }

    /// Runs SQL as root through the Unix socket; returns tab-separated output without headers.
    pub fn sql(&self, sql: &str) -> Result<String> {
        let client = find_program("mariadb", "mariadb-client")?;
        let mut cmd = Command::new(client);
        cmd.arg("--no-defaults")
            .arg("-uroot")
            .arg(format!("--socket={}", self.socket().display()))
            .arg("--batch")
            .arg("--skip-column-names")
            .arg("--connect-timeout=30")
            .arg("-e")
            .arg(sql);
        crate::client_output(cmd, self.port, sql)
    }

    /// Runs a query as root and returns its rows as column name → value maps.
    pub fn query_named(&self, sql: &str) -> Result<Vec<std::collections::HashMap<String, String>>> {
        let client = find_program("mariadb", "mariadb-client")?;
        let out = Command::new(client)
            .arg("--no-defaults")
            .arg("-uroot")
            .arg(format!("--socket={}", self.socket().display()))
            .arg("--batch")
            .arg("--connect-timeout=30")
            .arg("-e")
            .arg(sql)
            .stdin(Stdio::null())
            .output()?;
        if !out.status.success() {
            return Err(Error::Sql {
                port: self.port,
                sql: sql.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let mut lines = text.lines();
        let names: Vec<&str> = lines
            .next()
            .map(|l| l.split('\t').collect())
            .unwrap_or_default();
        Ok(lines
            .map(|l| {
                names
                    .iter()
                    .map(|n| n.to_string())
                    .zip(l.split('\t').map(str::to_string))
                    .collect()
            })
            .collect())
    }

    /// The port this server replicates from (default connection), if it replicates.
    pub fn source_port(&self) -> Result<Option<u16>> {
        let rows = self.query_named("SHOW SLAVE STATUS")?;
        Ok(rows
            .first()
            .and_then(|r| r.get("Master_Port"))
            .and_then(|p| p.parse().ok()))
    }

    /// The OS process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.child
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|c| c.id())
    }

    /// Sends a signal to the server process.
    pub fn signal(&self, sig: i32) -> Result<()> {
        let pid = self
            .pid()
            .ok_or_else(|| Error::Other("server not running".into()))?;
        // SAFETY: kill(2) with a pid we own has no memory-safety implications.
        let r = unsafe { libc::kill(pid as i32, sig) };
        if r != 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        Ok(())
    }

    /// Kills the server with SIGKILL and reaps it.
    pub fn kill(&self) -> Result<()> {
        let mut c = self.child.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(mut child) = c.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        Ok(())
    }

    /// Freezes the server (SIGSTOP): it keeps its sockets but answers nothing.
    pub fn pause(&self) -> Result<()> {
        self.signal(libc::SIGSTOP)?;
        // The signal is asynchronous: return once the process is really stopped.
        let pid = self
            .pid()
            .ok_or_else(|| Error::Other("server not running".into()))?;
        let start = Instant::now();
        loop {
            let stopped = std::fs::read_dir(format!("/proc/{pid}/task"))
                .map(|tasks| {
                    tasks.flatten().all(|t| {
                        let stat =
                            std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
                        stat.rsplit_once(") ")
                            .and_then(|(_, rest)| rest.chars().next())
                            == Some('T')
                    })
                })
                .unwrap_or(true);
            if stopped || start.elapsed() > Duration::from_secs(5) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Thaws a paused server.
    pub fn resume(&self) -> Result<()> {
        self.signal(libc::SIGCONT)
    }

    /// Shuts the server down cleanly (SIGTERM) and waits.
    pub fn stop(&self) -> Result<()> {
        let mut c = self.child.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(mut child) = c.take() {
            // SAFETY: see `signal`.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let start = Instant::now();
            loop {
                if child.try_wait()?.is_some() {
                    break;
                }
                if start.elapsed() > Duration::from_secs(30) {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(())
    }

    /// Starts a stopped or killed server again on the same port and data directory.
    pub fn restart(&self) -> Result<()> {
        self.kill()?;
        self.spawn()
    }

    /// Like [`MariaDb::restart`], with extra arguments for this start only (for example
    /// `--init-rpl-role=SLAVE` for a crashed semi-synchronous primary coming back).
    pub fn restart_with(&self, extra: &[&str]) -> Result<()> {
        self.kill()?;
        *self.next_extra.lock().unwrap_or_else(|e| e.into_inner()) =
            extra.iter().map(|s| s.to_string()).collect();
        self.spawn()
    }

    /// True while the process runs.
    pub fn is_running(&self) -> bool {
        self.pid().is_some() && self.try_exit_status().is_none()
    }
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        if self.pid().is_some() {
            let _ = self.resume();
        }
        let _ = self.kill();
        if self.remove_on_drop {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, not the process.
/// Servers are therefore always spawned by one thread that lives as long as the process.
pub(crate) fn spawn_from_long_lived_thread(cmd: Command) -> std::io::Result<Child> {
    use std::sync::mpsc;
    type Job = (Command, mpsc::Sender<std::io::Result<Child>>);
    static SPAWNER: std::sync::OnceLock<Mutex<mpsc::Sender<Job>>> = std::sync::OnceLock::new();
    let tx = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("testkit-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("spawner thread");
        Mutex::new(tx)
    });
    let (reply_tx, reply_rx) = mpsc::channel();
    tx.lock()
        .unwrap_or_else(|e| e.into_inner())
        .send((cmd, reply_tx))
        .map_err(|_| std::io::Error::other("spawner thread gone"))?;
    reply_rx
        .recv()
        .map_err(|_| std::io::Error::other("spawner thread gone"))?
}

pub(crate) fn unsafe_is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

pub(crate) fn set_parent_death_signal(cmd: &mut Command) {
    // SAFETY: prctl(PR_SET_PDEATHSIG) is async-signal-safe and touches no Rust state.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            Ok(())
        });
    }
}
