//! Prepared statements (binary protocol).
//!
//! Statement ids given to clients are the proxy's own. A statement is prepared on whatever
//! backend connection first executes it, and kept in that connection's bounded cache (keyed by
//! schema and text, shared by all sessions); parameter types are re-sent when a connection has
//! not seen them. Long data and cursors pin the session until the statement is executed,
//! reset, closed, or its cursor is exhausted.

use super::exec::{Attached, FwdError, Target};
use super::pins::Pins;
use super::relay::{relay, Sink};
use super::scan::{Expect, Scanner};
use super::session::{Fatal, Session};
use crate::backend::stmt_cache::{BackendStmt, StmtKey};
use crate::wire::buf::Reader;
use crate::wire::consts::{cap, com, err};
use sluice_sqlscan::{scan_with, Effects, Options, Route, Scan};
use std::collections::HashMap;
use std::sync::Arc;

/// Most statements one session may hold (the server's default max_prepared_stmt_count).
pub const MAX_STATEMENTS_PER_SESSION: usize = 16_382;

/// A statement as the client knows it.
pub struct ClientStmt {
    /// Schema and text.
    pub key: Arc<StmtKey>,
    /// Parameter count.
    pub params: u16,
    /// Column count.
    pub columns: u16,
    /// Classification of the text.
    pub scan: Scan,
    /// The parameter types the client last sent (2 bytes each).
    pub types: Option<Box<[u8]>>,
    /// Long data was sent and the statement has not been executed since.
    pub long_data: bool,
    /// A cursor is open on the held connection.
    pub cursor: bool,
    /// An error to report at the next execute (long data could not be delivered).
    pub deferred_error: Option<String>,
}

/// The session's prepared statements.
#[derive(Default)]
pub struct Statements {
    next_id: u32,
    map: HashMap<u32, ClientStmt>,
}

impl Statements {
    /// True if there are none.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
    /// Number of statements.
    pub fn len(&self) -> usize {
        self.map.len()
    }
    /// Forgets all.
    pub fn clear(&mut self) {
        self.map.clear();
    }
    fn any(&self, f: impl Fn(&ClientStmt) -> bool) -> bool {
        self.map.values().any(f)
    }
}

fn stmt_id(payload: &[u8]) -> Option<u32> {
    Reader::new(payload.get(1..)?).u32()
}

impl Session {
    fn refresh_stmt_pins(&mut self) {
        let long = self.stmts.any(|s| s.long_data);
        let cursor = self.stmts.any(|s| s.cursor);
        self.st.pins.set(Pins::LONG_DATA, long);
        self.st.pins.set(Pins::CURSOR, cursor);
    }

