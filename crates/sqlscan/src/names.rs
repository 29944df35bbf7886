//! Names of session objects a statement creates or destroys: temporary tables and
//! text-protocol prepared statements. The session uses them to know when a pin can end.

use crate::lexer::{Kind, Lexer, Token};

fn ident(src: &[u8], t: &Token) -> Option<String> {
    let raw = t.text(src);
    let s = match t.kind {
        Kind::Word => raw,
        Kind::QuotedIdent | Kind::Str if raw.len() >= 2 => &raw[1..raw.len() - 1],
        _ => return None,
    };
    Some(String::from_utf8_lossy(s).to_ascii_lowercase())
}

/// Reads `name` or `db.name`; returns the last part.
fn qualified(src: &[u8], lx: &mut std::iter::Peekable<Lexer<'_>>) -> Option<String> {
    let first = lx.next()?;
    let mut name = ident(src, &first)?;
    while lx.peek().is_some_and(|t| t.is_punct(b'.')) {
        lx.next();
        name = ident(src, &lx.next()?)?;
    }
    Some(name)
}

fn skip_words(src: &[u8], lx: &mut std::iter::Peekable<Lexer<'_>>, words: &[&str]) {
    while let Some(t) = lx.peek() {
        if words.iter().any(|w| t.is_word(src, w)) {
            lx.next();
        } else {
            break;
        }
    }
}

/// `CREATE [OR REPLACE] TEMPORARY TABLE [IF NOT EXISTS] name ...`: the table name.
pub fn created_temp_table(sql: &[u8]) -> Option<String> {
    let mut lx = Lexer::new(sql).peekable();
    if !lx.next()?.is_word(sql, "CREATE") {
        return None;
    }
    skip_words(sql, &mut lx, &["OR", "REPLACE"]);
    if !lx.next()?.is_word(sql, "TEMPORARY") || !lx.next()?.is_word(sql, "TABLE") {
        return None;
    }
    skip_words(sql, &mut lx, &["IF", "NOT", "EXISTS"]);
    qualified(sql, &mut lx)
}

/// `DROP [TEMPORARY] TABLE[S] [IF EXISTS] a, b ...`: the table names.
pub fn dropped_tables(sql: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let mut lx = Lexer::new(sql).peekable();
    if !lx.next().is_some_and(|t| t.is_word(sql, "DROP")) {
        return out;
    }
    skip_words(sql, &mut lx, &["TEMPORARY"]);
    if !lx
        .next()
        .is_some_and(|t| t.is_word(sql, "TABLE") || t.is_word(sql, "TABLES"))
    {
        return out;
    }
    skip_words(sql, &mut lx, &["IF", "EXISTS"]);
    while let Some(n) = qualified(sql, &mut lx) {
        out.push(n);
        if !lx.peek().is_some_and(|t| t.is_punct(b',')) {
            break;
        }
        lx.next();
    }
    out
}

/// `PREPARE name FROM ...`, `EXECUTE name`, `DEALLOCATE PREPARE name`, `DROP PREPARE name`:
/// the statement name.
pub fn prepared_statement_name(sql: &[u8]) -> Option<String> {
    let mut lx = Lexer::new(sql).peekable();
    let first = lx.next()?;
    if first.is_word(sql, "DEALLOCATE") || first.is_word(sql, "DROP") {
        if !lx.next()?.is_word(sql, "PREPARE") {
            return None;
        }
    } else if !(first.is_word(sql, "PREPARE") || first.is_word(sql, "EXECUTE")) {
        return None;
    }
    ident(sql, &lx.next()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_tables() {
        assert_eq!(
            created_temp_table(b"CREATE TEMPORARY TABLE t1 (a int)").as_deref(),
            Some("t1")
        );
        assert_eq!(
            created_temp_table(b"create or replace temporary table if not exists db.`T 2` like x")
                .as_deref(),
            Some("t 2")
        );
        assert_eq!(created_temp_table(b"CREATE TABLE t1 (a int)"), None);
        assert_eq!(
            dropped_tables(b"DROP TEMPORARY TABLE IF EXISTS a, db.b, `c`"),
            vec!["a", "b", "c"]
        );
        assert_eq!(dropped_tables(b"DROP TABLE x"), vec!["x"]);
        assert!(dropped_tables(b"DROP DATABASE x").is_empty());
    }

    #[test]
    fn prepared_names() {
        assert_eq!(
            prepared_statement_name(b"PREPARE s1 FROM 'SELECT 1'").as_deref(),
            Some("s1")
        );
        assert_eq!(
            prepared_statement_name(b"DEALLOCATE PREPARE S1").as_deref(),
            Some("s1")
        );
        assert_eq!(
            prepared_statement_name(b"DROP PREPARE `s1`").as_deref(),
            Some("s1")
        );
        assert_eq!(
            prepared_statement_name(b"EXECUTE s1 USING @a").as_deref(),
            Some("s1")
        );
        assert_eq!(prepared_statement_name(b"SELECT 1"), None);
    }
}
