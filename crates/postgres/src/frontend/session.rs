//! A client session: after login, units of client messages are routed when the session holds
//! no server connection (reads to replicas, everything that can write or lock to the
//! primary, hints and rules as for MySQL), forwarded on a leased connection brought to the
//! session's settings, and relayed back. ReadyForQuery is the authority on transactions:
//! `T` and `E` keep the connection; `I` gives it back, unless something pins the session.

use super::ahead;
use super::client::Client;
use super::long_texts;
use super::names::NameMap;
use super::relay::{relay, RelayError};
use super::sequences::{self, Sequences};
use super::state::Settings;
use super::unit::{self, End, Names, Unit};
use crate::backend::statements::StmtDef;
use crate::backend::PgConn;
use crate::front::PostgresFrontend;
use crate::wire::{ReadyStatus, Writer};
use sluice_core::{Lease, PoolKey};
use sluice_runtime::listener::ListenerInfo;
use sluice_runtime::SessionHandle;
use std::collections::BTreeMap;
use std::sync::Arc;

/// One client session.
pub struct Session {
    pub(super) fe: Arc<PostgresFrontend>,
    pub(super) client: Client,
    pub(super) handle: Arc<SessionHandle>,
    pub(super) key: PoolKey,
    pub(super) listener: Arc<ListenerInfo>,
    pub(super) settings: Settings,
    pub(super) pins: u32,
    /// Pins released inside the open transaction block: released if it commits (a
    /// `DISCARD TEMP` or an `UNLISTEN` rolled back released nothing).
    pub(super) pending_unpins: u32,
    pub(super) statements: NameMap<Arc<StmtDef>>,
    /// Where its prepared statements are charged (its share of the process's budget).
    pub(super) statement_budget: sluice_core::Share,
    pub(super) unnamed: Option<Arc<StmtDef>>,
    pub(super) portals: super::names::Portals<Arc<StmtDef>>,
    pub(super) lease: Option<Lease<Box<PgConn>>>,
    /// The settings generation the leased connection has.
    pub(super) lease_generation: u64,
    /// The leased connection's unnamed statement is the session's.
    pub(super) lease_has_unnamed: bool,
    /// The status the client last saw.
    pub(super) status: ReadyStatus,
    /// Read-your-writes.
    pub(super) ryw: super::ryw::Ryw,
    /// ParameterStatus values the client has seen.
    pub(super) reported: Arc<BTreeMap<String, String>>,
    /// A `BEGIN` not sent yet: the connection is chosen by the first statement after it.
    pub(super) deferred_begin: Option<super::begin::DeferredBegin>,
    /// The connection is held only because the last unit ended with a Flush outside a
    /// transaction (asyncpg prepares with Parse, Describe, Flush): the next unit may need
    /// another one.
    pub(super) held_by_flush: bool,
    /// What ran in the leased connection's implicit transaction (since it was leased, up to
    /// a Sync) is all reads by the scanner: nothing there has to commit with what follows.
    pub(super) implicit_reads_only: bool,
    /// A portal was suspended in that implicit transaction (see [`Self::leave_flushed`]).
    pub(super) implicit_suspended: bool,
    /// The last unit left the server inside its implicit transaction (it ended with a
    /// Flush, or was sent ahead of its end, outside a block): what the batch changes commits
    /// at its Sync, or not at all, and waits for it as a block's changes do (see `track`).
    pub(super) implicit_open: bool,
    /// Something in that implicit transaction failed: the server rolls it back at the Sync.
    pub(super) implicit_failed: bool,
    /// An error came before a Sync (the unit ended with a Flush): the server skips every
    /// message up to the next Sync, so their answers are not awaited.
    pub(super) skipping: bool,
    /// Answers owed by a batch forwarded without its end (the client pipelines past the
    /// unit bounds without a Sync or Flush): awaited with the next unit's.
    pub(super) owed: Option<Box<unit::Exps>>,
    /// What `owed` holds, charged to `[proxy] max_request_memory` (see [`super::owed`]);
    /// boxed, and only while answers are owed: every idle session carries the field.
    pub(super) owed_charge: Option<Box<super::owed::OwedCharge>>,
    /// Executes of `COPY … FROM STDIN` in a batch forwarded without its end whose data has
    /// not ended yet (see [`unit::Names::copies_open`]).
    pub(super) copies_open: u32,
    /// The session's sequence state (`currval`, `lastval`) and where it lives: see
    /// [`super::sequences`].
    pub(super) sequences: super::sequences::Sequences,
    /// Not 0 while the session's open transaction block has changed settings: the
    /// fingerprint statements parsed then are given (no one else's).
    pub(super) block_settings: u64,
    /// sluice refused a unit that did not end with a Sync: as PostgreSQL after an error in an
    /// extended batch, what the client sends up to its next Sync is skipped.
    pub(super) refused_to_sync: bool,
    /// A Parse of the session's has carried a statement that changes settings (`SET`,
    /// `RESET`, `set_config` …): only then can a Bind run one, and only then does
    /// [`Session::settings_refused`] look up what each Bind binds. Never cleared: a
    /// `true` that is no longer needed costs that lookup, never a wrong answer.
    pub(super) parsed_setting_changes: bool,
    /// A Parse of the session's has carried a `BEGIN`: only then can a Bind without a Parse
    /// be one sluice answers itself (see [`Session::answer_begin`]). Never cleared, as above.
    pub(super) parsed_begin: bool,
    /// The registry holds cancel requests for the session's statement (see
    /// [`sluice_runtime::SessionHandle::hold_cancels`]) until the unit checks for one.
    pub(super) cancels_held: bool,
    /// The session's place among the clients admitted (given back when it ends).
    pub(super) _admitted: tokio::sync::OwnedSemaphorePermit,
    /// The session counted against its user's `max_connections` (given back when it ends).
    pub(super) _counted: sluice_runtime::users::UserConnection,
}

