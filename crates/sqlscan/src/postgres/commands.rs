//! Statements with their own grammar: `EXPLAIN`, `COPY`, transaction control, `SET`/`RESET`,
//! and the session statements (`DISCARD`, `DEALLOCATE`, `PREPARE`, `LISTEN`, `DECLARE` ...).

use super::classify::{inner_statement, Cursor, Stmt};
use super::lexer::{Kind, Token};
use super::walk::{rest_as_query, rest_of, subquery, unquote};
use super::{PgCommand, Pins, SetStmt, Unpins};
use crate::Route;

/// `EXPLAIN [ANALYZE] [VERBOSE] stmt` or `EXPLAIN (option [value], ...) stmt`. Without
/// `ANALYZE` nothing runs: a read, unless it needs the session's prepared statement
/// (`EXPLAIN EXECUTE`). With it the statement runs: its route and pins.
pub(super) fn explain(cur: &mut Cursor<'_>) -> Stmt {
    let src = cur.src;
    let mut analyze = false;
    if cur.peek_punct(b'(') {
        cur.next();
        let mut depth = 1u32;
        while let Some(t) = cur.next() {
            match t.kind {
                Kind::Punct(b'(') => depth += 1,
                Kind::Punct(b')') => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                Kind::Word
                    if depth == 1 && (t.is_word(src, "ANALYZE") || t.is_word(src, "ANALYSE")) =>
                {
                    analyze = !cur.peek().is_some_and(|v| is_false(src, &v));
                }
                _ => {}
            }
        }
    } else {
        loop {
            if cur.eat("ANALYZE") || cur.eat("ANALYSE") {
                analyze = true;
            } else if !cur.eat("VERBOSE") {
                break;
            }
        }
    }
    let Some(inner) = inner_statement(cur) else {
        return Stmt::new(PgCommand::Explain, Route::Write);
    };
    let mut st = Stmt::new(PgCommand::Explain, Route::Read);
    if analyze {
        st.route = inner.route;
        st.pins = inner.pins;
        st.unpins = inner.unpins;
    } else if matches!(inner.command, PgCommand::Execute | PgCommand::Other) {
        st.route = Route::Write;
    }
    st
}

/// A boolean option value that turns the option off: `false`, `off`, `0`, `'false'`, `'off'`.
fn is_false(src: &[u8], t: &Token) -> bool {
    let text = t.text(src);
    let v = match t.kind {
        Kind::Word | Kind::Number => text,
        Kind::Str if text.len() >= 2 && text[0] == b'\'' => &text[1..text.len() - 1],
        _ => return false,
    };
    v.eq_ignore_ascii_case(b"false") || v.eq_ignore_ascii_case(b"off") || v == b"0"
}

/// `COPY table ... FROM|TO ...` or `COPY (query) TO ...`. Only `TO STDOUT` of a table or of a
/// read-only query is a read; `TO 'file'` and `TO PROGRAM` act on the server's host, so they
/// stay with the primary.
pub(super) fn copy(cur: &mut Cursor<'_>) -> Stmt {
    let src = cur.src;
    let mut st = Stmt::new(
        PgCommand::Copy {
            from_stdin_or_file: false,
        },
        Route::Write,
    );
    let mut query_route = Route::Read;
    let mut t = cur.next();
    if let Some(open) = t.filter(|t| t.is_punct(b'(')) {
        let (route, pins, unpins) = subquery(cur, open);
        query_route = route;
        st.pins |= pins;
        st.unpins |= unpins;
        t = cur.next();
    }
    let mut depth = 0u32;
    while let Some(tok) = t {
        match tok.kind {
            Kind::Punct(b'(') => depth += 1,
            Kind::Punct(b')') => depth = depth.saturating_sub(1),
            Kind::Word if depth == 0 && tok.is_word(src, "FROM") => {
                st.command = PgCommand::Copy {
                    from_stdin_or_file: true,
                };
                break;
            }
            Kind::Word if depth == 0 && tok.is_word(src, "TO") => {
                if cur.eat("STDOUT") {
                    st.route = query_route;
                }
                break;
            }
            _ => {}
        }
        t = cur.next();
    }
    st
}

/// `BEGIN [WORK | TRANSACTION] [modes]`, `START TRANSACTION [modes]`: a read only for
/// `READ ONLY` without `SERIALIZABLE`.
pub(super) fn begin(cur: &mut Cursor<'_>, start: bool) -> Stmt {
    if start {
        if !cur.eat("TRANSACTION") {
            return rest_of(cur, Stmt::new(PgCommand::Other, Route::Write));
        }
    } else {
        let _ = cur.eat("WORK") || cur.eat("TRANSACTION");
    }
    let (read_only, serializable) = modes(cur);
    Stmt::new(
        PgCommand::Begin {
            read_only,
            serializable,
        },
        mode_route(read_only, serializable),
    )
}

