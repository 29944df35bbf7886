//! One MySQL statement walked token by token: its command, where it may run, and the session
//! state it touches (the walk [`super::scan_with`] runs for each statement of a text).

use super::{Command, Effects, Kill, Route};
use crate::functions::{classify_call, Call};
use crate::lexer::{Kind, Lexer, Token};

mod set;
use set::set_statement;

pub(super) struct Cursor<'a> {
    pub(super) lx: Lexer<'a>,
    pub(super) src: &'a [u8],
    pub(super) peeked: Option<Option<Token>>,
    pub(super) hint: Option<(usize, usize)>,
}

impl Cursor<'_> {
    fn fetch(&mut self) -> Option<Token> {
        let t = self.lx.next();
        if self.hint.is_none() {
            if let Some(c) = self.lx.take_comment() {
                self.hint = find_hint(self.src, c);
            }
        }
        t
    }
    pub(super) fn next(&mut self) -> Option<Token> {
        match self.peeked.take() {
            Some(t) => t,
            None => self.fetch(),
        }
    }
    fn peek(&mut self) -> Option<Token> {
        if self.peeked.is_none() {
            let t = self.fetch();
            self.peeked = Some(t);
        }
        self.peeked.unwrap_or(None)
    }
    fn peek_word(&mut self, kw: &str) -> bool {
        let src = self.src;
        self.peek().is_some_and(|t| t.is_word(src, kw))
    }
}

/// Finds `sluice:<target>` inside a comment body; returns the target's span in `src`.
fn find_hint(src: &[u8], comment: &[u8]) -> Option<(usize, usize)> {
    const MARK: &[u8] = b"sluice:";
    let base = comment.as_ptr() as usize - src.as_ptr() as usize;
    let at = crate::find_ignore_case(comment, MARK)?;
    let start = at + MARK.len();
    let len = comment[start..]
        .iter()
        .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        .count();
    (len > 0).then(|| (base + start, base + start + len))
}

pub(super) struct Stmt {
    pub(super) command: Command,
    pub(super) route: Route,
    pub(super) effects: Effects,
    pub(super) kill: Option<Kill>,
}

/// Token-walk state inside one statement.
#[derive(Default)]
struct Walk {
    depth: i32,
    prev: Option<Token>,
    /// The statement is a SELECT-like read candidate (locking clauses and INTO matter).
    select_like: bool,
    /// A read candidate: unknown function calls make it a write.
    read_candidate: bool,
    /// Something in the text makes a read candidate a write.
    write: bool,
    /// After `INTO` in a SELECT: the following variables are assigned.
    into_list: bool,
    /// `KILL QUERY`.
    kill_query: bool,
    tokens: u32,
}

fn word_is(src: &[u8], t: &Token, kws: &[&str]) -> bool {
    t.kind == Kind::Word
        && kws
            .iter()
            .any(|k| t.text(src).eq_ignore_ascii_case(k.as_bytes()))
}

/// Classifies one statement starting at `first`, consuming tokens up to its `;`.
pub(super) fn statement(cur: &mut Cursor<'_>, first: Token) -> Stmt {
    let src = cur.src;
    if first.is_word(src, "SET") {
        return set_statement(cur);
    }
    let mut st = Stmt {
        command: Command::Other,
        route: Route::Write,
        effects: Effects::default(),
        kill: None,
    };
    let mut walk = Walk {
        prev: Some(first),
        tokens: 1,
        ..Walk::default()
    };
    head(cur, first, &mut st, &mut walk);
    if first.is_punct(b'(') {
        walk.depth = 1;
    }
    while let Some(t) = cur.next() {
        if t.is_punct(b';') {
            break;
        }
        body_token(cur, &mut st, &mut walk, t);
    }
    if walk.read_candidate {
        let write = walk.write
            || st.effects.intersects(
                Effects::USER_VAR_WRITE
                    | Effects::LOCK_FUNCTION
                    | Effects::LAST_INSERT_ID_SET
                    | Effects::UNKNOWN_FUNCTION,
            );
        st.route = if write { Route::Write } else { Route::Read };
    }
    st
}

