//! Running one command on a backend on behalf of a session:
//!
//! route → attach (held connection, or one leased from the hostgroup's pool) → sync the
//! session's state onto it → forward the command and relay the response → absorb what the
//! server reported (state changes, transaction status, pins) → settle (keep it pinned, or give
//! it back to the pool).

use super::pins::Pins;
use super::relay::{relay, RelayError, Sink};
use super::scan::{Expect, Outcome, Scanner, ServerError};
use super::session::{Fatal, Session};
use super::sync::SyncError;
use crate::backend::BackendConn;
use crate::state;
use crate::wire::consts::{cap, err};
use sluice_core::router::{Classified, Decision, Reason, Route, RouteInput};
use sluice_core::{AcquireError, Lease};
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

/// A failure while forwarding.
pub enum FwdError {
    /// The backend connection was lost (it has been discarded); the client has not been told.
    Backend(Lost),
    /// The session must end.
    Fatal(Fatal),
}

/// A backend connection lost under a command: it broke, stayed silent longer than
/// `[pool] read_timeout`, or sent something that is not the protocol.
pub struct Lost {
    /// The server.
    pub server: Arc<str>,
    /// What happened (`TimedOut`: silent too long; `InvalidData`: malformed).
    pub error: std::io::Error,
    /// Nothing reached the client: the command may be retried elsewhere if safe.
    pub untouched: bool,
    /// Part of the response reached the client: the result it has is incomplete.
    pub partial: bool,
    /// Sequence id of the ERR packet the client can take now; `None` when it is in the
    /// middle of a packet, where it can only be disconnected.
    pub seq: Option<u8>,
}

impl Lost {
    /// Lost before anything was sent to the client, which expects packet `seq`.
    pub fn before_answer(server: Arc<str>, error: std::io::Error, seq: u8) -> Lost {
        Lost {
            server,
            error,
            untouched: true,
            partial: false,
            seq: Some(seq),
        }
    }

    /// What happened, for the client and the logs (e.g. "backend 10.0.0.1:3306 sent a
    /// malformed response: ...").
    pub fn what(&self) -> String {
        match self.error.kind() {
            std::io::ErrorKind::TimedOut | std::io::ErrorKind::InvalidData => {
                format!("backend {} {}", self.server, self.error)
            }
            _ => format!("lost connection to backend {}", self.server),
        }
    }
}

impl From<Fatal> for FwdError {
    fn from(f: Fatal) -> Self {
        FwdError::Fatal(f)
    }
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

    /// Gets the connection for `target`. On failure the client has been sent an error and
    /// `None` is returned.
    pub(crate) async fn attach(
        &mut self,
        target: &Target,
        seq: u8,
    ) -> Result<Option<Attached>, Fatal> {
        let decision = match target {
            Target::Held => return Ok(self.held.take()),
            Target::Previous => return Ok(self.prev.take()),
            Target::Group(d) => d,
        };
        let result = self.lease_for(decision).await;
        match result {
            Ok(att) => Ok(Some(att)),
            Err(AcquireError::Connect(e)) if e.code.is_some() => {
                let code = e.code.unwrap_or(err::NO_BACKEND);
                let state = e.sqlstate.unwrap_or(*b"HY000");
                self.client.send_err(seq, code, &state, &e.message).await?;
                Ok(None)
            }
            Err(e) => {
                self.client
                    .send_err(seq, err::NO_BACKEND, b"HY000", &format!("sluice: {e}"))
                    .await?;
                Ok(None)
            }
        }
    }

