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
use crate::pool_growth::Growth;
use crate::server::Server;
use parking_lot::Mutex;
use smallvec::SmallVec;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// What a pooled connection is for: who it is logged in as, the database it is bound to
/// (PostgreSQL connects to one database for good; MySQL switches schemas per session and
/// leaves it `None`), and a protocol-defined variant (for MySQL, the client capability flags
/// the connection was opened with).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PoolKey {
    /// The user the connection is authenticated as.
    pub user: Arc<str>,
    /// The database the connection is bound to, for protocols whose connections cannot change
    /// it.
    pub database: Option<Arc<str>>,
    /// Protocol-specific variant; only connections with an equal key are interchangeable.
    pub variant: u64,
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

struct Idle<C> {
    key: PoolKey,
    conn: C,
    since: Instant,
}

struct Member<C> {
    server: Arc<Server>,
    idle: Vec<Idle<C>>,
    /// Connections that exist or are being opened (idle + lent + connecting).
    open: u32,
    /// Connections lent out.
    lent: u32,
    /// Connections being opened.
    connecting: u32,
    /// The most connections it ever had open at once.
    peak_open: u32,
    /// How far the connect limit has grown while nothing came back.
    growth: Growth,
}

impl<C> Member<C> {
    fn new(server: Arc<Server>) -> Self {
        Member {
            server,
            idle: Vec::new(),
            open: 0,
            lent: 0,
            connecting: 0,
            peak_open: 0,
            growth: Growth::default(),
        }
    }

    /// May one more connect to this server start now (possibly by closing an idle connection
    /// of another key to make room)?
    fn can_open(&self, max_connecting: u32) -> bool {
        let max = self.server.max_connections();
        self.server.is_usable()
            && self.connecting < self.growth.limit(max_connecting, max)
            && (self.open < max || !self.idle.is_empty())
    }

    fn candidate(&self) -> Candidate {
        Candidate {
            weight: self.server.weight(),
            in_flight: self.lent + self.connecting,
        }
    }
}

/// A connection handed to a waiter. If the waiter gave up before taking it, dropping it gives
/// it back to the hostgroup, so no capacity leaks.
struct Grant<C> {
    hostgroup: Weak<Hostgroup<C>>,
    server: Arc<Server>,
    key: PoolKey,
    conn: Option<C>,
}

impl<C> Grant<C> {
    fn take(mut self) -> (Arc<Server>, Option<C>) {
        (self.server.clone(), self.conn.take())
    }
}

impl<C> Drop for Grant<C> {
    fn drop(&mut self) {
        if let (Some(c), Some(hg)) = (self.conn.take(), self.hostgroup.upgrade()) {
            hg.release(&self.server, self.key.clone(), Some(c));
        }
    }
}

/// What a waiter is woken with.
enum Handoff<C> {
    /// A connection (coming back, or just opened).
    Conn(Grant<C>),
    /// A connect made for the queue failed; the first waiter for its key hears why.
    Failed(ConnectError),
}

struct Waiter<C> {
    key: PoolKey,
    tx: oneshot::Sender<Handoff<C>>,
}

/// Starts a task that opens a connection to `server` for `key` and reports to the hostgroup.
/// Returns false if it could not be started (no runtime).
type Opener = Arc<dyn Fn(Arc<Server>, PoolKey, Opening) -> bool + Send + Sync>;

/// What a connect task carries back.
#[derive(Clone, Copy)]
struct Opening {
    /// The hostgroup's count of returns when the connect started.
    returns: u64,
    /// Time allowed.
    timeout: Duration,
}

struct State<C> {
    members: Vec<Member<C>>,
    /// Oldest first. Waiters that gave up stay until they reach the front (or the queue is
    /// full), so that no operation costs as much as the queue is long.
    waiters: VecDeque<Waiter<C>>,
    /// Connections that came back (reusable), ever: tells a connect whether any did while it
    /// ran.
    returns: u64,
    /// Opens connections for the queue, with the connector statements came with; and that
    /// connector's address, to notice a different one.
    opener: Option<(Opener, usize)>,
    /// The most statements that ever held or waited for a connection at once.
    peak_demand: u32,
}

impl<C> State<C> {
    /// Removes waiters that gave up from the front of the queue.
    fn drop_stale_front(&mut self) {
        while self.waiters.front().is_some_and(|w| w.tx.is_closed()) {
            self.waiters.pop_front();
        }
    }