/// Why a session ended.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The client left or broke the protocol.
    #[error("client: {0}")]
    Client(String),
    /// Refused (the client was told).
    #[error("{0}")]
    Refused(String),
}

impl Session {
    /// Serves units until the client terminates.
    pub(super) async fn run(&mut self) -> Result<(), SessionError> {
        loop {
            let unit = self.next_unit().await?;
            if unit.end == End::Terminate {
                return Ok(());
            }
            // A unit with a long text has its statements classified off the loop, on the
            // general path (see `long_texts`): none here.
            let mut defs = match long_texts::has_long_text(&unit) {
                true => unit::Defs::new(),
                false => {
                    let settings = self.analysis_settings();
                    unit::statement_defs(
                        &self.client.buf,
                        &unit,
                        settings,
                        &self.key,
                        &mut self.statement_budget,
                        &self.fe,
                    )
                }
            };
            // Boxed: an idle session's future holds only what waiting for the next unit
            // takes, not the state of relaying one. A plain read takes a short path (see
            // `plain`). One await for either: the unit and its statements are then held at
            // one point only, where they share their room with the idle wait's.
            let running = if self.is_plain_read(&unit, &defs) {
                Running::Plain(Box::pin(self.plain_read(&unit, &mut defs)))
            } else {
                Running::General(Box::pin(self.unit(&unit, &defs)))
            };
            running.await?;
        }
    }

    /// The fingerprint of the analysis settings a statement parsed now is analysed under.
    pub(super) fn analysis_settings(&mut self) -> u64 {
        if self.block_settings != 0 {
            return self.block_settings;
        }
        self.settings.analysis_fingerprint()
    }

