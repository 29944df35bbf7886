//! One server connection: its socket and read buffer, what the server reported about itself
//! (ParameterStatus, BackendKeyData), the session settings applied to it beyond its startup,
//! and the prepared statements it holds.

use super::statements::ServerStatements;
use crate::wire::{read_message, Message, WireError};
use bytes::{Buf, BytesMut};
use sluice_runtime::tls::backend::{BackendStream, SendStep};
use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Weak};
use tokio::io::AsyncReadExt;

/// The largest message accepted from a server (a row or a COPY chunk bigger than this ends
/// the connection with an error).
pub const MAX_SERVER_MESSAGE: usize = 64 << 20;

/// The most read buffer a pooled connection keeps (what [`PgConn::fill`] grows to for
/// ordinary answers).
const PARKED_BUFFER: usize = 24 * 1024;

/// Startup settings: name → the statement that sets it, sorted by name.
pub type StartupSettings = [(Box<str>, Box<str>)];

/// A logged-in server connection.
pub struct PgConn {
    stream: BackendStream,
    rbuf: BytesMut,
    /// Its process id and cancel key.
    pub backend_key: (u32, u32),
    /// What the server reported with ParameterStatus, newest value per name (shared with
    /// the sessions that have seen exactly these values).
    pub params: Arc<BTreeMap<String, String>>,
    /// Settings applied beyond its startup: parameter name → the statement that set it.
    applied: BTreeMap<String, String>,
    /// A list of startup settings found to be exactly `applied` (see
    /// [`PgConn::applied_is`]); forgotten whenever `applied` changes.
    applied_startup: Option<Weak<StartupSettings>>,
    /// Prepared statements it holds, under sluice's names.
    pub statements: ServerStatements,
    /// Something went wrong mid-exchange: it must not be reused.
    pub broken: bool,
    /// The server sent a FATAL (or PANIC) ErrorResponse that went to the client as it is: it
    /// closes the connection next, and the client already has the reason.
    pub told_fatal: bool,
    /// Messages went to the server after its last ReadyForQuery: it may hold an implicit
    /// transaction, open portals and answers it has not sent yet (a batch that ended with
    /// a Flush, or that was forwarded without its Sync). Only closing the connection rolls
    /// that back, so it never goes back to the pool like this.
    pub unsynced: bool,
    /// The next send is a part of a batch the client sends without a Sync or Flush, or what
    /// follows one: it reads the server's answers meanwhile (see [`PgConn::send_reading`]).
    pub parts: bool,
    /// Whose sequence state (`currval`, `lastval`) the server holds: the mark of the session
    /// stretch that last touched sequences here, 0 for none (see the frontend's
    /// `sequences`).
    pub seq_mark: u64,
    /// Parameters a session's `set_config` calls may have set here since its last
    /// transaction ended, to be read back when the next one does (the frontend's
    /// `read_back`): kept with the connection that ran them, not in every idle session.
    pub read_back: Vec<String>,
    /// The names of the `WITH HOLD` cursors the session pinned to the connection declared
    /// (see [`super::cursors`]): kept with the connection, which holds the cursors, not in
    /// every idle session.
    pub held_cursors: Option<Box<super::cursors::HeldCursors>>,
    /// Keeps cancel requests to this connection within the lease they were meant for, with
    /// the server's cancel key (set once logged in).
    pub gate: Arc<sluice_core::CancelGate>,
    /// The monitor declaring the server failed (a failover): reads give up.
    pub(crate) failed: Option<sluice_core::FailedWatch>,
    /// `[pool] read_timeout` and the timer of the waits it bounds.
    pub(crate) timer: ReadTimer,
    /// `[pool] max_lifetime`, and when it was opened.
    pub(crate) lifetime: sluice_core::Aging,
}

/// How long a read waits for a server that sends nothing while an answer is expected (and a
/// write for it to take bytes): `[pool] read_timeout`, and the timer of those waits (made at
/// the first that does not complete at once).
#[derive(Default)]
pub(crate) struct ReadTimer {
    pub(crate) limit: sluice_core::ReadTimeout,
    /// Armed once, and again only when it goes off: a wait checks it against its own start
    /// (re-arming a timer at every wait would cost a few hundred instructions a statement).
    sleep: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
    /// When the wait under way began (set at its first `Pending`).
    started: Option<tokio::time::Instant>,
}

