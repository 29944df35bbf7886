//! Session state the proxy follows and replays: current schema, session system variables, and
//! the multi-statement option. The same type describes what a client session expects and what
//! a backend connection currently has; [`SyncPlan`] is the difference.
//!
//! Values come from the server's session-state tracker (OK packets), never from parsing the
//! client's SQL, so `SET sql_mode = CONCAT(@@sql_mode, ',X')` is followed exactly.

use crate::wire::ok::{state_changes, StateChange};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Arc;

/// Tracked, replayable session state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrackedState {
    /// Current schema.
    pub schema: Option<String>,
    /// Session system variables that differ from a fresh connection's (lower-case names).
    /// Shared until changed: sessions that never change a variable all point at the same
    /// map, and syncing a backend connection copies a pointer.
    pub vars: Arc<BTreeMap<String, String>>,
    /// Multi-statement option (CLIENT_MULTI_STATEMENTS / COM_SET_OPTION).
    pub multi_statements: bool,
}

/// Non-replayable facts an OK packet's tracker data revealed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrackerEvents {
    /// The server flagged a session-state change.
    pub state_changed: bool,
    /// The schema changed.
    pub schema_changed: bool,
    /// A system variable changed.
    pub vars_changed: bool,
    /// New transaction state string (e.g. `T_______`; `L` in the last place: LOCK TABLES).
    pub trx_state: Option<[u8; 8]>,
    /// New next-transaction characteristics (empty when none are pending).
    pub trx_characteristics: Option<String>,
    /// A `session_track_*` variable changed (the client tried to change proxy-owned settings).
    pub tracking_changed: bool,
    /// A character set variable changed but `collation_connection` was not reported: MariaDB's
    /// tracker leaves it out for `SET NAMES` / `SET CHARACTER SET`, so it must be asked for.
    pub collation_unreported: bool,
}

/// Variables whose changes are not session state to replay: the proxy owns the trackers; the
/// others are read-only, per-statement results, one-shot settings for the next statement or
/// transaction, or synchronised separately (last_insert_id).
fn ignored(name: &str) -> bool {
    name.starts_with("session_track_")
        || matches!(
            name,
            "last_insert_id"
                | "insert_id"
                | "identity"
                | "warning_count"
                | "error_count"
                | "rand_seed1"
                | "rand_seed2"
                | "last_gtid"
                | "in_transaction"
                | "proxy_user"
                | "external_user"
                | "gtid_seq_no"
        )
}

impl TrackedState {
    /// Applies an OK packet's session-state data.
    pub fn apply(&mut self, data: &[u8]) -> TrackerEvents {
        let mut ev = TrackerEvents::default();
        for change in state_changes(data) {
            match change {
                StateChange::SysVar(name, value) => {
                    let name = String::from_utf8_lossy(name).to_ascii_lowercase();
                    if name.starts_with("session_track_") {
                        ev.tracking_changed = true;
                    }
                    if ignored(&name) {
                        continue;
                    }
                    ev.vars_changed = true;
                    if name.starts_with("character_set_") {
                        ev.collation_unreported = true;
                    }
                    Arc::make_mut(&mut self.vars)
                        .insert(name, String::from_utf8_lossy(value).into_owned());
                }
                StateChange::Schema(s) => {
                    ev.schema_changed = true;
                    self.schema = (!s.is_empty()).then(|| String::from_utf8_lossy(s).into_owned());
                }
                StateChange::StateChanged => ev.state_changed = true,
                StateChange::TrxState(s) => {
                    let mut st = [b'_'; 8];
                    let n = s.len().min(8);
                    st[..n].copy_from_slice(&s[..n]);
                    ev.trx_state = Some(st);
                }
                StateChange::TrxCharacteristics(s) => {
                    ev.trx_characteristics = Some(String::from_utf8_lossy(s).into_owned());
                }
                StateChange::Other(_) => {}
            }
        }
        if ev.collation_unreported && state_changes(data).any(|c| matches!(c, StateChange::SysVar(n, _) if n.eq_ignore_ascii_case(b"collation_connection"))) {
            ev.collation_unreported = false;
        }
        ev
    }

    /// sql_mode in force (the session's own, or `baseline` when it never set one).
    pub fn sql_mode<'a>(&'a self, baseline: &'a str) -> &'a str {
        self.vars
            .get("sql_mode")
            .map(String::as_str)
            .unwrap_or(baseline)
    }
}

/// What must be sent to a backend connection so its state matches a session's.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct SyncPlan {
    /// COM_INIT_DB with this schema.
    pub init_db: Option<String>,
    /// The connection has a schema and the session has none: only a reset can clear it.
    pub needs_reset: bool,
    /// One `SET ...` statement for the variables that differ.
    pub set_sql: Option<String>,
    /// COM_SET_OPTION to this multi-statement setting.
    pub multi_statements: Option<bool>,
}

