//! A statement the client described, prepared on a connection that never had it: is its
//! result still what the client was told? PostgreSQL refuses to run a prepared statement
//! whose result DDL changed since its Parse (0A000 `cached plan must not change result
//! type`); a copy that sluice prepares afresh elsewhere would run, and give rows of the new
//! shape to a driver that decodes them by the description it holds (pgx, asyncpg and PgJDBC
//! keep it). So `forward` leaves such a statement out of the unit ([`Check`]), and before
//! the unit goes it is prepared there in a round trip of its own, described, and compared
//! with what the client was given: a change moves the statement's result epoch on (every
//! client that parsed it before is checked from then on; one that never described it is
//! refused), the copy is closed again, and the message that names it fails on the server,
//! with PostgreSQL's 0A000 in the server's error's place; a statement that no longer parses
//! fails there with the error its Parse got. A statement whose result epoch moved on since
//! its client parsed it is checked the same way at each use: the result its client was told
//! gives rows again (a change rolled back or undone), as PostgreSQL checks it at each use.
//!
//! Where the server stands at a Sync, the round trip ends with one; inside a transaction
//! block it runs under a savepoint, so that a statement that no longer parses (a column
//! dropped) fails where the client's message would, not ahead of what the unit runs before
//! it. After a batch the client ended with a Flush (its implicit transaction still open, all
//! of it answered), the round trip ends with a Flush instead, and a statement that no longer
//! parses puts the server where the client's message would have: skipping to the client's
//! next Sync, the error told in that message's place (what the unit sends before it is
//! skipped with it).

use super::client::Client;
use super::exps::Replacement;
use super::forward::put;
use super::lease::hidden_answers;
use super::lease::put_own;
use super::unit::{Exps, Shared};
use crate::backend::statements::{result_shape, server_name, Cached, StmtDef};
use crate::backend::PgConn;
use crate::wire::ReadyStatus;
use std::sync::Arc;

/// The savepoint the round trip runs under inside a transaction block (statements of
/// sluice's own, not simple queries: those would drop the client's unnamed statement and
/// portal, which the unit may go on with).
const SAVEPOINT: &[u8] = b"SAVEPOINT sluice_shape";
const RELEASE: &[u8] = b"RELEASE SAVEPOINT sluice_shape";
const ROLLBACK_TO: &[u8] = b"ROLLBACK TO SAVEPOINT sluice_shape";

/// A statement the connection must prepare for a unit, whose client described it: held in
/// the connection's record under `key` already (and `evict` out of it), but prepared only
/// by [`check`].
#[derive(Debug)]
pub struct Check {
    /// Its key on the connection.
    pub key: u64,
    /// The statement to close first to make room.
    pub evict: Option<(u64, Cached)>,
    /// The client's statement.
    pub def: Arc<StmtDef>,
    /// The expectation of the unit's message that names it first.
    pub exp: usize,
}

