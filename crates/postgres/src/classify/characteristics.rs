//! `SET SESSION CHARACTERISTICS AS TRANSACTION …` read as the settings it makes.
//!
//! PostgreSQL runs it as `SET` of `default_transaction_isolation`,
//! `default_transaction_read_only` and `default_transaction_deferrable`, one per mode in
//! order (a later mode of the same kind wins), so the session's settings can hold it and
//! replay it on its next connection as those `SET`s: it moves instead of pinning.

use crate::frontend::state::Change;

/// The settings a `SET [SESSION] SESSION CHARACTERISTICS AS TRANSACTION mode [, …]` text
/// makes, in order, as `(parameter, statement)`; `None` for a text that is not exactly that
/// (it then pins, as before: sluice does not guess).
pub(super) fn settings(sql: &[u8]) -> Option<Vec<Change>> {
    let mut words = sluice_sqlscan::postgres::tokens(sql).peekable();
    let mut expect = |w: &[u8]| words.next_if(|t| t.eq_ignore_ascii_case(w)).map(|_| ());
    expect(b"set")?;
    // `SET SESSION SESSION CHARACTERISTICS`: the scope, then the statement's own `SESSION`.
    expect(b"session")?;
    let _ = expect(b"session");
    expect(b"characteristics")?;
    expect(b"as")?;
    expect(b"transaction")?;
    let mut out = Vec::new();
    while let Some(word) = words.next() {
        let is = |w: &[u8]| word.eq_ignore_ascii_case(w);
        let mut next_is = |w: &[u8]| words.next_if(|t| t.eq_ignore_ascii_case(w)).is_some();
        let (name, value) = if is(b",") || is(b";") {
            continue;
        } else if is(b"isolation") {
            if !next_is(b"level") {
                return None;
            }
            let level = if next_is(b"serializable") {
                "serializable"
            } else if next_is(b"repeatable") && next_is(b"read") {
                "repeatable read"
            } else if next_is(b"read") {
                if next_is(b"committed") {
                    "read committed"
                } else if next_is(b"uncommitted") {
                    "read uncommitted"
                } else {
                    return None;
                }
            } else {
                return None;
            };
            ("default_transaction_isolation", format!("'{level}'"))
        } else if is(b"read") {
            let on = if next_is(b"only") {
                "on"
            } else if next_is(b"write") {
                "off"
            } else {
                return None;
            };
            ("default_transaction_read_only", on.to_string())
        } else if is(b"deferrable") {
            ("default_transaction_deferrable", "on".to_string())
        } else if is(b"not") && next_is(b"deferrable") {
            ("default_transaction_deferrable", "off".to_string())
        } else {
            return None;
        };
        out.push(Change::Set(name.into(), format!("SET {name} = {value}")));
    }
    (!out.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(name: &str, value: &str) -> Change {
        Change::Set(name.into(), format!("SET {name} = {value}"))
    }

    #[test]
    fn every_mode_becomes_its_default_setting_in_order() {
        assert_eq!(
            settings(b"SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL SERIALIZABLE"),
            Some(vec![set("default_transaction_isolation", "'serializable'")])
        );
        assert_eq!(
            settings(
                b"set session session characteristics as transaction read only, \
                  isolation level repeatable read not deferrable read write deferrable;"
            ),
            Some(vec![
                set("default_transaction_read_only", "on"),
                set("default_transaction_isolation", "'repeatable read'"),
                set("default_transaction_deferrable", "off"),
                set("default_transaction_read_only", "off"),
                set("default_transaction_deferrable", "on"),
            ])
        );
        assert_eq!(
            settings(b"/* c */ SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ UNCOMMITTED, ISOLATION LEVEL READ COMMITTED"),
            Some(vec![
                set("default_transaction_isolation", "'read uncommitted'"),
                set("default_transaction_isolation", "'read committed'"),
            ])
        );
    }

    #[test]
    fn anything_else_is_not_read() {
        for text in [
            &b"SET SESSION CHARACTERISTICS AS TRANSACTION"[..],
            b"SET SESSION CHARACTERISTICS AS TRANSACTION READ",
            b"SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL",
            b"SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL REPEATABLE",
            b"SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY $1",
            b"SET SESSION CHARACTERISTICS AS TRANSACTION NOT READ ONLY",
            b"SET SESSION CHARACTERISTICS TRANSACTION READ ONLY",
            b"SET LOCAL SESSION CHARACTERISTICS AS TRANSACTION READ ONLY",
            b"SET SESSION AUTHORIZATION DEFAULT",
        ] {
            assert_eq!(settings(text), None, "{}", String::from_utf8_lossy(text));
        }
    }
}
