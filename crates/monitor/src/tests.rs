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

#[tokio::test(start_paused = true)]
async fn failover_promotes_and_repoints() {
    let (m, agent) = cluster().await;
    agent.with(P, |f| f.up = false);
    m.round().await;
    m.round().await;
    let new = m.primary().expect("a primary");
    assert_ne!(&*new.address, P, "{}", events(&m));
    let other = if &*new.address == R1 { R2 } else { R1 };
    assert_eq!(role(&m, &new.address), Role::Primary);
    assert!(!agent.get(&new.address).read_only);
    replicating(&m, &agent, &[other], &new.address);
    assert_eq!(
        m.stats.failovers.load(std::sync::atomic::Ordering::Relaxed),
        1
    );
}

#[tokio::test(start_paused = true)]
async fn failed_promotion_is_undone_and_retried() {
    let (m, agent) = cluster().await;
    for r in [R1, R2] {
        agent.with(r, |f| f.denied.push("promote"));
    }
    agent.with(P, |f| f.up = false);
    m.round().await;
    m.round().await;
    let ev = events(&m);
    assert!(ev.contains("failed at step promote"), "{ev}");
    assert!(ev.contains("replication restarted on"), "{ev}");
    assert!(
        m.stats.failover_failures(FailoverStep::Promote) >= 1,
        "{ev}"
    );
    // As it was: both replicas follow the old primary again and serve reads; nobody is
    // fenced; the unreachable old primary is not given the primary role.
    replicating(&m, &agent, &[R1, R2], P);
    assert_ne!(role(&m, P), Role::Primary, "{ev}");
    assert_eq!(
        &*m.primary().expect("still the primary to replace").address,
        P
    );
    assert!(m.status().last_failover_error.is_some());
    // Fixed: the next attempt succeeds.
    for r in [R1, R2] {
        agent.with(r, |f| f.denied.clear());
    }
    for _ in 0..3 {
        m.round().await;
    }
    let new = m.primary().expect("a primary");
    assert_ne!(&*new.address, P, "{}", events(&m));
    assert!(m.status().last_failover_error.is_none());
}

#[tokio::test(start_paused = true)]
async fn candidate_dying_during_catch_up_hands_over_to_the_other() {
    let (m, agent) = cluster().await;
    let first = m.candidates(&server(&m, P))[0].0.address.to_string();
    let second = if first == R1 { R2 } else { R1 };
    agent.with(&first, |f| f.dies_in.push("catch_up"));
    agent.with(P, |f| f.up = false);
    m.round().await;
    m.round().await;
    let ev = events(&m);
    assert!(ev.contains("failed at step catch_up"), "{ev}");
    assert!(m.stats.failover_failures(FailoverStep::CatchUp) >= 1);
    // The other replica was stopped, then restarted.
    assert!(
        agent.log.lock().contains(&format!("resume {second}")),
        "{ev}"
    );
    for _ in 0..4 {
        m.round().await;
    }
    let new = m.primary().expect("a primary");
    assert_eq!(&*new.address, second, "{}", events(&m));
    assert!(!agent.get(second).read_only);
}

#[tokio::test(start_paused = true)]
async fn only_a_synchronous_standby_replaces_a_synchronous_primary() {
    let (m, agent) = cluster().await;
    // The best-ranked replica is not synchronous: the other one takes over, and the best
    // one follows it.
    let first = m.candidates(&server(&m, P))[0].0.address.to_string();
    let second = if first == R1 { R2 } else { R1 };
    agent.with(P, |f| f.synchronous = Some(vec![second.to_string()]));
    m.round().await;
    agent.with(P, |f| f.up = false);
    m.round().await;
    m.round().await;
    assert_eq!(
        &*m.primary().expect("promoted").address,
        second,
        "{}",
        events(&m)
    );
    assert!(agent
        .log
        .lock()
        .contains(&format!("replicate_from {first}")));

    // With no synchronous standby reachable, no failover at all.
    let (m, agent) = cluster().await;
    agent.with(P, |f| {
        f.synchronous = Some(vec!["10.0.0.9:3306".to_string()])
    });
    m.round().await;
    agent.with(P, |f| f.up = false);
    for _ in 0..3 {
        m.round().await;
    }
    assert_eq!(
        &*m.primary().expect("still the primary to replace").address,
        P
    );
    assert_eq!(agent.ops("promote"), 0);
    let ev = events(&m);
    assert!(ev.contains("none of its synchronous standbys"), "{ev}");
}

