//! `[failover] rewind_command`: the operator's command that turns a former primary into a
//! standby of the new one (a PostgreSQL primary cannot start following another server
//! without a restart, and `pg_rewind` when its WAL went past the fork point). It runs in
//! the background, at most one per server, bounded in time and in the output kept; the
//! monitor keeps the server out of service meanwhile and places it once it reports as a
//! standby.

use super::connection::value_on;
use std::collections::HashMap;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;
use tokio::task::JoinHandle;

/// Output kept from the command, per stream.
const OUTPUT_KEPT: usize = 4096;

/// The command and its time limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RewindCommand {
    /// Run with `sh -c`.
    pub command: String,
    /// Killed after this.
    pub timeout: Duration,
}

/// What the command is given: the former primary and the primary it must follow, and how
/// the waiting for it to come back as a standby logs in.
pub struct Job {
    pub command: RewindCommand,
    pub server: String,
    pub primary: String,
    pub login: super::Login,
}

struct Running {
    started: Instant,
    handle: JoinHandle<()>,
    result: Arc<parking_lot::Mutex<Option<Result<(), String>>>>,
}

/// The commands running or finished, per server.
#[derive(Default)]
pub struct Rewinds {
    map: parking_lot::Mutex<HashMap<Arc<str>, Running>>,
}

/// Where a server's rewind stands.
pub enum State {
    /// None started (or the last one's result was taken).
    Idle,
    /// Running for this long.
    Running(Duration),
    /// Finished: its result (taken).
    Finished(Result<(), String>),
}

impl Rewinds {
    /// The state of `server`'s rewind; a finished one's result is taken.
    pub fn state(&self, server: &str) -> State {
        let mut map = self.map.lock();
        match map.get(server) {
            None => State::Idle,
            Some(r) if !r.handle.is_finished() => State::Running(r.started.elapsed()),
            Some(_) => {
                let Some(r) = map.remove(server) else {
                    return State::Idle;
                };
                let result = r.result.lock().take();
                State::Finished(result.unwrap_or_else(|| Err("the rewind task failed".into())))
            }
        }
    }

    /// Why `server`'s last rewind failed, while its result was not taken (a server that
    /// does not answer after a failed rewind says why).
    pub fn failure(&self, server: &str) -> Option<String> {
        let map = self.map.lock();
        let r = map.get(server)?;
        let result = r.result.lock();
        match &*result {
            Some(Err(e)) => Some(e.clone()),
            _ => None,
        }
    }

    /// Starts `job` for `server` in the background.
    pub fn start(&self, server: Arc<str>, job: Job) {
        let result = Arc::new(parking_lot::Mutex::new(None));
        let slot = result.clone();
        let handle = tokio::spawn(async move {
            let r = run(job).await;
            *slot.lock() = Some(r);
        });
        self.map.lock().insert(
            server,
            Running {
                started: Instant::now(),
                handle,
                result,
            },
        );
    }
}

/// Runs the command, then waits (within the same time limit) until the server answers as
/// a standby.
async fn run(job: Job) -> Result<(), String> {
    let deadline = Instant::now() + job.command.timeout;
    let (host, port) = split(&job.server);
    let (primary_host, primary_port) = split(&job.primary);
    let mut child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(&job.command.command)
        .env("SLUICE_SERVER", &job.server)
        .env("SLUICE_SERVER_HOST", host)
        .env("SLUICE_SERVER_PORT", port)
        .env("SLUICE_PRIMARY", &job.primary)
        .env("SLUICE_PRIMARY_HOST", primary_host)
        .env("SLUICE_PRIMARY_PORT", primary_port)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot run rewind_command: {e}"))?;
    let (out, err) = (child.stdout.take(), child.stderr.take());
    let waited = tokio::time::timeout(job.command.timeout, async {
        let (o, e, status) = tokio::join!(kept(out), kept(err), child.wait());
        (o, e, status)
    })
    .await;
    let (_, stderr, status) = match waited {
        Ok(r) => r,
        Err(_) => {
            let _ = child.kill().await;
            return Err(format!(
                "rewind_command did not finish within {} s: killed",
                job.command.timeout.as_secs()
            ));
        }
    };
    let status = status.map_err(|e| format!("rewind_command: {e}"))?;
    if !status.success() {
        return Err(format!(
            "rewind_command failed ({status}): {}",
            stderr.trim()
        ));
    }
    // Back as a standby: it answers, in recovery.
    loop {
        if value_on(&job.server, &job.login, "SELECT pg_is_in_recovery()")
            .await
            .is_ok_and(|v| v == "t")
        {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "rewind_command succeeded but {} is not a standby within {} s",
                job.server,
                job.command.timeout.as_secs()
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The first [`OUTPUT_KEPT`] bytes of a stream, the rest read and dropped.
async fn kept(stream: Option<impl tokio::io::AsyncRead + Unpin>) -> String {
    let Some(mut s) = stream else {
        return String::new();
    };
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = OUTPUT_KEPT.saturating_sub(buf.len());
                buf.extend_from_slice(&chunk[..n.min(room)]);
            }
        }
    }
    String::from_utf8_lossy(&buf).into_owned()
}

/// `host:port` split (the port empty if there is none).
pub fn split(address: &str) -> (&str, &str) {
    address.rsplit_once(':').unwrap_or((address, ""))
}
