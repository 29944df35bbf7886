//! A session's server connection: leased for a routing decision (an idle one at once, else
//! waiting in line), brought to the session's settings, and given back when ReadyForQuery
//! says the transaction is over and nothing pins the session.

use super::session::{put_query, Session, SessionError};
use super::state;
use crate::backend::PgConn;
use crate::wire::{ReadyStatus, Writer};
use sluice_core::Lease;
use std::sync::Arc;

/// SQLSTATE 42602, `invalid_name`: a setting's name under a prefix an extension reserved.
const INVALID_NAME: &str = "42602";

/// Why a session got no connection (boxed: the usual lease is had, and a statement's future
/// should not carry the rare error's room).
#[derive(Debug)]
pub(super) struct NoConnection {
    /// The SQLSTATE the client is to get; empty when the client was told already (FATAL):
    /// the session is over.
    pub code: String,
    /// The message.
    pub message: String,
    /// The rest of a server's error when a server refused the login (detail, hint...), as
    /// the server sent them.
    pub fields: Vec<(u8, String)>,
}

impl NoConnection {
    fn new(code: &str, message: String) -> Box<NoConnection> {
        Box::new(NoConnection {
            code: code.to_string(),
            message,
            fields: Vec::new(),
        })
    }
}

impl Session {
    /// Leases a connection for `decision` and brings it to the session's settings. A
    /// connection lost while its settings are replayed (its server died or closed it since
    /// it was found open) is given up for another one, once: nothing of the session's
    /// statement went there.
    pub(super) async fn attach(
        &mut self,
        decision: &sluice_core::router::Decision,
    ) -> Result<(), Box<NoConnection>> {
        let mut again = true;
        loop {
            self.attach_once(decision).await?;
            // (Its FATAL already went to the client: the code says the session is over.)
            self.sync_settings_of(std::mem::take(&mut again))
                .await
                .map_err(|e| NoConnection::new("", e.to_string()))?;
            if self.lease.is_some() {
                return Ok(());
            }
        }
    }

    /// Leases a connection for `decision` (the primary's when the one chosen has not
    /// replayed the session's last write).
    async fn attach_once(
        &mut self,
        decision: &sluice_core::router::Decision,
    ) -> Result<(), Box<NoConnection>> {
        // Boxed: the usual lease is taken at once, and every statement's future would carry
        // the waiting state (it would no longer fit malloc's per-thread cache).
        if !self.lease_now(decision) {
            Box::pin(self.lease_for(decision)).await?;
        }
        if self.ryw_may_be_behind(decision) && !Box::pin(self.ryw_may_read_here(decision)).await {
            // Not replayed there yet: the primary has it.
            self.release();
            let writer = sluice_core::router::Decision {
                hostgroup: self.fe.topology.router.writer.clone(),
                reason: decision.reason,
            };
            if !self.lease_now(&writer) {
                Box::pin(self.lease_for(&writer)).await?;
            }
        }
        Ok(())
    }

    /// A cancel held while the unit's statement waited for its connection or its settings
    /// (see `cancels_held`) means it does not run: true then (PostgreSQL's error follows, see
    /// [`Session::refuse_cancelled`]; a transaction block not begun on the server yet fails,
    /// see `refuse_unit`), and the connection just leased goes back unless the session is
    /// pinned. In a block the server has, it runs: its failure could not be the server's.
    #[inline(always)]
    pub(super) fn cancelled_before_sending(&mut self) -> bool {
        let open_block = self.status != ReadyStatus::Idle && self.deferred_begin.is_none();
        if std::mem::take(&mut self.cancels_held) && self.handle.take_held_cancel() && !open_block {
            if self.pins == 0 {
                self.release();
            }
            return true;
        }
        false
    }

    /// Leases a connection for `decision`.
    pub(super) async fn lease_for(
        &mut self,
        decision: &sluice_core::router::Decision,
    ) -> Result<(), Box<NoConnection>> {
        let topo = self.fe.topology.clone();
        // Waiting in line: a cancel now is the statement's (see `cancel`).
        self.handle.hold_cancels();
        self.cancels_held = true;
        let handle = self.handle.clone();
        let waited = tokio::select! {
            // The lease first (no random draw): a cancel kept meanwhile still stops the
            // statement, at `cancelled_before_sending`.
            biased;
            r = topo.lease_for(decision, &self.key, &self.fe.connector, |c| c.usable()) => r,
            // Cancelled in line: it ends the wait, as a cancel ends a wait on a lock.
            _ = handle.cancel_kept() => {
                return Err(NoConnection::new("57014", "canceling statement due to user request".into()))
            }
        };
        let lease = waited.map_err(|e| match e {
            sluice_core::AcquireError::Connect(c) if c.sqlstate.is_some() => {
                // What logins were told may no longer hold (see `welcomes`).
                self.fe.welcomes.forget();
                Box::new(NoConnection {
                    code: String::from_utf8_lossy(&c.sqlstate.unwrap_or(*b"08006")).into_owned(),
                    message: c.message,
                    fields: c.fields,
                })
            }
            other => NoConnection::new("08006", format!("sluice: {other}")),
        })?;
        self.leased(lease, decision);
        Ok(())
    }

