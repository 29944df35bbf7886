//! The names of the cursors `DECLARE … WITH HOLD` makes and `CLOSE name` closes: a session
//! pinned for its held cursors is released when it closes the last of them by name (the
//! connection keeps the names: `backend/cursors.rs`).

/// What a statement does to the session's held cursors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CursorOp {
    /// `DECLARE name … WITH HOLD`: the name as PostgreSQL folds it, `None` when sluice
    /// cannot read it (then only `CLOSE ALL` or `DISCARD ALL` release the session).
    Hold(Option<String>),
    /// `CLOSE name` (not `ALL`).
    Close(String),
}

/// The cursor name a `DECLARE` text declares, as PostgreSQL folds it.
pub(super) fn declared(sql: &[u8]) -> Option<String> {
    let mut words = sluice_sqlscan::postgres::tokens(sql);
    if !words.next()?.eq_ignore_ascii_case(b"declare") {
        return None;
    }
    identifier(words.next()?)
}

/// The cursor name of a `CLOSE name` text (`None` for `CLOSE ALL`, or anything else).
pub(super) fn closed(sql: &[u8]) -> Option<String> {
    let mut words = sluice_sqlscan::postgres::tokens(sql).filter(|t| *t != b";");
    if !words.next()?.eq_ignore_ascii_case(b"close") {
        return None;
    }
    let name = words.next()?;
    if words.next().is_some() || name.eq_ignore_ascii_case(b"all") {
        return None;
    }
    identifier(name)
}

/// An identifier token as PostgreSQL folds it (see `folded_name`); `None` for anything else
/// (`U&"…"`, punctuation, a parameter, an empty quoted name).
fn identifier(token: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(token).ok()?;
    let first = *token.first()?;
    let plain = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80;
    let readable = match first {
        b'"' => text.len() > 2 && text.ends_with('"'),
        _ => token.iter().all(|&b| plain(b)) && !first.is_ascii_digit() && first != b'$',
    };
    readable.then(|| super::folded_name(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_folded_as_postgresql_folds_them() {
        assert_eq!(
            declared(b"DECLARE Cur1 CURSOR WITH HOLD FOR SELECT 1").as_deref(),
            Some("cur1")
        );
        assert_eq!(
            declared(b"/* x */ declare \"My \"\"C\"\"\" no scroll cursor with hold for select 1")
                .as_deref(),
            Some("My \"C\"")
        );
        assert_eq!(
            declared(b"DECLARE U&\"c\" CURSOR WITH HOLD FOR SELECT 1"),
            None
        );
        assert_eq!(closed(b"CLOSE Cur1;").as_deref(), Some("cur1"));
        assert_eq!(closed(b"close \"All\"").as_deref(), Some("All"));
        assert_eq!(closed(b"CLOSE ALL"), None);
        assert_eq!(closed(b"CLOSE a b"), None);
        assert_eq!(closed(b"CLOSE $1"), None);
        assert_eq!(closed(b"FETCH c"), None);
    }
}
