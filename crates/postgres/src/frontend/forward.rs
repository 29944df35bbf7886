//! Forwarding a unit to its server connection: the client's statement names rewritten (a
//! statement it prepared is made sure of on the connection, prepared there lazily under its
//! shared name; the unnamed one parsed again where another connection had it), what sluice
//! answers itself left out, and what it adds or refuses put in its place, each recorded as an
//! [`Exp`]ectation so that the relay knows which responses the client sees.

use super::exps::Replacement;
use super::unit::{cstr, def_at, Defs, Exp, Exps, Register, Resp, Shared, Unit};
use crate::backend::statements::{server_name, Cached, Ensure, StmtDef};
use crate::backend::PgConn;
use crate::front::{PORTALS_PER_SESSION, STATEMENTS_PER_SESSION};
use std::sync::Arc;

mod errors;
pub use errors::no_statement;
use errors::{copy_over_budget, no_portal, no_unnamed, too_many_portals};

/// What forwarding a unit produced.
#[derive(Debug, Default)]
pub struct Forwarded {
    /// Bytes for the server, when they differ from the unit's (`None`: the unit goes as the
    /// client wrote it, straight from its buffer: no copy).
    pub out: Option<Vec<u8>>,
    /// Responses expected, in order.
    pub exps: Exps,
    /// The statements the unit executes (for the session's tracking).
    pub ran: smallvec::SmallVec<[Arc<StmtDef>; 2]>,
    /// Statements to prepare and check before the unit goes (see [`super::shapes`]).
    pub checks: Vec<super::shapes::Check>,
    /// Bytes of `out` added to the client's charge (see [`COPY_UNCHARGED`]): given back once
    /// `out` is sent.
    pub copied: usize,
}

/// Forwarding in progress: the bytes for the server stay the unit's own until a message is
/// rewritten or added, and are copied only then.
struct Build<'a> {
    /// The unit's bytes.
    src: &'a [u8],
    /// The output so far is the unit's first this many bytes (not copied); `None` once it
    /// is in `out`.
    verbatim: Option<usize>,
    out: Vec<u8>,
    f: Forwarded,
}

impl Build<'_> {
    /// A message goes as the client wrote it.
    fn keep(&mut self, whole: &[u8]) {
        match &mut self.verbatim {
            Some(n) => *n += whole.len(),
            None => self.out.extend_from_slice(whole),
        }
    }

    /// A message of the unit is not sent (sluice answers it): what follows cannot be the
    /// unit's own bytes any more.
    fn leave_out(&mut self) {
        self.out();
    }

    /// Where rewritten or added messages go (the unchanged ones before them copied first).
    fn out(&mut self) -> &mut Vec<u8> {
        if let Some(n) = self.verbatim.take() {
            self.out = sluice_runtime::buffers::write_buffer();
            self.out.extend_from_slice(&self.src[..n]);
        }
        &mut self.out
    }

    fn finish(mut self) -> Forwarded {
        if self.verbatim.is_none() {
            self.f.out = Some(self.out);
        }
        self.f
    }
}

/// Writes a message of type `tag` whose body is `parts`, one after the other.
pub(super) fn put(out: &mut Vec<u8>, tag: u8, parts: &[&[u8]]) {
    let len: usize = 4 + parts.iter().map(|p| p.len()).sum::<usize>();
    out.push(tag);
    out.extend_from_slice(&(len as u32).to_be_bytes());
    for p in parts {
        out.extend_from_slice(p);
    }
}

/// The session's view of statement names while forwarding a unit.
pub struct Names<'a> {
    /// Named statements.
    pub statements: &'a mut super::names::NameMap<Arc<StmtDef>>,
    /// The unnamed statement as the client last parsed it.
    pub unnamed: &'a mut Option<Arc<StmtDef>>,
    /// The unnamed statement on the connection is the session's.
    pub conn_has_unnamed: &'a mut bool,
    /// Statements bound to portals (by portal name).
    pub portals: &'a mut super::names::Portals<Arc<StmtDef>>,
    /// The session's transaction has failed: the server refuses every Parse (25P02).
    pub txn_failed: bool,
    /// The server stands at a Sync, outside a failed transaction: a statement whose client
    /// described it, which the connection must prepare, is prepared and checked first (see
    /// [`super::shapes`]) instead of in the unit.
    pub check_shapes: bool,
    /// Executes of `COPY … FROM STDIN` forwarded whose CopyDone or CopyFail has not been
    /// (they may come in a later part of a long batch).
    pub copies_open: &'a mut u32,
    /// The client's charge against `[proxy] max_request_memory`: a large Bind's copy is
    /// added to it (see [`COPY_UNCHARGED`]).
    pub charge: &'a mut sluice_core::Charge,
}

