//! What a unit's statements did to the session once the server answered: its pins, its
//! settings (applied, or waiting for the transaction block to end), the statements its
//! connection holds, and what the connection is known to have.

use super::session::Session;
use super::state::{pin, Change, SERVER_DEFAULT};
use crate::backend::statements::StmtDef;
use crate::backend::PgConn;
use crate::classify::CursorOp;
use crate::wire::ReadyStatus;
use sluice_core::Lease;
use std::sync::Arc;

impl Session {
    /// The client's encoding is UTF-8, as the server last reported it (so a `SET`'s text,
    /// which sluice keeps as UTF-8, says what the client said).
    pub(super) fn client_utf8(&self) -> bool {
        self.reported
            .get("client_encoding")
            .is_none_or(|e| e.eq_ignore_ascii_case("UTF8"))
    }

    /// Follows what the unit's statements did to the session: settings, pins, transaction.
    // (Inlined into both paths that call it, for every unit: the call cost more than it
    // saved, callgrind.)
    #[inline(always)]
    pub(super) fn track(
        &mut self,
        ran: &[Arc<StmtDef>],
        prior: ReadyStatus,
        relayed: &super::relay::Relayed,
        lease: &mut Lease<Box<PgConn>>,
    ) {
        let failed = relayed.failed;
        // A unit that left the server inside its implicit transaction (a batch ended with a
        // Flush, or sent ahead of its end, outside a block): what the batch runs commits at
        // its Sync unless something in it fails (or a `ROLLBACK` aborts it), so its changes
        // wait for that as a block's do. The unit that brings the ReadyForQuery ends it.
        let flushed = relayed.status.is_none()
            && self.status == ReadyStatus::Idle
            && lease.conn_ref().unsynced;
        let implicit_before = std::mem::replace(&mut self.implicit_open, flushed);
        let implicit_failed = std::mem::take(&mut self.implicit_failed) || failed;
        self.implicit_failed = flushed && implicit_failed;
        let held_temp = self.pins & pin::TEMP != 0;
        let mut changes: Vec<Change> = Vec::new();
        let (mut commits, mut rolls_back) = (false, false);
        let mut unpins = 0;
        let mut chains = None;
        let pending_before = self.settings.has_pending() || self.pending_unpins != 0;
        for def in ran {
            let i = &def.info;
            if let Some(names) = &i.read_back {
                let pending = &mut lease.conn().read_back;
                for name in names.iter() {
                    if !pending.contains(name) {
                        pending.push(name.clone());
                    }
                }
            }
            // In order: state made after a release is held again.
            self.pins |= i.pins;
            self.pending_unpins &= !i.pins;
            unpins = (unpins | i.unpins) & !i.pins;
            for op in &i.cursors {
                match op {
                    CursorOp::Hold(name) => {
                        lease
                            .conn()
                            .held_cursors
                            .get_or_insert_default()
                            .declared(name.as_deref());
                        unpins &= !pin::WITH_HOLD;
                    }
                    CursorOp::Close(name) if !failed => {
                        if let Some(held) = lease.conn().held_cursors.as_mut() {
                            if held.closed(name) {
                                unpins |= pin::WITH_HOLD;
                            }
                        }
                    }
                    CursorOp::Close(_) => {}
                }
            }
            changes.extend(i.changes.iter().cloned());
            for c in &i.changes {
                // Whatever becomes of the SET (a rollback, an error after it): statements
                // the scanner read wrongly may have made state since.
                if super::state::turns_conforming_strings_off(c) {
                    self.pins |= pin::BACKSLASH_QUOTES;
                }
                if super::state::sets_unreadable_encoding(c) {
                    self.pins |= pin::UNREADABLE_ENCODING;
                }
                if matches!(c, Change::Set(_, stmt) if !stmt.is_ascii()) && !self.client_utf8() {
                    self.pins |= pin::NON_ASCII_SET;
                }
            }
            commits |= i.commits_block();
            rolls_back |= i.rolls_back;
            chains = i.chains.or(chains);
            if i.to_savepoint {
                // What the savepoint's rollback undid is not known: nothing is released.
                self.pending_unpins = 0;
                unpins = 0;
                if self.settings.has_pending() || i.changes_session() {
                    self.pins |= pin::SET_IN_SAVEPOINT;
                }
            }
        }
        // (Also a unit of one statement inside a batch's implicit transaction: the batch's
        // earlier units ran in it.)
        let in_play = (prior != ReadyStatus::Idle || implicit_before) && pending_before;
        // (And a unit without its ReadyForQuery, a Flush-ended one: a `COMMIT` in it ended
        // the block, and what comes with the ReadyForQuery does not say so.)
        if (ran.len() > 1 || flushed || implicit_before || relayed.status.is_none())
            && self.unit_is_unfollowable(ran, prior, failed, in_play, flushed)
        {
            // As for one text (`pin::TEXT_TRANSACTION`): the connection has it right, the
            // session keeps it, and nothing is released.
            self.pins |= pin::TEXT_TRANSACTION;
            unpins = 0;
        }
        // A `DEALLOCATE` of a shared statement's name that reached the server (inside a
        // block, or through the extended protocol) closed it there for every session (and a
        // rollback does not bring it back): it is prepared again where next used.
        for name in ran.iter().filter_map(|d| d.info.deallocate.as_deref()) {
            if let Some(key) = crate::backend::statements::key_of_name(name.as_bytes()) {
                lease.conn().statements.forget(key);
            }
        }
        // By the server's word (a DISCARD ALL that failed, or never ran after an error,
        // dropped nothing).
        if relayed.dropped_statements {
            lease.conn().statements.clear();
            self.lease_has_unnamed = false;
            self.statements.clear();
        }
        let in_block = self.status != ReadyStatus::Idle || flushed;
        let was_in_block = prior != ReadyStatus::Idle || implicit_before;
        let committed = match prior {
            // A batch's implicit transaction commits at its Sync, unless it failed.
            ReadyStatus::Idle => !implicit_failed && !rolls_back,
            // A COMMIT of a failed transaction rolls it back.
            _ => !failed && commits && prior != ReadyStatus::Failed,
        };
        // Pins are released only by what ran, and inside a block only once it commits
        // (a release that failed, or was rolled back, left the state in place).
        if in_block {
            if !failed {
                self.pending_unpins |= unpins;
            }
        } else if was_in_block {
            if committed {
                self.pins &= !(self.pending_unpins | unpins);
            }
            self.pending_unpins = 0;
        } else if !failed {
            self.pins &= !unpins;
        }
        if !changes.is_empty() || was_in_block {
            if in_block {
                changes.into_iter().for_each(|c| self.settings.defer(c));
                if let Some(commit) = chains.filter(|_| !failed) {
                    // COMMIT/ROLLBACK AND CHAIN: the block ended, the next one is open.
                    let committed = commit && prior != ReadyStatus::Failed;
                    self.settings.chain_transaction(committed);
                    if committed {
                        self.pins &= !self.pending_unpins;
                    }
                    self.pending_unpins = 0;
                }
            } else if was_in_block {
                changes.into_iter().for_each(|c| self.settings.defer(c));
                self.settings.end_transaction(committed);
            } else if !failed && !rolls_back {
                changes.into_iter().for_each(|c| self.settings.apply(c));
            }
            // Outside a block only: in one, the server reports what may yet be rolled back.
            if !in_block {
                self.settings.settle_datestyle(&self.reported);
            }
        }
        // Set at its startup (or again after a DISCARD ALL).
        self.pins |= self.settings.blind_pins();
        if held_temp && self.pins & pin::TEMP == 0 {
            // Its temporary tables are gone, but the server process keeps their buffers:
            // there `temp_buffers` can no longer be changed, and another session's `SET` of
            // it (made, or replayed) would fail. The connection closes when it comes back.
            lease.discard();
        }
        if self.pins & pin::SCANNER_DOUBTS != 0
            && **lease.hostgroup() != *self.fe.topology.router.writer
        {
            // Taken in a read-only transaction on a replica: a session pinned there could
            // never write again. The session moves on (to the primary, for the first of
            // these); the connection, which may hold what the pin was for, is closed when
            // it comes back rather than lent to another client.
            self.pins &= !pin::SCANNER_DOUBTS;
            lease.discard();
        }
        // What the client ran on this connection is its state now (only settings changes
        // move the generation: most statements leave both as they are; the startup values a
        // `COMMIT AND CHAIN` committed a `RESET` of are known at the chained block's end).
        // After `COMMIT AND CHAIN` (or `ROLLBACK AND CHAIN`) the chained block starts from
        // the settings the connection committed: known now, unless a `RESET` of a startup
        // value was among them (set again inside the chained block, see `take_block_resets`).
        let chained = in_block && chains.is_some() && !self.settings.startup_reset_pending();
        // (Generation 0: startup values a `RESET` returned to the server's defaults are owed
        // to the connection, not set again yet — the unit ran inside a batch, where nothing
        // of sluice's own runs: they stay owed, and the record says so, with whatever else
        // the unit set.)
        let owed = self.lease_generation == 0;
        if (!in_block || chained)
            && (self.settings.generation() != self.lease_generation
                || self.settings.startup_reset_pending())
        {
            let mut applied = self.settings.desired();
            // The server holds its own defaults for the startup parameters reset (and still
            // for those owed since an earlier unit, unless the session set them since): the
            // record says so, only of them (the others are as the session set them), and they
            // are set again before the session's next statement (or by the next session,
            // as it wants them).
            let mut defaults: Vec<String> = self
                .settings
                .take_startup_resets()
                .iter()
                .map(|n| n.to_string())
                .collect();
            if owed {
                for (name, stmt) in lease.conn_ref().applied() {
                    if stmt == SERVER_DEFAULT
                        && applied.get(name).map(String::as_str)
                            == self.settings.startup_statement(name)
                    {
                        defaults.push(name.clone());
                    }
                }
            }
            if defaults.is_empty() {
                self.lease_generation = self.settings.generation();
            } else {
                for name in defaults {
                    applied.insert(name, SERVER_DEFAULT.to_string());
                }
                self.lease_generation = 0;
            }
            lease.conn().set_applied(applied);
        }
        // Statements parsed while the block has settings of its own are no one else's.
        // And what the connection prepares while they are in force (a statement parsed before
        // the block, first bound in it) is keyed apart too, for no one else.
        if in_block && ran.iter().any(|d| d.info.changes_settings()) {
            self.block_settings = crate::backend::statements::unsettled_fingerprint();
            lease.conn().statements.set_settings(self.block_settings);
        } else if !in_block && self.block_settings != 0 {
            self.block_settings = 0;
            lease.conn().key_statements_by_applied();
        }
        if self.pins & pin::WITH_HOLD == 0 && lease.conn_ref().held_cursors.is_some() {
            // Released (`CLOSE ALL`, `DISCARD ALL`, the last name closed): none is left.
            lease.conn().held_cursors = None;
        }
        let in_transaction = match self.status {
            ReadyStatus::Idle => 0,
            _ => pin::TRANSACTION,
        };
        self.handle.set_pins(self.pins | in_transaction);
    }

