//! Where a unit goes, and the units sluice answers without a server: a simple-query `BEGIN`
//! (its connection is chosen by the first statement after it), the `COMMIT`/`ROLLBACK` of a
//! transaction that never ran a statement, `DEALLOCATE` of a statement only sluice holds.

use super::begin::DeferredBegin;
use super::session::{client_err, command_complete, Session, SessionError};
use super::state;
use super::unit::{self, Defs, End, Unit};
use crate::backend::statements::StmtDef;
use crate::front::STATEMENTS_PER_SESSION;
use crate::wire::{ReadyStatus, Writer};
use sluice_core::router::{Classified, Decision, Route, RouteInput};
use std::sync::Arc;

/// Statements parsed earlier in a unit, by name: a Bind names them (see
/// [`Session::statement_of`]).
pub(super) type Parsed<'a> = Vec<(&'a [u8], &'a Arc<StmtDef>)>;

impl Session {
    /// Answers a unit without a server when it can: a `BEGIN` whose connection waits for
    /// the first statement, the `COMMIT`/`ROLLBACK` of a transaction that never ran one, a
    /// `DEALLOCATE` of a statement only sluice holds.
    pub(super) async fn answer_alone(
        &mut self,
        unit: &Unit,
        defs: &Defs,
    ) -> Result<bool, SessionError> {
        let Some(def) = unit::def_at(defs, 0) else {
            return Ok(false);
        };
        let info = &def.info;
        if info.statements != 1 {
            return Ok(false);
        }
        let (_, at, len) = unit.msg(0);
        let mut w = Writer::new();
        if let Some((read_only, serializable)) = info.begin {
            // A second BEGIN goes to the server behind the first (its warning, and the
            // first one's modes, as directly).
            if self.may_defer_begin() {
                let bytes: Box<[u8]> = self.client.buf[at..at + len].into();
                // PostgreSQL's tag names the statement as the client spelt it.
                let text = bytes.get(5..).unwrap_or_default();
                let tag = match sluice_sqlscan::postgres::first_token(text) {
                    Some(w) if w.eq_ignore_ascii_case(b"start") => "START TRANSACTION",
                    _ => "BEGIN",
                };
                self.deferred_begin = Some(DeferredBegin::new(bytes, read_only, serializable));
                command_complete(&mut w, tag);
                self.status = ReadyStatus::InTransaction;
            } else {
                return Ok(false);
            }
        } else if let Some(deferred) = self
            .deferred_begin
            .as_mut()
            .filter(|d| info.read_only_txn && !d.serializable && info.hint.is_none())
        {
            // `BEGIN` then `SET TRANSACTION READ ONLY`: the transaction is read-only by its
            // modes, and its first statement proper chooses where it runs (the `SET` goes
            // with the `BEGIN`, as a statement of the same text).
            deferred.also(&self.client.buf[at + 5..at + len]);
            command_complete(&mut w, "SET");
        } else if self.deferred_begin.is_some() && (info.commits || info.rolls_back) {
            self.deferred_begin = None;
            // (A COMMIT of a failed block rolls it back.)
            let committed = info.commits && self.status != ReadyStatus::Failed;
            command_complete(&mut w, if committed { "COMMIT" } else { "ROLLBACK" });
            self.status = ReadyStatus::Idle;
        } else if let Some(name) = info
            .deallocate
            .clone()
            .filter(|n| self.statements.contains_key(n.as_bytes()))
        {
            // As a simple query, it ends an implicit transaction a Flush-ended batch left
            // open (committing what the batch wrote) before it is answered.
            if self.flushed_batch_open()
                && Box::pin(self.sync_flushed()).await? == ReadyStatus::Idle
                && self.pins == 0
            {
                self.release();
            }
            self.statements.remove(name.as_bytes());
            command_complete(&mut w, "DEALLOCATE");
        } else if let Some(name) = info
            .deallocate
            .clone()
            .or_else(|| executed_name(&self.client.buf[at + 5..at + len]))
            .filter(|n| unit::shared_name(n.as_bytes()) && self.lease.is_none())
        {
            // Another session's statement on a shared connection: not this client's. (Not
            // inside a block the server has: its transaction would not fail with it.)
            let (code, msg) = unit::no_statement(name.as_bytes());
            w.error("ERROR", code, &msg);
            if self.status == ReadyStatus::InTransaction {
                self.status = ReadyStatus::Failed;
            }
        } else {
            return Ok(false);
        }
        // As any simple query, it destroys the unnamed statement and portal.
        self.unnamed = None;
        self.portals.remove(b"");
        w.ready_for_query(self.status);
        self.client.consume(unit.len);
        self.client.send(w.as_bytes()).await.map_err(client_err)?;
        Ok(true)
    }

