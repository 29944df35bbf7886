//! Session state that follows a client across pooled server connections: the settings it
//! made (its startup parameters, then every `SET`/`RESET`), replayed as differences on each
//! connection that serves it; and the state that cannot move (temporary tables, session
//! advisory locks, `LISTEN`, ...), which pins the session to its connection until it is gone.

pub use super::reports::{blind_reports, kept_reports, reports_blind};
use super::startup::startup_statements;
pub use super::startup::{quote_ident, quote_literal, startup_options};
use super::unreadable::unreadable_encoding;
pub use super::unreadable::{
    blinds_scanner, boolean_set, encoding_set, parse_bool, sets_unreadable_encoding,
    turns_conforming_strings_off, CLIENT_ENCODING, CONFORMING_STRINGS,
};
use crate::backend::conn::StartupSettings;
use sluice_runtime::intern::Interner;
use std::collections::BTreeMap;
use std::sync::Arc;

mod block;
pub mod pin;
mod unit_resets;

use block::BlockChanges;
pub use unit_resets::UnitResets;

/// Settings of its own (names `SET` or `RESET` since the startup, and those waiting for their
/// transaction block to commit) a session may have sluice keep at most: sluice replays each
/// on every connection that serves the session, so a client could otherwise make it hold
/// any amount of memory. Far beyond what applications set (a few, tens with an ORM).
pub const MAX_MADE: usize = 1000;

/// The most bytes (names and statements) of those settings.
pub const MAX_MADE_BYTES: usize = 1 << 20;

/// The parameter whose `SET` may change one of its parts only.
const DATESTYLE: &str = "datestyle";

/// The settings a session wants on whichever connection serves it.
#[derive(Debug, Default)]
pub struct Settings {
    /// From the startup packet: name → the statement that sets it, sorted by name (a few
    /// entries: a list costs an idle session far less than a map), shared by the sessions
    /// that started alike. `RESET` returns to these.
    startup: Arc<StartupSettings>,
    /// Made with `SET` since: name → the statement; `None` for a `RESET` of a startup value
    /// (back to the server's default).
    made: BTreeMap<String, Option<String>>,
    /// What the open transaction block changed (boxed, and only while it changed
    /// something: every idle session carries the field).
    block: Option<Box<BlockChanges>>,
    /// Bumped on every change (a connection synced at this generation needs nothing).
    generation: u64,
    /// The startup parameters a change reset on the server, a bit per entry of `startup`
    /// (all bits: all of them, also those past the 32nd): there they are the server's
    /// defaults now (its connections start without the client's startup parameters), not
    /// the startup values PostgreSQL would return to directly. (A word beside `traits`:
    /// every idle session carries it.)
    startup_reset: u32,
    /// What the settings in force say that routing must know (`SERIALIZABLE`,
    /// `BACKSLASH_QUOTES`): found when they change, not on every statement.
    traits: u8,
    /// `analysis` is the fingerprint of this generation's settings (see
    /// [`Settings::analysis_fingerprint`]).
    analysed: bool,
    /// The fingerprint of the analysis settings, once asked for at this generation.
    analysis: u64,
}

/// What a connection's record of settings holds for a startup parameter a `RESET` returned
/// to the server's default there: no statement's text, so that the session (and any other)
/// sets the parameter again, or resets it, as it wants it.
pub const SERVER_DEFAULT: &str = "-- the server's default";

/// [`Settings::traits`]: transactions are serializable by default.
const SERIALIZABLE: u8 = 1;
/// [`Settings::traits`]: `standard_conforming_strings` is off.
const BACKSLASH_QUOTES: u8 = 2;
/// [`Settings::traits`]: the client's encoding is one the scanner cannot read.
const UNREADABLE_ENCODING: u8 = 4;
/// [`Settings::traits`]: transactions are repeatable read (or serializable) by default: one
/// snapshot for all their statements.
const ONE_SNAPSHOT: u8 = 8;

/// One `SET` or `RESET`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// `SET name ...`: the statement replaying it.
    Set(String, String),
    /// `RESET name` (or `SET name TO DEFAULT`).
    Reset(String),
    /// `RESET ALL` (the role stays, as in PostgreSQL).
    ResetAll,
    /// `DISCARD ALL` (the role goes too).
    DiscardAll,
    /// `SET LOCAL name ...`: the statement. It changes nothing past its transaction, but in
    /// it, it overrides a startup value a `RESET` before it asked for again.
    SetLocal(String, String),
}

