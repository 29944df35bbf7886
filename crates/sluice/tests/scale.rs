//! Running as several processes: two sluice processes share one port (SO_REUSEPORT), clients
//! connect from two loopback source addresses (as the 100,000-connection benchmark does with
//! more of each), every connection logs in and runs a query, and both processes take a share.
//! Each process raises its soft open-files limit to the hard limit and warns when the
//! configuration allows more clients than that.
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use sluice_bench::client::Target;
use sluice_bench::load::{self, Query};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn open_files(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// (soft, hard) open-files limits of a process.
fn file_limits(pid: u32) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let w: Vec<&str> = line.split_whitespace().collect();
    (w[3].to_string(), w[4].to_string())
}

#[test]
fn two_processes_share_a_port_and_every_client_can_query() {
    let topo = sluice_testkit::Topology::start(sluice_testkit::TopologyOptions {
        replicas: 0,
        ..Default::default()
    })
    .expect("MariaDB must start (is mariadb-server installed?)");
    topo.primary()
        .sql("CREATE TABLE test.t (id INT PRIMARY KEY, v INT); INSERT INTO test.t VALUES (1, 10), (2, 20); CREATE USER 'mon'@'%' IDENTIFIED BY 'mon'; GRANT ALL ON *.* TO 'mon'@'%'")
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let port = sluice_testkit::free_port().unwrap();
    let mut procs = Vec::new();
    for i in 0..2 {
        let path = dir.path().join(format!("sluice{i}.toml"));
        // More clients allowed than the open-files limit: sluice must say so. The second
        // process runs one worker (a current-thread runtime), the first one per CPU.
        let threads = if i == 1 { 1 } else { 0 };
        std::fs::write(
            &path,
            format!(
                "[proxy]\nlisten = \"127.0.0.1:{port}\"\nreuse_port = true\nworker_threads = {threads}\nmax_client_connections = 1000000\n[[users]]\nname = \"app\"\npassword = \"app\"\n[[servers]]\naddress = \"{}\"\nhostgroup = \"writer\"\nmax_connections = 8\n[monitor]\nuser = \"mon\"\npassword = \"mon\"\n[log]\nlevel = \"warn\"\n",
                topo.primary().addr()
            ),
        )
        .unwrap();
        let log = dir.path().join(format!("sluice{i}.log"));
        let f = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .arg("--config")
            .arg(&path)
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .spawn()
            .unwrap();
        procs.push((Killed(child), log));
        // Each process must bind before the next starts, or the second one's bind is what
        // is tested twice.
        let started = Instant::now();
        while std::fs::read_to_string("/proc/net/tcp")
            .unwrap()
            .lines()
            .filter(|l| l.contains(&format!(":{port:04X} 00000000:0000 0A")))
            .count()
            < i + 1
        {
            assert!(
                started.elapsed() < Duration::from_secs(120), // a hang guard
                "sluice {i} does not listen"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    for (p, log) in &procs {
        let (soft, hard) = file_limits(p.0.id());
        assert_eq!(
            soft, hard,
            "the soft open-files limit is raised to the hard limit"
        );
        let text = std::fs::read_to_string(log).unwrap();
        assert!(
            text.contains("open-files limit is below what max_client_connections"),
            "a warning names the limit: {text}"
        );
    }

    let rt = tokio::runtime::Runtime::new().unwrap();
    let targets: Vec<Target> = ["127.0.0.2", "127.0.0.3"]
        .iter()
        .map(|src| Target {
            addr: ([127, 0, 0, 1], port).into(),
            source: Some(src.parse().unwrap()),
            user: "app".into(),
            password: "app".into(),
            database: Some("test".into()),
        })
        .collect();
    let n = 2000;
    let (conns, opened) = rt.block_on(load::open(&targets, n, 50));
    assert_eq!(
        opened.ok as usize, n,
        "every client logs in: {:?}",
        opened.first_failure
    );
    // Both processes hold a share of the clients (the kernel spreads them by address hash).
    let held: Vec<usize> = procs.iter().map(|(p, _)| open_files(p.0.id())).collect();
    for h in &held {
        assert!(
            *h > n / 10,
            "both processes serve clients: open files {held:?}"
        );
    }
    let q = Query {
        template: "SELECT v FROM t WHERE id = {id}".into(),
        rows: 2,
    };
    let (conns, swept) = rt.block_on(load::sweep(conns, 50, &q));
    assert_eq!(
        swept.ok as usize, n,
        "every connection can query: {:?} {:?}",
        swept.errors, swept.first_failure
    );
    assert_eq!(conns.len(), n);
    // Server connections: each process's pool, not one per client.
    let threads: u64 = topo
        .primary()
        .sql("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = 'app'")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        threads <= 16,
        "at most 2 × 8 server connections, saw {threads}"
    );
    rt.block_on(async move {
        for c in conns {
            c.quit().await;
        }
    });
}