    /// Sends `payload` and relays the response to the client (or swallows it).
    pub(crate) async fn forward(
        &mut self,
        att: &mut Attached,
        payload: &[u8],
        scanner: Scanner,
        to_client: bool,
    ) -> Result<Outcome, FwdError> {
        let server = att.lease.server().clone();
        server.stats.queries.fetch_add(1, Relaxed);
        // The client's answer starts after its command's packets.
        let first_seq = (payload.len() / crate::wire::consts::MAX_PAYLOAD + 1) as u8;
        let conn = att.lease.conn();
        if conn.server_failed() {
            // Held across a failover: the server was declared failed since.
            att.lease.discard();
            let e = std::io::Error::other("the server was declared failed");
            return Err(FwdError::Backend(Lost::before_answer(
                server.name.clone(),
                e,
                first_seq,
            )));
        }
        let mut scanner = scanner;
        match conn.send(0, payload).await {
            Ok(next) => scanner.expect_first_seq(next),
            Err(e) => {
                att.lease.discard();
                server.stats.errors.fetch_add(1, Relaxed);
                tracing::debug!(server = %server.name, error = %e, "backend write failed");
                return Err(FwdError::Backend(Lost::before_answer(
                    server.name.clone(),
                    e,
                    first_seq,
                )));
            }
        }
        let sink = if to_client {
            Sink::Client(&mut self.client)
        } else {
            Sink::Discard
        };
        match relay(conn, sink, scanner).await {
            Ok(out) => Ok(out),
            Err(RelayError::Client(e)) => {
                att.lease.discard();
                Err(FwdError::Fatal(Fatal(format!(
                    "client connection lost: {e}"
                ))))
            }
            Err(RelayError::Backend {
                error,
                clean,
                next_seq,
                partial,
            }) => {
                att.lease.discard();
                server.stats.errors.fetch_add(1, Relaxed);
                let lost = Lost {
                    server: server.name.clone(),
                    error,
                    untouched: !partial,
                    partial,
                    seq: clean.then_some(next_seq),
                };
                if matches!(
                    lost.error.kind(),
                    std::io::ErrorKind::TimedOut | std::io::ErrorKind::InvalidData
                ) {
                    // A server that hangs or talks nonsense: its connection is closed.
                    tracing::warn!(session = self.id, server = %server.name, error = %lost.error, partial, "backend connection closed");
                } else {
                    tracing::debug!(session = self.id, server = %server.name, error = %lost.error, partial, "backend connection lost");
                }
                Err(FwdError::Backend(lost))
            }
        }
    }

    /// The whole path for a command that the router can place: attach, sync, forward,
    /// conclude, with one transparent retry for reads whose connection broke before any byte
    /// reached the client.
    pub(crate) async fn run_routed(
        &mut self,
        target: Target,
        payload: &[u8],
        expect: Expect,
        effects: Effects,
        sql: Option<&[u8]>,
        read: bool,
    ) -> Result<(), Fatal> {
        let mut target = target;
        for attempt in 0..2 {
            let from_held = matches!(target, Target::Held);
            let Some(mut att) = self.attach(&target, 1).await? else {
                return Ok(());
            };
            if !self.sync(&mut att, effects, 1).await? {
                self.settle(att, from_held, false).await;
                return Ok(());
            }
            let foreign_diagnostics = effects.intersects(Effects::PREV_STATEMENT)
                && !matches!(target, Target::Previous)
                && !(from_held && self.prev_is_held);
            if foreign_diagnostics {
                // The connection's diagnostics area belongs to another statement (maybe another
                // session's); the session's previous statement had none. Clear it.
                if att.conn().exec("DO 0").await.is_err() {
                    att.lease.discard();
                }
            }
            let deprecate = !att.lease.conn_ref().uses_eof();
            let scanner = Scanner::new(expect, deprecate, self.client.has(cap::SESSION_TRACK));
            match self.forward(&mut att, payload, scanner, true).await {
                Ok(out) => {
                    self.conclude(att, from_held, effects, sql, out, read).await;
                    return Ok(());
                }
                Err(FwdError::Fatal(f)) => return Err(f),
                Err(FwdError::Backend(lost)) => {
                    drop(att);
                    // A server that stayed silent for read_timeout is not waited for twice.
                    let retry = lost.untouched
                        && lost.error.kind() != std::io::ErrorKind::TimedOut
                        && attempt == 0
                        && read
                        && !from_held
                        && !self.st.in_trans;
                    if retry {
                        if let Target::Group(d) = &target {
                            target = Target::Group(d.clone());
                            continue;
                        }
                    }
                    return self.report_lost(from_held, &lost, effects).await;
                }
            }
        }
        Ok(())
    }

