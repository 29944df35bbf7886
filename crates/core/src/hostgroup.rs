//! A hostgroup: its servers, their pooled connections and the queue of statements waiting for
//! one.
//!
//! One mutex per hostgroup guards the idle connections of all its servers and the wait queue,
//! so that "is anything free?" and "then I wait" are decided atomically: a connection coming
//! back is handed straight to the oldest waiter (first come, first served), never left idle
//! while someone waits. Connections are opened outside the lock, on a reserved slot, and at
//! most `max_connecting` at a time per server: under a burst, waiters are served by
//! connections coming back rather than each opening its own, so pools grow only as far as the
//! load needs.

use crate::balance::{self, Balance, Candidate};
use crate::error::{AcquireError, ConnectError};
use crate::server::Server;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// What a pooled connection is for: who it is logged in as, and a protocol-defined variant
/// (for MySQL, the client capability flags the connection was opened with).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PoolKey {
    /// The user the connection is authenticated as.
    pub user: Arc<str>,
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
    /// Connections being opened at once per server.
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
    /// Connections that exist or are being opened (idle + in use).
    open: u32,
    /// Connections lent out, or slots reserved for opening one.
    in_use: u32,
    /// Slots reserved for opening a connection, not yet connected.
    connecting: u32,
}

impl<C> Member<C> {
    /// May a new connection be opened to this server now?
    fn can_open(&self, max_connecting: u32) -> bool {
        self.server.is_usable()
            && self.open < self.server.max_connections()
            && self.connecting < max_connecting
    }

    /// Reserves a slot to open a connection.
    fn reserve(&mut self) {
        self.open += 1;
        self.in_use += 1;
        self.connecting += 1;
    }
}

/// A connection, or a slot to open one, handed to a waiter. If the waiter gave up before
/// taking it, dropping it gives it back to the hostgroup, so no capacity leaks.
struct Grant<C> {
    hostgroup: Weak<Hostgroup<C>>,
    server: Arc<Server>,
    key: PoolKey,
    conn: Option<C>,
    armed: bool,
}

impl<C> Grant<C> {
    fn take(mut self) -> (Arc<Server>, Option<C>) {
        self.armed = false;
        (self.server.clone(), self.conn.take())
    }
}

impl<C> Drop for Grant<C> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Some(hg) = self.hostgroup.upgrade() {
            match self.conn.take() {
                Some(c) => hg.release(&self.server, self.key.clone(), Some(c)),
                None => hg.connect_done(&self.server, false),
            }
        }
    }
}

struct Waiter<C> {
    key: PoolKey,
    tx: oneshot::Sender<Grant<C>>,
}

struct State<C> {
    members: Vec<Member<C>>,
    /// Oldest first. Waiters that gave up stay until they reach the front (or the queue is
    /// full), so that no operation costs as much as the queue is long.
    waiters: VecDeque<Waiter<C>>,
}

