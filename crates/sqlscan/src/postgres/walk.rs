//! The token walk inside a statement: which names are calls and what they call, locking
//! clauses, `SELECT ... INTO`, data-modifying CTEs, temporary objects.
//!
//! Most tokens matter to the walk only through what comes after them (the name before a `(`,
//! the `.` before a name): the walk passes over them at the cost of a test, and looks back
//! at them through the cursor when a token that matters comes ([`Walk::back`]).

mod calls;

pub use calls::set_config_names;

use super::classify::Stmt;
use super::cursor::{Cursor, KEEP};
use super::keywords::Kw;
use super::lexer::{Kind, Token};
use super::{PgCommand, Pins, Unpins};
use crate::Route;
pub(super) use calls::unquote;
use calls::{Callee, Qualifier};

/// The keywords [`Walk::keyword`] reacts to.
static REACTS: [bool; Kw::ALL.len()] = flags(&[
    Kw::For,
    Kw::Into,
    Kw::Insert,
    Kw::Update,
    Kw::Delete,
    Kw::Merge,
    Kw::Select,
    Kw::Values,
    Kw::Table,
    Kw::Group,
]);

/// The words the walk looks at when they come: those it reacts to, and `AS` (a type or an
/// alias follows). It passes over any other word outside a type name (a `CREATE` walk looks
/// at every token for its `pg_temp.` names).
static NOTED: [bool; Kw::ALL.len()] = {
    let mut t = REACTS;
    t[Kw::As as usize] = true;
    t
};

/// Outside a type name, a name or a word the walk does not note, a literal, an operator or
/// punctuation other than `(`, `)`, `.` change nothing by themselves (`pg_catalog.` before a
/// called name is looked back at).
#[inline(always)]
fn passed(t: &Token) -> bool {
    match t.kind {
        Kind::Word => !NOTED[t.kw as usize],
        Kind::Punct(c) => !matches!(c, b'(' | b')' | b'.'),
        Kind::Str | Kind::Number | Kind::Param | Kind::Op | Kind::QuotedIdent => true,
        Kind::Cast | Kind::Comment => false,
    }
}

/// A table of the keywords in `list`.
const fn flags(list: &[Kw]) -> [bool; Kw::ALL.len()] {
    let mut t = [false; Kw::ALL.len()];
    let mut i = 0;
    while i < list.len() {
        t[list[i] as usize] = true;
        i += 1;
    }
    t
}

/// Token-walk state inside one statement: calls, locking clauses, writable CTEs.
struct Walk {
    /// A reason to write other than calling a function sluice does not know.
    other_write: bool,
    /// Functions sluice does not know that the statement calls (name spans).
    user_calls: Vec<(usize, usize)>,
    depth: u32,
    /// Cursor position of the first token the walk takes from the cursor: it does not look
    /// back past it.
    start: usize,
    /// The token the walk began with, taken by its caller: the walk sees it just before
    /// `start` (whatever the caller took in between).
    first: Option<Token>,
    /// Position of the last name that was part of a type (a `(` after it is no call).
    typed: Option<usize>,
    /// The previous token leaves a type name (or an alias) to come: `::`, `AS`, `::schema.`.
    type_ctx: bool,
    /// `type_ctx` or `create`: the walk looks at every token.
    careful: bool,
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
    /// A walk of the tokens the cursor has next.
    fn new(cur: &Cursor<'_>) -> Self {
        Walk {
            other_write: false,
            user_calls: Vec::new(),
            depth: 0,
            start: cur.position(),
            first: None,
            typed: None,
            type_ctx: false,
            careful: false,
            select_like: false,
            with_header: false,
            grouping: false,
            table_fn: false,
            create: false,
            write: false,
            main: None,
            pins: Pins::default(),
            unpins: Unpins::default(),
        }
    }

    /// A walk of a query, from the tokens the cursor has next.
    fn query(cur: &Cursor<'_>) -> Self {
        Walk {
            select_like: true,
            ..Walk::new(cur)
        }
    }

    /// Walks `first`, the token the caller took last, before those the cursor has next.
    fn begin_with(&mut self, cur: &mut Cursor<'_>, first: Token) {
        self.token(cur, first, None);
        self.first = Some(first);
    }

