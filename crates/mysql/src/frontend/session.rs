//! One client session: the connection phase, then the command loop. The machinery that runs
//! a statement on a backend (routing, pinning, state sync, relaying) lives in `exec.rs`;
//! commands live in `query.rs`, `commands.rs` and `stmt.rs`.

use super::client::ClientConn;
use super::exec::Attached;
use super::handshake::{self, HandshakeContext};
use super::login::{self, Admission};
use super::pins::Pins;
use super::request::{Now, RequestError};
use super::stmt::Statements;
use crate::front::MysqlFrontend;
use crate::state::TrackedState;
use crate::wire::consts::{cap, com, err, status};
use crate::wire::packet::ReadError;
use sluice_core::connecting::Connecting;
use sluice_core::PoolKey;
use sluice_runtime::listener::ListenerInfo;
use sluice_runtime::registry::SessionHandle;
use sluice_runtime::users::User;
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;

/// Capability bits that change how a server formats responses; backend connections must
/// match the client's, so they are part of the pool key.
pub const FLAVOUR_CAPS: u64 = cap::FOUND_ROWS | cap::DEPRECATE_EOF | cap::IGNORE_SPACE;

/// The session ends (client gone, or its protocol state cannot be recovered).
#[derive(Debug)]
pub struct Fatal(pub String);

impl From<std::io::Error> for Fatal {
    fn from(e: std::io::Error) -> Self {
        Fatal(e.to_string())
    }
}

/// What the command loop does next.
#[derive(Debug, PartialEq, Eq)]
pub enum Flow {
    /// Read the next command.
    Continue,
    /// The client said goodbye.
    Quit,
}

/// Per-session state beyond what is replayed on backends.
#[derive(Debug, Default)]
pub struct SessionState {
    /// Schema, variables, multi-statement option the client expects.
    pub tracked: TrackedState,
    /// The server reported an open transaction.
    pub in_trans: bool,
    /// autocommit is on.
    pub autocommit: bool,
    /// sql_mode has NO_BACKSLASH_ESCAPES.
    pub no_backslash_escapes: bool,
    /// Why the session is pinned.
    pub pins: Pins,
    /// Temporary tables that exist (lower-case names).
    pub temp_tables: Vec<String>,
    /// Text-protocol prepared statements that exist.
    pub text_prepared: Vec<String>,
    /// The session's LAST_INSERT_ID().
    pub last_insert_id: u64,
    /// ROW_COUNT() of the previous statement.
    pub row_count: i64,
    /// FOUND_ROWS() of the previous statement (rows of its last result set).
    pub found_rows: u64,
}

impl SessionState {
    /// Status flags for packets the proxy answers itself.
    pub fn status(&self) -> u16 {
        let mut s = 0;
        if self.in_trans {
            s |= status::IN_TRANS;
        }
        if self.autocommit {
            s |= status::AUTOCOMMIT;
        }
        if self.no_backslash_escapes {
            s |= status::NO_BACKSLASH_ESCAPES;
        }
        s
    }
}

/// A client session.
pub struct Session {
    pub(crate) id: u32,
    pub(crate) proxy: Arc<MysqlFrontend>,
    pub(crate) client: ClientConn,
    pub(crate) user: Arc<User>,
    pub(crate) nonce: [u8; 20],
    pub(crate) listener: Arc<ListenerInfo>,
    pub(crate) key: PoolKey,
    pub(crate) st: SessionState,
    /// The backend connection kept for this session while it is pinned.
    pub(crate) held: Option<Attached>,
    /// The connection that ran the previous statement, kept because the next one may ask for
    /// its warnings or found rows.
    pub(crate) prev: Option<Attached>,
    /// The previous statement ran on `held` and the same holds for it.
    pub(crate) prev_is_held: bool,
    /// Collation the client logged in with (restored by COM_RESET_CONNECTION).
    pub(crate) collation: u16,
    pub(crate) stmts: Statements,
    pub(crate) handle: Arc<SessionHandle>,
    /// When the command being served arrived (for latency statistics).
    pub(crate) cmd_started: Instant,
    /// Failed COM_CHANGE_USERs; like MariaDB, a connection gets three.
    pub(crate) failed_change_user: u8,
    /// The session ends on an error about the client's own request, which it may still be
    /// sending: the stream closes so that the client reads the error (see
    /// [`sluice_runtime::tls::ClientStream::close_after_error`]), waiting for it at most
    /// `[login] handshake_timeout`.
    pub(crate) close_gently: bool,
    /// The digest (id, text) of the text statement being served, when it was computed with
    /// its scan, off the event loop (a long one: see `Session::scan_long`).
    pub(crate) long_digest: Option<Box<(u64, Vec<u8>)>>,
}

