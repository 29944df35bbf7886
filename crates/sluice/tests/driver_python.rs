//! Real Python drivers through sluice: PyMySQL and mysql-connector-python run
//! `tests/drivers/python/checks.py` (transactions, session state across replicas, parameter
//! types, prepared statements, temporary tables, user variables, LAST_INSERT_ID,
//! multi-statements, large results, errors) against a primary and two replicas.
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

/// Fails with an installation hint when `module` cannot be imported by `python3` on PATH.
fn require_module(module: &str) {
    let out = Command::new("python3")
        .arg("-c")
        .arg(format!("import {module}"))
        .stdin(Stdio::null())
        .output()
        .expect("python3 must be on PATH");
    assert!(
        out.status.success(),
        "Python module {module} is missing; install the drivers with \
         `pip install PyMySQL cryptography mysql-connector-python` (scripts/test.sh puts them \
         in target/pyenv and runs cargo with target/pyenv/bin first on PATH):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs the checks for `driver` against a fresh topology; panics with the program's output on
/// failure.
async fn run_checks(driver: &'static str, module: &'static str) {
    require_module(module);
    let env = common::start(2, "").await;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/drivers/python/checks.py");
    let sluice_port = env.port;
    let primary_port = env.topo.primary().port;
    let started = Instant::now();
    let out = tokio::task::spawn_blocking(move || {
        Command::new("python3")
            .arg(&script)
            .arg(driver)
            .env("SLUICE_PORT", sluice_port.to_string())
            .env("PRIMARY_PORT", primary_port.to_string())
            .stdin(Stdio::null())
            .output()
            .expect("run python3")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!(
        "{driver} checks took {:.1} s\n{stdout}",
        started.elapsed().as_secs_f64()
    );
    assert!(
        out.status.success(),
        "{driver} checks failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pymysql() {
    run_checks("pymysql", "pymysql").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_connector_python() {
    run_checks("connector", "mysql.connector").await;
}