impl<C> State<C> {
    /// Removes waiters that gave up from the front of the queue.
    fn drop_stale_front(&mut self) {
        while self.waiters.front().is_some_and(|w| w.tx.is_closed()) {
            self.waiters.pop_front();
        }
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
    /// Lent out.
    pub in_use: u32,
    /// Open or opening.
    pub open: u32,
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

enum Pick<C> {
    Got(Arc<Server>, C),
    Slot(Arc<Server>),
    Wait(oneshot::Receiver<Grant<C>>),
}

impl<C> Hostgroup<C> {
    /// A hostgroup over `servers`.
    pub fn new(
        name: &str,
        servers: Vec<Arc<Server>>,
        balance: Balance,
        settings: PoolSettings,
    ) -> Arc<Self> {
        let members = servers
            .into_iter()
            .map(|server| Member {
                server,
                idle: Vec::new(),
                open: 0,
                in_use: 0,
                connecting: 0,
            })
            .collect();
        Arc::new_cyclic(|me| Hostgroup {
            name: Arc::from(name),
            me: me.clone(),
            balance: Mutex::new(balance),
            settings: Mutex::new(settings),
            state: Mutex::new(State {
                members,
                waiters: VecDeque::new(),
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
        self.state
            .lock()
            .members
            .iter()
            .any(|m| Arc::ptr_eq(&m.server, server))
    }

    /// Adds a server (no effect if it is a member already). Waiting statements may use it at
    /// once.
    pub fn add_server(&self, server: Arc<Server>) {
        let mut st = self.state.lock();
        if st.members.iter().any(|m| Arc::ptr_eq(&m.server, &server)) {
            return;
        }
        tracing::info!(hostgroup = %self.name, server = %server.name, "server joins hostgroup");
        st.members.push(Member {
            server,
            idle: Vec::new(),
            open: 0,
            in_use: 0,
            connecting: 0,
        });
        self.grant_slots(&mut st);
    }

    /// Closes a server's idle connections (it failed: they are probably dead).
    pub fn drop_idle(&self, server: &Arc<Server>) {
        let closing: Vec<C> = {
            let mut st = self.state.lock();
            let Some(m) = st
                .members
                .iter_mut()
                .find(|m| Arc::ptr_eq(&m.server, server))
            else {
                return;
            };
            m.open -= m.idle.len() as u32;
            m.idle.drain(..).map(|i| i.conn).collect()
        };
        drop(closing);
    }

    /// Removes a server: its idle connections close now, those in use when they come back.
    pub fn remove_server(&self, server: &Arc<Server>) {
        let removed = {
            let mut st = self.state.lock();
            let Some(i) = st
                .members
                .iter()
                .position(|m| Arc::ptr_eq(&m.server, server))
            else {
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

    /// Pool snapshot per server.
    pub fn pool_stats(&self) -> Vec<PoolStats> {
        self.state
            .lock()
            .members
            .iter()
            .map(|m| PoolStats {
                server: m.server.clone(),
                idle: m.idle.len() as u32,
                in_use: m.in_use,
                open: m.open,
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

    /// Borrows a connection for `key`, opening one if a server has room, or waiting in line
    /// (bounded in time and length) until one comes back.
    pub async fn acquire(
        self: &Arc<Self>,
        key: &PoolKey,
        connector: &dyn Connector<C>,
    ) -> Result<Lease<C>, AcquireError> {
        let settings = self.settings();
        let started = Instant::now();
        let deadline = started + settings.queue_timeout;
        let mut last_error: Option<ConnectError> = None;
        let hold_until = (*self.hold.lock()).map(|d| started + d);
        loop {
            let picked = match self.pick(key, &settings, last_error.as_ref()) {
                Err(AcquireError::NoServer { .. })
                    if hold_until.is_some_and(|t| Instant::now() < t) =>
                {
                    // No usable server (a failover in progress): wait for one.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    last_error = None;
                    continue;
                }
                other => other?,
            };
            let server = match picked {
                Pick::Got(server, conn) => return Ok(self.lease(server, key, conn)),
                Pick::Slot(server) => server,
                Pick::Wait(rx) => match tokio::time::timeout_at(deadline.into(), rx).await {
                    Ok(Ok(grant)) => match grant.take() {
                        (server, Some(conn)) => return Ok(self.lease(server, key, conn)),
                        (server, None) => server,
                    },
                    Ok(Err(_)) => continue, // sender dropped: the hostgroup changed; try again
                    Err(_) => return Err(self.timeout_error(started)),
                },
            };
            let attempt =
                tokio::time::timeout(settings.connect_timeout, connector.connect(&server, key))
                    .await;
            let result = attempt.unwrap_or_else(|_| {
                Err(ConnectError::down(format!(
                    "no answer from {} within {} ms",
                    server.address,
                    settings.connect_timeout.as_millis()
                )))
            });
            match result {
                Ok(conn) => {
                    server.stats.connects.fetch_add(1, Relaxed);
                    server.mark_online();
                    self.connect_done(&server, true);
                    return Ok(self.lease(server, key, conn));
                }
                Err(e) => {
                    server.stats.connect_errors.fetch_add(1, Relaxed);
                    self.connect_done(&server, false);
                    if !e.server_down {
                        // The server answered but refused us (bad credentials, too many
                        // connections...): the client should see that error; the server stays.
                        return Err(AcquireError::Connect(e));
                    }
                    server.shun(e.message.clone(), settings.retry_after);
                    let timed_out = Instant::now() >= deadline;
                    last_error = Some(e);
                    if timed_out {
                        return Err(AcquireError::NoServer {
                            hostgroup: self.name.to_string(),
                            reason: last_error.map(|e| e.message).unwrap_or_default(),
                        });
                    }
                }
            }
        }
    }

    fn timeout_error(&self, started: Instant) -> AcquireError {
        self.queue_timeouts.fetch_add(1, Relaxed);
        let st = self.state.lock();
        let (open, limit) = st.members.iter().fold((0, 0), |(o, l), m| {
            (o + m.open, l + m.server.max_connections())
        });
        AcquireError::Timeout {
            hostgroup: self.name.to_string(),
            waited: started.elapsed(),
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

    fn grant(&self, server: &Arc<Server>, key: &PoolKey, conn: Option<C>) -> Grant<C> {
        Grant {
            hostgroup: self.me.clone(),
            server: server.clone(),
            key: key.clone(),
            conn,
            armed: true,
        }
    }

    /// Under the lock: take an idle connection, reserve a slot, or join the queue.
    fn pick(
        &self,
        key: &PoolKey,
        settings: &PoolSettings,
        last_error: Option<&ConnectError>,
    ) -> Result<Pick<C>, AcquireError> {
        let policy = *self.balance.lock();
        let max_connecting = settings.max_connecting;
        let mut evicted: Option<C> = None;
        let result = {
            let mut st = self.state.lock();
            if !st.members.iter().any(|m| m.server.is_usable()) {
                return Err(self.no_server(&st, last_error));
            }
            // Waiters that gave up (timed out, or their client left) no longer hold a place.
            st.drop_stale_front();
            if !st.waiters.is_empty() {
                // Others are already waiting: take a place in line.
                self.enqueue(&mut st, key, settings)
            } else {
                // Candidates: servers with an idle connection of this key, or room to open
                // one (possibly by replacing an idle connection of another key).
                let has_key = |m: &Member<C>| m.idle.iter().any(|c| &c.key == key);
                let room = |m: &Member<C>| {
                    m.server.is_usable()
                        && (has_key(m)
                            || m.can_open(max_connecting)
                            || (!m.idle.is_empty() && m.connecting < max_connecting))
                };
                let with_room: Vec<usize> = (0..st.members.len())
                    .filter(|&i| room(&st.members[i]))
                    .collect();
                // Prefer servers holding an idle connection with the right key, so a warm pool
                // is used before new connections are opened, then balance among those.
                let matching: Vec<usize> = with_room
                    .iter()
                    .copied()
                    .filter(|&i| has_key(&st.members[i]))
                    .collect();
                let pool_from = if !matching.is_empty()
                    && policy == Balance::Weighted
                    && matching.len() == with_room.len()
                {
                    &matching
                } else {
                    &with_room
                };
                let cands: Vec<Candidate> = pool_from
                    .iter()
                    .map(|&i| Candidate {
                        weight: st.members[i].server.weight(),
                        in_flight: st.members[i].in_use,
                    })
                    .collect();
                match balance::pick(policy, &cands) {
                    Some(ci) => {
                        let m = &mut st.members[pool_from[ci]];
                        if let Some(pos) = m.idle.iter().rposition(|c| &c.key == key) {
                            let idle = m.idle.remove(pos);
                            m.in_use += 1;
                            Ok(Pick::Got(m.server.clone(), idle.conn))
                        } else {
                            if m.open >= m.server.max_connections() {
                                // Full, but holds idle connections of another key: replace the
                                // oldest.
                                let old = m.idle.remove(0);
                                evicted = Some(old.conn);
                                m.open -= 1;
                            }
                            m.reserve();
                            Ok(Pick::Slot(m.server.clone()))
                        }
                    }
                    None => self.enqueue(&mut st, key, settings),
                }
            }
        };
        drop(evicted);
        result
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
    ) -> Result<Pick<C>, AcquireError> {
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
        // A waiter may be the first to find a server with room to open (all busy, but a
        // connect slot free): serve it at once.
        self.grant_slots(st);
        Ok(Pick::Wait(rx))
    }

    /// An attempt to open a connection on a reserved slot ended.
    fn connect_done(&self, server: &Arc<Server>, ok: bool) {
        let mut st = self.state.lock();
        if let Some(m) = st
            .members
            .iter_mut()
            .find(|m| Arc::ptr_eq(&m.server, server))
        {
            m.connecting = m.connecting.saturating_sub(1);
            if !ok {
                m.open = m.open.saturating_sub(1);
                m.in_use = m.in_use.saturating_sub(1);
            }
        }
        // A connect slot is free again: if statements are still waiting, let the oldest open
        // the next connection.
        self.grant_slots(&mut st);
    }

    /// Gives slots to open connections to waiting statements, oldest first, while servers have
    /// room and connect slots.
    fn grant_slots(&self, st: &mut State<C>) {
        let max_connecting = self.settings.lock().max_connecting;
        while !st.waiters.is_empty() {
            let Some(i) = st.members.iter().position(|m| m.can_open(max_connecting)) else {
                return;
            };
            let Some(w) = st.waiters.pop_front() else {
                return;
            };
            st.members[i].reserve();
            let server = st.members[i].server.clone();
            if let Err(g) = w.tx.send(self.grant(&server, &w.key, None)) {
                // That waiter left: undo and try the next one.
                g.take();
                let m = &mut st.members[i];
                m.open -= 1;
                m.in_use -= 1;
                m.connecting -= 1;
            }
        }
    }

    fn release(&self, server: &Arc<Server>, key: PoolKey, conn: Option<C>) {
        let mut closing: Vec<C> = Vec::new();
        {
            let mut st = self.state.lock();
            let Some(i) = st
                .members
                .iter()
                .position(|m| Arc::ptr_eq(&m.server, server))
            else {
                // The server left the hostgroup (reload): just close.
                drop(st);
                drop(conn);
                return;
            };
            let m = &mut st.members[i];
            m.in_use = m.in_use.saturating_sub(1);
            let keep = m.open <= m.server.max_connections() && m.server.is_usable();
            let mut conn = match conn {
                Some(c) if keep => Some(c),
                Some(c) => {
                    closing.push(c);
                    m.open -= 1;
                    None
                }
                None => {
                    m.open -= 1;
                    None
                }
            };
            // Hand the connection to the oldest live waiter that can use it.
            st.drop_stale_front();
            if let Some(c) = conn.take() {
                match st.waiters.front().map(|w| w.key == key) {
                    Some(true) => {
                        let w = st.waiters.pop_front().expect("not empty");
                        st.members[i].in_use += 1;
                        if let Err(g) = w.tx.send(self.grant(server, &key, Some(c))) {
                            st.members[i].in_use -= 1;
                            conn = g.take().1;
                        }
                    }
                    Some(false) => {
                        // The oldest waiter needs another key: close this one so it can open
                        // its own in the freed place.
                        closing.push(c);
                        st.members[i].open -= 1;
                    }
                    None => conn = Some(c),
                }
            }
            if let Some(c) = conn {
                st.members[i].idle.push(Idle {
                    key,
                    conn: c,
                    since: Instant::now(),
                });
            }
            self.grant_slots(&mut st);
        }
        drop(closing);
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

#[cfg(test)]
#[path = "hostgroup_tests.rs"]
mod tests;