impl PgConn {
    /// A connection over `stream` (logged in by [`super::connect`]).
    pub(crate) fn new(stream: BackendStream, cache: usize) -> PgConn {
        PgConn {
            stream,
            rbuf: BytesMut::with_capacity(8192),
            backend_key: (0, 0),
            params: Arc::default(),
            applied: BTreeMap::new(),
            applied_startup: None,
            statements: ServerStatements::new(cache),
            broken: false,
            told_fatal: false,
            unsynced: false,
            parts: false,
            seq_mark: 0,
            read_back: Vec::new(),
            held_cursors: None,
            gate: sluice_core::CancelGate::new(0),
            failed: None,
            timer: Default::default(),
            lifetime: Default::default(),
        }
    }

    /// Fit to be lent from the pool: not broken, younger than `[pool] max_lifetime`, the
    /// server has sent nothing while it sat idle (an idle connection hears nothing: data means
    /// the server closed it, or is closing it with an error such as 57P01 after
    /// `pg_terminate_backend`), and no cancel request for its last lease is under way. If so,
    /// it is claimed for the new lease: a cancel meant for an earlier one no longer reaches it.
    pub fn usable(&self) -> bool {
        // (What a session's `set_config` set here, not read back yet, is no one else's.)
        if self.broken
            || self.unsynced
            || !self.read_back.is_empty()
            || !self.rbuf.is_empty()
            || self.server_failed()
            || self.lifetime.expired()
        {
            return false;
        }
        !self.stream.idle_closed() && self.gate.claim()
    }

    /// Its settings beyond its startup: parameter name → the statement that set it.
    pub fn applied(&self) -> &BTreeMap<String, String> {
        &self.applied
    }

    /// Its settings beyond its startup are `applied` now.
    pub fn set_applied(&mut self, applied: BTreeMap<String, String>) {
        self.applied = applied;
        self.applied_startup = None;
        self.key_statements_by_applied();
    }

    /// True if its settings are exactly the startup settings `startup`, as compared in full
    /// by `matches` (the first time) or as noted after that comparison (then: a pointer
    /// compared, the usual lease of a session that changed nothing since its login, by
    /// another session that started alike). The note is a weak reference: it keeps the
    /// list's allocation, so that no other list can take its address, and not the list
    /// (the sessions' interner sees it unused once its sessions are gone).
    pub fn applied_is(
        &mut self,
        startup: &Arc<StartupSettings>,
        matches: impl FnOnce(&BTreeMap<String, String>) -> bool,
    ) -> bool {
        if self
            .applied_startup
            .as_ref()
            .is_some_and(|s| std::ptr::eq(s.as_ptr(), Arc::as_ptr(startup)))
        {
            return true;
        }
        if !matches(&self.applied) {
            return false;
        }
        self.applied_startup = Some(Arc::downgrade(startup));
        true
    }

    /// Statements prepared from now on are keyed by the settings applied to it (again, after
    /// a transaction block with settings of its own).
    pub fn key_statements_by_applied(&mut self) {
        let fingerprint = super::statements::analysis_fingerprint(&self.applied);
        self.statements.set_settings(fingerprint);
    }

    /// Before the connection goes back to the pool: a read buffer grown by a large result
    /// goes back to the process's shelf (which keeps or frees it); one of ordinary size stays
    /// (pooled connections are few, bounded by `max_connections`, and taking a buffer from
    /// the shelf at every statement cost more than the rest of the read).
    pub fn park(&mut self) {
        if self.rbuf.is_empty() && self.rbuf.capacity() > PARKED_BUFFER {
            sluice_runtime::buffers::give_read(std::mem::take(&mut self.rbuf));
        }
    }