    /// An idle connection for `decision` leased at once, if there is one (no future).
    pub(super) fn lease_now(&mut self, decision: &sluice_core::router::Decision) -> bool {
        match self
            .fe
            .topology
            .try_lease_for(decision, &self.key, |c| c.usable())
        {
            Some(lease) => {
                self.leased(lease, decision);
                true
            }
            None => false,
        }
    }

    /// Takes `lease` as the session's connection.
    pub(super) fn leased(
        &mut self,
        lease: Lease<Box<PgConn>>,
        decision: &sluice_core::router::Decision,
    ) {
        tracing::trace!(hostgroup = %decision.hostgroup, status = ?self.status, "connection leased");
        self.lease = Some(lease);
        self.lease_has_unnamed = false;
        self.lease_generation = 0;
        self.sequences.leased();
    }

    /// Gives the connection back to the pool.
    pub(super) fn release(&mut self) {
        if let Some(mut lease) = self.lease.take() {
            lease.conn().park();
            tracing::trace!(status = ?self.status, "connection released");
            drop(lease);
        }
    }

    /// Applies the session's settings to the leased connection (one round trip, when they
    /// differ), then queues ParameterStatus for parameters that differ from what the client
    /// saw.
    pub(super) async fn sync_settings(&mut self) -> Result<(), SessionError> {
        self.sync_settings_of(false).await
    }

    /// As [`Session::sync_settings`]; `fresh`: the connection was just leased for a
    /// statement, and is given back if it is lost meanwhile (the session then holds none).
    async fn sync_settings_of(&mut self, fresh: bool) -> Result<(), SessionError> {
        let Some(lease) = &mut self.lease else {
            return Ok(());
        };
        let conn = lease.conn();
        let matched = match self.settings.startup_only() {
            Some(startup) => conn.applied_is(startup, |a| self.settings.matches(a)),
            None => self.settings.matches(conn.applied()),
        };
        if !matched {
            // Boxed: the usual lease needs no round trip, and every statement's future would
            // otherwise carry this one's state.
            Box::pin(self.apply_settings(fresh)).await?;
        }
        // With the session's settings, the connection reports what its own defaults give:
        // what the client was told and relies on stays (see `state::kept_reports`).
        if let Some(lease) = &mut self.lease {
            let conn = lease.conn();
            if !self.reported.is_empty() && !Arc::ptr_eq(&self.reported, &conn.params) {
                let kept = state::kept_reports(&self.reported, &conn.params, &self.settings);
                if !kept.is_empty() {
                    kept.into_iter().for_each(|k| self.settings.apply(k));
                    Box::pin(self.apply_settings(fresh)).await?;
                }
            }
        }
        self.lease_generation = self.settings.generation();
        self.report_parameters();
        Ok(())
    }

    /// Brings the leased connection to the session's settings (a hidden round trip); a
    /// `fresh` lease lost meanwhile is given back (see [`Session::attach`]).
    pub(super) async fn apply_settings(&mut self, fresh: bool) -> Result<(), SessionError> {
        let mut forgot = false;
        loop {
            let Some(lease) = &mut self.lease else {
                return Ok(());
            };
            let desired = self.settings.desired();
            let Some(sql) = state::difference(lease.conn().applied(), &desired) else {
                return Ok(());
            };
            let e = match self.replay(&sql).await {
                Ok(_) => {
                    if let Some(lease) = &mut self.lease {
                        lease.conn().set_applied(desired);
                    }
                    return Ok(());
                }
                Err(e) => e,
            };
            if e.status.is_none() && fresh {
                // Lost before the session's statement went: `attach` leases another one.
                tracing::debug!(session = self.handle.id, error = %e, "connection lost while its settings were replayed: another one is leased");
                if let Some(mut lease) = self.lease.take() {
                    lease.lost();
                }
                return Ok(());
            }
            // The replay ran as one implicit transaction: the connection is as it was.
            if e.code == INVALID_NAME
                && !forgot
                && self.status == ReadyStatus::Idle
                && self.forget_removed_settings().await
            {
                forgot = true;
                continue;
            }
            // The server's code (a startup parameter with an invalid value: 22023, as a
            // direct login gets it). A new session (it has seen no parameter yet): its
            // startup parameters, in the server's own words (detail and all), as a direct
            // login hears them.
            if self.reported.is_empty() {
                return Err(self
                    .end_over_connection_with(&e.code, e.message, &e.fields)
                    .await);
            }
            let msg = format!(
                "sluice: cannot restore the session's settings: {}",
                e.message
            );
            return Err(self.end_over_connection(&e.code, msg).await);
        }
    }