    /// Runs one unit (its statements classified in `defs`; none yet for a unit with a long
    /// text: classified here, off the loop).
    async fn unit(&mut self, unit: &Unit, mut defs: &unit::Defs) -> Result<(), SessionError> {
        // (Boxed, and `defs` pointed at them: every unit's future is allocated, and within
        // 1,024 bytes it is a small object, see the tests below.)
        let classified: Box<unit::Defs>;
        if defs.is_empty() && long_texts::has_long_text(unit) {
            classified = Box::pin(self.long_text_defs(unit)).await?;
            defs = &classified;
        }
        // (First: a Parse that is answered or refused below may be bound later all the same.)
        self.note_parses(unit, defs);
        if std::mem::take(&mut self.cancels_held) {
            // Held for an earlier unit that ended before its check (refused): not this one's.
            self.handle.take_held_cancel();
        }
        if self.refused_to_sync {
            return self.skip_refused(unit).await;
        }
        if std::mem::take(&mut self.held_by_flush) {
            Box::pin(self.leave_flushed(unit, defs)).await?;
        }
        // (A DEALLOCATE of a statement only sluice holds is answered also while a connection
        // is held: the server does not know the client's name. In a failed transaction the
        // server's 25P02 answers.)
        let answered = match unit.end {
            End::Query if self.status != ReadyStatus::Failed || self.lease.is_none() => {
                self.answer_alone(unit, defs).await?
            }
            End::Sync if self.lease.is_none() => {
                self.answer_parses(unit, defs).await? || self.answer_begin(unit, defs).await?
            }
            // A Flush alone asks the server for nothing when the session holds none.
            End::Flush if self.lease.is_none() && unit.msgs.len() == 1 => {
                self.client.consume(unit.len);
                true
            }
            _ => false,
        };
        // Boxed, as the other rare paths below: the unit's future, allocated for every unit,
        // stays small enough for the allocator's fast path (1,024 bytes, see the test below).
        if answered
            || (self.block_failed_before_server()
                && Box::pin(self.fail_block_on_server(unit)).await?)
        {
            return Ok(());
        }
        if let Some((code, msg)) = self.settings_refused(unit, defs) {
            return Box::pin(self.refuse_settings(unit, code, &msg)).await;
        }
        if self.lease.is_none() {
            let decision = match self.route(unit, defs) {
                Ok(d) => d,
                Err(msg) => return self.refuse_unit(unit, "42704", &msg).await,
            };
            if let Err(no) = self.attach(&decision).await {
                return self.refuse_no_connection(unit, no).await;
            }
            (self.implicit_reads_only, self.implicit_suspended) = (true, false);
        } else {
            if let Some(msg) = self.pins_on_a_replica(unit, defs) {
                return Box::pin(self.refuse_in_block(unit, "0A000", &msg)).await;
            }
            if self.server_settled() {
                self.settle_held_settings().await?;
            }
        }
        if self.cancelled_before_sending() {
            return self.refuse_cancelled(unit).await;
        }
        let mut discard_first = self.take_sequence_discard();
        // The deferred BEGIN goes in the same write as the unit when the server answers the
        // unit without waiting for more (see `ahead`); else in a round trip of its own, with
        // the discard in the same write.
        let mut begin_ahead = None;
        if let Some(begin) = self.deferred_begin.take() {
            if ahead::takes_begin(unit.end) && !self.skipping {
                begin_ahead = Some(begin);
            } else {
                let begin = match std::mem::take(&mut discard_first) {
                    true => sequences::discard_then(&begin.query),
                    false => begin.query.into_vec(),
                };
                Box::pin(self.hidden(&begin)).await?;
            }
        }
        let prior = self.status;
        tracing::trace!(sid = self.handle.id, msgs = ?unit.msgs.iter().map(|m| m.0 as char).collect::<String>(), status = ?self.status, "unit");
        let Some(mut lease) = self.lease.take() else {
            return Err(SessionError::Refused("no connection".into()));
        };
        // A cancel may reach the connection while it runs this unit (not while sluice's own
        // queries run there: those are not the client's to cancel).
        let target = (lease.server().clone(), lease.conn_ref().backend_key.0);
        let ticket = lease.conn_ref().gate.ticket();
        self.handle
            .set_backend_for_cancel(Some(target), Some(ticket));
        let conn = lease.conn();
        let names = Names {
            statements: &mut self.statements,
            unnamed: &mut self.unnamed,
            conn_has_unnamed: &mut self.lease_has_unnamed,
            portals: &mut self.portals,
            txn_failed: self.status == ReadyStatus::Failed,
            // (After a Flush, only where all of the batch was answered.)
            check_shapes: (!conn.unsynced || (self.owed.is_none() && self.copies_open == 0))
                && !self.skipping
                && self.status != ReadyStatus::Failed,
            copies_open: &mut self.copies_open,
            charge: &mut self.client.charge,
        };
        let unit::Forwarded {
            out,
            mut exps,
            ran,
            checks,
            copied,
        } = unit::forward(&self.client.buf[..unit.len], unit, defs, conn, names);
        if !checks.is_empty() {
            // Boxed: rare (see `shapes`); the unit's future holds only the box.
            let in_block = self.status == ReadyStatus::InTransaction && begin_ahead.is_none();
            if let Err(e) = Box::pin(self.check_shapes(conn, checks, &mut exps, in_block)).await {
                lease.discard();
                return Err(e);
            }
        }
        let calls = unit.msgs.iter().any(|m| m.0 == b'F');
        if calls && super::calls::makes_state(unit, &self.client.buf) {
            // Whatever became of the call: the connection holds the truth.
            self.pins |= super::state::pin::UNREAD_CALL;
        }
        self.sequences.forwarded(conn, &ran, calls);
        if unit.end == End::Partial {
            // The rest of the batch may name what this part parses before the server answers.
            exps.take_provisionally(&mut self.statements);
            self.owe_part(exps.held_bytes());
        }
        // A part of a batch without its end, or what follows one: the server's answers to
        // the parts before are read while it is sent (see `PgConn::send_reading`).
        conn.parts = unit.end == End::Partial || self.owed.is_some();
        // Answers still owed by a batch forwarded without its end come first. (Merged here,
        // in one binding: a second one would take its own place in the unit's future.)
        if let Some(mut owed) = self.owed.take() {
            owed.append(&mut exps);
            exps = *owed;
        }
        let started = std::time::Instant::now();
        if let Some(first) = ran.first() {
            self.handle.set_statement_shared(first.sql.clone(), started);
        }
        let sent = match out {
            _ if discard_first || begin_ahead.is_some() => {
                let unit_bytes = out.as_deref().unwrap_or(&self.client.buf[..unit.len]);
                let begin = begin_ahead.as_ref();
                let sent = Box::pin(ahead::send(conn, discard_first, begin, unit_bytes)).await;
                if let Some(out) = out {
                    sluice_runtime::buffers::give_write(out);
                }
                sent
            }
            // The unit as the client wrote it: straight from its buffer.
            None => conn.send(&self.client.buf[..unit.len]).await,
            Some(out) => {
                let sent = conn.send(&out).await;
                sluice_runtime::buffers::give_write(out);
                sent
            }
        };
        self.client.charge.shrink(copied);
        self.client.consume(unit.len);
        if unit.end != End::Partial {
            // Whatever COPY is still open takes its data from the client (see `relay`).
            self.copies_open = 0;
        }
        let sent = match sent {
            Ok(()) => match &begin_ahead {
                Some(begin) => {
                    Box::pin(ahead::begun(conn, &mut self.client, unit.end, begin)).await
                }
                None => Ok(()),
            },
            Err(e) => Err(RelayError::Server(e)),
        };
        let relayed = match sent {
            Ok(()) => {
                if self.skipping {
                    skip_to_sync(conn, &mut exps, &mut self.skipping, &mut self.statements);
                }
                if unit.end == End::Partial {
                    self.owed = Some(Box::new(exps));
                    Ok(Default::default())
                } else {
                    let own_pid = self.handle.id;
                    relay(
                        conn,
                        &mut self.client,
                        &mut exps,
                        &mut self.reported,
                        own_pid,
                    )
                    .await
                }
            }
            Err(e) => Err(e),
        };
        // (A batch forwarded without its end may still run there: cancels reach it until the
        // unit that ends it is relayed.)
        self.handle.end_statement(unit.end != End::Partial);
        if let Some(refused) = self.owed_refusal(&relayed, lease.conn_ref().buffered().len()) {
            self.owed = None;
            self.lease = Some(lease);
            // Boxed: rare, and the largest state the unit's future would hold otherwise.
            return Err(Box::pin(self.end_over_connection(refused.0, refused.1)).await);
        }
        let mut relayed = match relayed {
            Ok(r) => r,
            // Boxed: rare, and the session ends.
            Err(e) => return Err(Box::pin(self.relay_failed(lease, e, prior, &ran)).await),
        };
        self.count(lease.server(), lease.hostgroup(), &ran, &relayed, started);
        // Within STATEMENTS_PER_SESSION: forward() refused the Parse otherwise.
        for reg in std::mem::take(&mut relayed.registered) {
            if reg.provisional {
                reg.let_go(&mut self.statements);
            } else {
                self.statements.insert(reg.client_name, reg.def);
            }
        }
        if let Some(st) = relayed.status {
            self.status = st;
        }
        self.implicit_reads_only &= !calls && reads_only(&ran);
        self.implicit_suspended |= relayed.suspended;
        self.track(&ran, prior, &relayed, &mut lease);
        self.lease = Some(lease);
        // (A Sync the server ignored, sent with an extended COPY that something else than a
        // Sync followed: the unit did not end there, see `relay`.)
        let ended =
            matches!(unit.end, End::Sync | End::Query | End::Function) && relayed.status.is_some();
        let position = self.ryw_note(&ran, ended);
        let read_back = ended && self.read_back_due();
        if position || read_back {
            // Boxed: most units need neither, and every unit's future would carry them.
            Box::pin(self.ask_after_unit(position, read_back)).await?;
        }
        if relayed.failed && relayed.status.is_none() && !ended {
            // The server now skips what comes up to the next Sync (unless the relay passed
            // on a Sync already: the one after an extended COPY's data).
            self.skipping = true;
        }
        self.held_by_flush = unit.end == End::Flush
            && !self.skipping
            && self.status == ReadyStatus::Idle
            && self.pins == 0
            && (self.portals.is_empty() || self.only_unnamed_read_portal());
        self.end_unit(ended);
        Ok(())
    }