    /// Sends `bytes` (as [`PgConn::send_reading`] when `parts` is set: it is cleared).
    pub async fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        if std::mem::take(&mut self.parts) {
            let cap = crate::front::OWED_ANSWER_BYTES;
            return Box::pin(self.send_reading(bytes, cap)).await;
        }
        self.unsynced = true;
        let write = std::pin::pin!(self.stream.write_all_sent(bytes));
        let r = within(&mut self.timer, write).await;
        if r.is_err() {
            self.broken = true;
        }
        r
    }

    /// Sends `bytes` as [`PgConn::send`] does, reading what the server sends meanwhile into
    /// the buffer, for a batch the client sends in parts without a Sync or Flush: its
    /// answers are relayed only once its end is there, and a server whose answers nobody
    /// read would stop reading the parts after them (its socket buffers full), and sluice
    /// the client: neither could go on. The buffer grows up to `cap` bytes; past it, with
    /// the server still not reading, an error of kind `OutOfMemory`.
    pub async fn send_reading(&mut self, mut bytes: &[u8], cap: usize) -> io::Result<()> {
        self.unsynced = true;
        loop {
            self.room_to_read();
            let PgConn {
                stream,
                rbuf,
                timer,
                ..
            } = self;
            let full = rbuf.len() >= cap;
            let step = std::pin::pin!(std::future::poll_fn(|cx| {
                match stream.poll_send_reading(cx, bytes, (!full).then_some(&mut *rbuf)) {
                    std::task::Poll::Pending if full => {
                        std::task::Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::OutOfMemory,
                            format!("its answers waiting in sluice are over {cap} bytes"),
                        )))
                    }
                    other => other,
                }
            }));
            match within(timer, step).await {
                Ok(SendStep::Wrote(n)) => bytes = &bytes[n..],
                Ok(SendStep::Read(0)) => {
                    self.broken = true;
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the server closed the connection",
                    ));
                }
                Ok(SendStep::Read(_)) => {}
                Ok(SendStep::Sent) => return Ok(()),
                Err(e) => {
                    self.broken = true;
                    return Err(e);
                }
            }
        }
    }

    /// True if the monitor declared the server failed since this connection was opened.
    pub fn server_failed(&self) -> bool {
        self.failed.as_ref().is_some_and(|f| f.has_failed())
    }

    /// Reads more bytes into the buffer; an error when the server closed the connection,
    /// sent nothing for `[pool] read_timeout`, or when the monitor declares it failed (a hung
    /// server answers nothing, and a failover replaces it).
    pub async fn fill(&mut self) -> io::Result<()> {
        self.room_to_read();
        let PgConn {
            stream,
            rbuf,
            failed,
            timer,
            ..
        } = self;
        let read = std::pin::pin!(stream.read_buf(rbuf));
        let read = within(timer, read);
        let read = sluice_core::unless_failed(failed.as_mut(), read)
            .await
            .unwrap_or_else(|| {
                Err(io::Error::other(
                    "the server stopped answering and was declared failed",
                ))
            });
        match read {
            Ok(0) => {
                self.broken = true;
                Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the server closed the connection",
                ))
            }
            Ok(_) => Ok(()),
            Err(e) => {
                self.broken = true;
                Err(e)
            }
        }
    }

    /// The complete message at the front of the buffer, if any (not consumed: see
    /// [`PgConn::consume`]).
    pub fn peek(&mut self) -> Result<Option<(Message<'_>, usize)>, WireError> {
        let r = read_message(&self.rbuf, MAX_SERVER_MESSAGE);
        if r.is_err() {
            self.broken = true;
        }
        r
    }

    /// The complete message `offset` bytes into the buffer, if any (not consumed).
    pub fn peek_at(&mut self, offset: usize) -> Result<Option<(Message<'_>, usize)>, WireError> {
        let r = read_message(&self.rbuf[offset..], MAX_SERVER_MESSAGE);
        if r.is_err() {
            self.broken = true;
        }
        r
    }

    /// Drops `n` bytes from the front of the buffer.
    pub fn consume(&mut self, n: usize) {
        self.rbuf.advance(n);
    }

    /// Bytes buffered and not yet consumed.
    pub fn buffered(&self) -> &[u8] {
        &self.rbuf
    }

    /// Reads the next whole message, waiting for it: its tag and body (copied). A
    /// ReadyForQuery ends what was sent before it (see [`PgConn::unsynced`]).
    pub async fn next_owned(&mut self) -> io::Result<(u8, Vec<u8>)> {
        loop {
            match self.take_owned()? {
                Some(m) => return Ok(m),
                None => self.fill().await?,
            }
        }
    }

    /// The next whole message if it is buffered, as [`PgConn::next_owned`] takes it.
    pub fn take_owned(&mut self) -> io::Result<Option<(u8, Vec<u8>)>> {
        match self.peek() {
            Ok(Some((m, n))) => {
                let out = (m.tag, m.body.to_vec());
                if m.tag == b'Z' {
                    self.unsynced = false;
                }
                self.consume(n);
                Ok(Some(out))
            }
            Ok(None) => Ok(None),
            Err(e) => Err(io::Error::new(io::ErrorKind::InvalidData, e)),
        }
    }

    /// Records a ParameterStatus body (`name\0value\0`).
    pub fn note_parameter(&mut self, body: &[u8]) {
        if let Some((name, value)) = parameter_status(body) {
            keep_parameter(&mut self.params, name, value);
        }
    }

    /// Room in the read buffer for the next read.
    fn room_to_read(&mut self) {
        if self.rbuf.capacity() == 0 {
            self.rbuf = sluice_runtime::buffers::read_buffer();
        }
        if self.rbuf.capacity() - self.rbuf.len() < 4096 {
            self.rbuf.reserve(16 * 1024);
        }
    }

    /// Resolves when the server may have sent something (a notification or a notice, or
    /// that it is closing) while the connection is idle with its session: at once if a whole
    /// message is buffered. Consumes nothing. Readiness may be stale (the bytes that raised
    /// it already read): what follows reads with [`PgConn::try_fill`], which never waits.
    pub async fn readable(&mut self) -> io::Result<()> {
        if matches!(self.peek(), Ok(Some(_)) | Err(_)) {
            return Ok(());
        }
        self.stream.readable().await
    }

    /// Reads what the server has sent, without waiting: false if it sent nothing (stale
    /// readiness, which this read clears). An error as [`PgConn::fill`]'s.
    pub fn try_fill(&mut self) -> io::Result<bool> {
        self.room_to_read();
        match self.stream.try_read_buf(&mut self.rbuf) {
            Ok(0) => {
                self.broken = true;
                Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the server closed the connection",
                ))
            }
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => {
                self.broken = true;
                Err(e)
            }
        }
    }
}

