//! Units sluice answers with an error itself instead of forwarding them: a refusal (routing,
//! a queue timeout, a cancel while the statement waited), what follows a refused batch up to
//! its Sync, and a transaction block that failed before the server had it; and what a client
//! is told when the server connection under its statement is lost.

use super::client::Client;
use super::lease::NoConnection;
use super::relay::RelayError;
use super::sequences::{self, Sequences};
use super::session::{client_err, put_query, Session, SessionError};
use super::unit::{Defs, End, Unit};
use crate::backend::statements::StmtDef;
use crate::backend::PgConn;
use crate::wire::{ReadyStatus, Writer};
use sluice_core::{Lease, OverBudget};
use std::sync::Arc;

/// A statement a unit runs (`None`: of a portal not known), and its text where known.
type Run<'a> = (Option<&'a Arc<StmtDef>>, Option<&'a [u8]>);

/// The refusal of a statement after a `RESET` of the startup parameter `name` in its unit.
fn reads_after_reset(name: &str) -> String {
    format!(
        "sluice: a statement follows a RESET of \"{name}\" (a parameter this session gave at its \
         startup) in the same query or batch, where it would run with the server's default \
         instead of the startup value; send the RESET in a query or batch of its own"
    )
}

impl Session {
    /// Refuses a unit with an error, as the server would (the rest of an extended batch is
    /// skipped up to its Sync).
    pub(super) async fn refuse_unit(
        &mut self,
        unit: &Unit,
        code: &str,
        msg: &str,
    ) -> Result<(), SessionError> {
        self.refuse_unit_fields(unit, code, msg, &[]).await
    }

    /// A unit got no connection (`no`): refused with its error, or, when the client was told
    /// already (FATAL: no code), the session is over.
    pub(super) async fn refuse_no_connection(
        &mut self,
        unit: &Unit,
        no: Box<NoConnection>,
    ) -> Result<(), SessionError> {
        if no.code.is_empty() {
            return Err(SessionError::Refused(no.message));
        }
        self.refuse_unit_with(unit, &no).await
    }

    /// Refuses a unit whose statement was cancelled before it was sent (see
    /// [`Session::cancelled_before_sending`]), with PostgreSQL's error.
    pub(super) async fn refuse_cancelled(&mut self, unit: &Unit) -> Result<(), SessionError> {
        self.refuse_unit(unit, "57014", "canceling statement due to user request")
            .await
    }

    /// The relay of a unit failed (`prior`: the status before it, `ran`: its statements): a
    /// client gone mid-statement has the server told to stop it; a server lost (or silent
    /// past `[pool] read_timeout`, its statement cancelled in case it still runs) is reported
    /// to the client. The connection closes either way, and the session ends.
    pub(super) async fn relay_failed(
        &mut self,
        mut lease: Lease<Box<PgConn>>,
        e: RelayError,
        prior: ReadyStatus,
        ran: &[Arc<StmtDef>],
    ) -> SessionError {
        let e = match e {
            RelayError::Client(e) => {
                let (pid, secret) = lease.conn_ref().backend_key;
                super::cancel::abandoned(
                    lease.server().address.clone(),
                    pid,
                    secret,
                    self.fe.connector.tls.clone(),
                );
                lease.discard();
                return client_err(e);
            }
            RelayError::Server(e) => e,
        };
        if e.kind() == std::io::ErrorKind::TimedOut {
            let (pid, secret) = lease.conn_ref().backend_key;
            super::cancel::abandoned(
                lease.server().address.clone(),
                pid,
                secret,
                self.fe.connector.tls.clone(),
            );
            lease.discard();
        } else if lease.conn_ref().told_fatal || e.kind() == std::io::ErrorKind::InvalidData {
            // The server ended this connection alone and said why (`pg_terminate_backend`,
            // a timeout of the session's: its other connections carry on; in a shutdown
            // each says so too, and is found closed before it is lent), or sent what sluice
            // refuses: only this connection goes.
            lease.discard();
        } else {
            // Its server's idle connections close too: if it died, they are dead, though
            // their end may not have arrived yet.
            lease.lost();
        }
        let (code, msg) = super::refuse::lost(prior, ran, lease.server(), &e);
        // After the server's own FATAL, the end of the connection, as directly.
        if !lease.conn_ref().told_fatal {
            let _ = self.client.fatal(code, &msg).await;
        }
        SessionError::Refused(msg)
    }

