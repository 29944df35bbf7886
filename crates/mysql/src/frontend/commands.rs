//! Commands other than queries and prepared statements.

use super::handshake::HandshakeError;
use super::pipeline::{Body, Stmt};
use super::scan::{Expect, ServerError};
use super::session::{
    initial_charset_vars, user_connection_added, Fatal, Flow, Session, FLAVOUR_CAPS,
};
use crate::backend::stmt_cache::StmtCache;
use crate::backend::BackendConn;
use crate::wire::buf::Reader;
use crate::wire::consts::{cap, com, err, NATIVE_PASSWORD};
use sluice_core::PoolKey;
use sluice_sqlscan::Effects;
use std::sync::atomic::Ordering::Relaxed;

impl Session {
    /// COM_INIT_DB: like `USE db`.
    pub(crate) async fn init_db(&mut self, payload: &[u8]) -> Result<(), Fatal> {
        self.drop_previous_unless_needed(Effects::default()).await;
        let target = self.read_target();
        self.run_stmt(Stmt {
            target,
            body: Body::Plain(payload),
            expect: Expect::Simple,
            effects: Effects::USE_DB,
            sql: None,
            read: true,
            shown: true,
        })
        .await
    }

    /// Selects the schema a client asked for while logging in.
    pub(crate) async fn select_schema(
        &mut self,
        db: &str,
    ) -> Result<Result<(), ServerError>, Fatal> {
        let mut payload = Vec::with_capacity(db.len() + 1);
        payload.push(com::INIT_DB);
        payload.extend_from_slice(db.as_bytes());
        let target = self.read_target();
        let routed = matches!(target, super::exec::Target::Group(_));
        let r = self
            .run_hidden(target, &payload, Expect::Simple, Effects::USE_DB)
            .await?;
        match r {
            // No reader to check the schema on (and reads do not fall back): the writer,
            // the source of truth, can tell. Selecting a schema is not a read to balance.
            Err(e) if routed && e.code == crate::wire::consts::err::NO_BACKEND => {
                let target = self.write_target();
                self.run_hidden(target, &payload, Expect::Simple, Effects::USE_DB)
                    .await
            }
            other => Ok(other),
        }
    }

    /// COM_FIELD_LIST.
    pub(crate) async fn field_list(&mut self, payload: &[u8]) -> Result<(), Fatal> {
        self.drop_previous_unless_needed(Effects::default()).await;
        let target = self.read_target();
        self.run_stmt(Stmt {
            target,
            body: Body::Plain(payload),
            expect: Expect::FieldList,
            effects: Effects::default(),
            sql: None,
            read: true,
            shown: true,
        })
        .await
    }

    /// COM_STATISTICS.
    pub(crate) async fn statistics(&mut self, payload: &[u8]) -> Result<(), Fatal> {
        let target = self.read_target();
        self.run_stmt(Stmt {
            target,
            body: Body::Plain(payload),
            expect: Expect::Statistics,
            effects: Effects::default(),
            sql: None,
            read: true,
            shown: true,
        })
        .await
    }

    /// COM_DEBUG, COM_REFRESH: to the writer.
    pub(crate) async fn forward_to_writer(&mut self, payload: &[u8]) -> Result<(), Fatal> {
        self.drop_previous_unless_needed(Effects::default()).await;
        let target = self.write_target();
        self.run_stmt(Stmt {
            target,
            body: Body::Plain(payload),
            expect: Expect::Simple,
            effects: Effects::default(),
            sql: None,
            read: false,
            shown: true,
        })
        .await
    }

    /// COM_SET_OPTION: the multi-statement option is session state, applied to whichever
    /// backend connection runs the next statement.
    pub(crate) async fn set_option(&mut self, payload: &[u8]) -> Result<(), Fatal> {
        let option = Reader::new(&payload[1..]).u16();
        match option {
            Some(0) | Some(1) => {
                self.st.tracked.multi_statements = option == Some(0);
                let st = self.st.status();
                self.client.push_eof(1, 0, st);
                self.client.flush().await?;
            }
            _ => {
                self.client
                    .send_err(1, err::UNKNOWN_COM, b"08S01", "Unknown command")
                    .await?;
            }
        }
        Ok(())
    }

