//! After a statement: learning what the server reported (session-state changes, transaction
//! status, pins, results of the statement), then keeping the connection or giving it back.

use super::exec::Attached;

/// What a statement's digest is computed from.
#[derive(Clone, Copy)]
pub(crate) enum DigestOf<'a> {
    /// Not counted (commands without a statement, hidden commands).
    Nothing,
    /// A text statement.
    Text(&'a [u8]),
    /// A prepared statement (its digest is kept with it).
    Prepared(&'a crate::backend::stmt_cache::StmtKey),
}

impl<'a> DigestOf<'a> {
    /// The statement's text, if it has one.
    pub(crate) fn text(self) -> Option<&'a [u8]> {
        match self {
            DigestOf::Nothing => None,
            DigestOf::Text(sql) => Some(sql),
            DigestOf::Prepared(key) => Some(&key.sql),
        }
    }
}
use super::pins::Pins;
use super::scan::Outcome;
use super::session::{Fatal, Session};
use crate::state;
use crate::wire::consts::err;
use sluice_core::{DigestKey, DigestSample};
use sluice_core::{Failure, Seen};
use sluice_sqlscan::{names, Effects};
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

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
    /// A backend connection was lost under a statement (it broke, stayed silent longer than
    /// `[pool] read_timeout`, or sent something malformed): tell the client, with an ERR
    /// packet in place of the rest of the response.
    ///
    /// Losing the held connection loses the session's pinned state. When that state is only
    /// an open transaction, the transaction is over either way and the session goes on
    /// outside any transaction: if the statement could not have committed it, it is certainly
    /// rolled back (the server died or drops the connection) and the client gets
    /// ER_LOCK_DEADLOCK (1213, SQLSTATE 40001, "restart the transaction"), as after a
    /// deadlock; if it could have (a COMMIT in flight), the client is told the outcome is
    /// unknown. Otherwise (temporary tables, locks, variables) the client is disconnected
    /// after the error, as a server crash would disconnect it. A client left in the middle of
    /// a packet (a row larger than `scan::WHOLE_UP_TO` was being passed on) cannot take an
    /// error at all: it is disconnected.
    pub(crate) async fn report_lost(
        &mut self,
        was_held: bool,
        lost: &Failure,
        effects: Effects,
    ) -> Result<(), Fatal> {
        let why = self.failure_note(lost.server.as_deref().unwrap_or("?"));
        let what = lost.what();
        let partial = lost.seen != Seen::Nothing;
        let (when, incomplete) = if partial {
            (" in the middle of the result", "; the result is incomplete")
        } else {
            (" before the statement completed", "")
        };
        let Some(seq) = lost.can_tell_client().then_some(lost.next_seq) else {
            return Err(Fatal(format!(
                "{what}{when}{why}: the client was inside a packet and cannot be sent an error ({})",
                lost.error
            )));
        };
        let trx = Pins(Pins::TRANSACTION.0 | Pins::PREVIOUS_STATEMENT.0);
        let only_trx =
            self.st.pins.has(Pins::TRANSACTION) && Pins(self.st.pins.0 & !trx.0).is_empty();
        if was_held && only_trx {
            if effects.intersects(Effects::MAY_COMMIT) {
                let msg = format!(
                    "sluice: {what}{when}{why}{incomplete}; its outcome is unknown: the transaction may have been committed or rolled back"
                );
                self.client
                    .send_err(seq, err::BACKEND_LOST, b"08S01", &msg)
                    .await?;
            } else {
                let msg = format!(
                    "sluice: the transaction was rolled back: {what}{when}{why}{incomplete}; restart the transaction"
                );
                self.client
                    .send_err(seq, err::LOCK_DEADLOCK, b"40001", &msg)
                    .await?;
            }
            self.st.in_trans = false;
            self.st.pins.set(trx, false);
            self.publish_pins();
            return Ok(());
        }
        let msg = if partial {
            format!("sluice: {what}{when}{why}{incomplete}")
        } else {
            format!("sluice: {what}{when}{why}; its outcome is unknown")
        };
        self.client
            .send_err(seq, err::BACKEND_LOST, b"08S01", &msg)
            .await?;
        if was_held && !self.st.pins.is_empty() {
            return Err(Fatal(format!(
                "pinned backend connection lost ({})",
                self.st.pins
            )));
        }
        Ok(())
    }

    /// Adds a statement to the digest table (schema as it was when the statement ran).
    fn count_digest(
        &mut self,
        of: DigestOf<'_>,
        hostgroup: &str,
        elapsed: Duration,
        out: &Outcome,
    ) {
        if self.proxy.rt.digests.capacity() == 0 {
            return;
        }
        let nbe = self.st.no_backslash_escapes;
        match of {
            DigestOf::Nothing => {}
            // A prepared statement's digest is computed once, not at every execution.
            DigestOf::Prepared(key) => key.digest(nbe, |id, text| {
                self.record_digest(id, text, hostgroup, elapsed, out)
            }),
            DigestOf::Text(sql) => {
                thread_local! {
                    // One normalisation buffer per worker thread, not per session: the work
                    // below never waits, so no other session can interleave.
                    static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
                }
                BUF.with_borrow_mut(|buf| {
                    let id = sluice_sqlscan::digest::normalize_into(sql, nbe, buf);
                    self.record_digest(id, buf, hostgroup, elapsed, out)
                });
            }
        }
    }

    fn record_digest(
        &self,
        id: u64,
        text: &[u8],
        hostgroup: &str,
        elapsed: Duration,
        out: &Outcome,
    ) {
        self.proxy.rt.digests.record(
            DigestKey {
                id,
                user: &self.user.name,
                schema: self.st.tracked.schema.as_deref().unwrap_or(""),
                hostgroup,
            },
            text,
            DigestSample {
                elapsed,
                rows_sent: out.rows,
                rows_affected: out.affected_rows,
                error: out.error.is_some(),
            },
        );
    }

    /// Why a server's connections are being lost, if the monitor knows (for error messages).
    pub(crate) fn failure_note(&self, server: &str) -> String {
        let Some(s) = self
            .proxy
            .topology
            .all()
            .iter()
            .find(|s| &*s.name == server)
            .cloned()
        else {
            return String::new();
        };
        match (s.health(), s.monitor_block()) {
            (sluice_core::Health::Offline { reason }, _) if reason == "failed primary" => {
                "; the server stopped answering and a failover replaced it".into()
            }
            (_, Some(block)) if block.starts_with("unreachable") => {
                format!("; the monitor finds it {block}")
            }
            _ => String::new(),
        }
    }

    /// Learns from a response, updates pins, then keeps or releases the connection.
    pub(crate) async fn conclude(
        &mut self,
        mut att: Attached,
        from_held: bool,
        effects: Effects,
        sql: DigestOf<'_>,
        mut out: Outcome,
        read: bool,
    ) {
        let server = att.lease.server().clone();
        let elapsed = self.cmd_started.elapsed();
        att.lease.group().latency.observe(elapsed);
        self.count_digest(sql, att.lease.hostgroup(), elapsed, &out);
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
                            std::sync::Arc::make_mut(&mut conn.state.tracked.vars)
                                .insert((*name).to_string(), v.clone());
                            std::sync::Arc::make_mut(&mut self.st.tracked.vars)
                                .insert((*name).to_string(), v);
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
        self.update_pins(effects, sql.text(), &out, &ev);
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
}