impl Drop for PgConn {
    fn drop(&mut self) {
        // Over TLS, a close_notify: PostgreSQL logs a TLS stream cut without one as a
        // connection reset. (No Terminate: a connection dropped mid-message must not have
        // its last message completed by one; the end of the stream is as good a goodbye.)
        self.stream.goodbye(&[]);
    }
}

/// ParameterStatus values kept per connection and per session at most. PostgreSQL 15 reports
/// thirteen parameters, extensions a few more; a server that reports ever new ones (lying, or
/// not PostgreSQL) is not believed beyond this: what it sends still reaches the client, as it
/// would directly, but sluice keeps no more of it.
pub const MAX_PARAMETERS: usize = 256;

/// The most bytes of one ParameterStatus (name and value) kept. PostgreSQL's are short (a
/// version, an encoding, an application name of at most 63 bytes); a longer one reaches the
/// client and its name is forgotten, not kept with a value it no longer has.
pub const MAX_PARAMETER_BYTES: usize = 4096;

/// Keeps `name = value` in `params`, within [`MAX_PARAMETERS`] and [`MAX_PARAMETER_BYTES`]
/// (unchanged when it already holds that value: a shared map is not copied for nothing).
pub fn keep_parameter(params: &mut Arc<BTreeMap<String, String>>, name: &str, value: &str) {
    if name.len() + value.len() > MAX_PARAMETER_BYTES {
        if params.contains_key(name) {
            Arc::make_mut(params).remove(name);
        }
        return;
    }
    match params.get(name) {
        Some(kept) if kept == value => {}
        None if params.len() >= MAX_PARAMETERS => {}
        _ => {
            Arc::make_mut(params).insert(name.to_string(), value.to_string());
        }
    }
}

/// A ParameterStatus body's name and value.
pub fn parameter_status(body: &[u8]) -> Option<(&str, &str)> {
    let mut parts = body.split(|&b| b == 0);
    let name = std::str::from_utf8(parts.next()?).ok()?;
    let value = std::str::from_utf8(parts.next()?).ok()?;
    Some((name, value))
}

