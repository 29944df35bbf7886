//! Prepared statements (binary protocol).
//!
//! Statement ids given to clients are the proxy's own. A statement is prepared on whatever
//! backend connection first executes it, and kept in that connection's bounded cache (keyed by
//! schema and text, shared by all sessions); parameter types are re-sent when a connection has
//! not seen them. Long data and cursors pin the session until the statement is executed,
//! reset, closed, or its cursor is exhausted.
//!
//! - `prepare.rs`: COM_STMT_PREPARE, and preparing lazily on a backend connection;
//! - `execute.rs`: COM_STMT_EXECUTE and COM_STMT_SEND_LONG_DATA;
//! - `cursor.rs`: COM_STMT_FETCH, COM_STMT_RESET, COM_STMT_CLOSE;
//! - `params.rs`: the statement id and parameter types inside those commands' payloads.

mod cursor;
mod execute;
pub mod params;
mod prepare;

pub(crate) use prepare::PrepareError;

use super::pins::Pins;
use super::session::{Fatal, Session};
use crate::backend::stmt_cache::StmtKey;
use crate::backend::BackendConn;
use crate::wire::consts::{com, err};
use params::{stmt_id, with_backend_id};
use sluice_sqlscan::Scan;
use std::collections::BTreeMap;
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
    /// An error to report at the next execute (long data could not be delivered; that
    /// command has no response).
    pub deferred_error: Option<String>,
    /// Its text's bytes, held against the session's share of `[mysql] max_statement_memory`
    /// while the session holds it (connections' caches keep no text).
    pub charge: sluice_core::Charge,
}

/// The session's prepared statements.
#[derive(Default)]
pub struct Statements {
    next_id: u32,
    pub(crate) map: BTreeMap<u32, ClientStmt>,
    /// Where their texts are charged: the session's share of the process's budget.
    budget: sluice_core::Share,
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
    /// A fresh statement id, never 0 and not in use.
    fn new_id(&mut self) -> u32 {
        loop {
            self.next_id = self.next_id.wrapping_add(1);
            if self.next_id != 0 && !self.map.contains_key(&self.next_id) {
                return self.next_id;
            }
        }
    }
}

impl Session {
    /// Recomputes the pins that prepared statements cause.
    pub(crate) fn refresh_stmt_pins(&mut self) {
        let long = self.stmts.any(|s| s.long_data);
        let cursor = self.stmts.any(|s| s.cursor);
        self.st.pins.set(Pins::LONG_DATA, long);
        self.st.pins.set(Pins::CURSOR, cursor);
    }

    /// The statement `id`, or an error for the client naming the command (`mysqld_stmt_…`).
    async fn known_stmt(&mut self, payload: &[u8], command: &str) -> Result<Option<u32>, Fatal> {
        let Some(id) = stmt_id(payload) else {
            self.reply_err(
                err::MALFORMED_PACKET,
                b"HY000",
                "Malformed communication packet",
            )
            .await?;
            return Ok(None);
        };
        if !self.stmts.map.contains_key(&id) {
            let msg = format!("Unknown prepared statement handler ({id}) given to {command}");
            self.reply_err(err::UNKNOWN_STMT_HANDLER, b"HY000", &msg)
                .await?;
            return Ok(None);
        }
        Ok(Some(id))
    }
}

/// Closes statements on `conn`, least recently used first, while its server's statement
/// budget is used up.
pub(crate) async fn make_room(conn: &mut BackendConn) {
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
async fn close_all(conn: &mut BackendConn) {
    while let Some(id) = conn.stmts.evict_oldest() {
        let _ = conn.send_command(com::STMT_CLOSE, &id.to_le_bytes()).await;
    }
}