impl Settings {
    /// Settings starting from the client's startup parameters (name, value), shared through
    /// `interner` with the sessions that started alike.
    pub fn from_startup<'a>(
        params: impl Iterator<Item = (&'a str, &'a str)>,
        interner: &Interner<StartupSettings>,
    ) -> Settings {
        Settings {
            startup: interner.intern(&startup_statements(params)),
            generation: 1,
            ..Default::default()
        }
        .refreshed()
    }

    /// As [`Settings::from_startup`], for parameters that `packet` (the startup packet's
    /// parameters as received) determines: a packet like the last one costs no statements
    /// made, nor their hashing.
    pub fn from_startup_packet<'a>(
        packet: &[u8],
        params: impl Iterator<Item = (&'a str, &'a str)>,
        interner: &Interner<StartupSettings>,
    ) -> Settings {
        Settings {
            startup: interner.intern_made(packet, || startup_statements(params)),
            generation: 1,
            ..Default::default()
        }
        .refreshed()
    }

    /// Its generation: changes with every applied change.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// A change applied: a new generation, whose analysis fingerprint is not known yet.
    fn changed(&mut self) {
        self.generation += 1;
        self.analysed = false;
    }

    /// The fingerprint of the analysis settings in force (see
    /// [`crate::backend::statements::analysis_fingerprint`]), computed once per generation.
    pub fn analysis_fingerprint(&mut self) -> u64 {
        if !self.analysed {
            self.analysis = crate::backend::statements::analysis_fingerprint(&self.desired());
            self.analysed = true;
        }
        self.analysis
    }

    /// Applies a change made outside a transaction block (or a committed one's).
    pub fn apply(&mut self, change: Change) {
        match change {
            // Outside a transaction block it does nothing (PostgreSQL warns).
            Change::SetLocal(..) => return,
            Change::Set(name, stmt) => {
                self.made.insert(name, Some(stmt));
            }
            Change::Reset(name) => {
                if self.startup.iter().any(|(n, _)| **n == *name) {
                    // PostgreSQL resets a startup parameter to its startup value.
                    self.made.remove(&name);
                    self.startup_reset |= match self.startup.iter().position(|(n, _)| **n == *name)
                    {
                        Some(i) if i < 32 => 1 << i,
                        _ => u32::MAX,
                    };
                } else {
                    self.made.insert(name, None);
                }
            }
            Change::ResetAll => {
                self.made.retain(|name, _| name == "role");
                if !self.startup.is_empty() {
                    self.startup_reset = u32::MAX;
                }
            }
            Change::DiscardAll => {
                self.made.clear();
                if !self.startup.is_empty() {
                    self.startup_reset = u32::MAX;
                }
            }
        }
        self.changed();
        self.traits = self.found_traits();
    }

    /// Keeps the session's `DateStyle` as the server reports it (in `reported`, the values
    /// the client was last told) once a `SET` made it: a `SET` may give one of its two parts
    /// (the output format, or the order of a date's fields) and keep the other, so the
    /// statement alone would not say the setting again on another connection.
    pub fn settle_datestyle(&mut self, reported: &BTreeMap<String, String>) {
        let Some(Some(stmt)) = self.made.get_mut(DATESTYLE) else {
            return;
        };
        if let Some(reported) = reported.get("DateStyle") {
            let settled = format!("SET DateStyle = {}", quote_literal(reported));
            if *stmt != settled {
                *stmt = settled;
                self.changed();
            }
        }
    }

    /// Forgets a setting the session made that the server removed: a custom one whose prefix
    /// an extension reserved since (PostgreSQL removes it from a session the same way).
    pub fn forget(&mut self, name: &str) {
        if self.made.remove(name).is_some() {
            self.changed();
            self.traits = self.found_traits();
        }
    }

    /// The custom settings (`prefix.name`) the session made: name and statement.
    pub fn made_custom(&self) -> impl Iterator<Item = (&str, &str)> {
        self.made
            .iter()
            .filter(|(n, _)| n.contains('.'))
            .filter_map(|(n, s)| Some((n.as_str(), s.as_deref()?)))
    }

    fn refreshed(mut self) -> Settings {
        self.traits = self.found_traits();
        self
    }

    fn found_traits(&self) -> u8 {
        const ISOLATION: &str = "default_transaction_isolation";
        let isolation = |value: &[u8]| {
            self.statement(ISOLATION).is_some_and(|s| {
                s.as_bytes()
                    .windows(value.len())
                    .any(|w| w.eq_ignore_ascii_case(value))
            })
        };
        let serializable = isolation(b"serializable");
        let repeatable = isolation(b"repeatable");
        let backslash = self
            .statement(CONFORMING_STRINGS)
            .is_some_and(|s| boolean_set(s, CONFORMING_STRINGS) == Some(false));
        let mut traits = 0;
        if serializable {
            traits |= SERIALIZABLE | ONE_SNAPSHOT;
        }
        if repeatable {
            traits |= ONE_SNAPSHOT;
        }
        if backslash {
            traits |= BACKSLASH_QUOTES;
        }
        if self
            .statement(CLIENT_ENCODING)
            .is_some_and(unreadable_encoding)
        {
            traits |= UNREADABLE_ENCODING;
        }
        traits
    }

    /// True if applied changes reset startup parameters on the server, not yet taken (a
    /// `COMMIT AND CHAIN` keeps it for the end of the chained block).
    pub fn startup_reset_pending(&self) -> bool {
        self.startup_reset != 0
    }

    /// The startup parameters applied changes reset on the server (once): they are to be
    /// set again there.
    pub fn take_startup_resets(&mut self) -> Vec<Box<str>> {
        let bits = std::mem::take(&mut self.startup_reset);
        self.startup
            .iter()
            .enumerate()
            .filter(|(i, _)| bits == u32::MAX || (*i < 32 && bits & (1 << i) != 0))
            .map(|(_, (n, _))| n.clone())
            .collect()
    }

    /// Follows, statement by statement through a unit, which of the session's startup
    /// parameters its changes return to the server's defaults (see [`UnitResets`]); from
    /// those a `RESET` in the open block returned there, and not set again yet, when
    /// `carried` (the unit goes on a batch the server has not reached the Sync of: sluice
    /// sets nothing there).
    pub fn unit_resets(&self, carried: bool) -> UnitResets<'_> {
        let mut resets = UnitResets::new(&self.startup);
        if carried {
            for name in self.block.iter().flat_map(|b| b.resets.iter()) {
                resets.reset(name);
            }
        }
        resets
    }

    /// True if a `RESET` in the open block returned startup parameters to the server's
    /// defaults that are not set again yet.
    pub fn has_block_resets(&self) -> bool {
        self.block.as_ref().is_some_and(|b| !b.resets.is_empty())
    }

    /// The statement that sets the startup parameter `name` (lower case), if the startup
    /// packet gave it.
    pub fn startup_statement(&self, name: &str) -> Option<&str> {
        self.startup
            .iter()
            .find(|(n, _)| **n == *name)
            .map(|(_, s)| &**s)
    }

    /// Why `changes` (a unit's, in order) would take the settings the session made past
    /// [`MAX_MADE`] or [`MAX_MADE_BYTES`]; `None` when they fit. Inside a transaction block
    /// (`in_block`) each change waits as an entry of its own until the block ends; outside,
    /// a `SET` of a name already made replaces it. (`SET LOCAL` keeps nothing past its
    /// block; `RESET ALL` and `DISCARD ALL` start the count again.)
    pub fn over_bounds<'a>(
        &self,
        changes: impl Iterator<Item = &'a Change>,
        in_block: bool,
    ) -> Option<String> {
        let pending = self.block.as_ref().map_or(&[][..], |b| &b.pending[..]);
        let mut names = self.made.len() + pending.len();
        let mut bytes: usize = self
            .made
            .iter()
            .map(|(n, s)| n.len() + s.as_ref().map_or(0, String::len))
            .chain(pending.iter().map(change_bytes))
            .sum();
        for c in changes {
            let replaced = match c {
                Change::Set(name, _) | Change::Reset(name) if !in_block => {
                    self.made.get_key_value(name)
                }
                Change::ResetAll | Change::DiscardAll => {
                    (names, bytes) = (0, 0);
                    continue;
                }
                Change::SetLocal(..) => continue,
                _ => None,
            };
            match replaced {
                Some((name, old)) => {
                    bytes = bytes.saturating_sub(name.len() + old.as_ref().map_or(0, String::len))
                }
                None => names += 1,
            }
            bytes += change_bytes(c);
        }
        (names > MAX_MADE || bytes > MAX_MADE_BYTES).then(|| {
            format!(
                "sluice: a session keeps at most {MAX_MADE} settings of its own ({MAX_MADE_BYTES} bytes); RESET some first"
            )
        })
    }

    /// True if a connection with `applied` has exactly what [`Settings::desired`] says (checked
    /// without building it: the common case, a connection last used by a session with the
    /// same settings, costs no allocation).
    pub fn matches(&self, applied: &BTreeMap<String, String>) -> bool {
        let mut n = 0;
        for (name, stmt) in self.startup.iter() {
            if self.made.contains_key(&**name) {
                continue;
            }
            if applied.get(&**name).map(String::as_str) != Some(&**stmt) {
                return false;
            }
            n += 1;
        }
        for (name, stmt) in &self.made {
            if let Some(stmt) = stmt {
                if applied.get(name) != Some(stmt) {
                    return false;
                }
                n += 1;
            }
        }
        n == applied.len()
    }

    /// The statement that gives parameter `name` (lower case) its value in force, if any
    /// (a `SET` outside a transaction block or in a committed one, else the startup value).
    pub fn statement(&self, name: &str) -> Option<&str> {
        match self.made.get(name) {
            Some(made) => made.as_deref(),
            None => self
                .startup
                .iter()
                .find(|(n, _)| **n == *name)
                .map(|(_, s)| &**s),
        }
    }

    /// True if the session's string literals take backslash escapes
    /// (`standard_conforming_strings` off, by a `SET` or at its startup).
    #[cfg(test)]
    pub fn backslash_quotes(&self) -> bool {
        self.traits & BACKSLASH_QUOTES != 0
    }

    /// The pins that the settings in force say the scanner cannot read the session's
    /// statements for ([`pin::BACKSLASH_QUOTES`], [`pin::UNREADABLE_ENCODING`]); 0 if none.
    pub fn blind_pins(&self) -> u32 {
        let mut pins = 0;
        if self.traits & BACKSLASH_QUOTES != 0 {
            pins |= pin::BACKSLASH_QUOTES;
        }
        if self.traits & UNREADABLE_ENCODING != 0 {
            pins |= pin::UNREADABLE_ENCODING;
        }
        pins
    }

    /// True if the session's transactions are serializable unless they say otherwise
    /// (`default_transaction_isolation`, set by the client or at its startup).
    pub fn serializable_by_default(&self) -> bool {
        self.traits & SERIALIZABLE != 0
    }

    /// Transactions are repeatable read or serializable by default (as the session set it):
    /// all statements of one see one snapshot.
    pub fn one_snapshot_by_default(&self) -> bool {
        self.traits & ONE_SNAPSHOT != 0
    }

    /// The startup settings, when they are all a connection must have (nothing was made
    /// since: [`Settings::desired`] is exactly them).
    pub fn startup_only(&self) -> Option<&Arc<StartupSettings>> {
        self.made.is_empty().then_some(&self.startup)
    }

    /// What a connection must have: parameter name → the statement setting it.
    pub fn desired(&self) -> BTreeMap<String, String> {
        let mut d: BTreeMap<String, String> = self
            .startup
            .iter()
            .map(|(n, s)| (n.to_string(), s.to_string()))
            .collect();
        for (name, stmt) in &self.made {
            match stmt {
                Some(s) => {
                    d.insert(name.clone(), s.clone());
                }
                None => {
                    d.remove(name);
                }
            }
        }
        d
    }
}

