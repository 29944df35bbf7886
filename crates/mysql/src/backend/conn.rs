//! A connection from the proxy to a backend server: login, session-tracking setup, and the
//! small control-plane queries the proxy runs itself. Statement traffic is streamed by the
//! frontend's relay directly over [`BackendConn::stream`] and [`BackendConn::rbuf`].

use super::greeting::preview;
use super::login::auth_response;
use super::state::BackendState;
use super::stmt_cache::StmtCache;
use super::timeout::{expiry, timed_out, ReadTimeout};
use crate::wire::buf::Reader;
use crate::wire::consts::{cap, com, NATIVE_PASSWORD};
use crate::wire::ok::{is_eof, parse_err, parse_ok};
use crate::wire::packet::{frame, read_packet, Packet, ReadError};
use bytes::BytesMut;
use sluice_core::ConnectError;
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

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
    fn from_err_packet(p: &[u8]) -> BackendError {
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
    pub failed: Option<watch::Receiver<u64>>,
    /// How long a read waits for the server (`[pool] read_timeout`; none by default).
    pub read_timeout: ReadTimeout,
    /// Sequence id the server's next packet must carry (the exchange's next).
    pub(super) next_seq: u8,
}

/// A text result set read by a control-plane query.
pub type Rows = Vec<Vec<Option<String>>>;

impl BackendConn {
    /// Connects, logs in as `user`/`password`, and enables session tracking.
    pub async fn connect(
        address: &str,
        user: &str,
        password: &str,
        flavour_caps: u64,
        stmts: StmtCache,
    ) -> Result<BackendConn, ConnectError> {
        Self::connect_with(address, user, password, flavour_caps, stmts, None).await
    }

    /// Like [`BackendConn::connect`], over TLS when `tls` is given (the server must offer
    /// it, and its certificate must verify).
    pub async fn connect_with(
        address: &str,
        user: &str,
        password: &str,
        flavour_caps: u64,
        stmts: StmtCache,
        tls: Option<&sluice_runtime::tls::backend::BackendTls>,
    ) -> Result<BackendConn, ConnectError> {
        let mut conn = Self::login_only(address, user, password, flavour_caps, stmts, tls).await?;
        conn.setup_tracking().await.map_err(|e| match e {
            BackendError::Server {
                code,
                sqlstate,
                message,
            } => ConnectError::refused(code, sqlstate, message),
            other => ConnectError::down(format!("{address}: {other}")),
        })?;
        Ok(conn)
    }

    /// Connects and logs in, without the session tracking that connections serving clients
    /// need (the monitor's connections: two round trips fewer per connection).
    pub async fn login_only(
        address: &str,
        user: &str,
        password: &str,
        flavour_caps: u64,
        stmts: StmtCache,
        tls: Option<&sluice_runtime::tls::backend::BackendTls>,
    ) -> Result<BackendConn, ConnectError> {
        let stream = TcpStream::connect(address)
            .await
            .map_err(|e| ConnectError::down(format!("cannot connect to {address}: {e}")))?;
        let _ = stream.set_nodelay(true);
        let mut conn = BackendConn {
            stream: sluice_runtime::tls::backend::BackendStream::Plain(stream),
            rbuf: BytesMut::with_capacity(16 * 1024),
            wbuf: Vec::with_capacity(1024),
            thread_id: 0,
            caps: 0,
            server_version: String::new(),
            state: BackendState::default(),
            stmts,
            opened: Instant::now(),
            nonce: Vec::new(),
            server_stmt_limit: 0,
            failed: None,
            read_timeout: ReadTimeout::default(),
            next_seq: 0,
        };
        conn.state.last_insert_id = Some(0);
        conn.login(address, user, password, flavour_caps, tls)
            .await?;
        // The multi-statement option starts as negotiated and then changes only with
        // COM_SET_OPTION (it survives COM_RESET_CONNECTION and COM_CHANGE_USER).
        conn.state.tracked.multi_statements = conn.caps & cap::MULTI_STATEMENTS != 0;
        Ok(conn)
    }