/// Parameters of a Bind of a named statement beyond this many bytes are charged again to
/// `[proxy] max_request_memory` as the Bind is copied (with the statement's name on the
/// server connection), on top of the message itself, until the copy is sent. A Bind of the
/// unnamed statement is not copied.
pub const COPY_UNCHARGED: usize = 64 * 1024;

/// Rewrites and forwards the extended-protocol and simple messages of `unit`.
pub fn forward(
    buf: &[u8],
    unit: &Unit,
    defs: &Defs,
    conn: &mut PgConn,
    mut names: Names<'_>,
) -> Forwarded {
    let mut f = Build {
        src: buf,
        verbatim: Some(0),
        out: Vec::new(),
        f: Forwarded::default(),
    };
    for (i, (tag, at, len)) in unit.iter().enumerate() {
        let whole = &buf[at..at + len];
        let body = &whole[5..];
        match tag {
            b'P' => parse(body, whole, def_at(defs, i), conn, &mut names, &mut f),
            b'B' => bind(body, whole, conn, &mut names, &mut f),
            b'D' => describe(body, whole, conn, &mut names, &mut f),
            b'C' => close(body, whole, &mut names, &mut f),
            b'E' => {
                let portal = cstr(body).map(|(p, _)| p).unwrap_or_default();
                match names.portals.get(portal) {
                    Some(def) => {
                        *names.copies_open += u32::from(def.info.copy_in);
                        f.f.ran.push(def.clone());
                    }
                    // The connection's unnamed portal (the BEGIN sluice sent ahead) is not
                    // the client's.
                    None if portal.is_empty() => {
                        refuse(&mut f, no_portal());
                        continue;
                    }
                    None => {}
                }
                f.keep(whole);
                f.f.exps.push_back(Exp::pass(Resp::Execute));
            }
            b'S' => {
                f.keep(whole);
                f.f.exps.push_back(Exp::pass(Resp::Sync));
            }
            b'Q' | b'F' => {
                if tag == b'Q' {
                    // A simple query destroys the unnamed statement and portal, on the
                    // server and so for the client.
                    forget_unnamed(&mut names);
                }
                if let Some(def) = def_at(defs, i) {
                    f.f.ran.push(def.clone());
                }
                f.keep(whole);
                f.f.exps.push_back(Exp::pass(Resp::Query));
            }
            // The end of a COPY FROM STDIN an Execute forwarded before it started (a CopyDone
            // or CopyFail without one is dropped by the server, and stays out of the count).
            b'c' | b'f' => {
                f.keep(whole);
                if *names.copies_open > 0 {
                    *names.copies_open -= 1;
                    f.f.exps.copy_ends += 1;
                }
            }
            // Flush, Terminate, and anything else go as they are, answering nothing.
            _ => f.keep(whole),
        }
    }
    f.finish()
}

/// A statement the server surely does not have: describing it fails, which is how sluice
/// makes the server skip the rest of a batch where PostgreSQL itself would fail.
const ABSENT_STATEMENT: &[u8] = b"sluice \x01absent";

