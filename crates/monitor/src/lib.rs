//! sluice's monitor: checks every server on its own schedule, decides what each one is
//! (primary, replica, fenced), keeps lagging or broken replicas out of the read pool, fails
//! over when the primary stops answering, fences and rejoins a returning old primary, and
//! performs switchovers on request.
//!
//! Everything protocol-specific (how to check a server, promote, repoint) is behind
//! [`agent::Agent`]; whether this instance may fail over is behind
//! [`coordinator::Coordinator`].
#![forbid(unsafe_code)]

pub mod agent;
pub mod coordinator;
pub mod events;
mod failover;
mod roles;
mod switchover;

use agent::{Agent, Report};
use coordinator::Coordinator;
use events::Events;
use parking_lot::Mutex;
use sluice_config::Config;
use sluice_core::{Observed, Role, Server, Topology};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Monitor and failover settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Time between checks.
    pub interval: Duration,
    /// Time allowed for one check.
    pub timeout: Duration,
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
            failover: cfg.failover.enabled,
            detection_time: cfg.failover.detection_time.get(),
            write_wait: cfg.failover.write_wait.get(),
            catchup_timeout: cfg.failover.catchup_timeout.get(),
            drain_timeout: cfg.failover.drain_timeout.get(),
            rejoin: cfg.failover.rejoin,
        }
    }
}

/// Counters.
#[derive(Debug, Default)]
pub struct MonitorStats {
    /// Failovers completed.
    pub failovers: AtomicU64,
    /// Switchovers completed.
    pub switchovers: AtomicU64,
    /// Duration of the last failover, from the decision to writes flowing again, in ms.
    pub last_failover_ms: AtomicU64,
    /// Check rounds run.
    pub rounds: AtomicU64,
}

/// What the monitor remembers about one server between checks.
#[derive(Default)]
struct View {
    last: Option<Result<Report, String>>,
    last_ok: Option<Instant>,
    first_fail: Option<Instant>,
    declared_failed: bool,
}

#[derive(Default)]
struct State {
    views: HashMap<Arc<str>, View>,
    /// The current primary among managed servers.
    primary: Option<Arc<Server>>,
    /// A failover attempt failed: no new attempt before this.
    retry_failover_at: Option<Instant>,
}

/// The monitor.
pub struct Monitor<A, C> {
    agent: Arc<A>,
    topology: Arc<Topology<C>>,
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

/// With servers the monitor places, statements wait up to `write_wait` for a writer while it
/// is replaced (failover, switchover) instead of failing at once.
fn hold_writes<C>(topology: &Topology<C>, write_wait: Duration) {
    if topology.all().iter().any(|s| s.managed) {
        if let Some(w) = topology.writer() {
            w.set_hold_when_empty(Some(write_wait));
        }
    }
}

impl<A: Agent, C: Send + 'static> Monitor<A, C> {
    /// A monitor over `topology`.
    pub fn new(
        agent: Arc<A>,
        topology: Arc<Topology<C>>,
        settings: Settings,
        coordinator: Arc<dyn Coordinator>,
    ) -> Arc<Self> {
        let configured_primary = topology.primary();
        hold_writes(&topology, settings.write_wait);
        Arc::new(Monitor {
            agent,
            topology,
            settings: parking_lot::Mutex::new(settings),
            coordinator,
            state: Mutex::new(State::default()),
            configured_primary,
            changing: tokio::sync::Mutex::new(()),
            events: Events::default(),
            stats: MonitorStats::default(),
        })
    }

    /// The agent that talks to the servers.
    pub fn agent(&self) -> &Arc<A> {
        &self.agent
    }

    /// The settings in force.
    pub fn settings(&self) -> Settings {
        *self.settings.lock()
    }

    /// Replaces the settings (a reload): checks, detection and failover use them from the
    /// next round on.
    pub fn set_settings(&self, s: Settings) {
        *self.settings.lock() = s;
        hold_writes(&self.topology, s.write_wait);
    }

