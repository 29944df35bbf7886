//! What a client was told at login (its ParameterStatus values) and relies on, against what
//! a connection reports: the settings that keep the client's values, and those that tell the
//! scanner when a told value blinds it.

use super::state::{Change, Settings};
use super::unreadable::{CLIENT_ENCODING, CONFORMING_STRINGS};
use std::collections::BTreeMap;

/// Parameters a client reads once, at login or when told of a change, and relies on: to
/// encode its text, to escape its strings, to read dates, times and intervals. (reported
/// name, lower-case name)
const KEPT: [(&str, &str); 5] = [
    ("client_encoding", CLIENT_ENCODING),
    ("DateStyle", "datestyle"),
    ("IntervalStyle", "intervalstyle"),
    ("TimeZone", "timezone"),
    ("standard_conforming_strings", CONFORMING_STRINGS),
];

/// The settings that keep what the client was `told` on a connection that reports
/// otherwise (`conn`), for those of [`KEPT`] the session did not make itself: a role's or a
/// database's default altered since the login, or since that connection was opened. The
/// client keeps its values, as on a direct connection (whose defaults are read once, at its
/// login), and as PgBouncer keeps them; made the session's own, they are replayed on every
/// connection that serves it, and the scanner knows when they blind it.
pub fn kept_reports(
    told: &BTreeMap<String, String>,
    conn: &BTreeMap<String, String>,
    settings: &Settings,
) -> Vec<Change> {
    KEPT.iter()
        .filter(|&&(reported, _)| conn.get(reported) != told.get(reported))
        .filter_map(|&(reported, name)| told_setting(told, settings, reported, name))
        .map(|(name, stmt)| Change::Set(name, stmt))
        .collect()
}

/// The statement setting `reported` (`name` in lower case) to the value the client was
/// `told`, if it was told one and the session did not make that setting itself.
fn told_setting(
    told: &BTreeMap<String, String>,
    settings: &Settings,
    reported: &str,
    name: &str,
) -> Option<(String, String)> {
    let value = told.get(reported)?;
    if settings.statement(name).is_some() {
        return None;
    }
    Some((
        name.to_string(),
        super::startup::set_config(reported, value),
    ))
}

/// The settings that tell the scanner what the client was `told` at login when it blinds
/// the scanner (`standard_conforming_strings` off, a client encoding it cannot read: a
/// role's or database's default), for those the session did not make itself: routed and
/// pinned as if the client had set them.
pub fn blind_reports(told: &BTreeMap<String, String>, settings: &Settings) -> Vec<Change> {
    // (The values are read as they are, no statement is made for those that do not blind
    // the scanner.)
    blinding(told)
        .filter_map(|&(reported, name)| told_setting(told, settings, reported, name))
        .map(|(name, stmt)| Change::Set(name, stmt))
        .collect()
}

/// Whether a value `told` holds blinds the scanner: [`blind_reports`] finds nothing without
/// one, whatever the session set.
pub fn reports_blind(told: &BTreeMap<String, String>) -> bool {
    blinding(told).next().is_some()
}

/// The kept parameters whose value in `told` blinds the scanner.
fn blinding(
    told: &BTreeMap<String, String>,
) -> impl Iterator<Item = &'static (&'static str, &'static str)> + '_ {
    KEPT.iter()
        .filter(|&&(_, name)| name == CONFORMING_STRINGS || name == CLIENT_ENCODING)
        .filter(|&&(reported, name)| {
            told.get(reported)
                .is_some_and(|v| super::unreadable::reported_value_blinds(name, v))
        })
}
