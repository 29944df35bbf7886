//! Drives sluice with Go's go-sql-driver/mysql: builds and runs `drivers/go` (transactions,
//! session variables, parameter types, temporary tables, user variables, LAST_INSERT_ID,
//! multi-statements, large results, errors; interpolated and server-side prepared) against
//! sluice in front of a primary and two replicas.
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

const SETUP: &str = "crates/sluice/tests/drivers/go/setup.sh";

/// The toolchain setup.sh fetched (when the system's Go is too old), `go` on PATH, or the
/// official toolchain's usual place.
fn find_go() -> Option<PathBuf> {
    let fetched = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/drivers/go/.toolchain/bin");
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::iter::once(fetched)
        .chain(std::env::split_paths(&path))
        .chain([PathBuf::from("/usr/local/go/bin")])
        .map(|d| d.join("go"))
        .find(|p| p.is_file())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_sql_driver_checks_pass_through_sluice() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/drivers/go");
    let go = find_go().unwrap_or_else(|| panic!("go is not installed: run {SETUP} (as root)"));

    // Build first (quick once setup.sh has filled the module and build caches), offline: the
    // test never downloads modules or toolchains.
    let bin = Path::new(env!("CARGO_TARGET_TMPDIR")).join("sluice-drivertest-go");
    let build = tokio::process::Command::new(&go)
        .args(["build", "-mod=readonly", "-o"])
        .arg(&bin)
        .arg(".")
        .current_dir(&dir)
        .env("GOPROXY", "off")
        .env("GOTOOLCHAIN", "local")
        .stdin(Stdio::null())
        .output()
        .await
        .expect("run go build");
    assert!(
        build.status.success(),
        "go build failed (did {SETUP} run?):\n{}",
        String::from_utf8_lossy(&build.stderr)
    );

    let env = common::start(2, "").await;
    let started = Instant::now();
    let run = tokio::process::Command::new(&bin)
        .current_dir(&dir)
        .env("SLUICE_PORT", env.port.to_string())
        .env("PRIMARY_PORT", env.topo.primary().port.to_string())
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the Go driver checks did not finish within 120 s")
        .expect("run the Go driver checks");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    assert!(
        out.status.success(),
        "the Go driver checks failed ({}) after {:.1} s\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status,
        started.elapsed().as_secs_f64()
    );
}
