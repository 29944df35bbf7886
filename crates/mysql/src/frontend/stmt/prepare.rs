//! COM_STMT_PREPARE, and preparing a statement lazily on the backend connection that runs it.

use super::{close_all, make_room, ClientStmt, MAX_STATEMENTS_PER_SESSION};
use crate::backend::stmt_cache::{BackendStmt, StmtKey};
use crate::backend::BackendConn;
use crate::frontend::digest::DigestOf;
use crate::frontend::exec::{Attached, Target};
use crate::frontend::relay::{relay, Sink};
use crate::frontend::scan::{Expect, Outcome, Scanner, ServerError};
use crate::frontend::session::{Fatal, Session};
use crate::wire::consts::{com, err};
use sluice_core::Failure;
use sluice_runtime::off_loop::{off_loop, run, OFF_LOOP_TEXT};
use sluice_sqlscan::{scan_with, Effects, Options};
use std::sync::Arc;

/// Why a statement could not be prepared on a connection.
pub(crate) enum PrepareError {
    /// The server refused it (syntax error, unknown table...).
    Server(ServerError),
    /// The connection broke (it has been discarded).
    Lost(String),
}

impl Session {
    /// COM_STMT_PREPARE: prepares on a connection the statement would be routed to, and
    /// answers the client with the proxy's own statement id.
    pub(crate) async fn stmt_prepare(&mut self, mut payload: bytes::BytesMut) -> Result<(), Fatal> {
        if self.stmts.len() >= MAX_STATEMENTS_PER_SESSION {
            let msg = format!(
                "Can't create more than max_prepared_stmt_count statements (current value: {MAX_STATEMENTS_PER_SESSION})"
            );
            return self
                .reply_err(err::MAX_PREPARED_STMT_COUNT, b"42000", &msg)
                .await;
        }
        // Its text is held for as long as the session holds the statement (the text as
        // sent: the session's own copy, its connection ids baked in, is never longer).
        let mut charge = self
            .proxy
            .statement_memory
            .of_session(&mut self.stmts.budget)
            .charge();
        let schema = self.st.tracked.schema.as_ref().map_or(0, String::len);
        if let Err(over) = charge.grow(payload.len() - 1 + schema) {
            let msg = sluice_core::StatementMemory::refusal("[mysql]", &over);
            return self.reply_err(err::OUT_OF_RESOURCES, b"HY000", &msg).await;
        }
        let opts = Options {
            no_backslash_escapes: self.st.no_backslash_escapes,
        };
        // A long text is scanned off the event loop (see `sluice_runtime::off_loop`).
        let scan = match payload.len() > OFF_LOOP_TEXT {
            true => Box::pin(off_loop(&mut payload, move |p| scan_with(&p[1..], opts)))
                .await
                .ok_or_else(|| Fatal("scanning a long statement failed".into()))?,
            false => scan_with(&payload[1..], opts),
        };
        let sql = &payload[1..];
        self.drop_previous_unless_needed(Effects::default()).await;
        let target = match self.target(&scan, sql) {
            Ok(t) => t,
            Err(msg) => {
                return self
                    .reply_err(err::ROUTING, b"HY000", &format!("sluice: {msg}"))
                    .await
            }
        };
        let from_held = matches!(target, Target::Held);
        let mut att = match self.attach_for(&target, true).await {
            Ok(att) => att,
            Err(e) => return self.report(e, from_held, Effects::default()).await,
        };
        if let Err(e) = self.sync_for(&mut att, Effects::default(), true).await {
            self.settle(att, from_held, false).await;
            return self.report(e, from_held, Effects::default()).await;
        }
        // Connection ids must be the id the proxy gave this client: bake it into this
        // session's copy of the statement (which then has its own backend statement).
        let own_sql = self.own_ids(scan.effects, sql, None);
        let text: Box<[u8]> = own_sql.as_deref().unwrap_or(sql).into();
        let schema = self.st.tracked.schema.clone();
        let key = match text.len() > OFF_LOOP_TEXT {
            // A long text's key (two hashes of it) and digest are made off the loop too.
            true => {
                let nbe = opts.no_backslash_escapes;
                let made = Box::pin(run(move || {
                    let key = StmtKey::new(schema, text);
                    key.digest(nbe, |_, _| ());
                    key
                }));
                match made.await {
                    Some(key) => key,
                    None => {
                        self.settle(att, from_held, false).await;
                        return Err(Fatal("keying a long statement failed".into()));
                    }
                }
            }
            false => StmtKey::new(schema, text),
        };
        let key = Arc::new(key);
        let id = self.stmts.new_id();
        // The answer is buffered: if the server's statement table is full, the proxy makes
        // room and retries before the client sees anything.
        let scanner = self
            .scanner_for(&att, Expect::Prepare)
            .with_client_stmt_id(id);
        let mut answer = Vec::new();
        let out = match prepare_raw(att.conn(), &key, Sink::Buffer(&mut answer), scanner).await {
            Ok(out) => out,
            Err(e) => {
                att.lease.discard();
                let lost = Failure::server_before_answer(att.lease.server().name.clone(), e, 1);
                drop(att);
                tracing::debug!(session = self.id, error = %lost.error, "backend lost while preparing");
                return self.report_lost(from_held, &lost, Effects::default()).await;
            }
        };
        self.client.stream_write(&answer).await?;
        if let Some(p) = out.prepared {
            cache(att.conn(), &key, &out).await;
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
                    charge,
                },
            );
        }
        self.conclude(
            att,
            from_held,
            Effects::default(),
            DigestOf::Nothing,
            out,
            true,
        )
        .await;
        Ok(())
    }

    /// Makes sure the statement is prepared on the connection, in the schema the client
    /// prepared it in. Tells the client nothing.
    pub(crate) async fn prepare_on(
        &mut self,
        att: &mut Attached,
        key: &Arc<StmtKey>,
    ) -> Result<BackendStmt, PrepareError> {
        let conn = att.conn();
        if let Some(b) = conn.stmts.get(key) {
            return Ok(*b);
        }
        let current = conn.state.tracked.schema.clone();
        let switch = key.schema.is_some() && key.schema != current;
        let lost = |e: String, att: &mut Attached| {
            att.lease.discard();
            PrepareError::Lost(e)
        };
        if switch {
            let db = key.schema.clone().unwrap_or_default();
            if let Err(e) = conn.simple(com::INIT_DB, db.as_bytes()).await {
                return Err(lost(
                    format!("cannot select schema '{db}' to prepare the statement: {e}"),
                    att,
                ));
            }
        }
        let scanner = Scanner::new(Expect::Prepare, !conn.uses_eof(), true);
        let result = prepare_raw(conn, key, Sink::Discard, scanner).await;
        if switch {
            let back = current.unwrap_or_default();
            if att
                .conn()
                .simple(com::INIT_DB, back.as_bytes())
                .await
                .is_err()
            {
                att.lease.discard();
            }
        }
        let out = match result {
            Ok(out) => out,
            Err(e) => return Err(lost(e.to_string(), att)),
        };
        if let Some(e) = out.error {
            return Err(PrepareError::Server(e));
        }
        match cache(att.conn(), key, &out).await {
            Some(b) => Ok(b),
            None => Err(lost("unexpected answer to COM_STMT_PREPARE".into(), att)),
        }
    }
}