    /// Hands `h` to the oldest live waiter for `key`; gives it back if there is none.
    fn hand_to_waiter(&mut self, key: &PoolKey, mut h: Handoff<C>) -> Option<Handoff<C>> {
        self.drop_stale_front();
        loop {
            // Almost always the front one: keys differ only between users and client flavours.
            let Some(pos) = self
                .waiters
                .iter()
                .position(|w| &w.key == key && !w.tx.is_closed())
            else {
                return Some(h);
            };
            let Some(w) = self.waiters.remove(pos) else {
                return Some(h);
            };
            match w.tx.send(h) {
                Ok(()) => return None,
                Err(back) => h = back, // it left just now: the next one
            }
        }
    }

    /// A statement was lent a connection or joined the queue.
    fn note_demand(&mut self) {
        let lent: u32 = self.members.iter().map(|m| m.lent).sum();
        let demand = lent.saturating_add(self.waiters.len() as u32);
        self.peak_demand = self.peak_demand.max(demand);
    }

    fn member(&self, server: &Arc<Server>) -> Option<usize> {
        self.members
            .iter()
            .position(|m| Arc::ptr_eq(&m.server, server))
    }
}

/// A hostgroup with its pools. `C` is the protocol's backend connection type.
pub struct Hostgroup<C> {
    /// Its name.
    pub name: Arc<str>,
    me: Weak<Hostgroup<C>>,
    balance: Mutex<Balance>,
    settings: Mutex<PoolSettings>,
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
}

/// A snapshot of one server's pool, for stats and the admin API.
#[derive(Clone, Debug)]
pub struct PoolStats {
    /// The server.
    pub server: Arc<Server>,
    /// Idle connections.
    pub idle: u32,
    /// Lent out, or being opened for a waiting statement.
    pub in_use: u32,
    /// Being opened (counted in `in_use` too).
    pub connecting: u32,
    /// Open or opening.
    pub open: u32,
    /// The most connections it ever had open or opening at once: never more than the
    /// server's `max_connections`, nor than the hostgroup's [`Hostgroup::peak_demand`].
    pub peak_open: u32,
}

/// A connection lent to a session. Dropping it returns the connection to the pool (or closes
/// it if [`Lease::discard`] was called), and hands it to the oldest waiter if there is one.
pub struct Lease<C> {
    hostgroup: Arc<Hostgroup<C>>,
    server: Arc<Server>,
    key: PoolKey,
    conn: Option<C>,
    reusable: bool,
}

/// What [`Hostgroup::choose`] found.
enum Choice<C> {
    /// An idle connection, now lent.
    Got(Arc<Server>, C),
    /// None idle: the server with room to open one, if any.
    OpenOn(Option<usize>),
}

enum Pick<C> {
    Got(Arc<Server>, C),
    Wait(oneshot::Receiver<Handoff<C>>),
}

impl<C> Hostgroup<C> {
    /// A hostgroup over `servers`.
    pub fn new(
        name: &str,
        servers: Vec<Arc<Server>>,
        balance: Balance,
        settings: PoolSettings,
    ) -> Arc<Self> {
        let members = servers.into_iter().map(Member::new).collect();
        Arc::new_cyclic(|me| Hostgroup {
            name: Arc::from(name),
            me: me.clone(),
            balance: Mutex::new(balance),
            settings: Mutex::new(settings),
            state: Mutex::new(State {
                members,
                waiters: VecDeque::new(),
                returns: 0,
                opener: None,
                peak_demand: 0,
            }),
            hold: Mutex::new(None),
            vacancy: Mutex::new(None),
            queue_timeouts: AtomicU64::new(0),
            latency: Default::default(),
        })
    }

    /// When no server is usable, let statements wait up to `d` for one instead of failing at
    /// once (the writer hostgroup while failover is enabled).
    pub fn set_hold_when_empty(&self, d: Option<Duration>) {
        *self.hold.lock() = d;
    }

    /// Says why the hostgroup has no server now (`None`: it has one again, or nobody knows).
    pub fn set_vacancy_reason(&self, why: Option<String>) {
        *self.vacancy.lock() = why;
    }

