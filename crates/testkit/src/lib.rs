//! Real MariaDB and PostgreSQL servers for tests, the demo and benchmarks: temporary data
//! directories, free ports, GTID replication (MariaDB), streaming replicas (PostgreSQL), and
//! cleanup on drop (also on panic). Servers also die with the
//! process that started them (parent-death signal), so a killed test run leaves nothing behind.
//!
//! No mocks: these are the `mariadbd` and `postgres` binaries installed on the machine. When one is missing,
//! the error says which Debian package to install.
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod ports;
mod postgres;
mod server;
mod topology;

pub use ports::free_port;
pub use postgres::{pg_bin_dir, pg_server_user, segment_present, PgTopology, Postgres};
pub use server::{MariaDb, ServerOptions};
pub use topology::{Topology, TopologyOptions, SEMI_SYNC_ARGS};

use std::path::PathBuf;

/// Testkit failures.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A required program is not installed.
    #[error("{program} not found: install the Debian package `{package}` (apt-get install -y {package})")]
    Missing {
        /// The program.
        program: &'static str,
        /// The package that provides it.
        package: &'static str,
    },
    /// A server did not start.
    #[error("mariadbd on port {port} did not start: {reason}\n--- error log ---\n{log}")]
    Start {
        /// Its port.
        port: u16,
        /// Why.
        reason: String,
        /// The tail of its error log.
        log: String,
    },
    /// An SQL command failed.
    #[error("SQL failed on port {port}: {sql}: {stderr}")]
    Sql {
        /// Server port.
        port: u16,
        /// Statement.
        sql: String,
        /// The client's error output.
        stderr: String,
    },
    /// Anything else.
    #[error("{0}")]
    Other(String),
    /// I/O.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Result alias.
pub type Result<T> = std::result::Result<T, Error>;

/// Finds a program in PATH or the usual system directories. `SLUICE_TESTKIT_PATH`, when set,
/// replaces that search path (to point at other MariaDB builds, or at none).
pub fn find_program(name: &'static str, package: &'static str) -> Result<PathBuf> {
    let dirs: Vec<PathBuf> = match std::env::var_os("SLUICE_TESTKIT_PATH") {
        Some(p) => std::env::split_paths(&p).collect(),
        None => {
            let mut d: Vec<PathBuf> = std::env::var_os("PATH")
                .map(|p| std::env::split_paths(&p).collect())
                .unwrap_or_default();
            d.extend(
                ["/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"].map(PathBuf::from),
            );
            d
        }
    };
    dirs.into_iter()
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .ok_or(Error::Missing {
            program: name,
            package,
        })
}

/// Runs a database client command to its end: its output without the trailing newline, or
/// the server's error as [`Error::Sql`].
pub(crate) fn client_output(
    mut cmd: std::process::Command,
    port: u16,
    sql: &str,
) -> Result<String> {
    let out = cmd.stdin(std::process::Stdio::null()).output()?;
    if !out.status.success() {
        return Err(Error::Sql {
            port,
            sql: sql.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim_end().to_string())
}

/// Root directory for this process's servers; stale directories of dead processes are
/// removed when it is first created.
pub(crate) fn work_root() -> Result<PathBuf> {
    static ROOT: std::sync::OnceLock<std::result::Result<PathBuf, String>> =
        std::sync::OnceLock::new();
    ROOT.get_or_init(|| {
        let base = std::env::temp_dir().join("sluice-testkit");
        std::fs::create_dir_all(&base).map_err(|e| e.to_string())?;
        if let Ok(entries) = std::fs::read_dir(&base) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if let Some(pid) = name
                    .strip_prefix("pid-")
                    .and_then(|p| p.parse::<i32>().ok())
                {
                    let alive = std::path::Path::new(&format!("/proc/{pid}")).exists();
                    if !alive {
                        postgres::remove_stale_segments(&e.path());
                        let _ = std::fs::remove_dir_all(e.path());
                    }
                }
            }
        }
        let dir = base.join(format!("pid-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        Ok(dir)
    })
    .clone()
    .map_err(Error::Other)
}
