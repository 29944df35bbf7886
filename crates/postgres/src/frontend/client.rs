//! The client's connection: its stream (plain or TLS), what it sent and sluice has not
//! handled yet (bounded), and what goes back to it.

use crate::wire::{read_message, Message, ReadyStatus, WireError, Writer};
use bytes::{Buf, BytesMut};
use sluice_core::{Charge, OverBudget};
use sluice_runtime::tls::ClientStream;
use std::io;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The largest message a client may send (a bigger Parse, Bind or CopyData is refused and
/// the connection closed).
pub const MAX_CLIENT_MESSAGE: usize = 64 << 20;

/// Client bytes sluice buffers ahead of what it is working on (a pipelining client beyond it
/// waits until sluice catches up).
pub const READ_AHEAD: usize = 1 << 20;

/// The room a client's read buffer may take without a charge against `[proxy]
/// max_request_memory`: what reading ahead up to [`READ_AHEAD`] grows it to. Beyond it (a
/// message of more than about 1 MiB is arriving), the whole buffer is charged as it grows,
/// before bytes are read into it, until it is empty again.
pub const UNCHARGED: usize = 2 * READ_AHEAD;

/// What the queue of messages for the client starts with.
const QUEUE_CAPACITY: usize = 1024;

/// A client connection after the startup packet.
pub struct Client {
    /// The stream.
    pub stream: ClientStream,
    /// Bytes received and not yet handled.
    pub buf: BytesMut,
    /// Messages queued for the client, written ahead of the next send: a login's last
    /// messages (SASLFinal, AuthenticationOk, ParameterStatus, BackendKeyData,
    /// ReadyForQuery) leave in one write, as PostgreSQL sends them.
    pub pending: Vec<u8>,
    /// The read buffer's charge against `[proxy] max_request_memory` (nothing while it is
    /// within [`UNCHARGED`]).
    pub charge: Charge,
    /// Why the buffer could not grow (the bytes it held, the refusal), once the budget refused
    /// it: the session ends, and the client is told this. Boxed: every session carries the
    /// field, almost none ever fills it.
    pub over_budget: Option<Box<(usize, OverBudget)>>,
    /// A FATAL went to the client: the session ends (see [`Client::close_after_fatal`]).
    pub fatal_sent: bool,
}

/// Where the first message of `buf` that is not all there ends (its header read), if one.
fn incomplete_end(buf: &[u8]) -> Option<usize> {
    let mut at = 0;
    while let Some(len) = buf.get(at + 1..at + 5) {
        let len = u32::from_be_bytes(len.try_into().ok()?) as usize;
        let end = at + 1 + len;
        if end > buf.len() {
            return Some(end);
        }
        at = end;
    }
    None
}

impl Client {
    /// Reads more from the client; an error when it is gone.
    pub async fn fill(&mut self) -> io::Result<()> {
        if self.buf.is_empty() && self.charge.bytes() > 0 {
            // A large message was handled: its room goes, and its charge with it.
            self.buf = sluice_runtime::buffers::read_buffer();
            self.charge.release();
        }
        // Small to start with (a login reads a few hundred bytes), doubling for a client that
        // sends more; past what is read ahead uncharged, room for exactly the message that is
        // arriving (doubled, a message of 33 MiB would take and be charged 64).
        if self.buf.capacity() - self.buf.len() < 1024 {
            let doubled = self.buf.capacity() + self.buf.capacity().max(4096);
            // (A message over the limit is refused once its header is parsed.)
            let exact =
                incomplete_end(&self.buf).filter(|&end| end <= MAX_CLIENT_MESSAGE + UNCHARGED);
            match exact {
                Some(end) if doubled > UNCHARGED && end > self.buf.capacity() => {
                    // Charged before it is taken.
                    self.charge_bytes(end + 1024)?;
                    let mut room = BytesMut::with_capacity(end + 1024);
                    room.extend_from_slice(&self.buf);
                    self.buf = room;
                }
                _ => self.buf.reserve(self.buf.capacity().max(4096)),
            }
            if self.buf.capacity() > UNCHARGED {
                self.charge_room()?;
            }
        }
        match self.stream.read_buf(&mut self.buf).await? {
            0 => Err(io::ErrorKind::UnexpectedEof.into()),
            _ => Ok(()),
        }
    }

    /// Charges the read buffer's room to the budget (before anything is read into it); an
    /// error, with the refusal kept for the client, if the budget cannot hold it.
    fn charge_room(&mut self) -> io::Result<()> {
        self.charge_bytes(self.buf.capacity())
    }

    /// Charges `room` bytes of read buffer to the budget, as [`Client::charge_room`].
    fn charge_bytes(&mut self, room: usize) -> io::Result<()> {
        match self.charge.cover(room) {
            Ok(()) => Ok(()),
            Err(over) => {
                self.over_budget = Some(Box::new((self.buf.len(), over)));
                Err(io::Error::other(format!(
                    "read buffer of {room} bytes refused: {over}"
                )))
            }
        }
    }

    /// After a FATAL: the read buffer and its charge go, then the stream closes as
    /// [`sluice_runtime::tls::ClientStream::close_after_error`] says, so that a client still
    /// sending reads the FATAL.
    pub async fn close_after_fatal(&mut self, limit: std::time::Duration) {
        self.buf = BytesMut::new();
        self.charge.release();
        self.stream.close_after_error(limit).await;
    }

    /// The FATAL a client gets when its message did not fit in `[proxy] max_request_memory`.
    pub fn over_budget_message(received: usize, over: &OverBudget) -> String {
        format!(
            "sluice: out of memory for client messages: {received} bytes from this client wait to be handled and its message needs more, but the messages of all clients may hold at most {} bytes ([proxy] max_request_memory) and {} are in use; the connection is closed, retry later",
            over.limit, over.used
        )
    }

    /// Waits for the client's next bytes while the session is idle: the read buffer goes
    /// back to the process's shelf meanwhile (an idle session holds none) and one is taken
    /// when bytes arrive.
    pub async fn fill_idle(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            sluice_runtime::buffers::give_read(std::mem::take(&mut self.buf));
            self.charge.release();
            self.stream.readable().await?;
            self.buf = sluice_runtime::buffers::read_buffer();
        }
        self.fill().await
    }

    /// True while more may be read ahead.
    pub fn may_read_ahead(&self) -> bool {
        self.buf.len() < READ_AHEAD
    }

    /// The message at `offset` in the buffer, if complete.
    pub fn message_at(&self, offset: usize) -> Result<Option<(Message<'_>, usize)>, WireError> {
        read_message(&self.buf[offset..], MAX_CLIENT_MESSAGE)
    }

    /// Drops `n` handled bytes.
    pub fn consume(&mut self, n: usize) {
        self.buf.advance(n);
    }

    /// Queues `bytes` for the next send.
    pub fn queue(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        self.room_for_queue();
        self.pending.extend_from_slice(bytes);
    }

    /// Queues the messages `write` writes for the next send (written in place: no buffer
    /// of their own).
    pub fn queue_messages(&mut self, write: impl FnOnce(&mut Writer)) {
        self.room_for_queue();
        let mut w = Writer::with_buffer(std::mem::take(&mut self.pending));
        write(&mut w);
        self.pending = w.into_bytes();
        if self.pending.is_empty() {
            // Nothing queued: no room kept either.
            self.pending = Vec::new();
        }
    }

    /// The queue's room, made once for what usually collects in it (a login's last
    /// messages: a few hundred bytes), not grown step by step.
    fn room_for_queue(&mut self) {
        if self.pending.capacity() == 0 {
            self.pending.reserve(QUEUE_CAPACITY);
        }
    }

    /// Sends what is queued, then `bytes`.
    pub async fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        if self.pending.is_empty() {
            return self.stream.write_all_sent(bytes).await;
        }
        // Taken: an idle session keeps no queue's allocation.
        let mut out = std::mem::take(&mut self.pending);
        out.extend_from_slice(bytes);
        self.stream.write_all_sent(&out).await
    }

    /// Sends an ErrorResponse (severity ERROR) and ReadyForQuery.
    pub async fn error_ready(
        &mut self,
        sqlstate: &str,
        message: &str,
        status: ReadyStatus,
    ) -> io::Result<()> {
        let mut w = Writer::new();
        w.error("ERROR", sqlstate, message);
        w.ready_for_query(status);
        self.send(w.as_bytes()).await
    }

    /// Sends a FATAL ErrorResponse (the connection closes after it).
    pub async fn fatal(&mut self, sqlstate: &str, message: &str) -> io::Result<()> {
        self.fatal_with(sqlstate, message, &[]).await
    }

    /// As [`Client::fatal`], followed by `more` fields (a server's detail, hint...).
    pub async fn fatal_with(
        &mut self,
        sqlstate: &str,
        message: &str,
        more: &[(u8, String)],
    ) -> io::Result<()> {
        let mut w = Writer::new();
        w.error_with("FATAL", sqlstate, message, more);
        self.fatal_sent = true;
        let r = self.send(w.as_bytes()).await;
        let _ = self.stream.flush().await;
        r
    }
}