fn mode_route(read_only: Option<bool>, serializable: bool) -> Route {
    if read_only == Some(true) && !serializable {
        Route::Read
    } else {
        Route::Write
    }
}

/// Transaction modes to the end of the statement: `ISOLATION LEVEL ...`, `READ ONLY`,
/// `READ WRITE`, `[NOT] DEFERRABLE`, with or without commas. Returns the access mode and
/// whether the isolation level is serializable.
fn modes(cur: &mut Cursor<'_>) -> (Option<bool>, bool) {
    let src = cur.src;
    let mut read_only = None;
    let mut serializable = false;
    while let Some(t) = cur.next() {
        if t.is_word(src, "ISOLATION") {
            cur.eat("LEVEL");
            if cur.eat("SERIALIZABLE") {
                serializable = true;
            } else if cur.eat("REPEATABLE") || cur.eat("READ") {
                // REPEATABLE READ, READ COMMITTED, READ UNCOMMITTED: not an access mode.
                cur.next();
            }
        } else if t.is_word(src, "READ") {
            if cur.eat("ONLY") {
                read_only = Some(true);
            } else if cur.eat("WRITE") {
                read_only = Some(false);
            }
        }
    }
    (read_only, serializable)
}

/// `SET [SESSION | LOCAL] ...`.
pub(super) fn set(cur: &mut Cursor<'_>) -> Stmt {
    let mut st = Stmt::new(PgCommand::Set, Route::Write);
    let mut local = false;
    if cur.eat("LOCAL") {
        local = true;
    } else if cur.peek_word("SESSION") {
        cur.next();
        if cur.peek_word("AUTHORIZATION") || cur.peek_word("CHARACTERISTICS") {
            return session_setting(cur, local, st);
        }
    }
    if cur.eat("SESSION") {
        return session_setting(cur, local, st);
    }
    if cur.eat("TRANSACTION") {
        // Also SET TRANSACTION SNAPSHOT 'id': no modes, a write.
        let (read_only, serializable) = modes(cur);
        return Stmt::new(
            PgCommand::SetTransaction {
                read_only,
                serializable,
            },
            mode_route(read_only, serializable),
        );
    }
    if cur.eat("CONSTRAINTS") {
        st.command = PgCommand::Other;
        return st;
    }
    let Some(h) = cur.next() else { return st };
    if let Some((name, reset)) = parameter(cur, h) {
        if name == "session_authorization" {
            return authorization(st, local, reset);
        }
        st.set = Some(SetStmt { local, name, reset });
    }
    st
}

/// `SET [LOCAL] SESSION AUTHORIZATION ...` or `SET SESSION CHARACTERISTICS AS TRANSACTION ...`,
/// after `SESSION`. With `LOCAL` the setting ends with the transaction: no pin.
fn session_setting(cur: &mut Cursor<'_>, local: bool, mut st: Stmt) -> Stmt {
    if cur.eat("AUTHORIZATION") {
        let reset = cur.peek_word("DEFAULT");
        return authorization(st, local, reset);
    }
    if cur.eat("CHARACTERISTICS") && !local {
        st.pins |= Pins::SESSION_CHARACTERISTICS;
    }
    st
}

fn authorization(mut st: Stmt, local: bool, reset: bool) -> Stmt {
    if reset {
        if !local {
            st.unpins |= Unpins::RESET_SESSION_AUTHORIZATION;
        }
    } else if !local {
        st.pins |= Pins::SESSION_AUTHORIZATION;
    }
    st
}

/// `RESET name`, `RESET ALL`, `RESET TIME ZONE`, `RESET SESSION AUTHORIZATION`,
/// `RESET TRANSACTION ISOLATION LEVEL`.
pub(super) fn reset(cur: &mut Cursor<'_>) -> Stmt {
    let mut st = Stmt::new(PgCommand::Reset, Route::Write);
    if cur.peek_word("SESSION") {
        cur.next();
        if cur.eat("AUTHORIZATION") {
            st.unpins |= Unpins::RESET_SESSION_AUTHORIZATION;
        }
        return st;
    }
    let name = if cur.eat("TRANSACTION") {
        Some("transaction_isolation".to_owned())
    } else {
        cur.next()
            .and_then(|h| parameter(cur, h))
            .map(|(name, _)| name)
    };
    match name {
        Some(n) if n == "session_authorization" => authorization(st, false, true),
        Some(name) => {
            st.set = Some(SetStmt {
                local: false,
                name,
                reset: true,
            });
            st
        }
        None => st,
    }
}