/// Prepares and describes `checks` on `conn` before their unit (under a savepoint in a
/// transaction block, `in_block`), and compares each result with the one its client was
/// given: where it changed, or the statement no longer parses, the statement is left off
/// the connection and the unit's message naming it fails there, its error replaced
/// (`exps`). The connection's error if it failed.
/// After a Flush (`conn.unsynced`): the error the client is told where the server now skips
/// to its next Sync, if a statement no longer parses.
pub async fn check(
    conn: &mut PgConn,
    checks: Vec<Check>,
    exps: &mut Exps,
    in_block: bool,
    client: &mut Client,
    own_pid: u32,
) -> std::io::Result<Option<Replacement>> {
    let flushed = conn.unsynced;
    let in_block = in_block && !flushed;
    let mut out = Vec::new();
    if in_block {
        put_own(&mut out, SAVEPOINT);
        put(&mut out, b'S', &[]);
    }
    // What each message does to the connection's record, in order.
    let mut pending: std::collections::VecDeque<Shared> = Default::default();
    for c in &checks {
        if let Some((old, cached)) = &c.evict {
            put(&mut out, b'C', &[b"S", &server_name(*old), b"\0"]);
            pending.push_back(Shared::Closes(*old, Box::new(cached.clone())));
        }
        c.def.parse_message(c.key, &mut out);
        pending.push_back(Shared::Prepares(c.key));
        put(&mut out, b'D', &[b"S", &server_name(c.key), b"\0"]);
    }
    put(&mut out, if flushed { b'H' } else { b'S' }, &[]);
    if in_block {
        put_own(&mut out, RELEASE);
        put(&mut out, b'S', &[]);
    }
    conn.send(&out).await?;
    if in_block && hidden_answers(conn, 1).await.map_err(lost)? != ReadyStatus::InTransaction {
        return Err(std::io::Error::other("the savepoint could not be made"));
    }
    // The checks' ReadyForQuery owed; after a Flush, descriptions (an error ends the
    // answers).
    let mut owed = if flushed { checks.len() } else { 1 };
    // The checks described so far, and the first error.
    let mut described = 0;
    let mut changed = Vec::new();
    let mut failed: Option<Replacement> = None;
    while owed > 0 {
        let (tag, body) = conn.next_owned().await?;
        match tag {
            b'1' | b'3' => {
                pending.pop_front();
            }
            // (Its parameter types, where this is the statement's first analysis.)
            b't' => {
                if let Some(c) = checks.get(described) {
                    c.def.resolve(&body);
                }
            }
            b'T' | b'n' => {
                if let Some(c) = checks.get(described) {
                    if result_shape(tag, &body) != c.def.described() {
                        // As where a copy prepared before the change is used: every
                        // client that parsed the statement before is refused (unless the
                        // change was known when this client's statement was checked).
                        if !c.def.result_changed() {
                            conn.statements.result_changed(c.key, None);
                        }
                        changed.push(c.key);
                        refuse(exps, c, super::forward::result_changed());
                    } else {
                        // What its client was told (again, after a change undone).
                        c.def.result_confirmed();
                    }
                }
                described += 1;
                if flushed {
                    owed -= 1;
                }
            }
            b'E' if failed.is_none() => {
                let parts = crate::wire::error_parts(&body).unwrap_or_default();
                let code = parts.code.unwrap_or_else(|| "XX000".into());
                failed = Some((code.into(), parts.message.unwrap_or_default(), parts.rest));
                // The server skipped the rest: not prepared, not closed.
                Shared::undo_skipped(
                    std::mem::take(&mut pending).into_iter(),
                    &mut conn.statements,
                );
                if flushed {
                    // Nothing more comes before the client's Sync.
                    owed = 0;
                }
            }
            b'S' => conn.note_parameter(&body),
            b'A' => {
                let mut msg = Vec::with_capacity(5 + body.len());
                put(&mut msg, b'A', &[&body]);
                let own = super::relay::own_notification(&msg, conn.backend_key.0, own_pid);
                client.queue(own.as_deref().unwrap_or(&msg));
            }
            b'Z' => owed -= 1,
            _ => {}
        }
    }
    if in_block {
        // (After a failure the block is failed, and the RELEASE with it.)
        let released = hidden_answers(conn, 1).await;
        if failed.is_none() {
            released.map_err(lost)?;
        }
    }
    if let Some(error) = failed {
        if flushed {
            // The server skips to the client's Sync: what is left of the check, and the unit.
            return Ok(Some(error));
        }
        // The statement whose Parse failed, and those after it (never prepared: the unit
        // fails at that one first).
        if let Some(c) = checks.get(described) {
            refuse(exps, c, error);
        }
        if in_block {
            // The block as it was before the savepoint.
            let mut undo = Vec::new();
            put_own(&mut undo, ROLLBACK_TO);
            put_own(&mut undo, RELEASE);
            put(&mut undo, b'S', &[]);
            conn.send(&undo).await?;
            let status = hidden_answers(conn, 1).await.map_err(lost)?;
            if status != ReadyStatus::InTransaction {
                return Err(std::io::Error::other(
                    "the savepoint could not be rolled back",
                ));
            }
        }
    }
    if !changed.is_empty() {
        // Off the connection: the unit's message naming it fails there.
        let mut close = Vec::new();
        for key in &changed {
            put(&mut close, b'C', &[b"S", &server_name(*key), b"\0"]);
            conn.statements.forget(*key);
        }
        if flushed {
            put(&mut close, b'H', &[]);
            conn.send(&close).await?;
            let mut closes = changed.len();
            while closes > 0 {
                match conn.next_owned().await? {
                    (b'3', _) => closes -= 1,
                    (b'S', body) => conn.note_parameter(&body),
                    (b'E', _) => return Err(std::io::Error::other("a Close failed")),
                    _ => {}
                }
            }
        } else {
            put(&mut close, b'S', &[]);
            conn.send(&close).await?;
            hidden_answers(conn, 1).await.map_err(lost)?;
        }
    }
    Ok(None)
}

impl super::session::Session {
    /// [`check`]s the unit's `checks` on `conn`; if the connection fails, the client is told
    /// (FATAL) and the session ends.
    pub(super) async fn check_shapes(
        &mut self,
        conn: &mut PgConn,
        checks: Vec<Check>,
        exps: &mut Exps,
        in_block: bool,
    ) -> Result<(), super::session::SessionError> {
        let own_pid = self.handle.id;
        match check(conn, checks, exps, in_block, &mut self.client, own_pid).await {
            Ok(None) => Ok(()),
            Ok(Some(error)) => {
                // As after an error in the client's own batch: the client is told, and the
                // unit's answers up to its Sync are not awaited (the server skips them).
                let mut w = crate::wire::Writer::new();
                w.error_with("ERROR", &error.0, &error.1, &error.2);
                self.client.queue(w.as_bytes());
                self.skipping = true;
                Ok(())
            }
            Err(e) => {
                let msg = format!("sluice: {e}");
                let _ = self.client.fatal("08006", &msg).await;
                Err(super::session::SessionError::Refused(msg))
            }
        }
    }
}

/// The unit's message that names `c` gets `error` in place of the server's.
fn refuse(exps: &mut Exps, c: &Check, error: Replacement) {
    if let Some(e) = exps.get_mut(c.exp) {
        e.replace_error = Some(Box::new(error));
    }
}

/// A hidden query's failure as the connection's.
fn lost(e: super::lease::HiddenError) -> std::io::Error {
    std::io::Error::other(e.message)
}
