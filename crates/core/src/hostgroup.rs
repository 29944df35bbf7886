//! A hostgroup: its servers, their pooled connections and the queue of statements waiting for
//! one.
//!
//! One mutex per hostgroup guards the idle connections of all its servers and the wait queue,
//! so that "is anything free?" and "then I wait" are decided atomically: a connection coming
//! back is handed straight to the oldest waiter (first come, first served), never left idle
//! while someone waits. Connections are opened by tasks of their own, outside the lock, only
//! for statements that wait; a connection just opened is owed to no one and goes, like one
//! coming back, to the first waiter in line. How many connects run at once per server is
//! decided in [`crate::pool_growth`]: few while connections come back, so that pools grow only
//! as far as the load needs, and doubling every round while nothing comes back, so that a
//! short statement does not queue for seconds behind a burst of long ones.

use crate::balance::{self, Balance, Candidate};
use crate::error::{AcquireError, ConnectError};
use crate::server::Server;
use parking_lot::Mutex;
use smallvec::SmallVec;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::oneshot;

/// What a pooled connection is for: who it is logged in as, the database it is bound to
/// (PostgreSQL connects to one database for good; MySQL switches schemas per session and
/// leaves it `None`), and a protocol-defined variant (for MySQL, the client capability flags
/// the connection was opened with).
#[derive(Clone, Debug, Eq)]
pub struct PoolKey {
    /// The user the connection is authenticated as.
    pub user: Arc<str>,
    /// The database the connection is bound to, for protocols whose connections cannot change
    /// it.
    pub database: Option<Arc<str>>,
    /// Protocol-specific variant; only connections with an equal key are interchangeable.
    pub variant: u64,
}

/// Equal fields, the names compared by pointer first: sessions take them from the configured
/// user and an interned database name, so a lease's comparisons almost never read the text.
impl PartialEq for PoolKey {
    fn eq(&self, other: &Self) -> bool {
        fn same(a: &Arc<str>, b: &Arc<str>) -> bool {
            Arc::ptr_eq(a, b) || a == b
        }
        self.variant == other.variant
            && same(&self.user, &other.user)
            && match (&self.database, &other.database) {
                (Some(a), Some(b)) => same(a, b),
                (None, None) => true,
                _ => false,
            }
    }
}

/// The fields' contents, as [`PoolKey`]'s equality compares them.
impl std::hash::Hash for PoolKey {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.user.hash(h);
        self.database.hash(h);
        self.variant.hash(h);
    }
}

/// Opens backend connections. Implemented by the protocol crate.
pub trait Connector<C>: Send + Sync {
    /// Opens and authenticates a connection to `server` for `key`.
    fn connect<'a>(
        &'a self,
        server: &'a Arc<Server>,
        key: &'a PoolKey,
    ) -> Pin<Box<dyn Future<Output = Result<C, ConnectError>> + Send + 'a>>;
}

/// Pool tuning that applies to every server of a hostgroup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolSettings {
    /// How long a statement waits for a connection.
    pub queue_timeout: Duration,
    /// Maximum waiting statements.
    pub queue_limit: usize,
    /// Time allowed to open a connection.
    pub connect_timeout: Duration,
    /// How long a failed server is skipped.
    pub retry_after: Duration,
    /// Idle connections older than this are closed.
    pub idle_timeout: Duration,
    /// Connections being opened at once per server while connections come back (the limit
    /// grows while none do: see [`crate::pool_growth`]).
    pub max_connecting: u32,
}

/// A hostgroup with its pools. `C` is the protocol's backend connection type.
pub struct Hostgroup<C> {
    /// Its name.
    pub name: Arc<str>,
    me: Weak<Hostgroup<C>>,
    settings: Mutex<PoolSettings>,
    /// The balancing policy (1 << 32 for [`Balance::LeastOutstanding`]) and the settings'
    /// `max_connecting`, read without a lock (a lease reads them for every statement); written
    /// under the settings' lock.
    lend_params: AtomicU64,
    state: Mutex<State<C>>,
    /// When no server is usable, wait this long for one (a failover in progress) before
    /// failing.
    hold: Mutex<Option<Duration>>,
    /// Why the hostgroup has no server now, when someone knows (the monitor replacing the
    /// primary): the reason statements are given when none turns up.
    vacancy: Mutex<Option<String>>,
    /// Statements that gave up waiting (timeout or full queue).
    pub queue_timeouts: AtomicU64,
    /// Latency of the statements it served, as their clients saw it (queueing included).
    pub latency: crate::stats::LatencyHistogram,
    /// Wakes the sweeper of deadlines early (a waiter due before its next wake joined).
    sweep_wake: Arc<tokio::sync::Notify>,
}