    /// COM_STMT_PREPARE.
    pub(crate) async fn stmt_prepare(&mut self, payload: bytes::BytesMut) -> Result<(), Fatal> {
        let sql = &payload[1..];
        if self.stmts.map.len() >= MAX_STATEMENTS_PER_SESSION {
            let msg = format!("Can't create more than max_prepared_stmt_count statements (current value: {MAX_STATEMENTS_PER_SESSION})");
            return Ok(self
                .client
                .send_err(1, err::MAX_PREPARED_STMT_COUNT, b"42000", &msg)
                .await?);
        }
        let scan = scan_with(
            sql,
            Options {
                no_backslash_escapes: self.st.no_backslash_escapes,
            },
        );
        self.drop_previous_unless_needed(Effects::default()).await;
        let target = match self.target(&scan, sql) {
            Ok(t) => t,
            Err(msg) => {
                return Ok(self
                    .client
                    .send_err(1, err::ROUTING, b"HY000", &format!("sluice: {msg}"))
                    .await?)
            }
        };
        let from_held = matches!(target, Target::Held);
        let Some(mut att) = self.attach(&target, 1).await? else {
            return Ok(());
        };
        if !self.sync(&mut att, Effects::default(), 1).await? {
            self.settle(att, from_held, false).await;
            return Ok(());
        }
        self.next_stmt_id();
        let id = self.stmts.next_id;
        // CONNECTION_ID() must be the id the proxy gave this client: bake it into this
        // session's copy of the statement (which then has its own backend statement).
        let own_sql = scan
            .effects
            .intersects(Effects::CONNECTION_ID)
            .then(|| {
                sluice_sqlscan::rewrite::replace_calls(
                    sql,
                    &[("CONNECTION_ID", self.id.to_string())],
                )
            })
            .flatten();
        let backend_payload: Option<Vec<u8>> = own_sql.as_ref().map(|s| {
            let mut p = vec![com::STMT_PREPARE];
            p.extend_from_slice(s);
            p
        });
        let payload: &[u8] = backend_payload.as_deref().unwrap_or(&payload);
        let key = Arc::new(StmtKey {
            schema: self.st.tracked.schema.clone(),
            sql: own_sql.as_deref().unwrap_or(sql).into(),
        });
        let tracks = self.client.has(cap::SESSION_TRACK);
        let mut buf = Vec::new();
        let mut result = None;
        for attempt in 0..2 {
            buf.clear();
            let conn = att.lease.conn();
            let deprecate = !conn.uses_eof();
            make_room(conn).await;
            let sent = conn.send(0, payload).await;
            let relayed = match sent {
                Ok(_) => relay(
                    conn,
                    Sink::Buffer(&mut buf),
                    Scanner::new(Expect::Prepare, deprecate, tracks).with_client_stmt_id(id),
                )
                .await
                .ok(),
                Err(_) => None,
            };
            let Some(out) = relayed else {
                att.lease.discard();
                let name = att.lease.server().name.clone();
                drop(att);
                return self.report_lost(from_held, 1, &name).await;
            };
            if out
                .error
                .as_ref()
                .is_some_and(|e| e.code == err::MAX_PREPARED_STMT_COUNT)
                && attempt == 0
            {
                // The server's statement table is full: give back half of ours and retry.
                close_all(att.lease.conn()).await;
                continue;
            }
            result = Some(out);
            break;
        }
        let Some(out) = result else { return Ok(()) };
        self.client.stream_write(&buf).await?;
        if let Some(p) = out.prepared {
            let conn = att.lease.conn();
            let evicted = conn.stmts.insert(
                key.clone(),
                BackendStmt {
                    id: p.stmt_id,
                    params: p.params,
                    columns: p.columns,
                    types_bound: false,
                },
            );
            if let Some(old) = evicted {
                let _ = conn.send_command(com::STMT_CLOSE, &old.to_le_bytes()).await;
            }
            self.stmts.map.insert(
                id,
                ClientStmt {
                    key,
                    params: p.params,
                    columns: p.columns,
                    scan,
                    types: None,
                    long_data: false,
                    cursor: false,
                    deferred_error: None,
                },
            );
        }
        let read = true;
        self.conclude(att, from_held, Effects::default(), None, out, read)
            .await;
        Ok(())
    }

    fn next_stmt_id(&mut self) {
        loop {
            self.stmts.next_id = self.stmts.next_id.wrapping_add(1);
            if self.stmts.next_id != 0 && !self.stmts.map.contains_key(&self.stmts.next_id) {
                return;
            }
        }
    }

    /// Makes sure the statement is prepared on this connection; on failure the client has
    /// been told and `None` is returned.
    async fn ensure_prepared(
        &mut self,
        att: &mut Attached,
        key: &Arc<StmtKey>,
        seq: u8,
    ) -> Result<Option<BackendStmt>, Fatal> {
        let conn = att.lease.conn();
        if let Some(b) = conn.stmts.get(key) {
            return Ok(Some(*b));
        }
        // Prepare in the schema the client prepared it in.
        let current = conn.state.tracked.schema.clone();
        let switch = key.schema.is_some() && key.schema != current;
        if switch {
            let db = key.schema.clone().unwrap_or_default();
            if conn
                .send_command(com::INIT_DB, db.as_bytes())
                .await
                .is_err()
                || conn
                    .read()
                    .await
                    .map(|p| p.payload.first() == Some(&0xff))
                    .unwrap_or(true)
            {
                att.lease.discard();
                let msg = format!("sluice: cannot select schema '{db}' to prepare the statement");
                self.client
                    .send_err(seq, err::SERVER_LOST, b"HY000", &msg)
                    .await?;
                return Ok(None);
            }
        }
        let mut outcome = None;
        for attempt in 0..2 {
            let conn = att.lease.conn();
            let deprecate = !conn.uses_eof();
            let mut payload = Vec::with_capacity(key.sql.len() + 1);
            payload.push(com::STMT_PREPARE);
            payload.extend_from_slice(&key.sql);
            make_room(conn).await;
            let ok = conn.send(0, &payload).await.is_ok();
            let out = if ok {
                relay(
                    conn,
                    Sink::Discard,
                    Scanner::new(Expect::Prepare, deprecate, true),
                )
                .await
                .ok()
            } else {
                None
            };
            let Some(out) = out else {
                att.lease.discard();
                let msg = format!(
                    "sluice: lost connection to backend {} while preparing",
                    att.lease.server().name
                );
                self.client
                    .send_err(seq, err::SERVER_LOST, b"HY000", &msg)
                    .await?;
                return Ok(None);
            };
            if out
                .error
                .as_ref()
                .is_some_and(|e| e.code == err::MAX_PREPARED_STMT_COUNT)
                && attempt == 0
            {
                close_all(att.lease.conn()).await;
                continue;
            }
            outcome = Some(out);
            break;
        }
        if switch {
            let conn = att.lease.conn();
            let back = current.clone().unwrap_or_default();
            if conn
                .send_command(com::INIT_DB, back.as_bytes())
                .await
                .is_err()
                || conn.read().await.is_err()
            {
                att.lease.discard();
            }
        }
        let Some(out) = outcome else { return Ok(None) };
        if let Some(e) = out.error {
            self.client
                .send_err(seq, e.code, &e.sqlstate, &e.message)
                .await?;
            return Ok(None);
        }
        let Some(p) = out.prepared else {
            self.client
                .send_err(
                    seq,
                    err::SERVER_LOST,
                    b"HY000",
                    "sluice: unexpected answer to COM_STMT_PREPARE",
                )
                .await?;
            return Ok(None);
        };
        let b = BackendStmt {
            id: p.stmt_id,
            params: p.params,
            columns: p.columns,
            types_bound: false,
        };
        let conn = att.lease.conn();
        if let Some(old) = conn.stmts.insert(key.clone(), b) {
            let _ = conn.send_command(com::STMT_CLOSE, &old.to_le_bytes()).await;
        }
        Ok(Some(b))
    }

