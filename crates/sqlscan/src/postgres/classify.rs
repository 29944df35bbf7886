//! Statement classification for PostgreSQL: route, command, pins and unpins.

use super::digest::Batched;
use super::lexer::{Kind, Lexer, Token};
use super::walk::{create, dml_command, query, walk_from};
use super::{Boundary, PgCommand, PgScan, Pins, Unpins};
use crate::Route;

/// Scans a simple-Query string: one statement or several separated by `;`.
pub fn scan(sql: &[u8]) -> PgScan {
    let mut cur = Cursor {
        lx: Lexer::new(sql).comments(true),
        src: sql,
        peeked: None,
        bound: Boundary::default(),
        ended: true,
        eof: false,
        hint: None,
        digest: Batched::new(),
    };
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
    out.hint = cur.hint;
    out.user_calls = calls.filter(|c| !c.is_empty());
    out.digest = cur.digest.finish(sql);
    out
}

/// Tokens of one statement at a time, with one token of look-ahead; comments are read for a
/// routing hint on the way, and every token but comments goes to the digest once.
pub(super) struct Cursor<'a> {
    lx: Lexer<'a>,
    pub(super) src: &'a [u8],
    peeked: Option<Token>,
    bound: Boundary,
    /// The current statement's `;` (or the end of input) was reached.
    ended: bool,
    /// The end of input was reached.
    eof: bool,
    hint: Option<(usize, usize)>,
    /// The whole text's digest: `fetch` is the only reader of `lx`, so each token passes here
    /// once, in order (those of skipped statement tails and the `;`s that end statements too).
    digest: Batched,
}

impl Cursor<'_> {
    fn fetch(&mut self) -> Option<Token> {
        if self.ended {
            return None;
        }
        loop {
            let Some(t) = self.lx.next() else {
                self.eof = true;
                self.ended = true;
                return None;
            };
            if t.kind == Kind::Comment {
                if self.hint.is_none() {
                    self.hint = find_hint(self.src, &t);
                }
                continue;
            }
            self.digest.push(self.src, t);
            if self.bound.feed(self.src, &t) {
                self.ended = true;
                return None;
            }
            return Some(t);
        }
    }

    /// The next token of the current statement.
    pub(super) fn next(&mut self) -> Option<Token> {
        match self.peeked.take() {
            Some(t) => Some(t),
            None => self.fetch(),
        }
    }

    /// The next token of the current statement, left unconsumed.
    pub(super) fn peek(&mut self) -> Option<Token> {
        if self.peeked.is_none() {
            self.peeked = self.fetch();
        }
        self.peeked
    }

    pub(super) fn peek_word(&mut self, kw: &str) -> bool {
        let src = self.src;
        self.peek().is_some_and(|t| t.is_word(src, kw))
    }

    pub(super) fn peek_punct(&mut self, c: u8) -> bool {
        self.peek().is_some_and(|t| t.is_punct(c))
    }

    /// Consumes the next token if it is the word `kw`.
    pub(super) fn eat(&mut self, kw: &str) -> bool {
        let hit = self.peek_word(kw);
        if hit {
            self.peeked = None;
        }
        hit
    }

    /// Skips what is left of the current statement, then returns the first token of the next
    /// non-empty one, or `None` at the end of input.
    fn start_statement(&mut self) -> Option<Token> {
        loop {
            while self.next().is_some() {}
            if self.eof {
                return None;
            }
            self.ended = false;
            self.bound = Boundary::default();
            if let Some(t) = self.next() {
                return Some(t);
            }
        }
    }
}

/// Finds `sluice:<target>` in a comment; returns the target's span in `src`.
fn find_hint(src: &[u8], comment: &Token) -> Option<(usize, usize)> {
    const MARK: &[u8] = b"sluice:";
    let text = comment.text(src);
    let at = text
        .windows(MARK.len())
        .position(|w| w.eq_ignore_ascii_case(MARK))?;
    let start = comment.start + at + MARK.len();
    let len = src[start..comment.end]
        .iter()
        .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        .count();
    (len > 0).then_some((start, start + len))
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

/// Classifies one statement starting at `first`, consuming its tokens.
fn statement(cur: &mut Cursor<'_>, first: Token) -> Stmt {
    use PgCommand as C;
    use Route::Write;
    let src = cur.src;
    if first.is_punct(b'(') {
        return query(cur, first);
    }
    let w = |kw: &str| first.is_word(src, kw);
    if w("SELECT") || w("VALUES") || w("TABLE") || w("WITH") {
        return query(cur, first);
    }
    let st = if let Some(cmd) = dml_command(src, &first) {
        Stmt::new(cmd, Write)
    } else if w("SHOW") {
        Stmt::new(C::Show, Route::Read)
    } else if w("EXPLAIN") {
        return super::commands::explain(cur);
    } else if w("COPY") {
        return super::commands::copy(cur);
    } else if w("BEGIN") || w("START") {
        return super::commands::begin(cur, w("START"));
    } else if w("COMMIT") || w("END") || w("ROLLBACK") || w("ABORT") {
        // COMMIT/ROLLBACK PREPARED 'gid' (two-phase commit) and ... AND CHAIN, which opens
        // the next transaction at once, do not end the session's transaction: Other.
        let commit = w("COMMIT") || w("END");
        let _ = cur.eat("WORK") || cur.eat("TRANSACTION");
        let cmd = if cur.eat("PREPARED") || (cur.eat("AND") && cur.eat("CHAIN")) {
            C::Other
        } else if commit {
            C::Commit
        } else if cur.eat("TO") {
            C::RollbackToSavepoint
        } else {
            C::Rollback
        };
        Stmt::new(cmd, Write)
    } else if w("SAVEPOINT") {
        Stmt::new(C::Savepoint, Write)
    } else if w("RELEASE") {
        Stmt::new(C::Release, Write)
    } else if w("SET") {
        return super::commands::set(cur);
    } else if w("RESET") {
        return super::commands::reset(cur);
    } else if w("CREATE") {
        return create(cur);
    } else if w("ALTER")
        || w("DROP")
        || w("TRUNCATE")
        || w("GRANT")
        || w("REVOKE")
        || w("COMMENT")
        || w("SECURITY")
        || w("REFRESH")
        || w("IMPORT")
        || w("REASSIGN")
    {
        Stmt::new(C::Ddl, Write)
    } else if w("VACUUM") || w("ANALYZE") || w("ANALYSE") || w("CLUSTER") || w("REINDEX") {
        Stmt::new(C::Vacuum, Write)
    } else {
        return super::commands::session(cur, first);
    };
    walk_from(cur, first, st)
}

/// Classifies the statement that starts at the next token (after `EXPLAIN`'s options).
pub(super) fn inner_statement(cur: &mut Cursor<'_>) -> Option<Stmt> {
    let first = cur.next()?;
    Some(statement(cur, first))
}
