//! What the PostgreSQL scanner's findings mean for a session: where a statement text may run,
//! the settings it changes, the state it pins or releases, and how it moves the transaction.

mod characteristics;
mod cursors;

pub use cursors::CursorOp;

use crate::frontend::state::{pin, Change};
use sluice_core::router::Route;
use sluice_sqlscan::postgres::{self as scan, PgCommand, PgScan, Pins, Unpins};

/// One statement text (a simple query, or a prepared statement's text), classified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scanned {
    /// Where it may run.
    pub route: Route,
    /// Span of a `sluice:<target>` hint in the text.
    pub hint: Option<(usize, usize)>,
    /// The settings it changes, in order (`SET LOCAL` is left out: it stays in its
    /// transaction).
    pub changes: Vec<Change>,
    /// Pin bits it sets.
    pub pins: u32,
    /// Pin bits it clears.
    pub unpins: u32,
    /// It commits a transaction block (`COMMIT`, `END`).
    pub commits: bool,
    /// It rolls one back (`ROLLBACK`, `ABORT`).
    pub rolls_back: bool,
    /// `PREPARE TRANSACTION`: ends the block, which keeps its settings as a commit does
    /// (its work waits, prepared).
    pub prepares: bool,
    /// `ROLLBACK TO SAVEPOINT`.
    pub to_savepoint: bool,
    /// `CALL` or `DO`: a procedure or a `DO` block may `COMMIT` or `ROLLBACK` the
    /// transaction it runs in (where PostgreSQL lets it: an extended-protocol statement
    /// outside a block, which ends the implicit transaction of the statements before it).
    pub may_end_transaction: bool,
    /// `COMMIT AND CHAIN` (true) or `ROLLBACK AND CHAIN` (false): the transaction ends and
    /// the next one is open at once.
    pub chains: Option<bool>,
    /// `BEGIN` / `START TRANSACTION`: whether it asks for a read-only and a serializable one.
    pub begin: Option<(bool, bool)>,
    /// `SET TRANSACTION READ ONLY` (not serializable).
    pub read_only_txn: bool,
    /// `SET TRANSACTION READ WRITE` or `... SERIALIZABLE`: a transaction that only a primary
    /// can run from then on (a standby refuses both).
    pub primary_txn: bool,
    /// `DEALLOCATE name` (not ALL): the name.
    pub deallocate: Option<String>,
    /// `COPY … FROM STDIN` (or from a file): an Execute of it may start COPY FROM STDIN.
    pub copy_in: bool,
    /// Number of statements in the text.
    pub statements: u32,
    /// The id of its digest (its shape, literals taken out: see
    /// [`sluice_sqlscan::postgres::digest_text`]).
    pub digest: u64,
    /// When it writes only because its queries call functions the scanner does not know:
    /// those functions' names (as PostgreSQL resolves them: unquoted ones in lower case).
    pub user_calls: Option<Box<[String]>>,
    /// The parameters its `set_config` calls may set for the session, to be read back from
    /// the server once it ran (see [`Pins::SET_CONFIG_READ`]).
    pub read_back: Option<Box<[String]>>,
    /// What it does to the session's `WITH HOLD` cursors, in order.
    pub cursors: Vec<CursorOp>,
    /// It may read settings: it is (of a text of several, one of them is) a statement other
    /// than a `SET`, `RESET`, `DISCARD` or transaction control.
    pub reads_settings: bool,
    /// A text of several statements where such a statement follows a `RESET` (`RESET ALL`,
    /// `SET … TO DEFAULT`, `DISCARD ALL`): for each one that does, how many of `changes`
    /// the statements before it made, and whether it may read `application_name` (see
    /// [`reads_application_name`], [`crate::frontend::state::UnitResets`]).
    pub reads_after_reset: Option<Box<[(usize, bool)]>>,
}

/// Classifies a statement text: from the thread's scans kept by shape when it has the text's
/// (see [`crate::scan_cache`]), else scanned.
pub fn classify(sql: &[u8]) -> std::sync::Arc<Scanned> {
    crate::scan_cache::classify(sql)
}