    /// Forgets everything session-specific, as a fresh connection would have it: pinned
    /// connections are reset in the background, prepared statements and variables dropped.
    async fn reset_session(&mut self, collation: u16) {
        if let Some(att) = self.prev.take() {
            self.release(att).await;
        }
        self.prev_is_held = false;
        if let Some(att) = self.held.take() {
            let pins = self.st.pins;
            self.dispose(att, pins).await;
        }
        let schema = self.st.tracked.schema.take();
        let multi = self.client.has(cap::MULTI_STATEMENTS);
        self.st = super::session::SessionState {
            autocommit: true,
            ..Default::default()
        };
        self.st.tracked.schema = schema;
        self.st.tracked.multi_statements = multi;
        self.st.tracked.vars = initial_charset_vars(&self.proxy, collation);
        self.stmts.clear();
        self.publish_pins();
        self.handle.set_backend(None);
    }

    /// COM_RESET_CONNECTION.
    pub(crate) async fn reset_connection(&mut self) -> Result<(), Fatal> {
        self.reset_session(self.collation).await;
        let st = self.st.status();
        Ok(self.client.send_ok(1, st).await?)
    }

    /// COM_CHANGE_USER, as MariaDB does it: the session is reset first (transaction rolled
    /// back, variables, temporary tables and prepared statements gone), then the client
    /// authenticates as the new user. On failure the connection stays open as the previous
    /// user, with its schema and character set; after three failures the command is refused
    /// for the rest of the connection.
    pub(crate) async fn change_user(&mut self, payload: &[u8]) -> Result<Flow, Fatal> {
        if self.failed_change_user >= 3 {
            self.client
                .send_err(1, err::UNKNOWN_COM, b"08S01", "Unknown command")
                .await?;
            return Ok(Flow::Continue);
        }
        let mut r = Reader::new(&payload[1..]);
        let user = String::from_utf8_lossy(r.nul_str()).into_owned();
        let auth: Vec<u8> = if self.client.has(cap::SECURE_CONNECTION) {
            let n = r.u8().unwrap_or(0) as usize;
            r.take(n).unwrap_or(&[]).to_vec()
        } else {
            r.nul_str().to_vec()
        };
        let db = String::from_utf8_lossy(r.nul_str()).into_owned();
        let collation = r.u16().unwrap_or(self.collation);
        let plugin = if self.client.has(cap::PLUGIN_AUTH) && r.remaining() > 0 {
            String::from_utf8_lossy(r.nul_str()).into_owned()
        } else {
            NATIVE_PASSWORD.to_string()
        };
        self.reset_session(self.collation).await;
        let users = self.proxy.rt.users.load_full();
        let facts = self.proxy.info.get();
        let cx = super::handshake::HandshakeContext {
            tls: None,
            users: &users,
            server_version: &facts.version,
            connection_id: self.id,
            peer: self.handle.peer,
            default_plugin: self.proxy.rt.config.mysql.default_auth_plugin.name(),
            throttle: &self.proxy.rt.throttle,
        };
        let nonce = self.nonce;
        let authed =
            super::handshake::authenticate(&mut self.client, &cx, &user, &plugin, &auth, &nonce, 1)
                .await;
        let (new_user, seq) = match authed {
            Ok(x) => x,
            Err(HandshakeError::Denied(_)) => {
                self.failed_change_user += 1;
                return Ok(Flow::Continue);
            }
            Err(e) => return Err(Fatal(format!("COM_CHANGE_USER: {e}"))),
        };
        // The session stops counting as the previous user first: changing to the same user
        // at its `max_connections` is fine.
        self.user.connections.fetch_sub(1, Relaxed);
        if let Err(msg) = user_connection_added(&new_user) {
            self.user.connections.fetch_add(1, Relaxed);
            self.failed_change_user += 1;
            self.client
                .send_err(seq, err::TOO_MANY_USER_CONNECTIONS, b"42000", &msg)
                .await?;
            return Ok(Flow::Continue);
        }
        let previous = (
            std::mem::replace(&mut self.user, new_user),
            self.st.tracked.schema.take(),
            self.collation,
        );
        self.set_identity(collation);
        if !db.is_empty() {
            if let Err(e) = self.select_schema(&db).await? {
                // The previous user stays, as after a failed authentication. The connection
                // that answered belongs to the new user: it must not serve the next statement.
                if let Some(att) = self.prev.take() {
                    self.release(att).await;
                }
                self.prev_is_held = false;
                self.failed_change_user += 1;
                self.user.connections.fetch_sub(1, Relaxed);
                let (user, schema, collation) = previous;
                user.connections.fetch_add(1, Relaxed);
                self.user = user;
                self.set_identity(collation);
                self.st.tracked.schema = schema;
                self.client
                    .send_err(seq, e.code, &e.sqlstate, &e.message)
                    .await?;
                return Ok(Flow::Continue);
            }
            self.st.tracked.schema = Some(db);
        }
        let st = self.st.status();
        self.client.send_ok(seq, st).await?;
        Ok(Flow::Continue)
    }