    /// COM_STMT_EXECUTE.
    pub(crate) async fn stmt_execute(&mut self, payload: bytes::BytesMut) -> Result<(), Fatal> {
        let Some(id) = stmt_id(&payload) else {
            return Ok(self
                .client
                .send_err(
                    1,
                    err::MALFORMED_PACKET,
                    b"HY000",
                    "Malformed communication packet",
                )
                .await?);
        };
        let Some(stmt) = self.stmts.map.get_mut(&id) else {
            let msg =
                format!("Unknown prepared statement handler ({id}) given to mysqld_stmt_execute");
            return Ok(self
                .client
                .send_err(1, err::UNKNOWN_STMT_HANDLER, b"HY000", &msg)
                .await?);
        };
        if let Some(msg) = stmt.deferred_error.take() {
            stmt.long_data = false;
            self.refresh_stmt_pins();
            return Ok(self
                .client
                .send_err(1, err::SERVER_LOST, b"HY000", &msg)
                .await?);
        }
        // Where the types are, and whether this execute carries them.
        let params = stmt.params as usize;
        let flag_at = 10 + params.div_ceil(8);
        let bound_here = params > 0 && payload.get(flag_at) == Some(&1);
        if bound_here {
            if let Some(t) = payload.get(flag_at + 1..flag_at + 1 + 2 * params) {
                stmt.types = Some(t.into());
            }
        }
        let key = stmt.key.clone();
        let effects = stmt.scan.effects;
        let read = stmt.scan.route() == Route::Read;
        let needs_held = stmt.long_data || stmt.cursor;
        let types = stmt.types.clone();
        let scan = stmt.scan.clone();
        self.handle.set_statement(Some(&key.sql));
        self.drop_previous_unless_needed(effects).await;
        let target = if needs_held && self.held.is_some() {
            Target::Held
        } else {
            match self.target(&scan, &key.sql) {
                Ok(t) => t,
                Err(msg) => {
                    return Ok(self
                        .client
                        .send_err(1, err::ROUTING, b"HY000", &format!("sluice: {msg}"))
                        .await?)
                }
            }
        };
        let from_held = matches!(target, Target::Held);
        let Some(mut att) = self.attach(&target, 1).await? else {
            return Ok(());
        };
        if !self.sync(&mut att, effects, 1).await? {
            self.settle(att, from_held, false).await;
            return Ok(());
        }
        let Some(b) = self.ensure_prepared(&mut att, &key, 1).await? else {
            self.settle(att, from_held, false).await;
            return Ok(());
        };
        // The backend's statement id, and the types if this connection has not seen them.
        let mut out_payload: Vec<u8>;
        let send_types = params > 0
            && !bound_here
            && !b.types_bound
            && types.is_some()
            && payload.len() > flag_at;
        if send_types {
            let t = types.as_deref().unwrap_or(&[]);
            out_payload = Vec::with_capacity(payload.len() + t.len());
            out_payload.extend_from_slice(&payload[..flag_at]);
            out_payload.push(1);
            out_payload.extend_from_slice(t);
            out_payload.extend_from_slice(&payload[flag_at + 1..]);
        } else {
            out_payload = payload.to_vec();
        }
        out_payload[1..5].copy_from_slice(&b.id.to_le_bytes());
        let deprecate = !att.lease.conn_ref().uses_eof();
        let scanner = Scanner::new(
            Expect::Execute,
            deprecate,
            self.client.has(cap::SESSION_TRACK),
        );
        let server_name = att.lease.server().name.clone();
        let result = self.forward(&mut att, &out_payload, scanner, true).await;
        self.handle.set_statement(None);
        match result {
            Ok(out) => {
                if out.error.is_none() && (bound_here || send_types) {
                    if let Some(s) = att.lease.conn().stmts.get(&key) {
                        s.types_bound = true;
                    }
                }
                if let Some(stmt) = self.stmts.map.get_mut(&id) {
                    stmt.long_data = false;
                    stmt.cursor = out.cursor_open;
                }
                self.refresh_stmt_pins();
                self.conclude(att, from_held, effects, Some(&key.sql), out, read)
                    .await;
                Ok(())
            }
            Err(FwdError::Fatal(f)) => Err(f),
            Err(FwdError::Backend { untouched }) => {
                drop(att);
                if let Some(stmt) = self.stmts.map.get_mut(&id) {
                    stmt.long_data = false;
                    stmt.cursor = false;
                }
                self.refresh_stmt_pins();
                if untouched {
                    return self.report_lost(from_held, 1, &server_name).await;
                }
                Ok(())
            }
        }
    }