    /// Answers a unit of named Parse and Close messages (or none) and its Sync while the
    /// session holds no connection (libpq's `PQprepare`; a pipeline's closing Sync): the
    /// statements are the session's at once and are
    /// prepared on whichever connection first binds or describes them. A client that
    /// prepares synchronously while its other connections hold the pool's connections in
    /// their transactions (pgbench with fewer threads than clients) never waits for a
    /// connection to prepare. A text the server rejects is reported where the statement is
    /// first used.
    pub(super) async fn answer_parses(
        &mut self,
        unit: &Unit,
        defs: &Defs,
    ) -> Result<bool, SessionError> {
        let n = unit.msgs.len();
        // (Also inside a block whose `BEGIN` waits for its first statement: pgbench's
        // `-M prepared` prepares a statement there, and waits for the answer.)
        let no_block = self.status == ReadyStatus::Idle && self.deferred_begin.is_none();
        let held_block = self.status == ReadyStatus::InTransaction && self.deferred_begin.is_some();
        if !(no_block || held_block)
            || unit.end != End::Sync
            || unit.msgs[..n - 1]
                .iter()
                .any(|m| !matches!(m.0, b'P' | b'C'))
        {
            return Ok(false);
        }
        // Parses of named statements (answered as they come), and Closes: of a statement
        // (the session's name goes; the unnamed one is on no connection the session holds)
        // or of a portal (none is open outside a transaction), answered CloseComplete as
        // PostgreSQL answers them, also for a name that does not exist.
        let mut parsed = Vec::with_capacity(n - 1);
        for (i, (tag, at, len)) in unit.iter().take(n - 1).enumerate() {
            let body = &self.client.buf[at + 5..at + len];
            if tag == b'C' {
                match (body.first(), body.get(1..).and_then(unit::cstr)) {
                    (Some(b'S' | b'P'), Some((name, _))) => {
                        parsed.push((Box::<[u8]>::from(name), None, body[0]))
                    }
                    _ => return Ok(false),
                }
                continue;
            }
            let name = unit::cstr(body).map(|(name, _)| name);
            match (name, unit::def_at(defs, i)) {
                (Some(name), Some(def)) if !name.is_empty() => {
                    parsed.push((Box::<[u8]>::from(name), Some(def.clone()), b'P'))
                }
                _ => return Ok(false),
            }
        }
        let mut w = Writer::new();
        let mut failed = false;
        for (name, def, what) in parsed {
            let Some(def) = def else {
                match what {
                    b'S' if name.is_empty() => self.unnamed = None,
                    b'S' => {
                        self.statements.remove(&name);
                    }
                    _ => {
                        self.portals.remove(&name);
                    }
                }
                w.begin(b'3');
                w.end();
                continue;
            };
            let refusal = if self.statements.contains_key(&name) {
                let msg = format!(
                    "prepared statement \"{}\" already exists",
                    String::from_utf8_lossy(&name)
                );
                Some(("42P05", msg))
            } else if self.statements.len() >= STATEMENTS_PER_SESSION {
                Some(("54000", too_many_statements()))
            } else if let Err(over) = &def.charge {
                Some(crate::backend::statements::over_budget(over))
            } else {
                None
            };
            if let Some((code, msg)) = refusal {
                w.error("ERROR", code, &msg);
                failed = true;
                break;
            }
            self.statements.insert(name, def);
            w.begin(b'1');
            w.end();
        }
        if failed && self.status == ReadyStatus::InTransaction {
            // The held block fails with the Parse, as on the server (25P02 until it ends).
            self.status = ReadyStatus::Failed;
        }
        w.ready_for_query(self.status);
        self.client.consume(unit.len);
        self.client.send(w.as_bytes()).await.map_err(client_err)?;
        Ok(true)
    }

