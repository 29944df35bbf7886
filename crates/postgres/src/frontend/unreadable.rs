//! What in a session's settings leaves the scanner unable to read its statements, and how
//! sluice reads such settings from the statements that make them: `standard_conforming_strings`
//! off (a backslash escapes a quote), and a `client_encoding` whose characters may hold the
//! byte of `\` or `'` after their first. Both pin the session on the primary (see
//! [`super::state::pin::BACKSLASH_QUOTES`], [`super::state::pin::UNREADABLE_ENCODING`]).

use super::state::Change;

/// The parameter that decides how PostgreSQL reads `'...'` strings: with it off, a
/// backslash escapes a quote, which sluice's scanner does not follow.
pub const CONFORMING_STRINGS: &str = "standard_conforming_strings";

/// The boolean a statement setting parameter `name` gives it: a `SET name = value` (or
/// `TO`; the name may be quoted), or the `set_config('name', 'value', false)` a startup
/// parameter is set with; read as PostgreSQL reads a boolean (`None`: not a boolean, or not
/// such a statement).
pub fn boolean_set(stmt: &str, name: &str) -> Option<bool> {
    let lower = stmt.to_ascii_lowercase();
    let after = lower[lower.find(name)? + name.len()..].trim_start_matches('"');
    let after = after.trim_start();
    let value = match after.strip_prefix("',") {
        Some(args) => args.split(',').next()?,
        None => match after.strip_prefix('=') {
            Some(v) => v,
            None => after
                .strip_prefix("to")
                .filter(|v| v.starts_with(|c: char| c.is_ascii_whitespace() || c == '\''))?,
        },
    };
    // A string in any of its spellings: 'off', E'off', $$off$$.
    let value = value.trim().trim_end_matches(';').trim_end();
    let value = value
        .strip_prefix('e')
        .filter(|v| v.starts_with('\''))
        .unwrap_or(value);
    parse_bool(value.trim_matches(['\'', '"', '$']).trim())
}

/// A boolean as PostgreSQL's `parse_bool` reads one: `true`, `false`, `yes`, `no`, `on`,
/// `off`, `1`, `0`, or a prefix of one of them long enough to tell which (lower case).
pub fn parse_bool(v: &str) -> Option<bool> {
    let prefix_of = |word: &str, min: usize| v.len() >= min && word.starts_with(v);
    if v == "1" {
        Some(true)
    } else if v == "0" {
        Some(false)
    } else if prefix_of("true", 1) || prefix_of("yes", 1) || prefix_of("on", 2) {
        Some(true)
    } else if prefix_of("false", 1) || prefix_of("no", 1) || prefix_of("off", 2) {
        Some(false)
    } else {
        None
    }
}

/// True if `change` turns `standard_conforming_strings` off.
pub fn turns_conforming_strings_off(change: &Change) -> bool {
    matches!(change, Change::Set(name, stmt) | Change::SetLocal(name, stmt)
        if name == CONFORMING_STRINGS && boolean_set(stmt, CONFORMING_STRINGS) == Some(false))
}

/// The parameter `SET NAMES` sets too.
pub const CLIENT_ENCODING: &str = "client_encoding";

/// The names PostgreSQL takes (compared as it compares them: lower case, letters and digits
/// only) for the client-only encodings whose characters may hold an ASCII byte after their
/// first: a `\` or a `'` there is part of a character, which a scanner of bytes cannot tell.
const UNREADABLE_ENCODINGS: [&str; 19] = [
    "sjis",
    "mskanji",
    "shiftjis",
    "win932",
    "windows932",
    "shiftjis2004",
    "big5",
    "win950",
    "windows950",
    "gbk",
    "win936",
    "windows936",
    "cp936",
    "uhc",
    "win949",
    "windows949",
    "cp949",
    "johab",
    "gb18030",
];

/// The encoding a statement setting `client_encoding` gives it (`SET client_encoding ...`,
/// `SET NAMES ...`, or the `set_config` a startup parameter is set with), as PostgreSQL
/// compares encoding names: lower case, letters and digits only.
pub fn encoding_set(stmt: &str) -> Option<String> {
    let lower = stmt.to_ascii_lowercase();
    let at = match lower.find(CLIENT_ENCODING) {
        Some(i) => i + CLIENT_ENCODING.len(),
        None => lower.find("names")? + "names".len(),
    };
    let blank = |c: char| c.is_ascii_whitespace();
    let mut rest = lower[at..].trim_start_matches(|c: char| blank(c) || "\"',=".contains(c));
    if let Some(after) = rest.strip_prefix("to").filter(|r| r.starts_with(blank)) {
        rest = after.trim_start_matches(blank);
    }
    if let Some(after) = rest.strip_prefix("e'") {
        rest = after;
    }
    let value: String = encoding_name(rest.trim_start_matches(['\'', '"', '$']))
        .map(char::from)
        .collect();
    (!value.is_empty()).then_some(value)
}