    /// Walks the rest of the statement.
    #[inline]
    fn rest(&mut self, cur: &mut Cursor<'_>) {
        loop {
            if !self.careful {
                cur.skip(passed);
            }
            let Some(t) = cur.next() else { break };
            self.step(cur, t);
        }
    }

    /// The next token, just taken from the cursor.
    #[inline(always)]
    fn step(&mut self, cur: &mut Cursor<'_>, t: Token) {
        if self.careful || !passed(&t) {
            let at = cur.position() - 1;
            self.token(cur, t, Some(at));
        }
    }

    /// The token `i` (1 to 3) before the one at `at` (`None` for the first), as the walk
    /// sees them, with its position.
    #[inline(always)]
    fn back(&self, cur: &Cursor<'_>, at: Option<usize>, i: usize) -> Option<(usize, Token)> {
        debug_assert!(i < KEEP);
        let target = at?.checked_sub(i)?;
        if target >= self.start {
            // The cursor keeps the last tokens taken: `at` is the last of them.
            return cur.back(i).map(|(p, t)| (p, *t));
        }
        (target + 1 == self.start).then_some(())?;
        self.first.map(|f| (target, f))
    }

    /// A token that may matter, at position `at` (`None` for the first).
    #[inline(never)]
    fn token(&mut self, cur: &mut Cursor<'_>, t: Token, at: Option<usize>) {
        let src = cur.src;
        let k = t.kw;
        let (prev, prev_kw) = self
            .back(cur, at, 1)
            .map_or((Kind::Comment, Kw::None), |(_, p)| (p.kind, p.kw));
        let mut type_ctx = false;
        match t.kind {
            Kind::Word | Kind::QuotedIdent => {
                // A type name after `::` or `AS` (or an alias after `AS`), its qualified part,
                // and the second word of `character varying` / `double precision`.
                let in_type = self.type_ctx
                    && (prev_kw == Kw::As
                        || prev == Kind::Punct(b'.')
                        || prev == Kind::Cast
                        || matches!(k, Kw::Varying | Kw::Precision));
                type_ctx = in_type || k == Kw::As;
                if REACTS[k as usize] {
                    self.keyword(cur, k, prev, prev_kw);
                }
                if in_type {
                    // Not a name a `(` after it would call.
                    self.typed = at;
                }
                if self.create && calls::is_name(src, &t, Kw::PgTemp) && cur.peek_punct(b'.') {
                    self.pins |= Pins::TEMP_TABLE;
                }
            }
            Kind::Punct(b'(') => {
                self.open(cur, at, prev);
                self.depth += 1;
            }
            Kind::Punct(b')') => self.depth = self.depth.saturating_sub(1),
            Kind::Cast => type_ctx = true,
            Kind::Punct(b'.') => type_ctx = self.type_ctx,
            _ => {}
        }
        self.type_ctx = type_ctx;
        self.careful = type_ctx || self.create;
    }

    /// A `(` at `at`, after a token of kind `prev`: a call if a name that may be called comes
    /// before it.
    fn open(&mut self, cur: &Cursor<'_>, at: Option<usize>, prev: Kind) {
        let src = cur.src;
        if let Some((name_at, name)) = self.back(cur, at, 1) {
            if matches!(name.kind, Kind::Word | Kind::QuotedIdent) && self.typed != Some(name_at) {
                let (before, before_kw) = self
                    .back(cur, at, 2)
                    .map_or((Kind::Comment, Kw::None), |(_, b)| (b.kind, b.kw));
                let qualifier = if before != Kind::Punct(b'.') {
                    Qualifier::None
                } else if self
                    .back(cur, at, 3)
                    .is_some_and(|(_, s)| calls::is_name(src, &s, Kw::PgCatalog))
                {
                    Qualifier::Catalog
                } else {
                    Qualifier::Other
                };
                let c = Callee {
                    name,
                    qualifier,
                    before,
                    before_kw,
                };
                if !self.not_a_call(&c) {
                    return self.call(src, c);
                }
            }
        }
        if self.with_header && self.depth == 0 && prev == Kind::Punct(b')') {
            self.with_header = false; // WITH ... (SELECT ...)
        }
    }

