//! Replacing what a session reads about itself with the values it should see.
//!
//! Through a proxy, `CONNECTION_ID()` would return a pooled backend thread's id, and
//! `FOUND_ROWS()` / `ROW_COUNT()` would describe whatever that backend ran last. The session
//! knows the right values, so the calls are replaced by literals; calls whose result is a
//! backend thread id (`IS_USED_LOCK(name)`) are wrapped so that ids of the proxy's own
//! connections read as the proxy's session ids. A call that is a whole select-list item
//! without an alias keeps the column name it would have had (`AS` the call's text as written).

use crate::lexer::{Kind, Lexer, Token};

/// Rewrites `sql`, replacing each call `NAME()` (case-insensitive, no arguments) of a function
/// listed in `values` with its literal. Returns `None` when nothing was replaced.
pub fn replace_calls(sql: &[u8], values: &[(&str, String)]) -> Option<Vec<u8>> {
    rewrite(sql, &mut |toks, i| {
        let (name, _call, close) = call_at(sql, toks, i)?;
        if close != i + 2 {
            return None; // has arguments
        }
        values
            .iter()
            .find(|(n, _)| name.eq_ignore_ascii_case(n.as_bytes()))
            .map(|(_, v)| (v.as_bytes().to_vec(), close))
    })
}

/// Rewrites `sql`, wrapping each call `NAME(...)` of the function `name` (case-insensitive)
/// whose result is a connection id: a result equal to one of the SQL expressions in `ids` (a
/// backend connection's thread id, or `CONNECTION_ID()` — the backend's own, computed where
/// the statement runs) reads as its mapped value (the proxy's id for the session holding that
/// connection), any other as it is. Returns `None` when `sql` has no such call.
pub fn map_call_results(sql: &[u8], name: &str, ids: &[(String, u64)]) -> Option<Vec<u8>> {
    rewrite(sql, &mut |toks, i| {
        let (n, call, close) = call_at(sql, toks, i)?;
        if !n.eq_ignore_ascii_case(name.as_bytes()) {
            return None;
        }
        let mut out = Vec::with_capacity(call.len() * 2 + ids.len() * 24 + 64);
        let placeholders = toks[i..=close].iter().any(|t| t.kind == Kind::Placeholder);
        if placeholders {
            // Prepared: each `?` must appear once (the client sends one value per `?`), so
            // the call is evaluated once, in a derived table.
            out.extend_from_slice(b"(SELECT CASE sluice_v");
            push_whens(&mut out, ids);
            out.extend_from_slice(b" ELSE sluice_v END FROM (SELECT ");
            out.extend_from_slice(call);
            out.extend_from_slice(b" AS sluice_v) AS sluice_t)");
        } else {
            // Its arguments may name columns of the statement's tables: evaluated in place.
            out.extend_from_slice(b"(CASE ");
            out.extend_from_slice(call);
            push_whens(&mut out, ids);
            out.extend_from_slice(b" ELSE ");
            out.extend_from_slice(call);
            out.extend_from_slice(b" END)");
        }
        Some((out, close))
    })
}

fn push_whens(out: &mut Vec<u8>, ids: &[(String, u64)]) {
    for (from, to) in ids {
        out.extend_from_slice(format!(" WHEN {from} THEN {to}").as_bytes());
    }
}

/// Rewrites `sql`, replacing each read of the session system variable `name` (`@@name`,
/// `@@session.name`, `@@local.name`; case-insensitive) with `value`.
pub fn replace_sysvar(sql: &[u8], name: &str, value: &str) -> Option<Vec<u8>> {
    rewrite(sql, &mut |toks, i| {
        let t = toks[i];
        if t.kind != Kind::SysVar {
            return None;
        }
        let text = &t.text(sql)[2..];
        let (scope, bare) = match text.iter().position(|&b| b == b'.') {
            Some(d) => (&text[..d], &text[d + 1..]),
            None => (&b""[..], text),
        };
        let session = scope.is_empty()
            || scope.eq_ignore_ascii_case(b"session")
            || scope.eq_ignore_ascii_case(b"local");
        (session && bare.eq_ignore_ascii_case(name.as_bytes()))
            .then(|| (value.as_bytes().to_vec(), i))
    })
}

/// If token `i` starts a call `NAME(...)`: its name, its whole text and the index of its
/// closing parenthesis.
fn call_at<'a>(sql: &'a [u8], toks: &[Token], i: usize) -> Option<(&'a [u8], &'a [u8], usize)> {
    let t = toks[i];
    if t.kind != Kind::Word || !toks.get(i + 1).is_some_and(|o| o.is_punct(b'(')) {
        return None;
    }
    let close = closing(toks, i + 1)?;
    Some((t.text(sql), &sql[t.start..toks[close].end], close))
}

/// The index of the `)` closing the `(` at `open`.
fn closing(toks: &[Token], open: usize) -> Option<usize> {
    let mut depth = 0i32;
    for (j, t) in toks.iter().enumerate().skip(open) {
        match t.kind {
            Kind::Punct(b'(') => depth += 1,
            Kind::Punct(b')') => {
                depth -= 1;
                if depth == 0 {
                    return Some(j);
                }
            }
            Kind::Punct(b';') => return None,
            _ => {}
        }
    }
    None
}

