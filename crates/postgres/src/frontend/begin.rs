//! A `BEGIN` sluice answers itself and holds back until the transaction's first statement,
//! so that a read-only transaction can run on a replica when that statement is a read there
//! (see `route`): a simple-query `BEGIN` (`Session::answer_alone`), with the `SET TRANSACTION
//! READ ONLY`s after it, and an extended-protocol one sent alone up to its Sync (psycopg's
//! pipeline mode, a statement prepared once and bound again), answered here.

use super::session::{client_err, command_complete, put_query, Session, SessionError};
use super::unit::{self, Defs, End, Unit};
use crate::backend::statements::StmtDef;
use crate::front::STATEMENTS_PER_SESSION;
use crate::wire::{ReadyStatus, Writer};
use std::sync::Arc;

/// A `BEGIN` sluice answered and holds back until the transaction's first statement (see
/// [`Session::answer_alone`], [`Session::answer_begin`]).
pub(super) struct DeferredBegin {
    /// The simple query to send (its `SET TRANSACTION`s after it, as one text).
    pub(super) query: Box<[u8]>,
    /// Read-only (and not serializable): it may run on a replica.
    pub(super) read_only: bool,
    /// Serializable by its `BEGIN`: never on a replica.
    pub(super) serializable: bool,
    /// Statements in `query`: the `BEGIN` and the `SET TRANSACTION`s after it (one for
    /// nearly every transaction: its text goes ahead as it is, without being lexed).
    pub(super) statements: u8,
}

impl DeferredBegin {
    /// The simple query `query` (a `BEGIN` with these modes).
    pub(super) fn new(query: Box<[u8]>, read_only: bool, serializable: bool) -> DeferredBegin {
        DeferredBegin {
            query,
            read_only: read_only && !serializable,
            serializable,
            statements: 1,
        }
    }

    /// The text of `query`, without its message header and NUL.
    pub(super) fn text(&self) -> &[u8] {
        self.query
            .get(5..self.query.len().saturating_sub(1))
            .unwrap_or_default()
    }

    /// A `SET TRANSACTION READ ONLY` (`text`, with its NUL) after the `BEGIN`: sent as the
    /// next statement of its text (after a line break, so that a `--` comment ending the
    /// `BEGIN` ends there), and the transaction is read-only.
    pub(super) fn also(&mut self, text: &[u8]) {
        let set = text.strip_suffix(b"\0").unwrap_or(text);
        let mut q = Vec::with_capacity(self.query.len() + set.len() + 8);
        put_query(&mut q, &[self.text(), b"\n;", set].concat());
        self.query = q.into();
        self.read_only = true;
        self.statements = self.statements.saturating_add(1);
    }
}

impl Session {
    /// A `BEGIN` may be held back now: the session holds no connection, nothing pins it, it
    /// may go to more than one hostgroup, and no other `BEGIN` waits.
    pub(super) fn may_defer_begin(&self) -> bool {
        self.lease.is_none()
            && self.listener.hostgroup.is_none()
            && self.pins == 0
            && self.deferred_begin.is_none()
    }