/// Sets the command and the initial effects from the statement's leading word(s).
fn head(cur: &mut Cursor<'_>, first: Token, st: &mut Stmt, walk: &mut Walk) {
    let src = cur.src;
    let w = |kw: &str| first.is_word(src, kw);
    if first.is_punct(b'(') || w("SELECT") || w("VALUES") || w("TABLE") || w("WITH") {
        st.command = Command::Select;
        walk.read_candidate = true;
        walk.select_like = true;
    } else if w("INSERT") {
        st.command = Command::Insert;
    } else if w("UPDATE") {
        st.command = Command::Update;
    } else if w("DELETE") {
        st.command = Command::Delete;
    } else if w("REPLACE") {
        st.command = Command::Replace;
    } else if w("SHOW") {
        st.command = Command::Show;
        walk.read_candidate = show_is_read(cur, &mut st.effects);
    } else if w("DESCRIBE") || w("DESC") || w("EXPLAIN") {
        st.command = Command::Explain;
        walk.read_candidate = explain_is_read(cur);
        walk.select_like = walk.read_candidate;
    } else if w("HELP") {
        walk.read_candidate = true;
    } else if w("USE") {
        st.command = Command::Use;
        st.effects |= Effects::USE_DB;
        walk.read_candidate = true;
    } else if w("BEGIN") {
        st.command = Command::Begin;
        // `BEGIN [WORK]`, but not `BEGIN NOT ATOMIC` (a compound statement).
        if !cur.peek_word("NOT") {
            st.effects |= Effects::TRX_BEGIN;
        }
    } else if w("START") {
        if cur.peek_word("TRANSACTION") {
            st.command = Command::Begin;
            st.effects |= Effects::TRX_BEGIN;
        }
    } else if w("COMMIT") {
        st.command = Command::Commit;
        st.effects |= Effects::TRX_END;
    } else if w("ROLLBACK") {
        st.command = Command::Rollback;
        st.effects |= Effects::TRX_END;
    } else if w("CALL") {
        st.command = Command::Call;
        st.effects |= Effects::PROCEDURE_CALL;
    } else if w("LOAD") {
        st.command = Command::Load;
    } else if w("CREATE") || w("ALTER") || w("TRUNCATE") || w("RENAME") {
        st.command = Command::Ddl;
        if w("CREATE") {
            // CREATE [OR REPLACE] TEMPORARY TABLE
            if cur.peek_word("OR") {
                cur.next();
                cur.next();
                walk.tokens += 2;
            }
            if cur.peek_word("TEMPORARY") {
                st.effects |= Effects::TEMP_TABLE_CREATE;
            }
        }
    } else if w("DROP") {
        st.command = Command::Ddl;
        if cur.peek_word("TEMPORARY") || cur.peek_word("TABLE") || cur.peek_word("TABLES") {
            st.effects |= Effects::TABLE_DROP;
        } else if cur.peek_word("PREPARE") {
            st.command = Command::Other;
            st.effects |= Effects::TEXT_DEALLOCATE;
        }
    } else if w("LOCK") {
        if cur.peek_word("TABLES") || cur.peek_word("TABLE") {
            st.effects |= Effects::LOCK_TABLES;
        }
    } else if w("UNLOCK") {
        st.effects |= Effects::UNLOCK_TABLES;
    } else if w("PREPARE") {
        st.effects |= Effects::TEXT_PREPARE;
    } else if w("EXECUTE") {
        st.effects |= Effects::TEXT_EXECUTE;
    } else if w("DEALLOCATE") {
        st.effects |= Effects::TEXT_DEALLOCATE;
    } else if w("XA") {
        if cur.peek_word("START") || cur.peek_word("BEGIN") {
            st.effects |= Effects::XA_START;
        } else if cur.peek_word("COMMIT") || cur.peek_word("ROLLBACK") {
            st.effects |= Effects::XA_END;
        }
    } else if w("HANDLER") {
        st.effects |= Effects::UNTRACKED;
    } else if w("GET") {
        if cur.peek_word("DIAGNOSTICS") || cur.peek_word("CURRENT") {
            st.effects |= Effects::PREV_STATEMENT;
        }
    } else if w("KILL") {
        st.command = Command::Kill;
    }
}

