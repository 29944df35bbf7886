//! The token walk inside a statement: which names are calls and what they call, locking
//! clauses, `SELECT ... INTO`, data-modifying CTEs, temporary objects.

use super::classify::{Cursor, Stmt};
use super::functions::{classify_call, Call, Spelling};
use super::lexer::{Kind, Token};
use super::{PgCommand, Pins, Unpins};
use crate::Route;

/// The keywords the walk reacts to, recognised once per word.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Kw {
    /// Not one of them (also every non-word token).
    #[default]
    Other,
    As,
    By,
    Columns,
    Cube,
    Delete,
    Filter,
    For,
    Group,
    Grouping,
    Insert,
    Into,
    Materialized,
    Merge,
    Not,
    Order,
    Over,
    Partition,
    Passing,
    Precision,
    Recursive,
    Repeatable,
    Rollup,
    Select,
    Sets,
    Table,
    Tablesample,
    Update,
    Values,
    Varying,
    With,
}

/// Recognises a keyword by length and first letter, then one comparison.
fn kw(src: &[u8], t: &Token) -> Kw {
    if t.kind != Kind::Word {
        return Kw::Other;
    }
    let text = t.text(src);
    let up = |i: usize| text.get(i).map_or(0, u8::to_ascii_uppercase);
    let (word, k): (&[u8], Kw) = match (text.len(), up(0)) {
        (2, b'A') => (b"AS", Kw::As),
        (2, b'B') => (b"BY", Kw::By),
        (3, b'F') => (b"FOR", Kw::For),
        (3, b'N') => (b"NOT", Kw::Not),
        (4, b'C') => (b"CUBE", Kw::Cube),
        (4, b'I') => (b"INTO", Kw::Into),
        (4, b'O') => (b"OVER", Kw::Over),
        (4, b'S') => (b"SETS", Kw::Sets),
        (4, b'W') => (b"WITH", Kw::With),
        (5, b'G') => (b"GROUP", Kw::Group),
        (5, b'M') => (b"MERGE", Kw::Merge),
        (5, b'O') => (b"ORDER", Kw::Order),
        (5, b'T') => (b"TABLE", Kw::Table),
        (6, b'D') => (b"DELETE", Kw::Delete),
        (6, b'F') => (b"FILTER", Kw::Filter),
        (6, b'I') => (b"INSERT", Kw::Insert),
        (6, b'R') => (b"ROLLUP", Kw::Rollup),
        (6, b'S') => (b"SELECT", Kw::Select),
        (6, b'U') => (b"UPDATE", Kw::Update),
        (6, b'V') => (b"VALUES", Kw::Values),
        (7, b'C') => (b"COLUMNS", Kw::Columns),
        (7, b'P') => (b"PASSING", Kw::Passing),
        (7, b'V') => (b"VARYING", Kw::Varying),
        (8, b'G') => (b"GROUPING", Kw::Grouping),
        (9, b'P') if up(1) == b'A' => (b"PARTITION", Kw::Partition),
        (9, b'P') => (b"PRECISION", Kw::Precision),
        (9, b'R') => (b"RECURSIVE", Kw::Recursive),
        (10, b'R') => (b"REPEATABLE", Kw::Repeatable),
        (11, b'T') => (b"TABLESAMPLE", Kw::Tablesample),
        (12, b'M') => (b"MATERIALIZED", Kw::Materialized),
        _ => return Kw::Other,
    };
    if text.eq_ignore_ascii_case(word) {
        k
    } else {
        Kw::Other
    }
}

/// How a called name is qualified.
#[derive(Clone, Copy)]
enum Qualifier {
    None,
    /// `pg_catalog.name`.
    Catalog,
    /// Any other schema: a user function.
    Other,
}

/// A name that may be a call if the next token is `(`, with what came before it.
#[derive(Clone, Copy)]
struct Callee {
    name: Token,
    qualifier: Qualifier,
    kw: Kw,
    /// The kind of the token before the name.
    before: Option<Kind>,
    before_kw: Kw,
}