/// [`Hostgroup::lend_params`] of these settings and balance.
fn lend_params(settings: &PoolSettings, balance: Balance) -> u64 {
    let least = match balance {
        Balance::Weighted => 0,
        Balance::LeastOutstanding => 1 << 32,
    };
    u64::from(settings.max_connecting) | least
}

/// What [`Hostgroup::choose`] found.
enum Choice<C> {
    /// An idle connection, now lent, with its key (moved to the lease: no count of the key's
    /// names goes up and down again).
    Got((MemberId, Arc<Server>), C, PoolKey),
    /// None idle: the server with room to open one, if any.
    OpenOn(Option<usize>),
}

enum Pick<C> {
    Got((MemberId, Arc<Server>), C, PoolKey),
    /// In line until the deadline.
    Wait(oneshot::Receiver<Handoff<C>>, tokio::time::Instant),
}

impl<C> Hostgroup<C> {
    /// A hostgroup over `servers`.
    pub fn new(
        name: &str,
        servers: Vec<Arc<Server>>,
        balance: Balance,
        settings: PoolSettings,
    ) -> Arc<Self> {
        let lend_params = AtomicU64::new(lend_params(&settings, balance));
        let mut state = State {
            members: Vec::with_capacity(servers.len()),
            waiters: VecDeque::new(),
            returns: 0,
            opener: None,
            peak_demand: 0,
            sweep_at: None,
            departed: Vec::new(),
            next_member: 0,
        };
        for server in servers {
            let m = state.new_member(server);
            state.members.push(m);
        }
        Arc::new_cyclic(|me| Hostgroup {
            name: Arc::from(name),
            me: me.clone(),
            lend_params,
            settings: Mutex::new(settings),
            state: Mutex::new(state),
            hold: Mutex::new(None),
            vacancy: Mutex::new(None),
            queue_timeouts: AtomicU64::new(0),
            latency: Default::default(),
            sweep_wake: Default::default(),
        })
    }

    /// Borrows a connection for `key`: an idle one, or else it waits in line (bounded in time
    /// and length) for the first connection that comes back or is opened for the queue by
    /// `connector`.
    pub async fn acquire<K>(
        self: &Arc<Self>,
        key: &PoolKey,
        connector: &Arc<K>,
    ) -> Result<Lease<C>, AcquireError>
    where
        K: Connector<C> + 'static,
        C: Send + 'static,
    {
        let settings = self.settings();
        // The usual case at once: an idle connection, no waiting (and no waiting state in
        // this future, which every statement's future holds).
        let first = self.pick(key, &settings, None, None, connector);
        if let Ok(Pick::Got(lent, conn, key)) = first {
            return Ok(self.lease(lent, key, conn));
        }
        Box::pin(self.acquire_waiting(key, connector, settings, first)).await
    }

    /// [`Hostgroup::acquire`] when the first pick did not lend a connection: waits in line,
    /// or for a server while one is held back (a failover).
    async fn acquire_waiting<K>(
        self: &Arc<Self>,
        key: &PoolKey,
        connector: &Arc<K>,
        settings: PoolSettings,
        first: Result<Pick<C>, AcquireError>,
    ) -> Result<Lease<C>, AcquireError>
    where
        K: Connector<C> + 'static,
        C: Send + 'static,
    {
        // When the wait for a server began (a vacant writer: bounded by `write_wait`, not by
        // `queue_timeout`, which counts from when the statement joins the line).
        let mut held_since: Option<tokio::time::Instant> = None;
        // Set when it joins the line: kept if it joins again, unless it waited for a server
        // in between.
        let mut deadline: Option<tokio::time::Instant> = None;
        let mut last_error: Option<ConnectError> = None;
        let mut first = Some(first);
        loop {
            let pick = match first.take() {
                Some(p) => p,
                None => self.pick(key, &settings, deadline, last_error.as_ref(), connector),
            };
            let picked = match pick {
                Err(AcquireError::NoServer { .. })
                    if (*self.hold.lock()).is_some_and(|d| {
                        let since = *held_since.get_or_insert_with(tokio::time::Instant::now);
                        tokio::time::Instant::now() < since + d
                    }) =>
                {
                    // No usable server (a failover in progress): wait for one, then join
                    // its line afresh.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    last_error = None;
                    deadline = None;
                    continue;
                }
                other => other?,
            };
            let rx = match picked {
                Pick::Got(lent, conn, key) => return Ok(self.lease(lent, key, conn)),
                Pick::Wait(rx, due) => {
                    deadline = Some(due);
                    rx
                }
            };
            // No timer of its own: the hostgroup's sweeper says when the deadline has passed.
            match rx.await {
                Ok(Handoff::Conn(grant)) => match grant.take() {
                    (member, server, Some(conn)) => {
                        return Ok(self.lease((member, server), key.clone(), conn))
                    }
                    (_, _, None) => continue, // cannot happen: grants carry a connection
                },
                Ok(Handoff::Failed(e)) if !e.server_down => {
                    // The server answered but refused us (bad credentials, too many
                    // connections...): the client should see that error; the server stays.
                    return Err(AcquireError::Connect(e));
                }
                Ok(Handoff::Failed(e)) => {
                    // The server is down and shunned: try the others (or fail with why).
                    let timed_out = deadline.is_some_and(|d| tokio::time::Instant::now() >= d);
                    if timed_out {
                        return Err(AcquireError::NoServer {
                            hostgroup: self.name.to_string(),
                            reason: e.message,
                        });
                    }
                    last_error = Some(e);
                }
                // The configured wait, not the clock's: on a busy machine the sweeper wakes
                // late, and the message should say the same thing every time.
                Ok(Handoff::Expired) => return Err(self.timeout_error(settings.queue_timeout)),
                Err(_) => continue, // sender dropped: the hostgroup changed; try again
            }
        }
    }

