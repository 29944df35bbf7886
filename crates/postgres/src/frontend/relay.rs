//! Server responses on their way to the client: matched against what the unit expects (so
//! the answers to what sluice added are consumed and what sluice answers itself is inserted
//! in order), with ParameterStatus, notices and notifications passed on whenever they come,
//! COPY data pumped in either direction, and the ReadyForQuery status recorded. While it
//! waits for the server it keeps reading the client ahead (bounded), so that a pipelining
//! client and sluice never wait on each other.

mod copy_in;
mod stream;
mod walk;

use super::client::Client;
use super::unit::{Exps, Register, Resp};
use crate::backend::conn::{keep_parameter, parameter_status};
use crate::backend::PgConn;
use crate::wire::ReadyStatus;
use copy_in::{copy_followed_by_other, copy_in, forward_sync};
use std::collections::BTreeMap;
use std::io;
use stream::{large_at, stream_large};
use walk::{affected, plain_query, walk_simple};
pub use walk::{relay_simple, SimpleFailed};

/// Client output is written once this much is gathered.
const FLUSH_AT: usize = 64 * 1024;

/// What the relay learned.
#[derive(Debug, Default)]
pub struct Relayed {
    /// The last ReadyForQuery status, if one came.
    pub status: Option<ReadyStatus>,
    /// An ErrorResponse came.
    pub failed: bool,
    /// Statements to register (their ParseComplete came); and, marked
    /// [`Register::provisional`], statements the session took as its own before the server
    /// answered whose Parse failed or was skipped: to let go. (One list: the unit's future
    /// holds it.)
    pub registered: Vec<Register>,
    /// DataRows the client was sent.
    pub rows: u64,
    /// Rows the server reported written (INSERT, UPDATE, DELETE, MERGE, COPY).
    pub affected: u64,
    /// A `DISCARD ALL` or `DEALLOCATE ALL` ran (its CommandComplete came): the connection's
    /// prepared statements are gone.
    pub dropped_statements: bool,
    /// A portal was suspended (PortalSuspended came): an Execute may take more of its rows.
    pub suspended: bool,
}

impl Relayed {
    /// A Parse's ParseComplete came: its statement is the session's now (unless it already
    /// was, see [`Register::provisional`]).
    fn parsed(&mut self, register: Option<Box<Register>>) {
        self.registered
            .extend(register.filter(|r| !r.provisional).map(|r| *r));
    }

    /// A CommandComplete came with this tag (its body): the rows it wrote, and whether it
    /// dropped the connection's prepared statements.
    fn completed(&mut self, tag: &[u8]) {
        self.affected += affected(tag);
        self.dropped_statements |= tag == b"DISCARD ALL\0" || tag == b"DEALLOCATE ALL\0";
    }

    /// A ReadyForQuery came with this body: its status.
    fn ready(&mut self, body: &[u8]) {
        self.status = body.first().copied().and_then(ReadyStatus::from_byte);
    }
}

/// Why relaying stopped early.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// The server connection broke or sent garbage.
    #[error("server: {0}")]
    Server(io::Error),
    /// The client went away.
    #[error("client: {0}")]
    Client(io::Error),
}

/// What goes to the client next, in order: a run of server messages passed on as they are,
/// sent straight from the connection's read buffer (the usual answer is nothing but such
/// messages: no copy), then what had to be built or copied (messages sluice answers itself,
/// replaced errors, whatever follows a message kept from the client).
#[derive(Default)]
struct Out {
    /// Bytes at the front of the connection's buffer that go to the client as they are.
    run: usize,
    /// What follows them (empty until needed; then from the process's shelf).
    built: Vec<u8>,
    /// Something went to the client.
    sent: bool,
}

impl Out {
    /// The server message of `len` bytes after the run goes to the client as it is.
    fn pass(&mut self, conn: &mut PgConn, len: usize) {
        if self.built.is_empty() {
            self.run += len;
        } else {
            self.built.extend_from_slice(&conn.buffered()[..len]);
            conn.consume(len);
        }
    }

    /// The server message of `len` bytes after the run is dropped.
    fn drop_message(&mut self, conn: &mut PgConn, len: usize) {
        self.settle(conn);
        conn.consume(len);
    }

    /// Adds bytes sluice built.
    fn push(&mut self, conn: &mut PgConn, bytes: &[u8]) {
        self.settle(conn);
        self.built.extend_from_slice(bytes);
    }