    /// Resets the session (COM_RESET_CONNECTION: rolls back, drops temporary tables, user
    /// variables, locks and prepared statements, restores variables) and re-enables tracking.
    /// The schema is kept.
    pub async fn reset(&mut self) -> Result<(), BackendError> {
        self.simple(com::RESET_CONNECTION, &[]).await?;
        self.stmts.clear();
        self.state.last_insert_id = Some(0);
        self.setup_tracking().await
    }

    /// Logs in again as `user` with `schema` (COM_CHANGE_USER): a full reset that, unlike
    /// [`BackendConn::reset`], also clears the current schema.
    pub async fn change_user(
        &mut self,
        user: &str,
        password: &str,
        schema: Option<&str>,
    ) -> Result<(), BackendError> {
        let (plugin, auth) = auth_response(NATIVE_PASSWORD, password.as_bytes(), &self.nonce);
        let mut payload = Vec::with_capacity(64);
        payload.push(com::CHANGE_USER);
        payload.extend_from_slice(user.as_bytes());
        payload.push(0);
        payload.push(auth.len() as u8);
        payload.extend_from_slice(&auth);
        payload.extend_from_slice(schema.unwrap_or("").as_bytes());
        payload.push(0);
        payload.extend_from_slice(&(BACKEND_COLLATION as u16).to_le_bytes());
        payload.extend_from_slice(plugin.as_bytes());
        payload.push(0);
        if self.caps & cap::CONNECT_ATTRS != 0 {
            payload.push(0);
        }
        self.send(0, &payload).await?;
        let address = self
            .stream
            .peer_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        self.auth_exchange(&address, password, plugin)
            .await
            .map_err(|e| match (e.code, e.sqlstate) {
                (Some(code), Some(sqlstate)) => BackendError::Server {
                    code,
                    sqlstate,
                    message: e.message,
                },
                _ => BackendError::Protocol(e.message),
            })?;
        self.stmts.clear();
        self.state.last_insert_id = Some(0);
        self.state.tracked.schema = schema.map(str::to_string);
        self.setup_tracking().await
    }

