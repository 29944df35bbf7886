//! The client's connection: its stream (plain or TLS), what it sent and sluice has not
//! handled yet (bounded), and what goes back to it.

use crate::wire::{read_message, Message, ReadyStatus, WireError, Writer};
use bytes::{Buf, BytesMut};
use sluice_runtime::tls::ClientStream;
use std::io;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The largest message a client may send (a bigger Parse, Bind or CopyData is refused and
/// the connection closed).
pub const MAX_CLIENT_MESSAGE: usize = 64 << 20;

/// Client bytes sluice buffers ahead of what it is working on (a pipelining client beyond it
/// waits until sluice catches up).
pub const READ_AHEAD: usize = 1 << 20;

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
}

impl Client {
    /// Reads more from the client; an error when it is gone.
    pub async fn fill(&mut self) -> io::Result<()> {
        // Small to start with (a login reads a few hundred bytes), doubling for a client that
        // sends more.
        if self.buf.capacity() - self.buf.len() < 1024 {
            self.buf.reserve(self.buf.capacity().max(4096));
        }
        match self.stream.read_buf(&mut self.buf).await? {
            0 => Err(io::ErrorKind::UnexpectedEof.into()),
            _ => Ok(()),
        }
    }

    /// Waits for the client's next bytes while the session is idle: the read buffer goes
    /// back to the process's shelf meanwhile (an idle session holds none) and one is taken
    /// when bytes arrive.
    pub async fn fill_idle(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            sluice_runtime::buffers::give_read(std::mem::take(&mut self.buf));
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
            return self.stream.write_all(bytes).await;
        }
        // Taken: an idle session keeps no queue's allocation.
        let mut out = std::mem::take(&mut self.pending);
        out.extend_from_slice(bytes);
        self.stream.write_all(&out).await
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
        let mut w = Writer::new();
        w.error("FATAL", sqlstate, message);
        let r = self.send(w.as_bytes()).await;
        let _ = self.stream.flush().await;
        r
    }
}