    /// Where a unit goes (its statements' routes, hint and the rules).
    pub(super) fn route(&self, unit: &Unit, defs: &Defs) -> Result<Decision, String> {
        let topo = &self.fe.topology;
        let mut route = Route::Read;
        let mut first: Option<&Arc<StmtDef>> = None;
        let mut hint = None;
        // A simple query's whole text, read from the client's buffer (its record keeps only
        // the first [`crate::backend::statements::QUERY_TEXT_KEPT`] bytes).
        let mut first_text: Option<&[u8]> = None;
        let mut any = false;
        if unit.msgs.iter().any(|m| m.0 == b'F') {
            route = Route::Write;
        }
        let mut parsed = Parsed::new();
        for i in 0..unit.msgs.len() {
            let Some(def) = self.statement_of(unit, defs, i, &mut parsed) else {
                continue;
            };
            let (tag, at, len) = unit.msg(i);
            let body = &self.client.buf[at + 5..at + len];
            if !any {
                // (Read again only where the record kept less than the whole text.)
                let cut = def.sql.len() >= crate::backend::statements::QUERY_TEXT_KEPT;
                let text = (tag == b'Q' && cut).then(|| unit::cstr(body)).flatten();
                first_text = text.map(|(sql, _)| sql);
                let sql = first_text.unwrap_or(&def.sql);
                hint = def.info.hint.and_then(|(s, e)| {
                    std::str::from_utf8(sql.get(s..e)?).ok().map(str::to_string)
                });
                first = Some(def);
            }
            any = true;
            // State that pins the session lives on the primary, where the session can
            // still do anything (on a replica it could never write again).
            if self.fe.route_of(&def.info) == Route::Write
                || def.info.pins & !state::pin::SCANNER_DOUBTS != 0
                || def.info.changes.iter().any(state::blinds_scanner)
            {
                route = Route::Write;
            }
        }
        if !any {
            route = Route::Write;
        }
        // A transaction whose BEGIN waited for its first statement: a read-only one (by its
        // BEGIN, or a first SET TRANSACTION READ ONLY) may go to a replica if its first
        // statement is a read there (`NOTIFY`, `LOCK`, `txid_current()` or a user function
        // need the primary, read-only transaction or not), unless that statement makes it
        // read-write or serializable (still allowed then); any other one goes to the
        // primary, whatever it starts with.
        // (Not one serializable by its `BEGIN`: a standby refuses it.)
        let starts_primary = first.as_ref().is_some_and(|d| d.info.primary_txn);
        let starts_read_only = first.as_ref().is_some_and(|d| d.info.read_only_txn);
        match &self.deferred_begin {
            Some(d) if d.read_only && starts_primary => route = Route::Write,
            Some(d) if d.read_only => {}
            Some(d) if starts_read_only && !d.serializable => route = Route::Read,
            Some(_) => route = Route::Write,
            None => {}
        }
        // A session whose transactions are serializable by default: a standby refuses them
        // (0A000), the primary runs them, whatever the transaction says it is.
        // Nor is a session the scanner cannot read (`standard_conforming_strings` off: see
        // `pin::BACKSLASH_QUOTES`) sent anywhere else.
        if route == Route::Read
            && (self.settings.serializable_by_default() || self.settings.blind_pins() != 0)
        {
            route = Route::Write;
        }
        let sql: &[u8] = first_text
            .or(first.as_ref().map(|d| &d.sql[..]))
            .unwrap_or(b"");
        topo.router
            .route(&RouteInput {
                sql,
                class: Classified {
                    route,
                    hint: hint.as_deref(),
                },
                user: &self.key.user,
                schema: self.key.database.as_deref(),
                in_transaction: false,
                listener_hostgroup: self.listener.hostgroup.as_ref(),
            })
            .map_err(|e| format!("sluice: {e}"))
    }