    /// True if `server` is a member.
    pub fn contains(&self, server: &Arc<Server>) -> bool {
        self.state.lock().member(server).is_some()
    }

    /// Adds a server (no effect if it is a member already). Waiting statements may use it at
    /// once.
    pub fn add_server(&self, server: Arc<Server>) {
        let mut closing = Vec::new();
        let mut st = self.state.lock();
        if st.member(&server).is_some() {
            return;
        }
        tracing::info!(hostgroup = %self.name, server = %server.name, "server joins hostgroup");
        st.members.push(Member::new(server));
        self.grow(&mut st, &mut closing);
        drop(st);
        drop(closing);
    }

    /// Closes a server's idle connections (it failed: they are probably dead).
    pub fn drop_idle(&self, server: &Arc<Server>) {
        let closing: Vec<C> = {
            let mut st = self.state.lock();
            let Some(i) = st.member(server) else {
                return;
            };
            let m = &mut st.members[i];
            m.open -= m.idle.len() as u32;
            m.idle.drain(..).map(|i| i.conn).collect()
        };
        drop(closing);
    }

    /// Removes a server: its idle connections close now, those in use when they come back,
    /// those being opened when they are.
    pub fn remove_server(&self, server: &Arc<Server>) {
        let removed = {
            let mut st = self.state.lock();
            let Some(i) = st.member(server) else {
                return;
            };
            st.members.remove(i)
        };
        tracing::info!(hostgroup = %self.name, server = %server.name, "server leaves hostgroup");
        drop(removed);
    }

    /// The servers, in configuration order.
    pub fn servers(&self) -> Vec<Arc<Server>> {
        self.state
            .lock()
            .members
            .iter()
            .map(|m| m.server.clone())
            .collect()
    }

    /// True if at least one server may take traffic now.
    pub fn has_usable_server(&self) -> bool {
        self.state
            .lock()
            .members
            .iter()
            .any(|m| m.server.is_usable())
    }

    /// Statements waiting for a connection.
    pub fn waiting(&self) -> usize {
        self.state
            .lock()
            .waiters
            .iter()
            .filter(|w| !w.tx.is_closed())
            .count()
    }

    /// The most statements that ever held or waited for one of its connections at once
    /// (waiters that gave up count until they reach the front of the queue). Connections are
    /// opened only for waiting statements, so no server ever has more open than this.
    pub fn peak_demand(&self) -> u32 {
        self.state.lock().peak_demand
    }

    /// Pool snapshot per server.
    pub fn pool_stats(&self) -> Vec<PoolStats> {
        self.state
            .lock()
            .members
            .iter()
            .map(|m| PoolStats {
                server: m.server.clone(),
                idle: m.idle.len() as u32,
                in_use: m.lent + m.connecting,
                connecting: m.connecting,
                open: m.open,
                peak_open: m.peak_open,
            })
            .collect()
    }

    /// The pool settings in force.
    pub fn settings(&self) -> PoolSettings {
        self.settings.lock().clone()
    }

    /// Replaces the pool settings (a reload): waits and connects from now on use them.
    pub fn set_settings(&self, s: PoolSettings) {
        *self.settings.lock() = s;
    }

    /// The balancing policy.
    pub fn balance(&self) -> Balance {
        *self.balance.lock()
    }

