//! The statement pipeline, written once for every command that runs on a backend
//! connection: route (the caller's [`Target`]) → attach → sync → prepare (prepared statements)
//! → forward → conclude, with one transparent retry for reads whose connection broke before
//! the client saw anything. Text commands, prepared-statement executions and hidden commands
//! (the schema a client logs in with) all go through [`Session::pipeline`]; whatever stops a
//! statement is one type, [`StmtError`], which says who failed and whether a retry is safe.

use super::digest::DigestOf;
use super::exec::{Attached, Target};
use super::scan::{Expect, Scanner, ServerError};
use super::session::{Fatal, Session};
use super::stmt::params::{execute_for_backend, ExecuteTypes};
use super::stmt::PrepareError;
use super::sync::SyncError;
use crate::backend::stmt_cache::StmtKey;
use crate::state;
use crate::wire::consts::{cap, err};
use sluice_core::{AcquireError, ClientError, ErrorKind, Side, StmtError};
use sluice_sqlscan::Effects;
use std::borrow::Cow;
use std::sync::Arc;

/// What is sent.
pub(crate) enum Body<'a> {
    /// The command as it is.
    Plain(&'a [u8]),
    /// A COM_STMT_EXECUTE of a client's prepared statement: prepared on the connection if it
    /// has not seen it, sent with the connection's statement id and, when that connection
    /// needs them, the parameter types.
    Execute(Execute<'a>),
}

/// A prepared statement's execution.
pub(crate) struct Execute<'a> {
    /// The client's statement id.
    pub id: u32,
    /// The client's COM_STMT_EXECUTE.
    pub payload: &'a [u8],
    /// Where the parameter types are in it.
    pub layout: ExecuteTypes<'a>,
    /// The statement.
    pub key: Arc<StmtKey>,
    /// The parameter types last bound by the client.
    pub types: Option<Box<[u8]>>,
    /// Number of parameters.
    pub params: usize,
}

/// A statement on its way through the pipeline.
pub(crate) struct Stmt<'a> {
    /// Where it runs.
    pub target: Target,
    /// What is sent.
    pub body: Body<'a>,
    /// The response expected.
    pub expect: Expect,
    /// What it does to session state.
    pub effects: Effects,
    /// A text statement's text, for the digest table and the names it creates (an
    /// `Execute` body has its statement's).
    pub sql: Option<&'a [u8]>,
    /// A read (may be retried once, and balanced).
    pub read: bool,
    /// The client sees the answer. Hidden commands (the login's schema) discard it, select
    /// the schema themselves (no sync of it) and report errors without the proxy's wording.
    pub shown: bool,
}

/// What a statement that ran came back with.
pub(crate) struct Ran {
    /// The server's error, if it answered with one.
    pub error: Option<ServerError>,
}

/// An error the client is told as it is.
fn told(kind: ErrorKind, code: u16, sqlstate: &[u8; 5], message: String) -> StmtError {
    StmtError::Told(ClientError {
        kind,
        code,
        sqlstate: *sqlstate,
        message,
    })
}

impl Session {
    /// Runs `stmt` through the pipeline and tells the client how it failed, if it did.
    pub(crate) async fn run_stmt(&mut self, stmt: Stmt<'_>) -> Result<(), Fatal> {
        let held = matches!(stmt.target, Target::Held);
        let effects = stmt.effects;
        match self.pipeline(stmt).await {
            Ok(_) => Ok(()),
            Err(e) => self.report(e, held, effects).await,
        }
    }

    /// Tells the client why its statement stopped (sequence id 1: the answer's first
    /// packet); a client that failed ends the session.
    pub(crate) async fn report(
        &mut self,
        e: StmtError,
        held: bool,
        effects: Effects,
    ) -> Result<(), Fatal> {
        match e {
            StmtError::Told(e) => Ok(self
                .client
                .send_err(1, e.code, &e.sqlstate, &e.message)
                .await?),
            StmtError::Failed(f) if f.side == Side::Client => Err(Fatal(f.what())),
            StmtError::Failed(f) => self.report_lost(held, &f, effects).await,
        }
    }

