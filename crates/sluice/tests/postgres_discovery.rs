//! Replica discovery against a real PostgreSQL primary with two streaming standbys, the
//! configuration listing only the primary:
//!
//! 1. from the primary (`pg_stat_replication`, standbys named by `application_name`): both
//!    standbys join while pgbench runs select-only through sluice, take reads once the
//!    monitor checked them, one that stops streaming leaves, and comes back — pgbench sees
//!    no error;
//! 2. from an operator's command: what it prints joins; an address nothing answers at is
//!    listed as discovered but never takes traffic; output that is not `host:port` changes
//!    nothing; what it stops printing leaves;
//! 3. from DNS: `localhost:<port>` finds the standby there;
//! 4. from DNS SRV records (a DNS server in the test answers them): both standbys join, one
//!    whose record is withdrawn leaves.
//!
//! Waits are bounded at 60 s as hang guards only. The monitor checks every 100 ms but
//! allows a check 3 s and declares a server failed only after 60 s without an answer: the
//! test is about discovery, and on a busy machine a healthy standby's check can take more
//! than the default 500 ms (its pooled connections, pgbench's among them, would be closed).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod pg;

use pg::http::get_json;
use pg::wait_view;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// The servers the admin API lists: address → the whole view.
fn servers(admin: SocketAddr) -> Vec<serde_json::Value> {
    get_json(admin, "/api/servers").as_array().unwrap().clone()
}

fn listed(admin: SocketAddr, addr: &str) -> Option<serde_json::Value> {
    servers(admin).into_iter().find(|s| s["address"] == addr)
}

/// Waits until `ok` holds for the list of servers.
async fn wait_servers(admin: SocketAddr, what: &str, ok: impl Fn(&[serde_json::Value]) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let s = servers(admin);
        if ok(&s) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: still {s:#?}\n{}",
            get_json(admin, "/api/events")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A DNS server on 127.0.0.1 answering SRV queries for `name` with `records` (target name,
/// port) as they are at each query, and A queries for any name with 127.0.0.1.
async fn dns_server(
    name: &'static str,
    records: std::sync::Arc<std::sync::Mutex<Vec<(String, u16)>>>,
) -> SocketAddr {
    use hickory_proto::op::{Message, MessageType, ResponseCode};
    use hickory_proto::rr::rdata::{A, SRV};
    use hickory_proto::rr::{Name, RData, Record, RecordType};
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 4096];
        loop {
            let Ok((n, from)) = socket.recv_from(&mut buf).await else {
                return;
            };
            let Ok(query) = Message::from_vec(&buf[..n]) else {
                continue;
            };
            let mut answer = Message::response(query.metadata.id, query.metadata.op_code);
            answer.metadata.recursion_desired = query.metadata.recursion_desired;
            answer.metadata.recursion_available = true;
            answer.metadata.authoritative = true;
            answer.metadata.message_type = MessageType::Response;
            for q in &query.queries {
                answer.add_query(q.clone());
                let qname = q.name().to_ascii().trim_end_matches('.').to_string();
                match q.query_type() {
                    RecordType::SRV if qname == name => {
                        for (target, port) in records.lock().unwrap().iter() {
                            let rdata = RData::SRV(SRV::new(
                                0,
                                1,
                                *port,
                                Name::from_ascii(target).unwrap(),
                            ));
                            answer.add_answer(Record::from_rdata(q.name().clone(), 1, rdata));
                        }
                    }
                    RecordType::A => {
                        let rdata = RData::A(A(std::net::Ipv4Addr::LOCALHOST));
                        answer.add_answer(Record::from_rdata(q.name().clone(), 1, rdata));
                    }
                    _ => {}
                }
            }
            answer.metadata.response_code = ResponseCode::NoError;
            if let Ok(bytes) = answer.to_vec() {
                let _ = socket.send_to(&bytes, from).await;
            }
        }
    });
    addr
}

/// Starts sluice in process for `text`, with the admin API on a free port.
async fn sluice_with_admin(text: &str) -> (sluice_runtime::Running, sluice_admin::Admin) {
    let (process, running) = pg::start_sluice(text).await;
    let admin = sluice_admin::serve(
        &sluice_config::AdminConfig::new("127.0.0.1:0"),
        process,
        running.shutdown_signal(),
    )
    .await
    .unwrap();
    (running, admin)
}