/// What keeping `change` takes: its name and statement.
fn change_bytes(change: &Change) -> usize {
    match change {
        Change::Set(name, stmt) | Change::SetLocal(name, stmt) => name.len() + stmt.len(),
        Change::Reset(name) => name.len(),
        Change::ResetAll | Change::DiscardAll => 0,
    }
}

/// The statements that turn a connection with `applied` settings into one with `desired`
/// ones (one simple query), or `None` when they already agree. The role comes last, the other
/// settings changed as the login user: a client may make a setting its role may not (a
/// superuser's `session_replication_role` before `SET ROLE` to an application role), never
/// one its login user may not (`SET ROLE` to a more privileged role, then a setting only it
/// may make, is the exception).
pub fn difference(
    applied: &BTreeMap<String, String>,
    desired: &BTreeMap<String, String>,
) -> Option<String> {
    const ROLE: &str = "role";
    let mut sql = String::new();
    let settings_change = !applied
        .iter()
        .filter(|(k, _)| *k != ROLE)
        .eq(desired.iter().filter(|(k, _)| *k != ROLE));
    let (role_now, role_wanted) = (applied.get(ROLE), desired.get(ROLE));
    // Back to the login user before the settings change (and for good, unless one is wanted).
    let role_reset = role_now.is_some() && (settings_change || role_wanted.is_none());
    if role_reset {
        sql.push_str("RESET ROLE;");
    }
    for name in applied
        .keys()
        .filter(|k| *k != ROLE && !desired.contains_key(*k))
    {
        if name.contains('.') {
            // A custom setting: PostgreSQL removes it from the connection when an extension
            // loaded since reserves its prefix, and a RESET of it then fails (42602). Reset
            // only if it is still there.
            let name = quote_literal(name);
            sql.push_str(&format!(
                "SELECT pg_catalog.set_config({name}, NULL, false) \
                 WHERE pg_catalog.current_setting({name}, true) IS NOT NULL;"
            ));
        } else {
            sql.push_str(&format!("RESET {};", quote_ident(name)));
        }
    }
    for (name, stmt) in desired.iter().filter(|(k, _)| *k != ROLE) {
        if applied.get(name) != Some(stmt) {
            sql.push_str(stmt);
            // On a line of its own: a client's SET may end with a `--` comment.
            sql.push_str("\n;");
        }
    }
    if let Some(stmt) = role_wanted.filter(|r| role_reset || role_now != Some(*r)) {
        sql.push_str(stmt);
        sql.push_str("\n;");
    }
    (!sql.is_empty()).then_some(sql)
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
