//! The monitor's decisions against a fake agent: what a failover does when each of its
//! steps fails, what a failed check does to a server's traffic. (The integration tests in
//! `crates/sluice/tests` do the same against real MariaDB servers.)

use crate::agent::{Agent, AgentError, AgentResult, BoxFuture, ReplicaStatus, Report, Threads};
use crate::coordinator::Local;
use crate::health::Outcome;
use crate::{FailoverStep, Monitor, Settings};
use parking_lot::Mutex;
use sluice_config::Config;
use sluice_core::{Role, Server, Topology};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// One fake server.
#[derive(Clone, Debug)]
struct Fake {
    up: bool,
    read_only: bool,
    /// Replication: (source address, running).
    replica: Option<(String, bool)>,
    /// Operations that fail with a privilege error.
    denied: Vec<&'static str>,
    /// Operations that fail because the server dies during them.
    dies_in: Vec<&'static str>,
    /// A primary whose commits wait for these replicas (by address).
    synchronous: Option<Vec<String>>,
}

impl Fake {
    fn primary() -> Fake {
        Fake {
            up: true,
            read_only: false,
            replica: None,
            denied: vec![],
            dies_in: vec![],
            synchronous: None,
        }
    }
    fn replica_of(source: &str) -> Fake {
        Fake {
            up: true,
            read_only: true,
            replica: Some((source.to_string(), true)),
            denied: vec![],
            dies_in: vec![],
            synchronous: None,
        }
    }
}

#[derive(Default)]
struct FakeAgent {
    servers: Mutex<HashMap<String, Fake>>,
    /// Operations carried out, in order: `op address`.
    log: Mutex<Vec<String>>,
    /// Privileges the monitor's user lacks, per server.
    missing: Mutex<HashMap<String, Vec<String>>>,
}

impl FakeAgent {
    fn with(&self, addr: &str, f: impl FnOnce(&mut Fake)) {
        f(self.servers.lock().get_mut(addr).expect("fake server"))
    }
    fn get(&self, addr: &str) -> Fake {
        self.servers.lock()[addr].clone()
    }
    fn ops(&self, op: &str) -> usize {
        self.log
            .lock()
            .iter()
            .filter(|l| l.starts_with(&format!("{op} ")))
            .count()
    }
    /// Runs `op` on `addr`: the server must be up, the op allowed; then `change` applies.
    fn op(&self, op: &'static str, addr: &str, change: impl FnOnce(&mut Fake)) -> AgentResult<()> {
        self.log.lock().push(format!("{op} {addr}"));
        let mut servers = self.servers.lock();
        let f = servers.get_mut(addr).expect("fake server");
        if !f.up {
            return Err(AgentError::unreachable(format!(
                "{addr}: connection refused"
            )));
        }
        if f.dies_in.contains(&op) {
            f.up = false;
            return Err(AgentError::unreachable(format!("{addr}: lost connection")));
        }
        if f.denied.contains(&op) {
            return Err(AgentError::denied(format!(
                "{op}: Access denied; you need (at least one of) the READ_ONLY ADMIN privilege(s) for this operation (1227)"
            )));
        }
        change(f);
        Ok(())
    }
}