    /// Runs a command on a backend without showing the client its response (used to select
    /// the schema while the client logs in). Returns the server's error, if any.
    pub(crate) async fn run_hidden(
        &mut self,
        target: Target,
        payload: &[u8],
        expect: Expect,
        effects: Effects,
    ) -> Result<Result<(), ServerError>, Fatal> {
        let from_held = matches!(target, Target::Held);
        let hidden_err = |m: String| ServerError {
            code: err::NO_BACKEND,
            sqlstate: *b"HY000",
            message: m,
        };
        let mut att = match &target {
            // Keep the reason (a server refusing, a certificate not verifying, ...).
            Target::Group(d) => match self.lease_for(d).await {
                Ok(a) => a,
                Err(e) => return Ok(Err(hidden_err(format!("sluice: {e}")))),
            },
            _ => match self.attach_quiet(&target).await {
                Some(a) => a,
                None => {
                    return Ok(Err(hidden_err(
                        "sluice: no backend connection available".into(),
                    )))
                }
            },
        };
        let mut plan = state::plan(&self.st.tracked, &att.lease.conn_ref().state.tracked, None);
        plan.init_db = None; // the command itself selects the schema
        plan.needs_reset = false;
        if let Err(e) = self.apply_plan(&mut att, plan).await {
            drop(att);
            return Ok(Err(match e {
                SyncError::Server(e) => e,
                SyncError::Io(e) => hidden_err(format!("sluice: {e}")),
            }));
        }
        let deprecate = !att.lease.conn_ref().uses_eof();
        match self
            .forward(
                &mut att,
                payload,
                Scanner::new(expect, deprecate, true),
                false,
            )
            .await
        {
            Ok(out) => {
                let err = out.error.clone();
                self.conclude(att, from_held, effects, None, out, true)
                    .await;
                Ok(err.map_or(Ok(()), Err))
            }
            Err(FwdError::Fatal(f)) => Err(f),
            Err(FwdError::Backend(lost)) => Ok(Err(hidden_err(format!("sluice: {}", lost.what())))),
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
    async fn lease_for(&mut self, decision: &Decision) -> Result<Attached, AcquireError> {
        let topo = self.proxy.topology.clone();
        let mut result = self.acquire_in(&decision.hostgroup).await;
        let fallback = decision.reason != Reason::Listener
            && topo.reads_fallback_to_writer
            && decision.hostgroup == topo.router.reader
            && decision.hostgroup != topo.router.writer;
        if fallback
            && matches!(
                result,
                Err(AcquireError::NoServer { .. } | AcquireError::UnknownHostgroup(_))
            )
        {
            topo.router.stats.read_fallback.fetch_add(1, Relaxed);
            result = self.acquire_in(&topo.router.writer).await;
        }
        let lease = result?;
        let thread = lease.conn_ref().thread_id;
        self.handle
            .set_backend(Some((lease.server().clone(), thread)));
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

    /// A connection from `hostgroup`'s pool. Idle connections that died while pooled are
    /// dropped here, before a statement is sent on them (bounded: each one found is gone).
    async fn acquire_in(&self, hostgroup: &str) -> Result<Lease<Box<BackendConn>>, AcquireError> {
        let Some(hg) = self.proxy.topology.hostgroup(hostgroup) else {
            return Err(AcquireError::UnknownHostgroup(hostgroup.to_string()));
        };
        for _ in 0..1000 {
            let mut lease = hg.acquire(&self.key, &self.proxy.connector).await?;
            if !lease.conn_ref().peer_closed() {
                return Ok(lease);
            }
            tracing::debug!(server = %lease.server().name, "pooled connection found closed; discarded");
            lease.discard();
        }
        hg.acquire(&self.key, &self.proxy.connector).await
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
