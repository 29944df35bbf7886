//! The digester's slow path: a `-` or `+` held back until the next token says whether it is a
//! sign, and lists of literals after `IN`, `VALUES` and `ARRAY`, written as they come, then
//! rewound and replaced by `(...)` once their closing bracket shows that they hold only
//! literals.

use super::output::{Mark, Sink};
use super::words::{self, Role};
use super::{Digester, Pending, Space};
use crate::postgres::lexer::{Kind, Token};

/// Where a list of literals stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Item {
    /// A value may come: at the start, after `,` or after a sign.
    Value,
    /// After a value or its type.
    Done,
    /// After `::`: a type name comes.
    Cast,
    /// In a type name after `::` (`timestamp with time zone`, `pg_catalog.int4`, `int[]`).
    Type,
}

/// A list that may hold only literals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum List {
    Off,
    /// In a row: it is replaced if it closes holding only literals.
    Row {
        /// Where to rewind to.
        at: Mark,
        /// The closing byte: `)` or `]`.
        close: u8,
        /// The first row (written ` (...)`), or one more row after `VALUES (...)` (dropped).
        first: bool,
        /// More rows may follow (`VALUES`).
        rows: bool,
        item: Item,
    },
    /// After `VALUES (...)`: more rows may come.
    Rows,
    /// After `VALUES (...),`: a row may come.
    RowsComma {
        at: Mark,
    },
}

impl<S: Sink> Digester<S> {
    /// [`Digester::feed`] when something is pending or a list is followed.
    #[inline(never)]
    pub(super) fn feed_slow(&mut self, src: &[u8], t: &Token) {
        self.slow_token(src, t);
        self.busy = self.pending != Pending::Nothing || self.list != List::Off;
    }

    fn slow_token(&mut self, src: &[u8], t: &Token) {
        if t.kind == Kind::Comment {
            return;
        }
        let role = words::keyword(t.kw).map(|k| k.role);
        let pending = std::mem::replace(&mut self.pending, Pending::Nothing);
        if self.list != List::Off && self.list_step(t, role) {
            return;
        }
        let mut opener = None;
        match pending {
            Pending::Nothing => {}
            Pending::Sign(_) if t.kind == Kind::Number => {
                // Part of the literal: `?` stands for both.
                self.literal();
                return;
            }
            Pending::Sign(sign) => {
                let space = self.space(Space::Op);
                self.out.push_byte(space, sign);
                self.sign_ok = true;
            }
            Pending::Opener(open, role) => opener = Some((open, role)),
        }
        match t.kind {
            Kind::Punct(c) => self.punct(c, opener),
            _ => self.other(src, t),
        }
    }

    /// Starts following a list opened by `open` after keyword `role`.
    pub(super) fn open_list(&mut self, open: u8, role: Role) {
        self.list = List::Row {
            at: self.out.mark(),
            close: if open == b'(' { b')' } else { b']' },
            first: true,
            rows: role == Role::Values,
            item: Item::Value,
        };
        self.busy = true;
    }

    /// Follows a possible list of literals with the next token `t`; true if `t` was taken
    /// (a row closed and was replaced).
    fn list_step(&mut self, t: &Token, role: Option<Role>) -> bool {
        match self.list {
            List::Off => false,
            List::Row {
                at,
                close,
                first,
                rows,
                item,
            } => {
                let next = match (item, t.kind) {
                    (Item::Value, Kind::Str | Kind::Number | Kind::Param) => Some(Item::Done),
                    (Item::Value, Kind::Word) if role == Some(Role::Literal) => Some(Item::Done),
                    (Item::Value, Kind::Punct(b'-' | b'+')) => Some(Item::Value),
                    (Item::Done | Item::Type, Kind::Cast) => Some(Item::Cast),
                    (Item::Cast | Item::Type, Kind::Word | Kind::QuotedIdent) => Some(Item::Type),
                    (Item::Type, Kind::Punct(b'.' | b'[' | b']')) => Some(Item::Type),
                    (Item::Done | Item::Type, Kind::Punct(b',')) => Some(Item::Value),
                    (Item::Done | Item::Type, Kind::Punct(c)) if c == close => {
                        self.collapse(at, close, first, rows);
                        return true;
                    }
                    _ => None,
                };
                self.list = match next {
                    Some(item) => List::Row {
                        at,
                        close,
                        first,
                        rows,
                        item,
                    },
                    None => List::Off,
                };
                false
            }
            List::Rows => {
                self.list = if t.is_punct(b',') {
                    List::RowsComma {
                        at: self.out.mark(),
                    }
                } else {
                    List::Off
                };
                false
            }
            List::RowsComma { at } => {
                self.list = if t.is_punct(b'(') {
                    List::Row {
                        at,
                        close: b')',
                        first: false,
                        rows: true,
                        item: Item::Value,
                    }
                } else {
                    List::Off
                };
                false
            }
        }
    }

    /// The row that began at `at` held only literals: it becomes `(...)`, or nothing if it
    /// follows rows already replaced.
    #[cold]
    fn collapse(&mut self, at: Mark, close: u8, first: bool, rows: bool) {
        // No sign is pending: the token before the closing one was a value or a type.
        self.out.rewind(at);
        if first {
            self.out
                .push(if close == b')' { b" (...)" } else { b"[...]" });
        }
        self.spaced = Space::Close.before();
        self.sign_ok = false;
        self.list = if rows { List::Rows } else { List::Off };
    }
}
