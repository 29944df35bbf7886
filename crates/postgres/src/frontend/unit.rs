//! A unit of client messages: everything up to a point where the server answers in full —
//! a simple Query, a FunctionCall, a Sync, a Flush (or a bounded batch of messages with none
//! of those). A unit is framed here, its statements classified once, then routed as a whole
//! and forwarded ([`super::forward`]) with the statement names rewritten, what sluice
//! answers itself or adds recorded as [`Exp`]ectations.

pub use super::exps::{Exp, Exps, Register, Resp, Shared};
pub use super::forward::{forward, no_statement, shared_name, Forwarded, Names};
use crate::backend::statements::{self, StmtDef};
use crate::wire::WireError;
use std::sync::Arc;

/// Most messages or bytes in one unit before it is forwarded without an end (the client is
/// pipelining without Sync).
const MAX_UNIT_MESSAGES: usize = 1000;
const MAX_UNIT_BYTES: usize = 256 * 1024;

/// How a unit ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// A simple Query (`Q`).
    Query,
    /// A FunctionCall (`F`).
    Function,
    /// Sync (`S`): the server ends with ReadyForQuery.
    Sync,
    /// Flush (`H`): the server answers what it has, no ReadyForQuery.
    Flush,
    /// Terminate (`X`).
    Terminate,
    /// A batch without an end: forwarded, nothing awaited.
    Partial,
}

/// One unit in the client's buffer.
#[derive(Debug)]
pub struct Unit {
    /// Its messages: type byte, offset and length (header included; read them with
    /// [`Unit::msg`] and [`Unit::iter`]); on the stack for the usual units (a Query;
    /// Parse/Bind/Describe/Execute/Sync), in 32-bit offsets: a session's idle future holds the
    /// room (see `Session::run`). A unit is at most [`MAX_UNIT_BYTES`] and one message of at
    /// most [`super::client::MAX_CLIENT_MESSAGE`] bytes long.
    pub msgs: smallvec::SmallVec<[(u8, u32, u32); 6]>,
    /// Bytes it takes.
    pub len: usize,
    /// How it ends.
    pub end: End,
}

impl Unit {
    /// Message `i`: type byte, offset and length.
    #[inline]
    pub fn msg(&self, i: usize) -> (u8, usize, usize) {
        let (tag, at, len) = self.msgs[i];
        (tag, at as usize, len as usize)
    }

    /// Its messages in order: type byte, offset and length.
    #[inline]
    pub fn iter(&self) -> impl Iterator<Item = (u8, usize, usize)> + '_ {
        self.msgs
            .iter()
            .map(|&(tag, at, len)| (tag, at as usize, len as usize))
    }
}

/// The types of the messages a client may send after its login: Bind, Close, CopyData,
/// CopyDone, CopyFail, Describe, Execute, Flush, FunctionCall, Parse, Query, Sync and
/// Terminate. PostgreSQL ends the session on anything else, and so does sluice, before it
/// reaches a server (whose connection it would cost).
fn frontend_message(tag: u8) -> bool {
    matches!(
        tag,
        b'B' | b'C' | b'd' | b'c' | b'f' | b'D' | b'E' | b'H' | b'F' | b'P' | b'Q' | b'S' | b'X'
    )
}

/// The next unit at the front of `buf`, if complete. A message of a type no client may send
/// is an error when it comes first; after other messages, they are a unit of their own
/// ([`End::Partial`]): the server would have run them before it read that one.
pub fn next_unit(
    buf: &[u8],
    read: impl Fn(usize) -> Result<Option<(u8, usize)>, WireError>,
) -> Result<Option<Unit>, WireError> {
    let mut msgs = smallvec::SmallVec::new();
    let mut at = 0;
    loop {
        // A type no client may send is refused by its byte alone, as PostgreSQL refuses it
        // (before its length is waited for).
        if let Some(&tag) = buf.get(at).filter(|&&t| !frontend_message(t)) {
            if msgs.is_empty() {
                return Err(WireError::MessageType(tag));
            }
            return Ok(Some(Unit {
                msgs,
                len: at,
                end: End::Partial,
            }));
        }
        let Some((tag, len)) = read(at)? else {
            break;
        };
        // (Within 32 bits: `at` is below MAX_UNIT_BYTES here, and a message is at most
        // MAX_CLIENT_MESSAGE bytes.)
        msgs.push((tag, at as u32, len as u32));
        at += len;
        let end = match tag {
            b'Q' => Some(End::Query),
            b'F' => Some(End::Function),
            b'S' => Some(End::Sync),
            b'H' => Some(End::Flush),
            b'X' => Some(End::Terminate),
            _ if msgs.len() >= MAX_UNIT_MESSAGES || at >= MAX_UNIT_BYTES => Some(End::Partial),
            _ => None,
        };
        if let Some(end) = end {
            return Ok(Some(Unit { msgs, len: at, end }));
        }
        if at >= buf.len() {
            break;
        }
    }
    Ok(None)
}