/// Serves one accepted client from handshake to goodbye.
pub async fn serve(
    proxy: Arc<MysqlFrontend>,
    stream: TcpStream,
    peer: SocketAddr,
    listener: Arc<ListenerInfo>,
    admission: Arc<Admission>,
    place: Connecting,
) {
    // The connection phase, the initial schema and the goodbye are boxed: their state lives
    // on the heap only while they run, so an idle session's task holds little more than the
    // `Session` itself (see docs/benchmarks.md, memory per idle client).
    // (Two statements: a temporary of the `.await` statement would keep its storage in this
    // future.)
    let opening = Box::pin(open(proxy, stream, peer, listener, &admission, place));
    let Some((mut session, started, _permit)) = opening.await else {
        return;
    };
    let result = match started {
        Ok(true) => {
            session
                .proxy
                .rt
                .stats
                .clients_connected
                .fetch_add(1, Relaxed);
            session.run().await
        }
        Ok(false) => Ok(()),
        Err(e) => Err(e),
    };
    if let Err(Fatal(reason)) = result {
        tracing::debug!(session = session.id, peer = %session.handle.peer, %reason, "session ended");
    }
    let finishing = Box::pin(session.finish());
    finishing.await;
    if session.close_gently {
        // Its connections back first: the client may take a while.
        let limit = session
            .proxy
            .rt
            .effective
            .load()
            .login
            .handshake_timeout
            .get();
        let closing = Box::pin(session.client.stream.close_after_error(limit));
        closing.await;
    }
    // Before the admission permit: see `Session::drop`.
    drop(session);
}

/// Authenticates the client and selects its initial schema. `None` if it was turned away
/// before a session existed; otherwise the session, whether it may go on (`Ok(false)`:
/// refused, already told why) and its place under the client limit.
async fn open(
    proxy: Arc<MysqlFrontend>,
    stream: TcpStream,
    peer: SocketAddr,
    listener: Arc<ListenerInfo>,
    admission: &Admission,
    place: Connecting,
) -> Option<(Box<Session>, Result<bool, Fatal>, OwnedSemaphorePermit)> {
    let id = proxy.rt.sessions.next_id();
    tracing::Span::current().record("id", id);
    let mut client = ClientConn::new(stream, proxy.rt.config.mysql.max_packet_size as usize);
    let users = proxy.rt.users.load_full();
    let version = proxy.announced_version();
    let tls = proxy.rt.tls.load_full();
    let cx = HandshakeContext {
        tls: (*tls).as_ref(),
        users: &users,
        server_version: &version,
        connection_id: id,
        peer,
        default_plugin: proxy.rt.config.mysql.default_auth_plugin.name(),
        throttle: &proxy.rt.throttle,
    };
    let timeout = proxy.rt.effective.load().login.handshake_timeout.get();
    let (auth, permit) = match login::admit(&mut client, &cx, admission, place, timeout).await {
        Ok(a) => a,
        Err(e) => {
            tracing::debug!(%peer, error = %e, "client not admitted");
            proxy.rt.refused();
            return None;
        }
    };
    let user = auth.user.clone();
    if let Err(msg) = user_connection_added(&user) {
        proxy.rt.refused();
        let _ = client
            .send_err(
                auth.next_seq,
                err::TOO_MANY_USER_CONNECTIONS,
                b"42000",
                &msg,
            )
            .await;
        return None;
    }
    let key = sluice_runtime::registry::SessionKey { id, secret: 0 };
    tracing::Span::current().record("user", &*user.name);
    let handle = proxy.rt.sessions.add(
        key,
        sluice_core::Protocol::Mysql,
        super::pins::Pins::labels_of,
        user.name.clone(),
        peer,
    );
    let mut session = Box::new(Session::new(proxy.clone(), client, &auth, listener, handle));
    let started = session.start(auth.database.as_deref(), auth.next_seq).await;
    Some((session, started, permit))
}