    /// COM_STMT_SEND_LONG_DATA (no response): delivered to the connection that will execute
    /// the statement, which stays pinned until then.
    pub(crate) async fn stmt_send_long_data(
        &mut self,
        payload: bytes::BytesMut,
    ) -> Result<(), Fatal> {
        let Some(id) = stmt_id(&payload) else {
            return Ok(());
        };
        let Some(stmt) = self.stmts.map.get(&id) else {
            return Ok(());
        };
        let key = stmt.key.clone();
        let scan = stmt.scan.clone();
        self.drop_previous_unless_needed(Effects::default()).await;
        let target = if self.held.is_some() {
            Target::Held
        } else {
            match self.target(&scan, &key.sql) {
                Ok(t) => t,
                Err(msg) => {
                    self.defer_stmt_error(id, format!("sluice: {msg}"));
                    return Ok(());
                }
            }
        };
        let from_held = matches!(target, Target::Held);
        // Errors cannot be reported now (the command has no response): route through a
        // scratch client buffer and report them at execute.
        let att = self.attach_for_long_data(&target).await;
        let Some(mut att) = att else {
            self.defer_stmt_error(id, "sluice: no backend connection for long data".into());
            return Ok(());
        };
        let plan = crate::state::plan(&self.st.tracked, &att.lease.conn_ref().state.tracked, None);
        if !plan.is_empty() {
            // Reuse the regular sync; any error it sends goes to a discarded buffer.
            let saved = std::mem::take(&mut self.client.wbuf);
            let ok = self.sync(&mut att, Effects::default(), 1).await;
            self.client.wbuf = saved;
            if !matches!(ok, Ok(true)) {
                self.defer_stmt_error(
                    id,
                    "sluice: cannot restore session state for long data".into(),
                );
                self.settle(att, from_held, false).await;
                return Ok(());
            }
        }
        let b = match att.lease.conn().stmts.get(&key) {
            Some(b) => Some(*b),
            None => {
                let saved = std::mem::take(&mut self.client.wbuf);
                let r = self.ensure_prepared_quiet(&mut att, &key).await;
                self.client.wbuf = saved;
                r
            }
        };
        let Some(b) = b else {
            self.defer_stmt_error(
                id,
                "sluice: cannot prepare the statement for long data".into(),
            );
            self.settle(att, from_held, false).await;
            return Ok(());
        };
        let mut out = payload.to_vec();
        out[1..5].copy_from_slice(&b.id.to_le_bytes());
        if att.lease.conn().send(0, &out).await.is_err() {
            att.lease.discard();
            self.defer_stmt_error(
                id,
                "sluice: lost the backend connection while sending long data".into(),
            );
            drop(att);
            return Ok(());
        }
        if let Some(stmt) = self.stmts.map.get_mut(&id) {
            stmt.long_data = true;
        }
        self.refresh_stmt_pins();
        self.settle(att, from_held, false).await;
        Ok(())
    }