    /// After a unit: a transaction over (`ended`: the unit ended with a Sync, a Query or a
    /// FunctionCall, and the server says idle) closes the portals and gives the connection
    /// back unless something pins the session; a connection kept is shown in the sessions
    /// view (nothing runs there to cancel).
    #[inline(always)]
    pub(super) fn end_unit(&mut self, ended: bool) {
        if ended && self.status == ReadyStatus::Idle {
            self.portals.empty();
            if self.pins == 0 {
                self.release();
            }
        }
        if let Some(lease) = &self.lease {
            let backend = (lease.server().clone(), lease.conn_ref().backend_key.0);
            self.handle.set_backend(Some(backend));
        }
    }

    /// Someone else's currval/lastval on the connection just leased: marked discarded (a
    /// query sent ahead of the unit, in the same write, discards it; its answer is read
    /// before the unit's is relayed: see `ahead`). If that fails, the session ends and the
    /// connection with it. True if it is to be sent.
    #[inline(always)]
    pub(super) fn take_sequence_discard(&mut self) -> bool {
        match &mut self.lease {
            Some(lease) if self.sequences.must_discard(lease.conn_ref()) => {
                Sequences::discarded(lease.conn());
                true
            }
            _ => false,
        }
    }
}

/// A unit's boxed future, on either path: one value, awaited at one point (see
/// `Session::run`).
enum Running<P, G> {
    Plain(std::pin::Pin<Box<P>>),
    General(std::pin::Pin<Box<G>>),
}

