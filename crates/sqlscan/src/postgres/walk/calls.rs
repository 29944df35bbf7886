//! Names followed by `(`: which are calls, and what a call does to the statement.

use super::Walk;
use crate::postgres::functions::{classify_call, Call, Spelling};
use crate::postgres::keywords::Kw;
use crate::postgres::lexer::{Kind, Lexer, Token};
use crate::postgres::{Pins, Unpins};

/// How a called name is qualified.
#[derive(Clone, Copy)]
pub(super) enum Qualifier {
    None,
    /// `pg_catalog.name`.
    Catalog,
    /// Any other schema: a user function.
    Other,
}

/// A name that may be a call, the next token being `(`, with what came before it.
#[derive(Clone, Copy)]
pub(super) struct Callee {
    pub(super) name: Token,
    pub(super) qualifier: Qualifier,
    /// The kind of the token before the name ([`Kind::Comment`] for none: the walk never sees
    /// a comment).
    pub(super) before: Kind,
    pub(super) before_kw: Kw,
}

impl Walk {
    /// A name followed by `(` that is not a call: a CTE's or alias's column list, a
    /// TABLESAMPLE method, or an unreserved keyword in the one place it takes a parenthesis.
    pub(super) fn not_a_call(&self, c: &Callee) -> bool {
        let (k, p) = (c.name.kw, c.before_kw);
        if matches!(p, Kw::With | Kw::Recursive | Kw::Tablesample) {
            return true;
        }
        if self.with_header && self.depth == 0 && c.before == Kind::Punct(b',') {
            return true;
        }
        // `FROM generate_series(1, 3) g(x)`, `(VALUES (1)) v(a)`: right after a closing
        // parenthesis a plain name before `(` is an alias and its column list (no call
        // stands there in PostgreSQL's grammar).
        if c.before == Kind::Punct(b')') && k == Kw::None && matches!(c.qualifier, Qualifier::None)
        {
            return true;
        }
        (c.before == Kind::Punct(b')') && matches!(k, Kw::Over | Kw::Filter | Kw::Repeatable))
            || (p == Kw::Not && k == Kw::Materialized)
            || (p == Kw::Grouping && k == Kw::Sets)
            || (matches!(p, Kw::Order | Kw::Group | Kw::Partition) && k == Kw::By)
            || (self.grouping && matches!(k, Kw::Rollup | Kw::Cube))
            || (self.table_fn && matches!(k, Kw::Columns | Kw::Passing))
    }

    /// A call of a function sluice does not know: it may write.
    fn user_call(&mut self, name: &Token) {
        self.write = true;
        self.user_calls.push((name.start, name.end));
    }

    /// A call: known read-only builtins are fine, anything else may write.
    pub(super) fn call(&mut self, src: &[u8], callee: Callee) {
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
                    // U&"..." or a name with "" in it: any function, session state included.
                    self.set_write();
                    self.pins |= Pins::UNREAD_CALL;
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
            Call::SetSeed => {
                self.user_call(t);
                self.pins |= Pins::SETSEED;
            }
            Call::SetConfig => {
                // Routed as any function sluice does not know (it may be configured as
                // read-only), and pinning when the setting outlives the transaction.
                self.user_call(t);
                let args = Arguments::of(&src[t.end..]);
                match args.literal(0) {
                    // The session's `random()` sequence, which outlives the setting (a
                    // local one too), as `setseed()`.
                    Some(name) if name.eq_ignore_ascii_case(b"seed") => {
                        self.pins |= Pins::SETSEED;
                    }
                    // The transaction's own: it ends with the transaction, whatever
                    // `is_local` says.
                    Some(name) if super::super::commands::transaction_parameter(name) => {}
                    // A name the scanner cannot read may be `seed`.
                    None => self.pins |= Pins::SET_CONFIG,
                    Some(_) if args.sets_locally() => {}
                    Some(name) if read_back(name) => self.pins |= Pins::SET_CONFIG_READ,
                    Some(_) => self.pins |= Pins::SET_CONFIG,
                }
                if args.temp_search_path() {
                    // Also when local: what it creates outlives the transaction.
                    self.pins |= Pins::TEMP_SEARCH_PATH;
                }
            }
        }
    }
}

/// Whether a parameter `set_config` sets for the session may be read back from the server and
/// moved as a `SET` (see [`Pins::SET_CONFIG_READ`]): PostgreSQL's own parameters, but not the
/// role (replayed apart), nor what changes how the scanner reads the session's text
/// (`client_encoding`, `standard_conforming_strings`), nor `seed` (it pins) and the
/// transaction's own (they end with it). Not a custom one (`app.tenant`): moved,
/// it would stay known by name, empty, on the connections it was made on, where a direct
/// connection's `current_setting(name, true)` is NULL (row-level security policies read it
/// so); the session keeps its connection instead.
fn read_back(name: &[u8]) -> bool {
    !name.is_empty()
        && name.iter().all(|&b| b.is_ascii_alphanumeric() || b == b'_')
        && ![
            &b"role"[..],
            b"session_authorization",
            b"client_encoding",
            b"standard_conforming_strings",
        ]
        .iter()
        .any(|n| name.eq_ignore_ascii_case(n))
        && !name.eq_ignore_ascii_case(b"seed")
        && !super::super::commands::transaction_parameter(name)
}