/// Starts pgbench select-only through sluice on `port` for `secs` seconds.
fn pgbench(port: u16, secs: u32) -> tokio::task::JoinHandle<std::process::Output> {
    let bin = sluice_testkit::find_program("pgbench", "postgresql-client-15").unwrap();
    tokio::task::spawn_blocking(move || {
        std::process::Command::new(bin)
            .env("PGPASSWORD", "app")
            .args(["-n", "-S", "-c", "4", "-T", &secs.to_string()])
            .args([
                "-h",
                "127.0.0.1",
                "-U",
                "app",
                "-p",
                &port.to_string(),
                "postgres",
            ])
            .output()
            .unwrap()
    })
}

fn assert_no_errors(out: &std::process::Output) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("number of failed transactions: 0"),
        "pgbench saw errors:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_replicas_are_discovered_from_the_primary_a_command_and_dns() {
    // 1. From the primary. Only the primary is in the file.
    let env = pg::start_with(2, |topo| {
        let names: Vec<String> = topo
            .replicas()
            .iter()
            .map(|r| format!("pg{} = \"{}\"", r.port, r.addr()))
            .collect();
        format!(
            "[[listeners]]\nlisten = \"127.0.0.1:0\"\nprotocol = \"postgres\"\n\n[[users]]\nname = \"app\"\npassword = \"app\"\n\n[[servers]]\naddress = \"{}\"\nprotocol = \"postgres\"\n\n[monitor]\nuser = \"monitor\"\npassword = \"monitor\"\ninterval = \"100ms\"\ntimeout = \"3s\"\n\n[failover]\ndetection_time = \"60s\"\n\n[[discovery]]\nprotocol = \"postgres\"\nfrom_primary = true\ninterval = \"200ms\"\nnames = {{ {} }}\n",
            topo.primary().addr(),
            names.join(", ")
        )
    })
    .await;
    pg::pgbench_init(&env).await;
    let admin = env.admin().await;
    let a = admin.addr;
    let standbys: Vec<String> = env.topo.replicas().iter().map(|r| r.addr()).collect();
    let bench = pgbench(env.port, 12);
    for s in &standbys {
        wait_view(a, s, "discovered, checked and reading", |v| {
            v.1 == "replica" && v.2 == "ONLINE" && v.0 == "reader"
        })
        .await;
        let view = listed(a, s).unwrap();
        assert_eq!(view["discovered"], "postgres primary", "{view}");
    }
    // They serve reads (pgbench's, and reads of the test's own while pgbench may be over).
    let deadline = Instant::now() + Duration::from_secs(60);
    while standbys
        .iter()
        .any(|s| listed(a, s).unwrap()["queries"].as_u64().unwrap() == 0)
    {
        assert!(Instant::now() < deadline, "{:#?}", servers(a));
        let port = env.port;
        tokio::task::spawn_blocking(move || {
            pg::psql(port, "app", "app", "postgres", &["-c", "SELECT 1"])
        })
        .await
        .unwrap();
    }
    // The second one stops streaming: the primary no longer reports it, and it leaves.
    let second = &env.topo.replicas()[1];
    let conninfo = second.sql("SHOW primary_conninfo").unwrap();
    second
        .sql("ALTER SYSTEM SET primary_conninfo = ''")
        .unwrap();
    second.sql("SELECT pg_reload_conf()").unwrap();
    wait_servers(a, "the standby that stopped streaming leaves", |s| {
        !s.iter().any(|v| v["address"] == standbys[1])
    })
    .await;
    // It streams again: it is back.
    second
        .sql(&format!(
            "ALTER SYSTEM SET primary_conninfo = '{}'",
            conninfo.trim().replace('\'', "''")
        ))
        .unwrap();
    second.sql("SELECT pg_reload_conf()").unwrap();
    wait_view(a, &standbys[1], "rediscovered", |v| {
        v.1 == "replica" && v.2 == "ONLINE"
    })
    .await;
    assert_no_errors(&bench.await.unwrap());
    let events = get_json(a, "/api/events").to_string();
    assert!(events.contains("is gone (postgres primary)"), "{events}");
    drop(admin);

    // 2. From an operator's command, in a second sluice on the same servers.
    let list = env.topo.primary().dir().join("servers.txt");
    std::fs::write(&list, format!("# replicas\n{}\n127.0.0.1:1\n", standbys[0])).unwrap();
    let text = format!(
        "[[listeners]]\nlisten = \"127.0.0.1:0\"\nprotocol = \"postgres\"\n\n[[users]]\nname = \"app\"\npassword = \"app\"\n\n[[servers]]\naddress = \"{}\"\nprotocol = \"postgres\"\n\n[monitor]\nuser = \"monitor\"\npassword = \"monitor\"\ninterval = \"100ms\"\ntimeout = \"3s\"\n\n[failover]\ndetection_time = \"60s\"\n\n[[discovery]]\nprotocol = \"postgres\"\ncommand = \"cat {}\"\ninterval = \"200ms\"\n\n[[discovery]]\nprotocol = \"postgres\"\ndns = \"localhost:{}\"\ninterval = \"200ms\"\n",
        env.topo.primary().addr(),
        list.display(),
        env.topo.replicas()[1].port
    );
    let (running, admin) = sluice_with_admin(&text).await;
    let a = admin.addr;
    wait_view(a, &standbys[0], "found by the command", |v| {
        v.1 == "replica" && v.2 == "ONLINE"
    })
    .await;
    assert_eq!(
        listed(a, &standbys[0]).unwrap()["discovered"],
        format!("command cat {}", list.display())
    );
    // 3. DNS: the standby on the port `localhost` was given.
    wait_view(a, &standbys[1], "found by DNS", |v| {
        v.1 == "replica" && v.2 == "ONLINE"
    })
    .await;
    assert_eq!(
        listed(a, &standbys[1]).unwrap()["discovered"],
        format!("dns localhost:{}", env.topo.replicas()[1].port)
    );
    // Listed, but nothing answers there: discovered, never in a hostgroup (and so never
    // sent a statement).
    let dead = listed(a, "127.0.0.1:1").expect("the listed address is a discovered server");
    assert_eq!(dead["hostgroup"], "(unassigned)", "{dead}");
    assert_eq!(dead["reachable"], false, "{dead}");
    // Reads through this sluice reach the discovered standbys only.
    let port = running.addrs[0].port();
    for _ in 0..5 {
        let out = pg::psql(
            port,
            "app",
            "app",
            "postgres",
            &["-c", "SELECT pg_is_in_recovery()"],
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "t");
    }
    // Output that is not host:port: a failed look, nothing changes.
    replace_file(&list, "not an address\n");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !get_json(a, "/api/events")
        .to_string()
        .contains("not host:port")
    {
        assert!(Instant::now() < deadline, "{}", get_json(a, "/api/events"));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(listed(a, &standbys[0]).is_some());
    // It stops listing them: they leave.
    replace_file(&list, "");
    wait_servers(a, "what the command no longer lists leaves", |s| {
        !s.iter()
            .any(|v| v["address"] == standbys[0] || v["address"] == "127.0.0.1:1")
    })
    .await;
    drop(running);

    // 4. SRV records, from a DNS server of the test's.
    let records = std::sync::Arc::new(std::sync::Mutex::new(vec![
        (
            "first.replicas.test.".to_string(),
            env.topo.replicas()[0].port,
        ),
        (
            "second.replicas.test.".to_string(),
            env.topo.replicas()[1].port,
        ),
    ]));
    let ns = dns_server("_pg._tcp.replicas.test", records.clone()).await;
    let text = format!(
        "[[listeners]]\nlisten = \"127.0.0.1:0\"\nprotocol = \"postgres\"\n\n[[users]]\nname = \"app\"\npassword = \"app\"\n\n[[servers]]\naddress = \"{}\"\nprotocol = \"postgres\"\n\n[monitor]\nuser = \"monitor\"\npassword = \"monitor\"\ninterval = \"100ms\"\ntimeout = \"3s\"\n\n[failover]\ndetection_time = \"60s\"\n\n[[discovery]]\nprotocol = \"postgres\"\nsrv = \"_pg._tcp.replicas.test\"\nnameserver = \"{ns}\"\ninterval = \"200ms\"\n",
        env.topo.primary().addr(),
    );
    let (running, admin) = sluice_with_admin(&text).await;
    let a = admin.addr;
    for s in &standbys {
        wait_view(a, s, "found by SRV", |v| {
            v.1 == "replica" && v.2 == "ONLINE"
        })
        .await;
        assert_eq!(
            listed(a, s).unwrap()["discovered"],
            "srv _pg._tcp.replicas.test"
        );
    }
    records.lock().unwrap().pop();
    wait_servers(
        a,
        "the standby whose SRV record was withdrawn leaves",
        |s| !s.iter().any(|v| v["address"] == standbys[1]),
    )
    .await;
    assert!(listed(a, &standbys[0]).is_some());
    drop(running);
}

/// Replaces `path`'s content at once (a new file renamed over it): the discovery command
/// reading it meanwhile sees the old list or the new one, never a truncated file.
fn replace_file(path: &std::path::Path, text: &str) {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}
