//! The PostgreSQL dialect: a lexer, a statement splitter for simple-Query strings, and the
//! classification the router needs — can a statement go to a replica, which session state
//! pins it to its server connection or releases such state, does it carry a routing hint —
//! with the statement's digest id computed in the same pass ([`digest_text`] gives its text).
//!
//! Like the MySQL scanner it is not a parser and never allocates (except to report the
//! parameter a `SET`/`RESET` names). Where the text alone cannot tell, it errs towards the
//! primary and towards pinning.

mod classify;
mod commands;
mod cursor;
mod digest;
mod functions;
mod keywords;
pub mod lexer;
mod packed;
mod sample;
mod server_state;
mod shape;
mod walk;

pub use crate::digest::MAX_TEXT;
pub use crate::Route;
pub use classify::scan;
pub use digest::digest_text;
pub use sample::ShapeSample;
pub use server_state::reads_server_state;
pub use shape::{shape_key, ShapeKey, MAX_SHAPE_KEY};
pub use walk::set_config_names;

use keywords::Kw;
use lexer::{Kind, Lexer, Token};

/// What the scanner learned about a simple-Query string (one or several statements).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PgScan {
    /// Where the text may run; `None` when it holds no statement. Across statements a write
    /// wins over a read.
    pub route: Option<Route>,
    /// The first statement's command.
    pub command: PgCommand,
    /// Number of statements.
    pub statements: u32,
    /// State created by any of the statements that cannot move between server connections.
    pub pins: Pins,
    /// State released by any of the statements.
    pub unpins: Unpins,
    /// Span of a `sluice:<target>` routing hint's target in the text.
    pub hint: Option<(usize, usize)>,
    /// For a text that is a single `SET` or `RESET` of a parameter: what it sets.
    pub set: Option<SetStmt>,
    /// When the text writes only because its queries call functions the scanner does not
    /// know (a user function may write): the spans of those functions' names, so that
    /// functions configured as read-only can let it go to a replica.
    pub user_calls: Option<Vec<(usize, usize)>>,
    /// The digest id of the whole text: a 64-bit hash of its normalised form (literals out,
    /// case and spacing normalised), computed in the same lexing pass; [`digest_text`] gives
    /// the same id with the normalised text.
    pub digest: u64,
}

impl PgScan {
    /// Route of the text; `Write` if there was no statement at all.
    pub fn route(&self) -> Route {
        self.route.unwrap_or(Route::Write)
    }
    /// The hint's target (`writer`, `reader` or a hostgroup name), if any.
    pub fn hint<'a>(&self, sql: &'a [u8]) -> Option<&'a str> {
        self.hint
            .and_then(|(s, e)| std::str::from_utf8(&sql[s..e]).ok())
    }
}