/// Counts a connection of `user`; over its `max_connections`, takes it back and says why.
pub(crate) fn user_connection_added(user: &User) -> Result<(), String> {
    if !user.add_connection() {
        return Err(format!(
            "User '{}' has exceeded the 'max_user_connections' resource (current value: {})",
            user.name, user.max_connections
        ));
    }
    Ok(())
}

impl Drop for Session {
    /// The session stops counting against its user's `max_connections` and leaves the
    /// registry, also when its task ended in a panic (both would stay, counted and shown, for
    /// ever).
    fn drop(&mut self) {
        self.user.connections.fetch_sub(1, Relaxed);
        self.proxy.rt.sessions.remove(self.id);
    }
}

impl Session {
    fn new(
        proxy: Arc<MysqlFrontend>,
        client: ClientConn,
        auth: &handshake::Authenticated,
        listener: Arc<ListenerInfo>,
        handle: Arc<SessionHandle>,
    ) -> Session {
        let key = PoolKey {
            user: auth.user.name.clone(),
            database: None,
            variant: client.caps & FLAVOUR_CAPS,
        };
        let mut st = SessionState {
            autocommit: true,
            ..SessionState::default()
        };
        st.tracked.multi_statements = client.has(cap::MULTI_STATEMENTS);
        st.tracked.vars = initial_charset_vars(&proxy, auth.collation as u16);
        Session {
            id: handle.id,
            proxy,
            client,
            user: auth.user.clone(),
            nonce: auth.nonce,
            listener,
            key,
            st,
            held: None,
            prev: None,
            prev_is_held: false,
            collation: auth.collation as u16,
            stmts: Statements::default(),
            handle,
            cmd_started: Instant::now(),
            failed_change_user: 0,
            close_gently: false,
            long_digest: None,
        }
    }

    /// Selects the initial schema (if any) and completes the connection phase. Returns false
    /// if the client was refused.
    async fn start(&mut self, database: Option<&str>, seq: u8) -> Result<bool, Fatal> {
        if let Some(db) = database {
            if self.proxy.schemas.contains(&self.user.name, db) {
                // Checked moments ago for this user: no round trip (see `schemas`).
                self.st.tracked.schema = Some(db.to_string());
            } else if let Err(e) = self.select_schema(db).await? {
                self.proxy.rt.refused();
                self.client
                    .send_err(seq, e.code, &e.sqlstate, &e.message)
                    .await?;
                return Ok(false);
            } else {
                self.proxy.schemas.insert(&self.user.name, db);
            }
        }
        let st = self.st.status();
        self.client.send_ok(seq, st).await?;
        Ok(true)
    }