    fn defer_stmt_error(&mut self, id: u32, msg: String) {
        if let Some(s) = self.stmts.map.get_mut(&id) {
            s.deferred_error = Some(msg);
        }
    }

    async fn attach_for_long_data(&mut self, target: &Target) -> Option<Attached> {
        let saved = std::mem::take(&mut self.client.wbuf);
        // attach() reports failures through the client; with no response allowed here the
        // report is dropped by restoring the buffer.
        let r = match target {
            Target::Held => self.held.take(),
            _ => {
                let mut scratch = std::mem::take(&mut self.client.wbuf);
                let a = self.attach_no_report(target).await;
                scratch.clear();
                a
            }
        };
        self.client.wbuf = saved;
        r
    }

    async fn attach_no_report(&mut self, target: &Target) -> Option<Attached> {
        let Target::Group(d) = target else {
            return None;
        };
        let topo = self.proxy.topology.clone();
        let hg = topo.hostgroup(&d.hostgroup)?;
        let lease = hg.acquire(&self.key, &self.proxy.connector).await.ok()?;
        Some(Attached::new(lease))
    }

    async fn ensure_prepared_quiet(
        &mut self,
        att: &mut Attached,
        key: &Arc<StmtKey>,
    ) -> Option<BackendStmt> {
        let conn = att.lease.conn();
        let deprecate = !conn.uses_eof();
        let mut payload = Vec::with_capacity(key.sql.len() + 1);
        payload.push(com::STMT_PREPARE);
        payload.extend_from_slice(&key.sql);
        make_room(conn).await;
        conn.send(0, &payload).await.ok()?;
        let out = relay(
            conn,
            Sink::Discard,
            Scanner::new(Expect::Prepare, deprecate, true),
        )
        .await
        .ok()?;
        let p = out.prepared?;
        let b = BackendStmt {
            id: p.stmt_id,
            params: p.params,
            columns: p.columns,
            types_bound: false,
        };
        if let Some(old) = conn.stmts.insert(key.clone(), b) {
            let _ = conn.send_command(com::STMT_CLOSE, &old.to_le_bytes()).await;
        }
        Some(b)
    }

    /// COM_STMT_RESET.
    pub(crate) async fn stmt_reset(&mut self, payload: &[u8]) -> Result<(), Fatal> {
        let Some(id) = stmt_id(payload) else {
            return Ok(self
                .client
                .send_err(
                    1,
                    err::MALFORMED_PACKET,
                    b"HY000",
                    "Malformed communication packet",
                )
                .await?);
        };
        let Some(stmt) = self.stmts.map.get_mut(&id) else {
            let msg =
                format!("Unknown prepared statement handler ({id}) given to mysqld_stmt_reset");
            return Ok(self
                .client
                .send_err(1, err::UNKNOWN_STMT_HANDLER, b"HY000", &msg)
                .await?);
        };
        let on_server = (stmt.long_data || stmt.cursor) && self.held.is_some();
        stmt.long_data = false;
        stmt.cursor = false;
        stmt.deferred_error = None;
        let key = stmt.key.clone();
        self.refresh_stmt_pins();
        if !on_server {
            let st = self.st.status();
            return Ok(self.client.send_ok(1, st).await?);
        }
        let Some(mut att) = self.held.take() else {
            return Ok(());
        };
        let Some(b) = att.lease.conn().stmts.get(&key).copied() else {
            self.settle(att, true, false).await;
            let st = self.st.status();
            return Ok(self.client.send_ok(1, st).await?);
        };
        let mut out = payload.to_vec();
        out[1..5].copy_from_slice(&b.id.to_le_bytes());
        let deprecate = !att.lease.conn_ref().uses_eof();
        let scanner = Scanner::new(
            Expect::Simple,
            deprecate,
            self.client.has(cap::SESSION_TRACK),
        );
        match self.forward(&mut att, &out, scanner, true).await {
            Ok(o) => {
                self.conclude(att, true, Effects::default(), None, o, true)
                    .await;
                Ok(())
            }
            Err(FwdError::Fatal(f)) => Err(f),
            Err(FwdError::Backend { untouched }) => {
                let name = att.lease.server().name.clone();
                drop(att);
                if untouched {
                    return self.report_lost(true, 1, &name).await;
                }
                Ok(())
            }
        }
    }