    /// After a replay failed with 42602: forgets the session's custom settings that the
    /// connection refuses by name, because an extension loaded there reserved their prefix
    /// since they were made (directly, PostgreSQL removes such a setting from the session when
    /// the extension loads, with this WARNING). True if any was forgotten.
    async fn forget_removed_settings(&mut self) -> bool {
        let custom: Vec<(String, String)> = self
            .settings
            .made_custom()
            .map(|(n, s)| (n.to_string(), s.to_string()))
            .collect();
        let mut forgot = false;
        for (name, stmt) in custom {
            let Err(e) = self.replay(&stmt).await else {
                continue;
            };
            if e.code != INVALID_NAME {
                continue;
            }
            self.settings.forget(&name);
            forgot = true;
            let prefix = name.split('.').next().unwrap_or_default();
            let msg = format!("invalid configuration parameter name \"{name}\", removing it");
            let detail = format!("\"{prefix}\" is now a reserved prefix.");
            self.client.queue_messages(|w| {
                w.notice_response(&[
                    (b'S', "WARNING"),
                    (b'V', "WARNING"),
                    (b'C', INVALID_NAME),
                    (b'M', &msg),
                    (b'D', &detail),
                ])
            });
        }
        forgot
    }

    /// Inside a transaction block, sets startup parameters a `RESET` there returned to the
    /// server's defaults back to their startup values (`stmts`, see
    /// [`super::state::Settings::take_block_resets`]): the block's later statements run with
    /// them, as they would directly, and they commit or roll back with the `RESET`. They run
    /// as statements of sluice's own: the block's unnamed statement and portal stay.
    pub(super) async fn restore_startup_values(
        &mut self,
        stmts: &[Box<str>],
    ) -> Result<(), SessionError> {
        let Some(lease) = &mut self.lease else {
            return Ok(());
        };
        if stmts.is_empty() {
            return Ok(());
        }
        let mut q = Vec::new();
        for sql in stmts.iter().flat_map(|s| super::startup::one_by_one(s)) {
            put_own(&mut q, sql.as_bytes());
        }
        super::forward::put(&mut q, b'S', &[]);
        self.handle.hold_cancels();
        self.cancels_held = true;
        let conn = lease.conn();
        let ran = match conn.send(&q).await {
            Ok(()) => hidden_answers(conn, 1).await,
            Err(e) => Err(HiddenError::lost(e)),
        };
        let why = match ran {
            Ok(ReadyStatus::InTransaction) => {
                self.report_parameters();
                return Ok(());
            }
            Err(e) => e.message,
            Ok(status) => format!("the transaction block is {status:?}"),
        };
        // The block's state is not what the client was told: it cannot go on.
        let msg = format!("sluice: cannot restore the session's startup settings: {why}");
        Err(self.end_over_connection("08006", msg).await)
    }

    /// Runs `sql`, settings the session's own, on the leased connection, its answers not
    /// relayed (ParameterStatus noted). Not the client's to cancel: a cancel now is its next
    /// statement's.
    async fn replay(&mut self, sql: &str) -> Result<ReadyStatus, HiddenError> {
        let Some(lease) = &mut self.lease else {
            return Ok(self.status);
        };
        let mut q = Vec::with_capacity(sql.len() + 6);
        put_query(&mut q, sql.as_bytes());
        self.handle.hold_cancels();
        self.cancels_held = true;
        // A simple query: the connection's unnamed statement is gone (parsed again where
        // the client names it next).
        self.lease_has_unnamed = false;
        run_hidden(lease.conn(), &q).await
    }

