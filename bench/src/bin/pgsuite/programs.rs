//! The programs pgsuite runs: sluice's binary and each selected proxy's, found once, and the
//! report's header lines naming them with their versions.

use super::*;

/// The run's programs: sluice, and each selected proxy that is installed (none otherwise).
pub(super) struct Programs {
    pub(super) sluice: PathBuf,
    pub(super) pgbouncer: Option<PathBuf>,
    pub(super) haproxy: Option<PathBuf>,
    pub(super) pgpool: Option<PathBuf>,
    pub(super) floor: Option<PathBuf>,
}

impl Programs {
    /// Finds the programs `--targets` selects; an error without a sluice binary.
    pub(super) fn find(o: &Opts) -> Result<Programs, String> {
        let sluice_path = sluice_bench::existing_sluice_bin()?;
        Ok(Programs {
            sluice: sluice_path,
            pgbouncer: find("pgbouncer", "pgbouncer").filter(|_| o.wants("pgbouncer")),
            haproxy: find("haproxy", "haproxy").filter(|_| o.wants("haproxy")),
            pgpool: find("pgpool", "pgpool2").filter(|_| o.wants("pgpool")),
            // Built beside pgsuite (sluice may be another build: SLUICE_BIN).
            floor: std::env::current_exe()
                .ok()
                .map(|p| p.with_file_name("pgfloor"))
                .filter(|_| o.wants("floor")),
        })
    }

    /// Prints a header line per program; an error when a selected target is not installed
    /// (a run without it compares nothing with it) or the floor is selected but not built.
    pub(super) fn print(&self, o: &Opts) -> Result<(), String> {
        let rev = sluice_commit();
        println!(
            "# sluice: {} ({}, commit {rev}), worker_threads = {}, [pool] max_connections {POOL_SIZE} per hostgroup (writer and reader: the same server)",
            self.sluice.display(),
            banner(&self.sluice, "--version"),
            o.sluice_threads
        );
        for (name, bin, wanted, package) in [
            (
                "pgbouncer",
                &self.pgbouncer,
                o.wants("pgbouncer"),
                "pgbouncer",
            ),
            ("haproxy", &self.haproxy, o.wants("haproxy"), "haproxy"),
            ("pgpool", &self.pgpool, o.wants("pgpool"), "pgpool2"),
        ] {
            // (pgfloor is printed below: it has no --version.)
            match bin {
                Some(p) => println!(
                    "# {name}: {} ({})",
                    p.display(),
                    banner(p, if name == "haproxy" { "-v" } else { "--version" })
                ),
                None if wanted => {
                    return Err(format!(
                        "{name} is selected but not installed: apt-get install {package} (bench/run-pg.sh installs every target), or leave it out of --targets"
                    ))
                }
                None => println!("# {name}: not selected"),
            }
        }

        if let Some(p) = &self.floor {
            if !p.is_file() {
                return Err(format!(
                    "no pgfloor binary at {} (cargo build --release -p sluice-bench --bin pgfloor)",
                    p.display()
                ));
            }
            println!("# floor: {} (bench/src/bin/pgfloor.rs: one thread, a task per client, Query forwarded up to ReadyForQuery over a LIFO pool; no parsing, routing, session state, statistics or client password; select-only -M simple only; its server connections come from {FLOOR_SOURCE}, trusted by pg_hba)", p.display());
        }
        Ok(())
    }
}

/// The commit of the source tree, with how many files under crates/ differ from it.
fn sluice_commit() -> String {
    let git = |args: &[&str]| {
        Command::new("git")
            .arg("-C")
            .arg(env!("CARGO_MANIFEST_DIR"))
            .args(args)
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    let mut rev = git(&["rev-parse", "--short", "HEAD"]);
    let changed = git(&["status", "--porcelain", "--", "../crates"])
        .lines()
        .count();
    if changed > 0 {
        rev += &format!(" + {changed} uncommitted files under crates/");
    }
    rev
}

/// The first line a program prints for `arg`.
pub(super) fn banner(program: &Path, arg: &str) -> String {
    Command::new(program)
        .arg(arg)
        .output()
        .ok()
        .and_then(|o| {
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            text.lines().next().map(|l| l.trim().to_string())
        })
        .unwrap_or_else(|| "version unknown".into())
}

/// The path of the program `name` (from the package `package`), if it is installed.
fn find(name: &'static str, package: &'static str) -> Option<PathBuf> {
    sluice_testkit::find_program(name, package).ok()
}
