//! The `sluice` binary: `check`, `demo` (with its dashboard, and `--failover`), and running
//! from a config file.
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

fn sluice() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
}

/// Runs `sluice` with `args` (no input), asserting it succeeds; returns what it printed.
fn run_ok(args: &[&str]) -> String {
    let out = sluice().args(args).stdin(Stdio::null()).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn write_config(name: &str, text: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("sluice-cli-{}-{name}.toml", std::process::id()));
    std::fs::write(&p, text).unwrap();
    p
}

const GOOD: &str = r#"
[proxy]
listen = "127.0.0.1:6033"

[[listeners]]
listen = "127.0.0.1:6034"
hostgroup = "reader"

[[users]]
name = "app"
password = "app"

[[servers]]
address = "127.0.0.1:3306"
hostgroup = "writer"
[[servers]]
address = "127.0.0.1:3307"
hostgroup = "reader"
weight = 2
max_connections = 200

[[rules]]
match = "(?i)^\\s*SELECT .* FOR UPDATE"
hostgroup = "writer"
"#;

#[test]
fn check_accepts_the_documented_config_and_names_bad_fields() {
    let good = write_config("good", GOOD);
    let out = sluice()
        .args(["check", "--config"])
        .arg(&good)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("config OK"));

    for (bad, field) in [
        (
            GOOD.replace("127.0.0.1:3307", "127.0.0.1:70000"),
            "servers[1].address",
        ),
        (
            GOOD.replace("weight = 2", "weight = \"two\""),
            "servers[1].weight",
        ),
        (
            GOOD.replace(
                "hostgroup = \"reader\"\n\n[[users]]",
                "hostgroup = \"olap\"\n\n[[users]]",
            ),
            "listeners[0].hostgroup",
        ),
        (
            GOOD.replace("(?i)^\\\\s*SELECT .* FOR UPDATE", "(?i)[unclosed"),
            "rules[0].match",
        ),
        (
            GOOD.replace("max_connections = 200", "max_conections = 200"),
            "servers[1]",
        ),
    ] {
        let p = write_config("bad", &bad);
        let out = sluice()
            .args(["check", "--config"])
            .arg(&p)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "must fail for {field}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(field), "error must name {field}: {err}");
        std::fs::remove_file(p).ok();
    }
    let out = sluice()
        .args(["check", "--config", "/nonexistent/sluice.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read"));
    std::fs::remove_file(good).ok();
}

#[test]
fn demo_runs_and_reports_per_server_reads_and_writes() {
    let stdout = run_ok(&["demo", "--no-wait", "--port", "0"]);
    assert!(stdout.contains("mariadb -h127.0.0.1 -P"), "{stdout}");
    assert!(dashboard_addr(&stdout).is_some(), "{stdout}");
    assert_writes_on_the_writer_reads_on_the_readers(&stdout);
}

/// The demo's table (`ADDR hostgroup reads writes ...`, one line per server): the writer
/// served writes, each reader served reads and no writes. Returns the writer's address.
fn assert_writes_on_the_writer_reads_on_the_readers(stdout: &str) -> String {
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .filter(|l| l.starts_with("127.0.0.1:"))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 3, "{stdout}");
    let writers: Vec<_> = rows.iter().filter(|r| r[1] == "writer").collect();
    assert_eq!(writers.len(), 1, "{stdout}");
    assert!(
        writers[0][3].parse::<u64>().unwrap() > 0,
        "writer served writes: {stdout}"
    );
    let readers: Vec<_> = rows.iter().filter(|r| r[1] == "reader").collect();
    assert_eq!(readers.len(), 2, "{stdout}");
    for r in readers {
        assert!(
            r[2].parse::<u64>().unwrap() > 0,
            "each replica served reads: {stdout}"
        );
        assert_eq!(r[3], "0", "replicas take no writes: {stdout}");
    }
    writers[0][0].to_string()
}

#[test]
fn demo_without_mariadb_says_what_to_install() {
    let out = sluice()
        .args(["demo", "--no-wait", "--port", "0"])
        .env("SLUICE_TESTKIT_PATH", "/nonexistent")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("apt-get install -y mariadb-server"), "{err}");
}

#[test]
fn demo_postgres_splits_reads_and_writes_and_says_how_to_connect() {
    let stdout = run_ok(&[
        "demo",
        "--postgres",
        "--no-wait",
        "--port",
        "0",
        "--admin-port",
        "0",
    ]);
    assert!(dashboard_addr(&stdout).is_some(), "{stdout}");
    // `PGPASSWORD=app psql -h 127.0.0.1 -p PORT -U app postgres`, PORT the listener's.
    let port: u16 = stdout
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("PGPASSWORD=app psql -h 127.0.0.1 -p ")
        })
        .and_then(|r| r.strip_suffix(" -U app postgres")?.parse().ok())
        .unwrap_or_else(|| panic!("no psql line:\n{stdout}"));
    assert!(
        stdout.contains(&format!("sluice is listening on 127.0.0.1:{port} ")),
        "{stdout}"
    );
    // The writer in the table is the primary started at the top.
    let writer = assert_writes_on_the_writer_reads_on_the_readers(&stdout);
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("  primary ") && l.trim_end().ends_with(&writer)),
        "{writer} is the primary:\n{stdout}"
    );
}

