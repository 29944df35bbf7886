//! A connection from the proxy to a backend server: what it holds and how packets are read
//! and written on it. Opening it (login, session-tracking setup) is `open.rs`; the small
//! control-plane queries the proxy runs itself are `control.rs`. Statement traffic is
//! streamed by the frontend's relay directly over [`BackendConn::stream`] and
//! [`BackendConn::rbuf`].

use super::greeting::preview;
use super::state::BackendState;
use super::stmt_cache::StmtCache;
use crate::wire::consts::{cap, com};
use crate::wire::ok::parse_err;
use crate::wire::packet::{frame, read_packet, Packet, ReadError};
use bytes::BytesMut;
use sluice_core::{expiry, timed_out, ReadTimeout};
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Capabilities the proxy always asks servers for. Flavour bits (see [`crate::flavour`]) are
/// added per connection.
pub const BACKEND_CAPS: u64 = cap::LONG_PASSWORD
    | cap::LONG_FLAG
    | cap::LOCAL_FILES
    | cap::PROTOCOL_41
    | cap::TRANSACTIONS
    | cap::SECURE_CONNECTION
    | cap::MULTI_STATEMENTS
    | cap::MULTI_RESULTS
    | cap::PS_MULTI_RESULTS
    | cap::PLUGIN_AUTH
    | cap::PLUGIN_AUTH_LENENC_CLIENT_DATA
    | cap::CONNECT_ATTRS
    | cap::SESSION_TRACK;

/// Collation the proxy logs in with (utf8mb4_general_ci); sessions switch as they need.
pub const BACKEND_COLLATION: u8 = 45;

/// Largest response the control-plane helpers will buffer.
const CONTROL_RESPONSE_LIMIT: usize = 16 << 20;

/// Payloads larger than this are written straight from the caller's buffer instead of being
/// copied into the connection's scratch buffer first.
const COPY_AT_MOST: usize = 64 * 1024;

/// Statement the proxy runs on every new backend connection so the server reports the
/// session-state changes the proxy needs to follow.
pub const TRACKING_SETUP: &str = "SET session_track_schema=1, session_track_state_change=1, \
session_track_system_variables='*', session_track_transaction_info='CHARACTERISTICS'";

/// Why a backend operation failed.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The connection broke.
    #[error("lost connection to backend: {0}")]
    Io(#[from] std::io::Error),
    /// The server sent something the proxy did not expect.
    #[error("backend protocol error: {0}")]
    Protocol(String),
    /// The server answered with an error.
    #[error("{message}")]
    Server {
        /// Error code.
        code: u16,
        /// SQL state.
        sqlstate: [u8; 5],
        /// Message.
        message: String,
    },
}

impl From<ReadError> for BackendError {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::Closed => BackendError::Io(std::io::ErrorKind::UnexpectedEof.into()),
            // What the server sent is not the protocol (see `BackendConn::read`).
            ReadError::Io(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                BackendError::Protocol(e.to_string())
            }
            ReadError::Io(e) => BackendError::Io(e),
            ReadError::TooLarge { size, max } => {
                BackendError::Protocol(format!("response packet of {size} bytes exceeds {max}"))
            }
        }
    }
}

impl BackendError {
    pub(super) fn from_err_packet(p: &[u8]) -> BackendError {
        match parse_err(p) {
            Some(e) => BackendError::Server {
                code: e.code,
                sqlstate: e.sqlstate,
                message: e.message_str(),
            },
            None => BackendError::Protocol("malformed error packet".into()),
        }
    }
}