/// Classifies a statement text by scanning it; with whether the result holds for every text
/// of its shape ([`PgScan::same_for_shape`]: then it was made from the scan alone, nothing
/// read from the text).
pub(crate) fn scanned(sql: &[u8]) -> (Scanned, bool) {
    let whole = scan::scan(sql);
    let mut out = Scanned {
        route: match whole.route() {
            // A read of the server's own state (its locks, statistics, prepared
            // transactions...) is answered by the primary, as by the one server a client
            // takes the endpoint for.
            scan::Route::Read if scan::reads_server_state(sql) => Route::Write,
            scan::Route::Read => Route::Read,
            scan::Route::Write => Route::Write,
        },
        hint: whole.hint,
        changes: Vec::new(),
        pins: 0,
        unpins: 0,
        commits: false,
        rolls_back: false,
        prepares: false,
        to_savepoint: false,
        may_end_transaction: false,
        chains: None,
        begin: None,
        read_only_txn: false,
        primary_txn: false,
        deallocate: None,
        copy_in: false,
        statements: whole.statements,
        digest: whole.digest,
        user_calls: whole.user_calls.as_ref().map(|spans| {
            spans
                .iter()
                .map(|&(s, e)| function_name(&sql[s..e]))
                .collect()
        }),
        read_back: whole
            .pins
            .contains(Pins::SET_CONFIG_READ)
            .then(|| scan::set_config_names(sql).into()),
        cursors: Vec::new(),
        reads_settings: false,
        reads_after_reset: None,
    };
    if whole.statements <= 1 {
        out.add(sql, &whole);
        out.reads_settings = reads_settings(&whole);
    } else {
        let mut reset = false;
        let mut reads = Vec::new();
        for (s, e) in scan::statements(sql) {
            let one = scan::scan(&sql[s..e]);
            if reads_settings(&one) {
                out.reads_settings = true;
                if reset {
                    let names = reads_application_name(&sql[s..e]);
                    match reads.last_mut() {
                        Some((at, n)) if *at == out.changes.len() => *n |= names,
                        _ => reads.push((out.changes.len(), names)),
                    }
                }
            }
            out.add(&sql[s..e], &one);
            reset |= one.set.as_ref().is_some_and(|set| set.reset)
                || one.unpins.contains(Unpins::DISCARD_ALL);
        }
        out.reads_after_reset = (!reads.is_empty()).then(|| reads.into());
        let controls = out.commits_block()
            || out.rolls_back
            || out.chains.is_some()
            || out.begin.is_some()
            || out.to_savepoint;
        if controls && (out.changes_session() || out.unpins != 0) {
            // See `pin::TEXT_TRANSACTION`: what it released may have been rolled back.
            out.pins |= pin::TEXT_TRANSACTION;
            out.unpins = 0;
        }
    }
    (out, whole.same_for_shape())
}

impl Scanned {
    /// It ends the transaction block keeping what the block did to the session: `COMMIT`,
    /// or `PREPARE TRANSACTION` (whose work waits, prepared).
    pub fn commits_block(&self) -> bool {
        self.commits || self.prepares
    }

    /// It changes settings (for the session or, with `SET LOCAL`, its transaction).
    pub fn changes_settings(&self) -> bool {
        !self.changes.is_empty()
    }

    /// It changes the session's settings (more than `SET LOCAL`s).
    pub fn changes_session(&self) -> bool {
        self.changes
            .iter()
            .any(|c| !matches!(c, Change::SetLocal(..)))
    }

