//! A plain read: a lone simple query that the scanner finds is one read and nothing else
//! (no setting, no pin, no transaction control, no `EXECUTE`, no `COPY`, no `set_config`),
//! from a session that holds no connection and has nothing in play (no transaction block, no
//! pin, no deferred `BEGIN`, no batch owed answers, no write to read back). It is most of the
//! traffic of a read-heavy client that uses the simple protocol (pgbench's select-only,
//! psql, drivers that interpolate parameters), and it is run on a path of its own that leaves out what such a unit cannot need: the rewriting of statement
//! names ([`super::forward`] sends a simple query as it is), the checks of prepared statements'
//! results, answers owed by an earlier batch, the read-your-writes position (a read moves
//! none). Everything it does is done by the functions the general path ([`Session::unit`])
//! calls — routing, lending, counting, tracking — so the two cannot drift apart; only what
//! the general path does for every unit and a plain read provably does not need is left out.
//! Its first cut saved 668 of the 10,448 instructions sluice spent on a select-only
//! transaction at 16 clients (callgrind, `docs/benchmarks.md`, the twenty-fifth stop).

use super::relay::{relay_simple, RelayError, SimpleFailed};
use super::session::{Session, SessionError};
use super::unit::{Defs, End, Unit};
use crate::backend::PgConn;
use crate::wire::ReadyStatus;
use sluice_core::router::Route;
use sluice_core::Lease;

impl Session {
    /// `unit` (its statements `defs`) is a plain read the session may run on the short path.
    pub(super) fn is_plain_read(&self, unit: &Unit, defs: &Defs) -> bool {
        let [(_, def)] = &defs[..] else {
            return false;
        };
        if unit.end != End::Query
            || unit.msgs.len() != 1
            || self.lease.is_some()
            || self.status != ReadyStatus::Idle
            || self.pins != 0
            || self.refused_to_sync
            || self.held_by_flush
            || self.cancels_held
            || self.deferred_begin.is_some()
            || self.owed.is_some()
            || self.skipping
            || self.copies_open != 0
            || self.ryw.dirty
        {
            return false;
        }
        let i = &def.info;
        // (The scanner's route, not the configured read-only functions': a statement that
        // calls a function it does not know is counted a write by `Sequences`.)
        i.route == Route::Read
            && i.user_calls.is_none()
            && i.statements == 1
            && i.changes.is_empty()
            && i.pins == 0
            && i.unpins == 0
            && !i.commits
            && !i.rolls_back
            && !i.to_savepoint
            && i.chains.is_none()
            && i.begin.is_none()
            && !i.read_only_txn
            && !i.primary_txn
            && i.deallocate.is_none()
            && !i.copy_in
            && i.read_back.is_none()
        // (An `EXECUTE`, which sluice may answer itself, is never a read by the scanner: see
        // the test below.)
    }

    /// A read whose connection `lease` was lost (`e`) before any of its answer reached the
    /// client may run once more elsewhere: only where running it twice cannot write twice or
    /// undo what the client asked. So the server must be a standby (a read that writes
    /// through a view, an operator or a trigger the scanner cannot see fails there, where on
    /// the primary it may have committed before its connection was lost); the loss must be
    /// the connection's end, not a `read_timeout` (the statement may still run) nor a message
    /// sluice refused (over its size limit: the server answered); and no cancel request went
    /// to the server for it (the client asked it to stop).
    fn may_run_again(&self, lease: &Lease<Box<PgConn>>, e: &std::io::Error) -> bool {
        use std::io::ErrorKind::{InvalidData, TimedOut};
        let standby = lease.conn_ref().params.get("in_hot_standby");
        !matches!(e.kind(), TimedOut | InvalidData)
            && standby.is_some_and(|v| v == "on")
            && !self.handle.cancel_sent()
    }

