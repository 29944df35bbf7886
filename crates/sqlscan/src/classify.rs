//! Statement classification: can it go to a replica, and what session state does it touch.

use crate::lexer::Lexer;

mod statement;
use statement::{statement, Cursor};

/// Where a statement may run, as far as its text tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Cannot write anything: a replica may answer it.
    Read,
    /// May write, lock, or depend on the primary: it goes to the writer.
    Write,
}

/// The leading command of the (first) statement, for statistics and special handling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Command {
    /// `SELECT`, `(SELECT`, `WITH ... SELECT`, `VALUES`, `TABLE`.
    Select,
    /// `INSERT`.
    Insert,
    /// `UPDATE`.
    Update,
    /// `DELETE`.
    Delete,
    /// `REPLACE`.
    Replace,
    /// `SET`.
    Set,
    /// `SHOW`.
    Show,
    /// `DESCRIBE`, `DESC`, `EXPLAIN`.
    Explain,
    /// `USE db`.
    Use,
    /// `BEGIN`, `START TRANSACTION`.
    Begin,
    /// `COMMIT`.
    Commit,
    /// `ROLLBACK` (not `ROLLBACK TO SAVEPOINT`, which is [`Command::Other`]).
    Rollback,
    /// `CALL`.
    Call,
    /// `KILL`.
    Kill,
    /// `LOAD DATA` / `LOAD XML`.
    Load,
    /// DDL: `CREATE`, `ALTER`, `DROP`, `TRUNCATE`, `RENAME`.
    Ddl,
    /// Nothing but whitespace and comments.
    #[default]
    Empty,
    /// Anything else.
    Other,
}

/// Session-state effects and dependencies found in the text, as bit flags.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Effects(pub u32);