    fn add(&mut self, sql: &[u8], s: &PgScan) {
        let mut pins = pin_bits(s.pins);
        if s.pins.contains(Pins::SESSION_CHARACTERISTICS) {
            // Read as the `SET`s it makes, it moves with the session's settings.
            if let Some(changes) = characteristics::settings(sql) {
                self.changes.extend(changes);
                pins &= !pin::SESSION_CHARACTERISTICS;
            }
        }
        self.pins |= pins;
        if s.pins.contains(Pins::WITH_HOLD) {
            self.cursors.push(CursorOp::Hold(cursors::declared(sql)));
        } else if s.command == PgCommand::Other {
            // (`CLOSE` is among the other commands: the rest are not read again.)
            if let Some(name) = cursors::closed(sql) {
                self.cursors.push(CursorOp::Close(name));
            }
        }
        self.unpins |= unpin_bits(s.unpins);
        if s.unpins.contains(Unpins::DISCARD_ALL) {
            self.changes.push(Change::DiscardAll);
        }
        // SET and RESET SESSION AUTHORIZATION end a SET ROLE.
        if s.pins.contains(Pins::SESSION_AUTHORIZATION)
            || s.unpins.contains(Unpins::RESET_SESSION_AUTHORIZATION)
        {
            self.changes.push(Change::Reset("role".into()));
        }
        match s.command {
            PgCommand::Commit => self.commits = true,
            PgCommand::PrepareTransaction => self.prepares = true,
            PgCommand::Rollback => self.rolls_back = true,
            PgCommand::CommitAndChain => self.chains = Some(true),
            PgCommand::RollbackAndChain => self.chains = Some(false),
            PgCommand::RollbackToSavepoint => self.to_savepoint = true,
            PgCommand::Call | PgCommand::Do => self.may_end_transaction = true,
            PgCommand::Begin {
                read_only,
                serializable,
            } => self.begin = Some((read_only == Some(true), serializable)),
            PgCommand::SetTransaction {
                read_only,
                serializable,
            } => {
                self.read_only_txn = read_only == Some(true) && !serializable;
                self.primary_txn |= read_only == Some(false) || serializable;
            }
            PgCommand::Deallocate { all: false } => {
                self.deallocate = deallocated_name(sql);
            }
            PgCommand::Copy {
                from_stdin_or_file: true,
            } => self.copy_in = true,
            _ => {}
        }
        if let Some(set) = &s.set {
            if set.name == "all" && set.reset {
                self.changes.push(Change::ResetAll);
            } else if set.reset {
                self.changes.push(Change::Reset(set.name.clone()));
            } else {
                let text = String::from_utf8_lossy(sql)
                    .trim()
                    .trim_end_matches(';')
                    .to_string();
                if set.local {
                    self.changes.push(Change::SetLocal(set.name.clone(), text));
                } else {
                    self.changes.push(Change::Set(set.name.clone(), text));
                }
            }
        }
    }
}

/// A statement text that may read `application_name`: one that names it, or a view or
/// function that shows it (`pg_settings`, `pg_stat_activity`, `current_setting`, `SHOW
/// ALL`…), in any case. (A function of the user's that reads it is not seen.)
pub(crate) fn reads_application_name(text: &[u8]) -> bool {
    const NAMES: [&[u8]; 6] = [
        b"application_name",
        b"current_setting",
        b"pg_settings",
        b"pg_stat_activity",
        b"pg_stat_get_activity",
        b"pg_show_all_settings",
    ];
    let has = |word: &[u8]| {
        text.windows(word.len())
            .any(|w| w.eq_ignore_ascii_case(word))
    };
    NAMES.iter().any(|n| has(n)) || (has(b"show") && has(b"all"))
}

/// A statement that may read settings (its answer may depend on them): any but a `SET`,
/// `RESET`, `DISCARD`, or a statement of transaction control.
fn reads_settings(s: &PgScan) -> bool {
    s.set.is_none()
        && !matches!(
            s.command,
            PgCommand::Empty
                | PgCommand::Set
                | PgCommand::Reset
                | PgCommand::Discard { .. }
                | PgCommand::Begin { .. }
                | PgCommand::Commit
                | PgCommand::Rollback
                | PgCommand::CommitAndChain
                | PgCommand::RollbackAndChain
                | PgCommand::RollbackToSavepoint
                | PgCommand::Savepoint
                | PgCommand::Release
                | PgCommand::SetTransaction { .. }
                | PgCommand::PrepareTransaction
        )
}

