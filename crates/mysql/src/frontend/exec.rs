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
use crate::backend::BackendConn;
use crate::state;
use crate::wire::consts::{cap, com, err};
use sluice_core::router::{Decision, Reason, RouteInput};
use sluice_core::{AcquireError, Lease};
use sluice_sqlscan::{names, Effects, Scan};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// A backend connection attached to a session.
pub struct Attached {
    /// The pooled connection.
    pub lease: Lease<BackendConn>,
    /// LAST_INSERT_ID() on this connection may differ from 0 because of this session: it is
    /// read (and reset to 0) before the connection goes back to the pool, so pooled
    /// connections always have 0 and an unchanged value is recognisable.
    pub insert_dirty: bool,
    /// The session set LAST_INSERT_ID() explicitly (it may be set to 0).
    pub lid_explicit: bool,
}

impl Attached {
    /// Wraps a freshly leased connection.
    pub fn new(lease: Lease<BackendConn>) -> Attached {
        Attached {
            lease,
            insert_dirty: false,
            lid_explicit: false,
        }
    }
}

impl Attached {
    fn conn(&mut self) -> &mut BackendConn {
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
    /// The backend connection broke; the client has been told when `reported`.
    Backend {
        /// Nothing reached the client: the command may be retried elsewhere if safe.
        untouched: bool,
    },
    /// The session must end.
    Fatal(Fatal),
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

/// Effects whose statements make the server report a session-state change that the proxy
/// already accounts for.
const EXPLAINS_STATE_CHANGE: Effects = Effects(
    Effects::USER_VAR_WRITE.0
        | Effects::TEMP_TABLE_CREATE.0
        | Effects::TABLE_DROP.0
        | Effects::TEXT_PREPARE.0
        | Effects::TEXT_DEALLOCATE.0
        | Effects::SESSION_SET.0
        | Effects::USE_DB.0
        | Effects::UNTRACKED.0,
);

impl Session {
    /// Decides where a statement runs.
    pub(crate) fn target(&self, scan: &Scan, sql: &[u8]) -> Result<Target, String> {
        let e = scan.effects;
        if e.intersects(Effects::PREV_STATEMENT) && self.prev.is_some() {
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
                scan,
                user: &self.user.name,
                schema,
                in_transaction: self.st.in_trans || !self.st.autocommit,
                listener_hostgroup: self.listener.hostgroup.as_ref(),
            })
            .map_err(|e| e.to_string())?;
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
        let topo = self.proxy.topology.clone();
        let fallback = decision.reason != Reason::Listener
            && topo.reads_fallback_to_writer
            && decision.hostgroup == topo.router.reader
            && decision.hostgroup != topo.router.writer;
        let mut result = match topo.hostgroup(&decision.hostgroup) {
            Some(hg) => hg.acquire(&self.key, &self.proxy.connector).await,
            None => Err(AcquireError::UnknownHostgroup(
                decision.hostgroup.to_string(),
            )),
        };
        if fallback {
            if let Err(AcquireError::NoServer { .. } | AcquireError::UnknownHostgroup(_)) = &result
            {
                if let Some(w) = topo.hostgroup(&topo.router.writer) {
                    result = w.acquire(&self.key, &self.proxy.connector).await;
                }
            }
        }
        match result {
            Ok(lease) => {
                let thread = lease.conn_ref().thread_id;
                self.handle
                    .set_backend(Some((lease.server().clone(), thread)));
                Ok(Some(Attached::new(lease)))
            }
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

    /// Brings the connection's session state to the session's. On a server error the client
    /// gets it (with sequence id `seq`) and false is returned.
    pub(crate) async fn sync(
        &mut self,
        att: &mut Attached,
        effects: Effects,
        seq: u8,
    ) -> Result<bool, Fatal> {
        let lid = self.st.last_insert_id;
        let conn = att.lease.conn();
        let extra = (effects.intersects(Effects::LAST_INSERT_ID_READ)
            && !att.insert_dirty
            && conn.state.last_insert_id != Some(lid))
        .then(|| format!("@@session.last_insert_id={lid}"));
        let plan = state::plan(&self.st.tracked, &conn.state.tracked, extra.clone());
        if plan.is_empty() {
            return Ok(true);
        }
        let result = self.apply_plan(att, plan).await;
        match result {
            Ok(()) => {
                if extra.is_some() {
                    att.conn().state.last_insert_id = Some(lid);
                    // Not 0 any more: restore it before the connection is pooled again.
                    att.insert_dirty = true;
                }
                Ok(true)
            }
            Err(SyncError::Server(e)) => {
                let msg = format!(
                    "sluice: cannot restore session state on {}: {}",
                    att.lease.server().name,
                    e.message
                );
                self.client.send_err(seq, e.code, &e.sqlstate, &msg).await?;
                Ok(false)
            }
            Err(SyncError::Io(e)) => {
                att.lease.discard();
                let msg = format!(
                    "sluice: lost connection to backend {}: {e}",
                    att.lease.server().name
                );
                self.client
                    .send_err(seq, err::SERVER_LOST, b"HY000", &msg)
                    .await?;
                Ok(false)
            }
        }
    }

    async fn apply_plan(
        &mut self,
        att: &mut Attached,
        plan: state::SyncPlan,
    ) -> Result<(), SyncError> {
        let user = self.user.clone();
        let conn = att.conn();
        if plan.needs_reset {
            conn.change_user(&user.name, &user.password, None).await?;
        }
        if let Some(db) = &plan.init_db {
            conn.send_command(com::INIT_DB, db.as_bytes()).await?;
            let out = relay(
                conn,
                Sink::Discard,
                Scanner::new(Expect::Simple, !conn.uses_eof(), true),
            )
            .await
            .map_err(|e| SyncError::Io(std::io::Error::other(e.to_string())))?;
            if let Some(e) = out.error {
                return Err(SyncError::Server(e));
            }
            conn.state.tracked.apply(&out.tracker);
            conn.state.tracked.schema = Some(db.clone());
        }
        if let Some(sql) = &plan.set_sql {
            conn.exec(sql).await.map_err(SyncError::from)?;
            conn.state.tracked.vars = self.st.tracked.vars.clone();
        }
        if let Some(on) = plan.multi_statements {
            // MYSQL_OPTION_MULTI_STATEMENTS_ON = 0, _OFF = 1
            conn.send_command(com::SET_OPTION, &[if on { 0 } else { 1 }, 0])
                .await?;
            let out = relay(
                conn,
                Sink::Discard,
                Scanner::new(Expect::Simple, !conn.uses_eof(), true),
            )
            .await
            .map_err(|e| SyncError::Io(std::io::Error::other(e.to_string())))?;
            if let Some(e) = out.error {
                return Err(SyncError::Server(e));
            }
            conn.state.tracked.multi_statements = on;
        }
        Ok(())
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
        let conn = att.lease.conn();
        if let Err(e) = conn.send(0, payload).await {
            att.lease.discard();
            server.stats.errors.fetch_add(1, Relaxed);
            tracing::debug!(server = %server.name, error = %e, "backend write failed");
            return Err(FwdError::Backend { untouched: true });
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
            }) => {
                att.lease.discard();
                server.stats.errors.fetch_add(1, Relaxed);
                let untouched = clean && next_seq == 1;
                if untouched {
                    return Err(FwdError::Backend { untouched: true });
                }
                if clean && to_client {
                    let msg = format!(
                        "sluice: lost connection to backend {} during the statement: {error}",
                        server.name
                    );
                    self.client
                        .send_err(next_seq, err::SERVER_LOST, b"HY000", &msg)
                        .await
                        .map_err(Fatal::from)?;
                    return Err(FwdError::Backend { untouched: false });
                }
                Err(FwdError::Fatal(Fatal(format!(
                    "backend {} failed mid-response: {error}",
                    server.name
                ))))
            }
        }
    }

    /// The backend broke before the client saw anything: tell the client. Losing the held
    /// connection loses the session's pinned state (transaction, temporary tables...), so the
    /// client is disconnected after the error, as it would be by a server crash.
    pub(crate) async fn report_lost(
        &mut self,
        was_held: bool,
        seq: u8,
        server: &str,
    ) -> Result<(), Fatal> {
        let msg =
            format!("sluice: lost connection to backend {server} before the statement completed");
        self.client
            .send_err(seq, err::SERVER_LOST, b"HY000", &msg)
            .await?;
        if was_held && !self.st.pins.is_empty() {
            return Err(Fatal(format!(
                "pinned backend connection lost ({})",
                self.st.pins
            )));
        }
        Ok(())
    }

    /// Learns from a response, updates pins, then keeps or releases the connection.
    pub(crate) async fn conclude(
        &mut self,
        mut att: Attached,
        from_held: bool,
        effects: Effects,
        sql: Option<&[u8]>,
        mut out: Outcome,
        read: bool,
    ) {
        let server = att.lease.server().clone();
        tracing::debug!(
            session = self.id,
            ?effects,
            sets = out.result_sets,
            rows = out.rows,
            affected = out.affected_rows,
            lid = out.last_insert_id,
            status = out.status,
            "conclude"
        );
        if out.error.is_some() {
            server.stats.errors.fetch_add(1, Relaxed);
            if !out.status_known {
                // ERR packets carry no status: ask, so a transaction left open is noticed.
                match att.conn().ping().await {
                    Ok(st) => {
                        out.status = st;
                        out.status_known = true;
                    }
                    Err(_) => att.lease.discard(),
                }
            }
        } else if read {
            server.stats.reads.fetch_add(1, Relaxed);
        } else {
            server.stats.writes.fetch_add(1, Relaxed);
        }
        let ev = self.st.tracked.apply(&out.tracker);
        let conn = att.conn();
        conn.state.tracked.apply(&out.tracker);
        if ev.collation_unreported {
            // SET NAMES / SET CHARACTER SET also changed the connection collation, which the
            // tracker does not report: read it, so it is replayed exactly.
            match conn
                .query_rows("SELECT @@character_set_connection, @@collation_connection")
                .await
            {
                Ok(rows) => {
                    if let Some(row) = rows.first() {
                        for (name, v) in ["character_set_connection", "collation_connection"]
                            .iter()
                            .zip(row)
                        {
                            let v = v.clone().unwrap_or_default();
                            conn.state
                                .tracked
                                .vars
                                .insert((*name).to_string(), v.clone());
                            self.st.tracked.vars.insert((*name).to_string(), v);
                        }
                    }
                }
                Err(_) => att.lease.discard(),
            }
        }
        let conn = att.conn();
        if ev.tracking_changed {
            // Something changed the proxy's session_track_* settings: restore them.
            if conn.exec(crate::backend::TRACKING_SETUP).await.is_err() {
                att.lease.discard();
            }
        }
        if out.status_known {
            use crate::wire::status;
            self.st.in_trans = out.status & status::IN_TRANS != 0;
            self.st.autocommit = out.status & status::AUTOCOMMIT != 0;
            self.st.no_backslash_escapes = out.status & status::NO_BACKSLASH_ESCAPES != 0;
        }
        if out.saw_insert_id
            || effects.intersects(Effects(
                Effects::LAST_INSERT_ID_SET.0 | Effects::PROCEDURE_CALL.0,
            ))
        {
            att.insert_dirty = true;
        }
        if effects.intersects(Effects::LAST_INSERT_ID_SET) {
            att.lid_explicit = true;
        }
        self.update_pins(effects, sql, &out, &ev);
        self.note_results(effects, &out);
        // Keep the connection for the next statement when it may ask about this one: warnings,
        // errors, found rows; and across diagnostic statements themselves, which do not clear
        // the diagnostics area.
        let soft = out.warnings > 0
            || out.error.is_some()
            || effects.intersects(Effects(
                Effects::CALC_FOUND_ROWS.0 | Effects::PREV_STATEMENT.0,
            ));
        self.settle(att, from_held, soft).await;
    }

    /// Remembers ROW_COUNT() and FOUND_ROWS() of this statement for local answers.
    fn note_results(&mut self, e: Effects, out: &Outcome) {
        if e.intersects(Effects::PREV_STATEMENT) {
            return; // diagnostic statements do not change them
        }
        if out.error.is_some() {
            self.st.row_count = -1;
        } else if out.result_sets > 0 {
            self.st.row_count = -1;
            self.st.found_rows = out.rows;
        } else {
            self.st.row_count = out.affected_rows as i64;
        }
    }

    fn update_pins(
        &mut self,
        e: Effects,
        sql: Option<&[u8]>,
        out: &Outcome,
        ev: &state::TrackerEvents,
    ) {
        let ok = out.error.is_none();
        let st = &mut self.st;
        let mut p = st.pins;
        p.set(Pins::TRANSACTION, st.in_trans);
        match ev.trx_state {
            Some(ts) => p.set(Pins::LOCK_TABLES, ts[7] == b'L'),
            None => {
                if ok && e.intersects(Effects::LOCK_TABLES) {
                    p.set(Pins::LOCK_TABLES, true);
                }
                if ok && e.intersects(Effects::UNLOCK_TABLES) {
                    p.set(Pins::LOCK_TABLES, false);
                }
            }
        }
        if let Some(c) = &ev.trx_characteristics {
            // Reported for the transaction in progress too; pending only outside one.
            p.set(Pins::NEXT_TRANSACTION, !c.is_empty() && !st.in_trans);
        }
        let names_unclear = e.intersects(Effects::MULTI)
            && e.intersects(Effects(
                Effects::TEMP_TABLE_CREATE.0
                    | Effects::TABLE_DROP.0
                    | Effects::TEXT_PREPARE.0
                    | Effects::TEXT_DEALLOCATE.0,
            ));
        if names_unclear {
            p.set(Pins::UNTRACKED, true);
        } else if let Some(sql) = sql {
            if e.intersects(Effects::TEMP_TABLE_CREATE) {
                match names::created_temp_table(sql) {
                    Some(n) if ok => {
                        if !st.temp_tables.contains(&n) {
                            st.temp_tables.push(n);
                        }
                    }
                    Some(_) => {}
                    None => p.set(Pins::UNTRACKED, true),
                }
            }
            if ok && e.intersects(Effects::TABLE_DROP) && !st.temp_tables.is_empty() {
                let dropped = names::dropped_tables(sql);
                st.temp_tables.retain(|t| !dropped.contains(t));
            }
            if e.intersects(Effects::TEXT_PREPARE) {
                match names::prepared_statement_name(sql) {
                    Some(n) if ok => {
                        if !st.text_prepared.contains(&n) {
                            st.text_prepared.push(n);
                        }
                    }
                    Some(_) => {}
                    None => p.set(Pins::UNTRACKED, true),
                }
            }
            if ok && e.intersects(Effects::TEXT_DEALLOCATE) {
                if let Some(n) = names::prepared_statement_name(sql) {
                    st.text_prepared.retain(|t| *t != n);
                }
            }
        }
        p.set(Pins::TEMP_TABLES, !st.temp_tables.is_empty());
        p.set(Pins::TEXT_PREPARE, !st.text_prepared.is_empty());
        if e.intersects(Effects::USER_VAR_WRITE) {
            p.set(Pins::USER_VARIABLES, true);
        }
        if e.intersects(Effects::LOCK_FUNCTION) {
            p.set(Pins::USER_LOCKS, true);
        }
        if ok && e.intersects(Effects::XA_START) {
            p.set(Pins::XA, true);
        }
        if ok && e.intersects(Effects::XA_END) {
            p.set(Pins::XA, false);
        }
        if e.intersects(Effects::UNTRACKED) {
            p.set(Pins::UNTRACKED, true);
        }
        // The server says session state changed, and neither a variable, the schema, nor
        // anything the statement visibly does explains it (a stored procedure assigned a user
        // variable, say): something now lives on this connection that the proxy cannot name.
        let explained = ev.vars_changed
            || ev.schema_changed
            || ev.trx_state.is_some()
            || ev.trx_characteristics.is_some()
            || e.intersects(EXPLAINS_STATE_CHANGE);
        if ev.state_changed && !explained {
            p.set(Pins::UNTRACKED, true);
        }
        st.pins = p;
    }

    /// Keeps the connection (pinned, or for the next statement's diagnostics) or returns it.
    pub(crate) async fn settle(&mut self, att: Attached, from_held: bool, soft: bool) {
        let pinned = !self.st.pins.is_empty();
        if pinned && (from_held || self.held.is_none()) {
            self.held = Some(att);
            self.prev_is_held = soft;
        } else if soft {
            if from_held {
                self.prev_is_held = false;
            }
            self.prev = Some(att);
        } else {
            if from_held {
                self.prev_is_held = false;
            }
            self.release(att).await;
        }
        self.publish_pins();
        if self.held.is_none() && self.prev.is_none() {
            self.handle.set_backend(None);
        }
    }

    /// Returns a connection to the pool, first reading LAST_INSERT_ID() if this session
    /// changed it there.
    pub(crate) async fn release(&mut self, mut att: Attached) {
        if att.insert_dirty && att.lease.is_reusable() {
            // Read the value and put 0 back in one round trip (left to right).
            match att
                .conn()
                .query_rows("SELECT LAST_INSERT_ID(), LAST_INSERT_ID(0)")
                .await
            {
                Ok(rows) => {
                    let v = rows
                        .first()
                        .and_then(|r| r.first().cloned().flatten())
                        .and_then(|s| s.parse::<u64>().ok())
                        .unwrap_or(0);
                    // 0 means "unchanged" (the connection had 0 or the session's own value),
                    // unless the session set it to 0 itself.
                    if v != 0 || att.lid_explicit {
                        self.st.last_insert_id = v;
                    }
                    att.conn().state.last_insert_id = Some(0);
                }
                Err(_) => att.lease.discard(),
            }
        }
        if att.lease.is_reusable() && att.lease.conn_ref().stmts.server_full() {
            super::stmt::make_room(att.conn()).await;
        }
        drop(att);
    }

    /// Gives back the connection kept for the previous statement, unless `scan` needs it.
    pub(crate) async fn drop_previous_unless_needed(&mut self, effects: Effects) {
        if effects.intersects(Effects::PREV_STATEMENT) {
            return;
        }
        self.prev_is_held = false;
        if let Some(att) = self.prev.take() {
            self.release(att).await;
        }
    }

    /// Gives back (after resetting it if it carries session-private state) a connection the
    /// session no longer uses. The reset runs in the background.
    pub(crate) async fn dispose(&mut self, mut att: Attached, pins: Pins) {
        if !pins.needs_reset() {
            self.release(att).await;
            return;
        }
        tokio::spawn(async move {
            let conn = att.lease.conn();
            if let Err(e) = conn.reset().await {
                tracing::debug!(error = %e, "backend reset failed; closing the connection");
                att.lease.discard();
            }
            drop(att);
        });
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
            let server_name = att.lease.server().name.clone();
            match self.forward(&mut att, payload, scanner, true).await {
                Ok(out) => {
                    self.conclude(att, from_held, effects, sql, out, read).await;
                    return Ok(());
                }
                Err(FwdError::Fatal(f)) => return Err(f),
                Err(FwdError::Backend { untouched }) => {
                    drop(att);
                    let retry =
                        untouched && attempt == 0 && read && !from_held && !self.st.in_trans;
                    if retry {
                        if let Target::Group(d) = &target {
                            target = Target::Group(d.clone());
                            continue;
                        }
                    }
                    if from_held {
                        self.st.pins = Pins::NONE;
                        self.publish_pins();
                    }
                    if untouched {
                        return self.report_lost(from_held, 1, &server_name).await;
                    }
                    return Ok(());
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
        let decision = match &target {
            Target::Group(d) => Some(d.clone()),
            _ => None,
        };
        let Some(mut att) = self.attach_quiet(&target, decision).await else {
            return Ok(Err(hidden_err(
                "sluice: no backend connection available".into(),
            )));
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
            Err(FwdError::Backend { .. }) => {
                Ok(Err(hidden_err("sluice: lost connection to backend".into())))
            }
        }
    }

    async fn attach_quiet(
        &mut self,
        target: &Target,
        decision: Option<Decision>,
    ) -> Option<Attached> {
        match target {
            Target::Held => self.held.take(),
            Target::Previous => self.prev.take(),
            Target::Group(_) => {
                let d = decision?;
                let topo = self.proxy.topology.clone();
                let mut result = match topo.hostgroup(&d.hostgroup) {
                    Some(hg) => hg.acquire(&self.key, &self.proxy.connector).await,
                    None => Err(AcquireError::UnknownHostgroup(d.hostgroup.to_string())),
                };
                if result.is_err()
                    && d.reason != Reason::Listener
                    && topo.reads_fallback_to_writer
                    && d.hostgroup == topo.router.reader
                {
                    if let Some(w) = topo.hostgroup(&topo.router.writer) {
                        result = w.acquire(&self.key, &self.proxy.connector).await;
                    }
                }
                let lease = result.ok()?;
                Some(Attached::new(lease))
            }
        }
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

/// Why session state could not be restored on a connection.
pub(crate) enum SyncError {
    Server(ServerError),
    Io(std::io::Error),
}

impl From<std::io::Error> for SyncError {
    fn from(e: std::io::Error) -> Self {
        SyncError::Io(e)
    }
}

impl From<crate::backend::BackendError> for SyncError {
    fn from(e: crate::backend::BackendError) -> Self {
        match e {
            crate::backend::BackendError::Server {
                code,
                sqlstate,
                message,
            } => SyncError::Server(ServerError {
                code,
                sqlstate,
                message,
            }),
            crate::backend::BackendError::Io(e) => SyncError::Io(e),
            crate::backend::BackendError::Protocol(m) => SyncError::Io(std::io::Error::other(m)),
        }
    }
}