    async fn run(&mut self) -> Result<(), Fatal> {
        loop {
            if self.handle.is_killed() {
                return Err(Fatal("killed".into()));
            }
            // Boxed, as the steps below that are not the idle wait: a session's future is as
            // large as its largest step, and an idle session holds all of it.
            if self.prev.is_some()
                && self.client.rbuf.is_empty()
                && !Box::pin(self.wait_next_or_drain()).await?
            {
                continue;
            }
            // Wait for the client (or a KILL) before taking a read buffer: an idle session
            // holds none.
            if self.client.rbuf.is_empty() {
                self.client.release_buffers();
                tokio::select! {
                    r = self.client.stream.readable() => r?,
                    _ = self.handle.wait_killed() => return Err(Fatal("killed".into())),
                }
            }
            let read = match self.client.request_now() {
                Now::Request(pkt) => Ok((pkt, None)),
                Now::Nothing => continue,
                Now::LongWay => Box::pin(self.read_next()).await?,
            };
            // A large request's charge against max_request_memory is held until its command
            // is done.
            let (pkt, _charge) = match read {
                Ok(r) => r,
                Err(RequestError::OverBudget {
                    over,
                    received,
                    next_seq,
                }) => {
                    Box::pin(self.refuse_over_budget(over, received, next_seq)).await?;
                    continue;
                }
                Err(RequestError::Read(ReadError::Closed)) => return Ok(()),
                // Read to its end and dropped: answered after its last packet. (A small one
                // is refused by its header: the client reads the answer once it has sent it.)
                Err(RequestError::TooLarge {
                    size,
                    max,
                    next_seq,
                }) => return Err(Box::pin(self.refuse_too_large(size, max, next_seq)).await),
                Err(RequestError::Read(ReadError::TooLarge { size, max })) => {
                    return Err(Box::pin(self.refuse_too_large(size, max, 1)).await)
                }
                Err(RequestError::Read(ReadError::Io(e)))
                    if e.kind() == std::io::ErrorKind::TimedOut =>
                {
                    tracing::warn!(session = self.id, peer = %self.handle.peer, "client disconnected: {e}");
                    return Err(Fatal(e.to_string()));
                }
                Err(RequestError::Read(e)) => return Err(Fatal(e.to_string())),
            };
            if pkt.payload.is_empty() || pkt.seq != 0 {
                let msg = if pkt.payload.is_empty() {
                    "Malformed packet: empty command"
                } else {
                    "Got packets out of order"
                };
                let code = if pkt.payload.is_empty() {
                    err::MALFORMED_PACKET
                } else {
                    err::PACKETS_OUT_OF_ORDER
                };
                let seq = pkt.last_seq.wrapping_add(1);
                let _ = Box::pin(self.client.send_err(seq, code, b"08S01", msg)).await;
                self.close_gently = true;
                return Err(Fatal(msg.into()));
            }
            self.proxy.rt.stats.statements.fetch_add(1, Relaxed);
            self.cmd_started = Instant::now();
            // Boxed so the idle session future stays small: only the loop's state lives
            // across the wait for the next command.
            let flow = Box::pin(self.command(pkt.payload)).await?;
            if flow == Flow::Quit {
                return Ok(());
            }
            if self.held.is_none() && !self.st.pins.is_empty() {
                // The connection holding the session's transaction, locks or temporary tables
                // is gone (its server failed). Like a direct connection that broke, the
                // session ends: continuing would run the rest of a transaction in autocommit.
                return Err(Fatal(format!(
                    "pinned backend connection lost ({})",
                    self.st.pins
                )));
            }
        }
    }

    /// Waits for the client's next command while keeping the previous statement's connection;
    /// gives that connection back if its server leaves service meanwhile (a switchover drains
    /// it). Returns false if it did (and nothing was read).
    async fn wait_next_or_drain(&mut self) -> Result<bool, Fatal> {
        let Some(server) = self.prev.as_ref().map(|p| p.lease.server().clone()) else {
            return Ok(true);
        };
        let mut drain = server.drain_watch();
        let leaving = matches!(server.health(), sluice_core::Health::Offline { .. });
        if !leaving {
            tokio::select! {
                // Readiness only: nothing is consumed, so giving up here loses nothing.
                r = self.client.stream.readable() => { r?; return Ok(true) }
                _ = self.handle.wait_killed() => return Err(Fatal("killed".into())),
                r = drain.changed() => if r.is_err() { return Ok(true) },
            }
        }
        if let Some(prev) = self.prev.take() {
            self.prev_is_held = false;
            // Boxed: rare, and its state would otherwise sit in every idle session.
            Box::pin(self.release(prev)).await;
            if self.held.is_none() {
                self.handle.set_backend(None);
            }
        }
        Ok(false)
    }

    async fn command(&mut self, payload: bytes::BytesMut) -> Result<Flow, Fatal> {
        tracing::trace!(
            session = self.id,
            command = payload[0],
            len = payload.len(),
            "command"
        );
        match payload[0] {
            com::QUIT => return Ok(Flow::Quit),
            com::QUERY => self.query(payload).await?,
            com::PING => {
                let st = self.st.status();
                self.client.send_ok(1, st).await?;
            }
            com::INIT_DB => self.init_db(&payload).await?,
            com::FIELD_LIST => self.field_list(&payload).await?,
            com::STATISTICS => self.statistics(&payload).await?,
            com::SET_OPTION => self.set_option(&payload).await?,
            com::RESET_CONNECTION => self.reset_connection().await?,
            com::CHANGE_USER => return self.change_user(&payload).await,
            com::PROCESS_KILL => self.process_kill(&payload).await?,
            com::STMT_PREPARE => self.stmt_prepare(payload).await?,
            com::STMT_EXECUTE => self.stmt_execute(payload).await?,
            com::STMT_SEND_LONG_DATA => self.stmt_send_long_data(payload).await?,
            com::STMT_CLOSE => self.stmt_close(&payload).await?,
            com::STMT_RESET => self.stmt_reset(&payload).await?,
            com::STMT_FETCH => self.stmt_fetch(payload).await?,
            com::DEBUG | com::REFRESH => self.forward_to_writer(&payload).await?,
            other => {
                let msg = format!("Unknown command {other:#04x}");
                self.client
                    .send_err(1, err::UNKNOWN_COM, b"08S01", &msg)
                    .await?;
            }
        }
        Ok(Flow::Continue)
    }