#[tokio::test(start_paused = true)]
async fn failed_repoint_is_retried_and_keeps_the_replica_out_of_reads() {
    let (m, agent) = cluster().await;
    let first = m.candidates(&server(&m, P))[0].0.address.to_string();
    let second = if first == R1 { R2 } else { R1 };
    agent.with(second, |f| f.denied.push("replicate_from"));
    agent.with(P, |f| f.up = false);
    m.round().await;
    m.round().await;
    assert_eq!(&*m.primary().expect("promoted").address, first);
    let s = server(&m, second);
    assert!(!s.is_usable(), "follows the dead primary: no reads");
    assert!(
        s.monitor_block()
            .unwrap_or_default()
            .contains("not from the primary"),
        "{:?}",
        s.state()
    );
    assert_eq!(m.status().repairs.len(), 1, "{:?}", m.status());
    agent.with(second, |f| f.denied.clear());
    // Retried with backoff (1 s at first).
    let deadline = Instant::now() + Duration::from_secs(10);
    while agent.get(second).replica.as_ref().map(|r| r.0.as_str()) != Some(first.as_str()) {
        assert!(
            Instant::now() < deadline,
            "repointed in time\n{}",
            events(&m)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        m.round().await;
    }
    m.round().await;
    replicating(&m, &agent, &[second], &first);
    assert!(m.status().repairs.is_empty(), "{:?}", m.status());
}

#[tokio::test(start_paused = true)]
async fn missing_privileges_refuse_failover_before_it_starts() {
    let (m, agent) = cluster().await;
    agent.missing.lock().insert(
        R1.into(),
        vec!["READ_ONLY ADMIN (SET GLOBAL read_only)".into()],
    );
    m.recheck_privileges();
    m.round().await;
    assert!(m.status().failover_refused.is_some(), "{:?}", m.status());
    agent.with(P, |f| f.up = false);
    m.round().await;
    m.round().await;
    assert_eq!(agent.ops("detach"), 0, "nothing stopped");
    assert!(events(&m).contains("refused"), "{}", events(&m));
    assert!(m.stats.failover_failures(FailoverStep::Refused) >= 1);
    replicating(&m, &agent, &[R1, R2], P);
    // Granted: the next attempt (after a fresh check) goes ahead.
    agent.missing.lock().clear();
    let deadline = Instant::now() + Duration::from_secs(20);
    while m.primary().is_some_and(|p| &*p.address == P) {
        assert!(
            Instant::now() < deadline,
            "failover after the grant\n{}",
            events(&m)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        m.round().await;
    }
}

#[tokio::test(start_paused = true)]
async fn one_failed_check_takes_nothing_out_of_service() {
    let (m, _agent) = cluster().await;
    let r = server(&m, R1);
    let fail = || Outcome::Checked(Err(AgentError::unreachable("connection refused")));
    m.apply(&r, fail(), Instant::now(), None);
    assert!(r.is_usable(), "one failure (threshold 2): {:?}", r.state());
    // A time-out while the monitor was starved does not count.
    m.apply(
        &r,
        Outcome::TimedOut,
        Instant::now(),
        Some(Duration::from_millis(300)),
    );
    assert!(r.is_usable(), "{:?}", r.state());
    assert_eq!(
        m.stats
            .starved_checks
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    m.apply(&r, fail(), Instant::now(), None);
    assert!(!r.is_usable(), "two failures in a row");
    assert!(r
        .monitor_block()
        .unwrap_or_default()
        .contains("unreachable (2 checks failed)"));
}

#[tokio::test(start_paused = true)]
async fn a_starved_monitor_does_not_hide_a_dead_server_for_ever() {
    let (m, _agent) = cluster().await;
    let r = server(&m, R1);
    let starved = Some(Duration::from_millis(300));
    // Up to the threshold (2), time-outs while starved are not counted.
    for _ in 0..2 {
        m.apply(&r, Outcome::TimedOut, Instant::now(), starved);
    }
    assert!(r.is_usable(), "{:?}", r.state());
    // Then they count, starved or not.
    m.apply(&r, Outcome::TimedOut, Instant::now(), starved);
    m.apply(&r, Outcome::TimedOut, Instant::now(), starved);
    assert!(!r.is_usable(), "{:?}", r.state());
}

/// A primary whose check times out once (a slow answer) leaves its position at its last
/// answer: a standby too many bytes behind that stays out of reads, and one that catches up
/// with it comes back.
#[tokio::test(start_paused = true)]
async fn a_slow_primary_check_keeps_a_lagging_standby_out_of_reads() {
    let (m, _agent) = cluster().await;
    let (p, r) = (server(&m, P), server(&m, R1));
    r.set_max_lag_bytes(Some(1_000));
    let report = |position: &str, replica: bool| Report {
        position: position.into(),
        read_only: replica,
        replica: replica.then(|| ReplicaStatus {
            source: P.into(),
            io_running: true,
            io_connected: true,
            sql_running: true,
            received: position.into(),
            ..ReplicaStatus::default()
        }),
        ..Report::default()
    };
    let now = Instant::now;
    m.apply(
        &p,
        Outcome::Checked(Ok(report("0-1-5000", false))),
        now(),
        None,
    );
    m.apply(
        &r,
        Outcome::Checked(Ok(report("0-1-10", true))),
        now(),
        None,
    );
    assert!(!r.is_usable(), "4,990 bytes behind: {:?}", r.state());
    m.apply(&p, Outcome::TimedOut, now(), None);
    m.apply(
        &r,
        Outcome::Checked(Ok(report("0-1-10", true))),
        now(),
        None,
    );
    assert!(
        !r.is_usable(),
        "still behind the primary's last known position: {:?}",
        r.state()
    );
    m.apply(
        &r,
        Outcome::Checked(Ok(report("0-1-4500", true))),
        now(),
        None,
    );
    assert!(r.is_usable(), "500 bytes behind it: {:?}", r.state());
}

/// The monitor's decisions as pure functions, table by table.
mod decisions {
    use crate::agent::ReplicaStatus;
    use crate::failover::{failover_due, rank_candidates};
    use crate::health::{bytes_verdict, replica_verdict, Following};
    use sluice_core::Server;
    use std::cmp::Ordering;
    use std::time::Duration;

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn failover_starts_only_for_a_primary_down_long_enough_when_allowed() {
        let detection = secs(5);
        // (reachable, down for, schedule due) -> fail over after
        let table = [
            (true, None, true, None),
            (true, Some(secs(60)), true, None),
            (false, None, true, None),
            (false, Some(secs(4)), true, None),
            (false, Some(secs(5)), true, Some(secs(5))),
            (false, Some(secs(60)), true, Some(secs(60))),
            (false, Some(secs(60)), false, None),
        ];
        for (reachable, down_for, due, want) in table {
            assert_eq!(
                failover_due(reachable, down_for, detection, due),
                want,
                "reachable={reachable} down_for={down_for:?} due={due}"
            );
        }
    }

    #[test]
    fn candidates_rank_by_what_they_received_then_by_lag() {
        // Positions compare as numbers here (a real agent compares GTIDs).
        let compare = |a: &str, b: &str| a.parse::<u64>().unwrap().cmp(&b.parse().unwrap());
        let mut c = vec![
            ("lagging", "100".to_string(), Some(secs(9))),
            ("behind", "90".to_string(), Some(secs(0))),
            ("unknown lag", "100".to_string(), None),
            ("best", "100".to_string(), Some(secs(1))),
            ("most", "101".to_string(), None),
        ];
        rank_candidates(&mut c, compare);
        let order: Vec<&str> = c.iter().map(|x| x.0).collect();
        assert_eq!(order, ["most", "best", "lagging", "unknown lag", "behind"]);
        let mut one = vec![("only", "1".to_string(), None)];
        rank_candidates(&mut one, |_, _| Ordering::Equal);
        assert_eq!(one[0].0, "only");
    }

    #[test]
    fn a_replica_takes_reads_only_while_it_follows_the_primary_and_keeps_up() {
        let primary = Server::new("10.0.0.1:3306", "writer", 1, 10);
        let healthy = ReplicaStatus {
            source: "10.0.0.1:3306".into(),
            io_running: true,
            io_connected: true,
            sql_running: true,
            lag: Some(secs(1)),
            received: "0-1-10".into(),
            error: None,
            name: String::new(),
        };
        let following = |up: bool, other: bool, ours: bool| Following {
            primary: Some(&primary),
            primary_up: up,
            follows_other: other,
            stopped_by_us: ours,
        };
        let max = Some(secs(5));
        assert_eq!(
            replica_verdict(&healthy, max, &following(true, false, false)),
            None
        );
        let lagging = ReplicaStatus {
            lag: Some(secs(6)),
            ..healthy.clone()
        };
        let v = replica_verdict(&lagging, max, &following(true, false, false));
        assert!(v.is_some_and(|v| v.contains("lag 6 s")));
        assert_eq!(
            replica_verdict(&lagging, None, &following(true, false, false)),
            None
        );
        let v = replica_verdict(&healthy, max, &following(true, true, false));
        assert!(v.is_some_and(|v| v.contains("not from the primary")));
        let broken = ReplicaStatus {
            sql_running: false,
            error: Some("duplicate key".into()),
            ..healthy.clone()
        };
        let v = replica_verdict(&broken, max, &following(true, false, false));
        assert!(v.is_some_and(|v| v.contains("replication broken")));
        // Stopped by the monitor itself while the primary is down: still serves reads.
        let stopped = ReplicaStatus {
            io_running: false,
            sql_running: false,
            ..healthy.clone()
        };
        assert_eq!(
            replica_verdict(&stopped, max, &following(false, false, true)),
            None
        );
        // Its receiver reconnecting to a dead primary: as fresh as any, keeps serving.
        let reconnecting = ReplicaStatus {
            io_connected: false,
            error: Some("can't connect".into()),
            ..healthy.clone()
        };
        assert_eq!(
            replica_verdict(&reconnecting, max, &following(false, false, false)),
            None
        );
        let v = replica_verdict(&reconnecting, max, &following(true, false, false));
        assert!(v.is_some_and(|v| v.contains("cannot connect")));
    }

    #[test]
    fn a_replica_too_many_wal_bytes_behind_takes_no_reads() {
        assert_eq!(bytes_verdict(Some(10), Some(10)), None);
        assert_eq!(bytes_verdict(Some(10), None), None);
        assert_eq!(bytes_verdict(None, Some(10)), None);
        assert_eq!(
            bytes_verdict(Some(11), Some(10)).as_deref(),
            Some("replication lag 11 bytes > 10 bytes")
        );
    }
}
