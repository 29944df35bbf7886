//! Drives sluice with Node.js's mysql2 driver: runs `drivers/node/checks.js` (transactions,
//! session variables, parameter types, temporary tables, user variables, LAST_INSERT_ID,
//! multi-statements, large results, errors; text and binary protocol) against sluice in front
//! of a primary and two replicas.
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

const SETUP: &str = "crates/sluice/tests/drivers/node/setup.sh";

/// `name` on PATH.
fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql2_checks_pass_through_sluice() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/drivers/node");
    let node =
        on_path("node").unwrap_or_else(|| panic!("node is not installed: run {SETUP} (as root)"));
    assert!(
        dir.join("node_modules/mysql2").is_dir(),
        "mysql2 is not installed in {}: run {SETUP}",
        dir.display()
    );

    let env = common::start(2, "").await;
    let started = Instant::now();
    let run = tokio::process::Command::new(node)
        .arg("checks.js")
        .current_dir(&dir)
        .env("SLUICE_PORT", env.port.to_string())
        .env("PRIMARY_PORT", env.topo.primary().port.to_string())
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("checks.js did not finish within 120 s")
        .expect("run node");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    assert!(
        out.status.success(),
        "checks.js failed ({}) after {:.1} s\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status,
        started.elapsed().as_secs_f64()
    );
}