/// The leading command of a statement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PgCommand {
    /// Nothing but whitespace, comments and semicolons.
    #[default]
    Empty,
    /// `SELECT`, `VALUES`, `TABLE`, `(SELECT ...)`, `WITH ... SELECT`.
    Select,
    /// `INSERT`, also `WITH ... INSERT`.
    Insert,
    /// `UPDATE`, also `WITH ... UPDATE`.
    Update,
    /// `DELETE`, also `WITH ... DELETE`.
    Delete,
    /// `MERGE`, also `WITH ... MERGE`.
    Merge,
    /// `BEGIN`, `START TRANSACTION`, with the modes they name.
    Begin {
        /// `Some(true)` for `READ ONLY`, `Some(false)` for `READ WRITE`, `None` if unsaid.
        read_only: Option<bool>,
        /// `ISOLATION LEVEL SERIALIZABLE`.
        serializable: bool,
    },
    /// `COMMIT`, `END` (also `AND NO CHAIN`; `AND CHAIN`, which opens the next transaction
    /// at once, is [`PgCommand::CommitAndChain`]).
    Commit,
    /// `ROLLBACK`, `ABORT` (also `AND NO CHAIN`; not `AND CHAIN`, not `ROLLBACK TO SAVEPOINT`).
    Rollback,
    /// `COMMIT AND CHAIN` (`END AND CHAIN`): commits, and the next transaction is open.
    CommitAndChain,
    /// `ROLLBACK AND CHAIN` (`ABORT AND CHAIN`): rolls back, and the next transaction is open.
    RollbackAndChain,
    /// `ROLLBACK [WORK | TRANSACTION] TO [SAVEPOINT] name`.
    RollbackToSavepoint,
    /// `SAVEPOINT name`.
    Savepoint,
    /// `RELEASE [SAVEPOINT] name`.
    Release,
    /// `SET [SESSION | LOCAL] TRANSACTION ...`: the current transaction's modes.
    SetTransaction {
        /// `Some(true)` for `READ ONLY`, `Some(false)` for `READ WRITE`, `None` if unsaid.
        read_only: Option<bool>,
        /// `ISOLATION LEVEL SERIALIZABLE`.
        serializable: bool,
    },
    /// `SET ...` other than `SET TRANSACTION` and `SET CONSTRAINTS`; this includes
    /// `SET SESSION AUTHORIZATION` and `SET SESSION CHARACTERISTICS AS TRANSACTION` (both
    /// pin, see [`Pins`]).
    Set,
    /// `RESET ...`.
    Reset,
    /// `DISCARD ...`.
    Discard {
        /// `DISCARD ALL`.
        all: bool,
    },
    /// `DEALLOCATE [PREPARE] ...`.
    Deallocate {
        /// `DEALLOCATE ALL`.
        all: bool,
    },
    /// SQL `PREPARE name AS ...` (not `PREPARE TRANSACTION`).
    Prepare,
    /// `PREPARE TRANSACTION 'gid'`: the transaction block ends, its work prepared for a
    /// two-phase commit; what it did to the session (its `SET`s) stays, as after a commit.
    PrepareTransaction,
    /// SQL `EXECUTE name`.
    Execute,
    /// `LISTEN`.
    Listen,
    /// `UNLISTEN`.
    Unlisten,
    /// `NOTIFY`.
    Notify,
    /// `COPY`.
    Copy {
        /// `COPY ... FROM` (STDIN, a file or a program): it loads data.
        from_stdin_or_file: bool,
    },
    /// `SHOW`.
    Show,
    /// `EXPLAIN`.
    Explain,
    /// `CALL`.
    Call,
    /// `DO`.
    Do,
    /// `CREATE`, `ALTER`, `DROP`, `TRUNCATE`, `GRANT`, `REVOKE`, `COMMENT`, `SECURITY LABEL`,
    /// `REFRESH MATERIALIZED VIEW`, `IMPORT FOREIGN SCHEMA`, `REASSIGN OWNED`.
    Ddl,
    /// Maintenance: `VACUUM`, `ANALYZE`, `CLUSTER`, `REINDEX`.
    Vacuum,
    /// Anything else: `LOCK`, `DECLARE`, `FETCH`, `MOVE`, `CLOSE`, `LOAD`, `CHECKPOINT`,
    /// `SET CONSTRAINTS`, `COMMIT AND CHAIN`, `ROLLBACK AND CHAIN`, the two-phase commit
    /// statements (`PREPARE TRANSACTION`, `COMMIT PREPARED`, `ROLLBACK PREPARED`), statements
    /// not recognised.
    Other,
}