    /// Runs a plain read ([`Session::is_plain_read`]); its statement is taken from `defs`.
    /// A read whose connection is lost before any of its answer reached the client, on a
    /// standby, runs once more, routed afresh, on another connection (see
    /// [`Session::may_run_again`]): the session goes on, where a statement that may have
    /// written ends it (its outcome unknown).
    pub(super) async fn plain_read(
        &mut self,
        unit: &Unit,
        defs: &mut Defs,
    ) -> Result<(), SessionError> {
        let decision = match self.route(unit, defs) {
            Ok(d) => d,
            Err(msg) => return self.refuse_unit(unit, "42704", &msg).await,
        };
        let Some((_, def)) = defs.pop() else {
            return Err(SessionError::Refused("no statement".into()));
        };
        let started = std::time::Instant::now();
        let mut again = true;
        let (mut lease, relayed) = loop {
            if let Err(no) = self.attach(&decision).await {
                return self.refuse_no_connection(unit, no).await;
            }
            (self.implicit_reads_only, self.implicit_suspended) = (true, false);
            if self.cancelled_before_sending() {
                return self.refuse_cancelled(unit).await;
            }
            let discard_first = self.take_sequence_discard();
            let Some(mut lease) = self.lease.take() else {
                return Err(SessionError::Refused("no connection".into()));
            };
            let target = (lease.server().clone(), lease.conn_ref().backend_key.0);
            let ticket = lease.conn_ref().gate.ticket();
            self.handle
                .begin_statement(target, ticket, Some((def.sql.clone(), started)));
            // As any simple query, it destroys the unnamed statement and portal.
            self.unnamed = None;
            self.lease_has_unnamed = false;
            self.portals.remove(b"");
            let conn = lease.conn();
            let bytes = &self.client.buf[..unit.len];
            let sent = match discard_first {
                true => Box::pin(super::ahead::send(conn, true, None, bytes)).await,
                false => conn.send(bytes).await,
            };
            // (The query stays in the client's buffer until the answer is through.)
            let mut pending = unit.len;
            let relayed = match sent {
                Ok(()) => {
                    let own_pid = self.handle.id;
                    let reported = &mut self.reported;
                    relay_simple(conn, &mut self.client, reported, own_pid, &mut pending).await
                }
                Err(e) => Err(SimpleFailed {
                    error: RelayError::Server(e),
                    untouched: true,
                }),
            };
            self.handle.end_statement(true);
            self.owed_charge = None;
            match relayed {
                Ok(r) => {
                    self.client.consume(pending);
                    break (lease, r);
                }
                Err(SimpleFailed {
                    error: RelayError::Server(e),
                    untouched: true,
                }) if std::mem::take(&mut again) && self.may_run_again(&lease, &e) => {
                    tracing::debug!(session = self.handle.id, server = %lease.server().name, error = %e, "connection lost under a read before it answered: the read runs again");
                    lease.lost();
                }
                Err(f) => {
                    self.client.consume(pending);
                    let ran = [def];
                    return Err(Box::pin(self.relay_failed(
                        lease,
                        f.error,
                        ReadyStatus::Idle,
                        &ran,
                    ))
                    .await);
                }
            }
        };
        let ran = [def];
        self.count(lease.server(), lease.hostgroup(), &ran, &relayed, started);
        if let Some(st) = relayed.status {
            self.status = st;
        }
        self.implicit_suspended |= relayed.suspended;
        self.track(&ran, ReadyStatus::Idle, &relayed, &mut lease);
        self.lease = Some(lease);
        if self.read_back_due() {
            Box::pin(self.ask_after_unit(false, true)).await?;
        }
        self.end_unit(true);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::classify::classify;
    use sluice_core::router::Route;

    /// `answer_alone` answers an `EXECUTE` of another session's statement itself; the short
    /// path leaves it to the general one because the scanner never calls an `EXECUTE` a read
    /// (the statement it runs may write), hint or not.
    #[test]
    fn an_execute_is_never_a_plain_read() {
        for text in [
            &b"EXECUTE s"[..],
            b"execute s(1)",
            b"  /* c */ EXECUTE s",
            b"-- c\nEXECUTE s",
            b"EXECUTE s /* sluice:reader */",
            b"Execute \"S\"",
        ] {
            assert_eq!(classify(text).route, Route::Write, "{text:?}");
        }
    }
}
