//! After a statement: learning what the server reported (session-state changes, transaction
//! status, pins, results of the statement), then keeping the connection or giving it back.

use super::digest::DigestOf;
use super::exec::Attached;
use super::pins::Pins;
use super::scan::Outcome;
use super::session::Session;
use crate::state;
use sluice_sqlscan::{names, Effects};
use std::sync::atomic::Ordering::Relaxed;

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
}