impl<T, P: std::future::Future<Output = T>, G: std::future::Future<Output = T>> std::future::Future
    for Running<P, G>
{
    type Output = T;

    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<T> {
        // (Both are boxed, so `Running` is `Unpin`.)
        match self.get_mut() {
            Running::Plain(f) => f.as_mut().poll(cx),
            Running::General(f) => f.as_mut().poll(cx),
        }
    }
}

impl Drop for Session {
    /// The session leaves the registry before its fields go (its admission permit after it:
    /// the registry never shows more sessions than were admitted), also when its task ended
    /// in a panic (the entry would stay, shown and counted, for ever).
    fn drop(&mut self) {
        self.fe.rt.sessions.remove(self.handle.id);
    }
}

/// Everything in `ran` is a read by the scanner.
fn reads_only(ran: &[Arc<StmtDef>]) -> bool {
    ran.iter()
        .all(|d| d.info.route == sluice_core::router::Route::Read)
}

/// Drops the answers a server skipping to its next Sync will not send; the skipping ends at
/// the first Sync among them.
fn skip_to_sync(
    conn: &mut PgConn,
    exps: &mut unit::Exps,
    skipping: &mut bool,
    statements: &mut NameMap<Arc<StmtDef>>,
) {
    let mut skipped = smallvec::SmallVec::<[unit::Shared; 4]>::new();
    while let Some(e) = exps.front() {
        if e.resp == unit::Resp::Sync && e.synth.is_none() {
            *skipping = false;
            break;
        }
        // What sluice prepared or closed in the skipped part the server did not do.
        if let Some(e) = exps.pop_front() {
            if let Some(reg) = e.register.filter(|r| r.provisional) {
                reg.let_go(statements);
            }
            skipped.push(e.shared);
        }
    }
    unit::Shared::undo_skipped(skipped.into_iter(), &mut conn.statements);
}