    /// Runs a command without showing the client its response (used to select the schema
    /// while the client logs in). Returns the server's error, or the proxy's, if any.
    pub(crate) async fn run_hidden(
        &mut self,
        target: Target,
        payload: &[u8],
        expect: Expect,
        effects: Effects,
    ) -> Result<Result<(), ServerError>, Fatal> {
        let stmt = Stmt {
            target,
            body: Body::Plain(payload),
            expect,
            effects,
            sql: None,
            read: true,
            shown: false,
        };
        match self.pipeline(stmt).await {
            Ok(ran) => Ok(ran.error.map_or(Ok(()), Err)),
            Err(StmtError::Told(e)) => Ok(Err(e)),
            Err(StmtError::Failed(f)) if f.side == Side::Client => Err(Fatal(f.what())),
            Err(StmtError::Failed(f)) => Ok(Err(ServerError {
                kind: ErrorKind::ServerLost,
                code: err::NO_BACKEND,
                sqlstate: *b"HY000",
                message: format!("sluice: {}", f.what()),
            })),
        }
    }

    /// route → attach → sync → prepare → forward → conclude. Nothing is told to the client
    /// here but the response itself; the connection is concluded, settled or discarded.
    pub(crate) async fn pipeline(&mut self, stmt: Stmt<'_>) -> Result<Ran, StmtError> {
        let target = stmt.target;
        let mut attempt = 0;
        loop {
            let held = matches!(target, Target::Held);
            let mut att = self.attach_for(&target, stmt.shown).await?;
            if let Err(e) = self.sync_for(&mut att, stmt.effects, stmt.shown).await {
                self.settle(att, held, false).await;
                return Err(e);
            }
            if stmt.shown {
                self.clear_foreign_diagnostics(&mut att, &target, stmt.effects)
                    .await;
            }
            let (payload, sent_types) = match &stmt.body {
                Body::Plain(p) => (Cow::Borrowed(*p), false),
                Body::Execute(x) => match self.execute_payload(&mut att, x).await {
                    Ok((p, sent)) => (Cow::Owned(p), sent),
                    Err(e) => {
                        self.settle(att, held, false).await;
                        return Err(e);
                    }
                },
            };
            let deprecate = !att.lease.conn_ref().uses_eof();
            let track = !stmt.shown || self.client.has(cap::SESSION_TRACK);
            let scanner = Scanner::new(stmt.expect, deprecate, track);
            let result = self.forward(&mut att, &payload, scanner, stmt.shown).await;
            match result {
                Ok(out) => {
                    if let Body::Execute(x) = &stmt.body {
                        if out.error.is_none() && (x.layout.bound_here || sent_types) {
                            if let Some(s) = att.conn().stmts.get(&x.key) {
                                s.types_bound = true;
                            }
                        }
                        // Before concluding: an open cursor keeps the connection.
                        self.set_stmt_state(x.id, out.cursor_open);
                    }
                    let ran = Ran {
                        error: out.error.clone(),
                    };
                    let digest = match (&stmt.body, stmt.sql) {
                        (Body::Execute(x), _) => DigestOf::Prepared(&x.key),
                        (Body::Plain(_), Some(sql)) => DigestOf::Text(sql),
                        (Body::Plain(_), None) => DigestOf::Nothing,
                    };
                    self.conclude(att, held, stmt.effects, digest, out, stmt.read)
                        .await;
                    return Ok(ran);
                }
                Err(failure) => {
                    drop(att);
                    if let Body::Execute(x) = &stmt.body {
                        self.set_stmt_state(x.id, false);
                    }
                    let e = StmtError::Failed(failure);
                    // Only a hostgroup can lend another connection.
                    let group = matches!(target, Target::Group(_));
                    if group && e.may_retry(stmt.read, held, self.st.in_trans, attempt) {
                        attempt += 1;
                        continue;
                    }
                    return Err(e);
                }
            }
        }
    }

    /// A connection for `target`: the held one, the previous statement's, or one lent by
    /// the hostgroup. When none can be had: the server's own error when it refused us and the
    /// client sees the answer, otherwise the proxy's.
    pub(crate) async fn attach_for(
        &mut self,
        target: &Target,
        shown: bool,
    ) -> Result<Attached, StmtError> {
        let decision = match target {
            Target::Held => self.held.take(),
            Target::Previous => self.prev.take(),
            Target::Group(d) => match self.lease_for(d).await {
                Ok(att) => return Ok(att),
                Err(AcquireError::Connect(e)) if shown && e.code.is_some() => {
                    let code = e.code.unwrap_or(err::NO_BACKEND);
                    let state = e.sqlstate.unwrap_or(*b"HY000");
                    return Err(told(ErrorKind::Server, code, &state, e.message));
                }
                Err(e) => {
                    let msg = format!("sluice: {e}");
                    return Err(told(ErrorKind::NoBackend, err::NO_BACKEND, b"HY000", msg));
                }
            },
        };
        decision.ok_or_else(|| {
            let msg = "sluice: no backend connection available".to_string();
            told(ErrorKind::NoBackend, err::NO_BACKEND, b"HY000", msg)
        })
    }