/// Token-walk state inside one statement: calls, locking clauses, writable CTEs.
#[derive(Default)]
struct Walk {
    /// A reason to write other than calling a function sluice does not know.
    other_write: bool,
    /// Functions sluice does not know that the statement calls (name spans).
    user_calls: Vec<(usize, usize)>,
    depth: u32,
    /// The previous token, if a `(` after it makes a call.
    callee: Option<Callee>,
    /// The previous token's kind.
    prev: Option<Kind>,
    prev_kw: Kw,
    /// The previous token is the name `pg_catalog`.
    prev_catalog: bool,
    /// The previous token is a `.` after `pg_catalog`.
    catalog_dot: bool,
    /// The previous token leaves a type name (or an alias) to come: `::`, `AS`, `::schema.`.
    type_ctx: bool,
    /// A query: `FOR UPDATE`, `INTO` and data-modifying words make it a write.
    select_like: bool,
    /// In a `WITH` list, before the main statement.
    with_header: bool,
    /// After `GROUP BY`: `ROLLUP(` and `CUBE(` are grouping sets.
    grouping: bool,
    /// After `JSON_TABLE(` and its kin: `COLUMNS (`, `PASSING (` are clauses.
    table_fn: bool,
    /// A `CREATE`: a `pg_temp.` name makes a temporary object.
    create: bool,
    /// The query can write, lock or needs the primary.
    write: bool,
    /// The main statement of a `WITH` query.
    main: Option<PgCommand>,
    pins: Pins,
    unpins: Unpins,
}

impl Walk {
    fn query() -> Self {
        Walk {
            select_like: true,
            ..Walk::default()
        }
    }

    fn token(&mut self, cur: &mut Cursor<'_>, t: Token) {
        let src = cur.src;
        let k = kw(src, &t);
        let callee = self.callee.take();
        let mut type_ctx = false;
        match t.kind {
            Kind::Punct(b'(') => {
                if let Some(c) = callee.filter(|c| !self.not_a_call(c)) {
                    self.call(src, c);
                } else if self.with_header && self.depth == 0 && self.prev_punct(b')') {
                    self.with_header = false; // WITH ... (SELECT ...)
                }
                self.depth += 1;
            }
            Kind::Punct(b')') => self.depth = self.depth.saturating_sub(1),
            Kind::Cast => type_ctx = true,
            Kind::Punct(b'.') => type_ctx = self.type_ctx,
            Kind::Word | Kind::QuotedIdent => {
                // A type name after `::` or `AS` (or an alias after `AS`), its qualified part,
                // and the second word of `character varying` / `double precision`.
                let after_dot = self.prev_punct(b'.');
                let in_type = self.type_ctx
                    && (self.prev_kw == Kw::As
                        || after_dot
                        || self.prev == Some(Kind::Cast)
                        || matches!(k, Kw::Varying | Kw::Precision));
                type_ctx = in_type || k == Kw::As;
                if k != Kw::Other {
                    self.keyword(cur, k);
                }
                // If a `(` follows, this name may be called.
                if !in_type {
                    let qualifier = if !after_dot {
                        Qualifier::None
                    } else if self.catalog_dot {
                        Qualifier::Catalog
                    } else {
                        Qualifier::Other
                    };
                    self.callee = Some(Callee {
                        name: t,
                        qualifier,
                        kw: k,
                        before: self.prev,
                        before_kw: self.prev_kw,
                    });
                }
                if self.create && is_name(src, &t, "pg_temp") && cur.peek_punct(b'.') {
                    self.pins |= Pins::TEMP_TABLE;
                }
            }
            _ => {}
        }
        self.type_ctx = type_ctx;
        self.catalog_dot = self.prev_catalog && t.is_punct(b'.');
        self.prev_catalog = matches!(t.end - t.start, 10 | 12) && is_name(src, &t, "pg_catalog");
        self.prev = Some(t.kind);
        self.prev_kw = k;
    }

    fn prev_punct(&self, c: u8) -> bool {
        self.prev == Some(Kind::Punct(c))
    }