fn pin_bits(p: Pins) -> u32 {
    let map = [
        (Pins::TEMP_TABLE, pin::TEMP_TABLE),
        (Pins::ADVISORY_LOCK, pin::ADVISORY_LOCK),
        (Pins::LISTEN, pin::LISTEN),
        (Pins::WITH_HOLD, pin::WITH_HOLD),
        (Pins::PREPARE, pin::PREPARE),
        (Pins::LOAD, pin::LOAD),
        (Pins::SESSION_AUTHORIZATION, pin::SESSION_AUTHORIZATION),
        (Pins::SESSION_CHARACTERISTICS, pin::SESSION_CHARACTERISTICS),
        (Pins::SET_CONFIG, pin::SET_CONFIG),
        (Pins::SETSEED, pin::SETSEED),
        (Pins::UNREAD_CALL, pin::UNREAD_CALL),
        (Pins::TEMP_SEARCH_PATH, pin::TEMP_SEARCH_PATH),
    ];
    map.iter()
        .filter(|(f, _)| p.contains(*f))
        .fold(0, |acc, (_, b)| acc | b)
}

fn unpin_bits(u: Unpins) -> u32 {
    let mut bits = 0;
    if u.contains(Unpins::DISCARD_ALL) {
        bits |= pin::TEMP_TABLE
            | pin::ADVISORY_LOCK
            | pin::LISTEN
            | pin::WITH_HOLD
            | pin::PREPARE
            | pin::SESSION_AUTHORIZATION
            | pin::SESSION_CHARACTERISTICS
            | pin::SET_IN_SAVEPOINT
            | pin::SET_CONFIG
            | pin::BACKSLASH_QUOTES
            | pin::UNREADABLE_ENCODING
            | pin::NON_ASCII_SET
            | pin::TEXT_TRANSACTION
            | pin::TEMP_SEARCH_PATH;
    }
    for (f, b) in [
        (Unpins::UNLISTEN_ALL, pin::LISTEN),
        (Unpins::ADVISORY_UNLOCK_ALL, pin::ADVISORY_LOCK),
        (Unpins::DEALLOCATE_ALL, pin::PREPARE),
        (Unpins::DISCARD_TEMP, pin::TEMP_TABLE),
        (
            Unpins::RESET_SESSION_AUTHORIZATION,
            pin::SESSION_AUTHORIZATION,
        ),
        (Unpins::CLOSE_ALL, pin::WITH_HOLD),
    ] {
        if u.contains(f) {
            bits |= b;
        }
    }
    bits
}

/// A called function's name token as PostgreSQL resolves it: a quoted name as it is, an
/// unquoted one in lower case.
fn function_name(token: &[u8]) -> String {
    folded_name(&String::from_utf8_lossy(token))
}

/// A name token as PostgreSQL folds it: a quoted one as it is (`""` is `"`), an unquoted one in
/// lower case (ASCII only, as in UTF-8).
pub(crate) fn folded_name(token: &str) -> String {
    match token.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
        Some(quoted) => quoted.replace("\"\"", "\""),
        None => token.to_ascii_lowercase(),
    }
}