    /// Moves the run into `built` (something goes after it that is not in the buffer).
    fn settle(&mut self, conn: &mut PgConn) {
        if self.run > 0 {
            if self.built.capacity() == 0 {
                self.built = sluice_runtime::buffers::write_buffer();
            }
            self.built.extend_from_slice(&conn.buffered()[..self.run]);
            conn.consume(self.run);
            self.run = 0;
        }
    }

    fn len(&self) -> usize {
        self.run + self.built.len()
    }

    /// Sends what is gathered.
    async fn flush(&mut self, conn: &mut PgConn, client: &mut Client) -> Result<(), RelayError> {
        if self.run > 0 {
            self.sent = true;
            client
                .send(&conn.buffered()[..self.run])
                .await
                .map_err(RelayError::Client)?;
            conn.consume(self.run);
            self.run = 0;
        }
        if !self.built.is_empty() {
            self.sent = true;
            client.send(&self.built).await.map_err(RelayError::Client)?;
            self.built.clear();
        }
        Ok(())
    }

    /// Gives the built buffer back to the shelf.
    fn done(self) {
        if self.built.capacity() > 0 {
            sluice_runtime::buffers::give_write(self.built);
        }
    }
}

/// A NotificationResponse (`msg`, whole) that server process `backend` passes on, with the
/// sender's process id `pid` instead when the sender is that very process: the session's own
/// `NOTIFY` (a listening session keeps its connection, so its `NOTIFY`s run there). A client
/// that tells its own notifications by comparing the sender with its BackendKeyData (libpq's
/// `be_pid` and `PQbackendPID()`) then knows them as directly. `None`: the message as it is.
pub(super) fn own_notification(msg: &[u8], backend: u32, pid: u32) -> Option<Vec<u8>> {
    if msg.get(5..9)? != backend.to_be_bytes() || backend == pid {
        return None;
    }
    let mut own = msg.to_vec();
    own[5..9].copy_from_slice(&pid.to_be_bytes());
    Some(own)
}

/// Relays until every expectation is met. `own_pid`: the process id in the client's
/// BackendKeyData (see [`own_notification`]).
pub async fn relay(
    conn: &mut PgConn,
    client: &mut Client,
    exps: &mut Exps,
    reported: &mut std::sync::Arc<BTreeMap<String, String>>,
    own_pid: u32,
) -> Result<Relayed, RelayError> {
    let mut out = Out::default();
    let r = relay_into(conn, client, exps, reported, own_pid, &mut out).await;
    out.done();
    r
}