    /// Releases or resets what the session holds when the client leaves.
    async fn finish(&mut self) {
        if let Some(att) = self.prev.take() {
            self.release(att).await;
        }
        if let Some(att) = self.held.take() {
            self.dispose(att, self.st.pins).await;
        }
        self.handle.set_backend(None);
    }

    /// Answers the current command with an error (sequence id 1).
    pub(crate) async fn reply_err(
        &mut self,
        code: u16,
        sqlstate: &[u8; 5],
        message: &str,
    ) -> Result<(), Fatal> {
        Ok(self.client.send_err(1, code, sqlstate, message).await?)
    }

    /// Publishes pins to the registry (and, while user-level locks may be held, the backend
    /// connection they live on).
    pub(crate) fn publish_pins(&self) {
        self.handle.set_pins(self.st.pins.0);
        let holder = self
            .held
            .as_ref()
            .filter(|_| self.st.pins.has(super::pins::Pins::USER_LOCKS))
            .map(|h| (h.lease.server().name.clone(), h.lease.conn_ref().thread_id));
        self.proxy.rt.sessions.set_lock_holder(self.id, holder);
    }
}

/// The character-set variables of a fresh direct connection with collation `id`, shared by
/// every session that logged in with it (see `MysqlFrontend::charset_vars`).
pub(crate) fn initial_charset_vars(
    proxy: &MysqlFrontend,
    id: u16,
) -> Arc<std::collections::BTreeMap<String, String>> {
    let facts = proxy.info.get();
    let mut cache = proxy.charset_vars.lock();
    // Facts are replaced, never changed: a new snapshot empties the cache.
    let stamp = Arc::as_ptr(&facts) as usize;
    if cache.0 != stamp {
        *cache = (stamp, Default::default());
    }
    cache
        .1
        .entry(id)
        .or_insert_with(|| {
            let [client, connection, results, collation] = facts.charset_vars(id);
            Arc::new(
                [
                    ("character_set_client", client),
                    ("character_set_connection", connection),
                    ("character_set_results", results),
                    ("collation_connection", collation),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            )
        })
        .clone()
}

#[cfg(test)]
mod tests {
    /// An idle client costs its `Session` plus the task that serves it (docs/benchmarks.md,
    /// memory per idle client connection): keep both small. Bounds for 64-bit targets.
    #[test]
    fn idle_session_stays_small() {
        assert!(std::mem::size_of::<super::Session>() <= 560);
        // A lease carries its pool key (user, database, variant): 80 bytes since keys carry a
        // database. Only sessions using a connection hold one.
        assert!(std::mem::size_of::<super::Attached>() <= 80);
        assert!(std::mem::size_of::<super::SessionHandle>() <= 192);
    }

    fn future_size<A, B, C, D, E, G, Fut>(_: impl FnOnce(A, B, C, D, E, G) -> Fut) -> usize {
        std::mem::size_of::<Fut>()
    }

    /// An idle session's task is its `serve` future, as large as its largest step: every step
    /// but the wait for the client's next command (its login, a command, reading one the long
    /// way, error replies, the goodbye) is boxed, there only while it runs; a small command
    /// that is there at once is read without a future (`ClientConn::request_now`). 392 bytes
    /// in a release build (752 before the read and the error replies were boxed).
    #[test]
    fn an_idle_sessions_future_holds_little_more_than_waiting_takes() {
        let size = future_size(super::serve);
        assert!(size <= 432, "{size} bytes");
    }
}