/// Effects of one token in the body of a statement (also used for SET expressions).
fn body_token(cur: &mut Cursor<'_>, st: &mut Stmt, walk: &mut Walk, t: Token) {
    let src = cur.src;
    walk.tokens += 1;
    match t.kind {
        Kind::Punct(b'(') => walk.depth += 1,
        Kind::Punct(b')') => walk.depth -= 1,
        Kind::Punct(b',') => {}
        Kind::UserVar => {
            let assigned = walk.into_list || cur.peek().is_some_and(|n| n.kind == Kind::Assign);
            st.effects |= if assigned {
                Effects::USER_VAR_WRITE
            } else {
                Effects::USER_VAR_READ
            };
        }
        Kind::SysVar => sysvar_read(src, st, &t),
        Kind::Word | Kind::QuotedIdent if cur.peek().is_some_and(|n| n.is_punct(b'(')) => {
            call(cur, st, walk, t);
        }
        Kind::Word => keyword(cur, st, walk, t),
        Kind::Number if st.command == Command::Kill && st.kill.is_none() => {
            if let Some(id) = std::str::from_utf8(t.text(src))
                .ok()
                .and_then(|s| s.parse().ok())
            {
                st.kill = Some(Kill {
                    query_only: walk.kill_query,
                    id,
                });
            }
        }
        _ => {}
    }
    if walk.into_list
        && !matches!(t.kind, Kind::UserVar | Kind::Punct(b','))
        && !t.is_word(src, "INTO")
    {
        walk.into_list = false;
    }
    walk.prev = Some(t);
}

fn sysvar_read(src: &[u8], st: &mut Stmt, t: &Token) {
    let name = &t.text(src)[2..];
    let bare = name.rsplit(|&b| b == b'.').next().unwrap_or(name);
    if bare.eq_ignore_ascii_case(b"warning_count") || bare.eq_ignore_ascii_case(b"error_count") {
        st.effects |= Effects::PREV_STATEMENT;
    } else if bare.eq_ignore_ascii_case(b"identity") || bare.eq_ignore_ascii_case(b"last_insert_id")
    {
        st.effects |= Effects::LAST_INSERT_ID_READ;
    } else if bare.eq_ignore_ascii_case(b"pseudo_thread_id") {
        st.effects |= Effects::THREAD_ID_READ;
    }
}

/// A name followed by `(`.
fn call(cur: &mut Cursor<'_>, st: &mut Stmt, walk: &mut Walk, t: Token) {
    let qualified = walk.prev.is_some_and(|p| p.is_punct(b'.'));
    let kind = if t.kind == Kind::QuotedIdent || qualified {
        Call::Unknown
    } else {
        classify_call(t.text(cur.src))
    };
    match kind {
        Call::Safe => {}
        Call::Lock => st.effects |= Effects::LOCK_FUNCTION,
        Call::LockHolder => st.effects |= Effects::LOCK_FUNCTION | Effects::THREAD_ID_READ,
        Call::Sequence => walk.write = true,
        Call::PrevStatement => st.effects |= Effects::PREV_STATEMENT,
        Call::ConnectionId => st.effects |= Effects::CONNECTION_ID,
        Call::LastInsertId => {
            // Look past the '(' for an argument.
            let paren = cur.next();
            walk.prev = paren;
            walk.depth += 1;
            walk.tokens += 1;
            if cur.peek().is_some_and(|n| n.is_punct(b')')) {
                st.effects |= Effects::LAST_INSERT_ID_READ;
            } else {
                st.effects |= Effects::LAST_INSERT_ID_SET;
            }
        }
        // `INSERT INTO t (cols)`, `CREATE TABLE t (...)` are not calls: only read candidates,
        // where a name before `(` really is a call, care about unknown names.
        Call::Unknown if walk.read_candidate => st.effects |= Effects::UNKNOWN_FUNCTION,
        Call::Unknown => {}
    }
}

