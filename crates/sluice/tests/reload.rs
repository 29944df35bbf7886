//! Reloading the configuration of a running `sluice` process (SIGHUP and `sluice reload`)
//! while sysbench runs through it: the changes apply, bad files are refused whole with the
//! reason, and the clients see no error and no reconnect.
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::http::request;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

struct Files {
    path: std::path::PathBuf,
    primary: String,
    replicas: Vec<String>,
    port: u16,
    admin: u16,
    /// Extra TOML appended to every version of the file.
    extra: std::cell::RefCell<String>,
}

impl Files {
    /// The configuration with replica weights `w`, users `users` (name, password) and an
    /// optional extra rule.
    fn write(&self, w: [u32; 2], users: &[(&str, &str)], rule: Option<&str>) {
        self.write_servers(w, true, users, rule)
    }

    /// Like [`Files::write`]; without the second replica unless `second`.
    fn write_servers(&self, w: [u32; 2], second: bool, users: &[(&str, &str)], rule: Option<&str>) {
        let mut t = format!(
            "[proxy]\nlisten = \"127.0.0.1:{}\"\n\n[admin]\nlisten = \"127.0.0.1:{}\"\n\n[log]\nlevel = \"info\"\n\n[[servers]]\naddress = \"{}\"\nhostgroup = \"writer\"\n",
            self.port, self.admin, self.primary
        );
        for (r, w) in self.replicas.iter().zip(w).take(if second { 2 } else { 1 }) {
            t.push_str(&format!(
                "\n[[servers]]\naddress = \"{r}\"\nhostgroup = \"reader\"\nweight = {w}\n"
            ));
        }
        for (u, p) in users {
            t.push_str(&format!(
                "\n[[users]]\nname = \"{u}\"\npassword = \"{p}\"\n"
            ));
        }
        t.push_str(&self.extra.borrow());
        if let Some(r) = rule {
            t.push_str(&format!(
                "\n[[rules]]\nname = \"pin\"\nmatch = \"{r}\"\nhostgroup = \"writer\"\n"
            ));
        }
        std::fs::write(&self.path, t).unwrap();
    }
}

fn sluice_cmd(cfg: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .arg("--config")
        .arg(cfg)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn api(addr: SocketAddr, path: &str) -> serde_json::Value {
    let (status, body) = request(addr, "GET", path, None);
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap()
}

/// Connections to `server` lent out or being opened.
fn in_use(admin: SocketAddr, server: &str) -> u64 {
    api(admin, "/api/servers")
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["address"] == server)
        .unwrap()["pool_in_use"]
        .as_u64()
        .unwrap()
}