    /// Refuses a unit because it got no connection: a server's refusal of the login goes to
    /// the client whole (its detail, hint...), as an ERROR.
    pub(super) async fn refuse_unit_with(
        &mut self,
        unit: &Unit,
        no: &NoConnection,
    ) -> Result<(), SessionError> {
        self.refuse_unit_fields(unit, &no.code, &no.message, &no.fields)
            .await
    }

    async fn refuse_unit_fields(
        &mut self,
        unit: &Unit,
        code: &str,
        msg: &str,
        more: &[(u8, String)],
    ) -> Result<(), SessionError> {
        if self.flushed_batch_open() {
            Box::pin(self.fail_flushed_batch()).await?;
        }
        self.client.consume(unit.len);
        let mut w = Writer::new();
        w.error_with("ERROR", code, msg, more);
        if matches!(unit.end, End::Sync | End::Query | End::Function) {
            if self.deferred_begin.is_some() {
                self.status = ReadyStatus::Failed;
            }
            w.ready_for_query(self.status);
        } else {
            self.refused_to_sync = true;
        }
        self.client.send(w.as_bytes()).await.map_err(client_err)
    }

    /// Refuses a unit inside the transaction block the server has, failing the block there
    /// too (a statement that fails, its answer not relayed), so that the server answers what
    /// follows as PostgreSQL does after an error: 25P02 until the block ends, a `COMMIT` that
    /// rolls back.
    pub(super) async fn refuse_in_block(
        &mut self,
        unit: &Unit,
        code: &str,
        msg: &str,
    ) -> Result<(), SessionError> {
        if self.lease.is_none() {
            return self.refuse_unit(unit, code, msg).await;
        }
        self.fail_on_server(Vec::new(), "lost the transaction block on the server")
            .await?;
        self.status = ReadyStatus::Failed;
        self.refuse_unit(unit, code, msg).await
    }

    /// Notes whether a Parse of `unit` carries a statement that changes settings (see
    /// [`Session::parsed_setting_changes`]), or a `BEGIN` ([`Session::parsed_begin`]).
    pub(super) fn note_parses(&mut self, unit: &Unit, defs: &Defs) {
        if self.parsed_setting_changes && self.parsed_begin {
            return;
        }
        for (i, d) in defs.iter() {
            if unit.msgs[*i].0 == b'P' {
                self.parsed_setting_changes |= !d.info.changes.is_empty();
                self.parsed_begin |= d.info.begin.is_some();
            }
        }
    }