async fn relay_into(
    conn: &mut PgConn,
    client: &mut Client,
    exps: &mut Exps,
    reported: &mut std::sync::Arc<BTreeMap<String, String>>,
    own_pid: u32,
    out: &mut Out,
) -> Result<Relayed, RelayError> {
    let mut r = Relayed::default();
    let mut extended_copy_done = false;
    loop {
        // What sluice answers itself, when its turn comes.
        while let Some(tag) = exps.front().and_then(|e| e.synth) {
            out.push(conn, &[tag, 0, 0, 0, 4]);
            if let Some(e) = exps.pop_front() {
                r.parsed(e.register);
            }
        }
        if exps.is_empty() {
            break;
        }
        if out.built.is_empty() && exps.len() == 1 && exps.front().is_some_and(plain_query) {
            // A simple query's usual answer, walked in one loop (what it cannot take is left
            // to the message-by-message relay below).
            let (end, ready) = walk_simple(conn.buffered(), out.run, &mut r);
            out.run = end;
            if ready {
                conn.unsynced = false;
                exps.pop_front();
                continue;
            }
            if out.run >= FLUSH_AT {
                out.flush(conn, client).await?;
                continue;
            }
        }
        let (tag, len) = match conn.peek_at(out.run) {
            Ok(Some((m, len))) => (m.tag, len),
            Ok(None) => {
                // A large row or COPY data the client sees, not whole yet: passed on as it
                // arrives (boxed: rare, and every unit's future would carry its state).
                if let Some(large) = streams(conn, exps, out.run) {
                    r.rows += Box::pin(stream_large(conn, client, out, large)).await?;
                    continue;
                }
                out.flush(conn, client).await?;
                // The Sync (or Flush) after an extended COPY's CopyDone: the server sends
                // the COPY's CommandComplete only then.
                if extended_copy_done {
                    match Box::pin(forward_sync(conn, client)).await? {
                        Some(b'S') => {
                            extended_copy_done = false;
                            if !exps.iter().any(|e| e.resp == Resp::Sync) {
                                // The batch ended with a Flush: this Sync ends the COPY's
                                // implicit transaction, and its ReadyForQuery is awaited.
                                exps.push_back(super::unit::Exp::pass(Resp::Sync));
                            }
                            continue;
                        }
                        Some(_) => continue,
                        None if copy_followed_by_other(client, exps) => {
                            // Something else follows the CopyDone (a Query): the Sync the
                            // batch sent with its COPY was ignored by the server in copy-in
                            // mode, and what follows runs in the COPY's transaction, as
                            // directly. A Flush of sluice's own has the server send the COPY's
                            // CommandComplete; the batch then ends without a ReadyForQuery,
                            // its connection kept for what follows.
                            conn.send(crate::wire::FLUSH)
                                .await
                                .map_err(RelayError::Server)?;
                            exps.truncate(1);
                            extended_copy_done = false;
                            continue;
                        }
                        None => {}
                    }
                }
                wait(conn, client, extended_copy_done).await?;
                continue;
            }
            Err(e) => {
                // One over the limit on messages read whole streams too: no reason to call
                // the connection broken.
                if let Some(large) = streams(conn, exps, out.run) {
                    conn.broken = false;
                    r.rows += Box::pin(stream_large(conn, client, out, large)).await?;
                    continue;
                }
                return Err(RelayError::Server(io::Error::new(
                    io::ErrorKind::InvalidData,
                    e,
                )));
            }
        };
        let Some(head) = exps.front() else { break };
        let forward = head.forward;
        // The message, after the run.
        let at = out.run;
        match tag {
            b'A' => {
                let msg = &conn.buffered()[at..at + len];
                match own_notification(msg, conn.backend_key.0, own_pid) {
                    Some(own) => {
                        out.drop_message(conn, len);
                        out.push(conn, &own);
                    }
                    None => out.pass(conn, len),
                }
            }
            b'N' => out.pass(conn, len),
            b'S' => {
                let msg = &conn.buffered()[at..at + len];
                // (Copied: the connection's map is written while its buffer holds them.)
                let kv = parameter_status(&msg[5..]).map(|(k, v)| (k.to_string(), v.to_string()));
                if let Some((k, v)) = kv {
                    keep_parameter(reported, &k, &v);
                    keep_parameter(&mut conn.params, &k, &v);
                }
                out.pass(conn, len);
            }
            b'E' => {
                if let super::unit::Shared::Uses(h) | super::unit::Shared::Describes(h, _) =
                    head.shared
                {
                    let body = &conn.buffered()[at + 5..at + len];
                    let fields = crate::wire::error_fields(body).unwrap_or_default();
                    let field = |c: u8| fields.iter().find(|(k, _)| *k == c).map(|f| &*f.1);
                    match (field(b'C'), field(b'R')) {
                        // The statement's result no longer fits the tables it was prepared
                        // for: for every client that prepared it before.
                        (Some("0A000"), Some("RevalidateCachedQuery")) => {
                            conn.statements.result_changed(h, field(b'L'))
                        }
                        // 0A000 otherwise; 26000: the server lost it (a `DEALLOCATE` that
                        // sluice did not see, in a `DO` block or a function, by any session
                        // the connection served). Prepared afresh where next used.
                        (Some("0A000" | "26000"), _) => conn.statements.mark_stale(h),
                        _ => {}
                    }
                }
                match &head.replace_error {
                    Some(e) => {
                        let mut w = crate::wire::Writer::new();
                        w.error_with("ERROR", &e.0, &e.1, &e.2);
                        out.drop_message(conn, len);
                        out.push(conn, w.as_bytes());
                    }
                    None => {
                        // A FATAL: the server closes the connection next (see `told_fatal`).
                        let body = &conn.buffered()[at + 5..at + len];
                        conn.told_fatal |= crate::wire::ends_session(body);
                        out.pass(conn, len)
                    }
                }
                r.failed = true;
                // The server skips to the next Sync; a simple query goes on to its
                // ReadyForQuery.
                let mut skipped = smallvec::SmallVec::<[super::unit::Shared; 4]>::new();
                while let Some(e) = exps.front() {
                    if matches!(e.resp, Resp::Sync | Resp::Query) && e.synth.is_none() {
                        break;
                    }
                    if let Some(e) = exps.pop_front() {
                        r.registered
                            .extend(e.register.filter(|r| r.provisional).map(|r| *r));
                        skipped.push(e.shared);
                    }
                }
                super::unit::Shared::undo_skipped(skipped.into_iter(), &mut conn.statements);
            }
            b'Z' => {
                conn.unsynced = false;
                r.ready(&conn.buffered()[at + 5..at + len]);
                if forward {
                    out.pass(conn, len);
                } else {
                    out.drop_message(conn, len);
                }
                exps.pop_front();
            }
            b'G' => {
                // COPY FROM STDIN: the client's data goes to the server until CopyDone/Fail
                // (unless all of it went with the unit).
                let extended = head.resp == Resp::Execute;
                out.pass(conn, len);
                if exps.copy_ends > 0 {
                    exps.copy_ends -= 1;
                    continue;
                }
                out.flush(conn, client).await?;
                // Boxed: COPY is rare, and every statement's future would carry its state.
                Box::pin(copy_in(conn, client)).await?;
                extended_copy_done = extended;
                continue;
            }
            b'W' => {
                return Err(RelayError::Server(io::Error::other(
                    "COPY BOTH (replication) is not supported through sluice",
                )))
            }
            // Anything else no server sends (it is lying, or not PostgreSQL): not passed on.
            _ if !backend_message(tag) => {
                return Err(RelayError::Server(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "the server sent a message of unknown type {:?}",
                        tag as char
                    ),
                )))
            }
            _ => {
                let done = match head.resp {
                    Resp::Parse => tag == b'1',
                    Resp::Bind => tag == b'2',
                    Resp::Close => tag == b'3',
                    Resp::DescribeStatement | Resp::DescribePortal => tag == b'T' || tag == b'n',
                    Resp::Execute => matches!(tag, b'C' | b'I' | b's'),
                    Resp::Sync | Resp::Query => false,
                };
                if let (b't', super::unit::Shared::Learns(def)) = (tag, &head.shared) {
                    def.resolve(&conn.buffered()[at + 5..at + len]);
                }
                if let (
                    true,
                    super::unit::Shared::Describes(_, def)
                    | super::unit::Shared::DescribesPortal(def),
                ) = (done, &head.shared)
                {
                    // What the client is told its statement gives (the first time).
                    if def.described() == 0 {
                        let body = &conn.buffered()[at + 5..at + len];
                        def.note_described(crate::backend::statements::result_shape(tag, body));
                    }
                }
                match tag {
                    b'D' => r.rows += 1,
                    b's' => r.suspended = true,
                    b'C' => r.completed(&conn.buffered()[at + 5..at + len]),
                    _ => {}
                }
                if forward {
                    out.pass(conn, len);
                } else {
                    out.drop_message(conn, len);
                }
                if done {
                    if let Some(e) = exps.pop_front() {
                        r.parsed(e.register);
                    }
                }
            }
        }
        if out.len() >= FLUSH_AT {
            out.flush(conn, client).await?;
        }
    }
    out.flush(conn, client).await?;
    Ok(r)
}

