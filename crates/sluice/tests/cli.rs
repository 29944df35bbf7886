//! The `sluice` binary: `check`, `demo`, and running from a config file.

use std::process::{Command, Stdio};

fn sluice() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
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
    let out = sluice()
        .args(["demo", "--no-wait", "--port", "0"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("mariadb -h127.0.0.1 -P"), "{stdout}");
    // One line per server: writer with writes, readers with reads.
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .filter(|l| l.starts_with("127.0.0.1:"))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 3, "{stdout}");
    let writer = rows.iter().find(|r| r[1] == "writer").unwrap();
    assert!(
        writer[3].parse::<u64>().unwrap() > 0,
        "writer served writes: {stdout}"
    );
    for r in rows.iter().filter(|r| r[1] == "reader") {
        assert!(
            r[2].parse::<u64>().unwrap() > 0,
            "each replica served reads: {stdout}"
        );
        assert_eq!(r[3], "0", "replicas take no writes: {stdout}");
    }
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