impl SyncPlan {
    /// True if nothing needs to be sent.
    pub fn is_empty(&self) -> bool {
        self.init_db.is_none()
            && !self.needs_reset
            && self.set_sql.is_none()
            && self.multi_statements.is_none()
    }
}

/// The commands that bring `actual` (a backend connection) to `desired` (a session).
pub fn plan(desired: &TrackedState, actual: &TrackedState, extra_set: Option<String>) -> SyncPlan {
    let mut p = SyncPlan::default();
    if desired.schema != actual.schema {
        match &desired.schema {
            Some(s) => p.init_db = Some(s.clone()),
            None => p.needs_reset = true,
        }
    }
    let mut sql = String::new();
    let mut add = |name: &str, value: Option<&str>| {
        sql.push_str(if sql.is_empty() { "SET " } else { ", " });
        sql.push_str("@@session.");
        sql.push_str(name);
        sql.push('=');
        match value {
            Some(v) => push_value(&mut sql, name, v),
            None => sql.push_str("DEFAULT"),
        }
    };
    // The same map (the usual case: syncing shares the session's map with the connection,
    // and sessions that never set a variable share one per collation): nothing to compare.
    if !Arc::ptr_eq(&desired.vars, &actual.vars) {
        // Variables are applied in name order, which puts collation_connection after
        // character_set_connection (setting the latter resets the former).
        for (name, value) in desired.vars.iter() {
            if actual.vars.get(name) != Some(value) {
                add(name, Some(value));
            }
        }
        for name in actual.vars.keys() {
            if !desired.vars.contains_key(name) {
                add(name, None);
            }
        }
    }
    if let Some(extra) = extra_set {
        sql.push_str(if sql.is_empty() { "SET " } else { ", " });
        sql.push_str(&extra);
    }
    if !sql.is_empty() {
        p.set_sql = Some(sql);
    }
    if desired.multi_statements != actual.multi_statements {
        p.multi_statements = Some(desired.multi_statements);
    }
    p
}

/// Renders a tracked value as an SQL literal: numbers bare, strings quoted (or hex when they
/// contain quotes or backslashes, so sql_mode's escaping rules cannot matter).
fn push_value(out: &mut String, name: &str, v: &str) {
    let numeric = !v.is_empty()
        && v.bytes()
            .enumerate()
            .all(|(i, b)| b.is_ascii_digit() || (i == 0 && b == b'-') || b == b'.')
        && v.bytes().filter(|&b| b == b'.').count() <= 1
        && v != "-"
        && v != ".";
    if numeric {
        out.push_str(v);
    } else if v.is_empty() && (name.starts_with("character_set_") || name.starts_with("collation_"))
    {
        out.push_str("NULL");
    } else if v.bytes().any(|b| b == b'\'' || b == b'\\' || b < 0x20) {
        out.push_str("X'");
        for b in v.bytes() {
            let _ = write!(out, "{b:02x}");
        }
        out.push('\'');
    } else {
        out.push('\'');
        out.push_str(v);
        out.push('\'');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(schema: Option<&str>, vars: &[(&str, &str)]) -> TrackedState {
        TrackedState {
            schema: schema.map(str::to_string),
            vars: Arc::new(
                vars.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            multi_statements: true,
        }
    }

    #[test]
    fn plans_only_the_differences() {
        let want = st(
            Some("db"),
            &[
                ("sql_mode", "ANSI"),
                ("sql_select_limit", "10"),
                ("time_zone", "+00:00"),
            ],
        );
        let have = st(Some("db"), &[("sql_mode", "ANSI"), ("wait_timeout", "5")]);
        let p = plan(&want, &have, None);
        assert_eq!(p.init_db, None);
        assert_eq!(
            p.set_sql.as_deref(),
            Some("SET @@session.sql_select_limit=10, @@session.time_zone='+00:00', @@session.wait_timeout=DEFAULT")
        );
        assert!(plan(&want, &want, None).is_empty());
    }

    #[test]
    fn schema_changes() {
        let p = plan(&st(Some("a"), &[]), &st(Some("b"), &[]), None);
        assert_eq!(p.init_db.as_deref(), Some("a"));
        let p = plan(&st(None, &[]), &st(Some("b"), &[]), None);
        assert!(p.needs_reset);
    }

    #[test]
    fn awkward_values_are_hex() {
        let p = plan(&st(None, &[("x", "it's")]), &st(None, &[]), None);
        assert_eq!(p.set_sql.as_deref(), Some("SET @@session.x=X'69742773'"));
    }
}