pub(super) fn client_err(e: impl std::fmt::Display) -> SessionError {
    SessionError::Client(e.to_string())
}

pub(super) fn command_complete(w: &mut Writer, tag: &str) {
    w.begin(b'C');
    w.cstr(tag);
    w.end();
}

pub(super) fn put_query(out: &mut Vec<u8>, sql: &[u8]) {
    out.push(b'Q');
    out.extend_from_slice(&((sql.len() + 5) as u32).to_be_bytes());
    out.extend_from_slice(sql);
    out.push(0);
}

#[cfg(test)]
mod tests {
    use super::{Session, Unit};

    fn future_size<F, Fut>(_: F) -> usize
    where
        F: FnOnce(&'static mut Session, &'static Unit) -> Fut,
    {
        std::mem::size_of::<Fut>()
    }

    /// A unit's future is allocated for every unit a session runs. Within 1,024 bytes
    /// mimalloc (sluice's allocator) takes it from a small-object page of the thread's heap;
    /// one word more, and every unit goes through its generic path (about 170 instructions
    /// more per transaction, callgrind, docs/benchmarks.md). glibc's thread cache ends at
    /// 1,032. Rare paths are boxed to keep it there.
    #[test]
    fn a_units_future_fits_the_allocators_small_objects() {
        let defs: &'static super::unit::Defs = Box::leak(Box::default());
        let size = future_size(move |s, u| s.unit(u, defs));
        assert!(size <= 1024, "{size} bytes");
        // A plain read's future is allocated in its place (see `plain`).
        let defs: &'static mut super::unit::Defs = Box::leak(Box::default());
        let plain = future_size(move |s, u| s.plain_read(u, defs));
        assert!(plain <= 1024, "{plain} bytes");
    }
}
