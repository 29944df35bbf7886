//! Switchover on request, from the command line (through the admin API) and in-process,
//! under a steady read/write/transaction load: clients see no errors.
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::Managed;
use mysql_async::prelude::*;
use mysql_async::{Conn, Opts};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A client mixing autocommit writes, reads and small transactions until stopped.
fn client(
    url: String,
    id: u32,
    stop: Arc<AtomicBool>,
    errors: Arc<Mutex<Vec<String>>>,
    acked: Arc<Mutex<BTreeSet<u32>>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut c = Conn::new(Opts::from_url(&url).unwrap())
            .await
            .expect("client connects");
        let mut n = id * 1_000_000;
        let deadline = Instant::now() + Duration::from_secs(120);
        while !stop.load(Relaxed) && Instant::now() < deadline {
            n += 1;
            let r: Result<(), mysql_async::Error> = async {
                c.query_drop(format!("INSERT INTO w VALUES ({n}, @@server_id)"))
                    .await?;
                c.query_first::<u32, _>("SELECT COUNT(*) FROM w").await?;
                n += 1;
                c.query_drop("BEGIN").await?;
                c.query_drop(format!("INSERT INTO w VALUES ({n}, @@server_id)"))
                    .await?;
                c.query_first::<u32, _>(format!("SELECT sid FROM w WHERE id = {n}"))
                    .await?;
                c.query_drop("COMMIT").await?;
                Ok(())
            }
            .await;
            match r {
                Ok(()) => {
                    let mut a = acked.lock().unwrap();
                    a.insert(n - 1);
                    a.insert(n);
                }
                Err(e) => errors
                    .lock()
                    .unwrap()
                    .push(format!("client {id} row {n}: {e}")),
            }
        }
    })
}

/// Waits until the clients have had `more` further rows acknowledged (writes flow on the
/// current primary), however slow the machine.
async fn more_acked(acked: &Arc<Mutex<BTreeSet<u32>>>, more: usize) {
    let start = acked.lock().unwrap().len();
    common::wait_for(
        &format!("{more} more acknowledged rows"),
        Duration::from_secs(120),
        || acked.lock().unwrap().len() >= start + more,
    )
    .await;
}

/// Each server's GTID positions and binlog state (the last GTID of every domain and server
/// id in its binlog) and whom it replicates from, for a failure's message.
fn gtid_states(servers: &[sluice_testkit::MariaDb]) -> String {
    servers
        .iter()
        .map(|s| {
            let q = "SELECT CONCAT_WS(' | ', @@server_id, @@read_only, @@gtid_binlog_pos, \
                     @@gtid_slave_pos, @@gtid_current_pos, @@gtid_binlog_state)";
            format!(
                "{} (server_id | read_only | binlog_pos | slave_pos | current_pos | binlog_state): {}; source port {:?}",
                s.addr(),
                s.sql(q).unwrap_or_else(|e| e.to_string()),
                s.source_port()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn ids_on(server: &sluice_testkit::MariaDb) -> BTreeSet<u32> {
    server
        .sql("SELECT id FROM test.w")
        .unwrap()
        .lines()
        .filter_map(|l| l.parse().ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switchover_under_load_without_client_errors() {
    let env = common::start_managed(Managed {
        replicas: 2,
        failover: true,
        ..Default::default()
    })
    .await;
    let admin = env.admin(Some("s3cret")).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg_path = dir.path().join("sluice.toml");
    let cfg = common::managed_config(
        &env.topo,
        true,
        "",
        &format!("[admin]\nlisten = \"{}\"\ntoken = \"s3cret\"\n", admin.addr),
    );
    std::fs::write(&cfg_path, cfg).unwrap();

    let mut c = Conn::new(Opts::from_url(&env.url("test")).unwrap())
        .await
        .unwrap();
    c.query_drop("CREATE TABLE w (id INT PRIMARY KEY, sid INT)")
        .await
        .unwrap();
    env.sync(); // the clients read from the replicas
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(Mutex::new(Vec::new()));
    let acked = Arc::new(Mutex::new(BTreeSet::new()));
    let tasks: Vec<_> = (1..=4)
        .map(|i| {
            client(
                env.url("test"),
                i,
                stop.clone(),
                errors.clone(),
                acked.clone(),
            )
        })
        .collect();
    more_acked(&acked, 10).await;

    // From the command line, to server 2 (server_id 3).
    let target = env.topo.servers[2].addr();
    let bin = env!("CARGO_BIN_EXE_sluice");
    let args: Vec<String> = vec![
        "switchover".into(),
        "--config".into(),
        cfg_path.display().to_string(),
        "--to".into(),
        target,
    ];
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(bin).args(args).output().unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "sluice switchover failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("complete"), "{stdout}");
    eprintln!("{stdout}");
    assert_eq!(env.primary_index(), Some(2), "{}", env.events());
    more_acked(&acked, 10).await;

    // And back, in-process, to server 0.
    let back = env
        .monitor()
        .switchover(Some(&env.topo.servers[0].addr()))
        .await;
    assert!(back.is_ok(), "{back:?}\n{}", env.events());
    more_acked(&acked, 10).await;
    stop.store(true, Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    let errors = errors.lock().unwrap().clone();
    assert!(
        errors.is_empty(),
        "clients saw errors during switchovers: {errors:#?}\n{}",
        env.events()
    );
    assert_eq!(env.primary_index(), Some(0));
    assert_eq!(env.monitor().stats.switchovers.load(Relaxed), 2);

    // Roles on the servers themselves.
    if let Err(e) = env.topo.sync_replicas(Duration::from_secs(30)) {
        // Everything needed to tell which server wrote what, and when the monitor acted.
        panic!("{e}\n{}\n{}", gtid_states(&env.topo.servers), env.events());
    }
    let p = &env.topo.servers[0];
    assert_eq!(p.sql("SELECT @@read_only").unwrap(), "0");
    assert_eq!(p.source_port().unwrap(), None);
    for r in &env.topo.servers[1..] {
        assert_eq!(r.sql("SELECT @@read_only").unwrap(), "1");
        assert_eq!(r.source_port().unwrap(), Some(p.port));
    }
    // Every acknowledged row is on the primary; writes happened on both primaries.
    let on_primary = ids_on(p);
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() > 20);
    let lost: Vec<_> = acked.difference(&on_primary).collect();
    assert!(lost.is_empty(), "rows lost: {lost:?}");
    let sids = p
        .sql("SELECT DISTINCT sid FROM test.w ORDER BY sid")
        .unwrap();
    assert_eq!(
        sids, "1\n3",
        "writes went to server 1, then 3, then 1 again"
    );

    // Refusals are clear and change nothing.
    let bad = env
        .monitor()
        .switchover(Some("127.0.0.1:1"))
        .await
        .unwrap_err();
    assert!(bad.contains("not a reachable replica"), "{bad}");
    assert_eq!(env.primary_index(), Some(0));

    // The admin API requires its token.
    let addr = admin.addr;
    let (status, body) = tokio::task::spawn_blocking(move || {
        common::http::request(addr, "GET", "/api/servers", None)
    })
    .await
    .unwrap();
    assert_eq!(status, 401, "{body}");
}
