//! Opening a connection to a server: connect, log in (see `login.rs`), set up session
//! tracking; and putting one back to a fresh session (reset, change user).

use super::conn::*;
use super::login::auth_response;
use super::state::BackendState;
use super::stmt_cache::StmtCache;
use crate::wire::consts::{cap, com, NATIVE_PASSWORD};
use bytes::BytesMut;
use sluice_core::ConnectError;
use sluice_core::ReadTimeout;
use std::time::Instant;
use tokio::net::TcpStream;

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
            lifetime: Default::default(),
            next_seq: 0,
            gate: sluice_core::CancelGate::new(0),
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
}
