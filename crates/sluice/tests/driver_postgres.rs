//! PostgreSQL drivers through sluice: psycopg 3 and asyncpg (`drivers/python/pg_checks.py`),
//! node-postgres (`drivers/node/pg_checks.js`), pgx (`drivers/go/pgx`) and PgJDBC
//! (`drivers/java/PgChecks.java`) run their checks at the same time against one PostgreSQL
//! primary and replica with sluice in front: reads on the replica, writes on the primary,
//! transactions, session state across pooled connections, temp tables, advisory locks,
//! LISTEN/NOTIFY, COPY, prepared statements with the common types (NULL, bytea, arrays),
//! statements moving between server connections, cancel, errors, large results.
//!
//! Each program has a database of its own, so its sessions have pools of their own (pools
//! are per user and database) and no program can take a server connection another one's
//! check is holding. The set-up scripts (`drivers/*/setup.sh`, run by scripts/test.sh)
//! install the drivers.
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod pg;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// How long one program may take (each bounds its own waits well below this).
const LIMIT: Duration = Duration::from_secs(240);

fn drivers() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/drivers")
}

/// `name` on PATH (the Go toolchain also where setup.sh puts it).
fn program(name: &str, setup: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let extra = [
        drivers().join("go/.toolchain/bin"),
        PathBuf::from("/usr/local/go/bin"),
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/pyenv/bin"),
    ];
    std::env::split_paths(&path)
        .chain(extra)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{name} is not installed: run {setup} (as root)"))
}

/// One driver program: its name (also its database and object prefix), command and
/// working directory.
struct Driver {
    name: &'static str,
    cmd: tokio::process::Command,
}

/// Builds the Go program (offline: setup.sh filled the module cache).
async fn build_pgx() -> PathBuf {
    let go = program("go", "crates/sluice/tests/drivers/go/setup.sh");
    let bin = Path::new(env!("CARGO_TARGET_TMPDIR")).join("sluice-drivertest-pgx");
    let out = tokio::process::Command::new(go)
        .args(["build", "-mod=readonly", "-o"])
        .arg(&bin)
        .arg("./pgx")
        .current_dir(drivers().join("go"))
        .env("GOPROXY", "off")
        .env("GOTOOLCHAIN", "local")
        .stdin(Stdio::null())
        .output()
        .await
        .expect("run go build");
    assert!(
        out.status.success(),
        "go build ./pgx failed (did crates/sluice/tests/drivers/go/setup.sh run?):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    bin
}

fn drivers_to_run(pgx: PathBuf) -> Vec<Driver> {
    let python = program("python3", "scripts/test.sh (the Python virtualenv)");
    let mut py = tokio::process::Command::new(python);
    py.arg("pg_checks.py").current_dir(drivers().join("python"));

    let node_dir = drivers().join("node");
    assert!(
        node_dir.join("node_modules/pg").is_dir(),
        "node-postgres is not installed: run crates/sluice/tests/drivers/node/setup.sh"
    );
    let mut node =
        tokio::process::Command::new(program("node", "crates/sluice/tests/drivers/node/setup.sh"));
    node.arg("pg_checks.js").current_dir(node_dir);

    let mut go = tokio::process::Command::new(pgx);
    go.current_dir(drivers().join("go"));

    let java_dir = drivers().join("java");
    assert!(
        java_dir.join("classes/PgChecks.class").is_file(),
        "PgChecks is not compiled: run crates/sluice/tests/drivers/java/setup.sh"
    );
    let mut java =
        tokio::process::Command::new(program("java", "crates/sluice/tests/drivers/java/setup.sh"));
    java.args(["-cp", "classes:lib/*", "PgChecks"])
        .current_dir(java_dir);

    vec![
        Driver {
            name: "py",
            cmd: py,
        },
        Driver {
            name: "node",
            cmd: node,
        },
        Driver {
            name: "go",
            cmd: go,
        },
        Driver {
            name: "jdbc",
            cmd: java,
        },
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_drivers_pass_their_checks_through_sluice() {
    let pgx = build_pgx().await;
    let drivers = drivers_to_run(pgx);
    let env = pg::start(1, "").await;
    for d in &drivers {
        env.topo
            .primary()
            .sql(&format!("CREATE DATABASE {} OWNER app", d.name))
            .unwrap();
    }
    pg::wait_replayed(&env.topo).await;

    let started = Instant::now();
    let runs = drivers.into_iter().map(|mut d| {
        d.cmd
            .env("PGHOST", "127.0.0.1")
            .env("SLUICE_PORT", env.port.to_string())
            .env("PRIMARY_PORT", env.topo.primary().port.to_string())
            .env("REPLICA_PORT", env.topo.replicas()[0].port.to_string())
            .env("PGUSER", "app")
            .env("PGPASSWORD", "app")
            .env("PGDATABASE", d.name)
            .env("PREFIX", format!("{}_", d.name))
            .stdin(Stdio::null())
            .kill_on_drop(true);
        tokio::spawn(async move {
            let out = tokio::time::timeout(LIMIT, d.cmd.output()).await;
            (d.name, out, started.elapsed())
        })
    });
    let runs: Vec<_> = runs.collect();
    let mut failed = Vec::new();
    for run in runs {
        let (name, out, took) = run.await.unwrap();
        let took = took.as_secs_f64();
        match out {
            Err(_) => failed.push(format!("{name}: did not finish within {LIMIT:?}")),
            Ok(Err(e)) => failed.push(format!("{name}: cannot run: {e}")),
            Ok(Ok(out)) => {
                let stdout = String::from_utf8_lossy(&out.stdout);
                let stderr = String::from_utf8_lossy(&out.stderr);
                println!("=== {name} ({took:.1} s, {})\n{stdout}", out.status);
                if !out.status.success() {
                    let fails: Vec<&str> =
                        stdout.lines().filter(|l| l.starts_with("FAIL")).collect();
                    failed.push(format!(
                        "{name} ({}): {}\n--- stderr\n{stderr}",
                        out.status,
                        fails.join("\n")
                    ));
                }
            }
        }
    }
    assert!(failed.is_empty(), "\n{}", failed.join("\n\n"));
}
