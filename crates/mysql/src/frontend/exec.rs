//! Running one command on a backend on behalf of a session:
//!
//! route → attach (held connection, or one leased from the hostgroup's pool) → sync the
//! session's state onto it → forward the command and relay the response → absorb what the
//! server reported (state changes, transaction status, pins) → settle (keep it pinned, or give
//! it back to the pool).

use super::pins::Pins;
use super::relay::{relay, Sink};
use super::scan::{Expect, Outcome, Scanner};
use super::session::Session;
use crate::backend::BackendConn;
use crate::wire::consts::cap;
use sluice_core::router::{Classified, Decision, Reason, Route, RouteInput};
use sluice_core::{AcquireError, Failure, Lease, Seen, Side};
use sluice_sqlscan::{Effects, Scan};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// A backend connection attached to a session.
pub struct Attached {
    /// The pooled connection.
    pub lease: Lease<Box<BackendConn>>,
    /// LAST_INSERT_ID() on this connection may differ from 0 because of this session: it is
    /// read (and reset to 0) before the connection goes back to the pool, so pooled
    /// connections always have 0 and an unchanged value is recognisable.
    pub insert_dirty: bool,
    /// The session set LAST_INSERT_ID() explicitly (it may be set to 0).
    pub lid_explicit: bool,
}

impl Attached {
    /// Wraps a freshly leased connection.
    pub fn new(lease: Lease<Box<BackendConn>>) -> Attached {
        Attached {
            lease,
            insert_dirty: false,
            lid_explicit: false,
        }
    }

    /// The connection.
    pub fn conn(&mut self) -> &mut BackendConn {
        self.lease.conn()
    }
}

/// Where a command runs.
#[derive(Debug)]
pub enum Target {
    /// On the connection the session holds (pinned).
    Held,
    /// On the connection kept from the previous statement (its warnings, found rows).
    Previous,
    /// On a connection of this hostgroup.
    Group(Decision),
}

/// Effects that create state tied to one connection: a statement with any of them runs on
/// the held connection when there is one, so the session never holds state in two places.
const PIN_CREATING: Effects = Effects(
    Effects::USER_VAR_WRITE.0
        | Effects::LOCK_FUNCTION.0
        | Effects::TEXT_PREPARE.0
        | Effects::TEMP_TABLE_CREATE.0
        | Effects::TRX_BEGIN.0
        | Effects::LOCK_TABLES.0
        | Effects::XA_START.0
        | Effects::TRX_CHARACTERISTICS.0
        | Effects::UNTRACKED.0,
);

/// The router's view of a MySQL statement's scan.
pub(crate) fn classified<'a>(scan: &Scan, sql: &'a [u8]) -> Classified<'a> {
    Classified {
        route: match scan.route() {
            sluice_sqlscan::Route::Read => Route::Read,
            sluice_sqlscan::Route::Write => Route::Write,
        },
        hint: scan.hint(sql),
    }
}

impl Session {
    /// Decides where a statement runs.
    pub(crate) fn target(&self, scan: &Scan, sql: &[u8]) -> Result<Target, String> {
        let e = scan.effects;
        let routes = &self.proxy.topology.router.stats;
        if e.intersects(Effects::PREV_STATEMENT) && self.prev.is_some() {
            routes.pinned.fetch_add(1, Relaxed);
            return Ok(Target::Previous);
        }
        if self.held.is_some() {
            let p = self.st.pins;
            let needs_held = p.is_full()
                || e.intersects(PIN_CREATING)
                || (p.has(Pins::USER_VARIABLES) && e.intersects(Effects::USER_VAR_READ))
                || (p.has(Pins::USER_LOCKS) && e.intersects(Effects::LOCK_FUNCTION))
                || (p.has(Pins::TEXT_PREPARE)
                    && e.intersects(Effects(
                        Effects::TEXT_EXECUTE.0 | Effects::TEXT_DEALLOCATE.0,
                    )))
                || (self.prev_is_held && e.intersects(Effects::PREV_STATEMENT))
                || (e.intersects(Effects::LAST_INSERT_ID_READ)
                    && self.held.as_ref().is_some_and(|h| h.insert_dirty));
            if needs_held {
                routes.pinned.fetch_add(1, Relaxed);
                return Ok(Target::Held);
            }
        }
        let schema = self.st.tracked.schema.as_deref();
        let decision = self
            .proxy
            .topology
            .router
            .route(&RouteInput {
                sql,
                class: classified(scan, sql),
                user: &self.user.name,
                schema,
                in_transaction: self.st.in_trans || !self.st.autocommit,
                listener_hostgroup: self.listener.hostgroup.as_ref(),
            })
            .map_err(|e| e.to_string())?;
        routes.count(&decision.reason);
        if let Some(h) = &self.held {
            if *h.lease.hostgroup() == decision.hostgroup {
                return Ok(Target::Held);
            }
        }
        Ok(Target::Group(decision))
    }