fn parse(
    body: &[u8],
    whole: &[u8],
    def: Option<&Arc<StmtDef>>,
    conn: &mut PgConn,
    names: &mut Names<'_>,
    f: &mut Build<'_>,
) {
    let (Some((name, _)), Some(def)) = (cstr(body), def.cloned()) else {
        // Malformed: the server says so.
        f.keep(whole);
        f.f.exps.push_back(Exp::pass(Resp::Parse));
        return;
    };
    let ends_transaction = def.info.commits_block() || def.info.rolls_back || def.info.to_savepoint;
    if names.txn_failed && !ends_transaction {
        // In a failed transaction the server refuses it (25P02), as directly; nothing is
        // registered. (A COMMIT, ROLLBACK or ROLLBACK TO it parses, and they are the
        // session's as any other.)
        f.keep(whole);
        f.f.exps.push_back(Exp::pass(Resp::Parse));
        return;
    }
    if let Err(over) = &def.charge {
        refuse(f, crate::backend::statements::over_budget(over));
        return;
    }
    if name.is_empty() {
        // The unnamed statement stays unnamed on the server (it lives until the next Parse,
        // which drops it first, whether it succeeds or not): what follows in this unit binds
        // this one.
        f.keep(whole);
        f.f.exps.push_back(Exp::pass(Resp::Parse));
        // Analysed now (see below).
        def.result_confirmed();
        *names.unnamed = Some(def);
        *names.conn_has_unnamed = true;
        return;
    }
    let refusal = if is_taken(name, names, f) {
        // PostgreSQL refuses to parse over an existing name (Close it first).
        Some((
            "42P05",
            format!(
                "prepared statement \"{}\" already exists",
                String::from_utf8_lossy(name)
            ),
        ))
    } else if names.statements.len() + f.f.exps.iter().filter(|e| e.register.is_some()).count()
        >= STATEMENTS_PER_SESSION
    {
        Some(("54000", super::route::too_many_statements()))
    } else {
        None
    };
    if let Some(error) = refusal {
        refuse(f, error);
        return;
    }
    let register = Some(Box::new(Register {
        client_name: name.into(),
        def: def.clone(),
        provisional: false,
    }));
    // A new statement has a name of its own (see `backend::statements`): the server analyses
    // it now, as it would a direct client's Parse. (Were that name held, by a hash
    // collision, the copy there is closed and prepared afresh.)
    let (key, evict) = match conn.statements.ensure(&def) {
        (key, Ensure::Held) => (key, Some((key, Cached::of(&def)))),
        (key, Ensure::Prepare { evict }) => (key, evict),
    };
    close_on_server(evict, f);
    def.parse_message(key, f.out());
    // Its result is what the server's analysis now finds: a change that came to light since
    // sluice read the Parse (it may have waited for this connection) is one the server sees.
    def.result_confirmed();
    let mut e = Exp::pass(Resp::Parse);
    e.register = register;
    e.shared = Shared::Prepares(key);
    f.f.exps.push_back(e);
    learn_types(&def, key, f);
}

/// After the first analysis of `def` on a server (prepared under `key`, a name of its own):
/// a Describe of it, swallowed, whose ParameterDescription gives the parameter types that
/// analysis fixed (see `backend::statements`).
fn learn_types(def: &Arc<StmtDef>, key: u64, f: &mut Build<'_>) {
    if def.is_resolved() {
        return;
    }
    put(f.out(), b'D', &[b"S", &server_name(key), b"\0"]);
    let mut e = Exp::swallow(Resp::DescribeStatement);
    e.shared = Shared::Learns(def.clone());
    f.f.exps.push_back(e);
}

/// The server is made to fail in place of a message sluice refuses, so that it skips the
/// rest of the batch as PostgreSQL would, and the client gets `error` in its place.
fn refuse(f: &mut Build<'_>, error: (&'static str, String)) {
    refuse_with(f, (error.0.into(), error.1, Vec::new()));
}

/// As [`refuse`], the error with fields after its message (where PostgreSQL raised it).
fn refuse_with(f: &mut Build<'_>, error: Replacement) {
    put(f.out(), b'D', &[b"S", ABSENT_STATEMENT, b"\0"]);
    let mut e = Exp::pass(Resp::DescribeStatement);
    e.replace_error = Some(Box::new(error));
    f.f.exps.push_back(e);
}

/// A name in sluice's own namespace on server connections (`sluice_…`): a statement another
/// session shares there, never one a client named.
pub fn shared_name(name: &[u8]) -> bool {
    name.starts_with(b"sluice_")
}

/// The client's unnamed statement and portal are gone (a simple query destroys them).
fn forget_unnamed(names: &mut Names<'_>) {
    *names.unnamed = None;
    *names.conn_has_unnamed = false;
    names.portals.remove(b"");
}

/// The statement an earlier Parse of this unit names so (registered once it succeeds).
fn pending(name: &[u8], f: &Build<'_>) -> Option<Arc<StmtDef>> {
    f.f.exps.iter().rev().find_map(|e| {
        e.register
            .as_ref()
            .filter(|r| super::names::same(&r.client_name, name))
            .map(|r| r.def.clone())
    })
}

/// The session already has a statement of this name, or the unit parses one before.
fn is_taken(name: &[u8], names: &Names<'_>, f: &Build<'_>) -> bool {
    names.statements.contains_key(name) || pending(name, f).is_some()
}

/// A statement as a Bind or Describe names it on the connection.
struct OnServer {
    def: Arc<StmtDef>,
    /// Its key there (`None`: the unnamed statement).
    key: Option<u64>,
}

