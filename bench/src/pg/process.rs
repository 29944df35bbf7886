//! Child processes (servers, proxies) stopped with their whole process tree, the registry a
//! signal handler kills, and commands run to their end within a time limit.

use super::process_tree;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Processes started through [`Proc`] that still run: what a signal handler must stop.
static RUNNING: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// Sends `sig` to `pid`.
fn signal(pid: u32, sig: i32) {
    // SAFETY: kill has no memory-safety preconditions; pid is one of our processes.
    unsafe {
        libc::kill(pid as i32, sig);
    }
}

/// Kills (SIGKILL) every process still registered by a [`Proc`] and its descendants: for a
/// signal handler that ends the program.
pub fn kill_all_registered() {
    let pids: Vec<u32> = RUNNING
        .lock()
        .map(|g| g.clone())
        .unwrap_or_else(|e| e.into_inner().clone());
    for pid in pids {
        for p in process_tree(pid) {
            signal(p, libc::SIGKILL);
        }
    }
}

/// A child process (a server or a proxy) stopped with its whole process tree when dropped:
/// first `stop_signal`, then SIGKILL for whatever is left after a grace period. It gets
/// SIGKILL too if this program dies (parent-death signal; spawn it from the main thread).
pub struct Proc {
    /// What it is, for messages.
    pub name: String,
    child: Option<Child>,
    stop_signal: i32,
}

impl Proc {
    /// Spawns `cmd` (output wherever `cmd` sends it).
    pub fn spawn(name: &str, mut cmd: Command, stop_signal: i32) -> Result<Proc, String> {
        // SAFETY: prctl(PR_SET_PDEATHSIG) is async-signal-safe and touches no Rust state.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
                Ok(())
            });
        }
        let child = cmd
            .stdin(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {name}: {e}"))?;
        if let Ok(mut g) = RUNNING.lock() {
            g.push(child.id());
        }
        Ok(Proc {
            name: name.to_string(),
            child: Some(child),
            stop_signal,
        })
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// Why it is gone, if it is.
    pub fn exited(&mut self) -> Option<String> {
        let c = self.child.as_mut()?;
        match c.try_wait() {
            Ok(Some(status)) => Some(format!("{} exited ({status})", self.name)),
            _ => None,
        }
    }

    /// Stops it: `stop_signal`, up to 10 s to exit, then SIGKILL for it and every
    /// descendant left.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let pid = child.id();
        let tree = process_tree(pid);
        signal(pid, self.stop_signal);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        for p in tree.into_iter().skip(1) {
            if Path::new(&format!("/proc/{p}")).exists() {
                signal(p, libc::SIGKILL);
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        if let Ok(mut g) = RUNNING.lock() {
            g.retain(|&p| p != pid);
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Runs `cmd` to its end or until `timeout` (then kills it): exit status, stdout, stderr.
pub fn run_bounded(
    mut cmd: Command,
    timeout: Duration,
) -> Result<(std::process::ExitStatus, String, String), String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{:?}: {e}", cmd.get_program()))?;
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut s);
            }
            String::from_utf8_lossy(&s).into_owned()
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{:?} did not finish within {timeout:?}: killed",
                    cmd.get_program()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(e.to_string()),
        }
    };
    Ok((
        status,
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default(),
    ))
}