    fn timeout_error(&self, waited: Duration) -> AcquireError {
        self.queue_timeouts.fetch_add(1, Relaxed);
        let st = self.state.lock();
        let (open, limit) = st.members.iter().fold((0, 0), |(o, l), m| {
            (o + m.open, l + m.server.max_connections())
        });
        AcquireError::Timeout {
            hostgroup: self.name.to_string(),
            waited,
            busy: open,
            limit,
            queued: st.waiters.len(),
        }
    }

    fn lease(self: &Arc<Self>, lent: (MemberId, Arc<Server>), key: PoolKey, conn: C) -> Lease<C> {
        let (member, server) = lent;
        Lease {
            hostgroup: self.clone(),
            member,
            server,
            key,
            conn: Some(conn),
            reusable: true,
            lost: false,
        }
    }

    fn grant(&self, member: MemberId, server: &Arc<Server>, key: &PoolKey, conn: C) -> Grant<C> {
        Grant {
            hostgroup: self.me.clone(),
            member,
            server: server.clone(),
            key: key.clone(),
            conn: Some(conn),
        }
    }

    /// Under the lock: take an idle connection, or join the queue until `deadline` (by
    /// default the queue timeout from now) and start opening a connection for it if a server
    /// has room.
    fn pick<K>(
        &self,
        key: &PoolKey,
        settings: &PoolSettings,
        deadline: Option<tokio::time::Instant>,
        last_error: Option<&ConnectError>,
        connector: &Arc<K>,
    ) -> Result<Pick<C>, AcquireError>
    where
        K: Connector<C> + 'static,
        C: Send + 'static,
    {
        let (_, policy) = self.lend_params();
        let mut closing: Vec<C> = Vec::new();
        let result = {
            let mut st = self.state.lock();
            if !st.members.iter().any(|m| m.server.is_usable()) {
                return Err(self.no_server(&st, last_error));
            }
            let open_on = match Self::choose(&mut st, key, settings.max_connecting, policy) {
                Choice::Got(lent, conn, key) => return Ok(Pick::Got(lent, conn, key)),
                Choice::OpenOn(i) => i,
            };
            let deadline =
                deadline.unwrap_or_else(|| tokio::time::Instant::now() + settings.queue_timeout);
            match self.enqueue(&mut st, key, settings, deadline) {
                Ok(rx) => {
                    st.note_demand();
                    self.set_opener(&mut st, connector);
                    let connecting: usize = st.members.iter().map(|m| m.connecting as usize).sum();
                    if let Some(i) = open_on.filter(|_| connecting < st.waiters.len()) {
                        // Alone in line, and no connect in flight will serve it: open on the
                        // server the balancer chose.
                        self.start_connect(&mut st, i, key.clone(), &mut closing);
                    }
                    self.grow(&mut st, &mut closing);
                    Ok(Pick::Wait(rx, deadline))
                }
                Err(e) => Err(e),
            }
        };
        drop(closing);
        result
    }

    /// Under the lock, [`Hostgroup::pick`]'s choice with no effect but lending: an idle
    /// connection of `key` on the server the balancer chose, or that server if it has room to
    /// open one (when no one waits in line: the line is served first).
    fn choose(st: &mut State<C>, key: &PoolKey, max_connecting: u32, policy: Balance) -> Choice<C> {
        // Waiters that gave up (timed out, or their client left) no longer hold a place.
        st.drop_stale_front();
        if !st.waiters.is_empty() {
            return Choice::OpenOn(None);
        }
        // Candidates: servers with an idle connection of this key, or room to open one
        // (possibly by replacing an idle connection of another key); one pass, on the stack
        // for hostgroups of up to 8 servers: this runs on every lease.
        let mut room: SmallVec<[(usize, Candidate); 8]> = SmallVec::new();
        for (i, m) in st.members.iter().enumerate() {
            let has_key = || m.idle.iter().any(|c| &c.key == key);
            if m.server.is_usable() && (has_key() || m.can_open(max_connecting)) {
                room.push((i, m.candidate()));
            }
        }
        let ci = match room.len() {
            0 => return Choice::OpenOn(None),
            1 => 0,
            _ => {
                let cands: SmallVec<[Candidate; 8]> = room.iter().map(|r| r.1).collect();
                match balance::pick(policy, &cands) {
                    Some(ci) => ci,
                    None => return Choice::OpenOn(None),
                }
            }
        };
        let i = room[ci].0;
        let m = &mut st.members[i];
        if let Some(pos) = m.idle.iter().rposition(|c| &c.key == key) {
            let idle = m.idle.remove(pos);
            m.lent += 1;
            let lent = (m.id, m.server.clone());
            st.note_demand();
            return Choice::Got(lent, idle.conn, idle.key);
        }
        Choice::OpenOn(Some(i))
    }