/// The statements a unit's Parse and Query messages carry, classified once (by message
/// index): routing, forwarding and tracking all read them.
/// On the stack for units of one statement (nearly all; a session's idle future holds
/// the room, see `Session::run`).
pub type Defs = smallvec::SmallVec<[(usize, Arc<StmtDef>); 1]>;

/// Classifies the statement texts of `unit` (no allocation for a unit without any); its
/// Parses are analysed under the settings of fingerprint `settings`, unless a statement
/// before them in the unit changes settings (then each is given a fingerprint of its own).
/// Each Parse's text is charged to the session's `budget`, its share of `fe`'s (`[postgres]
/// max_statement_memory`); `pool` is the session's (see
/// [`crate::backend::statements::pool_scope`]).
#[inline]
pub fn statement_defs(
    buf: &[u8],
    unit: &Unit,
    settings: u64,
    pool: &sluice_core::PoolKey,
    budget: &mut sluice_core::Share,
    fe: &crate::front::PostgresFrontend,
) -> Defs {
    statement_defs_with(buf, unit, settings, pool, budget, fe, |_| None)
}

/// As [`statement_defs`], message `i`'s definition taken from `made(i)` where that gives one
/// (made off the event loop, see [`super::long_texts`]; not charged yet: a Parse's is
/// charged here).
#[inline]
pub fn statement_defs_with(
    buf: &[u8],
    unit: &Unit,
    mut settings: u64,
    pool: &sluice_core::PoolKey,
    budget: &mut sluice_core::Share,
    fe: &crate::front::PostgresFrontend,
    mut made: impl FnMut(usize) -> Option<StmtDef>,
) -> Defs {
    let mut defs = Defs::new();
    let mut scope = None;
    for (i, (tag, at, len)) in unit.iter().enumerate() {
        let mut charge = |def: StmtDef| {
            let scope = *scope.get_or_insert_with(|| statements::pool_scope(pool));
            let budget = fe.statement_memory.of_session(budget);
            def.charged_to(settings, scope, budget)
        };
        let body = &buf[at + 5..at + len];
        let def = match (made(i), tag) {
            (Some(def), b'P') => Some(charge(def)),
            (Some(def), _) => Some(def),
            (None, b'Q') => cstr(body).map(|(sql, _)| StmtDef::query(sql)),
            (None, b'P') => cstr(body)
                .and_then(|(_, rest)| cstr(rest))
                .map(|(sql, types)| charge(StmtDef::new(sql, types))),
            _ => None,
        };
        if let Some(def) = def {
            if def.info.changes_settings() {
                settings = crate::backend::statements::unsettled_fingerprint();
            }
            defs.push((i, Arc::new(def)));
        }
    }
    defs
}

/// How a unit uses the unnamed portal a batch before it left open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortalUse {
    /// It describes, executes or closes it before binding a new one.
    Continues,
    /// It binds a new one first (which replaces the old one).
    Rebinds,
    /// Neither.
    Untouched,
}

/// How `unit` (its messages in `buf`) uses the unnamed portal open before it.
pub fn unnamed_portal_use(buf: &[u8], unit: &Unit) -> PortalUse {
    for (tag, at, len) in unit.iter() {
        let body = &buf[at + 5..at + len];
        let portal = match tag {
            b'B' | b'E' => body,
            b'D' | b'C' if body.first() == Some(&b'P') => &body[1..],
            _ => continue,
        };
        if cstr(portal).is_some_and(|(name, _)| name.is_empty()) {
            return match tag {
                b'B' => PortalUse::Rebinds,
                _ => PortalUse::Continues,
            };
        }
    }
    PortalUse::Untouched
}

/// The statement of message `i`, if it carries one.
pub fn def_at(defs: &Defs, i: usize) -> Option<&Arc<StmtDef>> {
    defs.iter().find(|(at, _)| *at == i).map(|(_, d)| d)
}

/// Reads a NUL-terminated string at the start of `b`: it and the rest.
#[inline]
pub fn cstr(b: &[u8]) -> Option<(&[u8], &[u8])> {
    let n = first_nul(b)?;
    Some((&b[..n], &b[n + 1..]))
}