/// Sends COM_STMT_PREPARE for `key` and relays the answer into `sink`; when the server's
/// statement table is full, closes this connection's cached statements and tries once more.
/// Err means the connection was lost.
async fn prepare_raw(
    conn: &mut BackendConn,
    key: &StmtKey,
    mut sink: Sink<'_>,
    scanner: Scanner,
) -> Result<Outcome, std::io::Error> {
    let mut payload = Vec::with_capacity(key.sql.len() + 1);
    payload.push(com::STMT_PREPARE);
    payload.extend_from_slice(&key.sql);
    for attempt in 0..2 {
        make_room(conn).await;
        let next = conn.send(0, &payload).await?;
        if let Sink::Buffer(b) = &mut sink {
            b.clear();
        }
        let mut scanner = scanner.clone();
        scanner.expect_first_seq(next);
        let out = relay(conn, sink.reborrow(), scanner)
            .await
            .map_err(|f| f.error)?;
        let full = out
            .error
            .as_ref()
            .is_some_and(|e| e.code == err::MAX_PREPARED_STMT_COUNT);
        if full && attempt == 0 {
            close_all(conn).await;
            continue;
        }
        return Ok(out);
    }
    unreachable!("the loop returns on its second attempt")
}

/// Records a prepared statement in the connection's cache (closing the one it displaces).
async fn cache(conn: &mut BackendConn, key: &StmtKey, out: &Outcome) -> Option<BackendStmt> {
    let p = out.prepared?;
    let b = BackendStmt {
        id: p.stmt_id,
        params: p.params,
        columns: p.columns,
        types_bound: false,
    };
    if let Some(old) = conn.stmts.insert(key, b) {
        let _ = conn.send_command(com::STMT_CLOSE, &old.to_le_bytes()).await;
    }
    Some(b)
}