impl Agent for FakeAgent {
    fn probe<'a>(&'a self, server: &'a Server) -> BoxFuture<'a, AgentResult<Report>> {
        let f = self.get(&server.address);
        Box::pin(async move {
            if !f.up {
                return Err(AgentError::unreachable("connection refused"));
            }
            Ok(Report {
                read_only: f.read_only,
                replica: f.replica.map(|(source, running)| ReplicaStatus {
                    source,
                    io_running: running,
                    io_connected: false,
                    sql_running: running,
                    lag: None,
                    received: "0-1-10".into(),
                    error: None,
                    name: server.address.to_string(),
                }),
                position: "0-1-10".into(),
                synchronous: f.synchronous,
                ..Report::default()
            })
        })
    }
    fn compare(&self, _a: &str, _b: &str) -> std::cmp::Ordering {
        std::cmp::Ordering::Equal
    }
    /// Positions end in a byte count (`0-1-10`): how far `behind` is, as PostgreSQL counts.
    fn distance(&self, ahead: &str, behind: &str) -> Option<u64> {
        let bytes = |p: &str| p.rsplit('-').next()?.parse::<u64>().ok();
        Some(bytes(ahead)?.saturating_sub(bytes(behind)?))
    }
    fn catch_up<'a>(
        &'a self,
        s: &'a Server,
        _p: &'a str,
        _t: Duration,
    ) -> BoxFuture<'a, AgentResult<()>> {
        Box::pin(async move { self.op("catch_up", &s.address, |_| {}) })
    }
    fn detach<'a>(
        &'a self,
        s: &'a Server,
        _failed: bool,
        _which: Threads,
    ) -> BoxFuture<'a, AgentResult<()>> {
        Box::pin(async move {
            self.op("detach", &s.address, |f| {
                if let Some(r) = &mut f.replica {
                    r.1 = false;
                }
            })
        })
    }
    fn resume<'a>(&'a self, s: &'a Server, _which: Threads) -> BoxFuture<'a, AgentResult<()>> {
        Box::pin(async move {
            self.op("resume", &s.address, |f| {
                if let Some(r) = &mut f.replica {
                    r.1 = true;
                }
            })
        })
    }
    fn promote<'a>(&'a self, s: &'a Server) -> BoxFuture<'a, AgentResult<()>> {
        Box::pin(async move {
            self.op("promote", &s.address, |f| {
                f.read_only = false;
                f.replica = None;
            })
        })
    }
    fn replicate_from<'a>(
        &'a self,
        r: &'a Server,
        p: &'a Server,
        _fresh: bool,
    ) -> BoxFuture<'a, AgentResult<()>> {
        let source = p.address.to_string();
        Box::pin(async move {
            self.op("replicate_from", &r.address, |f| {
                f.read_only = true;
                f.replica = Some((source, true));
            })
        })
    }
    fn set_read_only<'a>(&'a self, s: &'a Server, on: bool) -> BoxFuture<'a, AgentResult<()>> {
        Box::pin(async move { self.op("set_read_only", &s.address, |f| f.read_only = on) })
    }
    fn errant<'a>(
        &'a self,
        _s: &'a Server,
        _p: &'a Server,
    ) -> BoxFuture<'a, AgentResult<Option<String>>> {
        Box::pin(async { Ok(None) })
    }
    fn write_position<'a>(&'a self, _s: &'a Server) -> BoxFuture<'a, AgentResult<String>> {
        Box::pin(async { Ok("0-1-10".into()) })
    }
    fn missing_privileges<'a>(&'a self, s: &'a Server) -> BoxFuture<'a, AgentResult<Vec<String>>> {
        let m = self
            .missing
            .lock()
            .get(&*s.address)
            .cloned()
            .unwrap_or_default();
        Box::pin(async move { Ok(m) })
    }
}

const P: &str = "10.0.0.1:3306";
const R1: &str = "10.0.0.2:3306";
const R2: &str = "10.0.0.3:3306";

type TestMonitor = Monitor;

/// A primary and two replicas, the monitor over them with failover on and no waiting.
async fn cluster() -> (Arc<TestMonitor>, Arc<FakeAgent>) {
    let cfg = Config::from_toml(&format!(
        "[proxy]\nlisten = \"127.0.0.1:0\"\n[[users]]\nname = \"app\"\npassword = \"app\"\n\
         [[servers]]\naddress = \"{P}\"\n[[servers]]\naddress = \"{R1}\"\n[[servers]]\naddress = \"{R2}\"\n"
    ))
    .expect("config");
    let agent = Arc::new(FakeAgent::default());
    {
        let mut s = agent.servers.lock();
        s.insert(P.into(), Fake::primary());
        s.insert(R1.into(), Fake::replica_of(P));
        s.insert(R2.into(), Fake::replica_of(P));
    }
    let topology: Arc<Topology<()>> = Arc::new(Topology::from_config(&cfg));
    let settings = Settings {
        interval: Duration::from_millis(10),
        timeout: Duration::from_millis(500),
        failure_threshold: 2,
        failover: true,
        detection_time: Duration::ZERO,
        write_wait: Duration::from_millis(10),
        catchup_timeout: Duration::from_secs(1),
        drain_timeout: Duration::from_secs(1),
        rejoin: true,
    };
    let m = Monitor::new(agent.clone(), topology, settings, Arc::new(Local));
    m.first_round().await;
    assert_eq!(role(&m, P), Role::Primary, "{}", events(&m));
    assert_eq!(role(&m, R1), Role::Replica);
    assert_eq!(role(&m, R2), Role::Replica);
    (m, agent)
}

fn server(m: &TestMonitor, addr: &str) -> Arc<Server> {
    m.cluster
        .servers()
        .iter()
        .find(|s| *s.address == *addr)
        .cloned()
        .expect("server")
}

fn role(m: &TestMonitor, addr: &str) -> Role {
    server(m, addr).observed().role
}

fn events(m: &TestMonitor) -> String {
    m.events
        .all()
        .iter()
        .map(|e| format!("[{}] {}", e.kind, e.message))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The replicas replicate from `source`, running, read-only, and take reads.
fn replicating(m: &TestMonitor, agent: &FakeAgent, replicas: &[&str], source: &str) {
    for r in replicas {
        let f = agent.get(r);
        assert_eq!(
            f.replica,
            Some((source.to_string(), true)),
            "{r}\n{}",
            events(m)
        );
        assert!(f.read_only, "{r} read-only");
        assert_eq!(role(m, r), Role::Replica, "{r} is a replica\n{}", events(m));
        assert!(
            server(m, r).is_usable(),
            "{r} takes reads: {:?}",
            server(m, r).state()
        );
    }
}

mod decisions;
mod failover;
mod health;