    /// True for a unit of several statements (a pipeline up to its Sync) that ends or rolls
    /// back a transaction among them — `COMMIT`, `ROLLBACK`, `AND CHAIN`, `ROLLBACK TO
    /// SAVEPOINT`, `DISCARD ALL`, which commits at once, or a `CALL` or `DO` whose procedure
    /// may commit or roll back (read as one that rolls back) — while settings or released state
    /// are in play (its own, or its block's): which of them took effect depends on where each
    /// stands against that end and on where the unit failed, and sluice does not follow the
    /// answers statement by statement. A unit that failed nowhere, rolled nothing back and
    /// left no block open is followed as it is: all its changes took effect, in order.
    ///
    /// `in_play`: the open transaction (a block, or a batch's implicit transaction) has
    /// settings or released state already; `flushed`: the unit leaves the batch's implicit
    /// transaction open, so that what an end among its statements committed could yet be
    /// taken for rolled back with the rest.
    fn unit_is_unfollowable(
        &self,
        ran: &[Arc<StmtDef>],
        prior: ReadyStatus,
        failed: bool,
        mut in_play: bool,
        flushed: bool,
    ) -> bool {
        let mut ends = false;
        let mut undoes = false;
        for def in ran {
            let i = &def.info;
            // (What a procedure did is not known: it may have committed or rolled back; not
            // inside a block the client opened before the unit, where PostgreSQL refuses it.)
            let procedure = i.may_end_transaction && prior == ReadyStatus::Idle;
            ends |= i.commits_block()
                || i.rolls_back
                || i.chains.is_some()
                || i.to_savepoint
                || procedure
                || i.changes.contains(&Change::DiscardAll);
            undoes |= i.rolls_back || i.chains.is_some() || i.to_savepoint || procedure;
            in_play |= i.changes_session() || i.unpins != 0;
        }
        let whole = !failed && !undoes && self.status == ReadyStatus::Idle && !flushed;
        ends && in_play && !whole
    }
}