macro_rules! flags {
    (
        $(#[$tm:meta])* $ty:ident {
            $($(#[$m:meta])* $name:ident = $bit:expr, $label:expr;)*
        }
    ) => {
        $(#[$tm])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
        pub struct $ty(pub u16);

        impl $ty {
            $($(#[$m])* pub const $name: $ty = $ty(1 << $bit);)*
            const LABELS: &'static [($ty, &'static str)] = &[$(($ty::$name, $label)),*];

            /// True if every flag of `other` is set.
            pub fn contains(self, other: $ty) -> bool {
                self.0 & other.0 == other.0
            }
            /// True if any flag of `other` is set.
            pub fn intersects(self, other: $ty) -> bool {
                self.0 & other.0 != 0
            }
            /// True if no flag is set.
            pub fn is_empty(self) -> bool {
                self.0 == 0
            }
            /// Human-readable names of the flags set, for logs and error messages.
            pub fn names(self) -> impl Iterator<Item = &'static str> {
                Self::LABELS
                    .iter()
                    .filter(move |(f, _)| self.contains(*f))
                    .map(|(_, n)| *n)
            }
        }

        impl std::ops::BitOr for $ty {
            type Output = $ty;
            fn bitor(self, o: $ty) -> $ty {
                $ty(self.0 | o.0)
            }
        }

        impl std::ops::BitOrAssign for $ty {
            fn bitor_assign(&mut self, o: $ty) {
                self.0 |= o.0;
            }
        }
    };
}

flags! {
    /// Session state a statement creates that cannot move to another server connection: the
    /// client must keep its connection until the matching [`Unpins`] (or for good).
    Pins {
        /// `CREATE TEMP TABLE|VIEW|SEQUENCE ...`, `CREATE TABLE pg_temp.x`,
        /// `SELECT ... INTO TEMP ...`.
        TEMP_TABLE = 0, "temporary table";
        /// `pg_advisory_lock`, `pg_try_advisory_lock` (and `_shared`): session-level locks.
        ADVISORY_LOCK = 1, "session advisory lock";
        /// `LISTEN channel`.
        LISTEN = 2, "LISTEN";
        /// `DECLARE ... CURSOR WITH HOLD`: the cursor outlives its transaction.
        WITH_HOLD = 3, "WITH HOLD cursor";
        /// SQL-level `PREPARE name AS ...`.
        PREPARE = 4, "SQL PREPARE";
        /// `LOAD 'library'`.
        LOAD = 5, "LOAD";
        /// `SET [SESSION] SESSION AUTHORIZATION`.
        SESSION_AUTHORIZATION = 6, "SET SESSION AUTHORIZATION";
        /// `SET SESSION CHARACTERISTICS AS TRANSACTION ...`.
        SESSION_CHARACTERISTICS = 7, "SET SESSION CHARACTERISTICS";
        /// `set_config(name, value, is_local)` without a plainly true `is_local`: a setting
        /// for the rest of the session, which PostgreSQL reports for few parameters.
        SET_CONFIG = 8, "set_config(..., false)";
        /// `setseed()`, `SET seed`: the session's `random()` sequence.
        SETSEED = 9, "setseed() or SET seed";
        /// A call of a name sluice cannot read (`U&"..."`, a quoted name with `""` in it):
        /// it may be any of the functions above.
        UNREAD_CALL = 10, "call of a name sluice cannot read";
        /// `SET search_path` naming `pg_temp`: an unqualified `CREATE` makes temporary
        /// objects.
        TEMP_SEARCH_PATH = 11, "search_path naming pg_temp";
        /// Not a pin: `set_config(name, value, is_local)` of a parameter named by a string
        /// literal, `is_local` not plainly true, may set it for the session. The caller reads
        /// the values of [`set_config_names`] back from the server once the text ran, and
        /// moves them as any `SET`.
        SET_CONFIG_READ = 12, "set_config(..., false) read back";
    }
}

flags! {
    /// Statements that release pinned session state.
    Unpins {
        /// `UNLISTEN *`.
        UNLISTEN_ALL = 0, "UNLISTEN *";
        /// `pg_advisory_unlock_all()`.
        ADVISORY_UNLOCK_ALL = 1, "pg_advisory_unlock_all()";
        /// `DEALLOCATE [PREPARE] ALL`.
        DEALLOCATE_ALL = 2, "DEALLOCATE ALL";
        /// `DISCARD ALL`: releases all of the above and temporary tables.
        DISCARD_ALL = 3, "DISCARD ALL";
        /// `DISCARD TEMP` / `DISCARD TEMPORARY`.
        DISCARD_TEMP = 4, "DISCARD TEMP";
        /// `RESET SESSION AUTHORIZATION`, `SET SESSION AUTHORIZATION DEFAULT`.
        RESET_SESSION_AUTHORIZATION = 5, "RESET SESSION AUTHORIZATION";
        /// `CLOSE ALL`.
        CLOSE_ALL = 6, "CLOSE ALL";
    }
}

/// What a single `SET` or `RESET` of a run-time parameter does.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SetStmt {
    /// `SET LOCAL`: the setting ends with the transaction.
    pub local: bool,
    /// The parameter, lower-cased unless it was quoted: `SET TIME ZONE` is `timezone`,
    /// `SET NAMES` is `client_encoding`, `SET SCHEMA` is `search_path`, `SET ROLE` is `role`,
    /// `SET XML OPTION` is `xmloption`, `RESET ALL` is `all`; a dotted custom name such as
    /// `myapp.tenant` is kept whole.
    pub name: String,
    /// `RESET name`, `SET name TO DEFAULT`, `SET name = DEFAULT`, `SET TIME ZONE LOCAL`.
    pub reset: bool,
}

/// Decides which `;` ends a statement: one outside parentheses and outside a
/// `BEGIN ATOMIC ... END` routine body (strings, dollar quotes and comments are single tokens
/// already).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Boundary {
    depth: u32,
    /// Open `BEGIN ATOMIC` bodies plus `CASE`s inside them (both close with `END`).
    block: u32,
    /// What came before: [`Boundary::START`], [`Boundary::BEGIN`] (a `BEGIN` that is not the
    /// statement's first word), or any other token.
    after: u8,
}

