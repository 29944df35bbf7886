//! A hostgroup: its servers, their pooled connections and the queue of statements waiting for
//! one.
//!
//! One mutex per hostgroup guards the idle connections of all its servers and the wait queue,
//! so that "is anything free?" and "then I wait" are decided atomically: a connection coming
//! back is handed straight to the oldest waiter (first come, first served), never left idle
//! while someone waits. Connections are opened outside the lock, on a reserved slot.

use crate::balance::{self, Balance, Candidate};
use crate::error::{AcquireError, ConnectError};
use crate::server::Server;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
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
#[derive(Clone, Debug)]
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
    /// Connections lent out.
    in_use: u32,
}

enum Grant<C> {
    Conn(Arc<Server>, C),
    Slot(Arc<Server>),
}

struct Waiter<C> {
    key: PoolKey,
    tx: oneshot::Sender<Grant<C>>,
}

struct State<C> {
    members: Vec<Member<C>>,
    waiters: VecDeque<Waiter<C>>,
}

/// A hostgroup with its pools. `C` is the protocol's backend connection type.
pub struct Hostgroup<C> {
    /// Its name.
    pub name: Arc<str>,
    balance: Mutex<Balance>,
    settings: Mutex<PoolSettings>,
    state: Mutex<State<C>>,
    /// Statements that gave up waiting (timeout or full queue).
    pub queue_timeouts: AtomicU64,
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
    ) -> Self {
        let members = servers
            .into_iter()
            .map(|server| Member {
                server,
                idle: Vec::new(),
                open: 0,
                in_use: 0,
            })
            .collect();
        Hostgroup {
            name: Arc::from(name),
            balance: Mutex::new(balance),
            settings: Mutex::new(settings),
            state: Mutex::new(State {
                members,
                waiters: VecDeque::new(),
            }),
            queue_timeouts: AtomicU64::new(0),
        }
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
        self.state.lock().waiters.len()
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
        loop {
            let pick = self.pick(key, &settings, last_error.as_ref())?;
            let (server, slot) = match pick {
                Pick::Got(server, conn) => return Ok(self.lease(server, key, conn)),
                Pick::Slot(server) => (server, true),
                Pick::Wait(rx) => match tokio::time::timeout_at(deadline.into(), rx).await {
                    Ok(Ok(Grant::Conn(server, conn))) => return Ok(self.lease(server, key, conn)),
                    Ok(Ok(Grant::Slot(server))) => (server, true),
                    Ok(Err(_)) => continue, // sender dropped: the hostgroup changed; try again
                    Err(_) => {
                        self.queue_timeouts.fetch_add(1, Relaxed);
                        let st = self.state.lock();
                        let (open, limit) = st.members.iter().fold((0, 0), |(o, l), m| {
                            (o + m.open, l + m.server.max_connections())
                        });
                        return Err(AcquireError::Timeout {
                            hostgroup: self.name.to_string(),
                            waited: started.elapsed(),
                            busy: open,
                            limit,
                            queued: st.waiters.len(),
                        });
                    }
                },
            };
            debug_assert!(slot);
            let attempt =
                tokio::time::timeout(settings.connect_timeout, connector.connect(&server, key))
                    .await;
            let result = match attempt {
                Ok(r) => r,
                Err(_) => Err(ConnectError::down(format!(
                    "no answer from {} within {} ms",
                    server.address,
                    settings.connect_timeout.as_millis()
                ))),
            };
            match result {
                Ok(conn) => {
                    server.stats.connects.fetch_add(1, Relaxed);
                    server.mark_online();
                    return Ok(self.lease(server, key, conn));
                }
                Err(e) => {
                    server.stats.connect_errors.fetch_add(1, Relaxed);
                    self.slot_failed(&server);
                    if e.server_down {
                        server.shun(e.message.clone(), settings.retry_after);
                        last_error = Some(e);
                        if Instant::now() >= deadline {
                            return Err(AcquireError::NoServer {
                                hostgroup: self.name.to_string(),
                                reason: last_error.map(|e| e.message).unwrap_or_default(),
                            });
                        }
                        continue;
                    }
                    // The server answered but refused us (bad credentials, too many
                    // connections...): the client should see that error, and the server stays.
                    return Err(AcquireError::Connect(e));
                }
            }
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

    /// Under the lock: take an idle connection, reserve a slot, or join the queue.
    fn pick(
        &self,
        key: &PoolKey,
        settings: &PoolSettings,
        last_error: Option<&ConnectError>,
    ) -> Result<Pick<C>, AcquireError> {
        let policy = *self.balance.lock();
        let mut evicted: Option<C> = None;
        let result = {
            let mut st = self.state.lock();
            let usable: Vec<usize> = (0..st.members.len())
                .filter(|&i| st.members[i].server.is_usable())
                .collect();
            if usable.is_empty() {
                let reason = last_error
                    .map(|e| e.message.clone())
                    .or_else(|| {
                        st.members.iter().find_map(|m| match m.server.health() {
                            crate::Health::Shunned { reason, .. }
                            | crate::Health::Offline { reason } => Some(reason),
                            crate::Health::Online => None,
                        })
                    })
                    .unwrap_or_else(|| {
                        if st.members.is_empty() {
                            "it has no servers".to_string()
                        } else {
                            "every server has weight 0".to_string()
                        }
                    });
                return Err(AcquireError::NoServer {
                    hostgroup: self.name.to_string(),
                    reason,
                });
            }
            if st.waiters.is_empty() {
                // Candidates with room: an idle connection of any key, or a free slot.
                let with_room: Vec<usize> = usable
                    .iter()
                    .copied()
                    .filter(|&i| {
                        let m = &st.members[i];
                        !m.idle.is_empty() || m.open < m.server.max_connections()
                    })
                    .collect();
                // Prefer servers holding an idle connection with the right key, so a warm pool
                // is used before new connections are opened, then balance among those.
                let matching: Vec<usize> = with_room
                    .iter()
                    .copied()
                    .filter(|&i| st.members[i].idle.iter().any(|c| &c.key == key))
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
                if let Some(ci) = balance::pick(policy, &cands) {
                    let i = pool_from[ci];
                    let m = &mut st.members[i];
                    if let Some(pos) = m.idle.iter().rposition(|c| &c.key == key) {
                        let idle = m.idle.remove(pos);
                        m.in_use += 1;
                        return Ok(Pick::Got(m.server.clone(), idle.conn));
                    }
                    if m.open >= m.server.max_connections() {
                        // Full, but holds idle connections of another key: replace the oldest.
                        let old = m.idle.remove(0);
                        evicted = Some(old.conn);
                        m.open -= 1;
                    }
                    m.open += 1;
                    m.in_use += 1;
                    Ok(Pick::Slot(m.server.clone()))
                } else {
                    self.enqueue(&mut st, key, settings)
                }
            } else {
                self.enqueue(&mut st, key, settings)
            }
        };
        drop(evicted);
        result
    }

    fn enqueue(
        &self,
        st: &mut State<C>,
        key: &PoolKey,
        settings: &PoolSettings,
    ) -> Result<Pick<C>, AcquireError> {
        st.waiters.retain(|w| !w.tx.is_closed());
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
        Ok(Pick::Wait(rx))
    }

    /// A reserved slot could not be turned into a connection.
    fn slot_failed(&self, server: &Arc<Server>) {
        let mut st = self.state.lock();
        if let Some(m) = st
            .members
            .iter_mut()
            .find(|m| Arc::ptr_eq(&m.server, server))
        {
            m.open = m.open.saturating_sub(1);
            m.in_use = m.in_use.saturating_sub(1);
        }
        // The freed slot may serve a waiter on another server's behalf: let the oldest waiter
        // retry rather than sleep to its deadline.
        Self::grant_slot_to_waiter(&mut st);
    }

    /// Gives a free slot (if any server has one) to the oldest live waiter.
    fn grant_slot_to_waiter(st: &mut State<C>) {
        while !st.waiters.is_empty() {
            let Some(i) = st
                .members
                .iter()
                .position(|m| m.server.is_usable() && m.open < m.server.max_connections())
            else {
                return;
            };
            let Some(w) = st.waiters.pop_front() else {
                return;
            };
            let m = &mut st.members[i];
            m.open += 1;
            m.in_use += 1;
            if let Err(Grant::Slot(_)) = w.tx.send(Grant::Slot(m.server.clone())) {
                m.open -= 1;
                m.in_use -= 1;
            } else {
                return;
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
            st.members[i].in_use = st.members[i].in_use.saturating_sub(1);
            let over_limit = st.members[i].open > st.members[i].server.max_connections();
            let mut conn = match conn {
                Some(c) if !over_limit && st.members[i].server.is_usable() => Some(c),
                Some(c) => {
                    closing.push(c);
                    st.members[i].open -= 1;
                    None
                }
                None => {
                    st.members[i].open -= 1;
                    None
                }
            };
            // Hand the connection (or its slot) to the oldest live waiter.
            while let Some(w) = st.waiters.pop_front() {
                if w.tx.is_closed() {
                    continue;
                }
                let m = &mut st.members[i];
                match conn.take() {
                    Some(c) if w.key == key => {
                        m.in_use += 1;
                        match w.tx.send(Grant::Conn(m.server.clone(), c)) {
                            Ok(()) => break,
                            Err(Grant::Conn(_, c)) => {
                                m.in_use -= 1;
                                conn = Some(c);
                            }
                            Err(Grant::Slot(_)) => unreachable!(),
                        }
                    }
                    other => {
                        // Different key: close this connection and give its slot away.
                        if let Some(c) = other {
                            closing.push(c);
                            m.open -= 1;
                        }
                        if !(m.server.is_usable() && m.open < m.server.max_connections()) {
                            st.waiters.push_front(w);
                            Self::grant_slot_to_waiter(&mut st);
                            break;
                        }
                        m.open += 1;
                        m.in_use += 1;
                        match w.tx.send(Grant::Slot(m.server.clone())) {
                            Ok(()) => break,
                            Err(_) => {
                                m.open -= 1;
                                m.in_use -= 1;
                            }
                        }
                    }
                }
            }
            if let Some(c) = conn {
                st.members[i].idle.push(Idle {
                    key,
                    conn: c,
                    since: Instant::now(),
                });
            }
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
                let mut keep = Vec::with_capacity(before);
                for c in m.idle.drain(..) {
                    if now.duration_since(c.since) > idle_timeout {
                        closing.push(c.conn);
                    } else {
                        keep.push(c);
                    }
                }
                m.open -= (before - keep.len()) as u32;
                m.idle = keep;
            }
        }
        let n = closing.len();
        drop(closing);
        n
    }

    /// Changes the balancing policy.
    pub fn set_balance(&self, b: Balance) {
        *self.balance.lock() = b;
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
    /// The hostgroup it came from.
    pub fn hostgroup(&self) -> &Arc<str> {
        &self.hostgroup.name
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