/// The `@@server_id` that answers a read through sluice (a new client each time).
fn read_server_id(port: u16) -> String {
    let out = common::cli_raw(port, "app", "app", Some("test"), "SELECT @@server_id", &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Reads through sluice until `id` answers one (bounded: the balancer picks it at random).
fn reads_reach(port: u16, id: &str) -> bool {
    (0..200).any(|_| read_server_id(port) == id)
}

/// Statements the proxy has sent to `server`.
fn queries(admin: SocketAddr, server: &str) -> u64 {
    api(admin, "/api/servers")
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["address"] == server)
        .unwrap()["queries"]
        .as_u64()
        .unwrap()
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(120); // a hang guard
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn reload_under_sysbench_load_without_client_errors() {
    let topo = sluice_testkit::Topology::start(sluice_testkit::TopologyOptions {
        replicas: 2,
        ..Default::default()
    })
    .expect("MariaDB topology");
    // A second application user, known to the servers but not yet to sluice.
    topo.primary()
        .sql("CREATE USER 'ops'@'%' IDENTIFIED BY 'ops'; GRANT ALL ON *.* TO 'ops'@'%'")
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let f = Files {
        path: dir.path().join("sluice.toml"),
        primary: topo.primary().addr(),
        replicas: topo.replicas().iter().map(|r| r.addr()).collect(),
        port: sluice_testkit::free_port().unwrap(),
        admin: sluice_testkit::free_port().unwrap(),
        extra: Default::default(),
    };
    let admin: SocketAddr = format!("127.0.0.1:{}", f.admin).parse().unwrap();
    f.write([1, 1], &[("app", "app")], None);
    let log = std::fs::File::create(dir.path().join("sluice.log")).unwrap();
    let mut sluice = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("--config")
        .arg(&f.path)
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    wait_until("sluice to listen", || {
        std::net::TcpStream::connect(admin).is_ok()
    });

    let port = f.port;
    let common = ["--tables=4", "--table-size=5000", "--rand-type=uniform"];
    common::sysbench(
        port,
        &[&["oltp_read_write"][..], &common, &["prepare"]].concat(),
    );
    // The autocommit run below reads (and prepares its SELECTs) on the replicas: they must
    // have the tables first.
    topo.sync_replicas(Duration::from_secs(30)).unwrap();
    let deadlocks = || -> u64 {
        topo.primary()
            .sql("SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'INNODB_DEADLOCKS'")
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let deadlocks_before = deadlocks();
    let bench = std::thread::spawn(move || {
        common::sysbench(
            port,
            &[
                &["oltp_read_write"][..],
                &common,
                // Autocommit, so that reads are spread over the replicas (and no
                // DELETE+INSERT pairs: outside a transaction two threads can collide on a key).
                &[
                    "--skip-trx=on",
                    "--delete_inserts=0",
                    "--threads=16",
                    "--time=20",
                    "--report-interval=0",
                    "run",
                ],
            ]
            .concat(),
        )
    });
    std::thread::sleep(Duration::from_secs(2));
    let r1 = f.replicas[0].clone();
    let id_of = |addr: &str| {
        topo.servers
            .iter()
            .find(|s| s.addr() == addr)
            .map(|s| s.server_id.to_string())
            .expect("a server of the topology")
    };
    let (r1_id, r2_id) = (id_of(&r1), id_of(&f.replicas[1]));

    // 1. SIGHUP: replica 1 to weight 0, a new user, a new rule.
    f.write(
        [0, 1],
        &[("app", "app"), ("ops", "ops")],
        Some("^SELECT 1234"),
    );
    let pid = sluice.id().to_string();
    assert!(Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .unwrap()
        .success());
    wait_until("the SIGHUP reload", || {
        api(admin, "/api/users").as_array().unwrap().len() == 2
    });
    let rules = api(admin, "/api/rules");
    assert_eq!(rules[0]["match"], "^SELECT 1234");
    // Replica 1 takes no new statements once those already on it are done; reads go to
    // replica 2.
    wait_until("replica 1's statements in flight to end", || {
        in_use(admin, &r1) == 0
    });
    let before = queries(admin, &r1);
    for _ in 0..20 {
        assert_eq!(read_server_id(port), r2_id, "reads go on, at replica 2");
    }
    assert_eq!(queries(admin, &r1), before, "weight 0: no new statements");
    // The new user logs in through sluice.
    let out = common::cli_raw(port, "ops", "ops", Some("test"), "SELECT 1234", &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(api(admin, "/api/rules")[0]["hits"], 1);

    // 2. `sluice reload`: weight back, the rule gone; the CLI lists what changed.
    f.write([2, 1], &[("app", "app"), ("ops", "ops")], None);
    let (ok, out, err) = sluice_cmd(&f.path, &["reload"]);
    assert!(ok, "{err}");
    assert!(out.contains(&format!("{r1}: weight 0 -> 2")), "{out}");
    assert!(out.contains("rules: 0 in force"), "{out}");
    assert!(reads_reach(port, &r1_id), "replica 1 takes reads again");

    // Replica 2 removed: it takes nothing more; added back, it serves again.
    let r2 = f.replicas[1].clone();
    f.write_servers([2, 1], false, &[("app", "app"), ("ops", "ops")], None);
    let (ok, out, err) = sluice_cmd(&f.path, &["reload"]);
    assert!(ok, "{err}");
    assert!(out.contains(&format!("{r2}: removed")), "{out}");
    assert_eq!(api(admin, "/api/servers").as_array().unwrap().len(), 2);
    for _ in 0..20 {
        assert_eq!(read_server_id(port), r1_id, "reads go on, at replica 1");
    }
    f.write([2, 1], &[("app", "app"), ("ops", "ops")], None);
    let (ok, out, err) = sluice_cmd(&f.path, &["reload"]);
    assert!(ok, "{err}");
    assert!(out.contains(&format!("{r2}: added")), "{out}");
    assert!(reads_reach(port, &r2_id), "replica 2 serves again");
    // The writer cannot be removed (here the file fails validation: no writer left).
    let primary_line = format!("address = \"{}\"\nhostgroup = \"writer\"\n", f.primary);
    let without_primary = std::fs::read_to_string(&f.path)
        .unwrap()
        .replace(&format!("\n[[servers]]\n{primary_line}"), "\n");
    std::fs::write(&f.path, without_primary).unwrap();
    let (ok, _, err) = sluice_cmd(&f.path, &["reload"]);
    assert!(!ok && err.contains("writer"), "{err}");

    // A listener pinned to the readers, added at runtime; removed, it stops accepting while
    // the session accepted on it carries on.
    let pinned = sluice_testkit::free_port().unwrap();
    *f.extra.borrow_mut() =
        format!("\n[[listeners]]\nlisten = \"127.0.0.1:{pinned}\"\nhostgroup = \"reader\"\n");
    f.write([2, 1], &[("app", "app"), ("ops", "ops")], None);
    let (ok, out, err) = sluice_cmd(&f.path, &["reload"]);
    assert!(ok, "{err}");
    assert!(
        out.contains(&format!("listener 127.0.0.1:{pinned} added")),
        "{out}"
    );
    let replica_ids: Vec<String> = topo
        .replicas()
        .iter()
        .map(|r| r.server_id.to_string())
        .collect();
    let long = std::thread::spawn(move || {
        common::cli_raw(
            pinned,
            "app",
            "app",
            Some("test"),
            "SELECT SLEEP(5), @@server_id",
            &[],
        )
    });
    // Remove the listener while the session accepted on it runs its statement.
    wait_until("the statement on the pinned listener to run", || {
        topo.replicas().iter().any(|r| {
            r.sql("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO = 'SELECT SLEEP(5), @@server_id'")
                .is_ok_and(|n| n.trim() == "1")
        })
    });
    f.extra.borrow_mut().clear();
    f.write([2, 1], &[("app", "app"), ("ops", "ops")], None);
    let (ok, out, err) = sluice_cmd(&f.path, &["reload"]);
    assert!(ok, "{err}");
    assert!(
        out.contains(&format!("listener 127.0.0.1:{pinned} removed")),
        "{out}"
    );
    let long = long.join().unwrap();
    assert!(
        long.status.success(),
        "{}",
        String::from_utf8_lossy(&long.stderr)
    );
    let sid = String::from_utf8_lossy(&long.stdout);
    let sid = sid.split_whitespace().last().unwrap_or("").to_string();
    assert!(replica_ids.contains(&sid), "served by a replica: {sid}");
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", pinned)).is_err(),
        "the removed listener no longer accepts"
    );

    // Monitor timings, credentials and lag limits change at runtime too; so do hostgroups:
    // a new one, with replica 2 in it and a rule sending statements there.
    *f.extra.borrow_mut() = format!(
        "\n[monitor]\nuser = \"monitor\"\npassword = \"monitor\"\ninterval = \"100ms\"\nmax_replication_lag = \"5s\"\n\n[[servers]]\naddress = \"{}\"\nhostgroup = \"analytics\"\n\n[[rules]]\nname = \"olap\"\nmatch = \"^SELECT 5678\"\nhostgroup = \"analytics\"\n",
        f.replicas[1]
    );
    f.write([2, 1], &[("app", "app"), ("ops", "ops")], None);
    let (ok, out, err) = sluice_cmd(&f.path, &["reload"]);
    assert!(ok, "{err}");
    assert!(out.contains("monitor and failover settings"), "{out}");
    assert!(out.contains("monitor credentials"), "{out}");
    assert!(
        out.contains(&format!("{r1}: max_replication_lag 5 s")),
        "{out}"
    );
    assert!(out.contains("hostgroup analytics: added"), "{out}");
    let out = common::cli_raw(
        port,
        "app",
        "app",
        Some("test"),
        "SELECT 5678, @@server_id",
        &[],
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("5678\t{r2_id}"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    f.extra.borrow_mut().clear();
    f.write([2, 1], &[("app", "app"), ("ops", "ops")], None);
    let (ok, out, err) = sluice_cmd(&f.path, &["reload"]);
    assert!(ok, "{err}");
    assert!(out.contains("hostgroup analytics: removed"), "{out}");

    // 3. A file that does not validate is refused whole, naming the field.
    std::fs::write(
        &f.path,
        std::fs::read_to_string(&f.path)
            .unwrap()
            .replace("weight = 1", "weight = -1"),
    )
    .unwrap();
    let (ok, _, err) = sluice_cmd(&f.path, &["reload"]);
    assert!(!ok, "an invalid file is refused");
    assert!(err.contains("weight"), "{err}");
    // A change that needs a restart is refused with the reason; nothing of it applies.
    f.write([5, 5], &[("app", "app")], None);
    let moved = std::fs::read_to_string(&f.path).unwrap().replace(
        &format!("127.0.0.1:{}\"\n\n[admin]", f.port),
        "127.0.0.1:1\"\n\n[admin]",
    );
    std::fs::write(&f.path, moved).unwrap();
    let (status, body) = request(admin, "POST", "/api/reload", None);
    assert_eq!(status, 409, "{body}");
    assert!(
        body.contains("[proxy]") && body.contains("restart"),
        "{body}"
    );
    let servers = api(admin, "/api/servers");
    let w = |addr: &str| {
        servers
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["address"] == addr)
            .unwrap()["weight"]
            .clone()
    };
    assert_eq!(w(&r1), 2, "the running configuration stays");
    assert_eq!(api(admin, "/api/users").as_array().unwrap().len(), 2);

    // 4. `sluice config dump` prints the running configuration.
    f.write([2, 1], &[("app", "app"), ("ops", "ops")], None);
    let (ok, dump, err) = sluice_cmd(&f.path, &["config", "dump"]);
    assert!(ok, "{err}");
    let dumped = sluice_config::Config::from_toml(&dump).expect("the dump is a valid config");
    assert_eq!(dumped.servers[1].weight, 2);
    assert_eq!(dumped.users.len(), 2);

    // The clients never noticed.
    let report = bench.join().unwrap();
    let transactions = common::sysbench_counter(&report, "transactions");
    assert!(transactions > 0, "{report}");
    assert_eq!(
        common::sysbench_counter(&report, "ignored errors"),
        deadlocks() - deadlocks_before,
        "errors other than InnoDB's own deadlocks:\n{report}"
    );
    assert_eq!(
        common::sysbench_counter(&report, "reconnects"),
        0,
        "{report}"
    );
    let _ = sluice.kill();
    let _ = sluice.wait();
}
