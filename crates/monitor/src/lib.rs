//! sluice's monitor: checks every server on its own schedule, decides what each one is
//! (primary, replica, fenced), keeps lagging or broken replicas out of the read pool, fails
//! over when the primary stops answering, fences and rejoins a returning old primary, and
//! performs switchovers on request.
//!
//! Everything protocol-specific (how to check a server, promote, repoint) is behind
//! [`agent::Agent`]; whether this instance may fail over is behind
//! [`coordinator::Coordinator`]. The monitor runs on a thread of its own ([`Monitor::start`])
//! so that client traffic cannot starve its checks.
//!
//! Failure handling has one rule: whatever the monitor changes on a server in a procedure
//! that then fails, it puts back (`journal.rs`), and what it cannot put back at once it keeps
//! retrying (`repair.rs`) — a failed failover leaves the cluster as it found it.
#![forbid(unsafe_code)]

pub mod agent;
mod backoff;
pub mod coordinator;
pub mod events;
mod failover;
mod health;
mod journal;
mod preflight;
mod repair;
mod roles;
mod starvation;
mod status;
mod switchover;
mod thread;

#[cfg(test)]
mod tests;

pub use status::{FailoverStep, MonitorStats, MonitorStatus, RepairView};

pub use agent::Agent;
use agent::{AgentError, Report};
use coordinator::Coordinator;
use events::Events;
use parking_lot::Mutex;
use sluice_config::Config;
use sluice_core::{Cluster, Observed, Role, Server};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Monitor and failover settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Time between checks.
    pub interval: Duration,
    /// Time allowed for one check.
    pub timeout: Duration,
    /// Consecutive failed checks after which a server takes no traffic.
    pub failure_threshold: u32,
    /// Fail over automatically.
    pub failover: bool,
    /// How long the primary must be unreachable before a failover.
    pub detection_time: Duration,
    /// How long statements wait for a writer during failover or switchover.
    pub write_wait: Duration,
    /// Relay-log application / catch-up limit.
    pub catchup_timeout: Duration,
    /// Switchover drain limit.
    pub drain_timeout: Duration,
    /// Rejoin a returning old primary when safe.
    pub rejoin: bool,
}

impl Settings {
    /// From the `[monitor]` and `[failover]` sections.
    pub fn from_config(cfg: &Config) -> Settings {
        Settings {
            interval: cfg.monitor.interval.get(),
            timeout: cfg.monitor.timeout.get(),
            failure_threshold: cfg.monitor.failure_threshold.max(1),
            failover: cfg.failover.enabled,
            detection_time: cfg.failover.detection_time.get(),
            write_wait: cfg.failover.write_wait.get(),
            catchup_timeout: cfg.failover.catchup_timeout.get(),
            drain_timeout: cfg.failover.drain_timeout.get(),
            rejoin: cfg.failover.rejoin,
        }
    }
}

/// What the monitor remembers about one server between checks.
#[derive(Default)]
struct View {
    /// The last conclusive check.
    last: Option<Result<Report, AgentError>>,
    /// Start of the current run of failed checks.
    first_fail: Option<Instant>,
    /// Failed checks in a row (checks that timed out while the monitor itself was starved do
    /// not count).
    failures: u32,
    /// Time-outs in a row not counted because the monitor was starved; after
    /// `failure_threshold` of them they count anyway (an overloaded machine must not hide a
    /// dead server for ever).
    inconclusive: u32,
    declared_failed: bool,
}

#[derive(Default)]
struct State {
    views: HashMap<Arc<str>, View>,
    /// The primary among managed servers: the one holding the role, or the one a failover
    /// must replace (it may be unreachable; it only has the primary *role* while reachable).
    primary: Option<Arc<Server>>,
    /// Failed failover attempts since the primary was last seen; the next one waits.
    failover: failover::Attempts,
    /// Servers the monitor changed and must still put back or move (restart replication,
    /// follow the primary, rejoin), with their retry schedule.
    repairs: repair::Repairs,
    /// Why failover cannot be carried out with the monitor's user (missing privileges), from
    /// the last check of its grants.
    preflight: preflight::Preflight,
    /// The standbys the primary last reported as synchronous ([`Report::synchronous`]),
    /// kept while it is down: only they may replace it.
    synchronous: Option<Vec<String>>,
}

/// The monitor.
pub struct Monitor {
    agent: Arc<dyn Agent>,
    cluster: Arc<dyn Cluster>,
    settings: parking_lot::Mutex<Settings>,
    coordinator: Arc<dyn Coordinator>,
    state: Mutex<State>,
    /// The managed server configured in the writer hostgroup, if any: the primary when the
    /// checks cannot tell (it is down at start).
    configured_primary: Option<Arc<Server>>,
    /// Serialises topology changes (failover, switchover, fencing, rejoin).
    changing: tokio::sync::Mutex<()>,
    /// What it did.
    pub events: Events,
    /// Counters.
    pub stats: MonitorStats,
}

impl Monitor {
    /// A monitor over `cluster`, reaching its servers through `agent`.
    pub fn new(
        agent: Arc<dyn Agent>,
        cluster: Arc<dyn Cluster>,
        settings: Settings,
        coordinator: Arc<dyn Coordinator>,
    ) -> Arc<Self> {
        let configured_primary = cluster.configured_primary();
        cluster.hold_writes(settings.write_wait);
        Arc::new(Monitor {
            agent,
            cluster,
            settings: parking_lot::Mutex::new(settings),
            coordinator,
            state: Mutex::new(State::default()),
            configured_primary,
            changing: tokio::sync::Mutex::new(()),
            events: Events::default(),
            stats: MonitorStats::default(),
        })
    }