    /// [`Hostgroup::acquire`]'s usual case without a future: the idle connection the balancer
    /// would lend for `key` at once, or `None` with nothing changed (no place in line, no
    /// connection opened), leaving the rest to `acquire`. A statement's future that awaits
    /// `acquire` only when this fails does not carry the waiting state.
    pub fn try_acquire(self: &Arc<Self>, key: &PoolKey) -> Option<Lease<C>> {
        // (Only what `choose` reads, without a lock: this runs for every statement.)
        let (max_connecting, policy) = self.lend_params();
        // No usable server leaves `choose` without candidates: nothing to lend.
        let (lent, conn, key) =
            match Self::choose(&mut self.state.lock(), key, max_connecting, policy) {
                Choice::Got(lent, conn, key) => (lent, conn, key),
                Choice::OpenOn(_) => return None,
            };
        Some(self.lease(lent, key, conn))
    }

    /// `max_connecting` and the balancing policy (see `lend_params`).
    fn lend_params(&self) -> (u32, Balance) {
        let p = self.lend_params.load(Relaxed);
        let policy = match p >> 32 {
            0 => Balance::Weighted,
            _ => Balance::LeastOutstanding,
        };
        (p as u32, policy)
    }

    /// Sets the balancing policy and `max_connecting` (called under the settings' lock).
    fn note_lend_params(&self, settings: &PoolSettings, balance: Balance) {
        self.lend_params
            .store(lend_params(settings, balance), Relaxed);
    }

    fn no_server(&self, st: &State<C>, last_error: Option<&ConnectError>) -> AcquireError {
        let reason = last_error
            .map(|e| e.message.clone())
            .or_else(|| st.members.iter().find_map(|m| m.server.monitor_block()))
            .or_else(|| {
                st.members.iter().find_map(|m| match m.server.health() {
                    crate::Health::Shunned { reason, .. } | crate::Health::Offline { reason } => {
                        Some(reason)
                    }
                    crate::Health::Online => None,
                })
            })
            .unwrap_or_else(|| {
                if st.members.is_empty() {
                    self.vacancy
                        .lock()
                        .clone()
                        .unwrap_or_else(|| "it has no servers".to_string())
                } else {
                    "every server has weight 0".to_string()
                }
            });
        AcquireError::NoServer {
            hostgroup: self.name.to_string(),
            reason,
        }
    }

    fn enqueue(
        &self,
        st: &mut State<C>,
        key: &PoolKey,
        settings: &PoolSettings,
        deadline: tokio::time::Instant,
    ) -> Result<oneshot::Receiver<Handoff<C>>, AcquireError>
    where
        C: Send + 'static,
    {
        if st.waiters.len() >= settings.queue_limit {
            // Only at the limit is the whole queue swept for waiters that gave up: a sweep on
            // every statement would cost as much as the queue is long.
            st.waiters.retain(|w| !w.tx.is_closed());
        }
        if st.waiters.len() >= settings.queue_limit {
            self.queue_timeouts.fetch_add(1, Relaxed);
            return Err(AcquireError::QueueFull {
                hostgroup: self.name.to_string(),
                queued: st.waiters.len(),
            });
        }
        let (tx, rx) = oneshot::channel();
        st.waiters.push_back(Waiter {
            key: key.clone(),
            tx,
            deadline,
        });
        self.arm_sweeper(st, deadline);
        Ok(rx)
    }
}

#[path = "pool_state.rs"]
mod state;
use state::{Departed, Grant, Handoff, Idle, MemberId, Opener, Opening, State, Waiter};

#[path = "pool_connect.rs"]
mod connect;

#[path = "pool_sweep.rs"]
mod sweep;

#[path = "pool_lease.rs"]
mod lease;
pub use lease::Lease;

#[path = "pool_release.rs"]
mod release;

#[path = "hostgroup_members.rs"]
mod members;
pub use members::PoolStats;

#[cfg(test)]
#[path = "hostgroup_tests.rs"]
mod tests;