/// A logged-in backend connection.
pub struct BackendConn {
    /// The socket (TLS with `[pool] tls`).
    pub stream: sluice_runtime::tls::backend::BackendStream,
    /// Read buffer (bytes received but not yet consumed).
    pub rbuf: BytesMut,
    /// Scratch buffer for outgoing packets.
    pub wbuf: Vec<u8>,
    /// Server thread id of this connection (for KILL).
    pub thread_id: u32,
    /// Negotiated capabilities.
    pub caps: u64,
    /// Server version string.
    pub server_version: String,
    /// Session state currently in force on this connection.
    pub state: BackendState,
    /// Prepared statements held on this connection.
    pub stmts: StmtCache,
    /// When the connection was opened.
    pub opened: Instant,
    /// The greeting's nonce (COM_CHANGE_USER authenticates against it).
    pub(super) nonce: Vec<u8>,
    /// The server's `max_prepared_stmt_count` when the connection was opened.
    pub server_stmt_limit: u64,
    /// Changes when the monitor declares the server failed: reads give up then.
    pub failed: Option<sluice_core::FailedWatch>,
    /// How long a read waits for the server (`[pool] read_timeout`; none by default).
    pub read_timeout: ReadTimeout,
    /// `[pool] max_lifetime` (none by default), and when it was opened.
    pub lifetime: sluice_core::Aging,
    /// Sequence id the server's next packet must carry (the exchange's next).
    pub(super) next_seq: u8,
    /// Keeps `KILL QUERY` for a session's statement within the lease it was meant for.
    pub gate: std::sync::Arc<sluice_core::CancelGate>,
}

/// A text result set read by a control-plane query.
pub type Rows = Vec<Vec<Option<String>>>;

impl BackendConn {
    /// Reads one logical packet. A packet that is not the next of the exchange (its sequence
    /// id is wrong: the server sent something else than the protocol) fails with an
    /// `InvalidData` error as soon as its header arrives, not after waiting for as many bytes
    /// as its length field claims.
    pub async fn read(&mut self) -> Result<Packet, ReadError> {
        let limit = self.read_timeout.get();
        let expected = self.next_seq;
        let BackendConn {
            stream,
            rbuf,
            failed,
            ..
        } = self;
        let work = async {
            while rbuf.len() < 4 {
                if stream.read_buf(rbuf).await? == 0 {
                    break; // read_packet tells a clean close from a broken packet
                }
            }
            if rbuf.len() >= 4 && rbuf[3] != expected {
                return Err(ReadError::Io(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!(
                        "the server sent a malformed packet: sequence id {} where {expected} was expected; it starts with {}",
                        rbuf[3],
                        preview(rbuf)
                    ),
                )));
            }
            read_packet(stream, rbuf, CONTROL_RESPONSE_LIMIT.max(1 << 30)).await
        };
        let p = tokio::select! {
            biased;
            r = work => r?,
            _ = declared_failed(failed.as_mut()) => return Err(ReadError::Io(server_failed_error())),
            _ = expiry(limit) => return Err(ReadError::Io(timed_out(limit))),
        };
        self.next_seq = p.last_seq.wrapping_add(1);
        Ok(p)
    }

    /// Reads more bytes of a response into `rbuf`; gives up when the server is declared
    /// failed, or sends nothing for `[pool] read_timeout`.
    pub async fn read_more(&mut self) -> std::io::Result<usize> {
        let limit = self.read_timeout.get();
        tokio::select! {
            biased;
            r = self.stream.read_buf(&mut self.rbuf) => r,
            _ = declared_failed(self.failed.as_mut()) => Err(server_failed_error()),
            _ = expiry(limit) => Err(timed_out(limit)),
        }
    }

    /// True if the server was declared failed since this connection was opened: it must not
    /// be used again.
    pub fn server_failed(&self) -> bool {
        self.failed.as_ref().is_some_and(|f| f.has_failed())
    }

    /// True if this idle connection can no longer serve a statement: the server closed it
    /// (a shutdown, `wait_timeout`, a KILL) or sent something unasked (a shutdown's error
    /// packet). Checked without blocking before an idle pooled connection is used, so that a
    /// statement is never sent on a connection that was already dead — such a statement's
    /// outcome would look unknown although the server never saw it.
    pub fn peer_closed(&self) -> bool {
        if !self.rbuf.is_empty() || self.server_failed() {
            return true;
        }
        // EOF, or bytes nobody asked for (over TLS too).
        self.stream.idle_closed()
    }

    /// Sends `payload` as a packet starting at `seq`; returns the next sequence id. A large
    /// payload is written from where it is, not copied (a 64 MiB statement is not held twice).
    pub async fn send(&mut self, seq: u8, payload: &[u8]) -> Result<u8, std::io::Error> {
        let limit = self.read_timeout.get();
        let next = if payload.len() > COPY_AT_MOST {
            tokio::select! {
                biased;
                r = write_framed(&mut self.stream, seq, payload) => r?,
                _ = expiry(limit) => return Err(timed_out(limit)),
            }
        } else {
            self.wbuf.clear();
            let next = frame(&mut self.wbuf, seq, payload);
            tokio::select! {
                biased;
                r = self.stream.write_all_sent(&self.wbuf) => r?,
                _ = expiry(limit) => return Err(timed_out(limit)),
            }
            next
        };
        self.next_seq = next;
        Ok(next)
    }

    /// Sends a command: the command byte followed by `arg`, sequence id 0.
    pub async fn send_command(&mut self, command: u8, arg: &[u8]) -> Result<(), std::io::Error> {
        self.wbuf.clear();
        let len = arg.len() + 1;
        if len < crate::wire::consts::MAX_PAYLOAD {
            self.wbuf
                .extend_from_slice(&(len as u32).to_le_bytes()[..3]);
            self.wbuf.push(0);
            self.wbuf.push(command);
            self.wbuf.extend_from_slice(arg);
            self.next_seq = 1;
            let limit = self.read_timeout.get();
            return tokio::select! {
                biased;
                r = self.stream.write_all_sent(&self.wbuf) => r,
                _ = expiry(limit) => Err(timed_out(limit)),
            };
        }
        let mut payload = Vec::with_capacity(len);
        payload.push(command);
        payload.extend_from_slice(arg);
        self.send(0, &payload).await.map(|_| ())
    }

    /// True if the server uses classic EOF packets on this connection.
    pub fn uses_eof(&self) -> bool {
        self.caps & cap::DEPRECATE_EOF == 0
    }
}