/// The message at `at` is a large DataRow or CopyData (see [`large_at`]) for the client:
/// its type and length.
fn streams(conn: &PgConn, exps: &Exps, at: usize) -> Option<(u8, usize)> {
    exps.front()
        .is_some_and(|e| e.forward && e.synth.is_none())
        .then(|| large_at(conn.buffered(), at, b"Dd"))
        .flatten()
}

/// The types of the messages a server sends to a logged-in client's statements (those the
/// relay handles apart, notifications, notices, ParameterStatus, errors, ReadyForQuery and
/// COPY FROM's and COPY BOTH's, aside): ParseComplete, BindComplete, CloseComplete,
/// CommandComplete, CopyOutResponse, CopyData, CopyDone, DataRow, EmptyQueryResponse,
/// FunctionCallResponse, NoData, PortalSuspended, ParameterDescription and RowDescription.
fn backend_message(tag: u8) -> bool {
    matches!(
        tag,
        b'1' | b'2'
            | b'3'
            | b'C'
            | b'H'
            | b'd'
            | b'c'
            | b'D'
            | b'I'
            | b'V'
            | b'n'
            | b's'
            | b't'
            | b'T'
    )
}

/// Waits for the server, reading the client ahead meanwhile.
pub(super) async fn wait(
    conn: &mut PgConn,
    client: &mut Client,
    want_client: bool,
) -> Result<(), RelayError> {
    if client.may_read_ahead() || want_client {
        tokio::select! {
            // The server first: it is what the relay waits for (and no random draw).
            biased;
            r = conn.fill() => r.map_err(RelayError::Server),
            r = client.fill() => r.map_err(RelayError::Client),
        }
    } else {
        conn.fill().await.map_err(RelayError::Server)
    }
}