    /// Ends the session on a failure over its connection: the connection closed, never lent
    /// again (what it holds is not what the session was told), and the client told (FATAL).
    pub(super) async fn end_over_connection(&mut self, code: &str, msg: String) -> SessionError {
        self.end_over_connection_with(code, msg, &[]).await
    }

    /// As [`Session::end_over_connection`], the FATAL followed by `more` fields.
    async fn end_over_connection_with(
        &mut self,
        code: &str,
        msg: String,
        more: &[(u8, String)],
    ) -> SessionError {
        if let Some(mut lease) = self.lease.take() {
            lease.discard();
        }
        let _ = self.client.fatal_with(code, &msg, more).await;
        SessionError::Refused(msg)
    }

    /// Queues ParameterStatus for the leased connection's parameters the client has not
    /// seen (sent ahead of the answer to what comes next: no write of their own).
    pub(super) fn report_parameters(&mut self) {
        let Some(lease) = &mut self.lease else {
            return;
        };
        let conn = lease.conn();
        if Arc::ptr_eq(&self.reported, &conn.params) {
            return;
        }
        let mut w = Writer::new();
        if self.reported.is_empty() {
            // A new session has seen nothing: all of them, and the connection's map shared.
            for (k, v) in conn.params.iter() {
                w.parameter_status(k, v);
            }
            self.reported = conn.params.clone();
        } else {
            for (k, v) in conn.params.iter() {
                // Whether the server is a standby is the server's, not the session's: a
                // client connected directly hears it once, at its login.
                if k == "in_hot_standby" && self.reported.contains_key(k) {
                    continue;
                }
                if self.reported.get(k) != Some(v) {
                    w.parameter_status(k, v);
                    Arc::make_mut(&mut self.reported).insert(k.clone(), v.clone());
                }
            }
            // Seen exactly what the connection has: both keep the more widely shared of the
            // two equal maps, so that an idle session holds no copy of its own and equal
            // maps converge to one, found equal by pointer next time, without comparing.
            if self.reported == conn.params {
                if Arc::strong_count(&self.reported) > Arc::strong_count(&conn.params) {
                    conn.params = self.reported.clone();
                } else {
                    self.reported = conn.params.clone();
                }
            }
        }
        self.client.queue(w.as_bytes());
    }

    /// Sends a message sluice owes the server (a deferred BEGIN, a Sync that ends a flushed
    /// batch), consuming the answer: the status the last ReadyForQuery gives (a batch may
    /// have opened a transaction block itself).
    pub(super) async fn hidden(&mut self, msg: &[u8]) -> Result<ReadyStatus, SessionError> {
        let Some(lease) = &mut self.lease else {
            return Ok(self.status);
        };
        match run_hidden(lease.conn(), msg).await {
            Ok(status) => Ok(status),
            Err(e) => {
                let msg = format!("sluice: {}", e.message);
                let _ = self.client.fatal("08006", &msg).await;
                Err(SessionError::Refused(msg))
            }
        }
    }
}

/// Why a query sluice owed the server failed: the server's error (SQLSTATE, message, and the
/// rest of its fields but the severity), or the connection's (08006).
#[derive(Debug)]
pub(super) struct HiddenError {
    pub(super) code: String,
    pub(super) message: String,
    pub(super) fields: Vec<(u8, String)>,
    /// The status the ReadyForQuery after the error gave (none if the connection was lost).
    pub(super) status: Option<ReadyStatus>,
}

impl std::fmt::Display for HiddenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl HiddenError {
    fn lost(e: impl std::fmt::Display) -> HiddenError {
        HiddenError {
            code: "08006".into(),
            message: e.to_string(),
            fields: Vec::new(),
            status: None,
        }
    }
}

/// Runs the simple queries sluice owes the connection (one or more, in one write) and reads
/// their answers (ParameterStatus noted): the last ReadyForQuery's status, or the server's
/// error if one failed.
pub(super) async fn run_hidden(conn: &mut PgConn, q: &[u8]) -> Result<ReadyStatus, HiddenError> {
    conn.send(q).await.map_err(HiddenError::lost)?;
    hidden_answers(conn, queries(q)).await
}