    /// The current primary, if known.
    pub fn primary(&self) -> Option<Arc<Server>> {
        self.state.lock().primary.clone()
    }

    /// Runs one round of checks and decisions (at start, before clients are accepted).
    pub async fn first_round(self: &Arc<Self>) {
        self.round().await;
        if self.settings().failover || self.settings().rejoin {
            self.check_privileges().await;
        }
    }

    /// Warns, once at start, if the monitor's user could not carry out a failover.
    async fn check_privileges(&self) {
        let Some(s) = self.primary().or_else(|| {
            self.topology
                .all()
                .iter()
                .find(|s| s.managed && self.reachable(s))
                .cloned()
        }) else {
            return;
        };
        match self.agent.missing_privileges(&s).await {
            Ok(missing) if missing.is_empty() => {}
            Ok(missing) => {
                tracing::warn!(server = %s.name, "the monitor's user lacks privileges: failover, switchover or rejoin will fail: {}", missing.join(", "));
                self.events.push(
                    "config",
                    format!(
                        "the monitor's user lacks privileges on {}: {}",
                        s.name,
                        missing.join(", ")
                    ),
                );
            }
            Err(e) => tracing::debug!(error = %e, "cannot read the monitor's grants"),
        }
    }

    /// Checks and decides every `interval` until `shutdown` turns true.
    pub async fn run(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let mut every = self.settings().interval;
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.changed() => return,
            }
            self.round().await;
            if self.settings().interval != every {
                every = self.settings().interval;
                tick = tokio::time::interval(every);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                tick.tick().await;
            }
        }
    }

    async fn round(self: &Arc<Self>) {
        self.stats.rounds.fetch_add(1, Relaxed);
        let servers = self.topology.servers();
        let started = Instant::now();
        let checks = servers.iter().map(|s| {
            let s = s.clone();
            let agent = self.agent.clone();
            let timeout = self.settings().timeout;
            async move {
                let r = match tokio::time::timeout(timeout, agent.probe(&s)).await {
                    Ok(r) => r,
                    Err(_) => Err(format!("no answer within {} ms", timeout.as_millis())),
                };
                (s, r)
            }
        });
        let results = join_all(checks).await;
        for (s, r) in results {
            self.apply(&s, r, started);
        }
        self.decide().await;
    }

    /// Records a check's result: the server's observed state and whether it may take traffic.
    /// A failed check counts from when it started (a hung server is silent from then on).
    fn apply(&self, s: &Arc<Server>, r: Result<Report, String>, started: Instant) {
        let now = Instant::now();
        let mut st = self.state.lock();
        let primary = st.primary.clone();
        let primary_up = primary.as_ref().is_some_and(|p| {
            matches!(
                st.views.get(&p.name).and_then(|v| v.last.as_ref()),
                Some(Ok(_))
            )
        });
        let v = st.views.entry(s.name.clone()).or_default();
        let mut o = s.observed();
        o.checked = Some(now);
        match &r {
            Ok(rep) => {
                v.last_ok = Some(now);
                v.first_fail = None;
                v.declared_failed = false;
                o.reachable = true;
                o.rtt = Some(rep.rtt);
                o.read_only = Some(rep.read_only);
                o.position = rep.position.clone();
                o.source = rep.replica.as_ref().map(|r| r.source.clone());
                o.replication_running = rep.replica.as_ref().map(|r| r.io_running && r.sql_running);
                o.lag = rep.replica.as_ref().and_then(|r| r.lag);
                if !s.managed {
                    // Servers with a configured hostgroup: their role is only shown (the
                    // monitor decides nothing from it).
                    o.role = if rep.replica.is_some() {
                        Role::Replica
                    } else if !rep.read_only {
                        Role::Primary
                    } else {
                        Role::Unknown
                    };
                }
                o.error = rep
                    .limited
                    .clone()
                    .or_else(|| rep.replica.as_ref().and_then(|r| r.error.clone()));
                // Is it fit for traffic? Replicas: applying, not stopped, not too far behind.
                // (The receiving thread only *connecting* — its source is down — still serves
                // reads: during a failover replicas keep answering.)
                let source_up = primary_up
                    && rep
                        .replica
                        .as_ref()
                        .zip(primary.as_ref())
                        .is_some_and(|(rs, p)| agent::same_endpoint(&rs.source, &p.address));
                let verdict = match &rep.replica {
                    Some(rs) if !rs.io_connected && source_up && rs.error.is_some() => {
                        Some(format!(
                            "replication cannot connect to its source {}: {}",
                            rs.source,
                            rs.error.as_deref().unwrap_or_default()
                        ))
                    }
                    Some(rs) if !rs.sql_running || !rs.io_running => Some(format!(
                        "replication broken (receiving: {}, applying: {}){}",
                        yes_no(rs.io_running),
                        yes_no(rs.sql_running),
                        rs.error
                            .as_ref()
                            .map(|e| format!(": {e}"))
                            .unwrap_or_default()
                    )),
                    Some(rs) => match (rs.lag, s.max_lag()) {
                        (Some(lag), Some(max)) if lag > max => Some(format!(
                            "replication lag {} s > {} s",
                            lag.as_secs(),
                            max.as_secs_f64()
                        )),
                        _ => None,
                    },
                    None => None,
                };
                s.set_monitor_block(verdict);
            }
            Err(e) => {
                let since = *v.first_fail.get_or_insert(started);
                o.reachable = false;
                o.rtt = None;
                o.error = Some(e.clone());
                s.set_monitor_block(Some(format!("unreachable: {e}")));
                // Declared failed after the detection time: statements waiting on it give
                // up, and its idle pooled connections are dropped.
                let is_primary = primary.as_ref().is_some_and(|p| Arc::ptr_eq(p, s));
                if !v.declared_failed
                    && now.duration_since(since) >= self.settings().detection_time
                    && !is_primary
                {
                    v.declared_failed = true;
                    s.fail_in_flight();
                    for hg in self.topology.hostgroups().iter() {
                        hg.drop_idle(s);
                    }
                }
            }
        }
        v.last = Some(r);
        s.set_observed(o);
    }

    /// Decides roles, failovers, fencing and rejoins from the latest checks.
    async fn decide(self: &Arc<Self>) {
        if !self.topology.all().iter().any(|s| s.managed) {
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
                self.set_role(&p, Role::Primary);
            }
        }
        self.place_others().await;
        if self.settings().failover {
            if let Some(p) = self.primary() {
                let down_for = self.down_for(&p);
                let retry_ok = self
                    .state
                    .lock()
                    .retry_failover_at
                    .is_none_or(|t| Instant::now() >= t);
                if retry_ok && down_for.is_some_and(|d| d >= self.settings().detection_time) {
                    self.failover(p, down_for.unwrap_or_default()).await;
                }
            }
        }
    }

    /// How long a server has been failing checks.
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

    /// True if the last check reached the server.
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
        self.topology.place(s, role);
    }

    fn set_primary(&self, s: Option<Arc<Server>>) {
        self.state.lock().primary = s;
    }
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// Runs futures concurrently and collects their outputs in order.
async fn join_all<F: std::future::Future>(futs: impl Iterator<Item = F>) -> Vec<F::Output> {
    let mut handles: Vec<std::pin::Pin<Box<F>>> = futs.map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = (0..handles.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, h) in handles.iter_mut().enumerate() {
            if out[i].is_none() {
                match h.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => out[i] = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter()
        .map(|o| o.expect("every future completed"))
        .collect()
}

/// Observed state, for callers that only need a copy.
pub fn observed(s: &Server) -> Observed {
    s.observed()
}
