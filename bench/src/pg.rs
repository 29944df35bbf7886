//! PostgreSQL pieces of the benchmarks: a PostgreSQL server of the benchmark's own settings
//! (run as the `postgres` user when running as root, like the testkit's), processes stopped
//! with their whole process tree, CPU time of a process tree, and pgbench runs with their
//! report parsed (latency percentiles from pgbench's transaction log).
//!
//! The testkit's `Postgres` starts servers with `max_connections=200`; the benchmarks need
//! more (every target's clients or pool at once), hence a server of their own here.

mod pgbench;
mod proc_tree;
mod process;
mod server;

pub use pgbench::{parse_pgbench, pgbench_log, Pgbench, PgbenchResult};
pub use proc_tree::{process_tree, rss_bytes, tree_cpu_micros, tree_user_micros};
pub use process::{kill_all_registered, run_bounded, Proc};
pub use server::PgServer;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The directory holding `initdb`, `postgres`, `pgbench` (the testkit's, with pgbench in it).
pub fn pg_bin_dir() -> Result<PathBuf, String> {
    let dir = sluice_testkit::pg_bin_dir().map_err(|e| e.to_string())?;
    if !dir.join("pgbench").is_file() {
        return Err(format!(
            "no pgbench in {} (install postgresql-client-15)",
            dir.display()
        ));
    }
    Ok(dir)
}

/// The user PostgreSQL (and the proxies that refuse root) run as: the testkit's.
pub fn server_user() -> Result<Option<(u32, u32)>, String> {
    sluice_testkit::pg_server_user().map_err(|e| e.to_string())
}

/// Makes `cmd` run as [`server_user`].
pub fn as_server_user(cmd: &mut Command) -> Result<(), String> {
    if let Some((uid, gid)) = server_user()? {
        cmd.uid(uid).gid(gid);
    }
    Ok(())
}

/// Creates `path` (empty) owned by [`server_user`].
pub fn owned_dir(path: &Path) -> Result<(), String> {
    let _ = std::fs::remove_dir_all(path);
    std::fs::create_dir_all(path).map_err(|e| format!("{}: {e}", path.display()))?;
    chown_to_server_user(path)
}

/// Gives `path` to [`server_user`].
pub fn chown_to_server_user(path: &Path) -> Result<(), String> {
    if let Some((uid, gid)) = server_user()? {
        std::os::unix::fs::chown(path, Some(uid), Some(gid))
            .map_err(|e| format!("chown {}: {e}", path.display()))?;
    }
    Ok(())
}

/// Writes a file owned by [`server_user`].
pub fn write_owned(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    chown_to_server_user(path)
}