    /// Answers a unit that is an extended-protocol `BEGIN` alone — a Parse of it (or none: a
    /// statement the session prepared earlier), a Bind without parameters, a Describe of its
    /// portal or none, an Execute, a Sync — as PostgreSQL would (`1`, `2`, NoData, the tag,
    /// ReadyForQuery `T`), and holds the `BEGIN` back as a simple-query one. The statement is
    /// the session's as after any Parse (bound again later, it is prepared where it runs);
    /// its portal, run to its end, is not kept. Likewise a `COMMIT` or `ROLLBACK` alone of a
    /// block held back so (no server has it: the tag, a `COMMIT` of a failed block says
    /// `ROLLBACK`, and ReadyForQuery `I`), as a simple one is answered — also while no server
    /// can be reached, where the failed block could not be opened on one and the client
    /// stayed in it. Anything else, or a Parse sluice would refuse (a name in use, too many
    /// statements), goes on as usual.
    pub(super) async fn answer_begin(
        &mut self,
        unit: &Unit,
        defs: &Defs,
    ) -> Result<bool, SessionError> {
        if unit.end != End::Sync {
            return Ok(false);
        }
        let opens = self.status == ReadyStatus::Idle && self.may_defer_begin();
        let ends = self.deferred_begin.is_some();
        if !opens && !ends {
            return Ok(false);
        }
        // Nearly every unit is no BEGIN: told apart before anything is read or looked up (a
        // prepared statement's Bind, the most common unit, only when a BEGIN was ever
        // parsed, or inside a block held back).
        let parsed = unit.msgs[0].0 == b'P';
        let candidate = match parsed {
            true => unit::def_at(defs, 0).is_some_and(|d| match opens {
                true => d.info.begin.is_some(),
                false => d.info.commits || d.info.rolls_back,
            }),
            false => ends || self.parsed_begin,
        };
        if !candidate {
            return Ok(false);
        }
        let tags = || unit.msgs[usize::from(parsed)..].iter().map(|m| m.0);
        let described = match tags().len() {
            3 if tags().eq(*b"BES") => false,
            4 if tags().eq(*b"BDES") => true,
            _ => return Ok(false),
        };
        let body = |i: usize| {
            let (_, at, len) = unit.msg(i);
            &self.client.buf[at + 5..at + len]
        };
        let Some((statement, portal)) = begin_bind(body(usize::from(parsed))) else {
            return Ok(false);
        };
        let def: Arc<StmtDef> = match parsed {
            true => match (unit::cstr(body(0)), unit::def_at(defs, 0)) {
                (Some((name, _)), Some(def)) if name == statement => def.clone(),
                _ => return Ok(false),
            },
            false if statement.is_empty() => match &self.unnamed {
                Some(def) => def.clone(),
                None => return Ok(false),
            },
            false => match self.statements.get(statement) {
                Some(def) => def.clone(),
                None => return Ok(false),
            },
        };
        // (A Parse that declares parameter types fails at a Bind without them, as directly.)
        if def.info.statements != 1 || def.types.iter().any(|&b| b != 0) {
            return Ok(false);
        }
        let info = &def.info;
        let begins = info.begin.filter(|_| opens);
        let ending = ends && (info.commits || info.rolls_back) && info.chains.is_none();
        if begins.is_none() && !ending {
            return Ok(false);
        }
        let last = unit.msgs.len() - 2;
        let portal_named = |b: &[u8]| unit::cstr(b).is_some_and(|(p, _)| p == portal);
        let describes_portal = || {
            body(last - 1)
                .split_first()
                .is_some_and(|(kind, name)| *kind == b'P' && portal_named(name))
        };
        if (described && !describes_portal()) || !portal_named(body(last)) {
            return Ok(false);
        }
        if parsed && def.charge.is_err() {
            return Ok(false);
        }
        if parsed && !statement.is_empty() {
            if self.statements.contains_key(statement)
                || self.statements.len() >= STATEMENTS_PER_SESSION
            {
                return Ok(false);
            }
            self.statements.insert(statement.into(), def.clone());
        } else if parsed {
            self.unnamed = Some(def.clone());
            self.lease_has_unnamed = false;
        }
        let tag = match begins {
            Some((read_only, serializable)) => {
                let mut query = Vec::with_capacity(def.sql.len() + 6);
                put_query(&mut query, &def.sql);
                self.deferred_begin =
                    Some(DeferredBegin::new(query.into(), read_only, serializable));
                self.status = ReadyStatus::InTransaction;
                match sluice_sqlscan::postgres::first_token(&def.sql) {
                    Some(t) if t.eq_ignore_ascii_case(b"start") => "START TRANSACTION",
                    _ => "BEGIN",
                }
            }
            None => {
                self.deferred_begin = None;
                // (A COMMIT of a failed block rolls it back.)
                let committed = info.commits && self.status != ReadyStatus::Failed;
                self.status = ReadyStatus::Idle;
                if committed {
                    "COMMIT"
                } else {
                    "ROLLBACK"
                }
            }
        };
        let mut w = Writer::new();
        for tag in [
            &b"1"[..usize::from(parsed)],
            b"2",
            &b"n"[..usize::from(described)],
        ]
        .concat()
        {
            w.begin(tag);
            w.end();
        }
        command_complete(&mut w, tag);
        w.ready_for_query(self.status);
        self.client.consume(unit.len);
        self.client.send(w.as_bytes()).await.map_err(client_err)?;
        Ok(true)
    }
}

/// A Bind's statement and portal names, if it binds no parameters.
fn begin_bind(body: &[u8]) -> Option<(&[u8], &[u8])> {
    let (portal, rest) = unit::cstr(body)?;
    let (statement, rest) = unit::cstr(rest)?;
    let formats = usize::try_from(i16::from_be_bytes([*rest.first()?, *rest.get(1)?])).ok()?;
    let at = 2 + 2 * formats;
    let params = i16::from_be_bytes([*rest.get(at)?, *rest.get(at + 1)?]);
    (params == 0).then_some((statement, portal))
}