/// Where the first NUL byte of `b` is: a name (a portal's, a statement's: at every Bind,
/// Describe and Execute) is short, and its end is found byte by byte; a statement's text (at
/// every Query and Parse) is long, and past its first bytes `memchr` searches it with SIMD (a
/// byte loop costs about four instructions a byte; a 55-byte pgbench query took 158
/// instructions with a word-at-a-time loop, and about 35 in `memchr`).
#[inline]
fn first_nul(b: &[u8]) -> Option<usize> {
    const NAME: usize = 8;
    if let Some(n) = b.iter().take(NAME).position(|&c| c == 0) {
        return Some(n);
    }
    memchr::memchr(0, b.get(NAME..)?).map(|i| NAME + i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::read_message;

    fn msg(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![tag];
        m.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    fn next(buf: &[u8]) -> Result<Option<Unit>, WireError> {
        next_unit(buf, |at| {
            Ok(read_message(&buf[at..], 1 << 20)?.map(|(m, len)| (m.tag, len)))
        })
    }

    #[test]
    fn a_unit_continues_replaces_or_leaves_the_unnamed_portal() {
        let bind = |portal: &[u8]| msg(b'B', &[portal, b"\0\0\0\0\0\0\0\0"].concat());
        let exec = |portal: &[u8]| msg(b'E', &[portal, b"\0\0\0\0\0"].concat());
        let parse = msg(b'P', b"\0INSERT INTO t VALUES (1)\0\0\0");
        let sync = msg(b'S', b"");
        for (msgs, want) in [
            (
                vec![parse.clone(), bind(b""), exec(b""), sync.clone()],
                PortalUse::Rebinds,
            ),
            (vec![exec(b""), sync.clone()], PortalUse::Continues),
            (vec![msg(b'D', b"P\0"), sync.clone()], PortalUse::Continues),
            (vec![msg(b'C', b"P\0"), sync.clone()], PortalUse::Continues),
            // A statement's Describe or Close is not the portal's.
            (
                vec![msg(b'D', b"S\0"), msg(b'C', b"S\0"), sync.clone()],
                PortalUse::Untouched,
            ),
            (
                vec![parse.clone(), bind(b"p"), exec(b"p"), sync.clone()],
                PortalUse::Untouched,
            ),
            (
                vec![exec(b"p"), bind(b""), exec(b""), sync.clone()],
                PortalUse::Rebinds,
            ),
            (
                vec![exec(b""), bind(b""), sync.clone()],
                PortalUse::Continues,
            ),
        ] {
            let buf = msgs.concat();
            let unit = next(&buf).unwrap().unwrap();
            assert_eq!(unit.len, buf.len());
            assert_eq!(unnamed_portal_use(&buf, &unit), want, "{msgs:?}");
        }
    }

    #[test]
    fn a_nul_terminated_string_ends_at_its_first_nul_short_or_long() {
        assert_eq!(cstr(b"\0"), Some((&b""[..], &b""[..])));
        assert_eq!(cstr(b"P_1\0rest"), Some((&b"P_1"[..], &b"rest"[..])));
        assert_eq!(cstr(b""), None);
        assert_eq!(cstr(b"no end"), None);
        // Every length around the eight-byte steps, the NUL in every place.
        for len in 0..40 {
            let text = vec![b'x'; len];
            let mut b = text.clone();
            b.extend_from_slice(b"\0a\0");
            assert_eq!(cstr(&b), Some((&text[..], &b"a\0"[..])), "{len}");
            assert_eq!(cstr(&text), None, "{len}");
            // A byte of 0x80 or 0x01 around it is no NUL.
            let mut b = vec![0x80u8; len];
            b.extend_from_slice(&[0x01, 0, 0x81]);
            assert_eq!(cstr(&b).map(|(s, _)| s.len()), Some(len + 1), "{len}");
        }
    }

    #[test]
    fn a_message_type_no_client_sends_ends_the_session_where_it_comes() {
        // First in the buffer: an error, in PostgreSQL's words.
        for tag in [b'Z', b'p', 0, b'x'] {
            let buf = msg(tag, b"");
            let e = next(&buf).map(|_| ()).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("invalid frontend message type {tag}")
            );
        }
        // After a whole unit: that unit first.
        let q = msg(b'Q', b"SELECT 1\0");
        let buf = [q.clone(), msg(b'Z', b"")].concat();
        let u = next(&buf).unwrap().unwrap();
        assert_eq!((u.end, u.len, u.msgs.len()), (End::Query, q.len(), 1));
        assert!(next(&buf[u.len..]).is_err());
        // After part of one: the part, forwarded without an end (the server runs it before
        // it reads the bad message).
        let part = [
            msg(b'P', b"\0INSERT INTO t VALUES (1)\0\0\0"),
            msg(b'B', b"\0\0\0\0\0\0\0\0"),
            msg(b'E', b"\0\0\0\0\0"),
        ]
        .concat();
        let buf = [part.clone(), msg(b'Z', b""), msg(b'S', b"")].concat();
        let u = next(&buf).unwrap().unwrap();
        assert_eq!((u.end, u.len, u.msgs.len()), (End::Partial, part.len(), 3));
        // Its type byte is enough: no length is waited for (a second StartupMessage or
        // SSLRequest starts with a zero byte).
        for tag in [0, b'Z'] {
            assert!(next(&[tag]).is_err(), "{tag}");
            assert!(next(&[q.clone(), vec![tag, 0]].concat()).unwrap().is_some());
        }
        // Every type a client does send passes.
        for tag in *b"BCdcfDEHFPQSX" {
            assert!(next(&msg(tag, b"")).is_ok(), "{}", tag as char);
        }
    }
}