/// The name in `DEALLOCATE [PREPARE] name`, as PostgreSQL folds it.
fn deallocated_name(sql: &[u8]) -> Option<String> {
    // Comments and the `;` at the end left out.
    let mut words = sluice_sqlscan::postgres::tokens(sql)
        .filter(|t| *t != b";")
        .skip(1);
    let mut name = words.next()?;
    if name.eq_ignore_ascii_case(b"prepare") {
        name = words.next()?;
    }
    if words.next().is_some() {
        return None;
    }
    Some(folded_name(std::str::from_utf8(name).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_that_may_read_settings_after_a_reset_are_found() {
        for (text, reads, after) in [
            (&b"SELECT 1"[..], true, None),
            (b"SET DateStyle = ISO", false, None),
            (b"RESET DateStyle", false, None),
            (b"BEGIN", false, None),
            (b"RESET DateStyle; SET DateStyle = 'German'", false, None),
            (b"RESET DateStyle; COMMIT AND CHAIN", false, None),
            (b"SELECT 1; RESET DateStyle", true, None),
            (b"RESET DateStyle; SELECT 1", true, Some(&[(1, false)][..])),
            (
                b"SET DateStyle TO DEFAULT; SHOW DateStyle",
                true,
                Some(&[(1, false)][..]),
            ),
            (
                b"RESET application_name; SELECT 1; SHOW application_name",
                true,
                Some(&[(1, true)][..]),
            ),
            (
                b"RESET ALL; SET a.b = 1; SELECT 1; SELECT 2",
                true,
                Some(&[(2, false)][..]),
            ),
            (
                b"RESET x.y; SELECT 1; SET x.y = 2; SELECT 2",
                true,
                Some(&[(1, false), (2, false)][..]),
            ),
        ] {
            let s = classify(text);
            assert_eq!(
                (s.reads_settings, s.reads_after_reset.as_deref()),
                (reads, after),
                "{}",
                String::from_utf8_lossy(text)
            );
        }
    }

    #[test]
    fn texts_that_may_read_application_name_are_found() {
        for text in [
            &b"SHOW application_name"[..],
            b"select current_setting('Application_Name')",
            b"SELECT * FROM pg_stat_activity",
            b"SELECT * FROM pg_catalog.pg_settings",
            b"show all",
        ] {
            assert!(reads_application_name(text), "{text:?}");
        }
        for text in [
            &b"SELECT 1"[..],
            b"SHOW work_mem",
            b"INSERT INTO t VALUES (1)",
        ] {
            assert!(!reads_application_name(text), "{text:?}");
        }
    }

    #[test]
    fn settings_and_transactions_are_found() {
        let s = classify(b"SET search_path = s1, public;");
        assert_eq!(
            s.changes,
            vec![Change::Set(
                "search_path".into(),
                "SET search_path = s1, public".into()
            )]
        );
        let s = classify(b"CREATE SCHEMA s1; CREATE TABLE s1.only_here (x int); INSERT INTO s1.only_here VALUES (7)");
        assert_eq!((s.route, s.statements), (Route::Write, 3));
        let s = classify(b"SET LOCAL statement_timeout = '1s'");
        assert!(!s.changes_session() && s.changes_settings());
        assert_eq!(
            s.changes,
            vec![Change::SetLocal(
                "statement_timeout".into(),
                "SET LOCAL statement_timeout = '1s'".into()
            )]
        );
        let s = classify(b"RESET ALL");
        assert_eq!(s.changes, vec![Change::ResetAll]);
        let s = classify(b"BEGIN READ ONLY");
        assert_eq!(s.begin, Some((true, false)));
        let s = classify(b"DEALLOCATE \"Foo\"");
        assert_eq!(s.deallocate.as_deref(), Some("Foo"));
        for text in [
            &b"DEALLOCATE d1 -- done"[..],
            b"/* x */ deallocate prepare D1;",
            b"DEALLOCATE\n\td1 ;",
        ] {
            let s = classify(text);
            assert_eq!(s.deallocate.as_deref(), Some("d1"), "{text:?}");
        }
        assert_eq!(classify(b"DEALLOCATE d1 d2").deallocate, None);
        // `SET SESSION CHARACTERISTICS` moves, as the settings it makes.
        let s = classify(b"SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY");
        assert_eq!(s.pins, 0);
        assert_eq!(
            s.changes,
            vec![Change::Set(
                "default_transaction_read_only".into(),
                "SET default_transaction_read_only = on".into()
            )]
        );
        let s = classify(b"SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY READ");
        assert_eq!((s.pins, s.changes.len()), (pin::SESSION_CHARACTERISTICS, 0));
        let s = classify(b"select pg_advisory_lock(1)");
        assert_eq!(s.pins, pin::ADVISORY_LOCK);
        let s = classify(b"SELECT Report_Total(1), app.\"Quoted\"()");
        assert_eq!(
            s.user_calls.as_deref(),
            Some(&["report_total".to_string(), "Quoted".to_string()][..])
        );
    }
}