    /// Makes the session's pool key and character set follow `self.user` and `collation`.
    fn set_identity(&mut self, collation: u16) {
        self.collation = collation;
        self.st.tracked.vars = initial_charset_vars(&self.proxy, collation);
        self.key = PoolKey {
            user: self.user.name.clone(),
            database: None,
            variant: self.client.caps & FLAVOUR_CAPS,
        };
    }

    /// COM_PROCESS_KILL.
    pub(crate) async fn process_kill(&mut self, payload: &[u8]) -> Result<(), Fatal> {
        let id = Reader::new(&payload[1..]).u32().unwrap_or(0);
        self.kill(id as u64, false).await
    }

    /// `KILL [QUERY] id` with an id the proxy gave a client: kills that session's backend
    /// thread (the statement it is running) and, for KILL CONNECTION, ends the session.
    pub(crate) async fn kill(&mut self, id: u64, query_only: bool) -> Result<(), Fatal> {
        let target = u32::try_from(id)
            .ok()
            .and_then(|i| self.proxy.rt.sessions.get(i));
        let Some(target) = target else {
            let msg = format!("Unknown thread id: {id}");
            return Ok(self
                .client
                .send_err(1, err::NO_SUCH_THREAD, b"HY000", &msg)
                .await?);
        };
        if target.user != self.user.name {
            let msg = format!("You are not owner of thread {id}");
            return Ok(self
                .client
                .send_err(1, err::KILL_DENIED, b"HY000", &msg)
                .await?);
        }
        if target.id == self.id {
            if query_only {
                return Ok(self
                    .client
                    .send_err(1, 1317, b"70100", "Query execution was interrupted")
                    .await?);
            }
            self.client
                .send_err(1, 1927, b"70100", "Connection was killed")
                .await?;
            return Err(Fatal("killed itself".into()));
        }
        let current = target.current();
        // The connection is not lent to another session until the KILL is done; if the
        // target already gave it back, its statement is over: there is nothing to kill there.
        let in_flight = current.cancel.as_ref().and_then(|t| t.begin());
        if let (Some((server, thread)), Some(_in_flight)) = (current.backend, in_flight) {
            let sql = format!("KILL {}{thread}", if query_only { "QUERY " } else { "" });
            let user = self.user.clone();
            let timeout = self.proxy.rt.config.pool.connect_timeout.get();
            let killed = tokio::time::timeout(timeout, async {
                let mut c = BackendConn::connect_with(
                    &server.address,
                    &user.name,
                    &user.password,
                    0,
                    StmtCache::new(1, Default::default()),
                    self.proxy.connector.tls.as_ref(),
                )
                .await
                .map_err(|e| e.message)?;
                c.exec(&sql).await.map(|_| ()).map_err(|e| e.to_string())
            })
            .await;
            match killed {
                Ok(Ok(())) => {}
                Ok(Err(e)) if e.contains("Unknown thread") => {}
                Ok(Err(e)) => {
                    let msg = format!(
                        "sluice: could not kill backend thread {thread} on {}: {e}",
                        server.name
                    );
                    return Ok(self
                        .client
                        .send_err(1, err::NO_BACKEND, b"HY000", &msg)
                        .await?);
                }
                Err(_) => {
                    let msg = format!(
                        "sluice: could not reach {} to kill thread {thread}",
                        server.name
                    );
                    return Ok(self
                        .client
                        .send_err(1, err::NO_BACKEND, b"HY000", &msg)
                        .await?);
                }
            }
        }
        if !query_only {
            target.kill();
        }
        let st = self.st.status();
        Ok(self.client.send_ok(1, st).await?)
    }
}