    /// Keywords that change a query's class.
    fn keyword(&mut self, cur: &mut Cursor<'_>, k: Kw) {
        if k == Kw::Group && cur.peek_word("BY") {
            self.grouping = true;
        }
        if !self.select_like {
            return;
        }
        let dml = match k {
            Kw::For => {
                // FOR UPDATE, FOR NO KEY UPDATE, FOR SHARE, FOR KEY SHARE (not FOR READ ONLY).
                if cur.peek_word("UPDATE")
                    || cur.peek_word("SHARE")
                    || cur.peek_word("NO")
                    || cur.peek_word("KEY")
                {
                    self.set_write();
                }
                return;
            }
            Kw::Into => {
                if !matches!(self.prev_kw, Kw::Insert | Kw::Merge) {
                    // SELECT ... INTO creates a table.
                    self.set_write();
                    let src = cur.src;
                    if cur.peek_word("TEMP")
                        || cur.peek_word("TEMPORARY")
                        || cur.peek_word("LOCAL")
                        || cur.peek_word("GLOBAL")
                        || cur.peek().is_some_and(|n| is_name(src, &n, "pg_temp"))
                    {
                        self.pins |= Pins::TEMP_TABLE;
                    }
                }
                return;
            }
            Kw::Insert => PgCommand::Insert,
            Kw::Update => PgCommand::Update,
            Kw::Delete => PgCommand::Delete,
            Kw::Merge => PgCommand::Merge,
            Kw::Select | Kw::Values | Kw::Table => {
                if self.with_header && self.depth == 0 {
                    self.with_header = false;
                    self.main = Some(PgCommand::Select);
                }
                return;
            }
            _ => return,
        };
        if !self.prev_punct(b'.') {
            self.set_write(); // a writable CTE, or WITH ... INSERT
            if self.with_header && self.depth == 0 {
                self.with_header = false;
                self.main = Some(dml);
            }
        }
    }

    /// A name followed by `(` that is not a call: a CTE's or alias's column list, a
    /// TABLESAMPLE method, or an unreserved keyword in the one place it takes a parenthesis.
    fn not_a_call(&self, c: &Callee) -> bool {
        let (k, p) = (c.kw, c.before_kw);
        if matches!(p, Kw::With | Kw::Recursive | Kw::Tablesample) {
            return true;
        }
        if self.with_header && self.depth == 0 && c.before == Some(Kind::Punct(b',')) {
            return true;
        }
        (c.before == Some(Kind::Punct(b')')) && matches!(k, Kw::Over | Kw::Filter | Kw::Repeatable))
            || (p == Kw::Not && k == Kw::Materialized)
            || (p == Kw::Grouping && k == Kw::Sets)
            || (matches!(p, Kw::Order | Kw::Group | Kw::Partition) && k == Kw::By)
            || (self.grouping && matches!(k, Kw::Rollup | Kw::Cube))
            || (self.table_fn && matches!(k, Kw::Columns | Kw::Passing))
    }

    /// Something in the statement writes or locks.
    fn set_write(&mut self) {
        self.write = true;
        self.other_write = true;
    }

    /// A call of a function sluice does not know: it may write.
    fn user_call(&mut self, name: &Token) {
        self.write = true;
        self.user_calls.push((name.start, name.end));
    }

    /// A call: known read-only builtins are fine, anything else may write.
    fn call(&mut self, src: &[u8], callee: Callee) {
        let t = &callee.name;
        let catalog = match callee.qualifier {
            Qualifier::None => false,
            Qualifier::Catalog => true,
            Qualifier::Other => {
                // myschema.f(): a user function
                self.user_call(t);
                return;
            }
        };
        let (name, spelling) = match t.kind {
            Kind::QuotedIdent => match unquote(t.text(src)) {
                Some(n) => (n, Spelling::Quoted),
                None => {
                    self.set_write();
                    return;
                }
            },
            _ if catalog => (t.text(src), Spelling::Catalog),
            _ => (t.text(src), Spelling::Bare),
        };
        if spelling == Spelling::Bare
            && [
                b"json_table" as &[u8],
                b"xmltable",
                b"json_query",
                b"json_value",
                b"json_exists",
            ]
            .iter()
            .any(|k| name.eq_ignore_ascii_case(k))
        {
            self.table_fn = true;
        }
        match classify_call(name, spelling) {
            Call::Safe => {}
            Call::Unknown => self.user_call(t),
            Call::Sequence => self.set_write(),
            Call::AdvisoryLock => {
                self.set_write();
                self.pins |= Pins::ADVISORY_LOCK;
            }
            Call::AdvisoryUnlockAll => {
                self.set_write();
                self.unpins |= Unpins::ADVISORY_UNLOCK_ALL;
            }
        }
    }

    /// Walks the rest of the statement.
    fn rest(&mut self, cur: &mut Cursor<'_>) {
        while let Some(t) = cur.next() {
            self.token(cur, t);
        }
    }

    /// Adds what the walk found to `st`.
    fn into_stmt(self, mut st: Stmt) -> Stmt {
        st.pins |= self.pins;
        st.unpins |= self.unpins;
        st
    }
}

