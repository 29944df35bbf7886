//! The workload a profile-guided build of sluice is trained on (`scripts/build-pgo.sh`): one
//! sluice (the instrumented build named by `SLUICE_BIN`) in front of a MariaDB server and a
//! PostgreSQL 15 server at once, driven through both protocols the way the benchmarks and
//! most deployments drive it — sysbench point selects and read/write transactions (prepared
//! and not), connect-per-query logins, pgbench select-only and TPC-B-like in the simple,
//! extended and prepared protocols, and SCRAM connect-per-transaction. Both protocols are
//! trained so that neither one's hot path is taken for cold code. sluice is stopped with
//! SIGTERM at the end, so that it writes its profile as it exits.
//!
//! ```text
//! SLUICE_BIN=target/pgo/gen/release/sluice pgotrain [--secs S]
//! ```
//!
//! Every run is bounded in time; a failed run (pgbench's failed transactions or aborted
//! clients, a sysbench or login run that does not finish) fails the training.
// A tool around the proxy: a failed set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use sluice_bench::pg::{run_bounded, PgServer, Pgbench, Proc};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

fn main() {
    let mut secs: u64 = 4;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--secs" => secs = args.next().and_then(|s| s.parse().ok()).expect("--secs S"),
            _ => panic!("usage: SLUICE_BIN=... pgotrain [--secs S]"),
        }
    }
    if let Err(e) = train(secs) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn train(secs: u64) -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!("sluice-pgotrain-{}", std::process::id()));
    let _cleanup = RemoveOnDrop(dir.clone());
    eprintln!("starting MariaDB (sysbench tables) ...");
    let maria = sluice_bench::sbtest_server(&[], "128M", "", 4, 10_000)?;
    eprintln!("starting PostgreSQL (pgbench tables) ...");
    let pg = PgServer::start(
        &dir.join("pg"),
        &[
            "max_connections=300".into(),
            "fsync=off".into(),
            "synchronous_commit=off".into(),
            "password_encryption=scram-sha-256".into(),
        ],
        "host all app 127.0.0.1/32 scram-sha-256\n",
    )?;
    pg.sql("CREATE ROLE app LOGIN PASSWORD 'app'; GRANT CREATE ON SCHEMA public TO app")?;
    let pgbench = pg.program("pgbench");
    let mut init = Command::new(&pgbench);
    init.env("PGPASSWORD", "app")
        .args(["-i", "-q", "-s", "1", "-h", "127.0.0.1", "-U", "app", "-p"])
        .arg(pg.port.to_string())
        .arg("postgres");
    let (status, out, err) = run_bounded(init, Duration::from_secs(300))?;
    if !status.success() {
        return Err(format!("pgbench -i failed ({status}): {out}{err}"));
    }

    let my_port = sluice_testkit::free_port().map_err(|e| e.to_string())?;
    let pg_port = sluice_testkit::free_port().map_err(|e| e.to_string())?;
    let config = format!(
        "[proxy]\nlisten = \"127.0.0.1:{my_port}\"\nworker_threads = 1\n\n\
         [[listeners]]\nlisten = \"127.0.0.1:{pg_port}\"\nprotocol = \"postgres\"\n\n\
         [[users]]\nname = \"app\"\npassword = \"app\"\n\n\
         [[servers]]\naddress = \"127.0.0.1:{}\"\nhostgroup = \"writer\"\nmax_connections = 100\n\n\
         [[servers]]\naddress = \"127.0.0.1:{}\"\nhostgroup = \"reader\"\nmax_connections = 100\n\n\
         [[servers]]\naddress = \"{}\"\nprotocol = \"postgres\"\nhostgroup = \"writer\"\nmax_connections = 100\n\n\
         [[servers]]\naddress = \"{}\"\nprotocol = \"postgres\"\nhostgroup = \"reader\"\nmax_connections = 100\n\n\
         [monitor]\nenabled = false\n\n[log]\nlevel = \"warn\"\n",
        maria.port,
        maria.port,
        pg.addr(),
        pg.addr()
    );
    let cfg_path = dir.join("sluice.toml");
    std::fs::write(&cfg_path, config).map_err(|e| e.to_string())?;
    let mut cmd = Command::new(sluice_bench::sluice_bin());
    cmd.arg("--config").arg(&cfg_path);
    let mut sluice = Proc::spawn("sluice", cmd, libc::SIGTERM)?;
    sluice_bench::wait_port(my_port)?;
    sluice_bench::wait_port(pg_port)?;

    let time = format!("--time={secs}");
    for (test, threads, extra) in [
        ("oltp_point_select", "16", None),
        ("oltp_point_select", "16", Some("--db-ps-mode=disable")),
        ("oltp_read_only", "8", None),
        ("oltp_read_write", "8", None),
        ("oltp_read_write", "4", Some("--db-ps-mode=disable")),
    ] {
        let mut a = vec![
            test.to_string(),
            "--tables=4".into(),
            "--table-size=10000".into(),
            format!("--threads={threads}"),
            time.clone(),
        ];
        a.extend(extra.map(String::from));
        a.push("run".into());
        // (sysbench retries the errors it ignores, deadlocks of read/write transactions; a
        // failed run fails the training.)
        let r = sluice_bench::sysbench(my_port, "sbtest", &a)?;
        eprintln!("sysbench {}: {} ignored errors", a.join(" "), r.errors);
    }
    // MySQL logins: connect, one query, quit.
    let loadgen = std::env::current_exe()
        .map_err(|e| e.to_string())?
        .with_file_name("loadgen");
    let mut cpq = Command::new(&loadgen);
    cpq.args(["cpq", "--addr"])
        .arg(format!("127.0.0.1:{my_port}"))
        .args(["--clients", "4", "--time"])
        .arg(secs.to_string())
        .args(["--db", "sbtest"]);
    let (status, out, err) = run_bounded(cpq, Duration::from_secs(secs + 60))?;
    if !status.success() || !out.contains(" failed=0 ") {
        return Err(format!("loadgen cpq failed ({status}): {out}{err}"));
    }
    let summary = out.split(" lat=").next().unwrap_or("").trim();
    eprintln!("loadgen {summary}");

    let t = secs.to_string();
    for args in [
        &["-S", "-M", "simple", "-c", "16", "-j", "2"][..],
        &["-S", "-M", "prepared", "-c", "16", "-j", "2"],
        &["-S", "-M", "extended", "-c", "4", "-j", "2"],
        &["-S", "-M", "simple", "-c", "1", "-j", "1"],
        &["-S", "-M", "simple", "-c", "64", "-j", "2"],
        &["-M", "simple", "-c", "8", "-j", "2"],
        &["-M", "prepared", "-c", "8", "-j", "2"],
        &["-S", "-C", "-c", "4", "-j", "2"],
    ] {
        let mut a: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        a.extend(["-T".into(), t.clone()]);
        let r = Pgbench {
            bin: &pgbench,
            port: pg_port,
            user: "app",
            password: "app",
            database: "postgres",
            args: a.clone(),
            log: None,
            timeout: Duration::from_secs(secs + 120),
        }
        .run()?;
        if r.failed > 0 || r.aborted_clients > 0 || r.transactions == 0 {
            return Err(format!(
                "pgbench {}: {} failed, {} clients aborted",
                a.join(" "),
                r.failed,
                r.aborted_clients
            ));
        }
        eprintln!("pgbench {}: {} transactions", a.join(" "), r.transactions);
    }
    // SIGTERM: sluice exits through its shutdown and writes the profile.
    sluice.stop();
    drop(maria);
    Ok(())
}

/// Removes a directory when dropped (the PostgreSQL server in it is stopped before: it is
/// dropped first).
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