    /// Changes the balancing policy.
    pub fn set_balance(&self, b: Balance) {
        *self.balance.lock() = b;
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
        let first = self.pick(key, &settings, None, connector);
        if let Ok(Pick::Got(server, conn)) = first {
            return Ok(self.lease(server, key, conn));
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
        // Read the clock only when the statement cannot be served at once.
        let mut started: Option<tokio::time::Instant> = None;
        let mut last_error: Option<ConnectError> = None;
        let mut first = Some(first);
        loop {
            let pick = match first.take() {
                Some(p) => p,
                None => self.pick(key, &settings, last_error.as_ref(), connector),
            };
            let picked = match pick {
                Err(AcquireError::NoServer { .. })
                    if (*self.hold.lock()).is_some_and(|d| {
                        let since = *started.get_or_insert_with(tokio::time::Instant::now);
                        tokio::time::Instant::now() < since + d
                    }) =>
                {
                    // No usable server (a failover in progress): wait for one.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    last_error = None;
                    continue;
                }
                other => other?,
            };
            let rx = match picked {
                Pick::Got(server, conn) => return Ok(self.lease(server, key, conn)),
                Pick::Wait(rx) => rx,
            };
            let deadline =
                *started.get_or_insert_with(tokio::time::Instant::now) + settings.queue_timeout;
            match tokio::time::timeout_at(deadline, rx).await {
                Ok(Ok(Handoff::Conn(grant))) => match grant.take() {
                    (server, Some(conn)) => return Ok(self.lease(server, key, conn)),
                    (_, None) => continue, // cannot happen: grants carry a connection
                },
                Ok(Ok(Handoff::Failed(e))) if !e.server_down => {
                    // The server answered but refused us (bad credentials, too many
                    // connections...): the client should see that error; the server stays.
                    return Err(AcquireError::Connect(e));
                }
                Ok(Ok(Handoff::Failed(e))) => {
                    // The server is down and shunned: try the others (or fail with why).
                    let timed_out = tokio::time::Instant::now() >= deadline;
                    if timed_out {
                        return Err(AcquireError::NoServer {
                            hostgroup: self.name.to_string(),
                            reason: e.message,
                        });
                    }
                    last_error = Some(e);
                }
                Ok(Err(_)) => continue, // sender dropped: the hostgroup changed; try again
                // The configured wait, not the clock's: on a busy machine the timer fires late,
                // and the message should say the same thing every time.
                Err(_) => return Err(self.timeout_error(settings.queue_timeout)),
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

    fn lease(self: &Arc<Self>, server: Arc<Server>, key: &PoolKey, conn: C) -> Lease<C> {
        Lease {
            hostgroup: self.clone(),
            server,
            key: key.clone(),
            conn: Some(conn),
            reusable: true,
        }
    }

    fn grant(&self, server: &Arc<Server>, key: &PoolKey, conn: C) -> Grant<C> {
        Grant {
            hostgroup: self.me.clone(),
            server: server.clone(),
            key: key.clone(),
            conn: Some(conn),
        }
    }

    /// Under the lock: take an idle connection, or join the queue (and start opening a
    /// connection for it if a server has room).
    fn pick<K>(
        &self,
        key: &PoolKey,
        settings: &PoolSettings,
        last_error: Option<&ConnectError>,
        connector: &Arc<K>,
    ) -> Result<Pick<C>, AcquireError>
    where
        K: Connector<C> + 'static,
        C: Send + 'static,
    {
        let policy = *self.balance.lock();
        let mut closing: Vec<C> = Vec::new();
        let result = {
            let mut st = self.state.lock();
            if !st.members.iter().any(|m| m.server.is_usable()) {
                return Err(self.no_server(&st, last_error));
            }
            let open_on = match Self::choose(&mut st, key, settings, policy) {
                Choice::Got(server, conn) => return Ok(Pick::Got(server, conn)),
                Choice::OpenOn(i) => i,
            };
            match self.enqueue(&mut st, key, settings) {
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
                    Ok(Pick::Wait(rx))
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
    fn choose(
        st: &mut State<C>,
        key: &PoolKey,
        settings: &PoolSettings,
        policy: Balance,
    ) -> Choice<C> {
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
            if m.server.is_usable() && (has_key() || m.can_open(settings.max_connecting)) {
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
            let server = m.server.clone();
            st.note_demand();
            return Choice::Got(server, idle.conn);
        }
        Choice::OpenOn(Some(i))
    }

    /// [`Hostgroup::acquire`]'s usual case without a future: the idle connection the balancer
    /// would lend for `key` at once, or `None` with nothing changed (no place in line, no
    /// connection opened), leaving the rest to `acquire`. A statement's future that awaits
    /// `acquire` only when this fails does not carry the waiting state.
    pub fn try_acquire(self: &Arc<Self>, key: &PoolKey) -> Option<Lease<C>> {
        let settings = self.settings();
        let policy = *self.balance.lock();
        // No usable server leaves `choose` without candidates: nothing to lend.
        let (server, conn) = match Self::choose(&mut self.state.lock(), key, &settings, policy) {
            Choice::Got(server, conn) => (server, conn),
            Choice::OpenOn(_) => return None,
        };
        Some(self.lease(server, key, conn))
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
    ) -> Result<oneshot::Receiver<Handoff<C>>, AcquireError> {
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
        });
        Ok(rx)
    }

    fn release(&self, server: &Arc<Server>, key: PoolKey, conn: Option<C>) {
        let mut closing: Vec<C> = Vec::new();
        {
            let mut st = self.state.lock();
            let Some(i) = st.member(server) else {
                // The server left the hostgroup (reload): just close.
                drop(st);
                drop(conn);
                return;
            };
            let m = &mut st.members[i];
            m.lent = m.lent.saturating_sub(1);
            let keep = m.open <= m.server.max_connections() && m.server.is_usable();
            match conn {
                Some(c) if keep => {
                    // Connections come back: the queue is served by returns again.
                    st.returns += 1;
                    st.members.iter_mut().for_each(|m| m.growth.returned());
                    self.hand_out(&mut st, i, key, c);
                }
                Some(c) => {
                    closing.push(c);
                    st.members[i].open -= 1;
                }
                None => st.members[i].open -= 1,
            }
            // Room may have been freed for waiters of another key.
            self.grow(&mut st, &mut closing);
        }
        drop(closing);
    }

    /// Gives a connection of member `i` to the oldest waiter for `key`, or keeps it idle.
    fn hand_out(&self, st: &mut State<C>, i: usize, key: PoolKey, conn: C) {
        if st.waiters.is_empty() {
            // No one waits (the usual case): it stays idle.
            st.members[i].idle.push(Idle {
                key,
                conn,
                since: Instant::now(),
            });
            return;
        }
        let server = st.members[i].server.clone();
        st.members[i].lent += 1;
        let grant = Handoff::Conn(self.grant(&server, &key, conn));
        if let Some(Handoff::Conn(back)) = st.hand_to_waiter(&key, grant) {
            // No one waits for this key: keep it.
            let m = &mut st.members[i];
            m.lent -= 1;
            if let (_, Some(conn)) = back.take() {
                m.idle.push(Idle {
                    key,
                    conn,
                    since: Instant::now(),
                });
            }
        }
    }

    /// Closes idle connections older than the idle timeout; returns how many.
    pub fn close_idle(&self, now: Instant) -> usize {
        let idle_timeout = self.settings.lock().idle_timeout;
        let mut closing = Vec::new();
        {
            let mut st = self.state.lock();
            for m in st.members.iter_mut() {
                let before = m.idle.len();
                let (old, keep): (Vec<_>, Vec<_>) = m
                    .idle
                    .drain(..)
                    .partition(|c| now.duration_since(c.since) > idle_timeout);
                m.open -= (before - keep.len()) as u32;
                m.idle = keep;
                closing.extend(old.into_iter().map(|c| c.conn));
            }
        }
        let n = closing.len();
        drop(closing);
        n
    }
}

// `conn` is `None` only inside `Drop`, which takes it: a lease in use always holds one.
#[allow(clippy::expect_used)]
impl<C> Lease<C> {
    /// The connection.
    pub fn conn(&mut self) -> &mut C {
        self.conn
            .as_mut()
            .expect("lease holds a connection until dropped")
    }
    /// The connection (shared).
    pub fn conn_ref(&self) -> &C {
        self.conn
            .as_ref()
            .expect("lease holds a connection until dropped")
    }
    /// The server it belongs to.
    pub fn server(&self) -> &Arc<Server> {
        &self.server
    }
    /// The name of the hostgroup it came from.
    pub fn hostgroup(&self) -> &Arc<str> {
        &self.hostgroup.name
    }
    /// The hostgroup it came from.
    pub fn group(&self) -> &Arc<Hostgroup<C>> {
        &self.hostgroup
    }
    /// The pool key.
    pub fn key(&self) -> &PoolKey {
        &self.key
    }
    /// Close the connection instead of returning it (its state is unknown or broken).
    pub fn discard(&mut self) {
        self.reusable = false;
    }
    /// True unless [`Lease::discard`] was called.
    pub fn is_reusable(&self) -> bool {
        self.reusable
    }
}

impl<C> Drop for Lease<C> {
    fn drop(&mut self) {
        let conn = self.conn.take().filter(|_| self.reusable);
        self.hostgroup.release(&self.server, self.key.clone(), conn);
    }
}

#[path = "pool_connect.rs"]
mod connect;

#[cfg(test)]
#[path = "hostgroup_tests.rs"]
mod tests;