/// The parameters that the `set_config` calls of `sql` may set for the session and that may
/// be read back (see [`Pins::SET_CONFIG_READ`]): their names, in lower case, each once.
pub fn set_config_names(sql: &[u8]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for t in Lexer::new(sql) {
        if t.kind != Kind::Word || !t.text(sql).eq_ignore_ascii_case(b"set_config") {
            continue;
        }
        let args = Arguments::of(&sql[t.end..]);
        if args.sets_locally() {
            continue;
        }
        if let Some(name) = args.literal(0).filter(|n| read_back(n)) {
            let name = String::from_utf8_lossy(name).to_ascii_lowercase();
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    names
}

/// The arguments of a `set_config` call, read from the text at its `(`: each argument's
/// tokens at depth 0 and below (the first three; a call with more is not PostgreSQL's).
struct Arguments<'a> {
    rest: &'a [u8],
    args: [Vec<Token>; 3],
    /// Commas at depth 0: 2 for a call of three arguments.
    commas: usize,
}

impl<'a> Arguments<'a> {
    fn of(rest: &'a [u8]) -> Arguments<'a> {
        let mut out = Arguments {
            rest,
            args: Default::default(),
            commas: 0,
        };
        let mut lex = Lexer::new(rest);
        if !lex.next().is_some_and(|t| t.is_punct(b'(')) {
            out.commas = usize::MAX;
            return out;
        }
        let mut depth = 0u32;
        for t in lex {
            match t.kind {
                Kind::Punct(b'(' | b'[') => depth += 1,
                Kind::Punct(b')' | b']') if depth == 0 => break,
                Kind::Punct(b')' | b']') => depth -= 1,
                Kind::Punct(b',') if depth == 0 => {
                    out.commas += 1;
                    continue;
                }
                _ => {}
            }
            if let Some(arg) = out.args.get_mut(out.commas) {
                arg.push(t);
            }
        }
        out
    }

    /// The argument `i` if it is one string literal: its content between the quotes.
    fn literal(&self, i: usize) -> Option<&'a [u8]> {
        let [t] = self.args.get(i)?[..] else {
            return None;
        };
        if t.kind != Kind::Str {
            return None;
        }
        t.text(self.rest)
            .strip_prefix(b"'")
            .and_then(|x| x.strip_suffix(b"'"))
    }

    /// True if `is_local` is plainly true: the keyword `TRUE`, or a string PostgreSQL reads
    /// as true. Anything else (`false`, an expression, a parameter) may set the parameter
    /// for the rest of the session: on this server connection only, since PostgreSQL
    /// reports most parameters to no one, so the session cannot move.
    fn sets_locally(&self) -> bool {
        if self.commas != 2 {
            return false;
        }
        if let [t] = self.args[2][..] {
            if t.kind == Kind::Word {
                return t.kw == Kw::True;
            }
        }
        self.literal(2).is_some_and(|inner| {
            [&b"t"[..], b"true", b"y", b"yes", b"on", b"1"]
                .iter()
                .any(|w| inner.eq_ignore_ascii_case(w))
        })
    }

    /// True if it sets `search_path` (named by a literal) to a value whose literals name the
    /// `pg_temp` schema: tables created unqualified then are temporary. A name or value given
    /// as a parameter is not read (docs/sessions.md).
    fn temp_search_path(&self) -> bool {
        self.commas == 2 && self.mentions(0, b"search_path") && self.mentions(1, b"pg_temp")
    }

    /// True if a string literal in argument `i` contains `word` (in any case).
    fn mentions(&self, i: usize, word: &[u8]) -> bool {
        self.args[i].iter().any(|t| {
            t.kind == Kind::Str && crate::find_ignore_case(t.text(self.rest), word).is_some()
        })
    }
}

/// True for the keyword `name` or the quoted identifier of its name in lower case
/// (`"pg_temp"`).
#[inline(always)]
pub(super) fn is_name(src: &[u8], t: &Token, name: Kw) -> bool {
    match t.kind {
        Kind::Word => t.kw == name,
        Kind::QuotedIdent => quoted_is(src, t, name),
        _ => false,
    }
}

/// The quoted identifier `t` is `"name"`, `name` in lower case.
#[inline(always)]
fn quoted_is(src: &[u8], t: &Token, name: Kw) -> bool {
    let want = name.spelling().as_bytes();
    t.end - t.start == want.len() + 2
        && unquote(t.text(src)).is_some_and(|n| {
            n.iter()
                .zip(want)
                .all(|(a, b)| *a == b.to_ascii_lowercase())
        })
}

/// A quoted identifier's content, if it is plain (no `U&` prefix, no doubled quote).
pub(crate) fn unquote(text: &[u8]) -> Option<&[u8]> {
    let inner = text.strip_prefix(b"\"")?.strip_suffix(b"\"")?;
    (!inner.contains(&b'"')).then_some(inner)
}