/// The replacement of tokens `i..=last`, and `last`.
type Replacement = Option<(Vec<u8>, usize)>;

/// Walks the tokens of `sql`; `f(tokens, i)` returns the replacement for the tokens starting
/// at `i`. Returns `None` when nothing was replaced.
fn rewrite(sql: &[u8], f: &mut dyn FnMut(&[Token], usize) -> Replacement) -> Option<Vec<u8>> {
    let toks: Vec<Token> = Lexer::new(sql).collect();
    let mut out = Vec::with_capacity(sql.len() + 32);
    let mut copied = 0;
    let mut depth = 0i32;
    let mut changed = false;
    let mut stmt_is_select = false;
    let mut first_of_stmt = true;
    let mut i = 0;
    while i < toks.len() {
        let t = toks[i];
        match t.kind {
            Kind::Punct(b'(') => depth += 1,
            Kind::Punct(b')') => depth -= 1,
            Kind::Punct(b';') => {
                first_of_stmt = true;
                i += 1;
                continue;
            }
            _ => {}
        }
        if first_of_stmt {
            stmt_is_select = t.is_word(sql, "SELECT");
            first_of_stmt = false;
        }
        let Some((replacement, last)) = f(&toks, i) else {
            i += 1;
            continue;
        };
        // A whole select-list item (after SELECT or a top-level comma, before a top-level
        // comma, FROM, INTO, the end) with no alias gets the original text as its name.
        let prev = i.checked_sub(1).map(|p| toks[p]);
        let next = toks.get(last + 1);
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
        let original = &sql[t.start..toks[last].end];
        out.extend_from_slice(&sql[copied..t.start]);
        out.extend_from_slice(&replacement);
        if stmt_is_select && depth == 0 && item_start && item_end {
            out.extend_from_slice(b" AS `");
            out.extend(original.iter().filter(|&&b| b != b'`'));
            out.push(b'`');
        }
        copied = toks[last].end;
        changed = true;
        i = last + 1;
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
        // Inside another call's arguments (the item's column name then shows the value).
        assert_eq!(
            r("SELECT IF(CONNECTION_ID() = 3, 1, 0)").as_deref(),
            Some("SELECT IF(42 = 3, 1, 0)")
        );
    }

    #[test]
    fn maps_thread_ids_a_call_returns() {
        let m = |sql: &str| {
            map_call_results(
                sql.as_bytes(),
                "IS_USED_LOCK",
                &[("17".into(), 5), ("23".into(), 9)],
            )
            .map(|v| String::from_utf8(v).unwrap())
        };
        assert_eq!(
            m("SELECT IS_USED_LOCK('k')").as_deref(),
            Some("SELECT (CASE IS_USED_LOCK('k') WHEN 17 THEN 5 WHEN 23 THEN 9 ELSE IS_USED_LOCK('k') END) AS `IS_USED_LOCK('k')`")
        );
        assert_eq!(
            m("select is_used_lock(concat('a', 'b')) = 5").as_deref(),
            Some("select (CASE is_used_lock(concat('a', 'b')) WHEN 17 THEN 5 WHEN 23 THEN 9 ELSE is_used_lock(concat('a', 'b')) END) = 5")
        );
        assert_eq!(
            m("SELECT IS_USED_LOCK(?) = 5").as_deref(),
            Some("SELECT (SELECT CASE sluice_v WHEN 17 THEN 5 WHEN 23 THEN 9 ELSE sluice_v END FROM (SELECT IS_USED_LOCK(?) AS sluice_v) AS sluice_t) = 5")
        );
        assert_eq!(m("SELECT IS_FREE_LOCK('k')"), None);
        assert_eq!(m("SELECT 'IS_USED_LOCK(1)'"), None);
        // With no ids to map, the call still returns what the server says.
        assert_eq!(
            map_call_results(b"DO IS_USED_LOCK('k')", "IS_USED_LOCK", &[])
                .map(|v| String::from_utf8(v).unwrap())
                .as_deref(),
            Some("DO (CASE IS_USED_LOCK('k') ELSE IS_USED_LOCK('k') END)")
        );
    }

    #[test]
    fn replaces_session_variable_reads() {
        let v = |sql: &str| {
            replace_sysvar(sql.as_bytes(), "pseudo_thread_id", "42")
                .map(|v| String::from_utf8(v).unwrap())
        };
        assert_eq!(
            v("SELECT @@pseudo_thread_id, @@SESSION.pseudo_thread_id").as_deref(),
            Some("SELECT 42 AS `@@pseudo_thread_id`, 42 AS `@@SESSION.pseudo_thread_id`")
        );
        assert_eq!(v("SELECT @@global.pseudo_thread_id"), None);
        assert_eq!(v("SELECT @@pseudo_thread_idx"), None);
    }
}