/// Reads the answers to `owed` simple queries sluice sent (ParameterStatus noted), up to the
/// last one's ReadyForQuery: its status, or the server's error if one failed.
pub(super) async fn hidden_answers(
    conn: &mut PgConn,
    mut owed: usize,
) -> Result<ReadyStatus, HiddenError> {
    let mut error = None;
    loop {
        let (tag, body) = conn.next_owned().await.map_err(HiddenError::lost)?;
        match tag {
            b'S' => conn.note_parameter(&body),
            b'E' if error.is_none() => {
                let parts = crate::wire::error_parts(&body).unwrap_or_default();
                error = Some(HiddenError {
                    code: parts.code.unwrap_or_else(|| "08006".into()),
                    message: parts.message.unwrap_or_default(),
                    fields: parts.rest,
                    status: None,
                });
            }
            b'Z' => {
                owed = owed.saturating_sub(1);
                if owed == 0 {
                    let status = body.first().copied().and_then(ReadyStatus::from_byte);
                    return match error {
                        Some(e) => Err(HiddenError { status, ..e }),
                        None => Ok(status.unwrap_or(ReadyStatus::Idle)),
                    };
                }
            }
            _ => {}
        }
    }
}

/// How many messages `bytes` holds (each answered by one ReadyForQuery).
fn queries(mut bytes: &[u8]) -> usize {
    let mut n = 0;
    while let Ok(Some((_, len))) = crate::wire::read_message(bytes, usize::MAX) {
        n += 1;
        bytes = &bytes[len..];
    }
    n
}

impl Session {
    /// The server stands at a Sync on the session's connection, every answer the client is
    /// owed read, nothing skipped: a round trip of sluice's own may run there. Inside a
    /// batch (after a Flush, or a part of one sent ahead of its end) it would run inside
    /// the client's implicit transaction (a simple query commits it), and its answers would
    /// be taken for the batch's: the batch's later statements run with the server's
    /// defaults, as after a `RESET` in one text.
    pub(super) fn server_settled(&self) -> bool {
        self.owed.is_none()
            && !self.skipping
            && self.lease.as_ref().is_some_and(|l| !l.conn_ref().unsynced)
    }

    /// Before a unit on the connection the session holds (the server settled): its
    /// settings replayed where they changed, as simple queries only outside a transaction
    /// block (inside one they would drop its unnamed portal, or fail in a failed one: a
    /// block a batch opened meanwhile runs with what the connection has, until it ends);
    /// and startup values a `RESET` in the open block returned to the server's defaults set
    /// again there, as statements of sluice's own.
    pub(super) async fn settle_held_settings(&mut self) -> Result<(), SessionError> {
        if self.status == ReadyStatus::Idle && self.settings.generation() != self.lease_generation {
            self.sync_settings().await?;
        }
        if let Some(stmts) = self.settings.take_block_resets() {
            if self.status == ReadyStatus::InTransaction && self.deferred_begin.is_none() {
                Box::pin(self.restore_startup_values(&stmts)).await?;
            }
        }
        Ok(())
    }
}

/// The name of the statement and the portal sluice's own statements run under on a
/// connection a session holds ([`put_own`]).
const OWN: &[u8] = b"sluice_own";

/// Puts `sql`, one statement, as a statement and a portal of sluice's own, run and closed
/// again, without a Sync. A simple query drops the unnamed statement and the unnamed portal;
/// this leaves the client's as they were (a suspended portal inside its transaction block
/// goes on where it stopped). Answered by ParseComplete, BindComplete, the statement's
/// answers and two CloseCompletes; after an error the server skips to the next Sync.
pub(super) fn put_own(out: &mut Vec<u8>, sql: &[u8]) {
    use super::forward::put;
    // (No parameter types; no formats, no parameters, no result formats; no row limit.)
    put(out, b'P', &[OWN, b"\0", sql, b"\0\0\0"]);
    put(out, b'B', &[OWN, b"\0", OWN, b"\0\0\0\0\0\0\0"]);
    put(out, b'E', &[OWN, b"\0\0\0\0\0"]);
    put(out, b'C', &[b"P", OWN, b"\0"]);
    put(out, b'C', &[b"S", OWN, b"\0"]);
}

#[cfg(test)]
mod tests {
    #[test]
    fn own_statements_are_well_formed_and_name_no_unnamed_one() {
        let mut out = Vec::new();
        super::put_own(&mut out, b"SAVEPOINT s");
        assert_eq!(
            crate::wire::message::split_messages(&out),
            [
                (b'P', b"sluice_own\0SAVEPOINT s\0\0\0".to_vec()),
                (b'B', b"sluice_own\0sluice_own\0\0\0\0\0\0\0".to_vec()),
                (b'E', b"sluice_own\0\0\0\0\0".to_vec()),
                (b'C', b"Psluice_own\0".to_vec()),
                (b'C', b"Ssluice_own\0".to_vec()),
            ]
        );
    }
}
