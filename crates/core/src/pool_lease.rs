//! A connection lent to a session: the guard that gives it back to its hostgroup on drop.

use super::{Hostgroup, PoolKey};
use crate::server::Server;
use std::sync::Arc;

/// A connection lent to a session. Dropping it returns the connection to the pool (or closes
/// it if [`Lease::discard`] was called), and hands it to the oldest waiter if there is one.
/// A lease dropped while its thread unwinds a panic closes its connection: the session that
/// held it stopped at a point nobody chose (inside a transaction block, with half a result
/// read), so no other session may get it.
pub struct Lease<C> {
    pub(super) hostgroup: Arc<Hostgroup<C>>,
    /// The member of the hostgroup that lent it.
    pub(super) member: super::MemberId,
    pub(super) server: Arc<Server>,
    pub(super) key: PoolKey,
    pub(super) conn: Option<C>,
    pub(super) reusable: bool,
    pub(super) lost: bool,
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
    /// The connection was lost under a statement (its server closed or reset it): closed
    /// instead of returned, and so are the idle connections to the same server in its
    /// hostgroup. When a server dies, its connections end one by one as its process is torn
    /// down; one still open when its end is checked before it is lent would take the next
    /// statement with it, an outcome unknown to its client. Fresh connections find a dead
    /// server refusing them instead, and their statements wait for a usable one (a failover
    /// in progress) or fail with why. A server that closed one connection only (a `KILL`)
    /// costs its pool new connections, nothing more.
    pub fn lost(&mut self) {
        self.reusable = false;
        self.lost = true;
    }
    /// True unless [`Lease::discard`] was called.
    pub fn is_reusable(&self) -> bool {
        self.reusable
    }
}

impl<C> Drop for Lease<C> {
    fn drop(&mut self) {
        let conn = self
            .conn
            .take()
            .filter(|_| self.reusable && !std::thread::panicking());
        self.hostgroup
            .release(self.member, self.key.clone(), conn, self.lost);
    }
}