    /// The statement message `i` of a unit runs or prepares: a Query's, a Parse's (noted in
    /// `parsed`, by name, for the Binds after it), or the one a Bind names (parsed earlier in
    /// the unit, the unnamed one, or the session's).
    // (Always inlined: a call per message cost more than the lookup, callgrind.)
    #[inline(always)]
    pub(super) fn statement_of<'a>(
        &'a self,
        unit: &Unit,
        defs: &'a Defs,
        i: usize,
        parsed: &mut Parsed<'a>,
    ) -> Option<&'a Arc<StmtDef>> {
        let (tag, at, len) = unit.msg(i);
        let body = &self.client.buf[at + 5..at + len];
        match tag {
            b'Q' => unit::def_at(defs, i),
            b'P' => {
                let def = unit::def_at(defs, i);
                if let (Some((name, _)), Some(def)) = (unit::cstr(body), def) {
                    parsed.push((name, def));
                }
                def
            }
            b'B' => unit::cstr(body)
                .and_then(|(_, rest)| unit::cstr(rest))
                .and_then(|(name, _)| {
                    match parsed
                        .iter()
                        .rev()
                        .find(|(n, _)| super::names::same(n, name))
                    {
                        Some((_, def)) => Some(*def),
                        None if name.is_empty() => self.unnamed.as_ref(),
                        None => self.statements.get(name),
                    }
                }),
            _ => None,
        }
    }

    /// A unit that would make state pinning the session inside a read-only transaction a
    /// replica serves: why it is refused (pinned there, the session could never write
    /// again). `None` for any other unit, and on a listener bound to a hostgroup (its
    /// sessions go nowhere else).
    pub(super) fn pins_on_a_replica(&self, unit: &Unit, defs: &Defs) -> Option<String> {
        let lease = self.lease.as_ref()?;
        if self.listener.hostgroup.is_some()
            || self.status != ReadyStatus::InTransaction
            || self.deferred_begin.is_some()
            || **lease.hostgroup() == *self.fe.topology.router.writer
        {
            return None;
        }
        let mut pins = defs.iter().fold(0, |p, (_, d)| {
            p | (d.info.pins & !state::pin::SCANNER_DOUBTS)
        });
        if super::calls::makes_state(unit, &self.client.buf) {
            pins |= state::pin::UNREAD_CALL;
        }
        if pins != 0 {
            return Some(format!(
                "sluice: a read-only transaction on a replica cannot make state that keeps the session on its connection ({}): the session could never write again; make it outside the read-only transaction",
                state::pin::labels(pins).join(", ")
            ));
        }
        // (A reader hostgroup may hold the primary itself: there they lock as directly.)
        let standby = lease
            .conn_ref()
            .params
            .get("in_hot_standby")
            .is_none_or(|v| v == "on");
        (standby && self.locks_the_primary(unit, defs)).then(|| {
            "sluice: a read-only transaction on a replica cannot take or release a lock the primary's sessions must see (LOCK, advisory locks): on the replica it would hold nothing there; take it as the transaction's first statement, or outside a read-only transaction".to_string()
        })
    }

    /// The unit takes or releases locks that only mean something on the primary, which a
    /// standby grants all the same: `LOCK` (a standby takes `ACCESS SHARE`, `ROW SHARE` and
    /// `ROW EXCLUSIVE`) and the advisory lock functions (transaction-level ones, unlocks).
    /// Run on a replica they would exclude no one, silently.
    fn locks_the_primary(&self, unit: &Unit, defs: &Defs) -> bool {
        let mut parsed = Parsed::new();
        (0..unit.msgs.len()).any(|i| {
            self.statement_of(unit, defs, i, &mut parsed)
                .is_some_and(|d| takes_primary_locks(d))
        })
    }
}

/// A statement is (or a text holds) a `LOCK`, or calls an advisory lock function.
fn takes_primary_locks(def: &StmtDef) -> bool {
    if def.info.route != Route::Write {
        return false;
    }
    let advisory = |f: &String| f.starts_with("pg_advisory") || f.starts_with("pg_try_advisory");
    if def.info.user_calls.iter().flatten().any(advisory) {
        return true;
    }
    let lock = |span: (usize, usize)| {
        def.sql
            .get(span.0..span.1)
            .and_then(sluice_sqlscan::postgres::first_token)
            .is_some_and(|t| t.eq_ignore_ascii_case(b"lock"))
    };
    sluice_sqlscan::postgres::statements(&def.sql).any(lock)
}

/// The error for a session that prepares more statements than sluice keeps for one.
pub(super) fn too_many_statements() -> String {
    format!(
        "sluice: a session keeps at most {STATEMENTS_PER_SESSION} prepared statements; close some first"
    )
}

/// The statement name an SQL `EXECUTE name [(...)]` names (unquoted: as PostgreSQL folds it).
fn executed_name(sql: &[u8]) -> Option<String> {
    // Nearly every text starts with another word: no lexing for those (a comment, a quote or
    // anything else first is lexed).
    let first = sql
        .iter()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c));
    if first.is_some_and(|b| b.is_ascii_alphabetic() && !b.eq_ignore_ascii_case(&b'e')) {
        return None;
    }
    let mut tokens = sluice_sqlscan::postgres::tokens(sql);
    if !tokens.next()?.eq_ignore_ascii_case(b"execute") {
        return None;
    }
    let name = std::str::from_utf8(tokens.next()?).ok()?;
    Some(crate::classify::folded_name(name))
}

#[cfg(test)]
mod tests {
    use super::executed_name;

    #[test]
    fn the_statement_an_execute_names() {
        assert_eq!(executed_name(b"EXECUTE Foo(1)").as_deref(), Some("foo"));
        assert_eq!(
            executed_name(b" \t\r\n eXecute \"Fo\"\"o\"").as_deref(),
            Some("Fo\"o")
        );
        assert_eq!(executed_name(b"/* c */ EXECUTE x").as_deref(), Some("x"));
        assert_eq!(executed_name(b"-- c\nexecute x").as_deref(), Some("x"));
        assert_eq!(executed_name(b"SELECT 1"), None);
        assert_eq!(executed_name(b"explain execute x"), None);
        assert_eq!(executed_name(b"(execute x)"), None);
        assert_eq!(executed_name(b""), None);
    }
}
