//! Replacing calls to session functions with the values the session should see.
//!
//! Through a proxy, `CONNECTION_ID()` would return a pooled backend thread's id, and
//! `FOUND_ROWS()` / `ROW_COUNT()` would describe whatever that backend ran last. The session
//! knows the right values, so the calls are replaced by literals. A call that is a whole
//! select-list item without an alias keeps the column name it would have had (`AS` the call's
//! text as written).

use crate::lexer::{Kind, Lexer, Token};

/// Rewrites `sql`, replacing each call `NAME()` (case-insensitive, no arguments) of a function
/// listed in `values` with its literal. Returns `None` when nothing was replaced.
pub fn replace_calls(sql: &[u8], values: &[(&str, String)]) -> Option<Vec<u8>> {
    let toks: Vec<Token> = Lexer::new(sql).collect();
    let mut out = Vec::with_capacity(sql.len() + 32);
    let mut copied = 0;
    let mut depth = 0i32;
    let mut changed = false;
    let mut stmt_is_select = false;
    let mut first_of_stmt = true;
    for i in 0..toks.len() {
        let t = toks[i];
        match t.kind {
            Kind::Punct(b'(') => depth += 1,
            Kind::Punct(b')') => depth -= 1,
            Kind::Punct(b';') => {
                first_of_stmt = true;
                continue;
            }
            _ => {}
        }
        if first_of_stmt {
            stmt_is_select = t.is_word(sql, "SELECT");
            first_of_stmt = false;
        }
        if t.kind != Kind::Word {
            continue;
        }
        let Some((_, value)) = values
            .iter()
            .find(|(name, _)| t.text(sql).eq_ignore_ascii_case(name.as_bytes()))
        else {
            continue;
        };
        let (Some(open), Some(close)) = (toks.get(i + 1), toks.get(i + 2)) else {
            continue;
        };
        if !open.is_punct(b'(') || !close.is_punct(b')') {
            continue;
        }
        // A whole select-list item (after SELECT or a top-level comma, before a top-level
        // comma, FROM, INTO, the end) with no alias gets the call's text as its name.
        let prev = i.checked_sub(1).map(|p| toks[p]);
        let next = toks.get(i + 3);
        let item_start = prev.is_some_and(|p| {
            p.is_word(sql, "SELECT")
                || p.is_word(sql, "DISTINCT")
                || (p.is_punct(b',') && depth == 0)
        });
        let item_end = match next {
            None => true,
            Some(n) => {
                (depth == 0 && (n.is_punct(b',') || n.is_punct(b';')))
                    || n.is_word(sql, "FROM")
                    || n.is_word(sql, "INTO")
            }
        };
        out.extend_from_slice(&sql[copied..t.start]);
        out.extend_from_slice(value.as_bytes());
        if stmt_is_select && depth == 0 && item_start && item_end {
            out.extend_from_slice(b" AS `");
            out.extend_from_slice(&sql[t.start..close.end]);
            out.push(b'`');
        }
        copied = close.end;
        changed = true;
    }
    if !changed {
        return None;
    }
    out.extend_from_slice(&sql[copied..]);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(sql: &str) -> Option<String> {
        replace_calls(
            sql.as_bytes(),
            &[("CONNECTION_ID", "42".into()), ("FOUND_ROWS", "7".into())],
        )
        .map(|v| String::from_utf8(v).unwrap())
    }

    #[test]
    fn replaces_calls_and_keeps_column_names() {
        assert_eq!(
            r("SELECT CONNECTION_ID(), NOW()").as_deref(),
            Some("SELECT 42 AS `CONNECTION_ID()`, NOW()")
        );
        assert_eq!(
            r("select connection_id() cid").as_deref(),
            Some("select 42 cid")
        );
        assert_eq!(
            r("SELECT 1 + CONNECTION_ID()").as_deref(),
            Some("SELECT 1 + 42")
        );
        assert_eq!(
            r("SELECT * FROM t WHERE id = CONNECTION_ID()").as_deref(),
            Some("SELECT * FROM t WHERE id = 42")
        );
        assert_eq!(
            r("SELECT FOUND_ROWS() FROM dual").as_deref(),
            Some("SELECT 7 AS `FOUND_ROWS()` FROM dual")
        );
        assert_eq!(
            r("INSERT INTO t VALUES (CONNECTION_ID())").as_deref(),
            Some("INSERT INTO t VALUES (42)")
        );
        assert_eq!(r("SELECT 'CONNECTION_ID()'"), None);
        assert_eq!(r("SELECT CONNECTION_ID(1)"), None);
        assert_eq!(r("SELECT 1"), None);
    }
}