    /// Why a unit's settings changes are refused, with the code, if they are: the `SET`s it
    /// runs would take the settings the session made past their bounds
    /// ([`super::state::MAX_MADE`]), 54000; or a statement of it would run after a `RESET`
    /// before it in the unit returned a startup parameter to the server's default (see
    /// [`super::state::UnitResets`]), 0A000.
    pub(super) fn settings_refused(
        &self,
        unit: &Unit,
        defs: &Defs,
    ) -> Option<(&'static str, String)> {
        // Nearly every unit: no statement of its own that changes settings, and no Bind of
        // one prepared before (none can be bound unless a Parse of the session carried one:
        // a prepared read's Bind is not looked up again here, 700 instructions a unit).
        let binds = self.parsed_setting_changes && unit.msgs.iter().any(|m| m.0 == b'B');
        // A `RESET` in a Flush-ended part of the batch this unit goes on, whose value is not
        // set again (sluice sets nothing inside the client's batch): the unit's statements
        // run with the server's default. (Not while the server skips to the Sync after an
        // error: it runs none of them.)
        let carried = self.settings.has_block_resets()
            && !self.skipping
            && self.lease.as_ref().is_some_and(|l| l.conn_ref().unsynced);
        if !binds && !carried && defs.iter().all(|(_, d)| d.info.changes.is_empty()) {
            return None;
        }
        let mut parsed = super::route::Parsed::new();
        // The statements the unit parses, binds or runs; and those it runs, in order: a
        // Query's, and an Execute's (of a portal the unit binds, or the session holds;
        // `None`, of one not known, read as one that may read settings); with their texts.
        let mut named = Vec::new();
        let mut run: Vec<Run<'_>> = Vec::new();
        let mut portals: Vec<(&[u8], &Arc<StmtDef>)> = Vec::new();
        for i in 0..unit.msgs.len() {
            let def = self.statement_of(unit, defs, i, &mut parsed);
            let (tag, at, len) = unit.msg(i);
            let body = self.client.buf.get(at + 5..at + len);
            let portal = || super::unit::cstr(body?).map(|(p, _)| p);
            match tag {
                b'Q' => run.push((def, body)),
                b'B' => {
                    if let (Some(p), Some(d)) = (portal(), def) {
                        portals.push((p, d));
                    }
                }
                b'E' => {
                    let bound = portal().and_then(|p| {
                        let here = portals.iter().rev().find(|(n, _)| *n == p);
                        here.map(|(_, d)| *d).or_else(|| self.portals.get(p))
                    });
                    run.push((bound, bound.map(|d| &*d.sql)));
                }
                _ => {}
            }
            named.extend(def);
        }
        let changing = || named.iter().filter(|d| !d.info.changes.is_empty());
        if changing().next().is_some() {
            let in_block = self.status != ReadyStatus::Idle || self.deferred_begin.is_some();
            let changes = changing().flat_map(|d| d.info.changes.iter());
            if let Some(msg) = self.settings.over_bounds(changes, in_block) {
                return Some(("54000", msg));
            }
        } else if !carried {
            return None;
        }
        if self.status == ReadyStatus::Failed {
            // The server refuses every statement but the block's end.
            return None;
        }
        let mut resets = self.settings.unit_resets(carried);
        for (def, text) in run {
            let Some(def) = def else {
                if let Some(name) = resets.in_force(|| true) {
                    return Some(("0A000", reads_after_reset(name)));
                }
                continue;
            };
            let info = &def.info;
            // (A text of several statements in a batch that carries a `RESET`: refused when
            // any of them may read, also one after a `SET` of the value.)
            if info.reads_settings && (info.statements <= 1 || carried) {
                let names = || text.is_none_or(crate::classify::reads_application_name);
                if let Some(name) = resets.in_force(names) {
                    return Some(("0A000", reads_after_reset(name)));
                }
            }
            let mut done = 0;
            for &(at, names) in info.reads_after_reset.iter().flatten() {
                info.changes
                    .iter()
                    .take(at)
                    .skip(done)
                    .for_each(|c| resets.apply(c));
                done = at;
                if let Some(name) = resets.in_force(|| names) {
                    return Some(("0A000", reads_after_reset(name)));
                }
            }
            info.changes.iter().skip(done).for_each(|c| resets.apply(c));
        }
        None
    }

    /// Refuses a unit whose settings changes are refused ([`Session::settings_refused`]),
    /// with `code`, before the server runs any of it; inside the block the server has, the
    /// block fails there too, as after an error of its own.
    pub(super) async fn refuse_settings(
        &mut self,
        unit: &Unit,
        code: &str,
        msg: &str,
    ) -> Result<(), SessionError> {
        let open_block = self.status == ReadyStatus::InTransaction && self.deferred_begin.is_none();
        if self.lease.is_some() && open_block {
            return self.refuse_in_block(unit, code, msg).await;
        }
        self.refuse_unit(unit, code, msg).await
    }

    /// After a refused unit without a Sync: skips what comes up to the next Sync, which is
    /// answered with ReadyForQuery (a block sluice holds the BEGIN of has failed).
    pub(super) async fn skip_refused(&mut self, unit: &Unit) -> Result<(), SessionError> {
        self.client.consume(unit.len);
        if unit.end != End::Sync {
            return Ok(());
        }
        self.refused_to_sync = false;
        if self.deferred_begin.is_some() {
            self.status = ReadyStatus::Failed;
        }
        let mut w = Writer::new();
        w.ready_for_query(self.status);
        self.client.send(w.as_bytes()).await.map_err(client_err)
    }

    /// Whether the session's transaction block failed before the server had it (see
    /// [`Session::fail_block_on_server`]).
    pub(super) fn block_failed_before_server(&self) -> bool {
        self.status == ReadyStatus::Failed && self.deferred_begin.is_some() && self.lease.is_none()
    }