    /// Brings the connection's session state to the session's (a hidden command selects the
    /// schema itself and needs no reset).
    pub(crate) async fn sync_for(
        &mut self,
        att: &mut Attached,
        effects: Effects,
        shown: bool,
    ) -> Result<(), StmtError> {
        let result = if shown {
            self.sync_quiet(att, effects).await
        } else {
            let conn = &att.lease.conn_ref().state.tracked;
            let mut plan = state::plan(&self.st.tracked, conn, None);
            plan.init_db = None; // the command itself selects the schema
            plan.needs_reset = false;
            self.apply_plan(att, plan).await
        };
        let server = att.lease.server().name.clone();
        match result {
            Ok(()) => Ok(()),
            Err(SyncError::Server(e)) if shown => {
                let msg = format!(
                    "sluice: cannot restore session state on {server}: {}",
                    e.message
                );
                Err(told(ErrorKind::Server, e.code, &e.sqlstate, msg))
            }
            Err(SyncError::Server(e)) => {
                Err(told(ErrorKind::Server, e.code, &e.sqlstate, e.message))
            }
            Err(SyncError::Io(e)) => {
                att.lease.discard();
                let (code, state, msg) = if shown {
                    let msg = format!("sluice: lost connection to backend {server}: {e}");
                    (err::BACKEND_LOST, b"08S01", msg)
                } else {
                    (err::NO_BACKEND, b"HY000", format!("sluice: {e}"))
                };
                Err(told(ErrorKind::ServerLost, code, state, msg))
            }
        }
    }

    /// A statement reading the previous statement's diagnostics (warnings, found rows) on a
    /// connection whose diagnostics area belongs to another statement (maybe another
    /// session's): the session's previous statement had none, so it is cleared.
    async fn clear_foreign_diagnostics(
        &mut self,
        att: &mut Attached,
        target: &Target,
        effects: Effects,
    ) {
        let held = matches!(target, Target::Held);
        let foreign = effects.intersects(Effects::PREV_STATEMENT)
            && !matches!(target, Target::Previous)
            && !(held && self.prev_is_held);
        if foreign && att.conn().exec("DO 0").await.is_err() {
            att.lease.discard();
        }
    }

    /// The COM_STMT_EXECUTE for this connection (prepared on it first if needed), and
    /// whether it carries parameter types the client did not send this time.
    async fn execute_payload(
        &mut self,
        att: &mut Attached,
        x: &Execute<'_>,
    ) -> Result<(Vec<u8>, bool), StmtError> {
        let b = match self.prepare_on(att, &x.key).await {
            Ok(b) => b,
            Err(PrepareError::Server(e)) => {
                return Err(told(ErrorKind::Server, e.code, &e.sqlstate, e.message))
            }
            Err(PrepareError::Lost(msg)) => {
                let msg = format!("sluice: backend {}: {msg}", att.lease.server().name);
                return Err(told(
                    ErrorKind::ServerLost,
                    err::BACKEND_LOST,
                    b"08S01",
                    msg,
                ));
            }
        };
        // A connection that never saw this statement's types needs them, even when the
        // client (rightly, from its point of view) does not send them again.
        let send_types =
            x.params > 0 && !x.layout.bound_here && !b.types_bound && x.layout.has_flag(x.payload);
        let resend = x.types.as_deref().filter(|_| send_types);
        let payload = execute_for_backend(x.payload, &x.layout, resend, b.id);
        Ok((payload, send_types))
    }

    /// Records whether statement `id` has a cursor open (its long data was consumed), and
    /// the pins that follow.
    fn set_stmt_state(&mut self, id: u32, cursor: bool) {
        if let Some(stmt) = self.stmts.map.get_mut(&id) {
            stmt.long_data = false;
            stmt.cursor = cursor;
        }
        self.refresh_stmt_pins();
    }
}
