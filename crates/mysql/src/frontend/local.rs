//! Statements the proxy answers itself: `SHOW SLUICE SESSION` (this session's routing state:
//! pinned or not and why) and `SELECT CONNECTION_ID()` (the id the proxy gave the client,
//! which is what `KILL` understands).

use super::session::{Fatal, Session};
use crate::wire::consts::cap;
use crate::wire::resultset::{column_type, write_resultset, Column};
use sluice_sqlscan::lexer::{Kind, Lexer, Token};

/// A statement answered locally.
pub enum Local {
    /// `SHOW SLUICE SESSION`.
    ShowSession,
    /// `SELECT CONNECTION_ID() [[AS] alias]`, with the column name to use.
    ConnectionId(String),
    /// `SELECT ROW_COUNT() [[AS] alias]` (answered locally only when the previous
    /// statement's connection was not kept).
    RowCount(String),
    /// `SELECT FOUND_ROWS() [[AS] alias]` (likewise).
    FoundRows(String),
    /// `SELECT LAST_INSERT_ID()`, `SELECT @@identity`, `SELECT @@last_insert_id` (answered
    /// locally unless a pinned connection holds a newer value).
    LastInsertId(String),
}

/// A function name and the column name it gets without an alias.
const LOCAL_FUNCTIONS: [(&str, &str); 4] = [
    ("CONNECTION_ID", "CONNECTION_ID()"),
    ("ROW_COUNT", "ROW_COUNT()"),
    ("FOUND_ROWS", "FOUND_ROWS()"),
    ("LAST_INSERT_ID", "LAST_INSERT_ID()"),
];

/// `[[AS] alias]` after a select item: the column name, or `None` if more follows.
fn alias(sql: &[u8], rest: &[Token], default: String) -> Option<String> {
    let name = |t: &Token| {
        let raw = t.text(sql);
        let raw = match t.kind {
            Kind::QuotedIdent | Kind::Str if raw.len() >= 2 => &raw[1..raw.len() - 1],
            _ => raw,
        };
        String::from_utf8_lossy(raw).into_owned()
    };
    let named = |t: &Token| {
        matches!(t.kind, Kind::Word | Kind::QuotedIdent | Kind::Str) && !t.is_word(sql, "FROM")
    };
    match rest {
        [] => Some(default),
        [a] if named(a) => Some(name(a)),
        [as_, a] if as_.is_word(sql, "AS") && named(a) => Some(name(a)),
        _ => None,
    }
}

/// Recognises statements the proxy answers itself.
pub fn recognise(sql: &[u8]) -> Option<Local> {
    // Every statement answered here starts with SHOW, or with SELECT and a system variable
    // or one of the functions: two tokens tell, without allocating (most statements are not).
    let mut first = Lexer::new(sql);
    let candidate = match (first.next(), first.next()) {
        (Some(a), _) if a.is_word(sql, "SHOW") => true,
        (Some(a), Some(b)) if a.is_word(sql, "SELECT") => {
            b.kind == Kind::SysVar || LOCAL_FUNCTIONS.iter().any(|(f, _)| b.is_word(sql, f))
        }
        _ => false,
    };
    if !candidate {
        return None;
    }
    let toks: Vec<Token> = Lexer::new(sql).take(8).collect();
    let toks: &[Token] = match toks.last() {
        Some(t) if t.is_punct(b';') => &toks[..toks.len() - 1],
        _ => &toks,
    };
    let w = |i: usize, kw: &str| toks.get(i).is_some_and(|t| t.is_word(sql, kw));
    if toks.len() == 3 && w(0, "SHOW") && w(1, "SLUICE") && w(2, "SESSION") {
        return Some(Local::ShowSession);
    }
    // SELECT @@identity / @@last_insert_id / @@session.<same> [[AS] alias]
    if w(0, "SELECT") && toks.get(1).is_some_and(|t| t.kind == Kind::SysVar) {
        let var = toks[1].text(sql);
        let bare = var[2..].rsplit(|&b| b == b'.').next().unwrap_or(&[]);
        let scoped_ok =
            !var[2..].contains(&b'.') || var[2..].to_ascii_lowercase().starts_with(b"session.");
        if scoped_ok
            && (bare.eq_ignore_ascii_case(b"identity")
                || bare.eq_ignore_ascii_case(b"last_insert_id"))
        {
            let default = String::from_utf8_lossy(var).into_owned();
            return alias(sql, &toks[2..], default).map(Local::LastInsertId);
        }
    }
    let func = LOCAL_FUNCTIONS.iter().position(|(f, _)| w(1, f));
    let call = w(0, "SELECT")
        && func.is_some()
        && toks.get(2).is_some_and(|t| t.is_punct(b'('))
        && toks.get(3).is_some_and(|t| t.is_punct(b')'));
    if let (true, Some(f)) = (call, func) {
        let make = |n: String| match f {
            0 => Local::ConnectionId(n),
            1 => Local::RowCount(n),
            2 => Local::FoundRows(n),
            _ => Local::LastInsertId(n),
        };
        return alias(sql, &toks[4..], LOCAL_FUNCTIONS[f].1.to_string()).map(make);
    }
    None
}

