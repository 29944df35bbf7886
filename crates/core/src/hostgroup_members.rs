//! A hostgroup's membership and settings as the monitor, a reload and the admin API change
//! and read them: servers joining and leaving, pool snapshots, balancing, idle expiry.

use super::{Departed, Hostgroup};
use crate::balance::Balance;
use crate::hostgroup::PoolSettings;
use crate::server::Server;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A snapshot of one server's pool, for stats and the admin API.
#[derive(Clone, Debug)]
pub struct PoolStats {
    /// The server.
    pub server: Arc<Server>,
    /// Idle connections.
    pub idle: u32,
    /// Lent out, or being opened for a waiting statement (counting those lent by an entry
    /// for the same address that left the hostgroup since, until they come back).
    pub in_use: u32,
    /// Being opened (counted in `in_use` too).
    pub connecting: u32,
    /// Open or opening.
    pub open: u32,
    /// The most connections it ever had open or opening at once: never more than the
    /// server's `max_connections`, nor than the hostgroup's [`Hostgroup::peak_demand`].
    pub peak_open: u32,
}

impl<C> Hostgroup<C> {
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
        let m = st.new_member(server);
        st.members.push(m);
        self.grow(&mut st, &mut closing);
        drop(st);
        drop(closing);
    }

    /// Closes a server's idle connections (it failed: they are probably dead).
    pub fn drop_idle(&self, server: &Arc<Server>) {
        let mut closing: Vec<C> = Vec::new();
        {
            let mut st = self.state.lock();
            let Some(i) = st.member(server) else {
                return;
            };
            st.members[i].close_idle(&mut closing);
        }
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
            let removed = st.members.remove(i);
            // What it still has out keeps counting against the address's limit.
            let out = removed.lent + removed.connecting;
            if out > 0 {
                let left = st.serial();
                st.departed.push(Departed {
                    id: removed.id,
                    left,
                    address: removed.server.address.clone(),
                    out,
                });
            }
            removed
        };
        tracing::info!(hostgroup = %self.name, server = %server.name, "server leaves hostgroup");
        drop(removed);
        // Those waiting may have no server left to wait for.
        self.sweep_wake.notify_one();
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
                in_use: m.in_use(),
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
        let mut settings = self.settings.lock();
        *settings = s;
        self.note_lend_params(&settings, self.balance());
    }

    /// The balancing policy.
    pub fn balance(&self) -> Balance {
        self.lend_params().1
    }

    /// Changes the balancing policy.
    pub fn set_balance(&self, b: Balance) {
        let settings = self.settings.lock();
        self.note_lend_params(&settings, b);
    }

    /// Closes idle connections found idle longer than the idle timeout, and those a server
    /// has beyond its connection limit (lowered by a reload: connections in use close as they
    /// come back, idle ones here, the longest idle first); returns how many. (A connection's
    /// idle time counts from the first call that found it idle: see `Idle::since`.)
    pub fn close_idle(&self, now: Instant) -> usize {
        let idle_timeout = self.settings.lock().idle_timeout;
        let mut closing = Vec::new();
        {
            let mut st = self.state.lock();
            for m in st.members.iter_mut() {
                let before = m.idle.len();
                let (old, keep): (Vec<_>, Vec<_>) = m.idle.drain(..).partition(|c| {
                    c.since
                        .is_some_and(|since| now.duration_since(since) > idle_timeout)
                });
                m.open -= (before - keep.len()) as u32;
                m.idle = keep;
                let over = m.open.saturating_sub(m.server.max_connections()) as usize;
                let over = over.min(m.idle.len());
                if over > 0 {
                    m.open -= over as u32;
                    closing.extend(m.idle.drain(..over).map(|c| c.conn));
                }
                for c in m.idle.iter_mut().filter(|c| c.since.is_none()) {
                    c.since = Some(now);
                }
                closing.extend(old.into_iter().map(|c| c.conn));
            }
        }
        let n = closing.len();
        drop(closing);
        n
    }
}
