//! A statement the client described, prepared on a connection that never had it: is its
//! result still what the client was told? PostgreSQL refuses to run a prepared statement
//! whose result DDL changed since its Parse (0A000 `cached plan must not change result
//! type`); a copy that sluice prepares afresh elsewhere would run, and give rows of the new
//! shape to a driver that decodes them by the description it holds (pgx, asyncpg and PgJDBC
//! keep it). So before such a unit, the statements it binds or describes that the
//! connection lacks are prepared there in a round trip of their own, described, and compared
//! with what the client was given: a change moves the statement's result epoch on, and
//! `forward` then refuses it as PostgreSQL does.
//!
//! The round trip ends with a Sync, so it is made only where the server stands at one
//! (nothing of the client's batch is pending there); inside a transaction block it runs
//! under a savepoint, so that a statement that no longer parses (a column dropped) fails
//! where the client's message would, not ahead of what the unit runs before it.

use super::forward::put;
use super::names::NameMap;
use super::session::{Session, SessionError};
use super::unit::{cstr, Shared, Unit};
use crate::backend::statements::{result_shape, server_name, Ensure, StmtDef};
use crate::backend::PgConn;
use std::sync::Arc;

/// The savepoint the round trip runs under inside a transaction block.
const SAVEPOINT: &[u8] = b"SAVEPOINT sluice_shape";
const RELEASE: &[u8] = b"RELEASE SAVEPOINT sluice_shape";
const UNDO: &[u8] = b"ROLLBACK TO SAVEPOINT sluice_shape; RELEASE SAVEPOINT sluice_shape";

impl Session {
    /// Checks, before `unit` is forwarded on the leased connection, the result of each
    /// statement it binds or describes that the client described and the connection does
    /// not hold (see the module's note). `in_block`: the server is inside the session's
    /// transaction block.
    pub(super) async fn check_shapes(
        &mut self,
        unit: &Unit,
        in_block: bool,
    ) -> Result<(), SessionError> {
        let Some(lease) = &mut self.lease else {
            return Ok(());
        };
        let conn = lease.conn();
        let due = unchecked(&self.client.buf[..unit.len], unit, &self.statements, conn);
        if due.is_empty() {
            return Ok(());
        }
        let own_pid = self.handle.id;
        match check(conn, &due, in_block, &mut self.client, own_pid).await {
            Ok(()) => Ok(()),
            Err(e) => {
                let msg = format!("sluice: {e}");
                let _ = self.client.fatal("08006", &msg).await;
                Err(SessionError::Refused(msg))
            }
        }
    }
}

/// The statements `unit` names in a Bind or a Describe that its client described, whose
/// result is not known to have changed, and that `conn` would have to prepare: each once.
/// (Not those a Parse of the unit defines: the client parses them now.)
fn unchecked(
    buf: &[u8],
    unit: &Unit,
    statements: &NameMap<Arc<StmtDef>>,
    conn: &mut PgConn,
) -> smallvec::SmallVec<[Arc<StmtDef>; 2]> {
    let mut due: smallvec::SmallVec<[Arc<StmtDef>; 2]> = smallvec::SmallVec::new();
    let mut parsed: smallvec::SmallVec<[&[u8]; 2]> = smallvec::SmallVec::new();
    for &(tag, at, len) in &unit.msgs {
        let body = &buf[at + 5..at + len];
        let name = match tag {
            b'P' => {
                parsed.extend(cstr(body).map(|(name, _)| name));
                continue;
            }
            b'B' => cstr(body).and_then(|(_, rest)| cstr(rest)).map(|(s, _)| s),
            b'D' if body.first() == Some(&b'S') => cstr(&body[1..]).map(|(s, _)| s),
            _ => None,
        };
        let Some(name) = name.filter(|n| !n.is_empty() && !parsed.contains(n)) else {
            continue;
        };
        let Some(def) = statements.get(name) else {
            continue;
        };
        if def.described() == 0
            || def.result_changed()
            || due.iter().any(|d| Arc::ptr_eq(d, def))
            || conn.statements.holds(def)
        {
            continue;
        }
        due.push(def.clone());
    }
    due
}

/// Prepares and describes `due` on `conn` (under a savepoint in a transaction block) and
/// compares each result with the one its client was given; the connection's error if it
/// failed (a server's refusal is no error here: the client's own message meets it again,
/// in its place).
async fn check(
    conn: &mut PgConn,
    due: &[Arc<StmtDef>],
    in_block: bool,
    client: &mut super::client::Client,
    own_pid: u32,
) -> std::io::Result<()> {
    let mut out = Vec::new();
    if in_block {
        super::session::put_query(&mut out, SAVEPOINT);
    }
    // What each message does to the connection's record, in order, and the statement each
    // description is for.
    let mut done: std::collections::VecDeque<Shared> = Default::default();
    let mut described: std::collections::VecDeque<(u64, &Arc<StmtDef>)> = Default::default();
    for def in due {
        let (key, Ensure::Prepare { evict }) = conn.statements.ensure(def) else {
            continue;
        };
        if let Some((old, cached)) = evict {
            put(&mut out, b'C', &[b"S", &server_name(old), b"\0"]);
            done.push_back(Shared::Closes(old, Box::new(cached)));
        }
        def.parse_message(key, &mut out);
        done.push_back(Shared::Prepares(key));
        put(&mut out, b'D', &[b"S", &server_name(key), b"\0"]);
        described.push_back((key, def));
    }
    put(&mut out, b'S', &[]);
    if in_block {
        super::session::put_query(&mut out, RELEASE);
    }
    conn.send(&out).await?;
    let mut owed = 1 + 2 * usize::from(in_block);
    let mut failed = false;
    while owed > 0 {
        let (tag, body) = conn.next_owned().await?;
        match tag {
            b'1' | b'3' => {
                done.pop_front();
            }
            b'T' | b'n' => {
                if let Some((key, def)) = described.pop_front() {
                    if result_shape(tag, &body) != def.described() {
                        // As the server reports it where a copy it had prepared before
                        // the change is used: every client that parsed it before is refused.
                        conn.statements.result_changed(key, None);
                    }
                }
            }
            b'E' if !failed => {
                failed = true;
                // The server skipped the rest: not prepared, not closed.
                Shared::undo_skipped(std::mem::take(&mut done).into_iter(), &mut conn.statements);
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
    if failed && in_block {
        // The block as it was before the savepoint.
        let mut undo = Vec::new();
        super::session::put_query(&mut undo, UNDO);
        conn.send(&undo).await?;
        loop {
            let (tag, body) = conn.next_owned().await?;
            match tag {
                b'S' => conn.note_parameter(&body),
                b'Z' if body.first() == Some(&b'T') => break,
                b'Z' => {
                    return Err(std::io::Error::other(
                        "the savepoint could not be rolled back",
                    ))
                }
                _ => {}
            }
        }
    }
    Ok(())
}