impl Boundary {
    const START: u8 = 0;
    const OTHER: u8 = 1;
    const BEGIN: u8 = 2;

    /// Feeds the next token of the statement; true if it is the `;` that ends it.
    #[inline(always)]
    pub(crate) fn feed(&mut self, t: &Token) -> bool {
        match t.kind {
            Kind::Punct(b'(') => self.depth += 1,
            Kind::Punct(b')') => self.depth = self.depth.saturating_sub(1),
            Kind::Punct(b';') if self.depth == 0 && self.block == 0 => return true,
            // Only keywords matter, and few of them: a word that is none costs one test.
            Kind::Word if t.kw != Kw::None => {
                self.keyword(t.kw);
                return false;
            }
            _ => {}
        }
        self.after = Self::OTHER;
        false
    }

    #[inline(always)]
    fn keyword(&mut self, kw: Kw) {
        if self.block > 0 {
            if kw == Kw::Case {
                self.block += 1;
            } else if kw == Kw::End {
                self.block -= 1;
            }
        } else if self.after == Self::BEGIN && kw == Kw::Atomic {
            self.block = 1;
        }
        // A statement's own leading BEGIN starts a transaction, not a routine body.
        self.after = if self.after != Self::START && kw == Kw::Begin {
            Self::BEGIN
        } else {
            Self::OTHER
        };
    }
}

/// Iterator over the statements of a simple-Query string: see [`statements`].
#[derive(Clone)]
pub struct Statements<'a> {
    src: &'a [u8],
    lx: Lexer<'a>,
    /// Where the next statement's text begins: just past the previous `;`.
    next_start: usize,
    done: bool,
}

impl Iterator for Statements<'_> {
    type Item = (usize, usize);

    fn next(&mut self) -> Option<(usize, usize)> {
        while !self.done {
            let start = self.next_start;
            let mut bound = Boundary::default();
            let mut last_end = None;
            loop {
                let Some(t) = self.lx.next() else {
                    self.done = true;
                    break;
                };
                if bound.feed(&t) {
                    break;
                }
                last_end = Some(t.end);
            }
            self.next_start = self.lx.offset();
            if let Some(end) = last_end {
                let lead = self.src[start..end]
                    .iter()
                    .take_while(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c))
                    .count();
                return Some((start + lead, end));
            }
        }
        None
    }
}

/// The text's first token, comments and white space before it left out.
pub fn first_token(sql: &[u8]) -> Option<&[u8]> {
    tokens(sql).next()
}

/// The text's tokens, comments and white space left out.
pub fn tokens(sql: &[u8]) -> impl Iterator<Item = &[u8]> {
    Lexer::new(sql).map(move |t| t.text(sql))
}

/// Byte spans of the statements in a simple-Query string, split on the `;`s that end them (not
/// those inside strings, dollar quotes, quoted identifiers, comments, parentheses or a
/// `BEGIN ATOMIC ... END` body). A span runs from the first non-blank byte after the previous
/// `;` — so it keeps a leading comment, and with it a routing hint — to the end of the
/// statement's last token. Statements without a token are skipped.
pub fn statements(sql: &[u8]) -> Statements<'_> {
    Statements {
        src: sql,
        lx: Lexer::new(sql),
        next_start: 0,
        done: false,
    }
}

#[cfg(test)]
mod tests;
