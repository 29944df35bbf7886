//! Statement classification for PostgreSQL: route, command, pins and unpins.

use super::cursor::Cursor;
use super::keywords::Kw;
use super::lexer::Token;
use super::walk::{create, query, walk_from};
use super::{PgCommand, PgScan, Pins, Unpins};
use crate::Route;

/// Scans a simple-Query string: one statement or several separated by `;`.
pub fn scan(sql: &[u8]) -> PgScan {
    let mut cur = Cursor::new(sql);
    let mut out = PgScan::default();
    let mut calls: Option<Vec<(usize, usize)>> = Some(Vec::new());
    while let Some(first) = cur.start_statement() {
        let mut st = statement(&mut cur, first);
        if st.route == Route::Write {
            match (&mut calls, st.user_calls.is_empty()) {
                (Some(c), false) => c.append(&mut st.user_calls),
                _ => calls = None,
            }
        }
        out.statements += 1;
        if out.statements == 1 {
            out.command = st.command;
            out.set = st.set;
        } else {
            out.set = None;
        }
        out.pins |= st.pins;
        out.unpins |= st.unpins;
        out.route = Some(match (out.route, st.route) {
            (Some(Route::Write), _) | (_, Route::Write) => Route::Write,
            _ => Route::Read,
        });
    }
    out.hint = cur.hint();
    out.user_calls = calls.filter(|c| !c.is_empty());
    out.digest = cur.digest();
    out
}

/// What one statement does.
pub(super) struct Stmt {
    pub(super) command: PgCommand,
    pub(super) route: Route,
    pub(super) pins: Pins,
    pub(super) unpins: Unpins,
    pub(super) set: Option<super::SetStmt>,
    /// A query that writes only by calling these functions sluice does not know.
    pub(super) user_calls: Vec<(usize, usize)>,
}

impl Stmt {
    pub(super) fn new(command: PgCommand, route: Route) -> Self {
        Stmt {
            command,
            route,
            pins: Pins::default(),
            unpins: Unpins::default(),
            set: None,
            user_calls: Vec::new(),
        }
    }
}

/// Where `SHOW` goes: a replica, but for the parameters that say whether the server is a
/// standby (`transaction_read_only`, `in_hot_standby`), which the primary answers as a direct
/// connection's server does. A client that checks it reached a writable server with them
/// (PgJDBC's `targetServerType=primary` runs `SHOW transaction_read_only`) would otherwise
/// take the endpoint for a standby.
fn show_route(cur: &mut Cursor<'_>) -> Route {
    let src = cur.src;
    let standby_says = cur.next().is_some_and(|t| {
        let name = t.text(src);
        t.kind == super::lexer::Kind::Word
            && (name.eq_ignore_ascii_case(b"transaction_read_only")
                || name.eq_ignore_ascii_case(b"in_hot_standby"))
    });
    match standby_says {
        true => Route::Write,
        false => Route::Read,
    }
}

/// Classifies one statement starting at `first`, consuming its tokens.
fn statement(cur: &mut Cursor<'_>, first: Token) -> Stmt {
    use super::commands::{begin, copy, explain, reset, session, set};
    use PgCommand as C;
    use Route::Write;
    if first.is_punct(b'(') {
        return query(cur, first);
    }
    let st = match first.kw {
        Kw::Select | Kw::Values | Kw::Table | Kw::With => return query(cur, first),
        Kw::Insert => Stmt::new(C::Insert, Write),
        Kw::Update => Stmt::new(C::Update, Write),
        Kw::Delete => Stmt::new(C::Delete, Write),
        Kw::Merge => Stmt::new(C::Merge, Write),
        Kw::Show => Stmt::new(C::Show, show_route(cur)),
        Kw::Explain => return explain(cur),
        Kw::Copy => return copy(cur),
        Kw::Begin | Kw::Start => return begin(cur, first.is(Kw::Start)),
        Kw::Commit | Kw::End | Kw::Rollback | Kw::Abort => {
            Stmt::new(transaction_end(cur, first.kw), Write)
        }
        Kw::Savepoint => Stmt::new(C::Savepoint, Write),
        Kw::Release => Stmt::new(C::Release, Write),
        Kw::Set => return set(cur),
        Kw::Reset => return reset(cur),
        Kw::Create => return create(cur),
        Kw::Alter
        | Kw::Drop
        | Kw::Truncate
        | Kw::Grant
        | Kw::Revoke
        | Kw::Comment
        | Kw::Security
        | Kw::Refresh
        | Kw::Import
        | Kw::Reassign => Stmt::new(C::Ddl, Write),
        Kw::Vacuum | Kw::Analyze | Kw::Analyse | Kw::Cluster | Kw::Reindex => {
            Stmt::new(C::Vacuum, Write)
        }
        _ => return session(cur, first),
    };
    walk_from(cur, first, st)
}

/// After `COMMIT`, `END`, `ROLLBACK` or `ABORT` (`first`): which command it is.
/// COMMIT/ROLLBACK PREPARED 'gid' (two-phase commit) does not end the session's transaction:
/// Other; `... AND CHAIN` ends it and opens the next at once. Anything PostgreSQL's grammar
/// does not have (`COMMIT foo`) is Other too: a proxy may answer a `Commit` or a `Rollback`
/// itself, and the client must get the server's syntax error instead.
fn transaction_end(cur: &mut Cursor<'_>, first: Kw) -> PgCommand {
    use PgCommand as C;
    let _ = cur.eat(Kw::Work) || cur.eat(Kw::Transaction);
    let commit = matches!(first, Kw::Commit | Kw::End);
    if cur.eat(Kw::Prepared) {
        return C::Other;
    }
    if !commit && cur.eat(Kw::To) {
        return C::RollbackToSavepoint;
    }
    let mut chain = false;
    if cur.eat(Kw::And) {
        chain = !cur.eat(Kw::No);
        if !cur.eat(Kw::Chain) {
            return C::Other;
        }
    }
    match (cur.next().is_some(), commit, chain) {
        (true, ..) => C::Other,
        (false, true, false) => C::Commit,
        (false, false, false) => C::Rollback,
        (false, true, true) => C::CommitAndChain,
        (false, false, true) => C::RollbackAndChain,
    }
}

/// Classifies the statement that starts at the next token (after `EXPLAIN`'s options).
pub(super) fn inner_statement(cur: &mut Cursor<'_>) -> Option<Stmt> {
    let first = cur.next()?;
    Some(statement(cur, first))
}