/// `io` unless it waits longer than `[pool] read_timeout` (a statement's reads and writes
/// stay small: the timer is the connection's, see [`ReadTimer`]).
fn within<'a, T, F: std::future::Future<Output = io::Result<T>>>(
    timer: &'a mut ReadTimer,
    mut io: std::pin::Pin<&'a mut F>,
) -> impl std::future::Future<Output = io::Result<T>> + 'a {
    use std::future::Future;
    use std::task::Poll;
    timer.started = None;
    std::future::poll_fn(move |cx| {
        if let Poll::Ready(r) = io.as_mut().poll(cx) {
            return Poll::Ready(r);
        }
        let limit = timer.limit.get();
        let Some(d) = limit else {
            return Poll::Pending;
        };
        let due = *timer.started.get_or_insert_with(tokio::time::Instant::now) + d;
        let t = timer
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due)));
        // Armed for an earlier wait: when it goes off before this wait is due, it is armed
        // for this one (and at once if it would go off later: a reload shortened the limit).
        if t.deadline() > due {
            t.as_mut().reset(due);
        }
        while t.as_mut().poll(cx).is_ready() {
            if tokio::time::Instant::now() >= due {
                return Poll::Ready(Err(sluice_core::timed_out(limit)));
            }
            t.as_mut().reset(due);
        }
        Poll::Pending
    })
}

#[cfg(test)]
mod tests {
    use super::{keep_parameter, PgConn, StartupSettings, MAX_PARAMETERS, MAX_PARAMETER_BYTES};
    use std::collections::BTreeMap;
    use std::sync::Arc;

    fn list(pairs: &[(&str, &str)]) -> Arc<StartupSettings> {
        pairs
            .iter()
            .map(|(n, s)| (Box::from(*n), Box::from(*s)))
            .collect::<Vec<_>>()
            .into()
    }

    /// The comparison of a connection's settings with a session's startup settings is made
    /// in full once, then taken from the note for that very list, until the settings change.
    #[tokio::test]
    async fn settings_found_equal_are_noted_until_they_change() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let stream = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let mut conn = PgConn::new(super::BackendStream::Plain(stream), 8);
        let startup = list(&[("application_name", "SET application_name = 'a'")]);
        let map: BTreeMap<String, String> = startup
            .iter()
            .map(|(n, s)| (n.to_string(), s.to_string()))
            .collect();
        conn.set_applied(map.clone());
        assert!(!conn.applied_is(&startup, |_| false), "compared in full");
        assert!(conn.applied_is(&startup, |a| *a == map));
        assert!(
            conn.applied_is(&startup, |_| panic!("compared again")),
            "noted"
        );
        assert_eq!(Arc::strong_count(&startup), 1, "the note holds no list");
        // An equal list elsewhere is compared in full.
        let other = list(&[("application_name", "SET application_name = 'a'")]);
        assert!(!conn.applied_is(&other, |_| false));
        // Changed settings: the note is gone.
        conn.set_applied(BTreeMap::new());
        assert!(!conn.applied_is(&startup, |a| *a == map));
    }

    /// A server that reports ever new parameters, or huge values, is not believed beyond
    /// the bounds: the map keeps at most MAX_PARAMETERS names and no value too long (a name
    /// whose new value is too long is forgotten, not kept with the old one); a value already
    /// kept copies no shared map.
    #[test]
    fn reported_parameters_are_kept_within_bounds() {
        let mut params: Arc<BTreeMap<String, String>> = Arc::default();
        for i in 0..2 * MAX_PARAMETERS {
            keep_parameter(&mut params, &format!("x.p{i}"), "v");
        }
        assert_eq!(params.len(), MAX_PARAMETERS);
        // A name already kept still changes.
        keep_parameter(&mut params, "x.p0", "w");
        assert_eq!(params.get("x.p0").map(String::as_str), Some("w"));
        // Too long: not kept, and the old value goes.
        let long = "v".repeat(MAX_PARAMETER_BYTES);
        keep_parameter(&mut params, "x.p1", &long);
        assert!(!params.contains_key("x.p1"));
        keep_parameter(&mut params, "x.new", &long);
        assert!(!params.contains_key("x.new"));
        // The same value again: a shared map stays shared.
        let shared = params.clone();
        keep_parameter(&mut params, "x.p0", "w");
        assert!(Arc::ptr_eq(&shared, &params));
    }
}
