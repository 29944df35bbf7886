//! Opening connections for a hostgroup's queue: which server, how many at once, and where a
//! connection goes when it is ready.
//!
//! A connect runs in a task of its own, so it is not tied to the statement it was started for:
//! a statement that is served first by a connection coming back, or whose client leaves,
//! costs nothing, and the new connection goes to whoever is first in line when it is ready.

use super::{Handoff, Hostgroup, Opener, Opening, State};
use crate::balance::{self, Candidate};
use crate::error::ConnectError;
use crate::hostgroup::{Connector, PoolKey};
use crate::server::Server;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

impl<C> Hostgroup<C> {
    /// Remembers how to open connections with `connector` (the one statements come with).
    pub(super) fn set_opener<K>(&self, st: &mut State<C>, connector: &Arc<K>)
    where
        K: Connector<C> + 'static,
        C: Send + 'static,
    {
        let id = Arc::as_ptr(connector) as *const () as usize;
        if st.opener.as_ref().is_some_and(|(_, known)| *known == id) {
            return;
        }
        let (hostgroup, connector) = (self.me.clone(), connector.clone());
        let opener: Opener = Arc::new(move |server: Arc<Server>, key: PoolKey, o: Opening| {
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                return false;
            };
            let (hostgroup, connector) = (hostgroup.clone(), connector.clone());
            runtime.spawn(async move {
                let attempt = tokio::time::timeout(o.timeout, connector.connect(&server, &key));
                let result = attempt.await.unwrap_or_else(|_| {
                    Err(ConnectError::down(format!(
                        "no answer from {} within {} ms",
                        server.address,
                        o.timeout.as_millis()
                    )))
                });
                match hostgroup.upgrade() {
                    Some(hg) => hg.connected(&server, key, o, result),
                    None => drop(result),
                }
            });
            true
        });
        st.opener = Some((opener, id));
    }

    /// Starts opening a connection to member `i` for `key`, closing an idle connection of
    /// another key first if the server is full.
    pub(super) fn start_connect(
        &self,
        st: &mut State<C>,
        i: usize,
        key: PoolKey,
        closing: &mut Vec<C>,
    ) {
        let Some((opener, _)) = st.opener.clone() else {
            return;
        };
        let m = &mut st.members[i];
        let opening = Opening {
            member: m.id,
            returns: st.returns,
            timeout: self.settings.lock().connect_timeout,
        };
        if m.open >= m.server.max_connections() {
            if m.idle.is_empty() {
                return;
            }
            // Full, but holds idle connections of another key: replace the oldest.
            closing.push(m.idle.remove(0).conn);
            m.open -= 1;
        }
        m.open += 1;
        m.peak_open = m.peak_open.max(m.open);
        m.connecting += 1;
        if !opener(m.server.clone(), key, opening) {
            m.open -= 1;
            m.connecting -= 1;
        }
    }

    /// Starts connects for waiters that no connect in flight is meant for, while servers have
    /// room and connect slots (see [`crate::pool_growth`]).
    pub(super) fn grow(&self, st: &mut State<C>, closing: &mut Vec<C>) {
        if st.waiters.is_empty() {
            // The usual case, on every return: nothing to open.
            return;
        }
        let (max_connecting, policy) = self.lend_params();
        loop {
            // No server with room to open: the usual case of a line at a full pool, on every
            // return and every statement that joins the line.
            if !st.members.iter().any(|m| m.can_open(max_connecting)) {
                return;
            }
            let connecting: usize = st.members.iter().map(|m| m.connecting as usize).sum();
            // Waiters that gave up count until they reach the front: at worst a connection
            // is opened for a statement that left, and it stays idle for the next one.
            let Some(key) = st.waiters.get(connecting).map(|w| w.key.clone()) else {
                return;
            };
            let room: Vec<usize> = (0..st.members.len())
                .filter(|&i| st.members[i].can_open(max_connecting))
                .collect();
            let cands: Vec<Candidate> = room.iter().map(|&i| st.members[i].candidate()).collect();
            let Some(ci) = balance::pick(policy, &cands) else {
                return;
            };
            let before = st.members[room[ci]].connecting;
            self.start_connect(st, room[ci], key, closing);
            if st.members[room[ci]].connecting == before {
                return; // could not start one (no runtime, or no opener yet)
            }
        }
    }

    /// A connect started for the queue ended.
    fn connected(
        &self,
        server: &Arc<Server>,
        key: PoolKey,
        opening: Opening,
        result: Result<C, ConnectError>,
    ) {
        let retry_after = self.settings.lock().retry_after;
        match &result {
            Ok(_) => {
                server.stats.connects.fetch_add(1, Relaxed);
                server.mark_online();
            }
            Err(e) => {
                server.stats.connect_errors.fetch_add(1, Relaxed);
                if e.server_down {
                    server.shun(e.message.clone(), retry_after);
                }
            }
        }
        let mut closing = Vec::new();
        let mut failed = None;
        {
            let mut st = self.state.lock();
            match (st.member_by_id(opening.member), result) {
                (Some(i), Ok(conn)) => {
                    let returned = st.returns != opening.returns;
                    let m = &mut st.members[i];
                    m.connecting -= 1;
                    let max = m.server.max_connections();
                    m.growth.connected(returned, max);
                    if m.server.is_usable() {
                        self.hand_out(&mut st, i, key, conn);
                    } else {
                        // It left service while this connect ran (weight 0, monitor block):
                        // like a connection coming back to it, this one closes.
                        m.open -= 1;
                        closing.push(conn);
                    }
                }
                (Some(i), Err(e)) => {
                    let m = &mut st.members[i];
                    m.connecting -= 1;
                    m.open -= 1;
                    // The first statement in line for this key hears why; the others wait for
                    // the next connect (on another server if this one is shunned).
                    failed = st.hand_to_waiter(&key, Handoff::Failed(e));
                }
                (None, result) => {
                    // Its member left the hostgroup: the connection closes, and counts no more.
                    let _ = st.departed_returned(opening.member);
                    closing.extend(result.ok());
                }
            }
            self.grow(&mut st, &mut closing);
        }
        drop(failed);
        drop(closing);
    }
}