impl OnServer {
    /// What naming it does to the connection's shared statements.
    fn shared(&self) -> Shared {
        self.key.map_or(Shared::None, Shared::Uses)
    }

    /// The name to send.
    fn name(&self) -> smallvec::SmallVec<[u8; 24]> {
        match self.key {
            Some(key) => smallvec::SmallVec::from_slice(&server_name(key)),
            None => smallvec::SmallVec::new(),
        }
    }
}

/// Makes sure the statement a client names exists on the connection, and how it is named
/// there (`Ok(None)`: the client's name is unknown, sent unchanged so the server reports
/// it); or the error PostgreSQL gives for it (its result changed since the client parsed it).
fn ensure(
    name: &[u8],
    conn: &mut PgConn,
    n: &mut Names<'_>,
    f: &mut Build<'_>,
) -> Result<Option<OnServer>, Replacement> {
    if name.is_empty() {
        let Some(def) = n.unnamed.clone() else {
            return Ok(None);
        };
        if !*n.conn_has_unnamed {
            // (In a failed transaction the server refuses the Bind first: 25P02.)
            if def.result_changed() && !n.txn_failed {
                return Err(result_changed());
            }
            // Parsed on another connection: parse it here again, unnamed.
            let mut p = Vec::new();
            put(&mut p, b'P', &[b"\0", &def.sql, b"\0", &def.types]);
            f.out().extend_from_slice(&p);
            f.f.exps.push_back(Exp::swallow(Resp::Parse));
        }
        return Ok(Some(OnServer { def, key: None }));
    }
    let Some(def) = pending(name, f).or_else(|| n.statements.get(name).cloned()) else {
        return Ok(None);
    };
    // (In a failed transaction block the server refuses whatever sluice sends for it with
    // 25P02, as PostgreSQL refuses the Bind there before it looks at the statement.)
    if def.result_changed() && !n.txn_failed {
        // Refused as PostgreSQL refuses it, unless its client holds a description to check
        // it against: then prepared afresh and checked (PostgreSQL checks a prepared
        // statement's result at each use: a change rolled back or undone gives rows again).
        if !(n.check_shapes && def.described() != 0) {
            return Err(result_changed());
        }
        conn.statements.mark_stale_copies(&def);
    }
    let (key, ensure) = conn.statements.ensure(&def);
    if let Ensure::Prepare { evict } = ensure {
        if n.check_shapes && def.described() != 0 {
            // Prepared and checked before the unit goes (the message naming it is the next
            // expectation).
            f.f.checks.push(super::shapes::Check {
                key,
                evict,
                def: def.clone(),
                exp: f.f.exps.len(),
            });
        } else {
            close_on_server(evict, f);
            def.parse_message(key, f.out());
            let mut e = Exp::swallow(Resp::Parse);
            e.shared = Shared::Prepares(key);
            f.f.exps.push_back(e);
            // (A statement whose Parse sluice answered itself: this is its first analysis.)
            learn_types(&def, key, f);
        }
    }
    Ok(Some(OnServer {
        def,
        key: Some(key),
    }))
}

/// PostgreSQL's error for a prepared statement whose result DDL changed since it was
/// prepared (`RevalidateCachedQuery`, with where it raises it): it stays until the statement
/// is prepared again.
pub(super) fn result_changed() -> Replacement {
    (
        "0A000".into(),
        "cached plan must not change result type".to_string(),
        crate::backend::epochs::result_changed_fields(),
    )
}

fn close_on_server(evict: Option<(u64, Cached)>, f: &mut Build<'_>) {
    if let Some((key, old)) = evict {
        put(f.out(), b'C', &[b"S", &server_name(key), b"\0"]);
        let mut e = Exp::swallow(Resp::Close);
        e.shared = Shared::Closes(key, Box::new(old));
        f.f.exps.push_back(e);
    }
}