impl Session {
    /// Answers a locally handled statement.
    pub(crate) async fn answer_local(&mut self, local: Local) -> Result<(), Fatal> {
        let status = self.st.status();
        let deprecate = self.client.has(cap::DEPRECATE_EOF);
        let tracks = self.client.has(cap::SESSION_TRACK);
        match local {
            Local::ConnectionId(_)
            | Local::RowCount(_)
            | Local::FoundRows(_)
            | Local::LastInsertId(_) => {
                let (name, value) = match local {
                    Local::ConnectionId(n) => (n, self.id.to_string()),
                    Local::RowCount(n) => (n, self.st.row_count.to_string()),
                    Local::FoundRows(n) => (n, self.st.found_rows.to_string()),
                    Local::LastInsertId(n) => (n, self.st.last_insert_id.to_string()),
                    Local::ShowSession => unreachable!(),
                };
                let cols = [Column {
                    name: &name,
                    kind: column_type::LONGLONG,
                }];
                let rows = vec![vec![Some(value)]];
                write_resultset(
                    &mut self.client.wbuf,
                    &cols,
                    &rows,
                    status,
                    deprecate,
                    tracks,
                );
            }
            Local::ShowSession => {
                let backend = self.held.as_ref().map(|a| {
                    (
                        a.lease.server().name.to_string(),
                        a.lease.conn_ref().thread_id.to_string(),
                    )
                });
                let pins = self.st.pins;
                let mut reasons = pins.labels();
                if self.prev.is_some() || self.prev_is_held {
                    reasons.push("previous_statement");
                }
                let names = [
                    "id",
                    "user",
                    "pinned",
                    "pin_reasons",
                    "backend",
                    "backend_thread_id",
                    "in_transaction",
                    "autocommit",
                    "schema",
                    "temporary_tables",
                    "prepared_statements",
                ];
                let cols: Vec<Column<'_>> = names
                    .iter()
                    .map(|n| Column {
                        name: n,
                        kind: if *n == "id" {
                            column_type::LONGLONG
                        } else {
                            column_type::VAR_STRING
                        },
                    })
                    .collect();
                let yes = |b: bool| Some(if b { "YES" } else { "NO" }.to_string());
                let rows = vec![vec![
                    Some(self.id.to_string()),
                    Some(self.user.name.to_string()),
                    yes(!pins.is_empty()),
                    Some(reasons.join(",")),
                    backend.as_ref().map(|b| b.0.clone()),
                    backend.as_ref().map(|b| b.1.clone()),
                    yes(self.st.in_trans),
                    yes(self.st.autocommit),
                    self.st.tracked.schema.clone(),
                    Some(self.st.temp_tables.join(",")),
                    Some(self.stmts.len().to_string()),
                ]];
                write_resultset(
                    &mut self.client.wbuf,
                    &cols,
                    &rows,
                    status,
                    deprecate,
                    tracks,
                );
            }
        }
        Ok(self.client.flush().await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_local_statements() {
        assert!(matches!(
            recognise(b"show sluice session"),
            Some(Local::ShowSession)
        ));
        assert!(matches!(
            recognise(b"SHOW SLUICE SESSION;"),
            Some(Local::ShowSession)
        ));
        assert!(
            matches!(recognise(b"SELECT CONNECTION_ID()"), Some(Local::ConnectionId(n)) if n == "CONNECTION_ID()")
        );
        assert!(
            matches!(recognise(b"select connection_id() as cid"), Some(Local::ConnectionId(n)) if n == "cid")
        );
        assert!(
            matches!(recognise(b"SELECT CONNECTION_ID() `x y`"), Some(Local::ConnectionId(n)) if n == "x y")
        );
        assert!(recognise(b"SELECT CONNECTION_ID(), 1").is_none());
        assert!(
            matches!(recognise(b"SELECT ROW_COUNT()"), Some(Local::RowCount(n)) if n == "ROW_COUNT()")
        );
        assert!(
            matches!(recognise(b"SELECT found_rows() AS n"), Some(Local::FoundRows(n)) if n == "n")
        );
        assert!(
            matches!(recognise(b"SELECT LAST_INSERT_ID()"), Some(Local::LastInsertId(n)) if n == "LAST_INSERT_ID()")
        );
        assert!(
            matches!(recognise(b"select @@identity"), Some(Local::LastInsertId(n)) if n == "@@identity")
        );
        assert!(
            matches!(recognise(b"SELECT @@session.last_insert_id id"), Some(Local::LastInsertId(n)) if n == "id")
        );
        assert!(recognise(b"SELECT @@global.identity").is_none());
        assert!(recognise(b"SELECT LAST_INSERT_ID() FROM t").is_none());
        assert!(recognise(b"SELECT 1").is_none());
    }
}