    /// Sends `payload` and relays the response to the client (or swallows it). A failure
    /// of either side is returned; a broken server connection has been discarded.
    pub(crate) async fn forward(
        &mut self,
        att: &mut Attached,
        payload: &[u8],
        scanner: Scanner,
        to_client: bool,
    ) -> Result<Outcome, Failure> {
        let server = att.lease.server().clone();
        server.stats.queries.fetch_add(1, Relaxed);
        // The client's answer starts after its command's packets.
        let first_seq = (payload.len() / crate::wire::consts::MAX_PAYLOAD + 1) as u8;
        let conn = att.lease.conn();
        if conn.server_failed() {
            // Held across a failover: the server was declared failed since.
            att.lease.discard();
            let e = std::io::Error::other("the server was declared failed");
            return Err(Failure::server_before_answer(
                server.name.clone(),
                e,
                first_seq,
            ));
        }
        let mut scanner = scanner;
        match conn.send(0, payload).await {
            Ok(next) => scanner.expect_first_seq(next),
            Err(e) => {
                att.lease.discard();
                server.stats.errors.fetch_add(1, Relaxed);
                tracing::debug!(server = %server.name, error = %e, "backend write failed");
                return Err(Failure::server_before_answer(
                    server.name.clone(),
                    e,
                    first_seq,
                ));
            }
        }
        let sink = if to_client {
            Sink::Client(&mut self.client)
        } else {
            Sink::Discard
        };
        match relay(conn, sink, scanner).await {
            Ok(out) => Ok(out),
            Err(mut failure) => {
                att.lease.discard();
                if failure.side == Side::Server {
                    server.stats.errors.fetch_add(1, Relaxed);
                    failure.server = Some(server.name.clone());
                    let partial = failure.seen != Seen::Nothing;
                    if matches!(
                        failure.error.kind(),
                        std::io::ErrorKind::TimedOut | std::io::ErrorKind::InvalidData
                    ) {
                        // A server that hangs or talks nonsense: its connection is closed.
                        tracing::warn!(session = self.id, server = %server.name, error = %failure.error, partial, "backend connection closed");
                    } else {
                        // Its server's idle connections close too: if it died, they are
                        // dead, though their end may not have arrived yet.
                        att.lease.lost();
                        tracing::debug!(session = self.id, server = %server.name, error = %failure.error, partial, "backend connection lost");
                    }
                }
                Err(failure)
            }
        }
    }

    /// Like [`Session::attach`], without telling the client when no connection can be had.
    pub(crate) async fn attach_quiet(&mut self, target: &Target) -> Option<Attached> {
        match target {
            Target::Held => self.held.take(),
            Target::Previous => self.prev.take(),
            Target::Group(d) => self.lease_for(d).await.ok(),
        }
    }

    /// Leases a connection from the pool of the decision's hostgroup; reads fall back to the
    /// writer when no reader is usable (unless the listener is pinned to a hostgroup).
    pub(crate) async fn lease_for(
        &mut self,
        decision: &Decision,
    ) -> Result<Attached, AcquireError> {
        let topo = self.proxy.topology.clone();
        let result = topo
            .lease_for(decision, &self.key, &self.proxy.connector, |c| {
                // Claimed for this lease, unless a KILL for its last one is under way.
                !c.peer_closed() && !c.lifetime.expired() && c.gate.claim()
            })
            .await;
        let lease = result?;
        let conn = lease.conn_ref();
        self.handle.set_backend_for_cancel(
            Some((lease.server().clone(), conn.thread_id)),
            Some(conn.gate.ticket()),
        );
        Ok(Attached::new(lease))
    }

    /// A scanner for a response on `att` that the client will see.
    pub(crate) fn scanner_for(&self, att: &Attached, expect: Expect) -> Scanner {
        Scanner::new(
            expect,
            !att.lease.conn_ref().uses_eof(),
            self.client.has(cap::SESSION_TRACK),
        )
    }

    /// Target for commands that read and carry no SQL (field list, statistics, schema checks).
    pub(crate) fn read_target(&self) -> Target {
        if self.held.is_some() && self.st.pins.is_full() {
            return Target::Held;
        }
        let router = &self.proxy.topology.router;
        let (hostgroup, reason): (Arc<str>, Reason) = match &self.listener.hostgroup {
            Some(h) => (h.clone(), Reason::Listener),
            None if self.st.in_trans || !self.st.autocommit => {
                (router.writer.clone(), Reason::Transaction)
            }
            None => (router.reader.clone(), Reason::Read),
        };
        if let Some(h) = &self.held {
            if *h.lease.hostgroup() == hostgroup {
                return Target::Held;
            }
        }
        Target::Group(Decision { hostgroup, reason })
    }

    /// Target for commands that must reach the writer.
    pub(crate) fn write_target(&self) -> Target {
        if self.held.is_some() && self.st.pins.is_full() {
            return Target::Held;
        }
        let router = &self.proxy.topology.router;
        let (hostgroup, reason): (Arc<str>, Reason) = match &self.listener.hostgroup {
            Some(h) => (h.clone(), Reason::Listener),
            None => (router.writer.clone(), Reason::Write),
        };
        if let Some(h) = &self.held {
            if *h.lease.hostgroup() == hostgroup {
                return Target::Held;
            }
        }
        Target::Group(Decision { hostgroup, reason })
    }
}