/// Keywords inside a statement body that change its class or effects.
fn keyword(cur: &mut Cursor<'_>, st: &mut Stmt, walk: &mut Walk, t: Token) {
    let src = cur.src;
    if t.kind != Kind::Word {
        return;
    }
    let is = |kw: &str| t.is_word(src, kw);
    let prev_is = |kw: &str| walk.prev.is_some_and(|p| p.is_word(src, kw));
    match st.command {
        Command::Kill => {
            if is("QUERY") {
                walk.kill_query = true;
            }
            return;
        }
        Command::Load if is("LOCAL") => st.effects |= Effects::LOAD_LOCAL,
        Command::Rollback if is("TO") => {
            // ROLLBACK [WORK] TO SAVEPOINT does not end the transaction.
            st.command = Command::Other;
            st.effects = Effects(st.effects.0 & !Effects::TRX_END.0);
        }
        Command::Commit | Command::Rollback if is("CHAIN") && !prev_is("NO") => {
            // COMMIT AND CHAIN opens the next transaction at once.
            st.effects = Effects(st.effects.0 & !Effects::TRX_END.0);
        }
        Command::Other if is("WITH") && cur.peek_word("READ") => {
            st.effects |= Effects::LOCK_TABLES; // FLUSH TABLES ... WITH READ LOCK
        }
        _ => {}
    }
    if is("SQL_CALC_FOUND_ROWS") {
        st.effects |= Effects::CALC_FOUND_ROWS;
    } else if (is("NEXT") || is("PREVIOUS")) && cur.peek_word("VALUE") {
        walk.write = true; // sequences
    } else if walk.select_like {
        if is("INTO") {
            // INTO OUTFILE/DUMPFILE writes a file on the server; INTO @var assigns.
            walk.write = true;
            walk.into_list = true;
        } else if (is("FOR") && (cur.peek_word("UPDATE") || cur.peek_word("SHARE")))
            || (is("LOCK") && cur.peek_word("IN"))
        {
            walk.write = true;
        } else if st.command == Command::Select
            && walk.depth == 0
            && (is("INSERT") || is("UPDATE") || is("DELETE") || is("REPLACE"))
        {
            walk.write = true; // WITH ... UPDATE/DELETE
        }
    }
}

/// `SHOW ...`: server-specific variants go to the writer; the rest can be read anywhere.
fn show_is_read(cur: &mut Cursor<'_>, effects: &mut Effects) -> bool {
    let src = cur.src;
    let Some(t) = cur.peek() else { return true };
    if word_is(src, &t, &["WARNINGS", "ERRORS"]) {
        *effects |= Effects::PREV_STATEMENT;
        return true;
    }
    if t.is_word(src, "COUNT") {
        // SHOW COUNT(*) WARNINGS / ERRORS
        *effects |= Effects::PREV_STATEMENT;
        return true;
    }
    !word_is(
        src,
        &t,
        &[
            "MASTER",
            "BINARY",
            "BINLOG",
            "SLAVE",
            "REPLICA",
            "ALL",
            "PROCESSLIST",
            "FULL",
            "GLOBAL",
            "ENGINE",
            "OPEN",
            "EXPLAIN",
            "ANALYZE",
            "PROFILE",
            "PROFILES",
        ],
    )
}

/// `EXPLAIN`/`DESCRIBE`: reads for SELECTs and table descriptions, writes otherwise.
fn explain_is_read(cur: &mut Cursor<'_>) -> bool {
    let src = cur.src;
    loop {
        let Some(t) = cur.peek() else { return true };
        if word_is(src, &t, &["EXTENDED", "PARTITIONS"]) {
            cur.next();
            continue;
        }
        if t.is_word(src, "FORMAT") {
            cur.next();
            cur.next(); // '='
            cur.next(); // JSON / TRADITIONAL
            continue;
        }
        if word_is(
            src,
            &t,
            &["INSERT", "UPDATE", "DELETE", "REPLACE", "FOR", "ANALYZE"],
        ) {
            return false;
        }
        return true;
    }
}