    /// A transaction block that failed before the server had it (its `BEGIN` held back, then
    /// a statement sluice refused): a lone Sync gets ReadyForQuery; for anything else the
    /// server is given the block, failed (the `BEGIN` and a statement that fails, answers
    /// not relayed), so that it answers the rest as PostgreSQL does — 25P02 until the block
    /// ends, a `COMMIT` that rolls back, `AND CHAIN`, in either protocol. (A lone simple
    /// `COMMIT`/`ROLLBACK` was answered by `answer_alone`.)
    pub(super) async fn fail_block_on_server(&mut self, unit: &Unit) -> Result<bool, SessionError> {
        if !self.block_failed_before_server() {
            return Ok(false);
        }
        if unit.msgs.iter().all(|m| m.0 == b'S') {
            self.client.consume(unit.len);
            let mut w = Writer::new();
            w.ready_for_query(self.status);
            self.client.send(w.as_bytes()).await.map_err(client_err)?;
            return Ok(true);
        }
        let writer = sluice_core::router::Decision {
            hostgroup: self.fe.topology.router.writer.clone(),
            reason: sluice_core::router::Reason::Write,
        };
        match self.attach(&writer).await {
            Ok(()) => {}
            Err(no) if no.code.is_empty() => return Err(SessionError::Refused(no.message)),
            Err(no) => {
                self.refuse_unit_with(unit, &no).await?;
                return Ok(true);
            }
        }
        let (Some(deferred), Some(lease)) = (self.deferred_begin.take(), self.lease.as_mut())
        else {
            return Ok(false);
        };
        let begin = deferred.query;
        // Someone else's currval/lastval go first, outside the block (as ahead of a unit).
        let q = match self.sequences.must_discard(lease.conn_ref()) {
            true => {
                Sequences::discarded(lease.conn());
                sequences::discard_then(&begin)
            }
            false => begin.into_vec(),
        };
        self.fail_on_server(q, "cannot open the failed transaction block on the server")
            .await?;
        Ok(false)
    }

    /// Runs `q` and a statement that fails on the leased connection, their answers not
    /// relayed, leaving the transaction block there failed (or the implicit transaction
    /// rolled back): the server's status after it; if it does not fail as it should, the
    /// session ends (FATAL, `what`).
    pub(super) async fn fail_on_server(
        &mut self,
        mut q: Vec<u8>,
        what: &str,
    ) -> Result<ReadyStatus, SessionError> {
        put_query(&mut q, b"SELECT 1/0");
        // (Simple queries: the connection's unnamed statement is gone, and the client's
        // Bind of it gets 25P02 from its Parse again, as directly from the Bind.)
        self.lease_has_unnamed = false;
        let outcome = match &mut self.lease {
            Some(lease) => super::lease::run_hidden(lease.conn(), &q).await,
            None => Ok(self.status),
        };
        match outcome {
            Err(e) if e.code == "22012" => Ok(e.status.unwrap_or(ReadyStatus::Failed)),
            other => {
                let msg = format!("sluice: {what}: {other:?}");
                Err(self.end_over_connection("08006", msg).await)
            }
        }
    }

    /// Ends the session whose client's message did not fit in `[proxy] max_request_memory`:
    /// the client is told why (FATAL 53200, PostgreSQL's out_of_memory), every other session
    /// goes on.
    pub(super) async fn refuse_over_budget(&mut self, received: usize, over: OverBudget) {
        tracing::warn!(
            session = self.handle.id,
            peer = %self.handle.peer,
            received,
            in_use = over.used,
            limit = over.limit,
            "client message refused: max_request_memory exhausted"
        );
        // The rest of its message is read and dropped after the FATAL (`close_after_fatal`),
        // so that the client, still sending it, reads why.
        let msg = Client::over_budget_message(received, &over);
        let _ = self.client.fatal("53200", &msg).await;
    }
}

/// What a client is told when its server connection is lost under a statement (it is then
/// disconnected, as a server crash disconnects its clients): inside a transaction block,
/// that the transaction was rolled back and must be restarted (40001), unless the statement
/// was committing it; then, or for a write outside a block, that its outcome is unknown
/// (08007); otherwise that the connection failed (08006).
pub(super) fn lost(
    prior: ReadyStatus,
    ran: &[Arc<StmtDef>],
    server: &sluice_core::Server,
    e: &std::io::Error,
) -> (&'static str, String) {
    let what = format!(
        "lost the connection to server {}{}: {e}",
        server.name,
        server.failure_note()
    );
    let commits = ran.iter().any(|d| d.info.commits_block());
    let writes = ran
        .iter()
        .any(|d| d.info.route == sluice_core::router::Route::Write);
    if prior != ReadyStatus::Idle && !commits {
        (
            "40001",
            format!("sluice: the transaction was rolled back: {what}; restart the transaction"),
        )
    } else if commits || (prior == ReadyStatus::Idle && writes) {
        (
            "08007",
            format!("sluice: {what}; the statement's outcome is unknown: it may have been committed or not"),
        )
    } else {
        ("08006", format!("sluice: {what}"))
    }
}