/// The command of a statement starting with `INSERT`, `UPDATE`, `DELETE` or `MERGE`.
pub(super) fn dml_command(src: &[u8], t: &Token) -> Option<PgCommand> {
    Some(match () {
        _ if t.is_word(src, "INSERT") => PgCommand::Insert,
        _ if t.is_word(src, "UPDATE") => PgCommand::Update,
        _ if t.is_word(src, "DELETE") => PgCommand::Delete,
        _ if t.is_word(src, "MERGE") => PgCommand::Merge,
        _ => return None,
    })
}

/// True for the word `name` (any case) or the quoted identifier `"name"` (`name` lower case).
#[inline]
fn is_name(src: &[u8], t: &Token, name: &str) -> bool {
    let len = t.end - t.start;
    match t.kind {
        Kind::Word => len == name.len() && t.text(src).eq_ignore_ascii_case(name.as_bytes()),
        Kind::QuotedIdent => len == name.len() + 2 && unquote(t.text(src)) == Some(name.as_bytes()),
        _ => false,
    }
}

/// A quoted identifier's content, if it is plain (no `U&` prefix, no doubled quote).
pub(super) fn unquote(text: &[u8]) -> Option<&[u8]> {
    let inner = text.strip_prefix(b"\"")?.strip_suffix(b"\"")?;
    (!inner.contains(&b'"')).then_some(inner)
}

/// `SELECT`, `VALUES`, `TABLE`, `WITH ...`, `(SELECT ...)`: a read unless something in it
/// writes, locks rows or calls a function that is not a known read-only builtin.
pub(super) fn query(cur: &mut Cursor<'_>, first: Token) -> Stmt {
    let mut walk = Walk::query();
    walk.with_header = first.is_word(cur.src, "WITH");
    walk.token(cur, first);
    walk.rest(cur);
    let command = walk.main.unwrap_or(PgCommand::Select);
    let route = if walk.write {
        Route::Write
    } else {
        Route::Read
    };
    let mut st = Stmt::new(command, route);
    if walk.write && !walk.other_write {
        st.user_calls = std::mem::take(&mut walk.user_calls);
    }
    walk.into_stmt(st)
}

/// Walks a query that ends at the `)` closing the `(` just consumed (`COPY (query) TO`).
pub(super) fn subquery(cur: &mut Cursor<'_>, open: Token) -> (Route, Pins, Unpins) {
    let mut walk = Walk::query();
    walk.token(cur, open);
    while walk.depth > 0 {
        let Some(t) = cur.next() else { break };
        walk.token(cur, t);
    }
    let route = if walk.write {
        Route::Write
    } else {
        Route::Read
    };
    (route, walk.pins, walk.unpins)
}

/// Walks the rest of a statement as a query (after `DECLARE ... FOR`), for its pins.
pub(super) fn rest_as_query(cur: &mut Cursor<'_>, st: Stmt) -> Stmt {
    let mut walk = Walk::query();
    walk.rest(cur);
    walk.into_stmt(st)
}

/// Walks the rest of a statement for the calls that pin.
pub(super) fn rest_of(cur: &mut Cursor<'_>, st: Stmt) -> Stmt {
    let mut walk = Walk::default();
    walk.rest(cur);
    walk.into_stmt(st)
}

/// `CREATE ...`: DDL; `CREATE [GLOBAL | LOCAL] TEMP ...` and objects in `pg_temp` pin.
pub(super) fn create(cur: &mut Cursor<'_>) -> Stmt {
    let mut st = Stmt::new(PgCommand::Ddl, Route::Write);
    if cur.eat("OR") {
        cur.eat("REPLACE");
    }
    let _ = cur.eat("GLOBAL") || cur.eat("LOCAL");
    if cur.eat("TEMP") || cur.eat("TEMPORARY") {
        st.pins |= Pins::TEMP_TABLE;
    }
    let mut walk = Walk {
        create: true,
        ..Walk::default()
    };
    walk.rest(cur);
    walk.into_stmt(st)
}

/// Walks a statement from its first token, for the calls that pin, into `st`.
pub(super) fn walk_from(cur: &mut Cursor<'_>, first: Token, st: Stmt) -> Stmt {
    let mut walk = Walk::default();
    walk.token(cur, first);
    walk.rest(cur);
    walk.into_stmt(st)
}