    /// The settings in force.
    pub fn settings(&self) -> Settings {
        *self.settings.lock()
    }

    /// Replaces the settings (a reload): checks, detection and failover use them from the
    /// next round on; the monitor's privileges are checked again.
    pub fn set_settings(&self, s: Settings) {
        *self.settings.lock() = s;
        self.cluster.hold_writes(s.write_wait);
        self.state.lock().preflight.recheck_now();
    }

    /// Asks for the monitor user's privileges to be checked again at the next round (its
    /// credentials changed).
    pub fn recheck_privileges(&self) {
        self.state.lock().preflight.recheck_now();
    }

    /// The current primary, if known (it may be unreachable: see [`State::primary`]).
    pub fn primary(&self) -> Option<Arc<Server>> {
        self.state.lock().primary.clone()
    }

    /// The replicas the current primary reports (for discovery); an error if no primary
    /// is known or it does not answer.
    pub async fn reported_replicas(&self) -> Result<Vec<agent::ReportedReplica>, String> {
        let p = self.primary().ok_or("no primary is known")?;
        if !self.reachable(&p) {
            return Err(format!("the primary {} does not answer", p.name));
        }
        self.agent
            .reported_replicas(&p)
            .await
            .map_err(|e| format!("{}: {e}", p.name))
    }

    /// True if `server` (an address or name) is one of the servers it watches.
    pub fn has_server(&self, server: &str) -> bool {
        self.cluster
            .servers()
            .iter()
            .any(|s| *s.address == *server || *s.name == *server)
    }

    /// Records something `[[discovery]]` did, with the monitor's events.
    pub fn discovery_event(&self, what: String) {
        self.events.push("discovery", what);
    }

    /// Runs one round of checks and decisions (at start, before clients are accepted), and
    /// checks that the monitor's user can carry out what the configuration asks of it.
    pub async fn first_round(self: &Arc<Self>) {
        self.round().await;
    }

    async fn round(self: &Arc<Self>) {
        use std::sync::atomic::Ordering::Relaxed;
        self.stats.rounds.fetch_add(1, Relaxed);
        self.check_all(true).await;
        self.decide().await;
    }

    /// Checks every server once, concurrently, and records the results. `on_own_thread`: this
    /// runs on the monitor's thread, whose run-queue wait tells whether a time-out is the
    /// monitor's own starvation (elsewhere the task may move between threads).
    async fn check_all(&self, on_own_thread: bool) {
        let servers = self.cluster.servers().to_vec();
        let settings = self.settings();
        let started = Instant::now();
        let starvation = starvation::Meter::start();
        let checks = servers.iter().map(|s| {
            let s = s.clone();
            let agent = self.agent.clone();
            async move {
                let r = match tokio::time::timeout(settings.timeout, agent.probe(&s)).await {
                    Ok(r) => health::Outcome::Checked(r),
                    Err(_) => health::Outcome::TimedOut,
                };
                (s, r)
            }
        });
        let results = join_all(checks).await;
        let starved = starvation
            .starved(settings.timeout)
            .filter(|_| on_own_thread);
        for (s, r) in results {
            self.apply(&s, r, started, starved);
        }
    }

    /// Decides roles, failovers, fencing and rejoins from the latest checks.
    async fn decide(self: &Arc<Self>) {
        if !self.cluster.servers().iter().any(|s| s.managed) {
            return;
        }
        let Ok(_guard) = self.changing.try_lock() else {
            return; // a switchover is in progress; it places servers itself
        };
        if self.primary().is_none() {
            self.discover_primary();
        }
        if self.primary().is_none() {
            if let Some(p) = self.configured_primary.clone() {
                self.events.push(
                    "role",
                    format!(
                        "{} is the primary (as configured; the checks cannot tell)",
                        p.name
                    ),
                );
                self.set_primary(Some(p.clone()));
            }
        }
        self.preflight_if_due().await;
        self.place_primary();
        self.place_others().await;
        self.maybe_failover().await;
    }

    /// How long a server has been failing checks (conclusively).
    fn down_for(&self, s: &Server) -> Option<Duration> {
        let st = self.state.lock();
        st.views
            .get(&s.name)
            .and_then(|v| v.first_fail)
            .map(|t| t.elapsed())
    }

    /// The last complete check of a server (none if it failed or was limited).
    fn report(&self, s: &Server) -> Option<Report> {
        let st = self.state.lock();
        match st.views.get(&s.name).and_then(|v| v.last.as_ref()) {
            Some(Ok(r)) if r.limited.is_none() => Some(r.clone()),
            _ => None,
        }
    }

    /// True if the last conclusive check reached the server.
    fn reachable(&self, s: &Server) -> bool {
        let st = self.state.lock();
        matches!(
            st.views.get(&s.name).and_then(|v| v.last.as_ref()),
            Some(Ok(_))
        )
    }

    fn set_role(&self, s: &Arc<Server>, role: Role) {
        let mut o = s.observed();
        if o.role != role {
            self.events
                .push("role", format!("{} is now {}", s.name, role.as_str()));
        }
        o.role = role;
        s.set_observed(o);
        self.cluster.place(s, role);
    }

    fn set_primary(&self, s: Option<Arc<Server>>) {
        self.state.lock().primary = s;
    }
}

/// Runs futures concurrently and collects their outputs in order.
async fn join_all<F: std::future::Future>(futs: impl Iterator<Item = F>) -> Vec<F::Output> {
    futures_util::future::join_all(futs).await
}

/// Observed state, for callers that only need a copy.
pub fn observed(s: &Server) -> Observed {
    s.observed()
}