    /// COM_STMT_CLOSE (no response). The backend statement stays cached for reuse; an open
    /// cursor or pending long data on it is reset.
    pub(crate) async fn stmt_close(&mut self, payload: &[u8]) -> Result<(), Fatal> {
        let Some(id) = stmt_id(payload) else {
            return Ok(());
        };
        let Some(stmt) = self.stmts.map.remove(&id) else {
            return Ok(());
        };
        if (stmt.cursor || stmt.long_data) && self.held.is_some() {
            if let Some(mut att) = self.held.take() {
                let conn = att.lease.conn();
                if let Some(b) = conn.stmts.get(&stmt.key).copied() {
                    let ok = conn
                        .send_command(com::STMT_RESET, &b.id.to_le_bytes())
                        .await
                        .is_ok()
                        && conn.read().await.is_ok();
                    if !ok {
                        att.lease.discard();
                    }
                }
                self.refresh_stmt_pins();
                let reusable = att.lease.is_reusable();
                if reusable {
                    self.settle(att, true, false).await;
                } else {
                    drop(att);
                    self.st.pins = Pins::NONE;
                    self.publish_pins();
                }
            }
        }
        self.refresh_stmt_pins();
        Ok(())
    }

    /// COM_STMT_FETCH: rows from the open cursor, on the pinned connection.
    pub(crate) async fn stmt_fetch(&mut self, payload: bytes::BytesMut) -> Result<(), Fatal> {
        let Some(id) = stmt_id(&payload) else {
            return Ok(self
                .client
                .send_err(
                    1,
                    err::MALFORMED_PACKET,
                    b"HY000",
                    "Malformed communication packet",
                )
                .await?);
        };
        let Some(stmt) = self.stmts.map.get(&id) else {
            let msg =
                format!("Unknown prepared statement handler ({id}) given to mysqld_stmt_fetch");
            return Ok(self
                .client
                .send_err(1, err::UNKNOWN_STMT_HANDLER, b"HY000", &msg)
                .await?);
        };
        if !stmt.cursor || self.held.is_none() {
            let msg = format!("The statement ({id}) has no open cursor");
            return Ok(self.client.send_err(1, 1421, b"HY000", &msg).await?);
        }
        let key = stmt.key.clone();
        let Some(mut att) = self.held.take() else {
            return Ok(());
        };
        let Some(b) = att.lease.conn().stmts.get(&key).copied() else {
            self.settle(att, true, false).await;
            let msg = format!("The statement ({id}) has no open cursor");
            return Ok(self.client.send_err(1, 1421, b"HY000", &msg).await?);
        };
        let mut out = payload.to_vec();
        out[1..5].copy_from_slice(&b.id.to_le_bytes());
        let deprecate = !att.lease.conn_ref().uses_eof();
        let scanner = Scanner::new(
            Expect::Fetch,
            deprecate,
            self.client.has(cap::SESSION_TRACK),
        );
        match self.forward(&mut att, &out, scanner, true).await {
            Ok(o) => {
                if o.last_row_sent || o.error.is_some() {
                    if let Some(s) = self.stmts.map.get_mut(&id) {
                        s.cursor = false;
                    }
                }
                self.refresh_stmt_pins();
                self.conclude(att, true, Effects::default(), None, o, true)
                    .await;
                Ok(())
            }
            Err(FwdError::Fatal(f)) => Err(f),
            Err(FwdError::Backend { untouched }) => {
                let name = att.lease.server().name.clone();
                drop(att);
                if let Some(s) = self.stmts.map.get_mut(&id) {
                    s.cursor = false;
                }
                self.refresh_stmt_pins();
                if untouched {
                    return self.report_lost(true, 1, &name).await;
                }
                Ok(())
            }
        }
    }
}

/// Closes statements on `conn`, least recently used first, while its server's statement
/// budget is used up.
pub(crate) async fn make_room(conn: &mut crate::backend::BackendConn) {
    while conn.stmts.server_full() {
        match conn.stmts.evict_oldest() {
            Some(id) => {
                let _ = conn.send_command(com::STMT_CLOSE, &id.to_le_bytes()).await;
            }
            None => return,
        }
    }
}

/// Closes every statement cached on `conn` (the server refused to prepare another).
async fn close_all(conn: &mut crate::backend::BackendConn) {
    while let Some(id) = conn.stmts.evict_oldest() {
        let _ = conn.send_command(com::STMT_CLOSE, &id.to_le_bytes()).await;
    }
}