/// A parameter name starting at `h` and, for `SET`, whether the value is `DEFAULT`. Consumes
/// the `TO` or `=` after the name.
fn parameter(cur: &mut Cursor<'_>, h: Token) -> Option<(String, bool)> {
    let src = cur.src;
    let mut name = String::new();
    push_ident(&mut name, src, &h)?;
    let mut parts = 1;
    while cur.peek_punct(b'.') {
        cur.next();
        name.push('.');
        push_ident(&mut name, src, &cur.next()?)?;
        parts += 1;
    }
    let assign = cur.eat("TO") || (cur.peek_punct(b'=') && cur.next().is_some());
    if !assign && parts == 1 && h.kind == Kind::Word {
        let special = if h.is_word(src, "TIME") && cur.eat("ZONE") {
            Some("timezone")
        } else if h.is_word(src, "NAMES") {
            Some("client_encoding")
        } else if h.is_word(src, "SCHEMA") {
            Some("search_path")
        } else if h.is_word(src, "XML") && cur.eat("OPTION") {
            Some("xmloption")
        } else {
            None
        };
        if let Some(s) = special {
            s.clone_into(&mut name);
        }
    }
    let reset =
        cur.peek_word("DEFAULT") || (name == "timezone" && !assign && cur.peek_word("LOCAL"));
    Some((name, reset))
}

/// Appends an identifier as PostgreSQL names it: unquoted words fold to lower case, quoted
/// ones keep their case with `""` undoubled.
fn push_ident(out: &mut String, src: &[u8], t: &Token) -> Option<()> {
    let text = t.text(src);
    match t.kind {
        Kind::Word => out.push_str(&String::from_utf8_lossy(text).to_ascii_lowercase()),
        Kind::QuotedIdent => match unquote(text) {
            Some(inner) => out.push_str(&String::from_utf8_lossy(inner)),
            None => {
                let inner = text.strip_prefix(b"\"")?;
                let inner = inner.strip_suffix(b"\"").unwrap_or(inner);
                out.push_str(&String::from_utf8_lossy(inner).replace("\"\"", "\""));
            }
        },
        _ => return None,
    }
    Some(())
}

/// The session statements and everything not recognised (a write).
pub(super) fn session(cur: &mut Cursor<'_>, first: Token) -> Stmt {
    use PgCommand as C;
    let src = cur.src;
    let w = |kw: &str| first.is_word(src, kw);
    let mut st = Stmt::new(C::Other, Route::Write);
    if w("DISCARD") {
        let all = cur.eat("ALL");
        if all {
            st.unpins |= Unpins::DISCARD_ALL;
        } else if cur.eat("TEMP") || cur.eat("TEMPORARY") {
            st.unpins |= Unpins::DISCARD_TEMP;
        }
        st.command = C::Discard { all };
    } else if w("DEALLOCATE") {
        cur.eat("PREPARE");
        let all = cur.eat("ALL");
        if all {
            st.unpins |= Unpins::DEALLOCATE_ALL;
        }
        st.command = C::Deallocate { all };
    } else if w("PREPARE") {
        // PREPARE TRANSACTION 'gid' is two-phase commit; nothing of a prepared statement runs.
        let two_phase = cur.eat("TRANSACTION") && cur.peek().is_some_and(|t| t.kind == Kind::Str);
        if !two_phase {
            st.command = C::Prepare;
            st.pins |= Pins::PREPARE;
        }
        return st;
    } else if w("EXECUTE") {
        st.command = C::Execute;
    } else if w("LISTEN") {
        st.command = C::Listen;
        st.pins |= Pins::LISTEN;
    } else if w("UNLISTEN") {
        st.command = C::Unlisten;
        if cur.peek_punct(b'*') {
            st.unpins |= Unpins::UNLISTEN_ALL;
        }
    } else if w("NOTIFY") {
        st.command = C::Notify;
    } else if w("CALL") {
        st.command = C::Call;
    } else if w("DO") {
        st.command = C::Do;
    } else if w("DECLARE") {
        while let Some(t) = cur.next() {
            if t.is_word(src, "FOR") {
                return rest_as_query(cur, st);
            }
            if t.is_word(src, "WITH") && cur.peek_word("HOLD") {
                st.pins |= Pins::WITH_HOLD;
            }
        }
    } else if w("CLOSE") {
        if cur.eat("ALL") {
            st.unpins |= Unpins::CLOSE_ALL;
        }
    } else if w("LOAD") {
        st.pins |= Pins::LOAD;
    }
    rest_of(cur, st)
}