macro_rules! effects {
    ($($(#[$m:meta])* $name:ident = $bit:expr;)*) => {
        impl Effects {
            $($(#[$m])* pub const $name: Effects = Effects(1 << $bit);)*
        }
    };
}

effects! {
    /// Assigns a user variable (`SET @x`, `@x :=`, `INTO @x`).
    USER_VAR_WRITE = 0;
    /// Reads a user variable.
    USER_VAR_READ = 1;
    /// Sets session system variables (`SET x=`, `SET NAMES`, `SET SESSION ...`).
    SESSION_SET = 2;
    /// Starts a transaction (`BEGIN`, `START TRANSACTION`).
    TRX_BEGIN = 3;
    /// Ends a transaction (`COMMIT`, `ROLLBACK`).
    TRX_END = 4;
    /// `LOCK TABLES` or `FLUSH TABLES ... WITH READ LOCK`.
    LOCK_TABLES = 5;
    /// `UNLOCK TABLES`.
    UNLOCK_TABLES = 6;
    /// `CREATE TEMPORARY TABLE`.
    TEMP_TABLE_CREATE = 7;
    /// `DROP [TEMPORARY] TABLE`.
    TABLE_DROP = 8;
    /// Calls a user-level lock function (`GET_LOCK`, `RELEASE_LOCK`, `IS_USED_LOCK` ...).
    LOCK_FUNCTION = 9;
    /// Text-protocol `PREPARE`.
    TEXT_PREPARE = 10;
    /// Text-protocol `EXECUTE`.
    TEXT_EXECUTE = 11;
    /// `DEALLOCATE PREPARE` / `DROP PREPARE`.
    TEXT_DEALLOCATE = 12;
    /// `SQL_CALC_FOUND_ROWS`.
    CALC_FOUND_ROWS = 13;
    /// Depends on the previous statement: `FOUND_ROWS()`, `ROW_COUNT()`, `SHOW WARNINGS`,
    /// `SHOW ERRORS`, `@@warning_count`, `@@error_count`, `GET DIAGNOSTICS`.
    PREV_STATEMENT = 14;
    /// Reads the session's last insert id: `LAST_INSERT_ID()`, `@@identity`, `@@last_insert_id`.
    LAST_INSERT_ID_READ = 15;
    /// Sets it: `LAST_INSERT_ID(expr)`.
    LAST_INSERT_ID_SET = 16;
    /// `USE db`.
    USE_DB = 17;
    /// `XA START` / `XA BEGIN`.
    XA_START = 18;
    /// `XA COMMIT` / `XA ROLLBACK`.
    XA_END = 19;
    /// `SET TRANSACTION ...` without a scope: applies to the next transaction only.
    TRX_CHARACTERISTICS = 20;
    /// State the server does not report and the proxy cannot follow (`HANDLER`, `SET ROLE`).
    UNTRACKED = 21;
    /// `LOAD DATA LOCAL INFILE` / `LOAD XML LOCAL`.
    LOAD_LOCAL = 22;
    /// More than one statement in the text.
    MULTI = 23;
    /// Calls `CONNECTION_ID()`.
    CONNECTION_ID = 24;
    /// Calls a function the proxy does not know (a stored function).
    UNKNOWN_FUNCTION = 25;
    /// Sets one of the `session_track_*` variables the proxy relies on.
    SESSION_TRACK_SET = 26;
    /// `SET GLOBAL` / `SET @@global.`.
    GLOBAL_SET = 27;
    /// `CALL`: a procedure may change anything, including LAST_INSERT_ID().
    PROCEDURE_CALL = 28;
    /// May commit an open transaction: `COMMIT`, `BEGIN` (commits the open one), DDL, `SET`
    /// (`autocommit=1`), `LOCK`/`UNLOCK TABLES`, `CALL`, and statements not classified. Plain
    /// `SELECT`/DML/`SHOW`/`ROLLBACK` never do.
    MAY_COMMIT = 29;
    /// Reads a connection (thread) id other than through `CONNECTION_ID()`: `IS_USED_LOCK()`,
    /// `@@pseudo_thread_id`.
    THREAD_ID_READ = 30;
}

impl Effects {
    /// True if every bit of `other` is set.
    pub fn contains(self, other: Effects) -> bool {
        self.0 & other.0 == other.0
    }
    /// True if any bit of `other` is set.
    pub fn intersects(self, other: Effects) -> bool {
        self.0 & other.0 != 0
    }
    /// True if no bit is set.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl std::ops::BitOr for Effects {
    type Output = Effects;
    fn bitor(self, o: Effects) -> Effects {
        Effects(self.0 | o.0)
    }
}

impl std::ops::BitOrAssign for Effects {
    fn bitor_assign(&mut self, o: Effects) {
        self.0 |= o.0;
    }
}

/// A `KILL` statement's target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kill {
    /// `KILL QUERY`: abort the running statement but keep the connection.
    pub query_only: bool,
    /// The connection id the client named.
    pub id: u64,
}

/// What the scanner learned about a statement text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scan {
    /// Whether the text can go to a replica.
    pub route: Option<Route>,
    /// The first statement's command.
    pub command: Command,
    /// Session-state effects of all statements in the text.
    pub effects: Effects,
    /// Number of statements (more than one with multi-statements).
    pub statements: u32,
    /// Span of a `sluice:<target>` routing hint's target in the text.
    pub hint: Option<(usize, usize)>,
    /// Target of a single `KILL` statement.
    pub kill: Option<Kill>,
}

impl Scan {
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

/// Scanner options that depend on the session.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// The session's sql_mode contains `NO_BACKSLASH_ESCAPES`.
    pub no_backslash_escapes: bool,
}

/// Scans a statement text (one or several statements).
pub fn scan(sql: &[u8]) -> Scan {
    scan_with(sql, Options::default())
}

/// Scans a statement text with session-dependent options.
pub fn scan_with(sql: &[u8], opts: Options) -> Scan {
    let mut cur = Cursor {
        lx: Lexer::new(sql).no_backslash_escapes(opts.no_backslash_escapes),
        src: sql,
        peeked: None,
        hint: None,
    };
    let mut out = Scan::default();
    while let Some(first) = cur.next() {
        if first.is_punct(b';') {
            continue;
        }
        let st = statement(&mut cur, first);
        out.statements += 1;
        if out.statements == 1 {
            out.command = st.command;
            out.kill = st.kill;
        } else {
            out.kill = None;
            out.effects |= Effects::MULTI;
        }
        out.effects |= st.effects;
        if !matches!(
            st.command,
            Command::Select
                | Command::Insert
                | Command::Update
                | Command::Delete
                | Command::Replace
                | Command::Show
                | Command::Explain
                | Command::Use
                | Command::Rollback
                | Command::Kill
                | Command::Load
                | Command::Empty
        ) {
            out.effects |= Effects::MAY_COMMIT;
        }
        out.route = Some(match (out.route, st.route) {
            (Some(Route::Write), _) | (_, Route::Write) => Route::Write,
            _ => Route::Read,
        });
    }
    out.hint = cur.hint;
    out
}