    async fn setup_tracking(&mut self) -> Result<(), BackendError> {
        self.state.tracked.vars = Default::default();
        self.exec(TRACKING_SETUP).await?;
        let rows = self
            .query_rows("SELECT @@character_set_client, @@character_set_connection, @@character_set_results, @@collation_connection, @@autocommit, @@sql_mode, @@global.max_prepared_stmt_count")
            .await?;
        let row = rows
            .into_iter()
            .next()
            .ok_or_else(|| BackendError::Protocol("empty setup result".into()))?;
        let names = [
            "character_set_client",
            "character_set_connection",
            "character_set_results",
            "collation_connection",
        ];
        for (name, v) in names.iter().zip(row.iter()) {
            std::sync::Arc::make_mut(&mut self.state.tracked.vars)
                .insert((*name).to_string(), v.clone().unwrap_or_default());
        }
        self.state.baseline_sql_mode = row.get(5).cloned().flatten().unwrap_or_default();
        self.server_stmt_limit = row
            .get(6)
            .cloned()
            .flatten()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        Ok(())
    }

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
            _ = declared_failed(failed) => return Err(ReadError::Io(server_failed_error())),
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
            _ = declared_failed(&mut self.failed) => Err(server_failed_error()),
            _ = expiry(limit) => Err(timed_out(limit)),
        }
    }

    /// True if the server was declared failed since this connection was opened: it must not
    /// be used again.
    pub fn server_failed(&self) -> bool {
        self.failed
            .as_ref()
            .is_some_and(|f| f.has_changed().unwrap_or(false))
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
        let mut probe = [0u8; 1];
        match self.stream.try_read(&mut probe) {
            Ok(_) => true, // EOF, or bytes nobody asked for
            Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
        }
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
                r = self.stream.write_all(&self.wbuf) => r?,
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
                r = self.stream.write_all(&self.wbuf) => r,
                _ = expiry(limit) => Err(timed_out(limit)),
            };
        }
        let mut payload = Vec::with_capacity(len);
        payload.push(command);
        payload.extend_from_slice(arg);
        self.send(0, &payload).await.map(|_| ())
    }

    /// Runs a statement that returns no rows; returns the OK packet's status flags and the
    /// raw session-state data (owned).
    pub async fn exec(&mut self, sql: &str) -> Result<OkInfo, BackendError> {
        self.send_command(com::QUERY, sql.as_bytes()).await?;
        let mut last = OkInfo::default();
        loop {
            let p = self.read().await?;
            match p.payload.first() {
                Some(0x00) => {
                    let ok = parse_ok(&p.payload)
                        .ok_or_else(|| BackendError::Protocol("malformed OK".into()))?;
                    last = OkInfo::from(&ok);
                    if ok.status & crate::wire::status::MORE_RESULTS_EXISTS == 0 {
                        return Ok(last);
                    }
                }
                Some(0xff) => return Err(BackendError::from_err_packet(&p.payload)),
                _ => {
                    // A result set: drain it.
                    let st = self.drain_resultset(&p.payload, None).await?;
                    last.status = st;
                    if st & crate::wire::status::MORE_RESULTS_EXISTS == 0 {
                        return Ok(last);
                    }
                }
            }
        }
    }

    /// Runs a query and returns the rows of its first result set as text.
    pub async fn query_rows(&mut self, sql: &str) -> Result<Rows, BackendError> {
        self.send_command(com::QUERY, sql.as_bytes()).await?;
        let p = self.read().await?;
        match p.payload.first() {
            Some(0xff) => Err(BackendError::from_err_packet(&p.payload)),
            Some(0x00) => Ok(Vec::new()),
            _ => {
                let mut rows = Vec::new();
                let st = self.drain_resultset(&p.payload, Some(&mut rows)).await?;
                if st & crate::wire::status::MORE_RESULTS_EXISTS != 0 {
                    self.drain_more_results().await?;
                }
                Ok(rows)
            }
        }
    }

    /// Runs a query and returns its first result set's column names and rows (as text).
    pub async fn query_table(&mut self, sql: &str) -> Result<(Vec<String>, Rows), BackendError> {
        self.send_command(com::QUERY, sql.as_bytes()).await?;
        let p = self.read().await?;
        match p.payload.first() {
            Some(0xff) => Err(BackendError::from_err_packet(&p.payload)),
            Some(0x00) => Ok((Vec::new(), Vec::new())),
            _ => {
                let mut names = Vec::new();
                let mut rows = Vec::new();
                let st = self
                    .drain_resultset_named(&p.payload, Some(&mut names), Some(&mut rows))
                    .await?;
                if st & crate::wire::status::MORE_RESULTS_EXISTS != 0 {
                    self.drain_more_results().await?;
                }
                Ok((names, rows))
            }
        }
    }

    async fn drain_more_results(&mut self) -> Result<(), BackendError> {
        loop {
            let p = self.read().await?;
            let st = match p.payload.first() {
                Some(0x00) => parse_ok(&p.payload).map(|o| o.status).unwrap_or(0),
                Some(0xff) => return Err(BackendError::from_err_packet(&p.payload)),
                _ => self.drain_resultset(&p.payload, None).await?,
            };
            if st & crate::wire::status::MORE_RESULTS_EXISTS == 0 {
                return Ok(());
            }
        }
    }

    /// Reads the rest of a text result set whose column-count packet was `first`. Returns the
    /// terminator's status flags.
    async fn drain_resultset(
        &mut self,
        first: &[u8],
        rows: Option<&mut Rows>,
    ) -> Result<u16, BackendError> {
        self.drain_resultset_named(first, None, rows).await
    }

    async fn drain_resultset_named(
        &mut self,
        first: &[u8],
        mut names: Option<&mut Vec<String>>,
        mut rows: Option<&mut Rows>,
    ) -> Result<u16, BackendError> {
        let ncols = Reader::new(first)
            .lenenc()
            .ok_or_else(|| BackendError::Protocol("malformed column count".into()))?
            as usize;
        for _ in 0..ncols {
            let p = self.read().await?;
            if let Some(names) = names.as_deref_mut() {
                // catalog, schema, table, org_table, name, ...
                let mut r = Reader::new(&p.payload);
                for _ in 0..4 {
                    r.lenenc_bytes();
                }
                let name = r
                    .lenenc_bytes()
                    .map(|b| String::from_utf8_lossy(b).into_owned());
                names.push(name.unwrap_or_default());
            }
        }
        let deprecate_eof = self.caps & cap::DEPRECATE_EOF != 0;
        if !deprecate_eof {
            self.read().await?; // EOF after column definitions
        }
        loop {
            let p = self.read().await?;
            let b = p.payload.first().copied();
            if b == Some(0xff) {
                return Err(BackendError::from_err_packet(&p.payload));
            }
            if b == Some(0xfe) && p.payload.len() < crate::wire::consts::MAX_PAYLOAD {
                if deprecate_eof {
                    return Ok(parse_ok(&p.payload).map(|o| o.status).unwrap_or(0));
                }
                if is_eof(&p.payload) {
                    return Ok(crate::wire::ok::parse_eof(&p.payload)
                        .map(|e| e.status)
                        .unwrap_or(0));
                }
            }
            if let Some(rows) = rows.as_deref_mut() {
                if rows.len() < 100_000 {
                    let mut r = Reader::new(&p.payload);
                    let mut row = Vec::with_capacity(ncols);
                    for _ in 0..ncols {
                        if r.rest().first() == Some(&0xfb) {
                            r.u8();
                            row.push(None);
                        } else {
                            row.push(
                                r.lenenc_bytes()
                                    .map(|b| String::from_utf8_lossy(b).into_owned()),
                            );
                        }
                    }
                    rows.push(row);
                }
            }
        }
    }

    /// Sends COM_PING and returns the server status flags.
    pub async fn ping(&mut self) -> Result<u16, BackendError> {
        self.simple(com::PING, &[]).await.map(|ok| ok.status)
    }

    /// Sends a command the server answers with one OK, EOF or ERR packet (COM_INIT_DB,
    /// COM_PING, COM_SET_OPTION, COM_RESET_CONNECTION, COM_STMT_RESET).
    pub async fn simple(&mut self, command: u8, arg: &[u8]) -> Result<OkInfo, BackendError> {
        self.send_command(command, arg).await?;
        let p = self.read().await?;
        if let Some(eof) = crate::wire::ok::parse_eof(&p.payload) {
            return Ok(OkInfo {
                status: eof.status,
                warnings: eof.warnings,
                ..OkInfo::default()
            });
        }
        match p.payload.first() {
            Some(0x00 | 0xfe) => parse_ok(&p.payload)
                .map(|o| OkInfo::from(&o))
                .ok_or_else(|| BackendError::Protocol("malformed OK packet".into())),
            Some(0xff) => Err(BackendError::from_err_packet(&p.payload)),
            _ => Err(BackendError::Protocol(format!(
                "unexpected answer to command {command:#04x}"
            ))),
        }
    }

    /// True if the server uses classic EOF packets on this connection.
    pub fn uses_eof(&self) -> bool {
        self.caps & cap::DEPRECATE_EOF == 0
    }
}

impl Drop for BackendConn {
    fn drop(&mut self) {
        // Say goodbye so the server does not count an aborted connection. Five bytes always
        // fit an idle socket's send buffer; if not, closing is enough.
        let _ = self.stream.try_write(&[1, 0, 0, 0, com::QUIT]);
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
            return Ok(seq);
        }
    }
}

/// Resolves when the monitor declares the connection's server failed (never, without a
/// watch).
async fn declared_failed(failed: &mut Option<watch::Receiver<u64>>) {
    match failed {
        Some(rx) => {
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending::<()>().await,
    }
}

fn server_failed_error() -> std::io::Error {
    std::io::Error::other("the server stopped answering and was declared failed")
}