/// The encoding name `text` starts with, as PostgreSQL compares encoding names: its letters
/// and digits, in lower case.
fn encoding_name(text: &str) -> impl Iterator<Item = u8> + '_ {
    text.bytes()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.'))
        .filter(u8::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
}

/// True if `stmt`, setting `client_encoding`, sets one the scanner cannot read.
pub(super) fn unreadable_encoding(stmt: &str) -> bool {
    encoding_set(stmt).is_some_and(|e| UNREADABLE_ENCODINGS.contains(&e.as_str()))
}

/// True if the server reporting `value` for `name` (a ParameterStatus) leaves the scanner
/// unable to read what follows: `standard_conforming_strings` off, or a `client_encoding`
/// it cannot read. Read from the value itself, not from a statement setting it.
/// (Every login reads two: in a buffer of its own, no allocation.)
pub(super) fn reported_value_blinds(name: &str, value: &str) -> bool {
    let mut buf = [0u8; 16];
    match name {
        CONFORMING_STRINGS => {
            let value = value.trim().bytes().map(|c| c.to_ascii_lowercase());
            in_buffer(value, &mut buf).is_some_and(|v| parse_bool(v) == Some(false))
        }
        // (No name it cannot read is longer than the buffer.)
        CLIENT_ENCODING => in_buffer(encoding_name(value.trim()), &mut buf)
            .is_some_and(|e| UNREADABLE_ENCODINGS.contains(&e)),
        _ => false,
    }
}

/// `bytes` in `buf`, as text; `None` if they do not fit.
fn in_buffer(bytes: impl Iterator<Item = u8>, buf: &mut [u8; 16]) -> Option<&str> {
    let mut len = 0;
    for c in bytes {
        *buf.get_mut(len)? = c;
        len += 1;
    }
    std::str::from_utf8(&buf[..len]).ok()
}

/// True if `change` sets a `client_encoding` the scanner cannot read (see
/// [`super::state::pin::UNREADABLE_ENCODING`]).
pub fn sets_unreadable_encoding(change: &Change) -> bool {
    matches!(change, Change::Set(name, stmt) | Change::SetLocal(name, stmt)
        if name == CLIENT_ENCODING && unreadable_encoding(stmt))
}

/// True if `change` leaves the scanner unable to read what follows: see
/// [`super::state::pin::BACKSLASH_QUOTES`] and [`super::state::pin::UNREADABLE_ENCODING`].
pub fn blinds_scanner(change: &Change) -> bool {
    turns_conforming_strings_off(change) || sets_unreadable_encoding(change)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reported value blinds the scanner exactly when the statement setting it would.
    #[test]
    fn a_reported_value_is_read_as_the_statement_setting_it() {
        let cases = [
            (CONFORMING_STRINGS, "off", true),
            (CONFORMING_STRINGS, "OFF", true),
            (CONFORMING_STRINGS, "of", true),
            (CONFORMING_STRINGS, "on", false),
            (CONFORMING_STRINGS, "o", false),
            (CONFORMING_STRINGS, "false", true),
            (CLIENT_ENCODING, "SJIS", true),
            (CLIENT_ENCODING, "SHIFT_JIS_2004", true),
            (CLIENT_ENCODING, "BIG5", true),
            (CLIENT_ENCODING, "GB18030", true),
            (CLIENT_ENCODING, "UTF8", false),
            (CLIENT_ENCODING, "LATIN1", false),
            (CLIENT_ENCODING, "EUC_JP", false),
            (CLIENT_ENCODING, "SJIS_and_a_name_too_long_for_any", false),
            (
                CONFORMING_STRINGS,
                "off but much longer than a boolean",
                false,
            ),
            ("TimeZone", "off", false),
        ];
        for (name, value, blinds) in cases {
            assert_eq!(reported_value_blinds(name, value), blinds, "{name} {value}");
            let stmt = crate::frontend::startup::set_config(name, value);
            let read = match name {
                CONFORMING_STRINGS => boolean_set(&stmt, CONFORMING_STRINGS) == Some(false),
                CLIENT_ENCODING => unreadable_encoding(&stmt),
                _ => false,
            };
            assert_eq!(read, blinds, "{stmt}");
        }
    }
}