#[test]
fn demo_postgres_without_postgresql_says_what_to_install() {
    // No server binaries (SLUICE_PG_BIN) and no psql (SLUICE_TESTKIT_PATH) where it looks.
    let mut demo = Demo(
        sluice()
            .args(["demo", "--postgres", "--no-wait", "--port", "0"])
            .env("SLUICE_PG_BIN", "/nonexistent")
            .env("SLUICE_TESTKIT_PATH", "/nonexistent")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let status = demo
        .wait(Duration::from_secs(60))
        .expect("it exits at once, starting nothing");
    assert!(!status.success());
    let mut err = String::new();
    std::io::Read::read_to_string(&mut demo.0.stderr.take().unwrap(), &mut err).unwrap();
    assert!(err.contains("apt-get install -y postgresql-15"), "{err}");
}

#[test]
fn demo_refuses_postgres_with_failover() {
    let out = sluice()
        .args(["demo", "--postgres", "--failover", "--no-wait"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--failover is MySQL-only"), "{err}");
}

#[test]
fn run_refuses_an_invalid_config() {
    let p = write_config(
        "run-bad",
        &GOOD.replace("[[users]]\nname = \"app\"\npassword = \"app\"\n", ""),
    );
    let out = sluice().arg("--config").arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("users"));
    std::fs::remove_file(p).ok();
}

/// The address in the demo's `Dashboard: http://ADDR/` line.
fn dashboard_addr(stdout: &str) -> Option<SocketAddr> {
    stdout.lines().find_map(|l| {
        l.strip_prefix("Dashboard: http://")?
            .split_once('/')?
            .0
            .parse()
            .ok()
    })
}

/// A running `sluice demo`: on drop, Ctrl-C (SIGINT) then, if it is still running after a
/// minute, SIGKILL (its servers die with it).
struct Demo(Child);

impl Demo {
    fn interrupt(&self) {
        let _ = Command::new("kill")
            .args(["-INT", &self.0.id().to_string()])
            .status();
    }

    /// Waits up to `limit` for it to exit.
    fn wait(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let start = std::time::Instant::now();
        while start.elapsed() < limit {
            if let Ok(Some(status)) = self.0.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        None
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            self.interrupt();
            if self.wait(Duration::from_secs(60)).is_none() {
                let _ = self.0.kill();
                let _ = self.0.wait();
            }
        }
    }
}

#[test]
fn demo_serves_its_dashboard_until_ctrl_c() {
    let mut demo = Demo(
        sluice()
            .args(["demo", "--port", "0", "--admin-port", "0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let (tx, lines) = mpsc::channel();
    let out = demo.0.stdout.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let mut seen = String::new();
    while !seen.contains("Press Ctrl-C") {
        let line = lines
            .recv_timeout(Duration::from_secs(300))
            .unwrap_or_else(|e| panic!("{e}: the demo did not get to waiting:\n{seen}"));
        seen.push_str(&line);
        seen.push('\n');
    }
    // The printed URL serves the dashboard and the API, on the demo's servers.
    let addr = dashboard_addr(&seen).unwrap_or_else(|| panic!("no dashboard URL:\n{seen}"));
    let (status, page) = common::http::request(addr, "GET", "/", None);
    assert_eq!(status, 200);
    assert!(page.contains("<title>sluice</title>"), "{page}");
    let servers = common::http::get_json(addr, "/api/servers");
    assert_eq!(servers.as_array().map(Vec::len), Some(3), "{servers}");
    for s in servers.as_array().unwrap() {
        let address = s["address"].as_str().unwrap();
        assert!(
            seen.contains(address),
            "{address} is a demo server:\n{seen}"
        );
    }

    demo.interrupt();
    let status = demo
        .wait(Duration::from_secs(120))
        .expect("the demo stopped on Ctrl-C");
    let rest: Vec<String> = lines.try_iter().collect();
    assert!(status.success(), "{status}: {rest:?}");
    assert!(
        rest.iter().any(|l| l == "stopped; temporary data removed."),
        "{rest:?}"
    );
}

#[test]
fn demo_failover_promotes_a_replica_and_loses_no_acknowledged_write() {
    let stdout = run_ok(&[
        "demo",
        "--failover",
        "--no-wait",
        "--port",
        "0",
        "--admin-port",
        "0",
    ]);
    assert!(dashboard_addr(&stdout).is_some(), "{stdout}");
    // `  replica  ADDR  (server_id N)` at the start; `killed: ADDR (server_id N)...` and
    // `promoted: ADDR (server_id N)...` after the workload.
    let addr_after = |prefix: &str| -> String {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .and_then(|r| r.split_whitespace().next())
            .unwrap_or_else(|| panic!("no {prefix:?} line:\n{stdout}"))
            .to_string()
    };
    let primary = addr_after("  primary  ");
    let killed = addr_after("killed: ");
    let promoted = addr_after("promoted: ");
    assert_eq!(killed, primary, "{stdout}");
    assert_ne!(promoted, killed, "{stdout}");
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("  replica  ") && l.contains(&promoted)),
        "a replica was promoted:\n{stdout}"
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("first write acknowledged by the new primary: ")),
        "{stdout}"
    );
    let acked: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("no acknowledged write lost: all "))
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no verdict on acknowledged writes:\n{stdout}"));
    assert!(acked > 0, "{stdout}");
    // The promoted server is the primary in the final table.
    assert!(
        stdout
            .lines()
            .any(|l| l.trim_start().starts_with(&promoted) && l.contains(" primary ")),
        "{stdout}"
    );
}