fn bind(body: &[u8], whole: &[u8], conn: &mut PgConn, n: &mut Names<'_>, f: &mut Build<'_>) {
    let parsed = cstr(body).and_then(|(portal, rest)| Some((portal, cstr(rest)?)));
    let Some((portal, (stmt, rest))) = parsed else {
        f.keep(whole);
        f.f.exps.push_back(Exp::pass(Resp::Bind));
        return;
    };
    match ensure(stmt, conn, n, f) {
        Err(e) => refuse_with(f, e),
        // (The unnamed portal is always there to replace.)
        Ok(Some(_))
            if n.portals.len() >= PORTALS_PER_SESSION
                && !portal.is_empty()
                && !n.portals.contains_key(portal) =>
        {
            refuse(f, ("54000", too_many_portals()))
        }
        Ok(Some(on)) => {
            match on.key {
                // The unnamed statement has its name on the server too: the Bind goes as it
                // is, not copied (its parameters may be most of a large message).
                None => f.keep(whole),
                Some(_) => {
                    if rest.len() > COPY_UNCHARGED {
                        if let Err(over) = n.charge.grow(rest.len()) {
                            return refuse(f, copy_over_budget(&over, n.txn_failed));
                        }
                        f.f.copied += rest.len();
                    }
                    put(f.out(), b'B', &[portal, b"\0", &on.name(), b"\0", rest]);
                }
            }
            let mut e = Exp::pass(Resp::Bind);
            e.shared = on.shared();
            n.portals.insert(portal, on.def);
            f.f.exps.push_back(e);
        }
        // The connection's unnamed statement (if any) is not the client's, nor are the
        // statements other sessions share there.
        Ok(None) if stmt.is_empty() => refuse(f, no_unnamed()),
        Ok(None) if shared_name(stmt) => refuse(f, no_statement(stmt)),
        Ok(None) => {
            f.keep(whole);
            f.f.exps.push_back(Exp::pass(Resp::Bind));
        }
    }
}

fn describe(body: &[u8], whole: &[u8], conn: &mut PgConn, n: &mut Names<'_>, f: &mut Build<'_>) {
    let what = body.first().copied();
    let name = body.get(1..).and_then(cstr).map(|(s, _)| s);
    match (what, name) {
        (Some(b'S'), Some(stmt)) => {
            let mut e = Exp::pass(Resp::DescribeStatement);
            match ensure(stmt, conn, n, f) {
                Err(e) => return refuse_with(f, e),
                Ok(Some(on)) => {
                    put(f.out(), b'D', &[b"S", &on.name(), b"\0"]);
                    e.shared = match on.key {
                        Some(key) => Shared::Describes(key, on.def),
                        None => Shared::None,
                    };
                }
                Ok(None) if stmt.is_empty() => return refuse(f, no_unnamed()),
                Ok(None) if shared_name(stmt) => return refuse(f, no_statement(stmt)),
                Ok(None) => f.keep(whole),
            }
            f.f.exps.push_back(e);
        }
        (Some(b'P'), Some(b"")) if n.portals.get(b"").is_none() => refuse(f, no_portal()),
        (Some(b'P'), Some(portal)) => {
            f.keep(whole);
            let mut e = Exp::pass(Resp::DescribePortal);
            // Bound to a named statement of the session (not the unnamed one).
            let named = n.portals.get(portal).filter(|def| {
                def.hash != 0 && !n.unnamed.as_ref().is_some_and(|u| Arc::ptr_eq(u, def))
            });
            if let Some(def) = named {
                e.shared = Shared::DescribesPortal(def.clone());
            }
            f.f.exps.push_back(e);
        }
        _ => {
            f.keep(whole);
            f.f.exps.push_back(Exp::pass(Resp::DescribePortal));
        }
    }
}

fn close(body: &[u8], whole: &[u8], n: &mut Names<'_>, f: &mut Build<'_>) {
    let what = body.first().copied();
    let name = body.get(1..).and_then(cstr).map(|(s, _)| s);
    match (what, name) {
        (Some(b'S'), Some(stmt)) if !stmt.is_empty() => {
            // The statement stays on the server for other sessions; the client's name goes,
            // also one a Parse earlier in this batch is to register.
            n.statements.remove(stmt);
            if let Some(e) = f.f.exps.iter_mut().rev().find(|e| {
                e.register
                    .as_ref()
                    .is_some_and(|r| super::names::same(&r.client_name, stmt))
            }) {
                e.register = None;
            }
            f.leave_out();
            f.f.exps.push_back(Exp::synth(b'3'));
        }
        (Some(b'S'), Some(b"")) => {
            // The unnamed statement goes on the server too.
            *n.unnamed = None;
            *n.conn_has_unnamed = false;
            f.keep(whole);
            f.f.exps.push_back(Exp::pass(Resp::Close));
        }
        (Some(b'P'), Some(portal)) => {
            n.portals.remove(portal);
            f.keep(whole);
            f.f.exps.push_back(Exp::pass(Resp::Close));
        }
        _ => {
            f.keep(whole);
            f.f.exps.push_back(Exp::pass(Resp::Close));
        }
    }
}