impl Drop for BackendConn {
    fn drop(&mut self) {
        // Say goodbye so the server does not count an aborted connection (over TLS too).
        self.stream.goodbye(&[1, 0, 0, 0, com::QUIT]);
    }
}

/// The interesting parts of an OK packet, owned.
#[derive(Clone, Debug, Default)]
pub struct OkInfo {
    /// Status flags.
    pub status: u16,
    /// Affected rows.
    pub affected_rows: u64,
    /// Last insert id.
    pub last_insert_id: u64,
    /// Warnings.
    pub warnings: u16,
    /// Session-state data.
    pub session_state: Vec<u8>,
}

impl From<&crate::wire::ok::OkPacket<'_>> for OkInfo {
    fn from(ok: &crate::wire::ok::OkPacket<'_>) -> Self {
        OkInfo {
            status: ok.status,
            affected_rows: ok.affected_rows,
            last_insert_id: ok.last_insert_id,
            warnings: ok.warnings,
            session_state: ok.session_state.to_vec(),
        }
    }
}

/// Writes `payload` as packets starting at `seq` without copying it; returns the next
/// sequence id.
async fn write_framed(
    stream: &mut sluice_runtime::tls::backend::BackendStream,
    mut seq: u8,
    payload: &[u8],
) -> std::io::Result<u8> {
    let mut rest = payload;
    loop {
        let n = rest.len().min(crate::wire::consts::MAX_PAYLOAD);
        let mut header = (n as u32).to_le_bytes();
        header[3] = seq;
        stream.write_all(&header).await?;
        stream.write_all(&rest[..n]).await?;
        seq = seq.wrapping_add(1);
        rest = &rest[n..];
        if n < crate::wire::consts::MAX_PAYLOAD {
            // (Over TLS the last records may still be in rustls: see `write_all_sent`.)
            stream.write_all_sent(&[]).await?;
            return Ok(seq);
        }
    }
}

/// Resolves when the monitor declares the connection's server failed (never, without a
/// watch).
async fn declared_failed(failed: Option<&mut sluice_core::FailedWatch>) {
    match failed {
        Some(w) => w.failed().await,
        None => std::future::pending::<()>().await,
    }
}

fn server_failed_error() -> std::io::Error {
    std::io::Error::other("the server stopped answering and was declared failed")
}