    /// Keywords that change a query's class: those of [`REACTS`] (a keyword handled here and
    /// not listed there would never come here).
    fn keyword(&mut self, cur: &mut Cursor<'_>, k: Kw, prev: Kind, prev_kw: Kw) {
        if k == Kw::Group && cur.peek_is(Kw::By) {
            self.grouping = true;
        }
        if !self.select_like {
            return;
        }
        let dml = match k {
            Kw::For => {
                // FOR UPDATE, FOR NO KEY UPDATE, FOR SHARE, FOR KEY SHARE (not FOR READ ONLY).
                if cur.peek_is(Kw::Update)
                    || cur.peek_is(Kw::Share)
                    || cur.peek_is(Kw::No)
                    || cur.peek_is(Kw::Key)
                {
                    self.set_write();
                }
                return;
            }
            Kw::Into => {
                if !matches!(prev_kw, Kw::Insert | Kw::Merge) {
                    // SELECT ... INTO creates a table.
                    self.set_write();
                    let src = cur.src;
                    if cur.peek_is(Kw::Temp)
                        || cur.peek_is(Kw::Temporary)
                        || cur.peek_is(Kw::Local)
                        || cur.peek_is(Kw::Global)
                        || cur
                            .peek()
                            .is_some_and(|n| calls::is_name(src, &n, Kw::PgTemp))
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
        if prev != Kind::Punct(b'.') {
            self.set_write(); // a writable CTE, or WITH ... INSERT
            if self.with_header && self.depth == 0 {
                self.with_header = false;
                self.main = Some(dml);
            }
        }
    }

    /// Something in the statement writes or locks.
    fn set_write(&mut self) {
        self.write = true;
        self.other_write = true;
    }

    /// Adds what the walk found to `st`.
    fn into_stmt(self, mut st: Stmt) -> Stmt {
        st.pins |= self.pins;
        st.unpins |= self.unpins;
        st
    }
}

/// `SELECT`, `VALUES`, `TABLE`, `WITH ...`, `(SELECT ...)`: a read unless something in it
/// writes, locks rows or calls a function that is not a known read-only builtin.
#[inline]
pub(super) fn query(cur: &mut Cursor<'_>, first: Token) -> Stmt {
    let mut walk = Walk::query(cur);
    walk.with_header = first.is(Kw::With);
    if matches!(first.kw, Kw::Select | Kw::Values | Kw::Table) {
        // What these words do in a query's walk, they do after a `WITH` list only: the walk
        // need not look at them when they lead, but looks back at them.
        walk.first = Some(first);
    } else {
        walk.begin_with(cur, first);
    }
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
    let mut walk = Walk::query(cur);
    walk.begin_with(cur, open);
    while walk.depth > 0 {
        let Some(t) = cur.next() else { break };
        walk.step(cur, t);
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
    let mut walk = Walk::query(cur);
    walk.rest(cur);
    walk.into_stmt(st)
}

/// Walks the rest of a statement for the calls that pin.
pub(super) fn rest_of(cur: &mut Cursor<'_>, st: Stmt) -> Stmt {
    let mut walk = Walk::new(cur);
    walk.rest(cur);
    walk.into_stmt(st)
}

/// `CREATE ...`: DDL; `CREATE [GLOBAL | LOCAL] TEMP ...` and objects in `pg_temp` pin.
pub(super) fn create(cur: &mut Cursor<'_>) -> Stmt {
    let mut st = Stmt::new(PgCommand::Ddl, Route::Write);
    if cur.eat(Kw::Or) {
        cur.eat(Kw::Replace);
    }
    let _ = cur.eat(Kw::Global) || cur.eat(Kw::Local);
    if cur.eat(Kw::Temp) || cur.eat(Kw::Temporary) {
        st.pins |= Pins::TEMP_TABLE;
    }
    let mut walk = Walk {
        create: true,
        careful: true,
        ..Walk::new(cur)
    };
    walk.rest(cur);
    walk.into_stmt(st)
}

/// Walks a statement from its first token, for the calls that pin, into `st`.
pub(super) fn walk_from(cur: &mut Cursor<'_>, first: Token, st: Stmt) -> Stmt {
    let mut walk = Walk::new(cur);
    walk.begin_with(cur, first);
    walk.rest(cur);
    walk.into_stmt(st)
}
