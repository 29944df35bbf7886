//! Replica discovery from a MariaDB primary (`SHOW REPLICA HOSTS`, the replicas started with
//! `report_host`/`report_port`): with only the primary in the file, both replicas join, are
//! checked and take reads; one whose replication stops leaves, and comes back when it
//! replicates again. Waits are bounded at 60 s as hang guards only.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::http::get_json;
use common::Env;
use sluice_testkit::TopologyOptions;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

fn listed(admin: SocketAddr, addr: &str) -> Option<serde_json::Value> {
    get_json(admin, "/api/servers")
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["address"] == addr)
        .cloned()
}

/// Waits until `ok` holds for the view of `addr` (`None`: not listed).
async fn wait(
    admin: SocketAddr,
    addr: &str,
    what: &str,
    ok: impl Fn(Option<&serde_json::Value>) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let v = listed(admin, addr);
        if ok(v.as_ref()) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{addr}: {what}; still {v:?}\n{}",
            get_json(admin, "/api/events")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_replicas_are_discovered_from_the_primary() {
    let topo = common::topology(TopologyOptions {
        replicas: 2,
        ..Default::default()
    })
    .await;
    let text = format!(
        "[proxy]\nlisten = \"127.0.0.1:0\"\n[monitor]\nuser = \"monitor\"\npassword = \"monitor\"\ninterval = \"100ms\"\n[[users]]\nname = \"app\"\npassword = \"app\"\n[[servers]]\naddress = \"{}\"\n[[discovery]]\nfrom_primary = true\ninterval = \"200ms\"\n",
        topo.primary().addr()
    );
    let (proxy, running) = common::start_proxy(&text).await;
    let port = running.addrs[0].port();
    let env = Env {
        topo,
        proxy,
        running,
        port,
        extra_ports: Vec::new(),
    };
    let admin = env.admin(None).await;
    let a = admin.addr;
    let replicas: Vec<String> = env.topo.servers[1..].iter().map(|s| s.addr()).collect();
    for r in &replicas {
        wait(a, r, "discovered, checked, reading", |v| {
            v.is_some_and(|v| {
                v["role"] == "replica"
                    && v["state"] == "ONLINE"
                    && v["hostgroup"] == "reader"
                    && v["discovered"] == "mysql primary"
            })
        })
        .await;
    }
    // Reads reach them.
    let url = env.url("mysql");
    let mut c = mysql_async::Conn::new(mysql_async::Opts::from_url(&url).unwrap())
        .await
        .unwrap();
    use mysql_async::prelude::*;
    let mut ports = std::collections::BTreeSet::new();
    for _ in 0..30 {
        let p: u16 = c.query_first("SELECT @@port").await.unwrap().unwrap();
        ports.insert(p.to_string());
    }
    assert!(
        replicas
            .iter()
            .any(|r| ports.contains(r.rsplit_once(':').unwrap().1)),
        "reads went to {ports:?}"
    );
    drop(c);
    // One stops replicating: the primary no longer reports it; it leaves, then returns.
    // (The primary forgets a replica when its binlog dump thread ends, which it notices when
    // it next sends something: writes follow.)
    env.topo.servers[2].sql("STOP SLAVE").unwrap();
    let primary = &env.topo.servers[0];
    primary
        .sql("CREATE DATABASE IF NOT EXISTS disc; CREATE TABLE IF NOT EXISTS disc.t (x int)")
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while listed(a, &replicas[1]).is_some() {
        assert!(Instant::now() < deadline, "{} still listed", replicas[1]);
        primary.sql("INSERT INTO disc.t VALUES (1)").unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    env.topo.servers[2].sql("START SLAVE").unwrap();
    wait(a, &replicas[1], "back once it replicates again", |v| {
        v.is_some_and(|v| v["role"] == "replica" && v["state"] == "ONLINE")
    })
    .await;
}
